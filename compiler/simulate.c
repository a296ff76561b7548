// The lock-step verifier of a Program's action lists (pipeline-semantics.md §7), after
// schedule_check's counts and orders, and its prediction of the step.
//
// Every step, each rank runs its next action if it can, judged on the state at the step's start
// (so the result does not depend on the order the ranks are visited): a RECV can run once its
// SEND ran on an earlier step and it is the next message of its pair of ranks (a FIFO per ordered
// pair: both sides must see the same message order, as NCCL needs; a receive waiting behind
// another message is blocked for good). If no rank can move before all are done, it is a
// deadlock: the error prints the grid with each rank's blocked action marked. The send-buffer
// rule: the F or B that makes channel c's tensor for microbatch m + K (K of c's from_v) waits
// until send (c, m) can have completed, because the generated code waits there for it before it
// overwrites the slot's buffer (the WAIT_SEND(c, m) before it: lower_comm.c): until the receiver
// has posted the receive (its POST_RECV(c, m) ran on an earlier step; a RECV without one posts
// when it runs), or for a copy between two stages of one rank until its RECV has run
// (send_done). The marks take no step of their own: a POST_RECV runs as soon as its rank
// reaches it (with the action before it, or before the first step), a WAIT_SEND with the action
// after it, which it holds until its send can have completed. A schedule in which that wait never
// ends is a deadlock like any other, reported with the rule. Along the way microbatch m takes
// slot m mod K of a stage at the first of its forward RECVs into the stage, its LOAD and its F;
// the slot must be free (the last microbatch in it released by its B, or W when split), and the
// peak in flight per stage is counted. The prediction times the
// same lists with per-stage costs (each rank's clock; a RECV waits for its SEND's time plus the
// transfer; an action the send-wait rule holds waits for those sends to complete, no earlier
// than their SEND plus the transfer and their receive's post, send_complete; SEND, RECV, LOAD,
// LOSS and the step end cost 0): the bubble is 1 - busy / (S * span). Steps are at most the
// number of actions (one moves per step or it is a deadlock): O(steps * S).
#include <stdlib.h>
#include <string.h>

#include "costs.h"
#include "partition.h"
#include "pipeline.h"
#include "schedule.h"
#include "simulate.h"
#include "uneven.h"

static void cell(const Program *p, const Action *x, char *buf, size_t cap) {
  const VStage *s = x->v >= 0 && x->v < p->nv ? &p->vs[x->v] : NULL;
  int nvs = s ? p->ranks[s->rank].nvs : 1;
  switch (x->kind) {
  case ACT_F:
  case ACT_B:
  case ACT_W:
    if (nvs > 1)
      snprintf(buf, cap, "%s%d.%d", action_name(x->kind), x->m, stage_chunk(p, x->v));
    else
      snprintf(buf, cap, "%s%d", action_name(x->kind), x->m);
    break;
  case ACT_SEND:
  case ACT_RECV:
  case ACT_COPY:
    snprintf(buf, cap, "%c%c",
             x->kind == ACT_SEND   ? 's'
             : x->kind == ACT_RECV ? 'r'
                                   : 'c',
             x->ch && x->ch->grad ? '<' : '>');
    break;
  case ACT_LOAD:
    snprintf(buf, cap, "ld");
    break;
  case ACT_LOSS:
    snprintf(buf, cap, "ls");
    break;
  default: // TIED_SUM, NORM, OPT
    snprintf(buf, cap, "%c", action_name(x->kind)[0]);
  }
}

void schedule_grid(const Program *p, int steps, int *const *at, const int *blocked, FILE *out) {
  int wid = 2; // column width: the widest cell
  char c[32];
  for (int r = 0; r < p->nranks; r++)
    for (int i = 0; i < p->ranks[r].nacts; i++) {
      if (action_mark(p->ranks[r].acts[i].kind) || action_step_msg(p->ranks[r].acts[i].kind))
        continue; // no step of its own
      cell(p, &p->ranks[r].acts[i], c, sizeof c);
      int n = (int)strlen(c);
      if (n > wid) wid = n;
    }
  for (int r = 0; r < p->nranks; r++) {
    const RankProgram *rp = &p->ranks[r];
    fprintf(out, "  rank %d:", r);
    int i = 0, pad = 0; // pad: blanks owed by the previous cell, printed before the next one
    for (int t = 0; t < steps; t++) {
      while (i < rp->nacts && (action_mark(rp->acts[i].kind) || action_step_msg(rp->acts[i].kind) ||
                               (at[r][i] >= 0 && at[r][i] < t)))
        i++;
      if (i < rp->nacts && at[r][i] == t)
        cell(p, &rp->acts[i], c, sizeof c);
      else
        snprintf(c, sizeof c, ".");
      fprintf(out, "%*s %s", pad, "", c);
      pad = wid - (int)strlen(c);
    }
    if (blocked && blocked[r] >= 0 && blocked[r] < rp->nacts) {
      cell(p, &rp->acts[blocked[r]], c, sizeof c);
      fprintf(out, "%*s %s*", pad, "", c);
    }
    fprintf(out, "\n"); // no trailing blanks
  }
}

// Where each message's receive stands: posted (post_step[id], id = c * M + m: the step its
// POST_RECV ran, -1 at the list's start, NOSTEP not yet) at post_time[id] (the end of the action
// before its POST_RECV on the receiver, 0 at the list's start). A RECV with no POST_RECV before it
// posts its own receive when it runs.
enum { NOSTEP = 1 << 30 };

// Whether channel c joins two stages of one rank (a copy at its RECV, no message).
static bool local_ch(const Program *p, int c) {
  return p->vs[p->ch[c].from_v].rank == p->vs[p->ch[c].to_v].rank;
}

// Whether send (c, m) has surely completed by step t, so that what waits for it may run: a
// channel between two stages of one rank is a copy at its RECV, which must have run; a message
// to another rank completes once the receiver has posted its receive (its POST_RECV ran on an
// earlier step).
static bool send_done(const Program *p, int c, int m, int t, const int *recv_at,
                      const int *post_step) {
  int id = c * p->M + m;
  if (local_ch(p, c)) return recv_at[id] >= 0 && recv_at[id] < t;
  return post_step[id] < t;
}

// The slots of stage v on the rank that runs it (a world program's replica: stage_nslots), the
// replicas of its rank (1 outside a world program), microbatch m's slot among them, and how many
// microbatches later the replica's next microbatch in m's slot comes (K; a replica of D runs
// every D-th: lcm(D, K)).
static int nslots(const Program *p, int v) {
  return p->pipe ? stage_nslots(p, v) : stage_slots(&p->vs[v]);
}

static int nreps(const Program *p, int v) {
  return p->pipe ? uneven_reps(p->pipe, p->vs[v].rank) : 1;
}

static int slot_of(const Program *p, int v, int m) {
  int k = p->pipe ? stage_slot(p, v, m) : m % stage_slots(&p->vs[v]);
  return m % nreps(p, v) * nslots(p, v) + k;
}

static int slot_span(const Program *p, int v) {
  int K = stage_slots(&p->vs[v]), D = nreps(p, v), l = K;
  while (l % D) l += K;
  return l;
}

static double cost_of(const Program *p, const StageCost *cost, const Action *x) {
  if (x->kind != ACT_F && x->kind != ACT_B && x->kind != ACT_W) return 0;
  bool split = p->vs[x->v].split;
  StageCost c = cost ? cost[x->v] : (StageCost){1, split ? 1 : 2, split ? 1 : 0};
  return x->kind == ACT_F ? c.f : x->kind == ACT_B ? c.b : c.w;
}

// The index of the message (c * M + m) of mark x.
static int mark_id(const Program *p, const Action *x) {
  return x->ch->id * p->M + x->m;
}

// The first non-mark action of rank r's list from i (nacts: none).
static int unit_action(const RankProgram *rp, int i) {
  while (i < rp->nacts && (action_mark(rp->acts[i].kind) || action_step_msg(rp->acts[i].kind))) i++;
  return i;
}

// The first WAIT_SEND among rank r's marks i .. j - 1 whose send cannot have completed by step t
// (-1: none): what the action at j waits for in the lock-step run.
static int pending_send(const Program *p, const RankProgram *rp, int i, int j, int t,
                        const int *recv_at, const int *post_step) {
  for (; i < j; i++) {
    const Action *x = &rp->acts[i];
    if (x->kind == ACT_WAIT_SEND && !send_done(p, x->ch->id, x->m, t, recv_at, post_step)) return i;
  }
  return -1;
}

// The predicted time message id (c * M + m, a channel between two ranks) completes, what the
// action after its WAIT_SEND starts no earlier than: its SEND's time sent plus the transfer
// (xfer, NULL: 0), and no earlier than the receiver's post of its receive (post_time): over Open
// MPI's shared memory a message above the eager limit completes only then.
static double send_complete(const Program *p, const double *xfer, int id, double sent,
                            const double *post_time) {
  double done = sent + (xfer ? xfer[p->ch[id / p->M].id] : 0);
  return post_time[id] > done ? post_time[id] : done;
}

// Runs the POST_RECVs at rank r's pc (*pc moves past them) at step t and time now.
static void run_posts(const Program *p, const RankProgram *rp, int *pc, int t, double now,
                      int *post_step, double *post_time, int *at) {
  for (; *pc < rp->nacts && rp->acts[*pc].kind == ACT_POST_RECV; (*pc)++) {
    int id = mark_id(p, &rp->acts[*pc]);
    post_step[id] = t, post_time[id] = now;
    if (at) at[*pc] = t < 0 ? 0 : t;
  }
}

// The simulation; grid (may be NULL) receives the grid of a run that completes. xfer (NULL: 0)
// delays each channel's message by its seconds; opt (NULL: 0) is each rank's optimizer seconds
// after the step end's synchronisation (NORM: every rank's last action done).
static bool simulate(const Program *p, const StageCost *cost, const double *xfer, const double *opt,
                     SchedStats *st, Arena *a, FILE *grid, Diag *d) {
  if (!schedule_check(p->pipe ? p->pipe : p, d)) return false; // a world program: its pipeline's
  Arena scratch;
  arena_init(&scratch);
  int S = p->nranks, M = p->M, total = 0;
  int *pc = ARENA_ARRAY(&scratch, int, S);                             // next action per rank
  int **at = ARENA_ARRAY(&scratch, int *, S);                          // step each action ran
  double *clock = ARENA_ARRAY(&scratch, double, S);                    // each rank's predicted time
  double *sent = ARENA_ARRAY(&scratch, double, (size_t)p->nch *M + 1); // SEND's time
  int *sent_at = ARENA_ARRAY(&scratch, int, (size_t)p->nch *M + 1);    // SEND's step (-1)
  // Per ordered pair (src, dst): messages sent and received so far, and the queue of sends.
  int *nsent = ARENA_ARRAY(&scratch, int, (size_t)S *S);
  int *nrecv = ARENA_ARRAY(&scratch, int, (size_t)S *S);
  const Action ***queue = ARENA_ARRAY(&scratch, const Action **, (size_t)S *S);
  for (int r = 0; r < S; r++) {
    total += p->ranks[r].nacts;
    at[r] = ARENA_ARRAY(&scratch, int, p->ranks[r].nacts + 1);
    for (int i = 0; i < p->ranks[r].nacts; i++) at[r][i] = -1;
  }
  int *recv_at = ARENA_ARRAY(&scratch, int, (size_t)p->nch *M + 1); // RECV's step (-1)
  for (int i = 0; i < p->nch * M; i++) sent_at[i] = recv_at[i] = -1;
  // Per (stage, F or B): the channels its action makes (the send-buffer rule), counting sort.
  int *mk = ARENA_ARRAY(&scratch, int, 2 * (size_t)p->nv + 2);
  int *mch = ARENA_ARRAY(&scratch, int, p->nch + 1), *fill = ARENA_ARRAY(&scratch, int, 2 * p->nv);
  // Only channels within a rank: a message's wait is its WAIT_SEND's.
  for (int c = 0; c < p->nch; c++)
    if (local_ch(p, c)) mk[2 * p->ch[c].from_v + p->ch[c].grad + 1]++;
  for (int k = 0; k < 2 * p->nv; k++) mk[k + 1] += mk[k];
  for (int c = 0; c < p->nch; c++) {
    int k = 2 * p->ch[c].from_v + p->ch[c].grad;
    if (local_ch(p, c)) mch[mk[k] + fill[k]++] = c;
  }
  // Messages: where each receive stands (NOSTEP: not posted) and when it was posted.
  int *post_step = ARENA_ARRAY(&scratch, int, (size_t)p->nch *M + 1);
  double *post_time = ARENA_ARRAY(&scratch, double, (size_t)p->nch *M + 1);
  for (int i = 0; i < p->nch * M; i++) post_step[i] = NOSTEP;
  // Each pair's queue sized by its sends (S * S pointers, not S * S * actions).
  for (int r = 0; r < S; r++)
    for (int i = 0; i < p->ranks[r].nacts; i++) {
      const Action *x = &p->ranks[r].acts[i];
      if (x->kind == ACT_SEND) nrecv[r * S + action_rank(p, x->ch->to_v, x->m)]++;
    }
  for (int i = 0; i < S * S; i++) {
    queue[i] = ARENA_ARRAY(&scratch, const Action *, nrecv[i] + 1);
    nrecv[i] = 0;
  }
  // Slots: per stage K entries, the microbatch holding it (-1 free); live per stage.
  int **slot = ARENA_ARRAY(&scratch, int *, p->nv);
  int *live = ARENA_ARRAY(&scratch, int, p->nv);
  int *peak = st && a ? ARENA_ARRAY(a, int, p->nv) : ARENA_ARRAY(&scratch, int, p->nv);
  for (int v = 0; v < p->nv; v++) {
    int K = nslots(p, v) * nreps(p, v); // per replica of a world program
    slot[v] = ARENA_ARRAY(&scratch, int, K);
    for (int k = 0; k < K; k++) slot[v][k] = -1;
  }
  bool *held = ARENA_ARRAY(&scratch, bool, (size_t)p->nv *M + 1); // per (v, m): slot taken
  // Per rank per action: predicted start and end (st->t0, t1; from arena a when st wants them).
  double **t0 = ARENA_ARRAY(st && a ? a : &scratch, double *, S);
  double **t1 = ARENA_ARRAY(st && a ? a : &scratch, double *, S);
  for (int r = 0; r < S; r++) {
    t0[r] = ARENA_ARRAY(st && a ? a : &scratch, double, p->ranks[r].nacts + 1);
    t1[r] = ARENA_ARRAY(st && a ? a : &scratch, double, p->ranks[r].nacts + 1);
  }
  double busy = 0;
  bool ok = true;
  int done = 0, t = 0;
  int *moved = ARENA_ARRAY(&scratch, int, S);
  for (int r = 0; r < S; r++) { // the receives posted at step start
    int pc0 = pc[r];
    run_posts(p, &p->ranks[r], &pc[r], -1, 0, post_step, post_time, at[r]);
    for (int i = pc0; i < pc[r]; i++) t0[r][i] = t1[r][i] = 0;
    done += pc[r] - pc0;
  }
  while (ok && done < total) {
    int nmoved = 0;
    for (int r = 0; r < S; r++) {
      moved[r] = -1;
      const RankProgram *rp = &p->ranks[r];
      int j = unit_action(rp, pc[r]); // the action, after its WAIT_SENDs
      if (j >= rp->nacts) continue;
      const Action *x = &rp->acts[j];
      if (x->kind == ACT_RECV) {
        int src = action_rank(p, x->ch->from_v, x->m), q = src * S + r, id = x->ch->id * M + x->m;
        if (sent_at[id] < 0 || sent_at[id] >= t) continue; // its SEND has not run yet
        if (queue[q][nrecv[q]] != NULL &&
            (queue[q][nrecv[q]]->ch != x->ch || queue[q][nrecv[q]]->m != x->m))
          continue; // another message is ahead of it on the pair
      }
      if (x->kind == ACT_F || x->kind == ACT_B) {
        int K = slot_span(p, x->v), k = 2 * x->v + (x->kind == ACT_B), q;
        for (q = mk[k]; q < mk[k + 1] && x->m >= K; q++)
          if (!send_done(p, mch[q], x->m - K, t, recv_at, post_step)) break; // in flight
        if (x->m >= K && q < mk[k + 1]) continue;
      }
      if (pending_send(p, rp, pc[r], j, t, recv_at, post_step) >= 0)
        continue; // a send it waits for may be in flight
      moved[r] = j;
      nmoved++;
    }
    if (nmoved == 0) break;
    for (int r = 0; r < S && ok; r++) {
      if (moved[r] < 0) continue;
      const RankProgram *rp = &p->ranks[r];
      const Action *x = &rp->acts[moved[r]];
      double c = cost_of(p, cost, x);
      if (x->kind == ACT_SEND) {
        int dst = action_rank(p, x->ch->to_v, x->m), q = r * S + dst, id = x->ch->id * M + x->m;
        queue[q][nsent[q]++] = x;
        sent_at[id] = t;
        sent[id] = clock[r];
      } else if (x->kind == ACT_COPY) {
        recv_at[x->ch->id * M + x->m] = t;
      } else if (x->kind == ACT_RECV) {
        int src = action_rank(p, x->ch->from_v, x->m), id = x->ch->id * M + x->m;
        nrecv[src * S + r]++;
        recv_at[id] = t;
        if (post_step[id] == NOSTEP) post_step[id] = t, post_time[id] = clock[r]; // its own post
        double arrive = sent[id] + (xfer ? xfer[x->ch->id] : 0);
        if (arrive > clock[r]) clock[r] = arrive;
      }
      // The send-wait rule: the action starts once the sends its WAIT_SENDs wait for completed
      // (their posts ran on earlier steps: the lock-step run let it move).
      for (int i = pc[r]; i < moved[r]; i++) {
        const Action *w = &rp->acts[i];
        if (w->kind == ACT_WAIT_SEND) {
          int id = mark_id(p, w);
          double sc = send_complete(p, xfer, id, sent[id], post_time);
          if (sc > clock[r]) clock[r] = sc;
        } else if (w->kind == ACT_POST_RECV) { // posted now (the step end's messages: untimed)
          post_step[mark_id(p, w)] = t, post_time[mark_id(p, w)] = clock[r];
        }
      }
      for (int i = pc[r]; i < moved[r]; i++) at[r][i] = t, t0[r][i] = t1[r][i] = clock[r];
      done += moved[r] - pc[r];
      // The slot of (v, m) is taken by the first of its forward RECVs into v, its LOAD and its F
      // (sched_build's K counts the same way) and released by B, or W when split.
      bool in = x->kind == ACT_RECV || x->kind == ACT_COPY;
      int hv = in && !x->ch->grad                        ? x->ch->to_v
               : x->kind == ACT_LOAD || x->kind == ACT_F ? x->v
                                                         : -1;
      if (hv >= 0 && !held[(size_t)hv * M + x->m]) {
        held[(size_t)hv * M + x->m] = true;
        int K = nslots(p, hv), *s = &slot[hv][slot_of(p, hv, x->m)];
        if (*s >= 0) {
          char t1[64], why[256];
          action_text(x, t1, sizeof t1);
          snprintf(why, sizeof why,
                   "schedule: rank %d action %d %s: reuses slot %d of stage v%d (K = %d) while "
                   "m%d is live (until its %s)",
                   r, moved[r], t1, slot_of(p, hv, x->m) % K, hv, K, *s,
                   action_name(stage_release(&p->vs[hv])));
          diag_error(d, (Loc){0, 0}, "%s", why);
          ok = false;
          break;
        }
        *s = x->m;
        if (++live[hv] > peak[hv]) peak[hv] = live[hv];
      }
      if (x->v >= 0 && x->kind == stage_release(&p->vs[x->v])) {
        slot[x->v][slot_of(p, x->v, x->m)] = -1;
        live[x->v]--;
      }
      t0[r][moved[r]] = clock[r];
      clock[r] += c;
      t1[r][moved[r]] = clock[r];
      busy += c;
      at[r][moved[r]] = t;
      pc[r] = moved[r] + 1;
      done++;
      int pc0 = pc[r]; // the receives it posts right after it
      run_posts(p, rp, &pc[r], t, clock[r], post_step, post_time, at[r]);
      for (int i = pc0; i < pc[r]; i++) t0[r][i] = t1[r][i] = clock[r];
      done += pc[r] - pc0;
    }
    t++;
  }
  if (ok && done < total) {
    // Deadlock: the grid, then each blocked RECV and what it waits for.
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fprintf(f,
            "schedule: deadlock after %d steps (no rank can move); the grid, blocked "
            "actions marked '*':\n",
            t);
    int *blocked = ARENA_ARRAY(&scratch, int, S); // each rank's action (after its marks)
    for (int r = 0; r < S; r++) blocked[r] = unit_action(&p->ranks[r], pc[r]);
    schedule_grid(p, t, at, blocked, f);
    for (int r = 0; r < S; r++) {
      const RankProgram *rp = &p->ranks[r];
      int j = blocked[r];
      if (j >= rp->nacts) continue;
      const Action *x = &rp->acts[j];
      char t1[64], t2[64];
      action_text(x, t1, sizeof t1);
      if (x->kind != ACT_RECV) { // held by the send-wait rule (a message) or a local copy
        int wi = pending_send(p, rp, pc[r], j, t, recv_at, post_step);
        if (wi >= 0) { // a message
          int id = mark_id(p, &rp->acts[wi]);
          const Channel *c = &p->ch[id / M];
          bool next = x->v == c->from_v && x->m == id % M; // its microbatch's next action
          int K = stage_slots(&p->vs[c->from_v]);
          if (next)
            fprintf(f,
                    "  rank %d action %d %s: waits for send (c%d, m%d) to complete, whose "
                    "receive rank %d has not posted (send-wait rule: the program waits for a "
                    "send before its stage's next action of that microbatch)\n",
                    r, j, t1, c->id, id % M, action_rank(p, c->to_v, id % M));
          else
            fprintf(f,
                    "  rank %d action %d %s: waits for send (c%d, m%d) to complete, whose "
                    "receive rank %d has not posted (send-buffer rule: it reuses that send's "
                    "slot, K = %d)\n",
                    r, j, t1, c->id, id % M, action_rank(p, c->to_v, id % M), K);
          continue;
        }
        int K = slot_span(p, x->v), k = 2 * x->v + (x->kind == ACT_B), c = -1;
        for (int q = mk[k]; q < mk[k + 1] && c < 0; q++)
          if (!send_done(p, mch[q], x->m - K, t, recv_at, post_step)) c = mch[q];
        if (c < 0) c = mch[mk[k]]; // not reached: the rule is its only wait
        fprintf(f,
                "  rank %d action %d %s: waits for send (c%d, m%d) to complete, whose receive "
                "rank %d has not posted (send-buffer rule: it reuses that send's slot, K = %d)\n",
                r, j, t1, c, x->m - K, action_rank(p, p->ch[c].to_v, x->m - K), K);
        continue;
      }
      int src = action_rank(p, x->ch->from_v, x->m), q = src * S + r, id = x->ch->id * M + x->m;
      if (sent_at[id] < 0)
        fprintf(f, "  rank %d action %d %s: waits for its SEND on rank %d, which has not run", r, j,
                t1, src);
      else {
        action_text(queue[q][nrecv[q]], t2, sizeof t2);
        fprintf(f,
                "  rank %d action %d %s: rank %d sent %s first (the two sides' message orders "
                "differ)",
                r, j, t1, src, t2);
      }
      fputc('\n', f);
    }
    fclose(f);
    size_t n = strlen(text);
    if (n && text[n - 1] == '\n') text[n - 1] = 0;
    diag_error(d, (Loc){0, 0}, "%s", text);
    free(text);
    ok = false;
  }
  if (ok && opt) { // the step end: every rank's clock at the slowest one's, then its OPT
    double sync = 0;
    for (int r = 0; r < S; r++)
      if (clock[r] > sync) sync = clock[r];
    for (int r = 0; r < S; r++) {
      int i = p->ranks[r].nacts - 1; // OPT (schedule_check: NORM, OPT end every list)
      t0[r][i] = sync, t1[r][i] = clock[r] = sync + opt[r];
      busy += opt[r];
    }
  }
  if (ok && st) {
    double span = 0;
    for (int r = 0; r < S; r++)
      if (clock[r] > span) span = clock[r];
    *st = (SchedStats){.bubble = span > 0 ? 1 - busy / (S * span) : 0,
                       .span = span,
                       .peak = a ? peak : NULL,
                       .steps = t,
                       .t0 = a ? t0 : NULL,
                       .t1 = a ? t1 : NULL};
  }
  if (ok && grid) schedule_grid(p, t, at, NULL, grid);
  arena_free(&scratch);
  return ok;
}

bool schedule_verify(const Program *p, const StageCost *cost, SchedStats *st, Arena *a, Diag *d) {
  return simulate(p, cost, NULL, NULL, st, a, NULL, d);
}

bool schedule_verify_xfer(const Program *p, const StageCost *cost, const double *xfer,
                          SchedStats *st, Arena *a, Diag *d) {
  return simulate(p, cost, xfer, NULL, st, a, NULL, d);
}

bool schedule_print_grid(const Program *p, FILE *out, Diag *d) {
  return simulate(p, NULL, NULL, NULL, NULL, NULL, out, d);
}

// The completed simulation's times again, on a machine where at most `slots` ranks compute at
// once (their cores shared: `slots` = cores / threads per rank): each rank's actions in order,
// each F, B, W and OPT taking the core that frees first and starting no earlier than its rank's
// previous action, for a RECV its SEND plus the transfer, and for an action the send-wait rule
// holds the completion of the sends it waits for (send_complete: their receives posted in this
// replay); ranks compete for the cores in the order of the unlimited run's start times (the rank
// that would have started first goes first: a FIFO scheduler's choice). The step end's sync
// waits for every rank as before. With pin (ranks bound to CPUs: pin[r] is rank r's core,
// 0 .. slots - 1) a rank's action takes its own core, whenever that core frees, whatever the
// others do. Rewrites st's t0 / t1 and span (bubble over the ranks as before).
// O(actions * (S + slots) + nch * M).
static void limit_ranks(const Program *p, const StageCost *cost, const double *xfer,
                        const double *opt, const double *stolen, int slots, const int *pin,
                        SchedStats *st) {
  int S = p->nranks, M = p->M;
  Arena a;
  arena_init(&a);
  // stolen[r]: the seconds per step rank r's core lost inside its actions (partners polling for
  // messages), spread over its compute actions in proportion to their cost (grow[r]).
  double *grow = ARENA_ARRAY(&a, double, S);
  for (int r = 0; r < S; r++) {
    double sum = 0;
    for (int i = 0; i < p->ranks[r].nacts; i++) sum += cost_of(p, cost, &p->ranks[r].acts[i]);
    grow[r] = stolen && sum > 0 ? 1 + stolen[r] / sum : 1;
  }
  double *clk = ARENA_ARRAY(&a, double, S), *core = ARENA_ARRAY(&a, double, slots);
  double *sent = ARENA_ARRAY(&a, double, (size_t)p->nch *M + 1);
  bool *sent_done = ARENA_ARRAY(&a, bool, (size_t)p->nch *M + 1);
  int *pc = ARENA_ARRAY(&a, int, S);
  // Per message: its receive posted in the replay (post_step < NOSTEP) and when.
  int *post_step = ARENA_ARRAY(&a, int, (size_t)p->nch *M + 1);
  double *post_time = ARENA_ARRAY(&a, double, (size_t)p->nch *M + 1);
  for (int i = 0; i < p->nch * M; i++) post_step[i] = NOSTEP;
  for (int r = 0; r < S; r++) { // the receives posted at step start
    int pc0 = pc[r];
    run_posts(p, &p->ranks[r], &pc[r], -1, 0, post_step, post_time, NULL);
    for (int i = pc0; i < pc[r]; i++) st->t0[r][i] = st->t1[r][i] = 0;
  }
  double busy = 0;
  for (;;) {
    int best = -1, bj = -1;
    bool all_at_opt = true; // the step end's sync: every rank at its OPT (or done)
    for (int r = 0; r < S; r++) {
      int j = unit_action(&p->ranks[r], pc[r]);
      if (j < p->ranks[r].nacts && p->ranks[r].acts[j].kind != ACT_OPT) all_at_opt = false;
    }
    for (int r = 0; r < S; r++) {
      const RankProgram *rp = &p->ranks[r];
      int j = unit_action(rp, pc[r]);
      if (j >= rp->nacts) continue;
      const Action *x = &rp->acts[j];
      if (x->kind == ACT_OPT && !all_at_opt) continue;
      if (x->kind == ACT_RECV && !sent_done[x->ch->id * M + x->m]) continue;
      bool posted = true; // every send it waits for has its receive posted in the replay
      for (int i = pc[r]; i < j && posted; i++)
        if (rp->acts[i].kind == ACT_WAIT_SEND)
          posted = post_step[mark_id(p, &rp->acts[i])] < NOSTEP;
      if (!posted) continue;
      if (best < 0 || st->t0[r][j] < st->t0[best][bj]) best = r, bj = j;
    }
    if (best < 0) break;
    int r = best, i = bj;
    const RankProgram *rp = &p->ranks[r];
    const Action *x = &rp->acts[i];
    double ready = clk[r],
           c = x->kind == ACT_OPT ? (opt ? opt[r] : 0) : cost_of(p, cost, x) * grow[r];
    if (x->kind == ACT_RECV) {
      double arrive = sent[x->ch->id * M + x->m] + (xfer ? xfer[x->ch->id] : 0);
      if (arrive > ready) ready = arrive;
    }
    for (int k = pc[r]; k < i; k++) {
      const Action *w = &rp->acts[k];
      if (action_step_msg(w->kind)) continue; // the step end's messages: untimed
      int id = mark_id(p, w);
      if (w->kind == ACT_WAIT_SEND) {
        double done = send_complete(p, xfer, id, sent[id], post_time);
        if (done > ready) ready = done;
      } else { // a POST_RECV between them
        post_step[id] = 0, post_time[id] = clk[r];
      }
    }
    if (x->kind == ACT_OPT)
      for (int q = 0; q < S; q++)
        if (clk[q] > ready) ready = clk[q];
    double start = ready;
    if (c > 0) {
      int k = core_for(core, slots, pin, r);
      if (core[k] > start) start = core[k];
      core[k] = start + c;
      busy += c;
    }
    if (x->kind == ACT_SEND)
      sent[x->ch->id * M + x->m] = start, sent_done[x->ch->id * M + x->m] = true;
    for (int k = pc[r]; k < i; k++) st->t0[r][k] = start, st->t1[r][k] = 0;
    st->t0[r][i] = start;
    st->t1[r][i] = c > 0 ? start + c : 0;
    clk[r] = start + c;
    if (x->kind == ACT_RECV && post_step[x->ch->id * M + x->m] == NOSTEP) // its own post
      post_step[x->ch->id * M + x->m] = 0, post_time[x->ch->id * M + x->m] = start;
    pc[r] = i + 1; // the receives it posts right after it, at its end at the unlimited cost
    int pc0 = pc[r];
    run_posts(p, rp, &pc[r], 0, start + cost_of(p, cost, x), post_step, post_time, NULL);
    for (int k = pc0; k < pc[r]; k++) st->t0[r][k] = start + cost_of(p, cost, x), st->t1[r][k] = 0;
  }
  double span = 0;
  for (int r = 0; r < S; r++)
    if (clk[r] > span) span = clk[r];
  st->span = span;
  st->bubble = span > 0 ? 1 - busy / (S * span) : 0;
  arena_free(&a);
}

// With a costs file (p->costs): its stage costs, transfers and optimizer seconds; on the
// profiled machine's cores when fewer ranks than the pipeline's can compute at once there.
static bool predict_measured(const Program *p, SchedStats *st, Arena *a, double *opt_max, Diag *d) {
  StageCost *cost = ARENA_ARRAY(a, StageCost, p->nv);
  double *xfer = ARENA_ARRAY(a, double, p->nch + 1), *opt = ARENA_ARRAY(a, double, p->nranks);
  costs_stage_costs(p->costs, p, cost, xfer, opt);
  *opt_max = 0;
  for (int r = 0; r < p->nranks; r++)
    if (opt[r] > *opt_max) *opt_max = opt[r];
  if (!simulate(p, cost, xfer, opt, st, a, NULL, d)) return false;
  int *pin = ARENA_ARRAY(a, int, p->nranks + 1);
  int slots = costs_rank_cores(p->costs, p->nranks, pin);
  const Costs *c = p->costs;
  const double *stolen = c->stolen && c->nstolen == p->nranks ? c->stolen : NULL;
  if (slots > 0 && st->t0)
    limit_ranks(p, cost, xfer, opt, stolen, slots, pin[0] >= 0 ? pin : NULL, st);
  return true;
}

bool schedule_predict(const Program *p, SchedStats *st, Arena *a, Diag *d) {
  double om;
  if (p->costs) return predict_measured(p, st, a, &om, d);
  StageCost *cost = ARENA_ARRAY(a, StageCost, p->nv);
  partition_stage_costs(p, cost, NULL);
  return simulate(p, cost, NULL, NULL, st, a, NULL, d);
}

bool schedule_print_prediction(const Program *p, FILE *out, Diag *d) {
  Arena a;
  arena_init(&a);
  SchedStats st;
  if (p->costs) {
    double om;
    bool ok = predict_measured(p, &st, &a, &om, d);
    if (ok)
      fprintf(out,
              "predicted step time %.3f ms, bubble %.1f%% (measured costs from %s: links %.1f us "
              "+ bytes at %.3g GB/s, step end %.3f ms)\n",
              st.span * 1e3, st.bubble * 100, p->costs->path, p->costs->latency * 1e6,
              p->costs->bandwidth / 1e9, om * 1e3);
    arena_free(&a);
    return ok;
  }
  StageCost *cost = ARENA_ARRAY(&a, StageCost, p->nv);
  double *fl = ARENA_ARRAY(&a, double, p->nv);
  partition_stage_costs(p, cost, fl);
  bool ok = simulate(p, cost, NULL, NULL, &st, &a, NULL, d);
  if (ok) {
    double flops = 0, bytes = 0;
    for (int v = 0; v < p->nv; v++) flops += fl[v] * p->M;
    for (int i = 0; i < p->nch; i++) bytes += (double)p->ch[i].bytes * p->M;
    char at[64];
    if (p->rank_bw)
      snprintf(at, sizeof at, "the --topology links");
    else
      snprintf(at, sizeof at, "%g GB/s", p->part_bandwidth / 1e9);
    fprintf(out,
            "predicted step time %.3f ms, bubble %.1f%% (stage costs: %.4g GFLOP per step at %g "
            "GFLOP/s, %.4g MB through channels at %s)\n",
            st.span * 1e3, st.bubble * 100, flops / 1e9, p->part_rate / 1e9, bytes / 1e6, at);
  }
  arena_free(&a);
  return ok;
}

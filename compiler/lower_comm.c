// lower_comm.c: the lowering pass that makes the timing of each message an action of the list
// (pipeline.h's POST_RECV and WAIT_SEND), so that the readers of a rank's list (the lock-step
// simulator, memplan, plan_check, the printer of train_step) read where a receive is posted and
// where a send is waited for, and none of them derives it again.
//
// Design. sched_lower is a chain of list-to-list passes over each rank's actions, in the manner
// of torch's schedules.py (_add_send_recv, _merge_bw, _add_reduce_grad):
//   compute order (sched_order / a CSV: F, B, W)
//     -> split or fuse B and W per stage (sched_lower: the W actions of a fused stage dropped)
//     -> add_send_recv: SEND / RECV of every channel (schedules.c's lower)
//     -> add_load_loss: LOAD before, LOSS after each F of a stage that has them
//     -> add_step_end: TIED_SUM per stage, NORM, OPT (then each stage's K from the lists)
//     -> lower_comm (this file): COPY for a channel within a rank, POST_RECV / WAIT_SEND of
//        every message
// Each pass reads the list the one before wrote and writes a longer one; the rules of a pass live
// in that pass alone; sched_lower_dump prints the lists after each (tests/golden/lower_*.passes).
// This pass's rules (a copy: the SEND / RECV pair of a channel within a rank is one COPY at the
// RECV's place):
// - Posting: the receive of message (c, m) lands in slot m mod K of c's to_v, which is free once
//   microbatch m - K is done with it: its POST_RECV goes right after the last action of
//   (to_v, m - K) on the rank (schedule_last_actions: its last LOAD/F/LOSS/B/W, or a copy out of
//   its slot that follows them), or at the list's start for m < K.
// - The send-wait rule: nothing may overwrite the sent bytes of SEND(c, m) while the message may
//   be in flight: its WAIT_SEND goes before the first action of (from_v, m) after the SEND that
//   runs the stage or its LOAD / LOSS, else before the action that makes (c, m + K) (the slot's
//   next microbatch writes the buffer), else nowhere: the step end waits for every send.
// Several marks at one place keep the order of their RECVs (posts) and SENDs (waits) in the
// list; a post after action l comes before a wait before action l + 1. A channel between two
// stages of one rank is a copy at its RECV: no marks. A RECV without a POST_RECV before it posts
// its own receive (a blocking receive; hand-written lists); the lowering always places one.
// Linear in the actions but for schedule_last_actions' copies (O(actions^2) at most).
#include "pipeline.h"
#include "schedule.h"

// Whether something of microbatch m of stage v (one of its actions but a SEND, or a RECV into
// it) comes before action i of rank program rp.
static bool touched_before(const RankProgram *rp, int v, int m, int i) {
  for (int j = 0; j < i; j++) {
    const Action *x = &rp->acts[j];
    bool in = x->kind == ACT_RECV || x->kind == ACT_COPY; // into stage ch->to_v
    if (x->m == m && (in ? x->ch->to_v == v : x->v == v && x->kind != ACT_SEND)) return true;
  }
  return false;
}

void schedule_last_actions(const Program *p, int *last) {
  for (int i = 0; i < p->nv * p->M; i++) last[i] = -1;
  for (int r = 0; r < p->nranks; r++)
    for (int i = 0; i < p->ranks[r].nacts; i++) {
      const Action *x = &p->ranks[r].acts[i];
      if (x->v >= 0 && x->m >= 0) last[(size_t)x->v * p->M + x->m] = i;
    }
  // A channel between two stages of one rank: its COPY(c, m) copies out of the sender's slot, the
  // slot's last use when it comes after the sender's last action of m but before anything of
  // m + K on the slot (which then takes its receives after it; memplan keeps the sent tensor to
  // the timeline's end, not over all of it).
  for (int r = 0; r < p->nranks; r++) {
    const RankProgram *rp = &p->ranks[r];
    for (int i = 0; i < rp->nacts; i++) {
      const Action *x = &rp->acts[i];
      if (x->kind != ACT_COPY) continue;
      int v = x->ch->from_v, K = stage_slots(&p->vs[v]);
      size_t vm = (size_t)v * p->M + x->m;
      if (last[vm] < 0 || last[vm] > i) continue;
      if (x->m + K < p->M && touched_before(rp, v, x->m + K, i)) continue;
      last[vm] = i;
    }
  }
}

// The send-wait rule on a list without marks: per (c, m) the index of the action the wait goes
// before, -1 where none (a copy within the rank, or the step end).
static void send_waits(const Program *p, int *wait, Arena *scratch) {
  int M = p->M;
  size_t nvm = (size_t)p->nv * M;
  for (size_t i = 0; i < (size_t)p->nch * M; i++) wait[i] = -1;
  // Per (v, m): this rank's next action of (v, m) that runs the stage (scanning backwards), and
  // per (v, m) and F, B, W (k 0..2, at k * nv * M + v * M + m) the action that runs it.
  int *next = ARENA_ARRAY(scratch, int, nvm + 1), *at = ARENA_ARRAY(scratch, int, 3 * nvm + 1);
  for (size_t i = 0; i < 3 * nvm; i++) at[i] = -1;
  for (int r = 0; r < p->nranks; r++)
    for (int i = 0; i < p->ranks[r].nacts; i++) {
      const Action *x = &p->ranks[r].acts[i];
      int k = action_fbw(x->kind);
      if (k >= 0 && x->m >= 0) at[(size_t)k * nvm + (size_t)x->v * M + x->m] = i;
    }
  for (int r = 0; r < p->nranks; r++) {
    const RankProgram *rp = &p->ranks[r];
    for (size_t i = 0; i < nvm; i++) next[i] = -1;
    for (int i = rp->nacts - 1; i >= 0; i--) {
      const Action *x = &rp->acts[i];
      if (x->m < 0) continue;
      if (x->v >= 0 && (x->kind == ACT_F || x->kind == ACT_B || x->kind == ACT_W ||
                        x->kind == ACT_LOAD || x->kind == ACT_LOSS)) {
        next[(size_t)x->v * M + x->m] = i;
        continue;
      }
      if (x->kind != ACT_SEND) continue;
      const Channel *c = x->ch;
      if (p->vs[c->to_v].rank == r) continue; // a copy at its RECV
      int K = stage_slots(&p->vs[c->from_v]), w = next[(size_t)c->from_v * M + x->m];
      if (w < 0 && x->m + K < M) {
        w = at[(size_t)action_fbw(channel_maker(p, c)) * nvm + (size_t)c->from_v * M + x->m + K];
      }
      wait[(size_t)c->id * M + x->m] = w;
    }
  }
}

static bool internal(Diag *d, int rank, const Action *x, const char *what) {
  char t[64];
  action_text(x, t, sizeof t);
  diag_error(d, (Loc){0, 0}, "internal error: lower_comm: rank %d: %s %s", rank, t, what);
  return false;
}

// Drops the marks of every list (the pass starts from the unmarked list) and makes each
// channel between two stages of one rank a COPY: its SEND dropped, its RECV a COPY in place.
static void strip_marks(Program *p) {
  for (int r = 0; r < p->nranks; r++) {
    RankProgram *rp = &p->ranks[r];
    int n = 0;
    for (int i = 0; i < rp->nacts; i++) {
      Action x = rp->acts[i];
      bool local = x.ch && p->vs[x.ch->from_v].rank == p->vs[x.ch->to_v].rank;
      if (action_mark(x.kind) || (local && x.kind == ACT_SEND)) continue;
      if (local && x.kind == ACT_RECV) x.kind = ACT_COPY;
      rp->acts[n++] = x;
    }
    rp->nacts = n;
  }
}

bool lower_comm(Program *p, Arena *a, Diag *d) {
  strip_marks(p);
  int M = p->M;
  Arena scratch;
  arena_init(&scratch);
  int *last = ARENA_ARRAY(&scratch, int, (size_t)p->nv *M + 1);
  int *wait = ARENA_ARRAY(&scratch, int, (size_t)p->nch *M + 1);
  schedule_last_actions(p, last);
  send_waits(p, wait, &scratch);
  bool ok = true;
  for (int r = 0; r < p->nranks && ok; r++) {
    RankProgram *rp = &p->ranks[r];
    int n = rp->nacts;
    // Per position: the marks after action i (posts, at i + 1; the list's start at 0) and before
    // it (waits), each a chain in list order through nxt (head, tail per position).
    int *ph = ARENA_ARRAY(&scratch, int, n + 2), *pt = ARENA_ARRAY(&scratch, int, n + 2);
    int *wh = ARENA_ARRAY(&scratch, int, n + 1), *wt = ARENA_ARRAY(&scratch, int, n + 1);
    int *nxt = ARENA_ARRAY(&scratch, int, n + 1);
    for (int i = 0; i <= n; i++) ph[i] = pt[i] = wh[i] = wt[i] = -1;
    ph[n + 1] = pt[n + 1] = -1;
    int nmarks = 0;
    for (int i = 0; i < n && ok; i++) {
      const Action *x = &rp->acts[i];
      nxt[i] = -1;
      if (x->kind != ACT_RECV && x->kind != ACT_SEND && x->kind != ACT_COPY) continue;
      const Channel *c = x->ch;
      bool local = x->kind == ACT_COPY;
      if (x->kind != ACT_SEND) { // a receive (or a copy) into slot m mod K of to_v
        int K = stage_slots(&p->vs[c->to_v]), at = 0;
        if (x->m >= K) {
          int l = last[(size_t)c->to_v * M + x->m - K];
          if (l < 0 || l >= i) {
            char why[96];
            snprintf(why, sizeof why, "comes before the last action of m%d", x->m - K);
            ok = internal(d, r, x, why);
            break;
          }
          at = l + 1;
        }
        if (local) continue; // a copy: no message to post
        if (pt[at] >= 0)
          nxt[pt[at]] = i;
        else
          ph[at] = i;
        pt[at] = i, nmarks++;
      } else {
        int w = wait[(size_t)c->id * M + x->m], K = stage_slots(&p->vs[c->from_v]);
        if (w < 0 && x->m + K >= M) continue; // waited for at step end
        if (w <= i) {
          ok = internal(d, r, x, "has no action after it that waits for it");
          break;
        }
        if (wt[w] >= 0)
          nxt[wt[w]] = i;
        else
          wh[w] = i;
        wt[w] = i, nmarks++;
      }
    }
    if (!ok || nmarks == 0) continue;
    Action *out = ARENA_ARRAY(a, Action, (size_t)n + nmarks + 1);
    int k = 0;
    for (int i = 0; i <= n; i++) {
      for (int j = ph[i]; j >= 0; j = nxt[j])
        out[k++] = (Action){ACT_POST_RECV, -1, rp->acts[j].m, rp->acts[j].ch};
      if (i == n) break;
      for (int j = wh[i]; j >= 0; j = nxt[j])
        out[k++] = (Action){ACT_WAIT_SEND, -1, rp->acts[j].m, rp->acts[j].ch};
      out[k++] = rp->acts[i];
    }
    rp->acts = out;
    rp->nacts = k;
  }
  arena_free(&scratch);
  return ok;
}

void action_send_waits(const Program *p, int *wait) {
  for (int i = 0; i < p->nch * p->M; i++) wait[i] = -1;
  for (int r = 0; r < p->nranks; r++) {
    const RankProgram *rp = &p->ranks[r];
    for (int i = 0; i < rp->nacts; i++) {
      const Action *x = &rp->acts[i];
      if (x->kind != ACT_WAIT_SEND) continue;
      int j = i + 1;
      while (j < rp->nacts && action_mark(rp->acts[j].kind)) j++;
      wait[(size_t)x->ch->id * p->M + x->m] = j < rp->nacts ? j : -1;
    }
  }
}

void action_recv_posts(const Program *p, int *post) {
  for (int i = 0; i < p->nch * p->M; i++) post[i] = -1;
  for (int r = 0; r < p->nranks; r++) {
    const RankProgram *rp = &p->ranks[r];
    for (int i = 0; i < rp->nacts; i++) {
      const Action *x = &rp->acts[i];
      if (x->kind == ACT_POST_RECV) post[(size_t)x->ch->id * p->M + x->m] = i;
    }
  }
}

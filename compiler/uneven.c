// uneven.c: PipeDream's uneven stage replication (--replicas D0,D1,.. with counts that differ;
// docs/pipeline.md, "Stage replication"). Program.stage_reps gives rank s its count D_s; the
// Program itself stays the unreplicated one (M is the step's), and each replica runs a
// subsequence of its rank's list: replica r of rank s runs the actions of the microbatches m with
// m mod D_s = r (and every step-end action), in list order. Microbatch m's messages between
// ranks s and t pair replica m mod D_s with replica m mod D_t. The job's processes are numbered
// stage by stage: world rank W(s, r) = D_0 + .. + D_{s-1} + r.
//
// Here: the counts' rule for a parameter held on several ranks (a tied or shared one: its use
// gradients are summed per replica, then between the ranks, pairing replica r with replica r, so
// every holder needs the same count), the lock-step verification of the D_0 + .. + D_{S-1}
// replica lists (uneven_verify, below), and the per-replica lists for `pipec plan`.
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"

int uneven_reps(const Program *p, int rank) {
  return p->stage_reps ? p->stage_reps[rank] : 1;
}

int uneven_world(const Program *p, int rank, int replica) {
  int w = replica;
  for (int s = 0; s < rank; s++) w += uneven_reps(p, s);
  return w;
}

bool uneven_runs(const Program *p, int rank, int replica, const Action *x) {
  return x->m < 0 || x->m % uneven_reps(p, rank) == replica;
}

// g = gcd(D, K) of stage v (pipeline.h, stage_nslots); 1 outside the uneven form and on ranks
// that hold several stages.
static int slot_group(const Program *p, int v) {
  int K = stage_slots(&p->vs[v]), r = p->vs[v].rank;
  int D = uneven_reps(p, r), g = K;
  if (D <= 1 || p->ranks == NULL || p->ranks[r].nvs != 1) return 1;
  for (int x = D; x > 0;) { // Euclid: g = gcd(K, D)
    int t = g % x;
    g = x, x = t;
  }
  return g;
}

int stage_nslots(const Program *p, int v) {
  int K = stage_slots(&p->vs[v]);
  return K / slot_group(p, v);
}

int stage_slot(const Program *p, int v, int m) {
  int K = stage_slots(&p->vs[v]);
  return m % K / slot_group(p, v);
}

// ---- The replicas' lists in lock step (the rules of simulate.c's verifier, with per-m peers)
//
// Each world rank w (stage s, replica r) runs its subsequence of rank s's list. Every step, each
// replica runs its next action if it can, judged on the state at the step's start: a RECV (c, m)
// once its SEND ran on an earlier step (on replica m mod D_from of the sender; MPI matches by tag,
// so no order between messages is needed); before any action, the replica passes the sends'
// waits that the generated code places in rank s's list since its previous action
// (pr_comm_wait_send(c, m) before the action that makes (c, m + K): replica m mod D_s's send m
// must have completed, i.e. its receiver, replica m mod D_to of the receiving rank, has posted
// the receive: it has run all its actions up to the last action of (to_v, m - K_to), at step
// start for m < K_to). Microbatch m takes slot m mod K of its replica's stage at the first of its
// forward RECVs into the stage, its LOAD and its F, released by its B (W when split): the slot
// must be free. If no replica can move before all are done it is a deadlock, reported with each
// replica's blocked action.

typedef struct Rep {
  int s, r;   // stage (pipeline rank) and replica
  int *idx;   // its actions: indices into rank s's list, in order
  int n;      // count
  int *upto;  // per index i of rank s's list: how many of its actions are at indices <= i
  int pc;     // actions done
  int **slot; // per stage v of rank s (its position in the rank's vs), per slot: the m in it
} Rep;

typedef struct Wait {
  int c, m; // pr_comm_wait_send(c, m)
  int next; // the next wait at the same position (-1: none)
} Wait;

static int pos_in_rank(const Program *p, int v) {
  const RankProgram *rp = &p->ranks[p->vs[v].rank];
  for (int k = 0; k < rp->nvs; k++)
    if (rp->vs[k] == v) return k;
  return 0;
}

bool uneven_verify(const Program *p, Diag *d) {
  const int S = p->nranks, M = p->M, W = uneven_world(p, S, 0);
  Arena a;
  arena_init(&a);
  Rep *rep = ARENA_ARRAY(&a, Rep, W);
  for (int s = 0, w = 0; s < S; s++)
    for (int r = 0; r < uneven_reps(p, s); r++, w++) {
      const RankProgram *rp = &p->ranks[s];
      Rep *q = &rep[w];
      *q = (Rep){.s = s, .r = r};
      q->idx = ARENA_ARRAY(&a, int, rp->nacts + 1);
      q->upto = ARENA_ARRAY(&a, int, rp->nacts + 1);
      for (int i = 0; i < rp->nacts; i++) {
        // The marks take no step of their own (simulate.c): read below where they stand.
        if (!action_mark(rp->acts[i].kind) && uneven_runs(p, s, r, &rp->acts[i]))
          q->idx[q->n++] = i;
        q->upto[i] = q->n;
      }
      q->slot = ARENA_ARRAY(&a, int *, rp->nvs + 1);
      for (int k = 0; k < rp->nvs; k++) {
        int K = stage_nslots(p, rp->vs[k]);
        q->slot[k] = ARENA_ARRAY(&a, int, K);
        for (int j = 0; j < K; j++) q->slot[k][j] = -1;
      }
    }
  // The sends' waits per (rank, position): where the list's WAIT_SENDs stand (before the action
  // at wait), and each receive's post: its POST_RECV, else its RECV (a blocking receive).
  int *wait = ARENA_ARRAY(&a, int, (size_t)p->nch *M + 1);
  int *post = ARENA_ARRAY(&a, int, (size_t)p->nch *M + 1);
  action_send_waits(p, wait);
  action_recv_posts(p, post);
  for (int s = 0; s < S; s++)
    for (int i = 0; i < p->ranks[s].nacts; i++) {
      const Action *x = &p->ranks[s].acts[i];
      if (x->kind == ACT_RECV && post[x->ch->id * M + x->m] < 0) post[x->ch->id * M + x->m] = i;
    }
  int **wait_at = ARENA_ARRAY(&a, int *, S);
  for (int s = 0; s < S; s++) {
    wait_at[s] = ARENA_ARRAY(&a, int, p->ranks[s].nacts + 1);
    for (int i = 0; i <= p->ranks[s].nacts; i++) wait_at[s][i] = -1;
  }
  Wait *waits = ARENA_ARRAY(&a, Wait, (size_t)p->nch * M + 1);
  int nw = 0;
  for (int c = 0; c < p->nch; c++) {
    const Channel *ch = &p->ch[c];
    int s = p->vs[ch->from_v].rank;
    if (s == p->vs[ch->to_v].rank) continue; // a copy within the rank: no send to wait for
    for (int m = 0; m < M; m++) {
      int i = wait[(size_t)c * M + m];
      if (i < 0) continue; // at step end
      waits[nw] = (Wait){c, m, wait_at[s][i]};
      wait_at[s][i] = nw++;
    }
  }
  int *sent_at = ARENA_ARRAY(&a, int, (size_t)p->nch *M + 1);
  bool *held = ARENA_ARRAY(&a, bool, (size_t)p->nv *M + 1);
  for (int i = 0; i < p->nch * M; i++) sent_at[i] = -1;
  int *moved = ARENA_ARRAY(&a, int, W), *pc0 = ARENA_ARRAY(&a, int, W);
  int total = 0, done = 0, t = 0;
  for (int w = 0; w < W; w++) total += rep[w].n;
  bool ok = true;
  while (ok && done < total) {
    int nmoved = 0;
    for (int w = 0; w < W; w++) pc0[w] = rep[w].pc; // the state at the step's start
    for (int w = 0; w < W; w++) {
      Rep *q = &rep[w];
      moved[w] = 0;
      if (q->pc >= q->n) continue;
      int j = q->idx[q->pc], prev = q->pc ? q->idx[q->pc - 1] : -1;
      const Action *x = &p->ranks[q->s].acts[j];
      bool can = true;
      if (x->kind == ACT_RECV && x->ch && p->vs[x->ch->from_v].rank != q->s) {
        int at = sent_at[x->ch->id * M + x->m];
        can = at >= 0 && at < t;
      }
      for (int i = prev + 1; can && i <= j; i++)
        for (int k = wait_at[q->s][i]; can && k >= 0; k = waits[k].next) {
          const Channel *ch = &p->ch[waits[k].c];
          int m = waits[k].m, rr = p->vs[ch->to_v].rank;
          if (m % uneven_reps(p, q->s) != q->r) continue; // not its send
          // Posted once the receiving replica ran what comes before its POST_RECV (or its RECV).
          int l = post[(size_t)ch->id * M + m];
          const Rep *q2 = &rep[uneven_world(p, rr, m % uneven_reps(p, rr))];
          can = l >= 0 && pc0[q2 - rep] >= q2->upto[l];
        }
      if (can) moved[w] = 1, nmoved++;
    }
    if (nmoved == 0) break;
    for (int w = 0; w < W && ok; w++) {
      if (!moved[w]) continue;
      Rep *q = &rep[w];
      const Action *x = &p->ranks[q->s].acts[q->idx[q->pc]];
      if (x->kind == ACT_SEND) sent_at[x->ch->id * M + x->m] = t;
      bool in = x->kind == ACT_RECV || x->kind == ACT_COPY;
      int hv = in && !x->ch->grad                        ? x->ch->to_v
               : x->kind == ACT_LOAD || x->kind == ACT_F ? x->v
                                                         : -1;
      if (hv >= 0 && !held[(size_t)hv * M + x->m]) {
        held[(size_t)hv * M + x->m] = true;
        int K = stage_nslots(p, hv), k = stage_slot(p, hv, x->m),
            *sl = &q->slot[pos_in_rank(p, hv)][k];
        if (*sl >= 0) {
          char text[64];
          action_text(x, text, sizeof text);
          diag_error(d, (Loc){0, 0},
                     "schedule: rank %d (stage %d, replica %d) %s: reuses slot %d of stage v%d "
                     "(K = %d) while m%d is live",
                     w, q->s, q->r, text, k, hv, K, *sl);
          ok = false;
          break;
        }
        *sl = x->m;
      }
      if (x->v >= 0 && x->m >= 0 && x->kind == stage_release(&p->vs[x->v])) {
        q->slot[pos_in_rank(p, x->v)][stage_slot(p, x->v, x->m)] = -1;
      }
      q->pc++;
      done++;
    }
    t++;
  }
  if (ok && done < total) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fprintf(f, "schedule: the replicas' lists deadlock after %d steps (no replica can move):", t);
    for (int w = 0; w < W; w++) {
      const Rep *q = &rep[w];
      if (q->pc >= q->n) continue;
      char at[64];
      action_text(&p->ranks[q->s].acts[q->idx[q->pc]], at, sizeof at);
      fprintf(f, "\n  rank %d (stage %d, replica %d) waits at its action %d, %s", w, q->s, q->r,
              q->pc, at);
    }
    fclose(f);
    diag_error(d, (Loc){0, 0}, "%s", text);
    free(text);
    ok = false;
  }
  arena_free(&a);
  return ok;
}

bool uneven_check(const Program *p, const char *list, Diag *d) {
  for (int k = 0; k < p->nex; k++) {
    const Exchange *x = &p->ex[k];
    int r0 = p->vs[x->stages[0]].rank;
    for (int j = 1; j < x->n; j++) {
      int r = p->vs[x->stages[j]].rank;
      if (uneven_reps(p, r) == uneven_reps(p, r0)) continue;
      diag_error(d, (Loc){0, 0},
                 "--replicas %s: parameter '%s' is held on stages %d and %d, whose replica "
                 "counts differ (%d and %d): a tied or shared parameter needs the same count on "
                 "every stage that holds it (its use gradients are summed per replica, then "
                 "between the stages, replica r with replica r)",
                 list, x->param->name, r0, r, uneven_reps(p, r0), uneven_reps(p, r));
      return false;
    }
  }
  return uneven_verify(p, d);
}

void uneven_print(const Program *p, FILE *out) {
  if (!p->stage_reps) return;
  int W = uneven_world(p, p->nranks, 0);
  fprintf(out, "replicas: per stage");
  for (int s = 0; s < p->nranks; s++) fprintf(out, " %d", uneven_reps(p, s));
  fprintf(out,
          " (PipeDream's uneven form; %d ranks in all, stage by stage); replica r of stage s runs "
          "the microbatches m with m mod D_s = r of the step's %d, in its list's order; microbatch "
          "m's messages pair replica m mod D_s with replica m mod D_t; each stage sums its "
          "gradients with its replicas' once per step, in replica order\n",
          W, p->M);
  for (int s = 0; s < p->nranks; s++)
    for (int r = 0; r < uneven_reps(p, s); r++) {
      const RankProgram *rp = &p->ranks[s];
      fprintf(out, "  rank %d (stage %d, replica %d of %d):", uneven_world(p, s, r), s, r,
              uneven_reps(p, s));
      for (int i = 0; i < rp->nacts; i++) {
        const Action *x = &rp->acts[i];
        if (x->m < 0 || !uneven_runs(p, s, r, x)) continue;
        if (x->kind != ACT_F && x->kind != ACT_B && x->kind != ACT_W) continue;
        fprintf(out, " %s%d", action_name(x->kind), x->m);
        if (p->nv > p->nranks) fprintf(out, ".v%d", x->v);
      }
      fputc('\n', out);
    }
}

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
// every holder needs the same count), the D_0 + .. + D_{S-1} replica lists as one action list per
// world rank (uneven_lists) that the one verifier checks (uneven_check.c: schedule_verify of them,
// compiler/simulate.c; there is no simulator of its own), and the per-replica lists for
// `pipec plan`.
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "schedule.h"
#include "uneven.h"

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
  if (p->pipe) p = p->pipe; // a world program: its pipeline's ranks
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

// ---- The replicas' lists: one action list per world rank, checked by the one verifier
//
// World rank W(s, r) runs its subsequence of rank s's list (uneven_runs). schedule_verify
// (compiler/simulate.c) runs them in lock step with its rules: a message (c, m) goes from the
// sender's replica m mod D_from to the receiver's replica m mod D_to (action_rank; the pair's
// messages in the same order on both sides, the pipeline lists' order), its receive posted where
// the replica's POST_RECV(c, m) is and its send waited for at its WAIT_SEND(c, m) (both on the
// replicas that run m), a COPY within a replica, and microbatch m takes slot
// stage_slot(v, m) of its replica's stage (stage_nslots of them).

int action_rank(const Program *p, int v, int m) {
  if (!p->pipe) return p->vs[v].rank;
  int s = p->vs[v].rank, D = uneven_reps(p->pipe, s);
  return uneven_world(p->pipe, s, m < 0 ? 0 : m % D);
}

void uneven_lists(const Program *p, Program *w, Arena *a) {
  int S = p->nranks, W = uneven_world(p, S, 0);
  *w = *p;
  w->pipe = p;
  w->nranks = W;
  w->ranks = ARENA_ARRAY(a, RankProgram, W);
  for (int s = 0; s < S; s++)
    for (int r = 0; r < uneven_reps(p, s); r++) {
      const RankProgram *rp = &p->ranks[s];
      RankProgram *q = &w->ranks[uneven_world(p, s, r)];
      *q = *rp;
      q->rank = uneven_world(p, s, r);
      q->acts = ARENA_ARRAY(a, Action, rp->nacts + 1);
      q->nacts = 0;
      for (int i = 0; i < rp->nacts; i++)
        if (uneven_runs(p, s, r, &rp->acts[i])) q->acts[q->nacts++] = rp->acts[i];
    }
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

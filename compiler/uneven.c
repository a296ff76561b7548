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
// every holder needs the same count), and the per-replica lists for `pipec plan`.
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
  return true;
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

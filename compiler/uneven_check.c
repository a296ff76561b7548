// uneven_check.c: the uneven form's checks (uneven.h): the counts' rule for a parameter held on
// several ranks, then the one verifier (compiler/simulate.c's schedule_verify) over the replicas'
// action lists, one per world rank (uneven_lists). Apart from uneven.c, which the verifier reads
// (slots, world ranks), so the two do not import each other.
#include "pipeline.h"
#include "simulate.h"
#include "uneven.h"

bool uneven_verify(const Program *p, Diag *d) {
  Arena a;
  arena_init(&a);
  Program w;
  uneven_lists(p, &w, &a);
  bool ok = schedule_verify(&w, NULL, NULL, NULL, d);
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

// shape pass: runs every node's shape/dtype rule from the op registry in topological order.
//
// A node whose rule fails marks its outputs invalid; nodes that read an invalid tensor are
// skipped silently, so each independent mistake is reported once and nothing cascades. After the
// rules, the loss must be a floating-point scalar, and every parameter should be used.
#include "../ir/ops.h"
#include "passes.h"

bool pass_shape(Graph *g, Diag *d) {
  int errors = d->errors;
  bool *bad = ARENA_ARRAY(g->arena, bool, g->ntensors + 1);
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    bool skip = false;
    for (int j = 0; j < n->nin; j++) skip |= bad[n->in[j]->id];
    if (skip || !n->op->infer(g, n, d)) {
      for (int k = 0; k < n->nout; k++) bad[n->out[k]->id] = true;
      continue;
    }
    for (int k = 0; k < n->nout; k++)
      if (shape_numel(&n->out[k]->shape, 1) < 0) {
        node_error(d, n, "output '%s' %s has more than 2^53 elements", n->out[k]->name,
                   fmt_shape(g, &n->out[k]->shape));
        bad[n->out[k]->id] = true;
      }
  }
  if (d->errors > errors) return false;
  g->shapes_known = true;
  const Tensor *l = g->loss;
  if (l->shape.rank != 0 || !dtype_is_float(l->dtype)) {
    diag_error(d, l->loc, "loss: '%s' must be a floating-point scalar () but is %s%s", l->name,
               dtype_name(l->dtype), fmt_shape(g, &l->shape));
    return false;
  }
  for (int i = 0; i < g->nparams; i++) {
    const Tensor *p = g->params[i];
    bool used = p->nuses > 0;
    for (int j = 0; j < g->nparams && !used; j++)
      used = g->params[j]->tied_to == p && g->params[j]->nuses > 0;
    if (!used && !p->tied_to)
      diag_warning(d, p->loc, "%s: parameter '%s' is never used (it would get no gradient)",
                   p->path, p->name);
  }
  return true;
}

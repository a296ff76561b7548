// IR verifier: structural invariants every pass must preserve. A failure here is a compiler bug,
// not a user error, so messages start with "internal error" and name the broken invariant.
#include "ops.h"

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    diag_error(d, (Loc){0, 0}, "internal error: IR verifier: " __VA_ARGS__);                       \
    return false;                                                                                  \
  } while (0)

static bool shape_ok(const Shape *s) {
  if (s->rank < 0 || s->rank > MAX_RANK) return false;
  for (int i = 0; i < s->rank; i++)
    if (s->d[i].n < 1 || (s->d[i].b != 0 && s->d[i].b != 1)) return false;
  return shape_numel(s, 1) >= 0;
}

bool graph_verify(const Graph *g, Diag *d) {
  for (int i = 0; i < g->ntensors; i++) {
    const Tensor *t = g->tensors[i];
    if (t->id != i) FAIL("tensor '%s' has id %d at index %d", t->name, t->id, i);
    if (graph_find(g, t->name) != t) FAIL("tensor '%s' is not found under its own name", t->name);
    if ((unsigned)t->dtype >= DT_COUNT) FAIL("tensor '%s' has no valid dtype", t->name);
    if (!shape_ok(&t->shape)) FAIL("tensor '%s' has an invalid shape", t->name);
    if (t->kind == T_ACT) {
      const Node *p = t->producer;
      if (!p || t->out_index < 0 || t->out_index >= p->nout || p->out[t->out_index] != t)
        FAIL("activation '%s' does not match its producer's outputs", t->name);
    } else if (t->producer) {
      static const char *const kinds[] = {"input", "param", "activation", "constant", "received"};
      FAIL("%s '%s' has a producer", kinds[t->kind], t->name);
    }
    if (t->tied_to && (t->kind != T_PARAM || t->tied_to->kind != T_PARAM || t->tied_to->tied_to))
      FAIL("param '%s' is tied to a non-owner", t->name);
    for (int u = 0; u < t->nuses; u++) {
      const Use *use = &t->uses[u];
      if (use->slot < 0 || use->slot >= use->node->nin || use->node->in[use->slot] != t)
        FAIL("tensor '%s' lists a use that does not read it", t->name);
      if (u > 0 && t->uses[u - 1].node->id > use->node->id)
        FAIL("uses of '%s' are not in graph order", t->name);
    }
  }
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->id != i) FAIL("node '%s' has id %d at index %d", n->name, n->id, i);
    if (!n->op) FAIL("node '%s' has no op", n->name);
    if (n->nin < n->op->min_in || (n->op->max_in >= 0 && n->nin > n->op->max_in))
      FAIL("node '%s' has %d inputs for op %s", n->name, n->nin, n->op->name);
    for (int j = 0; j < n->nin; j++) {
      const Tensor *t = n->in[j];
      if (!t) FAIL("node '%s' input %d is unset", n->name, j);
      if (t->producer && t->producer->id >= n->id)
        FAIL("node '%s' reads '%s' before it is produced (not topological)", n->name, t->name);
      int found = 0;
      for (int u = 0; u < t->nuses; u++) found += t->uses[u].node == n && t->uses[u].slot == j;
      if (found != 1) FAIL("use list of '%s' misses node '%s' input %d", t->name, n->name, j);
    }
    for (int k = 0; k < n->nout; k++)
      if (!n->out[k] || n->out[k]->producer != n || n->out[k]->out_index != k)
        FAIL("node '%s' output %d does not point back to it", n->name, k);
  }
  if (!g->loss) FAIL("no loss tensor");
  return true;
}

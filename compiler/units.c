// units.c: the units the cut model (cut.h) cuts between, from the differentiated graph: a block
// instance's consecutive forward nodes or one node outside blocks, each labelled as --split and
// the costs file name it, and the forward node each backward or step node follows (unit_anchor).
#include <string.h>

#include "cut.h"

const Node *unit_anchor(const Node *n) {
  if (n->role == ROLE_FWD) return n;
  if (n->fwd) return n->fwd;
  if (n->role == ROLE_STEP) return NULL;
  const Tensor *t = n->nout ? n->out[0]->grad_of : NULL;
  return t && t->producer ? unit_anchor(t->producer) : NULL;
}

// "transformer.h.2" from the names of a block instance's nodes: their longest common prefix
// that ends at a '.' or at the end of every name; "BLOCK.INDEX" when there is none.
const char *unit_label(Node *const *nodes, int n, Arena *a) {
  const char *s = nodes[0]->name;
  size_t len = strlen(s);
  for (int i = 1; i < n; i++) {
    const char *o = nodes[i]->name;
    size_t k = 0;
    while (k < len && o[k] == s[k]) k++;
    len = k;
  }
  if (n == 1 && !nodes[0]->block) return s;
  for (;; len--) {
    bool whole = len > 0;
    for (int i = 0; i < n && whole; i++)
      whole = nodes[i]->name[len] == 0 || nodes[i]->name[len] == '.';
    if (whole) return arena_printf(a, "%.*s", (int)len, s);
    if (len == 0) break;
  }
  return arena_printf(a, "%s.%d", nodes[0]->block, nodes[0]->instance);
}

int units_make(Graph *g, int nf, bool by_node, Arena *a, int **unit_of, int **unit_start,
               const char ***label) {
  int *of = ARENA_ARRAY(a, int, nf + 1), *start = ARENA_ARRAY(a, int, nf + 1), n = 0;
  for (int i = 0; i < nf; i++) {
    const Node *node = g->nodes[i], *p = i ? g->nodes[i - 1] : NULL;
    bool same =
        !by_node && p && node->block && p->block == node->block && p->instance == node->instance;
    if (!same) start[n++] = i;
    of[i] = n - 1;
  }
  start[n] = nf;
  const char **lab = ARENA_ARRAY(a, const char *, n + 1);
  for (int k = 0; k < n; k++) lab[k] = unit_label(g->nodes + start[k], start[k + 1] - start[k], a);
  *unit_of = of, *unit_start = start, *label = lab;
  return n;
}

int partition_units(Graph *g, int *unit_of_node, const char ***label) {
  int *of, *start;
  int n = units_make(g, g->nfwd, false, g->arena, &of, &start, label);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *f = unit_anchor(g->nodes[i]);
    unit_of_node[i] = f && f->id < g->nfwd ? of[f->id] : -1;
  }
  return n;
}

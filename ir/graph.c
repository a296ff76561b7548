// Graph construction: tensors and nodes are appended to growable arena arrays and indexed by name.
#include <string.h>

#include "ir.h"
#include "ops.h"

#define GROW(g, arr, n, cap, T)                                                                    \
  do {                                                                                             \
    if ((n) == (cap)) {                                                                            \
      int ncap_ = (cap) ? (cap)*2 : 64;                                                            \
      T *narr_ = ARENA_ARRAY((g)->arena, T, ncap_);                                                \
      if (n) memcpy(narr_, (arr), sizeof(T) * (size_t)(n));                                        \
      (arr) = narr_;                                                                               \
      (cap) = ncap_;                                                                               \
    }                                                                                              \
  } while (0)

void graph_init(Graph *g, Arena *a) {
  memset(g, 0, sizeof *g);
  g->arena = a;
  g->batch_sym = "B";
  strmap_init(&g->names, a);
  strmap_init(&g->node_names, a);
}

Tensor *graph_add_tensor(Graph *g, const char *name, TensorKind kind) {
  Tensor *t = ARENA_NEW(g->arena, Tensor);
  t->id = g->ntensors;
  t->name = name;
  t->kind = kind;
  t->out_index = -1;
  GROW(g, g->tensors, g->ntensors, g->cap_tensors, Tensor *);
  g->tensors[g->ntensors++] = t;
  if (kind == T_INPUT) {
    GROW(g, g->inputs, g->ninputs, g->cap_inputs, Tensor *);
    g->inputs[g->ninputs++] = t;
  } else if (kind == T_PARAM) {
    GROW(g, g->params, g->nparams, g->cap_params, Tensor *);
    g->params[g->nparams++] = t;
  }
  strmap_put(&g->names, name, t);
  return t;
}

Node *graph_add_node(Graph *g, const char *name, const OpDef *op, int nin, int nout) {
  Node *n = ARENA_NEW(g->arena, Node);
  n->id = g->nnodes;
  n->file_order = g->nnodes;
  n->name = name;
  n->op = op;
  n->nin = nin;
  n->in = ARENA_ARRAY(g->arena, Tensor *, nin ? nin : 1);
  n->nout = nout;
  n->out = ARENA_ARRAY(g->arena, Tensor *, nout ? nout : 1);
  n->attrs = ARENA_ARRAY(g->arena, AttrValue, op->nattrs ? op->nattrs : 1);
  n->stage = -1;
  n->instance = -1;
  GROW(g, g->nodes, g->nnodes, g->cap_nodes, Node *);
  g->nodes[g->nnodes++] = n;
  strmap_put(&g->node_names, name, n);
  return n;
}

Tensor *graph_find(const Graph *g, const char *name) {
  return strmap_get(&g->names, name);
}

bool graph_is_output(const Graph *g, const Tensor *t) {
  for (int o = 0; o < g->noutputs; o++)
    if (g->outputs[o] == t) return true;
  return false;
}

void graph_link_uses(Graph *g) {
  for (int i = 0; i < g->ntensors; i++) g->tensors[i]->nuses = 0;
  for (int i = 0; i < g->nnodes; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++) g->nodes[i]->in[j]->nuses++;
  for (int i = 0; i < g->ntensors; i++) {
    Tensor *t = g->tensors[i];
    t->uses = ARENA_ARRAY(g->arena, Use, t->nuses ? t->nuses : 1);
    t->nuses = 0;
  }
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++) {
      Tensor *t = n->in[j];
      t->uses[t->nuses++] = (Use){n, j};
    }
  }
}

// autodiff pass: appends the backward graph, following ../shared/design/pipeline-semantics.md.
//
// 1. Which tensors need a gradient: those that depend on a parameter and reach the loss.
// 2. The loss gradient is a constant 1/M (M microbatches; their losses are averaged).
// 3. Forward nodes are visited in reverse topological order. A tensor's gradient is final when
//    its node is visited (all its consumers come later in the forward order, so they were
//    visited first): one contribution is the gradient itself; several are summed by an add_n
//    node in consumer order (graph order, then input slot), never in arrival order.
// 4. The op's gradient rule (its registry row) gives one backward node per differentiable input:
//    the pass interprets the row's declarative entries (grad_declared), or calls the row's rule
//    as code with the pass's services in a GradApi (ir/ops.h): the registry never calls here.
//    (silu_mul's rule has one node compute both of its inputs' gradients: grad_emit_joint.)
//    A node producing an activation's gradient is an input-gradient node (B); one producing a
//    parameter's gradient is a weight-gradient node (W) and accumulates over microbatches into
//    a per-step buffer of its own, one buffer per use of the parameter (acc = m > 0). Kernels
//    that cannot accumulate write a temporary and an `accumulate` node adds it.
// 5. A parameter with several uses (tied weights, shared layers) gets its gradient at the end of
//    the step: a step node sums the use buffers in use order.
#include <stdlib.h>

#include "../ir/ops.h"
#include "passes.h"

typedef struct Contrib {
  int64_t key;  // consumer node id << 32 | input slot: the canonical summation order
  Tensor *grad; // the contribution (activations) or the use's accumulation buffer (params)
} Contrib;

typedef struct ContribList {
  Contrib *items; // contributions
  int n, cap;     // count and capacity
} ContribList;

struct GradCtx {
  Graph *g;           // graph being differentiated
  Diag *d;            // diagnostics
  bool *needs;        // per tensor id: needs a gradient
  Tensor **grad;      // per tensor id: final gradient of an activation (or the loss seed)
  ContribList *contr; // per tensor id: contributions (params: keyed by their owner)
  int ntensors;       // tensors when the pass started (the arrays' size)
};

static void push(GradCtx *c, int id, Contrib x) {
  ContribList *l = &c->contr[id];
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 4;
    Contrib *items = ARENA_ARRAY(c->g->arena, Contrib, cap);
    for (int i = 0; i < l->n; i++) items[i] = l->items[i];
    l->items = items;
    l->cap = cap;
  }
  l->items[l->n++] = x;
}

static int by_key(const void *a, const void *b) {
  int64_t ka = ((const Contrib *)a)->key, kb = ((const Contrib *)b)->key;
  return (ka > kb) - (ka < kb);
}

static const Tensor *owner(const Tensor *t) {
  return t->tied_to ? t->tied_to : t;
}

static bool grad_needed(GradCtx *c, const Node *n, int slot) {
  const Tensor *t = n->in[slot];
  return t->id < c->ntensors && c->needs[t->id];
}

static Tensor *grad_output(GradCtx *c, const Node *n, int k) {
  return c->grad[n->out[k]->id];
}

static Tensor *new_tensor(GradCtx *c, const char *name, const Tensor *like, TensorKind kind) {
  Tensor *t = graph_add_tensor(c->g, name, kind);
  t->dtype = like->dtype;
  t->shape = like->shape;
  t->loc = like->loc;
  t->path = like->path;
  t->grad_of = (Tensor *)like;
  return t;
}

static Tensor *grad_zeros(GradCtx *c, const Tensor *like) {
  Tensor *t = new_tensor(c, arena_printf(c->g->arena, "zeros:%s", like->name), like, T_CONST);
  t->const_value = 0;
  return t;
}

// A node of op with inputs ins and outputs outs (nout of them).
static Node *new_node_n(GradCtx *c, const char *name, const char *op, Tensor *const *ins, int nin,
                        Tensor *const *outs, int nout, NodeRole role, const Node *fwd, int slot) {
  Node *b = graph_add_node(c->g, name, op_find(op), nin, nout);
  for (int i = 0; i < nin; i++) b->in[i] = ins[i];
  for (int k = 0; k < nout; k++) {
    b->out[k] = outs[k];
    outs[k]->producer = b;
    outs[k]->out_index = k;
  }
  b->role = role;
  b->fwd = fwd;
  b->slot = slot;
  b->loc = fwd ? fwd->loc : outs[0]->loc;
  b->path = fwd ? fwd->path : outs[0]->path;
  b->instance = fwd ? fwd->instance : -1;
  b->block = fwd ? fwd->block : NULL;
  b->stage = fwd ? fwd->stage : -1;
  return b;
}

static Node *new_node(GradCtx *c, const char *name, const char *op, Tensor *const *ins, int nin,
                      Tensor *out, NodeRole role, const Node *fwd, int slot) {
  return new_node_n(c, name, op, ins, nin, &out, 1, role, fwd, slot);
}

// Emits internal op bwd_op (with inputs ins) computing n->in[slot]'s gradient contribution: a
// B node for an activation, a W node accumulating into the use's buffer for a parameter.
static Node *grad_emit(GradCtx *c, const Node *n, int slot, const char *bwd_op, Tensor *const *ins,
                       int nin) {
  Arena *a = c->g->arena;
  Tensor *x = n->in[slot];
  const OpDef *op = op_find(bwd_op);
  int64_t key = (int64_t)n->id << 32 | slot;
  if (x->kind != T_PARAM) {
    Tensor *g = new_tensor(c, arena_printf(a, "d:%s@%s#%d", x->name, n->name, slot), x, T_ACT);
    Node *b = new_node(c, arena_printf(a, "%s:d%d", n->name, slot), bwd_op, ins, nin, g, ROLE_BWD,
                       n, slot);
    push(c, x->id, (Contrib){key, g});
    return b;
  }
  // A parameter use: its own buffer, accumulated over the microbatches of a step.
  const Tensor *p = owner(x);
  Tensor *buf = new_tensor(c, arena_printf(a, "d:%s@%s#%d", p->name, n->name, slot), p, T_ACT);
  buf->per_step = true;
  buf->grad_of = (Tensor *)p;
  Node *b;
  if (op->acc) {
    b = new_node(c, arena_printf(a, "%s:d%d", n->name, slot), bwd_op, ins, nin, buf, ROLE_WGT, n,
                 slot);
  } else {
    Tensor *tmp = new_tensor(c, arena_printf(a, "d:%s@%s#%d:mb", p->name, n->name, slot), p, T_ACT);
    b = new_node(c, arena_printf(a, "%s:d%d", n->name, slot), bwd_op, ins, nin, tmp, ROLE_WGT, n,
                 slot);
    new_node(c, arena_printf(a, "%s:d%d:acc", n->name, slot), "accumulate", &tmp, 1, buf, ROLE_WGT,
             n, slot);
  }
  push(c, p->id, (Contrib){key, buf});
  return b;
}

// One B node of internal op bwd_op computing the contributions of inputs slots[0..nslots) of n,
// output i for slots[i] (ir/ops.h GradApi.emit_joint); its slot is -1 (several inputs). NULL
// when one of them is a parameter.
static Node *grad_emit_joint(GradCtx *c, const Node *n, const int *slots, int nslots,
                             const char *bwd_op, Tensor *const *ins, int nin) {
  Arena *a = c->g->arena;
  Tensor **outs = ARENA_ARRAY(a, Tensor *, nslots);
  for (int i = 0; i < nslots; i++)
    if (n->in[slots[i]]->kind == T_PARAM) return NULL;
  for (int i = 0; i < nslots; i++) {
    Tensor *x = n->in[slots[i]];
    outs[i] = new_tensor(c, arena_printf(a, "d:%s@%s#%d", x->name, n->name, slots[i]), x, T_ACT);
    if (grad_needed(c, n, slots[i]))
      push(c, x->id, (Contrib){(int64_t)n->id << 32 | slots[i], outs[i]});
  }
  return new_node_n(c, arena_printf(a, "%s:d", n->name), bwd_op, ins, nin, outs, nslots, ROLE_BWD,
                    n, -1);
}

// Passes t on as the gradient contribution for n->in[slot] unchanged (d(a+b)/da = 1 with equal
// shapes): no node for an activation; a parameter still gets its accumulation node.
static void grad_pass(GradCtx *c, const Node *n, int slot, Tensor *t) {
  Tensor *x = n->in[slot];
  if (x->kind == T_PARAM)
    grad_emit(c, n, slot, "accumulate", &t, 1);
  else
    push(c, x->id, (Contrib){(int64_t)n->id << 32 | slot, t});
}

// The tensor a declarative gradient entry names for forward node n.
static Tensor *entry_tensor(GradCtx *c, const Node *n, GradTensor t) {
  switch (t.from) {
  case GF_DY:
    return grad_output(c, n, t.k);
  case GF_X:
    return n->in[t.k];
  case GF_Y:
    return n->out[t.k];
  case GF_END:
    break;
  }
  return NULL;
}

// Interprets the declarative gradient entries of n's row (ir/ops.h GradEntry) in order: for each
// input slot an entry names that exists and needs a gradient, dy itself (pass_same_shape with
// the output's shape) or one backward node.
static void grad_declared(GradCtx *c, const Node *n) {
  for (const GradEntry *e = n->op->grads; e->bwd_op; e++) {
    int lo = e->slot == GRAD_EVERY_SLOT ? 0 : e->slot;
    int hi = e->slot == GRAD_EVERY_SLOT ? n->nin : e->slot + 1;
    for (int s = lo; s < hi && s < n->nin; s++) {
      if (!grad_needed(c, n, s)) continue;
      if (e->pass_same_shape && shape_eq(&n->in[s]->shape, &n->out[0]->shape)) {
        grad_pass(c, n, s, grad_output(c, n, 0));
        continue;
      }
      Tensor *ins[MAX_GRAD_IN];
      int k = 0;
      for (; k < MAX_GRAD_IN && e->in[k].from != GF_END; k++) ins[k] = entry_tensor(c, n, e->in[k]);
      grad_emit(c, n, s, e->bwd_op, ins, k);
    }
  }
}

// Final gradient of t from its contributions, summed in canonical order.
static Tensor *finish(GradCtx *c, Tensor *t, NodeRole role) {
  ContribList *l = &c->contr[t->id];
  if (l->n == 0) return NULL;
  qsort(l->items, (size_t)l->n, sizeof(Contrib), by_key);
  if (l->n == 1) return l->items[0].grad;
  Tensor **xs = ARENA_ARRAY(c->g->arena, Tensor *, l->n);
  for (int i = 0; i < l->n; i++) xs[i] = l->items[i].grad;
  Tensor *sum = new_tensor(c, arena_printf(c->g->arena, "d:%s", t->name), t, T_ACT);
  sum->per_step = role == ROLE_STEP;
  new_node(c, arena_printf(c->g->arena, "d:%s:sum", t->name), "add_n", xs, l->n, sum, role, NULL,
           -1);
  return sum;
}

bool pass_autodiff(Graph *g, int microbatches, Diag *d) {
  GradCtx c = {.g = g, .d = d, .ntensors = g->ntensors};
  // The services a gradient rule as code gets (ir/ops.h).
  const GradApi api = {.c = &c,
                       .arena = g->arena,
                       .output = grad_output,
                       .needed = grad_needed,
                       .emit = grad_emit,
                       .zeros = grad_zeros,
                       .emit_joint = grad_emit_joint};
  c.needs = ARENA_ARRAY(g->arena, bool, g->ntensors);
  c.grad = ARENA_ARRAY(g->arena, Tensor *, g->ntensors);
  c.contr = ARENA_ARRAY(g->arena, ContribList, g->ntensors);
  g->nfwd = g->nnodes;
  g->microbatches = microbatches;
  // 1. depends on a parameter (forward) and reaches the loss (backward).
  bool *dep = ARENA_ARRAY(g->arena, bool, g->ntensors),
       *reach = ARENA_ARRAY(g->arena, bool, g->ntensors);
  for (int i = 0; i < g->nparams; i++) dep[g->params[i]->id] = true;
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    bool any = false;
    for (int j = 0; j < n->nin; j++) any |= dep[n->in[j]->id] && dtype_is_float(n->in[j]->dtype);
    for (int k = 0; k < n->nout; k++)
      dep[n->out[k]->id] = any && !n->out[k]->hidden && dtype_is_float(n->out[k]->dtype);
  }
  reach[g->loss->id] = true;
  for (int i = g->nnodes - 1; i >= 0; i--) {
    Node *n = g->nodes[i];
    bool any = false;
    for (int k = 0; k < n->nout; k++) any |= reach[n->out[k]->id];
    if (any)
      for (int j = 0; j < n->nin; j++) reach[n->in[j]->id] = true;
  }
  for (int i = 0; i < g->ntensors; i++) c.needs[i] = dep[i] && reach[i];
  if (!c.needs[g->loss->id]) {
    diag_error(d, g->loss->loc,
               "loss: '%s' does not depend on any parameter; there is nothing to train",
               g->loss->name);
    return false;
  }
  // 2. seed
  Tensor *seed = new_tensor(&c, arena_printf(g->arena, "d:%s", g->loss->name), g->loss, T_CONST);
  seed->const_value = 1.0 / microbatches;
  c.grad[g->loss->id] = seed;
  // 3-4. reverse topological order over the forward nodes
  for (int i = g->nfwd - 1; i >= 0; i--) {
    Node *n = g->nodes[i];
    bool any = false;
    for (int k = 0; k < n->nout; k++) {
      Tensor *t = n->out[k];
      if (t != g->loss) c.grad[t->id] = finish(&c, t, ROLE_BWD);
      any |= c.grad[t->id] != NULL;
    }
    if (!any) continue;
    bool wants = false;
    for (int j = 0; j < n->nin; j++) wants |= grad_needed(&c, n, j);
    if (!wants) continue;
    if (n->op->grads)
      grad_declared(&c, n);
    else if (!n->op->grad_rule || !n->op->grad_rule(&api, n)) {
      node_error(d, n, "op %s has no gradient rule", n->op->name);
      return false;
    }
  }
  // 5. parameters: one buffer per use, summed in use order at the end of the step.
  for (int i = 0; i < g->nparams; i++) {
    Tensor *p = g->params[i];
    if (p->tied_to) continue;
    p->grad = finish(&c, p, ROLE_STEP);
  }
  graph_link_uses(g);
  return true;
}

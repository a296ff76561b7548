// fuse pass: rewrites forward patterns that one kernel computes in fewer passes over memory, before
// autodiff differentiates the graph, so that the backward follows the fused op's own gradient rule
// and the intermediate it no longer makes is never kept for the backward.
//
// Today one pattern: SwiGLU's gate mul(silu(g), u), either operand order, becomes the internal op
// silu_mul(g, u) (ir/ops.c) on the mul's node and output; the silu node and its output go. The
// forward reads g and u and writes y (3 passes over the tensor instead of 5), silu(g) is not kept
// alive for the backward, and one backward node writes dg and du (5 passes instead of 9). The
// kernels compute the unfused sequence's bits (pr_silu_mul_fwd/bwd, kernels_elementwise.c), so
// the numbers do not change. It applies where:
//  - the silu's output has no use but this mul (once), and is not the loss or a model output;
//  - g, u and the output have one shape and dtype f32 (no broadcast);
//  - no other consumer of g lies between the silu and the mul: g's gradient contributions are
//    summed in consumer order (autodiff.c), and the fused node takes the mul's place in it;
//  - g and u are activations: a parameter's gradient accumulates per use (autodiff.c), which the
//    joint backward node does not do, and an input needs no gradient (nothing to gain);
//  - the program computes in f32: --precision bf16|fp16 stores silu(g) and the gradient of it in
//    16 bits between the unfused kernels, a rounding the fused kernels skip.
// Off with pipec compile --no-fuse (the unfused program, for A/B runs). Linear in the nodes.
#include <stdlib.h>
#include <string.h>

#include "../ir/ops.h"
#include "pipeline.h"

static bool is_op(const Node *n, const char *name) {
  return n && n->role == ROLE_FWD && strcmp(n->op->name, name) == 0;
}

// The silu node of mul node m's input slot k when the pair fuses (see the header), else NULL.
static Node *fusable_silu(const Graph *g, const Node *m, int k) {
  const Tensor *s = m->in[k], *u = m->in[1 - k];
  Node *sn = s->producer;
  if (s->kind != T_ACT || !is_op(sn, "silu") || s->nuses != 1 || s == g->loss ||
      graph_is_output(g, s))
    return NULL;
  const Tensor *x = sn->in[0], *y = m->out[0];
  if (x->kind != T_ACT || u->kind != T_ACT) return NULL;
  for (int j = 0; j < x->nuses; j++) // g's gradient sums its contributions in consumer order
    if (x->uses[j].node->id > sn->id && x->uses[j].node->id < m->id) return NULL;
  const Tensor *ts[] = {x, u, s, y};
  for (int i = 0; i < 4; i++)
    if (ts[i]->dtype != DT_F32 || !shape_eq(&ts[i]->shape, &y->shape)) return NULL;
  return sn;
}

// Drops the marked nodes and tensors from the graph's lists; ids follow the new positions.
static void compact(Graph *g, const bool *drop_node, const bool *drop_tensor) {
  int k = 0;
  for (int i = 0; i < g->nnodes; i++)
    if (!drop_node[i]) g->nodes[k] = g->nodes[i], g->nodes[k]->id = k, k++;
  g->nnodes = k;
  k = 0;
  for (int i = 0; i < g->ntensors; i++)
    if (!drop_tensor[i]) g->tensors[k] = g->tensors[i], g->tensors[k]->id = k, k++;
  g->ntensors = k;
}

bool pass_fuse(Graph *g, bool enabled, Diag *d) {
  (void)d;
  if (!enabled) return true;
  graph_link_uses(g);
  const OpDef *silu_mul = op_find("silu_mul");
  bool *drop_node = ARENA_ARRAY(g->arena, bool, g->nnodes);
  bool *drop_tensor = ARENA_ARRAY(g->arena, bool, g->ntensors);
  int fused = 0;
  for (int i = 0; i < g->nnodes; i++) {
    Node *m = g->nodes[i];
    if (!is_op(m, "mul")) continue;
    int k = 0;
    Node *sn = fusable_silu(g, m, 0);
    if (!sn) sn = fusable_silu(g, m, k = 1);
    if (!sn) continue;
    drop_node[sn->id] = true;
    drop_tensor[m->in[k]->id] = true;
    Tensor *u = m->in[1 - k];
    m->op = silu_mul; // no attributes, as mul
    m->in[0] = sn->in[0];
    m->in[1] = u;
    fused++;
  }
  if (fused) compact(g, drop_node, drop_tensor);
  graph_link_uses(g);
  return true;
}

// Gradient rules as code, for the ops whose rule no declarative entry of their row can state
// (ir/ops.h GradEntry covers "input slot s gets bwd_op(dy, inputs, outputs)" and pass-through).
// A rule gets the autodiff pass's services as a GradApi table of function pointers, so the
// registry never calls compiler/ by name; it asks which inputs need a gradient (needed), takes
// the gradients flowing into the outputs (output) and emits one internal backward node per input
// (emit), or one node for several inputs (emit_joint). Whether that node is an input-gradient (B) or weight-gradient (W) node, and how
// parameter gradients accumulate over microbatches, is decided by the pass.
#include "ops_impl.h"

// split's gradient concatenates the gradients of all its outputs (any number of them); an
// output nobody differentiates contributes zeros.
bool grad_split(const GradApi *g, const Node *n) {
  if (!g->needed(g->c, n, 0)) return true;
  Tensor **dys = ARENA_ARRAY(g->arena, Tensor *, n->nout);
  for (int k = 0; k < n->nout; k++) {
    dys[k] = g->output(g->c, n, k);
    if (!dys[k]) dys[k] = g->zeros(g->c, n->out[k]);
  }
  g->emit(g->c, n, 0, "split.dx", dys, n->nout);
  return true;
}

// silu_mul's gradient (SwiGLU's gate y = silu(g) * u, made by the fuse pass): one node writes both
// dg and du from dy, g and u (pr_silu_mul_bwd). The pass fuses only activations, never a
// parameter, so the joint node always applies.
bool grad_silu_mul(const GradApi *g, const Node *n) {
  Tensor *ins[3] = {g->output(g->c, n, 0), n->in[0], n->in[1]};
  return g->emit_joint(g->c, n, (const int[]){0, 1}, 2, "silu_mul.d", ins, 3) != NULL;
}

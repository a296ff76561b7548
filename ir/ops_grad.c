// Gradient rules of op set v1. Each rule asks which inputs need a gradient (grad_needed), takes
// the gradient flowing into the outputs (grad_output) and emits one internal backward node per
// input (grad_emit), reading whatever the forward pass saved (inputs, outputs, hidden outputs).
// Whether a backward node is an input-gradient (B) or weight-gradient (W) node, and how
// parameter gradients accumulate over microbatches, is decided by the autodiff pass.
#include "ops_impl.h"

// Emits bwd for every differentiable input slot listed in slots (-1 terminated), with inputs
// built by make(slot).
#define EACH_SLOT(n, c, s)                                                                         \
  for (int s = 0; s < (n)->nin; s++)                                                               \
    if (grad_needed(c, n, s))

bool grad_matmul(GradCtx *c, const Node *n) {
  Tensor *dy = grad_output(c, n, 0);
  if (grad_needed(c, n, 0)) grad_emit(c, n, 0, "matmul.da", (Tensor *[]){dy, n->in[1]}, 2);
  if (grad_needed(c, n, 1)) grad_emit(c, n, 1, "matmul.db", (Tensor *[]){dy, n->in[0]}, 2);
  return true;
}

bool grad_linear(GradCtx *c, const Node *n) {
  Tensor *dy = grad_output(c, n, 0);
  if (grad_needed(c, n, 0)) grad_emit(c, n, 0, "linear.dx", (Tensor *[]){dy, n->in[1]}, 2);
  if (grad_needed(c, n, 1)) grad_emit(c, n, 1, "linear.dw", (Tensor *[]){dy, n->in[0]}, 2);
  if (n->nin == 3 && grad_needed(c, n, 2)) grad_emit(c, n, 2, "sum_rows", (Tensor *[]){dy}, 1);
  return true;
}

bool grad_binary(GradCtx *c, const Node *n) {
  Tensor *dy = grad_output(c, n, 0);
  bool mul = n->op->name[0] == 'm';
  EACH_SLOT(n, c, s) {
    bool same = shape_eq(&n->in[s]->shape, &n->out[0]->shape);
    if (same && (n->op->name[0] == 'a' || (n->op->name[0] == 's' && s == 0)))
      grad_pass(c, n, s, dy);
    else if (mul)
      grad_emit(c, n, s, "binary.d", (Tensor *[]){dy, n->in[1 - s]}, 2);
    else
      grad_emit(c, n, s, "binary.d", (Tensor *[]){dy}, 1);
  }
  return true;
}

bool grad_scale(GradCtx *c, const Node *n) {
  if (grad_needed(c, n, 0)) grad_emit(c, n, 0, "scale.dx", (Tensor *[]){grad_output(c, n, 0)}, 1);
  return true;
}

// relu, tanh, sigmoid differentiate through their output; gelu through its input.
bool grad_unary(GradCtx *c, const Node *n) {
  if (!grad_needed(c, n, 0)) return true;
  static const struct {
    const char *op, *bwd;
    bool uses_x;
  } map[] = {{"relu", "relu.dx", false},
             {"gelu", "gelu.dx", true},
             {"tanh", "tanh.dx", false},
             {"sigmoid", "sigmoid.dx", false},
             {"softmax", "softmax.dx", false}};
  for (unsigned i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(n->op->name, map[i].op) == 0) {
      Tensor *saved = map[i].uses_x ? n->in[0] : n->out[0];
      grad_emit(c, n, 0, map[i].bwd, (Tensor *[]){grad_output(c, n, 0), saved}, 2);
      return true;
    }
  return false;
}

bool grad_layernorm(GradCtx *c, const Node *n) {
  Tensor *dy = grad_output(c, n, 0), *mean = n->out[1], *rstd = n->out[2];
  if (grad_needed(c, n, 0))
    grad_emit(c, n, 0, "layernorm.dx", (Tensor *[]){dy, n->in[0], n->in[1], mean, rstd}, 5);
  if (grad_needed(c, n, 1))
    grad_emit(c, n, 1, "layernorm.dw", (Tensor *[]){dy, n->in[0], mean, rstd}, 4);
  if (n->nin == 3 && grad_needed(c, n, 2)) grad_emit(c, n, 2, "sum_rows", (Tensor *[]){dy}, 1);
  return true;
}

bool grad_embedding(GradCtx *c, const Node *n) {
  if (grad_needed(c, n, 1))
    grad_emit(c, n, 1, "embedding.dw", (Tensor *[]){grad_output(c, n, 0), n->in[0]}, 2);
  return true;
}

bool grad_reshape(GradCtx *c, const Node *n) {
  if (grad_needed(c, n, 0)) grad_emit(c, n, 0, "copy", (Tensor *[]){grad_output(c, n, 0)}, 1);
  return true;
}

bool grad_permute(GradCtx *c, const Node *n) {
  if (grad_needed(c, n, 0)) grad_emit(c, n, 0, "permute.dx", (Tensor *[]){grad_output(c, n, 0)}, 1);
  return true;
}

// split's gradient concatenates the outputs' gradients; an output nobody differentiates
// contributes zeros.
bool grad_split(GradCtx *c, const Node *n) {
  if (!grad_needed(c, n, 0)) return true;
  Tensor **dys = ARENA_ARRAY(grad_arena(c), Tensor *, n->nout);
  for (int k = 0; k < n->nout; k++) {
    dys[k] = grad_output(c, n, k);
    if (!dys[k]) dys[k] = grad_zeros(c, n->out[k]);
  }
  grad_emit(c, n, 0, "split.dx", dys, n->nout);
  return true;
}

bool grad_concat(GradCtx *c, const Node *n) {
  Tensor *dy = grad_output(c, n, 0);
  EACH_SLOT(n, c, s) grad_emit(c, n, s, "concat.dx", (Tensor *[]){dy}, 1);
  return true;
}

bool grad_attention(GradCtx *c, const Node *n) {
  if (grad_needed(c, n, 0))
    grad_emit(c, n, 0, "attention.dx", (Tensor *[]){grad_output(c, n, 0), n->in[0], n->out[1]}, 3);
  return true;
}

bool grad_cross_entropy(GradCtx *c, const Node *n) {
  if (grad_needed(c, n, 0))
    grad_emit(c, n, 0, "cross_entropy.dx", (Tensor *[]){grad_output(c, n, 0), n->in[0], n->in[1]},
              3);
  return true;
}

bool grad_mse(GradCtx *c, const Node *n) {
  Tensor *dy = grad_output(c, n, 0);
  EACH_SLOT(n, c, s) grad_emit(c, n, s, "mse.dx", (Tensor *[]){dy, n->in[0], n->in[1]}, 3);
  return true;
}

// precision.c: which tensors a --precision bf16|fp16 program stores in 16 bits (Tensor.half).
//
// The rule is a property of each tensor alone, never of the partition or the schedule, so the
// rounding to 16 bits happens at the same points whatever S, the schedule or the placement (the
// bitwise promise across S): a node's output stored in 16 bits is rounded when its f32 result is
// stored, and a message between ranks copies those 16-bit buffers, lossless. 16 bits: the
// parameters (the copies the kernels read; the f32 master weights are the optimizer's, memplan
// and trainloop.c) and every f32 activation and activation gradient of rank >= 1 that is not a
// model output or a saved statistic (hidden: layernorm's mean and rstd, attention's
// probabilities) and not a per-step buffer (a parameter gradient accumulator). The rest stays
// f32: the loss and its seed, the constants, the data inputs, the model outputs and the
// accuracy's logits (the host reads them as f32), the saved statistics and the parameter
// gradients. Kernels compute in f32 (codegen widens the 16-bit
// operands of each call into the rank's conversion area and narrows the results back).
#include "pipeline.h"
#include "precision.h"

void precision_mark(Graph *g, DType prec, const Tensor *logits) {
  for (int i = 0; i < g->ntensors; i++) {
    Tensor *t = g->tensors[i];
    bool act = t->kind == T_ACT && !t->hidden && !t->per_step && t->shape.rank >= 1 &&
               !graph_is_output(g, t) && t != logits;
    t->half = prec != DT_F32 && t->dtype == DT_F32 && (t->kind == T_PARAM || act);
  }
}

int64_t precision_conv_size(const Tensor *t, int64_t batch) {
  return (shape_numel(&t->shape, batch) * 4 + 63) / 64 * 64;
}

int64_t precision_conv_bytes(const Node *n, int64_t batch) {
  int64_t b = 0;
  for (int k = 0; k < n->nout; k++)
    if (n->out[k]->half) b += precision_conv_size(n->out[k], batch);
  for (int j = 0; j < n->nin; j++)
    if (n->in[j]->half) b += precision_conv_size(n->in[j], batch);
  return b;
}

int precision_elem_size(const Tensor *t) {
  return t->half ? 2 : dtype_size(t->dtype);
}

int precision_param_elem_size(const Tensor *p, int slots) {
  int f = dtype_size(p->dtype);
  return p->half ? 2 + f + slots * f + f : f * (2 + slots);
}

const char *precision_note(DType prec) {
  return prec == DT_BF16 ? ", bf16 storage" : prec == DT_F16 ? ", fp16 storage" : "";
}

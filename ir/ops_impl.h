// Internal to the op registry: the functions the table in ops.c points at, by concern —
// shape rules, costs and declarative gradient rules (ops.c), kernel arguments (ops_kernel.c),
// gradient rules as code (ops_grad.c).
#ifndef PIPEC_OPS_IMPL_H
#define PIPEC_OPS_IMPL_H

#include <string.h>

#include "ops.h"

// Kernel arguments (ops_kernel.c)
void kargs_matmul(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_linear(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_sum_rows(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_binary(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_binary_d(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_n(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_scale(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_gelu(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_neg(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_pow(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_div_d(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_mean(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_slice_op(const Node *n, int64_t batch, Arena *a, KArgs *o);
// slice node n's range [start, end) along its (normalised) axis, the attributes normalised.
void slice_bounds(const Node *n, int axis, int64_t *start, int64_t *end);
void kargs_softmax(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_layernorm(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_embedding(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_copy(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_permute(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_split(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_concat(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_slice(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_attention(const Node *n, int64_t batch, Arena *a, KArgs *o);
int64_t ws_attention(const Node *n, int64_t batch);
void kargs_rope(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_cross_entropy(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_mse(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_add_n(const Node *n, int64_t batch, Arena *a, KArgs *o);

// Gradient rules as code (ops_grad.c); every other op declares its rule in its row.
bool grad_split(const GradApi *g, const Node *n);
bool grad_silu_mul(const GradApi *g, const Node *n);

#endif

// Internal to the op registry: the functions the table in ops.c points at, by concern —
// shape rules and costs (ops.c), kernel arguments (ops_kernel.c), gradient rules (ops_grad.c).
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
void kargs_cross_entropy(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_mse(const Node *n, int64_t batch, Arena *a, KArgs *o);
void kargs_add_n(const Node *n, int64_t batch, Arena *a, KArgs *o);

// Gradient rules (ops_grad.c)
bool grad_matmul(GradCtx *c, const Node *n);
bool grad_linear(GradCtx *c, const Node *n);
bool grad_binary(GradCtx *c, const Node *n);
bool grad_scale(GradCtx *c, const Node *n);
bool grad_unary(GradCtx *c, const Node *n);
bool grad_layernorm(GradCtx *c, const Node *n);
bool grad_embedding(GradCtx *c, const Node *n);
bool grad_reshape(GradCtx *c, const Node *n);
bool grad_permute(GradCtx *c, const Node *n);
bool grad_split(GradCtx *c, const Node *n);
bool grad_concat(GradCtx *c, const Node *n);
bool grad_attention(GradCtx *c, const Node *n);
bool grad_cross_entropy(GradCtx *c, const Node *n);
bool grad_mse(GradCtx *c, const Node *n);

#endif

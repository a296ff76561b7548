// gelu_impl.h: the gelu's per-element arithmetic (internal to the runtime), shared by its kernels
// (kernels_elementwise.c: pr_gelu_fwd, pr_gelu_bwd) and the GEMM epilogues that apply it to a
// finished block of a product (kernels_fused.c): the same static inline expressions in both, so a
// fused and a separate gelu compute every element with the same float operations, the same bits.
// Include it only from a file compiled without FMA contraction (the runtime's -ffp-contract=off
// and its files' fp-contract pragma).
#ifndef PIPERT_GELU_IMPL_H
#define PIPERT_GELU_IMPL_H

#include "kernels_common.h"

// gelu; exact = 0: the tanh approximation (torch.nn.functional.gelu(approximate='tanh')):
// y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as x * s with
// s = 0.5 (1 + tanh(u)) = 1/(1 + e^{-2u}) (one exp, one division; s flushed to 0 where e^{-2u}
// would exceed e^80, i.e. x below about -9.7, to keep denormals out).
#define GELU_BETA  0.7978845608028654f
#define GELU_KAPPA 0.044715f
static inline float gelu_s(float v) {
  float m2u = -2.0f * (GELU_BETA * (v + GELU_KAPPA * (v * v * v)));
  float s = 1.0f / (1.0f + exp_f(m2u));
  return m2u > 80.0f ? 0.0f : s;
}
// The exact gelu (approximate "none", torch.nn.GELU()): y = x Phi(x), Phi the normal CDF,
// Phi(x) = 0.5 (1 + erf(x / sqrt 2)) = 0.5 erfc(-x / sqrt 2). erfc(z), z = |x| / sqrt 2 >= 0, by
// the Chebyshev fit of Numerical Recipes' erfcc: t e^{-z^2 + P(t)}, t = 1/(1 + z/2), P of degree
// 9, relative error below 1.2e-7 for every z, so the tail (x < 0, where Phi is tiny) is as
// accurate as the middle. q = erfc(z)/2; Phi = 1 - q for x >= 0 and q below (no cancellation).
// Branch-free; NaN propagates. In three steps (t; the exponent a = P(t) - z^2; q and Phi) so that
// gelu_phi_block can run each step over a block: see there.
static inline float gelu_phi_t(float v) {
  return 1.0f / FMA(0.5f, fabsf(v) * 0.70710678118654752f, 1.0f);
}
static inline float gelu_phi_a(float v, float t) {
  float z = fabsf(v) * 0.70710678118654752f;
  float p = 0.17087277f;
  p = FMA(p, t, -0.82215223f);
  p = FMA(p, t, 1.48851587f);
  p = FMA(p, t, -1.13520398f);
  p = FMA(p, t, 0.27886807f);
  p = FMA(p, t, -0.18628806f);
  p = FMA(p, t, 0.09678418f);
  p = FMA(p, t, 0.37409196f);
  p = FMA(p, t, 1.00002368f);
  p = FMA(p, t, -1.26551223f);
  return p - z * z;
}
static inline float gelu_phi_c(float v, float t, float a) {
  float q = 0.5f * (t * exp_f(a));
  return v >= 0.0f ? 1.0f - q : q;
}
static inline float gelu_phi(float v) {
  float t = gelu_phi_t(v);
  return gelu_phi_c(v, t, gelu_phi_a(v, t));
}
// c (m <= GELU_BLK) = gelu_phi(x), bit for bit, each of its steps as one loop over the block
// (t and a kept in the block's arrays). Why: one element's chain (a division, ten dependent
// multiply-adds, the exp's dozen) is ~200 cycles of latency, more than the core's scheduler can
// overlap across the vector iterations of a single loop, which ran it at ~5 cycles per element
// (latency-bound: 1.7 ns/el in L1 where its ~65 vector ops per 16 lanes need ~0.9). Three short
// chains fill the scheduler with independent iterations: 1.1 ns/el in L1 (x86-64-v4).
#define GELU_BLK 256
static inline void gelu_phi_block(float *restrict c, const float *restrict x, int64_t m) {
  float t[GELU_BLK], a[GELU_BLK];
  for (int64_t j = 0; j < m; j++) t[j] = gelu_phi_t(x[j]);
  for (int64_t j = 0; j < m; j++) a[j] = gelu_phi_a(x[j], t[j]);
  for (int64_t j = 0; j < m; j++) c[j] = gelu_phi_c(x[j], t[j], a[j]);
}
// d/dx x Phi(x) = Phi(x) + x phi(x), phi(x) = e^{-x^2/2} / sqrt(2 pi); c = Phi(x), the forward's
// saved factor or recomputed.
static inline float gelu_exact_grad_c(float v, float c) {
  return c + v * (0.3989422804014327f * exp_f(-0.5f * (v * v)));
}

// dy/dx = s + x * s (1 - s) * 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// (= PyTorch's 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2) with t = 2s - 1);
// s the forward's saved factor or recomputed.
static inline float gelu_grad_c(float v, float s) {
  return s + (v * (s * (1.0f - s))) * ((2.0f * GELU_BETA) * (1.0f + (3.0f * GELU_KAPPA) * (v * v)));
}

// The forward on a block (m <= GELU_BLK): y = x * c, c = Phi(x) (exact) or s (tanh), c stored in
// cdf unless it is NULL. pr_gelu_fwd runs it on its blocks, the GEMM epilogue on its pieces.
static inline void gelu_fwd_block(float *restrict y, float *restrict cdf, const float *restrict x,
                                  int64_t m, int exact) {
  float cl[GELU_BLK], *restrict c = cdf ? cdf : cl;
  if (exact)
    gelu_phi_block(c, x, m);
  else
    for (int64_t j = 0; j < m; j++) c[j] = gelu_s(x[j]);
  for (int64_t j = 0; j < m; j++) y[j] = x[j] * c[j];
}

// The backward on n elements: dx (+)= dy * gelu'(x), with the forward's saved factor cdf (NULL:
// recomputed, the same expressions: the same bits). pr_gelu_bwd runs it on each thread's range,
// the GEMM epilogue on its pieces.
static inline void gelu_bwd_rows(float *restrict dx, const float *restrict dy,
                                 const float *restrict x, const float *restrict cdf, int64_t n,
                                 int exact, int acc) {
  if (cdf && exact && acc)
    for (int64_t j = 0; j < n; j++) dx[j] = dx[j] + dy[j] * gelu_exact_grad_c(x[j], cdf[j]);
  else if (cdf && exact)
    for (int64_t j = 0; j < n; j++) dx[j] = dy[j] * gelu_exact_grad_c(x[j], cdf[j]);
  else if (cdf && acc)
    for (int64_t j = 0; j < n; j++) dx[j] = dx[j] + dy[j] * gelu_grad_c(x[j], cdf[j]);
  else if (cdf)
    for (int64_t j = 0; j < n; j++) dx[j] = dy[j] * gelu_grad_c(x[j], cdf[j]);
  else if (exact && acc)
    for (int64_t j = 0; j < n; j++) dx[j] = dx[j] + dy[j] * gelu_exact_grad_c(x[j], gelu_phi(x[j]));
  else if (exact)
    for (int64_t j = 0; j < n; j++) dx[j] = dy[j] * gelu_exact_grad_c(x[j], gelu_phi(x[j]));
  else if (acc)
    for (int64_t j = 0; j < n; j++) dx[j] = dx[j] + dy[j] * gelu_grad_c(x[j], gelu_s(x[j]));
  else
    for (int64_t j = 0; j < n; j++) dx[j] = dy[j] * gelu_grad_c(x[j], gelu_s(x[j]));
}
#endif // PIPERT_GELU_IMPL_H

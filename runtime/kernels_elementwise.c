// kernels_elementwise.c: the elementwise kernels: broadcasting binary ops (add, sub, mul) and
// their reducing backward, scale, the activations (relu, gelu, tanh, sigmoid), fill, add_n and
// accumulate.
//
// Simple loops that GCC vectorises at -O3, threaded with PR_PARALLEL_FOR (parallel.h) over
// independent outputs. Broadcast dims in a backward are reduced by visiting y in ascending
// row-major order; add_n sums its inputs left to right. tanh and sigmoid use branch-free float
// versions of their functions (~1-2 ulp) so that their loops vectorise. The exact gelu's forward,
// whose per-element chain is too long for one loop to overlap, runs its steps as separate loops
// over blocks of 256 (gelu_phi_block), with the same operations per element.
#pragma GCC optimize("fp-contract=off", "no-trapping-math")

#include "kernels_common.h"

// tanh(x), ~2 ulp: an odd polynomial (Cephes tanhf) for |x| < 0.625, 1 - 2/(e^{2|x|}+1) above.
static inline float tanh_f(float x) {
  float ax = fabsf(x);
  float z = x * x;
  float p = -5.70498872745e-3f;
  p = FMA(p, z, 2.06390887954e-2f);
  p = FMA(p, z, -5.37397155531e-2f);
  p = FMA(p, z, 1.33314422036e-1f);
  p = FMA(p, z, -3.33332819422e-1f);
  float small = FMA(p * z, x, x);
  float e = exp_f(2.0f * ax);
  float large = copysignf(1.0f - 2.0f / (e + 1.0f), x);
  return ax < 0.625f ? small : large;
}

// 1/(1+e^-x), computed from e^-|x| so that both tails are accurate.
static inline float sigmoid_f(float x) {
  float e = exp_f(-fabsf(x));
  float s = 1.0f / (1.0f + e);
  return x >= 0.0f ? s : e * s;
}
// ---------------------------------------------------------------------------------------------
// Broadcasting binary ops (dims collapsed first: collapse() in kernels_common.h).

#define BIN_LOOP(EXPR)                                                                             \
  do {                                                                                             \
    if (as == 1 && bs == 1)                                                                        \
      for (int64_t i = 0; i < n; i++) {                                                            \
        float av = a[i], bv = b[i];                                                                \
        y[i] = EXPR;                                                                               \
      }                                                                                            \
    else if (as == 1 && bs == 0) {                                                                 \
      float bv = b[0];                                                                             \
      for (int64_t i = 0; i < n; i++) {                                                            \
        float av = a[i];                                                                           \
        y[i] = EXPR;                                                                               \
      }                                                                                            \
    } else if (as == 0 && bs == 1) {                                                               \
      float av = a[0];                                                                             \
      for (int64_t i = 0; i < n; i++) {                                                            \
        float bv = b[i];                                                                           \
        y[i] = EXPR;                                                                               \
      }                                                                                            \
    } else                                                                                         \
      for (int64_t i = 0; i < n; i++) {                                                            \
        float av = a[i * as], bv = b[i * bs];                                                      \
        y[i] = EXPR;                                                                               \
      }                                                                                            \
  } while (0)

// y[i] = a[i*as] op b[i*bs] for n elements
static void bin_row(float *restrict y, const float *restrict a, const float *restrict b, int64_t n,
                    int64_t as, int64_t bs, int op) {
  if (op == 0)
    BIN_LOOP(av + bv);
  else if (op == 1)
    BIN_LOOP(av - bv);
  else
    BIN_LOOP(av * bv);
}

// y (ydims) = a op b with a, b read through strides astr/bstr over y's dims (0 = broadcast)
void pr_binary_fwd(float *y, const float *a, const float *b, int op, int rank, const int64_t *ydims,
                   const int64_t *astr, const int64_t *bstr) {
  prCheck(rank >= 0 && rank <= 8 && op >= 0 && op <= 2, "this is a pipec bug",
          "pr_binary_fwd: rank %d / op %d unsupported", rank, op);
  int64_t total = 1;
  for (int i = 0; i < rank; i++) total *= ydims[i];
  if (total == 0) return;
  int64_t d[8], s[2][8];
  const int64_t *strs[2] = {astr, bstr};
  int r = collapse(rank, ydims, 2, strs, d, s);
  if (r == 1) { // one flat row, split in chunks for threads
    int64_t as = s[0][0], bs = s[1][0], chunk = 8192, nch = (total + chunk - 1) / chunk;
    PR_PARALLEL_FOR(total >= PAR_MIN, (int64_t c = 0; c < nch; c++), {
      int64_t i0 = c * chunk, n = total - i0 < chunk ? total - i0 : chunk;
      bin_row(y + i0, a + i0 * as, b + i0 * bs, n, as, bs, op);
    });
    return;
  }
  int64_t inner = d[r - 1], outer = total / inner;
  PR_PARALLEL_FOR(total >= PAR_MIN, (int64_t o = 0; o < outer; o++), {
    int64_t off[2];
    row_offsets(o, r, d, 2, (const int64_t(*)[8])s, off);
    bin_row(y + o * inner, a + off[0], b + off[1], inner, s[0][r - 1], s[1][r - 1], op);
  });
}

// dx (xdims) = reduce_to_x(dy * d(a op b)/dx); dy (ydims) is contiguous. Broadcast dims are
// reduced by visiting y in ascending (row-major) order, i.e. ascending index order per element.
void pr_binary_bwd(float *dx, const float *dy, const float *other, int op, int which, int rank,
                   const int64_t *ydims, const int64_t *xdims, const int64_t *ostr, int acc) {
  prCheck(rank >= 0 && rank <= 8 && op >= 0 && op <= 2 && (op != 2 || other != NULL),
          "this is a pipec bug", "pr_binary_bwd: rank %d / op %d unsupported", rank, op);
  int64_t total = 1, nx = 1, xstr[8], zero[8] = {0};
  for (int i = rank - 1; i >= 0; i--) {
    xstr[i] = xdims[i] == 1 ? 0 : nx;
    nx *= xdims[i];
    total *= ydims[i];
  }
  float sign = (op == 1 && which == 1) ? -1.0f : 1.0f;
  const float *g = op == 2 ? other : NULL;
  if (nx == 0) return;
  if (total == 0) {
    if (!acc) memset(dx, 0, (size_t)nx * sizeof(float));
    return;
  }
  int64_t d[8], s[2][8];
  const int64_t *strs[2] = {xstr, g ? ostr : zero};
  int r = collapse(rank, ydims, 2, strs, d, s);
  if (nx == total) { // no reduction: elementwise dx = dy * g (or +-dy)
    int64_t gs = s[1][r - 1], inner = d[r - 1], outer = total / inner;
    PR_PARALLEL_FOR(total >= PAR_MIN, (int64_t o = 0; o < outer; o++), {
      int64_t off[2];
      row_offsets(o, r, d, 2, (const int64_t(*)[8])s, off);
      float *restrict xr = dx + off[0];
      const float *restrict dr = dy + o * inner;
      if (!g) {
        if (acc)
          for (int64_t i = 0; i < inner; i++) xr[i] = xr[i] + sign * dr[i];
        else
          for (int64_t i = 0; i < inner; i++) xr[i] = sign * dr[i];
      } else {
        const float *restrict gr = g + off[1];
        if (gs == 1) {
          if (acc)
            for (int64_t i = 0; i < inner; i++) xr[i] = xr[i] + dr[i] * gr[i];
          else
            for (int64_t i = 0; i < inner; i++) xr[i] = dr[i] * gr[i];
        } else {
          if (acc)
            for (int64_t i = 0; i < inner; i++) xr[i] = xr[i] + dr[i] * gr[i * gs];
          else
            for (int64_t i = 0; i < inner; i++) xr[i] = dr[i] * gr[i * gs];
        }
      }
    });
    return;
  }
  // Reduction: accumulate the contribution t (nx) over y in row-major order.
  float *t = pr_acc_target(dx, nx, acc);
  memset(t, 0, (size_t)nx * sizeof(float));
  int64_t inner = d[r - 1], outer = total / inner, xs = s[0][r - 1], gs = s[1][r - 1];
  // When x's innermost dim is kept (xs == 1), threads can own column blocks of it.
  int64_t nblk = xs == 1 ? (inner + COLBLK - 1) / COLBLK : 1;
  PR_PARALLEL_FOR(total >= PAR_MIN && nblk > 1, (int64_t blk = 0; blk < nblk; blk++), {
    int64_t j0 = xs == 1 ? blk * COLBLK : 0;
    int64_t nj = xs == 1 ? (inner - j0 < COLBLK ? inner - j0 : COLBLK) : inner;
    for (int64_t o = 0; o < outer; o++) {
      int64_t off[2];
      row_offsets(o, r, d, 2, (const int64_t(*)[8])s, off);
      const float *restrict dr = dy + o * inner + j0;
      float *restrict tr = t + off[0] + j0 * xs;
      const float *restrict gr = g ? g + off[1] + j0 * gs : NULL;
      if (xs == 1) {
        if (!g)
          for (int64_t i = 0; i < nj; i++) tr[i] += sign * dr[i];
        else if (gs == 1)
          for (int64_t i = 0; i < nj; i++) tr[i] += dr[i] * gr[i];
        else
          for (int64_t i = 0; i < nj; i++) tr[i] += dr[i] * gr[i * gs];
      } else { // xs == 0: the whole row reduces into one element, in order
        float acc_v = tr[0];
        if (!g)
          for (int64_t i = 0; i < nj; i++) acc_v += sign * dr[i];
        else
          for (int64_t i = 0; i < nj; i++) acc_v += dr[i] * gr[i * gs];
        tr[0] = acc_v;
      }
    }
  });
  pr_acc_finish(dx, t, nx, acc);
}
// ---------------------------------------------------------------------------------------------
// Elementwise unary ops over n elements
// y (n) = x * factor
void pr_scale_fwd(float *restrict y, const float *restrict x, int64_t n, float factor) {
  UNARY_FOR(y[i] = x[i] * factor);
}
void pr_scale_bwd(float *restrict dx, const float *restrict dy, int64_t n, float factor, int acc) {
  if (acc)
    UNARY_FOR(dx[i] = dx[i] + dy[i] * factor);
  else
    UNARY_FOR(dx[i] = dy[i] * factor);
}

// y (n) = max(x, 0); NaN stays NaN (written as x <= 0 ? 0 : x, so a NaN, which compares false,
// passes through like PyTorch's; every finite x, -0 included, gives what x > 0 ? x : 0 gives).
void pr_relu_fwd(float *restrict y, const float *restrict x, int64_t n) {
  UNARY_FOR(y[i] = x[i] <= 0.0f ? 0.0f : x[i]);
}
// dx = y <= 0 ? 0 : dy, PyTorch's threshold_backward(dy, y, 0): where y is NaN, dy passes.
void pr_relu_bwd(float *restrict dx, const float *restrict dy, const float *restrict y, int64_t n,
                 int acc) {
  if (acc)
    UNARY_FOR(dx[i] = dx[i] + (y[i] <= 0.0f ? 0.0f : dy[i]));
  else
    UNARY_FOR(dx[i] = y[i] <= 0.0f ? 0.0f : dy[i]);
}

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

// y = x * c with c = Phi(x) (exact) or s (tanh); c saved for the backward unless cdf is NULL.
void pr_gelu_fwd(float *restrict y, float *restrict cdf, const float *restrict x, int64_t n,
                 int exact) {
  if (exact) { // by blocks of GELU_BLK (gelu_phi_block), c in cdf or on the stack
    int64_t nb = (n + GELU_BLK - 1) / GELU_BLK;
    PR_PARALLEL_FOR(n >= PAR_MIN, (int64_t b = 0; b < nb; b++), {
      int64_t i0 = b * GELU_BLK, m = n - i0 < GELU_BLK ? n - i0 : GELU_BLK;
      float cl[GELU_BLK], *restrict c = cdf ? cdf + i0 : cl;
      const float *restrict xb = x + i0;
      float *restrict yb = y + i0;
      gelu_phi_block(c, xb, m);
      for (int64_t j = 0; j < m; j++) yb[j] = xb[j] * c[j];
    });
  } else if (cdf)
    UNARY_FOR(float c = gelu_s(x[i]); cdf[i] = c; y[i] = x[i] * c;);
  else
    UNARY_FOR(y[i] = x[i] * gelu_s(x[i]));
}
// dy/dx = s + x * s (1 - s) * 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// (= PyTorch's 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2) with t = 2s - 1);
// s the forward's saved factor or recomputed.
static inline float gelu_grad_c(float v, float s) {
  return s + (v * (s * (1.0f - s))) * ((2.0f * GELU_BETA) * (1.0f + (3.0f * GELU_KAPPA) * (v * v)));
}
// cdf: the forward's saved c, or NULL to recompute it (the same expressions: the same bits).
void pr_gelu_bwd(float *restrict dx, const float *restrict dy, const float *restrict x,
                 const float *restrict cdf, int64_t n, int exact, int acc) {
  if (cdf) {
    if (exact && acc)
      UNARY_FOR(dx[i] = dx[i] + dy[i] * gelu_exact_grad_c(x[i], cdf[i]));
    else if (exact)
      UNARY_FOR(dx[i] = dy[i] * gelu_exact_grad_c(x[i], cdf[i]));
    else if (acc)
      UNARY_FOR(dx[i] = dx[i] + dy[i] * gelu_grad_c(x[i], cdf[i]));
    else
      UNARY_FOR(dx[i] = dy[i] * gelu_grad_c(x[i], cdf[i]));
  } else if (exact && acc)
    UNARY_FOR(dx[i] = dx[i] + dy[i] * gelu_exact_grad_c(x[i], gelu_phi(x[i])));
  else if (exact)
    UNARY_FOR(dx[i] = dy[i] * gelu_exact_grad_c(x[i], gelu_phi(x[i])));
  else if (acc)
    UNARY_FOR(dx[i] = dx[i] + dy[i] * gelu_grad_c(x[i], gelu_s(x[i])));
  else
    UNARY_FOR(dx[i] = dy[i] * gelu_grad_c(x[i], gelu_s(x[i])));
}

// y (n) = tanh(x); backward from y: dy (1 - y^2)
void pr_tanh_fwd(float *restrict y, const float *restrict x, int64_t n) {
  UNARY_FOR(y[i] = tanh_f(x[i]));
}
void pr_tanh_bwd(float *restrict dx, const float *restrict dy, const float *restrict y, int64_t n,
                 int acc) {
  if (acc)
    UNARY_FOR(dx[i] = dx[i] + dy[i] * (1.0f - y[i] * y[i]));
  else
    UNARY_FOR(dx[i] = dy[i] * (1.0f - y[i] * y[i]));
}

// y (n) = 1/(1+e^-x); backward from y: dy y (1 - y)
void pr_sigmoid_fwd(float *restrict y, const float *restrict x, int64_t n) {
  UNARY_FOR(y[i] = sigmoid_f(x[i]));
}
void pr_sigmoid_bwd(float *restrict dx, const float *restrict dy, const float *restrict y,
                    int64_t n, int acc) {
  if (acc)
    UNARY_FOR(dx[i] = dx[i] + dy[i] * (y[i] * (1.0f - y[i])));
  else
    UNARY_FOR(dx[i] = dy[i] * (y[i] * (1.0f - y[i])));
}
// ---------------------------------------------------------------------------------------------
// Sums and fills

// y (n) = xs[0] + xs[1] + ... + xs[k-1], left to right; y may alias any input.
void pr_add_n(float *y, const float *const *xs, int k, int64_t n) {
  if (k <= 0) {
    memset(y, 0, (size_t)n * sizeof(float));
    return;
  }
  int64_t nblk = (n + 255) / 256;
  PR_PARALLEL_FOR(n * k >= PAR_MIN, (int64_t blk = 0; blk < nblk; blk++), {
    int64_t i0 = blk * 256, m = n - i0 < 256 ? n - i0 : 256;
    float t[256];
    for (int64_t i = 0; i < m; i++) t[i] = xs[0][i0 + i];
    for (int j = 1; j < k; j++) {
      const float *restrict x = xs[j] + i0;
      for (int64_t i = 0; i < m; i++) t[i] += x[i];
    }
    memcpy(y + i0, t, (size_t)m * sizeof(float));
  });
}

void pr_fill(float *y, int64_t n, float value) {
  for (int64_t i = 0; i < n; i++) y[i] = value;
}
// y (n) = acc ? y + x : x (a parameter gradient whose kernel cannot accumulate itself)
void pr_accumulate(float *restrict y, const float *restrict x, int64_t n, int acc) {
  if (acc)
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
  else
    memcpy(y, x, (size_t)n * sizeof(float));
}

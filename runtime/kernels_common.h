// kernels_common.h: what the kernel files share (internal to the runtime; the kernels' contract
// is in pipert.h). The kernels of op set v1 are split by family, in the style of llm.c's llmc/:
// kernels_gemm.c (matmul, linear, sum_rows), kernels_elementwise.c (binary ops, scale,
// activations, fill, add_n, accumulate), kernels_norm.c (softmax, layernorm),
// kernels_embedding.c, kernels_layout.c (copy, permute, split, concat, slice),
// kernels_attention.c and kernels_loss.c (cross-entropy, mse, count_correct); kernels_common.c
// holds the scratch and accumulate helpers declared here.
//
// Plain C: dense row-major float32 tensors, every size passed in. Every output element is
// computed by one thread in an order fixed by the shapes alone, so results are bitwise the same
// whatever the thread count: simple loops that GCC vectorises at -O3, parallelised with
// PR_PARALLEL_FOR (a static `omp parallel for`, parallel.h) over independent outputs (rows,
// column blocks, (b,h)); reductions into one element (softmax sums, layernorm moments, dots) use
// 8 fixed lanes combined in a fixed tree; reductions over rows run in ascending row order.
// `acc` = 1 means out = out + contribution with the contribution rounded first (GEMMs write it to
// scratch, never beta = 1), so accumulating a microbatch adds exactly what acc = 0 would produce.
// Floating-point contraction is off in every kernel file so that every expression rounds as
// written, and FMA/fma8 are a multiply and an add rounded separately: a program computes the same
// bits whether it was built for the x86-64 baseline or with -march=native (which has hardware FMA).
// Each kernels_*.c therefore starts with `#pragma GCC optimize("fp-contract=off",
// "no-trapping-math")` before any include, so that the inline helpers below compile under it too.
// exp (and tanh/sigmoid/gelu built on it) are branch-free float versions (~1-2 ulp) so that their
// loops vectorise.
//
// Threading goes through parallel.h's PR_PARALLEL_FOR and PR_PARALLEL (never a serialized
// OpenMP region: no allocation in libgomp). Here: the parallelism thresholds, the per-thread kernel
// scratch, the accumulate helpers and the id check (kernels_common.c); inline: the fixed-lane
// reductions and exp, the dims collapsing shared by the broadcasting binary ops and permute, and
// the row softmax shared by softmax, attention and cross-entropy.
#ifndef PIPERT_KERNELS_COMMON_H
#define PIPERT_KERNELS_COMMON_H

#include "parallel.h"
#include "pipert.h"

#include <math.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

// a*b + c with two roundings in every build (never fused: see the top of this file).
#define FMA(a, b, c) ((a) * (b) + (c))

// Below this many elements (or units of work) a kernel runs on one thread.
#define PAR_MIN ((int64_t)1 << 15)
// Columns of an output that one thread owns in a reduction over rows (sum_rows, binary_bwd,
// layernorm_bwd_w).
#define COLBLK 64

// An elementwise loop over i in [0, n), threaded above PAR_MIN elements: UNARY_FOR(y[i] = ...).
#define UNARY_FOR(...) PR_PARALLEL_FOR(n >= PAR_MIN, (int64_t i = 0; i < n; i++), __VA_ARGS__)

// Kernel scratch (kernels_common.c): a per-thread stack; blocks are released with
// pr_scratch_free in any order. pr_release_scratch (pipert.h) frees every thread's buffer.
void *pr_scratch(size_t bytes);
void pr_scratch_free(void *p);

// Where a kernel computes its contribution: the output itself, or (acc) scratch that
// acc_finish then adds into the output and releases.
float *pr_acc_target(float *out, int64_t n, int acc);
void pr_acc_finish(float *out, float *t, int64_t n, int acc);

// prChecks that every idx[i] (n of them) lies in [0, V); `what` names the kernel in the error.
void pr_check_ids(const char *what, const int32_t *idx, int64_t n, int64_t V);

// The fixed-lane reductions: 8 lanes, lane j taking elements j, j + 8, j + 16, ..., combined in a
// fixed tree (tree8), then the tail in order. With AVX2 (the v3, v4 and native builds) the 8 lanes
// are one GCC vector (v8f), lane j doing exactly lane j's operations, so the bits are those of the
// loops over l[8] that the baseline build keeps: GCC 12 compiles those loops badly at v3/v4 (scalar
// code, or vectorised across 16 steps of i and regrouped with shuffles; sum_f 50 -> 12 ns,
// dot_f 67 -> 15 ns at n = 128, x86-64-v4), while in the baseline build an 8-float vector is two
// SSE halves and was the slower form (max_f 22 -> 115 ns at n = 65).
#ifdef __AVX2__
typedef float v8f __attribute__((vector_size(32))); // the 8 lanes
static inline v8f ld8(const float *p) {             // 8 floats from p, any alignment
  v8f v;
  memcpy(&v, p, sizeof v);
  return v;
}
#endif
static inline float tree8(const float *l) {
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}
#ifdef __AVX2__
// tree8 on the lanes of a vector, read in place (a copy to an array went through the stack in
// pieces: store-forwarding stalls).
static inline float tree8v(v8f l) {
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}
#endif

// Sum of x[0..n).
static inline float sum_f(const float *restrict x, int64_t n) {
  int64_t i = 0;
#ifdef __AVX2__
  v8f v = {0, 0, 0, 0, 0, 0, 0, 0};
  for (; i + 8 <= n; i += 8) v = v + ld8(x + i);
  float s = tree8v(v);
#else
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) l[j] += x[i + j];
  float s = tree8(l);
#endif
  for (; i < n; i++) s += x[i];
  return s;
}

// Sum of (x[i] - m)^2.
static inline float sumsq_centered_f(const float *restrict x, float m, int64_t n) {
  int64_t i = 0;
#ifdef __AVX2__
  v8f v = {0, 0, 0, 0, 0, 0, 0, 0};
  for (; i + 8 <= n; i += 8) {
    v8f d = ld8(x + i) - m;
    v = FMA(d, d, v);
  }
  float s = tree8v(v);
#else
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) {
      float d = x[i + j] - m;
      l[j] = FMA(d, d, l[j]);
    }
  float s = tree8(l);
#endif
  for (; i < n; i++) {
    float d = x[i] - m;
    s = FMA(d, d, s);
  }
  return s;
}

// Dot product of x and y.
static inline float dot_f(const float *restrict x, const float *restrict y, int64_t n) {
  int64_t i = 0;
#ifdef __AVX2__
  v8f v = {0, 0, 0, 0, 0, 0, 0, 0};
  for (; i + 8 <= n; i += 8) v = FMA(ld8(x + i), ld8(y + i), v);
  float s = tree8v(v);
#else
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) l[j] = FMA(x[i + j], y[i + j], l[j]);
  float s = tree8(l);
#endif
  for (; i < n; i++) s = FMA(x[i], y[i], s);
  return s;
}

// Maximum of x[0..n) (n >= 1), lane j over elements j, j + 8, ..., then the lanes in order, then
// the tail; a NaN anywhere may or may not win, the results downstream are NaN either way
// (exp(NaN - m) or exp(x - NaN)).
static inline float max_f(const float *restrict x, int64_t n) {
  float m;
  int64_t i = 1;
  if (n >= 8) {
#ifdef __AVX2__
    v8f l = ld8(x);
    for (i = 8; i + 8 <= n; i += 8) // l = x > l ? x : l, lane by lane: MAXPS(x, l) exactly
      l = _mm256_max_ps(ld8(x + i), l);
#else
    float l[8];
    for (int j = 0; j < 8; j++) l[j] = x[j];
    for (i = 8; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; j++) l[j] = x[i + j] > l[j] ? x[i + j] : l[j];
#endif
    m = l[0];
    for (int j = 1; j < 8; j++) m = l[j] > m ? l[j] : m;
  } else
    m = x[0];
  for (; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

static inline uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// e^x, ~1 ulp (Cephes expf polynomial), branch-free. NaN propagates; x < -87.3 gives 0; x above
// 88 gives e^88 (large enough for every use here: softmax, tanh, sigmoid).
static inline float exp_f(float x) {
  float xc = x > 88.0f ? 88.0f : x;
  xc = xc < -87.0f ? -87.0f : xc;
  // n = round(x / ln 2) via the 1.5 * 2^23 trick; its integer sits in the low mantissa bits.
  float t = FMA(xc, 1.44269504088896341f, 12582912.0f);
  float n = t - 12582912.0f;
  float r = FMA(n, -0.693359375f, xc);
  r = FMA(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = FMA(p, r, 1.3981999507e-3f);
  p = FMA(p, r, 8.3334519073e-3f);
  p = FMA(p, r, 4.1665795894e-2f);
  p = FMA(p, r, 1.6666665459e-1f);
  p = FMA(p, r, 5.0000001201e-1f);
  p = FMA(p, r * r, r) + 1.0f;
  float scale = u2f((f2u(t) - 0x4B400000u + 127u) << 23); // 2^n
  float e = p * scale;
  return x < -87.3f ? 0.0f : e;
}
// Dims collapsing for strided loops: size-1 dims dropped, neighbours merged where every operand's
// strides allow, so the common cases become one or two flat loops.

// Collapses y's dims with nops stride arrays; returns the new rank (>= 1).
static inline int collapse(int rank, const int64_t *ydims, int nops, const int64_t *const *strs,
                           int64_t *d, int64_t (*s)[8]) {
  int r = 0;
  for (int i = 0; i < rank; i++) {
    if (ydims[i] == 1) continue;
    if (r > 0) {
      // merge dim i into the previous one when prev stride == stride(i) * size(i) for every op
      int ok = 1;
      for (int k = 0; k < nops; k++) ok &= s[k][r - 1] == strs[k][i] * ydims[i];
      if (ok) {
        d[r - 1] *= ydims[i];
        for (int k = 0; k < nops; k++) s[k][r - 1] = strs[k][i];
        continue;
      }
    }
    d[r] = ydims[i];
    for (int k = 0; k < nops; k++) s[k][r] = strs[k][i];
    r++;
  }
  if (r == 0) {
    d[0] = 1;
    for (int k = 0; k < nops; k++) s[k][0] = 0;
    r = 1;
  }
  return r;
}

// Offsets of outer row o (over dims 0..r-2 of d) for nops stride arrays.
static inline void row_offsets(int64_t o, int r, const int64_t *d, int nops, const int64_t (*s)[8],
                               int64_t *off) {
  for (int k = 0; k < nops; k++) off[k] = 0;
  for (int i = r - 2; i >= 0; i--) {
    int64_t q = o % d[i];
    o /= d[i];
    for (int k = 0; k < nops; k++) off[k] += q * s[k][i];
  }
}

// one contiguous row: y (n) = softmax(x (n))
static inline void softmax_row(float *restrict y, const float *restrict x, int64_t n) {
  float m = max_f(x, n);
  for (int64_t i = 0; i < n; i++) y[i] = exp_f(x[i] - m);
  float inv = 1.0f / sum_f(y, n);
  for (int64_t i = 0; i < n; i++) y[i] = y[i] * inv;
}

#endif // PIPERT_KERNELS_COMMON_H

// kernels_elementwise.c: the elementwise kernels: broadcasting binary ops (add, sub, mul, div)
// and their reducing backward, scale, the activations (relu, gelu, tanh, sigmoid, silu, and
// SwiGLU's gate silu(g) * u), exp, rsqrt, pow by a constant, fill, add_n and accumulate.
//
// Simple loops that GCC vectorises at -O3, threaded with PR_PARALLEL_FOR (parallel.h) over
// independent outputs. Broadcast dims in a backward are reduced by visiting y in ascending
// row-major order; add_n sums its inputs left to right. tanh and sigmoid use branch-free float
// versions of their functions (~1-2 ulp) so that their loops vectorise. The exact gelu's forward,
// whose per-element chain is too long for one loop to overlap, runs its steps as separate loops
// over blocks of 256 (gelu_phi_block), with the same operations per element. The gelu's
// per-element arithmetic is in gelu_impl.h, shared with the GEMM epilogues (kernels_fused.c).
#pragma GCC optimize("fp-contract=off", "no-trapping-math")

#include "gelu_impl.h"
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
  else if (op == 2)
    BIN_LOOP(av * bv);
  else
    BIN_LOOP(av / bv);
}

// y (ydims) = a op b with a, b read through strides astr/bstr over y's dims (0 = broadcast)
void pr_binary_fwd(float *y, const float *a, const float *b, int op, int rank, const int64_t *ydims,
                   const int64_t *astr, const int64_t *bstr) {
  prCheck(rank >= 0 && rank <= 8 && op >= 0 && op <= 3, "this is a pipec bug",
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
// div's gradients, operand which: a (which 0) gets dy / b, b (which 1) gets (-dy * a) / (b * b),
// each reduced over the dims the operand broadcasts in pr_binary_bwd's order (y visited in
// ascending row-major order; threads own blocks of the operand's innermost dim when it is kept).
static inline float div_d(int which, float dy, float a, float b) {
  return which == 0 ? dy / b : (-dy * a) / (b * b);
}
void pr_div_bwd(float *dx, const float *dy, const float *a, const float *b, int which, int rank,
                const int64_t *ydims, const int64_t *xdims, const int64_t *astr,
                const int64_t *bstr, int acc) {
  prCheck(rank >= 0 && rank <= 8 && (which == 0 || which == 1), "this is a pipec bug",
          "pr_div_bwd: rank %d / operand %d unsupported", rank, which);
  int64_t total = 1, nx = 1, xstr[8];
  for (int i = rank - 1; i >= 0; i--) {
    xstr[i] = xdims[i] == 1 ? 0 : nx;
    nx *= xdims[i];
    total *= ydims[i];
  }
  if (nx == 0) return;
  if (total == 0) {
    if (!acc) memset(dx, 0, (size_t)nx * sizeof(float));
    return;
  }
  int64_t d[8], s[3][8];
  const int64_t *strs[3] = {xstr, astr, bstr};
  int r = collapse(rank, ydims, 3, strs, d, s);
  int64_t inner = d[r - 1], outer = total / inner;
  int64_t xs = s[0][r - 1], as = s[1][r - 1], bs = s[2][r - 1];
  bool reduce = nx != total;
  float *t = reduce ? pr_acc_target(dx, nx, acc) : dx;
  if (reduce) memset(t, 0, (size_t)nx * sizeof(float));
  int tacc = reduce || acc; // t accumulates (a reduction, or acc into dx)
  // Without a reduction each y element has its own x element: threads over rows. With one,
  // threads own column blocks of x's kept innermost dim (xs == 1), else one thread.
  int64_t nblk = !reduce ? 1 : xs == 1 ? (inner + COLBLK - 1) / COLBLK : 1;
  if (!reduce) {
    PR_PARALLEL_FOR(total >= PAR_MIN, (int64_t o = 0; o < outer; o++), {
      int64_t off[3];
      row_offsets(o, r, d, 3, (const int64_t(*)[8])s, off);
      const float *dr = dy + o * inner;
      float *tr = t + off[0];
      for (int64_t i = 0; i < inner; i++) {
        float v = div_d(which, dr[i], a[off[1] + i * as], b[off[2] + i * bs]);
        tr[i * xs] = tacc ? tr[i * xs] + v : v;
      }
    });
  } else {
    PR_PARALLEL_FOR(total >= PAR_MIN && nblk > 1, (int64_t blk = 0; blk < nblk; blk++), {
      int64_t j0 = xs == 1 ? blk * COLBLK : 0;
      int64_t nj = xs == 1 ? (inner - j0 < COLBLK ? inner - j0 : COLBLK) : inner;
      for (int64_t o = 0; o < outer; o++) {
        int64_t off[3];
        row_offsets(o, r, d, 3, (const int64_t(*)[8])s, off);
        const float *dr = dy + o * inner;
        float *tr = t + off[0];
        for (int64_t i = j0; i < j0 + nj; i++)
          tr[i * xs] += div_d(which, dr[i], a[off[1] + i * as], b[off[2] + i * bs]);
      }
    });
    pr_acc_finish(dx, t, nx, acc);
  }
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

// y = x * c with c = Phi(x) (exact) or s (tanh); c saved for the backward unless cdf is NULL.
// By blocks of GELU_BLK (gelu_fwd_block; the exact form's steps each a loop over the block).
void pr_gelu_fwd(float *restrict y, float *restrict cdf, const float *restrict x, int64_t n,
                 int exact) {
  int64_t nb = (n + GELU_BLK - 1) / GELU_BLK;
  PR_PARALLEL_FOR(n >= PAR_MIN, (int64_t b = 0; b < nb; b++), {
    int64_t i0 = b * GELU_BLK, m = n - i0 < GELU_BLK ? n - i0 : GELU_BLK;
    gelu_fwd_block(y + i0, cdf ? cdf + i0 : NULL, x + i0, m, exact);
  });
}
// cdf: the forward's saved c, or NULL to recompute it; each thread's contiguous range in one
// gelu_bwd_rows call.
void pr_gelu_bwd(float *restrict dx, const float *restrict dy, const float *restrict x,
                 const float *restrict cdf, int64_t n, int exact, int acc) {
  int nt = n >= PAR_MIN ? pr_threads() : 1;
  PR_PARALLEL_FOR(nt > 1, (int t = 0; t < nt; t++), {
    int64_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
    gelu_bwd_rows(dx + i0, dy + i0, x + i0, cdf ? cdf + i0 : NULL, i1 - i0, exact, acc);
  });
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

// y (n) = x * s, s = sigmoid(x) as pr_sigmoid_fwd computes it: the bits of the decomposed form
// mul(x, sigmoid(x)). Backward from x with s recomputed (one exp per element rather than a saved
// tensor of x's size): dy (s (1 + x (1 - s))).
static inline float silu_grad(float x) {
  float s = sigmoid_f(x);
  return s * (1.0f + x * (1.0f - s));
}
void pr_silu_fwd(float *restrict y, const float *restrict x, int64_t n) {
  UNARY_FOR(y[i] = x[i] * sigmoid_f(x[i]));
}
void pr_silu_bwd(float *restrict dx, const float *restrict dy, const float *restrict x, int64_t n,
                 int acc) {
  if (acc)
    UNARY_FOR(dx[i] = dx[i] + dy[i] * silu_grad(x[i]));
  else
    UNARY_FOR(dx[i] = dy[i] * silu_grad(x[i]));
}

// SwiGLU's gate, silu(g) * u (the compiler's silu_mul, ir/ops.c): the bits of pr_silu_fwd's s
// then pr_binary_fwd's s * u. The backward computes both gradients in one pass with the
// unfused sequence's expressions: ds = dy * u (pr_binary_bwd), dg = ds * silu_grad(g)
// (pr_silu_bwd), du = dy * s with s recomputed as the forward's.
void pr_silu_mul_fwd(float *restrict y, const float *restrict g, const float *restrict u,
                     int64_t n) {
  UNARY_FOR({
    float s = g[i] * sigmoid_f(g[i]);
    y[i] = s * u[i];
  });
}
void pr_silu_mul_bwd(float *restrict dg, float *restrict du, const float *restrict dy,
                     const float *restrict g, const float *restrict u, int64_t n, int acc) {
  if (acc)
    UNARY_FOR({
      float sg = sigmoid_f(g[i]), s = g[i] * sg, ds = dy[i] * u[i];
      dg[i] = dg[i] + ds * (sg * (1.0f + g[i] * (1.0f - sg)));
      du[i] = du[i] + dy[i] * s;
    });
  else
    UNARY_FOR({
      float sg = sigmoid_f(g[i]), s = g[i] * sg, ds = dy[i] * u[i];
      dg[i] = ds * (sg * (1.0f + g[i] * (1.0f - sg)));
      du[i] = dy[i] * s;
    });
}

// ---------------------------------------------------------------------------------------------
// exp, rsqrt and pow by a constant (neg runs pr_scale_fwd/bwd with factor -1)

// e^x over float's range: exp_f below 88, (e^{x/2})^2 above (exp_f stops at e^88; the square
// overflows to inf past 88.72 as expf does), ~2 ulp there. 0 below -87.3 (results under 2^-126).
static inline float exp_full(float x) {
  float h = exp_f(0.5f * x);
  return x > 88.0f ? h * h : exp_f(x);
}
void pr_exp_fwd(float *restrict y, const float *restrict x, int64_t n) {
  UNARY_FOR(y[i] = exp_full(x[i]));
}
void pr_exp_bwd(float *restrict dx, const float *restrict dy, const float *restrict y, int64_t n,
                int acc) {
  if (acc)
    UNARY_FOR(dx[i] = dx[i] + dy[i] * y[i]);
  else
    UNARY_FOR(dx[i] = dy[i] * y[i]);
}

// 1 / sqrt(x): two correctly rounded steps (inf at 0, NaN below 0, as torch.rsqrt).
void pr_rsqrt_fwd(float *restrict y, const float *restrict x, int64_t n) {
  UNARY_FOR(y[i] = 1.0f / sqrtf(x[i]));
}
// d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 y^3.
void pr_rsqrt_bwd(float *restrict dx, const float *restrict dy, const float *restrict y, int64_t n,
                  int acc) {
  if (acc)
    UNARY_FOR(dx[i] = dx[i] + dy[i] * (-0.5f * (y[i] * y[i] * y[i])));
  else
    UNARY_FOR(dx[i] = dy[i] * (-0.5f * (y[i] * y[i] * y[i])));
}

// x^k for an integer 0 <= k <= PR_POW_MAX_INT by squaring, the products in a fixed order (x^2 is
// x * x, x^3 is x * (x * x)): exact for small k, the device's bits too.
static inline float ipow_f(float x, int k) {
  float r = 1.0f, b = x;
  for (; k; k >>= 1) {
    if (k & 1) r = r * b;
    if (k > 1) b = b * b;
  }
  return r;
}
// x^e: an integer e with |e| <= PR_POW_MAX_INT by products (1 / x^-e below 0), any other e
// powf's (NaN for x < 0 as torch.pow; the device's powf may differ by an ulp).
static inline float pow_e(float x, float e, int k) {
  if (k == INT32_MIN) return powf(x, e);
  return k >= 0 ? ipow_f(x, k) : 1.0f / ipow_f(x, -k);
}
void pr_pow_fwd(float *restrict y, const float *restrict x, int64_t n, float exponent) {
  int k = pr_pow_int(exponent);
  UNARY_FOR(y[i] = pow_e(x[i], exponent, k));
}
// dy * (e * x^(e-1)); e = 0: 0 (torch's pow_backward), whatever x is.
void pr_pow_bwd(float *restrict dx, const float *restrict dy, const float *restrict x, int64_t n,
                float exponent, int acc) {
  float e = exponent, e1 = exponent - 1.0f;
  int k = pr_pow_int(e1);
  if (e == 0.0f) {
    if (!acc) UNARY_FOR(dx[i] = 0.0f);
    return;
  }
  if (acc)
    UNARY_FOR(dx[i] = dx[i] + dy[i] * (e * pow_e(x[i], e1, k)));
  else
    UNARY_FOR(dx[i] = dy[i] * (e * pow_e(x[i], e1, k)));
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

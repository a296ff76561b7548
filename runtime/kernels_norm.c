// kernels_norm.c: the normalisations: softmax over the middle dim of (outer,dim,inner), layernorm
// and rms_norm over the last dim, forward and backward; the residual add fused into the layernorm
// that reads it (pr_add_layernorm_fwd); the mean over the middle dim of (outer,dim,inner).
//
// Moments, sums and dots of a row use the fixed 8-lane reductions of kernels_common.h (layernorm
// and rms_norm reduce four rows at once, each in its own lanes: the same bits); a strided
// softmax (inner > 1) vectorises across a block of the inner dim and walks dim in order;
// layernorm's and rms_norm's weight gradients reduce over rows in ascending order with threads
// owning column blocks. The row softmax itself (softmax_row) is shared with attention and
// cross-entropy.
#pragma GCC optimize("fp-contract=off", "no-trapping-math")

#include "kernels_common.h"

// ---------------------------------------------------------------------------------------------
// softmax over the middle dim of (outer,dim,inner); rows (inner == 1) use softmax_row

#define INBLK 64
void pr_softmax_fwd(float *y, const float *x, int64_t outer, int64_t dim, int64_t inner) {
  if (outer == 0 || dim == 0 || inner == 0) return;
  if (inner == 1) {
    PR_PARALLEL_FOR(outer * dim >= PAR_MIN, (int64_t o = 0; o < outer; o++),
                    softmax_row(y + o * dim, x + o * dim, dim));
    return;
  }
  // strided: vectorise across a block of the inner dim, walk dim sequentially
  int64_t nblk = (inner + INBLK - 1) / INBLK;
  PR_PARALLEL_FOR(outer * dim * inner >= PAR_MIN, (int64_t ob = 0; ob < outer * nblk; ob++), {
    int64_t o = ob / nblk, j0 = (ob % nblk) * INBLK, nj = inner - j0 < INBLK ? inner - j0 : INBLK;
    const float *xo = x + o * dim * inner + j0;
    float *yo = y + o * dim * inner + j0;
    float m[INBLK], s[INBLK];
    for (int64_t j = 0; j < nj; j++) m[j] = xo[j], s[j] = 0.0f;
    for (int64_t k = 1; k < dim; k++)
      for (int64_t j = 0; j < nj; j++) m[j] = xo[k * inner + j] > m[j] ? xo[k * inner + j] : m[j];
    for (int64_t k = 0; k < dim; k++)
      for (int64_t j = 0; j < nj; j++) {
        float e = exp_f(xo[k * inner + j] - m[j]);
        yo[k * inner + j] = e;
        s[j] += e;
      }
    for (int64_t j = 0; j < nj; j++) s[j] = 1.0f / s[j];
    for (int64_t k = 0; k < dim; k++)
      for (int64_t j = 0; j < nj; j++) yo[k * inner + j] = yo[k * inner + j] * s[j];
  });
}

// dx = y * (dy - sum_dim(y * dy))
void pr_softmax_bwd(float *dx, const float *dy, const float *y, int64_t outer, int64_t dim,
                    int64_t inner, int acc) {
  if (outer == 0 || dim == 0 || inner == 0) return;
  if (inner == 1) {
    PR_PARALLEL_FOR(outer * dim >= PAR_MIN, (int64_t o = 0; o < outer; o++), {
      const float *restrict yr = y + o * dim, *restrict dr = dy + o * dim;
      float *restrict xr = dx + o * dim;
      float dot = dot_f(yr, dr, dim);
      if (acc)
        for (int64_t i = 0; i < dim; i++) xr[i] = xr[i] + yr[i] * (dr[i] - dot);
      else
        for (int64_t i = 0; i < dim; i++) xr[i] = yr[i] * (dr[i] - dot);
    });
    return;
  }
  int64_t nblk = (inner + INBLK - 1) / INBLK;
  PR_PARALLEL_FOR(outer * dim * inner >= PAR_MIN, (int64_t ob = 0; ob < outer * nblk; ob++), {
    int64_t o = ob / nblk, j0 = (ob % nblk) * INBLK, nj = inner - j0 < INBLK ? inner - j0 : INBLK;
    int64_t base = o * dim * inner + j0;
    const float *yo = y + base, *dyo = dy + base;
    float *dxo = dx + base;
    float s[INBLK] = {0};
    for (int64_t k = 0; k < dim; k++)
      for (int64_t j = 0; j < nj; j++) s[j] = FMA(yo[k * inner + j], dyo[k * inner + j], s[j]);
    for (int64_t k = 0; k < dim; k++)
      for (int64_t j = 0; j < nj; j++) {
        int64_t e = k * inner + j;
        float v = yo[e] * (dyo[e] - s[j]);
        dxo[e] = acc ? dxo[e] + v : v;
      }
  });
}

// ---------------------------------------------------------------------------------------------
// layernorm over the last dim C of (rows,C); mean, rstd (rows) saved

// Four rows' fixed-lane reductions at once: per row the lanes, tree and tail of sum_f,
// sumsq_centered_f and dot_f (kernels_common.h), so the bits of four calls, with their add chains
// interleaved instead of one row's latency after another's. With AVX2 each row's 8 lanes are one
// v8f, as in the one-row helpers: written as loops over l[4][8], GCC 12 vectorised the loop over i
// instead (16 steps of i per vector, then shuffles to regroup the lanes), which ran dot4_f at 4x
// and sum4_f at 2x the time of the v8f form (C = 128, x86-64-v4). The baseline build keeps the
// loops (its 8-lane vectors would be split in two SSE halves, slower there).
static inline void sum4_f(float *s, const float *const *x, int64_t n) {
  float l[4][8] = {{0}};
  int64_t i = 0;
#ifdef __AVX2__
  v8f v[4] = {{0}};
  for (; i + 8 <= n; i += 8)
    for (int r = 0; r < 4; r++) v[r] = v[r] + ld8(x[r] + i);
  memcpy(l, v, sizeof l);
#else
  for (; i + 8 <= n; i += 8)
    for (int r = 0; r < 4; r++)
      for (int j = 0; j < 8; j++) l[r][j] += x[r][i + j];
#endif
  for (int r = 0; r < 4; r++) {
    float t = tree8(l[r]);
    for (int64_t k = i; k < n; k++) t += x[r][k];
    s[r] = t;
  }
}
static inline void sumsq4_centered_f(float *s, const float *const *x, const float *m, int64_t n) {
  float l[4][8] = {{0}};
  int64_t i = 0;
#ifdef __AVX2__
  v8f v[4] = {{0}};
  for (; i + 8 <= n; i += 8)
    for (int r = 0; r < 4; r++) {
      v8f d = ld8(x[r] + i) - m[r];
      v[r] = FMA(d, d, v[r]);
    }
  memcpy(l, v, sizeof l);
#else
  for (; i + 8 <= n; i += 8)
    for (int r = 0; r < 4; r++)
      for (int j = 0; j < 8; j++) {
        float d = x[r][i + j] - m[r];
        l[r][j] = FMA(d, d, l[r][j]);
      }
#endif
  for (int r = 0; r < 4; r++) {
    float t = tree8(l[r]);
    for (int64_t k = i; k < n; k++) {
      float d = x[r][k] - m[r];
      t = FMA(d, d, t);
    }
    s[r] = t;
  }
}
static inline void dot4_f(float *s, const float *const *x, const float *const *y, int64_t n) {
  float l[4][8] = {{0}};
  int64_t i = 0;
#ifdef __AVX2__
  v8f v[4] = {{0}};
  for (; i + 8 <= n; i += 8)
    for (int r = 0; r < 4; r++) v[r] = FMA(ld8(x[r] + i), ld8(y[r] + i), v[r]);
  memcpy(l, v, sizeof l);
#else
  for (; i + 8 <= n; i += 8)
    for (int r = 0; r < 4; r++)
      for (int j = 0; j < 8; j++) l[r][j] = FMA(x[r][i + j], y[r][i + j], l[r][j]);
#endif
  for (int r = 0; r < 4; r++) {
    float t = tree8(l[r]);
    for (int64_t k = i; k < n; k++) t = FMA(x[r][k], y[r][k], t);
    s[r] = t;
  }
}

// One row of the forward from its moments' sums.
static inline void ln_row_out(float *restrict yr, float *mean, float *rstd,
                              const float *restrict xr, const float *w, const float *b, int64_t C,
                              float m, float var, float eps) {
  float s = 1.0f / sqrtf(var + eps);
  if (b)
    for (int64_t i = 0; i < C; i++) yr[i] = ((xr[i] - m) * s) * w[i] + b[i];
  else
    for (int64_t i = 0; i < C; i++) yr[i] = ((xr[i] - m) * s) * w[i];
  *mean = m;
  *rstd = s;
}

// Group g of the forward: rows 4g..4g+3 together, or one by one in the last group when shorter.
static inline void ln_group(float *y, float *mean, float *rstd, const float *x, const float *w,
                            const float *b, int64_t rows, int64_t C, float eps, int64_t g) {
  int64_t r0 = 4 * g;
  if (r0 + 4 <= rows) {
    const float *xs[4] = {x + r0 * C, x + (r0 + 1) * C, x + (r0 + 2) * C, x + (r0 + 3) * C};
    float m[4], var[4];
    sum4_f(m, xs, C);
    for (int r = 0; r < 4; r++) m[r] = m[r] / (float)C;
    sumsq4_centered_f(var, xs, m, C);
    for (int r = 0; r < 4; r++)
      ln_row_out(y + (r0 + r) * C, mean + r0 + r, rstd + r0 + r, xs[r], w, b, C, m[r],
                 var[r] / (float)C, eps); // biased variance, like PyTorch
  } else
    for (int64_t r = r0; r < rows; r++) {
      const float *restrict xr = x + r * C;
      float m = sum_f(xr, C) / (float)C;
      float var = sumsq_centered_f(xr, m, C) / (float)C;
      ln_row_out(y + r * C, mean + r, rstd + r, xr, w, b, C, m, var, eps);
    }
}

// Rows in groups of four (the last group may be shorter: its rows one by one), threads owning
// groups; every row's arithmetic is the one-row loop's.
void pr_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w,
                      const float *b, int64_t rows, int64_t C, float eps) {
  if (C == 0) return;
  int64_t groups = (rows + 3) / 4;
  PR_PARALLEL_FOR(rows * C >= PAR_MIN, (int64_t g = 0; g < groups; g++),
                  ln_group(y, mean, rstd, x, w, b, rows, C, eps, g));
}

// s = a + b over n floats (pr_binary_fwd's add).
static void add_rows(float *restrict s, const float *restrict a, const float *restrict b,
                     int64_t n) {
  for (int64_t i = 0; i < n; i++) s[i] = a[i] + b[i];
}

// The residual add fused into the layernorm that reads it: per group of four rows, the sum's
// rows s = a + b (pr_binary_fwd's add) and then the group's layernorm from them while they are in
// L1. A group reads its rows of a and b before it writes its rows of y, so y may lie exactly
// where a or b does (FuseDef.in_place). A sum that is not plain (another op, a broadcast, strides
// not y's) runs the two kernels.
void pr_add_layernorm_fwd(float *s, float *y, float *mean, float *rstd, const float *a,
                          const float *b, const float *w, const float *bias, int op, int rank,
                          const int64_t *ydims, const int64_t *astr, const int64_t *bstr,
                          int64_t rows, int64_t C, float eps) {
  int64_t stride = 1;
  int plain = op == 0;
  for (int i = rank - 1; i >= 0 && plain; i--) {
    plain = astr[i] == stride && bstr[i] == stride;
    stride *= ydims[i];
  }
  if (!plain || stride != rows * C || C == 0) {
    pr_binary_fwd(s, a, b, op, rank, ydims, astr, bstr);
    pr_layernorm_fwd(y, mean, rstd, s, w, bias, rows, C, eps);
    return;
  }
  int64_t groups = (rows + 3) / 4;
  PR_PARALLEL_FOR(rows * C >= PAR_MIN, (int64_t g = 0; g < groups; g++), {
    int64_t i0 = 4 * g * C, i1 = (4 * g + 4 < rows ? 4 * g + 4 : rows) * C;
    add_rows(s + i0, a + i0, b + i0, i1 - i0);
    ln_group(y, mean, rstd, s, w, bias, rows, C, eps, g); // (y may lie where a or b did)
  });
}

// dx (rows,C) = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy * w; rows in
// groups of four as the forward's.
void pr_layernorm_bwd_x(float *dx, const float *dy, const float *x, const float *w,
                        const float *mean, const float *rstd, int64_t rows, int64_t C, int acc) {
  if (C == 0) return;
  int64_t groups = (rows + 3) / 4;
  PR_PARALLEL(rows * C >= PAR_MIN, {
    float *buf = pr_scratch((size_t)(8 * C) * sizeof(float)); // dn, nm of four rows
    _Pragma("omp for schedule(static)") for (int64_t g = 0; g < groups; g++) {
      int64_t r0 = 4 * g, nr = rows - r0 < 4 ? rows - r0 : 4;
      const float *dns[4], *nms[4];
      for (int64_t q = 0; q < nr; q++) {
        int64_t r = r0 + q;
        const float *restrict xr = x + r * C, *restrict dr = dy + r * C;
        float *restrict dn = buf + 2 * q * C, *restrict nm = dn + C;
        float m = mean[r], s = rstd[r];
        for (int64_t i = 0; i < C; i++) {
          nm[i] = (xr[i] - m) * s;
          dn[i] = dr[i] * w[i];
        }
        dns[q] = dn, nms[q] = nm;
      }
      float dsum[4], dnn[4];
      if (nr == 4) {
        sum4_f(dsum, dns, C);
        dot4_f(dnn, dns, nms, C);
      } else
        for (int64_t q = 0; q < nr; q++)
          dsum[q] = sum_f(dns[q], C), dnn[q] = dot_f(dns[q], nms[q], C);
      for (int64_t q = 0; q < nr; q++) {
        const float *restrict dn = dns[q], *restrict nm = nms[q];
        float *restrict out = dx + (r0 + q) * C;
        float s = rstd[r0 + q], dn_mean = dsum[q] / (float)C, dnn_mean = dnn[q] / (float)C;
        if (acc)
          for (int64_t i = 0; i < C; i++)
            out[i] = out[i] + ((dn[i] - dn_mean) - nm[i] * dnn_mean) * s;
        else
          for (int64_t i = 0; i < C; i++) out[i] = ((dn[i] - dn_mean) - nm[i] * dnn_mean) * s;
      }
    }
    pr_scratch_free(buf);
  });
}

// dw (C) = sum over rows (ascending) of dy * norm; threads split the columns.
void pr_layernorm_bwd_w(float *dw, const float *dy, const float *x, const float *mean,
                        const float *rstd, int64_t rows, int64_t C, int acc) {
  int64_t nblk = (C + COLBLK - 1) / COLBLK;
  PR_PARALLEL_FOR(rows * C >= PAR_MIN && nblk > 1, (int64_t blk = 0; blk < nblk; blk++), {
    int64_t c0 = blk * COLBLK, nc = C - c0 < COLBLK ? C - c0 : COLBLK;
    float t[COLBLK] = {0};
    for (int64_t r = 0; r < rows; r++) {
      const float *restrict xr = x + r * C + c0, *restrict dr = dy + r * C + c0;
      float m = mean[r], s = rstd[r];
      for (int64_t j = 0; j < nc; j++) t[j] += dr[j] * ((xr[j] - m) * s);
    }
    for (int64_t j = 0; j < nc; j++) dw[c0 + j] = acc ? dw[c0 + j] + t[j] : t[j];
  });
}

// ---------------------------------------------------------------------------------------------
// rms_norm over the last dim C of (rows,C); rstd (rows) saved. Rows in groups of four as
// layernorm's: the sums of squares of four rows in dot4_f, the same bits as dot_f per row.

// One row of the forward from its sum of squares.
static inline void rms_row_out(float *restrict yr, float *rstd, const float *restrict xr,
                               const float *w, int64_t C, float ss, float eps) {
  float s = 1.0f / sqrtf(ss / (float)C + eps);
  for (int64_t i = 0; i < C; i++) yr[i] = (xr[i] * s) * w[i];
  *rstd = s;
}

// Group g of the forward: rows 4g..4g+3 together, or one by one in the last group when shorter.
static inline void rms_group(float *y, float *rstd, const float *x, const float *w, int64_t rows,
                             int64_t C, float eps, int64_t g) {
  int64_t r0 = 4 * g;
  if (r0 + 4 <= rows) {
    const float *xs[4] = {x + r0 * C, x + (r0 + 1) * C, x + (r0 + 2) * C, x + (r0 + 3) * C};
    float ss[4];
    dot4_f(ss, xs, xs, C);
    for (int r = 0; r < 4; r++)
      rms_row_out(y + (r0 + r) * C, rstd + r0 + r, xs[r], w, C, ss[r], eps);
  } else
    for (int64_t r = r0; r < rows; r++)
      rms_row_out(y + r * C, rstd + r, x + r * C, w, C, dot_f(x + r * C, x + r * C, C), eps);
}

void pr_rms_norm_fwd(float *y, float *rstd, const float *x, const float *w, int64_t rows, int64_t C,
                     float eps) {
  if (C == 0) return;
  int64_t groups = (rows + 3) / 4;
  PR_PARALLEL_FOR(rows * C >= PAR_MIN, (int64_t g = 0; g < groups; g++),
                  rms_group(y, rstd, x, w, rows, C, eps, g));
}

// dx (rows,C) = rstd * (dnorm - norm * mean(dnorm * norm)), norm = x * rstd, dnorm = dy * w (no
// mean to subtract, unlike layernorm's); rows in groups of four as the forward's.
void pr_rms_norm_bwd_x(float *dx, const float *dy, const float *x, const float *w,
                       const float *rstd, int64_t rows, int64_t C, int acc) {
  if (C == 0) return;
  int64_t groups = (rows + 3) / 4;
  PR_PARALLEL(rows * C >= PAR_MIN, {
    float *buf = pr_scratch((size_t)(8 * C) * sizeof(float)); // dn, nm of four rows
    _Pragma("omp for schedule(static)") for (int64_t g = 0; g < groups; g++) {
      int64_t r0 = 4 * g, nr = rows - r0 < 4 ? rows - r0 : 4;
      const float *dns[4], *nms[4];
      for (int64_t q = 0; q < nr; q++) {
        int64_t r = r0 + q;
        const float *restrict xr = x + r * C, *restrict dr = dy + r * C;
        float *restrict dn = buf + 2 * q * C, *restrict nm = dn + C;
        float s = rstd[r];
        for (int64_t i = 0; i < C; i++) {
          nm[i] = xr[i] * s;
          dn[i] = dr[i] * w[i];
        }
        dns[q] = dn, nms[q] = nm;
      }
      float dnn[4];
      if (nr == 4)
        dot4_f(dnn, dns, nms, C);
      else
        for (int64_t q = 0; q < nr; q++) dnn[q] = dot_f(dns[q], nms[q], C);
      for (int64_t q = 0; q < nr; q++) {
        const float *restrict dn = dns[q], *restrict nm = nms[q];
        float *restrict out = dx + (r0 + q) * C;
        float s = rstd[r0 + q], dnn_mean = dnn[q] / (float)C;
        if (acc)
          for (int64_t i = 0; i < C; i++) out[i] = out[i] + (dn[i] - nm[i] * dnn_mean) * s;
        else
          for (int64_t i = 0; i < C; i++) out[i] = (dn[i] - nm[i] * dnn_mean) * s;
      }
    }
    pr_scratch_free(buf);
  });
}

// dw (C) = sum over rows (ascending) of dy * norm; threads split the columns (layernorm_bwd_w's
// order: each column's sum the same whatever the thread count).
void pr_rms_norm_bwd_w(float *dw, const float *dy, const float *x, const float *rstd, int64_t rows,
                       int64_t C, int acc) {
  int64_t nblk = (C + COLBLK - 1) / COLBLK;
  PR_PARALLEL_FOR(rows * C >= PAR_MIN && nblk > 1, (int64_t blk = 0; blk < nblk; blk++), {
    int64_t c0 = blk * COLBLK, nc = C - c0 < COLBLK ? C - c0 : COLBLK;
    float t[COLBLK] = {0};
    for (int64_t r = 0; r < rows; r++) {
      const float *restrict xr = x + r * C + c0, *restrict dr = dy + r * C + c0;
      float s = rstd[r];
      for (int64_t j = 0; j < nc; j++) t[j] += dr[j] * (xr[j] * s);
    }
    for (int64_t j = 0; j < nc; j++) dw[c0 + j] = acc ? dw[c0 + j] + t[j] : t[j];
  });
}

// ---------------------------------------------------------------------------------------------
// mean over the middle dim of (outer,dim,inner): each output is the sum over k in ascending order
// (one thread per output element, so the bits of a plain loop at any thread count; a strided
// mean vectorises across a block of the inner dim), divided by dim. Backward: dy / dim to each k.

void pr_mean_fwd(float *y, const float *x, int64_t outer, int64_t dim, int64_t inner) {
  if (outer == 0 || inner == 0) return;
  int64_t nblk = (inner + INBLK - 1) / INBLK;
  float fdim = (float)dim;
  PR_PARALLEL_FOR(outer * dim * inner >= PAR_MIN, (int64_t ob = 0; ob < outer * nblk; ob++), {
    int64_t o = ob / nblk, j0 = (ob % nblk) * INBLK, nj = inner - j0 < INBLK ? inner - j0 : INBLK;
    const float *xo = x + o * dim * inner + j0;
    float s[INBLK];
    for (int64_t j = 0; j < nj; j++) s[j] = 0.0f;
    for (int64_t k = 0; k < dim; k++)
      for (int64_t j = 0; j < nj; j++) s[j] += xo[k * inner + j];
    for (int64_t j = 0; j < nj; j++) y[o * inner + j0 + j] = s[j] / fdim;
  });
}

void pr_mean_bwd(float *dx, const float *dy, int64_t outer, int64_t dim, int64_t inner, int acc) {
  float fdim = (float)dim;
  PR_PARALLEL_FOR(outer * dim * inner >= PAR_MIN, (int64_t r = 0; r < outer * dim; r++), {
    const float *restrict dr = dy + (r / dim) * inner;
    float *restrict xr = dx + r * inner;
    if (acc)
      for (int64_t j = 0; j < inner; j++) xr[j] = xr[j] + dr[j] / fdim;
    else
      for (int64_t j = 0; j < inner; j++) xr[j] = dr[j] / fdim;
  });
}

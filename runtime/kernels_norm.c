// kernels_norm.c: the normalisations: softmax over the middle dim of (outer,dim,inner) and
// layernorm over the last dim, forward and backward.
//
// Moments, sums and dots of a row use the fixed 8-lane reductions of kernels_common.h; a strided
// softmax (inner > 1) vectorises across a block of the inner dim and walks dim in order;
// layernorm's weight gradient reduces over rows in ascending order with threads owning column
// blocks. The row softmax itself (softmax_row) is shared with attention and cross-entropy.
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

void pr_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w,
                      const float *b, int64_t rows, int64_t C, float eps) {
  if (C == 0) return;
  PR_PARALLEL_FOR(rows * C >= PAR_MIN, (int64_t r = 0; r < rows; r++), {
    const float *restrict xr = x + r * C;
    float *restrict yr = y + r * C;
    float m = sum_f(xr, C) / (float)C;
    float var = sumsq_centered_f(xr, m, C) / (float)C; // biased, like PyTorch
    float s = 1.0f / sqrtf(var + eps);
    if (b)
      for (int64_t i = 0; i < C; i++) yr[i] = ((xr[i] - m) * s) * w[i] + b[i];
    else
      for (int64_t i = 0; i < C; i++) yr[i] = ((xr[i] - m) * s) * w[i];
    mean[r] = m;
    rstd[r] = s;
  });
}

// dx (rows,C) = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy * w
void pr_layernorm_bwd_x(float *dx, const float *dy, const float *x, const float *w,
                        const float *mean, const float *rstd, int64_t rows, int64_t C, int acc) {
  if (C == 0) return;
  PR_PARALLEL(rows * C >= PAR_MIN, {
    float *buf = pr_scratch((size_t)(2 * C) * sizeof(float));
    float *restrict dn = buf, *restrict nm = buf + C;
    _Pragma("omp for schedule(static)") for (int64_t r = 0; r < rows; r++) {
      const float *restrict xr = x + r * C, *restrict dr = dy + r * C;
      float *restrict out = dx + r * C;
      float m = mean[r], s = rstd[r];
      for (int64_t i = 0; i < C; i++) {
        nm[i] = (xr[i] - m) * s;
        dn[i] = dr[i] * w[i];
      }
      float dn_mean = sum_f(dn, C) / (float)C;
      float dnn_mean = dot_f(dn, nm, C) / (float)C;
      if (acc)
        for (int64_t i = 0; i < C; i++)
          out[i] = out[i] + ((dn[i] - dn_mean) - nm[i] * dnn_mean) * s;
      else
        for (int64_t i = 0; i < C; i++) out[i] = ((dn[i] - dn_mean) - nm[i] * dnn_mean) * s;
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

// cuda_norm.cu: softmax over the middle dim of (outer,dim,inner), layernorm and rms_norm over the
// last dim, forward and backward. A contiguous row (softmax with inner == 1, layernorm, rms_norm)
// is one block of PR_CU_THREADS threads: thread j owns elements j, j + PR_CU_THREADS, ... (summed
// in that order) and the block combines them in block_sum's fixed tree. Strided softmax: one
// thread per (outer, inner) column walking dim in order. The norms' weight gradients: one thread
// per column, rows ascending. The mean over the middle dim of (outer,dim,inner): one thread per
// output walking dim in order (the CPU's bits).
#include "cuda_common.cuh"

__global__ void mean_fwd_k(float *y, const float *x, int64_t outer, int64_t dim, int64_t inner) {
  GRID_FOR(i, outer * inner) {
    const float *xo = x + (i / inner) * dim * inner + i % inner;
    float s = 0.0f;
    for (int64_t k = 0; k < dim; k++) s += xo[k * inner];
    y[i] = s / (float)dim;
  }
}
__global__ void mean_bwd_k(float *dx, const float *dy, int64_t outer, int64_t dim, int64_t inner,
                           int acc) {
  GRID_FOR(i, outer * dim * inner) {
    float v = dy[(i / (dim * inner)) * inner + i % inner] / (float)dim;
    dx[i] = acc ? dx[i] + v : v;
  }
}
void pr_cu_mean_fwd(float *y, const float *x, int64_t outer, int64_t dim, int64_t inner) {
  if (outer * inner == 0) return;
  mean_fwd_k<<<pr_cu_blocks(outer * inner), PR_CU_THREADS, 0, pr_cu_s()>>>(y, x, outer, dim,
                                                                           inner);
  cudaCheckLaunch();
}
void pr_cu_mean_bwd(float *dx, const float *dy, int64_t outer, int64_t dim, int64_t inner,
                    int acc) {
  if (outer * dim * inner == 0) return;
  mean_bwd_k<<<pr_cu_blocks(outer * dim * inner), PR_CU_THREADS, 0, pr_cu_s()>>>(dx, dy, outer,
                                                                                 dim, inner, acc);
  cudaCheckLaunch();
}

__global__ void softmax_row_k(float *y, const float *x, int64_t dim) {
  __shared__ float sh[32];
  const float *xr = x + blockIdx.x * dim;
  float *yr = y + blockIdx.x * dim;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) m = fmaxf(m, xr[i]);
  m = block_max(m, sh);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float e = cu_exp_f(xr[i] - m);
    yr[i] = e;
    s += e;
  }
  float inv = 1.0f / block_sum(s, sh);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = yr[i] * inv;
}
__global__ void softmax_col_k(float *y, const float *x, int64_t outer, int64_t dim, int64_t inner) {
  GRID_FOR(c, outer * inner) {
    int64_t o = c / inner, j = c % inner, base = o * dim * inner + j;
    float m = x[base];
    for (int64_t k = 1; k < dim; k++) m = fmaxf(m, x[base + k * inner]);
    float s = 0.0f;
    for (int64_t k = 0; k < dim; k++) {
      float e = cu_exp_f(x[base + k * inner] - m);
      y[base + k * inner] = e;
      s += e;
    }
    float inv = 1.0f / s;
    for (int64_t k = 0; k < dim; k++) y[base + k * inner] = y[base + k * inner] * inv;
  }
}
void pr_cu_softmax_fwd(float *y, const float *x, int64_t outer, int64_t dim, int64_t inner) {
  if (outer == 0 || dim == 0 || inner == 0) return;
  if (inner == 1) {
    prCheck(outer <= INT32_MAX, "this is a pipec bug", "softmax: %lld rows", (long long)outer);
    softmax_row_k<<<(unsigned)outer, PR_CU_THREADS, 0, pr_cu_s()>>>(y, x, dim);
  } else
    softmax_col_k<<<pr_cu_blocks(outer * inner), PR_CU_THREADS, 0, pr_cu_s()>>>(y, x, outer, dim,
                                                                                inner);
  cudaCheckLaunch();
}

// dx = y * (dy - sum_dim(y * dy))
__global__ void softmax_bwd_row_k(float *dx, const float *dy, const float *y, int64_t dim,
                                  int acc) {
  __shared__ float sh[32];
  int64_t off = blockIdx.x * dim;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += y[off + i] * dy[off + i];
  float dot = block_sum(s, sh);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = y[off + i] * (dy[off + i] - dot);
    dx[off + i] = acc ? dx[off + i] + v : v;
  }
}
__global__ void softmax_bwd_col_k(float *dx, const float *dy, const float *y, int64_t outer,
                                  int64_t dim, int64_t inner, int acc) {
  GRID_FOR(c, outer * inner) {
    int64_t o = c / inner, j = c % inner, base = o * dim * inner + j;
    float s = 0.0f;
    for (int64_t k = 0; k < dim; k++) s = y[base + k * inner] * dy[base + k * inner] + s;
    for (int64_t k = 0; k < dim; k++) {
      int64_t e = base + k * inner;
      float v = y[e] * (dy[e] - s);
      dx[e] = acc ? dx[e] + v : v;
    }
  }
}
void pr_cu_softmax_bwd(float *dx, const float *dy, const float *y, int64_t outer, int64_t dim,
                       int64_t inner, int acc) {
  if (outer == 0 || dim == 0 || inner == 0) return;
  if (inner == 1) {
    prCheck(outer <= INT32_MAX, "this is a pipec bug", "softmax: %lld rows", (long long)outer);
    softmax_bwd_row_k<<<(unsigned)outer, PR_CU_THREADS, 0, pr_cu_s()>>>(dx, dy, y, dim, acc);
  } else
    softmax_bwd_col_k<<<pr_cu_blocks(outer * inner), PR_CU_THREADS, 0, pr_cu_s()>>>(
        dx, dy, y, outer, dim, inner, acc);
  cudaCheckLaunch();
}

__global__ void layernorm_fwd_k(float *y, float *mean, float *rstd, const float *x, const float *w,
                                const float *b, int64_t C, float eps) {
  __shared__ float sh[32];
  int64_t r = blockIdx.x;
  const float *xr = x + r * C;
  float *yr = y + r * C;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) s += xr[i];
  float m = block_sum(s, sh) / (float)C;
  float q = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    float d = xr[i] - m;
    q = d * d + q;
  }
  float var = block_sum(q, sh) / (float)C; // biased, like PyTorch
  float rs = 1.0f / sqrtf(var + eps);
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
    yr[i] = b ? ((xr[i] - m) * rs) * w[i] + b[i] : ((xr[i] - m) * rs) * w[i];
  if (threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
}
void pr_cu_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w,
                         const float *b, int64_t rows, int64_t C, float eps) {
  if (C == 0 || rows == 0) return;
  prCheck(rows <= INT32_MAX, "this is a pipec bug", "layernorm: %lld rows", (long long)rows);
  layernorm_fwd_k<<<(unsigned)rows, PR_CU_THREADS, 0, pr_cu_s()>>>(y, mean, rstd, x, w, b, C, eps);
  cudaCheckLaunch();
}

// dx = rstd * ((dnorm - mean(dnorm)) - norm * mean(dnorm * norm)), dnorm = dy * w
__global__ void layernorm_bwd_x_k(float *dx, const float *dy, const float *x, const float *w,
                                  const float *mean, const float *rstd, int64_t C, int acc) {
  __shared__ float sh[32];
  int64_t r = blockIdx.x, off = r * C;
  float m = mean[r], s = rstd[r], a = 0.0f, bsum = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    float nm = (x[off + i] - m) * s, dn = dy[off + i] * w[i];
    a += dn;
    bsum = dn * nm + bsum;
  }
  float dn_mean = block_sum(a, sh) / (float)C;
  float dnn_mean = block_sum(bsum, sh) / (float)C;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    float nm = (x[off + i] - m) * s, dn = dy[off + i] * w[i];
    float v = ((dn - dn_mean) - nm * dnn_mean) * s;
    dx[off + i] = acc ? dx[off + i] + v : v;
  }
}
void pr_cu_layernorm_bwd_x(float *dx, const float *dy, const float *x, const float *w,
                           const float *mean, const float *rstd, int64_t rows, int64_t C, int acc) {
  if (C == 0 || rows == 0) return;
  prCheck(rows <= INT32_MAX, "this is a pipec bug", "layernorm: %lld rows", (long long)rows);
  layernorm_bwd_x_k<<<(unsigned)rows, PR_CU_THREADS, 0, pr_cu_s()>>>(dx, dy, x, w, mean, rstd, C,
                                                                     acc);
  cudaCheckLaunch();
}

__global__ void layernorm_bwd_w_k(float *dw, const float *dy, const float *x, const float *mean,
                                  const float *rstd, int64_t rows, int64_t C, int acc) {
  GRID_FOR(c, C) {
    float t = 0.0f;
    for (int64_t r = 0; r < rows; r++) t += dy[r * C + c] * ((x[r * C + c] - mean[r]) * rstd[r]);
    dw[c] = acc ? dw[c] + t : t;
  }
}
void pr_cu_layernorm_bwd_w(float *dw, const float *dy, const float *x, const float *mean,
                           const float *rstd, int64_t rows, int64_t C, int acc) {
  if (C == 0) return;
  layernorm_bwd_w_k<<<pr_cu_blocks(C), PR_CU_THREADS, 0, pr_cu_s()>>>(dw, dy, x, mean, rstd, rows,
                                                                      C, acc);
  cudaCheckLaunch();
}

// rms_norm: y = (x * rstd) * w, rstd = 1 / sqrt(sum(x^2) / C + eps); one block per row.
__global__ void rms_norm_fwd_k(float *y, float *rstd, const float *x, const float *w, int64_t C,
                               float eps) {
  __shared__ float sh[32];
  int64_t r = blockIdx.x;
  const float *xr = x + r * C;
  float *yr = y + r * C;
  float q = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) q = xr[i] * xr[i] + q;
  float rs = 1.0f / sqrtf(block_sum(q, sh) / (float)C + eps);
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) yr[i] = (xr[i] * rs) * w[i];
  if (threadIdx.x == 0) rstd[r] = rs;
}
void pr_cu_rms_norm_fwd(float *y, float *rstd, const float *x, const float *w, int64_t rows,
                        int64_t C, float eps) {
  if (C == 0 || rows == 0) return;
  prCheck(rows <= INT32_MAX, "this is a pipec bug", "rms_norm: %lld rows", (long long)rows);
  rms_norm_fwd_k<<<(unsigned)rows, PR_CU_THREADS, 0, pr_cu_s()>>>(y, rstd, x, w, C, eps);
  cudaCheckLaunch();
}

// dx = rstd * (dnorm - norm * mean(dnorm * norm)), norm = x * rstd, dnorm = dy * w
__global__ void rms_norm_bwd_x_k(float *dx, const float *dy, const float *x, const float *w,
                                 const float *rstd, int64_t C, int acc) {
  __shared__ float sh[32];
  int64_t r = blockIdx.x, off = r * C;
  float s = rstd[r], q = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
    q = (dy[off + i] * w[i]) * (x[off + i] * s) + q;
  float dnn_mean = block_sum(q, sh) / (float)C;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    float nm = x[off + i] * s, dn = dy[off + i] * w[i];
    float v = (dn - nm * dnn_mean) * s;
    dx[off + i] = acc ? dx[off + i] + v : v;
  }
}
void pr_cu_rms_norm_bwd_x(float *dx, const float *dy, const float *x, const float *w,
                          const float *rstd, int64_t rows, int64_t C, int acc) {
  if (C == 0 || rows == 0) return;
  prCheck(rows <= INT32_MAX, "this is a pipec bug", "rms_norm: %lld rows", (long long)rows);
  rms_norm_bwd_x_k<<<(unsigned)rows, PR_CU_THREADS, 0, pr_cu_s()>>>(dx, dy, x, w, rstd, C, acc);
  cudaCheckLaunch();
}

// dw (C) = sum over rows (ascending) of dy * norm, one thread per column (layernorm_bwd_w_k's
// order).
__global__ void rms_norm_bwd_w_k(float *dw, const float *dy, const float *x, const float *rstd,
                                 int64_t rows, int64_t C, int acc) {
  GRID_FOR(c, C) {
    float t = 0.0f;
    for (int64_t r = 0; r < rows; r++) t += dy[r * C + c] * (x[r * C + c] * rstd[r]);
    dw[c] = acc ? dw[c] + t : t;
  }
}
void pr_cu_rms_norm_bwd_w(float *dw, const float *dy, const float *x, const float *rstd,
                          int64_t rows, int64_t C, int acc) {
  if (C == 0) return;
  rms_norm_bwd_w_k<<<pr_cu_blocks(C), PR_CU_THREADS, 0, pr_cu_s()>>>(dw, dy, x, rstd, rows, C, acc);
  cudaCheckLaunch();
}

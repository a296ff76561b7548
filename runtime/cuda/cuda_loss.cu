// cuda_loss.cu: cross-entropy (forward: one block per row computing the row's term in double into
// scratch, then one thread summing the terms in ascending row order, as the CPU), its backward,
// mse (fixed-split double sums: cuda_optim.cu's reduce), and count_correct.
#include "cuda_common.cuh"

__global__ void ce_terms_k(double *term, const float *logits, const int32_t *tgt, int64_t V,
                           int *flag) {
  __shared__ float sh[32];
  int64_t r = blockIdx.x;
  const float *x = logits + r * V;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, x[i]);
  m = block_max(m, sh);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) s += cu_exp_f(x[i] - m);
  s = block_sum(s, sh);
  if (threadIdx.x == 0) {
    int32_t t = tgt[r];
    if (t < 0 || t >= V) {
      *flag = 2;
      term[r] = 0.0;
    } else
      term[r] = ((double)m + log((double)s)) - (double)x[t];
  }
}
__global__ void ce_sum_k(float *loss, const double *term, int64_t rows) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double s = 0.0;
  for (int64_t r = 0; r < rows; r++) s += term[r];
  loss[0] = rows ? (float)(s / (double)rows) : 0.0f;
}
void pr_cu_cross_entropy_fwd(float *loss, const float *logits, const int32_t *tgt, int64_t rows,
                             int64_t V) {
  prCheck(rows <= INT32_MAX, "this is a pipec bug", "cross_entropy: %lld rows", (long long)rows);
  double *term =
      (double *)pr_cu_take_scratch((size_t)(rows ? rows : 1) * sizeof(double), "cross_entropy");
  if (rows > 0) {
    ce_terms_k<<<(unsigned)rows, PR_CU_THREADS, 0, pr_cu_s()>>>(term, logits, tgt, V,
                                                                pr_cu_status_flag());
    cudaCheckLaunch();
  }
  ce_sum_k<<<1, 1, 0, pr_cu_s()>>>(loss, term, rows);
  cudaCheckLaunch();
}

// dlogits = (softmax - onehot(tgt)) * dloss / rows; one block per row
__global__ void ce_bwd_k(float *dl, const float *dloss, const float *logits, const int32_t *tgt,
                         int64_t rows, int64_t V, int acc, int *flag) {
  __shared__ float sh[32];
  int64_t r = blockIdx.x;
  const float *x = logits + r * V;
  float *out = dl + r * V;
  float gscale = dloss[0] / (float)rows;
  int32_t t = tgt[r];
  if (t < 0 || t >= V) {
    if (threadIdx.x == 0) *flag = 2;
    return;
  }
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, x[i]);
  m = block_max(m, sh);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) s += cu_exp_f(x[i] - m);
  float inv = 1.0f / block_sum(s, sh);
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    float p = cu_exp_f(x[i] - m) * inv;
    if (i == t) p -= 1.0f;
    float v = p * gscale;
    out[i] = acc ? out[i] + v : v;
  }
}
void pr_cu_cross_entropy_bwd(float *dlogits, const float *dloss, const float *logits,
                             const int32_t *tgt, int64_t rows, int64_t V, int acc) {
  if (rows == 0) return;
  prCheck(rows <= INT32_MAX, "this is a pipec bug", "cross_entropy: %lld rows", (long long)rows);
  ce_bwd_k<<<(unsigned)rows, PR_CU_THREADS, 0, pr_cu_s()>>>(dlogits, dloss, logits, tgt, rows, V,
                                                            acc, pr_cu_status_flag());
  cudaCheckLaunch();
}

void pr_cu_mse_fwd(float *loss, const float *p, const float *t, int64_t n) {
  // the block sums at the start of the pool, the double result just after them
  double *pool = (double *)pr_cu_take_scratch(pr_cu_reduce_scratch(n) + sizeof(double), "mse");
  double *res = pool + pr_cu_reduce_scratch(n) / sizeof(double);
  pr_cu_reduce_sq(res, p, t, n, n ? (double)n : 1.0);
  pr_cu_double_to_float(loss, res);
}

__global__ void mse_bwd_k(float *dx, const float *dloss, const float *p, const float *t, int64_t n,
                          float sgn, int acc) {
  float g = sgn * dloss[0] / (float)n;
  GRID_FOR(i, n) {
    float v = (p[i] - t[i]) * g;
    dx[i] = acc ? dx[i] + v : v;
  }
}
void pr_cu_mse_bwd(float *dx, const float *dloss, const float *p, const float *t, int64_t n,
                   int which, int acc) {
  if (n == 0) return;
  mse_bwd_k<<<pr_cu_blocks(n), PR_CU_THREADS, 0, pr_cu_s()>>>(dx, dloss, p, t, n,
                                                              which ? -2.0f : 2.0f, acc);
  cudaCheckLaunch();
}

// ok[r] = argmax (lowest index on ties) == tgt; one thread per row, then a count in order
__global__ void correct_k(int *ok, const float *logits, const int32_t *tgt, int64_t rows,
                          int64_t V) {
  GRID_FOR(r, rows) {
    const float *x = logits + r * V;
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
      if (x[i] > x[best]) best = i;
    ok[r] = V > 0 && best == tgt[r];
  }
}
__global__ void count_k(long long *out, const int *ok, int64_t rows) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  long long c = 0;
  for (int64_t r = 0; r < rows; r++) c += ok[r];
  *out = c;
}
int64_t pr_cu_count_correct(const float *logits, const int32_t *tgt, int64_t rows, int64_t V) {
  long long *cnt = (long long *)pr_cu_take_scratch(sizeof(long long) + (size_t)rows * sizeof(int),
                                                   "count_correct");
  int *ok = (int *)(cnt + 1);
  if (rows > 0) {
    correct_k<<<pr_cu_blocks(rows), PR_CU_THREADS, 0, pr_cu_s()>>>(ok, logits, tgt, rows, V);
    cudaCheckLaunch();
  }
  count_k<<<1, 1, 0, pr_cu_s()>>>(cnt, ok, rows);
  cudaCheckLaunch();
  long long h = 0;
  pr_cu_download(&h, cnt, sizeof h);
  return (int64_t)h;
}

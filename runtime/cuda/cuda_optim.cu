// cuda_optim.cu: AdamW and SGD (optim.c's formulas element for element: float arithmetic, the
// scalars computed in double on the host and rounded to float, fmaf where optim.c has fmaf) and
// the sum of squares of a gradient, a fixed-split double reduction: block i (of PR_CU_THREADS
// threads) owns elements [i*CHUNK, (i+1)*CHUNK), thread j of it the elements j, j +
// PR_CU_THREADS, ... in order, combined in block_sum's tree; the block sums are then added in
// ascending block order by one thread. The split depends on n alone.
#include "cuda_common.cuh"

#define CHUNK ((int64_t)PR_CU_THREADS * 8) // elements per block of the reduction

__global__ void adamw_k(float *p, const float *g, float gscale, float *m, float *v, int64_t n,
                        float decay, float b1, float omb1, float b2, float omb2, float neg_step,
                        float bc2_sqrt, float epsf) {
  GRID_FOR(i, n) {
    float pi = p[i] * decay;
    float gi = g[i] * gscale;
    float mi = fmaf(gi, omb1, m[i] * b1);
    float vi = fmaf(omb2 * gi, gi, v[i] * b2);
    float denom = sqrtf(vi) / bc2_sqrt + epsf;
    p[i] = pi + (neg_step * mi) / denom;
    m[i] = mi;
    v[i] = vi;
  }
}
void pr_cu_adamw_step(float *p, const float *g, float gscale, float *m, float *v, int64_t n,
                      double lr, double beta1, double beta2, double eps, double weight_decay,
                      int64_t t) {
  prCheck(t >= 1, "the optimizer step counts from 1", "pr_cu_adamw_step: t = %lld", (long long)t);
  if (n <= 0) return;
  const double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
  adamw_k<<<pr_cu_blocks(n), PR_CU_THREADS, 0, pr_cu_s()>>>(
      p, g, gscale, m, v, n, (float)(1.0 - lr * weight_decay), (float)beta1, (float)(1.0 - beta1),
      (float)beta2, (float)(1.0 - beta2), (float)(-(lr / bc1)), (float)sqrt(bc2), (float)eps);
  cudaCheckLaunch();
}

__global__ void sgd_k(float *p, const float *g, float gscale, float *buf, int64_t n, float wd,
                      float mom, float neg_lr, int use_wd, int use_mom, int first) {
  GRID_FOR(i, n) {
    float gi = g[i] * gscale;
    float d = use_wd ? fmaf(p[i], wd, gi) : gi;
    if (use_mom) {
      d = first ? d : buf[i] * mom + d;
      buf[i] = d;
    }
    p[i] = fmaf(d, neg_lr, p[i]);
  }
}
void pr_cu_sgd_step(float *p, const float *g, float gscale, float *buf, int64_t n, double lr,
                    double momentum, double weight_decay, int64_t t) {
  prCheck(t >= 1, "the optimizer step counts from 1", "pr_cu_sgd_step: t = %lld", (long long)t);
  if (n <= 0) return;
  sgd_k<<<pr_cu_blocks(n), PR_CU_THREADS, 0, pr_cu_s()>>>(
      p, g, gscale, buf, n, (float)weight_decay, (float)momentum, (float)(-lr), weight_decay != 0.0,
      momentum != 0.0, t == 1);
  cudaCheckLaunch();
}

size_t pr_cu_reduce_scratch(int64_t n) {
  int64_t blocks = (n + CHUNK - 1) / CHUNK;
  return (size_t)(blocks ? blocks : 1) * sizeof(double);
}

// part[blockIdx.x] = sum over the block's chunk of (a - b)^2 (b NULL: a^2), in double
__global__ void sq_part_k(double *part, const float *a, const float *b, int64_t n) {
  __shared__ double sh[32];
  int64_t c0 = (int64_t)blockIdx.x * CHUNK, c1 = c0 + CHUNK < n ? c0 + CHUNK : n;
  double s = 0.0;
  for (int64_t i = c0 + threadIdx.x; i < c1; i += blockDim.x) {
    double d = b ? (double)a[i] - (double)b[i] : (double)a[i];
    s += d * d;
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}
__global__ void sum_parts_k(double *out, const double *part, int64_t nb, double divide) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double s = 0.0;
  for (int64_t i = 0; i < nb; i++) s += part[i];
  *out = s / divide;
}
void pr_cu_reduce_sq(double *out, const float *a, const float *b, int64_t n, double divide) {
  int64_t nb = (n + CHUNK - 1) / CHUNK;
  prCheck(nb <= 0x7fffffff, "this is a pipec bug", "reduction of %lld elements", (long long)n);
  double *part = (double *)pr_cu_take_scratch(pr_cu_reduce_scratch(n), "sum of squares");
  if (nb > 0) {
    sq_part_k<<<(unsigned)nb, PR_CU_THREADS, 0, pr_cu_s()>>>(part, a, b, n);
    cudaCheckLaunch();
  }
  sum_parts_k<<<1, 1, 0, pr_cu_s()>>>(out, part, nb, divide);
  cudaCheckLaunch();
}

void pr_cu_sumsq(double *out, const float *g, int64_t n) {
  pr_cu_reduce_sq(out, g, NULL, n, 1.0);
}

__global__ void d2f_k(float *dst, const double *src) {
  *dst = (float)*src;
}
void pr_cu_double_to_float(float *dst, const double *src) {
  d2f_k<<<1, 1, 0, pr_cu_s()>>>(dst, src);
  cudaCheckLaunch();
}

// cuda_common.cuh: what the CUDA kernel files share (internal): the launch helpers, the scratch
// pool, the status flag, the fixed-tree block reductions and the device twins of the CPU's
// branch-free exp/tanh/sigmoid/gelu (kernels_common.h, kernels_elementwise.c), so that
// elementwise results match the CPU's bitwise (the library is compiled with --fmad=false, as the
// CPU kernels with -ffp-contract=off).
#ifndef PIPERT_CUDA_COMMON_CUH
#define PIPERT_CUDA_COMMON_CUH

#include "cuda_check.h"
#include "pipert_cuda.h"

#include <stdint.h>

// The stream every kernel runs on and the cuBLAS handle (cuda_device.cu).
cudaStream_t pr_cu_s(void);
cublasHandle_t pr_cu_h(void);
// `bytes` of the scratch pool (stream-ordered: valid until the next kernel that takes scratch);
// prCheck when the pool is smaller. `what` names the kernel in the error.
void *pr_cu_take_scratch(size_t bytes, const char *what);
// The device int a kernel raises on a bad id (1: embedding id, 2: cross-entropy target), passed
// to the kernels that check ids (a __device__ global would need relocatable device code).
int *pr_cu_status_flag(void);

// Blocks for n independent elements (grid-stride loops cover the rest).
static inline unsigned pr_cu_blocks(int64_t n) {
  int64_t b = (n + PR_CU_THREADS - 1) / PR_CU_THREADS;
  return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}
#define GRID_FOR(i, n)                                                                             \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
       i += (int64_t)gridDim.x * blockDim.x)

// Sum over the block (PR_CU_THREADS threads) in a fixed tree: shuffles within each warp, then the
// warps' sums by the first warp. Every thread gets the result. sh: 32 floats of shared memory.
template <typename T> __device__ T block_sum(T v, T *sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  __syncthreads(); // sh may still be read by a previous call
  if (lane == 0) sh[w] = v;
  __syncthreads();
  if (w == 0) {
    v = lane < (int)(blockDim.x >> 5) ? sh[lane] : (T)0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}
__device__ inline float block_max(float v, float *sh) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  if (w == 0) {
    v = lane < (int)(blockDim.x >> 5) ? sh[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}

// e^x as kernels_common.h's exp_f (Cephes polynomial, same constants and order).
__device__ inline float cu_exp_f(float x) {
  float xc = x > 88.0f ? 88.0f : x;
  xc = xc < -87.0f ? -87.0f : xc;
  float t = xc * 1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  float r = n * -0.693359375f + xc;
  r = n * 2.12194440e-4f + r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  float scale = __uint_as_float((__float_as_uint(t) - 0x4B400000u + 127u) << 23);
  float e = p * scale;
  return x < -87.3f ? 0.0f : e;
}
__device__ inline float cu_tanh_f(float x) {
  float ax = fabsf(x), z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z + -5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z + -3.33332819422e-1f;
  float small = (p * z) * x + x;
  float e = cu_exp_f(2.0f * ax);
  float large = copysignf(1.0f - 2.0f / (e + 1.0f), x);
  return ax < 0.625f ? small : large;
}
__device__ inline float cu_sigmoid_f(float x) {
  float e = cu_exp_f(-fabsf(x));
  float s = 1.0f / (1.0f + e);
  return x >= 0.0f ? s : e * s;
}
#define CU_GELU_BETA  0.7978845608028654f
#define CU_GELU_KAPPA 0.044715f
__device__ inline float cu_gelu_s(float v) {
  float m2u = -2.0f * (CU_GELU_BETA * (v + CU_GELU_KAPPA * (v * v * v)));
  float s = 1.0f / (1.0f + cu_exp_f(m2u));
  return m2u > 80.0f ? 0.0f : s;
}
// The gradients given the forward's factor (s, or Phi for the exact form).
__device__ inline float cu_gelu_grad_c(float v, float s) {
  return s + (v * (s * (1.0f - s))) *
                 ((2.0f * CU_GELU_BETA) * (1.0f + (3.0f * CU_GELU_KAPPA) * (v * v)));
}
// The exact gelu's Phi(x) and gradient, the CPU's formulas (kernels_elementwise.c, gelu_phi):
// erfc by Numerical Recipes' erfcc fit, each product and sum rounded as written there.
__device__ inline float cu_gelu_phi(float v) {
  float z = fabsf(v) * 0.70710678118654752f;
  float t = 1.0f / (0.5f * z + 1.0f);
  float p = 0.17087277f;
  p = p * t + -0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t + -1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t + -0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t + -1.26551223f;
  float q = 0.5f * (t * cu_exp_f(p - z * z));
  return v >= 0.0f ? 1.0f - q : q;
}
__device__ inline float cu_gelu_exact_grad_c(float v, float c) {
  return c + v * (0.3989422804014327f * cu_exp_f(-0.5f * (v * v)));
}

// out = acc ? out + t : t over n (the accumulate step of a GEMM computed into scratch).
void pr_cu_add_into(float *out, const float *t, int64_t n);

// *out (device) = sum of (a - b)^2 (b NULL: a^2) over n, in double, / divide: the fixed-split
// reduction of cuda_optim.cu, its block sums in the first pr_cu_reduce_scratch(n) bytes of the
// pool.
void pr_cu_reduce_sq(double *out, const float *a, const float *b, int64_t n, double divide);
// *dst = (float)*src on the stream (device scalars).
void pr_cu_double_to_float(float *dst, const double *src);

#endif

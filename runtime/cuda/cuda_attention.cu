// cuda_attention.cu: causal multi-head self-attention on packed qkv (B,T,3C), forward (saving
// the probabilities att (B,NH,T,T)) and backward, as the CPU's kernels_attention.c defines them:
//   fwd:  att[t,s] = softmax_s<=t (q_t . k_s * scale);  y_t = sum_s att[t,s] v_s
//   bwd:  datt[t,s] = dy_t . v_s;  dpre[t,s] = scale att[t,s] (datt[t,s] - sum_s' att datt)
//         dq_t = sum_s dpre[t,s] k_s;  dk_s = sum_t>=s dpre[t,s] q_t;  dv_s = sum_t>=s att dy_t
// One block per (b,h,t) row (forward, the dq pass) or (b,h,s) column (the dk/dv pass); every dot
// over the head dim and every sum over s or t is one thread's, in ascending order; the row
// softmax uses block_sum's fixed tree. Correct and deterministic, not yet fast: a GEMM (or
// flash) formulation is future work (docs/cuda.md).
// rope (rotary position embedding, at the end): one thread per pair, the CPU's formula and angles.
#include "cuda_common.cuh"

// grid (T, B*NH); shared: T floats of scores
__global__ void attention_fwd_k(float *y, float *att, const float *qkv, int64_t T, int64_t C,
                                int64_t NH, float scale) {
  extern __shared__ float sc[];
  __shared__ float sh[32];
  int64_t t = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, hs = C / NH, C3 = 3 * C;
  const float *q = qkv + b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
  int64_t n = t + 1;
  float m = -INFINITY;
  for (int64_t s = threadIdx.x; s < n; s += blockDim.x) {
    float d = 0.0f;
    for (int64_t i = 0; i < hs; i++) d = q[t * C3 + i] * k[s * C3 + i] + d;
    sc[s] = d * scale;
    m = fmaxf(m, sc[s]);
  }
  m = block_max(m, sh);
  float sum = 0.0f;
  for (int64_t s = threadIdx.x; s < n; s += blockDim.x) {
    float e = cu_exp_f(sc[s] - m);
    sc[s] = e;
    sum += e;
  }
  float inv = 1.0f / block_sum(sum, sh); // syncs: sc complete
  float *arow = att + (bh * T + t) * T;
  for (int64_t s = threadIdx.x; s < T; s += blockDim.x) {
    float p = s < n ? sc[s] * inv : 0.0f;
    arow[s] = p;
    if (s < n) sc[s] = p;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < hs; i += blockDim.x) {
    float a = 0.0f;
    for (int64_t s = 0; s < n; s++) a = sc[s] * v[s * C3 + i] + a;
    y[(b * T + t) * C + h * hs + i] = a;
  }
}

static void check_shapes(int64_t B, int64_t T, int64_t C, int64_t NH) {
  prCheck(NH > 0 && C % NH == 0, "this is a pipec bug",
          "attention: C=%lld not divisible by %lld heads", (long long)C, (long long)NH);
  prCheck(T <= 12288 && B * NH <= 65535, "use a shorter context or fewer heads x batch per step",
          "attention on the GPU: T=%lld (at most 12288), B*NH=%lld (at most 65535)", (long long)T,
          (long long)(B * NH));
}

void pr_cu_attention_fwd(float *y, float *att, const float *qkv, int64_t B, int64_t T, int64_t C,
                         int64_t NH) {
  check_shapes(B, T, C, NH);
  if (B * T * C == 0) return;
  float scale = 1.0f / sqrtf((float)(C / NH));
  dim3 grid((unsigned)T, (unsigned)(B * NH));
  attention_fwd_k<<<grid, PR_CU_THREADS, (size_t)T * sizeof(float), pr_cu_s()>>>(y, att, qkv, T, C,
                                                                                 NH, scale);
  cudaCheckLaunch();
}

size_t pr_cu_attention_bwd_ws(int64_t B, int64_t T, int64_t C, int64_t NH) {
  (void)C;
  (void)NH;
  size_t n = (size_t)(B * NH * T * T);
  return (n ? n : 1) * sizeof(float);
}

// grid (T, B*NH): row t of dpre, then dq_t. shared: T floats (datt, then dpre)
__global__ void attention_bwd_q_k(float *dqkv, float *dpre, const float *dy, const float *qkv,
                                  const float *att, int64_t T, int64_t C, int64_t NH, float scale,
                                  int acc) {
  extern __shared__ float da[];
  __shared__ float sh[32];
  int64_t t = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, hs = C / NH, C3 = 3 * C;
  const float *q = qkv + b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
  const float *g = dy + b * T * C + h * hs, *arow = att + (bh * T + t) * T;
  int64_t n = t + 1;
  float part = 0.0f;
  for (int64_t s = threadIdx.x; s < n; s += blockDim.x) {
    float d = 0.0f;
    for (int64_t i = 0; i < hs; i++) d = g[t * C + i] * v[s * C3 + i] + d;
    da[s] = d;
    part = arow[s] * d + part;
  }
  float dot = block_sum(part, sh);
  float *prow = dpre + (bh * T + t) * T;
  for (int64_t s = threadIdx.x; s < T; s += blockDim.x) {
    float p = s < n ? scale * (arow[s] * (da[s] - dot)) : 0.0f;
    prow[s] = p;
    if (s < n) da[s] = p;
  }
  __syncthreads();
  float *dq = dqkv + b * T * C3 + h * hs + t * C3;
  for (int64_t i = threadIdx.x; i < hs; i += blockDim.x) {
    float a = 0.0f;
    for (int64_t s = 0; s < n; s++) a = da[s] * k[s * C3 + i] + a;
    dq[i] = acc ? dq[i] + a : a;
  }
}
// grid (T, B*NH): column s: dk_s and dv_s, t ascending from s
__global__ void attention_bwd_kv_k(float *dqkv, const float *dpre, const float *dy,
                                   const float *qkv, const float *att, int64_t T, int64_t C,
                                   int64_t NH, int acc) {
  int64_t s = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, hs = C / NH, C3 = 3 * C;
  const float *q = qkv + b * T * C3 + h * hs, *g = dy + b * T * C + h * hs;
  const float *a = att + bh * T * T, *p = dpre + bh * T * T;
  float *dk = dqkv + b * T * C3 + h * hs + C + s * C3, *dv = dk + C;
  for (int64_t i = threadIdx.x; i < hs; i += blockDim.x) {
    float tk = 0.0f, tv = 0.0f;
    for (int64_t t = s; t < T; t++) {
      tk = p[t * T + s] * q[t * C3 + i] + tk;
      tv = a[t * T + s] * g[t * C + i] + tv;
    }
    dk[i] = acc ? dk[i] + tk : tk;
    dv[i] = acc ? dv[i] + tv : tv;
  }
}

void pr_cu_attention_bwd(float *dqkv, const float *dy, const float *qkv, const float *att, void *ws,
                         int64_t B, int64_t T, int64_t C, int64_t NH, int acc) {
  check_shapes(B, T, C, NH);
  if (B * T * C == 0) return;
  float scale = 1.0f / sqrtf((float)(C / NH));
  dim3 grid((unsigned)T, (unsigned)(B * NH));
  float *dpre = (float *)ws;
  attention_bwd_q_k<<<grid, PR_CU_THREADS, (size_t)T * sizeof(float), pr_cu_s()>>>(
      dqkv, dpre, dy, qkv, att, T, C, NH, scale, acc);
  cudaCheckLaunch();
  attention_bwd_kv_k<<<grid, 64, 0, pr_cu_s()>>>(dqkv, dpre, dy, qkv, att, T, C, NH, acc);
  cudaCheckLaunch();
}

// ---------------------------------------------------------------------------------------------
// rope on x (outer,T,inner,D): one thread per pair (grid-stride), the CPU's angle recipe
// (kernels_attention.c: float arithmetic, pow/cos/sin in double rounded to float; the device's
// double functions and glibc's agree after that rounding but in rare ties) and its formula; sn is
// the sine's sign (-1: the backward's inverse rotation).
__global__ void rope_k(float *y, const float *x, int64_t T, int64_t inner, int64_t D, float theta,
                       int interleaved, float sn, int acc, int64_t n) {
  int64_t half = D / 2;
  GRID_FOR(k, n) {
    int64_t i = k % half, row = k / half, t = (row / inner) % T;
    float e = (float)(2 * i) / (float)D;
    float inv = 1.0f / (float)pow((double)theta, (double)e);
    float a = (float)t * inv;
    float c = (float)cos((double)a), s = sn * (float)sin((double)a);
    int64_t p = row * D + (interleaved ? 2 * i : i),
            q = row * D + (interleaved ? 2 * i + 1 : i + half);
    float yp = x[p] * c - x[q] * s, yq = x[q] * c + x[p] * s;
    y[p] = acc ? y[p] + yp : yp;
    y[q] = acc ? y[q] + yq : yq;
  }
}

static void rope(float *y, const float *x, int64_t outer, int64_t T, int64_t inner, int64_t D,
                 float theta, int interleaved, float sn, int acc) {
  int64_t n = outer * T * inner * (D / 2);
  if (n <= 0) return;
  rope_k<<<pr_cu_blocks(n), PR_CU_THREADS, 0, pr_cu_s()>>>(y, x, T, inner, D, theta, interleaved,
                                                           sn, acc, n);
  cudaCheckLaunch();
}

void pr_cu_rope_fwd(float *y, const float *x, int64_t outer, int64_t T, int64_t inner, int64_t D,
                    float theta, int interleaved) {
  rope(y, x, outer, T, inner, D, theta, interleaved, 1.0f, 0);
}
void pr_cu_rope_bwd(float *dx, const float *dy, int64_t outer, int64_t T, int64_t inner, int64_t D,
                    float theta, int interleaved, int acc) {
  rope(dx, dy, outer, T, inner, D, theta, interleaved, -1.0f, acc);
}

// cuda_attention.cu: multi-head self-attention on packed qkv (B,T,C+2Ckv) (NKV kv heads, causal
// or not), forward (saving the probabilities att (B,NH,T,T)) and backward, as the CPU's
// kernels_attention.c defines them (causal: s <= t; else every s):
//   fwd:  att[t,s] = softmax_s<=t (q_t . k_s * scale);  y_t = sum_s att[t,s] v_s
//   bwd:  datt[t,s] = dy_t . v_s;  dpre[t,s] = scale att[t,s] (datt[t,s] - sum_s' att datt)
//         dq_t = sum_s dpre[t,s] k_s;  dk_s = sum_t>=s dpre[t,s] q_t;  dv_s = sum_t>=s att dy_t
// One block per (b,h,t) row (forward, the dq pass) or (b,kv head,s) column (the dk/dv pass);
// every dot over the head dim and every sum over s or t is one thread's, in ascending order; the
// row softmax uses block_sum's fixed tree. Correct and deterministic, not yet fast: a GEMM (or
// flash) formulation is future work (docs/cuda.md).
// rope (rotary position embedding, at the end): one thread per pair, the CPU's formula and angles.
#include "cuda_common.cuh"

// Row strides and head sizes: q (and dq) rows qs floats apart, k, v (dk, dv) rows ks apart (batch
// row b at b*T*qs, b*T*ks); query head h reads kv head h / grp.
struct Heads {
  int64_t NH, hs, C, qs, ks, grp;
};
static Heads heads(int64_t C, int64_t NH, int64_t NKV, int64_t qs, int64_t ks) {
  Heads z;
  z.NH = NH, z.hs = C / NH, z.C = C, z.qs = qs, z.ks = ks, z.grp = NH / NKV;
  return z;
}

// grid (T, B*NH); shared: T floats of scores
__global__ void attention_fwd_k(float *y, float *att, const float *qb, const float *kb,
                                const float *vb, int64_t T, Heads H, int causal, float scale) {
  extern __shared__ float sc[];
  __shared__ float sh[32];
  int64_t t = blockIdx.x, bh = blockIdx.y, b = bh / H.NH, h = bh % H.NH, hs = H.hs;
  int64_t qs = H.qs, ks = H.ks;
  const float *q = qb + b * T * qs + h * hs, *k = kb + b * T * ks + (h / H.grp) * hs;
  const float *v = vb + b * T * ks + (h / H.grp) * hs;
  int64_t n = causal ? t + 1 : T;
  float m = -INFINITY;
  for (int64_t s = threadIdx.x; s < n; s += blockDim.x) {
    float d = 0.0f;
    for (int64_t i = 0; i < hs; i++) d = q[t * qs + i] * k[s * ks + i] + d;
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
    for (int64_t s = 0; s < n; s++) a = sc[s] * v[s * ks + i] + a;
    y[(b * T + t) * H.C + h * hs + i] = a;
  }
}

static void check_shapes(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV) {
  prCheck(NH > 0 && C % NH == 0 && NKV > 0 && NH % NKV == 0, "this is a pipec bug",
          "attention: C=%lld, %lld heads, %lld kv heads", (long long)C, (long long)NH,
          (long long)NKV);
  prCheck(T <= 12288 && B * NH <= 65535, "use a shorter context or fewer heads x batch per step",
          "attention on the GPU: T=%lld (at most 12288), B*NH=%lld (at most 65535)", (long long)T,
          (long long)(B * NH));
}

static void cu_fwd(float *y, float *att, const float *q, const float *k, const float *v, int64_t B,
                   int64_t T, int64_t C, int64_t NH, int64_t NKV, int causal, int64_t qs,
                   int64_t ks) {
  check_shapes(B, T, C, NH, NKV);
  if (B * T * C == 0) return;
  float scale = 1.0f / sqrtf((float)(C / NH));
  dim3 grid((unsigned)T, (unsigned)(B * NH));
  attention_fwd_k<<<grid, PR_CU_THREADS, (size_t)T * sizeof(float), pr_cu_s()>>>(
      y, att, q, k, v, T, heads(C, NH, NKV, qs, ks), causal, scale);
  cudaCheckLaunch();
}

void pr_cu_attention_fwd(float *y, float *att, const float *qkv, int64_t B, int64_t T, int64_t C,
                         int64_t NH, int64_t NKV, int causal) {
  int64_t Ckv = NH > 0 && NKV > 0 ? NKV * (C / NH) : 0, CT = C + 2 * Ckv;
  cu_fwd(y, att, qkv, qkv + C, qkv + C + Ckv, B, T, C, NH, NKV, causal, CT, CT);
}
void pr_cu_attention_sep_fwd(float *y, float *att, const float *q, const float *k, const float *v,
                             int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, int causal) {
  int64_t Ckv = NH > 0 && NKV > 0 ? NKV * (C / NH) : 0;
  cu_fwd(y, att, q, k, v, B, T, C, NH, NKV, causal, C, Ckv);
}

size_t pr_cu_attention_bwd_ws(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                              int causal) {
  (void)C;
  (void)NKV;
  (void)causal;
  size_t n = (size_t)(B * NH * T * T);
  return (n ? n : 1) * sizeof(float);
}
size_t pr_cu_attention_sep_bwd_q_ws(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                    int causal) {
  return pr_cu_attention_bwd_ws(B, T, C, NH, NKV, causal);
}
size_t pr_cu_attention_sep_bwd_k_ws(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                    int causal) {
  return pr_cu_attention_bwd_ws(B, T, C, NH, NKV, causal);
}
size_t pr_cu_attention_sep_bwd_v_ws(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                    int causal) {
  return pr_cu_attention_bwd_ws(B, T, C, NH, NKV, causal);
}

// grid (T, B*NH): row t of dpre, then dq_t (when dqb is not NULL). shared: T floats (datt, then
// dpre)
__global__ void attention_bwd_q_k(float *dqb, float *dpre, const float *dy, const float *kb,
                                  const float *vb, const float *att, int64_t T, Heads H, int causal,
                                  float scale, int acc) {
  extern __shared__ float da[];
  __shared__ float sh[32];
  int64_t t = blockIdx.x, bh = blockIdx.y, b = bh / H.NH, h = bh % H.NH, hs = H.hs, ks = H.ks;
  const float *k = kb + b * T * ks + (h / H.grp) * hs, *v = vb + b * T * ks + (h / H.grp) * hs;
  const float *g = dy + b * T * H.C + h * hs, *arow = att + (bh * T + t) * T;
  int64_t n = causal ? t + 1 : T;
  float part = 0.0f;
  for (int64_t s = threadIdx.x; s < n; s += blockDim.x) {
    float d = 0.0f;
    for (int64_t i = 0; i < hs; i++) d = g[t * H.C + i] * v[s * ks + i] + d;
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
  if (!dqb) return;
  float *dq = dqb + b * T * H.qs + h * hs + t * H.qs;
  for (int64_t i = threadIdx.x; i < hs; i += blockDim.x) {
    float a = 0.0f;
    for (int64_t s = 0; s < n; s++) a = da[s] * k[s * ks + i] + a;
    dq[i] = acc ? dq[i] + a : a;
  }
}
// grid (T, B*NKV): column s of a kv head: dk_s and dv_s (each when its pointer is not NULL),
// each query head of its group in ascending order summing over t (ascending, from s when
// causal) and added in turn (the first written, with acc 0), as the CPU orders them
__global__ void attention_bwd_kv_k(float *dkb, float *dvb, const float *dpre, const float *dy,
                                   const float *qb, const float *att, int64_t T, Heads H,
                                   int causal, int acc) {
  int64_t NKV = H.NH / H.grp, hs = H.hs, qs = H.qs, ks = H.ks;
  int64_t s = blockIdx.x, bg = blockIdx.y, b = bg / NKV, kvh = bg % NKV;
  int64_t ko = b * T * ks + kvh * hs + s * ks;
  for (int64_t j = 0; j < H.grp; j++) {
    int64_t h = kvh * H.grp + j, bh = b * H.NH + h;
    const float *q = qb + b * T * qs + h * hs, *g = dy + b * T * H.C + h * hs;
    const float *a = att + bh * T * T, *p = dpre + bh * T * T;
    int add = acc || j > 0;
    for (int64_t i = threadIdx.x; i < hs; i += blockDim.x) {
      float tk = 0.0f, tv = 0.0f;
      for (int64_t t = causal ? s : 0; t < T; t++) {
        if (dkb) tk = p[t * T + s] * q[t * qs + i] + tk;
        if (dvb) tv = a[t * T + s] * g[t * H.C + i] + tv;
      }
      if (dkb) dkb[ko + i] = add ? dkb[ko + i] + tk : tk;
      if (dvb) dvb[ko + i] = add ? dvb[ko + i] + tv : tv;
    }
  }
}

// The gradients whose pointers are not NULL: dq, dk, dv (rows as q's, k's).
static void cu_bwd(float *dq, float *dk, float *dv, const float *dy, const float *q, const float *k,
                   const float *v, const float *att, void *ws, int64_t B, int64_t T, int64_t C,
                   int64_t NH, int64_t NKV, int causal, int acc, int64_t qs, int64_t ks) {
  check_shapes(B, T, C, NH, NKV);
  if (B * T * C == 0) return;
  float scale = 1.0f / sqrtf((float)(C / NH));
  Heads H = heads(C, NH, NKV, qs, ks);
  dim3 grid((unsigned)T, (unsigned)(B * NH)), kvgrid((unsigned)T, (unsigned)(B * NKV));
  float *dpre = (float *)ws;
  if (dq || dk) {
    attention_bwd_q_k<<<grid, PR_CU_THREADS, (size_t)T * sizeof(float), pr_cu_s()>>>(
        dq, dpre, dy, k, v, att, T, H, causal, scale, acc);
    cudaCheckLaunch();
  }
  if (dk || dv) {
    attention_bwd_kv_k<<<kvgrid, 64, 0, pr_cu_s()>>>(dk, dv, dpre, dy, q, att, T, H, causal, acc);
    cudaCheckLaunch();
  }
}

void pr_cu_attention_bwd(float *dqkv, const float *dy, const float *qkv, const float *att, void *ws,
                         int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, int causal,
                         int acc) {
  int64_t Ckv = NH > 0 && NKV > 0 ? NKV * (C / NH) : 0, CT = C + 2 * Ckv;
  cu_bwd(dqkv, dqkv + C, dqkv + C + Ckv, dy, qkv, qkv + C, qkv + C + Ckv, att, ws, B, T, C, NH, NKV,
         causal, acc, CT, CT);
}
void pr_cu_attention_sep_bwd_q(float *dq, const float *dy, const float *q, const float *k,
                               const float *v, const float *att, void *ws, int64_t B, int64_t T,
                               int64_t C, int64_t NH, int64_t NKV, int causal, int acc) {
  int64_t Ckv = NH > 0 && NKV > 0 ? NKV * (C / NH) : 0;
  cu_bwd(dq, NULL, NULL, dy, q, k, v, att, ws, B, T, C, NH, NKV, causal, acc, C, Ckv);
}
void pr_cu_attention_sep_bwd_k(float *dk, const float *dy, const float *q, const float *k,
                               const float *v, const float *att, void *ws, int64_t B, int64_t T,
                               int64_t C, int64_t NH, int64_t NKV, int causal, int acc) {
  int64_t Ckv = NH > 0 && NKV > 0 ? NKV * (C / NH) : 0;
  cu_bwd(NULL, dk, NULL, dy, q, k, v, att, ws, B, T, C, NH, NKV, causal, acc, C, Ckv);
}
void pr_cu_attention_sep_bwd_v(float *dv, const float *dy, const float *q, const float *k,
                               const float *v, const float *att, void *ws, int64_t B, int64_t T,
                               int64_t C, int64_t NH, int64_t NKV, int causal, int acc) {
  int64_t Ckv = NH > 0 && NKV > 0 ? NKV * (C / NH) : 0;
  cu_bwd(NULL, NULL, dv, dy, q, k, v, att, ws, B, T, C, NH, NKV, causal, acc, C, Ckv);
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

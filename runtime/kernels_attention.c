// kernels_attention.c: causal multi-head self-attention on packed qkv (B,T,3C), forward (which
// saves the attention weights) and backward.
//
// NH heads of hs = C/NH; one (b,h) per iteration of an OpenMP loop. The inner products are
// register-blocked in 8-float vectors (32 or 8 outputs, several independent accumulator chains;
// fma8 is a multiply and an add rounded separately, as FMA) but every output is still one sum in
// ascending order.
#pragma GCC optimize("fp-contract=off", "no-trapping-math")

#include "kernels_common.h"

#include <omp.h>

// 8-float vectors (GCC vector extension) for the register-blocked attention loops.
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias)); // unaligned access
static inline v8 ld8(const float *p) {
  return *(const v8u *)p;
}
static inline void st8(float *p, v8 x) {
  *(v8u *)p = x;
}
static inline v8 bc8(float x) {
  return (v8){x, x, x, x, x, x, x, x};
}
static inline v8 fma8(v8 a, v8 b, v8 c) {
  return a * b + c; // two roundings, as FMA
}

// Scores of rows q0 (and q1 unless NULL) against kT (hs,ld), zero-padded to ld (a multiple of
// 32): sc0[s] = sum_d q0[d] kT[d*ld + s], d ascending, for s in [0, n rounded up to 32).
static void dots_kT(float *restrict sc0, float *restrict sc1, const float *restrict q0,
                    const float *restrict q1, const float *restrict kT, int64_t ld, int64_t hs,
                    int64_t n) {
  for (int64_t s0 = 0; s0 < n; s0 += 32) {
    const float *kb = kT + s0;
    v8 a0 = bc8(0), a1 = bc8(0), a2 = bc8(0), a3 = bc8(0);
    if (q1) {
      v8 b0 = bc8(0), b1 = bc8(0), b2 = bc8(0), b3 = bc8(0);
      for (int64_t d = 0; d < hs; d++) {
        const float *kd = kb + d * ld;
        v8 k0 = ld8(kd), k1 = ld8(kd + 8), k2 = ld8(kd + 16), k3 = ld8(kd + 24);
        v8 x = bc8(q0[d]), z = bc8(q1[d]);
        a0 = fma8(x, k0, a0), a1 = fma8(x, k1, a1), a2 = fma8(x, k2, a2), a3 = fma8(x, k3, a3);
        b0 = fma8(z, k0, b0), b1 = fma8(z, k1, b1), b2 = fma8(z, k2, b2), b3 = fma8(z, k3, b3);
      }
      st8(sc1 + s0, b0), st8(sc1 + s0 + 8, b1), st8(sc1 + s0 + 16, b2), st8(sc1 + s0 + 24, b3);
    } else {
      for (int64_t d = 0; d < hs; d++) {
        const float *kd = kb + d * ld;
        v8 x = bc8(q0[d]);
        a0 = fma8(x, ld8(kd), a0), a1 = fma8(x, ld8(kd + 8), a1);
        a2 = fma8(x, ld8(kd + 16), a2), a3 = fma8(x, ld8(kd + 24), a3);
      }
    }
    st8(sc0 + s0, a0), st8(sc0 + s0 + 8, a1), st8(sc0 + s0 + 16, a2), st8(sc0 + s0 + 24, a3);
  }
}

// y[d] = sum_{i in [i0,i1)} w[i*ws] x[i*xs + d] (i ascending) for d in [0, m)
static void wsum_rows(float *restrict y, const float *restrict w, int64_t ws,
                      const float *restrict x, int64_t xs, int64_t i0, int64_t i1, int64_t m) {
  int64_t d0 = 0;
  for (; d0 + 32 <= m; d0 += 32) {
    v8 a0 = bc8(0), a1 = bc8(0), a2 = bc8(0), a3 = bc8(0);
    for (int64_t i = i0; i < i1; i++) {
      v8 wi = bc8(w[i * ws]);
      const float *xr = x + i * xs + d0;
      a0 = fma8(wi, ld8(xr), a0), a1 = fma8(wi, ld8(xr + 8), a1);
      a2 = fma8(wi, ld8(xr + 16), a2), a3 = fma8(wi, ld8(xr + 24), a3);
    }
    st8(y + d0, a0), st8(y + d0 + 8, a1), st8(y + d0 + 16, a2), st8(y + d0 + 24, a3);
  }
  for (; d0 + 8 <= m; d0 += 8) {
    v8 a0 = bc8(0);
    for (int64_t i = i0; i < i1; i++) a0 = fma8(bc8(w[i * ws]), ld8(x + i * xs + d0), a0);
    st8(y + d0, a0);
  }
  for (; d0 < m; d0++) {
    float acc = 0.0f;
    for (int64_t i = i0; i < i1; i++) acc = FMA(w[i * ws], x[i * xs + d0], acc);
    y[d0] = acc;
  }
}

// Two such sums over the same i range at once (independent chains, shared loop):
// y[d] = sum_i w[i*ws] x[i*xs + d] and z[d] = sum_i u[i*us] r[i*rs + d].
static void wsum2_rows(float *restrict y, const float *restrict w, int64_t ws,
                       const float *restrict x, int64_t xs, float *restrict z,
                       const float *restrict u, int64_t us, const float *restrict r, int64_t rs,
                       int64_t i0, int64_t i1, int64_t m) {
  int64_t d0 = 0;
  for (; d0 + 32 <= m; d0 += 32) {
    v8 a0 = bc8(0), a1 = bc8(0), a2 = bc8(0), a3 = bc8(0);
    v8 b0 = bc8(0), b1 = bc8(0), b2 = bc8(0), b3 = bc8(0);
    for (int64_t i = i0; i < i1; i++) {
      v8 wi = bc8(w[i * ws]), ui = bc8(u[i * us]);
      const float *xr = x + i * xs + d0, *rr = r + i * rs + d0;
      a0 = fma8(wi, ld8(xr), a0), a1 = fma8(wi, ld8(xr + 8), a1);
      a2 = fma8(wi, ld8(xr + 16), a2), a3 = fma8(wi, ld8(xr + 24), a3);
      b0 = fma8(ui, ld8(rr), b0), b1 = fma8(ui, ld8(rr + 8), b1);
      b2 = fma8(ui, ld8(rr + 16), b2), b3 = fma8(ui, ld8(rr + 24), b3);
    }
    st8(y + d0, a0), st8(y + d0 + 8, a1), st8(y + d0 + 16, a2), st8(y + d0 + 24, a3);
    st8(z + d0, b0), st8(z + d0 + 8, b1), st8(z + d0 + 16, b2), st8(z + d0 + 24, b3);
  }
  if (d0 < m) {
    wsum_rows(y + d0, w, ws, x + d0, xs, i0, i1, m - d0);
    wsum_rows(z + d0, u, us, r + d0, rs, i0, i1, m - d0);
  }
}

// kT (hs,ld) = the head's rows x[s*xs + 0..hs) for s < T, transposed; zeros for s in [T, ld)
static void pack_T(float *restrict kT, const float *restrict x, int64_t xs, int64_t T, int64_t ld,
                   int64_t hs) {
  for (int64_t d = 0; d < hs; d++) {
    for (int64_t s = 0; s < T; s++) kT[d * ld + s] = x[s * xs + d];
    for (int64_t s = T; s < ld; s++) kT[d * ld + s] = 0.0f;
  }
}

static void write_acc(float *restrict out, const float *restrict t, int64_t n, int acc) {
  if (acc)
    for (int64_t i = 0; i < n; i++) out[i] = out[i] + t[i];
  else
    memcpy(out, t, (size_t)n * sizeof(float));
}

void pr_attention_fwd(float *y, float *att, const float *qkv, int64_t B, int64_t T, int64_t C,
                      int64_t NH) {
  prCheck(NH > 0 && C % NH == 0, "this is a pipec bug",
          "attention: C=%lld not divisible by %lld heads", (long long)C, (long long)NH);
  int64_t hs = C / NH, C3 = 3 * C, ld = (T + 31) & ~(int64_t)31;
  float scale = 1.0f / sqrtf((float)hs);
  if (B * T * C == 0) return;
  PR_PARALLEL(B * NH > 1 && B * NH * T * T * hs >= 8 * PAR_MIN, {
    float *buf = pr_scratch((size_t)(hs * ld + 2 * ld) * sizeof(float));
    float *kT = buf, *sc = buf + hs * ld; // kT (hs,ld); scores of two rows (2,ld)
    _Pragma("omp for schedule(static)") for (int64_t bh = 0; bh < B * NH; bh++) {
      int64_t b = bh / NH, h = bh % NH;
      const float *q = qkv + b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
      pack_T(kT, k, C3, T, ld, hs);
      for (int64_t t0 = 0; t0 < T; t0 += 2) { // query rows in pairs
        const float *q1 = t0 + 1 < T ? q + (t0 + 1) * C3 : NULL;
        dots_kT(sc, sc + ld, q + t0 * C3, q1, kT, ld, hs, q1 ? t0 + 2 : t0 + 1);
        for (int64_t t = t0; t < T && t < t0 + 2; t++) {
          int64_t n = t + 1;
          float *st = sc + (t - t0) * ld, *arow = att + (bh * T + t) * T;
          for (int64_t s = 0; s < n; s++) st[s] = st[s] * scale; // q_t . k_s / sqrt(hs)
          softmax_row(arow, st, n);
          for (int64_t s = n; s < T; s++) arow[s] = 0.0f;
          wsum_rows(y + (b * T + t) * C + h * hs, arow, 1, v, C3, 0, n, hs); // sum_s att v_s
        }
      }
    }
    pr_scratch_free(buf);
  });
}

// Per-thread slice of the backward's workspace: vT (hs,ld), dpre (T,ld), one row of datt (ld) and
// two of results (2,hs), floats, rounded up to 64 bytes (slices do not share cache lines).
static size_t bwd_slice_bytes(int64_t T, int64_t C, int64_t NH) {
  int64_t hs = C / NH, ld = (T + 31) & ~(int64_t)31;
  size_t bytes = (size_t)(hs * ld + T * ld + ld + 2 * hs) * sizeof(float);
  return (bytes + 63) & ~(size_t)63;
}

// Threads the backward runs on: one per (b,h) at most, and at most PR_ATTENTION_MAX_THREADS.
static int bwd_slices(int64_t B, int64_t NH) {
  return B * NH < PR_ATTENTION_MAX_THREADS ? (int)(B * NH) : PR_ATTENTION_MAX_THREADS;
}

// The planned workspace: one slice per thread the kernel may run on. ir/ops_kernel.c's
// ws_attention computes the same number for the memory plan.
size_t pr_attention_bwd_ws(int64_t B, int64_t T, int64_t C, int64_t NH) {
  if (NH <= 0 || C % NH != 0 || B * T * C == 0) return 64;
  return bwd_slice_bytes(T, C, NH) * (size_t)bwd_slices(B, NH);
}

// dqkv (B,T,3C) from dy (B,T,C), with the forward's qkv and att (B,NH,T,T):
//   datt[t,s] = dy_t . v_s;  dpre[t,s] = scale att[t,s] (datt[t,s] - sum_s' att[t,s'] datt[t,s'])
//   dq_t = sum_s dpre[t,s] k_s;  dk_s = sum_t dpre[t,s] q_t;  dv_s = sum_t att[t,s] dy_t
void pr_attention_bwd(float *dqkv, const float *dy, const float *qkv, const float *att, void *ws,
                      int64_t B, int64_t T, int64_t C, int64_t NH, int acc) {
  prCheck(NH > 0 && C % NH == 0, "this is a pipec bug",
          "attention: C=%lld not divisible by %lld heads", (long long)C, (long long)NH);
  int64_t hs = C / NH, C3 = 3 * C, ld = (T + 31) & ~(int64_t)31;
  float scale = 1.0f / sqrtf((float)hs);
  if (B * T * C == 0) return;
  // The region runs on the whole team, as every other kernel's does (a team of another size
  // would make libgomp drop its pooled team and threads and start new ones, allocating in the
  // step), and its first bwd_slices threads each take a block of consecutive (b,h) pairs, as a
  // static `omp for` over them would, in their own slice of ws (pr_attention_bwd_ws); on the
  // calling thread alone, tid 0 of 1 takes them all.
  size_t slice = bwd_slice_bytes(T, C, NH);
  PR_PARALLEL(B * NH > 1 && B * NH * T * T * hs >= 4 * PAR_MIN, {
    int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    nt = nt < bwd_slices(B, NH) ? nt : bwd_slices(B, NH);
    if (tid < nt) {
      // vT (hs,ld); dpre (T,ld); one row of datt (ld) and two of results (2,hs)
      float *buf = (float *)((char *)ws + (size_t)tid * slice);
      float *vT = buf, *dpre = vT + hs * ld, *da = dpre + T * ld, *row = da + ld;
      int64_t per = (B * NH + nt - 1) / nt, bh0 = tid * per; // a block of (b,h) pairs each
      int64_t bh1 = bh0 + per < B * NH ? bh0 + per : B * NH;
      for (int64_t bh = bh0; bh < bh1; bh++) {
        int64_t b = bh / NH, h = bh % NH;
        const float *q = qkv + b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
        const float *g = dy + b * T * C + h * hs, *a = att + bh * T * T;
        float *dq = dqkv + b * T * C3 + h * hs, *dk = dq + C, *dv = dq + 2 * C;
        pack_T(vT, v, C3, T, ld, hs);
        for (int64_t t = 0; t < T; t++) {
          int64_t n = t + 1;
          const float *arow = a + t * T;
          dots_kT(da, NULL, g + t * C, NULL, vT, ld, hs, n); // datt[s] = dy_t . v_s
          float dot = dot_f(arow, da, n);
          float *prow = dpre + t * ld;
          for (int64_t s = 0; s < n; s++) prow[s] = scale * (arow[s] * (da[s] - dot));
          wsum_rows(row, prow, 1, k, C3, 0, n, hs); // dq_t
          write_acc(dq + t * C3, row, hs, acc);
        }
        for (int64_t s = 0; s < T; s++) {
          // dk_s = sum_{t>=s} dpre[t,s] q_t and dv_s = sum_{t>=s} att[t,s] dy_t
          wsum2_rows(row, dpre + s, ld, q, C3, row + hs, a + s, T, g, C, s, T, hs);
          write_acc(dk + s * C3, row, hs, acc);
          write_acc(dv + s * C3, row + hs, hs, acc);
        }
      }
    }
  });
}

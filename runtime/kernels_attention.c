// kernels_attention.c: multi-head self-attention on packed qkv (B,T,C+2Ckv) or on separate q,
// k, v (the same code on other row strides: the same bits), causal or not, with NKV <= NH kv heads
// (grouped-query; query head h reads kv head h / (NH/NKV)), forward (which saves the attention
// weights) and backward; and the rotary position embedding of q and k (rope, at the end).
//
// NH heads of hs = C/NH; Ckv = NKV*hs; one (b,h) per iteration of an OpenMP loop. Rows are taken
// four at a time and the inner products register-blocked in vectors of VW floats (16 with AVX-512,
// else 8): four rows by two vectors, eight independent accumulator chains, the causal triangle of a
// block of four inside the same tile (the weighted sums do nothing above the diagonal); fmav is a
// multiply and an add rounded separately, as FMA. Every output is one sum in ascending order, so
// the blocking and the vector width change the speed only: the bits are those of the
// row-at-a-time loops, the same in v1, v3 and v4.
//
// Per (b,h): the forward computes att's rows (scores against kT, keys transposed into an (hs,ld)
// tile in 8 x 8 register blocks; the scale applied as the scores are stored; softmax), then
// y = att v with v's rows copied contiguous into kT's place. The backward, in one workspace
// slice: dv = att^T dy, datt = dy v^T (vT), dpre (T,ld), dq = dpre k, dk = dpre^T q, each weighted
// sum streaming its operand's rows copied contiguous into vT's place: in place the head's rows lie
// 3C floats apart and fall into a few L1 sets (the old dk/dv loop, reading them in place, was
// attention's hottest function). dk and dv take four keys at a time, their weights four adjacent
// columns of dpre/att.
#pragma GCC optimize("fp-contract=off", "no-trapping-math", "no-tree-loop-distribute-patterns")

#include "kernels_common.h"

#include <omp.h>

// Vectors of VW floats (GCC vector extension): 16 where the build has AVX-512 (one zmm), else 8
// (one ymm, or two xmm on the baseline). Every operation is lane-wise, so the width changes the
// speed only, never a bit of the result.
#if defined(__AVX512F__)
#define VW 16
#else
#define VW 8
#endif
typedef float vf __attribute__((vector_size(VW * 4)));
typedef float vfu __attribute__((vector_size(VW * 4), aligned(4), may_alias)); // unaligned access
static inline vf ldv(const float *p) {
  return *(const vfu *)p;
}
static inline void stv(float *p, vf x) {
  *(vfu *)p = x;
}
static inline vf bcv(float x) {
#if VW == 16
  return (vf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
#else
  return (vf){x, x, x, x, x, x, x, x};
#endif
}
// a*b + c with two roundings in every build, as kernels_common.h's FMA: v1, v3 and v4 compute the
// same bits. (The FMA instruction at v3/v4 measured no faster inside the noise of the loaded VM,
// and moved fp16 training's distance from f32 on the precision test's model from 0.0016 to 0.0081.)
static inline vf fmav(vf a, vf b, vf c) {
  return a * b + c;
}

// Scores of rows q_r = q + r*qs (r < 4) against kT (hs,ld), zero-padded to ld (a multiple of 32):
// sc[r*ld + s] = scale * sum_d q_r[d] kT[d*ld + s], d ascending, for s in [0, n rounded up to
// 2 VW) (the product rounded after the sum: the forward's q.k / sqrt(hs); the backward's scale
// is 1, exact). Four rows by two vectors: eight independent accumulator chains. Never cloned:
// GCC specialises the scale = 1 call in some ISA builds only, and tests/e2e/march.sh tells the
// baseline build's static helpers from the others' by name.
static __attribute__((noclone)) void dots4_kT(float *restrict sc, const float *restrict q,
                                              int64_t qs, const float *restrict kT, int64_t ld,
                                              int64_t hs, int64_t n, float scale) {
  vf sv = bcv(scale);
  const float *q0 = q, *q1 = q + qs, *q2 = q + 2 * qs, *q3 = q + 3 * qs;
  for (int64_t s0 = 0; s0 < n; s0 += 2 * VW) {
    const float *kb = kT + s0;
    vf a0 = bcv(0), a1 = bcv(0), b0 = bcv(0), b1 = bcv(0);
    vf c0 = bcv(0), c1 = bcv(0), e0 = bcv(0), e1 = bcv(0);
    for (int64_t d = 0; d < hs; d++) {
      const float *kd = kb + d * ld;
      vf k0 = ldv(kd), k1 = ldv(kd + VW);
      vf x = bcv(q0[d]), y = bcv(q1[d]), z = bcv(q2[d]), w = bcv(q3[d]);
      a0 = fmav(x, k0, a0), a1 = fmav(x, k1, a1), b0 = fmav(y, k0, b0), b1 = fmav(y, k1, b1);
      c0 = fmav(z, k0, c0), c1 = fmav(z, k1, c1), e0 = fmav(w, k0, e0), e1 = fmav(w, k1, e1);
    }
    float *o = sc + s0;
    stv(o, a0 * sv), stv(o + VW, a1 * sv), stv(o + ld, b0 * sv), stv(o + ld + VW, b1 * sv);
    stv(o + 2 * ld, c0 * sv), stv(o + 2 * ld + VW, c1 * sv), stv(o + 3 * ld, e0 * sv);
    stv(o + 3 * ld + VW, e1 * sv);
  }
}

// The same for one row q0: sc[s] for s in [0, n rounded up to 2 VW).
static __attribute__((noclone)) void dots1_kT(float *restrict sc, const float *restrict q0,
                                              const float *restrict kT, int64_t ld, int64_t hs,
                                              int64_t n, float scale) {
  vf sv = bcv(scale);
  for (int64_t s0 = 0; s0 < n; s0 += 2 * VW) {
    const float *kb = kT + s0;
    vf a0 = bcv(0), a1 = bcv(0);
    for (int64_t d = 0; d < hs; d++) {
      vf x = bcv(q0[d]);
      a0 = fmav(x, ldv(kb + d * ld), a0), a1 = fmav(x, ldv(kb + d * ld + VW), a1);
    }
    stv(sc + s0, a0 * sv), stv(sc + s0 + VW, a1 * sv);
  }
}

// One weighted sum of rows: y[d] = y[d] + sum_{i in [i0,i1)} w[i*ws] x[i*xs + d] for d < m, the
// terms added in ascending i onto y's values (callers zero y to start a sum; a sum continued over
// a later range is bitwise the sum over both).
static void wsum1(float *restrict y, const float *restrict w, int64_t ws, const float *restrict x,
                  int64_t xs, int64_t i0, int64_t i1, int64_t m) {
  int64_t d0 = 0;
  for (; d0 + VW <= m; d0 += VW) {
    vf acc = ldv(y + d0);
    for (int64_t i = i0; i < i1; i++) acc = fmav(bcv(w[i * ws]), ldv(x + i * xs + d0), acc);
    stv(y + d0, acc);
  }
  for (; d0 < m; d0++) {
    float acc = y[d0];
    for (int64_t i = i0; i < i1; i++) acc = FMA(w[i * ws], x[i * xs + d0], acc);
    y[d0] = acc;
  }
}

// Four such sums at once, sharing x, from zero: y + r*m (r < 4) = sum_i w[r*wr + i*wi] x[i*xs + d].
// Rows of a matrix (wr = its row stride, wi = 1: the forward's att.v and the backward's dq) or its
// columns (wr = 1, wi = the row stride: dk and dv, whose weights are columns of dpre and att, four
// consecutive ones contiguous in each row). Every row sums over [i0,i1), and over a causal
// triangle with it, the accumulators staying in registers: tri = 1 (rows t0..t0+3, i1 = t0+1) adds
// i = i1 + j (j < 3) to the rows r > j, after the rest; tri = 2 (columns s0..s0+3, i0 = s0+3)
// starts with i = i0 - 3 + j to the rows r <= j. Each row's terms thus stay in ascending i. Two
// vectors per row: eight independent chains.
static void wsum4(float *restrict y, const float *restrict w, int64_t wr, int64_t wi,
                  const float *restrict x, int64_t xs, int64_t i0, int64_t i1, int64_t m, int tri) {
  int64_t d0 = 0;
  float *y0 = y, *y1 = y + m, *y2 = y + 2 * m, *y3 = y + 3 * m;
#define WTERM(a0, a1, wv)                                                                          \
  do {                                                                                             \
    vf w_ = bcv(wv);                                                                               \
    a0 = fmav(w_, xa, a0), a1 = fmav(w_, xb, a1);                                                  \
  } while (0)
  for (; d0 + 2 * VW <= m; d0 += 2 * VW) {
    vf p0 = bcv(0), p1 = bcv(0), q0 = bcv(0), q1 = bcv(0);
    vf r0 = bcv(0), r1 = bcv(0), u0 = bcv(0), u1 = bcv(0);
    if (tri == 2)
      for (int j = 0; j < 3; j++) { // i = i0-3+j, rows 0..j
        int64_t i = i0 - 3 + j;
        const float *xr = x + i * xs + d0, *wp = w + i * wi;
        vf xa = ldv(xr), xb = ldv(xr + VW);
        WTERM(p0, p1, wp[0]);
        if (j >= 1) WTERM(q0, q1, wp[wr]);
        if (j >= 2) WTERM(r0, r1, wp[2 * wr]);
      }
    const float *xr = x + i0 * xs + d0, *wp = w + i0 * wi;
    for (int64_t i = i0; i < i1; i++, xr += xs, wp += wi) {
      vf xa = ldv(xr), xb = ldv(xr + VW);
      vf a = bcv(wp[0]), b = bcv(wp[wr]), c = bcv(wp[2 * wr]), e = bcv(wp[3 * wr]);
      p0 = fmav(a, xa, p0), p1 = fmav(a, xb, p1), q0 = fmav(b, xa, q0), q1 = fmav(b, xb, q1);
      r0 = fmav(c, xa, r0), r1 = fmav(c, xb, r1), u0 = fmav(e, xa, u0), u1 = fmav(e, xb, u1);
    }
    if (tri == 1)
      for (int j = 0; j < 3; j++, xr += xs, wp += wi) { // i = i1+j, rows j+1..3
        vf xa = ldv(xr), xb = ldv(xr + VW);
        if (j < 1) WTERM(q0, q1, wp[wr]);
        if (j < 2) WTERM(r0, r1, wp[2 * wr]);
        WTERM(u0, u1, wp[3 * wr]);
      }
    stv(y0 + d0, p0), stv(y0 + d0 + VW, p1), stv(y1 + d0, q0), stv(y1 + d0 + VW, q1);
    stv(y2 + d0, r0), stv(y2 + d0 + VW, r1), stv(y3 + d0, u0), stv(y3 + d0 + VW, u1);
  }
#undef WTERM
  for (int r = 0; d0 < m && r < 4; r++) { // the columns past the vectors: each row alone
    int64_t lo = tri == 2 ? i0 - 3 + r : i0, hi = tri == 1 ? i1 + r : i1;
    memset(y + r * m + d0, 0, (size_t)(m - d0) * sizeof(float));
    wsum1(y + r * m + d0, w + r * wr, wi, x + d0, xs, lo, hi, m - d0);
  }
}

// 8-float vectors for the transposes (data movement only).
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias)); // unaligned access
#define SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)

// kT (hs,ld) = the head's rows x[s*xs + 0..hs) for s < T, transposed; zeros for s in [T, ld).
// 8 x 8 blocks are transposed in registers (three rounds of shuffles), the edges one by one.
static void pack_T(float *restrict kT, const float *restrict x, int64_t xs, int64_t T, int64_t ld,
                   int64_t hs) {
  int64_t s0 = 0, d8 = hs & ~(int64_t)7;
  for (; s0 + 8 <= T; s0 += 8) {
    const float *xb = x + s0 * xs;
    for (int64_t d0 = 0; d0 < d8; d0 += 8) {
      v8 r0 = *(const v8u *)(xb + d0), r1 = *(const v8u *)(xb + xs + d0);
      v8 r2 = *(const v8u *)(xb + 2 * xs + d0), r3 = *(const v8u *)(xb + 3 * xs + d0);
      v8 r4 = *(const v8u *)(xb + 4 * xs + d0), r5 = *(const v8u *)(xb + 5 * xs + d0);
      v8 r6 = *(const v8u *)(xb + 6 * xs + d0), r7 = *(const v8u *)(xb + 7 * xs + d0);
      v8 t0 = SHUF(r0, r1, 0, 8, 1, 9, 4, 12, 5, 13), t1 = SHUF(r0, r1, 2, 10, 3, 11, 6, 14, 7, 15);
      v8 t2 = SHUF(r2, r3, 0, 8, 1, 9, 4, 12, 5, 13), t3 = SHUF(r2, r3, 2, 10, 3, 11, 6, 14, 7, 15);
      v8 t4 = SHUF(r4, r5, 0, 8, 1, 9, 4, 12, 5, 13), t5 = SHUF(r4, r5, 2, 10, 3, 11, 6, 14, 7, 15);
      v8 t6 = SHUF(r6, r7, 0, 8, 1, 9, 4, 12, 5, 13), t7 = SHUF(r6, r7, 2, 10, 3, 11, 6, 14, 7, 15);
      v8 u0 = SHUF(t0, t2, 0, 1, 8, 9, 4, 5, 12, 13), u1 = SHUF(t0, t2, 2, 3, 10, 11, 6, 7, 14, 15);
      v8 u2 = SHUF(t1, t3, 0, 1, 8, 9, 4, 5, 12, 13), u3 = SHUF(t1, t3, 2, 3, 10, 11, 6, 7, 14, 15);
      v8 u4 = SHUF(t4, t6, 0, 1, 8, 9, 4, 5, 12, 13), u5 = SHUF(t4, t6, 2, 3, 10, 11, 6, 7, 14, 15);
      v8 u6 = SHUF(t5, t7, 0, 1, 8, 9, 4, 5, 12, 13), u7 = SHUF(t5, t7, 2, 3, 10, 11, 6, 7, 14, 15);
      float *o = kT + d0 * ld + s0;
      *(v8u *)o = SHUF(u0, u4, 0, 1, 2, 3, 8, 9, 10, 11);
      *(v8u *)(o + ld) = SHUF(u1, u5, 0, 1, 2, 3, 8, 9, 10, 11);
      *(v8u *)(o + 2 * ld) = SHUF(u2, u6, 0, 1, 2, 3, 8, 9, 10, 11);
      *(v8u *)(o + 3 * ld) = SHUF(u3, u7, 0, 1, 2, 3, 8, 9, 10, 11);
      *(v8u *)(o + 4 * ld) = SHUF(u0, u4, 4, 5, 6, 7, 12, 13, 14, 15);
      *(v8u *)(o + 5 * ld) = SHUF(u1, u5, 4, 5, 6, 7, 12, 13, 14, 15);
      *(v8u *)(o + 6 * ld) = SHUF(u2, u6, 4, 5, 6, 7, 12, 13, 14, 15);
      *(v8u *)(o + 7 * ld) = SHUF(u3, u7, 4, 5, 6, 7, 12, 13, 14, 15);
    }
    for (int64_t d = d8; d < hs; d++)
      for (int64_t s = s0; s < s0 + 8; s++) kT[d * ld + s] = x[s * xs + d];
  }
  for (int64_t d = 0; d < hs; d++) {
    for (int64_t s = s0; s < T; s++) kT[d * ld + s] = x[s * xs + d];
    for (int64_t s = T; s < ld; s++) kT[d * ld + s] = 0.0f;
  }
}

// xp (T,hs) = the head's rows x[s*xs + 0..hs) for s < T, contiguous: the weighted sums stream
// them, and in place their rows lie 3C floats apart (6 KiB at C = 512), so that a head's 64 rows
// fall into a few L1 sets and evict each other.
static inline void copy_row(float *restrict o, const float *restrict x, int64_t n) {
  int64_t d = 0;
  for (; d + VW <= n; d += VW) stv(o + d, ldv(x + d));
  for (; d < n; d++) o[d] = x[d];
}
static void pack_rows(float *restrict xp, const float *restrict x, int64_t xs, int64_t T,
                      int64_t hs) {
  for (int64_t s = 0; s < T; s++) copy_row(xp + s * hs, x + s * xs, hs);
}

static void write_acc(float *restrict out, const float *restrict t, int64_t n, int acc) {
  if (acc)
    for (int64_t i = 0; i < n; i++) out[i] = out[i] + t[i];
  else
    copy_row(out, t, n);
}

// Rows t0 .. t0+nr-1 (nr <= 4) of a causal weighted sum, row t over s in [0, t+1):
// y_t[d] = sum_{s<=t} w_t[s] x[s*xs + d], w_t = w + (t-t0)*wld, into y + (t-t0)*m.
// Always inlined: GCC inlines it in some ISA builds only, and tests/e2e/march.sh tells the
// baseline build's static helpers from the others' by name.
static inline __attribute__((always_inline)) void causal_rows(float *restrict y, const float *w,
                                                              int64_t wld, const float *x,
                                                              int64_t xs, int64_t t0, int nr,
                                                              int64_t m) {
  if (nr == 4) {
    wsum4(y, w, wld, 1, x, xs, 0, t0 + 1, m, 1);
    return;
  }
  memset(y, 0, (size_t)(nr * m) * sizeof(float));
  for (int r = 0; r < nr; r++) wsum1(y + r * m, w + r * wld, 1, x, xs, 0, t0 + r + 1, m);
}

// The transposed form, rows s0 .. s0+ns-1 (ns <= 4) of sum_{t>=s} over t in [s, T):
// y_s[d] = sum_{s<=t<T} w[t*wld + s] x[t*xs + d], into y + (s-s0)*m.
static inline __attribute__((always_inline)) void causal_cols(float *restrict y, const float *w,
                                                              int64_t wld, const float *x,
                                                              int64_t xs, int64_t s0, int ns,
                                                              int64_t T, int64_t m) {
  if (ns == 4) {
    wsum4(y, w + s0, 1, wld, x, xs, s0 + 3, T, m, 2);
    return;
  }
  memset(y, 0, (size_t)(ns * m) * sizeof(float));
  for (int r = 0; r < ns; r++) wsum1(y + r * m, w + s0 + r, wld, x, xs, s0 + r, T, m);
}

// The non-causal forms of causal_rows and causal_cols: every row sums over all of [0, T).
static inline __attribute__((always_inline)) void full_rows(float *restrict y, const float *w,
                                                            int64_t wld, const float *x, int64_t xs,
                                                            int nr, int64_t T, int64_t m) {
  if (nr == 4) {
    wsum4(y, w, wld, 1, x, xs, 0, T, m, 0);
    return;
  }
  memset(y, 0, (size_t)(nr * m) * sizeof(float));
  for (int r = 0; r < nr; r++) wsum1(y + r * m, w + r * wld, 1, x, xs, 0, T, m);
}
static inline __attribute__((always_inline)) void full_cols(float *restrict y, const float *w,
                                                            int64_t wld, const float *x, int64_t xs,
                                                            int64_t s0, int ns, int64_t T,
                                                            int64_t m) {
  if (ns == 4) {
    wsum4(y, w + s0, 1, wld, x, xs, 0, T, m, 0);
    return;
  }
  memset(y, 0, (size_t)(ns * m) * sizeof(float));
  for (int r = 0; r < ns; r++) wsum1(y + r * m, w + s0 + r, wld, x, xs, 0, T, m);
}

// Rows t0..t0+nr-1 of a weighted sum, causal (row t over [0, t]) or not (over [0, T)).
static inline __attribute__((always_inline)) void wrows(float *restrict y, const float *w,
                                                        int64_t wld, const float *x, int64_t xs,
                                                        int64_t t0, int nr, int64_t T, int64_t m,
                                                        int causal) {
  if (causal)
    causal_rows(y, w, wld, x, xs, t0, nr, m);
  else
    full_rows(y, w, wld, x, xs, nr, T, m);
}
// Columns s0..s0+ns-1 of the transposed sum, causal (column s over [s, T)) or not (over [0, T)).
static inline __attribute__((always_inline)) void wcols(float *restrict y, const float *w,
                                                        int64_t wld, const float *x, int64_t xs,
                                                        int64_t s0, int ns, int64_t T, int64_t m,
                                                        int causal) {
  if (causal)
    causal_cols(y, w, wld, x, xs, s0, ns, T, m);
  else
    full_cols(y, w, wld, x, xs, s0, ns, T, m);
}

static void check_heads(int64_t C, int64_t NH, int64_t NKV) {
  prCheck(NH > 0 && C % NH == 0 && NKV > 0 && NH % NKV == 0, "this is a pipec bug",
          "attention: C=%lld, %lld heads, %lld kv heads", (long long)C, (long long)NH,
          (long long)NKV);
}

// The forward on q rows qs floats apart and k, v rows ks apart (batch row b at b*T*qs, b*T*ks);
// query head h reads kv head h / (NH/NKV).
static __attribute__((noclone)) void attn_fwd(float *y, float *att, const float *qb, int64_t qs,
                                              const float *kb, const float *vb, int64_t ks,
                                              int64_t B, int64_t T, int64_t C, int64_t NH,
                                              int64_t NKV, int causal) {
  check_heads(C, NH, NKV);
  int64_t hs = C / NH, grp = NH / NKV, CT = qs;
  int64_t ld = (T + 31) & ~(int64_t)31;
  float scale = 1.0f / sqrtf((float)hs);
  if (B * T * C == 0) return;
  PR_PARALLEL(B * NH > 1 && B * NH * T * T * hs >= 8 * PAR_MIN, {
    float *buf = pr_scratch((size_t)(hs * ld + 4 * ld + 4 * hs) * sizeof(float));
    // kT (hs,ld); scores of four rows (4,ld); their outputs (4,hs)
    float *kT = buf, *sc = buf + hs * ld, *out = sc + 4 * ld;
    _Pragma("omp for schedule(static)") for (int64_t bh = 0; bh < B * NH; bh++) {
      int64_t b = bh / NH, h = bh % NH;
      const float *q = qb + b * T * qs + h * hs, *k = kb + b * T * ks + (h / grp) * hs;
      const float *v = vb + b * T * ks + (h / grp) * hs;
      float *ab = att + bh * T * T;
      pack_T(kT, k, ks, T, ld, hs);
      for (int64_t t0 = 0; t0 < T; t0 += 4) { // query rows in fours: att's rows
        int nr = T - t0 < 4 ? (int)(T - t0) : 4;
        if (nr == 4)
          dots4_kT(sc, q + t0 * CT, CT, kT, ld, hs, causal ? t0 + 4 : T, scale);
        else
          for (int r = 0; r < nr; r++)
            dots1_kT(sc + r * ld, q + (t0 + r) * CT, kT, ld, hs, causal ? t0 + r + 1 : T, scale);
        for (int r = 0; r < nr; r++) {
          // softmax_row's arithmetic on the scaled scores q_t . k_s / sqrt(hs), its elementwise
          // loop run over n rounded up to VW (the scores are defined up to ld; the ones past n are
          // never read) so that no scalar tail is left; the max and the sum stay over [0,n)
          int64_t t = t0 + r, n = causal ? t + 1 : T, npad = (n + VW - 1) & ~(int64_t)(VW - 1);
          float *st = sc + r * ld, *arow = ab + t * T;
          float mx = max_f(st, n);
          for (int64_t s = 0; s < npad; s++) st[s] = exp_f(st[s] - mx);
          float inv = 1.0f / sum_f(st, n);
          for (int64_t s = 0; s < n; s++) arow[s] = st[s] * inv;
          for (int64_t s = n; s < T; s++) arow[s] = 0.0f;
        }
      }
      float *vp = kT; // kT is done with: v's rows, contiguous (T,hs) in its place (T*hs <= hs*ld)
      pack_rows(vp, v, ks, T, hs);
      for (int64_t t0 = 0; t0 < T; t0 += 4) { // y_t = sum_s att[t,s] v_s, rows in fours
        int nr = T - t0 < 4 ? (int)(T - t0) : 4;
        wrows(out, ab + t0 * T, T, vp, hs, t0, nr, T, hs, causal);
        for (int r = 0; r < nr; r++) copy_row(y + (b * T + t0 + r) * C + h * hs, out + r * hs, hs);
      }
    }
    pr_scratch_free(buf);
  });
}

// Packed qkv (B,T,C+2Ckv): row stride C+2Ckv, k at C, v at C+Ckv.
void pr_attention_fwd(float *y, float *att, const float *qkv, int64_t B, int64_t T, int64_t C,
                      int64_t NH, int64_t NKV, int causal) {
  check_heads(C, NH, NKV);
  int64_t Ckv = NKV * (C / NH), CT = C + 2 * Ckv;
  attn_fwd(y, att, qkv, CT, qkv + C, qkv + C + Ckv, CT, B, T, C, NH, NKV, causal);
}

// Separate q (B,T,C), k and v (B,T,Ckv) (the attention op).
void pr_attention_sep_fwd(float *y, float *att, const float *q, const float *k, const float *v,
                          int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, int causal) {
  check_heads(C, NH, NKV);
  attn_fwd(y, att, q, C, k, v, NKV * (C / NH), B, T, C, NH, NKV, causal);
}

// Per-thread slice of the backward's workspace: vT (hs,ld), dpre (T,ld), four rows of datt (4,ld)
// and four of results (4,hs), floats, rounded up to 64 bytes (slices do not share cache lines).
static size_t bwd_slice_bytes(int64_t T, int64_t C, int64_t NH) {
  int64_t hs = C / NH, ld = (T + 31) & ~(int64_t)31;
  size_t bytes = (size_t)(hs * ld + T * ld + 4 * ld + 4 * hs) * sizeof(float);
  return (bytes + 63) & ~(size_t)63;
}

// Threads the backward runs on: one per (b, kv head) at most, and at most
// PR_ATTENTION_MAX_THREADS.
static int bwd_slices(int64_t B, int64_t NKV) {
  return B * NKV < PR_ATTENTION_MAX_THREADS ? (int)(B * NKV) : PR_ATTENTION_MAX_THREADS;
}

// The planned workspace: one slice per thread the kernel may run on. ir/ops_kernel.c's
// ws_attention computes the same number for the memory plan.
// (causal does not change it: the arguments are the kernel's, as the CUDA program's calls pass
// them.)
size_t pr_attention_bwd_ws(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, int causal) {
  (void)causal;
  if (NH <= 0 || C % NH != 0 || NKV <= 0 || NH % NKV != 0 || B * T * C == 0) return 64;
  return bwd_slice_bytes(T, C, NH) * (size_t)bwd_slices(B, NKV);
}

// Where one call's operands lie: q and dq rows qs floats apart, k, v, dk and dv rows ks apart
// (batch row b at b*T*qs, b*T*ks), and which gradients it computes (parts: 1 dq, 2 dk, 4 dv).
typedef struct AttnBwd {
  float *dq, *dk, *dv;
  const float *q, *k, *v;
  int64_t qs, ks;
  int parts;
} AttnBwd;

// One query head's part of the backward (rows as in AttnBwd; dy's and att's as in
// pr_attention_bwd), in the slice buf. dq is written (acc 0) or added to (acc 1); dk and dv
// likewise with kvacc, the caller's order of the heads sharing them. dpre only when dq or dk is
// asked for.
static __attribute__((noclone)) void bwd_head(const AttnBwd *o, float *dq, float *dk, float *dv,
                                              const float *q, const float *k, const float *v,
                                              const float *g, const float *a, float *buf, int64_t T,
                                              int64_t C, int64_t hs, float scale, int causal,
                                              int acc, int kvacc) {
  int64_t ld = (T + 31) & ~(int64_t)31, qs = o->qs, ks = o->ks;
  // vT (hs,ld); dpre (T,ld); datt of four rows (4,ld) and four result rows (4,hs)
  float *vT = buf, *dpre = vT + hs * ld, *da = dpre + T * ld, *row = da + 4 * ld;
  // The head's rows of one operand at a time, contiguous (T,hs), in xp: vT's place, which is free
  // but while datt is computed (T*hs <= hs*ld).
  float *xp = vT;
  // dv_s = sum_{t>=s} att[t,s] dy_t (all t when not causal), four s at a time
  if (o->parts & 4) {
    pack_rows(xp, g, C, T, hs);
    for (int64_t s0 = 0; s0 < T; s0 += 4) {
      int ns = T - s0 < 4 ? (int)(T - s0) : 4;
      wcols(row, a, T, xp, hs, s0, ns, T, hs, causal);
      for (int r = 0; r < ns; r++) write_acc(dv + (s0 + r) * ks, row + r * hs, hs, kvacc);
    }
  }
  if (!(o->parts & 3)) return;
  pack_T(vT, v, ks, T, ld, hs);
  for (int64_t t0 = 0; t0 < T; t0 += 4) { // rows in fours
    int nr = T - t0 < 4 ? (int)(T - t0) : 4;
    if (nr == 4) // datt[s] = dy_t . v_s
      dots4_kT(da, g + t0 * C, C, vT, ld, hs, causal ? t0 + 4 : T, 1.0f);
    else
      for (int r = 0; r < nr; r++)
        dots1_kT(da + r * ld, g + (t0 + r) * C, vT, ld, hs, causal ? t0 + r + 1 : T, 1.0f);
    for (int r = 0; r < nr; r++) {
      int64_t t = t0 + r, n = causal ? t + 1 : T;
      const float *arow = a + t * T, *dr = da + r * ld;
      float dot = dot_f(arow, dr, n);
      float *prow = dpre + t * ld;
      for (int64_t s = 0; s < n; s++) prow[s] = scale * (arow[s] * (dr[s] - dot));
    }
  }
  // dq_t = sum_{s<=t} dpre[t,s] k_s, rows in fours
  if (o->parts & 1) {
    pack_rows(xp, k, ks, T, hs);
    for (int64_t t0 = 0; t0 < T; t0 += 4) {
      int nr = T - t0 < 4 ? (int)(T - t0) : 4;
      wrows(row, dpre + t0 * ld, ld, xp, hs, t0, nr, T, hs, causal);
      for (int r = 0; r < nr; r++) write_acc(dq + (t0 + r) * qs, row + r * hs, hs, acc);
    }
  }
  // dk_s = sum_{t>=s} dpre[t,s] q_t, four s at a time
  if (o->parts & 2) {
    pack_rows(xp, q, qs, T, hs);
    for (int64_t s0 = 0; s0 < T; s0 += 4) {
      int ns = T - s0 < 4 ? (int)(T - s0) : 4;
      wcols(row, dpre, ld, xp, hs, s0, ns, T, hs, causal);
      for (int r = 0; r < ns; r++) write_acc(dk + (s0 + r) * ks, row + r * hs, hs, kvacc);
    }
  }
}

// The backward of every (b, kv head) of o: dy (B,T,C), att (B,NH,T,T) the forward's.
//   datt[t,s] = dy_t . v_s;  dpre[t,s] = scale att[t,s] (datt[t,s] - sum_s' att[t,s'] datt[t,s'])
//   dq_t = sum_s dpre[t,s] k_s;  dk_s = sum_t dpre[t,s] q_t;  dv_s = sum_t att[t,s] dy_t
// The work is split by (b, kv head): one thread takes every query head of a kv head's group, in
// ascending order, and adds their dk and dv into the kv head's rows one after the other (the
// first writes them, with acc 0), so no two threads write the same rows and the sums' order is
// fixed: the bits do not depend on the thread count.
static __attribute__((noclone)) void attn_bwd(const AttnBwd *o, const float *dy, const float *att,
                                              void *ws, int64_t B, int64_t T, int64_t C, int64_t NH,
                                              int64_t NKV, int causal, int acc) {
  check_heads(C, NH, NKV);
  int64_t hs = C / NH, grp = NH / NKV, qs = o->qs, ks = o->ks;
  float scale = 1.0f / sqrtf((float)hs);
  if (B * T * C == 0) return;
  // The region runs on the whole team, as every other kernel's does (a team of another size
  // would make libgomp drop its pooled team and threads and start new ones, allocating in the
  // step), and its first bwd_slices threads each take a block of consecutive (b, kv head) pairs,
  // as a static `omp for` over them would, in their own slice of ws (pr_attention_bwd_ws); on
  // the calling thread alone, tid 0 of 1 takes them all.
  size_t slice = bwd_slice_bytes(T, C, NH);
  PR_PARALLEL(B * NKV > 1 && B * NH * T * T * hs >= 4 * PAR_MIN, {
    int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    nt = nt < bwd_slices(B, NKV) ? nt : bwd_slices(B, NKV);
    if (tid < nt) {
      float *buf = (float *)((char *)ws + (size_t)tid * slice);
      int64_t per = (B * NKV + nt - 1) / nt, bg0 = tid * per; // a block of (b,g) pairs each
      int64_t bg1 = bg0 + per < B * NKV ? bg0 + per : B * NKV;
      for (int64_t bg = bg0; bg < bg1; bg++) {
        int64_t b = bg / NKV, kvh = bg % NKV, kvo = b * T * ks + kvh * hs;
        for (int64_t j = 0; j < grp; j++) { // the group's query heads, ascending
          int64_t h = kvh * grp + j, bh = b * NH + h, qo = b * T * qs + h * hs;
          bwd_head(o, o->dq + qo, o->dk + kvo, o->dv + kvo, o->q + qo, o->k + kvo, o->v + kvo,
                   dy + b * T * C + h * hs, att + bh * T * T, buf, T, C, hs, scale, causal, acc,
                   acc || j > 0);
        }
      }
    }
  });
}

// Packed: dqkv (B,T,C+2Ckv) from the forward's qkv.
void pr_attention_bwd(float *dqkv, const float *dy, const float *qkv, const float *att, void *ws,
                      int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, int causal,
                      int acc) {
  check_heads(C, NH, NKV);
  int64_t Ckv = NKV * (C / NH), CT = C + 2 * Ckv;
  AttnBwd o = {dqkv, dqkv + C, dqkv + C + Ckv, qkv, qkv + C, qkv + C + Ckv, CT, CT, 7};
  attn_bwd(&o, dy, att, ws, B, T, C, NH, NKV, causal, acc);
}

// Separate q, k, v (the attention op): one gradient per call (its backward rows, one per input).
static void sep_bwd(float *d, int part, const float *dy, const float *q, const float *k,
                    const float *v, const float *att, void *ws, int64_t B, int64_t T, int64_t C,
                    int64_t NH, int64_t NKV, int causal, int acc) {
  check_heads(C, NH, NKV);
  AttnBwd o = {d, d, d, q, k, v, C, NKV * (C / NH), part};
  attn_bwd(&o, dy, att, ws, B, T, C, NH, NKV, causal, acc);
}
void pr_attention_sep_bwd_q(float *dq, const float *dy, const float *q, const float *k,
                            const float *v, const float *att, void *ws, int64_t B, int64_t T,
                            int64_t C, int64_t NH, int64_t NKV, int causal, int acc) {
  sep_bwd(dq, 1, dy, q, k, v, att, ws, B, T, C, NH, NKV, causal, acc);
}
void pr_attention_sep_bwd_k(float *dk, const float *dy, const float *q, const float *k,
                            const float *v, const float *att, void *ws, int64_t B, int64_t T,
                            int64_t C, int64_t NH, int64_t NKV, int causal, int acc) {
  sep_bwd(dk, 2, dy, q, k, v, att, ws, B, T, C, NH, NKV, causal, acc);
}
void pr_attention_sep_bwd_v(float *dv, const float *dy, const float *q, const float *k,
                            const float *v, const float *att, void *ws, int64_t B, int64_t T,
                            int64_t C, int64_t NH, int64_t NKV, int causal, int acc) {
  sep_bwd(dv, 4, dy, q, k, v, att, ws, B, T, C, NH, NKV, causal, acc);
}

// ---------------------------------------------------------------------------------------------
// Rotary position embedding (rope). x is (outer, T, inner, D): position t rotates every pair of
// each of its inner rows (its heads) by the angle t * inv_freq_i, pair i being (i, i + D/2)
// ("half", Hugging Face's rotate_half) or (2i, 2i+1) ("interleaved", Meta's complex form).
// The angles' cos and sin come from the process's table for (T, D, theta) (rope_table.c: torch's
// float32 recipe, computed once). Threads take whole positions; every element is one fixed
// expression of (t, i) and x, so the bits do not depend on the thread count.

// One row of D: every pair rotated by (c, s): y_p = x_p c - x_q s, y_q = x_q c + x_p s (torch's
// bits: HF's q*cos + rotate_half(q)*sin, and the complex product (x_p + i x_q)(c + i s)). The
// backward (inverse) rotates by -s: y_p = x_p c + x_q s, y_q = x_q c - x_p s, the same bits as
// the forward formula given -s (negation is exact), the transpose of the forward's rotation.
static void rope_row(float *restrict y, const float *restrict x, const float *c, const float *s,
                     int64_t D, int interleaved, int inverse, int acc) {
  for (int64_t i = 0; i < D / 2; i++) {
    int64_t p = interleaved ? 2 * i : i, q = interleaved ? 2 * i + 1 : i + D / 2;
    float yp = inverse ? x[p] * c[i] + x[q] * s[i] : x[p] * c[i] - x[q] * s[i];
    float yq = inverse ? x[q] * c[i] - x[p] * s[i] : x[q] * c[i] + x[p] * s[i];
    y[p] = acc ? y[p] + yp : yp;
    y[q] = acc ? y[q] + yq : yq;
  }
}

// Every row of position t, with its cos and sin from the table cs (2, T, D/2).
static void rope_position(float *y, const float *x, const float *cs, int64_t t, int64_t outer,
                          int64_t T, int64_t inner, int64_t D, int interleaved, int inverse,
                          int acc) {
  const float *c = cs + t * (D / 2), *s = cs + (T + t) * (D / 2);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t h = 0; h < inner; h++) {
      int64_t off = ((o * T + t) * inner + h) * D;
      rope_row(y + off, x + off, c, s, D, interleaved, inverse, acc);
    }
}

void pr_rope_fwd(float *y, const float *x, int64_t outer, int64_t T, int64_t inner, int64_t D,
                 float theta, int interleaved) {
  const float *cs = pr_rope_table(T, D, theta);
  PR_PARALLEL_FOR(outer * T * inner * D >= PAR_MIN && T > 1, (int64_t t = 0; t < T; t++),
                  rope_position(y, x, cs, t, outer, T, inner, D, interleaved, 0, 0));
}

void pr_rope_bwd(float *dx, const float *dy, int64_t outer, int64_t T, int64_t inner, int64_t D,
                 float theta, int interleaved, int acc) {
  const float *cs = pr_rope_table(T, D, theta);
  PR_PARALLEL_FOR(outer * T * inner * D >= PAR_MIN && T > 1, (int64_t t = 0; t < T; t++),
                  rope_position(dx, dy, cs, t, outer, T, inner, D, interleaved, 1, acc));
}

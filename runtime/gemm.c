// gemm.c: pipec's own row-major sgemm (gemm.h): every element of C is the chain of fused
// multiply-adds over k = 0..K-1 in ascending order, from 0 (or from C's value, or added to C
// after the chain: gemm.h's modes), so its bits depend on nothing but the operands: not on the
// blocking, the thread split, nor the build (v3 and v4 run the same chain in 8- or 16-float
// lanes; v1, without hardware FMA, runs it through libm's fmaf: exact, slow, and used only where
// asked for: the kernels call OpenBLAS at v1).
//
// A register tile of C, MR rows x NR columns (AVX-512: 12 x 32, 24 zmm accumulators; AVX2: 6 x
// 16, 12 ymm), holds its accumulators in registers over a block of K (up to KC_MAX; a longer K
// continues the chain from the block's stored C, which a float store and load keep exactly): per
// k it loads NR contiguous floats of a panel of B and broadcasts MR values of A. B's panels (K x
// NR, contiguous) are copied once per call, whatever B's layout: read in place, a panel's rows lie
// a row stride apart, and at the model's strides (2 KiB: 512 floats) they fall into a few cache
// sets, so that a panel that should stay in L1/L2 for the whole block of A is evicted (TN
// 512x128x768 ran at 0.68x OpenBLAS in place, 0.96x packed); the copy costs K x N of an M x N x K
// product. A is read in place where its rows are stored (NN: the MR rows streamed along k) and
// copied per block of rows into MR-wide panels where it is stored transposed (TN: A(i, k) at A[k *
// lda + i], the same set conflicts) with a row stride above PACK_A_MIN_LD; at a shorter stride
// the tile broadcasts it in place (the MR values of a k are contiguous). Where the operand's rows
// are stored contiguous along the panels (B not transposed, A transposed), the packing walks each
// stored row once across all the block's panels, so memory is read in order, not a row stride
// apart. Edge tiles use masked loads and stores (AVX-512 masks, AVX2 vmaskmov); C is written
// directly, never zeroed first. The blocks over N, K and M keep a block of B in L2, a panel of it
// in L1 and a block of A in L2 (gemm_kn); the NT copy of B transposes 8 x 8 blocks in registers.
// An epilogue (gemm.h's PrEpi: bias + gelu, gelu's backward) runs on each block of rows of C
// right after the block's last block of K, row by row while the block is in L2 (its rows limited
// to EPI_C_BYTES of C; per register tile, the tiles' rows a 2 KiB stride apart in C and in the
// epilogue's arrays fell into a few L1 sets: gpt_char's c_fc + gelu 1240 us against 920 separate).
#include "gemm.h"
#include "kernels_common.h"

#include <math.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#define MR 12 // rows of a register tile
#define VL 16 // floats in a vector
typedef __m512 vec;
typedef __mmask16 vmask;
#define VZERO()          _mm512_setzero_ps()
#define VSET1(x)         _mm512_set1_ps(x)
#define VFMA(a, b, c)    _mm512_fmadd_ps(a, b, c)
#define VADD(a, b)       _mm512_add_ps(a, b)
#define VLOAD(p)         _mm512_loadu_ps(p)
#define VSTORE(p, x)     _mm512_storeu_ps(p, x)
#define VLOADM(p, m)     _mm512_maskz_loadu_ps(m, p)
#define VSTOREM(p, m, x) _mm512_mask_storeu_ps(p, m, x)
#define VMASK(n)         ((__mmask16)((1u << (n)) - 1u))
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MR               6
#define VL               8
typedef __m256 vec;
typedef __m256i vmask;
static const int32_t mask_tab[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
#define VZERO()          _mm256_setzero_ps()
#define VSET1(x)         _mm256_set1_ps(x)
#define VFMA(a, b, c)    _mm256_fmadd_ps(a, b, c)
#define VADD(a, b)       _mm256_add_ps(a, b)
#define VLOAD(p)         _mm256_loadu_ps(p)
#define VSTORE(p, x)     _mm256_storeu_ps(p, x)
#define VLOADM(p, m)     _mm256_maskload_ps(p, m)
#define VSTOREM(p, m, x) _mm256_maskstore_ps(p, m, x)
#define VMASK(n)         _mm256_loadu_si256((const __m256i *)(mask_tab + 8 - (n)))
#endif

#define A_BLOCK_BYTES ((int64_t)256 << 10) // rows of C per block: their A fits in this (L2)
#define KC_MAX        512                  // the longest K block
#define B_BLOCK_BYTES ((int64_t)1 << 20)   // columns of C per block: their B fits in this (L2)
#define EPI_C_BYTES   ((int64_t)128 << 10) // with an epilogue, rows of C per block: their C fits
// A stored transposed is packed only where its row stride (floats) is above this. gpt_char's
// weight-gradient products (768 rows; 1 thread, x86-64-v4, best of 40 calls, 4-5 pairs alternating
// on a loaded machine), in place against packed: stride 128, 128 x 128 163-160 against 184 us,
// 128 x 512 681-698 against 725-728 (x cold 779-801 against 812-858); stride 384, 384 x 128:
// 528-535 against 535-541, cold 619-653 against 621-652 (a tie: packed, as before); stride 512 (2
// KiB, the rows in a few cache sets), 512 x 128: 784 against 721, cold 1000 against 811.
#define PACK_A_MIN_LD 256

#ifdef VL
#ifdef PR_ISA_NAME // the portable runtime's v3/v4 builds: the helpers named per build (f__v4), as
// the exported kernels are (march.sh tells the builds' vector code apart by these names)
#define tile_any   PR_ISA_NAME(tile_any)
#define pack_a     PR_ISA_NAME(pack_a)
#define pack_b     PR_ISA_NAME(pack_b)
#define gemm_kn    PR_ISA_NAME(gemm_kn)
#define transpose8 PR_ISA_NAME(transpose8)
#endif
#define NV 2         // vectors per tile row
#define NR (NV * VL) // columns of a register tile

// One tile: C[r][0..ncols) for r < mr, ncols <= nv * VL (masked) or = NR (not masked). A(r, k) is
// A[r * ars + k * acs]; B's row k starts at B + k * ldb. mr, nv, masked are constants where the
// tile is inlined, so the accumulators live in registers.
static inline __attribute__((always_inline)) void
tile(const int mr, const int nv, const int masked, int64_t K, const float *restrict A, int64_t ars,
     int64_t acs, const float *restrict B, int64_t ldb, float *restrict C, int64_t ldc, int mode,
     int64_t ncols) {
  vec c[MR][NV];
  vmask m[NV];
  for (int v = 0; v < nv; v++) {
    int64_t n = masked ? ncols - v * VL : VL;
    m[v] = VMASK(n >= VL ? VL : n > 0 ? (int)n : 0);
  }
#define LD(p, v)    (masked ? VLOADM(p, m[v]) : VLOAD(p))
#define ST(p, v, x) (masked ? VSTOREM(p, m[v], x) : VSTORE(p, x))
  _Pragma("GCC unroll 16") for (int r = 0; r < mr; r++)
      _Pragma("GCC unroll 2") for (int v = 0; v < nv; v++) c[r][v] =
          mode == PR_GEMM_CONT ? LD(C + r * ldc + v * VL, v) : VZERO();
  const float *bp = B, *ap = A;
  for (int64_t k = 0; k < K; k++, bp += ldb, ap += acs) {
    vec b[NV];
    _Pragma("GCC unroll 2") for (int v = 0; v < nv; v++) b[v] = LD(bp + v * VL, v);
    _Pragma("GCC unroll 16") for (int r = 0; r < mr; r++) {
      vec x = VSET1(ap[r * ars]);
      _Pragma("GCC unroll 2") for (int v = 0; v < nv; v++) c[r][v] = VFMA(x, b[v], c[r][v]);
    }
  }
  _Pragma("GCC unroll 16") for (int r = 0; r < mr; r++)
      _Pragma("GCC unroll 2") for (int v = 0; v < nv; v++) {
    float *p = C + r * ldc + v * VL;
    ST(p, v, mode == PR_GEMM_ADD ? VADD(LD(p, v), c[r][v]) : c[r][v]);
  }
#undef LD
#undef ST
}

// The tile at A, B, C with mr rows and ncols columns: the full one unmasked, the edges masked.
static void tile_any(int mr, int64_t ncols, int64_t K, const float *A, int64_t ars, int64_t acs,
                     const float *B, int64_t ldb, float *C, int64_t ldc, int mode) {
  if (mr == MR && ncols >= NR) {
    tile(MR, NV, 0, K, A, ars, acs, B, ldb, C, ldc, mode, NR);
    return;
  }
  int two = ncols > VL;
#define EDGE(n)                                                                                    \
  case n:                                                                                          \
    if (two)                                                                                       \
      tile(n, 2, 1, K, A, ars, acs, B, ldb, C, ldc, mode, ncols);                                  \
    else                                                                                           \
      tile(n, 1, 1, K, A, ars, acs, B, ldb, C, ldc, mode, ncols);                                  \
    break;
  // (clang-format settles on no layout for these macro calls)
  // clang-format off
  switch (mr) {
    EDGE(1) EDGE(2) EDGE(3) EDGE(4) EDGE(5) EDGE(6)
#if MR > 6
    EDGE(7) EDGE(8) EDGE(9) EDGE(10) EDGE(11) EDGE(12)
#endif
  default:
    break;
  }
  // clang-format on
#undef EDGE
}

// dst[t * ldd + r] = src[r * lds + t] for r, t < 8: an 8 x 8 block transposed in AVX registers.
static inline void transpose8(const float *src, int64_t lds, float *dst, int64_t ldd) {
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * lds);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; i++) {
    _mm256_storeu_ps(dst + i * ldd, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ldd, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}

// Packs the panel of B's columns j..j+nc (nc <= NR) into dst (K x NR, row k at dst + k * NR):
// B(k, c) = B[k * brs + c * bcs], B stored transposed (brs = 1: column c of the panel is row c of
// the storage, read contiguously along k).
static void pack_b_t(int64_t K, int64_t nc, const float *B, int64_t bcs, float *dst) {
  int64_t k0 = 0;
  if (nc == NR) // 8 x 8 blocks transposed in registers, the last K % 8 rows one by one
    for (; k0 + 8 <= K; k0 += 8)
      for (int c = 0; c < NR; c += 8) transpose8(B + c * bcs + k0, bcs, dst + k0 * NR + c, NR);
  for (int64_t c = 0; c < NR; c++)
    for (int64_t k = k0; k < K; k++) dst[k * NR + c] = c < nc ? B[c * bcs + k] : 0.0f;
}

// Packs B's columns 0..n into panels of NR (panel q, columns q*NR.., at dst + q * NR * K, row k
// at + k * NR; columns past n zero): B(k, c) = B[k * brs + c * bcs]. Where B's rows are stored
// (bcs = 1) k is outermost, the storage read once contiguously, as pack_a; stored transposed,
// panel by panel (pack_b_t).
static void pack_b(int64_t K, int64_t n, const float *B, int64_t brs, int64_t bcs, float *dst) {
  if (bcs != 1) {
    for (int64_t j = 0; j < n; j += NR)
      pack_b_t(K, n - j < NR ? n - j : NR, B + j * bcs, bcs, dst + j * K);
    return;
  }
  int64_t full = n / NR * NR;
  for (int64_t k = 0; k < K; k++) {
    const float *src = B + k * brs;
    for (int64_t j = 0; j < full; j += NR)
      memcpy(dst + j * K + k * NR, src + j, NR * sizeof(float));
    if (full < n) {
      float *d = dst + full * K + k * NR;
      memcpy(d, src + full, (size_t)(n - full) * sizeof(float));
      memset(d + (n - full), 0, (size_t)(NR - (n - full)) * sizeof(float));
    }
  }
}

// Packs rows 0..m of op(A), stored transposed (A(r, k) = A[k * acs + r]), into panels of MR rows
// (panel q, rows q*MR.., at dst + q * MR * K; k at + k * MR; rows past m zero). Row k of the
// storage holds the m values of every panel, so k is outermost: the storage is read once,
// contiguously (a panel at a time read MR floats a row stride apart, K times: at the model's
// strides, 2 KiB, those fall into a few L1 sets and the hardware prefetcher does not follow them).
static void pack_a(int64_t K, int64_t m, const float *A, int64_t acs, float *dst) {
  int64_t full = m / MR * MR;
  for (int64_t k = 0; k < K; k++) {
    const float *src = A + k * acs;
    for (int64_t i = 0; i < full; i += MR)
      memcpy(dst + i * K + k * MR, src + i, MR * sizeof(float));
    if (full < m)
      for (int64_t r = 0; r < MR; r++)
        dst[full * K + k * MR + r] = full + r < m ? src[full + r] : 0.0f;
  }
}

// C (M,N) = op(A) . op(B) with mode; A(i, k) = A[i * ars + k * acs], B(k, j) = B[k * brs + j *
// bcs]. Blocked as BLIS does, for the caches: columns in blocks whose B panels fit B_BLOCK_BYTES
// (L2), K in blocks of at most KC_MAX (a tile's B panel in L1; each block's chain continues from
// the previous block's C, PR_GEMM_CONT, so the bits are the unblocked chain's; not for
// PR_GEMM_ADD, whose chain must end before it is added), rows in blocks whose A fits
// A_BLOCK_BYTES. Per block B's panels are packed, and A where it is stored transposed.
static void gemm_kn(int64_t M, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs,
                    const float *B, int64_t brs, int64_t bcs, const float *packed, float *C,
                    int64_t ldc, int mode, const PrEpi *epi) {
  int64_t nkb = mode == PR_GEMM_ADD ? 1 : (K + KC_MAX - 1) / KC_MAX, kc = (K + nkb - 1) / nkb;
  int64_t mc = A_BLOCK_BYTES / (kc * (int64_t)sizeof(float)) / MR * MR;
  int64_t ncb = B_BLOCK_BYTES / (kc * (int64_t)sizeof(float)) / NR * NR;
  ncb = ncb < NR ? NR : ncb > N ? (N + NR - 1) / NR * NR : ncb;
  if (epi) { // a block of C (and the epilogue's arrays) small enough to stay in L2 for it
    int64_t me = EPI_C_BYTES / ((ncb < N ? ncb : N) * (int64_t)sizeof(float)) / MR * MR;
    mc = me < mc ? me : mc;
  }
  mc = mc < MR ? MR : mc > M ? (M + MR - 1) / MR * MR : mc;
  int pa = ars == 1 && acs > PACK_A_MIN_LD;
  float *bp = packed ? NULL : pr_scratch((size_t)(kc * ncb) * sizeof(float));
  float *ap = pa ? pr_scratch((size_t)(kc * mc) * sizeof(float)) : NULL;
  for (int64_t jc = 0; jc < N; jc += ncb) {
    int64_t nn = N - jc < ncb ? N - jc : ncb;
    for (int64_t pc = 0; pc < K; pc += kc) {
      int64_t kk = K - pc < kc ? K - pc : kc;
      int m = pc == 0 ? mode : PR_GEMM_CONT;
      if (!packed) pack_b(kk, nn, B + jc * bcs + pc * brs, brs, bcs, bp);
      for (int64_t i0 = 0; i0 < M; i0 += mc) {
        int64_t i1 = M - i0 < mc ? M : i0 + mc;
        const float *a0 = A + pc * acs;
        if (pa) pack_a(kk, i1 - i0, a0 + i0 * ars, acs, ap);
        for (int64_t j = 0; j < nn; j += NR) {
          int64_t nc = nn - j < NR ? nn - j : NR;
          const float *b = packed ? packed + (jc + j) * K + pc * NR : bp + j * kk;
          float *c0 = C + jc + j;
          for (int64_t i = i0; i < i1; i += MR) {
            int mr = i1 - i < MR ? (int)(i1 - i) : MR;
            if (pa)
              tile_any(mr, nc, kk, ap + (i - i0) * kk, 1, MR, b, NR, c0 + i * ldc, ldc, m);
            else
              tile_any(mr, nc, kk, a0 + i * ars, ars, acs, b, NR, c0 + i * ldc, ldc, m);
          }
        }
        if (epi && pc + kk == K) // the rows' block of C is final, and in L2
          pr_epi_apply(epi, C + i0 * ldc + jc, ldc, i1 - i0, nn);
      }
    }
  }
  pr_scratch_free(ap);
  pr_scratch_free(bp);
}
#else
// The x86-64 baseline: the same chains with libm's fmaf (exact; software on a CPU without FMA).
// Packed B (pr_gemm_pack) has panels of one column.
#define NR 1
static void pack_b(int64_t K, int64_t n, const float *B, int64_t brs, int64_t bcs, float *dst) {
  for (int64_t j = 0; j < n; j++)
    for (int64_t k = 0; k < K; k++) dst[j * K + k] = B[k * brs + j * bcs];
}

static void gemm_kn(int64_t M, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs,
                    const float *B, int64_t brs, int64_t bcs, const float *packed, float *C,
                    int64_t ldc, int mode, const PrEpi *epi) {
  if (packed) B = packed, brs = 1, bcs = K;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      float c = mode == PR_GEMM_CONT ? C[i * ldc + j] : 0.0f;
      for (int64_t k = 0; k < K; k++) c = fmaf(A[i * ars + k * acs], B[k * brs + j * bcs], c);
      C[i * ldc + j] = mode == PR_GEMM_ADD ? C[i * ldc + j] + c : c;
    }
  if (epi) pr_epi_apply(epi, C, ldc, M, N);
}
#endif

void pr_gemm_epi(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float *C, int64_t ldc, int mode, const PrEpi *e) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) { // the empty chain: 0
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++)
        C[i * ldc + j] = mode == PR_GEMM_SET   ? 0.0f
                         : mode == PR_GEMM_ADD ? C[i * ldc + j] + 0.0f
                                               : C[i * ldc + j];
    if (e) pr_epi_apply(e, C, ldc, M, N);
    return;
  }
  gemm_kn(M, N, K, A, ta ? 1 : lda, ta ? lda : 1, B, tb ? 1 : ldb, tb ? ldb : 1, NULL, C, ldc, mode,
          e);
}

void pr_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
             const float *B, int64_t ldb, float *C, int64_t ldc, int mode) {
  pr_gemm_epi(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, mode, NULL);
}

int64_t pr_gemm_panels(int64_t N, int64_t *width) {
  *width = NR;
  return (N + NR - 1) / NR;
}

void pr_gemm_pack(int tb, int64_t K, int64_t N, const float *B, int64_t ldb, float *dst, int64_t p0,
                  int64_t p1) {
  int64_t j0 = p0 * NR, j1 = p1 * NR < N ? p1 * NR : N;
  if (j0 < j1)
    pack_b(K, j1 - j0, tb ? B + j0 * ldb : B + j0, tb ? 1 : ldb, tb ? ldb : 1, dst + j0 * K);
}

void pr_gemm_packed_epi(int ta, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                        const float *packed, float *C, int64_t ldc, int mode, const PrEpi *e) {
  if (M <= 0 || N <= 0 || K <= 0) return; // (K = 0: the callers handle it)
  gemm_kn(M, N, K, A, ta ? 1 : lda, ta ? lda : 1, NULL, 0, 0, packed, C, ldc, mode, e);
}

void pr_gemm_packed(int ta, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                    const float *packed, float *C, int64_t ldc, int mode) {
  pr_gemm_packed_epi(ta, M, N, K, A, lda, packed, C, ldc, mode, NULL);
}

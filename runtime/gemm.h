// gemm.h: pipec's own single-precision GEMM (gemm.c; internal to the runtime): row-major
// C (M,N) = op(A) (M,K) . B (K,N), every element of C the chain of fused multiply-adds over
// k = 0..K-1 in ascending order (one rounding per step), whatever the blocking, the thread split
// or the build (v3 AVX2 and v4 AVX-512 compute the same bits; the v1 build runs the same chain
// with libm's fmaf, exact and slow: the kernels use OpenBLAS there, the tests use it as a
// reference). kernels_gemm.c calls it at v3/v4 unless PIPEC_GEMM=openblas.
#ifndef PIPERT_GEMM_H
#define PIPERT_GEMM_H

#include <stdint.h>

// What the chain starts from and where it goes.
enum {
  PR_GEMM_SET = 0,  // C = chain from 0 (beta = 0; C is never read)
  PR_GEMM_CONT = 1, // C = chain from C's value (beta = 1: continues an earlier product's chain)
  PR_GEMM_ADD = 2,  // C = C + (chain from 0): the product rounded, then added (the kernels' acc)
};

// C (M,N) = op(A) . op(B) with `mode` (above), on the calling thread; ta/tb: A (K,M) / B (N,K)
// stored transposed. Packing buffers come from the calling thread's pr_scratch.
void pr_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
             const float *B, int64_t ldb, float *C, int64_t ldc, int mode);

// B packed once for several calls (kernels_gemm.c's row blocks of one product share it):
// pr_gemm_panels(N, &width) panels of the build's tile width, panels * width * K floats in all;
// pr_gemm_pack packs panels p0..p1-1 of op(B) (B (K,N), or (N,K)
// with tb) into dst, so threads can share the packing; pr_gemm_packed is pr_gemm with B so packed
// (K >= 1), the same bits.
int64_t pr_gemm_panels(int64_t N, int64_t *width);
void pr_gemm_pack(int tb, int64_t K, int64_t N, const float *B, int64_t ldb, float *dst, int64_t p0,
                  int64_t p1);
void pr_gemm_packed(int ta, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                    const float *packed, float *C, int64_t ldc, int mode);

// An elementwise epilogue applied to each finished block of C (after the last block of K and the
// store of `mode`), by the thread that computed it, while the block is in cache: its arrays have
// C's layout (element (i, j) of each at the same offset from its base as C's from c0, row stride
// ldc), so a block of C at C0 + off is followed by the epilogue's at + off. kernels_fused.c applies
// it with gelu_impl.h's expressions: the bits of the separate kernels.
enum {
  PR_EPI_BIAS_GELU = 1, // C += bias (per column, when bias); y = gelu(C), cdf = its factor c
  PR_EPI_GELU_BWD = 2,  // C is gelu's dy: dx (+)= dy * gelu'(x) (x, cdf: the forward's)
};
typedef struct PrEpi {
  int kind;          // PR_EPI_*
  const float *c0;   // the product's C (the origin of the arrays below)
  const float *bias; // BIAS_GELU: (N) added to C first, or NULL
  float *y;          // BIAS_GELU: gelu(C), C's layout
  float *cdf;        // BIAS_GELU: the saved factor, C's layout, or NULL (not saved)
  const float *x;    // GELU_BWD: gelu's input, C's layout
  const float *xcdf; // GELU_BWD: its saved factor, C's layout, or NULL (recomputed)
  float *dx;         // GELU_BWD: gelu's input gradient, C's layout
  int exact;         // the erf form (1) or the tanh approximation (0)
  int acc;           // GELU_BWD: add into dx (1) or write it (0)
} PrEpi;

// The epilogue e on the block C (m,n) of its product (row stride ldc; kernels_fused.c).
void pr_epi_apply(const PrEpi *e, float *C, int64_t ldc, int64_t m, int64_t n);

// pr_gemm and pr_gemm_packed with epilogue e (NULL: none) on each finished block of C.
void pr_gemm_epi(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float *C, int64_t ldc, int mode, const PrEpi *e);
void pr_gemm_packed_epi(int ta, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                        const float *packed, float *C, int64_t ldc, int mode, const PrEpi *e);

// 1 when the kernels run pipec's own GEMM at v3/v4 (PIPEC_GEMM unset or "own"), 0 for OpenBLAS
// (PIPEC_GEMM=openblas); another value stops the program. Read once (gemm_select.c).
int pr_gemm_own(void);

// 1 when this process's kernels run the own GEMM: pr_gemm_own() in a build of the kernels with
// FMA (v3, v4, --march=native on an FMA CPU), 0 where they run OpenBLAS (kernels_gemm.c).
int pr_gemm_in_use(void);

#endif // PIPERT_GEMM_H

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

// 1 when the kernels run pipec's own GEMM at v3/v4 (PIPEC_GEMM unset or "own"), 0 for OpenBLAS
// (PIPEC_GEMM=openblas); another value stops the program. Read once (blas_info.c).
int pr_gemm_own(void);

// 1 when this process's kernels run the own GEMM: pr_gemm_own() in a build of the kernels with
// FMA (v3, v4, --march=native on an FMA CPU), 0 where they run OpenBLAS (kernels_gemm.c).
int pr_gemm_in_use(void);

#endif // PIPERT_GEMM_H

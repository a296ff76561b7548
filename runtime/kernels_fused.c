// kernels_fused.c: the GEMM's elementwise epilogues (gemm.h's PrEpi): bias + gelu on a finished
// block of a linear's output, and gelu's backward on a finished block of its dy, applied by
// gemm.c to each block of rows of C right after its last block of K (in L2), or by
// kernels_gemm.c to each thread's block after an OpenBLAS call.
//
// Every element gets exactly the float operations of the separate kernels (the bias add of
// pr_linear_fwd, then pr_gelu_fwd; pr_gelu_bwd), from gelu_impl.h's shared expressions: the
// operations are per element and rounded as written (no contraction), so neither the grouping
// into blocks nor the vector width changes a bit. A block is walked row by row in pieces of
// GELU_BLK contiguous floats, the exact gelu's three steps each one loop over the piece
// (gelu_phi_block), as pr_gelu_fwd walks its blocks.
#pragma GCC optimize("fp-contract=off", "no-trapping-math")

#include "gelu_impl.h"
#include "gemm.h"
#include "kernels_common.h"

// Bias + gelu forward on the row x (n <= GELU_BLK), y and cdf (NULL: not saved), bias (n) or
// NULL: x = x + bias, then y = x * c, as pr_linear_fwd's bias pass and pr_gelu_fwd's block.
static void row_gelu(float *restrict x, float *restrict y, float *restrict cdf,
                     const float *restrict bias, int64_t n, int exact) {
  if (bias)
    for (int64_t j = 0; j < n; j++) x[j] = x[j] + bias[j];
  gelu_fwd_block(y, cdf, x, n, exact);
}

void pr_epi_apply(const PrEpi *e, float *C, int64_t ldc, int64_t m, int64_t n) {
  int64_t off = C - e->c0, col = off % ldc; // the block's place in the product
  for (int64_t r = 0; r < m; r++)
    for (int64_t j0 = 0; j0 < n; j0 += GELU_BLK) {
      int64_t nc = n - j0 < GELU_BLK ? n - j0 : GELU_BLK;
      int64_t o = off + r * ldc + j0; // the piece's offset in every array
      if (e->kind == PR_EPI_BIAS_GELU)
        row_gelu(C + r * ldc + j0, e->y + o, e->cdf ? e->cdf + o : NULL,
                 e->bias ? e->bias + col + j0 : NULL, nc, e->exact);
      else
        gelu_bwd_rows(e->dx + o, C + r * ldc + j0, e->x + o, e->xcdf ? e->xcdf + o : NULL, nc,
                      e->exact, e->acc);
    }
}

// kernels_gemm.c: the kernels built on matrix products: matmul (batched, transposed operands),
// linear, and sum_rows (linear's bias gradient), forward and backward; and the linear's products
// fused with a gelu epilogue (pr_linear_gelu_fwd, pr_linear_bwd_x_gelu: gemm.h's PrEpi).
//
// The products run pipec's own GEMM (gemm.c: each element of C the FMA chain over k in ascending
// order) at v3/v4 and with --march=native, unless PIPEC_GEMM=openblas; OpenBLAS at v1 (no FMA).
// The kernels split C themselves into blocks fixed by the shapes alone, one single-threaded call
// per block, blocks spread over OpenMP threads: OpenBLAS's own threading does not give bitwise
// the same result for different thread counts (its partition of C changes which micro-kernel
// variant computes an element); the own GEMM's bits do not depend on the split at all.
//
// `acc` = 1 adds the product, rounded, into the output: the own GEMM in its store
// (PR_GEMM_ADD), OpenBLAS into scratch that pr_acc_finish then adds (never beta = 1 on the output,
// which would round differently). Batch entries summed into one output (pr_matmul_bwd_b with a
// shared b) continue one chain: with the own GEMM entry i's chain starts from the sum of entries
// 0..i-1 (PR_GEMM_CONT), so it equals one GEMM over the entries' rows in order; OpenBLAS runs
// beta = 1. sum_rows reduces over rows in ascending order with threads owning column blocks.
#pragma GCC optimize("fp-contract=off", "no-trapping-math")

#include "gemm.h"
#include "kernels_common.h"

#include <cblas.h>
#include <limits.h>

#define GEMM_SPLIT_MIN  ((int64_t)1 << 21) // M*N*K below this: one call
#define GEMM_HALVE_MIN  ((int64_t)1 << 23) // M*N*K from which a product is at least two blocks
#define GEMM_BLOCKS_MAX 16                 // blocks of >= 384 rows (or columns) of C

static void blas_single_thread(void) {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

// Whether the products run the own GEMM (gemm.c): never in a build without FMA (v1).
static int own(void) {
#ifdef __FMA__
  return pr_gemm_own();
#else
  return 0;
#endif
}

int pr_gemm_in_use(void) {
  return own();
}

// One single-threaded call: C (M,N) = op(A) (M,K) . op(B) (K,N) with mode (gemm.h; OpenBLAS:
// beta 0 or 1, never PR_GEMM_ADD), then epilogue epi (NULL: none) on it: per block of rows in the
// own GEMM (gemm.c), on the whole block after OpenBLAS.
static void sgemm1(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                   const float *B, int64_t ldb, int mode, float *C, int64_t ldc, const PrEpi *epi) {
  if (own()) {
    pr_gemm_epi(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, mode, epi);
    return;
  }
  float beta = mode == PR_GEMM_CONT ? 1.0f : 0.0f;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M,
              (int)N, (int)K, 1.0f, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
  if (epi) pr_epi_apply(epi, C, ldc, M, N);
}

static void check_blas_dims(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                            int64_t ldc) {
  int64_t big = M > N ? M : N;
  big = big > K ? big : K;
  big = big > lda ? big : lda;
  big = big > ldb ? big : ldb;
  big = big > ldc ? big : ldc;
  prCheck(big <= INT_MAX, "split the operation into smaller pieces",
          "matrix dimension %lld does not fit OpenBLAS's 32-bit int", (long long)big);
}

// C (M,N) = op(A) (M,K) . op(B) (K,N) with mode (gemm.h); ta/tb: A/B stored transposed.
// Large products are split along the longer of M and N into equal blocks (multiples of 16) of at
// least 384: each block repacks the other operand, so smaller blocks cost more than they gain on
// 2 cores (gpt_char step, 1 thread: 66 ms with 384, 83 ms with 64). A product of at least
// GEMM_HALVE_MIN whose longer side is under 768 (a weight gradient: C is the weight, the long
// side K the rows) is still cut in two, so that two threads share it: the repacking of the other
// operand (K x the shorter side) costs about 1% of the 1-thread step, one thread alone on a third
// of the step's FLOPs cost 15% of the 2-thread one (gpt_char). (Measured with OpenBLAS; the own
// GEMM keeps the rule, so its blocks are the same, and packs op(B) once for all row blocks.)
// epi (NULL: none) runs on each block by the thread that computed it (gemm.h's PrEpi).
static void gemm_epi(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                     const float *B, int64_t ldb, int mode, float *C, int64_t ldc,
                     const PrEpi *epi) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (mode == PR_GEMM_SET)
      for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, (size_t)N * sizeof(float));
    if (epi) pr_epi_apply(epi, C, ldc, M, N);
    return;
  }
  if (!own()) {
    check_blas_dims(M, N, K, lda, ldb, ldc);
    blas_single_thread();
  }
  int64_t split = M >= N ? M : N, nblk = 1;
  if (M * N * K >= GEMM_SPLIT_MIN) {
    nblk = split / 384;
    nblk = nblk > GEMM_BLOCKS_MAX ? GEMM_BLOCKS_MAX : nblk < 1 ? 1 : nblk;
    if (nblk < 2 && M * N * K >= GEMM_HALVE_MIN && split >= 128) nblk = 2;
  }
  int64_t bs = ((split + nblk - 1) / nblk + 15) & ~(int64_t)15;
  nblk = (split + bs - 1) / bs;
  if (own() && nblk > 1 && M >= N) { // every row block reads all of op(B): packed once, shared
    // One parallel region for the packing and the row blocks, the loops' implicit barrier between
    // them (the blocks read every panel): a second region would wake the threads once more (a
    // futex wake-up under the program's wait policy, util.c), twice per linear layer of a step.
    int64_t width, np = pr_gemm_panels(N, &width);
    float *bp = pr_scratch((size_t)(np * width * K) * sizeof(float));
    // The panels in one contiguous range per thread: pr_gemm_pack walks op(B)'s stored rows once
    // over a range (panel by panel they would be read a row stride apart).
    int64_t nch = pr_threads() < np ? pr_threads() : np;
    PR_PARALLEL(1, {
      _Pragma("omp for schedule(static)") for (int64_t c = 0; c < nch; c++)
          pr_gemm_pack(tb, K, N, B, ldb, bp, c * np / nch, (c + 1) * np / nch);
      _Pragma("omp for schedule(static)") for (int64_t i = 0; i < nblk; i++) {
        int64_t o = i * bs, len = split - o < bs ? split - o : bs;
        pr_gemm_packed_epi(ta, len, N, K, ta ? A + o : A + o * lda, lda, bp, C + o * ldc, ldc, mode,
                           epi);
      }
    });
    pr_scratch_free(bp);
    return;
  }
  PR_PARALLEL_FOR(nblk > 1, (int64_t i = 0; i < nblk; i++), {
    int64_t o = i * bs, len = split - o < bs ? split - o : bs;
    if (M >= N) // rows o.. of C and of op(A)
      sgemm1(ta, tb, len, N, K, ta ? A + o : A + o * lda, lda, B, ldb, mode, C + o * ldc, ldc, epi);
    else // columns o.. of C and of op(B)
      sgemm1(ta, tb, M, len, K, A, lda, tb ? B + o * ldb : B + o, ldb, mode, C + o, ldc, epi);
  });
}

static void gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                 const float *B, int64_t ldb, int mode, float *C, int64_t ldc) {
  gemm_epi(ta, tb, M, N, K, A, lda, B, ldb, mode, C, ldc, NULL);
}

// batch independent GEMMs (pointers advance by sa, sb, sc): small ones one per thread, large ones
// one after the other, each split by gemm().
static void gemm_batched(int64_t batch, int ta, int tb, int64_t M, int64_t N, int64_t K,
                         const float *A, int64_t lda, int64_t sa, const float *B, int64_t ldb,
                         int64_t sb, int mode, float *C, int64_t ldc, int64_t sc) {
  if (batch == 1 || M * N * K >= GEMM_SPLIT_MIN || M == 0 || N == 0 || K == 0) {
    for (int64_t i = 0; i < batch; i++)
      gemm(ta, tb, M, N, K, A + i * sa, lda, B + i * sb, ldb, mode, C + i * sc, ldc);
    return;
  }
  if (!own()) {
    check_blas_dims(M, N, K, lda, ldb, ldc);
    blas_single_thread();
  }
  PR_PARALLEL_FOR(
      batch * M * N * K >= GEMM_SPLIT_MIN, (int64_t i = 0; i < batch; i++),
      sgemm1(ta, tb, M, N, K, A + i * sa, lda, B + i * sb, ldb, mode, C + i * sc, ldc, NULL));
}

// Where a product with acc goes and how: the output itself with the own GEMM (adding in its store
// when acc), else OpenBLAS's target (scratch when acc, pr_acc_target). gemm_done finishes it.
static float *gemm_target(float *out, int64_t n, int acc, int *mode) {
  *mode = own() && acc ? PR_GEMM_ADD : PR_GEMM_SET;
  return own() ? out : pr_acc_target(out, n, acc);
}
static void gemm_done(float *out, float *t, int64_t n, int acc) {
  if (t != out) pr_acc_finish(out, t, n, acc);
}

// ---------------------------------------------------------------------------------------------
// matmul: y (batch,M,N) = op(a) (batch,M,K) . op(b) (batch|1,K,N)

void pr_matmul_fwd(float *y, const float *a, const float *b, int64_t batch, int64_t M, int64_t N,
                   int64_t K, int ta, int tb, int b_batched) {
  int64_t lda = ta ? M : K, ldb = tb ? K : N;
  if (!b_batched && !ta) { // one GEMM over (batch*M) rows
    gemm(0, tb, batch * M, N, K, a, lda, b, ldb, PR_GEMM_SET, y, N);
    return;
  }
  gemm_batched(batch, ta, tb, M, N, K, a, lda, M * K, b, ldb, b_batched ? K * N : 0, PR_GEMM_SET, y,
               N, M * N);
}

// da (batch,M,K) or, with ta, (batch,K,M) = dy . op(b)^T (in a's orientation)
void pr_matmul_bwd_a(float *da, const float *dy, const float *b, int64_t batch, int64_t M,
                     int64_t N, int64_t K, int ta, int tb, int b_batched, int acc) {
  int64_t n = batch * M * K, ldb = tb ? K : N, sb = b_batched ? K * N : 0;
  int mode;
  float *t = gemm_target(da, n, acc, &mode);
  if (!ta && !b_batched) {
    // da (batch*M,K) = dy (batch*M,N) . op(b)^T
    gemm(0, !tb, batch * M, K, N, dy, N, b, ldb, mode, t, K);
  } else if (!ta) { // da (M,K) = dy (M,N) . op(b)^T (N,K)
    gemm_batched(batch, 0, !tb, M, K, N, dy, N, M * N, b, ldb, sb, mode, t, K, M * K);
  } else { // da^T stored (K,M) = op(b) (K,N) . dy^T (N,M)
    gemm_batched(batch, tb, 1, K, M, N, b, ldb, sb, dy, N, M * N, mode, t, M, M * K);
  }
  gemm_done(da, t, n, acc);
}

// db (batch|1,K,N) or, with tb, (batch|1,N,K) = op(a)^T . dy (in b's orientation); with
// b_batched = 0 the batch entries' contributions are summed in ascending order.
void pr_matmul_bwd_b(float *db, const float *dy, const float *a, int64_t batch, int64_t M,
                     int64_t N, int64_t K, int ta, int tb, int b_batched, int acc) {
  int64_t n = (b_batched ? batch : 1) * K * N, lda = ta ? M : K;
  int mode;
  float *t;
  if (!b_batched && ta) {          // one shared b, a stored transposed: the batch entries in order
    t = pr_acc_target(db, n, acc); // one chain over all entries, then added: scratch with acc
    for (int64_t i = 0; i < batch; i++) {
      const float *ai = a + i * M * K, *dyi = dy + i * M * N;
      int m = i > 0 ? PR_GEMM_CONT : PR_GEMM_SET;
      if (!tb)
        gemm(!ta, 0, K, N, M, ai, lda, dyi, N, m, t, N);
      else
        gemm(1, ta, N, K, M, dyi, N, ai, lda, m, t, K);
    }
    pr_acc_finish(db, t, n, acc);
    return;
  }
  t = gemm_target(db, n, acc, &mode);
  if (!b_batched) {
    // a is (batch*M,K) contiguous: one GEMM reducing over batch*M rows in ascending order.
    if (!tb)
      gemm(1, 0, K, N, batch * M, a, K, dy, N, mode, t, N);
    else
      gemm(1, 0, N, K, batch * M, dy, N, a, K, mode, t, K);
  } else if (!tb) { // db (K,N) = op(a)^T (K,M) . dy (M,N)
    gemm_batched(batch, !ta, 0, K, N, M, a, lda, M * K, dy, N, M * N, mode, t, N, K * N);
  } else { // db stored (N,K) = dy^T (N,M) . op(a) (M,K)
    gemm_batched(batch, 1, ta, N, K, M, dy, N, M * N, a, lda, M * K, mode, t, K, K * N);
  }
  gemm_done(db, t, n, acc);
}

// ---------------------------------------------------------------------------------------------
// linear: y (rows,out) = x (rows,in) . w^T (w (out,in)) + bias (out)

void pr_linear_fwd(float *y, const float *x, const float *w, const float *bias, int64_t rows,
                   int64_t in, int64_t out) {
  gemm(0, 1, rows, out, in, x, in, w, in, PR_GEMM_SET, y, out);
  if (!bias) return;
  PR_PARALLEL_FOR(rows * out >= PAR_MIN, (int64_t r = 0; r < rows; r++), {
    float *restrict yr = y + r * out;
    for (int64_t o = 0; o < out; o++) yr[o] = yr[o] + bias[o];
  });
}

// dx (rows,in) = dy (rows,out) . w (out,in)
void pr_linear_bwd_x(float *dx, const float *dy, const float *w, int64_t rows, int64_t in,
                     int64_t out, int acc) {
  int mode;
  float *t = gemm_target(dx, rows * in, acc, &mode);
  gemm(0, 0, rows, in, out, dy, out, w, in, mode, t, in);
  gemm_done(dx, t, rows * in, acc);
}

// The linear's product fused with the gelu that reads its output (codegen: the registry's
// epilogue): y (rows,out) = x . w^T + bias as pr_linear_fwd, and, on each finished block of y,
// g = gelu(y) and cdf (n = rows * out each) as pr_gelu_fwd: the same bits as the two calls.
void pr_linear_gelu_fwd(float *y, float *g, float *cdf, const float *x, const float *w,
                        const float *bias, int64_t rows, int64_t in, int64_t out, int64_t n,
                        int exact) {
  prCheck(n == rows * out, "compile the model again",
          "gelu of %lld elements after a linear of %lld", (long long)n, (long long)(rows * out));
  PrEpi e = {.kind = PR_EPI_BIAS_GELU, .c0 = y, .bias = bias, .y = g, .cdf = cdf, .exact = exact};
  gemm_epi(0, 1, rows, out, in, x, in, w, in, PR_GEMM_SET, y, out, &e);
}

// The linear's input gradient fused with the backward of the gelu it feeds (dy (rows,out) is
// gelu's output gradient): dx (rows,in) = dy . w as pr_linear_bwd_x (acc 0: written), and, on each
// finished block of dx, gdx (+)= dx * gelu'(gx) (gx, gcdf: the gelu's input and saved factor)
// as pr_gelu_bwd(gdx, dx, gx, gcdf, n, exact, acc): the same bits as the two calls.
void pr_linear_bwd_x_gelu(float *dx, float *gdx, const float *dy, const float *w, const float *gx,
                          const float *gcdf, int64_t rows, int64_t in, int64_t out, int64_t n,
                          int exact, int acc) {
  prCheck(n == rows * in, "compile the model again",
          "gelu of %lld elements before a linear of %lld", (long long)n, (long long)(rows * in));
  PrEpi e = {.kind = PR_EPI_GELU_BWD,
             .c0 = dx,
             .x = gx,
             .xcdf = gcdf,
             .dx = gdx,
             .exact = exact,
             .acc = acc};
  gemm_epi(0, 0, rows, in, out, dy, out, w, in, PR_GEMM_SET, dx, in, &e);
}

// dw (out,in) = dy^T (out,rows) . x (rows,in)
void pr_linear_bwd_w(float *dw, const float *dy, const float *x, int64_t rows, int64_t in,
                     int64_t out, int acc) {
  int mode;
  float *t = gemm_target(dw, out * in, acc, &mode);
  gemm(1, 0, out, in, rows, dy, out, x, in, mode, t, in);
  gemm_done(dw, t, out * in, acc);
}

// db (cols) = sum over rows of dy (rows,cols), rows ascending; threads split the columns.
void pr_sum_rows(float *db, const float *dy, int64_t rows, int64_t cols, int acc) {
  int64_t nblk = (cols + COLBLK - 1) / COLBLK;
  PR_PARALLEL_FOR(rows * cols >= PAR_MIN && nblk > 1, (int64_t blk = 0; blk < nblk; blk++), {
    int64_t c0 = blk * COLBLK, nc = cols - c0 < COLBLK ? cols - c0 : COLBLK;
    float t[COLBLK] = {0};
    for (int64_t r = 0; r < rows; r++) {
      const float *restrict d = dy + r * cols + c0;
      for (int64_t j = 0; j < nc; j++) t[j] += d[j];
    }
    for (int64_t j = 0; j < nc; j++) db[c0 + j] = acc ? db[c0 + j] + t[j] : t[j];
  });
}

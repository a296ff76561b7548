// cuda_gemm.cu: matmul, linear and sum_rows on the GPU, forward and backward. The products are
// cuBLAS SGEMMs (pedantic math: fp32, no TF32) in row-major form: C (M,N) row-major is C^T
// column-major, so C = op(A) op(B) is the column-major call C^T = op(B)^T op(A)^T with the
// operands swapped. acc computes the contribution into scratch and adds it (as the CPU: never
// beta = 1 on the output). sum_rows: one thread per column, rows ascending.
#include "cuda_common.cuh"

#include <limits.h>

static void check_dims(int64_t M, int64_t N, int64_t K) {
  int64_t big = M > N ? M : N;
  big = big > K ? big : K;
  prCheck(big <= INT_MAX, "split the operation into smaller pieces",
          "matrix dimension %lld does not fit cuBLAS's 32-bit int", (long long)big);
}

// batch GEMMs C_i (M,N) = op(A_i) (M,K) . op(B_i) (K,N) + beta C_i, row-major with leading dims.
static void gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                 int64_t sa, const float *B, int64_t ldb, int64_t sb, float beta, float *C,
                 int64_t ldc, int64_t sc, int64_t batch) {
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) {
    if (beta == 0.0f)
      for (int64_t i = 0; i < batch; i++)
        cudaCheck(
            cudaMemset2DAsync(C + i * sc, (size_t)ldc * 4, 0, (size_t)N * 4, (size_t)M, pr_cu_s()));
    return;
  }
  check_dims(M, N, K);
  const float one = 1.0f;
  cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch == 1)
    cublasCheck(cublasSgemm(pr_cu_h(), opB, opA, (int)N, (int)M, (int)K, &one, B, (int)ldb, A,
                            (int)lda, &beta, C, (int)ldc));
  else
    cublasCheck(cublasSgemmStridedBatched(pr_cu_h(), opB, opA, (int)N, (int)M, (int)K, &one, B,
                                          (int)ldb, sb, A, (int)lda, sa, &beta, C, (int)ldc, sc,
                                          (int)batch));
}

static float *acc_target(float *out, int64_t n, int acc, const char *what) {
  return acc ? (float *)pr_cu_take_scratch((size_t)n * sizeof(float), what) : out;
}
static void acc_finish(float *out, float *t, int64_t n, int acc) {
  if (acc) pr_cu_add_into(out, t, n);
}

void pr_cu_matmul_fwd(float *y, const float *a, const float *b, int64_t batch, int64_t M, int64_t N,
                      int64_t K, int ta, int tb, int b_batched) {
  int64_t lda = ta ? M : K, ldb = tb ? K : N;
  if (!b_batched && !ta) {
    gemm(0, tb, batch * M, N, K, a, lda, 0, b, ldb, 0, 0.0f, y, N, 0, 1);
    return;
  }
  gemm(ta, tb, M, N, K, a, lda, M * K, b, ldb, b_batched ? K * N : 0, 0.0f, y, N, M * N, batch);
}

void pr_cu_matmul_bwd_a(float *da, const float *dy, const float *b, int64_t batch, int64_t M,
                        int64_t N, int64_t K, int ta, int tb, int b_batched, int acc) {
  int64_t n = batch * M * K, ldb = tb ? K : N;
  float *t = acc_target(da, n, acc, "matmul backward (a)");
  if (!ta && !b_batched)
    gemm(0, !tb, batch * M, K, N, dy, N, 0, b, ldb, 0, 0.0f, t, K, 0, 1);
  else if (!ta)
    gemm(0, !tb, M, K, N, dy, N, M * N, b, ldb, b_batched ? K * N : 0, 0.0f, t, K, M * K, batch);
  else
    gemm(tb, 1, K, M, N, b, ldb, b_batched ? K * N : 0, dy, N, M * N, 0.0f, t, M, M * K, batch);
  acc_finish(da, t, n, acc);
}

void pr_cu_matmul_bwd_b(float *db, const float *dy, const float *a, int64_t batch, int64_t M,
                        int64_t N, int64_t K, int ta, int tb, int b_batched, int acc) {
  int64_t n = (b_batched ? batch : 1) * K * N, lda = ta ? M : K;
  float *t = acc_target(db, n, acc, "matmul backward (b)");
  if (!b_batched && !ta) {
    if (!tb)
      gemm(1, 0, K, N, batch * M, a, K, 0, dy, N, 0, 0.0f, t, N, 0, 1);
    else
      gemm(1, 0, N, K, batch * M, dy, N, 0, a, K, 0, 0.0f, t, K, 0, 1);
  } else if (b_batched) {
    if (!tb)
      gemm(!ta, 0, K, N, M, a, lda, M * K, dy, N, M * N, 0.0f, t, N, K * N, batch);
    else
      gemm(1, ta, N, K, M, dy, N, M * N, a, lda, M * K, 0.0f, t, K, K * N, batch);
  } else { // one shared b, a stored transposed: the batch entries accumulated in order
    for (int64_t i = 0; i < batch; i++) {
      const float *ai = a + i * M * K, *dyi = dy + i * M * N;
      float beta = i > 0 ? 1.0f : 0.0f;
      if (!tb)
        gemm(!ta, 0, K, N, M, ai, lda, 0, dyi, N, 0, beta, t, N, 0, 1);
      else
        gemm(1, ta, N, K, M, dyi, N, 0, ai, lda, 0, beta, t, K, 0, 1);
    }
  }
  acc_finish(db, t, n, acc);
}

// y (rows,out) += bias (out), broadcast over rows
__global__ void add_bias_k(float *y, const float *bias, int64_t rows, int64_t out) {
  GRID_FOR(i, rows * out) y[i] = y[i] + bias[i % out];
}

void pr_cu_linear_fwd(float *y, const float *x, const float *w, const float *bias, int64_t rows,
                      int64_t in, int64_t out) {
  gemm(0, 1, rows, out, in, x, in, 0, w, in, 0, 0.0f, y, out, 0, 1);
  if (!bias || rows * out == 0) return;
  add_bias_k<<<pr_cu_blocks(rows * out), PR_CU_THREADS, 0, pr_cu_s()>>>(y, bias, rows, out);
  cudaCheckLaunch();
}

void pr_cu_linear_bwd_x(float *dx, const float *dy, const float *w, int64_t rows, int64_t in,
                        int64_t out, int acc) {
  float *t = acc_target(dx, rows * in, acc, "linear backward (x)");
  gemm(0, 0, rows, in, out, dy, out, 0, w, in, 0, 0.0f, t, in, 0, 1);
  acc_finish(dx, t, rows * in, acc);
}

void pr_cu_linear_bwd_w(float *dw, const float *dy, const float *x, int64_t rows, int64_t in,
                        int64_t out, int acc) {
  float *t = acc_target(dw, out * in, acc, "linear backward (w)");
  gemm(1, 0, out, in, rows, dy, out, 0, x, in, 0, 0.0f, t, in, 0, 1);
  acc_finish(dw, t, out * in, acc);
}

// db[c] = sum over rows r ascending of dy[r, c]: one thread per column (coalesced across c).
__global__ void sum_rows_k(float *db, const float *dy, int64_t rows, int64_t cols, int acc) {
  GRID_FOR(c, cols) {
    float t = 0.0f;
    for (int64_t r = 0; r < rows; r++) t += dy[r * cols + c];
    db[c] = acc ? db[c] + t : t;
  }
}
void pr_cu_sum_rows(float *db, const float *dy, int64_t rows, int64_t cols, int acc) {
  if (cols <= 0) return;
  sum_rows_k<<<pr_cu_blocks(cols), PR_CU_THREADS, 0, pr_cu_s()>>>(db, dy, rows, cols, acc);
  cudaCheckLaunch();
}

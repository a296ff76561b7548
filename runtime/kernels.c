// kernels.c: the forward/backward kernels of op set v1 (see pipert.h for the contract).
//
// Plain C in the style of llm.c: dense row-major float32 tensors, every size passed in. Every
// output element is computed by one thread in an order fixed by the shapes alone, so results are
// bitwise the same whatever the thread count:
//   - GEMMs: OpenBLAS runs single-threaded; large products are split into blocks of C fixed by
//     the shapes, one sgemm call per block, blocks spread over OpenMP threads (OpenBLAS's own
//     threading changes results with the thread count, see gemm());
//   - everything else: simple loops that GCC vectorises at -O3, parallelised with
//     `omp parallel for schedule(static)` over independent outputs (rows, column blocks, (b,h));
//   - reductions into one element (softmax sums, layernorm moments, dots) use 8 fixed lanes
//     combined in a fixed tree; reductions over rows run in ascending row order.
// `acc` = 1 means out = out + contribution with the contribution rounded first (GEMMs write it to
// scratch, never beta = 1), so accumulating a microbatch adds exactly what acc = 0 would produce.
// Floating-point contraction is off in this file so that every expression rounds as written, and
// FMA/fma8 are a multiply and an add rounded separately: a program computes the same bits whether
// it was built for the x86-64 baseline or with -march=native (which has hardware FMA).
// exp/tanh/sigmoid/gelu use branch-free float versions (~1-2 ulp) so that their loops vectorise;
// attention uses register-blocked 8-float vectors.
#pragma GCC optimize("fp-contract=off", "no-trapping-math")

#include "pipert.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

// a*b + c with two roundings in every build (never fused: see the top of the file).
#define FMA(a, b, c) ((a) * (b) + (c))

// Below this many elements (or units of work) a kernel runs on one thread.
#define PAR_MIN ((int64_t)1 << 15)

// ---------------------------------------------------------------------------------------------
// Helpers

// Kernel scratch: a per-thread stack carved from one buffer that only grows, so that after the
// first training step kernels allocate nothing. Blocks are released in any order; the stack top
// falls back past released blocks. A request that does not fit while blocks are live is served by
// the heap once, and the buffer is resized to the high-water mark when the stack is next empty.
typedef struct ScratchBlock {
  void *p;    // the block
  size_t end; // offset just past it in the buffer (0 for heap blocks)
  bool heap;  // served by aligned_alloc
  bool live;  // not yet released
} ScratchBlock;

static _Thread_local struct {
  char *buf;             // the buffer
  size_t cap, top, want; // its size, the stack top, the high-water mark of a step
  ScratchBlock st[32];   // live and released blocks, in allocation order
  int n;                 // entries in st
} S;

static void *scratch(size_t bytes) {
  size_t need = ((bytes ? bytes : 1) + 63) & ~(size_t)63;
  prCheck(S.n < 32, "this is a pipec bug", "kernel scratch: too many live blocks");
  if (S.top + need > S.want) S.want = S.top + need;
  if (S.n == 0 && S.want > S.cap) {
    free(S.buf);
    S.cap = S.want > 65536 ? S.want : 65536;
    S.buf = aligned_alloc(64, S.cap);
    prCheck(S.buf != NULL, "reduce the batch size or the model",
            "out of memory (%zu bytes of kernel scratch)", S.cap);
  }
  ScratchBlock *b = &S.st[S.n++];
  b->live = true;
  if (S.top + need <= S.cap) {
    b->p = S.buf + S.top;
    b->heap = false;
    S.top += need;
    b->end = S.top;
  } else {
    b->p = aligned_alloc(64, need);
    b->heap = true;
    b->end = S.top;
    prCheck(b->p != NULL, "reduce the batch size or the model",
            "out of memory (%zu bytes of kernel scratch)", bytes);
  }
  return b->p;
}

static void scratch_free(void *p) {
  if (!p) return;
  for (int i = S.n - 1; i >= 0; i--)
    if (S.st[i].p == p && S.st[i].live) {
      S.st[i].live = false;
      if (S.st[i].heap) free(p);
      break;
    }
  while (S.n > 0 && !S.st[S.n - 1].live) S.n--;
  S.top = S.n ? S.st[S.n - 1].end : 0;
}

// Frees the calling thread's scratch buffer (no block may be live).
static void scratch_release(void) {
  free(S.buf);
  S.buf = NULL;
  S.cap = S.top = S.want = 0;
  S.n = 0;
}

void pr_release_scratch(void) {
  // Each thread of a team frees its own buffer; the team the kernels ran in is reused (libgomp
  // keeps its pool), and the calling thread's is freed too.
#pragma omp parallel
  scratch_release();
  scratch_release();
}

// out = acc ? out + t : t (t is the already rounded contribution)
static void store_acc(float *restrict out, const float *restrict t, int64_t n, int acc) {
  if (acc) {
#pragma omp parallel for schedule(static) if (n >= 4 * PAR_MIN)
    for (int64_t i = 0; i < n; i++) out[i] = out[i] + t[i];
  } else {
    memcpy(out, t, (size_t)n * sizeof(float));
  }
}

// Where a kernel computes its contribution: the output itself, or (acc) scratch that
// acc_finish then adds into the output and releases.
static float *acc_target(float *out, int64_t n, int acc) {
  return acc ? scratch((size_t)n * sizeof(float)) : out;
}

static void acc_finish(float *out, float *t, int64_t n, int acc) {
  if (!acc) return;
  store_acc(out, t, n, 1);
  scratch_free(t);
}

// Sum of x[0..n) in 8 fixed lanes combined in a fixed tree, then the tail in order.
static inline float sum_f(const float *restrict x, int64_t n) {
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) l[j] += x[i + j];
  float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
  for (; i < n; i++) s += x[i];
  return s;
}

// Sum of (x[i] - m)^2, same lanes.
static inline float sumsq_centered_f(const float *restrict x, float m, int64_t n) {
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) {
      float d = x[i + j] - m;
      l[j] = FMA(d, d, l[j]);
    }
  float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
  for (; i < n; i++) {
    float d = x[i] - m;
    s = FMA(d, d, s);
  }
  return s;
}

// Dot product of x and y, same lanes.
static inline float dot_f(const float *restrict x, const float *restrict y, int64_t n) {
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) l[j] = FMA(x[i + j], y[i + j], l[j]);
  float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
  for (; i < n; i++) s = FMA(x[i], y[i], s);
  return s;
}

// Maximum of x[0..n) (n >= 1); a NaN anywhere may or may not win, the results downstream are NaN
// either way (exp(NaN - m) or exp(x - NaN)).
static inline float max_f(const float *restrict x, int64_t n) {
  float l[8];
  int64_t i = 0;
  if (n >= 8) {
    for (int j = 0; j < 8; j++) l[j] = x[j];
    for (i = 8; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; j++) l[j] = x[i + j] > l[j] ? x[i + j] : l[j];
    float m = l[0];
    for (int j = 1; j < 8; j++) m = l[j] > m ? l[j] : m;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
  }
  float m = x[0];
  for (i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

static inline uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// e^x, ~1 ulp (Cephes expf polynomial), branch-free. NaN propagates; x < -87.3 gives 0; x above
// 88 gives e^88 (large enough for every use here: softmax, tanh, sigmoid).
static inline float exp_f(float x) {
  float xc = x > 88.0f ? 88.0f : x;
  xc = xc < -87.0f ? -87.0f : xc;
  // n = round(x / ln 2) via the 1.5 * 2^23 trick; its integer sits in the low mantissa bits.
  float t = FMA(xc, 1.44269504088896341f, 12582912.0f);
  float n = t - 12582912.0f;
  float r = FMA(n, -0.693359375f, xc);
  r = FMA(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = FMA(p, r, 1.3981999507e-3f);
  p = FMA(p, r, 8.3334519073e-3f);
  p = FMA(p, r, 4.1665795894e-2f);
  p = FMA(p, r, 1.6666665459e-1f);
  p = FMA(p, r, 5.0000001201e-1f);
  p = FMA(p, r * r, r) + 1.0f;
  float scale = u2f((f2u(t) - 0x4B400000u + 127u) << 23); // 2^n
  float e = p * scale;
  return x < -87.3f ? 0.0f : e;
}

// tanh(x), ~2 ulp: an odd polynomial (Cephes tanhf) for |x| < 0.625, 1 - 2/(e^{2|x|}+1) above.
static inline float tanh_f(float x) {
  float ax = fabsf(x);
  float z = x * x;
  float p = -5.70498872745e-3f;
  p = FMA(p, z, 2.06390887954e-2f);
  p = FMA(p, z, -5.37397155531e-2f);
  p = FMA(p, z, 1.33314422036e-1f);
  p = FMA(p, z, -3.33332819422e-1f);
  float small = FMA(p * z, x, x);
  float e = exp_f(2.0f * ax);
  float large = copysignf(1.0f - 2.0f / (e + 1.0f), x);
  return ax < 0.625f ? small : large;
}

// 1/(1+e^-x), computed from e^-|x| so that both tails are accurate.
static inline float sigmoid_f(float x) {
  float e = exp_f(-fabsf(x));
  float s = 1.0f / (1.0f + e);
  return x >= 0.0f ? s : e * s;
}

// GEMMs. OpenBLAS's own threading does not give bitwise the same result for different thread
// counts (its partition of C changes which micro-kernel variant computes an element), so OpenBLAS
// runs single-threaded and the kernels split C themselves into blocks fixed by the shapes alone,
// one single-threaded sgemm call per block, blocks spread over OpenMP threads.

#define GEMM_SPLIT_MIN  ((int64_t)1 << 21) // M*N*K below this: one call
#define GEMM_BLOCKS_MAX 16                 // blocks of >= 384 rows (or columns) of C

static void blas_single_thread(void) {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

// One single-threaded call: C (M,N) = op(A) (M,K) . op(B) (K,N) + beta * C; row-major.
static void sgemm1(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                   const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M,
              (int)N, (int)K, 1.0f, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
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

// C (M,N) = op(A) (M,K) . op(B) (K,N) + beta * C (beta 0 or 1); ta/tb: A/B stored transposed.
// Large products are split along the longer of M and N into equal blocks (multiples of 16) of at
// least 384: each block repacks the other operand, so smaller blocks cost more than they gain on
// 2 cores (gpt_char step, 1 thread: 66 ms with 384, 83 ms with 64).
static void gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == 0.0f)
      for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, (size_t)N * sizeof(float));
    return;
  }
  check_blas_dims(M, N, K, lda, ldb, ldc);
  blas_single_thread();
  int64_t split = M >= N ? M : N, nblk = 1;
  if (M * N * K >= GEMM_SPLIT_MIN) {
    nblk = split / 384;
    nblk = nblk > GEMM_BLOCKS_MAX ? GEMM_BLOCKS_MAX : nblk < 1 ? 1 : nblk;
  }
  int64_t bs = ((split + nblk - 1) / nblk + 15) & ~(int64_t)15;
  nblk = (split + bs - 1) / bs;
  if (nblk <= 1) {
    sgemm1(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < nblk; i++) {
    int64_t o = i * bs, len = split - o < bs ? split - o : bs;
    if (M >= N) // rows o.. of C and of op(A)
      sgemm1(ta, tb, len, N, K, ta ? A + o : A + o * lda, lda, B, ldb, beta, C + o * ldc, ldc);
    else // columns o.. of C and of op(B)
      sgemm1(ta, tb, M, len, K, A, lda, tb ? B + o * ldb : B + o, ldb, beta, C + o, ldc);
  }
}

// batch independent GEMMs (pointers advance by sa, sb, sc): small ones one per thread, large ones
// one after the other, each split by gemm().
static void gemm_batched(int64_t batch, int ta, int tb, int64_t M, int64_t N, int64_t K,
                         const float *A, int64_t lda, int64_t sa, const float *B, int64_t ldb,
                         int64_t sb, float *C, int64_t ldc, int64_t sc) {
  if (batch == 1 || M * N * K >= GEMM_SPLIT_MIN || M == 0 || N == 0 || K == 0) {
    for (int64_t i = 0; i < batch; i++)
      gemm(ta, tb, M, N, K, A + i * sa, lda, B + i * sb, ldb, 0.0f, C + i * sc, ldc);
    return;
  }
  check_blas_dims(M, N, K, lda, ldb, ldc);
  blas_single_thread();
#pragma omp parallel for schedule(static) if (batch * M * N * K >= GEMM_SPLIT_MIN)
  for (int64_t i = 0; i < batch; i++)
    sgemm1(ta, tb, M, N, K, A + i * sa, lda, B + i * sb, ldb, 0.0f, C + i * sc, ldc);
}

// ---------------------------------------------------------------------------------------------
// matmul: y (batch,M,N) = op(a) (batch,M,K) . op(b) (batch|1,K,N)

void pr_matmul_fwd(float *y, const float *a, const float *b, int64_t batch, int64_t M, int64_t N,
                   int64_t K, int ta, int tb, int b_batched) {
  int64_t lda = ta ? M : K, ldb = tb ? K : N;
  if (!b_batched && !ta) { // one GEMM over (batch*M) rows
    gemm(0, tb, batch * M, N, K, a, lda, b, ldb, 0.0f, y, N);
    return;
  }
  gemm_batched(batch, ta, tb, M, N, K, a, lda, M * K, b, ldb, b_batched ? K * N : 0, y, N, M * N);
}

// da (batch,M,K) or, with ta, (batch,K,M) = dy . op(b)^T (in a's orientation)
void pr_matmul_bwd_a(float *da, const float *dy, const float *b, int64_t batch, int64_t M,
                     int64_t N, int64_t K, int ta, int tb, int b_batched, int acc) {
  int64_t n = batch * M * K, ldb = tb ? K : N;
  float *t = acc_target(da, n, acc);
  if (!ta && !b_batched) {
    // da (batch*M,K) = dy (batch*M,N) . op(b)^T
    gemm(0, !tb, batch * M, K, N, dy, N, b, ldb, 0.0f, t, K);
  } else if (!ta) { // da (M,K) = dy (M,N) . op(b)^T (N,K)
    gemm_batched(batch, 0, !tb, M, K, N, dy, N, M * N, b, ldb, b_batched ? K * N : 0, t, K, M * K);
  } else { // da^T stored (K,M) = op(b) (K,N) . dy^T (N,M)
    gemm_batched(batch, tb, 1, K, M, N, b, ldb, b_batched ? K * N : 0, dy, N, M * N, t, M, M * K);
  }
  acc_finish(da, t, n, acc);
}

// db (batch|1,K,N) or, with tb, (batch|1,N,K) = op(a)^T . dy (in b's orientation); with
// b_batched = 0 the batch entries' contributions are summed in ascending order.
void pr_matmul_bwd_b(float *db, const float *dy, const float *a, int64_t batch, int64_t M,
                     int64_t N, int64_t K, int ta, int tb, int b_batched, int acc) {
  int64_t n = (b_batched ? batch : 1) * K * N, lda = ta ? M : K;
  float *t = acc_target(db, n, acc);
  if (!b_batched && !ta) {
    // a is (batch*M,K) contiguous: one GEMM reducing over batch*M rows in ascending order.
    if (!tb)
      gemm(1, 0, K, N, batch * M, a, K, dy, N, 0.0f, t, N);
    else
      gemm(1, 0, N, K, batch * M, dy, N, a, K, 0.0f, t, K);
  } else if (b_batched) {
    if (!tb) // db (K,N) = op(a)^T (K,M) . dy (M,N)
      gemm_batched(batch, !ta, 0, K, N, M, a, lda, M * K, dy, N, M * N, t, N, K * N);
    else // db stored (N,K) = dy^T (N,M) . op(a) (M,K)
      gemm_batched(batch, 1, ta, N, K, M, dy, N, M * N, a, lda, M * K, t, K, K * N);
  } else { // one shared b, a stored transposed: accumulate the batch entries in order
    for (int64_t i = 0; i < batch; i++) {
      const float *ai = a + i * M * K, *dyi = dy + i * M * N;
      float beta = i > 0 ? 1.0f : 0.0f;
      if (!tb)
        gemm(!ta, 0, K, N, M, ai, lda, dyi, N, beta, t, N);
      else
        gemm(1, ta, N, K, M, dyi, N, ai, lda, beta, t, K);
    }
  }
  acc_finish(db, t, n, acc);
}

// ---------------------------------------------------------------------------------------------
// linear: y (rows,out) = x (rows,in) . w^T (w (out,in)) + bias (out)

void pr_linear_fwd(float *y, const float *x, const float *w, const float *bias, int64_t rows,
                   int64_t in, int64_t out) {
  gemm(0, 1, rows, out, in, x, in, w, in, 0.0f, y, out);
  if (!bias) return;
#pragma omp parallel for schedule(static) if (rows * out >= PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    float *restrict yr = y + r * out;
    for (int64_t o = 0; o < out; o++) yr[o] = yr[o] + bias[o];
  }
}

// dx (rows,in) = dy (rows,out) . w (out,in)
void pr_linear_bwd_x(float *dx, const float *dy, const float *w, int64_t rows, int64_t in,
                     int64_t out, int acc) {
  float *t = acc_target(dx, rows * in, acc);
  gemm(0, 0, rows, in, out, dy, out, w, in, 0.0f, t, in);
  acc_finish(dx, t, rows * in, acc);
}

// dw (out,in) = dy^T (out,rows) . x (rows,in)
void pr_linear_bwd_w(float *dw, const float *dy, const float *x, int64_t rows, int64_t in,
                     int64_t out, int acc) {
  float *t = acc_target(dw, out * in, acc);
  gemm(1, 0, out, in, rows, dy, out, x, in, 0.0f, t, in);
  acc_finish(dw, t, out * in, acc);
}

// db (cols) = sum over rows of dy (rows,cols), rows ascending; threads split the columns.
#define COLBLK 64
void pr_sum_rows(float *db, const float *dy, int64_t rows, int64_t cols, int acc) {
  int64_t nblk = (cols + COLBLK - 1) / COLBLK;
#pragma omp parallel for schedule(static) if (rows * cols >= PAR_MIN && nblk > 1)
  for (int64_t blk = 0; blk < nblk; blk++) {
    int64_t c0 = blk * COLBLK, nc = cols - c0 < COLBLK ? cols - c0 : COLBLK;
    float t[COLBLK] = {0};
    for (int64_t r = 0; r < rows; r++) {
      const float *restrict d = dy + r * cols + c0;
      for (int64_t j = 0; j < nc; j++) t[j] += d[j];
    }
    for (int64_t j = 0; j < nc; j++) db[c0 + j] = acc ? db[c0 + j] + t[j] : t[j];
  }
}

// ---------------------------------------------------------------------------------------------
// Broadcasting binary ops. Dims are first collapsed (size-1 dims dropped, neighbours merged where
// every operand's strides allow), so the common cases become one or two flat loops.

// Collapses y's dims with nops stride arrays; returns the new rank (>= 1).
static int collapse(int rank, const int64_t *ydims, int nops, const int64_t *const *strs,
                    int64_t *d, int64_t (*s)[8]) {
  int r = 0;
  for (int i = 0; i < rank; i++) {
    if (ydims[i] == 1) continue;
    if (r > 0) {
      // merge dim i into the previous one when prev stride == stride(i) * size(i) for every op
      int ok = 1;
      for (int k = 0; k < nops; k++) ok &= s[k][r - 1] == strs[k][i] * ydims[i];
      if (ok) {
        d[r - 1] *= ydims[i];
        for (int k = 0; k < nops; k++) s[k][r - 1] = strs[k][i];
        continue;
      }
    }
    d[r] = ydims[i];
    for (int k = 0; k < nops; k++) s[k][r] = strs[k][i];
    r++;
  }
  if (r == 0) {
    d[0] = 1;
    for (int k = 0; k < nops; k++) s[k][0] = 0;
    r = 1;
  }
  return r;
}

// Offsets of outer row o (over dims 0..r-2 of d) for nops stride arrays.
static void row_offsets(int64_t o, int r, const int64_t *d, int nops, const int64_t (*s)[8],
                        int64_t *off) {
  for (int k = 0; k < nops; k++) off[k] = 0;
  for (int i = r - 2; i >= 0; i--) {
    int64_t q = o % d[i];
    o /= d[i];
    for (int k = 0; k < nops; k++) off[k] += q * s[k][i];
  }
}

#define BIN_LOOP(EXPR)                                                                             \
  do {                                                                                             \
    if (as == 1 && bs == 1)                                                                        \
      for (int64_t i = 0; i < n; i++) {                                                            \
        float av = a[i], bv = b[i];                                                                \
        y[i] = EXPR;                                                                               \
      }                                                                                            \
    else if (as == 1 && bs == 0) {                                                                 \
      float bv = b[0];                                                                             \
      for (int64_t i = 0; i < n; i++) {                                                            \
        float av = a[i];                                                                           \
        y[i] = EXPR;                                                                               \
      }                                                                                            \
    } else if (as == 0 && bs == 1) {                                                               \
      float av = a[0];                                                                             \
      for (int64_t i = 0; i < n; i++) {                                                            \
        float bv = b[i];                                                                           \
        y[i] = EXPR;                                                                               \
      }                                                                                            \
    } else                                                                                         \
      for (int64_t i = 0; i < n; i++) {                                                            \
        float av = a[i * as], bv = b[i * bs];                                                      \
        y[i] = EXPR;                                                                               \
      }                                                                                            \
  } while (0)

// y[i] = a[i*as] op b[i*bs] for n elements
static void bin_row(float *restrict y, const float *restrict a, const float *restrict b, int64_t n,
                    int64_t as, int64_t bs, int op) {
  if (op == 0)
    BIN_LOOP(av + bv);
  else if (op == 1)
    BIN_LOOP(av - bv);
  else
    BIN_LOOP(av * bv);
}

// y (ydims) = a op b with a, b read through strides astr/bstr over y's dims (0 = broadcast)
void pr_binary_fwd(float *y, const float *a, const float *b, int op, int rank, const int64_t *ydims,
                   const int64_t *astr, const int64_t *bstr) {
  prCheck(rank >= 0 && rank <= 8 && op >= 0 && op <= 2, "this is a pipec bug",
          "pr_binary_fwd: rank %d / op %d unsupported", rank, op);
  int64_t total = 1;
  for (int i = 0; i < rank; i++) total *= ydims[i];
  if (total == 0) return;
  int64_t d[8], s[2][8];
  const int64_t *strs[2] = {astr, bstr};
  int r = collapse(rank, ydims, 2, strs, d, s);
  if (r == 1) { // one flat row, split in chunks for threads
    int64_t as = s[0][0], bs = s[1][0], chunk = 8192, nch = (total + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (int64_t c = 0; c < nch; c++) {
      int64_t i0 = c * chunk, n = total - i0 < chunk ? total - i0 : chunk;
      bin_row(y + i0, a + i0 * as, b + i0 * bs, n, as, bs, op);
    }
    return;
  }
  int64_t inner = d[r - 1], outer = total / inner;
#pragma omp parallel for schedule(static) if (total >= PAR_MIN)
  for (int64_t o = 0; o < outer; o++) {
    int64_t off[2];
    row_offsets(o, r, d, 2, (const int64_t(*)[8])s, off);
    bin_row(y + o * inner, a + off[0], b + off[1], inner, s[0][r - 1], s[1][r - 1], op);
  }
}

// dx (xdims) = reduce_to_x(dy * d(a op b)/dx); dy (ydims) is contiguous. Broadcast dims are
// reduced by visiting y in ascending (row-major) order, i.e. ascending index order per element.
void pr_binary_bwd(float *dx, const float *dy, const float *other, int op, int which, int rank,
                   const int64_t *ydims, const int64_t *xdims, const int64_t *ostr, int acc) {
  prCheck(rank >= 0 && rank <= 8 && op >= 0 && op <= 2 && (op != 2 || other != NULL),
          "this is a pipec bug", "pr_binary_bwd: rank %d / op %d unsupported", rank, op);
  int64_t total = 1, nx = 1, xstr[8], zero[8] = {0};
  for (int i = rank - 1; i >= 0; i--) {
    xstr[i] = xdims[i] == 1 ? 0 : nx;
    nx *= xdims[i];
    total *= ydims[i];
  }
  float sign = (op == 1 && which == 1) ? -1.0f : 1.0f;
  const float *g = op == 2 ? other : NULL;
  if (nx == 0) return;
  if (total == 0) {
    if (!acc) memset(dx, 0, (size_t)nx * sizeof(float));
    return;
  }
  int64_t d[8], s[2][8];
  const int64_t *strs[2] = {xstr, g ? ostr : zero};
  int r = collapse(rank, ydims, 2, strs, d, s);
  if (nx == total) { // no reduction: elementwise dx = dy * g (or +-dy)
    int64_t gs = s[1][r - 1], inner = d[r - 1], outer = total / inner;
#pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (int64_t o = 0; o < outer; o++) {
      int64_t off[2];
      row_offsets(o, r, d, 2, (const int64_t(*)[8])s, off);
      float *restrict xr = dx + off[0];
      const float *restrict dr = dy + o * inner;
      if (!g) {
        if (acc)
          for (int64_t i = 0; i < inner; i++) xr[i] = xr[i] + sign * dr[i];
        else
          for (int64_t i = 0; i < inner; i++) xr[i] = sign * dr[i];
      } else {
        const float *restrict gr = g + off[1];
        if (gs == 1) {
          if (acc)
            for (int64_t i = 0; i < inner; i++) xr[i] = xr[i] + dr[i] * gr[i];
          else
            for (int64_t i = 0; i < inner; i++) xr[i] = dr[i] * gr[i];
        } else {
          if (acc)
            for (int64_t i = 0; i < inner; i++) xr[i] = xr[i] + dr[i] * gr[i * gs];
          else
            for (int64_t i = 0; i < inner; i++) xr[i] = dr[i] * gr[i * gs];
        }
      }
    }
    return;
  }
  // Reduction: accumulate the contribution t (nx) over y in row-major order.
  float *t = acc_target(dx, nx, acc);
  memset(t, 0, (size_t)nx * sizeof(float));
  int64_t inner = d[r - 1], outer = total / inner, xs = s[0][r - 1], gs = s[1][r - 1];
  // When x's innermost dim is kept (xs == 1), threads can own column blocks of it.
  int64_t nblk = xs == 1 ? (inner + COLBLK - 1) / COLBLK : 1;
#pragma omp parallel for schedule(static) if (total >= PAR_MIN && nblk > 1)
  for (int64_t blk = 0; blk < nblk; blk++) {
    int64_t j0 = xs == 1 ? blk * COLBLK : 0;
    int64_t nj = xs == 1 ? (inner - j0 < COLBLK ? inner - j0 : COLBLK) : inner;
    for (int64_t o = 0; o < outer; o++) {
      int64_t off[2];
      row_offsets(o, r, d, 2, (const int64_t(*)[8])s, off);
      const float *restrict dr = dy + o * inner + j0;
      float *restrict tr = t + off[0] + j0 * xs;
      const float *restrict gr = g ? g + off[1] + j0 * gs : NULL;
      if (xs == 1) {
        if (!g)
          for (int64_t i = 0; i < nj; i++) tr[i] += sign * dr[i];
        else if (gs == 1)
          for (int64_t i = 0; i < nj; i++) tr[i] += dr[i] * gr[i];
        else
          for (int64_t i = 0; i < nj; i++) tr[i] += dr[i] * gr[i * gs];
      } else { // xs == 0: the whole row reduces into one element, in order
        float acc_v = tr[0];
        if (!g)
          for (int64_t i = 0; i < nj; i++) acc_v += sign * dr[i];
        else
          for (int64_t i = 0; i < nj; i++) acc_v += dr[i] * gr[i * gs];
        tr[0] = acc_v;
      }
    }
  }
  acc_finish(dx, t, nx, acc);
}

// ---------------------------------------------------------------------------------------------
// Elementwise unary ops over n elements

#define UNARY_FOR                                                                                  \
  _Pragma("omp parallel for schedule(static) if (n >= PAR_MIN)") for (int64_t i = 0; i < n; i++)

// y (n) = x * factor
void pr_scale_fwd(float *restrict y, const float *restrict x, int64_t n, float factor) {
  UNARY_FOR y[i] = x[i] * factor;
}
void pr_scale_bwd(float *restrict dx, const float *restrict dy, int64_t n, float factor, int acc) {
  if (acc)
    UNARY_FOR dx[i] = dx[i] + dy[i] * factor;
  else
    UNARY_FOR dx[i] = dy[i] * factor;
}

// y (n) = max(x, 0); NaN stays NaN (written as x <= 0 ? 0 : x, so a NaN, which compares false,
// passes through like PyTorch's; every finite x, -0 included, gives what x > 0 ? x : 0 gives).
void pr_relu_fwd(float *restrict y, const float *restrict x, int64_t n) {
  UNARY_FOR y[i] = x[i] <= 0.0f ? 0.0f : x[i];
}
// dx = y <= 0 ? 0 : dy, PyTorch's threshold_backward(dy, y, 0): where y is NaN, dy passes.
void pr_relu_bwd(float *restrict dx, const float *restrict dy, const float *restrict y, int64_t n,
                 int acc) {
  if (acc)
    UNARY_FOR dx[i] = dx[i] + (y[i] <= 0.0f ? 0.0f : dy[i]);
  else
    UNARY_FOR dx[i] = y[i] <= 0.0f ? 0.0f : dy[i];
}

// gelu, tanh approximation (torch.nn.functional.gelu(approximate='tanh')):
// y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as x * s with
// s = 0.5 (1 + tanh(u)) = 1/(1 + e^{-2u}) (one exp, one division; s flushed to 0 where e^{-2u}
// would exceed e^80, i.e. x below about -9.7, to keep denormals out).
#define GELU_BETA  0.7978845608028654f
#define GELU_KAPPA 0.044715f
static inline float gelu_s(float v) {
  float m2u = -2.0f * (GELU_BETA * (v + GELU_KAPPA * (v * v * v)));
  float s = 1.0f / (1.0f + exp_f(m2u));
  return m2u > 80.0f ? 0.0f : s;
}
void pr_gelu_fwd(float *restrict y, const float *restrict x, int64_t n) {
  UNARY_FOR y[i] = x[i] * gelu_s(x[i]);
}
// dy/dx = s + x * s (1 - s) * 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// (= PyTorch's 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2) with t = 2s - 1)
static inline float gelu_grad(float v) {
  float s = gelu_s(v);
  return s + (v * (s * (1.0f - s))) * ((2.0f * GELU_BETA) * (1.0f + (3.0f * GELU_KAPPA) * (v * v)));
}
void pr_gelu_bwd(float *restrict dx, const float *restrict dy, const float *restrict x, int64_t n,
                 int acc) {
  if (acc)
    UNARY_FOR dx[i] = dx[i] + dy[i] * gelu_grad(x[i]);
  else
    UNARY_FOR dx[i] = dy[i] * gelu_grad(x[i]);
}

// y (n) = tanh(x); backward from y: dy (1 - y^2)
void pr_tanh_fwd(float *restrict y, const float *restrict x, int64_t n) {
  UNARY_FOR y[i] = tanh_f(x[i]);
}
void pr_tanh_bwd(float *restrict dx, const float *restrict dy, const float *restrict y, int64_t n,
                 int acc) {
  if (acc)
    UNARY_FOR dx[i] = dx[i] + dy[i] * (1.0f - y[i] * y[i]);
  else
    UNARY_FOR dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

// y (n) = 1/(1+e^-x); backward from y: dy y (1 - y)
void pr_sigmoid_fwd(float *restrict y, const float *restrict x, int64_t n) {
  UNARY_FOR y[i] = sigmoid_f(x[i]);
}
void pr_sigmoid_bwd(float *restrict dx, const float *restrict dy, const float *restrict y,
                    int64_t n, int acc) {
  if (acc)
    UNARY_FOR dx[i] = dx[i] + dy[i] * (y[i] * (1.0f - y[i]));
  else
    UNARY_FOR dx[i] = dy[i] * (y[i] * (1.0f - y[i]));
}

// ---------------------------------------------------------------------------------------------
// softmax over the middle dim of (outer,dim,inner)

// one contiguous row: y (n) = softmax(x (n))
static void softmax_row(float *restrict y, const float *restrict x, int64_t n) {
  float m = max_f(x, n);
  for (int64_t i = 0; i < n; i++) y[i] = exp_f(x[i] - m);
  float inv = 1.0f / sum_f(y, n);
  for (int64_t i = 0; i < n; i++) y[i] = y[i] * inv;
}

#define INBLK 64
void pr_softmax_fwd(float *y, const float *x, int64_t outer, int64_t dim, int64_t inner) {
  if (outer == 0 || dim == 0 || inner == 0) return;
  if (inner == 1) {
#pragma omp parallel for schedule(static) if (outer * dim >= PAR_MIN)
    for (int64_t o = 0; o < outer; o++) softmax_row(y + o * dim, x + o * dim, dim);
    return;
  }
  // strided: vectorise across a block of the inner dim, walk dim sequentially
  int64_t nblk = (inner + INBLK - 1) / INBLK;
#pragma omp parallel for schedule(static) if (outer * dim * inner >= PAR_MIN)
  for (int64_t ob = 0; ob < outer * nblk; ob++) {
    int64_t o = ob / nblk, j0 = (ob % nblk) * INBLK, nj = inner - j0 < INBLK ? inner - j0 : INBLK;
    const float *xo = x + o * dim * inner + j0;
    float *yo = y + o * dim * inner + j0;
    float m[INBLK], s[INBLK];
    for (int64_t j = 0; j < nj; j++) m[j] = xo[j], s[j] = 0.0f;
    for (int64_t k = 1; k < dim; k++)
      for (int64_t j = 0; j < nj; j++) m[j] = xo[k * inner + j] > m[j] ? xo[k * inner + j] : m[j];
    for (int64_t k = 0; k < dim; k++)
      for (int64_t j = 0; j < nj; j++) {
        float e = exp_f(xo[k * inner + j] - m[j]);
        yo[k * inner + j] = e;
        s[j] += e;
      }
    for (int64_t j = 0; j < nj; j++) s[j] = 1.0f / s[j];
    for (int64_t k = 0; k < dim; k++)
      for (int64_t j = 0; j < nj; j++) yo[k * inner + j] = yo[k * inner + j] * s[j];
  }
}

// dx = y * (dy - sum_dim(y * dy))
void pr_softmax_bwd(float *dx, const float *dy, const float *y, int64_t outer, int64_t dim,
                    int64_t inner, int acc) {
  if (outer == 0 || dim == 0 || inner == 0) return;
  if (inner == 1) {
#pragma omp parallel for schedule(static) if (outer * dim >= PAR_MIN)
    for (int64_t o = 0; o < outer; o++) {
      const float *restrict yr = y + o * dim, *restrict dr = dy + o * dim;
      float *restrict xr = dx + o * dim;
      float dot = dot_f(yr, dr, dim);
      if (acc)
        for (int64_t i = 0; i < dim; i++) xr[i] = xr[i] + yr[i] * (dr[i] - dot);
      else
        for (int64_t i = 0; i < dim; i++) xr[i] = yr[i] * (dr[i] - dot);
    }
    return;
  }
  int64_t nblk = (inner + INBLK - 1) / INBLK;
#pragma omp parallel for schedule(static) if (outer * dim * inner >= PAR_MIN)
  for (int64_t ob = 0; ob < outer * nblk; ob++) {
    int64_t o = ob / nblk, j0 = (ob % nblk) * INBLK, nj = inner - j0 < INBLK ? inner - j0 : INBLK;
    int64_t base = o * dim * inner + j0;
    const float *yo = y + base, *dyo = dy + base;
    float *dxo = dx + base;
    float s[INBLK] = {0};
    for (int64_t k = 0; k < dim; k++)
      for (int64_t j = 0; j < nj; j++) s[j] = FMA(yo[k * inner + j], dyo[k * inner + j], s[j]);
    for (int64_t k = 0; k < dim; k++)
      for (int64_t j = 0; j < nj; j++) {
        int64_t e = k * inner + j;
        float v = yo[e] * (dyo[e] - s[j]);
        dxo[e] = acc ? dxo[e] + v : v;
      }
  }
}

// ---------------------------------------------------------------------------------------------
// layernorm over the last dim C of (rows,C); mean, rstd (rows) saved

void pr_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w,
                      const float *b, int64_t rows, int64_t C, float eps) {
  if (C == 0) return;
#pragma omp parallel for schedule(static) if (rows * C >= PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    const float *restrict xr = x + r * C;
    float *restrict yr = y + r * C;
    float m = sum_f(xr, C) / (float)C;
    float var = sumsq_centered_f(xr, m, C) / (float)C; // biased, like PyTorch
    float s = 1.0f / sqrtf(var + eps);
    if (b)
      for (int64_t i = 0; i < C; i++) yr[i] = ((xr[i] - m) * s) * w[i] + b[i];
    else
      for (int64_t i = 0; i < C; i++) yr[i] = ((xr[i] - m) * s) * w[i];
    mean[r] = m;
    rstd[r] = s;
  }
}

// dx (rows,C) = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy * w
void pr_layernorm_bwd_x(float *dx, const float *dy, const float *x, const float *w,
                        const float *mean, const float *rstd, int64_t rows, int64_t C, int acc) {
  if (C == 0) return;
#pragma omp parallel if (rows * C >= PAR_MIN)
  {
    float *buf = scratch((size_t)(2 * C) * sizeof(float));
    float *restrict dn = buf, *restrict nm = buf + C;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
      const float *restrict xr = x + r * C, *restrict dr = dy + r * C;
      float *restrict out = dx + r * C;
      float m = mean[r], s = rstd[r];
      for (int64_t i = 0; i < C; i++) {
        nm[i] = (xr[i] - m) * s;
        dn[i] = dr[i] * w[i];
      }
      float dn_mean = sum_f(dn, C) / (float)C;
      float dnn_mean = dot_f(dn, nm, C) / (float)C;
      if (acc)
        for (int64_t i = 0; i < C; i++)
          out[i] = out[i] + ((dn[i] - dn_mean) - nm[i] * dnn_mean) * s;
      else
        for (int64_t i = 0; i < C; i++) out[i] = ((dn[i] - dn_mean) - nm[i] * dnn_mean) * s;
    }
    scratch_free(buf);
  }
}

// dw (C) = sum over rows (ascending) of dy * norm; threads split the columns.
void pr_layernorm_bwd_w(float *dw, const float *dy, const float *x, const float *mean,
                        const float *rstd, int64_t rows, int64_t C, int acc) {
  int64_t nblk = (C + COLBLK - 1) / COLBLK;
#pragma omp parallel for schedule(static) if (rows * C >= PAR_MIN && nblk > 1)
  for (int64_t blk = 0; blk < nblk; blk++) {
    int64_t c0 = blk * COLBLK, nc = C - c0 < COLBLK ? C - c0 : COLBLK;
    float t[COLBLK] = {0};
    for (int64_t r = 0; r < rows; r++) {
      const float *restrict xr = x + r * C + c0, *restrict dr = dy + r * C + c0;
      float m = mean[r], s = rstd[r];
      for (int64_t j = 0; j < nc; j++) t[j] += dr[j] * ((xr[j] - m) * s);
    }
    for (int64_t j = 0; j < nc; j++) dw[c0 + j] = acc ? dw[c0 + j] + t[j] : t[j];
  }
}

// ---------------------------------------------------------------------------------------------
// embedding: y (n,C) = w (V,C)[idx (n)]

static void check_ids(const char *what, const int32_t *idx, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; i++)
    prCheck(idx[i] >= 0 && idx[i] < V,
            "ids must lie in [0, vocab_size): check that the data was tokenized with the model's "
            "vocabulary and that vocab_size (or the number of classes) is large enough",
            "%s: id %d at position %lld is outside [0, %lld)", what, (int)idx[i], (long long)i,
            (long long)V);
}

void pr_embedding_fwd(float *y, const int32_t *idx, const float *w, int64_t n, int64_t V,
                      int64_t C) {
  check_ids("embedding", idx, n, V);
  for (int64_t i = 0; i < n; i++)
    memcpy(y + i * C, w + (int64_t)idx[i] * C, (size_t)C * sizeof(float));
}

// dw (V,C): row v = sum of dy rows i with idx[i] == v, i ascending. Ids are bucketed (counting
// sort, stable) so each row of dw is built by one thread.
void pr_embedding_bwd_w(float *dw, const float *dy, const int32_t *idx, int64_t n, int64_t V,
                        int64_t C, int acc) {
  check_ids("embedding backward", idx, n, V);
  int64_t *start = scratch((size_t)(V + 1) * sizeof(int64_t));
  int64_t *order = scratch((size_t)(n ? n : 1) * sizeof(int64_t));
  memset(start, 0, (size_t)(V + 1) * sizeof(int64_t));
  for (int64_t i = 0; i < n; i++) start[idx[i] + 1]++;
  for (int64_t v = 0; v < V; v++) start[v + 1] += start[v];
  for (int64_t i = 0; i < n; i++) order[start[idx[i]]++] = i; // start[v] now = end of bucket v
#pragma omp parallel if (V * C >= PAR_MIN)
  {
    float *tmp = acc ? scratch((size_t)C * sizeof(float)) : NULL;
#pragma omp for schedule(static)
    for (int64_t v = 0; v < V; v++) {
      int64_t b0 = v == 0 ? 0 : start[v - 1], b1 = start[v];
      float *restrict row = dw + v * C;
      if (b0 == b1) {
        if (!acc) memset(row, 0, (size_t)C * sizeof(float));
        continue;
      }
      float *restrict t = acc ? tmp : row; // the contribution
      memcpy(t, dy + order[b0] * C, (size_t)C * sizeof(float));
      for (int64_t k = b0 + 1; k < b1; k++) {
        const float *restrict d = dy + order[k] * C;
        for (int64_t j = 0; j < C; j++) t[j] += d[j];
      }
      if (acc)
        for (int64_t j = 0; j < C; j++) row[j] = row[j] + t[j];
    }
    scratch_free(tmp);
  }
  scratch_free(order);
  scratch_free(start);
}

// ---------------------------------------------------------------------------------------------
// Data movement (4-byte elements)

void pr_copy(void *y, const void *x, int64_t bytes) {
  if (y != x && bytes > 0) memmove(y, x, (size_t)bytes);
}

// y (n0,n1) = x (n1,n0)^T for one contiguous matrix, in 32x32 tiles.
static void transpose2d(uint32_t *restrict y, const uint32_t *restrict x, int64_t n0, int64_t n1) {
  for (int64_t i0 = 0; i0 < n0; i0 += 32)
    for (int64_t j0 = 0; j0 < n1; j0 += 32) {
      int64_t ie = i0 + 32 < n0 ? i0 + 32 : n0, je = j0 + 32 < n1 ? j0 + 32 : n1;
      for (int64_t i = i0; i < ie; i++)
        for (int64_t j = j0; j < je; j++) y[i * n1 + j] = x[j * n0 + i];
    }
}

// y dims[i] = x dims[perm[i]], rank <= 8
void pr_permute(void *y_, const void *x_, int rank, const int64_t *xdims, const int64_t *perm) {
  prCheck(rank >= 0 && rank <= 8, "this is a pipec bug", "pr_permute: rank %d unsupported", rank);
  uint32_t *y = y_;
  const uint32_t *x = x_;
  int64_t xstr[8], total = 1;
  int seen = 0;
  for (int i = rank - 1; i >= 0; i--) {
    xstr[i] = total;
    total *= xdims[i];
  }
  for (int i = 0; i < rank; i++) {
    prCheck(perm[i] >= 0 && perm[i] < rank && !(seen & (1 << perm[i])), "this is a pipec bug",
            "pr_permute: perm is not a permutation of %d dims", rank);
    seen |= 1 << perm[i];
  }
  if (total == 0) return;
  // y's dims with their strides in x, size-1 dims dropped, x-consecutive neighbours merged
  int64_t d[8], s[8];
  int r = 0;
  for (int i = 0; i < rank; i++) {
    int64_t n = xdims[perm[i]], st = xstr[perm[i]];
    if (n == 1) continue;
    if (r > 0 && s[r - 1] == st * n) {
      d[r - 1] *= n;
      s[r - 1] = st;
      continue;
    }
    d[r] = n;
    s[r] = st;
    r++;
  }
  if (r <= 1) { // identity after collapsing
    memcpy(y, x, (size_t)total * 4);
    return;
  }
  if (s[r - 1] == 1) { // innermost dim contiguous in x: copy rows
    int64_t inner = d[r - 1], outer = total / inner;
    const int64_t(*sp)[8] = (const int64_t(*)[8])s;
#pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (int64_t o = 0; o < outer; o++) {
      int64_t off;
      row_offsets(o, r, d, 1, sp, &off);
      memcpy(y + o * inner, x + off, (size_t)inner * 4);
    }
    return;
  }
  if (s[r - 2] == 1 && s[r - 1] == d[r - 2]) { // last two dims transposed: tiled per matrix
    int64_t n0 = d[r - 2], n1 = d[r - 1], mats = total / (n0 * n1);
    int64_t dd[8], ss[1][8];
    for (int i = 0; i < r - 2; i++) dd[i] = d[i], ss[0][i] = s[i];
    dd[r - 2] = 1; // row_offsets ignores the last entry
#pragma omp parallel for schedule(static) if (total >= PAR_MIN)
    for (int64_t mi = 0; mi < mats; mi++) {
      int64_t off;
      row_offsets(mi, r - 1, dd, 1, (const int64_t(*)[8])ss, &off);
      transpose2d(y + mi * n0 * n1, x + off, n0, n1);
    }
    return;
  }
  // general: gather along the innermost dim
  int64_t inner = d[r - 1], outer = total / inner, is = s[r - 1];
  const int64_t(*sp)[8] = (const int64_t(*)[8])s;
#pragma omp parallel for schedule(static) if (total >= PAR_MIN)
  for (int64_t o = 0; o < outer; o++) {
    int64_t off;
    row_offsets(o, r, d, 1, sp, &off);
    uint32_t *restrict yr = y + o * inner;
    const uint32_t *restrict xr = x + off;
    for (int64_t j = 0; j < inner; j++) yr[j] = xr[j * is];
  }
}

// ys[k] (outer,sizes[k],inner) = x (outer,sum(sizes),inner)[:, off_k:off_k+sizes[k], :]
void pr_split(float *const *ys, const float *x, int64_t outer, int64_t inner, int n,
              const int64_t *sizes) {
  int64_t total = 0;
  for (int k = 0; k < n; k++) total += sizes[k];
  for (int64_t o = 0; o < outer; o++) {
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
      if (ys[k])
        memcpy(ys[k] + o * sizes[k] * inner, x + (o * total + off) * inner,
               (size_t)(sizes[k] * inner) * sizeof(float));
      off += sizes[k];
    }
  }
}

// y (outer,sum(sizes),inner) = concat of xs[k] (outer,sizes[k],inner); NULL reads as zeros
void pr_concat(float *y, const float *const *xs, int64_t outer, int64_t inner, int n,
               const int64_t *sizes) {
  int64_t total = 0;
  for (int k = 0; k < n; k++) total += sizes[k];
  for (int64_t o = 0; o < outer; o++) {
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
      float *dst = y + (o * total + off) * inner;
      size_t bytes = (size_t)(sizes[k] * inner) * sizeof(float);
      if (xs[k])
        memcpy(dst, xs[k] + o * sizes[k] * inner, bytes);
      else
        memset(dst, 0, bytes);
      off += sizes[k];
    }
  }
}

// dx (outer,size,inner) = dy (outer,total,inner)[:, offset:offset+size, :]
void pr_slice(float *dx, const float *dy, int64_t outer, int64_t inner, int64_t total,
              int64_t offset, int64_t size, int acc) {
  int64_t n = size * inner;
  for (int64_t o = 0; o < outer; o++) {
    float *restrict dst = dx + o * n;
    const float *restrict src = dy + (o * total + offset) * inner;
    if (acc)
      for (int64_t i = 0; i < n; i++) dst[i] = dst[i] + src[i];
    else
      memcpy(dst, src, (size_t)n * sizeof(float));
  }
}

// ---------------------------------------------------------------------------------------------
// Causal self-attention on packed qkv (B,T,3C), NH heads of hs = C/NH; one (b,h) per iteration
// of an OpenMP loop. The inner products are register-blocked (32 or 8 outputs, several
// independent accumulator chains) but every output is still one sum in ascending order.

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
#pragma omp parallel if (B * NH > 1 && B * NH * T * T * hs >= 8 * PAR_MIN)
  {
    float *buf = scratch((size_t)(hs * ld + 2 * ld) * sizeof(float));
    float *kT = buf, *sc = buf + hs * ld; // kT (hs,ld); scores of two rows (2,ld)
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * NH; bh++) {
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
    scratch_free(buf);
  }
}

// The kernel allocates its own per-thread scratch (its size depends on the head size and the
// thread count), so ws is unused and may be NULL; 64 bytes keeps callers' regions non-empty.
size_t pr_attention_bwd_ws(int64_t T) {
  (void)T;
  return 64;
}

// dqkv (B,T,3C) from dy (B,T,C), with the forward's qkv and att (B,NH,T,T):
//   datt[t,s] = dy_t . v_s;  dpre[t,s] = scale att[t,s] (datt[t,s] - sum_s' att[t,s'] datt[t,s'])
//   dq_t = sum_s dpre[t,s] k_s;  dk_s = sum_t dpre[t,s] q_t;  dv_s = sum_t att[t,s] dy_t
void pr_attention_bwd(float *dqkv, const float *dy, const float *qkv, const float *att, void *ws,
                      int64_t B, int64_t T, int64_t C, int64_t NH, int acc) {
  (void)ws;
  prCheck(NH > 0 && C % NH == 0, "this is a pipec bug",
          "attention: C=%lld not divisible by %lld heads", (long long)C, (long long)NH);
  int64_t hs = C / NH, C3 = 3 * C, ld = (T + 31) & ~(int64_t)31;
  float scale = 1.0f / sqrtf((float)hs);
  if (B * T * C == 0) return;
#pragma omp parallel if (B * NH > 1 && B * NH * T * T * hs >= 4 * PAR_MIN)
  {
    // vT (hs,ld); dpre (T,ld); one row of datt (ld) and two of results (2,hs)
    float *buf = scratch((size_t)(hs * ld + T * ld + ld + 2 * hs) * sizeof(float));
    float *vT = buf, *dpre = vT + hs * ld, *da = dpre + T * ld, *row = da + ld;
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * NH; bh++) {
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
    scratch_free(buf);
  }
}

// ---------------------------------------------------------------------------------------------
// Losses

// loss = mean over rows of logsumexp(logits_r) - logits_r[tgt_r], row terms summed in double
void pr_cross_entropy_fwd(float *loss, const float *logits, const int32_t *tgt, int64_t rows,
                          int64_t V) {
  check_ids("cross_entropy target", tgt, rows, V);
  double *term = scratch((size_t)(rows ? rows : 1) * sizeof(double));
#pragma omp parallel if (rows * V >= PAR_MIN)
  {
    float *e = scratch((size_t)V * sizeof(float));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
      const float *restrict x = logits + r * V;
      float m = max_f(x, V);
      for (int64_t i = 0; i < V; i++) e[i] = exp_f(x[i] - m);
      term[r] = ((double)m + log((double)sum_f(e, V))) - (double)x[tgt[r]];
    }
    scratch_free(e);
  }
  double s = 0.0;
  for (int64_t r = 0; r < rows; r++) s += term[r];
  scratch_free(term);
  loss[0] = rows ? (float)(s / (double)rows) : 0.0f;
}

// dlogits (rows,V) = (softmax(logits) - onehot(tgt)) * dloss / rows
void pr_cross_entropy_bwd(float *dlogits, const float *dloss, const float *logits,
                          const int32_t *tgt, int64_t rows, int64_t V, int acc) {
  check_ids("cross_entropy target", tgt, rows, V);
  if (rows == 0) return;
  float gscale = dloss[0] / (float)rows;
#pragma omp parallel if (rows * V >= PAR_MIN)
  {
    float *p = scratch((size_t)V * sizeof(float));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
      float *restrict out = dlogits + r * V;
      softmax_row(p, logits + r * V, V);
      p[tgt[r]] -= 1.0f;
      if (acc)
        for (int64_t i = 0; i < V; i++) out[i] = out[i] + p[i] * gscale;
      else
        for (int64_t i = 0; i < V; i++) out[i] = p[i] * gscale;
    }
    scratch_free(p);
  }
}

// loss = mean (p - t)^2 over n, summed in double in ascending order
void pr_mse_fwd(float *loss, const float *p, const float *t, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double d = (double)p[i] - (double)t[i];
    s += d * d;
  }
  loss[0] = n ? (float)(s / (double)n) : 0.0f;
}

// which = 0: dp = 2 (p - t) dloss / n; which = 1: dt = -(that)
void pr_mse_bwd(float *dx, const float *dloss, const float *p, const float *t, int64_t n, int which,
                int acc) {
  if (n == 0) return;
  float g = (which ? -2.0f : 2.0f) * dloss[0] / (float)n;
  if (acc)
    UNARY_FOR dx[i] = dx[i] + (p[i] - t[i]) * g;
  else
    UNARY_FOR dx[i] = (p[i] - t[i]) * g;
}

// ---------------------------------------------------------------------------------------------
// Misc

// y (n) = xs[0] + xs[1] + ... + xs[k-1], left to right; y may alias any input.
void pr_add_n(float *y, const float *const *xs, int k, int64_t n) {
  if (k <= 0) {
    memset(y, 0, (size_t)n * sizeof(float));
    return;
  }
  int64_t nblk = (n + 255) / 256;
#pragma omp parallel for schedule(static) if (n * k >= PAR_MIN)
  for (int64_t blk = 0; blk < nblk; blk++) {
    int64_t i0 = blk * 256, m = n - i0 < 256 ? n - i0 : 256;
    float t[256];
    for (int64_t i = 0; i < m; i++) t[i] = xs[0][i0 + i];
    for (int j = 1; j < k; j++) {
      const float *restrict x = xs[j] + i0;
      for (int64_t i = 0; i < m; i++) t[i] += x[i];
    }
    memcpy(y + i0, t, (size_t)m * sizeof(float));
  }
}

void pr_fill(float *y, int64_t n, float value) {
  for (int64_t i = 0; i < n; i++) y[i] = value;
}

// rows (of logits (rows,V)) whose argmax (ties: lowest index) equals tgt
int64_t pr_count_correct(const float *logits, const int32_t *tgt, int64_t rows, int64_t V) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float *x = logits + r * V;
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
      if (x[i] > x[best]) best = i;
    count += V > 0 && best == tgt[r];
  }
  return count;
}

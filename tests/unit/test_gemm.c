// Unit tests of pipec's own GEMM (runtime/gemm.c), Check framework.
//
// - every build (the v3 AVX2 and v4 AVX-512 ones, called by their symbols, and v1's libm fmaf
//   one) computes each element of C as the chain of fmaf over k ascending from 0 (from C's value
//   with PR_GEMM_CONT; C + the chain with PR_GEMM_ADD), bitwise against an explicit scalar chain
//   written here, over odd shapes (M, N, K in 1..70 and 129: the remainders of every tile size),
//   leading dimensions above the minimal ones, the four layouts, the three modes, K above the
//   kernel's K block; nothing outside C's M x N elements is written; the same with B packed
//   once (pr_gemm_pack, pr_gemm_packed);
// - the chain is within float rounding of a double-precision product;
// - the kernels (linear, matmul) run it: their results equal the scalar chain bitwise, with the
//   threads' split of C (OMP_NUM_THREADS=2 in ctest) and with acc (rounded product added);
// - the fused epilogues (a gelu in the linear's product, its backward in the input gradient's)
//   give the bits of the separate calls, at 1 and 2 threads.
// Unless the CPU lacks a level (then that build is skipped), and unless PIPEC_GEMM=openblas.
#pragma GCC optimize("fp-contract=off")

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "pipert.h"

typedef void gemm_fn(int, int, int64_t, int64_t, int64_t, const float *, int64_t, const float *,
                     int64_t, float *, int64_t, int);
extern gemm_fn pr_gemm__v1, pr_gemm__v3, pr_gemm__v4;
typedef int64_t panels_fn(int64_t, int64_t *);
typedef void pack_fn(int, int64_t, int64_t, const float *, int64_t, float *, int64_t, int64_t);
typedef void packed_fn(int, int64_t, int64_t, int64_t, const float *, int64_t, const float *,
                       float *, int64_t, int);
extern panels_fn pr_gemm_panels__v1, pr_gemm_panels__v3, pr_gemm_panels__v4;
extern pack_fn pr_gemm_pack__v1, pr_gemm_pack__v3, pr_gemm_pack__v4;
extern packed_fn pr_gemm_packed__v1, pr_gemm_packed__v3, pr_gemm_packed__v4;

static uint64_t rng = 88172645463325252ull;
static float frand(void) { // uniform in [-1, 1), a multiple of 2^-10 (products exact in float)
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((int)(rng >> 40 & 2047) - 1024) / 1024.0f + (float)(rng >> 20 & 1023) * 0x1p-20f;
}
static float *frandv(int64_t n) {
  float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
  ck_assert_ptr_nonnull(p);
  for (int64_t i = 0; i < n; i++) p[i] = frand();
  return p;
}

// The definition: C[i][j] = fmaf chain over k ascending (A(i,k) = ta ? A[k*lda+i] : A[i*lda+k]).
static void ref_chain(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                      const float *B, int64_t ldb, float *C, int64_t ldc, int mode) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      float c = mode == PR_GEMM_CONT ? C[i * ldc + j] : 0.0f;
      for (int64_t k = 0; k < K; k++)
        c = fmaf(ta ? A[k * lda + i] : A[i * lda + k], tb ? B[j * ldb + k] : B[k * ldb + j], c);
      C[i * ldc + j] = mode == PR_GEMM_ADD ? C[i * ldc + j] + c : c;
    }
}

// Runs one case through fn and checks it against ref_chain bitwise (and the padding untouched).
static void check_case(gemm_fn *fn, const char *name, int ta, int tb, int64_t M, int64_t N,
                       int64_t K, int64_t pad, int mode) {
  int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  float *A = frandv((ta ? K : M) * lda), *B = frandv((tb ? N : K) * ldb), *C = frandv(M * ldc);
  float *R = malloc((size_t)(M * ldc) * sizeof(float));
  ck_assert_ptr_nonnull(R);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = N; j < ldc; j++) C[i * ldc + j] = NAN; // padding: must stay NaN
  memcpy(R, C, (size_t)(M * ldc) * sizeof(float));
  fn(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, mode);
  ref_chain(ta, tb, M, N, K, A, lda, B, ldb, R, ldc, mode);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < ldc; j++) {
      float got = C[i * ldc + j], want = R[i * ldc + j];
      int same = j >= N ? isnan(got) : memcmp(&got, &want, sizeof got) == 0;
      ck_assert_msg(same,
                    "%s %c%c M %lld N %lld K %lld pad %lld mode %d: C[%lld][%lld] = %a, chain %a",
                    name, ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)M, (long long)N, (long long)K,
                    (long long)pad, mode, (long long)i, (long long)j, got, want);
    }
  free(A), free(B), free(C), free(R);
}

static const int64_t dims[] = {1,  2,  3,  5,  6,  7,  8,  11, 12, 13, 15, 16, 17, 23,
                               24, 25, 31, 32, 33, 47, 48, 49, 63, 64, 65, 70, 129};
#define NDIMS ((int)(sizeof dims / sizeof dims[0]))

// Every build the CPU has against the chain: all M x N pairs at a few K, all K at a few M x N.
static void check_build(gemm_fn *fn, const char *name) {
  static const int64_t ks[] = {1, 7, 16, 33, 129};
  for (int lay = 0; lay < 4; lay++) {
    int ta = lay >> 1, tb = lay & 1;
    for (int a = 0; a < NDIMS; a++)
      for (int b = 0; b < NDIMS; b++) {
        int kk = (a + b + lay) % 5;
        check_case(fn, name, ta, tb, dims[a], dims[b], ks[kk], (a + b) % 3 == 0 ? 0 : 3,
                   (a + lay) % 3);
      }
    for (int c = 0; c < NDIMS; c++)
      for (int mode = 0; mode < 3; mode++) check_case(fn, name, ta, tb, 25, 49, dims[c], 5, mode);
    // K above gemm.c's K block (512): the blocks' chains continue through C (not with ADD)
    for (int mode = 0; mode < 3; mode++) check_case(fn, name, ta, tb, 13, 37, 1100, 1, mode);
    // leading dimensions above gemm.c's PACK_A_MIN_LD (256): A stored transposed is packed (the
    // shapes above read it in place)
    for (int mode = 0; mode < 3; mode++) check_case(fn, name, ta, tb, 29, 37, 70, 400, mode);
  }
}

// B packed once (pr_gemm_pack, in two halves as two threads would) and used by pr_gemm_packed:
// the same chain, every layout and mode, K past the K block.
static void check_packed(int level) {
  panels_fn *panels = level == 4   ? pr_gemm_panels__v4
                      : level == 3 ? pr_gemm_panels__v3
                                   : pr_gemm_panels__v1;
  pack_fn *pack = level == 4 ? pr_gemm_pack__v4 : level == 3 ? pr_gemm_pack__v3 : pr_gemm_pack__v1;
  packed_fn *packed = level == 4   ? pr_gemm_packed__v4
                      : level == 3 ? pr_gemm_packed__v3
                                   : pr_gemm_packed__v1;
  static const int64_t shapes[][3] = {{29, 70, 33}, {12, 32, 1}, {1, 5, 600}, {47, 129, 17}};
  for (int sh = 0; sh < 4; sh++)
    for (int lay = 0; lay < 4; lay++) {
      int ta = lay >> 1, tb = lay & 1, mode = (sh + lay) % 3;
      int64_t M = shapes[sh][0], N = shapes[sh][1], K = shapes[sh][2], width;
      int64_t lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 3;
      float *A = frandv((ta ? K : M) * lda), *B = frandv((tb ? N : K) * ldb);
      float *C = frandv(M * ldc), *R = malloc((size_t)(M * ldc) * sizeof(float));
      int64_t np = panels(N, &width);
      float *P = malloc((size_t)(np * width * K) * sizeof(float));
      ck_assert(R && P);
      memcpy(R, C, (size_t)(M * ldc) * sizeof(float));
      pack(tb, K, N, B, ldb, P, 0, np / 2);
      pack(tb, K, N, B, ldb, P, np / 2, np);
      packed(ta, M, N, K, A, lda, P, C, ldc, mode);
      ref_chain(ta, tb, M, N, K, A, lda, B, ldb, R, ldc, mode);
      for (int64_t i = 0; i < M; i++)
        ck_assert_msg(memcmp(C + i * ldc, R + i * ldc, (size_t)N * sizeof(float)) == 0,
                      "packed v%d %c%c M %lld N %lld K %lld mode %d: row %lld differs", level,
                      ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)M, (long long)N, (long long)K,
                      mode, (long long)i);
      free(A), free(B), free(C), free(R), free(P);
    }
}

START_TEST(test_packed) {
  __builtin_cpu_init();
  check_packed(1);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) check_packed(3);
  if (__builtin_cpu_supports("x86-64-v4")) check_packed(4);
}
END_TEST

START_TEST(test_chain_v3) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return;
  check_build(pr_gemm__v3, "v3");
}
END_TEST

START_TEST(test_chain_v4) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("x86-64-v4")) return;
  check_build(pr_gemm__v4, "v4");
}
END_TEST

START_TEST(test_chain_v1) { // the baseline build: the same chain through libm's fmaf (a few shapes)
  for (int lay = 0; lay < 4; lay++)
    for (int mode = 0; mode < 3; mode++)
      check_case(pr_gemm__v1, "v1", lay >> 1, lay & 1, 13, 33, 17, 2, mode);
}
END_TEST

// Within float rounding of the double-precision product: |C - D| <= K * 2^-23 * sum |a b|.
START_TEST(test_accuracy) {
  int64_t M = 70, N = 65, K = 129;
  float *A = frandv(M * K), *B = frandv(K * N), *C = malloc((size_t)(M * N) * sizeof(float));
  ck_assert_ptr_nonnull(C);
  pr_gemm(0, 0, M, N, K, A, K, B, N, C, N, PR_GEMM_SET);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double d = 0, mag = 0;
      for (int64_t k = 0; k < K; k++) {
        d += (double)A[i * K + k] * B[k * N + j];
        mag += fabs((double)A[i * K + k] * B[k * N + j]);
      }
      ck_assert_msg(fabs(C[i * N + j] - d) <= (double)K * 0x1p-23 * mag,
                    "C[%lld][%lld] = %.9g, double %.9g", (long long)i, (long long)j, C[i * N + j],
                    d);
    }
  free(A), free(B), free(C);
}
END_TEST

// Bitwise equality of two float arrays, with the first difference in the message.
static void same_bits(const char *what, const float *got, const float *want, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    ck_assert_msg(memcmp(got + i, want + i, sizeof(float)) == 0, "%s: [%lld] = %a, chain %a", what,
                  (long long)i, got[i], want[i]);
}

// The kernels run the chain: linear's three products (forward NT, input gradient NN, weight
// gradient TN) at a size the kernels split over threads, with acc; matmul's batched weight
// gradient summed over batch entries with a transposed a (one chain over the entries' rows).
START_TEST(test_kernels_run_it) {
  if (!pr_gemm_own()) return; // PIPEC_GEMM=openblas
  // v1 (the CPU's level, or PIPEC_ISA=v1 lowering it): the kernels call OpenBLAS.
  if (strncmp(pr_isa_name(), "x86-64-v1", 9) == 0) return;
  int64_t rows = 768, in = 131, out = 384, n;
  float *x = frandv(rows * in), *w = frandv(out * in), *dy = frandv(rows * out);
  float *y = malloc((size_t)(rows * out) * sizeof(float)),
        *r = malloc((size_t)(rows * out) * sizeof(float));
  float *acc = frandv(rows * in), *racc = malloc((size_t)(rows * in) * sizeof(float));
  ck_assert(y && r && racc);
  pr_linear_fwd(y, x, w, NULL, rows, in, out);
  ref_chain(0, 1, rows, out, in, x, in, w, in, r, out, PR_GEMM_SET);
  same_bits("linear_fwd", y, r, rows * out);
  n = rows * in;
  memcpy(racc, acc, (size_t)n * sizeof(float));
  pr_linear_bwd_x(acc, dy, w, rows, in, out, 1);
  ref_chain(0, 0, rows, in, out, dy, out, w, in, racc, in, PR_GEMM_ADD);
  same_bits("linear_bwd_x acc", acc, racc, n);
  pr_linear_bwd_w(y, dy, x, rows, in, out, 0);
  ref_chain(1, 0, out, in, rows, dy, out, x, in, r, in, PR_GEMM_SET);
  same_bits("linear_bwd_w", y, r, out * in);
  // matmul: db (K,N) = sum over 3 batch entries of a_i^T . dy_i with a stored transposed (M,K)^T
  int64_t batch = 3, M = 20, N = 37, K = 29;
  float *a = frandv(batch * M * K), *g = frandv(batch * M * N);
  pr_matmul_bwd_b(y, g, a, batch, M, N, K, 1, 0, 0, 0);
  for (int64_t i = 0; i < batch; i++) // a_i stored (K,M): op(a)^T = a_i as stored
    ref_chain(0, 0, K, N, M, a + i * M * K, M, g + i * M * N, N, r, N,
              i ? PR_GEMM_CONT : PR_GEMM_SET);
  same_bits("matmul_bwd_b batch chain", y, r, K * N);
  free(x), free(w), free(dy), free(y), free(r), free(acc), free(racc), free(a), free(g);
}
END_TEST

// The fused epilogues (pipec's default codegen): the linear's product with bias + gelu in its
// epilogue against pr_linear_fwd then pr_gelu_fwd, and its input gradient with gelu's backward in
// its epilogue against pr_linear_bwd_x then pr_gelu_bwd, bitwise: every output (the product, y,
// cdf; dx and gelu's dx), both gelu forms, with and without bias, saved factor and acc, at 1 and 2
// threads, at shapes whose blocks have edges (rows, columns not multiples of a tile; K above the
// K block).
static void check_fused(int64_t rows, int64_t in, int64_t out, int exact, int bias, int save,
                        int acc) {
  int64_t n = rows * out, nb = rows * in;
  float *x = frandv(rows * in), *w = frandv(out * in), *b = bias ? frandv(out) : NULL;
  float *y1 = frandv(n), *g1 = frandv(n), *c1 = frandv(n), *y2 = frandv(n), *g2 = frandv(n);
  float *c2 = frandv(n);
  pr_linear_fwd(y1, x, w, b, rows, in, out);
  pr_gelu_fwd(g1, save ? c1 : NULL, y1, n, exact);
  pr_linear_gelu_fwd(y2, g2, save ? c2 : NULL, x, w, b, rows, in, out, n, exact);
  same_bits("fused fwd: the product", y2, y1, n);
  same_bits("fused fwd: gelu", g2, g1, n);
  if (save) same_bits("fused fwd: cdf", c2, c1, n);
  // backward: the gelu of (rows,in) after a linear in -> out; its dy = dy_lin . w (in, x: gelu's)
  float *dyl = frandv(rows * out), *gx = frandv(nb), *gc = frandv(nb);
  float *d1 = frandv(nb), *gd1 = frandv(nb), *d2 = frandv(nb), *gd2 = malloc(nb * sizeof(float));
  ck_assert_ptr_nonnull(gd2);
  memcpy(gd2, gd1, (size_t)nb * sizeof(float));
  pr_linear_bwd_x(d1, dyl, w, rows, in, out, 0);
  pr_gelu_bwd(gd1, d1, gx, save ? gc : NULL, nb, exact, acc);
  pr_linear_bwd_x_gelu(d2, gd2, dyl, w, gx, save ? gc : NULL, rows, in, out, nb, exact, acc);
  same_bits("fused bwd: the product", d2, d1, nb);
  same_bits("fused bwd: gelu's dx", gd2, gd1, nb);
  free(x), free(w), free(b), free(y1), free(g1), free(c1), free(y2), free(g2), free(c2);
  free(dyl), free(gx), free(gc), free(d1), free(gd1), free(d2), free(gd2);
}

START_TEST(test_fused_epilogue) {
  for (int th = 1; th <= 2; th++) {
    pr_set_threads(th);
    check_fused(768, 128, 512, 1, 0, 1, 0); // gpt_char's c_fc + gelu (and mlp.c_proj's dx)
    check_fused(768, 131, 384, 1, 1, 1, 1);
    check_fused(50, 600, 70, 0, 1, 1, 0); // K above the K block (512), edge tiles
    check_fused(29, 33, 17, 1, 1, 0, 1);  // cdf neither saved nor read
    check_fused(29, 33, 17, 0, 0, 0, 0);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("gemm");
  TCase *tc = tcase_create("gemm");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_chain_v3);
  tcase_add_test(tc, test_chain_v4);
  tcase_add_test(tc, test_chain_v1);
  tcase_add_test(tc, test_packed);
  tcase_add_test(tc, test_accuracy);
  tcase_add_test(tc, test_kernels_run_it);
  tcase_add_test(tc, test_fused_epilogue);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

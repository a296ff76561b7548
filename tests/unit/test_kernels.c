// Unit tests of the runtime kernels (runtime/kernels_*.c), Check framework.
//
// - forward passes against straightforward double-precision references;
// - every backward against central finite differences (4-point stencil, double objective
//   L = sum r*y with fixed random r, inputs quantised to 2^-12 so x +- h is exact);
// - acc = 1 adds exactly the acc = 0 contribution (bitwise), including GEMMs whose reduction
//   dimension exceeds OpenBLAS's blocking;
// - results are bitwise equal with 1 and 2 threads (OpenMP and OpenBLAS);
// - broadcasting, permute, split/concat/slice round trips, argmax ties;
// - the residual add fused into layernorm, and silu_mul (SwiGLU's gate), give the unfused
//   kernels' bits;
// - out-of-range ids stop the program with the position and value (checked in a forked child).
// Expected values computed here must round like the kernels' (no fused multiply-adds).
#pragma GCC optimize("fp-contract=off")

#include <check.h>
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipert.h"

// ---------------------------------------------------------------------------------------------
// Test allocations (freed by the fixture after every test) and random numbers

static void *allocs[4096];
static int nallocs;

static void *talloc(size_t bytes) {
  ck_assert_int_lt(nallocs, 4096);
  void *p = calloc(1, bytes ? bytes : 1);
  ck_assert_ptr_nonnull(p);
  allocs[nallocs++] = p;
  return p;
}
static float *fzeros(int64_t n) {
  return talloc((size_t)n * sizeof(float));
}
static void free_all(void) {
  for (int i = 0; i < nallocs; i++) free(allocs[i]);
  nallocs = 0;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}
// uniform in [lo,hi), quantised to multiples of 2^-12 (so that x +- 2h stays exact for h = 2^-6)
static float qrand(float lo, float hi) {
  return (float)(floor((lo + (hi - lo) * urand()) * 4096.0) / 4096.0);
}
static float *frand(int64_t n, float lo, float hi) {
  float *p = fzeros(n);
  for (int64_t i = 0; i < n; i++) p[i] = qrand(lo, hi);
  return p;
}

static int default_threads; // OpenMP threads at start (OMP_NUM_THREADS), restored after each test

static void setup(void) {
  rng = 0x9E3779B97F4A7C15ull;
}
static void teardown(void) {
  free_all();
  pr_set_threads(default_threads);
}

// Element checks assert once per array (each ck_assert costs Check a write to its log).

// |got - ref| <= abs + rel |ref| elementwise
static void assert_close(const char *what, const float *got, const double *ref, int64_t n,
                         double abs, double rel) {
  int64_t i = 0;
  while (i < n && fabs((double)got[i] - ref[i]) <= abs + rel * fabs(ref[i])) i++;
  ck_assert_msg(i == n, "%s[%lld]: got %.9g, expected %.9g", what, (long long)i,
                (double)got[i < n ? i : 0], ref[i < n ? i : 0]);
}

static void assert_bitwise(const char *what, const float *a, const float *b, int64_t n) {
  int64_t i = 0;
  while (i < n && memcmp(&a[i], &b[i], sizeof(float)) == 0) i++;
  ck_assert_msg(i == n, "%s[%lld]: %.9g vs %.9g", what, (long long)i, (double)a[i < n ? i : 0],
                (double)b[i < n ? i : 0]);
}

// ---------------------------------------------------------------------------------------------
// Finite differences. A forward callback recomputes ctx's output y from its (perturbed) inputs.

typedef void (*FwdFn)(void *ctx);

static double objective(FwdFn f, void *ctx, const float *y, const float *r, int64_t ny) {
  f(ctx);
  double s = 0.0;
  for (int64_t i = 0; i < ny; i++) s += (double)r[i] * (double)y[i];
  return s;
}

// Norm-wise relative error of the analytical gradient g of L = sum r*y w.r.t. x.
static void fd_check(const char *what, FwdFn f, void *ctx, float *x, int64_t nx, const float *g,
                     const float *y, const float *r, int64_t ny, float h, double tol) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < nx; i++) {
    float x0 = x[i];
    x[i] = x0 + h;
    double f1 = objective(f, ctx, y, r, ny);
    x[i] = x0 - h;
    double fm1 = objective(f, ctx, y, r, ny);
    x[i] = x0 + 2 * h;
    double f2 = objective(f, ctx, y, r, ny);
    x[i] = x0 - 2 * h;
    double fm2 = objective(f, ctx, y, r, ny);
    x[i] = x0;
    double fd = (8.0 * (f1 - fm1) - (f2 - fm2)) / (12.0 * (double)h);
    num += (fd - g[i]) * (fd - g[i]);
    den += (double)g[i] * g[i];
  }
  f(ctx); // restore y
  double err = den > 0 ? sqrt(num / den) : sqrt(num);
  ck_assert_msg(err <= tol, "%s: finite-difference relative error %.3g > %.3g", what, err, tol);
}

#define H   (1.0f / 64)
#define TOL 1e-3

// The context every forward callback reads: inputs, output, sizes and flags.
typedef struct Ctx {
  float *y, *a, *b, *w, *bias, *x, *mean, *rstd, *att, *aux;
  const float *xs[4];
  int32_t *idx;
  int64_t n[8];
  int64_t ydims[8], astr[8], bstr[8];
  int flag[4];
} Ctx;

// ---------------------------------------------------------------------------------------------
// matmul

static void mm_ref(double *y, const float *a, const float *b, int64_t batch, int64_t M, int64_t N,
                   int64_t K, int ta, int tb, int bb) {
  for (int64_t i = 0; i < batch; i++)
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++) {
          double av = ta ? a[i * M * K + k * M + m] : a[i * M * K + m * K + k];
          const float *bi = b + (bb ? i * K * N : 0);
          double bv = tb ? bi[n * K + k] : bi[k * N + n];
          s += av * bv;
        }
        y[(i * M + m) * N + n] = s;
      }
}

static void f_matmul(void *p) {
  Ctx *c = p;
  pr_matmul_fwd(c->y, c->a, c->b, c->n[0], c->n[1], c->n[2], c->n[3], c->flag[0], c->flag[1],
                c->flag[2]);
}

START_TEST(test_matmul) {
  int64_t batch = 3, M = 4, N = 5, K = 6;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int bb = 0; bb < 2; bb++) {
        Ctx c = {0};
        c.n[0] = batch, c.n[1] = M, c.n[2] = N, c.n[3] = K;
        c.flag[0] = ta, c.flag[1] = tb, c.flag[2] = bb;
        int64_t na = batch * M * K, nb = (bb ? batch : 1) * K * N, ny = batch * M * N;
        c.a = frand(na, -2, 2), c.b = frand(nb, -2, 2), c.y = fzeros(ny);
        double *ref = talloc((size_t)ny * sizeof(double));
        f_matmul(&c);
        mm_ref(ref, c.a, c.b, batch, M, N, K, ta, tb, bb);
        assert_close("matmul", c.y, ref, ny, 1e-5, 1e-5);
        float *r = frand(ny, -1, 1), *da = fzeros(na), *db = fzeros(nb);
        pr_matmul_bwd_a(da, r, c.b, batch, M, N, K, ta, tb, bb, 0);
        pr_matmul_bwd_b(db, r, c.a, batch, M, N, K, ta, tb, bb, 0);
        fd_check("matmul da", f_matmul, &c, c.a, na, da, c.y, r, ny, H, TOL);
        fd_check("matmul db", f_matmul, &c, c.b, nb, db, c.y, r, ny, H, TOL);
      }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// linear and sum_rows

static void f_linear(void *p) {
  Ctx *c = p;
  pr_linear_fwd(c->y, c->x, c->w, c->bias, c->n[0], c->n[1], c->n[2]);
}

START_TEST(test_linear) {
  int64_t rows = 7, in = 5, out = 6;
  for (int with_bias = 0; with_bias < 2; with_bias++) {
    Ctx c = {0};
    c.n[0] = rows, c.n[1] = in, c.n[2] = out;
    c.x = frand(rows * in, -2, 2), c.w = frand(out * in, -1, 1);
    c.bias = with_bias ? frand(out, -1, 1) : NULL;
    c.y = fzeros(rows * out);
    f_linear(&c);
    double *ref = talloc((size_t)(rows * out) * sizeof(double));
    for (int64_t r = 0; r < rows; r++)
      for (int64_t o = 0; o < out; o++) {
        double s = c.bias ? c.bias[o] : 0.0;
        for (int64_t i = 0; i < in; i++) s += (double)c.x[r * in + i] * c.w[o * in + i];
        ref[r * out + o] = s;
      }
    assert_close("linear", c.y, ref, rows * out, 1e-5, 1e-5);
    float *r = frand(rows * out, -1, 1), *dx = fzeros(rows * in), *dw = fzeros(out * in);
    pr_linear_bwd_x(dx, r, c.w, rows, in, out, 0);
    pr_linear_bwd_w(dw, r, c.x, rows, in, out, 0);
    fd_check("linear dx", f_linear, &c, c.x, rows * in, dx, c.y, r, rows * out, H, TOL);
    fd_check("linear dw", f_linear, &c, c.w, out * in, dw, c.y, r, rows * out, H, TOL);
    if (with_bias) {
      float *db = fzeros(out);
      pr_sum_rows(db, r, rows, out, 0);
      fd_check("linear db", f_linear, &c, c.bias, out, db, c.y, r, rows * out, H, TOL);
    }
  }
}
END_TEST

START_TEST(test_sum_rows) {
  int64_t rows = 300, cols = 130; // several column blocks, parallel path
  float *dy = frand(rows * cols, -1, 1), *db = fzeros(cols);
  pr_sum_rows(db, dy, rows, cols, 0);
  float *expect = fzeros(cols);
  for (int64_t c = 0; c < cols; c++) // the contract: rows in ascending order, in float
    for (int64_t r = 0; r < rows; r++) expect[c] += dy[r * cols + c];
  assert_bitwise("sum_rows", db, expect, cols);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// broadcasting binary ops

// strides of a tensor of dims xd (1 = broadcast) over y's dims
static void bstrides(int rank, const int64_t *xd, int64_t *str) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    str[i] = xd[i] == 1 ? 0 : s;
    s *= xd[i];
  }
}
static int64_t numel(int rank, const int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= d[i];
  return n;
}

static void f_binary(void *p) {
  Ctx *c = p;
  pr_binary_fwd(c->y, c->a, c->b, c->flag[0], c->flag[1], c->ydims, c->astr, c->bstr);
}

typedef struct BinCase {
  int rank;
  int64_t ad[8], bd[8];
} BinCase;

static const BinCase bin_cases[] = {
    {3, {2, 3, 4}, {2, 3, 4}},             // same shape
    {3, {2, 3, 5}, {1, 1, 5}},             // bias (C) over (B,T,C)
    {3, {2, 3, 5}, {1, 3, 5}},             // (T,C) over (B,T,C)
    {3, {1, 3, 4}, {2, 3, 4}},             // a broadcast over the batch
    {3, {2, 3, 4}, {2, 3, 1}},             // one value per row
    {3, {2, 1, 4}, {1, 3, 4}},             // both broadcast
    {4, {2, 1, 3, 1}, {1, 4, 3, 2}},       // mixed, rank 4
    {2, {3, 4}, {1, 1}},                   // scalar b
    {0, {0}, {0}},                         // rank 0
    {5, {2, 1, 2, 1, 3}, {1, 2, 2, 3, 1}}, // rank 5
};

START_TEST(test_binary) {
  for (size_t ci = 0; ci < sizeof bin_cases / sizeof bin_cases[0]; ci++)
    for (int op = 0; op < 3; op++) {
      const BinCase *bc = &bin_cases[ci];
      Ctx c = {0};
      int rank = bc->rank;
      c.flag[0] = op, c.flag[1] = rank;
      for (int i = 0; i < rank; i++) c.ydims[i] = bc->ad[i] > bc->bd[i] ? bc->ad[i] : bc->bd[i];
      bstrides(rank, bc->ad, c.astr);
      bstrides(rank, bc->bd, c.bstr);
      int64_t ny = numel(rank, c.ydims), na = numel(rank, bc->ad), nb = numel(rank, bc->bd);
      c.a = frand(na, -2, 2), c.b = frand(nb, -2, 2), c.y = fzeros(ny);
      f_binary(&c);
      // reference: walk y's multi-index
      float *expect = fzeros(ny);
      for (int64_t i = 0; i < ny; i++) {
        int64_t rem = i, ao = 0, bo = 0;
        for (int d = rank - 1; d >= 0; d--) {
          int64_t q = rem % c.ydims[d];
          rem /= c.ydims[d];
          ao += q * c.astr[d], bo += q * c.bstr[d];
        }
        float av = c.a[ao], bv = c.b[bo];
        expect[i] = op == 0 ? av + bv : op == 1 ? av - bv : av * bv;
      }
      assert_bitwise(op == 0   ? "binary add"
                     : op == 1 ? "binary sub"
                               : "binary mul",
                     c.y, expect, ny);
      float *r = frand(ny, -1, 1), *da = fzeros(na), *db = fzeros(nb);
      pr_binary_bwd(da, r, op == 2 ? c.b : NULL, op, 0, rank, c.ydims, bc->ad,
                    op == 2 ? c.bstr : NULL, 0);
      pr_binary_bwd(db, r, op == 2 ? c.a : NULL, op, 1, rank, c.ydims, bc->bd,
                    op == 2 ? c.astr : NULL, 0);
      fd_check("binary da", f_binary, &c, c.a, na, da, c.y, r, ny, H, TOL);
      fd_check("binary db", f_binary, &c, c.b, nb, db, c.y, r, ny, H, TOL);
    }
}
END_TEST

// a read through transposed strides: y (T,C) = a stored (C,T) + b (C)
START_TEST(test_binary_strided) {
  int64_t T = 5, C = 3, ydims[2] = {5, 3}, astr[2] = {1, 5}, bstr[2] = {0, 1};
  float *a = frand(C * T, -2, 2), *b = frand(C, -2, 2), *y = fzeros(T * C);
  pr_binary_fwd(y, a, b, 0, 2, ydims, astr, bstr);
  float *expect = fzeros(T * C);
  for (int64_t t = 0; t < T; t++)
    for (int64_t ch = 0; ch < C; ch++) expect[t * C + ch] = a[ch * T + t] + b[ch];
  assert_bitwise("binary strided", y, expect, T * C);
}
END_TEST

// a large bias add and its backward (parallel paths) against the simple formulas
START_TEST(test_binary_large) {
  int64_t B = 8, T = 64, C = 128, ydims[3] = {8, 64, 128}, xd[3] = {1, 1, 128};
  int64_t astr[3] = {T * C, C, 1}, bstr[3] = {0, 0, 1};
  float *a = frand(B * T * C, -2, 2), *b = frand(C, -2, 2), *y = fzeros(B * T * C);
  pr_binary_fwd(y, a, b, 2, 3, ydims, astr, bstr);
  float *expect = fzeros(B * T * C);
  for (int64_t i = 0; i < B * T * C; i++) expect[i] = a[i] * b[i % C];
  assert_bitwise("binary large", y, expect, B * T * C);
  float *db = fzeros(C), *edb = fzeros(C);
  pr_binary_bwd(db, y, a, 2, 1, 3, ydims, xd, astr, 0);
  for (int64_t ch = 0; ch < C; ch++)
    for (int64_t r = 0; r < B * T; r++) {
      float prod = y[r * C + ch] * a[r * C + ch];
      edb[ch] += prod;
    }
  assert_bitwise("binary large db", db, edb, C);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// elementwise unary ops

static double gelu_ref(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double gelu_exact_ref(double x) {
  return 0.5 * x * erfc(-x / sqrt(2.0)); // = 0.5 x (1 + erf(x/sqrt 2)), no cancellation
}

static void f_unary(void *p) {
  Ctx *c = p;
  int64_t n = c->n[0];
  switch (c->flag[0]) {
  case 0:
    pr_scale_fwd(c->y, c->x, n, 0.75f);
    break;
  case 1:
    pr_relu_fwd(c->y, c->x, n);
    break;
  case 2:
    pr_gelu_fwd(c->y, NULL, c->x, n, 0);
    break;
  case 3:
    pr_tanh_fwd(c->y, c->x, n);
    break;
  case 4:
    pr_sigmoid_fwd(c->y, c->x, n);
    break;
  case 5:
    pr_gelu_fwd(c->y, NULL, c->x, n, 1);
    break;
  default:
    pr_silu_fwd(c->y, c->x, n);
    break;
  }
}

static void unary_bwd(int kind, float *dx, const float *dy, const float *x, const float *y,
                      int64_t n, int acc) {
  switch (kind) {
  case 0:
    pr_scale_bwd(dx, dy, n, 0.75f, acc);
    break;
  case 1:
    pr_relu_bwd(dx, dy, y, n, acc);
    break;
  case 2:
    pr_gelu_bwd(dx, dy, x, NULL, n, 0, acc);
    break;
  case 3:
    pr_tanh_bwd(dx, dy, y, n, acc);
    break;
  case 4:
    pr_sigmoid_bwd(dx, dy, y, n, acc);
    break;
  case 5:
    pr_gelu_bwd(dx, dy, x, NULL, n, 1, acc);
    break;
  default:
    pr_silu_bwd(dx, dy, x, n, acc);
    break;
  }
}

START_TEST(test_unary) {
  int64_t n = 61;
  // scale, relu, gelu (tanh), tanh, sigmoid, gelu (exact), silu
  for (int kind = 0; kind < 7; kind++) {
    Ctx c = {0};
    c.n[0] = n, c.flag[0] = kind;
    c.x = frand(n, -4, 4), c.y = fzeros(n);
    for (int64_t i = 0; i < n; i++) // keep relu's kink out of the stencil's reach
      if (fabsf(c.x[i]) < 0.1f) c.x[i] = 0.5f;
    f_unary(&c);
    double *ref = talloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
      double x = c.x[i];
      ref[i] = kind == 0   ? 0.75 * x
               : kind == 1 ? (x > 0 ? x : 0)
               : kind == 2 ? gelu_ref(x)
               : kind == 3 ? tanh(x)
               : kind == 4 ? 1 / (1 + exp(-x))
               : kind == 5 ? gelu_exact_ref(x)
                           : x / (1 + exp(-x));
    }
    assert_close("unary", c.y, ref, n, 1e-6, 1e-6);
    float *r = frand(n, -1, 1), *dx = fzeros(n);
    unary_bwd(kind, dx, r, c.x, c.y, n, 0);
    fd_check("unary dx", f_unary, &c, c.x, n, dx, c.y, r, n, H, TOL);
  }
}
END_TEST

// gelu's saved factor: the forward writes c with y = x * c bit for bit (c = Phi(x), or the tanh
// form's s); the backward from the saved c gives the bits of the backward that recomputes it, with
// and without acc, threaded or not (n above the threading threshold), NaN and saturation included.
START_TEST(test_gelu_saved_cdf) {
  int64_t n = 70001;
  float *x = frand(n, -12, 12), *dy = frand(n, -1, 1);
  x[0] = NAN, x[1] = 1000.0f, x[2] = -1000.0f, x[3] = 0.0f, x[4] = -0.0f;
  float *y = fzeros(n), *y2 = fzeros(n), *c = fzeros(n), *a = fzeros(n), *b = fzeros(n);
  for (int exact = 0; exact < 2; exact++) {
    pr_gelu_fwd(y, c, x, n, exact);
    pr_gelu_fwd(y2, NULL, x, n, exact);
    ck_assert(memcmp(y, y2, (size_t)n * 4) == 0);
    for (int64_t i = 0; i < n; i++) {
      float xc = x[i] * c[i];
      ck_assert_msg(memcmp(&xc, &y[i], 4) == 0, "exact %d: y[%lld] != x * cdf", exact,
                    (long long)i);
      if (i >= 5) ck_assert(c[i] >= 0.0f && c[i] <= 1.0f);
    }
    // each element's bits do not depend on where it falls in the exact form's blocks of 256
    // (gelu_phi_block) nor on n: slices of every length around a block, at odd offsets
    const int64_t lens[] = {1, 7, 255, 256, 257, 1000}, offs[] = {0, 3, 129, 4097};
    for (int li = 0; li < 6; li++)
      for (int oi = 0; oi < 4; oi++) {
        int64_t m = lens[li], o = offs[oi];
        pr_gelu_fwd(a, b, x + o, m, exact);
        ck_assert_msg(memcmp(a, y + o, (size_t)m * 4) == 0 && memcmp(b, c + o, (size_t)m * 4) == 0,
                      "exact %d: a slice of %lld at %lld changes bits", exact, (long long)m,
                      (long long)o);
      }
    for (int acc = 0; acc < 2; acc++) {
      for (int64_t i = 0; i < n; i++) a[i] = b[i] = 0.25f * (float)(i % 7);
      pr_gelu_bwd(a, dy, x, c, n, exact, acc);
      pr_gelu_bwd(b, dy, x, NULL, n, exact, acc);
      ck_assert_msg(memcmp(a, b, (size_t)n * 4) == 0, "exact %d acc %d: saved cdf changes bits",
                    exact, acc);
    }
  }
}
END_TEST

// exp/tanh/sigmoid accuracy over their whole useful range (dense sweep, float vs double)
START_TEST(test_unary_accuracy) {
  int64_t n = 200001;
  float *x = fzeros(n), *y = fzeros(n);
  for (int64_t i = 0; i < n; i++) x[i] = (float)(-30.0 + 60.0 * (double)i / (double)(n - 1));
  x[n / 2] = 0.0f;
  pr_tanh_fwd(y, x, n);
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double ref = tanh((double)x[i]), e = fabs(y[i] - ref) / fmax(fabs(ref), 1e-30);
    worst = fmax(worst, x[i] == 0 ? fabs(y[i]) : e);
  }
  ck_assert_msg(worst <= 4 * 1.2e-7, "tanh: worst relative error %.3g", worst);
  for (int64_t i = 0; i < n; i++) x[i] = (float)(-87.0 + 107.0 * (double)i / (double)(n - 1));
  pr_sigmoid_fwd(y, x, n);
  worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double ref = 1.0 / (1.0 + exp(-(double)x[i]));
    worst = fmax(worst, fabs(y[i] - ref) / ref);
  }
  ck_assert_msg(worst <= 4 * 1.2e-7, "sigmoid: worst relative error %.3g", worst);
  // silu = x * sigmoid(x): the sigmoid's error and one rounding more; bitwise the decomposed form
  // (pr_sigmoid_fwd, then the product), as a graph's mul(x, sigmoid(x)) computes it
  for (int64_t i = 0; i < n; i++) x[i] = (float)(-80.0 + 160.0 * (double)i / (double)(n - 1));
  x[n / 2] = 0.0f;
  pr_silu_fwd(y, x, n);
  worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double ref = (double)x[i] / (1.0 + exp(-(double)x[i]));
    worst = fmax(worst, x[i] == 0 ? fabs(y[i]) : fabs(y[i] - ref) / fabs(ref));
  }
  ck_assert_msg(worst <= 5 * 1.2e-7, "silu: worst relative error %.3g", worst);
  float *sg = fzeros(n);
  pr_sigmoid_fwd(sg, x, n);
  for (int64_t i = 0; i < n; i++) sg[i] = x[i] * sg[i];
  assert_bitwise("silu vs x * sigmoid(x)", y, sg, n);
  for (int64_t i = 0; i < n; i++) x[i] = (float)(-10.0 + 20.0 * (double)i / (double)(n - 1));
  pr_gelu_fwd(y, NULL, x, n, 0);
  worst = 0;
  for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(y[i] - gelu_ref(x[i])));
  ck_assert_msg(worst <= 2e-6, "gelu: worst absolute error %.3g", worst);
  // The exact gelu against erfc in double: within a few float roundings of the fit's 1.2e-7 in
  // the middle; in the tail (x < -3, where y is tiny) relative to y too, there bounded by the
  // rounding of z^2 in e^{-z^2} (an error of one ulp in z^2 ~ 40 is 5e-6 of the exponential;
  // PyTorch's float 1 + erf(z) loses the whole tail there).
  pr_gelu_fwd(y, NULL, x, n, 1);
  worst = 0;
  double worst_tail = 0;
  for (int64_t i = 0; i < n; i++) {
    double ref = gelu_exact_ref(x[i]);
    worst = fmax(worst, fabs(y[i] - ref) / fmax(1.0, fabs(x[i])));
    if (x[i] < -3 && x[i] > -9) worst_tail = fmax(worst_tail, fabs(y[i] - ref) / fabs(ref));
  }
  ck_assert_msg(worst <= 2e-7, "gelu exact: worst absolute error / max(1, |x|) %.3g", worst);
  ck_assert_msg(worst_tail <= 2e-5, "gelu exact: worst relative error in the tail %.3g",
                worst_tail);
  // NaN propagates; large inputs saturate
  float sp[4] = {NAN, 1000.0f, -1000.0f, 0.0f}, so[4];
  pr_tanh_fwd(so, sp, 4);
  ck_assert(isnan(so[0]) && so[1] == 1.0f && so[2] == -1.0f && so[3] == 0.0f);
  pr_sigmoid_fwd(so, sp, 4);
  ck_assert(isnan(so[0]) && so[1] == 1.0f && so[2] == 0.0f && so[3] == 0.5f);
  pr_gelu_fwd(so, NULL, sp, 4, 0);
  ck_assert(isnan(so[0]) && so[1] == 1000.0f && so[2] == 0.0f && so[3] == 0.0f);
  pr_gelu_fwd(so, NULL, sp, 4, 1);
  ck_assert(isnan(so[0]) && so[1] == 1000.0f && so[2] == 0.0f && so[3] == 0.0f);
  pr_silu_fwd(so, sp, 4);
  ck_assert(isnan(so[0]) && so[1] == 1000.0f && so[2] == 0.0f && so[3] == 0.0f);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// neg, exp, rsqrt, pow by a constant (the unary ops of exported graphs)

static void set_threads(int n); // (below, with the thread tests)
enum { BIN_DIV_CODE = 3 };      // pr_binary_fwd's op for div (ir/ops.h BIN_DIV)

// kinds: neg (pr_scale_* with factor -1), exp, rsqrt, then pow by each of xpow_e: integer
// exponents by products, the others by powf
static const float xpow_e[] = {3.0f, -2.0f, 1.0f, 0.5f, -1.5f, 2.5f};
enum { XUN_KINDS = 3 + (int)(sizeof xpow_e / sizeof xpow_e[0]) };

static void f_xunary(void *p) {
  Ctx *c = p;
  int64_t n = c->n[0];
  int kind = c->flag[0];
  if (kind == 0)
    pr_scale_fwd(c->y, c->x, n, -1.0f);
  else if (kind == 1)
    pr_exp_fwd(c->y, c->x, n);
  else if (kind == 2)
    pr_rsqrt_fwd(c->y, c->x, n);
  else
    pr_pow_fwd(c->y, c->x, n, xpow_e[kind - 3]);
}

static void xunary_bwd(int kind, float *dx, const float *dy, const float *x, const float *y,
                       int64_t n, int acc) {
  if (kind == 0)
    pr_scale_bwd(dx, dy, n, -1.0f, acc);
  else if (kind == 1)
    pr_exp_bwd(dx, dy, y, n, acc);
  else if (kind == 2)
    pr_rsqrt_bwd(dx, dy, y, n, acc);
  else
    pr_pow_bwd(dx, dy, x, n, xpow_e[kind - 3], acc);
}

// Inputs inside each kind's domain: positive for rsqrt and powf's exponents, away from 0 for a
// negative power (|x| >= 0.25, beyond the finite differences' reach of the pole).
static float *xunary_input(int kind, int64_t n) {
  bool pos = kind == 2 || (kind >= 3 && xpow_e[kind - 3] != floorf(xpow_e[kind - 3]));
  float *x = pos ? frand(n, 0.25f, 4.0f) : frand(n, -4.0f, 4.0f);
  for (int64_t i = 0; i < n; i++)
    if (fabsf(x[i]) < 0.25f) x[i] = x[i] < 0 ? -0.5f : 0.5f;
  return x;
}

// Forward against double, backward against finite differences, acc = 1 adding exactly the
// acc = 0 result, and the bits at 1 and 2 threads (n above the threading threshold).
START_TEST(test_xunary) {
  for (int kind = 0; kind < XUN_KINDS; kind++) {
    int64_t n = 61;
    Ctx c = {0};
    c.n[0] = n, c.flag[0] = kind;
    c.x = xunary_input(kind, n), c.y = fzeros(n);
    f_xunary(&c);
    double *ref = talloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
      double x = c.x[i];
      ref[i] = kind == 0   ? -x
               : kind == 1 ? exp(x)
               : kind == 2 ? 1 / sqrt(x)
                           : pow(x, xpow_e[kind - 3]);
    }
    assert_close("xunary", c.y, ref, n, 0, 4e-7);
    float *r = frand(n, -1, 1), *dx = fzeros(n);
    xunary_bwd(kind, dx, r, c.x, c.y, n, 0);
    fd_check("xunary dx", f_xunary, &c, c.x, n, dx, c.y, r, n, H, TOL);
    // acc, and threads
    n = 70001;
    float *x = xunary_input(kind, n), *dy = frand(n, -1, 1), *y1 = fzeros(n), *y2 = fzeros(n);
    float *d1 = fzeros(n), *d2 = frand(n, -1, 1), *expect = fzeros(n);
    c.n[0] = n, c.x = x;
    for (int th = 1; th <= 2; th++) {
      set_threads(th);
      c.y = th == 1 ? y1 : y2;
      f_xunary(&c);
      if (th == 1) {
        xunary_bwd(kind, d1, dy, x, y1, n, 0);
        for (int64_t i = 0; i < n; i++) expect[i] = d2[i] + d1[i];
      } else {
        xunary_bwd(kind, d2, dy, x, y2, n, 1);
      }
    }
    assert_bitwise("xunary threads", y1, y2, n);
    assert_bitwise("xunary acc and threads", d2, expect, n);
  }
}
END_TEST

// silu_mul (SwiGLU's gate, fused by the compiler) against the unfused kernel sequence it
// replaces, bit for bit at 1 and 2 threads (n above the threading threshold, and a short odd n):
// y = pr_silu_fwd then pr_binary_fwd's mul; dg = pr_binary_bwd (ds = dy * u) then pr_silu_bwd,
// du = pr_binary_bwd (dy * s); with acc = 1 each gradient adds exactly the acc = 0 one.
START_TEST(test_silu_mul) {
  const int64_t sizes[] = {61, 70001};
  for (int si = 0; si < 2; si++) {
    int64_t n = sizes[si];
    float *g = frand(n, -8, 8), *u = frand(n, -2, 2), *dy = frand(n, -1, 1);
    g[0] = 0.0f, g[1] = -0.0f, g[2] = 90.0f, g[3] = -90.0f; // sigmoid's tails and its zero
    float *s = fzeros(n), *want_y = fzeros(n), *ds = fzeros(n), *want_dg = fzeros(n);
    float *want_du = fzeros(n);
    int64_t dims[1] = {n}, str[1] = {1};
    pr_silu_fwd(s, g, n);
    pr_binary_fwd(want_y, s, u, 2, 1, dims, str, str);
    pr_binary_bwd(ds, dy, u, 2, 0, 1, dims, dims, str, 0);
    pr_silu_bwd(want_dg, ds, g, n, 0);
    pr_binary_bwd(want_du, dy, s, 2, 1, 1, dims, dims, str, 0);
    for (int th = 1; th <= 2; th++) {
      set_threads(th);
      float *y = fzeros(n), *dg = fzeros(n), *du = fzeros(n);
      pr_silu_mul_fwd(y, g, u, n);
      pr_silu_mul_bwd(dg, du, dy, g, u, n, 0);
      assert_bitwise("silu_mul y", y, want_y, n);
      assert_bitwise("silu_mul dg", dg, want_dg, n);
      assert_bitwise("silu_mul du", du, want_du, n);
      float *ag = frand(n, -1, 1), *au = frand(n, -1, 1), *eg = fzeros(n), *eu = fzeros(n);
      for (int64_t i = 0; i < n; i++) eg[i] = ag[i] + want_dg[i], eu[i] = au[i] + want_du[i];
      pr_silu_mul_bwd(ag, au, dy, g, u, n, 1);
      assert_bitwise("silu_mul dg acc", ag, eg, n);
      assert_bitwise("silu_mul du acc", au, eu, n);
    }
  }
}
END_TEST

// The exact cases: neg is -x; integer powers are the products in their fixed order (x^2 is
// x * x, torch's), x^0 is 1 and its gradient 0 whatever x is, x^1's gradient dy; and each op's
// values at the edges of its domain.
START_TEST(test_xunary_exact) {
  int64_t n = 4096;
  float *x = frand(n, -8, 8), *y = fzeros(n), *e = fzeros(n), *dy = frand(n, -1, 1);
  x[0] = 0.0f, x[1] = -0.0f, x[2] = INFINITY, x[3] = -INFINITY, x[4] = NAN;
  pr_scale_fwd(y, x, n, -1.0f);
  for (int64_t i = 0; i < n; i++) e[i] = -x[i];
  assert_bitwise("neg", y + 0, e + 0, 4); // the NaN's sign is the platform's
  assert_bitwise("neg", y + 5, e + 5, n - 5);
  pr_pow_fwd(y, x, n, 2.0f);
  for (int64_t i = 0; i < n; i++) e[i] = x[i] * x[i];
  assert_bitwise("pow 2", y, e, n);
  pr_pow_fwd(y, x, n, 3.0f);
  for (int64_t i = 0; i < n; i++) e[i] = x[i] * (x[i] * x[i]);
  assert_bitwise("pow 3", y, e, n);
  pr_pow_fwd(y, x, n, -1.0f);
  for (int64_t i = 0; i < n; i++) e[i] = 1.0f / x[i];
  assert_bitwise("pow -1", y, e, n);
  pr_pow_fwd(y, x, n, 1.0f);
  assert_bitwise("pow 1", y, x, n);
  pr_pow_bwd(y, dy, x, n, 1.0f, 0);
  assert_bitwise("pow 1 dx", y, dy, n);
  pr_pow_fwd(y, x, n, 0.0f);
  for (int64_t i = 0; i < n; i++) e[i] = 1.0f;
  assert_bitwise("pow 0", y, e, n);
  pr_pow_bwd(y, dy, x, n, 0.0f, 0);
  for (int64_t i = 0; i < n; i++) e[i] = 0.0f;
  assert_bitwise("pow 0 dx", y, e, n);
  pr_pow_fwd(y, x, n, 64.0f); // the last integer by products; 65 and 2.5 by powf
  ck_assert(pr_pow_int(64.0f) == 64 && pr_pow_int(-64.0f) == -64 && pr_pow_int(65.0f) == INT32_MIN);
  ck_assert(pr_pow_int(2.5f) == INT32_MIN && pr_pow_int(NAN) == INT32_MIN);
  // domain edges (torch's values): a negative base to a non-integer power is NaN, 0 to a
  // negative power infinite
  float px[] = {-2.0f, 0.0f, -0.0f, 4.0f}, py[4], pd[4], one[4] = {1, 1, 1, 1};
  pr_pow_fwd(py, px, 4, 0.5f);
  ck_assert(isnan(py[0]) && py[1] == 0.0f && py[3] == 2.0f);
  pr_pow_fwd(py, px, 4, -1.0f);
  ck_assert(py[0] == -0.5f && py[1] == INFINITY && py[2] == -INFINITY && py[3] == 0.25f);
  pr_pow_bwd(pd, one, px, 4, 0.5f, 0); // 0.5 x^-0.5
  ck_assert(isnan(pd[0]) && pd[1] == INFINITY && pd[3] == 0.25f);
  // rsqrt: inf at 0, -inf at -0, NaN below 0, 0 at inf
  float rx[] = {0.0f, -0.0f, -1.0f, 4.0f, INFINITY, NAN}, ry[6];
  pr_rsqrt_fwd(ry, rx, 6);
  ck_assert(ry[0] == INFINITY && ry[1] == -INFINITY && isnan(ry[2]) && ry[3] == 0.5f);
  ck_assert(ry[4] == 0.0f && isnan(ry[5]));
  // exp: 1 at 0, inf past 88.72 (and at inf), 0 at -inf and below -87.3, NaN for NaN, and within
  // 3 ulp of e^x up to the overflow
  float ex[] = {0.0f, 88.7f, 88.8f, INFINITY, -INFINITY, -100.0f, NAN, 88.25f}, ey[8];
  pr_exp_fwd(ey, ex, 8);
  ck_assert(ey[0] == 1.0f && ey[2] == INFINITY && ey[3] == INFINITY && ey[4] == 0.0f);
  ck_assert(ey[5] == 0.0f && isnan(ey[6]));
  ck_assert(fabs(ey[1] / exp((double)ex[1]) - 1) < 3 * 1.2e-7);
  ck_assert(fabs(ey[7] / exp((double)ex[7]) - 1) < 3 * 1.2e-7);
  float *wx = frand(n, -87.0f, 88.7f), *wy = fzeros(n);
  pr_exp_fwd(wy, wx, n);
  double worst = 0;
  for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(wy[i] / exp((double)wx[i]) - 1));
  ck_assert_msg(worst <= 3 * 1.2e-7, "exp: worst relative error %.3g", worst);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// div: pr_binary_fwd with op 3, pr_div_bwd

static float *away_from_zero(int64_t n) { // |v| in [0.5, 2], either sign
  float *v = frand(n, 0.5f, 2.0f);
  for (int64_t i = 0; i < n; i++)
    if (urand() < 0.5) v[i] = -v[i];
  return v;
}

// The gradient of operand which as the kernel's contract states it: y visited in ascending
// row-major order, each element's contribution added to its operand element.
static void div_bwd_ref(float *dx, const Ctx *c, const float *dy, int which, const int64_t *xdims,
                        int rank) {
  int64_t ny = numel(rank, c->ydims), xstr[8];
  bstrides(rank, xdims, xstr);
  memset(dx, 0, (size_t)numel(rank, xdims) * sizeof(float));
  for (int64_t i = 0; i < ny; i++) {
    int64_t rem = i, ao = 0, bo = 0, xo = 0;
    for (int d = rank - 1; d >= 0; d--) {
      int64_t q = rem % c->ydims[d];
      rem /= c->ydims[d];
      ao += q * c->astr[d], bo += q * c->bstr[d], xo += q * xstr[d];
    }
    float bv = c->b[bo];
    dx[xo] += which == 0 ? dy[i] / bv : (-dy[i] * c->a[ao]) / (bv * bv);
  }
}

// Every broadcast case of add/sub/mul: the forward is a / b, the gradients match the reference
// order bit for bit and finite differences, and acc = 1 adds exactly the acc = 0 result.
START_TEST(test_div) {
  for (size_t ci = 0; ci < sizeof bin_cases / sizeof bin_cases[0]; ci++) {
    const BinCase *bc = &bin_cases[ci];
    Ctx c = {0};
    int rank = bc->rank;
    c.flag[0] = BIN_DIV_CODE, c.flag[1] = rank;
    for (int i = 0; i < rank; i++) c.ydims[i] = bc->ad[i] > bc->bd[i] ? bc->ad[i] : bc->bd[i];
    bstrides(rank, bc->ad, c.astr);
    bstrides(rank, bc->bd, c.bstr);
    int64_t ny = numel(rank, c.ydims), na = numel(rank, bc->ad), nb = numel(rank, bc->bd);
    c.a = frand(na, -2, 2), c.b = away_from_zero(nb), c.y = fzeros(ny);
    f_binary(&c);
    float *expect = fzeros(ny);
    for (int64_t i = 0; i < ny; i++) {
      int64_t rem = i, ao = 0, bo = 0;
      for (int d = rank - 1; d >= 0; d--) {
        int64_t q = rem % c.ydims[d];
        rem /= c.ydims[d];
        ao += q * c.astr[d], bo += q * c.bstr[d];
      }
      expect[i] = c.a[ao] / c.b[bo];
    }
    assert_bitwise("div", c.y, expect, ny);
    float *r = frand(ny, -1, 1), *da = fzeros(na), *db = fzeros(nb);
    pr_div_bwd(da, r, c.a, c.b, 0, rank, c.ydims, bc->ad, c.astr, c.bstr, 0);
    pr_div_bwd(db, r, c.a, c.b, 1, rank, c.ydims, bc->bd, c.astr, c.bstr, 0);
    float *ea = fzeros(na), *eb = fzeros(nb);
    div_bwd_ref(ea, &c, r, 0, bc->ad, rank);
    div_bwd_ref(eb, &c, r, 1, bc->bd, rank);
    assert_bitwise("div da order", da, ea, na);
    assert_bitwise("div db order", db, eb, nb);
    fd_check("div da", f_binary, &c, c.a, na, da, c.y, r, ny, H, TOL);
    fd_check("div db", f_binary, &c, c.b, nb, db, c.y, r, ny, H, TOL);
    for (int which = 0; which < 2; which++) {
      int64_t nx = which ? nb : na;
      float *out = frand(nx, -3, 3), *sum = fzeros(nx);
      for (int64_t i = 0; i < nx; i++) sum[i] = out[i] + (which ? db[i] : da[i]);
      pr_div_bwd(out, r, c.a, c.b, which, rank, c.ydims, which ? bc->bd : bc->ad, c.astr, c.bstr,
                 1);
      assert_bitwise("div acc", out, sum, nx);
    }
  }
  // division by zero is IEEE's, as torch: inf with the signs' product, NaN for 0 / 0
  float a[4] = {1.0f, -1.0f, 0.0f, 1.0f}, b[4] = {0.0f, 0.0f, 0.0f, -0.0f}, y[4];
  int64_t yd[1] = {4}, st[1] = {1};
  pr_binary_fwd(y, a, b, BIN_DIV_CODE, 1, yd, st, st);
  ck_assert(y[0] == INFINITY && y[1] == -INFINITY && isnan(y[2]) && y[3] == -INFINITY);
}
END_TEST

// The bits at 1 and 2 threads above the threading threshold: a (R,C) / b (C) (b's gradient
// reduced over rows, threads owning column blocks), a (R,C) / b (R,1) (one value per row).
START_TEST(test_div_threads) {
  int64_t R = 64, C = 1100, ny = R * C, yd[2] = {R, C}, as[2] = {C, 1};
  const int64_t bds[2][2] = {{1, C}, {R, 1}};
  float *a = frand(ny, -2, 2), *b = away_from_zero(ny), *dy = frand(ny, -1, 1);
  for (int k = 0; k < 2; k++) {
    int64_t bs[2], nb = bds[k][0] * bds[k][1];
    bstrides(2, bds[k], bs);
    float *out[2][3];
    for (int th = 1; th <= 2; th++) {
      float **o = out[th - 1];
      o[0] = fzeros(ny), o[1] = fzeros(ny), o[2] = fzeros(nb);
      set_threads(th);
      pr_binary_fwd(o[0], a, b, BIN_DIV_CODE, 2, yd, as, bs);
      pr_div_bwd(o[1], dy, a, b, 0, 2, yd, yd, as, bs, 0);
      pr_div_bwd(o[2], dy, a, b, 1, 2, yd, bds[k], as, bs, 0);
    }
    assert_bitwise("div threads y", out[0][0], out[1][0], ny);
    assert_bitwise("div threads da", out[0][1], out[1][1], ny);
    assert_bitwise("div threads db", out[0][2], out[1][2], nb);
  }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// mean over the middle dim of (outer, dim, inner)

static void f_mean(void *p) {
  Ctx *c = p;
  pr_mean_fwd(c->y, c->x, c->n[0], c->n[1], c->n[2]);
}

// Against the sequential sum (bits), finite differences, acc; rows (inner 1), strided, an inner
// dim wider than a block; and 1 vs 2 threads above the threshold.
START_TEST(test_mean) {
  const int64_t shapes[][3] = {{7, 13, 1}, {3, 5, 4}, {2, 6, 70}, {1, 9, 1}, {4, 1, 3}};
  for (int si = 0; si < 5; si++) {
    int64_t outer = shapes[si][0], dim = shapes[si][1], inner = shapes[si][2];
    int64_t nx = outer * dim * inner, ny = outer * inner;
    Ctx c = {0};
    c.n[0] = outer, c.n[1] = dim, c.n[2] = inner;
    // full mantissas, so that another summation order would round differently
    c.x = frand(nx, -2, 2), c.y = fzeros(ny);
    for (int64_t i = 0; i < nx; i++) c.x[i] *= (float)(1.0 + urand());
    f_mean(&c);
    float *e = fzeros(ny);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < inner; j++) {
        float s = 0.0f;
        for (int64_t k = 0; k < dim; k++) s += c.x[(o * dim + k) * inner + j];
        e[o * inner + j] = s / (float)dim;
      }
    assert_bitwise("mean", c.y, e, ny);
    for (int64_t i = 0; i < nx; i++) c.x[i] = qrand(-2, 2); // exact x +- 2h for the differences
    float *r = frand(ny, -1, 1), *dx = fzeros(nx), *out = frand(nx, -3, 3), *sum = fzeros(nx);
    pr_mean_bwd(dx, r, outer, dim, inner, 0);
    for (int64_t i = 0; i < nx; i++)
      ck_assert(dx[i] == r[(i / (dim * inner)) * inner + i % inner] / (float)dim);
    fd_check("mean dx", f_mean, &c, c.x, nx, dx, c.y, r, ny, H, TOL);
    for (int64_t i = 0; i < nx; i++) sum[i] = out[i] + dx[i];
    pr_mean_bwd(out, r, outer, dim, inner, 1);
    assert_bitwise("mean acc", out, sum, nx);
  }
  const int64_t big[][3] = {{600, 100, 1}, {3, 100, 300}, {1, 70000, 1}};
  for (int bi = 0; bi < 3; bi++) {
    int64_t outer = big[bi][0], dim = big[bi][1], inner = big[bi][2];
    int64_t nx = outer * dim * inner, ny = outer * inner;
    float *x = frand(nx, -2, 2), *dy = frand(ny, -1, 1), *o[2][2];
    for (int th = 1; th <= 2; th++) {
      set_threads(th);
      o[th - 1][0] = fzeros(ny), o[th - 1][1] = fzeros(nx);
      pr_mean_fwd(o[th - 1][0], x, outer, dim, inner);
      pr_mean_bwd(o[th - 1][1], dy, outer, dim, inner, 0);
    }
    assert_bitwise("mean threads", o[0][0], o[1][0], ny);
    assert_bitwise("mean threads dx", o[0][1], o[1][1], nx);
  }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// slice's backward pr_pad: dy at [offset, offset + size) of the axis, zeros elsewhere; acc adds dy
// there and leaves the rest; the adjoint of pr_slice (<pr_slice(x), r> = <x, pr_pad(r)>).
START_TEST(test_pad) {
  const int64_t cases[][5] = {{3, 4, 7, 2, 3}, {5, 1, 8, 0, 8}, {2, 3, 6, 5, 1}, {1, 2, 4, 0, 1}};
  for (int ci = 0; ci < 4; ci++) {
    int64_t outer = cases[ci][0], inner = cases[ci][1], total = cases[ci][2];
    int64_t off = cases[ci][3], size = cases[ci][4];
    int64_t nx = outer * total * inner, ny = outer * size * inner;
    float *dy = frand(ny, -1, 1), *dx = frand(nx, -1, 1), *e = fzeros(nx);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t k = 0; k < size; k++)
        for (int64_t j = 0; j < inner; j++)
          e[(o * total + off + k) * inner + j] = dy[(o * size + k) * inner + j];
    pr_pad(dx, dy, outer, inner, total, off, size, 0);
    assert_bitwise("pad", dx, e, nx);
    float *out = frand(nx, -3, 3), *sum = fzeros(nx);
    for (int64_t i = 0; i < nx; i++) sum[i] = out[i] + e[i];
    pr_pad(out, dy, outer, inner, total, off, size, 1);
    assert_bitwise("pad acc", out, sum, nx);
    float *x = frand(nx, -2, 2), *y = fzeros(ny);
    pr_slice(y, x, outer, inner, total, off, size, 0);
    double l = 0, r = 0;
    for (int64_t i = 0; i < ny; i++) l += (double)y[i] * dy[i];
    for (int64_t i = 0; i < nx; i++) r += (double)x[i] * dx[i];
    ck_assert(l == r); // the same products, each exact in double, summed in the same order
  }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// softmax

static void f_softmax(void *p) {
  Ctx *c = p;
  pr_softmax_fwd(c->y, c->x, c->n[0], c->n[1], c->n[2]);
}

START_TEST(test_softmax) {
  const int64_t shapes[][3] = {{3, 7, 1}, {2, 5, 3}, {2, 4, 70}, {1, 19, 1}};
  for (size_t si = 0; si < 4; si++) {
    int64_t O = shapes[si][0], D = shapes[si][1], In = shapes[si][2], n = O * D * In;
    Ctx c = {0};
    c.n[0] = O, c.n[1] = D, c.n[2] = In;
    c.x = frand(n, -3, 3), c.y = fzeros(n);
    f_softmax(&c);
    double *ref = talloc((size_t)n * sizeof(double));
    for (int64_t o = 0; o < O; o++)
      for (int64_t i = 0; i < In; i++) {
        double m = -INFINITY, s = 0;
        for (int64_t d = 0; d < D; d++) m = fmax(m, c.x[(o * D + d) * In + i]);
        for (int64_t d = 0; d < D; d++) s += exp(c.x[(o * D + d) * In + i] - m);
        for (int64_t d = 0; d < D; d++)
          ref[(o * D + d) * In + i] = exp(c.x[(o * D + d) * In + i] - m) / s;
      }
    assert_close("softmax", c.y, ref, n, 1e-7, 1e-6);
    float *r = frand(n, -1, 1), *dx = fzeros(n);
    pr_softmax_bwd(dx, r, c.y, O, D, In, 0);
    fd_check("softmax dx", f_softmax, &c, c.x, n, dx, c.y, r, n, H, TOL);
  }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// layernorm

static void f_layernorm(void *p) {
  Ctx *c = p;
  pr_layernorm_fwd(c->y, c->mean, c->rstd, c->x, c->w, c->bias, c->n[0], c->n[1], 1e-5f);
}

START_TEST(test_layernorm) {
  const int64_t shapes[][2] = {{5, 19}, {4, 40}};
  for (size_t si = 0; si < 2; si++)
    for (int with_b = 0; with_b < 2; with_b++) {
      int64_t rows = shapes[si][0], C = shapes[si][1];
      Ctx c = {0};
      c.n[0] = rows, c.n[1] = C;
      c.x = frand(rows * C, -2, 2), c.w = frand(C, 0.5f, 1.5f);
      c.bias = with_b ? frand(C, -1, 1) : NULL;
      for (int64_t i = 0; i < C; i++) c.x[i] += 10.0f; // a row with a large mean
      c.y = fzeros(rows * C), c.mean = fzeros(rows), c.rstd = fzeros(rows);
      f_layernorm(&c);
      double *ref = talloc((size_t)(rows * C) * sizeof(double));
      int ok = 1;
      for (int64_t r = 0; r < rows; r++) {
        double m = 0, v = 0;
        for (int64_t i = 0; i < C; i++) m += c.x[r * C + i];
        m /= (double)C;
        for (int64_t i = 0; i < C; i++) v += (c.x[r * C + i] - m) * (c.x[r * C + i] - m);
        v /= (double)C;
        double s = 1.0 / sqrt(v + 1e-5);
        ok &= fabs(c.mean[r] - m) <= 1e-6 * (1 + fabs(m)) && fabs(c.rstd[r] - s) <= 1e-6 * s;
        for (int64_t i = 0; i < C; i++)
          ref[r * C + i] = (c.x[r * C + i] - m) * s * c.w[i] + (c.bias ? c.bias[i] : 0.0);
      }
      ck_assert_msg(ok, "layernorm mean/rstd");
      assert_close("layernorm", c.y, ref, rows * C, 2e-6, 2e-6);
      float *r = frand(rows * C, -1, 1), *dx = fzeros(rows * C), *dw = fzeros(C);
      pr_layernorm_bwd_x(dx, r, c.x, c.w, c.mean, c.rstd, rows, C, 0);
      pr_layernorm_bwd_w(dw, r, c.x, c.mean, c.rstd, rows, C, 0);
      fd_check("layernorm dx", f_layernorm, &c, c.x, rows * C, dx, c.y, r, rows * C, H, TOL);
      fd_check("layernorm dw", f_layernorm, &c, c.w, C, dw, c.y, r, rows * C, H, TOL);
      if (with_b) {
        float *db = fzeros(C);
        pr_sum_rows(db, r, rows, C, 0);
        fd_check("layernorm db", f_layernorm, &c, c.bias, C, db, c.y, r, rows * C, H, TOL);
      }
    }
}
END_TEST

// The residual add fused into the layernorm (pipec's default codegen): pr_add_layernorm_fwd
// gives the bits of pr_binary_fwd's add then pr_layernorm_fwd (the sum, y, mean, rstd), at 1 and
// 2 threads, with and without the bias, rows a multiple of the groups of four and not, y written
// over b (in place), and a broadcast b (the fallback to the two calls).
START_TEST(test_add_layernorm) {
  static const int64_t shapes[][3] = {{12, 64, 128}, {3, 10, 37}, {1, 5, 19}}; // B, T, C
  for (int th = 1; th <= 2; th++)
    for (int sh = 0; sh < 3; sh++)
      for (int v = 0; v < 3; v++) { // 0: plain, 1: with the bias, 2: b broadcast over B
        pr_set_threads(th);
        int64_t B = shapes[sh][0], T = shapes[sh][1], C = shapes[sh][2], rows = B * T;
        int64_t n = rows * C, ydims[3] = {B, T, C}, astr[3] = {T * C, C, 1};
        int64_t bstr[3] = {v == 2 ? 0 : T * C, C, 1};
        float *a = frand(n, -2, 2), *b = frand(n, -2, 2), *w = frand(C, 0.5f, 1.5f);
        float *bias = v == 1 ? frand(C, -1, 1) : NULL;
        float *s1 = fzeros(n), *y1 = fzeros(n), *m1 = fzeros(rows), *r1 = fzeros(rows);
        float *s2 = fzeros(n), *y2 = fzeros(n), *m2 = fzeros(rows), *r2 = fzeros(rows);
        pr_binary_fwd(s1, a, b, 0, 3, ydims, astr, bstr);
        pr_layernorm_fwd(y1, m1, r1, s1, w, bias, rows, C, 1e-5f);
        pr_add_layernorm_fwd(s2, y2, m2, r2, a, b, w, bias, 0, 3, ydims, astr, bstr, rows, C,
                             1e-5f);
        const char *what[4] = {"sum", "y", "mean", "rstd"};
        const float *got[4] = {s2, y2, m2, r2}, *want[4] = {s1, y1, m1, r1};
        int64_t len[4] = {n, n, rows, rows};
        for (int k = 0; k < 4; k++)
          ck_assert_msg(memcmp(got[k], want[k], (size_t)len[k] * sizeof(float)) == 0,
                        "add_layernorm %s differs (threads %d, C %lld, case %d)", what[k], th,
                        (long long)C, v);
        if (v == 2) continue;
        // in place (FuseDef.in_place): y written where b lies, as the memory plan may put it
        memcpy(y2, b, (size_t)n * sizeof(float));
        pr_add_layernorm_fwd(s2, y2, m2, r2, a, y2, w, bias, 0, 3, ydims, astr, bstr, rows, C,
                             1e-5f);
        ck_assert_msg(memcmp(y2, y1, (size_t)n * sizeof(float)) == 0 &&
                          memcmp(s2, s1, (size_t)n * sizeof(float)) == 0,
                      "add_layernorm in place differs (threads %d, C %lld)", th, (long long)C);
      }
  pr_set_threads(default_threads);
}
END_TEST

// layernorm computes rows in groups of four (sum4_f, sumsq4_centered_f, dot4_f: vectors of 8
// lanes with AVX2) and the rows after the last group one by one (sum_f, ...): the same bits. Five
// equal rows, C with and without a tail of the 8 lanes: rows 0-3 (a group) give row 4's bits.
START_TEST(test_layernorm_groups) {
  const int64_t Cs[] = {19, 128, 131};
  for (int ci = 0; ci < 3; ci++) {
    int64_t rows = 5, C = Cs[ci];
    float *x = frand(rows * C, -2, 2), *dy = frand(rows * C, -1, 1), *w = frand(C, 0.5f, 1.5f);
    for (int64_t r = 0; r < 4; r++) {
      memcpy(x + r * C, x + 4 * C, (size_t)C * 4);
      memcpy(dy + r * C, dy + 4 * C, (size_t)C * 4);
    }
    float *y = fzeros(rows * C), *mean = fzeros(rows), *rstd = fzeros(rows);
    float *dx = fzeros(rows * C);
    pr_layernorm_fwd(y, mean, rstd, x, w, NULL, rows, C, 1e-5f);
    pr_layernorm_bwd_x(dx, dy, x, w, mean, rstd, rows, C, 0);
    for (int64_t r = 0; r < 4; r++) {
      assert_bitwise("layernorm group y", y + r * C, y + 4 * C, C);
      assert_bitwise("layernorm group mean", mean + r, mean + 4, 1);
      assert_bitwise("layernorm group rstd", rstd + r, rstd + 4, 1);
      assert_bitwise("layernorm group dx", dx + r * C, dx + 4 * C, C);
    }
  }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// rms_norm

static void f_rms_norm(void *p) {
  Ctx *c = p;
  pr_rms_norm_fwd(c->y, c->rstd, c->x, c->w, c->n[0], c->n[1], 1e-6f);
}

// y and rstd against double, dx and dw against finite differences; rows of four (the groups) and
// not, C with and without a tail of the 8 lanes, a row far from 0.
START_TEST(test_rms_norm) {
  const int64_t shapes[][2] = {{5, 19}, {4, 40}, {2, 8}};
  for (size_t si = 0; si < 3; si++) {
    int64_t rows = shapes[si][0], C = shapes[si][1];
    Ctx c = {0};
    c.n[0] = rows, c.n[1] = C;
    c.x = frand(rows * C, -2, 2), c.w = frand(C, 0.5f, 1.5f);
    for (int64_t i = 0; i < C; i++) c.x[i] += 10.0f; // a row far from 0
    c.y = fzeros(rows * C), c.rstd = fzeros(rows);
    f_rms_norm(&c);
    double *ref = talloc((size_t)(rows * C) * sizeof(double));
    int ok = 1;
    for (int64_t r = 0; r < rows; r++) {
      double ms = 0;
      for (int64_t i = 0; i < C; i++) ms += (double)c.x[r * C + i] * c.x[r * C + i];
      double s = 1.0 / sqrt(ms / (double)C + 1e-6);
      ok &= fabs(c.rstd[r] - s) <= 1e-6 * s;
      for (int64_t i = 0; i < C; i++) ref[r * C + i] = c.x[r * C + i] * s * c.w[i];
    }
    ck_assert_msg(ok, "rms_norm rstd (C %lld)", (long long)C);
    assert_close("rms_norm", c.y, ref, rows * C, 2e-6, 2e-6);
    float *r = frand(rows * C, -1, 1), *dx = fzeros(rows * C), *dw = fzeros(C);
    pr_rms_norm_bwd_x(dx, r, c.x, c.w, c.rstd, rows, C, 0);
    pr_rms_norm_bwd_w(dw, r, c.x, c.rstd, rows, C, 0);
    fd_check("rms_norm dx", f_rms_norm, &c, c.x, rows * C, dx, c.y, r, rows * C, H, TOL);
    fd_check("rms_norm dw", f_rms_norm, &c, c.w, C, dw, c.y, r, rows * C, H, TOL);
  }
}
END_TEST

// rms_norm computes rows in groups of four (dot4_f) and the rows after the last group one by one
// (dot_f): the same bits, as test_layernorm_groups checks for layernorm.
START_TEST(test_rms_norm_groups) {
  const int64_t Cs[] = {19, 128, 131};
  for (int ci = 0; ci < 3; ci++) {
    int64_t rows = 5, C = Cs[ci];
    float *x = frand(rows * C, -2, 2), *dy = frand(rows * C, -1, 1), *w = frand(C, 0.5f, 1.5f);
    for (int64_t r = 0; r < 4; r++) {
      memcpy(x + r * C, x + 4 * C, (size_t)C * 4);
      memcpy(dy + r * C, dy + 4 * C, (size_t)C * 4);
    }
    float *y = fzeros(rows * C), *rstd = fzeros(rows), *dx = fzeros(rows * C);
    pr_rms_norm_fwd(y, rstd, x, w, rows, C, 1e-6f);
    pr_rms_norm_bwd_x(dx, dy, x, w, rstd, rows, C, 0);
    for (int64_t r = 0; r < 4; r++) {
      assert_bitwise("rms_norm group y", y + r * C, y + 4 * C, C);
      assert_bitwise("rms_norm group rstd", rstd + r, rstd + 4, 1);
      assert_bitwise("rms_norm group dx", dx + r * C, dx + 4 * C, C);
    }
  }
}
END_TEST

// rms_norm's weight gradient sums over rows exactly as layernorm's: with the mean 0 (x - 0 = x) the
// two give the same bits, at 1 and 2 threads, several column blocks, acc = 0 and 1.
START_TEST(test_rms_norm_dw_order) {
  int64_t rows = 300, C = 150; // rows * C above the threading threshold, three column blocks
  float *x = frand(rows * C, -2, 2), *dy = frand(rows * C, -1, 1), *rstd = frand(rows, 0.5f, 2);
  float *zero = fzeros(rows), *a = fzeros(C), *b = fzeros(C);
  for (int th = 1; th <= 2; th++)
    for (int acc = 0; acc < 2; acc++) {
      pr_set_threads(th);
      for (int64_t i = 0; i < C; i++) a[i] = b[i] = 0.25f * (float)(i % 5);
      pr_rms_norm_bwd_w(a, dy, x, rstd, rows, C, acc);
      pr_layernorm_bwd_w(b, dy, x, zero, rstd, rows, C, acc);
      assert_bitwise("rms_norm dw vs layernorm dw", a, b, C);
    }
  pr_set_threads(default_threads);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// embedding

static void f_embedding(void *p) {
  Ctx *c = p;
  pr_embedding_fwd(c->y, c->idx, c->w, c->n[0], c->n[1], c->n[2]);
}

START_TEST(test_embedding) {
  int64_t n = 10, V = 7, C = 5;
  int32_t ids[10] = {3, 0, 3, 6, 1, 3, 0, 2, 6, 3}; // row 4 and 5 unused, 3 repeated
  Ctx c = {0};
  c.n[0] = n, c.n[1] = V, c.n[2] = C, c.idx = ids;
  c.w = frand(V * C, -1, 1), c.y = fzeros(n * C);
  f_embedding(&c);
  for (int64_t i = 0; i < n; i++) assert_bitwise("embedding", c.y + i * C, c.w + ids[i] * C, C);
  float *r = frand(n * C, -1, 1), *dw = frand(V * C, 5, 6); // stale values must be overwritten
  pr_embedding_bwd_w(dw, r, ids, n, V, C, 0);
  float *zero = fzeros(2 * C);
  assert_bitwise("embedding unused rows", dw + 4 * C, zero, 2 * C);
  fd_check("embedding dw", f_embedding, &c, c.w, V * C, dw, c.y, r, n * C, H, TOL);
  // rows accumulate in ascending i: row 3 = ((r0 + r2) + r5) + r9
  float *row3 = fzeros(C);
  for (int64_t j = 0; j < C; j++) {
    row3[j] = r[0 * C + j];
    row3[j] += r[2 * C + j], row3[j] += r[5 * C + j], row3[j] += r[9 * C + j];
  }
  assert_bitwise("embedding row order", dw + 3 * C, row3, C);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// data movement

static void permute_ref(uint32_t *y, const uint32_t *x, int rank, const int64_t *xd,
                        const int64_t *perm) {
  int64_t xs[8], yd[8], n = 1;
  for (int i = rank - 1; i >= 0; i--) xs[i] = n, n *= xd[i];
  for (int i = 0; i < rank; i++) yd[i] = xd[perm[i]];
  for (int64_t i = 0; i < n; i++) {
    int64_t rem = i, off = 0;
    for (int d = rank - 1; d >= 0; d--) {
      off += (rem % yd[d]) * xs[perm[d]];
      rem /= yd[d];
    }
    y[i] = x[off];
  }
}

static void check_permute(int rank, const int64_t *xd, const int64_t *perm) {
  int64_t n = 1, yd[8], inv[8];
  for (int i = 0; i < rank; i++) n *= xd[i], yd[i] = xd[perm[i]], inv[perm[i]] = i;
  uint32_t *x = talloc((size_t)n * 4), *y = talloc((size_t)n * 4), *ref = talloc((size_t)n * 4),
           *back = talloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) x[i] = (uint32_t)(i * 2654435761u);
  pr_permute(y, x, rank, xd, perm);
  permute_ref(ref, x, rank, xd, perm);
  ck_assert_msg(memcmp(y, ref, (size_t)n * 4) == 0, "permute rank %d differs", rank);
  pr_permute(back, y, rank, yd, inv);
  ck_assert_msg(memcmp(back, x, (size_t)n * 4) == 0, "permute rank %d: no round trip", rank);
}

START_TEST(test_permute) {
  // fixed shapes for the fast paths
  int64_t d2[2] = {70, 45}, p2[2] = {1, 0};
  check_permute(2, d2, p2);
  int64_t d3[3] = {3, 33, 40}, p3[3] = {0, 2, 1};
  check_permute(3, d3, p3);
  int64_t d4[4] = {2, 8, 4, 6}, p4[4] = {0, 2, 1, 3}; // (B,T,NH,hs) -> (B,NH,T,hs)
  check_permute(4, d4, p4);
  int64_t p4b[4] = {0, 1, 2, 3};
  check_permute(4, d4, p4b);
  // random ranks, dims and permutations
  for (int it = 0; it < 200; it++) {
    int rank = 1 + (int)(urand() * 6);
    int64_t xd[8], perm[8];
    for (int i = 0; i < rank; i++) xd[i] = 1 + (int64_t)(urand() * 4), perm[i] = i;
    for (int i = rank - 1; i > 0; i--) {
      int j = (int)(urand() * (i + 1));
      int64_t t = perm[i];
      perm[i] = perm[j], perm[j] = t;
    }
    check_permute(rank, xd, perm);
  }
  int64_t d8[8] = {2, 1, 3, 2, 1, 2, 2, 3}, p8[8] = {7, 0, 5, 2, 1, 6, 3, 4};
  check_permute(8, d8, p8);
}
END_TEST

static void f_concat(void *p) {
  Ctx *c = p;
  pr_concat(c->y, c->xs, c->n[0], c->n[1], (int)c->n[2], c->n + 3);
}

START_TEST(test_split_concat) {
  int64_t outer = 3, inner = 4, sizes[3] = {2, 3, 1}, total = 6, n = outer * total * inner;
  float *x = frand(n, -1, 1), *parts[3], *y = fzeros(n);
  for (int k = 0; k < 3; k++) parts[k] = fzeros(outer * sizes[k] * inner);
  pr_split(parts, x, outer, inner, 3, sizes);
  const float *cparts[3] = {parts[0], parts[1], parts[2]};
  pr_concat(y, cparts, outer, inner, 3, sizes);
  assert_bitwise("split/concat", y, x, n);
  // NULL reads as zeros
  const float *withnull[3] = {parts[0], NULL, parts[2]};
  pr_concat(y, withnull, outer, inner, 3, sizes);
  float *expect = fzeros(n);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < total * inner; j++) {
      int64_t e = o * total * inner + j;
      expect[e] = j >= 2 * inner && j < 5 * inner ? 0.0f : x[e];
    }
  assert_bitwise("concat with NULL", y, expect, n);
  // slice is concat's backward
  Ctx c = {0};
  c.n[0] = outer, c.n[1] = inner, c.n[2] = 3, c.n[3] = 2, c.n[4] = 3, c.n[5] = 1;
  c.xs[0] = parts[0], c.xs[1] = parts[1], c.xs[2] = parts[2], c.y = y;
  float *r = frand(n, -1, 1);
  int64_t off = 0;
  for (int k = 0; k < 3; k++) {
    float *d = fzeros(outer * sizes[k] * inner);
    pr_slice(d, r, outer, inner, total, off, sizes[k], 0);
    fd_check("slice", f_concat, &c, parts[k], outer * sizes[k] * inner, d, y, r, n, H, TOL);
    off += sizes[k];
  }
  // copy, fill, add_n (left to right, output aliasing an input)
  float *z = fzeros(n);
  pr_copy(z, x, n * 4);
  assert_bitwise("copy", z, x, n);
  pr_fill(z, n, 2.5f);
  for (int64_t i = 0; i < n; i++) expect[i] = 2.5f;
  assert_bitwise("fill", z, expect, n);
  float *a = frand(600, -1, 1), *b = frand(600, -1, 1), *cc = frand(600, -1, 1);
  float *sum3 = fzeros(600);
  for (int i = 0; i < 600; i++) sum3[i] = (a[i] + b[i]) + cc[i];
  const float *three[3] = {a, b, cc};
  pr_add_n(b, three, 3, 600);
  assert_bitwise("add_n", b, sum3, 600);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// attention

static void attention_ref(double *y, double *att, const float *qkv, int64_t B, int64_t T, int64_t C,
                          int64_t NH) {
  int64_t hs = C / NH;
  double scale = 1.0 / sqrt((double)hs);
  double *sc = malloc((size_t)T * sizeof(double));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t t = 0; t < T; t++) {
        const float *q = qkv + (b * T + t) * 3 * C + h * hs;
        double m = -INFINITY, s = 0;
        for (int64_t u = 0; u <= t; u++) {
          const float *k = qkv + (b * T + u) * 3 * C + C + h * hs;
          double d = 0;
          for (int64_t i = 0; i < hs; i++) d += (double)q[i] * k[i];
          sc[u] = d * scale;
          m = fmax(m, sc[u]);
        }
        for (int64_t u = 0; u <= t; u++) s += exp(sc[u] - m);
        double *arow = att + ((b * NH + h) * T + t) * T;
        for (int64_t u = 0; u < T; u++) arow[u] = u <= t ? exp(sc[u] - m) / s : 0.0;
        for (int64_t i = 0; i < hs; i++) {
          double acc = 0;
          for (int64_t u = 0; u <= t; u++)
            acc += arow[u] * qkv[(b * T + u) * 3 * C + 2 * C + h * hs + i];
          y[(b * T + t) * C + h * hs + i] = acc;
        }
      }
  free(sc);
}

// The backward in double from the double forward: datt = dy.v, dpre = scale att (datt - att.datt),
// dq = dpre k, dk = dpre^T q, dv = att^T dy, into dqkv (B,T,3C).
static void attention_bwd_ref(double *dqkv, const double *att, const float *dy, const float *qkv,
                              int64_t B, int64_t T, int64_t C, int64_t NH) {
  int64_t hs = C / NH, C3 = 3 * C;
  double scale = 1.0 / sqrt((double)hs);
  double *dp = malloc((size_t)(T * T) * sizeof(double));
  memset(dqkv, 0, (size_t)(B * T * C3) * sizeof(double));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++) {
      const double *a = att + (b * NH + h) * T * T;
      const float *q = qkv + b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
      const float *g = dy + b * T * C + h * hs;
      double *dq = dqkv + b * T * C3 + h * hs, *dk = dq + C, *dv = dq + 2 * C;
      for (int64_t t = 0; t < T; t++) {
        double dot = 0;
        for (int64_t u = 0; u <= t; u++) {
          double da = 0;
          for (int64_t i = 0; i < hs; i++) da += (double)g[t * C + i] * v[u * C3 + i];
          dp[t * T + u] = da;
          dot += a[t * T + u] * da;
        }
        for (int64_t u = 0; u <= t; u++)
          dp[t * T + u] = scale * a[t * T + u] * (dp[t * T + u] - dot);
      }
      for (int64_t t = 0; t < T; t++)
        for (int64_t u = 0; u <= t; u++)
          for (int64_t i = 0; i < hs; i++) {
            dq[t * C3 + i] += dp[t * T + u] * k[u * C3 + i];
            dk[u * C3 + i] += dp[t * T + u] * q[t * C3 + i];
            dv[u * C3 + i] += a[t * T + u] * g[t * C + i];
          }
    }
  free(dp);
}

static void f_attention(void *p) {
  Ctx *c = p;
  pr_attention_fwd(c->y, c->att, c->x, c->n[0], c->n[1], c->n[2], c->n[3], c->n[3], 1);
}

START_TEST(test_attention) {
  const int64_t shapes[][4] = {{2, 5, 8, 2}, {1, 9, 12, 3}, {1, 1, 4, 1}, {1, 40, 8, 1}};
  for (size_t si = 0; si < 4; si++) {
    int64_t B = shapes[si][0], T = shapes[si][1], C = shapes[si][2], NH = shapes[si][3];
    Ctx c = {0};
    c.n[0] = B, c.n[1] = T, c.n[2] = C, c.n[3] = NH;
    c.x = frand(B * T * 3 * C, -1.5f, 1.5f), c.y = fzeros(B * T * C);
    c.att = frand(B * NH * T * T, 1, 2); // stale values must be overwritten
    f_attention(&c);
    double *yr = talloc((size_t)(B * T * C) * sizeof(double));
    double *ar = talloc((size_t)(B * NH * T * T) * sizeof(double));
    attention_ref(yr, ar, c.x, B, T, C, NH);
    assert_close("attention y", c.y, yr, B * T * C, 1e-6, 1e-5);
    assert_close("attention att", c.att, ar, B * NH * T * T, 1e-7, 1e-5);
    int upper_zero = 1;
    for (int64_t row = 0; row < B * NH * T; row++)
      for (int64_t u = row % T + 1; u < T; u++) upper_zero &= c.att[row * T + u] == 0.0f;
    ck_assert_msg(upper_zero, "attention: att above the diagonal must be 0");
    float *r = frand(B * T * C, -1, 1), *dqkv = fzeros(B * T * 3 * C);
    pr_attention_bwd(dqkv, r, c.x, c.att, talloc(pr_attention_bwd_ws(B, T, C, NH, NH, 1)), B, T, C,
                     NH, NH, 1, 0);
    fd_check("attention dqkv", f_attention, &c, c.x, B * T * 3 * C, dqkv, c.y, r, B * T * C, H,
             TOL);
  }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// losses and argmax

static void f_ce(void *p) {
  Ctx *c = p;
  pr_cross_entropy_fwd(c->y, c->x, c->idx, c->n[0], c->n[1]);
}

START_TEST(test_cross_entropy) {
  int64_t rows = 6, V = 9;
  int32_t tgt[6] = {0, 8, 3, 3, 5, 1};
  Ctx c = {0};
  c.n[0] = rows, c.n[1] = V, c.idx = tgt;
  c.x = frand(rows * V, -4, 4), c.y = fzeros(1);
  for (int64_t i = 0; i < V; i++) c.x[V + i] += 50.0f; // large logits: stability
  f_ce(&c);
  double s = 0;
  for (int64_t r = 0; r < rows; r++) {
    double m = -INFINITY, z = 0;
    for (int64_t i = 0; i < V; i++) m = fmax(m, c.x[r * V + i]);
    for (int64_t i = 0; i < V; i++) z += exp(c.x[r * V + i] - m);
    s += m + log(z) - c.x[r * V + tgt[r]];
  }
  double ref = s / (double)rows;
  ck_assert_msg(fabs(c.y[0] - ref) <= 1e-6 * fabs(ref), "ce %.9g vs %.9g", c.y[0], ref);
  float dloss = 0.75f, *dx = fzeros(rows * V);
  pr_cross_entropy_bwd(dx, &dloss, c.x, tgt, rows, V, 0);
  fd_check("cross_entropy dlogits", f_ce, &c, c.x, rows * V, dx, c.y, &dloss, 1, H, TOL);
}
END_TEST

static void f_mse(void *p) {
  Ctx *c = p;
  pr_mse_fwd(c->y, c->a, c->b, c->n[0]);
}

START_TEST(test_mse) {
  int64_t n = 13;
  Ctx c = {0};
  c.n[0] = n, c.a = frand(n, -2, 2), c.b = frand(n, -2, 2), c.y = fzeros(1);
  f_mse(&c);
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += ((double)c.a[i] - c.b[i]) * ((double)c.a[i] - c.b[i]);
  ck_assert(fabs(c.y[0] - s / (double)n) <= 1e-6 * s / (double)n);
  float dloss = 1.25f, *dp = fzeros(n), *dt = fzeros(n);
  pr_mse_bwd(dp, &dloss, c.a, c.b, n, 0, 0);
  pr_mse_bwd(dt, &dloss, c.a, c.b, n, 1, 0);
  fd_check("mse dp", f_mse, &c, c.a, n, dp, c.y, &dloss, 1, H, TOL);
  fd_check("mse dt", f_mse, &c, c.b, n, dt, c.y, &dloss, 1, H, TOL);
}
END_TEST

START_TEST(test_count_correct) {
  float logits[4 * 3] = {1, 3, 3, /**/ 2, 2, 2, /**/ 0, -1, 5, /**/ 7, 1, 7};
  int32_t tgt[4] = {1, 0, 2, 2};
  // argmax (ties -> lowest): 1, 0, 2, 0
  ck_assert_int_eq(pr_count_correct(logits, tgt, 4, 3), 3);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// acc = 1 adds exactly the acc = 0 contribution

typedef void (*AccFn)(void *ctx, float *out, int acc);

static void check_acc(const char *what, AccFn f, void *ctx, int64_t n) {
  float *contrib = fzeros(n), *out = frand(n, -3, 3), *expect = fzeros(n);
  f(ctx, contrib, 0);
  for (int64_t i = 0; i < n; i++) expect[i] = out[i] + contrib[i];
  f(ctx, out, 1);
  assert_bitwise(what, out, expect, n);
}

// The acc tests share one context of inputs large enough for every kernel.
typedef struct AccCtx {
  float *dy, *a, *b, *x, *w, *y, *mean, *rstd, *att, *qkv, dloss;
  int32_t *idx;
  int64_t n[8];
  int flag[4];
} AccCtx;

static void acc_matmul_a(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_matmul_bwd_a(o, c->dy, c->b, c->n[0], c->n[1], c->n[2], c->n[3], c->flag[0], c->flag[1],
                  c->flag[2], acc);
}
static void acc_matmul_b(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_matmul_bwd_b(o, c->dy, c->a, c->n[0], c->n[1], c->n[2], c->n[3], c->flag[0], c->flag[1],
                  c->flag[2], acc);
}
static void acc_linear_x(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_linear_bwd_x(o, c->dy, c->w, c->n[0], c->n[1], c->n[2], acc);
}
static void acc_linear_w(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_linear_bwd_w(o, c->dy, c->x, c->n[0], c->n[1], c->n[2], acc);
}
static void acc_sum_rows(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_sum_rows(o, c->dy, c->n[0], c->n[1], acc);
}
static void acc_unary(void *p, float *o, int acc) {
  AccCtx *c = p;
  unary_bwd(c->flag[0], o, c->dy, c->x, c->y, c->n[0], acc);
}
static void acc_softmax(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_softmax_bwd(o, c->dy, c->y, c->n[0], c->n[1], c->n[2], acc);
}
static void acc_ln_x(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_layernorm_bwd_x(o, c->dy, c->x, c->w, c->mean, c->rstd, c->n[0], c->n[1], acc);
}
static void acc_ln_w(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_layernorm_bwd_w(o, c->dy, c->x, c->mean, c->rstd, c->n[0], c->n[1], acc);
}
static void acc_rms_x(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_rms_norm_bwd_x(o, c->dy, c->x, c->w, c->rstd, c->n[0], c->n[1], acc);
}
static void acc_rms_w(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_rms_norm_bwd_w(o, c->dy, c->x, c->rstd, c->n[0], c->n[1], acc);
}
static void acc_embedding(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_embedding_bwd_w(o, c->dy, c->idx, c->n[0], c->n[1], c->n[2], acc);
}
static void acc_slice(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_slice(o, c->dy, c->n[0], c->n[1], c->n[2], c->n[3], c->n[4], acc);
}
static void acc_attention(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_attention_bwd(o, c->dy, c->qkv, c->att,
                   talloc(pr_attention_bwd_ws(c->n[0], c->n[1], c->n[2], c->n[3], c->n[3], 1)),
                   c->n[0], c->n[1], c->n[2], c->n[3], c->n[3], 1, acc);
}
static void acc_ce(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_cross_entropy_bwd(o, &c->dloss, c->x, c->idx, c->n[0], c->n[1], acc);
}
static void acc_mse(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_mse_bwd(o, &c->dloss, c->a, c->b, c->n[0], c->flag[0], acc);
}
static void acc_binary(void *p, float *o, int acc) {
  AccCtx *c = p;
  int64_t *ydims = c->n, *xdims = c->n + 3; // rank 3
  int64_t ostr[3];
  int64_t od[3] = {ydims[0], ydims[1], ydims[2]};
  bstrides(3, od, ostr);
  pr_binary_bwd(o, c->dy, c->flag[0] == 2 ? c->a : NULL, c->flag[0], 0, 3, ydims, xdims,
                c->flag[0] == 2 ? ostr : NULL, acc);
}

START_TEST(test_acc) {
  AccCtx c = {0};
  c.dy = frand(1 << 16, -1, 1), c.a = frand(1 << 16, -1, 1), c.b = frand(1 << 16, -1, 1);
  c.x = frand(1 << 16, -2, 2), c.w = frand(1 << 16, -1, 1), c.dloss = 0.5f;
  // matmul, every layout; the reduction dims (N for da, M or batch*M for db) exceed OpenBLAS's
  // K blocking, so beta = 1 accumulation would not be exact
  float *big_dy = frand(3 * 130 * 400, -1, 1), *big_a = frand(3 * 130 * 20, -1, 1);
  float *big_b = frand(3 * 20 * 400, -1, 1);
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int bb = 0; bb < 2; bb++) {
        AccCtx m = c;
        m.n[0] = 3, m.n[1] = 130, m.n[2] = 400, m.n[3] = 20;
        m.flag[0] = ta, m.flag[1] = tb, m.flag[2] = bb;
        m.dy = big_dy, m.a = big_a, m.b = big_b;
        check_acc("matmul_bwd_a", acc_matmul_a, &m, 3 * 130 * 20);
        check_acc("matmul_bwd_b", acc_matmul_b, &m, (bb ? 3 : 1) * 20 * 400);
      }
  c.n[0] = 800, c.n[1] = 40, c.n[2] = 30; // linear: rows 800 > the GEMM K block
  check_acc("linear_bwd_x", acc_linear_x, &c, 800 * 40);
  check_acc("linear_bwd_w", acc_linear_w, &c, 30 * 40);
  c.n[0] = 100, c.n[1] = 130;
  check_acc("sum_rows", acc_sum_rows, &c, 130);
  c.y = frand(1 << 16, 0.01f, 0.99f);
  for (int kind = 0; kind < 7; kind++) {
    c.n[0] = 1000, c.flag[0] = kind;
    check_acc("unary_bwd", acc_unary, &c, 1000);
  }
  c.n[0] = 6, c.n[1] = 7, c.n[2] = 1;
  check_acc("softmax_bwd", acc_softmax, &c, 42);
  c.n[2] = 5;
  check_acc("softmax_bwd strided", acc_softmax, &c, 210);
  c.n[0] = 9, c.n[1] = 37;
  c.mean = frand(9, -0.5f, 0.5f), c.rstd = frand(9, 0.5f, 2);
  check_acc("layernorm_bwd_x", acc_ln_x, &c, 9 * 37);
  check_acc("layernorm_bwd_w", acc_ln_w, &c, 37);
  check_acc("rms_norm_bwd_x", acc_rms_x, &c, 9 * 37);
  check_acc("rms_norm_bwd_w", acc_rms_w, &c, 37);
  int32_t ids[12] = {1, 4, 1, 0, 4, 4, 2, 1, 0, 0, 4, 1};
  c.idx = ids, c.n[0] = 12, c.n[1] = 6, c.n[2] = 70;
  check_acc("embedding_bwd_w", acc_embedding, &c, 6 * 70);
  c.n[0] = 3, c.n[1] = 5, c.n[2] = 7, c.n[3] = 2, c.n[4] = 4;
  check_acc("slice", acc_slice, &c, 3 * 5 * 4);
  c.n[0] = 2, c.n[1] = 6, c.n[2] = 8, c.n[3] = 2;
  c.qkv = frand(2 * 6 * 24, -1, 1), c.att = fzeros(2 * 2 * 6 * 6);
  float *ay = fzeros(2 * 6 * 8);
  pr_attention_fwd(ay, c.att, c.qkv, 2, 6, 8, 2, 2, 1);
  check_acc("attention_bwd", acc_attention, &c, 2 * 6 * 24);
  int32_t tgt[5] = {0, 6, 2, 2, 3};
  c.idx = tgt, c.n[0] = 5, c.n[1] = 7;
  check_acc("cross_entropy_bwd", acc_ce, &c, 35);
  for (int which = 0; which < 2; which++) {
    c.n[0] = 50, c.flag[0] = which;
    check_acc("mse_bwd", acc_mse, &c, 50);
  }
  // binary: reduce to (1,1,C), to (B,T,1), and no reduction; add, sub, mul
  const int64_t xds[3][3] = {{1, 1, 9}, {4, 5, 1}, {4, 5, 9}};
  for (int k = 0; k < 3; k++)
    for (int op = 0; op < 3; op++) {
      c.n[0] = 4, c.n[1] = 5, c.n[2] = 9;
      memcpy(c.n + 3, xds[k], sizeof xds[k]);
      c.flag[0] = op;
      check_acc("binary_bwd", acc_binary, &c, numel(3, xds[k]));
    }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Results do not depend on the thread count

static void set_threads(int n) {
  pr_set_threads(n);           // the kernels' thread count (pr_threads), cached there
  openblas_set_num_threads(n); // the kernels reset OpenBLAS to one thread (see kernels_gemm.c)
}

typedef void (*RunFn)(void *ctx, float *out);

static void check_threads(const char *what, RunFn f, void *ctx, int64_t n) {
  float *one = fzeros(n), *two = fzeros(n);
  set_threads(1);
  f(ctx, one);
  set_threads(2);
  f(ctx, two);
  assert_bitwise(what, one, two, n);
}

typedef struct ThrCtx {
  int64_t B, T, C, NH, rows, in, out, V, n;
  float *qkv, *dy, *x, *w, *bias, *att, *mean, *rstd, *ln_y;
  int32_t *idx;
} ThrCtx;

static void thr_attention(void *p, float *o) { // y, att and dqkv packed into o
  ThrCtx *c = p;
  int64_t ny = c->B * c->T * c->C, na = c->B * c->NH * c->T * c->T;
  pr_attention_fwd(o, o + ny, c->qkv, c->B, c->T, c->C, c->NH, c->NH, 1);
  pr_attention_bwd(o + ny + na, c->dy, c->qkv, o + ny,
                   talloc(pr_attention_bwd_ws(c->B, c->T, c->C, c->NH, c->NH, 1)), c->B, c->T, c->C,
                   c->NH, c->NH, 1, 0);
}
static void thr_layernorm(void *p, float *o) { // y, mean, rstd, dx, dw
  ThrCtx *c = p;
  int64_t n = c->rows * c->C;
  pr_layernorm_fwd(o, o + n, o + n + c->rows, c->x, c->w, c->bias, c->rows, c->C, 1e-5f);
  float *dx = o + n + 2 * c->rows;
  pr_layernorm_bwd_x(dx, c->dy, c->x, c->w, o + n, o + n + c->rows, c->rows, c->C, 0);
  pr_layernorm_bwd_w(dx + n, c->dy, c->x, o + n, o + n + c->rows, c->rows, c->C, 0);
}
static void thr_rms_norm(void *p, float *o) { // y, rstd, dx, dw
  ThrCtx *c = p;
  int64_t n = c->rows * c->C;
  pr_rms_norm_fwd(o, o + n, c->x, c->w, c->rows, c->C, 1e-6f);
  float *dx = o + n + c->rows;
  pr_rms_norm_bwd_x(dx, c->dy, c->x, c->w, o + n, c->rows, c->C, 0);
  pr_rms_norm_bwd_w(dx + n, c->dy, c->x, o + n, c->rows, c->C, 0);
}
static void thr_linear(void *p, float *o) { // y, dx, dw
  ThrCtx *c = p;
  pr_linear_fwd(o, c->x, c->w, c->bias, c->rows, c->in, c->out);
  pr_linear_bwd_x(o + c->rows * c->out, c->dy, c->w, c->rows, c->in, c->out, 0);
  pr_linear_bwd_w(o + c->rows * (c->out + c->in), c->dy, c->x, c->rows, c->in, c->out, 0);
}
static void thr_embedding(void *p, float *o) {
  ThrCtx *c = p;
  pr_embedding_bwd_w(o, c->dy, c->idx, c->n, c->V, c->C, 0);
}
static void thr_sum_rows(void *p, float *o) {
  ThrCtx *c = p;
  pr_sum_rows(o, c->dy, c->rows, c->C, 0);
}
static void thr_misc(void *p, float *o) { // softmax fwd/bwd, binary bwd, ce fwd/bwd, gelu, silu
  ThrCtx *c = p;
  int64_t n = c->rows * c->C, yd[2] = {c->rows, c->C}, xd[2] = {1, c->C};
  pr_softmax_fwd(o, c->x, c->rows, c->C, 1);
  pr_softmax_bwd(o + n, c->dy, o, c->rows, c->C, 1, 0);
  pr_binary_bwd(o + 2 * n, c->dy, NULL, 0, 1, 2, yd, xd, NULL, 0);
  pr_cross_entropy_fwd(o + 2 * n + c->C, c->x, c->idx, c->rows, c->C);
  float dl = 1.0f;
  pr_cross_entropy_bwd(o + 2 * n + c->C + 1, &dl, c->x, c->idx, c->rows, c->C, 0);
  pr_gelu_fwd(o + 3 * n + c->C + 1, NULL, c->x, n, 0);
  pr_silu_fwd(o + 4 * n + c->C + 1, c->x, n);
  pr_silu_bwd(o + 5 * n + c->C + 1, c->dy, c->x, n, 0);
}

// The model's shapes, where the kernels' register tiles and vectors run (the shapes above have
// heads of at most 8, all of it in the scalar edges): gpt_char's heads of 32 (whole vectors at v3
// and v4), heads of 48 and 40 (a vector tail at v4, at v3 for 40) with T not a multiple of the four
// rows a tile takes. y and att against the double forward, dqkv (acc = 0, and acc = 1 onto a
// previous value) against the double backward.
START_TEST(test_attention_model_shapes) {
  const int64_t shapes[][4] = {{2, 64, 128, 4}, {2, 70, 96, 2}, {1, 37, 40, 1}};
  for (size_t si = 0; si < 3; si++) {
    int64_t B = shapes[si][0], T = shapes[si][1], C = shapes[si][2], NH = shapes[si][3];
    int64_t nq = B * T * 3 * C, ny = B * T * C, na = B * NH * T * T;
    float *qkv = frand(nq, -1.5f, 1.5f), *y = fzeros(ny), *att = frand(na, 1, 2);
    pr_attention_fwd(y, att, qkv, B, T, C, NH, NH, 1);
    double *yr = talloc((size_t)ny * sizeof(double)), *ar = talloc((size_t)na * sizeof(double));
    attention_ref(yr, ar, qkv, B, T, C, NH);
    assert_close("attention y (model shapes)", y, yr, ny, 1e-6, 1e-5);
    assert_close("attention att (model shapes)", att, ar, na, 1e-7, 1e-5);
    float *dy = frand(ny, -1, 1), *dqkv = fzeros(nq), *prev = frand(nq, -1, 1);
    double *dr = talloc((size_t)nq * sizeof(double));
    attention_bwd_ref(dr, ar, dy, qkv, B, T, C, NH);
    void *ws = talloc(pr_attention_bwd_ws(B, T, C, NH, NH, 1));
    pr_attention_bwd(dqkv, dy, qkv, att, ws, B, T, C, NH, NH, 1, 0);
    assert_close("attention dqkv (model shapes)", dqkv, dr, nq, 1e-5, 1e-4);
    double *dacc = talloc((size_t)nq * sizeof(double));
    for (int64_t i = 0; i < nq; i++) dacc[i] = (double)prev[i] + dr[i];
    pr_attention_bwd(prev, dy, qkv, att, ws, B, T, C, NH, NH, 1, 1);
    assert_close("attention dqkv acc (model shapes)", prev, dacc, nq, 1e-5, 1e-4);
  }
}
END_TEST

// The backward works only inside its planned workspace: pr_attention_bwd_ws bytes followed by a
// canary that must survive, with more threads than (b,h) pairs (the kernel runs on at most B*NH)
// and with more (b,h) pairs than PR_ATTENTION_MAX_THREADS (the workspace has 64 slices, each
// thread takes several pairs), and gives the same bits as one thread in an exact workspace.
START_TEST(test_attention_bwd_workspace) {
  static const int64_t shapes[][4] = {{1, 40, 64, 2}, {9, 33, 32, 8}}; // B*NH = 2, 72
  for (int k = 0; k < 2; k++) {
    int64_t B = shapes[k][0], T = shapes[k][1], C = shapes[k][2], NH = shapes[k][3];
    int64_t hs = C / NH, ld = (T + 31) / 32 * 32;
    size_t slice = ((size_t)(hs * ld + T * ld + 4 * ld + 4 * hs) * 4 + 63) / 64 * 64;
    size_t ws = pr_attention_bwd_ws(B, T, C, NH, NH, 1);
    ck_assert_uint_eq(ws, slice * (size_t)(B * NH < PR_ATTENTION_MAX_THREADS ? B * NH : 64));
    float *qkv = frand(B * T * 3 * C, -1, 1), *dy = frand(B * T * C, -1, 1);
    float *y = fzeros(B * T * C), *att = fzeros(B * NH * T * T);
    set_threads(1); // the forward's scratch stays on this thread
    pr_attention_fwd(y, att, qkv, B, T, C, NH, NH, 1);
    float *one = fzeros(B * T * 3 * C), *many = fzeros(B * T * 3 * C);
    pr_attention_bwd(one, dy, qkv, att, talloc(ws), B, T, C, NH, NH, 1, 0);
    unsigned char *buf = talloc(ws + 256);
    memset(buf + ws, 0xA5, 256);
    set_threads(4);
    pr_attention_bwd(many, dy, qkv, att, buf, B, T, C, NH, NH, 1, 0);
    int intact = 1;
    for (int i = 0; i < 256; i++) intact &= buf[ws + i] == 0xA5;
    ck_assert_msg(intact, "attention backward wrote past its workspace");
    assert_bitwise("attention bwd workspace", one, many, B * T * 3 * C);
  }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Grouped-query and non-causal attention (n_kv_head, causal): packed qkv (B,T,C+2Ckv), query head
// h reading kv head h / (NH/NKV).

// Forward and backward in double: y, att and dqkv (B,T,C+2Ckv) from qkv and dy.
static void gqa_ref(double *y, double *att, double *dqkv, const float *qkv, const float *dy,
                    const int64_t *n, int causal) {
  int64_t B = n[0], T = n[1], C = n[2], NH = n[3], NKV = n[4];
  int64_t hs = C / NH, Ckv = NKV * hs, CT = C + 2 * Ckv, grp = NH / NKV;
  double scale = 1.0 / sqrt((double)hs);
  double *dp = talloc((size_t)(T * T) * sizeof(double));
  memset(dqkv, 0, (size_t)(B * T * CT) * sizeof(double));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++) {
      int64_t qo = b * T * CT + h * hs, ko = b * T * CT + C + (h / grp) * hs, vo = ko + Ckv;
      double *a = att + (b * NH + h) * T * T;
      const float *g = dy + b * T * C + h * hs;
      for (int64_t t = 0; t < T; t++) {
        int64_t m = causal ? t + 1 : T;
        double mx = -INFINITY, sum = 0, dot = 0;
        for (int64_t u = 0; u < T; u++) {
          double sc = 0;
          for (int64_t i = 0; i < hs; i++)
            sc += (double)qkv[qo + t * CT + i] * qkv[ko + u * CT + i];
          a[t * T + u] = u < m ? sc * scale : 0;
          if (u < m && a[t * T + u] > mx) mx = a[t * T + u];
        }
        for (int64_t u = 0; u < m; u++) sum += a[t * T + u] = exp(a[t * T + u] - mx);
        for (int64_t u = 0; u < m; u++) a[t * T + u] /= sum;
        for (int64_t i = 0; i < hs; i++) {
          double acc = 0;
          for (int64_t u = 0; u < m; u++) acc += a[t * T + u] * qkv[vo + u * CT + i];
          y[(b * T + t) * C + h * hs + i] = acc;
        }
        for (int64_t u = 0; u < m; u++) {
          double da = 0;
          for (int64_t i = 0; i < hs; i++) da += (double)g[t * C + i] * qkv[vo + u * CT + i];
          dp[t * T + u] = da;
          dot += a[t * T + u] * da;
        }
        for (int64_t u = 0; u < m; u++)
          dp[t * T + u] = scale * a[t * T + u] * (dp[t * T + u] - dot);
        for (int64_t u = 0; u < m; u++)
          for (int64_t i = 0; i < hs; i++) {
            dqkv[qo + t * CT + i] += dp[t * T + u] * qkv[ko + u * CT + i];
            dqkv[ko + u * CT + i] += dp[t * T + u] * qkv[qo + t * CT + i];
            dqkv[vo + u * CT + i] += a[t * T + u] * g[t * C + i];
          }
      }
    }
}

static void f_attention_gqa(void *p) {
  Ctx *c = p;
  pr_attention_fwd(c->y, c->att, c->x, c->n[0], c->n[1], c->n[2], c->n[3], c->n[4], c->flag[0]);
}

// GQA and MQA, causal and not, T around the kernels' blocks of four rows: y, att and dqkv (acc 0
// and 1) against double, dqkv against finite differences; att 0 above the diagonal when causal.
START_TEST(test_attention_gqa) {
  static const int64_t shapes[][6] = {{2, 9, 16, 4, 2, 1}, {1, 7, 12, 3, 1, 0}, {2, 6, 8, 4, 1, 1},
                                      {1, 9, 16, 4, 2, 0}, {1, 5, 8, 2, 2, 0},  {1, 1, 4, 2, 1, 0}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    const int64_t *n = shapes[si];
    int64_t B = n[0], T = n[1], C = n[2], NH = n[3], NKV = n[4];
    int causal = (int)n[5];
    int64_t nq = B * T * (C + 2 * NKV * (C / NH)), ny = B * T * C, na = B * NH * T * T;
    Ctx c = {0};
    memcpy(c.n, n, 5 * sizeof(int64_t));
    c.flag[0] = causal;
    c.x = frand(nq, -1.5f, 1.5f), c.y = fzeros(ny), c.att = frand(na, 1, 2);
    f_attention_gqa(&c);
    double *yr = talloc((size_t)ny * sizeof(double)), *ar = talloc((size_t)na * sizeof(double));
    double *dr = talloc((size_t)nq * sizeof(double));
    float *r = frand(ny, -1, 1), *dqkv = fzeros(nq), *prev = frand(nq, -1, 1);
    gqa_ref(yr, ar, dr, c.x, r, n, causal);
    assert_close("gqa y", c.y, yr, ny, 1e-6, 1e-5);
    assert_close("gqa att", c.att, ar, na, 1e-7, 1e-5);
    int upper_zero = 1;
    for (int64_t row = 0; causal && row < B * NH * T; row++)
      for (int64_t u = row % T + 1; u < T; u++) upper_zero &= c.att[row * T + u] == 0.0f;
    ck_assert_msg(upper_zero, "gqa: att above the diagonal must be 0");
    void *ws = talloc(pr_attention_bwd_ws(B, T, C, NH, NKV, causal));
    pr_attention_bwd(dqkv, r, c.x, c.att, ws, B, T, C, NH, NKV, causal, 0);
    assert_close("gqa dqkv", dqkv, dr, nq, 1e-5, 1e-4);
    double *dacc = talloc((size_t)nq * sizeof(double));
    for (int64_t i = 0; i < nq; i++) dacc[i] = (double)prev[i] + dr[i];
    pr_attention_bwd(prev, r, c.x, c.att, ws, B, T, C, NH, NKV, causal, 1);
    assert_close("gqa dqkv acc", prev, dacc, nq, 1e-5, 1e-4);
    fd_check("gqa dqkv", f_attention_gqa, &c, c.x, nq, dqkv, c.y, r, ny, H, TOL);
  }
}
END_TEST

// The grouped-query kernels against the multi-head ones run on k and v with each kv head
// repeated for its query heads (Hugging Face's repeat_kv): y and att bitwise; dq bitwise; a kv
// head's dk and dv bitwise the repeated copies' added in ascending head order (onto the previous
// gradient with acc 1).
START_TEST(test_attention_gqa_repeat) {
  int64_t B = 2, T = 11, C = 16, NH = 4, hs = C / NH;
  for (int64_t NKV = 1; NKV <= 2; NKV++)
    for (int causal = 0; causal < 2; causal++)
      for (int acc = 0; acc < 2; acc++) {
        int64_t grp = NH / NKV, Ckv = NKV * hs, CT = C + 2 * Ckv;
        int64_t nq = B * T * CT, nr = B * T * 3 * C, ny = B * T * C, na = B * NH * T * T;
        float *qkv = frand(nq, -1.5f, 1.5f), *rep = fzeros(nr), *dy = frand(ny, -1, 1);
        for (int64_t row = 0; row < B * T; row++) {
          memcpy(rep + row * 3 * C, qkv + row * CT, (size_t)C * sizeof(float));
          for (int64_t h = 0; h < NH; h++)
            for (int part = 1; part <= 2; part++)
              memcpy(rep + row * 3 * C + part * C + h * hs,
                     qkv + row * CT + C + (part - 1) * Ckv + (h / grp) * hs,
                     (size_t)hs * sizeof(float));
        }
        float *y = fzeros(ny), *att = fzeros(na), *ry = fzeros(ny), *ratt = fzeros(na);
        pr_attention_fwd(y, att, qkv, B, T, C, NH, NKV, causal);
        pr_attention_fwd(ry, ratt, rep, B, T, C, NH, NH, causal);
        assert_bitwise("gqa vs repeated y", y, ry, ny);
        assert_bitwise("gqa vs repeated att", att, ratt, na);
        float *d = frand(nq, -1, 1), *rd = fzeros(nr), *expect = fzeros(nq);
        memcpy(expect, d, (size_t)nq * sizeof(float));
        pr_attention_bwd(d, dy, qkv, att, talloc(pr_attention_bwd_ws(B, T, C, NH, NKV, causal)), B,
                         T, C, NH, NKV, causal, acc);
        pr_attention_bwd(rd, dy, rep, ratt, talloc(pr_attention_bwd_ws(B, T, C, NH, NH, causal)), B,
                         T, C, NH, NH, causal, 0);
        for (int64_t row = 0; row < B * T; row++) {
          float *e = expect + row * CT;
          const float *rr = rd + row * 3 * C;
          for (int64_t i = 0; i < C; i++) e[i] = acc ? e[i] + rr[i] : rr[i];
          for (int64_t h = 0; h < NH; h++)
            for (int part = 1; part <= 2; part++)
              for (int64_t i = 0; i < hs; i++) {
                float *o = e + C + (part - 1) * Ckv + (h / grp) * hs + i;
                float v = rr[part * C + h * hs + i];
                *o = (h % grp == 0 && !acc) ? v : *o + v;
              }
        }
        assert_bitwise(acc ? "gqa vs repeated dqkv acc" : "gqa vs repeated dqkv", d, expect, nq);
      }
}
END_TEST

// 1 and 2 threads give the same bits (the backward splits the work by kv head), GQA and MQA,
// causal and not, at sizes where both kernels run in parallel; the backward on 4 threads too,
// inside its workspace (one slice per (b, kv head): B*NKV = 2 or 4 slices) followed by a canary.
// (The forward's per-thread scratch stays on 1 and 2 threads: a team shrunk from 4 drops threads
// holding theirs, which the sanitizer build reports as leaks.)
START_TEST(test_attention_gqa_threads) {
  int64_t B = 2, T = 48, C = 64, NH = 8;
  for (int64_t NKV = 1; NKV <= 2; NKV++)
    for (int causal = 0; causal < 2; causal++) {
      int64_t nq = B * T * (C + 2 * NKV * (C / NH)), ny = B * T * C, na = B * NH * T * T;
      float *qkv = frand(nq, -1, 1), *dy = frand(ny, -1, 1);
      size_t ws = pr_attention_bwd_ws(B, T, C, NH, NKV, causal);
      float *out[3];
      for (int k = 0; k < 3; k++) {
        float *o = out[k] = fzeros(ny + na + nq);
        unsigned char *buf = talloc(ws + 256);
        memset(buf + ws, 0xA5, 256);
        set_threads(k == 2 ? 1 : k + 1);
        pr_attention_fwd(o, o + ny, qkv, B, T, C, NH, NKV, causal);
        set_threads(1 << k);
        pr_attention_bwd(o + ny + na, dy, qkv, o + ny, buf, B, T, C, NH, NKV, causal, 0);
        int intact = 1;
        for (int i = 0; i < 256; i++) intact &= buf[ws + i] == 0xA5;
        ck_assert_msg(intact, "gqa attention backward wrote past its workspace");
      }
      assert_bitwise("gqa 1 vs 2 threads", out[0], out[1], ny + na + nq);
      assert_bitwise("gqa 1 vs 4 threads", out[0], out[2], ny + na + nq);
    }
}
END_TEST

START_TEST(test_attention_sep) {
  static const int64_t shapes[][6] = {{2, 9, 16, 4, 2, 1}, {1, 7, 12, 3, 1, 0}, {2, 6, 8, 2, 2, 1}};
  for (size_t si = 0; si < 3; si++) {
    const int64_t *n = shapes[si];
    int64_t B = n[0], T = n[1], C = n[2], NH = n[3], NKV = n[4], Ckv = NKV * (C / NH);
    int causal = (int)n[5];
    int64_t CT = C + 2 * Ckv, nq = B * T * CT, ny = B * T * C, na = B * NH * T * T;
    float *qkv = frand(nq, -1.5f, 1.5f), *dy = frand(ny, -1, 1);
    float *q = fzeros(B * T * C), *k = fzeros(B * T * Ckv), *v = fzeros(B * T * Ckv);
    for (int64_t r = 0; r < B * T; r++) {
      memcpy(q + r * C, qkv + r * CT, (size_t)C * sizeof(float));
      memcpy(k + r * Ckv, qkv + r * CT + C, (size_t)Ckv * sizeof(float));
      memcpy(v + r * Ckv, qkv + r * CT + C + Ckv, (size_t)Ckv * sizeof(float));
    }
    float *y = fzeros(ny), *att = fzeros(na), *py = fzeros(ny), *patt = fzeros(na);
    pr_attention_fwd(py, patt, qkv, B, T, C, NH, NKV, causal);
    pr_attention_sep_fwd(y, att, q, k, v, B, T, C, NH, NKV, causal);
    assert_bitwise("attention sep y", y, py, ny);
    assert_bitwise("attention sep att", att, patt, na);
    void *ws = talloc(pr_attention_bwd_ws(B, T, C, NH, NKV, causal));
    for (int acc = 0; acc < 2; acc++) {
      float *pd = frand(nq, -1, 1), *dq = fzeros(B * T * C), *dk = fzeros(B * T * Ckv);
      float *dv = fzeros(B * T * Ckv);
      for (int64_t r = 0; r < B * T; r++) { // the previous gradients, acc 1
        memcpy(dq + r * C, pd + r * CT, (size_t)C * sizeof(float));
        memcpy(dk + r * Ckv, pd + r * CT + C, (size_t)Ckv * sizeof(float));
        memcpy(dv + r * Ckv, pd + r * CT + C + Ckv, (size_t)Ckv * sizeof(float));
      }
      pr_attention_bwd(pd, dy, qkv, patt, ws, B, T, C, NH, NKV, causal, acc);
      pr_attention_sep_bwd_q(dq, dy, q, k, v, att, ws, B, T, C, NH, NKV, causal, acc);
      pr_attention_sep_bwd_k(dk, dy, q, k, v, att, ws, B, T, C, NH, NKV, causal, acc);
      pr_attention_sep_bwd_v(dv, dy, q, k, v, att, ws, B, T, C, NH, NKV, causal, acc);
      for (int64_t r = 0; r < B * T; r++) {
        assert_bitwise("attention sep dq", dq + r * C, pd + r * CT, C);
        assert_bitwise("attention sep dk", dk + r * Ckv, pd + r * CT + C, Ckv);
        assert_bitwise("attention sep dv", dv + r * Ckv, pd + r * CT + C + Ckv, Ckv);
      }
    }
  }
}
END_TEST

START_TEST(test_threads) {
  ThrCtx c = {0};
  c.B = 4, c.T = 64, c.C = 128, c.NH = 4;
  c.qkv = frand(c.B * c.T * 3 * c.C, -1, 1), c.dy = frand(1 << 17, -1, 1);
  check_threads("attention", thr_attention, &c,
                c.B * c.T * c.C + c.B * c.NH * c.T * c.T + c.B * c.T * 3 * c.C);
  c.rows = 512, c.C = 128;
  c.x = frand(1 << 17, -2, 2), c.w = frand(1 << 17, -1, 1), c.bias = frand(1024, -1, 1);
  check_threads("layernorm", thr_layernorm, &c, 3 * 512 * 128 + 2 * 512);
  check_threads("rms_norm", thr_rms_norm, &c, 2 * 512 * 128 + 128 + 512);
  c.rows = 256, c.in = 128, c.out = 192;
  check_threads("linear", thr_linear, &c, 256 * 192 + 256 * 128 + 192 * 128);
  c.n = 1024, c.V = 65, c.C = 128;
  c.idx = talloc(1024 * sizeof(int32_t));
  for (int i = 0; i < 1024; i++) c.idx[i] = (int32_t)(urand() * 65);
  check_threads("embedding_bwd_w", thr_embedding, &c, 65 * 128);
  c.rows = 700, c.C = 150;
  check_threads("sum_rows", thr_sum_rows, &c, 150);
  c.rows = 1024, c.C = 65;
  check_threads("softmax/binary/cross_entropy/gelu/silu", thr_misc, &c, 6 * 1024 * 65 + 65 + 1);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// rope (rotary position embedding) of x (outer,T,inner,D)

// Pair i of a row: its two indices, (i, i + D/2) or interleaved (2i, 2i+1).
static void rope_pair(int64_t i, int64_t D, int interleaved, int64_t *p, int64_t *q) {
  *p = interleaved ? 2 * i : i;
  *q = interleaved ? 2 * i + 1 : i + D / 2;
}

// y in double: the exact angle t * theta^(-2i/D) (exact = 1), or the kernels' f32 recipe
// (float e, inv_freq, angle; cos, sin in double), rotated by +angle (sign 1) or -angle (-1).
static void rope_ref(double *y, const float *x, int64_t outer, int64_t T, int64_t inner, int64_t D,
                     float theta, int interleaved, int exact, double sign) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t h = 0; h < inner; h++)
        for (int64_t i = 0; i < D / 2; i++) {
          double a;
          if (exact)
            a = (double)t * pow((double)theta, -2.0 * (double)i / (double)D);
          else {
            float e = (float)(2 * i) / (float)D;
            a = (double)((float)t * (1.0f / (float)pow((double)theta, (double)e)));
          }
          double c = cos(a), s = sign * sin(a);
          int64_t off = ((o * T + t) * inner + h) * D, p, q;
          rope_pair(i, D, interleaved, &p, &q);
          y[off + p] = (double)x[off + p] * c - (double)x[off + q] * s;
          y[off + q] = (double)x[off + q] * c + (double)x[off + p] * s;
        }
}

static void f_rope(void *p) {
  Ctx *c = p;
  pr_rope_fwd(c->y, c->x, c->n[0], c->n[1], c->n[2], c->n[3], (float)c->n[4], c->flag[0]);
}

// Both pairings, against double (the exact angles; the f32 recipe within a rounding), the
// backward against finite differences and as the inverse rotation; D/2 above the kernels' chunk
// of 64 pairs (130), one pair (2), Llama 3's theta.
START_TEST(test_rope) {
  const int64_t shapes[][5] = {// outer, T, inner, D, theta
                               {2, 5, 3, 8, 10000},
                               {3, 7, 1, 6, 500000},
                               {1, 4, 2, 130, 10000},
                               {2, 3, 2, 2, 100}};
  for (int si = 0; si < 4; si++)
    for (int il = 0; il < 2; il++) {
      const int64_t *sh = shapes[si];
      int64_t n = sh[0] * sh[1] * sh[2] * sh[3];
      Ctx c = {0};
      memcpy(c.n, sh, sizeof shapes[0]);
      c.flag[0] = il;
      c.x = frand(n, -2, 2), c.y = fzeros(n);
      f_rope(&c);
      double *ref = talloc((size_t)n * sizeof(double));
      rope_ref(ref, c.x, sh[0], sh[1], sh[2], sh[3], (float)sh[4], il, 0, 1);
      assert_close("rope (the f32 recipe)", c.y, ref, n, 2.5e-7, 2.5e-7);
      rope_ref(ref, c.x, sh[0], sh[1], sh[2], sh[3], (float)sh[4], il, 1, 1);
      assert_close("rope (exact angles)", c.y, ref, n, 1e-5, 1e-5);
      float *r = frand(n, -1, 1), *dx = fzeros(n), *back = fzeros(n);
      pr_rope_bwd(dx, r, sh[0], sh[1], sh[2], sh[3], (float)sh[4], il, 0);
      rope_ref(ref, r, sh[0], sh[1], sh[2], sh[3], (float)sh[4], il, 0, -1);
      assert_close("rope dx", dx, ref, n, 2.5e-7, 2.5e-7);
      fd_check("rope dx (finite differences)", f_rope, &c, c.x, n, dx, c.y, r, n, H, TOL);
      pr_rope_bwd(back, c.y, sh[0], sh[1], sh[2], sh[3], (float)sh[4], il, 0);
      for (int64_t i = 0; i < n; i++) ref[i] = c.x[i];
      assert_close("rope dx of y (the inverse rotation)", back, ref, n, 1e-6, 1e-6);
    }
}
END_TEST

// Position 0 leaves x's bits; pair 0 (inv_freq 1) turns by t radians, cos and sin of t rounded to
// f32; interleaved is half on x with each pair's two elements moved to (i, i + D/2), bit for bit;
// (B,H,T,D) (outer B*H, inner 1) is (B,T,H,D) transposed, bit for bit.
START_TEST(test_rope_layouts) {
  int64_t B = 2, T = 5, NH = 3, D = 8, n = B * T * NH * D;
  float *x = frand(n, -2, 2), *y = fzeros(n), *z = fzeros(n), *xm = fzeros(n), *ym = fzeros(n);
  pr_rope_fwd(y, x, B, T, NH, D, 10000.0f, 0);
  for (int64_t b = 0; b < B; b++) {
    int64_t off = b * T * NH * D;
    assert_bitwise("rope position 0", y + off, x + off, NH * D);
    for (int64_t t = 0; t < T; t++)
      for (int64_t h = 0; h < NH; h++) {
        int64_t r = off + (t * NH + h) * D;
        float c = (float)cos((double)t), s = (float)sin((double)t);
        float want[2] = {x[r] * c - x[r + D / 2] * s, x[r + D / 2] * c + x[r] * s};
        float got[2] = {y[r], y[r + D / 2]};
        assert_bitwise("rope pair 0", got, want, 2);
      }
  }
  for (int64_t r = 0; r < n / D; r++)
    for (int64_t i = 0; i < D / 2; i++) {
      xm[r * D + i] = x[r * D + 2 * i];
      xm[r * D + i + D / 2] = x[r * D + 2 * i + 1];
    }
  pr_rope_fwd(y, x, B, T, NH, D, 10000.0f, 1);
  pr_rope_fwd(ym, xm, B, T, NH, D, 10000.0f, 0);
  for (int64_t r = 0; r < n / D; r++)
    for (int64_t i = 0; i < D / 2; i++) {
      z[r * D + 2 * i] = ym[r * D + i];
      z[r * D + 2 * i + 1] = ym[r * D + i + D / 2];
    }
  assert_bitwise("rope interleaved vs half on the moved pairs", y, z, n);
  // (B,T,H,D) -> (B,H,T,D)
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t h = 0; h < NH; h++)
        memcpy(xm + ((b * NH + h) * T + t) * D, x + ((b * T + t) * NH + h) * D, (size_t)D * 4);
  for (int il = 0; il < 2; il++) {
    pr_rope_fwd(y, x, B, T, NH, D, 10000.0f, il);
    pr_rope_fwd(ym, xm, B * NH, T, 1, D, 10000.0f, il);
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < NH; h++)
          memcpy(z + ((b * T + t) * NH + h) * D, ym + ((b * NH + h) * T + t) * D, (size_t)D * 4);
    assert_bitwise("rope (B,H,T,D) vs (B,T,H,D)", y, z, n);
  }
}
END_TEST

static void acc_rope(void *p, float *o, int acc) {
  AccCtx *c = p;
  pr_rope_bwd(o, c->dy, c->n[0], c->n[1], c->n[2], c->n[3], 10000.0f, c->flag[0], acc);
}
typedef struct RopeThr {
  float *x, *dy;
  int interleaved;
} RopeThr;
static void thr_rope(void *p, float *o) { // y, dx at (4, 64, 4, 64): threaded over positions
  RopeThr *c = p;
  pr_rope_fwd(o, c->x, 4, 64, 4, 64, 10000.0f, c->interleaved);
  pr_rope_bwd(o + 65536, c->dy, 4, 64, 4, 64, 10000.0f, c->interleaved, 0);
}

// acc = 1 adds the acc = 0 gradient; 1 and 2 threads give the same bits; a NaN stays in its pair.
START_TEST(test_rope_acc_threads_nan) {
  AccCtx a = {0};
  a.dy = frand(4 * 6 * 3 * 10, -1, 1);
  a.n[0] = 4, a.n[1] = 6, a.n[2] = 3, a.n[3] = 10;
  for (int il = 0; il < 2; il++) {
    a.flag[0] = il;
    check_acc("rope_bwd", acc_rope, &a, 4 * 6 * 3 * 10);
    RopeThr r = {frand(65536, -2, 2), frand(65536, -1, 1), il};
    check_threads("rope", thr_rope, &r, 2 * 65536);
  }
  pr_set_threads(default_threads);
  float x[8] = {NAN, 1, 2, 3, 4, 5, 6, 7}, y[8], dx[8];
  for (int il = 0; il < 2; il++) {
    int64_t q = il ? 1 : 2; // x[0]'s partner (D = 4)
    pr_rope_fwd(y, x, 1, 2, 1, 4, 10000.0f, il);
    pr_rope_bwd(dx, x, 1, 2, 1, 4, 10000.0f, il, 0);
    for (int64_t i = 0; i < 8; i++) {
      bool want = i == 0 || i == q;
      ck_assert_msg(isnan(y[i]) == want && isnan(dx[i]) == want, "rope NaN at %lld (pairing %d)",
                    (long long)i, il);
    }
  }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Out-of-range ids stop the program (exit 1) naming the position and the value.

static void expect_death(void (*fn)(void), const char *needle) {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    fn();
    _exit(0);
  }
  close(fds[1]);
  char buf[4096];
  size_t len = 0;
  ssize_t k;
  while ((k = read(fds[0], buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)k;
  buf[len] = 0;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "expected exit 1, got %d", status);
  ck_assert_msg(strstr(buf, needle) != NULL, "stderr lacks '%s':\n%s", needle, buf);
  ck_assert_msg(strstr(buf, "HINT") != NULL, "stderr lacks a HINT:\n%s", buf);
}

static void bad_embedding(void) {
  int32_t ids[16] = {0};
  ids[13] = 70;
  float w[65 * 2] = {0}, y[16 * 2];
  pr_embedding_fwd(y, ids, w, 16, 65, 2);
}
static void bad_target(void) {
  int32_t tgt[3] = {1, -1, 2};
  float logits[3 * 4] = {0}, loss;
  pr_cross_entropy_fwd(&loss, logits, tgt, 3, 4);
}

START_TEST(test_bad_ids) {
  expect_death(bad_embedding, "id 70 at position 13 is outside [0, 65)");
  expect_death(bad_target, "id -1 at position 1 is outside [0, 4)");
}
END_TEST

// ---------------------------------------------------------------------------------------------
// NaN propagates like PyTorch (checked against torch 1.13): every activation maps NaN to NaN
// (relu(NaN) = NaN, not 0); a NaN in a softmax / layernorm / rms_norm / cross_entropy row makes the
// row's results NaN; relu's backward is threshold_backward(dy, y, 0) = (y <= 0 ? 0 : dy), so at a
// NaN output the gradient passes, and the other activations' gradients at NaN are NaN.

static bool all_nan(const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (!isnan(x[i])) return false;
  return true;
}

START_TEST(test_nan) {
  float x[4] = {NAN, 2.0f, -3.0f, -0.0f}, y[4], dy[4] = {5.0f, 6.0f, 7.0f, 8.0f}, dx[4];
  void (*fwd[])(float *, const float *, int64_t) = {pr_relu_fwd, pr_tanh_fwd, pr_sigmoid_fwd};
  for (int k = 0; k < 5; k++) {
    if (k < 3)
      fwd[k](y, x, 4);
    else
      pr_gelu_fwd(y, NULL, x, 4, k - 3); // tanh approximation, exact
    ck_assert_msg(isnan(y[0]) && !isnan(y[1]) && !isnan(y[2]), "activation %d: NaN in, %g out", k,
                  (double)y[0]);
  }
  pr_relu_fwd(y, x, 4); // finite inputs unchanged: -0 still maps to +0
  ck_assert(y[1] == 2.0f && y[2] == 0.0f && y[3] == 0.0f && !signbit(y[3]));
  pr_relu_bwd(dx, dy, y, 4, 0);
  ck_assert(dx[0] == 5.0f && dx[1] == 6.0f && dx[2] == 0.0f && dx[3] == 0.0f);
  dx[0] = 1.0f;
  pr_relu_bwd(dx, dy, y, 4, 1);
  ck_assert(dx[0] == 6.0f && dx[1] == 12.0f);
  float ndy[2] = {NAN, NAN}, pos[2] = {1.0f, -1.0f}, d2[2];
  pr_relu_bwd(d2, ndy, pos, 2, 0); // a NaN gradient passes where y > 0, is cut where y <= 0
  ck_assert(isnan(d2[0]) && d2[1] == 0.0f);
  pr_gelu_bwd(dx, dy, x, NULL, 4, 0, 0);
  ck_assert(isnan(dx[0]) && !isnan(dx[1]));
  pr_gelu_bwd(dx, dy, x, NULL, 4, 1, 0);
  ck_assert(isnan(dx[0]) && !isnan(dx[1]));
  pr_tanh_fwd(y, x, 4);
  pr_tanh_bwd(dx, dy, y, 4, 0);
  ck_assert(isnan(dx[0]) && !isnan(dx[1]));
  pr_sigmoid_fwd(y, x, 4);
  pr_sigmoid_bwd(dx, dy, y, 4, 0);
  ck_assert(isnan(dx[0]) && !isnan(dx[1]));
  pr_silu_fwd(y, x, 4);
  ck_assert(isnan(y[0]) && !isnan(y[1]) && !isnan(y[2]));
  pr_silu_bwd(dx, dy, x, 4, 0);
  ck_assert(isnan(dx[0]) && !isnan(dx[1]));
  pr_scale_fwd(y, x, 4, 0.5f);
  ck_assert(isnan(y[0]) && y[1] == 1.0f);
  // rows: softmax (contiguous and strided), layernorm, rms_norm, cross_entropy, mse
  float r[2 * 3] = {1.0f, NAN, 2.0f, 1.0f, 2.0f, 3.0f}, s[6], sdx[6];
  pr_softmax_fwd(s, r, 2, 3, 1);
  ck_assert(all_nan(s, 3) && !isnan(s[3]) && !isnan(s[4]) && !isnan(s[5]));
  pr_softmax_bwd(sdx, s, s, 2, 3, 1, 0);
  ck_assert(all_nan(sdx, 3) && !isnan(sdx[3]));
  pr_softmax_fwd(s, r, 1, 2, 3); // strided: columns (1,1), (NaN,2), (2,3)
  ck_assert(!isnan(s[0]) && isnan(s[1]) && isnan(s[4]) && !isnan(s[2]) && !isnan(s[5]));
  float w[3] = {1.0f, 1.0f, 1.0f}, b[3] = {0.0f, 0.0f, 0.0f}, mean[2], rstd[2];
  pr_layernorm_fwd(s, mean, rstd, r, w, b, 2, 3, 1e-5f);
  ck_assert(all_nan(s, 3) && isnan(mean[0]) && !isnan(s[3]) && !isnan(mean[1]));
  pr_rms_norm_fwd(s, rstd, r, w, 2, 3, 1e-6f);
  ck_assert(all_nan(s, 3) && isnan(rstd[0]) && !isnan(s[3]) && !isnan(rstd[1]));
  int32_t tgt[2] = {0, 2};
  float loss;
  pr_cross_entropy_fwd(&loss, r, tgt, 2, 3);
  ck_assert(isnan(loss));
  pr_cross_entropy_fwd(&loss, r + 3, tgt + 1, 1, 3);
  ck_assert(!isnan(loss));
  pr_mse_fwd(&loss, r, r + 3, 3);
  ck_assert(isnan(loss));
}
END_TEST

int main(void) {
  default_threads = omp_get_max_threads();
  Suite *s = suite_create("kernels");
  TCase *tc = tcase_create("kernels");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_matmul);
  tcase_add_test(tc, test_linear);
  tcase_add_test(tc, test_sum_rows);
  tcase_add_test(tc, test_binary);
  tcase_add_test(tc, test_binary_strided);
  tcase_add_test(tc, test_binary_large);
  tcase_add_test(tc, test_unary);
  tcase_add_test(tc, test_gelu_saved_cdf);
  tcase_add_test(tc, test_unary_accuracy);
  tcase_add_test(tc, test_xunary);
  tcase_add_test(tc, test_silu_mul);
  tcase_add_test(tc, test_xunary_exact);
  tcase_add_test(tc, test_div);
  tcase_add_test(tc, test_div_threads);
  tcase_add_test(tc, test_mean);
  tcase_add_test(tc, test_pad);
  tcase_add_test(tc, test_softmax);
  tcase_add_test(tc, test_layernorm);
  tcase_add_test(tc, test_add_layernorm);
  tcase_add_test(tc, test_layernorm_groups);
  tcase_add_test(tc, test_rms_norm);
  tcase_add_test(tc, test_rms_norm_groups);
  tcase_add_test(tc, test_rms_norm_dw_order);
  tcase_add_test(tc, test_embedding);
  tcase_add_test(tc, test_permute);
  tcase_add_test(tc, test_split_concat);
  tcase_add_test(tc, test_attention);
  tcase_add_test(tc, test_attention_model_shapes);
  tcase_add_test(tc, test_cross_entropy);
  tcase_add_test(tc, test_mse);
  tcase_add_test(tc, test_count_correct);
  tcase_add_test(tc, test_acc);
  tcase_add_test(tc, test_threads);
  tcase_add_test(tc, test_attention_bwd_workspace);
  tcase_add_test(tc, test_attention_gqa);
  tcase_add_test(tc, test_attention_gqa_repeat);
  tcase_add_test(tc, test_attention_gqa_threads);
  tcase_add_test(tc, test_attention_sep);
  tcase_add_test(tc, test_rope);
  tcase_add_test(tc, test_rope_layouts);
  tcase_add_test(tc, test_rope_acc_threads_nan);
  tcase_add_test(tc, test_bad_ids);
  tcase_add_test(tc, test_nan);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

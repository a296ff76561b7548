// Unit tests of libpipert outside the kernels: logging, memory, init, optimizers, data,
// safetensors and the command line. Failure paths run in a forked child whose stdout and stderr
// are captured, so that the exit status and the exact message can be checked.
//
// Needs PIPEC_DATA_DIR (tinyshakespeare.txt, digits.csv.gz); the CMake test sets it.
#include "pipert.h"

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[256];

static const char *data_dir(void) {
  const char *d = getenv("PIPEC_DATA_DIR");
  ck_assert_msg(d && d[0], "PIPEC_DATA_DIR is not set (the directory with tinyshakespeare.txt)");
  return d;
}

static void tmp_path(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", tmpdir, name);
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(data, 1, n, f), n);
  fclose(f);
}

static void write_text(const char *path, const char *text) {
  write_file(path, text, strlen(text));
}

// Runs fn(arg) in a child with stdout and stderr captured into out; returns the exit status
// (or 128 + signal).
static int run_child(void (*fn)(void *), void *arg, char *out, size_t cap) {
  int fd[2];
  ck_assert_int_eq(pipe(fd), 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(fd[0]);
    dup2(fd[1], 1);
    dup2(fd[1], 2);
    fn(arg);
    fflush(stdout);
    _exit(0);
  }
  close(fd[1]);
  size_t len = 0;
  ssize_t k;
  while ((k = read(fd[0], out + len, cap - 1 - len)) > 0) len += (size_t)k;
  out[len] = '\0';
  close(fd[0]);
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// Expects fn(arg) to exit with `code` and its output to contain `want`.
static void expect_exit(void (*fn)(void *), void *arg, int code, const char *want) {
  char out[8192];
  int st = run_child(fn, arg, out, sizeof out);
  ck_assert_msg(st == code, "expected exit %d, got %d; output:\n%s", code, st, out);
  ck_assert_msg(strstr(out, want) != NULL, "expected output containing\n  %s\ngot\n  %s", want,
                out);
}

static int count_tmp_files(void) {
  DIR *d = opendir(tmpdir);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".tmp.")) n++;
  closedir(d);
  return n;
}

// ---------------------------------------------------------------------------------------------
// Logging and memory

static void fail_child(void *arg) {
  (void)arg;
  pr_rank = 2;
  prCheck(1 + 1 == 3, "do the right thing", "bad thing %d", 3);
}

// The OpenBLAS kernel set pr_start would load instead of OpenBLAS's own choice: none when it chose
// an AVX2 or AVX-512 one (this machine's default), SKYLAKEX / HASWELL when it runs Prescott on a
// CPU with AVX-512 / AVX2 (ctest runs this suite again as unit_runtime_prescott, with
// OPENBLAS_CORETYPE=PRESCOTT, for that branch).
// A features-then-label table model: F f32 features, then an i32 label below `classes` (0: no
// bound); npy: the files x and y.
static PrTableModel table_model(int64_t F, int64_t classes, const char *x, const char *y) {
  PrTableModel m = {.nfeeds = 2, .columns = F + 1};
  m.feed[0] = (PrFeed){.name = "x", .width = F, .ndim = 1, .dims = {F}, .file = x};
  m.feed[1] = (PrFeed){
      .name = "y", .i32 = true, .target = true, .width = 1, .col = F, .classes = classes, .file = y};
  return m;
}

// Feature j and the label of (shuffled) row k of a features-then-label table.
static float tb_x(const PrTable *t, int64_t k, int64_t j) {
  float v;
  memcpy(&v, t->cells + k * t->ncells + t->off[0] + j, sizeof v);
  return v;
}
static int32_t tb_y(const PrTable *t, int64_t k) {
  int32_t v;
  memcpy(&v, t->cells + k * t->ncells + t->off[1], sizeof v);
  return v;
}

START_TEST(test_blas_better_core) {
  const char *core = pr_blas_core(), *got = pr_blas_better_core();
  __builtin_cpu_init();
  bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (strcmp(core, "Prescott") == 0 && avx2)
    ck_assert_str_eq(got ? got : "(none)", avx512 ? "SKYLAKEX" : "HASWELL");
  else if (strcmp(core, "SkylakeX") == 0 || strcmp(core, "Haswell") == 0 || !avx2)
    ck_assert_msg(got == NULL, "OpenBLAS runs %s: wanted no change, got %s", core, got);
}
END_TEST

START_TEST(test_fail_format) {
  char out[4096];
  int st = run_child(fail_child, NULL, out, sizeof out);
  ck_assert_int_eq(st, 1);
  ck_assert_msg(strncmp(out, "test_runtime.c:", 15) == 0, "%s", out);
  ck_assert_msg(strstr(out, ": rank 2: error: bad thing 3\nHINT: do the right thing\n"), "%s", out);
}
END_TEST

typedef struct LogCase {
  double eta;
} LogCase;

static void log_child(void *arg) {
  LogCase *c = arg;
  pr_log_step(100, 2000, 2.12344, 1e-3, 5234.0, "tok", 12.34, c->eta);
}

START_TEST(test_log_step) {
  char out[1024];
  LogCase c = {192.4};
  ck_assert_int_eq(run_child(log_child, &c, out, sizeof out), 0);
  ck_assert_str_eq(out,
                   "step 100/2000 | loss 2.1234 | lr 1.00e-03 | 5.2k tok/s | 12.3 s | ETA 3m12s\n");
  c.eta = 3720;
  run_child(log_child, &c, out, sizeof out);
  ck_assert_msg(strstr(out, "| ETA 1h02m\n"), "%s", out);
  c.eta = 12.2;
  run_child(log_child, &c, out, sizeof out);
  ck_assert_msg(strstr(out, "| ETA 12s\n"), "%s", out);
}
END_TEST

START_TEST(test_mem) {
  unsigned char *p = pr_alloc_region("test", 1000);
  ck_assert_uint_eq((uintptr_t)p % 64, 0);
  for (int i = 0; i < 1000; i++) ck_assert_uint_eq(p[i], 0);
  pr_free_region(p);
  void *z = pr_alloc_region("empty", 0);
  ck_assert_ptr_nonnull(z);
  pr_free_region(z);
  ck_assert_uint_gt(pr_peak_rss_bytes(), 0);
  double t0 = pr_now(), t1 = pr_now();
  ck_assert(t1 >= t0);
  pr_set_threads(1);
  pr_set_threads(0);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Random numbers and init

START_TEST(test_hash_and_stream) {
  ck_assert_uint_eq(pr_hash_name(""), 0xcbf29ce484222325ULL);
  ck_assert_uint_eq(pr_hash_name("a"), 0xaf63dc4c8601ec8cULL);
  ck_assert_uint_eq(pr_hash_name("transformer.wte.weight"), 0x1784db15dc261b4eULL);
  uint64_t s = 0;
  ck_assert_uint_eq(pr_splitmix64(&s), 0xe220a8397b1dcdafULL);
  ck_assert_uint_eq(pr_splitmix64(&s), 0x6e789e6aa1b965f4ULL);
  s = 99;
  for (int i = 0; i < 10000; i++) {
    double u = pr_uniform01(&s);
    ck_assert(u >= 0.0 && u < 1.0);
  }
}
END_TEST

START_TEST(test_init) {
  enum { N = 100000 };
  float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
  pr_init_normal(a, N, 1337, "fc1.weight", 0.5, 2.0);
  pr_init_normal(b, N, 1337, "fc1.weight", 0.5, 2.0);
  ck_assert_mem_eq(a, b, N * sizeof(float));
  double mean = 0, var = 0;
  for (int i = 0; i < N; i++) mean += a[i];
  mean /= N;
  for (int i = 0; i < N; i++) var += (a[i] - mean) * (a[i] - mean);
  double sd = sqrt(var / N);
  ck_assert_msg(fabs(mean - 0.5) < 0.03, "mean %g", mean);
  ck_assert_msg(fabs(sd - 2.0) < 0.02, "std %g", sd);
  pr_init_normal(b, N, 1337, "fc2.weight", 0.5, 2.0);
  ck_assert(memcmp(a, b, N * sizeof(float)) != 0);
  pr_init_normal(b, N, 1338, "fc1.weight", 0.5, 2.0);
  ck_assert(memcmp(a, b, N * sizeof(float)) != 0);
  // A prefix of a parameter is the prefix of the longer one (odd n drops the last sine).
  pr_init_normal(b, 7, 1337, "fc1.weight", 0.5, 2.0);
  ck_assert_mem_eq(a, b, 7 * sizeof(float));

  // Reference values from a Python reimplementation of the formulas in init.c's header.
  const float normal_ref[5] = {0x1.0117b8p-7f, 0x1.ded028p-6f, 0x1.058f9cp-8f, 0x1.8d6108p-8f,
                               -0x1.2add12p-6f};
  pr_init_normal(b, 5, 1337, "fc1.weight", 0.0, 0.02);
  for (int i = 0; i < 5; i++) ck_assert_float_eq(b[i], normal_ref[i]);
  const float uniform_ref[3] = {-0x1.f67e42p-1f, -0x1.2a677ap-1f, -0x1.fba9a4p-1f};
  pr_init_uniform(b, 3, 7, "b", -1.0, 1.0);
  for (int i = 0; i < 3; i++) ck_assert_float_eq(b[i], uniform_ref[i]);

  pr_init_uniform(a, N, 3, "u", -0.25, 0.75);
  mean = 0;
  for (int i = 0; i < N; i++) {
    ck_assert(a[i] >= -0.25f && a[i] <= 0.75f);
    mean += a[i];
  }
  ck_assert_msg(fabs(mean / N - 0.25) < 0.005, "uniform mean %g", mean / N);

  double bound = 1.5 * sqrt(6.0 / (64 + 128));
  pr_init_xavier(a, N, 3, "x", 1.5, 64, 128);
  float mx = 0;
  for (int i = 0; i < N; i++) {
    ck_assert(fabsf(a[i]) <= (float)bound);
    if (fabsf(a[i]) > mx) mx = fabsf(a[i]);
  }
  ck_assert(mx > 0.999 * bound);

  pr_init_ones(a, 10);
  pr_init_zeros(a + 10, 10);
  ck_assert(a[9] == 1.0f && a[10] == 0.0f && a[19] == 0.0f);
  free(a);
  free(b);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Schedule and optimizers

START_TEST(test_lr_schedule) {
  PrLrSchedule s = {.lr = 1e-3, .min_lr = 1e-4, .warmup = 100, .decay = 2000};
  // nanoGPT get_lr: warmup lr * (it+1) / (warmup+1), cosine to min_lr at lr_decay_iters.
  ck_assert_double_eq_tol(pr_lr_at(&s, 0), 1e-3 * 1 / 101, 1e-18);
  ck_assert_double_eq_tol(pr_lr_at(&s, 99), 1e-3 * 100 / 101, 1e-18);
  ck_assert_double_eq_tol(pr_lr_at(&s, 100), 1e-3, 1e-18);
  ck_assert_double_eq_tol(pr_lr_at(&s, 1050), 5.5e-4, 1e-15);
  double r = (1500.0 - 100) / 1900, want = 1e-4 + 0.5 * (1 + cos(M_PI * r)) * 9e-4;
  ck_assert_double_eq_tol(pr_lr_at(&s, 1500), want, 1e-18);
  ck_assert_double_eq_tol(pr_lr_at(&s, 2000), 1e-4, 1e-18);
  ck_assert_double_eq(pr_lr_at(&s, 2001), 1e-4);
  ck_assert_double_eq(pr_lr_at(&s, 100000), 1e-4);
  PrLrSchedule c = {.lr = 2e-3, .min_lr = 1e-4, .warmup = 10, .decay = 0};
  ck_assert_double_eq_tol(pr_lr_at(&c, 5), 2e-3 * 6 / 11, 1e-18);
  ck_assert_double_eq(pr_lr_at(&c, 10), 2e-3);
  ck_assert_double_eq(pr_lr_at(&c, 5000), 2e-3);
  PrLrSchedule n = {.lr = 1e-3, .min_lr = 0, .warmup = 0, .decay = 0};
  ck_assert_double_eq(pr_lr_at(&n, 0), 1e-3);
}
END_TEST

static const float P0[8] = {0.5f, -1.25f, 2.0f, 0.0f, 3.5f, -0.75f, 1e-3f, -2.5f};
static const float G1[8] = {0.1f, -0.2f, 0.3f, -0.4f, 1.5f, 0.0f, -3.0f, 2e-4f};
static const float G2[8] = {-0.05f, 0.25f, 0.3f, 0.4f, -1.0f, 0.7f, 2.0f, -1e-3f};

static void assert_rel(const float *got, const double *want, int n, double tol) {
  for (int i = 0; i < n; i++) {
    double d = fabs((double)got[i] - want[i]), s = fmax(fabs(want[i]), 1e-6);
    ck_assert_msg(d / s <= tol, "element %d: got %.9g, want %.9g", i, got[i], want[i]);
  }
}

START_TEST(test_adamw) {
  float p[8], m[8] = {0}, v[8] = {0};
  memcpy(p, P0, sizeof p);
  pr_adamw_step(p, G1, 1.0f, m, v, 8, 1e-2, 0.9, 0.999, 1e-8, 0.1, 1);
  // Double-precision reference of the textbook formula, step 1 then step 2.
  double dp[8], dm[8] = {0}, dv[8] = {0};
  const float *gs[2] = {G1, G2};
  double lrs[2] = {1e-2, 5e-3};
  for (int i = 0; i < 8; i++) dp[i] = P0[i];
  for (int t = 1; t <= 2; t++) {
    for (int i = 0; i < 8; i++) {
      double g = gs[t - 1][i];
      dp[i] *= 1 - lrs[t - 1] * 0.1;
      dm[i] = 0.9 * dm[i] + 0.1 * g;
      dv[i] = 0.999 * dv[i] + 0.001 * g * g;
      double mh = dm[i] / (1 - pow(0.9, t)), vh = dv[i] / (1 - pow(0.999, t));
      dp[i] -= lrs[t - 1] * mh / (sqrt(vh) + 1e-8);
    }
    if (t == 1) assert_rel(p, dp, 8, 1e-6);
  }
  pr_adamw_step(p, G2, 1.0f, m, v, 8, 5e-3, 0.9, 0.999, 1e-8, 0.1, 2);
  assert_rel(p, dp, 8, 1e-6);
  assert_rel(m, dm, 8, 1e-6);
  assert_rel(v, dv, 8, 1e-6);
  // Bitwise references from torch 1.13.1 (Debian, CPU): torch.optim.AdamW([p], lr=1e-2,
  // betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, foreach=False), p = P0, grads G1 then G2
  // with lr set to 5e-3 before the second step; printed with float.hex().
  const float p2[8] = {0x1.f3a23cp-2f, -0x1.3d2b72p+0f, 0x1.fb64bep+0f, 0x1.3ee49ap-7f,
                       0x1.bdf4d4p+1f, -0x1.815446p-1f, 0x1.7fe9cep-7f, -0x1.406aa0p+1f};
  const float m2[8] = {0x1.0624dep-8f, 0x1.cac080p-8f, 0x1.d2f1acp-5f,  0x1.0624d8p-8f,
                       0x1.1eb854p-5f, 0x1.1eb852p-4f, -0x1.1eb854p-4f, -0x1.57eed6p-14f};
  const float v2[8] = {0x1.a3184ap-17f, 0x1.adbf98p-14f, 0x1.794c74p-13f, 0x1.4f6066p-12f,
                       0x1.a9b068p-9f,  0x1.00e6b0p-11f, 0x1.a9b068p-7f,  0x1.1ddcb0p-30f};
  for (int i = 0; i < 8; i++) {
    ck_assert_msg(p[i] == p2[i], "p[%d] %a vs torch %a", i, p[i], p2[i]);
    ck_assert_msg(m[i] == m2[i], "m[%d] %a vs torch %a", i, m[i], m2[i]);
    ck_assert_msg(v[i] == v2[i], "v[%d] %a vs torch %a", i, v[i], v2[i]);
  }
}
END_TEST

START_TEST(test_sgd) {
  float p[8], buf[8];
  memcpy(p, P0, sizeof p);
  for (int i = 0; i < 8; i++) buf[i] = 12345.0f; // ignored at t == 1
  pr_sgd_step(p, G1, 1.0f, buf, 8, 0.1, 0.9, 0.01, 1);
  pr_sgd_step(p, G2, 1.0f, buf, 8, 0.1, 0.9, 0.01, 2);
  double dp[8], db[8];
  const float *gs[2] = {G1, G2};
  for (int i = 0; i < 8; i++) dp[i] = P0[i];
  for (int t = 1; t <= 2; t++)
    for (int i = 0; i < 8; i++) {
      double d = gs[t - 1][i] + 0.01 * dp[i];
      db[i] = t == 1 ? d : 0.9 * db[i] + d;
      dp[i] -= 0.1 * db[i];
    }
  assert_rel(p, dp, 8, 1e-6);
  assert_rel(buf, db, 8, 1e-6);
  // torch.optim.SGD([q], lr=0.1, momentum=0.9, weight_decay=0.01, foreach=False), same inputs.
  const float p2[8] = {0x1.f030a0p-2f, -0x1.3bbfdcp+0f, 0x1.e8405cp+0f, 0x1.269596p-5f,
                       0x1.a70a5ap+1f, -0x1.a2ba0ep-1f, 0x1.7b9806p-2f, -0x1.3f107cp+1f};
  const float b2[8] = {0x1.94a4d0p-5f, 0x1.7c9ef0p-5f, 0x1.3721d6p-1f,  0x1.4af500p-5f,
                       0x1.a8ec90p-2f, 0x1.5f1b9cp-1f, -0x1.64dab0p-1f, -0x1.8ba260p-5f};
  for (int i = 0; i < 8; i++) {
    ck_assert_msg(p[i] == p2[i], "p[%d] %a vs torch %a", i, p[i], p2[i]);
    ck_assert_msg(buf[i] == b2[i], "buf[%d] %a vs torch %a", i, buf[i], b2[i]);
  }
  // No momentum: plain p -= lr * g, buffer unused.
  float q[2] = {1.0f, 2.0f}, g[2] = {0.5f, -0.5f};
  pr_sgd_step(q, g, 1.0f, NULL, 2, 0.1, 0.0, 0.0, 1);
  ck_assert_float_eq(q[0], 0.95f);
  ck_assert_float_eq(q[1], 2.05f);
}
END_TEST

START_TEST(test_sumsq) {
  float g[5] = {1e8f, 1.0f, -3.0f, 0.5f, 1e-4f};
  double want = 0;
  for (int i = 0; i < 5; i++) want += (double)g[i] * (double)g[i];
  ck_assert_double_eq(pr_sumsq(g, 5), want);
  float h[3] = {1, 2, 3};
  ck_assert_double_eq(pr_sumsq(h, 3), 14.0);
  // 37 elements: lane j sums elements j and j + 16, the lanes combine (j, j+8), (j, j+4),
  // (j, j+2), (0, 1), then elements 32..36 in order. Two squares of 2^52 and ones: in order, every
  // 1 added to 2^53 is rounded away; in lanes the ones meet each other first.
  float x[37];
  for (int i = 0; i < 37; i++) x[i] = i < 2 ? 67108864.0f : 1.0f;
  double l[16];
  for (int j = 0; j < 16; j++) l[j] = (double)x[j] * x[j] + (double)x[j + 16] * x[j + 16];
  for (int j = 0; j < 8; j++) l[j] += l[j + 8];
  for (int j = 0; j < 4; j++) l[j] += l[j + 4];
  for (int j = 0; j < 2; j++) l[j] += l[j + 2];
  double ref = l[0] + l[1], seq = 0;
  for (int i = 32; i < 37; i++) ref += (double)x[i] * x[i];
  for (int i = 0; i < 37; i++) seq += (double)x[i] * x[i];
  ck_assert_msg(memcmp(&ref, &seq, 8) != 0, "the test's values do not tell the orders apart");
  double got = pr_sumsq(x, 37);
  ck_assert_msg(memcmp(&got, &ref, 8) == 0, "sumsq %.17g, want %.17g", got, ref);
}
END_TEST

// The optimizers' gscale is clipping's scale folded in: the same bits as scaling g in place first
// (g[i] *= scale, what clipping did before) and stepping with gscale 1.
START_TEST(test_optim_gscale) {
  float pa[8], pb[8], ma[8] = {0}, mb[8] = {0}, va[8] = {0}, vb[8] = {0}, g[8];
  memcpy(pa, P0, sizeof pa), memcpy(pb, P0, sizeof pb);
  for (int t = 1; t <= 2; t++) {
    const float *gt = t == 1 ? G1 : G2;
    for (int i = 0; i < 8; i++) g[i] = gt[i] * 0.3f;
    pr_adamw_step(pa, g, 1.0f, ma, va, 8, 1e-2, 0.9, 0.999, 1e-8, 0.1, t);
    pr_adamw_step(pb, gt, 0.3f, mb, vb, 8, 1e-2, 0.9, 0.999, 1e-8, 0.1, t);
  }
  ck_assert(memcmp(pa, pb, sizeof pa) == 0 && memcmp(ma, mb, sizeof ma) == 0 &&
            memcmp(va, vb, sizeof va) == 0);
  float sa[8], sb[8], ba[8], bb[8];
  memcpy(sa, P0, sizeof sa), memcpy(sb, P0, sizeof sb);
  for (int t = 1; t <= 2; t++) {
    const float *gt = t == 1 ? G1 : G2;
    for (int i = 0; i < 8; i++) g[i] = gt[i] * 0.3f;
    pr_sgd_step(sa, g, 1.0f, ba, 8, 0.1, 0.9, 0.01, t);
    pr_sgd_step(sb, gt, 0.3f, bb, 8, 0.1, 0.9, 0.01, t);
  }
  ck_assert(memcmp(sa, sb, sizeof sa) == 0 && memcmp(ba, bb, sizeof ba) == 0);
  // and it is applied: a different scale gives a different step
  pr_adamw_step(pb, G1, 0.5f, mb, vb, 8, 1e-2, 0.9, 0.999, 1e-8, 0.1, 3);
  pr_adamw_step(pa, G1, 1.0f, ma, va, 8, 1e-2, 0.9, 0.999, 1e-8, 0.1, 3);
  ck_assert(memcmp(ma, mb, sizeof ma) != 0);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Token data

// The batch-row draw of data.c's header comment, reimplemented.
static uint64_t ref_draw(uint64_t seed, uint64_t split, uint64_t step, uint64_t mb, uint64_t row) {
  uint64_t s = seed ^ (split * 0xD1B54A32D192ED03ULL) ^ (step * 0xAEF17502108EF2D9ULL) ^
               (mb * 0xDB4F0B9175AE2165ULL) ^ (row * 0x8CB92BA72F3D8DD7ULL);
  return pr_splitmix64(&s);
}

START_TEST(test_tokens_text) {
  char path[512];
  snprintf(path, sizeof path, "%s/tinyshakespeare.txt", data_dir());
  PrTokens t;
  pr_tokens_open_text(&t, path, 0.9);
  ck_assert_int_eq(t.vocab, 65);
  ck_assert_int_eq(t.n, 1115394);
  ck_assert_int_eq(t.n_train, 1003854);
  ck_assert_int_eq(t.chars[0], '\n');
  ck_assert_int_eq(t.chars[1], ' ');
  ck_assert_int_eq(t.chars[64], 'z');
  // "First Citizen:" begins the file.
  const char *start = "First Citizen:";
  for (int i = 0; start[i]; i++) ck_assert_int_eq(t.chars[t.tokens[i]], start[i]);

  enum { B = 8, T = 64 };
  int32_t x[B * T], y[B * T], x2[B * T], y2[B * T];
  pr_tokens_batch(&t, PR_TRAIN, 1337, 0, 0, B, T, x, y);
  pr_tokens_batch(&t, PR_TRAIN, 1337, 0, 0, B, T, x2, y2);
  ck_assert_mem_eq(x, x2, sizeof x);
  ck_assert_mem_eq(y, y2, sizeof y);
  // Offsets of rows 0..3 from the Python reimplementation of the documented formula.
  const int64_t offs[4] = {345725, 662687, 341510, 628549};
  for (int r = 0; r < B; r++) {
    int64_t off = (int64_t)(ref_draw(1337, 0, 0, 0, r) % (uint64_t)(t.n_train - T));
    if (r < 4) ck_assert_int_eq(off, offs[r]);
    ck_assert(off >= 0 && off + T < t.n_train);
    ck_assert_mem_eq(x + r * T, t.tokens + off, T * sizeof(int32_t));
    ck_assert_mem_eq(y + r * T, t.tokens + off + 1, T * sizeof(int32_t));
    for (int j = 0; j + 1 < T; j++) ck_assert_int_eq(y[r * T + j], x[r * T + j + 1]);
  }
  pr_tokens_batch(&t, PR_TRAIN, 1337, 1, 0, B, T, x2, y2);
  ck_assert(memcmp(x, x2, sizeof x) != 0);
  pr_tokens_batch(&t, PR_TRAIN, 1337, 0, 1, B, T, x2, y2);
  ck_assert(memcmp(x, x2, sizeof x) != 0);
  // Validation windows lie in the validation split.
  pr_tokens_batch(&t, PR_VAL, 1337, 3, 2, B, T, x, y);
  const int64_t voffs[2] = {1074973, 1050456};
  for (int r = 0; r < B; r++) {
    int64_t off =
        t.n_train + (int64_t)(ref_draw(1337, 1, 3, 2, r) % (uint64_t)(t.n - t.n_train - T));
    if (r < 2) ck_assert_int_eq(off, voffs[r]);
    ck_assert(off >= t.n_train && off + T < t.n);
    ck_assert_mem_eq(x + r * T, t.tokens + off, T * sizeof(int32_t));
    ck_assert_mem_eq(y + r * T, t.tokens + off + 1, T * sizeof(int32_t));
  }
  pr_tokens_close(&t);
}
END_TEST

// A pipeline stage loads only what it reads: NULL x or y is skipped, the other is the same batch.
START_TEST(test_batches_null) {
  char path[512];
  snprintf(path, sizeof path, "%s/tinyshakespeare.txt", data_dir());
  PrTokens t;
  pr_tokens_open_text(&t, path, 0.9);
  enum { B = 4, T = 16 };
  int32_t x[B * T], y[B * T], x2[B * T], y2[B * T];
  for (int split = PR_TRAIN; split <= PR_VAL; split++) {
    pr_tokens_batch(&t, split, 5, 2, 1, B, T, x, y);
    memset(x2, 0x7f, sizeof x2), memset(y2, 0x7f, sizeof y2);
    pr_tokens_batch(&t, split, 5, 2, 1, B, T, NULL, y2);
    pr_tokens_batch(&t, split, 5, 2, 1, B, T, x2, NULL);
    ck_assert_mem_eq(x, x2, sizeof x);
    ck_assert_mem_eq(y, y2, sizeof y);
  }
  int64_t real = pr_tokens_val_seq_batch(&t, 3, B, T, x, y);
  ck_assert_int_eq(pr_tokens_val_seq_batch(&t, 3, B, T, NULL, y2), real);
  ck_assert_int_eq(pr_tokens_val_seq_batch(&t, 3, B, T, x2, NULL), real);
  ck_assert_mem_eq(x, x2, sizeof x);
  ck_assert_mem_eq(y, y2, sizeof y);
  pr_tokens_close(&t);

  snprintf(path, sizeof path, "%s/digits.csv.gz", data_dir());
  PrTable tb;
  pr_table_open_csv(&tb, path, 0.8, 42, 1.0 / 16.0, NULL);
  float f[B * 64], f2[B * 64];
  int32_t l[B], l2[B];
  pr_table_batch(&tb, 7, 3, 1, B, (void *const[]){f, l});
  memset(f2, 0x7f, sizeof f2), memset(l2, 0x7f, sizeof l2);
  pr_table_batch(&tb, 7, 3, 1, B, (void *const[]){NULL, l2});
  pr_table_batch(&tb, 7, 3, 1, B, (void *const[]){f2, NULL});
  ck_assert_mem_eq(f, f2, sizeof f);
  ck_assert_mem_eq(l, l2, sizeof l);
  real = pr_table_val_batch(&tb, 2, B, (void *const[]){f, l});
  ck_assert_int_eq(pr_table_val_batch(&tb, 2, B, (void *const[]){NULL, l2}), real);
  ck_assert_int_eq(pr_table_val_batch(&tb, 2, B, (void *const[]){f2, NULL}), real);
  ck_assert_mem_eq(f, f2, sizeof f);
  ck_assert_mem_eq(l, l2, sizeof l);
  pr_table_close(&tb);
}
END_TEST

static void tokens_short_child(void *arg) {
  PrTokens t;
  pr_tokens_open_text(&t, arg, 0.5);
  int32_t x[16], y[16];
  pr_tokens_batch(&t, PR_VAL, 1, 0, 0, 1, 16, x, y);
}

static void tokens_odd_child(void *arg) {
  PrTokens t;
  pr_tokens_open_u16(&t, arg, 0.5);
}

START_TEST(test_tokens_u16) {
  char path[512];
  tmp_path(path, sizeof path, "tok.bin");
  const uint16_t ids[10] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 300};
  unsigned char bytes[20];
  for (int i = 0; i < 10; i++) {
    bytes[2 * i] = ids[i] & 0xff;
    bytes[2 * i + 1] = ids[i] >> 8;
  }
  write_file(path, bytes, 20);
  PrTokens t;
  pr_tokens_open_u16(&t, path, 0.8);
  ck_assert_int_eq(t.n, 10);
  ck_assert_int_eq(t.n_train, 8);
  ck_assert_int_eq(t.vocab, 301);
  for (int i = 0; i < 10; i++) ck_assert_int_eq(t.tokens[i], ids[i]);
  int32_t x[6], y[6];
  pr_tokens_batch(&t, PR_TRAIN, 9, 0, 0, 2, 3, x, y);
  for (int r = 0; r < 2; r++) {
    int64_t off = (int64_t)(ref_draw(9, 0, 0, 0, r) % 5);
    for (int j = 0; j < 3; j++) {
      ck_assert_int_eq(x[r * 3 + j], ids[off + j]);
      ck_assert_int_eq(y[r * 3 + j], ids[off + j + 1]);
    }
  }
  pr_tokens_close(&t);

  write_file(path, bytes, 19);
  expect_exit(tokens_odd_child, path, 1, "the size (19 bytes) is odd");
  char txt[512];
  tmp_path(txt, sizeof txt, "short.txt");
  write_text(txt, "abcdefghijklmnopqrstuvwxyz");
  expect_exit(tokens_short_child, txt, 1,
              "the validation split has 13 tokens; a window of context 16 needs at least 17");
}
END_TEST

// Checks at open and the whole validation split in consecutive windows.
typedef struct IdsArgs {
  const char *path;
  int64_t bound;
} IdsArgs;

static void tokens_ids_child(void *arg) {
  IdsArgs *a = arg;
  PrTokens t;
  pr_tokens_open_u16(&t, a->path, 0.5);
  pr_tokens_check_ids(&t, a->path, a->bound, "the model's vocabulary holds 90");
}

START_TEST(test_tokens_val_windows) {
  char path[512];
  tmp_path(path, sizeof path, "seq.bin");
  unsigned char bytes[200];
  for (int i = 0; i < 100; i++) bytes[2 * i] = (unsigned char)i, bytes[2 * i + 1] = 0;
  write_file(path, bytes, 200);
  PrTokens t;
  pr_tokens_open_u16(&t, path, 0.5); // tokens[i] = i; validation = tokens 50..99
  pr_tokens_check_windows(&t, path, 8);
  pr_tokens_check_ids(&t, path, 100, "unused");
  // W = (50 - 1) / 8 = 6 windows at 50, 58, ..., 90; batches of 4: two, the second with 2 rows.
  ck_assert_int_eq(pr_tokens_val_batches(&t, 4, 8), 2);
  int32_t x[32], y[32];
  ck_assert_int_eq(pr_tokens_val_seq_batch(&t, 0, 4, 8, x, y), 4);
  for (int r = 0; r < 4; r++)
    for (int j = 0; j < 8; j++) {
      ck_assert_int_eq(x[r * 8 + j], 50 + 8 * r + j);
      ck_assert_int_eq(y[r * 8 + j], 51 + 8 * r + j);
    }
  ck_assert_int_eq(pr_tokens_val_seq_batch(&t, 1, 4, 8, x, y), 2);
  const int start[4] = {82, 90, 50, 50}; // rows 2, 3: padding (window 0)
  for (int r = 0; r < 4; r++)
    for (int j = 0; j < 8; j++) ck_assert_int_eq(y[r * 8 + j], start[r] + 1 + j);
  ck_assert_int_eq(pr_tokens_val_batches(&t, 6, 8), 1);
  ck_assert_int_eq(pr_tokens_val_batches(&t, 1, 49), 1); // one window of 49 + 1 tokens
  pr_tokens_close(&t);
  IdsArgs a = {path, 90};
  expect_exit(tokens_ids_child, &a, 1,
              "seq.bin: token 90 (byte offset 180) has id 90 but the model's vocabulary holds 90");
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Tables

START_TEST(test_digits_csv) {
  char path[512];
  snprintf(path, sizeof path, "%s/digits.csv.gz", data_dir());
  PrTable t;
  pr_table_open_csv(&t, path, 0.8, 42, 1.0 / 16.0, NULL);
  ck_assert_int_eq(t.rows, 1797);
  ck_assert_int_eq(t.width[0], 64);
  ck_assert_int_eq(t.ncells, 65);
  ck_assert_int_eq(t.n_train, 1437);
  int counts[10] = {0};
  for (int64_t r = 0; r < t.rows; r++) {
    ck_assert(tb_y(&t, r) >= 0 && tb_y(&t, r) <= 9);
    counts[tb_y(&t, r)]++;
  }
  for (int c = 0; c < 10; c++) ck_assert_int_ge(counts[c], 170);
  for (int64_t r = 0; r < t.rows; r++)
    for (int64_t j = 0; j < 64; j++) ck_assert(tb_x(&t, r, j) >= 0.0f && tb_x(&t, r, j) <= 1.0f);

  // Same seed: same table; another seed: another order, same rows.
  PrTable u;
  pr_table_open_csv(&u, path, 0.8, 42, 1.0 / 16.0, NULL);
  ck_assert_mem_eq(t.cells, u.cells, (size_t)(t.rows * t.ncells) * sizeof(uint32_t));
  pr_table_close(&u);
  pr_table_open_csv(&u, path, 0.8, 43, 1.0 / 16.0, NULL);
  ck_assert(memcmp(t.cells, u.cells, (size_t)(t.rows * t.ncells) * sizeof(uint32_t)) != 0);
  pr_table_close(&u);

  enum { B = 64 };
  float x[B * 64], x2[B * 64];
  int32_t y[B], y2[B];
  pr_table_batch(&t, 7, 3, 1, B, (void *const[]){x, y});
  pr_table_batch(&t, 7, 3, 1, B, (void *const[]){x2, y2});
  ck_assert_mem_eq(x, x2, sizeof x);
  for (int r = 0; r < B; r++) {
    int64_t k = (int64_t)(ref_draw(7, 0, 3, 1, r) % (uint64_t)t.n_train);
    ck_assert_mem_eq(x + r * 64, t.cells + k * 65, 64 * sizeof(float));
    ck_assert_int_eq(y[r], tb_y(&t, k));
  }
  pr_table_batch(&t, 7, 4, 1, B, (void *const[]){x2, y2});
  ck_assert(memcmp(x, x2, sizeof x) != 0);

  // Validation: 360 rows; batch 5 of 64 has 40 real rows then wraps to validation row 0.
  ck_assert_int_eq(pr_table_val_batch(&t, 0, B, (void *const[]){x, y}), 64);
  ck_assert_mem_eq(x, t.cells + t.n_train * 65, 64 * sizeof(float));
  ck_assert_int_eq(pr_table_val_batch(&t, 5, B, (void *const[]){x, y}), 40);
  ck_assert_mem_eq(x, t.cells + (t.n_train + 320) * 65, 64 * sizeof(float));
  ck_assert_mem_eq(x + 40 * 64, t.cells + t.n_train * 65, 64 * sizeof(float));
  ck_assert_int_eq(y[40], tb_y(&t, t.n_train));
  ck_assert_int_eq(pr_table_val_batch(&t, 6, B, (void *const[]){x, y}), 0);
  ck_assert_int_eq(pr_table_val_batches(&t, B, 0), 6); // 360 rows: 5 full batches and 40 rows
  ck_assert_int_eq(pr_table_val_batches(&t, B, 4), 4);
  ck_assert_int_eq(pr_table_val_batches(&t, B, INT64_MAX), 6);
  pr_table_close(&t);
}
END_TEST

START_TEST(test_csv_shuffle_header_gz) {
  char plain[512], gz[512];
  tmp_path(plain, sizeof plain, "small.csv");
  tmp_path(gz, sizeof gz, "small.csv.gz");
  // Header, CRLF line ends, blanks around fields, a blank line; feature 0 = row number.
  char text[2048] = "a,b,label\r\n";
  for (int i = 0; i < 10; i++) {
    char line[64];
    snprintf(line, sizeof line, "%d, %d.5 ,%d\r\n%s", i, -i, i % 3, i == 4 ? "\n" : "");
    strcat(text, line);
  }
  write_text(plain, text);
  gzFile g = gzopen(gz, "wb");
  ck_assert_ptr_nonnull(g);
  gzputs(g, text);
  gzclose(g);
  PrTable a, b;
  pr_table_open_csv(&a, plain, 0.75, 42, 2.0, NULL);
  pr_table_open_csv(&b, gz, 0.75, 42, 2.0, NULL);
  ck_assert_int_eq(a.rows, 10);
  ck_assert_int_eq(a.width[0], 2);
  ck_assert_int_eq(a.n_train, 7);
  ck_assert_mem_eq(a.cells, b.cells, 30 * sizeof(uint32_t));
  // The permutation from the Python reimplementation of the documented Fisher-Yates shuffle.
  const int perm[10] = {6, 5, 8, 9, 0, 2, 7, 1, 4, 3};
  for (int k = 0; k < 10; k++) {
    ck_assert_float_eq(tb_x(&a, k, 0), 2.0f * (float)perm[k]);
    ck_assert_float_eq(tb_x(&a, k, 1), perm[k] ? -2.0f * ((float)perm[k] + 0.5f) : 1.0f);
    ck_assert_int_eq(tb_y(&a, k), perm[k] % 3);
  }
  // Table batch rows: draw(seed 5, split 0, step 1, mb 0, row r) % 7 from Python.
  float x[10];
  int32_t y[5];
  pr_table_batch(&a, 5, 1, 0, 5, (void *const[]){x, y});
  const int rows[5] = {6, 4, 1, 2, 3};
  for (int r = 0; r < 5; r++) ck_assert_int_eq(y[r], tb_y(&a, rows[r]));
  pr_table_close(&a);
  pr_table_close(&b);
}
END_TEST

static void csv_child(void *arg) {
  PrTable t;
  pr_table_open_csv(&t, arg, 0.8, 1, 1.0, NULL);
}

static void csv_case(const char *name, const char *text, const char *want) {
  char path[512], full[1024];
  tmp_path(path, sizeof path, name);
  write_text(path, text);
  snprintf(full, sizeof full, "%s%s", path, want);
  expect_exit(csv_child, path, 1, full);
}

// The model's side (issue 27): 2 features, 3 classes; each error names the file and line.
static void csv_model_child(void *arg) {
  const PrTableModel want = table_model(2, 3, NULL, NULL);
  PrTable t;
  pr_table_open_csv(&t, arg, 0.5, 1, 1.0, &want);
  pr_table_close(&t);
}

static void csv_model_case(const char *name, const char *text, const char *want) {
  char path[512], full[1024];
  tmp_path(path, sizeof path, name);
  write_text(path, text);
  snprintf(full, sizeof full, ": rank 0: error: %s%s", path, want);
  expect_exit(csv_model_child, path, 1, full);
}

START_TEST(test_csv_model) {
  csv_model_case("m3.csv", "1,2,3,0\n4,5,6,1\n",
                 ":1: the row has 3 features (then its label) but the model takes 2\n"
                 "HINT: the model's input 'x' has 2 features\n");
  csv_model_case("m1.csv", "f1,label\n\n1,0\n",
                 ":3: the row has 1 features (then its label) but the model takes 2\n");
  csv_model_case("mlabel.csv", "f1,f2,label\n1,2,0\n3, 4 ,3\n",
                 ":3:7: label 3 is out of range: the model has 3 classes\n"
                 "HINT: use labels 0..2, or a model with more classes\n");
  csv_model_case("mlabel_big.csv", "1,2,0\n3,4,99999999\n",
                 ":2:5: label 99999999 is out of range: the model has 3 classes\n");
  char path[512];
  tmp_path(path, sizeof path, "mgood.csv");
  write_text(path, "1,2,0\n3,4,2\n5,6,1\n7,8,2\n");
  expect_exit(csv_model_child, path, 0, "");
}
END_TEST

START_TEST(test_csv_errors) {
  csv_case("nonnum.csv", "1,2,0\n3,abc,1\n", ":2:3: field 2 is not a number: 'abc'");
  csv_case("missing.csv", "1,2,0\n3,1\n",
           ":2:4: missing field: the row has 2 fields, line 1 has 3");
  csv_case("extra.csv", "1,2,0\n3,1,1,7\n",
           ":2:7: extra field: the row has 4 fields, line 1 has 3");
  csv_case("neg.csv", "1,2,0\n3,4,-1\n", ":2:5: label -1 is negative");
  csv_case("frac.csv", "1,2,0\n3,4,1.5\n", ":2:5: label '1.5' is not an integer");
  csv_case("empty.csv", "1,2,0\n3,,1\n", ":2:3: empty field (field 2)");
  csv_case("inf.csv", "1,2,0\n3,inf,1\n", ":2:3: field 2 is not a finite number: 'inf'");
  csv_case("nan1.csv", "nan,2,0\n3,4,1\n", ":1:1: field 1 is not a finite number: 'nan'");
  csv_case("big.csv", "1,2,0\n3, 1e300,1\n", ":2:3: feature 1e+300 is outside the float32 range");
  csv_case("norows.csv", "x,y\n", ": no data rows");
  expect_exit(csv_child, "/nonexistent/data.csv", 1, "cannot open '/nonexistent/data.csv'");
  // error lines name the source location and the rank, then a hint
  char path[512], out[4096];
  tmp_path(path, sizeof path, "nonnum.csv");
  ck_assert_int_eq(run_child(csv_child, path, out, sizeof out), 1);
  ck_assert_msg(strstr(out, "data.c:") == out && strstr(out, ": rank 0: error: ") &&
                    strstr(out, "\nHINT: "),
                "%s", out);
}
END_TEST

// .npy files written here byte by byte (format version 1 or 2).
static void write_npy(const char *path, int version, const char *descr, const char *fortran,
                      const char *shape, const void *data, size_t n) {
  char dict[256];
  snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr, fortran,
           shape);
  size_t pre = version == 1 ? 10 : 12, len = strlen(dict) + 1;
  size_t total = (pre + len + 63) / 64 * 64, hlen = total - pre;
  unsigned char *b = calloc(1, total + n);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (unsigned char)version;
  b[7] = 0;
  b[8] = hlen & 0xff;
  b[9] = (hlen >> 8) & 0xff;
  memset(b + pre, ' ', hlen);
  memcpy(b + pre, dict, strlen(dict));
  b[pre + hlen - 1] = '\n';
  if (version != 1) {
    b[10] = 0;
    b[11] = 0;
  }
  memcpy(b + total, data, n);
  write_file(path, b, total + n);
  free(b);
}

typedef struct NpyArgs {
  const char *x, *y;
} NpyArgs;

static void npy_child(void *arg) {
  NpyArgs *a = arg;
  PrTable t;
  const PrTableModel want = table_model(2, 0, a->x, a->y);
  pr_table_open_npy(&t, 0.5, 3, 1.0, &want);
}

START_TEST(test_npy) {
  char xp[512], yp[512], xp2[512], yp2[512];
  tmp_path(xp, sizeof xp, "x.npy");
  tmp_path(yp, sizeof yp, "y.npy");
  tmp_path(xp2, sizeof xp2, "x2.npy");
  tmp_path(yp2, sizeof yp2, "y2.npy");
  float xf[6 * 2];
  double xd[6 * 2];
  int64_t yl[6];
  unsigned char yb[6];
  for (int i = 0; i < 6; i++) {
    xf[2 * i] = (float)i;
    xf[2 * i + 1] = 10.0f + (float)i;
    xd[2 * i] = i;
    xd[2 * i + 1] = 10.0 + i;
    yl[i] = i % 4;
    yb[i] = (unsigned char)(i % 4);
  }
  write_npy(xp, 1, "<f4", "False", "(6, 2)", xf, sizeof xf);
  write_npy(yp, 1, "<i8", "False", "(6,)", yl, sizeof yl);
  write_npy(xp2, 2, "<f8", "False", "(6, 2)", xd, sizeof xd);
  write_npy(yp2, 1, "|u1", "False", "(6,)", yb, sizeof yb);
  PrTable a, b;
  const PrTableModel ma = table_model(2, 0, xp, yp), mb = table_model(2, 0, xp2, yp2);
  pr_table_open_npy(&a, 0.5, 3, 0.5, &ma);
  pr_table_open_npy(&b, 0.5, 3, 0.5, &mb);
  ck_assert_int_eq(a.rows, 6);
  ck_assert_int_eq(a.width[0], 2);
  ck_assert_int_eq(a.n_train, 3);
  ck_assert_mem_eq(a.cells, b.cells, 18 * sizeof(uint32_t));
  for (int k = 0; k < 6; k++) {
    int r = (int)(tb_x(&a, k, 0) * 2.0f);
    ck_assert_float_eq(tb_x(&a, k, 1), 0.5f * (10.0f + (float)r));
    ck_assert_int_eq(tb_y(&a, k), r % 4);
  }
  pr_table_close(&a);
  pr_table_close(&b);

  char bad[512];
  tmp_path(bad, sizeof bad, "bad.npy");
  NpyArgs args = {bad, yp};
  write_npy(bad, 1, "<f4", "True", "(6, 2)", xf, sizeof xf);
  expect_exit(npy_child, &args, 1, "Fortran-ordered arrays are not supported");
  write_npy(bad, 1, ">f4", "False", "(6, 2)", xf, sizeof xf);
  expect_exit(npy_child, &args, 1, "dtype '>f4' is not little-endian");
  write_npy(bad, 1, "<f4", "False", "(6, 2)", xf, sizeof xf - 4);
  expect_exit(npy_child, &args, 1,
              "bad.npy: the file ends in row 5 of 6: the data section has 44 bytes (from byte "
              "offset 128); the shape and dtype need 48\n");
  args.y = bad; // labels cut short: row 2 of 6 is the first incomplete one
  write_npy(bad, 1, "<i8", "False", "(6,)", yl, 20);
  expect_exit(npy_child, &args, 1, "bad.npy: the file ends in row 2 of 6: ");
  args.y = yp;
  write_npy(bad, 1, "<f4", "False", "(5, 2)", xf, 40);
  expect_exit(npy_child, &args, 1, "has 5 rows but");
  write_text(bad, "not numpy");
  expect_exit(npy_child, &args, 1, "not a .npy file (bad magic at byte offset 0)");
  args.x = xp;
  args.y = bad;
  write_npy(bad, 1, "<f4", "False", "(6,)", xf, 24);
  expect_exit(npy_child, &args, 1, "labels have a floating-point dtype");
}
END_TEST

// The model's side (issue 27): 2 features, 4 classes; each error names the file and row.
static void npy_model_child(void *arg) {
  NpyArgs *a = arg;
  const PrTableModel want = table_model(2, 4, a->x, a->y);
  PrTable t;
  pr_table_open_npy(&t, 0.5, 3, 1.0, &want);
  pr_table_close(&t);
}

START_TEST(test_npy_model) {
  char xp[512], yp[512], x3[512], yb[512], yn[512], want[1200];
  tmp_path(xp, sizeof xp, "mx.npy");
  tmp_path(yp, sizeof yp, "my.npy");
  tmp_path(x3, sizeof x3, "mx3.npy");
  tmp_path(yb, sizeof yb, "my4.npy");
  tmp_path(yn, sizeof yn, "myneg.npy");
  float xf[6 * 3] = {0};
  int64_t y[6] = {0, 1, 2, 3, 0, 1};
  write_npy(xp, 1, "<f4", "False", "(6, 2)", xf, 6 * 2 * sizeof(float));
  write_npy(yp, 1, "<i8", "False", "(6,)", y, sizeof y);
  write_npy(x3, 1, "<f4", "False", "(6, 3)", xf, sizeof xf);
  y[2] = 4;
  write_npy(yb, 1, "<i8", "False", "(6,)", y, sizeof y);
  y[2] = -1;
  write_npy(yn, 1, "<i8", "False", "(6,)", y, sizeof y);
  NpyArgs ok = {xp, yp}, feat = {x3, yp}, big = {xp, yb}, neg = {xp, yn};
  expect_exit(npy_model_child, &ok, 0, "");
  snprintf(want, sizeof want,
           ": rank 0: error: %s: row 0 has 3 features (shape (6, 3)) but the model takes 2\n"
           "HINT: the model's input 'x' has 2 features\n",
           x3);
  expect_exit(npy_model_child, &feat, 1, want);
  snprintf(want, sizeof want,
           ": rank 0: error: %s: row 2: label 4 is out of range: the model has 4 classes\n"
           "HINT: use labels 0..3, or a model with more classes\n",
           yb);
  expect_exit(npy_model_child, &big, 1, want);
  snprintf(want, sizeof want, ": rank 0: error: %s: row 2: label -1 is out of range\n", yn);
  expect_exit(npy_model_child, &neg, 1, want);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// safetensors

static float A[6] = {1, 2, 3, 4, 5, 6}, Bv[4] = {-1, 0.5f, 1e-30f, 3e30f}, C0[1] = {42};

static void make_refs(PrTensorRef *r, float *a, float *b, float *c) {
  r[0] = (PrTensorRef){"fc1.weight", a, 2, {2, 3}};
  r[1] = (PrTensorRef){"fc1.bias", b, 1, {4}};
  r[2] = (PrTensorRef){"scale", c, 0, {0}};
}

START_TEST(test_safetensors_roundtrip) {
  char path[512];
  tmp_path(path, sizeof path, "ckpt.safetensors");
  PrTensorRef r[3];
  make_refs(r, A, Bv, C0);
  const char *meta[] = {"step", "12", "note", "quote \" backslash \\ newline \n"};
  pr_safetensors_save(path, r, 3, meta, 2);
  ck_assert_int_eq(count_tmp_files(), 0);
  // Layout: 8-byte length, padded JSON, 44 bytes of data.
  FILE *f = fopen(path, "rb");
  unsigned char lb[8];
  ck_assert_uint_eq(fread(lb, 1, 8, f), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | lb[i];
  ck_assert_uint_eq(n % 8, 0);
  fseek(f, 0, SEEK_END);
  ck_assert_int_eq(ftell(f), (long)(8 + n + 44));
  fclose(f);

  float a[6], b[4], c[1];
  PrTensorRef q[3];
  make_refs(q, a, b, c);
  pr_safetensors_load(path, q, 3, NULL, false);
  ck_assert_mem_eq(a, A, sizeof a);
  ck_assert_mem_eq(b, Bv, sizeof b);
  ck_assert_mem_eq(c, C0, sizeof c);
  char v[128];
  ck_assert(pr_safetensors_meta(path, "step", v, sizeof v));
  ck_assert_str_eq(v, "12");
  ck_assert(pr_safetensors_meta(path, "note", v, sizeof v));
  ck_assert_str_eq(v, meta[3]);
  ck_assert(!pr_safetensors_meta(path, "absent", v, sizeof v));

  // Overwrite in place (atomic rename over the old file); no metadata this time.
  A[0] = 7;
  pr_safetensors_save(path, r, 3, NULL, 0);
  A[0] = 1;
  pr_safetensors_load(path, q, 3, NULL, false);
  ck_assert_float_eq(a[0], 7.0f);
  ck_assert(!pr_safetensors_meta(path, "step", v, sizeof v));
  ck_assert_int_eq(count_tmp_files(), 0);

  // Optional (tied) tensor absent from the file; extra tensors allowed when asked.
  PrTensorRef two[2] = {q[0], q[1]};
  pr_safetensors_save(path, two, 2, NULL, 0);
  bool opt[3] = {false, false, true};
  c[0] = -5;
  pr_safetensors_load(path, q, 3, opt, false);
  ck_assert_float_eq(c[0], -5.0f);
  pr_safetensors_save(path, r, 3, NULL, 0);
  pr_safetensors_load(path, q, 2, NULL, true);
}
END_TEST

// Writes a safetensors file from hl bytes of header and raw data.
static void write_stn(const char *path, const char *header, size_t hl, const void *data, size_t n,
                      int64_t hlen_override) {
  uint64_t v = hlen_override >= 0 ? (uint64_t)hlen_override : hl;
  unsigned char *b = malloc(8 + hl + n + 1);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
  memcpy(b + 8, header, hl);
  if (n) memcpy(b + 8 + hl, data, n);
  write_file(path, b, 8 + hl + n);
  free(b);
}

// Writes a safetensors file from a header string and raw data.
static void write_st(const char *path, const char *header, const void *data, size_t n,
                     int64_t hlen_override) {
  write_stn(path, header, strlen(header), data, n, hlen_override);
}

START_TEST(test_safetensors_half) {
  char path[512];
  tmp_path(path, sizeof path, "half.safetensors");
  // F16: 1.0, -2.5, 65504, 2^-24 (subnormal), -0, -65504; BF16: 1.0, -2.5, 3.0e38-ish, 2^-128.
  const uint16_t h[6] = {0x3c00, 0xc100, 0x7bff, 0x0001, 0x8000, 0xfbff};
  const uint16_t bf[4] = {0x3f80, 0xc020, 0x7f61, 0x0020};
  unsigned char data[20];
  memcpy(data, h, 12);
  memcpy(data + 12, bf, 8);
  write_st(path,
           "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
           "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[12,20]}}",
           data, 20, -1);
  float hv[6], bv[4];
  PrTensorRef r[2] = {{"h", hv, 2, {2, 3}}, {"b", bv, 1, {4}}};
  pr_safetensors_load(path, r, 2, NULL, false);
  ck_assert_float_eq(hv[0], 1.0f);
  ck_assert_float_eq(hv[1], -2.5f);
  ck_assert_float_eq(hv[2], 65504.0f);
  ck_assert_float_eq(hv[3], 0x1p-24f);
  ck_assert(hv[4] == 0.0f && signbit(hv[4]));
  ck_assert_float_eq(hv[5], -65504.0f);
  ck_assert_float_eq(bv[0], 1.0f);
  ck_assert_float_eq(bv[1], -2.5f);
  ck_assert_float_eq(bv[2], 0x1.c2p+127f);
  ck_assert_float_eq(bv[3], 0x1p-128f);
}
END_TEST

typedef struct StCase {
  const char *path;
  bool allow_extra;
} StCase;

static void st_child(void *arg) {
  StCase *c = arg;
  float a[6], b[4], s[1];
  PrTensorRef r[3];
  make_refs(r, a, b, s);
  pr_safetensors_load(c->path, r, 3, NULL, c->allow_extra);
}

static const char *ST_A =
    "\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}";
static const char *ST_B = "\"fc1.bias\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}";
static const char *ST_C = "\"scale\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[40,44]}";

static void st_case(const char *name, const char *header, size_t ndata, int64_t hlen,
                    const char *want) {
  char path[512], full[1024];
  tmp_path(path, sizeof path, name);
  static unsigned char zeros[256];
  write_st(path, header, zeros, ndata, hlen);
  StCase c = {path, false};
  snprintf(full, sizeof full, "%s%s", path, want);
  expect_exit(st_child, &c, 1, full);
}

START_TEST(test_safetensors_errors) {
  char h[1024];
  // A valid file first (the cases below each break one thing).
  snprintf(h, sizeof h, "{%s,%s,%s}", ST_A, ST_B, ST_C);
  char ok[512];
  tmp_path(ok, sizeof ok, "ok.safetensors");
  static unsigned char zeros[64];
  write_st(ok, h, zeros, 44, -1);
  {
    float a[6], b[4], s[1];
    PrTensorRef r[3];
    make_refs(r, a, b, s);
    pr_safetensors_load(ok, r, 3, NULL, false);
  }
  st_case("empty.safetensors", "", 0, -1, ": the header is not valid JSON (byte offset 8)");
  {
    char p[512];
    tmp_path(p, sizeof p, "tiny.safetensors");
    write_text(p, "abc");
    StCase c = {p, false};
    expect_exit(st_child, &c, 1,
                "tiny.safetensors: the file has 3 bytes, too short for the 8-byte header length");
  }
  st_case("truncated.safetensors", h, 40, -1,
          ": tensor 'scale': data offsets [40, 44] are outside the data section (40 bytes)");
  st_case("hlen.safetensors", h, 44, 100000,
          ": the header length 100000 (bytes 0..7) is larger than the rest of the file");
  snprintf(h, sizeof h, "{%s,%s,%s", ST_A, ST_B, ST_C);
  st_case("json.safetensors", h, 44, -1, ": the header is not valid JSON (byte offset");
  snprintf(h, sizeof h, "{%s,%s,%s}",
           "\"fc1.weight\":{\"dtype\":\"I32\",\"shape\":[2,3],\"data_offsets\":[0,24]}", ST_B,
           ST_C);
  st_case("dtype.safetensors", h, 44, -1,
          ": tensor 'fc1.weight' has dtype I32; expected F32 (or BF16/F16)");
  snprintf(h, sizeof h, "{%s,%s,%s}",
           "\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]}", ST_B,
           ST_C);
  st_case("shape.safetensors", h, 44, -1,
          ": tensor 'fc1.weight' has shape [3, 2]; the model expects [2, 3]");
  snprintf(h, sizeof h, "{%s,%s,%s}", ST_A, ST_B,
           "\"scale\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[40,48]}");
  st_case("oob.safetensors", h, 44, -1,
          ": tensor 'scale': data offsets [40, 48] are outside the data section (44 bytes)");
  snprintf(h, sizeof h, "{%s,%s,%s}", ST_A, ST_B,
           "\"scale\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[36,44]}");
  st_case("size.safetensors", h, 44, -1,
          ": tensor 'scale': data offsets [36, 44] hold 8 bytes but F32 of that shape needs 4");
  snprintf(h, sizeof h, "{%s,%s,%s}", ST_A, ST_B,
           "\"scale\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[20,24]}");
  st_case("overlap.safetensors", h, 44, -1, ": tensors 'fc1.weight' and 'scale' overlap");
  snprintf(h, sizeof h, "{%s,%s}", ST_A,
           "\"scale\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[24,28]}");
  st_case("missing.safetensors", h, 28, -1, ": tensor 'fc1.bias' is missing");
  snprintf(h, sizeof h, "{%s,%s,%s,%s}", ST_A, ST_B, ST_C,
           "\"extra\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[44,52]}");
  st_case("extra.safetensors", h, 52, -1,
          ": tensor 'extra' is in the file but not in the model\nHINT: load a checkpoint of this "
          "model, or delete the tensors the model lacks from the file (in Python: safetensors' "
          "load_file, del, save_file)");
  {
    char p[512];
    tmp_path(p, sizeof p, "extra.safetensors");
    float a[6], b[4], s[1];
    PrTensorRef r[3];
    make_refs(r, a, b, s);
    pr_safetensors_load(p, r, 3, NULL, true);
  }
  snprintf(h, sizeof h, "{%s,%s,%s,%s}", ST_A, ST_B, ST_C, "\"__metadata__\":{\"step\":3}");
  st_case("meta.safetensors", h, 44, -1, ": metadata 'step' is not a string");
  snprintf(h, sizeof h, "{%s,%s,%s,%s}", ST_A, ST_B, ST_C,
           "\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[44,44]}");
  st_case("negshape.safetensors", h, 44, -1,
          ": tensor 'x': \"shape\" holds something other than a non-negative integer");
  // What the reference reader (the safetensors package) refuses is refused here too: bytes
  // after the last tensor, bytes between tensors, a byte size that overflows, a NUL byte in the
  // header, a raw control character in a string, invalid UTF-8; and a name holding NUL.
  snprintf(h, sizeof h, "{%s,%s,%s}", ST_A, ST_B, ST_C);
  st_case("trailing.safetensors", h, 48, -1,
          ": 4 trailing bytes after the last tensor (the data section has 48 bytes, the tensors "
          "end at 44)");
  snprintf(h, sizeof h, "{%s,%s,%s}", ST_A, ST_B,
           "\"scale\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[44,48]}");
  st_case("gap.safetensors", h, 48, -1,
          ": bytes [40, 44) of the data section belong to no tensor (before tensor 'scale')");
  snprintf(h, sizeof h, "{%s,%s,%s,%s}", ST_A, ST_B, ST_C,
           "\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[44,44]}");
  st_case("overflow.safetensors", h, 44, -1,
          ": tensor 'x': the byte size of F32 of shape [4294967296, 4294967296] overflows 64 bits");
  snprintf(h, sizeof h, "{%s,%s,%s,%s}", ST_A, ST_B, ST_C,
           "\"x\":{\"dtype\":\"F32\",\"shape\":[2147483648,2147483648],\"data_offsets\":[44,44]}");
  st_case("overflow2.safetensors", h, 44, -1,
          ": tensor 'x': the byte size of F32 of shape [2147483648, 2147483648] overflows 64 bits");
  {
    // "fc1.weight\0junk" would read as 'fc1.weight' in C; a NUL as padding is not a blank.
    char p[512], hb[1024], full[1024];
    snprintf(h, sizeof h, "{%s,%s,%s}", ST_A, ST_B, ST_C);
    size_t hl = strlen(h);
    memcpy(hb, h, hl);
    hb[11] = '\0'; // inside "fc1.weight"
    tmp_path(p, sizeof p, "nul.safetensors");
    static unsigned char zeros[64];
    write_stn(p, hb, hl, zeros, 44, -1);
    StCase c = {p, false};
    snprintf(full, sizeof full, "%s: the header holds a NUL byte (byte offset 19)", p);
    expect_exit(st_child, &c, 1, full);
    memcpy(hb, h, hl);
    hb[hl] = '\0';
    write_stn(p, hb, hl + 1, zeros, 44, -1);
    snprintf(full, sizeof full, "%s: the header holds a NUL byte (byte offset %zu)", p, 8 + hl);
    expect_exit(st_child, &c, 1, full);
  }
  snprintf(h, sizeof h, "{%s,%s,%s}",
           "\"fc1.weight\\u0000x\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}",
           ST_B, ST_C);
  st_case("escnul.safetensors", h, 44, -1,
          ": a string in the header holds a NUL character (\\u0000, byte offset 20)");
  snprintf(h, sizeof h, "{%s,%s,%s}",
           "\"fc1.weight\t\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}", ST_B,
           ST_C);
  st_case("control.safetensors", h, 44, -1,
          ": a string in the header holds the control character 0x09 (byte offset 20)");
  snprintf(h, sizeof h, "{%s,%s,%s}",
           "\"fc1.weight\xff\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}", ST_B,
           ST_C);
  st_case("utf8.safetensors", h, 44, -1, ": the header is not valid UTF-8 (byte offset 20)");
  // Blanks around the JSON are padding, as for the reference reader; an escaped backslash
  // before "u0000" is no NUL; UTF-8 names are fine.
  {
    char p[512];
    tmp_path(p, sizeof p, "blanks.safetensors");
    snprintf(
        h, sizeof h, " \n{%s,%s,%s,%s} \t\r\n ", ST_A, ST_B, ST_C,
        "\"__metadata__\":{\"note\":\"a\\\\u0000 caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}");
    write_st(p, h, zeros, 44, -1);
    float a[6], b[4], sc[1];
    PrTensorRef r[3];
    make_refs(r, a, b, sc);
    pr_safetensors_load(p, r, 3, NULL, false);
    char v[64];
    ck_assert(pr_safetensors_meta(p, "note", v, sizeof v));
    ck_assert_str_eq(v, "a\\u0000 caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  }
  // A header length over the 100,000,000-byte limit in a (sparse) file long enough to hold it.
  {
    char p[512];
    tmp_path(p, sizeof p, "huge.safetensors");
    write_st(p, "{}", NULL, 0, 150000000);
    ck_assert_int_eq(truncate(p, 150000100), 0);
    StCase c = {p, false};
    expect_exit(
        st_child, &c, 1,
        "huge.safetensors: the header length 150000000 is over the limit of 100000000 bytes");
    unlink(p);
  }
  // Hints come with the errors.
  char out[4096];
  StCase c = {ok, false};
  tmp_path(h, sizeof h, "missing.safetensors");
  c.path = h;
  ck_assert_int_eq(run_child(st_child, &c, out, sizeof out), 1);
  ck_assert_msg(strstr(out, "safetensors.c:") == out && strstr(out, "\nHINT: "), "%s", out);
}
END_TEST

// Values: NaN and infinities are refused with the tensor and element; a tied tensor present in
// the file must hold its owner's values (PyTorch state dicts hold both names, equal).
typedef struct TiedCase {
  const char *path;
} TiedCase;

static void tied_child(void *arg) {
  float w[6];
  PrTensorRef r[2] = {{"w", w, 2, {2, 3}}, {"head", w, 2, {2, 3}}};
  bool opt[2] = {false, true};
  pr_safetensors_load(arg, r, 2, opt, false);
}

START_TEST(test_safetensors_values) {
  char p[512], full[1024];
  tmp_path(p, sizeof p, "nan.safetensors");
  float vals[11] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  char h[1024];
  snprintf(h, sizeof h, "{%s,%s,%s}", ST_A, ST_B, ST_C);
  StCase c = {p, false};
  vals[4] = NAN;
  write_st(p, h, vals, 44, -1);
  snprintf(full, sizeof full, "%s: tensor 'fc1.weight' holds NaN at element 4", p);
  expect_exit(st_child, &c, 1, full);
  vals[4] = 5;
  vals[8] = -INFINITY;
  write_st(p, h, vals, 44, -1);
  snprintf(full, sizeof full, "%s: tensor 'fc1.bias' holds -inf at element 2", p);
  expect_exit(st_child, &c, 1, full);
  // F16 +inf (converted on load) in 'scale'.
  unsigned char mixed[42] = {0};
  const uint16_t inf16 = 0x7c00;
  memcpy(mixed + 40, &inf16, 2);
  snprintf(h, sizeof h, "{%s,%s,%s}", ST_A, ST_B,
           "\"scale\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[40,42]}");
  write_st(p, h, mixed, 42, -1);
  snprintf(full, sizeof full, "%s: tensor 'scale' holds inf at element 0", p);
  expect_exit(st_child, &c, 1, full);

  // Tied: equal values load, different ones are refused naming both, an absent alias is fine.
  const char *both = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                     "\"head\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[24,48]}}";
  float two[12] = {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6};
  write_st(p, both, two, 48, -1);
  float w[6];
  PrTensorRef r[2] = {{"w", w, 2, {2, 3}}, {"head", w, 2, {2, 3}}};
  bool opt[2] = {false, true};
  pr_safetensors_load(p, r, 2, opt, false);
  ck_assert_mem_eq(w, two, sizeof w);
  two[8] = 9;
  write_st(p, both, two, 48, -1);
  snprintf(full, sizeof full,
           "%s: tensors 'w' and 'head' are tied in the model but hold different values (element "
           "2: 3 and 9)\nHINT: the model ties them (one storage): give both the same values, or "
           "leave the second out of the file",
           p);
  expect_exit(tied_child, p, 1, full);
  write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", two, 24, -1);
  memset(w, 0, sizeof w);
  pr_safetensors_load(p, r, 2, opt, false);
  ck_assert_mem_eq(w, two, sizeof w);
}
END_TEST

static void st_save_child(void *arg) {
  PrTensorRef r[3];
  make_refs(r, A, Bv, C0);
  pr_safetensors_save(arg, r, 3, NULL, 0);
}

START_TEST(test_safetensors_save_error) {
  expect_exit(st_save_child, "/nonexistent-dir/x.safetensors", 1,
              "cannot create '/nonexistent-dir/x.safetensors.tmp.");
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Command line

static PrOptions defaults(void) {
  return (PrOptions){.steps = 2000,
                     .lr = 1e-3,
                     .min_lr = 1e-4,
                     .seed = 1337,
                     .eval_every = 250,
                     .eval_batches = 20,
                     .log_every = 10,
                     .threads = 0};
}

START_TEST(test_args_ok) {
  char *argv[] = {"prog",    "--steps",
                  "10",      "--lr=3e-4",
                  "--seed",  "18446744073709551615",
                  "--quiet", "--data",
                  "x.txt",   "--threads",
                  "2",       "--min-lr",
                  "0",       "--eval-every",
                  "0",       "--eval-batches",
                  "5",       "--log-every",
                  "1",       "--init",
                  "i.st",    "--save",
                  "s.st",    "--resume",
                  "r.st",    "--loss-log",
                  "l.txt",   NULL};
  PrOptions o = defaults();
  pr_parse_args(27, argv, &o, "A test program.");
  ck_assert_int_eq(o.steps, 10);
  ck_assert_double_eq(o.lr, 3e-4);
  ck_assert_uint_eq(o.seed, UINT64_MAX);
  ck_assert(o.quiet);
  ck_assert_str_eq(o.data, "x.txt");
  ck_assert_int_eq(o.threads, 2);
  ck_assert_double_eq(o.min_lr, 0.0);
  ck_assert_int_eq(o.eval_every, 0);
  ck_assert_int_eq(o.eval_batches, 5);
  ck_assert_int_eq(o.log_every, 1);
  ck_assert_str_eq(o.init, "i.st");
  ck_assert_str_eq(o.save, "s.st");
  ck_assert_str_eq(o.resume, "r.st");
  ck_assert_str_eq(o.loss_log, "l.txt");
  // Defaults stay when a flag is absent; parsing twice works.
  char *argv2[] = {"prog", NULL};
  PrOptions d = defaults();
  pr_parse_args(1, argv2, &d, NULL);
  ck_assert_int_eq(d.steps, 2000);
  ck_assert_ptr_null(d.data);
}
END_TEST

typedef struct ArgCase {
  char *argv[8];
} ArgCase;

static void args_child(void *arg) {
  ArgCase *c = arg;
  int argc = 0;
  while (c->argv[argc]) argc++;
  PrOptions o = defaults();
  pr_parse_args(argc, c->argv, &o, "Trains a test model.");
}

static void args_case(int code, const char *want, char *a1, char *a2, char *a3) {
  ArgCase c = {{"./bin/prog", a1, a2, a3, NULL}};
  char out[8192];
  int st = run_child(args_child, &c, out, sizeof out);
  ck_assert_msg(st == code, "exit %d for %s %s: %s", st, a1, a2 ? a2 : "", out);
  ck_assert_msg(strstr(out, want), "want '%s', got '%s'", want, out);
}

START_TEST(test_args_errors) {
  args_case(2, "prog: --steps: expected a non-negative integer, got 'abc'\n", "--steps", "abc",
            NULL);
  args_case(2, "prog: --steps: expected a non-negative integer, got '10x'\n", "--steps", "10x",
            NULL);
  args_case(2, "prog: --steps: expected a non-negative integer, got '-1'\n", "--steps", "-1", NULL);
  args_case(2, "prog: --lr: expected a positive number, got '0'\n", "--lr", "0", NULL);
  args_case(2, "prog: --lr: expected a positive number, got 'nan'\n", "--lr", "nan", NULL);
  args_case(2, "prog: --min-lr: expected a non-negative number, got '-1e-4'\n", "--min-lr", "-1e-4",
            NULL);
  args_case(2, "prog: --seed: expected a non-negative integer below 2^64, got '-3'\n", "--seed",
            "-3", NULL);
  args_case(
      2, "prog: --seed: expected a non-negative integer below 2^64, got '18446744073709551616'\n",
      "--seed", "18446744073709551616", NULL);
  args_case(2, "prog: --threads: expected an integer from 0 to 4096, got '-1'\n", "--threads", "-1",
            NULL);
  args_case(2, "prog: --log-every: expected a positive integer, got '0'\n", "--log-every", "0",
            NULL);
  args_case(2, "prog: --steps: expected a non-negative integer, got ''\n", "--steps=", NULL, NULL);
  args_case(2, "prog: --bogus: unknown option (see --help)\n", "--bogus", NULL, NULL);
  args_case(2, "prog: --quiet: unknown option, or one that takes no value (see --help)\n",
            "--quiet=1", NULL, NULL);
  args_case(2, "prog: --steps: missing value\n", "--steps", NULL, NULL);
  args_case(2, "prog: unexpected argument 'extra'\n", "--quiet", "extra", NULL);
  args_case(2, "prog: --data: expected a file name, got ''\n", "--data", "", NULL);
  args_case(0, "Usage: prog [options]\nTrains a test model.\n", "--help", NULL, NULL);
  args_case(0, "  --steps N          training steps [2000]\n", "--help", NULL, NULL);
}
END_TEST

// ---------------------------------------------------------------------------------------------

static void rm_tmpdir(void) {
  DIR *d = opendir(tmpdir);
  if (!d) return;
  struct dirent *e;
  char p[1024];
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(tmpdir);
}

// The step checks' norm is clipping's own sum (pr_sumsq per parameter, canonical order, NULL
// gradients skipped) and the first non-finite gradient is found in that order.
START_TEST(test_grad_norm2) {
  float a[3] = {1.0f, 2.0f, 3.0f}, b[2] = {0.5f, -4.0f}, c[2] = {1.0f, INFINITY};
  PrGrad g[4] = {{"a", a, 3}, {"frozen", NULL, 5}, {"b", b, 2}, {"c", c, 2}};
  double want = pr_sumsq(a, 3) + pr_sumsq(b, 2);
  ck_assert(pr_grad_norm2(g, 3) == want);
  ck_assert_int_eq(pr_first_nonfinite_grad(g, 3), -1);
  ck_assert(isinf(pr_grad_norm2(g, 4)));
  ck_assert_int_eq(pr_first_nonfinite_grad(g, 4), 3);
  b[1] = NAN;
  ck_assert_int_eq(pr_first_nonfinite_grad(g, 4), 2);
}
END_TEST

// --precision's conversions (half.c): exhaustive over the 16-bit formats. Every finite value
// widens and narrows back to itself; the f32 midpoint of two neighbours rounds to the even one
// and the f32 values either side of it to the nearer; overflow becomes inf, a NaN stays a NaN.
static float f32_of(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint32_t bits_of(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}

// Counts the failures of a check in a hot loop (ck_assert per element is slow under the
// sanitizers), keeping the first's value.
#define TALLY(cond, v)                                                                             \
  do {                                                                                             \
    if (!(cond) && !nbad++) first = (uint32_t)(v);                                                 \
  } while (0)

START_TEST(test_half_conversions) {
  int nbad = 0;
  uint32_t first = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    uint16_t a = (uint16_t)h;
    bool nan16 = (a & 0x7c00) == 0x7c00 && (a & 0x3ff), nanb = (a & 0x7f80) == 0x7f80 && (a & 0x7f);
    float f = pr_f16_to_f32(a), g = pr_bf16_to_f32(a);
    TALLY(nan16 ? isnan(f) && isnan(pr_f16_to_f32(pr_f16_from_f32(f))) : pr_f16_from_f32(f) == a,
          h);
    TALLY(nanb ? isnan(g) && isnan(pr_bf16_to_f32(pr_bf16_from_f32(g))) : pr_bf16_from_f32(g) == a,
          h | 0x10000);
    // a and its successor b (positive finite, both formats): the midpoint and its neighbours
    if (a >= 0x7bff) continue;
    for (int bf = 0; bf < 2; bf++) {
      if (bf && a >= 0x7f7f) continue;
      float lo = bf ? g : f, hi = bf ? pr_bf16_to_f32(a + 1) : pr_f16_to_f32(a + 1);
      float mid = (float)(((double)lo + hi) / 2); // exact: one bit more than the format's
      uint16_t (*to)(float) = bf ? pr_bf16_from_f32 : pr_f16_from_f32;
      uint16_t even = (a & 1) ? a + 1 : a;
      TALLY(to(mid) == even && to(nextafterf(mid, 0)) == a &&
                to(nextafterf(mid, INFINITY)) == a + 1 &&
                to(-nextafterf(mid, 0)) == (a | 0x8000), // and the negative side
            h | (uint32_t)(bf + 2) << 16);
    }
  }
  // (the value: the 16-bit pattern; 0x1xxxx bf16's round trip, 0x2xxxx / 0x3xxxx f16's / bf16's
  // midpoint above it)
  ck_assert_msg(nbad == 0, "%d conversions wrong, the first at %05x", nbad, first);
  // Overflow: f16 past 65520 (the midpoint above 65504), bf16 past FLT_MAX's rounding
  ck_assert_uint_eq(pr_f16_from_f32(65519.99f), 0x7bff);
  ck_assert_uint_eq(pr_f16_from_f32(65520.0f), 0x7c00);
  ck_assert_uint_eq(pr_f16_from_f32(-1e30f), 0xfc00);
  ck_assert_uint_eq(pr_f16_from_f32(INFINITY), 0x7c00);
  ck_assert_uint_eq(pr_bf16_from_f32(f32_of(0x7f7fffff)), 0x7f80);
  ck_assert_uint_eq(pr_bf16_from_f32(-INFINITY), 0xff80);
  // Below the smallest f16 subnormal (2^-24): half of it ties to 0, a bit more rounds up
  ck_assert_uint_eq(pr_f16_from_f32(0x1p-25f), 0);
  ck_assert_uint_eq(pr_f16_from_f32(nextafterf(0x1p-25f, 1)), 1);
  ck_assert_uint_eq(pr_f16_from_f32(-0x1p-30f), 0x8000);
  ck_assert_uint_eq(pr_f16_from_f32(1e-45f), 0);
  ck_assert_uint_eq(pr_bf16_from_f32(f32_of(0x00000001)), 0); // f32 subnormals round as any value
  // Signalling NaNs stay NaNs (the truncation alone would make bf16 0x7f80 an inf)
  ck_assert(isnan(pr_bf16_to_f32(pr_bf16_from_f32(f32_of(0x7f800001)))));
  ck_assert(isnan(pr_f16_to_f32(pr_f16_from_f32(f32_of(0xff800001)))));
  ck_assert_uint_eq(bits_of(pr_f16_to_f32(0x0001)), bits_of(0x1p-24f));
  // The array forms (kernels_half.c: F16C eight at a time at the v3 and v4 levels) are the
  // scalar ones, bit for bit: every 16-bit value widened, and narrowed from 2^20 f32 bit
  // patterns (every exponent, NaNs, infs and subnormals among them) at odd offsets and lengths.
  enum { N = 1 << 20 };
  uint16_t *h16 = malloc(N * sizeof *h16), *n16 = malloc(N * sizeof *n16);
  float *w = malloc(N * sizeof *w);
  ck_assert(h16 && n16 && w);
  for (uint32_t k = 0; k < 0x10000; k++) h16[k] = (uint16_t)k;
  for (int bf = 0; bf < 2; bf++) {
    (bf ? pr_bf16_widen : pr_f16_widen)(w + 1, h16, 0xffff);
    for (uint32_t k = 0; k < 0xffff; k++)
      TALLY(bits_of(w[k + 1]) == bits_of(bf ? pr_bf16_to_f32(h16[k]) : pr_f16_to_f32(h16[k])), k);
    ck_assert_msg(nbad == 0, "%s widen: %d wrong, the first at %04x", bf ? "bf16" : "f16", nbad,
                  first);
  }
  uint32_t r = 12345;
  for (int k = 0; k < N; k++) w[k] = f32_of(r = r * 1664525u + 1013904223u);
  for (int bf = 0; bf < 2; bf++) {
    (bf ? pr_bf16_narrow : pr_f16_narrow)(n16 + 3, w + 3, N - 5);
    for (int k = 3; k < N - 2; k++)
      TALLY(n16[k] == (bf ? pr_bf16_from_f32(w[k]) : pr_f16_from_f32(w[k])), bits_of(w[k]));
    ck_assert_msg(nbad == 0, "%s narrow: %d wrong, the first at %08x", bf ? "bf16" : "f16", nbad,
                  first);
  }
  free(h16);
  free(n16);
  free(w);
}
END_TEST

// pr_adamw_params (every tensor in one parallel region, the elements split over the threads) is
// bitwise pr_adamw_step per tensor, at 1 and 2 threads: weight decay where `decay` says, tensors
// without a gradient or storage (frozen, tied, not held) left alone; a tensor large enough to be
// split and odd sizes whose split ends mid-vector. pr_grad_norm2 (the parameters' sums shared
// over the threads) is the canonical-order sum of pr_sumsq at both thread counts.
START_TEST(test_adamw_params) {
  enum { NP = 6 };
  const int64_t n[NP] = {100003, 37, 128, 5, 65536, 9};
  float *w[2][NP], *mm[2][NP], *vv[2][NP], *g[NP];
  PrGrad gr[NP];
  for (int threads = 1; threads <= 2; threads++) {
    pr_set_threads(threads);
    PrParam ps[NP];
    for (int k = 0; k < NP; k++) {
      g[k] = malloc((size_t)n[k] * sizeof(float));
      for (int c = 0; c < 2; c++) {
        w[c][k] = malloc((size_t)n[k] * sizeof(float));
        mm[c][k] = malloc((size_t)n[k] * sizeof(float));
        vv[c][k] = malloc((size_t)n[k] * sizeof(float));
        for (int64_t i = 0; i < n[k]; i++) {
          w[c][k][i] = (float)((i * 7919 + k) % 101) * 0.013f - 0.6f;
          mm[c][k][i] = (float)((i * 31 + k) % 17) * 1e-3f - 8e-3f;
          vv[c][k][i] = (float)((i * 13 + k) % 19) * 1e-5f;
        }
      }
      for (int64_t i = 0; i < n[k]; i++)
        g[k][i] = (float)((i * 104729 + 3 * k) % 97) * 0.02f - 1.0f;
      ps[k] = (PrParam){"p", w[1][k], g[k],  mm[1][k],   vv[1][k], n[k],
                        1,   {n[k]},  false, k % 2 == 0, 0,        NULL};
      gr[k] = (PrGrad){"p", g[k], n[k]};
    }
    ps[3].grad = NULL; // frozen
    ps[5].data = NULL; // not held by this rank
    for (int t = 1; t <= 3; t++) {
      for (int k = 0; k < NP; k++)
        if (ps[k].grad && ps[k].data)
          pr_adamw_step(w[0][k], g[k], 0.7f, mm[0][k], vv[0][k], n[k], 1e-2 / t, 0.9, 0.99, 1e-8,
                        k % 2 == 0 ? 0.1 : 0.0, t);
      pr_adamw_params(ps, NP, 0.7f, 1e-2 / t, 0.9, 0.99, 1e-8, 0.1, t);
    }
    for (int k = 0; k < NP; k++) {
      ck_assert_msg(!memcmp(w[0][k], w[1][k], (size_t)n[k] * sizeof(float)),
                    "threads %d: tensor %d differs", threads, k);
      ck_assert(!memcmp(mm[0][k], mm[1][k], (size_t)n[k] * sizeof(float)));
      ck_assert(!memcmp(vv[0][k], vv[1][k], (size_t)n[k] * sizeof(float)));
    }
    // the frozen tensor and the one not held are untouched by either path
    for (int k = 3; k <= 5; k += 2)
      for (int64_t i = 0; i < n[k]; i++) {
        ck_assert(w[1][k][i] == (float)((i * 7919 + k) % 101) * 0.013f - 0.6f);
        ck_assert(mm[1][k][i] == (float)((i * 31 + k) % 17) * 1e-3f - 8e-3f);
      }
    gr[3].g = NULL;
    double want = 0;
    for (int k = 0; k < NP; k++)
      if (gr[k].g) want += pr_sumsq(gr[k].g, gr[k].n);
    ck_assert(pr_grad_norm2(gr, NP) == want);
    for (int k = 0; k < NP; k++) {
      free(g[k]);
      for (int c = 0; c < 2; c++) free(w[c][k]), free(mm[c][k]), free(vv[c][k]);
    }
  }
  pr_set_threads(0);
}
END_TEST

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/pipert_test.XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  Suite *s = suite_create("runtime");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_fail_format);
  tcase_add_test(tc, test_log_step);
  tcase_add_test(tc, test_mem);
  tcase_add_test(tc, test_hash_and_stream);
  tcase_add_test(tc, test_init);
  tcase_add_test(tc, test_lr_schedule);
  tcase_add_test(tc, test_adamw);
  tcase_add_test(tc, test_sgd);
  tcase_add_test(tc, test_sumsq);
  tcase_add_test(tc, test_optim_gscale);
  tcase_add_test(tc, test_half_conversions);
  tcase_add_test(tc, test_grad_norm2);
  tcase_add_test(tc, test_adamw_params);
  tcase_add_test(tc, test_tokens_text);
  tcase_add_test(tc, test_batches_null);
  tcase_add_test(tc, test_tokens_u16);
  tcase_add_test(tc, test_tokens_val_windows);
  tcase_add_test(tc, test_digits_csv);
  tcase_add_test(tc, test_csv_shuffle_header_gz);
  tcase_add_test(tc, test_csv_errors);
  tcase_add_test(tc, test_csv_model);
  tcase_add_test(tc, test_npy);
  tcase_add_test(tc, test_npy_model);
  tcase_add_test(tc, test_safetensors_roundtrip);
  tcase_add_test(tc, test_safetensors_half);
  tcase_add_test(tc, test_safetensors_errors);
  tcase_add_test(tc, test_safetensors_values);
  tcase_add_test(tc, test_safetensors_save_error);
  tcase_add_test(tc, test_args_ok);
  tcase_add_test(tc, test_args_errors);
  tcase_add_test(tc, test_blas_better_core);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  rm_tmpdir();
  return failed ? 1 : 0;
}

// kernel_rate.c: best-of-N time per call of the step's non-GEMM kernels and of the linear layers'
// products at gpt_char's shapes, and of the fused calls against the separate ones, on the calling
// thread count, with an FNV-1a hash of each output so that two builds of the runtime can be
// compared for speed and for bits (the same hashes).
//
// Each kernel runs `reps` times on fixed pseudo-random inputs; the fastest call is printed. The
// linear products run twice: warm (operands just used) and as in the step's backward, x cold
// (a 64 MiB sweep evicts it) and dy warm (read just before). Link it against the libpipert.a to
// measure; PIPEC_ISA=v1|v3 lowers the kernels' level as for a program. Build and run:
//
//   cc -O2 -Iruntime bench/kernel_rate.c build/lib/libpipert.a
//      $(pkg-config --libs openblas zlib libcjson) -fopenmp -lm -o /tmp/kernel_rate   (one line)
//   /tmp/kernel_rate [REPS [THREADS [NAME-SUBSTRING]]]     (defaults 200, 1, all)
//
// For an A/B, build it against both libraries and alternate the two binaries several times:
// the machine is shared, and only the best of many calls is comparable.
#include "pipert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// FNV-1a over n bytes.
static unsigned long long hash(const void *p, size_t n) {
  const unsigned char *c = p;
  unsigned long long x = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) x = (x ^ c[i]) * 1099511628211ull;
  return x;
}

// n floats uniform in [-1, 1) from seed s (an LCG: the same inputs in every build).
static float *rnd(size_t n, unsigned s) {
  float *a = malloc(n * sizeof(float));
  if (!a) exit(1);
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    a[i] = (float)(s >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
  }
  return a;
}

static volatile float sink;
static float *junk; // the sweep's buffer
#define JUNK ((size_t)16 << 20)
static void evict(void) { // writes 64 MiB: the caches hold none of the operands after it
  for (size_t i = 0; i < JUNK; i += 16) junk[i] += 1.0f;
}
static void touch(const float *p, size_t n) { // reads n floats into the caches
  float s = 0;
  for (size_t i = 0; i < n; i += 16) s += p[i];
  sink = s;
}

static const char *only = "";
static int reps = 200;
// Best-of-reps time of `call` (prep run before each, untimed), printed with the hash of out.
#define RUN(name, prep, call, out, bytes)                                                          \
  do {                                                                                             \
    if (*only && !strstr(name, only)) break;                                                       \
    double best = 1e9;                                                                             \
    for (int r = 0; r < reps; r++) {                                                               \
      prep;                                                                                        \
      double t = now();                                                                            \
      call;                                                                                        \
      t = now() - t;                                                                               \
      best = t < best ? t : best;                                                                  \
    }                                                                                              \
    printf("%-22s %9.1f us  hash %016llx\n", name, best * 1e6, hash(out, bytes));                  \
  } while (0)

int main(int argc, char **argv) {
  reps = argc > 1 ? atoi(argv[1]) : 200;
  pr_set_threads(argc > 2 ? atoi(argv[2]) : 1);
  only = argc > 3 ? argv[3] : "";
  junk = calloc(JUNK, sizeof(float));
  if (!junk || reps < 1) return 1;
  printf("kernels %s, %d threads, best of %d calls\n", pr_isa_name(), pr_threads(), reps);
  // gpt_char: rows 768 = 12 x 64 tokens, C 128, vocabulary 65, 4 heads; softmax rows of 64
  int64_t R = 768, C = 128, V = 65, B = 12, T = 64, NH = 4, SR = 3072, SD = 64;
  float *x = rnd(R * C, 1), *w = rnd(C, 2), *y = rnd(R * C, 4), *mean = rnd(R, 5);
  float *rstd = rnd(R, 6), *dy = rnd(R * C, 7), *dx = rnd(R * C, 8);
  float *lg = rnd(R * V, 9), *dlg = rnd(R * V, 10), loss = 0, dloss = 1.0f;
  int32_t *tgt = malloc(R * sizeof(int32_t));
  for (int64_t i = 0; i < R; i++) tgt[i] = (int32_t)((i * 7) % V);
  float *sx = rnd(SR * SD, 11), *sy = rnd(SR * SD, 12), *sdy = rnd(SR * SD, 13);
  float *sdx = rnd(SR * SD, 14);
  float *qkv = rnd(B * T * 3 * C, 15), *ay = rnd(B * T * C, 16), *att = rnd(B * NH * T * T, 17);
  float *ady = rnd(B * T * C, 18), *dqkv = rnd(B * T * 3 * C, 19);
  void *ws = malloc(pr_attention_bwd_ws(B, T, C, NH, NH, 1));
  RUN("layernorm_fwd", , pr_layernorm_fwd(y, mean, rstd, x, w, NULL, R, C, 1e-5f), y, R * C * 4);
  RUN("layernorm_bwd_x", , pr_layernorm_bwd_x(dx, dy, x, w, mean, rstd, R, C, 0), dx, R * C * 4);
  RUN("softmax_fwd", , pr_softmax_fwd(sy, sx, SR, SD, 1), sy, SR * SD * 4);
  RUN("softmax_bwd", , pr_softmax_bwd(sdx, sdy, sy, SR, SD, 1, 0), sdx, SR * SD * 4);
  RUN("cross_entropy_fwd", , pr_cross_entropy_fwd(&loss, lg, tgt, R, V), &loss, 4);
  RUN("cross_entropy_bwd", , pr_cross_entropy_bwd(dlg, &dloss, lg, tgt, R, V, 0), dlg, R * V * 4);
  RUN("attention_fwd", , pr_attention_fwd(ay, att, qkv, B, T, C, NH, NH, 1), att,
      B * NH * T * T * 4);
  RUN("attention_bwd", , pr_attention_bwd(dqkv, ady, qkv, att, ws, B, T, C, NH, NH, 1, 0), dqkv,
      B * T * 3 * C * 4);
  // The linear layers' products: (in, out) of c_attn, attn.c_proj, c_fc, mlp.c_proj.
  static const int64_t shapes[4][2] = {{128, 384}, {128, 128}, {128, 512}, {512, 128}};
  for (int s = 0; s < 4; s++) {
    int64_t in = shapes[s][0], out = shapes[s][1];
    float *lx = rnd(R * in, 21), *lw = rnd(out * in, 22), *ly = rnd(R * out, 23);
    float *ldy = rnd(R * out, 24), *ldx = rnd(R * in, 25), *ldw = rnd(out * in, 26);
    char n[64];
    snprintf(n, sizeof n, "linear_fwd %lldx%lld", (long long)in, (long long)out);
    RUN(n, , pr_linear_fwd(ly, lx, lw, NULL, R, in, out), ly, R * out * 4);
    snprintf(n, sizeof n, "linear_bwd_x %lldx%lld", (long long)in, (long long)out);
    RUN(n, , pr_linear_bwd_x(ldx, ldy, lw, R, in, out, 0), ldx, R * in * 4);
    snprintf(n, sizeof n, "linear_bwd_w %lldx%lld", (long long)in, (long long)out);
    RUN(n, , pr_linear_bwd_w(ldw, ldy, lx, R, in, out, 0), ldw, out * in * 4);
    snprintf(n, sizeof n, "cold bwd_x %lldx%lld", (long long)in, (long long)out);
    RUN(n, (evict(), touch(ldy, R * out), touch(lw, out * in)),
        pr_linear_bwd_x(ldx, ldy, lw, R, in, out, 0), ldx, R * in * 4);
    snprintf(n, sizeof n, "cold bwd_w %lldx%lld", (long long)in, (long long)out);
    RUN(n, (evict(), touch(ldy, R * out)), pr_linear_bwd_w(ldw, ldy, lx, R, in, out, 0), ldw,
        out * in * 4);
    free(lx), free(lw), free(ly), free(ldy), free(ldx), free(ldw);
  }
  // The MLP's gelu: separate (the linear's product, then the gelu) and fused in the product's
  // epilogue (pipec compile's default), c_fc 128x512 forward and mlp.c_proj's dx backward; the
  // hashes of each pair must match (y, cdf forward; gelu's dx backward).
  int64_t GI = 128, GO = 512, GN = R * GO;
  float *gx = rnd(R * GI, 31), *gw = rnd(GO * GI, 32), *gpre = rnd(GN, 33), *gy = rnd(GN, 34);
  float *gcdf = rnd(GN, 35), *gdy = rnd(R * GI, 36), *gd = rnd(GN, 37), *gdx = rnd(GN, 38);
  RUN("gelu separate fwd", ,
      (pr_linear_fwd(gpre, gx, gw, NULL, R, GI, GO), pr_gelu_fwd(gy, gcdf, gpre, GN, 1)), gy,
      GN * 4);
  if (!*only || strstr("gelu fused fwd", only) || strstr("gelu separate fwd", only))
    printf("%-22s %9s     cdf  %016llx\n", "", "", hash(gcdf, GN * 4));
  RUN("gelu fused fwd", , pr_linear_gelu_fwd(gpre, gy, gcdf, gx, gw, NULL, R, GI, GO, GN, 1), gy,
      GN * 4);
  if (!*only || strstr("gelu fused fwd", only) || strstr("gelu separate fwd", only))
    printf("%-22s %9s     cdf  %016llx\n", "", "", hash(gcdf, GN * 4));
  // backward: mlp.c_proj (in 512, out 128): gd (R,512) = gdy (R,128) . w2 (128,512)
  float *gw2 = rnd(GI * GO, 39);
  RUN("gelu separate bwd", ,
      (pr_linear_bwd_x(gd, gdy, gw2, R, GO, GI, 0), pr_gelu_bwd(gdx, gd, gpre, gcdf, GN, 1, 0)),
      gdx, GN * 4);
  RUN("gelu fused bwd", , pr_linear_bwd_x_gelu(gd, gdx, gdy, gw2, gpre, gcdf, R, GO, GI, GN, 1, 0),
      gdx, GN * 4);
  // The residual add and the layernorm after it (ln_2 after resid_1): separate and fused.
  int64_t ydims[3] = {B, T, C}, str[3] = {T * C, C, 1};
  float *ra = rnd(R * C, 41), *rb = rnd(R * C, 42), *rs = rnd(R * C, 43);
  RUN("add+layernorm separate", ,
      (pr_binary_fwd(rs, ra, rb, 0, 3, ydims, str, str),
       pr_layernorm_fwd(y, mean, rstd, rs, w, NULL, R, C, 1e-5f)),
      y, R * C * 4);
  RUN("add+layernorm fused", ,
      pr_add_layernorm_fwd(rs, y, mean, rstd, ra, rb, w, NULL, 0, 3, ydims, str, str, R, C, 1e-5f),
      y, R * C * 4);
  return 0;
}

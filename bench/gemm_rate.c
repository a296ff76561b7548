// pipec's own GEMM (runtime/gemm.c, pr_gemm) against OpenBLAS's cblas_sgemm at given shapes, one
// thread, interleaved (each round runs the shape once with each, best of REPS rounds after one
// warm-up), and whether the two agree to float rounding (max |own - blas| / max |blas|).
//
//   gemm_rate [SHAPE...]     SHAPE = MxNxK:AB, A and B each N (as is) or T (transposed),
//                            row-major C[M,N] = op(A) op(B); default 768x512x128:NT
//
// Prints "SHAPE own GFLOP/s  openblas GFLOP/s  ratio  rel-diff" per shape. The own GEMM is the
// build the CPU picks (PIPEC_ISA=v3 lowers it). Environment: SGEMM_REPS (default 100). Built
// against the build tree's libpipert.a (numbers: docs/benchmarks.md, "pipec's GEMM"):
//   cc -O2 -Iruntime bench/gemm_rate.c build/lib/libpipert.a $(pkg-config --libs openblas) \
//      -fopenmp -lz -lcjson -lm
#include "gemm.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  openblas_set_num_threads(1);
  const char *env = getenv("SGEMM_REPS");
  int reps = env && atoi(env) > 0 ? atoi(env) : 100;
  const char *dflt[] = {"768x512x128:NT"};
  const char **shapes = argc > 1 ? (const char **)argv + 1 : dflt;
  int nshapes = argc > 1 ? argc - 1 : 1;
  double fsum = 0, town = 0, tblas = 0;
  for (int s = 0; s < nshapes; s++) {
    int m, n, k;
    char ta, tb;
    if (sscanf(shapes[s], "%dx%dx%d:%c%c", &m, &n, &k, &ta, &tb) != 5 || m < 1 || n < 1 || k < 1 ||
        (ta != 'N' && ta != 'T') || (tb != 'N' && tb != 'T')) {
      fprintf(stderr, "gemm_rate: bad shape '%s' (want MxNxK:AB, A and B each N or T)\n",
              shapes[s]);
      return 2;
    }
    float *a = malloc((size_t)m * k * 4), *b = malloc((size_t)k * n * 4),
          *c = malloc((size_t)m * n * 4), *d = malloc((size_t)m * n * 4);
    if (!a || !b || !c || !d) return 1;
    for (long i = 0; i < (long)m * k; i++) a[i] = (float)((i * 7919) % 13) * 0.1f - 0.6f;
    for (long i = 0; i < (long)k * n; i++) b[i] = (float)((i * 104729) % 11) * 0.1f - 0.5f;
    int lda = ta == 'N' ? k : m, ldb = tb == 'N' ? n : k;
    double best_own = 1e9, best_blas = 1e9;
    for (int r = 0; r <= reps; r++) {
      double t = now();
      pr_gemm(ta == 'T', tb == 'T', m, n, k, a, lda, b, ldb, c, n, PR_GEMM_SET);
      t = now() - t;
      if (r > 0 && t < best_own) best_own = t;
      t = now();
      cblas_sgemm(CblasRowMajor, ta == 'N' ? CblasNoTrans : CblasTrans,
                  tb == 'N' ? CblasNoTrans : CblasTrans, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, d, n);
      t = now() - t;
      if (r > 0 && t < best_blas) best_blas = t;
    }
    double diff = 0, big = 0;
    for (long i = 0; i < (long)m * n; i++) {
      diff = fmax(diff, fabs((double)c[i] - d[i]));
      big = fmax(big, fabs((double)d[i]));
    }
    double f = 2.0 * m * n * k;
    fsum += f, town += best_own, tblas += best_blas;
    printf("%-16s own %6.1f  openblas %6.1f  GFLOP/s  %.2fx  rel-diff %.1e\n", shapes[s],
           f / best_own / 1e9, f / best_blas / 1e9, best_blas / best_own,
           big > 0 ? diff / big : diff);
    fflush(stdout);
    free(a), free(b), free(c), free(d);
  }
  if (nshapes > 1)
    printf("%-16s own %6.1f  openblas %6.1f  GFLOP/s  %.2fx  (each shape once)\n", "all",
           fsum / town / 1e9, fsum / tblas / 1e9, tblas / town);
  return 0;
}

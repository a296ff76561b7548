// The machine's sgemm rate at given GEMM shapes: OpenBLAS (whatever kernel it chose, or the one
// OPENBLAS_CORETYPE forces) with the given thread count, best of REPS runs after one warm-up: the
// GEMM-bound limit of a training step (bench/train_step.sh passes gpt_char's shapes).
//
//   sgemm_rate THREADS [SHAPE...]     SHAPE = MxNxK:AB, A and B each N (as is) or T (transposed),
//                                     row-major C[M,N] = op(A) op(B); default 768x512x128:NT
//
// Prints one line per shape, "SHAPE GFLOP/s", and on the first line "kernel NAME" (OpenBLAS's
// openblas_get_corename()). Environment: SGEMM_REPS (default 100). Exit 2 on a usage error.
// Built with -DSGEMM_BLIS and linked with BLIS instead (bench/blas_compare.sh): BLIS's cblas_sgemm,
// its single-threaded (serial) library, THREADS must be 1, the kernel named by BLIS's
// bli_arch_string(bli_arch_query_id()).
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifdef SGEMM_BLIS
// BLIS's (blis.h is not needed for these two; arch_t is an enum)
int bli_arch_query_id(void);
const char *bli_arch_string(int id);
#endif

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// Best GFLOP/s of reps runs of one shape.
static double rate(int m, int n, int k, char ta, char tb, int reps) {
  float *a = malloc((size_t)m * k * 4), *b = malloc((size_t)k * n * 4),
        *c = malloc((size_t)m * n * 4);
  if (!a || !b || !c) {
    fprintf(stderr, "sgemm_rate: out of memory\n");
    exit(1);
  }
  for (long i = 0; i < (long)m * k; i++) a[i] = (float)(i % 7) * 0.1f;
  for (long i = 0; i < (long)k * n; i++) b[i] = (float)(i % 5) * 0.1f;
  // Leading dimensions of the row-major operands as stored: A is M x K (or K x M transposed).
  int lda = ta == 'N' ? k : m, ldb = tb == 'N' ? n : k;
  double best = 1e9;
  for (int r = 0; r <= reps; r++) {
    double t = now();
    cblas_sgemm(CblasRowMajor, ta == 'N' ? CblasNoTrans : CblasTrans,
                tb == 'N' ? CblasNoTrans : CblasTrans, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, n);
    t = now() - t;
    if (r > 0 && t < best) best = t; // run 0 warms caches and OpenBLAS's buffers
  }
  free(a);
  free(b);
  free(c);
  return 2.0 * m * n * k / best / 1e9;
}

int main(int argc, char **argv) {
  if (argc < 2 || atoi(argv[1]) < 1) {
    fprintf(stderr, "usage: sgemm_rate THREADS [MxNxK:AB ...]\n");
    return 2;
  }
#ifdef SGEMM_BLIS
  if (atoi(argv[1]) != 1) {
    fprintf(stderr, "sgemm_rate: the BLIS build runs BLIS's serial library: THREADS must be 1\n");
    return 2;
  }
  printf("kernel %s\n", bli_arch_string(bli_arch_query_id()));
#else
  openblas_set_num_threads(atoi(argv[1]));
  printf("kernel %s\n", openblas_get_corename());
#endif
  const char *env = getenv("SGEMM_REPS");
  int reps = env && atoi(env) > 0 ? atoi(env) : 100;
  const char *dflt[] = {"768x512x128:NT"};
  const char **shapes = argc > 2 ? (const char **)argv + 2 : dflt;
  int nshapes = argc > 2 ? argc - 2 : 1;
  for (int i = 0; i < nshapes; i++) {
    int m, n, k;
    char ta, tb;
    if (sscanf(shapes[i], "%dx%dx%d:%c%c", &m, &n, &k, &ta, &tb) != 5 || m < 1 || n < 1 || k < 1 ||
        (ta != 'N' && ta != 'T') || (tb != 'N' && tb != 'T')) {
      fprintf(stderr, "sgemm_rate: bad shape '%s' (want MxNxK:AB, A and B each N or T)\n",
              shapes[i]);
      return 2;
    }
    printf("%s %.1f\n", shapes[i], rate(m, n, k, ta, tb, reps));
    fflush(stdout);
  }
  return 0;
}

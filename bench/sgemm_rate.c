// The machine's sgemm rate at gpt_char's dominant GEMM shape (the MLP's c_fc: 768 x 512 x 128),
// OpenBLAS with the given thread count, best of many runs: the GEMM-bound limit of a training step.
// usage: sgemm_rate THREADS  -> prints GFLOP/s
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1, M = 768, N = 512, K = 128;
  openblas_set_num_threads(threads);
  float *a = calloc((size_t)M * K, 4), *b = calloc((size_t)N * K, 4), *c = calloc((size_t)M * N, 4);
  for (int i = 0; i < M * K; i++) a[i] = (float)(i % 7) * 0.1f;
  for (int i = 0; i < N * K; i++) b[i] = (float)(i % 5) * 0.1f;
  double best = 1e9;
  for (int r = 0; r < 200; r++) {
    double t = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
    t = now() - t;
    if (t < best) best = t;
  }
  printf("%.1f\n", 2.0 * M * N * K / best / 1e9);
  free(a);
  free(b);
  free(c);
  return 0;
}

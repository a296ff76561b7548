// Small helpers for generated programs that belong to no kernel family.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipert.h"

void pr_init_ids(int32_t *y, int64_t n, uint64_t seed, const char *name, int64_t bound) {
  uint64_t s = seed ^ pr_hash_name(name);
  for (int64_t i = 0; i < n; i++) y[i] = (int32_t)(pr_splitmix64(&s) % (uint64_t)bound);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double pr_median(double *v, int64_t n) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// How OpenMP's threads wait between kernels. libgomp's default spins 300,000 times before it
// sleeps: fastest on a dedicated machine, a collapse when the cores are shared (other ranks,
// other jobs: a 2-thread gpt_char step took 761 ms instead of 27 with a second such job on the 2
// cores). PASSIVE (sleep at once) survives that (46 ms) but costs 25% on a dedicated machine
// (35 ms: every kernel wakes its threads from a futex). 1,000 spins keep most of the speed (30
// ms) and most of the robustness (49 ms). libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT when
// it is loaded, before main, so when the user has set neither the program re-executes itself
// once with GOMP_SPINCOUNT=1000 (launch.sh sets PASSIVE where the ranks exceed the cores).
//
// The same re-execution sets OPENBLAS_CORETYPE when OpenBLAS (initialised before main) fell back
// to a kernel set without AVX2 on a CPU that has it (pr_blas_better_core, blas_info.c), unless
// the user set OPENBLAS_CORETYPE: OpenBLAS too reads it only when it is loaded.
void pr_start(int argc, char **argv) {
  (void)argc;
  bool again = false;
  if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT")) {
    setenv("GOMP_SPINCOUNT", "1000", 1);
    again = true;
  }
  const char *core = getenv("OPENBLAS_CORETYPE") ? NULL : pr_blas_better_core();
  if (core) {
    setenv("PIPEC_OPENBLAS_FALLBACK", pr_blas_core(), 1); // for pr_blas_report's line
    setenv("OPENBLAS_CORETYPE", core, 1);
    again = true;
  }
  if (again) execv("/proc/self/exe", argv);
  // exec failed (no /proc): run on as loaded.
}

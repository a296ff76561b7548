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

// OpenMP's default wait policy spins between parallel regions, which is fastest on a dedicated
// machine but collapses when cores are shared (other ranks, other jobs): a step measured 17x
// slower under load. libgomp reads OMP_WAIT_POLICY when it is loaded, before main, so when the
// user has not chosen one the program re-executes itself once with PASSIVE.
void pr_start(int argc, char **argv) {
  (void)argc;
  if (getenv("OMP_WAIT_POLICY")) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);
  // exec failed (no /proc): run on with the default policy.
}

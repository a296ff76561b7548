// log.c: errors, clocks, progress lines and thread settings of libpipert.
//
// pr_fail prints
//     FILE:LINE: rank R: error: MSG
//     HINT: HINT
// to stderr (FILE without its directories; the HINT line only when a hint is given) and exits
// with status 1. stdout is flushed first so that progress lines and the error stay in order. In a
// pipeline job (pr_transport set) it aborts the whole job instead, after the message is out.
#include "pipert.h"

#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// OpenBLAS's own entry point (declared here so that no particular cblas.h flavour is needed).
extern void openblas_set_num_threads(int num_threads);

int pr_rank = 0;
const PrTransport *pr_transport = NULL;

void pr_fail(const char *file, int line, const char *hint, const char *fmt, ...) {
  fflush(stdout);
  const char *base = file ? strrchr(file, '/') : NULL;
  base = base ? base + 1 : (file ? file : "?");
  // Format into one buffer so that the line reaches stderr in one write (several ranks share it).
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (hint && hint[0])
    fprintf(stderr, "%s:%d: rank %d: error: %s\nHINT: %s\n", base, line, pr_rank, msg, hint);
  else
    fprintf(stderr, "%s:%d: rank %d: error: %s\n", base, line, pr_rank, msg);
  fflush(stderr);
  if (pr_transport) pr_transport->abort(1); // a pipeline: the whole job goes (never returns)
  exit(1);
}

double pr_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// "1h02m", "3m12s", "12s" (rounded to whole seconds); "?" when unknown.
static void fmt_eta(char *out, size_t cap, double s) {
  if (!(s >= 0) || !isfinite(s) || s > 1e9) {
    snprintf(out, cap, "?");
    return;
  }
  long long t = llround(s);
  if (t >= 3600)
    snprintf(out, cap, "%lldh%02lldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60)
    snprintf(out, cap, "%lldm%02llds", t / 60, t % 60);
  else
    snprintf(out, cap, "%llds", t);
}

// 850.0 / 5.2k / 1.3M / 2.0G
static void fmt_rate(char *out, size_t cap, double r) {
  if (!isfinite(r) || r < 0)
    snprintf(out, cap, "?");
  else if (r >= 1e9)
    snprintf(out, cap, "%.1fG", r / 1e9);
  else if (r >= 1e6)
    snprintf(out, cap, "%.1fM", r / 1e6);
  else if (r >= 1e3)
    snprintf(out, cap, "%.1fk", r / 1e3);
  else
    snprintf(out, cap, "%.1f", r);
}

void pr_log_step(int64_t step, int64_t steps, double loss, double lr, double items_per_s,
                 const char *item_unit, double elapsed, double eta) {
  char rate[32], etas[32];
  fmt_rate(rate, sizeof rate, items_per_s);
  fmt_eta(etas, sizeof etas, eta);
  printf("step %lld/%lld | loss %.4f | lr %.2e | %s %s/s | %.1f s | ETA %s\n", (long long)step,
         (long long)steps, loss, lr, rate, item_unit ? item_unit : "items", elapsed, etas);
  fflush(stdout);
}

// The kernels split GEMMs themselves (blocks fixed by the shapes, so results do not depend on
// the thread count) and run OpenBLAS on one thread; n sets the OpenMP threads that run them.
static int kernel_threads; // pr_set_threads's count, 0 = never called

void pr_set_threads(int n) {
  openblas_set_num_threads(1);
  if (n > 0) omp_set_num_threads(n);
  kernel_threads = omp_get_max_threads();
}

int pr_threads(void) {
  return kernel_threads > 0 ? kernel_threads : omp_get_max_threads();
}

// fake_device.c: a PrDevice (pipert.h) over host memory with the CPU's own kernels, so that
// pr_main's device path (trainloop.c: regions from the table, the host mirrors, fresh parameters
// initialised on the host and uploaded, --init / --resume / --save through the mirrors, the step
// end's norm, clipping and optimizer through the table, pipeline.c's device sums) runs and is
// checked without a GPU: a CPU program built with -Dpr_main=fake_pr_main calls fake_pr_main,
// which hands pr_main the program with .device set to this table. Its "device" regions are
// separate allocations from the mirrors, so a missed upload or download, or a pointer translated
// into the wrong memory, changes the numbers. At the end it prints how often each operation ran
// on stderr ("fake device: ..."), so that a test can tell the table was used at all.
// (tests/e2e/device_table.sh compiles it into the generated programs through a CC wrapper.)
#undef pr_main
#include "pipert.h"

#include <string.h>

static long n_upload, n_download, n_sumsq, n_status, n_alloc; // calls of each operation

static void start(uint64_t plan_bytes, size_t scratch) {
  (void)scratch;
  pr_check_plan_memory(plan_bytes);
}
static void *alloc_region(const char *what, size_t bytes) {
  n_alloc++;
  return pr_alloc_region(what, bytes);
}
static void upload(void *dev, const void *host, size_t bytes) {
  n_upload++;
  memcpy(dev, host, bytes);
}
static void download(void *host, const void *dev, size_t bytes) {
  n_download++;
  memcpy(host, dev, bytes);
}
static double sumsq(const float *g, int64_t n) {
  n_sumsq++;
  return pr_sumsq(g, n);
}
static void check_status(void) {
  n_status++;
}
static void finish(void) {
  fprintf(stderr, "fake device: %ld regions, %ld uploads, %ld downloads, %ld sums, %ld checks\n",
          n_alloc, n_upload, n_download, n_sumsq, n_status);
}

static const PrDevice fake = {
    "fake", start,         alloc_region, pr_free_region, upload, download,
    sumsq,  pr_adamw_step, pr_sgd_step,  check_status,   finish,
};

int fake_pr_main(const PrProgram *p, int argc, char **argv);
int fake_pr_main(const PrProgram *p, int argc, char **argv) {
  PrProgram q = *p;
  q.device = &fake;
  q.device_scratch = NULL;
  return pr_main(&q, argc, argv);
}

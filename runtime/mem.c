// mem.c: region allocation (one allocation per region, 64-byte aligned, zeroed) and peak RSS.
#include "pipert.h"

#include <stdlib.h>
#include <string.h>

void *pr_alloc_region(const char *what, size_t bytes) {
  // aligned_alloc wants a multiple of the alignment; a zero-byte region still gets a pointer.
  size_t rounded = bytes == 0 ? 64 : bytes;
  prCheck(rounded <= SIZE_MAX - 63, "the model or batch is too large for this machine",
          "cannot allocate %zu bytes for %s", bytes, what ? what : "a region");
  rounded = (rounded + 63) & ~(size_t)63;
  void *p = aligned_alloc(64, rounded);
  prCheck(p != NULL, "reduce the batch size or the model, or use more pipeline stages",
          "out of memory allocating %zu bytes (%.1f MiB) for %s", bytes,
          (double)bytes / (1024.0 * 1024.0), what ? what : "a region");
  memset(p, 0, rounded);
  return p;
}

void pr_free_region(void *p) {
  free(p);
}

size_t pr_peak_rss_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "VmHWM:", 6) == 0) {
      kb = (size_t)strtoull(line + 6, NULL, 10);
      break;
    }
  }
  fclose(f);
  return kb * 1024;
}

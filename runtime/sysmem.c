// sysmem.c: whether the memory plan fits this machine. The generated program refuses to start
// (before allocating anything) when the plan needs more bytes than the machine's physical memory
// (sysconf: _SC_PHYS_PAGES x _SC_PAGESIZE). Total physical memory rather than MemAvailable: the
// refusal must not depend on what other processes happen to use at that moment; a plan that fits
// in physical memory but not in what is free is left to the kernel.
#include "pipert.h"

#include <unistd.h>

uint64_t pr_physical_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

void pr_check_plan_memory(uint64_t plan_bytes) {
  uint64_t phys = pr_physical_memory();
  prCheck(phys == 0 || plan_bytes <= phys,
          "reduce the batch or the model (or use more microbatches), or run on a machine with more "
          "memory",
          "the memory plan needs %llu bytes (%.1f GiB) but this machine has %llu bytes (%.1f GiB) "
          "of physical memory",
          (unsigned long long)plan_bytes, (double)plan_bytes / (1 << 30), (unsigned long long)phys,
          (double)phys / (1 << 30));
}

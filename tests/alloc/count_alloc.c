// count_alloc.so: an LD_PRELOAD shim that counts heap allocations (malloc, calloc, realloc,
// aligned_alloc, posix_memalign, memalign, valloc, pvalloc) and writes "COUNT GOMP" to the file
// named by ALLOC_COUNT_FILE when the process exits (tests/alloc/run.sh compares the counts of runs
// of different lengths). GOMP counts, apart, the calls made by libgomp itself (COUNT excludes
// them), so that a failure says whose they are: libgomp allocates and frees a team for every
// parallel region that runs on one thread, which the runtime therefore never enters
// (runtime/parallel.h); run.sh requires both to be the same whatever the number of steps.
//
// Every call goes to the next definition (glibc's) through dlsym(RTLD_NEXT); dlsym itself may
// calloc before the real calloc is known, which a small static buffer serves. The count is
// atomic (the kernels allocate from OpenMP threads).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_long count;          // allocation calls so far, libgomp's excluded
static atomic_long gomp;           // allocation calls made by libgomp
static uintptr_t gomp_lo, gomp_hi; // libgomp's mapped address range (0, 0 until known)

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_memalign)(size_t, size_t);
static void *(*real_valloc)(size_t);
static void *(*real_pvalloc)(size_t);
static void (*real_free)(void *);

// What dlsym allocates while the real functions are looked up (never freed to glibc).
static _Alignas(64) char boot[4096];
static size_t boot_used;
static int resolving;

// Counts one allocation made by the code at return address ra.
static inline void tally(void *ra) {
  uintptr_t a = (uintptr_t)ra;
  atomic_fetch_add(a >= gomp_lo && a < gomp_hi ? &gomp : &count, 1);
}

// Finds libgomp's segments (the program and its libraries are mapped before constructors run).
static int find_gomp(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size, (void)data;
  if (!info->dlpi_name || !strstr(info->dlpi_name, "libgomp")) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (!gomp_lo || lo < gomp_lo) gomp_lo = lo;
    if (hi > gomp_hi) gomp_hi = hi;
  }
  return 1;
}

__attribute__((constructor)) static void init(void) {
  dl_iterate_phdr(find_gomp, NULL);
}

static void resolve(void) {
  if (real_malloc || resolving) return;
  resolving = 1;
  real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
  real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
  real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
  real_aligned_alloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
  real_posix_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
  real_memalign = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
  real_valloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "valloc");
  real_pvalloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "pvalloc");
  real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
  resolving = 0;
}

static int from_boot(const void *p) {
  return (const char *)p >= boot && (const char *)p < boot + sizeof boot;
}

static void *boot_alloc(size_t n) {
  size_t at = (boot_used + 63) & ~(size_t)63;
  if (at + n > sizeof boot) return NULL;
  boot_used = at + n;
  return boot + at;
}

void *malloc(size_t n) {
  resolve();
  if (!real_malloc) return boot_alloc(n);
  tally(__builtin_return_address(0));
  return real_malloc(n);
}

void *calloc(size_t k, size_t n) {
  resolve();
  if (!real_calloc) return boot_alloc(k * n); // static memory is zeroed
  tally(__builtin_return_address(0));
  return real_calloc(k, n);
}

void *realloc(void *p, size_t n) {
  resolve();
  tally(__builtin_return_address(0));
  if (from_boot(p)) { // never happens in practice: copy out of the boot buffer
    void *q = real_malloc(n);
    if (q) memcpy(q, p, n < sizeof boot ? n : sizeof boot);
    return q;
  }
  return real_realloc(p, n);
}

void free(void *p) {
  if (from_boot(p)) return;
  resolve();
  if (real_free) real_free(p);
}

void *aligned_alloc(size_t a, size_t n) {
  resolve();
  tally(__builtin_return_address(0));
  return real_aligned_alloc(a, n);
}

int posix_memalign(void **p, size_t a, size_t n) {
  resolve();
  tally(__builtin_return_address(0));
  return real_posix_memalign(p, a, n);
}

void *memalign(size_t a, size_t n) {
  resolve();
  tally(__builtin_return_address(0));
  return real_memalign(a, n);
}

void *valloc(size_t n) {
  resolve();
  tally(__builtin_return_address(0));
  return real_valloc(n);
}

void *pvalloc(size_t n) {
  resolve();
  tally(__builtin_return_address(0));
  return real_pvalloc(n);
}

__attribute__((destructor)) static void report(void) {
  const char *path = getenv("ALLOC_COUNT_FILE");
  if (!path) return;
  FILE *f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "%ld %ld\n", (long)atomic_load(&count), (long)atomic_load(&gomp));
  fclose(f);
}

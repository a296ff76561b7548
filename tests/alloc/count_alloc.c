// count_alloc.so: an LD_PRELOAD shim that counts heap allocations (malloc, calloc, realloc,
// aligned_alloc, posix_memalign, memalign, valloc, pvalloc) and writes "COUNT GOMP POOL" to the
// file named by ALLOC_COUNT_FILE when the process exits (tests/alloc/run.sh compares the counts of
// runs of different lengths; under mpirun "%r" in the name stands for the rank, so that each rank
// writes its own). GOMP counts, apart, the calls made by libgomp itself (COUNT excludes them), so
// that a failure says whose they are: libgomp allocates and frees a team for every parallel region
// that runs on one thread, which the runtime therefore never enters (runtime/parallel.h); run.sh
// requires both to be the same whatever the number of steps.
//
// Pipeline programs (S > 1) run Open MPI, whose own setup is not the same from run to run. What
// its setup and teardown calls allocate, in every thread while they run, is not counted
// (MPI_Init_thread, MPI_Init, MPI_Comm_dup, MPI_Comm_split_type, MPI_Comm_free, MPI_Finalize: the
// runtime calls them only at its start and end; e.g. which rank creates the job's session
// directory first changes a few allocations). POOL counts, apart, the blocks Open MPI's free lists
// grow by (opal_free_list_grow_st): a list grows when more of its items (requests, fragments) are
// in use at once than ever before, which depends on how the ranks' timings interleave; it is
// reported, not compared. Everything else Open MPI allocates counts in COUNT.
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

static atomic_long count;          // allocation calls so far, libgomp's and POOL's excluded
static atomic_long gomp;           // allocation calls made by libgomp
static atomic_long pool;           // allocation calls made by opal_free_list_grow_st
static uintptr_t gomp_lo, gomp_hi; // libgomp's mapped address range (0, 0 until known)
static uintptr_t pal_lo, pal_hi;   // libopen-pal's (Open MPI's free lists), likewise

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

static atomic_int in_mpi; // an MPI setup or teardown call is running (depth): nothing counts

// Counts one allocation made by the code at return address ra.
static inline void tally(void *ra) {
  if (atomic_load_explicit(&in_mpi, memory_order_relaxed)) return;
  uintptr_t a = (uintptr_t)ra;
  atomic_long *c = &count;
  if (a >= gomp_lo && a < gomp_hi) {
    c = &gomp;
  } else if (a >= pal_lo && a < pal_hi) { // rare outside MPI's setup: dladdr only then
    Dl_info d;
    if (dladdr(ra, &d) && d.dli_sname && strcmp(d.dli_sname, "opal_free_list_grow_st") == 0)
      c = &pool;
  }
  atomic_fetch_add(c, 1);
}

// Finds libgomp's and libopen-pal's segments (the program and its libraries are mapped before
// constructors run).
static int find_libs(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size, (void)data;
  uintptr_t *lo, *hi;
  if (info->dlpi_name && strstr(info->dlpi_name, "libgomp"))
    lo = &gomp_lo, hi = &gomp_hi;
  else if (info->dlpi_name && strstr(info->dlpi_name, "libopen-pal"))
    lo = &pal_lo, hi = &pal_hi;
  else
    return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t l = info->dlpi_addr + ph->p_vaddr, h = l + ph->p_memsz;
    if (!*lo || l < *lo) *lo = l;
    if (h > *hi) *hi = h;
  }
  return 0;
}

static char rank[16] = "x"; // the MPI rank under mpirun, read at start (MPI_Finalize unsets it)

__attribute__((constructor)) static void init(void) {
  dl_iterate_phdr(find_libs, NULL);
  const char *r = getenv("OMPI_COMM_WORLD_RANK");
  if (r && strlen(r) < sizeof rank) strcpy(rank, r);
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

// Open MPI's setup and teardown calls, forwarded to libmpi.so's (never called by a one-rank
// program) with counting off while they run.
#define PAUSED(ret, name, params, args)                                                            \
  ret name params;                                                                                 \
  ret name params {                                                                                \
    static ret(*real) params;                                                                      \
    if (!real) real = (ret(*) params)dlsym(RTLD_NEXT, #name);                                      \
    atomic_fetch_add(&in_mpi, 1);                                                                  \
    ret rc = real args;                                                                            \
    atomic_fetch_sub(&in_mpi, 1);                                                                  \
    return rc;                                                                                     \
  }
typedef void *MpiComm; // MPI_Comm (a pointer in Open MPI), MPI_Info likewise
PAUSED(int, MPI_Init_thread, (int *argc, char ***argv, int required, int *provided),
       (argc, argv, required, provided))
PAUSED(int, MPI_Init, (int *argc, char ***argv), (argc, argv))
PAUSED(int, MPI_Comm_dup, (MpiComm comm, MpiComm *out), (comm, out))
PAUSED(int, MPI_Comm_split_type, (MpiComm comm, int type, int key, void *info, MpiComm *out),
       (comm, type, key, info, out))
PAUSED(int, MPI_Comm_free, (MpiComm * comm), (comm))
PAUSED(int, MPI_Finalize, (void), ())

__attribute__((destructor)) static void report(void) {
  const char *path = getenv("ALLOC_COUNT_FILE");
  if (!path) return;
  // Under mpirun every rank writes its own file: "%r" in the name stands for the rank.
  char name[4096];
  const char *at = strstr(path, "%r");
  if (at && strlen(path) < sizeof name - 32) {
    snprintf(name, sizeof name, "%.*s%s%s", (int)(at - path), path, rank, at + 2);
    path = name;
  }
  FILE *f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "%ld %ld %ld\n", (long)atomic_load(&count), (long)atomic_load(&gomp),
          (long)atomic_load(&pool));
  fclose(f);
}

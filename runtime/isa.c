// isa.c: picks, once per process, which build of the kernels the portable libpipert.a runs: v4
// (AVX-512) where the CPU has x86-64-v4, v3 (AVX2, FMA) where it has x86-64-v3, else v1 (the
// x86-64 baseline). Every function of isa_kernels.h is a GNU ifunc over its three builds
// (f__v1, f__v3, f__v4, compiled from the same source with -march=x86-64-v3 / -v4 and renamed by
// isa_rename.h): the dynamic loader calls its resolver once, before main, and binds every call
// to the chosen build; a call costs what a direct call does. The builds compute the same bits
// (isa_kernels.h), so the choice changes only the speed.
//
// PIPEC_ISA=v1|v3 lowers the level (tests/e2e/march.sh runs each one; a level above the CPU's is
// never taken: no SIGILL). The resolvers run while the loader relocates the program, before any
// of its calls into libc can be made (their GOT entries are not bound yet) and before any
// sanitizer starts: they use cpuid (libgcc's, linked in) and read the environment from
// /proc/self/environ by raw system calls, and are not instrumented.
#include "gemm.h"
#include "pipert.h"

#define NO_INSTRUMENT __attribute__((no_sanitize_address, no_sanitize("undefined"), unused))

// A system call with up to three arguments, without libc.
NO_INSTRUMENT static long raw_syscall(long n, long a, long b, long c) {
  long r;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
  return r;
}

// The level PIPEC_ISA asks for (1 or 3), or 0: found in /proc/self/environ (NUL-separated
// NAME=VALUE entries; read once, the first 64 KiB).
NO_INSTRUMENT static int env_level(void) {
  static char buf[65536];
  static long len = -1;
  if (len < 0) {
    long fd = raw_syscall(2 /* open */, (long)"/proc/self/environ", 0 /* O_RDONLY */, 0);
    len = 0;
    if (fd >= 0) {
      long r;
      while (len < (long)sizeof buf - 1 &&
             (r = raw_syscall(0 /* read */, fd, (long)(buf + len), (long)sizeof buf - 1 - len)) > 0)
        len += r;
      raw_syscall(3 /* close */, fd, 0, 0);
    }
    buf[len] = 0;
  }
  static const char key[] = "PIPEC_ISA=v";
  for (long i = 0; i < len; i++) {
    if (i == 0 || buf[i - 1] == 0) {
      long k = 0;
      while (key[k] && buf[i + k] == key[k]) k++;
      if (!key[k] && (buf[i + k] == '1' || buf[i + k] == '3') && buf[i + k + 1] == 0)
        return buf[i + k] - '0';
    }
  }
  return 0;
}

// The level the CPU allows, lowered to PIPEC_ISA's when that is set to a lower one.
NO_INSTRUMENT static int isa_level(void) {
  __builtin_cpu_init();
  int have = __builtin_cpu_supports("x86-64-v4") ? 4 : __builtin_cpu_supports("x86-64-v3") ? 3 : 1;
  int want = env_level();
  return want && want < have ? want : have;
}

#define PR_ISA_KERNEL(f)                                                                           \
  extern __typeof__(f) f##__v1, f##__v3, f##__v4;                                                  \
  NO_INSTRUMENT static __typeof__(f) *f##__pick(void) {                                            \
    int l = isa_level();                                                                           \
    return l >= 4 ? f##__v4 : l >= 3 ? f##__v3 : f##__v1;                                          \
  }                                                                                                \
  extern __typeof__(f) f __attribute__((ifunc(#f "__pick")));
#include "isa_kernels.h"
#undef PR_ISA_KERNEL

const char *pr_isa_name(void) {
  switch (isa_level()) {
  case 4:
    return "x86-64-v4 (AVX-512)";
  case 3:
    return "x86-64-v3 (AVX2)";
  default:
    return "x86-64-v1 (SSE2)";
  }
}

// blas_info.c: says which BLAS and which of its kernels a generated program runs, and warns when
// that kernel is far below the CPU.
//
// Debian's OpenBLAS 0.3.21 is built with DYNAMIC_ARCH: at load time it picks one of its kernel
// sets from the CPU's cpuid. A CPU it does not recognise (Sapphire/Emerald Rapids for 0.3.21) gets
// the Prescott (SSE3) kernels, whose sgemm runs 3-5x below the SkylakeX (AVX-512) or Haswell
// (AVX2) ones; a whole training step runs about 3x slower, silently. pr_blas_report prints, before
// the first training step and unless --quiet:
//     stdout: blas OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Prescott MAX_THREADS=64,
//             kernel Prescott, CPU avx512
//     stderr: PROG: warning: OpenBLAS runs its Prescott kernels (no AVX2) on a CPU with AVX-512 ...
//             HINT: export OPENBLAS_CORETYPE=SKYLAKEX ...
// the warning only when the kernel is one of 0.3.21's x86-64 kernel sets without AVX2 (old_kernel
// below) and the CPU has AVX2. Unless the user set OPENBLAS_CORETYPE, the program does not run
// with such a fallback: pr_start (util.c) re-executes it with OPENBLAS_CORETYPE=SKYLAKEX (HASWELL
// on an AVX2 CPU) from pr_blas_better_core, and the report then adds
//     stdout: blas kernel SkylakeX chosen by the program: OpenBLAS picked Prescott (no AVX2) ...
// The warning remains for a kernel the user forced, or a BLAS built for one CPU only.
//
// It also says which GEMM the kernels run (pr_gemm_own: PIPEC_GEMM, read once):
//     stdout: gemm pipec (FMA chain, x86-64-v4 (AVX-512))     or     gemm OpenBLAS (...)
#define _GNU_SOURCE // program_invocation_short_name
#include "gemm.h"
#include "pipert.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

// OpenBLAS's own entry points (declared here so that no particular cblas.h flavour is needed).
extern char *openblas_get_config(void);
extern char *openblas_get_corename(void);

// The kernel sets of OpenBLAS 0.3.21's x86-64 DYNAMIC_ARCH build (driver/others/dynamic.c's
// corename table) that use no AVX2: SSE-only ones and the AVX/FMA-only Sandy Bridge and Bulldozer
// family. Haswell, Zen, Excavator, SkylakeX and Cooperlake use AVX2 or AVX-512; a name not listed
// here (a later OpenBLAS's) gets no warning.
static bool old_kernel(const char *core) {
  static const char *const old[] = {
      "Unknown",   "Katmai", "Coppermine", "Northwood",   "Prescott",  "Banias",     "Atom",
      "Core2",     "Penryn", "Dunnington", "Nehalem",     "Athlon",    "Opteron",    "Opteron_SSE3",
      "Barcelona", "Nano",   "Bobcat",     "Sandybridge", "Bulldozer", "Piledriver", "Steamroller"};
  for (size_t i = 0; i < sizeof old / sizeof old[0]; i++)
    if (strcmp(core, old[i]) == 0) return true;
  return false;
}

// The CPU's vector level: 2 AVX-512 (F, BW, VL, DQ: SkylakeX's kernels), 1 AVX2 with FMA, 0.
static int cpu_level(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return 2;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
}

const char *pr_blas_core(void) {
  return openblas_get_corename();
}

const char *pr_blas_better_core(void) {
  int level = cpu_level();
  if (!level || !old_kernel(openblas_get_corename()) ||
      !strstr(openblas_get_config(), "DYNAMIC_ARCH"))
    return NULL;
  return level == 2 ? "SKYLAKEX" : "HASWELL";
}

void pr_blas_report(bool quiet) {
  if (quiet || pr_rank != 0) return;
  const char *config = openblas_get_config(), *core = openblas_get_corename();
  // SkylakeX's kernels need AVX-512 F, BW, VL and DQ (and the OS saving their state, which
  // __builtin_cpu_supports checks).
  int level = cpu_level();
  bool avx512 = level == 2, avx2 = level >= 1;
  const char *fell = getenv("PIPEC_OPENBLAS_FALLBACK"), *set = getenv("OPENBLAS_CORETYPE");
  printf("blas %s, kernel %s, CPU %s\n", config, core,
         avx512 ? "avx512"
         : avx2 ? "avx2"
                : "no avx2");
  if (fell && set)
    printf("blas kernel %s chosen by the program: OpenBLAS picked %s (no AVX2) on this CPU; "
           "OPENBLAS_CORETYPE overrides\n",
           core, fell);
  printf("kernels pipert %s\n", pr_isa_name());
  // The GEMM the kernels run: their own where their build has FMA (kernels_gemm.c says).
  if (pr_gemm_in_use()) // (checks PIPEC_GEMM)
    printf("gemm pipec (FMA chain in k order)\n");
  else
    printf("gemm OpenBLAS (%s)\n", !pr_gemm_own() ? "PIPEC_GEMM=openblas"
                                   : strncmp(pr_isa_name(), "x86-64-v1", 9) == 0
                                       ? "no FMA at x86-64-v1"
                                       : "no FMA in the kernels' build");
  fflush(stdout);
  if (!avx2 || !old_kernel(core)) return;
  const char *want = avx512 ? "SKYLAKEX" : "HASWELL";
  fprintf(stderr,
          "%s: warning: OpenBLAS runs its %s kernels (no AVX2) on a CPU with %s: matrix products "
          "run several times slower than they can\n",
          program_invocation_short_name, core, avx512 ? "AVX-512" : "AVX2");
  if (!strstr(config, "DYNAMIC_ARCH"))
    fprintf(stderr,
            "HINT: this OpenBLAS is built for %s only: link one built with DYNAMIC_ARCH=1 "
            "(Debian's libopenblas0 is) or for this CPU\n",
            core);
  else if (set && set[0])
    fprintf(stderr, "HINT: OPENBLAS_CORETYPE=%s is set: export OPENBLAS_CORETYPE=%s instead\n", set,
            want);
  else
    fprintf(stderr, "HINT: this OpenBLAS does not recognise the CPU: export OPENBLAS_CORETYPE=%s\n",
            want);
  fflush(stderr);
}

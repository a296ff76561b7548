// gemm_select.c: which GEMM the kernels run, from PIPEC_GEMM, read once (gemm.h's pr_gemm_own):
// pipec's own (the default, gemm.c) or OpenBLAS. One definition for every ISA build of the
// kernels (kernels_gemm.c asks it) and for the report of what runs (blas_info.c).
#include "gemm.h"
#include "pipert.h"

#include <stdlib.h>
#include <string.h>

int pr_gemm_own(void) {
  static _Atomic int own = -1; // -1: not read yet
  int v = own;
  if (v >= 0) return v;
  const char *e = getenv("PIPEC_GEMM");
  prCheck(!e || !e[0] || strcmp(e, "own") == 0 || strcmp(e, "openblas") == 0,
          "PIPEC_GEMM=own (pipec's GEMM, the default) or PIPEC_GEMM=openblas",
          "PIPEC_GEMM=%s: no such GEMM", e);
  v = !(e && strcmp(e, "openblas") == 0);
  own = v;
  return v;
}

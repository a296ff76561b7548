// Where the runtime is that generated programs build against: the include directory (pipert.h),
// libpipert.a and its -march=native, MPI and CUDA siblings (runtime_paths.c). Used by the build of
// the generated programs (emit_c.c) and by the manifest that --no-build writes (manifest.c).
#ifndef PIPEC_CODEGEN_RUNTIME_PATHS_H
#define PIPEC_CODEGEN_RUNTIME_PATHS_H

#include <stdbool.h>
#include <stddef.h>

// The prefix of an installed pipec (PREFIX/bin/pipec beside PREFIX/include/pipec/pipert.h, found
// from the running executable), or NULL when pipec runs from its build tree.
const char *runtime_install_prefix(void);
// The prefix of executable path exe installed in bindir (relative, "bin" or "libexec/x"): exe's
// directory less one level per component of bindir ("/opt/p/bin/pipec" -> "/opt/p";
// "/bin/pipec" -> "": the root, under which every path is "/..."). False when exe is not that
// deep, or prefix (cap bytes) is too small.
bool runtime_prefix_of(const char *exe, const char *bindir, char *prefix, size_t cap);
// The directory of pipert.h (the generated programs' -I; the CUDA header is in its cuda/).
const char *runtime_include_dir(void);
// libpipert.a, or with native the one built with -march=native.
const char *runtime_lib_path(bool native);
// libpipert_mpi.a, the transport of rank programs at S > 1 ("" when pipec was built without MPI).
const char *runtime_mpi_lib_path(void);
// libpipert_cuda.a, the device runtime ("" when pipec was built without the CUDA toolkit).
const char *runtime_cuda_lib_path(void);

#endif

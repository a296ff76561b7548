// Where pipec finds the runtime that generated programs build against: the
// environment first, PIPEC_RUNTIME_DIR (the include directory),
// PIPEC_RUNTIME_LIB, PIPEC_RUNTIME_NATIVE_LIB, PIPEC_RUNTIME_MPI_LIB,
// PIPEC_RUNTIME_CUDA_LIB (each on its own), else the source and build trees
// pipec was built in (CMake's paths). Libraries that pipec was built without
// (MPI, CUDA: "" from CMake) stay "" but for the environment.
#include <stdlib.h>

#include "runtime_paths.h"

// The environment's value of env, else built.
static const char *lookup(const char *env, const char *built) {
  const char *h = getenv(env);
  return h && *h ? h : built;
}

const char *runtime_include_dir(void) {
  return lookup("PIPEC_RUNTIME_DIR", PIPEC_RUNTIME_DIR);
}

const char *runtime_lib_path(bool native) {
  return native ? lookup("PIPEC_RUNTIME_NATIVE_LIB", PIPEC_RUNTIME_NATIVE_LIB)
                : lookup("PIPEC_RUNTIME_LIB", PIPEC_RUNTIME_LIB);
}

const char *runtime_mpi_lib_path(void) {
  return lookup("PIPEC_RUNTIME_MPI_LIB", PIPEC_RUNTIME_MPI_LIB);
}

const char *runtime_cuda_lib_path(void) {
  return lookup("PIPEC_RUNTIME_CUDA_LIB", PIPEC_RUNTIME_CUDA_LIB);
}

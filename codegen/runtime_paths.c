// Where pipec finds the runtime that generated programs build against, in this order:
//   1. the environment: PIPEC_RUNTIME_DIR (the include directory), PIPEC_RUNTIME_LIB,
//      PIPEC_RUNTIME_NATIVE_LIB, PIPEC_RUNTIME_MPI_LIB, PIPEC_RUNTIME_CUDA_LIB (each on its own);
//   2. an installed pipec's own prefix: the executable (/proc/self/exe, links resolved) is
//      PREFIX/BINDIR/pipec and PREFIX/INCLUDEDIR/pipec/pipert.h exists (the marker): the headers
//      are there, the libraries in PREFIX/LIBDIR. Nothing of the build tree is used, and a prefix
//      installed under DESTDIR or moved elsewhere works where it lies (the prefix / as well:
//      /bin/pipec with /include/pipec/pipert.h);
//   3. else the source and build trees pipec was built in (CMake's paths: build/bin/pipec, the
//      tests).
// BINDIR, LIBDIR and INCLUDEDIR are CMake's (GNUInstallDirs: bin, lib, include), relative to the
// prefix; with an absolute one the installed lookup is off. Libraries that pipec was built without
// (MPI, CUDA: "" from CMake) stay "" in every case but the environment.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime_paths.h"

#ifndef PIPEC_INSTALL_BINDIR
#define PIPEC_INSTALL_BINDIR "bin"
#endif
#ifndef PIPEC_INSTALL_LIBDIR
#define PIPEC_INSTALL_LIBDIR "lib"
#endif
#ifndef PIPEC_INSTALL_INCLUDEDIR
#define PIPEC_INSTALL_INCLUDEDIR "include/pipec"
#endif

enum { PATH_CAP = PATH_MAX + 64 };

// Removes the last component of path (in place; "/bin" becomes "", the root, which every path
// built on it then starts with "/" of its own); false when none is left to remove.
static bool strip_last(char *path) {
  char *s = strrchr(path, '/');
  if (!s || !path[0]) return false;
  *s = 0;
  return true;
}

bool runtime_prefix_of(const char *exe, const char *bindir, char *prefix, size_t cap) {
  if (snprintf(prefix, cap, "%s", exe) >= (int)cap || !strip_last(prefix)) return false;
  for (const char *b = bindir; *b;) { // one level per component of BINDIR
    size_t k = strcspn(b, "/");
    if (k && !(k == 1 && b[0] == '.') && !strip_last(prefix)) return false;
    b += k + (b[k] == '/');
  }
  return true;
}

const char *runtime_install_prefix(void) {
  static char prefix[PATH_CAP];
  static int state; // 0 not looked yet, 1 installed, 2 not
  if (state) return state == 1 ? prefix : NULL;
  state = 2;
  if (PIPEC_INSTALL_BINDIR[0] == '/' || PIPEC_INSTALL_INCLUDEDIR[0] == '/' ||
      PIPEC_INSTALL_LIBDIR[0] == '/')
    return NULL;
  char exe[PATH_CAP];
  ssize_t n = readlink("/proc/self/exe", exe, PATH_MAX);
  if (n <= 0 || n >= PATH_MAX) return NULL;
  exe[n] = 0;
  if (!runtime_prefix_of(exe, PIPEC_INSTALL_BINDIR, prefix, sizeof prefix)) return NULL;
  char marker[PATH_CAP * 2];
  snprintf(marker, sizeof marker, "%s/%s/pipert.h", prefix, PIPEC_INSTALL_INCLUDEDIR);
  if (access(marker, R_OK) != 0) return NULL;
  state = 1;
  return prefix;
}

// The environment's value of env, else PREFIX/dir/file for an installed pipec (built: not ""),
// else built. The installed paths are built once each (slot) and kept.
static const char *lookup(const char *env, const char *dir, const char *file, const char *built,
                          char *slot) {
  const char *h = getenv(env);
  if (h && *h) return h;
  const char *prefix = runtime_install_prefix();
  if (!prefix || !*built) return built;
  if (!*slot) snprintf(slot, PATH_CAP * 2, "%s/%s%s%s", prefix, dir, *file ? "/" : "", file);
  return slot;
}

const char *runtime_include_dir(void) {
  static char slot[PATH_CAP * 2];
  return lookup("PIPEC_RUNTIME_DIR", PIPEC_INSTALL_INCLUDEDIR, "", PIPEC_RUNTIME_DIR, slot);
}

const char *runtime_lib_path(bool native) {
  static char slot[2][PATH_CAP * 2];
  return native ? lookup("PIPEC_RUNTIME_NATIVE_LIB", PIPEC_INSTALL_LIBDIR, "libpipert-native.a",
                         PIPEC_RUNTIME_NATIVE_LIB, slot[1])
                : lookup("PIPEC_RUNTIME_LIB", PIPEC_INSTALL_LIBDIR, "libpipert.a",
                         PIPEC_RUNTIME_LIB, slot[0]);
}

const char *runtime_mpi_lib_path(void) {
  static char slot[PATH_CAP * 2];
  return lookup("PIPEC_RUNTIME_MPI_LIB", PIPEC_INSTALL_LIBDIR, "libpipert_mpi.a",
                PIPEC_RUNTIME_MPI_LIB, slot);
}

const char *runtime_cuda_lib_path(void) {
  static char slot[PATH_CAP * 2];
  return lookup("PIPEC_RUNTIME_CUDA_LIB", PIPEC_INSTALL_LIBDIR, "libpipert_cuda.a",
                PIPEC_RUNTIME_CUDA_LIB, slot);
}

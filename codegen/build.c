// build.c: the builder, apart from the printer: it runs the system's C compiler (the cuda target:
// nvcc) over a rank's printed source, linked against libpipert as CMake found it at pipec's build
// time (runtime_paths.c; the environment overrides first), and makes the output directories. It
// also answers what the driver asks before any printing: which targets pipec can build for, and
// whether this one can run the graph and, for CUDA, the architectures asked for. Tools run by
// fork and exec, never through a shell; a failure is one error with the tool's exit status.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen.h"
#include "runtime_paths.h"

// Runs argv; false (with the command's exit status in the message) on failure.
static bool run_tool(char *const argv[], Diag *d) {
  pid_t pid = fork();
  if (pid < 0) {
    diag_error(d, (Loc){0, 0}, "cannot start %s: %s", argv[0], strerror(errno));
    return false;
  }
  if (pid == 0) {
    // stderr holds only the diagnostics document in the machine-readable formats: the
    // compiler's messages go to stdout there.
    if (d->format != DIAG_TEXT) dup2(STDOUT_FILENO, STDERR_FILENO);
    execvp(argv[0], argv);
    fprintf(stderr, "pipec: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return true;
  diag_error(d, (Loc){0, 0}, "building the generated program failed (%s exited with %d)", argv[0],
             WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  return false;
}

// The runtime's headers and libraries: the environment's, an installed pipec's own prefix's, or
// the build tree's (runtime_paths.c).
static const char *runtime_dir(void) {
  return runtime_include_dir();
}
// The portable runtime, or the one built with -march=native.
static const char *runtime_lib(bool native) {
  return runtime_lib_path(native);
}

// libpipert_mpi.a: the MPI transport of rank programs at S > 1.
static const char *runtime_mpi_lib(void) {
  return runtime_mpi_lib_path();
}

// nvcc, the device runtime, its link flags and the default architectures, as CMake found them
// ("" without the CUDA toolkit; the environment overrides first).
static const char *cuda_setting(const char *env, const char *built) {
  const char *h = getenv(env);
  return h && *h ? h : built;
}

const char *codegen_target_missing(const char *target) {
  if (strcmp(target, "cuda") != 0) return NULL;
  if (!*cuda_setting("PIPEC_NVCC", PIPEC_NVCC) || !*runtime_cuda_lib_path())
    return "pipec was built without the CUDA toolkit (CMake found no nvcc and cuBLAS), so it "
           "cannot build CUDA programs: install the toolkit (nvcc on PATH or /usr/local/cuda), "
           "then rebuild pipec";
  return NULL;
}

const char *codegen_targets(void) {
  return *PIPEC_NVCC && *PIPEC_RUNTIME_CUDA_LIB ? "cpu, cuda" : "cpu";
}

bool codegen_check_target(const Graph *g, const char *target, Diag *d) {
  // The CPU kernels compute in float32 (ids in int32): refuse what they would misread.
  for (int i = 0; i < g->ntensors; i++) {
    const Tensor *t = g->tensors[i];
    if (t->dtype == DT_F32 || t->dtype == DT_I32) continue;
    diag_error(d, t->loc, "%s: '%s' is %s; the %s target computes in f32 (and i32 ids) only",
               t->path ? t->path : "model", t->name, dtype_name(t->dtype), target);
    return false;
  }
  return true;
}

bool codegen_links_mpi(const Program *prog) {
  return prog->nranks > 1 || prog->replicas > 1;
}

// Whether pipec was built with Open MPI, which rank programs of several ranks link; else an error.
static bool have_mpi(const Program *prog, Diag *d) {
  if (*runtime_mpi_lib()) return true;
  diag_error(d, (Loc){0, 0},
             "%d stages: the rank programs need Open MPI, which pipec was built without "
             "(apt-get install libopenmpi-dev openmpi-bin, then rebuild pipec)",
             prog->nranks);
  return false;
}

const char *codegen_cuda_archs(const CodegenOptions *o, Arena *a, Diag *d) {
  const char *archs = o->cuda_arch && *o->cuda_arch
                          ? o->cuda_arch
                          : cuda_setting("PIPEC_CUDA_ARCHS", PIPEC_CUDA_ARCHS);
  // The kernels are libpipert_cuda.a's, built for PIPEC_CUDA_ARCHS: an architecture outside that
  // list would link a program with no kernels for its GPU.
  const char *built = cuda_setting("PIPEC_CUDA_ARCHS", PIPEC_CUDA_ARCHS);
  char *list = arena_strdup(a, archs), *save0 = NULL;
  for (char *tok = strtok_r(list, ",", &save0); tok; tok = strtok_r(NULL, ",", &save0)) {
    bool found = false;
    char *have = arena_strdup(a, built), *save = NULL;
    for (char *h = strtok_r(have, ",", &save); h && !found; h = strtok_r(NULL, ",", &save))
      found = !strcmp(h, tok);
    if (!found) {
      diag_error(d, (Loc){0, 0},
                 "--cuda-arch %s: the CUDA runtime (libpipert_cuda.a) was built for %s only; "
                 "rebuild pipec with -DPIPEC_CUDA_ARCHS=\"...;%s\" (CMake) to add it",
                 tok, built, tok);
      return NULL;
    }
  }
  return archs;
}

// nvcc over the generated rank<r>.cu: a fat binary for o->cuda_arch (default PIPEC_CUDA_ARCHS),
// warnings as errors, linked with the device runtime before libpipert (it calls into it), MPI's
// transport first at S > 1, then cuBLAS / the CUDA runtime and libpipert's libraries (host-compiler
// flags such as -fopenmp go through -Xcompiler).
static bool build_cuda(const Program *prog, const CodegenOptions *o, const char *src,
                       const char *exe, Diag *d) {
  Arena *a = prog->g->arena;
  bool mpi = codegen_links_mpi(prog);
  if (mpi && !have_mpi(prog, d)) return false;
  char *argv[128];
  int n = 0;
  argv[n++] = (char *)cuda_setting("PIPEC_NVCC", PIPEC_NVCC);
  argv[n++] = "-std=c++17";
  argv[n++] = "-O2";
  argv[n++] = "-Xcompiler=-Wall,-Werror";
  argv[n++] = "--Werror=all-warnings";
  const char *archs = codegen_cuda_archs(o, a, d);
  if (!archs) return false;
  char *list = arena_strdup(a, archs);
  for (char *tok = strtok(list, ","); tok && n < 40; tok = strtok(NULL, ","))
    argv[n++] = arena_printf(a, "-gencode=arch=compute_%s,code=sm_%s", tok, tok);
  argv[n++] = arena_printf(a, "-I%s", runtime_dir());
  argv[n++] = arena_printf(a, "-I%s/cuda", runtime_dir());
  argv[n++] = (char *)src;
  argv[n++] = "-o";
  argv[n++] = (char *)exe;
  if (mpi) argv[n++] = (char *)runtime_mpi_lib();
  argv[n++] = (char *)runtime_cuda_lib_path();
  argv[n++] = (char *)runtime_lib(false);
  char *libs = arena_printf(a, "%s %s %s", cuda_setting("PIPEC_CUDA_LIBS", PIPEC_CUDA_LIBS),
                            mpi ? PIPEC_MPI_LIBS : "", PIPEC_RUNTIME_LIBS);
  for (char *tok = strtok(libs, " "); tok && n < 120; tok = strtok(NULL, " ")) {
    if (tok[0] != '-' || tok[1] == 'l' || tok[1] == 'L') {
      argv[n++] = tok;
      continue;
    }
    // nvcc splits -Xcompiler's value at commas: -fsanitize=address,undefined becomes one
    // -Xcompiler=-fsanitize=V per value.
    char *eq = strchr(tok, '=');
    if (!eq || !strchr(eq, ',')) {
      argv[n++] = arena_printf(a, "-Xcompiler=%s", tok);
      continue;
    }
    int prefix = (int)(eq - tok + 1); // "-fsanitize="
    char *save = NULL;
    for (char *v = strtok_r(eq + 1, ",", &save); v && n < 120; v = strtok_r(NULL, ",", &save))
      argv[n++] = arena_printf(a, "-Xcompiler=%.*s%s", prefix, tok, v);
  }
  argv[n] = NULL;
  return run_tool(argv, d);
}

// The system's C compiler over the generated rank<r>.c, linked with libpipert (and, at S > 1, the
// MPI transport before it).
static bool build_c(const Program *prog, const CodegenOptions *o, const char *src, const char *exe,
                    Diag *d) {
  Arena *a = prog->g->arena;
  bool mpi = codegen_links_mpi(prog);
  char *argv[64];
  int n = 0;
  const char *cc = getenv("CC");
  argv[n++] = (char *)(cc && *cc ? cc : "cc");
  argv[n++] = "-std=gnu11";
  argv[n++] = "-O2";
  argv[n++] = "-ffp-contract=off"; // no FMA contraction: the same bits with or without -march
  if (o->march_native) argv[n++] = "-march=native";
  argv[n++] = "-Wall";
  argv[n++] = "-Werror";
  argv[n++] = arena_printf(a, "-I%s", runtime_dir());
  argv[n++] = (char *)src;
  argv[n++] = "-o";
  argv[n++] = (char *)exe;
  if (mpi && !have_mpi(prog, d)) return false;
  if (mpi) argv[n++] = (char *)runtime_mpi_lib(); // before libpipert: it calls into it
  argv[n++] = (char *)runtime_lib(o->march_native);
  // Libraries libpipert (and libpipert_mpi: MPI's) needs, from pkg-config at pipec's build time.
  char *libs = arena_strdup(a, mpi ? PIPEC_MPI_LIBS " " PIPEC_RUNTIME_LIBS : PIPEC_RUNTIME_LIBS);
  for (char *tok = strtok(libs, " "); tok && n < 60; tok = strtok(NULL, " ")) argv[n++] = tok;
  argv[n] = NULL;
  return run_tool(argv, d);
}

// mkdir -p: creates dir and its missing parents; an existing component must be a directory.
bool codegen_make_dirs(Arena *a, const char *dir, Diag *d) {
  if (!*dir) {
    diag_error(d, (Loc){0, 0}, "the output directory is an empty path");
    return false;
  }
  char *p = arena_strdup(a, dir);
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s) continue;
    char c = *s;
    *s = 0;
    struct stat st;
    if (mkdir(p, 0777) != 0) {
      int err = errno;
      if (err == EEXIST && stat(p, &st) == 0 && !S_ISDIR(st.st_mode)) {
        diag_error(d, (Loc){0, 0}, "cannot create output directory '%s': '%s' is not a directory",
                   dir, p);
        return false;
      }
      if (err != EEXIST) {
        diag_error(d, (Loc){0, 0}, "cannot create output directory '%s': %s: %s", dir, p,
                   strerror(err));
        return false;
      }
    }
    *s = c;
    if (!c) return true;
  }
}

bool codegen_build(const Program *prog, int rank, const CodegenOptions *o, const char *src,
                   Diag *d) {
  Arena *a = prog->g->arena;
  bool cuda = !strcmp(o->target, "cuda");
  const char *bindir = arena_printf(a, "%s/bin", o->out_dir);
  if (mkdir(bindir, 0777) != 0 && errno != EEXIST) {
    diag_error(d, (Loc){0, 0}, "cannot create '%s': %s", bindir, strerror(errno));
    return false;
  }
  bool mpi = codegen_links_mpi(prog);
  const char *exe =
      mpi ? arena_printf(a, "%s/rank%d", bindir, rank) : arena_printf(a, "%s/train", bindir);
  if (!(cuda ? build_cuda(prog, o, src, exe, d) : build_c(prog, o, src, exe, d))) return false;
  if (mpi) return true;
  // S = 1: bin/rank0 is the same program (launch.sh runs it).
  const char *r0 = arena_printf(a, "%s/rank0", bindir);
  if ((unlink(r0) != 0 && errno != ENOENT) || symlink("train", r0) != 0) {
    diag_error(d, (Loc){0, 0}, "cannot create '%s': %s", r0, strerror(errno));
    return false;
  }
  return true;
}

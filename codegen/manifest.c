// The files for build systems that `pipec compile` writes beside the programs
// (docs/build-integration.md):
//
//   OUT/pipec-manifest.json (--no-build): what it takes to build the sources pipec wrote without
//   building them: per rank its source, the program launch.sh runs (bin/rank<r>) and the link line
//   (the runtime libraries in link order, then their system libraries), and for all ranks the
//   include directories and the compile flags the numbers depend on. Paths of the runtime are
//   those pipec itself would build with (runtime_paths.c); sources and programs are relative to
//   OUT. Printed by cJSON (every string escaped), written atomically.
//
//   --depfile FILE: a Make-style dependency file, "TARGETS: INPUTS", for Make's include and
//   Ninja's depfile: the targets are what this compile wrote (--no-build: the sources, launch.sh,
//   the manifest; else the programs first, then the sources and launch.sh), the inputs every file
//   pipec read to write them: the model file (the format has no includes; data files are read by
//   the programs at run time, not by pipec) and the model's "weights" (pipec reads its headers;
//   a path relative to the model's as given, weights.h). Paths as given on the command line,
//   escaped so that make, ninja and CMake all read back the same bytes: ' ', '#', ':' after a
//   backslash, '$' doubled; a path none of them could read alike (a ';' ends make's
//   prerequisites and starts a recipe, ninja ends a name at it) is refused, by
//   codegen_depfile_check before any work (the weights' path: here, the compile then failing)
//   and here again. Written atomically after everything else.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "codegen.h"
#include "../compiler/files.h"
#include "../compiler/weights.h"
#include "runtime_paths.h"

#ifndef PIPEC_VERSION
#define PIPEC_VERSION "0.0.0"
#endif

// A setting CMake gave pipec, unless the environment overrides it (as build.c reads them).
static const char *setting(const char *env, const char *built) {
  const char *h = getenv(env);
  return h && *h ? h : built;
}

// Appends each blank-separated word of words to the array.
static void add_words(cJSON *arr, Arena *a, const char *words) {
  char *s = arena_strdup(a, words), *save = NULL;
  for (char *w = strtok_r(s, " ", &save); w; w = strtok_r(NULL, " ", &save))
    cJSON_AddItemToArray(arr, cJSON_CreateString(w));
}

// The link line of every rank, in the order build.c's builds use: the MPI transport (S > 1),
// the device runtime (cuda), libpipert, then their system libraries.
static cJSON *link_line(const Program *prog, const CodegenOptions *o, bool cuda, Arena *a) {
  bool mpi = codegen_links_mpi(prog); // --replicas: MPI at S = 1 too
  cJSON *l = cJSON_CreateArray();
  if (mpi) cJSON_AddItemToArray(l, cJSON_CreateString(runtime_mpi_lib_path()));
  if (cuda) cJSON_AddItemToArray(l, cJSON_CreateString(runtime_cuda_lib_path()));
  cJSON_AddItemToArray(l, cJSON_CreateString(runtime_lib_path(o->march_native && !cuda)));
  if (cuda) add_words(l, a, setting("PIPEC_CUDA_LIBS", PIPEC_CUDA_LIBS));
  if (mpi) add_words(l, a, PIPEC_MPI_LIBS);
  add_words(l, a, PIPEC_RUNTIME_LIBS);
  return l;
}

bool codegen_manifest(const Program *prog, const CodegenOptions *o, Diag *d) {
  Arena *a = prog->g->arena;
  bool cuda = !strcmp(o->target, "cuda");
  if (codegen_links_mpi(prog) && !*runtime_mpi_lib_path()) {
    diag_error(d, (Loc){0, 0},
               "%d stages: the rank programs need Open MPI, which pipec was built without "
               "(apt-get install libopenmpi-dev openmpi-bin, then rebuild pipec)",
               prog->nranks);
    return false;
  }
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "format", "pipec-manifest");
  cJSON_AddNumberToObject(m, "version", 1);
  cJSON_AddStringToObject(m, "pipec", PIPEC_VERSION);
  cJSON_AddStringToObject(m, "model", o->model_path);
  cJSON_AddStringToObject(m, "name", prog->g->name);
  cJSON_AddStringToObject(m, "target", o->target);
  // What the programs store parameters, activations and messages in (--precision).
  cJSON_AddStringToObject(m, "precision",
                          prog->tc->precision == DT_BF16  ? "bf16"
                          : prog->tc->precision == DT_F16 ? "fp16"
                                                          : "f32");
  cJSON_AddNumberToObject(m, "ranks", prog->nranks);
  cJSON_AddNumberToObject(m, "microbatches", prog->M); // per replica (--replicas)
  cJSON_AddNumberToObject(m, "replicas", prog->replicas > 1 ? prog->replicas : 1);
  if (prog->stage_reps) { // uneven: the count of each stage (compiler/uneven.c)
    cJSON *sr = cJSON_AddArrayToObject(m, "stage_replicas");
    for (int s = 0; s < prog->nranks; s++)
      cJSON_AddItemToArray(sr, cJSON_CreateNumber(prog->stage_reps[s]));
  }
  cJSON_AddStringToObject(m, "launch", "launch.sh");
  cJSON *inc = cJSON_AddArrayToObject(m, "include_dirs");
  cJSON_AddItemToArray(inc, cJSON_CreateString(runtime_include_dir()));
  if (cuda)
    cJSON_AddItemToArray(inc,
                         cJSON_CreateString(arena_printf(a, "%s/cuda", runtime_include_dir())));
  // The flags the numbers depend on (no FMA contraction; the program's language); the rest
  // (optimisation, warnings) is the build's choice.
  cJSON *fl = cJSON_AddArrayToObject(m, "compile_flags");
  if (cuda) {
    add_words(fl, a, "-std=c++17");
    const char *archs = codegen_cuda_archs(o, a, d);
    if (!archs) {
      cJSON_Delete(m);
      return false;
    }
    char *list = arena_strdup(a, archs), *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
      cJSON_AddItemToArray(
          fl, cJSON_CreateString(arena_printf(a, "-gencode=arch=compute_%s,code=sm_%s", t, t)));
  } else {
    add_words(fl, a,
              o->march_native ? "-std=gnu11 -ffp-contract=off -march=native"
                              : "-std=gnu11 -ffp-contract=off");
  }
  cJSON *progs = cJSON_AddArrayToObject(m, "programs");
  for (int r = 0; r < prog->nranks; r++) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "rank", r);
    cJSON_AddStringToObject(p, "source", arena_printf(a, "rank%d.%s", r, cuda ? "cu" : "c"));
    cJSON_AddStringToObject(p, "program", arena_printf(a, "bin/rank%d", r));
    cJSON_AddItemToObject(p, "link", link_line(prog, o, cuda, a));
    cJSON_AddItemToArray(progs, p);
  }
  char *text = cJSON_Print(m);
  cJSON_Delete(m);
  if (!text) {
    diag_error(d, (Loc){0, 0}, "out of memory writing the manifest");
    return false;
  }
  const char *body = arena_printf(a, "%s\n", text);
  bool ok = write_file_atomic(arena_printf(a, "%s/pipec-manifest.json", o->out_dir), body,
                              strlen(body), d);
  free(text);
  return ok;
}

typedef struct Refusal {
  const char *verb; // "has", "starts with", "ends with" (NULL: the path can be written)
  char c;           // the character
  const char *why;  // what a reader makes of it
} Refusal;

// Why make, ninja and CMake could not all read path back from a depfile (verb NULL: they can),
// by the character at fault (docs/build-integration.md lists them; each was tried with GNU Make
// 4.3, Ninja 1.11 and CMake 3.25):
//   - control bytes (a line break ends the rule), ';' (make: a recipe follows; `\;` does not
//     help), '|' (make: order-only prerequisites follow), '=' (make: a variable assignment),
//     '[' (make: a wildcard, `a[1]` names `a1`), '(' and ')' (make: `lib(member)`), and ninja's
//     other separators '*', '?', '\'', '"', '`', '&', '<', '>', '^' (a name ends there, and
//     ninja keeps the backslash of `\;`);
//   - '\': ninja keeps `\\` where make and CMake read one backslash, and before '#' or ':' each
//     counts the backslashes differently;
//   - a leading '~' (make: a home directory), a trailing ':' (ninja reads `\:` before the line
//     break as a backslash and a colon), '%' in an output (make: a pattern rule; `\%` is read as
//     is by ninja).
static Refusal depfile_refuses(const char *path, bool output) {
  for (const char *p = path; *p; p++) {
    unsigned char u = (unsigned char)*p;
    if (u == '\n' || u == '\r') return (Refusal){"has", *p, "which ends a rule of the depfile"};
    if (u < 0x20 || u == 0x7f) return (Refusal){"has", *p, "which no depfile can hold"};
    if (strchr(";|=[()*?'\"`&<>^\\", *p))
      return (Refusal){"has", *p, "which make and ninja cannot both read back"};
    if (*p == '~' && p == path)
      return (Refusal){"starts with", *p, "which make expands to a home directory"};
    if (*p == ':' && !p[1]) return (Refusal){"ends with", *p, "which ninja cannot read back"};
    if (*p == '%' && output) return (Refusal){"has", *p, "which make reads as a pattern"};
  }
  return (Refusal){0};
}

// Reports why path cannot be written in a depfile (what: "model", "output"); false if so. The
// path and the character are shown on one line: a control byte as '\n', '\x01'.
static bool depfile_path_ok(const char *what, const char *path, bool output, Diag *d) {
  Refusal r = depfile_refuses(path, output);
  if (!r.verb) return true;
  char ch[2] = {r.c, 0};
  char *p = diag_printable(path), *c = diag_printable(ch);
  diag_error(d, (Loc){0, 0},
             "--depfile: the %s path '%s' %s '%s', %s: rename it or leave out --depfile", what,
             p ? p : path, r.verb, c ? c : "?", r.why);
  free(p);
  free(c);
  return false;
}

bool codegen_depfile_check(Arena *a, const char *model, const char *out_dir, Diag *d) {
  // Every output is OUT/ and a name of letters, digits, '.', '/': OUT decides for them all.
  return depfile_path_ok("model", model, false, d) &&
         (!out_dir || depfile_path_ok("output", arena_printf(a, "%s/launch.sh", out_dir), true, d));
}

// A path in a depfile (depfile_refuses passed it): ' ', '#' and ':' backslash-escaped, '$'
// doubled; every other byte as it is.
static const char *make_path(Arena *a, const char *s) {
  char *o = arena_alloc(a, 2 * strlen(s) + 1), *q = o;
  for (; *s; s++) {
    if (*s == ' ' || *s == '#' || *s == ':') *q++ = '\\';
    if (*s == '$') *q++ = '$';
    *q++ = *s;
  }
  *q = 0;
  return o;
}

bool codegen_depfile(const Program *prog, const CodegenOptions *o, const char *path, Diag *d) {
  Arena *a = prog->g->arena;
  const char *ext = strcmp(o->target, "cuda") == 0 ? "cu" : "c";
  int S = prog->nranks, n = 0;
  const char **targets = ARENA_ARRAY(a, const char *, 2 * S + 4);
  if (o->build) {
    if (!codegen_links_mpi(prog)) targets[n++] = arena_printf(a, "%s/bin/train", o->out_dir);
    for (int r = 0; r < S; r++) targets[n++] = arena_printf(a, "%s/bin/rank%d", o->out_dir, r);
  }
  for (int r = 0; r < S; r++) targets[n++] = arena_printf(a, "%s/rank%d.%s", o->out_dir, r, ext);
  targets[n++] = arena_printf(a, "%s/launch.sh", o->out_dir);
  if (!o->build) targets[n++] = arena_printf(a, "%s/pipec-manifest.json", o->out_dir);
  // Every file pipec read (see the top): the model, and the model's weights (their headers).
  const char *weights = prog->g->weights;
  const char *inputs[] = {o->model_path,
                          weights ? weights_shown_path(a, o->model_path, weights) : NULL};
  const char *what[] = {"model", "weights"};
  char *text = arena_strdup(a, "");
  for (int i = 0; i < n; i++) {
    if (!depfile_path_ok("output", targets[i], true, d)) return false;
    text = arena_printf(a, "%s%s%s", text, i ? " \\\n " : "", make_path(a, targets[i]));
  }
  text = arena_printf(a, "%s:", text);
  for (size_t i = 0; i < sizeof inputs / sizeof inputs[0] && inputs[i]; i++) {
    if (!depfile_path_ok(what[i], inputs[i], false, d)) return false;
    text = arena_printf(a, "%s \\\n %s", text, make_path(a, inputs[i]));
  }
  const char *line = arena_printf(a, "%s\n", text);
  return write_file_atomic(path, line, strlen(line), d);
}

// paths.c: the data paths stamped into a generated program (its default --data and --labels).
//
// A path the model gave absolute is written as the training pass left it. A path the model gave
// relative (to the model file) is written relative to the program's own directory, OUT/bin, behind
// "$ORIGIN/" (as in an ELF RPATH): "$ORIGIN/../../data/x.txt". The runtime resolves it against the
// directory of the running executable (pr_origin_path, runtime/origin.c). So the generated source
// depends only on where the model, its data and the output lie relative to each other, not on the
// directories themselves (the same bytes in any checkout or build directory), and the program
// still finds its data from any working directory. Both ends are real paths (symbolic links
// resolved), so the ".." steps hold in the file system.
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emit.h"

// path (absolute) with "." and empty components dropped and "x/.." collapsed: its components
// joined by '/' (no leading '/'; "" for the root).
static char *normalize(Arena *a, const char *path) {
  size_t n = strlen(path);
  char *o = arena_alloc(a, n + 1), *q = o;
  for (const char *p = path; *p;) {
    while (*p == '/') p++;
    size_t k = strcspn(p, "/");
    if (k == 0) break;
    if (k == 1 && p[0] == '.') {
      // nothing
    } else if (k == 2 && p[0] == '.' && p[1] == '.') {
      while (q > o && q[-1] != '/') q--; // drop the last component
      if (q > o) q--;                    // and its '/'
    } else {
      if (q > o) *q++ = '/';
      memcpy(q, p, k);
      q += k;
    }
    p += k;
  }
  *q = 0;
  return o;
}

// The number of components of a normalized path.
static int ncomponents(const char *p) {
  if (!*p) return 0;
  int n = 1;
  for (; *p; p++) n += *p == '/';
  return n;
}

const char *codegen_data_path(Arena *a, const char *path, bool rel, const char *out_dir) {
  if (!rel || path[0] != '/') return path;
  char *real = realpath(out_dir, NULL); // codegen created it
  if (!real) return path;
  const char *from = normalize(a, arena_printf(a, "%s/bin", real));
  free(real);
  const char *to = normalize(a, path);
  // The common leading components of from and to.
  size_t common = 0;
  int shared = 0;
  for (size_t i = 0;; i++) {
    bool fend = !from[i] || from[i] == '/', tend = !to[i] || to[i] == '/';
    if (fend && tend) {
      if (i > 0) common = i, shared++;
      if (!from[i] || !to[i]) break;
      continue;
    }
    if (from[i] != to[i]) break;
  }
  const char *up = "";
  for (int k = ncomponents(from) - shared; k > 0; k--) up = arena_printf(a, "%s../", up);
  const char *down = to + common + (to[common] == '/');
  return arena_printf(a, "$ORIGIN/%s%s", up, down);
}

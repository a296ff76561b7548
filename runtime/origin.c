// origin.c: the default data paths of a generated program, which pipec writes relative to the
// program's own directory as "$ORIGIN/REL" (codegen/paths.c; the convention of an ELF RPATH).
// pr_origin_path resolves one against the directory of the running executable (the real one,
// /proc/self/exe), so the program finds its data from any working directory and the generated
// source names no absolute path. REL's leading ".." steps are taken lexically: the executable's
// directory is a real path, and pipec computed REL between real paths.
#include "pipert.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *pr_origin_path(const char *path, char *buf, size_t cap) {
  static const char origin[] = "$ORIGIN/";
  if (!path || strncmp(path, origin, sizeof origin - 1) != 0) return path;
  const char *rel = path + sizeof origin - 1;
  char *exe = realpath("/proc/self/exe", NULL);
  if (!exe) return path; // the open then fails naming the path, with its HINT (--data FILE)
  char *slash = strrchr(exe, '/');
  size_t n = slash ? (size_t)(slash - exe) : 0; // the directory, without the trailing '/'
  for (; strncmp(rel, "../", 3) == 0 || strcmp(rel, "..") == 0; rel += rel[2] ? 3 : 2)
    while (n > 0 && exe[--n] != '/') {
    }
  int len = snprintf(buf, cap, "%.*s/%s", (int)n, exe, rel);
  free(exe);
  return len >= 0 && (size_t)len < cap ? buf : path;
}

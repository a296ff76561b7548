// files.c: the compiler's atomic file writes (files.h): the text goes to FILE.tmp, which is
// renamed over FILE only once it is complete, so a crash or a full disk never leaves a partial
// picture, plan, manifest or depfile behind.
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "files.h"

bool write_file_atomic(const char *path, const char *text, size_t len, Diag *d) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': the path is too long", path);
    return false;
  }
  FILE *f = fopen(tmp, "w");
  if (!f) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': %s", path, strerror(errno));
    return false;
  }
  bool ok = fwrite(text, 1, len, f) == len;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': %s", path, strerror(errno));
    unlink(tmp);
    return false;
  }
  return true;
}

void remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    DIR *dir = opendir(path);
    for (struct dirent *e; dir && (e = readdir(dir));) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      size_t n = strlen(path) + strlen(e->d_name) + 2;
      char *sub = malloc(n);
      if (!sub) break;
      snprintf(sub, n, "%s/%s", path, e->d_name);
      remove_tree(sub);
      free(sub);
    }
    if (dir) closedir(dir);
  }
  remove(path);
}

// files.c: the compiler's atomic file writes (files.h): the text goes to FILE.tmp, which is
// renamed over FILE only once it is complete, so a crash or a full disk never leaves a partial
// picture, plan, manifest or depfile behind; and the one way it opens a file it reads,
// open_regular, which never blocks on a FIFO.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

// "a FIFO", "a directory", ... for a file that is not a regular file.
static const char *kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

// NULL with errno kept through the close of fd.
static FILE *fail_fd(int fd) {
  int e = errno;
  close(fd);
  errno = e;
  return NULL;
}

FILE *open_regular(const char *path, const char **kind) {
  *kind = NULL;
  struct stat st;
  if (stat(path, &st) != 0) return NULL;
  if (!S_ISREG(st.st_mode)) {
    *kind = kind_of(st.st_mode);
    return NULL;
  }
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return NULL;
  if (fstat(fd, &st) != 0) return fail_fd(fd);
  if (!S_ISREG(st.st_mode)) {
    *kind = kind_of(st.st_mode);
    close(fd);
    return NULL;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) return fail_fd(fd);
  FILE *f = fdopen(fd, "rb");
  return f ? f : fail_fd(fd);
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

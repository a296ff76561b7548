// files.c: the checks a generated program makes on the files it is given, before any work.
//
// Inputs (data, labels, checkpoints) must be regular files: a FIFO would block the open or the
// read forever, a device may never end, a directory holds no data. pr_open_regular refuses them
// by their stat before opening anything, then opens with O_NONBLOCK (an open of a FIFO that
// appeared since returns at once instead of waiting for a writer) and checks the open
// descriptor again with fstat, so what is read is what was checked. Outputs (--save, --loss-log)
// are checked at start by pr_check_writable: the directory exists and is writable, the file,
// if it exists, is a regular file, and its name leaves room for a temporary's suffix, so that
// a run does not train for hours and then fail to write its result. pr_write_full is the one
// write loop of the runtime's own files (shards' indexes, --predict's .npy, the line prefixer).
#include "pipert.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// "a FIFO", "a directory", ... for a file that is not a regular file.
static const char *kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

static const char *HINT_REGULAR =
    "give a regular file (a FIFO or a device would block or never end; a directory holds no data)";

int pr_open_regular(const char *path, const char *what) {
  char hint[256];
  snprintf(hint, sizeof hint, "check the %s path (relative paths start at the current directory)",
           what);
  struct stat st;
  if (stat(path, &st) != 0)
    pr_fail(__FILE__, __LINE__, hint, "cannot open '%s': %s", path, strerror(errno));
  prCheck(S_ISREG(st.st_mode), HINT_REGULAR, "%s '%s' is %s, not a regular file", what, path,
          kind_of(st.st_mode));
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) pr_fail(__FILE__, __LINE__, hint, "cannot open '%s': %s", path, strerror(errno));
  prCheck(fstat(fd, &st) == 0, hint, "cannot stat '%s': %s", path, strerror(errno));
  prCheck(S_ISREG(st.st_mode), HINT_REGULAR, "%s '%s' is %s, not a regular file", what, path,
          kind_of(st.st_mode));
  int fl = fcntl(fd, F_GETFL);
  prCheck(fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0, hint,
          "cannot set up reading '%s': %s", path, strerror(errno));
  return fd;
}

void pr_check_regular(const char *path, const char *what) {
  close(pr_open_regular(path, what));
}

void pr_check_writable(const char *path, const char *flag) {
  const char *hint = "give a path in an existing, writable directory";
  prCheck(path[0] != '\0', hint, "%s: the file name is empty", flag);
  prCheck(path[strlen(path) - 1] != '/', "give the path of a file, not of a directory",
          "%s '%s': the path ends with '/'", flag, path);
  struct stat st;
  if (stat(path, &st) == 0) {
    prCheck(S_ISREG(st.st_mode), "give the path of a regular file (it is replaced or overwritten)",
            "%s '%s': the path is %s, not a regular file", flag, path, kind_of(st.st_mode));
  } else if (errno != ENOENT) {
    pr_fail(__FILE__, __LINE__, hint, "%s '%s': %s", flag, path, strerror(errno));
  }
  // dirname works in place: on a copy on the stack, so that no failure below leaks it.
  char copy[PATH_MAX];
  prCheck(strlen(path) < sizeof copy, "use a shorter path", "%s '%s': the path is too long", flag,
          path);
  strcpy(copy, path);
  const char *dir = dirname(copy);
  if (stat(dir, &st) != 0)
    pr_fail(__FILE__, __LINE__, hint, "%s '%s': cannot use directory '%s': %s", flag, path, dir,
            strerror(errno));
  prCheck(S_ISDIR(st.st_mode), hint, "%s '%s': '%s' is not a directory", flag, path, dir);
  if (access(dir, W_OK | X_OK) != 0)
    pr_fail(__FILE__, __LINE__, hint, "%s '%s': directory '%s' is not writable: %s", flag, path,
            dir, strerror(errno));
  // Files are written through a temporary beside them (NAME.tmp.PID): leave room for its suffix.
  long name_max = pathconf(dir, _PC_NAME_MAX);
  if (name_max <= 0) name_max = 255;
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  prCheck((long)strlen(base) + 32 <= name_max, "use a shorter file name",
          "%s '%s': the file name has %zu bytes; this directory allows %ld, less 32 for the "
          "temporary file written beside it",
          flag, path, strlen(base), name_max);
}

int pr_write_full(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return k < 0 ? errno : EIO;
    p += k, n -= (size_t)k;
  }
  return 0;
}

// files.h: writing the compiler's output files without ever leaving a half-written one, and
// opening the files it reads (the model, --costs, --schedule F.csv, --topology, plan --trace) only
// where they are regular files.
#ifndef PIPEC_FILES_H
#define PIPEC_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "diag.h"

// Writes len bytes of text to path through path.tmp renamed over it (a reader sees the old file
// or the new one, never a part); false after reporting "cannot write 'path': why" through d.
bool write_file_atomic(const char *path, const char *text, size_t len, Diag *d);

// Opens path for reading where it is a regular file. NULL when it is not (*kind: "a FIFO", "a
// directory", ...: a FIFO would block the open or the read forever, a device may never end) or
// cannot be opened (*kind NULL, errno says why). The file is checked by stat before it is
// opened, opened with O_NONBLOCK (a FIFO put there since does not block the open) and checked
// again by fstat, so what is read is what was checked (runtime/files.c does the same).
FILE *open_regular(const char *path, const char **kind);

// Removes path and, for a directory, everything under it (links not followed); quiet: for a
// temporary directory (pipec profile).
void remove_tree(const char *path);

#endif

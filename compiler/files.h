// files.h: writing the compiler's output files without ever leaving a half-written one.
#ifndef PIPEC_FILES_H
#define PIPEC_FILES_H

#include <stdbool.h>
#include <stddef.h>

#include "diag.h"

// Writes len bytes of text to path through path.tmp renamed over it (a reader sees the old file
// or the new one, never a part); false after reporting "cannot write 'path': why" through d.
bool write_file_atomic(const char *path, const char *text, size_t len, Diag *d);

// Removes path and, for a directory, everything under it (links not followed); quiet: for a
// temporary directory (pipec profile).
void remove_tree(const char *path);

#endif

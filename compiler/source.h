// The model source: the file's bytes, the cJSON tree parsed from them, and the position of every
// JSON value (line:col), so that later passes can point their diagnostics at the file.
//
// cJSON keeps no positions, so after it has accepted the text we walk the text and the tree
// together (cJSON keeps object members and array elements in document order) and record the
// byte offset of every item: the key's offset for object members, the value's for array elements.
#ifndef PIPEC_SOURCE_H
#define PIPEC_SOURCE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "../ir/arena.h"
#include "../ir/diag.h"

typedef struct PosEntry {
  const cJSON *item; // key (NULL = empty slot)
  size_t offset;     // byte offset in the text
} PosEntry;

typedef struct Source {
  const char *path;    // as given
  char *text;          // file contents, NUL-terminated (arena)
  size_t len;          // bytes in text
  size_t *lines;       // byte offset of the start of each line
  int nlines;          // entries in lines
  PosEntry *pos;       // item -> offset hash table
  size_t pos_cap;      // slots in pos (power of two)
  cJSON *root;         // parsed document (freed by source_free)
} Source;

// Largest model file accepted.
#define PIPEC_MAX_SOURCE ((size_t)256 << 20)

// Reads and parses path; reports I/O and JSON syntax errors (FILE:LINE:COL) and returns false.
bool source_load(Source *s, Arena *a, const char *path, Diag *d);
// Parses text already in memory (unit tests); path is used in messages only.
bool source_parse(Source *s, Arena *a, const char *path, const char *text, size_t len, Diag *d);
// Position of a JSON item; {0,0} when unknown.
Loc source_loc(const Source *s, const cJSON *item);
// Line and column of a byte offset.
Loc source_offset_loc(const Source *s, size_t offset);
void source_free(Source *s);

#endif

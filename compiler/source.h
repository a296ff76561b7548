// The model source: the file's bytes, the cJSON tree parsed from them, and the position of every
// JSON value (line:col), so that later passes can point their diagnostics at the file.
//
// cJSON is lenient (leading zeros, control bytes in strings and as whitespace, any byte sequence),
// so before it runs, a strict RFC 8259 scan checks the text (UTF-8, at most 1000 levels deep) and
// reports the first offending byte in words a JSON writer recognises. cJSON keeps no positions,
// so after it has accepted the text we walk the text and the tree together (cJSON keeps object
// members and array elements in document order) and record the byte offset of every item: the
// key's offset for object members, the value's for array elements, and the value's own offset
// for every item (numbers are read again from their text: a double cannot hold 2^53 + 1).
#ifndef PIPEC_SOURCE_H
#define PIPEC_SOURCE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../ir/arena.h"
#include "../ir/diag.h"

typedef struct PosEntry {
  const cJSON *item; // key (NULL = empty slot)
  size_t offset;     // byte offset in the text (the key's for object members)
  size_t value;      // byte offset of the value itself
} PosEntry;

typedef struct Source {
  const char *path; // as given
  char *text;       // file contents, NUL-terminated (arena)
  size_t len;       // bytes in text
  size_t *lines;    // byte offset of the start of each line
  int nlines;       // entries in lines
  PosEntry *pos;    // item -> offset hash table
  size_t pos_cap;   // slots in pos (power of two)
  cJSON *root;      // parsed document (freed by source_free)
} Source;

// Largest model file accepted.
#define PIPEC_MAX_SOURCE ((size_t)256 << 20)

// Reads and parses path; reports I/O and JSON syntax errors (FILE:LINE:COL) and returns false.
// A path that is not a regular file (a FIFO, a directory, a device) is refused unread.
bool source_load(Source *s, Arena *a, const char *path, Diag *d);
// The same for a JSON file that is not the model: what names it in the messages ("model file",
// "the costs file": "cannot open the costs file: ...", "the costs file is a FIFO, ...").
bool source_load_file(Source *s, Arena *a, const char *path, const char *what, Diag *d);
// Parses text already in memory (unit tests); path is used in messages only. Both attach the text
// to d (diag_set_source) for the excerpts under its messages: s and its arena must outlive d's use.
bool source_parse(Source *s, Arena *a, const char *path, const char *text, size_t len, Diag *d);
// Position of a JSON item; {0,0} when unknown.
Loc source_loc(const Source *s, const cJSON *item);
// Line and column of a byte offset.
Loc source_offset_loc(const Source *s, size_t offset);
// The text of a number item as written in the file (*len bytes, not NUL-terminated); NULL when
// the item is not a number of this document.
const char *source_number_text(const Source *s, const cJSON *item, size_t *len);
// A number item read as an exact integer: true with *out when it is a number whose literal (1, -3,
// 1e3, 8.0) denotes an integer of magnitude at most 2^53. The literal decides, not the double
// cJSON stored (which rounds 9007199254740993 to 2^53); items not of this document fall back to
// the double.
bool source_int(const Source *s, const cJSON *item, int64_t *out);
// A number item for messages: its literal as written (shortened with "..." when long), or %.17g
// of its value for items not of this document. Writes into buf and returns it.
const char *source_number_str(const Source *s, const cJSON *item, char *buf, size_t cap);
void source_free(Source *s);
// Length of the valid UTF-8 sequence at p (1 to 4); 0 when it is not one (a stray continuation
// byte, an overlong form, a surrogate, above U+10FFFF, or cut short). p is NUL-terminated.
int source_utf8_len(const unsigned char *p);

#endif

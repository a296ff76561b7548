// Diagnostics: every compiler error goes through here and is printed as
//   FILE:LINE:COL: error: MESSAGE        (a position in the model file is known)
//   FILE: error: MESSAGE                 (no position: MESSAGE starts with the JSON path)
// Passes report errors and the driver stops after a pass that reported any.
//
// With a source attached (diag_set_source, done by source_parse) and excerpts on (the driver
// turns them on; unit tests compare bare messages), a located message is followed by its source
// line and a caret under the column, as chibicc's error_at and clang do:
//   m.json:17:19: error: nodes[1] "a": unknown op 'rellu' (did you mean 'relu'?)
//       {"name": "a", "op": "rellu", "inputs": ["h"]},
//                     ^
// LINE and COL are 1-based; COL counts bytes (a tab is one, "é" is two), so it is exact for any
// tool that seeks in the file. The excerpt aligns its caret by what a terminal shows instead: tabs
// are copied into the caret line, a UTF-8 character takes the columns it occupies on screen (one;
// two for East Asian wide characters and emoji; none for combining marks), and control bytes
// and invalid UTF-8 are shown as '?'. A line wider than DIAG_EXCERPT_WIDTH columns is shown as
// a window around the column with "..." where it is cut.
//
// Machine-readable formats (--diagnostics-format=json|sarif): each message is kept as a record
// instead (its kind, position, text and the pass that reported it) and diag_out.c
// (compiler/diag_out.h) writes them all at the end as one JSON document; nothing else is printed.
#ifndef PIPEC_DIAG_H
#define PIPEC_DIAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

// Widest excerpt line (columns, "..." included); the window keeps DIAG_EXCERPT_BEFORE columns
// left of the caret where the line is longer.
enum { DIAG_EXCERPT_WIDTH = 100, DIAG_EXCERPT_BEFORE = 40 };

typedef struct Loc {
  int line; // 1-based line in the model file; 0 = unknown
  int col;  // 1-based column (bytes); 0 = unknown
} Loc;

// How messages are written.
typedef enum DiagFormat {
  DIAG_TEXT,  // as above, each message when it is reported
  DIAG_JSON,  // records, written at the end as a JSON array (diag_out.c)
  DIAG_SARIF, // records, written at the end as a SARIF 2.1.0 log (diag_out.c)
} DiagFormat;

// One message of a machine-readable format.
typedef struct DiagRecord {
  const char *kind; // "error", "warning" or "note"
  Loc loc;          // position in file ({0, 0}: none)
  char *message;    // the text after "error: " (malloc'd; NULL if out of memory)
  const char *pass; // the pass that reported it (Diag.pass then; NULL: none)
  const char *file; // the file it is about (Diag.file then: the model, or a schedule's CSV)
  char *line;       // file's line at loc.line, without its break (malloc'd; NULL: none known)
  size_t line_len;  // its bytes
} DiagRecord;

typedef struct Diag {
  const char *file;    // model file name as given on the command line
  FILE *out;           // where messages go (stderr; a memstream in unit tests)
  int errors;          // errors reported so far
  int warnings;        // warnings reported so far
  bool excerpts;       // print the source line and a caret under located messages
  const char *text;    // the model file's bytes (NULL: no source attached)
  size_t len;          // bytes in text
  const size_t *lines; // byte offset of the start of each line of text
  int nlines;          // entries in lines
  DiagFormat format;   // DIAG_TEXT prints; the other formats keep records
  const char *pass;    // the pass running now (the driver sets it; records carry it)
  DiagRecord *recs;    // the records so far (machine-readable formats; malloc'd)
  int nrecs;           // entries in recs
  int caprecs;         // capacity of recs
} Diag;

void diag_init(Diag *d, const char *file, FILE *out);
// Attaches the model's text for excerpts (the caller keeps text and lines alive while d is used).
void diag_set_source(Diag *d, const char *text, size_t len, const size_t *lines, int nlines);
void diag_error(Diag *d, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_warning(Diag *d, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// A note about the run rather than a place in the file, printed as "pipec: note: MESSAGE" (a
// record of kind "note" in the machine-readable formats); counts as neither error nor warning.
void diag_note(Diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Frees the records (a Diag in the text format holds nothing to free).
void diag_free(Diag *d);
// Prints the excerpt of one line (len bytes at line, no line break in it) with a caret under
// byte column col (1-based; past the end: after the last character): two lines, each ending in
// '\n' (the line as it is, then the caret line).
void diag_excerpt(FILE *out, const char *line, size_t len, int col);
// A file name or path for a one-line message: s with its control bytes written as escapes ('\n',
// '\r', '\t', else '\xHH'), every other byte as it is. malloc'd (the caller frees it); NULL if
// out of memory. The text format prints the file of each message through it.
char *diag_printable(const char *s);

#endif

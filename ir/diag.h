// Diagnostics: every compiler error goes through here and is printed as
//   FILE:LINE:COL: error: MESSAGE        (a position in the model file is known)
//   FILE: error: MESSAGE                 (no position: MESSAGE starts with the JSON path)
// Passes report errors and the driver stops after a pass that reported any.
#ifndef PIPEC_DIAG_H
#define PIPEC_DIAG_H

#include <stdio.h>

typedef struct Loc {
  int line; // 1-based line in the model file; 0 = unknown
  int col;  // 1-based column (bytes); 0 = unknown
} Loc;

typedef struct Diag {
  const char *file; // model file name as given on the command line
  FILE *out;        // where messages go (stderr; a memstream in unit tests)
  int errors;       // errors reported so far
  int warnings;     // warnings reported so far
} Diag;

void diag_init(Diag *d, const char *file, FILE *out);
void diag_error(Diag *d, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_warning(Diag *d, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif

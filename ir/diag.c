// Diagnostics printer (see diag.h for the format).
#include "diag.h"

#include <stdarg.h>

void diag_init(Diag *d, const char *file, FILE *out) {
  d->file = file;
  d->out = out;
  d->errors = 0;
  d->warnings = 0;
}

static void vreport(Diag *d, Loc loc, const char *kind, const char *fmt, va_list ap) {
  if (loc.line > 0)
    fprintf(d->out, "%s:%d:%d: %s: ", d->file, loc.line, loc.col, kind);
  else
    fprintf(d->out, "%s: %s: ", d->file, kind);
  vfprintf(d->out, fmt, ap);
  fputc('\n', d->out);
}

void diag_error(Diag *d, Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(d, loc, "error", fmt, ap);
  va_end(ap);
  d->errors++;
}

void diag_warning(Diag *d, Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(d, loc, "warning", fmt, ap);
  va_end(ap);
  d->warnings++;
}

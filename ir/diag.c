// Diagnostics printer (see diag.h for the format), with the source excerpt: the line of the
// message's position and a caret under its column.
//
// The excerpt decodes the line one character at a time (UTF-8; a byte that does not start a valid
// sequence is one '?' character) and gives each a screen width from a small table of wide and
// combining ranges. Only a bounded stretch around the column is decoded, so a minified model of
// one 100 MB line costs no more than a short one.
#include "diag.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void diag_init(Diag *d, const char *file, FILE *out) {
  *d = (Diag){.file = file, .out = out};
}

void diag_set_source(Diag *d, const char *text, size_t len, const size_t *lines, int nlines) {
  d->text = text;
  d->len = len;
  d->lines = lines;
  d->nlines = nlines;
}

// ---------------------------------------------------------------------------------------------
// Characters and their widths on screen

typedef struct Char {
  size_t len; // bytes of the character in the line (1 to 4)
  int width;  // columns on screen (0, 1 or 2; a tab counts 1 here and is copied as a tab)
  bool raw;   // printed as its bytes (false: printed as '?')
  bool tab;   // a tab: copied into the caret line
} Char;

typedef struct Range {
  uint32_t lo, hi; // code points lo..hi (inclusive)
} Range;

// Combining marks and zero-width format characters, drawn over the previous character.
static const Range zero_width[] = {
    {0x0300, 0x036f}, {0x0483, 0x0489}, {0x0591, 0x05bd},   {0x05bf, 0x05bf},   {0x05c1, 0x05c2},
    {0x05c4, 0x05c5}, {0x05c7, 0x05c7}, {0x0610, 0x061a},   {0x064b, 0x065f},   {0x0670, 0x0670},
    {0x06d6, 0x06dc}, {0x06df, 0x06e4}, {0x06e7, 0x06e8},   {0x06ea, 0x06ed},   {0x0900, 0x0902},
    {0x093a, 0x093a}, {0x093c, 0x093c}, {0x0941, 0x0948},   {0x094d, 0x094d},   {0x0951, 0x0957},
    {0x0e31, 0x0e31}, {0x0e34, 0x0e3a}, {0x0e47, 0x0e4e},   {0x1ab0, 0x1aff},   {0x1dc0, 0x1dff},
    {0x200b, 0x200f}, {0x202a, 0x202e}, {0x2060, 0x2064},   {0x20d0, 0x20ff},   {0xfe00, 0xfe0f},
    {0xfe20, 0xfe2f}, {0xfeff, 0xfeff}, {0x1f3fb, 0x1f3ff}, {0xe0000, 0xe0fff},
};

// East Asian wide and fullwidth characters and emoji shown as two columns.
static const Range wide[] = {
    {0x1100, 0x115f},   {0x231a, 0x231b},   {0x2329, 0x232a},   {0x23e9, 0x23ec},
    {0x23f0, 0x23f0},   {0x23f3, 0x23f3},   {0x25fd, 0x25fe},   {0x2614, 0x2615},
    {0x2648, 0x2653},   {0x267f, 0x267f},   {0x2693, 0x2693},   {0x26a1, 0x26a1},
    {0x26aa, 0x26ab},   {0x26bd, 0x26be},   {0x26c4, 0x26c5},   {0x26ce, 0x26ce},
    {0x26d4, 0x26d4},   {0x26ea, 0x26ea},   {0x26f2, 0x26f3},   {0x26f5, 0x26f5},
    {0x26fa, 0x26fa},   {0x26fd, 0x26fd},   {0x2705, 0x2705},   {0x270a, 0x270b},
    {0x2728, 0x2728},   {0x274c, 0x274c},   {0x274e, 0x274e},   {0x2753, 0x2755},
    {0x2757, 0x2757},   {0x2795, 0x2797},   {0x27b0, 0x27b0},   {0x27bf, 0x27bf},
    {0x2b1b, 0x2b1c},   {0x2b50, 0x2b50},   {0x2b55, 0x2b55},   {0x2e80, 0x303e},
    {0x3041, 0x33ff},   {0x3400, 0x4dbf},   {0x4e00, 0x9fff},   {0xa000, 0xa4cf},
    {0xa960, 0xa97f},   {0xac00, 0xd7a3},   {0xf900, 0xfaff},   {0xfe10, 0xfe19},
    {0xfe30, 0xfe6f},   {0xff00, 0xff60},   {0xffe0, 0xffe6},   {0x16fe0, 0x16fe4},
    {0x17000, 0x18cff}, {0x1b000, 0x1b2ff}, {0x1f004, 0x1f004}, {0x1f0cf, 0x1f0cf},
    {0x1f18e, 0x1f18e}, {0x1f191, 0x1f19a}, {0x1f200, 0x1f2ff}, {0x1f300, 0x1f64f},
    {0x1f680, 0x1f6ff}, {0x1f7e0, 0x1f7eb}, {0x1f900, 0x1f9ff}, {0x1fa70, 0x1faff},
    {0x20000, 0x2fffd}, {0x30000, 0x3fffd},
};

static bool in_ranges(uint32_t c, const Range *r, int n) {
  int lo = 0, hi = n - 1; // sorted, disjoint: binary search
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (c < r[mid].lo)
      hi = mid - 1;
    else if (c > r[mid].hi)
      lo = mid + 1;
    else
      return true;
  }
  return false;
}

// The character at p (n > 0 bytes left in the line).
static Char decode(const unsigned char *p, size_t n) {
  if (*p == '\t') return (Char){1, 1, true, true};
  if (*p < 0x20 || *p == 0x7f) return (Char){1, 1, false, false};
  if (*p < 0x80) return (Char){1, 1, true, false};
  size_t len = *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : 2;
  uint32_t c = *p & (len == 4 ? 0x07 : len == 3 ? 0x0f : 0x1f);
  if (*p < 0xc2 || *p > 0xf4 || len > n) return (Char){1, 1, false, false};
  for (size_t i = 1; i < len; i++) {
    if ((p[i] & 0xc0) != 0x80) return (Char){1, 1, false, false};
    c = c << 6 | (p[i] & 0x3f);
  }
  bool overlong = (len == 3 && c < 0x800) || (len == 4 && c < 0x10000);
  if (overlong || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
    return (Char){1, 1, false, false};               // invalid: its first byte is one '?'
  if (c < 0xa0) return (Char){len, 1, false, false}; // a C1 control: one '?'
  int w = in_ranges(c, zero_width, sizeof zero_width / sizeof zero_width[0]) ? 0
          : in_ranges(c, wide, sizeof wide / sizeof wide[0])                 ? 2
                                                                             : 1;
  return (Char){len, w, true, false};
}

// ---------------------------------------------------------------------------------------------
// The excerpt

static void put_chars(FILE *out, const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n;) {
    Char c = decode(p + i, n - i);
    if (c.raw)
      fwrite(p + i, 1, c.len, out);
    else
      fputc('?', out);
    i += c.len;
  }
}

// Columns of t[from..len) up to limit + 1 (bounded: stops once wider than limit, or after
// 8 * limit bytes of zero-width characters, which then count as too wide).
static int width_upto(const unsigned char *t, size_t from, size_t len, int limit) {
  int w = 0;
  for (size_t j = from; j < len && w <= limit;) {
    if (j - from > 8 * (size_t)limit) return limit + 1;
    Char c = decode(t + j, len - j);
    w += c.width;
    j += c.len;
  }
  return w;
}

void diag_excerpt(FILE *out, const char *line, size_t len, int col) {
  const unsigned char *t = (const unsigned char *)line;
  size_t at = col > 1 ? (size_t)col - 1 : 0; // the caret's byte
  if (at > len) at = len;
  // Decode from far enough left of the caret for the window's left part (a character takes at
  // most 4 bytes), moved forward to the start of a character.
  size_t from = at > 4 * DIAG_EXCERPT_BEFORE + 4 ? at - 4 * DIAG_EXCERPT_BEFORE - 4 : 0;
  if (from > 0)
    while (from < at && (t[from] & 0xc0) == 0x80) from++;
  // The characters between `from` and the caret's character: their starts and widths.
  enum { MAXC = 4 * DIAG_EXCERPT_BEFORE + 8 };
  size_t start[MAXC], caret = from; // caret: start of the character that holds byte `at`
  int width[MAXC], nc = 0;
  while (caret < len && nc < MAXC) {
    Char c = decode(t + caret, len - caret);
    if (caret + c.len > at) break;
    start[nc] = caret;
    width[nc++] = c.width;
    caret += c.len;
  }
  size_t left = 0, right = len; // the bytes shown
  bool cut_left = false, cut_right = false;
  if (width_upto(t, 0, len, DIAG_EXCERPT_WIDTH) > DIAG_EXCERPT_WIDTH) {
    // A window: at most DIAG_EXCERPT_BEFORE columns left of the caret, then what fits.
    int k = nc, w = 0;
    while (k > 0 && w + width[k - 1] <= DIAG_EXCERPT_BEFORE) w += width[--k];
    left = k < nc ? start[k] : caret;
    cut_left = left > 0;
    int budget = DIAG_EXCERPT_WIDTH - (cut_left ? 3 : 0);
    if (width_upto(t, left, len, budget) > budget) {
      cut_right = true;
      int shown = 0;
      for (right = left; right < len;) {
        Char c = decode(t + right, len - right);
        if (shown + c.width > budget - 3 && right > caret) break;
        shown += c.width;
        right += c.len;
      }
    }
  }
  if (cut_left) fputs("...", out);
  put_chars(out, t + left, right - left);
  if (cut_right) fputs("...", out);
  fputc('\n', out);
  // The caret line: a tab for each tab, spaces for the other characters' widths.
  if (cut_left) fputs("   ", out);
  for (size_t j = left; j < caret;) {
    Char c = decode(t + j, len - j);
    if (c.tab)
      fputc('\t', out);
    else
      for (int s = 0; s < c.width; s++) fputc(' ', out);
    j += c.len;
  }
  fputs("^\n", out);
}

// ---------------------------------------------------------------------------------------------
// Messages

// Line `line` of the attached source: bytes [*b, *e), without its break; false when no source
// is attached or it has no such line.
static bool source_line(const Diag *d, int line, size_t *b, size_t *e) {
  if (!d->text || line < 1 || line > d->nlines) return false;
  *b = d->lines[line - 1];
  *e = line < d->nlines ? d->lines[line] - 1 : d->len; // its '\n', or the end
  if (*e > *b && d->text[*e - 1] == '\r') (*e)--;      // CRLF line breaks
  return true;
}

// The excerpt of line loc.line, when the source is attached and the position lies in it.
static void excerpt_at(const Diag *d, Loc loc) {
  size_t b, e;
  if (!d->excerpts || loc.col < 1 || !source_line(d, loc.line, &b, &e)) return;
  if ((size_t)loc.col - 1 > e - b) return; // not a position of this line
  diag_excerpt(d->out, d->text + b, e - b, loc.col);
}

// A machine-readable format's record of the message (printed as text if memory runs out).
static void record(Diag *d, Loc loc, const char *kind, const char *fmt, va_list ap) {
  va_list aq;
  va_copy(aq, ap);
  int n = vsnprintf(NULL, 0, fmt, aq);
  va_end(aq);
  char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (d->nrecs == d->caprecs) {
    int cap = d->caprecs ? 2 * d->caprecs : 16;
    DiagRecord *r = realloc(d->recs, (size_t)cap * sizeof *r);
    if (r) d->recs = r, d->caprecs = cap;
  }
  if (!msg || d->nrecs == d->caprecs) {
    free(msg);
    fprintf(d->out, "%s: %s: (out of memory for the diagnostics) ", d->file, kind);
    vfprintf(d->out, fmt, ap);
    fputc('\n', d->out);
    return;
  }
  vsnprintf(msg, (size_t)n + 1, fmt, ap);
  // The located line, copied: the record may outlive the source attached now (a CSV's).
  char *line = NULL;
  size_t len = 0, b, e;
  if (source_line(d, loc.line, &b, &e)) {
    if ((line = malloc(e - b + 1))) {
      memcpy(line, d->text + b, e - b);
      line[e - b] = '\0';
      len = e - b;
    }
  }
  d->recs[d->nrecs++] = (DiagRecord){kind, loc, msg, d->pass, d->file, line, len};
}

char *diag_printable(const char *s) {
  char *o = malloc(4 * strlen(s) + 1), *q = o;
  if (!o) return NULL;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '\n' || c == '\r' || c == '\t')
      q += sprintf(q, "\\%c", c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
    else if (c < 0x20 || c == 0x7f)
      q += sprintf(q, "\\x%02x", c);
    else
      *q++ = (char)c;
  }
  *q = '\0';
  return o;
}

static void vreport(Diag *d, Loc loc, const char *kind, const char *fmt, va_list ap) {
  if (d->format != DIAG_TEXT) {
    record(d, loc, kind, fmt, ap);
    return;
  }
  char *file = diag_printable(d->file); // one line, whatever the file's name holds
  const char *f = file ? file : d->file;
  if (loc.line > 0 && loc.col > 0)
    fprintf(d->out, "%s:%d:%d: %s: ", f, loc.line, loc.col, kind);
  else if (loc.line > 0) // a line without a column (a Python line of a .pt2's stack trace)
    fprintf(d->out, "%s:%d: %s: ", f, loc.line, kind);
  else
    fprintf(d->out, "%s: %s: ", f, kind);
  free(file);
  vfprintf(d->out, fmt, ap);
  fputc('\n', d->out);
  if (loc.line > 0) excerpt_at(d, loc);
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

void diag_note(Diag *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (d->format != DIAG_TEXT) {
    record(d, (Loc){0, 0}, "note", fmt, ap);
  } else {
    fputs("pipec: note: ", d->out);
    vfprintf(d->out, fmt, ap);
    fputc('\n', d->out);
  }
  va_end(ap);
}

void diag_free(Diag *d) {
  for (int i = 0; i < d->nrecs; i++) free(d->recs[i].message), free(d->recs[i].line);
  free(d->recs);
  d->recs = NULL;
  d->nrecs = d->caprecs = 0;
}

// Model source loading: read the file, check it strictly, parse it with cJSON, map every item to
// its line:col.
#include "source.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "files.h"

enum {
  MAX_DEPTH = CJSON_NESTING_LIMIT, // containers cJSON nests (it fails past this)
  MAX_NUMBER = 63,                 // longest number literal cJSON reads whole
  NO_KEY = -1,
};

static size_t hash_ptr(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x;
}

static void pos_put(Source *s, const cJSON *item, size_t offset, size_t value) {
  size_t i = hash_ptr(item) & (s->pos_cap - 1);
  while (s->pos[i].item) i = (i + 1) & (s->pos_cap - 1);
  s->pos[i] = (PosEntry){item, offset, value};
}

static const PosEntry *pos_find(const Source *s, const cJSON *item) {
  if (!item || !s->pos_cap) return NULL;
  size_t i = hash_ptr(item) & (s->pos_cap - 1);
  for (; s->pos[i].item; i = (i + 1) & (s->pos_cap - 1))
    if (s->pos[i].item == item) return &s->pos[i];
  return NULL;
}

static size_t count_items(const cJSON *it) {
  size_t n = 1;
  for (const cJSON *c = it->child; c; c = c->next) n += count_items(c);
  return n;
}

// JSON whitespace (RFC 8259): nothing else, although cJSON skips every byte <= 0x20.
static const char *skip_ws(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return p;
}

// p at the opening quote of a string that the scan accepted; returns the byte after the closing
// quote.
static const char *skip_string(const char *p) {
  p++;
  while (*p && *p != '"') p += (*p == '\\' && p[1]) ? 2 : 1;
  return *p ? p + 1 : p;
}

// Walks the value starting at p (no leading whitespace) in step with item; key is the offset of
// an object member's key, NO_KEY for array elements and the root. Returns the end of the value.
static const char *walk(Source *s, const cJSON *item, const char *p, long key) {
  size_t at = (size_t)(p - s->text);
  pos_put(s, item, key == NO_KEY ? at : (size_t)key, at);
  if (*p == '{' || *p == '[') {
    bool obj = *p == '{';
    p = skip_ws(p + 1);
    for (const cJSON *c = item->child; c; c = c->next) {
      long k = NO_KEY;
      if (obj) {
        k = (long)(p - s->text);
        p = skip_ws(skip_string(p));
        p = skip_ws(p + 1); // ':'
      }
      p = skip_ws(walk(s, c, p, k));
      if (*p == ',') p = skip_ws(p + 1);
    }
    return *p ? p + 1 : p; // '}' or ']'
  }
  if (*p == '"') return skip_string(p);
  while (*p && !strchr(",]} \t\r\n", *p)) p++;
  return p;
}

static void index_lines(Source *s, Arena *a) {
  int n = 1;
  for (size_t i = 0; i < s->len; i++) n += s->text[i] == '\n';
  s->lines = ARENA_ARRAY(a, size_t, n);
  s->nlines = 0;
  s->lines[s->nlines++] = 0;
  for (size_t i = 0; i < s->len; i++)
    if (s->text[i] == '\n') s->lines[s->nlines++] = i + 1;
}

Loc source_offset_loc(const Source *s, size_t offset) {
  int lo = 0, hi = s->nlines - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (s->lines[mid] <= offset)
      lo = mid;
    else
      hi = mid - 1;
  }
  return (Loc){lo + 1, (int)(offset - s->lines[lo]) + 1};
}

Loc source_loc(const Source *s, const cJSON *item) {
  const PosEntry *e = pos_find(s, item);
  return e ? source_offset_loc(s, e->offset) : (Loc){0, 0};
}

// ---------------------------------------------------------------------------------------------
// Bytes: no NUL, valid UTF-8

// Length of the valid UTF-8 sequence at p (1 to 4); 0 when it is not one (a stray continuation
// byte, an overlong form, a surrogate, above U+10FFFF, or cut short). p is NUL-terminated.
int source_utf8_len(const unsigned char *p) {
  unsigned lo = 0x80, hi = 0xbf;
  int n;
  if (p[0] < 0x80) return 1;
  if (p[0] >= 0xc2 && p[0] <= 0xdf)
    n = 2;
  else if (p[0] >= 0xe0 && p[0] <= 0xef)
    n = 3, lo = p[0] == 0xe0 ? 0xa0 : lo, hi = p[0] == 0xed ? 0x9f : hi;
  else if (p[0] >= 0xf0 && p[0] <= 0xf4)
    n = 4, lo = p[0] == 0xf0 ? 0x90 : lo, hi = p[0] == 0xf4 ? 0x8f : hi;
  else
    return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (int i = 2; i < n; i++)
    if ((p[i] & 0xc0) != 0x80) return 0;
  return n;
}

// Reports the first NUL byte or invalid UTF-8 sequence, at its first byte.
static bool check_bytes(const Source *s, Diag *d) {
  const unsigned char *t = (const unsigned char *)s->text;
  for (size_t i = 0; i < s->len;) {
    if (t[i] - 1u < 0x7f) { // ASCII other than NUL
      i++;
      continue;
    }
    if (!t[i]) {
      diag_error(d, source_offset_loc(s, i),
                 "file contains a NUL byte; a model file is UTF-8 text");
      return false;
    }
    int n = source_utf8_len(t + i);
    if (!n) {
      diag_error(d, source_offset_loc(s, i),
                 "invalid UTF-8 (byte 0x%02x); a model file is UTF-8 text", t[i]);
      return false;
    }
    i += (size_t)n;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Strict syntax scan (RFC 8259). It runs before cJSON and stops at the first offending byte, so
// that every syntax error is reported where it is, in words a JSON writer recognises.

typedef struct Scan {
  const Source *s;
  Diag *d;
  int depth; // containers open
} Scan;

__attribute__((format(printf, 3, 4))) static bool scan_error(Scan *c, const char *at,
                                                             const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(c->d, source_offset_loc(c->s, (size_t)(at - c->s->text)), "JSON syntax error: %s",
             msg);
  return false;
}

// Something the grammar does not allow at `at`: say what was found there. after ends the message
// of an unexpected character ("" or " after the JSON document").
static bool unexpected(Scan *c, const char *at, const char *after) {
  const char *t = c->s->text;
  unsigned char ch = (unsigned char)*at;
  if (!ch) return scan_error(c, at, "unexpected end of file (unclosed '{', '[' or string?)");
  const char *prev = at;
  while (prev > t && strchr(" \t\r\n", prev[-1])) prev--;
  if ((ch == '}' || ch == ']') && prev > t && prev[-1] == ',')
    return scan_error(c, at, "unexpected '%c' (trailing comma before it)", ch);
  if (ch == '/' && (at[1] == '/' || at[1] == '*'))
    return scan_error(c, at, "comments are not allowed in JSON");
  if (ch == '\'') return scan_error(c, at, "strings must use double quotes, not '");
  if (ch >= 0x21 && ch < 0x7f) return scan_error(c, at, "unexpected '%c'%s", ch, after);
  return scan_error(c, at, "unexpected byte 0x%02x%s", ch, after);
}

// Four hex digits at p as a number, or -1 (stops at the NUL terminator).
static long hex4(const char *p) {
  long v = 0;
  for (int i = 0; i < 4; i++) {
    char ch = p[i];
    int h = ch >= '0' && ch <= '9'   ? ch - '0'
            : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
            : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                     : -1;
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

// Each scan_ function takes p at the first byte of its construct and returns the byte after it,
// or NULL after reporting an error.

static const char *scan_string(Scan *c, const char *p) {
  const char *open = p++;
  for (;;) {
    unsigned char ch = (unsigned char)*p;
    if (ch == '"') return p + 1;
    if (!ch || (ch == '\\' && !p[1]))
      return scan_error(c, open, "unterminated string (the file ends before its closing quote)"),
             NULL;
    if (ch == '\n' || ch == '\r')
      return scan_error(c, open,
                        "unterminated string (a line break comes before its closing quote)"),
             NULL;
    if (ch < 0x20) {
      const char *esc = ch == '\t' ? "\\t" : ch == '\b' ? "\\b" : ch == '\f' ? "\\f" : NULL;
      if (esc)
        return scan_error(c, p, "control character 0x%02x in a string (write it as %s)", ch, esc),
               NULL;
      return scan_error(c, p, "control character 0x%02x in a string (write it as \\u%04x)", ch, ch),
             NULL;
    }
    if (ch != '\\') {
      p++;
      continue;
    }
    if (strchr("\"\\/bfnrt", p[1])) { // p[1] is not NUL here
      p += 2;
      continue;
    }
    if (p[1] != 'u') {
      if (p[1] > 0x20 && p[1] < 0x7f)
        return scan_error(c, p,
                          "invalid escape '\\%c' in a string (JSON has \\\" \\\\ \\/ \\b \\f \\n "
                          "\\r \\t \\uXXXX)",
                          p[1]),
               NULL;
      return scan_error(
                 c, p,
                 "invalid escape in a string (JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)"),
             NULL;
    }
    long u = hex4(p + 2);
    if (u < 0)
      return scan_error(c, p, "invalid escape in a string (\\u needs four hex digits)"), NULL;
    if (u == 0)
      return scan_error(c, p, "\\u0000 in a string (a model's strings cannot contain NUL)"), NULL;
    if (u >= 0xd800 && u <= 0xdbff) { // a high surrogate: a low one must follow
      long lo = p[6] == '\\' && p[7] == 'u' ? hex4(p + 8) : -1;
      if (lo < 0xdc00 || lo > 0xdfff)
        return scan_error(c, p, "unpaired surrogate \\u%04lx in a string", u), NULL;
      p += 12;
    } else if (u >= 0xdc00 && u <= 0xdfff) {
      return scan_error(c, p, "unpaired surrogate \\u%04lx in a string", u), NULL;
    } else {
      p += 6;
    }
  }
}

// Bytes from p that look like part of a number (for messages and source_number_text).
static size_t number_chars(const char *p) {
  size_t n = 0;
  while (p[n] && strchr("0123456789+-.eE", p[n])) n++;
  return n;
}

// A malformed number at b: what (a message with one %s for the number as written) and where.
static const char *bad_number(Scan *c, const char *b, const char *what) {
  size_t len = number_chars(b);
  char num[48];
  snprintf(num, sizeof num, "%.*s%s", len > 40 ? 40 : (int)len, b, len > 40 ? "..." : "");
  char msg[128];
  snprintf(msg, sizeof msg, what, num);
  return scan_error(c, b, "%s", msg), NULL;
}

static const char *scan_number(Scan *c, const char *p) {
  const char *b = p;
  if (*p == '-') p++;
  if (*p == '0' && isdigit((unsigned char)p[1]))
    return bad_number(c, b, "numbers must not have leading zeros (got '%s')");
  bool ok = isdigit((unsigned char)*p);
  while (isdigit((unsigned char)*p)) p++;
  if (ok && *p == '.') {
    ok = isdigit((unsigned char)*++p);
    while (isdigit((unsigned char)*p)) p++;
  }
  if (ok && (*p == 'e' || *p == 'E')) {
    p++;
    if (*p == '+' || *p == '-') p++;
    ok = isdigit((unsigned char)*p);
    while (isdigit((unsigned char)*p)) p++;
  }
  if (!ok) return bad_number(c, b, "invalid number '%s'");
  if (p - b > MAX_NUMBER)
    return bad_number(c, b, "number '%s' is too long (more than 63 characters)");
  return p;
}

static const char *scan_word(Scan *c, const char *p, const char *word) {
  size_t n = strlen(word);
  return strncmp(p, word, n) == 0 ? p + n : (unexpected(c, p, ""), NULL);
}

static const char *scan_value(Scan *c, const char *p);

static const char *scan_container(Scan *c, const char *p) {
  bool obj = *p == '{';
  char close = obj ? '}' : ']';
  if (c->depth == MAX_DEPTH)
    return scan_error(c, p, "nesting deeper than %d levels", MAX_DEPTH), NULL;
  c->depth++;
  p = skip_ws(p + 1);
  if (*p != close) {
    for (;;) {
      if (obj) {
        if (*p != '"') return unexpected(c, p, ""), NULL;
        if (!(p = scan_string(c, p))) return NULL;
        p = skip_ws(p);
        if (*p != ':') return unexpected(c, p, ""), NULL;
        p = skip_ws(p + 1);
      }
      if (!(p = scan_value(c, p))) return NULL;
      p = skip_ws(p);
      if (*p != ',') break;
      p = skip_ws(p + 1);
    }
    if (*p != close) return unexpected(c, p, ""), NULL;
  }
  c->depth--;
  return p + 1;
}

static const char *scan_value(Scan *c, const char *p) {
  switch (*p) {
  case '"':
    return scan_string(c, p);
  case '{':
  case '[':
    return scan_container(c, p);
  case 't':
    return scan_word(c, p, "true");
  case 'f':
    return scan_word(c, p, "false");
  case 'n':
    return scan_word(c, p, "null");
  default:
    if (*p == '-' || isdigit((unsigned char)*p)) return scan_number(c, p);
    return unexpected(c, p, ""), NULL;
  }
}

// The whole document from start (after any byte order mark).
static bool scan_document(const Source *s, Diag *d, const char *start) {
  Scan c = {s, d, 0};
  const char *p = skip_ws(start);
  if (!*p) return scan_error(&c, p, "file is empty (no JSON value)");
  if (!(p = scan_value(&c, p))) return false;
  p = skip_ws(p);
  return !*p || unexpected(&c, p, " after the JSON document");
}

// ---------------------------------------------------------------------------------------------
// Numbers as written

const char *source_number_text(const Source *s, const cJSON *item, size_t *len) {
  const PosEntry *e = cJSON_IsNumber(item) ? pos_find(s, item) : NULL;
  if (!e) return NULL;
  *len = number_chars(s->text + e->value);
  return s->text + e->value;
}

// A number literal the scan accepted, as an exact integer of magnitude at most 2^53.
static bool literal_int(const char *t, size_t n, int64_t *out) {
  char dg[MAX_NUMBER + 1]; // the digits of the integer part, then those of the fraction
  size_t nd = 0, nfrac = 0;
  const char *p = t, *end = t + n;
  bool neg = p < end && *p == '-';
  if (n > MAX_NUMBER) return false;
  for (p += neg; p < end && isdigit((unsigned char)*p); p++) dg[nd++] = *p;
  if (p < end && *p == '.')
    for (p++; p < end && isdigit((unsigned char)*p); p++) dg[nd++] = *p, nfrac++;
  long exp = 0;
  if (p < end && (*p == 'e' || *p == 'E')) {
    bool eneg = ++p < end && *p == '-';
    if (p < end && (*p == '+' || *p == '-')) p++;
    for (; p < end; p++)
      if (exp < 1000000) exp = exp * 10 + (*p - '0');
    if (eneg) exp = -exp;
  }
  // value = digits * 10^(exp - nfrac); drop leading and trailing zeros of the digits.
  size_t f = 0, l = nd;
  while (f < nd && dg[f] == '0') f++;
  if (f == nd) return *out = 0, true;
  while (dg[l - 1] == '0') l--;
  long pow10 = exp - (long)nfrac + (long)(nd - l);           // of the last nonzero digit
  if (pow10 < 0 || (long)(l - f) + pow10 > 16) return false; // a fraction, or 10^16 > 2^53 or more
  int64_t v = 0;
  for (size_t i = f; i < l; i++) v = v * 10 + (dg[i] - '0');
  for (long i = 0; i < pow10; i++) v *= 10;
  if (v > (int64_t)1 << 53) return false;
  *out = neg ? -v : v;
  return true;
}

bool source_int(const Source *s, const cJSON *item, int64_t *out) {
  if (!cJSON_IsNumber(item)) return false;
  size_t n;
  const char *t = source_number_text(s, item, &n);
  if (t) return literal_int(t, n, out);
  double v = item->valuedouble;
  if (!(fabs(v) <= 9007199254740992.0) || v != floor(v)) return false;
  *out = (int64_t)v;
  return true;
}

const char *source_number_str(const Source *s, const cJSON *item, char *buf, size_t cap) {
  size_t n;
  const char *t = source_number_text(s, item, &n);
  if (t)
    snprintf(buf, cap, "%.*s%s", n > 40 ? 40 : (int)n, t, n > 40 ? "..." : "");
  else if (!item)
    snprintf(buf, cap, "?");
  else if (fabs(item->valuedouble) < 1e18 && item->valuedouble == floor(item->valuedouble))
    snprintf(buf, cap, "%.0f", item->valuedouble);
  else
    snprintf(buf, cap, "%.17g", item->valuedouble);
  return buf;
}

// ---------------------------------------------------------------------------------------------

bool source_parse(Source *s, Arena *a, const char *path, const char *text, size_t len, Diag *d) {
  memset(s, 0, sizeof *s);
  s->path = path;
  s->text = arena_strndup(a, text, len);
  s->len = len;
  index_lines(s, a);
  diag_set_source(d, s->text, s->len, s->lines, s->nlines); // excerpts under every message
  if (!check_bytes(s, d)) return false;
  const char *start = s->text;
  if (len >= 3 && memcmp(start, "\xef\xbb\xbf", 3) == 0)
    start += 3; // a UTF-8 byte order mark (cJSON skips it too)
  if (!scan_document(s, d, start)) return false;
  const char *end = NULL;
  s->root = cJSON_ParseWithOpts(s->text, &end, 1);
  if (!s->root) { // the scan accepted the text: cJSON ran out of memory, or disagrees
    Scan c = {s, d, 0};
    unexpected(&c, end && end >= s->text && end <= s->text + len ? end : s->text, "");
    return false;
  }
  size_t n = count_items(s->root) * 2;
  s->pos_cap = 16;
  while (s->pos_cap < n) s->pos_cap *= 2;
  s->pos = ARENA_ARRAY(a, PosEntry, s->pos_cap);
  walk(s, s->root, skip_ws(start), NO_KEY);
  return true;
}

bool source_load_file(Source *s, Arena *a, const char *path, const char *what, Diag *d) {
  memset(s, 0, sizeof *s);
  s->path = path;
  const char *kind;
  FILE *f = open_regular(path, &kind);
  if (!f) {
    if (kind)
      diag_error(d, (Loc){0, 0}, "%s is %s, not a regular file", what, kind);
    else
      diag_error(d, (Loc){0, 0}, "cannot open %s: %s", what, strerror(errno));
    return false;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    diag_error(d, (Loc){0, 0}, "cannot read %s: %s", what, strerror(errno));
    fclose(f);
    return false;
  }
  if ((size_t)st.st_size > PIPEC_MAX_SOURCE) {
    diag_error(d, (Loc){0, 0}, "%s is %lld bytes; the limit is %zu MiB", what,
               (long long)st.st_size, PIPEC_MAX_SOURCE >> 20);
    fclose(f);
    return false;
  }
  size_t len = (size_t)st.st_size;
  char *buf = arena_alloc(a, len + 1);
  size_t got = fread(buf, 1, len, f);
  bool err = ferror(f);
  fclose(f);
  if (err || got != len) {
    diag_error(d, (Loc){0, 0}, "cannot read %s", what);
    return false;
  }
  return source_parse(s, a, path, buf, len, d);
}

bool source_load(Source *s, Arena *a, const char *path, Diag *d) {
  return source_load_file(s, a, path, "model file", d);
}

void source_free(Source *s) {
  if (s->root) cJSON_Delete(s->root);
  s->root = NULL;
}

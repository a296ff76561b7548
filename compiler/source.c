// Model source loading: read the file, parse with cJSON, map every item to its line:col.
#include "source.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static size_t hash_ptr(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x;
}

static void pos_put(Source *s, const cJSON *item, size_t offset) {
  size_t i = hash_ptr(item) & (s->pos_cap - 1);
  while (s->pos[i].item) i = (i + 1) & (s->pos_cap - 1);
  s->pos[i].item = item;
  s->pos[i].offset = offset;
}

static size_t count_items(const cJSON *it) {
  size_t n = 1;
  for (const cJSON *c = it->child; c; c = c->next) n += count_items(c);
  return n;
}

static const char *skip_ws(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return p;
}

// p at the opening quote of a string that cJSON accepted; returns the byte after the closing quote.
static const char *skip_string(const char *p) {
  p++;
  while (*p && *p != '"') p += (*p == '\\' && p[1]) ? 2 : 1;
  return *p ? p + 1 : p;
}

// Walks the value starting at p (no leading whitespace) in step with item; returns the end.
static const char *walk(Source *s, const cJSON *item, const char *p, bool record) {
  if (record) pos_put(s, item, (size_t)(p - s->text));
  if (*p == '{' || *p == '[') {
    bool obj = *p == '{';
    p = skip_ws(p + 1);
    for (const cJSON *c = item->child; c; c = c->next) {
      if (obj) {
        pos_put(s, c, (size_t)(p - s->text)); // members: the key's position
        p = skip_ws(skip_string(p));
        p = skip_ws(p + 1); // ':'
        p = walk(s, c, p, false);
      } else {
        p = walk(s, c, p, true);
      }
      p = skip_ws(p);
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
    if (s->lines[mid] <= offset) lo = mid;
    else hi = mid - 1;
  }
  return (Loc){lo + 1, (int)(offset - s->lines[lo]) + 1};
}

Loc source_loc(const Source *s, const cJSON *item) {
  if (!item || !s->pos_cap) return (Loc){0, 0};
  size_t i = hash_ptr(item) & (s->pos_cap - 1);
  while (s->pos[i].item) {
    if (s->pos[i].item == item) return source_offset_loc(s, s->pos[i].offset);
    i = (i + 1) & (s->pos_cap - 1);
  }
  return (Loc){0, 0};
}

// A syntax error at offset: say what was found there, in words a JSON writer recognises.
static void syntax_error(Source *s, size_t off, Diag *d) {
  Loc loc = source_offset_loc(s, off);
  if (off >= s->len) {
    diag_error(d, loc, "JSON syntax error: unexpected end of file (unclosed '{', '[' or string?)");
    return;
  }
  unsigned char c = (unsigned char)s->text[off];
  size_t prev = off;
  while (prev > 0 && strchr(" \t\r\n", s->text[prev - 1])) prev--;
  if ((c == '}' || c == ']') && prev > 0 && s->text[prev - 1] == ',')
    diag_error(d, loc, "JSON syntax error: unexpected '%c' (trailing comma before it)", c);
  else if (c == '/' && (s->text[off + 1] == '/' || s->text[off + 1] == '*'))
    diag_error(d, loc, "JSON syntax error: comments are not allowed in JSON");
  else if (c == '\'')
    diag_error(d, loc, "JSON syntax error: strings must use double quotes, not '");
  else if (c >= 0x21 && c < 0x7f)
    diag_error(d, loc, "JSON syntax error: unexpected '%c'", c);
  else
    diag_error(d, loc, "JSON syntax error: unexpected byte 0x%02x", c);
}

bool source_parse(Source *s, Arena *a, const char *path, const char *text, size_t len, Diag *d) {
  memset(s, 0, sizeof *s);
  s->path = path;
  s->text = arena_strndup(a, text, len);
  s->len = len;
  index_lines(s, a);
  size_t nul = strlen(s->text);
  if (nul < len) {
    diag_error(d, source_offset_loc(s, nul), "file contains a NUL byte; a model file is UTF-8 text");
    return false;
  }
  const char *end = NULL;
  s->root = cJSON_ParseWithOpts(s->text, &end, 1);
  if (!s->root) {
    size_t off = end && end >= s->text ? (size_t)(end - s->text) : 0;
    syntax_error(s, off, d);
    return false;
  }
  size_t n = count_items(s->root) * 2;
  s->pos_cap = 16;
  while (s->pos_cap < n) s->pos_cap *= 2;
  s->pos = ARENA_ARRAY(a, PosEntry, s->pos_cap);
  walk(s, s->root, skip_ws(s->text), true);
  return true;
}

bool source_load(Source *s, Arena *a, const char *path, Diag *d) {
  memset(s, 0, sizeof *s);
  s->path = path;
  FILE *f = fopen(path, "rb");
  if (!f) {
    diag_error(d, (Loc){0, 0}, "cannot open model file: %s", strerror(errno));
    return false;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    diag_error(d, (Loc){0, 0}, "not a regular file");
    fclose(f);
    return false;
  }
  if ((size_t)st.st_size > PIPEC_MAX_SOURCE) {
    diag_error(d, (Loc){0, 0}, "model file is %lld bytes; the limit is %zu MiB", (long long)st.st_size,
               PIPEC_MAX_SOURCE >> 20);
    fclose(f);
    return false;
  }
  size_t len = (size_t)st.st_size;
  char *buf = arena_alloc(a, len + 1);
  size_t got = fread(buf, 1, len, f);
  bool err = ferror(f);
  fclose(f);
  if (err || got != len) {
    diag_error(d, (Loc){0, 0}, "cannot read model file");
    return false;
  }
  return source_parse(s, a, path, buf, len, d);
}

void source_free(Source *s) {
  if (s->root) cJSON_Delete(s->root);
  s->root = NULL;
}

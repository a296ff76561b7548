// st_read.c: reads and checks a safetensors header (st_read.h). The file is opened only where it
// is a regular file (open_regular: a FIFO never blocks), N is checked against the file's size
// and the limit before the header is allocated, the header's bytes are scanned before cJSON sees
// them, and every size and offset taken from the JSON is checked for overflow before it is used.
// Each failure is one line in the caller's buffer, "PATH: what is wrong".
#define _FILE_OFFSET_BITS 64
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "files.h"
#include "source.h"
#include "st_read.h"

// What one read holds until it returns.
typedef struct R {
  const char *path; // the file
  char *why;        // the caller's buffer for the reason
  size_t cap;       // its bytes
  Arena *a;         // where the entries go
  StHeader *h;      // what is read
} R;

static bool fail(R *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(R *r, const char *fmt, ...) {
  int k = snprintf(r->why, r->cap, "%s: ", r->path);
  va_list ap;
  va_start(ap, fmt);
  if (k >= 0 && (size_t)k < r->cap) vsnprintf(r->why + k, r->cap - (size_t)k, fmt, ap);
  va_end(ap);
  return false;
}

// Bytes per element of every dtype the format defines (0: unknown).
static int elem_size(const char *d) {
  static const struct {
    const char *name; // the format's name
    int size;         // bytes per element
  } T[] = {{"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
           {"U64", 8}, {"I32", 4}, {"U32", 4},  {"I16", 2},     {"U16", 2},
           {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}};
  for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
    if (strcmp(d, T[i].name) == 0) return T[i].size;
  return 0;
}

// The header's bytes h[0..n) (NUL-terminated at n): no NUL byte, valid UTF-8, no raw control
// character and no escaped NUL inside a string. Offsets in messages count from the file's start.
static bool scan(R *r, const unsigned char *h, uint64_t n) {
  bool in_str = false;
  for (uint64_t i = 0; i < n; i++) {
    unsigned c = h[i];
    unsigned long long off = 8 + i;
    if (c == 0) return fail(r, "the header holds a NUL byte (byte offset %llu)", off);
    if (c >= 0x80) {
      int len = source_utf8_len(h + i);
      if (len == 0) return fail(r, "the header is not valid UTF-8 (byte offset %llu)", off);
      i += (uint64_t)len - 1;
    } else if (in_str && c == '\\') {
      if (i + 5 < n && memcmp(h + i + 1, "u0000", 5) == 0)
        return fail(r, "a string in the header holds a NUL character (\\u0000, byte offset %llu)",
                    off);
      i++; // the escaped character
    } else if (in_str && c < 0x20) {
      return fail(r, "a string in the header holds the control character 0x%02x (byte offset %llu)",
                  c, off);
    } else if (c == '"') {
      in_str = !in_str;
    }
  }
  return true;
}

// A JSON number that is an integer from 0 to 2^53.
static bool json_uint(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j)) return false;
  double d = j->valuedouble;
  if (!(d >= 0) || d != floor(d) || d > 9007199254740992.0) return false;
  *out = (uint64_t)d;
  return true;
}

// One tensor's entry: dtype, shape, offsets and the size they must hold.
static bool entry(R *r, StEntry *e, const cJSON *it) {
  const char *name = e->name;
  if (!cJSON_IsObject(it)) return fail(r, "tensor '%s': the entry is not an object", name);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
  const cJSON *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
  if (!cJSON_IsString(dt)) return fail(r, "tensor '%s' has no \"dtype\" string", name);
  e->dtype = arena_strdup(r->a, dt->valuestring);
  if (!(e->elem = elem_size(e->dtype)))
    return fail(r, "tensor '%s' has an unknown dtype '%s'", name, e->dtype);
  if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > ST_MAX_RANK)
    return fail(r, "tensor '%s': \"shape\" is not an array of at most %d sizes", name, ST_MAX_RANK);
  uint64_t numel = 1;
  bool overflow = false;
  for (const cJSON *d = sh->child; d; d = d->next) {
    uint64_t v;
    if (!json_uint(d, &v))
      return fail(r, "tensor '%s': \"shape\" holds something other than a non-negative integer",
                  name);
    e->shape[e->rank++] = (int64_t)v;
    if (v && numel > UINT64_MAX / v) overflow = true;
    numel *= v;
  }
  if (overflow || numel > UINT64_MAX / (uint64_t)e->elem)
    return fail(r, "tensor '%s': its byte size overflows 64 bits", name);
  if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || !json_uint(of->child, &e->begin) ||
      !json_uint(of->child->next, &e->end))
    return fail(r, "tensor '%s': \"data_offsets\" is not [begin, end]", name);
  if (e->begin > e->end || e->end > r->h->data_bytes)
    return fail(r,
                "tensor '%s': data offsets [%llu, %llu] are outside the data section (%llu bytes)",
                name, (unsigned long long)e->begin, (unsigned long long)e->end,
                (unsigned long long)r->h->data_bytes);
  if (e->end - e->begin != numel * (uint64_t)e->elem)
    return fail(
        r, "tensor '%s': data offsets [%llu, %llu] hold %llu bytes but %s of that shape needs %llu",
        name, (unsigned long long)e->begin, (unsigned long long)e->end,
        (unsigned long long)(e->end - e->begin), e->dtype,
        (unsigned long long)(numel * (uint64_t)e->elem));
  return true;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp((*(StEntry *const *)a)->name, (*(StEntry *const *)b)->name);
}

static int cmp_offsets(const void *a, const void *b) {
  const StEntry *x = *(StEntry *const *)a, *y = *(StEntry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return (x->end > y->end) - (x->end < y->end);
}

// Names unique (sorted into h->by_name) and the tensors tiling the data section.
static bool layout(R *r) {
  StHeader *h = r->h;
  StEntry **by = ARENA_ARRAY(r->a, StEntry *, h->n + 1);
  h->by_name = ARENA_ARRAY(r->a, StEntry *, h->n + 1);
  for (int i = 0; i < h->n; i++) by[i] = h->by_name[i] = &h->e[i];
  qsort(h->by_name, (size_t)h->n, sizeof *by, cmp_name);
  for (int i = 1; i < h->n; i++)
    if (strcmp(h->by_name[i - 1]->name, h->by_name[i]->name) == 0)
      return fail(r, "tensor '%s' appears twice in the header", h->by_name[i]->name);
  qsort(by, (size_t)h->n, sizeof *by, cmp_offsets);
  uint64_t at = 0; // the end of the tiled prefix
  for (int i = 0; i < h->n; i++) {
    if (by[i]->begin < at)
      return fail(r, "tensors '%s' and '%s' overlap in the data section", by[i - 1]->name,
                  by[i]->name);
    if (by[i]->begin > at)
      return fail(r,
                  "bytes [%llu, %llu) of the data section belong to no tensor (before tensor '%s')",
                  (unsigned long long)at, (unsigned long long)by[i]->begin, by[i]->name);
    at = by[i]->end;
  }
  if (at != h->data_bytes)
    return fail(r,
                "%llu trailing bytes after the last tensor (the data section has %llu bytes, the "
                "tensors end at %llu)",
                (unsigned long long)(h->data_bytes - at), (unsigned long long)h->data_bytes,
                (unsigned long long)at);
  return true;
}

// The parsed header's members: the metadata and the tensors.
static bool members(R *r, const cJSON *root) {
  if (!cJSON_IsObject(root)) return fail(r, "the header is not a JSON object");
  StHeader *h = r->h;
  h->e = ARENA_ARRAY(r->a, StEntry, cJSON_GetArraySize(root) + 1);
  bool meta = false;
  for (const cJSON *it = root->child; it; it = it->next) {
    if (strcmp(it->string, "__metadata__") == 0) {
      if (meta) return fail(r, "\"__metadata__\" appears twice");
      if (!cJSON_IsObject(it)) return fail(r, "\"__metadata__\" is not an object");
      for (const cJSON *m = it->child; m; m = m->next)
        if (!cJSON_IsString(m)) return fail(r, "metadata '%s' is not a string", m->string);
      meta = true;
      continue;
    }
    StEntry *e = &h->e[h->n++];
    e->name = arena_strdup(r->a, it->string);
    if (!entry(r, e, it)) return false;
  }
  return layout(r);
}

// The header's text after the length: read, scanned, parsed; false with the reason.
static bool parse(R *r, FILE *f, uint64_t n) {
  char *text = malloc(n + 1);
  if (!text) return fail(r, "out of memory for the %llu-byte header", (unsigned long long)n);
  bool ok = fread(text, 1, n, f) == n;
  if (!ok) fail(r, "cannot read the %llu-byte header", (unsigned long long)n);
  text[ok ? n : 0] = 0;
  ok = ok && scan(r, (const unsigned char *)text, n);
  const char *end = NULL;
  cJSON *root = ok ? cJSON_ParseWithLengthOpts(text, n, &end, false) : NULL;
  if (ok && !root) {
    const char *ep = end ? end : cJSON_GetErrorPtr();
    size_t off = ep && ep >= text && ep <= text + n ? (size_t)(ep - text) : 0;
    ok = fail(r, "the header is not valid JSON (byte offset %zu)", 8 + off);
  }
  for (const char *p = end; ok && p && p < text + n; p++) // only blanks may follow the JSON
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
      ok = fail(r, "the header has text after its JSON object (byte offset %zu)",
                8 + (size_t)(p - text));
  ok = ok && members(r, root);
  cJSON_Delete(root);
  free(text);
  return ok;
}

bool st_read_header(const char *path, Arena *a, StHeader *h, char *why, size_t cap) {
  R r = {path, why, cap, a, h};
  memset(h, 0, sizeof *h);
  const char *kind;
  FILE *f = open_regular(path, &kind);
  if (!f && kind) return fail(&r, "%s, not a regular file", kind);
  if (!f) return fail(&r, "%s", strerror(errno));
  struct stat st;
  unsigned char lb[8];
  bool ok = fstat(fileno(f), &st) == 0;
  uint64_t size = ok ? (uint64_t)st.st_size : 0, n = 0;
  if (!ok)
    fail(&r, "%s", strerror(errno));
  else if (size < 8)
    ok = fail(&r, "the file has %llu bytes, too short for the 8-byte header length",
              (unsigned long long)size);
  else if (fread(lb, 1, 8, f) != 8)
    ok = fail(&r, "cannot read the header length");
  for (int i = 7; ok && i >= 0; i--) n = (n << 8) | lb[i];
  if (ok && n > size - 8)
    ok = fail(
        &r, "the header length %llu (bytes 0..7) is larger than the rest of the file (%llu bytes)",
        (unsigned long long)n, (unsigned long long)(size - 8));
  else if (ok && n > ST_MAX_HEADER)
    ok = fail(&r, "the header length %llu is over the limit of %llu bytes", (unsigned long long)n,
              ST_MAX_HEADER);
  if (ok) {
    h->data_start = 8 + n;
    h->data_bytes = size - 8 - n;
    ok = parse(&r, f, n);
  }
  fclose(f);
  return ok;
}

const StEntry *st_find(const StHeader *h, const char *name) {
  int lo = 0, hi = h->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(h->by_name[mid]->name, name);
    if (c == 0) return h->by_name[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return NULL;
}

// safetensors.c: reading and writing checkpoints in the safetensors format.
//
// Format: 8-byte little-endian header length N, then N bytes of JSON
//     {"__metadata__": {"key": "value", ...},
//      "name": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...}
// then the data section; offsets are relative to its start (byte 8 + N).
//
// Loading accepts what the reference reader (the `safetensors` package, Rust) accepts, and
// refuses what it refuses: N against the file size and a limit of 100,000,000 bytes; the header
// valid UTF-8 JSON with no NUL byte and no raw control character in a string, blanks allowed
// around it (padding); every entry a known dtype, a shape of non-negative integers whose byte
// size fits in 64 bits, offsets with end - begin = numel * dtype size; the tensors, sorted by
// offset, tiling the data section exactly (no overlap, no gap, no trailing bytes). Names holding
// an (escaped) NUL character are refused too: C names cannot hold one. Then for each requested
// tensor: presence, dtype (F32, or BF16/F16 converted to float), shape, finite values; a tied
// tensor (one storage with an earlier one) present in the file must hold its owner's values.
// Every error frees what the load holds before the program stops (leak checkers stay quiet).
// Saving writes "__metadata__" first (when there is any), then the tensors in the order given,
// data packed in that order; the header is padded with spaces to a multiple of 8 bytes, as the
// reference implementation does. pr_safetensors_save writes PATH.tmp.PID in the same directory,
// flushed, fsync'ed and renamed over PATH; on failure the temporary is removed.
// pr_safetensors_write writes one file in place (checkpoint.c renames pairs itself).
// pr_safetensors_hash rehashes a file's tensors as the save id hashed them when it was written
// (checkpoint_impl.h), in the order of their data, read in pieces of 1 MiB.
#define _FILE_OFFSET_BITS 64
#include "checkpoint_impl.h"
#include "pipert.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER 100000000ULL

typedef struct StEntry {
  const char *name;    // tensor name (in the parsed header)
  const char *dtype;   // dtype string ("F32", ...)
  int dsize;           // bytes per element
  int rank;            // dims
  int64_t shape[8];    // sizes
  uint64_t begin, end; // relative to the data section
  bool used;           // requested by the caller
} StEntry;

typedef struct StFile {
  const char *path;   // the file
  FILE *f;            // open stream
  uint64_t file_size; // bytes
  uint64_t hlen;      // N
  uint64_t data_size; // file_size - 8 - N
  char *h;            // header text while it is parsed
  cJSON *root;        // the parsed header
  cJSON *meta;        // "__metadata__" or NULL
  StEntry *e;         // tensor entries, sorted by name after st_open
  int n;              // entries
  StEntry **found;    // load: per requested tensor, its entry (NULL: absent)
  void *scratch;      // load: conversion and tied-comparison buffer
  // The first error, reported by st_die after everything above is freed.
  int line;         // source line of the failed check
  const char *hint; // its hint (a string constant)
  char msg[1024];   // its message
} StFile;

// Records an error in s and returns false (the caller returns it up to st_die or a soft caller).
static bool st_error(StFile *s, int line, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool st_error(StFile *s, int line, const char *hint, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->msg, sizeof s->msg, fmt, ap);
  va_end(ap);
  s->line = line;
  s->hint = hint;
  return false;
}
#define ST_CHECK(s, cond, hint, ...)                                                               \
  do {                                                                                             \
    if (!(cond)) return st_error((s), __LINE__, (hint), __VA_ARGS__);                              \
  } while (0)

static void st_close(StFile *s) {
  if (s->f) fclose(s->f);
  free(s->h);
  cJSON_Delete(s->root);
  free(s->e);
  free(s->found);
  free(s->scratch);
  s->f = NULL, s->h = NULL, s->root = NULL, s->meta = NULL, s->e = NULL, s->found = NULL;
  s->scratch = NULL, s->n = 0;
}

// Frees s, then stops the program with its recorded error.
static void st_die(StFile *s) __attribute__((noreturn));
static void st_die(StFile *s) {
  char msg[sizeof s->msg];
  memcpy(msg, s->msg, sizeof msg);
  int line = s->line;
  const char *hint = s->hint;
  st_close(s);
  pr_fail(__FILE__, line, hint, "%s", msg);
}

static const char *HINT_FILE = "the file is damaged or is not a safetensors checkpoint";

static int dtype_size(const char *d) {
  static const struct {
    const char *name;
    int size;
  } T[] = {{"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
           {"U64", 8}, {"I32", 4}, {"U32", 4},  {"I16", 2},     {"U16", 2},
           {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}};
  for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
    if (strcmp(d, T[i].name) == 0) return T[i].size;
  return 0;
}

static bool json_uint(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j)) return false;
  double d = j->valuedouble;
  if (!(d >= 0) || d != floor(d) || d > 9007199254740992.0) return false;
  *out = (uint64_t)d;
  return true;
}

static void fmt_shape(char *out, size_t cap, int rank, const int64_t *shape) {
  size_t k = (size_t)snprintf(out, cap, "[");
  for (int i = 0; i < rank && k < cap; i++)
    k += (size_t)snprintf(out + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (k < cap) snprintf(out + k, cap - k, "]");
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const StEntry *)a)->name, ((const StEntry *)b)->name);
}

// By (begin, end), as the reference reader sorts before it checks the tiling.
static int cmp_offsets(const void *a, const void *b) {
  const StEntry *x = *(const StEntry *const *)a, *y = *(const StEntry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end ? 1 : 0;
}

// The header's bytes h[0..n): valid UTF-8, no NUL byte, no raw control character inside a
// string (the reference reader's rules) and no escaped NUL (\u0000) in a string.
static bool st_scan(StFile *s, const unsigned char *h, uint64_t n) {
  bool in_str = false;
  for (uint64_t i = 0; i < n; i++) {
    unsigned c = h[i];
    unsigned long long off = 8 + i;
    ST_CHECK(s, c != 0, HINT_FILE, "%s: the header holds a NUL byte (byte offset %llu)", s->path,
             off);
    if (c >= 0x80) {
      int len = c >= 0xc2 && c <= 0xdf   ? 2
                : c >= 0xe0 && c <= 0xef ? 3
                : c >= 0xf0 && c <= 0xf4 ? 4
                                         : 0;
      uint32_t cp = len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
      bool ok = len > 0 && i + (uint64_t)len <= n;
      for (int k = 1; ok && k < len; k++) {
        ok = (h[i + (uint64_t)k] & 0xc0) == 0x80;
        cp = (cp << 6) | (h[i + (uint64_t)k] & 0x3f);
      }
      ok = ok && !(len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) &&
           !(len == 4 && (cp < 0x10000 || cp > 0x10ffff));
      ST_CHECK(s, ok, HINT_FILE, "%s: the header is not valid UTF-8 (byte offset %llu)", s->path,
               off);
      i += (uint64_t)len - 1;
    } else if (in_str && c == '\\') {
      ST_CHECK(s, !(i + 5 < n && memcmp(h + i + 1, "u0000", 5) == 0), HINT_FILE,
               "%s: a string in the header holds a NUL character (\\u0000, byte offset %llu)",
               s->path, off);
      i++; // the escaped character
    } else if (in_str) {
      ST_CHECK(s, c >= 0x20, HINT_FILE,
               "%s: a string in the header holds the control character 0x%02x (byte offset %llu)",
               s->path, c, off);
      if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    }
  }
  return true;
}

// One header entry (not "__metadata__"): dtype, shape, offsets and their sizes.
static bool st_entry(StFile *s, StEntry *e, const cJSON *it) {
  const char *path = s->path, *name = e->name;
  ST_CHECK(s, cJSON_IsObject(it), HINT_FILE, "%s: tensor '%s': the entry is not an object", path,
           name);
  cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
  cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
  cJSON *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
  ST_CHECK(s, cJSON_IsString(dt), HINT_FILE, "%s: tensor '%s' has no \"dtype\" string", path, name);
  e->dtype = dt->valuestring;
  e->dsize = dtype_size(e->dtype);
  ST_CHECK(s, e->dsize > 0, HINT_FILE, "%s: tensor '%s' has an unknown dtype '%s'", path, name,
           e->dtype);
  ST_CHECK(s, cJSON_IsArray(sh) && cJSON_GetArraySize(sh) <= 8, HINT_FILE,
           "%s: tensor '%s': \"shape\" is not an array of at most 8 sizes", path, name);
  uint64_t numel = 1;
  bool overflow = false;
  for (cJSON *d = sh->child; d; d = d->next) {
    uint64_t v;
    ST_CHECK(s, json_uint(d, &v), HINT_FILE,
             "%s: tensor '%s': \"shape\" holds something other than a non-negative integer", path,
             name);
    e->shape[e->rank++] = (int64_t)v;
    if (v != 0 && numel > UINT64_MAX / v) overflow = true;
    numel *= v;
  }
  if (numel != 0 && numel > UINT64_MAX / (uint64_t)e->dsize) overflow = true;
  if (overflow) {
    char a[200];
    fmt_shape(a, sizeof a, e->rank, e->shape);
    ST_CHECK(s, false, HINT_FILE,
             "%s: tensor '%s': the byte size of %s of shape %s overflows 64 bits", path, name,
             e->dtype, a);
  }
  ST_CHECK(s,
           cJSON_IsArray(of) && cJSON_GetArraySize(of) == 2 && json_uint(of->child, &e->begin) &&
               json_uint(of->child->next, &e->end),
           HINT_FILE, "%s: tensor '%s': \"data_offsets\" is not [begin, end]", path, name);
  ST_CHECK(s, e->begin <= e->end && e->end <= s->data_size, HINT_FILE,
           "%s: tensor '%s': data offsets [%llu, %llu] are outside the data section (%llu "
           "bytes)",
           path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
           (unsigned long long)s->data_size);
  ST_CHECK(s, e->end - e->begin == numel * (uint64_t)e->dsize, HINT_FILE,
           "%s: tensor '%s': data offsets [%llu, %llu] hold %llu bytes but %s of that shape "
           "needs %llu",
           path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
           (unsigned long long)(e->end - e->begin), e->dtype,
           (unsigned long long)(numel * (uint64_t)e->dsize));
  return true;
}

// The tensors, sorted by offsets, tile the data section: no overlap, no gap, nothing after.
static bool st_tiling(StFile *s) {
  StEntry **by = malloc(((size_t)s->n + 1) * sizeof *by);
  ST_CHECK(s, by != NULL, "out of memory", "%s: out of memory", s->path);
  for (int i = 0; i < s->n; i++) by[i] = &s->e[i];
  qsort(by, (size_t)s->n, sizeof *by, cmp_offsets);
  bool ok = true;
  uint64_t at = 0; // end of the tiled prefix
  for (int i = 0; ok && i < s->n; i++) {
    if (by[i]->begin < at)
      ok = st_error(s, __LINE__, HINT_FILE, "%s: tensors '%s' and '%s' overlap in the data section",
                    s->path, by[i - 1]->name, by[i]->name);
    else if (by[i]->begin > at)
      ok = st_error(s, __LINE__, HINT_FILE,
                    "%s: bytes [%llu, %llu) of the data section belong to no tensor (before "
                    "tensor '%s')",
                    s->path, (unsigned long long)at, (unsigned long long)by[i]->begin, by[i]->name);
    at = by[i]->end;
  }
  free(by);
  ST_CHECK(s, !ok || at == s->data_size,
           "the file is damaged (it has more bytes than its header describes)",
           "%s: %llu trailing bytes after the last tensor (the data section has %llu bytes, the "
           "tensors end at %llu)",
           s->path, (unsigned long long)(s->data_size - at), (unsigned long long)s->data_size,
           (unsigned long long)at);
  return ok;
}

// Opens path and parses and checks its header (everything but the tensors' values). false with
// the error recorded in s; s is to be closed (st_close or st_die) either way.
static bool st_open(StFile *s, const char *path) {
  memset(s, 0, sizeof *s);
  s->path = path;
  // A FIFO or a device would block in a plain open or never end: opened without blocking, and
  // refused below unless it is a regular file.
  struct stat st0;
  if (stat(path, &st0) == 0 && !S_ISREG(st0.st_mode)) pr_check_regular(path, "checkpoint");
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  s->f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (fd >= 0 && !s->f) close(fd);
  ST_CHECK(s, s->f != NULL, "check the checkpoint path", "cannot open '%s': %s", path,
           strerror(errno));
  struct stat st;
  ST_CHECK(s, fstat(fileno(s->f), &st) == 0 && S_ISREG(st.st_mode), "give a regular file",
           "'%s' is not a regular file", path);
  s->file_size = (uint64_t)st.st_size;
  ST_CHECK(s, s->file_size >= 8, HINT_FILE,
           "%s: the file has %llu bytes, too short for the 8-byte header length", path,
           (unsigned long long)s->file_size);
  unsigned char lb[8];
  ST_CHECK(s, fread(lb, 1, 8, s->f) == 8, HINT_FILE, "%s: cannot read the header length: %s", path,
           strerror(errno));
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | lb[i];
  s->hlen = n;
  ST_CHECK(s, n <= s->file_size - 8, "the file is truncated or is not a safetensors checkpoint",
           "%s: the header length %llu (bytes 0..7) is larger than the rest of the file (%llu "
           "bytes)",
           path, (unsigned long long)n, (unsigned long long)(s->file_size - 8));
  ST_CHECK(s, n <= ST_MAX_HEADER, HINT_FILE,
           "%s: the header length %llu is over the limit of %llu bytes", path,
           (unsigned long long)n, (unsigned long long)ST_MAX_HEADER);
  s->data_size = s->file_size - 8 - n;
  s->h = malloc(n + 1);
  ST_CHECK(s, s->h != NULL, "out of memory", "%s: out of memory for the header", path);
  char *h = s->h;
  ST_CHECK(s, fread(h, 1, n, s->f) == n, HINT_FILE, "%s: cannot read the %llu-byte header", path,
           (unsigned long long)n);
  h[n] = '\0';
  if (!st_scan(s, (const unsigned char *)h, n)) return false;
  const char *end = NULL;
  s->root = cJSON_ParseWithLengthOpts(h, n, &end, false);
  if (!s->root) {
    const char *ep = end ? end : cJSON_GetErrorPtr();
    size_t off = ep && ep >= h && ep <= h + n ? (size_t)(ep - h) : 0;
    ST_CHECK(s, false, HINT_FILE, "%s: the header is not valid JSON (byte offset %zu)", path,
             8 + off);
  }
  // Only padding (blanks) may follow the JSON value.
  for (const char *p = end; p && p < h + n; p++)
    ST_CHECK(s, *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r', HINT_FILE,
             "%s: unexpected text after the JSON header (byte offset %zu)", path,
             8 + (size_t)(p - h));
  free(s->h);
  s->h = NULL;
  ST_CHECK(s, cJSON_IsObject(s->root), HINT_FILE, "%s: the header is not a JSON object", path);

  int count = cJSON_GetArraySize(s->root);
  s->e = calloc((size_t)count + 1, sizeof *s->e);
  ST_CHECK(s, s->e != NULL, "out of memory", "%s: out of memory", path);
  for (cJSON *it = s->root->child; it; it = it->next) {
    const char *name = it->string;
    if (strcmp(name, "__metadata__") == 0) {
      ST_CHECK(s, s->meta == NULL, HINT_FILE, "%s: \"__metadata__\" appears twice", path);
      ST_CHECK(s, cJSON_IsObject(it), HINT_FILE, "%s: \"__metadata__\" is not an object", path);
      for (cJSON *m = it->child; m; m = m->next)
        ST_CHECK(s, cJSON_IsString(m), HINT_FILE, "%s: metadata '%s' is not a string", path,
                 m->string);
      s->meta = it;
      continue;
    }
    StEntry *e = &s->e[s->n++];
    e->name = name;
    if (!st_entry(s, e, it)) return false;
  }
  // Names are unique; sort by name for lookups.
  qsort(s->e, (size_t)s->n, sizeof *s->e, cmp_name);
  for (int i = 1; i < s->n; i++)
    ST_CHECK(s, strcmp(s->e[i - 1].name, s->e[i].name) != 0, HINT_FILE,
             "%s: tensor '%s' appears twice in the header", path, s->e[i].name);
  return st_tiling(s);
}

static StEntry *st_find(StFile *s, const char *name) {
  StEntry key = {.name = name};
  return bsearch(&key, s->e, (size_t)s->n, sizeof *s->e, cmp_name);
}

static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13); // inf / nan
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else { // subnormal: normalise
    int e = -1;
    do {
      e++;
      man <<= 1;
    } while (!(man & 0x400));
    u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// Reads entry e's values as float into dst (numel elements), converting BF16/F16.
static bool st_read(StFile *s, const StEntry *e, float *dst) {
  uint64_t bytes = e->end - e->begin;
  unsigned long long at = (unsigned long long)(8 + s->hlen + e->begin);
  ST_CHECK(s, fseeko(s->f, (off_t)at, SEEK_SET) == 0, HINT_FILE,
           "%s: cannot seek to tensor '%s': %s", s->path, e->name, strerror(errno));
  if (e->dsize == 4) {
    ST_CHECK(s, fread(dst, 1, bytes, s->f) == bytes, HINT_FILE,
             "%s: cannot read tensor '%s' (byte offset %llu)", s->path, e->name, at);
    return true;
  }
  uint16_t *raw = malloc(bytes + 2);
  ST_CHECK(s, raw != NULL, "out of memory", "%s: out of memory reading '%s'", s->path, e->name);
  bool ok = fread(raw, 1, bytes, s->f) == bytes;
  bool bf = strcmp(e->dtype, "BF16") == 0;
  for (uint64_t k = 0; ok && k < bytes / 2; k++)
    dst[k] = bf ? bf16_to_f32(raw[k]) : f16_to_f32(raw[k]);
  free(raw);
  ST_CHECK(s, ok, HINT_FILE, "%s: cannot read tensor '%s' (byte offset %llu)", s->path, e->name,
           at);
  return true;
}

static bool st_load(StFile *s, PrTensorRef *refs, int n, const bool *optional, bool allow_extra) {
  const char *path = s->path;
  const char *hint_model =
      "the checkpoint was written for a different model (names and shapes must match the "
      "model's parameters)";
  s->found = calloc((size_t)n + 1, sizeof *s->found);
  ST_CHECK(s, s->found != NULL, "out of memory", "%s: out of memory", path);
  for (int i = 0; i < n; i++) {
    StEntry *e = st_find(s, refs[i].name);
    if (!e) {
      ST_CHECK(s, optional && optional[i], hint_model, "%s: tensor '%s' is missing", path,
               refs[i].name);
      continue;
    }
    e->used = true;
    s->found[i] = e;
    ST_CHECK(s,
             strcmp(e->dtype, "F32") == 0 || strcmp(e->dtype, "BF16") == 0 ||
                 strcmp(e->dtype, "F16") == 0,
             "save the checkpoint as float32 (BF16 and F16 are converted on load)",
             "%s: tensor '%s' has dtype %s; expected F32 (or BF16/F16)", path, refs[i].name,
             e->dtype);
    bool same = e->rank == refs[i].rank;
    for (int d = 0; same && d < e->rank; d++) same = e->shape[d] == refs[i].shape[d];
    if (!same) {
      char a[200], b[200];
      fmt_shape(a, sizeof a, e->rank, e->shape);
      fmt_shape(b, sizeof b, refs[i].rank, refs[i].shape);
      ST_CHECK(s, false, hint_model, "%s: tensor '%s' has shape %s; the model expects %s", path,
               refs[i].name, a, b);
    }
  }
  if (!allow_extra)
    for (int i = 0; i < s->n; i++)
      ST_CHECK(s, s->e[i].used,
               "load a checkpoint of this model, or delete the tensors the model lacks from the "
               "file (in Python: safetensors' load_file, del, save_file)",
               "%s: tensor '%s' is in the file but not in the model", path, s->e[i].name);
  for (int i = 0; i < n; i++) {
    const StEntry *e = s->found[i];
    if (!e || !refs[i].data) continue; // data NULL: held by another rank of the pipeline
    int64_t numel = (int64_t)((e->end - e->begin) / (uint64_t)e->dsize);
    // A tied tensor (one storage with an earlier, loaded one) is read aside and compared.
    int owner = -1;
    for (int j = 0; optional && optional[i] && owner < 0 && j < i; j++)
      if (refs[j].data == refs[i].data && s->found[j]) owner = j;
    float *dst = refs[i].data;
    if (owner >= 0) {
      free(s->scratch);
      s->scratch = dst = malloc((size_t)numel * sizeof(float) + 4);
      ST_CHECK(s, dst != NULL, "out of memory", "%s: out of memory reading '%s'", path, e->name);
    }
    if (!st_read(s, e, dst)) return false;
    for (int64_t k = 0; k < numel; k++)
      ST_CHECK(s, isfinite(dst[k]),
               "the file holds values that are not finite: load a checkpoint saved before "
               "training diverged",
               "%s: tensor '%s' holds %s at element %lld", path, e->name,
               isnan(dst[k]) ? "NaN"
               : dst[k] > 0  ? "inf"
                             : "-inf",
               (long long)k);
    if (owner < 0) continue;
    for (int64_t k = 0; k < numel; k++)
      ST_CHECK(s, dst[k] == refs[owner].data[k],
               "the model ties them (one storage): give both the same values, or leave the "
               "second out of the file",
               "%s: tensors '%s' and '%s' are tied in the model but hold different values "
               "(element %lld: %.9g and %.9g)",
               path, refs[owner].name, e->name, (long long)k, (double)refs[owner].data[k],
               (double)dst[k]);
  }
  return true;
}

// *h continued over the F32 tensors in the order of their data, read in pieces; *f32 false when
// a tensor is of another dtype (skipped). False with the error recorded when a read fails.
static bool st_hash(StFile *s, uint64_t *h, bool *f32) {
  enum { PIECE = 1 << 18 }; // floats per read (even: the pieces hash as the whole tensor)
  s->found = malloc(((size_t)s->n + 1) * sizeof *s->found);
  s->scratch = malloc(PIECE * sizeof(float));
  ST_CHECK(s, s->found && s->scratch, "out of memory", "%s: out of memory", s->path);
  for (int i = 0; i < s->n; i++) s->found[i] = &s->e[i];
  qsort(s->found, (size_t)s->n, sizeof *s->found, cmp_offsets);
  *f32 = true;
  for (int i = 0; i < s->n; i++) {
    const StEntry *e = s->found[i];
    if (strcmp(e->dtype, "F32") != 0) {
      *f32 = false;
      continue;
    }
    uint64_t left = (e->end - e->begin) / 4;
    unsigned long long at = (unsigned long long)(8 + s->hlen + e->begin);
    *h = pr_ck_mix(pr_ck_mix(*h, pr_hash_name(e->name)), left);
    ST_CHECK(s, fseeko(s->f, (off_t)at, SEEK_SET) == 0, HINT_FILE,
             "%s: cannot seek to tensor '%s': %s", s->path, e->name, strerror(errno));
    while (left > 0) {
      size_t k = left < PIECE ? (size_t)left : PIECE;
      ST_CHECK(s, fread(s->scratch, sizeof(float), k, s->f) == k, HINT_FILE,
               "%s: cannot read tensor '%s' (byte offset %llu)", s->path, e->name, at);
      *h = pr_ck_hash_values(*h, s->scratch, (int64_t)k);
      left -= k;
    }
  }
  return true;
}

bool pr_safetensors_hash(const char *path, uint64_t *h) {
  StFile s;
  bool f32 = false;
  if (!st_open(&s, path) || !st_hash(&s, h, &f32)) st_die(&s);
  st_close(&s);
  return f32;
}

void pr_safetensors_load(const char *path, PrTensorRef *refs, int n, const bool *optional,
                         bool allow_extra) {
  StFile s;
  if (!st_open(&s, path) || !st_load(&s, refs, n, optional, allow_extra)) st_die(&s);
  st_close(&s);
}

// Copies metadata key's value into out ("" and false when absent); false with an error recorded
// when the value does not fit.
static bool st_meta(StFile *s, const char *key, char *out, size_t cap, bool *found) {
  cJSON *v = s->meta ? cJSON_GetObjectItemCaseSensitive(s->meta, key) : NULL;
  *found = v != NULL;
  if (cap) out[0] = '\0';
  if (!v) return true;
  size_t len = strlen(v->valuestring);
  ST_CHECK(s, len < cap, HINT_FILE, "%s: metadata '%s' is %zu bytes long (at most %zu expected)",
           s->path, key, len, cap ? cap - 1 : 0);
  memcpy(out, v->valuestring, len + 1);
  return true;
}

bool pr_safetensors_meta(const char *path, const char *key, char *out, size_t cap) {
  StFile s;
  bool found = false;
  if (!st_open(&s, path) || !st_meta(&s, key, out, cap, &found)) st_die(&s);
  st_close(&s);
  return found;
}

bool pr_safetensors_peek(const char *path, const char *key, char *out, size_t cap) {
  StFile s;
  bool found = false, ok = st_open(&s, path) && st_meta(&s, key, out, cap, &found);
  st_close(&s);
  if (!ok && cap) out[0] = '\0';
  return ok;
}

// ---------------------------------------------------------------------------------------------
// Saving

typedef struct Buf {
  char *p;
  size_t len, cap;
} Buf;

static void buf_put(Buf *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    while (b->len + n + 1 > b->cap) b->cap = b->cap ? b->cap * 2 : 4096;
    b->p = realloc(b->p, b->cap);
    prCheck(b->p != NULL, "out of memory", "out of memory building a safetensors header");
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void buf_str(Buf *b, const char *s) {
  buf_put(b, s, strlen(s));
}

static void buf_json_string(Buf *b, const char *s) {
  buf_str(b, "\"");
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    char esc[8];
    if (*c == '"')
      buf_str(b, "\\\"");
    else if (*c == '\\')
      buf_str(b, "\\\\");
    else if (*c == '\n')
      buf_str(b, "\\n");
    else if (*c == '\t')
      buf_str(b, "\\t");
    else if (*c == '\r')
      buf_str(b, "\\r");
    else if (*c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", *c);
      buf_str(b, esc);
    } else
      buf_put(b, (const char *)c, 1);
  }
  buf_str(b, "\"");
}

static int64_t ref_numel(const PrTensorRef *r) {
  int64_t n = 1;
  for (int d = 0; d < r->rank; d++) n *= r->shape[d];
  return n;
}

// Writes path itself (no rename): 0 on success, else errno (path removed); *created tells whether
// the file could be created at all.
static int st_write(const char *path, const PrTensorRef *refs, int n, const char *const *meta,
                    int nmeta, bool *created) {
  for (int i = 0; i < n; i++) {
    prCheck(refs[i].rank >= 0 && refs[i].rank <= 8, "internal error in the generated program",
            "%s: tensor '%s' has rank %d", path, refs[i].name, refs[i].rank);
    prCheck(strcmp(refs[i].name, "__metadata__") != 0, "rename the tensor",
            "%s: a tensor cannot be called \"__metadata__\"", path);
    for (int j = 0; j < i; j++)
      prCheck(strcmp(refs[i].name, refs[j].name) != 0, "internal error in the generated program",
              "%s: tensor '%s' is written twice", path, refs[i].name);
  }
  Buf h = {0};
  buf_str(&h, "{");
  bool first = true;
  if (nmeta > 0) {
    buf_str(&h, "\"__metadata__\":{");
    for (int k = 0; k < nmeta; k++) {
      if (k) buf_str(&h, ",");
      buf_json_string(&h, meta[2 * k]);
      buf_str(&h, ":");
      buf_json_string(&h, meta[2 * k + 1]);
    }
    buf_str(&h, "}");
    first = false;
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    char tmp[128];
    if (!first) buf_str(&h, ",");
    first = false;
    buf_json_string(&h, refs[i].name);
    buf_str(&h, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int d = 0; d < refs[i].rank; d++) {
      snprintf(tmp, sizeof tmp, "%s%lld", d ? "," : "", (long long)refs[i].shape[d]);
      buf_str(&h, tmp);
    }
    uint64_t bytes = (uint64_t)ref_numel(&refs[i]) * 4;
    snprintf(tmp, sizeof tmp, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
             (unsigned long long)(off + bytes));
    buf_str(&h, tmp);
    off += bytes;
  }
  buf_str(&h, "}");
  while (h.len % 8) buf_str(&h, " ");

  *created = false;
  FILE *f = fopen(path, "wb");
  if (!f) {
    int err = errno;
    free(h.p);
    return err ? err : EIO;
  }
  *created = true;
  unsigned char lb[8];
  uint64_t hl = h.len;
  for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(hl >> (8 * i));
  bool ok = fwrite(lb, 1, 8, f) == 8 && fwrite(h.p, 1, h.len, f) == h.len;
  for (int i = 0; ok && i < n; i++) {
    size_t cnt = (size_t)ref_numel(&refs[i]);
    ok = fwrite(refs[i].data, sizeof(float), cnt, f) == cnt;
  }
  int err = ok ? 0 : errno;
  if (ok && fflush(f) != 0) ok = false, err = errno;
  if (ok && fsync(fileno(f)) != 0) ok = false, err = errno;
  if (fclose(f) != 0 && ok) ok = false, err = errno;
  free(h.p);
  if (ok) return 0;
  unlink(path);
  return err ? err : EIO;
}

int pr_safetensors_write(const char *path, const PrTensorRef *refs, int n, const char *const *meta,
                         int nmeta) {
  bool created;
  return st_write(path, refs, n, meta, nmeta, &created);
}

void pr_fsync_dir_of(const char *path) {
  char *dcopy = strdup(path);
  if (!dcopy) return;
  int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    (void)fsync(dfd); // best effort: some file systems refuse fsync on directories
    close(dfd);
  }
  free(dcopy);
}

void pr_safetensors_save(const char *path, const PrTensorRef *refs, int n, const char *const *meta,
                         int nmeta) {
  size_t tlen = strlen(path) + 32;
  char *tmp = malloc(tlen);
  prCheck(tmp != NULL, "out of memory", "out of memory");
  snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
  bool created;
  int err = st_write(tmp, refs, n, meta, nmeta, &created);
  if (!err && rename(tmp, path) != 0) {
    err = errno;
    unlink(tmp);
  }
  if (err) {
    char msg[600];
    if (!created)
      snprintf(msg, sizeof msg, "cannot create '%.500s': %s", tmp, strerror(err));
    else
      snprintf(msg, sizeof msg, "cannot write '%.500s': %s", path, strerror(err));
    free(tmp);
    pr_fail(__FILE__, __LINE__,
            created ? "check the free disk space and permissions"
                    : "check that the directory exists and is writable",
            "%s", msg);
  }
  free(tmp);
  pr_fsync_dir_of(path); // make the rename durable
}

// The save id's mixing step and its hash of f32 values (checkpoint_impl.h): here, with the
// file hash that uses them (pr_safetensors_hash), so checkpoint.c imports this file only.
uint64_t pr_ck_mix(uint64_t h, uint64_t w) {
  h ^= w;
  h *= 0x9e3779b97f4a7c15ULL;
  return h ^ (h >> 29);
}

uint64_t pr_ck_hash_values(uint64_t h, const float *x, int64_t n) {
  int64_t k = 0;
  for (; k + 2 <= n; k += 2) {
    uint64_t w;
    memcpy(&w, x + k, 8);
    h = pr_ck_mix(h, w);
  }
  if (k < n) {
    uint32_t w;
    memcpy(&w, x + k, 4);
    h = pr_ck_mix(h, w);
  }
  return h;
}

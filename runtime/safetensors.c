// safetensors.c: reading and writing checkpoints in the safetensors format.
//
// Format: 8-byte little-endian header length N, then N bytes of JSON
//     {"__metadata__": {"key": "value", ...},
//      "name": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...}
// then the data section; offsets are relative to its start (byte 8 + N).
//
// Loading checks: N against the file size and a limit of 100,000,000 bytes (the reference
// implementation's), the JSON, every entry (known dtype, non-negative integer shape, offsets
// inside the data section with end - begin = numel * dtype size, no two tensors overlapping),
// then for each requested tensor: presence, dtype (F32, or BF16/F16 converted to float), shape.
// Saving writes "__metadata__" first (when there is any), then the tensors in the order given,
// data packed in that order; the header is padded with spaces to a multiple of 8 bytes, as the
// reference (Rust) implementation does. The file is written to PATH.tmp.PID in the same
// directory, flushed, fsync'ed and renamed over PATH; on failure the temporary is removed.
#define _FILE_OFFSET_BITS 64
#include "pipert.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER 100000000ULL

typedef struct StEntry {
  const char *name;
  const char *dtype;
  int dsize; // bytes per element
  int rank;
  int64_t shape[8];
  uint64_t begin, end; // relative to the data section
  bool used;
} StEntry;

typedef struct StFile {
  const char *path;
  FILE *f;
  uint64_t file_size;
  uint64_t hlen;      // N
  uint64_t data_size; // file_size - 8 - N
  cJSON *root;
  cJSON *meta; // "__metadata__" or NULL
  StEntry *e;
  int n;
} StFile;

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

static int cmp_begin(const void *a, const void *b) {
  const StEntry *x = *(const StEntry *const *)a, *y = *(const StEntry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

// Opens path and parses and checks its header (everything but the tensors' data).
static void st_open(StFile *s, const char *path) {
  memset(s, 0, sizeof *s);
  s->path = path;
  s->f = fopen(path, "rb");
  prCheck(s->f != NULL, "check the checkpoint path", "cannot open '%s': %s", path, strerror(errno));
  struct stat st;
  prCheck(fstat(fileno(s->f), &st) == 0 && S_ISREG(st.st_mode), "give a regular file",
          "'%s' is not a regular file", path);
  s->file_size = (uint64_t)st.st_size;
  prCheck(s->file_size >= 8, HINT_FILE,
          "%s: the file has %llu bytes, too short for the 8-byte header length", path,
          (unsigned long long)s->file_size);
  unsigned char lb[8];
  prCheck(fread(lb, 1, 8, s->f) == 8, HINT_FILE, "%s: cannot read the header length: %s", path,
          strerror(errno));
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | lb[i];
  s->hlen = n;
  prCheck(n <= s->file_size - 8, "the file is truncated or is not a safetensors checkpoint",
          "%s: the header length %llu (bytes 0..7) is larger than the rest of the file (%llu "
          "bytes)",
          path, (unsigned long long)n, (unsigned long long)(s->file_size - 8));
  prCheck(n <= ST_MAX_HEADER, HINT_FILE,
          "%s: the header length %llu is over the limit of %llu bytes", path, (unsigned long long)n,
          (unsigned long long)ST_MAX_HEADER);
  s->data_size = s->file_size - 8 - n;
  char *h = malloc(n + 1);
  prCheck(h != NULL, "out of memory", "%s: out of memory for the header", path);
  prCheck(fread(h, 1, n, s->f) == n, HINT_FILE, "%s: cannot read the %llu-byte header", path,
          (unsigned long long)n);
  h[n] = '\0';
  const char *end = NULL;
  s->root = cJSON_ParseWithLengthOpts(h, n, &end, false);
  if (!s->root) {
    const char *ep = end ? end : cJSON_GetErrorPtr();
    size_t off = ep && ep >= h && ep <= h + n ? (size_t)(ep - h) : 0;
    pr_fail(__FILE__, __LINE__, HINT_FILE, "%s: the header is not valid JSON (byte offset %zu)",
            path, 8 + off);
  }
  // Only padding (blanks) may follow the JSON value.
  for (const char *p = end; p && p < h + n; p++)
    prCheck(*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r', HINT_FILE,
            "%s: unexpected text after the JSON header (byte offset %zu)", path,
            8 + (size_t)(p - h));
  free(h);
  prCheck(cJSON_IsObject(s->root), HINT_FILE, "%s: the header is not a JSON object", path);

  int count = cJSON_GetArraySize(s->root);
  s->e = calloc((size_t)count + 1, sizeof *s->e);
  prCheck(s->e != NULL, "out of memory", "%s: out of memory", path);
  for (cJSON *it = s->root->child; it; it = it->next) {
    const char *name = it->string;
    if (strcmp(name, "__metadata__") == 0) {
      prCheck(s->meta == NULL, HINT_FILE, "%s: \"__metadata__\" appears twice", path);
      prCheck(cJSON_IsObject(it), HINT_FILE, "%s: \"__metadata__\" is not an object", path);
      for (cJSON *m = it->child; m; m = m->next)
        prCheck(cJSON_IsString(m), HINT_FILE, "%s: metadata '%s' is not a string", path, m->string);
      s->meta = it;
      continue;
    }
    StEntry *e = &s->e[s->n++];
    e->name = name;
    prCheck(cJSON_IsObject(it), HINT_FILE, "%s: tensor '%s': the entry is not an object", path,
            name);
    cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
    cJSON *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    prCheck(cJSON_IsString(dt), HINT_FILE, "%s: tensor '%s' has no \"dtype\" string", path, name);
    e->dtype = dt->valuestring;
    e->dsize = dtype_size(e->dtype);
    prCheck(e->dsize > 0, HINT_FILE, "%s: tensor '%s' has an unknown dtype '%s'", path, name,
            e->dtype);
    prCheck(cJSON_IsArray(sh) && cJSON_GetArraySize(sh) <= 8, HINT_FILE,
            "%s: tensor '%s': \"shape\" is not an array of at most 8 sizes", path, name);
    uint64_t numel = 1;
    bool overflow = false;
    for (cJSON *d = sh->child; d; d = d->next) {
      uint64_t v;
      prCheck(json_uint(d, &v), HINT_FILE,
              "%s: tensor '%s': \"shape\" holds something other than a non-negative integer", path,
              name);
      e->shape[e->rank++] = (int64_t)v;
      if (v != 0 && numel > UINT64_MAX / v) overflow = true;
      numel *= v;
    }
    prCheck(cJSON_IsArray(of) && cJSON_GetArraySize(of) == 2 && json_uint(of->child, &e->begin) &&
                json_uint(of->child->next, &e->end),
            HINT_FILE, "%s: tensor '%s': \"data_offsets\" is not [begin, end]", path, name);
    prCheck(e->begin <= e->end && e->end <= s->data_size, HINT_FILE,
            "%s: tensor '%s': data offsets [%llu, %llu] are outside the data section (%llu "
            "bytes)",
            path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
            (unsigned long long)s->data_size);
    prCheck(!overflow && numel <= UINT64_MAX / (uint64_t)e->dsize &&
                e->end - e->begin == numel * (uint64_t)e->dsize,
            HINT_FILE,
            "%s: tensor '%s': data offsets [%llu, %llu] hold %llu bytes but %s of that shape "
            "needs %llu",
            path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
            (unsigned long long)(e->end - e->begin), e->dtype,
            (unsigned long long)(numel * (uint64_t)e->dsize));
  }
  // Names are unique; sort by name for lookups.
  qsort(s->e, (size_t)s->n, sizeof *s->e, cmp_name);
  for (int i = 1; i < s->n; i++)
    prCheck(strcmp(s->e[i - 1].name, s->e[i].name) != 0, HINT_FILE,
            "%s: tensor '%s' appears twice in the header", path, s->e[i].name);
  // No two (non-empty) tensors share bytes.
  StEntry **by = malloc(((size_t)s->n + 1) * sizeof *by);
  prCheck(by != NULL, "out of memory", "%s: out of memory", path);
  int m = 0;
  for (int i = 0; i < s->n; i++)
    if (s->e[i].end > s->e[i].begin) by[m++] = &s->e[i];
  qsort(by, (size_t)m, sizeof *by, cmp_begin);
  for (int i = 1; i < m; i++)
    prCheck(by[i]->begin >= by[i - 1]->end, HINT_FILE,
            "%s: tensors '%s' and '%s' overlap in the data section", path, by[i - 1]->name,
            by[i]->name);
  free(by);
}

static void st_close(StFile *s) {
  if (s->f) fclose(s->f);
  cJSON_Delete(s->root);
  free(s->e);
  memset(s, 0, sizeof *s);
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

void pr_safetensors_load(const char *path, PrTensorRef *refs, int n, const bool *optional,
                         bool allow_extra) {
  pr_check_regular(path, "checkpoint"); // a FIFO or device would block the open below
  StFile s;
  st_open(&s, path);
  const char *hint_model =
      "the checkpoint was written for a different model (names and shapes must match the "
      "model's parameters)";
  StEntry **found = calloc((size_t)n + 1, sizeof *found);
  prCheck(found != NULL, "out of memory", "%s: out of memory", path);
  for (int i = 0; i < n; i++) {
    StEntry *e = st_find(&s, refs[i].name);
    if (!e) {
      prCheck(optional && optional[i], hint_model, "%s: tensor '%s' is missing", path,
              refs[i].name);
      continue;
    }
    e->used = true;
    found[i] = e;
    prCheck(strcmp(e->dtype, "F32") == 0 || strcmp(e->dtype, "BF16") == 0 ||
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
      pr_fail(__FILE__, __LINE__, hint_model, "%s: tensor '%s' has shape %s; the model expects %s",
              path, refs[i].name, a, b);
    }
  }
  if (!allow_extra)
    for (int i = 0; i < s.n; i++)
      prCheck(s.e[i].used, "load a checkpoint of this model, or allow extra tensors",
              "%s: tensor '%s' is in the file but not in the model", path, s.e[i].name);
  for (int i = 0; i < n; i++) {
    StEntry *e = found[i];
    if (!e) continue;
    uint64_t bytes = e->end - e->begin;
    prCheck(fseeko(s.f, (off_t)(8 + s.hlen + e->begin), SEEK_SET) == 0, HINT_FILE,
            "%s: cannot seek to tensor '%s': %s", path, e->name, strerror(errno));
    if (e->dsize == 4) {
      prCheck(fread(refs[i].data, 1, bytes, s.f) == bytes, HINT_FILE,
              "%s: cannot read tensor '%s' (byte offset %llu)", path, e->name,
              (unsigned long long)(8 + s.hlen + e->begin));
    } else {
      uint16_t *tmp = malloc(bytes + 2);
      prCheck(tmp != NULL, "out of memory", "%s: out of memory reading '%s'", path, e->name);
      prCheck(fread(tmp, 1, bytes, s.f) == bytes, HINT_FILE,
              "%s: cannot read tensor '%s' (byte offset %llu)", path, e->name,
              (unsigned long long)(8 + s.hlen + e->begin));
      bool bf = strcmp(e->dtype, "BF16") == 0;
      for (uint64_t k = 0; k < bytes / 2; k++)
        refs[i].data[k] = bf ? bf16_to_f32(tmp[k]) : f16_to_f32(tmp[k]);
      free(tmp);
    }
  }
  free(found);
  st_close(&s);
}

bool pr_safetensors_meta(const char *path, const char *key, char *out, size_t cap) {
  StFile s;
  st_open(&s, path);
  cJSON *v = s.meta ? cJSON_GetObjectItemCaseSensitive(s.meta, key) : NULL;
  bool found = v != NULL;
  if (found) {
    size_t len = strlen(v->valuestring);
    prCheck(len < cap, "internal error: metadata buffer too small",
            "%s: metadata '%s' is %zu bytes long (buffer %zu)", path, key, len, cap);
    memcpy(out, v->valuestring, len + 1);
  }
  st_close(&s);
  return found;
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

void pr_safetensors_save(const char *path, const PrTensorRef *refs, int n, const char *const *meta,
                         int nmeta) {
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

  size_t tlen = strlen(path) + 32;
  char *tmp = malloc(tlen);
  prCheck(tmp != NULL, "out of memory", "out of memory");
  snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  prCheck(f != NULL, "check that the directory exists and is writable", "cannot create '%s': %s",
          tmp, strerror(errno));
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
  if (ok && rename(tmp, path) != 0) ok = false, err = errno;
  if (!ok) {
    unlink(tmp);
    pr_fail(__FILE__, __LINE__, "check the free disk space and permissions",
            "cannot write '%s': %s", path, err ? strerror(err) : "write error");
  }
  // Make the rename durable (best effort: some file systems refuse fsync on directories).
  char *dcopy = strdup(path);
  if (dcopy) {
    int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
      (void)fsync(dfd);
      close(dfd);
    }
    free(dcopy);
  }
  free(tmp);
  free(h.p);
}

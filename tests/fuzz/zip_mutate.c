// ZIP archives in memory for fuzz_pt2 (zip_mutate.h). Writing goes through libzip into a memory
// source; a name libzip will not add (a duplicate, an empty one) is added under a placeholder of
// the same length and the placeholder's bytes replaced afterwards in the local header and the
// central directory, where names are not covered by any checksum.
#define _GNU_SOURCE // memmem
#include "zip_mutate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

// ---- the entries

ZEntry *zarchive_add(ZArchive *z, const char *name, const void *data, size_t n) {
  if (z->n == z->cap) {
    z->cap = z->cap ? 2 * z->cap : 16;
    z->e = realloc(z->e, (size_t)z->cap * sizeof *z->e);
    if (!z->e) exit(2);
  }
  ZEntry *e = &z->e[z->n++];
  *e = (ZEntry){.name = strdup(name), .method = ZIP_CM_STORE};
  if (!e->name) exit(2);
  buf_set(&e->data, data, n);
  return e;
}

void zarchive_remove(ZArchive *z, int i) {
  free(z->e[i].name);
  buf_free(&z->e[i].data);
  memmove(&z->e[i], &z->e[i + 1], (size_t)(z->n - i - 1) * sizeof *z->e);
  z->n--;
}

int zarchive_find(const ZArchive *z, const char *name) {
  for (int i = 0; i < z->n; i++)
    if (!strcmp(z->e[i].name, name)) return i;
  return -1;
}

void zarchive_free(ZArchive *z) {
  for (int i = 0; i < z->n; i++) free(z->e[i].name), buf_free(&z->e[i].data);
  free(z->e);
  *z = (ZArchive){0};
}

void zarchive_copy(ZArchive *dst, const ZArchive *src) {
  while (dst->n > src->n) zarchive_remove(dst, dst->n - 1);
  for (int i = 0; i < src->n; i++) { // dst's buffers reused: no allocation once they are grown
    ZEntry *e = i < dst->n ? &dst->e[i] : zarchive_add(dst, "", NULL, 0);
    free(e->name);
    e->name = strdup(src->e[i].name);
    if (!e->name) exit(2);
    buf_set(&e->data, src->e[i].data.p, src->e[i].data.n);
    e->method = src->e[i].method, e->encrypt = src->e[i].encrypt;
  }
}

bool zarchive_read(ZArchive *z, const char *path) {
  int err = 0;
  zip_t *zp = zip_open(path, ZIP_RDONLY, &err);
  if (!zp) {
    fprintf(stderr, "fuzz: cannot open the seed archive %s (libzip error %d)\n", path, err);
    return false;
  }
  zip_int64_t n = zip_get_num_entries(zp, 0);
  bool ok = true;
  for (zip_int64_t i = 0; ok && i < n; i++) {
    zip_stat_t st;
    zip_file_t *f = NULL;
    ok = zip_stat_index(zp, (zip_uint64_t)i, 0, &st) == 0 &&
         (f = zip_fopen_index(zp, (zip_uint64_t)i, 0)) != NULL;
    if (!ok) break;
    ZEntry *e = zarchive_add(z, st.name, NULL, 0);
    buf_set(&e->data, "", 0);
    char chunk[65536];
    zip_int64_t got;
    while ((got = zip_fread(f, chunk, sizeof chunk)) > 0)
      buf_insert(&e->data, e->data.n, chunk, (size_t)got);
    ok = got == 0;
    zip_fclose(f);
  }
  zip_discard(zp);
  if (!ok) fprintf(stderr, "fuzz: cannot read the seed archive %s\n", path);
  return ok;
}

// ---- writing

// A placeholder of len bytes, unique by k (len >= 6): "\x01" four hex digits, then 'Z's.
static void placeholder(char *out, size_t len, int k) {
  char head[8];
  snprintf(head, sizeof head, "\x01%04x", k & 0xffff);
  memset(out, 'Z', len);
  memcpy(out, head, 5);
  out[len] = '\0';
}

// Replaces every occurrence of from (len bytes) in b by to.
static void patch(Buf *b, const char *from, const char *to, size_t len) {
  for (unsigned char *p = b->p, *end = b->p + b->n; len && p < end;) {
    unsigned char *at = memmem(p, (size_t)(end - p), from, len);
    if (!at) break;
    memcpy(at, to, len);
    p = at + len;
  }
}

// The bytes libzip wrote into its memory source.
static bool read_source(zip_source_t *src, Buf *out) {
  if (zip_source_open(src) < 0) return false;
  bool ok = zip_source_seek(src, 0, SEEK_END) == 0;
  zip_int64_t len = ok ? zip_source_tell(src) : -1;
  ok = len >= 0 && zip_source_seek(src, 0, SEEK_SET) == 0;
  if (ok) {
    buf_set(out, "", 0);
    char chunk[65536];
    zip_int64_t got;
    while ((got = zip_source_read(src, chunk, sizeof chunk)) > 0)
      buf_insert(out, out->n, chunk, (size_t)got);
    ok = got == 0 && out->n == (size_t)len;
  }
  zip_source_close(src);
  return ok;
}

// Adds every entry to zp; the names added under a placeholder into ph / real (n of them).
static bool add_entries(zip_t *zp, const ZArchive *z, char (*ph)[4096], int *nph, char *err,
                        size_t cap) {
  for (int i = 0; i < z->n; i++) {
    const ZEntry *e = &z->e[i];
    size_t len = strlen(e->name);
    const char *name = e->name;
    if (zarchive_find(z, e->name) != i || len == 0) { // libzip refuses it: a placeholder
      if (len < 6 || len >= 4096) continue;           // (not representable: left out)
      placeholder(ph[*nph], len, *nph);
      name = ph[(*nph)++];
    }
    zip_source_t *s = zip_source_buffer(zp, e->data.p, e->data.n, 0);
    zip_int64_t k = s ? zip_file_add(zp, name, s, ZIP_FL_ENC_UTF_8) : -1;
    if (k < 0) {
      zip_source_free(s);
      snprintf(err, cap, "zip_file_add '%s': %s", name, zip_strerror(zp));
      return false;
    }
    zip_set_file_compression(zp, (zip_uint64_t)k, e->method, 0);
    if (e->encrypt) zip_file_set_encryption(zp, (zip_uint64_t)k, ZIP_EM_AES_128, "pipec");
  }
  return true;
}

bool zarchive_write(const ZArchive *z, Buf *out, char *err, size_t cap) {
  zip_error_t ze;
  zip_error_init(&ze);
  zip_source_t *src = zip_source_buffer_create(NULL, 0, 0, &ze);
  zip_t *zp = src ? zip_open_from_source(src, ZIP_TRUNCATE, &ze) : NULL;
  if (!zp) {
    snprintf(err, cap, "libzip: %s", zip_error_strerror(&ze));
    zip_error_fini(&ze);
    if (src) zip_source_free(src);
    return false;
  }
  zip_error_fini(&ze);
  zip_source_keep(src);
  char(*ph)[4096] = malloc((size_t)(z->n ? z->n : 1) * sizeof *ph);
  int nph = 0;
  if (!ph) exit(2);
  bool ok = add_entries(zp, z, ph, &nph, err, cap);
  if (ok && zip_close(zp) != 0) {
    snprintf(err, cap, "zip_close: %s", zip_strerror(zp));
    ok = false;
  }
  if (!ok) zip_discard(zp);
  ok = ok && read_source(src, out);
  zip_source_free(src);
  // The placeholders, in order of the entries that needed one, back to their real names.
  for (int i = 0, k = 0; ok && i < z->n && k < nph; i++) {
    size_t len = strlen(z->e[i].name);
    if ((zarchive_find(z, z->e[i].name) != i || len == 0) && len >= 6 && len < 4096)
      patch(out, ph[k++], z->e[i].name, len);
  }
  free(ph);
  return ok;
}

// ---- header fields

typedef struct Field {
  int off, width; // byte offset in the header, bytes
} Field;

static const Field LOCAL[] = {{4, 2},  {6, 2},  {8, 2},  {14, 4},
                              {18, 4}, {22, 4}, {26, 2}, {28, 2}}; // "PK\3\4", 30 bytes
static const Field CENTRAL[] = {{6, 2},  {8, 2},  {10, 2}, {16, 4}, {20, 4}, {24, 4},
                                {28, 2}, {30, 2}, {32, 2}, {34, 2}, {42, 4}}; // "PK\1\2", 46
static const Field END[] = {{4, 2},  {6, 2},  {8, 2}, {10, 2},
                            {12, 4}, {16, 4}, {20, 2}}; // "PK\5\6", 22 bytes

// The offsets of every header with signature sig (4 bytes) and at least size bytes in b.
static int find_headers(const Buf *b, const char *sig, size_t size, size_t *at, int max) {
  int n = 0;
  for (const unsigned char *p = b->p, *end = b->p + b->n; n < max && p < end;) {
    const unsigned char *h = memmem(p, (size_t)(end - p), sig, 4);
    if (!h || (size_t)(end - h) < size) break;
    at[n++] = (size_t)(h - b->p);
    p = h + 1;
  }
  return n;
}

static void set_le(Buf *b, size_t at, int width, uint64_t v) {
  for (int i = 0; i < width; i++) b->p[at + (size_t)i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const Buf *b, size_t at, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; i++) v |= (uint64_t)b->p[at + (size_t)i] << (8 * i);
  return v;
}

// A value for a field: a boundary, the file's size around, the old value moved a little.
static uint64_t field_value(Rng *r, uint64_t old, int width, size_t file) {
  uint64_t max = width == 2 ? 0xffff : 0xffffffff;
  switch (rng_below(r, 8)) {
  case 0:
    return 0;
  case 1:
    return max;
  case 2:
    return max / 2;
  case 3:
    return max / 2 + 1;
  case 4:
    return (file + rng_below(r, 3) - 1) & max;
  case 5:
    return (old + 1) & max;
  case 6:
    return (old - 1) & max;
  default:
    return (old * 2 + rng_below(r, 3)) & max;
  }
}

bool zip_field_mutation(Rng *r, Buf *b) {
  enum { MAX = 4096 };
  static size_t at[MAX];
  int kind = (int)rng_below(r, 10); // 0-3 local, 4-7 central, 8-9 end record
  const char *sig = kind < 4 ? "PK\3\4" : kind < 8 ? "PK\1\2" : "PK\5\6";
  size_t size = kind < 4 ? 30 : kind < 8 ? 46 : 22;
  const Field *f = kind < 4 ? LOCAL : kind < 8 ? CENTRAL : END;
  int nf = kind < 4 ? 8 : kind < 8 ? 11 : 7;
  int n = find_headers(b, sig, size, at, MAX);
  if (!n) return false;
  size_t h = at[rng_below(r, (uint64_t)n)];
  if (kind < 8 && rng_chance(r, 20)) { // a byte of the entry's name
    size_t name = h + size, len = (size_t)get_le(b, h + (kind < 4 ? 26 : 28), 2);
    if (len && name + len <= b->n)
      b->p[name + rng_below(r, len)] = (unsigned char)"/.\\\0\n"[rng_below(r, 5)];
    return true;
  }
  const Field *x = &f[rng_below(r, (uint64_t)nf)];
  uint64_t old = get_le(b, h + (size_t)x->off, x->width);
  set_le(b, h + (size_t)x->off, x->width, field_value(r, old, x->width, b->n));
  return true;
}

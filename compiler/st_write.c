// st_write.c: writes a safetensors file (st_write.h). The header is built as a cJSON tree,
// "__metadata__" first (when given), then one member per tensor in the order given, its sizes and
// offsets as exact integer literals (cJSON's own numbers are doubles, printed in exponent form
// from 1e15 on, which the reference reader's u64 fields refuse); printed unformatted and padded
// with spaces to a multiple of 8 bytes as the reference writer pads it. Everything is checked
// before a byte is written; the file goes to PATH.tmp.PID, fsync'ed, and is renamed over PATH
// with the directory fsync'ed after, so a crash or a full disk never leaves a partial file.
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "source.h"
#include "st_write.h"

int st_dtype_size(const char *dtype) {
  static const struct {
    const char *name; // the format's dtype name
    int size;         // bytes per element
  } T[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2},
           {"I64", 8}, {"I32", 4}, {"U8", 1},  {"BOOL", 1}};
  for (size_t i = 0; dtype && i < sizeof T / sizeof T[0]; i++)
    if (strcmp(dtype, T[i].name) == 0) return T[i].size;
  return 0;
}

// "[2, 3]" into buf.
static const char *fmt_shape(char *buf, size_t cap, const StTensor *t) {
  size_t k = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < t->rank && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
  return buf;
}

static bool valid_utf8(const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    int n = source_utf8_len(p);
    if (n == 0) return false;
    p += n;
  }
  return true;
}

// Tensor i's name, dtype, shape and bytes; false after reporting why not.
static bool check_tensor(const char *path, const StTensor *t, int i, Diag *d) {
  const char *name = t[i].name;
  char sh[256];
  const char *why = !name                               ? "has no name"
                    : !*name                            ? "has an empty name"
                    : !valid_utf8(name)                 ? "has a name that is not valid UTF-8"
                    : strcmp(name, "__metadata__") == 0 ? "is named \"__metadata__\", the "
                                                          "key of the file's metadata"
                                                        : NULL;
  if (why) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': tensor %d %s", path, i, why);
    return false;
  }
  int size = st_dtype_size(t[i].dtype);
  if (!size) {
    diag_error(d, (Loc){0, 0},
               "cannot write '%s': tensor '%s' has dtype '%s' (expected F32, I64, I32, BF16, F16, "
               "F64, U8 or BOOL)",
               path, name, t[i].dtype ? t[i].dtype : "(none)");
    return false;
  }
  if (t[i].rank < 0 || t[i].rank > ST_MAX_RANK) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': tensor '%s' has rank %d (at most %d)", path,
               name, t[i].rank, ST_MAX_RANK);
    return false;
  }
  uint64_t numel = 1;
  bool overflow = false;
  for (int k = 0; k < t[i].rank; k++) {
    int64_t v = t[i].shape[k];
    if (v < 0) {
      diag_error(d, (Loc){0, 0}, "cannot write '%s': tensor '%s' has shape %s (a negative size)",
                 path, name, fmt_shape(sh, sizeof sh, &t[i]));
      return false;
    }
    if (v && numel > UINT64_MAX / (uint64_t)v) overflow = true;
    numel *= (uint64_t)v;
  }
  if (numel > UINT64_MAX / (uint64_t)size) overflow = true;
  if (overflow || t[i].bytes != numel * (uint64_t)size) {
    char need[64];
    snprintf(need, sizeof need, overflow ? "more than 2^64" : "%llu",
             (unsigned long long)(numel * (uint64_t)size));
    diag_error(d, (Loc){0, 0},
               "cannot write '%s': tensor '%s' is given %llu bytes but %s of shape %s needs %s",
               path, name, (unsigned long long)t[i].bytes, t[i].dtype,
               fmt_shape(sh, sizeof sh, &t[i]), need);
    return false;
  }
  if (t[i].bytes && !t[i].data) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': tensor '%s' has no data", path, name);
    return false;
  }
  return true;
}

// An exact integer literal (cJSON raw text).
static cJSON *uint_item(uint64_t v) {
  char b[32];
  snprintf(b, sizeof b, "%llu", (unsigned long long)v);
  return cJSON_CreateRaw(b);
}

// The header's JSON text, padded to a multiple of 8 bytes (malloc'd; *len its bytes), or NULL
// after reporting why. The tensors are checked already.
static char *header_text(const char *path, const StTensor *t, int n, const char *meta, size_t *len,
                         Diag *d) {
  cJSON *root = cJSON_CreateObject(), *m = NULL;
  if (meta) {
    m = cJSON_Parse(meta);
    bool ok = cJSON_IsObject(m);
    for (const cJSON *it = ok ? m->child : NULL; it && ok; it = it->next)
      ok = cJSON_IsString(it) && valid_utf8(it->string) && valid_utf8(it->valuestring);
    if (!ok) {
      diag_error(d, (Loc){0, 0},
                 "cannot write '%s': the metadata is not a JSON object of UTF-8 strings", path);
      cJSON_Delete(m);
      cJSON_Delete(root);
      return NULL;
    }
    cJSON_AddItemToObject(root, "__metadata__", m);
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    cJSON *e = cJSON_CreateObject(), *shape = cJSON_CreateArray(), *offs = cJSON_CreateArray();
    cJSON_AddItemToObject(root, t[i].name, e);
    cJSON_AddItemToObject(e, "dtype", cJSON_CreateString(t[i].dtype));
    cJSON_AddItemToObject(e, "shape", shape);
    for (int k = 0; k < t[i].rank; k++)
      cJSON_AddItemToArray(shape, uint_item((uint64_t)t[i].shape[k]));
    cJSON_AddItemToObject(e, "data_offsets", offs);
    cJSON_AddItemToArray(offs, uint_item(off));
    cJSON_AddItemToArray(offs, uint_item(off + t[i].bytes));
    off += t[i].bytes;
  }
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  size_t k = text ? strlen(text) : 0, padded = (k + 7) / 8 * 8;
  char *h = text ? realloc(text, padded + 1) : NULL;
  if (!h) {
    free(text);
    diag_error(d, (Loc){0, 0}, "cannot write '%s': out of memory for the header", path);
    return NULL;
  }
  memset(h + k, ' ', padded - k);
  h[padded] = 0;
  *len = padded;
  return h;
}

typedef struct Named {
  const char *name; // a tensor's name
  int i;            // its index
} Named;

static int cmp_named(const void *a, const void *b) {
  const Named *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x->i > y->i) - (x->i < y->i);
}

// No name is given twice (sorted by name: n log n); false after reporting the first pair.
static bool unique_names(const char *path, const StTensor *t, int n, Diag *d) {
  Named *s = malloc(((size_t)n + 1) * sizeof *s);
  if (!s) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': out of memory", path);
    return false;
  }
  for (int i = 0; i < n; i++) s[i] = (Named){t[i].name, i};
  qsort(s, (size_t)n, sizeof *s, cmp_named);
  bool ok = true;
  for (int k = 1; ok && k < n; k++)
    if (strcmp(s[k - 1].name, s[k].name) == 0) {
      diag_error(d, (Loc){0, 0}, "cannot write '%s': tensor '%s' is given twice (%d and %d)", path,
                 s[k].name, s[k - 1].i, s[k].i);
      ok = false;
    }
  free(s);
  return ok;
}

static bool total_bytes(const StTensor *t, int n, uint64_t *out) {
  uint64_t sum = 0;
  for (int i = 0; i < n; i++) {
    if (t[i].bytes > UINT64_MAX - sum) return false;
    sum += t[i].bytes;
  }
  *out = sum;
  return true;
}

// Writes all of buf to f in pieces fwrite can take; false with errno set.
static bool put(FILE *f, const void *buf, uint64_t n) {
  const char *p = buf;
  while (n > 0) {
    size_t k = n > ((size_t)1 << 30) ? (size_t)1 << 30 : (size_t)n;
    if (fwrite(p, 1, k, f) != k) return false;
    p += k, n -= k;
  }
  return true;
}

// The whole file into tmp: 0, or the errno of the failure (tmp then removed).
static int write_tmp(const char *tmp, const char *h, size_t hlen, const StTensor *t, int n) {
  FILE *f = fopen(tmp, "wb");
  if (!f) return errno ? errno : EIO;
  unsigned char lb[8];
  for (int i = 0; i < 8; i++) lb[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  bool ok = put(f, lb, 8) && put(f, h, hlen);
  for (int i = 0; ok && i < n; i++) ok = put(f, t[i].data, t[i].bytes);
  int err = ok ? 0 : errno;
  if (ok && fflush(f) != 0) ok = false, err = errno;
  if (ok && fsync(fileno(f)) != 0) ok = false, err = errno;
  if (fclose(f) != 0 && ok) ok = false, err = errno;
  if (!ok) unlink(tmp);
  return ok ? 0 : err ? err : EIO;
}

static void fsync_dir_of(const char *path) {
  char *copy = strdup(path);
  int fd = copy ? open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  if (fd >= 0) {
    (void)fsync(fd); // best effort: some file systems refuse fsync on directories
    close(fd);
  }
  free(copy);
}

bool st_write(const char *path, const StTensor *t, int n, const char *metadata_json, Diag *d) {
  uint64_t total;
  if (n < 0 || (n > 0 && !t)) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': %d tensors", path, n);
    return false;
  }
  for (int i = 0; i < n; i++)
    if (!check_tensor(path, t, i, d)) return false;
  if (!unique_names(path, t, n, d)) return false;
  if (!total_bytes(t, n, &total)) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': the tensors hold more than 2^64 bytes", path);
    return false;
  }
  size_t hlen;
  char *h = header_text(path, t, n, metadata_json, &hlen, d);
  if (!h) return false;
  size_t tlen = strlen(path) + 32;
  char *tmp = malloc(tlen);
  if (!tmp) {
    free(h);
    diag_error(d, (Loc){0, 0}, "cannot write '%s': out of memory", path);
    return false;
  }
  snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
  // Past a file size limit a write fails with EFBIG (reported) instead of killing pipec.
  void (*old_xfsz)(int) = signal(SIGXFSZ, SIG_IGN);
  int err = write_tmp(tmp, h, hlen, t, n);
  if (!err && rename(tmp, path) != 0) {
    err = errno ? errno : EIO;
    unlink(tmp);
  }
  signal(SIGXFSZ, old_xfsz);
  free(h);
  if (err) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': %s", path, strerror(err));
  } else {
    fsync_dir_of(path); // the rename is durable
  }
  free(tmp);
  return !err;
}

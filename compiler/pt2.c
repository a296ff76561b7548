// torch.export archives (compiler/pt2.h): the ZIP opened with libzip from a checked regular file,
// every entry's name and size checked before anything is read, the JSON entries read whole (up
// to PT2_MAX_JSON) into cJSON, the weights' table checked entry by entry against the archive.
// Weights' bytes are read only when asked for (pt2_read_weight), into the caller's buffer.
#include "pt2.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "files.h"

#define NOLOC ((Loc){0, 0})

// ---- the ZIP

// True when name is safe to join to a directory: not absolute, no ".." component, no backslash
// (a Windows separator), no empty name.
static bool safe_name(const char *name) {
  if (!name[0] || name[0] == '/' || strchr(name, '\\')) return false;
  for (const char *c = name; *c;) {
    const char *e = strchr(c, '/');
    size_t n = e ? (size_t)(e - c) : strlen(c);
    if (n == 2 && c[0] == '.' && c[1] == '.') return false;
    c += n + (e != NULL);
  }
  return true;
}

// True when name holds a control byte: it would break a one-line message in two (a ZIP's names
// and cJSON's keys may hold any byte), and torch.export writes none.
static bool has_control(const char *name) {
  for (const unsigned char *c = (const unsigned char *)name; *c; c++)
    if (*c < 0x20 || *c == 0x7f) return true;
  return false;
}

// Why libzip refused to open the archive, in a user's words; a file starting with a local
// header but without an end record was cut short.
static void report_open(const char *path, int zerr, Diag *d) {
  if (zerr == ZIP_ER_NOZIP) {
    unsigned char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    bool local = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "PK\3\4", 4);
    if (f) fclose(f);
    diag_error(d, NOLOC,
               local ? "truncated ZIP archive (no end of central directory record)"
                     : "not a ZIP archive (torch.export.save writes one)");
    return;
  }
  zip_error_t e;
  zip_error_init_with_code(&e, zerr);
  diag_error(d, NOLOC, "cannot read the ZIP archive: %s", zip_error_strerror(&e));
  zip_error_fini(&e);
}

// Opens the archive from a checked regular file.
static bool open_zip(Pt2 *p, const char *path, Diag *d) {
  const char *kind = NULL;
  FILE *f = open_regular(path, &kind);
  if (!f) {
    if (kind)
      diag_error(d, NOLOC, "the archive is %s, not a regular file", kind);
    else
      diag_error(d, NOLOC, "cannot open the archive: %s", strerror(errno));
    return false;
  }
  struct stat st;
  int fd = fstat(fileno(f), &st) == 0 ? dup(fileno(f)) : -1;
  fclose(f);
  if (fd < 0) {
    diag_error(d, NOLOC, "cannot read the archive: %s", strerror(errno));
    return false;
  }
  p->file_bytes = (uint64_t)st.st_size;
  int zerr = 0;
  p->zip = zip_fdopen(fd, 0, &zerr);
  if (!p->zip) {
    close(fd);
    report_open(path, zerr, d);
    return false;
  }
  return true;
}

// Every entry: a safe name without control bytes, the only entry of its name (ZIP readers differ
// on which of two they read), no more bytes declared than the archive holds.
static bool check_entries(Pt2 *p, Diag *d) {
  zip_int64_t n = zip_get_num_entries(p->zip, 0);
  for (zip_int64_t i = 0; i < n; i++) {
    zip_stat_t st;
    if (zip_stat_index(p->zip, (zip_uint64_t)i, 0, &st) != 0) {
      diag_error(d, NOLOC, "entry %lld: %s", (long long)i, zip_strerror(p->zip));
      return false;
    }
    char *shown = diag_printable(st.name);
    bool ok = false;
    const char *raw = zip_get_name(p->zip, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
    if (!safe_name(st.name))
      diag_error(d, NOLOC, "entry '%s': an absolute name or one with '..' is refused", shown);
    else if (has_control(st.name))
      diag_error(d, NOLOC, "entry '%s': a name with a control character is refused", shown);
    else if (!raw || zip_name_locate(p->zip, raw, ZIP_FL_ENC_RAW) != i)
      diag_error(d, NOLOC, "entry '%s': a second entry of one name is refused", shown);
    else if (st.comp_size > p->file_bytes)
      diag_error(d, NOLOC, "entry '%s' declares %llu bytes, beyond the archive's %llu", shown,
                 (unsigned long long)st.comp_size, (unsigned long long)p->file_bytes);
    else
      ok = true;
    free(shown);
    if (!ok) return false;
  }
  return true;
}

// The archive's directory: the one of its <dir>/models/model.json (a single component).
static bool find_prefix(Pt2 *p, Arena *a, Diag *d) {
  static const char tail[] = "/models/model.json";
  zip_int64_t n = zip_get_num_entries(p->zip, 0);
  for (zip_int64_t i = 0; i < n; i++) {
    const char *name = zip_get_name(p->zip, (zip_uint64_t)i, 0);
    size_t len = name ? strlen(name) : 0, tl = sizeof tail - 1;
    if (len <= tl || strcmp(name + len - tl, tail)) continue;
    if (memchr(name, '/', len - tl)) continue; // deeper than <dir>/models/
    p->prefix = arena_strndup(a, name, len - tl + 1);
    return true;
  }
  diag_error(d, NOLOC, "no entry '<name>/models/model.json': not a torch.export archive");
  return false;
}

// Index of the entry prefix + rel; -1 after reporting it missing (what: who needs it).
static zip_int64_t locate(const Pt2 *p, const char *entry, const char *what, Diag *d) {
  zip_int64_t i = zip_name_locate(p->zip, entry, ZIP_FL_ENC_RAW);
  if (i < 0) {
    char *shown = diag_printable(entry);
    diag_error(d, NOLOC, "%sno entry '%s'", what, shown);
    free(shown);
  }
  return i;
}

// Reads exactly want bytes of entry i into buf (a short read or a CRC error reported).
static bool read_entry(const Pt2 *p, zip_int64_t i, const char *entry, void *buf, uint64_t want,
                       Diag *d) {
  zip_file_t *f = zip_fopen_index(p->zip, (zip_uint64_t)i, 0);
  if (!f) {
    diag_error(d, NOLOC, "entry '%s': %s", entry, zip_strerror(p->zip));
    return false;
  }
  char extra;
  zip_int64_t got = want ? zip_fread(f, buf, want) : 0;
  zip_int64_t more = got >= 0 && (uint64_t)got == want ? zip_fread(f, &extra, 1) : 0;
  bool ok = false;
  if (got < 0 || more < 0) // libzip's reason: a CRC error, a read error
    diag_error(d, NOLOC, "entry '%s': %s", entry, zip_file_strerror(f));
  else if ((uint64_t)got != want)
    diag_error(d, NOLOC, "entry '%s': truncated (%lld of %llu bytes)", entry, (long long)got,
               (unsigned long long)want);
  else if (more > 0)
    diag_error(d, NOLOC, "entry '%s': more than its %llu bytes", entry, (unsigned long long)want);
  else
    ok = true;
  if (zip_fclose(f) != 0 && ok) {
    diag_error(d, NOLOC, "entry '%s': %s", entry, zip_strerror(p->zip));
    ok = false;
  }
  return ok;
}

// Reads entry prefix + rel as JSON into *out.
static bool read_json(const Pt2 *p, const char *rel, cJSON **out, Arena *a, Diag *d) {
  char *entry = arena_printf(a, "%s%s", p->prefix, rel);
  zip_int64_t i = locate(p, entry, "", d);
  if (i < 0) return false;
  zip_stat_t st;
  if (zip_stat_index(p->zip, (zip_uint64_t)i, 0, &st) != 0) {
    diag_error(d, NOLOC, "entry '%s': %s", entry, zip_strerror(p->zip));
    return false;
  }
  if (st.size > PT2_MAX_JSON) {
    diag_error(d, NOLOC, "entry '%s' is %llu bytes; the limit is %llu MiB", entry,
               (unsigned long long)st.size, (unsigned long long)(PT2_MAX_JSON >> 20));
    return false;
  }
  char *text = malloc(st.size + 1);
  if (!text || !read_entry(p, i, entry, text, st.size, d)) {
    if (!text) diag_error(d, NOLOC, "entry '%s': out of memory", entry);
    free(text);
    return false;
  }
  *out = cJSON_ParseWithLength(text, st.size);
  if (!*out) {
    const char *at = cJSON_GetErrorPtr();
    long off = at && at >= text && at <= text + st.size ? (long)(at - text) : 0;
    diag_error(d, NOLOC, "entry '%s': not valid JSON (at byte %ld)", entry, off);
  }
  free(text);
  return *out != NULL;
}

// <dir>/byteorder, where there is one (torch.export.save writes "little"): the weights' bytes are
// read as little-endian, so another order is refused.
static bool check_byteorder(const Pt2 *p, Arena *a, Diag *d) {
  char *entry = arena_printf(a, "%sbyteorder", p->prefix);
  zip_int64_t i = zip_name_locate(p->zip, entry, ZIP_FL_ENC_RAW);
  if (i < 0) return true;
  zip_stat_t st;
  char text[8] = {0};
  if (zip_stat_index(p->zip, (zip_uint64_t)i, 0, &st) == 0 && st.size == 6) {
    if (!read_entry(p, i, entry, text, 6, d)) return false;
    if (!strcmp(text, "little")) return true;
  }
  diag_error(d, NOLOC, "entry '%s': only \"little\" (little-endian) is read", entry);
  return false;
}

// ---- model.json

// o[key] as an integer in [lo, hi] (range checked on the double before it is converted).
static bool json_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, int64_t *v) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(x) || !(x->valuedouble >= (double)lo && x->valuedouble <= (double)hi))
    return false;
  *v = (int64_t)x->valuedouble;
  return (double)*v == x->valuedouble;
}

static bool check_schema(Pt2 *p, Diag *d) {
  const cJSON *sv = cJSON_GetObjectItemCaseSensitive(p->model, "schema_version");
  int64_t major, minor;
  if (!json_int(sv, "major", 0, 1 << 20, &major) || !json_int(sv, "minor", 0, 1 << 20, &minor)) {
    diag_error(d, NOLOC, "entry '%smodels/model.json': no schema_version {major, minor}",
               p->prefix);
    return false;
  }
  p->schema_major = (int)major;
  p->schema_minor = (int)minor;
  if (major != 8) {
    diag_error(d, NOLOC,
               "entry '%smodels/model.json': schema_version %d.%d is not supported "
               "(supported majors: " PT2_SCHEMA_MAJORS ")",
               p->prefix, p->schema_major, p->schema_minor);
    return false;
  }
  return true;
}

// ---- the weights' table

typedef struct DtypeInfo {
  int code;         // torch/_export/serde/schema.py ScalarType
  int elem;         // bytes
  const char *name; // pipec's spelling where it has one
} DtypeInfo;

static const DtypeInfo DTYPES[] = {
    {1, 1, "u8"},   {2, 1, "i8"},   {3, 2, "i16"},  {4, 4, "i32"},   {5, 8, "i64"},
    {6, 2, "f16"},  {7, 4, "f32"},  {8, 8, "f64"},  {10, 8, "c64"},  {12, 1, "bool"},
    {13, 2, "bf16"},
    {28, 2, "u16"}, {34, 4, "u32"}, {35, 8, "u64"},
};

static const DtypeInfo *dtype_info(int64_t code) {
  for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
    if (DTYPES[i].code == code) return &DTYPES[i];
  return NULL;
}

// A list of {"as_int": n} (sizes, strides) into v; false when symbolic, negative or too long.
static bool int_list(const cJSON *l, int64_t *v, int *n) {
  if (!cJSON_IsArray(l) || cJSON_GetArraySize(l) > PT2_MAX_RANK) return false;
  *n = 0;
  const cJSON *x;
  cJSON_ArrayForEach(x, l) {
    if (!json_int(x, "as_int", 0, INT64_C(1) << 53, &v[*n])) return false;
    (*n)++;
  }
  return true;
}

static void list_str(char *buf, size_t cap, const int64_t *v, int n) {
  size_t k = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < n && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)v[i]);
  if (k < cap) snprintf(buf + k, cap - k, "]");
}

// Checks one weight's tensor_meta: dtype, sizes, contiguous strides, no storage offset.
static bool weight_meta(Pt2Weight *w, const cJSON *meta, Diag *d) {
  int64_t code, off, strides[PT2_MAX_RANK];
  int ns;
  char a[256], b[256];
  if (!json_int(meta, "dtype", 0, 1000, &code)) {
    diag_error(d, NOLOC, "weight '%s': tensor_meta has no integer dtype", w->fqn);
    return false;
  }
  if (!dtype_info(code)) {
    diag_error(d, NOLOC,
               "weight '%s': dtype %lld is not supported (ScalarType codes 1-8, 10, 12, "
               "13, 28, 34, 35)",
               w->fqn, (long long)code);
    return false;
  }
  const DtypeInfo *di = dtype_info(code);
  w->dtype = (int)code;
  w->elem = di->elem;
  w->dtype_name = di->name;
  if (!int_list(cJSON_GetObjectItemCaseSensitive(meta, "sizes"), w->sizes, &w->rank) ||
      !int_list(cJSON_GetObjectItemCaseSensitive(meta, "strides"), strides, &ns) || ns != w->rank) {
    diag_error(d, NOLOC,
               "weight '%s': sizes and strides must be lists of at most %d "
               "non-negative {\"as_int\": n} of one length",
               w->fqn, PT2_MAX_RANK);
    return false;
  }
  if (cJSON_GetObjectItemCaseSensitive(meta, "storage_offset") &&
      (!json_int(cJSON_GetObjectItemCaseSensitive(meta, "storage_offset"), "as_int", 0, 0, &off))) {
    diag_error(d, NOLOC, "weight '%s': a storage offset is not supported", w->fqn);
    return false;
  }
  uint64_t numel = 1, want = 1;
  for (int i = w->rank - 1; i >= 0; i--) {
    if (w->sizes[i] > 1 && (uint64_t)strides[i] != want) {
      list_str(a, sizeof a, strides, ns);
      list_str(b, sizeof b, w->sizes, w->rank);
      diag_error(d, NOLOC,
                 "weight '%s': strides %s are not contiguous for sizes %s (save a "
                 ".contiguous() copy)",
                 w->fqn, a, b);
      return false;
    }
    if (w->sizes[i] && numel > UINT64_MAX / 8 / (uint64_t)w->sizes[i]) {
      diag_error(d, NOLOC, "weight '%s': too many elements", w->fqn);
      return false;
    }
    numel *= (uint64_t)w->sizes[i];
    want = numel;
  }
  w->numel = numel;
  w->bytes = numel * (uint64_t)w->elem;
  return true;
}

// Its entry: a safe path_name, present, exactly w->bytes long.
static bool weight_entry(const Pt2 *p, Pt2Weight *w, const cJSON *c, const char *dir, Arena *a,
                         Diag *d) {
  const cJSON *pn = cJSON_GetObjectItemCaseSensitive(c, "path_name");
  if (!cJSON_IsString(pn) || !safe_name(pn->valuestring) || strchr(pn->valuestring, '/')) {
    diag_error(d, NOLOC, "weight '%s': path_name must be a file name of data/%s/", w->fqn, dir);
    return false;
  }
  w->entry = arena_printf(a, "%sdata/%s/%s", p->prefix, dir, pn->valuestring);
  char *what = arena_printf(a, "weight '%s': ", w->fqn);
  zip_int64_t i = locate(p, w->entry, what, d);
  zip_stat_t st;
  if (i < 0) return false;
  if (zip_stat_index(p->zip, (zip_uint64_t)i, 0, &st) != 0) {
    diag_error(d, NOLOC, "entry '%s': %s", w->entry, zip_strerror(p->zip));
    return false;
  }
  if (st.size != w->bytes) {
    char s[256];
    list_str(s, sizeof s, w->sizes, w->rank);
    diag_error(d, NOLOC, "weight '%s': entry '%s' holds %llu bytes; %s %s needs %llu", w->fqn,
               w->entry, (unsigned long long)st.size, w->dtype_name, s,
               (unsigned long long)w->bytes);
    return false;
  }
  return true;
}

// The table of one config entry (dir "weights": parameters, "constants": buffers and constants).
static bool read_table(const Pt2 *p, const cJSON *config, const char *dir, Pt2Weight **out, int *n,
                       Arena *a, Diag *d) {
  const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(config, "config");
  if (!cJSON_IsObject(cfg)) {
    diag_error(d, NOLOC, "entry '%sdata/%s/model_%s_config.json': no object 'config'", p->prefix,
               dir, dir);
    return false;
  }
  *n = cJSON_GetArraySize(cfg);
  *out = ARENA_ARRAY(a, Pt2Weight, *n ? *n : 1);
  int k = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, cfg) {
    Pt2Weight *w = &(*out)[k++];
    w->fqn = arena_strdup(a, c->string);
    if (has_control(w->fqn)) {
      char *shown = diag_printable(w->fqn);
      diag_error(d, NOLOC, "weight '%s': a name with a control character is refused",
                 shown ? shown : "?");
      free(shown);
      return false;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "use_pickle"))) {
      diag_error(d, NOLOC, "weight '%s' is pickled (use_pickle), which pipec never reads", w->fqn);
      return false;
    }
    w->is_param = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "is_param"));
    if (!weight_meta(w, cJSON_GetObjectItemCaseSensitive(c, "tensor_meta"), d) ||
        !weight_entry(p, w, c, dir, a, d))
      return false;
  }
  return true;
}

static bool read_weights(Pt2 *p, Arena *a, Diag *d) {
  return read_table(p, p->weights_config, "weights", &p->weights, &p->nweights, a, d);
}

// The buffers' and constants' table, where the archive has one (torch writes it, "{"config":
// {}}" when there are none).
static bool read_constants(Pt2 *p, Arena *a, Diag *d) {
  char *entry = arena_printf(a, "%sdata/constants/model_constants_config.json", p->prefix);
  if (zip_name_locate(p->zip, entry, 0) < 0) return true;
  return read_json(p, "data/constants/model_constants_config.json", &p->constants_config, a, d) &&
         read_table(p, p->constants_config, "constants", &p->constants, &p->nconstants, a, d);
}

// ---- the interface

bool pt2_open(Pt2 *p, const char *path, Arena *a, Diag *d) {
  memset(p, 0, sizeof *p);
  p->path = path;
  bool ok = open_zip(p, path, d) && check_entries(p, d) && find_prefix(p, a, d) &&
            check_byteorder(p, a, d) && read_json(p, "models/model.json", &p->model, a, d) &&
            check_schema(p, d) &&
            read_json(p, "data/weights/model_weights_config.json", &p->weights_config, a, d) &&
            read_weights(p, a, d) && read_constants(p, a, d);
  if (!ok) pt2_close(p);
  return ok;
}

const Pt2Weight *pt2_weight(const Pt2 *p, const char *fqn) {
  for (int i = 0; i < p->nweights; i++)
    if (!strcmp(p->weights[i].fqn, fqn)) return &p->weights[i];
  return NULL;
}

const Pt2Weight *pt2_constant(const Pt2 *p, const char *fqn) {
  for (int i = 0; i < p->nconstants; i++)
    if (!strcmp(p->constants[i].fqn, fqn)) return &p->constants[i];
  return NULL;
}

bool pt2_read_weight(const Pt2 *p, const Pt2Weight *w, void *buf, Diag *d) {
  zip_int64_t i = locate(p, w->entry, "", d);
  return i >= 0 && read_entry(p, i, w->entry, buf, w->bytes, d);
}

void pt2_close(Pt2 *p) {
  if (p->zip) zip_discard(p->zip); // opened read-only: nothing to write back
  cJSON_Delete(p->model);
  cJSON_Delete(p->weights_config);
  cJSON_Delete(p->constants_config);
  p->zip = NULL;
  p->model = p->weights_config = p->constants_config = NULL;
}

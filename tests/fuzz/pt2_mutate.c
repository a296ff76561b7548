// fuzz_pt2's mutants (pt2_mutate.h). Raw (30%): the fixture's bytes with 1 to 3 ZIP header
// fields or bytes changed. Structured (70%): the fixture's entries with one or two of the changes
// below, written again by libzip, with raw changes on top for one in seven. Each change names
// itself in FuzzCase.what.
#include "pt2_mutate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

static const char *const JSON_DICT[] = {
    "{",
    "}",
    "[",
    "]",
    "\"",
    ":",
    ",",
    "null",
    "true",
    "-1",
    "1e999",
    "\\n",
    "\"as_int\"",
    "\"as_expr\"",
    "\"dtype\"",
    "\"sizes\"",
    "\"path_name\"",
    "9007199254740993",
    "\\u0000",
};
static const char *const ZIP_DICT[] = {"PK\3\4", "PK\1\2", "PK\5\6", "..", "/", "\\", "\n"};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

// ---- the seeds

static cJSON *parse_entry(const SeedInfo *si, const char *rel) {
  char name[512];
  snprintf(name, sizeof name, "%s%s", si->prefix, rel);
  int i = zarchive_find(&si->z, name);
  return i < 0 ? NULL : cJSON_ParseWithLength((const char *)si->z.e[i].data.p, si->z.e[i].data.n);
}

bool pt2_seed_load(Seed *s) {
  SeedInfo *si = calloc(1, sizeof *si);
  if (!si) return false;
  s->user = si;
  if (!zarchive_read(&si->z, s->path)) return false;
  for (int i = 0; i < si->z.n && !si->prefix; i++) {
    const char *n = si->z.e[i].name, *tail = strstr(n, "/models/model.json");
    if (tail && !tail[18]) si->prefix = strndup(n, (size_t)(tail - n + 1));
  }
  if (!si->prefix) {
    fprintf(stderr, "fuzz_pt2: %s has no <name>/models/model.json\n", s->path);
    return false;
  }
  si->model = parse_entry(si, "models/model.json");
  si->config = parse_entry(si, "data/weights/model_weights_config.json");
  return si->model && si->config;
}

void pt2_seed_unload(Seed *s) {
  SeedInfo *si = s->user;
  if (!si) return;
  zarchive_free(&si->z);
  free(si->prefix);
  cJSON_Delete(si->model);
  cJSON_Delete(si->config);
  free(si);
}

// ---- helpers

static int find_rel(const ZArchive *z, const char *prefix, const char *rel) {
  char name[4096];
  snprintf(name, sizeof name, "%s%s", prefix, rel);
  return zarchive_find(z, name);
}

// A weight file's entry ("<dir>/data/weights/weight_<k>"), or -1.
static int pick_weight(Rng *r, const ZArchive *z) {
  int idx[4096], n = 0;
  for (int i = 0; i < z->n && n < 4096; i++)
    if (strstr(z->e[i].name, "/data/weights/weight_")) idx[n++] = i;
  return n ? idx[rng_below(r, (uint64_t)n)] : -1;
}

// ---- the structured changes (each returns what it did)

// A JSON entry (rel) changed as a tree or as bytes; donor: the same entry of another fixture.
static const char *json_entry(Rng *r, ZArchive *z, const char *prefix, const char *rel,
                              const cJSON *donor) {
  int i = find_rel(z, prefix, rel);
  if (i < 0) return "nothing";
  if (rng_chance(r, 70) && mutate_json_text(r, &z->e[i].data, donor)) return "json tree";
  mutate_bytes(r, &z->e[i].data, NULL, JSON_DICT, COUNT(JSON_DICT));
  return "json bytes";
}

// One field of one weight's entry in the weights' config set to something a reader must refuse
// or handle: a dtype, a size, a stride, an offset, a path, the pickle flag, its name.
static const char *weight_field(Rng *r, ZArchive *z, const char *prefix) {
  static const char *const DTYPES[] = {"0",  "9",   "12",  "13",    "28",  "36",
                                       "-1", "7.5", "1e9", "\"7\"", "null"};
  static const char *const SIZES[] = {
      "0", "-1", "9007199254740992", "9007199254740993", "4611686018427387904", "1e20", "3", "1"};
  static const char *const PATHS[] = {
      "",           "..",       "../models/model.json",      "weight_0/", "/etc/passwd", "a\nb",
      "weight_999", "weight_0", "model_weights_config.json", "."};
  int i = find_rel(z, prefix, "data/weights/model_weights_config.json");
  cJSON *root = i < 0 ? NULL : cJSON_ParseWithLength((const char *)z->e[i].data.p, z->e[i].data.n);
  cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
  int n = cJSON_GetArraySize(cfg);
  if (!n) {
    cJSON_Delete(root);
    return "nothing";
  }
  cJSON *w = cJSON_GetArrayItem(cfg, (int)rng_below(r, (uint64_t)n));
  cJSON *meta = cJSON_GetObjectItemCaseSensitive(w, "tensor_meta");
  const char *what = "weight field";
  char num[64];
  switch (rng_below(r, 8)) {
  case 0:
    cJSON_ReplaceItemInObject(meta, "dtype", cJSON_CreateRaw(DTYPES[rng_below(r, COUNT(DTYPES))]));
    what = "weight dtype";
    break;
  case 1:
  case 2: { // a size or a stride: a value, {"as_expr"}, one more or one fewer dim
    cJSON *l = cJSON_GetObjectItemCaseSensitive(meta, rng_chance(r, 60) ? "sizes" : "strides");
    int k = cJSON_GetArraySize(l);
    cJSON *x = k ? cJSON_GetArrayItem(l, (int)rng_below(r, (uint64_t)k)) : NULL;
    int how = (int)rng_below(r, 4);
    if (how == 0 && x) {
      snprintf(num, sizeof num, "%s", SIZES[rng_below(r, COUNT(SIZES))]);
      cJSON_ReplaceItemInObject(x, "as_int", cJSON_CreateRaw(num));
    } else if (how == 1 && x) {
      cJSON_DeleteItemFromObject(x, "as_int");
      cJSON_AddItemToObject(x, "as_expr", cJSON_CreateString("Symbol('s0')"));
    } else if (how == 2 && l) {
      int more = 1 + (int)rng_below(r, 9);
      for (int m = 0; m < more; m++)
        cJSON_AddItemToArray(l, k ? cJSON_Duplicate(l->child, true) : cJSON_CreateNull());
    } else if (k) {
      cJSON_DeleteItemFromArray(l, (int)rng_below(r, (uint64_t)k));
    }
    what = "weight sizes/strides";
    break;
  }
  case 3: {
    cJSON *o = cJSON_CreateObject();
    snprintf(num, sizeof num, "%s", SIZES[rng_below(r, COUNT(SIZES))]);
    cJSON_AddItemToObject(o, "as_int", cJSON_CreateRaw(num));
    if (rng_chance(r, 80))
      cJSON_ReplaceItemInObject(meta, "storage_offset", o);
    else
      cJSON_Delete(o), cJSON_DeleteItemFromObject(meta, "storage_offset");
    what = "weight storage_offset";
    break;
  }
  case 4:
  case 5:
    cJSON_ReplaceItemInObject(w, "path_name",
                              cJSON_CreateString(PATHS[rng_below(r, COUNT(PATHS))]));
    what = "weight path_name";
    break;
  case 6:
    cJSON_ReplaceItemInObject(w, rng_chance(r, 50) ? "use_pickle" : "is_param",
                              rng_chance(r, 80) ? cJSON_CreateTrue() : cJSON_CreateString("yes"));
    what = "weight use_pickle/is_param";
    break;
  default: { // its name (the key): a control byte, empty, very long, another weight's
    static const char *const NAMES[] = {"a\nb", "", "\x1b[31mred", "l.weight"};
    char *name = NULL;
    if (rng_chance(r, 20)) {
      name = malloc(10001);
      if (!name) exit(2);
      memset(name, 'w', 10000);
      name[10000] = '\0';
    }
    const char *key = name ? name : NAMES[rng_below(r, COUNT(NAMES))];
    if (rng_chance(r, 30) && cfg->child && cfg->child->string) key = cfg->child->string;
    char *copy = strdup(key);
    if (!(w->type & cJSON_StringIsConst)) free(w->string);
    w->type &= ~cJSON_StringIsConst;
    w->string = copy;
    free(name);
    what = "weight name";
  }
  }
  json_print(r, root, &z->e[i].data);
  cJSON_Delete(root);
  return what;
}

// A weight file cut short, grown or emptied.
static const char *weight_size(Rng *r, ZArchive *z) {
  int i = pick_weight(r, z);
  if (i < 0) return "nothing";
  Buf *b = &z->e[i].data;
  size_t n = b->n;
  switch (rng_below(r, 5)) {
  case 0:
    b->n = 0;
    break;
  case 1:
    b->n = n ? n - 1 : 0;
    break;
  case 2:
    b->n = n / 2;
    break;
  case 3:
    buf_insert(b, n, "\0\0\0\0", 1 + rng_below(r, 4));
    break;
  default: {
    unsigned char *copy = malloc(n ? n : 1);
    if (!copy) exit(2);
    memcpy(copy, b->p, n);
    buf_insert(b, n, copy, n);
    free(copy);
  }
  }
  return "weight resized";
}

// An entry renamed: '..', absolute, a backslash, a control byte, a trailing '/', empty, long,
// another entry's name, one byte changed.
static const char *rename_entry(Rng *r, ZArchive *z, const char *prefix) {
  if (!z->n) return "nothing";
  int i = rng_chance(r, 40) ? find_rel(z, prefix, "models/model.json") : -1;
  if (i < 0) i = rng_chance(r, 50) ? pick_weight(r, z) : -1;
  if (i < 0) i = (int)rng_below(r, (uint64_t)z->n);
  const char *old = z->e[i].name, *leaf = strrchr(old, '/');
  leaf = leaf ? leaf + 1 : old;
  char name[4096];
  switch (rng_below(r, 10)) {
  case 0:
    snprintf(name, sizeof name, "%s../%s", prefix, leaf);
    break;
  case 1:
    snprintf(name, sizeof name, "/%s", old);
    break;
  case 2:
    snprintf(name, sizeof name, "%sdata/weights/../../%s", prefix, leaf);
    break;
  case 3:
    snprintf(name, sizeof name, "%sa\\%s", prefix, leaf);
    break;
  case 4:
    snprintf(name, sizeof name, "%s\n%s", prefix, leaf);
    break;
  case 5:
    snprintf(name, sizeof name, "%s/", old);
    break;
  case 6:
    name[0] = '\0';
    break;
  case 7:
    memset(name, 'n', 3000);
    snprintf(name + 3000, sizeof name - 3000, "/%s", old);
    break;
  case 8:
    snprintf(name, sizeof name, "%s", z->e[rng_below(r, (uint64_t)z->n)].name);
    break;
  default:
    snprintf(name, sizeof name, "%s", old);
    if (name[0]) name[rng_below(r, strlen(name))] = "./\\\x01 "[rng_below(r, 5)];
  }
  free(z->e[i].name);
  z->e[i].name = strdup(name);
  if (!z->e[i].name) exit(2);
  return "entry renamed";
}

static const char *remove_entry(Rng *r, ZArchive *z, const char *prefix) {
  static const char *const KEY[] = {"models/model.json", "data/weights/model_weights_config.json",
                                    "byteorder"};
  int i = rng_chance(r, 50) ? find_rel(z, prefix, KEY[rng_below(r, 3)]) : -1;
  if (i < 0) i = rng_chance(r, 50) ? pick_weight(r, z) : -1;
  if (i < 0 && z->n) i = (int)rng_below(r, (uint64_t)z->n);
  if (i < 0) return "nothing";
  zarchive_remove(z, i);
  return "entry removed";
}

// A second entry of one name: the same bytes, or other bytes (which one does a reader see?).
static const char *duplicate_entry(Rng *r, ZArchive *z) {
  if (!z->n) return "nothing";
  int i = rng_chance(r, 60) ? pick_weight(r, z) : -1;
  if (i < 0) i = (int)rng_below(r, (uint64_t)z->n);
  char *name = strdup(z->e[i].name);
  Buf data = {0};
  buf_set(&data, z->e[i].data.p, z->e[i].data.n);
  if (rng_chance(r, 50) && data.n) data.p[rng_below(r, data.n)] ^= 0x40;
  ZEntry *e = zarchive_add(z, name, data.p, data.n);
  if (rng_chance(r, 50)) { // before the original instead of after the last entry
    ZEntry copy = *e;
    memmove(&z->e[i + 1], &z->e[i], (size_t)(z->n - 1 - i) * sizeof *z->e);
    z->e[i] = copy;
  }
  free(name);
  buf_free(&data);
  return "entry duplicated";
}

static const char *schema(Rng *r, ZArchive *z, const char *prefix) {
  static const char *const MAJORS[] = {"7",     "9",    "0",    "-1",      "8.5",
                                       "\"8\"", "1e20", "null", "1048577", "[8]"};
  int i = find_rel(z, prefix, "models/model.json");
  cJSON *root = i < 0 ? NULL : cJSON_ParseWithLength((const char *)z->e[i].data.p, z->e[i].data.n);
  cJSON *sv = cJSON_GetObjectItemCaseSensitive(root, "schema_version");
  if (!sv) {
    cJSON_Delete(root);
    return "nothing";
  }
  if (rng_chance(r, 15))
    cJSON_DeleteItemFromObject(root, "schema_version");
  else
    cJSON_ReplaceItemInObject(sv, rng_chance(r, 80) ? "major" : "minor",
                              cJSON_CreateRaw(MAJORS[rng_below(r, COUNT(MAJORS))]));
  json_print(r, root, &z->e[i].data);
  cJSON_Delete(root);
  return "schema_version";
}

static const char *byteorder(Rng *r, ZArchive *z, const char *prefix) {
  static const char *const ORDERS[] = {"big",    "",        "littl",   "little\n",
                                       "LITTLE", "littlee", "little\0"};
  int i = find_rel(z, prefix, "byteorder");
  if (i < 0) return "nothing";
  if (rng_chance(r, 20)) {
    zarchive_remove(z, i);
    return "byteorder removed";
  }
  int k = (int)rng_below(r, COUNT(ORDERS));
  buf_set(&z->e[i].data, ORDERS[k], k == 6 ? 7 : strlen(ORDERS[k]));
  return "byteorder";
}

// Every entry (or model.json alone) moved under another folder.
static const char *move_folder(Rng *r, ZArchive *z, const char *prefix) {
  static const char *const DIRS[] = {"x/", "",     "a/b/",    "../",     "x\ny/",
                                     "/",  "a b/", "models/", "nanogpt/"};
  char dir[512];
  if (rng_chance(r, 10)) {
    memset(dir, 'd', 300);
    snprintf(dir + 300, sizeof dir - 300, "/");
  } else {
    snprintf(dir, sizeof dir, "%s", DIRS[rng_below(r, COUNT(DIRS))]);
  }
  bool one = rng_chance(r, 30);
  size_t pl = strlen(prefix);
  for (int i = 0; i < z->n; i++) {
    if (strncmp(z->e[i].name, prefix, pl)) continue;
    if (one && strcmp(z->e[i].name + pl, "models/model.json")) continue;
    char name[4096];
    snprintf(name, sizeof name, "%s%s", dir, z->e[i].name + pl);
    free(z->e[i].name);
    z->e[i].name = strdup(name);
    if (!z->e[i].name) exit(2);
  }
  return one ? "model.json moved" : "folder moved";
}

// An entry deflated, compressed with bzip2, or encrypted.
static const char *storage(Rng *r, ZArchive *z, bool *intact) {
  if (!z->n) return "nothing";
  ZEntry *e = &z->e[rng_below(r, (uint64_t)z->n)];
  int k = (int)rng_below(r, 10);
  if (k < 6) {
    e->method = ZIP_CM_DEFLATE;
    return "entry deflated";
  }
  if (k < 8 && zip_compression_method_supported(ZIP_CM_BZIP2, 1)) {
    e->method = ZIP_CM_BZIP2; // read by pt2 only where libzip decompresses it
    *intact = false;
    return "entry bzip2";
  }
  if (!zip_encryption_method_supported(ZIP_EM_AES_128, 1)) return "nothing";
  e->encrypt = true;
  *intact = false;
  return "entry encrypted";
}

// More entries: a second archive folder first in the file, a deeper model.json, many tiny ones.
static const char *add_entries(Rng *r, ZArchive *z, const char *prefix) {
  int i = find_rel(z, prefix, "models/model.json");
  switch (rng_below(r, 4)) {
  case 0:
  case 1: {
    const char *name = rng_chance(r, 50) ? "other/models/model.json" : "a/b/models/model.json";
    ZEntry *e = zarchive_add(z, name, i >= 0 ? z->e[i].data.p : (const unsigned char *)"{}",
                             i >= 0 ? z->e[i].data.n : 2);
    ZEntry copy = *e; // first in the file: it is the one found
    memmove(&z->e[1], &z->e[0], (size_t)(z->n - 1) * sizeof *z->e);
    z->e[0] = copy;
    return "a second model.json";
  }
  case 2:
    zarchive_add(z, "models/model.json", "{}", 2);
    return "a top-level model.json";
  default: {
    int n = 1 + (int)rng_below(r, 200);
    for (int k = 0; k < n; k++) {
      char name[64];
      snprintf(name, sizeof name, "%sextra/%d", prefix, k);
      zarchive_add(z, name, "x", 1);
    }
    return "extra entries";
  }
  }
}

// ---- the mutant

static const char *structured_change(Rng *r, ZArchive *z, const SeedInfo *si, const SeedInfo *di,
                                     bool *intact) {
  const char *p = si->prefix;
  switch (rng_below(r, 14)) {
  case 0:
  case 1:
    return json_entry(r, z, p, "models/model.json", di->model);
  case 2:
    return json_entry(r, z, p, "data/weights/model_weights_config.json", di->config);
  case 3:
    return json_entry(r, z, p, "data/constants/model_constants_config.json", NULL);
  case 4:
  case 5:
    return weight_field(r, z, p);
  case 6:
    return weight_size(r, z);
  case 7:
    return rename_entry(r, z, p);
  case 8:
    return remove_entry(r, z, p);
  case 9:
    return duplicate_entry(r, z);
  case 10:
    return rng_chance(r, 50) ? schema(r, z, p) : byteorder(r, z, p);
  case 11:
    return move_folder(r, z, p);
  case 12:
    return storage(r, z, intact);
  default:
    return add_entries(r, z, p);
  }
}

// 1 to 3 raw changes of the archive's bytes.
static void raw_changes(Rng *r, Buf *b) {
  int k = 1 + (int)rng_below(r, 3);
  for (int i = 0; i < k; i++)
    if (!rng_chance(r, 60) || !zip_field_mutation(r, b))
      mutate_bytes(r, b, NULL, ZIP_DICT, COUNT(ZIP_DICT));
}

void pt2_mutate(Rng *r, const Seeds *seeds, FuzzCase *c) {
  const Seed *s = fuzz_pick(r, seeds), *d = fuzz_pick(r, seeds);
  const SeedInfo *si = s->user, *di = d->user;
  if (rng_chance(r, 30)) {
    buf_set(&c->input, s->data.p, s->data.n);
    raw_changes(r, &c->input);
    snprintf(c->what, sizeof c->what, "%s: raw", s->path);
    return;
  }
  static ZArchive z; // reused: its entries are copied from the seed each time
  zarchive_copy(&z, &si->z);
  bool intact = true;
  const char *a = structured_change(r, &z, si, di, &intact), *b = "";
  if (rng_chance(r, 20)) b = structured_change(r, &z, si, di, &intact);
  char err[512] = "";
  if (!zarchive_write(&z, &c->input, err, sizeof err)) {
    // libzip refused what was asked (not pt2's business): the seed as it is instead
    buf_set(&c->input, s->data.p, s->data.n);
    snprintf(c->what, sizeof c->what, "%.200s: unwritable (%.200s), the seed", s->path, err);
    return;
  }
  bool raw = rng_chance(r, 15);
  if (raw) raw_changes(r, &c->input);
  c->knob = intact && !raw ? KNOB_INTACT : 0;
  snprintf(c->what, sizeof c->what, "%s: %s%s%s%s (donor %s)", s->path, a, *b ? ", " : "", b,
           raw ? " + raw" : "", d->path);
}

// The model source of a .pt2 (compiler/pt2_source.h): the archive opened (compiler/pt2.c), its
// graph imported (compiler/pt2_import.h), the document printed as the JSON `pipec import` writes
// and parsed back by the JSON front end (compiler/source.c), so that every later message about
// the model points at a line of that JSON and the two paths cannot differ.
#include "pt2_source.h"

#include <stdlib.h>
#include <string.h>

#include "pt2_import.h"
#include "st_write.h"

bool pt2_is_archive(const char *path) {
  size_t n = strlen(path);
  return n > 4 && strcmp(path + n - 4, ".pt2") == 0;
}

// The archive's stem: "models/nanogpt.pt2" -> "nanogpt".
static const char *stem(Arena *a, const char *path) {
  const char *b = strrchr(path, '/');
  b = b ? b + 1 : path;
  size_t n = strlen(b);
  return arena_strndup(a, b, n > 4 ? n - 4 : n);
}

// The training section of --training FILE: the file's object (a whole model's "training" member
// is taken too, so that a model file's section can be reused).
static bool load_training(Arena *a, const char *path, cJSON **out, Diag *d) {
  Source s = {0};
  Diag td;
  diag_init(&td, path, d->out);
  td.excerpts = d->excerpts, td.format = d->format;
  bool ok = source_load_file(&s, a, path, "the training file", &td);
  const cJSON *t = ok ? s.root : NULL;
  if (t && cJSON_GetObjectItemCaseSensitive(t, "format"))
    t = cJSON_GetObjectItemCaseSensitive(t, "training");
  if (ok && !cJSON_IsObject(t)) {
    diag_error(&td, (Loc){1, 1},
               "the training file holds no object (the model format's "
               "\"training\" section, docs/model-format.md)");
    ok = false;
  }
  if (ok) *out = cJSON_Duplicate(t, true);
  d->errors += td.errors;
  // The records of the machine-readable formats move to d.
  for (int i = 0; i < td.nrecs; i++) {
    if (d->nrecs == d->caprecs) {
      int cap = d->caprecs ? 2 * d->caprecs : 8;
      DiagRecord *r = realloc(d->recs, (size_t)cap * sizeof *r);
      if (!r) break;
      d->recs = r, d->caprecs = cap;
    }
    d->recs[d->nrecs++] = td.recs[i];
    td.recs[i].message = td.recs[i].line = NULL;
  }
  diag_free(&td);
  source_free(&s);
  return ok;
}

// The archive's parameters as safetensors at path, each under its FQN (tied names each with a
// copy of the bytes, as the program's --save writes them): the imported model's "weights".
static bool write_weights(const Pt2 *p, const char *path, Arena *a, Diag *d) {
  StTensor *t = ARENA_ARRAY(a, StTensor, p->nweights ? p->nweights : 1);
  for (int i = 0; i < p->nweights; i++) {
    const Pt2Weight *w = &p->weights[i];
    if (w->dtype != 7) {
      diag_error(d, (Loc){0, 0}, "parameter '%s' is %s; pipec imports f32 parameters", w->fqn,
                 w->dtype_name);
      return false;
    }
    void *buf = arena_alloc(a, w->bytes ? w->bytes : 1);
    if (!pt2_read_weight(p, w, buf, d)) return false;
    t[i] =
        (StTensor){.name = w->fqn, .dtype = "F32", .rank = w->rank, .data = buf, .bytes = w->bytes};
    memcpy(t[i].shape, w->sizes, sizeof(int64_t) * (size_t)w->rank);
  }
  return st_write(path, t, p->nweights, "{\"format\": \"pt\", \"source\": \"pipec import\"}", d);
}

// --data-file NAME=PATH: the training section's data becomes npy with PATH (absolute: given from
// the working directory) for input NAME.
static bool add_data_files(Arena *a, const Pt2SourceOptions *o, cJSON **training, Diag *d) {
  if (!o->ndata_files) return true;
  if (!*training) *training = cJSON_CreateObject();
  cJSON *data = cJSON_GetObjectItemCaseSensitive(*training, "data");
  if (!data) data = cJSON_AddObjectToObject(*training, "data");
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(data, "kind");
  if (kind && (!cJSON_IsString(kind) || strcmp(kind->valuestring, "npy") != 0)) {
    diag_error(d, (Loc){0, 0}, "--data-file: the training section's data is not npy (data.kind)");
    return false;
  }
  if (!kind) cJSON_AddStringToObject(data, "kind", "npy");
  cJSON *files = cJSON_GetObjectItemCaseSensitive(data, "files");
  if (!files) files = cJSON_AddObjectToObject(data, "files");
  for (int i = 0; i < o->ndata_files; i++) {
    const char *eq = strchr(o->data_files[i], '=');
    if (!eq || eq == o->data_files[i] || !eq[1]) {
      diag_error(d, (Loc){0, 0}, "--data-file %s: expected NAME=PATH (an input's .npy file)",
                 o->data_files[i]);
      return false;
    }
    char *name = arena_strndup(a, o->data_files[i], (size_t)(eq - o->data_files[i]));
    const char *f = eq + 1, *sl = strrchr(f, '/');
    char *dir = sl ? arena_strndup(a, f, sl == f ? 1 : (size_t)(sl - f)) : arena_strdup(a, ".");
    char *real = realpath(dir, NULL);
    const char *abs = real ? arena_printf(a, "%s/%s", real, sl ? sl + 1 : f) : f;
    free(real);
    cJSON_DeleteItemFromObjectCaseSensitive(files, name);
    cJSON_AddStringToObject(files, name, abs);
  }
  return true;
}

// Appends text to a growing buffer (NULL after a failed allocation: the caller checks the end).
static void put(char **buf, size_t *len, size_t *cap, const char *text) {
  size_t n = strlen(text);
  if (!*buf) return;
  if (*len + n + 1 > *cap) {
    size_t c = (*cap + n + 1) * 2;
    char *b = realloc(*buf, c);
    if (!b) {
      free(*buf);
      *buf = NULL;
      return;
    }
    *buf = b, *cap = c;
  }
  memcpy(*buf + *len, text, n + 1);
  *len += n;
}

// The document as people read a pipec model: one key per line, each input, parameter and node on
// a line of its own (so that a message's line names one node).
static char *print_model(const cJSON *doc) {
  size_t len = 0, cap = 4096;
  char *buf = malloc(cap);
  if (buf) buf[0] = 0;
  put(&buf, &len, &cap, "{\n");
  for (const cJSON *k = doc->child; k; k = k->next) {
    put(&buf, &len, &cap, "  \""); // (the document's keys are the importer's own words)
    put(&buf, &len, &cap, k->string);
    put(&buf, &len, &cap, "\": ");
    if (cJSON_IsArray(k) && k->child && cJSON_IsObject(k->child)) {
      put(&buf, &len, &cap, "[\n");
      for (const cJSON *e = k->child; e; e = e->next) {
        char *t = cJSON_PrintUnformatted(e);
        put(&buf, &len, &cap, "    ");
        put(&buf, &len, &cap, t ? t : "null");
        put(&buf, &len, &cap, e->next ? ",\n" : "\n");
        free(t);
      }
      put(&buf, &len, &cap, "  ]");
    } else {
      char *t = cJSON_PrintUnformatted(k);
      put(&buf, &len, &cap, t ? t : "null");
      free(t);
    }
    put(&buf, &len, &cap, k->next ? ",\n" : "\n");
  }
  put(&buf, &len, &cap, "}\n");
  return buf;
}

bool pt2_source_load(Source *s, Arena *a, const char *path, const Pt2SourceOptions *o, Diag *d) {
  Pt2 p;
  if (!pt2_open(&p, path, a, d)) return false;
  if (o && o->weights_out && !write_weights(&p, o->weights_out, a, d)) {
    pt2_close(&p);
    return false;
  }
  Pt2ImportOptions io = {.name = stem(a, path), .weights = o ? o->weights_key : NULL};
  bool ok = !o || !o->training || load_training(a, o->training, &io.training, d);
  ok = ok && (!o || add_data_files(a, o, &io.training, d));
  cJSON *doc = NULL;
  ok = ok && pt2_import(&p, &io, &doc, a, d);
  char *text = ok ? print_model(doc) : NULL;
  cJSON_Delete(doc);
  pt2_close(&p);
  if (ok && !text) diag_error(d, (Loc){0, 0}, "out of memory");
  if (!text) return false;
  char *copy = arena_strdup(a, text);
  free(text);
  if (o && o->text) *o->text = copy;
  return source_parse(s, a, path, copy, strlen(copy), d);
}

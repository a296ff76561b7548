// weights.c: the model's "weights" file checked against its parameters at compile time
// (weights.h). A file is one safetensors header; a directory is a sharded checkpoint (the
// runtime's shards.c): model.safetensors.index.json maps every tensor name to a shard of the
// directory ("weight_map"), each shard's header read once. Either way every tensor the file
// holds is a parameter of the model, and every parameter is there, of a dtype the program
// converts (F32; BF16 and F16) and of the parameter's shape; a tied parameter (one storage with
// its owner) may be left out. The messages are the program's own for the same file
// (runtime/safetensors.c), behind "weights: " and at the key's line:col.
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "files.h"
#include "st_read.h"
#include "weights.h"

#define INDEX_NAME "model.safetensors.index.json"
#define INDEX_MAX  ((long long)256 << 20) // bytes: the runtime's limit on an index

const char *weights_shown_path(Arena *a, const char *model_path, const char *weights) {
  const char *slash = strrchr(model_path, '/');
  if (weights[0] == '/' || !slash) return weights;
  return arena_printf(a, "%.*s/%s", (int)(slash - model_path), model_path, weights);
}

// What one check holds.
typedef struct W {
  const Graph *g; // the model
  Diag *d;        // where the error goes
  Loc loc;        // the key's place
  const char *p;  // the file as shown
  Arena *a;       // for headers and names
} W;

static bool fail(W *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(W *w, const char *fmt, ...) {
  char msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(w->d, w->loc, "weights: %s", msg);
  return false;
}

// "[128, 64]", as the program's messages write shapes.
static const char *shape_list(Arena *a, int rank, const int64_t *n) {
  char *s = arena_strdup(a, "[");
  for (int i = 0; i < rank; i++) s = arena_printf(a, "%s%s%lld", s, i ? ", " : "", (long long)n[i]);
  return arena_printf(a, "%s]", s);
}

// Parameter t against its entry e of file f (as shown).
static bool match(W *w, const char *f, const Tensor *t, const StEntry *e) {
  if (strcmp(e->dtype, "F32") != 0 && strcmp(e->dtype, "BF16") != 0 && strcmp(e->dtype, "F16") != 0)
    return fail(w, "%s: tensor '%s' has dtype %s; expected F32 (or BF16/F16)", f, t->name,
                e->dtype);
  int64_t want[MAX_RANK];
  for (int k = 0; k < t->shape.rank; k++) want[k] = t->shape.d[k].n;
  bool same = e->rank == t->shape.rank;
  for (int k = 0; same && k < e->rank; k++) same = e->shape[k] == want[k];
  if (!same)
    return fail(w, "%s: tensor '%s' has shape %s; the model expects %s", f, t->name,
                shape_list(w->a, e->rank, e->shape), shape_list(w->a, t->shape.rank, want));
  return true;
}

// A parameter named name, or NULL.
static const Tensor *param_named(const Graph *g, const char *name) {
  const Tensor *t = graph_find(g, name);
  return t && t->kind == T_PARAM ? t : NULL;
}

// One safetensors file: every parameter in it, nothing else.
static bool check_file(W *w) {
  StHeader h;
  char why[1024];
  if (!st_read_header(w->p, w->a, &h, why, sizeof why)) return fail(w, "%s", why);
  for (int i = 0; i < w->g->nparams; i++) {
    const Tensor *t = w->g->params[i];
    const StEntry *e = st_find(&h, t->name);
    if (!e && !t->tied_to) return fail(w, "%s: tensor '%s' is missing", w->p, t->name);
    if (e && !match(w, w->p, t, e)) return false;
  }
  for (int i = 0; i < h.n; i++)
    if (!param_named(w->g, h.e[i].name))
      return fail(w, "%s: tensor '%s' is in the file but not in the model", w->p, h.e[i].name);
  return true;
}

// The index's JSON (at most INDEX_MAX bytes), or NULL after reporting why.
static cJSON *read_index(W *w, const char *ix) {
  const char *kind;
  FILE *f = open_regular(ix, &kind);
  if (!f && !kind && errno != ENOENT) {
    fail(w, "cannot open '%s': %s", ix, strerror(errno));
    return NULL;
  }
  if (!f) {
    fail(w, "'%s' is a directory without %s (a sharded checkpoint's index)%s%s", w->p, INDEX_NAME,
         kind ? ": it is " : "", kind ? kind : "");
    return NULL;
  }
  struct stat st;
  char *text = NULL;
  bool ok = fstat(fileno(f), &st) == 0 && st.st_size <= INDEX_MAX &&
            (text = malloc((size_t)st.st_size + 1)) != NULL &&
            fread(text, 1, (size_t)st.st_size, f) == (size_t)st.st_size;
  fclose(f);
  cJSON *root = ok ? cJSON_ParseWithLength(text, (size_t)st.st_size) : NULL;
  free(text);
  if (!ok) fail(w, "%s: cannot read it (at most %lld MiB)", ix, INDEX_MAX >> 20);
  if (ok && !root) fail(w, "%s: not valid JSON", ix);
  return root;
}

// The shard file (a plain name of the directory) read once: its header, cached by name.
typedef struct Shard {
  const char *file; // its name in the directory
  StHeader h;       // its header
} Shard;

static const StHeader *shard(W *w, const char *dir, const char *file, Shard *cache, int *n) {
  for (int i = 0; i < *n; i++)
    if (strcmp(cache[i].file, file) == 0) return &cache[i].h;
  char why[1024];
  const char *path = arena_printf(w->a, "%s/%s", dir, file);
  if (!st_read_header(path, w->a, &cache[*n].h, why, sizeof why)) {
    fail(w, "%s", why);
    return NULL;
  }
  cache[*n].file = file;
  return &cache[(*n)++].h;
}

// A sharded checkpoint's directory: every tensor of the index a parameter, every parameter in
// the index and in the shard it names.
static bool check_dir(W *w) {
  const char *ix = arena_printf(w->a, "%s/%s", w->p, INDEX_NAME);
  cJSON *root = read_index(w, ix);
  if (!root) return false;
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  bool ok = cJSON_IsObject(map);
  if (!ok) fail(w, "%s: no \"weight_map\" object", ix);
  int n = ok ? cJSON_GetArraySize(map) : 0;
  Shard *cache = ARENA_ARRAY(w->a, Shard, n + 1);
  int ncache = 0;
  StrMap named; // the index's tensor names
  strmap_init(&named, w->a);
  for (const cJSON *it = ok ? map->child : NULL; ok && it; it = it->next) {
    const char *f = cJSON_IsString(it) ? it->valuestring : NULL;
    const Tensor *t = param_named(w->g, it->string);
    const StHeader *h;
    const StEntry *e;
    if (!f || !f[0] || strchr(f, '/') || f[0] == '.')
      ok = fail(w, "%s: weight_map[\"%s\"] is not a file name of the directory", ix, it->string);
    else if (strmap_put(&named, it->string, (void *)it))
      ok = fail(w, "%s: tensor '%s' appears twice in weight_map", ix, it->string);
    else if (!t)
      ok = fail(w, "%s: tensor '%s' is in the file but not in the model", w->p, it->string);
    else if (!(h = shard(w, w->p, f, cache, &ncache)))
      ok = false;
    else if (!(e = st_find(h, t->name)))
      ok = fail(w, "%s/%s: tensor '%s' is missing (%s names this shard)", w->p, f, t->name,
                INDEX_NAME);
    else
      ok = match(w, arena_printf(w->a, "%s/%s", w->p, f), t, e);
  }
  for (int i = 0; ok && i < w->g->nparams; i++) {
    const Tensor *t = w->g->params[i];
    if (!t->tied_to && !strmap_get(&named, t->name))
      ok = fail(w, "%s: tensor '%s' is missing", w->p, t->name);
  }
  cJSON_Delete(root);
  return ok;
}

bool weights_check(const Source *src, const Graph *g, Diag *d) {
  if (!g->weights) return true;
  W w = {g, d, g->weights_loc, weights_shown_path(g->arena, src->path, g->weights), g->arena};
  struct stat st;
  if (stat(w.p, &st) != 0) return fail(&w, "cannot open '%s': %s", w.p, strerror(errno));
  if (S_ISDIR(st.st_mode)) return check_dir(&w);
  if (!S_ISREG(st.st_mode))
    return fail(&w, "'%s' is %s, not a regular file", w.p,
                S_ISFIFO(st.st_mode)   ? "a FIFO"
                : S_ISCHR(st.st_mode)  ? "a character device"
                : S_ISBLK(st.st_mode)  ? "a block device"
                : S_ISSOCK(st.st_mode) ? "a socket"
                                       : "something else");
  return check_file(&w);
}

// The data binding of the `training.data` section (docs/model-format.md, "Training data"): which
// model inputs the data fills (data.input, data.target: a name or a list of names; by default
// every non-target input, then every target input), where each comes from in a CSV row
// (data.columns; by default consecutively in that order) or which .npy file holds it (data.files;
// `path` and `labels` for one input and one target), and the checks that need the model: token
// data fills one i32 (B,T) input and one i32 (B,T) target; tables fill inputs of shape (B, d1..)
// with static dims after B, f32 or i32; every model input is filled by the data.
#include <libgen.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ops.h"
#include "json.h"
#include "program.h"
#include "training.h"

static const cJSON *sub(const cJSON *o, const char *k) {
  return o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static bool is_fed(const TrainConfig *tc, const Tensor *t) {
  return training_feed_of(tc, t) != NULL;
}

const Feed *training_feed_of(const TrainConfig *tc, const Tensor *t) {
  for (int i = 0; i < tc->nfeeds; i++)
    if (tc->feeds[i].t == t) return &tc->feeds[i];
  return NULL;
}

const char *training_data_path(Arena *a, const char *dir, const char *path) {
  const char *p = path[0] == '/' ? path : arena_printf(a, "%s/%s", dir, path);
  char *canon = realpath(p, NULL); // tidy "a/../b" when the file exists
  if (canon) {
    p = arena_strdup(a, canon);
    free(canon);
  }
  return p;
}

static bool add_feed(const Source *src, TrainConfig *tc, Tensor *t, bool target, const cJSON *at,
                     const char *key, Diag *d) {
  Loc loc = at ? source_loc(src, at) : t->loc;
  if (is_fed(tc, t)) {
    diag_error(d, loc, "training.data.%s: input '%s' is named twice (data.input and data.target "
                       "fill different inputs)", key, t->name);
    return false;
  }
  if (tc->nfeeds == MAX_FEEDS) {
    diag_error(d, loc, "training.data.%s: more than %d fed inputs", key, MAX_FEEDS);
    return false;
  }
  tc->feeds[tc->nfeeds++] = (Feed){.t = t, .target = target, .col = -1, .loc = loc};
  return true;
}

// data.input or data.target as written: a name or a list of names, each a model input.
static bool read_names(const Source *src, Graph *g, const cJSON *it, const char *key, bool target,
                       TrainConfig *tc, Diag *d) {
  bool list = cJSON_IsArray(it);
  int k = 0;
  for (const cJSON *e = list ? it->child : it; e; e = list ? e->next : NULL, k++) {
    Tensor *t = cJSON_IsString(e) ? graph_find(g, e->valuestring) : NULL;
    if (!t || t->kind != T_INPUT) {
      diag_error(d, source_loc(src, e), "training.data.%s%s: expected the name of a model input%s",
                 key, list ? arena_printf(g->arena, "[%d]", k) : "",
                 list || cJSON_IsString(e) ? "" : " or a list of them");
      return false;
    }
    if (!add_feed(src, tc, t, target, e, key, d)) return false;
  }
  return true;
}

// Omitted data.input: every non-target input that data.target does not name; omitted
// data.target: every target input that data.input does not name (named: the named feeds).
static bool default_names(const Source *src, Graph *g, bool target, const Feed *named, int nnamed,
                          TrainConfig *tc, Diag *d) {
  for (int i = 0; i < g->ninputs; i++) {
    Tensor *t = g->inputs[i];
    bool taken = is_fed(tc, t);
    for (int k = 0; k < nnamed; k++) taken |= named[k].t == t;
    if (t->is_target == target && !taken &&
        !add_feed(src, tc, t, target, NULL, target ? "target" : "input", d))
      return false;
  }
  return true;
}

// "data.input 'x', 'x2' and data.target 'y'" for the message of an unfilled input.
static const char *fed_list(Arena *a, const TrainConfig *tc) {
  const char *s = "";
  for (int pass = 0; pass < 2; pass++) {
    int n = 0;
    for (int i = 0; i < tc->nfeeds; i++)
      if (tc->feeds[i].target == (pass == 1)) n++;
    if (!n) continue;
    s = arena_printf(a, "%s%sdata.%s", s, *s ? " and " : "", pass ? "target" : "input");
    for (int i = 0, k = 0; i < tc->nfeeds; i++)
      if (tc->feeds[i].target == (pass == 1))
        s = arena_printf(a, "%s%s'%s'", s, k++ ? ", " : " ", tc->feeds[i].t->name);
  }
  return *s ? s : "nothing";
}

// The loader fills exactly the fed inputs (codegen's loaders); no node makes a model input. Any
// other input would be read uninitialised, from bytes the memory plan gives to other buffers as
// well: refused, at its definition.
static bool all_inputs_filled(const Graph *g, const TrainConfig *tc, Diag *d) {
  for (int i = 0; i < g->ninputs; i++) {
    const Tensor *t = g->inputs[i];
    if (is_fed(tc, t)) continue;
    diag_error(d, t->loc,
               "%s: input '%s' is never filled: the training data fills only %s (name it in "
               "training.data.%s)",
               t->path ? t->path : "inputs", t->name, fed_list(g->arena, tc),
               t->is_target ? "target" : "input");
    return false;
  }
  return true;
}

static bool check_tokens(const TrainConfig *tc, Diag *d) {
  int nin = 0, ntg = 0;
  for (int i = 0; i < tc->nfeeds; i++) *(tc->feeds[i].target ? &ntg : &nin) += 1;
  if (nin != 1 || ntg != 1) {
    diag_error(d, tc->nfeeds ? tc->feeds[0].loc : (Loc){0, 0},
               "training.data: token data fills one data input and one target (i32 (B,T) each), "
               "not %d data input%s and %d target%s",
               nin, nin == 1 ? "" : "s", ntg, ntg == 1 ? "" : "s");
    return false;
  }
  const Tensor *x = tc->feeds[0].t, *y = tc->feeds[1].t;
  if (x->dtype != DT_I32 || x->shape.rank != 2 || !shape_eq(&x->shape, &y->shape) ||
      y->dtype != DT_I32) {
    diag_error(d, x->loc, "training.data: token data needs i32 inputs '%s' and '%s' of shape (B,T)",
               x->name, y->name);
    return false;
  }
  return true;
}

// A table's fed input: (B, d1, ...) with static dims after B, f32 or i32; sets its width.
static bool check_table_feed(const Graph *g, Feed *f, Diag *d) {
  const Tensor *t = f->t;
  const Shape *s = &t->shape;
  bool ok = s->rank >= 1 && s->d[0].b == 1 && s->d[0].n == 1 &&
            (t->dtype == DT_F32 || t->dtype == DT_I32);
  f->width = 1;
  for (int k = 1; ok && k < s->rank; k++) {
    ok = s->d[k].b == 0;
    f->width *= s->d[k].n;
  }
  if (!ok)
    diag_error(d, f->loc,
               "training.data: table data fills f32 or i32 inputs of shape (%s, ...) with fixed "
               "dims after %s; '%s' is %s %s",
               g->batch_sym, g->batch_sym, t->name, dtype_name(t->dtype), fmt_shape(g, s));
  return ok;
}

// The feed a data.columns or data.files key names.
static Feed *keyed_feed(const Source *src, TrainConfig *tc, const cJSON *c, const char *key,
                        Diag *d) {
  for (int i = 0; i < tc->nfeeds; i++)
    if (!strcmp(tc->feeds[i].t->name, c->string)) return &tc->feeds[i];
  char *shown = diag_printable(c->string); // not a name yet: a message stays one line
  diag_error(d, source_loc(src, c),
             "training.data.%s: '%s' is not an input the data fills (data.input, data.target)", key,
             shown ? shown : c->string);
  free(shown);
  return NULL;
}

static bool read_col(const Source *src, const cJSON *c, int64_t *v) {
  return cJSON_IsNumber(c) && source_int(src, c, v) && *v >= 0 && *v <= (int64_t)1 << 31;
}

// data.columns: {"x": [0, 64], "y": 64}, a [start, end) range or one column per fed input;
// absent: consecutively, data.input then data.target, and a row has exactly their columns.
static bool read_columns(const Source *src, const Graph *g, const cJSON *cols, TrainConfig *tc,
                         Diag *d) {
  if (!cols) {
    for (int i = 0; i < tc->nfeeds; i++) {
      tc->feeds[i].col = tc->columns;
      tc->columns += tc->feeds[i].width;
    }
    return true;
  }
  if (!cJSON_IsObject(cols)) {
    diag_error(d, source_loc(src, cols),
               "training.data.columns: expected an object {\"input\": [start, end] or column}");
    return false;
  }
  for (const cJSON *c = cols->child; c; c = c->next) {
    Feed *f = keyed_feed(src, tc, c, "columns", d);
    if (!f) return false;
    int64_t a, b;
    bool range = cJSON_IsArray(c) && cJSON_GetArraySize(c) == 2;
    if (range ? !read_col(src, c->child, &a) || !read_col(src, c->child->next, &b) || b <= a
              : !read_col(src, c, &a)) {
      diag_error(d, source_loc(src, c),
                 "training.data.columns.%s: expected a column index or a range [start, end) of "
                 "0-based columns, start < end",
                 c->string);
      return false;
    }
    if (!range) b = a + 1;
    if (b - a != f->width) {
      diag_error(d, source_loc(src, c),
                 "training.data.columns.%s: %lld column%s, but input '%s' %s takes %lld per "
                 "sample",
                 c->string, (long long)(b - a), b - a == 1 ? "" : "s", f->t->name,
                 fmt_shape(g, &f->t->shape), (long long)f->width);
      return false;
    }
    if (f->col >= 0) {
      diag_error(d, source_loc(src, c), "training.data.columns: duplicate key '%s'", c->string);
      return false;
    }
    f->col = a;
  }
  for (int i = 0; i < tc->nfeeds; i++) {
    Feed *f = &tc->feeds[i];
    if (f->col < 0) {
      diag_error(d, source_loc(src, cols), "training.data.columns: no columns for input '%s'",
                 f->t->name);
      return false;
    }
    for (int j = 0; j < i; j++) { // a column is read as one dtype (the scale: f32 only)
      const Feed *o = &tc->feeds[j];
      if (o->t->dtype != f->t->dtype && f->col < o->col + o->width && o->col < f->col + f->width) {
        diag_error(d, source_loc(src, sub(cols, f->t->name)),
                   "training.data.columns.%s: columns %lld..%lld of %s input '%s' overlap those "
                   "of %s input '%s' (a column is either f32 or i32)",
                   f->t->name, (long long)f->col, (long long)(f->col + f->width - 1),
                   dtype_name(f->t->dtype), f->t->name, dtype_name(o->t->dtype), o->t->name);
        return false;
      }
    }
  }
  return true;
}

// data.files: {"x": "x.npy", ...}, one per fed input, relative to the model file; absent: `path`
// for the one data input and `labels` for the one target (tc->data_path is resolved already).
static bool read_files(const Source *src, Graph *g, const cJSON *data, const char *dir,
                       TrainConfig *tc, Diag *d) {
  const cJSON *files = sub(data, "files");
  if (!files) {
    int nin = 0, ntg = 0;
    for (int i = 0; i < tc->nfeeds; i++) *(tc->feeds[i].target ? &ntg : &nin) += 1;
    if (nin > 1 || ntg > 1) {
      diag_error(d, source_loc(src, data),
                 "training.data: npy data that fills %d inputs needs 'files' (one .npy file per "
                 "input: {\"name\": \"file.npy\", ...})",
                 tc->nfeeds);
      return false;
    }
    if (!tc->data_path) {
      diag_error(d, source_loc(src, data), "training.data: missing 'path'");
      return false;
    }
    if (ntg && !tc->data_labels) {
      diag_error(d, source_loc(src, data),
                 "training.data: npy needs 'labels' (the labels .npy file)");
      return false;
    }
    for (int i = 0; i < tc->nfeeds; i++) {
      Feed *f = &tc->feeds[i];
      f->file_rel = f->target ? tc->data_labels[0] != '/' : tc->data_rel;
      f->file = f->target ? training_data_path(g->arena, dir, tc->data_labels) : tc->data_path;
    }
    return true;
  }
  if (!cJSON_IsObject(files) || sub(data, "path") || sub(data, "labels")) {
    diag_error(d, source_loc(src, files),
               cJSON_IsObject(files) ? "training.data.files: give either 'files' or 'path' and "
                                       "'labels', not both"
                                     : "training.data.files: expected an object {\"input\": "
                                       "\"file.npy\", ...}");
    return false;
  }
  for (const cJSON *c = files->child; c; c = c->next) {
    Feed *f = keyed_feed(src, tc, c, "files", d);
    if (!f) return false;
    if (!cJSON_IsString(c) || !c->valuestring[0]) {
      diag_error(d, source_loc(src, c), "training.data.files.%s: expected a file name", c->string);
      return false;
    }
    if (f->file) {
      diag_error(d, source_loc(src, c), "training.data.files: duplicate key '%s'", c->string);
      return false;
    }
    f->file_rel = c->valuestring[0] != '/';
    f->file = training_data_path(g->arena, dir, c->valuestring);
  }
  for (int i = 0; i < tc->nfeeds; i++)
    if (!tc->feeds[i].file) {
      diag_error(d, source_loc(src, files), "training.data.files: no file for input '%s'",
                 tc->feeds[i].t->name);
      return false;
    }
  return true;
}

bool training_data_bind(const Source *src, Graph *g, const cJSON *data, const char *dir,
                        TrainConfig *tc, Diag *d) {
  tc->feeds = ARENA_ARRAY(g->arena, Feed, MAX_FEEDS);
  tc->nfeeds = 0;
  const cJSON *in = sub(data, "input"), *tg = sub(data, "target");
  // The named ones first (so that the defaults leave them out), then data.input's before
  // data.target's.
  if ((in && !read_names(src, g, in, "input", false, tc, d)) ||
      (tg && !read_names(src, g, tg, "target", true, tc, d)))
    return false;
  int named_in = 0;
  for (int i = 0; i < tc->nfeeds; i++) named_in += !tc->feeds[i].target;
  Feed named[MAX_FEEDS];
  int nnamed = tc->nfeeds;
  memcpy(named, tc->feeds, sizeof(Feed) * (size_t)nnamed);
  tc->nfeeds = 0;
  for (int i = 0; i < named_in; i++) tc->feeds[tc->nfeeds++] = named[i];
  if (!in && !default_names(src, g, false, named, nnamed, tc, d)) return false;
  for (int i = named_in; i < nnamed; i++) tc->feeds[tc->nfeeds++] = named[i];
  if (!tg && !default_names(src, g, true, named, nnamed, tc, d)) return false;
  if (!all_inputs_filled(g, tc, d)) return false;
  bool tokens = tc->data == DATA_TEXT || tc->data == DATA_U16;
  const cJSON *cols = sub(data, "columns"), *files = sub(data, "files");
  if (tc->data != DATA_CSV && cols) {
    diag_error(d, source_loc(src, cols), "training.data.columns: only csv data has columns");
    return false;
  }
  if (tc->data != DATA_NPY && files) {
    diag_error(d, source_loc(src, files), "training.data.files: only npy data has files");
    return false;
  }
  if (tokens) return check_tokens(tc, d);
  if (tc->nfeeds == 0) {
    diag_error(d, source_loc(src, data), "training.data: the data fills no model input");
    return false;
  }
  for (int i = 0; i < tc->nfeeds; i++)
    if (!check_table_feed(g, &tc->feeds[i], d)) return false;
  if (tc->data == DATA_CSV) return read_columns(src, g, cols, tc, d);
  int64_t col = 0; // npy: each file's values follow the previous one's in a table row (widths
                   // up to 2^53 each: an int overflowed)
  for (int i = 0; i < tc->nfeeds; col += tc->feeds[i++].width) tc->feeds[i].col = col;
  return read_files(src, g, data, dir, tc, d);
}

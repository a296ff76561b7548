// expand pass: turns the parsed model document into an IR graph (expand.h lists its files).
//
// Order of work: top-level keys and version; dims (each an integer or an expression over other
// dims, resolved on demand with cycle detection, -D overrides first); inputs; params; blocks
// (kept as JSON until instantiated); nodes, where a repeat entry instantiates its block count
// times with "{i}" replaced by the instance index. Every defined name goes into one namespace.
// Only then are node inputs resolved (so a node may refer to one defined later in the file),
// followed by the loss, the outputs and a topological sort that keeps file order where it can
// and reports a cycle with its path. Every error names its JSON path and its line:col. This file
// holds that walk, the top-level keys, the loss and outputs, and the JSON path helpers.
#include <string.h>

#include "expand.h"

// "base.key"
const char *ex_pathk(X *x, const char *base, const char *key) {
  size_t nb = strlen(base), nk = strlen(key);
  char *p = arena_alloc(x->j.a, nb + nk + 2);
  memcpy(p, base, nb);
  p[nb] = '.';
  memcpy(p + nb + 1, key, nk + 1);
  return p;
}

const char *ex_path_idx(X *x, const char *base, int i) {
  return arena_printf(x->j.a, "%s[%d]", base, i);
}

static bool parse_header(X *x, const cJSON *root) {
  static const char *const keys[] = {"format",  "version",  "name",   "batch", "dims",
                                     "inputs",  "params",   "blocks", "nodes", "loss",
                                     "outputs", "training", "weights"};
  if (!json_check_keys(&x->j, root, "model", keys, 13)) return false;
  const cJSON *f, *v, *nm;
  const char *s;
  int64_t ver;
  if (!json_need(&x->j, root, "model", "format", &f) || !json_want_string(&x->j, f, "format", &s))
    return false;
  if (strcmp(s, "pipec-model") != 0) {
    diag_error(x->j.d, json_loc(&x->j, f), "format: expected \"pipec-model\", got \"%s\"",
               json_shown(x->j.a, s));
    return false;
  }
  if (!json_need(&x->j, root, "model", "version", &v) || !json_want_int(&x->j, v, "version", &ver))
    return false;
  if (ver != MODEL_FORMAT_VERSION) {
    diag_error(x->j.d, json_loc(&x->j, v),
               "version: this pipec reads model format version %d, the file has version %lld",
               MODEL_FORMAT_VERSION, (long long)ver);
    return false;
  }
  if (!json_need(&x->j, root, "model", "name", &nm) ||
      !json_want_string(&x->j, nm, "name", &x->g->name))
    return false;
  if (!*x->g->name) {
    diag_error(x->j.d, json_loc(&x->j, nm), "name: the model name must not be empty");
    return false;
  }
  const cJSON *b = json_get(root, "batch");
  if (b) {
    if (!json_want_string(&x->j, b, "batch", &x->g->batch_sym)) return false;
    if (!ex_is_ident(x->g->batch_sym)) {
      diag_error(x->j.d, json_loc(&x->j, b),
                 "batch: '%s' is not a valid dim name (letters, digits, '_')",
                 json_shown(x->j.a, x->g->batch_sym));
      return false;
    }
  }
  const cJSON *w = json_get(root, "weights");
  if (w) {
    if (!json_want_string(&x->j, w, "weights", &x->g->weights)) return false;
    x->g->weights_loc = json_loc(&x->j, w);
    if (!*x->g->weights) {
      diag_error(x->j.d, x->g->weights_loc,
                 "weights: the path is empty (a safetensors file or a sharded checkpoint's "
                 "directory, relative to the model file)");
      return false;
    }
  }
  const cJSON *tr = json_get(root, "training");
  if (tr && !cJSON_IsObject(tr)) {
    diag_error(x->j.d, json_loc(&x->j, tr), "training: expected an object, got %s", json_type(tr));
    return false;
  }
  return true;
}

static bool parse_loss_outputs(X *x, const cJSON *root) {
  const cJSON *l, *outs = json_get(root, "outputs");
  const char *s;
  if (!json_need(&x->j, root, "model", "loss", &l) || !json_want_string(&x->j, l, "loss", &s))
    return false;
  if (!(x->g->loss = ex_resolve(x, l, "loss", s, "tensor"))) return false;
  if (!outs) return true;
  if (!json_want_array(&x->j, outs, "outputs")) return false;
  x->g->outputs = ARENA_ARRAY(x->j.a, Tensor *, cJSON_GetArraySize(outs) + 1);
  int i = 0;
  for (const cJSON *e = outs->child; e; e = e->next, i++) {
    const char *p = ex_path_idx(x, "outputs", i);
    Tensor *t;
    if (!json_want_string(&x->j, e, p, &s) || !(t = ex_resolve(x, e, p, s, "tensor"))) return false;
    for (int j = 0; j < x->g->noutputs; j++)
      if (x->g->outputs[j] == t) {
        diag_error(x->j.d, json_loc(&x->j, e), "%s: '%s' is listed twice", p, s);
        return false;
      }
    x->g->outputs[x->g->noutputs++] = t;
  }
  return true;
}

bool pass_expand(const Source *src, Graph *g, const ExpandOptions *opt, Diag *d) {
  X x = {.j = {src, d, g->arena}, .g = g};
  strmap_init(&x.dims, g->arena);
  strmap_init(&x.blocks, g->arena);
  const cJSON *root = src->root;
  if (!cJSON_IsObject(root)) {
    diag_error(d, source_loc(src, root), "model: expected a JSON object at the top level, got %s",
               json_type(root));
    return false;
  }
  return parse_header(&x, root) && ex_parse_dims(&x, root, opt) && ex_parse_inputs(&x, root) &&
         ex_parse_params(&x, json_get(root, "params"), "params", -1) && ex_parse_blocks(&x, root) &&
         ex_parse_nodes(&x, root) && ex_resolve_inputs(&x) && parse_loss_outputs(&x, root) &&
         ex_toposort(g, d);
}

// expand_nodes.c: op nodes for the expand pass. A node entry names a registry op (internal
// backward ops cannot be written), gets its inputs counted against the op's arity, its
// attributes parsed against the op's schema (integers may be dim expressions), its stage hints,
// and its output tensors ("NAME", "NAME:k", hidden "NAME:what"). The nodes array is walked in
// file order (repeat entries go to expand_blocks.c); node inputs are resolved only after every
// node exists.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "expand.h"

// ---------------------------------------------------------------------------------------------
// Attributes against the op's schema

static bool parse_attr(X *x, const AttrDef *ad, const cJSON *it, const char *path, AttrValue *v) {
  char err[512];
  v->present = true;
  switch (ad->type) {
  case ATTR_BOOL: {
    bool b;
    if (!json_want_bool(&x->j, it, path, &b)) return false;
    v->i = b;
    return true;
  }
  case ATTR_ENUM: {
    if (!cJSON_IsString(it)) {
      diag_error(x->j.d, json_loc(&x->j, it), "%s: expected a string, got %s", path, json_type(it));
      return false;
    }
    char names[256] = "";
    size_t len = 0;
    for (int k = 0; ad->choices[k]; k++) {
      if (strcmp(it->valuestring, ad->choices[k]) == 0) {
        v->i = k;
        return true;
      }
      len += (size_t)snprintf(names + len, len < sizeof names ? sizeof names - len : 0, "%s'%s'",
                              k ? ", " : "", ad->choices[k]);
    }
    diag_error(x->j.d, json_loc(&x->j, it), "%s: unknown value '%.64s' (one of %s)", path,
               json_shown(x->j.a, it->valuestring), names);
    return false;
  }
  case ATTR_FLOAT:
    if (!cJSON_IsNumber(it)) {
      diag_error(x->j.d, json_loc(&x->j, it), "%s: expected a number, got %s", path, json_type(it));
      return false;
    }
    if (!isfinite(it->valuedouble)) {
      char num[64];
      diag_error(x->j.d, json_loc(&x->j, it), "%s: %s is too large (more than about 1.8e308)", path,
                 source_number_str(x->j.src, it, num, sizeof num));
      return false;
    }
    v->f = it->valuedouble;
    return true;
  case ATTR_INT:
    if (cJSON_IsString(it)) {
      Dim dd;
      if (!ex_eval_expr(x, it->valuestring, &dd, err, sizeof err)) {
        diag_error(x->j.d, json_loc(&x->j, it), "%s: %s", path, err);
        return false;
      }
      if (dd.b) {
        diag_error(x->j.d, json_loc(&x->j, it),
                   "%s: an integer attribute cannot use the batch symbol", path);
        return false;
      }
      v->i = dd.n;
      return true;
    }
    return json_want_int(&x->j, it, path, &v->i);
  case ATTR_INTS:
  case ATTR_SHAPE: {
    if (!json_want_array(&x->j, it, path)) return false;
    int n = cJSON_GetArraySize(it);
    if (n > 4096) {
      diag_error(x->j.d, json_loc(&x->j, it), "%s: list of %d entries is too long (at most 4096)",
                 path, n);
      return false;
    }
    v->count = n;
    v->ints = ARENA_ARRAY(x->j.a, int64_t, n + 1);
    v->dims = ARENA_ARRAY(x->j.a, Dim, n + 1);
    int i = 0;
    for (const cJSON *c = it->child; c; c = c->next, i++) {
      const char *p = ex_path_idx(x, path, i);
      if (ad->type == ATTR_SHAPE) {
        if (!ex_parse_dim(x, c, p, true, &v->dims[i])) return false;
      } else if (cJSON_IsString(c)) {
        Dim dd;
        if (!ex_eval_expr(x, c->valuestring, &dd, err, sizeof err)) {
          diag_error(x->j.d, json_loc(&x->j, c), "%s: %s", p, err);
          return false;
        }
        if (dd.b) {
          diag_error(x->j.d, json_loc(&x->j, c), "%s: an integer list cannot use the batch symbol",
                     p);
          return false;
        }
        v->ints[i] = dd.n;
      } else if (!json_want_int(&x->j, c, p, &v->ints[i])) {
        return false;
      }
    }
    return true;
  }
  }
  return false;
}

static bool parse_attrs(X *x, Node *n, const cJSON *obj, const char *path) {
  const OpDef *op = n->op;
  for (int i = 0; i < op->nattrs; i++) {
    n->attrs[i].i = op->attrs[i].def_i;
    n->attrs[i].f = op->attrs[i].def_f;
  }
  const cJSON *attrs = json_get(obj, "attrs");
  if (attrs && !cJSON_IsObject(attrs)) {
    diag_error(x->j.d, json_loc(&x->j, attrs), "%s.attrs: expected an object, got %s", path,
               json_type(attrs));
    return false;
  }
  for (const cJSON *c = attrs ? attrs->child : NULL; c; c = c->next) {
    int k = op_attr_index(op, c->string);
    if (k < 0) {
      const char *names[16];
      int nn = 0;
      char list[512] = "";
      for (int j = 0; j < op->nattrs && j < 16; j++) {
        names[nn++] = op->attrs[j].name;
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s'%s'", j ? ", " : "",
                 op->attrs[j].name);
      }
      if (op->nattrs == 0)
        node_error(x->j.d, n, "unknown attribute '%s': %s takes no attributes",
                   json_shown(x->j.a, c->string), op->name);
      else
        node_error(x->j.d, n, "unknown attribute '%s'%s: %s takes %s",
                   json_shown(x->j.a, c->string), json_suggest(x->j.a, c->string, names, nn),
                   op->name, list);
      return false;
    }
    for (const cJSON *e = attrs->child; e != c; e = e->next)
      if (strcmp(e->string, c->string) == 0) {
        diag_error(x->j.d, json_loc(&x->j, c), "%s.attrs: duplicate key '%s'", path, c->string);
        return false;
      }
    if (!parse_attr(x, &op->attrs[k], c, arena_printf(x->j.a, "%s.attrs.%s", path, c->string),
                    &n->attrs[k]))
      return false;
  }
  for (int i = 0; i < op->nattrs; i++)
    if (op->attrs[i].required && !n->attrs[i].present) {
      node_error(x->j.d, n, "missing required attribute '%s' of %s (%s)", op->attrs[i].name,
                 op->name, op->attrs[i].doc);
      return false;
    }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Nodes

void ex_add_spec(X *x, Spec s) {
  if (x->nspecs == x->cap) {
    int cap = x->cap ? x->cap * 2 : 256;
    Spec *ns = ARENA_ARRAY(x->j.a, Spec, cap);
    if (x->nspecs) memcpy(ns, x->specs, sizeof(Spec) * (size_t)x->nspecs);
    x->specs = ns;
    x->cap = cap;
  }
  x->specs[x->nspecs++] = s;
}

static bool parse_stage_hints(X *x, const cJSON *obj, const char *path, Node *n) {
  const cJSON *st = json_get(obj, "stage"), *sb = json_get(obj, "split_before");
  if (st) {
    int64_t v;
    if (!json_want_int(&x->j, st, ex_pathk(x, path, "stage"), &v)) return false;
    if (v < 0 || v > 65535) {
      diag_error(x->j.d, json_loc(&x->j, st), "%s.stage: must be from 0 to 65535, got %lld", path,
                 (long long)v);
      return false;
    }
    n->stage = (int)v;
  }
  if (sb && !json_want_bool(&x->j, sb, ex_pathk(x, path, "split_before"), &n->split_before))
    return false;
  return true;
}

// Creates the node for an op entry (inputs are resolved later). inst >= 0 inside a block.
Node *ex_make_node(X *x, const cJSON *c, const char *path, const BlockDef *blk, int inst) {
  static const char *const keys[] = {"name", "op", "inputs", "attrs", "stage", "split_before"};
  const cJSON *nm, *opj, *ins;
  const char *name, *opname;
  if (!json_check_keys(&x->j, c, path, keys, 6) || !json_need(&x->j, c, path, "name", &nm) ||
      !json_want_string(&x->j, nm, ex_pathk(x, path, "name"), &name) ||
      !ex_check_name(x, nm, path, name, blk != NULL))
    return NULL;
  if (blk) {
    if (!strstr(name, "{i}")) {
      diag_error(x->j.d, json_loc(&x->j, nm),
                 "%s: block node '%s' must contain {i} so each instance has its own", path, name);
      return NULL;
    }
    if (!(name = ex_subst(x, nm, path, name, inst))) return NULL;
    path = arena_printf(x->j.a, "%s (instance %d)", path, inst);
  }
  if (!ex_name_free(x, nm, path, name) || !json_need(&x->j, c, path, "op", &opj) ||
      !json_want_string(&x->j, opj, ex_pathk(x, path, "op"), &opname) ||
      !json_need(&x->j, c, path, "inputs", &ins) ||
      !json_want_array(&x->j, ins, ex_pathk(x, path, "inputs")))
    return NULL;
  const OpDef *op = op_find(opname);
  if (op && op->internal) op = NULL; // backward ops are made by the compiler, not written
  if (!op) {
    const char *names[64];
    int nn = 0;
    for (int i = 0; i < op_count() && nn < 64; i++)
      if (!op_at(i)->internal) names[nn++] = op_at(i)->name;
    diag_error(x->j.d, json_loc(&x->j, opj), "%s \"%s\": unknown op '%s'%s", path, name,
               json_shown(x->j.a, opname), json_suggest(x->j.a, opname, names, nn));
    return NULL;
  }
  int nin = cJSON_GetArraySize(ins);
  Node tmp = {.name = name, .path = path, .loc = json_loc(&x->j, c), .op = op};
  if (nin < op->min_in || (op->max_in >= 0 && nin > op->max_in)) {
    if (op->max_in < 0)
      node_error(x->j.d, &tmp, "%s takes at least %d input%s, got %d", op->name, op->min_in,
                 op->min_in == 1 ? "" : "s", nin);
    else if (op->min_in == op->max_in)
      node_error(x->j.d, &tmp, "%s takes %d input%s, got %d", op->name, op->min_in,
                 op->min_in == 1 ? "" : "s", nin);
    else
      node_error(x->j.d, &tmp, "%s takes %d to %d inputs, got %d", op->name, op->min_in, op->max_in,
                 nin);
    return NULL;
  }
  // Output count may depend on attributes (split): parse them on a scratch node first.
  Node *n = graph_add_node(x->g, name, op, nin, op->nout ? op->nout + op->nhidden : 1);
  n->loc = tmp.loc;
  n->path = path;
  n->instance = inst;
  n->block = blk ? blk->name : NULL;
  if (!parse_attrs(x, n, c, path) || !parse_stage_hints(x, c, path, n)) return NULL;
  int visible = op->nout;
  if (!op->nout) {
    visible = op->count_outputs(n);
    if (visible < 1 || visible > 4096) {
      node_error(x->j.d, n, "%s needs 1 to 4096 outputs, the attributes give %d", op->name,
                 visible);
      return NULL;
    }
    n->nout = visible + op->nhidden;
    n->out = ARENA_ARRAY(x->j.a, Tensor *, n->nout);
  }
  for (int k = 0; k < n->nout; k++) {
    const char *tn = k >= visible    ? arena_printf(x->j.a, "%s:%s", name, op->hidden[k - visible])
                     : op->nout == 1 ? name
                                     : arena_printf(x->j.a, "%s:%d", name, k);
    Tensor *t = graph_add_tensor(x->g, tn, T_ACT);
    t->producer = n;
    t->out_index = k;
    t->loc = n->loc;
    t->path = path;
    t->hidden = k >= visible;
  }
  for (int k = 0; k < n->nout; k++) n->out[k] = x->g->tensors[x->g->ntensors - n->nout + k];
  return n;
}

bool ex_parse_nodes(X *x, const cJSON *root) {
  const cJSON *arr;
  if (!json_need(&x->j, root, "model", "nodes", &arr) || !json_want_array(&x->j, arr, "nodes"))
    return false;
  int i = 0;
  for (const cJSON *c = arr->child; c; c = c->next, i++) {
    const char *path = ex_path_idx(x, "nodes", i);
    if (!cJSON_IsObject(c)) {
      diag_error(x->j.d, json_loc(&x->j, c), "%s: expected an object, got %s", path, json_type(c));
      return false;
    }
    if (json_get(c, "repeat")) {
      if (!ex_repeat(x, c, path)) return false;
      continue;
    }
    Node *n = ex_make_node(x, c, path, NULL, -1);
    if (!n) return false;
    ex_add_spec(x, (Spec){c, n, NULL, -1, NULL});
  }
  return true;
}

bool ex_resolve_inputs(X *x) {
  for (int s = 0; s < x->nspecs; s++) {
    Spec *sp = &x->specs[s];
    Node *n = sp->node;
    const cJSON *ins = json_get(sp->obj, "inputs");
    int k = 0;
    for (const cJSON *e = ins->child; e; e = e->next, k++) {
      const char *p = arena_printf(x->j.a, "%s.inputs[%d]", n->path, k), *ref;
      if (!json_want_string(&x->j, e, p, &ref)) return false;
      if (sp->blk && !(ref = ex_block_ref(x, sp, e, p, ref))) return false;
      Tensor *t =
          ex_resolve(x, e, arena_printf(x->j.a, "%s \"%s\"", n->path, n->name), ref, "input");
      if (!t) return false;
      n->in[k] = t;
    }
  }
  return true;
}

// expand pass: turns the parsed model document into an IR graph.
//
// Order of work: top-level keys and version; dims (each an integer or an expression over other
// dims, resolved on demand with cycle detection, -D overrides first); inputs; params; blocks
// (kept as JSON until instantiated); nodes, where a repeat entry instantiates its block count
// times with "{i}" replaced by the instance index. Every defined name goes into one namespace.
// Only then are node inputs resolved (so a node may refer to one defined later in the file),
// followed by the loss, the outputs and a topological sort that keeps file order where it can
// and reports a cycle with its path. Every error names its JSON path and its line:col.
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../ir/ops.h"
#include "dimexpr.h"
#include "json.h"
#include "passes.h"

enum { MAX_NAME = 1024, MAX_REPEAT = 100000, MAX_DIM_DEPTH = 100 };

typedef struct DimSlot {
  const char *name;     // dim symbol
  const cJSON *item;    // its value in the file (NULL for -D only)
  const char *override; // -D value, or NULL
  int state;            // 0 = not resolved, 1 = resolving, 2 = done
  Dim value;            // resolved value
  Loc loc;              // where defined
} DimSlot;

typedef struct BlockDef {
  const char *name;     // block name
  const cJSON *obj;     // its JSON object
  const char *path;     // "blocks[k]"
  const cJSON *inputs;  // formal input names
  const cJSON *outputs; // output names (with {i})
  const cJSON *params;  // params array or NULL
  const cJSON *nodes;   // nodes array
  int nin;              // number of formal inputs
} BlockDef;

typedef struct Spec {
  const cJSON *obj;     // the node's JSON object
  Node *node;           // the node created for it
  const BlockDef *blk;  // block, or NULL at top level
  int inst;             // instance index inside the block
  const char **actuals; // block only: global name bound to each formal input
} Spec;

typedef struct X {
  JsonIn j;            // the document, diagnostics and the graph's arena (json.h)
  Graph *g;            // graph being built
  StrMap dims;         // name -> DimSlot*
  StrMap blocks;       // name -> BlockDef*
  Spec *specs;         // node instantiations in file order
  int nspecs, cap;     // count and capacity
  int ndim_slots;      // dims created (for ordering)
  DimSlot **dim_order; // dims in file order
  int dim_depth; // dims being resolved, one inside another's expression (bounds the recursion)
} X;

// "base.key"
static const char *pathk(X *x, const char *base, const char *key) {
  size_t nb = strlen(base), nk = strlen(key);
  char *p = arena_alloc(x->j.a, nb + nk + 2);
  memcpy(p, base, nb);
  p[nb] = '.';
  memcpy(p + nb + 1, key, nk + 1);
  return p;
}

static const char *path_idx(X *x, const char *base, int i) {
  return arena_printf(x->j.a, "%s[%d]", base, i);
}

// ---------------------------------------------------------------------------------------------
// Names

// A name as defined in the file: printable, no ':' and (outside blocks) no braces.
static bool check_name(X *x, const cJSON *it, const char *path, const char *name, bool in_block) {
  size_t n = strlen(name);
  if (n == 0 || n > MAX_NAME) {
    diag_error(x->j.d, json_loc(&x->j, it), "%s: a name must have 1 to %d characters", path,
               MAX_NAME);
    return false;
  }
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    if (*p < 0x20 || *p == 0x7f) {
      diag_error(x->j.d, json_loc(&x->j, it), "%s: name contains a control character", path);
      return false;
    }
    if (*p == ':') {
      diag_error(x->j.d, json_loc(&x->j, it),
                 "%s: name '%s' contains ':', which is reserved for output indices", path, name);
      return false;
    }
    if (!in_block && (*p == '{' || *p == '}')) {
      diag_error(x->j.d, json_loc(&x->j, it),
                 "%s: name '%s' contains '%c', which is reserved for blocks ({i})", path, name, *p);
      return false;
    }
  }
  return true;
}

// Replaces "{i}" by inst; any other use of braces is an error.
static const char *subst(X *x, const cJSON *it, const char *path, const char *name, int inst) {
  char buf[MAX_NAME * 2 + 64];
  size_t o = 0;
  for (const char *p = name; *p;) {
    if (p[0] == '{' && p[1] == 'i' && p[2] == '}') {
      o += (size_t)snprintf(buf + o, sizeof buf - o, "%d", inst);
      p += 3;
    } else if (*p == '{' || *p == '}') {
      diag_error(x->j.d, json_loc(&x->j, it),
                 "%s: '%s' has a '%c' that is not part of '{i}' (the only substitution)", path,
                 name, *p);
      return NULL;
    } else {
      if (o + 1 >= sizeof buf) break;
      buf[o++] = *p++;
    }
    if (o >= sizeof buf - 32) {
      diag_error(x->j.d, json_loc(&x->j, it), "%s: name too long", path);
      return NULL;
    }
  }
  buf[o] = 0;
  return arena_strndup(x->j.a, buf, o);
}

static Loc def_loc(X *x, const char *name) {
  Tensor *t = graph_find(x->g, name);
  if (t) return t->loc;
  Node *n = strmap_get(&x->g->node_names, name);
  return n ? n->loc : (Loc){0, 0};
}

// Reserves name in the model namespace; reports a duplicate with the first definition's place.
static bool name_free(X *x, const cJSON *it, const char *path, const char *name) {
  if (!graph_find(x->g, name) && !strmap_get(&x->g->node_names, name)) return true;
  Loc first = def_loc(x, name);
  if (first.line)
    diag_error(x->j.d, json_loc(&x->j, it),
               "%s: duplicate name '%s' (first defined at line %d, column %d)", path, name,
               first.line, first.col);
  else
    diag_error(x->j.d, json_loc(&x->j, it), "%s: duplicate name '%s'", path, name);
  return false;
}

// ---------------------------------------------------------------------------------------------
// dims

static bool resolve_dim(X *x, DimSlot *s);

static int lookup_dim(void *ctx, const char *name, Dim *out, char *err, int errcap) {
  X *x = ctx;
  if (strcmp(name, x->g->batch_sym) == 0) {
    *out = (Dim){1, 1};
    return 1;
  }
  DimSlot *s = strmap_get(&x->dims, name);
  if (!s) return 0;
  if (!resolve_dim(x, s)) { // reported at the dim itself; this text is only a fallback
    snprintf(err, (size_t)errcap, "dim '%s' is invalid", name);
    return -1;
  }
  *out = s->value;
  return 1;
}

static bool eval_expr(X *x, const char *expr, Dim *out, char *err, int errcap) {
  return dimexpr_eval(expr, lookup_dim, x, out, err, errcap);
}

// Reports an error in dim s at s ("dims.NAME: ..."; a -D value has no position); returns false.
__attribute__((format(printf, 3, 4))) static bool dim_error(X *x, DimSlot *s, const char *fmt,
                                                            ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(x->j.d, s->override ? (Loc){0, 0} : s->loc, "dims.%s: %s", s->name, msg);
  return false;
}

static bool resolve_dim_value(X *x, DimSlot *s);

// Resolves s, and through its expression the dims it uses. Each dim reports the errors of its own
// value, at itself, also when it is resolved on behalf of another dim; a cycle is reported at the
// dim that closes it.
static bool resolve_dim(X *x, DimSlot *s) {
  if (s->state == 2) return true;
  if (s->state == 1)
    return dim_error(x, s, "dims refer to each other in a cycle through '%s'", s->name);
  if (x->dim_depth == MAX_DIM_DEPTH) // each level recurses through the expression evaluator
    return dim_error(x, s, "dims refer to each other more than %d deep", MAX_DIM_DEPTH);
  s->state = 1;
  x->dim_depth++;
  bool ok = resolve_dim_value(x, s);
  x->dim_depth--;
  return ok;
}

// resolve_dim for a dim not yet resolved (state 1 while it runs, 2 once it succeeded).
static bool resolve_dim_value(X *x, DimSlot *s) {
  char err[512];
  int before = x->j.d->errors;
  Dim v;
  const char *expr = s->override               ? s->override
                     : cJSON_IsString(s->item) ? s->item->valuestring
                                               : NULL;
  if (expr) {
    // An error of a dim it uses has been reported at that dim already.
    if (!eval_expr(x, expr, &v, err, sizeof err))
      return x->j.d->errors > before ? false : dim_error(x, s, "%s", err);
  } else if (cJSON_IsNumber(s->item)) {
    int64_t n;
    if (!source_int(x->j.src, s->item, &n) || n < 1) {
      char num[64];
      return dim_error(x, s, "dim '%s' must be an integer from 1 to 2^53, got %s", s->name,
                       source_number_str(x->j.src, s->item, num, sizeof num));
    }
    v = (Dim){n, 0};
  } else {
    return dim_error(x, s, "dim '%s' must be an integer or an expression string, got %s", s->name,
                     json_type(s->item));
  }
  if (v.b)
    return dim_error(x, s, "dim '%s' may not depend on the batch symbol '%s'", s->name,
                     x->g->batch_sym);
  if (v.n < 1) return dim_error(x, s, "dim '%s' must be >= 1, got %lld", s->name, (long long)v.n);
  s->value = v;
  s->state = 2;
  return true;
}

static bool is_ident(const char *s) {
  if (!isalpha((unsigned char)*s) && *s != '_') return false;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && *s != '_') return false;
  return true;
}

static bool parse_dims(X *x, const cJSON *root, const ExpandOptions *opt) {
  const cJSON *dims = json_get(root, "dims");
  int n = dims ? cJSON_GetArraySize(dims) : 0;
  if (dims && !cJSON_IsObject(dims)) {
    diag_error(x->j.d, json_loc(&x->j, dims), "dims: expected an object, got %s", json_type(dims));
    return false;
  }
  x->dim_order = ARENA_ARRAY(x->j.a, DimSlot *, n + 1);
  for (const cJSON *c = dims ? dims->child : NULL; c; c = c->next) {
    if (!is_ident(c->string)) {
      diag_error(x->j.d, json_loc(&x->j, c),
                 "dims: '%s' is not a valid dim name (letters, digits, '_')", c->string);
      return false;
    }
    if (strcmp(c->string, x->g->batch_sym) == 0) {
      diag_error(x->j.d, json_loc(&x->j, c),
                 "dims: '%s' is the batch symbol; it is bound by the training configuration",
                 c->string);
      return false;
    }
    DimSlot *s = ARENA_NEW(x->j.a, DimSlot);
    s->name = c->string;
    s->item = c;
    s->loc = json_loc(&x->j, c);
    if (strmap_put(&x->dims, s->name, s)) {
      diag_error(x->j.d, json_loc(&x->j, c), "dims: duplicate key '%s'", c->string);
      return false;
    }
    x->dim_order[x->ndim_slots++] = s;
  }
  for (int i = 0; i < opt->ndefines; i++) {
    const char *def = opt->defines[i];
    const char *eq = strchr(def, '=');
    char *name = arena_strndup(x->j.a, def, eq ? (size_t)(eq - def) : strlen(def));
    DimSlot *s = strmap_get(&x->dims, name);
    if (!eq || !*name || !eq[1]) {
      diag_error(x->j.d, (Loc){0, 0}, "-D %s: expected NAME=VALUE", def);
      return false;
    }
    if (!s) {
      diag_error(x->j.d, (Loc){0, 0}, "-D %s: the model has no dim '%s'", def, name);
      return false;
    }
    s->override = eq + 1;
  }
  for (int i = 0; i < x->ndim_slots; i++)
    if (!resolve_dim(x, x->dim_order[i])) return false; // reports its own errors
  x->g->ndims = x->ndim_slots;
  x->g->dims = ARENA_ARRAY(x->j.a, DimDef, x->ndim_slots + 1);
  for (int i = 0; i < x->ndim_slots; i++)
    x->g->dims[i] = (DimDef){x->dim_order[i]->name, x->dim_order[i]->value, x->dim_order[i]->loc};
  return true;
}

// One dimension from a JSON integer or expression string. allow_infer accepts -1.
static bool parse_dim(X *x, const cJSON *it, const char *path, bool allow_infer, Dim *out) {
  if (cJSON_IsString(it)) {
    char err[512];
    if (!eval_expr(x, it->valuestring, out, err, sizeof err)) {
      diag_error(x->j.d, json_loc(&x->j, it), "%s: %s", path, err);
      return false;
    }
  } else {
    int64_t v;
    if (!cJSON_IsNumber(it)) {
      diag_error(x->j.d, json_loc(&x->j, it),
                 "%s: expected a dimension (integer or dim name), got %s", path, json_type(it));
      return false;
    }
    if (!json_want_int(&x->j, it, path, &v)) return false;
    *out = (Dim){v, 0};
    if (allow_infer && v == -1) return true;
  }
  if (out->n < 1) {
    diag_error(x->j.d, json_loc(&x->j, it), "%s: dimension must be >= 1, got %lld", path,
               (long long)out->n);
    return false;
  }
  return true;
}

static bool parse_shape(X *x, const cJSON *arr, const char *path, bool allow_batch, Shape *s) {
  if (!json_want_array(&x->j, arr, path)) return false;
  int n = cJSON_GetArraySize(arr);
  if (n > MAX_RANK) {
    diag_error(x->j.d, json_loc(&x->j, arr), "%s: rank %d is more than the %d dims pipec supports",
               path, n, MAX_RANK);
    return false;
  }
  s->rank = 0;
  int i = 0;
  for (const cJSON *c = arr->child; c; c = c->next, i++) {
    const char *p = path_idx(x, path, i);
    if (!parse_dim(x, c, p, false, &s->d[s->rank])) return false;
    if (s->d[s->rank].b && !allow_batch) {
      diag_error(x->j.d, json_loc(&x->j, c),
                 "%s: a parameter's shape cannot use the batch symbol '%s'", p, x->g->batch_sym);
      return false;
    }
    s->rank++;
  }
  if (shape_numel(s, 1) < 0) {
    diag_error(x->j.d, json_loc(&x->j, arr), "%s: shape %s has more than 2^53 elements", path,
               fmt_shape(x->g, s));
    return false;
  }
  return true;
}

static bool parse_dtype(X *x, const cJSON *obj, const char *path, DType *out) {
  const cJSON *it = json_get(obj, "dtype");
  *out = DT_F32;
  if (!it) return true;
  const char *s;
  if (!json_want_string(&x->j, it, pathk(x, path, "dtype"), &s)) return false;
  if (!dtype_parse(s, out)) {
    diag_error(x->j.d, json_loc(&x->j, it),
               "%s.dtype: unknown dtype '%s' (expected f32, bf16, f16 or i32)", path, s);
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// inputs and params

static bool parse_inputs(X *x, const cJSON *root) {
  const cJSON *arr;
  if (!json_need(&x->j, root, "model", "inputs", &arr) || !json_want_array(&x->j, arr, "inputs"))
    return false;
  if (cJSON_GetArraySize(arr) == 0) {
    diag_error(x->j.d, json_loc(&x->j, arr), "inputs: a model needs at least one input");
    return false;
  }
  static const char *const keys[] = {"name", "dtype", "shape", "target"};
  int i = 0;
  for (const cJSON *c = arr->child; c; c = c->next, i++) {
    const char *path = path_idx(x, "inputs", i);
    const cJSON *nm, *sh;
    const char *name;
    if (!json_check_keys(&x->j, c, path, keys, 4) || !json_need(&x->j, c, path, "name", &nm) ||
        !json_want_string(&x->j, nm, pathk(x, path, "name"), &name) ||
        !check_name(x, nm, path, name, false) || !name_free(x, c, path, name) ||
        !json_need(&x->j, c, path, "shape", &sh))
      return false;
    Tensor *t = graph_add_tensor(x->g, name, T_INPUT);
    t->loc = json_loc(&x->j, c);
    t->path = path;
    const char *spath = pathk(x, path, "shape");
    if (!parse_dtype(x, c, path, &t->dtype) || !parse_shape(x, sh, spath, true, &t->shape))
      return false;
    if (t->shape.rank == 0 || !(t->shape.d[0].b && t->shape.d[0].n == 1)) {
      diag_error(x->j.d, json_loc(&x->j, sh),
                 "%s: the first dim of an input must be the batch symbol '%s'", spath,
                 x->g->batch_sym);
      return false;
    }
    for (int k = 1; k < t->shape.rank; k++)
      if (t->shape.d[k].b) {
        diag_error(x->j.d, json_loc(&x->j, sh),
                   "%s: the batch symbol '%s' may appear only as the first dim", spath,
                   x->g->batch_sym);
        return false;
      }
    const cJSON *tg = json_get(c, "target");
    if (tg && !json_want_bool(&x->j, tg, pathk(x, path, "target"), &t->is_target)) return false;
  }
  return true;
}

static bool want_number(X *x, const cJSON *obj, const char *path, const char *key, bool required,
                        double def, double *out) {
  const cJSON *it = json_get(obj, key);
  *out = def;
  if (!it) {
    if (!required) return true;
    diag_error(x->j.d, json_loc(&x->j, obj), "%s: missing required key '%s'", path, key);
    return false;
  }
  if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble)) {
    diag_error(x->j.d, json_loc(&x->j, it), "%s.%s: expected a number, got %s", path, key,
               json_type(it));
    return false;
  }
  *out = it->valuedouble;
  return true;
}

static bool parse_init(X *x, const cJSON *it, const char *path, Tensor *t) {
  static const char *const kinds[] = {"zeros", "ones", "normal", "uniform", "xavier"};
  const char *kind;
  const cJSON *kit = it;
  if (cJSON_IsString(it)) {
    kind = it->valuestring;
  } else if (cJSON_IsObject(it)) {
    static const char *const keys[] = {"kind", "std", "mean", "a", "b", "gain"};
    if (!json_check_keys(&x->j, it, path, keys, 6) || !json_need(&x->j, it, path, "kind", &kit) ||
        !json_want_string(&x->j, kit, pathk(x, path, "kind"), &kind))
      return false;
  } else {
    diag_error(x->j.d, json_loc(&x->j, it), "%s: expected an init name or object, got %s", path,
               json_type(it));
    return false;
  }
  int k = -1;
  for (int i = 0; i < 5; i++)
    if (strcmp(kind, kinds[i]) == 0) k = i;
  if (k < 0) {
    const char *hint = json_suggest(x->j.a, kind, kinds, 5);
    diag_error(x->j.d, json_loc(&x->j, kit), "%s: unknown init '%s'%s", path, kind,
               *hint ? hint : " (expected zeros, ones, normal, uniform or xavier)");
    return false;
  }
  t->init.kind = (InitKind)k;
  if (cJSON_IsString(it) && (k == INIT_NORMAL || k == INIT_UNIFORM)) {
    diag_error(x->j.d, json_loc(&x->j, it), "%s: init '%s' needs parameters: %s", path, kind,
               k == INIT_NORMAL ? "{\"kind\": \"normal\", \"std\": S}"
                                : "{\"kind\": \"uniform\", \"a\": A, \"b\": B}");
    return false;
  }
  // Keys that do not belong to the kind are errors too.
  static const char *const own[5][3] = {{0}, {0}, {"std", "mean"}, {"a", "b"}, {"gain"}};
  if (cJSON_IsObject(it))
    for (const cJSON *c = it->child; c; c = c->next) {
      bool ok = strcmp(c->string, "kind") == 0;
      for (int j = 0; j < 3 && own[k][j]; j++) ok |= strcmp(c->string, own[k][j]) == 0;
      if (!ok) {
        diag_error(x->j.d, json_loc(&x->j, c), "%s: init '%s' takes no key '%s'", path, kind,
                   c->string);
        return false;
      }
    }
  switch (t->init.kind) {
  case INIT_ZEROS:
  case INIT_ONES:
    break;
  case INIT_NORMAL:
    if (!want_number(x, it, path, "mean", false, 0, &t->init.a) ||
        !want_number(x, it, path, "std", true, 0, &t->init.b))
      return false;
    if (!(t->init.b > 0)) {
      diag_error(x->j.d, json_loc(&x->j, json_get(it, "std")), "%s.std: must be > 0, got %g", path,
                 t->init.b);
      return false;
    }
    break;
  case INIT_UNIFORM:
    if (!want_number(x, it, path, "a", true, 0, &t->init.a) ||
        !want_number(x, it, path, "b", true, 0, &t->init.b))
      return false;
    if (!(t->init.a < t->init.b)) {
      diag_error(x->j.d, json_loc(&x->j, it), "%s: uniform needs a < b, got a = %g, b = %g", path,
                 t->init.a, t->init.b);
      return false;
    }
    break;
  case INIT_XAVIER:
    if (cJSON_IsObject(it) && !want_number(x, it, path, "gain", false, 1, &t->init.a)) return false;
    if (cJSON_IsString(it)) t->init.a = 1;
    if (!(t->init.a > 0)) {
      diag_error(x->j.d, json_loc(&x->j, it), "%s.gain: must be > 0, got %g", path, t->init.a);
      return false;
    }
    if (t->shape.rank < 2) {
      diag_error(x->j.d, json_loc(&x->j, it),
                 "%s: xavier needs a parameter of rank >= 2, '%s' has shape %s", path, t->name,
                 fmt_shape(x->g, &t->shape));
      return false;
    }
    break;
  }
  return true;
}

// One param object; name is already substituted (blocks) and checked.
static bool parse_param(X *x, const cJSON *c, const char *path, const char *name, const cJSON *nm,
                        int inst) {
  static const char *const keys[] = {"name", "shape", "dtype", "init", "tied_to"};
  const cJSON *sh;
  if (!json_check_keys(&x->j, c, path, keys, 5) || !name_free(x, nm, path, name) ||
      !json_need(&x->j, c, path, "shape", &sh))
    return false;
  // Parameters are saved by name in safetensors files, whose header reserves this key (the
  // optimizer state's names "m.NAME", "v.NAME" cannot be it).
  if (strcmp(name, "__metadata__") == 0) {
    diag_error(x->j.d, json_loc(&x->j, nm),
               "%s: parameter name '__metadata__' is reserved by safetensors (the file's "
               "metadata); rename the parameter",
               path);
    return false;
  }
  Tensor *t = graph_add_tensor(x->g, name, T_PARAM);
  t->loc = json_loc(&x->j, c);
  t->path = path;
  if (!parse_dtype(x, c, path, &t->dtype) ||
      !parse_shape(x, sh, pathk(x, path, "shape"), false, &t->shape))
    return false;
  if (!dtype_is_float(t->dtype)) {
    diag_error(x->j.d, json_loc(&x->j, c),
               "%s: parameter '%s' has dtype %s; parameters must be floating point", path, name,
               dtype_name(t->dtype));
    return false;
  }
  const cJSON *tied = json_get(c, "tied_to"), *init = json_get(c, "init");
  if (tied) {
    const char *owner;
    if (!json_want_string(&x->j, tied, pathk(x, path, "tied_to"), &owner)) return false;
    if (inst >= 0 && !(owner = subst(x, tied, path, owner, inst))) return false;
    if (init) {
      diag_error(x->j.d, json_loc(&x->j, init),
                 "%s: a tied parameter has no init of its own (it shares '%s')", path, owner);
      return false;
    }
    Tensor *o = graph_find(x->g, owner);
    if (o == t) {
      diag_error(x->j.d, json_loc(&x->j, tied),
                 "%s.tied_to: '%s' is this parameter itself; tie it to an earlier parameter", path,
                 owner);
      return false;
    }
    if (!o || o->kind != T_PARAM) {
      diag_error(x->j.d, json_loc(&x->j, tied),
                 "%s.tied_to: '%s' is not a parameter defined before '%s'", path, owner, name);
      return false;
    }
    if (o->tied_to) {
      diag_error(x->j.d, json_loc(&x->j, tied),
                 "%s.tied_to: '%s' is itself tied to '%s'; tie to the owner", path, owner,
                 o->tied_to->name);
      return false;
    }
    if (!shape_eq(&o->shape, &t->shape) || o->dtype != t->dtype) {
      diag_error(x->j.d, json_loc(&x->j, tied), "%s.tied_to: '%s' is %s%s but '%s' is %s%s", path,
                 owner, dtype_name(o->dtype), fmt_shape(x->g, &o->shape), name,
                 dtype_name(t->dtype), fmt_shape(x->g, &t->shape));
      return false;
    }
    t->tied_to = o;
    t->init = o->init;
    return true;
  }
  t->init.kind = INIT_ZEROS;
  return !init || parse_init(x, init, pathk(x, path, "init"), t);
}

static bool parse_params(X *x, const cJSON *arr, const char *base, int inst) {
  if (!arr) return true;
  if (!json_want_array(&x->j, arr, base)) return false;
  int i = 0;
  for (const cJSON *c = arr->child; c; c = c->next, i++) {
    const char *path = path_idx(x, base, i);
    const cJSON *nm;
    const char *name;
    if (!cJSON_IsObject(c)) {
      diag_error(x->j.d, json_loc(&x->j, c), "%s: expected an object, got %s", path, json_type(c));
      return false;
    }
    if (!json_need(&x->j, c, path, "name", &nm) ||
        !json_want_string(&x->j, nm, pathk(x, path, "name"), &name) ||
        !check_name(x, nm, path, name, inst >= 0))
      return false;
    if (inst >= 0) {
      if (!strstr(name, "{i}")) {
        diag_error(x->j.d, json_loc(&x->j, nm),
                   "%s: block parameter '%s' must contain {i} so each instance has its own", path,
                   name);
        return false;
      }
      if (!(name = subst(x, nm, path, name, inst))) return false;
      path = arena_printf(x->j.a, "%s (instance %d)", path, inst);
    }
    if (!parse_param(x, c, path, name, nm, inst)) return false;
  }
  return true;
}

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
      if (!eval_expr(x, it->valuestring, &dd, err, sizeof err)) {
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
      const char *p = path_idx(x, path, i);
      if (ad->type == ATTR_SHAPE) {
        if (!parse_dim(x, c, p, true, &v->dims[i])) return false;
      } else if (cJSON_IsString(c)) {
        Dim dd;
        if (!eval_expr(x, c->valuestring, &dd, err, sizeof err)) {
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
        node_error(x->j.d, n, "unknown attribute '%s': %s takes no attributes", c->string,
                   op->name);
      else
        node_error(x->j.d, n, "unknown attribute '%s'%s: %s takes %s", c->string,
                   json_suggest(x->j.a, c->string, names, nn), op->name, list);
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

static void add_spec(X *x, Spec s) {
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
    if (!json_want_int(&x->j, st, pathk(x, path, "stage"), &v)) return false;
    if (v < 0 || v > 65535) {
      diag_error(x->j.d, json_loc(&x->j, st), "%s.stage: must be from 0 to 65535, got %lld", path,
                 (long long)v);
      return false;
    }
    n->stage = (int)v;
  }
  if (sb && !json_want_bool(&x->j, sb, pathk(x, path, "split_before"), &n->split_before))
    return false;
  return true;
}

// Creates the node for an op entry (inputs are resolved later). inst >= 0 inside a block.
static Node *make_node(X *x, const cJSON *c, const char *path, const BlockDef *blk, int inst) {
  static const char *const keys[] = {"name", "op", "inputs", "attrs", "stage", "split_before"};
  const cJSON *nm, *opj, *ins;
  const char *name, *opname;
  if (!json_check_keys(&x->j, c, path, keys, 6) || !json_need(&x->j, c, path, "name", &nm) ||
      !json_want_string(&x->j, nm, pathk(x, path, "name"), &name) ||
      !check_name(x, nm, path, name, blk != NULL))
    return NULL;
  if (blk) {
    if (!strstr(name, "{i}")) {
      diag_error(x->j.d, json_loc(&x->j, nm),
                 "%s: block node '%s' must contain {i} so each instance has its own", path, name);
      return NULL;
    }
    if (!(name = subst(x, nm, path, name, inst))) return NULL;
    path = arena_printf(x->j.a, "%s (instance %d)", path, inst);
  }
  if (!name_free(x, nm, path, name) || !json_need(&x->j, c, path, "op", &opj) ||
      !json_want_string(&x->j, opj, pathk(x, path, "op"), &opname) ||
      !json_need(&x->j, c, path, "inputs", &ins) ||
      !json_want_array(&x->j, ins, pathk(x, path, "inputs")))
    return NULL;
  const OpDef *op = op_find(opname);
  if (op && op->internal) op = NULL; // backward ops are made by the compiler, not written
  if (!op) {
    const char *names[64];
    int nn = 0;
    for (int i = 0; i < op_count() && nn < 64; i++)
      if (!op_at(i)->internal) names[nn++] = op_at(i)->name;
    diag_error(x->j.d, json_loc(&x->j, opj), "%s \"%s\": unknown op '%s'%s", path, name, opname,
               json_suggest(x->j.a, opname, names, nn));
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

static bool parse_blocks(X *x, const cJSON *root) {
  const cJSON *arr = json_get(root, "blocks");
  if (!arr) return true;
  if (!json_want_array(&x->j, arr, "blocks")) return false;
  static const char *const keys[] = {"name", "inputs", "outputs", "params", "nodes"};
  int i = 0;
  for (const cJSON *c = arr->child; c; c = c->next, i++) {
    const char *path = path_idx(x, "blocks", i);
    BlockDef *b = ARENA_NEW(x->j.a, BlockDef);
    const cJSON *nm;
    b->obj = c;
    b->path = path;
    if (!json_check_keys(&x->j, c, path, keys, 5) || !json_need(&x->j, c, path, "name", &nm) ||
        !json_want_string(&x->j, nm, pathk(x, path, "name"), &b->name) ||
        !json_need(&x->j, c, path, "inputs", &b->inputs) ||
        !json_want_array(&x->j, b->inputs, pathk(x, path, "inputs")) ||
        !json_need(&x->j, c, path, "outputs", &b->outputs) ||
        !json_want_array(&x->j, b->outputs, pathk(x, path, "outputs")) ||
        !json_need(&x->j, c, path, "nodes", &b->nodes) ||
        !json_want_array(&x->j, b->nodes, pathk(x, path, "nodes")))
      return false;
    b->params = json_get(c, "params");
    b->nin = cJSON_GetArraySize(b->inputs);
    int nout = cJSON_GetArraySize(b->outputs);
    if (b->nin < 1 || nout != b->nin) {
      diag_error(x->j.d, json_loc(&x->j, b->outputs),
                 "%s: block '%s' has %d inputs and %d outputs; instance k+1 reads instance k's "
                 "outputs, so the "
                 "counts must be equal and at least 1",
                 path, b->name, b->nin, nout);
      return false;
    }
    int k = 0;
    for (const cJSON *e = b->inputs->child; e; e = e->next, k++) {
      const char *fp = path_idx(x, pathk(x, path, "inputs"), k), *s;
      if (!json_want_string(&x->j, e, fp, &s) || !check_name(x, e, fp, s, false)) return false;
    }
    k = 0;
    for (const cJSON *e = b->outputs->child; e; e = e->next, k++) {
      const char *s;
      if (!json_want_string(&x->j, e, path_idx(x, pathk(x, path, "outputs"), k), &s)) return false;
    }
    if (strmap_put(&x->blocks, b->name, b)) {
      diag_error(x->j.d, json_loc(&x->j, nm), "%s: duplicate block name '%s'", path, b->name);
      return false;
    }
  }
  return true;
}

// The global name a block-local reference denotes in instance inst.
static const char *block_ref(X *x, const Spec *s, const cJSON *it, const char *path,
                             const char *ref) {
  int k = 0;
  for (const cJSON *f = s->blk->inputs->child; f; f = f->next, k++)
    if (strcmp(f->valuestring, ref) == 0) return s->actuals[k];
  return subst(x, it, path, ref, s->inst);
}

static bool expand_repeat(X *x, const cJSON *c, const char *path) {
  static const char *const keys[] = {"repeat", "count",        "inputs", "outputs",
                                     "start",  "split_before", "stage"};
  const cJSON *rj, *cj, *ins, *outs;
  const char *bname;
  if (!json_check_keys(&x->j, c, path, keys, 7) ||
      !json_want_string(&x->j, rj = json_get(c, "repeat"), pathk(x, path, "repeat"), &bname) ||
      !json_need(&x->j, c, path, "count", &cj) || !json_need(&x->j, c, path, "inputs", &ins) ||
      !json_want_array(&x->j, ins, pathk(x, path, "inputs")) ||
      !json_need(&x->j, c, path, "outputs", &outs) ||
      !json_want_array(&x->j, outs, pathk(x, path, "outputs")))
    return false;
  const BlockDef *b = strmap_get(&x->blocks, bname);
  if (!b) {
    diag_error(x->j.d, json_loc(&x->j, rj), "%s: unknown block '%s'", path, bname);
    return false;
  }
  int64_t count = 0, start = 0;
  if (cJSON_IsString(cj)) {
    char err[512];
    Dim dd;
    if (!eval_expr(x, cj->valuestring, &dd, err, sizeof err)) {
      diag_error(x->j.d, json_loc(&x->j, cj), "%s.count: %s", path, err);
      return false;
    }
    count = dd.b ? -1 : dd.n;
  } else if (!json_want_int(&x->j, cj, pathk(x, path, "count"), &count)) {
    return false;
  }
  if (count < 1 || count > MAX_REPEAT) {
    diag_error(x->j.d, json_loc(&x->j, cj), "%s.count: repeat count must be from 1 to %d, got %lld",
               path, MAX_REPEAT, (long long)count);
    return false;
  }
  const cJSON *sj = json_get(c, "start");
  if (sj && !json_want_int(&x->j, sj, pathk(x, path, "start"), &start)) return false;
  if (start < 0 || start > MAX_REPEAT) {
    diag_error(x->j.d, json_loc(&x->j, sj), "%s.start: must be from 0 to %d, got %lld", path,
               MAX_REPEAT, (long long)start);
    return false;
  }
  if (cJSON_GetArraySize(ins) != b->nin || cJSON_GetArraySize(outs) != b->nin) {
    diag_error(x->j.d, json_loc(&x->j, c),
               "%s: block '%s' has %d inputs and %d outputs, the repeat gives %d and %d", path,
               b->name, b->nin, b->nin, cJSON_GetArraySize(ins), cJSON_GetArraySize(outs));
    return false;
  }
  const cJSON *stage = json_get(c, "stage"), *sb = json_get(c, "split_before");
  bool split = false;
  if (sb && !json_want_bool(&x->j, sb, pathk(x, path, "split_before"), &split)) return false;
  if (stage && (!json_want_array(&x->j, stage, pathk(x, path, "stage")) ||
                cJSON_GetArraySize(stage) != count)) {
    if (cJSON_IsArray(stage))
      diag_error(x->j.d, json_loc(&x->j, stage),
                 "%s.stage: needs one stage per instance (%lld), got %d", path, (long long)count,
                 cJSON_GetArraySize(stage));
    return false;
  }
  const char **prev = ARENA_ARRAY(x->j.a, const char *, b->nin);
  int k = 0;
  for (const cJSON *e = ins->child; e; e = e->next, k++)
    if (!json_want_string(&x->j, e, path_idx(x, pathk(x, path, "inputs"), k), &prev[k]))
      return false;
  const cJSON *st = stage ? stage->child : NULL;
  for (int64_t inst = start; inst < start + count; inst++, st = st ? st->next : NULL) {
    int stg = -1;
    if (st) {
      int64_t v;
      if (!json_want_int(&x->j, st, path_idx(x, pathk(x, path, "stage"), (int)(inst - start)), &v))
        return false;
      if (v < 0 || v > 65535) {
        diag_error(x->j.d, json_loc(&x->j, st), "%s.stage: stages are from 0 to 65535, got %lld",
                   path, (long long)v);
        return false;
      }
      stg = (int)v;
    }
    if (!parse_params(x, b->params, pathk(x, b->path, "params"), (int)inst)) return false;
    int j = 0;
    bool first = true;
    for (const cJSON *nd = b->nodes->child; nd; nd = nd->next, j++) {
      const char *np = path_idx(x, pathk(x, b->path, "nodes"), j);
      if (!cJSON_IsObject(nd) || json_get(nd, "repeat")) {
        diag_error(x->j.d, json_loc(&x->j, nd),
                   "%s: expected an op node object (blocks cannot contain repeats)", np);
        return false;
      }
      Node *n = make_node(x, nd, np, b, (int)inst);
      if (!n) return false;
      if (stg >= 0 && n->stage < 0) n->stage = stg;
      if (first && split) n->split_before = true;
      first = false;
      add_spec(x, (Spec){nd, n, b, (int)inst, prev});
    }
    const char **next = ARENA_ARRAY(x->j.a, const char *, b->nin);
    k = 0;
    for (const cJSON *e = b->outputs->child; e; e = e->next, k++) {
      const char *op = path_idx(x, pathk(x, b->path, "outputs"), k);
      if (!(next[k] = subst(x, e, op, e->valuestring, (int)inst))) return false;
      Tensor *t = graph_find(x->g, next[k]);
      if (!t || t->kind != T_ACT || !t->producer || t->producer->instance != inst ||
          t->producer->block != b->name) {
        diag_error(x->j.d, json_loc(&x->j, e),
                   "%s: '%s' is not a tensor defined by block '%s' (instance %lld)", op,
                   e->valuestring, b->name, (long long)inst);
        return false;
      }
    }
    prev = next;
  }
  // The last instance's outputs under the repeat's names.
  k = 0;
  for (const cJSON *e = outs->child; e; e = e->next, k++) {
    const char *op = path_idx(x, pathk(x, path, "outputs"), k), *alias;
    if (!json_want_string(&x->j, e, op, &alias) || !check_name(x, e, op, alias, false) ||
        !name_free(x, e, op, alias))
      return false;
    strmap_put(&x->g->names, alias, graph_find(x->g, prev[k]));
  }
  return true;
}

static bool parse_nodes(X *x, const cJSON *root) {
  const cJSON *arr;
  if (!json_need(&x->j, root, "model", "nodes", &arr) || !json_want_array(&x->j, arr, "nodes"))
    return false;
  int i = 0;
  for (const cJSON *c = arr->child; c; c = c->next, i++) {
    const char *path = path_idx(x, "nodes", i);
    if (!cJSON_IsObject(c)) {
      diag_error(x->j.d, json_loc(&x->j, c), "%s: expected an object, got %s", path, json_type(c));
      return false;
    }
    if (json_get(c, "repeat")) {
      if (!expand_repeat(x, c, path)) return false;
      continue;
    }
    Node *n = make_node(x, c, path, NULL, -1);
    if (!n) return false;
    add_spec(x, (Spec){c, n, NULL, -1, NULL});
  }
  return true;
}

// Looks a reference up; explains multi-output nodes and suggests near names.
static Tensor *resolve(X *x, const cJSON *it, const char *path, const char *ref, const char *what) {
  Tensor *t = graph_find(x->g, ref);
  if (t && t->hidden) {
    diag_error(x->j.d, json_loc(&x->j, it),
               "%s: '%s' is saved by '%s' for its backward pass and cannot be used", path, ref,
               t->producer->name);
    return NULL;
  }
  if (t) return t;
  Node *n = strmap_get(&x->g->node_names, ref);
  if (n && node_visible_outputs(n) > 1) {
    int k = node_visible_outputs(n);
    diag_error(x->j.d, json_loc(&x->j, it),
               "%s: '%s' has %d outputs; refer to one of them as '%s:0' .. '%s:%d'", path, ref, k,
               ref, ref, k - 1);
    return NULL;
  }
  // Suggest among a bounded set of names: the closest one overall is too slow for huge models.
  const char *best = NULL;
  int bd = 3;
  for (int i = 0; i < x->g->ntensors && i < 20000; i++) {
    int dd = json_edit_distance(ref, x->g->tensors[i]->name);
    if (dd < bd) bd = dd, best = x->g->tensors[i]->name;
  }
  if (best)
    diag_error(x->j.d, json_loc(&x->j, it), "%s: undefined %s '%s' (did you mean '%s'?)", path,
               what, ref, best);
  else
    diag_error(x->j.d, json_loc(&x->j, it), "%s: undefined %s '%s'", path, what, ref);
  return NULL;
}

static bool resolve_inputs(X *x) {
  for (int s = 0; s < x->nspecs; s++) {
    Spec *sp = &x->specs[s];
    Node *n = sp->node;
    const cJSON *ins = json_get(sp->obj, "inputs");
    int k = 0;
    for (const cJSON *e = ins->child; e; e = e->next, k++) {
      const char *p = arena_printf(x->j.a, "%s.inputs[%d]", n->path, k), *ref;
      if (!json_want_string(&x->j, e, p, &ref)) return false;
      if (sp->blk && !(ref = block_ref(x, sp, e, p, ref))) return false;
      Tensor *t = resolve(x, e, arena_printf(x->j.a, "%s \"%s\"", n->path, n->name), ref, "input");
      if (!t) return false;
      n->in[k] = t;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Topological sort: Kahn's algorithm with a min-heap on file order, so independent nodes keep
// the order they were written in. Leftover nodes are on or behind a cycle: report one cycle.

static void heap_push(Node **h, int *n, Node *v) {
  int i = (*n)++;
  while (i > 0) {
    int p = (i - 1) / 2;
    if (h[p]->file_order <= v->file_order) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = v;
}

static Node *heap_pop(Node **h, int *n) {
  Node *top = h[0], *v = h[--(*n)];
  int i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && h[c + 1]->file_order < h[c]->file_order) c++;
    if (v->file_order <= h[c]->file_order) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = v;
  return top;
}

static bool toposort(X *x) {
  Graph *g = x->g;
  int nn = g->nnodes;
  int *indeg = ARENA_ARRAY(x->j.a, int, nn + 1);
  Node **heap = ARENA_ARRAY(x->j.a, Node *, nn + 1), **order = ARENA_ARRAY(x->j.a, Node *, nn + 1);
  int hn = 0, on = 0;
  for (int i = 0; i < nn; i++) {
    Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++) indeg[i] += n->in[j]->producer != NULL;
    if (!indeg[i]) heap_push(heap, &hn, n);
  }
  graph_link_uses(g);
  while (hn) {
    Node *n = heap_pop(heap, &hn);
    order[on++] = n;
    for (int k = 0; k < n->nout; k++)
      for (int u = 0; u < n->out[k]->nuses; u++) {
        Node *c = n->out[k]->uses[u].node;
        if (--indeg[c->file_order] == 0) heap_push(heap, &hn, c);
      }
  }
  if (on < nn) {
    // Walk backwards from a leftover node through leftover producers until a node repeats.
    Node *start = NULL;
    for (int i = 0; i < nn && !start; i++)
      if (indeg[i]) start = g->nodes[i];
    int *seen = ARENA_ARRAY(x->j.a, int, nn + 1);
    Node **path = ARENA_ARRAY(x->j.a, Node *, nn + 1);
    int len = 0;
    Node *n = start;
    while (!seen[n->file_order]) {
      seen[n->file_order] = len + 1;
      path[len++] = n;
      Node *p = NULL;
      for (int j = 0; j < n->nin && !p; j++)
        if (n->in[j]->producer && indeg[n->in[j]->producer->file_order]) p = n->in[j]->producer;
      n = p;
    }
    int from = seen[n->file_order] - 1;
    // path[from..len-1] goes consumer -> producer; print producer -> consumer.
    char buf[2048];
    size_t o = 0;
    for (int i = len - 1; i >= from && o < sizeof buf - 8; i--)
      o += (size_t)snprintf(buf + o, sizeof buf - o, "%s -> ", path[i]->name);
    if (o < sizeof buf - 8) snprintf(buf + o, sizeof buf - o, "%s", path[len - 1]->name);
    node_error(x->j.d, path[len - 1], "cycle: %s", buf);
    return false;
  }
  for (int i = 0; i < nn; i++) {
    g->nodes[i] = order[i];
    order[i]->id = i;
  }
  graph_link_uses(g);
  return true;
}

// ---------------------------------------------------------------------------------------------

static bool parse_header(X *x, const cJSON *root) {
  static const char *const keys[] = {"format", "version", "name",  "batch", "dims",    "inputs",
                                     "params", "blocks",  "nodes", "loss",  "outputs", "training"};
  if (!json_check_keys(&x->j, root, "model", keys, 12)) return false;
  const cJSON *f, *v, *nm;
  const char *s;
  int64_t ver;
  if (!json_need(&x->j, root, "model", "format", &f) || !json_want_string(&x->j, f, "format", &s))
    return false;
  if (strcmp(s, "pipec-model") != 0) {
    diag_error(x->j.d, json_loc(&x->j, f), "format: expected \"pipec-model\", got \"%s\"", s);
    return false;
  }
  if (!json_need(&x->j, root, "model", "version", &v) || !json_want_int(&x->j, v, "version", &ver))
    return false;
  if (ver != 1) {
    diag_error(x->j.d, json_loc(&x->j, v),
               "version: this pipec reads model format version 1, the file has version %lld",
               (long long)ver);
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
    if (!is_ident(x->g->batch_sym)) {
      diag_error(x->j.d, json_loc(&x->j, b),
                 "batch: '%s' is not a valid dim name (letters, digits, '_')", x->g->batch_sym);
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
  if (!(x->g->loss = resolve(x, l, "loss", s, "tensor"))) return false;
  if (!outs) return true;
  if (!json_want_array(&x->j, outs, "outputs")) return false;
  x->g->outputs = ARENA_ARRAY(x->j.a, Tensor *, cJSON_GetArraySize(outs) + 1);
  int i = 0;
  for (const cJSON *e = outs->child; e; e = e->next, i++) {
    const char *p = path_idx(x, "outputs", i);
    Tensor *t;
    if (!json_want_string(&x->j, e, p, &s) || !(t = resolve(x, e, p, s, "tensor"))) return false;
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
  return parse_header(&x, root) && parse_dims(&x, root, opt) && parse_inputs(&x, root) &&
         parse_params(&x, json_get(root, "params"), "params", -1) && parse_blocks(&x, root) &&
         parse_nodes(&x, root) && resolve_inputs(&x) && parse_loss_outputs(&x, root) &&
         toposort(&x);
}

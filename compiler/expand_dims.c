// expand_dims.c: dims and shapes for the expand pass. Each dim is an integer or an expression
// over other dims (dimexpr.h), resolved on demand with cycle detection and a depth bound; -D
// NAME=VALUE replaces a dim's value before anything is resolved. Each dim reports the errors of
// its own value at itself. Also: one dimension (integer or expression) and a shape array, which
// may use the batch symbol where the caller allows it.
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "expand.h"

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

bool ex_eval_expr(X *x, const char *expr, Dim *out, char *err, int errcap) {
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
    if (!ex_eval_expr(x, expr, &v, err, sizeof err))
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

bool ex_is_ident(const char *s) {
  if (!isalpha((unsigned char)*s) && *s != '_') return false;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && *s != '_') return false;
  return true;
}

bool ex_parse_dims(X *x, const cJSON *root, const ExpandOptions *opt) {
  const cJSON *dims = json_get(root, "dims");
  int n = dims ? cJSON_GetArraySize(dims) : 0;
  if (dims && !cJSON_IsObject(dims)) {
    diag_error(x->j.d, json_loc(&x->j, dims), "dims: expected an object, got %s", json_type(dims));
    return false;
  }
  x->dim_order = ARENA_ARRAY(x->j.a, DimSlot *, n + 1);
  for (const cJSON *c = dims ? dims->child : NULL; c; c = c->next) {
    if (!ex_is_ident(c->string)) {
      diag_error(x->j.d, json_loc(&x->j, c),
                 "dims: '%s' is not a valid dim name (letters, digits, '_')",
                 json_shown(x->j.a, c->string));
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
bool ex_parse_dim(X *x, const cJSON *it, const char *path, bool allow_infer, Dim *out) {
  if (cJSON_IsString(it)) {
    char err[512];
    if (!ex_eval_expr(x, it->valuestring, out, err, sizeof err)) {
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

bool ex_parse_shape(X *x, const cJSON *arr, const char *path, bool allow_batch, Shape *s) {
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
    const char *p = ex_path_idx(x, path, i);
    if (!ex_parse_dim(x, c, p, false, &s->d[s->rank])) return false;
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

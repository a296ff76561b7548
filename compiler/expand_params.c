// expand_params.c: the model's inputs and parameters for the expand pass. An input has a name,
// a dtype, a shape whose first dim is the batch symbol and a target flag; a parameter has a name,
// a floating-point dtype, a shape without the batch symbol and either an init (zeros, ones,
// normal, uniform, xavier with their own keys) or a tie to an earlier untied parameter of the
// same shape and dtype. Block parameters are instantiated here too, once per instance.
#include <math.h>
#include <string.h>

#include "expand.h"

static bool parse_dtype(X *x, const cJSON *obj, const char *path, DType *out) {
  const cJSON *it = json_get(obj, "dtype");
  *out = DT_F32;
  if (!it) return true;
  const char *s;
  if (!json_want_string(&x->j, it, ex_pathk(x, path, "dtype"), &s)) return false;
  if (!dtype_parse(s, out)) {
    diag_error(x->j.d, json_loc(&x->j, it),
               "%s.dtype: unknown dtype '%s' (expected f32, bf16, f16 or i32)", path,
               json_shown(x->j.a, s));
    return false;
  }
  return true;
}

bool ex_parse_inputs(X *x, const cJSON *root) {
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
    const char *path = ex_path_idx(x, "inputs", i);
    const cJSON *nm, *sh;
    const char *name;
    if (!json_check_keys(&x->j, c, path, keys, 4) || !json_need(&x->j, c, path, "name", &nm) ||
        !json_want_string(&x->j, nm, ex_pathk(x, path, "name"), &name) ||
        !ex_check_name(x, nm, path, name, false) || !ex_name_free(x, c, path, name) ||
        !json_need(&x->j, c, path, "shape", &sh))
      return false;
    Tensor *t = graph_add_tensor(x->g, name, T_INPUT);
    t->loc = json_loc(&x->j, c);
    t->path = path;
    const char *spath = ex_pathk(x, path, "shape");
    if (!parse_dtype(x, c, path, &t->dtype) || !ex_parse_shape(x, sh, spath, true, &t->shape))
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
    if (tg && !json_want_bool(&x->j, tg, ex_pathk(x, path, "target"), &t->is_target)) return false;
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
        !json_want_string(&x->j, kit, ex_pathk(x, path, "kind"), &kind))
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
    diag_error(x->j.d, json_loc(&x->j, kit), "%s: unknown init '%s'%s", path,
               json_shown(x->j.a, kind),
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
                   json_shown(x->j.a, c->string));
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
  if (!json_check_keys(&x->j, c, path, keys, 5) || !ex_name_free(x, nm, path, name) ||
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
      !ex_parse_shape(x, sh, ex_pathk(x, path, "shape"), false, &t->shape))
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
    if (!json_want_string(&x->j, tied, ex_pathk(x, path, "tied_to"), &owner)) return false;
    if (inst >= 0 && !(owner = ex_subst(x, tied, path, owner, inst))) return false;
    const char *shown = json_shown(x->j.a, owner); // (not yet known to be a name)
    if (init) {
      diag_error(x->j.d, json_loc(&x->j, init),
                 "%s: a tied parameter has no init of its own (it shares '%s')", path, shown);
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
                 "%s.tied_to: '%s' is not a parameter defined before '%s'", path, shown, name);
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
  return !init || parse_init(x, init, ex_pathk(x, path, "init"), t);
}

bool ex_parse_params(X *x, const cJSON *arr, const char *base, int inst) {
  if (!arr) return true;
  if (!json_want_array(&x->j, arr, base)) return false;
  int i = 0;
  for (const cJSON *c = arr->child; c; c = c->next, i++) {
    const char *path = ex_path_idx(x, base, i);
    const cJSON *nm;
    const char *name;
    if (!cJSON_IsObject(c)) {
      diag_error(x->j.d, json_loc(&x->j, c), "%s: expected an object, got %s", path, json_type(c));
      return false;
    }
    if (!json_need(&x->j, c, path, "name", &nm) ||
        !json_want_string(&x->j, nm, ex_pathk(x, path, "name"), &name) ||
        !ex_check_name(x, nm, path, name, inst >= 0))
      return false;
    if (inst >= 0) {
      if (!strstr(name, "{i}")) {
        diag_error(x->j.d, json_loc(&x->j, nm),
                   "%s: block parameter '%s' must contain {i} so each instance has its own", path,
                   name);
        return false;
      }
      if (!(name = ex_subst(x, nm, path, name, inst))) return false;
      path = arena_printf(x->j.a, "%s (instance %d)", path, inst);
    }
    if (!parse_param(x, c, path, name, nm, inst)) return false;
  }
  return true;
}

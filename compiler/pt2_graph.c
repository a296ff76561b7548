// The importer's graph (compiler/pt2_graph.h): values, lazy layout chains, argument readers,
// node naming and emission, messages at the user's Python line. pt2_import.c drives the import
// over these; the ATen table (pt2_aten.c) and the constant evaluator (pt2_const.c) use them.
//
// Read: every tensor_values entry becomes a Val with its shape (sizes as ints or the batch symbol
// `Symbol('sN')` / `Mul(Integer(k), Symbol('sN'))`, one symbol per graph) and dtype; the
// signature's parameters and user inputs are leaves, its buffers constants (their bytes read);
// each node gets its row and its outputs (the row's read hook decides lazy chains and patterns).
// Lower: from the loss (and the prediction the loss reads), an explicit stack takes each value's
// deps first, then the row's lower emits the pipec nodes: a linear walk, no recursion, whatever
// the graph's depth. Layout chains are realized only where a consumer needs their tensor.
#include "pt2_graph.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOLOC ((Loc){0, 0})

// ---- messages

// The user's frame of a stack_trace: the last `File "F", line N` outside torch/ (the model's own
// code, or a library's like transformers/).
void imp_py_frame(Imp *im, ImpNode *n, const char *st) {
  for (const char *c = st; c && (c = strstr(c, "File \"")); c++) {
    const char *f = c + 6, *q = strchr(f, '"');
    if (!q || strncmp(q, "\", line ", 8) != 0) continue;
    long line = strtol(q + 8, NULL, 10);
    if (strncmp(f, "torch/", 6) == 0 || line <= 0 || line > INT32_MAX) continue;
    n->py_file = arena_strndup(im->a, f, (size_t)(q - f));
    n->py_line = (int)line;
  }
}

static const char *name_shown(Imp *im, const char *s) {
  char *p = diag_printable(s);
  const char *r = p ? arena_strdup(im->a, p) : s;
  free(p);
  return r;
}

void imp_error(Imp *im, const ImpNode *n, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  // Names quoted from the archive may hold any byte: control characters are shown escaped, so
  // that a message stays one line.
  char shown[4 * sizeof msg];
  size_t o = 0;
  for (const unsigned char *c = (const unsigned char *)msg; *c && o < sizeof shown - 5; c++)
    if (*c < 0x20 || *c == 0x7f)
      o += (size_t)snprintf(shown + o, sizeof shown - o, "\\x%02x", *c);
    else
      shown[o++] = (char)*c;
  shown[o] = 0;
  if (n && n->py_file) {
    const char *file = im->d->file;
    bool ex = im->d->excerpts;
    im->d->file = n->py_file, im->d->excerpts = false;
    diag_error(im->d, (Loc){n->py_line, 0}, "%s (node %s)", shown, name_shown(im, n->name));
    im->d->file = file, im->d->excerpts = ex;
  } else if (n)
    diag_error(im->d, NOLOC, "node %s: %s", name_shown(im, n->name), shown);
  else
    diag_error(im->d, NOLOC, "%s", shown);
}

// ---- shapes

bool ishape_eq(const IShape *a, const IShape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->k[i] != b->k[i] || a->b[i] != b->b[i]) return false;
  return true;
}

int64_t ishape_numel_k(const IShape *s) { // saturates at INT64_MAX (untrusted sizes)
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) {
    if (s->k[i] == 0) return 0;
    n = n > INT64_MAX / s->k[i] ? INT64_MAX : n * s->k[i];
  }
  return n;
}

const char *ishape_str(Imp *im, const IShape *s) {
  char buf[256];
  size_t o = 0;
  buf[o++] = '(';
  for (int i = 0; i < s->rank && o < sizeof buf - 32; i++) {
    if (s->b[i] && s->k[i] == 1)
      o += (size_t)snprintf(buf + o, sizeof buf - o, "%sB", i ? "," : "");
    else if (s->b[i])
      o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%" PRId64 "*B", i ? "," : "", s->k[i]);
    else
      o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%" PRId64, i ? "," : "", s->k[i]);
  }
  snprintf(buf + o, sizeof buf - o, ")");
  return arena_strdup(im->a, buf);
}

cJSON *imp_shape_json(const IShape *s) {
  cJSON *l = cJSON_CreateArray();
  for (int i = 0; i < s->rank; i++) {
    char e[48];
    if (s->b[i] && s->k[i] == 1)
      cJSON_AddItemToArray(l, cJSON_CreateString("B"));
    else if (s->b[i]) {
      snprintf(e, sizeof e, "%" PRId64 "*B", s->k[i]);
      cJSON_AddItemToArray(l, cJSON_CreateString(e));
    } else
      cJSON_AddItemToArray(l, cJSON_CreateNumber((double)s->k[i]));
  }
  return l;
}

// A size of tensor_values or of a symbolic int: {"as_int": n} or {"as_expr": {"expr_str": ...}}
// of the batch symbol. sym: the graph's one symbol (set at the first one met).
static bool read_size(Imp *im, const cJSON *s, const char **sym, int64_t *k, bool *b) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, "as_int");
  if (cJSON_IsNumber(v)) {
    if (v->valuedouble < 0 || v->valuedouble > 9007199254740992.0) return false;
    *k = (int64_t)v->valuedouble, *b = false;
    return true;
  }
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "as_expr");
  const cJSON *str = cJSON_GetObjectItemCaseSensitive(e, "expr_str");
  if (!cJSON_IsString(str)) return false;
  const char *x = str->valuestring;
  *k = 1;
  if (strncmp(x, "Mul(Integer(", 12) == 0) {
    char *end;
    long long f = strtoll(x + 12, &end, 10);
    if (f < 1 || f > (1ll << 40) || strncmp(end, "), ", 3) != 0) return false;
    *k = f, x = end + 3;
  }
  if (strncmp(x, "Symbol('", 8) != 0) return false;
  const char *q = strchr(x + 8, '\'');
  if (!q) return false;
  const char *name = arena_strndup(im->a, x + 8, (size_t)(q - x - 8));
  if (!*sym) *sym = name;
  if (strcmp(*sym, name) != 0) return false; // a second symbol: only the batch is dynamic
  *b = true;
  return true;
}

static bool read_shape(Imp *im, const char *vname, const cJSON *meta, IShape *s, int *dtype,
                       const char **sym) {
  const cJSON *sizes = cJSON_GetObjectItemCaseSensitive(meta, "sizes");
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(meta, "dtype");
  int n = cJSON_GetArraySize(sizes);
  if (!cJSON_IsArray(sizes) || n > IMP_MAX_RANK || !cJSON_IsNumber(dt)) {
    imp_error(im, NULL, "tensor '%s': sizes and dtype expected (at most %d dims)", vname,
              IMP_MAX_RANK);
    return false;
  }
  memset(s, 0, sizeof *s);
  s->rank = n;
  *dtype = dt->valueint;
  int i = 0, nb = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, sizes) {
    if (!read_size(im, e, sym, &s->k[i], &s->b[i])) {
      char *t = cJSON_PrintUnformatted(e);
      imp_error(im, NULL,
                "tensor '%s': size %s is not supported (sizes are integers or the batch "
                "dimension, k*batch)",
                vname, t ? t : "?");
      free(t);
      return false;
    }
    nb += s->b[i++];
  }
  if (nb > 1) {
    imp_error(im, NULL, "tensor '%s': the batch dimension appears in %d dims", vname, nb);
    return false;
  }
  return true;
}

// ---- values

Val *imp_val(Imp *im, const char *name) {
  return strmap_get(&im->vals, name);
}

Val *imp_new_val(Imp *im, ValKind kind, const IShape *s, int dtype, ImpNode *producer) {
  Val *v = ARENA_NEW(im->a, Val);
  v->kind = kind, v->dtype = dtype, v->producer = producer;
  if (s) v->shape = *s;
  v->name = producer ? producer->name : "";
  return v;
}

Val *imp_root(Val *v) {
  return v->kind == VAL_LAYOUT ? v->base : v;
}

static bool perm_identity(const int *p, int r) {
  for (int i = 0; i < r; i++)
    if (p[i] != i) return false;
  return true;
}

// v's chain with one more step, normalised: adjacent reshapes merge, adjacent permutes compose,
// identities vanish, a chain that ends at its base's shape with reshapes only is the base.
static Val *push_step(Imp *im, Val *v, const Step *st) {
  Val *base = v->kind == VAL_LAYOUT ? v->base : v;
  Step steps[IMP_MAX_STEPS + 1];
  int n = 0;
  if (v->kind == VAL_LAYOUT)
    for (; n < v->nsteps; n++) steps[n] = v->steps[n];
  if (n && st->permute && steps[n - 1].permute) { // compose: out[k] = in[p1[p2[k]]]
    Step c = *st;
    for (int k = 0; k < st->shape.rank; k++) c.perm[k] = steps[n - 1].perm[st->perm[k]];
    steps[n - 1] = c;
  } else if (n && !st->permute && !steps[n - 1].permute)
    steps[n - 1] = *st;
  else
    steps[n++] = *st;
  for (bool again = true; again && n;) { // identities vanish; reshapes then around them merge
    again = false;
    const IShape *before = n >= 2 ? &steps[n - 2].shape : &base->shape;
    if (steps[n - 1].permute ? perm_identity(steps[n - 1].perm, steps[n - 1].shape.rank)
                             : ishape_eq(&steps[n - 1].shape, before))
      n--, again = true;
    else if (n >= 2 && !steps[n - 1].permute && !steps[n - 2].permute)
      steps[n - 2] = steps[n - 1], n--, again = true;
    else if (n >= 2 && steps[n - 1].permute && steps[n - 2].permute) {
      Step c = steps[n - 1];
      for (int k = 0; k < c.shape.rank; k++) c.perm[k] = steps[n - 2].perm[steps[n - 1].perm[k]];
      steps[n - 2] = c, n--, again = true;
    }
  }
  bool all_reshape = true;
  for (int i = 0; i < n; i++) all_reshape &= !steps[i].permute;
  if (n == 0 || (all_reshape && ishape_eq(&steps[n - 1].shape, &base->shape))) return base;
  if (n > IMP_MAX_STEPS) { // a long chain: realize its head (rare)
    Val head = *v;
    head.kind = VAL_LAYOUT, head.base = base, head.nsteps = n - 1;
    memcpy(head.steps, steps, sizeof head.steps);
    Val *h = ARENA_NEW(im->a, Val);
    *h = head;
    Val *r = imp_new_val(im, VAL_TENSOR, &h->shape, v->dtype, NULL);
    r->pipec = imp_realize(im, h);
    base = r, steps[0] = steps[n - 1], n = 1;
  }
  Val *o = ARENA_NEW(im->a, Val);
  *o = *base;
  o->kind = VAL_LAYOUT, o->base = base, o->nsteps = n, o->pipec = NULL;
  o->shape = steps[n - 1].shape;
  o->name = v->name;
  memcpy(o->steps, steps, sizeof(Step) * (size_t)n);
  return o;
}

Val *imp_reshape(Imp *im, Val *v, const IShape *to) {
  if (ishape_eq(&v->shape, to)) return v;
  Step st = {.permute = false, .shape = *to};
  return push_step(im, v, &st);
}

Val *imp_permute(Imp *im, Val *v, const int *perm) {
  Step st = {.permute = true};
  st.shape.rank = v->shape.rank;
  for (int k = 0; k < v->shape.rank; k++) {
    st.perm[k] = perm[k];
    st.shape.k[k] = v->shape.k[perm[k]];
    st.shape.b[k] = v->shape.b[perm[k]];
  }
  return push_step(im, v, &st);
}

const char *imp_realize(Imp *im, Val *v) {
  if (v->pipec) return v->pipec;
  if (v->kind != VAL_LAYOUT) return v->pipec; // NULL: not lowered (the caller reports)
  const char *in = imp_realize(im, v->base);
  if (!in) return NULL;
  for (int i = 0; i < v->nsteps; i++) {
    const Step *st = &v->steps[i];
    const char *nm = imp_name(im, st->permute ? "permute" : "reshape");
    cJSON *attrs = cJSON_CreateObject();
    if (st->permute) {
      cJSON *p = cJSON_CreateArray();
      for (int k = 0; k < st->shape.rank; k++)
        cJSON_AddItemToArray(p, cJSON_CreateNumber(st->perm[k]));
      cJSON_AddItemToObject(attrs, "perm", p);
    } else
      cJSON_AddItemToObject(attrs, "shape", imp_shape_json(&st->shape));
    imp_emit(im, nm, st->permute ? "permute" : "reshape", &in, 1, attrs);
    in = nm;
  }
  return v->pipec = in;
}

// ---- arguments

const cJSON *imp_arg(const ImpNode *n, const char *name) {
  const cJSON *a;
  cJSON_ArrayForEach(a, n->inputs) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(a, "name");
    if (cJSON_IsString(nm) && strcmp(nm->valuestring, name) == 0)
      return cJSON_GetObjectItemCaseSensitive(a, "arg");
  }
  return NULL;
}

bool imp_is_none(const ImpNode *n, const char *name) {
  const cJSON *a = imp_arg(n, name);
  return !a || cJSON_GetObjectItemCaseSensitive(a, "as_none");
}

static const char *arg_kind(const cJSON *a) {
  return a && a->child && a->child->string ? a->child->string : "none";
}

Val *imp_tensor(Imp *im, ImpNode *n, const char *name) {
  const cJSON *a = imp_arg(n, name);
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(a, "as_tensor");
  const cJSON *nm = cJSON_GetObjectItemCaseSensitive(t, "name");
  Val *v = cJSON_IsString(nm) ? imp_val(im, nm->valuestring) : NULL;
  if (!v) {
    imp_error(im, n, "%s: argument '%s' must be a tensor of the graph (got %s)", n->target, name,
              cJSON_IsString(nm) ? arena_printf(im->a, "'%s', which is not", nm->valuestring)
                                 : arg_kind(a));
    return NULL;
  }
  return v;
}

bool imp_int(Imp *im, ImpNode *n, const char *name, int64_t def, int64_t *out) {
  const cJSON *a = imp_arg(n, name);
  *out = def;
  if (!a) return true;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, "as_int");
  if (cJSON_IsNumber(v) && fabs(v->valuedouble) <= 9223372036854775807.0) {
    *out = v->valuedouble >= 9223372036854775807.0 ? INT64_MAX : (int64_t)v->valuedouble;
    return true;
  }
  imp_error(im, n, "%s: argument '%s' must be an int (got %s)", n->target, name, arg_kind(a));
  return false;
}

bool imp_float(Imp *im, ImpNode *n, const char *name, double def, double *out) {
  const cJSON *a = imp_arg(n, name);
  *out = def;
  if (!a || cJSON_GetObjectItemCaseSensitive(a, "as_none")) return true;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, "as_float");
  if (!v) v = cJSON_GetObjectItemCaseSensitive(a, "as_int");
  if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) {
    *out = v->valuedouble;
    return true;
  }
  imp_error(im, n, "%s: argument '%s' must be a finite number (got %s)", n->target, name,
            arg_kind(a));
  return false;
}

bool imp_bool(Imp *im, ImpNode *n, const char *name, bool def, bool *out) {
  const cJSON *a = imp_arg(n, name);
  *out = def;
  if (!a) return true;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, "as_bool");
  if (cJSON_IsBool(v)) {
    *out = cJSON_IsTrue(v);
    return true;
  }
  imp_error(im, n, "%s: argument '%s' must be a bool (got %s)", n->target, name, arg_kind(a));
  return false;
}

bool imp_ints(Imp *im, ImpNode *n, const char *name, int64_t *v, int *nv, int cap) {
  const cJSON *a = imp_arg(n, name);
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(a, "as_ints");
  *nv = 0;
  if (cJSON_IsArray(l) && cJSON_GetArraySize(l) <= cap) {
    const cJSON *e;
    cJSON_ArrayForEach(e, l) {
      if (!cJSON_IsNumber(e) || fabs(e->valuedouble) > 9007199254740992.0) goto bad;
      v[(*nv)++] = (int64_t)e->valuedouble;
    }
    return true;
  }
bad:
  imp_error(im, n, "%s: argument '%s' must be a list of at most %d ints", n->target, name, cap);
  return false;
}

bool imp_sizes(Imp *im, ImpNode *n, const char *name, IShape *out) {
  const cJSON *a = imp_arg(n, name);
  memset(out, 0, sizeof *out);
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(a, "as_ints");
  if (!l) l = cJSON_GetObjectItemCaseSensitive(a, "as_sym_ints");
  if (!cJSON_IsArray(l) || cJSON_GetArraySize(l) > IMP_MAX_RANK) {
    imp_error(im, n, "%s: argument '%s' must be a list of at most %d sizes", n->target, name,
              IMP_MAX_RANK);
    return false;
  }
  const cJSON *e;
  cJSON_ArrayForEach(e, l) {
    int i = out->rank++;
    const cJSON *iv = cJSON_IsNumber(e) ? e : cJSON_GetObjectItemCaseSensitive(e, "as_int");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "as_name");
    Val *s = cJSON_IsString(nm) ? imp_val(im, nm->valuestring) : NULL;
    if (cJSON_IsNumber(iv) && fabs(iv->valuedouble) <= 9007199254740992.0)
      out->k[i] = (int64_t)iv->valuedouble;
    else if (s && s->kind == VAL_SYM)
      out->k[i] = s->sym_k, out->b[i] = s->sym_b;
    else {
      imp_error(im, n, "%s: argument '%s': entry %d is neither an int nor a symbolic size",
                n->target, name, i);
      return false;
    }
  }
  return true;
}

// ---- emission

const char *imp_name(Imp *im, const char *hint) {
  const ImpNode *n = im->cur;
  const char *m = n && n->module && *n->module ? n->module : NULL;
  const char *base = m ? arena_printf(im->a, "%s.%s", m, hint) : arena_strdup(im->a, hint);
  const char *nm = base;
  int *next = strmap_get(&im->bases, base);
  if (!next) {
    next = ARENA_NEW(im->a, int);
    *next = 1;
    strmap_put(&im->bases, base, next);
  }
  while (strmap_get(&im->names, nm)) nm = arena_printf(im->a, "%s_%d", base, (*next)++);
  strmap_put(&im->names, nm, (void *)nm);
  return nm;
}

// The instance of a repeated module a module FQN lies in: its longest prefix ending in a number
// component ("layers.3" of "layers.3.attention.wq", a ModuleList's child), "" for none.
static const char *layer_of(Imp *im, const char *m) {
  size_t end = 0;
  for (size_t i = 0; m[i];) {
    size_t j = i;
    while (m[j] >= '0' && m[j] <= '9') j++;
    if (j > i && (m[j] == '.' || !m[j]) && i > 0 && m[i - 1] == '.') end = j;
    while (m[j] && m[j] != '.') j++;
    i = m[j] ? j + 1 : j;
  }
  return end ? arena_strndup(im->a, m, end) : "";
}

const char *imp_name_of(Imp *im, const char *hint, const Val *param) {
  const ImpNode *n = im->cur;
  const char *m = n && n->module ? n->module : "";
  size_t ml = strlen(m);
  // A leaf module's own node (the linear of "wq" reading "wq.weight") takes the module's name.
  if (param && param->kind == VAL_LEAF && !param->is_input && ml && param->fqn &&
      strncmp(param->fqn, m, ml) == 0 && param->fqn[ml] == '.' &&
      !strchr(param->fqn + ml + 1, '.') && !strmap_get(&im->names, m)) {
    strmap_put(&im->names, m, (void *)m);
    return m;
  }
  return imp_name(im, hint);
}

void imp_emit(Imp *im, const char *name, const char *op, const char **inputs, int n, cJSON *attrs) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", name);
  cJSON_AddStringToObject(o, "op", op);
  cJSON *in = cJSON_AddArrayToObject(o, "inputs");
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(in, cJSON_CreateString(inputs[i]));
  if (attrs && attrs->child)
    cJSON_AddItemToObject(o, "attrs", attrs);
  else
    cJSON_Delete(attrs);
  // The first node of each instance of a repeated module is a stage boundary candidate: the
  // partitioner cuts between layers, as torchtitan's module_fqns_per_model_part does.
  const char *layer = layer_of(im, im->cur && im->cur->module ? im->cur->module : "");
  if (*layer && strcmp(layer, im->layer ? im->layer : "") != 0)
    cJSON_AddBoolToObject(o, "split_before", true);
  im->layer = layer;
  cJSON_AddItemToArray(im->jnodes, o);
}

// ---- reading the graph

bool imp_read_values(Imp *im, const cJSON *graph) {
  const cJSON *tv = cJSON_GetObjectItemCaseSensitive(graph, "tensor_values");
  const cJSON *sv = cJSON_GetObjectItemCaseSensitive(graph, "sym_int_values");
  const char *sym = NULL;
  if (!cJSON_IsObject(tv) || (sv && !cJSON_IsObject(sv))) {
    imp_error(im, NULL,
              "models/model.json: the graph has no tensor_values (and "
              "sym_int_values, where present, must be an object)");
    return false;
  }
  const cJSON *e;
  cJSON_ArrayForEach(e, tv) {
    Val *v = imp_new_val(im, VAL_TENSOR, NULL, 0, NULL);
    v->name = e->string;
    if (!read_shape(im, e->string, e, &v->shape, &v->dtype, &sym)) return false;
    strmap_put(&im->vals, v->name, v);
  }
  cJSON_ArrayForEach(e, sv) {
    Val *v = imp_new_val(im, VAL_SYM, NULL, 0, NULL);
    v->name = e->string;
    if (!read_size(im, e, &sym, &v->sym_k, &v->sym_b)) {
      imp_error(im, NULL, "symbolic int '%s': only the batch dimension may be dynamic", e->string);
      return false;
    }
    strmap_put(&im->vals, v->name, v);
  }
  if (!sym) {
    imp_error(im, NULL,
              "the archive was exported with a static batch (no dynamic "
              "dimension): export with torch.export.Dim on the inputs' first dim "
              "(scripts/export_model.py, docs/import.md)");
    return false;
  }
  return true;
}

int imp_tensor_args(Imp *im, const ImpNode *n, Val **out, int cap) {
  int k = 0;
  const cJSON *a;
  cJSON_ArrayForEach(a, n->inputs) {
    const cJSON *arg = cJSON_GetObjectItemCaseSensitive(a, "arg");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(arg, "as_tensor");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(arg, "as_tensors");
    for (const cJSON *e = t ? t : l ? l->child : NULL; e; e = t ? NULL : e->next, k++) {
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
      if (k < cap) out[k] = cJSON_IsString(nm) ? imp_val(im, nm->valuestring) : NULL;
    }
  }
  return k;
}

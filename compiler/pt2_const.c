// Constants of an imported graph (compiler/pt2_graph.h): a node whose every tensor argument is a
// constant (a buffer, or computed from buffers and ranges alone) is evaluated when the graph is
// read, so that the patterns see values: Hugging Face's RoPE tables computed from inv_freq (arange,
// mul, cat, cos, sin) and its attention mask (arange, cumsum, index, le, eq, bitwise_and, full),
// which the attention then checks to be causal. The batch dim counts 1 here (such values do not
// depend on it). Values are f32 (ids, bools and positions exactly), each result rounded to f32 as
// torch's float32 ops round. At most CONST_MAX elements per value.
#include <math.h>
#include <string.h>

#include "pt2_graph.h"

enum { CONST_MAX = 1 << 22 };

typedef float (*BinFn)(float, float);
static float f_add(float a, float b) {
  return a + b;
}
static float f_sub(float a, float b) {
  return a - b;
}
static float f_mul(float a, float b) {
  return a * b;
}
static float f_div(float a, float b) {
  return a / b;
}
static float f_eq(float a, float b) {
  return a == b;
}
static float f_ne(float a, float b) {
  return a != b;
}
static float f_le(float a, float b) {
  return a <= b;
}
static float f_lt(float a, float b) {
  return a < b;
}
static float f_ge(float a, float b) {
  return a >= b;
}
static float f_gt(float a, float b) {
  return a > b;
}
static float f_and(float a, float b) {
  return (a != 0) && (b != 0);
}
static float f_or(float a, float b) {
  return (a != 0) || (b != 0);
}

static const struct {
  const char *op; // the target's name before its overload
  BinFn f;
} binops[] = {{"add", f_add},       {"sub", f_sub},         {"mul", f_mul},
              {"div", f_div},       {"eq", f_eq},           {"ne", f_ne},
              {"le", f_le},         {"lt", f_lt},           {"ge", f_ge},
              {"gt", f_gt},         {"bitwise_and", f_and}, {"logical_and", f_and},
              {"bitwise_or", f_or}, {"logical_or", f_or}};

static int64_t numel(const IShape *s) {
  return ishape_numel_k(s);
} // B counts 1

// in broadcasts to out (NumPy's rule, right-aligned): the archive's shapes are checked before a
// value is read through them.
static bool bcast_ok(const IShape *in, const IShape *out) {
  if (in->rank > out->rank) return false;
  for (int d = in->rank - 1, o = out->rank - 1; d >= 0; d--, o--)
    if (in->k[d] != 1 && in->k[d] != out->k[o]) return false;
  return true;
}

// Offset in an input of shape in (right-aligned, size-1 dims broadcast) of output index idx.
static int64_t bcast_off(const IShape *in, const IShape *out, const int64_t *idx) {
  int64_t off = 0, st = 1;
  for (int d = in->rank - 1, o = out->rank - 1; d >= 0; d--, o--) {
    if (in->k[d] != 1) off += idx[o] * st;
    st *= in->k[d];
  }
  return off;
}

static void next_idx(const IShape *s, int64_t *idx) {
  for (int d = s->rank - 1; d >= 0; d--) {
    if (++idx[d] < s->k[d]) return;
    idx[d] = 0;
  }
}

static float *alloc_out(Imp *im, Val *o) {
  int64_t n = numel(&o->shape);
  o->kind = VAL_CONST;
  o->data = arena_alloc(im->a, (size_t)(n ? n : 1) * sizeof(float));
  return o->data;
}

static float round_to(const Val *o, double v) {
  if (o->dtype == 12) return v != 0;                          // bool
  if (o->dtype >= 1 && o->dtype <= 5) return (float)trunc(v); // ints
  return (float)v;
}

static Val *tensor_arg(Imp *im, const ImpNode *n, const char *name) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(imp_arg(n, name), "as_tensor");
  const cJSON *nm = cJSON_GetObjectItemCaseSensitive(t, "name");
  return cJSON_IsString(nm) ? imp_val(im, nm->valuestring) : NULL;
}

// A scalar argument (as_int, as_float, as_bool): true with *v.
static bool scalar_arg(const ImpNode *n, const char *name, double *v) {
  const cJSON *a = imp_arg(n, name);
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(a, "as_int");
  if (!s) s = cJSON_GetObjectItemCaseSensitive(a, "as_float");
  if (cJSON_IsNumber(s)) {
    *v = s->valuedouble;
    return true;
  }
  s = cJSON_GetObjectItemCaseSensitive(a, "as_bool");
  if (cJSON_IsBool(s)) {
    *v = cJSON_IsTrue(s);
    return true;
  }
  return false;
}

static bool eval_binary(Imp *im, ImpNode *n, BinFn f) {
  Val *a = tensor_arg(im, n, "self"), *b = tensor_arg(im, n, "other"), *o = n->out[0];
  double s = 0, alpha = 1;
  if (!a || (!b && !scalar_arg(n, "other", &s))) return false;
  if (scalar_arg(n, "alpha", &alpha) && alpha != 1) return false;
  if (!bcast_ok(&a->shape, &o->shape) || (b && !bcast_ok(&b->shape, &o->shape))) return false;
  float *y = alloc_out(im, o);
  int64_t idx[IMP_MAX_RANK] = {0}, cnt = numel(&o->shape);
  for (int64_t i = 0; i < cnt; i++, next_idx(&o->shape, idx)) {
    float x = a->data[bcast_off(&a->shape, &o->shape, idx)];
    float w = b ? b->data[bcast_off(&b->shape, &o->shape, idx)] : (float)s;
    y[i] = round_to(o, f(x, w));
  }
  return true;
}

// Same data (view, unsqueeze, clone, _to_copy, expand's broadcast, ...), converted to the
// output's dtype.
static bool eval_broadcast(Imp *im, ImpNode *n) {
  Val *a = tensor_arg(im, n, "self"), *o = n->out[0];
  if (!a) return false;
  bool same = numel(&a->shape) == numel(&o->shape) && strncmp(n->target, "expand", 6) != 0;
  if (!same && !bcast_ok(&a->shape, &o->shape)) return false;
  float *y = alloc_out(im, o);
  int64_t idx[IMP_MAX_RANK] = {0}, cnt = numel(&o->shape);
  for (int64_t i = 0; i < cnt; i++, next_idx(&o->shape, idx))
    y[i] = round_to(o, a->data[same ? i : bcast_off(&a->shape, &o->shape, idx)]);
  return true;
}

static bool eval_unary(Imp *im, ImpNode *n, double (*f)(double)) {
  Val *a = tensor_arg(im, n, "self"), *o = n->out[0];
  if (!a || !ishape_eq(&a->shape, &o->shape)) return false;
  float *y = alloc_out(im, o);
  for (int64_t i = 0, cnt = numel(&o->shape); i < cnt; i++) y[i] = round_to(o, f(a->data[i]));
  return true;
}

static double d_neg(double x) {
  return -x;
}

static bool eval_cumsum(Imp *im, ImpNode *n) {
  Val *a = tensor_arg(im, n, "self"), *o = n->out[0];
  double dim;
  if (!a || !scalar_arg(n, "dim", &dim) || !ishape_eq(&a->shape, &o->shape)) return false;
  int r = o->shape.rank, ax = (int)(dim < 0 ? dim + r : dim);
  if (ax < 0 || ax >= r) return false;
  int64_t inner = 1, len = o->shape.k[ax], outer = numel(&o->shape) / (len ? len : 1);
  for (int d = ax + 1; d < r; d++) inner *= o->shape.k[d];
  float *y = alloc_out(im, o);
  for (int64_t i = 0; i < outer / inner * inner; i++) {
    int64_t base = (i / inner) * len * inner + i % inner;
    double acc = 0;
    for (int64_t t = 0; t < len; t++)
      y[base + t * inner] = round_to(o, acc += a->data[base + t * inner]);
  }
  return true;
}

// index.Tensor(self, [i0, i1, ..]): one index tensor per leading dim, broadcast together.
static bool eval_index(Imp *im, ImpNode *n) {
  Val *a = tensor_arg(im, n, "self"), *o = n->out[0], *ix[IMP_MAX_RANK];
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(imp_arg(n, "indices"), "as_tensors"), *e;
  int k = 0;
  if (!a) return false;
  cJSON_ArrayForEach(e, l) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (k == a->shape.rank || !cJSON_IsString(nm) || !(ix[k] = imp_val(im, nm->valuestring)) ||
        ix[k]->kind != VAL_CONST)
      return false;
    k++;
  }
  int rb = o->shape.rank - (a->shape.rank - k); // the broadcast indices' rank
  if (k == 0 || rb < 0) return false;
  IShape bs = o->shape;
  bs.rank = rb;
  for (int j = 0; j < k; j++)
    if (!bcast_ok(&ix[j]->shape, &bs)) return false;
  for (int d = k; d < a->shape.rank; d++)
    if (a->shape.k[d] != o->shape.k[rb + d - k]) return false;
  float *y = alloc_out(im, o);
  int64_t idx[IMP_MAX_RANK] = {0}, cnt = numel(&o->shape), rest = 1;
  for (int d = k; d < a->shape.rank; d++) rest *= a->shape.k[d];
  for (int64_t i = 0; i < cnt; i++, next_idx(&o->shape, idx)) {
    int64_t off = 0;
    for (int j = 0; j < k; j++) {
      int64_t v = (int64_t)ix[j]->data[bcast_off(&ix[j]->shape, &bs, idx)];
      if (v < 0) v += a->shape.k[j];
      if (v < 0 || v >= a->shape.k[j]) return false;
      off = off * a->shape.k[j] + v;
    }
    int64_t in = 0;
    for (int d = rb; d < o->shape.rank; d++) in = in * o->shape.k[d] + idx[d];
    y[i] = a->data[off * rest + in];
  }
  return true;
}

static bool eval_full(Imp *im, ImpNode *n) {
  double v;
  if (!scalar_arg(n, "fill_value", &v)) return false;
  float *y = alloc_out(im, n->out[0]);
  for (int64_t i = 0, c = numel(&n->out[0]->shape); i < c; i++) y[i] = round_to(n->out[0], v);
  return true;
}

static bool eval_arange(Imp *im, ImpNode *n) {
  double start = 0, end = 0, step = 1;
  bool one = strcmp(n->target, "arange.default") == 0;
  const cJSON *ea = imp_arg(n, "end");
  const cJSON *sym = cJSON_GetObjectItemCaseSensitive(ea, "as_sym_int");
  if (one ? !scalar_arg(n, "end", &end) : !scalar_arg(n, "start", &start)) return false;
  if (!one && !scalar_arg(n, "end", &end) && !sym) return false;
  scalar_arg(n, "step", &step);
  Val *o = n->out[0];
  if (o->shape.rank != 1 || step == 0) return false;
  float *y = alloc_out(im, o);
  for (int64_t i = 0, c = numel(&o->shape); i < c; i++)
    y[i] = round_to(o, start + (double)i * step);
  return true;
}

static bool eval_cat(Imp *im, ImpNode *n) {
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(imp_arg(n, "tensors"), "as_tensors"), *e;
  double dim = 0;
  Val *o = n->out[0];
  scalar_arg(n, "dim", &dim);
  int r = o->shape.rank, ax = (int)(dim < 0 ? dim + r : dim);
  if (ax < 0 || ax >= r) return false;
  int64_t inner = 1, outer = 1, at = 0;
  for (int d = ax + 1; d < r; d++) inner *= o->shape.k[d];
  for (int d = 0; d < ax; d++) outer *= o->shape.k[d];
  float *y = alloc_out(im, o);
  cJSON_ArrayForEach(e, l) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
    Val *v = cJSON_IsString(nm) ? imp_val(im, nm->valuestring) : NULL;
    if (!v || v->kind != VAL_CONST || v->shape.rank != r || at + v->shape.k[ax] > o->shape.k[ax])
      return false;
    for (int d = 0; d < r; d++)
      if (d != ax && v->shape.k[d] != o->shape.k[d]) return false;
    int64_t len = v->shape.k[ax];
    for (int64_t i = 0; i < outer; i++)
      memcpy(y + (i * o->shape.k[ax] + at) * inner, v->data + i * len * inner,
             (size_t)(len * inner) * sizeof(float));
    at += len;
  }
  return at == o->shape.k[ax];
}

static bool eval_permute(Imp *im, ImpNode *n) {
  Val *a = tensor_arg(im, n, "self"), *o = n->out[0];
  if (!a) return false;
  int r = a->shape.rank, perm[IMP_MAX_RANK];
  if (strncmp(n->target, "permute", 7) == 0) {
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(imp_arg(n, "dims"), "as_ints"), *e;
    int k = 0;
    cJSON_ArrayForEach(e, l) {
      if (k == r) return false;
      int p = (int)e->valuedouble;
      perm[k++] = p < 0 ? p + r : p;
    }
    if (k != r) return false;
  } else {
    double d0 = 0, d1 = 1;
    scalar_arg(n, "dim0", &d0), scalar_arg(n, "dim1", &d1);
    for (int k = 0; k < r; k++) perm[k] = k;
    int x = (int)(d0 < 0 ? d0 + r : d0), w = (int)(d1 < 0 ? d1 + r : d1);
    if (x < 0 || x >= r || w < 0 || w >= r) return false;
    perm[x] = w, perm[w] = x;
  }
  int64_t st[IMP_MAX_RANK], idx[IMP_MAX_RANK] = {0};
  if (r < 1 || o->shape.rank != r) return false;
  for (int k = 0; k < r; k++)
    if (perm[k] < 0 || perm[k] >= r || o->shape.k[k] != a->shape.k[perm[k]]) return false;
  st[r - 1] = 1;
  for (int k = r - 2; k >= 0; k--) st[k] = st[k + 1] * a->shape.k[k + 1];
  float *y = alloc_out(im, o);
  for (int64_t i = 0, c = numel(&o->shape); i < c; i++, next_idx(&o->shape, idx)) {
    int64_t off = 0;
    for (int k = 0; k < r; k++) {
      if (perm[k] < 0 || perm[k] >= r) return false;
      off += idx[k] * st[perm[k]];
    }
    y[i] = a->data[off];
  }
  return true;
}

static bool eval_slice(Imp *im, ImpNode *n) {
  Val *a = tensor_arg(im, n, "self"), *o = n->out[0];
  double dim = 0, start = 0, step = 1;
  if (!a) return false;
  bool sel = strncmp(n->target, "select", 6) == 0;
  scalar_arg(n, "dim", &dim), scalar_arg(n, sel ? "index" : "start", &start);
  scalar_arg(n, "step", &step);
  int r = a->shape.rank, ax = (int)(dim < 0 ? dim + r : dim);
  if (ax < 0 || ax >= r || step != 1) return false;
  int64_t size = a->shape.k[ax], s0 = (int64_t)(start < 0 ? start + (double)size : start);
  int64_t len = sel ? 1 : o->shape.k[ax], inner = 1, outer = 1;
  if (s0 < 0 || s0 + len > size || o->shape.rank != r - sel) return false;
  for (int d = 0, e = 0; d < r; d++) // o is a with len along ax (select: without ax)
    if (d == ax ? !sel && o->shape.k[e++] != len : o->shape.k[e++] != a->shape.k[d]) return false;
  for (int d = ax + 1; d < r; d++) inner *= a->shape.k[d];
  for (int d = 0; d < ax; d++) outer *= a->shape.k[d];
  float *y = alloc_out(im, o);
  for (int64_t i = 0; i < outer; i++)
    memcpy(y + i * len * inner, a->data + (i * size + s0) * inner,
           (size_t)(len * inner) * sizeof(float));
  return true;
}

// A complex64 constant (Meta's freqs_cis) through slice and the layout ops: elements of two floats.
static bool eval_complex(Imp *im, ImpNode *n, Val *a) {
  Val *o = n->out[0];
  const char *t = n->target;
  if (o->dtype != 10) return false;
  if (!strcmp(t, "view.default") || !strcmp(t, "reshape.default") ||
      !strcmp(t, "_unsafe_view.default") || !strcmp(t, "unsqueeze.default") ||
      !strcmp(t, "clone.default") || !strcmp(t, "alias.default")) {
    if (numel(&a->shape) != numel(&o->shape)) return false;
    o->kind = VAL_CONST, o->data = a->data;
    return true;
  }
  if (strcmp(t, "slice.Tensor") != 0) return false;
  double dim = 0, start = 0, step = 1;
  scalar_arg(n, "dim", &dim), scalar_arg(n, "start", &start), scalar_arg(n, "step", &step);
  int r = a->shape.rank, ax = (int)(dim < 0 ? dim + r : dim);
  if (ax < 0 || ax >= r || step != 1 || o->shape.rank != r) return false;
  int64_t size = a->shape.k[ax], s0 = (int64_t)(start < 0 ? start + (double)size : start);
  int64_t len = o->shape.k[ax], inner = 2, outer = 1;
  for (int d = 0; d < r; d++)
    if (d != ax && o->shape.k[d] != a->shape.k[d]) return false;
  if (s0 < 0 || s0 + len > size) return false;
  for (int d = ax + 1; d < r; d++) inner *= a->shape.k[d];
  for (int d = 0; d < ax; d++) outer *= a->shape.k[d];
  o->kind = VAL_CONST;
  o->data = arena_alloc(im->a, (size_t)(outer * len * inner + 1) * sizeof(float));
  for (int64_t i = 0; i < outer; i++)
    memcpy(o->data + i * len * inner, a->data + (i * size + s0) * inner,
           (size_t)(len * inner) * sizeof(float));
  return true;
}

bool imp_const_eval(Imp *im, ImpNode *n) {
  if (n->nout != 1 || numel(&n->out[0]->shape) > CONST_MAX) return false;
  Val *args[16];
  int tensors = imp_tensor_args(im, n, args, 16);
  if (tensors > 16) return false;
  for (int i = 0; i < tensors; i++)
    if (!args[i] || args[i]->kind != VAL_CONST) return false;
  const char *fqn = tensors ? args[0]->fqn : NULL; // the buffer a one-input value comes from
  const char *t = n->target;
  size_t op = strcspn(t, ".");
  bool ok = false;
  Val *self = tensor_arg(im, n, "self");
  if (self && self->kind == VAL_CONST && self->dtype == 10) { // complex: its own few ops
    ok = tensors == 1 && eval_complex(im, n, self);
    if (ok) n->out[0]->fqn = fqn;
    return ok;
  }
  for (size_t i = 0; i < sizeof binops / sizeof binops[0]; i++)
    if (strlen(binops[i].op) == op && strncmp(t, binops[i].op, op) == 0)
      return tensors >= 1 && eval_binary(im, n, binops[i].f);
  if (!strncmp(t, "arange.", 7))
    ok = tensors == 0 && eval_arange(im, n);
  else if (!strcmp(t, "full.default"))
    ok = tensors == 0 && eval_full(im, n);
  else if (tensors == 0)
    return false;
  else if (!strcmp(t, "cos.default"))
    ok = eval_unary(im, n, cos);
  else if (!strcmp(t, "sin.default"))
    ok = eval_unary(im, n, sin);
  else if (!strcmp(t, "neg.default"))
    ok = eval_unary(im, n, d_neg);
  else if (!strcmp(t, "cumsum.default"))
    ok = eval_cumsum(im, n);
  else if (!strcmp(t, "index.Tensor"))
    ok = eval_index(im, n);
  else if (!strcmp(t, "cat.default"))
    ok = eval_cat(im, n);
  else if (!strcmp(t, "slice.Tensor") || !strcmp(t, "select.int"))
    ok = eval_slice(im, n);
  else if (!strcmp(t, "permute.default") || !strcmp(t, "transpose.int"))
    ok = eval_permute(im, n);
  else if (!strcmp(t, "view.default") || !strcmp(t, "reshape.default") ||
           !strcmp(t, "_unsafe_view.default") || !strcmp(t, "unsqueeze.default") ||
           !strcmp(t, "squeeze.dim") || !strcmp(t, "squeeze.dims") || !strcmp(t, "clone.default") ||
           !strcmp(t, "alias.default") || !strcmp(t, "detach.default") ||
           !strcmp(t, "_to_copy.default") || !strcmp(t, "to.dtype") ||
           !strcmp(t, "expand.default") || !strcmp(t, "flatten.using_ints") ||
           !strcmp(t, "unflatten.int") || !strcmp(t, "contiguous.default"))
    ok = eval_broadcast(im, n);
  else
    return false;
  if (!ok) n->out[0]->kind = VAL_TENSOR, n->out[0]->data = NULL;
  if (ok && tensors == 1) n->out[0]->fqn = fqn;
  return ok;
}

// The ATen -> pipec table (compiler/pt2_import.h): one row per ATen target and overload, with the
// pipec op it becomes, and the patterns that are one pipec op:
//   - view/reshape/unsqueeze/squeeze/flatten/permute/transpose: lazy layout steps (no node until a
//     consumer needs the tensor); clone/alias/detach/contiguous and _to_copy of the same dtype:
//     the tensor itself; _assert_tensor_metadata and sym_size: nothing;
//   - scaled_dot_product_attention over the view(B,T,H,D).transpose(1,2) of q, k and v: attention
//     on the (B,T,C) tensors, n_kv_head from enable_gqa or from repeat_kv's unsqueeze/expand/view;
//   - RoPE written with real tensors, cat of (x_a·cos − x_b·sin, x_b·cos + x_a·sin): the halves
//     of slice (rotate_half's pairing) or the select(-1, 0|1) of a view(..., D/2, 2) (Meta's
//     interleaved pairing), cos and sin buffers checked to be the recipe's table of some theta;
//   - mean(pow(sub(a, b), 2)): mse_loss(a, b); embedding of arange(s, s+n): slice of the weight.
// Buffers and what is computed from them alone are constants, evaluated here (slice, layout).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pt2_graph.h"

// ---- helpers

static void set_out(Val *dst, const Val *src) {
  const char *nm = dst->name;
  ImpNode *pr = dst->producer;
  *dst = *src;
  dst->name = nm;
  if (dst->kind == VAL_LAYOUT || dst->kind == VAL_CONST) dst->producer = pr;
}

// out = in (a value the node passes through).
static void alias_out(Imp *im, Val *out, Val *in) {
  if (in->kind == VAL_TENSOR) {
    Val l = *in;
    l.kind = VAL_LAYOUT, l.base = in, l.nsteps = 0, l.pipec = NULL;
    set_out(out, &l);
  } else
    set_out(out, in);
  (void)im;
}

static int norm_axis(int64_t a, int rank) {
  return (int)(a < 0 ? a + rank : a);
}

static Val *arg_t(Imp *im, ImpNode *n, const char *name) {
  return imp_tensor(im, n, name);
}

// A tensor argument for a pattern: NULL, quietly, when it is not one.
static Val *arg_q(Imp *im, const ImpNode *n, const char *name) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(imp_arg(n, name), "as_tensor");
  const cJSON *nm = cJSON_GetObjectItemCaseSensitive(t, "name");
  return cJSON_IsString(nm) ? imp_val(im, nm->valuestring) : NULL;
}

static const char *real(Imp *im, Val *v) {
  const char *s = imp_realize(im, v);
  if (!s) imp_error(im, im->cur, "tensor '%s' could not be lowered", v->name);
  return s;
}

// The CONST value of a layout step over a constant: the same data reshaped, or permuted.
static Val *const_layout(Imp *im, Val *in, Val *out, const int *perm) {
  if (in->dtype == 10) {
    imp_error(im, im->cur, "%s of a complex constant is not supported (slice and view are)",
              im->cur ? im->cur->target : "a layout op");
    return NULL;
  }
  bool fits = perm ? in->shape.rank == out->shape.rank
                   : ishape_numel_k(&in->shape) == ishape_numel_k(&out->shape);
  for (int k = 0; perm && fits && k < in->shape.rank; k++)
    fits = out->shape.k[k] == in->shape.k[perm[k]];
  if (!fits) {
    imp_error(im, im->cur, "constant '%s' %s does not fit its output %s", in->name,
              ishape_str(im, &in->shape), ishape_str(im, &out->shape));
    return NULL;
  }
  Val c = *in;
  c.kind = VAL_CONST, c.shape = out->shape;
  if (perm) {
    int64_t n = ishape_numel_k(&in->shape), st[IMP_MAX_RANK];
    int r = in->shape.rank;
    c.data = arena_alloc(im->a, (size_t)(n ? n : 1) * sizeof(float));
    st[r - 1] = 1;
    for (int k = r - 2; k >= 0; k--) st[k] = st[k + 1] * in->shape.k[k + 1];
    for (int64_t o = 0; o < n; o++) {
      int64_t rem = o, src = 0;
      for (int k = r - 1; k >= 0; k--) {
        int64_t i = rem % out->shape.k[k];
        rem /= out->shape.k[k];
        src += i * st[perm[k]];
      }
      c.data[o] = in->data[src];
    }
  }
  set_out(out, &c);
  return out;
}

// ---- layout rows (read hooks only)

static bool read_reshape(Imp *im, ImpNode *n) {
  Val *x = arg_t(im, n, "self");
  if (!x) return false;
  if (x->kind == VAL_CONST) return const_layout(im, x, n->out[0], NULL) != NULL;
  if (x->kind == VAL_SYM || (x->shape.rank == 0 && n->out[0]->shape.rank == 0)) {
    alias_out(im, n->out[0], x);
    return true;
  }
  Val *y = imp_reshape(im, x, &n->out[0]->shape);
  if (y->kind == VAL_LAYOUT)
    set_out(n->out[0], y);
  else
    alias_out(im, n->out[0], y);
  return true;
}

static bool do_permute(Imp *im, ImpNode *n, Val *x, const int *perm) {
  if (x->kind == VAL_CONST) return const_layout(im, x, n->out[0], perm) != NULL;
  Val *y = imp_permute(im, x, perm);
  if (y->kind == VAL_LAYOUT)
    set_out(n->out[0], y);
  else
    alias_out(im, n->out[0], y);
  return true;
}

static bool read_permute(Imp *im, ImpNode *n) {
  Val *x = arg_t(im, n, "self");
  int64_t d[IMP_MAX_RANK];
  int nd, perm[IMP_MAX_RANK], seen = 0;
  if (!x || !imp_ints(im, n, "dims", d, &nd, IMP_MAX_RANK)) return false;
  if (nd != x->shape.rank) {
    imp_error(im, n, "permute.default: %d dims for a tensor of rank %d", nd, x->shape.rank);
    return false;
  }
  for (int k = 0; k < nd; k++) {
    perm[k] = norm_axis(d[k], nd);
    if (perm[k] < 0 || perm[k] >= nd || (seen >> perm[k] & 1)) {
      imp_error(im, n, "permute.default: dims is not a permutation");
      return false;
    }
    seen |= 1 << perm[k];
  }
  return do_permute(im, n, x, perm);
}

static bool read_transpose(Imp *im, ImpNode *n) {
  Val *x = arg_t(im, n, "self");
  int64_t d0 = 0, d1 = 1;
  if (!x) return false;
  int r = x->shape.rank, perm[IMP_MAX_RANK];
  if (strcmp(n->target, "t.default") != 0 &&
      (!imp_int(im, n, "dim0", 0, &d0) || !imp_int(im, n, "dim1", 1, &d1)))
    return false;
  int a = norm_axis(d0, r), b = norm_axis(d1, r);
  if (r < 1 || a < 0 || a >= r || b < 0 || b >= r) {
    imp_error(im, n, "%s: dims out of range for rank %d", n->target, r);
    return false;
  }
  for (int k = 0; k < r; k++) perm[k] = k;
  perm[a] = b, perm[b] = a;
  return do_permute(im, n, x, perm);
}

static bool read_identity(Imp *im, ImpNode *n) {
  Val *x = arg_t(im, n, "self");
  if (!x) return false;
  if (n->nout != 1) return true;
  if (x->dtype != n->out[0]->dtype && x->kind != VAL_CONST) {
    imp_error(im, n, "%s: a conversion of dtype %d to %d is not supported", n->target, x->dtype,
              n->out[0]->dtype);
    return false;
  }
  alias_out(im, n->out[0], x);
  return true;
}

static bool read_nothing(Imp *im, ImpNode *n) {
  (void)im, (void)n;
  return true;
}

static bool read_expand(Imp *im, ImpNode *n) {
  Val *x = arg_t(im, n, "self");
  if (!x) return false;
  Val *o = n->out[0];
  o->kind = VAL_EXPAND, o->base = x;
  return true;
}

static bool read_arange(Imp *im, ImpNode *n) {
  double start = 0, end = 0, step = 1;
  bool one = strcmp(n->target, "arange.default") == 0;
  if (!imp_float(im, n, one ? "end" : "start", 0, one ? &end : &start) ||
      (!one && !imp_float(im, n, "end", 0, &end)) || !imp_float(im, n, "step", 1, &step))
    return false;
  Val *o = n->out[0];
  int64_t cnt = ishape_numel_k(&o->shape);
  if (o->shape.rank != 1 || o->shape.b[0] || step == 0 || cnt > (1 << 24)) {
    imp_error(im, n, "%s: a static 1-d range of at most 2^24 values is supported", n->target);
    return false;
  }
  o->kind = VAL_CONST;
  o->data = arena_alloc(im->a, (size_t)(cnt ? cnt : 1) * sizeof(float));
  for (int64_t i = 0; i < cnt; i++) o->data[i] = (float)(start + (double)i * step);
  return true;
}

// ---- slice and select: constants evaluated; otherwise kept for the patterns, lowered as slice

typedef struct SliceInfo {
  Val *x;             // the sliced tensor
  int axis;           // normalised
  int64_t start, end; // normalised, 0 <= start < end <= size
  bool select;        // select.int: the axis is dropped
} SliceInfo;

static bool read_slice(Imp *im, ImpNode *n) {
  bool sel = strcmp(n->target, "select.int") == 0;
  Val *x = arg_t(im, n, "self");
  int64_t dim = 0, start = 0, end = INT64_MAX, step = 1;
  if (!x || !imp_int(im, n, "dim", 0, &dim)) return false;
  if (sel ? !imp_int(im, n, "index", 0, &start)
          : !imp_int(im, n, "start", 0, &start) || !imp_int(im, n, "end", INT64_MAX, &end) ||
                !imp_int(im, n, "step", 1, &step))
    return false;
  int r = x->shape.rank, ax = norm_axis(dim, r);
  if (ax < 0 || ax >= r || x->shape.b[ax] || step != 1) {
    imp_error(im, n, "%s: dim %lld of %s: only static dims with step 1 are supported", n->target,
              (long long)dim, ishape_str(im, &x->shape));
    return false;
  }
  int64_t size = x->shape.k[ax];
  if (start < 0) start += size;
  if (sel) end = start + 1;
  if (end < 0) end += size;
  if (end > size) end = size;
  if (start < 0 || start >= end) {
    imp_error(im, n, "%s: an empty or out-of-range slice of dim %d", n->target, ax);
    return false;
  }
  SliceInfo *si = ARENA_NEW(im->a, SliceInfo);
  *si = (SliceInfo){x, ax, start, end, sel};
  n->match = si;
  if (x->kind != VAL_CONST) return true;
  if (x->dtype == 10) {
    imp_error(im, n, "%s: this slice of a complex constant is not supported", n->target);
    return false;
  }
  Val *o = n->out[0];
  int64_t outer = 1, inner = 1, len = end - start;
  if (ishape_numel_k(&o->shape) != ishape_numel_k(&x->shape) / size * len) {
    imp_error(im, n, "%s: the constant's slice does not fit its output %s", n->target,
              ishape_str(im, &o->shape));
    return false;
  }
  for (int k = 0; k < ax; k++) outer *= x->shape.k[k];
  for (int k = ax + 1; k < r; k++) inner *= x->shape.k[k];
  o->kind = VAL_CONST, o->fqn = x->fqn;
  o->data = arena_alloc(im->a, (size_t)(outer * len * inner + 1) * sizeof(float));
  for (int64_t a = 0; a < outer; a++)
    memcpy(o->data + a * len * inner, x->data + (a * size + start) * inner,
           (size_t)(len * inner) * sizeof(float));
  return true;
}

static bool plan_slice(Imp *im, ImpNode *n) {
  (void)im;
  n->deps[n->ndeps++] = ((SliceInfo *)n->match)->x;
  return true;
}

static bool lower_slice(Imp *im, ImpNode *n) {
  SliceInfo *si = n->match;
  const char *in = real(im, si->x);
  if (!in) return false;
  const char *nm = imp_name(im, si->select ? "select" : "slice");
  cJSON *at = cJSON_CreateObject();
  cJSON_AddNumberToObject(at, "axis", si->axis);
  cJSON_AddNumberToObject(at, "start", (double)si->start);
  if (si->end < si->x->shape.k[si->axis]) cJSON_AddNumberToObject(at, "end", (double)si->end);
  imp_emit(im, nm, "slice", &in, 1, at);
  if (!si->select) {
    n->out[0]->pipec = nm;
    return true;
  }
  Val *t = imp_new_val(im, VAL_TENSOR, &si->x->shape, n->out[0]->dtype, NULL);
  t->shape.k[si->axis] = 1, t->pipec = nm;
  n->out[0]->pipec = imp_realize(im, imp_reshape(im, t, &n->out[0]->shape));
  return n->out[0]->pipec != NULL;
}

// ---- plain rows: tensors in schema order, attributes

// Emits op over the node's tensor arguments named in args (NULL-terminated; an absent optional
// one, "?name", is left out) with attrs; the node's one output is the result.
static bool emit_plain(Imp *im, ImpNode *n, const char *op, const char *const *args, cJSON *at) {
  const char *in[8];
  int k = 0;
  const Val *param = NULL;
  for (int i = 0; args[i]; i++) {
    bool opt = args[i][0] == '?';
    const char *nm = args[i] + opt;
    if (opt && imp_is_none(n, nm)) continue;
    Val *v = arg_t(im, n, nm);
    if (!v || !(in[k++] = real(im, v))) {
      cJSON_Delete(at);
      return false;
    }
    if (!param && v->kind == VAL_LEAF && !v->is_input) param = v;
  }
  const char *name = imp_name_of(im, n->name, param);
  imp_emit(im, name, op, in, k, at);
  n->out[0]->pipec = name;
  return true;
}

static bool lower_linear(Imp *im, ImpNode *n) {
  static const char *const a[] = {"input", "weight", "?bias", NULL};
  return emit_plain(im, n, "linear", a, NULL);
}

static bool unary(Imp *im, ImpNode *n, const char *op) {
  static const char *const a[] = {"self", NULL};
  return emit_plain(im, n, op, a, NULL);
}
static bool lower_relu(Imp *im, ImpNode *n) {
  return unary(im, n, "relu");
}
static bool lower_silu(Imp *im, ImpNode *n) {
  return unary(im, n, "silu");
}
static bool lower_tanh(Imp *im, ImpNode *n) {
  return unary(im, n, "tanh");
}
static bool lower_sigmoid(Imp *im, ImpNode *n) {
  return unary(im, n, "sigmoid");
}
static bool lower_neg(Imp *im, ImpNode *n) {
  return unary(im, n, "neg");
}
static bool lower_exp(Imp *im, ImpNode *n) {
  return unary(im, n, "exp");
}
static bool lower_rsqrt(Imp *im, ImpNode *n) {
  return unary(im, n, "rsqrt");
}

static bool lower_gelu(Imp *im, ImpNode *n) {
  const cJSON *a = imp_arg(n, "approximate");
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(a, "as_string");
  const char *ap = cJSON_IsString(s) ? s->valuestring : "none";
  if (a && !cJSON_IsString(s)) {
    imp_error(im, n, "gelu.default: argument 'approximate' must be a string");
    return false;
  }
  if (strcmp(ap, "none") && strcmp(ap, "tanh")) {
    imp_error(im, n, "gelu.default: approximate='%s' is not supported (none, tanh)", ap);
    return false;
  }
  cJSON *at = cJSON_CreateObject();
  cJSON_AddStringToObject(at, "approximate", ap);
  static const char *const args[] = {"self", NULL};
  return emit_plain(im, n, "gelu", args, at);
}

static bool binary(Imp *im, ImpNode *n, const char *op) {
  double alpha = 1;
  if (!imp_float(im, n, "alpha", 1, &alpha)) return false;
  if (alpha != 1) {
    imp_error(im, n, "%s: alpha = %g is not supported (1)", n->target, alpha);
    return false;
  }
  const cJSON *o = imp_arg(n, "other");
  if (!cJSON_GetObjectItemCaseSensitive(o, "as_tensor")) {
    imp_error(im, n, "%s with a scalar operand is not supported yet", n->target);
    return false;
  }
  static const char *const args[] = {"self", "other", NULL};
  return emit_plain(im, n, op, args, NULL);
}
static bool lower_sub(Imp *im, ImpNode *n) {
  return binary(im, n, "sub");
}
static bool lower_div(Imp *im, ImpNode *n) {
  return binary(im, n, "div");
}

static bool lower_pow(Imp *im, ImpNode *n) {
  double e;
  if (!imp_float(im, n, "exponent", 1, &e)) return false;
  cJSON *at = cJSON_CreateObject();
  cJSON_AddNumberToObject(at, "exponent", e);
  static const char *const args[] = {"self", NULL};
  return emit_plain(im, n, "pow", args, at);
}

static bool lower_mean_dim(Imp *im, ImpNode *n) {
  int64_t d[IMP_MAX_RANK];
  int nd;
  bool keep;
  if (!imp_ints(im, n, "dim", d, &nd, IMP_MAX_RANK) || !imp_bool(im, n, "keepdim", false, &keep))
    return false;
  if (nd != 1) {
    imp_error(im, n, "mean.dim over %d dims is not supported (one dim)", nd);
    return false;
  }
  cJSON *at = cJSON_CreateObject();
  cJSON_AddNumberToObject(at, "axis", (double)d[0]);
  if (keep) cJSON_AddBoolToObject(at, "keepdim", true);
  static const char *const args[] = {"self", NULL};
  return emit_plain(im, n, "mean", args, at);
}

static bool lower_layer_norm(Imp *im, ImpNode *n) {
  int64_t ns[IMP_MAX_RANK];
  int nn;
  double eps;
  Val *x = arg_t(im, n, "input");
  if (!x || !imp_ints(im, n, "normalized_shape", ns, &nn, IMP_MAX_RANK) ||
      !imp_float(im, n, "eps", 1e-5, &eps))
    return false;
  if (nn != 1 || imp_is_none(n, "weight")) {
    imp_error(im, n, "%s: only a normalisation over the last dim with a weight is supported",
              n->target);
    return false;
  }
  bool rms = strncmp(n->target, "rms", 3) == 0;
  if (rms && imp_is_none(n, "eps")) eps = 1.1920928955078125e-07; // torch.finfo(float32).eps
  cJSON *at = cJSON_CreateObject();
  cJSON_AddNumberToObject(at, "eps", eps);
  static const char *const a_ln[] = {"input", "weight", "?bias", NULL};
  static const char *const a_rms[] = {"input", "weight", NULL};
  return emit_plain(im, n, rms ? "rms_norm" : "layernorm", rms ? a_rms : a_ln, at);
}

// embedding(weight, indices): an embedding; positions arange(s, s+n) are rows s..s+n-1 of the
// weight (a slice).
static bool plan_embedding(Imp *im, ImpNode *n) {
  Val *w = arg_t(im, n, "weight"), *ix = arg_t(im, n, "indices");
  if (!w || !ix) return false;
  n->deps[n->ndeps++] = w;
  if (ix->kind != VAL_CONST) n->deps[n->ndeps++] = ix;
  return true;
}

static bool lower_embedding(Imp *im, ImpNode *n) {
  Val *w = arg_t(im, n, "weight"), *ix = arg_t(im, n, "indices");
  if (!imp_is_none(n, "padding_idx") && imp_arg(n, "padding_idx")) {
    int64_t p;
    if (!imp_int(im, n, "padding_idx", -1, &p)) return false;
    if (p != -1) {
      imp_error(im, n, "embedding.default: padding_idx is not supported");
      return false;
    }
  }
  if (ix->kind == VAL_CONST) {
    int64_t cnt = ishape_numel_k(&ix->shape);
    bool run = ix->shape.rank == 1 && cnt > 0 && ix->data[0] >= 0;
    for (int64_t i = 1; run && i < cnt; i++) run = ix->data[i] == ix->data[0] + (float)i;
    if (!run || ix->data[0] + (float)cnt > (float)w->shape.k[0]) {
      imp_error(im, n,
                "embedding.default: constant indices must be positions s, s+1, ... within "
                "the table");
      return false;
    }
    const char *in = real(im, w), *nm = imp_name(im, n->name);
    cJSON *at = cJSON_CreateObject();
    cJSON_AddNumberToObject(at, "axis", 0);
    cJSON_AddNumberToObject(at, "start", ix->data[0]);
    if (ix->data[0] + (float)cnt < (float)w->shape.k[0])
      cJSON_AddNumberToObject(at, "end", ix->data[0] + (float)cnt);
    imp_emit(im, nm, "slice", &in, 1, at);
    n->out[0]->pipec = nm;
    return true;
  }
  static const char *const args[] = {"indices", "weight", NULL};
  return emit_plain(im, n, "embedding", args, NULL);
}

// ---- losses

static void mark_target(Val *t) {
  Val *r = imp_root(t);
  if (r->kind == VAL_LEAF && r->is_input) r->is_target = true;
}

static bool lower_cross_entropy(Imp *im, ImpNode *n) {
  Val *x = arg_t(im, n, "self"), *t = arg_t(im, n, "target");
  int64_t red = 1;
  double ls = 0;
  if (!x || !t || !imp_int(im, n, "reduction", 1, &red) ||
      !imp_float(im, n, "label_smoothing", 0, &ls))
    return false;
  if (red != 1 || ls != 0 || !imp_is_none(n, "weight")) {
    imp_error(im, n,
              "cross_entropy_loss: only the mean reduction without class weights or label "
              "smoothing is supported");
    return false;
  }
  // logits.view(-1, V) and targets.view(-1) of (..., V) and (...): the unflattened tensors.
  if (x->kind == VAL_LAYOUT && t->kind == VAL_LAYOUT && x->nsteps == 1 && t->nsteps == 1 &&
      !x->steps[0].permute && !t->steps[0].permute) {
    IShape xb = x->base->shape, tb = t->base->shape;
    IShape xl = xb;
    xl.rank--;
    if (xb.rank >= 2 && ishape_eq(&xl, &tb) && xb.k[xb.rank - 1] == x->shape.k[x->shape.rank - 1])
      x = x->base, t = t->base;
  }
  mark_target(t);
  const char *in[2] = {real(im, x), real(im, t)};
  if (!in[0] || !in[1]) return false;
  const char *nm = imp_name(im, "loss");
  imp_emit(im, nm, "cross_entropy", in, 2, NULL);
  n->out[0]->pipec = nm;
  return true;
}

static bool lower_mse(Imp *im, ImpNode *n) {
  int64_t red = 1;
  Val *a = arg_t(im, n, "self"), *b = arg_t(im, n, "target");
  if (!a || !b || !imp_int(im, n, "reduction", 1, &red)) return false;
  if (red != 1) {
    imp_error(im, n, "mse_loss: only the mean reduction is supported");
    return false;
  }
  mark_target(b);
  const char *in[2] = {real(im, a), real(im, b)};
  if (!in[0] || !in[1]) return false;
  const char *nm = imp_name(im, "loss");
  imp_emit(im, nm, "mse_loss", in, 2, NULL);
  n->out[0]->pipec = nm;
  return true;
}

// mean(pow(sub(a, b), 2)) over every element: mse_loss(a, b) (torch.nn.functional.mse_loss as
// written out by hand, the usual regression loss).
typedef struct MseInfo {
  Val *a, *b;
} MseInfo;

static ImpNode *made_by(Val *v, const char *target) {
  ImpNode *p = v && v->kind == VAL_TENSOR ? v->producer : NULL;
  return p && strcmp(p->target, target) == 0 ? p : NULL;
}

static bool read_mean(Imp *im, ImpNode *n) {
  Val *x = arg_t(im, n, "self");
  if (!x) return false;
  ImpNode *pw = made_by(x, "pow.Tensor_Scalar"), *sb = NULL;
  double e = 0;
  const cJSON *ea = pw ? imp_arg(pw, "exponent") : NULL;
  const cJSON *ev = cJSON_GetObjectItemCaseSensitive(ea, "as_int");
  if (!ev) ev = cJSON_GetObjectItemCaseSensitive(ea, "as_float");
  if (cJSON_IsNumber(ev)) e = ev->valuedouble;
  Val *d = pw && e == 2 ? arg_q(im, pw, "self") : NULL;
  if (d) sb = made_by(d, "sub.Tensor");
  if (!sb || !arg_q(im, sb, "self") || !arg_q(im, sb, "other")) {
    imp_error(im, n,
              "mean.default (of every element) is supported as the mean of (a - b)**2, "
              "the mse loss");
    return false;
  }
  MseInfo *m = ARENA_NEW(im->a, MseInfo);
  m->a = arg_q(im, sb, "self"), m->b = arg_q(im, sb, "other");
  if (!ishape_eq(&m->a->shape, &m->b->shape)) {
    imp_error(im, n, "the mse loss needs a prediction and a target of one shape");
    return false;
  }
  n->match = m;
  return true;
}

static bool plan_mean(Imp *im, ImpNode *n) {
  (void)im;
  MseInfo *m = n->match;
  n->deps[n->ndeps++] = m->a, n->deps[n->ndeps++] = m->b;
  return true;
}

static bool lower_mean(Imp *im, ImpNode *n) {
  MseInfo *m = n->match;
  mark_target(m->b);
  const char *in[2] = {real(im, m->a), real(im, m->b)};
  if (!in[0] || !in[1]) return false;
  const char *nm = imp_name(im, "loss");
  imp_emit(im, nm, "mse_loss", in, 2, NULL);
  n->out[0]->pipec = nm;
  return true;
}

// ---- split

static bool lower_split(Imp *im, ImpNode *n) {
  Val *x = arg_t(im, n, "self");
  int64_t dim = 0;
  if (!x || !imp_int(im, n, "dim", 0, &dim)) return false;
  int ax = norm_axis(dim, x->shape.rank);
  if (ax < 0 || ax >= x->shape.rank || n->nout < 1) {
    imp_error(im, n, "%s: dim out of range", n->target);
    return false;
  }
  const char *in = real(im, x);
  if (!in) return false;
  const char *nm = imp_name(im, n->name);
  cJSON *at = cJSON_CreateObject(), *sz = cJSON_CreateArray();
  cJSON_AddNumberToObject(at, "axis", ax);
  for (int i = 0; i < n->nout; i++) {
    cJSON_AddItemToArray(sz, cJSON_CreateNumber((double)n->out[i]->shape.k[ax]));
    n->out[i]->pipec = arena_printf(im->a, "%s:%d", nm, i);
  }
  cJSON_AddItemToObject(at, "sizes", sz);
  imp_emit(im, nm, "split", &in, 1, at);
  return true;
}

// ---- attention

typedef struct AttnInfo {
  Val *q, *k, *v; // (B,T,C) and (B,T,Ckv)
  int nh, nkv;
  bool causal;
  Val *out; // (B,T,C): the attention's tensor
} AttnInfo;

// k of (B,Hq,T,D) made by repeat_kv from (B,KV,T,D): the unrepeated tensor (Llama's
// unsqueeze/expand/clone/view before the transpose, Hugging Face's after it); else k itself.
static Val *strip_repeat_kv(Imp *im, Val *k) {
  if (k->kind != VAL_LAYOUT || k->nsteps < 1 || k->base->kind != VAL_EXPAND || k->steps[0].permute)
    return k;
  Val *e = k->base, *src = e->base;
  const IShape *es = &e->shape, *ss = &src->shape, *rs = &k->steps[0].shape;
  if (es->rank != ss->rank || rs->rank != es->rank - 1) return k;
  int j = -1;
  for (int d = 0; d < es->rank; d++)
    if (es->k[d] != ss->k[d] || es->b[d] != ss->b[d]) {
      if (j >= 0 || ss->k[d] != 1 || ss->b[d] || d == 0) return k;
      j = d;
    }
  if (j < 0) return k;
  for (int d = 0, o = 0; d < es->rank; d++, o++) { // rs is es with dims j-1 and j merged
    if (d == j - 1) {
      if (rs->k[o] != es->k[d] * es->k[d + 1] || rs->b[o] != es->b[d]) return k;
      d++;
    } else if (rs->k[o] != es->k[d] || rs->b[o] != es->b[d])
      return k;
  }
  IShape un = *ss;
  for (int d = j; d < un.rank - 1; d++) un.k[d] = un.k[d + 1], un.b[d] = un.b[d + 1];
  un.rank--;
  Val *r = imp_reshape(im, src, &un);
  for (int i = 1; i < k->nsteps; i++) {
    if (!k->steps[i].permute) return k;
    r = imp_permute(im, r, k->steps[i].perm);
  }
  return r;
}

// A constant boolean mask (..., T, T) that is causal (s <= t) or all true: is_causal.
static bool mask_causal(Imp *im, ImpNode *n, Val *m, bool *causal) {
  int r = m ? m->shape.rank : 0;
  if (!m || m->kind != VAL_CONST || m->dtype != 12 || r < 2 ||
      m->shape.k[r - 1] != m->shape.k[r - 2]) {
    imp_error(im, n,
              "scaled_dot_product_attention: attn_mask must be a constant boolean (..., T, "
              "T) mask, causal or empty (or use is_causal=True)");
    return false;
  }
  int64_t T = m->shape.k[r - 1], cnt = ishape_numel_k(&m->shape);
  bool tri = true, all = true;
  for (int64_t i = 0; i < cnt; i++) {
    int64_t t = i / T % T, s = i % T;
    tri &= (m->data[i] != 0) == (s <= t);
    all &= m->data[i] != 0;
  }
  if (*causal || (!tri && !all)) {
    imp_error(im, n,
              "scaled_dot_product_attention: attn_mask is %s; pipec's attention takes a "
              "causal mask or none",
              *causal ? "given with is_causal=True" : "neither causal nor empty");
    return false;
  }
  *causal = tri && !all;
  return true;
}

// (B,H,T,D) -> (B,T,H·D): the transpose undone, the heads merged.
static Val *heads_to_btc(Imp *im, Val *x) {
  static const int perm[4] = {0, 2, 1, 3};
  Val *y = imp_permute(im, x, perm);
  IShape s = y->shape;
  s.rank = 3, s.k[2] = y->shape.k[2] * y->shape.k[3], s.b[2] = false;
  return imp_reshape(im, y, &s);
}

static bool read_sdpa(Imp *im, ImpNode *n) {
  Val *q = arg_t(im, n, "query"), *k = arg_t(im, n, "key"), *v = arg_t(im, n, "value");
  double drop, scale;
  bool causal, gqa;
  if (!q || !k || !v || !imp_float(im, n, "dropout_p", 0, &drop) ||
      !imp_bool(im, n, "is_causal", false, &causal) || !imp_float(im, n, "scale", NAN, &scale) ||
      !imp_bool(im, n, "enable_gqa", false, &gqa))
    return false;
  if (!imp_is_none(n, "attn_mask") && !mask_causal(im, n, arg_q(im, n, "attn_mask"), &causal))
    return false;
  if (drop != 0) {
    imp_error(im, n, "scaled_dot_product_attention: dropout_p = %g is not supported (0)", drop);
    return false;
  }
  if (q->shape.rank != 4 || q->shape.b[1] || q->shape.b[2] || q->shape.b[3]) {
    imp_error(im, n, "scaled_dot_product_attention: query %s is not (B, heads, T, head_dim)",
              ishape_str(im, &q->shape));
    return false;
  }
  int64_t D = q->shape.k[3];
  if (!isnan(scale) && fabs(scale * sqrt((double)D) - 1) > 1e-6) {
    imp_error(im, n, "scaled_dot_product_attention: scale = %g is not 1/sqrt(head_dim) = %g", scale,
              1 / sqrt((double)D));
    return false;
  }
  AttnInfo *ai = ARENA_NEW(im->a, AttnInfo);
  Val *k4 = strip_repeat_kv(im, k), *v4 = strip_repeat_kv(im, v);
  if (!ishape_eq(&k4->shape, &v4->shape) || k4->shape.rank != 4 || k4->shape.k[3] != D ||
      k4->shape.k[2] != q->shape.k[2] || q->shape.k[1] % k4->shape.k[1] != 0) {
    imp_error(im, n, "scaled_dot_product_attention: key %s and value %s do not fit query %s",
              ishape_str(im, &k->shape), ishape_str(im, &v->shape), ishape_str(im, &q->shape));
    return false;
  }
  ai->nh = (int)q->shape.k[1], ai->nkv = (int)k4->shape.k[1], ai->causal = causal;
  ai->q = heads_to_btc(im, q), ai->k = heads_to_btc(im, k4), ai->v = heads_to_btc(im, v4);
  ai->out = imp_new_val(im, VAL_TENSOR, &ai->q->shape, q->dtype, n);
  n->match = ai;
  IShape bthd = ai->q->shape;
  bthd.rank = 4, bthd.k[2] = ai->nh, bthd.k[3] = D;
  static const int perm[4] = {0, 2, 1, 3};
  set_out(n->out[0], imp_permute(im, imp_reshape(im, ai->out, &bthd), perm));
  return true;
}

static bool plan_sdpa(Imp *im, ImpNode *n) {
  (void)im;
  AttnInfo *ai = n->match;
  n->deps[n->ndeps++] = ai->q, n->deps[n->ndeps++] = ai->k, n->deps[n->ndeps++] = ai->v;
  return true;
}

static bool lower_sdpa(Imp *im, ImpNode *n) {
  AttnInfo *ai = n->match;
  const char *in[3] = {real(im, ai->q), real(im, ai->k), real(im, ai->v)};
  if (!in[0] || !in[1] || !in[2]) return false;
  const char *nm = imp_name(im, "attention");
  cJSON *at = cJSON_CreateObject();
  cJSON_AddNumberToObject(at, "n_head", ai->nh);
  if (ai->nkv != ai->nh) cJSON_AddNumberToObject(at, "n_kv_head", ai->nkv);
  if (!ai->causal) cJSON_AddBoolToObject(at, "causal", false);
  imp_emit(im, nm, "attention", in, 3, at);
  ai->out->pipec = nm;
  return true;
}

// ---- RoPE

typedef struct RopeInfo {
  Val *x; // (B,T,H,D) or (B,H,T,D)
  double theta;
  bool interleaved;
  int seq_axis;
  Val *out; // the rope's tensor, x's shape
} RopeInfo;

typedef struct Rot { // x_a·c − x_b·s and x_b·c + x_a·s
  Val *a, *b, *c, *s;
} Rot;

static bool mul_of(Imp *im, Val *m, Val **x, Val **t) {
  ImpNode *p = made_by(m, "mul.Tensor");
  if (!p) return false;
  Val *u = arg_q(im, p, "self"), *w = arg_q(im, p, "other");
  if (!u || !w) return false;
  if (u->kind == VAL_CONST && w->kind != VAL_CONST)
    *x = w, *t = u;
  else if (w->kind == VAL_CONST && u->kind != VAL_CONST)
    *x = u, *t = w;
  else
    return false;
  return true;
}

static bool match_rot(Imp *im, Val *r, Val *i, Rot *o) {
  ImpNode *sb = made_by(r, "sub.Tensor"), *ad = made_by(i, "add.Tensor");
  if (!sb || !ad) return false;
  Val *x1, *c1, *x2, *s1, *y1, *t1, *y2, *t2,
      *m[4] = {arg_q(im, sb, "self"), arg_q(im, sb, "other"), arg_q(im, ad, "self"),
               arg_q(im, ad, "other")};
  if (!m[0] || !m[1] || !m[2] || !m[3] || !mul_of(im, m[0], &x1, &c1) ||
      !mul_of(im, m[1], &x2, &s1) || !mul_of(im, m[2], &y1, &t1) || !mul_of(im, m[3], &y2, &t2))
    return false;
  // add: b·c + a·s in either order
  if (y1 == x1 && y2 == x2) {
    Val *tv = y1;
    y1 = y2, y2 = tv;
    tv = t1;
    t1 = t2, t2 = tv;
  }
  if (y1 != x2 || y2 != x1 || t1 != c1 || t2 != s1) return false;
  *o = (Rot){x1, x2, c1, s1};
  return true;
}

// The table of a constant c broadcast against a (B?, ..., T, ..., D/2): value [t][i], and the axis
// of a that t runs along. False when c is not (1, .., T, .., D/2).
static bool table_of(const Val *c, const Val *a, int *seq, int64_t *T) {
  int r = a->shape.rank, off = r - c->shape.rank;
  if (off < 0) return false;
  *seq = -1;
  for (int d = 0; d < c->shape.rank; d++) {
    int ad = d + off;
    if (c->shape.b[d]) return false;
    if (ad == r - 1) {
      if (c->shape.k[d] != a->shape.k[ad]) return false;
    } else if (c->shape.k[d] != 1) {
      if (*seq >= 0 || c->shape.k[d] != a->shape.k[ad] || a->shape.b[ad]) return false;
      *seq = ad;
    }
  }
  if (*seq < 0) return false;
  *T = a->shape.k[*seq];
  return true;
}

// Checks the tables against the recipe (docs/ops.md, rope) and finds theta.
static bool rope_theta(const float *cs, const float *sn, int64_t T, int64_t half, double *theta) {
  if (T < 2 || half < 2) return false;
  double a1 = atan2(sn[1 * half + 1], cs[1 * half + 1]); // angle(t=1, i=1) = theta^(-2/D)
  if (!(a1 > 0) || a1 >= 1) return false;
  double est = pow(a1, -(double)half), cand[2] = {round(est), est}, best = INFINITY;
  for (int k = 0; k < 2; k++) {
    double err = 0;
    float th = (float)cand[k];
    for (int64_t i = 0; i < half; i++) {
      float e = (float)(2 * i) / (float)(2 * half);
      float inv = 1.0f / (float)pow((double)th, (double)e);
      for (int64_t t = 0; t < T; t++) {
        float ang = (float)t * inv;
        double dc = fabs(cos((double)ang) - cs[t * half + i]);
        double ds = fabs(sin((double)ang) - sn[t * half + i]);
        err = fmax(err, fmax(dc, ds));
      }
    }
    if (err < best) best = err, *theta = cand[k];
  }
  return best <= 1e-6 + (double)T * 0x1p-22;
}

static bool table_data(const Val *c, int seq_c, int64_t T, int64_t half, float *out) {
  // c is (1.., T, 1.., half) row-major: entry [t][i] at t*stride + i, the stride of T's dim.
  int64_t stride = 1;
  for (int d = c->shape.rank - 1; d > seq_c; d--) stride *= c->shape.k[d];
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = 0; i < half; i++) out[t * half + i] = c->data[t * stride + i];
  return true;
}

static bool read_cat(Imp *im, ImpNode *n) {
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(imp_arg(n, "tensors"), "as_tensors");
  int64_t dim = 0;
  if (!imp_int(im, n, "dim", 0, &dim)) return false;
  Val *o = n->out[0];
  if (cJSON_GetArraySize(l) != 2 || norm_axis(dim, o->shape.rank) != o->shape.rank - 1) return true;
  const cJSON *n1 = cJSON_GetObjectItemCaseSensitive(l->child, "name");
  const cJSON *n2 = cJSON_GetObjectItemCaseSensitive(l->child->next, "name");
  Val *p1 = cJSON_IsString(n1) ? imp_val(im, n1->valuestring) : NULL;
  Val *p2 = cJSON_IsString(n2) ? imp_val(im, n2->valuestring) : NULL;
  if (!p1 || !p2) return true;
  bool inter = o->shape.k[o->shape.rank - 1] == 2;
  Val *r = inter && p1->kind == VAL_LAYOUT && p1->nsteps == 1 ? p1->base : p1;
  Val *i = inter && p2->kind == VAL_LAYOUT && p2->nsteps == 1 ? p2->base : p2;
  Rot rot;
  if (!match_rot(im, r, i, &rot)) return true;
  ImpNode *pa = made_by(rot.a, inter ? "select.int" : "slice.Tensor");
  ImpNode *pb = made_by(rot.b, inter ? "select.int" : "slice.Tensor");
  SliceInfo *sa = pa ? pa->match : NULL, *sb = pb ? pb->match : NULL;
  if (!sa || !sb || sa->x != sb->x || sa->axis != sa->x->shape.rank - 1 || sb->axis != sa->axis)
    return true;
  Val *x = sa->x;
  int64_t half;
  if (x->shape.rank < 3) return true;
  if (inter) {
    if (sa->start != 0 || sb->start != 1 || x->shape.k[sa->axis] != 2) return true;
    half = x->shape.k[x->shape.rank - 2];
    IShape xs = x->shape;
    xs.rank--, xs.k[xs.rank - 1] = 2 * half;
    x = imp_reshape(im, x, &xs);
  } else {
    half = x->shape.k[sa->axis] / 2;
    if (x->shape.k[sa->axis] != 2 * half || sa->start != 0 || sa->end != half ||
        sb->start != half || sb->end != 2 * half)
      return true;
  }
  int seq, seq2;
  int64_t T, T2;
  if (x->shape.rank != 4 || !table_of(rot.c, rot.a, &seq, &T) ||
      !table_of(rot.s, rot.a, &seq2, &T2) || seq != seq2 || (seq != 1 && seq != 2)) {
    imp_error(im, n,
              "a RoPE rotation whose cos and sin tables are not (T, head_dim/2) over a "
              "(B, T, H, D) or (B, H, T, D) tensor");
    return false;
  }
  int off = rot.a->shape.rank - rot.c->shape.rank;
  float *cs = arena_alloc(im->a, (size_t)(T * half) * sizeof(float));
  float *sn = arena_alloc(im->a, (size_t)(T * half) * sizeof(float));
  table_data(rot.c, seq - off, T, half, cs);
  table_data(rot.s, seq - off, T, half, sn);
  RopeInfo *ri = ARENA_NEW(im->a, RopeInfo);
  if (!rope_theta(cs, sn, T, half, &ri->theta)) {
    imp_error(im, n,
              "the RoPE tables (%s%s) are not cos and sin of positions 0..%lld times "
              "1/theta^(2i/%lld) for any theta (scaled RoPE variants are not supported)",
              rot.c->fqn ? "buffer " : "", rot.c->fqn ? rot.c->fqn : "constants", (long long)T - 1,
              (long long)(2 * half));
    return false;
  }
  ri->x = x, ri->interleaved = inter, ri->seq_axis = seq;
  ri->out = o->shape.rank == 4 ? o : imp_new_val(im, VAL_TENSOR, &x->shape, o->dtype, n);
  ri->out->producer = n;
  n->match = ri;
  if (ri->out != o) set_out(o, imp_reshape(im, ri->out, &o->shape));
  return true;
}

static bool emit_rope(Imp *im, RopeInfo *ri) {
  const char *in = real(im, ri->x);
  if (!in) return false;
  const char *nm = imp_name(im, "rope");
  cJSON *at = cJSON_CreateObject();
  cJSON_AddNumberToObject(at, "theta", ri->theta);
  cJSON_AddStringToObject(at, "pairing", ri->interleaved ? "interleaved" : "half");
  if (ri->seq_axis != 1) cJSON_AddNumberToObject(at, "seq_axis", ri->seq_axis);
  imp_emit(im, nm, "rope", &in, 1, at);
  ri->out->pipec = nm;
  return true;
}

// Hugging Face's apply_rotary_pos_emb: x·cos + rotate_half(x)·sin, rotate_half(x) =
// cat(−x[..., D/2:], x[..., :D/2]), cos and sin constant (1.., T, D) tables of [c, c] halves.
static bool read_add(Imp *im, ImpNode *n) {
  Val *m1 = arg_q(im, n, "self"), *m2 = arg_q(im, n, "other"), *x, *c, *r, *sn;
  if (!m1 || !m2) return true;
  for (int sw = 0; sw < 2; sw++) {
    Val *p = sw ? m2 : m1, *q = sw ? m1 : m2;
    if (!mul_of(im, p, &x, &c) || !mul_of(im, q, &r, &sn)) continue;
    ImpNode *ct = made_by(r, "cat.default");
    const cJSON *l =
        ct ? cJSON_GetObjectItemCaseSensitive(imp_arg(ct, "tensors"), "as_tensors") : NULL;
    if (cJSON_GetArraySize(l) != 2) continue;
    const cJSON *n1 = cJSON_GetObjectItemCaseSensitive(l->child, "name");
    const cJSON *n2 = cJSON_GetObjectItemCaseSensitive(l->child->next, "name");
    Val *ng = cJSON_IsString(n1) ? imp_val(im, n1->valuestring) : NULL;
    Val *lo = cJSON_IsString(n2) ? imp_val(im, n2->valuestring) : NULL;
    ImpNode *pn = ng ? made_by(ng, "neg.default") : NULL;
    Val *hi = pn ? arg_q(im, pn, "self") : NULL;
    ImpNode *sl = lo ? made_by(lo, "slice.Tensor") : NULL,
            *sh = hi ? made_by(hi, "slice.Tensor") : NULL;
    SliceInfo *a = sl ? sl->match : NULL, *b = sh ? sh->match : NULL;
    int rk = x->shape.rank;
    if (!a || !b || a->x != x || b->x != x || rk != 4 || a->axis != rk - 1 || b->axis != rk - 1)
      continue;
    int64_t D = x->shape.k[rk - 1], half = D / 2;
    if (D != 2 * half || a->start != 0 || a->end != half || b->start != half || b->end != D)
      continue;
    int seq, seq2;
    int64_t T, T2;
    if (!table_of(c, x, &seq, &T) || !table_of(sn, x, &seq2, &T2) || seq != seq2 ||
        (seq != 1 && seq != 2)) {
      imp_error(im, n,
                "a RoPE rotation whose cos and sin tables are not (T, head_dim) over a "
                "(B, T, H, D) or (B, H, T, D) tensor");
      return false;
    }
    int off = rk - c->shape.rank;
    float *fc = arena_alloc(im->a, (size_t)(T * D) * sizeof(float));
    float *fs = arena_alloc(im->a, (size_t)(T * D) * sizeof(float));
    table_data(c, seq - off, T, D, fc);
    table_data(sn, seq - off, T, D, fs);
    float *cs = arena_alloc(im->a, (size_t)(T * half) * sizeof(float));
    float *ss = arena_alloc(im->a, (size_t)(T * half) * sizeof(float));
    bool dup = true;
    for (int64_t t = 0; t < T; t++)
      for (int64_t i = 0; i < half; i++) {
        cs[t * half + i] = fc[t * D + i], ss[t * half + i] = fs[t * D + i];
        dup &= fc[t * D + i] == fc[t * D + i + half] && fs[t * D + i] == fs[t * D + i + half];
      }
    RopeInfo *ri = ARENA_NEW(im->a, RopeInfo);
    if (!dup || !rope_theta(cs, ss, T, half, &ri->theta)) {
      imp_error(im, n,
                "the RoPE tables (%s) are not cos and sin of positions 0..%lld times "
                "1/theta^(2i/%lld) for any theta (scaled RoPE variants are not supported)",
                c->fqn ? c->fqn : "constants", (long long)T - 1, (long long)D);
      return false;
    }
    ri->interleaved = false;
    static const int perm[4] = {0, 2, 1, 3};
    if (seq == 2) { // (B,H,T,D): rotate the (B,T,H,D) tensor it is the transpose of
      ri->x = imp_permute(im, x, perm), ri->seq_axis = 1;
      ri->out = imp_new_val(im, VAL_TENSOR, &ri->x->shape, n->out[0]->dtype, n);
      set_out(n->out[0], imp_permute(im, ri->out, perm));
    } else {
      ri->x = x, ri->seq_axis = seq, ri->out = n->out[0];
    }
    n->match = ri;
    return true;
  }
  return true;
}

// Meta's apply_rotary_emb: view_as_real(view_as_complex(x.view(..., D/2, 2)) · freqs_cis), the
// complex constant freqs_cis (1.., T, .., D/2) of cos + i·sin.
static bool read_view_as_real(Imp *im, ImpNode *n) {
  Val *m = arg_q(im, n, "self"), *xc = NULL, *f = NULL;
  ImpNode *mn = m ? made_by(m, "mul.Tensor") : NULL;
  Val *u = mn ? arg_q(im, mn, "self") : NULL, *w = mn ? arg_q(im, mn, "other") : NULL;
  if (u && w) xc = u->kind == VAL_CONST ? w : u, f = u->kind == VAL_CONST ? u : w;
  ImpNode *vc = xc ? made_by(xc, "view_as_complex.default") : NULL;
  Val *p = vc ? arg_q(im, vc, "self") : NULL, *o = n->out[0];
  int seq;
  int64_t T;
  if (!p || f->kind != VAL_CONST || f->dtype != 10 || p->shape.rank != 5 || o->shape.rank != 5 ||
      !table_of(f, xc, &seq, &T) || (seq != 1 && seq != 2)) {
    imp_error(im, n,
              "view_as_real is supported as Meta's RoPE: view_as_real(view_as_complex(x) "
              "* freqs_cis) with a constant freqs_cis of (T, head_dim/2)");
    return false;
  }
  int64_t half = p->shape.k[3], stride = 1;
  int off = xc->shape.rank - f->shape.rank;
  for (int d = f->shape.rank - 1; d > seq - off; d--) stride *= f->shape.k[d];
  float *cs = arena_alloc(im->a, (size_t)(T * half) * sizeof(float));
  float *sn = arena_alloc(im->a, (size_t)(T * half) * sizeof(float));
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = 0; i < half; i++)
      cs[t * half + i] = f->data[2 * (t * stride + i)],
                    sn[t * half + i] = f->data[2 * (t * stride + i) + 1];
  RopeInfo *ri = ARENA_NEW(im->a, RopeInfo);
  if (!rope_theta(cs, sn, T, half, &ri->theta)) {
    imp_error(im, n,
              "the RoPE table (%s) is not cos + i sin of positions 0..%lld times "
              "1/theta^(2i/%lld) for any theta (scaled RoPE variants are not supported)",
              f->fqn ? f->fqn : "a constant", (long long)T - 1, (long long)(2 * half));
    return false;
  }
  IShape xs = p->shape;
  xs.rank = 4, xs.k[3] = 2 * half;
  ri->x = imp_reshape(im, p, &xs), ri->interleaved = true, ri->seq_axis = seq;
  ri->out = imp_new_val(im, VAL_TENSOR, &xs, o->dtype, n);
  n->match = ri;
  set_out(o, imp_reshape(im, ri->out, &o->shape));
  return true;
}

static bool plan_rope(Imp *im, ImpNode *n) {
  (void)im;
  n->deps[n->ndeps++] = ((RopeInfo *)n->match)->x;
  return true;
}

static bool lower_rope(Imp *im, ImpNode *n) {
  return emit_rope(im, n->match);
}

static bool lower_complex(Imp *im, ImpNode *n) {
  imp_error(im, n,
            "%s: complex tensors are supported only in RoPE's form (view_as_complex, a "
            "mul by a constant freqs_cis, view_as_real)",
            n->target);
  return false;
}

static bool plan_rope_or(Imp *im, ImpNode *n) {
  RopeInfo *ri = n->match;
  (void)im;
  if (ri) {
    n->deps[n->ndeps++] = ri->x;
    return true;
  }
  Val *a = arg_q(im, n, "self"), *b = arg_q(im, n, "other");
  if (a) n->deps[n->ndeps++] = a;
  if (b) n->deps[n->ndeps++] = b;
  return true;
}

static bool lower_add_or_rope(Imp *im, ImpNode *n) {
  return n->match ? emit_rope(im, n->match) : binary(im, n, "add");
}

// Hugging Face's LlamaRMSNorm written out: weight · (x · rsqrt(mean(x², -1, keepdim) + eps)).
typedef struct RmsInfo {
  Val *x, *w;
  double eps;
} RmsInfo;

static ImpNode *through(Val *v, const char *target) {
  return made_by(v, target);
}

static bool read_mul(Imp *im, ImpNode *n) {
  Val *u = arg_q(im, n, "self"), *v = arg_q(im, n, "other");
  for (int sw = 0; u && v && sw < 2; sw++) {
    Val *w = sw ? v : u, *y = sw ? u : v;
    if (w->kind != VAL_LEAF || w->is_input || w->shape.rank != 1) continue;
    ImpNode *m = through(y, "mul.Tensor");
    Val *a = m ? arg_q(im, m, "self") : NULL, *b = m ? arg_q(im, m, "other") : NULL;
    for (int s2 = 0; a && b && s2 < 2; s2++) {
      Val *x = s2 ? b : a, *rs = s2 ? a : b;
      ImpNode *rq = through(rs, "rsqrt.default");
      ImpNode *ad = rq ? through(arg_q(im, rq, "self"), "add.Tensor") : NULL;
      const cJSON *ea = ad ? imp_arg(ad, "other") : NULL;
      const cJSON *ev = cJSON_GetObjectItemCaseSensitive(ea, "as_float");
      ImpNode *mn = ad ? through(arg_q(im, ad, "self"), "mean.dim") : NULL;
      ImpNode *pw = mn ? through(arg_q(im, mn, "self"), "pow.Tensor_Scalar") : NULL;
      const cJSON *pe =
          pw ? cJSON_GetObjectItemCaseSensitive(imp_arg(pw, "exponent"), "as_int") : NULL;
      const cJSON *dims =
          mn ? cJSON_GetObjectItemCaseSensitive(imp_arg(mn, "dim"), "as_ints") : NULL;
      const cJSON *kd =
          mn ? cJSON_GetObjectItemCaseSensitive(imp_arg(mn, "keepdim"), "as_bool") : NULL;
      if (!pw || !cJSON_IsNumber(ev) || !(ev->valuedouble > 0) || !cJSON_IsNumber(pe) ||
          pe->valuedouble != 2 || arg_q(im, pw, "self") != x || cJSON_GetArraySize(dims) != 1 ||
          !cJSON_IsTrue(kd) || x->shape.rank < 1 || w->shape.k[0] != x->shape.k[x->shape.rank - 1])
        continue;
      int dm = (int)dims->child->valuedouble;
      if (dm != -1 && dm != x->shape.rank - 1) continue;
      RmsInfo *ri = ARENA_NEW(im->a, RmsInfo);
      *ri = (RmsInfo){x, w, ev->valuedouble};
      n->match = ri;
      return true;
    }
  }
  return true;
}

static bool plan_mul(Imp *im, ImpNode *n) {
  RmsInfo *ri = n->match;
  if (ri) {
    n->deps[n->ndeps++] = ri->x, n->deps[n->ndeps++] = ri->w;
    return true;
  }
  Val *a = arg_q(im, n, "self"), *b = arg_q(im, n, "other");
  if (a) n->deps[n->ndeps++] = a;
  if (b) n->deps[n->ndeps++] = b;
  return true;
}

static bool lower_mul_or_rms(Imp *im, ImpNode *n) {
  RmsInfo *ri = n->match;
  if (!ri) return binary(im, n, "mul");
  const char *in[2] = {real(im, ri->x), real(im, ri->w)};
  if (!in[0] || !in[1]) return false;
  const char *nm = imp_name_of(im, "rms_norm", ri->w);
  cJSON *at = cJSON_CreateObject();
  cJSON_AddNumberToObject(at, "eps", ri->eps);
  imp_emit(im, nm, "rms_norm", in, 2, at);
  n->out[0]->pipec = nm;
  return true;
}

static bool plan_cat(Imp *im, ImpNode *n) {
  RopeInfo *ri = n->match;
  if (ri) {
    n->deps[n->ndeps++] = ri->x;
    return true;
  }
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(imp_arg(n, "tensors"), "as_tensors"), *e;
  cJSON_ArrayForEach(e, l) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
    Val *v = cJSON_IsString(nm) ? imp_val(im, nm->valuestring) : NULL;
    if (!v || n->ndeps == IMP_MAX_DEPS) {
      imp_error(im, n, "cat.default: at most %d tensors of the graph", IMP_MAX_DEPS);
      return false;
    }
    n->deps[n->ndeps++] = v;
  }
  return true;
}

static bool lower_cat(Imp *im, ImpNode *n) {
  RopeInfo *ri = n->match;
  if (ri) return emit_rope(im, ri);
  int64_t dim = 0;
  if (!imp_int(im, n, "dim", 0, &dim)) return false;
  const char *in[IMP_MAX_DEPS];
  for (int i = 0; i < n->ndeps; i++)
    if (!(in[i] = real(im, n->deps[i]))) return false;
  const char *nm = imp_name(im, n->name);
  cJSON *at = cJSON_CreateObject();
  cJSON_AddNumberToObject(at, "axis", norm_axis(dim, n->out[0]->shape.rank));
  imp_emit(im, nm, "concat", in, n->ndeps, at);
  n->out[0]->pipec = nm;
  return true;
}

static bool lower_const(Imp *im, ImpNode *n) {
  imp_error(im, n,
            "%s is supported on constants only (values computed from buffers and "
            "positions, such as masks and RoPE tables)",
            n->target);
  return false;
}

static bool lower_never(Imp *im, ImpNode *n) {
  imp_error(im, n, "%s is supported only inside a pattern (repeat_kv's expand before attention)",
            n->target);
  return false;
}

// ---- the table

#define LAYOUT(t, f)                                                                               \
  { t, "(layout)", f, NULL, lower_never }
static const AtenRow rows[] = {
    {"linear.default", "linear", NULL, NULL, lower_linear},
    {"embedding.default", "embedding", NULL, plan_embedding, lower_embedding},
    {"layer_norm.default", "layernorm", NULL, NULL, lower_layer_norm},
    {"rms_norm.default", "rms_norm", NULL, NULL, lower_layer_norm},
    {"scaled_dot_product_attention.default", "attention", read_sdpa, plan_sdpa, lower_sdpa},
    {"cross_entropy_loss.default", "cross_entropy", NULL, NULL, lower_cross_entropy},
    {"mse_loss.default", "mse_loss", NULL, NULL, lower_mse},
    {"mean.default", "mse_loss (mean of (a-b)**2)", read_mean, plan_mean, lower_mean},
    {"mean.dim", "mean", NULL, NULL, lower_mean_dim},
    {"gelu.default", "gelu", NULL, NULL, lower_gelu},
    {"silu.default", "silu", NULL, NULL, lower_silu},
    {"relu.default", "relu", NULL, NULL, lower_relu},
    {"tanh.default", "tanh", NULL, NULL, lower_tanh},
    {"sigmoid.default", "sigmoid", NULL, NULL, lower_sigmoid},
    {"neg.default", "neg", NULL, NULL, lower_neg},
    {"exp.default", "exp", NULL, NULL, lower_exp},
    {"rsqrt.default", "rsqrt", NULL, NULL, lower_rsqrt},
    {"add.Tensor", "add (or rope)", read_add, plan_rope_or, lower_add_or_rope},
    {"sub.Tensor", "sub", NULL, NULL, lower_sub},
    {"mul.Tensor", "mul (or rms_norm)", read_mul, plan_mul, lower_mul_or_rms},
    {"div.Tensor", "div", NULL, NULL, lower_div},
    {"pow.Tensor_Scalar", "pow", NULL, NULL, lower_pow},
    {"split_with_sizes.default", "split", NULL, NULL, lower_split},
    {"split.Tensor", "split", NULL, NULL, lower_split},
    {"cat.default", "concat (or rope)", read_cat, plan_cat, lower_cat},
    {"slice.Tensor", "slice", read_slice, plan_slice, lower_slice},
    {"select.int", "slice + reshape", read_slice, plan_slice, lower_slice},
    {"arange.start_step", "(positions)", read_arange, NULL, lower_never},
    {"arange.start", "(positions)", read_arange, NULL, lower_never},
    {"arange.default", "(positions)", read_arange, NULL, lower_never},
    {"expand.default", "(repeat_kv)", read_expand, NULL, lower_never},
    {"view_as_real.default", "rope (Meta's complex form)", read_view_as_real, plan_rope,
     lower_rope},
    {"view_as_complex.default", "(in rope)", NULL, NULL, lower_complex},
    {"cos.default", "(constants)", NULL, NULL, lower_const},
    {"sin.default", "(constants)", NULL, NULL, lower_const},
    {"cumsum.default", "(constants)", NULL, NULL, lower_const},
    {"index.Tensor", "(constants)", NULL, NULL, lower_const},
    {"full.default", "(constants)", NULL, NULL, lower_const},
    {"eq.Tensor", "(constants)", NULL, NULL, lower_const},
    {"eq.Scalar", "(constants)", NULL, NULL, lower_const},
    {"ne.Tensor", "(constants)", NULL, NULL, lower_const},
    {"ne.Scalar", "(constants)", NULL, NULL, lower_const},
    {"le.Tensor", "(constants)", NULL, NULL, lower_const},
    {"le.Scalar", "(constants)", NULL, NULL, lower_const},
    {"lt.Tensor", "(constants)", NULL, NULL, lower_const},
    {"lt.Scalar", "(constants)", NULL, NULL, lower_const},
    {"ge.Tensor", "(constants)", NULL, NULL, lower_const},
    {"ge.Scalar", "(constants)", NULL, NULL, lower_const},
    {"gt.Tensor", "(constants)", NULL, NULL, lower_const},
    {"gt.Scalar", "(constants)", NULL, NULL, lower_const},
    {"bitwise_and.Tensor", "(constants)", NULL, NULL, lower_const},
    {"bitwise_or.Tensor", "(constants)", NULL, NULL, lower_const},
    {"logical_and.default", "(constants)", NULL, NULL, lower_const},
    {"logical_or.default", "(constants)", NULL, NULL, lower_const},
    {"add.Scalar", "(constants)", NULL, NULL, lower_const},
    {"sub.Scalar", "(constants)", NULL, NULL, lower_const},
    {"mul.Scalar", "(constants)", NULL, NULL, lower_const},
    LAYOUT("view.default", read_reshape),
    LAYOUT("_unsafe_view.default", read_reshape),
    LAYOUT("reshape.default", read_reshape),
    LAYOUT("unsqueeze.default", read_reshape),
    LAYOUT("squeeze.dim", read_reshape),
    LAYOUT("squeeze.dims", read_reshape),
    LAYOUT("flatten.using_ints", read_reshape),
    LAYOUT("unflatten.int", read_reshape),
    LAYOUT("permute.default", read_permute),
    LAYOUT("transpose.int", read_transpose),
    LAYOUT("t.default", read_transpose),
    LAYOUT("clone.default", read_identity),
    LAYOUT("alias.default", read_identity),
    LAYOUT("detach.default", read_identity),
    LAYOUT("contiguous.default", read_identity),
    LAYOUT("_to_copy.default", read_identity),
    LAYOUT("to.dtype", read_identity),
    LAYOUT("_assert_tensor_metadata.default", read_nothing),
    LAYOUT("sym_size.int", read_nothing),
};

const AtenRow *aten_row(const char *target) {
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    if (strcmp(rows[i].target, target) == 0) return &rows[i];
  return NULL;
}

int aten_row_count(void) {
  return (int)(sizeof rows / sizeof rows[0]);
}
const AtenRow *aten_row_at(int i) {
  return &rows[i];
}

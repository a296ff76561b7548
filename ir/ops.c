// Op set v1: the registry table and each op's shape rule and cost (formulas in docs/ops.md).
//
// A shape rule reads n->in[*]->shape/dtype and n->attrs, reports any mismatch with node_error in
// the form "input 'x' has shape (B,64) but matmul needs (...,128)", and sets n->out[*]. Costs are
// per call with the batch symbol bound; bytes are always the inputs' and outputs' sizes.
#include "ops_impl.h"

#include <float.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Helpers shared by the rules

void node_error(Diag *d, const Node *n, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  diag_error(d, n->loc, "%s \"%s\": %s", n->path ? n->path : "node", n->name, msg);
}

const char *fmt_shape(const Graph *g, const Shape *s) {
  static char bufs[8][256];
  static int next;
  char *b = bufs[next++ & 7];
  return shape_str(b, 256, s, g->batch_sym);
}

static const char *fmt_dim(const Graph *g, Dim d) {
  static char bufs[8][64];
  static int next;
  char *b = bufs[next++ & 7];
  return dim_str(b, 64, d, g->batch_sym);
}

static double numel(const Tensor *t, int64_t batch) {
  return (double)shape_numel(&t->shape, batch);
}

static double io_bytes(const Node *n, int64_t batch) {
  double b = 0;
  for (int i = 0; i < n->nin; i++) b += numel(n->in[i], batch) * dtype_size(n->in[i]->dtype);
  // Visible outputs only: hidden ones (saved for backward) are not part of the op's I/O
  // (docs/ops.md).
  for (int i = 0; i < node_visible_outputs(n); i++)
    b += numel(n->out[i], batch) * dtype_size(n->out[i]->dtype);
  return b;
}

static void set_out(Node *n, int k, const Shape *s, DType t) {
  n->out[k]->shape = *s;
  n->out[k]->dtype = t;
}

static bool want_float(const Graph *g, Node *n, Diag *d, int slot) {
  (void)g;
  if (dtype_is_float(n->in[slot]->dtype)) return true;
  node_error(d, n, "input '%s' has dtype %s but %s needs a floating-point tensor",
             n->in[slot]->name, dtype_name(n->in[slot]->dtype), n->op->name);
  return false;
}

static bool want_same_dtype(const Graph *g, Node *n, Diag *d, int a, int b) {
  (void)g;
  if (n->in[a]->dtype == n->in[b]->dtype) return true;
  node_error(d, n, "input '%s' has dtype %s but input '%s' has dtype %s; %s needs equal dtypes",
             n->in[b]->name, dtype_name(n->in[b]->dtype), n->in[a]->name,
             dtype_name(n->in[a]->dtype), n->op->name);
  return false;
}

static bool want_rank(const Graph *g, Node *n, Diag *d, int slot, int lo, int hi) {
  int r = n->in[slot]->shape.rank;
  if (r >= lo && (hi < 0 || r <= hi)) return true;
  const char *need = hi < 0 ? "at least" : "";
  int want = lo;
  if (hi >= 0 && hi != lo) {
    node_error(d, n, "input '%s' has shape %s (rank %d) but %s needs rank %d to %d",
               n->in[slot]->name, fmt_shape(g, &n->in[slot]->shape), r, n->op->name, lo, hi);
    return false;
  }
  node_error(d, n, "input '%s' has shape %s (rank %d) but %s needs rank %s%s%d", n->in[slot]->name,
             fmt_shape(g, &n->in[slot]->shape), r, n->op->name, need, *need ? " " : "", want);
  return false;
}

// Normalises a possibly negative axis against rank; reports an error naming attr when invalid.
static bool norm_axis(Node *n, Diag *d, const char *attr, int64_t axis, int rank, int *out) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    node_error(d, n, "attribute '%s' = %lld is out of range for rank %d (valid: %d..%d)", attr,
               (long long)axis, rank, -rank, rank - 1);
    return false;
  }
  *out = (int)a;
  return true;
}

// NumPy broadcasting of a and b into out; false (no report) when incompatible.
static bool broadcast(const Shape *a, const Shape *b, Shape *out) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  out->rank = r;
  for (int i = 0; i < r; i++) {
    int ia = a->rank - r + i, ib = b->rank - r + i;
    Dim da = ia >= 0 ? a->d[ia] : (Dim){1, 0};
    Dim db = ib >= 0 ? b->d[ib] : (Dim){1, 0};
    if (dim_eq(da, db) || (db.n == 1 && !db.b))
      out->d[i] = da;
    else if (da.n == 1 && !da.b)
      out->d[i] = db;
    else
      return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// matmul

static const AttrDef matmul_attrs[] = {
    {"transpose_a", ATTR_BOOL, false, 0, 0, "use a's last two dims transposed", NULL},
    {"transpose_b", ATTR_BOOL, false, 0, 0, "use b's last two dims transposed", NULL},
};

static bool matmul_infer(const Graph *g, Node *n, Diag *d) {
  if (!want_rank(g, n, d, 0, 2, -1) || !want_rank(g, n, d, 1, 2, -1)) return false;
  if (!want_float(g, n, d, 0) || !want_same_dtype(g, n, d, 0, 1)) return false;
  const Shape *a = &n->in[0]->shape, *b = &n->in[1]->shape;
  bool ta = n->attrs[0].i, tb = n->attrs[1].i;
  Dim m = a->d[a->rank - (ta ? 1 : 2)], ka = a->d[a->rank - (ta ? 2 : 1)];
  Dim kb = b->d[b->rank - (tb ? 1 : 2)], nn = b->d[b->rank - (tb ? 2 : 1)];
  if (!dim_eq(ka, kb)) {
    node_error(d, n, "input '%s' has shape %s but matmul needs (...,%s,%s)%s to match %s",
               n->in[1]->name, fmt_shape(g, b), tb ? fmt_dim(g, nn) : fmt_dim(g, ka),
               tb ? fmt_dim(g, ka) : fmt_dim(g, nn), tb ? " (transpose_b)" : "", n->in[0]->name);
    return false;
  }
  if (b->rank != 2 && b->rank != a->rank) {
    node_error(d, n,
               "input '%s' has shape %s but matmul needs rank 2 or rank %d (the rank of '%s')",
               n->in[1]->name, fmt_shape(g, b), a->rank, n->in[0]->name);
    return false;
  }
  Shape o = *a;
  if (b->rank == a->rank)
    for (int i = 0; i < a->rank - 2; i++)
      if (!dim_eq(a->d[i], b->d[i])) {
        node_error(d, n, "batch dimension %d differs: '%s' has shape %s, '%s' has shape %s", i,
                   n->in[0]->name, fmt_shape(g, a), n->in[1]->name, fmt_shape(g, b));
        return false;
      }
  o.d[o.rank - 2] = m;
  o.d[o.rank - 1] = nn;
  set_out(n, 0, &o, n->in[0]->dtype);
  return true;
}

static void matmul_cost(const Node *n, int64_t batch, OpCost *c) {
  const Shape *a = &n->in[0]->shape;
  double k = (double)a->d[a->rank - (n->attrs[0].i ? 2 : 1)].n;
  if (a->d[a->rank - (n->attrs[0].i ? 2 : 1)].b) k *= (double)batch;
  c->flops = 2.0 * numel(n->out[0], batch) * k;
  c->bytes = io_bytes(n, batch);
}

// ---------------------------------------------------------------------------------------------
// linear: y = x W^T + b, W (OUT, IN) as in PyTorch

static bool linear_infer(const Graph *g, Node *n, Diag *d) {
  if (!want_rank(g, n, d, 0, 1, -1) || !want_rank(g, n, d, 1, 2, 2)) return false;
  if (!want_float(g, n, d, 0) || !want_same_dtype(g, n, d, 0, 1)) return false;
  const Shape *x = &n->in[0]->shape, *w = &n->in[1]->shape;
  Dim in = x->d[x->rank - 1];
  if (!dim_eq(w->d[1], in)) {
    node_error(d, n,
               "input '%s' has shape %s but linear needs (OUT,%s) to match the last dim of '%s' %s",
               n->in[1]->name, fmt_shape(g, w), fmt_dim(g, in), n->in[0]->name, fmt_shape(g, x));
    return false;
  }
  if (n->nin == 3) {
    const Shape *b = &n->in[2]->shape;
    if (b->rank != 1 || !dim_eq(b->d[0], w->d[0])) {
      node_error(d, n, "input '%s' has shape %s but linear needs a bias of shape (%s)",
                 n->in[2]->name, fmt_shape(g, b), fmt_dim(g, w->d[0]));
      return false;
    }
    if (!want_same_dtype(g, n, d, 0, 2)) return false;
  }
  Shape o = *x;
  o.d[o.rank - 1] = w->d[0];
  set_out(n, 0, &o, n->in[0]->dtype);
  return true;
}

static void linear_cost(const Node *n, int64_t batch, OpCost *c) {
  double in = (double)n->in[1]->shape.d[1].n;
  double out = numel(n->out[0], batch);
  c->flops = 2.0 * out * in + (n->nin == 3 ? out : 0);
  c->bytes = io_bytes(n, batch);
}

// ---------------------------------------------------------------------------------------------
// Elementwise binary ops with NumPy broadcasting: add, sub, mul, div

static bool binary_infer(const Graph *g, Node *n, Diag *d) {
  if (!want_float(g, n, d, 0) || !want_same_dtype(g, n, d, 0, 1)) return false;
  Shape o;
  if (!broadcast(&n->in[0]->shape, &n->in[1]->shape, &o)) {
    node_error(d, n, "cannot broadcast '%s' %s with '%s' %s", n->in[0]->name,
               fmt_shape(g, &n->in[0]->shape), n->in[1]->name, fmt_shape(g, &n->in[1]->shape));
    return false;
  }
  set_out(n, 0, &o, n->in[0]->dtype);
  return true;
}

static void elementwise_cost(const Node *n, int64_t batch, OpCost *c, double per) {
  c->flops = per * numel(n->out[0], batch);
  c->bytes = io_bytes(n, batch);
}

static void cost1(const Node *n, int64_t batch, OpCost *c) {
  elementwise_cost(n, batch, c, 1);
}
static void cost4(const Node *n, int64_t batch, OpCost *c) {
  elementwise_cost(n, batch, c, 4);
}
static void cost5(const Node *n, int64_t batch, OpCost *c) {
  elementwise_cost(n, batch, c, 5);
}
static void cost6(const Node *n, int64_t batch, OpCost *c) {
  elementwise_cost(n, batch, c, 6);
}
static void cost8(const Node *n, int64_t batch, OpCost *c) {
  elementwise_cost(n, batch, c, 8);
}
static void cost0(const Node *n, int64_t batch, OpCost *c) {
  elementwise_cost(n, batch, c, 0);
}

// ---------------------------------------------------------------------------------------------
// Elementwise unary ops: scale, relu, gelu, tanh, sigmoid, silu

static const AttrDef scale_attrs[] = {
    {"factor", ATTR_FLOAT, true, 0, 0, "multiplier", NULL},
};

static const char *const gelu_approx[] = {"none", "tanh", NULL};
static const AttrDef gelu_attrs[] = {
    {"approximate", ATTR_ENUM, false, 1, 0, "none: exact (erf); tanh: the tanh approximation",
     gelu_approx},
};

static bool unary_infer(const Graph *g, Node *n, Diag *d) {
  if (!want_float(g, n, d, 0)) return false;
  set_out(n, 0, &n->in[0]->shape, n->in[0]->dtype);
  return true;
}

// gelu: y, and its factor c (y = x * c, the normal CDF or the tanh form's) saved for backward,
// which then costs no erf or exp of the forward's again.
static bool gelu_infer(const Graph *g, Node *n, Diag *d) {
  if (!unary_infer(g, n, d)) return false;
  set_out(n, 1, &n->in[0]->shape, n->in[0]->dtype);
  return true;
}

// ---------------------------------------------------------------------------------------------
// softmax along an axis

static const AttrDef softmax_attrs[] = {
    {"axis", ATTR_INT, false, -1, 0, "axis to normalise", NULL},
};

static bool softmax_infer(const Graph *g, Node *n, Diag *d) {
  int axis;
  if (!want_float(g, n, d, 0) || !want_rank(g, n, d, 0, 1, -1)) return false;
  if (!norm_axis(n, d, "axis", n->attrs[0].i, n->in[0]->shape.rank, &axis)) return false;
  return unary_infer(g, n, d);
}

// ---------------------------------------------------------------------------------------------
// Norms over the last dim: layernorm (weight (C), optional bias (C); hidden mean, rstd) and
// rms_norm (weight (C); hidden rstd)

static const AttrDef layernorm_attrs[] = {
    {"eps", ATTR_FLOAT, false, 0, 1e-5, "added to the variance", NULL},
};

static const AttrDef rms_norm_attrs[] = {
    {"eps", ATTR_FLOAT, false, 0, 1e-6, "added to the mean of the squares", NULL},
};

// x (..., C) and every other input (C), attribute 0 eps > 0; y the shape of x, each hidden output
// (the per-row statistics saved for backward) f32 of x's shape without the last dim.
static bool norm_infer(const Graph *g, Node *n, Diag *d) {
  if (!want_rank(g, n, d, 0, 1, -1) || !want_float(g, n, d, 0)) return false;
  const Shape *x = &n->in[0]->shape;
  Dim c = x->d[x->rank - 1];
  for (int i = 1; i < n->nin; i++) {
    const Shape *w = &n->in[i]->shape;
    if (w->rank != 1 || !dim_eq(w->d[0], c)) {
      node_error(d, n, "input '%s' has shape %s but %s needs (%s) to match the last dim of '%s' %s",
                 n->in[i]->name, fmt_shape(g, w), n->op->name, fmt_dim(g, c), n->in[0]->name,
                 fmt_shape(g, x));
      return false;
    }
    if (!want_same_dtype(g, n, d, 0, i)) return false;
  }
  if (!(n->attrs[0].f > 0)) {
    node_error(d, n, "attribute 'eps' must be > 0, got %g", n->attrs[0].f);
    return false;
  }
  set_out(n, 0, x, n->in[0]->dtype);
  Shape rows = *x;
  rows.rank--;
  for (int k = 1; k < n->nout; k++) set_out(n, k, &rows, DT_F32); // layernorm: mean, 1/std
  return true;
}

// ---------------------------------------------------------------------------------------------
// embedding: rows of weight (V,C) gathered by integer ids

static bool embedding_infer(const Graph *g, Node *n, Diag *d) {
  const Tensor *idx = n->in[0], *w = n->in[1];
  if (idx->dtype != DT_I32) {
    node_error(d, n, "input '%s' has dtype %s but embedding needs i32 ids", idx->name,
               dtype_name(idx->dtype));
    return false;
  }
  if (!want_rank(g, n, d, 1, 2, 2) || !want_float(g, n, d, 1)) return false;
  if (idx->shape.rank + 1 > MAX_RANK) {
    node_error(d, n, "input '%s' has rank %d; the output would exceed rank %d", idx->name,
               idx->shape.rank, MAX_RANK);
    return false;
  }
  Shape o = idx->shape;
  o.d[o.rank++] = w->shape.d[1];
  if (shape_numel(&o, 1) < 0) {
    node_error(d, n, "output shape %s has more than 2^53 elements", fmt_shape(g, &o));
    return false;
  }
  set_out(n, 0, &o, w->dtype);
  return true;
}

// ---------------------------------------------------------------------------------------------
// reshape: same elements, new shape; one -1 is inferred

static const AttrDef reshape_attrs[] = {
    {"shape", ATTR_SHAPE, true, 0, 0, "new shape; one entry may be -1", NULL},
};

static bool reshape_infer(const Graph *g, Node *n, Diag *d) {
  const AttrValue *sv = &n->attrs[0];
  const Shape *x = &n->in[0]->shape;
  if (sv->count > MAX_RANK) {
    node_error(d, n, "attribute 'shape' has %d dims; at most %d are supported", sv->count,
               MAX_RANK);
    return false;
  }
  // Element count of x as (coefficient, batch power).
  int64_t total = shape_numel(x, 1);
  int xb = 0;
  for (int i = 0; i < x->rank; i++) xb += x->d[i].b;
  Shape o = {.rank = sv->count};
  int infer = -1, ob = 0;
  int64_t known = 1;
  for (int i = 0; i < sv->count; i++) {
    Dim dd = sv->dims[i];
    if (dd.n == -1) {
      if (infer >= 0) {
        node_error(d, n, "attribute 'shape' has more than one -1");
        return false;
      }
      infer = i;
      continue;
    }
    o.d[i] = dd;
    ob += dd.b;
    if (__builtin_mul_overflow(known, dd.n, &known) || known > PIPEC_MAX_NUMEL) {
      node_error(d, n, "attribute 'shape' has more than 2^53 elements");
      return false;
    }
  }
  char want[256];
  if (infer >= 0) {
    if (ob > xb || total % known != 0) goto mismatch;
    o.d[infer] = (Dim){total / known, xb - ob};
  } else if (known != total || ob != xb) {
    goto mismatch;
  }
  if (xb > 1) {
    node_error(d, n,
               "input '%s' has shape %s with the batch in several dims; reshape cannot merge them",
               n->in[0]->name, fmt_shape(g, x));
    return false;
  }
  set_out(n, 0, &o, n->in[0]->dtype);
  return true;
mismatch:
  o.rank = sv->count;
  for (int i = 0; i < sv->count; i++) o.d[i] = sv->dims[i];
  shape_str(want, sizeof want, &o, g->batch_sym);
  node_error(d, n, "cannot reshape '%s' %s into %s: element counts differ", n->in[0]->name,
             fmt_shape(g, x), want);
  return false;
}

// ---------------------------------------------------------------------------------------------
// transpose (swap two dims) and permute (any order)

static const AttrDef transpose_attrs[] = {
    {"dim0", ATTR_INT, true, 0, 0, "first dim to swap", NULL},
    {"dim1", ATTR_INT, true, 0, 0, "second dim to swap", NULL},
};

static bool transpose_infer(const Graph *g, Node *n, Diag *d) {
  (void)g;
  const Shape *x = &n->in[0]->shape;
  int a, b;
  if (!norm_axis(n, d, "dim0", n->attrs[0].i, x->rank, &a) ||
      !norm_axis(n, d, "dim1", n->attrs[1].i, x->rank, &b))
    return false;
  Shape o = *x;
  o.d[a] = x->d[b];
  o.d[b] = x->d[a];
  set_out(n, 0, &o, n->in[0]->dtype);
  return true;
}

static const AttrDef permute_attrs[] = {
    {"perm", ATTR_INTS, true, 0, 0, "output dim i is input dim perm[i]", NULL},
};

static bool permute_infer(const Graph *g, Node *n, Diag *d) {
  const Shape *x = &n->in[0]->shape;
  const AttrValue *p = &n->attrs[0];
  if (p->count != x->rank) {
    node_error(d, n, "attribute 'perm' has %d entries but input '%s' %s has rank %d", p->count,
               n->in[0]->name, fmt_shape(g, x), x->rank);
    return false;
  }
  bool seen[MAX_RANK] = {0};
  Shape o = {.rank = x->rank};
  for (int i = 0; i < p->count; i++) {
    int a;
    if (!norm_axis(n, d, "perm", p->ints[i], x->rank, &a)) return false;
    if (seen[a]) {
      node_error(d, n, "attribute 'perm' names dim %d twice", a);
      return false;
    }
    seen[a] = true;
    o.d[i] = x->d[a];
  }
  set_out(n, 0, &o, n->in[0]->dtype);
  return true;
}

// ---------------------------------------------------------------------------------------------
// split along an axis into len(sizes) outputs

static const AttrDef split_attrs[] = {
    {"axis", ATTR_INT, false, -1, 0, "axis to split", NULL},
    {"sizes", ATTR_INTS, true, 0, 0, "size of each part along the axis", NULL},
};

static int split_count(const Node *n) {
  return n->attrs[1].count;
}

static bool split_infer(const Graph *g, Node *n, Diag *d) {
  const Shape *x = &n->in[0]->shape;
  const AttrValue *s = &n->attrs[1];
  int axis;
  if (!want_rank(g, n, d, 0, 1, -1) || !norm_axis(n, d, "axis", n->attrs[0].i, x->rank, &axis))
    return false;
  if (x->d[axis].b) {
    node_error(d, n, "cannot split '%s' %s along the batch dim", n->in[0]->name, fmt_shape(g, x));
    return false;
  }
  int64_t sum = 0;
  for (int i = 0; i < s->count; i++) {
    if (s->ints[i] < 1) {
      node_error(d, n, "attribute 'sizes' has entry %lld; sizes must be >= 1",
                 (long long)s->ints[i]);
      return false;
    }
    if (__builtin_add_overflow(sum, s->ints[i], &sum) || sum > PIPEC_MAX_NUMEL) {
      node_error(d, n,
                 "attribute 'sizes' sums to more than 2^53 but '%s' %s has %lld along axis %d",
                 n->in[0]->name, fmt_shape(g, x), (long long)x->d[axis].n, axis);
      return false;
    }
  }
  if (sum != x->d[axis].n) {
    node_error(d, n, "attribute 'sizes' sums to %lld but '%s' %s has %lld along axis %d",
               (long long)sum, n->in[0]->name, fmt_shape(g, x), (long long)x->d[axis].n, axis);
    return false;
  }
  for (int i = 0; i < s->count; i++) {
    Shape o = *x;
    o.d[axis].n = s->ints[i];
    set_out(n, i, &o, n->in[0]->dtype);
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// concat along an axis

static const AttrDef concat_attrs[] = {
    {"axis", ATTR_INT, false, -1, 0, "axis to join", NULL},
};

static bool concat_infer(const Graph *g, Node *n, Diag *d) {
  const Shape *x = &n->in[0]->shape;
  int axis;
  if (!want_rank(g, n, d, 0, 1, -1) || !norm_axis(n, d, "axis", n->attrs[0].i, x->rank, &axis))
    return false;
  Shape o = *x;
  for (int i = 1; i < n->nin; i++) {
    const Shape *y = &n->in[i]->shape;
    if (!want_same_dtype(g, n, d, 0, i)) return false;
    bool ok = y->rank == x->rank && y->d[axis].b == x->d[axis].b;
    for (int k = 0; ok && k < x->rank; k++)
      if (k != axis && !dim_eq(x->d[k], y->d[k])) ok = false;
    if (!ok) {
      node_error(
          d, n,
          "input '%s' has shape %s but concat along axis %d needs it to match '%s' %s elsewhere",
          n->in[i]->name, fmt_shape(g, y), axis, n->in[0]->name, fmt_shape(g, x));
      return false;
    }
    if (__builtin_add_overflow(o.d[axis].n, y->d[axis].n, &o.d[axis].n) ||
        o.d[axis].n > PIPEC_MAX_NUMEL) {
      node_error(d, n, "output size along axis %d overflows", axis);
      return false;
    }
  }
  if (shape_numel(&o, 1) < 0) {
    node_error(d, n, "output shape %s has more than 2^53 elements", fmt_shape(g, &o));
    return false;
  }
  set_out(n, 0, &o, n->in[0]->dtype);
  return true;
}

// ---------------------------------------------------------------------------------------------
// causal_self_attention: packed qkv (B,T,C+2*Ckv) -> (B,T,C), n_head query heads of hs = C/n_head,
// n_kv_head kv heads (Ckv = n_kv_head*hs; query head h reads kv head h / (n_head/n_kv_head)),
// causal mask or none

static const AttrDef attention_attrs[] = {
    {"n_head", ATTR_INT, true, 0, 0, "number of (query) heads; C % n_head == 0", NULL},
    {"n_kv_head", ATTR_INT, false, 0, 0,
     "number of key/value heads (default n_head; 1: multi-query); divides n_head", NULL},
    {"causal", ATTR_BOOL, false, 1, 0, "position t attends to s <= t only (false: to every s)",
     NULL},
};

// n_kv_head, n_head when not given (the first infer stores it, so the kernels' arguments read it).
static int64_t attention_nkv(Node *n) {
  if (!n->attrs[1].present) n->attrs[1].i = n->attrs[0].i;
  return n->attrs[1].i;
}

// The packed last dim C + 2*Ckv = hs*(n_head + 2*n_kv_head): C, or 0 after an error.
static int64_t attention_c(const Graph *g, Node *n, Diag *d) {
  const Shape *x = &n->in[0]->shape;
  Dim ct = x->d[2];
  int64_t nh = n->attrs[0].i, nkv = attention_nkv(n);
  if (nkv == nh) { // as many kv heads as query heads: (B,T,3*C)
    if (ct.b || ct.n % 3 != 0) {
      node_error(
          d, n,
          "input '%s' has shape %s but causal_self_attention needs (B,T,3*C) with q,k,v packed",
          n->in[0]->name, fmt_shape(g, x));
      return 0;
    }
    if (nh < 1 || (ct.n / 3) % nh != 0) {
      node_error(d, n, "attribute 'n_head' = %lld must be >= 1 and divide C = %lld", (long long)nh,
                 (long long)(ct.n / 3));
      return 0;
    }
    return ct.n / 3;
  }
  if (nh < 1) {
    node_error(d, n, "attribute 'n_head' = %lld must be >= 1", (long long)nh);
    return 0;
  }
  if (nkv < 1 || nh % nkv != 0) {
    node_error(d, n, "attribute 'n_kv_head' = %lld must be >= 1 and divide n_head = %lld",
               (long long)nkv, (long long)nh);
    return 0;
  }
  int64_t parts = nh + 2 * nkv; // head dims in a packed row
  if (ct.b || ct.n % parts != 0) {
    node_error(d, n,
               "input '%s' has shape %s but causal_self_attention with n_head = %lld and "
               "n_kv_head = %lld needs (B,T,C+2*Ckv), a multiple of %lld head dims",
               n->in[0]->name, fmt_shape(g, x), (long long)nh, (long long)nkv, (long long)parts);
    return 0;
  }
  return ct.n / parts * nh;
}

static bool attention_infer(const Graph *g, Node *n, Diag *d) {
  if (!want_rank(g, n, d, 0, 3, 3) || !want_float(g, n, d, 0)) return false;
  const Shape *x = &n->in[0]->shape;
  int64_t nh = n->attrs[0].i;
  int64_t c = attention_c(g, n, d);
  if (c == 0) return false;
  Shape o = *x;
  o.d[2].n = c;
  set_out(n, 0, &o, n->in[0]->dtype);
  Shape att = {.rank = 4, .d = {x->d[0], {nh, 0}, x->d[1], x->d[1]}};
  if (x->d[1].b || shape_numel(&att, 1) < 0) {
    node_error(d, n, "attention probabilities %s are too large", fmt_shape(g, &att));
    return false;
  }
  set_out(n, 1, &att, DT_F32); // softmax probabilities, saved for backward
  return true;
}

// attention: separate q (B,T,C), k and v (B,T,Ckv) -> (B,T,C); the attributes and the hidden
// probabilities of causal_self_attention. n_head divides C (d = C/n_head), n_kv_head divides
// n_head, and k and v are (B,T,n_kv_head*d) with q's first two dims, all of q's dtype.
static bool attention_sep_infer(const Graph *g, Node *n, Diag *d) {
  if (!want_rank(g, n, d, 0, 3, 3) || !want_float(g, n, d, 0)) return false;
  const Shape *x = &n->in[0]->shape;
  int64_t nh = n->attrs[0].i, nkv = attention_nkv(n);
  if (nh < 1 || x->d[2].b || x->d[2].n % nh != 0) {
    node_error(d, n, "attribute 'n_head' = %lld must be >= 1 and divide C = %lld", (long long)nh,
               (long long)x->d[2].n);
    return false;
  }
  if (nkv < 1 || nh % nkv != 0) {
    node_error(d, n, "attribute 'n_kv_head' = %lld must be >= 1 and divide n_head = %lld",
               (long long)nkv, (long long)nh);
    return false;
  }
  Shape kv = *x;
  kv.d[2].n = nkv * (x->d[2].n / nh);
  for (int i = 1; i < 3; i++) {
    const Shape *y = &n->in[i]->shape;
    if (!want_same_dtype(g, n, d, 0, i)) return false;
    bool ok = y->rank == 3;
    for (int k = 0; ok && k < 3; k++) ok = dim_eq(y->d[k], kv.d[k]) && y->d[k].b == kv.d[k].b;
    if (!ok) {
      node_error(d, n,
                 "input '%s' has shape %s but attention with n_head = %lld and n_kv_head = "
                 "%lld needs %s (n_kv_head * C/n_head, q's B and T)",
                 n->in[i]->name, fmt_shape(g, y), (long long)nh, (long long)nkv, fmt_shape(g, &kv));
      return false;
    }
  }
  set_out(n, 0, x, n->in[0]->dtype);
  Shape att = {.rank = 4, .d = {x->d[0], {nh, 0}, x->d[1], x->d[1]}};
  if (x->d[1].b || shape_numel(&att, 1) < 0) {
    node_error(d, n, "attention probabilities %s are too large", fmt_shape(g, &att));
    return false;
  }
  set_out(n, 1, &att, DT_F32); // softmax probabilities, saved for backward
  return true;
}

static void attention_cost(const Node *n, int64_t batch, OpCost *c) {
  const Shape *o = &n->out[0]->shape;
  double b = (double)o->d[0].n * (o->d[0].b ? (double)batch : 1);
  double t = (double)o->d[1].n * (o->d[1].b ? (double)batch : 1);
  double ch = (double)o->d[2].n, nh = (double)n->attrs[0].i;
  c->flops = 4.0 * b * t * t * ch + 5.0 * b * nh * t * t;
  c->bytes = io_bytes(n, batch);
}

// ---------------------------------------------------------------------------------------------
// rope: rotary position embedding of per-head q or k, x (B,T,H,D) or (B,H,T,D) (seq_axis 1 or 2)

static const char *const rope_pairing[] = {"half", "interleaved", NULL};
static const AttrDef rope_attrs[] = {
    {"theta", ATTR_FLOAT, false, 0, 10000.0, "base of the rotation frequencies", NULL},
    {"pairing", ATTR_ENUM, false, 0, 0,
     "half: pairs (i, i + D/2), Hugging Face's rotate_half; interleaved: pairs (2i, 2i+1), Meta's",
     rope_pairing},
    {"seq_axis", ATTR_INT, false, 1, 0, "the position dim: 1 for (B,T,H,D), 2 for (B,H,T,D)", NULL},
};

// x rank 4, float; the position dim (seq_axis) and the head dim (the last) static, the head dim
// even; theta > 0 and within f32's range (the kernels take it as a float). y: the shape and dtype
// of x.
static bool rope_infer(const Graph *g, Node *n, Diag *d) {
  if (!want_rank(g, n, d, 0, 4, 4) || !want_float(g, n, d, 0)) return false;
  const Shape *x = &n->in[0]->shape;
  double theta = n->attrs[0].f;
  int64_t axis = n->attrs[2].i;
  if (!(theta > 0) || theta > 3.4e38) {
    node_error(d, n, "attribute 'theta' must be > 0 and fit an f32, got %g", theta);
    return false;
  }
  if (axis != 1 && axis != 2) {
    node_error(d, n, "attribute 'seq_axis' = %lld must be 1 (x (B,T,H,D)) or 2 (x (B,H,T,D))",
               (long long)axis);
    return false;
  }
  Dim t = x->d[axis], hd = x->d[3];
  if (t.b || hd.b) {
    node_error(d, n, "input '%s' has shape %s but rope needs a static %s dim (dim %d)",
               n->in[0]->name, fmt_shape(g, x), t.b ? "position" : "head", t.b ? (int)axis : 3);
    return false;
  }
  if (hd.n % 2 != 0) {
    node_error(d, n, "input '%s' has shape %s but rope needs an even head dim (the last), got %lld",
               n->in[0]->name, fmt_shape(g, x), (long long)hd.n);
    return false;
  }
  set_out(n, 0, x, n->in[0]->dtype);
  return true;
}

static void rope_cost(const Node *n, int64_t batch, OpCost *c) {
  elementwise_cost(n, batch, c, 3); // two products and a sum per element
}

// ---------------------------------------------------------------------------------------------
// Losses: cross_entropy (logits (...,V), i32 targets (...)) and mse_loss, both means -> ()

static bool cross_entropy_infer(const Graph *g, Node *n, Diag *d) {
  if (!want_rank(g, n, d, 0, 1, -1) || !want_float(g, n, d, 0)) return false;
  const Tensor *lg = n->in[0], *tg = n->in[1];
  if (tg->dtype != DT_I32) {
    node_error(d, n, "input '%s' has dtype %s but cross_entropy needs i32 class indices", tg->name,
               dtype_name(tg->dtype));
    return false;
  }
  Shape want = lg->shape;
  want.rank--;
  if (!shape_eq(&want, &tg->shape)) {
    node_error(d, n,
               "input '%s' has shape %s but cross_entropy needs %s (the logits' shape without the "
               "class dim)",
               tg->name, fmt_shape(g, &tg->shape), fmt_shape(g, &want));
    return false;
  }
  Shape s = {.rank = 0};
  set_out(n, 0, &s, lg->dtype);
  return true;
}

static void cross_entropy_cost(const Node *n, int64_t batch, OpCost *c) {
  elementwise_cost(n, batch, c, 0);
  c->flops = 4.0 * numel(n->in[0], batch);
}

static bool mse_infer(const Graph *g, Node *n, Diag *d) {
  if (!want_float(g, n, d, 0) || !want_same_dtype(g, n, d, 0, 1)) return false;
  if (!shape_eq(&n->in[0]->shape, &n->in[1]->shape)) {
    node_error(d, n, "input '%s' has shape %s but mse_loss needs %s (the shape of '%s')",
               n->in[1]->name, fmt_shape(g, &n->in[1]->shape), fmt_shape(g, &n->in[0]->shape),
               n->in[0]->name);
    return false;
  }
  Shape s = {.rank = 0};
  set_out(n, 0, &s, n->in[0]->dtype);
  return true;
}

static void mse_cost(const Node *n, int64_t batch, OpCost *c) {
  elementwise_cost(n, batch, c, 0);
  c->flops = 3.0 * numel(n->in[0], batch);
}

// ---------------------------------------------------------------------------------------------
// Elementwise unary ops of exported graphs: neg, exp, rsqrt, pow (x to a constant exponent)

static const AttrDef pow_attrs[] = {
    {"exponent", ATTR_FLOAT, true, 0, 0, "the constant power x is raised to", NULL},
};

static void cost2(const Node *n, int64_t batch, OpCost *c) {
  elementwise_cost(n, batch, c, 2);
}

static bool pow_infer(const Graph *g, Node *n, Diag *d) {
  double e = n->attrs[0].f; // the kernels take a float
  if (!(e >= -FLT_MAX && e <= FLT_MAX)) {
    node_error(d, n, "attribute 'exponent' = %g is not a finite float", e);
    return false;
  }
  return unary_infer(g, n, d);
}

// ---------------------------------------------------------------------------------------------
// mean over one axis (keepdim: the axis stays with size 1)

static const AttrDef mean_attrs[] = {
    {"axis", ATTR_INT, true, 0, 0, "axis to average over", NULL},
    {"keepdim", ATTR_BOOL, false, 0, 0, "keep the axis with size 1", NULL},
};

static bool mean_infer(const Graph *g, Node *n, Diag *d) {
  const Shape *x = &n->in[0]->shape;
  int axis;
  if (!want_float(g, n, d, 0) || !want_rank(g, n, d, 0, 1, -1) ||
      !norm_axis(n, d, "axis", n->attrs[0].i, x->rank, &axis))
    return false;
  if (x->d[axis].b) {
    node_error(d, n, "cannot take the mean of '%s' %s along the batch dim", n->in[0]->name,
               fmt_shape(g, x));
    return false;
  }
  if (x->d[axis].n == 0) {
    node_error(d, n, "cannot take the mean of '%s' %s along axis %d of size 0", n->in[0]->name,
               fmt_shape(g, x), axis);
    return false;
  }
  Shape o = *x;
  if (n->attrs[1].i) {
    o.d[axis] = (Dim){1, 0};
  } else {
    for (int i = axis; i + 1 < x->rank; i++) o.d[i] = x->d[i + 1];
    o.rank--;
  }
  set_out(n, 0, &o, n->in[0]->dtype);
  return true;
}

// One add per input element (the division per output element not counted).
static void mean_cost(const Node *n, int64_t batch, OpCost *c) {
  c->flops = numel(n->in[0], batch);
  c->bytes = io_bytes(n, batch);
}

// ---------------------------------------------------------------------------------------------
// slice: x[..., start:end, ...] along one axis (step 1), Python's negative indices

static const AttrDef slice_attrs[] = {
    {"axis", ATTR_INT, true, 0, 0, "axis to slice", NULL},
    {"start", ATTR_INT, false, 0, 0, "first index (negative: from the end)", NULL},
    {"end", ATTR_INT, false, INT64_MAX, 0, "index past the last (negative: from the end)", NULL},
    {"step", ATTR_INT, false, 1, 0, "stride; only 1", NULL},
};

// Node n's slice [*start, *end) of the (valid) axis `axis`, its attributes normalised as Python
// does (negative from the end; end's default INT64_MAX, torch's open end, is the axis' end).
void slice_bounds(const Node *n, int axis, int64_t *start, int64_t *end) {
  int64_t s = n->attrs[1].i, e = n->attrs[2].i, size = n->in[0]->shape.d[axis].n;
  *start = s < 0 ? s + size : s;
  *end = e == INT64_MAX ? size : e < 0 ? e + size : e;
}

static bool slice_infer(const Graph *g, Node *n, Diag *d) {
  const Shape *x = &n->in[0]->shape;
  int axis;
  int64_t start, end;
  if (!want_rank(g, n, d, 0, 1, -1) || !norm_axis(n, d, "axis", n->attrs[0].i, x->rank, &axis))
    return false;
  if (x->d[axis].b) {
    node_error(d, n, "cannot slice '%s' %s along the batch dim", n->in[0]->name, fmt_shape(g, x));
    return false;
  }
  int64_t size = x->d[axis].n, s = n->attrs[1].i, e = n->attrs[2].i;
  if (n->attrs[3].i != 1) {
    node_error(d, n, "attribute 'step' = %lld is not supported; slice takes step 1",
               (long long)n->attrs[3].i);
    return false;
  }
  slice_bounds(n, axis, &start, &end);
  if (start < 0 || start >= size) {
    node_error(d, n, "attribute 'start' = %lld is out of range for axis %d of size %lld",
               (long long)s, axis, (long long)size);
    return false;
  }
  if (end > size || end < 0) {
    node_error(d, n, "attribute 'end' = %lld is %s axis %d of size %lld", (long long)e,
               end > size ? "past" : "before the start of", axis, (long long)size);
    return false;
  }
  if (end <= start) {
    node_error(d, n, "slice of axis %d from %lld to %lld is empty", axis, (long long)start,
               (long long)end);
    return false;
  }
  Shape o = *x;
  o.d[axis].n = end - start;
  set_out(n, 0, &o, n->in[0]->dtype);
  return true;
}

// ---------------------------------------------------------------------------------------------
// The registry

// Cost of a backward node: the FLOPs of the forward node it differentiates (one GEMM of the
// same size for matmul/linear gradients, about one pass for the others), bytes of its own I/O.
static void bwd_cost(const Node *n, int64_t batch, OpCost *c) {
  OpCost f = {0, 0};
  if (n->fwd) n->fwd->op->cost(n->fwd, batch, &f);
  c->flops = f.flops;
  c->bytes = io_bytes(n, batch);
}

// sum_rows (a bias gradient): one add per element of dy, not its forward's FLOPs (bwd_cost would
// count a linear's whole GEMM for it).
static void sum_rows_cost(const Node *n, int64_t batch, OpCost *c) {
  c->flops = numel(n->in[0], batch);
  c->bytes = io_bytes(n, batch);
}

static const char *const layernorm_hidden[] = {"mean", "rstd"};
static const char *const rms_norm_hidden[] = {"rstd"};
static const char *const attention_hidden[] = {"att"};
static const char *const gelu_hidden[] = {"cdf"};

// clang-format off
#define ATTRS(a) .attrs = a, .nattrs = (int)(sizeof(a) / sizeof((a)[0]))
#define IN(lo, hi) .min_in = lo, .max_in = hi
#define HIDDEN(h) .hidden = h, .nhidden = (int)(sizeof(h) / sizeof((h)[0]))
// Gradient entries (ir/ops.h GradEntry): GRAD(slot, backward op, its inputs...), where an input
// is GDY (the gradient of output 0), GX(k) (input k) or GY(k) (output k, hidden ones included);
// GRAD_PASS also passes dy itself to an input of the output's shape.
#define GDY {GF_DY, 0}
#define GX(k) {GF_X, k}
#define GY(k) {GF_Y, k}
#define GRAD(s, op, ...) {.slot = s, .bwd_op = op, .in = {__VA_ARGS__}}
#define GRAD_PASS(s, op, ...) {.slot = s, .bwd_op = op, .in = {__VA_ARGS__}, .pass_same_shape = true}
#define GRADS(...) .grads = (const GradEntry[]){__VA_ARGS__, {.bwd_op = NULL}}
// Internal ops: backward and helper nodes made by the autodiff pass (no shape rule: the pass
// gives each output the shape of the tensor it is the gradient of).
#define BWD(nm, lo, hi, kern, ka, has_acc, ...)                                                    \
  {.name = nm, IN(lo, hi), .nout = 1, .cost = bwd_cost, .internal = true, .kernel = kern,         \
   .kargs = ka, .acc = has_acc, .doc = "backward", __VA_ARGS__}
// Fusion (OpDef.epilogue, .fuse): an elementwise op that may run as a product's epilogue, and a
// product whose output 0 may feed such an op, with the kernel that computes both.
#define FUSE(o, kern, ...) .fuse = &(const FuseDef){.op = o, .kernel = kern, __VA_ARGS__}

static const OpDef ops[] = {
    {.name = "matmul", IN(2, 2), .nout = 1, ATTRS(matmul_attrs), .infer = matmul_infer, .cost = matmul_cost,
     .kernel = "pr_matmul_fwd", .kargs = kargs_matmul, .progress = true,
     GRADS(GRAD(0, "matmul.da", GDY, GX(1)), GRAD(1, "matmul.db", GDY, GX(0))),
     .doc = "batched matrix product"},
    {.name = "linear", IN(2, 3), .nout = 1, .infer = linear_infer, .cost = linear_cost, .kernel = "pr_linear_fwd",
     .kargs = kargs_linear, .progress = true, FUSE("gelu", "pr_linear_gelu_fwd"),
     GRADS(GRAD(0, "linear.dx", GDY, GX(1)), GRAD(1, "linear.dw", GDY, GX(0)), GRAD(2, "sum_rows", GDY)),
     .doc = "x W^T + b (PyTorch layout)"},
    {.name = "add", IN(2, 2), .nout = 1, .infer = binary_infer, .cost = cost1, .kernel = "pr_binary_fwd",
     .kargs = kargs_binary, .variant = BIN_ADD, FUSE("layernorm", "pr_add_layernorm_fwd", .in_place = true),
     GRADS(GRAD_PASS(GRAD_EVERY_SLOT, "binary.d", GDY)), .doc = "a + b with broadcasting"},
    {.name = "sub", IN(2, 2), .nout = 1, .infer = binary_infer, .cost = cost1, .kernel = "pr_binary_fwd",
     .kargs = kargs_binary, .variant = BIN_SUB,
     GRADS(GRAD_PASS(0, "binary.d", GDY), GRAD(1, "binary.d", GDY)), .doc = "a - b with broadcasting"},
    {.name = "mul", IN(2, 2), .nout = 1, .infer = binary_infer, .cost = cost1, .kernel = "pr_binary_fwd",
     .kargs = kargs_binary, .variant = BIN_MUL,
     GRADS(GRAD(0, "binary.d", GDY, GX(1)), GRAD(1, "binary.d", GDY, GX(0))), .doc = "a * b with broadcasting"},
    {.name = "scale", IN(1, 1), .nout = 1, ATTRS(scale_attrs), .infer = unary_infer, .cost = cost1,
     .kernel = "pr_scale_fwd", .kargs = kargs_scale, GRADS(GRAD(0, "scale.dx", GDY)), .doc = "x * factor"},
    {.name = "relu", IN(1, 1), .nout = 1, .infer = unary_infer, .cost = cost1, .kernel = "pr_relu_fwd",
     .kargs = kargs_n, GRADS(GRAD(0, "relu.dx", GDY, GY(0))), .doc = "max(x, 0)"},
    {.name = "gelu", IN(1, 1), .nout = 1, ATTRS(gelu_attrs), HIDDEN(gelu_hidden), .infer = gelu_infer,
     .cost = cost8, .kernel = "pr_gelu_fwd", .kargs = kargs_gelu, .epilogue = true,
     GRADS(GRAD(0, "gelu.dx", GDY, GX(0), GY(1))),
     .doc = "GELU, exact (erf) or tanh approximation"},
    {.name = "tanh", IN(1, 1), .nout = 1, .infer = unary_infer, .cost = cost5, .kernel = "pr_tanh_fwd",
     .kargs = kargs_n, GRADS(GRAD(0, "tanh.dx", GDY, GY(0))), .doc = "tanh(x)"},
    {.name = "sigmoid", IN(1, 1), .nout = 1, .infer = unary_infer, .cost = cost4, .kernel = "pr_sigmoid_fwd",
     .kargs = kargs_n, GRADS(GRAD(0, "sigmoid.dx", GDY, GY(0))), .doc = "1 / (1 + exp(-x))"},
    {.name = "silu", IN(1, 1), .nout = 1, .infer = unary_infer, .cost = cost5, .kernel = "pr_silu_fwd",
     .kargs = kargs_n, GRADS(GRAD(0, "silu.dx", GDY, GX(0))), .doc = "x * sigmoid(x) (SiLU, Llama's MLP)"},
    {.name = "softmax", IN(1, 1), .nout = 1, ATTRS(softmax_attrs), .infer = softmax_infer, .cost = cost5,
     .kernel = "pr_softmax_fwd", .kargs = kargs_softmax, GRADS(GRAD(0, "softmax.dx", GDY, GY(0))),
     .doc = "softmax along axis"},
    {.name = "layernorm", IN(2, 3), .nout = 1, ATTRS(layernorm_attrs), HIDDEN(layernorm_hidden),
     .infer = norm_infer, .cost = cost8, .kernel = "pr_layernorm_fwd", .kargs = kargs_layernorm,
     .epilogue = true,
     GRADS(GRAD(0, "layernorm.dx", GDY, GX(0), GX(1), GY(1), GY(2)),
           GRAD(1, "layernorm.dw", GDY, GX(0), GY(1), GY(2)), GRAD(2, "sum_rows", GDY)),
     .doc = "layer norm over the last dim"},
    {.name = "rms_norm", IN(2, 2), .nout = 1, ATTRS(rms_norm_attrs), HIDDEN(rms_norm_hidden),
     .infer = norm_infer, .cost = cost4, .kernel = "pr_rms_norm_fwd", .kargs = kargs_layernorm,
     GRADS(GRAD(0, "rms_norm.dx", GDY, GX(0), GX(1), GY(1)),
           GRAD(1, "rms_norm.dw", GDY, GX(0), GY(1))),
     .doc = "RMS norm over the last dim (Llama's RMSNorm)"},
    {.name = "embedding", IN(2, 2), .nout = 1, .infer = embedding_infer, .cost = cost0,
     .kernel = "pr_embedding_fwd", .kargs = kargs_embedding,
     .ids = &(const IndexBound){.slot = 0, .of = 1, .dim = 0, .what = "rows", .vocabulary = true},
     GRADS(GRAD(1, "embedding.dw", GDY, GX(0))), .doc = "rows of weight by id"},
    {.name = "reshape", IN(1, 1), .nout = 1, ATTRS(reshape_attrs), .infer = reshape_infer, .cost = cost0,
     .kernel = "pr_copy", .kargs = kargs_copy, GRADS(GRAD(0, "copy", GDY)), .doc = "same elements, new shape"},
    {.name = "transpose", IN(1, 1), .nout = 1, ATTRS(transpose_attrs), .infer = transpose_infer, .cost = cost0,
     .kernel = "pr_permute", .kargs = kargs_permute, .variant = PERM_SWAP, GRADS(GRAD(0, "permute.dx", GDY)),
     .doc = "swap two dims"},
    {.name = "permute", IN(1, 1), .nout = 1, ATTRS(permute_attrs), .infer = permute_infer, .cost = cost0,
     .kernel = "pr_permute", .kargs = kargs_permute, .variant = PERM_LIST, GRADS(GRAD(0, "permute.dx", GDY)),
     .doc = "reorder dims"},
    {.name = "split", IN(1, 1), .nout = 0, ATTRS(split_attrs), .count_outputs = split_count, .infer = split_infer,
     .cost = cost0, .kernel = "pr_split", .kargs = kargs_split, .grad_rule = grad_split, .doc = "split along axis"},
    {.name = "concat", IN(1, -1), .nout = 1, ATTRS(concat_attrs), .infer = concat_infer, .cost = cost0,
     .kernel = "pr_concat", .kargs = kargs_concat, GRADS(GRAD(GRAD_EVERY_SLOT, "concat.dx", GDY)),
     .doc = "join along axis"},
    {.name = "causal_self_attention", IN(1, 1), .nout = 1, ATTRS(attention_attrs), HIDDEN(attention_hidden),
     .quiet_attrs = 6u, // n_kv_head, causal (added later): printed when given
     .infer = attention_infer, .cost = attention_cost, .kernel = "pr_attention_fwd", .kargs = kargs_attention,
     .progress = true,
     GRADS(GRAD(0, "attention.dx", GDY, GX(0), GY(1))),
     .doc = "fused multi-head (or grouped-query) attention, causal mask or none"},
    {.name = "attention", IN(3, 3), .nout = 1, ATTRS(attention_attrs), HIDDEN(attention_hidden),
     .infer = attention_sep_infer, .cost = attention_cost, .kernel = "pr_attention_sep_fwd",
     .kargs = kargs_attention, .progress = true,
     GRADS(GRAD(0, "attention.dq", GDY, GX(0), GX(1), GX(2), GY(1)),
           GRAD(1, "attention.dk", GDY, GX(0), GX(1), GX(2), GY(1)),
           GRAD(2, "attention.dv", GDY, GX(0), GX(1), GX(2), GY(1))),
     .doc = "multi-head or grouped-query attention on separate q, k, v"},
    {.name = "rope", IN(1, 1), .nout = 1, ATTRS(rope_attrs), .infer = rope_infer, .cost = rope_cost,
     .kernel = "pr_rope_fwd", .kargs = kargs_rope, GRADS(GRAD(0, "rope.dx", GDY)),
     .doc = "rotary position embedding of per-head q or k"},
    {.name = "cross_entropy", IN(2, 2), .nout = 1, .infer = cross_entropy_infer, .cost = cross_entropy_cost,
     .kernel = "pr_cross_entropy_fwd", .kargs = kargs_cross_entropy,
     .ids = &(const IndexBound){.slot = 1, .of = 0, .dim = -1, .what = "classes"},
     GRADS(GRAD(0, "cross_entropy.dx", GDY, GX(0), GX(1))),
     .doc = "mean cross-entropy of logits and i32 targets"},
    {.name = "mse_loss", IN(2, 2), .nout = 1, .infer = mse_infer, .cost = mse_cost, .kernel = "pr_mse_fwd",
     .kargs = kargs_mse, GRADS(GRAD(GRAD_EVERY_SLOT, "mse.dx", GDY, GX(0), GX(1))), .doc = "mean squared error"},
    // Elementwise unary ops of exported graphs (neg runs scale's kernels with factor -1)
    {.name = "neg", IN(1, 1), .nout = 1, .infer = unary_infer, .cost = cost1, .kernel = "pr_scale_fwd",
     .kargs = kargs_neg, GRADS(GRAD(0, "neg.dx", GDY)), .doc = "-x"},
    {.name = "exp", IN(1, 1), .nout = 1, .infer = unary_infer, .cost = cost4, .kernel = "pr_exp_fwd",
     .kargs = kargs_n, GRADS(GRAD(0, "exp.dx", GDY, GY(0))), .doc = "e^x"},
    {.name = "rsqrt", IN(1, 1), .nout = 1, .infer = unary_infer, .cost = cost2, .kernel = "pr_rsqrt_fwd",
     .kargs = kargs_n, GRADS(GRAD(0, "rsqrt.dx", GDY, GY(0))), .doc = "1 / sqrt(x)"},
    {.name = "pow", IN(1, 1), .nout = 1, ATTRS(pow_attrs), .infer = pow_infer, .cost = cost4, .kernel = "pr_pow_fwd",
     .kargs = kargs_pow, GRADS(GRAD(0, "pow.dx", GDY, GX(0))), .doc = "x ^ exponent (a constant)"},
    // div: add/sub/mul's forward kernel; one backward kernel for both operands (div.d)
    {.name = "div", IN(2, 2), .nout = 1, .infer = binary_infer, .cost = cost1, .kernel = "pr_binary_fwd",
     .kargs = kargs_binary, .variant = BIN_DIV, GRADS(GRAD(GRAD_EVERY_SLOT, "div.d", GDY, GX(0), GX(1))),
     .doc = "a / b with broadcasting"},
    {.name = "mean", IN(1, 1), .nout = 1, ATTRS(mean_attrs), .infer = mean_infer, .cost = mean_cost,
     .kernel = "pr_mean_fwd", .kargs = kargs_mean, GRADS(GRAD(0, "mean.dx", GDY)), .doc = "mean over one axis"},
    // slice: concat.dx's kernel with acc 0; its gradient pads dy with zeros
    {.name = "slice", IN(1, 1), .nout = 1, ATTRS(slice_attrs), .infer = slice_infer, .cost = cost0,
     .kernel = "pr_slice", .kargs = kargs_slice_op, GRADS(GRAD(0, "slice.dx", GDY)),
     .doc = "x[start:end] along one axis"},

    // Internal ops made by the compiler's passes: SwiGLU's gate silu(g) * u, from a silu whose
    // only use is a mul of its shape (compiler/fuse.c), and its backward writing dg and du.
    {.name = "silu_mul", IN(2, 2), .nout = 1, .infer = binary_infer, .cost = cost6, .internal = true,
     .kernel = "pr_silu_mul_fwd", .kargs = kargs_n, .grad_rule = grad_silu_mul,
     .doc = "silu(g) * u (SwiGLU's gate, fused by the fuse pass)"},
    {.name = "silu_mul.d", IN(3, 3), .nout = 2, .cost = bwd_cost, .internal = true,
     .kernel = "pr_silu_mul_bwd", .kargs = kargs_n, .acc = true, .doc = "backward (dg and du)"},

    // Internal ops (gradients and their bookkeeping)
    BWD("matmul.da", 2, 2, "pr_matmul_bwd_a", kargs_matmul, true, .progress = true),
    BWD("matmul.db", 2, 2, "pr_matmul_bwd_b", kargs_matmul, true, .progress = true),
    BWD("linear.dx", 2, 2, "pr_linear_bwd_x", kargs_linear, true, .progress = true,
        FUSE("gelu.dx", "pr_linear_bwd_x_gelu")),
    BWD("linear.dw", 2, 2, "pr_linear_bwd_w", kargs_linear, true, .progress = true),
    {.name = "sum_rows", IN(1, 1), .nout = 1, .cost = sum_rows_cost, .internal = true, .kernel = "pr_sum_rows",
     .kargs = kargs_sum_rows, .acc = true, .doc = "backward"},
    BWD("binary.d", 1, 2, "pr_binary_bwd", kargs_binary_d, true),
    BWD("scale.dx", 1, 1, "pr_scale_bwd", kargs_scale, true),
    BWD("relu.dx", 2, 2, "pr_relu_bwd", kargs_n, true),
    BWD("gelu.dx", 3, 3, "pr_gelu_bwd", kargs_gelu, true, .epilogue = true),
    BWD("tanh.dx", 2, 2, "pr_tanh_bwd", kargs_n, true),
    BWD("sigmoid.dx", 2, 2, "pr_sigmoid_bwd", kargs_n, true),
    BWD("silu.dx", 2, 2, "pr_silu_bwd", kargs_n, true),
    BWD("softmax.dx", 2, 2, "pr_softmax_bwd", kargs_softmax, true),
    BWD("layernorm.dx", 5, 5, "pr_layernorm_bwd_x", kargs_layernorm, true),
    BWD("layernorm.dw", 4, 4, "pr_layernorm_bwd_w", kargs_layernorm, true),
    BWD("rms_norm.dx", 4, 4, "pr_rms_norm_bwd_x", kargs_layernorm, true),
    BWD("rms_norm.dw", 3, 3, "pr_rms_norm_bwd_w", kargs_layernorm, true),
    BWD("embedding.dw", 2, 2, "pr_embedding_bwd_w", kargs_embedding, true),
    BWD("copy", 1, 1, "pr_copy", kargs_copy, false),
    BWD("permute.dx", 1, 1, "pr_permute", kargs_permute, false),
    BWD("split.dx", 1, -1, "pr_concat", kargs_split, false),
    BWD("concat.dx", 1, 1, "pr_slice", kargs_slice, true),
    {.name = "attention.dx", IN(3, 3), .nout = 1, .cost = bwd_cost, .internal = true, .kernel = "pr_attention_bwd",
     .kargs = kargs_attention, .workspace = ws_attention, .acc = true, .progress = true, .doc = "backward"},
    BWD("attention.dq", 5, 5, "pr_attention_sep_bwd_q", kargs_attention, true,
        .workspace = ws_attention, .progress = true),
    BWD("attention.dk", 5, 5, "pr_attention_sep_bwd_k", kargs_attention, true,
        .workspace = ws_attention, .progress = true),
    BWD("attention.dv", 5, 5, "pr_attention_sep_bwd_v", kargs_attention, true,
        .workspace = ws_attention, .progress = true),
    BWD("rope.dx", 1, 1, "pr_rope_bwd", kargs_rope, true),
    BWD("cross_entropy.dx", 3, 3, "pr_cross_entropy_bwd", kargs_cross_entropy, true),
    BWD("mse.dx", 3, 3, "pr_mse_bwd", kargs_mse, true),
    // Elementwise unary ops of exported graphs
    BWD("neg.dx", 1, 1, "pr_scale_bwd", kargs_neg, true),
    BWD("exp.dx", 2, 2, "pr_exp_bwd", kargs_n, true),
    BWD("rsqrt.dx", 2, 2, "pr_rsqrt_bwd", kargs_n, true),
    BWD("pow.dx", 2, 2, "pr_pow_bwd", kargs_pow, true),
    BWD("div.d", 3, 3, "pr_div_bwd", kargs_div_d, true),
    BWD("mean.dx", 1, 1, "pr_mean_bwd", kargs_mean, true),
    BWD("slice.dx", 1, 1, "pr_pad", kargs_slice_op, true),
    // y = x0 + x1 + ... in this order: the gradient of a tensor with several consumers.
    {.name = "add_n", IN(1, -1), .nout = 1, .cost = cost1, .internal = true, .kernel = "pr_add_n",
     .kargs = kargs_add_n, .doc = "sum of gradient contributions, in consumer order"},
    // y = acc ? y + x : x: accumulates a parameter gradient whose kernel cannot accumulate.
    {.name = "accumulate", IN(1, 1), .nout = 1, .cost = cost1, .internal = true, .kernel = "pr_accumulate",
     .kargs = kargs_n, .acc = true, .doc = "gradient accumulation over microbatches"},
};
// clang-format on

int op_count(void) {
  return (int)(sizeof ops / sizeof ops[0]);
}
const OpDef *op_at(int i) {
  return &ops[i];
}

const OpDef *op_find(const char *name) {
  for (int i = 0; i < op_count(); i++)
    if (strcmp(ops[i].name, name) == 0) return &ops[i];
  return NULL;
}

int node_visible_outputs(const Node *n) {
  return n->nout - n->op->nhidden;
}

int64_t op_index_bound(const Node *n, int slot) {
  const IndexBound *b = n->op->ids;
  if (!b || b->slot != slot || b->of >= n->nin) return 0;
  const Shape *s = &n->in[b->of]->shape;
  int dim = b->dim < 0 ? b->dim + s->rank : b->dim;
  if (dim < 0 || dim >= s->rank || s->d[dim].b) return 0;
  return s->d[dim].n;
}

int op_attr_index(const OpDef *op, const char *name) {
  for (int i = 0; i < op->nattrs; i++)
    if (strcmp(op->attrs[i].name, name) == 0) return i;
  return -1;
}

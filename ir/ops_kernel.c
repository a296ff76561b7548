// Kernel arguments: for each op (forward and internal backward ops), the scalar arguments of its
// runtime kernel call, computed from the node's static shapes with the batch bound. The pointer
// arguments (outputs, inputs, workspace) are generic and added by the code generator; the
// kernels' signatures are in runtime/pipert.h.
#include "ops_impl.h"

static int64_t dimv(Dim d, int64_t batch) {
  return d.b ? d.n * batch : d.n;
}
static int64_t nel(const Tensor *t, int64_t batch) {
  return shape_numel(&t->shape, batch);
}

static void ki(KArgs *o, const char *name, int64_t v) {
  o->a[o->n++] = (KArg){.name = name, .kind = 'i', .i = v};
}
// A loss's reduction count n (= nel(t, batch) / div): per batch row when t has the batch dim.
static void kloss(KArgs *o, const char *name, const Tensor *t, int64_t div, int64_t batch) {
  bool b = false;
  for (int i = 0; i < t->shape.rank; i++) b |= t->shape.d[i].b;
  o->a[o->n++] = (KArg){
      .name = name, .kind = 'i', .i = nel(t, batch) / div, .per_row = b ? nel(t, 1) / div : 0};
}
static void kf(KArgs *o, const char *name, double v) {
  o->a[o->n++] = (KArg){.name = name, .kind = 'f', .f = v};
}
static void ka(KArgs *o, const char *name, const int64_t *arr, int n) {
  o->a[o->n++] = (KArg){.name = name, .kind = 'a', .arr = arr, .n = n};
}

// The forward node a node's sizes come from (itself, or the node it differentiates).
static const Node *fw(const Node *n) {
  return n->fwd ? n->fwd : n;
}

// ---- matmul: batch, M, N, K, ta, tb, b_batched
void kargs_matmul(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  const Node *f = fw(n);
  const Shape *sa = &f->in[0]->shape, *sb = &f->in[1]->shape, *sy = &f->out[0]->shape;
  int ta = (int)f->attrs[0].i, tb = (int)f->attrs[1].i;
  int64_t M = dimv(sy->d[sy->rank - 2], batch), N = dimv(sy->d[sy->rank - 1], batch);
  int64_t K = dimv(sa->d[sa->rank - (ta ? 2 : 1)], batch);
  int64_t nb = nel(f->out[0], batch) / (M * N);
  ki(o, "batch", nb);
  ki(o, "M", M);
  ki(o, "N", N);
  ki(o, "K", K);
  ki(o, "ta", ta);
  ki(o, "tb", tb);
  ki(o, "b_batched", sb->rank != 2 || sa->rank == 2 ? 1 : 0);
}

// ---- linear and its gradients: rows, in, out
void kargs_linear(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  const Node *f = fw(n);
  int64_t in = f->in[1]->shape.d[1].n, out = f->in[1]->shape.d[0].n;
  ki(o, "rows", nel(f->in[0], batch) / in);
  ki(o, "in", in);
  ki(o, "out", out);
}

// ---- bias gradients (linear, layernorm): rows, cols of dy
void kargs_sum_rows(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  int64_t cols = nel(n->out[0], batch);
  ki(o, "rows", nel(n->in[0], batch) / cols);
  ki(o, "cols", cols);
}

// Strides of operand t over the output dims of y (0 where t broadcasts), right-aligned.
static int64_t *bstrides(Arena *a, const Tensor *t, const Tensor *y, int64_t batch) {
  int r = y->shape.rank, rt = t->shape.rank;
  int64_t *s = ARENA_ARRAY(a, int64_t, r ? r : 1);
  int64_t stride = 1;
  for (int i = r - 1; i >= 0; i--) {
    int it = rt - r + i;
    int64_t d = it >= 0 ? dimv(t->shape.d[it], batch) : 1;
    s[i] = d == 1 && dimv(y->shape.d[i], batch) != 1 ? 0 : stride;
    stride *= d;
  }
  return s;
}

static int64_t *dims_of(Arena *a, const Shape *sh, int rank, int64_t batch) {
  int64_t *d = ARENA_ARRAY(a, int64_t, rank ? rank : 1);
  for (int i = 0; i < rank; i++) {
    int j = sh->rank - rank + i;
    d[i] = j >= 0 ? dimv(sh->d[j], batch) : 1;
  }
  return d;
}

// ---- add/sub/mul: op, rank, ydims, astr, bstr
void kargs_binary(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  const Tensor *y = n->out[0];
  ki(o, "op", n->op->variant); // BinaryCode
  ki(o, "rank", y->shape.rank);
  ka(o, "ydims", dims_of(a, &y->shape, y->shape.rank, batch), y->shape.rank);
  ka(o, "astr", bstrides(a, n->in[0], y, batch), y->shape.rank);
  ka(o, "bstr", bstrides(a, n->in[1], y, batch), y->shape.rank);
}

// ---- binary gradient: op, which, rank, ydims, xdims, ostr
void kargs_binary_d(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  const Node *f = n->fwd;
  const Tensor *y = f->out[0];
  int r = y->shape.rank;
  ki(o, "op", f->op->variant); // BinaryCode
  ki(o, "which", n->slot);
  ki(o, "rank", r);
  ka(o, "ydims", dims_of(a, &y->shape, r, batch), r);
  ka(o, "xdims", dims_of(a, &f->in[n->slot]->shape, r, batch), r);
  ka(o, "ostr", bstrides(a, f->in[1 - n->slot], y, batch), r);
}

// ---- div gradient of operand `which` (the slot): which, rank, ydims, xdims, astr, bstr
void kargs_div_d(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  const Node *f = n->fwd;
  const Tensor *y = f->out[0];
  int r = y->shape.rank;
  ki(o, "which", n->slot);
  ki(o, "rank", r);
  ka(o, "ydims", dims_of(a, &y->shape, r, batch), r);
  ka(o, "xdims", dims_of(a, &f->in[n->slot]->shape, r, batch), r);
  ka(o, "astr", bstrides(a, f->in[0], y, batch), r);
  ka(o, "bstr", bstrides(a, f->in[1], y, batch), r);
}

// ---- elementwise: n (and factor for scale)
void kargs_n(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  ki(o, "n", nel(n->out[0], batch));
}

// gelu and its gradient: n, and exact = 1 for approximate "none" (the forward's attribute).
void kargs_gelu(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  ki(o, "n", nel(n->out[0], batch));
  ki(o, "exact", fw(n)->attrs[0].i == 0);
}

void kargs_scale(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  ki(o, "n", nel(n->out[0], batch));
  kf(o, "factor", fw(n)->attrs[0].f);
}

// ---- neg (scale's kernels): n, factor -1
void kargs_neg(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  ki(o, "n", nel(n->out[0], batch));
  kf(o, "factor", -1.0);
}

// ---- pow and its gradient: n, exponent (the forward's attribute)
void kargs_pow(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  ki(o, "n", nel(n->out[0], batch));
  kf(o, "exponent", fw(n)->attrs[0].f);
}

// ---- softmax: outer, dim, inner around the axis
void kargs_softmax(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  const Node *f = fw(n);
  const Shape *s = &f->out[0]->shape;
  int axis = (int)(f->attrs[0].i < 0 ? f->attrs[0].i + s->rank : f->attrs[0].i);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= dimv(s->d[i], batch);
  for (int i = axis + 1; i < s->rank; i++) inner *= dimv(s->d[i], batch);
  ki(o, "outer", outer);
  ki(o, "dim", dimv(s->d[axis], batch));
  ki(o, "inner", inner);
}

// ---- layernorm and rms_norm (their eps is attribute 0 too): rows, C (and eps forward)
void kargs_layernorm(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  const Node *f = fw(n);
  const Shape *s = &f->in[0]->shape;
  int64_t C = s->d[s->rank - 1].n;
  ki(o, "rows", nel(f->in[0], batch) / C);
  ki(o, "C", C);
  if (!n->fwd) kf(o, "eps", f->attrs[0].f);
}

// ---- embedding: n ids, V, C
void kargs_embedding(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  const Node *f = fw(n);
  ki(o, "n", nel(f->in[0], batch));
  ki(o, "V", f->in[1]->shape.d[0].n);
  ki(o, "C", f->in[1]->shape.d[1].n);
}

// ---- copy (reshape and its gradient): bytes
void kargs_copy(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  ki(o, "bytes", nel(n->out[0], batch) * dtype_size(n->out[0]->dtype));
}

// The permutation a transpose/permute node applies (output dim i = input dim perm[i]); the
// row's PermForm says which attributes give it.
static void node_perm(const Node *f, int64_t *perm) {
  int r = f->in[0]->shape.rank;
  if (f->op->variant == PERM_LIST) {
    for (int i = 0; i < r; i++)
      perm[i] = f->attrs[0].ints[i] < 0 ? f->attrs[0].ints[i] + r : f->attrs[0].ints[i];
    return;
  }
  for (int i = 0; i < r; i++) perm[i] = i;
  int64_t d0 = f->attrs[0].i < 0 ? f->attrs[0].i + r : f->attrs[0].i;
  int64_t d1 = f->attrs[1].i < 0 ? f->attrs[1].i + r : f->attrs[1].i;
  perm[d0] = d1;
  perm[d1] = d0;
}

// ---- transpose/permute: rank, xdims, perm; the gradient applies the inverse permutation to dy.
void kargs_permute(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  const Node *f = fw(n);
  int r = f->in[0]->shape.rank;
  int64_t *perm = ARENA_ARRAY(a, int64_t, r ? r : 1), *p = perm;
  node_perm(f, perm);
  const Shape *x = &f->in[0]->shape;
  if (n->fwd) {
    p = ARENA_ARRAY(a, int64_t, r ? r : 1);
    for (int i = 0; i < r; i++) p[perm[i]] = i;
    x = &f->out[0]->shape;
  }
  ki(o, "rank", r);
  ka(o, "xdims", dims_of(a, x, r, batch), r);
  ka(o, "perm", p, r);
}

// outer/inner sizes around axis of shape s.
static void around(const Shape *s, int axis, int64_t batch, int64_t *outer, int64_t *inner) {
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < axis; i++) *outer *= dimv(s->d[i], batch);
  for (int i = axis + 1; i < s->rank; i++) *inner *= dimv(s->d[i], batch);
}

static int norm_ax(int64_t ax, int rank) {
  return (int)(ax < 0 ? ax + rank : ax);
}

// ---- split (and concat's inverse): outer, inner, n, sizes
void kargs_split(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  const Node *f = fw(n);
  const Shape *x = &f->in[0]->shape;
  int axis = norm_ax(f->attrs[0].i, x->rank), k = f->attrs[1].count;
  int64_t outer, inner;
  around(x, axis, batch, &outer, &inner);
  (void)a;
  ki(o, "outer", outer);
  ki(o, "inner", inner);
  ki(o, "n", k);
  ka(o, "sizes", f->attrs[1].ints, k);
}

// ---- concat: outer, inner, n, sizes (the inputs' sizes along the axis)
void kargs_concat(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  const Node *f = fw(n);
  const Shape *y = &f->out[0]->shape;
  int axis = norm_ax(f->attrs[0].i, y->rank);
  int64_t outer, inner;
  around(y, axis, batch, &outer, &inner);
  int64_t *sizes = ARENA_ARRAY(a, int64_t, f->nin);
  for (int i = 0; i < f->nin; i++) sizes[i] = f->in[i]->shape.d[axis].n;
  ki(o, "outer", outer);
  ki(o, "inner", inner);
  ki(o, "n", f->nin);
  ka(o, "sizes", sizes, f->nin);
}

// ---- concat gradient for input slot: outer, inner, total, offset, size
void kargs_slice(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  const Node *f = n->fwd;
  const Shape *y = &f->out[0]->shape;
  int axis = norm_ax(f->attrs[0].i, y->rank);
  int64_t outer, inner, off = 0;
  around(y, axis, batch, &outer, &inner);
  for (int i = 0; i < n->slot; i++) off += f->in[i]->shape.d[axis].n;
  ki(o, "outer", outer);
  ki(o, "inner", inner);
  ki(o, "total", y->d[axis].n);
  ki(o, "offset", off);
  ki(o, "size", f->in[n->slot]->shape.d[axis].n);
}

// ---- mean and its gradient: outer, dim, inner around the axis (of the forward's input)
void kargs_mean(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  const Node *f = fw(n);
  const Shape *x = &f->in[0]->shape;
  int axis = norm_ax(f->attrs[0].i, x->rank);
  int64_t outer, inner;
  around(x, axis, batch, &outer, &inner);
  ki(o, "outer", outer);
  ki(o, "dim", x->d[axis].n);
  ki(o, "inner", inner);
}

// ---- slice (pr_slice, acc 0) and its gradient (pr_pad): outer, inner, total, offset, size
void kargs_slice_op(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  const Node *f = fw(n);
  const Shape *x = &f->in[0]->shape;
  int axis = norm_ax(f->attrs[0].i, x->rank);
  int64_t start, end, outer, inner;
  slice_bounds(f, axis, &start, &end);
  around(x, axis, batch, &outer, &inner);
  ki(o, "outer", outer);
  ki(o, "inner", inner);
  ki(o, "total", x->d[axis].n);
  ki(o, "offset", start);
  ki(o, "size", end - start);
  if (!n->fwd) o->a[o->n++] = (KArg){.name = "acc", .kind = 'x', .expr = "0"};
}

// ---- attention: B, T, C, NH, NKV (n_kv_head, which the shape rule set to n_head when not
// given), causal
void kargs_attention(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  const Node *f = fw(n);
  const Shape *y = &f->out[0]->shape;
  ki(o, "B", dimv(y->d[0], batch));
  ki(o, "T", dimv(y->d[1], batch));
  ki(o, "C", y->d[2].n);
  ki(o, "NH", f->attrs[0].i);
  ki(o, "NKV", f->attrs[1].i);
  ki(o, "causal", f->attrs[2].i);
}

// pr_attention_bwd's workspace, as pr_attention_bwd_ws(B, T, C, NH, NKV) computes it (runtime/
// kernels_attention.c; the two must agree): one slice per thread for at most min(B*NKV, 64)
// threads (PR_ATTENTION_MAX_THREADS), a slice being vT (hs,ld), dpre (T,ld), a row of datt (ld)
// and two result rows (2,hs) floats, hs = C/NH, ld = T rounded up to 32, rounded up to 64 bytes.
int64_t ws_attention(const Node *n, int64_t batch) {
  const Node *f = fw(n);
  const Shape *y = &f->out[0]->shape;
  int64_t B = dimv(y->d[0], batch), T = dimv(y->d[1], batch), C = y->d[2].n, NH = f->attrs[0].i;
  int64_t NKV = f->attrs[1].i;
  if (NH <= 0 || C % NH != 0 || NKV <= 0 || NH % NKV != 0 || B * T * C == 0) return 64;
  int64_t hs = C / NH, ld = (T + 31) & ~(int64_t)31;
  int64_t slice = ((hs * ld + T * ld + 4 * ld + 4 * hs) * 4 + 63) & ~(int64_t)63;
  return slice * (B * NKV < 64 ? B * NKV : 64);
}

// ---- rope and its gradient: outer, T, inner, D around the position dim (seq_axis), theta,
// interleaved (pairing "interleaved")
void kargs_rope(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  const Node *f = fw(n);
  const Shape *x = &f->in[0]->shape;
  int axis = (int)f->attrs[2].i;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= dimv(x->d[i], batch);
  for (int i = axis + 1; i < x->rank - 1; i++) inner *= dimv(x->d[i], batch);
  ki(o, "outer", outer);
  ki(o, "T", dimv(x->d[axis], batch));
  ki(o, "inner", inner);
  ki(o, "D", x->d[x->rank - 1].n);
  kf(o, "theta", f->attrs[0].f);
  ki(o, "interleaved", f->attrs[1].i == 1);
}

// ---- cross_entropy: rows (a loss count, see KArg.per_row), V
void kargs_cross_entropy(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  const Node *f = fw(n);
  const Shape *s = &f->in[0]->shape;
  int64_t V = s->d[s->rank - 1].n;
  kloss(o, "rows", f->in[0], V, batch);
  ki(o, "V", V);
}

// ---- mse: n (a loss count, see KArg.per_row; and which for the gradient)
void kargs_mse(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  kloss(o, "n", fw(n)->in[0], 1, batch);
  if (n->fwd) ki(o, "which", n->slot);
}

// ---- add_n (gradient sums): k, n
void kargs_add_n(const Node *n, int64_t batch, Arena *a, KArgs *o) {
  (void)a;
  ki(o, "k", n->nin);
  ki(o, "n", nel(n->out[0], batch));
}

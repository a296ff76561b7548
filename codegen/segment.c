// segment.c: a node sequence (a stage's forward, backward or step-end nodes) as kernel calls.
//
// Each node becomes one call into the runtime, rendered first as a template: the call's text
// with every pointer argument (an output, an input, the workspace) left as a hole, and the holes'
// region, offset and element type beside it. Straight-line code fills each hole with the tensor's
// identifier. Consecutive nodes of one instance of a repeat block form a group (a node outside
// any block belongs to the instance whose forward tensor it sums the gradient of, else to none);
// a run of groups of the same block whose templates are identical, call by call and hole by hole
// in region and type, is printed once as a loop over the instances, llm.c's
// `for (l = 0; l < L; l++)`, each hole's offset either base + l * stride (when the instances'
// offsets are evenly spaced, as parameters and gradients are) or a per-instance table; the holes
// are named locals declared at the loop's top (llm.c's `float *l_ln1w = params.ln1w + l * C;`),
// named after the instances' tensor names with the instance as l (loop_names.c), each with its
// dtype and shape, or the tensor's macro when every instance reads the same tensor. The loop
// runs exactly the calls the straight-line code would, in the same order with the same
// arguments: the numbers cannot change. Anything else (a group that differs in one size, an
// attribute, an absent optional input) stays straight-line. Linear in the nodes. Every line is
// laid out within 100 columns (wrap.c).
//
// --precision bf16|fp16: a 16-bit operand's hole gets its f32 copy in the conversion area
// (CONV + offset, outputs then inputs as precision_conv_bytes lays them out); the call is
// preceded by the widening of each 16-bit input and followed by the narrowing of each 16-bit
// output (pr_bf16_* / pr_f16_*, runtime/half.c), in loops as in straight-line code. With
// --replicas, a call after which buckets of the replicas' gradient exchange are final is followed
// by their guarded pr_replicas_ready calls (buckets.c), in a loop as base + l * (buckets per
// instance); instances that differ in their buckets do not loop. On a rank with message streams,
// each GEMM and attention call of a forward, backward or weight-gradient segment is followed by
// pr_comm_progress() (the decoration's, emit_after_kernel), in loops likewise.
// Unless --no-fuse (and on the cpu target only), a product and the elementwise op reading its
// output become one call of a fused kernel where the registry and the memory plan allow it
// ("Fused epilogues" below); the loops then compare the fused calls' templates like any other.
#include <stdlib.h>
#include <string.h>

#include "../compiler/precision.h"
#include "../ir/ops.h"
#include "emit.h"

enum { HOLE = '\1' }; // a pointer argument in a call's template

typedef struct Arg {
  Region r;          // region of the buffer
  int64_t off;       // byte offset in it (in slot 0 of its stage when slotted)
  const char *ctype; // element type ("float", "int32_t"); NULL: a workspace (void *)
  const Tensor *t;   // the tensor (NULL: workspace)
  int sv;            // the stage whose slots hold it (its address adds slot * STRIDE_sv); -1 none
  bool out;          // an output of the call
  int64_t conv;      // --precision, a 16-bit tensor: byte offset of its f32 copy in the
                     // conversion area (CONV), which the kernel gets instead (-1: none)
} Arg;

typedef struct Call {
  const Node *n;    // the node (fused: the epilogue node)
  const Node *prod; // fused: the product node whose call this also is (NULL: none)
  const char *kern; // the kernel called
  const char *text; // the call without its pointers: each pointer argument is HOLE
  Arg *args;        // the holes in order
  int nargs;        // count
  bool acc;         // the call accumulates into its outputs (its acc argument is not "0")
} Call;

static void hole(FILE *f, Call *c, Arg a) {
  fputc(HOLE, f);
  c->args[c->nargs++] = a;
}

static Arg tensor_arg(const E *e, const Tensor *t) {
  return (Arg){e->p->region[t->id],
               e->p->offset[t->id],
               t->half ? "uint16_t" : ctype(t->dtype),
               t,
               slot_stage(e, t->id),
               false,
               -1};
}

static Arg out_arg(const E *e, const Tensor *t) {
  Arg a = tensor_arg(e, t);
  a.out = true;
  return a;
}

// The scalar arguments of node n's call, after its pointer arguments.
static void print_kargs(E *e, FILE *f, const Node *n) {
  KArgs ka = {.n = 0};
  n->op->kargs(n, e->tc->mb_size, e->a, &ka);
  for (int i = 0; i < ka.n; i++) {
    const KArg *k = &ka.a[i];
    fprintf(f, ", /*%s*/ ", k->name);
    switch (k->kind) {
    case 'i':
      if (k->per_row > 0)
        fprintf(f, "%lld * loss_rows", (long long)k->per_row);
      else
        fprintf(f, "%lld", (long long)k->i);
      break;
    case 'f':
      fputs(flit(e, k->f), f);
      break;
    case 'x':
      fputs(k->expr, f);
      break;
    case 'a':
      fputs("(const int64_t[]){", f);
      for (int j = 0; j < k->n; j++) fprintf(f, "%s%lld", j ? ", " : "", (long long)k->arr[j]);
      fputs("}", f);
      break;
    }
  }
}

// One kernel call: outputs, inputs (absent optional ones as NULL), workspace, scalars, acc.
static void render(E *e, const Node *n, const char *acc, Call *c) {
  const OpDef *op = n->op;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  c->n = n;
  c->prod = NULL;
  c->kern = op->kernel;
  c->args = ARENA_ARRAY(e->a, Arg, n->nout + n->nin + 1);
  c->nargs = 0;
  fprintf(f, "%s(", kernel_name(e, op->kernel)); // pr_cu_ on the CUDA target
  bool first = true;
#define SEP() (first ? (first = false, "") : ", ")
  if (op->nout == 0) {
    // C's compound literal; C++ (nvcc) has none of runtime values: a PtrList temporary
    // (emit_cuda.c)
    if (e->cuda)
      fprintf(f, "%sPtrList<float *, %d>{{", SEP(), n->nout);
    else
      fprintf(f, "%s(float *const[]){", SEP());
    for (int k = 0; k < n->nout; k++) {
      fputs(k ? ", " : "", f);
      hole(f, c, out_arg(e, n->out[k]));
    }
    fputs(e->cuda ? "}}" : "}", f);
  } else {
    for (int k = 0; k < n->nout; k++) {
      fputs(SEP(), f);
      hole(f, c, out_arg(e, n->out[k]));
    }
  }
  if (op->max_in < 0) {
    if (e->cuda)
      fprintf(f, "%sPtrList<const float *, %d>{{", SEP(), n->nin);
    else
      fprintf(f, "%s(const float *const[]){", SEP());
    for (int j = 0; j < n->nin; j++) {
      fputs(j ? ", " : "", f);
      hole(f, c, tensor_arg(e, n->in[j]));
    }
    fputs(e->cuda ? "}}" : "}", f);
  } else {
    for (int j = 0; j < op->max_in; j++) {
      fputs(SEP(), f);
      if (j < n->nin)
        hole(f, c, tensor_arg(e, n->in[j]));
      else
        fputs("NULL", f);
    }
  }
  if (op->workspace) {
    fprintf(f, "%s(void *)", SEP());
    hole(f, c, (Arg){REG_ACTS, e->p->ws_offset[n->id], NULL, NULL, ws_slot_stage(e, n), false, -1});
  }
  print_kargs(e, f, n); // (after at least one pointer: every op has an output)
  if (op->acc) fprintf(f, "%s/*acc*/ %s", SEP(), acc);
#undef SEP
  fputs(");", f);
  fclose(f);
  c->text = arena_strdup(e->a, buf);
  free(buf);
  c->acc = op->acc && strcmp(acc, "0") != 0;
  // --precision: each 16-bit operand's f32 copy, outputs then inputs (precision_conv_bytes).
  int64_t conv = 0;
  for (int k = 0; k < c->nargs; k++) {
    Arg *a = &c->args[k];
    if (!a->t || !a->t->half) continue;
    a->conv = conv;
    conv += precision_conv_size(a->t, e->tc->mb_size);
  }
}

// ---- Fused epilogues (E.fuse; pipec compile --no-fuse turns them off)
//
// A product node P whose op names an epilogue (OpDef.fuse) and the node X of that op (an
// `epilogue` row: elementwise over its input 0) that reads P's output 0 become one call of the
// fused kernel, printed at X's place (P's call is not printed): the kernel finishes each block of
// P's product with X's work while the block is in cache, computing every element with the
// operations of the two calls. Fused only where that is the same program: the first node after P
// that reads P's output is X, and reads it as its input 0; no node between them reads P's outputs
// or writes where P's inputs lie (they are read later now); X's outputs lie apart from P's
// operands and X's other inputs (the fused kernel writes them while it still reads those; one
// exactly at a P input's place where the kernel allows it, FuseDef.in_place); P
// writes its outputs (acc 0: a W node accumulates); no workspace, no 16-bit operand, and on the
// cpu target only. Decided from the registry's rows, the graph and the memory plan, never from
// the kernels' names.

typedef struct Span {
  Region r;       // region
  int64_t lo, hi; // bytes [lo, hi) (in slot 0 of stage sv when slotted)
  int sv;         // the stage whose slots hold it, -1 none
} Span;

// Where tensor t lies (false: no storage).
static bool tensor_span(const E *e, const Tensor *t, Span *s) {
  int64_t off = e->p->offset[t->id];
  if (off < 0) return false;
  *s = (Span){e->p->region[t->id], off,
              off + shape_numel(&t->shape, e->tc->mb_size) * tensor_elem_size(t),
              slot_stage(e, t->id)};
  return true;
}

// Whether a and b may share a byte (slotted at different stages: assumed so).
static bool spans_meet(Span a, Span b) {
  if (a.r != b.r) return false;
  if (a.sv != b.sv) return true;
  return a.lo < b.hi && b.lo < a.hi;
}

// Whether any tensor of xs[0..nx) may share a byte with one of ys[0..ny) (skipping NULLs and
// each tensor with itself); with same_ok, two at exactly the same place and size do not count.
static bool tensors_meet(const E *e, Tensor *const *xs, int nx, Tensor *const *ys, int ny,
                         bool same_ok) {
  for (int i = 0; i < nx; i++)
    for (int j = 0; j < ny; j++) {
      Span a, b;
      if (!xs[i] || !ys[j] || xs[i] == ys[j]) continue;
      if (!tensor_span(e, xs[i], &a) || !tensor_span(e, ys[j], &b)) return true;
      if (same_ok && a.r == b.r && a.sv == b.sv && a.lo == b.lo && a.hi == b.hi) continue;
      if (spans_meet(a, b)) return true;
    }
  return false;
}

static bool node_reads(const Node *n, const Tensor *t) {
  for (int k = 0; k < n->nin; k++)
    if (n->in[k] == t) return true;
  return false;
}

// Whether node n can be part of a fused call: a fixed list of operands, each stored in f32, no
// workspace.
static bool fusable_node(const E *e, const Node *n) {
  if (n->op->nout == 0 || n->op->max_in < 0 || n->op->workspace || !n->nout) return false;
  for (int k = 0; k < n->nout; k++)
    if (n->out[k]->half || e->p->offset[n->out[k]->id] < 0) return false;
  for (int k = 0; k < n->nin; k++)
    if (n->in[k]->half || e->p->offset[n->in[k]->id] < 0) return false;
  return true;
}

// The index j > i of the node that product nodes[i] fuses with, or -1.
static int fuse_with(const E *e, Node *const *nodes, int n, int i) {
  const Node *p = nodes[i];
  const OpDef *xop = p->op->fuse ? op_find(p->op->fuse->op) : NULL;
  if (!e->fuse || !xop || !xop->epilogue || p->role == ROLE_WGT || !fusable_node(e, p) ||
      (e->rep && e->rep->count[p->id]))
    return -1;
  const Tensor *t = p->out[0];
  int j = i + 1;
  while (j < n && !node_reads(nodes[j], t)) j++;
  if (j >= n) return -1;
  const Node *x = nodes[j];
  if (x->op != xop || x->in[0] != t || !fusable_node(e, x)) return -1;
  for (int k = 1; k < x->nin; k++)
    if (x->in[k] == t) return -1;
  const char *pb, *xb;
  int pi, xi;
  segment_node_key(p, &pb, &pi);
  segment_node_key(x, &xb, &xi);
  if ((pb != xb && (!pb || !xb || strcmp(pb, xb))) || pi != xi) return -1;
  for (int k = i + 1; k < j; k++) { // the nodes P's call now runs after
    const Node *m = nodes[k];
    for (int o = 0; o < p->nout; o++)
      if (node_reads(m, p->out[o])) return -1;
    if (tensors_meet(e, m->out, m->nout, p->in, p->nin, false)) return -1;
    if (m->op->workspace && e->p->ws_offset[m->id] >= 0) {
      int64_t lo = e->p->ws_offset[m->id];
      Span w = {REG_ACTS, lo, lo + m->op->workspace(m, e->tc->mb_size), ws_slot_stage(e, m)};
      for (int q = 0; q < p->nin; q++) {
        Span a;
        if (!tensor_span(e, p->in[q], &a) || spans_meet(a, w)) return -1;
      }
    }
  }
  if (tensors_meet(e, x->out, x->nout, p->in, p->nin, p->op->fuse->in_place) ||
      tensors_meet(e, x->out, x->nout, p->out, p->nout, false) ||
      tensors_meet(e, x->out, x->nout, x->in + 1, x->nin - 1, false) ||
      tensors_meet(e, p->out, p->nout, x->in + 1, x->nin - 1, false))
    return -1;
  return j;
}

// Node n's inputs from..max_in of its fixed list, each after ", ", an absent optional one NULL.
static void fused_ins(E *e, FILE *f, Call *c, const Node *n, int from) {
  for (int j = from; j < n->op->max_in; j++) {
    fputs(", ", f);
    if (j < n->nin)
      hole(f, c, tensor_arg(e, n->in[j]));
    else
      fputs("NULL", f);
  }
}

// The fused call of product p and epilogue x (fuse_with), in FuseDef's argument order; acc: x's
// acc argument.
static void render_fused(E *e, const Node *p, const Node *x, const char *acc, Call *c) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  c->n = x;
  c->prod = p;
  c->kern = p->op->fuse->kernel;
  c->args = ARENA_ARRAY(e->a, Arg, p->nout + x->nout + p->op->max_in + x->op->max_in + 1);
  c->nargs = 0;
  fprintf(f, "%s(", kernel_name(e, c->kern));
  const char *sep = "";
  for (int k = 0; k < p->nout; k++, sep = ", ") {
    fputs(sep, f);
    hole(f, c, out_arg(e, p->out[k]));
  }
  for (int k = 0; k < x->nout; k++) {
    fputs(", ", f);
    hole(f, c, out_arg(e, x->out[k]));
  }
  fused_ins(e, f, c, p, 0);
  fused_ins(e, f, c, x, 1); // (its input 0 is p's output)
  print_kargs(e, f, p);
  print_kargs(e, f, x);
  if (x->op->acc) fprintf(f, ", /*acc*/ %s", acc);
  fputs(");", f);
  fclose(f);
  c->text = arena_strdup(e->a, buf);
  free(buf);
  c->acc = x->op->acc && strcmp(acc, "0") != 0;
}

// --precision: the conversions around call c whose holes' pointers are ptr[]: before it, each
// 16-bit input (and output it accumulates into) widened into its f32 copy; after it (after
// false), each 16-bit output narrowed back from its copy.
static void print_conversions(E *e, const Call *c, const char *const *ptr, bool after,
                              const char *indent) {
  const char *fmt = e->tc->precision == DT_F16 ? "pr_f16" : "pr_bf16";
  for (int k = 0; k < c->nargs; k++) {
    const Arg *a = &c->args[k];
    if (a->conv < 0) continue;
    long long n = (long long)shape_numel(&a->t->shape, e->tc->mb_size), at = (long long)a->conv / 4;
    if (!after && (!a->out || c->acc))
      out_stmt(e, indent,
               arena_printf(e->a, "%s_widen(CONV + %lld, %s, %lld);", fmt, at, ptr[k], n), NULL);
    if (after && a->out)
      out_stmt(e, indent,
               arena_printf(e->a, "%s_narrow(%s, CONV + %lld, %lld);", fmt, ptr[k], at, n), NULL);
  }
}

// The call's text with its holes filled: ptr[k] for hole k, or its f32 copy (CONV + offset); at
// indent, with the comment note, within 100 columns (out_stmt).
static void print_call(E *e, const Call *c, const char *const *ptr, const char *indent,
                       const char *note) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  int k = 0;
  for (const char *s = c->text; *s; s++) {
    if (*s != HOLE) {
      fputc(*s, f);
      continue;
    }
    const Arg *a = &c->args[k];
    if (a->conv >= 0)
      fprintf(f, "(CONV + %lld)", (long long)a->conv / 4);
    else
      fputs(ptr[k], f);
    k++;
  }
  fclose(f);
  out_stmt(e, indent, buf, note);
  free(buf);
}

// The comment of call c outside a loop: its node's name (fused: the product's + the epilogue's).
static const char *call_note(E *e, const Call *c) {
  if (c->prod)
    return arena_printf(e->a, "%s + %s", comment(e, c->prod->name), comment(e, c->n->name));
  return comment(e, c->n->name);
}

// After a kernel call: the decoration's (emit_trace.c: MPI's progress after a long one).
static void print_progress(E *e, const Call *c, const char *indent) {
  if (c->kern) emit_after_kernel(e, c->prod ? c->prod : c->n, indent); // fused: its product's
}

static void print_straight(E *e, const Call *c) {
  const char **ptr = ARENA_ARRAY(e->a, const char *, c->nargs + 1);
  for (int k = 0; k < c->nargs; k++) {
    const Arg *a = &c->args[k];
    if (a->t)
      ptr[k] = tid(e, a->t);
    else if (e->cuda) // the device workspace (emit_cuda.c)
      ptr[k] = "cu_ws";
    else
      ptr[k] = arena_printf(e->a, "(acts + %lld%s)", (long long)a->off, slot_term(e, a->sv));
  }
  print_conversions(e, c, ptr, false, "  ");
  print_call(e, c, ptr, "  ", call_note(e, c));
  print_conversions(e, c, ptr, true, "  ");
}

typedef struct Group {
  int start, len;  // calls [start, start + len)
  const char *blk; // repeat block (NULL: outside any)
  int inst;        // its instance
} Group;

static bool same_call(const Call *a, const Call *b) {
  if (a->nargs != b->nargs || strcmp(a->text, b->text)) return false;
  for (int k = 0; k < a->nargs; k++)
    if (a->args[k].r != b->args[k].r || a->args[k].ctype != b->args[k].ctype ||
        a->args[k].sv != b->args[k].sv)
      return false;
  return true;
}

// The replicas' buckets final after call c (buckets.c; 0 without them).
static int nready(const E *e, const Call *c) {
  return e->rep ? e->rep->count[c->n->id] : 0;
}

// Whether group b (groups after a) repeats group a: the same calls, and with --replicas the
// same number of buckets after each, bucket k + (b - a) * (a's count) after b's call of a's k.
static bool same_group(const E *e, const Call *c, const Group *a, const Group *b) {
  if (!a->blk || !b->blk || strcmp(a->blk, b->blk) || a->len != b->len) return false;
  int per = 0;
  for (int i = 0; i < a->len; i++) {
    if (!same_call(&c[a->start + i], &c[b->start + i])) return false;
    per += nready(e, &c[a->start + i]);
  }
  for (int i = 0; i < a->len; i++) {
    const Call *x = &c[a->start + i], *y = &c[b->start + i];
    if (nready(e, x) != nready(e, y)) return false;
    if (nready(e, x) && e->rep->first[y->n->id] != e->rep->first[x->n->id] + (b - a) * per)
      return false;
  }
  return true;
}

typedef struct Local {
  const void *key;   // the tensor of the first instance (a workspace: its node)
  const char *expr;  // its address, in terms of l (and slot)
  const char *ident; // its name, unique in the loop
  const char *decl;  // its declaration
  const char *note;  // its comment: the instances' names as one pattern, dtype and shape
} Local;

// The local for hole k of call i of the loop over groups g[0..count), at address expr, named
// apart from loc[0..nloc).
static Local local(E *e, const Call *c, const Group *g, int count, int i, int k, const char *expr,
                   const LoopInfo *li, const Local *loc, int nloc) {
  const Arg *a = &c[g[0].start + i].args[k];
  const char **names = ARENA_ARRAY(e->a, const char *, count);
  for (int j = 0; j < count; j++) {
    const Call *cj = &c[g[j].start + i];
    names[j] = a->t ? cj->args[k].t->name : cj->n->name;
  }
  LoopName ln;
  loop_name(e, names, count, li, a->t ? NULL : "_ws", &ln);
  const char *ident = ln.ident;
  for (int n = 2;; n++) {
    int x = 0;
    while (x < nloc && strcmp(loc[x].ident, ident)) x++;
    if (x == nloc) break;
    ident = arena_printf(e->a, "%s_%d", ln.ident, n);
  }
  Local r = {a->t ? (const void *)a->t : (const void *)c[g[0].start + i].n, expr, ident, NULL,
             NULL};
  if (a->t) {
    char sh[256];
    r.decl = arena_printf(e->a, "%s *%s = %s;", a->ctype, ident, expr);
    r.note = arena_printf(e->a, "%s %s%s", ln.comment, dtype_name(a->t->dtype),
                          comment(e, shape_str(sh, sizeof sh, &a->t->shape, e->g->batch_sym)));
  } else {
    r.decl = arena_printf(e->a, "char *%s = %s;", ident, expr);
    r.note = arena_printf(e->a, "workspace of %s", ln.comment);
  }
  return r;
}

// The loop over groups g[0..count) (identical templates): each hole's offsets evenly spaced
// (base + l * stride) or from a per-instance table.
static void print_loop(E *e, const Call *c, const Group *g, int count) {
  const Group *g0 = &g[0];
  int ncol = 0;
  for (int i = 0; i < g0->len; i++) ncol += c[g0->start + i].nargs;
  int64_t *stride = ARENA_ARRAY(e->a, int64_t, ncol + 1);
  bool *even = ARENA_ARRAY(e->a, bool, ncol + 1);
  int *tab = ARENA_ARRAY(e->a, int, ncol + 1); // table column of a hole, -1: evenly spaced
  int ntab = 0, id = e->nloops++;
  int per = 0; // --replicas: the buckets one instance makes final
  for (int i = 0; i < g0->len; i++) per += nready(e, &c[g0->start + i]);
  for (int i = 0, col = 0; i < g0->len; i++)
    for (int k = 0; k < c[g0->start + i].nargs; k++, col++) {
      int64_t base = c[g0->start + i].args[k].off;
      stride[col] = c[g[1].start + i].args[k].off - base;
      even[col] = true;
      for (int j = 2; j < count && even[col]; j++)
        even[col] = c[g[j].start + i].args[k].off == base + (int64_t)j * stride[col];
      tab[col] = even[col] ? -1 : ntab++;
    }
  out(e,
      "  // Repeat block %s, instances %d to %d (%d x %d calls, the same but for their "
      "pointers).\n",
      comment(e, g0->blk), g0->inst, g[count - 1].inst, count, g0->len);
  if (ntab) {
    out(e, "  static const int64_t off%d[%d][%d] = { // per-instance byte offsets\n", id, ntab,
        count);
    for (int i = 0, col = 0; i < g0->len; i++)
      for (int k = 0; k < c[g0->start + i].nargs; k++, col++) {
        if (tab[col] < 0) continue;
        const Arg *a = &c[g0->start + i].args[k];
        out(e, "      // %d: %s\n      {", tab[col], a->t ? comment(e, a->t->name) : "workspace");
        for (int j = 0; j < count; j++)
          out(e, "%s%lld",
              j == 0        ? ""
              : j % 10 == 0 ? ",\n       "
                            : ", ",
              (long long)c[g[j].start + i].args[k].off);
        out(e, "},\n");
      }
    out(e, "  };\n");
  }
  out(e, "  for (int l = 0; l < %d; l++) {\n", count);
  // The operands as named locals at the loop's top (llm.c's l_ln1w): an operand that is one tensor
  // in every instance is its macro; the others each a pointer named after the instances' names
  // (loop_names.c), one per tensor and address, in order of first use.
  Local *loc = ARENA_ARRAY(e->a, Local, ncol + 1);
  int nloc = 0;
  const char **names = ARENA_ARRAY(e->a, const char *, count);
  for (int j = 0; j < count; j++) names[j] = c[g[j].start].n->name;
  LoopInfo li = {loop_prefix(e, names, count), g[0].inst, g[1].inst - g[0].inst};
  const char ***ptrs = ARENA_ARRAY(e->a, const char **, g0->len + 1);
  for (int i = 0, col = 0; i < g0->len; i++) {
    const Call *c0 = &c[g0->start + i];
    const char **ptr = ptrs[i] = ARENA_ARRAY(e->a, const char *, c0->nargs + 1);
    for (int k = 0; k < c0->nargs; k++, col++) {
      const Arg *a = &c0->args[k];
      if (!a->ctype && e->cuda) { // the device workspace (emit_cuda.c)
        ptr[k] = "cu_ws";
        continue;
      }
      bool one = a->t != NULL;
      for (int j = 1; j < count && one; j++) one = c[g[j].start + i].args[k].t == a->t;
      if (one) {
        ptr[k] = tid(e, a->t);
        continue;
      }
      const char *off;
      if (tab[col] >= 0)
        off = arena_printf(e->a, "off%d[%d][l]", id, tab[col]);
      else if (stride[col] == 0)
        off = arena_printf(e->a, "%lld", (long long)a->off);
      else if (a->off == 0)
        off = arena_printf(e->a, "l * %lld", (long long)stride[col]);
      else
        off = arena_printf(e->a, "%lld %s l * %lld", (long long)a->off, stride[col] < 0 ? "-" : "+",
                           (long long)(stride[col] < 0 ? -stride[col] : stride[col]));
      const char *expr =
          a->ctype ? arena_printf(e->a, "(%s *)(%s + %s%s)", a->ctype, region_ptr[a->r], off,
                                  slot_term(e, a->sv))
                   : arena_printf(e->a, "%s + %s%s", region_ptr[a->r], off, slot_term(e, a->sv));
      const void *key = a->t ? (const void *)a->t : (const void *)c0->n;
      int x = 0;
      while (x < nloc && (loc[x].key != key || strcmp(loc[x].expr, expr))) x++;
      if (x == nloc) {
        loc[x] = local(e, c, g, count, i, k, expr, &li, loc, nloc);
        nloc++;
      }
      ptr[k] = loc[x].ident;
    }
  }
  for (int x = 0; x < nloc; x++) out_stmt(e, "    ", loc[x].decl, loc[x].note);
  for (int i = 0; i < g0->len; i++) {
    const Call *c0 = &c[g0->start + i];
    LoopName node, prod = {NULL, NULL};
    for (int j = 0; j < count; j++) names[j] = c[g[j].start + i].n->name;
    loop_name(e, names, count, &li, NULL, &node);
    if (c0->prod) {
      for (int j = 0; j < count; j++) names[j] = c[g[j].start + i].prod->name;
      loop_name(e, names, count, &li, NULL, &prod);
    }
    const char *note =
        c0->prod ? arena_printf(e->a, "%s + %s", prod.comment, node.comment) : node.comment;
    print_conversions(e, c0, ptrs[i], false, "    ");
    print_call(e, c0, ptrs[i], "    ", note);
    print_conversions(e, c0, ptrs[i], true, "    ");
    rep_emit_ready(e, c0->n, "    ", per);
    print_progress(e, c0, "    ");
  }
  out(e, "  }\n");
}

int emit_acc(bool *done, const Action *x) {
  if (x->v < 0 || (x->kind != ACT_B && x->kind != ACT_W)) return 0;
  bool *d = &done[2 * x->v + (x->kind == ACT_W)];
  int acc = *d;
  *d = true;
  return acc;
}

void emit_segment(E *e, Node *const *nodes, int n, const char *acc) {
  if (n <= 0) return;
  Call *c = ARENA_ARRAY(e->a, Call, n);
  Group *g = ARENA_ARRAY(e->a, Group, n);
  // Fused epilogues: fused_into[i] = j when nodes[i]'s call is part of nodes[j]'s, prod[j] = i.
  int *fused_into = ARENA_ARRAY(e->a, int, n), *prod = ARENA_ARRAY(e->a, int, n);
  for (int i = 0; i < n; i++) fused_into[i] = prod[i] = -1;
  for (int i = 0; i < n; i++) {
    int j = prod[i] < 0 && fused_into[i] < 0 ? fuse_with(e, nodes, n, i) : -1;
    if (j >= 0 && prod[j] < 0 && fused_into[j] < 0) fused_into[i] = j, prod[j] = i;
  }
  int nc = 0, ng = 0;
  for (int i = 0; i < n; i++) {
    if (fused_into[i] >= 0) continue;
    const char *a = nodes[i]->role == ROLE_WGT ? acc : "0";
    if (prod[i] >= 0)
      render_fused(e, nodes[prod[i]], nodes[i], a, &c[nc]);
    else
      render(e, nodes[i], a, &c[nc]);
    const char *blk;
    int inst;
    segment_node_key(nodes[i], &blk, &inst);
    if (ng && blk && g[ng - 1].blk && !strcmp(blk, g[ng - 1].blk) && inst == g[ng - 1].inst)
      g[ng - 1].len++;
    else
      g[ng++] = (Group){nc, 1, blk, inst};
    nc++;
  }
  for (int i = 0; i < ng;) {
    int j = i + 1;
    while (j < ng && same_group(e, c, &g[i], &g[j])) j++;
    if (j - i >= 2) {
      print_loop(e, c, &g[i], j - i);
    } else {
      for (int k = 0; k < g[i].len; k++) {
        print_straight(e, &c[g[i].start + k]);
        rep_emit_ready(e, c[g[i].start + k].n, "  ", 0);
        print_progress(e, &c[g[i].start + k], "  ");
      }
    }
    i = j;
  }
}

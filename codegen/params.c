// params.c: the generated program's parameter table (setup_params: P[i] for every parameter in
// canonical order, its storage, gradient and optimizer state at the planned offsets) and its
// fresh initialisation (init_params: one call per parameter by name, runtime/init.c). With
// --precision a 16-bit parameter's storage (PrParam.data, what is initialised, loaded, saved and
// updated) is its f32 master weights in the optimizer region and PrParam.half its 16-bit copy in
// params, which the kernels read (the runtime narrows it).
//
// The parameters of one instance of a repeat block (those its nodes read first) form a group. A
// run of groups whose parameters match position by position (shape, init, gradient, tying) at
// evenly spaced offsets in every region, with consecutive ascending instances and names that one
// printf template reproduces exactly ("transformer.h.%d.attn.c_attn.weight", checked against
// every name), is printed once as a loop over the instances; the names are formatted into a
// static buffer at setup. Anything else stays one line per parameter. Linear in the parameters.
#include <stdlib.h>
#include <string.h>

#include "emit.h"

static int64_t numel(const E *e, const Tensor *t) {
  return shape_numel(&t->shape, e->tc->mb_size);
}

// Offsets of a parameter's storage, gradient and optimizer state (-1: none), from the plan.
// --precision (a 16-bit owner): data is its f32 master weights in the optimizer state, half its
// 16-bit copy in params (the kernels read it; -1 otherwise).
typedef struct Slots {
  int64_t data, grad, m, v; // in params (optimizer state: 16-bit), grads, optimizer state (both)
  int64_t half;             // in params: the 16-bit copy (-1: none)
} Slots;

// The parameter's home: the lowest rank whose plan holds its owner (it counts the parameter in
// the gradient norm and sends it for checkpoints; 0 at S = 1).
static int home(const E *e, const Tensor *t) {
  const Tensor *o = t->tied_to ? t->tied_to : t;
  for (int r = 0; r < e->prog->nranks; r++)
    if (e->prog->ranks[r].plan.offset[o->id] >= 0) return r;
  return 0;
}

static Slots slots(const E *e, const Tensor *t) {
  const Tensor *o = t->tied_to ? t->tied_to : t;
  Slots s = {e->p->offset[o->id], -1, -1, -1, -1};
  if (o->half && s.data >= 0) s.half = s.data, s.data = e->p->master_offset[o->id];
  if (t->tied_to || !o->grad) return s;
  s.grad = e->p->offset[o->grad->id];
  s.m = e->p->opt_offsets[o->id * PLAN_OPT_SLOTS + 0]; // the plan's, never recomputed here
  s.v = e->p->opt_offsets[o->id * PLAN_OPT_SLOTS + 1];
  return s;
}

typedef struct PGroup {
  int start, len;   // parameters [start, start + len)
  const char *blk;  // repeat block of the node that reads them first (NULL: none)
  int inst;         // its instance
  int count;        // groups in the loop this one starts (1: straight-line)
  const char **fmt; // per parameter of a loop: its name's printf template, instance as %d
} PGroup;

// The printf template of name for instance inst (its decimal form replaced by %d, '%' doubled),
// or NULL when the instance does not appear in it.
static const char *name_template(E *e, const char *name, int inst) {
  char num[16];
  int nl = snprintf(num, sizeof num, "%d", inst);
  size_t n = strlen(name);
  char *t = arena_alloc(e->a, 2 * n + 3), *q = t;
  bool found = false;
  for (const char *s = name; *s;) {
    bool digit_before = s > name && s[-1] >= '0' && s[-1] <= '9';
    bool digit_after = s[nl] >= '0' && s[nl] <= '9';
    if (!strncmp(s, num, (size_t)nl) && !digit_before && !digit_after && !found) {
      *q++ = '%', *q++ = 'd';
      s += nl;
      found = true;
    } else {
      if (*s == '%') *q++ = '%';
      *q++ = *s++;
    }
  }
  *q = 0;
  return found ? t : NULL;
}

static bool fmt_matches(const char *fmt, int inst, const char *name) {
  char buf[1024];
  int n = snprintf(buf, sizeof buf, fmt, inst);
  return n >= 0 && (size_t)n < sizeof buf && !strcmp(buf, name);
}

static bool same_param(const E *e, const Tensor *a, const Tensor *b) {
  if (a->tied_to || b->tied_to || !shape_eq(&a->shape, &b->shape) || a->dtype != b->dtype)
    return false;
  if (a->init.kind != b->init.kind || a->init.a != b->init.a || a->init.b != b->init.b)
    return false;
  Slots x = slots(e, a), y = slots(e, b);
  return (x.grad < 0) == (y.grad < 0) && (x.v < 0) == (y.v < 0);
}

// How many of the groups g[0..n) form one loop (see the top of the file; 1: none), the longest
// prefix that does; fills g->fmt. Linear in the parameters of the groups it looks at.
static int loop_length(E *e, PGroup *g, int n) {
  const Graph *G = e->g;
  if (n < 2 || !g[0].blk) return 1;
  int len = g[0].len;
  const char **fmt = ARENA_ARRAY(e->a, const char *, len);
  for (int q = 0; q < len; q++)
    if (!(fmt[q] = name_template(e, G->params[g[0].start + q]->name, g[0].inst))) return 1;
  int count = 1;
  for (int j = 1; j < n; j++, count++) {
    if (!g[j].blk || strcmp(g[j].blk, g[0].blk) || g[j].len != len || g[j].inst != g[0].inst + j)
      break;
    bool ok = true;
    for (int q = 0; q < len && ok; q++) {
      const Tensor *t0 = G->params[g[0].start + q], *t = G->params[g[j].start + q];
      Slots s0 = slots(e, t0), s1 = slots(e, G->params[g[1].start + q]), s = slots(e, t);
      ok = same_param(e, t0, t) && fmt_matches(fmt[q], g[j].inst, t->name) &&
           home(e, t) == home(e, t0) && (s.data < 0) == (s0.data < 0) &&
           s.data == s0.data + j * (s1.data - s0.data) &&
           (s.grad < 0 || s.grad == s0.grad + j * (s1.grad - s0.grad)) &&
           (s.m < 0 || s.m == s0.m + j * (s1.m - s0.m)) &&
           (s.v < 0 || s.v == s0.v + j * (s1.v - s0.v)) &&
           (s.half < 0 || s.half == s0.half + j * (s1.half - s0.half));
    }
    if (!ok) break;
  }
  if (count >= 2) g[0].fmt = fmt;
  return count >= 2 ? count : 1;
}

// Groups of consecutive parameters by the block instance that reads them first, and the loops.
static PGroup *param_groups(E *e, int *ngroups) {
  const Graph *G = e->g;
  PGroup *g = ARENA_ARRAY(e->a, PGroup, G->nparams + 1);
  int ng = 0;
  for (int i = 0; i < G->nparams; i++) {
    const Tensor *t = G->params[i];
    const Node *first = t->nuses ? t->uses[0].node : NULL;
    const char *blk = first ? first->block : NULL;
    int inst = first ? first->instance : -1;
    if (ng && blk && g[ng - 1].blk && !strcmp(blk, g[ng - 1].blk) && inst == g[ng - 1].inst)
      g[ng - 1].len++;
    else
      g[ng++] = (PGroup){i, 1, blk, inst, 1, NULL};
  }
  for (int i = 0; i < ng; i += g[i].count) g[i].count = loop_length(e, &g[i], ng - i);
  *ngroups = ng;
  return g;
}

static const char *tptr(E *e, const char *type, const char *region, int64_t off, int64_t stride) {
  if (off < 0) return "NULL";
  if (!stride) return arena_printf(e->a, "(%s *)(%s + %lld)", type, region, (long long)off);
  return arena_printf(e->a, "(%s *)(%s + %lld %s l * %lld)", type, region, (long long)off,
                      stride < 0 ? "-" : "+", (long long)(stride < 0 ? -stride : stride));
}

static const char *ptr(E *e, const char *region, int64_t off, int64_t stride) {
  return tptr(e, "float", region, off, stride);
}

// P[index] = {...}: name (an expression), pointers (offsets with their per-instance strides).
static void print_entry(E *e, const char *indent, const char *index, const char *name,
                        const Tensor *t, Slots s, Slots stride) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  fprintf(f, "P[%s] = (PrParam){%s, %s, %s, %s, %s, ", index, name,
          ptr(e, s.half >= 0 ? "optst" : "params", s.data, stride.data),
          ptr(e, "grads", s.grad, stride.grad), ptr(e, "optst", s.m, stride.m),
          ptr(e, "optst", s.v, stride.v));
  fprintf(f, "%lld, %d, {", (long long)numel(e, t), t->shape.rank);
  for (int k = 0; k < t->shape.rank; k++)
    fprintf(f, "%s%lld", k ? ", " : "", (long long)t->shape.d[k].n);
  fprintf(f, "}, %s, %s, %d, %s};", t->tied_to ? "true" : "false",
          t->shape.rank >= 2 ? "true" : "false", home(e, t),
          tptr(e, "uint16_t", "params", s.half, stride.half));
  fclose(f);
  out_stmt(e, indent, buf, NULL);
  free(buf);
}

// One fresh-initialisation call (tied parameters share their owner's values: none).
static bool print_init(E *e, const char *indent, const char *data, const char *name,
                       const Tensor *t) {
  long long n = (long long)numel(e, t);
  switch (t->init.kind) {
  case INIT_ZEROS:
    out_stmt(e, indent, arena_printf(e->a, "pr_init_zeros(%s, %lld);", data, n), NULL);
    return false;
  case INIT_ONES:
    out_stmt(e, indent, arena_printf(e->a, "pr_init_ones(%s, %lld);", data, n), NULL);
    return false;
  case INIT_NORMAL:
    out_stmt(e, indent,
             arena_printf(e->a, "pr_init_normal(%s, %lld, seed, %s, %.17g, %.17g);", data, n, name,
                          t->init.a, t->init.b),
             NULL);
    return true;
  case INIT_UNIFORM:
    out_stmt(e, indent,
             arena_printf(e->a, "pr_init_uniform(%s, %lld, seed, %s, %.17g, %.17g);", data, n, name,
                          t->init.a, t->init.b),
             NULL);
    return true;
  case INIT_XAVIER: // fan_in: the last dim, fan_out: the first (rank >= 2, checked by expand)
    out_stmt(e, indent,
             arena_printf(e->a, "pr_init_xavier(%s, %lld, seed, %s, %.17g, %lld, %lld);", data, n,
                          name, t->init.a, (long long)t->shape.d[t->shape.rank - 1].n,
                          (long long)t->shape.d[0].n),
             NULL);
    return true;
  }
  return false;
}

void emit_params(E *e) {
  const Graph *G = e->g;
  int ng;
  PGroup *g = param_groups(e, &ng);
  out(e,
      "// ---- Parameters in canonical order: name, storage, gradient, optimizer state, elements,\n"
      "// shape, tied, weight decay, home rank, 16-bit copy (PrParam; storage NULL: not held by "
      "this\n"
      "// rank; --precision: storage is the f32 master weights, the copy what the kernels read)\n");
  out(e, "#define NPARAMS %d\nstatic PrParam P[NPARAMS];\n\n", G->nparams);
  out(e, "static void setup_params(void) {\n");
  for (int i = 0; i < ng; i += g[i].count) {
    if (g[i].count == 1) {
      for (int q = 0; q < g[i].len; q++) {
        const Tensor *t = G->params[g[i].start + q];
        print_entry(e, "  ", arena_printf(e->a, "%d", g[i].start + q), cstring(e, t->name), t,
                    slots(e, t), (Slots){0, 0, 0, 0, 0});
      }
      continue;
    }
    int len = g[i].len, count = g[i].count;
    size_t cap = 0;
    for (int q = 0; q < len; q++) {
      size_t n = strlen(g[i].fmt[q]) + 12; // room for any int in place of %d
      if (n > cap) cap = n;
    }
    out(e,
        "  // Repeat block %s, instances %d to %d: P[%d + %d * l .. %d + %d * l), their names\n"
        "  // formatted here.\n  static char names%d[%d][%d][%zu];\n",
        comment(e, g[i].blk), g[i].inst, g[i].inst + count - 1, g[i].start, len, g[i].start + len,
        len, i, count, len, cap);
    out(e, "  for (int l = 0; l < %d; l++) {\n", count);
    for (int q = 0; q < len; q++) {
      const Tensor *t0 = G->params[g[i].start + q], *t1 = G->params[g[i + 1].start + q];
      Slots s0 = slots(e, t0), s1 = slots(e, t1);
      Slots st = {s1.data - s0.data, s1.grad - s0.grad, s1.m - s0.m, s1.v - s0.v,
                  s1.half - s0.half};
      const char *nm = arena_printf(e->a, "names%d[l][%d]", i, q);
      out_stmt(e, "    ",
               arena_printf(e->a, "snprintf(%s, sizeof %s, %s, %s);", nm, nm,
                            cstring(e, g[i].fmt[q]),
                            g[i].inst ? arena_printf(e->a, "%d + l", g[i].inst) : "l"),
               NULL);
      print_entry(e, "    ", arena_printf(e->a, "%d + %d * l", g[i].start + q, len), nm, t0, s0,
                  st);
    }
    out(e, "  }\n");
  }
  out(e, "}\n\n");

  out(e, "// Fresh parameters (no --init or --resume): each a pure function of (seed, name).\n"
         "static void init_params(uint64_t seed) {\n");
  bool seeded = false;
  for (int i = 0; i < ng; i += g[i].count) {
    if (g[i].count == 1) {
      for (int q = 0; q < g[i].len; q++) {
        const Tensor *t = G->params[g[i].start + q];
        if (t->tied_to || e->p->offset[t->id] < 0) continue; // tied, or not held here
        seeded |= print_init(e, "  ", arena_printf(e->a, "P[%d].data", g[i].start + q),
                             cstring(e, t->name), t);
      }
      continue;
    }
    if (e->p->offset[G->params[g[i].start]->id] < 0) continue; // none of the loop held here
    out(e, "  for (int l = 0; l < %d; l++) { // repeat block %s, instances %d to %d\n", g[i].count,
        comment(e, g[i].blk), g[i].inst, g[i].inst + g[i].count - 1);
    for (int q = 0; q < g[i].len; q++) {
      const char *p = arena_printf(e->a, "P[%d + %d * l]", g[i].start + q, g[i].len);
      seeded |= print_init(e, "    ", arena_printf(e->a, "%s.data", p),
                           arena_printf(e->a, "%s.name", p), G->params[g[i].start + q]);
    }
    out(e, "  }\n");
  }
  if (!seeded) out(e, "  (void)seed;\n");
  out(e, "}\n\n");
}

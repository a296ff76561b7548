// C code generator: prints the training program of one rank from the ordered nodes and the
// memory plan, then builds it against libpipert.
//
// The program is straight-line C: one call per node into the runtime with every size a
// constant, tensors as macros over the four region pointers at the planned offsets. Model strings
// (names, paths, the command line) never reach C source raw: tensors become identifiers
// t<id>_<letters/digits of the name>, and strings appear only through cstring() (string literals:
// init seeds, safetensors names, paths, hints) and comment() (defused comment text). The file is
// written atomically and stamped with the pipec version and command line.
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../compiler/program.h"
#include "../ir/ops.h"

#ifndef PIPEC_VERSION
#define PIPEC_VERSION "0.0.0"
#endif

typedef struct E {
  FILE *f;        // output
  const Graph *g; // graph
  const TrainConfig *tc;
  const Plan *p;
  Arena *a;
  char **ident; // per tensor id: C identifier
} E;

static void out(E *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(E *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(e->f, fmt, ap);
  va_end(ap);
}

// The two escapers every model string (names, paths, the command line, the plan text) goes
// through on its way into generated C; nothing else may print one.
//
// comment(): text for a comment of either kind (// or /* */) that cannot end or open one, continue
// the line or form a trigraph: printable ASCII only (other bytes and backslash become '_'), a space
// between '*' and '/' (either order) and between two '?', a space before a leading and after a
// trailing '*', '/' or '?' (so that the text around it cannot complete a sequence), at most 200
// characters of the string.
static const char *comment(E *e, const char *s) {
  size_t n = strlen(s);
  if (n > 200) n = 200;
  char *c = arena_alloc(e->a, 2 * n + 3), *q = c;
  char prev = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    char o = ch < 0x20 || ch >= 0x7f || ch == '\\' ? '_' : (char)ch;
    bool pair = (prev == '*' && o == '/') || (prev == '/' && o == '*') || (prev == '?' && o == '?');
    if (pair || (i == 0 && strchr("*/?", o))) *q++ = ' ';
    *q++ = prev = o;
  }
  if (prev && strchr("*/?", prev)) *q++ = ' ';
  *q = 0;
  return c;
}

// cstring(): a C string literal with the string's exact bytes: '"', '\\' and '?' (trigraphs)
// backslash-escaped, every byte outside printable ASCII as a three-digit octal escape (a digit
// after it cannot extend it). The literal is data only: generated code never passes one that
// holds a model string as a printf format (prCheck's HINT is printed with "%s").
static const char *cstring(E *e, const char *s) {
  size_t n = strlen(s);
  char *o = arena_alloc(e->a, n * 4 + 3), *q = o;
  *q++ = '"';
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\' || *p == '?')
      *q++ = '\\', *q++ = (char)*p;
    else if (*p >= 0x20 && *p < 0x7f)
      *q++ = (char)*p;
    else
      q += sprintf(q, "\\%03o", *p);
  }
  *q++ = '"';
  *q = 0;
  return o;
}

// A float literal: 1 -> "1.0f", 1e-05 -> "1e-05f" (always valid C, round-trips float).
static const char *flit(E *e, double v) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.9g", v);
  if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
  return arena_printf(e->a, "%sf", buf);
}

static const char *mangle(E *e, const Tensor *t) {
  char buf[64];
  int n = snprintf(buf, sizeof buf, "t%d_", t->id);
  for (const char *p = t->name; *p && n < 48; p++) {
    char c = *p;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
      buf[n++] = c;
    else if (n && buf[n - 1] != '_')
      buf[n++] = '_';
  }
  buf[n] = 0;
  return arena_strdup(e->a, buf);
}

static const char *const region_ptr[REG_COUNT] = {"params", "grads", "optst", "acts"};

static const char *ctype(DType t) {
  return t == DT_I32 ? "int32_t" : "float";
}

static void emit_tensors(E *e) {
  const Graph *g = e->g;
  out(e, "// ---- Tensors: pointers into the regions at the offsets planned by pipec\n");
  for (int i = 0; i < g->ntensors; i++) {
    const Tensor *t = g->tensors[i];
    if (e->p->offset[i] < 0) continue;
    char sh[256];
    out(e, "#define %s ((%s *)(%s + %lld)) // %s %s%s\n", e->ident[i], ctype(t->dtype),
        region_ptr[e->p->region[i]], (long long)e->p->offset[i], comment(e, t->name),
        dtype_name(t->dtype), comment(e, shape_str(sh, sizeof sh, &t->shape, g->batch_sym)));
  }
  out(e, "\n");
}

// One kernel call: outputs, inputs (absent optional ones as NULL), workspace, scalars, acc.
static void emit_call(E *e, const Node *n, const char *acc) {
  const OpDef *op = n->op;
  out(e, "  %s(", op->kernel);
  bool first = true;
#define SEP() (first ? (first = false, "") : ", ")
  if (op->nout == 0) {
    out(e, "%s(float *const[]){", SEP());
    for (int k = 0; k < n->nout; k++) out(e, "%s%s", k ? ", " : "", e->ident[n->out[k]->id]);
    out(e, "}");
  } else {
    for (int k = 0; k < n->nout; k++) out(e, "%s%s", SEP(), e->ident[n->out[k]->id]);
  }
  if (op->max_in < 0) {
    out(e, "%s(const float *const[]){", SEP());
    for (int j = 0; j < n->nin; j++) out(e, "%s%s", j ? ", " : "", e->ident[n->in[j]->id]);
    out(e, "}");
  } else {
    for (int j = 0; j < op->max_in; j++)
      out(e, "%s%s", SEP(), j < n->nin ? e->ident[n->in[j]->id] : "NULL");
  }
  if (op->workspace) out(e, "%s(void *)(acts + %lld)", SEP(), (long long)e->p->ws_offset[n->id]);
  KArgs ka = {.n = 0};
  op->kargs(n, e->tc->mb_size, e->a, &ka);
  for (int i = 0; i < ka.n; i++) {
    const KArg *k = &ka.a[i];
    out(e, "%s/*%s*/ ", SEP(), k->name); // each size named as the kernel's parameter
    switch (k->kind) {
    case 'i':
      if (k->per_row > 0) // a loss's count: over the batch rows the program sets
        out(e, "%lld * loss_rows", (long long)k->per_row);
      else
        out(e, "%lld", (long long)k->i);
      break;
    case 'f':
      out(e, "%s", flit(e, k->f));
      break;
    case 'x':
      out(e, "%s", k->expr);
      break;
    case 'a':
      out(e, "(const int64_t[]){");
      for (int j = 0; j < k->n; j++) out(e, "%s%lld", j ? ", " : "", (long long)k->arr[j]);
      out(e, "}");
      break;
    }
  }
  if (op->acc) out(e, "%s/*acc*/ %s", SEP(), acc);
#undef SEP
  out(e, "); // %s\n", comment(e, n->name));
}

static void emit_functions(E *e) {
  const Plan *p = e->p;
  out(e, "// Batch rows the losses average over: MB, or the real rows of a partial validation "
         "batch.\nstatic int64_t loss_rows = MB;\n\n");
  out(e, "// Forward pass of one microbatch (%d nodes).\nstatic void forward(void) {\n", p->nfwd);
  for (int i = 0; i < p->nfwd; i++) emit_call(e, p->fwd[i], "0");
  out(e, "}\n\n");
  out(e,
      "// Backward pass of microbatch m (%d nodes): input gradients (B) and weight gradients (W);\n"
      "// W nodes accumulate into the per-step gradient buffers from the second microbatch on.\n"
      "static void backward(int m) {\n  const int acc = m > 0;\n  (void)acc;\n",
      p->nbwd);
  for (int i = 0; i < p->nbwd; i++)
    emit_call(e, p->bwd[i], p->bwd[i]->role == ROLE_WGT ? "acc" : "0");
  out(e, "}\n\n");
  out(e, "// End of step: gradients of parameters used in several places, summed in use order.\n"
         "static void step_end(void) {\n");
  for (int i = 0; i < p->nstep; i++) emit_call(e, p->step[i], "0");
  out(e, "}\n\n");
}

static int64_t numel(const E *e, const Tensor *t) {
  return shape_numel(&t->shape, e->tc->mb_size);
}

static void emit_params(E *e) {
  const Graph *g = e->g;
  out(e, "// ---- Parameters in canonical order: name, storage, gradient, optimizer state, init\n"
         "typedef struct Param {\n"
         "  const char *name;   // PyTorch state-dict name\n"
         "  const char *mname, *vname; // names of its optimizer state in NAME.optim\n"
         "  float *data;        // values (tied parameters share their owner's)\n"
         "  float *grad;        // gradient at the end of a step (NULL: not trained)\n"
         "  float *m, *v;       // optimizer state\n"
         "  int64_t n;          // elements\n"
         "  int rank;           // dims\n"
         "  int64_t shape[8];   // sizes\n"
         "  int init;           // 0 zeros, 1 ones, 2 normal, 3 uniform, 4 xavier, -1 tied\n"
         "  double a, b;        // init arguments\n"
         "  int decay;          // weight decay applies (rank >= 2)\n"
         "} Param;\n\n");
  out(e, "#define NPARAMS %d\nstatic Param P[NPARAMS];\n\n", g->nparams);
  out(e, "static void setup_params(void) {\n");
  for (int i = 0; i < g->nparams; i++) {
    const Tensor *t = g->params[i], *o = t->tied_to ? t->tied_to : t;
    int64_t ms = o->grad ? e->p->opt_offset[o->id] : -1, bytes = numel(e, o) * 4;
    int64_t mo = (bytes + 63) / 64 * 64;
    out(e, "  P[%d] = (Param){%s, %s, %s, %s, %s, ", i, cstring(e, t->name),
        cstring(e, arena_printf(e->a, "m.%s", t->name)),
        cstring(e, arena_printf(e->a, "v.%s", t->name)), e->ident[o->id],
        o->grad && !t->tied_to ? e->ident[o->grad->id] : "NULL");
    if (ms >= 0 && !t->tied_to)
      out(e, "(float *)(optst + %lld), %s, ", (long long)ms,
          e->p->opt_slots > 1 ? arena_printf(e->a, "(float *)(optst + %lld)", (long long)(ms + mo))
                              : "NULL");
    else
      out(e, "NULL, NULL, ");
    out(e, "%lld, %d, {", (long long)numel(e, t), t->shape.rank);
    for (int k = 0; k < t->shape.rank; k++)
      out(e, "%s%lld", k ? ", " : "", (long long)t->shape.d[k].n);
    out(e, "}, %d, %.17g, %.17g, %d};\n", t->tied_to ? -1 : (int)t->init.kind, t->init.a, t->init.b,
        t->shape.rank >= 2);
  }
  out(e, "}\n\n");
}

// Bound of the ids an i32 input may hold: the smallest class count among its consumers
// (embedding rows, cross-entropy classes); 0 when no consumer bounds them. *by: that consumer.
static int64_t id_limit(const Tensor *t, const Node **by) {
  int64_t b = 0;
  for (int u = 0; u < t->nuses; u++) {
    const Node *n = t->uses[u].node;
    int64_t k = 0;
    if (!strcmp(n->op->name, "embedding") && t->uses[u].slot == 0) k = n->in[1]->shape.d[0].n;
    if (!strcmp(n->op->name, "cross_entropy") && t->uses[u].slot == 1) {
      const Shape *s = &n->in[0]->shape;
      k = s->d[s->rank - 1].n;
    }
    if (k > 0 && (b == 0 || k < b)) {
      b = k;
      if (by) *by = n;
    }
  }
  return b;
}

// Largest valid id for random ids of an i32 input (--gradcheck): always in range.
static int64_t id_bound(const Tensor *t) {
  int64_t b = id_limit(t, NULL);
  return b ? b : 2;
}

// Token streams feed both the input and the target: every id is checked at open against the
// bound of each (the input's first: "the model's vocabulary", then a smaller target bound).
static void emit_token_id_checks(E *e, const Tensor *x, const Tensor *y) {
  const Node *nx = NULL, *ny = NULL;
  int64_t lx = id_limit(x, &nx), ly = id_limit(y, &ny);
  if (lx > 0) {
    const char *what =
        !strcmp(nx->op->name, "embedding")
            ? arena_printf(e->a, "the model's vocabulary holds %lld", (long long)lx)
            : arena_printf(e->a, "cross_entropy '%s' has %lld classes", nx->name, (long long)lx);
    out(e, "  pr_tokens_check_ids(&data, path, %lld, %s);\n", (long long)lx, cstring(e, what));
  }
  if (ly > 0 && (lx == 0 || ly < lx)) {
    const char *what = arena_printf(e->a, "the target '%s' feeds %s '%s' with %lld %s", y->name,
                                    ny->op->name, ny->name, (long long)ly,
                                    !strcmp(ny->op->name, "embedding") ? "rows" : "classes");
    out(e, "  pr_tokens_check_ids(&data, path, %lld, %s);\n", (long long)ly, cstring(e, what));
  }
}

// --gradcheck: one microbatch of data (or random inputs), analytic gradients, then central
// differences for every parameter through the same forward pass.
static void emit_gradcheck(E *e, bool has_data) {
  const Graph *g = e->g;
  out(e, "// ---- --gradcheck\n");
  out(e, "static void random_inputs(uint64_t seed) {\n");
  for (int i = 0; i < g->ninputs; i++) {
    const Tensor *t = g->inputs[i];
    if (t->dtype == DT_I32)
      out(e, "  pr_init_ids(%s, %lld, seed, %s, %lld);\n", e->ident[t->id], (long long)numel(e, t),
          cstring(e, t->name), (long long)id_bound(t));
    else
      out(e, "  pr_init_normal(%s, %lld, seed, %s, 0.0, 1.0);\n", e->ident[t->id],
          (long long)numel(e, t), cstring(e, t->name));
  }
  out(e, "}\n\n");
  // Inputs are reloaded before every forward pass: the backward pass reuses their space.
  out(e, "static uint64_t gc_seed;\n%s\n", has_data ? "static bool gc_data;\n" : "");
  out(e, "static void gradcheck_inputs(void) {\n");
  if (has_data)
    out(e, "  if (gc_data) {\n    load_batch(PR_TRAIN, gc_seed, 0, 0);\n    return;\n  }\n");
  out(e, "  random_inputs(gc_seed);\n}\n\n");
  out(e,
      "static double gradcheck_loss(void) {\n  gradcheck_inputs();\n  forward();\n  return "
      "(double)%s[0] / NMICRO;\n}\n\n",
      e->ident[g->loss->id]);
  out(e,
      "static int gradcheck(const PrOptions *o) {\n"
      "  for (int i = 0; i < NPARAMS; i++)\n"
      "    if (P[i].init >= 0) pr_init_normal(P[i].data, P[i].n, o->seed, P[i].name, 0.0, 0.5);\n"
      "  gc_seed = o->seed;\n");
  if (has_data)
    out(e, "  gc_data = o->data != NULL;\n  if (gc_data) %s\n",
        e->tc->data == DATA_NPY   ? "open_data(o->data, o->labels, o->seed);"
        : e->tc->data == DATA_CSV ? "open_data(o->data, o->seed);"
                                  : "open_data(o->data);");
  out(e, "  gradcheck_inputs();\n");
  out(e, "  forward();\n  backward(0);\n  step_end();\n"
         "  double worst = 0;\n"
         "  for (int i = 0; i < NPARAMS; i++) {\n"
         "    if (!P[i].grad) continue;\n"
         "    double err = pr_gradcheck_param(P[i].data, P[i].grad, P[i].n, 64, 1e-2, "
         "gradcheck_loss);\n"
         "    printf(\"gradcheck %%-40s %%lld elements, relative error %%.3g\\n\", P[i].name, "
         "(long long)P[i].n, err);\n"
         "    if (err > worst) worst = err;\n  }\n"
         "  printf(\"gradcheck worst relative error %%.3g (limit 1e-3)\\n\", worst);\n"
         "  return worst <= 1e-3 ? 0 : 1;\n}\n\n");
}

static const char *data_kind_name(DataKind k) {
  static const char *const n[] = {"none", "text", "tokens_u16", "csv", "npy"};
  return n[k];
}

static bool emit(E *e, const CodegenOptions *o) {
  const Graph *g = e->g;
  const TrainConfig *tc = e->tc;
  const Plan *p = e->p;
  out(e, "// Training program for model %s, rank 0 of 1 (%s target).\n", comment(e, g->name),
      comment(e, o->target));
  out(e, "// Generated by pipec %s; do not edit.\n// Command: %s\n", PIPEC_VERSION,
      comment(e, o->cmdline));
  out(e,
      "// Batch %lld = %lld microbatch(es) of %lld; %d forward, %d backward, %d step-end nodes.\n",
      (long long)tc->batch, (long long)tc->microbatches, (long long)tc->mb_size, p->nfwd, p->nbwd,
      p->nstep);
  out(e, "#include <math.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include "
         "<string.h>\n\n#include \"pipert.h\"\n\n");
  out(e, "#define MB %lld // microbatch size (the batch symbol %s)\n", (long long)tc->mb_size,
      comment(e, g->batch_sym));
  out(e, "#define NMICRO %lld // microbatches per step\n\n", (long long)tc->microbatches);
  static const char *const rn[REG_COUNT] = {"PARAMS", "GRADS", "OPTST", "ACTS"};
  out(e, "// ---- Memory plan: one allocation per region\n");
  for (int r = 0; r < REG_COUNT; r++)
    out(e, "#define %s_BYTES %lldLL\n", rn[r], (long long)p->bytes[r]);
  out(e, "static char *params, *grads, *optst, *acts;\n\n");
  char *plan_text = NULL;
  size_t plan_len = 0;
  FILE *pf = open_memstream(&plan_text, &plan_len);
  plan_print(g, tc, p, pf);
  fclose(pf);
  out(e, "static const char PLAN[] = %s;\n\n", cstring(e, plan_text));
  free(plan_text);
  emit_tensors(e);
  emit_functions(e);
  emit_params(e);

  // Constants
  out(e, "static void fill_constants(void) {\n");
  for (int i = 0; i < g->ntensors; i++)
    if (g->tensors[i]->kind == T_CONST)
      out(e, "  pr_fill(%s, %lld, %s);\n", e->ident[i], (long long)numel(e, g->tensors[i]),
          flit(e, g->tensors[i]->const_value));
  out(e, "}\n\n");

  // Data
  const Tensor *x = tc->input, *y = tc->target, *loss = g->loss;
  const Tensor *logits = g->noutputs ? g->outputs[0] : NULL;
  bool tokens = tc->data == DATA_TEXT || tc->data == DATA_U16;
  bool table = tc->data == DATA_CSV || tc->data == DATA_NPY;
  bool classify = table && logits && logits->shape.rank == 2 && logits->dtype == DT_F32;
  out(e, "// ---- Data: %s\n", data_kind_name(tc->data));
  if (tokens) {
    out(e, "static PrTokens data;\n#define SEQ %lld // tokens per row\n",
        (long long)x->shape.d[1].n);
    out(e,
        "static void open_data(const char *path) {\n  pr_tokens_open_%s(&data, path, %.17g);\n"
        "  pr_tokens_check_windows(&data, path, SEQ);\n",
        tc->data == DATA_TEXT ? "text" : "u16", tc->train_fraction);
    emit_token_id_checks(e, x, y);
    out(e, "}\n");
    out(e,
        "static void load_batch(int split, uint64_t seed, int64_t step, int m) {\n"
        "  pr_tokens_batch(&data, split, seed, step, m, MB, SEQ, %s, %s);\n}\n",
        e->ident[x->id], e->ident[y->id]);
  } else if (table) {
    out(e, "static PrTable data;\n#define FEATURES %lld\n", (long long)x->shape.d[1].n);
    if (tc->data == DATA_CSV)
      out(e,
          "static void open_data(const char *path, uint64_t seed) {\n  pr_table_open_csv(&data, "
          "path, %.17g, seed, %.17g);\n",
          tc->train_fraction, tc->scale);
    else
      out(e,
          "static void open_data(const char *path, const char *labels, uint64_t seed) {\n"
          "  pr_table_open_npy(&data, path, labels, %.17g, seed, %.17g);\n",
          tc->train_fraction, tc->scale);
    out(e,
        "  prCheck(data.features == FEATURES, %s,\n"
        "          \"data has %%lld features per row\", (long long)data.features);\n",
        cstring(e, arena_printf(e->a, "the model's input '%s' has %lld features", x->name,
                                (long long)x->shape.d[1].n)));
    int64_t classes = id_limit(y, NULL);
    if (classes > 0)
      out(e,
          "  prCheck(data.classes <= %lld, \"use labels 0..%lld, or a model with more classes\",\n"
          "          \"%%s has labels up to %%d but the model has %lld classes\", %s, "
          "data.classes - 1);\n",
          (long long)classes, (long long)classes - 1, (long long)classes,
          tc->data == DATA_NPY ? "labels" : "path");
    out(e, "}\n");
    out(e,
        "static void load_batch(int split, uint64_t seed, int64_t step, int m) {\n"
        "  (void)split;\n  pr_table_batch(&data, seed, step, m, MB, %s, %s);\n}\n",
        e->ident[x->id], e->ident[y->id]);
  } else {
    // No data binding: main() stops before training (the program is still good for --gradcheck).
    out(e, "static void load_batch(int split, uint64_t seed, int64_t step, int m) {\n"
           "  (void)split, (void)seed, (void)step, (void)m;\n}\n");
  }
  out(e, "\n");

  // Evaluation
  if (tokens || table) {
    out(e, "// Validation: mean loss over the evaluation batches%s.\n",
        classify ? " and accuracy" : "");
    out(e, "static void evaluate(int64_t batches, int64_t step) {\n  double loss = 0, weight = 0;\n"
           "  int64_t correct = 0, seen = 0;\n");
    if (tokens) {
      // batches = 0: the whole split in consecutive windows, a token-weighted mean; the last
      // batch's padding rows are left out of the losses (loss_rows), as for tables.
      out(e,
          "  if (batches == 0) {\n"
          "    int64_t all = pr_tokens_val_batches(&data, MB, SEQ);\n"
          "    for (int64_t k = 0; k < all; k++) {\n"
          "      int64_t valid = pr_tokens_val_seq_batch(&data, k, MB, SEQ, %s, %s);\n"
          "      loss_rows = valid;\n      forward();\n      loss_rows = MB;\n"
          "      loss += %s[0] * (double)valid;\n",
          e->ident[x->id], e->ident[y->id], e->ident[loss->id]);
      out(e, "      weight += (double)valid;\n    }\n  }\n");
      out(e,
          "  for (int64_t k = 0; k < batches; k++) {\n"
          "    pr_tokens_batch(&data, PR_VAL, 0x5eed, k, 0, MB, SEQ, %s, %s);\n"
          "    forward();\n    loss += %s[0];\n    weight += 1;\n  }\n",
          e->ident[x->id], e->ident[y->id], e->ident[loss->id]);
    } else {
      out(e,
          "  batches = pr_table_val_batches(&data, MB, batches); // 0: the whole split\n"
          "  for (int64_t k = 0; k < batches; k++) {\n"
          "    int64_t valid = pr_table_val_batch(&data, k, MB, %s, %s);\n"
          "    loss_rows = valid;\n    forward();\n    loss_rows = MB;\n",
          e->ident[x->id], e->ident[y->id]);
      // The last batch wraps around: its losses are means over its real rows (loss_rows),
      // weighted by them.
      out(e,
          "    loss += %s[0] * (double)valid;\n"
          "    weight += (double)valid;\n",
          e->ident[loss->id]);
      if (classify)
        out(e, "    correct += pr_count_correct(%s, %s, valid, %lld);\n    seen += valid;\n",
            e->ident[logits->id], e->ident[y->id], (long long)logits->shape.d[1].n);
      out(e, "  }\n");
    }
    out(e, "  pr_check_val_loss(step, loss / weight);\n");
    out(e, "  printf(\"eval  step %%lld | val loss %%.4f\", (long long)step, loss / weight);\n");
    out(e, "  if (seen) printf(\" | val accuracy %%.2f%%%% (%%lld/%%lld)\", 100.0 * "
           "(double)correct / (double)seen, "
           "(long long)correct, (long long)seen);\n");
    out(e, "  printf(\"\\n\");\n  fflush(stdout);\n}\n\n");
  }

  out(e, "// Everything the program allocated, returned at the end (leak checkers stay quiet).\n"
         "static void release(void) {\n");
  if (tokens) out(e, "  if (data.tokens) pr_tokens_close(&data);\n");
  if (table) out(e, "  if (data.x) pr_table_close(&data);\n");
  out(e, "  pr_free_region(params);\n  pr_free_region(grads);\n  pr_free_region(optst);\n  "
         "pr_free_region(acts);\n  pr_release_scratch();\n}\n\n");
  emit_gradcheck(e, tokens || table);

  // Main
  out(e, "int main(int argc, char **argv) {\n  pr_start(argc, argv);\n");
  out(e,
      "  PrOptions o = {.steps = %lld, .lr = %.17g, .min_lr = %.17g, .seed = %lluULL, .data = %s,\n"
      "                .labels = %s, .eval_every = %lld, .eval_batches = %lld, .log_every = "
      "%lld};\n",
      (long long)tc->steps, tc->lr, tc->min_lr, (unsigned long long)tc->seed,
      tc->data_path ? cstring(e, tc->data_path) : "NULL",
      tc->data == DATA_NPY && tc->data_path2 ? cstring(e, tc->data_path2) : "NULL",
      (long long)tc->eval_every, (long long)tc->eval_batches, (long long)tc->log_every);
  out(e, "  pr_parse_args(argc, argv, &o, %s);\n",
      cstring(e, arena_printf(e->a, "Train model %s (generated by pipec %s; built for %s).",
                              g->name, PIPEC_VERSION,
                              o->march_native ? "this machine's CPU, --march=native"
                                              : "any x86-64 CPU")));
  out(e, "  pr_set_threads(o.threads);\n");
  out(e, "  if (!o.quiet) fputs(PLAN, stdout);\n");
  out(e,
      "  pr_check_plan_memory((uint64_t)PARAMS_BYTES + GRADS_BYTES + OPTST_BYTES + ACTS_BYTES);\n");
  out(e, "  params = pr_alloc_region(\"params\", PARAMS_BYTES);\n  grads = "
         "pr_alloc_region(\"grads\", GRADS_BYTES);\n"
         "  optst = pr_alloc_region(\"optimizer\", OPTST_BYTES);\n  acts = "
         "pr_alloc_region(\"activations\", ACTS_BYTES);\n");
  out(e, "  setup_params();\n  fill_constants();\n");
  out(e,
      "  if (o.gradcheck) {\n    int rc = gradcheck(&o);\n    release();\n    return rc;\n  }\n");
  // Outputs are checked before any work: a run must not train for hours, then fail to save.
  out(e, "  if (o.save) pr_checkpoint_check_writable(o.save);\n"
         "  if (o.loss_log) pr_check_writable(o.loss_log, \"--loss-log\");\n");
  if (tokens)
    out(e, "  prCheck(o.data != NULL, \"pass --data FILE\", \"no training data\");\n  "
           "open_data(o.data);\n");
  else if (table)
    out(e, "  prCheck(o.data != NULL, \"pass --data FILE\", \"no training data\");\n  %s\n",
        tc->data == DATA_NPY ? "open_data(o.data, o.labels, o.seed);"
                             : "open_data(o.data, o.seed);");
  else
    out(e, "  prCheck(0, \"add a training.data section to the model\", \"this model has no data "
           "binding\");\n");
  // Checkpoint: parameters (tied ones share their owner's storage), optimizer state, vocabulary.
  out(e,
      "  PrTensorRef refs[NPARAMS], orefs[2 * NPARAMS];\n  bool tied[NPARAMS];\n  int nopt = 0;\n"
      "  for (int i = 0; i < NPARAMS; i++) {\n"
      "    refs[i] = (PrTensorRef){P[i].name, P[i].data, P[i].rank, {0}};\n"
      "    memcpy(refs[i].shape, P[i].shape, sizeof refs[i].shape);\n"
      "    tied[i] = P[i].init < 0;\n"
      "    if (!P[i].m) continue;\n"
      "    orefs[nopt] = (PrTensorRef){P[i].mname, P[i].m, P[i].rank, {0}};\n"
      "    memcpy(orefs[nopt++].shape, P[i].shape, sizeof P[i].shape);\n"
      "    if (P[i].v) {\n"
      "      orefs[nopt] = (PrTensorRef){P[i].vname, P[i].v, P[i].rank, {0}};\n"
      "      memcpy(orefs[nopt++].shape, P[i].shape, sizeof P[i].shape);\n    }\n  }\n");
  out(e, "  PrCheckpoint ck = {refs, tied, NPARAMS, orefs, nopt, %s};\n",
      tc->data == DATA_TEXT ? "data.chars, data.vocab" : "NULL, 0");
  out(e, "  int64_t start = 0;\n"
         "  if (o.resume) {\n    start = pr_checkpoint_resume(o.resume, &ck);\n"
         "  } else if (o.init) {\n    pr_checkpoint_init(o.init, &ck);\n"
         "  } else {\n    for (int i = 0; i < NPARAMS; i++) {\n"
         "      Param *q = &P[i];\n"
         "      switch (q->init) {\n"
         "      case 0: pr_init_zeros(q->data, q->n); break;\n"
         "      case 1: pr_init_ones(q->data, q->n); break;\n"
         "      case 2: pr_init_normal(q->data, q->n, o.seed, q->name, q->a, q->b); break;\n"
         "      case 3: pr_init_uniform(q->data, q->n, o.seed, q->name, q->a, q->b); break;\n"
         "      case 4: pr_init_xavier(q->data, q->n, o.seed, q->name, q->a, q->shape[q->rank - "
         "1], q->shape[0]); break;\n"
         "      default: break;\n      }\n    }\n  }\n");
  out(e, "  PrSchedule sched = {o.lr, o.min_lr, %lld, %lld};\n", (long long)tc->warmup,
      (long long)tc->decay_steps);
  out(e, "  FILE *loss_log = o.loss_log ? fopen(o.loss_log, \"w\") : NULL;\n"
         "  prCheck(!o.loss_log || loss_log, \"check the directory exists and is writable\", "
         "\"cannot open %%s\", o.loss_log);\n");
  out(e, "  PrGrad G[NPARAMS]; // what the step checks read\n"
         "  for (int i = 0; i < NPARAMS; i++) G[i] = (PrGrad){P[i].name, P[i].grad, P[i].n};\n");
  out(e, "  pr_blas_report(o.quiet); // BLAS and kernel; warns of a slow one (blas_info.c)\n");
  // A first forward and backward of every microbatch, results discarded, so that the steps
  // allocate nothing (tests/alloc): kernel scratch, OpenBLAS and the OpenMP pool reach their
  // sizes here. The steps overwrite every buffer it writes (microbatch 0 does not accumulate);
  // parameters and optimizer state are untouched, so no number changes.
  out(e, "  // Warm-up, results discarded: kernel scratch, OpenBLAS and OpenMP reach their sizes.\n"
         "  for (int m = 0; m < NMICRO; m++) {\n"
         "    load_batch(PR_TRAIN, o.seed, start, m);\n    forward();\n    backward(m);\n  }\n");
  out(e, "  double t0 = pr_now();\n  int64_t done = 0;\n");
  // Step times of at most the first 2^20 steps (8 MiB): --steps may be up to 2^63 - 1.
  out(e, "  const int64_t timed = o.steps - start < (1 << 20) ? o.steps - start : (1 << 20);\n"
         "  double *step_ms = calloc((size_t)(timed > 0 ? timed : 1), sizeof(double));\n"
         "  prCheck(step_ms != NULL, \"the machine is out of memory\", \"cannot allocate the step "
         "timer\");\n");
  out(e,
      "  for (int64_t step = start; step < o.steps; step++) {\n"
      "    double ts = pr_now(), lr = pr_lr_at(&sched, step), loss = 0;\n"
      "    for (int m = 0; m < NMICRO; m++) {\n"
      "      load_batch(PR_TRAIN, o.seed, step, m);\n"
      "      forward();\n"
      "      loss += %s[0];\n"
      "      backward(m);\n    }\n"
      "    loss /= NMICRO;\n"
      "    step_end();\n",
      e->ident[loss->id]);
  out(e, "    // Squared global norm over all parameters, summed in canonical order; a non-finite\n"
         "    // loss or norm stops the program before the update.\n"
         "    double norm2 = pr_grad_norm2(G, NPARAMS);\n"
         "    pr_check_step(step + 1, loss, norm2, G, NPARAMS);\n");
  if (tc->grad_clip > 0)
    out(e,
        "    // Clip as torch.nn.utils.clip_grad_norm_.\n"
        "    double norm = sqrt(norm2), coef = %.17g / (norm + 1e-6);\n"
        "    if (coef < 1)\n      for (int i = 0; i < NPARAMS; i++)\n        if (P[i].grad) "
        "pr_scale_inplace(P[i].grad, P[i].n, (float)coef);\n",
        tc->grad_clip);
  if (tc->opt == OPT_ADAMW)
    out(e,
        "    for (int i = 0; i < NPARAMS; i++)\n      if (P[i].grad)\n"
        "        pr_adamw_step(P[i].data, P[i].grad, P[i].m, P[i].v, P[i].n, lr, %.17g, %.17g, "
        "%.17g,\n"
        "                      P[i].decay ? %.17g : 0.0, step + 1);\n",
        tc->beta1, tc->beta2, tc->eps, tc->weight_decay);
  else
    out(e,
        "    for (int i = 0; i < NPARAMS; i++)\n      if (P[i].grad)\n"
        "        pr_sgd_step(P[i].data, P[i].grad, P[i].m, P[i].n, lr, %.17g, P[i].decay ? %.17g : "
        "0.0, step + 1);\n",
        tc->momentum, tc->weight_decay);
  out(e, "    if (done < timed) step_ms[done] = (pr_now() - ts) * 1e3;\n");
  out(e,
      "    done++;\n"
      "    if (loss_log) fprintf(loss_log, \"%%lld %%.9g\\n\", (long long)step, loss);\n"
      "    if (!o.quiet && ((step + 1) %% o.log_every == 0 || step + 1 == o.steps || step == "
      "start)) {\n"
      "      double el = pr_now() - t0;\n"
      "      pr_log_step(step + 1, o.steps, loss, lr, (double)done * MB * NMICRO%s / el, \"%s\", "
      "el,\n"
      "                  el / (double)done * (double)(o.steps - step - 1));\n    }\n",
      tokens ? " * SEQ" : "", tokens ? "tok" : "samples");
  if (tokens || table)
    out(e, "    if ((o.eval_every && (step + 1) %% o.eval_every == 0) || step + 1 == o.steps) "
           "evaluate(o.eval_batches, step + 1);\n");
  out(e, "  }\n");
  // A loss log that could not be written in full (disk full) fails the run, after the save.
  out(e, "  bool loss_log_bad = false;\n"
         "  if (loss_log) {\n    loss_log_bad = ferror(loss_log) != 0;\n"
         "    loss_log_bad = (fclose(loss_log) != 0) || loss_log_bad;\n  }\n");
  out(e,
      "  if (!o.quiet && done > 10) // the median step after a warm-up of 5 steps (eval excluded)\n"
      "    printf(\"median step time %%.2f ms over %%lld steps\\n\",\n"
      "           pr_median(step_ms + 5, (done < timed ? done : timed) - 5),\n"
      "           (long long)((done < timed ? done : timed) - 5));\n"
      "  free(step_ms);\n");
  out(e, "  if (o.save) {\n    pr_checkpoint_save(o.save, &ck, start + done);\n"
         "    if (!o.quiet) printf(\"saved %%s (and its optimizer state %%s.optim)\\n\", o.save, "
         "o.save);\n  }\n");
  out(e, "  prCheck(!loss_log_bad, \"check that the disk has room (the log is incomplete)\",\n"
         "          \"--loss-log: writing '%%s' failed\", o.loss_log);\n");
  out(e, "  if (!o.quiet) printf(\"peak RSS %%.1f MiB\\n\", (double)pr_peak_rss_bytes() / (1 << "
         "20));\n");
  out(e, "  release();\n  return 0;\n}\n");
  return !ferror(e->f);
}

// Runs argv; false (with the command's exit status in the message) on failure.
static bool run(char *const argv[], Diag *d) {
  pid_t pid = fork();
  if (pid < 0) {
    diag_error(d, (Loc){0, 0}, "cannot start %s: %s", argv[0], strerror(errno));
    return false;
  }
  if (pid == 0) {
    execvp(argv[0], argv);
    fprintf(stderr, "pipec: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return true;
  diag_error(d, (Loc){0, 0}, "building the generated program failed (%s exited with %d)", argv[0],
             WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  return false;
}

static const char *runtime_dir(void) {
  const char *h = getenv("PIPEC_RUNTIME_DIR");
  return h && *h ? h : PIPEC_RUNTIME_DIR;
}
// The portable runtime, or the one built with -march=native (environment overrides first).
static const char *runtime_lib(bool native) {
  const char *h = getenv(native ? "PIPEC_RUNTIME_NATIVE_LIB" : "PIPEC_RUNTIME_LIB");
  return h && *h ? h : native ? PIPEC_RUNTIME_NATIVE_LIB : PIPEC_RUNTIME_LIB;
}

bool codegen_check_target(const Graph *g, const char *target, Diag *d) {
  // The CPU kernels compute in float32 (ids in int32): refuse what they would misread.
  for (int i = 0; i < g->ntensors; i++) {
    const Tensor *t = g->tensors[i];
    if (t->dtype == DT_F32 || t->dtype == DT_I32) continue;
    diag_error(d, t->loc, "%s: '%s' is %s; the %s target computes in f32 (and i32 ids) only",
               t->path ? t->path : "model", t->name, dtype_name(t->dtype), target);
    return false;
  }
  return true;
}

// mkdir -p: creates dir and its missing parents; an existing component must be a directory.
static bool make_dirs(Arena *a, const char *dir, Diag *d) {
  if (!*dir) {
    diag_error(d, (Loc){0, 0}, "the output directory is an empty path");
    return false;
  }
  char *p = arena_strdup(a, dir);
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s) continue;
    char c = *s;
    *s = 0;
    struct stat st;
    if (mkdir(p, 0777) != 0) {
      int err = errno;
      if (err == EEXIST && stat(p, &st) == 0 && !S_ISDIR(st.st_mode)) {
        diag_error(d, (Loc){0, 0}, "cannot create output directory '%s': '%s' is not a directory",
                   dir, p);
        return false;
      }
      if (err != EEXIST) {
        diag_error(d, (Loc){0, 0}, "cannot create output directory '%s': %s: %s", dir, p,
                   strerror(err));
        return false;
      }
    }
    *s = c;
    if (!c) return true;
  }
}

bool codegen_c(const Graph *g, const TrainConfig *tc, const Plan *p, const CodegenOptions *o,
               Diag *d) {
  Arena *a = g->arena;
  if (!make_dirs(a, o->out_dir, d)) return false;
  const char *src = arena_printf(a, "%s/rank0.c", o->out_dir),
             *tmp = arena_printf(a, "%s/.rank0.c.tmp", o->out_dir);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': %s", tmp, strerror(errno));
    return false;
  }
  E e = {.f = f, .g = g, .tc = tc, .p = p, .a = a};
  e.ident = ARENA_ARRAY(a, char *, g->ntensors);
  for (int i = 0; i < g->ntensors; i++) e.ident[i] = (char *)mangle(&e, g->tensors[i]);
  bool ok = emit(&e, o);
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, src) != 0) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': %s", src, strerror(errno));
    unlink(tmp);
    return false;
  }
  if (!o->build) return true;
  const char *bindir = arena_printf(a, "%s/bin", o->out_dir);
  if (mkdir(bindir, 0777) != 0 && errno != EEXIST) {
    diag_error(d, (Loc){0, 0}, "cannot create '%s': %s", bindir, strerror(errno));
    return false;
  }
  const char *exe = arena_printf(a, "%s/train", bindir);
  char *argv[64];
  int n = 0;
  const char *cc = getenv("CC");
  argv[n++] = (char *)(cc && *cc ? cc : "cc");
  argv[n++] = "-std=gnu11";
  argv[n++] = "-O2";
  argv[n++] = "-ffp-contract=off"; // no FMA contraction: the same bits with or without -march
  if (o->march_native) argv[n++] = "-march=native";
  argv[n++] = "-Wall";
  argv[n++] = "-Werror";
  argv[n++] = arena_printf(a, "-I%s", runtime_dir());
  argv[n++] = (char *)src;
  argv[n++] = "-o";
  argv[n++] = (char *)exe;
  argv[n++] = (char *)runtime_lib(o->march_native);
  // Libraries libpipert needs (from pkg-config at pipec's build time).
  char *libs = arena_strdup(a, PIPEC_RUNTIME_LIBS);
  for (char *tok = strtok(libs, " "); tok && n < 60; tok = strtok(NULL, " ")) argv[n++] = tok;
  argv[n] = NULL;
  return run(argv, d);
}

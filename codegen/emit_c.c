// C code generator: prints the training program of one rank from the ordered nodes and the
// memory plan, then builds it against libpipert.
//
// The program is straight-line C: one call per node into the runtime with every size a
// constant, tensors as macros over the four region pointers at the planned offsets. Model names
// never reach C source as identifiers: tensors become t<id>_<letters/digits of the name>, and
// names appear only inside escaped string literals (init seeds, safetensors names) and sanitised
// comments. The file is written atomically and stamped with the pipec version and command line.
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

// A name made safe for a // comment: printable ASCII only, no backslash (line continuation).
static const char *comment(E *e, const char *s) {
  size_t n = strlen(s);
  if (n > 200) n = 200;
  char *c = arena_strndup(e->a, s, n);
  for (char *p = c; *p; p++)
    if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f || *p == '\\') *p = '?';
  return c;
}

// A C string literal with every byte that is not plain printable ASCII escaped in octal.
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
        dtype_name(t->dtype), shape_str(sh, sizeof sh, &t->shape, g->batch_sym));
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

// Largest valid id for an i32 input: the smallest class count among its consumers (embedding
// rows, cross-entropy classes), so random ids are always in range.
static int64_t id_bound(const Tensor *t) {
  int64_t b = 0;
  for (int u = 0; u < t->nuses; u++) {
    const Node *n = t->uses[u].node;
    int64_t k = 0;
    if (!strcmp(n->op->name, "embedding") && t->uses[u].slot == 0) k = n->in[1]->shape.d[0].n;
    if (!strcmp(n->op->name, "cross_entropy") && t->uses[u].slot == 1) {
      const Shape *s = &n->in[0]->shape;
      k = s->d[s->rank - 1].n;
    }
    if (k > 0 && (b == 0 || k < b)) b = k;
  }
  return b ? b : 2;
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
        e->tc->data == DATA_CSV || e->tc->data == DATA_NPY ? "open_data(o->data, o->seed);"
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
  out(e, "// Training program for model %s, rank 0 of 1 (%s target).\n", cstring(e, g->name),
      o->target);
  out(e, "// Generated by pipec %s; do not edit.\n// Command: %s\n", PIPEC_VERSION,
      comment(e, o->cmdline));
  out(e,
      "// Batch %lld = %lld microbatch(es) of %lld; %d forward, %d backward, %d step-end nodes.\n",
      (long long)tc->batch, (long long)tc->microbatches, (long long)tc->mb_size, p->nfwd, p->nbwd,
      p->nstep);
  out(e, "#include <math.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include "
         "<string.h>\n\n#include \"pipert.h\"\n\n");
  out(e, "#define MB %lld // microbatch size (the batch symbol %s)\n", (long long)tc->mb_size,
      g->batch_sym);
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
        "static void open_data(const char *path) {\n  pr_tokens_open_%s(&data, path, %.17g);\n}\n",
        tc->data == DATA_TEXT ? "text" : "u16", tc->train_fraction);
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
          "static void open_data(const char *path, uint64_t seed) {\n  pr_table_open_npy(&data, "
          "path, %s, %.17g, seed, %.17g);\n",
          cstring(e, tc->data_path2), tc->train_fraction, tc->scale);
    out(e,
        "  prCheck(data.features == FEATURES, \"the model's input '%s' has %lld features\",\n"
        "          \"data has %%lld features per row\", (long long)data.features);\n}\n",
        comment(e, x->name), (long long)x->shape.d[1].n);
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
      out(e,
          "  for (int64_t k = 0; k < batches; k++) {\n"
          "    pr_tokens_batch(&data, PR_VAL, 0x5eed, k, 0, MB, SEQ, %s, %s);\n"
          "    forward();\n    loss += %s[0];\n    weight += 1;\n  }\n",
          e->ident[x->id], e->ident[y->id], e->ident[loss->id]);
    } else {
      out(e,
          "  int64_t val = data.rows - data.n_train;\n"
          "  if (batches == 0) batches = (val + MB - 1) / MB;\n"
          "  for (int64_t k = 0; k < batches; k++) {\n"
          "    int64_t valid = pr_table_val_batch(&data, k, MB, %s, %s);\n"
          "    forward();\n",
          e->ident[x->id], e->ident[y->id]);
      const Node *ln = loss->producer;
      if (classify && ln && !strcmp(ln->op->name, "cross_entropy") && ln->in[0] == logits &&
          ln->in[1] == y)
        // The last batch wraps around: its loss is taken over the real rows only.
        out(e,
            "    float part;\n    pr_cross_entropy_fwd(&part, %s, %s, valid, %lld);\n"
            "    loss += (double)part * (double)valid;\n    weight += (double)valid;\n",
            e->ident[logits->id], e->ident[y->id], (long long)logits->shape.d[1].n);
      else
        out(e,
            "    loss += %s[0] * (double)valid; // batch means, weighted by the real rows\n"
            "    weight += (double)valid;\n",
            e->ident[loss->id]);
      if (classify)
        out(e, "    correct += pr_count_correct(%s, %s, valid, %lld);\n    seen += valid;\n",
            e->ident[logits->id], e->ident[y->id], (long long)logits->shape.d[1].n);
      out(e, "  }\n");
    }
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
         "pr_free_region(acts);\n}\n\n");
  emit_gradcheck(e, tokens || table);

  // Main
  out(e, "int main(int argc, char **argv) {\n  pr_start(argc, argv);\n");
  out(e,
      "  PrOptions o = {.steps = %lld, .lr = %.17g, .min_lr = %.17g, .seed = %lluULL, .data = %s,\n"
      "                .eval_every = %lld, .eval_batches = %lld, .log_every = %lld};\n",
      (long long)tc->steps, tc->lr, tc->min_lr, (unsigned long long)tc->seed,
      tc->data_path ? cstring(e, tc->data_path) : "NULL", (long long)tc->eval_every,
      (long long)tc->eval_batches, (long long)tc->log_every);
  out(e, "  pr_parse_args(argc, argv, &o, %s);\n",
      cstring(e, arena_printf(e->a, "Train model %s (generated by pipec %s).", g->name,
                              PIPEC_VERSION)));
  out(e, "  pr_set_threads(o.threads);\n");
  out(e, "  if (!o.quiet) fputs(PLAN, stdout);\n");
  out(e, "  params = pr_alloc_region(\"params\", PARAMS_BYTES);\n  grads = "
         "pr_alloc_region(\"grads\", GRADS_BYTES);\n"
         "  optst = pr_alloc_region(\"optimizer\", OPTST_BYTES);\n  acts = "
         "pr_alloc_region(\"activations\", ACTS_BYTES);\n");
  out(e, "  setup_params();\n  fill_constants();\n");
  out(e,
      "  if (o.gradcheck) {\n    int rc = gradcheck(&o);\n    release();\n    return rc;\n  }\n");
  out(e, "  if (o.save) pr_checkpoint_check_writable(o.save); // fail now, not after training\n");
  if (tokens)
    out(e,
        "  prCheck(o.data != NULL, \"pass --data FILE\", \"no training data\");\n  "
        "open_data(o.data);\n"
        "  prCheck(data.vocab <= %lld, \"use data tokenized for this model, or a model with a "
        "larger vocabulary\",\n"
        "          \"%%s has %%d distinct tokens but the model's vocabulary holds %lld\", o.data, "
        "data.vocab);\n",
        (long long)id_bound(x), (long long)id_bound(x));
  else if (table)
    out(e,
        "  prCheck(o.data != NULL, \"pass --data FILE\", \"no training data\");\n  "
        "open_data(o.data, o.seed);\n"
        "  prCheck(data.classes <= %lld, \"use labels 0..%lld, or a model with more classes\",\n"
        "          \"%%s has labels up to %%d but the model has %lld classes\", o.data, "
        "data.classes - 1);\n",
        (long long)id_bound(y), (long long)id_bound(y) - 1, (long long)id_bound(y));
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
  out(e, "  double t0 = pr_now();\n  int64_t done = 0;\n");
  out(e, "  double *step_ms = calloc((size_t)(o.steps > start ? o.steps - start : 1), "
         "sizeof(double));\n"
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
  if (tc->grad_clip > 0)
    out(e,
        "    // Global norm over all parameters, summed in canonical order; clip as "
        "torch.nn.utils.clip_grad_norm_.\n"
        "    double norm2 = 0;\n"
        "    for (int i = 0; i < NPARAMS; i++)\n      if (P[i].grad) norm2 += pr_sumsq(P[i].grad, "
        "P[i].n);\n"
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
  out(e, "    step_ms[done] = (pr_now() - ts) * 1e3;\n");
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
  out(e, "  if (loss_log) fclose(loss_log);\n");
  out(e,
      "  if (!o.quiet && done > 10) // the median step after a warm-up of 5 steps (eval excluded)\n"
      "    printf(\"median step time %%.2f ms over %%lld steps\\n\", pr_median(step_ms + 5, done - "
      "5), (long long)(done - 5));\n"
      "  free(step_ms);\n");
  out(e, "  if (o.save) {\n    pr_checkpoint_save(o.save, &ck, start + done);\n"
         "    if (!o.quiet) printf(\"saved %%s (and its optimizer state %%s.optim)\\n\", o.save, "
         "o.save);\n  }\n");
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
static const char *runtime_lib(void) {
  const char *h = getenv("PIPEC_RUNTIME_LIB");
  return h && *h ? h : PIPEC_RUNTIME_LIB;
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

bool codegen_c(const Graph *g, const TrainConfig *tc, const Plan *p, const CodegenOptions *o,
               Diag *d) {
  Arena *a = g->arena;
  if (mkdir(o->out_dir, 0777) != 0 && errno != EEXIST) {
    diag_error(d, (Loc){0, 0}, "cannot create output directory '%s': %s", o->out_dir,
               strerror(errno));
    return false;
  }
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
  argv[n++] = "-Wall";
  argv[n++] = "-Werror";
  argv[n++] = arena_printf(a, "-I%s", runtime_dir());
  argv[n++] = (char *)src;
  argv[n++] = "-o";
  argv[n++] = (char *)exe;
  argv[n++] = (char *)runtime_lib();
  // Libraries libpipert needs (from pkg-config at pipec's build time).
  char *libs = arena_strdup(a, PIPEC_RUNTIME_LIBS);
  for (char *tok = strtok(libs, " "); tok && n < 60; tok = strtok(NULL, " ")) argv[n++] = tok;
  argv[n] = NULL;
  return run(argv, d);
}

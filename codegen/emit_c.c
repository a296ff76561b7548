// C code generator: prints the training program of one rank from its action list (pipeline.h)
// and its memory plan, then has build.c build it against libpipert: one function per (stage,
// phase) and a straight-line train_step() with one call per action (emit_rank.c's, the printer of
// every rank at every S: S = 1 is its one-rank case, without MPI unless --replicas).
//
// The program is one call per node into the runtime with every size a constant (segment.c:
// straight-line, or a loop over the structurally identical instances of a repeat block), tensors
// as macros over the four region pointers at the planned offsets. Model strings
// (names, paths, the command line) never reach C source raw: tensors become identifiers
// t<id>_<letters/digits of the name> (a loop's locals l_<letters/digits>, loop_names.c), and
// strings appear only through cstring() (string literals: init seeds, safetensors names, paths,
// hints) and comment() (defused comment text). Lines are within 100 columns (wrap.c: the long
// ones broken, the plan text as adjacent literals). The file is written atomically and stamped
// with the pipec version and command line.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../compiler/memplan.h"
#include "../compiler/training.h"
#include "../compiler/uneven.h"
#include "../ir/ops.h"
#include "emit.h"

#ifndef PIPEC_VERSION
#define PIPEC_VERSION "0.0.0"
#endif

// t<id>_<letters/digits of the name>: tensor t's C identifier (tid hands it out, text.c).
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

static void emit_tensors(E *e) {
  const Graph *g = e->g;
  out(e, "// ---- Tensors: pointers into the regions at the offsets planned by pipec (those named\n"
         "// outside the loops over repeat-block instances)\n");
  for (int v = 0; v < e->prog->nv; v++) // stages with several slots: slot k adds k * STRIDE_v
    if (e->p->slots && e->p->slots[v] > 1)
      out(e, "#define STRIDE_%d %lldLL // stage %d: bytes of one of its %d slots\n", v,
          (long long)e->p->slot_stride[v], v, e->p->slots[v]);
  for (int i = 0; i < g->ntensors; i++) {
    const Tensor *t = g->tensors[i];
    if (e->p->offset[i] < 0 || !e->used[i]) continue; // only what straight-line code names
    char sh[256];
    out_define(e, e->ident[i],
               arena_printf(e->a, "((%s *)(%s + %lld%s))", t->half ? "uint16_t" : ctype(t->dtype),
                            region_ptr[e->p->region[i]], (long long)e->p->offset[i],
                            slot_term(e, slot_stage(e, i))),
               arena_printf(e->a, "%s %s%s", comment(e, t->name), dtype_name(t->dtype),
                            comment(e, shape_str(sh, sizeof sh, &t->shape, g->batch_sym))));
  }
  out(e, "\n");
}

// One function per (stage, phase) of the rank: F_v(slot), B_v(slot, acc), W_v(slot, acc) (when
// B and W are split) and step_end_v() (the stage's TIED_SUM), each the segment's nodes in graph
// order. slot is the microbatch's memory slot (m mod K): a buffer of a stage with K > 1 is at
// its slot-0 offset + slot * STRIDE_v (its macro names slot), with K = 1 at its one offset.
static void emit_functions(E *e) {
  // (unused on a rank without the loss)
  out(e, "// Batch rows the losses average over: MB, or the real rows of a partial validation "
         "batch.\nstatic int64_t loss_rows __attribute__((unused)) = MB;\n\n");
  // --replicas: the exchange's buckets (buckets.c), some sent from inside B_v / W_v
  if (e->prog->replicas > 1 || uneven_reps(e->prog, e->rp->rank) > 1) e->rep = rep_buckets(e);
  if (rep_any_inside(e->rep)) {
    out(e, "// Set by train_step around the action whose kernels make buckets of the replicas'\n"
           "// gradient exchange final (the step's last B or W of a stage on this rank).\n"
           "static bool rep_final;\n\n");
  }
  for (int i = 0; i < e->rp->nvs; i++) {
    const VStage *s = &e->prog->vs[e->rp->vs[i]];
    int v = s->v;
    out(e,
        "// Stage %d, forward (F) of one microbatch: %d nodes.\n"
        "static void F_%d(int slot) {\n  (void)slot;\n",
        v, s->f.n, v);
    e->fn = ACT_F; // the decoration of its calls (emit_after_kernel)
    emit_segment(e, s->f.nodes, s->f.n, "0");
    out(e, "}\n\n");
    out_comment(e, "",
                arena_printf(e->a,
                             "Stage %d, backward (B) of one microbatch: %d nodes, input "
                             "gradients%s; acc = 0 for the first microbatch of the step, 1 after "
                             "(weight gradients accumulate over it).",
                             v, s->b.n,
                             s->split ? "" : " and weight gradients (W nodes, in graph order)"));
    out(e, "static void B_%d(int slot, int acc) {\n  (void)slot, (void)acc;\n", v);
    e->fn = ACT_B;
    if (s->recompute) { // --recompute: the forward again, from the slot's boundary tensors
      out(e, "  // Recompute: the forward's %d nodes B needs that make no boundary tensor.\n",
          s->r.n);
      emit_segment(e, s->r.nodes, s->r.n, "0");
      out(e, "  // The backward.\n");
    }
    emit_segment(e, s->b.nodes, s->b.n, "acc");
    out(e, "}\n\n");
    if (s->split) {
      out(e,
          "// Stage %d, weight gradients (W) of one microbatch: %d nodes.\n"
          "static void W_%d(int slot, int acc) {\n  (void)slot, (void)acc;\n",
          v, s->w.n, v);
      e->fn = ACT_W;
      emit_segment(e, s->w.nodes, s->w.n, "acc");
      out(e, "}\n\n");
    }
    out(e,
        "// Stage %d, end of step (TIED_SUM): gradients of parameters used in several places,\n"
        "// summed in use order (%d nodes).\nstatic void step_end_%d(void) {\n",
        v, s->step.n, v);
    e->fn = ACT_TIED_SUM;
    emit_segment(e, s->step.nodes, s->step.n, "0");
    out(e, "}\n\n");
  }
  e->fn = ACT_COUNT;
}

// The forward segments of every stage of the rank, in stage order (evaluation, --gradcheck).
static void print_forward(E *e, const char *indent) {
  for (int i = 0; i < e->rp->nvs; i++) out(e, "%sF_%d(0);\n", indent, e->prog->vs[e->rp->vs[i]].v);
}

static int64_t numel(const E *e, const Tensor *t) {
  return shape_numel(&t->shape, e->tc->mb_size);
}

// Bound of the ids an i32 input may hold: the smallest bound its consumers' registry rows declare
// for it (op_index_bound: embedding rows, cross-entropy classes); 0 when no consumer bounds them.
// *by: that consumer.
static int64_t id_limit(const Tensor *t, const Node **by) {
  int64_t b = 0;
  for (int u = 0; u < t->nuses; u++) {
    const Node *n = t->uses[u].node;
    int64_t k = op_index_bound(n, t->uses[u].slot);
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
    const char *what = nx->op->ids->vocabulary
                           ? arena_printf(e->a, "the model's vocabulary holds %lld", (long long)lx)
                           : arena_printf(e->a, "%s '%s' has %lld %s", nx->op->name, nx->name,
                                          (long long)lx, nx->op->ids->what);
    out(e, "  pr_tokens_check_ids(&data, path, %lld, %s);\n", (long long)lx, cstring(e, what));
  }
  if (ly > 0 && (lx == 0 || ly < lx)) {
    const char *what = arena_printf(e->a, "the target '%s' feeds %s '%s' with %lld %s", y->name,
                                    ny->op->name, ny->name, (long long)ly, ny->op->ids->what);
    out(e, "  pr_tokens_check_ids(&data, path, %lld, %s);\n", (long long)ly, cstring(e, what));
  }
}

// --gradcheck's generated pieces (the loop over the parameters is pr_gradcheck_program): one
// microbatch of data (or random inputs), its analytic gradients, and its loss through the same
// forward pass.
static void emit_gradcheck(E *e, bool has_data) {
  const Graph *g = e->g;
  out(e, "// ---- --gradcheck\n");
  out(e, "static void random_inputs(uint64_t seed) {\n");
  for (int i = 0; i < g->ninputs; i++) {
    const Tensor *t = g->inputs[i];
    if (t->dtype == DT_I32)
      out(e, "  pr_init_ids(%s, %lld, seed, %s, %lld);\n", tid(e, t), (long long)numel(e, t),
          cstring(e, t->name), (long long)id_bound(t));
    else
      out(e, "  pr_init_normal(%s, %lld, seed, %s, 0.0, 1.0);\n", tid(e, t), (long long)numel(e, t),
          cstring(e, t->name));
  }
  out(e, "}\n\n");
  // Inputs are reloaded before every forward pass: the backward pass reuses their space.
  out(e, "static uint64_t gc_seed;\n%s\n", has_data ? "static bool gc_data;\n" : "");
  out(e, "static void gradcheck_inputs(void) {\n");
  if (has_data) { // microbatch 0 of step 0, each stage's inputs into its slot 0
    out(e, "  if (gc_data) {\n");
    for (int i = 0; i < e->rp->nvs; i++)
      if (e->prog->vs[e->rp->vs[i]].loads)
        out(e, "    load_%d(PR_TRAIN, gc_seed, 0, 0, 0);\n", e->rp->vs[i]);
    out(e, "    return;\n  }\n");
  }
  out(e, "  random_inputs(gc_seed);\n}\n\n");
  out(e, "static void gradcheck_begin(const PrOptions *o) {\n  gc_seed = o->seed;\n");
  if (has_data) out(e, "  gc_data = o->data != NULL;\n  if (gc_data) open_data(o);\n");
  out(e, "}\n\n");
  // Microbatch 0's F, B and W actions and the stage step ends, in the action list's order.
  out(e, "static void gradcheck_grads(void) {\n  gradcheck_inputs();\n");
  for (int i = 0; i < e->rp->nacts; i++) {
    const Action *x = &e->rp->acts[i];
    if (x->kind == ACT_F && x->m == 0) out(e, "  F_%d(0);\n", x->v);
    if (x->kind == ACT_B && x->m == 0) out(e, "  B_%d(0, 0);\n", x->v);
    if (x->kind == ACT_W && x->m == 0) out(e, "  W_%d(0, 0);\n", x->v);
    if (x->kind == ACT_TIED_SUM) out(e, "  step_end_%d();\n", x->v);
  }
  out(e, "}\n\n");
  out(e, "static double gradcheck_loss(void) {\n  gradcheck_inputs();\n");
  print_forward(e, "  ");
  out(e, "  return (double)%s[0] / NMICRO;\n}\n\n", tid(e, g->loss));
}

// The rope tables this rank's rope nodes read (runtime/rope_table.c), each (T, D, theta) once,
// built at start so that the training loop only looks them up. The CUDA kernels compute their
// angles on the device per call. Linear in the nodes (a model has a few distinct keys).
static void emit_rope_tables(E *e) {
  enum { KEYS = 64 }; // as runtime/rope_table.c's limit; more keys build at first use
  struct {
    int64_t T, D;
    float theta;
  } key[KEYS];
  int nkeys = 0;
  const Graph *g = e->g;
  for (int i = 0; i < g->nnodes && nkeys < KEYS; i++) {
    const Node *n = g->nodes[i];
    if (strcmp(n->op->name, "rope") != 0 || n->role != ROLE_FWD) continue;
    if (e->prog->vs[e->prog->vstage_of_node[n->id]].rank != e->rp->rank) continue;
    const Shape *x = &n->in[0]->shape;
    int64_t T = x->d[n->attrs[2].i].n, D = x->d[x->rank - 1].n;
    float theta = (float)n->attrs[0].f;
    int k = 0;
    while (k < nkeys && !(key[k].T == T && key[k].D == D && key[k].theta == theta)) k++;
    if (k < nkeys) continue;
    key[nkeys].T = T, key[nkeys].D = D, key[nkeys++].theta = theta;
    out(e, "  pr_rope_prepare(%lld, %lld, %s); // rope's cos and sin for (T, D, theta)\n",
        (long long)T, (long long)D, flit(e, theta));
  }
}

static const char *data_kind_name(DataKind k) {
  static const char *const n[] = {"none", "text", "tokens_u16", "csv", "npy"};
  return n[k];
}

// The table's model of the data (PrTableModel): per fed input its name, dtype, role, per-sample
// shape, first CSV column and class bound, positionally (C and C++ alike); npy files are set
// from the options at open. data.shuffle false: rows in file order, each step reading the next
// `batch` of them (the whole job's: every replica's microbatches, as they are numbered globally).
static void emit_table_model(E *e) {
  const TrainConfig *tc = e->tc;
  out(e, "  static PrTableModel want = {%d, {\n", tc->nfeeds);
  for (int k = 0; k < tc->nfeeds; k++) {
    const Feed *f = &tc->feeds[k];
    const Shape *s = &f->t->shape;
    out(e, "      {%s, %s, %s, %lld, %d, {", cstring(e, f->t->name),
        f->t->dtype == DT_I32 ? "true" : "false", f->target ? "true" : "false",
        (long long)f->width, s->rank - 1);
    for (int d = 1; d < s->rank; d++) out(e, "%s%lld", d > 1 ? ", " : "", (long long)s->d[d].n);
    out(e, "}, %lld, %lld, NULL},\n", (long long)f->col,
        f->t->dtype == DT_I32 ? (long long)id_limit(f->t, NULL) : 0LL);
  }
  int D = e->prog->replicas > 1 ? e->prog->replicas : 1;
  out(e, "  }, %lldLL, %s, %lldLL};\n", (long long)tc->columns, tc->shuffle ? "false" : "true",
      tc->shuffle ? 0LL : (long long)(tc->batch * D));
}

// The data functions: open_data (open and check o->data) and per stage of the rank that reads a
// data input load_<v> (one training microbatch into the fed inputs it holds, emit_rank.c).
static void emit_data(E *e) {
  const TrainConfig *tc = e->tc;
  bool tokens = tc->data == DATA_TEXT || tc->data == DATA_U16;
  bool table = tc->data == DATA_CSV || tc->data == DATA_NPY;
  out(e, "// ---- Data: %s\n", data_kind_name(tc->data));
  if (tokens) {
    const Tensor *x = tc->feeds[0].t, *y = tc->feeds[1].t;
    out(e, "static PrTokens data;\n#define SEQ %lld // tokens per row\n",
        (long long)x->shape.d[1].n);
    out(e,
        "static void open_data(const PrOptions *o) {\n  const char *path = o->data;\n"
        "  pr_tokens_open_%s(&data, path, %.17g);\n"
        "  pr_tokens_check_windows(&data, path, SEQ);\n",
        tc->data == DATA_TEXT ? "text" : "u16", tc->train_fraction);
    emit_token_id_checks(e, x, y);
    out(e, "}\n");
  } else if (table) {
    // The loader checks the model's inputs at the line or row that breaks them.
    out(e, "static PrTable data;\nstatic void open_data(const PrOptions *o) {\n");
    emit_table_model(e);
    if (tc->data == DATA_CSV) {
      out(e, "  pr_table_open_csv(&data, o->data, %.17g, o->seed, %.17g, &want);\n",
          tc->train_fraction, tc->scale);
    } else {
      out(e, "  want.feed[0].file = o->data;\n");
      for (int k = 1; k < tc->nfeeds; k++) out(e, "  want.feed[%d].file = o->file[%d];\n", k, k);
      out(e, "  pr_table_open_npy(&data, %.17g, o->seed, %.17g, &want);\n", tc->train_fraction,
          tc->scale);
    }
    out(e, "}\n");
  }
  out(e, "\n");
  // Each stage loads what it holds; without a data binding nothing (pr_main stops before
  // training; the program is still good for --gradcheck).
  emit_rank_loaders(e);
}

// .npy tables' defaults: " .nfiles = N, .file_name = {...}, .file = {NULL, ...}, .label_file
// = K," (the first file is .data; --labels sets the one target's file); "" for other data.
static const char *npy_files(E *e, const CodegenOptions *o) {
  const TrainConfig *tc = e->tc;
  if (tc->data != DATA_NPY) return "";
  const char *names = "", *files = "";
  int label = 0, ntargets = 0;
  for (int k = 0; k < tc->nfeeds; k++) {
    const Feed *f = &tc->feeds[k];
    names = arena_printf(e->a, "%s%s%s", names, k ? ", " : "", cstring(e, f->t->name));
    files = arena_printf(e->a, "%s%s%s", files, k ? ", " : "",
                         k ? cstring(e, codegen_data_path(e->a, f->file, f->file_rel, o->out_dir))
                           : "NULL");
    if (f->target) ntargets++, label = k;
  }
  return arena_printf(e->a,
                      "\n                 .nfiles = %d, .file_name = {%s},\n"
                      "                 .file = {%s}, .label_file = %d,\n                ",
                      tc->nfeeds, names, files, ntargets == 1 ? label : 0);
}

// The model's "weights" default: " .weights = \"$ORIGIN/...\",", the defaults going on in the
// next line (the initial parameters without --init or --resume, a path like the data's); ""
// without the key, so that the sources of other models do not change.
static const char *weights_default(E *e, const CodegenOptions *o) {
  const TrainConfig *tc = e->tc;
  if (!tc->weights_path) return "";
  return arena_printf(
      e->a, " .weights = %s,\n                ",
      cstring(e, codegen_data_path(e->a, tc->weights_path, tc->weights_rel, o->out_dir)));
}

// The command line in full, as comment lines of at most 76 of its characters each (100 columns
// with their prefix): "// Command:" and then "// Command (continued):" lines.
static void out_command(E *e, const char *cmd) {
  enum { WIDTH = 76 }; // columns after the longer prefix, "// Command (continued): "
  size_t n = strlen(cmd), i = 0;
  do {
    size_t k = n - i < WIDTH ? n - i : WIDTH;
    const char *c;
    for (;; k--) { // a piece whose escaped text (comment() may add spaces) fits WIDTH
      char chunk[WIDTH + 1];
      memcpy(chunk, cmd + i, k);
      chunk[k] = 0;
      c = comment(e, chunk);
      if (strlen(c) <= WIDTH || k <= 1) break;
    }
    out(e, "// Command%s: %s\n", i ? " (continued)" : "", c);
    i += k;
  } while (i < n);
}

static bool emit(E *e, const CodegenOptions *o, Diag *d) {
  const Graph *g = e->g;
  const TrainConfig *tc = e->tc;
  const Plan *p = e->p;
  out(e, "// Training program for model %s, rank %d of %d (%s target).\n", comment(e, g->name),
      e->rp->rank, e->prog->nranks, comment(e, o->target));
  out(e, "// Generated by pipec %s; do not edit.\n", PIPEC_VERSION);
  out_command(e, o->cmdline);
  out(e,
      "// Batch %lld = %lld microbatch(es) of %lld; %d stage(s) on this rank, %d actions per "
      "step.\n"
      "// The run itself (arguments, resume and save, the loop, evaluation, clipping, optimizer,\n"
      "// logging) is the runtime's pr_main (trainloop.c) over the functions below.\n",
      (long long)tc->batch, (long long)tc->microbatches, (long long)tc->mb_size, e->rp->nvs,
      e->rp->nacts);
  if (e->cuda) // C++ for nvcc: the runtime's C headers with C linkage
    out(e, "#include <stdbool.h>\n#include <stdint.h>\n#include <string.h>\n\n"
           "extern \"C\" {\n#include \"pipert.h\"\n}\n#include \"pipert_cuda.h\"\n\n");
  else
    out(e, "#include <stdbool.h>\n#include <stdint.h>\n#include <string.h>\n\n#include "
           "\"pipert.h\"\n\n");
  out(e, "#define MB %lld // microbatch size (the batch symbol %s)\n", (long long)tc->mb_size,
      comment(e, g->batch_sym));
  out(e, "#define NMICRO %lld // microbatches per step\n\n", (long long)tc->microbatches);
  static const char *const rn[REG_COUNT] = {"PARAMS", "GRADS", "OPTST", "ACTS"};
  out(e, "// ---- Memory plan: one allocation per region\n");
  for (int r = 0; r < REG_COUNT; r++)
    out(e, "#define %s_BYTES %lldLL\n", rn[r], (long long)p->bytes[r]);
  out(e, "static char *params, *grads, *optst, *acts;\n\n");
  if (p->conv_bytes > 0) // --precision: each call's f32 copies of its 16-bit operands
    out(e,
        "#define CONV ((float *)(acts + %lldLL)) // conversion area, %lld bytes (--precision)\n\n",
        (long long)p->conv_base, (long long)p->conv_bytes);
  char *plan_text = NULL;
  size_t plan_len = 0;
  FILE *pf = open_memstream(&plan_text, &plan_len);
  plan_print(g, tc, p, pf);
  fclose(pf);
  out(e, "static const char PLAN[] =\n    %s;\n\n", cstring_split(e, plan_text, "    "));
  free(plan_text);
  // The rest is printed into memory first: the tensor macros then name only the tensors that
  // straight-line code uses (a loop over block instances reaches its tensors by offset).
  FILE *file = e->f;
  char *body = NULL;
  size_t body_len = 0;
  e->f = open_memstream(&body, &body_len);
  if (!e->f) return false;
  if (e->cuda) emit_cuda_support(e);
  emit_functions(e);
  emit_params(e);

  // Constants
  out(e, "static void fill_constants(void) {\n");
  for (int i = 0; i < g->ntensors; i++)
    if (g->tensors[i]->kind == T_CONST && p->offset[i] >= 0) // those this rank holds
      out(e, "  %s(%s, %lld, %s);\n", kernel_name(e, "pr_fill"), tid(e, g->tensors[i]),
          (long long)numel(e, g->tensors[i]), flit(e, g->tensors[i]->const_value));
  if (!e->cuda) emit_rope_tables(e);
  out(e, "}\n\n");
  out(e, "static void setup(void) {\n  setup_params();\n%s  fill_constants();\n}\n\n",
      e->cuda ? "  cu_ws = pr_cu_alloc_region(\"the attention workspace\", ws_bytes());\n" : "");

  bool tokens = tc->data == DATA_TEXT || tc->data == DATA_U16;
  bool table = tc->data == DATA_CSV || tc->data == DATA_NPY;
  bool has_data = tokens || table;
  emit_data(e);
  if (e->comm) emit_rank_comm(e);
  if (!emit_rank_train_step(e, d)) {
    fclose(e->f);
    free(body);
    e->f = file;
    return false;
  }
  if (has_data) {
    emit_rank_eval(e);
    out(e, "static void release_data(void) {\n  if (%s) pr_%s_close(&data);\n}\n\n",
        tokens ? "data.tokens" : "data.cells", tokens ? "tokens" : "table");
  }
  if (!e->comm && !e->cuda) emit_gradcheck(e, has_data); // else the runtime refuses it

  // The program as the runtime sees it.
  out(e, "static const PrProgram program = {\n");
  const char *doc = arena_printf(e->a, "Train model %s (generated by pipec %s; built for %s).",
                                 g->name, PIPEC_VERSION,
                                 e->cuda           ? "CUDA GPUs"
                                 : o->march_native ? "this machine's CPU, --march=native"
                                                   : "any x86-64 CPU");
  if (strlen(cstring(e, doc)) + 12 <= 100)
    out(e, "    .doc = %s,\n", cstring(e, doc));
  else
    out(e, "    .doc =\n        %s,\n", cstring_split(e, doc, "        "));
  const char *first = tc->data == DATA_NPY ? tc->feeds[0].file : tc->data_path;
  bool first_rel = tc->data == DATA_NPY ? tc->feeds[0].file_rel : tc->data_rel;
  out(e, "    .plan = PLAN,\n");
  // (The data path on a line of its own: the layout does not depend on where the data is.)
  out_stmt(e, "    ",
           arena_printf(
               e->a, ".defaults = {.steps = %lld, .lr = %.17g, .min_lr = %.17g, .seed = %lluULL,",
               (long long)tc->steps, tc->lr, tc->min_lr, (unsigned long long)tc->seed),
           NULL);
  out(e, "                 .data = %s,%s%s\n",
      first ? cstring(e, codegen_data_path(e->a, first, first_rel, o->out_dir)) : "NULL",
      npy_files(e, o), weights_default(e, o));
  out(e, "                 .eval_every = %lld, .eval_batches = %lld, .log_every = %lld},\n",
      (long long)tc->eval_every, (long long)tc->eval_batches, (long long)tc->log_every);
  out(e, "    .region_bytes = {PARAMS_BYTES, GRADS_BYTES, OPTST_BYTES, ACTS_BYTES},\n"
         "    .region = {&params, &grads, &optst, &acts},\n"
         "    .params = P,\n    .nparams = NPARAMS,\n");
  if (tc->opt == OPT_ADAMW)
    out_stmt(e, "    ",
             arena_printf(e->a,
                          ".opt = {.kind = PR_ADAMW, .beta1 = %.17g, .beta2 = %.17g, .eps = %.17g, "
                          ".weight_decay = %.17g, .grad_clip = %.17g},",
                          tc->beta1, tc->beta2, tc->eps, tc->weight_decay, tc->grad_clip),
             NULL);
  else
    out_stmt(e, "    ",
             arena_printf(e->a,
                          ".opt = {.kind = PR_SGD, .weight_decay = %.17g, .momentum = %.17g, "
                          ".grad_clip = %.17g},",
                          tc->weight_decay, tc->momentum, tc->grad_clip),
             NULL);
  out(e, "    .warmup = %lld,\n    .decay_steps = %lld,\n", (long long)tc->warmup,
      (long long)tc->decay_steps);
  out(e, "    .items_per_step = (double)MB * NMICRO%s%s,\n    .item_unit = \"%s\",\n",
      tokens ? " * SEQ" : "",
      e->prog->replicas > 1 ? arena_printf(e->a, " * %d", e->prog->replicas) : "", // the job's
      tokens ? "tok" : "samples");
  if (tc->data == DATA_TEXT) out(e, "    .vocab = data.chars,\n    .nvocab = &data.vocab,\n");
  // Fields in declaration order (C++ designated initializers, for nvcc).
  out(e, "    .setup = setup,\n    .init_params = init_params,\n");
  if (has_data) out(e, "    .open_data = open_data,\n    .release_data = release_data,\n");
  out(e, "    .train_step = train_step,\n");
  if (has_data) out(e, "    .eval_batches = eval_batches,\n    .eval_batch = eval_batch,\n");
  if (!e->comm && !e->cuda)
    out(e, "    .gradcheck_begin = gradcheck_begin,\n    .gradcheck_grads = gradcheck_grads,\n"
           "    .gradcheck_loss = gradcheck_loss,\n");
  const Tensor *pname, *pt = predict_output(e, &pname);
  if (pname) { // --predict: the first output, per sample
    out(e, "    .output_name = %s,\n    .output_dims = %d,\n    .output_shape = {",
        cstring(e, pname->name), pname->shape.rank);
    for (int d = 0; d < pname->shape.rank; d++)
      out(e, "%s%lld", d ? ", " : "", (long long)pname->shape.d[d].n);
    out(e, "},\n    .output_batch = MB,\n    .output_here = %s,\n", pt ? "true" : "false");
  }
  if (e->comm) out(e, "    .comm = &comm,\n");
  if (e->cuda) out(e, "    .device = &pr_device_cuda,\n    .device_scratch = scratch_bytes,\n");
  if (tc->precision != DT_F32) { // 16-bit storage; fp16: the loss seed the scaler sets
    out(e, "    .precision = %s,\n", tc->precision == DT_F16 ? "PR_FP16" : "PR_BF16");
    const Tensor *seed = NULL;
    for (int i = 0; i < g->ntensors; i++) {
      const Tensor *t = g->tensors[i];
      if (t->kind == T_CONST && t->grad_of == g->loss && p->offset[i] >= 0) seed = t;
    }
    if (tc->precision == DT_F16)
      out(e, "    .seed_offset = %lld,\n    .seed_value = %s,\n",
          seed ? (long long)p->offset[seed->id] : -1LL, flit(e, seed ? seed->const_value : 0));
  }
  out(e, "};\n\n");
  out(e, "int main(int argc, char **argv) {\n  return pr_main(&program, argc, argv);\n}\n");
  bool ok = fclose(e->f) == 0;
  e->f = file;
  emit_tensors(e);
  if (ok) fwrite(body, 1, body_len, e->f);
  free(body);
  return ok && !ferror(e->f);
}

bool codegen_c(const Program *prog, int rank, const CodegenOptions *o, Diag *d) {
  const Graph *g = prog->g;
  const RankProgram *rp = &prog->ranks[rank];
  Arena *a = g->arena;
  if (!codegen_make_dirs(a, o->out_dir, d)) return false;
  bool cuda = !strcmp(o->target, "cuda");
  const char *ext = cuda ? "cu" : "c";
  const char *src = arena_printf(a, "%s/rank%d.%s", o->out_dir, rank, ext),
             *tmp = arena_printf(a, "%s/.rank%d.%s.tmp", o->out_dir, rank, ext);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': %s", tmp, strerror(errno));
    return false;
  }
  E e = {.f = f,
         .prog = prog,
         .rp = rp,
         .g = g,
         .tc = prog->tc,
         .p = &rp->plan,
         .a = a,
         .comm = codegen_links_mpi(prog),
         .cuda = cuda,
         .fn = ACT_COUNT,
         .profile = o->profile,
         .fuse = !o->no_fuse && !cuda};
  e.ident = ARENA_ARRAY(a, char *, g->ntensors);
  e.used = ARENA_ARRAY(a, bool, g->ntensors);
  for (int i = 0; i < g->ntensors; i++) e.ident[i] = (char *)mangle(&e, g->tensors[i]);
  e.streams = emit_rank_has_streams(&e);
  int errors = d->errors;
  bool ok = emit(&e, o, d);
  ok = (fclose(f) == 0) && ok;
  if (d->errors > errors) { // emit reported why
    unlink(tmp);
    return false;
  }
  if (!ok || rename(tmp, src) != 0) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': %s", src, strerror(errno));
    unlink(tmp);
    return false;
  }
  return !o->build || codegen_build(prog, rank, o, src, d);
}

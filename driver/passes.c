// passes.c: the passes as a table (QBE's main.c is the model). Each row is a pass with its name,
// its run, its checker (the IR verifier after every pass that changes the IR) and its dump
// (--dump-after); run_passes runs the rows in order up to the last one that the command,
// --dump-after and --stop-after ask for (select_passes), checks each one's result, times it
// (--time-passes) and stops at the first that reports an error. Adding a pass is adding a row.
#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <time.h>

#include "../compiler/schedule.h"
#include "../compiler/simulate.h"
#include "../compiler/uneven.h"
#include "../compiler/weights.h"
#include "driver.h"

double clock_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// ---------------------------------------------------------------------------------------------
// The passes

static bool run_expand(Driver *dr) {
  ExpandOptions eo = {dr->cfg.defines, dr->cfg.ndefines};
  return pass_expand(&dr->src, &dr->graph, &eo, &dr->diag) &&
         weights_check(&dr->src, &dr->graph, &dr->diag);
}

static bool run_shape(Driver *dr) {
  return pass_shape(&dr->graph, &dr->diag);
}

static bool run_training(Driver *dr) {
  return training_parse(&dr->src, &dr->graph, dr->cfg.sets, dr->cfg.nsets, &dr->tc, &dr->diag);
}

// --replicas D0,D1,..: one count per stage, each dividing M. Equal counts are the uniform form
// (--replicas 2,2 is --replicas 2); counts that differ are PipeDream's uneven form (uneven.c).
static bool check_rep_counts(Driver *dr) {
  int nv = dr->cfg.po.stages ? dr->cfg.po.stages : dr->cfg.po.nsplit ? dr->cfg.po.nsplit + 1 : 1;
  int S = nv / dr->cfg.virt; // the pipeline's ranks (the partition cuts S x V stages)
  const char *l = dr->cfg.rep_list;
  long long M = dr->tc.microbatches;
  if (dr->cfg.nrep_counts != S) {
    diag_error(&dr->diag, (Loc){0, 0},
               "--replicas %s: %d per-stage replica counts for a pipeline of %d stage%s: give one "
               "count per stage (or one count D for every stage)",
               l, dr->cfg.nrep_counts, S, S == 1 ? "" : "s");
    return false;
  }
  for (int s = 0; s < S; s++) {
    int D = dr->cfg.rep_counts[s];
    if (M % D == 0) continue;
    diag_error(&dr->diag, (Loc){0, 0},
               "--replicas %s: stage %d's count %d does not divide the microbatches M = %lld "
               "(each of its replicas takes M / %d of every step's microbatches)",
               l, s, D, M, D);
    return false;
  }
  return true;
}

// With --replicas D the loss gradient's seed is 1/M of the whole step's M microbatches; from here
// on the configuration is one replica's: M / D microbatches of the same size (batch / D rows).
// Unless --no-fuse; f32 only (fuse.c: the 16-bit precisions round between the unfused kernels).
static bool run_fuse(Driver *dr) {
  return pass_fuse(&dr->graph, !dr->cfg.no_fuse && dr->cfg.precision == DT_F32, &dr->diag);
}

static bool run_autodiff(Driver *dr) {
  TrainConfig *tc = &dr->tc;
  if (dr->cfg.rep_list && !check_rep_counts(dr)) return false;
  int D = dr->cfg.replicas > 1 ? dr->cfg.replicas : 1;
  if (tc->microbatches % D) {
    diag_error(&dr->diag, (Loc){0, 0},
               "--replicas %d: the microbatches M = %lld are not a multiple of the replicas D "
               "(each replica takes M / D of every step's microbatches)",
               D, (long long)tc->microbatches);
    return false;
  }
  if (!pass_autodiff(&dr->graph, (int)tc->microbatches, &dr->diag)) return false;
  tc->microbatches /= D, tc->batch /= D;
  training_accuracy(tc);             // once, for every S: whether evaluations count accuracy
  tc->precision = dr->cfg.precision; // the tensors stored in 16 bits, before anything is planned
  precision_mark(&dr->graph, dr->cfg.precision,
                 tc->accuracy ? accuracy_logits(tc->accuracy) : NULL);
  return true;
}

// With --virtual V the partition cuts S x V stages; stage v runs on the schedule's rank for it
// (sched_rank_of, as sched_build sets it again), so the partition table names the right ranks.
static bool run_partition(Driver *dr) {
  if (dr->cfg.costs_path) { // the measured costs, bound to this graph's nodes
    if (!costs_bind(&dr->costs, &dr->graph, &dr->tc, &dr->costs_diag)) return false;
    dr->cfg.po.costs = &dr->costs;
  }
  if (!pass_partition(&dr->graph, &dr->tc, &dr->cfg.po, &dr->prog, &dr->diag)) {
    if (dr->cfg.virt > 1 && !dr->cfg.virt_given) // zb-v: V = 2 implied
      diag_note(&dr->diag,
                "with --schedule zb-v (two stages per rank) the partition cuts S x 2 = "
                "%d stages",
                dr->cfg.po.stages);
    else if (dr->cfg.virt > 1) // its message counts the S x V stages it was asked for
      diag_note(&dr->diag, "with --virtual %d the partition cuts S x V = %d stages", dr->cfg.virt,
                dr->cfg.po.stages);
    return false;
  }
  Program *p = &dr->prog;
  if (dr->cfg.virt > 1 && p->nv % dr->cfg.virt == 0)
    for (int v = 0; v < p->nv; v++)
      p->vs[v].rank = sched_rank_of(dr->cfg.sched, p->nv / dr->cfg.virt, dr->cfg.virt, v);
  bool *rcf; // --recompute, for the partition table's estimate (out of range: run_schedule)
  int bad;
  if (recompute_flags(dr->cfg.po.recomp, dr->cfg.po.nrecomp, p->nv, &dr->arena, &rcf, &bad))
    for (int v = 0; v < p->nv; v++) p->vs[v].recompute = rcf && rcf[v];
  return true;
}

static bool run_comm(Driver *dr) {
  return pass_comm(&dr->graph, &dr->prog, &dr->diag);
}

// The chosen schedule over the partition's S x V stages (placed by sched_rank_of) and the comm
// pass's channels; one stage is the one-rank case, lowered as 1f1b whatever --schedule says.
static bool run_schedule(Driver *dr) {
  // --recompute: the stages that rerun their forward.
  bool *rc = NULL;
  int bad = -1;
  int nv = dr->prog.nv > 0 ? dr->prog.nv : 1;
  if (!recompute_flags(dr->cfg.po.recomp, dr->cfg.po.nrecomp, nv, &dr->arena, &rc, &bad)) {
    diag_error(&dr->diag, (Loc){0, 0},
               "--recompute %d: no such stage (the pipeline has %d stage%s: 0 to %d)", bad, nv,
               nv == 1 ? "" : "s", nv - 1);
    return false;
  }
  recompute_apply(&dr->prog, rc, &dr->arena); // before the lowering: those stages stay fused
  if (dr->prog.nv == 1) return pass_schedule(&dr->graph, &dr->tc, &dr->prog, &dr->diag);
  if (dr->cfg.virt > 1 && dr->prog.nv <= dr->cfg.virt) { // --split made S x V stages with S = 1
    if (dr->cfg.sched == SCHED_ZBV)
      diag_error(&dr->diag, (Loc){0, 0},
                 "--schedule zb-v needs --stages >= 2: it places two stages on each of several "
                 "ranks in a V, and --split made %d stages, one rank's (name 2S - 1 cuts)",
                 dr->prog.nv);
    else
      diag_error(&dr->diag, (Loc){0, 0},
                 "--virtual %d needs --stages >= 2: interleaving runs the stages of several ranks",
                 dr->cfg.virt);
    return false;
  }
  if (dr->prog.nv % dr->cfg.virt) {
    diag_error(&dr->diag, (Loc){0, 0},
               "--virtual %d: the partition has %d stages, not a multiple of %d (with --split, "
               "name S x V - 1 cuts)",
               dr->cfg.virt, dr->prog.nv, dr->cfg.virt);
    return false;
  }
  if (dr->cfg.sched_csv) { // the CSV's rows, checked against M, lowered like a built-in's
    Action **comp;
    int *ncomp;
    if (!sched_csv_orders(&dr->csv, dr->prog.M, &comp, &ncomp, &dr->arena, &dr->diag)) return false;
    if (!sched_lower(&dr->prog, dr->csv.S, dr->csv.V, comp, ncomp, dr->csv.split,
                     dr->csv.stage_rank, &dr->arena, &dr->diag)) {
      diag_note(&dr->diag, "in the schedule %s", dr->cfg.sched_csv);
      return false;
    }
    return true;
  }
  return sched_build(&dr->prog, dr->cfg.sched, dr->prog.nv / dr->cfg.virt, dr->cfg.virt, &dr->arena,
                     &dr->diag);
}

// One memory plan per rank. The plan is the target's: its buffers hold what the target
// computes in. plan_memory checks every rank's plan itself (plan_check, in every build). With
// --mem-cap, every rank's planned bytes (the sum of its regions) must fit under the cap: the
// partitioner chose its cut from an estimate (partition.c), this is the real plan.
static bool run_memplan(Driver *dr) {
  dr->prog.replicas =
      dr->cfg.replicas > 1 ? dr->cfg.replicas : 1; // the schedule pass made prog anew
  dr->prog.stage_reps = dr->cfg.uneven ? dr->cfg.rep_counts : NULL; // M stays the step's (uneven.c)
  if (dr->cfg.uneven && !uneven_check(&dr->prog, dr->cfg.rep_list, &dr->diag)) return false;
  if (!codegen_check_target(&dr->graph, dr->cfg.target, &dr->diag)) return false;
  if (!plan_memory(&dr->prog, &dr->diag)) return false;
  bool fits = true;
  for (int r = 0; r < dr->prog.nranks; r++) {
    const Plan *pl = &dr->prog.ranks[r].plan;
    plan_warn_memory(pl, &dr->diag);
    int64_t total = 0; // fits: plan_memory checked the sum
    for (int k = 0; k < REG_COUNT; k++) total += pl->bytes[k];
    if (dr->cfg.po.mem_cap <= 0 || total <= dr->cfg.po.mem_cap) continue;
    diag_error(&dr->diag, (Loc){0, 0},
               "--mem-cap %lld: rank %d's memory plan needs %lld bytes (params %lld, grads %lld, "
               "optimizer %lld, activations %lld): use more --stages, a schedule that keeps fewer "
               "microbatches in flight (1f1b or zb-h1 rather than gpipe), or a larger cap",
               (long long)dr->cfg.po.mem_cap, r, (long long)total, (long long)pl->bytes[REG_PARAMS],
               (long long)pl->bytes[REG_GRADS], (long long)pl->bytes[REG_OPT],
               (long long)pl->bytes[REG_ACTS]);
    fits = false;
  }
  return fits;
}

// The model name as a directory name: letters, digits, '-', '_', '.'.
const char *mangle_dir(Arena *a, const char *name) {
  char *s = arena_strdup(a, *name ? name : "model");
  for (char *p = s; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') *p = '_';
  if (s[0] == '.') s[0] = '_';
  return s;
}

// The files for build systems (docs/build-integration.md): --no-build's manifest, then the
// --depfile (last: it lists what was written).
static bool run_build_files(Driver *dr, const CodegenOptions *co) {
  if (dr->cfg.no_build && !codegen_manifest(&dr->prog, co, &dr->diag)) return false;
  return !dr->cfg.depfile || codegen_depfile(&dr->prog, co, dr->cfg.depfile, &dr->diag);
}

static bool run_codegen(Driver *dr) {
  if (!dr->out)
    dr->out = arena_printf(&dr->arena, "out/%s", mangle_dir(&dr->arena, dr->graph.name));
  CodegenOptions co = {dr->out,           dr->cfg.cmdline, dr->cfg.model,
                       dr->cfg.target,    dr->build,       dr->cfg.march_native,
                       dr->cfg.cuda_arch, dr->profile,     dr->cfg.no_fuse};
  for (int r = 0; r < dr->prog.nranks; r++)
    if (!codegen_c(&dr->prog, r, &co, &dr->diag)) return false;
  if (!codegen_launch(&dr->prog, &co, &dr->diag)) return false;
  return run_build_files(dr, &co);
}

static bool check_ir(Driver *dr) {
  return graph_verify(&dr->graph, &dr->diag);
}

static bool check_partition(Driver *dr) {
  return partition_check(&dr->prog, &dr->diag);
}

static bool check_comm(Driver *dr) {
  return comm_check(&dr->prog, &dr->diag);
}

// Fewer microbatches M than ranks S: a warning that names the bubble it implies, the ranks'
// idle share of each step. For gpipe and 1f1b it is (S - 1) / (M + S - 1) (each rank waits S - 1
// slots of F + B before its first forward and after its last backward); for the other schedules
// the lock-step simulation's at unit costs, as plan prints it. With --replicas D, M is each
// replica's (the step's M / D). The uneven form (each stage's M / D_s) is left out.
static void warn_bubble(Driver *dr) {
  const Program *p = &dr->prog;
  const Config *c = &dr->cfg;
  int S = p->nranks, M = p->M, D = c->replicas > 1 ? c->replicas : 1;
  if (M >= S || c->uneven) return;
  Arena *a = &dr->arena;
  const char *ranks = c->given[O_STAGES] && !c->sched_csv ? arena_printf(a, "--stages %d", S)
                                                          : arena_printf(a, "%d ranks", S);
  const char *mbs =
      arena_printf(a, "%d microbatch%s%s", M, M == 1 ? "" : "es", D > 1 ? " per replica" : "");
  bool closed = !c->sched_csv && (c->sched == SCHED_GPIPE || c->sched == SCHED_1F1B);
  if (closed)
    diag_warning(&dr->diag, (Loc){0, 0},
                 "%s with %s: the ranks idle (S - 1) / (M + S - 1) = %d / %d = %.1f%% of every "
                 "step (the pipeline bubble); use --microbatches >= %d (docs/pipeline.md)",
                 ranks, mbs, S - 1, M + S - 1, 100.0 * (S - 1) / (M + S - 1), S * D);
  else
    diag_warning(&dr->diag, (Loc){0, 0},
                 "%s with %s: the ranks idle %.1f%% of every step (the pipeline bubble of %s at "
                 "unit costs, as plan predicts it); use --microbatches >= %d (docs/pipeline.md)",
                 ranks, mbs, dr->stats.bubble * 100,
                 c->sched_csv ? c->sched_csv : sched_name(c->sched), S * D);
}

// S > 1: the lock-step simulation too (schedule_verify), which keeps its prediction for plan.
static bool check_schedule(Driver *dr) {
  if (dr->prog.nranks <= 1) return schedule_check(&dr->prog, &dr->diag);
  if (schedule_verify(&dr->prog, NULL, &dr->stats, &dr->arena, &dr->diag)) {
    warn_bubble(dr);
    return true;
  }
  if (dr->cfg.sched_csv) diag_note(&dr->diag, "in the schedule %s", dr->cfg.sched_csv);
  return false;
}

static void dump_ir(Driver *dr, FILE *out) {
  graph_print(&dr->graph, out);
}

static void dump_training(Driver *dr, FILE *out) {
  training_print(&dr->graph, &dr->tc, out);
}

static void dump_partition(Driver *dr, FILE *out) {
  partition_print(&dr->prog, out);
}

static void dump_comm(Driver *dr, FILE *out) {
  comm_print(&dr->prog, out);
}

static void dump_schedule(Driver *dr, FILE *out) {
  schedule_print(&dr->prog, out);
}

// S = 1: the one plan as always; S > 1: a heading and one line per rank.
void dump_plan(Driver *dr, FILE *out) {
  const Program *p = &dr->prog;
  if (p->nranks == 1) {
    plan_print(&dr->graph, &dr->tc, &p->ranks[0].plan, out);
    return;
  }
  const TrainConfig *tc = &dr->tc;
  fprintf(out, "memory plans of %s: batch %lld = %lld microbatch%s of %lld, %s%s, %d ranks\n",
          dr->graph.name, (long long)tc->batch, (long long)tc->microbatches,
          tc->microbatches == 1 ? "" : "es", (long long)tc->mb_size,
          tc->opt == OPT_ADAMW ? "adamw" : "sgd", precision_note(tc->precision), p->nranks);
  for (int r = 0; r < p->nranks; r++) plan_print_rank(p, r, out);
}

// The generated programs' extension: "c", or "cu" for the cuda target.
const char *src_ext(const Driver *dr) {
  return strcmp(dr->cfg.target, "cuda") == 0 ? "cu" : "c";
}

// The generated programs, as written: rank0.c, rank1.c, ... one after the other.
static void dump_codegen(Driver *dr, FILE *out) {
  for (int r = 0; r < dr->prog.nranks; r++) {
    const char *path = arena_printf(&dr->arena, "%s/rank%d.%s", dr->out, r, src_ext(dr));
    FILE *f = fopen(path, "rb");
    if (!f) {
      diag_error(&dr->diag, (Loc){0, 0}, "cannot read '%s': %s", path, strerror(errno));
      return;
    }
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, out);
    fclose(f);
  }
}

// One row per pass, in the order they run. A pass reads what the rows above it produced.
typedef struct Pass {
  const char *name;                    // in --dump-after, --stop-after and --time-passes
  bool (*run)(Driver *dr);             // runs the pass; false when it reported an error
  bool (*check)(Driver *dr);           // checks its result (NULL: nothing of its own to check)
  void (*dump)(Driver *dr, FILE *out); // prints its result (--dump-after=NAME)
  const char *what;                    // what the dump shows (--help)
} Pass;

static const Pass passes[] = {
    {"expand", run_expand, check_ir, dump_ir, "the IR of the model, before shapes"},
    {"shape", run_shape, check_ir, dump_ir, "the IR with shapes (= pipec print)"},
    {"training", run_training, NULL, dump_training, "the training configuration, --set applied"},
    {"fuse", run_fuse, check_ir, dump_ir, "the IR with SwiGLU's silu * mul fused (silu_mul)"},
    {"autodiff", run_autodiff, check_ir, dump_ir, "the IR with the backward and step-end nodes"},
    {"partition", run_partition, check_partition, dump_partition,
     "the stage of every node: the partition table (--stages)"},
    {"comm", run_comm, check_comm, dump_comm,
     "the channels between stages and the exchange groups of shared parameters"},
    {"schedule", run_schedule, check_schedule, dump_schedule, "each rank's action list"},
    {"memplan", run_memplan, NULL, dump_plan, "the memory plan (= pipec plan)"},
    {"codegen", run_codegen, NULL, dump_codegen,
     "the generated programs (OUT/rank0.c, OUT/rank1.c, ...)"},
};
enum { NPASSES = sizeof passes / sizeof passes[0] };
_Static_assert((int)NPASSES <= (int)MAX_PASSES, "Driver.dump has a flag per pass");

int find_pass(const char *name, size_t len) {
  for (int i = 0; i < NPASSES; i++)
    if (strlen(passes[i].name) == len && strncmp(passes[i].name, name, len) == 0) return i;
  return -1;
}

// "expand, shape, ..." (for messages).
const char *pass_list(Arena *a) {
  char *s = arena_strdup(a, "");
  for (int i = 0; i < NPASSES; i++) s = arena_printf(a, "%s%s%s", s, i ? ", " : "", passes[i].name);
  return s;
}

// Runs the rows 0..dr->last with their checkers, dumps and timings; false at the first error.
bool run_passes(Driver *dr) {
  for (int i = 0; i <= dr->last; i++) {
    const Pass *p = &passes[i];
    dr->diag.pass = p->name; // the rule of its messages in the machine-readable formats
    double t0 = clock_seconds();
    bool ok = p->run(dr) && !dr->diag.errors;
    if (dr->cfg.time_passes)
      fprintf(stderr, "pipec: pass %-8s %9.3f ms\n", p->name, (clock_seconds() - t0) * 1e3);
    if (!ok) return false;
    if (p->check) {
      t0 = clock_seconds();
      ok = p->check(dr) && !dr->diag.errors;
      if (dr->cfg.time_passes)
        fprintf(stderr, "pipec: check %-8s %8.3f ms\n", p->name, (clock_seconds() - t0) * 1e3);
      if (!ok) return false;
    }
    if (dr->dump[i]) {
      p->dump(dr, stdout);
      if (dr->diag.errors) return false;
    }
  }
  return true;
}
// --help's list of the passes, in order.
void passes_help(FILE *f) {
  for (int i = 0; i < NPASSES; i++) fprintf(f, "  %-10s %s\n", passes[i].name, passes[i].what);
}

// Parses --dump-after's list and --stop-after into dr->dump and dr->last (from the command's
// default last pass); NULL or a usage error's message.
const char *select_passes(Driver *dr) {
  const Command *cmd = dr->cmd;
  Arena *a = &dr->arena;
  dr->last = find_pass(cmd->last, strlen(cmd->last));
  for (const char *p = dr->cfg.dump_after; p && *p;) {
    size_t n = strcspn(p, ",");
    int i = find_pass(p, n);
    if (i < 0)
      return arena_printf(a, "--dump-after: unknown pass '%.*s' (passes: %s)", (int)n, p,
                          pass_list(a));
    dr->dump[i] = true;
    if (i > dr->last) dr->last = i;
    p += n + (p[n] == ',');
  }
  if (dr->cfg.dump_after && !*dr->cfg.dump_after)
    return arena_printf(a, "--dump-after: no pass named (passes: %s)", pass_list(a));
  if (dr->cfg.stop_after) {
    int stop = find_pass(dr->cfg.stop_after, strlen(dr->cfg.stop_after));
    if (stop < 0)
      return arena_printf(a, "--stop-after: unknown pass '%s' (passes: %s)", dr->cfg.stop_after,
                          pass_list(a));
    for (int i = stop + 1; i < NPASSES; i++)
      if (dr->dump[i])
        return arena_printf(a, "--dump-after=%s: the pass comes after --stop-after=%s",
                            passes[i].name, passes[stop].name);
    dr->last = stop;
  }
  return NULL;
}

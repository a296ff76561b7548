// pipec driver: the command line, then the passes as a table (QBE's main.c is the model). Each
// row is a pass with its name, its run, its checker (the IR verifier after every pass that
// changes the IR) and its dump (--dump-after); the driver runs the rows in order up to the last
// one that the command, --dump-after and --stop-after ask for, checks each one's result, times
// it (--time-passes) and stops at the first that reports an error. Adding a pass is adding a row.
//
// Exit status: 0 ok, 1 error in the model (or a run), 2 usage error.
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../codegen/codegen.h"
#include "../ir/ops.h"
#include "../compiler/costs.h"
#include "../compiler/diag_out.h"
#include "../compiler/files.h"
#include "../compiler/passes.h"
#include "../compiler/pipeline.h"
#include "../compiler/plan_out.h"
#include "../compiler/pt2_source.h"
#include "../compiler/sched_csv.h"
#include "../compiler/topology.h"
#include "../compiler/trace_in.h"
#include "../compiler/weights.h"

#ifndef PIPEC_VERSION
#define PIPEC_VERSION "0.0.0"
#endif

enum { EXIT_MODEL = 1, EXIT_USAGE = 2, MAX_PASSES = 16 };
// getopt values of the long options without a letter.
enum {
  OPT_DIAG_FORMAT = 256,
  OPT_NO_BUILD,
  OPT_DEPFILE,
  OPT_SVG,
  OPT_JSON,
  OPT_EXPORT_CSV,
  OPT_COSTS
};
enum { OPT_TOPOLOGY = 320 }; // --topology (its own line: other options extend the one above)
enum { OPT_TRACE = 400, OPT_TRACE_STEP }; // plan --trace FILE [--trace-step N] (trace_in.c)
enum { OPT_RECOMPUTE = 480 };             // --recompute all|none|STAGES (compiler/recompute.c)
enum { OPT_REPLICAS = 500 };              // --replicas D (stage replication, docs/pipeline.md)
enum { OPT_PRECISION = 520 };             // --precision f32|bf16|fp16 (compiler/precision.c)
enum { OPT_NO_FUSE = 540 };               // --no-fuse (no fuse pass rewrite, no fused epilogues)
enum {
  OPT_TRAINING = 560,
  OPT_WEIGHTS,
  OPT_DATA_FILE
}; // a .pt2's --training F, --weights F,
   // --data-file NAME=PATH (docs/import.md)

typedef struct Driver {
  const char *command;       // check, print, ...
  const char *model;         // model file path
  const char *training_file; // --training F: a .pt2's training section (docs/import.md)
  const char *weights_file;  // import --weights F: where the archive's weights go
  const char **data_files;   // --data-file NAME=PATH (a .pt2's data section)
  int ndata_files;           // entries in data_files
  const char *dump_after;    // --dump-after's list of pass names (comma-separated) or NULL
  const char *stop_after;    // --stop-after's pass name or NULL
  bool dump[MAX_PASSES];     // per pass row: print its result after it ran
  int last;                  // the last pass row to run
  bool time_passes;          // print pass timings to stderr
  DiagFormat diag_format;    // --diagnostics-format (text, json, sarif)
  const char **defines;      // -D NAME=VALUE
  int ndefines;              // entries in defines
  const char **sets;         // --set KEY=VALUE (training overrides)
  int nsets;                 // entries in sets
  const char *out_dir;       // -o DIR
  const char *out;           // where codegen writes (out_dir or out/MODEL-NAME)
  const char *target;        // --target
  const char *cuda_arch;     // --cuda-arch LIST (cuda target; NULL: CMake's PIPEC_CUDA_ARCHS)
  bool march_native;         // --march=native: build the program for this machine
  bool no_fuse;              // --no-fuse: one kernel call per node of the model (fuse.c, segment.c)
  bool build;                // codegen also builds OUT/bin/train (compile, run)
  bool no_build;          // --no-build: compile writes the sources and a manifest, builds nothing
  const char *depfile;    // --depfile FILE: a Make-style dependency file (compile, run) or NULL
  char *cmdline;          // the command line as typed (getopt permutes argv)
  char **prog_args;       // run: arguments after "--" for the program
  int nprog_args;         // count
  Diag diag;              // diagnostics for the model file
  Arena arena;            // compiler memory
  Source src;             // the model file, parsed (source_load)
  Graph graph;            // the IR
  TrainConfig tc;         // training configuration (training pass)
  PartitionOptions po;    // --stages, --split, --flops-rate, --bandwidth, --mem-cap
  Program prog;           // per-rank action lists (schedule pass) and each rank's memory plan
                          // (memplan pass: prog.ranks[r].plan)
  SchedKind sched;        // --schedule (S > 1; default 1f1b)
  int virt;               // --virtual V: stages per rank (interleaved, zb-v; partition cuts S x V)
  int replicas;           // --replicas D: S x D ranks, each stage on D replicas (0: not given)
  const char *rep_list;   // --replicas D0,D1,..: per-stage counts as given (NULL: one count)
  int *rep_counts;        // those counts, one per stage (PipeDream's uneven form)
  int nrep_counts;        // count
  bool uneven;            // those counts differ: PipeDream's uneven form (compiler/uneven.c)
  DType precision;        // --precision: DT_F32 (default), DT_BF16, DT_F16 (precision.c)
  bool virt_given;        // --virtual was on the command line (zb-v implies V = 2 without it)
  SchedStats stats;       // S > 1: the lock-step simulation's prediction (schedule's checker)
  const char *svg;        // plan --svg FILE: the schedule's picture (compiler/plan_out.c) or NULL
  const char *json;       // plan --json FILE: the plan as data or NULL
  const char *sched_csv;  // --schedule FILE.csv: a custom schedule (compiler/sched_csv.c) or NULL
  CsvSchedule csv;        // that schedule, read before the passes (its rows give S and V)
  const char *export_csv; // plan --export-csv FILE: the schedule in that CSV form, or NULL
  const char *topology;   // --topology FILE.xml: the machine's NCCL topology or NULL
  Topology topo;          // that file read (compiler/topology.c)
  int *gpu_of_rank;       // per rank its GPU (index into topo.gpu): the placement
  const char *trace;      // plan --trace FILE: --svg draws this --trace file's times, or NULL
  int trace_step;         // plan --trace-step N: its step to draw (-1: the first traced)
  const char *costs_path; // --costs FILE: measured costs (costs.h) or NULL
  Costs costs;            // the costs file, read before the passes
  Diag costs_diag;        // its diagnostics (FILE:LINE:COL of the costs file)
  bool profile;           // the profile command: codegen with timing hooks, into a temporary dir
  const char *prof_out;   // profile: the costs file written (-o; default costs.json)
} Driver;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// ---------------------------------------------------------------------------------------------
// The passes

static bool run_expand(Driver *dr) {
  ExpandOptions eo = {dr->defines, dr->ndefines};
  return pass_expand(&dr->src, &dr->graph, &eo, &dr->diag) &&
         weights_check(&dr->src, &dr->graph, &dr->diag);
}

static bool run_shape(Driver *dr) {
  return pass_shape(&dr->graph, &dr->diag);
}

static bool run_training(Driver *dr) {
  return training_parse(&dr->src, &dr->graph, dr->sets, dr->nsets, &dr->tc, &dr->diag);
}

// --replicas D0,D1,..: one count per stage, each dividing M. Equal counts are the uniform form
// (--replicas 2,2 is --replicas 2); counts that differ are PipeDream's uneven form (uneven.c).
static bool check_rep_counts(Driver *dr) {
  int nv = dr->po.stages ? dr->po.stages : dr->po.nsplit ? dr->po.nsplit + 1 : 1;
  int S = nv / dr->virt; // the pipeline's ranks (the partition cuts S x V stages)
  const char *l = dr->rep_list;
  long long M = dr->tc.microbatches;
  if (dr->nrep_counts != S) {
    diag_error(&dr->diag, (Loc){0, 0},
               "--replicas %s: %d per-stage replica counts for a pipeline of %d stage%s: give one "
               "count per stage (or one count D for every stage)",
               l, dr->nrep_counts, S, S == 1 ? "" : "s");
    return false;
  }
  for (int s = 0; s < S; s++) {
    int D = dr->rep_counts[s];
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
  return pass_fuse(&dr->graph, !dr->no_fuse && dr->precision == DT_F32, &dr->diag);
}

static bool run_autodiff(Driver *dr) {
  TrainConfig *tc = &dr->tc;
  if (dr->rep_list && !check_rep_counts(dr)) return false;
  int D = dr->replicas > 1 ? dr->replicas : 1;
  if (tc->microbatches % D) {
    diag_error(&dr->diag, (Loc){0, 0},
               "--replicas %d: the microbatches M = %lld are not a multiple of the replicas D "
               "(each replica takes M / D of every step's microbatches)",
               D, (long long)tc->microbatches);
    return false;
  }
  if (!pass_autodiff(&dr->graph, (int)tc->microbatches, &dr->diag)) return false;
  tc->microbatches /= D, tc->batch /= D;
  training_accuracy(tc);         // once, for every S: whether evaluations count accuracy
  tc->precision = dr->precision; // the tensors stored in 16 bits, before anything is planned
  precision_mark(&dr->graph, dr->precision, tc->accuracy ? accuracy_logits(tc->accuracy) : NULL);
  return true;
}

// With --virtual V the partition cuts S x V stages; stage v runs on the schedule's rank for it
// (sched_rank_of, as sched_build sets it again), so the partition table names the right ranks.
static bool run_partition(Driver *dr) {
  if (dr->costs_path) { // the measured costs, bound to this graph's nodes
    if (!costs_bind(&dr->costs, &dr->graph, &dr->tc, &dr->costs_diag)) return false;
    dr->po.costs = &dr->costs;
  }
  if (!pass_partition(&dr->graph, &dr->tc, &dr->po, &dr->prog, &dr->diag)) {
    if (dr->virt > 1 && !dr->virt_given) // zb-v: V = 2 implied
      diag_note(&dr->diag,
                "with --schedule zb-v (two stages per rank) the partition cuts S x 2 = "
                "%d stages",
                dr->po.stages);
    else if (dr->virt > 1) // its message counts the S x V stages it was asked for
      diag_note(&dr->diag, "with --virtual %d the partition cuts S x V = %d stages", dr->virt,
                dr->po.stages);
    return false;
  }
  Program *p = &dr->prog;
  if (dr->virt > 1 && p->nv % dr->virt == 0)
    for (int v = 0; v < p->nv; v++)
      p->vs[v].rank = sched_rank_of(dr->sched, p->nv / dr->virt, dr->virt, v);
  bool *rcf; // --recompute, for the partition table's estimate (out of range: run_schedule)
  int bad;
  if (recompute_flags(dr->po.recomp, dr->po.nrecomp, p->nv, &dr->arena, &rcf, &bad))
    for (int v = 0; v < p->nv; v++) p->vs[v].recompute = rcf && rcf[v];
  return true;
}

static bool run_comm(Driver *dr) {
  return pass_comm(&dr->graph, &dr->prog, &dr->diag);
}

// S = 1: the one-stage program exactly as always (--schedule does not apply). S > 1: the chosen
// schedule over the partition's S x V stages (placed by sched_rank_of) and the comm pass's
// channels.
static bool run_schedule(Driver *dr) {
  // --recompute: the stages that rerun their forward (at S = 1 the schedule pass builds the one).
  bool *rc = NULL;
  int bad = -1;
  int nv = dr->prog.nv > 0 ? dr->prog.nv : 1;
  if (!recompute_flags(dr->po.recomp, dr->po.nrecomp, nv, &dr->arena, &rc, &bad)) {
    diag_error(&dr->diag, (Loc){0, 0},
               "--recompute %d: no such stage (the pipeline has %d stage%s: 0 to %d)", bad, nv,
               nv == 1 ? "" : "s", nv - 1);
    return false;
  }
  if (dr->prog.nv == 1) {
    if (!pass_schedule(&dr->graph, &dr->tc, &dr->prog, &dr->diag)) return false;
    recompute_apply(&dr->prog, rc, &dr->arena);
    return true;
  }
  recompute_apply(&dr->prog, rc, &dr->arena);    // before the lowering: those stages stay fused
  if (dr->virt > 1 && dr->prog.nv <= dr->virt) { // --split made S x V stages with S = 1
    if (dr->sched == SCHED_ZBV)
      diag_error(&dr->diag, (Loc){0, 0},
                 "--schedule zb-v needs --stages >= 2: it places two stages on each of several "
                 "ranks in a V, and --split made %d stages, one rank's (name 2S - 1 cuts)",
                 dr->prog.nv);
    else
      diag_error(&dr->diag, (Loc){0, 0},
                 "--virtual %d needs --stages >= 2: interleaving runs the stages of several ranks",
                 dr->virt);
    return false;
  }
  if (dr->prog.nv % dr->virt) {
    diag_error(&dr->diag, (Loc){0, 0},
               "--virtual %d: the partition has %d stages, not a multiple of %d (with --split, "
               "name S x V - 1 cuts)",
               dr->virt, dr->prog.nv, dr->virt);
    return false;
  }
  if (dr->sched_csv) { // the CSV's rows, checked against M, lowered like a built-in's
    Action **comp;
    int *ncomp;
    if (!sched_csv_orders(&dr->csv, dr->prog.M, &comp, &ncomp, &dr->arena, &dr->diag)) return false;
    if (!sched_lower(&dr->prog, dr->csv.S, dr->csv.V, comp, ncomp, dr->csv.split,
                     dr->csv.stage_rank, &dr->arena, &dr->diag)) {
      diag_note(&dr->diag, "in the schedule %s", dr->sched_csv);
      return false;
    }
    return true;
  }
  return sched_build(&dr->prog, dr->sched, dr->prog.nv / dr->virt, dr->virt, &dr->arena, &dr->diag);
}

// One memory plan per rank. The plan is the target's: its buffers hold what the target
// computes in. plan_memory checks every rank's plan itself (plan_check, in every build). With
// --mem-cap, every rank's planned bytes (the sum of its regions) must fit under the cap: the
// partitioner chose its cut from an estimate (partition.c), this is the real plan.
static bool run_memplan(Driver *dr) {
  dr->prog.replicas = dr->replicas > 1 ? dr->replicas : 1;  // the schedule pass made prog anew
  dr->prog.stage_reps = dr->uneven ? dr->rep_counts : NULL; // M stays the step's (uneven.c)
  if (dr->uneven && !uneven_check(&dr->prog, dr->rep_list, &dr->diag)) return false;
  if (!codegen_check_target(&dr->graph, dr->target, &dr->diag)) return false;
  if (!plan_memory(&dr->prog, &dr->diag)) return false;
  bool fits = true;
  for (int r = 0; r < dr->prog.nranks; r++) {
    const Plan *pl = &dr->prog.ranks[r].plan;
    plan_warn_memory(pl, &dr->diag);
    int64_t total = 0; // fits: plan_memory checked the sum
    for (int k = 0; k < REG_COUNT; k++) total += pl->bytes[k];
    if (dr->po.mem_cap <= 0 || total <= dr->po.mem_cap) continue;
    diag_error(&dr->diag, (Loc){0, 0},
               "--mem-cap %lld: rank %d's memory plan needs %lld bytes (params %lld, grads %lld, "
               "optimizer %lld, activations %lld): use more --stages, a schedule that keeps fewer "
               "microbatches in flight (1f1b or zb-h1 rather than gpipe), or a larger cap",
               (long long)dr->po.mem_cap, r, (long long)total, (long long)pl->bytes[REG_PARAMS],
               (long long)pl->bytes[REG_GRADS], (long long)pl->bytes[REG_OPT],
               (long long)pl->bytes[REG_ACTS]);
    fits = false;
  }
  return fits;
}

// The model name as a directory name: letters, digits, '-', '_', '.'.
static const char *mangle_dir(Arena *a, const char *name) {
  char *s = arena_strdup(a, *name ? name : "model");
  for (char *p = s; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') *p = '_';
  if (s[0] == '.') s[0] = '_';
  return s;
}

// The files for build systems (docs/build-integration.md): --no-build's manifest, then the
// --depfile (last: it lists what was written).
static bool run_build_files(Driver *dr, const CodegenOptions *co) {
  if (dr->no_build && !codegen_manifest(&dr->prog, co, &dr->diag)) return false;
  return !dr->depfile || codegen_depfile(&dr->prog, co, dr->depfile, &dr->diag);
}

static bool run_codegen(Driver *dr) {
  if (!dr->out)
    dr->out = arena_printf(&dr->arena, "out/%s", mangle_dir(&dr->arena, dr->graph.name));
  CodegenOptions co = {dr->out,          dr->cmdline,   dr->model,   dr->target, dr->build,
                       dr->march_native, dr->cuda_arch, dr->profile, dr->no_fuse};
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

// S > 1: the lock-step simulation too (schedule_verify), which keeps its prediction for plan.
static bool check_schedule(Driver *dr) {
  if (dr->prog.nranks <= 1) return schedule_check(&dr->prog, &dr->diag);
  if (schedule_verify(&dr->prog, NULL, &dr->stats, &dr->arena, &dr->diag)) return true;
  if (dr->sched_csv) diag_note(&dr->diag, "in the schedule %s", dr->sched_csv);
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
static void dump_plan(Driver *dr, FILE *out) {
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
static const char *src_ext(const Driver *dr) {
  return strcmp(dr->target, "cuda") == 0 ? "cu" : "c";
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

static int find_pass(const char *name, size_t len) {
  for (int i = 0; i < NPASSES; i++)
    if (strlen(passes[i].name) == len && strncmp(passes[i].name, name, len) == 0) return i;
  return -1;
}

// "expand, shape, ..." (for messages).
static const char *pass_list(Arena *a) {
  char *s = arena_strdup(a, "");
  for (int i = 0; i < NPASSES; i++) s = arena_printf(a, "%s%s%s", s, i ? ", " : "", passes[i].name);
  return s;
}

// Runs the rows 0..dr->last with their checkers, dumps and timings; false at the first error.
static bool run_passes(Driver *dr) {
  for (int i = 0; i <= dr->last; i++) {
    const Pass *p = &passes[i];
    dr->diag.pass = p->name; // the rule of its messages in the machine-readable formats
    double t0 = now();
    bool ok = p->run(dr) && !dr->diag.errors;
    if (dr->time_passes)
      fprintf(stderr, "pipec: pass %-8s %9.3f ms\n", p->name, (now() - t0) * 1e3);
    if (!ok) return false;
    if (p->check) {
      t0 = now();
      ok = p->check(dr) && !dr->diag.errors;
      if (dr->time_passes)
        fprintf(stderr, "pipec: check %-8s %8.3f ms\n", p->name, (now() - t0) * 1e3);
      if (!ok) return false;
    }
    if (dr->dump[i]) {
      p->dump(dr, stdout);
      if (dr->diag.errors) return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Command line

static void usage(FILE *f) {
  fputs(
      "Usage: pipec COMMAND [OPTIONS] MODEL.json|MODEL.pt2\n"
      "\n"
      "pipec compiles a model written as a JSON graph, or exported by torch.export (.pt2), into\n"
      "pipeline-parallel training programs.\n"
      "\n"
      "Commands:\n"
      "  check MODEL     check the model and print a summary (parameters, FLOPs, memory)\n"
      "  print MODEL     print the IR of the model\n"
      "  plan MODEL      print the static memory plan (bytes per region)\n"
      "  compile MODEL   generate the training program and build it into OUT/bin/train\n"
      "                  (--stages S > 1: one program per rank, OUT/bin/rank0 .., run by\n"
      "                  OUT/launch.sh [PROGRAM-OPTIONS] under mpirun)\n"
      "  run MODEL [-- PROGRAM-OPTIONS]   compile, build and run it (pass --help after -- for\n"
      "                  the program's own options: --steps, --lr, --data, --init, --save, ...)\n"
      "  profile MODEL --stages S [-o COSTS] [-- PROGRAM-OPTIONS]\n"
      "                  build the pipeline with timing hooks in a temporary directory\n"
      "                  (under $TMPDIR), run it (20 steps unless -- --steps N) and write\n"
      "                  the measured F, B and W seconds per unit, link latency and\n"
      "                  bandwidth and optimizer rate to COSTS (default costs.json), for\n"
      "                  --costs (docs/pipeline.md)\n"
      "  import MODEL.pt2 -o MODEL.json [--weights F.safetensors]\n"
      "                  write a torch.export archive's graph as pipec's JSON and its weights\n"
      "                  as safetensors named in the JSON (docs/import.md)\n"
      "\n"
      "Options:\n"
      "  -D, --define NAME=VALUE  override the model's dims entry NAME (integer or expression)\n"
      "      --dump-after=PASS[,PASS...]\n"
      "                           print the result of each PASS after it ran (the passes up\n"
      "                           to the last one named run; see Passes below)\n"
      "      --stop-after=PASS    run no pass after PASS; a command prints its output only if\n"
      "                           its passes ran (check: shape, plan: memplan, compile and\n"
      "                           run: codegen; print: the IR after the last pass run)\n"
      "  -o, --output DIR         where the codegen pass writes the program (compile, run,\n"
      "                           --dump-after=codegen; default out/MODEL-NAME; created with\n"
      "                           missing parents)\n"
      "      --no-build           compile: write the sources, launch.sh and a manifest\n"
      "                           (OUT/pipec-manifest.json: what each rank links) and build\n"
      "                           nothing (for build systems; docs/build-integration.md)\n"
      "      --depfile FILE       compile, run: also write FILE, a Make-style dependency file\n"
      "                           (the files written, depending on the model file)\n"
      "      --svg FILE           plan at S > 1: draw the schedule (ranks x predicted time)\n"
      "      --json FILE          plan at S > 1: the plan as JSON (docs/pipeline.md)\n"
      "      --export-csv FILE    plan at S > 1: write the schedule in that CSV form (for\n"
      "                           --schedule FILE.csv)\n"
      "      --trace FILE         plan --svg: draw the times of a run's --trace FILE instead\n"
      "      --trace-step N       ... of its step N (default: the first traced)\n"
      "      --target TARGET      code generation target: cpu (default), cuda (one .cu\n"
      "                           program per rank built with nvcc; docs/cuda.md)\n"
      "      --cuda-arch LIST     cuda: GPU compute capabilities of the fat binary (default\n"
      "                           80,90)\n"
      "      --comm mpi           the transport of a pipeline's messages (S > 1): mpi\n"
      "                           (default; on the cuda target host-staged)\n"
      "      --march=native       build the program for this machine's CPU (faster; the same\n"
      "                           numbers; may not run on another machine). Default: portable\n"
      "                           x86-64\n"
      "      --no-fuse            one kernel call per node: no fused epilogues (a gelu in the\n"
      "                           GEMM of the linear before it, its backward in the GEMM of\n"
      "                           its dy, a residual add in the layernorm after it), no\n"
      "                           silu_mul for SwiGLU's silu * mul (the fuse pass); the same\n"
      "                           numbers, for A/B runs (docs/training.md)\n"
      "      --training FILE      a .pt2's training section (the model format's \"training\")\n"
      "      --data-file NAME=PATH\n"
      "                           a .pt2's data: the .npy file of input NAME (repeatable)\n"
      "      --weights FILE       import: where the archive's weights go (safetensors)\n"
      "      --set KEY=VALUE      override a training setting (steps=100, optimizer.lr=3e-4, ...)\n"
      "      --batch N            = --set batch=N (rows per step)\n"
      "      --microbatches M     = --set microbatches=M\n"
      "      --steps N            = --set steps=N\n"
      "      --stages S           cut the model into S pipeline stages, one rank each\n"
      "                           (default 1; docs/pipeline.md)\n"
      "      --replicas D         each stage on D replicas (hybrid data parallel): S x D ranks,\n"
      "                           replica d takes microbatches d*M/D .. (d+1)*M/D-1 (cpu);\n"
      "                           D0,D1,.. (one count per stage; PipeDream's uneven form):\n"
      "                           stage s on D_s ranks, its replica r takes the m with\n"
      "                           m mod D_s = r\n"
      "      --precision P        f32 (default), bf16 or fp16: parameters, activations and\n"
      "                           messages stored in 16 bits, computed in f32, f32 master\n"
      "                           weights; fp16 with dynamic loss scaling (cpu; docs/training.md)\n"
      "      --schedule X         pipeline schedule: gpipe, 1f1b (default), interleaved, zb-h1,\n"
      "                           zb-v (two stages per rank in a V), or FILE.csv: a custom one,\n"
      "                           one row of compute actions (0F0, 0B0, 1I0, 1W0) per rank,\n"
      "                           torch.distributed.pipelining's CSV form; its rows give S and V\n"
      "                           (docs/pipeline.md)\n"
      "      --virtual V          interleaved: V stages per rank (the partition cuts S x V);\n"
      "                           zb-v: 2, implied\n"
      "      --split NAME[,NAME...]\n"
      "                           cut before these nodes or block instances (transformer.h.2)\n"
      "      --flops-rate GFLOPS  one rank's compute rate, GFLOP/s (default 50): the automatic\n"
      "                           partitioner's cost model and plan's predicted step time\n"
      "      --bandwidth GBS      the transfer rate between two ranks, GB/s (default 10), the\n"
      "                           same two uses\n"
      "      --topology FILE.xml  the machine's NCCL topology (NCCL_TOPO_DUMP_FILE's format): one\n"
      "                           GPU per rank, placed so consecutive stages get the fastest\n"
      "                           links, whose bandwidths then replace --bandwidth\n"
      "      --costs FILE         measured costs (pipec profile's file): the automatic\n"
      "                           partitioner and plan's predicted step time use them\n"
      "                           instead of --flops-rate and --bandwidth\n"
      "      --mem-cap BYTES      memory cap per rank: the partitioner's estimate, then every\n"
      "                           rank's memory plan (plan, compile, run; default none)\n"
      "      --recompute all|none|STAGES\n"
      "                           activation recomputation: these stages (indices, 0,2) keep\n"
      "                           only their boundary tensors per microbatch and rerun their\n"
      "                           forward before the backward (B and W then stay fused); the\n"
      "                           same bits, one more forward per microbatch (default none)\n"
      "      --time-passes        print the time each pass and its checker took to stderr\n"
      "      --diagnostics-format=FORMAT\n"
      "                           how errors and warnings about the model are written to\n"
      "                           stderr: text (default), json (an array of records) or sarif\n"
      "                           (a SARIF 2.1.0 log); docs/diagnostics.md\n"
      "      --list-ops           list the ops of the registry and exit\n"
      "  -h, --help               show this help and exit\n"
      "  -V, --version            show the version, the model format it reads and its targets\n"
      "\n"
      "Passes, in order (what --dump-after prints):\n",
      f);
  for (int i = 0; i < NPASSES; i++) fprintf(f, "  %-10s %s\n", passes[i].name, passes[i].what);
  fputs("\n"
        "Exit status: 0 ok, 1 error in the model, 2 usage error.\n"
        "Model format: docs/model-format.md. Ops: docs/ops.md.\n",
        f);
}

// --cuda-arch: numbers separated by single commas (each becomes -gencode arch=compute_X,code=sm_X).
static bool arch_list_ok(const char *s) {
  bool digit = false; // the current number has a digit
  for (; *s; s++) {
    if (isdigit((unsigned char)*s))
      digit = true;
    else if (*s == ',' && digit)
      digit = false;
    else
      return false;
  }
  return digit;
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// The command line asks for a pipeline (--stages S > 1, or --split).
static bool multi_given(const Driver *dr) {
  return dr->po.stages > 1 || dr->po.nsplit;
}
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "pipec: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nTry 'pipec --help' for more information.\n");
  va_end(ap);
  return EXIT_USAGE;
}

// Thousands separators: 1234567 -> "1,234,567".
static const char *group(char *buf, size_t cap, double v) {
  char raw[64];
  snprintf(raw, sizeof raw, "%.0f", v);
  size_t n = strlen(raw), o = 0;
  for (size_t i = 0; i < n && o + 2 < cap; i++) {
    if (i && (n - i) % 3 == 0) buf[o++] = ',';
    buf[o++] = raw[i];
  }
  buf[o] = 0;
  return buf;
}

static const char *human(char *buf, size_t cap, double v, const char *unit, bool binary) {
  static const char *const si[] = {"", "K", "M", "G", "T", "P"};
  double k = binary ? 1024 : 1000;
  int i = 0;
  while (v >= k && i < 5) v /= k, i++;
  snprintf(buf, cap, i ? "%.2f %s%s%s" : "%.0f %s%s%s", v, si[i], i && binary ? "i" : "", unit);
  return buf;
}

static void print_summary(const Graph *g) {
  double params = 0, pbytes = 0, flops = 0, acts = 0;
  int tied = 0, nparam = 0;
  for (int i = 0; i < g->nparams; i++) {
    const Tensor *t = g->params[i];
    if (t->tied_to) {
      tied++;
      continue;
    }
    nparam++;
    params += (double)shape_numel(&t->shape, 1);
    pbytes += (double)shape_numel(&t->shape, 1) * dtype_size(t->dtype);
  }
  int nfwd = g->nfwd ? g->nfwd : g->nnodes; // the forward graph (check --stages runs autodiff)
  for (int i = 0; i < nfwd; i++) {
    const Node *n = g->nodes[i];
    OpCost c = {0, 0};
    n->op->cost(n, 1, &c);
    flops += c.flops;
    for (int k = 0; k < n->nout; k++)
      acts += (double)shape_numel(&n->out[k]->shape, 1) * dtype_size(n->out[k]->dtype);
  }
  char a[64], b[64];
  printf("model        %s\n", g->name);
  printf("parameters   %s in %d tensors (%s)", group(a, sizeof a, params), nparam,
         human(b, sizeof b, pbytes, "B", true));
  if (tied) printf(", %d tied", tied);
  printf("\ninputs      ");
  for (int i = 0; i < g->ninputs; i++)
    printf(" %s %s%s%s", g->inputs[i]->name, dtype_name(g->inputs[i]->dtype),
           fmt_shape(g, &g->inputs[i]->shape), g->inputs[i]->is_target ? " (target)" : "");
  printf("\nnodes        %d\n", nfwd);
  printf("forward      %s per sample\n", human(a, sizeof a, flops, "FLOP", false));
  printf("activations  %s per sample\n", human(a, sizeof a, acts, "B", true));
}

// A decimal integer in [lo, hi] (the whole string).
static bool parse_count(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// The command line as typed, stamped into the generated sources: the arguments joined by spaces,
// each that a shell would split or expand in single quotes (a quote inside as '\''), so the line
// runs the same command again.
static char *join_args(Arena *a, int argc, char **argv) {
  size_t n = 1;
  for (int i = 0; i < argc; i++) n += 4 * strlen(argv[i]) + 3;
  char *s = arena_alloc(a, n), *p = s;
  for (int i = 0; i < argc; i++) {
    const char *w = argv[i];
    if (i) *p++ = ' ';
    bool plain = *w != 0;
    for (const char *c = w; *c && plain; c++)
      plain = isalnum((unsigned char)*c) || strchr("_@%+=:,./-", *c);
    if (plain) {
      p = stpcpy(p, w);
      continue;
    }
    *p++ = '\'';
    for (const char *c = w; *c; c++) p = *c == '\'' ? stpcpy(p, "'\\''") : (*p = *c, p + 1);
    *p++ = '\'';
  }
  *p = 0;
  return s;
}

// ---------------------------------------------------------------------------------------------
// Commands: what each runs, and prints once its passes ran

static int finish_check(Driver *dr) {
  print_summary(&dr->graph);
  return 0;
}

static int finish_print(Driver *dr) {
  if (!dr->dump_after) graph_print(&dr->graph, stdout); // else the dumps are the output
  return 0;
}

// The CSV schedule's S and V against --stages, --virtual and --split (when given), then made the
// partition's: S x V stages, V per rank.
static bool csv_agrees(Driver *dr) {
  const CsvSchedule *cs = &dr->csv;
  if (dr->po.stages && dr->po.stages != cs->S)
    return sched_csv_error(cs, &dr->diag, (Loc){0, 0},
                           "--stages %d, but the schedule has %d rows (one per rank): leave "
                           "--stages out or make them agree",
                           dr->po.stages, cs->S);
  if (dr->virt > 1 && dr->virt != cs->V)
    return sched_csv_error(cs, &dr->diag, (Loc){0, 0},
                           "--virtual %d, but the schedule runs %d stage%s per rank: leave "
                           "--virtual out or make them agree",
                           dr->virt, cs->V, cs->V == 1 ? "" : "s");
  if (dr->po.nsplit && dr->po.nsplit + 1 != cs->S * cs->V)
    return sched_csv_error(cs, &dr->diag, (Loc){0, 0},
                           "--split names %d cuts, but the schedule runs %d stages (S = %d ranks "
                           "x V = %d): name S x V - 1 = %d cuts",
                           dr->po.nsplit, cs->S * cs->V, cs->S, cs->V, cs->S * cs->V - 1);
  dr->virt = cs->V;
  dr->po.stages = cs->S * cs->V; // the partition cuts S x V stages
  // The memory estimate counts in flight as the built-in of its placement would (zb-v's V, or
  // the loop's): an exported built-in reads back to the same partition table.
  bool vshape = cs->V == 2;
  for (int v = 0; v < cs->S * cs->V; v++)
    vshape &= cs->stage_rank[v] == sched_rank_of(SCHED_ZBV, cs->S, 2, v);
  dr->po.est_sched = vshape ? SCHED_ZBV : SCHED_1F1B;
  return true;
}

// --schedule FILE.csv: reads the schedule (compiler/sched_csv.c) before the passes: its rows are
// the ranks S and its stages the S x V stages of the partition.
static bool load_schedule_csv(Driver *dr) {
  dr->diag.pass = "schedule"; // (the records' rule; the model's parse follows)
  bool ok = sched_csv_load(&dr->csv, dr->sched_csv, &dr->arena, &dr->diag) && csv_agrees(dr);
  dr->diag.pass = "parse";
  return ok;
}

// The schedule's name in plan's output: the built-in's, or the CSV file's as given.
static const char *sched_label(const Driver *dr) {
  return dr->sched_csv ? dr->sched_csv : sched_name(dr->sched);
}

// plan --export-csv FILE: the compute orders (a built-in's sched_order, zb-h1's B as I on every
// stage; a CSV schedule's rows as read) in torch's CSV form, so that --schedule FILE lowers to
// the same program.
static bool export_schedule_csv(Driver *dr) {
  const Program *p = &dr->prog;
  if (dr->sched_csv)
    return sched_csv_write(dr->export_csv, dr->csv.S, dr->csv.order, dr->csv.n, dr->csv.split,
                           &dr->diag);
  int S = p->nranks, V = p->nv / S, M = p->M;
  Action **order = ARENA_ARRAY(&dr->arena, Action *, S);
  int *n = ARENA_ARRAY(&dr->arena, int, S);
  bool *split = ARENA_ARRAY(&dr->arena, bool, p->nv);
  for (int v = 0; v < p->nv; v++) split[v] = dr->sched == SCHED_ZBH1 || dr->sched == SCHED_ZBV;
  for (int r = 0; r < S; r++) {
    order[r] = ARENA_ARRAY(&dr->arena, Action, 3 * (size_t)V * M + 1);
    if ((n[r] = sched_order(dr->sched, S, V, M, r, order[r], &dr->diag)) < 0) return false;
  }
  return sched_csv_write(dr->export_csv, S, order, n, split, &dr->diag);
}

// plan at S > 1: the partition table, the channels, the grid, the predicted bubble (unit
// costs), the predicted step time and bubble at the stage costs, the peak microbatches in flight
// per stage and each rank's memory plan (not with --stop-after=schedule).
static int finish_plan_pipeline(Driver *dr) {
  Program *p = &dr->prog;
  if (dr->topology) {
    topology_print(&dr->topo, dr->virt > 1, dr->gpu_of_rank, stdout);
    printf("\n");
  }
  partition_print(p, stdout);
  printf("\n");
  comm_print(p, stdout);
  printf("\nschedule %s: %d ranks, %d stage%s per rank, %d microbatch%s\n", sched_label(dr),
         p->nranks, dr->virt, dr->virt == 1 ? "" : "s", p->M, p->M == 1 ? "" : "es");
  fflush(stdout);
  if (!schedule_print_grid(p, stdout, &dr->diag)) return EXIT_MODEL;
  int nsplit = split_stages(p);
  if (p->split_bw) { // which stages zb-h1 splits (compiler/schedules.c, sched_build)
    printf("B and W split on %s", nsplit ? "" : "no stage");
    for (int v = 0; v < p->nv; v++)
      if (p->vs[v].split) printf("v%d ", v);
    int written_b = 0; // stages a CSV schedule writes with B (unsplit by its choice)
    for (int v = 0; v < p->nv && dr->sched_csv; v++) written_b += !dr->csv.split[v];
    if (written_b) { // the file's choice, then the split's own
      const char *sep = nsplit ? "(" : " (";
      for (int k = 0; k < 2; k++) {
        bool any = false;
        for (int v = 0; v < p->nv; v++)
          if (k ? dr->csv.split[v] && !p->vs[v].split : !dr->csv.split[v]) {
            printf("%s%sv%d", any ? " " : sep,
                   any ? ""
                   : k ? "fused, the split buys nothing: "
                       : "written with B: ",
                   v);
            any = true, sep = "; ";
          }
      }
      printf(")\n");
    } else
      printf("%s\n", nsplit == p->nv ? "(all)"
                     : nsplit        ? "(elsewhere B keeps the weight gradients: nothing is sent "
                                       "before W and no W is deferred, or none is compute-bound)"
                                     : " (B keeps the weight gradients: none is compute-bound, or "
                                       "the split would neither send earlier nor fill a bubble)");
  }
  printf("predicted bubble: %.1f%% of the ranks' time (unit costs F 1, B %s)\n",
         dr->stats.bubble * 100,
         nsplit == p->nv ? "1, W 1"
         : nsplit        ? "2; B 1, W 1 on the stages that split them"
                         : "2");
  if (!schedule_print_prediction(p, stdout, &dr->diag)) return EXIT_MODEL;
  printf("peak microbatches in flight:");
  for (int v = 0; v < p->nv; v++) printf(" v%d %d", v, dr->stats.peak[v]);
  printf("\n");
  if (p->ranks[0].plan.region) { // the memplan pass ran (not --stop-after=schedule)
    printf("\n");
    dump_plan(dr, stdout);
  }
  if (dr->svg || dr->json) { // the picture and the data, at the predicted times
    SchedStats st;
    if (!schedule_predict(p, &st, &dr->arena, &dr->diag)) return EXIT_MODEL;
    const char *name = sched_label(dr);
    if (dr->svg && dr->trace) { // the measured times of one step of a run, drawn alike
      int step;
      SchedStats mt;
      if (!trace_read_step(p, dr->trace, dr->trace_step, &mt, &step, &dr->arena, &dr->diag))
        return EXIT_MODEL;
      const char *b = strrchr(dr->trace, '/'),
                 *what = arena_printf(&dr->arena, "step %d of %s", step, b ? b + 1 : dr->trace);
      if (!plan_write_measured_svg(p, name, &mt, what, dr->svg, &dr->diag)) return EXIT_MODEL;
    } else if (dr->svg && !plan_write_svg(p, name, &st, dr->svg, &dr->diag)) {
      return EXIT_MODEL;
    }
    if (dr->json && !plan_write_json(p, name, &st, dr->json, &dr->diag)) return EXIT_MODEL;
  }
  if (dr->export_csv && !export_schedule_csv(dr)) return EXIT_MODEL;
  return 0;
}

// --replicas D: the line under the plan that says how the ranks' plans are replicated (the plan
// above it is one replica's: batch and M are per replica).
static void print_replicas(const Driver *dr) {
  const Program *P = &dr->prog;
  uneven_print(P, stdout); // the uneven form: its line and every replica's list
  if (P->replicas <= 1) return;
  printf("replicas: %d (each stage on %d ranks; %d ranks in all, rank d x %d + s is replica d's "
         "rank s); replica d runs microbatches d x %d .. d x %d + %d of the step's %d; each rank "
         "sums its gradients with its replicas' once per step, after its last backward, in "
         "replica order\n",
         P->replicas, P->replicas, P->nranks * P->replicas, P->nranks, P->M, P->M, P->M - 1,
         P->M * P->replicas);
}

static int finish_plan(Driver *dr) {
  int rc = 0;
  if (dr->prog.nranks > 1)
    rc = finish_plan_pipeline(dr);
  else
    plan_print(&dr->graph, &dr->tc, &dr->prog.ranks[0].plan, stdout);
  if (!rc) print_replicas(dr);
  return rc;
}

static int finish_compile(Driver *dr) {
  if (dr->diag.format != DIAG_TEXT) return 0; // stderr holds the diagnostics document only
  int S = dr->prog.nranks, D = dr->prog.replicas;
  int W = dr->prog.stage_reps ? uneven_world(&dr->prog, S, 0) : S * D; // the job's ranks
  if (dr->no_build) {
    fprintf(stderr,
            "pipec: wrote %s/rank0.%s%s, %s/launch.sh and %s/pipec-manifest.json (%d rank%s, not "
            "built)\n",
            dr->out, src_ext(dr),
            S == 1 ? "" : arena_printf(&dr->arena, " .. rank%d.%s", S - 1, src_ext(dr)), dr->out,
            dr->out, W, W == 1 ? "" : "s");
    return 0;
  }
  if (dr->prog.stage_reps)
    fprintf(stderr,
            "pipec: wrote %s/rank0.%s .. rank%d.%s, %s/bin/rank0 .. rank%d and %s/launch.sh (%d "
            "ranks: stages on %s replicas)\n",
            dr->out, src_ext(dr), S - 1, src_ext(dr), dr->out, S - 1, dr->out, W, dr->rep_list);
  else if (D > 1)
    fprintf(stderr,
            "pipec: wrote %s/rank0.%s%s, %s/bin/rank0%s and %s/launch.sh (%d ranks: %d stage%s x "
            "%d replicas)\n",
            dr->out, src_ext(dr),
            S == 1 ? "" : arena_printf(&dr->arena, " .. rank%d.%s", S - 1, src_ext(dr)), dr->out,
            S == 1 ? "" : arena_printf(&dr->arena, " .. rank%d", S - 1), dr->out, S * D, S,
            S == 1 ? "" : "s", D);
  else if (S == 1)
    fprintf(stderr, "pipec: wrote %s/rank0.%s and %s/bin/train\n", dr->out, src_ext(dr), dr->out);
  else
    fprintf(stderr,
            "pipec: wrote %s/rank0.%s .. rank%d.%s, %s/bin/rank0 .. rank%d and %s/launch.sh (%d "
            "ranks)\n",
            dr->out, src_ext(dr), S - 1, src_ext(dr), dr->out, S - 1, dr->out, S);
  return 0;
}

// S = 1 runs bin/train itself, S > 1 launch.sh (mpirun over the ranks); either replaces pipec,
// so the exit status is the program's (or mpirun's).
static int finish_run(Driver *dr) {
  fflush(stdout);
  char **pa = ARENA_ARRAY(&dr->arena, char *, dr->nprog_args + 2);
  pa[0] = arena_printf(
      &dr->arena, dr->prog.nranks == 1 && dr->prog.replicas <= 1 ? "%s/bin/train" : "%s/launch.sh",
      dr->out);
  for (int i = 0; i < dr->nprog_args; i++) pa[i + 1] = dr->prog_args[i];
  if (dr->diag.format != DIAG_TEXT) { // the document is complete before the program's output
    if (access(pa[0], X_OK) != 0) {
      diag_error(&dr->diag, (Loc){0, 0}, "cannot run %s: %s", pa[0], strerror(errno));
      return EXIT_MODEL;
    }
    diag_write(&dr->diag, PIPEC_VERSION);
  }
  execv(pa[0], pa);
  fprintf(stderr, "pipec: cannot run %s: %s\n", pa[0], strerror(errno));
  return EXIT_MODEL;
}

// profile: runs the program built with timing hooks (launch.sh --profile RAW), then turns its
// measurement into the costs file; the temporary directory goes in every case.
static int finish_profile(Driver *dr) {
  fflush(stdout);
  const char *raw = arena_printf(&dr->arena, "%s/profile.json", dr->out);
  char **pa = ARENA_ARRAY(&dr->arena, char *, dr->nprog_args + 10);
  int n = 0;
  pa[n++] = arena_printf(&dr->arena, "%s/launch.sh", dr->out);
  pa[n++] = "--steps", pa[n++] = "20", pa[n++] = "--eval-batches", pa[n++] = "1";
  pa[n++] = "--quiet";
  for (int i = 0; i < dr->nprog_args; i++) pa[n++] = dr->prog_args[i];
  pa[n++] = "--profile", pa[n++] = (char *)raw;
  pa[n] = NULL;
  int status = EXIT_MODEL;
  int unbound = 0; // the cores the ranks shared unbound
  pid_t pid = fork();
  if (pid == 0) {
    execv(pa[0], pa);
    fprintf(stderr, "pipec: cannot run %s: %s\n", pa[0], strerror(errno));
    _exit(127);
  }
  int ws = 0;
  if (pid < 0 || waitpid(pid, &ws, 0) < 0)
    fprintf(stderr, "pipec: profile: cannot run %s: %s\n", pa[0], strerror(errno));
  else if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
    fprintf(stderr, "pipec: profile: the profiled program failed (%s %d)\n",
            WIFEXITED(ws) ? "exit status" : "signal",
            WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
  else if (costs_from_profile(&dr->prog, sched_name(dr->sched), raw, dr->prof_out, &unbound,
                              &dr->diag)) {
    fprintf(stderr, "pipec: wrote %s (%d stages, %s)\n", dr->prof_out, dr->prog.nranks,
            sched_name(dr->sched));
    if (unbound)
      fprintf(stderr,
              "pipec: note: the %d ranks shared %d cores unbound, so the costs cannot say which "
              "ranks share a core nor what a core loses to a rank polling beside it: profile and "
              "run with PIPEC_BIND=core for a closer prediction (docs/pipeline.md, \"What a "
              "shared core loses\")\n",
              dr->prog.nranks, unbound);
    status = 0;
  }
  remove_tree(dr->out);
  return status;
}

// pipec import MODEL.pt2 -o MODEL.json [--weights F.safetensors] [--training F.json]: the
// archive's graph as pipec's JSON (docs/import.md), written atomically.
// F's directory, a real path ("." when F has none); NULL when it does not resolve.
static char *real_dir(Arena *a, const char *f) {
  const char *sl = strrchr(f, '/');
  char *dir = sl ? arena_strndup(a, f, sl == f ? 1 : (size_t)(sl - f)) : arena_strdup(a, ".");
  char *r = realpath(dir, NULL);
  char *out = r ? arena_strdup(a, r) : NULL;
  free(r);
  return out;
}

// How a model at json names weights file w in its "weights" key: its base name when both lie in
// one directory, else w's absolute path.
static const char *weights_key(Arena *a, const char *json, const char *w) {
  const char *base = strrchr(w, '/') ? strrchr(w, '/') + 1 : w;
  char *jd = real_dir(a, json), *wd = real_dir(a, w);
  if (jd && wd && strcmp(jd, wd) == 0) return base;
  return wd ? arena_printf(a, "%s/%s", wd, base) : w;
}

static int run_import(Driver *dr, const char *model) {
  if (!model) return usage_error("%s", "'import' needs a model file (MODEL.pt2)");
  if (!pt2_is_archive(model))
    return usage_error("import reads a torch.export archive (MODEL.pt2), got '%s'", model);
  if (!dr->out_dir) return usage_error("%s", "import needs -o MODEL.json (where the JSON goes)");
  diag_init(&dr->diag, model, stderr);
  dr->diag.excerpts = true;
  dr->diag.format = dr->diag_format;
  char *text = NULL;
  Pt2SourceOptions po = {.training = dr->training_file,
                         .text = &text,
                         .weights_out = dr->weights_file,
                         .data_files = dr->data_files,
                         .ndata_files = dr->ndata_files};
  if (dr->weights_file) po.weights_key = weights_key(&dr->arena, dr->out_dir, dr->weights_file);
  Source src = {0};
  bool ok = pt2_source_load(&src, &dr->arena, model, &po, &dr->diag);
  ok = ok && write_file_atomic(dr->out_dir, text, strlen(text), &dr->diag);
  diag_write(&dr->diag, PIPEC_VERSION);
  source_free(&src);
  return ok ? 0 : EXIT_MODEL;
}

typedef struct Command {
  const char *name;          // check, print, ...
  const char *last;          // the last pass it runs (unless --dump-after/--stop-after say)
  const char *needs;         // the last pass its output needs (stopped earlier: no output)
  bool build;                // codegen also builds OUT/bin/train
  int (*finish)(Driver *dr); // its output; returns the exit status
} Command;

static const Command commands[] = {
    {"check", "shape", "shape", false, finish_check},
    {"print", "shape", "expand", false, finish_print}, // the IR after the last pass that ran
    {"plan", "memplan", "memplan", false, finish_plan},
    {"compile", "codegen", "codegen", true, finish_compile},
    {"run", "codegen", "codegen", true, finish_run},
    {"profile", "codegen", "codegen", true, finish_profile},
};
enum { NCOMMANDS = sizeof commands / sizeof commands[0] };

// Parses --dump-after's list and --stop-after into dr->dump and dr->last (from the command's
// default last pass); 0 or a usage error's exit status.
static int select_passes(Driver *dr, const Command *cmd) {
  dr->last = find_pass(cmd->last, strlen(cmd->last));
  for (const char *p = dr->dump_after; p && *p;) {
    size_t n = strcspn(p, ",");
    int i = find_pass(p, n);
    if (i < 0)
      return usage_error("--dump-after: unknown pass '%.*s' (passes: %s)", (int)n, p,
                         pass_list(&dr->arena));
    dr->dump[i] = true;
    if (i > dr->last) dr->last = i;
    p += n + (p[n] == ',');
  }
  if (dr->dump_after && !*dr->dump_after)
    return usage_error("--dump-after: no pass named (passes: %s)", pass_list(&dr->arena));
  if (dr->stop_after) {
    int stop = find_pass(dr->stop_after, strlen(dr->stop_after));
    if (stop < 0)
      return usage_error("--stop-after: unknown pass '%s' (passes: %s)", dr->stop_after,
                         pass_list(&dr->arena));
    for (int i = stop + 1; i < NPASSES; i++)
      if (dr->dump[i])
        return usage_error("--dump-after=%s: the pass comes after --stop-after=%s", passes[i].name,
                           passes[stop].name);
    dr->last = stop;
  }
  return 0;
}

// --topology: reads the file, checks it has one GPU per rank, places the ranks
// (topology_place) and gives the partitioner the links between the ranks in bytes/s.
static bool load_topology(Driver *dr) {
  Topology *t = &dr->topo;
  char *msg = NULL;
  size_t len = 0;
  FILE *err = dr->diag.format == DIAG_TEXT ? stderr : open_memstream(&msg, &len);
  bool ok = err && topology_load(t, dr->topology, &dr->arena, err);
  if (err && err != stderr) { // json, sarif: the line becomes one record of the document
    fclose(err);
    if (!ok) {
      while (len && msg[len - 1] == '\n') msg[--len] = 0;
      char *e = strstr(msg, ": error: "); // FILE:LINE: MESSAGE (the record's kind says error)
      if (e) memmove(e + 2, e + 9, strlen(e + 9) + 1);
      diag_error(&dr->diag, (Loc){0, 0}, "--topology %s", msg);
    }
    free(msg);
  }
  if (!ok) return false;
  int nv = dr->po.stages ? dr->po.stages : dr->po.nsplit ? dr->po.nsplit + 1 : 1;
  int S = nv / dr->virt; // the partition cuts S x V stages
  if (t->ngpu != S) {
    const char *why = arena_printf(
        &dr->arena,
        "the topology has %d GPU%s but the pipeline runs %d rank%s (%s): pipec places "
        "one rank per GPU",
        t->ngpu, t->ngpu == 1 ? "" : "s", S, S == 1 ? "" : "s",
        dr->po.stages   ? arena_printf(&dr->arena, "--stages %d", dr->po.stages / dr->virt)
        : dr->po.nsplit ? "--split"
                        : "no --stages");
    if (dr->diag.format == DIAG_TEXT)
      fprintf(stderr, "%s: error: %s\n", dr->topology, why);
    else
      diag_error(&dr->diag, (Loc){0, 0}, "--topology %s: %s", dr->topology, why);
    return false;
  }
  dr->gpu_of_rank = ARENA_ARRAY(&dr->arena, int, S);
  topology_place(t, dr->virt > 1, dr->gpu_of_rank, &dr->arena);
  double *bw = ARENA_ARRAY(&dr->arena, double, (size_t)S *S);
  int *device = ARENA_ARRAY(&dr->arena, int, S);
  for (int a = 0; a < S; a++) {
    device[a] = t->gpu[dr->gpu_of_rank[a]].dev;
    for (int b = 0; b < S; b++)
      bw[a * S + b] = a == b ? dr->po.bandwidth
                             : topology_link(t, dr->gpu_of_rank[a], dr->gpu_of_rank[b]) * 1e9;
  }
  // One machine: launch.sh gives each rank its GPU. Several: where a rank runs is mpirun's
  // hostfile's business, so the plan only names the machines (docs/pipeline.md, "Topology").
  dr->po.rank_bw = bw, dr->po.rank_device = t->nsys == 1 ? device : NULL, dr->po.nranks = S;
  return true;
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"define", required_argument, NULL, 'D'},
      {"dump-after", required_argument, NULL, 'd'},
      {"stop-after", required_argument, NULL, 'P'},
      {"output", required_argument, NULL, 'o'},
      {"target", required_argument, NULL, 'T'},
      {"set", required_argument, NULL, 's'},
      {"batch", required_argument, NULL, 'b'},
      {"microbatches", required_argument, NULL, 'm'},
      {"steps", required_argument, NULL, 'S'},
      {"no-build", no_argument, NULL, OPT_NO_BUILD},
      {"no-fuse", no_argument, NULL, OPT_NO_FUSE},
      {"training", required_argument, NULL, OPT_TRAINING},
      {"weights", required_argument, NULL, OPT_WEIGHTS},
      {"data-file", required_argument, NULL, OPT_DATA_FILE},
      {"depfile", required_argument, NULL, OPT_DEPFILE},
      {"svg", required_argument, NULL, OPT_SVG},
      {"json", required_argument, NULL, OPT_JSON},
      {"export-csv", required_argument, NULL, OPT_EXPORT_CSV},
      {"topology", required_argument, NULL, OPT_TOPOLOGY},
      {"trace", required_argument, NULL, OPT_TRACE},
      {"trace-step", required_argument, NULL, OPT_TRACE_STEP},
      {"list-ops", no_argument, NULL, 'L'},
      {"time-passes", no_argument, NULL, 't'},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},
      {"march", required_argument, NULL, 'A'}, // --march=native
      {"stages", required_argument, NULL, 'N'},
      {"replicas", required_argument, NULL, OPT_REPLICAS},
      {"precision", required_argument, NULL, OPT_PRECISION},
      {"split", required_argument, NULL, 'X'},
      {"flops-rate", required_argument, NULL, 'F'},
      {"bandwidth", required_argument, NULL, 'W'},
      {"mem-cap", required_argument, NULL, 'C'},
      {"costs", required_argument, NULL, OPT_COSTS},
      {"recompute", required_argument, NULL, OPT_RECOMPUTE},
      {"schedule", required_argument, NULL, 'K'},
      {"virtual", required_argument, NULL, 'v'},
      {"cuda-arch", required_argument, NULL, 'G'},
      {"comm", required_argument, NULL, 'M'},
      {"diagnostics-format", required_argument, NULL, OPT_DIAG_FORMAT},
      {NULL, 0, NULL, 0},
  };
  Driver dr = {0};
  dr.trace_step = -1;
  dr.sched = SCHED_1F1B;
  dr.virt = 1;
  arena_init(&dr.arena); // everything below is freed at once by arena_free on every exit path
  dr.defines = ARENA_ARRAY(&dr.arena, const char *, argc + 1);
  dr.sets = ARENA_ARRAY(&dr.arena, const char *, argc + 1);
  dr.data_files = ARENA_ARRAY(&dr.arena, const char *, argc + 1);
  size_t nsplit_max = 1; // every comma and every argument could start a --split name
  for (int i = 0; i < argc; i++) nsplit_max += strlen(argv[i]) + 1;
  dr.po.split = ARENA_ARRAY(&dr.arena, const char *, nsplit_max);
  dr.po.flops_rate = PART_DEFAULT_GFLOPS * 1e9;
  dr.po.bandwidth = PART_DEFAULT_GBYTES_S * 1e9;
#define RETURN(rc)                                                                                 \
  do {                                                                                             \
    int rc_ = (rc);                                                                                \
    arena_free(&dr.arena);                                                                         \
    return rc_;                                                                                    \
  } while (0)
  dr.target = "cpu";
  dr.cmdline = join_args(&dr.arena, argc, argv);
  // Everything after "--" belongs to the generated program (pipec run).
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--") == 0) {
      dr.prog_args = argv + i + 1;
      dr.nprog_args = argc - i - 1;
      argc = i;
      break;
    }
  const char *positional[2] = {NULL, NULL};
  int npos = 0, c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":D:o:hV", longopts, NULL)) != -1) {
    switch (c) {
    case 'D':
      dr.defines[dr.ndefines++] = optarg;
      break;
    case 'o':
      dr.out_dir = optarg;
      break;
    case 'T':
      dr.target = optarg;
      break;
    case 'G':
      if (!arch_list_ok(optarg))
        RETURN(
            usage_error("--cuda-arch: expected compute capabilities like 80,90, got '%s'", optarg));
      dr.cuda_arch = optarg;
      break;
    case 'M':
      if (strcmp(optarg, "mpi") != 0)
        RETURN(usage_error("--comm: unknown transport '%s' (available: mpi; nccl is not built "
                           "yet, docs/cuda.md)",
                           optarg));
      break;
    case 'A':
      if (strcmp(optarg, "native") != 0)
        RETURN(usage_error("--march: unknown value '%s' (available: native)", optarg));
      dr.march_native = true;
      break;
    case 's':
      dr.sets[dr.nsets++] = optarg;
      break;
    case 'b':
      dr.sets[dr.nsets++] = arena_printf(&dr.arena, "batch=%s", optarg);
      break;
    case 'm':
      dr.sets[dr.nsets++] = arena_printf(&dr.arena, "microbatches=%s", optarg);
      break;
    case 'S':
      dr.sets[dr.nsets++] = arena_printf(&dr.arena, "steps=%s", optarg);
      break;
    case OPT_NO_BUILD:
      dr.no_build = true;
      break;
    case OPT_NO_FUSE:
      dr.no_fuse = true;
      break;
    case OPT_DATA_FILE:
      dr.data_files[dr.ndata_files++] = optarg;
      break;
    case OPT_TRAINING:
    case OPT_WEIGHTS:
      if (!*optarg)
        RETURN(usage_error("--%s: the file name is an empty string",
                           c == OPT_TRAINING ? "training" : "weights"));
      *(c == OPT_TRAINING ? &dr.training_file : &dr.weights_file) = optarg;
      break;
    case OPT_DEPFILE:
      dr.depfile = optarg;
      break;
    case OPT_TOPOLOGY:
      if (!*optarg) RETURN(usage_error("%s", "--topology: the file name is an empty string"));
      dr.topology = optarg;
      break;
    case OPT_TRACE:
      if (!*optarg) RETURN(usage_error("%s", "--trace: the file name is an empty string"));
      dr.trace = optarg;
      break;
    case OPT_TRACE_STEP: {
      char *end;
      long v = strtol(optarg, &end, 10);
      if (!*optarg || *end || v < 0 || v > INT32_MAX)
        RETURN(usage_error("--trace-step: expected a step number (0, 1, ...), got '%s'", optarg));
      dr.trace_step = (int)v;
      break;
    }
    case OPT_RECOMPUTE: {
      int *st, n;
      const char *err = recompute_parse(optarg, &dr.arena, &st, &n);
      if (err) RETURN(usage_error("%s", err));
      dr.po.recomp = st, dr.po.nrecomp = n;
      break;
    }
    case OPT_COSTS:
      if (!*optarg) RETURN(usage_error("%s", "--costs: the file name is an empty string"));
      dr.costs_path = optarg;
      break;
    case OPT_SVG:
    case OPT_JSON:
    case OPT_EXPORT_CSV: {
      const char *opt = c == OPT_SVG ? "svg" : c == OPT_JSON ? "json" : "export-csv";
      if (!*optarg) RETURN(usage_error("--%s: the file name is an empty string", opt));
      if (strncmp(optarg, "--", 2) == 0) // "--svg --json F": the file name was forgotten
        RETURN(usage_error("--%s: expected a file name, got the option '%s'", opt, optarg));
      *(c == OPT_SVG ? &dr.svg : c == OPT_JSON ? &dr.json : &dr.export_csv) = optarg;
      break;
    }
    case 'd': // repeated: the lists add up
      dr.dump_after =
          dr.dump_after ? arena_printf(&dr.arena, "%s,%s", dr.dump_after, optarg) : optarg;
      break;
    case 'P':
      dr.stop_after = optarg;
      break;
    case 'N': {
      int64_t v;
      if (!parse_count(optarg, 1, 1 << 16, &v))
        RETURN(
            usage_error("--stages: expected a number of stages from 1 to 65536, got '%s'", optarg));
      dr.po.stages = (int)v;
      break;
    }
    case OPT_PRECISION:
      if (strcmp(optarg, "f32") == 0)
        dr.precision = DT_F32;
      else if (strcmp(optarg, "bf16") == 0)
        dr.precision = DT_BF16;
      else if (strcmp(optarg, "fp16") == 0)
        dr.precision = DT_F16;
      else
        RETURN(usage_error("--precision: unknown precision '%s' (expected f32, bf16 or fp16)",
                           optarg));
      break;
    case OPT_REPLICAS: {
      int64_t v;
      if (strchr(optarg, ',')) { // per-stage counts: checked against S and M in run_autodiff
        int n = 1;
        for (const char *c = optarg; *c; c++) n += *c == ',';
        dr.rep_counts = ARENA_ARRAY(&dr.arena, int, n);
        dr.nrep_counts = 0, dr.rep_list = optarg, dr.replicas = 0;
        for (const char *c = optarg;; c++) {
          const char *e = strchr(c, ',');
          size_t len = e ? (size_t)(e - c) : strlen(c);
          char *one = arena_printf(&dr.arena, "%.*s", (int)len, c);
          if (!parse_count(one, 1, 1 << 16, &v))
            RETURN(usage_error("--replicas %s: expected a replica count from 1 to 65536 per "
                               "stage, separated by commas, got '%s'",
                               optarg, one));
          dr.rep_counts[dr.nrep_counts++] = (int)v;
          if (!e) break;
          c = e;
        }
        bool same = true;
        for (int k = 1; k < n; k++) same &= dr.rep_counts[k] == dr.rep_counts[0];
        if (same) dr.replicas = dr.rep_counts[0]; // the uniform form
        dr.uneven = !same;                        // PipeDream's uneven form (uneven.c)
        break;
      }
      if (!parse_count(optarg, 1, 1 << 16, &v))
        RETURN(usage_error("--replicas: expected a number of replicas from 1 to 65536, got '%s'",
                           optarg));
      dr.replicas = (int)v, dr.rep_list = NULL, dr.nrep_counts = 0, dr.uneven = false;
      break;
    }
    case 'K': {
      size_t n = strlen(optarg);
      dr.sched_csv = NULL;
      if (sched_parse(optarg, &dr.sched)) break;
      if (n > 4 && strcasecmp(optarg + n - 4, ".csv") == 0) { // a custom schedule's file
        dr.sched_csv = optarg;
        break;
      }
      RETURN(usage_error("--schedule: unknown schedule '%s' (gpipe, 1f1b, interleaved, zb-h1, "
                         "zb-v, or a FILE.csv)",
                         optarg));
    }
    case 'v': {
      int64_t v;
      if (!parse_count(optarg, 1, 64, &v))
        RETURN(usage_error("--virtual: expected stages per rank from 1 to 64, got '%s'", optarg));
      dr.virt = (int)v;
      dr.virt_given = true;
      break;
    }
    case 'X': // repeated: the lists add up
      for (const char *q = optarg;;) {
        size_t n = strcspn(q, ",");
        if (n == 0) RETURN(usage_error("--split: an empty name in '%s'", optarg));
        dr.po.split[dr.po.nsplit++] = arena_printf(&dr.arena, "%.*s", (int)n, q);
        if (!q[n]) break;
        q += n + 1;
      }
      break;
    case 'F':
    case 'W': {
      char *end;
      errno = 0;
      double v = strtod(optarg, &end);
      if (errno || end == optarg || *end || !(v > 0) || v > 1e12)
        RETURN(usage_error("--%s: expected a positive number (%s), got '%s'",
                           c == 'F' ? "flops-rate" : "bandwidth", c == 'F' ? "GFLOP/s" : "GB/s",
                           optarg));
      *(c == 'F' ? &dr.po.flops_rate : &dr.po.bandwidth) = v * 1e9;
      break;
    }
    case 'C': {
      int64_t v;
      if (!parse_count(optarg, 1, INT64_MAX, &v))
        RETURN(usage_error("--mem-cap: expected a number of bytes, got '%s'", optarg));
      dr.po.mem_cap = v;
      break;
    }
    case 't':
      dr.time_passes = true;
      break;
    case OPT_DIAG_FORMAT:
      if (!diag_format_parse(optarg, &dr.diag_format))
        RETURN(
            usage_error("--diagnostics-format: unknown format '%s' (text, json, sarif)", optarg));
      break;
    case 'h':
      usage(stdout);
      RETURN(0);
    case 'L': // the op registry's user-visible ops, one per line (docs, tests)
      for (int i = 0; i < op_count(); i++)
        if (!op_at(i)->internal) printf("%s\n", op_at(i)->name);
      RETURN(0);
    case 'V':
      printf("pipec %s\nmodel format: version %d\ntargets: %s\n", PIPEC_VERSION,
             MODEL_FORMAT_VERSION, codegen_targets());
      RETURN(0);
    case ':':
      RETURN(usage_error("option '%s' needs an argument", argv[optind - 1]));
    default:
      RETURN(usage_error("unknown option '%s'", argv[optind - 1]));
    }
  }
  for (int i = optind; i < argc; i++) {
    if (npos == 2) {
      RETURN(usage_error("unexpected argument '%s'", argv[i]));
    }
    positional[npos++] = argv[i];
  }
  int rc = 0;
  if (npos == 0) {
    RETURN(usage_error("%s", "no command given (check, print, plan, compile, run, profile)"));
  }
  dr.command = positional[0];
  if (strcmp(dr.command, "import") == 0) RETURN(run_import(&dr, npos > 1 ? positional[1] : NULL));
  if (dr.weights_file)
    RETURN(usage_error("%s", "--weights is for 'import' (where the archive's weights go)"));
  const Command *cmd = NULL;
  for (int i = 0; i < NCOMMANDS; i++)
    if (strcmp(dr.command, commands[i].name) == 0) cmd = &commands[i];
  if (!cmd)
    rc =
        usage_error("unknown command '%s' (check, print, plan, compile, run, profile)", dr.command);
  else if (npos < 2)
    rc = usage_error("'%s' needs a model file", dr.command);
  else if (strcmp(dr.target, "cpu") != 0 && strcmp(dr.target, "cuda") != 0)
    rc = usage_error("--target: unknown target '%s' (available: cpu, cuda)", dr.target);
  else if (dr.precision != DT_F32 && strcmp(dr.target, "cpu") != 0)
    rc = usage_error("--precision %s: 16-bit training runs the cpu target only (not built yet "
                     "for --target %s)",
                     dr.precision == DT_BF16 ? "bf16" : "fp16", dr.target);
  else if (codegen_target_missing(dr.target))
    rc = usage_error("--target cuda: %s", codegen_target_missing(dr.target));
  else if (dr.cuda_arch && strcmp(dr.target, "cuda") != 0)
    rc = usage_error("%s", "--cuda-arch needs --target cuda");
  else if (dr.march_native && strcmp(dr.target, "cuda") == 0)
    rc = usage_error("%s", "--march=native is for the cpu target (the cuda program's host code "
                           "is not the hot path)");
  else if (dr.out_dir && !*dr.out_dir)
    rc = usage_error("%s", "-o: the output directory is an empty string");
  else if (dr.nprog_args && strcmp(dr.command, "run") != 0 && strcmp(dr.command, "profile") != 0)
    rc = usage_error("arguments after '--' are for 'run' and 'profile' only (got '%s')",
                     dr.prog_args[0]);
  else
    rc = select_passes(&dr, cmd);
  if (!rc && dr.time_passes && dr.diag_format != DIAG_TEXT)
    rc = usage_error("%s", "--time-passes prints text to stderr, where --diagnostics-format "
                           "writes its document: use one of them");
  // zb-v runs two stages per rank: V = 2 implied at S > 1 (at S = 1 the one-stage program).
  if (!rc && dr.sched == SCHED_ZBV && !dr.sched_csv && dr.virt_given && dr.virt != 2)
    rc = usage_error("--virtual %d: --schedule zb-v runs two stages per rank in a V (--virtual 2, "
                     "or none)",
                     dr.virt);
  if (!rc && dr.sched == SCHED_ZBV && !dr.sched_csv && !dr.virt_given &&
      (dr.po.stages > 1 || dr.po.nsplit))
    dr.virt = 2;
  if (!rc && dr.virt > 1 && dr.sched != SCHED_INTERLEAVED && dr.sched != SCHED_ZBV && !dr.sched_csv)
    rc = usage_error("--virtual %d: only --schedule interleaved (or zb-v, V = 2) runs several "
                     "stages per rank",
                     dr.virt);
  if (!rc && dr.virt > 1 && dr.po.stages <= 1 && !dr.po.nsplit && !dr.sched_csv)
    rc = dr.sched == SCHED_ZBV
             ? usage_error("--virtual %d needs --stages >= 2: zb-v places two stages on each of "
                           "several ranks in a V (at one stage it is the one-stage program: leave "
                           "--virtual out)",
                           dr.virt)
             : usage_error("--virtual %d needs --stages >= 2: interleaving runs the stages of "
                           "several ranks",
                           dr.virt);
  if (!rc && strcmp(cmd->name, "profile") == 0) {
    if (dr.po.stages <= 1 && !dr.po.nsplit)
      rc = usage_error("%s", "profile measures a pipeline: it needs --stages >= 2 (or --split)");
    else if (strcmp(dr.target, "cpu") != 0)
      rc = usage_error("%s", "profile runs the cpu target only");
    else if (dr.no_build || dr.depfile)
      rc = usage_error("%s", "profile builds and runs its own program: no --no-build, --depfile");
    dr.profile = true;
    dr.prof_out = dr.out_dir ? dr.out_dir : "costs.json";
    dr.out_dir = NULL;
  }
  const char *reps = dr.uneven ? dr.rep_list : arena_printf(&dr.arena, "%d", dr.replicas);
  if (!rc && (dr.replicas > 1 || dr.uneven) && strcmp(dr.target, "cpu") != 0)
    rc = usage_error("--replicas %s: stage replication runs the cpu target only (not built yet "
                     "for --target %s)",
                     reps, dr.target);
  if (!rc && (dr.replicas > 1 || dr.uneven) && (dr.topology || strcmp(cmd->name, "profile") == 0))
    rc = usage_error("--replicas %s: not supported yet with %s", reps,
                     dr.topology ? "--topology" : "profile");
  if (!rc && dr.costs_path && (strcmp(cmd->name, "profile") == 0 || !multi_given(&dr)))
    rc = usage_error("--costs is for a pipeline's plan, compile or run (--stages >= 2)%s",
                     strcmp(cmd->name, "profile") == 0 ? ", not profile (it writes one)" : "");
  if (!rc && dr.virt > 1 && dr.po.stages && !dr.sched_csv)
    dr.po.stages *= dr.virt; // the partition cuts S x V (a CSV's: once it is read, below)
  // --recompute's stages exist (with --split or a CSV: checked once the partition has them).
  for (int i = 0; !rc && !dr.sched_csv && !dr.po.nsplit && i < dr.po.nrecomp; i++) {
    int nv = dr.po.stages > 1 ? dr.po.stages : 1;
    if (dr.po.recomp[i] >= nv)
      rc = usage_error("--recompute %d: no such stage (the pipeline has %d stage%s: 0 to %d)",
                       dr.po.recomp[i], nv, nv == 1 ? "" : "s", nv - 1);
  }
  // --no-build and --depfile: for the commands that write programs (docs/build-integration.md).
  if (!rc && dr.no_build && strcmp(cmd->name, "compile") != 0)
    rc = usage_error("--no-build is for 'compile' (got '%s', which builds the program)", cmd->name);
  if (!rc && dr.depfile && !cmd->build)
    rc = usage_error("--depfile is for 'compile' and 'run' (got '%s', which writes no files)",
                     cmd->name);
  if (!rc && dr.depfile && !*dr.depfile)
    rc = usage_error("%s", "--depfile: the file name is an empty string");
  if (!rc && (dr.trace || dr.trace_step >= 0) && (strcmp(cmd->name, "plan") != 0 || !dr.svg))
    rc = usage_error("--%s draws a run's times: it is for 'plan' with --svg FILE",
                     dr.trace ? "trace" : "trace-step");
  if (!rc && dr.trace_step >= 0 && !dr.trace)
    rc = usage_error("%s", "--trace-step: give --trace FILE too");
  if (!rc && (dr.svg || dr.json) && strcmp(cmd->name, "plan") != 0)
    rc = usage_error("--%s is for 'plan' (got '%s')", dr.svg ? "svg" : "json", cmd->name);
  if (!rc && dr.export_csv && strcmp(cmd->name, "plan") != 0)
    rc = usage_error("--export-csv is for 'plan' (got '%s')", cmd->name);
  if (!rc && dr.export_csv && dr.po.stages <= 1 && !dr.po.nsplit && !dr.sched_csv)
    rc = usage_error("%s", "--export-csv writes a pipeline schedule: it needs --stages >= 2 (or "
                           "--split)");
  if (!rc && (dr.svg || dr.json) && dr.po.stages <= 1 && !dr.po.nsplit && !dr.sched_csv)
    rc = usage_error("--%s draws a pipeline plan: it needs --stages >= 2 (or --split)",
                     dr.svg ? "svg" : "json");
  if (rc) {
    RETURN(rc);
  }
  dr.model = positional[1];
  dr.out = dr.out_dir;
  dr.po.sched = dr.po.est_sched = (int)dr.sched;
  dr.po.virt = dr.virt;
  if (dr.profile) { // the program lives in a temporary directory (finish_profile removes it)
    const char *td = getenv("TMPDIR");
    char *tmpl = arena_printf(&dr.arena, "%s/pipec-profile-XXXXXX", td && *td ? td : "/tmp");
    if (!mkdtemp(tmpl)) {
      fprintf(stderr, "pipec: profile: cannot create a temporary directory: %s\n", strerror(errno));
      RETURN(EXIT_MODEL);
    }
    dr.out = tmpl;
  }
  if (dr.costs_path) {
    diag_init(&dr.costs_diag, dr.costs_path, stderr);
    dr.costs_diag.excerpts = true;
    dr.costs_diag.format = dr.diag_format; // its errors are the document (the model has none)
    if (!costs_load(&dr.costs, dr.costs_path, &dr.arena, &dr.costs_diag)) {
      diag_write(&dr.costs_diag, PIPEC_VERSION);
      costs_free(&dr.costs);
      diag_free(&dr.costs_diag);
      if (dr.costs_path) diag_free(&dr.costs_diag);
      RETURN(EXIT_MODEL);
    }
  }
  dr.build = cmd->build && !dr.no_build;

  diag_init(&dr.diag, dr.model, stderr);
  dr.diag.excerpts = true; // the source line and a caret under each located message
  dr.diag.format = dr.diag_format;
  // Paths a depfile could not hold are refused before any work (codegen_depfile checks again).
  if (dr.depfile && !codegen_depfile_check(&dr.arena, dr.model, dr.out_dir, &dr.diag)) {
    diag_write(&dr.diag, PIPEC_VERSION);
    RETURN(EXIT_MODEL);
  }
  if (dr.topology && !load_topology(&dr)) {
    diag_write(&dr.diag, PIPEC_VERSION); // the machine-readable formats' document
    RETURN(EXIT_MODEL);
  }
  dr.diag.pass = "parse";
  graph_init(&dr.graph, &dr.arena);
  bool ok = !dr.sched_csv || load_schedule_csv(&dr);
  // check and print with several stages run the partition and comm passes too (errors, dumps),
  // and with a custom schedule the schedule pass (its checks and the verifier).
  bool multi = dr.po.stages > 1 || dr.po.nsplit;
  int part = find_pass("comm", strlen("comm")), sched = find_pass("schedule", strlen("schedule"));
  if (multi && dr.last < part && !dr.stop_after) dr.last = dr.sched_csv ? sched : part;
  double t0 = now();
  if ((dr.training_file || dr.ndata_files) && !pt2_is_archive(dr.model)) {
    diag_error(&dr.diag, (Loc){0, 0},
               "--%s is for a .pt2 model (a JSON model has its own "
               "\"training\" section)",
               dr.training_file ? "training" : "data-file");
    ok = false;
  }
  Pt2SourceOptions po = {
      .training = dr.training_file, .data_files = dr.data_files, .ndata_files = dr.ndata_files};
  // A .pt2 compiled into a program: the archive's weights go beside it, as its initial values.
  if (ok && pt2_is_archive(dr.model) && (cmd->build || dr.profile)) {
    const char *b = strrchr(dr.model, '/') ? strrchr(dr.model, '/') + 1 : dr.model;
    const char *dir =
        dr.out ? dr.out
               : arena_printf(&dr.arena, "out/%s",
                              mangle_dir(&dr.arena, arena_strndup(&dr.arena, b, strlen(b) - 4)));
    ok = codegen_make_dirs(&dr.arena, dir, &dr.diag);
    char *rd = ok ? realpath(dir, NULL) : NULL;
    if (rd) {
      po.weights_out = po.weights_key = arena_printf(&dr.arena, "%s/weights.safetensors", rd);
      free(rd);
    }
  }
  ok =
      ok && (pt2_is_archive(dr.model) ? pt2_source_load(&dr.src, &dr.arena, dr.model, &po, &dr.diag)
                                      : source_load(&dr.src, &dr.arena, dr.model, &dr.diag));
  if (dr.time_passes) fprintf(stderr, "pipec: pass %-8s %9.3f ms\n", "parse", (now() - t0) * 1e3);
  ok = ok && run_passes(&dr);
  int status = ok ? 0 : EXIT_MODEL;
  if (ok && dr.last >= find_pass(cmd->needs, strlen(cmd->needs)))
    status = cmd->finish(&dr);
  else if (ok && multi && cmd && strcmp(cmd->name, "plan") == 0 && dr.last == sched)
    status = finish_plan_pipeline(&dr);
  // The machine-readable formats' document (text: nothing): the costs file's when it stopped
  // the passes (costs_bind), else the model's.
  diag_write(dr.costs_path && dr.costs_diag.errors ? &dr.costs_diag : &dr.diag, PIPEC_VERSION);
  source_free(&dr.src);
  costs_free(&dr.costs);
  if (dr.profile) remove_tree(dr.out); // (finish_profile did, unless a pass failed)
  RETURN(status);
}

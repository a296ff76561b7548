// fuzz_json: the JSON model front end under mutation (tests/fuzz/README.md). Seeds: the samples,
// the gradient check's models and the bad-model catalogues. Each mutant is the text of a seed
// changed by byte mutations, by structural JSON mutations, or both, or its numbers alone, and runs
// in process through what `pipec plan` runs before codegen, in the driver's order
// (driver/main.c): source_parse, expand, shape, training, fuse, autodiff, partition (S = 1 for
// 60% of the mutants, else 2, 3 or 4), comm, schedule (1f1b), memplan, each pass followed by its
// checker as the driver runs it. Asserted: no crash, hang or leak (the sanitizers, the harness's
// alarm); a rejected model reported an error and every line reported is one whole "m.json:L:C:
// error: ..." message (fuzz_check_diag); a checker never refuses what its pass accepted (that is a
// compiler bug, not a bad model).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/comm.h"
#include "../../compiler/dimexpr.h"
#include "../../compiler/memplan.h"
#include "../../compiler/partition.h"
#include "../../compiler/passes.h"
#include "../../compiler/pipeline.h"
#include "../../compiler/precision.h"
#include "../../compiler/recompute.h"
#include "../../compiler/schedule.h"
#include "../../compiler/simulate.h"
#include "../../compiler/source.h"
#include "../../compiler/training.h"
#include "../../ir/ir.h"
#include "harness.h"

// JSON tokens and bytes worth inserting into a model's text.
static const char *const DICT[] = {
    "{",
    "}",
    "[",
    "]",
    "\"",
    ":",
    ",",
    "null",
    "true",
    "false",
    "-",
    "1e999",
    "\\u0000",
    "\\ud800",
    "\\n",
    "\"B\"",
    "0",
    "-1",
    "9007199254740993",
    "\"op\"",
    "\"name\"",
    "\"inputs\"",
    "\"shape\"",
    "\xef\xbb\xbf",
    "\xc0\x80",
    "\xed\xa0\x80",
    "\xf4\x90\x80\x80",
    "\r\n",
    "\t",
    "//",
    "/*",
    "\"repeat\"",
    "\"dims\"",
    "\"blocks\"",
    "\"training\"",
    "\"stage\"",
    "{}",
    "[]",
};

// ---- the in-process pipeline

typedef struct Run {
  Arena a;             // everything of the run
  Diag d;              // its diagnostics ("m.json"), into a memstream
  Source src;          // the mutant parsed
  Graph g;             // the IR
  TrainConfig tc;      // the training section
  PartitionOptions po; // S stages, the driver's defaults otherwise
  Program prog;        // partition .. memplan
} Run;

static bool s_expand(Run *x) {
  ExpandOptions eo = {0};
  return pass_expand(&x->src, &x->g, &eo, &x->d);
}

static bool s_shape(Run *x) {
  return pass_shape(&x->g, &x->d);
}

static bool s_training(Run *x) {
  return training_parse(&x->src, &x->g, NULL, 0, &x->tc, &x->d);
}

static bool s_fuse(Run *x) {
  return pass_fuse(&x->g, true, &x->d);
}

static bool s_autodiff(Run *x) { // as the driver's run_autodiff at D = 1, f32
  if (!pass_autodiff(&x->g, (int)x->tc.microbatches, &x->d)) return false;
  training_accuracy(&x->tc);
  x->tc.precision = DT_F32;
  precision_mark(&x->g, DT_F32, x->tc.accuracy ? accuracy_logits(x->tc.accuracy) : NULL);
  return true;
}

static bool s_partition(Run *x) {
  return pass_partition(&x->g, &x->tc, &x->po, &x->prog, &x->d);
}

static bool s_comm(Run *x) {
  return pass_comm(&x->g, &x->prog, &x->d);
}

static bool s_schedule(Run *x) {
  bool *rc = NULL;
  int bad = -1, nv = x->prog.nv > 0 ? x->prog.nv : 1;
  if (!recompute_flags(NULL, 0, nv, &x->a, &rc, &bad)) return false;
  if (x->prog.nv == 1) {
    if (!pass_schedule(&x->g, &x->tc, &x->prog, &x->d)) return false;
    recompute_apply(&x->prog, rc, &x->a);
    return true;
  }
  recompute_apply(&x->prog, rc, &x->a);
  return sched_build(&x->prog, SCHED_1F1B, x->prog.nv, 1, &x->a, &x->d);
}

static bool s_memplan(Run *x) {
  x->prog.replicas = 1;
  x->prog.stage_reps = NULL;
  if (!plan_memory(&x->prog, &x->d)) return false;
  for (int r = 0; r < x->prog.nranks; r++) plan_warn_memory(&x->prog.ranks[r].plan, &x->d);
  return true;
}

static bool v_graph(Run *x) {
  return graph_verify(&x->g, &x->d);
}

static bool v_partition(Run *x) {
  return partition_check(&x->prog, &x->d);
}

static bool v_comm(Run *x) {
  return comm_check(&x->prog, &x->d);
}

static bool v_schedule(Run *x) {
  if (x->prog.nranks <= 1) return schedule_check(&x->prog, &x->d);
  SchedStats st;
  return schedule_verify(&x->prog, NULL, &st, &x->a, &x->d);
}

typedef struct Step {
  bool (*run)(Run *x);   // the pass
  bool (*check)(Run *x); // its checker, as the driver runs it (NULL: none)
} Step;

// In the order of STAGES[1..]: "parse" is source_parse, the last is "accepted".
static const Step STEPS[] = {
    {s_expand, v_graph}, {s_shape, v_graph},       {s_training, NULL},
    {s_fuse, v_graph},   {s_autodiff, v_graph},    {s_partition, v_partition},
    {s_comm, v_comm},    {s_schedule, v_schedule}, {s_memplan, NULL},
};
enum { NSTEPS = sizeof STEPS / sizeof STEPS[0] };
static const char *const STAGES[] = {"parse",    "expand",   "shape",     "training",
                                     "fuse",     "autodiff", "partition", "comm",
                                     "schedule", "memplan",  "accepted",  "too big"};
_Static_assert(sizeof STAGES / sizeof STAGES[0] == NSTEPS + 3, "a stage per step");

// ---- models too large to compile per mutant

// A model valid but too large to compile per mutant (a repeat count of 65536 makes a GPT of 800k
// nodes, 8 s to expand; 2^20 microbatches, schedules of millions of actions) stops unrun at "too
// big": above these, from the document alone. Counts past the compiler's own limits (expand's
// MAX_REPEAT, training's 2^20 microbatches) are refused at once and still run.
enum { MAX_FUZZ_REPEATS = 256, MAX_FUZZ_MICROBATCHES = 4096, MAX_DIM_NEST = 100 };
enum { REPEAT_LIMIT = 100000, MICROBATCH_LIMIT = 1 << 20 }; // expand.h, training.c

typedef struct DimsCtx {
  const cJSON *dims; // the document's dims
  int depth;         // dims evaluated inside each other now
} DimsCtx;

static int lookup_dim(void *ctx, const char *name, Dim *out, char *err, int errcap) {
  DimsCtx *c = ctx;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->dims, name);
  if (cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 9007199254740992.0) {
    *out = (Dim){.n = (int64_t)v->valuedouble};
    return 1;
  }
  if (!cJSON_IsString(v) || c->depth > MAX_DIM_NEST) return 0;
  c->depth++;
  bool ok = dimexpr_eval(v->valuestring, lookup_dim, c, out, err, errcap);
  c->depth--;
  return ok ? 1 : -1;
}

// The value of a count (a number, a dim, an expression); 0 when unknown (expand will say why).
static int64_t value_of(const cJSON *root, const cJSON *v) {
  if (cJSON_IsNumber(v)) return v->valuedouble > 1e15 ? INT64_MAX : (int64_t)v->valuedouble;
  char err[256];
  Dim d;
  DimsCtx c = {cJSON_GetObjectItemCaseSensitive(root, "dims"), 0};
  return cJSON_IsString(v) && dimexpr_eval(v->valuestring, lookup_dim, &c, &d, err, sizeof err)
             ? d.n
             : 0;
}

// The sum of the repeat counts under x (saturating).
static int64_t repeats(const cJSON *root, const cJSON *x) {
  int64_t n = 0;
  for (const cJSON *c = x->child; c && n <= MAX_FUZZ_REPEATS; c = c->next) {
    if (cJSON_IsObject(c) && cJSON_GetObjectItemCaseSensitive(c, "repeat")) {
      int64_t k = value_of(root, cJSON_GetObjectItemCaseSensitive(c, "count"));
      n += k > 0 && k <= REPEAT_LIMIT ? k : 0;
    }
    n += repeats(root, c);
  }
  return n;
}

static bool too_big(const cJSON *root) {
  const cJSON *tr = cJSON_GetObjectItemCaseSensitive(root, "training");
  const cJSON *mb = cJSON_GetObjectItemCaseSensitive(tr, "microbatches");
  return repeats(root, root) > MAX_FUZZ_REPEATS ||
         (cJSON_IsNumber(mb) && mb->valuedouble > MAX_FUZZ_MICROBATCHES &&
          mb->valuedouble <= MICROBATCH_LIMIT);
}

// Runs the passes from parse on; the index in STAGES of where the mutant stopped.
static int run_passes(Run *x, const FuzzCase *c, bool *checker_refused) {
  // The mutant's bytes alone, without a NUL after them: a read past the end is caught.
  char *text = malloc(c->input.n ? c->input.n : 1);
  if (!text) exit(2);
  memcpy(text, c->input.p, c->input.n);
  bool ok = source_parse(&x->src, &x->a, "m.json", text, c->input.n, &x->d);
  free(text);
  if (!ok) return 0;
  if (too_big(x->src.root)) return NSTEPS + 2;
  graph_init(&x->g, &x->a);
  for (int i = 0; i < NSTEPS; i++) {
    if (!STEPS[i].run(x) || x->d.errors) return i + 1;
    if (STEPS[i].check && (!STEPS[i].check(x) || x->d.errors)) {
      *checker_refused = true;
      return i + 1;
    }
  }
  return NSTEPS + 1;
}

static int run(FuzzCase *c) {
  Run x = {0};
  arena_init(&x.a);
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  if (!f) exit(2);
  diag_init(&x.d, "m.json", f);
  x.po = (PartitionOptions){.stages = (int)c->knob,
                            .split = ARENA_ARRAY(&x.a, const char *, 1),
                            .flops_rate = PART_DEFAULT_GFLOPS * 1e9,
                            .bandwidth = PART_DEFAULT_GBYTES_S * 1e9,
                            .sched = SCHED_1F1B,
                            .est_sched = SCHED_1F1B,
                            .virt = 1};
  bool refused = false;
  int stage = run_passes(&x, c, &refused);
  fclose(f);
  if (c->verbose) fprintf(stderr, "%s", out);
  if (refused)
    snprintf(c->why, sizeof c->why, "the checker after %s refused what the pass accepted: %.1500s",
             STAGES[stage], out);
  else
    fuzz_check_diag(out, "m.json", x.d.errors, stage <= NSTEPS, false, c->why, sizeof c->why);
  // (too big: nothing ran after the parser, nothing was reported: accepted as far as it went)
  free(out);
  source_free(&x.src);
  arena_free(&x.a);
  return stage;
}

// ---- the mutants

typedef struct SeedInfo {
  cJSON *tree;   // the seed parsed (NULL: not JSON)
  bool accepted; // the seed itself passes every pass: mutants of it reach the late passes
} SeedInfo;

static bool load(Seed *s) {
  SeedInfo *si = calloc(1, sizeof *si);
  if (!si) return false;
  si->tree = cJSON_ParseWithLength((const char *)s->data.p, s->data.n);
  FuzzCase c = {0};
  buf_set(&c.input, s->data.p, s->data.n);
  c.knob = 1;
  si->accepted = run(&c) == NSTEPS + 1;
  buf_free(&c.input);
  s->user = si;
  return true;
}

static void unload(Seed *s) {
  SeedInfo *si = s->user;
  if (si) cJSON_Delete(si->tree);
  free(si);
}

// A seed: one that passes (the samples, the gradient check's models) for 60% of the mutants, any
// seed (mostly the bad catalogues: every check's neighbourhood) for the rest.
static const Seed *pick_seed(Rng *r, const Seeds *seeds) {
  static int *good, ngood = -1;
  if (ngood < 0) {
    good = malloc((size_t)seeds->n * sizeof *good);
    if (!good) exit(2);
    ngood = 0;
    for (int i = 0; i < seeds->n; i++)
      if (((SeedInfo *)seeds->s[i].user)->accepted) good[ngood++] = i;
  }
  if (ngood && rng_chance(r, 60)) return &seeds->s[good[rng_below(r, (uint64_t)ngood)]];
  return fuzz_pick(r, seeds);
}

static void mutate(Rng *r, const Seeds *seeds, FuzzCase *c) {
  const Seed *s = pick_seed(r, seeds), *donor = pick_seed(r, seeds);
  const SeedInfo *si = s->user, *di = donor->user;
  buf_set(&c->input, s->data.p, s->data.n);
  int mode = (int)rng_below(r, 100); // numbers 15%, tree 45%, bytes 30%, tree and bytes 10%
  bool nums = mode < 15 && si->tree && mutate_json_numbers(r, &c->input);
  bool tree =
      !nums && (mode < 60 || mode >= 90) && si->tree && mutate_json_text(r, &c->input, di->tree);
  bool bytes = !nums && (mode >= 60 || !tree);
  if (bytes) mutate_bytes(r, &c->input, &donor->data, DICT, (int)(sizeof DICT / sizeof DICT[0]));
  const char *how = nums   ? "json numbers"
                    : tree ? (bytes ? "json tree + bytes" : "json tree")
                           : "bytes";
  static const int STAGES_S[] = {1, 1, 1, 1, 1, 1, 2, 2, 3, 4}; // S: 1 for 60%, up to 4
  c->knob = (uint64_t)STAGES_S[rng_below(r, 10)];
  snprintf(c->what, sizeof c->what, "%s: %s, donor %s, S = %d", s->path, how, donor->path,
           (int)c->knob);
}

int main(int argc, char **argv) {
  const FuzzTarget t = {.name = "fuzz_json",
                        .ext = ".json",
                        .stages = STAGES,
                        .nstages = NSTEPS + 3,
                        .load = load,
                        .unload = unload,
                        .mutate = mutate,
                        .run = run};
  return fuzz_main(argc, argv, &t);
}

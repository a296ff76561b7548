// rules.c: the rules that span several options (and the command, the target), as one table in
// the order they are checked. A row either names an option, whose table row's columns
// (options.c: the commands and targets that accept it, the options it needs) are checked, or
// has a check that returns the broken rule's message, or NULL when it holds; a few rows derive
// what the rest of the driver reads (zb-v's V = 2, the partition's S x V stages, profile's
// output). Every broken rule is reported in one form, usage_error's
//     pipec: MESSAGE
//     Try 'pipec --help' for more information.
// with exit status 2, at the first one broken. The result is a checked Config.
#include <string.h>

#include "../compiler/schedule.h"
#include "driver.h"

typedef struct Rule {
  const char *(*check)(Driver *dr); // the message where the rule is broken, else NULL
  OptId opt;                        // check NULL: the option whose row's columns are checked
} Rule;

static bool is_cmd(const Driver *dr, const char *name) {
  return strcmp(dr->cmd->name, name) == 0;
}

// The command line asks for a pipeline (--stages S > 1, or --split).
static bool multi_given(const Config *c) {
  return c->po.stages > 1 || c->po.nsplit;
}

// A pipeline by --stages, --split or a CSV schedule.
static bool pipeline_given(const Config *c) {
  return multi_given(c) || c->sched_csv;
}

static const char *command_known(Driver *dr) {
  if (dr->cmd) return NULL;
  return arena_printf(&dr->arena,
                      "unknown command '%s' (check, print, plan, compile, run, profile)",
                      dr->cfg.command);
}

static const char *model_given(Driver *dr) {
  if (dr->cfg.npos >= 2) return NULL;
  return arena_printf(&dr->arena, "'%s' needs a model file", dr->cfg.command);
}

static const char *target_known(Driver *dr) {
  const char *t = dr->cfg.target;
  if (strcmp(t, "cpu") == 0 || strcmp(t, "cuda") == 0) return NULL;
  return arena_printf(&dr->arena, "--target: unknown target '%s' (available: cpu, cuda)", t);
}

static const char *precision_target(Driver *dr) {
  const Config *c = &dr->cfg;
  if (c->precision == DT_F32 || strcmp(c->target, "cpu") == 0) return NULL;
  return arena_printf(&dr->arena,
                      "--precision %s: 16-bit training runs the cpu target only (not built yet "
                      "for --target %s)",
                      c->precision == DT_BF16 ? "bf16" : "fp16", c->target);
}

static const char *target_built(Driver *dr) {
  const char *why = codegen_target_missing(dr->cfg.target);
  return why ? arena_printf(&dr->arena, "--target cuda: %s", why) : NULL;
}

static const char *output_named(Driver *dr) {
  const char *o = dr->cfg.out_dir;
  return o && !*o ? "-o: the output directory is an empty string" : NULL;
}

static const char *program_args(Driver *dr) {
  if (!dr->cfg.nprog_args || is_cmd(dr, "run") || is_cmd(dr, "profile")) return NULL;
  return arena_printf(&dr->arena,
                      "arguments after '--' are for 'run' and 'profile' only (got '%s')",
                      dr->cfg.prog_args[0]);
}

static const char *time_passes_text(Driver *dr) {
  if (!dr->cfg.time_passes || dr->cfg.diag_format == DIAG_TEXT) return NULL;
  return "--time-passes prints text to stderr, where --diagnostics-format writes its document: use "
         "one of them";
}

static bool zbv(const Config *c) {
  return c->sched == SCHED_ZBV && !c->sched_csv;
}

static const char *zbv_virtual(Driver *dr) {
  const Config *c = &dr->cfg;
  if (!zbv(c) || !c->virt_given || c->virt == 2) return NULL;
  return arena_printf(&dr->arena,
                      "--virtual %d: --schedule zb-v runs two stages per rank in a V (--virtual 2, "
                      "or none)",
                      c->virt);
}

// zb-v runs two stages per rank: V = 2 implied at S > 1 (at S = 1 the one-stage program).
static const char *derive_zbv(Driver *dr) {
  Config *c = &dr->cfg;
  if (zbv(c) && !c->virt_given && multi_given(c)) c->virt = 2;
  return NULL;
}

static const char *virtual_schedule(Driver *dr) {
  const Config *c = &dr->cfg;
  if (c->virt <= 1 || c->sched == SCHED_INTERLEAVED || c->sched == SCHED_ZBV || c->sched_csv)
    return NULL;
  return arena_printf(&dr->arena,
                      "--virtual %d: only --schedule interleaved (or zb-v, V = 2) runs several "
                      "stages per rank",
                      c->virt);
}

static const char *virtual_stages(Driver *dr) {
  const Config *c = &dr->cfg;
  if (c->virt <= 1 || pipeline_given(c)) return NULL;
  if (c->sched == SCHED_ZBV)
    return arena_printf(&dr->arena,
                        "--virtual %d needs --stages >= 2: zb-v places two stages on each of "
                        "several ranks in a V (at one stage it is the one-stage program: leave "
                        "--virtual out)",
                        c->virt);
  return arena_printf(&dr->arena,
                      "--virtual %d needs --stages >= 2: interleaving runs the stages of several "
                      "ranks",
                      c->virt);
}

// profile: a pipeline on the cpu target, built its own way; -o names its costs file.
static const char *profile_setup(Driver *dr) {
  Config *c = &dr->cfg;
  if (!is_cmd(dr, "profile")) return NULL;
  dr->profile = true;
  dr->prof_out = c->out_dir ? c->out_dir : "costs.json";
  c->out_dir = NULL; // the program goes to a temporary directory (commands.c)
  if (!multi_given(c)) return "profile measures a pipeline: it needs --stages >= 2 (or --split)";
  if (strcmp(c->target, "cpu") != 0) return "profile runs the cpu target only";
  if (c->no_build || c->depfile)
    return "profile builds and runs its own program: no --no-build, --depfile";
  return NULL;
}

// --replicas as given: the count, or the uneven form's list.
static const char *reps(Driver *dr) {
  const Config *c = &dr->cfg;
  return c->uneven ? c->rep_list : arena_printf(&dr->arena, "%d", c->replicas);
}

static bool replicated(const Config *c) {
  return c->replicas > 1 || c->uneven;
}

static const char *replicas_target(Driver *dr) {
  const Config *c = &dr->cfg;
  if (!replicated(c) || strcmp(c->target, "cpu") == 0) return NULL;
  return arena_printf(&dr->arena,
                      "--replicas %s: stage replication runs the cpu target only (not built yet "
                      "for --target %s)",
                      reps(dr), c->target);
}

static const char *replicas_with(Driver *dr) {
  const Config *c = &dr->cfg;
  if (!replicated(c) || !(c->topology || is_cmd(dr, "profile"))) return NULL;
  return arena_printf(&dr->arena, "--replicas %s: not supported yet with %s", reps(dr),
                      c->topology ? "--topology" : "profile");
}

static const char *costs_pipeline(Driver *dr) {
  bool profile = is_cmd(dr, "profile");
  if (!dr->cfg.costs_path || (!profile && multi_given(&dr->cfg))) return NULL;
  return arena_printf(&dr->arena,
                      "--costs is for a pipeline's plan, compile or run (--stages >= 2)%s",
                      profile ? ", not profile (it writes one)" : "");
}

// The partition cuts S x V stages (a CSV's: once it is read, commands.c).
static const char *derive_stages(Driver *dr) {
  Config *c = &dr->cfg;
  if (c->virt > 1 && c->po.stages && !c->sched_csv) c->po.stages *= c->virt;
  return NULL;
}

// --recompute's stages exist (with --split or a CSV: checked once the partition has them).
static const char *recompute_stages(Driver *dr) {
  const Config *c = &dr->cfg;
  for (int i = 0; !c->sched_csv && !c->po.nsplit && i < c->po.nrecomp; i++) {
    int nv = c->po.stages > 1 ? c->po.stages : 1;
    if (c->po.recomp[i] >= nv)
      return arena_printf(&dr->arena,
                          "--recompute %d: no such stage (the pipeline has %d stage%s: 0 to %d)",
                          c->po.recomp[i], nv, nv == 1 ? "" : "s", nv - 1);
  }
  return NULL;
}

static const char *depfile_named(Driver *dr) {
  const char *d = dr->cfg.depfile;
  return d && !*d ? "--depfile: the file name is an empty string" : NULL;
}

static const char *export_csv_pipeline(Driver *dr) {
  if (!dr->cfg.export_csv || pipeline_given(&dr->cfg)) return NULL;
  return "--export-csv writes a pipeline schedule: it needs --stages >= 2 (or --split)";
}

static const char *plan_out_pipeline(Driver *dr) {
  const Config *c = &dr->cfg;
  if (!(c->svg || c->json) || pipeline_given(c)) return NULL;
  return arena_printf(&dr->arena, "--%s draws a pipeline plan: it needs --stages >= 2 (or --split)",
                      c->svg ? "svg" : "json");
}

// What the passes read of the command line.
static const char *derive_model(Driver *dr) {
  Config *c = &dr->cfg;
  c->model = c->positional[1];
  c->po.sched = c->po.est_sched = (int)c->sched;
  c->po.virt = c->virt;
  return NULL;
}

// The rules, in the order they are checked.
#define RULE(check)                                                                                \
  { check, NOPTS } // a rule of its own
#define COLUMNS(opt)                                                                               \
  { NULL, opt } // an option's columns (options.c)

static const Rule rules[] = {
    COLUMNS(O_WEIGHTS),        // --weights is import's (which ran before these)
    RULE(command_known),       // a command pipec has
    RULE(model_given),         // and its model file
    RULE(target_known),        // --target cpu or cuda
    RULE(precision_target),    // --precision bf16/fp16: cpu only
    RULE(target_built),        // cuda: the toolkit was found at build time
    COLUMNS(O_CUDA_ARCH),      // --cuda-arch: cuda only
    COLUMNS(O_MARCH),          // --march=native: cpu only
    RULE(output_named),        // -o ''
    RULE(program_args),        // -- ARGS: run, profile
    RULE(select_passes),       // --dump-after, --stop-after (passes.c)
    RULE(time_passes_text),    // --time-passes with --diagnostics-format json/sarif
    RULE(zbv_virtual),         // zb-v: V = 2
    RULE(derive_zbv),          // zb-v: V = 2 implied
    RULE(virtual_schedule),    // --virtual: interleaved or zb-v
    RULE(virtual_stages),      // --virtual: a pipeline
    RULE(profile_setup),       // profile: a cpu pipeline, its own build
    RULE(replicas_target),     // --replicas: cpu only
    RULE(replicas_with),       // --replicas: not with --topology, profile
    RULE(costs_pipeline),      // --costs: a pipeline's plan, compile or run
    RULE(derive_stages),       // S x V stages
    RULE(recompute_stages),    // --recompute STAGES exist
    COLUMNS(O_NO_BUILD),       // --no-build: compile
    COLUMNS(O_DEPFILE),        // --depfile: compile, run
    RULE(depfile_named),       // --depfile ''
    COLUMNS(O_TRACE),          // --trace: plan --svg
    COLUMNS(O_TRACE_STEP),     // --trace-step: plan --svg --trace
    COLUMNS(O_SVG),            // --svg: plan
    COLUMNS(O_JSON),           // --json: plan
    COLUMNS(O_EXPORT_CSV),     // --export-csv: plan
    RULE(export_csv_pipeline), // --export-csv: a pipeline
    RULE(plan_out_pipeline),   // --svg, --json: a pipeline
    RULE(derive_model),        // the model, the partitioner's schedule
};

int rules_check(Driver *dr) {
  dr->cfg.command = dr->cfg.positional[0];
  dr->cmd = command_find(dr->cfg.command);
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
    const char *msg = rules[i].check ? rules[i].check(dr) : option_misuse(dr, rules[i].opt);
    if (msg) return driver_usage_error("%s", msg);
  }
  return 0;
}

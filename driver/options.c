// options.c: pipec's options as one table. Each row is an option: its long name and short
// letter, whether it takes an argument, the parser that reads the argument into the Config
// field it sets (the generic parsers take the field's offset), the commands and the targets
// that accept it, the options it needs, each with the message that says so. options_parse feeds
// getopt_long from the table and calls each row's parser; rules.c checks the rows' columns
// (option_misuse) in its order, among the rules that span several options.
//
// A parser returns -1 to go on, or the exit status: a usage error's (usage_error), or 0 after
// --help, --version and --list-ops, which print and end.
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../compiler/schedule.h"
#include "../ir/ops.h"
#include "driver.h"

enum { GO_ON = -1, LONG_BASE = 256 }; // a parser's "go on"; getopt values: LONG_BASE + row

typedef struct OptRow OptRow;
typedef int (*OptParse)(Driver *dr, const OptRow *row, const char *arg);

// An option another needs, and the message when it is missing.
typedef struct OptNeed {
  OptId opt;       // the option needed (0 with msg NULL: none)
  const char *msg; // the usage error (no format)
} OptNeed;

struct OptRow {
  const char *name;    // --NAME
  char letter;         // -L (0: none)
  bool arg;            // takes an argument
  OptParse parse;      // reads the argument into the Config
  size_t field;        // the Config field it sets (offsetof), for the generic parsers
  unsigned commands;   // the CMD_ bits of the commands that accept it (0: every command)
  const char *cmd_msg; // the usage error for another command (%s: the command)
  const char *targets; // the --target that accepts it (NULL: any)
  const char *tgt_msg; // the usage error for another target (no format)
  OptNeed needs[2];    // options it needs, checked in order
};

int driver_usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "pipec: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nTry 'pipec --help' for more information.\n");
  va_end(ap);
  return EXIT_USAGE;
}

#define FIELD(T, dr, row) ((T *)((char *)&(dr)->cfg + (row)->field))

// A decimal integer in [lo, hi] (the whole string).
static bool parse_count(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
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

// ---------------------------------------------------------------------------------------------
// The generic parsers: the field is a string, a flag, or a list with its count after it.

static int set_string(Driver *dr, const OptRow *row, const char *arg) {
  *FIELD(const char *, dr, row) = arg;
  return GO_ON;
}

static int set_flag(Driver *dr, const OptRow *row, const char *arg) {
  (void)arg;
  *FIELD(bool, dr, row) = true;
  return GO_ON;
}

// A file name: not empty.
static int set_file(Driver *dr, const OptRow *row, const char *arg) {
  if (!*arg) return driver_usage_error("--%s: the file name is an empty string", row->name);
  return set_string(dr, row, arg);
}

// An output file of plan: not empty, not an option ("--svg --json F": the name was forgotten).
static int set_out_file(Driver *dr, const OptRow *row, const char *arg) {
  if (!*arg) return driver_usage_error("--%s: the file name is an empty string", row->name);
  if (strncmp(arg, "--", 2) == 0)
    return driver_usage_error("--%s: expected a file name, got the option '%s'", row->name, arg);
  return set_string(dr, row, arg);
}

// A repeatable option: the list field (const char **), its count (int) right after it.
static int append(Driver *dr, const OptRow *row, const char *arg) {
  const char **list = *FIELD(const char **, dr, row);
  int *n = (int *)((char *)&dr->cfg + row->field + sizeof(const char **));
  list[(*n)++] = arg;
  return GO_ON;
}

// --batch, --microbatches, --steps: --set KEY=VALUE under another name.
static int set_training(Driver *dr, const OptRow *row, const char *arg) {
  dr->cfg.sets[dr->cfg.nsets++] = arena_printf(&dr->arena, "%s=%s", row->name, arg);
  return GO_ON;
}

// ---------------------------------------------------------------------------------------------
// The parsers of one option each

static int parse_cuda_arch(Driver *dr, const OptRow *row, const char *arg) {
  if (!arch_list_ok(arg))
    return driver_usage_error("--cuda-arch: expected compute capabilities like 80,90, got '%s'",
                              arg);
  return set_string(dr, row, arg);
}

static int parse_comm(Driver *dr, const OptRow *row, const char *arg) {
  (void)dr, (void)row;
  if (strcmp(arg, "mpi") != 0)
    return driver_usage_error("--comm: unknown transport '%s' (available: mpi; nccl is not built "
                              "yet, docs/cuda.md)",
                              arg);
  return GO_ON;
}

static int parse_march(Driver *dr, const OptRow *row, const char *arg) {
  if (strcmp(arg, "native") != 0)
    return driver_usage_error("--march: unknown value '%s' (available: native)", arg);
  return set_flag(dr, row, arg);
}

static int parse_trace_step(Driver *dr, const OptRow *row, const char *arg) {
  (void)row;
  char *end;
  long v = strtol(arg, &end, 10);
  if (!*arg || *end || v < 0 || v > INT32_MAX)
    return driver_usage_error("--trace-step: expected a step number (0, 1, ...), got '%s'", arg);
  dr->cfg.trace_step = (int)v;
  return GO_ON;
}

static int parse_recompute(Driver *dr, const OptRow *row, const char *arg) {
  (void)row;
  int *st, n;
  const char *err = recompute_parse(arg, &dr->arena, &st, &n);
  if (err) return driver_usage_error("%s", err);
  dr->cfg.po.recomp = st, dr->cfg.po.nrecomp = n;
  return GO_ON;
}

// --dump-after: repeated, the lists add up.
static int parse_dump_after(Driver *dr, const OptRow *row, const char *arg) {
  (void)row;
  const char *d = dr->cfg.dump_after;
  dr->cfg.dump_after = d ? arena_printf(&dr->arena, "%s,%s", d, arg) : arg;
  return GO_ON;
}

static int parse_stages(Driver *dr, const OptRow *row, const char *arg) {
  (void)row;
  int64_t v;
  if (!parse_count(arg, 1, 1 << 16, &v))
    return driver_usage_error("--stages: expected a number of stages from 1 to 65536, got '%s'",
                              arg);
  dr->cfg.po.stages = (int)v;
  return GO_ON;
}

static int parse_precision(Driver *dr, const OptRow *row, const char *arg) {
  (void)row;
  static const struct {
    const char *name; // as given
    DType dt;         // the storage type
  } known[] = {{"f32", DT_F32}, {"bf16", DT_BF16}, {"fp16", DT_F16}};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strcmp(arg, known[i].name) == 0) {
      dr->cfg.precision = known[i].dt;
      return GO_ON;
    }
  return driver_usage_error("--precision: unknown precision '%s' (expected f32, bf16 or fp16)",
                            arg);
}

// --replicas D0,D1,..: per-stage counts, checked against S and M in the autodiff pass.
static int parse_replica_list(Config *c, Arena *a, const char *arg) {
  int n = 1;
  for (const char *p = arg; *p; p++) n += *p == ',';
  c->rep_counts = ARENA_ARRAY(a, int, n);
  c->nrep_counts = 0, c->rep_list = arg, c->replicas = 0;
  for (const char *p = arg;; p++) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    char *one = arena_printf(a, "%.*s", (int)len, p);
    int64_t v;
    if (!parse_count(one, 1, 1 << 16, &v))
      return driver_usage_error("--replicas %s: expected a replica count from 1 to 65536 per "
                                "stage, separated by commas, got '%s'",
                                arg, one);
    c->rep_counts[c->nrep_counts++] = (int)v;
    if (!e) break;
    p = e;
  }
  bool same = true;
  for (int k = 1; k < n; k++) same &= c->rep_counts[k] == c->rep_counts[0];
  if (same) c->replicas = c->rep_counts[0]; // the uniform form
  c->uneven = !same;                        // PipeDream's uneven form (uneven.c)
  return GO_ON;
}

static int parse_replicas(Driver *dr, const OptRow *row, const char *arg) {
  (void)row;
  Config *c = &dr->cfg;
  if (strchr(arg, ',')) return parse_replica_list(c, &dr->arena, arg);
  int64_t v;
  if (!parse_count(arg, 1, 1 << 16, &v))
    return driver_usage_error("--replicas: expected a number of replicas from 1 to 65536, got '%s'",
                              arg);
  c->replicas = (int)v, c->rep_list = NULL, c->nrep_counts = 0, c->uneven = false;
  return GO_ON;
}

static int parse_schedule(Driver *dr, const OptRow *row, const char *arg) {
  (void)row;
  size_t n = strlen(arg);
  dr->cfg.sched_csv = NULL;
  if (sched_parse(arg, &dr->cfg.sched)) return GO_ON;
  if (n > 4 && strcasecmp(arg + n - 4, ".csv") == 0) { // a custom schedule's file
    dr->cfg.sched_csv = arg;
    return GO_ON;
  }
  return driver_usage_error("--schedule: unknown schedule '%s' (gpipe, 1f1b, interleaved, zb-h1, "
                            "zb-v, or a FILE.csv)",
                            arg);
}

static int parse_virtual(Driver *dr, const OptRow *row, const char *arg) {
  (void)row;
  int64_t v;
  if (!parse_count(arg, 1, 64, &v))
    return driver_usage_error("--virtual: expected stages per rank from 1 to 64, got '%s'", arg);
  dr->cfg.virt = (int)v;
  dr->cfg.virt_given = true;
  return GO_ON;
}

// --split: repeated, the lists add up.
static int parse_split(Driver *dr, const OptRow *row, const char *arg) {
  (void)row;
  PartitionOptions *po = &dr->cfg.po;
  for (const char *q = arg;;) {
    size_t n = strcspn(q, ",");
    if (n == 0) return driver_usage_error("--split: an empty name in '%s'", arg);
    po->split[po->nsplit++] = arena_printf(&dr->arena, "%.*s", (int)n, q);
    if (!q[n]) break;
    q += n + 1;
  }
  return GO_ON;
}

// --flops-rate GFLOP/s, --bandwidth GB/s: positive numbers, kept per second.
static int parse_rate(Driver *dr, const OptRow *row, const char *arg) {
  bool flops = row->field == offsetof(Config, po.flops_rate);
  char *end;
  errno = 0;
  double v = strtod(arg, &end);
  if (errno || end == arg || *end || !(v > 0) || v > 1e12)
    return driver_usage_error("--%s: expected a positive number (%s), got '%s'", row->name,
                              flops ? "GFLOP/s" : "GB/s", arg);
  *FIELD(double, dr, row) = v * 1e9;
  return GO_ON;
}

static int parse_mem_cap(Driver *dr, const OptRow *row, const char *arg) {
  (void)row;
  int64_t v;
  if (!parse_count(arg, 1, INT64_MAX, &v))
    return driver_usage_error("--mem-cap: expected a number of bytes, got '%s'", arg);
  dr->cfg.po.mem_cap = v;
  return GO_ON;
}

static int parse_diag_format(Driver *dr, const OptRow *row, const char *arg) {
  (void)row;
  if (!diag_format_parse(arg, &dr->cfg.diag_format))
    return driver_usage_error("--diagnostics-format: unknown format '%s' (text, json, sarif)", arg);
  return GO_ON;
}

static int print_help(Driver *dr, const OptRow *row, const char *arg) {
  (void)dr, (void)row, (void)arg;
  driver_usage(stdout);
  return 0;
}

// The op registry's user-visible ops, one per line (docs, tests).
static int print_ops(Driver *dr, const OptRow *row, const char *arg) {
  (void)dr, (void)row, (void)arg;
  for (int i = 0; i < op_count(); i++)
    if (!op_at(i)->internal) printf("%s\n", op_at(i)->name);
  return 0;
}

static int print_version(Driver *dr, const OptRow *row, const char *arg) {
  (void)dr, (void)row, (void)arg;
  printf("pipec %s\nmodel format: version %d\ntargets: %s\n", PIPEC_VERSION, MODEL_FORMAT_VERSION,
         codegen_targets());
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The table

#define F(field)     offsetof(Config, field)
#define TRACE_MSG(o) "--" o " draws a run's times: it is for 'plan' with --svg FILE"

// The columns every row has: --NAME, -LETTER, whether it takes an argument, the parser, the field.
#define OPT(n, l, a, p, f) .name = n, .letter = l, .arg = a, .parse = p, .field = f

static const OptRow options[NOPTS] = {
    [O_DEFINE] = {OPT("define", 'D', true, append, F(defines))},
    [O_DUMP_AFTER] = {OPT("dump-after", 0, true, parse_dump_after, 0)},
    [O_STOP_AFTER] = {OPT("stop-after", 0, true, set_string, F(stop_after))},
    [O_OUTPUT] = {OPT("output", 'o', true, set_string, F(out_dir))},
    [O_TARGET] = {OPT("target", 0, true, set_string, F(target))},
    [O_SET] = {OPT("set", 0, true, append, F(sets))},
    [O_BATCH] = {OPT("batch", 0, true, set_training, 0)},
    [O_MICROBATCH] = {OPT("microbatches", 0, true, set_training, 0)},
    [O_STEPS] = {OPT("steps", 0, true, set_training, 0)},
    [O_NO_BUILD] = {OPT("no-build", 0, false, set_flag, F(no_build)), .commands = CMD_COMPILE,
                    .cmd_msg = "--no-build is for 'compile' (got '%s', which builds the program)"},
    [O_NO_FUSE] = {OPT("no-fuse", 0, false, set_flag, F(no_fuse))},
    [O_TRAINING] = {OPT("training", 0, true, set_file, F(training_file))},
    [O_WEIGHTS] = {OPT("weights", 0, true, set_file, F(weights_file)), .commands = CMD_IMPORT,
                   .cmd_msg = "--weights is for 'import' (where the archive's weights go)"},
    [O_DATA_FILE] = {OPT("data-file", 0, true, append, F(data_files))},
    [O_DEPFILE] = {OPT("depfile", 0, true, set_string, F(depfile)),
                   .commands = CMD_COMPILE | CMD_RUN | CMD_PROFILE,
                   .cmd_msg = "--depfile is for 'compile' and 'run' (got '%s', which writes no "
                              "files)"},
    [O_SVG] = {OPT("svg", 0, true, set_out_file, F(svg)), .commands = CMD_PLAN,
               .cmd_msg = "--svg is for 'plan' (got '%s')"},
    [O_JSON] = {OPT("json", 0, true, set_out_file, F(json)), .commands = CMD_PLAN,
                .cmd_msg = "--json is for 'plan' (got '%s')"},
    [O_EXPORT_CSV] = {OPT("export-csv", 0, true, set_out_file, F(export_csv)), .commands = CMD_PLAN,
                      .cmd_msg = "--export-csv is for 'plan' (got '%s')"},
    [O_TOPOLOGY] = {OPT("topology", 0, true, set_file, F(topology))},
    [O_TRACE] = {OPT("trace", 0, true, set_file, F(trace)), .commands = CMD_PLAN,
                 .cmd_msg = TRACE_MSG("trace"), .needs = {{O_SVG, TRACE_MSG("trace")}}},
    [O_TRACE_STEP] = {OPT("trace-step", 0, true, parse_trace_step, 0), .commands = CMD_PLAN,
                      .cmd_msg = TRACE_MSG("trace-step"),
                      .needs = {{O_SVG, TRACE_MSG("trace-step")},
                                {O_TRACE, "--trace-step: give --trace FILE too"}}},
    [O_LIST_OPS] = {OPT("list-ops", 0, false, print_ops, 0)},
    [O_TIME_PASSES] = {OPT("time-passes", 0, false, set_flag, F(time_passes))},
    [O_HELP] = {OPT("help", 'h', false, print_help, 0)},
    [O_VERSION] = {OPT("version", 'V', false, print_version, 0)},
    [O_MARCH] = {OPT("march", 0, true, parse_march, F(march_native)), .targets = "cpu",
                 .tgt_msg = "--march=native is for the cpu target (the cuda program's host code "
                            "is not the hot path)"},
    [O_STAGES] = {OPT("stages", 0, true, parse_stages, 0)},
    [O_REPLICAS] = {OPT("replicas", 0, true, parse_replicas, 0)},
    [O_PRECISION] = {OPT("precision", 0, true, parse_precision, 0)},
    [O_SPLIT] = {OPT("split", 0, true, parse_split, 0)},
    [O_FLOPS_RATE] = {OPT("flops-rate", 0, true, parse_rate, F(po.flops_rate))},
    [O_BANDWIDTH] = {OPT("bandwidth", 0, true, parse_rate, F(po.bandwidth))},
    [O_MEM_CAP] = {OPT("mem-cap", 0, true, parse_mem_cap, 0)},
    [O_COSTS] = {OPT("costs", 0, true, set_file, F(costs_path))},
    [O_RECOMPUTE] = {OPT("recompute", 0, true, parse_recompute, 0)},
    [O_SCHEDULE] = {OPT("schedule", 0, true, parse_schedule, 0)},
    [O_VIRTUAL] = {OPT("virtual", 0, true, parse_virtual, 0)},
    [O_CUDA_ARCH] = {OPT("cuda-arch", 0, true, parse_cuda_arch, F(cuda_arch)), .targets = "cuda",
                     .tgt_msg = "--cuda-arch needs --target cuda"},
    [O_COMM] = {OPT("comm", 0, true, parse_comm, 0)},
    [O_DIAG_FORMAT] = {OPT("diagnostics-format", 0, true, parse_diag_format, 0)},
};

const char *option_name(OptId id) {
  return options[id].name;
}

const char *option_misuse(Driver *dr, OptId id) {
  const OptRow *row = &options[id];
  const Config *c = &dr->cfg;
  if (!c->given[id]) return NULL;
  if (row->commands && !(row->commands & (dr->cmd ? dr->cmd->bit : 0)))
    return arena_printf(&dr->arena, row->cmd_msg, dr->cmd ? dr->cmd->name : c->command);
  if (row->targets && strcmp(c->target, row->targets) != 0) return row->tgt_msg;
  for (int k = 0; k < 2 && row->needs[k].msg; k++)
    if (!c->given[row->needs[k].opt]) return row->needs[k].msg;
  return NULL;
}

// ---------------------------------------------------------------------------------------------
// The parse

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

// The Config's defaults and lists sized for the command line; the program's arguments (after
// "--", pipec run) set apart. Returns the arguments left to pipec.
static int config_init(Driver *dr, int argc, char **argv) {
  Config *c = &dr->cfg;
  c->trace_step = -1;
  c->sched = SCHED_1F1B;
  c->virt = 1;
  c->defines = ARENA_ARRAY(&dr->arena, const char *, argc + 1);
  c->sets = ARENA_ARRAY(&dr->arena, const char *, argc + 1);
  c->data_files = ARENA_ARRAY(&dr->arena, const char *, argc + 1);
  size_t nsplit_max = 1; // every comma and every argument could start a --split name
  for (int i = 0; i < argc; i++) nsplit_max += strlen(argv[i]) + 1;
  c->po.split = ARENA_ARRAY(&dr->arena, const char *, nsplit_max);
  c->po.flops_rate = PART_DEFAULT_GFLOPS * 1e9;
  c->po.bandwidth = PART_DEFAULT_GBYTES_S * 1e9;
  c->target = "cpu";
  c->cmdline = join_args(&dr->arena, argc, argv);
  for (int i = 1; i < argc; i++) // everything after "--" belongs to the generated program
    if (strcmp(argv[i], "--") == 0) {
      c->prog_args = argv + i + 1;
      c->nprog_args = argc - i - 1;
      return i;
    }
  return argc;
}

int options_parse(Driver *dr, int argc, char **argv) {
  _Static_assert(offsetof(Config, ndefines) == offsetof(Config, defines) + sizeof(char **) &&
                     offsetof(Config, nsets) == offsetof(Config, sets) + sizeof(char **) &&
                     offsetof(Config, ndata_files) ==
                         offsetof(Config, data_files) + sizeof(char **),
                 "append: a list's count follows it");
  struct option longopts[NOPTS + 1];
  for (int i = 0; i < NOPTS; i++)
    longopts[i] = (struct option){options[i].name, options[i].arg ? required_argument : no_argument,
                                  NULL, LONG_BASE + i};
  longopts[NOPTS] = (struct option){NULL, 0, NULL, 0};
  argc = config_init(dr, argc, argv);
  Config *c = &dr->cfg;
  int k;
  opterr = 0;
  while ((k = getopt_long(argc, argv, ":D:o:hV", longopts, NULL)) != -1) {
    int id = k - LONG_BASE;
    for (int i = 0; i < NOPTS && k < LONG_BASE; i++)
      if (options[i].letter == k) id = i;
    if (k == ':') return driver_usage_error("option '%s' needs an argument", argv[optind - 1]);
    if (id < 0 || id >= NOPTS) return driver_usage_error("unknown option '%s'", argv[optind - 1]);
    c->given[id] = true;
    int rc = options[id].parse(dr, &options[id], optarg);
    if (rc != GO_ON) return rc;
  }
  for (int i = optind; i < argc; i++) {
    if (c->npos == 2) return driver_usage_error("unexpected argument '%s'", argv[i]);
    c->positional[c->npos++] = argv[i];
  }
  return GO_ON;
}

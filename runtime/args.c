// args.c: the command line of generated programs.
//
// Every flag takes its default from *o (the model's training section); numbers are parsed
// strictly (the whole string, in range). A bad flag prints one line
//     PROGRAM: --steps: expected a non-negative integer, got 'abc'
// to stderr and exits with status 2; --help prints the usage to stdout and exits with status 0.
// .npy tables have one file per fed input (o->nfiles): --data is the first one's, --labels the
// one target's (where the model has one), --data-file NAME=PATH any one's. Giving the first one
// (--data, --predict) needs every other one too, so that new rows never pair silently with the
// model's old files.
#include "pipert.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *prog_name = "program";

__attribute__((format(printf, 1, 2), noreturn)) static void usage_error(const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "%s: ", prog_name);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  exit(2);
}

// Whole-string signed integer in [lo, hi].
static int64_t parse_int(const char *flag, const char *s, int64_t lo, int64_t hi,
                         const char *what) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (s[0] == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi || s[0] == ' ' ||
      s[0] == '\t' || s[0] == '+')
    usage_error("--%s: expected %s, got '%s'", flag, what, s);
  return (int64_t)v;
}

static double parse_double(const char *flag, const char *s, bool positive) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  bool bad = s[0] == '\0' || *end != '\0' || errno != 0 || !isfinite(v) || s[0] == ' ' ||
             s[0] == '\t' || (positive ? !(v > 0) : !(v >= 0));
  if (bad)
    usage_error("--%s: expected a %s number, got '%s'", flag,
                positive ? "positive" : "non-negative", s);
  return v;
}

static uint64_t parse_seed(const char *s) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0)
    usage_error("--seed: expected a non-negative integer below 2^64, got '%s'", s);
  return (uint64_t)v;
}

static const char *parse_path(const char *flag, const char *s) {
  if (s[0] == '\0') usage_error("--%s: expected a file name, got ''", flag);
  return s;
}

// --data-file NAME=PATH: the .npy file of fed input NAME (index 0: --data).
static void parse_data_file(PrOptions *o, const char *s, bool *given) {
  const char *eq = strchr(s, '=');
  if (o->nfiles == 0)
    usage_error("--data-file: this model's data is not .npy files (only .npy tables have one file "
                "per input)");
  if (!eq || eq == s) usage_error("--data-file: expected NAME=PATH, got '%s'", s);
  char names[512] = "";
  size_t n = 0;
  for (int k = 0; k < o->nfiles; k++) {
    if (strlen(o->file_name[k]) == (size_t)(eq - s) && !strncmp(o->file_name[k], s, (size_t)(eq - s))) {
      const char *path = parse_path("data-file", eq + 1);
      if (k == 0)
        o->data = path;
      else
        o->file[k] = path;
      given[k] = true;
      return;
    }
    if (n < sizeof names)
      n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", k ? ", " : "", o->file_name[k]);
  }
  usage_error("--data-file: '%.*s' is not an input of this model's .npy data (%s)", (int)(eq - s),
              s, names);
}

// --trace-steps A:B, 0 <= A < B (whole numbers).
static void parse_steps(const char *s, int64_t *first, int64_t *end) {
  const char *colon = strchr(s, ':');
  char a[32], b[32];
  bool ok = colon && colon - s < (ptrdiff_t)sizeof a && strlen(colon + 1) < sizeof b;
  if (ok) {
    memcpy(a, s, (size_t)(colon - s));
    a[colon - s] = '\0';
    strcpy(b, colon + 1);
    for (const char *p = a; *p && ok; p++) ok = *p >= '0' && *p <= '9';
    for (const char *p = b; *p && ok; p++) ok = *p >= '0' && *p <= '9';
    ok = ok && a[0] && b[0];
  }
  if (ok) {
    errno = 0;
    *first = (int64_t)strtoll(a, NULL, 10);
    *end = (int64_t)strtoll(b, NULL, 10);
    ok = errno == 0 && *first < *end;
  }
  if (!ok)
    usage_error("--trace-steps: expected FIRST:END with 0 <= FIRST < END (steps counted from 0, "
                "END not traced), got '%s'",
                s);
}

static void print_usage(const PrOptions *o, const char *doc) {
  printf("Usage: %s [options]\n", prog_name);
  if (doc && doc[0]) printf("%s%s", doc, doc[strlen(doc) - 1] == '\n' ? "" : "\n");
  printf("\nOptions (defaults from the model file in brackets):\n");
  printf("  --steps N          training steps [%lld]\n", (long long)o->steps);
  printf("  --lr X             peak learning rate [%g]\n", o->lr);
  printf("  --min-lr X         learning rate at the end of the cosine decay [%g]\n", o->min_lr);
  printf("  --seed N           seed of the initialisation and the data order [%" PRIu64 "]\n",
         o->seed);
  printf("  --data PATH        training data (overrides the model's data path)%s%s%s\n",
         o->data ? " [" : "", o->data ? o->data : "", o->data ? "]" : "");
  if (o->label_file > 0)
    printf("  --labels PATH      .npy labels of the --data features (required with --data) [%s]\n",
           o->file[o->label_file]);
  if (o->nfiles > 0) {
    printf("  --data-file NAME=PATH\n"
           "                     the .npy file of input NAME (repeatable; giving the first file\n"
           "                     needs every other one too) [");
    for (int k = 0; k < o->nfiles; k++)
      printf("%s%s=%s", k ? ", " : "", o->file_name[k], k ? o->file[k] : o->data);
    printf("]\n");
  }
  printf(
      "  --init F|DIR       initial parameters from a safetensors file or a sharded directory\n");
  if (o->weights) printf("                     [the model's weights: %s]\n", o->weights);
  printf("  --save F|DIR/      write the parameters to a safetensors file at the end (DIR/: one\n"
         "                     shard per rank and model.safetensors.index.json)\n");
  printf("  --resume F|DIR     resume from a checkpoint (parameters, optimizer state, step)\n");
  printf("  --eval-every N     evaluate every N steps, 0 = only at the end [%lld]\n",
         (long long)o->eval_every);
  printf("  --eval-batches N   batches per evaluation, 0 = the whole validation split [%lld]\n",
         (long long)o->eval_batches);
  printf("  --log-every N      progress line every N steps [%lld]\n", (long long)o->log_every);
  printf("  --threads N        kernel threads (results do not depend on it), 0 = OpenMP default "
         "[%d]\n",
         o->threads);
  printf("  --loss-log F       write \"step loss\" per step to F\n");
  printf("  --quiet            no progress lines\n");
  printf(
      "  --stats            pipeline: per-rank statistics every log interval (compute, waits,\n"
      "                     bytes); the whole run's table is printed at the end unless --quiet\n");
  printf("  --timeout SECONDS  pipelines: stop the job when its start or a message takes longer,\n"
         "                     naming the rank that does not respond, 0 = never [%g]\n",
         o->timeout);
  printf(
      "  --trace FILE       write a Chrome trace (Perfetto) of some steps to FILE\n"
      "  --trace-steps A:B  the steps --trace records: A to B - 1, counting from 0 [the 3 after\n"
      "                     the first]\n");
  printf("  --gradcheck        compare every parameter gradient with central finite differences\n"
         "                     on one batch and exit (0: all within 1e-3 relative)\n");
  printf("  --profile F        programs built by `pipec profile`: time every action and the\n"
         "                     links, write the medians to F (JSON; docs/pipeline.md)\n");
  printf("  --loss-scale X     fp16 programs: the initial loss scale, a power of two [%g]\n"
         "  --loss-scale-window N  fp16: steps without overflow before the scale doubles "
         "[%lld]\n",
         o->loss_scale, (long long)o->scale_window);
  printf("  --help             this text\n");
}

void pr_parse_args(int argc, char **argv, PrOptions *o, const char *program_doc) {
  if (argc > 0 && argv[0] && argv[0][0]) {
    const char *b = strrchr(argv[0], '/');
    prog_name = b ? b + 1 : argv[0];
  }
  enum {
    O_STEPS = 256,
    O_LR,
    O_MIN_LR,
    O_SEED,
    O_DATA,
    O_LABELS,
    O_DATA_FILE,
    O_INIT,
    O_SAVE,
    O_RESUME,
    O_EVAL_EVERY,
    O_EVAL_BATCHES,
    O_LOG_EVERY,
    O_THREADS,
    O_LOSS_LOG,
    O_QUIET,
    O_STATS,
    O_PREDICT,
    O_OUT,
    O_GRADCHECK,
    O_TIMEOUT,
    O_TRACE,
    O_TRACE_STEPS,
    O_PROFILE,
    O_LOSS_SCALE,
    O_SCALE_WINDOW,
    O_HELP
  };
  static const struct option longopts[] = {
      {"steps", required_argument, NULL, O_STEPS},
      {"lr", required_argument, NULL, O_LR},
      {"min-lr", required_argument, NULL, O_MIN_LR},
      {"seed", required_argument, NULL, O_SEED},
      {"data", required_argument, NULL, O_DATA},
      {"labels", required_argument, NULL, O_LABELS},
      {"data-file", required_argument, NULL, O_DATA_FILE},
      {"init", required_argument, NULL, O_INIT},
      {"save", required_argument, NULL, O_SAVE},
      {"resume", required_argument, NULL, O_RESUME},
      {"eval-every", required_argument, NULL, O_EVAL_EVERY},
      {"eval-batches", required_argument, NULL, O_EVAL_BATCHES},
      {"log-every", required_argument, NULL, O_LOG_EVERY},
      {"threads", required_argument, NULL, O_THREADS},
      {"loss-log", required_argument, NULL, O_LOSS_LOG},
      {"quiet", no_argument, NULL, O_QUIET},
      {"stats", no_argument, NULL, O_STATS},
      {"predict", required_argument, NULL, O_PREDICT},
      {"out", required_argument, NULL, O_OUT},
      {"gradcheck", no_argument, NULL, O_GRADCHECK},
      {"timeout", required_argument, NULL, O_TIMEOUT},
      {"trace", required_argument, NULL, O_TRACE},
      {"trace-steps", required_argument, NULL, O_TRACE_STEPS},
      {"profile", required_argument, NULL, O_PROFILE},
      {"loss-scale", required_argument, NULL, O_LOSS_SCALE},
      {"loss-scale-window", required_argument, NULL, O_SCALE_WINDOW},
      {"help", no_argument, NULL, O_HELP},
      {NULL, 0, NULL, 0}};
  // The model file has no watchdog setting: the default is the runtime's.
  if (!o->timeout_set) o->timeout = PR_DEFAULT_TIMEOUT, o->timeout_set = true;
  if (o->loss_scale == 0) o->loss_scale = PR_DEFAULT_LOSS_SCALE;
  if (o->scale_window == 0) o->scale_window = PR_DEFAULT_SCALE_WINDOW;
  opterr = 0;
  optind = 0; // full re-initialisation (GNU), so that the parser can run more than once
  const int64_t BIG = INT64_MAX;
  bool given[PR_MAX_FEEDS] = {false}; // .npy files given on the command line
  for (;;) {
    int prev = optind ? optind : 1;
    int c = getopt_long(argc, argv, ":", longopts, NULL);
    if (c == -1) break;
    const char *a = optarg;
    switch (c) {
    case O_STEPS:
      o->steps = parse_int("steps", a, 0, BIG, "a non-negative integer");
      break;
    case O_LR:
      o->lr = parse_double("lr", a, true);
      break;
    case O_MIN_LR:
      o->min_lr = parse_double("min-lr", a, false);
      break;
    case O_SEED:
      o->seed = parse_seed(a);
      break;
    case O_DATA:
      o->data = parse_path("data", a);
      given[0] = true;
      break;
    case O_LABELS:
      if (o->label_file <= 0)
        usage_error("--labels: this model's data has no separate labels file (only .npy tables "
                    "do)");
      o->file[o->label_file] = parse_path("labels", a);
      given[o->label_file] = true;
      break;
    case O_DATA_FILE:
      parse_data_file(o, a, given);
      break;
    case O_INIT:
      o->init = parse_path("init", a);
      break;
    case O_SAVE:
      o->save = parse_path("save", a);
      break;
    case O_RESUME:
      o->resume = parse_path("resume", a);
      break;
    case O_EVAL_EVERY:
      o->eval_every = parse_int("eval-every", a, 0, BIG, "a non-negative integer");
      break;
    case O_EVAL_BATCHES:
      o->eval_batches = parse_int("eval-batches", a, 0, BIG, "a non-negative integer");
      break;
    case O_LOG_EVERY:
      o->log_every = parse_int("log-every", a, 1, BIG, "a positive integer");
      break;
    case O_THREADS:
      o->threads = (int)parse_int("threads", a, 0, 4096, "an integer from 0 to 4096");
      o->threads_given = true;
      break;
    case O_LOSS_LOG:
      o->loss_log = parse_path("loss-log", a);
      break;
    case O_QUIET:
      o->quiet = true;
      break;
    case O_STATS:
      o->stats = true;
      break;
    case O_PREDICT:
      o->predict = parse_path("predict", a);
      break;
    case O_OUT:
      o->out = parse_path("out", a);
      break;
    case O_GRADCHECK:
      o->gradcheck = true;
      break;
    case O_TIMEOUT:
      o->timeout = parse_double("timeout", a, false);
      o->timeout_set = true;
      break;
    case O_TRACE:
      o->trace = parse_path("trace", a);
      break;
    case O_TRACE_STEPS:
      parse_steps(a, &o->trace_first, &o->trace_end);
      break;
    case O_PROFILE:
      o->profile = parse_path("profile", a);
      break;
    case O_LOSS_SCALE: {
      o->loss_scale = parse_double("loss-scale", a, true);
      int ex;
      if (frexp(o->loss_scale, &ex) != 0.5 || ex < -23 || ex > 121)
        usage_error("--loss-scale: expected a power of two from 2^-24 to 2^120, got '%s'", a);
      o->scaler_given = true;
      break;
    }
    case O_SCALE_WINDOW:
      o->scale_window = parse_int("loss-scale-window", a, 1, BIG, "a positive integer");
      o->scaler_given = true;
      break;
    case O_HELP:
      print_usage(o, program_doc);
      exit(0);
    case ':':
      usage_error("%s: missing value", argv[prev]);
    default: {
      const char *arg = prev < argc ? argv[prev] : "?";
      if (strncmp(arg, "--", 2) == 0 && strchr(arg, '='))
        usage_error("%.*s: unknown option, or one that takes no value (see --help)",
                    (int)(strchr(arg, '=') - arg), arg);
      usage_error("%s: unknown option (see --help)", arg);
    }
    }
  }
  if (optind < argc) usage_error("unexpected argument '%s'", argv[optind]);
  if (o->trace_end > 0 && !o->trace) usage_error("--trace-steps: give --trace FILE too");
  for (int k = 1; k < o->nfiles; k++) {
    bool labels = k == o->label_file && o->nfiles == 2;
    if (given[0] && !given[k] && labels)
      usage_error("--data: give --labels FILE too (the model's labels '%s' belong to its own "
                  "features)",
                  o->file[k]);
    if (given[0] && !given[k])
      usage_error("--data: give --data-file %s=PATH too (the model's file '%s' belongs to its own "
                  "rows)",
                  o->file_name[k], o->file[k]);
    if (o->predict && !given[k] && labels)
      usage_error("--predict: give --labels FILE too (the .npy table's labels; they are read and "
                  "checked, not used)");
    if (o->predict && !given[k])
      usage_error("--predict: give --data-file %s=PATH too (the .npy file of that input, one row "
                  "per row of DATA)",
                  o->file_name[k]);
  }
  if (o->predict && !o->out) usage_error("--predict: give --out FILE.npy (where the outputs go)");
  if (o->out && !o->predict) usage_error("--out: only --predict DATA writes outputs");
  if (o->predict && o->save) usage_error("--predict trains nothing: drop --save");
  if (o->predict && o->gradcheck) usage_error("--predict and --gradcheck: choose one");
  // The model's "weights" are the initial parameters unless --init or --resume gives others.
  if (!o->init && !o->resume) o->init = o->weights;
  if (o->predict && !o->init && !o->resume)
    usage_error("--predict: give the trained parameters with --init F (or --resume F)");
}

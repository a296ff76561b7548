// pipec driver: command line, then the passes as a visible list of calls with the verifier after
// each one, optional IR dumps (--dump-after=PASS) and pass timings (--time-passes).
//
// Exit status: 0 ok, 1 error in the model (or a run), 2 usage error.
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../ir/ops.h"
#include "passes.h"
#include "program.h"

#ifndef PIPEC_VERSION
#define PIPEC_VERSION "0.0.0"
#endif

enum { EXIT_MODEL = 1, EXIT_USAGE = 2 };

static const char *const pass_names[] = {"expand", "shape", "autodiff", "memplan"};
enum { NPASSES = sizeof pass_names / sizeof pass_names[0] };

typedef struct Driver {
  const char *command;    // check, print, ...
  const char *model;      // model file path
  const char *dump_after; // pass name or NULL
  bool time_passes;       // print pass timings to stderr
  const char **defines;   // -D NAME=VALUE
  int ndefines;           // entries in defines
  const char **sets;      // --set KEY=VALUE (training overrides)
  int nsets;              // entries in sets
  const char *out_dir;    // -o DIR
  const char *target;     // --target
  bool march_native;      // --march=native: build the program for this machine
  char *cmdline;          // the command line as typed (getopt permutes argv)
  char **prog_args;       // run: arguments after "--" for the program
  int nprog_args;         // count
  Diag diag;              // diagnostics for the model file
  Arena arena;            // compiler memory
  Graph graph;            // the IR
  double t0;              // start of the current pass (seconds)
} Driver;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
  fputs(
      "Usage: pipec COMMAND [OPTIONS] MODEL.json\n"
      "\n"
      "pipec compiles a model written as a JSON graph into pipeline-parallel training programs.\n"
      "\n"
      "Commands:\n"
      "  check MODEL     check the model and print a summary (parameters, FLOPs, memory)\n"
      "  print MODEL     print the IR of the model\n"
      "  plan MODEL      print the static memory plan (bytes per region)\n"
      "  compile MODEL   generate the training program and build it into OUT/bin/train\n"
      "  run MODEL [-- PROGRAM-OPTIONS]   compile, build and run it (pass --help after -- for\n"
      "                  the program's own options: --steps, --lr, --data, --init, --save, ...)\n"
      "\n"
      "Options:\n"
      "  -D, --define NAME=VALUE  override the model's dims entry NAME (integer or expression)\n"
      "      --dump-after=PASS    print the IR after PASS (expand, shape, autodiff, memplan)\n"
      "  -o, --output DIR         where compile/run write the program (default out/MODEL-NAME;\n"
      "                           created with missing parents)\n"
      "      --target TARGET      code generation target: cpu (default)\n"
      "      --march=native       build the program for this machine's CPU (faster; the same\n"
      "                           numbers; may not run on another machine). Default: portable\n"
      "                           x86-64\n"
      "      --set KEY=VALUE      override a training setting (steps=100, optimizer.lr=3e-4, ...)\n"
      "      --batch N            = --set batch=N (rows per step)\n"
      "      --microbatches M     = --set microbatches=M\n"
      "      --steps N            = --set steps=N\n"
      "      --time-passes        print the time each pass took to stderr\n"
      "      --list-ops           list the ops of the registry and exit\n"
      "  -h, --help               show this help and exit\n"
      "  -V, --version            show the version and exit\n"
      "\n"
      "Exit status: 0 ok, 1 error in the model, 2 usage error.\n"
      "Model format: docs/model-format.md. Ops: docs/ops.md.\n",
      f);
}

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "pipec: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'pipec --help' for more information.\n");
  return EXIT_USAGE;
}

// Verifier, dump and timing after a pass; false when the pass or the verifier failed.
static bool after_pass(Driver *dr, const char *name, bool ok) {
  double t = now();
  if (dr->time_passes) fprintf(stderr, "pipec: pass %-8s %9.3f ms\n", name, (t - dr->t0) * 1e3);
  if (!ok || dr->diag.errors) return false;
  if (!graph_verify(&dr->graph, &dr->diag)) return false;
  if (dr->dump_after && strcmp(dr->dump_after, name) == 0) graph_print(&dr->graph, stdout);
  dr->t0 = now();
  return true;
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
  for (int i = 0; i < g->nnodes; i++) {
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
  printf("\nnodes        %d\n", g->nnodes);
  printf("forward      %s per sample\n", human(a, sizeof a, flops, "FLOP", false));
  printf("activations  %s per sample\n", human(a, sizeof a, acts, "B", true));
}

// The model name as a directory name: letters, digits, '-', '_', '.'.
static const char *mangle_dir(Arena *a, const char *name) {
  char *s = arena_strdup(a, *name ? name : "model");
  for (char *p = s; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') *p = '_';
  if (s[0] == '.') s[0] = '_';
  return s;
}

static char *join_args(Arena *a, int argc, char **argv) {
  size_t n = 1;
  for (int i = 0; i < argc; i++) n += strlen(argv[i]) + 1;
  char *s = arena_alloc(a, n), *p = s;
  for (int i = 0; i < argc; i++) p += sprintf(p, "%s%s", i ? " " : "", argv[i]);
  return s;
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"define", required_argument, NULL, 'D'},
      {"dump-after", required_argument, NULL, 'd'},
      {"output", required_argument, NULL, 'o'},
      {"target", required_argument, NULL, 'T'},
      {"set", required_argument, NULL, 's'},
      {"batch", required_argument, NULL, 'b'},
      {"microbatches", required_argument, NULL, 'm'},
      {"steps", required_argument, NULL, 'S'},
      {"list-ops", no_argument, NULL, 'L'},
      {"time-passes", no_argument, NULL, 't'},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},
      {"march", required_argument, NULL, 'A'}, // --march=native
      {NULL, 0, NULL, 0},
  };
  Driver dr = {0};
  arena_init(&dr.arena); // everything below is freed at once by arena_free on every exit path
  dr.defines = ARENA_ARRAY(&dr.arena, const char *, argc + 1);
  dr.sets = ARENA_ARRAY(&dr.arena, const char *, argc + 1);
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
    case 'd':
      dr.dump_after = optarg;
      break;
    case 't':
      dr.time_passes = true;
      break;
    case 'h':
      usage(stdout);
      RETURN(0);
    case 'L': // the op registry's user-visible ops, one per line (docs, tests)
      for (int i = 0; i < op_count(); i++)
        if (!op_at(i)->internal) printf("%s\n", op_at(i)->name);
      RETURN(0);
    case 'V':
      printf("pipec %s\n", PIPEC_VERSION);
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
    RETURN(usage_error("%s", "no command given (check, print, plan, compile, run)"));
  }
  dr.command = positional[0];
  bool known = false;
  static const char *const commands[] = {"check", "print", "plan", "compile", "run"};
  for (int i = 0; i < 5; i++) known |= strcmp(dr.command, commands[i]) == 0;
  if (!known)
    rc = usage_error("unknown command '%s' (check, print, plan, compile, run)", dr.command);
  else if (npos < 2)
    rc = usage_error("'%s' needs a model file", dr.command);
  else if (strcmp(dr.target, "cpu") != 0)
    rc = usage_error("--target: unknown target '%s' (available: cpu)", dr.target);
  else if (dr.out_dir && !*dr.out_dir)
    rc = usage_error("%s", "-o: the output directory is an empty string");
  else if (dr.nprog_args && strcmp(dr.command, "run") != 0)
    rc = usage_error("arguments after '--' are for 'run' only (got '%s')", dr.prog_args[0]);
  if (!rc && dr.dump_after) {
    bool ok = false;
    for (int i = 0; i < NPASSES; i++) ok |= strcmp(dr.dump_after, pass_names[i]) == 0;
    if (!ok)
      rc = usage_error("--dump-after: unknown pass '%s' (passes: expand, shape, autodiff, memplan)",
                       dr.dump_after);
  }
  if (rc) {
    RETURN(rc);
  }
  dr.model = positional[1];

  diag_init(&dr.diag, dr.model, stderr);
  dr.diag.excerpts = true; // the source line and a caret under each located message
  graph_init(&dr.graph, &dr.arena);
  ExpandOptions eo = {dr.defines, dr.ndefines};
  Source src;
  dr.t0 = now();

  // The passes, in order.
  bool ok = source_load(&src, &dr.arena, dr.model, &dr.diag);
  if (dr.time_passes)
    fprintf(stderr, "pipec: pass %-8s %9.3f ms\n", "parse", (now() - dr.t0) * 1e3);
  dr.t0 = now();
  ok = ok && after_pass(&dr, "expand", pass_expand(&src, &dr.graph, &eo, &dr.diag));
  ok = ok && after_pass(&dr, "shape", pass_shape(&dr.graph, &dr.diag));

  bool back = strcmp(dr.command, "check") && strcmp(dr.command, "print");
  back |=
      dr.dump_after && (!strcmp(dr.dump_after, "autodiff") || !strcmp(dr.dump_after, "memplan"));
  TrainConfig tc;
  Plan plan;
  if (ok && back) {
    ok = training_parse(&src, &dr.graph, dr.sets, dr.nsets, &tc, &dr.diag) &&
         codegen_check_target(&dr.graph, dr.target, &dr.diag);
    dr.t0 = now();
    ok =
        ok && after_pass(&dr, "autodiff", pass_autodiff(&dr.graph, (int)tc.microbatches, &dr.diag));
    ok = ok && after_pass(&dr, "memplan", plan_memory(&dr.graph, &tc, &plan, &dr.diag));
    if (ok) plan_warn_memory(&plan, &dr.diag);
  }

  if (ok && strcmp(dr.command, "check") == 0) print_summary(&dr.graph);
  if (ok && strcmp(dr.command, "print") == 0 && !dr.dump_after) graph_print(&dr.graph, stdout);
  if (ok && strcmp(dr.command, "plan") == 0) plan_print(&dr.graph, &tc, &plan, stdout);
  int status = ok ? 0 : EXIT_MODEL;
  if (ok && (!strcmp(dr.command, "compile") || !strcmp(dr.command, "run"))) {
    const char *out = dr.out_dir
                          ? dr.out_dir
                          : arena_printf(&dr.arena, "out/%s", mangle_dir(&dr.arena, dr.graph.name));
    char *cmdline = dr.cmdline;
    CodegenOptions co = {out, cmdline, dr.model, dr.target, true, dr.march_native};
    ok = codegen_c(&dr.graph, &tc, &plan, &co, &dr.diag);
    if (dr.time_passes)
      fprintf(stderr, "pipec: pass %-8s %9.3f ms\n", "codegen", (now() - dr.t0) * 1e3);
    status = ok ? 0 : EXIT_MODEL;
    if (ok && !strcmp(dr.command, "compile"))
      fprintf(stderr, "pipec: wrote %s/rank0.c and %s/bin/train\n", out, out);
    if (ok && !strcmp(dr.command, "run")) {
      fflush(stdout);
      char **pa = ARENA_ARRAY(&dr.arena, char *, dr.nprog_args + 2);
      pa[0] = arena_printf(&dr.arena, "%s/bin/train", out);
      for (int i = 0; i < dr.nprog_args; i++) pa[i + 1] = dr.prog_args[i];
      execv(pa[0], pa);
      fprintf(stderr, "pipec: cannot run %s: %s\n", pa[0], strerror(errno));
      status = EXIT_MODEL;
    }
  }
  source_free(&src);
  RETURN(status);
}

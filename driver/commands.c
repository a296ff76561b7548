// commands.c: the commands as a table (check, print, plan, compile, run, profile; import apart:
// it runs no pass), and run_command, which runs one on a checked command line: it reads what the
// passes need before them (--costs, --topology, --schedule FILE.csv, the model), runs the pass
// table up to the command's last pass and calls the command's finish, which prints its output
// (report.c) or runs the program.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../compiler/files.h"
#include "../compiler/pt2_source.h"
#include "../compiler/schedule.h"
#include "driver.h"

static int finish_check(Driver *dr) {
  print_summary(&dr->graph);
  return 0;
}

static int finish_print(Driver *dr) {
  if (!dr->cfg.dump_after) graph_print(&dr->graph, stdout); // else the dumps are the output
  return 0;
}

// The CSV schedule's S and V against --stages, --virtual and --split (when given), then made the
// partition's: S x V stages, V per rank.
static bool csv_agrees(Driver *dr) {
  const CsvSchedule *cs = &dr->csv;
  if (dr->cfg.po.stages && dr->cfg.po.stages != cs->S)
    return sched_csv_error(cs, &dr->diag, (Loc){0, 0},
                           "--stages %d, but the schedule has %d rows (one per rank): leave "
                           "--stages out or make them agree",
                           dr->cfg.po.stages, cs->S);
  if (dr->cfg.virt > 1 && dr->cfg.virt != cs->V)
    return sched_csv_error(cs, &dr->diag, (Loc){0, 0},
                           "--virtual %d, but the schedule runs %d stage%s per rank: leave "
                           "--virtual out or make them agree",
                           dr->cfg.virt, cs->V, cs->V == 1 ? "" : "s");
  if (dr->cfg.po.nsplit && dr->cfg.po.nsplit + 1 != cs->S * cs->V)
    return sched_csv_error(cs, &dr->diag, (Loc){0, 0},
                           "--split names %d cuts, but the schedule runs %d stages (S = %d ranks "
                           "x V = %d): name S x V - 1 = %d cuts",
                           dr->cfg.po.nsplit, cs->S * cs->V, cs->S, cs->V, cs->S * cs->V - 1);
  dr->cfg.virt = cs->V;
  dr->cfg.po.stages = cs->S * cs->V; // the partition cuts S x V stages
  // The memory estimate counts in flight as the built-in of its placement would (zb-v's V, or
  // the loop's): an exported built-in reads back to the same partition table.
  bool vshape = cs->V == 2;
  for (int v = 0; v < cs->S * cs->V; v++)
    vshape &= cs->stage_rank[v] == sched_rank_of(SCHED_ZBV, cs->S, 2, v);
  dr->cfg.po.est_sched = vshape ? SCHED_ZBV : SCHED_1F1B;
  return true;
}

// --schedule FILE.csv: reads the schedule (compiler/sched_csv.c) before the passes: its rows are
// the ranks S and its stages the S x V stages of the partition.
static bool load_schedule_csv(Driver *dr) {
  dr->diag.pass = "schedule"; // (the records' rule; the model's parse follows)
  bool ok = sched_csv_load(&dr->csv, dr->cfg.sched_csv, &dr->arena, &dr->diag) && csv_agrees(dr);
  dr->diag.pass = "parse";
  return ok;
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

// S = 1 runs bin/train itself, S > 1 launch.sh (mpirun over the ranks); either replaces pipec,
// so the exit status is the program's (or mpirun's).
static int finish_run(Driver *dr) {
  fflush(stdout);
  char **pa = ARENA_ARRAY(&dr->arena, char *, dr->cfg.nprog_args + 2);
  pa[0] = arena_printf(&dr->arena, codegen_links_mpi(&dr->prog) ? "%s/launch.sh" : "%s/bin/train",
                       dr->out);
  for (int i = 0; i < dr->cfg.nprog_args; i++) pa[i + 1] = dr->cfg.prog_args[i];
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
  char **pa = ARENA_ARRAY(&dr->arena, char *, dr->cfg.nprog_args + 10);
  int n = 0;
  pa[n++] = arena_printf(&dr->arena, "%s/launch.sh", dr->out);
  pa[n++] = "--steps", pa[n++] = "20", pa[n++] = "--eval-batches", pa[n++] = "1";
  pa[n++] = "--quiet";
  for (int i = 0; i < dr->cfg.nprog_args; i++) pa[n++] = dr->cfg.prog_args[i];
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
  else if (costs_from_profile(&dr->prog, sched_name(dr->cfg.sched), raw, dr->prof_out, &unbound,
                              &dr->diag)) {
    fprintf(stderr, "pipec: wrote %s (%d stages, %s)\n", dr->prof_out, dr->prog.nranks,
            sched_name(dr->cfg.sched));
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

int run_import(Driver *dr, const char *model) {
  if (!model) return driver_usage_error("%s", "'import' needs a model file (MODEL.pt2)");
  if (!pt2_is_archive(model))
    return driver_usage_error("import reads a torch.export archive (MODEL.pt2), got '%s'", model);
  if (!dr->cfg.out_dir)
    return driver_usage_error("%s", "import needs -o MODEL.json (where the JSON goes)");
  diag_init(&dr->diag, model, stderr);
  dr->diag.excerpts = true;
  dr->diag.format = dr->cfg.diag_format;
  char *text = NULL;
  Pt2SourceOptions po = {.training = dr->cfg.training_file,
                         .text = &text,
                         .weights_out = dr->cfg.weights_file,
                         .data_files = dr->cfg.data_files,
                         .ndata_files = dr->cfg.ndata_files};
  if (dr->cfg.weights_file)
    po.weights_key = weights_key(&dr->arena, dr->cfg.out_dir, dr->cfg.weights_file);
  Source src = {0};
  bool ok = pt2_source_load(&src, &dr->arena, model, &po, &dr->diag);
  ok = ok && write_file_atomic(dr->cfg.out_dir, text, strlen(text), &dr->diag);
  diag_write(&dr->diag, PIPEC_VERSION);
  source_free(&src);
  return ok ? 0 : EXIT_MODEL;
}

static int finish_compile(Driver *dr) {
  print_compiled(dr);
  return 0;
}

// One row per command: its name, its bit, the last pass it runs, the last its output needs.
static const Command commands[] = {
    {"check", CMD_CHECK, "shape", "shape", false, finish_check},
    {"print", CMD_PRINT, "shape", "expand", false, finish_print}, // the IR after the last pass
    {"plan", CMD_PLAN, "memplan", "memplan", false, finish_plan},
    {"compile", CMD_COMPILE, "codegen", "codegen", true, finish_compile},
    {"run", CMD_RUN, "codegen", "codegen", true, finish_run},
    {"profile", CMD_PROFILE, "codegen", "codegen", true, finish_profile},
};
enum { NCOMMANDS = sizeof commands / sizeof commands[0] };

const Command *command_find(const char *name) {
  for (int i = 0; i < NCOMMANDS; i++)
    if (strcmp(name, commands[i].name) == 0) return &commands[i];
  return NULL;
}
// --topology: reads the file, checks it has one GPU per rank, places the ranks
// (topology_place) and gives the partitioner the links between the ranks in bytes/s.
static bool load_topology(Driver *dr) {
  Topology *t = &dr->topo;
  char *msg = NULL;
  size_t len = 0;
  FILE *err = dr->diag.format == DIAG_TEXT ? stderr : open_memstream(&msg, &len);
  bool ok = err && topology_load(t, dr->cfg.topology, &dr->arena, err);
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
  int nv = dr->cfg.po.stages ? dr->cfg.po.stages : dr->cfg.po.nsplit ? dr->cfg.po.nsplit + 1 : 1;
  int S = nv / dr->cfg.virt; // the partition cuts S x V stages
  if (t->ngpu != S) {
    const char *why =
        arena_printf(&dr->arena,
                     "the topology has %d GPU%s but the pipeline runs %d rank%s (%s): pipec places "
                     "one rank per GPU",
                     t->ngpu, t->ngpu == 1 ? "" : "s", S, S == 1 ? "" : "s",
                     dr->cfg.po.stages
                         ? arena_printf(&dr->arena, "--stages %d", dr->cfg.po.stages / dr->cfg.virt)
                     : dr->cfg.po.nsplit ? "--split"
                                         : "no --stages");
    if (dr->diag.format == DIAG_TEXT)
      fprintf(stderr, "%s: error: %s\n", dr->cfg.topology, why);
    else
      diag_error(&dr->diag, (Loc){0, 0}, "--topology %s: %s", dr->cfg.topology, why);
    return false;
  }
  dr->gpu_of_rank = ARENA_ARRAY(&dr->arena, int, S);
  topology_place(t, dr->cfg.virt > 1, dr->gpu_of_rank, &dr->arena);
  double *bw = ARENA_ARRAY(&dr->arena, double, (size_t)S *S);
  int *device = ARENA_ARRAY(&dr->arena, int, S);
  for (int a = 0; a < S; a++) {
    device[a] = t->gpu[dr->gpu_of_rank[a]].dev;
    for (int b = 0; b < S; b++)
      bw[a * S + b] = a == b ? dr->cfg.po.bandwidth
                             : topology_link(t, dr->gpu_of_rank[a], dr->gpu_of_rank[b]) * 1e9;
  }
  // One machine: launch.sh gives each rank its GPU. Several: where a rank runs is mpirun's
  // hostfile's business, so the plan only names the machines (docs/pipeline.md, "Topology").
  dr->cfg.po.rank_bw = bw, dr->cfg.po.rank_device = t->nsys == 1 ? device : NULL,
  dr->cfg.po.nranks = S;
  return true;
}

// What the passes need read before them: profile's temporary directory, the --costs file, the
// model's diagnostics, --depfile's paths and the --topology file. Returns -1 to go on, else the
// exit status.
static int prepare(Driver *dr) {
  dr->out = dr->cfg.out_dir;
  if (dr->profile) { // the program lives in a temporary directory (finish_profile removes it)
    const char *td = getenv("TMPDIR");
    char *tmpl = arena_printf(&dr->arena, "%s/pipec-profile-XXXXXX", td && *td ? td : "/tmp");
    if (!mkdtemp(tmpl)) {
      fprintf(stderr, "pipec: profile: cannot create a temporary directory: %s\n", strerror(errno));
      return EXIT_MODEL;
    }
    dr->out = tmpl;
  }
  if (dr->cfg.costs_path) {
    diag_init(&dr->costs_diag, dr->cfg.costs_path, stderr);
    dr->costs_diag.excerpts = true;
    dr->costs_diag.format = dr->cfg.diag_format; // its errors are the document (the model has none)
    if (!costs_load(&dr->costs, dr->cfg.costs_path, &dr->arena, &dr->costs_diag)) {
      diag_write(&dr->costs_diag, PIPEC_VERSION);
      costs_free(&dr->costs);
      diag_free(&dr->costs_diag);
      return EXIT_MODEL;
    }
  }
  dr->build = dr->cmd->build && !dr->cfg.no_build;
  diag_init(&dr->diag, dr->cfg.model, stderr);
  dr->diag.excerpts = true; // the source line and a caret under each located message
  dr->diag.format = dr->cfg.diag_format;
  // Paths a depfile could not hold are refused before any work (codegen_depfile checks again).
  if (dr->cfg.depfile &&
      !codegen_depfile_check(&dr->arena, dr->cfg.model, dr->cfg.out_dir, &dr->diag)) {
    diag_write(&dr->diag, PIPEC_VERSION);
    return EXIT_MODEL;
  }
  if (dr->cfg.topology && !load_topology(dr)) {
    diag_write(&dr->diag, PIPEC_VERSION); // the machine-readable formats' document
    return EXIT_MODEL;
  }
  return -1;
}

// The model file: a JSON model, or a .pt2 archive (--training, --data-file; compiled into a
// program, its weights go beside it as its initial values). ok: what was read before it (the
// --training misuse is reported either way).
static bool load_model(Driver *dr, bool ok) {
  const Config *c = &dr->cfg;
  if ((c->training_file || c->ndata_files) && !pt2_is_archive(c->model)) {
    diag_error(&dr->diag, (Loc){0, 0},
               "--%s is for a .pt2 model (a JSON model has its own "
               "\"training\" section)",
               c->training_file ? "training" : "data-file");
    return false;
  }
  if (!ok) return false;
  if (!pt2_is_archive(c->model)) return source_load(&dr->src, &dr->arena, c->model, &dr->diag);
  Pt2SourceOptions po = {
      .training = c->training_file, .data_files = c->data_files, .ndata_files = c->ndata_files};
  if (dr->cmd->build || dr->profile) {
    const char *b = strrchr(c->model, '/') ? strrchr(c->model, '/') + 1 : c->model;
    const char *dir =
        dr->out ? dr->out
                : arena_printf(&dr->arena, "out/%s",
                               mangle_dir(&dr->arena, arena_strndup(&dr->arena, b, strlen(b) - 4)));
    if (!codegen_make_dirs(&dr->arena, dir, &dr->diag)) return false;
    char *rd = realpath(dir, NULL);
    if (rd) {
      po.weights_out = po.weights_key = arena_printf(&dr->arena, "%s/weights.safetensors", rd);
      free(rd);
    }
  }
  return pt2_source_load(&dr->src, &dr->arena, c->model, &po, &dr->diag);
}

// Runs the command on the checked command line: what the passes need, the model, the passes up
// to the command's last, then its output. Returns the exit status.
int run_command(Driver *dr) {
  const Command *cmd = dr->cmd;
  int rc = prepare(dr);
  if (rc >= 0) return rc;
  dr->diag.pass = "parse";
  graph_init(&dr->graph, &dr->arena);
  bool ok = !dr->cfg.sched_csv || load_schedule_csv(dr);
  // check and print with several stages run the partition and comm passes too (errors, dumps),
  // and with a custom schedule the schedule pass (its checks and the verifier).
  bool multi = dr->cfg.po.stages > 1 || dr->cfg.po.nsplit;
  int part = find_pass("comm", strlen("comm")), sched = find_pass("schedule", strlen("schedule"));
  if (multi && dr->last < part && !dr->cfg.stop_after) dr->last = dr->cfg.sched_csv ? sched : part;
  double t0 = clock_seconds();
  ok = load_model(dr, ok);
  if (dr->cfg.time_passes)
    fprintf(stderr, "pipec: pass %-8s %9.3f ms\n", "parse", (clock_seconds() - t0) * 1e3);
  ok = ok && run_passes(dr);
  int status = ok ? 0 : EXIT_MODEL;
  if (ok && dr->last >= find_pass(cmd->needs, strlen(cmd->needs)))
    status = cmd->finish(dr);
  else if (ok && multi && strcmp(cmd->name, "plan") == 0 && dr->last == sched)
    status = finish_plan_pipeline(dr);
  // The machine-readable formats' document (text: nothing): the costs file's when it stopped
  // the passes (costs_bind), else the model's.
  diag_write(dr->cfg.costs_path && dr->costs_diag.errors ? &dr->costs_diag : &dr->diag,
             PIPEC_VERSION);
  source_free(&dr->src);
  costs_free(&dr->costs);
  if (dr->profile) remove_tree(dr->out); // (finish_profile did, unless a pass failed)
  return status;
}

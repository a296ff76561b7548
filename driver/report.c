// report.c: what the commands print once their passes ran: check's summary, plan's pipeline
// report (the partition table, channels, grid, predicted bubble and step time, peak microbatches
// in flight, the plans; --svg, --json, --export-csv), the replicas' line and compile's "wrote"
// line. It reads the Driver and prints; it runs no pass.
#include <string.h>

#include "../compiler/plan_out.h"
#include "../compiler/schedule.h"
#include "../compiler/simulate.h"
#include "../compiler/trace_in.h"
#include "../compiler/uneven.h"
#include "../ir/ops.h"
#include "driver.h"

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

void print_summary(const Graph *g) {
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
// The schedule's name in plan's output: the built-in's, or the CSV file's as given.
static const char *sched_label(const Driver *dr) {
  return dr->cfg.sched_csv ? dr->cfg.sched_csv : sched_name(dr->cfg.sched);
}

// plan --export-csv FILE: the compute orders (a built-in's sched_order, zb-h1's B as I on every
// stage; a CSV schedule's rows as read) in torch's CSV form, so that --schedule FILE lowers to
// the same program.
static bool export_schedule_csv(Driver *dr) {
  const Program *p = &dr->prog;
  if (dr->cfg.sched_csv)
    return sched_csv_write(dr->cfg.export_csv, dr->csv.S, dr->csv.order, dr->csv.n, dr->csv.split,
                           &dr->diag);
  int S = p->nranks, V = p->nv / S, M = p->M;
  Action **order = ARENA_ARRAY(&dr->arena, Action *, S);
  int *n = ARENA_ARRAY(&dr->arena, int, S);
  bool *split = ARENA_ARRAY(&dr->arena, bool, p->nv);
  for (int v = 0; v < p->nv; v++)
    split[v] = dr->cfg.sched == SCHED_ZBH1 || dr->cfg.sched == SCHED_ZBV;
  for (int r = 0; r < S; r++) {
    order[r] = ARENA_ARRAY(&dr->arena, Action, 3 * (size_t)V * M + 1);
    if ((n[r] = sched_order(dr->cfg.sched, S, V, M, r, order[r], &dr->diag)) < 0) return false;
  }
  return sched_csv_write(dr->cfg.export_csv, S, order, n, split, &dr->diag);
}

// plan at S > 1: the partition table, the channels, the grid, the predicted bubble (unit
// costs), the predicted step time and bubble at the stage costs, the peak microbatches in flight
// per stage and each rank's memory plan (not with --stop-after=schedule).
int finish_plan_pipeline(Driver *dr) {
  Program *p = &dr->prog;
  if (dr->cfg.topology) {
    topology_print(&dr->topo, dr->cfg.virt > 1, dr->gpu_of_rank, stdout);
    printf("\n");
  }
  partition_print(p, stdout);
  printf("\n");
  comm_print(p, stdout);
  printf("\nschedule %s: %d ranks, %d stage%s per rank, %d microbatch%s\n", sched_label(dr),
         p->nranks, dr->cfg.virt, dr->cfg.virt == 1 ? "" : "s", p->M, p->M == 1 ? "" : "es");
  fflush(stdout);
  if (!schedule_print_grid(p, stdout, &dr->diag)) return EXIT_MODEL;
  int nsplit = split_stages(p);
  if (p->split_bw) { // which stages zb-h1 splits (compiler/schedules.c, sched_build)
    printf("B and W split on %s", nsplit ? "" : "no stage");
    for (int v = 0; v < p->nv; v++)
      if (p->vs[v].split) printf("v%d ", v);
    int written_b = 0; // stages a CSV schedule writes with B (unsplit by its choice)
    for (int v = 0; v < p->nv && dr->cfg.sched_csv; v++) written_b += !dr->csv.split[v];
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
  if (dr->cfg.svg || dr->cfg.json) { // the picture and the data, at the predicted times
    SchedStats st;
    if (!schedule_predict(p, &st, &dr->arena, &dr->diag)) return EXIT_MODEL;
    const char *name = sched_label(dr);
    if (dr->cfg.svg && dr->cfg.trace) { // the measured times of one step of a run, drawn alike
      int step;
      SchedStats mt;
      if (!trace_read_step(p, dr->cfg.trace, dr->cfg.trace_step, &mt, &step, &dr->arena, &dr->diag))
        return EXIT_MODEL;
      const char *b = strrchr(dr->cfg.trace, '/'),
                 *what = arena_printf(&dr->arena, "step %d of %s", step, b ? b + 1 : dr->cfg.trace);
      if (!plan_write_measured_svg(p, name, &mt, what, dr->cfg.svg, &dr->diag)) return EXIT_MODEL;
    } else if (dr->cfg.svg && !plan_write_svg(p, name, &st, dr->cfg.svg, &dr->diag)) {
      return EXIT_MODEL;
    }
    if (dr->cfg.json && !plan_write_json(p, name, &st, dr->cfg.json, &dr->diag)) return EXIT_MODEL;
  }
  if (dr->cfg.export_csv && !export_schedule_csv(dr)) return EXIT_MODEL;
  return 0;
}

// --replicas D: the line under the plan that says how the ranks' plans are replicated (the plan
// above it is one replica's: batch and M are per replica).
void print_replicas(const Driver *dr) {
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

// compile's line on stderr: what it wrote (with text diagnostics; otherwise stderr holds the
// diagnostics document alone).
void print_compiled(Driver *dr) {
  if (dr->diag.format != DIAG_TEXT) return;
  int S = dr->prog.nranks, D = dr->prog.replicas;
  int W = dr->prog.stage_reps ? uneven_world(&dr->prog, S, 0) : S * D; // the job's ranks
  if (dr->cfg.no_build) {
    fprintf(stderr,
            "pipec: wrote %s/rank0.%s%s, %s/launch.sh and %s/pipec-manifest.json (%d rank%s, not "
            "built)\n",
            dr->out, src_ext(dr),
            S == 1 ? "" : arena_printf(&dr->arena, " .. rank%d.%s", S - 1, src_ext(dr)), dr->out,
            dr->out, W, W == 1 ? "" : "s");
    return;
  }
  if (dr->prog.stage_reps)
    fprintf(stderr,
            "pipec: wrote %s/rank0.%s .. rank%d.%s, %s/bin/rank0 .. rank%d and %s/launch.sh (%d "
            "ranks: stages on %s replicas)\n",
            dr->out, src_ext(dr), S - 1, src_ext(dr), dr->out, S - 1, dr->out, W, dr->cfg.rep_list);
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
}

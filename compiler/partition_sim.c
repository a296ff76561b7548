// partition_sim.c: the automatic partitioner's second step (pipeline.h): the dynamic program
// (partition.c) minimises the slowest stage, which is the step time only when the pipeline is
// full and the edge stages cost the same; the step of a real schedule also pays the fill and
// drain (each stage's F and B in turn), the messages' latency and the step end's optimizer,
// which grows with a stage's parameters (a large vocabulary's embedding and head). So the
// partitioner simulates the schedule it will run on candidate cuts and keeps the fastest: a
// steepest-descent walk moving one cut by 1, 2, 4, ... units, from the dynamic program's cut
// and from the even split. The simulation is a dependency-driven replay of sched_order's
// compute orders (F after the previous stage's F of that microbatch and its message, B after
// the next stage's B, W after B), linear in actions, without the verifier's slot and message
// order rules (the candidate is verified when the program is built). Where the profiled machine
// ran fewer ranks at once than the pipeline has (CutProblem.slots: ranks sharing cores), the
// replay is the simulator's shared-cores one (simulate.c, limit_ranks): the action that can start
// first takes its rank's core (CutProblem.pin) or the first free one, O(actions x S); without
// it the partitioner would choose cuts for cores the machine does not have.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cut.h"
#include "pipeline.h"
#include "schedule.h"

typedef struct SimStage {
  double f, b, w; // compute seconds
  double xf, xg;  // seconds of the activations arriving at it, of the gradients it sends back
  double opt;     // optimizer seconds of its parameters
  bool fits;      // under the memory cap
} SimStage;

// Stage r of nv covering units [a, b) (partition_stage_cost's sums, kept apart).
static SimStage stage_of(const CutProblem *cp, int nv, int r, int a, int b) {
  SimStage s = {0};
  for (int u = a; u < b; u++) s.f += cp->uf[u], s.b += cp->ub[u], s.w += cp->uw[u];
  CutSums cs = cut_sums(cp, a, b);
  double act = cs.act, fb = cs.fwd, gb = cs.grad, pbytes = cs.pbytes, sb = cs.sent;
  int inflight = cut_inflight(cp, nv, r);
  s.fits = !partition_over_cap(cp, r, pbytes + cs.conv, act, fb + gb + sb, inflight);
  s.xf = fb > 0 ? cp->latency + fb / cp->bandwidth : 0;
  s.xg = gb > 0 ? cp->latency + gb / cp->bandwidth : 0;
  s.opt = pbytes * cp->opt_per_byte;
  return s;
}

typedef struct Orders {
  Action **a; // per rank: its compute order
  int *n;     // per rank: count
  bool split; // the schedule has W actions
  int *rank;  // per stage: its rank (sched_rank_of: the loop placement, or zb-v's V)
} Orders;

static bool orders_of(int sched, int S, int V, int M, Orders *o, Arena *ar) {
  FILE *null = fopen("/dev/null", "w");
  if (!null) return false;
  Diag d;
  diag_init(&d, "", null);
  o->a = ARENA_ARRAY(ar, Action *, S);
  o->n = ARENA_ARRAY(ar, int, S);
  o->split = false;
  o->rank = ARENA_ARRAY(ar, int, (size_t)S *V + 1);
  for (int v = 0; v < S * V; v++) o->rank[v] = sched_rank_of((SchedKind)sched, S, V, v);
  bool ok = true;
  for (int r = 0; r < S && ok; r++) {
    o->a[r] = ARENA_ARRAY(ar, Action, 3 * (size_t)V * M + 1);
    o->n[r] = sched_order((SchedKind)sched, S, V, M, r, o->a[r], &d);
    ok = o->n[r] >= 0;
    for (int i = 0; ok && i < o->n[r]; i++) o->split |= o->a[r][i].kind == ACT_W;
  }
  diag_free(&d);
  fclose(null);
  return ok;
}

// Action x's compute seconds.
static double act_cost(const Orders *o, const SimStage *st, const Action *x) {
  const SimStage *s = &st[x->v];
  return x->kind == ACT_F ? s->f : x->kind == ACT_W ? s->w : o->split ? s->b : s->b + s->w;
}

// When action x (of a rank at clock clk) can start once its inputs are in: the time, or -1 while
// an input is still missing; *c its compute seconds.
static double ready_at(const Orders *o, int nv, int M, const SimStage *st, const double *ef,
                       const double *eb, const Action *x, double clk, double *c) {
  int v = x->v, m = x->m;
  size_t k = (size_t)v * M + m;
  double ready;
  if (x->kind == ACT_F) {
    if (v > 0 && ef[k - M] < 0) return -1;
    ready = v > 0 ? ef[k - M] + st[v].xf : 0;
  } else if (x->kind == ACT_B) {
    if (ef[k] < 0 || (v + 1 < nv && eb[k + M] < 0)) return -1;
    ready = v + 1 < nv ? eb[k + M] + st[v + 1].xg : ef[k];
  } else { // W
    if (eb[k] < 0) return -1;
    ready = eb[k];
  }
  *c = act_cost(o, st, x);
  return clk > ready ? clk : ready;
}

// The replay over the stages' costs on slots cores (pin: rank r's core, or NULL: the first free
// one; slots >= S: a core each; stolen: per rank the seconds per step its shared core loses
// inside its actions, spread over them as simulate.c's limit_ranks does); INFINITY when it
// cannot finish.
static double replay(const Orders *o, int S, int nv, int M, const SimStage *st, int slots,
                     const int *pin, const double *stolen) {
  size_t nvm = (size_t)nv * M;
  double *ef = malloc(nvm * sizeof *ef), *eb = malloc(nvm * sizeof *eb);
  double *clock = calloc((size_t)S, sizeof *clock), *core = calloc((size_t)S, sizeof *core);
  double *grow = malloc((size_t)S * sizeof *grow); // per rank: its actions' stretch (stolen)
  int *pc = calloc((size_t)S, sizeof *pc);
  if (!ef || !eb || !clock || !core || !grow || !pc) {
    free(ef), free(eb), free(clock), free(core), free(grow), free(pc);
    return INFINITY;
  }
  for (size_t i = 0; i < nvm; i++) ef[i] = eb[i] = -1;
  int left = 0;
  for (int r = 0; r < S; r++) left += o->n[r];
  bool shared = slots > 0 && slots < S;
  for (int r = 0; r < S; r++) {
    double sum = 0;
    for (int i = 0; shared && stolen && i < o->n[r]; i++) sum += act_cost(o, st, &o->a[r][i]);
    grow[r] = sum > 0 ? 1 + stolen[r] / sum : 1;
  }
  bool moved = true;
  while (left > 0 && moved) {
    moved = false;
    if (shared) { // one action at a time: the one that can start first, on its core
      int best = -1, bk = 0;
      double bstart = 0, bc = 0;
      for (int r = 0; r < S; r++) {
        if (pc[r] >= o->n[r]) continue;
        double c, t = ready_at(o, nv, M, st, ef, eb, &o->a[r][pc[r]], clock[r], &c);
        if (t < 0) continue;
        int k = core_for(core, slots, pin, r);
        if (core[k] > t) t = core[k];
        if (best < 0 || t < bstart) best = r, bk = k, bstart = t, bc = c * grow[r];
      }
      if (best < 0) break;
      const Action *x = &o->a[best][pc[best]];
      clock[best] = core[bk] = bstart + bc;
      if (x->kind == ACT_F) ef[(size_t)x->v * M + x->m] = clock[best];
      if (x->kind == ACT_B) eb[(size_t)x->v * M + x->m] = clock[best];
      pc[best]++, left--, moved = true;
      continue;
    }
    for (int r = 0; r < S; r++)
      while (pc[r] < o->n[r]) {
        const Action *x = &o->a[r][pc[r]];
        double c, t0 = ready_at(o, nv, M, st, ef, eb, x, clock[r], &c);
        if (t0 < 0) break;
        clock[r] = t0 + c;
        if (x->kind == ACT_F) ef[(size_t)x->v * M + x->m] = clock[r];
        if (x->kind == ACT_B) eb[(size_t)x->v * M + x->m] = clock[r];
        pc[r]++, left--, moved = true;
      }
  }
  double span = INFINITY;
  if (left == 0) {
    double sync = 0, opt = 0;
    for (int r = 0; r < S; r++) sync = clock[r] > sync ? clock[r] : sync;
    double *ro = calloc((size_t)S, sizeof *ro);
    for (int v = 0; ro && v < nv; v++) ro[o->rank[v]] += st[v].opt;
    for (int r = 0; ro && r < S; r++) opt = ro[r] > opt ? ro[r] : opt;
    free(ro);
    span = sync + opt;
  }
  free(ef), free(eb), free(clock), free(core), free(grow), free(pc);
  return span;
}

static double simulate_with(const CutProblem *cp, const Orders *o, int S, int V, const int *starts,
                            SimStage *st) {
  int nv = S * V;
  for (int v = 0; v < nv; v++) {
    st[v] = stage_of(cp, nv, v, starts[v], v + 1 < nv ? starts[v + 1] : cp->n);
    if (!st[v].fits) return INFINITY;
  }
  bool machine = cp->npin == S; // the profiled machine's sharing, said for these ranks
  return replay(o, S, nv, cp->M, st, machine ? cp->slots : 0, machine ? cp->pin : NULL,
                machine ? cp->stolen : NULL);
}

double partition_simulate(const CutProblem *cp, int sched, int S, int V, const int *starts) {
  Arena a;
  arena_init(&a);
  Orders o;
  double t = INFINITY;
  if (cp->uf && orders_of(sched, S, V, cp->M, &o, &a)) {
    SimStage *st = ARENA_ARRAY(&a, SimStage, (size_t)S * V);
    t = simulate_with(cp, &o, S, V, starts, st);
  }
  arena_free(&a);
  return t;
}

// The walk from starts (modified in place); its simulated step.
static double descend(const CutProblem *cp, const Orders *o, int S, int V, int *starts,
                      SimStage *st, int *cand) {
  int nv = S * V, n = cp->n;
  double best = simulate_with(cp, o, S, V, starts, st);
  for (int iter = 0; iter < 64; iter++) {
    int bc = -1, bpos = 0;
    double bt = best * (1 - 1e-9);
    for (int c = 1; c < nv; c++) {
      int lo = starts[c - 1] + 1, hi = (c + 1 < nv ? starts[c + 1] : n) - 1;
      for (int step = 1; step <= n; step *= 2)
        for (int dir = -1; dir <= 1; dir += 2) {
          int pos = starts[c] + dir * step;
          if (pos < lo || pos > hi || (cp->cut_ok && !cp->cut_ok[pos])) continue;
          for (int v = 0; v < nv; v++) cand[v] = starts[v];
          cand[c] = pos;
          double t = simulate_with(cp, o, S, V, cand, st);
          if (t < bt) bt = t, bc = c, bpos = pos;
        }
    }
    if (bc < 0) break;
    starts[bc] = bpos;
    best = bt;
  }
  return best;
}

double partition_refine(const CutProblem *cp, int sched, int S, int V, int *starts) {
  int nv = S * V, n = cp->n;
  Arena a;
  arena_init(&a);
  Orders o;
  double best = INFINITY;
  if (cp->uf && orders_of(sched, S, V, cp->M, &o, &a)) {
    SimStage *st = ARENA_ARRAY(&a, SimStage, nv);
    int *cand = ARENA_ARRAY(&a, int, nv), *even = ARENA_ARRAY(&a, int, nv);
    best = descend(cp, &o, S, V, starts, st, cand);
    // The even split (equal unit counts), each start moved up to an allowed one.
    bool ok = true;
    for (int v = 0; v < nv && ok; v++) {
      int u = (int)((long long)n * v / nv);
      while (v > 0 && u < n && ((cp->cut_ok && !cp->cut_ok[u]) || u <= even[v - 1])) u++;
      even[v] = u;
      ok = u < n;
    }
    if (ok) {
      double t = descend(cp, &o, S, V, even, st, cand);
      if (t < best * (1 - 1e-9)) {
        best = t;
        for (int v = 0; v < nv; v++) starts[v] = even[v];
      }
    }
  }
  arena_free(&a);
  return best;
}

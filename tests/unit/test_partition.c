// Unit tests of the partition pass (compiler/partition.c): the dynamic program against brute
// force over every cut set on generated problems (chains, DAGs with skip connections and
// fan-out, shared parameters, random integer costs, memory caps, restricted cut points), each
// with the same optimum; the stage cost against an independent evaluation; and the pass on a
// small model: B/W nodes with their forward node, a shared weight listed on both stages, the
// checker rejecting a backward edge.
#include <math.h>

#include "../../compiler/comm.h"
#include "../../compiler/cut.h"
#include "../../compiler/partition.h"
#include "../../compiler/pipeline.h"
#include "../../compiler/schedule.h"
#include "../../compiler/simulate.h"
#include "testutil.h"

// ---- Generated problems

static unsigned rnd_state;
static unsigned rnd(unsigned n) { // uniform in [0, n)
  rnd_state = rnd_state * 1103515245u + 12345u;
  return (rnd_state >> 16) % n;
}

// A problem of n units: a chain (u -> u + 1) and, when dag, skip tensors from random units to
// random sets of later units. Integer costs and power-of-two rates keep every sum exact.
static bool gen_links; // gen gives each stage its own link bandwidth (--topology's stage_bw)

static void gen(CutProblem *cp, Arena *a, int n, bool dag, bool cap, bool restrict_cuts) {
  *cp = (CutProblem){.n = n, .rate = 2, .bandwidth = 4, .M = 1 + (int)rnd(4)};
  if (gen_links) { // powers of two from 1/2 to 8: sums stay exact
    cp->stage_bw = ARENA_ARRAY(a, double, 16);
    for (int r = 0; r < 16; r++) cp->stage_bw[r] = 0.5 * (double)(1u << rnd(5));
  }
  cp->flops = ARENA_ARRAY(a, double, n);
  cp->act_bytes = ARENA_ARRAY(a, double, n);
  for (int u = 0; u < n; u++) cp->flops[u] = rnd(40), cp->act_bytes[u] = rnd(10);
  cp->t = ARENA_ARRAY(a, CutTensor, 3 * n);
  for (int u = 0; u + 1 < n; u++) {
    CutTensor *t = &cp->t[cp->nt++];
    *t = (CutTensor){.from = u, .nto = 1, .bytes = rnd(30), .grad = rnd(3) != 0};
    t->to = ARENA_ARRAY(a, int, 1);
    t->to[0] = u + 1;
  }
  if (dag && n > 1)
    for (int k = 0, extra = (int)rnd((unsigned)n + 1); k < extra; k++) {
      int from = (int)rnd((unsigned)n - 1);
      CutTensor *t = &cp->t[cp->nt++];
      *t = (CutTensor){.from = from, .bytes = 1 + rnd(30), .grad = rnd(2)};
      t->to = ARENA_ARRAY(a, int, n);
      for (int u = from + 1; u < n; u++)
        if (rnd(3) == 0 || (u == n - 1 && t->nto == 0)) t->to[t->nto++] = u;
    }
  cp->np = 1 + (int)rnd(4);
  cp->p = ARENA_ARRAY(a, CutParam, cp->np);
  for (int i = 0; i < cp->np; i++) {
    CutParam *q = &cp->p[i];
    q->bytes = 1 + rnd(50);
    q->units = ARENA_ARRAY(a, int, n);
    for (int u = 0; u < n; u++)
      if (rnd(3) == 0) q->units[q->nunits++] = u; // shared by several units (tied, reused)
  }
  if (cap) cp->mem_cap = 40 + rnd(120);
  if (restrict_cuts) {
    bool *ok = ARENA_ARRAY(a, bool, n);
    for (int u = 0; u < n; u++) ok[u] = u == 0 || rnd(2);
    cp->cut_ok = ok;
  }
}

// Stage r of S over [a, b), evaluated independently of partition.c: per tensor, whether it is
// made before a and read in [a, b); per parameter, whether it is read in [a, b).
static double naive_cost(const CutProblem *cp, int S, int r, int a, int b) {
  double fl = 0, act = 0, comm = 0, mem = 0;
  for (int u = a; u < b; u++) fl += cp->flops[u], act += cp->act_bytes[u];
  for (int i = 0; i < cp->nt; i++) {
    bool read = false;
    for (int k = 0; k < cp->t[i].nto; k++) read |= cp->t[i].to[k] >= a && cp->t[i].to[k] < b;
    if (cp->t[i].from < a && read) comm += cp->t[i].bytes + (cp->t[i].grad ? cp->t[i].bytes : 0);
  }
  for (int i = 0; i < cp->np; i++) {
    bool read = false;
    for (int k = 0; k < cp->p[i].nunits; k++)
      read |= cp->p[i].units[k] >= a && cp->p[i].units[k] < b;
    if (read) mem += cp->p[i].bytes;
  }
  int inflight = S - r < cp->M ? S - r : cp->M;
  if (cp->mem_cap > 0 && mem + act * inflight > cp->mem_cap) return INFINITY;
  return fl / cp->rate + comm / (cp->stage_bw ? cp->stage_bw[r] : cp->bandwidth);
}

// The slowest stage of the cut set given as starts[0..S) (starts[0] = 0).
static double eval(const CutProblem *cp, int S, const int *starts) {
  double worst = 0;
  for (int r = 0; r < S; r++) {
    double c = naive_cost(cp, S, r, starts[r], r + 1 < S ? starts[r + 1] : cp->n);
    if (c > worst) worst = c;
  }
  return worst;
}

// The optimum over every set of S - 1 cut points among units 1..n-1 (where cut_ok allows).
static double brute(const CutProblem *cp, int S) {
  double best = INFINITY;
  int n = cp->n, starts[16];
  for (unsigned mask = 0; mask < 1u << (n - 1); mask++) {
    if (__builtin_popcount(mask) != S - 1) continue;
    int k = 0;
    starts[k++] = 0;
    bool ok = true;
    for (int u = 1; u < n; u++)
      if (mask & 1u << (u - 1)) {
        ok &= !cp->cut_ok || cp->cut_ok[u];
        starts[k++] = u;
      }
    if (!ok) continue;
    double c = eval(cp, S, starts);
    if (c < best) best = c;
  }
  return best;
}

static void check_many(bool dag, bool cap, bool restrict_cuts, unsigned seed) {
  rnd_state = seed;
  int feasible = 0, infeasible = 0;
  for (int iter = 0; iter < 400; iter++) {
    Arena a;
    arena_init(&a);
    int n = 1 + (int)rnd(9);
    CutProblem cp;
    gen(&cp, &a, n, dag, cap, restrict_cuts);
    for (int S = 1; S <= n; S++) {
      int starts[16];
      double want = brute(&cp, S), got = partition_dp(&cp, S, starts, &a);
      ck_assert_msg(got == want, "iter %d n %d S %d: dp %g, brute force %g", iter, n, S, got, want);
      if (got == INFINITY) {
        infeasible++;
        continue;
      }
      feasible++;
      // The cut it returns is valid and reaches the optimum.
      ck_assert_int_eq(starts[0], 0);
      for (int r = 1; r < S; r++) {
        ck_assert_int_gt(starts[r], starts[r - 1]);
        ck_assert(!cp.cut_ok || cp.cut_ok[starts[r]]);
      }
      ck_assert_msg(eval(&cp, S, starts) == want, "iter %d: the returned cut costs %g, not %g",
                    iter, eval(&cp, S, starts), want);
      for (int r = 0; r < S; r++) {
        int b = r + 1 < S ? starts[r + 1] : n;
        ck_assert(partition_stage_cost(&cp, S, r, starts[r], b) ==
                  naive_cost(&cp, S, r, starts[r], b));
      }
    }
    arena_free(&a);
  }
  ck_assert_int_gt(feasible, 100); // the generator covers both outcomes
  if (cap || restrict_cuts) ck_assert_int_gt(infeasible, 10);
}

// Per-stage links (--topology): the program stays exact against brute force.
START_TEST(test_dp_stage_links) {
  gen_links = true;
  check_many(true, false, false, 77);
  check_many(false, true, false, 78);
  gen_links = false;
}
END_TEST

// A slow link moves the cut to where fewer bytes cross it: four units of 4 FLOPs (rate 1), the
// middle tensor 64 bytes, the others 1. Over a fast link the balanced cut (after unit 1) costs
// 8 + 64 / 64 = 9; over a 4 B/s link it would cost 8 + 16, so the cut moves after unit 2, where
// 1 byte crosses: max(12, 4 + 1 / 4) = 12.
START_TEST(test_dp_slow_link_moves_cut) {
  double fl[4] = {4, 4, 4, 4}, act[4] = {0}, bytes[3] = {1, 64, 1},
         bw[2] = {64, 64}; // stage 0 receives nothing
  int to[3] = {1, 2, 3};
  CutTensor t[3];
  for (int i = 0; i < 3; i++)
    t[i] = (CutTensor){.from = i, .to = &to[i], .nto = 1, .bytes = bytes[i]};
  CutProblem cp = {.n = 4,
                   .flops = fl,
                   .act_bytes = act,
                   .t = t,
                   .nt = 3,
                   .rate = 1,
                   .bandwidth = 64,
                   .stage_bw = bw,
                   .M = 1};
  Arena a;
  arena_init(&a);
  int starts[2];
  ck_assert(partition_dp(&cp, 2, starts, &a) == 9);
  ck_assert_int_eq(starts[1], 2);
  bw[1] = 4;
  ck_assert(partition_dp(&cp, 2, starts, &a) == 12);
  ck_assert_int_eq(starts[1], 3);
  cp.stage_bw = NULL, cp.bandwidth = 4; // the same with every link slow: --bandwidth alone
  ck_assert(partition_dp(&cp, 2, starts, &a) == 12);
  ck_assert_int_eq(starts[1], 3);
  arena_free(&a);
}
END_TEST

START_TEST(test_dp_chains) {
  check_many(false, false, false, 1);
}
END_TEST

START_TEST(test_dp_dags) {
  check_many(true, false, false, 2);
}
END_TEST

START_TEST(test_dp_memory_cap) {
  check_many(true, true, false, 3);
}
END_TEST

START_TEST(test_dp_restricted_cuts) {
  check_many(true, false, true, 4);
}
END_TEST

// A skip tensor read by two later stages is received by each: counted once per reading stage.
START_TEST(test_fanout_counted_per_stage) {
  int to[2] = {1, 2};
  CutTensor t = {.from = 0, .to = to, .nto = 2, .bytes = 8, .grad = false};
  double fl[3] = {0, 0, 0}, act[3] = {0, 0, 0};
  CutProblem cp = {
      .n = 3, .flops = fl, .act_bytes = act, .t = &t, .nt = 1, .rate = 1, .bandwidth = 1, .M = 1};
  ck_assert(partition_stage_cost(&cp, 3, 1, 1, 2) == 8);
  ck_assert(partition_stage_cost(&cp, 3, 2, 2, 3) == 8);
  ck_assert(partition_stage_cost(&cp, 2, 1, 1, 3) == 8); // one stage reads it once
  ck_assert(partition_stage_cost(&cp, 1, 0, 0, 3) == 0);
}
END_TEST

// The simulated step (partition_sim.c) on hand-computed cases: two units of F = 1, B = 2 (s),
// free links, M = 2: gpipe and 1f1b at S = 2 take 9 (rank 0 F0 [0,1] F1 [1,2], rank 1 F0 [1,2]
// F1 [2,3] B0 [3,5] B1 [5,7], rank 0 B0 [5,7] B1 [7,9]); a message of 1 byte at 1 byte/s plus a
// latency of 0.5 on each of the four messages' paths delays the critical path by 2 x 1.5 = 3.
START_TEST(test_simulated_step) {
  double fl[2] = {3, 3}, act[2] = {0, 0}, uf[2] = {1, 1}, ub[2] = {2, 2}, uw[2] = {0, 0};
  int to[1] = {1};
  CutTensor t = {.from = 0, .to = to, .nto = 1, .bytes = 1, .grad = true};
  CutProblem cp = {.n = 2,
                   .flops = fl,
                   .act_bytes = act,
                   .t = &t,
                   .nt = 0,
                   .rate = 1,
                   .bandwidth = 1,
                   .M = 2,
                   .uf = uf,
                   .ub = ub,
                   .uw = uw};
  int starts[2] = {0, 1};
  ck_assert_double_eq_tol(partition_simulate(&cp, SCHED_GPIPE, 2, 1, starts), 9, 1e-9);
  ck_assert_double_eq_tol(partition_simulate(&cp, SCHED_1F1B, 2, 1, starts), 9, 1e-9);
  cp.nt = 1, cp.latency = 0.5; // F1 on rank 1 waits 1.5, B0 on rank 0 too: 9 + 3
  ck_assert_double_eq_tol(partition_simulate(&cp, SCHED_GPIPE, 2, 1, starts), 12, 1e-9);
  cp.nt = 0, cp.latency = 0;
  // Three units of F = 1 (B and W free); unit 1 and unit 0 each hold 100 parameter bytes whose
  // optimizer costs 0.1 s per byte: the step end favours the cut that leaves unit 1 alone with
  // unit 2 over the one that puts both parameters on rank 0, whatever the compute.
  double fl3[3] = {1, 1, 1}, act3[3] = {0, 0, 0}, f3[3] = {1, 1, 1}, z3[3] = {0, 0, 0};
  int u1[1] = {1}, u0[1] = {0};
  CutParam ps[2] = {{.units = u1, .nunits = 1, .bytes = 100},
                    {.units = u0, .nunits = 1, .bytes = 100}};
  CutProblem c3 = {.n = 3,
                   .flops = fl3,
                   .act_bytes = act3,
                   .p = ps,
                   .np = 2,
                   .rate = 1,
                   .bandwidth = 1,
                   .M = 2,
                   .uf = f3,
                   .ub = z3,
                   .uw = z3,
                   .opt_per_byte = 0.1};
  int a[2] = {0, 1}, b[2] = {0, 2};
  // [0] [1, 2]: F 1 | 2, M = 2: rank 1 F0 [1,3] F1 [3,5]; opt 10 each: 5 + 10 = 15.
  ck_assert_double_eq_tol(partition_simulate(&c3, SCHED_GPIPE, 2, 1, a), 15, 1e-9);
  // [0, 1] [2]: rank 0 F0 [0,2] F1 [2,4], rank 1 F1 [4,5]; rank 0 holds both: 5 + 20 = 25.
  ck_assert_double_eq_tol(partition_simulate(&c3, SCHED_GPIPE, 2, 1, b), 25, 1e-9);
  ck_assert_double_eq_tol(partition_refine(&c3, SCHED_GPIPE, 2, 1, b), 15, 1e-9);
  ck_assert_int_eq(b[1], 1);
  // A memory cap of 150 bytes: with unit 1's and unit 2's parameters (100 bytes each) on one
  // stage, the cut [0] [1, 2] no longer fits; [0, 1] [2] does.
  c3.mem_cap = 150;
  ps[0].units = (int[]){2}, ps[1].units = (int[]){1};
  int c[2] = {0, 2};
  ck_assert(partition_simulate(&c3, SCHED_GPIPE, 2, 1, c) < INFINITY);
  ck_assert(partition_simulate(&c3, SCHED_GPIPE, 2, 1, a) == INFINITY);
}
END_TEST

// Ranks sharing cores (CutProblem.slots, pin): two units of F = 1, B = 2, M = 2 at S = 2 on one
// core run one action at a time with never an idle moment: the 12 s of work, against 9 on two
// cores; 15 where the core loses 1 and 2 s per step inside the two ranks' actions (stolen). Four units of F = 1 (B, W free), M = 4, gpipe, S = 3 with stages 0 and 2 on core 0 and
// stage 1 on core 1: on three cores the cuts [1, 2, 1] and [2, 1, 1] both take 10 (the slowest
// stage's 2 x 3 microbatches after a fill of 4); on the pinned cores core 0 runs 3 units per
// microbatch under [2, 1, 1] (12 s of work) and 2 under [1, 2, 1] (s0 F0-F3 [0,4], s1 F0-F3
// [1,9] two apiece, s2 F0 [4,5] after s0's F3 (the rank first on a tie), F1-F3 at 5, 7, 9: 10).
// The refinement, which leaves a tie alone, moves [2, 1, 1] to [1, 2, 1] only on shared cores.
START_TEST(test_simulated_shared_cores) {
  double fl[4] = {3, 3, 3, 3}, act[4] = {0}, uf[4] = {1, 1, 1, 1}, ub[4] = {2, 2, 0, 0},
         uw[4] = {0};
  CutProblem cp = {.n = 2,
                   .flops = fl,
                   .act_bytes = act,
                   .rate = 1,
                   .bandwidth = 1,
                   .M = 2,
                   .uf = uf,
                   .ub = ub,
                   .uw = uw};
  int starts[2] = {0, 1};
  ck_assert_double_eq_tol(partition_simulate(&cp, SCHED_GPIPE, 2, 1, starts), 9, 1e-9);
  cp.slots = 1, cp.npin = 2;
  ck_assert_double_eq_tol(partition_simulate(&cp, SCHED_GPIPE, 2, 1, starts), 12, 1e-9);
  cp.pin = (int[]){0, 0}; // both bound to the one core: the same
  ck_assert_double_eq_tol(partition_simulate(&cp, SCHED_1F1B, 2, 1, starts), 12, 1e-9);
  cp.stolen = (double[]){1, 2}; // each rank's 6 s of actions stretched by 1 and 2: 7 + 8
  ck_assert_double_eq_tol(partition_simulate(&cp, SCHED_GPIPE, 2, 1, starts), 15, 1e-9);
  cp.npin = 3; // said for another pipeline: ignored
  ck_assert_double_eq_tol(partition_simulate(&cp, SCHED_GPIPE, 2, 1, starts), 9, 1e-9);

  double z[4] = {0};
  CutProblem c4 = {.n = 4,
                   .flops = fl,
                   .act_bytes = act,
                   .rate = 1,
                   .bandwidth = 1,
                   .M = 4,
                   .uf = uf,
                   .ub = z,
                   .uw = z};
  int a[3] = {0, 1, 3}, b[3] = {0, 2, 3};
  ck_assert_double_eq_tol(partition_simulate(&c4, SCHED_GPIPE, 3, 1, a), 10, 1e-9);
  ck_assert_double_eq_tol(partition_simulate(&c4, SCHED_GPIPE, 3, 1, b), 10, 1e-9);
  ck_assert_double_eq_tol(partition_refine(&c4, SCHED_GPIPE, 3, 1, b), 10, 1e-9);
  ck_assert_int_eq(b[1], 2); // the tie left alone
  c4.slots = 2, c4.pin = (int[]){0, 1, 0}, c4.npin = 3;
  ck_assert_double_eq_tol(partition_simulate(&c4, SCHED_GPIPE, 3, 1, a), 10, 1e-9);
  ck_assert(partition_simulate(&c4, SCHED_GPIPE, 3, 1, b) >= 12 - 1e-9);
  ck_assert_double_eq_tol(partition_refine(&c4, SCHED_GPIPE, 3, 1, b), 10, 1e-9);
  ck_assert_int_eq(b[1], 1);
  ck_assert_int_eq(b[2], 3);
}
END_TEST

// ---- The pass on a model: x -> a = linear(w) -> r = relu -> b = linear(w) (w shared) -> loss.

static const char *NET =
    "{'format': 'pipec-model', 'version': 1, 'name': 'net',\n"
    " 'inputs': [{'name': 'x', 'shape': ['B', 4]}, {'name': 'y', 'dtype': 'i32', 'shape': ['B'],"
    " 'target': true}],\n"
    " 'params': [{'name': 'w', 'shape': [4, 4], 'init': 'xavier'}],\n"
    " 'nodes': [{'name': 'a', 'op': 'linear', 'inputs': ['x', 'w']},\n"
    "           {'name': 'r', 'op': 'relu', 'inputs': ['a']},\n"
    "           {'name': 'b', 'op': 'linear', 'inputs': ['r', 'w']},\n"
    "           {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['b', 'y']}],\n"
    " 'loss': 'loss'}";

START_TEST(test_pass_split_shared_weight) {
  Model m;
  ck_assert(model_run(&m, NET));
  ck_assert(pass_autodiff(&m.g, 2, &m.cap.d));
  TrainConfig tc = {.batch = 4, .microbatches = 2, .mb_size = 2, .opt = OPT_ADAMW};
  const char *split[] = {"b"};
  PartitionOptions o = {
      .stages = 2, .split = split, .nsplit = 1, .flops_rate = 1e9, .bandwidth = 1e9};
  Program p;
  ck_assert_msg(pass_partition(&m.g, &tc, &o, &p, &m.cap.d), "%s", cap_text(&m.cap));
  ck_assert_msg(partition_check(&p, &m.cap.d), "%s", cap_text(&m.cap));
  ck_assert_int_eq(p.nv, 2);
  const Graph *g = &m.g;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->role == ROLE_STEP) continue;
    const Node *f = n->fwd ? n->fwd : n;
    if (n->role == ROLE_FWD || n->fwd) {
      bool late = strcmp(f->name, "b") == 0 || strcmp(f->name, "loss") == 0;
      ck_assert_msg(p.vstage_of_node[i] == (late ? 1 : 0), "%s on %d", n->name,
                    p.vstage_of_node[i]);
    }
  }
  // w is used on both stages: each lists it, and the step-end sum of its two uses is in both
  // stages' step segments.
  ck_assert_int_eq(p.vs[0].nparams, 1);
  ck_assert_int_eq(p.vs[1].nparams, 1);
  ck_assert_ptr_eq(p.vs[0].params[0], p.vs[1].params[0]);
  ck_assert_int_eq(p.vs[0].step.n, 1);
  ck_assert_int_eq(p.vs[1].step.n, 1);
  ck_assert_ptr_eq(p.vs[0].step.nodes[0], p.vs[1].step.nodes[0]);
  ck_assert(p.vs[0].loads && p.vs[1].loads); // x on stage 0, the targets on stage 1
  ck_assert(!p.vs[0].has_loss && p.vs[1].has_loss);
  ck_assert_int_eq(p.vs[0].K, 2); // min(S - r, M)
  ck_assert_int_eq(p.vs[1].K, 1);
  // The checker: a forward edge going back is an error.
  p.vstage_of_node[graph_find(g, "a")->producer->id] = 1;
  ck_assert(!partition_check(&p, &m.cap.d));
  ck_assert_str_eq(cap_text(&m.cap), "m.json: error: partition: edge 'a' goes back from stage 1 "
                                     "to stage 0\n");
  model_free(&m);
}
END_TEST

// model_run(json) and autodiff, then the partition cut before b (two
// stages at rate FLOP/s and bw bytes/s) and the comm pass, into p; tc outlives p (p->tc).
static void cut_at_b(Model *m, const char *json, const TrainConfig *tc, double rate, double bw,
                     Program *p) {
  ck_assert(model_run(m, json));
  ck_assert(pass_autodiff(&m->g, 2, &m->cap.d));
  const char *cut[] = {"b"};
  PartitionOptions o = {
      .stages = 2, .split = cut, .nsplit = 1, .flops_rate = rate, .bandwidth = bw};
  ck_assert_msg(pass_partition(&m->g, tc, &o, p, &m->cap.d), "%s", cap_text(&m->cap));
  ck_assert(pass_comm(&m->g, p, &m->cap.d));
}

// cut_at_b, then schedule k on it (lists in arena a, which the caller frees).
static void cut_and_schedule(Model *m, const char *json, const TrainConfig *tc, double rate,
                             double bw, SchedKind k, Program *p, Arena *a) {
  cut_at_b(m, json, tc, rate, bw, p);
  arena_init(a);
  ck_assert_msg(sched_build(p, k, 2, 1, a, &m->cap.d), "%s", cap_text(&m->cap));
}

// The comm pass on the same cut: r crosses forward, its gradient contribution from b comes back
// as a tensor of its own, w's two stages form its exchange group; the checker rejects a
// duplicated and a missing channel.
START_TEST(test_pass_comm) {
  Model m;
  TrainConfig tc = {.batch = 4, .microbatches = 2, .mb_size = 2, .opt = OPT_ADAMW};
  Program p;
  cut_at_b(&m, NET, &tc, 1e9, 1e9, &p);
  ck_assert_msg(comm_check(&p, &m.cap.d), "%s", cap_text(&m.cap));
  const Tensor *r = graph_find(&m.g, "r");
  ck_assert_int_eq(p.nch, 2);
  ck_assert_ptr_eq(p.ch[0].t, r);
  ck_assert(p.ch[0].from_v == 0 && p.ch[0].to_v == 1 && !p.ch[0].grad);
  ck_assert_int_eq(p.ch[0].bytes, 2 * 4 * 4); // (B, 4) f32 at a microbatch of 2 rows
  ck_assert_ptr_eq(p.ch[1].t->grad_of, r);    // the contribution of b's use of r
  ck_assert(p.ch[1].from_v == 1 && p.ch[1].to_v == 0 && p.ch[1].grad);
  ck_assert_int_eq(p.ch[1].tag, 1);
  ck_assert_int_eq(p.nex, 1);
  ck_assert_str_eq(p.ex[0].param->name, "w");
  ck_assert(p.ex[0].n == 2 && p.ex[0].stages[0] == 0 && p.ex[0].stages[1] == 1);
  // Receive-side tensors: r's reads on stage 1 (b and its backward) now read 'r@v1', r keeps
  // only stage 0's; the gradient's copy on stage 0 is read by relu's backward there.
  const Tensor *rr = p.ch[0].dst;
  ck_assert_ptr_nonnull(rr);
  ck_assert_str_eq(rr->name, "r@v1");
  ck_assert_int_eq(rr->kind, T_RECV);
  ck_assert(rr->dtype == r->dtype && shape_eq(&rr->shape, &r->shape) && !rr->producer);
  ck_assert_ptr_eq(graph_find(&m.g, "b")->producer->in[0], rr);
  ck_assert_int_ge(rr->nuses, 2); // b's forward and its weight gradient
  for (int u = 0; u < rr->nuses; u++) ck_assert_int_eq(p.vstage_of_node[rr->uses[u].node->id], 1);
  for (int u = 0; u < r->nuses; u++) ck_assert_int_eq(p.vstage_of_node[r->uses[u].node->id], 0);
  ck_assert_str_eq(p.ch[1].dst->name, arena_printf(&m.arena, "%s@v0", p.ch[1].t->name));
  ck_assert_int_eq(p.ch[1].dst->nuses, 1);
  ck_assert_int_eq(p.vstage_of_node[p.ch[1].dst->uses[0].node->id], 0);
  ck_assert_msg(graph_verify(&m.g, &m.cap.d), "%s", cap_text(&m.cap));
  // The exchange's use buffers: a's use of w (stage 0), then b's (stage 1), as the sum reads.
  const Tensor *wg = graph_find(&m.g, "w")->grad;
  ck_assert_int_eq(p.ex[0].nbufs, 2);
  ck_assert_str_eq(p.ex[0].bufs[0]->name, "d:w@a#1");
  ck_assert_str_eq(p.ex[0].bufs[1]->name, "d:w@b#1");
  ck_assert(p.ex[0].buf_stage[0] == 0 && p.ex[0].buf_stage[1] == 1);
  ck_assert_ptr_eq(wg->producer->in[0], p.ex[0].bufs[0]);
  Channel two[3] = {p.ch[0], p.ch[0], p.ch[1]};
  two[1].id = 1, two[2].id = 2;
  Channel *saved = p.ch;
  p.ch = two, p.nch = 3;
  ck_assert(!comm_check(&p, &m.cap.d));
  ck_assert_str_eq(cap_text(&m.cap), "m.json: error: comm: 'r' has more than one channel to "
                                     "stage v1\n");
  p.ch = saved, p.nch = 1;
  ck_assert(!comm_check(&p, &m.cap.d));
  ck_assert(strstr(cap_text(&m.cap), arena_printf(&m.arena, "reads '%s@v0', not received for it\n",
                                                  p.ch[1].t->name)));
  // A read of r left on stage 1 (not rewired to its received copy): an edge with no channel.
  p.nch = 2;
  Node *b = graph_find(&m.g, "b")->producer;
  b->in[0] = (Tensor *)r;
  ck_assert(!comm_check(&p, &m.cap.d));
  ck_assert(strstr(cap_text(&m.cap),
                   "error: comm: 'r' is read on stage v1 (by 'b') but made on v0: "
                   "no channel brings it\n"));
  b->in[0] = (Tensor *)rr;
  // The exchange's buffers out of use order.
  Exchange *e = &p.ex[0];
  Tensor *t0 = e->bufs[0];
  e->bufs[0] = e->bufs[1], e->bufs[1] = t0;
  ck_assert(!comm_check(&p, &m.cap.d));
  ck_assert(strstr(cap_text(&m.cap), "error: comm: exchange 'w': its use buffers are not those its "
                                     "sum reads\n"));
  model_free(&m);
}
END_TEST

// The predicted step time (partition_stage_costs, schedule_predict) on the same cut at M = 2, by
// hand. FLOPs per microbatch of 2 rows (ir/ops.c): a = linear 2*8*4 = 64, r = relu 8, its dx 8,
// the dw of a 64; b = linear 64, loss = cross_entropy 4*8 = 32, its dx 32, b's dx 64, b's dw 64.
// At 8 FLOP/s and 32 B/s each 32-byte message costs its receiver 1 s: stage 0 F 72/8 = 9,
// B 8/8 + 1 (the gradient of r received) = 2, W 64/8 = 8; stage 1 F 96/8 + 1 (r received) = 13,
// B 96/8 = 12, W 8. 1f1b (B = B + W: 10 and 20): rank 0 F0 [0, 9] F1 [9, 18]; rank 1 F0 [9, 22]
// B0 [22, 42] F1 [42, 55] B1 [55, 75]; rank 0 B0 [42, 52] B1 [75, 85]: 85 s, busy 2 * 19 + 2 * 33
// = 104 of 2 * 85. zb-h1 splits nothing here: each dw (64 FLOPs on 128 bytes) is memory-bound,
// so it stays in B (schedules.c, goes_to_w) and the costs and the span are 1f1b's.
START_TEST(test_predicted_step_time) {
  for (int split = 0; split < 2; split++) {
    Model m;
    TrainConfig tc = {.batch = 4, .microbatches = 2, .mb_size = 2, .opt = OPT_ADAMW};
    Program p;
    Arena a;
    cut_and_schedule(&m, NET, &tc, 8, 32, split ? SCHED_ZBH1 : SCHED_1F1B, &p, &a);
    StageCost c[2];
    double fl[2];
    partition_stage_costs(&p, c, fl);
    ck_assert(fl[0] == 144 && fl[1] == 256);
    ck_assert(!p.vs[0].split && !p.vs[1].split);
    ck_assert(c[0].f == 9 && c[0].b == 10 && c[0].w == 0 && c[1].f == 13 && c[1].b == 20 &&
              c[1].w == 0);
    SchedStats st;
    ck_assert_msg(schedule_predict(&p, &st, &a, &m.cap.d), "%s", cap_text(&m.cap));
    ck_assert_msg(st.span == 85, "span %g", st.span);
    ck_assert_msg(fabs(st.bubble - (1 - 104.0 / (2 * st.span))) < 1e-12, "bubble %g", st.bubble);
    arena_free(&a);
    model_free(&m);
  }
}
END_TEST

// Which stages zb-h1 splits, on NET widened to 64 features at 64 rows per microbatch (each dw a
// GEMM of 2 * 64^3 FLOPs on 48 KiB: compute-bound). Stage 1 sends a gradient after its B, so it
// splits: its W holds b's dw, the one compute-bound weight gradient there. Stage 0 sends none and
// runs every W right after its B, so the split would buy nothing: its B keeps its weight gradients
// (no W actions on rank 0). The predicted span is below 1f1b's.
START_TEST(test_zbh1_split_choice) {
  static const char *wide =
      "{'format': 'pipec-model', 'version': 1, 'name': 'net',\n"
      " 'inputs': [{'name': 'x', 'shape': ['B', 64]}, {'name': 'y', 'dtype': 'i32', 'shape': ['B'],"
      " 'target': true}],\n"
      " 'params': [{'name': 'w', 'shape': [64, 64], 'init': 'xavier'}],\n"
      " 'nodes': [{'name': 'a', 'op': 'linear', 'inputs': ['x', 'w']},\n"
      "           {'name': 'r', 'op': 'relu', 'inputs': ['a']},\n"
      "           {'name': 'b', 'op': 'linear', 'inputs': ['r', 'w']},\n"
      "           {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['b', 'y']}],\n"
      " 'loss': 'loss'}";
  double span[2];
  for (int split = 0; split < 2; split++) {
    Model m;
    TrainConfig tc = {.batch = 128, .microbatches = 2, .mb_size = 64, .opt = OPT_ADAMW};
    Program p;
    Arena a;
    cut_and_schedule(&m, wide, &tc, 1e9, 1e9, split ? SCHED_ZBH1 : SCHED_1F1B, &p, &a);
    if (split) {
      ck_assert(!p.vs[0].split && p.vs[0].w.n == 0);
      ck_assert(p.vs[1].split && p.vs[1].w.n == 1);
      ck_assert_str_eq(p.vs[1].w.nodes[0]->op->name, "linear.dw");
      ck_assert_ptr_eq(p.vs[1].w.nodes[0]->fwd, graph_find(&m.g, "b")->producer);
      for (int i = 0; i < p.ranks[0].nacts; i++) ck_assert(p.ranks[0].acts[i].kind != ACT_W);
      int nw = 0;
      for (int i = 0; i < p.ranks[1].nacts; i++) nw += p.ranks[1].acts[i].kind == ACT_W;
      ck_assert_int_eq(nw, 2);
      StageCost c[2];
      partition_stage_costs(&p, c, NULL);
      ck_assert(c[0].w == 0 && fabs(c[1].w * 1e9 - 2.0 * 64 * 64 * 64) < 1e-3);
    }
    SchedStats st;
    ck_assert_msg(schedule_predict(&p, &st, &a, &m.cap.d), "%s", cap_text(&m.cap));
    span[split] = st.span;
    arena_free(&a);
    model_free(&m);
  }
  ck_assert_msg(span[1] < span[0], "zb-h1 %g, 1f1b %g", span[1], span[0]);
}
END_TEST

// Stage hints: a hint beyond S is an error at the node, with its position.
START_TEST(test_pass_hint_out_of_range) {
  Model m;
  const char *hinted =
      "{'format': 'pipec-model', 'version': 1, 'name': 'net',\n"
      " 'inputs': [{'name': 'x', 'shape': ['B', 4]}, {'name': 'y', 'dtype': "
      "'i32', 'shape': ['B'], 'target': true}],\n"
      " 'params': [{'name': 'w', 'shape': [4, 4], 'init': 'xavier'}],\n"
      " 'nodes': [{'name': 'a', 'op': 'linear', 'inputs': ['x', 'w']},\n"
      "           {'name': 'r', 'op': 'relu', 'inputs': ['a'], 'stage': 5},\n"
      "           {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['r', 'y']}],\n"
      " 'loss': 'loss'}";
  ck_assert(model_run(&m, hinted));
  ck_assert(pass_autodiff(&m.g, 1, &m.cap.d));
  TrainConfig tc = {.batch = 2, .microbatches = 1, .mb_size = 2, .opt = OPT_SGD};
  PartitionOptions o = {.stages = 2, .flops_rate = 1e9, .bandwidth = 1e9};
  Program p;
  ck_assert(!pass_partition(&m.g, &tc, &o, &p, &m.cap.d));
  ck_assert_str_eq(cap_text(&m.cap), "m.json:5:12: error: nodes[1] \"r\": stage 5, but there are "
                                     "2 stages (--stages 2: 0 to 1)\n");
  model_free(&m);
}
END_TEST

// BUG (found by tests/fuzz/fuzz_json): hints that leave a stage without a node (every node on
// stage 0 at --stages 2, a stage skipped) passed the partition pass, and its checker then refused
// the partition with "partition: stage 1 has no forward node", a message about no hint. Each is
// now the pass's error, naming the empty stage.
START_TEST(test_pass_hint_empty_stage) {
  static const struct {
    const char *hint; // the stage hint of 'r'
    int S;            // --stages
    const char *want;
  } cases[] = {
      {"0", 2,
       "m.json: error: --stages 2: the stage hints leave stage 1 without a node (each of the 2 "
       "stages needs one; a node without a hint runs on the stage of the node before it)\n"},
      {"2", 3,
       "m.json: error: --stages 3: the stage hints leave stage 1 without a node (each of the 3 "
       "stages needs one; a node without a hint runs on the stage of the node before it)\n"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    Model m;
    char hinted[1024];
    snprintf(hinted, sizeof hinted,
             "{'format': 'pipec-model', 'version': 1, 'name': 'net',\n"
             " 'inputs': [{'name': 'x', 'shape': ['B', 4]}, {'name': 'y', 'dtype': "
             "'i32', 'shape': ['B'], 'target': true}],\n"
             " 'params': [{'name': 'w', 'shape': [4, 4], 'init': 'xavier'}],\n"
             " 'nodes': [{'name': 'a', 'op': 'linear', 'inputs': ['x', 'w']},\n"
             "           {'name': 'r', 'op': 'relu', 'inputs': ['a'], 'stage': %s},\n"
             "           {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['r', 'y']}],\n"
             " 'loss': 'loss'}",
             cases[k].hint);
    ck_assert(model_run(&m, hinted));
    ck_assert(pass_autodiff(&m.g, 1, &m.cap.d));
    TrainConfig tc = {.batch = 2, .microbatches = 1, .mb_size = 2, .opt = OPT_SGD};
    PartitionOptions o = {.stages = cases[k].S, .flops_rate = 1e9, .bandwidth = 1e9};
    Program p;
    ck_assert_msg(!pass_partition(&m.g, &tc, &o, &p, &m.cap.d), "hint %s at S = %d accepted",
                  cases[k].hint, cases[k].S);
    ck_assert_str_eq(cap_text(&m.cap), cases[k].want);
    model_free(&m);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("partition");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_dp_chains);
  tcase_add_test(tc, test_dp_dags);
  tcase_add_test(tc, test_dp_memory_cap);
  tcase_add_test(tc, test_dp_restricted_cuts);
  tcase_add_test(tc, test_dp_stage_links);
  tcase_add_test(tc, test_dp_slow_link_moves_cut);
  tcase_add_test(tc, test_fanout_counted_per_stage);
  tcase_add_test(tc, test_simulated_step);
  tcase_add_test(tc, test_simulated_shared_cores);
  tcase_add_test(tc, test_pass_split_shared_weight);
  tcase_add_test(tc, test_pass_comm);
  tcase_add_test(tc, test_predicted_step_time);
  tcase_add_test(tc, test_zbh1_split_choice);
  tcase_add_test(tc, test_pass_hint_out_of_range);
  tcase_add_test(tc, test_pass_hint_empty_stage);
  suite_add_tcase(s, tc);
  return run_suite(s);
}

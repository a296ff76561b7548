// Unit tests of the memory planner: the placement (compiler/place.c) on hand-made and random
// intervals, its independent checker on overlapping placements, and the plan over a schedule
// (compiler/memplan.c) of a small model: buffer classes (SAVED / TEMP / CONST / PARAM / GRAD),
// slots, optimizer-state offsets, node lists read off the action list. Then the per-rank plans
// of pipelines: every built-in schedule over a grid of (S, V, M) on four models (TINY_NET, a net
// sharing a weight between stages, samples/skip_net, a 3-layer samples/gpt_char with its tied
// embedding), each built, verified (the lock-step simulation with its send-buffer rule) and
// planned, every rank's plan checked here against the properties the rank programs rely on; and
// plan_check rejecting hand-broken plans with its message.
#include "../../compiler/comm.h"
#include "../../compiler/memplan.h"
#include "../../compiler/partition.h"
#include "../../compiler/pipeline.h"
#include "../../compiler/place.h"
#include "../../compiler/recompute.h"
#include "../../compiler/schedule.h"
#include "../../compiler/simulate.h"
#include "testutil.h"

static int64_t al(int64_t b) {
  return (b + PLACE_ALIGN - 1) / PLACE_ALIGN * PLACE_ALIGN;
}

// The most aligned bytes live at one position: no placement can use less.
static int64_t lower_bound(const PlaceItem *it, int n) {
  int64_t best = 0;
  for (int t = -1000; t <= 1000; t++) {
    int64_t live = 0;
    for (int i = 0; i < n; i++)
      if (it[i].lo <= t && t <= it[i].hi) live += al(it[i].bytes);
    if (live > best) best = live;
  }
  return best;
}

// No two items live at a common position share a byte (brute force, for the tests only).
static bool disjoint(const PlaceItem *it, int n) {
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      const PlaceItem *x = &it[i], *y = &it[j];
      if (!x->bytes || !y->bytes || x->hi < y->lo || y->hi < x->lo) continue;
      if (x->off < y->off + y->bytes && y->off < x->off + x->bytes) return false;
    }
  return true;
}

START_TEST(test_place_stack_is_tight) {
  // Forward activations born in order and dying in reverse, with a temporary at each step: the
  // placement reaches the lower bound.
  PlaceItem it[40];
  int n = 0;
  for (int k = 0; k < 10; k++) {
    it[n] = (PlaceItem){1000 + 10 * k, k, 40 - k, n, 0}, n++;
    it[n] = (PlaceItem){300, 20 + 2 * k, 20 + 2 * k + 1, n, 0}, n++;
  }
  Arena a;
  arena_init(&a);
  int over = -1, x, y;
  int64_t top = place_items(it, n, INT64_MAX, &a, &over);
  ck_assert_int_eq(top, lower_bound(it, n));
  ck_assert(disjoint(it, n));
  ck_assert(place_verify(it, n, &a, &x, &y));
  for (int i = 0; i < n; i++) ck_assert_int_eq(it[i].off % PLACE_ALIGN, 0);
  arena_free(&a);
}
END_TEST

START_TEST(test_place_random) {
  enum { N = 3000 };
  static PlaceItem it[N];
  uint64_t s = 12345;
  Arena a;
  arena_init(&a);
  for (int round = 0; round < 5; round++) {
    for (int i = 0; i < N; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      int lo = (int)(s >> 33) % 600 - 300, len = (int)((s >> 20) % 50);
      int64_t bytes = (int64_t)((s >> 40) % 5000) + (round == 4 ? 0 : 1);
      if (round == 3 && i % 7 == 0) len = 1000; // some long-lived buffers
      it[i] = (PlaceItem){bytes, lo, lo + len, i, 0};
    }
    int over = -1, x = -1, y = -1;
    int64_t top = place_items(it, N, INT64_MAX, &a, &over);
    ck_assert_int_ge(top, lower_bound(it, N));
    ck_assert(disjoint(it, N));
    ck_assert(place_verify(it, N, &a, &x, &y));
    int64_t end = 0;
    for (int i = 0; i < N; i++)
      if (it[i].bytes && it[i].off + al(it[i].bytes) > end) end = it[i].off + al(it[i].bytes);
    ck_assert_int_eq(end, top);
    // Too little room: the placement reports an item instead of wrapping.
    ck_assert_int_eq(place_items(it, N, top / 2, &a, &over), -1);
    ck_assert_int_ge(over, 0);
    ck_assert_int_lt(over, N);
  }
  arena_free(&a);
}
END_TEST

START_TEST(test_verify_finds_overlaps) {
  Arena a;
  arena_init(&a);
  int x = -1, y = -1;
  // Live together ([0,5] and [3,8]) and sharing bytes 64..99: the pair is reported.
  PlaceItem two[] = {{100, 0, 5, 7, 0}, {10, 3, 8, 9, 64}};
  ck_assert(!place_verify(two, 2, &a, &x, &y));
  ck_assert_int_eq(x, 7);
  ck_assert_int_eq(y, 9);
  // Touching bytes, or the same bytes at disjoint times, or zero bytes: fine.
  PlaceItem ok[] = {{64, 0, 5, 1, 0}, {64, 0, 5, 2, 64}, {64, 6, 9, 3, 0}, {0, 0, 9, 4, 0}};
  ck_assert(place_verify(ok, 4, &a, &x, &y));
  // An overlap found only among many: the successor side, after releases.
  PlaceItem many[] = {{64, 0, 1, 0, 0},  {64, 2, 3, 1, 0},  {64, 2, 9, 2, 128},
                      {64, 4, 9, 3, 64}, {128, 5, 6, 4, 0}, {64, 10, 11, 5, 0}};
  ck_assert(!place_verify(many, 6, &a, &x, &y));
  ck_assert_int_eq(x, 4);
  ck_assert_int_eq(y, 3);
  arena_free(&a);
}
END_TEST

START_TEST(test_plan_classes_and_slots) {
  Model m;
  ck_assert(model_run(&m, TINY_NET));
  TrainConfig tc = {.batch = 4, .microbatches = 2, .mb_size = 2, .opt = OPT_ADAMW};
  Program p;
  ck_assert(pass_autodiff(&m.g, 2, &m.cap.d));
  ck_assert((pass_partition(&m.g, &tc, &(PartitionOptions){.stages = 1}, &p, &m.cap.d) &&
             pass_schedule(&m.g, &tc, &p, &m.cap.d)));
  ck_assert_msg(plan_memory(&p, &m.cap.d), "%s", cap_text(&m.cap));
  const Plan *pl = &p.ranks[0].plan;
  Graph *g = &m.g;
  Tensor *x = graph_find(g, "x"), *y = graph_find(g, "y"), *w = graph_find(g, "w");
  Tensor *h = graph_find(g, "h"), *loss = graph_find(g, "loss"), *seed = graph_find(g, "d:loss");
  Tensor *dr = graph_find(g, "d:r@loss#0");
  ck_assert_ptr_nonnull(dr);
  // Loaded inputs, the activation linear.dw reads in B and the loss read by LOSS live across
  // actions; the gradient of r lives within B; the loss seed 1/M is a constant.
  ck_assert_int_eq(pl->cls[x->id], BUF_SAVED);
  ck_assert_int_eq(pl->cls[y->id], BUF_SAVED);
  ck_assert_int_eq(pl->cls[loss->id], BUF_SAVED);
  ck_assert_int_eq(pl->cls[dr->id], BUF_TEMP);
  ck_assert_int_eq(pl->cls[seed->id], BUF_CONST);
  ck_assert_int_eq(pl->cls[w->id], BUF_PARAM);
  ck_assert_int_eq(pl->cls[w->grad->id], BUF_GRAD);
  // h feeds relu (F) and relu.dx or linear.dw (B): saved, or a temporary if only F reads it.
  bool h_in_b = false;
  for (int u = 0; u < h->nuses; u++) h_in_b |= h->uses[u].node->role != ROLE_FWD;
  ck_assert_int_eq(pl->cls[h->id], h_in_b ? BUF_SAVED : BUF_TEMP);
  // Constants below the one slot of stage 0 (K = 1), which fills the rest of the region.
  ck_assert_int_lt(pl->offset[seed->id], pl->const_bytes);
  ck_assert_int_ge(pl->offset[x->id], pl->const_bytes);
  ck_assert_int_eq(pl->slots[0], 1);
  ck_assert_int_eq(pl->slot_stride[0], pl->bytes[REG_ACTS] - pl->const_bytes);
  // Optimizer state: AdamW's m and v of w, each slot's offset in the plan.
  ck_assert_int_eq(pl->opt_offsets[w->id * PLAN_OPT_SLOTS + 0], pl->opt_offset[w->id]);
  ck_assert_int_eq(pl->opt_offsets[w->id * PLAN_OPT_SLOTS + 1], pl->opt_offset[w->id] + 64);
  ck_assert_int_eq(pl->bytes[REG_OPT], 128);
  // Node lists as the action list runs them: F segment, then B.
  ck_assert_int_eq(pl->nfwd, p.vs[0].f.n);
  ck_assert_int_eq(pl->nbwd, p.vs[0].b.n);
  ck_assert_ptr_eq(pl->fwd[0], p.vs[0].f.nodes[0]);
  model_free(&m);

  // SGD: one slot per parameter, the second offset absent.
  ck_assert(model_run(&m, TINY_NET));
  tc.opt = OPT_SGD;
  ck_assert(pass_autodiff(&m.g, 2, &m.cap.d));
  ck_assert((pass_partition(&m.g, &tc, &(PartitionOptions){.stages = 1}, &p, &m.cap.d) &&
             pass_schedule(&m.g, &tc, &p, &m.cap.d)) &&
            plan_memory(&p, &m.cap.d));
  w = graph_find(&m.g, "w");
  ck_assert_int_eq(p.ranks[0].plan.opt_offsets[w->id * PLAN_OPT_SLOTS + 1], -1);
  ck_assert_int_eq(p.ranks[0].plan.bytes[REG_OPT], 64);
  model_free(&m);
}
END_TEST

START_TEST(test_plan_k_slots) {
  // A stage holding two microbatches in flight gets two slots of the same layout.
  Model m;
  ck_assert(model_run(&m, TINY_NET));
  TrainConfig tc = {.batch = 4, .microbatches = 2, .mb_size = 2, .opt = OPT_SGD};
  Program p;
  ck_assert(pass_autodiff(&m.g, 2, &m.cap.d));
  ck_assert((pass_partition(&m.g, &tc, &(PartitionOptions){.stages = 1}, &p, &m.cap.d) &&
             pass_schedule(&m.g, &tc, &p, &m.cap.d)) &&
            plan_memory(&p, &m.cap.d));
  int64_t one = p.ranks[0].plan.bytes[REG_ACTS], stride = p.ranks[0].plan.slot_stride[0];
  p.vs[0].K = 2;
  ck_assert(plan_memory(&p, &m.cap.d));
  ck_assert_int_eq(p.ranks[0].plan.slots[0], 2);
  ck_assert_int_eq(p.ranks[0].plan.slot_stride[0], stride);
  ck_assert_int_eq(p.ranks[0].plan.bytes[REG_ACTS], one + stride);
  model_free(&m);
}
END_TEST

// ---- Per-rank plans of pipelines

// A weight read on both sides of a cut (split before b): an exchange group across ranks.
static const char *const SHARED_NET =
    "{'format': 'pipec-model', 'version': 1, 'name': 'net',\n"
    " 'inputs': [{'name': 'x', 'shape': ['B', 4]}, {'name': 'y', 'dtype': 'i32', 'shape': ['B'],"
    " 'target': true}],\n"
    " 'params': [{'name': 'w', 'shape': [4, 4], 'init': 'xavier'}],\n"
    " 'nodes': [{'name': 'a', 'op': 'linear', 'inputs': ['x', 'w']},\n"
    "           {'name': 'r', 'op': 'relu', 'inputs': ['a']},\n"
    "           {'name': 'b', 'op': 'linear', 'inputs': ['r', 'w']},\n"
    "           {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['b', 'y']}],\n"
    " 'loss': 'loss'}";

// A sample's text (malloc'd), from PIPEC_SOURCE_DIR.
static char *sample(const char *name) {
  const char *src = getenv("PIPEC_SOURCE_DIR");
  ck_assert_ptr_nonnull(src);
  char path[512];
  snprintf(path, sizeof path, "%s/samples/%s", src, name);
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "%s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *t = malloc((size_t)n + 1);
  ck_assert_uint_eq(fread(t, 1, (size_t)n, f), (size_t)n);
  t[n] = 0;
  fclose(f);
  return t;
}

// One model of the grid: its text, -D overrides, and the most stages its partition can cut.
typedef struct GridModel {
  const char *name;  // for messages
  const char *json;  // the model (single quotes allowed)
  const char **defs; // -D overrides
  int ndefs;         // count
  int max_stages;    // S x V up to this cut
  const char *split; // with two stages: cut before this node (NULL: the automatic cut)
} GridModel;

// A pipeline built and planned: the model, its configuration and program.
typedef struct Pipe {
  Model m;        // the model (its arena holds the program)
  TrainConfig tc; // batch 2 M, M microbatches of 2 rows, AdamW
  Program p;      // partition, channels, schedule, plans
} Pipe;

// Builds schedule k at (S, V, M) on gm through partition, comm, sched_build, schedule_verify and
// plan_memory, asserting every step; with rc (--recompute) every stage recomputes.
static void pipe_build_rc(Pipe *x, const GridModel *gm, SchedKind k, int S, int V, int M, bool rc) {
  ck_assert_msg(model_run_defs(&x->m, gm->json, gm->defs, gm->ndefs), "%s: %s", gm->name,
                cap_text(&x->m.cap));
  x->tc = (TrainConfig){.batch = 2 * M, .microbatches = M, .mb_size = 2, .opt = OPT_ADAMW};
  Graph *g = &x->m.g;
  Diag *d = &x->m.cap.d;
  ck_assert(pass_autodiff(g, M, d));
  PartitionOptions o = {.stages = S * V, .flops_rate = 50e9, .bandwidth = 10e9};
  const char *split[1] = {gm->split};
  if (gm->split && S * V == 2) o.split = split, o.nsplit = 1;
  bool ok = pass_partition(g, &x->tc, &o, &x->p, d) && partition_check(&x->p, d) &&
            pass_comm(g, &x->p, d) && comm_check(&x->p, d) && graph_verify(g, d);
  if (ok && rc) {
    bool *all = ARENA_ARRAY(&x->m.arena, bool, x->p.nv);
    for (int v = 0; v < x->p.nv; v++) all[v] = true;
    recompute_apply(&x->p, all, &x->m.arena);
  }
  ok = ok && sched_build(&x->p, k, S, V, &x->m.arena, d) &&
       schedule_verify(&x->p, NULL, NULL, NULL, d) && plan_memory(&x->p, d);
  ck_assert_msg(ok, "%s %s S=%d V=%d M=%d%s: %s", gm->name, sched_name(k), S, V, M,
                rc ? " --recompute all" : "", cap_text(&x->m.cap));
}

static void pipe_build(Pipe *x, const GridModel *gm, SchedKind k, int S, int V, int M) {
  pipe_build_rc(x, gm, k, S, V, M, false);
}

// Sum of rank r's regions.
static int64_t rank_total(const Pipe *x, int r) {
  const Plan *pl = &x->p.ranks[r].plan;
  int64_t t = 0;
  for (int k = 0; k < REG_COUNT; k++) t += pl->bytes[k];
  return t;
}

static int64_t tbytes(const Pipe *x, const Tensor *t) {
  return shape_numel(&t->shape, x->tc.mb_size) * (int64_t)dtype_size(t->dtype);
}

static bool overlaps(int64_t a, int64_t na, int64_t b, int64_t nb) {
  return na > 0 && nb > 0 && a < b + nb && b < a + na;
}

// Whether every channel that sends t goes to a stage of rank r (its RECVs are local copies).
static bool sent_locally(const Program *p, int r, const Tensor *t) {
  for (int c = 0; c < p->nch; c++)
    if (p->ch[c].t == t && p->vs[p->ch[c].to_v].rank != r) return false;
  return true;
}

// Where rank r's program is done with the bytes of t for microbatch m (v's slot): the last of
// its COPYs for m (a channel to a stage of the rank), and over a message the action before which
// the program waits for the send (its WAIT_SEND, action_send_waits: wait), when that is an
// action of (v, m) after the SEND; -1 when some message of t is waited for elsewhere (the slot's
// next microbatch, the step end).
static int send_until(const Program *p, int r, const Tensor *t, int v, int m, const int *wait) {
  const RankProgram *rp = &p->ranks[r];
  int until = -1;
  for (int i = 0; i < rp->nacts; i++) {
    const Action *a = &rp->acts[i];
    if (a->kind == ACT_COPY && a->m == m && a->ch->t == t) until = i;
    if (a->kind != ACT_SEND || a->m != m || a->ch->t != t || p->vs[a->ch->to_v].rank == r) continue;
    int w = wait[(size_t)a->ch->id * p->M + m];
    if (w <= i || rp->acts[w].v != v || rp->acts[w].m != m) return -1;
    if (w > until) until = w;
  }
  return until;
}

// A tensor sent only to stages of its own rank is copied at each RECV(c, m), and one sent by
// message is waited for before an action of its microbatch (send_until): replaying rank r's
// list, nothing written into its slot between the node that makes it for m and that point
// (outputs and workspaces of the nodes of its stage's actions on a microbatch of the same slot)
// shares a byte with it, and a message received into its stage at its bytes is posted for m + K
// (where schedule_last_actions says) only after it.
static void check_local_send(const Pipe *x, int r, const Tensor *t, int v, const int *wait) {
  const Program *p = &x->p;
  const RankProgram *rp = &p->ranks[r];
  const Plan *pl = &rp->plan;
  const VStage *s = &p->vs[v];
  int64_t o = pl->offset[t->id], n = tbytes(x, t);
  int *freed = malloc(sizeof(int) * ((size_t)p->nv * p->M + 1));
  schedule_last_actions(p, freed);
  for (int m = 0; m < p->M; m++) {
    int made = -1, recv = send_until(p, r, t, v, m, wait);
    for (int i = 0; i < rp->nacts; i++) {
      const Action *a = &rp->acts[i];
      if (a->v != v || a->m != m || made >= 0 || a->kind == ACT_SEND) continue;
      const Segment *sg = a->kind == ACT_F ? &s->f : a->kind == ACT_B ? &s->b : &s->w;
      for (int j = 0; (a->kind == ACT_F || a->kind == ACT_B || a->kind == ACT_W) && j < sg->n; j++)
        if (sg->nodes[j] == t->producer) made = i;
    }
    ck_assert_int_ge(made, 0);
    ck_assert_int_gt(recv, made);
    for (int c = 0; c < p->nch && m + s->K < p->M; c++) {
      const Channel *ch = &p->ch[c];
      if (ch->to_v == v && p->vs[ch->from_v].rank != r &&
          overlaps(o, n, pl->offset[ch->dst->id], tbytes(x, ch->dst)))
        ck_assert_msg(freed[(size_t)v * p->M + m] >= recv,
                      "'%s' (m%d) shares bytes with '%s', posted for m%d before its RECV", t->name,
                      m, ch->dst->name, m + s->K);
    }
    bool after = false; // past the producer in its action
    for (int i = made; i < recv; i++) {
      const Action *a = &rp->acts[i];
      if (a->v != v || a->m < 0 || a->m % s->K != m % s->K) continue;
      if (a->kind != ACT_F && a->kind != ACT_B && a->kind != ACT_W) continue;
      const Segment *sg = a->kind == ACT_F ? &s->f : a->kind == ACT_B ? &s->b : &s->w;
      for (int j = 0; j < sg->n; j++) {
        const Node *nd = sg->nodes[j];
        if (i == made && !after) {
          after = nd == t->producer;
          continue;
        }
        for (int k = 0; k < nd->nout; k++) {
          const Tensor *w = nd->out[k];
          if (w == t || pl->vstage[w->id] != v || pl->cls[w->id] == BUF_WORK) continue;
          ck_assert_msg(!overlaps(o, n, pl->offset[w->id], tbytes(x, w)),
                        "'%s' sent on rank %d shares bytes with '%s', written before its RECV",
                        t->name, r, w->name);
        }
        int64_t ws = nd->op->workspace ? nd->op->workspace(nd, x->tc.mb_size) : 0;
        if (ws > 0 && (pl->work_bytes == 0 || pl->ws_offset[nd->id] < pl->work_base))
          ck_assert(!overlaps(o, n, pl->ws_offset[nd->id], ws));
      }
    }
  }
  free(freed);
}

// What every rank's plan must give the rank programs (brute force, independent of plan_check).
static void check_rank(const Pipe *x, int r, SchedKind k, int S, int V, int M) {
  const Program *p = &x->p;
  const Graph *g = p->g;
  const RankProgram *rp = &p->ranks[r];
  const Plan *pl = &rp->plan;
  Capture cap;
  cap_open(&cap, "m.json");
  ck_assert_msg(plan_check(p, r, &cap.d), "%s", cap_text(&cap));
  cap_close(&cap);
  int64_t acts = pl->const_bytes;
  for (int v = 0; v < p->nv; v++) {
    bool mine = p->vs[v].rank == r;
    // K slots per stage of the rank, from the schedule: 1f1b and zb-h1 min(S - r, M), gpipe M.
    ck_assert_int_eq(pl->slots[v], mine ? p->vs[v].K : 0);
    if (mine && (k == SCHED_1F1B || k == SCHED_ZBH1))
      ck_assert_int_eq(pl->slots[v], S - r < M ? S - r : M);
    if (mine && k == SCHED_GPIPE) ck_assert_int_eq(pl->slots[v], M);
    if (mine) acts += pl->slots[v] * pl->slot_stride[v];
  }
  ck_assert_int_eq(acts + pl->work_bytes, pl->bytes[REG_ACTS]);
  (void)V;
  int *wait = malloc(sizeof(int) * ((size_t)p->nch * p->M + 1));
  action_send_waits(p, wait);
  for (int c = 0; c < p->nch; c++) {
    const Channel *ch = &p->ch[c];
    if (p->vs[ch->to_v].rank == r) { // received: in a slot of its stage
      ck_assert_int_eq(pl->vstage[ch->dst->id], ch->to_v);
      ck_assert_int_ge(pl->offset[ch->dst->id], pl->const_bytes);
      ck_assert_int_eq(pl->cls[ch->dst->id], BUF_SAVED);
    }
    if (p->vs[ch->from_v].rank != r) continue;
    // Sent: no byte shared with any other buffer of its slot (tensors and workspaces); sent only
    // to stages of this rank or waited for before an action of its microbatch, none with what is
    // written there before its last RECV or that wait.
    const Tensor *t = ch->t;
    int v = ch->from_v;
    int64_t o = pl->offset[t->id], n = tbytes(x, t);
    ck_assert_int_eq(pl->vstage[t->id], v);
    bool until = true; // every microbatch's bytes done with at an action (send_until)
    for (int m = 0; m < p->M && until; m++) until = send_until(p, r, t, v, m, wait) >= 0;
    ck_assert(until || !sent_locally(p, r, t));
    if (until) {
      check_local_send(x, r, t, v, wait);
      continue;
    }
    for (int i = 0; i < g->ntensors; i++)
      if (i != t->id && pl->vstage[i] == v)
        ck_assert_msg(!overlaps(o, n, pl->offset[i], tbytes(x, g->tensors[i])),
                      "sent '%s' shares bytes with '%s' on rank %d", t->name, g->tensors[i]->name,
                      r);
    for (int i = 0; i < g->nnodes; i++) {
      const Node *nd = g->nodes[i];
      if (pl->ws_offset[i] < 0 || p->vstage_of_node[i] != v || !nd->op->workspace) continue;
      ck_assert(!overlaps(o, n, pl->ws_offset[i], nd->op->workspace(nd, x->tc.mb_size)));
    }
  }
  free(wait);
  // Exchanges: every use buffer (and the sum) in REG_GRADS on every holder rank.
  for (int i = 0; i < p->nex; i++) {
    const Exchange *e = &p->ex[i];
    bool here = false;
    for (int j = 0; j < e->n; j++) here |= p->vs[e->stages[j]].rank == r;
    for (int j = 0; j < e->nbufs && here; j++) {
      ck_assert_int_eq(pl->region[e->bufs[j]->id], REG_GRADS);
      ck_assert_int_ge(pl->offset[e->bufs[j]->id], 0);
    }
    if (here) ck_assert_int_ge(pl->offset[e->param->grad->id], 0);
    if (here) ck_assert_int_ge(pl->offset[e->param->id], 0);
  }
  // Parameters: those the rank's nodes read are held (ties at their owner's bytes), no other.
  for (int i = 0; i < g->nparams; i++) {
    const Tensor *q = g->params[i], *own = q->tied_to ? q->tied_to : q;
    bool read = false;
    for (int u = 0; u < q->nuses; u++)
      read |= p->vs[p->vstage_of_node[q->uses[u].node->id]].rank == r;
    if (read) ck_assert_int_ge(pl->offset[q->id], 0);
    if (q->tied_to && pl->offset[q->id] >= 0)
      ck_assert_int_eq(pl->offset[q->id], pl->offset[own->id]);
  }
}

// The grid's cells: every built-in schedule at S 1..4, V 1..2, M 1..8 where legal, each model
// up to its most stages; --recompute all on every stage when rc.
static int plan_grid(bool rc) {
  static const char *gdefs[] = {"T=8", "C=16", "L=3"};
  char *skip = sample("skip_net.json"), *gpt = sample("gpt_char.json");
  const GridModel models[] = {{"TINY_NET", TINY_NET, NULL, 0, 3, NULL},
                              {"SHARED_NET", SHARED_NET, NULL, 0, 4, "b"},
                              {"skip_net", skip, NULL, 0, 8, NULL},
                              {"gpt_char", gpt, gdefs, 3, 4, NULL}};
  int planned = 0;
  for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++)
    for (int k = 0; k < SCHED_COUNT; k++)
      for (int S = 1; S <= 4; S++)
        for (int V = 1; V <= 2; V++)
          for (int M = 1; M <= 8; M++) {
            bool legal = k == SCHED_INTERLEAVED ? M % S == 0 && (V == 1 || S > 1)
                         : k == SCHED_ZBV       ? V == 2 // S = 1 too: both stages on rank 0
                                                : V == 1;
            if (!legal || S * V > models[mi].max_stages) continue;
            Pipe x;
            pipe_build_rc(&x, &models[mi], (SchedKind)k, S, V, M, rc);
            for (int r = 0; r < S; r++) check_rank(&x, r, (SchedKind)k, S, V, M);
            for (int v = 0; rc && v < x.p.nv; v++) { // fused; the rerun and the work area used
              const VStage *st = &x.p.vs[v];
              ck_assert(st->recompute && !st->split && st->w.n == 0);
              ck_assert_int_le(st->r.n, st->f.n);
              for (int j = 0; j < st->r.n; j++)
                for (int o = 0; o < st->r.nodes[j]->nout; o++) {
                  const Tensor *t = st->r.nodes[j]->out[o];
                  ck_assert_int_eq(x.p.ranks[st->rank].plan.cls[t->id], BUF_WORK);
                }
            }
            planned++;
            model_free(&x.m);
          }
  free(skip);
  free(gpt);
  return planned;
}

START_TEST(test_pipeline_plans) {
  ck_assert_int_eq(plan_grid(false), 510); // the legal cells (zb-v: 72): none skipped silently
}
END_TEST

// --recompute all over the same grid: every rank's plan passes plan_check (check_rank), every
// stage fused, every tensor its rerun makes in the work area.
START_TEST(test_recompute_plans) {
  ck_assert_int_eq(plan_grid(true), 510);
}
END_TEST

// plan_check's message on rank r of x (which must be rejected).
static const char *check_msg(const Pipe *x, int r) {
  static char buf[1024];
  Capture cap;
  cap_open(&cap, "m.json");
  ck_assert(!plan_check(&x->p, r, &cap.d));
  snprintf(buf, sizeof buf, "%s", cap_text(&cap));
  cap_close(&cap);
  return buf;
}

// plan_check on hand-broken plans of SHARED_NET, 1f1b, S = 2, M = 2 (stage 0: a, r; r sent).
START_TEST(test_plan_check_rejects) {
  const GridModel gm = {"SHARED_NET", SHARED_NET, NULL, 0, 4, "b"};
  Pipe x;
  pipe_build(&x, &gm, SCHED_1F1B, 2, 1, 2);
  Graph *g = &x.m.g;
  Plan *p0 = &x.p.ranks[0].plan, *p1 = &x.p.ranks[1].plan;
  ck_assert_ptr_eq(x.p.ch[0].t, graph_find(g, "r"));
  // The sent r at the bytes of another buffer of its slot: r is live over the whole timeline.
  int r = graph_find(g, "r")->id, other = -1;
  for (int i = 0; i < g->ntensors && other < 0; i++)
    if (i != r && p0->vstage[i] == 0 && tbytes(&x, g->tensors[i]) > 0) other = i;
  ck_assert_int_ge(other, 0);
  int64_t keep = p0->offset[r];
  p0->offset[r] = p0->offset[other];
  const char *msg = check_msg(&x, 0);
  ck_assert_msg(strstr(msg, "m.json: error: internal error: memplan: rank 0: buffers '") == msg &&
                    strstr(msg, "' of stage v0 overlap while both are live\n") &&
                    strstr(msg, "'r'") && strstr(msg, g->tensors[other]->name),
                "%s", msg);
  p0->offset[r] = keep;
  // K slots from the schedule: rank 0 holds 2.
  p0->slots[0] = 1;
  ck_assert_str_eq(
      check_msg(&x, 0),
      "m.json: error: internal error: memplan: rank 0: stage v0 has 1 slots, its K is 2\n");
  p0->slots[0] = 2;
  // The exchange's remote use buffer (a's use of w, accumulated on stage 0) on rank 1.
  int buf = graph_find(g, "d:w@a#1")->id;
  ck_assert_int_ge(p1->offset[buf], 0);
  p1->offset[buf] = -1;
  ck_assert_str_eq(check_msg(&x, 1), "m.json: error: internal error: memplan: rank 1: gradient "
                                     "buffer 'd:w@a#1' has no storage in the grads region\n");
  p1->offset[buf] = p0->offset[buf];
  // The received copy of r out of its stage's slot.
  int rr = x.p.ch[0].dst->id;
  p1->vstage[rr] = -1;
  ck_assert_str_eq(check_msg(&x, 1), "m.json: error: internal error: memplan: rank 1: 'r@v1' has "
                                     "no storage in slot 0 of stage v1\n");
  model_free(&x.m);
}
END_TEST

// plan_check on hand-broken recomputing plans: gpt_char (2 layers), 1f1b, S = 2, M = 2.
START_TEST(test_plan_check_rejects_recompute) {
  static const char *gdefs[] = {"T=8", "C=16", "L=2"};
  char *gpt = sample("gpt_char.json");
  const GridModel gm = {"gpt_char", gpt, gdefs, 3, 4, NULL};
  Pipe x;
  pipe_build_rc(&x, &gm, SCHED_1F1B, 2, 1, 2, true);
  Graph *g = &x.m.g;
  Plan *p0 = &x.p.ranks[0].plan;
  VStage *s0 = &x.p.vs[0];
  ck_assert_int_gt(s0->r.n, 1);
  // Two work tensors live together (the rerun's first output, read by the next node) at one
  // address.
  const Node *n0 = s0->r.nodes[0];
  int a = n0->out[0]->id, b = -1;
  for (int i = 0; i < g->ntensors && b < 0; i++)
    if (i != a && p0->cls[i] == BUF_WORK && p0->vstage[i] == 0 && tbytes(&x, g->tensors[i]) > 0 &&
        g->tensors[i]->producer == s0->r.nodes[1])
      b = i;
  ck_assert_int_ge(b, 0);
  int64_t keep = p0->offset[b];
  p0->offset[b] = p0->offset[a];
  const char *msg = check_msg(&x, 0);
  ck_assert_msg(strstr(msg, "m.json: error: internal error: memplan: rank 0: buffers '") == msg &&
                    strstr(msg, "' of stage v0 overlap in the work area while both are live\n"),
                "%s", msg);
  p0->offset[b] = keep;
  // A work tensor outside the area.
  keep = p0->offset[a];
  p0->offset[a] = p0->const_bytes;
  ck_assert_str_eq(check_msg(&x, 0),
                   arena_printf(&x.m.arena,
                                "m.json: error: internal error: memplan: rank 0: '%s' of "
                                "recomputing stage v0 has no storage in the work area\n",
                                g->tensors[a]->name));
  p0->offset[a] = keep;
  // The rerun cut short: B reads a tensor it no longer remakes.
  int n = s0->r.n;
  s0->r.n = 0;
  msg = check_msg(&x, 0);
  ck_assert_msg(strstr(msg, "m.json: error: internal error: memplan: rank 0: ") == msg &&
                    strstr(msg, "which its rerun forward does not remake\n"),
                "%s", msg);
  s0->r.n = n;
  model_free(&x.m);
  free(gpt);
}
END_TEST

// An input read by two stages of one rank (interleaved: x by a on v0 and by c on v2, both rank
// 0) would need a copy per stage: one clear error, not a plan that shares one buffer.
START_TEST(test_input_on_two_stages_of_a_rank) {
  static const char *const NET2 =
      "{'format': 'pipec-model', 'version': 1, 'name': 'net',\n"
      " 'inputs': [{'name': 'x', 'shape': ['B', 4]}, {'name': 'y', 'dtype': 'i32', 'shape': ['B'],"
      " 'target': true}],\n"
      " 'params': [{'name': 'w', 'shape': [4, 4], 'init': 'xavier'},"
      " {'name': 'u', 'shape': [4, 4], 'init': 'xavier'}],\n"
      " 'nodes': [{'name': 'a', 'op': 'linear', 'inputs': ['x', 'w']},\n"
      "           {'name': 'r', 'op': 'relu', 'inputs': ['a']},\n"
      "           {'name': 'b', 'op': 'linear', 'inputs': ['r', 'u']},\n"
      "           {'name': 'c', 'op': 'add', 'inputs': ['b', 'x']},\n"
      "           {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['c', 'y']}],\n"
      " 'loss': 'loss'}";
  Model m;
  ck_assert_msg(model_run(&m, NET2), "%s", cap_text(&m.cap));
  TrainConfig tc = {.batch = 4, .microbatches = 2, .mb_size = 2, .opt = OPT_ADAMW};
  Diag *d = &m.cap.d;
  ck_assert(pass_autodiff(&m.g, 2, d));
  const char *split[] = {"r", "b", "loss"};
  PartitionOptions o = {
      .stages = 4, .split = split, .nsplit = 3, .flops_rate = 50e9, .bandwidth = 10e9};
  Program p;
  ck_assert_msg(pass_partition(&m.g, &tc, &o, &p, d) && pass_comm(&m.g, &p, d) &&
                    sched_build(&p, SCHED_INTERLEAVED, 2, 2, &m.arena, d) &&
                    schedule_verify(&p, NULL, NULL, NULL, d),
                "%s", cap_text(&m.cap));
  ck_assert_int_eq(p.vstage_of_node[graph_find(&m.g, "c")->producer->id], 2);
  ck_assert(!plan_memory(&p, d));
  ck_assert_msg(
      strstr(cap_text(&m.cap),
             ": error: inputs[0]: input 'x' is read by two stages of rank 0 (--virtual, zb-v): "
             "each stage would need its own copy, which is not supported; cut "
             "elsewhere\n"),
      "%s", cap_text(&m.cap));
  model_free(&m);
}
END_TEST

// A stage with K > 1 slots keeps its temporaries (live within one action) in the rank's one work
// area when that takes fewer bytes than K copies of them: gpt_char at batch 96, M = 8 (12 rows
// per microbatch), as `pipec plan` plans it. zb-v at S = 2: rank 1's stages (K = 2 each) slot
// only what lives across actions (11808768 B, was 13381632 B; less with its channels within the
// rank, test_local_channels), its temporaries once (1646592 B);
// 1f1b's rank 0 (K = 2, two layers: the temporaries fit into bytes of the slot already dead)
// keeps them, where moving them would not pay. A rank holding several stages tries them all in
// the area too, K = 1 included, one copy shared: zb-v's rank 0 at S = 2 moves those of its first
// stage (K = 3), which alone would not pay, with those of its loss stage (K = 1): 51717184 B,
// was 53290048 B (area 3538944 B). At S = 4 (-D L=8) the same on every zb-v rank. Every plan
// passes plan_check, which checks each work-area buffer lives within one action. The totals are
// those of the send-wait rule (the WAIT_SEND marks: a message's tensor lives only to where its
// send is waited for, before the next action of its microbatch), before it in brackets: zb-v
// S = 2 50930752 (51717184) and 50462720 (52822016); 1f1b S = 2 rank 0 45220864 (46007296);
// zb-v S = 4 90313792 (91100224), ranks 1-3 92979200 (102416384, 102416384, 97697792); 1f1b
// S = 4 83811328 (84204544), 66535424 (67715072), 46456832 (47243264), its rank 0 no longer
// moving its temporaries (K = 4: they fit into bytes the shorter sends leave); interleaved's rank
// 1 52163648 (52372608), likewise.
START_TEST(test_temps_in_work_area) {
  char *gpt = sample("gpt_char.json");
  static const char *l8[] = {"L=8"};
  const GridModel g4 = {"gpt_char", gpt, NULL, 0, 4, NULL}, g8 = {"gpt_char", gpt, l8, 1, 8, NULL};
  struct {
    const GridModel *gm;
    SchedKind k;
    int S, V;
    int64_t total[4], work[4]; // per rank: the plan's sum of regions and work area
  } cases[] = {
      {&g4, SCHED_ZBV, 2, 2, {50930752, 50462720}, {3538944, 1646592}},
      {&g4, SCHED_1F1B, 2, 1, {45220864, 26580032}, {0, 0}},
      {&g8,
       SCHED_ZBV,
       4,
       2,
       {90313792, 92979200, 92979200, 92979200},
       {3538944, 1646592, 1646592, 1646592}},
      {&g8, SCHED_1F1B, 4, 1, {83811328, 66535424, 46456832, 26580032}, {0, 0, 0, 0}},
      {&g4, SCHED_INTERLEAVED, 2, 2, {70810624, 52163648}, {3538944, 0}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    Pipe x;
    ck_assert_msg(model_run_defs(&x.m, cases[c].gm->json, cases[c].gm->defs, cases[c].gm->ndefs),
                  "%s", cap_text(&x.m.cap));
    x.tc = (TrainConfig){.batch = 96, .microbatches = 8, .mb_size = 12, .opt = OPT_ADAMW};
    Diag *d = &x.m.cap.d;
    int S = cases[c].S, V = cases[c].V;
    PartitionOptions o = {.stages = S * V, .flops_rate = 50e9, .bandwidth = 10e9};
    ck_assert(pass_autodiff(&x.m.g, 8, d));
    ck_assert_msg(pass_partition(&x.m.g, &x.tc, &o, &x.p, d) && pass_comm(&x.m.g, &x.p, d) &&
                      sched_build(&x.p, cases[c].k, S, V, &x.m.arena, d) &&
                      schedule_verify(&x.p, NULL, NULL, NULL, d) && plan_memory(&x.p, d),
                  "%s", cap_text(&x.m.cap));
    for (int r = 0; r < S; r++) {
      const Plan *pl = &x.p.ranks[r].plan;
      check_rank(&x, r, cases[c].k, S, V, 8);
      ck_assert_msg(rank_total(&x, r) == cases[c].total[r] && pl->work_bytes == cases[c].work[r],
                    "case %zu rank %d: total %lld work %lld", c, r, (long long)rank_total(&x, r),
                    (long long)pl->work_bytes);
      // Moved: no temporary left in a slot of that stage, and some in the area.
      for (int k = 0; k < x.p.ranks[r].nvs; k++) {
        int v = x.p.ranks[r].vs[k], temps = 0, work = 0;
        for (int i = 0; i < x.m.g.ntensors; i++)
          if (pl->vstage[i] == v) temps += pl->cls[i] == BUF_TEMP, work += pl->cls[i] == BUF_WORK;
        ck_assert_msg(work == 0 || (temps == 0 && pl->work_bytes > 0),
                      "case %zu v%d: %d temporaries in the slot, %d in the work area", c, v, temps,
                      work);
      }
    }
    model_free(&x.m);
  }
  free(gpt);
}
END_TEST

// gpt_char at zb-v, S = 2 (4 stages in a V), M = 8 of 12 rows, batch 96, AdamW: built, verified
// and planned into x (as test_temps_in_work_area's first case).
static void zbv_gpt_char(Pipe *x, const char *gpt) {
  ck_assert_msg(model_run_defs(&x->m, gpt, NULL, 0), "%s", cap_text(&x->m.cap));
  x->tc = (TrainConfig){.batch = 96, .microbatches = 8, .mb_size = 12, .opt = OPT_ADAMW};
  Diag *d = &x->m.cap.d;
  PartitionOptions o = {.stages = 4, .flops_rate = 50e9, .bandwidth = 10e9};
  ck_assert(pass_autodiff(&x->m.g, 8, d));
  ck_assert_msg(pass_partition(&x->m.g, &x->tc, &o, &x->p, d) && pass_comm(&x->m.g, &x->p, d) &&
                    sched_build(&x->p, SCHED_ZBV, 2, 2, &x->m.arena, d) &&
                    schedule_verify(&x->p, NULL, NULL, NULL, d) && plan_memory(&x->p, d),
                "%s", cap_text(&x->m.cap));
}

// plan_check on the work area of a stage with one slot (zb-v's loss stage v3 on rank 0 at S = 2,
// gpt_char as test_temps_in_work_area): its temporaries are there, and a buffer that lives across
// its actions (the loss, read by LOSS after F) moved into the area is rejected.
START_TEST(test_work_area_one_slot) {
  char *gpt = sample("gpt_char.json");
  Pipe x;
  zbv_gpt_char(&x, gpt);
  Graph *g = &x.m.g;
  Plan *p0 = &x.p.ranks[0].plan;
  ck_assert_int_eq(p0->slots[3], 1);
  int work = 0;
  for (int i = 0; i < g->ntensors; i++) work += p0->vstage[i] == 3 && p0->cls[i] == BUF_WORK;
  ck_assert_int_gt(work, 0);
  check_rank(&x, 0, SCHED_ZBV, 2, 2, 8);
  const Tensor *loss = g->loss;
  ck_assert_int_eq(p0->vstage[loss->id], 3);
  ck_assert_int_eq(p0->cls[loss->id], BUF_SAVED);
  p0->cls[loss->id] = BUF_WORK;
  p0->offset[loss->id] = p0->work_base;
  ck_assert_str_eq(check_msg(&x, 0), "m.json: error: internal error: memplan: rank 0: 'loss' of "
                                     "stage v3 lives across actions but is in the work area\n");
  model_free(&x.m);
  free(gpt);
}
END_TEST

// A channel between two stages of one rank is a copy at its RECV, no message in flight: its
// sent tensor lives from where it is made to its last RECV, its copy from that RECV on, not over
// the whole timeline. gpt_char, zb-v, S = 2, M = 8, batch 96 (as test_temps_in_work_area): rank
// 1's v1 sends transformer.h.1.out to v2 right after its F, so its bytes serve v1's B, and the
// gradients v2 sends it are copied just before its B: v1's slot 11415552 B (was 11808768 B: the
// whole timeline held the output, 393216 B). v1 copies v2's gradients after v2's W, its slot's
// last action, but before anything of v2's next microbatch on that slot: the slot frees at the
// copies (schedule_last_actions; the receives of the next microbatch are posted after them), and
// the gradients live from where B makes them to the step end: v2's slot 11022336 B (was
// 11808768 B), the rank 52822016 B (was 55181312 B); with the send-wait rule
// (test_send_waits) both slots 10629120 B, the rank 50462720 B. plan_check rejects the sent tensor
// at the bytes of a buffer its F reads when it makes it, and the copy at the bytes of one its B
// reads.
START_TEST(test_local_channels) {
  char *gpt = sample("gpt_char.json");
  Pipe x;
  zbv_gpt_char(&x, gpt);
  Graph *g = &x.m.g;
  check_rank(&x, 1, SCHED_ZBV, 2, 2, 8);
  Plan *p1 = &x.p.ranks[1].plan;
  ck_assert_int_eq(p1->slot_stride[1], 10629120);
  ck_assert_int_eq(p1->slot_stride[2], 10629120);
  ck_assert_int_eq(rank_total(&x, 1), 50462720);
  // Where v2's slot of m0 frees: the last copy of its gradients, not its W.
  int *freed = malloc(sizeof(int) * (8 * (size_t)x.p.nv + 1));
  schedule_last_actions(&x.p, freed);
  const Action *fa = &x.p.ranks[1].acts[freed[2 * 8 + 0]];
  ck_assert_int_eq(fa->kind, ACT_COPY);
  ck_assert_int_eq(fa->ch->from_v, 2);
  free(freed);
  const Tensor *out = graph_find(g, "transformer.h.1.out");
  const Tensor *dst = graph_find(g, "d:transformer.h.2.resid_1@v1");
  ck_assert(out && dst && p1->vstage[out->id] == 1 && p1->vstage[dst->id] == 1);
  int shared = 0;
  for (int i = 0; i < g->ntensors; i++)
    if (i != out->id && p1->vstage[i] == 1 && p1->cls[i] != BUF_WORK)
      shared +=
          overlaps(p1->offset[out->id], tbytes(&x, out), p1->offset[i], tbytes(&x, g->tensors[i]));
  ck_assert_int_gt(shared, 0); // its bytes reused after its RECV
  // Broken: the output at the bytes of its producer's input (both live where it is made).
  const Tensor *in = out->producer->in[0];
  int64_t keep = p1->offset[out->id];
  p1->offset[out->id] = p1->offset[in->id];
  const char *msg = check_msg(&x, 1);
  ck_assert_msg(strstr(msg, "m.json: error: internal error: memplan: rank 1: buffers '") == msg &&
                    strstr(msg, "' of stage v1 overlap while both are live\n") &&
                    strstr(msg, "'transformer.h.1.out'") && strstr(msg, in->name),
                "%s", msg);
  p1->offset[out->id] = keep;
  // Broken: the copy at the bytes of the forward input B reads with it.
  const Tensor *x0 = graph_find(g, "transformer.h.0.out@v1");
  keep = p1->offset[dst->id];
  p1->offset[dst->id] = p1->offset[x0->id];
  msg = check_msg(&x, 1);
  ck_assert_msg(strstr(msg, "' of stage v1 overlap while both are live\n") &&
                    strstr(msg, "'d:transformer.h.2.resid_1@v1'") &&
                    strstr(msg, "'transformer.h.0.out@v1'"),
                "%s", msg);
  p1->offset[dst->id] = keep;
  model_free(&x.m);
  free(gpt);
}
END_TEST

// Index of the action (kind, v, m) in rank r's list, of SEND / RECV (kind, channel c, m) when
// v < 0 (-1: none).
static int act_at(const Program *p, int r, ActionKind k, int v, int c, int m) {
  const RankProgram *rp = &p->ranks[r];
  for (int i = 0; i < rp->nacts; i++) {
    const Action *a = &rp->acts[i];
    if (a->kind == k && a->m == m && (v >= 0 ? a->v == v : a->ch->id == c)) return i;
  }
  return -1;
}

// The send-wait rule (the WAIT_SEND marks, action_send_waits): the program waits for a message
// before the next action of its stage and microbatch after the SEND, so the sent tensor lives in
// its slot only up to there, not over the whole timeline. gpt_char, zb-v, S = 2, M = 8 (as
// test_local_channels):
// rank 1's v1 sends its two input gradients to v0 (c7, c8) after B and waits before its W; v2
// sends its output to v3 (c2) after F and waits before its B; rank 0's v3 sends its gradients
// (c3, c4) to v2 after B and waits before W. The gradients' bytes serve v1's W: v1's slot
// 10629120 B (11415552 B when they held the whole timeline), v2's 10629120 B (11022336 B), the
// loss stage's 11222016 B (12008448 B); rank 1 50462720 B, rank 0 50930752 B. 1f1b keeps B and
// W together: nothing of the last stage's microbatch follows its gradients' SEND, so they are
// waited for before the B of m + K (K = 1) and the last one at step end. plan_check rejects a
// sent gradient at the bytes of the other one (both live from B's end to the wait).
START_TEST(test_send_waits) {
  char *gpt = sample("gpt_char.json");
  Pipe x;
  zbv_gpt_char(&x, gpt);
  Graph *g = &x.m.g;
  const Program *p = &x.p;
  int M = p->M, *wait = malloc(sizeof(int) * ((size_t)p->nch * M + 1));
  action_send_waits(p, wait);
  struct {
    int c, r, v;     // channel, its sender's rank and stage
    ActionKind next; // the action of (v, m) the program waits before
  } w[] = {{7, 1, 1, ACT_W}, {8, 1, 1, ACT_W}, {2, 1, 2, ACT_B},
           {3, 0, 3, ACT_W}, {4, 0, 3, ACT_W}, {0, 0, 0, ACT_B}};
  for (size_t k = 0; k < sizeof w / sizeof w[0]; k++) {
    ck_assert_int_eq(p->ch[w[k].c].from_v, w[k].v);
    for (int m = 0; m < M; m++) {
      int at = wait[(size_t)w[k].c * M + m];
      ck_assert_int_eq(at, act_at(p, w[k].r, w[k].next, w[k].v, -1, m));
      ck_assert_int_gt(at, act_at(p, w[k].r, ACT_SEND, -1, w[k].c, m));
    }
  }
  for (int c = 0; c < p->nch; c++) // channels within a rank: copies, no wait
    if (p->vs[p->ch[c].from_v].rank == p->vs[p->ch[c].to_v].rank)
      for (int m = 0; m < M; m++) ck_assert_int_eq(wait[(size_t)c * M + m], -1);
  check_rank(&x, 0, SCHED_ZBV, 2, 2, 8);
  check_rank(&x, 1, SCHED_ZBV, 2, 2, 8);
  Plan *p0 = &x.p.ranks[0].plan, *p1 = &x.p.ranks[1].plan;
  ck_assert_int_eq(p1->slot_stride[1], 10629120);
  ck_assert_int_eq(p1->slot_stride[2], 10629120);
  ck_assert_int_eq(p0->slot_stride[3], 11222016);
  ck_assert_int_eq(rank_total(&x, 0), 50930752);
  ck_assert_int_eq(rank_total(&x, 1), 50462720);
  const Tensor *g7 = p->ch[7].t, *g8 = p->ch[8].t;
  ck_assert_str_eq(g7->name, "d:transformer.h.1.resid_1");
  int shared = 0; // its bytes reused after the wait (W's buffers)
  for (int i = 0; i < g->ntensors; i++)
    if (i != g7->id && p1->vstage[i] == 1 && p1->cls[i] != BUF_WORK)
      shared +=
          overlaps(p1->offset[g7->id], tbytes(&x, g7), p1->offset[i], tbytes(&x, g->tensors[i]));
  ck_assert_int_gt(shared, 0);
  int64_t keep = p1->offset[g7->id];
  p1->offset[g7->id] = p1->offset[g8->id];
  const char *msg = check_msg(&x, 1);
  ck_assert_msg(strstr(msg, "' of stage v1 overlap while both are live\n") &&
                    strstr(msg, "'d:transformer.h.1.resid_1'"),
                "%s", msg);
  p1->offset[g7->id] = keep;
  free(wait);
  model_free(&x.m);
  // 1f1b, S = 2: the last stage's gradient (v1 -> v0) is waited for before B(v1, m + 1).
  Pipe y;
  ck_assert_msg(model_run_defs(&y.m, gpt, NULL, 0), "%s", cap_text(&y.m.cap));
  y.tc = (TrainConfig){.batch = 96, .microbatches = 8, .mb_size = 12, .opt = OPT_ADAMW};
  Diag *d = &y.m.cap.d;
  PartitionOptions o = {.stages = 2, .flops_rate = 50e9, .bandwidth = 10e9};
  ck_assert(pass_autodiff(&y.m.g, 8, d));
  ck_assert_msg(pass_partition(&y.m.g, &y.tc, &o, &y.p, d) && pass_comm(&y.m.g, &y.p, d) &&
                    sched_build(&y.p, SCHED_1F1B, 2, 1, &y.m.arena, d) &&
                    schedule_verify(&y.p, NULL, NULL, NULL, d) && plan_memory(&y.p, d),
                "%s", cap_text(&y.m.cap));
  p = &y.p;
  wait = malloc(sizeof(int) * ((size_t)p->nch * M + 1));
  action_send_waits(p, wait);
  int n = 0;
  for (int c = 0; c < p->nch; c++) {
    if (!p->ch[c].grad) continue;
    n++;
    for (int m = 0; m < M; m++)
      ck_assert_int_eq(wait[(size_t)c * M + m], m + 1 < M ? act_at(p, 1, ACT_B, 1, -1, m + 1) : -1);
  }
  ck_assert_int_gt(n, 0);
  free(wait);
  model_free(&y.m);
  free(gpt);
}
END_TEST

int main(void) {
  Suite *s = suite_create("memplan");
  TCase *tc = tcase_create("memplan");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_place_stack_is_tight);
  tcase_add_test(tc, test_place_random);
  tcase_add_test(tc, test_verify_finds_overlaps);
  tcase_add_test(tc, test_plan_classes_and_slots);
  tcase_add_test(tc, test_plan_k_slots);
  tcase_add_test(tc, test_pipeline_plans);
  tcase_add_test(tc, test_plan_check_rejects);
  tcase_add_test(tc, test_recompute_plans);
  tcase_add_test(tc, test_plan_check_rejects_recompute);
  tcase_add_test(tc, test_input_on_two_stages_of_a_rank);
  tcase_add_test(tc, test_temps_in_work_area);
  tcase_add_test(tc, test_local_channels);
  tcase_add_test(tc, test_send_waits);
  tcase_add_test(tc, test_work_area_one_slot);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

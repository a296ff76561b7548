// Unit tests of the memory planner: the placement (compiler/place.c) on hand-made and random
// intervals, its independent checker on overlapping placements, and the plan over a schedule
// (compiler/memplan.c) of a small model: buffer classes (SAVED / TEMP / CONST / PARAM / GRAD),
// slots, optimizer-state offsets, node lists read off the action list.
#include "../../compiler/pipeline.h"
#include "../../compiler/place.h"
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
  ck_assert(pass_schedule(&m.g, &tc, &p, &m.cap.d));
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
  ck_assert(pass_schedule(&m.g, &tc, &p, &m.cap.d) && plan_memory(&p, &m.cap.d));
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
  ck_assert(pass_schedule(&m.g, &tc, &p, &m.cap.d) && plan_memory(&p, &m.cap.d));
  int64_t one = p.ranks[0].plan.bytes[REG_ACTS], stride = p.ranks[0].plan.slot_stride[0];
  p.vs[0].K = 2;
  ck_assert(plan_memory(&p, &m.cap.d));
  ck_assert_int_eq(p.ranks[0].plan.slots[0], 2);
  ck_assert_int_eq(p.ranks[0].plan.slot_stride[0], stride);
  ck_assert_int_eq(p.ranks[0].plan.bytes[REG_ACTS], one + stride);
  model_free(&m);
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
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

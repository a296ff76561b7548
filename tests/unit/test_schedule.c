// Unit tests of the schedule pass (compiler/schedule.c): the action list it builds for one rank
// and one stage, its text dump, and its checker on hand-written programs of two ranks and two
// stages (B and W split, one channel each way) broken one rule at a time, each with its exact
// message; the lock-step simulation (compiler/simulate.c) accepts the valid ones.
#include "../../compiler/partition.h"
#include "../../compiler/pipeline.h"
#include "../../compiler/schedule.h"
#include "../../compiler/simulate.h"
#include "testutil.h"

// ---- A hand-written program: stage v0 on rank 0 (loads), v1 on rank 1 (loss), M = 2, split.

enum { M = 2 };

typedef struct Hand {
  Graph g;            // only its name is read (by schedule_print)
  VStage vs[2];       // v0, v1
  Channel ch[2];      // c0: activation v0 -> v1; c1: its gradient v1 -> v0
  RankProgram r[2];   // rank 0, rank 1
  int rvs[2];         // each rank's stage list
  Action acts[2][32]; // each rank's actions
  Program p;          // the program
} Hand;

#define A(k, v, m) ((Action){ACT_##k, v, m, NULL})
#define C(k, c, m) ((Action){ACT_##k, -1, m, &h->ch[c]})
#define STEP(k, v) ((Action){ACT_##k, v, -1, NULL})

// A valid 1F1B-like program (rank 0: F0 F1 B0 W0 B1 W1 with the channels around them; each rank
// waits for its sends, WAIT_SENDS, before its step end).
static void hand_init(Hand *h) {
  memset(h, 0, sizeof *h);
  h->g.name = "hand";
  h->vs[0] = (VStage){.v = 0, .rank = 0, .split = true, .K = 2, .loads = true};
  h->vs[1] = (VStage){.v = 1, .rank = 1, .split = true, .K = 1, .has_loss = true};
  static Tensor t = {.name = "h"}, dt = {.name = "d:h"};
  h->ch[0] = (Channel){0, &t, 0, 1, false, 0, 0, NULL};
  h->ch[1] = (Channel){1, &dt, 1, 0, true, 1, 0, NULL};
  Action r0[] = {A(LOAD, 0, 0),        A(F, 0, 0),        C(SEND, 0, 0),  A(LOAD, 0, 1),
                 A(F, 0, 1),           C(SEND, 0, 1),     C(RECV, 1, 0),  A(B, 0, 0),
                 A(W, 0, 0),           C(RECV, 1, 1),     A(B, 0, 1),     A(W, 0, 1),
                 STEP(WAIT_SENDS, -1), STEP(TIED_SUM, 0), STEP(NORM, -1), STEP(OPT, -1)};
  Action r1[] = {C(RECV, 0, 0),        A(F, 1, 0),        A(LOSS, 1, 0),  A(B, 1, 0),
                 C(SEND, 1, 0),        A(W, 1, 0),        C(RECV, 0, 1),  A(F, 1, 1),
                 A(LOSS, 1, 1),        A(B, 1, 1),        C(SEND, 1, 1),  A(W, 1, 1),
                 STEP(WAIT_SENDS, -1), STEP(TIED_SUM, 1), STEP(NORM, -1), STEP(OPT, -1)};
  memcpy(h->acts[0], r0, sizeof r0);
  memcpy(h->acts[1], r1, sizeof r1);
  for (int r = 0; r < 2; r++) {
    h->rvs[r] = r;
    h->r[r] = (RankProgram){.rank = r, .acts = h->acts[r], .nacts = 16, .vs = &h->rvs[r], .nvs = 1};
  }
  h->p = (Program){.g = &h->g,
                   .M = M,
                   .split_bw = true,
                   .vs = h->vs,
                   .nv = 2,
                   .ch = h->ch,
                   .nch = 2,
                   .ranks = h->r,
                   .nranks = 2};
}

// The checker's message for h ("" when it accepts).
static char *check_msg(Hand *h, bool *ok) {
  static char buf[512];
  Capture cap;
  cap_open(&cap, "m.json");
  *ok = schedule_check(&h->p, &cap.d);
  snprintf(buf, sizeof buf, "%s", cap_text(&cap));
  cap_close(&cap);
  return buf;
}

static void expect(Hand *h, const char *want) {
  bool ok;
  const char *got = check_msg(h, &ok);
  ck_assert_msg(!ok, "accepted; wanted: %s", want);
  char full[512];
  snprintf(full, sizeof full, "m.json: %s", want);
  ck_assert_str_eq(got, full);
}

static void set(Hand *h, int rank, int at, Action x) {
  h->acts[rank][at] = x;
}

// Removes rank's action at (the later ones move up).
static void drop(Hand *h, int rank, int at) {
  RankProgram *r = &h->r[rank];
  for (int i = at; i + 1 < r->nacts; i++) h->acts[rank][i] = h->acts[rank][i + 1];
  r->nacts--;
}

static void swap(Hand *h, int rank, int i, int j) {
  Action t = h->acts[rank][i];
  h->acts[rank][i] = h->acts[rank][j];
  h->acts[rank][j] = t;
}

START_TEST(test_valid_program_passes) {
  Hand hh, *h = &hh;
  hand_init(h);
  bool ok;
  const char *msg = check_msg(h, &ok);
  ck_assert_msg(ok, "%s", msg);
  ck_assert_str_eq(msg, "");
  // The lock-step simulation accepts it too, and predicts it at unit costs (B = W = 1): rank 0
  // F0 [0, 1] F1 [1, 2]; rank 1 F0 B0 [1, 3] (m0's gradient sent at 3) W0 F1 B1 [3, 6] (m1's
  // at 6) W1 [6, 7]; rank 0 B0 W0 [3, 5], B1 W1 [6, 8]: span 8.
  Capture cap;
  cap_open(&cap, "m.json");
  Arena a;
  arena_init(&a);
  SchedStats st;
  ck_assert_msg(schedule_verify(&h->p, NULL, &st, &a, &cap.d), "%s", cap_text(&cap));
  ck_assert(st.span == 8);
  ck_assert_int_eq(st.peak[0], 2);
  ck_assert_int_eq(st.peak[1], 1);
  arena_free(&a);
  cap_close(&cap);
}
END_TEST

START_TEST(test_missing_and_duplicate) {
  Hand hh, *h = &hh;
  hand_init(h);
  set(h, 0, 10, A(F, 0, 0)); // B(v0, m1) replaced by a second F(v0, m0)
  expect(h, "error: schedule: rank 0 action 10 F(v0, m0): appears twice (action 1 first)\n");
  hand_init(h);
  drop(h, 1, 15); // OPT
  expect(h, "error: schedule: rank 1: OPT is missing\n");
  hand_init(h);
  set(h, 0, 10, A(LOAD, 0, 0)); // B(v0, m1) replaced by a second LOAD(v0, m0)
  expect(h, "error: schedule: rank 0 action 10 LOAD(v0, m0): appears twice (action 0 first)\n");
  hand_init(h);
  set(h, 1, 9, C(RECV, 0, 1)); // B(v1, m1) replaced by a second RECV(c0, m1)
  expect(h,
         "error: schedule: rank 1 action 9 RECV(c0, m1): appears twice (rank 1 action 6 first)\n");
  hand_init(h);
  set(h, 1, 9, A(LOSS, 1, 0)); // B(v1, m1) gone (a duplicate in its place is found first)
  expect(h, "error: schedule: rank 1 action 9 LOSS(v1, m0): appears twice (action 2 first)\n");
  hand_init(h);
  drop(h, 1, 9); // B(v1, m1)
  expect(h, "error: schedule: rank 1: B(v1, m1) is missing\n");
}
END_TEST

START_TEST(test_orders) {
  Hand hh, *h = &hh;
  hand_init(h);
  swap(h, 1, 1, 3); // rank 1: B(v1, m0) before F(v1, m0)
  expect(h, "error: schedule: rank 1 action 1 B(v1, m0): comes before F(v1, m0) at action 3 "
            "(B after F)\n");
  hand_init(h);
  swap(h, 0, 7, 8); // rank 0: W(v0, m0) before B(v0, m0)
  expect(h, "error: schedule: rank 0 action 7 W(v0, m0): comes before B(v0, m0) at action 8 "
            "(W after B)\n");
  hand_init(h);
  swap(h, 0, 8, 11); // rank 0: W(v0, m1) before its B
  expect(h, "error: schedule: rank 0 action 8 W(v0, m1): comes before B(v0, m1) at action 10 "
            "(W after B)\n");
  hand_init(h);
  // B(v0, m1) at 7, B(v0, m0) later: B descends in m (split, B accumulates the memory-bound
  // weight gradients: ascending too).
  Action r0[] = {A(LOAD, 0, 0), A(F, 0, 0), C(SEND, 0, 0), A(LOAD, 0, 1), A(F, 0, 1), C(SEND, 0, 1),
                 C(RECV, 1, 1), A(B, 0, 1), A(W, 0, 1),    C(RECV, 1, 0), A(B, 0, 0), A(W, 0, 0)};
  memcpy(h->acts[0], r0, sizeof r0);
  expect(h, "error: schedule: rank 0 action 7 B(v0, m1): comes before B(v0, m0) at action 10 "
            "(B of a stage in ascending m)\n");
  hand_init(h);
  // B ascending, W(v0, m1) at 10 before W(v0, m0) at 11: W descends in m.
  Action r0w[] = {A(LOAD, 0, 0), A(F, 0, 0),    C(SEND, 0, 0), A(LOAD, 0, 1),
                  A(F, 0, 1),    C(SEND, 0, 1), C(RECV, 1, 0), A(B, 0, 0),
                  C(RECV, 1, 1), A(B, 0, 1),    A(W, 0, 1),    A(W, 0, 0)};
  memcpy(h->acts[0], r0w, sizeof r0w);
  expect(h, "error: schedule: rank 0 action 10 W(v0, m1): comes before W(v0, m0) at action 11 "
            "(W of a stage in ascending m)\n");
  hand_init(h);
  swap(h, 0, 0, 1); // LOAD after F
  expect(h, "error: schedule: rank 0 action 0 F(v0, m0): comes before LOAD(v0, m0) at action 1 "
            "(LOAD before F)\n");
  hand_init(h);
  swap(h, 1, 1, 2); // LOSS before F
  expect(h, "error: schedule: rank 1 action 1 LOSS(v1, m0): comes before F(v1, m0) at action 2 "
            "(LOSS after F)\n");
}
END_TEST

START_TEST(test_unsplit_b_ascending) {
  Hand hh, *h = &hh;
  hand_init(h);
  // Without the split, B accumulates the weight gradients: B of a stage in ascending m. W
  // actions become no-ops replaced by the channel actions moved around.
  h->p.split_bw = h->vs[0].split = h->vs[1].split = false;
  Action r0[] = {A(LOAD, 0, 0),        A(F, 0, 0),        C(SEND, 0, 0),  A(LOAD, 0, 1), A(F, 0, 1),
                 C(SEND, 0, 1),        C(RECV, 1, 0),     C(RECV, 1, 1),  A(B, 0, 1),    A(B, 0, 0),
                 STEP(WAIT_SENDS, -1), STEP(TIED_SUM, 0), STEP(NORM, -1), STEP(OPT, -1)};
  Action r1[] = {C(RECV, 0, 0),  A(F, 1, 0),    A(LOSS, 1, 0),        A(B, 1, 0),
                 C(SEND, 1, 0),  C(RECV, 0, 1), A(F, 1, 1),           A(LOSS, 1, 1),
                 A(B, 1, 1),     C(SEND, 1, 1), STEP(WAIT_SENDS, -1), STEP(TIED_SUM, 1),
                 STEP(NORM, -1), STEP(OPT, -1)};
  memcpy(h->acts[0], r0, sizeof r0);
  memcpy(h->acts[1], r1, sizeof r1);
  h->r[0].nacts = h->r[1].nacts = 14;
  expect(h, "error: schedule: rank 0 action 8 B(v0, m1): comes before B(v0, m0) at action 9 "
            "(B of a stage in ascending m)\n");
  swap(h, 0, 8, 9);
  bool ok;
  const char *msg = check_msg(h, &ok);
  ck_assert_msg(ok, "%s", msg);
  set(h, 0, 8, A(W, 0, 0));
  expect(h, "error: schedule: rank 0 action 8 W(v0, m0): W on a stage that does not split B "
            "and W\n");
}
END_TEST

START_TEST(test_placement_and_ranges) {
  Hand hh, *h = &hh;
  hand_init(h);
  set(h, 0, 1, A(F, 1, 0)); // rank 0 runs F of v1
  expect(h, "error: schedule: rank 0 action 1 F(v1, m0): stage v1 runs on rank 1\n");
  hand_init(h);
  set(h, 0, 1, A(F, 0, 2));
  expect(h, "error: schedule: rank 0 action 1 F(v0, m2): microbatch out of range (M = 2)\n");
  hand_init(h);
  set(h, 0, 1, A(F, 2, 0));
  expect(h, "error: schedule: rank 0 action 1 F(v2, m0): stage out of range (2 stages)\n");
  hand_init(h);
  set(h, 0, 2, C(SEND, 1, 0)); // rank 0 sends the gradient channel v1 -> v0
  expect(h, "error: schedule: rank 0 action 2 SEND(c1, m0): channel c1 is sent by stage v1, "
            "which runs on rank 1\n");
  hand_init(h);
  set(h, 1, 2, A(LOAD, 1, 0)); // v1 reads no input
  expect(h, "error: schedule: rank 1 action 2 LOAD(v1, m0): the stage reads no data input\n");
  hand_init(h);
  set(h, 0, 1, STEP(NORM, 0));
  expect(h, "error: schedule: rank 0 action 1 NORM(v0): a rank-wide action has no stage\n");
}
END_TEST

START_TEST(test_channels) {
  Hand hh, *h = &hh;
  hand_init(h);
  swap(h, 0, 1, 2); // SEND(c0, m0) before F(v0, m0)
  expect(h, "error: schedule: rank 0 action 1 SEND(c0, m0): comes before the F that makes its "
            "activation\n");
  hand_init(h);
  swap(h, 0, 6, 7); // RECV(c1, m0) after B(v0, m0)
  expect(h, "error: schedule: rank 0 action 7 RECV(c1, m0): comes after the B that reads its "
            "gradient\n");
  hand_init(h);
  drop(h, 1, 6); // RECV(c0, m1)
  expect(h, "error: schedule: RECV(c0, m1) is missing\n");
  hand_init(h);
  drop(h, 0, 2); // SEND(c0, m0)
  expect(h, "error: schedule: SEND(c0, m0) is missing\n");
}
END_TEST

START_TEST(test_step_end) {
  Hand hh, *h = &hh;
  hand_init(h);
  swap(h, 1, 14, 15); // OPT before NORM
  expect(h, "error: schedule: rank 1 action 14 OPT: comes before NORM at action 15\n");
  hand_init(h);
  swap(h, 1, 13, 14); // NORM before TIED_SUM
  expect(h, "error: schedule: rank 1 action 13 NORM: comes before TIED_SUM at action 14\n");
  hand_init(h);
  swap(h, 0, 11, 13); // TIED_SUM before the last W
  expect(h, "error: schedule: rank 0 action 11 TIED_SUM(v0): comes before the rank's last F/B/W "
            "at action 13\n");
  hand_init(h);
  set(h, 0, 13, STEP(NORM, -1)); // TIED_SUM(v0) gone, NORM twice
  expect(h, "error: schedule: rank 0 action 14 NORM: appears twice (action 13 first)\n");
  hand_init(h);
  set(h, 0, 13, A(W, 0, 1)); // TIED_SUM(v0) gone (a duplicate W is found first)
  expect(h, "error: schedule: rank 0 action 13 W(v0, m1): appears twice (action 11 first)\n");
}
END_TEST

// ---- The pass on a model: one rank, one stage, the order the program has always run.

// Inserts x at rank's index at (the later ones move down).
static void insert(Hand *h, int rank, int at, Action x) {
  RankProgram *r = &h->r[rank];
  for (int i = r->nacts; i > at; i--) h->acts[rank][i] = h->acts[rank][i - 1];
  h->acts[rank][at] = x;
  r->nacts++;
}

// The message marks (POST_RECV, WAIT_SEND; compiler/lower_comm.c): the lowering places them on
// the valid program (rank 0 posts the gradients' receives at step start, m < K = 2, and waits for
// the activations' sends before its B of that microbatch; rank 1 posts m0's activation at step
// start and m1's after W(v1, m0), K = 1, and waits for the gradient of m0 before its W), the
// checker and the simulation accept them; then one rule broken at a time.
START_TEST(test_marks) {
  Hand hh, *h = &hh;
  hand_init(h);
  Capture cap;
  cap_open(&cap, "m.json");
  Arena a;
  arena_init(&a);
  ck_assert_msg(lower_comm(&h->p, &a, &cap.d), "%s", cap_text(&cap));
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  for (int r = 0; r < 2; r++) {
    for (int i = 0; i < h->p.ranks[r].nacts; i++) {
      char t[64];
      action_text(&h->p.ranks[r].acts[i], t, sizeof t);
      fprintf(f, "%s%s", i ? " " : "", t);
    }
    fputc('\n', f);
  }
  fclose(f);
  ck_assert_str_eq(text, "POST_RECV(c1, m0) POST_RECV(c1, m1) LOAD(v0, m0) F(v0, m0) SEND(c0, m0) "
                         "LOAD(v0, m1) F(v0, m1) SEND(c0, m1) RECV(c1, m0) WAIT_SEND(c0, m0) "
                         "B(v0, m0) W(v0, m0) RECV(c1, m1) WAIT_SEND(c0, m1) B(v0, m1) W(v0, m1) "
                         "WAIT_SENDS TIED_SUM NORM OPT\n"
                         "POST_RECV(c0, m0) RECV(c0, m0) F(v1, m0) LOSS(v1, m0) B(v1, m0) "
                         "SEND(c1, m0) WAIT_SEND(c1, m0) W(v1, m0) POST_RECV(c0, m1) RECV(c0, m1) "
                         "F(v1, m1) LOSS(v1, m1) B(v1, m1) SEND(c1, m1) WAIT_SEND(c1, m1) "
                         "W(v1, m1) WAIT_SENDS TIED_SUM NORM OPT\n");
  free(text);
  // Readers read the marks' places: where each send is waited for, where each receive is posted.
  int wait[2 * M], post[2 * M];
  action_send_waits(&h->p, wait);
  action_recv_posts(&h->p, post);
  ck_assert_int_eq(wait[0], 10); // WAIT_SEND(c0, m0) before rank 0's B(v0, m0)
  ck_assert_int_eq(wait[1], 14);
  ck_assert_int_eq(wait[2], 7); // WAIT_SEND(c1, m0) before rank 1's W(v1, m0)
  ck_assert_int_eq(post[0], 0);
  ck_assert_int_eq(post[1], 8); // POST_RECV(c0, m1) after W(v1, m0)
  ck_assert_int_eq(post[2], 0);
  ck_assert_int_eq(post[3], 1);
  SchedStats st;
  ck_assert_msg(schedule_verify(&h->p, NULL, &st, &a, &cap.d), "%s", cap_text(&cap));
  ck_assert(st.span == 8); // as without the marks (they take no time)
  // lower_comm again: the same list (it starts from the list without its marks).
  int n0 = h->p.ranks[0].nacts, n1 = h->p.ranks[1].nacts;
  ck_assert(lower_comm(&h->p, &a, &cap.d));
  ck_assert_int_eq(h->p.ranks[0].nacts, n0);
  ck_assert_int_eq(h->p.ranks[1].nacts, n1);
  cap_close(&cap);
  arena_free(&a);

  hand_init(h); // a receive posted after its RECV
  insert(h, 1, 1, C(POST_RECV, 0, 0));
  expect(h, "error: schedule: rank 1 action 1 POST_RECV(c0, m0): comes after its RECV at "
            "action 0\n");
  hand_init(h); // a send waited for before it is sent
  insert(h, 0, 0, C(WAIT_SEND, 0, 0));
  expect(h, "error: schedule: rank 0 action 0 WAIT_SEND(c0, m0): comes before its SEND at "
            "action 3\n");
  hand_init(h); // on the other side of the channel
  insert(h, 0, 0, C(POST_RECV, 0, 0));
  expect(h, "error: schedule: rank 0 action 0 POST_RECV(c0, m0): channel c0 is received by stage "
            "v1, which runs on rank 1\n");
  hand_init(h);
  insert(h, 1, 0, C(WAIT_SEND, 0, 0));
  expect(h, "error: schedule: rank 1 action 0 WAIT_SEND(c0, m0): channel c0 is sent by stage v0, "
            "which runs on rank 0\n");
  hand_init(h); // twice
  insert(h, 1, 0, C(POST_RECV, 0, 1));
  insert(h, 1, 0, C(POST_RECV, 0, 1));
  expect(h, "error: schedule: rank 1 action 1 POST_RECV(c0, m1): appears twice (rank 1 action 0 "
            "first)\n");
  hand_init(h); // after the step end
  insert(h, 0, 14, C(WAIT_SEND, 0, 1));
  expect(h, "error: schedule: rank 0 action 14 WAIT_SEND(c0, m1): comes after the step end at "
            "action 13\n");
  hand_init(h); // a channel within one rank has no message
  h->vs[1].rank = 0;
  h->p.nranks = 1;
  h->rvs[0] = 0;
  insert(h, 0, 0, C(POST_RECV, 0, 0));
  expect(h, "error: schedule: rank 0 action 0 POST_RECV(c0, m0): a channel within one rank is a "
            "copy, no message\n");
  drop(h, 0, 0); // its SEND too: a COPY does the whole channel
  expect(h, "error: schedule: rank 0 action 2 SEND(c0, m0): a channel within one rank is a copy, "
            "no message\n");
  hand_init(h); // and a channel between two ranks is no copy
  set(h, 1, 0, C(COPY, 0, 0));
  expect(h, "error: schedule: rank 1 action 0 COPY(c0, m0): a channel between two ranks is a "
            "message, no copy\n");
}
END_TEST

// A channel between two stages of one rank (v0 and v1 both on rank 0, rank 1 empty): the
// lowering makes its SEND / RECV pair one COPY at the RECV's place; the checker wants it after
// the action that makes the tensor and before the one that reads it.
START_TEST(test_copy) {
  Hand hh, *h = &hh;
  hand_init(h);
  h->vs[1].rank = 0;
  h->p.nranks = 1;
  // rank 0: LOAD0 F0 LOAD1 F1 ... as one rank: v0's and v1's actions in a valid order.
  Action r0[] = {A(LOAD, 0, 0),     A(F, 0, 0),     C(SEND, 0, 0), C(RECV, 0, 0), A(F, 1, 0),
                 A(LOSS, 1, 0),     A(B, 1, 0),     C(SEND, 1, 0), A(W, 1, 0),    C(RECV, 1, 0),
                 A(B, 0, 0),        A(W, 0, 0),     A(LOAD, 0, 1), A(F, 0, 1),    C(SEND, 0, 1),
                 C(RECV, 0, 1),     A(F, 1, 1),     A(LOSS, 1, 1), A(B, 1, 1),    C(SEND, 1, 1),
                 A(W, 1, 1),        C(RECV, 1, 1),  A(B, 0, 1),    A(W, 0, 1),    STEP(TIED_SUM, 0),
                 STEP(TIED_SUM, 1), STEP(NORM, -1), STEP(OPT, -1)};
  memcpy(h->acts[0], r0, sizeof r0);
  h->r[0].nacts = (int)(sizeof r0 / sizeof r0[0]);
  static int both[2] = {0, 1};
  h->r[0].vs = both;
  h->r[0].nvs = 2;
  Capture cap;
  cap_open(&cap, "m.json");
  Arena a;
  arena_init(&a);
  ck_assert_msg(lower_comm(&h->p, &a, &cap.d), "%s", cap_text(&cap));
  ck_assert_int_eq(h->p.ranks[0].nacts, 24); // 4 SENDs dropped, 4 RECVs made COPYs, no marks
  const Action *x = &h->p.ranks[0].acts[2];
  ck_assert(x->kind == ACT_COPY && x->ch->id == 0 && x->m == 0);
  ck_assert_msg(schedule_verify(&h->p, NULL, NULL, NULL, &cap.d), "%s", cap_text(&cap));
  cap_close(&cap);
  // The COPY before the F that makes its tensor, after the one that reads it.
  Action *l = h->p.ranks[0].acts;
  Action t = l[1];
  l[1] = l[2], l[2] = t; // COPY(c0, m0) F(v0, m0)
  bool ok;
  ck_assert_str_eq(check_msg(h, &ok),
                   "m.json: error: schedule: rank 0 action 1 COPY(c0, m0): comes "
                   "before the F that makes its activation\n");
  t = l[1], l[1] = l[2], l[2] = t;
  t = l[2], l[2] = l[3], l[3] = t; // F(v1, m0) COPY(c0, m0)
  ck_assert_str_eq(check_msg(h, &ok),
                   "m.json: error: schedule: rank 0 action 3 COPY(c0, m0): comes "
                   "after the F that reads its activation\n");
  arena_free(&a);
}
END_TEST

START_TEST(test_pass_one_rank) {
  Model m;
  ck_assert(model_run(&m, TINY_NET));
  TrainConfig tc = {.batch = 4, .microbatches = 2, .mb_size = 2, .opt = OPT_SGD};
  Program p;
  ck_assert(pass_autodiff(&m.g, 2, &m.cap.d));
  ck_assert((pass_partition(&m.g, &tc, &(PartitionOptions){.stages = 1}, &p, &m.cap.d) &&
             pass_schedule(&m.g, &tc, &p, &m.cap.d)));
  ck_assert_msg(schedule_check(&p, &m.cap.d), "%s", cap_text(&m.cap));
  ck_assert_msg(schedule_verify(&p, NULL, NULL, NULL, &m.cap.d), "%s", cap_text(&m.cap));
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  schedule_print(&p, f);
  fclose(f);
  ck_assert_str_eq(text,
                   "schedule for net: 1 rank, 1 virtual stage, 2 microbatches, B and W not split\n"
                   "stage v0: rank 0, K 1, F 3 nodes, B 3 nodes, W 0 nodes, step 0 nodes, 1 "
                   "parameters, loads, loss\n"
                   "rank 0: 11 actions\n"
                   "  LOAD(v0, m0)\n  F(v0, m0)\n  LOSS(v0, m0)\n  B(v0, m0)\n"
                   "  LOAD(v0, m1)\n  F(v0, m1)\n  LOSS(v0, m1)\n  B(v0, m1)\n"
                   "  TIED_SUM(v0)\n  NORM\n  OPT\n");
  free(text);
  // The segments are the graph's nodes by role, in graph order.
  ck_assert_int_eq(p.vs[0].f.n + p.vs[0].b.n + p.vs[0].step.n, m.g.nnodes);
  for (int i = 1; i < p.vs[0].b.n; i++)
    ck_assert_int_lt(p.vs[0].b.nodes[i - 1]->id, p.vs[0].b.nodes[i]->id);
  model_free(&m);
}
END_TEST

// ---- The step end's messages (compiler/lower_step_end.c): a parameter tied between v0 and v1,
// one use buffer on each (b0 made by v0, b1 by v1; v0's step sums both). The lowering makes one
// exchange message per buffer (x0: b0 from rank 0 to rank 1, x1: b1 from rank 1 to rank 0) and
// places its actions; the checker accepts them; then one rule broken at a time.

typedef struct Tied {
  Tensor w, b0, b1;  // the parameter, its use buffers
  Tensor *bufs[2];   // b0, b1
  int stages[2];     // v0, v1
  int buf_stage[2];  // b0 by v0, b1 by v1
  Exchange ex;       // the group
  Tensor *sum_in[2]; // v0's step node reads b0 and b1
  Node sum;          // that node
  Node *step[1];     // v0's step segment
} Tied;

// Lowers h with the tied parameter t and copies the lists back into h->acts (so that set, drop,
// swap and insert edit them).
static void tied_lower(Hand *h, Tied *t, Arena *a) {
  memset(t, 0, sizeof *t);
  t->w.name = "w", t->b0.name = "g0", t->b1.name = "g1";
  t->bufs[0] = &t->b0, t->bufs[1] = &t->b1;
  t->stages[0] = 0, t->stages[1] = 1;
  t->buf_stage[0] = 0, t->buf_stage[1] = 1;
  t->ex = (Exchange){&t->w, t->stages, 2, t->bufs, t->buf_stage, 2};
  t->sum_in[0] = &t->b0, t->sum_in[1] = &t->b1;
  t->sum.in = t->sum_in, t->sum.nin = 2;
  t->step[0] = &t->sum;
  h->vs[0].step = (Segment){t->step, 1};
  h->p.ex = &t->ex, h->p.nex = 1;
  lower_step_end(&h->p, a);
  for (int r = 0; r < 2; r++) {
    memcpy(h->acts[r], h->r[r].acts, (size_t)h->r[r].nacts * sizeof(Action));
    h->r[r].acts = h->acts[r];
  }
}

static char *rank_text(const Hand *h, int r) {
  static char buf[1024];
  size_t o = 0;
  for (int i = 0; i < h->r[r].nacts; i++) {
    char t[64];
    action_text(&h->r[r].acts[i], t, sizeof t);
    o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", i ? " " : "", t);
  }
  return buf;
}

#define X(k, id) ((Action){ACT_##k, -1, id, NULL})

START_TEST(test_step_msgs) {
  Hand hh, *h = &hh;
  Tied tt, *t = &tt;
  Arena a;
  arena_init(&a);
  hand_init(h);
  tied_lower(h, t, &a);
  ck_assert_int_eq(h->p.nexm, 2);
  ck_assert(h->p.exm[0].buf == &t->b0 && h->p.exm[0].from == 0 && h->p.exm[0].to == 1);
  ck_assert(h->p.exm[1].buf == &t->b1 && h->p.exm[1].from == 1 && h->p.exm[1].to == 0);
  ck_assert_int_eq(h->p.exm[0].tag, 2); // after the channels' tags 0 and 1
  ck_assert_int_eq(h->p.exm[1].tag, 3);
  ck_assert_str_eq(rank_text(h, 0), "LOAD(v0, m0) F(v0, m0) SEND(c0, m0) LOAD(v0, m1) F(v0, m1) "
                                    "SEND(c0, m1) RECV(c1, m0) B(v0, m0) W(v0, m0) RECV(c1, m1) "
                                    "B(v0, m1) W(v0, m1) WAIT_SENDS EX_POST(x1) EX_SEND(x0) "
                                    "EX_WAIT(x1) TIED_SUM WAIT_SENDS NORM OPT");
  ck_assert_str_eq(rank_text(h, 1), "RECV(c0, m0) F(v1, m0) LOSS(v1, m0) B(v1, m0) SEND(c1, m0) "
                                    "W(v1, m0) RECV(c0, m1) F(v1, m1) LOSS(v1, m1) B(v1, m1) "
                                    "SEND(c1, m1) W(v1, m1) WAIT_SENDS EX_POST(x0) EX_SEND(x1) "
                                    "EX_WAIT(x0) TIED_SUM WAIT_SENDS NORM OPT");
  bool ok;
  const char *msg = check_msg(h, &ok);
  ck_assert_msg(ok, "%s", msg);
  // Again: the same lists (the pass drops its own kinds first).
  lower_step_end(&h->p, &a);
  ck_assert_int_eq(h->r[0].nacts, 20);
  ck_assert_str_eq(rank_text(h, 1), "RECV(c0, m0) F(v1, m0) LOSS(v1, m0) B(v1, m0) SEND(c1, m0) "
                                    "W(v1, m0) RECV(c0, m1) F(v1, m1) LOSS(v1, m1) B(v1, m1) "
                                    "SEND(c1, m1) W(v1, m1) WAIT_SENDS EX_POST(x0) EX_SEND(x1) "
                                    "EX_WAIT(x0) TIED_SUM WAIT_SENDS NORM OPT");

  hand_init(h), tied_lower(h, t, &a);
  drop(h, 0, 12); // the WAIT_SENDS before the exchange
  expect(h, "error: schedule: rank 0: no WAIT_SENDS between its last SEND at action 5 and its "
            "first TIED_SUM at action 15\n");
  hand_init(h), tied_lower(h, t, &a);
  drop(h, 0, 17); // the WAIT_SENDS after the sum
  expect(h, "error: schedule: rank 0: no WAIT_SENDS between its last EX_SEND at action 14 and "
            "NORM at action 17\n");
  hand_init(h), tied_lower(h, t, &a);
  swap(h, 0, 11, 14); // EX_SEND(x0) before W(v0, m1)
  expect(h, "error: schedule: rank 0 action 11 EX_SEND(x0): comes before the rank's last F/B/W "
            "at action 14\n");
  hand_init(h), tied_lower(h, t, &a);
  drop(h, 0, 13); // EX_POST(x1) after NORM
  insert(h, 0, 18, X(EX_POST, 1));
  expect(h, "error: schedule: rank 0 action 18 EX_POST(x1): comes after NORM at action 17\n");
  hand_init(h), tied_lower(h, t, &a);
  drop(h, 0, 15); // EX_WAIT(x1)
  expect(h, "error: schedule: rank 0: EX_WAIT(x1) is missing\n");
  hand_init(h), tied_lower(h, t, &a);
  swap(h, 0, 13, 15); // EX_WAIT(x1) before its EX_POST
  expect(h, "error: schedule: rank 0 action 13 EX_WAIT(x1): comes before its EX_POST at action "
            "15\n");
  hand_init(h), tied_lower(h, t, &a);
  swap(h, 0, 15, 16); // EX_WAIT(x1) after the TIED_SUM that sums b1
  expect(h, "error: schedule: rank 0 action 16 EX_WAIT(x1): comes after TIED_SUM(v0) at action "
            "15, which reads its buffer\n");
  hand_init(h), tied_lower(h, t, &a);
  set(h, 0, 13, X(EX_SEND, 0)); // EX_SEND(x0) twice
  expect(h, "error: schedule: rank 0 action 14 EX_SEND(x0): appears twice (action 13 first)\n");
  hand_init(h), tied_lower(h, t, &a);
  set(h, 0, 13, X(EX_POST, 0)); // rank 0 receives x0
  expect(h, "error: schedule: rank 0 action 13 EX_POST(x0): exchange message x0 is received by "
            "rank 1\n");
  hand_init(h), tied_lower(h, t, &a);
  set(h, 0, 13, X(EX_POST, 2));
  expect(h, "error: schedule: rank 0 action 13 EX_POST(x2): not an exchange message of the "
            "program\n");
  hand_init(h), tied_lower(h, t, &a);
  set(h, 0, 12, STEP(WAIT_SENDS, 0));
  expect(h, "error: schedule: rank 0 action 12 WAIT_SENDS(v0): a rank-wide action has no stage\n");
  hand_init(h), tied_lower(h, t, &a);
  set(h, 0, 12, A(WAIT_SENDS, -1, 0));
  expect(h, "error: schedule: rank 0 action 12 WAIT_SENDS(v-1, m0): a step-end action has no "
            "microbatch\n");
  arena_free(&a);
}
END_TEST

int main(void) {
  Suite *s = suite_create("schedule");
  TCase *tc = tcase_create("schedule");
  tcase_add_test(tc, test_valid_program_passes);
  tcase_add_test(tc, test_missing_and_duplicate);
  tcase_add_test(tc, test_orders);
  tcase_add_test(tc, test_unsplit_b_ascending);
  tcase_add_test(tc, test_placement_and_ranges);
  tcase_add_test(tc, test_channels);
  tcase_add_test(tc, test_step_end);
  tcase_add_test(tc, test_pass_one_rank);
  tcase_add_test(tc, test_marks);
  tcase_add_test(tc, test_copy);
  tcase_add_test(tc, test_step_msgs);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

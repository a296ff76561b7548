// Unit tests of the built-in pipeline schedules (compiler/schedules.c) and the lock-step
// verifier (compiler/simulate.c) on hand-made programs: a chain of S * V stages, each sending one
// activation forward and one gradient backward, plus a skip channel from stage 0 to stage 2 (and
// its gradient back) when there are three stages or more. Every built-in schedule is accepted
// over a grid of (S, V, M) with its K and bubble checked against the known formulas; broken
// lists are rejected with their exact message and grid; the dump of 1f1b at S = 4, M = 8 and the
// grid of zb-v there are golden files.
#include <math.h>

#include "../../compiler/pipeline.h"
#include "../../compiler/schedule.h"
#include "../../compiler/simulate.h"
#include "../../compiler/uneven.h"
#include "testutil.h"

// A chain program for S ranks and V stages per rank, M microbatches (the schedule not built).
typedef struct Chain {
  Arena a;   // everything below
  Graph g;   // only its name is read (by schedule_print)
  Tensor *t; // one tensor per channel (its name printed)
  Program p; // the program
} Chain;

static void chain_init(Chain *c, int S, int V, int M) {
  memset(c, 0, sizeof *c);
  arena_init(&c->a);
  c->g.name = "chain";
  int nv = S * V, nch = 2 * (nv - 1) + (nv >= 3 ? 2 : 0);
  Program *p = &c->p;
  *p = (Program){.g = &c->g, .M = M, .nv = nv, .nch = nch};
  p->vs = ARENA_ARRAY(&c->a, VStage, nv);
  for (int v = 0; v < nv; v++)
    p->vs[v] = (VStage){.v = v, .rank = v % S, .loads = v == 0, .has_loss = v == nv - 1};
  p->ch = ARENA_ARRAY(&c->a, Channel, nch + 1);
  c->t = ARENA_ARRAY(&c->a, Tensor, nch + 1);
  int n = 0;
  for (int v = 0; v + 1 < nv; v++) {
    char *a = ARENA_ARRAY(&c->a, char, 16), *g = ARENA_ARRAY(&c->a, char, 16);
    snprintf(a, 16, "h%d", v);
    snprintf(g, 16, "d:h%d", v);
    c->t[n].name = a;
    p->ch[n] = (Channel){n, &c->t[n], v, v + 1, false, n, 0, NULL};
    n++;
    c->t[n].name = g;
    p->ch[n] = (Channel){n, &c->t[n], v + 1, v, true, n, 0, NULL};
    n++;
  }
  if (nv >= 3) {
    c->t[n].name = "skip";
    p->ch[n] = (Channel){n, &c->t[n], 0, 2, false, n, 0, NULL};
    n++;
    c->t[n].name = "d:skip";
    p->ch[n] = (Channel){n, &c->t[n], 2, 0, true, n, 0, NULL};
    n++;
  }
}

// Builds schedule k on c and verifies it: the message ("" when accepted) and the stats.
static const char *build_verify(Chain *c, SchedKind k, int S, int V, bool *ok, SchedStats *st) {
  static char buf[8192];
  Capture cap;
  cap_open(&cap, "m.json");
  *ok =
      sched_build(&c->p, k, S, V, &c->a, &cap.d) && schedule_verify(&c->p, NULL, st, &c->a, &cap.d);
  snprintf(buf, sizeof buf, "%s", cap_text(&cap));
  cap_close(&cap);
  return buf;
}

// Drops the message marks (POST_RECV, WAIT_SEND) of c's lists, so that a test edits the list of
// compute actions and channels by index; verify lowers them again (lower_comm).
static void unmark(Chain *c) {
  for (int r = 0; r < c->p.nranks; r++) {
    RankProgram *rp = &c->p.ranks[r];
    int n = 0;
    for (int i = 0; i < rp->nacts; i++)
      if (!action_mark(rp->acts[i].kind)) rp->acts[n++] = rp->acts[i];
    rp->nacts = n;
  }
}

// Verifies c as it stands (after hand edits, its marks placed again by lower_comm on the edited
// list): the message ("" when accepted).
static const char *verify(Chain *c, bool *ok) {
  static char buf[8192];
  Capture cap;
  cap_open(&cap, "m.json");
  *ok = schedule_check(&c->p, &cap.d) && lower_comm(&c->p, &c->a, &cap.d) &&
        schedule_verify(&c->p, NULL, NULL, NULL, &cap.d);
  snprintf(buf, sizeof buf, "%s", cap_text(&cap));
  cap_close(&cap);
  return buf;
}

// Whether schedule k runs (S, V, M).
static bool legal(SchedKind k, int S, int V, int M) {
  return k == SCHED_INTERLEAVED ? M % S == 0 : k == SCHED_ZBV ? V == 2 : V == 1;
}

START_TEST(test_grid_accepted) {
  static const int Ms[] = {1, 2, 3, 4, 8};
  int accepted = 0;
  for (int k = 0; k < SCHED_COUNT; k++)
    for (int S = 1; S <= 4; S++)
      for (int V = 1; V <= 2; V++)
        for (int mi = 0; mi < 5; mi++) {
          int M = Ms[mi];
          if (!legal((SchedKind)k, S, V, M)) continue;
          Chain c;
          chain_init(&c, S, V, M);
          bool ok;
          SchedStats st;
          const char *msg = build_verify(&c, (SchedKind)k, S, V, &ok, &st);
          ck_assert_msg(ok, "%s S=%d V=%d M=%d: %s", sched_name(k), S, V, M, msg);
          accepted++;
          // K is the simulated peak in flight, per stage.
          for (int v = 0; v < S * V; v++) ck_assert_int_eq(c.p.vs[v].K, st.peak[v]);
          double want = -1, f11 = (double)(S - 1) / (M + S - 1);
          if (k == SCHED_GPIPE) {
            want = f11;
            for (int r = 0; r < S; r++) ck_assert_int_eq(st.peak[r], M);
          } else if (k == SCHED_1F1B || k == SCHED_ZBH1) {
            for (int r = 0; r < S; r++) ck_assert_int_eq(st.peak[r], S - r < M ? S - r : M);
            if (k == SCHED_1F1B) want = f11;
            // zb-h1: W fills some of 1f1b's bubble at the same memory (no closed form here).
            else if (S > 1)
              ck_assert_msg(st.bubble < f11 - 1e-9, "zb-h1 S=%d M=%d: bubble %g, 1f1b %g", S, M,
                            st.bubble, f11);
            else
              want = 0;
          } else if (k == SCHED_ZBV)
            ; // test_zbv_grid
          else
            want = (double)(S - 1) / (V * M + S - 1); // Megatron's interleaved bubble
          if (want >= 0)
            ck_assert_msg(fabs(st.bubble - want) < 1e-9, "%s S=%d V=%d M=%d: bubble %g, want %g",
                          sched_name(k), S, V, M, st.bubble, want);
          arena_free(&c.a);
        }
  // Legal cells: gpipe, 1f1b, zb-h1 at V = 1 (4 S x 5 M each); interleaved at V = 1, 2 where S
  // divides M (S = 1: 5, S = 2: 3, S = 3: 1, S = 4: 2); zb-v at V = 2 (4 S x 5 M).
  ck_assert_int_eq(accepted, 3 * 4 * 5 + 2 * (5 + 3 + 1 + 2) + 4 * 5);
}
END_TEST

// zb-v over S 1..6 and every M 1..16 (no M is refused): the V placement (rank r holds stages r
// and 2S - 1 - r, ascending; the channel between the two middle stages is local to rank S - 1,
// and at S = 2 the skip's gradient from v2 to v0 crosses back), K the simulated peak, and the
// memory against 1f1b's: 1f1b's rank 0 keeps min(S, M) microbatches of one stage, 2 min(S, M)
// in halves, and zb-v's stages are halves. Every zb-v rank keeps at most that, the skip's
// included: the lowering sends a first-stage activation the receiver reads after a chunk-1
// gradient made later after that gradient, so it is not received (into a slot) early for the
// pair's message order (before that, ranks r > 0 kept one more, two at S = 2). The bubble is
// below zb-h1's at the same S and M (M = 1: no W to move, the same).
START_TEST(test_zbv_grid) {
  for (int S = 1; S <= 6; S++)
    for (int M = 1; M <= 16; M++) {
      Chain c;
      chain_init(&c, S, 2, M);
      bool ok;
      SchedStats st;
      const char *msg = build_verify(&c, SCHED_ZBV, S, 2, &ok, &st);
      ck_assert_msg(ok, "zb-v S=%d M=%d: %s", S, M, msg);
      int f11 = S < M ? S : M;
      for (int r = 0; r < S; r++) {
        const RankProgram *rp = &c.p.ranks[r];
        ck_assert_int_eq(rp->nvs, 2);
        ck_assert_int_eq(rp->vs[0], r);
        ck_assert_int_eq(rp->vs[1], 2 * S - 1 - r);
        ck_assert_int_eq(c.p.vs[r].rank, r);
        ck_assert_int_eq(c.p.vs[2 * S - 1 - r].rank, r);
        ck_assert_int_eq(sched_rank_of(SCHED_ZBV, S, 2, 2 * S - 1 - r), r);
        int k = c.p.vs[r].K + c.p.vs[2 * S - 1 - r].K;
        ck_assert_int_eq(c.p.vs[r].K, st.peak[r]);
        ck_assert_int_eq(c.p.vs[2 * S - 1 - r].K, st.peak[2 * S - 1 - r]);
        ck_assert_msg(k <= 2 * f11, "zb-v S=%d M=%d rank %d: K %d + %d", S, M, r, c.p.vs[r].K,
                      c.p.vs[2 * S - 1 - r].K);
      }
      arena_free(&c.a);
      chain_init(&c, S, 1, M);
      SchedStats h1;
      msg = build_verify(&c, SCHED_ZBH1, S, 1, &ok, &h1);
      ck_assert_msg(ok, "zb-h1 S=%d M=%d: %s", S, M, msg);
      if (S > 1)
        ck_assert_msg(M == 1 ? st.bubble < h1.bubble + 1e-12 : st.bubble < h1.bubble - 1e-9,
                      "S=%d M=%d: zb-v bubble %g, zb-h1 %g", S, M, st.bubble, h1.bubble);
      arena_free(&c.a);
    }
  ck_assert_int_eq(sched_rank_of(SCHED_INTERLEAVED, 3, 2, 4), 1);
  ck_assert_int_eq(sched_rank_of(SCHED_ZBV, 3, 2, 4), 1);
  ck_assert_int_eq(sched_rank_of(SCHED_ZBV, 3, 2, 3), 2);
}
END_TEST

START_TEST(test_needs_named) {
  Chain c;
  chain_init(&c, 2, 2, 3);
  bool ok;
  SchedStats st;
  const char *msg = build_verify(&c, SCHED_INTERLEAVED, 2, 2, &ok, &st);
  ck_assert(!ok);
  ck_assert_str_eq(msg, "m.json: error: schedule interleaved: needs the microbatches M a multiple "
                        "of the stages S (M = 3, S = 2)\n");
  arena_free(&c.a);
  chain_init(&c, 2, 2, 4);
  msg = build_verify(&c, SCHED_1F1B, 2, 2, &ok, &st);
  ck_assert(!ok);
  ck_assert_str_eq(msg, "m.json: error: schedule 1f1b: runs one stage per rank (V = 1, not 2); "
                        "interleaved runs several\n");
  arena_free(&c.a);
  chain_init(&c, 2, 1, 4);
  msg = build_verify(&c, SCHED_ZBV, 2, 1, &ok, &st);
  ck_assert(!ok);
  ck_assert_str_eq(msg, "m.json: error: schedule zb-v: runs two stages per rank in a V (V = 2, not "
                        "1)\n");
  arena_free(&c.a);
  SchedKind k;
  ck_assert(sched_parse("zb-h1", &k) && k == SCHED_ZBH1);
  ck_assert(sched_parse("zb-v", &k) && k == SCHED_ZBV);
  ck_assert(!sched_parse("zbh1", &k));
}
END_TEST

// The generators alone: the reference orders of pipeline-semantics.md §7, S = 4, M = 8.
static const char *order_text(SchedKind k, int S, int V, int M, int r) {
  static char buf[1024];
  Action a[64];
  Capture cap;
  cap_open(&cap, "m.json");
  int n = sched_order(k, S, V, M, r, a, &cap.d);
  ck_assert_int_ge(n, 0);
  cap_close(&cap);
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < n; i++)
    len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s%d.%d", i ? " " : "",
                            action_name(a[i].kind), a[i].v, a[i].m);
  return buf;
}

START_TEST(test_orders) {
  ck_assert_str_eq(order_text(SCHED_GPIPE, 2, 1, 3, 1), "F1.0 F1.1 F1.2 B1.0 B1.1 B1.2");
  ck_assert_str_eq(order_text(SCHED_1F1B, 4, 1, 4, 1), "F1.0 F1.1 F1.2 B1.0 F1.3 B1.1 B1.2 B1.3");
  ck_assert_str_eq(order_text(SCHED_1F1B, 4, 1, 1, 0), "F0.0 B0.0");
  ck_assert_str_eq(order_text(SCHED_ZBH1, 3, 1, 3, 0),
                   "F0.0 F0.1 F0.2 B0.0 W0.0 B0.1 B0.2 W0.1 W0.2");
  // Interleaved S = 2, V = 2, M = 4, rank 0 (stages 0 and 2): warm-up 2 + 2 forwards in groups
  // of S microbatches, then one F one B, the backward chunks reversed.
  ck_assert_str_eq(order_text(SCHED_INTERLEAVED, 2, 2, 4, 0),
                   "F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0 F2.3 B0.1 B2.2 B2.3 "
                   "B0.2 B0.3");
  // zb-v S = 2, M = 4: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2. Rank 0: 3 F0; no F1
  // F0 pair; 2 x F1 B1 W1; then B0 W0 F0 F1 B1 W1; the cool-down B0 W0 twice.
  ck_assert_str_eq(order_text(SCHED_ZBV, 2, 2, 4, 0),
                   "F0.0 F0.1 F0.2 F3.0 B3.0 W3.0 F3.1 B3.1 W3.1 B0.0 W0.0 F0.3 F3.2 B3.2 W3.2 "
                   "B0.1 W0.1 F3.3 B3.3 W3.3 B0.2 W0.2 B0.3 W0.3");
  // Rank 1: F0; F1 F0; F1 B1 W1; B0 W0 F0 F1 B1 W1; cool-down B0 B1, B0 W0, then W1, W0.
  ck_assert_str_eq(order_text(SCHED_ZBV, 2, 2, 4, 1),
                   "F1.0 F2.0 F1.1 F2.1 B2.0 W2.0 B1.0 W1.0 F1.2 F2.2 B2.1 W2.1 B1.1 W1.1 F1.3 "
                   "F2.3 B2.2 W2.2 B1.2 B2.3 B1.3 W1.2 W2.3 W1.3");
  // M = 1 < 2S - 1: the order of n = 3 microbatches with those from 1 on dropped.
  ck_assert_str_eq(order_text(SCHED_ZBV, 2, 2, 1, 1), "F1.0 F2.0 B2.0 W2.0 B1.0 W1.0");
}
END_TEST

// A receive goes in the sender's order, before the earliest reader of it and the messages
// after it: interleaved S = 2, V = 2, M = 2 with the skip from stage 0 to stage 3 (rank 0 to
// rank 1). Rank 0 sends h0 m0, skip m0, h0 m1, ...; rank 1 reads skip m0 only at F(v3, m0),
// after F(v1, m1) reads h0 m1, so RECV(skip, m0) is posted before F(v1, m1).
START_TEST(test_recv_in_sender_order) {
  Chain c;
  chain_init(&c, 2, 2, 2);
  ck_assert_int_eq(c.p.nch, 8);
  c.p.ch[6].to_v = 3; // skip: v0 -> v3
  c.p.ch[7].from_v = 3;
  bool ok;
  SchedStats st;
  const char *msg = build_verify(&c, SCHED_INTERLEAVED, 2, 2, &ok, &st);
  ck_assert_msg(ok, "%s", msg);
  const RankProgram *r = &c.p.ranks[1];
  int skip0 = -1, f11 = -1;
  for (int i = 0; i < r->nacts; i++) {
    const Action *x = &r->acts[i];
    if (x->kind == ACT_RECV && x->ch->id == 6 && x->m == 0) skip0 = i;
    if (x->kind == ACT_F && x->v == 1 && x->m == 1) f11 = i;
  }
  ck_assert_int_ge(skip0, 0);
  ck_assert_int_lt(skip0, f11);
  ck_assert_int_eq(r->acts[f11 - 1].kind, ACT_RECV); // then RECV(h0, m1) right before its F
  ck_assert_int_eq(r->acts[f11 - 1].ch->id, 0);
  ck_assert_int_eq(r->acts[f11 - 2].ch->id, 6);
  arena_free(&c.a);
}
END_TEST

// The 1f1b program of S = 2, M = 2 (B and W not split), edited by the tests below:
//   rank 0: LOAD0 F0 s> LOAD1 F1 s> r< B0 r< B1 T N O
//   rank 1: r> F0 LOSS0 B0 s< r> F1 LOSS1 B1 s< T N O
static void two(Chain *c, SchedKind k) {
  chain_init(c, 2, 1, 2);
  bool ok;
  SchedStats st;
  const char *msg = build_verify(c, k, 2, 1, &ok, &st);
  ck_assert_msg(ok, "%s", msg);
  unmark(c);
}

static void expect(Chain *c, const char *want) {
  bool ok;
  const char *got = verify(c, &ok);
  ck_assert_msg(!ok, "accepted; wanted: %s", want);
  ck_assert_str_eq(got, want);
}

// The same interleaved program with rank 1's two receives before F(v1, m1) swapped: the
// message orders differ, a deadlock; the grid names each rank's chunk ("F1.0": m1, chunk 0).
START_TEST(test_interleaved_swapped_recv) {
  Chain c;
  chain_init(&c, 2, 2, 2);
  c.p.ch[6].to_v = 3;
  c.p.ch[7].from_v = 3;
  bool ok;
  SchedStats st;
  const char *msg = build_verify(&c, SCHED_INTERLEAVED, 2, 2, &ok, &st);
  ck_assert_msg(ok, "%s", msg);
  unmark(&c);
  Action *a = c.p.ranks[1].acts;
  int f11 = 0;
  while (!(a[f11].kind == ACT_F && a[f11].v == 1 && a[f11].m == 1)) f11++;
  Action t = a[f11 - 1];
  a[f11 - 1] = a[f11 - 2];
  a[f11 - 2] = t;
  expect(&c, "m.json: error: schedule: deadlock after 11 steps (no rank can move); the grid, "
             "blocked actions marked '*':\n"
             "  rank 0: ld   F0.0 s>   s>   ld   F1.0 s>   r>   F0.1 s>   s>   r>*\n"
             "  rank 1: .    .    .    r>   F0.0 s>   .    .    .    .    .    r>*\n"
             "  rank 0 action 19 RECV(c2, m1): waits for its SEND on rank 1, which has not run\n"
             "  rank 1 action 11 RECV(c0, m1): rank 0 sent SEND(c6, m0) first (the two sides' "
             "message orders differ)\n");
  arena_free(&c.a);
}
END_TEST

START_TEST(test_swapped_send_order) {
  Chain c;
  two(&c, SCHED_1F1B);
  Action *a = c.p.ranks[0].acts; // rank 0 sends m1 before m0: LOAD0 F0 LOAD1 F1 s>m1 s>m0
  Action s0 = a[2];
  a[2] = a[3];
  a[3] = a[4];
  a[4] = a[5];
  a[5] = s0;
  expect(&c, "m.json: error: schedule: deadlock after 6 steps (no rank can move); the grid, "
             "blocked actions marked '*':\n"
             "  rank 0: ld F0 ld F1 s> s> r<*\n"
             "  rank 1: .  .  .  .  .  .  r>*\n"
             "  rank 0 action 8 RECV(c1, m0): waits for its SEND on rank 1, which has not run\n"
             "  rank 1 action 1 RECV(c0, m0): rank 0 sent SEND(c0, m1) first (the two sides' "
             "message orders differ)\n");
  arena_free(&c.a);
}
END_TEST

START_TEST(test_circular_wait) {
  Chain c;
  two(&c, SCHED_1F1B);
  // rank 0: LOAD0 F0 r<m0 LOAD1 F1 s>m0 s>m1 B0 ...: it waits for m0's gradient before sending
  // m0's activation (the RECV is still before its B and the SENDs after their F: only the
  // simulation sees the cycle).
  Action *a = c.p.ranks[0].acts;
  a[2] = (Action){ACT_RECV, -1, 0, &c.p.ch[1]};
  a[5] = (Action){ACT_SEND, -1, 0, &c.p.ch[0]};
  a[6] = (Action){ACT_SEND, -1, 1, &c.p.ch[0]};
  expect(&c, "m.json: error: schedule: deadlock after 2 steps (no rank can move); the grid, "
             "blocked actions marked '*':\n"
             "  rank 0: ld F0 r<*\n"
             "  rank 1: .  .  r>*\n"
             "  rank 0 action 4 RECV(c1, m0): waits for its SEND on rank 1, which has not run\n"
             "  rank 1 action 1 RECV(c0, m0): waits for its SEND on rank 0, which has not run\n");
  arena_free(&c.a);
}
END_TEST

START_TEST(test_missing_backward) {
  Chain c;
  two(&c, SCHED_1F1B);
  RankProgram *r = &c.p.ranks[1]; // drop B(v1, m1) at 8
  for (int i = 8; i + 1 < r->nacts; i++) r->acts[i] = r->acts[i + 1];
  r->nacts--;
  expect(&c, "m.json: error: schedule: rank 1: B(v1, m1) is missing\n");
  arena_free(&c.a);
}
END_TEST

START_TEST(test_w_before_b) {
  Chain c;
  two(&c, SCHED_ZBH1);
  Action *a = c.p.ranks[1].acts, t = a[3]; // rank 1: r> F0 ls B0 s< W0 ...
  ck_assert_int_eq(a[3].kind, ACT_B);
  ck_assert_int_eq(a[5].kind, ACT_W);
  a[3] = a[5];
  a[5] = t;
  expect(&c, "m.json: error: schedule: rank 1 action 3 W(v1, m0): comes before B(v1, m0) at "
             "action 5 (W after B)\n");
  arena_free(&c.a);
}
END_TEST

// Index of action (kind, v or channel, m) in rank r's list (-1: none).
static int find_act(const Chain *c, int r, ActionKind k, int vc, int m) {
  const RankProgram *rp = &c->p.ranks[r];
  for (int i = 0; i < rp->nacts; i++) {
    const Action *x = &rp->acts[i];
    if (x->kind == k && x->m == m && (k == ACT_SEND || k == ACT_RECV ? x->ch->id : x->v) == vc)
      return i;
  }
  return -1;
}

START_TEST(test_reused_slot) {
  Chain c;
  two(&c, SCHED_1F1B);
  c.p.vs[0].K = 1; // rank 0 holds two microbatches before its first B (m1 from its LOAD)
  expect(&c, "m.json: error: schedule: rank 0 action 4 LOAD(v0, m1): reuses slot 0 of stage v0 "
             "(K = 1) while m0 is live (until its B)\n");
  arena_free(&c.a);
  // Split: the slot is live until W. zb-h1 S = 2, M = 2, rank 1 runs F0 B0 W0 F1 B1 W1 (K 1);
  // with W(v1, m0) moved after F(v1, m1) (the marks left where the lowering put them: the
  // receive of m1 posted after W0's old place), m0 still holds the one slot when m1's activation
  // arrives (the receive takes the slot).
  chain_init(&c, 2, 1, 2);
  bool ok;
  SchedStats st;
  const char *msg = build_verify(&c, SCHED_ZBH1, 2, 1, &ok, &st);
  ck_assert_msg(ok, "%s", msg);
  // POST_RECV(c0, m0) r> F0 ls B0 s< WAIT_SEND(c1, m0) W0 POST_RECV(c0, m1) r> F1 ls B1 s< W1
  int w0 = find_act(&c, 1, ACT_W, 1, 0), f1 = find_act(&c, 1, ACT_F, 1, 1);
  Action *a = c.p.ranks[1].acts, x = a[w0];
  ck_assert_int_eq(a[w0 - 1].kind, ACT_WAIT_SEND);
  ck_assert_int_eq(a[w0 + 1].kind, ACT_POST_RECV);
  memmove(a + w0, a + w0 + 1, sizeof(Action) * (size_t)(f1 - w0));
  a[f1] = x;
  Capture cap;
  cap_open(&cap, "m.json");
  ck_assert(!schedule_verify(&c.p, NULL, NULL, NULL, &cap.d));
  ck_assert_str_eq(cap_text(&cap),
                   "m.json: error: schedule: rank 1 action 8 RECV(c0, m1): reuses slot 0 of "
                   "stage v1 (K = 1) while m0 is live (until its W)\n");
  cap_close(&cap);
  arena_free(&c.a);
  two(&c, SCHED_ZBH1);
  c.p.vs[1].K = 0; // K 0 is read as one slot; rank 1 releases at W: fine with one
  msg = verify(&c, &ok);
  ck_assert_msg(ok, "%s", msg);
  arena_free(&c.a);
}
END_TEST

// Moves rank r's action at index from to index to (to < from), shifting those between.
static void move_act(Chain *c, int r, int from, int to) {
  Action *a = c->p.ranks[r].acts, x = a[from];
  memmove(a + to + 1, a + to, sizeof(Action) * (size_t)(from - to));
  a[to] = x;
}

// The send-buffer rule: 1f1b, S = 3, M = 2, on the chain with the skip (c4: v0 -> v2, its
// gradient c5 back). Rank 2 (K = 1) makes c5 of m1 in B(v2, m1), over the buffer whose send of
// m0 is complete only once rank 0 has run RECV(c5, m0). Rank 0 edited to receive both of rank
// 1's gradients (c1, m0 and m1) before c5 of m0: every count and order holds and both sides
// keep their message orders, but RECV(c1, m1) needs rank 1's B(v1, m1), which needs c3 of m1 from
// rank 2's B(v2, m1), which waits for RECV(c5, m0): a cycle only the rule sees.
START_TEST(test_send_buffer_rule) {
  Chain c;
  chain_init(&c, 3, 1, 2);
  bool ok;
  SchedStats st;
  const char *msg = build_verify(&c, SCHED_1F1B, 3, 1, &ok, &st);
  ck_assert_msg(ok, "%s", msg);
  ck_assert_int_eq(c.p.vs[2].K, 1);
  unmark(&c);
  // Rank 0: ... SEND(c4, m1) RECV(c1, m0) RECV(c5, m0) B(v0, m0) RECV(c1, m1) ...: RECV(c1, m1)
  // moved before RECV(c5, m0).
  int skip0 = find_act(&c, 0, ACT_RECV, 5, 0), at = find_act(&c, 0, ACT_RECV, 1, 1);
  ck_assert_int_eq(find_act(&c, 0, ACT_RECV, 1, 0), skip0 - 1);
  ck_assert_int_eq(at, skip0 + 2);
  move_act(&c, 0, at, skip0);
  // Not a deadlock: the generated code posts rank 0's receive of (c5, m0) at step start (m0 <
  // K of v0), so the send completes while rank 0 waits for c1 and B(v2, m1) goes on. A rule keyed
  // on the RECV's wait (it once was) rejects this schedule with a deadlock at B(v2, m1).
  msg = verify(&c, &ok);
  ck_assert_msg(ok, "%s", msg);
  arena_free(&c.a);
}
END_TEST

// Per-stage costs: 1f1b, S = 2, M = 1, stage v1 three times as slow. Rank 0's F runs [0, 1],
// rank 1's F [1, 4] and B [4, 10], rank 0's B [10, 12]: span 12, busy 3 + 9 of 2 * 12.
START_TEST(test_costs) {
  Chain c;
  chain_init(&c, 2, 1, 1);
  Capture cap;
  cap_open(&cap, "m.json");
  ck_assert(sched_build(&c.p, SCHED_1F1B, 2, 1, &c.a, &cap.d));
  StageCost cost[2] = {{1, 2, 0}, {3, 6, 0}};
  SchedStats st;
  ck_assert_msg(schedule_verify(&c.p, cost, &st, &c.a, &cap.d), "%s", cap_text(&cap));
  ck_assert(fabs(st.span - 12) < 1e-12);
  ck_assert(fabs(st.bubble - 0.5) < 1e-12);
  cap_close(&cap);
  arena_free(&c.a);
}
END_TEST

// The send-wait rule in the predicted times: zb-h1, S = 2, M = 1 (v1 split, v0 not: at M = 1
// its W would only trail its B), each message 0.5 in transit, F = B = 1 on both stages, W = 3 on
// v1. Rank 1 runs r> F0 ls B0 s< W0: the RECV completes at 1 + 0.5 (rank 0's F [0, 1], then its
// SEND), F [1.5, 2.5], B [2.5, 3.5], the gradient's SEND at 3.5; W(v1, m0) waits for that send,
// which completes at 3.5 + 0.5 (its receive posted at step start, m0 < K), so W runs [4, 7].
// Rank 0's RECV completes at 4, its B [4, 5]. Span 7, busy 2 + 5 of 2 * 7. The old rule (the
// wait free in time) ran W [3.5, 6.5]: span 6.5.
START_TEST(test_send_wait_time) {
  Chain c;
  chain_init(&c, 2, 1, 1);
  Capture cap;
  cap_open(&cap, "m.json");
  ck_assert(sched_build(&c.p, SCHED_ZBH1, 2, 1, &c.a, &cap.d));
  ck_assert(!c.p.vs[0].split && c.p.vs[1].split);
  int w = find_act(&c, 1, ACT_W, 1, 0);
  ck_assert_int_eq(find_act(&c, 1, ACT_SEND, 1, 0), w - 2); // s< WAIT_SEND W0: W waits for it
  ck_assert_int_eq(c.p.ranks[1].acts[w - 1].kind, ACT_WAIT_SEND);
  ck_assert_int_eq(c.p.ranks[1].acts[w - 1].ch->id, 1);
  StageCost cost[2] = {{1, 1, 0}, {1, 1, 3}};
  double xfer[2] = {0.5, 0.5};
  SchedStats st;
  ck_assert_msg(schedule_verify_xfer(&c.p, cost, xfer, &st, &c.a, &cap.d), "%s", cap_text(&cap));
  ck_assert_msg(fabs(st.span - 7) < 1e-12, "span %g", st.span);
  ck_assert_msg(fabs(st.bubble - 0.5) < 1e-12, "bubble %g", st.bubble);
  ck_assert(fabs(st.t0[1][w] - 4) < 1e-12 && fabs(st.t1[1][w] - 7) < 1e-12);
  int b0 = find_act(&c, 0, ACT_B, 0, 0);
  ck_assert(fabs(st.t0[0][b0] - 4) < 1e-12 && fabs(st.t1[0][b0] - 5) < 1e-12);
  // Without transfers the send completes at once: W [3, 6], rank 0's B [3, 4], span 6.
  ck_assert_msg(schedule_verify_xfer(&c.p, cost, NULL, &st, &c.a, &cap.d), "%s", cap_text(&cap));
  ck_assert_msg(fabs(st.span - 6) < 1e-12, "span %g", st.span);
  cap_close(&cap);
  arena_free(&c.a);
}
END_TEST

// A list the lowering cannot post a receive in: 1f1b, S = 2, M = 4 (K of v1 = 1), rank 1's
// LOSS(v1, m0) moved after RECV(c0, m3). The receive of (c0, m1) into v1's one slot can be
// posted only after v1's last action of m0, now that LOSS, which follows RECV(c0, m1): lower_comm
// refuses the list (before the marks were actions, the verifier posted it there anyway and
// reported the send-wait rule's deadlock at rank 0's B(v0, m1); the printer refused it).
START_TEST(test_send_wait_deadlock) {
  Chain c;
  chain_init(&c, 2, 1, 4);
  bool ok;
  SchedStats st;
  const char *msg = build_verify(&c, SCHED_1F1B, 2, 1, &ok, &st);
  ck_assert_msg(ok, "%s", msg);
  ck_assert_int_eq(c.p.vs[1].K, 1);
  unmark(&c);
  int ls = find_act(&c, 1, ACT_LOSS, 1, 0), r3 = find_act(&c, 1, ACT_RECV, 0, 3);
  ck_assert(ls >= 0 && r3 > ls);
  Action *a = c.p.ranks[1].acts, x = a[ls];
  memmove(a + ls, a + ls + 1, sizeof(Action) * (size_t)(r3 - ls));
  a[r3] = x; // ... s<(m2) r>(m3) LOSS(v1, m0) F(v1, m3) ...
  expect(&c, "m.json: error: internal error: lower_comm: rank 1: RECV(c0, m1) comes before the "
             "last action of m0\n");
  arena_free(&c.a);
}
END_TEST

// Text against tests/golden/NAME (PIPEC_UPDATE_GOLDEN=1 rewrites the file first).
static void golden(const char *text, const char *name) {
  const char *src = getenv("PIPEC_SOURCE_DIR");
  ck_assert_ptr_nonnull(src);
  char path[512];
  snprintf(path, sizeof path, "%s/tests/golden/%s", src, name);
  if (getenv("PIPEC_UPDATE_GOLDEN")) {
    FILE *g = fopen(path, "w");
    ck_assert_ptr_nonnull(g);
    fputs(text, g);
    fclose(g);
  }
  FILE *g = fopen(path, "r");
  ck_assert_msg(g != NULL, "%s", path);
  static char want[65536];
  size_t n = fread(want, 1, sizeof want - 1, g);
  want[n] = 0;
  fclose(g);
  ck_assert_str_eq(text, want);
}

// p's grid (schedule_print_grid) against tests/golden/NAME.
static void golden_grid(const Program *p, const char *name) {
  char *text = NULL;
  size_t len = 0;
  Capture cap;
  cap_open(&cap, "m.json");
  FILE *f = open_memstream(&text, &len);
  ck_assert_msg(schedule_print_grid(p, f, &cap.d), "%s", cap_text(&cap));
  fclose(f);
  cap_close(&cap);
  golden(text, name);
  free(text);
}

// The dump of 1f1b at S = 4, M = 8 and its grid against tests/golden/1f1b_s4_m8.{schedule,grid}.
START_TEST(test_golden_1f1b) {
  Chain c;
  chain_init(&c, 4, 1, 8);
  bool ok;
  SchedStats st;
  const char *msg = build_verify(&c, SCHED_1F1B, 4, 1, &ok, &st);
  ck_assert_msg(ok, "%s", msg);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  schedule_print(&c.p, f);
  fclose(f);
  golden(text, "1f1b_s4_m8.schedule");
  free(text);
  golden_grid(&c.p, "1f1b_s4_m8.grid");
  arena_free(&c.a);
}
END_TEST

// The grid of zb-v at S = 4, M = 8 on the chain (tests/golden/zbv_s4_m8.grid): the V placement
// (rank 0 runs chunks 0 and 1 = stages 0 and 7), the local copies between stages 3 and 4 on rank
// 3, W filling the drain.
START_TEST(test_golden_zbv) {
  Chain c;
  chain_init(&c, 4, 2, 8);
  bool ok;
  SchedStats st;
  const char *msg = build_verify(&c, SCHED_ZBV, 4, 2, &ok, &st);
  ck_assert_msg(ok, "%s", msg);
  golden_grid(&c.p, "zbv_s4_m8.grid");
  arena_free(&c.a);
}
END_TEST

// The lowering's passes, each list after each pass (sched_lower_dump): the compute order, then
// add_send_recv, add_load_loss, add_step_end, lower_comm (the marks and copies), on the chain of
// S = 2 stages (V = 1, 1f1b) and 4 (zb-v: rank 1 holds v1 and v2, whose channels are COPYs),
// M = 4. tests/golden/lower_*.passes (PIPEC_UPDATE_GOLDEN=1 rewrites them).
static void golden_passes(SchedKind k, int V, const char *name) {
  Chain c;
  chain_init(&c, 2, V, 4);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  sched_lower_dump(f);
  bool ok;
  SchedStats st;
  const char *msg = build_verify(&c, k, 2, V, &ok, &st);
  sched_lower_dump(NULL);
  fclose(f);
  ck_assert_msg(ok, "%s", msg);
  golden(text, name);
  free(text);
  arena_free(&c.a);
}

START_TEST(test_golden_passes) {
  golden_passes(SCHED_1F1B, 1, "lower_1f1b_s2_m4.passes");
  golden_passes(SCHED_ZBV, 2, "lower_zbv_s2_m4.passes");
}
END_TEST

// PipeDream's uneven replication (compiler/uneven.c): every built-in schedule over a grid of
// (S, V, M), each stage on 1, 2 or M replicas (those dividing M): every replica's list has the F
// of its microbatches only (m mod D_s = r, each stage of its rank once per microbatch), and the
// replicas' lists pass the lock-step verification with per-m peers.
START_TEST(test_uneven_grid) {
  int checked = 0;
  for (int k = 0; k < SCHED_COUNT; k++)
    for (int S = 2; S <= 3; S++)
      for (int V = 1; V <= 2; V++)
        for (int M = 4; M <= 6; M += 2) {
          if (!legal((SchedKind)k, S, V, M)) continue;
          Chain c;
          chain_init(&c, S, V, M);
          bool ok;
          const char *msg = build_verify(&c, (SchedKind)k, S, V, &ok, NULL);
          ck_assert_msg(ok, "%s", msg);
          int D[3], opt[3] = {1, 2, M}, reps[3];
          c.p.stage_reps = reps;
          for (int code = 0; code < 27; code++) {
            bool fits = true, uneven = false;
            for (int s = 0, x = code; s < S; s++, x /= 3) {
              D[s] = reps[s] = opt[x % 3];
              fits &= M % D[s] == 0;
              uneven |= D[s] != D[0];
            }
            if (!fits || !uneven || (S == 2 && code >= 9)) continue;
            for (int s = 0; s < S; s++)
              for (int r = 0; r < D[s]; r++) {
                int nf = 0;
                for (int i = 0; i < c.p.ranks[s].nacts; i++) {
                  const Action *x = &c.p.ranks[s].acts[i];
                  if (!uneven_runs(&c.p, s, r, x)) continue;
                  ck_assert(x->m < 0 || x->m % D[s] == r);
                  nf += x->kind == ACT_F;
                }
                ck_assert_int_eq(nf, M / D[s] * V);
              }
            Capture cap;
            cap_open(&cap, "m.json");
            ck_assert_msg(uneven_verify(&c.p, &cap.d), "schedule %d, S = %d, V = %d, M = %d: %s", k,
                          S, V, M, cap_text(&cap));
            cap_close(&cap);
            checked++;
          }
          arena_free(&c.a);
        }
  ck_assert_int_ge(checked, 100);
}
END_TEST

// A broken list under uneven replication, 1f1b at S = 2, M = 4, counts 2,1: rank 0 waits for
// m0's gradient (RECV c1) before it sends m0's activation (c0). Replica 0 of stage 0 and stage
// 1's one replica (world rank 2) wait for each other; replica 1 (m1, m3) waits for m1's gradient,
// which stage 1 makes only after m0's. The world program (uneven_lists: one list per world rank)
// goes through the one verifier: its error is the grid of the world ranks with each blocked
// action.
START_TEST(test_uneven_deadlock) {
  Chain c;
  chain_init(&c, 2, 1, 4);
  bool ok;
  const char *msg = build_verify(&c, SCHED_1F1B, 2, 1, &ok, NULL);
  ck_assert_msg(ok, "%s", msg);
  int reps[2] = {2, 1};
  c.p.stage_reps = reps;
  move_act(&c, 0, find_act(&c, 0, ACT_RECV, 1, 0), find_act(&c, 0, ACT_SEND, 0, 0));
  Capture cap;
  cap_open(&cap, "m.json");
  ck_assert(!uneven_verify(&c.p, &cap.d));
  ck_assert_str_eq(
      cap_text(&cap),
      "m.json: error: schedule: deadlock after 3 steps (no rank can move); the grid, "
      "blocked actions marked '*':\n"
      "  rank 0: ld F0 .  r<*\n"
      "  rank 1: ld F1 s> r<*\n"
      "  rank 2: .  .  .  r>*\n"
      "  rank 0 action 3 RECV(c1, m0): waits for its SEND on rank 2, which has not run\n"
      "  rank 1 action 4 RECV(c1, m1): waits for its SEND on rank 2, which has not run\n"
      "  rank 2 action 1 RECV(c0, m0): waits for its SEND on rank 0, which has not "
      "run\n");
  Arena wa;
  arena_init(&wa);
  Program w;
  uneven_lists(&c.p, &w, &wa);
  ck_assert_int_eq(w.nranks, 3);
  for (int k = 0; k < 3; k++) // world rank k: replica k of stage 0, or stage 1's
    for (int i = 0; i < w.ranks[k].nacts; i++) {
      const Action *x = &w.ranks[k].acts[i];
      if (x->m < 0) continue; // the step end: every replica's
      ck_assert(k == 2 || x->m % 2 == k);
      bool out = x->kind == ACT_SEND || x->kind == ACT_WAIT_SEND; // the sender's side
      int v = x->v >= 0 ? x->v : out ? x->ch->from_v : x->ch->to_v;
      ck_assert_int_eq(action_rank(&w, v, x->m), k); // the replica that runs m
    }
  arena_free(&wa);
  cap_close(&cap);
  arena_free(&c.a);
}
END_TEST

int main(void) {
  Suite *s = suite_create("pipeline_sched");
  TCase *tc = tcase_create("pipeline_sched");
  tcase_add_test(tc, test_grid_accepted);
  tcase_add_test(tc, test_zbv_grid);
  tcase_add_test(tc, test_needs_named);
  tcase_add_test(tc, test_orders);
  tcase_add_test(tc, test_recv_in_sender_order);
  tcase_add_test(tc, test_interleaved_swapped_recv);
  tcase_add_test(tc, test_swapped_send_order);
  tcase_add_test(tc, test_circular_wait);
  tcase_add_test(tc, test_missing_backward);
  tcase_add_test(tc, test_w_before_b);
  tcase_add_test(tc, test_reused_slot);
  tcase_add_test(tc, test_send_buffer_rule);
  tcase_add_test(tc, test_costs);
  tcase_add_test(tc, test_send_wait_time);
  tcase_add_test(tc, test_send_wait_deadlock);
  tcase_add_test(tc, test_golden_1f1b);
  tcase_add_test(tc, test_golden_zbv);
  tcase_add_test(tc, test_golden_passes);
  tcase_add_test(tc, test_uneven_grid);
  tcase_add_test(tc, test_uneven_deadlock);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

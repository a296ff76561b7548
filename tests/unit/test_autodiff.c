// Unit tests of the back half of the compiler: the autodiff pass (which gradients exist, their
// roles, the summation orders of shared/design/pipeline-semantics.md) and the memory plan
// (regions, tied storage, no two live buffers overlapping, microbatch size).
#include "../../compiler/memplan.h"
#include "../../compiler/partition.h"
#include "../../compiler/pipeline.h"
#include "../../compiler/schedule.h"
#include "testutil.h"

// A model with a fan-out (a used three times), a parameter used twice (w), a tied parameter,
// a branch that only feeds an output (no gradient wanted) and an unused split output.
static const char *NET =
    "{'format': 'pipec-model', 'version': 1, 'name': 'net',\n"
    " 'inputs': [{'name': 'x', 'shape': ['B', 4]}, {'name': 'y', 'dtype': 'i32', 'shape': ['B'], "
    "'target': true}],\n"
    " 'params': [{'name': 'w', 'shape': [4, 4], 'init': 'xavier'},\n"
    "            {'name': 'v', 'shape': [4, 4], 'init': 'xavier'},\n"
    "            {'name': 'vt', 'shape': [4, 4], 'tied_to': 'v'},\n"
    "            {'name': 'side', 'shape': [3, 4], 'init': 'xavier'}],\n"
    " 'nodes': [{'name': 'a', 'op': 'linear', 'inputs': ['x', 'w']},\n"
    "           {'name': 'b', 'op': 'tanh', 'inputs': ['a']},\n"
    "           {'name': 'c', 'op': 'linear', 'inputs': ['a', 'w']},\n"
    "           {'name': 'd', 'op': 'mul', 'inputs': ['a', 'c']},\n"
    "           {'name': 'e', 'op': 'add', 'inputs': ['b', 'd']},\n"
    "           {'name': 'f', 'op': 'linear', 'inputs': ['e', 'v']},\n"
    "           {'name': 'g', 'op': 'linear', 'inputs': ['f', 'vt']},\n"
    "           {'name': 'sp', 'op': 'split', 'inputs': ['g'], 'attrs': {'sizes': [3, 1]}},\n"
    "           {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['sp:0', 'y']},\n"
    "           {'name': 'extra', 'op': 'linear', 'inputs': ['e', 'side']}],\n"
    " 'loss': 'loss', 'outputs': ['extra']}";

static Node *producer(Graph *g, const char *tensor) {
  Tensor *t = graph_find(g, tensor);
  ck_assert_msg(t != NULL, "no tensor '%s'", tensor);
  return t->producer;
}

static Model m;

static void setup(void) {
  ck_assert(model_run(&m, NET));
  Capture cap;
  cap_open(&cap, "net.json");
  bool ok = pass_autodiff(&m.g, 2, &cap.d) && graph_verify(&m.g, &cap.d);
  ck_assert_msg(ok, "%s", cap_text(&cap));
  cap_close(&cap);
}

static void teardown(void) {
  model_free(&m);
}

START_TEST(test_fanout_summed_in_consumer_order) {
  // a is read by b (tanh), c (linear) and d (mul, slot 0): its gradient is one add_n with the
  // contributions in that order, whatever order the backward pass produced them in.
  Node *sum = producer(&m.g, "d:a");
  ck_assert_str_eq(sum->op->name, "add_n");
  ck_assert_int_eq(sum->role, ROLE_BWD);
  ck_assert_int_eq(sum->nin, 3);
  ck_assert_str_eq(sum->in[0]->name, "d:a@b#0");
  ck_assert_str_eq(sum->in[1]->name, "d:a@c#0");
  ck_assert_str_eq(sum->in[2]->name, "d:a@d#0");
}
END_TEST

START_TEST(test_param_uses_combined_at_step_end_in_use_order) {
  Tensor *w = graph_find(&m.g, "w");
  ck_assert_ptr_nonnull(w->grad);
  Node *sum = w->grad->producer;
  ck_assert_str_eq(sum->op->name, "add_n");
  ck_assert_int_eq(sum->role, ROLE_STEP);
  ck_assert_str_eq(sum->in[0]->name, "d:w@a#1");
  ck_assert_str_eq(sum->in[1]->name, "d:w@c#1");
  // Each use accumulates over microbatches in its own per-step buffer, written by a W node.
  for (int i = 0; i < 2; i++) {
    ck_assert(sum->in[i]->per_step);
    ck_assert_int_eq(sum->in[i]->producer->role, ROLE_WGT);
  }
  // The tied parameter's uses (v in f, vt in g) are the owner's uses; vt has no gradient of its
  // own.
  Tensor *v = graph_find(&m.g, "v"), *vt = graph_find(&m.g, "vt");
  ck_assert_ptr_null(vt->grad);
  ck_assert_str_eq(v->grad->producer->in[0]->name, "d:v@f#1");
  ck_assert_str_eq(v->grad->producer->in[1]->name, "d:v@g#1");
}
END_TEST

START_TEST(test_no_gradient_nobody_uses) {
  // 'extra' only feeds an output: neither it nor its weight gets a gradient.
  ck_assert_ptr_null(graph_find(&m.g, "side")->grad);
  for (int i = m.g.nfwd; i < m.g.nnodes; i++) {
    const Node *n = m.g.nodes[i];
    ck_assert_msg(!n->fwd || strcmp(n->fwd->name, "extra") != 0, "backward node %s for 'extra'",
                  n->name);
    ck_assert_msg(strstr(n->name, "side") == NULL, "backward node %s for 'side'", n->name);
  }
  // Nothing differentiates the data input x or the targets.
  ck_assert_ptr_null(graph_find(&m.g, "d:x@a#0"));
}
END_TEST

START_TEST(test_roles_and_seed) {
  for (int i = m.g.nfwd; i < m.g.nnodes; i++) {
    const Node *n = m.g.nodes[i];
    if (n->role == ROLE_WGT) {
      // A W node produces (part of) a parameter's gradient, accumulating over microbatches.
      ck_assert(n->out[0]->per_step || !strcmp(n->op->name, "accumulate") ||
                n->out[0]->grad_of->kind == T_PARAM);
      ck_assert_int_eq(n->fwd->in[n->slot]->kind, T_PARAM);
    } else if (n->role == ROLE_BWD) {
      ck_assert(!n->out[0]->per_step);
    }
  }
  // The loss gradient is the constant 1/M.
  Tensor *seed = graph_find(&m.g, "d:loss");
  ck_assert_int_eq(seed->kind, T_CONST);
  ck_assert(seed->const_value == 0.5);
  // The unused split output contributes zeros to the split's gradient.
  Node *sd = producer(&m.g, "d:g@sp#0");
  ck_assert_str_eq(sd->op->name, "split.dx");
  ck_assert_int_eq(sd->in[1]->kind, T_CONST);
  ck_assert(sd->in[1]->const_value == 0.0);
}
END_TEST

START_TEST(test_memory_plan) {
  TrainConfig tc = {.batch = 6, .microbatches = 2, .mb_size = 3, .opt = OPT_ADAMW};
  Program prog;
  Capture cap;
  cap_open(&cap, "net.json");
  ck_assert_msg((pass_partition(&m.g, &tc, &(PartitionOptions){.stages = 1}, &prog, &cap.d) &&
                 pass_schedule(&m.g, &tc, &prog, &cap.d)) &&
                    plan_memory(&prog, &cap.d),
                "%s", cap_text(&cap));
  cap_close(&cap);
  const Plan p = prog.ranks[0].plan;
  Tensor *w = graph_find(&m.g, "w"), *v = graph_find(&m.g, "v"), *vt = graph_find(&m.g, "vt");
  // Parameters back to back in canonical order, 64-byte aligned; the tied one shares its owner.
  ck_assert_int_eq(p.offset[w->id], 0);
  ck_assert_int_eq(p.offset[v->id], 64);
  ck_assert_int_eq(p.offset[vt->id], p.offset[v->id]);
  ck_assert_int_eq(p.bytes[REG_PARAMS], 64 * 3); // w, v, side (vt has no bytes of its own)
  // AdamW: m and v for every parameter that gets a gradient (not 'side').
  ck_assert_int_eq(p.bytes[REG_OPT], 2 * 64 * 2);
  // Activations are sized with the microbatch (3 rows): x is (3,4) floats.
  Tensor *x = graph_find(&m.g, "x");
  ck_assert_int_eq(p.region[x->id], REG_ACTS);
  ck_assert_int_eq(p.nfwd, m.g.nfwd);
  ck_assert_int_eq(p.nfwd + p.nbwd + p.nstep, m.g.nnodes);
  // Per-step gradient buffers live in the grads region, not among the activations.
  ck_assert_int_eq(p.region[w->grad->id], REG_GRADS);
}
END_TEST

// t is read by 'early' (node 1) and by 'late', behind a chain of 40,000 tanh nodes (node 40,002):
// the contribution order key (node id, input slot) must still put early's contribution first.
// It was node_id * 65536 + slot in an int, which overflows from node 32,768 (the format allows
// 100,000 repeats), so late's key went negative and its contribution came first.
static const char *LONG_CHAIN =
    "{'format': 'pipec-model', 'version': 1, 'name': 'long',\n"
    " 'inputs': [{'name': 'x', 'shape': ['B', 4]}, {'name': 'y', 'shape': ['B', 4], "
    "'target': true}],\n"
    " 'params': [{'name': 'w', 'shape': [4, 4], 'init': 'xavier'}],\n"
    " 'blocks': [{'name': 'link', 'inputs': ['h'], 'outputs': ['s{i}'],\n"
    "             'nodes': [{'name': 's{i}', 'op': 'tanh', 'inputs': ['h']}]}],\n"
    " 'nodes': [{'name': 't', 'op': 'linear', 'inputs': ['x', 'w']},\n"
    "           {'name': 'early', 'op': 'tanh', 'inputs': ['t']},\n"
    "           {'repeat': 'link', 'count': 40000, 'inputs': ['early'], 'outputs': ['last']},\n"
    "           {'name': 'late', 'op': 'mul', 'inputs': ['last', 't']},\n"
    "           {'name': 'loss', 'op': 'mse_loss', 'inputs': ['late', 'y']}],\n"
    " 'loss': 'loss'}";

START_TEST(test_consumer_order_beyond_32768_nodes) {
  Model lm;
  ck_assert_msg(model_run(&lm, LONG_CHAIN), "%s", cap_text(&lm.cap));
  ck_assert(pass_autodiff(&lm.g, 1, &lm.cap.d));
  ck_assert_int_eq(producer(&lm.g, "early")->id, 1);
  ck_assert_int_eq(producer(&lm.g, "late")->id, 40002);
  Node *sum = producer(&lm.g, "d:t");
  ck_assert_str_eq(sum->op->name, "add_n");
  ck_assert_int_eq(sum->nin, 2);
  ck_assert_str_eq(sum->in[0]->name, "d:t@early#0");
  ck_assert_str_eq(sum->in[1]->name, "d:t@late#1");
  model_free(&lm);
}
END_TEST

int main(void) {
  Suite *s = suite_create("autodiff");
  TCase *tc = tcase_create("autodiff");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_fanout_summed_in_consumer_order);
  tcase_add_test(tc, test_param_uses_combined_at_step_end_in_use_order);
  tcase_add_test(tc, test_no_gradient_nobody_uses);
  tcase_add_test(tc, test_roles_and_seed);
  tcase_add_test(tc, test_memory_plan);
  suite_add_tcase(s, tc);
  TCase *big = tcase_create("large");
  tcase_add_test(big, test_consumer_order_beyond_32768_nodes);
  suite_add_tcase(s, big);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

// Unit tests of the front end on whole models: source_parse + pass_expand + pass_shape +
// graph_verify. Blocks and repeats, name resolution, the topological sort, tied parameters, dims
// and -D overrides, pipeline hints, the printer (golden text) and the exact text and position of
// the errors a model file can contain.
//
// Models are written with single quotes (testutil.h's json_q turns them into double quotes).
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static Model m; // freed by the fixture after every test, also after a failed one

static void setup(void) {
  memset(&m, 0, sizeof m);
}
static void teardown(void) {
  model_free(&m);
}

static void run_ok_defs(const char *json, const char **defs, int ndefs) {
  bool ok = model_run_defs(&m, json, defs, ndefs);
  ck_assert_msg(ok, "model failed: %s", cap_text(&m.cap));
  ck_assert_int_eq(m.cap.d.errors, 0);
}

static void run_ok(const char *json) {
  run_ok_defs(json, NULL, 0);
  ck_assert_str_eq(cap_text(&m.cap), "");
}

// The model must fail with exactly want (one or more diagnostic lines, each ending in '\n').
static void run_err_defs(const char *json, const char **defs, int ndefs, const char *want) {
  ck_assert_msg(!model_run_defs(&m, json, defs, ndefs), "model should fail with: %s", want);
  ck_assert_str_eq(cap_text(&m.cap), want);
}

static void run_err(const char *json, const char *want) {
  run_err_defs(json, NULL, 0, want);
}

static const Node *node(const char *name) {
  const Node *n = strmap_get(&m.g.node_names, name);
  ck_assert_msg(n != NULL, "no node '%s'", name);
  return n;
}

static const Tensor *tensor(const char *name) {
  const Tensor *t = graph_find(&m.g, name);
  ck_assert_msg(t != NULL, "no tensor '%s'", name);
  return t;
}

static const char *type_of(const char *name) {
  static char buf[8][300];
  static int next;
  char *b = buf[next++ & 7];
  return type_str(b, 300, &m.g, tensor(name));
}

// Node names in graph order, space-separated.
static const char *order(void) {
  static char buf[4096];
  size_t o = 0;
  buf[0] = 0;
  for (int i = 0; i < m.g.nnodes && o < sizeof buf; i++)
    o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", i ? " " : "", m.g.nodes[i]->name);
  return buf;
}

static const char *param_order(void) {
  static char buf[4096];
  size_t o = 0;
  buf[0] = 0;
  for (int i = 0; i < m.g.nparams && o < sizeof buf; i++)
    o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", i ? " " : "", m.g.params[i]->name);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Whole models that check

static const char *MLP = // the example of docs/model-format.md
    "{\n"
    "  'format': 'pipec-model',\n"
    "  'version': 1,\n"
    "  'name': 'mlp_digits',\n"
    "  'dims': { 'IN': 64, 'H': 128, 'K': 10 },\n"
    "  'inputs': [\n"
    "    { 'name': 'x', 'dtype': 'f32', 'shape': ['B', 'IN'] },\n"
    "    { 'name': 'y', 'dtype': 'i32', 'shape': ['B'], 'target': true }\n"
    "  ],\n"
    "  'params': [\n"
    "    { 'name': 'fc1.weight', 'shape': ['H', 'IN'], 'init': { 'kind': 'normal', 'std': 0.1 } "
    "},\n"
    "    { 'name': 'fc1.bias',   'shape': ['H'],       'init': 'zeros' }\n"
    "  ],\n"
    "  'nodes': [\n"
    "    { 'name': 'h1',   'op': 'linear', 'inputs': ['x', 'fc1.weight', 'fc1.bias'] },\n"
    "    { 'name': 'a1',   'op': 'relu',   'inputs': ['h1'] },\n"
    "    { 'name': 'loss', 'op': 'cross_entropy', 'inputs': ['a1', 'y'] }\n"
    "  ],\n"
    "  'loss': 'loss',\n"
    "  'outputs': ['a1']\n"
    "}\n";

START_TEST(test_doc_example) {
  run_ok(MLP);
  Graph *g = &m.g;
  ck_assert_str_eq(g->name, "mlp_digits");
  ck_assert_str_eq(g->batch_sym, "B");
  ck_assert_int_eq(g->ndims, 3);
  ck_assert_str_eq(g->dims[0].name, "IN");
  ck_assert_int_eq(g->dims[0].value.n, 64);
  ck_assert_int_eq(g->dims[0].loc.line, 5);
  ck_assert_int_eq(g->dims[0].loc.col, 13);
  ck_assert_int_eq(g->ninputs, 2);
  ck_assert_str_eq(g->inputs[0]->name, "x");
  ck_assert_str_eq(type_of("x"), "f32(B,64)");
  ck_assert(!g->inputs[0]->is_target);
  ck_assert(g->inputs[1]->is_target);
  ck_assert_str_eq(type_of("y"), "i32(B)");
  ck_assert_int_eq(g->inputs[1]->loc.line, 8);
  ck_assert_int_eq(g->inputs[1]->loc.col, 5);
  ck_assert_str_eq(g->inputs[1]->path, "inputs[1]");
  ck_assert_str_eq(param_order(), "fc1.weight fc1.bias");
  ck_assert_int_eq(g->params[0]->init.kind, INIT_NORMAL);
  ck_assert(g->params[0]->init.a == 0 && g->params[0]->init.b == 0.1);
  ck_assert_int_eq(g->params[1]->init.kind, INIT_ZEROS);
  ck_assert_str_eq(order(), "h1 a1 loss");
  ck_assert_str_eq(type_of("h1"), "f32(B,128)");
  ck_assert_str_eq(type_of("loss"), "f32()");
  const Node *h1 = node("h1");
  ck_assert_str_eq(h1->op->name, "linear");
  ck_assert_int_eq(h1->nin, 3);
  ck_assert_ptr_eq(h1->in[2], tensor("fc1.bias"));
  ck_assert_int_eq(h1->loc.line, 15);
  ck_assert_int_eq(h1->loc.col, 5);
  ck_assert_str_eq(h1->path, "nodes[0]");
  ck_assert_int_eq(h1->stage, -1);
  ck_assert(!h1->split_before);
  ck_assert_int_eq(h1->instance, -1);
  ck_assert_ptr_null(h1->block);
  ck_assert_ptr_eq(g->loss, tensor("loss"));
  ck_assert_int_eq(g->noutputs, 1);
  ck_assert_ptr_eq(g->outputs[0], tensor("a1"));
  // Uses are linked: x is read by h1 (slot 0), a1 by loss (slot 0).
  ck_assert_int_eq(tensor("x")->nuses, 1);
  ck_assert_ptr_eq(tensor("x")->uses[0].node, h1);
  ck_assert_int_eq(tensor("a1")->uses[0].slot, 0);
  ck_assert_ptr_eq(tensor("a1")->producer, node("a1"));
}
END_TEST

// A small model using most features, for the printer golden text.
static const char *TINY =
    "{'format': 'pipec-model', 'version': 1, 'name': 'tiny net',\n"
    " 'dims': {'C': 8, 'H': 'C/2', 'L': 2},\n"
    " 'inputs': [{'name': 'x', 'shape': ['B', 'C']}, {'name': 'y', 'dtype': 'i32', 'shape': ['B'], "
    "'target': true}],\n"
    " 'params': [{'name': 'emb', 'shape': ['C', 'C'], 'init': {'kind': 'normal', 'std': 0.02}},\n"
    "            {'name': 'head', 'shape': ['C', 'C'], 'tied_to': 'emb'},\n"
    "            {'name': 'odd name', 'shape': [1, 'C'], 'init': {'kind': 'uniform', 'a': -0.5, "
    "'b': 0.25}}],\n"
    " 'blocks': [{'name': 'layer', 'inputs': ['h'], 'outputs': ['l.{i}.out'],\n"
    "   'params': [{'name': 'l.{i}.w', 'shape': ['C', 'C'], 'init': 'xavier'}],\n"
    "   'nodes': [{'name': 'l.{i}.fc', 'op': 'linear', 'inputs': ['h', 'l.{i}.w']},\n"
    "             {'name': 'l.{i}.out', 'op': 'add', 'inputs': ['h', 'l.{i}.fc'], 'stage': 5}]}],\n"
    " 'nodes': [\n"
    "   {'name': 'in', 'op': 'scale', 'inputs': ['x'], 'attrs': {'factor': 0.5}},\n"
    "   {'repeat': 'layer', 'count': 'L', 'start': 1, 'inputs': ['in'], 'outputs': ['body'],\n"
    "    'stage': [0, 1], 'split_before': true},\n"
    "   {'name': 'parts', 'op': 'split', 'inputs': ['body'], 'attrs': {'sizes': ['H', 4]}},\n"
    "   {'name': 'cat', 'op': 'concat', 'inputs': ['parts:1', 'parts:0']},\n"
    "   {'name': 'shifted', 'op': 'add', 'inputs': ['cat', 'odd name']},\n"
    "   {'name': 'logits', 'op': 'linear', 'inputs': ['shifted', 'head']},\n"
    "   {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['logits', 'y'], 'split_before': true, "
    "'stage': 2}],\n"
    " 'loss': 'loss', 'outputs': ['logits', 'body']}\n";

static const char *TINY_PRINT =
    "model \"tiny net\"\n"
    "dims B=batch C=8 H=4 L=2\n"
    "input x: f32(B,8)\n"
    "input y: i32(B) target\n"
    "param emb: f32(8,8) init=normal(mean=0,std=0.02)\n"
    "param head: f32(8,8) tied_to=emb\n"
    "param \"odd name\": f32(1,8) init=uniform(a=-0.5,b=0.25)\n"
    "param l.1.w: f32(8,8) init=xavier(gain=1)\n"
    "param l.2.w: f32(8,8) init=xavier(gain=1)\n"
    "node in = scale(x) factor=0.5: f32(B,8)\n"
    "node l.1.fc = linear(in, l.1.w): f32(B,8)  ; stage=0 split_before block=layer[1]\n"
    "node l.1.out = add(in, l.1.fc): f32(B,8)  ; stage=5 block=layer[1]\n"
    "node l.2.fc = linear(l.1.out, l.2.w): f32(B,8)  ; stage=1 split_before block=layer[2]\n"
    "node l.2.out = add(l.1.out, l.2.fc): f32(B,8)  ; stage=5 block=layer[2]\n"
    "node parts:0, parts:1 = split(l.2.out) axis=-1 sizes=[4,4]: f32(B,4), f32(B,4)\n"
    "node cat = concat(parts:1, parts:0) axis=-1: f32(B,8)\n"
    "node shifted = add(cat, \"odd name\"): f32(B,8)\n"
    "node logits = linear(shifted, head): f32(B,8)\n"
    "node loss = cross_entropy(logits, y): f32()  ; stage=2 split_before\n"
    "loss loss\n"
    "output logits\n"
    "output l.2.out\n";

START_TEST(test_print_golden) {
  run_ok(TINY);
  char *text = print_graph(&m.g);
  ck_assert_str_eq(text, TINY_PRINT);
  free(text);
}
END_TEST

START_TEST(test_print_before_shape_pass) {
  // After expand only (pipec --dump-after=expand), activations have no shape yet and print '?'.
  memset(&m, 0, sizeof m);
  arena_init(&m.arena);
  cap_open(&m.cap, "m.json");
  char *text = json_q(MLP);
  ck_assert(source_parse(&m.src, &m.arena, "m.json", text, strlen(text), &m.cap.d));
  free(text);
  graph_init(&m.g, &m.arena);
  ExpandOptions opt = {NULL, 0};
  ck_assert(pass_expand(&m.src, &m.g, &opt, &m.cap.d));
  ck_assert(graph_verify(&m.g, &m.cap.d));
  char *out = print_graph(&m.g);
  ck_assert_str_eq(out, "model mlp_digits\n"
                        "dims B=batch IN=64 H=128 K=10\n"
                        "input x: f32(B,64)\n"
                        "input y: i32(B) target\n"
                        "param fc1.weight: f32(128,64) init=normal(mean=0,std=0.1)\n"
                        "param fc1.bias: f32(128) init=zeros\n"
                        "node h1 = linear(x, fc1.weight, fc1.bias): ?\n"
                        "node a1 = relu(h1): ?\n"
                        "node loss = cross_entropy(a1, y): ?\n"
                        "loss loss\n"
                        "output a1\n");
  free(out);
}
END_TEST

// A block of two nodes repeated L = 3 times after a stem; `extra` is spliced into the top level.
#define LAYER_BLOCK                                                                                \
  " 'blocks': [{'name': 'layer', 'inputs': ['x'], 'outputs': ['h.{i}.out'],\n"                     \
  "   'params': [{'name': 'h.{i}.fc.weight', 'shape': ['C', 'C'], 'init': 'xavier'}],\n"           \
  "   'nodes': [{'name': 'h.{i}.fc', 'op': 'linear', 'inputs': ['x', 'h.{i}.fc.weight']},\n"       \
  "             {'name': 'h.{i}.out', 'op': 'add', 'inputs': ['x', 'h.{i}.fc']}]}],\n"

#define HEAD_C8                                                                                    \
  "{'format': 'pipec-model', 'version': 1, 'name': 'm',\n"                                         \
  " 'dims': {'C': 8, 'L': 3},\n"                                                                   \
  " 'inputs': [{'name': 'x', 'shape': ['B', 'C']}, {'name': 'y', 'dtype': 'i32', 'shape': ['B'], " \
  "'target': true}],\n"

START_TEST(test_block_expansion) {
  run_ok(
      HEAD_C8 LAYER_BLOCK
      " 'nodes': [{'name': 'x0', 'op': 'relu', 'inputs': ['x']},\n"
      "           {'repeat': 'layer', 'count': 'L', 'inputs': ['x0'], 'outputs': ['body_out']},\n"
      "           {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['body_out', 'y']}],\n"
      " 'loss': 'loss', 'outputs': ['body_out']}");
  ck_assert_str_eq(order(), "x0 h.0.fc h.0.out h.1.fc h.1.out h.2.fc h.2.out loss");
  ck_assert_str_eq(param_order(), "h.0.fc.weight h.1.fc.weight h.2.fc.weight");
  // Instance 0 reads the repeat's inputs; a formal input shadows the model input 'x'.
  ck_assert_ptr_eq(node("h.0.fc")->in[0], tensor("x0"));
  ck_assert_ptr_eq(node("h.0.out")->in[0], tensor("x0"));
  // Instance k+1 reads instance k's outputs.
  ck_assert_ptr_eq(node("h.1.fc")->in[0], tensor("h.0.out"));
  ck_assert_ptr_eq(node("h.2.out")->in[0], tensor("h.1.out"));
  ck_assert_ptr_eq(node("h.2.fc")->in[1], tensor("h.2.fc.weight"));
  // The last instance's output is also 'body_out' (the same tensor, not a copy).
  ck_assert_ptr_eq(tensor("body_out"), tensor("h.2.out"));
  ck_assert_ptr_eq(node("loss")->in[0], tensor("h.2.out"));
  ck_assert_ptr_eq(m.g.outputs[0], tensor("h.2.out"));
  ck_assert_ptr_null(strmap_get(&m.g.node_names, "body_out"));
  // Block bookkeeping: instance, block name, JSON path and position of the block's node.
  const Node *n = node("h.1.out");
  ck_assert_int_eq(n->instance, 1);
  ck_assert_str_eq(n->block, "layer");
  ck_assert_str_eq(n->path, "blocks[0].nodes[1] (instance 1)");
  ck_assert_int_eq(n->loc.line, 7);
  ck_assert_int_eq(n->loc.col, 14);
  ck_assert_str_eq(tensor("h.2.fc.weight")->path, "blocks[0].params[0] (instance 2)");
  ck_assert_int_eq(node("x0")->instance, -1);
  ck_assert_ptr_null(node("x0")->block);
  ck_assert_str_eq(type_of("h.2.out"), "f32(B,8)");
}
END_TEST

START_TEST(test_block_start_offset) {
  run_ok(
      HEAD_C8 LAYER_BLOCK
      " 'nodes': [{'repeat': 'layer', 'count': 2, 'start': 2, 'inputs': ['x'], 'outputs': ['o']},\n"
      "           {'name': 'skip', 'op': 'add', 'inputs': ['o', 'h.2.out']},\n"
      "           {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['skip', 'y']}],\n"
      " 'loss': 'loss'}");
  ck_assert_str_eq(order(), "h.2.fc h.2.out h.3.fc h.3.out skip loss");
  // A skip connection names an earlier instance's tensor by its substituted name.
  ck_assert_ptr_eq(node("skip")->in[1], tensor("h.2.out"));
  ck_assert_ptr_eq(node("skip")->in[0], tensor("h.3.out"));
  ck_assert_str_eq(param_order(), "h.2.fc.weight h.3.fc.weight");
  ck_assert_int_eq(node("h.3.fc")->instance, 3);
  ck_assert_ptr_eq(node("h.3.fc")->in[0], tensor("h.2.out"));
  ck_assert_ptr_eq(node("h.2.fc")->in[0], tensor("x"));
  ck_assert_str_eq(node("h.2.fc")->path, "blocks[0].nodes[0] (instance 2)");
}
END_TEST

START_TEST(test_block_two_streams_and_skip) {
  // A two-input block: formal j of instance k+1 is output j of instance k. A second block and a
  // top-level node refer to earlier instances' tensors by their substituted names.
  run_ok("{'format': 'pipec-model', 'version': 1, 'name': 'm', 'dims': {'C': 4},\n"
         " 'inputs': [{'name': 'x', 'shape': ['B', 'C']}, {'name': 'y', 'shape': ['B', 'C']}],\n"
         " 'blocks': [\n"
         "  {'name': 'pair', 'inputs': ['a', 'b'], 'outputs': ['p.{i}.s', 'p.{i}.d'],\n"
         "   'nodes': [{'name': 'p.{i}.s', 'op': 'add', 'inputs': ['a', 'b']},\n"
         "             {'name': 'p.{i}.d', 'op': 'sub', 'inputs': ['a', 'p.{i}.t']},\n"
         "             {'name': 'p.{i}.t', 'op': 'tanh', 'inputs': ['b']}]},\n"
         "  {'name': 'tail', 'inputs': ['v'], 'outputs': ['t.{i}'],\n"
         "   'nodes': [{'name': 't.{i}', 'op': 'mul', 'inputs': ['v', 'p.0.s']}]}],\n"
         " 'nodes': [\n"
         "  {'repeat': 'pair', 'count': 3, 'inputs': ['x', 'y'], 'outputs': ['S', 'D']},\n"
         "  {'repeat': 'tail', 'count': 1, 'inputs': ['D'], 'outputs': ['T']},\n"
         "  {'name': 'skip', 'op': 'add', 'inputs': ['T', 'p.1.d']},\n"
         "  {'name': 'loss', 'op': 'mse_loss', 'inputs': ['skip', 'S']}],\n"
         " 'loss': 'loss'}");
  ck_assert_ptr_eq(node("p.0.s")->in[0], tensor("x"));
  ck_assert_ptr_eq(node("p.0.s")->in[1], tensor("y"));
  ck_assert_ptr_eq(node("p.1.s")->in[0], tensor("p.0.s"));
  ck_assert_ptr_eq(node("p.1.s")->in[1], tensor("p.0.d"));
  ck_assert_ptr_eq(node("p.2.t")->in[0], tensor("p.1.d"));
  // Forward reference inside the block: p.{i}.d reads p.{i}.t defined after it.
  ck_assert_ptr_eq(node("p.1.d")->in[1], tensor("p.1.t"));
  ck_assert_ptr_eq(tensor("S"), tensor("p.2.s"));
  ck_assert_ptr_eq(tensor("D"), tensor("p.2.d"));
  ck_assert_ptr_eq(node("t.0")->in[0], tensor("p.2.d"));
  ck_assert_ptr_eq(node("t.0")->in[1], tensor("p.0.s"));
  ck_assert_ptr_eq(node("skip")->in[1], tensor("p.1.d"));
  // p.{i}.t comes before p.{i}.d (its consumer); otherwise file order.
  ck_assert_str_eq(order(), "p.0.s p.0.t p.0.d p.1.s p.1.t p.1.d p.2.s p.2.t p.2.d t.0 skip loss");
}
END_TEST

START_TEST(test_forward_references_sorted) {
  run_ok("{'format': 'pipec-model', 'version': 1, 'name': 'm',\n"
         " 'inputs': [{'name': 'x', 'shape': ['B', 4]}],\n"
         " 'nodes': [\n"
         "  {'name': 'c', 'op': 'relu', 'inputs': ['b']},\n"
         "  {'name': 'a', 'op': 'relu', 'inputs': ['x']},\n"
         "  {'name': 'z', 'op': 'tanh', 'inputs': ['x']},\n"
         "  {'name': 'b', 'op': 'relu', 'inputs': ['a']},\n"
         "  {'name': 'd', 'op': 'sigmoid', 'inputs': ['x']},\n"
         "  {'name': 'loss', 'op': 'mse_loss', 'inputs': ['e', 'z']},\n"
         "  {'name': 'e', 'op': 'add', 'inputs': ['c', 'd']}],\n"
         " 'loss': 'loss'}");
  // Producers before consumers; among nodes that are ready, the one written first goes first.
  ck_assert_str_eq(order(), "a z b c d e loss");
  for (int i = 0; i < m.g.nnodes; i++) ck_assert_int_eq(m.g.nodes[i]->id, i);
  ck_assert_int_eq(node("c")->file_order, 0);
  ck_assert_int_eq(node("e")->file_order, 6);
  ck_assert_str_eq(node("c")->path, "nodes[0]");
  // Uses are in graph order: x is read by a, z, d.
  const Tensor *x = tensor("x");
  ck_assert_int_eq(x->nuses, 3);
  ck_assert_str_eq(x->uses[0].node->name, "a");
  ck_assert_str_eq(x->uses[1].node->name, "z");
  ck_assert_str_eq(x->uses[2].node->name, "d");
}
END_TEST

START_TEST(test_independent_nodes_keep_file_order) {
  run_ok("{'format': 'pipec-model', 'version': 1, 'name': 'm',\n"
         " 'inputs': [{'name': 'x', 'shape': ['B', 4]}],\n"
         " 'nodes': [\n"
         "  {'name': 'zz', 'op': 'relu', 'inputs': ['x']},\n"
         "  {'name': 'yy', 'op': 'relu', 'inputs': ['x']},\n"
         "  {'name': 'loss', 'op': 'mse_loss', 'inputs': ['zz', 'ww']},\n"
         "  {'name': 'ww', 'op': 'relu', 'inputs': ['x']},\n"
         "  {'name': 'aa', 'op': 'relu', 'inputs': ['yy']}],\n"
         " 'loss': 'loss'}");
  ck_assert_str_eq(order(), "zz yy ww loss aa");
}
END_TEST

START_TEST(test_tied_params) {
  run_ok("{'format': 'pipec-model', 'version': 1, 'name': 'm', 'dims': {'V': 6, 'C': 4},\n"
         " 'inputs': [{'name': 'idx', 'dtype': 'i32', 'shape': ['B', 3]},\n"
         "            {'name': 't', 'dtype': 'i32', 'shape': ['B', 3], 'target': true}],\n"
         " 'params': [{'name': 'wte', 'shape': ['V', 'C'], 'init': {'kind': 'normal', 'std': 0.02, "
         "'mean': 1}},\n"
         "            {'name': 'lm_head', 'shape': ['V', 'C'], 'tied_to': 'wte'}],\n"
         " 'blocks': [{'name': 'b', 'inputs': ['h'], 'outputs': ['o.{i}'],\n"
         "   'params': [{'name': 'w.{i}', 'shape': ['C', 'C'], 'init': 'ones'},\n"
         "              {'name': 'v.{i}', 'shape': ['C', 'C'], 'tied_to': 'w.{i}'}],\n"
         "   'nodes': [{'name': 'o.{i}', 'op': 'linear', 'inputs': ['h', 'v.{i}']}]}],\n"
         " 'nodes': [{'name': 'emb', 'op': 'embedding', 'inputs': ['idx', 'wte']},\n"
         "           {'repeat': 'b', 'count': 2, 'inputs': ['emb'], 'outputs': ['body']},\n"
         "           {'name': 'logits', 'op': 'linear', 'inputs': ['body', 'lm_head']},\n"
         "           {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['logits', 't']}],\n"
         " 'loss': 'loss'}");
  ck_assert_str_eq(param_order(), "wte lm_head w.0 v.0 w.1 v.1");
  const Tensor *head = tensor("lm_head");
  ck_assert_ptr_eq(head->tied_to, tensor("wte"));
  ck_assert_int_eq(head->init.kind, INIT_NORMAL); // the owner's init, for the record
  ck_assert_ptr_null(tensor("wte")->tied_to);
  ck_assert_ptr_eq(tensor("v.1")->tied_to, tensor("w.1"));
  ck_assert_int_eq(tensor("w.1")->init.kind, INIT_ONES);
  ck_assert_str_eq(type_of("logits"), "f32(B,3,6)");
  // Owners used only through their tied copy are not reported as unused.
  ck_assert_int_eq(m.cap.d.warnings, 0);
}
END_TEST

static const char *DIMS_MODEL =
    "{'format': 'pipec-model', 'version': 1, 'name': 'm',\n"
    " 'dims': {'A': 'Z*2', 'C': 8, 'H': 'C/2', 'F': '(C+H)*2', 'Z': 3},\n"
    " 'inputs': [{'name': 'x', 'shape': ['B', 'C']}],\n"
    " 'params': [{'name': 'w', 'shape': ['F', 'C']}, {'name': 'v', 'shape': ['A*H', 'F']}],\n"
    " 'nodes': [{'name': 'h', 'op': 'linear', 'inputs': ['x', 'w']},\n"
    "           {'name': 'g', 'op': 'linear', 'inputs': ['h', 'v']},\n"
    "           {'name': 'r', 'op': 'reshape', 'inputs': ['g'], 'attrs': {'shape': ['B*H', -1]}},\n"
    "           {'name': 's', 'op': 'split', 'inputs': ['r'], 'attrs': {'sizes': ['Z', 'Z-1', "
    "1]}},\n"
    "           {'name': 'loss', 'op': 'mse_loss', 'inputs': ['s:1', 's:1']}],\n"
    " 'loss': 'loss'}";

START_TEST(test_dims_expressions) {
  run_ok(DIMS_MODEL);
  // dims keep file order; A refers to Z defined after it.
  static const char *names[] = {"A", "C", "H", "F", "Z"};
  static const int64_t vals[] = {6, 8, 4, 24, 3};
  ck_assert_int_eq(m.g.ndims, 5);
  for (int i = 0; i < 5; i++) {
    ck_assert_str_eq(m.g.dims[i].name, names[i]);
    ck_assert_int_eq(m.g.dims[i].value.n, vals[i]);
    ck_assert_int_eq(m.g.dims[i].value.b, 0);
  }
  ck_assert_str_eq(type_of("w"), "f32(24,8)");
  ck_assert_str_eq(type_of("v"), "f32(24,24)");
  ck_assert_str_eq(type_of("r"), "f32(B*4,6)");
  ck_assert_str_eq(type_of("s:0"), "f32(B*4,3)");
  ck_assert_str_eq(type_of("s:1"), "f32(B*4,2)");
  ck_assert_str_eq(type_of("s:2"), "f32(B*4,1)");
}
END_TEST

START_TEST(test_defines_override) {
  const char *defs[] = {"C=16", "Z=2*2"};
  run_ok_defs(DIMS_MODEL, defs, 2);
  ck_assert_str_eq(cap_text(&m.cap), "");
  // C=16, H=8, F=48, Z=4, A=8
  ck_assert_int_eq(m.g.dims[0].value.n, 8);
  ck_assert_int_eq(m.g.dims[1].value.n, 16);
  ck_assert_int_eq(m.g.dims[2].value.n, 8);
  ck_assert_int_eq(m.g.dims[3].value.n, 48);
  ck_assert_int_eq(m.g.dims[4].value.n, 4);
  ck_assert_str_eq(type_of("x"), "f32(B,16)");
  ck_assert_str_eq(type_of("v"), "f32(64,48)");
  ck_assert_str_eq(type_of("r"), "f32(B*8,8)");
  ck_assert_str_eq(type_of("s:1"), "f32(B*8,3)");
}
END_TEST

START_TEST(test_defines_expression_and_last_wins) {
  const char *defs[] = {"H=C*3", "C=4", "C=2"};
  run_ok_defs(
      "{'format': 'pipec-model', 'version': 1, 'name': 'm', 'dims': {'C': 8, 'H': 1},\n"
      " 'inputs': [{'name': 'x', 'shape': ['B', 'H']}],\n"
      " 'nodes': [{'name': 'loss', 'op': 'mse_loss', 'inputs': ['x', 'x']}], 'loss': 'loss'}",
      defs, 3);
  ck_assert_str_eq(type_of("x"), "f32(B,6)");
}
END_TEST

START_TEST(test_custom_batch_symbol) {
  run_ok(
      "{'format': 'pipec-model', 'version': 1, 'name': 'm', 'batch': 'N', 'dims': {'B': 5},\n"
      " 'inputs': [{'name': 'x', 'shape': ['N', 'B']}],\n"
      " 'nodes': [{'name': 'r', 'op': 'reshape', 'inputs': ['x'], 'attrs': {'shape': ['N*B']}},\n"
      "           {'name': 'loss', 'op': 'mse_loss', 'inputs': ['r', 'r']}], 'loss': 'loss'}");
  ck_assert_str_eq(m.g.batch_sym, "N");
  ck_assert_str_eq(type_of("x"), "f32(N,5)");
  ck_assert_str_eq(type_of("r"), "f32(N*5)");
  char *text = print_graph(&m.g);
  ck_assert_ptr_nonnull(strstr(text, "dims N=batch B=5\n"));
  free(text);
}
END_TEST

START_TEST(test_stage_hints) {
  run_ok(HEAD_C8
         " 'blocks': [{'name': 'layer', 'inputs': ['x'], 'outputs': ['h.{i}.out'],\n"
         "   'nodes': [{'name': 'h.{i}.a', 'op': 'relu', 'inputs': ['x']},\n"
         "             {'name': 'h.{i}.b', 'op': 'tanh', 'inputs': ['h.{i}.a'], 'stage': 9},\n"
         "             {'name': 'h.{i}.out', 'op': 'add', 'inputs': ['x', 'h.{i}.b']}]}],\n"
         " 'nodes': [{'name': 'x0', 'op': 'relu', 'inputs': ['x'], 'stage': 0},\n"
         "           {'repeat': 'layer', 'count': 'L', 'inputs': ['x0'], 'outputs': ['o'],\n"
         "            'stage': [0, 1, 1], 'split_before': true},\n"
         "           {'repeat': 'layer', 'count': 1, 'start': 3, 'inputs': ['o'], 'outputs': "
         "['o2']},\n"
         "           {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['o2', 'y'], "
         "'split_before': true, 'stage': 3}],\n"
         " 'loss': 'loss'}");
  ck_assert_int_eq(node("x0")->stage, 0);
  ck_assert(!node("x0")->split_before);
  static const struct {
    const char *name;
    int stage;
    bool split;
  } want[] = {
      {"h.0.a", 0, true},   {"h.0.b", 9, false},   {"h.0.out", 0, false},  {"h.1.a", 1, true},
      {"h.1.b", 9, false},  {"h.1.out", 1, false}, {"h.2.a", 1, true},     {"h.2.out", 1, false},
      {"h.3.a", -1, false}, {"h.3.b", 9, false},   {"h.3.out", -1, false}, {"loss", 3, true},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const Node *n = node(want[i].name);
    ck_assert_msg(n->stage == want[i].stage && n->split_before == want[i].split,
                  "%s: stage %d split %d", n->name, n->stage, n->split_before);
  }
}
END_TEST

START_TEST(test_unused_param_warning) {
  ck_assert(model_run(
      &m, "{'format': 'pipec-model', 'version': 1, 'name': 'm',\n"
          " 'inputs': [{'name': 'x', 'shape': ['B', 4]}],\n"
          " 'params': [{'name': 'w', 'shape': [4, 4]},\n"
          "            {'name': 'unused', 'shape': [4]}],\n"
          " 'nodes': [{'name': 'h', 'op': 'linear', 'inputs': ['x', 'w']},\n"
          "           {'name': 'loss', 'op': 'mse_loss', 'inputs': ['h', 'x']}], 'loss': 'loss'}"));
  ck_assert_str_eq(cap_text(&m.cap), "m.json:4:13: warning: params[1]: parameter 'unused' is never "
                                     "used (it would get no gradient)\n");
  ck_assert_int_eq(m.cap.d.warnings, 1);
  ck_assert_int_eq(m.cap.d.errors, 0);
}
END_TEST

START_TEST(test_shape_errors_reported_once) {
  // Two independent mistakes are both reported; nodes downstream of them are skipped silently.
  run_err("{'format': 'pipec-model', 'version': 1, 'name': 'm',\n"
          " 'inputs': [{'name': 'x', 'shape': ['B', 4]}, {'name': 'i', 'dtype': 'i32', 'shape': "
          "['B', 4]}],\n"
          " 'params': [{'name': 'w', 'shape': [5, 5]}],\n"
          " 'nodes': [{'name': 'h', 'op': 'linear', 'inputs': ['x', 'w']},\n"
          "           {'name': 'h2', 'op': 'relu', 'inputs': ['h']},\n"
          "           {'name': 'g', 'op': 'tanh', 'inputs': ['i']},\n"
          "           {'name': 'loss', 'op': 'mse_loss', 'inputs': ['h2', 'g']}], 'loss': 'loss'}",
          "m.json:4:12: error: nodes[0] \"h\": input 'w' has shape (5,5) but linear needs (OUT,4) "
          "to match the last "
          "dim of 'x' (B,4)\n"
          "m.json:6:12: error: nodes[2] \"g\": input 'i' has dtype i32 but tanh needs a "
          "floating-point tensor\n");
  ck_assert_int_eq(m.cap.d.errors, 2);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Errors with exact text and position. Nodes of these models start on line 6; each node object
// is on its own line with its '{' in column 3.

#define HEAD                                                                                       \
  "{'format': 'pipec-model', 'version': 1, 'name': 'm',\n"                                         \
  " 'dims': {'C': 4},\n"                                                                           \
  " 'inputs': [{'name': 'x', 'shape': ['B', 'C']}, {'name': 'y', 'dtype': 'i32', 'shape': ['B'], " \
  "'target': true}],\n"                                                                            \
  " 'params': [{'name': 'w', 'shape': ['C', 'C']}],\n"                                             \
  " 'nodes': [\n"
#define TAIL   "\n ],\n 'loss': 'loss'}"
#define LOSS_A "  {'name': 'loss', 'op': 'mse_loss', 'inputs': ['a', 'x']}"

typedef struct ErrCase {
  const char *json;
  const char *want;
} ErrCase;

static const ErrCase err_cases[] = {
    // duplicate names, pointing at the first definition
    {HEAD "  {'name': 'a', 'op': 'relu', 'inputs': ['x']},\n"
          "  {'name': 'a', 'op': 'relu', 'inputs': ['x']},\n" LOSS_A TAIL,
     "m.json:7:4: error: nodes[1]: duplicate name 'a' (first defined at line 6, column 3)\n"},
    {HEAD "  {'name': 'x', 'op': 'relu', 'inputs': ['y']},\n" LOSS_A TAIL,
     "m.json:6:4: error: nodes[0]: duplicate name 'x' (first defined at line 3, column 13)\n"},
    {HEAD "  {'name': 'w', 'op': 'relu', 'inputs': ['x']},\n" LOSS_A TAIL,
     "m.json:6:4: error: nodes[0]: duplicate name 'w' (first defined at line 4, column 13)\n"},
    // cycles, printed producer -> consumer
    {HEAD "  {'name': 'a', 'op': 'relu', 'inputs': ['c']},\n"
          "  {'name': 'b', 'op': 'relu', 'inputs': ['a']},\n"
          "  {'name': 'c', 'op': 'relu', 'inputs': ['b']},\n" LOSS_A TAIL,
     "m.json:7:3: error: nodes[1] \"b\": cycle: b -> c -> a -> b\n"},
    {HEAD "  {'name': 'a', 'op': 'relu', 'inputs': ['a']},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": cycle: a -> a\n"},
    {HEAD "  {'name': 'd', 'op': 'relu', 'inputs': ['a']},\n"
          "  {'name': 'a', 'op': 'add', 'inputs': ['x', 'b']},\n"
          "  {'name': 'b', 'op': 'relu', 'inputs': ['a']},\n" LOSS_A TAIL,
     "m.json:8:3: error: nodes[2] \"b\": cycle: b -> a -> b\n"},
    // references
    {HEAD "  {'name': 'a', 'op': 'relu', 'inputs': ['xx']},\n" LOSS_A TAIL,
     "m.json:6:42: error: nodes[0] \"a\": undefined input 'xx' (did you mean 'x'?)\n"},
    {HEAD "  {'name': 'a', 'op': 'relu', 'inputs': ['qqqqq']},\n" LOSS_A TAIL,
     "m.json:6:42: error: nodes[0] \"a\": undefined input 'qqqqq'\n"},
    {HEAD "  {'name': 'p', 'op': 'split', 'inputs': ['x'], 'attrs': {'sizes': [2, 2]}},\n"
          "  {'name': 'a', 'op': 'relu', 'inputs': ['p']},\n" LOSS_A TAIL,
     "m.json:7:42: error: nodes[1] \"a\": 'p' has 2 outputs; refer to one of them as 'p:0' .. "
     "'p:1'\n"},
    {HEAD "  {'name': 'p', 'op': 'split', 'inputs': ['x'], 'attrs': {'sizes': [2, 2]}},\n"
          "  {'name': 'a', 'op': 'relu', 'inputs': ['p:2']},\n" LOSS_A TAIL,
     "m.json:7:42: error: nodes[1] \"a\": undefined input 'p:2' (did you mean 'p:0'?)\n"},
    {HEAD "  {'name': 'n', 'op': 'layernorm', 'inputs': ['x', 'w']},\n"
          "  {'name': 'a', 'op': 'relu', 'inputs': ['n:mean']},\n" LOSS_A TAIL,
     "m.json:7:42: error: nodes[1] \"a\": 'n:mean' is saved by 'n' for its backward pass and "
     "cannot be used\n"},
    {HEAD "  {'name': 'a', 'op': 'relu', 'inputs': ['w2']},\n" LOSS_A TAIL,
     "m.json:6:42: error: nodes[0] \"a\": undefined input 'w2' (did you mean 'w'?)\n"},
    {HEAD "  {'name': 'a', 'op': 'relu', 'inputs': ['x']}\n ],\n 'loss': 'los'}",
     "m.json:8:2: error: loss: undefined tensor 'los'\n"},
    // ops, attributes, keys
    {HEAD "  {'name': 'a', 'op': 'rleu', 'inputs': ['x']},\n" LOSS_A TAIL,
     "m.json:6:17: error: nodes[0] \"a\": unknown op 'rleu' (did you mean 'relu'?)\n"},
    {HEAD "  {'name': 'a', 'op': 'relu.dx', 'inputs': ['x', 'x']},\n" LOSS_A TAIL,
     "m.json:6:17: error: nodes[0] \"a\": unknown op 'relu.dx'\n"},
    {HEAD "  {'name': 'a', 'op': 'relu', 'inputs': ['x'], 'attrs': {'axis': 1}},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": unknown attribute 'axis': relu takes no attributes\n"},
    {HEAD "  {'name': 'a', 'op': 'softmax', 'inputs': ['x'], 'attrs': {'axes': 1}},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": unknown attribute 'axes' (did you mean 'axis'?): softmax "
     "takes 'axis'\n"},
    {HEAD "  {'name': 'a', 'op': 'scale', 'inputs': ['x']},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": missing required attribute 'factor' of scale "
     "(multiplier)\n"},
    {HEAD
     "  {'name': 'a', 'op': 'scale', 'inputs': ['x'], 'attrs': {'factor': true}},\n" LOSS_A TAIL,
     "m.json:6:59: error: nodes[0].attrs.factor: expected a number, got a boolean\n"},
    {HEAD "  {'name': 'a', 'op': 'relu', 'inptus': ['x']},\n" LOSS_A TAIL,
     "m.json:6:31: error: nodes[0]: unknown key 'inptus' (did you mean 'inputs'?)\n"},
    {HEAD "  {'name': 'a', 'op': 'relu', 'inputs': ['x', 'x']},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": relu takes 1 input, got 2\n"},
    {HEAD "  {'name': 'a', 'op': 'linear', 'inputs': ['x']},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": linear takes 2 to 3 inputs, got 1\n"},
    {HEAD "  {'name': 'a', 'op': 'rms_norm', 'inputs': ['x', 'w', 'w']},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": rms_norm takes 2 inputs, got 3\n"},
    {HEAD "  {'name': 'a', 'op': 'rms_norm', 'inputs': ['x']},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": rms_norm takes 2 inputs, got 1\n"},
    {HEAD "  {'name': 'a', 'op': 'silu', 'inputs': ['x', 'x']},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": silu takes 1 input, got 2\n"},
    {HEAD "  {'name': 'a', 'op': 'silu', 'inputs': ['x'], 'attrs': {'beta': 1}},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": unknown attribute 'beta': silu takes no attributes\n"},
    {HEAD "  {'name': 'a', 'op': 'rope', 'inputs': ['x', 'x']},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": rope takes 1 input, got 2\n"},
    {HEAD
     "  {'name': 'a', 'op': 'rope', 'inputs': ['x'], 'attrs': {'pairing': 'complex'}},\n" LOSS_A
         TAIL,
     "m.json:6:58: error: nodes[0].attrs.pairing: unknown value 'complex' (one of 'half', "
     "'interleaved')\n"},
    {HEAD
     "  {'name': 'a', 'op': 'rope', 'inputs': ['x'], 'attrs': {'seq_axis': 1.5}},\n" LOSS_A TAIL,
     "m.json:6:58: error: nodes[0].attrs.seq_axis: expected an integer within +-2^53, got 1.5\n"},
    {HEAD "  {'name': 'a', 'op': 'pow', 'inputs': ['x']},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": missing required attribute 'exponent' of pow (the "
     "constant power x is raised to)\n"},
    {HEAD
     "  {'name': 'a', 'op': 'pow', 'inputs': ['x'], 'attrs': {'exponent': 1e39}},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": attribute 'exponent' = 1e+39 is not a finite float\n"},
    {HEAD "  {'name': 'a', 'op': 'mean', 'inputs': ['x']},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": missing required attribute 'axis' of mean (axis to "
     "average over)\n"},
    {HEAD
     "  {'name': 'a', 'op': 'slice', 'inputs': ['x'], 'attrs': {'axis': 1, 'end': 5}},\n" LOSS_A
         TAIL,
     "m.json:6:3: error: nodes[0] \"a\": attribute 'end' = 5 is past axis 1 of size 4\n"},
    {HEAD "  {'name': 'a', 'op': 'neg', 'inputs': ['x', 'x']},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": neg takes 1 input, got 2\n"},
    {HEAD "  {'name': 'a', 'op': 'concat', 'inputs': []},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": concat takes at least 1 input, got 0\n"},
    {HEAD "  {'name': 'a', 'op': 'relu', 'inputs': ['x'], 'stage': -1},\n" LOSS_A TAIL,
     "m.json:6:48: error: nodes[0].stage: must be from 0 to 65535, got -1\n"},
    {HEAD "  {'name': 'a', 'op': 'split', 'inputs': ['x'], 'attrs': {'sizes': []}},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": split needs 1 to 4096 outputs, the attributes give 0\n"},
    // shape rules (reported by the shape pass at the node)
    {HEAD "  {'name': 'a', 'op': 'matmul', 'inputs': ['x', 'y']},\n" LOSS_A TAIL,
     "m.json:6:3: error: nodes[0] \"a\": input 'y' has shape (B) (rank 1) but matmul needs rank at "
     "least 2\n"},
    {HEAD "  {'name': 'a', 'op': 'relu', 'inputs': ['x']}\n ],\n 'loss': 'a'}",
     "m.json:6:3: error: loss: 'a' must be a floating-point scalar () but is f32(B,4)\n"},
    // header
    {"{'format': 'pipec-model', 'version': 2, 'name': 'm'}",
     "m.json:1:27: error: version: this pipec reads model format version 1, the file has version "
     "2\n"},
    {"{'format': 'pipec-model', 'version': 1, 'name': 'm', 'shpae': 1}",
     "m.json:1:54: error: model: unknown key 'shpae'\n"},
    {"[1, 2]", "m.json:1:1: error: model: expected a JSON object at the top level, got an array\n"},
};

enum { NERR = (int)(sizeof err_cases / sizeof err_cases[0]) };

START_TEST(test_error_case) {
  run_err(err_cases[_i].json, err_cases[_i].want);
}
END_TEST

START_TEST(test_err_duplicate_in_block_instance) {
  run_err(HEAD_C8 LAYER_BLOCK
          " 'nodes': [{'name': 'h.1.out', 'op': 'relu', 'inputs': ['x']},\n"
          "           {'repeat': 'layer', 'count': 'L', 'inputs': ['x'], 'outputs': ['o']},\n"
          "           {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['o', 'y']}],\n"
          " 'loss': 'loss'}",
          "m.json:7:15: error: blocks[0].nodes[1] (instance 1): duplicate name 'h.1.out' (first "
          "defined at line 8, "
          "column 12)\n");
}
END_TEST

START_TEST(test_err_repeat_alias_duplicate) {
  run_err(HEAD_C8 LAYER_BLOCK
          " 'nodes': [{'repeat': 'layer', 'count': 2, 'inputs': ['x'], 'outputs': ['h.0.out']},\n"
          "           {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['h.0.out', 'y']}],\n"
          " 'loss': 'loss'}",
          "m.json:8:73: error: nodes[0].outputs[0]: duplicate name 'h.0.out' (first defined at "
          "line 7, column 14)\n");
}
END_TEST

START_TEST(test_err_repeat_structure) {
  run_err(HEAD_C8 LAYER_BLOCK
          " 'nodes': [{'repeat': 'lyr', 'count': 2, 'inputs': ['x'], 'outputs': ['o']}],\n"
          " 'loss': 'o'}",
          "m.json:8:13: error: nodes[0]: unknown block 'lyr'\n");
  model_free(&m);
  run_err(HEAD_C8 LAYER_BLOCK
          " 'nodes': [{'repeat': 'layer', 'count': 0, 'inputs': ['x'], 'outputs': ['o']}],\n"
          " 'loss': 'o'}",
          "m.json:8:32: error: nodes[0].count: repeat count must be from 1 to 100000, got 0\n");
  model_free(&m);
  run_err(HEAD_C8 LAYER_BLOCK " 'nodes': [{'repeat': 'layer', 'count': 'L', 'inputs': ['x'], "
                              "'outputs': ['o'], 'stage': [0, 1]}],\n"
                              " 'loss': 'o'}",
          "m.json:8:81: error: nodes[0].stage: needs one stage per instance (3), got 2\n");
  model_free(&m);
  run_err(HEAD_C8 LAYER_BLOCK
          " 'nodes': [{'repeat': 'layer', 'count': 1, 'inputs': ['x', 'y'], 'outputs': ['o']}],\n"
          " 'loss': 'o'}",
          "m.json:8:12: error: nodes[0]: block 'layer' has 1 inputs and 1 outputs, the repeat "
          "gives 2 and 1\n");
  model_free(&m);
  run_err(HEAD_C8
          " 'blocks': [{'name': 'layer', 'inputs': ['x'], 'outputs': ['x'],\n"
          "   'nodes': [{'name': 'h.{i}.fc', 'op': 'relu', 'inputs': ['x']}]}],\n"
          " 'nodes': [{'repeat': 'layer', 'count': 1, 'inputs': ['x'], 'outputs': ['o']}],\n"
          " 'loss': 'o'}",
          "m.json:4:60: error: blocks[0].outputs[0]: 'x' is not a tensor defined by block 'layer' "
          "(instance 0)\n");
  model_free(&m);
  run_err(HEAD_C8
          " 'blocks': [{'name': 'layer', 'inputs': ['x'], 'outputs': ['h.{i}'],\n"
          "   'nodes': [{'name': 'h', 'op': 'relu', 'inputs': ['x']}]}],\n"
          " 'nodes': [{'repeat': 'layer', 'count': 1, 'inputs': ['x'], 'outputs': ['o']}],\n"
          " 'loss': 'o'}",
          "m.json:5:15: error: blocks[0].nodes[0]: block node 'h' must contain {i} so each "
          "instance has its own\n");
}
END_TEST

#define DIMS_ONLY(dims)                                                                            \
  "{'format': 'pipec-model', 'version': 1, 'name': 'm',\n"                                         \
  " 'dims': " dims ",\n"                                                                           \
  " 'inputs': [{'name': 'x', 'shape': ['B', 4]}],\n"                                               \
  " 'nodes': [{'name': 'loss', 'op': 'mse_loss', 'inputs': ['x', 'x']}], 'loss': 'loss'}"

START_TEST(test_err_dims) {
  run_err(DIMS_ONLY("{'C': 4, 'A': 'Q+1', 'Q': 'A*2'}"),
          "m.json:2:19: error: dims.A: dims refer to each other in a cycle through 'A'\n");
  model_free(&m);
  run_err(DIMS_ONLY("{'C': 8, 'H': 'C/3'}"),
          "m.json:2:19: error: dims.H: division is not exact in dimension expression 'C/3'\n");
  model_free(&m);
  run_err(DIMS_ONLY("{'C': 8, 'H': 'B*2'}"),
          "m.json:2:19: error: dims.H: dim 'H' may not depend on the batch symbol 'B'\n");
  model_free(&m);
  run_err(DIMS_ONLY("{'C': 8, 'Z': 'C-8'}"),
          "m.json:2:19: error: dims.Z: dim 'Z' must be >= 1, got 0\n");
  model_free(&m);
  run_err(DIMS_ONLY("{'C': 2.5}"),
          "m.json:2:11: error: dims.C: dim 'C' must be an integer from 1 to 2^53, got 2.5\n");
  model_free(&m);
  run_err(DIMS_ONLY("{'C': 8, 'H': 'K*2'}"), "m.json:2:19: error: dims.H: unknown dim 'K'\n");
  model_free(&m);
  run_err(DIMS_ONLY("{'B': 8}"), "m.json:2:11: error: dims: 'B' is the batch symbol; it is bound "
                                 "by the training configuration\n");
  model_free(&m);
  run_err(DIMS_ONLY("{'h.w': 8}"),
          "m.json:2:11: error: dims: 'h.w' is not a valid dim name (letters, digits, '_')\n");
}
END_TEST

START_TEST(test_err_shapes) {
  run_err("{'format': 'pipec-model', 'version': 1, 'name': 'm',\n"
          " 'inputs': [{'name': 'x', 'shape': ['B+1', 4]}], 'nodes': [], 'loss': 'x'}",
          "m.json:2:37: error: inputs[0].shape[0]: the batch symbol may only multiply, in 'B+1'\n");
  model_free(&m);
  run_err("{'format': 'pipec-model', 'version': 1, 'name': 'm',\n"
          " 'inputs': [{'name': 'x', 'shape': [4, 'B']}], 'nodes': [], 'loss': 'x'}",
          "m.json:2:27: error: inputs[0].shape: the first dim of an input must be the batch symbol "
          "'B'\n");
  model_free(&m);
  run_err("{'format': 'pipec-model', 'version': 1, 'name': 'm',\n"
          " 'inputs': [{'name': 'x', 'shape': ['B', 4]}],\n"
          " 'params': [{'name': 'w', 'shape': ['B', 4]}], 'nodes': [], 'loss': 'x'}",
          "m.json:3:37: error: params[0].shape[0]: a parameter's shape cannot use the batch symbol "
          "'B'\n");
  model_free(&m);
  run_err("{'format': 'pipec-model', 'version': 1, 'name': 'm',\n"
          " 'inputs': [{'name': 'x', 'shape': ['B', 0]}], 'nodes': [], 'loss': 'x'}",
          "m.json:2:42: error: inputs[0].shape[1]: dimension must be >= 1, got 0\n");
}
END_TEST

#define TIED_MODEL(params)                                                                         \
  "{'format': 'pipec-model', 'version': 1, 'name': 'm',\n"                                         \
  " 'inputs': [{'name': 'x', 'shape': ['B', 4]}],\n"                                               \
  " 'params': [" params "],\n"                                                                     \
  " 'nodes': [{'name': 'loss', 'op': 'mse_loss', 'inputs': ['x', 'x']}], 'loss': 'loss'}"

START_TEST(test_err_tied) {
  run_err(
      TIED_MODEL("{'name': 'a', 'shape': [4, 4], 'tied_to': 'b'}, {'name': 'b', 'shape': [4, 4]}"),
      "m.json:3:44: error: params[0].tied_to: 'b' is not a parameter defined before 'a'\n");
  model_free(&m);
  run_err(
      TIED_MODEL("{'name': 'a', 'shape': [4, 4]}, {'name': 'b', 'shape': [4, 4], 'tied_to': 'a', "
                 "'init': 'ones'}"),
      "m.json:3:92: error: params[1]: a tied parameter has no init of its own (it shares 'a')\n");
  model_free(&m);
  run_err(
      TIED_MODEL("{'name': 'a', 'shape': [4, 4]}, {'name': 'b', 'shape': [4, 4], 'tied_to': 'a'}, "
                 "{'name': 'c', 'shape': [4, 4], 'tied_to': 'b'}"),
      "m.json:3:124: error: params[2].tied_to: 'b' is itself tied to 'a'; tie to the owner\n");
  model_free(&m);
  run_err(
      TIED_MODEL("{'name': 'a', 'shape': [4, 8]}, {'name': 'b', 'shape': [8, 4], 'tied_to': 'a'}"),
      "m.json:3:76: error: params[1].tied_to: 'a' is f32(4,8) but 'b' is f32(8,4)\n");
  model_free(&m);
  run_err(TIED_MODEL("{'name': 'a', 'shape': [4, 4], 'tied_to': 'a'}"),
          "m.json:3:44: error: params[0].tied_to: 'a' is this parameter itself; tie it to an "
          "earlier parameter\n");
  model_free(&m);
  run_err(TIED_MODEL("{'name': 'a', 'shape': [4, 4], 'tied_to': 'x'}"),
          "m.json:3:44: error: params[0].tied_to: 'x' is not a parameter defined before 'a'\n");
}
END_TEST

START_TEST(test_err_defines_messages) {
  const char *d1[] = {"Q=1"};
  run_err_defs(DIMS_MODEL, d1, 1, "m.json: error: -D Q=1: the model has no dim 'Q'\n");
  model_free(&m);
  const char *d2[] = {"C"};
  run_err_defs(DIMS_MODEL, d2, 1, "m.json: error: -D C: expected NAME=VALUE\n");
  model_free(&m);
  const char *d3[] = {"C="};
  run_err_defs(DIMS_MODEL, d3, 1, "m.json: error: -D C=: expected NAME=VALUE\n");
  model_free(&m);
  const char *d4[] = {"=4"};
  run_err_defs(DIMS_MODEL, d4, 1, "m.json: error: -D =4: expected NAME=VALUE\n");
  model_free(&m);
  const char *d5[] = {"C=0"};
  run_err_defs(DIMS_MODEL, d5, 1, "m.json: error: dims.C: dim 'C' must be >= 1, got 0\n");
  model_free(&m);
  const char *d6[] = {"C=7"}; // H = C/2 is no longer exact
  run_err_defs(DIMS_MODEL, d6, 1,
               "m.json:2:31: error: dims.H: division is not exact in dimension expression 'C/2'\n");
  model_free(&m);
  const char *d7[] = {"C=B"};
  run_err_defs(DIMS_MODEL, d7, 1,
               "m.json: error: dims.C: dim 'C' may not depend on the batch symbol 'B'\n");
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Bugs found by these tests: "BUG" = fails on the code as written (tcase "bugs"), "Regression" =
// fixed since, kept so that it stays fixed

// BUG (expand_nodes.c make_node): a split with one size names its output "s" instead of "s:0";
// docs/ops.md: "outputs are NAME:0 … NAME:k−1, k = len(sizes)" (model-format.md likewise). This
// also turned tests/bad/split_batch_axis into an "undefined input 's:0'" case, so that bad model
// no longer reaches the "cannot split ... along the batch dim" check it was written for.
START_TEST(test_split_single_size_is_named_0) {
  run_ok("{'format': 'pipec-model', 'version': 1, 'name': 'm',\n"
         " 'inputs': [{'name': 'x', 'shape': ['B', 4]}],\n"
         " 'nodes': [{'name': 's', 'op': 'split', 'inputs': ['x'], 'attrs': {'sizes': [4]}},\n"
         "           {'name': 'loss', 'op': 'mse_loss', 'inputs': ['s:0', 'x']}], 'loss': 'loss'}");
  ck_assert_str_eq(node("s")->out[0]->name, "s:0");
}
END_TEST

// Regression (expand_nodes.c parse_attr, ATTR_INTS): `if (!eval_expr(..., &dd, ...) || dd.b)` read
// dd after a failed evaluation (uninitialised, or left {1,1} by "B*Q"), replacing the real error
// ("unknown dim 'Q'") by "an integer list cannot use the batch symbol".
START_TEST(test_ints_attr_expression_errors) {
  run_err(HEAD
          "  {'name': 'a', 'op': 'split', 'inputs': ['x'], 'attrs': {'sizes': ['Q', 2]}},\n" LOSS_A
              TAIL,
          "m.json:6:69: error: nodes[0].attrs.sizes[0]: unknown dim 'Q'\n");
  model_free(&m);
  run_err(
      HEAD
      "  {'name': 'a', 'op': 'split', 'inputs': ['x'], 'attrs': {'sizes': ['B*Q', 2]}},\n" LOSS_A
          TAIL,
      "m.json:6:69: error: nodes[0].attrs.sizes[0]: unknown dim 'Q'\n");
  model_free(&m);
  run_err(
      HEAD
      "  {'name': 'a', 'op': 'split', 'inputs': ['x'], 'attrs': {'sizes': ['B*2', 2]}},\n" LOSS_A
          TAIL,
      "m.json:6:69: error: nodes[0].attrs.sizes[0]: an integer list cannot use the batch symbol\n");
}
END_TEST

// BUG (ops.c split_infer): `sum += s->ints[i]` overflows int64 (undefined behaviour, UBSan reports
// it) when a model lists 1025 sizes of 2^53, each a valid integer. Run in a child process so that a
// sanitizer abort fails this test only.
START_TEST(test_split_sizes_sum_overflow) {
  enum { N = 1025 };
  size_t cap = (size_t)N * 24 + 1024;
  char *json = malloc(cap);
  ck_assert_ptr_nonnull(json);
  size_t o = (size_t)snprintf(
      json, cap,
      "{'format': 'pipec-model', 'version': 1, 'name': 'm',\n"
      " 'inputs': [{'name': 'x', 'shape': ['B', 4]}],\n"
      " 'nodes': [{'name': 's', 'op': 'split', 'inputs': ['x'], 'attrs': {'sizes': [");
  for (int i = 0; i < N; i++)
    o += (size_t)snprintf(json + o, cap - o, "%s9007199254740992", i ? ", " : "");
  snprintf(json + o, cap - o,
           "]}},\n {'name': 'loss', 'op': 'mse_loss', 'inputs': ['s:0', 'x']}], 'loss': 'loss'}");
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    FILE *devnull = freopen("/dev/null", "w", stderr);
    (void)devnull;
    Model cm;
    bool ok = model_run(&cm, json);
    const char *t = cap_text(&cm.cap);
    const char *want = "m.json:3:12: error: nodes[0] \"s\": attribute 'sizes' ";
    // Must fail with a message about the sizes, and must not print a wrapped-around negative sum.
    int rc = !ok && strncmp(t, want, strlen(want)) == 0 && !strstr(t, "sums to -") ? 0 : 1;
    model_free(&cm);
    free(json);
    _exit(rc);
  }
  free(json);
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st), "split with 1025 sizes of 2^53 crashed (signal %d)",
                WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  ck_assert_msg(WEXITSTATUS(st) == 0, "split with 1025 sizes of 2^53: wrong or missing diagnostic");
}
END_TEST

// BUG (expand_dims.c parse_dims/resolve_dim): an error in a dim that is first resolved on behalf of
// an earlier dim is reported under the earlier dim's path and position ("dims.A: dim 'Z' must be
// >= 1" at A), and a bad -D value then gets a file position it does not have.
START_TEST(test_dim_error_reported_at_its_own_dim) {
  run_err(DIMS_ONLY("{'C': 8, 'A': 'Z', 'Z': 'C-8'}"),
          "m.json:2:29: error: dims.Z: dim 'Z' must be >= 1, got 0\n");
  model_free(&m);
  const char *d[] = {"Z=0"}; // DIMS_MODEL's A = Z*2 comes before Z
  run_err_defs(DIMS_MODEL, d, 1, "m.json: error: dims.Z: dim 'Z' must be >= 1, got 0\n");
}
END_TEST

// BUG (found by tests/fuzz/fuzz_json): a JSON string escape ("\n", "\u001b") put a control byte
// into a key, an op, a dtype, a reference, ... and the message quoting it was printed with that
// byte raw: a newline broke the one-line message in two. Each is now written escaped, as
// diag_printable writes a file name.
typedef struct ControlCase {
  const char *from, *to; // TINY_NET with its first `from` replaced by `to`
  const char *want;      // the exact message
} ControlCase;

static const ControlCase CONTROL_CASES[] = {
    {"'target': true", "'targ\\net': true",
     "m.json:2:93: error: inputs[1]: unknown key 'targ\\net' (did you mean 'target'?)\n"},
    {"'op': 'relu'", "'op': 're\\u001blu'",
     "m.json:5:26: error: nodes[1] \"r\": unknown op 're\\x1blu' (did you mean 'relu'?)\n"},
    {"'dtype': 'i32'", "'dtype': 'i3\\t2'",
     "m.json:2:61: error: inputs[1].dtype: unknown dtype 'i3\\t2' (expected f32, bf16, f16 or "
     "i32)\n"},
    {"'init': 'xavier'", "'init': 'xav\\rier'",
     "m.json:3:44: error: params[0].init: unknown init 'xav\\rier' (did you mean 'xavier'?)\n"},
    {"'inputs': ['h']", "'inputs': ['h\\n']",
     "m.json:5:51: error: nodes[1] \"r\": undefined input 'h\\n' (did you mean 'h'?)\n"},
    {"'format': 'pipec-model'", "'format': 'pipec\\nmodel'",
     "m.json:1:2: error: format: expected \"pipec-model\", got \"pipec\\nmodel\"\n"},
    {"'shape': [3, 4]", "'shape': [3, '4\\u007f']",
     "m.json:3:40: error: params[0].shape[1]: unexpected byte 0x7f in dimension expression "
     "'4\\x7f'\n"},
    {"'loss': 'loss'}", "'loss': 'lo\\nss'}",
     "m.json:7:2: error: loss: undefined tensor 'lo\\nss' (did you mean 'loss'?)\n"},
    {"'name': 'net',", "'name': 'net', 'dims': {'A\\nB': 3},",
     "m.json:1:65: error: dims: 'A\\nB' is not a valid dim name (letters, digits, '_')\n"},
    {"'inputs': ['h']}", "'inputs': ['h'], 'attrs': {'a\\u001b': 1}}",
     "m.json:5:12: error: nodes[1] \"r\": unknown attribute 'a\\x1b': relu takes no attributes\n"},
    {"'op': 'relu', 'inputs': ['h']}",
     "'op': 'gelu', 'inputs': ['h'], 'attrs': {'approximate': 'no\\nne'}}",
     "m.json:5:67: error: nodes[1].attrs.approximate: unknown value 'no\\nne' (one of 'none', "
     "'tanh')\n"},
    {"'nodes': [",
     "'nodes': [{'repeat': 'la\\u001ber', 'count': 1, 'inputs': ['x'], 'outputs': ['x']},",
     "m.json:4:13: error: nodes[0]: unknown block 'la\\x1ber'\n"},
    {"'name': 'w',", "'name': 'w:\\n',",
     "m.json:3:14: error: params[0]: name 'w:\\n' contains ':', which is reserved for output "
     "indices\n"},
};
enum { NCONTROL = sizeof CONTROL_CASES / sizeof CONTROL_CASES[0] };

// The same in a block: a reference with a brace that is not "{i}", checked before it is a name.
START_TEST(test_control_character_in_block_reference) {
  run_err(HEAD_C8
          " 'blocks': [{'name': 'layer', 'inputs': ['x'], 'outputs': ['h.{i\\u0001.out'],\n"
          "   'nodes': [{'name': 'h.{i}.out', 'op': 'relu', 'inputs': ['x']}]}],\n"
          " 'nodes': [{'repeat': 'layer', 'count': 'L', 'inputs': ['x'], 'outputs': ['b']},\n"
          "           {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['b', 'y']}],\n"
          " 'loss': 'loss'}",
          "m.json:4:60: error: blocks[0].outputs[0]: 'h.{i\\x01.out' has a '{' that is not part of "
          "'{i}' (the only substitution)\n");
}
END_TEST

START_TEST(test_control_characters_escaped) {
  const ControlCase *c = &CONTROL_CASES[_i];
  const char *at = strstr(TINY_NET, c->from);
  ck_assert_ptr_nonnull(at);
  size_t head = (size_t)(at - TINY_NET), n = strlen(TINY_NET) + strlen(c->to) + 1;
  char *json = malloc(n);
  ck_assert_ptr_nonnull(json);
  snprintf(json, n, "%.*s%s%s", (int)head, TINY_NET, c->to, at + strlen(c->from));
  ck_assert_msg(!model_run(&m, json), "accepted: %s", json);
  free(json);
  ck_assert_str_eq(cap_text(&m.cap), c->want);
}
END_TEST

static Suite *expand_suite(void) {
  Suite *s = suite_create("expand");
  TCase *ok = tcase_create("models");
  tcase_add_checked_fixture(ok, setup, teardown);
  tcase_add_test(ok, test_doc_example);
  tcase_add_test(ok, test_print_golden);
  tcase_add_test(ok, test_print_before_shape_pass);
  tcase_add_test(ok, test_block_expansion);
  tcase_add_test(ok, test_block_start_offset);
  tcase_add_test(ok, test_block_two_streams_and_skip);
  tcase_add_test(ok, test_forward_references_sorted);
  tcase_add_test(ok, test_independent_nodes_keep_file_order);
  tcase_add_test(ok, test_tied_params);
  tcase_add_test(ok, test_dims_expressions);
  tcase_add_test(ok, test_defines_override);
  tcase_add_test(ok, test_defines_expression_and_last_wins);
  tcase_add_test(ok, test_custom_batch_symbol);
  tcase_add_test(ok, test_stage_hints);
  tcase_add_test(ok, test_unused_param_warning);
  suite_add_tcase(s, ok);

  TCase *err = tcase_create("errors");
  tcase_add_checked_fixture(err, setup, teardown);
  tcase_add_loop_test(err, test_error_case, 0, NERR);
  tcase_add_test(err, test_shape_errors_reported_once);
  tcase_add_test(err, test_err_duplicate_in_block_instance);
  tcase_add_test(err, test_err_repeat_alias_duplicate);
  tcase_add_test(err, test_err_repeat_structure);
  tcase_add_test(err, test_err_dims);
  tcase_add_test(err, test_err_shapes);
  tcase_add_test(err, test_err_tied);
  tcase_add_test(err, test_err_defines_messages);
  tcase_add_test(err, test_ints_attr_expression_errors);
  suite_add_tcase(s, err);

  TCase *bugs = tcase_create("bugs");
  tcase_add_checked_fixture(bugs, setup, teardown);
  tcase_add_test(bugs, test_split_single_size_is_named_0);
  tcase_add_test(bugs, test_split_sizes_sum_overflow);
  tcase_add_test(bugs, test_dim_error_reported_at_its_own_dim);
  tcase_add_loop_test(bugs, test_control_characters_escaped, 0, NCONTROL);
  tcase_add_test(bugs, test_control_character_in_block_reference);
  suite_add_tcase(s, bugs);
  return s;
}

int main(void) {
  return run_suite(expand_suite());
}

// Unit tests of the op registry's data, linked against the IR layer alone (pipec_ir, every object
// of it: tests/CMakeLists.txt), so that the build itself fails when ir/ references compiler/ or
// codegen/:
//  - the index-bound query (op_index_bound) on hand-built embedding and cross_entropy nodes, and
//    no bound anywhere else;
//  - every gradient rule is well formed: each forward op (and silu_mul, the internal forward op
//    of the fuse pass) has exactly one rule (entries or code),
//    each entry names an internal backward op whose arity takes the entry's inputs, and names
//    only slots and outputs the op always has;
//  - the rows sharing a kernel carry distinct variants (the binary ops' codes of pr_binary_fwd).
#include <check.h>
#include <string.h>

#include "../../ir/ir.h"
#include "../../ir/ops.h"

static Arena arena;
static Graph g;

static void setup(void) {
  arena_init(&arena);
  graph_init(&g, &arena);
}

static void teardown(void) {
  arena_free(&arena);
}

// A tensor of dtype t and the given dims; a dim of -n is n*B (carries the batch).
static Tensor *tensor(const char *name, TensorKind kind, DType t, int rank, const int64_t *dims) {
  Tensor *x = graph_add_tensor(&g, name, kind);
  x->dtype = t;
  x->shape.rank = rank;
  for (int i = 0; i < rank; i++)
    x->shape.d[i] = (Dim){dims[i] < 0 ? -dims[i] : dims[i], dims[i] < 0};
  return x;
}

// A node of op with inputs ins and one output y.
static Node *node(const char *op, Tensor **ins, int nin, Tensor *y) {
  const OpDef *def = op_find(op);
  ck_assert_ptr_nonnull(def);
  Node *n = graph_add_node(&g, op, def, nin, 1);
  for (int i = 0; i < nin; i++) n->in[i] = ins[i];
  n->out[0] = y;
  y->producer = n;
  return n;
}

START_TEST(test_index_bound_embedding) {
  // ids i32(B,5) index the 11 rows of the weight f32(11,7).
  Tensor *ids = tensor("ids", T_INPUT, DT_I32, 2, (int64_t[]){-1, 5});
  Tensor *w = tensor("w", T_PARAM, DT_F32, 2, (int64_t[]){11, 7});
  Tensor *y = tensor("y", T_ACT, DT_F32, 3, (int64_t[]){-1, 5, 7});
  Node *n = node("embedding", (Tensor *[]){ids, w}, 2, y);
  ck_assert_int_eq(op_index_bound(n, 0), 11);
  ck_assert_int_eq(op_index_bound(n, 1), 0); // the weight holds no indices
  ck_assert_str_eq(n->op->ids->what, "rows");
  ck_assert(n->op->ids->vocabulary);
  // The bound follows the weight's rows, not the ids' shape or the width.
  w->shape.d[0].n = 65;
  ck_assert_int_eq(op_index_bound(n, 0), 65);
}
END_TEST

START_TEST(test_index_bound_cross_entropy) {
  // logits f32(B,5,10), targets i32(B,5): class indices into the last dim (10) of the logits.
  Tensor *lg = tensor("logits", T_ACT, DT_F32, 3, (int64_t[]){-1, 5, 10});
  Tensor *tg = tensor("targets", T_INPUT, DT_I32, 2, (int64_t[]){-1, 5});
  Tensor *loss = tensor("loss", T_ACT, DT_F32, 0, NULL);
  Node *n = node("cross_entropy", (Tensor *[]){lg, tg}, 2, loss);
  ck_assert_int_eq(op_index_bound(n, 1), 10);
  ck_assert_int_eq(op_index_bound(n, 0), 0);
  ck_assert_str_eq(n->op->ids->what, "classes");
  ck_assert(!n->op->ids->vocabulary);
  // Rank 2 logits (B,60): still the last dim.
  lg->shape = (Shape){.rank = 2, .d = {{1, 1}, {60, 0}}};
  tg->shape = (Shape){.rank = 1, .d = {{1, 1}}};
  ck_assert_int_eq(op_index_bound(n, 1), 60);
}
END_TEST

// Only embedding and cross_entropy hold indices; every other op answers 0 for every slot.
START_TEST(test_index_bound_elsewhere) {
  int with = 0;
  for (int i = 0; i < op_count(); i++) {
    const OpDef *op = op_at(i);
    if (!op->ids) continue;
    with++;
    ck_assert_msg(!strcmp(op->name, "embedding") || !strcmp(op->name, "cross_entropy"),
                  "%s declares an index input", op->name);
    ck_assert_int_lt(op->ids->slot, op->min_in);
    ck_assert_int_lt(op->ids->of, op->min_in);
    ck_assert_int_ne(op->ids->slot, op->ids->of);
  }
  ck_assert_int_eq(with, 2);
  Tensor *x = tensor("x", T_INPUT, DT_F32, 2, (int64_t[]){-1, 8});
  Tensor *w = tensor("w", T_PARAM, DT_F32, 2, (int64_t[]){4, 8});
  Tensor *y = tensor("y", T_ACT, DT_F32, 2, (int64_t[]){-1, 4});
  Node *n = node("linear", (Tensor *[]){x, w}, 2, y);
  ck_assert_int_eq(op_index_bound(n, 0), 0);
  ck_assert_int_eq(op_index_bound(n, 1), 0);
}
END_TEST

// Number of entries in a GradTensor list (up to GF_END).
static int entry_inputs(const GradEntry *e) {
  int k = 0;
  while (k < MAX_GRAD_IN && e->in[k].from != GF_END) k++;
  return k;
}

START_TEST(test_gradient_rules_well_formed) {
  int entries = 0, code = 0;
  for (int i = 0; i < op_count(); i++) {
    const OpDef *op = op_at(i);
    // Internal ops have none, but the forward op a compiler pass makes (fuse.c's silu_mul).
    if (op->internal && strcmp(op->name, "silu_mul") != 0) {
      ck_assert_msg(!op->grads && !op->grad_rule, "internal op %s has a gradient rule", op->name);
      continue;
    }
    ck_assert_msg(!op->grads != !op->grad_rule, "%s: needs exactly one of grads, grad_rule",
                  op->name);
    if (op->grad_rule) {
      code++;
      continue;
    }
    ck_assert_msg(op->grads[0].bwd_op, "%s: an empty gradient table", op->name);
    int last = -2;
    for (const GradEntry *e = op->grads; e->bwd_op; e++, entries++) {
      const OpDef *b = op_find(e->bwd_op);
      ck_assert_msg(b && b->internal, "%s: backward op '%s' is not an internal op", op->name,
                    e->bwd_op);
      int nin = entry_inputs(e);
      ck_assert_msg(nin >= b->min_in && (b->max_in < 0 || nin <= b->max_in),
                    "%s: %s gets %d inputs", op->name, e->bwd_op, nin);
      // Slots in order (the order of the backward nodes), within the op's arity.
      ck_assert_msg(e->slot == GRAD_EVERY_SLOT || (e->slot > last && e->slot >= 0 &&
                                                   (op->max_in < 0 || e->slot < op->max_in)),
                    "%s: entry for slot %d", op->name, e->slot);
      last = e->slot;
      // Only tensors every node of the op has: required inputs, fixed outputs.
      for (int k = 0; k < nin; k++) {
        GradTensor t = e->in[k];
        if (t.from == GF_X) ck_assert_int_lt(t.k, op->min_in);
        if (t.from == GF_DY) ck_assert_int_lt(t.k, op->nout);
        if (t.from == GF_Y) ck_assert_int_lt(t.k, op->nout + op->nhidden);
        ck_assert_int_ge(t.k, 0);
      }
    }
  }
  ck_assert_int_ge(entries, 20); // the rules are data...
  ck_assert_int_eq(code, 2);     // ...but split's (all outputs' gradients, zeros for the missing)
  ck_assert_ptr_nonnull(op_find("split")->grad_rule); // and silu_mul's (one node, two gradients)
  ck_assert_ptr_nonnull(op_find("silu_mul")->grad_rule);
  ck_assert_int_eq(op_find("silu_mul.d")->nout, 2);
}
END_TEST

// add, sub, mul and div share pr_binary_fwd: their codes are the kernel's op argument 0 to 3.
START_TEST(test_variants) {
  ck_assert_int_eq(op_find("add")->variant, BIN_ADD);
  ck_assert_int_eq(op_find("sub")->variant, BIN_SUB);
  ck_assert_int_eq(op_find("mul")->variant, BIN_MUL);
  ck_assert_int_eq(BIN_ADD, 0);
  ck_assert_int_eq(BIN_SUB, 1);
  ck_assert_int_eq(BIN_MUL, 2);
  ck_assert_int_eq(op_find("div")->variant, BIN_DIV);
  ck_assert_int_eq(BIN_DIV, 3);
  ck_assert_int_eq(op_find("transpose")->variant, PERM_SWAP);
  ck_assert_int_eq(op_find("permute")->variant, PERM_LIST);
  // Every pair of rows sharing a kernel and argument rule tells them apart by variant, except
  // backward ops that take their sizes from the forward node (kargs read n->fwd).
  for (int i = 0; i < op_count(); i++)
    for (int j = i + 1; j < op_count(); j++) {
      const OpDef *a = op_at(i), *b = op_at(j);
      if (a->internal || b->internal || strcmp(a->kernel, b->kernel) || a->kargs != b->kargs)
        continue;
      ck_assert_msg(a->variant != b->variant, "%s and %s share kernel %s with variant %d", a->name,
                    b->name, a->kernel, a->variant);
    }
}
END_TEST

int main(void) {
  Suite *s = suite_create("registry");
  TCase *tc = tcase_create("registry");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_index_bound_embedding);
  tcase_add_test(tc, test_index_bound_cross_entropy);
  tcase_add_test(tc, test_index_bound_elsewhere);
  tcase_add_test(tc, test_gradient_rules_well_formed);
  tcase_add_test(tc, test_variants);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

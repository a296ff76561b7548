// The .pt2 importer's core (compiler/pt2_graph.h): lazy layout chains fold (reshapes merge,
// permutes compose, identities vanish, a chain back at its base's shape is the base), a chain
// that does not fold is realized as exactly its steps, and the committed fixtures import in
// process with the ops their patterns make.
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/pt2.h"
#include "../../compiler/pt2_graph.h"
#include "testutil.h"

static Arena a;
static Imp im;
static Capture cap;

static void setup(void) {
  arena_init(&a);
  cap_open(&cap, "m.pt2");
  memset(&im, 0, sizeof im);
  im.a = &a, im.d = &cap.d;
  strmap_init(&im.vals, &a);
  strmap_init(&im.names, &a);
  strmap_init(&im.bases, &a);
  im.jnodes = cJSON_CreateArray();
}

static void teardown(void) {
  cJSON_Delete(im.jnodes);
  cap_close(&cap);
  arena_free(&a);
}

static IShape shape(int rank, const int64_t *k, int bdim) {
  IShape s = {.rank = rank};
  for (int i = 0; i < rank; i++) s.k[i] = k[i], s.b[i] = i == bdim;
  return s;
}

// (B,16,64) as a tensor already lowered.
static Val *btc(void) {
  IShape s = shape(3, (int64_t[]){1, 16, 64}, 0);
  Val *v = imp_new_val(&im, VAL_TENSOR, &s, 7, NULL);
  v->pipec = "x";
  return v;
}

static const int SWAP[4] = {0, 2, 1, 3};

START_TEST(test_heads_cancel) { // view(B,T,H,D).transpose(1,2) and back: x itself
  Val *x = btc();
  IShape bthd = shape(4, (int64_t[]){1, 16, 4, 16}, 0);
  Val *q = imp_permute(&im, imp_reshape(&im, x, &bthd), SWAP); // (B,H,T,D)
  ck_assert_int_eq(q->kind, VAL_LAYOUT);
  ck_assert_int_eq(q->nsteps, 2);
  Val *back = imp_reshape(&im, imp_permute(&im, q, SWAP), &x->shape);
  ck_assert_ptr_eq(back, x);
  ck_assert_int_eq(cJSON_GetArraySize(im.jnodes), 0);
}
END_TEST

START_TEST(test_reshapes_merge) { // reshape after reshape: one step; back to the base: the base
  Val *x = btc();
  IShape s1 = shape(4, (int64_t[]){1, 16, 4, 16}, 0), s2 = shape(5, (int64_t[]){1, 16, 4, 8, 2}, 0);
  Val *y = imp_reshape(&im, imp_reshape(&im, x, &s1), &s2);
  ck_assert_int_eq(y->nsteps, 1);
  ck_assert_ptr_eq(imp_reshape(&im, y, &x->shape), x);
}
END_TEST

START_TEST(test_permutes_compose) { // two permutes are one; a reshape to the shape before vanishes
  Val *x = btc();
  IShape s1 = shape(4, (int64_t[]){1, 16, 4, 16}, 0);
  Val *r = imp_reshape(&im, x, &s1);
  const int p1[4] = {0, 2, 3, 1}, p2[4] = {0, 3, 1, 2}; // p2 undoes p1
  Val *y = imp_permute(&im, imp_permute(&im, r, p1), p2);
  ck_assert_int_eq(y->nsteps, 1); // just the reshape
  Val *z = imp_reshape(&im, imp_permute(&im, r, SWAP), &imp_permute(&im, r, SWAP)->shape);
  ck_assert_int_eq(z->nsteps, 2);
}
END_TEST

START_TEST(test_realize_steps) { // a chain that does not fold: one node per step, named in order
  Val *x = btc();
  IShape s1 = shape(4, (int64_t[]){1, 16, 4, 16}, 0);
  Val *q = imp_permute(&im, imp_reshape(&im, x, &s1), SWAP);
  const char *t = imp_realize(&im, q);
  ck_assert_str_eq(t, "permute");
  ck_assert_int_eq(cJSON_GetArraySize(im.jnodes), 2);
  cJSON *n0 = cJSON_GetArrayItem(im.jnodes, 0), *n1 = cJSON_GetArrayItem(im.jnodes, 1);
  ck_assert_str_eq(cJSON_GetObjectItem(n0, "op")->valuestring, "reshape");
  ck_assert_str_eq(cJSON_GetObjectItem(n1, "op")->valuestring, "permute");
  ck_assert_str_eq(imp_realize(&im, q), "permute"); // once
  ck_assert_int_eq(cJSON_GetArraySize(im.jnodes), 2);
}
END_TEST

// Imports a committed fixture in process; returns the document (the caller deletes it).
static cJSON *import(const char *name) {
  const char *root = getenv("PIPEC_SOURCE_DIR");
  char *path = arena_printf(&a, "%s/tests/import/fixtures/%s.pt2", root ? root : ".", name);
  Pt2 p;
  ck_assert_msg(pt2_open(&p, path, &a, &cap.d), "%s", cap_text(&cap));
  Pt2ImportOptions o = {.name = name};
  cJSON *doc = NULL;
  ck_assert_msg(pt2_import(&p, &o, &doc, &a, &cap.d), "%s", cap_text(&cap));
  pt2_close(&p);
  return doc;
}

static int count(const cJSON *doc, const char *op) {
  int n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "nodes")) n +=
      !strcmp(cJSON_GetObjectItem(e, "op")->valuestring, op);
  return n;
}

START_TEST(test_fixtures) {
  static const char *const llamas[] = {"llama3_interleaved", "llama3_halves", "llama3_complex",
                                       "hf_llama"};
  for (int i = 0; i < 4; i++) {
    cJSON *doc = import(llamas[i]);
    ck_assert_int_eq(count(doc, "rope"), 4);
    ck_assert_int_eq(count(doc, "attention"), 2);
    ck_assert_int_eq(count(doc, "rms_norm"), 5);
    ck_assert_int_eq(count(doc, "permute"), 0);
    cJSON_Delete(doc);
  }
  cJSON *doc = import("nanogpt");
  ck_assert_int_eq(count(doc, "reshape") + count(doc, "permute"), 0);
  ck_assert_str_eq(cJSON_GetObjectItem(doc, "loss")->valuestring, "loss");
  const cJSON *tied = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "params"), 28);
  ck_assert_str_eq(cJSON_GetObjectItem(tied, "name")->valuestring, "lm_head.weight");
  ck_assert_str_eq(cJSON_GetObjectItem(tied, "tied_to")->valuestring, "transformer.wte.weight");
  cJSON_Delete(doc);
  doc = import("mlp_regression");
  ck_assert_int_eq(count(doc, "mse_loss"), 1);
  cJSON_Delete(doc);
}
END_TEST

int main(void) {
  Suite *s = suite_create("pt2_import");
  TCase *tc = tcase_create("pt2_import");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_heads_cancel);
  tcase_add_test(tc, test_reshapes_merge);
  tcase_add_test(tc, test_permutes_compose);
  tcase_add_test(tc, test_realize_steps);
  tcase_add_test(tc, test_fixtures);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

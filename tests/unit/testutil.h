// Header-only helpers shared by the unit tests: diagnostics captured in memory, JSON written with
// single quotes, and whole models run through parse -> expand -> shape -> verify.
//
// Every helper frees what it allocates (arena, cJSON tree, memstream) so that the tests run clean
// under AddressSanitizer/LeakSanitizer.
#ifndef PIPEC_TESTUTIL_H
#define PIPEC_TESTUTIL_H

#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/dimexpr.h"
#include "../../compiler/passes.h"
#include "../../compiler/source.h"
#include "../../ir/ir.h"
#include "../../ir/ops.h"

// ---- diagnostics captured in a memstream

typedef struct Capture {
  char *buf;  // memstream buffer (malloc'd by the C library)
  size_t len; // bytes written
  FILE *f;    // the stream
  Diag d;     // a Diag writing into it
} Capture;

static inline void cap_open(Capture *c, const char *file) {
  c->buf = NULL;
  c->len = 0;
  c->f = open_memstream(&c->buf, &c->len);
  ck_assert_ptr_nonnull(c->f);
  diag_init(&c->d, file, c->f);
}

// Everything reported so far ("" when nothing).
static inline const char *cap_text(Capture *c) {
  fflush(c->f);
  return c->buf ? c->buf : "";
}

static inline void cap_close(Capture *c) {
  if (c->f) fclose(c->f);
  free(c->buf);
  c->f = NULL;
  c->buf = NULL;
  c->len = 0;
}

// ---- JSON written with single quotes

// Copy of s with every ' replaced by " (malloc'd). Tests write JSON as 'key': 'value' so that the
// C literals stay readable; the replacement is byte for byte, so positions do not move.
static inline char *json_q(const char *s) {
  size_t n = strlen(s);
  char *t = malloc(n + 1);
  ck_assert_ptr_nonnull(t);
  for (size_t i = 0; i <= n; i++) t[i] = s[i] == '\'' ? '"' : s[i];
  return t;
}

// ---- whole models

typedef struct Model {
  Arena arena;   // owns the source text, the graph and every string
  Source src;    // parsed document
  Graph g;       // the graph built by expand
  Capture cap;   // diagnostics ("m.json:LINE:COL: error: ...")
  bool parsed;   // source_parse succeeded
  bool expanded; // pass_expand succeeded
  bool shaped;   // pass_shape succeeded
  bool verified; // graph_verify succeeded
} Model;

// Runs json (single quotes allowed, see json_q) through source_parse, pass_expand, pass_shape
// and graph_verify, stopping at the first pass that fails. defines are -D NAME=VALUE strings.
// Returns true when every pass succeeded. Call model_free afterwards in every case.
static inline bool model_run_defs(Model *m, const char *json, const char **defines, int ndefines) {
  memset(m, 0, sizeof *m);
  arena_init(&m->arena);
  cap_open(&m->cap, "m.json");
  char *text = json_q(json);
  m->parsed = source_parse(&m->src, &m->arena, "m.json", text, strlen(text), &m->cap.d);
  free(text);
  if (!m->parsed) return false;
  graph_init(&m->g, &m->arena);
  ExpandOptions opt = {defines, ndefines};
  m->expanded = pass_expand(&m->src, &m->g, &opt, &m->cap.d);
  if (!m->expanded) return false;
  m->shaped = pass_shape(&m->g, &m->cap.d);
  if (!m->shaped) return false;
  m->verified = graph_verify(&m->g, &m->cap.d);
  return m->verified;
}

static inline bool model_run(Model *m, const char *json) {
  return model_run_defs(m, json, NULL, 0);
}

static inline void model_free(Model *m) {
  source_free(&m->src);
  arena_free(&m->arena);
  cap_close(&m->cap);
}

// graph_print into a malloc'd string (free it).
static inline char *print_graph(const Graph *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_ptr_nonnull(f);
  graph_print(g, f);
  fclose(f);
  return buf;
}

// Shape and dtype as the printer writes them: "f32(B,64)".
static inline const char *type_str(char *buf, int cap, const Graph *g, const Tensor *t) {
  char s[256];
  snprintf(buf, (size_t)cap, "%s%s", dtype_name(t->dtype),
           shape_str(s, sizeof s, &t->shape, g->batch_sym));
  return buf;
}

// ---- running a suite

// Runs one suite in CK_NORMAL mode; the process exit status is 1 when any test failed.
// x -> linear(w) -> relu -> cross_entropy(y): the smallest trainable model, for the tests of the
// back-end passes (schedule, memory plan).
static const char *const TINY_NET =
    "{'format': 'pipec-model', 'version': 1, 'name': 'net',\n"
    " 'inputs': [{'name': 'x', 'shape': ['B', 4]}, {'name': 'y', 'dtype': "
    "'i32', 'shape': ['B'], 'target': true}],\n"
    " 'params': [{'name': 'w', 'shape': [3, 4], 'init': 'xavier'}],\n"
    " 'nodes': [{'name': 'h', 'op': 'linear', 'inputs': ['x', 'w']},\n"
    "           {'name': 'r', 'op': 'relu', 'inputs': ['h']},\n"
    "           {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['r', "
    "'y']}],\n"
    " 'loss': 'loss'}";

static inline int run_suite(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}

#endif

// Unit tests of the op registry (ir/ops.c) against docs/ops.md:
//  - every registry row is complete, and the documented op set, arities and attribute schemas
//    (names, types, defaults, required) match the registry row for row (read from docs/ops.md);
//  - every kernel of the registry has its CUDA twin declared in runtime/cuda/pipert_cuda.h;
//  - one table of cases drives every op's shape rule on a hand-built graph: the inferred output
//    types, the cost (FLOPs and bytes with B = 3, formulas of docs/ops.md) and, for bad inputs,
//    the exact diagnostic;
//  - the worked example at the end of docs/ops.md (samples/gpt_char.json, B = 1).
#include <ctype.h>

#include "testutil.h"

enum { BATCH = 3 }; // B bound for the cost checks

// ---------------------------------------------------------------------------------------------
// Where the sources are (ctest sets PIPEC_SOURCE_DIR; else derived from this file's path)

static const char *source_dir(void) {
  static char dir[4096];
  const char *env = getenv("PIPEC_SOURCE_DIR");
  if (env && *env) return env;
  snprintf(dir, sizeof dir, "%s", __FILE__);
  char *p = strstr(dir, "/tests/unit/");
  if (p)
    *p = 0;
  else
    snprintf(dir, sizeof dir, "..");
  return dir;
}

static char *read_text(const char *rel) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", source_dir(), rel);
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(buf);
  ck_assert_int_eq((long)fread(buf, 1, (size_t)n, f), n);
  buf[n] = 0;
  fclose(f);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Registry rows are complete

START_TEST(test_registry_row) {
  const OpDef *op = op_at(_i);
  ck_assert_ptr_nonnull(op);
  ck_assert_ptr_nonnull(op->name);
  ck_assert_msg(*op->name, "op %d has an empty name", _i);
  ck_assert_msg(op->doc && *op->doc, "%s: no doc line", op->name);
  ck_assert_msg(op->cost != NULL, "%s: no cost function", op->name);
  if (!op->internal) ck_assert_msg(op->infer != NULL, "%s: no shape rule", op->name);
  ck_assert_msg(op->min_in >= 1, "%s: min_in %d", op->name, op->min_in);
  ck_assert_msg(op->max_in == -1 || op->max_in >= op->min_in, "%s: max_in %d < min_in %d", op->name,
                op->max_in, op->min_in);
  ck_assert_msg(op->nout >= 0, "%s: nout %d", op->name, op->nout);
  if (op->nout == 0)
    ck_assert_msg(op->count_outputs != NULL, "%s: nout 0 needs count_outputs", op->name);
  else
    ck_assert_msg(op->count_outputs == NULL, "%s: count_outputs set but nout is %d", op->name,
                  op->nout);
  ck_assert_msg(op->nhidden >= 0 && (op->nhidden == 0 || op->hidden != NULL), "%s: hidden outputs",
                op->name);
  ck_assert_msg(op->nattrs >= 0 && (op->nattrs == 0 || op->attrs != NULL), "%s: attrs", op->name);
  for (int a = 0; a < op->nattrs; a++) {
    const AttrDef *ad = &op->attrs[a];
    ck_assert_msg(ad->name && *ad->name, "%s: attribute %d has no name", op->name, a);
    ck_assert_msg(ad->doc && *ad->doc, "%s.%s: no doc", op->name, ad->name);
    ck_assert_msg(ad->type >= ATTR_INT && ad->type <= ATTR_ENUM, "%s.%s: bad type", op->name,
                  ad->name);
    if (ad->type == ATTR_ENUM) { // its names, and a default among them
      int nc = 0;
      while (ad->choices && ad->choices[nc]) nc++;
      ck_assert_msg(nc > 0 && ad->def_i >= 0 && ad->def_i < nc, "%s.%s: choices", op->name,
                    ad->name);
    } else
      ck_assert_msg(ad->choices == NULL, "%s.%s: choices on a non-enum", op->name, ad->name);
    ck_assert_int_eq(op_attr_index(op, ad->name), a);
    for (int b = 0; b < a; b++)
      ck_assert_msg(strcmp(op->attrs[b].name, ad->name) != 0, "%s: attribute '%s' twice", op->name,
                    ad->name);
  }
  ck_assert_int_eq(op_attr_index(op, "no_such_attribute"), -1);
  // Names are unique and op_find returns this very row.
  ck_assert_ptr_eq(op_find(op->name), op);
  for (int j = 0; j < _i; j++)
    ck_assert_msg(strcmp(op_at(j)->name, op->name) != 0, "op '%s' twice", op->name);
}
END_TEST

START_TEST(test_registry_lookup) {
  ck_assert_int_ge(op_count(), 21);
  ck_assert_ptr_null(op_find("no_such_op"));
  ck_assert_ptr_null(op_find(""));
  ck_assert_ptr_null(op_find("Relu")); // case-sensitive
  ck_assert_str_eq(op_find("relu")->name, "relu");
}
END_TEST

// ---------------------------------------------------------------------------------------------
// The registry agrees with docs/ops.md

typedef struct DocAttr {
  char name[128];
  char type[128];
  char def[128]; // default column
} DocAttr;

typedef struct DocOp {
  char name[64];
  char inputs[128];  // summary "inputs" column
  char attrs[128];   // summary "attributes" column
  char outputs[128]; // summary "outputs" column
  DocAttr sec[8];    // rows of the op's own attribute table
  int nsec;
} DocOp;

static void trim(char *s) {
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
  size_t k = 0;
  while (s[k] && isspace((unsigned char)s[k])) k++;
  memmove(s, s + k, n - k + 1);
}

// Splits a table row "| a | b | c |" into at most max trimmed cells; returns the count.
static int cells(const char *line, char out[][128], int max) {
  int n = 0;
  const char *p = strchr(line, '|');
  while (p && n < max) {
    const char *q = strchr(p + 1, '|');
    if (!q) break;
    size_t len = (size_t)(q - p - 1);
    if (len > 127) len = 127;
    memcpy(out[n], p + 1, len);
    out[n][len] = 0;
    trim(out[n]);
    n++;
    p = q;
  }
  return n;
}

// Text between backticks number k in s ("" when absent).
static void backtick(const char *s, int k, char *out, size_t cap) {
  out[0] = 0;
  for (int i = 0; i <= k; i++) {
    s = strchr(s, '`');
    if (!s) return;
    const char *e = strchr(s + 1, '`');
    if (!e) return;
    if (i == k) {
      size_t n = (size_t)(e - s - 1) < cap - 1 ? (size_t)(e - s - 1) : cap - 1;
      memcpy(out, s + 1, n);
      out[n] = 0;
      return;
    }
    s = e + 1;
  }
}

static DocOp *doc_find(DocOp *ops, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(ops[i].name, name) == 0) return &ops[i];
  return NULL;
}

// Reads the summary table and each op section's attribute table of docs/ops.md.
static int read_doc_ops(DocOp *ops, int max) {
  char *text = read_text("docs/ops.md");
  int n = 0;
  enum { NONE, SUMMARY, SECTION } where = NONE;
  char section_ops[8][128];
  int nsection = 0;
  bool in_attr_table = false;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (strncmp(line, "## ", 3) == 0) {
      where = strcmp(line, "## Summary") == 0 ? SUMMARY : NONE;
      continue;
    }
    if (strncmp(line, "### ", 4) == 0) {
      // "### add, sub, mul": the ops this section documents.
      where = SECTION;
      in_attr_table = false;
      nsection = 0;
      char *save, *names = line + 4;
      for (char *t = strtok_r(names, ",", &save); t && nsection < 8;
           t = strtok_r(NULL, ",", &save)) {
        snprintf(section_ops[nsection], sizeof section_ops[nsection], "%s", t);
        trim(section_ops[nsection]);
        nsection++;
      }
      continue;
    }
    char c[6][128];
    int nc = line[0] == '|' ? cells(line, c, 6) : 0;
    if (where == SUMMARY && nc == 5 && c[0][0] == '`') {
      for (int k = 0;; k++) {
        char name[64];
        backtick(c[0], k, name, sizeof name);
        if (!*name) break;
        ck_assert_int_lt(n, max);
        DocOp *o = &ops[n++];
        memset(o, 0, sizeof *o);
        snprintf(o->name, sizeof o->name, "%s", name);
        snprintf(o->inputs, sizeof o->inputs, "%s", c[1]);
        snprintf(o->attrs, sizeof o->attrs, "%s", c[2]);
        snprintf(o->outputs, sizeof o->outputs, "%s", c[3]);
      }
    } else if (where == SECTION && nc == 3) {
      if (strcmp(c[0], "attribute") == 0) {
        in_attr_table = true;
        continue;
      }
      if (!in_attr_table || c[0][0] != '`') continue;
      for (int s = 0; s < nsection; s++) {
        DocOp *o = doc_find(ops, n, section_ops[s]);
        ck_assert_msg(o != NULL, "docs/ops.md: section '%s' is not in the summary table",
                      section_ops[s]);
        ck_assert_int_lt(o->nsec, 8);
        DocAttr *a = &o->sec[o->nsec++];
        backtick(c[0], 0, a->name, sizeof a->name);
        snprintf(a->type, sizeof a->type, "%s", c[1]);
        snprintf(a->def, sizeof a->def, "%s", c[2]);
      }
    }
  }
  free(text);
  return n;
}

static const char *attr_type_name(AttrType t) {
  switch (t) {
  case ATTR_INT:
    return "int";
  case ATTR_FLOAT:
    return "float";
  case ATTR_BOOL:
    return "bool";
  case ATTR_INTS:
    return "ints";
  case ATTR_SHAPE:
    return "shape";
  case ATTR_ENUM:
    return "string";
  }
  return "?";
}

START_TEST(test_registry_matches_docs) {
  DocOp ops[64];
  int n = read_doc_ops(ops, 64);
  ck_assert_int_eq(n, 32); // the op set v1
  for (int i = 0; i < n; i++) {
    const DocOp *d = &ops[i];
    const OpDef *op = op_find(d->name);
    ck_assert_msg(op != NULL, "docs/ops.md documents '%s' but the registry has no such op",
                  d->name);
    ck_assert_msg(!op->internal, "'%s' is documented but internal", d->name);
    // Inputs: "a, b", "x, weight, [bias]", "x1 … xn (n ≥ 1)".
    int min = 0, max = 0;
    if (strstr(d->inputs, "\xe2\x80\xa6")) {              // '…': any number
      const char *ge = strstr(d->inputs, "\xe2\x89\xa5"); // '≥'
      ck_assert_ptr_nonnull(ge);
      min = atoi(ge + 3);
      max = -1;
    } else {
      char buf[128];
      snprintf(buf, sizeof buf, "%s", d->inputs);
      char *save;
      for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        trim(t);
        max++;
        if (t[0] != '[') min++;
      }
    }
    ck_assert_msg(op->min_in == min && op->max_in == max,
                  "%s: registry takes %d..%d inputs, docs say '%s'", d->name, op->min_in,
                  op->max_in, d->inputs);
    // Outputs: "1", "1 (scalar)" or "len(sizes)".
    if (strncmp(d->outputs, "len(", 4) == 0)
      ck_assert_msg(op->nout == 0 && op->count_outputs, "%s: outputs '%s'", d->name, d->outputs);
    else
      ck_assert_msg(op->nout == atoi(d->outputs), "%s: nout %d, docs say '%s'", d->name, op->nout,
                    d->outputs);
    // Attribute names, in order, from the summary ("—" = none).
    int na = 0;
    if (strcmp(d->attrs, "\xe2\x80\x94") != 0) {
      char buf[128];
      snprintf(buf, sizeof buf, "%s", d->attrs);
      char *save;
      for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save), na++) {
        char *paren = strstr(t, "(required)");
        if (paren) *paren = 0;
        trim(t);
        ck_assert_msg(na < op->nattrs, "%s: docs list attribute '%s', the registry has %d", d->name,
                      t, op->nattrs);
        ck_assert_msg(strcmp(op->attrs[na].name, t) == 0,
                      "%s: attribute %d is '%s' in the registry, '%s' in docs", d->name, na,
                      op->attrs[na].name, t);
      }
    }
    ck_assert_msg(na == op->nattrs, "%s: docs list %d attributes, the registry %d", d->name, na,
                  op->nattrs);
    // Each attribute's type, default and required flag from the op's own section.
    ck_assert_msg(d->nsec == op->nattrs,
                  "%s: its section documents %d attributes, the registry has %d", d->name, d->nsec,
                  op->nattrs);
    for (int a = 0; a < d->nsec; a++) {
      const DocAttr *da = &d->sec[a];
      int k = op_attr_index(op, da->name);
      ck_assert_msg(k >= 0, "%s: documented attribute '%s' is not in the registry", d->name,
                    da->name);
      const AttrDef *ad = &op->attrs[k];
      ck_assert_msg(strcmp(attr_type_name(ad->type), da->type) == 0, "%s.%s: type %s, docs say %s",
                    d->name, da->name, attr_type_name(ad->type), da->type);
      bool required = strncmp(da->def, "required", 8) == 0;
      ck_assert_msg(ad->required == required, "%s.%s: required=%d, docs say '%s'", d->name,
                    da->name, ad->required, da->def);
      if (required) continue;
      char v[64];
      backtick(da->def, 0, v, sizeof v);
      switch (ad->type) {
      case ATTR_BOOL:
        ck_assert_msg(ad->def_i == (strcmp(v, "true") == 0), "%s.%s: default %lld, docs say %s",
                      d->name, da->name, (long long)ad->def_i, v);
        break;
      case ATTR_INT:
        ck_assert_msg(ad->def_i == strtoll(v, NULL, 10), "%s.%s: default %lld, docs say %s",
                      d->name, da->name, (long long)ad->def_i, v);
        break;
      case ATTR_FLOAT:
        ck_assert_msg(ad->def_f == strtod(v, NULL), "%s.%s: default %g, docs say %s", d->name,
                      da->name, ad->def_f, v);
        break;
      case ATTR_ENUM:
        ck_assert_msg(strcmp(ad->choices[ad->def_i], v) == 0, "%s.%s: default %s, docs say %s",
                      d->name, da->name, ad->choices[ad->def_i], v);
        break;
      default:
        ck_abort_msg("%s.%s: list attributes have no default", d->name, da->name);
      }
    }
  }
  // Every op a model file may use is documented.
  for (int i = 0; i < op_count(); i++)
    if (!op_at(i)->internal)
      ck_assert_msg(doc_find(ops, n, op_at(i)->name) != NULL,
                    "op '%s' is not documented in docs/ops.md", op_at(i)->name);
}
END_TEST

// Every kernel of the registry (forward and internal rows) has its CUDA twin pr_cu_NAME declared in
// runtime/cuda/pipert_cuda.h: the CUDA target calls pr_cu_X for the row's pr_X (emit_cuda.c,
// kernel_name), so an op without one would fail only in nvcc's link of a device program. The fused
// kernels of FuseDef are the cpu target's only (codegen/segment.c) and need none.
START_TEST(test_registry_kernels_have_cuda_twins) {
  char *h = read_text("runtime/cuda/pipert_cuda.h");
  for (int i = 0; i < op_count(); i++) {
    const OpDef *op = op_at(i);
    ck_assert_msg(op->kernel && strncmp(op->kernel, "pr_", 3) == 0, "%s: kernel '%s'", op->name,
                  op->kernel ? op->kernel : "(none)");
    char want[128];
    snprintf(want, sizeof want, "pr_cu_%s(", op->kernel + 3);
    bool found = strstr(h, want) != NULL;
    if (!found) free(h);
    ck_assert_msg(found,
                  "op '%s': runtime/cuda/pipert_cuda.h declares no %.*s, the CUDA twin of %s",
                  op->name, (int)strlen(want) - 1, want, op->kernel);
  }
  free(h);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Shape rules and costs, one table of cases

typedef struct OpCase {
  const char *op;
  const char *in[5]; // input types "f32(B,4,5)"; the inputs are named a, b, c, d, e
  const char *attrs; // "name=value ..." (lists comma-separated), NULL for the defaults
  const char *out;   // expected visible outputs "f32(B,4,6) f32(B,2)", NULL when the rule fails
  double flops;      // expected cost with B = 3 (docs/ops.md)
  double bytes;
  const char *err; // expected message after 'nodes[0] "n": ' when out is NULL
} OpCase;

#define OK(op, ins, attrs, out, flops, bytes)                                                      \
  { op, ins, attrs, out, flops, bytes, NULL }
#define ERR(op, ins, attrs, msg)                                                                   \
  { op, ins, attrs, NULL, 0, 0, msg }
#define I(...)                                                                                     \
  { __VA_ARGS__ }

static const OpCase cases[] = {
    // matmul: 2·batch·M·N·K; b rank 2 (shared) or same rank with equal leading dims
    OK("matmul", I("f32(B,4,5)", "f32(5,6)"), NULL, "f32(B,4,6)", 2.0 * 3 * 4 * 6 * 5,
       (60 + 30 + 72) * 4),
    OK("matmul", I("f32(B,5,4)", "f32(5,6)"), "transpose_a=true", "f32(B,4,6)", 720, 648),
    OK("matmul", I("f32(B,4,5)", "f32(6,5)"), "transpose_b=true", "f32(B,4,6)", 720, 648),
    OK("matmul", I("f32(B,5,4)", "f32(6,5)"), "transpose_a=true transpose_b=true", "f32(B,4,6)",
       720, 648),
    OK("matmul", I("f32(B,4,5)", "f32(B,5,6)"), NULL, "f32(B,4,6)", 720, (60 + 90 + 72) * 4),
    OK("matmul", I("f32(2,B,4,5)", "f32(5,6)"), NULL, "f32(2,B,4,6)", 2.0 * 6 * 4 * 6 * 5,
       (120 + 30 + 144) * 4),
    OK("matmul", I("f32(4,5)", "f32(5,6)"), NULL, "f32(4,6)", 240, (20 + 30 + 24) * 4),
    OK("matmul", I("bf16(B,2,3)", "bf16(3,4)"), NULL, "bf16(B,2,4)", 2.0 * 3 * 2 * 4 * 3,
       (18 + 12 + 24) * 2),
    OK("matmul", I("f32(4,B)", "f32(B,6)"), NULL, "f32(4,6)", 2.0 * 4 * 6 * 3,
       (12 + 18 + 24) * 4), // K = B
    OK("matmul", I("f32(B,4)", "f32(B,6)"), "transpose_a=true", "f32(4,6)", 144, 216),
    OK("matmul", I("f32(B*4,5)", "f32(5,6)"), NULL, "f32(B*4,6)", 2.0 * 12 * 6 * 5,
       (60 + 30 + 72) * 4),
    ERR("matmul", I("f32(B,4,5)", "f32(7,6)"), NULL,
        "input 'b' has shape (7,6) but matmul needs (...,5,6) to match a"),
    ERR("matmul", I("f32(B,4,5)", "f32(6,7)"), "transpose_b=true",
        "input 'b' has shape (6,7) but matmul needs (...,6,5) (transpose_b) to match a"),
    ERR("matmul", I("f32(B,5,4)", "f32(5,6)"), NULL,
        "input 'b' has shape (5,6) but matmul needs (...,4,6) to match a"),
    ERR("matmul", I("f32(5)", "f32(5,6)"), NULL,
        "input 'a' has shape (5) (rank 1) but matmul needs rank at least 2"),
    ERR("matmul", I("f32(5,6)", "f32(6)"), NULL,
        "input 'b' has shape (6) (rank 1) but matmul needs rank at least 2"),
    ERR("matmul", I("f32(2,B,4,5)", "f32(B,5,6)"), NULL,
        "input 'b' has shape (B,5,6) but matmul needs rank 2 or rank 4 (the rank of 'a')"),
    ERR("matmul", I("f32(B,4,5)", "f32(2,5,6)"), NULL,
        "batch dimension 0 differs: 'a' has shape (B,4,5), 'b' has shape (2,5,6)"),
    ERR("matmul", I("f32(B,4,5)", "f32(1,5,6)"), NULL, // size-1 leading dims are not broadcast
        "batch dimension 0 differs: 'a' has shape (B,4,5), 'b' has shape (1,5,6)"),
    ERR("matmul", I("i32(2,3)", "f32(3,4)"), NULL,
        "input 'a' has dtype i32 but matmul needs a floating-point tensor"),
    ERR("matmul", I("f32(2,3)", "bf16(3,4)"), NULL,
        "input 'b' has dtype bf16 but input 'a' has dtype f32; matmul needs equal dtypes"),

    // linear: 2·rows·IN·OUT (+ rows·OUT with bias)
    OK("linear", I("f32(B,8)", "f32(16,8)"), NULL, "f32(B,16)", 2.0 * 3 * 8 * 16,
       (24 + 128 + 48) * 4),
    OK("linear", I("f32(B,8)", "f32(16,8)", "f32(16)"), NULL, "f32(B,16)", 768 + 48,
       (24 + 128 + 16 + 48) * 4),
    OK("linear", I("f32(B,5,8)", "f32(16,8)"), NULL, "f32(B,5,16)", 2.0 * 15 * 8 * 16,
       (120 + 128 + 240) * 4),
    OK("linear", I("f32(8)", "f32(16,8)"), NULL, "f32(16)", 2.0 * 8 * 16, (8 + 128 + 16) * 4),
    OK("linear", I("bf16(B,8)", "bf16(16,8)", "bf16(16)"), NULL, "bf16(B,16)", 816,
       (24 + 128 + 16 + 48) * 2),
    ERR("linear", I("f32(B,8)", "f32(16,9)"), NULL,
        "input 'b' has shape (16,9) but linear needs (OUT,8) to match the last dim of 'a' (B,8)"),
    ERR("linear", I("f32(B,8)", "f32(16,8)", "f32(15)"), NULL,
        "input 'c' has shape (15) but linear needs a bias of shape (16)"),
    ERR("linear", I("f32(B,8)", "f32(16,8)", "f32(16,1)"), NULL,
        "input 'c' has shape (16,1) but linear needs a bias of shape (16)"),
    ERR("linear", I("f32(B,8)", "f32(8)"), NULL,
        "input 'b' has shape (8) (rank 1) but linear needs rank 2"),
    ERR("linear", I("f32(B,8)", "f32(16,8)", "bf16(16)"), NULL,
        "input 'c' has dtype bf16 but input 'a' has dtype f32; linear needs equal dtypes"),
    ERR("linear", I("f32(B,8)", "f16(16,8)"), NULL,
        "input 'b' has dtype f16 but input 'a' has dtype f32; linear needs equal dtypes"),
    ERR("linear", I("i32(B,8)", "f32(16,8)"), NULL,
        "input 'a' has dtype i32 but linear needs a floating-point tensor"),
    ERR("linear", I("f32()", "f32(16,8)"), NULL,
        "input 'a' has shape () (rank 0) but linear needs rank at least 1"),

    // add, sub, mul: NumPy broadcasting (B is not a literal 1); n flops
    OK("add", I("f32(B,4)", "f32(4)"), NULL, "f32(B,4)", 12, (12 + 4 + 12) * 4),
    OK("add", I("f32(B,1,4)", "f32(3,1)"), NULL, "f32(B,3,4)", 36, (12 + 3 + 36) * 4),
    OK("add", I("f32(B,4)", "f32(B,1)"), NULL, "f32(B,4)", 12, (12 + 3 + 12) * 4),
    OK("add", I("f32(2,B)", "f32(B)"), NULL, "f32(2,B)", 6, (6 + 3 + 6) * 4),
    OK("sub", I("f32(1,4)", "f32(B,4)"), NULL, "f32(B,4)", 12, (4 + 12 + 12) * 4),
    OK("sub", I("f32(B,4)", "f32(B,4)"), NULL, "f32(B,4)", 12, 36 * 4),
    OK("mul", I("f32()", "f32(B,4)"), NULL, "f32(B,4)", 12, (1 + 12 + 12) * 4),
    OK("mul", I("f16(B,4)", "f16(B,4)"), NULL, "f16(B,4)", 12, 36 * 2),
    ERR("add", I("f32(B,4)", "f32(3,4)"), NULL, "cannot broadcast 'a' (B,4) with 'b' (3,4)"),
    ERR("add", I("f32(B,4)", "f32(1,5)"), NULL, "cannot broadcast 'a' (B,4) with 'b' (1,5)"),
    ERR("sub", I("f32(B,4)", "f32(B*2,4)"), NULL, "cannot broadcast 'a' (B,4) with 'b' (B*2,4)"),
    ERR("mul", I("i32(B,4)", "i32(B,4)"), NULL,
        "input 'a' has dtype i32 but mul needs a floating-point tensor"),
    ERR("add", I("f32(B,4)", "bf16(B,4)"), NULL,
        "input 'b' has dtype bf16 but input 'a' has dtype f32; add needs equal dtypes"),

    // scale: n flops
    OK("scale", I("f32(B,4)"), "factor=0.5", "f32(B,4)", 12, 96),
    OK("scale", I("bf16(B,4)"), "factor=-2", "bf16(B,4)", 12, 48),
    ERR("scale", I("i32(B,4)"), "factor=2",
        "input 'a' has dtype i32 but scale needs a floating-point tensor"),

    // relu n, gelu 8n, tanh 5n, sigmoid 4n (n = 30)
    OK("relu", I("f16(B,2,5)"), NULL, "f16(B,2,5)", 30, 120),
    OK("gelu", I("f16(B,2,5)"), NULL, "f16(B,2,5)", 240, 120),
    OK("tanh", I("f16(B,2,5)"), NULL, "f16(B,2,5)", 150, 120),
    OK("sigmoid", I("f16(B,2,5)"), NULL, "f16(B,2,5)", 120, 120),
    OK("relu", I("f32()"), NULL, "f32()", 1, 8),
    ERR("relu", I("i32(B,4)"), NULL,
        "input 'a' has dtype i32 but relu needs a floating-point tensor"),
    ERR("gelu", I("i32(B,4)"), NULL,
        "input 'a' has dtype i32 but gelu needs a floating-point tensor"),
    ERR("tanh", I("i32(B,4)"), NULL,
        "input 'a' has dtype i32 but tanh needs a floating-point tensor"),
    ERR("sigmoid", I("i32(B,4)"), NULL,
        "input 'a' has dtype i32 but sigmoid needs a floating-point tensor"),

    // silu: 5n (sigmoid's 4 and the product)
    OK("silu", I("f16(B,2,5)"), NULL, "f16(B,2,5)", 150, 120),
    OK("silu", I("f32(B,11)"), NULL, "f32(B,11)", 165, 264),
    ERR("silu", I("i32(B,4)"), NULL,
        "input 'a' has dtype i32 but silu needs a floating-point tensor"),

    // neg (n), exp (4n), rsqrt (2n), pow by a constant (4n)
    OK("neg", I("f32(B,11)"), NULL, "f32(B,11)", 33, 264),
    OK("neg", I("bf16(B,2,5)"), NULL, "bf16(B,2,5)", 30, 120),
    ERR("neg", I("i32(B,4)"), NULL,
        "input 'a' has dtype i32 but neg needs a floating-point tensor"),
    OK("exp", I("f32(B,11)"), NULL, "f32(B,11)", 132, 264),
    ERR("exp", I("i32(B,4)"), NULL,
        "input 'a' has dtype i32 but exp needs a floating-point tensor"),
    OK("rsqrt", I("f16(B,2,5)"), NULL, "f16(B,2,5)", 60, 120),
    ERR("rsqrt", I("i32(B,4)"), NULL,
        "input 'a' has dtype i32 but rsqrt needs a floating-point tensor"),
    OK("pow", I("f32(B,11)"), "exponent=2", "f32(B,11)", 132, 264),
    OK("pow", I("f32(7)"), "exponent=-0.5", "f32(7)", 28, 56),
    ERR("pow", I("f32(B,4)"), "exponent=1e39",
        "attribute 'exponent' = 1e+39 is not a finite float"),
    ERR("pow", I("f32(B,4)"), "exponent=-inf", "attribute 'exponent' = -inf is not a finite float"),
    ERR("pow", I("i32(B,4)"), "exponent=2",
        "input 'a' has dtype i32 but pow needs a floating-point tensor"),
    // div: mul's broadcasting, n flops
    OK("div", I("f32(B,4)", "f32(4)"), NULL, "f32(B,4)", 12, (12 + 4 + 12) * 4),
    OK("div", I("f32(1,5)", "f32(B,1)"), NULL, "f32(B,5)", 15, (5 + 3 + 15) * 4),
    ERR("div", I("f32(B,4)", "f32(3)"), NULL, "cannot broadcast 'a' (B,4) with 'b' (3)"),
    ERR("div", I("f32(B,4)", "f16(4)"), NULL,
        "input 'b' has dtype f16 but input 'a' has dtype f32; div needs equal dtypes"),
    ERR("div", I("i32(B,4)", "i32(4)"), NULL,
        "input 'a' has dtype i32 but div needs a floating-point tensor"),
    // mean: numel(x) flops
    OK("mean", I("f32(B,5,8)"), "axis=-1", "f32(B,5)", 120, (120 + 15) * 4),
    OK("mean", I("f32(B,5,8)"), "axis=1 keepdim=true", "f32(B,1,8)", 120, (120 + 24) * 4),
    OK("mean", I("bf16(6)"), "axis=0", "bf16()", 6, (6 + 1) * 2),
    OK("mean", I("f32(6)"), "axis=0 keepdim=true", "f32(1)", 6, (6 + 1) * 4),
    ERR("mean", I("f32(B,5,8)"), "axis=3",
        "attribute 'axis' = 3 is out of range for rank 3 (valid: -3..2)"),
    ERR("mean", I("f32(B,5,8)"), "axis=0",
        "cannot take the mean of 'a' (B,5,8) along the batch dim"),
    ERR("mean", I("f32(B,0)"), "axis=1",
        "cannot take the mean of 'a' (B,0) along axis 1 of size 0"),
    ERR("mean", I("i32(B,4)"), "axis=1",
        "input 'a' has dtype i32 but mean needs a floating-point tensor"),
    // slice: a layout op (any dtype, 0 flops); Python's negative indices, step 1
    OK("slice", I("f32(B,8)"), "axis=1 start=2 end=5", "f32(B,3)", 0, (24 + 9) * 4),
    OK("slice", I("f32(B,8)"), "axis=-1 start=-3", "f32(B,3)", 0, (24 + 9) * 4),
    OK("slice", I("i32(B,8)"), "axis=1 end=-1", "i32(B,7)", 0, (24 + 21) * 4),
    OK("slice", I("f16(4,B)"), "axis=0 start=1 end=4 step=1", "f16(3,B)", 0, (12 + 9) * 2),
    OK("slice", I("f32(B,8)"), "axis=1 end=9223372036854775807", "f32(B,8)", 0, (24 + 24) * 4),
    ERR("slice", I("f32(B,8)"), "axis=1 end=9", "attribute 'end' = 9 is past axis 1 of size 8"),
    ERR("slice", I("f32(B,8)"), "axis=1 end=-9",
        "attribute 'end' = -9 is before the start of axis 1 of size 8"),
    ERR("slice", I("f32(B,8)"), "axis=1 start=8",
        "attribute 'start' = 8 is out of range for axis 1 of size 8"),
    ERR("slice", I("f32(B,8)"), "axis=1 start=-9",
        "attribute 'start' = -9 is out of range for axis 1 of size 8"),
    ERR("slice", I("f32(B,8)"), "axis=1 start=5 end=3", "slice of axis 1 from 5 to 3 is empty"),
    ERR("slice", I("f32(B,8)"), "axis=1 start=-2 end=6", "slice of axis 1 from 6 to 6 is empty"),
    ERR("slice", I("f32(B,8)"), "axis=1 step=2",
        "attribute 'step' = 2 is not supported; slice takes step 1"),
    ERR("slice", I("f32(B,8)"), "axis=0 end=1", "cannot slice 'a' (B,8) along the batch dim"),
    ERR("slice", I("f32(B,8)"), "axis=2",
        "attribute 'axis' = 2 is out of range for rank 2 (valid: -2..1)"),

    // softmax: 5n
    OK("softmax", I("f32(B,6)"), NULL, "f32(B,6)", 90, 144),
    OK("softmax", I("f32(B,6)"), "axis=0", "f32(B,6)", 90, 144),
    OK("softmax", I("f32(B,6)"), "axis=-2", "f32(B,6)", 90, 144),
    ERR("softmax", I("f32(B,6)"), "axis=2",
        "attribute 'axis' = 2 is out of range for rank 2 (valid: -2..1)"),
    ERR("softmax", I("f32(B,6)"), "axis=-3",
        "attribute 'axis' = -3 is out of range for rank 2 (valid: -2..1)"),
    ERR("softmax", I("f32()"), NULL,
        "input 'a' has shape () (rank 0) but softmax needs rank at least 1"),
    ERR("softmax", I("i32(B,6)"), NULL,
        "input 'a' has dtype i32 but softmax needs a floating-point tensor"),

    // layernorm: 8n; bytes of the inputs and the (visible) output.
    // BUG (ops.c io_bytes): the bytes also count the hidden outputs saved for backward (mean, rstd;
    // attention's probabilities), against docs/ops.md ("the sum of the sizes of its input and
    // output tensors", and its worked example: 131,072 bytes for transformer.h.0.attn).
    OK("layernorm", I("f32(B,5,8)", "f32(8)", "f32(8)"), NULL, "f32(B,5,8)", 960,
       (120 + 8 + 8 + 120) * 4),
    OK("layernorm", I("f32(B,5,8)", "f32(8)"), NULL, "f32(B,5,8)", 960, (120 + 8 + 120) * 4),
    OK("layernorm", I("bf16(B,8)", "bf16(8)"), "eps=0.001", "bf16(B,8)", 192, (24 + 8 + 24) * 2),
    ERR("layernorm", I("f32(B,5,8)", "f32(7)"), NULL,
        "input 'b' has shape (7) but layernorm needs (8) to match the last dim of 'a' (B,5,8)"),
    ERR("layernorm", I("f32(B,8)", "f32(8)", "f32(8,1)"), NULL,
        "input 'c' has shape (8,1) but layernorm needs (8) to match the last dim of 'a' (B,8)"),
    ERR("layernorm", I("f32(B,8)", "f32(8)"), "eps=0", "attribute 'eps' must be > 0, got 0"),
    ERR("layernorm", I("f32(B,8)", "f32(8)"), "eps=-1", "attribute 'eps' must be > 0, got -1"),
    ERR("layernorm", I("f32(B,8)", "f32(8)", "f16(8)"), NULL,
        "input 'c' has dtype f16 but input 'a' has dtype f32; layernorm needs equal dtypes"),
    ERR("layernorm", I("i32(B,8)", "f32(8)"), NULL,
        "input 'a' has dtype i32 but layernorm needs a floating-point tensor"),

    // rms_norm: 4n; weight (C) only (no bias: two inputs, checked where the node is read, see
    // test_expand.c); bytes without the hidden rstd
    OK("rms_norm", I("f32(B,5,8)", "f32(8)"), NULL, "f32(B,5,8)", 480, (120 + 8 + 120) * 4),
    OK("rms_norm", I("bf16(B,8)", "bf16(8)"), "eps=0.001", "bf16(B,8)", 96, (24 + 8 + 24) * 2),
    OK("rms_norm", I("f32(8)", "f32(8)"), NULL, "f32(8)", 32, (8 + 8 + 8) * 4),
    ERR("rms_norm", I("f32(B,5,8)", "f32(7)"), NULL,
        "input 'b' has shape (7) but rms_norm needs (8) to match the last dim of 'a' (B,5,8)"),
    ERR("rms_norm", I("f32(B,8)", "f32(8,1)"), NULL,
        "input 'b' has shape (8,1) but rms_norm needs (8) to match the last dim of 'a' (B,8)"),
    ERR("rms_norm", I("f32(8,B)", "f32(8)"), NULL,
        "input 'b' has shape (8) but rms_norm needs (B) to match the last dim of 'a' (8,B)"),
    ERR("rms_norm", I("f32(B,8)", "f32(8)"), "eps=0", "attribute 'eps' must be > 0, got 0"),
    ERR("rms_norm", I("f32(B,8)", "f32(8)"), "eps=-1e-06",
        "attribute 'eps' must be > 0, got -1e-06"),
    ERR("rms_norm", I("f32(B,8)", "f16(8)"), NULL,
        "input 'b' has dtype f16 but input 'a' has dtype f32; rms_norm needs equal dtypes"),
    ERR("rms_norm", I("i32(B,8)", "f32(8)"), NULL,
        "input 'a' has dtype i32 but rms_norm needs a floating-point tensor"),
    ERR("rms_norm", I("f32()", "f32(1)"), NULL,
        "input 'a' has shape () (rank 0) but rms_norm needs rank at least 1"),

    // embedding: 0 flops; output idx.shape + (C), dtype of weight
    OK("embedding", I("i32(B,5)", "f32(11,7)"), NULL, "f32(B,5,7)", 0, (15 + 77 + 105) * 4),
    OK("embedding", I("i32(B,5)", "bf16(11,7)"), NULL, "bf16(B,5,7)", 0, 15 * 4 + 77 * 2 + 105 * 2),
    ERR("embedding", I("f32(B,5)", "f32(11,7)"), NULL,
        "input 'a' has dtype f32 but embedding needs i32 ids"),
    ERR("embedding", I("i32(B,5)", "f32(11)"), NULL,
        "input 'b' has shape (11) (rank 1) but embedding needs rank 2"),
    ERR("embedding", I("i32(B,5)", "i32(11,7)"), NULL,
        "input 'b' has dtype i32 but embedding needs a floating-point tensor"),
    ERR("embedding", I("i32(B,1,1,1,1,1,1,1)", "f32(11,7)"), NULL,
        "input 'a' has rank 8; the output would exceed rank 8"),

    // reshape: one -1 inferred (takes the batch factor if no other entry has it); any dtype
    OK("reshape", I("f32(B,4,6)"), "shape=B,24", "f32(B,24)", 0, 576),
    OK("reshape", I("f32(B,4,6)"), "shape=B,-1", "f32(B,24)", 0, 576),
    OK("reshape", I("f32(B,4,6)"), "shape=-1,6", "f32(B*4,6)", 0, 576),
    OK("reshape", I("f32(B,4,6)"), "shape=2,B,12", "f32(2,B,12)", 0, 576),
    OK("reshape", I("f32(B,4,6)"), "shape=-1", "f32(B*24)", 0, 576),
    OK("reshape", I("f32(B*4,6)"), "shape=B,4,6", "f32(B,4,6)", 0, 576),
    OK("reshape", I("i32(B,4,6)"), "shape=B,2,-1", "i32(B,2,12)", 0, 576),
    OK("reshape", I("f32(B)"), "shape=B,1,1", "f32(B,1,1)", 0, 24),
    ERR("reshape", I("f32(B,4,6)"), "shape=B,25",
        "cannot reshape 'a' (B,4,6) into (B,25): element counts differ"),
    ERR("reshape", I("f32(B,4,6)"), "shape=-1,-1", "attribute 'shape' has more than one -1"),
    ERR("reshape", I("f32(B,4,6)"), "shape=5,-1",
        "cannot reshape 'a' (B,4,6) into (5,-1): element counts differ"),
    ERR("reshape", I("f32(B,4,6)"), "shape=24",
        "cannot reshape 'a' (B,4,6) into (24): element counts differ"),
    ERR("reshape", I("f32(4,6)"), "shape=B,-1",
        "cannot reshape 'a' (4,6) into (B,-1): element counts differ"),
    ERR("reshape", I("f32(B,4,6)"), "shape=1,1,1,1,1,1,1,B,24",
        "attribute 'shape' has 9 dims; at most 8 are supported"),
    ERR("reshape", I("f32(B,B,4)"), "shape=B,-1",
        "input 'a' has shape (B,B,4) with the batch in several dims; reshape cannot merge them"),

    // transpose
    OK("transpose", I("f32(B,4,6)"), "dim0=1 dim1=2", "f32(B,6,4)", 0, 576),
    OK("transpose", I("f32(B,4,6)"), "dim0=-1 dim1=0", "f32(6,4,B)", 0, 576),
    OK("transpose", I("i32(B,4,6)"), "dim0=1 dim1=1", "i32(B,4,6)", 0, 576),
    ERR("transpose", I("f32(B,4,6)"), "dim0=3 dim1=0",
        "attribute 'dim0' = 3 is out of range for rank 3 (valid: -3..2)"),
    ERR("transpose", I("f32(B,4,6)"), "dim0=0 dim1=-4",
        "attribute 'dim1' = -4 is out of range for rank 3 (valid: -3..2)"),

    // permute
    OK("permute", I("f32(B,4,6)"), "perm=2,0,1", "f32(6,B,4)", 0, 576),
    OK("permute", I("f32(B,4,6)"), "perm=-1,0,1", "f32(6,B,4)", 0, 576),
    OK("permute", I("bf16(B,4,6)"), "perm=0,2,1", "bf16(B,6,4)", 0, 288),
    ERR("permute", I("f32(B,4,6)"), "perm=0,1",
        "attribute 'perm' has 2 entries but input 'a' (B,4,6) has rank 3"),
    ERR("permute", I("f32(B,4,6)"), "perm=0,0,1", "attribute 'perm' names dim 0 twice"),
    ERR("permute", I("f32(B,4,6)"), "perm=0,-3,1", "attribute 'perm' names dim 0 twice"),
    ERR("permute", I("f32(B,4,6)"), "perm=0,1,3",
        "attribute 'perm' = 3 is out of range for rank 3 (valid: -3..2)"),

    // split: len(sizes) outputs; not along the batch dim
    OK("split", I("f32(B,64)"), "sizes=24,40", "f32(B,24) f32(B,40)", 0, (192 + 72 + 120) * 4),
    OK("split", I("f32(B,64)"), "axis=1 sizes=24,40", "f32(B,24) f32(B,40)", 0,
       (192 + 72 + 120) * 4),
    OK("split", I("f32(6,B)"), "axis=0 sizes=1,2,3", "f32(1,B) f32(2,B) f32(3,B)", 0,
       (18 + 3 + 6 + 9) * 4),
    OK("split", I("i32(B,4)"), "sizes=4", "i32(B,4)", 0, 96),
    ERR("split", I("f32(B,64)"), "axis=0 sizes=1,2", "cannot split 'a' (B,64) along the batch dim"),
    ERR("split", I("f32(B,64)"), "sizes=24,39",
        "attribute 'sizes' sums to 63 but 'a' (B,64) has 64 along axis 1"),
    ERR("split", I("f32(B,64)"), "sizes=0,64", "attribute 'sizes' has entry 0; sizes must be >= 1"),
    ERR("split", I("f32(B,64)"), "sizes=-4,68",
        "attribute 'sizes' has entry -4; sizes must be >= 1"),
    ERR("split", I("f32(B,64)"), "axis=2 sizes=64",
        "attribute 'axis' = 2 is out of range for rank 2 (valid: -2..1)"),
    ERR("split", I("f32()"), "sizes=1",
        "input 'a' has shape () (rank 0) but split needs rank at least 1"),

    // concat: sizes along the axis add up (batch factor included); any dtype, all the same
    OK("concat", I("f32(B,4)", "f32(B,6)"), NULL, "f32(B,10)", 0, (12 + 18 + 30) * 4),
    OK("concat", I("f32(2,B,3)", "f32(2,B,3)", "f32(2,B,3)"), "axis=0", "f32(6,B,3)", 0,
       (18 * 3 + 54) * 4),
    OK("concat", I("f32(B,4)"), NULL, "f32(B,4)", 0, 96),
    OK("concat", I("i32(B,2)", "i32(B,3)"), "axis=-1", "i32(B,5)", 0, (6 + 9 + 15) * 4),
    OK("concat", I("f32(B,4)", "f32(B*2,4)"), "axis=0", "f32(B*3,4)", 0, (12 + 24 + 36) * 4),
    ERR("concat", I("f32(B,4)", "f32(4,4)"), "axis=0",
        "input 'b' has shape (4,4) but concat along axis 0 needs it to match 'a' (B,4) elsewhere"),
    ERR("concat", I("f32(B,4)", "f32(B,5,1)"), NULL,
        "input 'b' has shape (B,5,1) but concat along axis 1 needs it to match 'a' (B,4) "
        "elsewhere"),
    ERR("concat", I("f32(B,4)", "f32(B,4)", "f32(3,4)"), NULL,
        "input 'c' has shape (3,4) but concat along axis 1 needs it to match 'a' (B,4) elsewhere"),
    ERR("concat", I("f32(B,4)", "bf16(B,4)"), NULL,
        "input 'b' has dtype bf16 but input 'a' has dtype f32; concat needs equal dtypes"),
    ERR("concat", I("f32(B,4)", "f32(B,4)"), "axis=2",
        "attribute 'axis' = 2 is out of range for rank 2 (valid: -2..1)"),

    // causal_self_attention: 4·B·T²·C + 5·B·n_head·T² (bytes: see the BUG note at layernorm)
    OK("causal_self_attention", I("f32(B,5,24)"), "n_head=2", "f32(B,5,8)",
       4.0 * 3 * 25 * 8 + 5.0 * 3 * 2 * 25, (360 + 120) * 4),
    OK("causal_self_attention", I("bf16(B,5,24)"), "n_head=1", "bf16(B,5,8)",
       4.0 * 3 * 25 * 8 + 5.0 * 3 * 1 * 25, (360 + 120) * 2),
    ERR("causal_self_attention", I("f32(B,5,25)"), "n_head=1",
        "input 'a' has shape (B,5,25) but causal_self_attention needs (B,T,3*C) with q,k,v packed"),
    ERR("causal_self_attention", I("f32(B,5,24)"), "n_head=3",
        "attribute 'n_head' = 3 must be >= 1 and divide C = 8"),
    ERR("causal_self_attention", I("f32(B,5,24)"), "n_head=0",
        "attribute 'n_head' = 0 must be >= 1 and divide C = 8"),
    ERR("causal_self_attention", I("f32(B,24)"), "n_head=1",
        "input 'a' has shape (B,24) (rank 2) but causal_self_attention needs rank 3"),
    ERR("causal_self_attention", I("i32(B,5,24)"), "n_head=1",
        "input 'a' has dtype i32 but causal_self_attention needs a floating-point tensor"),
    // causal_self_attention with n_kv_head (grouped-query: (B,T,C+2*Ckv)) and causal: the same
    // cost; n_kv_head given equal to n_head is the multi-head form
    OK("causal_self_attention", I("f32(B,5,16)"), "n_head=4 n_kv_head=2", "f32(B,5,8)",
       4.0 * 3 * 25 * 8 + 5.0 * 3 * 4 * 25, (240 + 120) * 4),
    OK("causal_self_attention", I("f32(B,5,12)"), "n_head=4 n_kv_head=1 causal=false", "f32(B,5,8)",
       4.0 * 3 * 25 * 8 + 5.0 * 3 * 4 * 25, (180 + 120) * 4),
    OK("causal_self_attention", I("f32(B,5,24)"), "n_head=2 n_kv_head=2 causal=false", "f32(B,5,8)",
       4.0 * 3 * 25 * 8 + 5.0 * 3 * 2 * 25, (360 + 120) * 4),
    ERR("causal_self_attention", I("f32(B,5,20)"), "n_head=4 n_kv_head=3",
        "attribute 'n_kv_head' = 3 must be >= 1 and divide n_head = 4"),
    ERR("causal_self_attention", I("f32(B,5,20)"), "n_head=4 n_kv_head=8",
        "attribute 'n_kv_head' = 8 must be >= 1 and divide n_head = 4"),
    ERR("causal_self_attention", I("f32(B,5,16)"), "n_head=4 n_kv_head=0",
        "attribute 'n_kv_head' = 0 must be >= 1 and divide n_head = 4"),
    ERR("causal_self_attention", I("f32(B,5,16)"), "n_head=0 n_kv_head=1",
        "attribute 'n_head' = 0 must be >= 1"),
    ERR("causal_self_attention", I("f32(B,5,17)"), "n_head=4 n_kv_head=2",
        "input 'a' has shape (B,5,17) but causal_self_attention with n_head = 4 and n_kv_head = 2 "
        "needs (B,T,C+2*Ckv), a multiple of 8 head dims"),
    ERR("causal_self_attention", I("f32(B,5,20)"), "n_head=4 n_kv_head=2",
        "input 'a' has shape (B,5,20) but causal_self_attention with n_head = 4 and n_kv_head = 2 "
        "needs (B,T,C+2*Ckv), a multiple of 8 head dims"),
    // attention: separate q (B,T,C), k and v (B,T,Ckv); causal_self_attention's cost
    OK("attention", I("f32(B,5,8)", "f32(B,5,4)", "f32(B,5,4)"), "n_head=4 n_kv_head=2",
       "f32(B,5,8)", 4.0 * 3 * 25 * 8 + 5.0 * 3 * 4 * 25, (120 + 60 + 60 + 120) * 4),
    OK("attention", I("bf16(B,5,8)", "bf16(B,5,8)", "bf16(B,5,8)"), "n_head=2 causal=false",
       "bf16(B,5,8)", 4.0 * 3 * 25 * 8 + 5.0 * 3 * 2 * 25, (4 * 120) * 2),
    ERR("attention", I("f32(B,5,8)", "f32(B,5,4)", "f32(B,5,4)"), "n_head=4 n_kv_head=3",
        "attribute 'n_kv_head' = 3 must be >= 1 and divide n_head = 4"),
    ERR("attention", I("f32(B,5,8)", "f32(B,5,4)", "f32(B,5,4)"), "n_head=4 n_kv_head=0",
        "attribute 'n_kv_head' = 0 must be >= 1 and divide n_head = 4"),
    ERR("attention", I("f32(B,5,8)", "f32(B,5,4)", "f32(B,5,4)"), "n_head=3",
        "attribute 'n_head' = 3 must be >= 1 and divide C = 8"),
    ERR("attention", I("f32(B,5,8)", "f32(B,5,6)", "f32(B,5,4)"), "n_head=4 n_kv_head=2",
        "input 'b' has shape (B,5,6) but attention with n_head = 4 and n_kv_head = 2 needs "
        "(B,5,4) (n_kv_head * C/n_head, q's B and T)"),
    ERR("attention", I("f32(B,5,8)", "f32(B,5,4)", "f32(B,4,4)"), "n_head=4 n_kv_head=2",
        "input 'c' has shape (B,4,4) but attention with n_head = 4 and n_kv_head = 2 needs "
        "(B,5,4) (n_kv_head * C/n_head, q's B and T)"),
    ERR("attention", I("f32(B,5,8)", "f32(B,5,8)", "f32(B,5,8)"), "n_head=4 n_kv_head=2",
        "input 'b' has shape (B,5,8) but attention with n_head = 4 and n_kv_head = 2 needs "
        "(B,5,4) (n_kv_head * C/n_head, q's B and T)"),
    ERR("attention", I("f32(B,5,8)", "f32(B,5,4)", "bf16(B,5,4)"), "n_head=4 n_kv_head=2",
        "input 'c' has dtype bf16 but input 'a' has dtype f32; attention needs equal dtypes"),

    // rope: 3n; x rank 4 with a static, even head dim and a static position dim (seq_axis)
    OK("rope", I("f32(B,5,2,8)"), NULL, "f32(B,5,2,8)", 3.0 * 240, (240 + 240) * 4),
    OK("rope", I("bf16(B,2,5,8)"), "pairing=interleaved seq_axis=2 theta=500000", "bf16(B,2,5,8)",
       3.0 * 240, (240 + 240) * 2),
    OK("rope", I("f32(4,6,2,2)"), "theta=1", "f32(4,6,2,2)", 3.0 * 96, (96 + 96) * 4),
    OK("rope", I("f32(B*2,6,1,4)"), NULL, "f32(B*2,6,1,4)", 3.0 * 144, (144 + 144) * 4),
    ERR("rope", I("f32(B,5,2,7)"), NULL,
        "input 'a' has shape (B,5,2,7) but rope needs an even head dim (the last), got 7"),
    ERR("rope", I("f32(B,5,1,1)"), "pairing=interleaved",
        "input 'a' has shape (B,5,1,1) but rope needs an even head dim (the last), got 1"),
    ERR("rope", I("f32(B,5,16)"), NULL,
        "input 'a' has shape (B,5,16) (rank 3) but rope needs rank 4"),
    ERR("rope", I("f32(B,5,2,2,4)"), NULL,
        "input 'a' has shape (B,5,2,2,4) (rank 5) but rope needs rank 4"),
    ERR("rope", I("i32(B,5,2,8)"), NULL,
        "input 'a' has dtype i32 but rope needs a floating-point tensor"),
    ERR("rope", I("f32(2,B,2,8)"), NULL,
        "input 'a' has shape (2,B,2,8) but rope needs a static position dim (dim 1)"),
    ERR("rope", I("f32(2,2,B,8)"), "seq_axis=2",
        "input 'a' has shape (2,2,B,8) but rope needs a static position dim (dim 2)"),
    ERR("rope", I("f32(2,5,2,B)"), NULL,
        "input 'a' has shape (2,5,2,B) but rope needs a static head dim (dim 3)"),
    ERR("rope", I("f32(B,5,2,8)"), "seq_axis=3",
        "attribute 'seq_axis' = 3 must be 1 (x (B,T,H,D)) or 2 (x (B,H,T,D))"),
    ERR("rope", I("f32(B,5,2,8)"), "seq_axis=-3",
        "attribute 'seq_axis' = -3 must be 1 (x (B,T,H,D)) or 2 (x (B,H,T,D))"),
    ERR("rope", I("f32(B,5,2,8)"), "theta=0",
        "attribute 'theta' must be > 0 and fit an f32, got 0"),
    ERR("rope", I("f32(B,5,2,8)"), "theta=-10000",
        "attribute 'theta' must be > 0 and fit an f32, got -10000"),
    ERR("rope", I("f32(B,5,2,8)"), "theta=1e39",
        "attribute 'theta' must be > 0 and fit an f32, got 1e+39"),

    // cross_entropy: 4·rows·V; scalar of the logits' dtype
    OK("cross_entropy", I("f32(B,5,10)", "i32(B,5)"), NULL, "f32()", 4.0 * 15 * 10,
       (150 + 15 + 1) * 4),
    OK("cross_entropy", I("bf16(B,10)", "i32(B)"), NULL, "bf16()", 4.0 * 3 * 10,
       30 * 2 + 3 * 4 + 2),
    ERR("cross_entropy", I("f32(B,5,10)", "f32(B,5)"), NULL,
        "input 'b' has dtype f32 but cross_entropy needs i32 class indices"),
    ERR("cross_entropy", I("f32(B,5,10)", "i32(B,4)"), NULL,
        "input 'b' has shape (B,4) but cross_entropy needs (B,5) (the logits' shape without the "
        "class dim)"),
    ERR("cross_entropy", I("f32(B,10)", "i32(B,10)"), NULL,
        "input 'b' has shape (B,10) but cross_entropy needs (B) (the logits' shape without the "
        "class dim)"),
    ERR("cross_entropy", I("i32(B,10)", "i32(B)"), NULL,
        "input 'a' has dtype i32 but cross_entropy needs a floating-point tensor"),
    ERR("cross_entropy", I("f32()", "i32()"), NULL,
        "input 'a' has shape () (rank 0) but cross_entropy needs rank at least 1"),

    // mse_loss: 3·N
    OK("mse_loss", I("f32(B,4)", "f32(B,4)"), NULL, "f32()", 36, (12 + 12 + 1) * 4),
    OK("mse_loss", I("f16(B,2,2)", "f16(B,2,2)"), NULL, "f16()", 36, (12 + 12 + 1) * 2),
    ERR("mse_loss", I("f32(B,4)", "f32(B,5)"), NULL,
        "input 'b' has shape (B,5) but mse_loss needs (B,4) (the shape of 'a')"),
    ERR("mse_loss", I("f32(B,4)", "f32(4,B)"), NULL,
        "input 'b' has shape (4,B) but mse_loss needs (B,4) (the shape of 'a')"),
    ERR("mse_loss", I("f32(B,4)", "bf16(B,4)"), NULL,
        "input 'b' has dtype bf16 but input 'a' has dtype f32; mse_loss needs equal dtypes"),
    ERR("mse_loss", I("i32(B,4)", "i32(B,4)"), NULL,
        "input 'a' has dtype i32 but mse_loss needs a floating-point tensor"),
};

enum { NCASES = (int)(sizeof cases / sizeof cases[0]) };

// "f32(B,4,5)", "i32()", "bf16(B*4,6)" -> dtype and shape.
static void parse_type(const char *spec, DType *dt, Shape *s) {
  char name[16];
  const char *p = strchr(spec, '(');
  ck_assert_msg(p && (size_t)(p - spec) < sizeof name, "bad type spec '%s'", spec);
  memcpy(name, spec, (size_t)(p - spec));
  name[p - spec] = 0;
  ck_assert_msg(dtype_parse(name, dt), "bad dtype in '%s'", spec);
  s->rank = 0;
  p++;
  while (*p && *p != ')') {
    ck_assert_int_lt(s->rank, MAX_RANK);
    Dim d = {1, 0};
    if (*p == 'B') {
      d.b = 1;
      p++;
      if (*p == '*') d.n = strtoll(p + 1, (char **)&p, 10);
    } else {
      d.n = strtoll(p, (char **)&p, 10);
    }
    s->d[s->rank++] = d;
    if (*p == ',') p++;
  }
}

// Applies "name=value ..." to n's attributes (after the defaults), as expand would.
static void set_attrs(Graph *g, Node *n, const char *spec) {
  const OpDef *op = n->op;
  for (int i = 0; i < op->nattrs; i++) {
    n->attrs[i].i = op->attrs[i].def_i;
    n->attrs[i].f = op->attrs[i].def_f;
  }
  if (!spec) return;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec);
  char *save;
  for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
    char *eq = strchr(t, '=');
    ck_assert_ptr_nonnull(eq);
    *eq = 0;
    const char *v = eq + 1;
    int k = op_attr_index(op, t);
    ck_assert_msg(k >= 0, "%s has no attribute '%s'", op->name, t);
    AttrValue *av = &n->attrs[k];
    av->present = true;
    switch (op->attrs[k].type) {
    case ATTR_BOOL:
      av->i = strcmp(v, "true") == 0;
      break;
    case ATTR_INT:
      av->i = strtoll(v, NULL, 10);
      break;
    case ATTR_FLOAT:
      av->f = strtod(v, NULL);
      break;
    case ATTR_ENUM:
      av->i = -1;
      for (int c = 0; op->attrs[k].choices[c]; c++)
        if (strcmp(op->attrs[k].choices[c], v) == 0) av->i = c;
      ck_assert_msg(av->i >= 0, "%s.%s: no choice '%s'", op->name, t, v);
      break;
    case ATTR_INTS:
    case ATTR_SHAPE: {
      int cnt = *v ? 1 : 0;
      for (const char *c = v; *c; c++) cnt += *c == ',';
      av->count = cnt;
      av->ints = ARENA_ARRAY(g->arena, int64_t, cnt + 1);
      av->dims = ARENA_ARRAY(g->arena, Dim, cnt + 1);
      const char *p = v;
      for (int i = 0; i < cnt; i++) {
        if (*p == 'B') {
          av->dims[i] = (Dim){1, 1};
          p++;
          if (*p == '*') av->dims[i].n = strtoll(p + 1, (char **)&p, 10);
        } else {
          av->ints[i] = strtoll(p, (char **)&p, 10);
          av->dims[i] = (Dim){av->ints[i], 0};
        }
        if (*p == ',') p++;
      }
      break;
    }
    }
  }
}

// Builds graph g with one node "n" (path nodes[0], at 7:3) of c->op reading inputs a, b, ...
static Node *build_case(Graph *g, const OpCase *c) {
  const OpDef *op = op_find(c->op);
  ck_assert_msg(op != NULL, "no op '%s'", c->op);
  int nin = 0;
  while (nin < 5 && c->in[nin]) nin++;
  for (int i = 0; i < nin; i++) {
    char *name = arena_printf(g->arena, "%c", 'a' + i);
    Tensor *t = graph_add_tensor(g, name, T_INPUT);
    parse_type(c->in[i], &t->dtype, &t->shape);
  }
  Node *n = graph_add_node(g, "n", op, nin, op->nout ? op->nout + op->nhidden : 1);
  n->path = "nodes[0]";
  n->loc = (Loc){7, 3};
  for (int i = 0; i < nin; i++) n->in[i] = g->tensors[i];
  set_attrs(g, n, c->attrs);
  int visible = op->nout ? op->nout : op->count_outputs(n);
  ck_assert_int_ge(visible, 1);
  n->nout = visible + op->nhidden;
  n->out = ARENA_ARRAY(g->arena, Tensor *, n->nout);
  for (int k = 0; k < n->nout; k++) {
    const char *name = k >= visible   ? arena_printf(g->arena, "n:%s", op->hidden[k - visible])
                       : visible == 1 ? "n"
                                      : arena_printf(g->arena, "n:%d", k);
    Tensor *t = graph_add_tensor(g, name, T_ACT);
    t->producer = n;
    t->out_index = k;
    t->hidden = k >= visible;
    n->out[k] = t;
  }
  graph_link_uses(g);
  return n;
}

static void case_text(char *buf, size_t cap, const OpCase *c) {
  int o = snprintf(buf, cap, "%s(", c->op);
  for (int i = 0; i < 5 && c->in[i]; i++)
    o += snprintf(buf + o, cap - (size_t)o, "%s%s", i ? ", " : "", c->in[i]);
  snprintf(buf + o, cap - (size_t)o, ")%s%s", c->attrs ? " " : "", c->attrs ? c->attrs : "");
}

START_TEST(test_op_case) {
  const OpCase *c = &cases[_i];
  char what[512];
  case_text(what, sizeof what, c);
  Arena a;
  arena_init(&a);
  Graph g;
  graph_init(&g, &a);
  Capture cap;
  cap_open(&cap, "m.json");
  Node *n = build_case(&g, c);
  bool ok = n->op->infer(&g, n, &cap.d);
  char got[1024] = "", want[1024] = "";
  const char *text = cap_text(&cap);
  bool pass;
  if (c->out) {
    int visible = node_visible_outputs(n);
    for (int k = 0; k < visible; k++) {
      char t[300];
      size_t len = strlen(got);
      snprintf(got + len, sizeof got - len, "%s%s", k ? " " : "",
               type_str(t, sizeof t, &g, n->out[k]));
    }
    OpCost cost = {-1, -1};
    if (ok) n->op->cost(n, BATCH, &cost);
    pass = ok && !*text && strcmp(got, c->out) == 0 && cost.flops == c->flops &&
           cost.bytes == c->bytes;
    snprintf(want, sizeof want, "%s", text);
    if (!pass) {
      cap_close(&cap);
      arena_free(&a);
      ck_abort_msg(
          "%s: ok=%d outputs '%s' (want '%s'), flops %.0f (want %.0f), bytes %.0f (want %.0f) %s",
          what, ok, got, c->out, cost.flops, c->flops, cost.bytes, c->bytes, want);
    }
  } else {
    snprintf(want, sizeof want, "m.json:7:3: error: nodes[0] \"n\": %s\n", c->err);
    snprintf(got, sizeof got, "%s", text);
    pass = !ok && strcmp(got, want) == 0 && cap.d.errors == 1;
    if (!pass) {
      cap_close(&cap);
      arena_free(&a);
      ck_abort_msg("%s: ok=%d\n  got:  %s\n  want: %s", what, ok, got, want);
    }
  }
  cap_close(&cap);
  arena_free(&a);
}
END_TEST

// Every op a model may use has at least one passing and one failing case in the table.
START_TEST(test_cases_cover_every_op) {
  for (int i = 0; i < op_count(); i++) {
    const OpDef *op = op_at(i);
    if (op->internal) continue;
    int good = 0, bad = 0;
    for (int k = 0; k < NCASES; k++)
      if (strcmp(cases[k].op, op->name) == 0) {
        good += cases[k].out != NULL;
        bad += cases[k].out == NULL;
      }
    ck_assert_msg(good >= 1 && bad >= 1, "op '%s' has %d passing and %d failing cases", op->name,
                  good, bad);
  }
}
END_TEST

// Defaults are applied before the rule runs: matmul without attributes is not transposed, split
// and softmax use the last axis, layernorm's eps is 1e-5 (PyTorch's LayerNorm), rms_norm's 1e-6
// (Hugging Face's LlamaRMSNorm; PyTorch's RMSNorm defaults to the dtype's epsilon).
START_TEST(test_attr_defaults) {
  const OpDef *op = op_find("layernorm");
  int k = op_attr_index(op, "eps");
  ck_assert_int_ge(k, 0);
  ck_assert(!op->attrs[k].required);
  ck_assert(op->attrs[k].def_f == 1e-5);
  op = op_find("rms_norm");
  k = op_attr_index(op, "eps");
  ck_assert_int_eq(k, 0); // kargs_layernorm, which rms_norm shares, reads eps as attribute 0
  ck_assert(!op->attrs[k].required);
  ck_assert(op->attrs[k].def_f == 1e-6);
  op = op_find("softmax");
  ck_assert_int_eq(op->attrs[op_attr_index(op, "axis")].def_i, -1);
  op = op_find("split");
  ck_assert_int_eq(op->attrs[op_attr_index(op, "axis")].def_i, -1);
  ck_assert(op->attrs[op_attr_index(op, "sizes")].required);
  op = op_find("matmul");
  ck_assert_int_eq(op->attrs[op_attr_index(op, "transpose_a")].def_i, 0);
  ck_assert_int_eq(op->attrs[op_attr_index(op, "transpose_b")].def_i, 0);
  ck_assert(op_find("scale")->attrs[0].required);
  ck_assert(op_find("reshape")->attrs[0].required);
  ck_assert(op_find("causal_self_attention")->attrs[0].required);
  // causal_self_attention: kargs_attention reads n_kv_head and causal as attributes 1 and 2
  op = op_find("causal_self_attention");
  ck_assert_int_eq(op_attr_index(op, "n_kv_head"), 1);
  ck_assert_int_eq(op_attr_index(op, "causal"), 2);
  ck_assert_int_eq(op->attrs[2].def_i, 1);
  // rope: Llama's theta, Hugging Face's pairing, (B,T,H,D); kargs_rope reads them as attributes
  // 0, 1, 2
  op = op_find("rope");
  ck_assert_int_eq(op_attr_index(op, "theta"), 0);
  ck_assert_int_eq(op_attr_index(op, "pairing"), 1);
  ck_assert_int_eq(op_attr_index(op, "seq_axis"), 2);
  ck_assert(op->attrs[0].def_f == 10000.0);
  ck_assert_str_eq(op->attrs[1].choices[op->attrs[1].def_i], "half");
  ck_assert_str_eq(op->attrs[1].choices[1], "interleaved");
  ck_assert_int_eq(op->attrs[2].def_i, 1);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// The worked example of docs/ops.md: samples/gpt_char.json, f32, B = 1 (attention bytes: see the
// BUG note at the layernorm cases)

START_TEST(test_worked_example) {
  char *text = read_text("samples/gpt_char.json");
  Model m;
  // model_run takes single-quoted JSON; the sample has no single quotes, so it passes unchanged.
  ck_assert_ptr_null(strchr(text, '\''));
  bool ok = model_run(&m, text);
  free(text);
  if (!ok) {
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", cap_text(&m.cap));
    model_free(&m);
    ck_abort_msg("gpt_char.json does not check: %s", msg);
  }
  static const struct {
    const char *node;
    double flops, bytes;
  } rows[] = {
      {"transformer.h.0.attn.c_attn", 6291456, 327680},
      {"transformer.h.0.attn", 2179072, 131072},
      {"transformer.h.0.mlp.gelu", 262144, 262144},
      {"loss", 16640, 16900},
  };
  char fail[1024] = "";
  for (int i = 0; i < 4; i++) {
    const Node *n = strmap_get(&m.g.node_names, rows[i].node);
    if (!n) {
      snprintf(fail + strlen(fail), sizeof fail - strlen(fail), "no node %s; ", rows[i].node);
      continue;
    }
    OpCost c = {0, 0};
    n->op->cost(n, 1, &c);
    if (c.flops != rows[i].flops || c.bytes != rows[i].bytes)
      snprintf(fail + strlen(fail), sizeof fail - strlen(fail),
               "%s: flops %.0f bytes %.0f, docs say %.0f and %.0f; ", rows[i].node, c.flops,
               c.bytes, rows[i].flops, rows[i].bytes);
  }
  model_free(&m);
  ck_assert_msg(!*fail, "%s", fail);
}
END_TEST

static Suite *ops_suite(void) {
  Suite *s = suite_create("ops");
  TCase *reg = tcase_create("registry");
  tcase_add_loop_test(reg, test_registry_row, 0, op_count());
  tcase_add_test(reg, test_registry_lookup);
  tcase_add_test(reg, test_registry_matches_docs);
  tcase_add_test(reg, test_attr_defaults);
  tcase_add_test(reg, test_registry_kernels_have_cuda_twins);
  suite_add_tcase(s, reg);
  TCase *rules = tcase_create("rules");
  tcase_add_loop_test(rules, test_op_case, 0, NCASES);
  tcase_add_test(rules, test_cases_cover_every_op);
  tcase_add_test(rules, test_worked_example);
  suite_add_tcase(s, rules);
  return s;
}

int main(void) {
  return run_suite(ops_suite());
}

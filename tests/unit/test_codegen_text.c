// Unit tests of codegen's text layout (wrap.c: lines within 100 columns) and of what a loop over
// repeat-block instances calls its operands (loop_names.c), on made-up names and statements.
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../../codegen/emit.h"

typedef struct Out {
  Arena a;
  E e;
  char *buf;
  size_t len;
} Out;

static void out_open(Out *o) {
  memset(o, 0, sizeof *o);
  arena_init(&o->a);
  o->e.a = &o->a;
  o->e.f = open_memstream(&o->buf, &o->len);
}

// The text printed (the arena freed; the caller frees the result).
static char *out_close(Out *o) {
  fclose(o->e.f);
  arena_free(&o->a);
  return o->buf;
}

static void name(const char *const *names, int count, LoopInfo li, const char *comment,
                 const char *ident) {
  Out o;
  out_open(&o);
  LoopName r;
  loop_name(&o.e, names, count, &li, NULL, &r);
  ck_assert_str_eq(r.comment, comment);
  ck_assert_str_eq(r.ident, ident);
  free(out_close(&o));
}

START_TEST(test_loop_names) {
  LoopInfo up = {"transformer.h.", 0, 1}, down = {"transformer.h.", 1, -1};
  const char *a[] = {"transformer.h.0.ln_1", "transformer.h.1.ln_1", "transformer.h.2.ln_1"};
  name(a, 3, up, "transformer.h[l].ln_1", "l_ln_1");
  const char *b[] = {"d:transformer.h.1.resid_1@transformer.h.1.ln_2#0",
                     "d:transformer.h.0.resid_1@transformer.h.0.ln_2#0"};
  name(b, 2, down, "d:transformer.h[1 - l].resid_1@transformer.h[1 - l].ln_2#0",
       "dl_resid_1_ln_2_0");
  // The first instance reads another tensor: the others' pattern, the exception beside it.
  const char *c[] = {"transformer.emb", "transformer.h.0.out", "transformer.h.1.out"};
  name(c, 3, up, "transformer.h[l - 1].out (l = 0: transformer.emb)", "l_prev_out");
  // Two that differ: each with its l, the identifier the first's less its instance number.
  const char *d[] = {"transformer.h.0.out", "transformer.emb"};
  name(d, 2, down, "transformer.h.0.out (l = 0), transformer.emb (l = 1)", "l_prev_out");
  // Model strings: the comment defused (no "*/"), the identifier letters, digits and '_'.
  const char *e[] = {"x.0.a*/b;system(\"x\")", "x.1.a*/b;system(\"x\")"};
  name(e, 2, (LoopInfo){"x.", 0, 1}, "x[l].a* /b;system(\"x\")", "l_a_b_system_x");
}
END_TEST

static void stmt(const char *indent, const char *s, const char *note, const char *want) {
  Out o;
  out_open(&o);
  out_stmt(&o.e, indent, s, note);
  char *got = out_close(&o);
  ck_assert_str_eq(got, want);
  free(got);
}

START_TEST(test_out_stmt) {
  stmt("  ", "f(a, b);", "n", "  f(a, b); // n\n");
  // 101 columns with the note: the note above.
  char s[120];
  snprintf(
      s, sizeof s, "f(%s);",
      "a2345678901234567890123456789012345678901234567890123456789012345678901234567890123456789");
  stmt(
      "  ", s, "note",
      "  // note\n  "
      "f(a2345678901234567890123456789012345678901234567890123456789012345678901234567890123456789)"
      ";\n");
  // A call broken between its arguments, aligned after its '(', never inside braces that fit.
  stmt("    ",
       "pr_add_n(dl_out, (const float *const[]){dl_a_long_name_one, dl_b_long_name_two}, /*k*/ 2, "
       "/*n*/ 24576);",
       "d:x[l].out:sum",
       "    pr_add_n(dl_out, (const float *const[]){dl_a_long_name_one, dl_b_long_name_two}, /*k*/ "
       "2,\n"
       "             /*n*/ 24576); // d:x[l].out:sum\n");
  // The note above when the last line has no room for it; an argument too wide for a line
  // broken between its braces' elements.
  stmt("  ",
       "pr_add_n(t170_d_transformer_emb, (const float "
       "*const[]){t168_d_transformer_emb_transformer_h_0_"
       "ln_1_0, t162_d_transformer_h_0_resid_1}, /*k*/ 2, /*n*/ 24576);",
       "d:transformer.emb:sum and a long note that does not fit",
       "  // d:transformer.emb:sum and a long note that does not fit\n"
       "  pr_add_n(t170_d_transformer_emb,\n"
       "           (const float *const[]){t168_d_transformer_emb_transformer_h_0_ln_1_0,\n"
       "           t162_d_transformer_h_0_resid_1}, /*k*/ 2, /*n*/ 24576);\n");
  // A declaration after its '='.
  stmt("    ",
       "float *dl_a_very_long_local_name_of_forty_chars = (float *)(acts + 2654208 - l * "
       "1376256 + "
       "slot * STRIDE_0);",
       NULL,
       "    float *dl_a_very_long_local_name_of_forty_chars =\n"
       "        (float *)(acts + 2654208 - l * 1376256 + slot * STRIDE_0);\n");
}
END_TEST

START_TEST(test_cstring_split) {
  Out o;
  out_open(&o);
  ck_assert_str_eq(cstring_split(&o.e, "a\nb\"\n", "  "), "\"a\\012\"\n  \"b\\\"\\012\"");
  free(out_close(&o));
}
END_TEST

int main(void) {
  Suite *s = suite_create("codegen_text");
  TCase *tc = tcase_create("text");
  tcase_add_test(tc, test_loop_names);
  tcase_add_test(tc, test_out_stmt);
  tcase_add_test(tc, test_cstring_split);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

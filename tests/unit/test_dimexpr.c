// Unit tests of dimension expressions (compiler/dimexpr.c): values, precedence, the batch factor
// rules, exact division, overflow at 2^53 and the exact text of every error message.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

// Names known to the test lookup. "B" is the batch symbol (as expand's lookup resolves it).
static int lookup_calls;
static char last_name[256];

static int lookup(void *ctx, const char *name, Dim *out, char *err, int errcap) {
  (void)ctx;
  lookup_calls++;
  snprintf(last_name, sizeof last_name, "%s", name);
  static const struct {
    const char *name;
    Dim v;
  } table[] = {
      {"B", {1, 1}},   {"C", {8, 0}},   {"H", {2, 0}},   {"T", {64, 0}},
      {"L", {3, 0}},   {"_u1", {5, 0}}, {"C2", {16, 0}}, {"BIG", {(int64_t)1 << 40, 0}},
      {"BT", {64, 1}}, // a name whose value already carries the batch factor
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcmp(table[i].name, name) == 0) {
      *out = table[i].v;
      return 1;
    }
  if (strcmp(name, "BAD") == 0) {
    snprintf(err, (size_t)errcap, "lookup failed for '%s'", name);
    return -1;
  }
  return 0;
}

static Dim eval_ok(const char *expr) {
  char err[512] = "";
  Dim d = {-7, -7};
  bool ok = dimexpr_eval(expr, lookup, NULL, &d, err, sizeof err);
  ck_assert_msg(ok, "'%s' failed: %s", expr, err);
  return d;
}

#define ASSERT_DIM(expr, n_, b_)                                                                   \
  do {                                                                                             \
    Dim d_ = eval_ok(expr);                                                                        \
    ck_assert_msg(d_.n == (n_) && d_.b == (b_), "'%s' = {%lld,%d}, expected {%lld,%d}", expr,      \
                  (long long)d_.n, d_.b, (long long)(n_), (b_));                                   \
  } while (0)

#define ASSERT_ERR(expr, msg)                                                                      \
  do {                                                                                             \
    char err_[512] = "";                                                                           \
    Dim d_ = {0, 0};                                                                               \
    ck_assert_msg(!dimexpr_eval(expr, lookup, NULL, &d_, err_, sizeof err_), "'%s' should fail",   \
                  expr);                                                                           \
    ck_assert_str_eq(err_, msg);                                                                   \
  } while (0)

START_TEST(test_integers) {
  ASSERT_DIM("1", 1, 0);
  ASSERT_DIM("42", 42, 0);
  ASSERT_DIM("007", 7, 0);
  ASSERT_DIM("  12  ", 12, 0);
  ASSERT_DIM("9007199254740992", (int64_t)1 << 53, 0); // 2^53 itself is allowed
  // 0 evaluates; the callers reject sizes below 1.
  ASSERT_DIM("0", 0, 0);
}
END_TEST

START_TEST(test_names) {
  lookup_calls = 0;
  ASSERT_DIM("C", 8, 0);
  ck_assert_int_eq(lookup_calls, 1);
  ck_assert_str_eq(last_name, "C");
  // An identifier is read whole: "C2" is one name, not C followed by 2.
  ASSERT_DIM("C2", 16, 0);
  ck_assert_str_eq(last_name, "C2");
  ASSERT_DIM("_u1", 5, 0);
  ASSERT_DIM("4*C", 32, 0);
  ASSERT_DIM("C/H", 4, 0);
  ASSERT_DIM("(L+1)*2", 8, 0);
}
END_TEST

START_TEST(test_precedence) {
  ASSERT_DIM("2+3*4", 14, 0);
  ASSERT_DIM("2*3+4", 10, 0);
  ASSERT_DIM("(2+3)*4", 20, 0);
  ASSERT_DIM("2*(3+4)*5", 70, 0);
  ASSERT_DIM("10-4-3", 3, 0); // left associative
  ASSERT_DIM("10-(4-3)", 9, 0);
  ASSERT_DIM("64/4/2", 8, 0); // left associative
  ASSERT_DIM("64/(4/2)", 32, 0);
  ASSERT_DIM("8/2*2", 8, 0); // (8/2)*2, not 8/(2*2)
  ASSERT_DIM("T/C*2", 16, 0);
  ASSERT_DIM("T/(C*2)", 4, 0);
  ASSERT_DIM("C-H*2", 4, 0);
  ASSERT_DIM("((C))", 8, 0);
  ASSERT_DIM(" 2 * ( C + 1 ) ", 18, 0);
  ASSERT_DIM("C+T/C-H", 14, 0);
  // Subtraction may go below 1 here; callers check the final size.
  ASSERT_DIM("2-5", -3, 0);
}
END_TEST

START_TEST(test_parens_nested) {
  char expr[1024];
  int depth = 200, o = 0;
  for (int i = 0; i < depth; i++) expr[o++] = '(';
  expr[o++] = 'C';
  for (int i = 0; i < depth; i++) expr[o++] = ')';
  expr[o] = 0;
  ASSERT_DIM(expr, 8, 0);
}
END_TEST

START_TEST(test_exact_division) {
  ASSERT_DIM("T/C", 8, 0);
  ASSERT_DIM("C*3/2", 12, 0);
  ASSERT_DIM("9007199254740992/9007199254740992", 1, 0);
  ASSERT_ERR("7/2", "division is not exact in dimension expression '7/2'");
  ASSERT_ERR("C/3", "division is not exact in dimension expression 'C/3'");
  // Exactness is checked at each step, left to right: 3/2 is inexact even though *2 would fix it.
  ASSERT_ERR("3/2*2", "division is not exact in dimension expression '3/2*2'");
  ASSERT_DIM("3*2/2", 3, 0);
}
END_TEST

START_TEST(test_division_by_zero) {
  ASSERT_ERR("4/0", "division by zero in dimension expression '4/0'");
  ASSERT_ERR("C/(H-2)", "division by zero in dimension expression 'C/(H-2)'");
  ASSERT_ERR("0/0", "division by zero in dimension expression '0/0'");
}
END_TEST

START_TEST(test_batch_factor) {
  ASSERT_DIM("B", 1, 1);
  ASSERT_DIM("B*T", 64, 1);
  ASSERT_DIM("T*B", 64, 1);
  ASSERT_DIM("2*B*3", 6, 1);
  ASSERT_DIM("(B*2)", 2, 1);
  ASSERT_DIM("B*T/2", 32, 1);
  ASSERT_DIM("B*C/H", 4, 1);
  ASSERT_DIM("BT", 64, 1);
  ASSERT_DIM("BT*2", 128, 1);
  ASSERT_DIM("B*9007199254740992", (int64_t)1 << 53, 1);
}
END_TEST

START_TEST(test_batch_added) {
  ASSERT_ERR("B+1", "the batch symbol may only multiply, in 'B+1'");
  ASSERT_ERR("1+B", "the batch symbol may only multiply, in '1+B'");
  ASSERT_ERR("B*2-2", "the batch symbol may only multiply, in 'B*2-2'");
  ASSERT_ERR("T-B*2", "the batch symbol may only multiply, in 'T-B*2'");
  ASSERT_ERR("(B+1)*2", "the batch symbol may only multiply, in '(B+1)*2'");
  ASSERT_ERR("B-B", "the batch symbol may only multiply, in 'B-B'");
}
END_TEST

START_TEST(test_batch_twice) {
  ASSERT_ERR("B*B", "batch symbol appears twice in a product in 'B*B'");
  ASSERT_ERR("B*(2*B)", "batch symbol appears twice in a product in 'B*(2*B)'");
  ASSERT_ERR("(B*T)*B", "batch symbol appears twice in a product in '(B*T)*B'");
  ASSERT_ERR("BT*B", "batch symbol appears twice in a product in 'BT*B'");
  ASSERT_ERR("T/B", "cannot divide by the batch symbol in 'T/B'");
  ASSERT_ERR("B/B", "cannot divide by the batch symbol in 'B/B'");
}
END_TEST

START_TEST(test_overflow) {
  ASSERT_ERR("9007199254740993", "number too large in dimension expression '9007199254740993'");
  ASSERT_ERR("99999999999999999999999",
             "number too large in dimension expression '99999999999999999999999'");
  ASSERT_ERR("BIG*BIG", "dimension expression 'BIG*BIG' overflows (more than 2^53)");
  ASSERT_ERR("9007199254740992*2",
             "dimension expression '9007199254740992*2' overflows (more than 2^53)");
  // 2^64 overflows int64 itself: still reported, not wrapped around.
  ASSERT_ERR("4294967296*4294967296",
             "dimension expression '4294967296*4294967296' overflows (more than 2^53)");
  ASSERT_ERR("9007199254740992+1",
             "dimension expression '9007199254740992+1' overflows (more than 2^53)");
  ASSERT_ERR("B*BIG*BIG", "dimension expression 'B*BIG*BIG' overflows (more than 2^53)");
  ASSERT_DIM("4503599627370496*2", (int64_t)1 << 53, 0);
  ASSERT_DIM("9007199254740991+1", (int64_t)1 << 53, 0);
}
END_TEST

START_TEST(test_unknown_name) {
  ASSERT_ERR("X", "unknown dim 'X'");
  ASSERT_ERR("X+1", "unknown dim 'X'");
  ASSERT_ERR("C*Y", "unknown dim 'Y'");
  ASSERT_ERR("Q*R", "unknown dim 'Q'"); // the first error wins
  ASSERT_ERR("b", "unknown dim 'b'");   // names are case-sensitive
  // A failing lookup's own message is passed through unchanged.
  ASSERT_ERR("1+BAD", "lookup failed for 'BAD'");
  ASSERT_ERR("BAD*X", "lookup failed for 'BAD'");
}
END_TEST

START_TEST(test_name_too_long) {
  char expr[200], want[400];
  memset(expr, 'a', 150);
  expr[150] = 0;
  snprintf(want, sizeof want, "name too long in dimension expression '%s'", expr);
  ASSERT_ERR(expr, want);
}
END_TEST

START_TEST(test_syntax_errors) {
  ASSERT_ERR("2*", "dimension expression '2*' ends early");
  ASSERT_ERR("C+", "dimension expression 'C+' ends early");
  ASSERT_ERR("C-", "dimension expression 'C-' ends early");
  ASSERT_ERR("", "dimension expression '' ends early");
  ASSERT_ERR("   ", "dimension expression '   ' ends early");
  ASSERT_ERR("(", "dimension expression '(' ends early");
  ASSERT_ERR("(C+1", "missing ')' in dimension expression '(C+1'");
  ASSERT_ERR("((C)", "missing ')' in dimension expression '((C)'");
  ASSERT_ERR("C+1)", "unexpected ')' in dimension expression 'C+1)'");
  ASSERT_ERR("2 $ 3", "unexpected '$' in dimension expression '2 $ 3'");
  ASSERT_ERR("2 3", "unexpected '3' in dimension expression '2 3'");
  ASSERT_ERR("C C", "unexpected 'C' in dimension expression 'C C'");
  ASSERT_ERR("*2", "unexpected '*' in dimension expression '*2'");
  ASSERT_ERR("2**3", "unexpected '*' in dimension expression '2**3'");
  ASSERT_ERR("-1", "unexpected '-' in dimension expression '-1'");
  ASSERT_ERR("C.5", "unexpected '.' in dimension expression 'C.5'");
  ASSERT_ERR("()", "unexpected ')' in dimension expression '()'");
  ASSERT_ERR("H.0", "unexpected '.' in dimension expression 'H.0'");
  ASSERT_ERR("h.0", "unknown dim 'h'"); // the name is looked up before the '.' is seen
}
END_TEST

START_TEST(test_error_buffer_truncated) {
  // A small buffer gets a truncated, NUL-terminated message and nothing is written past it.
  char buf[24];
  memset(buf, '#', sizeof buf);
  Dim d;
  ck_assert(!dimexpr_eval("division/by/zero/0", lookup, NULL, &d, buf, 16));
  ck_assert_int_eq((int)strlen(buf), 15);
  ck_assert_str_eq(buf, "unknown dim 'di");
  for (size_t i = 16; i < sizeof buf; i++) ck_assert_int_eq(buf[i], '#');
  memset(buf, '#', sizeof buf);
  ck_assert(!dimexpr_eval("7/2", lookup, NULL, &d, buf, 10));
  ck_assert_str_eq(buf, "division ");
  for (size_t i = 10; i < sizeof buf; i++) ck_assert_int_eq(buf[i], '#');
}
END_TEST

// Regression (dimexpr.c): parentheses recursed without a depth limit, so a long run of '(' in a
// dims string (a JSON string of a few MB is accepted) overflows the C stack and kills pipec with
// SIGSEGV instead of reporting an error. The evaluation runs in a child process so that this
// test fails cleanly instead of taking the whole test binary down.
START_TEST(test_deep_nesting_does_not_crash) {
  enum { DEPTH = 1000000 };
  char *expr = malloc(2 * DEPTH + 2);
  ck_assert_ptr_nonnull(expr);
  memset(expr, '(', DEPTH);
  expr[DEPTH] = '1';
  memset(expr + DEPTH + 1, ')', DEPTH);
  expr[2 * DEPTH + 1] = 0;
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    FILE *devnull = freopen("/dev/null", "w", stderr); // the sanitizer's crash report is noise here
    (void)devnull;
    char err[256];
    Dim d;
    bool ok = dimexpr_eval(expr, lookup, NULL, &d, err, sizeof err);
    free(expr);
    // Either outcome is acceptable: a value of 1, or an error such as "nested too deeply".
    _exit(ok ? (d.n == 1 ? 0 : 3) : (err[0] ? 0 : 4));
  }
  free(expr);
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st), "dimexpr_eval crashed (signal %d) on an expression nested %d deep",
                WIFSIGNALED(st) ? WTERMSIG(st) : 0, DEPTH);
  ck_assert_int_eq(WEXITSTATUS(st), 0);
}
END_TEST

static Suite *dimexpr_suite(void) {
  Suite *s = suite_create("dimexpr");
  TCase *tc = tcase_create("eval");
  tcase_add_test(tc, test_integers);
  tcase_add_test(tc, test_names);
  tcase_add_test(tc, test_precedence);
  tcase_add_test(tc, test_parens_nested);
  tcase_add_test(tc, test_exact_division);
  tcase_add_test(tc, test_division_by_zero);
  tcase_add_test(tc, test_batch_factor);
  tcase_add_test(tc, test_batch_added);
  tcase_add_test(tc, test_batch_twice);
  tcase_add_test(tc, test_overflow);
  tcase_add_test(tc, test_unknown_name);
  tcase_add_test(tc, test_name_too_long);
  tcase_add_test(tc, test_syntax_errors);
  tcase_add_test(tc, test_error_buffer_truncated);
  suite_add_tcase(s, tc);
  TCase *bug = tcase_create("regressions");
  tcase_add_test(bug, test_deep_nesting_does_not_crash);
  suite_add_tcase(s, bug);
  return s;
}

int main(void) {
  return run_suite(dimexpr_suite());
}

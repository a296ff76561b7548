// Unit tests of the diagnostics' source excerpt (ir/diag.c): the line under a message and the
// caret under its column with tabs, UTF-8 (two-byte, wide, combining, 4-byte), a column inside a
// character or past the end, control bytes and invalid UTF-8, long lines cut to a window, and the
// excerpt through source_parse (last line without a newline, CRLF, warnings, no position).
#include "testutil.h"

// diag_excerpt of (line, len, col) as a string (free it).
static char *excerpt_n(const char *line, size_t len, int col) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  ck_assert_ptr_nonnull(f);
  diag_excerpt(f, line, len, col);
  fclose(f);
  return buf;
}

static void expect(const char *line, int col, const char *want) {
  char *got = excerpt_n(line, strlen(line), col);
  ck_assert_str_eq(got, want);
  free(got);
}

START_TEST(test_ascii) {
  expect("{\"op\": \"lineer\"}", 8, "{\"op\": \"lineer\"}\n       ^\n");
  expect("x", 1, "x\n^\n");
  expect("", 1, "\n^\n"); // an empty line (an empty file, or the line after the last newline)
}
END_TEST

START_TEST(test_tabs_kept) {
  // Each tab before the column is a tab in the caret line, so it aligns at any tab width.
  expect("\t{\"a\":\t1}", 8, "\t{\"a\":\t1}\n\t     \t^\n");
  // A caret on a tab sits where the tab starts.
  expect("a\tb", 2, "a\tb\n ^\n");
}
END_TEST

START_TEST(test_utf8_before_column) {
  // The column counts bytes; the caret counts what the terminal shows.
  expect("{\"\xc3\xa9\": x}", 8, "{\"\xc3\xa9\": x}\n      ^\n");          // é: 2 bytes, 1 column
  expect("{\"\xe4\xb8\xad\": x}", 9, "{\"\xe4\xb8\xad\": x}\n       ^\n"); // 中: 3 bytes, 2 columns
  expect("\"e\xcc\x81\" x", 7, "\"e\xcc\x81\" x\n    ^\n");                // e + U+0301: 1 column
  expect("\xf0\x9f\x98\x80 x", 6, "\xf0\x9f\x98\x80 x\n   ^\n"); // 😀: 4 bytes, 2 columns
  expect("\xce\xb1\xce\xb2\xce\xb3=1", 7, "\xce\xb1\xce\xb2\xce\xb3=1\n   ^\n"); // αβγ
}
END_TEST

START_TEST(test_column_inside_character) {
  // A column on a continuation byte points at the character that holds it.
  expect("a\xc3\xa9z", 3, "a\xc3\xa9z\n ^\n");
  expect("a\xe4\xb8\xadz", 4, "a\xe4\xb8\xadz\n ^\n");
}
END_TEST

START_TEST(test_column_past_end) {
  expect("abc", 4, "abc\n   ^\n");  // just after the last character (end of file)
  expect("abc", 40, "abc\n   ^\n"); // clamped
  expect("abc", 0, "abc\n^\n");     // column unknown: the line start
}
END_TEST

START_TEST(test_control_and_invalid_bytes) {
  expect("a\xff"
         "b",
         3, "a?b\n  ^\n"); // invalid UTF-8: one '?' per byte
  expect("a\x01"
         "b",
         2, "a?b\n ^\n");                  // control byte
  expect("a\xe4\xb8z", 4, "a??z\n   ^\n"); // a cut-short sequence
  expect("a\xc0\xafz", 4, "a??z\n   ^\n"); // an overlong form
  expect("a\xc2\x85z", 4, "a?z\n  ^\n");   // a C1 control (U+0085)
  char nul[] = "a\0b";
  char *got = excerpt_n(nul, 3, 2);
  ck_assert_str_eq(got, "a?b\n ^\n");
  free(got);
}
END_TEST

// A 300-byte line of digits: a window of 100 columns, 40 left of the caret, "..." both sides.
START_TEST(test_long_line_window) {
  char line[301], want[512];
  for (int i = 0; i < 300; i++) line[i] = (char)('0' + i % 10);
  line[300] = 0;
  char *got = excerpt_n(line, 300, 150); // the caret on byte 149
  snprintf(want, sizeof want, "...%.94s...\n%43s^\n", line + 109, "");
  ck_assert_str_eq(got, want);
  ck_assert_int_eq((int)strcspn(got, "\n"), DIAG_EXCERPT_WIDTH); // ASCII: bytes = columns
  free(got);
  // Near the start: no "..." on the left.
  got = excerpt_n(line, 300, 11);
  snprintf(want, sizeof want, "%.97s...\n%10s^\n", line, "");
  ck_assert_str_eq(got, want);
  free(got);
  // Near the end: no "..." on the right, the rest of the line is shown.
  got = excerpt_n(line, 300, 290);
  snprintf(want, sizeof want, "...%s\n%43s^\n", line + 249, "");
  ck_assert_str_eq(got, want);
  free(got);
  // Exactly 100 columns: shown whole.
  line[100] = 0;
  got = excerpt_n(line, 100, 100);
  snprintf(want, sizeof want, "%s\n%99s^\n", line, "");
  ck_assert_str_eq(got, want);
  free(got);
}
END_TEST

// A long line of wide characters: the window counts columns, cuts between characters.
START_TEST(test_long_line_utf8) {
  char line[301 * 3 + 1] = "", want[1024] = "";
  for (int i = 0; i < 300; i++) strcat(line, "\xe4\xb8\xad"); // 中, 2 columns each
  char *got = excerpt_n(line, strlen(line), 3 * 150 + 2);     // inside the 151st
  // 20 characters (40 columns) left of the caret, 47 (94 columns) shown in all.
  snprintf(want, sizeof want, "...%.*s...\n%43s^\n", 47 * 3, line + 130 * 3, "");
  ck_assert_str_eq(got, want);
  free(got);
  // é (2 bytes, 1 column): a 200-character line is 400 bytes but 200 columns: a window.
  char e2[401] = "";
  for (int i = 0; i < 200; i++) strcat(e2, "\xc3\xa9");
  got = excerpt_n(e2, 400, 2 * 120 + 1); // the 121st
  snprintf(want, sizeof want, "...%.*s...\n%43s^\n", 94 * 2, e2 + 80 * 2, "");
  ck_assert_str_eq(got, want);
  free(got);
  // 90 é: 180 bytes, 90 columns: shown whole (the width decides, not the bytes).
  e2[180] = 0;
  got = excerpt_n(e2, 180, 2 * 89 + 1);
  snprintf(want, sizeof want, "%s\n%89s^\n", e2, "");
  ck_assert_str_eq(got, want);
  free(got);
}
END_TEST

// Through source_parse and diag_error, as the driver prints them.
typedef struct Doc {
  Arena a;
  Source s;
  Capture cap;
} Doc;

static const char *parse_text(Doc *doc, const char *text, bool excerpts) {
  arena_init(&doc->a);
  cap_open(&doc->cap, "m.json");
  doc->cap.d.excerpts = excerpts;
  source_parse(&doc->s, &doc->a, "m.json", text, strlen(text), &doc->cap.d);
  return cap_text(&doc->cap);
}

static void doc_free(Doc *doc) {
  source_free(&doc->s);
  arena_free(&doc->a);
  cap_close(&doc->cap);
}

START_TEST(test_source_last_line_without_newline) {
  Doc doc;
  ck_assert_str_eq(parse_text(&doc, "{\"a\": 1,\n \"b\": tru}", true),
                   "m.json:2:7: error: JSON syntax error: unexpected 't'\n"
                   " \"b\": tru}\n"
                   "      ^\n");
  doc_free(&doc);
  // The end of a file without a final newline: the caret after the last character.
  ck_assert_str_eq(parse_text(&doc, "{\"a\": [1,\n  2", true),
                   "m.json:2:4: error: JSON syntax error: unexpected end of file (unclosed '{', "
                   "'[' or string?)\n"
                   "  2\n"
                   "   ^\n");
  doc_free(&doc);
}
END_TEST

START_TEST(test_source_crlf_and_tabs) {
  Doc doc;
  ck_assert_str_eq(parse_text(&doc, "{\r\n\t\"a\" 1\r\n}\r\n", true),
                   "m.json:2:6: error: JSON syntax error: unexpected '1'\n"
                   "\t\"a\" 1\n"
                   "\t    ^\n");
  doc_free(&doc);
}
END_TEST

START_TEST(test_source_utf8_key) {
  Doc doc;
  ck_assert_str_eq(parse_text(&doc, "{\"\xc3\xa9t\xc3\xa9\": 01}", true),
                   "m.json:1:11: error: JSON syntax error: numbers must not have leading zeros "
                   "(got '01')\n"
                   "{\"\xc3\xa9t\xc3\xa9\": 01}\n"
                   "        ^\n");
  doc_free(&doc);
}
END_TEST

START_TEST(test_source_messages) {
  Doc doc;
  parse_text(&doc, "{\"a\": 1,\n \"b\": 2}", true);
  ck_assert_str_eq(cap_text(&doc.cap), "");
  Diag *d = &doc.cap.d;
  diag_warning(d, source_loc(&doc.s, cJSON_GetObjectItem(doc.s.root, "b")), "b: a warning");
  diag_error(d, (Loc){0, 0}, "training: no position, no excerpt");
  diag_error(d, (Loc){9, 1}, "a line past the end: no excerpt");
  diag_error(d, (Loc){1, 30}, "a column past the line: no excerpt");
  ck_assert_str_eq(cap_text(&doc.cap), "m.json:2:2: warning: b: a warning\n"
                                       " \"b\": 2}\n"
                                       " ^\n"
                                       "m.json: error: training: no position, no excerpt\n"
                                       "m.json:9:1: error: a line past the end: no excerpt\n"
                                       "m.json:1:30: error: a column past the line: no excerpt\n");
  ck_assert_int_eq(d->errors, 3);
  ck_assert_int_eq(d->warnings, 1);
  doc_free(&doc);
  // Excerpts off (the unit tests' default): the bare message.
  ck_assert_str_eq(parse_text(&doc, "[1,]", false),
                   "m.json:1:4: error: JSON syntax error: unexpected ']' (trailing comma before "
                   "it)\n");
  doc_free(&doc);
}
END_TEST

static Suite *diag_suite(void) {
  Suite *s = suite_create("diag");
  TCase *tc = tcase_create("excerpt");
  tcase_add_test(tc, test_ascii);
  tcase_add_test(tc, test_tabs_kept);
  tcase_add_test(tc, test_utf8_before_column);
  tcase_add_test(tc, test_column_inside_character);
  tcase_add_test(tc, test_column_past_end);
  tcase_add_test(tc, test_control_and_invalid_bytes);
  tcase_add_test(tc, test_long_line_window);
  tcase_add_test(tc, test_long_line_utf8);
  suite_add_tcase(s, tc);
  TCase *src = tcase_create("source");
  tcase_add_test(src, test_source_last_line_without_newline);
  tcase_add_test(src, test_source_crlf_and_tabs);
  tcase_add_test(src, test_source_utf8_key);
  tcase_add_test(src, test_source_messages);
  suite_add_tcase(s, src);
  return s;
}

int main(void) {
  return run_suite(diag_suite());
}

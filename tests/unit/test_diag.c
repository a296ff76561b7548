// Unit tests of the diagnostics' source excerpt (ir/diag.c): the line under a message and the
// caret under its column with tabs, UTF-8 (two-byte, wide, combining, 4-byte), a column inside a
// character or past the end, control bytes and invalid UTF-8, long lines cut to a window, and the
// excerpt through source_parse (last line without a newline, CRLF, warnings, no position); the
// machine-readable formats (compiler/diag_out.c): the JSON path and the hint a message carries,
// and the documents of records (CRLF lines, a column after UTF-8, a line too long to copy).
#include "../../compiler/diag_out.h"
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

// got (malloc'd, freed here) equals want, or both are NULL.
static void expect_owned(char *got, const char *want) {
  if (want) {
    ck_assert_ptr_nonnull(got);
    ck_assert_str_eq(got, want);
  } else {
    ck_assert_ptr_null(got);
  }
  free(got);
}

static void expect_path(const char *msg, const char *want) {
  expect_owned(diag_message_path(msg), want);
}

START_TEST(test_message_path) {
  expect_path("nodes[2] \"c\": concat takes at least 1 input, got 0", "nodes[2]");
  expect_path("params[1].shape[0]: expected a dim", "params[1].shape[0]");
  expect_path("training.optimizer.betas: expected [beta1, beta2]", "training.optimizer.betas");
  expect_path("blocks[0].nodes[1] \"h{i}\": x", "blocks[0].nodes[1]");
  expect_path("model: missing required key 'format'", "model");
  expect_path("dims.K: a cycle", "dims.K");
  expect_path("blocks[0].params[0] (instance 1): duplicate name 'l.1.weight'",
              "blocks[0].params[0]");
  // Not a path of the model: a syntax error, an option, the pipeline's own checks, no ": ".
  expect_path("JSON syntax error: unexpected 't'", NULL);
  expect_path("-D Q=3: the model has no dim 'Q'", NULL);
  expect_path("schedule: rank 0: OPT is missing", NULL);
  expect_path("nodes[x]: y", NULL);
  expect_path("nodes[1]", NULL);
  expect_path("dims.K.: y", NULL);
  expect_path("nodesX: y", NULL);
}
END_TEST

static void expect_hint(const char *msg, const char *want) {
  expect_owned(diag_message_hint(msg), want);
}

START_TEST(test_message_hint) {
  expect_hint("nodes[1] \"a\": unknown op 'rellu' (did you mean 'relu'?)", "did you mean 'relu'?");
  expect_hint("a (did you mean 'b'?) then (did you mean 'c'?)", "did you mean 'c'?");
  expect_hint("a (did you mean 'b'?) and more", NULL);
  expect_hint("unknown init 'x' (expected zeros, ones, normal, uniform or xavier)", NULL);
  expect_hint("(did you mean '", NULL);
}
END_TEST

// The document of the messages reported on text through a Diag in format f.
static char *document(const char *text, DiagFormat f, void (*report)(Doc *doc)) {
  Doc doc;
  parse_text(&doc, text, true);
  doc.cap.d.format = f;
  report(&doc);
  ck_assert(diag_write(&doc.cap.d, "9.9.9"));
  char *got = strdup(cap_text(&doc.cap));
  doc_free(&doc);
  return got;
}

static void report_two(Doc *doc) {
  doc->cap.d.pass = "expand";
  diag_error(&doc->cap.d, (Loc){2, 9}, "nodes[0] \"\xc3\xa9\": bad (did you mean 'x'?)");
  doc->cap.d.pass = NULL;
  diag_warning(&doc->cap.d, (Loc){0, 0}, "no position");
}

START_TEST(test_documents) {
  const char *text = "{\"nodes\": [\r\n {\"\xc3\xa9\": 1}]}\r\n";
  char *got = document(text, DIAG_JSON, report_two);
  ck_assert_str_eq(got,
                   "[{\"kind\":\"error\",\"file\":\"m.json\",\"line\":2,\"column\":9,"
                   "\"path\":\"nodes[0]\",\"message\":\"nodes[0] \\\"\xc3\xa9\\\": bad (did you "
                   "mean 'x'?)\",\"hint\":\"did you mean 'x'?\",\"pass\":\"expand\"},"
                   "{\"kind\":\"warning\",\"file\":\"m.json\",\"line\":null,\"column\":null,"
                   "\"path\":null,\"message\":\"no position\",\"hint\":null,\"pass\":null}]\n");
  free(got);
  got = document(text, DIAG_SARIF, report_two);
  cJSON *log = cJSON_Parse(got);
  ck_assert_ptr_nonnull(log);
  cJSON *run = cJSON_GetArrayItem(cJSON_GetObjectItem(log, "runs"), 0);
  cJSON *rules =
      cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(run, "tool"), "driver"), "rules");
  ck_assert_int_eq(cJSON_GetArraySize(rules), 1); // the warning has no pass
  cJSON *res = cJSON_GetObjectItem(run, "results");
  ck_assert_int_eq(cJSON_GetArraySize(res), 2);
  cJSON *loc = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(res, 0), "locations"), 0);
  cJSON *reg = cJSON_GetObjectItem(cJSON_GetObjectItem(loc, "physicalLocation"), "region");
  // Column 9 in bytes is the 8th character (é is 2 bytes); the snippet is the line without \r.
  ck_assert_int_eq(cJSON_GetObjectItem(reg, "startColumn")->valueint, 8);
  ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(reg, "snippet"), "text")->valuestring,
                   " {\"\xc3\xa9\": 1}]}");
  cJSON *w = cJSON_GetArrayItem(res, 1);
  ck_assert_ptr_null(cJSON_GetObjectItem(w, "ruleId"));
  loc = cJSON_GetArrayItem(cJSON_GetObjectItem(w, "locations"), 0);
  ck_assert_ptr_null(cJSON_GetObjectItem(cJSON_GetObjectItem(loc, "physicalLocation"), "region"));
  cJSON_Delete(log);
  free(got);
}
END_TEST

// A line longer than a SARIF snippet keeps its region, without the snippet.
static void report_long(Doc *doc) {
  diag_error(&doc->cap.d, (Loc){1, 5000}, "long");
}

START_TEST(test_document_long_line) {
  char *text = malloc(6002);
  ck_assert_ptr_nonnull(text);
  memset(text, ' ', 6000);
  text[0] = '[', text[5998] = '1', text[5999] = ']', text[6000] = '\n', text[6001] = 0;
  char *got = document(text, DIAG_SARIF, report_long);
  ck_assert_ptr_nonnull(strstr(got, "\"startColumn\":\t5000"));
  ck_assert_ptr_null(strstr(got, "snippet"));
  free(got);
  free(text);
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
  TCase *fmt = tcase_create("formats");
  tcase_add_test(fmt, test_message_path);
  tcase_add_test(fmt, test_message_hint);
  tcase_add_test(fmt, test_documents);
  tcase_add_test(fmt, test_document_long_line);
  suite_add_tcase(s, fmt);
  return s;
}

int main(void) {
  return run_suite(diag_suite());
}

// Unit tests of the model source (compiler/source.c): line:col of every JSON item, CRLF, strings
// that contain quotes and brackets, UTF-8, and the exact text and position of syntax errors.
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

// One parsed text with its arena and captured diagnostics.
typedef struct Doc {
  Arena a;
  Source s;
  Capture cap;
  bool ok;
} Doc;

static Doc doc; // the fixture frees it after every test, even a failed one

static void doc_setup(void) {
  memset(&doc, 0, sizeof doc);
}

static void doc_teardown(void) {
  source_free(&doc.s);
  arena_free(&doc.a);
  cap_close(&doc.cap);
}

static bool parse_n(const char *text, size_t len) {
  doc_teardown();
  arena_init(&doc.a);
  cap_open(&doc.cap, "m.json");
  doc.ok = source_parse(&doc.s, &doc.a, "m.json", text, len, &doc.cap.d);
  return doc.ok;
}

static bool parse(const char *text) {
  return parse_n(text, strlen(text));
}

// Parses text that must be valid JSON.
static void parse_ok(const char *text) {
  bool ok = parse(text);
  ck_assert_msg(ok, "parse failed: %s", cap_text(&doc.cap));
  ck_assert_str_eq(cap_text(&doc.cap), "");
  ck_assert_int_eq(doc.cap.d.errors, 0);
}

// Parses text that must fail with exactly msg (one diagnostic line, newline added here).
static void parse_err_n(const char *text, size_t len, const char *msg) {
  ck_assert_msg(!parse_n(text, len), "parse of '%s' should fail", text);
  char want[1024];
  snprintf(want, sizeof want, "%s\n", msg);
  ck_assert_str_eq(cap_text(&doc.cap), want);
  ck_assert_int_eq(doc.cap.d.errors, 1);
  ck_assert_ptr_null(doc.s.root);
}

static void parse_err(const char *text, const char *msg) {
  parse_err_n(text, strlen(text), msg);
}

// Item of the parsed document by a path of keys ("k") and indices ("#3"); NULL-terminated list.
static const cJSON *at(const char *first, ...) {
  const cJSON *it = doc.s.root;
  va_list ap;
  va_start(ap, first);
  for (const char *p = first; p; p = va_arg(ap, const char *)) {
    ck_assert_ptr_nonnull(it);
    if (p[0] == '#')
      it = cJSON_GetArrayItem(it, atoi(p + 1));
    else
      it = cJSON_GetObjectItemCaseSensitive(it, p);
  }
  va_end(ap);
  ck_assert_msg(it != NULL, "no item at path starting with '%s'", first ? first : "(root)");
  return it;
}

#define ASSERT_LOC(item, l, c)                                                                     \
  do {                                                                                             \
    Loc loc_ = source_loc(&doc.s, (item));                                                         \
    ck_assert_msg(loc_.line == (l) && loc_.col == (c), "%s at %d:%d, expected %d:%d", #item,       \
                  loc_.line, loc_.col, (l), (c));                                                  \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Positions

static const char *NESTED = "{\n"
                            "  \"format\": \"x\",\n"
                            "  \"list\": [1, \"two\", {\"k\": true}],\n"
                            "  \"nested\": {\n"
                            "    \"inner\": [\n"
                            "      [10, 20],\n"
                            "      null\n"
                            "    ]\n"
                            "  }\n"
                            "}\n";

static void check_nested_positions(void) {
  ASSERT_LOC(doc.s.root, 1, 1);
  ASSERT_LOC(at("format", NULL), 2, 3); // object member: its key
  ASSERT_LOC(at("list", NULL), 3, 3);
  ASSERT_LOC(at("list", "#0", NULL), 3, 12); // array element: its value
  ASSERT_LOC(at("list", "#1", NULL), 3, 15);
  ASSERT_LOC(at("list", "#2", NULL), 3, 22);
  ASSERT_LOC(at("list", "#2", "k", NULL), 3, 23);
  ASSERT_LOC(at("nested", NULL), 4, 3);
  ASSERT_LOC(at("nested", "inner", NULL), 5, 5);
  ASSERT_LOC(at("nested", "inner", "#0", NULL), 6, 7);
  ASSERT_LOC(at("nested", "inner", "#0", "#0", NULL), 6, 8);
  ASSERT_LOC(at("nested", "inner", "#0", "#1", NULL), 6, 12);
  ASSERT_LOC(at("nested", "inner", "#1", NULL), 7, 7);
}

START_TEST(test_positions_nested) {
  parse_ok(NESTED);
  ck_assert_int_eq(doc.s.nlines, 11); // ten lines and the empty one after the last newline
  ck_assert_uint_eq(doc.s.len, strlen(NESTED));
  ck_assert_str_eq(doc.s.path, "m.json");
  check_nested_positions();
}
END_TEST

START_TEST(test_positions_crlf) {
  // The same document with CRLF line endings: every line:col is unchanged.
  char crlf[512];
  size_t o = 0;
  for (const char *p = NESTED; *p; p++) {
    if (*p == '\n') crlf[o++] = '\r';
    crlf[o++] = *p;
  }
  crlf[o] = 0;
  parse_ok(crlf);
  check_nested_positions();
}
END_TEST

START_TEST(test_positions_single_line) {
  parse_ok("{\"a\":1,\"bb\":[true,false,null],\"c\":{\"d\":-1.5e+3}}");
  ASSERT_LOC(at("a", NULL), 1, 2);
  ASSERT_LOC(at("bb", NULL), 1, 8);
  ASSERT_LOC(at("bb", "#0", NULL), 1, 14);
  ASSERT_LOC(at("bb", "#1", NULL), 1, 19);
  ASSERT_LOC(at("bb", "#2", NULL), 1, 25);
  ASSERT_LOC(at("c", NULL), 1, 31);
  ASSERT_LOC(at("c", "d", NULL), 1, 36);
}
END_TEST

START_TEST(test_positions_scalars) {
  parse_ok("[-1.5e+3, 2E-2, 0, true, false, null, \"s\", 7]");
  static const int cols[] = {2, 11, 17, 20, 26, 33, 39, 44};
  for (int i = 0; i < 8; i++) {
    Loc l = source_loc(&doc.s, cJSON_GetArrayItem(doc.s.root, i));
    ck_assert_int_eq(l.line, 1);
    ck_assert_msg(l.col == cols[i], "element %d at col %d, expected %d", i, l.col, cols[i]);
  }
}
END_TEST

START_TEST(test_positions_empty_containers) {
  parse_ok("{\"a\": {}, \"b\": [], \"c\": [[], {}, [ ]], \"d\": 1}");
  ASSERT_LOC(at("a", NULL), 1, 2);
  ASSERT_LOC(at("b", NULL), 1, 11);
  ASSERT_LOC(at("c", NULL), 1, 20);
  ASSERT_LOC(at("c", "#0", NULL), 1, 26);
  ASSERT_LOC(at("c", "#1", NULL), 1, 30);
  ASSERT_LOC(at("c", "#2", NULL), 1, 34);
  ASSERT_LOC(at("d", NULL), 1, 40);
}
END_TEST

START_TEST(test_positions_top_level_scalar) {
  parse_ok("\n\n   42  \n");
  ck_assert(cJSON_IsNumber(doc.s.root));
  ASSERT_LOC(doc.s.root, 3, 4);
}
END_TEST

START_TEST(test_positions_duplicate_keys) {
  // cJSON keeps both members; each gets its own position (expand reports the duplicate).
  parse_ok("{\"a\": 1, \"a\": 2}");
  const cJSON *first = doc.s.root->child, *second = first->next;
  ck_assert_str_eq(second->string, "a");
  ASSERT_LOC(first, 1, 2);
  ASSERT_LOC(second, 1, 10);
}
END_TEST

START_TEST(test_strings_with_quotes_and_brackets) {
  // Escaped quotes, backslashes and brackets inside strings must not confuse the position walk.
  const char *text = "{\"a\\\"}\": \"x\\\\\",\n" // line 1: {"a\"}": "x\\",
                     " \"b\": \"}{][,:\",\n"     // line 2:  "b": "}{][,:",
                     " \"c\": [\",\", \"\\\"\", {\"d\": \"\\\\\\\"{\"}],\n" // line 3
                     " \"e\": 1}";                                          // line 4
  parse_ok(text);
  ck_assert_str_eq(doc.s.root->child->string, "a\"}");
  ck_assert_str_eq(doc.s.root->child->valuestring, "x\\");
  ASSERT_LOC(doc.s.root->child, 1, 2);
  ASSERT_LOC(at("b", NULL), 2, 2);
  ck_assert_str_eq(at("b", NULL)->valuestring, "}{][,:");
  ASSERT_LOC(at("c", NULL), 3, 2);
  ASSERT_LOC(at("c", "#0", NULL), 3, 8);
  ASSERT_LOC(at("c", "#1", NULL), 3, 13);
  ASSERT_LOC(at("c", "#2", NULL), 3, 19);
  ASSERT_LOC(at("c", "#2", "d", NULL), 3, 20);
  ck_assert_str_eq(at("c", "#2", "d", NULL)->valuestring, "\\\"{");
  ASSERT_LOC(at("e", NULL), 4, 2);
}
END_TEST

START_TEST(test_unicode_columns_are_bytes) {
  // Columns count bytes: é and ü are 2 bytes, € 3, the emoji 4.
  parse_ok("{\"\xc3\xa9\": \"\xc3\xbc\xe2\x82\xac\", \"k\": [1, \"\xf0\x9f\x98\x80\", 2]}");
  ASSERT_LOC(at("\xc3\xa9", NULL), 1, 2);
  ASSERT_LOC(at("k", NULL), 1, 17);
  ASSERT_LOC(at("k", "#0", NULL), 1, 23);
  ASSERT_LOC(at("k", "#1", NULL), 1, 26);
  ASSERT_LOC(at("k", "#2", NULL), 1, 34);
  // \u escapes are decoded by cJSON; positions still refer to the raw text.
  parse_ok("{\"\\u00e9\\ud83d\\ude00\": 1, \"z\": 2}");
  ck_assert_str_eq(doc.s.root->child->string, "\xc3\xa9\xf0\x9f\x98\x80");
  ASSERT_LOC(at("z", NULL), 1, 27);
}
END_TEST

START_TEST(test_many_items) {
  // 20000 elements: the position table grows and every element keeps its own offset.
  enum { N = 20000 };
  char *text = malloc(N * 8 + 16);
  ck_assert_ptr_nonnull(text);
  size_t o = 0;
  int *col = malloc(sizeof(int) * N);
  text[o++] = '[';
  for (int i = 0; i < N; i++) {
    if (i) text[o++] = ',';
    col[i] = (int)o + 1;
    o += (size_t)sprintf(text + o, "%d", i);
  }
  text[o++] = ']';
  text[o] = 0;
  bool ok = parse(text);
  free(text);
  ck_assert(ok);
  int i = 0;
  for (const cJSON *c = doc.s.root->child; c; c = c->next, i++) {
    Loc l = source_loc(&doc.s, c);
    int want = col[i];
    if (l.line != 1 || l.col != want) {
      free(col);
      ck_abort_msg("element %d at %d:%d, expected 1:%d", i, l.line, l.col, want);
    }
  }
  free(col);
  ck_assert_int_eq(i, N);
}
END_TEST

START_TEST(test_loc_unknown_items) {
  parse_ok("{\"a\": 1}");
  Loc l = source_loc(&doc.s, NULL);
  ck_assert_int_eq(l.line, 0);
  ck_assert_int_eq(l.col, 0);
  cJSON *other = cJSON_CreateNumber(1);
  l = source_loc(&doc.s, other);
  cJSON_Delete(other);
  ck_assert_int_eq(l.line, 0);
  ck_assert_int_eq(l.col, 0);
}
END_TEST

START_TEST(test_offset_loc) {
  parse_ok("{\n  \"a\": 1\r\n}\n");
  Loc l = source_offset_loc(&doc.s, 0);
  ck_assert(l.line == 1 && l.col == 1);
  l = source_offset_loc(&doc.s, 1); // the first '\n' belongs to line 1
  ck_assert(l.line == 1 && l.col == 2);
  l = source_offset_loc(&doc.s, 2);
  ck_assert(l.line == 2 && l.col == 1);
  l = source_offset_loc(&doc.s, 10); // '\r'
  ck_assert(l.line == 2 && l.col == 9);
  l = source_offset_loc(&doc.s, 12); // '}'
  ck_assert(l.line == 3 && l.col == 1);
  l = source_offset_loc(&doc.s, doc.s.len); // end of file, after the last newline
  ck_assert(l.line == 4 && l.col == 1);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Syntax errors: position of the offending byte and a message a JSON writer recognises

START_TEST(test_err_trailing_comma_array) {
  parse_err("[1,\n  ]",
            "m.json:2:3: error: JSON syntax error: unexpected ']' (trailing comma before it)");
  parse_err("{\"a\": [1, 2, ]}",
            "m.json:1:14: error: JSON syntax error: unexpected ']' (trailing comma before it)");
}
END_TEST

// Regression (source.c): cJSON reports a failed object key one byte past where the key should
// start, so a trailing comma in an object was reported as "unexpected end of file" (or at the wrong
// byte).
START_TEST(test_err_trailing_comma_object) {
  parse_err("{\"a\": 1,\n}",
            "m.json:2:1: error: JSON syntax error: unexpected '}' (trailing comma before it)");
  parse_err("{\"a\": {\"b\": 1,}, \"c\": 2}",
            "m.json:1:15: error: JSON syntax error: unexpected '}' (trailing comma before it)");
}
END_TEST

START_TEST(test_err_comment_in_array) {
  parse_err("[1, // one\n 2]",
            "m.json:1:5: error: JSON syntax error: comments are not allowed in JSON");
  parse_err("[/* x */ 1]",
            "m.json:1:2: error: JSON syntax error: comments are not allowed in JSON");
}
END_TEST

// Regression (source.c): same off-by-one as above: a comment where a key is expected was reported
// as "unexpected '/'" (or '*') one column too far right.
START_TEST(test_err_comment_in_object) {
  parse_err("{\n  // the model\n  \"a\": 1\n}",
            "m.json:2:3: error: JSON syntax error: comments are not allowed in JSON");
  parse_err("{\"a\": 1, /* b */ \"b\": 2}",
            "m.json:1:10: error: JSON syntax error: comments are not allowed in JSON");
}
END_TEST

START_TEST(test_err_single_quote_value) {
  parse_err("{\"a\": 'x'}",
            "m.json:1:7: error: JSON syntax error: strings must use double quotes, not '");
  parse_err("['x']", "m.json:1:2: error: JSON syntax error: strings must use double quotes, not '");
}
END_TEST

// Regression (source.c): a single-quoted key was reported as "unexpected 'a'" at the byte after the
// quote.
START_TEST(test_err_single_quote_key) {
  parse_err("{'a': 1}",
            "m.json:1:2: error: JSON syntax error: strings must use double quotes, not '");
  parse_err("{\"a\": 1,\n 'b': 2}",
            "m.json:2:2: error: JSON syntax error: strings must use double quotes, not '");
}
END_TEST

START_TEST(test_err_eof) {
  const char *msg = "JSON syntax error: unexpected end of file (unclosed '{', '[' or string?)";
  char want[256];
  // A file without any value says so (at the end of the file) instead.
  parse_err("", "m.json:1:1: error: JSON syntax error: file is empty (no JSON value)");
  parse_err("   \n  ", "m.json:2:3: error: JSON syntax error: file is empty (no JSON value)");
  snprintf(want, sizeof want, "m.json:1:12: error: %s", msg);
  parse_err("{\"a\": [1, 2", want);
  snprintf(want, sizeof want, "m.json:3:1: error: %s", msg);
  parse_err("{\"a\": [1, 2]\n\n", want);
  snprintf(want, sizeof want, "m.json:1:8: error: %s", msg);
  parse_err("{\"a\": 1", want);
}
END_TEST

// Regression (source.c): an unterminated string was reported as "unexpected 'a'" at its first
// character instead of as a string that the end of the file cut short (reported at its opening
// quote).
START_TEST(test_err_unterminated_string) {
  parse_err("{\"a\": \"abc", "m.json:1:7: error: JSON syntax error: unterminated string (the file "
                             "ends before its closing quote)");
  parse_err("{\"a\": 1, \"b", "m.json:1:10: error: JSON syntax error: unterminated string (the "
                              "file ends before its closing quote)");
}
END_TEST

START_TEST(test_err_other) {
  parse_err("{\"a\" 1}", "m.json:1:6: error: JSON syntax error: unexpected '1'");
  parse_err("[1 2]", "m.json:1:4: error: JSON syntax error: unexpected '2'");
  parse_err("{} x", "m.json:1:4: error: JSON syntax error: unexpected 'x' after the JSON document");
  parse_err("[1]]", "m.json:1:4: error: JSON syntax error: unexpected ']' after the JSON document");
  parse_err("{\"a\": 1}}",
            "m.json:1:9: error: JSON syntax error: unexpected '}' after the JSON document");
  parse_err("{\"a\": tru}", "m.json:1:7: error: JSON syntax error: unexpected 't'");
  parse_err("{\"a\": +1}", "m.json:1:7: error: JSON syntax error: unexpected '+'");
  parse_err("{\"a\": [1, 2}", "m.json:1:12: error: JSON syntax error: unexpected '}'");
  parse_err("{\"a\": \xc3\xa9}", "m.json:1:7: error: JSON syntax error: unexpected byte 0xc3");
  parse_err("{\"\xc3\xa9\": 1, \"b\" 2}", "m.json:1:15: error: JSON syntax error: unexpected '2'");
  // CRLF: the column after a CR LF line break starts again at 1.
  parse_err("{\r\n  \"a\": 1\r\n  \"b\": 2\r\n}",
            "m.json:3:3: error: JSON syntax error: unexpected '\"'");
}
END_TEST

START_TEST(test_err_bad_escape_position) {
  // An invalid escape is reported at its backslash.
  ck_assert(!parse("{\"a\": \"x\\qy\"}"));
  const char *t = cap_text(&doc.cap);
  const char *want = "m.json:1:9: error: JSON syntax error: ";
  ck_assert_msg(strncmp(t, want, strlen(want)) == 0, "got '%s'", t);
}
END_TEST

START_TEST(test_err_nul_byte) {
  static const char t1[] = "{\"a\": 1}\0 ";
  parse_err_n(t1, sizeof t1 - 1,
              "m.json:1:9: error: file contains a NUL byte; a model file is UTF-8 text");
  static const char t2[] = "{\n  \"a\"\0: 1}";
  parse_err_n(t2, sizeof t2 - 1,
              "m.json:2:6: error: file contains a NUL byte; a model file is UTF-8 text");
}
END_TEST

// Regression (source.c): cJSON treats every byte <= 0x20 as whitespace (form feed, vertical tab,
// other control bytes), but the position walk only skips space, tab, CR and LF, so after such a
// byte every position in the file is wrong. Either outcome is fine: reject the byte at its position
// (RFC 8259 whitespace is only space, tab, CR, LF), or accept it and keep the positions right.
START_TEST(test_control_whitespace_positions) {
  static const struct {
    const char *text;
    int a_col, b_col, bad_col;
  } cases[] = {
      {"{\f\"a\": 1, \"b\": 2}", 3, 11, 2},
      {"{\"a\": 1,\v\"b\": 2}", 2, 10, 9},
      {"{\"a\":\x01 1, \"b\": 2}", 2, 11, 6},
  };
  for (int i = 0; i < 3; i++) {
    if (parse(cases[i].text)) {
      ASSERT_LOC(at("a", NULL), 1, cases[i].a_col);
      ASSERT_LOC(at("b", NULL), 1, cases[i].b_col);
    } else {
      char want[128];
      snprintf(want, sizeof want, "m.json:1:%d: error: JSON syntax error: unexpected byte 0x%02x\n",
               cases[i].bad_col, (unsigned char)cases[i].text[cases[i].bad_col - 1]);
      ck_assert_str_eq(cap_text(&doc.cap), want);
    }
  }
  if (parse("[1,\f2,3]")) {
    ASSERT_LOC(at("#1", NULL), 1, 5);
    ASSERT_LOC(at("#2", NULL), 1, 7);
  }
}
END_TEST

// Regression (source.c): cJSON skips a UTF-8 byte order mark, but the position walk does not, so it
// takes the document for a scalar and no member of a BOM-prefixed file has a position (every
// later diagnostic loses its line:col).
START_TEST(test_bom_positions) {
  parse_ok("\xef\xbb\xbf{\"a\": 1,\n \"b\": [2]}");
  ASSERT_LOC(doc.s.root, 1, 4);
  ASSERT_LOC(at("a", NULL), 1, 5);
  ASSERT_LOC(at("b", NULL), 2, 2);
  ASSERT_LOC(at("b", "#0", NULL), 2, 8);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// source_load

START_TEST(test_load_file) {
  char path[] = "/tmp/pipec_test_source_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  const char *text = "{\n  \"k\": [1, 2]\n}\n";
  ck_assert_int_eq((int)write(fd, text, strlen(text)), (int)strlen(text));
  close(fd);
  doc_teardown();
  arena_init(&doc.a);
  cap_open(&doc.cap, path);
  bool ok = source_load(&doc.s, &doc.a, path, &doc.cap.d);
  unlink(path);
  ck_assert(ok);
  ck_assert_str_eq(cap_text(&doc.cap), "");
  ck_assert_str_eq(doc.s.text, text);
  ASSERT_LOC(at("k", NULL), 2, 3);
  ASSERT_LOC(at("k", "#1", NULL), 2, 12);
}
END_TEST

START_TEST(test_load_errors) {
  doc_teardown();
  arena_init(&doc.a);
  cap_open(&doc.cap, "/nonexistent/m.json");
  ck_assert(!source_load(&doc.s, &doc.a, "/nonexistent/m.json", &doc.cap.d));
  ck_assert_str_eq(
      cap_text(&doc.cap),
      "/nonexistent/m.json: error: cannot open model file: No such file or directory\n");
  doc_teardown();
  arena_init(&doc.a);
  cap_open(&doc.cap, "/tmp");
  ck_assert(!source_load(&doc.s, &doc.a, "/tmp", &doc.cap.d));
  ck_assert_str_eq(cap_text(&doc.cap),
                   "/tmp: error: model file is a directory, not a regular file\n");
}
END_TEST

static Suite *source_suite(void) {
  Suite *s = suite_create("source");
  TCase *pos = tcase_create("positions");
  tcase_add_checked_fixture(pos, doc_setup, doc_teardown);
  tcase_add_test(pos, test_positions_nested);
  tcase_add_test(pos, test_positions_crlf);
  tcase_add_test(pos, test_positions_single_line);
  tcase_add_test(pos, test_positions_scalars);
  tcase_add_test(pos, test_positions_empty_containers);
  tcase_add_test(pos, test_positions_top_level_scalar);
  tcase_add_test(pos, test_positions_duplicate_keys);
  tcase_add_test(pos, test_strings_with_quotes_and_brackets);
  tcase_add_test(pos, test_unicode_columns_are_bytes);
  tcase_add_test(pos, test_many_items);
  tcase_add_test(pos, test_loc_unknown_items);
  tcase_add_test(pos, test_offset_loc);
  suite_add_tcase(s, pos);

  TCase *err = tcase_create("syntax_errors");
  tcase_add_checked_fixture(err, doc_setup, doc_teardown);
  tcase_add_test(err, test_err_trailing_comma_array);
  tcase_add_test(err, test_err_comment_in_array);
  tcase_add_test(err, test_err_single_quote_value);
  tcase_add_test(err, test_err_eof);
  tcase_add_test(err, test_err_other);
  tcase_add_test(err, test_err_bad_escape_position);
  tcase_add_test(err, test_err_nul_byte);
  suite_add_tcase(s, err);

  TCase *load = tcase_create("load");
  tcase_add_checked_fixture(load, doc_setup, doc_teardown);
  tcase_add_test(load, test_load_file);
  tcase_add_test(load, test_load_errors);
  suite_add_tcase(s, load);

  // Bugs found by these tests (fixed since); see the Regression comments above each.
  TCase *bugs = tcase_create("regressions");
  tcase_add_checked_fixture(bugs, doc_setup, doc_teardown);
  tcase_add_test(bugs, test_err_trailing_comma_object);
  tcase_add_test(bugs, test_err_comment_in_object);
  tcase_add_test(bugs, test_err_single_quote_key);
  tcase_add_test(bugs, test_err_unterminated_string);
  tcase_add_test(bugs, test_control_whitespace_positions);
  tcase_add_test(bugs, test_bom_positions);
  suite_add_tcase(s, bugs);
  return s;
}

int main(void) {
  return run_suite(source_suite());
}

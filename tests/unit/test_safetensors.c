// Unit tests of the compiler's safetensors writer and header reader (compiler/st_write.c,
// compiler/st_read.c): a file written here is read back byte by byte (the length, the exact
// header text and its padding, every tensor's bytes at its offsets) and through the reader; tied
// tensors are two copies; sizes print as exact integers; every bad request is refused with its one
// line and leaves no file (an existing one unchanged, no temporary); every bad header the reader
// meets is refused with its one line.
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../../compiler/files.h"
#include "../../compiler/st_read.h"
#include "../../compiler/st_write.h"
#include "testutil.h"

static char dir[64];   // this run's temporary directory
static char path[128]; // the file of the test

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/test_safetensors.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
}

static void teardown(void) {
  remove_tree(dir);
}

// The whole file at p (malloc'd; *n its bytes).
static unsigned char *slurp(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)len + 1);
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(fread(b, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return b;
}

// The number of entries of dir besides . and .. (the file; a temporary left would count).
static int count_files(void) {
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return n;
}

static const float A[6] = {0, 1, 2, 3, 4, 5};
static const int64_t B[2] = {7, -1};
static const uint16_t C[1] = {0x3f80}; // bf16 1.0

// st_write must succeed.
static void write_ok(const StTensor *t, int n, const char *meta) {
  Capture cap;
  cap_open(&cap, "m.pt2");
  ck_assert_msg(st_write(path, t, n, meta, &cap.d), "%s", cap_text(&cap));
  ck_assert_str_eq(cap_text(&cap), "");
  cap_close(&cap);
}

// st_write of t must fail with exactly "m.pt2: error: cannot write 'PATH': why", writing nothing.
static void write_err(const StTensor *t, int n, const char *meta, const char *why) {
  Capture cap;
  cap_open(&cap, "m.pt2");
  int before = count_files();
  ck_assert(!st_write(path, t, n, meta, &cap.d));
  char want[1024];
  snprintf(want, sizeof want, "m.pt2: error: cannot write '%s': %s\n", path, why);
  ck_assert_str_eq(cap_text(&cap), want);
  ck_assert_int_eq(cap.d.errors, 1);
  ck_assert_int_eq(count_files(), before);
  cap_close(&cap);
}

START_TEST(test_layout) {
  StTensor t[4] = {
      {"a", "F32", 2, {2, 3}, A, sizeof A},
      {"b.x", "I64", 1, {2}, B, sizeof B},
      {"c", "BF16", 0, {0}, C, sizeof C},
      {"e", "U8", 1, {0}, NULL, 0},
  };
  write_ok(t, 4, "{\"format\": \"pt\"}");
  size_t n;
  unsigned char *f = slurp(path, &n);
  const char *want = "{\"__metadata__\":{\"format\":\"pt\"},"
                     "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                     "\"b.x\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[24,40]},"
                     "\"c\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[40,42]},"
                     "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[42,42]}}";
  size_t wl = strlen(want), hl = (wl + 7) / 8 * 8;
  uint64_t len = 0;
  for (int i = 7; i >= 0; i--) len = (len << 8) | f[i];
  ck_assert_uint_eq(len, hl);        // the length, little-endian
  ck_assert_uint_eq(n, 8 + hl + 42); // then the header, then 42 bytes of data
  ck_assert_mem_eq(f + 8, want, wl); // the header as cJSON prints it
  for (size_t i = wl; i < hl; i++) ck_assert_int_eq(f[8 + i], ' '); // padded with spaces
  ck_assert_mem_eq(f + 8 + hl, A, 24);
  ck_assert_mem_eq(f + 8 + hl + 24, B, 16);
  ck_assert_mem_eq(f + 8 + hl + 40, C, 2);
  free(f);
  ck_assert_int_eq(count_files(), 1); // no temporary left
}
END_TEST

START_TEST(test_read_back) {
  StTensor t[3] = {
      {"a", "F32", 2, {2, 3}, A, sizeof A},
      {"b.x", "I64", 1, {2}, B, sizeof B},
      {"c", "BF16", 0, {0}, C, sizeof C},
  };
  write_ok(t, 3, NULL);
  Arena a;
  arena_init(&a);
  StHeader h;
  char why[1024];
  ck_assert_msg(st_read_header(path, &a, &h, why, sizeof why), "%s", why);
  ck_assert_int_eq(h.n, 3);
  const StEntry *e = st_find(&h, "b.x");
  ck_assert_ptr_nonnull(e);
  ck_assert_str_eq(e->dtype, "I64");
  ck_assert_int_eq(e->rank, 1);
  ck_assert_int_eq(e->shape[0], 2);
  ck_assert_uint_eq(e->begin, 24);
  ck_assert_uint_eq(e->end, 40);
  e = st_find(&h, "a");
  ck_assert_int_eq(e->rank, 2);
  ck_assert_int_eq(e->shape[1], 3);
  ck_assert_int_eq(st_find(&h, "c")->rank, 0);
  ck_assert_ptr_null(st_find(&h, "d"));
  ck_assert_uint_eq(h.data_bytes, 42);
  size_t n;
  unsigned char *f = slurp(path, &n);
  ck_assert_uint_eq(h.data_start + h.data_bytes, n);
  ck_assert_mem_eq(f + h.data_start + st_find(&h, "c")->begin, C, 2);
  free(f);
  arena_free(&a);
}
END_TEST

// Tied weights: two names of one storage are two entries and two copies of the bytes (what the
// program's --save writes, so that load_state_dict(strict=True) finds both names).
START_TEST(test_tied) {
  StTensor t[2] = {
      {"wte.weight", "F32", 2, {3, 2}, A, sizeof A},
      {"lm_head.weight", "F32", 2, {3, 2}, A, sizeof A},
  };
  write_ok(t, 2, NULL);
  Arena a;
  arena_init(&a);
  StHeader h;
  char why[1024];
  ck_assert_msg(st_read_header(path, &a, &h, why, sizeof why), "%s", why);
  ck_assert_uint_eq(h.data_bytes, 48);
  const StEntry *w = st_find(&h, "wte.weight"), *l = st_find(&h, "lm_head.weight");
  ck_assert_uint_eq(w->begin, 0);
  ck_assert_uint_eq(l->begin, 24);
  size_t n;
  unsigned char *f = slurp(path, &n);
  ck_assert_mem_eq(f + h.data_start, A, 24);
  ck_assert_mem_eq(f + h.data_start + 24, A, 24);
  free(f);
  arena_free(&a);
}
END_TEST

// Sizes and offsets are integer literals however large (cJSON's doubles print 1e15 as "1e+15").
START_TEST(test_big_sizes) {
  StTensor t[1] = {{"z", "F32", 3, {1000000000000000LL, 0, 9007199254740993LL}, NULL, 0}};
  write_ok(t, 1, NULL);
  size_t n;
  unsigned char *f = slurp(path, &n);
  const char *want = "{\"z\":{\"dtype\":\"F32\",\"shape\":[1000000000000000,0,9007199254740993],"
                     "\"data_offsets\":[0,0]}}";
  ck_assert_mem_eq(f + 8, want, strlen(want));
  free(f);
}
END_TEST

// A write replaces the file whole; a refused one leaves it as it was.
START_TEST(test_replace) {
  StTensor t[1] = {{"a", "F32", 2, {2, 3}, A, sizeof A}};
  write_ok(t, 1, NULL);
  size_t n1;
  unsigned char *before = slurp(path, &n1);
  t[0].bytes = 20;
  write_err(t, 1, NULL, "tensor 'a' is given 20 bytes but F32 of shape [2, 3] needs 24");
  size_t n2;
  unsigned char *after = slurp(path, &n2);
  ck_assert_uint_eq(n1, n2);
  ck_assert_mem_eq(before, after, n1);
  free(before);
  free(after);
  StTensor u[1] = {{"b", "I64", 1, {2}, B, sizeof B}};
  write_ok(u, 1, NULL);
  Arena a;
  arena_init(&a);
  StHeader h;
  char why[1024];
  ck_assert_msg(st_read_header(path, &a, &h, why, sizeof why), "%s", why);
  ck_assert_int_eq(h.n, 1);
  ck_assert_ptr_nonnull(st_find(&h, "b"));
  arena_free(&a);
  ck_assert_int_eq(count_files(), 1);
}
END_TEST

START_TEST(test_bad_requests) {
  StTensor ok = {"a", "F32", 2, {2, 3}, A, sizeof A};
  StTensor t[2] = {ok, ok};
  write_err(t, 2, NULL, "tensor 'a' is given twice (0 and 1)");
  t[1].name = "__metadata__";
  write_err(t, 2, NULL, "tensor 1 is named \"__metadata__\", the key of the file's metadata");
  t[1].name = "";
  write_err(t, 2, NULL, "tensor 1 has an empty name");
  t[1].name = NULL;
  write_err(t, 2, NULL, "tensor 1 has no name");
  t[1].name = "\xff";
  write_err(t, 2, NULL, "tensor 1 has a name that is not valid UTF-8");
  t[1] = ok, t[1].name = "b", t[1].dtype = "F8";
  write_err(t, 2, NULL,
            "tensor 'b' has dtype 'F8' (expected F32, I64, I32, BF16, F16, F64, U8 or BOOL)");
  t[1].dtype = "F32", t[1].rank = 9;
  write_err(t, 2, NULL, "tensor 'b' has rank 9 (at most 8)");
  t[1].rank = 2, t[1].shape[1] = -3;
  write_err(t, 2, NULL, "tensor 'b' has shape [2, -3] (a negative size)");
  t[1].shape[0] = (int64_t)1 << 62, t[1].shape[1] = 8;
  write_err(t, 2, NULL,
            "tensor 'b' is given 24 bytes but F32 of shape [4611686018427387904, 8] needs more "
            "than 2^64");
  t[1].shape[0] = 2, t[1].shape[1] = 3, t[1].data = NULL;
  write_err(t, 2, NULL, "tensor 'b' has no data");
  t[1].data = A;
  write_err(t, 2, "[1]", "the metadata is not a JSON object of UTF-8 strings");
  write_err(t, 2, "{\"step\": 3}", "the metadata is not a JSON object of UTF-8 strings");
  write_err(t, 2, "{\"a\": \"b\"", "the metadata is not a JSON object of UTF-8 strings");
  // An I/O error: the directory does not exist.
  snprintf(path, sizeof path, "%s/no/w.safetensors", dir);
  write_err(t, 2, NULL, "No such file or directory");
}
END_TEST

// ---- the reader against bad headers

// A file of the 8-byte length len, then the bytes of text, then ndata zero bytes.
static void raw(uint64_t len, const char *text, size_t ndata) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  for (int i = 0; i < 8; i++) fputc((int)((len >> (8 * i)) & 0xff), f);
  fwrite(text, 1, strlen(text), f);
  for (size_t i = 0; i < ndata; i++) fputc(0, f);
  fclose(f);
}

static void header(const char *text, size_t ndata) {
  raw(strlen(text), text, ndata);
}

// st_read_header must fail with exactly "PATH: why".
static void read_err(const char *why) {
  Arena a;
  arena_init(&a);
  StHeader h;
  char got[1024], want[1024];
  ck_assert(!st_read_header(path, &a, &h, got, sizeof got));
  snprintf(want, sizeof want, "%s: %s", path, why);
  ck_assert_str_eq(got, want);
  arena_free(&a);
}

#define T(name, dtype, shape, b, e)                                                                \
  "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

START_TEST(test_bad_headers) {
  FILE *f = fopen(path, "wb");
  fputs("abc", f);
  fclose(f);
  read_err("the file has 3 bytes, too short for the 8-byte header length");
  raw(100, "{}", 0);
  read_err("the header length 100 (bytes 0..7) is larger than the rest of the file (2 bytes)");
  raw(UINT64_MAX, "{}", 0);
  read_err("the header length 18446744073709551615 (bytes 0..7) is larger than the rest of the "
           "file (2 bytes)");
  header("{\"a\": 1", 0);
  read_err("the header is not valid JSON (byte offset 14)");
  header("[]", 0);
  read_err("the header is not a JSON object");
  header("{} x", 0);
  read_err("the header has text after its JSON object (byte offset 11)");
  header("{\"a\xff\": 1}", 0);
  read_err("the header is not valid UTF-8 (byte offset 11)");
  header("{\"a\x01\": 1}", 0);
  read_err("a string in the header holds the control character 0x01 (byte offset 11)");
  header("{\"a\\u0000\": 1}", 0);
  read_err("a string in the header holds a NUL character (\\u0000, byte offset 11)");
  header("{" T("a", "F32", "[2]", 0, 8) "} ", 8);
  Arena a;
  arena_init(&a);
  StHeader h;
  char why[1024];
  ck_assert_msg(st_read_header(path, &a, &h, why, sizeof why), "%s", why); // blanks: padding
  arena_free(&a);
  header("{" T("a", "F33", "[2]", 0, 8) "}", 8);
  read_err("tensor 'a' has an unknown dtype 'F33'");
  header("{\"a\": 3}", 0);
  read_err("tensor 'a': the entry is not an object");
  header("{\"a\": {\"shape\": []}}", 0);
  read_err("tensor 'a' has no \"dtype\" string");
  header("{" T("a", "F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 4);
  read_err("tensor 'a': \"shape\" is not an array of at most 8 sizes");
  header("{" T("a", "F32", "[-1]", 0, 4) "}", 4);
  read_err("tensor 'a': \"shape\" holds something other than a non-negative integer");
  header("{" T("a", "F32", "[2.5]", 0, 4) "}", 4);
  read_err("tensor 'a': \"shape\" holds something other than a non-negative integer");
  header("{" T("a", "F64", "[4294967296,4294967296]", 0, 4) "}", 4);
  read_err("tensor 'a': its byte size overflows 64 bits");
  header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4);
  read_err("tensor 'a': \"data_offsets\" is not [begin, end]");
  header("{" T("a", "F32", "[2]", 0, 8) "}", 4);
  read_err("tensor 'a': data offsets [0, 8] are outside the data section (4 bytes)");
  header("{" T("a", "F32", "[2]", 0, 4) "}", 4);
  read_err("tensor 'a': data offsets [0, 4] hold 4 bytes but F32 of that shape needs 8");
  header("{" T("a", "F32", "[1]", 0, 4) "," T("a", "F32", "[1]", 4, 8) "}", 8);
  read_err("tensor 'a' appears twice in the header");
  header("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[1]", 4, 8) "}", 8);
  read_err("tensors 'a' and 'b' overlap in the data section");
  header("{" T("a", "F32", "[1]", 0, 4) "," T("b", "F32", "[1]", 8, 12) "}", 12);
  read_err("bytes [4, 8) of the data section belong to no tensor (before tensor 'b')");
  header("{" T("a", "F32", "[1]", 0, 4) "}", 12);
  read_err("8 trailing bytes after the last tensor (the data section has 12 bytes, the tensors "
           "end at 4)");
  header("{\"__metadata__\": [], " T("a", "F32", "[1]", 0, 4) "}", 4);
  read_err("\"__metadata__\" is not an object");
  header("{\"__metadata__\": {\"k\": 1}, " T("a", "F32", "[1]", 0, 4) "}", 4);
  read_err("metadata 'k' is not a string");
  unlink(path);
  read_err("No such file or directory");
  mkdir(path, 0755);
  read_err("a directory, not a regular file");
}
END_TEST

int main(void) {
  Suite *s = suite_create("safetensors");
  TCase *tc = tcase_create("safetensors");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_layout);
  tcase_add_test(tc, test_read_back);
  tcase_add_test(tc, test_tied);
  tcase_add_test(tc, test_big_sizes);
  tcase_add_test(tc, test_replace);
  tcase_add_test(tc, test_bad_requests);
  tcase_add_test(tc, test_bad_headers);
  suite_add_tcase(s, tc);
  return run_suite(s);
}

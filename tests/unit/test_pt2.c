// Unit tests of the torch.export archive reader (compiler/pt2.c): archives built here with libzip
// (stored entries, laid out as torch.export.save lays them out), a good one read back weight by
// weight (tied weights sharing an entry), and each bad archive refused with exactly its one line.
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "../../compiler/files.h"
#include "../../compiler/pt2.h"
#include "testutil.h"

static char dir[64];   // this run's temporary directory
static char path[128]; // the archive of the test

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/test_pt2.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/m.pt2", dir);
}

static void teardown(void) {
  remove_tree(dir);
}

// ---- building archives

typedef struct Entry {
  const char *name;
  const void *data;
  size_t len; // (size_t)-1: strlen(data)
} Entry;

// model.json: the parts of a real one the reader looks at.
static const char MODEL[] = "{\"graph_module\": {\"graph\": {\"nodes\": []}}, "
                            "\"schema_version\": {\"major\": 8, \"minor\": 20}}";

// The weights' table: l.weight f32 [3, 2] and l.bias f32 [3], t.weight tied to l.weight.
#define META(sz, st)                                                                               \
  "\"tensor_meta\": {\"dtype\": 7, \"sizes\": " sz ", \"strides\": " st                            \
  ", \"storage_offset\": {\"as_int\": 0}}"
static const char CONFIG[] =
    "{\"config\": {"
    "\"l.weight\": {\"path_name\": \"weight_0\", \"is_param\": true, \"use_pickle\": false, " META(
        "[{\"as_int\": 3}, {\"as_int\": 2}]",
        "[{\"as_int\": 2}, {\"as_int\": 1}]") "}, "
                                              "\"l.bias\": {\"path_name\": \"weight_1\", "
                                              "\"is_param\": true, \"use_pickle\": false, " META(
                                                  "[{\"as_int\": 3}]",
                                                  "[{\"as_int\": 1}]") "}, "
                                                                       "\"t.weight\": "
                                                                       "{\"path_name\": "
                                                                       "\"weight_0\", "
                                                                       "\"is_param\": true, "
                                                                       "\"use_pickle\": "
                                                                       "false, " META(
                                                                           "[{\"as_int\": 3}, "
                                                                           "{\"as_int\": 2}]",
                                                                           "[{\"as_int\": 2}, "
                                                                           "{\"as_int\": 1}]") "}}"
                                                                                               "}";

static const float W0[6] = {1, 2, 3, 4, 5, 6};
static const float W1[3] = {-1, -2, -3};

// Writes the entries as a ZIP of stored entries at path.
static void write_zip(const Entry *e, int n) {
  int err = 0;
  zip_t *z = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &err);
  ck_assert_ptr_nonnull(z);
  for (int i = 0; i < n; i++) {
    size_t len = e[i].len == (size_t)-1 ? strlen(e[i].data) : e[i].len;
    zip_source_t *s = zip_source_buffer(z, e[i].data, len, 0);
    ck_assert_ptr_nonnull(s);
    zip_int64_t k = zip_file_add(z, e[i].name, s, ZIP_FL_ENC_UTF_8);
    ck_assert_int_ge(k, 0);
    ck_assert_int_eq(zip_set_file_compression(z, (zip_uint64_t)k, ZIP_CM_STORE, 0), 0);
  }
  ck_assert_int_eq(zip_close(z), 0);
}

// The good archive with entry `name` replaced by data (NULL: left out), and `extra` added.
static void write_archive(const char *name, const char *data, const char *extra) {
  Entry e[6] = {
      {"m/data/weights/weight_0", W0, sizeof W0},
      {"m/data/weights/weight_1", W1, sizeof W1},
      {"m/data/weights/model_weights_config.json", CONFIG, (size_t)-1},
      {"m/models/model.json", MODEL, (size_t)-1},
      {"m/byteorder", "little", (size_t)-1},
  };
  int n = 0;
  for (int i = 0; i < 5; i++) {
    if (name && !strcmp(e[i].name, name)) {
      if (!data) continue;
      e[i].data = data, e[i].len = (size_t)-1;
    }
    e[n++] = e[i];
  }
  if (extra) e[n++] = (Entry){extra, "x", 1};
  write_zip(e, n);
}

// ---- reading them

// pt2_open must fail with exactly "m.pt2: error: msg".
static void open_err(const char *msg) {
  Arena a;
  arena_init(&a);
  Capture cap;
  cap_open(&cap, "m.pt2");
  Pt2 p;
  bool ok = pt2_open(&p, path, &a, &cap.d);
  char want[1024];
  snprintf(want, sizeof want, "m.pt2: error: %s\n", msg);
  ck_assert_msg(!ok, "opened; expected %s", msg);
  ck_assert_str_eq(cap_text(&cap), want);
  ck_assert_int_eq(cap.d.errors, 1);
  pt2_close(&p);
  cap_close(&cap);
  arena_free(&a);
}

START_TEST(test_good) {
  write_archive(NULL, NULL, NULL);
  Arena a;
  arena_init(&a);
  Capture cap;
  cap_open(&cap, "m.pt2");
  Pt2 p;
  ck_assert_msg(pt2_open(&p, path, &a, &cap.d), "%s", cap_text(&cap));
  ck_assert_str_eq(p.prefix, "m/");
  ck_assert_int_eq(p.schema_major, 8);
  ck_assert_int_eq(p.schema_minor, 20);
  ck_assert_int_eq(p.nweights, 3);
  ck_assert_ptr_nonnull(cJSON_GetObjectItem(p.model, "graph_module"));
  const Pt2Weight *w = pt2_weight(&p, "l.weight"), *b = pt2_weight(&p, "l.bias");
  const Pt2Weight *t = pt2_weight(&p, "t.weight");
  ck_assert_ptr_nonnull(w);
  ck_assert_ptr_nonnull(b);
  ck_assert_ptr_nonnull(t);
  ck_assert_ptr_null(pt2_weight(&p, "nope"));
  ck_assert_str_eq(w->entry, "m/data/weights/weight_0");
  ck_assert_str_eq(t->entry, w->entry);
  ck_assert_str_eq(w->dtype_name, "f32");
  ck_assert_int_eq(w->rank, 2);
  ck_assert_int_eq(w->sizes[0], 3);
  ck_assert_int_eq(w->sizes[1], 2);
  ck_assert_int_eq(w->numel, 6);
  ck_assert_int_eq(w->bytes, 24);
  ck_assert(w->is_param);
  float got[6];
  ck_assert(pt2_read_weight(&p, w, got, &cap.d));
  ck_assert_int_eq(memcmp(got, W0, sizeof W0), 0);
  ck_assert(pt2_read_weight(&p, t, got, &cap.d));
  ck_assert_int_eq(memcmp(got, W0, sizeof W0), 0);
  ck_assert(pt2_read_weight(&p, b, got, &cap.d));
  ck_assert_int_eq(memcmp(got, W1, sizeof W1), 0);
  ck_assert_str_eq(cap_text(&cap), "");
  pt2_close(&p);
  cap_close(&cap);
  arena_free(&a);
}
END_TEST

START_TEST(test_not_zip) {
  FILE *f = fopen(path, "w");
  fputs("{\"format\": \"pipec-model\"}\n", f);
  fclose(f);
  open_err("not a ZIP archive (torch.export.save writes one)");
}
END_TEST

START_TEST(test_missing_file) {
  unlink(path);
  open_err("cannot open the archive: No such file or directory");
}
END_TEST

START_TEST(test_directory) {
  snprintf(path, sizeof path, "%s", dir);
  open_err("the archive is a directory, not a regular file");
}
END_TEST

START_TEST(test_truncated) {
  write_archive(NULL, NULL, NULL);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_int_eq(truncate(path, st.st_size - 40), 0);
  open_err("truncated ZIP archive (no end of central directory record)");
}
END_TEST

START_TEST(test_dotdot) {
  write_archive(NULL, NULL, "m/data/../../evil");
  open_err("entry 'm/data/../../evil': an absolute name or one with '..' is refused");
}
END_TEST

START_TEST(test_absolute) {
  write_archive(NULL, NULL, "/etc/evil");
  open_err("entry '/etc/evil': an absolute name or one with '..' is refused");
}
END_TEST

START_TEST(test_byteorder) {
  write_archive("m/byteorder", "big", NULL);
  open_err("entry 'm/byteorder': only \"little\" (little-endian) is read");
}
END_TEST

// The central directory's compressed size of the first entry raised past the archive's end.
START_TEST(test_size_beyond) {
  write_archive(NULL, NULL, NULL);
  FILE *f = fopen(path, "r+b");
  ck_assert_ptr_nonnull(f);
  unsigned char buf[4096];
  size_t n = fread(buf, 1, sizeof buf, f);
  size_t cd = 0;
  for (size_t i = 0; i + 4 <= n; i++)
    if (!memcmp(buf + i, "PK\1\2", 4)) {
      cd = i;
      break;
    }
  ck_assert_uint_gt(cd, 0);
  unsigned char big[4] = {0x00, 0x00, 0x00, 0x10}; // 256 MiB, little-endian
  fseek(f, (long)(cd + 20), SEEK_SET);
  fwrite(big, 1, 4, f);
  fclose(f);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  char msg[256];
  snprintf(msg, sizeof msg,
           "entry 'm/data/weights/weight_0' declares 268435456 bytes, beyond the archive's %lld",
           (long long)st.st_size);
  open_err(msg);
}
END_TEST

START_TEST(test_no_model) {
  write_archive("m/models/model.json", NULL, NULL);
  open_err("no entry '<name>/models/model.json': not a torch.export archive");
}
END_TEST

START_TEST(test_no_config) {
  write_archive("m/data/weights/model_weights_config.json", NULL, NULL);
  open_err("no entry 'm/data/weights/model_weights_config.json'");
}
END_TEST

START_TEST(test_no_weight) {
  write_archive("m/data/weights/weight_1", NULL, NULL);
  open_err("weight 'l.bias': no entry 'm/data/weights/weight_1'");
}
END_TEST

START_TEST(test_schema_major) {
  write_archive("m/models/model.json", "{\"schema_version\": {\"major\": 9, \"minor\": 1}}", NULL);
  open_err(
      "entry 'm/models/model.json': schema_version 9.1 is not supported (supported majors: 8)");
}
END_TEST

START_TEST(test_schema_missing) {
  write_archive("m/models/model.json", "{\"graph_module\": {}}", NULL);
  open_err("entry 'm/models/model.json': no schema_version {major, minor}");
}
END_TEST

START_TEST(test_bad_json) {
  write_archive("m/models/model.json", "{\"schema_version\": ", NULL);
  open_err("entry 'm/models/model.json': not valid JSON (at byte 18)");
}
END_TEST

// weight_1 holds 4 bytes where f32 [3] needs 12.
START_TEST(test_weight_size) {
  write_archive("m/data/weights/weight_1", "abcd", NULL);
  open_err("weight 'l.bias': entry 'm/data/weights/weight_1' holds 4 bytes; f32 [3] needs 12");
}
END_TEST

static void config_err(const char *meta, const char *msg) {
  char cfg[1024];
  snprintf(cfg, sizeof cfg,
           "{\"config\": {\"l.weight\": {\"path_name\": \"weight_0\", \"is_param\": true, %s}}}",
           meta);
  write_archive("m/data/weights/model_weights_config.json", cfg, NULL);
  open_err(msg);
}

START_TEST(test_strides) {
  config_err(META("[{\"as_int\": 3}, {\"as_int\": 2}]", "[{\"as_int\": 1}, {\"as_int\": 3}]"),
             "weight 'l.weight': strides [1, 3] are not contiguous for sizes [3, 2] (save a "
             ".contiguous() copy)");
}
END_TEST

START_TEST(test_dtype) {
  config_err("\"tensor_meta\": {\"dtype\": 11, \"sizes\": [], \"strides\": []}",
             "weight 'l.weight': dtype 11 is not supported (ScalarType codes 1-8, 10, 12, 13, 28, "
             "34, 35)");
}
END_TEST

START_TEST(test_symbolic) {
  config_err(META("[{\"as_expr\": \"s0\"}, {\"as_int\": 2}]", "[{\"as_int\": 2}, {\"as_int\": 1}]"),
             "weight 'l.weight': sizes and strides must be lists of at most 8 non-negative "
             "{\"as_int\": n} of one length");
}
END_TEST

START_TEST(test_pickled) {
  config_err("\"use_pickle\": true", "weight 'l.weight' is pickled (use_pickle), which pipec never "
                                     "reads");
}
END_TEST

START_TEST(test_path_name) {
  char cfg[512];
  snprintf(cfg, sizeof cfg,
           "{\"config\": {\"l.bias\": {\"path_name\": \"../models/model.json\", %s}}}",
           META("[{\"as_int\": 3}]", "[{\"as_int\": 1}]"));
  write_archive("m/data/weights/model_weights_config.json", cfg, NULL);
  open_err("weight 'l.bias': path_name must be a file name of data/weights/");
}
END_TEST

// A flipped byte of weight_0's data: the archive opens (no weight is read), the read fails.
START_TEST(test_crc) {
  write_archive(NULL, NULL, NULL);
  FILE *f = fopen(path, "r+b");
  ck_assert_ptr_nonnull(f);
  unsigned char buf[4096];
  size_t n = fread(buf, 1, sizeof buf, f);
  size_t at = 0;
  for (size_t i = 0; i + sizeof W0 <= n; i++)
    if (!memcmp(buf + i, W0, sizeof W0)) at = i;
  ck_assert_uint_gt(at, 0);
  buf[at] ^= 1;
  fseek(f, (long)at, SEEK_SET);
  fwrite(buf + at, 1, 1, f);
  fclose(f);
  Arena a;
  arena_init(&a);
  Capture cap;
  cap_open(&cap, "m.pt2");
  Pt2 p;
  ck_assert_msg(pt2_open(&p, path, &a, &cap.d), "%s", cap_text(&cap));
  float got[6];
  ck_assert(!pt2_read_weight(&p, pt2_weight(&p, "l.weight"), got, &cap.d));
  ck_assert_str_eq(cap_text(&cap), "m.pt2: error: entry 'm/data/weights/weight_0': CRC error\n");
  pt2_close(&p);
  cap_close(&cap);
  arena_free(&a);
}
END_TEST

// BUG (found by tests/fuzz/fuzz_pt2): names with control bytes reached the one-line messages raw
// (an entry, so also the archive's folder, and a weight's name: cJSON reads raw control bytes in a
// key too), and an archive holding two entries of one name opened, reading the first where other
// ZIP readers (Python's zipfile) read the last. Each is now refused.
START_TEST(test_control_entry_name) {
  write_archive(NULL, NULL, "m/x\ny");
  open_err("entry 'm/x\\ny': a name with a control character is refused");
}
END_TEST

START_TEST(test_control_weight_name) {
  char cfg[512];
  snprintf(cfg, sizeof cfg, "{\"config\": {\"l.\\u001bbias\": {\"path_name\": \"weight_1\", %s}}}",
           META("[{\"as_int\": 3}]", "[{\"as_int\": 1}]"));
  write_archive("m/data/weights/model_weights_config.json", cfg, NULL);
  open_err("weight 'l.\\x1bbias': a name with a control character is refused");
}
END_TEST

// Replaces the bytes from by to (of one length) wherever they are in the archive's file.
static void patch_file(const char *from, const char *to) {
  FILE *f = fopen(path, "r+b");
  ck_assert_ptr_nonnull(f);
  unsigned char buf[8192];
  size_t n = fread(buf, 1, sizeof buf, f), len = strlen(from);
  ck_assert_uint_lt(n, sizeof buf);
  for (size_t i = 0; i + len <= n; i++)
    if (!memcmp(buf + i, from, len)) memcpy(buf + i, to, len);
  rewind(f);
  ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
  fclose(f);
}

START_TEST(test_duplicate_entry) {
  write_archive(NULL, NULL, "m/data/weights/weight_Z"); // then renamed weight_1: libzip adds no
  patch_file("weight_Z", "weight_1");                   // second entry of one name itself
  open_err("entry 'm/data/weights/weight_1': a second entry of one name is refused");
}
END_TEST

int main(void) {
  Suite *s = suite_create("pt2");
  TCase *tc = tcase_create("pt2");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_good);
  tcase_add_test(tc, test_not_zip);
  tcase_add_test(tc, test_missing_file);
  tcase_add_test(tc, test_directory);
  tcase_add_test(tc, test_truncated);
  tcase_add_test(tc, test_dotdot);
  tcase_add_test(tc, test_absolute);
  tcase_add_test(tc, test_size_beyond);
  tcase_add_test(tc, test_no_model);
  tcase_add_test(tc, test_no_config);
  tcase_add_test(tc, test_no_weight);
  tcase_add_test(tc, test_schema_major);
  tcase_add_test(tc, test_schema_missing);
  tcase_add_test(tc, test_bad_json);
  tcase_add_test(tc, test_weight_size);
  tcase_add_test(tc, test_strides);
  tcase_add_test(tc, test_dtype);
  tcase_add_test(tc, test_symbolic);
  tcase_add_test(tc, test_pickled);
  tcase_add_test(tc, test_path_name);
  tcase_add_test(tc, test_crc);
  tcase_add_test(tc, test_byteorder);
  tcase_add_test(tc, test_control_entry_name);
  tcase_add_test(tc, test_control_weight_name);
  tcase_add_test(tc, test_duplicate_entry);
  suite_add_tcase(s, tc);
  return run_suite(s);
}

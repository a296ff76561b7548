// data.c: token streams and tables, and the batches drawn from them.
//
// Batches are a pure function of (seed, split, step, microbatch, row), so every rank computes the
// same rows without talking to the others. Exact definitions (uint64 arithmetic modulo 2^64,
// pr_splitmix64 as in init.c):
//
//   draw(seed, split, step, mb, row):
//       s = seed ^ (split * 0xD1B54A32D192ED03) ^ (step * 0xAEF17502108EF2D9)
//                ^ (mb * 0xDB4F0B9175AE2165) ^ (row * 0x8CB92BA72F3D8DD7)
//       return pr_splitmix64(&s)              (one draw: s += 0x9e3779b97f4a7c15, then mix)
//
//   Token batches (pr_tokens_batch): the split is tokens[base, base + n_split) with
//   (base, n_split) = (0, n_train) for PR_TRAIN (split = 0) and (n_train, n - n_train) for
//   PR_VAL (split = 1). Row r of microbatch mb of step `step` starts at
//       off = base + draw(seed, split, step, mb, r) % (n_split - T)
//   and x[r] = tokens[off .. off+T), y[r] = tokens[off+1 .. off+T] (nanoGPT's get_batch window).
//
//   Table batches (pr_table_batch): training row r of (step, mb) is row
//       draw(seed, 0, step, mb, r) % n_train
//   of the (shuffled) table, drawn with replacement. In order (PrTableModel.in_order,
//   training.data.shuffle false: no shuffle, file order) it is row
//       (step * step_rows + mb * B + r) % n_train          (exact integers; step_rows = the batch)
//   so a step reads the next `batch` training rows, microbatch after microbatch, wrapping around.
//   Validation batch k (pr_table_val_batch) is validation rows (k*B + i) % n_val, i = 0..B-1
//   (sequential, wrapping around); train_frac 1 leaves no validation rows, and no batches.
//
//   The whole validation split of a token stream (pr_tokens_val_seq_batch): W = (n_val - 1) / T
//   consecutive non-overlapping windows, window w starting at n_train + w*T; batch k holds
//   windows k*B .. k*B+B-1 (rows past W repeat window 0 and are not counted).
//
//   Table shuffle (Fisher-Yates, at open): perm = [0, 1, ..., rows-1]; s = seed ^
//   0x2545F4914F6CDD1D;
//       for i = rows-1 down to 1: j = pr_splitmix64(&s) % (i + 1); swap(perm[i], perm[j])
//   shuffled row k = file row perm[k] (data rows counted from 0, header and blank lines excluded);
//   the first n_train = floor(rows * train_frac) shuffled rows are the training split. In order,
//   and with --predict, perm is the identity: the rows stay in file order.
//   A table row is a row of 4-byte cells (CSV: one per field; npy: the fed inputs' files' values
//   one after the other); each fed input (PrFeed) takes its cells of the row, so all inputs of a
//   batch row come from one table row. f32 values are (float)(value * scale), value parsed as a
//   double; a value that is not finite ("nan", "inf", 1e999) or whose feature is not a finite
//   float32 (1e300) stops the program; i32 values are integers from 0, never scaled.
//
//   Text streams: vocabulary = the sorted distinct bytes of the whole file; token = index of the
//   byte in it; n_train = floor(n * train_frac) (floor of the double product).
#pragma GCC optimize("fp-contract=off")
#include "pipert.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define K_SPLIT   0xD1B54A32D192ED03ULL
#define K_STEP    0xAEF17502108EF2D9ULL
#define K_MB      0xDB4F0B9175AE2165ULL
#define K_ROW     0x8CB92BA72F3D8DD7ULL
#define K_SHUFFLE 0x2545F4914F6CDD1DULL

static uint64_t batch_draw(uint64_t seed, uint64_t split, int64_t step, int64_t mb, int64_t row) {
  uint64_t s = seed ^ (split * K_SPLIT) ^ ((uint64_t)step * K_STEP) ^ ((uint64_t)mb * K_MB) ^
               ((uint64_t)row * K_ROW);
  return pr_splitmix64(&s);
}

static void check_frac(const char *path, double frac) {
  prCheck(frac > 0.0 && frac <= 1.0, "the training fraction must be in (0, 1], e.g. 0.9",
          "%s: training fraction %g is out of range", path, frac);
}

// Reads a whole regular file into a malloc'd buffer; `what` names it in messages.
static unsigned char *read_all(const char *path, const char *what, size_t *size) {
  FILE *f = fdopen(pr_open_regular(path, what), "rb");
  prCheck(f != NULL, "the machine is out of memory or file descriptors", "cannot read '%s': %s",
          path, strerror(errno));
  struct stat st;
  prCheck(fstat(fileno(f), &st) == 0, "give a regular file", "cannot stat '%s': %s", path,
          strerror(errno));
  size_t n = (size_t)st.st_size;
  unsigned char *buf = malloc(n ? n : 1);
  prCheck(buf != NULL, "the file is too large for this machine's memory",
          "out of memory reading '%s' (%zu bytes)", path, n);
  size_t got = fread(buf, 1, n, f);
  prCheck(got == n && !ferror(f), "the file changed while it was read, or the disk failed",
          "error reading '%s' (%zu of %zu bytes read)", path, got, n);
  fclose(f);
  *size = n;
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Token streams

bool pr_data_predict;
char pr_data_predict_vocab[256];
int pr_data_predict_nvocab;

static void split_tokens(PrTokens *t, const char *path, double frac) {
  if (pr_data_predict) { // the whole stream in order
    t->n_train = 0;
    return;
  }
  double nt = floor((double)t->n * frac);
  t->n_train = (int64_t)nt;
  prCheck(t->n_train >= 1, "use a larger file or a larger training fraction",
          "%s: the training split is empty (%lld tokens, fraction %g)", path, (long long)t->n,
          frac);
}

void pr_tokens_open_text(PrTokens *t, const char *path, double train_frac) {
  memset(t, 0, sizeof *t);
  check_frac(path, train_frac);
  size_t n;
  unsigned char *buf = read_all(path, "data file", &n);
  prCheck(n > 0, "give a non-empty text file", "%s: the file is empty", path);
  int present[256] = {0};
  if (pr_data_predict && pr_data_predict_nvocab > 0) { // the checkpoint's vocabulary
    for (int k = 0; k < pr_data_predict_nvocab; k++)
      present[(unsigned char)pr_data_predict_vocab[k]] = 1;
    for (size_t i = 0; i < n; i++)
      if (!present[buf[i]]) {
        unsigned char c = buf[i];
        free(buf);
        if (c > 0x20 && c < 0x7f)
          pr_fail(__FILE__, __LINE__,
                  "predict on text made of the characters the model was trained on",
                  "%s: byte offset %zu: character '%c' is not in the checkpoint's vocabulary (%d "
                  "characters)",
                  path, i, c, pr_data_predict_nvocab);
        pr_fail(__FILE__, __LINE__,
                "predict on text made of the characters the model was trained on",
                "%s: byte offset %zu: byte 0x%02x is not in the checkpoint's vocabulary (%d "
                "characters)",
                path, i, c, pr_data_predict_nvocab);
      }
  } else {
    for (size_t i = 0; i < n; i++) present[buf[i]] = 1;
  }
  int id[256];
  int vocab = 0;
  for (int c = 0; c < 256; c++) {
    id[c] = -1;
    if (present[c]) {
      t->chars[vocab] = (char)c;
      id[c] = vocab++;
    }
  }
  t->vocab = vocab;
  t->n = (int64_t)n;
  t->tokens = malloc(n * sizeof(int32_t));
  prCheck(t->tokens != NULL, "the file is too large for this machine's memory",
          "out of memory for %zu tokens of '%s'", n, path);
  for (size_t i = 0; i < n; i++) t->tokens[i] = id[buf[i]];
  free(buf);
  split_tokens(t, path, train_frac);
}

void pr_tokens_open_u16(PrTokens *t, const char *path, double train_frac) {
  memset(t, 0, sizeof *t);
  check_frac(path, train_frac);
  size_t n;
  unsigned char *buf = read_all(path, "data file", &n);
  prCheck(n > 0, "give a non-empty token file", "%s: the file is empty", path);
  prCheck(n % 2 == 0, "a token file holds little-endian uint16 ids (2 bytes each)",
          "%s: the size (%zu bytes) is odd; the last token is incomplete at byte offset %zu", path,
          n, n - 1);
  t->n = (int64_t)(n / 2);
  t->tokens = malloc((size_t)t->n * sizeof(int32_t));
  prCheck(t->tokens != NULL, "the file is too large for this machine's memory",
          "out of memory for %lld tokens of '%s'", (long long)t->n, path);
  int maxid = 0;
  for (int64_t i = 0; i < t->n; i++) {
    int v = buf[2 * i] | (buf[2 * i + 1] << 8);
    t->tokens[i] = v;
    if (v > maxid) maxid = v;
  }
  free(buf);
  t->vocab = maxid + 1;
  split_tokens(t, path, train_frac);
}

void pr_tokens_batch(const PrTokens *t, int split, uint64_t seed, int64_t step, int64_t mb,
                     int64_t B, int64_t T, int32_t *x, int32_t *y) {
  prCheck(split == PR_TRAIN || split == PR_VAL, "split is PR_TRAIN or PR_VAL",
          "pr_tokens_batch: bad split %d", split);
  prCheck(step >= 0 && mb >= 0 && B >= 0 && T >= 1, "internal error in the generated program",
          "pr_tokens_batch: bad arguments (step %lld, mb %lld, B %lld, T %lld)", (long long)step,
          (long long)mb, (long long)B, (long long)T);
  int64_t base = split == PR_TRAIN ? 0 : t->n_train;
  int64_t n_split = split == PR_TRAIN ? t->n_train : t->n - t->n_train;
  prCheck(n_split >= T + 1,
          "use more data, a smaller context length, or a different training fraction",
          "the %s split has %lld tokens; a window of context %lld needs at least %lld",
          split == PR_TRAIN ? "training" : "validation", (long long)n_split, (long long)T,
          (long long)(T + 1));
  uint64_t range = (uint64_t)(n_split - T);
  for (int64_t r = 0; r < B; r++) {
    int64_t off = base + (int64_t)(batch_draw(seed, (uint64_t)split, step, mb, r) % range);
    const int32_t *w = t->tokens + off;
    if (x) memcpy(x + r * T, w, (size_t)T * sizeof(int32_t));
    if (y) memcpy(y + r * T, w + 1, (size_t)T * sizeof(int32_t));
  }
}

void pr_tokens_check_windows(const PrTokens *t, const char *path, int64_t T) {
  for (int split = pr_data_predict ? PR_VAL : PR_TRAIN; split <= PR_VAL; split++) {
    int64_t n_split = split == PR_TRAIN ? t->n_train : t->n - t->n_train;
    prCheck(n_split >= T + 1,
            "use more data, a smaller context length, or a different training fraction",
            "%s: the %s split has %lld tokens; a window of context %lld needs at least %lld", path,
            split == PR_TRAIN ? "training" : "validation", (long long)n_split, (long long)T,
            (long long)(T + 1));
  }
}

void pr_tokens_check_ids(const PrTokens *t, const char *path, int64_t bound, const char *what) {
  if (t->vocab <= bound) return;
  const char *hint = "use data tokenized for this model, or a model with a larger vocabulary";
  // A text stream's vocabulary is its sorted distinct bytes (chars[1] > chars[0] >= 0 when it
  // has two or more); a uint16 stream leaves chars zero. Text ids are ranks, not positions: the
  // message names the first byte whose rank is out of bound, and the file's count.
  bool text = t->vocab >= 2 && t->chars[1] != 0;
  for (int64_t i = 0; i < t->n; i++) {
    if (t->tokens[i] < bound) continue;
    if (!text)
      pr_fail(__FILE__, __LINE__, hint, "%s: token %lld (byte offset %lld) has id %d but %s", path,
              (long long)i, (long long)(2 * i), t->tokens[i], what);
    unsigned char c = (unsigned char)t->chars[t->tokens[i]];
    char shown[16];
    snprintf(shown, sizeof shown, c > 0x20 && c < 0x7f ? "character '%c'" : "byte 0x%02x", c);
    pr_fail(__FILE__, __LINE__, hint,
            "%s: byte offset %lld: %s has id %d (the file has %d distinct characters) but %s",
            path, (long long)i, shown, t->tokens[i], t->vocab, what);
  }
}

int64_t pr_tokens_val_batches(const PrTokens *t, int64_t B, int64_t T) {
  prCheck(B >= 1 && T >= 1, "internal error in the generated program",
          "pr_tokens_val_batches: bad arguments (B %lld, T %lld)", (long long)B, (long long)T);
  int64_t n_val = t->n - t->n_train, windows = n_val >= 1 ? (n_val - 1) / T : 0;
  prCheck(windows >= 1, "use more data, a smaller context length, or a smaller training fraction",
          "the validation split has %lld tokens; a window of context %lld needs at least %lld",
          (long long)n_val, (long long)T, (long long)(T + 1));
  return (windows + B - 1) / B;
}

int64_t pr_tokens_val_seq_batch(const PrTokens *t, int64_t k, int64_t B, int64_t T, int32_t *x,
                                int32_t *y) {
  int64_t n_val = t->n - t->n_train, windows = n_val >= 1 ? (n_val - 1) / T : 0;
  prCheck(windows >= 1 && k >= 0 && k <= (windows - 1) / B && B >= 1,
          "internal error in the generated program",
          "pr_tokens_val_seq_batch: bad batch %lld of %lld rows (%lld windows)", (long long)k,
          (long long)B, (long long)windows);
  for (int64_t r = 0; r < B; r++) {
    int64_t w = k * B + r;
    if (w >= windows) w = 0; // padding rows of the last batch: not counted
    const int32_t *p = t->tokens + t->n_train + w * T;
    if (x) memcpy(x + r * T, p, (size_t)T * sizeof(int32_t));
    if (y) memcpy(y + r * T, p + 1, (size_t)T * sizeof(int32_t));
  }
  int64_t real = windows - k * B;
  return real > B ? B : real;
}

void pr_tokens_close(PrTokens *t) {
  free(t->tokens);
  memset(t, 0, sizeof *t);
}

// ---------------------------------------------------------------------------------------------
// Tables

// Shuffles rows (Fisher-Yates, see the header comment; in_order: not at all), sets n_train.
static void shuffle_split(PrTable *t, const char *path, double frac, uint64_t seed, bool in_order) {
  int64_t rows = t->rows, C = t->ncells;
  prCheck(rows >= 1, "give a file with at least one data row", "%s: no data rows", path);
  int64_t *perm = malloc((size_t)rows * sizeof *perm);
  uint32_t *cells = malloc((size_t)(rows * C) * sizeof(uint32_t) + 1);
  prCheck(perm && cells, "the table is too large for this machine's memory",
          "out of memory shuffling '%s'", path);
  for (int64_t i = 0; i < rows; i++) perm[i] = i;
  uint64_t s = seed ^ K_SHUFFLE;
  for (int64_t i = rows - 1; !pr_data_predict && !in_order && i >= 1; i--) { // else file order
    int64_t j = (int64_t)(pr_splitmix64(&s) % (uint64_t)(i + 1));
    int64_t tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
  }
  for (int64_t k = 0; k < rows; k++)
    memcpy(cells + k * C, t->cells + perm[k] * C, (size_t)C * sizeof(uint32_t));
  free(perm);
  free(t->cells);
  t->cells = cells;
  if (pr_data_predict) { // every row, in file order, is "validation"
    t->n_train = 0;
    return;
  }
  t->n_train = (int64_t)floor((double)rows * frac);
  prCheck(t->n_train >= 1, "use more rows or a larger training fraction",
          "%s: the training split is empty (%lld rows, fraction %g)", path, (long long)rows, frac);
  // An empty validation split only where asked for (fraction 1: no evaluation, pr_table_val_*).
  prCheck(t->n_train < rows || frac >= 1.0, "use more rows or a training fraction below 1",
          "%s: the validation split is empty (%lld rows, fraction %g)", path, (long long)rows,
          frac);
}

// One line of a (possibly gzip-compressed) file, without its newline; NULL at the end.
static char *gz_line(gzFile gz, const char *path, char **buf, size_t *cap, int64_t lineno) {
  size_t len = 0;
  for (;;) {
    if (*cap - len < 2) {
      *cap = *cap ? *cap * 2 : 4096;
      *buf = realloc(*buf, *cap);
      prCheck(*buf != NULL, "the file has an absurdly long line", "%s:%lld: out of memory", path,
              (long long)lineno);
    }
    if (!gzgets(gz, *buf + len,
                (int)(*cap - len > (size_t)1 << 30 ? (size_t)1 << 30 : *cap - len))) {
      int err = 0;
      const char *msg = gzerror(gz, &err);
      prCheck(err == Z_OK, "the file is damaged or truncated (check it with gzip -t)",
              "%s:%lld: read error: %s", path, (long long)lineno,
              err == Z_ERRNO ? strerror(errno) : msg);
      if (len == 0) return NULL;
      break;
    }
    len += strlen(*buf + len);
    if (len > 0 && (*buf)[len - 1] == '\n') break;
  }
  while (len > 0 && ((*buf)[len - 1] == '\n' || (*buf)[len - 1] == '\r')) (*buf)[--len] = '\0';
  return *buf;
}

static int is_blank(int c) {
  return c == ' ' || c == '\t';
}

typedef enum Num {
  NUM_OK,       // a finite double
  NUM_INFINITE, // a number, but not a finite double: "nan", "inf", "1e999"
  NUM_BAD       // not a number
} Num;

// Parses one whole (trimmed) field as a double.
static Num parse_number(const char *s, size_t len, double *out) {
  char tmp[128];
  if (len == 0 || len >= sizeof tmp) return NUM_BAD;
  memcpy(tmp, s, len);
  tmp[len] = '\0';
  char *end;
  errno = 0;
  double v = strtod(tmp, &end);
  if (end != tmp + len) return NUM_BAD;
  if (!isfinite(v)) return NUM_INFINITE;
  *out = v;
  return NUM_OK;
}

// A feature as the model sees it, (float)(v * scale); the program stops when that is not a
// finite float32 (a double beyond 3.4e38 would silently become inf and every loss NaN).
static float feature(double v, double scale, const char *path, const char *where) {
  float f = (float)(v * scale);
  if (!isfinite(f)) {
    char times[64] = "";
    if (scale != 1.0) snprintf(times, sizeof times, " times the data scale %g", scale);
    pr_fail(__FILE__, __LINE__, "features must be finite float32 numbers (|x| <= 3.4e38)",
            "%s%s: feature %.9g%s is outside the float32 range", path, where, v, times);
  }
  return f;
}

// Whether m is a features-then-label table (one f32 (B,F) input, then one i32 class target of one
// value per sample right after it): its messages speak of features and the label, as they always
// have.
static bool legacy_model(const PrTableModel *m) {
  const PrFeed *x = &m->feed[0], *y = &m->feed[1];
  return m->nfeeds == 2 && !x->i32 && x->ndim == 1 && x->col == 0 && y->i32 && y->target &&
         y->width == 1 && y->col == x->width;
}

// The hint of a feature-count mismatch: the model's input and its width (exits follow: not freed).
static const char *features_hint(const PrFeed *x) {
  const char *fmt = "the model's input '%s' has %lld features";
  const char *name = x->name ? x->name : "";
  int n = snprintf(NULL, 0, fmt, name, (long long)x->width);
  char *h = n > 0 ? malloc((size_t)n + 1) : NULL;
  if (!h) return "give data with as many features per row as the model's input";
  snprintf(h, (size_t)n + 1, fmt, name, (long long)x->width);
  return h;
}

// An i32 value of feed f, checked: an integer from 0, below f's classes, within int32. `where`
// names the file's line and column (":5:129:") or row (": row 4:"); legacy: the label's words.
static int32_t check_int(const PrFeed *f, bool legacy, double v, const char *text, int textlen,
                         const char *path, const char *where) {
  const char *hint = legacy ? "the last field of a row is the class label 0, 1, 2, ..."
                            : "an i32 input takes integers from 0 (class ids, token ids)";
  if (v != floor(v) && legacy)
    pr_fail(__FILE__, __LINE__, hint, "%s%s label '%.*s' is not an integer", path, where, textlen,
            text);
  if (v != floor(v))
    pr_fail(__FILE__, __LINE__, hint, "%s%s value '%.*s' of i32 input '%s' is not an integer",
            path, where, textlen, text, f->name);
  if (v < 0 && legacy)
    pr_fail(__FILE__, __LINE__, hint, "%s%s label %.0f is negative", path, where, v);
  if (v < 0)
    pr_fail(__FILE__, __LINE__, hint, "%s%s value %.0f of i32 input '%s' is negative", path,
            where, v, f->name);
  if (f->classes > 0 && v >= (double)f->classes) {
    char h[96];
    snprintf(h, sizeof h, "use %s 0..%lld, or a model with more classes",
             f->target ? "labels" : "ids", (long long)f->classes - 1);
    if (f->target)
      pr_fail(__FILE__, __LINE__, h, "%s%s label %.0f is out of range: the model has %lld classes",
              path, where, v, (long long)f->classes);
    pr_fail(__FILE__, __LINE__, h,
            "%s%s value %.0f of i32 input '%s' is out of range: the model takes ids below %lld",
            path, where, v, f->name, (long long)f->classes);
  }
  prCheck(v <= (legacy ? 1e7 : 2147483647.0), hint, "%s%s %s %.0f is too large", path, where,
          legacy ? "label" : "value", v);
  return (int32_t)v;
}

typedef struct Field {
  const char *s; // trimmed text
  size_t len;
  int64_t col; // 1-based byte column of the raw field's start
} Field;

// Splits line into fields (by ','), trimming blanks; returns the count.
static int64_t split_fields(char *line, Field **fields, int64_t *cap, const char *path,
                            int64_t lineno) {
  int64_t n = 0;
  const char *p = line;
  for (;;) {
    const char *start = p;
    const char *e = strchr(p, ',');
    if (!e) e = p + strlen(p);
    if (n == *cap) {
      *cap = *cap ? *cap * 2 : 128;
      *fields = realloc(*fields, (size_t)*cap * sizeof **fields);
      prCheck(*fields != NULL, "the CSV line is too long", "%s:%lld: out of memory splitting the line",
              path, (long long)lineno);
    }
    const char *a = start, *b = e;
    while (a < b && is_blank(*a)) a++;
    while (b > a && is_blank(b[-1])) b--;
    (*fields)[n++] = (Field){a, (size_t)(b - a), (int64_t)(start - line) + 1};
    if (*e == '\0') break;
    p = e + 1;
  }
  return n;
}

// The model of a features-then-label CSV (want NULL) of ncols fields.
static void default_model(PrTableModel *m, int64_t ncols) {
  memset(m, 0, sizeof *m);
  m->nfeeds = 2;
  m->columns = ncols;
  m->feed[0] = (PrFeed){.name = "", .width = ncols - 1, .ndim = 1, .dims = {ncols - 1}};
  m->feed[1] = (PrFeed){.name = "", .i32 = true, .target = true, .width = 1, .col = ncols - 1};
}

// What a CSV column is read as: not at all, an f32 value or an i32 value (of feed `feed`, the one
// with the smallest bound among those that read it).
typedef struct Column {
  char kind; // 0, 'f', 'i'
  int feed;
} Column;

// A CSV table's columns, from the model, once the first data row gave their count (ncols);
// checks that the rows hold the columns the model reads.
static Column *csv_columns(const PrTableModel *m, bool legacy, int64_t ncols, const char *path,
                           int64_t lineno) {
  if (legacy && ncols - 1 != m->feed[0].width)
    pr_fail(__FILE__, __LINE__, features_hint(&m->feed[0]),
            "%s:%lld: the row has %lld features (then its label) but the model takes %lld", path,
            (long long)lineno, (long long)(ncols - 1), (long long)m->feed[0].width);
  if (m->columns > 0 && ncols != m->columns) {
    char list[512] = "";
    size_t n = 0;
    for (int k = 0; k < m->nfeeds && n < sizeof list; k++) {
      const PrFeed *f = &m->feed[k];
      n += (size_t)snprintf(list + n, sizeof list - n, "%s%lld..%lld into '%s'", k ? ", " : "",
                            (long long)f->col, (long long)(f->col + f->width - 1), f->name);
    }
    pr_fail(__FILE__, __LINE__,
            "a row holds the inputs' values in order (data.input, then data.target), or "
            "training.data.columns says which columns each reads",
            "%s:%lld: the row has %lld fields but the model reads %lld (columns %s)", path,
            (long long)lineno, (long long)ncols, (long long)m->columns, list);
  }
  Column *c = calloc((size_t)ncols, sizeof *c);
  prCheck(c != NULL, "the CSV line is too long", "%s:%lld: out of memory", path, (long long)lineno);
  for (int k = 0; k < m->nfeeds; k++) {
    const PrFeed *f = &m->feed[k];
    if (f->col + f->width > ncols)
      pr_fail(__FILE__, __LINE__, "check training.data.columns against the file",
              "%s:%lld: the row has %lld fields but input '%s' reads columns %lld..%lld "
              "(0-based)",
              path, (long long)lineno, (long long)ncols, f->name, (long long)f->col,
              (long long)(f->col + f->width - 1));
    for (int64_t j = f->col; j < f->col + f->width; j++) {
      Column *cj = &c[j];
      const PrFeed *o = cj->kind ? &m->feed[cj->feed] : NULL;
      if (!o || (f->i32 && f->classes > 0 && (o->classes == 0 || f->classes < o->classes)))
        *cj = (Column){f->i32 ? 'i' : 'f', k};
    }
  }
  return c;
}

// The CSV being read: an error in it exits with the file open, and leak checkers must find its
// state reachable (a local alone is not always kept where they look; volatile: the store stays).
static gzFile volatile csv_open;

void pr_table_open_csv(PrTable *t, const char *path, double train_frac, uint64_t seed,
                       double scale, const PrTableModel *want) {
  memset(t, 0, sizeof *t);
  check_frac(path, train_frac);
  int fd = pr_open_regular(path, "data file");
  errno = 0;
  gzFile gz = csv_open = gzdopen(fd, "rb");
  prCheck(gz != NULL, "the machine is out of memory", "cannot read '%s': %s", path,
          errno ? strerror(errno) : "gzdopen failed");
  char *buf = NULL;
  size_t cap = 0;
  Field *fields = NULL;
  Column *cols = NULL;
  PrTableModel guess; // want NULL: features, then the label
  bool in_order = want && want->in_order;
  t->step_rows = in_order ? want->step_rows : 0;
  bool legacy = !want || (legacy_model(want) && want->columns == want->feed[0].width + 1);
  const char *hint_bad = legacy ? "every field is a number; the last one is the label"
                                : "every field is a number";
  int64_t fcap = 0, rcap = 0, ncols = 0, first_line = 0;
  bool seen_first = false;
  for (int64_t lineno = 1;; lineno++) {
    char *line = gz_line(gz, path, &buf, &cap, lineno);
    if (!line) break;
    const char *q = line;
    while (is_blank(*q)) q++;
    if (*q == '\0') continue; // blank line
    int64_t nf = split_fields(line, &fields, &fcap, path, lineno);
    if (!seen_first) {
      seen_first = true;
      double dummy; // a header's first field is a name; "nan" or "inf" is a bad number
      if (parse_number(fields[0].s, fields[0].len, &dummy) == NUM_BAD) continue;
    }
    if (ncols == 0) {
      prCheck(want || nf >= 2, "each row holds the features and then the integer label",
              "%s:%lld: only %lld field; expected at least one feature and a label", path,
              (long long)lineno, (long long)nf);
      ncols = nf;
      first_line = lineno;
      if (!want) default_model(&guess, ncols), want = &guess;
      cols = csv_columns(want, legacy, ncols, path, lineno);
      t->ncells = ncols;
      t->nfeeds = want->nfeeds;
      for (int k = 0; k < want->nfeeds; k++)
        t->off[k] = want->feed[k].col, t->width[k] = want->feed[k].width;
    }
    if (nf < ncols)
      pr_fail(__FILE__, __LINE__, "every row has the same number of fields",
              "%s:%lld:%zu: missing field: the row has %lld fields, line %lld has %lld", path,
              (long long)lineno, strlen(line) + 1, (long long)nf, (long long)first_line,
              (long long)ncols);
    if (nf > ncols)
      pr_fail(__FILE__, __LINE__, "every row has the same number of fields",
              "%s:%lld:%lld: extra field: the row has %lld fields, line %lld has %lld", path,
              (long long)lineno, (long long)fields[ncols].col, (long long)nf, (long long)first_line,
              (long long)ncols);
    if (t->rows + 1 > rcap) {
      rcap = rcap ? rcap * 2 : 1024;
      prCheck(rcap <= INT64_MAX / 4 / ncols, "the table is too large for this machine's memory",
              "%s:%lld: too many cells", path, (long long)lineno);
      t->cells = realloc(t->cells, (size_t)(rcap * ncols) * sizeof(uint32_t));
      prCheck(t->cells != NULL, "the table is too large for this machine's memory",
              "out of memory reading '%s'", path);
    }
    uint32_t *row = t->cells + t->rows * ncols;
    for (int64_t c = 0; c < nf; c++) {
      const Field *f = &fields[c];
      double v;
      if (f->len == 0)
        pr_fail(__FILE__, __LINE__, hint_bad, "%s:%lld:%lld: empty field (field %lld)", path,
                (long long)lineno, (long long)f->col, (long long)(c + 1));
      Num kind = parse_number(f->s, f->len, &v);
      if (kind != NUM_OK)
        pr_fail(__FILE__, __LINE__,
                kind == NUM_BAD ? hint_bad
                : legacy        ? "features and labels must be finite numbers"
                                : "every value must be a finite number",
                "%s:%lld:%lld: field %lld is not a %snumber: '%.*s'", path, (long long)lineno,
                (long long)f->col, (long long)(c + 1), kind == NUM_BAD ? "" : "finite ",
                f->len > 40 ? 40 : (int)f->len, f->s);
      char where[64];
      row[c] = 0;
      if (cols[c].kind == 'f') {
        snprintf(where, sizeof where, ":%lld:%lld", (long long)lineno, (long long)f->col);
        float x = feature(v, scale, path, where);
        memcpy(&row[c], &x, sizeof x);
      } else if (cols[c].kind == 'i') {
        snprintf(where, sizeof where, ":%lld:%lld:", (long long)lineno, (long long)f->col);
        int32_t i = check_int(&want->feed[cols[c].feed], legacy, v, f->s,
                              f->len > 40 ? 40 : (int)f->len, path, where);
        memcpy(&row[c], &i, sizeof i);
      }
    }
    t->rows++;
  }
  gzclose(gz);
  csv_open = NULL;
  free(buf);
  free(fields);
  free(cols);
  prCheck(t->rows >= 1, legacy ? "the file needs at least one row of numbers (features, then the label)"
                               : "the file needs at least one row of numbers",
          "%s: no data rows", path);
  shuffle_split(t, path, train_frac, seed, in_order);
}

// .npy ---------------------------------------------------------------------------------------

typedef struct Npy {
  char kind; // 'f', 'i', 'u'
  int size;  // bytes per element
  int ndim;
  int64_t shape[8];
  size_t data_off;
  unsigned char *buf;
  size_t file_size;
} Npy;

// Finds "'key':" in the header dict and returns a pointer after the colon and blanks.
static const char *npy_key(const char *h, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "'%s'", key);
  const char *p = strstr(h, pat);
  if (!p) {
    snprintf(pat, sizeof pat, "\"%s\"", key);
    p = strstr(h, pat);
  }
  if (!p) return NULL;
  p += strlen(pat);
  while (*p == ' ') p++;
  if (*p != ':') return NULL;
  p++;
  while (*p == ' ') p++;
  return p;
}

static void npy_read(Npy *a, const char *path, const char *what) {
  memset(a, 0, sizeof *a);
  a->buf = read_all(path, what, &a->file_size);
  const unsigned char *b = a->buf;
  size_t n = a->file_size;
  const char *hint = "give a .npy file written by numpy.save";
  prCheck(n >= 10 && memcmp(b, "\x93NUMPY", 6) == 0, hint,
          "%s: not a .npy file (bad magic at byte offset 0)", path);
  int major = b[6];
  size_t hlen, hstart;
  if (major == 1) {
    hlen = (size_t)b[8] | ((size_t)b[9] << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    prCheck(n >= 12, hint, "%s: truncated .npy header at byte offset %zu", path, n);
    hlen = (size_t)b[8] | ((size_t)b[9] << 8) | ((size_t)b[10] << 16) | ((size_t)b[11] << 24);
    hstart = 12;
  } else {
    pr_fail(__FILE__, __LINE__, hint, "%s: unsupported .npy format version %d.%d (byte offset 6)",
            path, major, b[7]);
  }
  prCheck(hlen <= n - hstart, hint,
          "%s: the .npy header (%zu bytes at byte offset %zu) runs past the end of the file "
          "(%zu bytes)",
          path, hlen, hstart, n);
  char *h = malloc(hlen + 1);
  prCheck(h != NULL, "out of memory", "%s: out of memory", path);
  memcpy(h, b + hstart, hlen);
  h[hlen] = '\0';
  a->data_off = hstart + hlen;

  const char *d = npy_key(h, "descr");
  prCheck(d && (*d == '\'' || *d == '"'), hint, "%s: the .npy header has no 'descr' string", path);
  char quote = *d++;
  const char *de = strchr(d, quote);
  prCheck(de && de - d >= 3 && de - d <= 4, hint,
          "%s: unsupported dtype in the .npy header (byte offset %zu)", path,
          hstart + (size_t)(d - h));
  char order = d[0];
  prCheck(order == '<' || order == '|' || order == '=', "save the array as little-endian",
          "%s: dtype '%.*s' is not little-endian", path, (int)(de - d), d);
  a->kind = d[1];
  a->size = atoi(d + 2);
  bool ok = (a->kind == 'f' && (a->size == 4 || a->size == 8)) ||
            ((a->kind == 'i' || a->kind == 'u') &&
             (a->size == 1 || a->size == 2 || a->size == 4 || a->size == 8));
  prCheck(ok, "features: float32/float64 (or integers); labels: integers",
          "%s: unsupported dtype '%.*s'", path, (int)(de - d), d);

  const char *fo = npy_key(h, "fortran_order");
  prCheck(fo != NULL, hint, "%s: the .npy header has no 'fortran_order'", path);
  prCheck(strncmp(fo, "False", 5) == 0, "save a C-ordered array (numpy.ascontiguousarray)",
          "%s: Fortran-ordered arrays are not supported", path);

  const char *sh = npy_key(h, "shape");
  prCheck(sh && *sh == '(', hint, "%s: the .npy header has no 'shape' tuple", path);
  sh++;
  size_t numel = 1;
  for (;;) {
    while (*sh == ' ' || *sh == ',') sh++;
    if (*sh == ')') break;
    char *end;
    errno = 0;
    long long v = strtoll(sh, &end, 10);
    prCheck(end != sh && errno == 0 && v >= 0 && a->ndim < 8, hint,
            "%s: bad shape in the .npy header (byte offset %zu)", path, hstart + (size_t)(sh - h));
    prCheck(v == 0 || numel <= SIZE_MAX / 16 / (size_t)v, hint, "%s: the shape is too large", path);
    a->shape[a->ndim++] = v;
    numel *= (size_t)v;
    sh = end;
    while (*sh == ' ') sh++;
    prCheck(*sh == ',' || *sh == ')', hint, "%s: bad shape in the .npy header (byte offset %zu)",
            path, hstart + (size_t)(sh - h));
  }
  free(h);
  size_t want = numel * (size_t)a->size, have = n - a->data_off;
  if (have < want && a->ndim >= 1) { // shape[0] >= 1 here; each row has want / shape[0] bytes
    size_t row = want / (size_t)a->shape[0];
    pr_fail(__FILE__, __LINE__, "the file is truncated or was not written by numpy.save",
            "%s: the file ends in row %zu of %lld: the data section has %zu bytes (from byte "
            "offset %zu); the shape and dtype need %zu",
            path, have / row, (long long)a->shape[0], have, a->data_off, want);
  }
  prCheck(have == want, "the file is truncated or was not written by numpy.save",
          "%s: the data section has %zu bytes (from byte offset %zu); the shape and dtype need %zu",
          path, have, a->data_off, want);
}

static double npy_get(const Npy *a, size_t i) {
  const unsigned char *p = a->buf + a->data_off + i * (size_t)a->size;
  if (a->kind == 'f') {
    if (a->size == 4) {
      float f;
      memcpy(&f, p, 4);
      return f;
    }
    double d;
    memcpy(&d, p, 8);
    return d;
  }
  uint64_t u = 0;
  for (int k = a->size - 1; k >= 0; k--) u = (u << 8) | p[k];
  if (a->kind == 'u') return (double)u;
  int bits = 8 * a->size;
  int64_t s = bits == 64 ? (int64_t)u : (int64_t)(u << (64 - bits)) >> (64 - bits);
  return (double)s;
}

// "(1797, 8, 8)": a shape for messages.
static const char *shape_str(char *buf, size_t cap, int64_t rows, int ndim, const int64_t *dims) {
  size_t n = (size_t)snprintf(buf, cap, "(%lld", (long long)rows);
  for (int d = 0; d < ndim && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, ", %lld", (long long)dims[d]);
  if (n < cap) snprintf(buf + n, cap - n, "%s", ndim == 0 ? ",)" : ")");
  return buf;
}

// Feed k's file: read, its shape and dtype checked against the feed (legacy: the words of a
// features file and a labels file).
static void npy_feed(Npy *a, const PrFeed *f, bool legacy, int k) {
  const char *path = f->file;
  npy_read(a, path, legacy && k == 1 ? "labels file" : "data file");
  bool scalar = f->width == 1 && f->ndim <= 1; // (rows,) or (rows, 1)
  bool ok = a->ndim == f->ndim + 1 || (scalar && (a->ndim == 1 || a->ndim == 2));
  for (int d = 0; ok && d + 1 < a->ndim; d++) ok = a->shape[d + 1] == (scalar ? 1 : f->dims[d]);
  if (legacy && k == 0) {
    prCheck(a->ndim == 2, "features are a 2-D array (rows, features)",
            "%s: features have %d dimensions, expected 2", path, a->ndim);
    prCheck(a->shape[1] >= 1, "give at least one feature", "%s: zero features", path);
    if (!ok)
      pr_fail(__FILE__, __LINE__, features_hint(f),
              "%s: row 0 has %lld features (shape (%lld, %lld)) but the model takes %lld", path,
              (long long)a->shape[1], (long long)a->shape[0], (long long)a->shape[1],
              (long long)f->width);
  } else if (legacy) {
    prCheck(ok, "labels are a 1-D array (rows)", "%s: labels have %d dimensions, expected 1",
            path, a->ndim);
  } else if (!ok) {
    char got[128], need[128];
    pr_fail(__FILE__, __LINE__, "give a .npy array of one row per sample, each of the input's shape",
            "%s: the array has shape %s but input '%s' takes %s", path,
            a->ndim ? shape_str(got, sizeof got, a->shape[0], a->ndim - 1, a->shape + 1) : "()",
            f->name, shape_str(need, sizeof need, a->ndim ? a->shape[0] : 0, f->ndim, f->dims));
  }
  if (f->i32 && legacy)
    prCheck(a->kind == 'i' || a->kind == 'u', "labels are integer class ids (int32/int64/uint8)",
            "%s: labels have a floating-point dtype", path);
  if (f->i32)
    prCheck(a->kind == 'i' || a->kind == 'u', "save an integer array (int32/int64/uint8)",
            "%s: input '%s' is i32 but the file holds floating-point numbers", path, f->name);
}

void pr_table_open_npy(PrTable *t, double train_frac, uint64_t seed, double scale,
                       const PrTableModel *want) {
  memset(t, 0, sizeof *t);
  prCheck(want && want->nfeeds >= 1 && want->nfeeds <= PR_MAX_FEEDS,
          "a bug in the generated program", "pr_table_open_npy: bad model");
  const char *first = want->feed[0].file;
  check_frac(first, train_frac);
  bool legacy = legacy_model(want);
  Npy a[PR_MAX_FEEDS];
  for (int k = 0; k < want->nfeeds; k++) {
    npy_feed(&a[k], &want->feed[k], legacy, k);
    prCheck(a[k].shape[0] == a[0].shape[0],
            legacy ? "features and labels have one row each per sample"
                   : "every input's file has one row per sample",
            "%s has %lld rows but %s has %lld", first, (long long)a[0].shape[0],
            want->feed[k].file, (long long)a[k].shape[0]);
    t->off[k] = t->ncells;
    t->width[k] = want->feed[k].width;
    prCheck(t->ncells <= INT32_MAX - want->feed[k].width, "the inputs are too wide",
            "%s: too many values per row", want->feed[k].file);
    t->ncells += want->feed[k].width;
  }
  t->nfeeds = want->nfeeds;
  t->rows = a[0].shape[0];
  prCheck(t->rows <= (INT64_MAX / 4 - 1) / (t->ncells ? t->ncells : 1),
          "the table is too large for this machine's memory", "%s: too many rows", first);
  t->cells = malloc((size_t)(t->rows * t->ncells) * sizeof(uint32_t) + 1);
  prCheck(t->cells != NULL, "the table is too large for this machine's memory",
          "out of memory reading '%s'", first);
  for (int k = 0; k < want->nfeeds; k++) {
    const PrFeed *f = &want->feed[k];
    size_t W = (size_t)f->width;
    for (size_t i = 0; i < (size_t)t->rows * W; i++) {
      double v = npy_get(&a[k], i);
      size_t r = i / W, c = i % W;
      uint32_t *cell = t->cells + r * (size_t)t->ncells + (size_t)t->off[k] + c;
      if (f->i32) {
        char where[48];
        snprintf(where, sizeof where, W == 1 ? ": row %zu:" : ": row %zu, column %zu:", r, c);
        // Labels of a features-then-label table: a negative one, too, is "out of range".
        if (legacy && (v < 0 || v > 1e7)) {
          if (v >= 0) check_int(f, legacy, v, "", 0, f->file, where);
          pr_fail(__FILE__, __LINE__, "labels are class ids 0, 1, 2, ...",
                  "%s%s label %.0f is out of range", f->file, where, v);
        }
        int32_t x = check_int(f, legacy, v, "", 0, f->file, where);
        memcpy(cell, &x, sizeof x);
        continue;
      }
      prCheck(isfinite(v), "features must be finite numbers",
              "%s: element %zu (row %zu, column %zu) is not finite", f->file, i, r, c);
      float x = (float)(v * scale);
      if (!isfinite(x)) {
        char where[96];
        snprintf(where, sizeof where, ": element %zu (row %zu, column %zu)", i, r, c);
        feature(v, scale, f->file, where);
      }
      memcpy(cell, &x, sizeof x);
    }
    free(a[k].buf);
  }
  t->step_rows = want->in_order ? want->step_rows : 0;
  shuffle_split(t, first, train_frac, seed, want->in_order);
}

// Copies row `src` of the table into row r of each destination.
static void copy_row(const PrTable *t, int64_t src, int64_t r, void *const *dst) {
  const uint32_t *row = t->cells + src * t->ncells;
  for (int k = 0; k < t->nfeeds; k++)
    if (dst[k])
      memcpy((uint32_t *)dst[k] + r * t->width[k], row + t->off[k],
             (size_t)t->width[k] * sizeof(uint32_t));
}

void pr_table_batch(const PrTable *t, uint64_t seed, int64_t step, int64_t mb, int64_t B,
                    void *const *dst) {
  prCheck(t->n_train >= 1, "the training split is empty", "pr_table_batch: no training rows");
  if (t->step_rows > 0) { // in order: the step's next rows, from an exact first index
    int64_t S = t->step_rows;
    prCheck(step >= 0 && step <= (INT64_MAX - S) / S && mb >= 0 && B >= 0 && mb * B + B <= S,
            "internal error in the generated program (or more steps than 2^63 rows)",
            "pr_table_batch: rows %lld.. of step %lld (microbatch %lld of %lld rows, %lld rows a "
            "step) are out of range",
            (long long)(mb * B), (long long)step, (long long)mb, (long long)B, (long long)S);
    int64_t first = (step * S + mb * B) % t->n_train;
    for (int64_t r = 0; r < B; r++) copy_row(t, (first + r) % t->n_train, r, dst);
    return;
  }
  for (int64_t r = 0; r < B; r++)
    copy_row(t, (int64_t)(batch_draw(seed, PR_TRAIN, step, mb, r) % (uint64_t)t->n_train), r, dst);
}

int64_t pr_table_val_batch(const PrTable *t, int64_t k, int64_t B, void *const *dst) {
  int64_t n_val = t->rows - t->n_train;
  prCheck(n_val >= 1, "use a training fraction below 1 to keep rows for validation",
          "the validation split is empty (%lld rows, all for training)", (long long)t->rows);
  prCheck(k >= 0 && B >= 0 && (B == 0 || k < INT64_MAX / B - 1),
          "internal error in the generated program",
          "pr_table_val_batch: bad batch %lld of %lld rows", (long long)k, (long long)B);
  for (int64_t i = 0; i < B; i++) copy_row(t, t->n_train + (k * B + i) % n_val, i, dst);
  int64_t real = n_val - k * B;
  return real < 0 ? 0 : (real > B ? B : real);
}

int64_t pr_table_val_batches(const PrTable *t, int64_t B, int64_t requested) {
  int64_t n_val = t->rows - t->n_train;
  if (n_val == 0 && B >= 1 && requested >= 0) return 0; // train_frac 1: nothing to evaluate
  prCheck(n_val >= 1 && B >= 1 && requested >= 0, "internal error in the generated program",
          "pr_table_val_batches: %lld validation rows, batch %lld, %lld batches requested",
          (long long)n_val, (long long)B, (long long)requested);
  int64_t all = n_val / B + (n_val % B != 0);
  return requested == 0 || requested > all ? all : requested;
}

void pr_table_close(PrTable *t) {
  free(t->cells);
  memset(t, 0, sizeof *t);
}

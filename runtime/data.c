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
//   of the (shuffled) table, drawn with replacement. Validation batch k (pr_table_val_batch) is
//   validation rows (k*B + i) % n_val, i = 0..B-1 (sequential, wrapping around).
//
//   The whole validation split of a token stream (pr_tokens_val_seq_batch): W = (n_val - 1) / T
//   consecutive non-overlapping windows, window w starting at n_train + w*T; batch k holds
//   windows k*B .. k*B+B-1 (rows past W repeat window 0 and are not counted).
//
//   Table shuffle (Fisher-Yates, at open): perm = [0, 1, ..., rows-1]; s = seed ^
//   0x2545F4914F6CDD1D;
//       for i = rows-1 down to 1: j = pr_splitmix64(&s) % (i + 1); swap(perm[i], perm[j])
//   shuffled row k = file row perm[k] (data rows counted from 0, header and blank lines excluded);
//   the first n_train = floor(rows * train_frac) shuffled rows are the training split.
//   Features are (float)(value * scale), value parsed as a double; a value that is not finite
//   ("nan", "inf", 1e999) or whose feature is not a finite float32 (1e300) stops the program.
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

// Shuffles rows (Fisher-Yates, see the header comment), sets n_train and classes.
static void shuffle_split(PrTable *t, const char *path, double frac, uint64_t seed) {
  int64_t rows = t->rows, F = t->features;
  prCheck(rows >= 1, "give a file with at least one data row", "%s: no data rows", path);
  int64_t *perm = malloc((size_t)rows * sizeof *perm);
  float *x = malloc((size_t)(rows * F) * sizeof(float) + 1);
  int32_t *y = malloc((size_t)rows * sizeof(int32_t));
  prCheck(perm && x && y, "the table is too large for this machine's memory",
          "out of memory shuffling '%s'", path);
  for (int64_t i = 0; i < rows; i++) perm[i] = i;
  uint64_t s = seed ^ K_SHUFFLE;
  for (int64_t i = rows - 1; !pr_data_predict && i >= 1; i--) { // --predict: file order
    int64_t j = (int64_t)(pr_splitmix64(&s) % (uint64_t)(i + 1));
    int64_t tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
  }
  int maxl = 0;
  for (int64_t k = 0; k < rows; k++) {
    memcpy(x + k * F, t->x + perm[k] * F, (size_t)F * sizeof(float));
    y[k] = t->y[perm[k]];
    if (y[k] > maxl) maxl = y[k];
  }
  free(perm);
  free(t->x);
  free(t->y);
  t->x = x;
  t->y = y;
  t->classes = maxl + 1;
  if (pr_data_predict) { // every row, in file order, is "validation"
    t->n_train = 0;
    return;
  }
  t->n_train = (int64_t)floor((double)rows * frac);
  prCheck(t->n_train >= 1, "use more rows or a larger training fraction",
          "%s: the training split is empty (%lld rows, fraction %g)", path, (long long)rows, frac);
  // Every run evaluates at its end: an empty validation split is refused now, not then.
  prCheck(t->n_train < rows, "use more rows or a training fraction below 1",
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

// The hint of a feature-count mismatch: the model's input and its width (exits follow: not freed).
static const char *features_hint(const PrTableModel *want) {
  const char *fmt = "the model's input '%s' has %lld features";
  const char *name = want->input ? want->input : "";
  int n = snprintf(NULL, 0, fmt, name, (long long)want->features);
  char *h = n > 0 ? malloc((size_t)n + 1) : NULL;
  if (!h) return "give data with as many features per row as the model's input";
  snprintf(h, (size_t)n + 1, fmt, name, (long long)want->features);
  return h;
}

// A label at or above the model's classes (want->classes > 0) stops the program; `where` names
// the file's line and column (":5:129") or row (": row 4").
static void check_label(const PrTableModel *want, double v, const char *path, const char *where) {
  if (!want || want->classes <= 0 || v < (double)want->classes) return;
  char hint[96];
  snprintf(hint, sizeof hint, "use labels 0..%lld, or a model with more classes",
           (long long)want->classes - 1);
  pr_fail(__FILE__, __LINE__, hint, "%s%s label %.0f is out of range: the model has %lld classes",
          path, where, v, (long long)want->classes);
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

void pr_table_open_csv(PrTable *t, const char *path, double train_frac, uint64_t seed,
                       double scale, const PrTableModel *want) {
  memset(t, 0, sizeof *t);
  check_frac(path, train_frac);
  int fd = pr_open_regular(path, "data file");
  errno = 0;
  gzFile gz = gzdopen(fd, "rb");
  prCheck(gz != NULL, "the machine is out of memory", "cannot read '%s': %s", path,
          errno ? strerror(errno) : "gzdopen failed");
  char *buf = NULL;
  size_t cap = 0;
  Field *fields = NULL;
  int64_t fcap = 0, xcap = 0, ycap = 0, ncols = 0, first_line = 0;
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
      prCheck(nf >= 2, "each row holds the features and then the integer label",
              "%s:%lld: only %lld field; expected at least one feature and a label", path,
              (long long)lineno, (long long)nf);
      ncols = nf;
      first_line = lineno;
      t->features = nf - 1;
      if (want && want->features > 0 && t->features != want->features)
        pr_fail(__FILE__, __LINE__, features_hint(want),
                "%s:%lld: the row has %lld features (then its label) but the model takes %lld",
                path, (long long)lineno, (long long)t->features, (long long)want->features);
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
    if (t->rows + 1 > ycap) {
      ycap = ycap ? ycap * 2 : 1024;
      t->y = realloc(t->y, (size_t)ycap * sizeof(int32_t));
      xcap = ycap * t->features;
      t->x = realloc(t->x, (size_t)xcap * sizeof(float));
      prCheck(t->x && t->y, "the table is too large for this machine's memory",
              "out of memory reading '%s'", path);
    }
    float *xr = t->x + t->rows * t->features;
    for (int64_t c = 0; c < nf; c++) {
      const Field *f = &fields[c];
      double v;
      if (f->len == 0)
        pr_fail(__FILE__, __LINE__, "every field is a number; the last one is the label",
                "%s:%lld:%lld: empty field (field %lld)", path, (long long)lineno,
                (long long)f->col, (long long)(c + 1));
      Num kind = parse_number(f->s, f->len, &v);
      if (kind != NUM_OK)
        pr_fail(__FILE__, __LINE__,
                kind == NUM_BAD ? "every field is a number; the last one is the label"
                                : "features and labels must be finite numbers",
                "%s:%lld:%lld: field %lld is not a %snumber: '%.*s'", path, (long long)lineno,
                (long long)f->col, (long long)(c + 1), kind == NUM_BAD ? "" : "finite ",
                f->len > 40 ? 40 : (int)f->len, f->s);
      if (c < t->features) {
        char where[64];
        snprintf(where, sizeof where, ":%lld:%lld", (long long)lineno, (long long)f->col);
        xr[c] = feature(v, scale, path, where);
      } else {
        prCheck(v == floor(v), "the last field of a row is the class label 0, 1, 2, ...",
                "%s:%lld:%lld: label '%.*s' is not an integer", path, (long long)lineno,
                (long long)f->col, f->len > 40 ? 40 : (int)f->len, f->s);
        prCheck(v >= 0, "the last field of a row is the class label 0, 1, 2, ...",
                "%s:%lld:%lld: label %.0f is negative", path, (long long)lineno, (long long)f->col,
                v);
        char where[64];
        snprintf(where, sizeof where, ":%lld:%lld:", (long long)lineno, (long long)f->col);
        check_label(want, v, path, where);
        prCheck(v <= 1e7, "the last field of a row is the class label 0, 1, 2, ...",
                "%s:%lld:%lld: label %.0f is too large", path, (long long)lineno, (long long)f->col,
                v);
        t->y[t->rows] = (int32_t)v;
      }
    }
    t->rows++;
  }
  gzclose(gz);
  free(buf);
  free(fields);
  prCheck(t->rows >= 1, "the file needs at least one row of numbers (features, then the label)",
          "%s: no data rows", path);
  shuffle_split(t, path, train_frac, seed);
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

void pr_table_open_npy(PrTable *t, const char *x_path, const char *y_path, double train_frac,
                       uint64_t seed, double scale, const PrTableModel *want) {
  memset(t, 0, sizeof *t);
  check_frac(x_path, train_frac);
  Npy ax, ay;
  npy_read(&ax, x_path, "data file");
  npy_read(&ay, y_path, "labels file");
  prCheck(ax.ndim == 2, "features are a 2-D array (rows, features)",
          "%s: features have %d dimensions, expected 2", x_path, ax.ndim);
  prCheck(ay.ndim == 1 || (ay.ndim == 2 && ay.shape[1] == 1), "labels are a 1-D array (rows)",
          "%s: labels have %d dimensions, expected 1", y_path, ay.ndim);
  prCheck(ay.kind == 'i' || ay.kind == 'u', "labels are integer class ids (int32/int64/uint8)",
          "%s: labels have a floating-point dtype", y_path);
  prCheck(ax.shape[0] == ay.shape[0], "features and labels have one row each per sample",
          "%s has %lld rows but %s has %lld", x_path, (long long)ax.shape[0], y_path,
          (long long)ay.shape[0]);
  prCheck(ax.shape[1] >= 1, "give at least one feature", "%s: zero features", x_path);
  if (want && want->features > 0 && ax.shape[1] != want->features)
    pr_fail(__FILE__, __LINE__, features_hint(want),
            "%s: row 0 has %lld features (shape (%lld, %lld)) but the model takes %lld", x_path,
            (long long)ax.shape[1], (long long)ax.shape[0], (long long)ax.shape[1],
            (long long)want->features);
  t->rows = ax.shape[0];
  t->features = ax.shape[1];
  t->x = malloc((size_t)(t->rows * t->features) * sizeof(float) + 1);
  t->y = malloc((size_t)t->rows * sizeof(int32_t) + 1);
  prCheck(t->x && t->y, "the table is too large for this machine's memory",
          "out of memory reading '%s'", x_path);
  for (size_t i = 0; i < (size_t)(t->rows * t->features); i++) {
    double v = npy_get(&ax, i);
    prCheck(isfinite(v), "features must be finite numbers",
            "%s: element %zu (row %zu, column %zu) is not finite", x_path, i,
            i / (size_t)t->features, i % (size_t)t->features);
    float f = (float)(v * scale);
    if (!isfinite(f)) {
      char where[96];
      snprintf(where, sizeof where, ": element %zu (row %zu, column %zu)", i,
               i / (size_t)t->features, i % (size_t)t->features);
      feature(v, scale, x_path, where);
    }
    t->x[i] = f;
  }
  for (int64_t r = 0; r < t->rows; r++) {
    double v = npy_get(&ay, (size_t)r);
    char where[48];
    snprintf(where, sizeof where, ": row %lld:", (long long)r);
    if (v >= 0) check_label(want, v, y_path, where);
    prCheck(v >= 0 && v <= 1e7, "labels are class ids 0, 1, 2, ...",
            "%s%s label %.0f is out of range", y_path, where, v);
    t->y[r] = (int32_t)v;
  }
  free(ax.buf);
  free(ay.buf);
  shuffle_split(t, x_path, train_frac, seed);
}

void pr_table_batch(const PrTable *t, uint64_t seed, int64_t step, int64_t mb, int64_t B, float *x,
                    int32_t *y) {
  prCheck(t->n_train >= 1, "the training split is empty", "pr_table_batch: no training rows");
  int64_t F = t->features;
  for (int64_t r = 0; r < B; r++) {
    int64_t k = (int64_t)(batch_draw(seed, PR_TRAIN, step, mb, r) % (uint64_t)t->n_train);
    if (x) memcpy(x + r * F, t->x + k * F, (size_t)F * sizeof(float));
    if (y) y[r] = t->y[k];
  }
}

int64_t pr_table_val_batch(const PrTable *t, int64_t k, int64_t B, float *x, int32_t *y) {
  int64_t n_val = t->rows - t->n_train;
  prCheck(n_val >= 1, "use a training fraction below 1 to keep rows for validation",
          "the validation split is empty (%lld rows, all for training)", (long long)t->rows);
  prCheck(k >= 0 && B >= 0 && (B == 0 || k < INT64_MAX / B - 1),
          "internal error in the generated program",
          "pr_table_val_batch: bad batch %lld of %lld rows", (long long)k, (long long)B);
  int64_t F = t->features;
  for (int64_t i = 0; i < B; i++) {
    int64_t src = t->n_train + (k * B + i) % n_val;
    if (x) memcpy(x + i * F, t->x + src * F, (size_t)F * sizeof(float));
    if (y) y[i] = t->y[src];
  }
  int64_t real = n_val - k * B;
  return real < 0 ? 0 : (real > B ? B : real);
}

int64_t pr_table_val_batches(const PrTable *t, int64_t B, int64_t requested) {
  int64_t n_val = t->rows - t->n_train;
  prCheck(n_val >= 1 && B >= 1 && requested >= 0, "internal error in the generated program",
          "pr_table_val_batches: %lld validation rows, batch %lld, %lld batches requested",
          (long long)n_val, (long long)B, (long long)requested);
  int64_t all = n_val / B + (n_val % B != 0);
  return requested == 0 || requested > all ? all : requested;
}

void pr_table_close(PrTable *t) {
  free(t->x);
  free(t->y);
  memset(t, 0, sizeof *t);
}

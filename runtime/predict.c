// predict.c: --predict DATA --out FILE.npy, inference with the training program. The data is
// opened in its training form but whole and in file order (pr_data_predict: text windows from
// token 0, table rows unshuffled), then the evaluation forward runs over every batch of it
// (eval_batches(0), eval_batch(k, whole)): at S > 1 that is the forward-only schedule across the
// stages, every rank taking part. The rank that holds the model's first output after the forward
// (PrProgram.output_here: the loss stage's, in microbatch order) appends each batch's real rows
// to FILE.npy.tmp.PID, streamed (one batch buffer, allocated once); at the end it writes the
// header's final row count in place (the header is padded to a fixed length for that), fsyncs
// and renames the file over FILE.npy: a failed or killed run leaves no partial FILE.npy.
#define _FILE_OFFSET_BITS 64
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipert.h"

enum { NPY_HEADER = 128 }; // bytes of magic, version, length and the padded dict

// The .npy v1.0 header of a float32 C-order array of shape (rows, shape[1..dims-1]).
static void npy_header(char *h, int64_t rows, const int64_t *shape, int dims) {
  char dict[NPY_HEADER], sh[160];
  size_t k = (size_t)snprintf(sh, sizeof sh, "(%lld,", (long long)rows);
  for (int d = 1; d < dims; d++)
    k += (size_t)snprintf(sh + k, sizeof sh - k, "%s%lld", d > 1 ? ", " : " ", (long long)shape[d]);
  snprintf(sh + k, sizeof sh - k, ")");
  int n =
      snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", sh);
  size_t len = NPY_HEADER - 10; // the dict, padded with blanks, ends with a newline
  memcpy(h, "\x93NUMPY\x01\x00", 8);
  h[8] = (char)(len & 0xff);
  h[9] = (char)(len >> 8);
  memset(h + 10, ' ', len);
  memcpy(h + 10, dict, (size_t)n);
  h[NPY_HEADER - 1] = '\n';
}

static void write_all(int fd, const void *buf, size_t n, const char *path) {
  int err = pr_write_full(fd, buf, n);
  if (!err) return;
  unlink(path);
  pr_fail(__FILE__, __LINE__,
          "check the free disk space, the file size limit (ulimit -f) and permissions",
          "--out: cannot write '%s': %s", path, strerror(err));
}

int pr_predict(const PrProgram *p, const PrOptions *o) {
  prCheck(p->output_name && p->eval_batch, "add \"outputs\" (and a data binding) to the model",
          "--predict: the model has no outputs");
  int64_t per = 1; // floats per sample (output_shape[0]: its rows)
  for (int d = 0; d < p->output_dims; d++) per *= p->output_shape[d];
  const bool writer = p->output_here;
  char tmp[4096];
  int fd = -1;
  float *buf = NULL;
  if (writer) {
    prCheck(snprintf(tmp, sizeof tmp, "%s.tmp.%ld", o->out, (long)getpid()) < (int)sizeof tmp,
            "use a shorter path", "--out '%.200s...': the path is too long", o->out);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    prCheck(fd >= 0, "check that the directory exists and is writable",
            "--out: cannot create '%s': %s", tmp, strerror(errno));
    char h[NPY_HEADER];
    npy_header(h, 0, p->output_shape, p->output_dims);
    write_all(fd, h, sizeof h, tmp);
    buf = pr_alloc_region("--predict outputs", (size_t)(per * p->output_batch) * sizeof(float));
  }
  int64_t batches = p->eval_batches(0), samples = 0, rows = 0;
  double loss = 0, weight = 0;
  for (int64_t k = 0; k < batches; k++) {
    PrEvalBatch r = {.out = buf};
    p->eval_batch(k, true, &r); // every rank: its stages' forward
    loss += r.loss * r.weight;
    weight += r.weight;
    samples += (int64_t)r.weight;
    if (!writer) continue;
    // r.weight counts the batch's real samples (the last batch's padding rows are left out).
    write_all(fd, buf, (size_t)((int64_t)r.weight * per) * sizeof(float), tmp);
    rows += (int64_t)r.weight * p->output_shape[0];
  }
  if (writer) {
    char h[NPY_HEADER];
    npy_header(h, rows, p->output_shape, p->output_dims);
    if (pwrite(fd, h, sizeof h, 0) != (ssize_t)sizeof h || fsync(fd) != 0 || close(fd) != 0) {
      int err = errno;
      unlink(tmp);
      pr_fail(__FILE__, __LINE__, "check the free disk space and permissions",
              "--out: cannot write '%s': %s", tmp, strerror(err));
    }
    if (rename(tmp, o->out) != 0) {
      int err = errno;
      unlink(tmp);
      pr_fail(__FILE__, __LINE__, "check the --out path", "--out: cannot rename '%s' to '%s': %s",
              tmp, o->out, strerror(err));
    }
    pr_fsync_dir_of(o->out);
    pr_free_region(buf);
    bool has_loss = !p->comm || p->comm->rank == p->comm->report_rank;
    if (!o->quiet && has_loss)
      printf("predicted %s of %lld samples (%lld rows) of %s into %s; their mean loss %.4f\n",
             p->output_name, (long long)samples, (long long)rows, o->predict, o->out,
             weight > 0 ? loss / weight : 0);
    else if (!o->quiet)
      printf("predicted %s of %lld samples (%lld rows) of %s into %s\n", p->output_name,
             (long long)samples, (long long)rows, o->predict, o->out);
  }
  return 0;
}

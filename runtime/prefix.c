// prefix.c: "[rank R] " before every line a rank of a pipeline job prints.
//
// pr_prefix_start points file descriptors 1 and 2 at two pipes and starts a reader thread that
// copies what arrives, line by line, to the original stdout and stderr, each line written with its
// prefix in one write(2) (so the lines of several ranks sharing a terminal never interleave
// mid-line). It catches everything: stdio, the kernels' OpenMP threads, MPI's own messages.
// pr_prefix_stop (also run at exit, and by the transport before it aborts the job) flushes stdio,
// gives the original descriptors back, lets the reader drain both pipes (a last line without a
// newline gets one) and joins it: no message is lost on the way out. Both are no-ops when
// prefixing is off; stop is idempotent and safe to call from any thread.
#define _GNU_SOURCE // pipe2
#include "pipert.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { LINE_CAP = 16384 }; // a longer line is cut into prefixed pieces of this size

typedef struct Stream {
  int in;              // the pipe's read end (-1 at EOF)
  int out;             // the original descriptor the lines go to
  char line[LINE_CAP]; // the line being assembled (after the prefix)
  size_t len;          // bytes of it
} Stream;

static struct {
  Stream s[2];      // stdout, stderr
  char prefix[32];  // "[rank R] "
  size_t plen;      // its length
  pthread_t reader; // the copying thread
  atomic_int state; // 0 off, 1 running, 2 stopping or stopped
  int saved[2];     // dups of the original descriptors 1 and 2
} px = {.s = {{.in = -1}, {.in = -1}}};

// Writes all of buf to fd (retrying short writes and EINTR); gives up on other errors.
static void write_all(int fd, const char *buf, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, buf, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    buf += w;
    n -= (size_t)w;
  }
}

// Emits the assembled line with its prefix (and a newline when it has none and ends the stream).
static void emit(Stream *s, bool add_newline) {
  char out[sizeof px.prefix + LINE_CAP + 1];
  memcpy(out, px.prefix, px.plen);
  memcpy(out + px.plen, s->line, s->len);
  size_t n = px.plen + s->len;
  if (add_newline) out[n++] = '\n';
  write_all(s->out, out, n);
  s->len = 0;
}

static void *reader(void *arg) {
  (void)arg;
  char buf[4096];
  while (px.s[0].in >= 0 || px.s[1].in >= 0) {
    struct pollfd fds[2] = {{px.s[0].in, POLLIN, 0}, {px.s[1].in, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int k = 0; k < 2; k++) {
      Stream *s = &px.s[k];
      if (s->in < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(s->in, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) { // EOF: the writers are gone
        if (s->len) emit(s, true);
        close(s->in);
        s->in = -1;
        continue;
      }
      for (ssize_t i = 0; i < n; i++) {
        s->line[s->len++] = buf[i];
        if (buf[i] == '\n' || s->len == LINE_CAP) emit(s, false);
      }
    }
  }
  return NULL;
}

static void stop_at_exit(void) {
  pr_prefix_stop();
}

void pr_prefix_start(int rank) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&px.state, &expected, 1)) return;
  px.plen = (size_t)snprintf(px.prefix, sizeof px.prefix, "[rank %d] ", rank);
  fflush(stdout);
  fflush(stderr);
  for (int k = 0; k < 2; k++) {
    int p[2];
    px.saved[k] = fcntl(1 + k, F_DUPFD_CLOEXEC, 3);
    if (px.saved[k] < 0 || pipe2(p, O_CLOEXEC) != 0) {
      atomic_store(&px.state, 0);
      return; // prefixing is a convenience: without descriptors, run on without it
    }
    px.s[k] = (Stream){.in = p[0], .out = px.saved[k]};
    dup2(p[1], 1 + k); // the pipe's only write end is now descriptor 1 (2)
    close(p[1]);
  }
  setvbuf(stdout, NULL, _IOLBF, 0); // a pipe would make stdout fully buffered
  if (pthread_create(&px.reader, NULL, reader, NULL) != 0) {
    for (int k = 0; k < 2; k++) dup2(px.saved[k], 1 + k);
    atomic_store(&px.state, 0);
    return;
  }
  atexit(stop_at_exit);
}

void pr_prefix_stop(void) {
  int expected = 1;
  if (!atomic_compare_exchange_strong(&px.state, &expected, 2)) return;
  fflush(stdout);
  fflush(stderr);
  // Giving descriptors 1 and 2 back closes the pipes' write ends: the reader drains and exits.
  for (int k = 0; k < 2; k++) dup2(px.saved[k], 1 + k);
  pthread_join(px.reader, NULL);
  for (int k = 0; k < 2; k++) close(px.saved[k]);
}

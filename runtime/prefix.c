// prefix.c: "[rank R] " before every line a rank of a pipeline job prints.
//
// pr_prefix_start points file descriptors 1 and 2 at two pipes and starts a reader thread that
// copies what arrives, line by line, to the original stdout and stderr, each line written with its
// prefix in one write(2) (so the lines of several ranks sharing a terminal never interleave
// mid-line). It catches everything: stdio, the kernels' OpenMP threads, MPI's own messages.
// pr_prefix_stop (also run at exit, and by the transport before it aborts the job) flushes stdio,
// gives the original descriptors back, wakes the reader to drain both pipes (a last line without
// a newline gets one) and joins it: no message is lost on the way out. (The reader cannot wait
// for EOF: a child such as a singleton MPI process's daemon may hold the pipes' write ends.) Both
// are no-ops when prefixing is off; stop is idempotent and safe to call from any thread.
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
  int wake[2];      // a pipe that tells the reader to drain the others and finish
} px = {.s = {{.in = -1}, {.in = -1}}};

// Writes all of buf to fd; gives up on an error (the original stream is gone: nothing to tell).
static void write_all(int fd, const char *buf, size_t n) {
  (void)pr_write_full(fd, buf, n);
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

// Copies what one read returns from s; false at EOF or on an error (or nothing left to read of a
// non-blocking descriptor).
static bool pump(Stream *s) {
  char buf[4096];
  ssize_t n = read(s->in, buf, sizeof buf);
  if (n < 0 && errno == EINTR) return true;
  if (n <= 0) return false;
  for (ssize_t i = 0; i < n; i++) {
    s->line[s->len++] = buf[i];
    if (buf[i] == '\n' || s->len == LINE_CAP) emit(s, false);
  }
  return true;
}

static void *reader(void *arg) {
  (void)arg;
  for (;;) {
    struct pollfd fds[3] = {
        {px.s[0].in, POLLIN, 0}, {px.s[1].in, POLLIN, 0}, {px.wake[0], POLLIN, 0}};
    if (poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[2].revents) break; // stop: drain below
    for (int k = 0; k < 2; k++)
      if (px.s[k].in >= 0 && (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) && !pump(&px.s[k])) {
        if (px.s[k].len) emit(&px.s[k], true); // EOF
        close(px.s[k].in);
        px.s[k].in = -1;
      }
  }
  // Everything this process wrote is in the pipes by now (stop flushed stdio first, and the
  // descriptors point elsewhere): read until they are empty. A child holding a write end (MPI's
  // daemon of a singleton) would keep them from ever reaching EOF.
  for (int k = 0; k < 2; k++) {
    Stream *s = &px.s[k];
    if (s->in < 0) continue;
    fcntl(s->in, F_SETFL, fcntl(s->in, F_GETFL) | O_NONBLOCK);
    while (pump(s)) {
    }
    if (s->len) emit(s, true);
    close(s->in);
    s->in = -1;
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
  // Every descriptor first: prefixing is a convenience, and without them the program runs on
  // without it.
  int p[2][2] = {{-1, -1}, {-1, -1}};
  bool ok = pipe2(px.wake, O_CLOEXEC) == 0;
  for (int k = 0; k < 2; k++) {
    px.saved[k] = ok ? fcntl(1 + k, F_DUPFD_CLOEXEC, 3) : -1;
    ok = ok && px.saved[k] >= 0 && pipe2(p[k], O_CLOEXEC) == 0;
  }
  if (!ok) {
    atomic_store(&px.state, 0);
    return; // (a few descriptors leak: the process is out of them anyway)
  }
  fflush(stdout);
  fflush(stderr);
  for (int k = 0; k < 2; k++) {
    px.s[k] = (Stream){.in = p[k][0], .out = px.saved[k]};
    dup2(p[k][1], 1 + k); // the pipe's write end is now descriptor 1 (2)
    close(p[k][1]);
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
  // Descriptors 1 and 2 back to the originals, then the reader drains the pipes and exits.
  for (int k = 0; k < 2; k++) dup2(px.saved[k], 1 + k);
  write_all(px.wake[1], "x", 1);
  pthread_join(px.reader, NULL);
  for (int k = 0; k < 2; k++) close(px.saved[k]);
}

// trace.c: --trace FILE, the real run as a Chrome trace-event file (Perfetto and chrome://tracing
// open it; docs/pipeline.md, "Traces" has the layout).
//
// Recording. The warm-up step before the loop runs with the hooks counting instead of recording,
// so the buffer (events per step, + NORM and OPT, times the traced steps) is allocated before the
// first step, and a traced step only writes into it: a compute event is (kind, v, m, step, start,
// end) from pr_trace_begin to pr_trace_end; a message is (stream, m, step, post, completion of its
// wait), its post time kept per (stream, m) until the wait. Times are CLOCK_MONOTONIC (pr_now),
// taken relative to an origin read right after a barrier: ranks on one machine share the clock and
// all take rank 0's origin; ranks on several machines each take their own (their clocks then line
// up to the barrier's skew).
//
// Writing (pr_trace_finish, after the last step): every rank formats its own events (it knows its
// streams' tensor names): metadata naming the process "rank R" and its threads, then one "X"
// event per compute action on thread 0 and one per message on the communication threads. A
// message lasts from its post to its wait, and several are in flight at once; slices of one
// thread must nest, so the sends are laid out greedily on as few threads as overlap ("send",
// "send 2", ...), the receives likewise ("recv", ...). A flow pairs each send with its receive:
// "s" just after the send's start, "f" (bound to the enclosing slice) just before the receive's
// end, with id (step - first) * 2^31 + tag * M + m + 1, which both sides compute alike (the wire
// tag below 2^31; ids stay below 2^53 up to 2^22 traced steps). The save rank gathers the other
// ranks' text over the transport and writes FILE.tmp, then renames it over FILE.
#include "pipert.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

bool pr_trace_on;

typedef struct Event { // one recorded event
  double t0, t1;       // start, end (pr_now seconds; a message: post, its wait's completion)
  int64_t step;        // the training step (counting from 0)
  int32_t kind;        // PrTraceKind, or EV_MSG
  int32_t v, m;        // stage and microbatch (a message: -1 and its microbatch)
  int32_t stream;      // a message's stream (PrComm.ch index)
} Event;

enum { EV_MSG = PR_TR_NKINDS };

static const char *const KIND_NAMES[PR_TR_NKINDS] = {"LOAD", "F",        "LOSS", "B",
                                                     "W",    "TIED_SUM", "NORM", "OPT"};

static struct {
  const char *path;   // the file (NULL: not tracing)
  int64_t first, end; // traced steps [first, end)
  const PrComm *c;    // the job (NULL: one rank)
  int local;          // ranks on this machine
  bool counting;      // the warm-up step: count events only
  int64_t counted;    // events of the warm-up step
  Event *ev;          // the buffer
  int64_t n, cap;     // recorded, capacity
  bool overflow;      // an event did not fit
  int64_t open;       // the compute event begun and not ended (-1: none)
  double *posted;     // per (stream, m): when it was posted in this step (0: not)
  int64_t step;       // the step running
  double origin;      // this rank's clock right after the barrier
} tr = {.open = -1};

void pr_trace_begin_(int kind, int v, int m) {
  if (tr.counting) {
    tr.counted++;
    return;
  }
  if (tr.n >= tr.cap) {
    tr.overflow = true, tr.open = -1;
    return;
  }
  tr.ev[tr.n] = (Event){pr_now(), 0, tr.step, kind, v, m, -1};
  tr.open = tr.n++;
}

void pr_trace_end_(void) {
  if (tr.counting || tr.open < 0) return;
  tr.ev[tr.open].t1 = pr_now();
  tr.open = -1;
}

static int64_t slot_of(int stream, int m) {
  return (int64_t)stream * tr.c->nmicro + m;
}

void pr_trace_post_(int stream, int m) {
  if (tr.counting || !tr.c) return;
  tr.posted[slot_of(stream, m)] = pr_now();
}

void pr_trace_done_(int stream, int m) {
  if (tr.counting) {
    tr.counted++;
    return;
  }
  if (!tr.c) return;
  double t0 = tr.posted[slot_of(stream, m)];
  if (t0 == 0) return; // posted before the traced step (not in this program's steps)
  tr.posted[slot_of(stream, m)] = 0;
  if (tr.n >= tr.cap) {
    tr.overflow = true;
    return;
  }
  tr.ev[tr.n++] = (Event){t0, pr_now(), tr.step, EV_MSG, -1, m, stream};
}

void pr_trace_setup(const char *path, int64_t first, int64_t end, const PrComm *c, int local) {
  tr.path = path, tr.first = first, tr.end = end, tr.c = c, tr.local = local;
  if (c) {
    int64_t slots = (int64_t)c->nch * c->nmicro;
    tr.posted = calloc((size_t)(slots > 0 ? slots : 1), sizeof *tr.posted);
    prCheck(tr.posted != NULL, "the machine is out of memory", "--trace: cannot allocate");
  }
  tr.counting = true;
  pr_trace_on = true;
}

void pr_trace_ready(void) {
  pr_trace_on = false;
  tr.counting = false;
  int64_t steps = tr.end - tr.first, per_step = tr.counted + 2; // + NORM, OPT
  prCheck(steps <= (1 << 22), "trace a few steps (--trace-steps FIRST:END)",
          "--trace-steps: %lld steps are too many to trace (at most 2^22)", (long long)steps);
  tr.cap = steps * per_step;
  tr.ev = malloc((size_t)(tr.cap > 0 ? tr.cap : 1) * sizeof *tr.ev);
  prCheck(tr.ev != NULL, "trace fewer steps (--trace-steps FIRST:END)",
          "--trace: cannot allocate the buffer of %lld events", (long long)tr.cap);
  if (tr.c) tr.c->transport->barrier();
  tr.origin = pr_now();
}

void pr_trace_step(int64_t step) {
  tr.step = step;
  pr_trace_on = step >= tr.first && step < tr.end;
}

void pr_trace_step_done(void) {
  pr_trace_on = false;
}

// ---------------------------------------------------------------------------------------------
// Writing

// A text buffer of a fixed capacity.
typedef struct Buf {
  char *p;       // the text
  size_t n, cap; // its length, its capacity
} Buf;

__attribute__((format(printf, 2, 3))) static void bprintf(Buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
  va_end(ap);
  prCheck(k >= 0 && (size_t)k < b->cap - b->n, "a bug in pipert (trace.c)",
          "--trace: the text outgrew its bound of %zu bytes", b->cap);
  b->n += (size_t)k;
}

static void bputc(Buf *b, char ch) {
  bprintf(b, "%c", ch);
}

static void json_string(Buf *f, const char *s) {
  bputc(f, '"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      bprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      bprintf(f, "\\u%04x", *p);
    else
      bputc(f, *p);
  }
  bputc(f, '"');
}

// Microseconds with 3 decimals from integer nanoseconds.
static void micros(Buf *f, int64_t ns) {
  if (ns < 0) bputc(f, '-'), ns = -ns;
  bprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

static int64_t ns_of(double t, double base) {
  return (int64_t)((t - base) * 1e9 + 0.5);
}

// Sorts a[0..n) by start (stable, bottom-up merges through tmp: no allocation of its own).
static void sort_by_start(Event **a, Event **tmp, int64_t n) {
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = a[j]->t0 < a[i]->t0 ? a[j++] : a[i++];
      while (i < mid) tmp[k++] = a[i++];
      while (j < hi) tmp[k++] = a[j++];
    }
    memcpy(a, tmp, (size_t)n * sizeof *a);
  }
}

// Lays events (sorted by start) on as few lanes as keep each lane's slices apart; returns the
// lane count, lane[k] the lane of events[k].
static int lay_out(Event **events, int64_t n, int *lane, double *lane_end) {
  int lanes = 0;
  for (int64_t k = 0; k < n; k++) {
    int l = 0;
    while (l < lanes && lane_end[l] > events[k]->t0) l++;
    if (l == lanes) lanes++;
    lane_end[l] = events[k]->t1;
    lane[k] = l;
  }
  return lanes;
}

static void thread_meta(Buf *f, int rank, int tid, const char *name, int n) {
  bprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
          rank, tid);
  char buf[32];
  if (n > 0)
    snprintf(buf, sizeof buf, "%s %d", name, n + 1);
  else
    snprintf(buf, sizeof buf, "%s", name);
  json_string(f, buf);
  bprintf(f,
          "}},\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":%d,\"tid\":%d,"
          "\"args\":{\"sort_index\":%d}}",
          rank, tid, tid);
}

// This rank's events as trace-event objects joined by ",\n" (no brackets), malloc'ed. Every
// buffer has a size known from the events beforehand (one allocation each, however many steps
// were traced: tests/alloc counts them).
static char *format_rank(double base, size_t *len) {
  const PrComm *c = tr.c;
  int rank = c ? c->rank : 0;
  int64_t nmsg = 0;
  for (int64_t k = 0; k < tr.n; k++) nmsg += tr.ev[k].kind == EV_MSG;
  size_t bound = 1024 + (size_t)tr.n * 400; // metadata, compute events, lanes
  for (int64_t k = 0; k < tr.n; k++)
    if (tr.ev[k].kind == EV_MSG) bound += 400 + 6 * strlen(c->ch[tr.ev[k].stream].tensor);
  Buf buf = {malloc(bound), 0, bound}, *f = &buf;
  Event **msg = malloc((size_t)(nmsg + 1) * sizeof *msg),
        **tmp = malloc((size_t)(nmsg + 1) * sizeof *tmp);
  int *lane = malloc((size_t)(nmsg + 1) * sizeof *lane);
  double *lane_end = malloc((size_t)(nmsg + 1) * sizeof *lane_end);
  prCheck(buf.p && msg && tmp && lane && lane_end, "the machine is out of memory",
          "--trace: cannot format the events");
  bprintf(f,
          "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n"
          "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"args\":{\"sort_index\":%d}}",
          rank, rank, rank, rank);
  thread_meta(f, rank, 0, "compute", 0);
  // The messages: sends, then receives, each sorted by start and laid out on lanes.
  int64_t sends = 0, j;
  for (int64_t k = 0; k < tr.n; k++)
    if (tr.ev[k].kind == EV_MSG && c->ch[tr.ev[k].stream].send) msg[sends++] = &tr.ev[k];
  j = sends;
  for (int64_t k = 0; k < tr.n; k++)
    if (tr.ev[k].kind == EV_MSG && !c->ch[tr.ev[k].stream].send) msg[j++] = &tr.ev[k];
  sort_by_start(msg, tmp, sends);
  sort_by_start(msg + sends, tmp, nmsg - sends);
  int send_lanes = lay_out(msg, sends, lane, lane_end);
  int recv_lanes = lay_out(msg + sends, nmsg - sends, lane + sends, lane_end);
  for (int l = 0; l < send_lanes; l++) thread_meta(f, rank, 1 + l, "send", l);
  for (int l = 0; l < recv_lanes; l++) thread_meta(f, rank, 1 + send_lanes + l, "recv", l);
  for (int64_t k = 0; k < tr.n; k++) { // compute, in recorded order
    const Event *e = &tr.ev[k];
    if (e->kind == EV_MSG) continue;
    int64_t t0 = ns_of(e->t0, base), t1 = ns_of(e->t1, base);
    const char *kn = KIND_NAMES[e->kind];
    bprintf(f, ",\n{\"name\":\"");
    if (e->v < 0)
      bprintf(f, "%s", kn);
    else if (e->m < 0)
      bprintf(f, "%s(v%d)", kn, e->v);
    else
      bprintf(f, "%s(v%d, m%d)", kn, e->v, e->m);
    bprintf(f, "\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":", kn, rank);
    micros(f, t0);
    bprintf(f, ",\"dur\":");
    micros(f, t1 - t0);
    bprintf(f, ",\"args\":{\"rank\":%d,\"v\":%d,\"m\":%d,\"step\":%lld}}", rank, e->v, e->m,
            (long long)e->step);
  }
  for (int64_t k = 0; k < nmsg; k++) {
    const Event *e = msg[k];
    const PrChannel *ch = &c->ch[e->stream];
    int tid = 1 + (k < sends ? lane[k] : send_lanes + lane[k]);
    int64_t t0 = ns_of(e->t0, base), t1 = ns_of(e->t1, base);
    int64_t id =
        (e->step - tr.first) * ((int64_t)1 << 31) + (int64_t)ch->tag * c->nmicro + e->m + 1;
    const char *kn = ch->send ? "SEND" : "RECV";
    bprintf(f, ",\n{\"name\":\"%s(c%d, m%d) ", kn, ch->tag, e->m);
    bprintf(f, "%s rank %d\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":",
            ch->send ? "to" : "from", ch->peer, kn, rank, tid);
    micros(f, t0);
    bprintf(f, ",\"dur\":");
    micros(f, t1 - t0);
    bprintf(f, ",\"args\":{\"rank\":%d,\"peer\":%d,\"tensor\":", rank, ch->peer);
    json_string(f, ch->tensor);
    bprintf(f, ",\"tag\":%d,\"m\":%d,\"step\":%lld,\"bytes\":%lld,\"flow\":%lld}}", ch->tag, e->m,
            (long long)e->step, (long long)ch->bytes, (long long)id);
    // The flow's ends 1 ns inside the slices (the send's start, the receive's end), so that a
    // viewer binds each to its slice whatever it does with equal timestamps.
    int64_t in = t1 - t0 >= 2 ? 1 : 0, at = ch->send ? t0 + in : t1 - in;
    bprintf(f,
            ",\n{\"name\":\"message\",\"cat\":\"flow\",\"ph\":\"%s\",%s\"id\":%lld,\"pid\":%d,"
            "\"tid\":%d,\"ts\":",
            ch->send ? "s" : "f", ch->send ? "" : "\"bp\":\"e\",", (long long)id, rank, tid);
    micros(f, at);
    bprintf(f, "}");
  }
  free(msg);
  free(tmp);
  free(lane);
  free(lane_end);
  *len = buf.n;
  return buf.p;
}

void pr_trace_finish(void) {
  const PrComm *c = tr.c;
  if (tr.overflow)
    fprintf(stderr, "warning: --trace: more events than the warm-up step counted; some were "
                    "dropped\n");
  double base = tr.origin;
  if (c && tr.local == c->nranks) { // one machine, one clock: rank 0's origin for all
    double *all = calloc((size_t)c->nranks, sizeof *all);
    prCheck(all != NULL, "the machine is out of memory", "--trace: cannot allocate");
    c->transport->allgather(&tr.origin, all, 1);
    base = all[0];
    free(all);
  }
  size_t len = 0;
  char *mine = format_rank(base, &len);
  int me = c ? c->rank : 0, saver = c ? c->save_rank : 0, nranks = c ? c->nranks : 1;
  char **texts = calloc((size_t)nranks, sizeof *texts);
  int64_t *lens = calloc((size_t)nranks, sizeof *lens);
  prCheck(texts && lens, "the machine is out of memory", "--trace: cannot allocate");
  texts[me] = mine, lens[me] = (int64_t)len;
  for (int r = 0; c && r < nranks; r++) { // the others' text to the save rank, in rank order
    if (r == saver) continue;
    c->transport->gather(&lens[r], sizeof lens[r], r, saver);
    if (me == saver) {
      texts[r] = malloc((size_t)lens[r] + 1);
      prCheck(texts[r] != NULL, "the machine is out of memory", "--trace: cannot allocate");
      texts[r][lens[r]] = '\0';
    }
    if (me == saver || me == r) c->transport->gather(texts[r], lens[r], r, saver);
  }
  if (me == saver) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", tr.path);
    FILE *f = fopen(tmp, "w");
    prCheck(f != NULL, "check the directory exists and is writable", "--trace: cannot write %s",
            tmp);
    fprintf(f, "{\"traceEvents\":[\n");
    for (int r = 0; r < nranks; r++) {
      fwrite(texts[r], 1, (size_t)lens[r], f);
      fputs(r + 1 < nranks ? ",\n" : "\n", f);
    }
    fprintf(f,
            "],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"generator\":\"pipec --trace\","
            "\"ranks\":%d,\"first_step\":%lld,\"end_step\":%lld}}\n",
            nranks, (long long)tr.first, (long long)tr.end);
    bool bad = ferror(f) != 0;
    bad = fclose(f) != 0 || bad;
    prCheck(!bad, "check that the disk has room", "--trace: writing '%s' failed", tmp);
    prCheck(rename(tmp, tr.path) == 0, "check the directory is writable",
            "--trace: cannot rename %s to %s", tmp, tr.path);
  }
  for (int r = 0; r < nranks; r++) free(texts[r]);
  free(texts);
  free(lens);
  free(tr.ev);
  free(tr.posted);
  tr.ev = NULL, tr.posted = NULL, tr.n = tr.cap = 0;
}

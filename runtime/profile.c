// profile.c: what `pipec profile` measures in a running pipeline program (--profile FILE):
// the seconds of every compute action per (virtual stage, kind F / B / W), the step end's
// optimizer seconds per rank, and the time of a message between neighbouring ranks at a few
// sizes. The generated program of `pipec profile` brackets each F, B and W call with
// pr_prof_act (a program compiled otherwise has no such calls: --profile then stops with an
// error); nothing is recorded before pr_prof_begin (after the warm-up step). Each action is
// timed twice: by the clock (pr_now) and by the calling thread's CPU time (pr_cpu_now), which
// leaves out the time the rank was descheduled while another rank ran on its core; `pipec
// profile` keeps the second where the ranks shared cores with one thread each (costs.c), since
// the simulator adds the sharing itself. Each (stage, kind) and the optimizer are summarised by
// a trimmed mean (trimmed_mean), the step by its median. At
// the end pr_prof_finish measures a ping-pong between ranks r and r + 1 for each r (the transport's
// blocking point-to-point gather, every other rank idle; the median round trip per size),
// collects the summaries on rank 0 with one all-gather and writes there one JSON document
// (atomically: FILE.tmp renamed) that `pipec profile` turns into a costs file (docs/pipeline.md,
// "Profiling and the simulator"). Each rank also records the one CPU its affinity mask allows
// (mpirun --bind-to core; -1 when it may run on several): the simulator then queues the ranks
// bound to one core on that core (docs/design/simulator.md, "Ranks that share cores"); where
// every rank is bound, the actions' clock intervals (a second all-gather) give per core the time
// it was inside one of its ranks' actions but ran none of them (stolen_seconds). Samples are kept
// in arrays grown by doubling: profiling runs are not the allocation-free training runs
// tests/alloc checks.
#define _GNU_SOURCE // sched_getaffinity, CPU_COUNT
#include "pipert.h"

#include <sched.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
  PROF_MAXV = 256,    // virtual stages recorded (a stage beyond it is an error)
  PROF_SIZES = 5,     // ping-pong message sizes
  PROF_REPS = 12,     // round trips per size (after two not timed)
  PROF_IV_STEPS = 64, // steps whose action intervals are kept (every rank gets all ranks' copies)
};

static const int64_t prof_bytes[PROF_SIZES] = {64, 4096, 65536, 524288, 2097152};

typedef struct Samples {
  double *v; // durations, seconds
  int64_t n; // count
  int64_t cap;
} Samples;

static struct {
  bool on;                   // recording (between pr_prof_begin and pr_prof_finish)
  const char *path;          // --profile FILE
  Samples s[PROF_MAXV][3];   // per (stage, F / B / W), by the clock
  Samples cpu[PROF_MAXV][3]; // the same actions, the calling thread's CPU seconds
  Samples opt;               // the step end's optimizer, per step
  Samples step;              // whole steps (train_step and step end)
  bool any;                  // a pr_prof_act call was seen (the program has the hooks)
  Samples iv;                // every recorded action: its start, end (pr_now) and CPU seconds
} prof;

static void push(Samples *s, double x) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->v = realloc(s->v, (size_t)s->cap * sizeof *s->v);
    prCheck(s->v != NULL, "the machine is out of memory", "--profile: cannot grow the samples");
  }
  s->v[s->n++] = x;
}

double pr_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void pr_prof_act(int kind, int v, double t0, double c0) {
  double c = pr_cpu_now(), t = pr_now();
  prof.any = true;
  if (!prof.on) return;
  prCheck(v >= 0 && v < PROF_MAXV && kind >= 0 && kind < 3,
          "profile a pipeline of at most 256 virtual stages", "--profile: stage %d out of range",
          v);
  push(&prof.s[v][kind], t - t0);
  push(&prof.cpu[v][kind], c - c0);
  if (prof.step.n < PROF_IV_STEPS) push(&prof.iv, t0), push(&prof.iv, t), push(&prof.iv, c - c0);
}

void pr_prof_opt(double seconds) {
  if (prof.on) push(&prof.opt, seconds);
}

void pr_prof_step(double seconds) {
  if (prof.on) push(&prof.step, seconds);
}

void pr_prof_begin(const char *path) {
  prCheck(prof.any,
          "compile the model with `pipec profile` (it builds the program with the timing hooks "
          "and runs it)",
          "--profile: this program was not compiled for profiling (no timed actions)");
  prof.path = path;
  prof.on = true;
}

static double median_of(Samples *s) {
  return s->n ? pr_median(s->v, s->n) : -1;
}

// The mean without the lowest and highest tenth: robust to a rare stall, while it still counts
// a regular cost (a median of actions shorter than a time slice would not).
static double trimmed_mean(Samples *s) {
  if (!s->n) return -1;
  pr_median(s->v, s->n); // sorts
  int64_t k = s->n / 10, n = 0;
  double sum = 0;
  for (int64_t i = k; i < s->n - k; i++) sum += s->v[i], n++;
  return sum / (double)n;
}

// Rank `from` sends `bytes` to rank `to` and back, reps times; its median one-way seconds
// (every rank calls it, in the same order; the others do nothing).
static double pingpong(const PrComm *c, char *buf, int64_t bytes, int from, int to) {
  double t[PROF_REPS];
  for (int i = -2; i < PROF_REPS; i++) {
    double t0 = pr_now();
    c->transport->gather(buf, bytes, from, to);
    c->transport->gather(buf, bytes, to, from);
    if (i >= 0) t[i] = (pr_now() - t0) / 2;
  }
  return pr_median(t, PROF_REPS);
}

// The one CPU this process may run on, or -1 (several, or the mask unknown).
static double bound_cpu(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1) return -1;
  for (int i = 0; i < CPU_SETSIZE; i++)
    if (CPU_ISSET(i, &set)) return i;
  return -1;
}

// Per rank, the seconds per step its core was inside an action of the ranks bound to it but ran
// none of them: the union of those actions' clock intervals less their CPU seconds (a partner
// polling for its messages, the kernel's switches), each core's shared among its ranks in
// proportion to their actions' CPU seconds. iv: per rank ni[r] intervals (start, end, CPU) at
// stride 3 * cap; bound: per rank its CPU. Writes stolen (S entries); false where a rank is not
// bound to one CPU. O(n log n) in the intervals.
static int by_start(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static bool stolen_seconds(int S, const double *iv, const int *ni, int cap, const int *bound,
                           double steps, double *stolen) {
  double *own = calloc((size_t)S, sizeof *own), *tmp = malloc((size_t)3 * cap * S * sizeof *tmp);
  bool ok = own && tmp && steps > 0;
  for (int r = 0; r < S && ok; r++) ok = bound[r] >= 0;
  for (int r = 0; ok && r < S; r++) {
    bool first = true; // r is the first rank on its CPU: it sums the core
    for (int q = 0; q < r; q++) first = first && bound[q] != bound[r];
    if (!first) continue;
    int n = 0;
    double cpu = 0;
    for (int q = r; q < S; q++) {
      if (bound[q] != bound[r]) continue;
      for (int i = 0; i < ni[q]; i++) {
        const double *x = iv + (size_t)q * 3 * cap + 3 * i;
        memcpy(tmp + 3 * n++, x, 3 * sizeof *x);
        own[q] += x[2];
        cpu += x[2];
      }
    }
    qsort(tmp, (size_t)n, 3 * sizeof *tmp, by_start);
    double uni = 0, end = -1e300;
    for (int i = 0; i < n; i++) {
      double a = tmp[3 * i] > end ? tmp[3 * i] : end, b = tmp[3 * i + 1];
      if (b > a) uni += b - a;
      if (b > end) end = b;
    }
    double st = uni > cpu ? (uni - cpu) / steps : 0;
    for (int q = r; q < S; q++)
      if (bound[q] == bound[r]) stolen[q] = cpu > 0 ? st * own[q] / cpu : 0;
  }
  free(own), free(tmp);
  return ok;
}

void pr_prof_finish(const PrComm *c) {
  if (!prof.on) return;
  prof.on = false;
  int S = c ? c->nranks : 1, me = c ? c->rank : 0;
  // Per rank: 3 means per stage, the optimizer's, one-way seconds per size to r + 1, the step's
  // median, the CPU it is bound to, then 3 CPU-time means per stage (at C).
  enum { C = 3 * PROF_MAXV + 3 + PROF_SIZES };
  int n = C + 3 * PROF_MAXV;
  double *mine = calloc((size_t)n, sizeof(double)), *all = calloc((size_t)n * S, sizeof(double));
  char *buf = malloc((size_t)prof_bytes[PROF_SIZES - 1]);
  prCheck(mine && all && buf, "the machine is out of memory", "--profile: cannot allocate");
  memset(buf, 0, (size_t)prof_bytes[PROF_SIZES - 1]);
  for (int v = 0; v < PROF_MAXV; v++)
    for (int k = 0; k < 3; k++) {
      mine[3 * v + k] = trimmed_mean(&prof.s[v][k]);
      mine[C + 3 * v + k] = trimmed_mean(&prof.cpu[v][k]);
    }
  mine[3 * PROF_MAXV] = trimmed_mean(&prof.opt);
  mine[3 * PROF_MAXV + 1 + PROF_SIZES] = median_of(&prof.step);
  for (int k = 0; k < PROF_SIZES; k++) mine[3 * PROF_MAXV + 1 + k] = -1;
  mine[3 * PROF_MAXV + 2 + PROF_SIZES] = bound_cpu();
  if (c) {
    c->transport->barrier();
    for (int r = 0; r + 1 < S; r++)
      for (int k = 0; k < PROF_SIZES; k++) {
        double t = pingpong(c, buf, prof_bytes[k], r, r + 1);
        if (me == r) mine[3 * PROF_MAXV + 1 + k] = t;
      }
    c->transport->allgather(mine, all, n);
  } else {
    memcpy(all, mine, (size_t)n * sizeof(double));
  }
  // Every rank's action intervals, padded to the longest list (two all-gathers).
  double niv = (double)(prof.iv.n / 3), *cnts = calloc((size_t)S, sizeof(double));
  prCheck(cnts != NULL, "the machine is out of memory", "--profile: cannot allocate");
  if (c)
    c->transport->allgather(&niv, cnts, 1);
  else
    cnts[0] = niv;
  int cap = 1, *ni = calloc((size_t)S, sizeof(int)), *bnd = calloc((size_t)S, sizeof(int));
  for (int r = 0; r < S; r++) cap = cnts[r] > cap ? (int)cnts[r] : cap;
  double *ivm = calloc((size_t)3 * cap, sizeof(double)),
         *iva = malloc((size_t)3 * cap * S * sizeof(double));
  prCheck(ni && bnd && ivm && iva, "the machine is out of memory", "--profile: cannot allocate");
  if (prof.iv.n) memcpy(ivm, prof.iv.v, (size_t)prof.iv.n * sizeof(double)); // (none: v is NULL)
  if (c)
    c->transport->allgather(ivm, iva, 3 * cap);
  else
    memcpy(iva, ivm, (size_t)3 * cap * sizeof(double));
  for (int r = 0; r < S; r++)
    ni[r] = (int)cnts[r], bnd[r] = (int)all[(size_t)r * n + 3 * PROF_MAXV + 2 + PROF_SIZES];
  double *stolen = calloc((size_t)S, sizeof(double));
  prCheck(stolen != NULL, "the machine is out of memory", "--profile: cannot allocate");
  double ivsteps = (double)(prof.step.n < PROF_IV_STEPS ? prof.step.n : PROF_IV_STEPS);
  bool have_stolen = me == 0 && stolen_seconds(S, iva, ni, cap, bnd, ivsteps, stolen); // (writes)
  if (me == 0) {
    // Latency + bytes / bandwidth, least squares over every pair's medians.
    double sx = 0, sy = 0, sxx = 0, sxy = 0, cnt = 0;
    for (int r = 0; r + 1 < S; r++)
      for (int k = 0; k < PROF_SIZES; k++) {
        double x = (double)prof_bytes[k], y = all[(size_t)r * n + 3 * PROF_MAXV + 1 + k];
        sx += x, sy += y, sxx += x * x, sxy += x * y, cnt++;
      }
    double slope = 0, lat = 0;
    if (cnt >= 2) {
      slope = (cnt * sxy - sx * sy) / (cnt * sxx - sx * sx);
      lat = (sy - slope * sx) / cnt;
    }
    if (!(slope > 0)) slope = 1e-12; // a flat fit: 1 TB/s
    if (!(lat > 0)) lat = 0;
    char *tmp = malloc(strlen(prof.path) + 5);
    prCheck(tmp != NULL, "the machine is out of memory", "--profile: cannot allocate");
    sprintf(tmp, "%s.tmp", prof.path);
    FILE *f = fopen(tmp, "w");
    prCheck(f != NULL, "check the directory exists and is writable", "--profile: cannot write %s",
            prof.path);
    fprintf(f, "{\n  \"pipec_profile\": 1,\n  \"ranks\": %d,\n  \"stages\": [", S);
    int first = 1;
    for (int v = 0; v < PROF_MAXV; v++)
      for (int r = 0; r < S; r++) {
        const double *m = all + (size_t)r * n + 3 * v, *u = all + (size_t)r * n + C + 3 * v;
        if (m[0] < 0 && m[1] < 0 && m[2] < 0) continue;
        fprintf(f,
                "%s\n    {\"v\": %d, \"rank\": %d, \"f\": %.9g, \"b\": %.9g, \"w\": %.9g, "
                "\"f_cpu\": %.9g, \"b_cpu\": %.9g, \"w_cpu\": %.9g}",
                first ? "" : ",", v, r, m[0] > 0 ? m[0] : 0, m[1] > 0 ? m[1] : 0,
                m[2] > 0 ? m[2] : 0, u[0] > 0 ? u[0] : 0, u[1] > 0 ? u[1] : 0, u[2] > 0 ? u[2] : 0);
        first = 0;
      }
    fprintf(f, "\n  ],\n  \"opt\": [");
    for (int r = 0; r < S; r++) {
      double o = all[(size_t)r * n + 3 * PROF_MAXV];
      fprintf(f, "%s%.9g", r ? ", " : "", o > 0 ? o : 0);
    }
    fprintf(f, "],\n  \"step\": [");
    for (int r = 0; r < S; r++)
      fprintf(f, "%s%.9g", r ? ", " : "", all[(size_t)r * n + 3 * PROF_MAXV + 1 + PROF_SIZES]);
    fprintf(f, "],\n  \"pingpong_bytes\": [");
    for (int k = 0; k < PROF_SIZES; k++)
      fprintf(f, "%s%lld", k ? ", " : "", (long long)prof_bytes[k]);
    fprintf(f, "],\n  \"pingpong_seconds\": [");
    for (int r = 0; r + 1 < S; r++) {
      fprintf(f, "%s[", r ? ", " : "");
      for (int k = 0; k < PROF_SIZES; k++)
        fprintf(f, "%s%.9g", k ? ", " : "", all[(size_t)r * n + 3 * PROF_MAXV + 1 + k]);
      fprintf(f, "]");
    }
    fprintf(f, "],\n  \"latency\": %.9g,\n  \"bandwidth\": %.9g,\n", lat, 1 / slope);
    // The machine the ranks share (one machine when pipec profile runs them): the simulator
    // lets at most cores / threads of them compute at once.
    fprintf(f, "  \"cores\": %ld,\n  \"threads\": %d,\n  \"bound\": [",
            sysconf(_SC_NPROCESSORS_ONLN), pr_threads());
    for (int r = 0; r < S; r++)
      fprintf(f, "%s%.0f", r ? ", " : "", all[(size_t)r * n + 3 * PROF_MAXV + 2 + PROF_SIZES]);
    fprintf(f, "]");
    if (have_stolen) { // every rank bound: what its core lost inside its ranks' actions
      fprintf(f, ",\n  \"stolen\": [");
      for (int r = 0; r < S; r++) fprintf(f, "%s%.9g", r ? ", " : "", stolen[r]);
      fprintf(f, "]");
    }
    fprintf(f, "\n}\n");
    bool bad = ferror(f) != 0;
    bad = fclose(f) != 0 || bad;
    prCheck(!bad && rename(tmp, prof.path) == 0, "check that the disk has room",
            "--profile: writing %s failed", prof.path);
    free(tmp);
  }
  free(mine);
  free(all);
  free(buf);
  free(cnts), free(ni), free(bnd), free(ivm), free(iva), free(stolen);
  free(prof.iv.v);
  for (int v = 0; v < PROF_MAXV; v++)
    for (int k = 0; k < 3; k++) free(prof.s[v][k].v), free(prof.cpu[v][k].v);
  free(prof.opt.v);
  free(prof.step.v);
}

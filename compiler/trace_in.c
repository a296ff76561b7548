// trace_in.c: a program's --trace file (runtime/trace.c writes it; docs/pipeline.md, "Traces")
// read back as measured times of the compiled schedule's actions, for pipec plan --trace.
//
// One traced step is read: per rank (pid) its compute slices (thread 0) in time order must be
// the rank's LOAD F LOSS B W TIED_SUM NORM OPT actions in list order (kind from "cat", stage and
// microbatch from args); each SEND and RECV between two ranks is the message slice with its
// channel's tag and microbatch. An action's times: a compute action's slice; a SEND its post; a
// RECV the completion of its wait (as the prediction's RECV: when it completes); a copy between
// two stages of one rank, which has no slice, the end of the action before it. Times are seconds
// from the step's first event on any rank; the span ends with its last event; the bubble is the
// ranks' time outside F, B and W over S x span, as the prediction counts it.
//
// The ts and dur of each slice of the step are checked before any use (trace_time): numbers,
// finite, dur not negative, and at most MAX_TRACE_US either way, within which a double holds a
// time, and the sums and differences made of it, to 1/4 us, finer than the picture's 1 us
// (before: a negative dur drew a bubble of 129.9% and rectangles of negative width, and a ts of
// 1e300 made every other time vanish: "measured step 0.000 ms").
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "files.h"
#include "schedule.h"
#include "simulate.h"
#include "trace_in.h"

static bool compute_kind(ActionKind k) {
  return k != ACT_SEND && k != ACT_RECV && k != ACT_COPY && !action_mark(k) && !action_step_msg(k);
}

static int num(const cJSON *o, const char *k, int dflt) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(x) ? (int)x->valuedouble : dflt;
}

static const char *str(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(x) ? x->valuestring : "";
}

typedef struct Slice { // one "X" event of the step
  const cJSON *e;      // the event
  double ts, dur;      // microseconds
} Slice;

// Largest |ts| and dur read, in microseconds (1e15 us: 31.7 years).
#define MAX_TRACE_US 1e15

// The ts or dur (key) of traceEvents[idx], e, in *out (microseconds); false after reporting why
// it is not one a run measures.
static bool trace_time(const cJSON *e, const char *key, int idx, const char *path, Diag *d,
                       double *out) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(e, key);
  if (!cJSON_IsNumber(x)) {
    diag_error(d, (Loc){0, 0}, "trace '%s': traceEvents[%d]: expected a number '%s' (microseconds)",
               path, idx, key);
    return false;
  }
  double v = x->valuedouble;
  bool dur = strcmp(key, "dur") == 0;
  if (isfinite(v) && (!dur || v >= 0) && fabs(v) <= MAX_TRACE_US) {
    *out = v;
    return true;
  }
  char got[32], why[160];
  for (int digits = 6; digits <= 17; digits++) // the shortest form that reads back as v
    if (snprintf(got, sizeof got, "%.*g", digits, v) > 0 && strtod(got, NULL) == v) break;
  if (!isfinite(v))
    snprintf(why, sizeof why, "expected a finite number (microseconds), got %s", got);
  else if (v < 0 && dur)
    snprintf(why, sizeof why, "expected a non-negative number (microseconds), got %s", got);
  else
    snprintf(why, sizeof why, "%s microseconds is no measurement (expected at most %g%s)", got,
             MAX_TRACE_US, dur ? "" : " either way");
  diag_error(d, (Loc){0, 0}, "trace '%s': traceEvents[%d].%s: %s", path, idx, key, why);
  return false;
}

static int by_ts(const void *a, const void *b) {
  const Slice *x = a, *y = b;
  return x->ts < y->ts ? -1 : x->ts > y->ts;
}

static char *slurp(const char *path, Diag *d) {
  const char *kind;
  FILE *f = open_regular(path, &kind);
  if (!f && kind) {
    diag_error(d, (Loc){0, 0}, "trace '%s' is %s, not a regular file", path, kind);
    return NULL;
  }
  if (!f) {
    diag_error(d, (Loc){0, 0}, "cannot read trace '%s': %s", path, strerror(errno));
    return NULL;
  }
  char *buf = NULL;
  size_t n = 0, cap = 0, got;
  do {
    if (cap - n < 65536) {
      char *nb = realloc(buf, cap = 2 * cap + 65536);
      if (!nb) break;
      buf = nb;
    }
    got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
  } while (got > 0);
  bool bad = ferror(f) || !buf;
  fclose(f);
  if (bad) {
    free(buf);
    diag_error(d, (Loc){0, 0}, "cannot read trace '%s'", path);
    return NULL;
  }
  buf[n] = '\0';
  return buf;
}

bool trace_read_step(const Program *p, const char *path, int step, SchedStats *st, int *step_out,
                     Arena *a, Diag *d) {
  char *text = slurp(path, d);
  if (!text) return false;
  cJSON *root = cJSON_Parse(text);
  free(text);
  const cJSON *evs = root ? cJSON_GetObjectItemCaseSensitive(root, "traceEvents") : NULL;
  bool ok = false;
  Slice *sl = NULL;
  if (!cJSON_IsArray(evs)) {
    diag_error(d, (Loc){0, 0}, "trace '%s' is not a --trace file (no traceEvents array)", path);
    goto done;
  }
  // The step: the given one, or the first traced.
  int n = cJSON_GetArraySize(evs), ns = 0, first = -1;
  const cJSON *e;
  cJSON_ArrayForEach(e, evs) {
    if (strcmp(str(e, "ph"), "X") != 0) continue;
    int s = num(cJSON_GetObjectItemCaseSensitive(e, "args"), "step", -1);
    if (s >= 0 && (first < 0 || s < first)) first = s;
  }
  if (step < 0) step = first;
  sl = calloc((size_t)n + 1, sizeof *sl);
  if (!sl) {
    diag_error(d, (Loc){0, 0}, "trace '%s': out of memory", path);
    goto done;
  }
  double origin = 0, last = 0;
  int idx = -1;
  cJSON_ArrayForEach(e, evs) {
    idx++;
    if (strcmp(str(e, "ph"), "X") != 0) continue;
    if (num(cJSON_GetObjectItemCaseSensitive(e, "args"), "step", -1) != step) continue;
    sl[ns] = (Slice){e, 0, 0};
    if (!trace_time(e, "ts", idx, path, d, &sl[ns].ts) ||
        !trace_time(e, "dur", idx, path, d, &sl[ns].dur))
      goto done;
    if (ns == 0 || sl[ns].ts < origin) origin = sl[ns].ts;
    if (ns == 0 || sl[ns].ts + sl[ns].dur > last) last = sl[ns].ts + sl[ns].dur;
    ns++;
  }
  if (ns == 0) {
    diag_error(d, (Loc){0, 0}, "trace '%s' has no events of step %d", path, step);
    goto done;
  }
  qsort(sl, (size_t)ns, sizeof *sl, by_ts);
  *st = (SchedStats){0};
  st->t0 = ARENA_ARRAY(a, double *, p->nranks);
  st->t1 = ARENA_ARRAY(a, double *, p->nranks);
  st->span = (last - origin) * 1e-6;
  double busy = 0;
  for (int r = 0; r < p->nranks; r++) {
    const RankProgram *rp = &p->ranks[r];
    st->t0[r] = ARENA_ARRAY(a, double, rp->nacts + 1);
    st->t1[r] = ARENA_ARRAY(a, double, rp->nacts + 1);
    int k = 0; // the next compute slice of rank r
    double at = 0;
    for (int i = 0; i < rp->nacts; i++) {
      const Action *x = &rp->acts[i];
      const char *want = action_name(x->kind);
      if (compute_kind(x->kind)) {
        while (k < ns && !(num(sl[k].e, "pid", -1) == r && num(sl[k].e, "tid", -1) == 0)) k++;
        const cJSON *ar = k < ns ? cJSON_GetObjectItemCaseSensitive(sl[k].e, "args") : NULL;
        if (!ar || strcmp(str(sl[k].e, "cat"), want) != 0 || num(ar, "v", -2) != x->v ||
            num(ar, "m", -2) != x->m) {
          diag_error(d, (Loc){0, 0},
                     "trace '%s', step %d: rank %d's action %d is %s(v%d, m%d), the trace's %s "
                     "(compile and plan with the same options)",
                     path, step, r, i, want, x->v, x->m, ar ? str(sl[k].e, "name") : "nothing");
          goto done;
        }
        st->t0[r][i] = (sl[k].ts - origin) * 1e-6;
        st->t1[r][i] = at = (sl[k].ts + sl[k].dur - origin) * 1e-6;
        if (x->kind == ACT_F || x->kind == ACT_B || x->kind == ACT_W)
          busy += st->t1[r][i] - st->t0[r][i];
        k++;
        continue;
      }
      const Channel *c = x->ch;
      if (action_mark(x->kind) || action_step_msg(x->kind) || // no slice
          p->vs[c->from_v].rank == p->vs[c->to_v].rank) {
        st->t0[r][i] = at;
        continue;
      }
      int j = 0;
      for (; j < ns; j++) {
        const cJSON *ar = cJSON_GetObjectItemCaseSensitive(sl[j].e, "args");
        if (num(sl[j].e, "pid", -1) == r && strcmp(str(sl[j].e, "cat"), want) == 0 &&
            num(ar, "tag", -1) == c->tag && num(ar, "m", -1) == x->m)
          break;
      }
      if (j == ns) {
        diag_error(d, (Loc){0, 0}, "trace '%s', step %d: rank %d has no %s of channel %d, m%d",
                   path, step, r, want, c->id, x->m);
        goto done;
      }
      double us = x->kind == ACT_SEND ? sl[j].ts : sl[j].ts + sl[j].dur;
      st->t0[r][i] = at = (us - origin) * 1e-6;
    }
  }
  st->bubble = st->span > 0 ? 1 - busy / (p->nranks * st->span) : 0;
  *step_out = step;
  ok = true;
done:
  free(sl);
  cJSON_Delete(root);
  return ok;
}

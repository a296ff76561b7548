// pipeline.c: the training loop's side of a pipeline job (S > 1 ranks), through the transport.
//
// Every rank's parameter table lists every parameter in canonical order; a rank holds some of
// them (data != NULL), and each has a home rank (the lowest holder of its owner) that speaks for
// it. At the start the home ranks tell everyone what each parameter carries (a gradient, AdamW's m
// and v or SGD's momentum), so every rank knows the whole checkpoint layout. At each step end
// every rank contributes [its loss, the pr_sumsq of every parameter it is home of (0 for the
// others), the first of those with a non-finite gradient (-1)] to one all-gather; then every rank
// sums the squared norm over all parameters in canonical order, each term from its home, adding
// exactly the terms pr_grad_norm2 adds at S = 1 (the zeros of the others change no bit), so the
// norm, the checks and the clipping decide the same everywhere and the same as one rank. Each
// rank's runtime statistics (pr_stats_snapshot) follow its entries, for the --stats table. The
// checkpoint transfers move every tensor save_rank does not hold from its home, in table order.
#include "pipeline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void pr_pipe_start(PrPipe *pp, const PrProgram *p) {
  const PrComm *c = p->comm;
  int n = p->nparams, w = n + 2 + PR_STAT_N;
  *pp = (PrPipe){.c = c, .params = p->params, .n = n, .dev = p->device};
  pp->mine = calloc((size_t)w, sizeof(double));
  pp->all = calloc((size_t)w * (size_t)c->nranks, sizeof(double));
  pp->layout = calloc((size_t)n + 1, 1);
  prCheck(pp->mine && pp->all && pp->layout, "the machine is out of memory",
          "cannot allocate the step end's buffers");
  for (int i = 0; i < n; i++) {
    const PrParam *q = &p->params[i];
    prCheck(q->home >= 0 && q->home < c->nranks && (q->home != c->rank || q->data),
            "a bug in the generated program", "parameter '%s': home rank %d, and this rank %s it",
            q->name, q->home, q->data ? "holds" : "does not hold");
    pp->mine[i] = q->home == c->rank ? (double)pr_pipe_flags(q) : 0;
  }
  pr_job_allgather(c->transport, pp->mine, pp->all, w);
  for (int i = 0; i < n; i++) {
    const PrParam *q = &p->params[i];
    pp->layout[i] = (unsigned char)pp->all[(size_t)q->home * (size_t)w + (size_t)i];
    // Another holder of a shared parameter carries the same (its copy steps identically).
    prCheck(!q->data || pr_pipe_flags(q) == pp->layout[i], "a bug in the generated program",
            "parameter '%s': rank %d and its home rank %d disagree on its gradient and optimizer "
            "state",
            q->name, c->rank, q->home);
  }
}

unsigned char pr_pipe_flags(const PrParam *q) {
  return (unsigned char)((q->grad ? PR_PIPE_GRAD : 0) | (q->m ? PR_PIPE_M : 0) |
                         (q->v ? PR_PIPE_V : 0));
}

void pr_pipe_step_end(PrPipe *pp, double local_loss, double *loss, double *norm2, int *first_bad) {
  const PrComm *c = pp->c;
  int n = pp->n, w = n + 2 + PR_STAT_N;
  pp->mine[0] = local_loss;
  int bad = -1;
  for (int i = 0; i < n; i++) {
    const PrParam *q = &pp->params[i];
    bool mine = q->home == c->rank && q->grad;
    double s = !mine ? 0 : pp->dev ? pp->dev->sumsq(q->grad, q->n) : pr_sumsq(q->grad, q->n);
    pp->mine[1 + i] = s;
    if (!isfinite(s) && bad < 0 && pp->dev) { // a device sum: a non-finite element (no overflow)
      bad = i;
    } else if (!isfinite(s) && bad < 0) { // NaN/inf in the gradient, or only an overflow of the sum
      PrGrad g = {q->name, q->grad, q->n};
      if (pr_first_nonfinite_grad(&g, 1) == 0) bad = i;
    }
  }
  pp->mine[n + 1] = bad;
  pr_stats_snapshot(pp->mine + n + 2); // every rank's statistics ride along (stats.c)
  double t = pr_now();
  pr_job_allgather(c->transport, pp->mine, pp->all, w);
  pr_stats.sync += pr_now() - t;
  double sum = 0;
  for (int i = 0; i < n; i++) sum += pp->all[(size_t)pp->params[i].home * (size_t)w + 1 + i];
  *norm2 = sum;
  *loss = pp->all[(size_t)c->report_rank * (size_t)w];
  bad = -1;
  for (int r = 0; r < c->nranks; r++) {
    int b = (int)pp->all[(size_t)r * (size_t)w + (size_t)n + 1];
    if (b >= 0 && (bad < 0 || b < bad)) bad = b;
  }
  *first_bad = bad;
}

void pr_pipe_await_abort(const PrComm *c) {
  if (c->rank == c->report_rank) return;
  // The report rank prints the error and aborts the job, which ends this process too; should
  // that not happen within seconds, the caller reports the error itself.
  for (double t0 = pr_now(); pr_now() - t0 < 10;) {
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

void pr_pipe_transfer(const PrPipe *pp, const PrTensorRef *refs, const int *param_of, int count) {
  const PrComm *c = pp->c;
  for (int k = 0; k < count; k++) {
    int64_t numel = 1;
    for (int d = 0; d < refs[k].rank; d++) numel *= refs[k].shape[d];
    c->transport->gather(refs[k].data, numel * (int64_t)sizeof(float), pp->params[param_of[k]].home,
                         c->save_rank);
  }
}

void pr_pipe_free(PrPipe *pp) {
  free(pp->mine);
  free(pp->all);
  free(pp->layout);
  *pp = (PrPipe){0};
}

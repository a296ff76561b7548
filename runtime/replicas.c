// replicas.c: the gradient exchange of stage replication (--replicas D; docs/pipeline.md, "Stage
// replication"). Each of the D replicas of the pipeline runs its share of the step's microbatches
// (M / D of them) into its own gradient buffers; every rank combines the gradients of the
// parameters it trains (PrParam.grad set: its stages' own and the copies of the shared ones it
// holds) with the D replicas of its pipeline rank. One all-gather over those replicas gives every
// replica all D partial sums; every replica then adds them in replica order 0, 1, .., D - 1,
// element by element, so each holds the same bits and no broadcast is needed. The loss sums are
// added in the same order and divided by the step's M. The norm, the checks, clipping and the
// optimizer that follow (pipeline.c, trainloop.c) then run on identical gradients in every
// replica, which stay bit-identical.
//
// The overlap. The all-gather is cut in buckets (PrComm.rep_param / rep_end, made by the compiler:
// codegen/buckets.c): one replica's message is the buckets' gradients in bucket order, then its
// loss sum (a double, a last bucket of its own). pr_replicas_begin, before a step's train_step,
// starts every receive; the program calls pr_replicas_ready(k) right after the kernel that makes
// bucket k's gradients final on this rank (inside a stage's last B or W: per layer), or after
// its tied sums, which copies them into the message and starts their sends, while the backward
// goes on with the earlier layers, the rank with its other stages' backward and the pipeline's
// other ranks with theirs; pr_replicas_combine, at the step
// end, sends the loss (and any bucket not sent yet), waits for everything and sums in replica
// order. The sums read the same numbers in the same order as an exchange at the step end, so the
// bits do not depend on the overlap: PIPEC_REPLICAS_OVERLAP=0 in the environment turns it off
// (every bucket sent at the step end, as before; tests/e2e/replicas.sh compares the two). The
// time the step end still waits for the exchange (the exposed part) is counted in
// pr_stats.exchange (--stats prints it under the table, pr_replicas_stats_print).
// The buffers and the transport's requests are made at the start (pr_replicas_start), none in a
// step (tests/e2e/replicas.sh counts the allocations of a replicated job).
//
// PipeDream's uneven form (PrComm.stage_reps) is the same exchange over the D_s replicas of each
// pipeline rank (a rank with D_s = 1 exchanges nothing: its sum is the step's); the program's
// nmicro is then the step's M, so the loss is divided by it alone.
#include "pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pr_replica = 0;

// The exchange of the step in progress: set by pr_replicas_begin, cleared by the combine (the
// generated train_step's pr_replicas_ready calls do nothing outside a step, e.g. the warm-up's).
static PrReplicas *active;

void pr_replicas_start(PrReplicas *r, const PrProgram *p) {
  const PrComm *c = p->comm;
  *r = (PrReplicas){.p = p, .D = pr_comm_replicas(c)};
  r->M = c ? (double)c->nmicro * (c->stage_reps ? 1 : r->D) : 1; // the step's microbatches
  const char *ov = getenv("PIPEC_REPLICAS_OVERLAP");
  r->overlap = !(ov && strcmp(ov, "0") == 0);
  if (r->D == 1) return;
  const PrTransport *t = c->transport;
  prCheck(t->replica_setup && t->replica_recv && t->replica_send && t->replica_wait &&
              t->world_barrier,
          "use the mpi transport (pipec compile --comm mpi) with --replicas",
          "the %s transport has no replicas", t->name);
  // The buckets: the compiler's (every trained parameter once), then the loss's.
  const int nb = c->rep_nbuckets, n = p->nparams;
  r->nb = nb + 1;
  r->at = malloc(((size_t)n + 1) * sizeof *r->at);
  r->off = malloc(((size_t)r->nb + 1) * sizeof *r->off);
  prCheck(r->at && r->off, "the machine is out of memory",
          "cannot allocate the replicas' gradient exchange");
  for (int i = 0; i < n; i++) r->at[i] = -1;
  int64_t bytes = 0;
  r->off[0] = 0;
  for (int k = 0; k < nb; k++) {
    for (int j = k ? c->rep_end[k - 1] : 0; j < c->rep_end[k]; j++) {
      int i = c->rep_param[j];
      prCheck(i >= 0 && i < n && p->params[i].grad && r->at[i] < 0,
              "a bug in the generated program",
              "the replicas' bucket %d names parameter %d, which this rank does not train or "
              "another bucket has",
              k, i);
      r->at[i] = bytes;
      bytes += p->params[i].n * (int64_t)sizeof(float);
    }
    r->off[k + 1] = bytes;
  }
  for (int i = 0; i < n; i++)
    prCheck(!p->params[i].grad || r->at[i] >= 0, "a bug in the generated program",
            "parameter '%s' is in no bucket of the replicas' exchange", p->params[i].name);
  r->loss_at = bytes;
  r->bytes = bytes + (int64_t)sizeof(double);
  r->off[r->nb] = r->bytes;
  r->mine = malloc((size_t)r->bytes);
  r->all = malloc((size_t)r->bytes * (size_t)r->D);
  r->ready = calloc((size_t)r->nb, sizeof *r->ready);
  prCheck(r->mine && r->all && r->ready, "the machine is out of memory",
          "cannot allocate the replicas' gradient exchange (%lld bytes)",
          (long long)r->bytes * (r->D + 1));
  memset(r->mine, 0, (size_t)r->bytes);
  t->replica_setup(r->mine, r->all, r->bytes, r->off, r->nb);
  // A first exchange (of nothing yet) makes whatever Open MPI allocates at the first messages
  // between the replicas: the steps then allocate nothing.
  t->replica_recv();
  for (int k = 0; k < r->nb; k++) t->replica_send(k);
  t->replica_wait();
}

void pr_replicas_begin(PrReplicas *r) {
  if (r->D == 1) return; // (an uneven form's rank without replicas)
  memset(r->ready, 0, (size_t)r->nb * sizeof *r->ready);
  if (r->overlap) r->p->comm->transport->replica_recv();
  active = r;
}

// Bucket k of the exchange in progress: its gradients into the message, its sends started.
static void send_bucket(PrReplicas *r, int k) {
  const PrComm *c = r->p->comm;
  if (k < r->nb - 1)
    for (int j = k ? c->rep_end[k - 1] : 0; j < c->rep_end[k]; j++) {
      const PrParam *q = &r->p->params[c->rep_param[j]];
      memcpy(r->mine + r->at[c->rep_param[j]], q->grad, (size_t)q->n * sizeof(float));
    }
  c->transport->replica_send(k);
  r->ready[k] = true;
}

void pr_replicas_ready(int k) {
  PrReplicas *r = active;
  if (!r || !r->overlap) return; // not in a step, or at the step end only
  prCheck(k >= 0 && k < r->nb - 1 && !r->ready[k], "a bug in the generated program",
          "pr_replicas_ready(%d): no such bucket, or sent already (%d buckets)", k, r->nb - 1);
  send_bucket(r, k);
}

double pr_replicas_combine(PrReplicas *r, double loss_sum) {
  const PrProgram *p = r->p;
  const int D = r->D;
  if (D == 1) return loss_sum / r->M; // the uneven form's rank without replicas
  prCheck(active == r, "a bug in the runtime", "pr_replicas_combine without pr_replicas_begin");
  active = NULL;
  memcpy(r->mine + r->loss_at, &loss_sum, sizeof loss_sum);
  double t = pr_now();
  if (!r->overlap) p->comm->transport->replica_recv();
  for (int k = 0; k < r->nb; k++)
    if (!r->ready[k]) send_bucket(r, k);
  p->comm->transport->replica_wait();
  double waited = pr_now() - t;
  pr_stats.sync += waited;
  pr_stats.exchange += waited;
  double loss = 0;
  for (int d = 0; d < D; d++) {
    double l;
    memcpy(&l, r->all + (size_t)d * (size_t)r->bytes + r->loss_at, sizeof l);
    loss = d == 0 ? l : loss + l;
  }
  for (int i = 0; i < p->nparams; i++) {
    const PrParam *q = &p->params[i];
    if (!q->grad) continue;
    const int64_t off = r->at[i];
    for (int64_t j = 0; j < q->n; j++) {
      float g;
      memcpy(&g, r->all + off + j * (int64_t)sizeof(float), sizeof g);
      for (int d = 1; d < D; d++) {
        float h;
        memcpy(&h, r->all + (size_t)d * (size_t)r->bytes + off + j * (int64_t)sizeof(float),
               sizeof h);
        g += h;
      }
      q->grad[j] = g;
    }
  }
  return loss / r->M;
}

void pr_replicas_stats_print(const PrReplicas *r, int64_t steps, int nranks, const double *now,
                             int now_stride, const double *before, int before_stride) {
  if (steps <= 0) return;
  const char *how = r->overlap ? "overlapped" : "at the step end: PIPEC_REPLICAS_OVERLAP=0";
  if (r->D > 1)
    printf("  replicas' gradient exchange (%d buckets, %s), exposed wait ms per step:", r->nb - 1,
           how);
  else // an uneven form's rank without replicas (its own buckets: none)
    printf("  replicas' gradient exchange (%s), exposed wait ms per step:", how);
  for (int k = 0; k < nranks; k++) {
    double a = now[(size_t)k * (size_t)now_stride + PR_STAT_EXCHANGE];
    double b = before ? before[(size_t)k * (size_t)before_stride + PR_STAT_EXCHANGE] : 0;
    printf(" rank %d %.2f%s", k, (a - b) / (double)steps * 1e3, k + 1 < nranks ? "," : "\n");
  }
}

void pr_replicas_free(PrReplicas *r) {
  if (active == r) active = NULL;
  free(r->mine);
  free(r->all);
  free(r->at);
  free(r->off);
  free(r->ready);
  *r = (PrReplicas){0};
}

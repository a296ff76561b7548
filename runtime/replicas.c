// replicas.c: the step end of stage replication (--replicas D; docs/pipeline.md, "Stage
// replication"). Each of the D replicas of the pipeline ran its share of the step's microbatches
// (M / D of them) into its own gradient buffers; before the gradient norm, every rank combines the
// gradients of the parameters it trains (PrParam.grad set: its stages' own and the copies of the
// shared ones it holds) with the D replicas of its pipeline rank. One all-gather over those
// replicas (the transport's replica_allgather) gives every replica all D partial sums, packed
// [this replica's loss sum (a double), then the gradients in parameter-table order]; every
// replica then adds them in replica order 0, 1, .., D - 1, element by element, so each holds the
// same bits and no broadcast is needed. The loss sums are added in the same order and divided by
// the step's M. The norm, the checks, clipping and the optimizer that follow (pipeline.c,
// trainloop.c) then run on identical gradients in every replica, which stay bit-identical.
// The buffers and the transport's requests are made at the start (pr_replicas_start), none in a
// step (tests/alloc counts a replicated job too).
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

int pr_replica = 0;

void pr_replicas_start(PrReplicas *r, const PrProgram *p) {
  const PrComm *c = p->comm;
  *r = (PrReplicas){.p = p, .D = c && c->replicas > 1 ? c->replicas : 1};
  if (r->D == 1) return;
  prCheck(c->transport->replica_allgather && c->transport->world_barrier,
          "use the mpi transport (pipec compile --comm mpi) with --replicas",
          "the %s transport has no replicas", c->transport->name);
  int64_t floats = 0;
  for (int i = 0; i < p->nparams; i++)
    if (p->params[i].grad) floats += p->params[i].n;
  r->bytes = (int64_t)sizeof(double) + floats * (int64_t)sizeof(float);
  r->mine = malloc((size_t)r->bytes);
  r->all = malloc((size_t)r->bytes * (size_t)r->D);
  prCheck(r->mine && r->all, "the machine is out of memory",
          "cannot allocate the replicas' gradient exchange (%lld bytes)",
          (long long)r->bytes * (r->D + 1));
  // A first exchange (of nothing yet) makes the transport's requests and whatever Open MPI
  // allocates at the first messages between the replicas: the steps then allocate nothing.
  memset(r->mine, 0, (size_t)r->bytes);
  c->transport->replica_allgather(r->mine, r->all, r->bytes);
}

double pr_replicas_combine(PrReplicas *r, double loss_sum) {
  const PrProgram *p = r->p;
  const int D = r->D;
  memcpy(r->mine, &loss_sum, sizeof loss_sum);
  char *at = r->mine + sizeof(double);
  for (int i = 0; i < p->nparams; i++) {
    const PrParam *q = &p->params[i];
    if (!q->grad) continue;
    memcpy(at, q->grad, (size_t)q->n * sizeof(float));
    at += q->n * (int64_t)sizeof(float);
  }
  double t = pr_now();
  p->comm->transport->replica_allgather(r->mine, r->all, r->bytes);
  pr_stats.sync += pr_now() - t;
  double loss = 0;
  for (int d = 0; d < D; d++) {
    double l;
    memcpy(&l, r->all + (size_t)d * (size_t)r->bytes, sizeof l);
    loss = d == 0 ? l : loss + l;
  }
  int64_t off = (int64_t)sizeof(double);
  for (int i = 0; i < p->nparams; i++) {
    const PrParam *q = &p->params[i];
    if (!q->grad) continue;
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
    off += q->n * (int64_t)sizeof(float);
  }
  return loss / ((double)p->comm->nmicro * D);
}

void pr_replicas_free(PrReplicas *r) {
  free(r->mine);
  free(r->all);
  *r = (PrReplicas){0};
}

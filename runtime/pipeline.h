// pipeline.h: the training loop's side of a pipeline job (pipeline.c; used by trainloop.c only).
#ifndef PIPERT_PIPELINE_H
#define PIPERT_PIPELINE_H

#include "pipert.h"

enum { PR_PIPE_GRAD = 1, PR_PIPE_M = 2, PR_PIPE_V = 4 }; // what a parameter carries (layout)

typedef struct PrPipe {
  const PrComm *c;       // the job
  const PrParam *params; // the parameter table (every parameter, canonical order)
  int n;                 // its entries
  double *mine;          // this rank's all-gather contribution (n + 2)
  double *all;           // every rank's (nranks * (n + 2))
  unsigned char *layout; // per parameter: PR_PIPE_* flags, as its home rank has them
  const PrDevice *dev;   // a device program's sums of squares (NULL: the CPU's pr_sumsq)
} PrPipe;

// What q carries on this rank: PR_PIPE_* flags.
unsigned char pr_pipe_flags(const PrParam *q);
// Checks the homes and learns the layout from the home ranks (collective; allocates).
void pr_pipe_start(PrPipe *pp, const PrProgram *p);
// The step end's all-gather (collective): the report rank's loss, the squared global gradient
// norm summed in canonical order (bitwise pr_grad_norm2's at S = 1), and the first parameter
// with a non-finite gradient (-1: none).
// Rank r's statistics snapshot (PR_STAT_N entries, taken before the all-gather) is at
// pp->all + r * pr_pipe_width(pp) + pp->n + 2 afterwards.
void pr_pipe_step_end(PrPipe *pp, double local_loss, double *loss, double *norm2, int *first_bad);
// Doubles per rank in pp->all.
static inline int pr_pipe_width(const PrPipe *pp) {
  return pp->n + 2 + PR_STAT_N;
}
// After a failed check that every rank found: the report rank returns at once (to print the error
// and abort the job); the others wait for that abort for some seconds, then return.
void pr_pipe_await_abort(const PrComm *c);
// Moves refs[k] (of parameter param_of[k]) from its home rank to save_rank, for k in order
// (collective: every rank passes the same list; data NULL where a rank neither sends nor receives).
void pr_pipe_transfer(const PrPipe *pp, const PrTensorRef *refs, const int *param_of, int count);
void pr_pipe_free(PrPipe *pp);

// Stage replication's gradient exchange (replicas.c; --replicas D).
typedef struct PrReplicas {
  const PrProgram *p; // the program
  int D;              // replicas of this rank (1: none; the uneven form's D_s)
  double M;           // the step's microbatches (the loss's divisor)
  bool overlap;       // buckets sent as their gradients become final (PIPEC_REPLICAS_OVERLAP=0:
                      // all at the step end)
  int nb;             // buckets: PrComm.rep_nbuckets, then the loss's
  int64_t *off;       // bucket k is bytes off[k] .. off[k + 1] of one replica's message
  int64_t *at;        // per parameter: its gradient's offset in the message (-1: not trained here)
  int64_t loss_at;    // the loss sum's offset (a double; the last bucket)
  int64_t bytes;      // one replica's message: the buckets' gradients, then the loss sum
  char *mine;         // this replica's message
  char *all;          // every replica's, replica order (D x bytes)
  bool *ready;        // per bucket: sent in the step in progress
} PrReplicas;
// Sizes and allocates the exchange, makes its requests (D = 1: nothing).
void pr_replicas_start(PrReplicas *r, const PrProgram *p);
// Before a step's train_step: starts the exchange's receives; from here the program's
// pr_replicas_ready(k) (comm.h) sends bucket k.
void pr_replicas_begin(PrReplicas *r);
// After this rank's train_step (collective over its D replicas): every gradient it trains
// becomes the sum of the D replicas' in replica order; returns the step's loss, the replicas'
// loss sums (loss_sum: this replica's) added in replica order, over M = nmicro x D.
double pr_replicas_combine(PrReplicas *r, double loss_sum);
// Under a --stats table (replica 0's S ranks, the same arguments as pr_stats_print): the
// exchange's wait at the step end per rank, the part the overlap left exposed.
void pr_replicas_stats_print(const PrReplicas *r, int64_t steps, int nranks, const double *now,
                             int now_stride, const double *before, int before_stride);
void pr_replicas_free(PrReplicas *r);

#endif

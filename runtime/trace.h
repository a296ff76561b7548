// trace.h: --trace FILE, a Chrome trace of the real run (trace.c; docs/pipeline.md, "Traces").
//
// The generated train_step brackets each action with pr_trace_begin(kind, v, m) and
// pr_trace_end(), the transport (comm_mpi.c) reports each message's post and the completion of
// its wait (pr_trace_post, pr_trace_done), and the training loop (trainloop.c) its NORM and OPT.
// Each hook is a test of pr_trace_on, which is true only inside a traced step: without --trace
// the hooks cost one predictable branch. A traced step records into a buffer allocated before
// the first step (no allocation in the loop); at the end the ranks' events go to the save rank,
// which writes one file.
#ifndef PIPERT_TRACE_H
#define PIPERT_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum PrTraceKind { // what a compute event is (the plan's action names)
  PR_TR_LOAD,              // LOAD(v, m): a stage's inputs of microbatch m
  PR_TR_F,                 // F(v, m): forward
  PR_TR_LOSS,              // LOSS(v, m): the loss of microbatch m added up
  PR_TR_B,                 // B(v, m): backward (input gradient; unsplit: all of it)
  PR_TR_W,                 // W(v, m): weight gradient
  PR_TR_TIED_SUM,          // TIED_SUM(v): stage v's step-end sums
  PR_TR_NORM,              // NORM: the global gradient norm, its checks, the clip
  PR_TR_OPT,               // OPT: the optimizer
  PR_TR_NKINDS             // count
} PrTraceKind;

extern bool pr_trace_on; // a traced step is running (trace.c)

void pr_trace_begin_(int kind, int v, int m);
void pr_trace_end_(void);
void pr_trace_post_(int stream, int m);
void pr_trace_done_(int stream, int m);

// Called by generated code around each action (m = -1: none, v = -1: the rank's).
static inline void pr_trace_begin(int kind, int v, int m) {
  if (pr_trace_on) pr_trace_begin_(kind, v, m);
}
static inline void pr_trace_end(void) {
  if (pr_trace_on) pr_trace_end_();
}
// Called by the transport: stream's message m is posted (a send or a receive), its wait is done.
static inline void pr_trace_post(int stream, int m) {
  if (pr_trace_on) pr_trace_post_(stream, m);
}
static inline void pr_trace_done(int stream, int m) {
  if (pr_trace_on) pr_trace_done_(stream, m);
}

// The training loop's side (trainloop.c), all only with --trace. setup: before the warm-up step
// (which it counts the events of); path: the file; steps [first, end) are traced; c: the job
// (NULL: one rank); local: ranks on this machine. ready: after the warm-up step, allocates and
// aligns the clocks (collective: a barrier). step: before each step. step_done: after its OPT.
// finish: collects every rank's events on the save rank, which writes the file (collective).
void pr_trace_setup(const char *path, int64_t first, int64_t end, const PrComm *c, int local);
void pr_trace_ready(void);
void pr_trace_step(int64_t step);
void pr_trace_step_done(void);
void pr_trace_finish(void);

#ifdef __cplusplus
}
#endif

#endif

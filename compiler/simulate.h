// simulate.h: the lock-step verifier and simulator of the action lists (compiler/simulate.c):
// deadlock freedom, the send-buffer and slot rules, the predicted step time and bubble, the grid.
#ifndef PIPEC_SIMULATE_H
#define PIPEC_SIMULATE_H

#include <stdio.h>

#include "pipeline.h"

// What the simulation predicts (schedule_verify).
typedef struct SchedStats {
  double bubble; // idle fraction of the ranks' time between step start and the last action
  double span;   // predicted step time in cost units (the last rank's finishing time)
  int *peak;     // per stage: peak microbatches in flight (F done, B, or W when split, not yet)
  int steps;     // lock-step steps until every rank is done
  double **t0;   // per rank per action: its predicted start (a RECV: when it completes)
  double **t1;   // per rank per action: its predicted end (t0 + its cost; 0 for non-compute)
} SchedStats;

// Per-stage costs of F, B and W in arbitrary units (NULL in schedule_verify: unit costs F = 1,
// B = 2, or B = W = 1 when B and W are split); seconds from partition_stage_costs.
typedef struct StageCost {
  double f; // forward segment
  double b; // input-gradient segment (unsplit: the whole backward)
  double w; // weight-gradient segment (0 when not split)
} StageCost;

// schedule_check, then the lock-step simulation of all ranks: a RECV can run once its SEND has
// run (on an earlier step) and the message is the next one on its pair of ranks (the same
// message order on both sides); if no rank can move before all are done, a deadlock, reported
// with the grid (schedule_grid) and the blocked actions marked. The send-buffer rule: the F or
// B that makes channel c's tensor for microbatch m + K (K of c's from_v) runs only after
// RECV(c, m) has run (the generated code waits for send (c, m) to complete there); a wait that
// never ends is a deadlock, its line naming the rule. Also no saved-activation slot
// (m mod K of its stage) reused while live (from its F to its B, or W when split). cost: nv
// entries or NULL. st (may be NULL) receives the prediction (peak from arena a, may be NULL when
// st is). False after reporting the first violation through d.
bool schedule_verify(const Program *p, const StageCost *cost, SchedStats *st, Arena *a, Diag *d);

// schedule_verify with each channel's transfer time (xfer: p->nch entries, NULL: 0, what
// `--costs` gives as latency + bytes / bandwidth): a RECV completes no earlier than its SEND's
// time plus the transfer, and an action the send-wait rule holds for a message starts no
// earlier than that message's completion (the same time, and no earlier than the receiver's post
// of its receive). The verdict is schedule_verify's; only the times differ.
bool schedule_verify_xfer(const Program *p, const StageCost *cost, const double *xfer,
                          SchedStats *st, Arena *a, Diag *d);

// schedule_verify, printing the grid (schedule_grid) of the completed run to out.
bool schedule_print_grid(const Program *p, FILE *out, Diag *d);

// schedule_verify at partition_stage_costs's costs: st->span is the predicted step time in
// seconds (the step end, TIED_SUM / NORM / OPT, costs 0), st->bubble the idle fraction at those
// costs. False after reporting through d.
bool schedule_predict(const Program *p, SchedStats *st, Arena *a, Diag *d);

// schedule_predict, printed as one line (pipec plan at S > 1): "predicted step time X ms,
// bubble Y% (stage costs: F GFLOP per step at R GFLOP/s, B MB through channels at W GB/s)".
bool schedule_print_prediction(const Program *p, FILE *out, Diag *d);

// The grid: one row per rank, one column per lock-step step, each cell the action run then
// ("F3", "B1", "W0", "s>" / "s<": SEND of an activation / gradient, "r>" / "r<": RECV, "ld",
// "ls": LOAD, LOSS, "T", "N", "O": TIED_SUM, NORM, OPT; "." idle); with V > 1 per-rank stages,
// F/B/W name the rank's chunk too ("F3.1": microbatch 3 of its chunk 1). With blocked (one
// index per rank, -1: none), each rank's blocked action is printed after the last step, marked
// with '*'. steps: the columns; at: per rank per action the step it ran (-1: not run).
void schedule_grid(const Program *p, int steps, int *const *at, const int *blocked, FILE *out);

#endif

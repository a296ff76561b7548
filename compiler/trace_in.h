// pipec plan --trace TRACE.json: the times a real run measured (a program's --trace file,
// runtime/trace.c) as a SchedStats, so that plan_out.c draws them in the form of the predicted
// picture (docs/pipeline.md, "Traces").
#ifndef PIPEC_TRACE_IN_H
#define PIPEC_TRACE_IN_H

#include "pipeline.h"
#include "simulate.h"

// Reads the trace at path and fills st (t0, t1 per rank per action, span, bubble; times in
// seconds from the step's first event) with the measured times of one traced step: `step`, or
// the first traced one when step < 0 (*step_out: the one read). Every rank's compute actions
// of that step must be p's in order and every message between ranks present, else an error
// naming the first difference. False after reporting through d.
bool trace_read_step(const Program *p, const char *path, int step, SchedStats *st, int *step_out,
                     Arena *a, Diag *d);

#endif

// pipec plan's pictures and data (--svg, --json): the compiled schedule drawn as the papers draw
// it and the whole plan as JSON, both from the simulator's predicted times (schedule_predict).
#ifndef PIPEC_PLAN_OUT_H
#define PIPEC_PLAN_OUT_H

#include "pipeline.h"
#include "simulate.h"

// The schedule as SVG (libxml2's xmlTextWriter): one row per rank, time left to right, a box per
// F / B / W from its predicted start to end (labelled with its microbatch, and the rank's chunk
// with V > 1), an arrow per SEND from its time to its RECV's on the peer rank, a time axis and a
// legend. st: schedule_predict's prediction (t0, t1 set). Written to path.tmp, renamed over path;
// false after reporting through d.
bool plan_write_svg(const Program *p, const char *sched, const SchedStats *st, const char *path,
                    Diag *d);

// The same picture at the times a real run measured (st from trace_read_step, trace_in.c); what
// says which ("step 1 of trace.json"), in the title.
bool plan_write_measured_svg(const Program *p, const char *sched, const SchedStats *st,
                             const char *what, const char *path, Diag *d);

// The plan as JSON (docs/pipeline.md, "Pictures and plan data"): partition, channels, per-rank
// actions with predicted start and end, per-rank memory (when the memplan pass ran). Atomic
// like plan_write_svg.
bool plan_write_json(const Program *p, const char *sched, const SchedStats *st, const char *path,
                     Diag *d);

#endif

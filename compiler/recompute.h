// recompute.h: activation recomputation (--recompute, compiler/recompute.c): which stages
// recompute, which of their tensors are boundary tensors kept in slots, and the r segment their
// B reruns first.
#ifndef PIPEC_RECOMPUTE_H
#define PIPEC_RECOMPUTE_H

#include <stdio.h>

#include "pipeline.h"

enum { RECOMPUTE_ALL = -1 }; // PartitionOptions.nrecomp: every stage recomputes

// Parses --recompute's value ("all", "none", or stage indices separated by commas: "0,2") into
// *stages (arena a) and *n (RECOMPUTE_ALL for all, 0 for none). NULL on success, else the usage
// error's message (without "pipec: ").
const char *recompute_parse(const char *arg, Arena *a, int **stages, int *n);

// The recomputing stages of a program of nv stages as flags (nv entries, arena a; NULL when
// none). False when an index is >= nv (*bad: the first such index).
bool recompute_flags(const int *stages, int n, int nv, Arena *a, bool **flags, int *bad);

// Whether t, a per-microbatch tensor of recomputing stage v, is one of its boundary tensors (kept
// in its slots): received (Channel.dst) or loaded (a data input), sent (Channel.t), or made by an
// F node that makes a sent tensor, the loss or a model output (those nodes are not rerun, so all
// their outputs stay). Everything else of the stage lives in the rank's work area, live within one
// action. sent: per tensor id, 1 + the stage that sends it (0: not sent).
bool recompute_boundary(const Program *p, int v, const Tensor *t, const int *sent);

// Marks the recomputing stages (flags: p->nv entries, or NULL: none) and fills each one's r
// segment (its F nodes that make no boundary tensor and whose outputs its B nodes read, directly
// or through other such nodes; graph order). After the comm pass (the
// channels), before the schedule is lowered (a recomputing stage's B and W stay one action).
void recompute_apply(Program *p, const bool *flags, Arena *a);

#endif

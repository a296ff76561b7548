// memplan.h: the memplan pass (compiler/memplan.c, place.c): each rank's static memory plan, its
// independent checker (plan_check.c) and its printers.
#ifndef PIPEC_MEMPLAN_H
#define PIPEC_MEMPLAN_H

#include <stdio.h>

#include "program.h"

struct Program;

// memplan pass: one plan per rank (prog->ranks[r].plan) from the rank's action list: the order
// of nodes is the schedule's, never decided here. Batch symbol bound to tc->mb_size. Places with
// a sweep over time and checks every rank's plan with plan_check (every build).
bool plan_memory(struct Program *prog, Diag *d);
// The independent checker of rank r's plan (compiler/plan_check.c), from the program and the
// plan alone: every tensor a node of the rank reads or writes, every exchange buffer of a
// parameter it holds, has storage inside its region (slotted ones in a slot of their stage);
// tied parameters at their owner's bytes; no two buffers of one slot share a byte while both
// are live, the live intervals recomputed here (a received tensor from the timeline's start, a
// sent one over the whole timeline, an input from its LOAD, the loss until LOSS); slots and
// strides as the stages' K. False after reporting the first violation ("internal error:
// memplan: ...").
bool plan_check(const struct Program *prog, int r, Diag *d);
// One rank's plan (pipec plan, --dump-after=memplan at S = 1): the bytes of each region and the
// total, in MiB and bytes.
void plan_print(const Graph *g, const TrainConfig *tc, const Plan *p, FILE *out);
// Rank r's plan on one line (pipec plan --stages S, one per rank): "rank r: params X B, grads
// Y B, optimizer Z B, activations W B (constants C B; vV: K slots of N B; ...), total T B (...
// MiB)".
void plan_print_rank(const struct Program *prog, int r, FILE *out);
// Warns when the plan's bytes exceed this machine's physical memory (where the generated program
// refuses to start).
void plan_warn_memory(const Plan *p, Diag *d);

#endif

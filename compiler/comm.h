// comm.h: the comm pass's interface (compiler/comm.c): the channels between stages and the
// exchange groups of parameters used on several stages, their checker and their dump.
#ifndef PIPEC_COMM_H
#define PIPEC_COMM_H

#include <stdio.h>

#include "pipeline.h"

// comm pass: from the partition, the channels (Program.ch) and exchange groups (Program.ex).
// Each tensor produced on stage v and read (by an F, B or W node) on v' != v gets one channel per
// consuming stage: activations forward, each gradient contribution (a tensor of its own, made by
// a consumer's B node) backward to the producer's stage; sent directly, never relayed. Model
// inputs, targets and parameters have no producer: read locally, no channel. Channels are in
// producer graph order, then first-use order; tag = id. Each channel gets its receive-side
// tensor (Channel.dst, kind T_RECV, appended to the graph) and the reads of t on to_v are
// rewired to it, so afterwards every tensor a stage's F/B/W nodes touch is its own (or a
// parameter, a per-step gradient buffer, a constant, a model input). Each exchange group lists
// the use buffers its step-end sum reads (Exchange.bufs). O(nodes + uses + uses x S).
bool pass_comm(Graph *g, Program *p, Diag *d);

// Checks the channels independently: every channel's dst is a T_RECV of t's dtype and shape
// read only on to_v (and every T_RECV is one channel's dst), no F/B/W node reads a tensor made
// on another stage, every channel is an edge from its producer's stage to a stage reading its
// dst, from_v is the producer's stage, grad iff the producer is not a forward node, no tensor
// has two channels to one stage; every exchange's bufs are the use buffers its sum reads.
bool comm_check(const Program *p, Diag *d);

// The channels (--dump-after=comm): one line per channel (tensor, from -> to, its receive-side
// tensor, bytes per microbatch, fwd / grad), then one line per exchange group followed by one
// line per use buffer of its sum (name, producing stage).
void comm_print(const Program *p, FILE *out);

#endif

// partition.h: the partition pass's interface (compiler/partition.c): its options (--stages,
// --split, the cost model's rates, --mem-cap, --topology, --costs), the pass, its checker and its
// dump. The cut model the automatic partitioner solves is compiler/cut.h.
#ifndef PIPEC_PARTITION_H
#define PIPEC_PARTITION_H

#include <stdio.h>

#include "pipeline.h"
#include "simulate.h"

// How the partition pass cuts: the command line's --stages, --split, --flops-rate, --bandwidth
// and --mem-cap.
typedef struct PartitionOptions {
  int stages;         // S (>= 1); 0: not given (1, or the count --split implies)
  const char **split; // --split: cut before these nodes or block instances (NULL: none)
  int nsplit;         // entries in split
  double flops_rate;  // FLOP/s of one rank (the automatic partitioner's compute rate)
  double bandwidth;   // bytes/s of one transfer between two ranks
  int64_t mem_cap;    // per-stage memory cap in bytes (estimate; 0: none)
  double *rank_bw;    // --topology: bytes/s from rank a to rank b at [a * nranks + b], stage v
                      // on rank v mod nranks (NULL: bandwidth between any two)
  int *rank_device;   // --topology: per rank the GPU (its dev) it runs on (NULL: none)
  int nranks;         // ranks rank_bw and rank_device cover
  const Costs *costs; // --costs FILE, bound to the graph (costs.h), or NULL
  int sched;          // the schedule (SchedKind) the automatic partitioner simulates
  int est_sched;      // the schedule whose microbatches in flight the memory estimates count
                      // (sched_inflight): sched, or a CSV's placement's (zb-v's V, the loop's)
  int virt;           // its stages per rank (V; 0 or 1: one)
  const int *recomp;  // --recompute: the recomputing stages (indices of the S x V stages)
  int nrecomp;        // count (RECOMPUTE_ALL: every stage; 0: none)
} PartitionOptions;

enum {
  SPLIT_MIN_INTENSITY = 8,    // FLOP per byte from which a weight-gradient node goes to W
  PART_DEFAULT_GFLOPS = 50,   // default --flops-rate, GFLOP/s
  PART_DEFAULT_GBYTES_S = 10, // default --bandwidth, GB/s
};

// partition pass: places every node of the differentiated graph on one of S virtual stages
// (Program.vstage_of_node, Program.vs with their segments, parameters and K; rank = stage) from
// the model's stage / split_before hints, --split, or the automatic partitioner. B/W nodes follow
// their forward node, the sum of an activation's gradient contributions follows the producer, a
// parameter's step-end sum follows the stages that use it (it is in the step segment of each; its
// vstage_of_node is the first). S = 1 places everything on stage 0.
bool pass_partition(Graph *g, const TrainConfig *tc, const PartitionOptions *o, Program *p,
                    Diag *d);

// Checks a partition: every node placed on a stage in range, B/W nodes on their forward node's
// stage, forward stages non-decreasing along every edge, every stage with forward nodes,
// S <= forward nodes, the segments holding exactly the nodes placed there.
bool partition_check(const Program *p, Diag *d);

// The partition table (--dump-after=partition): per stage its nodes (block instances compacted,
// transformer.h.0..3), parameters, FLOPs, activation bytes, bytes sent per microbatch.
void partition_print(const Program *p, FILE *out);

// Each stage's costs in seconds per microbatch (cost: p->nv entries; compiler/partition.c): the
// FLOPs of its F, B and W nodes (the registry's OpCost at the microbatch size, as the partition
// table counts them) at p->part_rate (--flops-rate), plus each channel it receives at
// program_link_bw (--bandwidth, or the --topology link between the two ranks): an activation in the
// F that reads it, a gradient in the B (the receiver copies the message). w counts the nodes of the
// stage's W segment and b the rest of its backward (unsplit: all of it, w 0). flops (NULL, or p->nv
// entries) receives each stage's FLOPs per microbatch. After the comm pass (the channels) and
// sched_build (each stage's split).
void partition_stage_costs(const Program *p, StageCost *cost, double *flops);

// Bytes/s of a transfer from stage from_v to stage to_v: the --topology link between their
// ranks (Program.rank_bw), else p->part_bandwidth.
double program_link_bw(const Program *p, int from_v, int to_v);

#endif

// cut.h: the cut model, the automatic partitioner's problem without the graph. A model is a
// chain of units (block instances and the nodes outside blocks, in forward order); a cut is S
// contiguous unit ranges. This header owns the problem (CutProblem: per unit FLOPs, activation
// bytes and seconds, the tensors and parameters that cross units), its sums and memory
// estimate (cut.c), the exact dynamic program (cut.c), the simulated step and its refinement
// (partition_sim.c), and the graph's units (units.c). The partition pass (partition.c) builds a
// CutProblem from the graph and solves it with these; the costs file (costs.c) is read per unit.
// Nothing here includes the pass's headers, so partition, costs and partition_sim form no cycle.
#ifndef PIPEC_CUT_H
#define PIPEC_CUT_H

#include "../ir/ir.h"

// The automatic partitioner's problem, on units (block instances and the nodes outside blocks,
// in forward order): exposed for the unit test, which checks partition_dp against brute force.
typedef struct CutTensor {
  int from;     // unit that produces it
  int *to;      // units that read it (each > from), ascending, distinct
  int nto;      // count
  double bytes; // bytes per microbatch
  bool grad;    // a gradient flows back to the producer (its contribution is sent back too)
} CutTensor;

typedef struct CutParam {
  int *units;   // units that read it, ascending, distinct
  int nunits;   // count
  double bytes; // bytes it holds on every stage that reads it: value, gradient, optimizer state
} CutParam;

typedef struct CutProblem {
  int n;              // units
  double *flops;      // per unit: FLOPs of its F, B and W nodes per microbatch
  double *act_bytes;  // per unit: activation bytes kept for backward per microbatch
  double *conv_bytes; // per unit: --precision: the largest conversion area one call of its nodes
                      // needs (the rank's area is the largest of its units'; NULL: none)
  CutTensor *t;       // tensors read outside the unit that makes them
  int nt;             // count
  CutParam *p;        // parameters
  int np;             // count
  double rate;        // FLOP/s
  double bandwidth;   // bytes/s
  double *stage_bw;   // per stage r of S: bytes/s of what it receives, the link from stage r - 1
                      // (--topology; > 0, stage 0's too; NULL: bandwidth for every stage)
  double mem_cap;     // bytes per stage (0: none)
  int M;              // microbatches per step (1F1B keeps min(S - r, M) in flight on stage r)
  int *inflight;      // per stage r: the microbatches in flight its estimate counts (the
                      // schedule's, sched_inflight; NULL: min(S - r, M), 1F1B's)
  const bool *recomp; // per stage r: it recomputes (--recompute; NULL: none), its estimate
                      // boundary bytes x in flight + its activations once
  const bool *cut_ok; // per unit u: a stage may start at u (NULL: every unit)
  // The simulated step (compiler/partition_sim.c; NULL or 0 where a test builds a problem):
  double *uf, *ub, *uw; // per unit: seconds of its F, B (input gradient), W (weight gradient)
  double latency;       // seconds per message between two ranks
  double opt_per_byte;  // step-end optimizer seconds per byte of CutParam.bytes
  // The profiled machine (costs_rank_cores; 0 / NULL: a core per rank):
  int slots;            // ranks that compute at once (cores); fewer than the ranks: they share
  const int *pin;       // per rank: its core 0 .. slots - 1 (ranks bound to CPUs; NULL: any free)
  const double *stolen; // per rank: seconds per step its shared core loses inside its actions
  int npin; // the ranks slots, pin and stolen were made for (the replay of another S ignores them)
} CutProblem;

// The predicted step time of schedule sched (SchedKind) with V stages per rank over the S x V
// stages that start at starts (nv = S * V entries): each stage's F, B and W the sums of its
// units' uf, ub, uw (W kept apart only where the schedule has W actions), every message
// latency + its stage's crossing bytes / bandwidth, each rank's compute order from sched_order
// run as soon as its inputs arrived, then the slowest rank's optimizer after the step end.
// INFINITY when a stage's memory estimate exceeds the cap or the schedule cannot run (S, V, M).
// O(actions + S x V x (tensors + params)).
double partition_simulate(const CutProblem *cp, int sched, int S, int V, const int *starts);

// Improves the cut at starts (nv = S x V stage starts, a feasible one: the dynamic program's)
// for the simulated step: moves one cut at a time by 1, 2, 4, ... units (where cut_ok allows)
// while the best move shortens partition_simulate's step, from starts and from the even split
// (equal unit counts), keeping the better end point. Returns the simulated step of the result
// (INFINITY when the schedule cannot be simulated: starts unchanged).
double partition_refine(const CutProblem *cp, int sched, int S, int V, int *starts);

// The units (block instances and the nodes outside blocks, in forward order) of the
// differentiated graph g: per node id its unit (the unit of its forward node; -1 for step-end
// nodes) into unit_of_node (g->nnodes entries), their labels (as --split names them) into *label
// (g's arena). Returns the count. What a costs file's units are (compiler/costs.c).
int partition_units(Graph *g, int *unit_of_node, const char ***label);

// Seconds of stage r of S covering units [a, b): FLOPs / rate + the bytes of the cross-stage
// tensors it reads (each activation received, and its gradient contribution sent back when it
// has one) / bandwidth (stage_bw[r] where given: a tensor from a stage before r - 1 is charged
// at that link too, which keeps the cost a function of the stage's own range); INFINITY when its
// estimated memory (parameter bytes + activation bytes x min(S - r, M) + the conversion area)
// exceeds the cap. The
// reference definition: O(tensors + params) per call.
double partition_stage_cost(const CutProblem *cp, int S, int r, int a, int b);

// What a stage covering units [a, b) holds and reads (partition_stage_cost's and the simulated
// partitioner's sums): O(tensors + params).
typedef struct CutSums {
  double flops;  // its units' FLOPs per microbatch
  double act;    // its units' activation bytes kept for backward per microbatch
  double fwd;    // bytes of the earlier units' tensors it reads (each once)
  double grad;   // ... of those whose gradient goes back (sent once more)
  double sent;   // bytes of its tensors read at later units (x 2 with a gradient coming back)
  double pbytes; // bytes of the parameters it reads
  double conv;   // --precision: its conversion area (the largest of its units')
} CutSums;
CutSums cut_sums(const CutProblem *cp, int a, int b);

// Whether stage r's memory estimate exceeds the cap (none: false): parameter bytes pbytes +
// activation bytes act x inflight, or for a recomputing stage (cp->recomp[r]) act once (the
// rerun's working set) + its boundary bytes bnd (received and sent on, each with its gradient
// when it has one) x inflight.
bool partition_over_cap(const CutProblem *cp, int r, double pbytes, double act, double bnd,
                        int inflight);
// The microbatches in flight stage r of S counts in its estimate (CutProblem.inflight).
int cut_inflight(const CutProblem *cp, int S, int r);

// The exact optimum: S stages (contiguous, non-empty unit ranges starting where cut_ok allows)
// minimising the slowest stage's partition_stage_cost. starts[r] receives stage r's first unit
// (starts[0] = 0). Returns the optimum (INFINITY when no cut fits: memory cap, too few units).
// Each stage end b sweeps the starts a leftwards only while the FLOPs of [a, b) stay under the
// balanced-FLOPs cut's cost, and only over the stage counts that reached a: about n^2 / S pairs
// for evenly sized units (plus their tensor and parameter reads), O(S * n) memory. Scratch from a.
double partition_dp(const CutProblem *cp, int S, int *starts, Arena *a);

// The forward node a backward or step node follows: its forward node, or for a gradient sum the
// producer of the tensor whose gradient it sums; NULL for a parameter's step-end sum (units.c).
const Node *unit_anchor(const Node *n);

// A unit's label from its nodes' names: their longest common prefix that ends at a '.' or at
// the end of every name ("transformer.h.2"); the name of a lone node outside blocks;
// "BLOCK.INDEX" when there is none (arena a).
const char *unit_label(Node *const *nodes, int n, Arena *a);

// The units of g's first nf (forward) nodes: a block instance's consecutive forward nodes, or
// one node outside blocks; every node when by_node. Per node its unit into *unit_of (nf + 1
// entries), per unit its first node into *unit_start (units + 1 entries, the last nf), per unit
// its label (as --split names it: "transformer.h.2", a node's name, or "BLOCK.INDEX") into
// *label; all from arena a. Returns the count.
int units_make(Graph *g, int nf, bool by_node, Arena *a, int **unit_of, int **unit_start,
               const char ***label);

#endif

// costs.h: the costs file (`pipec profile` writes it, `--costs FILE` reads it; docs/pipeline.md,
// "Profiling and the simulator"): measured seconds per microbatch of every partition unit's F,
// B (input gradient) and W (weight gradient), the link's latency and bandwidth and the
// optimizer's seconds per parameter byte. The partitioner and the simulator read per-node
// seconds from it: each unit's seconds shared among its nodes of that role in proportion to the
// registry's roofline estimate (FLOPs at 50 GFLOP/s + bytes at 10 GB/s), so any partition's
// stage costs are sums over its nodes, and the profiled partition's sums are its measurements.
#ifndef PIPEC_COSTS_H
#define PIPEC_COSTS_H

#include "pipeline.h"
#include "simulate.h"

typedef struct UnitCost {
  const char *name; // the unit's label (a block instance "transformer.h.2" or a node name)
  double f;         // forward seconds per microbatch
  double b;         // input-gradient seconds per microbatch
  double w;         // weight-gradient seconds per microbatch
} UnitCost;

typedef struct Costs {
  const char *path;    // the file, as given
  const char *model;   // the model it was measured on
  UnitCost *u;         // per unit, in the model's forward order
  int nu;              // count
  double latency;      // seconds of an empty message between two ranks
  double bandwidth;    // bytes per second between two ranks
  double opt_per_byte; // optimizer seconds per byte of parameter values at the step end
  int cores;           // "machine": the profiled machine's online cores (0: not recorded)
  int threads;         // ... and each rank's kernel threads there
  int concurrent;      // ranks that compute at once there: cores / threads (0: unlimited)
  int *bound;          // "machine.bound": the CPU each rank was bound to, in rank order (or NULL)
  int nbound;          // its length
  double *stolen;      // "machine.stolen": per rank the seconds per step its core lost inside its
                       // ranks' actions (partners polling, switches), in rank order (or NULL)
  int nstolen;         // its length
  double *node_s;      // per node id (after costs_bind): its seconds per microbatch (0: step)
  struct Source *src;  // the parsed file (costs_free)
} Costs;

// Frees what costs_load parsed (the arena holds the rest).
void costs_free(Costs *c);

// Reads and checks path (diagnostics through its own d, FILE:LINE:COL with the JSON path).
bool costs_load(Costs *c, const char *path, Arena *a, Diag *d);

// Binds the costs to the differentiated graph g: every unit of g must be in the file (else an
// error through d naming it); fills c->node_s. After autodiff, before the partition.
bool costs_bind(Costs *c, Graph *g, const TrainConfig *tc, Diag *d);

// The roofline estimate a unit's seconds are shared by (seconds of node n at the microbatch).
double costs_weight(const Node *n, int64_t mb);

// Per stage F / B / W seconds from the bound costs (sums over each stage's segments), per channel
// the transfer seconds (latency + bytes / bandwidth; 0 between two stages of one rank) and per
// rank the step end's seconds after the last compute action: its optimizer over its parameters'
// bytes plus the step end's messages (tied gradients between ranks, the norm's all-gather).
// xfer: p->nch entries, opt: p->nranks entries.
void costs_stage_costs(const Costs *c, const Program *p, StageCost *cost, double *xfer,
                       double *opt);

// How nranks ranks share the profiled machine's cores: the count of ranks that compute at once
// (0: as many as there are ranks), and where the profile bound each rank to a CPU (machine.bound
// for nranks ranks) each rank's core 0 .. count - 1 in pin (nranks entries), else pin[0] = -1
// (a rank takes any free core).
int costs_rank_cores(const Costs *c, int nranks, int *pin);

// `pipec profile`: from the program's measurement (the generated program's --profile FILE at
// raw_path) and the profiled Program p (its partition and segments), the costs file at out
// (atomic). *unbound: the cores the ranks shared without each being bound to one (so what a
// core loses to a partner rank is not in the file: the caller says so), else 0. False after
// reporting through d.
bool costs_from_profile(const Program *p, const char *sched, const char *raw_path, const char *out,
                        int *unbound, Diag *d);

#endif

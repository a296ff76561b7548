// The per-rank program as data: what the passes after autodiff produce about the (global,
// differentiated) graph and what codegen prints. A Program cuts the graph into virtual stages
// (VStage: its forward, input-gradient, weight-gradient and step-end node segments, its
// parameters and K, the microbatches it holds in flight), names the tensors that cross between
// stages (Channel) and gives each rank an ordered list of actions over (virtual stage v,
// microbatch m) (RankProgram) with that rank's memory plan. S = 1 (one rank, one stage, V = 1)
// is the degenerate case of the same types, not a separate path.
//
// This header is the post-autodiff types alone (with program.h's training configuration and
// memory plan) and their accessors. Each pass owns its interface: partition.h (and the cut model,
// cut.h), comm.h, recompute.h, schedule.h (the schedules, their lowering, the list's checker),
// simulate.h (the lock-step verifier), uneven.h, memplan.h.
//
// Where this improves on ../shared/design/pipeline-architecture.md's sketch, and why:
// - No separate Partition struct: the stage of a node is one array on the Program
//   (vstage_of_node) and the stages themselves live in Program.vs; a partition without its
//   stages' segments is never useful on its own, and one owner keeps them consistent.
// - The sketch's RankPlan is today's Plan (program.h) extended, not a new type: the plan's
//   fields are what codegen already reads, and a second plan type would have to be kept in sync.
// - Step-end actions are split by what they exchange: TIED_SUM (a stage's step-end sums of a
//   parameter's per-use gradients; across ranks the tied-gradient exchange), NORM (the squared
//   global gradient norm, its non-finite check and the clip; across ranks the norm exchange) and
//   OPT (the optimizer over the rank's parameters). Each is a place where ranks synchronise, so
//   the checker and the simulator see them as actions of their own.
// - LOSS is an action (the host reads microbatch m's loss after the last stage's F): it is a
//   read of a buffer, so the memory plan must keep the loss live until it, like any other use.
// - A Segment is a plain node array in graph order: the order inside a segment is the graph's
//   canonical order (pipeline-semantics.md §1-2), so no pass reorders nodes after autodiff.
#ifndef PIPEC_PIPELINE_H
#define PIPEC_PIPELINE_H

#include "program.h"

typedef enum ActionKind {
  ACT_LOAD,       // read microbatch m's data inputs of stage v (the stages that read an input)
  ACT_F,          // forward segment of stage v on microbatch m
  ACT_LOSS,       // host reads microbatch m's loss (the stage that computes it) into the step loss
  ACT_B,          // input-gradient segment of stage v on m (unsplit: also the weight gradients)
  ACT_W,          // weight-gradient segment of stage v on m (only when the program splits B and W)
  ACT_SEND,       // send channel ch's tensor of microbatch m to the stage that reads it
  ACT_RECV,       // receive channel ch's tensor of microbatch m from the stage that makes it
  ACT_TIED_SUM,   // step end of stage v: sums of a parameter's per-use gradients (step segment)
  ACT_NORM,       // step end of the rank: squared global gradient norm, non-finite check, clip
  ACT_OPT,        // step end of the rank: optimizer update of its parameters
  ACT_POST_RECV,  // post the receive of channel ch's message of microbatch m into its slot (a
                  // channel between two ranks; compiler/lower_comm.c places it); a RECV with none
                  // before it posts its receive itself (a blocking receive)
  ACT_WAIT_SEND,  // wait until the message SEND(ch, m) has completed before the next action, so
                  // that nothing overwrites the sent bytes (lower_comm.c); a send with none is
                  // waited for at the step end
  ACT_COPY,       // copy channel ch's tensor of microbatch m out of its stage's slot into the
                  // receiving stage's (a channel between two stages of one rank: no message;
                  // lower_comm.c makes it of the channel's SEND / RECV pair, at the RECV's place)
  ACT_WAIT_SENDS, // rank-wide (v, m -1): wait until every send of the rank so far has completed
                  // (lower_step_end.c: before the step end's exchange, and after its last sum)
  ACT_EX_POST,    // post the receive of exchange message m (Program.exm[m]) into the holder's
                  // copy of the use buffer
  ACT_EX_SEND,    // send exchange message m (the rank's use buffer to a holder rank)
  ACT_EX_WAIT,    // wait for the receive of exchange message m (before a TIED_SUM that reads it)
  ACT_COUNT
} ActionKind;

struct Channel;
typedef struct Costs Costs; // a costs file (compiler/costs.h)

typedef struct Action {
  ActionKind kind;          // what runs
  int v;                    // virtual stage (-1: rank-wide step-end actions NORM, OPT)
  int m;                    // microbatch 0..M-1 (-1: step-end actions; EX_POST, EX_SEND,
                            // EX_WAIT: the exchange message's index in Program.exm)
  const struct Channel *ch; // SEND, RECV, POST_RECV, WAIT_SEND, COPY: the channel; else NULL
} Action;

// Whether an action of kind k is a message mark (POST_RECV, WAIT_SEND): it runs no segment and
// takes no step of its own in the lock-step run (simulate.c: a POST_RECV runs as soon as its
// rank reaches it, a WAIT_SEND with the action after it).
static inline bool action_mark(ActionKind k) {
  return k == ACT_POST_RECV || k == ACT_WAIT_SEND;
}

typedef struct Segment {
  Node **nodes; // nodes in graph (canonical) order
  int n;        // count
} Segment;

typedef struct VStage {
  int v;           // index in Program.vs (stage order along the model: 0 = first)
  int rank;        // the rank that runs it
  Segment f;       // forward nodes (role F)
  Segment b;       // input-gradient nodes (role B; when B and W are not split also role W)
  Segment w;       // weight-gradient nodes (role W) when B and W are split; empty otherwise
  bool split;      // B and W are separate actions (zb-h1, unless every W follows its B)
  Segment step;    // step-end nodes (role step-end) of the parameters it owns
  Tensor **params; // owner parameters it updates, in canonical order
  int nparams;     // count
  int K;           // microbatches in flight: memory slots of its saved buffers (slot = m mod K)
  bool loads;      // reads a data input: has a LOAD per microbatch before its F
  bool has_loss;   // computes the loss: has a LOSS per microbatch after its F
  bool recompute;  // --recompute: its slots keep only its boundary tensors and its B reruns the
                   // forward first (segment r) into the rank's work area (compiler/recompute.c)
  Segment r;       // recompute: the F nodes B reruns first, in graph order (those that make no
                   // boundary tensor and whose outputs B needs); empty otherwise
} VStage;

typedef struct Channel {
  int id;        // index in Program.ch
  Tensor *t;     // the tensor sent (one gradient contribution is a tensor of its own)
  int from_v;    // stage that produces it
  int to_v;      // stage that reads it
  bool grad;     // a gradient (sent after B, backward) rather than an activation (after F)
  int tag;       // message tag, unique per channel (a transport's match key with m)
  int64_t bytes; // bytes per microbatch (the tensor at the microbatch size; comm pass)
  Tensor *dst;   // its receive-side copy on to_v (T_RECV "<t name>@v<to_v>", same dtype and
                 // shape): every F/B/W node of to_v that read t reads dst instead (comm pass)
} Channel;

// A parameter used on several stages (tied or shared): each of them holds it and sums its own
// uses' gradients; the partial sums are exchanged and combined in use order (comm pass).
typedef struct Exchange {
  Tensor *param;  // the owner parameter (storage owner of its ties)
  int *stages;    // the stages holding a partial sum, in use order (first use first)
  int n;          // count (>= 2)
  Tensor **bufs;  // the per-use gradient buffers (per-step, REG_GRADS) its step-end sum reads,
                  // in use order: every holder stage's rank has storage for each of them
  int *buf_stage; // per buf: the stage whose W (or unsplit B) node accumulates it
  int nbufs;      // count
} Exchange;

// One message of the step end's exchange of a tied or shared parameter (Exchange): use buffer
// buf of the group, sent by its stage's rank to another rank that holds the parameter, received
// into that rank's own copy of the buffer. Program.exm lists them by group, then buffer in use
// order, then receiving rank ascending; the tags follow the channels' in that order.
typedef struct ExMsg {
  int id;            // index in Program.exm
  const Exchange *x; // its exchange group
  Tensor *buf;       // the use buffer sent (the same tensor id on both ranks)
  int from;          // the rank of the buffer's stage: sends it
  int to;            // a holder rank other than from: receives it
  int tag;           // message tag: the largest channel tag + 1 + id
} ExMsg;

typedef struct RankProgram {
  int rank;     // rank id 0..nranks-1
  Action *acts; // the actions of one training step, in execution order
  int nacts;    // count
  int *vs;      // the virtual stages it runs (indices into Program.vs), ascending
  int nvs;      // count (V)
  Plan plan;    // its memory plan (plan_memory): regions, offsets, slots
} RankProgram;

typedef struct Program {
  Graph *g;              // the differentiated graph (global; stable node and tensor ids)
  const TrainConfig *tc; // training configuration (M = tc->microbatches)
  int M;                 // microbatches per step
  bool split_bw;         // the schedule splits B and W (zb-h1): stages may (VStage.split)
  const bool *offer;     // per stage: offered that split (sched_lower's split; NULL: every one)
  int *vstage_of_node;   // per node id: its virtual stage
  VStage *vs;            // virtual stages, stage order
  int nv;                // count (S * V)
  Channel *ch;           // tensors crossing between stages
  int nch;               // count
  Exchange *ex;          // parameters whose gradient partial sums are exchanged (comm pass)
  int nex;               // count
  RankProgram *ranks;    // one program per rank
  int nranks;            // S
  int replicas;          // D: copies of the pipeline (--replicas; 0 or 1: none); world rank of
                         // replica d's rank s = d * S + s; M above is per replica (M / D)
  const int *stage_reps; // --replicas D0,D1,.. with counts that differ (PipeDream's uneven form,
                         // compiler/uneven.c): per rank s its count D_s (NULL: none); M above
                         // is then the step's, replica r of s runs the m with m mod D_s = r
  const struct Program *pipe; // the uneven form's world program (uneven_lists): the pipeline
                              // program whose replicas' lists ranks are, one per world rank
                              // (NULL: ranks are the pipeline's)
  // Filled by the partition pass (read by its dump):
  const char *part_how;  // how the stages were chosen ("automatic", "--split", "stage hints")
  double part_rate;      // FLOP/s the cost model used
  double part_bandwidth; // bytes/s the cost model used
  double part_cost;      // the slowest stage's predicted seconds per microbatch (F + B + W)
  int *part_inflight;    // per stage: the microbatches in flight its memory estimate counts
  double *rank_bw;       // --topology: bytes/s from rank a to rank b at [a * nrank_bw + b]
                         // (NULL: part_bandwidth between any two; program_link_bw reads it)
  int *rank_device;      // --topology: per rank the GPU (its dev) it runs on (NULL: not placed)
  int nrank_bw;          // ranks rank_bw and rank_device cover (the pipeline's S)
  const Costs *costs;    // --costs FILE (measured costs; costs.h) or NULL: the cost model
  struct ExMsg *exm;     // the exchange messages of the step end (lower_step_end.c)
  int nexm;              // count
} Program;

// ---- Accessors of the types above

// The index of a compute kind in per-kind tables: F 0, B 1, W 2 (-1: another kind).
static inline int action_fbw(ActionKind k) {
  return k == ACT_F ? 0 : k == ACT_B ? 1 : k == ACT_W ? 2 : -1;
}

// The action that releases a microbatch's slot on stage s (its last compute action): W when the
// stage splits B and W, else B.
static inline ActionKind stage_release(const VStage *s) {
  return s->split ? ACT_W : ACT_B;
}

// The slots of stage s's saved buffers (microbatch m in slot m mod stage_slots): its K, at least 1
// (K is 0 before the schedule sets it).
static inline int stage_slots(const VStage *s) {
  return s->K > 0 ? s->K : 1;
}

// The core that rank r's next action takes in a shared-cores replay (simulate.c's limit_ranks,
// partition_sim.c's replay): its bound one (pin[r]) or, pooled, the first of slots to free (core:
// when each frees).
static inline int core_for(const double *core, int slots, const int *pin, int r) {
  if (pin) return pin[r];
  int k = 0;
  for (int j = 1; j < slots; j++)
    if (core[j] < core[k]) k = j;
  return k;
}

// Stage v's chunk: its index among its rank's stages (RankProgram.vs, ascending), as the grid and
// the picture name it ("F3.1": microbatch 3 of chunk 1). After sched_build.
static inline int stage_chunk(const Program *p, int v) {
  if (p->pipe) p = p->pipe; // a world program: its pipeline rank's stages
  const RankProgram *r = &p->ranks[p->vs[v].rank];
  for (int i = 0; i < r->nvs; i++)
    if (r->vs[i] == v) return i;
  return 0;
}

// How many of p's stages split B and W (sched_build sets each stage's split).
static inline int split_stages(const Program *p) {
  int n = 0;
  for (int v = 0; v < p->nv; v++) n += p->vs[v].split;
  return n;
}

// Whether an action of kind k is a message action of the step end (WAIT_SENDS, EX_*): the
// lock-step simulator runs it with no step of its own (the exchange is not timed).
static inline bool action_step_msg(ActionKind k) {
  return k == ACT_WAIT_SENDS || k == ACT_EX_POST || k == ACT_EX_SEND || k == ACT_EX_WAIT;
}

#endif

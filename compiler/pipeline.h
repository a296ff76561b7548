// The per-rank program as data: what the passes after autodiff produce about the (global,
// differentiated) graph and what codegen prints. A Program cuts the graph into virtual stages
// (VStage: its forward, input-gradient, weight-gradient and step-end node segments, its
// parameters and K, the microbatches it holds in flight), names the tensors that cross between
// stages (Channel) and gives each rank an ordered list of actions over (virtual stage v,
// microbatch m) (RankProgram) with that rank's memory plan. S = 1 (one rank, one stage, V = 1)
// is the degenerate case of the same types, not a separate path.
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

// schedule pass at S = 1: lowers the partition's one stage (p from pass_partition at one stage,
// and pass_comm) with sched_build's one-rank case, 1f1b, whatever --schedule says: per m LOAD, F,
// LOSS, B (B and W nodes in graph order); then TIED_SUM, NORM, OPT.
bool pass_schedule(Graph *g, const TrainConfig *tc, Program *p, Diag *d);

// Checks the action lists of any S and V (pipeline-semantics.md §7): every action on its
// stage's rank with v and m in range; every (v, m) has exactly one F and one B (and one W when
// split); B after F, W after B; the accumulating action (W when split, else B) of a stage in
// ascending m; LOAD before F, LOSS after F, one each where the stage has them; one SEND and one
// RECV per (channel, m) between two ranks, the SEND after the producing action, the RECV before
// the consuming one, and at most one POST_RECV (before its RECV, on the receiver) and one
// WAIT_SEND (after its SEND, on the sender); one COPY per (channel, m) within one rank, after the
// producing action and before the consuming one (no SEND, RECV or mark there, no COPY between
// ranks); per rank one TIED_SUM per stage, then one NORM, then one OPT, after all its F/B/W and
// its marks. The first violation is reported through d ("schedule: ...").
bool schedule_check(const Program *p, Diag *d);

// Stable text form of the program (stages, channels, each rank's actions), for golden tests.
void schedule_print(const Program *p, FILE *out);

// The action's name as printed ("F", "TIED_SUM", ...).
const char *action_name(ActionKind k);
// The index of a compute kind in per-kind tables: F 0, B 1, W 2 (-1: another kind).
static inline int action_fbw(ActionKind k) {
  return k == ACT_F ? 0 : k == ACT_B ? 1 : k == ACT_W ? 2 : -1;
}
// The text of an action for messages ("F(v0, m1)", "RECV(c0, m1)", "NORM") into buf.
void action_text(const Action *x, char *buf, size_t cap);
// The kind of the action of channel c's sending stage that makes its tensor: F for an
// activation; B for a gradient contribution (W when B and W are split and a W node makes it).
// The send-buffer rule's wait for (c, m) goes before that action of m + K.
ActionKind channel_maker(const Program *p, const Channel *c);

// Per (virtual stage v, microbatch m), at index v * M + m: the index in v's rank's action list
// of the last action of (v, m) (LOAD, F, LOSS, B or W: SEND, RECV and the marks carry no stage),
// or the RECV of a channel from v to another stage of its rank that copies m's tensor after it,
// when nothing of m + K on v's slots (its actions, its RECVs) comes before that RECV; -1 when it
// has none. last has nv * M entries. Where the slot of (v, m) frees: lower_comm puts the
// POST_RECVs of m + K after it, and memplan and plan_check keep a tensor sent within the rank up
// to it (compiler/lower_comm.c). O(actions) (a channel within a rank: O(actions^2) at most).
void schedule_last_actions(const Program *p, int *last);

// The lowering pass that makes the message traffic's timing actions (compiler/lower_comm.c):
// into each rank's list of compute actions, SENDs and RECVs, a POST_RECV(c, m) per message
// received (at the list's start for m < K of c's to_v, else right after the slot's previous
// microbatch's last action, schedule_last_actions) and a WAIT_SEND(c, m) per message sent where
// the send-wait rule puts it (before the first action of (from_v, m) after the SEND that runs the
// stage, else before the action that makes (c, m + K); none when that is past the step: the step
// end waits for every send). Readers (simulate, memplan, plan_check, codegen) read these marks'
// positions and derive nothing. Idempotent on a list that has them. False after reporting
// through d (an internal error: a list the rules cannot place).
bool lower_comm(Program *p, Arena *a, Diag *d);

// Per (channel c, microbatch m), at c * M + m: the index in the sending rank's list of the action
// a WAIT_SEND(c, m) comes before (the first non-mark action after it), -1 where none: read off
// the list's marks. wait has nch * M entries.
void action_send_waits(const Program *p, int *wait);

// Per (channel c, microbatch m), at c * M + m: the index in the receiving rank's list of its
// POST_RECV(c, m), -1 where none (the RECV posts itself). post has nch * M entries.
void action_recv_posts(const Program *p, int *post);

// ---- Built-in schedules (compiler/schedules.c) and the lock-step verifier (compiler/simulate.c)
// The schedules are built and verified at compile time; codegen prints each rank's list
// (emit_rank.c).

typedef enum SchedKind {
  SCHED_GPIPE,       // F(0..M-1), then B(0..M-1); V = 1
  SCHED_1F1B,        // warm-up min(S-1-r, M) F, then alternate F and B, then drain B; V = 1
  SCHED_INTERLEAVED, // Megatron's depth-first order over V stages per rank; M a multiple of S
  SCHED_ZBH1,        // 1f1b with B split into B (input gradient) and W (weight gradient); V = 1
  SCHED_ZBV,         // zero bubble V: two stages per rank (r and 2S - 1 - r), B and W split
  SCHED_COUNT
} SchedKind;

// The schedule's name as on the command line ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-v").
const char *sched_name(SchedKind k);
// Parses a name; false when it is none of them.
bool sched_parse(const char *name, SchedKind *k);

// The placement of schedule k: the rank (0..S-1) of stage v (0..S V - 1). The loop placement
// v mod S (interleaved: rank r holds stages r, S + r, 2S + r, ...), or zb-v's V: stage v < S on
// rank v, stage v >= S on rank 2S - 1 - v (rank r holds r and 2S - 1 - r: rank 0 the first and
// the last stage, rank S - 1 the two middle ones). sched_build sets VStage.rank from it; every
// later pass reads VStage.rank (and RankProgram.vs), never a formula.
int sched_rank_of(SchedKind k, int S, int V, int v);

// The microbatches schedule k keeps in flight on stage v (0..S V - 1) at M, as the partitioner's
// memory estimate counts them (before any list exists): zb-v's K, stage v < S 2S - 1 - v and
// stage v >= S 2S - v (2S half stages per rank); every other schedule 1F1B's count along the
// chain of S V stages, S V - v; at most M.
int sched_inflight(SchedKind k, int S, int V, int M, int v);

// The compute order of rank r (0..S-1) of schedule k with V stages per rank and M microbatches:
// F, B and W actions only (on the stages sched_rank_of puts on r), no LOAD, LOSS or channels.
// Writes at most 3 * V * M actions to out and returns their count; -1 after reporting through d
// when the schedule cannot run these (S, V, M) (the message names the need). A pure function.
int sched_order(SchedKind k, int S, int V, int M, int r, Action *out, Diag *d);

// Builds p->ranks for schedule k: p->M, p->vs (nv = S * V stages, with loads / has_loss), p->ch
// and p->nch are given; it places stage v on rank sched_rank_of(k, S, V, v). Each rank's list is
// its compute order (sched_order) with LOAD before and LOSS after each F where the stage has them,
// each SEND right after the action that makes its tensor (channels in id order), each RECV in the
// sender's order no later than the action that reads it (posted before the earliest reader among it
// and the messages after it on the same pair of ranks; a copy between two stages of one rank
// also before the action that makes microbatch m + K's tensor into its source buffer), and then
// TIED_SUM per stage, NORM, OPT.
// Sets p->split_bw (zb-h1, zb-v) and each stage's split: under zb-h1 and zb-v a stage's W segment
// takes the weight-gradient nodes of its B segment, except on a stage where the split buys nothing
// (its B sends no gradient and every W(v, m) runs right after B(v, m)): there B stays the whole
// backward in graph order and the W actions are dropped, so each weight gradient is computed
// while its inputs are in cache and the slot plan is 1f1b's; a recomputing stage
// (VStage.recompute, set before) stays fused the same way. Sets each stage's K to its peak
// microbatches in flight. Arena a holds the lists.
// False after reporting through d.
bool sched_build(Program *p, SchedKind k, int S, int V, Arena *a, Diag *d);

// sched_build's lowering of given compute orders (a custom schedule's, compiler/sched_csv.c):
// comp[r] (ncomp[r] actions, F, B and W) is rank r's order; rank[v] (nv = S * V entries; NULL:
// v mod S) is where stage v runs; split[v] offers stage v the split of B and W as zb-h1 does
// (its order then has a W per B; split or fused as above), p->split_bw is whether any stage is
// offered it. comp and ncomp are rewritten (the dropped W actions). False after reporting
// through d.
// Where sched_lower (and sched_build) write each pass's lists from now on, for the pass goldens
// (tests/unit/test_pipeline_sched.c): the compute orders, then after add_send_recv, add_load_loss,
// add_step_end and lower_comm one line per rank (NULL: none, the default).
void sched_lower_dump(FILE *out);

bool sched_lower(Program *p, int S, int V, Action **comp, int *ncomp, const bool *split,
                 const int *rank, Arena *a, Diag *d);

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

// ---- PipeDream's uneven stage replication (compiler/uneven.c; Program.stage_reps)

// Rank s's replica count D_s (1 without the uneven form).
int uneven_reps(const Program *p, int rank);
// The world rank of replica r of rank s: stage by stage, D_0 + .. + D_{s-1} + r (r = 0 and
// rank = nranks: the job's size).
int uneven_world(const Program *p, int rank, int replica);
// Whether replica r of rank s runs action x of its list (x's microbatch m mod D_s = r, or a
// step-end action).
bool uneven_runs(const Program *p, int rank, int replica, const Action *x);
// The uneven form as one action list per world rank: *w is p with nranks the world's ranks
// (uneven_world(p, S, 0)), ranks[W(s, r)] replica r of rank s's list (the actions of rank s's
// list it runs, uneven_runs: its microbatches' compute, channel and mark actions, every step-end
// action) and w->pipe = p. What the one verifier (schedule_verify) checks: a message (c, m) goes
// between the replicas that run m on its two ranks (action_rank), each replica's stage keeps
// stage_nslots slots. Arena a holds the lists.
void uneven_lists(const Program *p, Program *w, Arena *a);
// The rank that runs microbatch m's actions of stage v (m < 0: the step end, replica 0's): the
// stage's rank, or in a world program (Program.pipe) the world rank of replica m mod D_s.
int action_rank(const Program *p, int v, int m);
// Stage v's slots on each of its replicas and microbatch m's slot among them. The unreplicated
// program's are K and m mod K; a replica of D runs only the m with m mod D = r, whose residues
// m mod K are those of r mod g, g = gcd(D, K): it keeps K / g slots and m's is (m mod K) / g. Its
// slot's next user is then m + lcm(D, K), after m + K, the unreplicated list's (the verifier
// checks the replicas' lists with these slots). Where a rank holds several stages (a copy
// between two of them has rules of its own on the slot's next microbatch) g is 1.
int stage_nslots(const Program *p, int v);
int stage_slot(const Program *p, int v, int m);
// The lock-step verification of the replicas' lists: schedule_verify of the world program
// (uneven_lists); its errors name world ranks.
bool uneven_verify(const Program *p, Diag *d);
// The counts' rules on the Program (a parameter held on several ranks needs the same count on
// each of them), then uneven_verify; list is --replicas' text for the messages.
bool uneven_check(const Program *p, const char *list, Diag *d);
// pipec plan: the replicas' line and each replica's list (nothing without the uneven form).
void uneven_print(const Program *p, FILE *out);

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

// ---- new (i30-ir2)
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

// The lowering pass after lower_comm (compiler/lower_step_end.c): fills Program.exm and makes
// the step end's messages actions of each rank's list: before its first TIED_SUM a WAIT_SENDS
// (where the rank sends anything), the EX_POSTs of its exchange receives, the EX_SENDs of its use
// buffers; before each TIED_SUM the EX_WAITs of the buffers its sums read (the last TIED_SUM:
// every one left); after the last TIED_SUM a WAIT_SENDS where the rank has exchange messages.
void lower_step_end(Program *p, Arena *a);
// Whether an action of kind k is a message action of the step end (WAIT_SENDS, EX_*): the
// lock-step simulator runs it with no step of its own (the exchange is not timed).
static inline bool action_step_msg(ActionKind k) {
  return k == ACT_WAIT_SENDS || k == ACT_EX_POST || k == ACT_EX_SEND || k == ACT_EX_WAIT;
}

#endif

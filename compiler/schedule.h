// schedule.h: the schedule pass's interface: the built-in schedules' orders and placements
// (compiler/schedules.c), their lowering into each rank's action list (schedules.c, and
// lower_comm.c for the message timing actions), the one-rank case (pass_schedule), the list's
// checker, its text form and the readers of its actions' places (schedule.c).
#ifndef PIPEC_SCHEDULE_H
#define PIPEC_SCHEDULE_H

#include <stdio.h>

#include "pipeline.h"

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

// The lowering pass after lower_comm (compiler/lower_step_end.c): fills Program.exm and makes
// the step end's messages actions of each rank's list: before its first TIED_SUM a WAIT_SENDS
// (where the rank sends anything), the EX_POSTs of its exchange receives, the EX_SENDs of its use
// buffers; before each TIED_SUM the EX_WAITs of the buffers its sums read (the last TIED_SUM:
// every one left); after the last TIED_SUM a WAIT_SENDS where the rank has exchange messages.
void lower_step_end(Program *p, Arena *a);

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

#endif

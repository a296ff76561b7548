// uneven.h: PipeDream's uneven stage replication (--replicas D0,D1,..; compiler/uneven.c): the
// replica counts, world ranks, the per-world-rank action lists the one verifier checks, slots.
#ifndef PIPEC_UNEVEN_H
#define PIPEC_UNEVEN_H

#include <stdio.h>

#include "pipeline.h"

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

#endif

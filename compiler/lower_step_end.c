// lower_step_end.c: the lowering pass after lower_comm that makes the messages of the step end
// actions of each rank's list (pipeline.h's WAIT_SENDS and EX_POST / EX_SEND / EX_WAIT), so that
// the printer of train_step, the checker and the simulator read them where the list has them
// and none derives them again.
//
// The exchange (compiler/comm.c's Exchange): a parameter held on several stages sums its per-use
// gradient buffers at each holder's step end (TIED_SUM); each use buffer is made on one stage
// (buf_stage) and every other rank that holds the parameter receives it into its own copy. One
// ExMsg per (group, buffer, receiving rank), in that order (Program.exm); tags after the
// channels'. The rules of this pass, per rank (the list ends with its TIED_SUMs, NORM, OPT):
// - before the first TIED_SUM: WAIT_SENDS where the rank sends a message (every channel send has
//   completed: the sends' buffers are free and their receivers past them), then the EX_POSTs of
//   the rank's exchange receives, then the EX_SENDs of its use buffers, each in Program.exm order;
// - before each TIED_SUM: the EX_WAITs (not yet placed) of the buffers its step nodes read, and
//   before the last TIED_SUM every one left;
// - after the last TIED_SUM: WAIT_SENDS where the rank has an exchange message.
// The pass drops these kinds first, so that it runs on any list. Linear in the actions and the
// step nodes' inputs per exchange message.
#include "pipeline.h"
#include "schedule.h"

// Fills Program.exm from Program.ex (each message's tag after the largest channel tag).
static void exchange_messages(Program *p, Arena *a) {
  int cap = 0, maxtag = -1;
  for (int i = 0; i < p->nex; i++) cap += p->ex[i].nbufs * p->nranks;
  for (int c = 0; c < p->nch; c++)
    if (p->ch[c].tag > maxtag) maxtag = p->ch[c].tag;
  p->exm = ARENA_ARRAY(a, ExMsg, cap + 1);
  p->nexm = 0;
  bool *holds = ARENA_ARRAY(a, bool, p->nranks + 1);
  for (int i = 0; i < p->nex; i++) {
    const Exchange *x = &p->ex[i];
    for (int r = 0; r < p->nranks; r++) holds[r] = false;
    for (int k = 0; k < x->n; k++) holds[p->vs[x->stages[k]].rank] = true;
    for (int j = 0; j < x->nbufs; j++) {
      if (x->buf_stage[j] < 0) continue;
      int src = p->vs[x->buf_stage[j]].rank;
      for (int r = 0; r < p->nranks; r++) {
        if (!holds[r] || r == src) continue;
        int id = p->nexm++;
        p->exm[id] = (ExMsg){id, x, x->bufs[j], src, r, maxtag + 1 + id};
      }
    }
  }
}

// Whether stage v's step nodes read tensor t.
static bool step_reads(const VStage *s, const Tensor *t) {
  for (int j = 0; j < s->step.n; j++)
    for (int k = 0; k < s->step.nodes[j]->nin; k++)
      if (s->step.nodes[j]->in[k] == t) return true;
  return false;
}

static Action msg(ActionKind k, const ExMsg *xm) {
  return (Action){k, -1, xm ? xm->id : -1, NULL};
}

void lower_step_end(Program *p, Arena *a) {
  exchange_messages(p, a);
  bool *waited = ARENA_ARRAY(a, bool, p->nexm + 1);
  for (int r = 0; r < p->nranks; r++) {
    RankProgram *rp = &p->ranks[r];
    int n = 0, first = -1, last = -1, nmsg = 0;
    bool sends = false;
    for (int i = 0; i < rp->nacts; i++) { // drop this pass's kinds
      if (!action_step_msg(rp->acts[i].kind)) rp->acts[n++] = rp->acts[i];
    }
    rp->nacts = n;
    for (int i = 0; i < n; i++) {
      sends |= rp->acts[i].kind == ACT_SEND;
      if (rp->acts[i].kind != ACT_TIED_SUM) continue;
      if (first < 0) first = i;
      last = i;
    }
    for (int k = 0; k < p->nexm; k++) {
      waited[k] = false;
      if (p->exm[k].from == r || p->exm[k].to == r) nmsg++;
      sends |= p->exm[k].from == r;
    }
    if (first < 0) continue; // no step end (checked by schedule_check)
    Action *out = ARENA_ARRAY(a, Action, (size_t)n + 2 * (size_t)nmsg + 3);
    int o = 0;
    for (int i = 0; i < n; i++) {
      const Action *x = &rp->acts[i];
      if (i == first) {
        if (sends) out[o++] = msg(ACT_WAIT_SENDS, NULL);
        for (int k = 0; k < p->nexm; k++)
          if (p->exm[k].to == r) out[o++] = msg(ACT_EX_POST, &p->exm[k]);
        for (int k = 0; k < p->nexm; k++)
          if (p->exm[k].from == r) out[o++] = msg(ACT_EX_SEND, &p->exm[k]);
      }
      if (x->kind == ACT_TIED_SUM)
        for (int k = 0; k < p->nexm; k++) {
          const ExMsg *q = &p->exm[k];
          if (q->to != r || waited[k] || (i != last && !step_reads(&p->vs[x->v], q->buf))) continue;
          waited[k] = true;
          out[o++] = msg(ACT_EX_WAIT, q);
        }
      out[o++] = *x;
      if (i == last && nmsg > 0) out[o++] = msg(ACT_WAIT_SENDS, NULL);
    }
    rp->acts = out;
    rp->nacts = o;
  }
}

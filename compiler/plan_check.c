// The memory plan's independent checker (program.h's plan_check): one rank's Plan against the
// program, sharing no code with the planner (memplan.c) but the overlap sweep (place_verify).
//
// It recomputes what the plan must hold from the rank's stages and action list: the tensors the
// nodes of its segments (F, B, W, step end) read and write, the exchange buffers of the
// parameters it holds, each slotted buffer's stage and live interval over the stage's
// one-microbatch timeline (one position per node of the stage's first microbatch's F, B and W
// actions and per LOAD and LOSS, in list order; the step end one past the last). A tensor lives
// from its producer's position, a received one (Channel.dst) from 0, an input from its LOAD; to
// its last reader's position (the step end when a step node reads it), the loss, the inputs and
// the outputs at least to LOSS, a sent one (Channel.t) to the step end and from 0; over a
// channel between two stages of the rank (a copy at its RECV, local_channels) a sent one to the
// last position before its last RECV (to the step end when a RECV comes after every position of
// its microbatch but is where its slot frees, before anything of the slot's next microbatch;
// else the whole timeline), its copy from the first position after its first. Then every
// buffer lies inside its region (a slotted one inside its stage's slot 0, the stages' slots back
// to back after the constants), tied parameters at their owner's bytes, and no two buffers of a
// slot live at a common position share a byte (place_verify over the recomputed intervals).
// A recomputing stage (--recompute): B and W fused, its r segment rerun F nodes in order that
// remake every work-area tensor B reads before it is read (and make no boundary tensor); its
// slots hold only what it receives, loads, sends and the outputs of the F nodes that make a sent
// tensor, the loss or a model output (a tensor the rerun reads live to where B starts); the rest,
// and its workspaces, in the work area above the slots without overlap over the work timeline
// (F nodes, then B nodes). A temporary of any stage may be in the work area instead of its slot
// (BUF_WORK): it must live within one action of the stage's timeline, and the stage's work-area
// buffers must not overlap over that timeline.
// --precision: the 16-bit buffers take 2 bytes per element, the
// optimizer state and master weights 4; the conversion area sits on top of the work area and
// holds the f32 copies of every call of the rank's nodes (precision_conv_bytes).
// O(tensors + nodes + actions) plus the sweep's O(n log n).
#include "../ir/ops.h"
#include "memplan.h"
#include "pipeline.h"
#include "place.h"
#include "precision.h"
#include "recompute.h"
#include "schedule.h"
#include "uneven.h"

// Reports a violation of rank r's plan; FAIL returns false, BAD leaves plan_check (its scratch
// freed at out).
#define FAIL(...)                                                                                  \
  do {                                                                                             \
    diag_error(d, (Loc){0, 0}, "internal error: memplan: rank %d: " __VA_ARGS__);                  \
    return false;                                                                                  \
  } while (0)
#define BAD(...)                                                                                   \
  do {                                                                                             \
    diag_error(d, (Loc){0, 0}, "internal error: memplan: rank %d: " __VA_ARGS__);                  \
    goto out;                                                                                      \
  } while (0)

static int64_t nbytes(const Program *prog, const Tensor *t) {
  return shape_numel(&t->shape, prog->tc->mb_size) * (int64_t)tensor_elem_size(t);
}

// t has storage in region reg, inside it.
static bool stored(const Program *prog, const Plan *p, const Tensor *t, Region reg) {
  return p->offset[t->id] >= 0 && p->region[t->id] == reg &&
         p->offset[t->id] + nbytes(prog, t) <= p->bytes[reg];
}

// Unslotted tensors a node touches: parameters (tied at the owner's bytes), per-step buffers in
// REG_GRADS, constants below the slots; slotted ones are checked with their stage.
static bool check_fixed(const Program *prog, const Plan *p, int r, const Tensor *t, Diag *d) {
  if (t->kind == T_PARAM) {
    const Tensor *o = t->tied_to ? t->tied_to : t;
    if (!stored(prog, p, t, REG_PARAMS) || p->offset[t->id] != p->offset[o->id])
      FAIL("parameter '%s' has no storage of its owner's in the params region", r, t->name);
  } else if (t->per_step) {
    if (!stored(prog, p, t, REG_GRADS))
      FAIL("gradient buffer '%s' has no storage in the grads region", r, t->name);
  } else if (t->kind == T_CONST) {
    if (!stored(prog, p, t, REG_ACTS) || p->offset[t->id] + nbytes(prog, t) > p->const_bytes)
      FAIL("constant '%s' has no storage below the slots", r, t->name);
  }
  return true;
}

static const Segment *seg_of(const VStage *s, ActionKind k) {
  return k == ACT_F ? &s->f : k == ACT_B ? &s->b : &s->w;
}

// --recompute: whether F node nd of stage v is kept (not rerun): it makes a sent tensor, the loss
// or a model output.
static bool makes_boundary(const Program *prog, int v, const Node *nd, const int *sent) {
  for (int k = 0; k < nd->nout; k++) {
    const Tensor *t = nd->out[k];
    if (sent[t->id] == v + 1 || t == prog->g->loss || graph_is_output(prog->g, t)) return true;
  }
  return false;
}

// Whether per-microbatch tensor t of recomputing stage v stays in its slots: received, loaded,
// an output of a kept F node, or sent by its B.
static bool slotted(int v, const Tensor *t, const int *sent, const bool *kept) {
  if (t->kind != T_ACT || !t->producer) return true;
  return t->producer->role == ROLE_FWD ? kept[t->producer->id] : sent[t->id] == v + 1;
}

// Whether a per-microbatch tensor of stage v made by one of its F nodes lives in the work area.
static bool f_work(const Program *prog, int v, const Tensor *t, const int *sent, const bool *kept) {
  return t->kind == T_ACT && !t->per_step && t->producer && t->producer->role == ROLE_FWD &&
         prog->vstage_of_node[t->producer->id] == v && !slotted(v, t, sent, kept);
}

// The r segment of recomputing stage v: B and W fused; its nodes are F nodes of v that are not
// kept, in timeline order, each reading only what the slots keep or an earlier rerun node remade;
// every F node's work-area output that B reads remade (kept, inr, remade: filled per node/tensor).
static bool recompute_ok(const Program *prog, int r, int v, const int *pos, const int *sent,
                         bool *kept, bool *inr, bool *remade, Diag *d) {
  const Graph *g = prog->g;
  const VStage *s = &prog->vs[v];
  if (s->split) FAIL("recomputing stage v%d splits B and W", r, v);
  for (int i = 0; i < g->nnodes; i++) kept[i] = inr[i] = false;
  for (int i = 0; i < g->ntensors; i++) remade[i] = false;
  for (int j = 0; j < s->f.n; j++)
    kept[s->f.nodes[j]->id] = makes_boundary(prog, v, s->f.nodes[j], sent);
  int last = -1;
  for (int j = 0; j < s->r.n; j++) {
    const Node *n = s->r.nodes[j];
    if (n->role != ROLE_FWD || prog->vstage_of_node[n->id] != v || pos[n->id] <= last ||
        kept[n->id])
      FAIL("node '%s' is not a rerun F node of stage v%d in order", r, n->name, v);
    last = pos[n->id];
    inr[n->id] = true;
    for (int e = 0; e < n->nin; e++)
      if (f_work(prog, v, n->in[e], sent, kept) && !remade[n->in[e]->id])
        FAIL("stage v%d's rerun forward reads '%s' before remaking it", r, v, n->in[e]->name);
    for (int e = 0; e < n->nout; e++) remade[n->out[e]->id] = true;
  }
  for (int j = 0; j < s->b.n; j++) {
    const Node *n = s->b.nodes[j];
    for (int e = 0; e < n->nin; e++)
      if (f_work(prog, v, n->in[e], sent, kept) && !remade[n->in[e]->id])
        FAIL("B of recomputing stage v%d reads '%s', which its rerun forward does not remake", r, v,
             n->in[e]->name);
  }
  return true;
}

// Channels between two stages of rank r (local: the RECV copies, no message in flight) on stage
// v's timeline, replaying the rank's list with a count per microbatch of the stage's positions
// run so far (end: the timeline's length). Per channel c: first[c] (into v) the lowest count at
// any RECV(c, m), the first position the copy is live at; last[c] (out of v) the highest count
// - 1 at them, the last position the sent tensor must be live at. A RECV after every position of
// its microbatch m: end (to the step end) when nothing of m + K on v's slots (an action of v but
// a SEND, a RECV into v) ran before it and the receives of m + K are posted after it (freed:
// schedule_last_actions, where the program posts them), else end + 1 (the whole timeline, as a
// message's).
static void local_channels(const Program *prog, int r, int v, int end, const int *freed, int *cnt,
                           bool *touched, int *first, int *last, int *before, int *sendat) {
  const RankProgram *rp = &prog->ranks[r];
  const VStage *s = &prog->vs[v];
  int M = prog->M;
  for (int m = 0; m < M; m++) cnt[m] = 0, touched[m] = false;
  for (int c = 0; c < prog->nch; c++) first[c] = end, last[c] = -1;
  for (int i = 0; i < prog->nch * M; i++) sendat[i] = -1;
  for (int i = 0; i < rp->nacts; i++) {
    const Action *x = &rp->acts[i];
    before[i] = -1;
    if (x->kind == ACT_RECV || x->kind == ACT_COPY) {
      const Channel *c = x->ch;
      bool local = prog->vs[c->from_v].rank == prog->vs[c->to_v].rank;
      int done = cnt[x->m], k = x->m + s->K;
      if (local && c->to_v == v && done < first[c->id]) first[c->id] = done;
      if (local && c->from_v == v) {
        int q = done - 1;
        if (done >= end)
          q = (k >= M || !touched[k]) && i <= freed[(size_t)v * M + x->m] ? end : end + 1;
        if (q > last[c->id]) last[c->id] = q;
      }
      if (c->to_v == v) touched[x->m] = true;
      continue;
    }
    if (x->kind == ACT_SEND) sendat[(size_t)x->ch->id * M + x->m] = i;
    if (x->v != v || x->m < 0 || x->kind == ACT_SEND) continue;
    before[i] = cnt[x->m];
    touched[x->m] = true;
    cnt[x->m] += x->kind == ACT_F                             ? s->f.n
                 : x->kind == ACT_B                           ? s->b.n
                 : x->kind == ACT_W                           ? s->w.n
                 : x->kind == ACT_LOAD || x->kind == ACT_LOSS ? 1
                                                              : 0;
  }
}

// A message from stage v of rank r to another rank: the last position of v's timeline its sent
// tensor must be live at, the highest count - 1 at the action before which the program waits for
// send (c, m) (wait: its WAIT_SEND's place) over every m, when that action is one of (v, m) after
// the SEND (before, sendat: local_channels' replay); else end + 1 (the whole timeline).
static int msg_last(const Program *prog, int r, int v, int end, const int *wait, const int *before,
                    const int *sendat, int c) {
  const RankProgram *rp = &prog->ranks[r];
  int M = prog->M, last = -1;
  for (int m = 0; m < M; m++) {
    int w = wait[(size_t)c * M + m], sa = sendat[(size_t)c * M + m];
    if (w < 0 || sa < 0 || w <= sa || rp->acts[w].v != v || rp->acts[w].m != m || before[w] < 0)
      return end + 1;
    if (before[w] - 1 > last) last = before[w] - 1;
  }
  return last;
}

bool plan_check(const Program *prog, int r, Diag *d) {
  const Graph *g = prog->g;
  const RankProgram *rp = &prog->ranks[r];
  const Plan *p = &rp->plan;
  Arena scratch;
  arena_init(&scratch);
  Arena *a = &scratch;
  bool ok = false;
  int nt = g->ntensors, nn = g->nnodes;
  int *pos = ARENA_ARRAY(a, int, nn + 1); // per node: its timeline position on its stage
  int *act = ARENA_ARRAY(a, int, nn + 2 * (size_t)rp->nacts + 2); // per position: its action
  int *want_v = ARENA_ARRAY(a, int, nt + 1); // per tensor: 1 + the stage that must slot it
  int *lo = ARENA_ARRAY(a, int, nt + 1), *hi = ARENA_ARRAY(a, int, nt + 1);
  int *sent = ARENA_ARRAY(a, int, nt + 1);         // per tensor: 1 + a stage that sends it
  int *recv = ARENA_ARRAY(a, int, nt + 1);         // per tensor: 1 + the stage it is received on
  bool *mine = ARENA_ARRAY(a, bool, prog->nv + 1); // per stage: on this rank
  // Local channels of the stage (local_channels): per channel, and per microbatch its count.
  int *lfirst = ARENA_ARRAY(a, int, prog->nch + 1), *llast = ARENA_ARRAY(a, int, prog->nch + 1);
  int *lcnt = ARENA_ARRAY(a, int, prog->M + 1);
  bool *ltouched = ARENA_ARRAY(a, bool, prog->M + 1);
  int *freed = ARENA_ARRAY(a, int, (size_t)prog->nv * prog->M + 1); // where the slots free
  schedule_last_actions(prog, freed);
  // Where the program waits for each send; per action the positions of its microbatch run before
  // it, per (c, m) its SEND (local_channels).
  int *wait = ARENA_ARRAY(a, int, (size_t)prog->nch * prog->M + 1);
  action_send_waits(prog, wait);
  int *before = ARENA_ARRAY(a, int, rp->nacts + 1);
  int *sendat = ARENA_ARRAY(a, int, (size_t)prog->nch * prog->M + 1);
  PlaceItem *items = ARENA_ARRAY(a, PlaceItem, nt + nn + 1);
  // --recompute: per tensor its work-timeline interval, per node whether it is kept (not rerun)
  // and in the stage's r segment, per tensor whether the rerun remade it; the area's items.
  int *wlo = ARENA_ARRAY(a, int, nt + 1), *whi = ARENA_ARRAY(a, int, nt + 1);
  bool *kept = ARENA_ARRAY(a, bool, nn + 1), *inr = ARENA_ARRAY(a, bool, nn + 1);
  bool *remade = ARENA_ARRAY(a, bool, nt + 1);
  PlaceItem *witems = ARENA_ARRAY(a, PlaceItem, nt + nn + 1);
  for (int k = 0; k < rp->nvs; k++) mine[rp->vs[k]] = true;
  for (int c = 0; c < prog->nch; c++) {
    sent[prog->ch[c].t->id] = prog->ch[c].from_v + 1;
    if (prog->ch[c].dst) recv[prog->ch[c].dst->id] = prog->ch[c].to_v + 1;
  }
  // Slots: K per stage of the rank, 0 elsewhere; back to back after the constants.
  int64_t base = p->const_bytes;
  for (int v = 0; v < prog->nv; v++)
    if ((mine[v] ? stage_nslots(prog, v) : 0) != p->slots[v] ||
        (!mine[v] && p->slot_stride[v] != 0))
      BAD("stage v%d has %d slots, its K is %d", r, v, p->slots[v],
          mine[v] ? stage_nslots(prog, v) : 0);
  for (int k = 0; k < rp->nvs; k++) {
    int v = rp->vs[k];
    const VStage *s = &prog->vs[v];
    // The timeline of the stage's first microbatch.
    for (int i = 0; i < nn; i++) pos[i] = -1;
    int q = 0, m0 = -1, load = 0, loss = -1, endf = -1, bstart = -1;
    for (int i = 0; i < rp->nacts; i++) {
      const Action *x = &rp->acts[i];
      if (x->v != v || x->m < 0) continue;
      if (m0 < 0) m0 = x->m;
      if (x->m != m0) continue;
      if (x->kind == ACT_F || x->kind == ACT_B || x->kind == ACT_W) {
        const Segment *sg = seg_of(s, x->kind);
        if (x->kind == ACT_B && bstart < 0) bstart = q;
        for (int j = 0; j < sg->n; j++) act[q] = i, pos[sg->nodes[j]->id] = q++;
        if (x->kind == ACT_F) endf = q;
      } else if (x->kind == ACT_LOAD) {
        act[q] = i, load = q++;
      } else if (x->kind == ACT_LOSS) {
        act[q] = i, loss = q++;
      }
    }
    act[q] = -1;                                                   // the step end
    int end = q, host = loss >= 0 ? loss : endf >= 0 ? endf : end; // where the host reads
    if (bstart < 0) bstart = end;
    bool rc = s->recompute;
    local_channels(prog, r, v, end, freed, lcnt, ltouched, lfirst, llast, before, sendat);
    if (rc && !recompute_ok(prog, r, v, pos, sent, kept, inr, remade, d)) goto out;
    // Which tensors the stage slots, and their intervals.
    for (int i = 0; i < nt; i++)
      want_v[i] = 0, lo[i] = end + 1, hi[i] = -1, wlo[i] = s->f.n + s->b.n + 1, whi[i] = -1;
    const Segment *segs[4] = {&s->f, &s->b, &s->w, &s->step};
    for (int sg = 0; sg < 4; sg++)
      for (int j = 0; j < segs[sg]->n; j++) {
        const Node *n = segs[sg]->nodes[j];
        int at = sg == 3 ? end : pos[n->id];
        int ap = sg == 0 ? j : sg == 1 ? s->f.n + j : -1; // on the work timeline (F, then B)
        if (sg < 3 && at < 0) BAD("node '%s' of stage v%d is not on its timeline", r, n->name, v);
        for (int io = 0; io < 2; io++)
          for (int e = 0; e < (io ? n->nout : n->nin); e++) {
            const Tensor *t = io ? n->out[e] : n->in[e];
            if (!check_fixed(prog, p, r, t, d)) goto out;
            if (t->kind == T_PARAM || t->per_step || t->kind == T_CONST) continue;
            if (sg == 3) BAD("step node '%s' reads per-microbatch '%s'", r, n->name, t->name);
            if (t->kind == T_RECV && recv[t->id] != v + 1)
              BAD("node '%s' of stage v%d reads '%s', received for another stage", r, n->name, v,
                  t->name);
            want_v[t->id] = v + 1;
            int start = t->kind == T_RECV ? 0 : t->kind == T_INPUT ? load : at;
            for (int c = 0; c < prog->nch && t->kind == T_RECV; c++) // a local copy: its RECV
              if (prog->ch[c].dst == t && prog->vs[prog->ch[c].from_v].rank == r)
                start = lfirst[c] < at ? lfirst[c] : at;
            if (io || t->kind != T_ACT) lo[t->id] = lo[t->id] < start ? lo[t->id] : start;
            if (at > hi[t->id]) hi[t->id] = at;
            if (rc && !io && sg == 0 && inr[n->id] && bstart > hi[t->id]) hi[t->id] = bstart;
            if (io && ap >= 0 && ap < wlo[t->id]) wlo[t->id] = ap;
            if (ap > whi[t->id]) whi[t->id] = ap;
          }
      }
    // Step-end reads of per-microbatch tensors (none today) and host reads; sent tensors.
    int n = 0, nw = 0;
    for (int i = 0; i < nt; i++) {
      const Tensor *t = g->tensors[i];
      if (!want_v[i]) continue;
      if (rc && !slotted(v, t, sent, kept)) { // in the work area, live within one action
        if (p->cls[i] != BUF_WORK || p->vstage[i] != v || p->region[i] != REG_ACTS ||
            p->offset[i] < p->work_base ||
            p->offset[i] + nbytes(prog, t) > p->work_base + p->work_bytes)
          BAD("'%s' of recomputing stage v%d has no storage in the work area", r, t->name, v);
        if (wlo[i] > whi[i]) BAD("'%s' of recomputing stage v%d is never made", r, t->name, v);
        witems[nw++] = (PlaceItem){nbytes(prog, t), wlo[i], whi[i], i, p->offset[i]};
        continue;
      }
      if (t == g->loss || t->kind == T_INPUT) hi[i] = hi[i] > host ? hi[i] : host;
      for (int o = 0; o < g->noutputs; o++)
        if (g->outputs[o] == t && hi[i] < host) hi[i] = host;
      if (sent[i] == v + 1) { // to where its send is waited for; sent locally, to its RECV
        int until = -1;
        for (int c = 0; c < prog->nch; c++)
          if (prog->ch[c].t == t) {
            int q = prog->vs[prog->ch[c].to_v].rank == r
                        ? llast[c]
                        : msg_last(prog, r, v, end, wait, before, sendat, c);
            until = q > until ? q : until;
          }
        if (until > end)
          lo[i] = 0, hi[i] = end;
        else if (until > hi[i])
          hi[i] = until;
      }
      if (t->kind == T_ACT && lo[i] > end)
        BAD("'%s' is read on stage v%d but made elsewhere", r, t->name, v);
      if (!rc && p->cls[i] == BUF_WORK) { // a temporary in the work area
        if (p->vstage[i] != v || p->region[i] != REG_ACTS || p->offset[i] < p->work_base ||
            p->offset[i] + nbytes(prog, t) > p->work_base + p->work_bytes)
          BAD("'%s' of stage v%d has no storage in the work area", r, t->name, v);
        if (lo[i] > hi[i] || act[lo[i]] < 0 || act[lo[i]] != act[hi[i]] || sent[i] == v + 1 ||
            t->kind == T_RECV)
          BAD("'%s' of stage v%d lives across actions but is in the work area", r, t->name, v);
        witems[nw++] = (PlaceItem){nbytes(prog, t), lo[i], hi[i], i, p->offset[i]};
        continue;
      }
      if (p->vstage[i] != v || p->region[i] != REG_ACTS || p->offset[i] < base ||
          p->offset[i] + nbytes(prog, t) > base + p->slot_stride[v] ||
          (p->cls[i] != BUF_SAVED && p->cls[i] != BUF_TEMP))
        BAD("'%s' has no storage in slot 0 of stage v%d", r, t->name, v);
      items[n++] = (PlaceItem){nbytes(prog, t), lo[i], hi[i], i, p->offset[i]};
    }
    // Sent tensors the stage makes but none of its nodes reads are still the stage's.
    for (int c = 0; c < prog->nch; c++) {
      const Tensor *t = prog->ch[c].t;
      if (prog->ch[c].from_v == v && !want_v[t->id])
        BAD("sent tensor '%s' is not made by stage v%d's nodes", r, t->name, v);
    }
    for (int j = 0; j < s->f.n + s->b.n + s->w.n; j++) {
      const Node *nd = j < s->f.n            ? s->f.nodes[j]
                       : j < s->f.n + s->b.n ? s->b.nodes[j - s->f.n]
                                             : s->w.nodes[j - s->f.n - s->b.n];
      int64_t ws = nd->op->workspace ? nd->op->workspace(nd, prog->tc->mb_size) : 0;
      if (ws <= 0) continue;
      if (rc) { // the work area, at its place on the work timeline
        if (p->ws_offset[nd->id] < p->work_base ||
            p->ws_offset[nd->id] + ws > p->work_base + p->work_bytes)
          BAD("the workspace of '%s' is not in the work area", r, nd->name);
        witems[nw++] = (PlaceItem){ws, j, j, nt + nd->id, p->ws_offset[nd->id]};
        continue;
      }
      if (p->work_bytes > 0 && p->ws_offset[nd->id] >= p->work_base) { // work area
        if (p->ws_offset[nd->id] + ws > p->work_base + p->work_bytes)
          BAD("the workspace of '%s' is not in the work area", r, nd->name);
        witems[nw++] = (PlaceItem){ws, pos[nd->id], pos[nd->id], nt + nd->id, p->ws_offset[nd->id]};
        continue;
      }
      if (p->ws_offset[nd->id] < base || p->ws_offset[nd->id] + ws > base + p->slot_stride[v])
        BAD("the workspace of '%s' is not in slot 0 of stage v%d", r, nd->name, v);
      items[n++] = (PlaceItem){ws, pos[nd->id], pos[nd->id], nt + nd->id, p->ws_offset[nd->id]};
    }
    int x = -1, y = -1;
    bool slot_ok = place_verify(items, n, a, &x, &y);
    if (slot_ok && !place_verify(witems, nw, a, &x, &y)) { // the work area's items
      const char *nx = x < nt ? g->tensors[x]->name : g->nodes[x - nt]->name;
      const char *ny = y < nt ? g->tensors[y]->name : g->nodes[y - nt]->name;
      BAD("buffers '%s' and '%s' of stage v%d overlap in the work area while both are live", r, nx,
          ny, v);
    }
    if (!slot_ok) {
      const char *nx = x < nt ? g->tensors[x]->name : g->nodes[x - nt]->name;
      const char *ny = y < nt ? g->tensors[y]->name : g->nodes[y - nt]->name;
      BAD("buffers '%s' and '%s' of stage v%d overlap while both are live", r, nx, ny, v);
    }
    base += (int64_t)p->slots[v] * p->slot_stride[v];
  }
  if (p->work_bytes > 0 && p->work_base != base)
    BAD("the work area starts at %lld, after the slots at %lld", r, (long long)p->work_base,
        (long long)base);
  // --precision: the conversion area on top, room for every call of the rank's nodes.
  if (p->conv_bytes > 0 && p->conv_base != base + p->work_bytes)
    BAD("the conversion area starts at %lld, after the work area at %lld", r,
        (long long)p->conv_base, (long long)(base + p->work_bytes));
  for (int i = 0; i < g->nnodes; i++)
    if ((prog->nranks == 1 || (prog->vstage_of_node[i] >= 0 && mine[prog->vstage_of_node[i]])) &&
        precision_conv_bytes(g->nodes[i], prog->tc->mb_size) > p->conv_bytes)
      BAD("the conversion area (%lld bytes) cannot hold the f32 copies of '%s'", r,
          (long long)p->conv_bytes, g->nodes[i]->name);
  if (base + p->work_bytes + p->conv_bytes != p->bytes[REG_ACTS])
    BAD("the activations region has %lld bytes, its constants, slots, work and conversion areas "
        "%lld",
        r, (long long)p->bytes[REG_ACTS], (long long)(base + p->work_bytes + p->conv_bytes));
  // Exchanges the rank takes part in: every use buffer and the sum, in REG_GRADS.
  for (int i = 0; i < prog->nex; i++) {
    const Exchange *e = &prog->ex[i];
    bool here = false;
    for (int j = 0; j < e->n; j++) here |= mine[e->stages[j]];
    if (!here) continue;
    for (int j = 0; j < e->nbufs; j++)
      if (!stored(prog, p, e->bufs[j], REG_GRADS))
        BAD("use buffer '%s' of exchanged '%s' has no storage in the grads region", r,
            e->bufs[j]->name, e->param->name);
    if (e->param->grad && !stored(prog, p, e->param->grad, REG_GRADS))
      BAD("the gradient of exchanged '%s' has no storage", r, e->param->name);
  }
  // Held owner parameters with a gradient: their optimizer state.
  for (int i = 0; i < g->nparams; i++) {
    const Tensor *t = g->params[i];
    if (t->tied_to || p->offset[t->id] < 0 || !t->grad) continue;
    int64_t f32 = shape_numel(&t->shape, 1) * (int64_t)dtype_size(t->dtype); // state is f32
    for (int k = 0; k < p->opt_slots; k++) {
      int64_t o = p->opt_offsets[t->id * PLAN_OPT_SLOTS + k];
      if (o < 0 || o + f32 > p->bytes[REG_OPT])
        BAD("parameter '%s' has no optimizer state %d", r, t->name, k);
    }
    int64_t mo = p->master_offset[t->id];
    if (t->half && (mo < 0 || mo + f32 > p->bytes[REG_OPT]))
      BAD("16-bit parameter '%s' has no f32 master weights", r, t->name);
  }
  ok = true;
out:
  arena_free(&scratch);
  return ok;
}

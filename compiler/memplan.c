// memplan pass: a static offset for every buffer of each rank, from the rank's action list
// (pipeline.h). The order of nodes is the schedule's: this pass never decides it. Regions: params,
// grads, optimizer, activations; the activations hold the constants, then K slots per virtual
// stage, each laid out once over the stage's one-microbatch timeline by place.c's sweep, plus the
// rank's one work area (temporaries, --recompute) and the 16-bit conversion area. plan_check.c
// checks every plan independently. Sizes and offsets use checked arithmetic. The design (live
// intervals of sent and received tensors, the work area, recompute, precision) is in
// docs/design/memplan.md.
#include <stdlib.h>
#include <unistd.h>

#include "../ir/ops.h"
#include "memplan.h"
#include "pipeline.h"
#include "place.h"
#include "precision.h"
#include "recompute.h"
#include "schedule.h"
#include "uneven.h"

enum { ALIGN = 64 };

// Sizes here are at most 2^55 bytes (2^53 elements, checked by the training pass, of 4 bytes).
static int64_t align_up(int64_t v) {
  return (v + ALIGN - 1) / ALIGN * ALIGN;
}

// *region += bytes and *total (all regions so far) += bytes; false, nothing changed, when either
// would overflow int64.
static bool grow(int64_t *total, int64_t *region, int64_t bytes) {
  int64_t r, t;
  if (__builtin_add_overflow(*region, bytes, &r) || __builtin_add_overflow(*total, bytes, &t))
    return false;
  *region = r;
  *total = t;
  return true;
}

static bool too_big(Diag *d, const Graph *g, const Tensor *t, const char *region) {
  diag_error(d, t->loc,
             "%s: '%s' %s: placing it in the %s region, the memory plan would exceed 2^63 bytes",
             t->path ? t->path : "model", t->name, fmt_shape(g, &t->shape), region);
  return false;
}

// Bytes of t with the batch bound (at most 2^55: shape_numel caps elements at 2^53); -1 when the
// element count is not known to fit.
static int64_t tensor_bytes(const Tensor *t, int64_t batch) {
  int64_t n = shape_numel(&t->shape, batch), bytes;
  if (n < 0 || __builtin_mul_overflow(n, (int64_t)tensor_elem_size(t), &bytes)) return -1;
  return bytes;
}

// One virtual stage's one-microbatch timeline (see the top paragraph).
typedef struct Timeline {
  int *pos;    // per node id: its position (-1: not a node of this stage's computes)
  int *act_of; // per position: the action it belongs to (index in the rank's list; -1: step end)
  int load;    // LOAD's position (-1: none)
  int after_f; // where the host reads after F: LOSS's position, else the one after the F segment
  int b_at;    // where B starts (--recompute: where its rerun forward reads the slot again)
  int end;     // the step end (one past the last position)
} Timeline;

static void timeline(const Program *prog, const RankProgram *r, int v, Arena *a, Timeline *tl) {
  const VStage *s = &prog->vs[v];
  int npos = s->f.n + s->b.n + s->w.n + 4 * (r->nacts + 1);
  tl->pos = ARENA_ARRAY(a, int, prog->g->nnodes + 1);
  tl->act_of = ARENA_ARRAY(a, int, npos + 1);
  for (int i = 0; i < prog->g->nnodes; i++) tl->pos[i] = -1;
  tl->load = tl->after_f = tl->b_at = -1;
  int q = 0, m0 = -1;
  for (int i = 0; i < r->nacts; i++) {
    const Action *x = &r->acts[i];
    if (x->m < 0 || x->v != v || x->kind == ACT_SEND || x->kind == ACT_RECV) continue;
    if (m0 < 0) m0 = x->m;
    if (x->m != m0) continue;
    const Segment *seg = x->kind == ACT_F ? &s->f : x->kind == ACT_B ? &s->b : &s->w;
    switch (x->kind) {
    case ACT_F:
    case ACT_B:
    case ACT_W:
      if (x->kind == ACT_B && tl->b_at < 0) tl->b_at = q;
      for (int k = 0; k < seg->n; k++) tl->pos[seg->nodes[k]->id] = q, tl->act_of[q++] = i;
      if (x->kind == ACT_F && tl->after_f < 0) tl->after_f = q;
      break;
    case ACT_LOSS:
      tl->after_f = q;
      tl->act_of[q++] = i;
      break;
    case ACT_LOAD:
      tl->load = q;
      tl->act_of[q++] = i;
      break;
    default:
      tl->act_of[q++] = i;
    }
  }
  if (tl->after_f < 0) tl->after_f = q;
  if (tl->load < 0) tl->load = 0;
  if (tl->b_at < 0) tl->b_at = q;
  tl->end = q;
  tl->act_of[q] = -1;
}

// The timeline position of stage v's first node of microbatch m that runs after the rank's
// action i (tl->end when none does): every position before it runs before action i. Each
// microbatch runs the stage's LOAD, F, LOSS, B and W in the order of the timeline's.
static int pos_after(const RankProgram *r, const Timeline *tl, const VStage *s, int m, int i) {
  int q = 0;
  for (int j = 0; j < r->nacts && q < tl->end; j++) {
    const Action *x = &r->acts[j];
    if (x->v != s->v || x->m != m || x->kind == ACT_SEND || x->kind == ACT_RECV) continue;
    if (j > i) return q;
    q += x->kind == ACT_F ? s->f.n : x->kind == ACT_B ? s->b.n : x->kind == ACT_W ? s->w.n : 1;
  }
  return q < tl->end ? q : tl->end;
}

// Index in the rank's list of COPY(c, m) (a channel within the rank), or -1.
static int find_recv(const RankProgram *r, int m, const Channel *c) {
  for (int i = 0; i < r->nacts; i++) {
    const Action *x = &r->acts[i];
    if (x->kind == ACT_COPY && x->m == m && x->ch == c) return i;
  }
  return -1;
}

// A channel between two stages of rank r (a local one: its RECV copies the tensor, no message
// is in flight), on stage v's timeline: for its sender (v = from_v) the last position the sent
// tensor must be live at, that of the last node of each microbatch m to run before RECV(c, m),
// the step end when the RECV comes after them all as the slot's last use (last, from
// schedule_last_actions: the receives of the slot's next microbatch are posted after it), else -1
// (it may be posted before: the whole timeline, as a message's); for its receiver (v = to_v) the
// first position its copy is live at, the first node after the RECV.
static int local_pos(const Program *prog, const RankProgram *r, const Timeline *tl, const int *last,
                     const Channel *c, bool sender) {
  const VStage *s = &prog->vs[sender ? c->from_v : c->to_v];
  int best = sender ? 0 : tl->end;
  for (int m = 0; m < prog->M; m++) {
    int i = find_recv(r, m, c);
    if (i < 0) return sender ? -1 : 0; // not in the list: as a message
    int q = pos_after(r, tl, s, m, i);
    if (sender && q == tl->end && i > last[(size_t)s->v * prog->M + m]) return -1;
    if (sender && q == tl->end) q = tl->end + 1; // to the step end
    if (sender && q - 1 > best) best = q - 1;
    if (!sender && q < best) best = q;
  }
  return best;
}

// A message from stage c->from_v of rank r to another rank, on the sender's timeline: the last
// position its sent tensor must be live at, that of the last node of each microbatch m to run
// before the program waits for send (c, m) (wait: where its WAIT_SEND is, the first action of
// (from_v, m) after the SEND that runs the stage), or -1 when for some m the wait is elsewhere
// (before the action that makes (c, m + K), or at step end): the whole timeline.
static int msg_pos(const Program *prog, const RankProgram *r, const Timeline *tl, const int *wait,
                   const Channel *c) {
  const VStage *s = &prog->vs[c->from_v];
  int best = 0;
  for (int m = 0; m < prog->M; m++) {
    int w = wait[(size_t)c->id * prog->M + m];
    if (w < 1 || r->acts[w].v != s->v || r->acts[w].m != m) return -1;
    int q = pos_after(r, tl, s, m, w - 1); // action w's first position: m's nodes before it ran
    if (q - 1 > best) best = q - 1;
  }
  return best;
}

// Plan.fwd/bwd/step of the rank's first stage, in the order its actions run them.
static void node_lists(const Program *prog, const RankProgram *r, Plan *p, Arena *a) {
  const Graph *g = prog->g;
  p->fwd = ARENA_ARRAY(a, Node *, g->nnodes + 1);
  p->bwd = ARENA_ARRAY(a, Node *, g->nnodes + 1);
  p->step = ARENA_ARRAY(a, Node *, g->nnodes + 1);
  if (r->nvs == 0) return;
  const VStage *s = &prog->vs[r->vs[0]];
  for (int k = 0; k < s->f.n; k++) p->fwd[p->nfwd++] = s->f.nodes[k];
  for (int k = 0; k < s->b.n; k++) p->bwd[p->nbwd++] = s->b.nodes[k];
  for (int k = 0; k < s->w.n; k++) p->bwd[p->nbwd++] = s->w.nodes[k];
  for (int k = 0; k < s->step.n; k++) p->step[p->nstep++] = s->step.nodes[k];
}

// Whether virtual stage v runs on rank r.
static bool on_rank(const Program *prog, const RankProgram *r, int v) {
  return v >= 0 && v < prog->nv && prog->vs[v].rank == r->rank;
}

// Whether any node of rank r reads t.
static bool used_on(const Program *prog, const RankProgram *r, const Tensor *t) {
  for (int u = 0; u < t->nuses; u++)
    if (on_rank(prog, r, prog->vstage_of_node[t->uses[u].node->id])) return true;
  return false;
}

// The virtual stage of rank r whose slots hold a tensor's per-microbatch buffer (-1: none on the
// rank; -2: an input two stages of the rank read): an activation's producer's stage, a received
// tensor's to_v (recv_v: per tensor id, 1 + to_v of the channel it is the dst of), an input's
// first consumer on the rank (one rank: stage 0's when none reads it; the loader still fills it).
static int stage_of(const Program *prog, const RankProgram *r, const int *recv_v, const Tensor *t) {
  if (t->kind == T_ACT) return prog->vstage_of_node[t->producer->id];
  if (t->kind == T_RECV) return recv_v[t->id] - 1;
  if (t->kind != T_INPUT) return -1;
  if (prog->nranks == 1) return t->nuses ? prog->vstage_of_node[t->uses[0].node->id] : 0;
  int v = -1;
  for (int u = 0; u < t->nuses; u++) {
    int w = prog->vstage_of_node[t->uses[u].node->id];
    if (!on_rank(prog, r, w) || w == v) continue;
    if (v >= 0) return -2;
    v = w;
  }
  return v;
}

static bool overlap_error(Diag *d, const Graph *g, int x, int y) {
  const char *nx = x < g->ntensors ? g->tensors[x]->name : g->nodes[x - g->ntensors]->name;
  const char *ny = y < g->ntensors ? g->tensors[y]->name : g->nodes[y - g->ntensors]->name;
  diag_error(d, (Loc){0, 0},
             "internal error: memplan: buffers '%s' and '%s' overlap while both are live", nx, ny);
  return false;
}

// A stage with K > 1 slots: its temporaries (buffers and kernel workspaces live within one
// action, BUF_TEMP) move to the rank's one work area when that takes fewer bytes: each of the K
// slots is then sized by what lives across actions (the peak of a slot is mostly the start of B,
// every saved forward buffer live with B's first temporaries), and one copy of the temporaries
// serves every microbatch and stage of the rank (one action runs at a time). Moves them when K
// slots of the whole layout exceed K slots without them plus what the area would grow by
// (work_max: the area so far), or always with force (every stage of a rank holding several,
// K = 1 too, as plan_memory tries: one stage's move may pay only with another's, the area
// shared); returns the items left in the slot. Ties and overflow: no move.
static int temps_to_work(const Graph *g, Plan *p, PlaceItem *items, int n, int K, bool force,
                         PlaceItem *work, int *nwork, int64_t work_max, Arena *a) {
  PlaceItem *kept = ARENA_ARRAY(a, PlaceItem, n + 1), *temps = ARENA_ARRAY(a, PlaceItem, n + 1);
  int nk = 0, nt = 0, over = -1;
  for (int i = 0; i < n; i++) {
    bool temp = items[i].key >= g->ntensors || p->cls[items[i].key] == BUF_TEMP;
    if (temp)
      temps[nt++] = items[i];
    else
      kept[nk++] = items[i];
  }
  if (nt == 0) return n;
  int64_t whole = place_items(items, n, INT64_MAX, a, &over),
          slot = place_items(kept, nk, INT64_MAX, a, &over),
          area = place_items(temps, nt, INT64_MAX, a, &over), with, without;
  if (whole < 0 || slot < 0 || area < 0 || __builtin_mul_overflow(whole, (int64_t)K, &with) ||
      __builtin_mul_overflow(slot, (int64_t)K, &without) ||
      __builtin_add_overflow(without, area > work_max ? area - work_max : 0, &without) ||
      (without >= with && !force))
    return n;
  for (int i = 0; i < nt; i++) {
    if (temps[i].key < g->ntensors) p->cls[temps[i].key] = BUF_WORK;
    work[(*nwork)++] = temps[i];
  }
  for (int i = 0; i < nk; i++) items[i] = kept[i];
  return nk;
}

static bool plan_rank(Program *prog, RankProgram *r, bool all_temps, Diag *d) {
  Graph *g = prog->g;
  const TrainConfig *tc = prog->tc;
  Plan *p = &r->plan;
  Arena *a = g->arena;
  int64_t B = tc->mb_size;
  *p = (Plan){0};
  node_lists(prog, r, p, a);
  p->region = ARENA_ARRAY(a, Region, g->ntensors);
  p->offset = ARENA_ARRAY(a, int64_t, g->ntensors);
  p->opt_offset = ARENA_ARRAY(a, int64_t, g->ntensors);
  p->opt_offsets = ARENA_ARRAY(a, int64_t, (size_t)g->ntensors * PLAN_OPT_SLOTS);
  p->cls = ARENA_ARRAY(a, BufClass, g->ntensors);
  p->ws_offset = ARENA_ARRAY(a, int64_t, g->nnodes + 1);
  p->nv = prog->nv;
  p->slot_stride = ARENA_ARRAY(a, int64_t, prog->nv + 1);
  p->slots = ARENA_ARRAY(a, int, prog->nv + 1);
  p->opt_slots = tc->opt == OPT_ADAMW ? 2 : 1;
  p->master_offset = ARENA_ARRAY(a, int64_t, g->ntensors);
  for (int i = 0; i < g->ntensors; i++) p->offset[i] = p->opt_offset[i] = p->master_offset[i] = -1;
  for (int i = 0; i < g->ntensors * PLAN_OPT_SLOTS; i++) p->opt_offsets[i] = -1;
  for (int i = 0; i < g->nnodes; i++) p->ws_offset[i] = -1;
  p->vstage = ARENA_ARRAY(a, int, g->ntensors);
  for (int i = 0; i < g->ntensors; i++) p->vstage[i] = -1;
  // Per tensor: 1 + to_v of the channel it is received by, 1 + from_v of one it is sent by.
  int *recv_v = ARENA_ARRAY(a, int, g->ntensors + 1), *sent_v = ARENA_ARRAY(a, int, g->ntensors);
  int *last_act = ARENA_ARRAY(a, int, (size_t)prog->nv * prog->M + 1); // where slots free
  schedule_last_actions(prog, last_act);
  int *wait = ARENA_ARRAY(a, int, (size_t)prog->nch * prog->M + 1); // where sends are waited for
  action_send_waits(prog, wait);
  const Channel **recv_ch =
      ARENA_ARRAY(a, const Channel *, g->ntensors + 1); // per dst: its channel
  for (int c = 0; c < prog->nch; c++) {
    const Channel *ch = &prog->ch[c];
    if (ch->dst) recv_v[ch->dst->id] = ch->to_v + 1, recv_ch[ch->dst->id] = ch;
    sent_v[ch->t->id] = ch->from_v + 1;
  }
  // Owner parameters the rank holds (its nodes read them or one of their ties), and the
  // per-step buffers of the exchanges it takes part in (every use buffer and the sum).
  bool *holds = ARENA_ARRAY(a, bool, g->ntensors), *exbuf = ARENA_ARRAY(a, bool, g->ntensors);
  for (int i = 0; i < g->nparams; i++) {
    Tensor *t = g->params[i];
    if (prog->nranks == 1 || used_on(prog, r, t)) holds[t->tied_to ? t->tied_to->id : t->id] = true;
  }
  for (int i = 0; i < prog->nex; i++) {
    const Exchange *e = &prog->ex[i];
    bool here = false;
    for (int j = 0; j < e->n; j++) here |= on_rank(prog, r, e->stages[j]);
    if (!here) continue;
    for (int j = 0; j < e->nbufs; j++) exbuf[e->bufs[j]->id] = true;
    if (e->param->grad) exbuf[e->param->grad->id] = true;
  }

  // Every tensor's size is known to fit before anything is summed.
  for (int i = 0; i < g->ntensors; i++)
    if (tensor_bytes(g->tensors[i], B) < 0) return too_big(d, g, g->tensors[i], "activations");
  int64_t total = 0; // bytes of all regions so far
  // Parameters and optimizer state, in canonical order: those the rank's nodes read (one rank:
  // all of them).
  for (int i = 0; i < g->nparams; i++) {
    Tensor *t = g->params[i];
    if (t->tied_to || !holds[t->id]) continue;
    // --precision: the region holds the 16-bit copy; the optimizer state and the f32 master
    // weights (after the state) take 4 bytes per element.
    int64_t sz = align_up(shape_numel(&t->shape, B) * dtype_size(t->dtype)), opt;
    p->region[t->id] = REG_PARAMS;
    p->cls[t->id] = BUF_PARAM;
    p->offset[t->id] = p->bytes[REG_PARAMS];
    if (!grow(&total, &p->bytes[REG_PARAMS], align_up(tensor_bytes(t, B))))
      return too_big(d, g, t, "params");
    if (t->grad) {
      p->opt_offset[t->id] = p->bytes[REG_OPT];
      for (int k = 0; k < p->opt_slots; k++)
        p->opt_offsets[t->id * PLAN_OPT_SLOTS + k] = p->bytes[REG_OPT] + k * sz;
      if (__builtin_mul_overflow((int64_t)p->opt_slots, sz, &opt) ||
          !grow(&total, &p->bytes[REG_OPT], opt))
        return too_big(d, g, t, "optimizer");
    }
    if (t->half) {
      p->master_offset[t->id] = p->bytes[REG_OPT];
      if (!grow(&total, &p->bytes[REG_OPT], sz)) return too_big(d, g, t, "optimizer");
    }
  }
  for (int i = 0; i < g->nparams; i++) {
    Tensor *t = g->params[i];
    if (t->tied_to && p->cls[t->tied_to->id] == BUF_PARAM)
      p->region[t->id] = REG_PARAMS, p->cls[t->id] = BUF_PARAM,
      p->offset[t->id] = p->offset[t->tied_to->id];
  }
  // Per-step gradient buffers of the rank's stages.
  for (int i = 0; i < g->ntensors; i++) {
    Tensor *t = g->tensors[i];
    if (t->kind != T_ACT || !t->per_step ||
        (!on_rank(prog, r, stage_of(prog, r, recv_v, t)) && !exbuf[t->id]))
      continue;
    p->region[t->id] = REG_GRADS;
    p->cls[t->id] = BUF_GRAD;
    p->offset[t->id] = p->bytes[REG_GRADS];
    if (!grow(&total, &p->bytes[REG_GRADS], align_up(tensor_bytes(t, B))))
      return too_big(d, g, t, "grads");
  }
  // Constants the rank reads, back to back at the bottom of the activation region.
  for (int i = 0; i < g->ntensors; i++) {
    Tensor *t = g->tensors[i];
    if (t->kind != T_CONST || (prog->nranks > 1 && !used_on(prog, r, t))) continue;
    p->region[t->id] = REG_ACTS;
    p->cls[t->id] = BUF_CONST;
    p->offset[t->id] = p->bytes[REG_ACTS];
    if (!grow(&total, &p->bytes[REG_ACTS], align_up(tensor_bytes(t, B))))
      return too_big(d, g, t, "activations");
  }
  p->const_bytes = p->bytes[REG_ACTS];
  // Per stage: its slot's layout over the stage's timeline, then K slots.
  PlaceItem *items = ARENA_ARRAY(a, PlaceItem, g->ntensors + g->nnodes + 1);
  // --recompute: the work area's items (every recomputing stage's, each stage's from its first).
  PlaceItem *work = ARENA_ARRAY(a, PlaceItem, g->ntensors + g->nnodes + 1);
  int nwork = 0;
  int64_t work_max = 0;
  int *apos = ARENA_ARRAY(a, int, g->nnodes + 1);    // per node: its position in the work timeline
  bool *rerun = ARENA_ARRAY(a, bool, g->nnodes + 1); // per node: in a stage's r segment
  for (int k = 0; k < r->nvs; k++) {
    int v = r->vs[k];
    const VStage *s = &prog->vs[v];
    Timeline tl;
    timeline(prog, r, v, a, &tl);
    int n = 0, w0 = nwork;
    // The work timeline of a recomputing stage: its F nodes, then its B nodes (F's buffers in
    // the area stay placed as in F when B reruns them, and B's after).
    for (int i = 0; i < g->nnodes; i++) apos[i] = -1;
    for (int j = 0; s->recompute && j < s->f.n; j++) apos[s->f.nodes[j]->id] = j;
    for (int j = 0; s->recompute && j < s->b.n; j++) apos[s->b.nodes[j]->id] = s->f.n + j;
    for (int j = 0; j < s->r.n; j++) rerun[s->r.nodes[j]->id] = true;
    for (int i = 0; i < g->ntensors; i++) {
      Tensor *t = g->tensors[i];
      if ((t->kind != T_ACT && t->kind != T_INPUT && t->kind != T_RECV) || t->per_step) continue;
      int sv = stage_of(prog, r, recv_v, t);
      if (sv == -2 && k == 0) {
        diag_error(d, t->loc,
                   "%s: input '%s' is read by two stages of rank %d (--virtual, zb-v): each stage "
                   "would need its own copy, which is not supported; cut elsewhere",
                   t->path ? t->path : "model", t->name, r->rank);
        return false;
      }
      if (sv != v) continue;
      if (s->recompute && !recompute_boundary(prog, v, t, sent_v)) { // in the work area
        int lo = t->producer ? apos[t->producer->id] : -1, hi = lo;
        for (int u = 0; u < t->nuses; u++) {
          int q = apos[t->uses[u].node->id];
          if (q < 0) lo = -1; // read outside the stage's F and B: cannot be recomputed
          if (q > hi) hi = q;
        }
        if (lo < 0) {
          diag_error(d, t->loc,
                     "internal error: memplan: '%s' of recomputing stage v%d is read outside its "
                     "F and B",
                     t->name, v);
          return false;
        }
        p->region[t->id] = REG_ACTS;
        p->vstage[t->id] = v;
        p->cls[t->id] = BUF_WORK;
        work[nwork++] = (PlaceItem){tensor_bytes(t, B), lo, hi, i, 0};
        continue;
      }
      bool sent = sent_v[t->id] == v + 1;
      int lo = t->kind == T_INPUT  ? tl.load
               : t->kind == T_RECV ? 0 // posted before the stage's first action
                                   : tl.pos[t->producer->id],
          hi = lo;
      if (lo < 0) {
        diag_error(d, t->loc,
                   "internal error: memplan: per-microbatch tensor '%s' made by a step node",
                   t->name);
        return false;
      }
      for (int u = 0; u < t->nuses; u++) {
        int q = tl.pos[t->uses[u].node->id];
        if (q < 0) q = tl.end; // read by a step node: must outlive the microbatch
        if (rerun[t->uses[u].node->id] && q < tl.b_at) q = tl.b_at; // read again at B's start
        if (q > hi) hi = q;
      }
      if (t == g->loss || t->kind == T_INPUT)
        hi = hi > tl.after_f ? hi : tl.after_f; // read by the host after F
      for (int o = 0; o < g->noutputs; o++)
        if (g->outputs[o] == t && hi < tl.after_f) hi = tl.after_f;
      if (sent) { // to where the program waits for its send (a local one: its RECV), or over
                  // the whole timeline while the send may be in flight
        int last = -1;
        bool whole = false;
        for (int c = 0; c < prog->nch && !whole; c++) {
          const Channel *ch = &prog->ch[c];
          if (ch->t != t) continue;
          int q = prog->vs[ch->to_v].rank == r->rank ? local_pos(prog, r, &tl, last_act, ch, true)
                                                     : msg_pos(prog, r, &tl, wait, ch);
          whole = q < 0;
          if (q > last) last = q;
        }
        if (whole)
          lo = 0, hi = tl.end;
        else // from its producer to its last RECV or wait
          hi = hi > last ? hi : last;
      } else if (t->kind == T_RECV && prog->vs[recv_ch[t->id]->from_v].rank == r->rank) {
        lo = local_pos(prog, r, &tl, last_act, recv_ch[t->id], false); // a local copy: its RECV
        if (lo > hi) lo = hi;
      }
      p->region[t->id] = REG_ACTS;
      p->vstage[t->id] = v;
      p->cls[t->id] =
          tl.act_of[lo] == tl.act_of[hi] && !sent && t->kind != T_RECV ? BUF_TEMP : BUF_SAVED;
      items[n++] = (PlaceItem){tensor_bytes(t, B), lo, hi, i, 0};
    }
    for (int i = 0; i < g->nnodes; i++) {
      Node *nd = g->nodes[i];
      if (!nd->op->workspace || tl.pos[i] < 0) continue;
      int64_t ws = nd->op->workspace(nd, B);
      if (ws < 0 || ws > ((int64_t)1 << 55)) { // the bound of a tensor's bytes
        diag_error(d, nd->loc, "%s \"%s\": its kernel workspace (%lld bytes) is too large",
                   nd->path ? nd->path : "model", nd->name, (long long)ws);
        return false;
      }
      if (apos[i] >= 0)
        work[nwork++] = (PlaceItem){ws, apos[i], apos[i], g->ntensors + i, 0};
      else
        items[n++] = (PlaceItem){ws, tl.pos[i], tl.pos[i], g->ntensors + i, 0};
    }
    for (int j = 0; j < s->r.n; j++) rerun[s->r.nodes[j]->id] = false;
    if (!s->recompute && (s->K > 1 || all_temps))
      n = temps_to_work(g, p, items, n, s->K, all_temps, work, &nwork, work_max, a);
    int over = -1, x = -1, y = -1;
    int64_t stride = place_items(items, n, INT64_MAX - total, a, &over), slots = 0;
    if (nwork > w0) { // the stage's working set, from the area's start
      int64_t ws = place_items(work + w0, nwork - w0, INT64_MAX - total, a, &over);
      if (ws < 0) stride = -1;
      if (!place_verify(work + w0, nwork - w0, a, &x, &y)) return overlap_error(d, g, x, y);
      if (ws > work_max) work_max = ws;
    }
    if (stride >= 0 && (__builtin_mul_overflow(stride, (int64_t)stage_nslots(prog, v), &slots) ||
                        slots > INT64_MAX - total))
      stride = -1, over = items[0].key; // K slots do not fit (n > 0: stride > 0)
    if (stride < 0) {
      if (over < g->ntensors) return too_big(d, g, g->tensors[over], "activations");
      const Node *nd = g->nodes[over - g->ntensors];
      diag_error(d, nd->loc,
                 "%s \"%s\": placing its kernel workspace in the activations region, the memory "
                 "plan would exceed 2^63 bytes",
                 nd->path ? nd->path : "model", nd->name);
      return false;
    }
    // The placement's checker: no two buffers live at a common position share a byte.
    if (!place_verify(items, n, a, &x, &y)) return overlap_error(d, g, x, y);
    int64_t base = p->bytes[REG_ACTS];
    for (int i = 0; i < n; i++) {
      int64_t off = base + items[i].off;
      if (items[i].key < g->ntensors)
        p->offset[items[i].key] = off;
      else
        p->ws_offset[items[i].key - g->ntensors] = off;
    }
    p->slot_stride[v] = stride;
    p->slots[v] = stage_nslots(prog, v);         // K, or fewer on an uneven replica (uneven.c)
    p->bytes[REG_ACTS] += slots, total += slots; // fit: checked above
  }
  // The work area above the slots: one copy for the rank (one action runs at a time).
  p->work_base = p->bytes[REG_ACTS];
  p->work_bytes = work_max;
  for (int i = 0; i < nwork; i++) {
    int64_t off = p->work_base + work[i].off;
    if (work[i].key < g->ntensors)
      p->offset[work[i].key] = off;
    else
      p->ws_offset[work[i].key - g->ntensors] = off;
  }
  if (!grow(&total, &p->bytes[REG_ACTS], work_max))
    return too_big(d, g, g->tensors[work[0].key < g->ntensors ? work[0].key : 0], "activations");
  // --precision: the conversion area at the top, one copy for the rank (one call at a time):
  // the largest set of f32 copies one of its nodes' kernel calls works on.
  int64_t conv = 0;
  for (int i = 0; i < g->nnodes; i++) {
    int v = prog->vstage_of_node[i];
    if (prog->nranks > 1 && !on_rank(prog, r, v)) continue;
    int64_t c = precision_conv_bytes(g->nodes[i], B);
    if (c > conv) conv = c;
  }
  p->conv_base = p->bytes[REG_ACTS];
  p->conv_bytes = conv;
  if (!grow(&total, &p->bytes[REG_ACTS], conv)) return too_big(d, g, g->tensors[0], "activations");
  return true;
}

static int64_t plan_total(const Plan *p) {
  int64_t t = 0;
  for (int k = 0; k < REG_COUNT; k++) t += p->bytes[k]; // fits: plan_rank checked it
  return t;
}

bool plan_memory(Program *prog, Diag *d) {
  for (int r = 0; r < prog->nranks; r++) {
    RankProgram *rp = &prog->ranks[r];
    if (!plan_rank(prog, rp, false, d)) return false;
    if (rp->nvs > 1) { // every stage's temporaries in the shared area, where that takes fewer bytes
      Plan keep = rp->plan;
      Diag quiet; // its errors (overflow) are the first plan's too: kept as records, not printed
      diag_init(&quiet, d->file, d->out);
      quiet.format = DIAG_JSON;
      bool ok = plan_rank(prog, rp, true, &quiet);
      diag_free(&quiet);
      if (!ok || plan_total(&rp->plan) >= plan_total(&keep)) rp->plan = keep;
    }
    if (!plan_check(prog, r, d)) return false;
  }
  return true;
}

static const char *mib(char *buf, size_t cap, int64_t b) {
  snprintf(buf, cap, "%10.3f MiB", (double)b / (1 << 20));
  return buf;
}

void plan_print(const Graph *g, const TrainConfig *tc, const Plan *p, FILE *out) {
  static const char *const names[REG_COUNT] = {"params", "grads", "optimizer", "activations"};
  char b[64];
  int64_t total = 0;
  fprintf(out, "memory plan for %s: batch %lld = %lld microbatch%s of %lld, %s%s\n", g->name,
          (long long)tc->batch, (long long)tc->microbatches, tc->microbatches == 1 ? "" : "es",
          (long long)tc->mb_size, tc->opt == OPT_ADAMW ? "adamw" : "sgd",
          precision_note(tc->precision));
  for (int r = 0; r < REG_COUNT; r++) {
    fprintf(out, "  %-12s %s  (%lld bytes)\n", names[r], mib(b, sizeof b, p->bytes[r]),
            (long long)p->bytes[r]);
    total += p->bytes[r];
  }
  if (p->work_bytes > 0) // --recompute: the part of the activations that is the work area
    fprintf(out, "  %-12s %s  (%lld bytes, of the activations: --recompute)\n", "work area",
            mib(b, sizeof b, p->work_bytes), (long long)p->work_bytes);
  if (p->conv_bytes > 0) // --precision: the f32 copies of one call's 16-bit operands
    fprintf(out, "  %-12s %s  (%lld bytes, of the activations: --precision %s)\n", "conversion",
            mib(b, sizeof b, p->conv_bytes), (long long)p->conv_bytes,
            tc->precision == DT_BF16 ? "bf16" : "fp16");
  fprintf(out, "  %-12s %s  (%lld bytes)\n", "total", mib(b, sizeof b, total), (long long)total);
}

void plan_print_rank(const Program *prog, int r, FILE *out) {
  const RankProgram *rp = &prog->ranks[r];
  const Plan *p = &rp->plan;
  int64_t total = 0;
  for (int k = 0; k < REG_COUNT; k++) total += p->bytes[k];
  fprintf(out, "rank %d: params %lld B, grads %lld B, optimizer %lld B, activations %lld B (", r,
          (long long)p->bytes[REG_PARAMS], (long long)p->bytes[REG_GRADS],
          (long long)p->bytes[REG_OPT], (long long)p->bytes[REG_ACTS]);
  fprintf(out, "constants %lld B", (long long)p->const_bytes);
  for (int k = 0; k < rp->nvs; k++) {
    int v = rp->vs[k];
    fprintf(out, "; v%d: %d slot%s of %lld B%s", v, p->slots[v], p->slots[v] == 1 ? "" : "s",
            (long long)p->slot_stride[v], prog->vs[v].recompute ? " (recompute)" : "");
  }
  if (p->work_bytes > 0) fprintf(out, "; work area %lld B", (long long)p->work_bytes);
  if (p->conv_bytes > 0) fprintf(out, "; conversion area %lld B", (long long)p->conv_bytes);
  fprintf(out, "), total %lld B (%.3f MiB)\n", (long long)total, (double)total / (1 << 20));
}

void plan_warn_memory(const Plan *p, Diag *d) {
  int64_t total = 0;
  for (int r = 0; r < REG_COUNT; r++) total += p->bytes[r]; // fits: plan_memory checked it
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return;
  double phys = (double)pages * (double)page;
  if ((double)total <= phys) return;
  diag_warning(d, (Loc){0, 0},
               "the memory plan needs %lld bytes (%.1f GiB) but this machine has %.0f bytes "
               "(%.1f GiB) of physical memory: the program will refuse to start here",
               (long long)total, (double)total / (1 << 30), phys, phys / (1 << 30));
}

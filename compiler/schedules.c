// The built-in pipeline schedules (pipeline-semantics.md §7) as per-rank action lists, and
// their lowering onto the channels between stages.
//
// sched_order is a pure function of (kind, S, V, M, rank): the rank's F, B and W actions in
// order, written in closed form (no search). sched_build lowers them by list-to-list passes
// (compiler/lower_comm.c's header: add_send_recv, add_load_loss, add_step_end, lower_comm):
// LOAD/LOSS around each F, each SEND right after the action that makes its tensor or, when the
// receiver reads it after a message made later on the same pair, right after that one (if the
// sender makes that one before its next making of the channel), each RECV placed in the
// sender's order on its pair of ranks (so both sides see the same message order) and no later
// than the action that reads it: RECV k
// of a pair goes before the earliest reader of messages k, k+1, ... (a suffix minimum over the
// pair's queue), then the step-end actions. Every stage's K is its peak microbatches in flight in
// that list. A copy between two stages of one rank that comes after the action reusing its source
// buffer gets a second lowering that keeps it before. Linear in the number of actions but for the
// queue's insertion (each message moves back past the few made by the actions just before it),
// one sort of the receives, at most twice. The placement of the stages
// on the ranks is the schedule's too (sched_rank_of: v mod S, or zb-v's V).
#include <stdlib.h>
#include <string.h>

#include "../ir/ops.h"
#include "partition.h"
#include "pipeline.h"
#include "schedule.h"

static const char *const sched_names[SCHED_COUNT] = {"gpipe", "1f1b", "interleaved", "zb-h1",
                                                     "zb-v"};

const char *sched_name(SchedKind k) {
  return k >= 0 && k < SCHED_COUNT ? sched_names[k] : "?";
}

bool sched_parse(const char *name, SchedKind *k) {
  for (int i = 0; i < SCHED_COUNT; i++)
    if (strcmp(name, sched_names[i]) == 0) {
      *k = (SchedKind)i;
      return true;
    }
  return false;
}

static int imin(int a, int b) {
  return a < b ? a : b;
}

// 1f1b and zb-h1 (split: W right after its B in warm-up and steady phase; in the drain each W
// waits until after the next B, so it fills the wait for the next gradient).
static int order_1f1b(int S, int M, int r, bool split, Action *out) {
  int n = 0, w = imin(S - 1 - r, M);
  for (int m = 0; m < w; m++) out[n++] = (Action){ACT_F, r, m, NULL};
  for (int i = 0; i < M - w; i++) {
    out[n++] = (Action){ACT_F, r, w + i, NULL};
    out[n++] = (Action){ACT_B, r, i, NULL};
    if (split) out[n++] = (Action){ACT_W, r, i, NULL};
  }
  for (int m = M - w; m < M; m++) {
    out[n++] = (Action){ACT_B, r, m, NULL};
    if (split && m > M - w) out[n++] = (Action){ACT_W, r, m - 1, NULL};
  }
  if (split && w > 0) out[n++] = (Action){ACT_W, r, M - 1, NULL};
  return n;
}

// Megatron's interleaved order: the k-th forward of the rank is chunk (k / S) mod V of
// microbatch (k / (S V)) S + k mod S; backwards the same with the chunks reversed. Warm-up
// 2 (S - 1 - r) + (V - 1) S forwards (all of them when M = S), then one F one B, then drain.
static Action inter_unit(int S, int V, int r, int k, bool fwd) {
  int chunk = (k / S) % V, m = (k / (S * V)) * S + k % S;
  if (!fwd) chunk = V - 1 - chunk;
  return (Action){fwd ? ACT_F : ACT_B, chunk * S + r, m, NULL};
}

static int order_interleaved(int S, int V, int M, int r, Action *out) {
  int total = V * M, n = 0;
  int warm = M == S ? total : imin(2 * (S - 1 - r) + (V - 1) * S, total);
  for (int k = 0; k < warm; k++) out[n++] = inter_unit(S, V, r, k, true);
  for (int k = 0; k < total - warm; k++) {
    out[n++] = inter_unit(S, V, r, warm + k, true);
    out[n++] = inter_unit(S, V, r, k, false);
  }
  for (int k = total - warm; k < total; k++) out[n++] = inter_unit(S, V, r, k, false);
  return n;
}

int sched_rank_of(SchedKind k, int S, int V, int v) {
  if (k == SCHED_ZBV) return v < S ? v : V * S - 1 - v;
  return v % S;
}

int sched_inflight(SchedKind k, int S, int V, int M, int v) {
  int n = k == SCHED_ZBV && V == 2 ? (v < S ? 2 * S - 1 - v : 2 * S - v) : S * V - v;
  return n < 1 ? 1 : n < M ? n : M;
}

// zb-v's stage of chunk c (0, 1) of rank r: r and 2S - 1 - r (as sched_rank_of places them).
static int zbv_stage(int S, int r, int c) {
  return c == 1 ? 2 * S - 1 - r : r;
}

// zb-v (Qi et al., "Zero Bubble Pipeline Parallelism" §6; the order of torch's
// ScheduleZBVZeroBubble but one move): rank r runs chunk 0 (stage r, the way down the V) and
// chunk 1 (stage 2S - 1 - r, the way back up), B split into B and W. The order, over
// n = max(M, 2S - 1) microbatches per chunk, those from M on dropped (so a small M keeps the
// warm-up's shape):
//   warm-up    2 (S - r) - 1 times F0;  r times F1 F0;  S - r times F1 B1 W1
//   steady     while chunk 0 has forwards left or chunk 1's lag behind: B0 W0, F0 (if any
//              left), F1 B1 W1
//   cool-down  r times B0 B1;  S - r times B0 W0;  the W1 left, then the W0 left
// The move: torch runs the steady phase's F0 before B0 W0; after them it takes the slot W0 has
// just freed, so chunk 0 keeps one microbatch fewer in flight (rank 0: 2S - 1, not 2S), and the
// lock-step simulation's bubble and step time are the same (unit and stage costs, S 2..4, M
// 1..12: the W0 fills the same wait). Each chunk's B and W in ascending m (as
// pipeline-semantics.md §1 needs).
typedef struct ZbvCount {
  int f[2], b[2], w[2]; // per chunk: the next F, B and W microbatch
} ZbvCount;

static void zbv_put(int S, int M, int r, ActionKind kind, int c, ZbvCount *z, Action *out, int *n) {
  int *next = kind == ACT_F ? z->f : kind == ACT_B ? z->b : z->w;
  int m = next[c]++;
  if (m < M) out[(*n)++] = (Action){kind, zbv_stage(S, r, c), m, NULL};
}

static int order_zbv(int S, int M, int r, Action *out) {
  int n = 0, nm = M > 2 * S - 1 ? M : 2 * S - 1;
  ZbvCount z = {{0, 0}, {0, 0}, {0, 0}};
  for (int i = 0; i < 2 * (S - r) - 1; i++) zbv_put(S, M, r, ACT_F, 0, &z, out, &n);
  for (int i = 0; i < r; i++) {
    zbv_put(S, M, r, ACT_F, 1, &z, out, &n);
    zbv_put(S, M, r, ACT_F, 0, &z, out, &n);
  }
  for (int i = 0; i < S - r; i++) {
    zbv_put(S, M, r, ACT_F, 1, &z, out, &n);
    zbv_put(S, M, r, ACT_B, 1, &z, out, &n);
    zbv_put(S, M, r, ACT_W, 1, &z, out, &n);
  }
  while (z.f[0] < nm || z.f[1] < z.f[0]) {
    zbv_put(S, M, r, ACT_B, 0, &z, out, &n);
    zbv_put(S, M, r, ACT_W, 0, &z, out, &n);
    if (z.f[0] < nm) zbv_put(S, M, r, ACT_F, 0, &z, out, &n);
    zbv_put(S, M, r, ACT_F, 1, &z, out, &n);
    zbv_put(S, M, r, ACT_B, 1, &z, out, &n);
    zbv_put(S, M, r, ACT_W, 1, &z, out, &n);
  }
  for (int i = 0; i < r; i++) {
    zbv_put(S, M, r, ACT_B, 0, &z, out, &n);
    zbv_put(S, M, r, ACT_B, 1, &z, out, &n);
  }
  for (int i = 0; i < S - r; i++) {
    zbv_put(S, M, r, ACT_B, 0, &z, out, &n);
    zbv_put(S, M, r, ACT_W, 0, &z, out, &n);
  }
  while (z.w[1] < nm) zbv_put(S, M, r, ACT_W, 1, &z, out, &n);
  while (z.w[0] < nm) zbv_put(S, M, r, ACT_W, 0, &z, out, &n);
  return n;
}

int sched_order(SchedKind k, int S, int V, int M, int r, Action *out, Diag *d) {
  if (S < 1 || V < 1 || M < 1 || r < 0 || r >= S) {
    diag_error(d, (Loc){0, 0}, "schedule %s: needs S >= 1, V >= 1, M >= 1 and 0 <= rank < S",
               sched_name(k));
    return -1;
  }
  if (k == SCHED_ZBV && V != 2) {
    diag_error(d, (Loc){0, 0}, "schedule zb-v: runs two stages per rank in a V (V = 2, not %d)", V);
    return -1;
  }
  if (k != SCHED_INTERLEAVED && k != SCHED_ZBV && V != 1) {
    diag_error(d, (Loc){0, 0},
               "schedule %s: runs one stage per rank (V = 1, not %d); interleaved runs several",
               sched_name(k), V);
    return -1;
  }
  switch (k) {
  case SCHED_GPIPE: {
    int n = 0;
    for (int m = 0; m < M; m++) out[n++] = (Action){ACT_F, r, m, NULL};
    for (int m = 0; m < M; m++) out[n++] = (Action){ACT_B, r, m, NULL};
    return n;
  }
  case SCHED_1F1B:
    return order_1f1b(S, M, r, false, out);
  case SCHED_ZBH1:
    return order_1f1b(S, M, r, true, out);
  case SCHED_INTERLEAVED:
    if (M % S != 0) {
      diag_error(d, (Loc){0, 0},
                 "schedule interleaved: needs the microbatches M a multiple of the stages S "
                 "(M = %d, S = %d)",
                 M, S);
      return -1;
    }
    return order_interleaved(S, V, M, r, out);
  case SCHED_ZBV:
    return order_zbv(S, M, r, out);
  default:
    diag_error(d, (Loc){0, 0}, "schedule: unknown schedule kind %d", (int)k);
    return -1;
  }
}

// ---- Lowering

// One receive to place: before compute action pos of rank dst, from rank src, k-th on the pair.
typedef struct Recv {
  int pos;           // index in the receiver's compute order it goes before
  int src;           // sending rank
  int k;             // its index in the pair's message order
  const Channel *ch; // the channel
  int m;             // microbatch
} Recv;

// One message of a pair's queue (lower): a channel's tensor for one microbatch.
typedef struct Msg {
  const Channel *ch; // the channel
  int m;             // microbatch
  int prod;          // index in the sender's compute order of the action that makes it
  int pos;           // index in the receiver's compute order of the action that reads it
  int next;          // the sender's next action making the channel (ncomp: none): sent before it
} Msg;

static int recv_cmp(const void *a, const void *b) {
  const Recv *x = a, *y = b;
  if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
  if (x->src != y->src) return x->src < y->src ? -1 : 1;
  return x->k < y->k ? -1 : x->k > y->k;
}

// The channels each action makes, bucketed by (stage, F or B) in id order: made[key[i]] ..
// made[key[i + 1] - 1] for key i = 2 v + (B ? 1 : 0); a counting sort, linear in nch.
typedef struct Made {
  int *key;            // nv * 2 + 1 bucket starts
  const Channel **chs; // the channels, bucket by bucket
} Made;

static Made made_index(const Program *p, Arena *a) {
  int nk = 2 * p->nv;
  Made x = {ARENA_ARRAY(a, int, nk + 1), ARENA_ARRAY(a, const Channel *, p->nch + 1)};
  for (int c = 0; c < p->nch; c++) x.key[2 * p->ch[c].from_v + p->ch[c].grad + 1]++;
  for (int k = 0; k < nk; k++) x.key[k + 1] += x.key[k];
  int *fill = ARENA_ARRAY(a, int, nk + 1);
  for (int c = 0; c < p->nch; c++) {
    int k = 2 * p->ch[c].from_v + p->ch[c].grad;
    x.chs[x.key[k] + fill[k]++] = &p->ch[c];
  }
  return x;
}

// Bucket of the channels action x makes (an empty range for other kinds).
static void made_by(const Made *mk, const Action *x, int *b, int *e) {
  *b = *e = 0;
  if (x->kind != ACT_F && x->kind != ACT_B) return;
  int k = 2 * x->v + (x->kind == ACT_B);
  *b = mk->key[k];
  *e = mk->key[k + 1];
}

// Whether weight-gradient node n goes to W when its stage splits: a compute-bound one (a GEMM:
// at least SPLIT_MIN_INTENSITY FLOP per byte it reads and writes, by the registry's cost) or one
// that reads a W node's output. A memory-bound one (a norm's, a bias's, an embedding's dw) stays
// in B: it reads the dy that B has just made, in cache, while in W it would read it again from
// memory at several times its cost, for a share of W's time too small to fill a bubble with.
static bool goes_to_w(const Program *p, const Node *n, const bool *in_w) {
  for (int k = 0; k < n->nin; k++)
    if (n->in[k]->producer && in_w[n->in[k]->producer->id]) return true;
  OpCost c = {0, 0};
  n->op->cost(n, p->tc->mb_size, &c);
  return c.flops >= SPLIT_MIN_INTENSITY * c.bytes;
}

// Splits stage s's backward segment (B and W nodes in graph order, as the partition made it)
// into B (input gradients, and the memory-bound weight gradients: goes_to_w) and W (the other
// weight gradients), each in graph order: the W actions run their nodes and accumulate them over
// the microbatches (as B does its own weight-gradient nodes).
static void split_segment(const Program *p, VStage *s, bool *in_w, Arena *a) {
  Node **w = ARENA_ARRAY(a, Node *, s->b.n + s->w.n + 1);
  int nb = 0, nw = 0;
  for (int i = 0; i < s->b.n; i++) {
    Node *n = s->b.nodes[i];
    if (n->role == ROLE_WGT && goes_to_w(p, n, in_w))
      w[nw++] = n, in_w[n->id] = true;
    else
      s->b.nodes[nb++] = n;
  }
  for (int i = 0; i < s->w.n; i++) w[nw++] = s->w.nodes[i];
  s->b.n = nb;
  s->w = (Segment){w, nw};
  s->split = true;
}

// Whether splitting stage v's backward buys nothing on this compute order of its rank: its B
// makes no channel (nothing is sent between B and W) and every W(v, m) comes right after
// B(v, m). Then the fused backward (each weight gradient next to the input gradient that reads
// the same dy, while it is in cache) runs the same kernels in the same per-parameter order.
static bool split_idle(const Made *mk, int v, const Action *comp, int n) {
  if (mk->key[2 * v + 1] != mk->key[2 * v + 2]) return false;
  for (int i = 0; i < n; i++) {
    const Action *x = &comp[i];
    if (x->v != v || x->kind != ACT_B) continue;
    if (i + 1 >= n || comp[i + 1].kind != ACT_W || comp[i + 1].v != v || comp[i + 1].m != x->m)
      return false;
  }
  return true;
}

// The list passes after the channels (each rank's list rewritten in place; the room is lower's):
// add_load_loss puts a LOAD before and a LOSS after each F of a stage that has them (between
// the F's RECVs and its SENDs); add_step_end appends TIED_SUM per stage, NORM, OPT.
static void add_load_loss(Program *p, Arena *a) {
  for (int r = 0; r < p->nranks; r++) {
    RankProgram *rp = &p->ranks[r];
    Action *in = ARENA_ARRAY(a, Action, rp->nacts + 1);
    memcpy(in, rp->acts, sizeof(Action) * (size_t)rp->nacts);
    int n = rp->nacts;
    rp->nacts = 0;
    for (int i = 0; i < n; i++) {
      const Action *x = &in[i];
      bool f = x->kind == ACT_F;
      if (f && p->vs[x->v].loads) rp->acts[rp->nacts++] = (Action){ACT_LOAD, x->v, x->m, NULL};
      rp->acts[rp->nacts++] = *x;
      if (f && p->vs[x->v].has_loss) rp->acts[rp->nacts++] = (Action){ACT_LOSS, x->v, x->m, NULL};
    }
  }
}

static void add_step_end(Program *p) {
  for (int r = 0; r < p->nranks; r++) {
    RankProgram *rp = &p->ranks[r];
    for (int c = 0; c < rp->nvs; c++)
      rp->acts[rp->nacts++] = (Action){ACT_TIED_SUM, rp->vs[c], -1, NULL};
    rp->acts[rp->nacts++] = (Action){ACT_NORM, -1, -1, NULL};
    rp->acts[rp->nacts++] = (Action){ACT_OPT, -1, -1, NULL};
  }
}

// --dump of the lowering (sched_lower_dump): each pass's lists, one line per rank.
static FILE *dump_to;

void sched_lower_dump(FILE *out) {
  dump_to = out;
}

// Rank r's list of n actions as "  rank R: A, B, ..." wrapped within 100 columns.
static void dump_list(FILE *out, int r, const Action *acts, int n) {
  int col = fprintf(out, "  rank %d:", r);
  for (int i = 0; i < n; i++) {
    char t[64];
    action_text(&acts[i], t, sizeof t);
    int w = (int)strlen(t) + (i + 1 < n);
    if (col + 1 + w > 100) col = fprintf(out, "\n   ");
    col += fprintf(out, " %s%s", t, i + 1 < n ? "," : "");
  }
  fputc('\n', out);
}

static void lower_dump(const Program *p, const char *pass, FILE *out) {
  fprintf(out, "after %s:\n", pass);
  for (int r = 0; r < p->nranks; r++) dump_list(out, r, p->ranks[r].acts, p->ranks[r].nacts);
}

// Lowers the compute orders onto the channels (sched_build's second half): the RECVs and SENDs
// into p->ranks (add_send_recv), then add_load_loss and add_step_end, then each stage's K; dump
// (NULL: none) receives the lists after each of the three. kfrom (per stage, or NULL):
// a K to keep each copy between two stages of one rank before (NULL: no constraint). Returns
// whether a copy comes too late for the K it computed: its RECV (c, m) after the action that
// makes (c, m + K of c's sender), which overwrites the buffer it copies from.
static bool lower(Program *p, int S, int V, Action *const *comp, const int *ncomp, const Made *mk,
                  const int *posF, const int *posB, const int *kfrom, FILE *dump, Arena *a) {
  int M = p->M, nv = S * V;
  // Room for a rank's list: its F/B/W, a LOAD and a LOSS per F, its channels, the step end.
  size_t cap = 3 * (size_t)V * M + 2 * (size_t)p->nch * M + 2 * (size_t)V * M + (size_t)V + 3;
  size_t nmsg = (size_t)p->nch * M + 1;
  Recv *rv = ARENA_ARRAY(a, Recv, nmsg);
  int nrv = 0;
  // The pair queues (sender order), each message's reader position and the sender's action
  // that next makes its channel (a later microbatch: the send must be posted before it).
  Msg *q = ARENA_ARRAY(a, Msg, nmsg);
  int *qn = ARENA_ARRAY(a, int, (size_t)S *S), *qb = ARENA_ARRAY(a, int, (size_t)S *S + 1);
  int *qat = ARENA_ARRAY(a, int, nmsg); // per channel * M + m: its index in its pair's queue
  for (int r = 0; r < S; r++)
    for (int i = 0; i < ncomp[r]; i++) {
      int b, e;
      made_by(mk, &comp[r][i], &b, &e);
      for (int j = b; j < e; j++) qn[r * S + p->vs[mk->chs[j]->to_v].rank]++;
    }
  for (int k = 0; k < S * S; k++) qb[k + 1] = qb[k] + qn[k], qn[k] = 0;
  for (int r = 0; r < S; r++)
    for (int i = 0; i < ncomp[r]; i++) {
      int b, e;
      made_by(mk, &comp[r][i], &b, &e);
      for (int j = b; j < e; j++) {
        const Channel *ch = mk->chs[j];
        int m = comp[r][i].m, dst = p->vs[ch->to_v].rank;
        const int *at = ch->grad ? posB : posF;
        int pos = at[ch->to_v * M + m], next = ncomp[r];
        for (int m2 = m + 1; m2 < M; m2++) // the earliest later making (any order of m)
          if (at[ch->from_v * M + m2] < next) next = at[ch->from_v * M + m2];
        if (dst == r && kfrom && m + kfrom[ch->from_v] < M) { // a copy before its source is reused
          int reuse = at[ch->from_v * M + m + kfrom[ch->from_v]];
          if (reuse < pos) pos = reuse;
        }
        // Into its pair's queue, ahead of the messages made by earlier actions that the receiver
        // reads later, while each of them can wait for this one (its sender makes it before the
        // next making of theirs): the receiver then takes them in its reading order and holds no
        // received tensor early for the pair's order's sake (zb-v: a first-stage activation
        // ahead of a chunk-1 gradient). Never between two stages of one rank (copies).
        Msg *pq = q + qb[r * S + dst];
        int n = qn[r * S + dst]++;
        while (dst != r && n > 0 && pq[n - 1].prod < i && pq[n - 1].pos > pos &&
               i < pq[n - 1].next) {
          pq[n] = pq[n - 1];
          qat[pq[n].ch->id * M + pq[n].m] = qb[r * S + dst] + n;
          n--;
        }
        pq[n] = (Msg){ch, m, i, pos, next};
        qat[ch->id * M + m] = qb[r * S + dst] + n;
      }
    }
  for (int r = 0; r < S; r++) // the receives, grouped by sender, each pair in queue order
    for (int dst = 0; dst < S; dst++)
      for (int k = 0; k < qn[r * S + dst]; k++) {
        const Msg *x = &q[qb[r * S + dst] + k];
        rv[nrv++] = (Recv){x->pos, r, k, x->ch, x->m};
      }
  // Suffix minimum of the reader positions along each pair's queue (rv is grouped by sender,
  // each pair's messages in queue order): walk backwards keeping the minimum per receiver.
  int *minpos = ARENA_ARRAY(a, int, S);
  for (int src = S - 1, e = nrv; src >= 0; src--) {
    int b = e;
    while (b > 0 && rv[b - 1].src == src) b--;
    for (int dst = 0; dst < S; dst++) minpos[dst] = 1 << 30;
    for (int j = e - 1; j >= b; j--) {
      int dst = p->vs[rv[j].ch->to_v].rank;
      if (rv[j].pos < minpos[dst]) minpos[dst] = rv[j].pos;
      rv[j].pos = minpos[dst];
    }
    e = b;
  }
  // Group the receives per receiver, then by position, sender and queue order.
  Recv **byr = ARENA_ARRAY(a, Recv *, S);
  int *nbyr = ARENA_ARRAY(a, int, S);
  for (int r = 0; r < S; r++) byr[r] = ARENA_ARRAY(a, Recv, (size_t)p->nch * M + 1);
  for (int j = 0; j < nrv; j++) {
    int dst = p->vs[rv[j].ch->to_v].rank;
    byr[dst][nbyr[dst]++] = rv[j];
  }
  int *qf = ARENA_ARRAY(a, int, (size_t)S *S); // per pair: its first message not yet sent
  for (int r = 0; r < S; r++) {
    qsort(byr[r], (size_t)nbyr[r], sizeof(Recv), recv_cmp);
    RankProgram *rp = &p->ranks[r];
    *rp = (RankProgram){.rank = r};
    rp->vs = ARENA_ARRAY(a, int, V);
    for (int v = 0; v < nv; v++) // its stages, ascending, as placed
      if (p->vs[v].rank == r && rp->nvs < V) rp->vs[rp->nvs++] = v;
    rp->acts = ARENA_ARRAY(a, Action, cap);
    for (int d = 0; d < S; d++) qf[r * S + d] = qb[r * S + d];
    int j = 0;
    for (int i = 0; i < ncomp[r]; i++) {
      const Action *x = &comp[r][i];
      for (; j < nbyr[r] && byr[r][j].pos == i; j++)
        rp->acts[rp->nacts++] = (Action){ACT_RECV, -1, byr[r][j].m, byr[r][j].ch};
      rp->acts[rp->nacts++] = *x;
      // Its SENDs in channel order, each after those ahead of it in its pair's queue; then the
      // messages an earlier action made that waited for one of them.
      int b, e;
      made_by(mk, x, &b, &e);
      for (int pass = 0; pass < 2; pass++)
        for (int jj = b; jj < e; jj++) {
          const Channel *ch = mk->chs[jj];
          int pr = r * S + p->vs[ch->to_v].rank, upto = qat[ch->id * M + x->m];
          while (qf[pr] < qb[pr + 1] && q[qf[pr]].prod <= i && (pass || qf[pr] <= upto)) {
            const Msg *y = &q[qf[pr]++];
            rp->acts[rp->nacts++] = (Action){ACT_SEND, -1, y->m, y->ch};
          }
        }
    }
  }
  if (dump) lower_dump(p, "add_send_recv", dump);
  add_load_loss(p, a);
  if (dump) lower_dump(p, "add_load_loss", dump);
  add_step_end(p);
  if (dump) lower_dump(p, "add_step_end", dump);
  // K: peak microbatches in flight per stage over the final lists. Microbatch m holds its slot
  // of stage v from the first of its forward RECVs into v, its LOAD and its F (whichever the
  // rank runs first: a receive can be lowered ahead of the previous microbatch's B) until the
  // releasing B (or W when split), so a received tensor never lands in a slot still in use.
  int *live = ARENA_ARRAY(a, int, nv);
  bool *held = ARENA_ARRAY(a, bool, (size_t)nv * p->M + 1);
  for (int v = 0; v < nv; v++) p->vs[v].K = 0;
  for (int r = 0; r < S; r++)
    for (int i = 0; i < p->ranks[r].nacts; i++) {
      const Action *x = &p->ranks[r].acts[i];
      bool rel = x->v >= 0 && x->kind == stage_release(&p->vs[x->v]);
      int v = x->kind == ACT_RECV && !x->ch->grad              ? x->ch->to_v
              : x->kind == ACT_LOAD || x->kind == ACT_F || rel ? x->v
                                                               : -1;
      if (v < 0) continue;
      bool *h = &held[(size_t)v * p->M + x->m];
      if (rel) {
        live[v]--;
      } else if (!*h) {
        *h = true;
        if (++live[v] > p->vs[v].K) p->vs[v].K = live[v];
      }
    }
  for (int j = 0; j < nrv; j++) { // the copies between two stages of one rank, against K
    const Channel *ch = rv[j].ch;
    int r = p->vs[ch->from_v].rank, m = rv[j].m + p->vs[ch->from_v].K;
    if (r == p->vs[ch->to_v].rank && m < M &&
        rv[j].pos > (ch->grad ? posB : posF)[ch->from_v * M + m])
      return true;
  }
  return false;
}

// The compute orders (after the split or fusion of B and W) for sched_lower_dump.
static void dump_order(const Program *p, Action **comp, const int *ncomp, FILE *out) {
  fprintf(out, "compute order:\n");
  for (int r = 0; r < p->nranks; r++) dump_list(out, r, comp[r], ncomp[r]);
}

bool sched_build(Program *p, SchedKind k, int S, int V, Arena *a, Diag *d) {
  int M = p->M;
  if (p->nv != S * V) {
    diag_error(d, (Loc){0, 0}, "schedule %s: %d stages given for S = %d, V = %d", sched_name(k),
               p->nv, S, V);
    return false;
  }
  // Per rank its compute order (F, B, W); zb-h1 and zb-v offer every stage the split, and the
  // schedule says where each stage runs (sched_rank_of).
  Action **comp = ARENA_ARRAY(a, Action *, S);
  int *ncomp = ARENA_ARRAY(a, int, S);
  for (int r = 0; r < S; r++) {
    comp[r] = ARENA_ARRAY(a, Action, 3 * (size_t)V * M + 1);
    if ((ncomp[r] = sched_order(k, S, V, M, r, comp[r], d)) < 0) return false;
  }
  bool *split = ARENA_ARRAY(a, bool, S *V);
  int *rank = ARENA_ARRAY(a, int, S *V);
  for (int v = 0; v < S * V; v++)
    split[v] = k == SCHED_ZBH1 || k == SCHED_ZBV, rank[v] = sched_rank_of(k, S, V, v);
  return sched_lower(p, S, V, comp, ncomp, split, rank, a, d);
}

bool sched_lower(Program *p, int S, int V, Action **comp, int *ncomp, const bool *split,
                 const int *rank, Arena *a, Diag *d) {
  int M = p->M, nv = S * V;
  if (p->nv != nv) {
    diag_error(d, (Loc){0, 0}, "schedule: %d stages given for S = %d, V = %d", p->nv, S, V);
    return false;
  }
  p->split_bw = false;
  p->offer = split;
  for (int v = 0; v < nv; v++) {
    p->vs[v].rank = rank ? rank[v] : v % S, p->vs[v].split = false;
    p->split_bw |= split[v];
  }
  p->nranks = S;
  p->ranks = ARENA_ARRAY(a, RankProgram, S);
  Made mk = made_index(p, a);
  // Split each stage offered the split where it buys something; elsewhere drop its W actions (B
  // fused).
  bool *in_w = ARENA_ARRAY(a, bool, p->g->nnodes + 1); // per node id: in a W segment
  for (int v = 0; v < nv; v++) {
    if (!split[v]) continue;
    int r = p->vs[v].rank, n = 0;
    // A recomputing stage stays fused: its W would need the rerun forward's buffers again.
    if (!p->vs[v].recompute && !split_idle(&mk, v, comp[r], ncomp[r])) {
      split_segment(p, &p->vs[v], in_w, a);
      // No weight gradient worth moving (every one memory-bound): B keeps them all, unsplit.
      // (A stage without nodes, as the unit tests' hand-made programs, stays split.)
      if (p->vs[v].w.n > 0 || p->vs[v].b.n == 0) continue;
      p->vs[v].split = false;
    }
    for (int i = 0; i < ncomp[r]; i++)
      if (comp[r][i].v != v || comp[r][i].kind != ACT_W) comp[r][n++] = comp[r][i];
    ncomp[r] = n;
  }
  // Per (stage, F or B, m): position in its rank's compute order.
  int *posF = ARENA_ARRAY(a, int, (size_t)nv *M), *posB = ARENA_ARRAY(a, int, (size_t)nv *M);
  for (int r = 0; r < S; r++)
    for (int i = 0; i < ncomp[r]; i++) {
      const Action *x = &comp[r][i];
      if (x->kind == ACT_F) posF[x->v * M + x->m] = i;
      if (x->kind == ACT_B) posB[x->v * M + x->m] = i;
    }
  // Lowered with no constraint on the copies between two stages of one rank; where one then
  // comes after the action that reuses its source buffer (zb-v: the last stage's skip gradient
  // to stage 0, both on rank 0, is read only after the next is made), again with each such copy
  // kept before that action, at the first lowering's K.
  // The lists after each pass for sched_lower_dump (the last lowering's: dump is rewound).
  FILE *dump = dump_to ? tmpfile() : NULL;
  if (dump) dump_order(p, comp, ncomp, dump);
  long mark = dump ? ftell(dump) : 0;
  if (lower(p, S, V, comp, ncomp, &mk, posF, posB, NULL, dump, a)) {
    int *kfrom = ARENA_ARRAY(a, int, nv);
    for (int v = 0; v < nv; v++) kfrom[v] = stage_slots(&p->vs[v]);
    if (dump) fseek(dump, mark, SEEK_SET);
    lower(p, S, V, comp, ncomp, &mk, posF, posB, kfrom, dump, a);
  }
  bool ok = lower_comm(p, a, d); // the messages' POST_RECV, WAIT_SEND and the COPYs
  if (ok && dump) lower_dump(p, "lower_comm", dump);
  if (ok) lower_step_end(p, a); // the step end's WAIT_SENDS and exchange messages
  if (dump) {
    if (ok) lower_dump(p, "lower_step_end", dump);
    long end = ftell(dump); // the first lowering's longer text past it is not the dump's
    rewind(dump);
    for (long i = 0; i < end; i++) fputc(fgetc(dump), dump_to);
    fclose(dump);
  }
  return ok;
}

// The one-rank case (S = 1, V = 1, whatever --schedule says): the partition's one stage lowered
// as 1f1b, which at S = 1 is for m = 0..M-1 LOAD, F, LOSS, B (the B segment holds the B and W
// nodes in graph order: B and W are not split), then TIED_SUM, NORM, OPT.
bool pass_schedule(Graph *g, const TrainConfig *tc, Program *p, Diag *d) {
  (void)tc;
  if (p->g != g || p->nv != 1) {
    diag_error(d, (Loc){0, 0},
               "internal error: schedule: one rank lowers the partition's one stage, not %d",
               p->nv);
    return false;
  }
  // 1f1b at S = 1 has no warm-up: per m its F then its B, which the lowering surrounds with
  // LOAD and LOSS (the one stage has neither channels nor a split).
  return sched_build(p, SCHED_1F1B, 1, 1, g->arena, d);
}

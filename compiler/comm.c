// comm pass: the tensors that cross between the partition's stages (pipeline.h's Channel) and
// the parameters whose gradient partial sums several stages exchange (Exchange); its checker
// and its dump (--dump-after=comm).
//
// How: one walk over the nodes in graph order. For each output tensor of a node placed on stage
// v, its uses (graph order) name the stages that read it; every reading stage v' != v (the
// reader an F, B or W node) gets one channel, so a tensor read by several later stages is sent
// directly to each of them (never relayed through the stages between). A forward tensor is an
// activation sent after F; a tensor made by a B or W node is a gradient contribution (autodiff
// makes each contribution a tensor of its own) sent back after B to the stage that sums it.
// Then each channel gets its receive-side tensor (kind T_RECV, named "<t>@v<to_v>", appended to
// the graph) and the reads of t by to_v's nodes move to it (node inputs and use lists, graph
// order kept), so a stage's nodes only ever touch its own tensors: the memory plan and codegen
// of a rank need no notion of "a tensor made elsewhere". Step-end nodes (a parameter's sum of
// its per-use gradients) are not channels: a parameter used on several stages is held by each,
// and its stages, in the order of its first forward use on each, form its exchange group, with
// the use buffers its sum reads (each accumulated on one stage, exchanged at step end). Model
// inputs and targets have no producer: each stage that uses one reads it locally. Per-stage
// marks are stamped with the tensor's id, so the walk is O(nodes + uses) plus O(uses x S) for
// the exchange groups.
#include <string.h>

#include "comm.h"
#include "pipeline.h"

static const Tensor *owner(const Tensor *t) {
  return t->tied_to ? t->tied_to : t;
}

static int64_t channel_bytes(const Program *p, const Tensor *t) {
  return shape_numel(&t->shape, p->tc->mb_size) * (int64_t)tensor_elem_size(t);
}

// The exchange groups: per owner parameter, the stages of its forward uses in use order.
static void build_exchanges(Graph *g, Program *p) {
  Arena *a = g->arena;
  int S = p->nv;
  int **st = ARENA_ARRAY(a, int *, g->ntensors + 1); // per owner param: its stages (S entries)
  int *nst = ARENA_ARRAY(a, int, g->ntensors + 1);   // per owner param: count
  int nmulti = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->role != ROLE_FWD) continue;
    int v = p->vstage_of_node[i];
    for (int k = 0; k < n->nin; k++) {
      if (n->in[k]->kind != T_PARAM) continue;
      const Tensor *q = owner(n->in[k]);
      if (!st[q->id]) st[q->id] = ARENA_ARRAY(a, int, S);
      bool seen = false;
      for (int j = 0; j < nst[q->id] && !seen; j++) seen = st[q->id][j] == v;
      if (seen) continue;
      st[q->id][nst[q->id]++] = v;
      if (nst[q->id] == 2) nmulti++;
    }
  }
  p->ex = ARENA_ARRAY(a, Exchange, nmulti + 1);
  p->nex = 0;
  for (int i = 0; i < g->ntensors; i++) {
    if (nst[i] < 2) continue;
    Exchange *e = &p->ex[p->nex++];
    *e = (Exchange){g->tensors[i], st[i], nst[i], NULL, NULL, 0};
    // The use buffers: the inputs of the step-end sum (one use with a gradient: the buffer).
    Tensor *gr = e->param->grad;
    Node *sum = gr && gr->producer && gr->producer->role == ROLE_STEP ? gr->producer : NULL;
    int nb = sum ? sum->nin : gr ? 1 : 0;
    e->bufs = ARENA_ARRAY(a, Tensor *, nb + 1);
    e->buf_stage = ARENA_ARRAY(a, int, nb + 1);
    for (int j = 0; j < nb; j++) {
      Tensor *b = sum ? sum->in[j] : gr;
      e->bufs[e->nbufs] = b;
      e->buf_stage[e->nbufs++] = b->producer ? p->vstage_of_node[b->producer->id] : -1;
    }
  }
}

// The receive-side tensor of channel ch, and the reads of ch->t on ch->to_v moved to it.
static bool rewire(Graph *g, Program *p, Channel *ch, Diag *d) {
  Tensor *t = ch->t;
  const char *name = arena_printf(g->arena, "%s@v%d", t->name, ch->to_v);
  if (graph_find(g, name)) {
    diag_error(d, t->loc,
               "%s: '%s' is sent to stage %d, and its received copy's name '%s' is already "
               "a tensor of the model",
               t->path ? t->path : "model", t->name, ch->to_v, name);
    return false;
  }
  Tensor *r = graph_add_tensor(g, name, T_RECV);
  r->dtype = t->dtype;
  r->half = t->half; // a 16-bit message lands in a 16-bit buffer
  r->shape = t->shape;
  r->loc = t->loc;
  r->path = t->path;
  r->grad_of = t->grad_of;
  r->uses = ARENA_ARRAY(g->arena, Use, t->nuses + 1);
  int keep = 0;
  for (int j = 0; j < t->nuses; j++) {
    Use u = t->uses[j];
    if (u.node->role != ROLE_STEP && p->vstage_of_node[u.node->id] == ch->to_v) {
      u.node->in[u.slot] = r;
      r->uses[r->nuses++] = u;
    } else {
      t->uses[keep++] = u;
    }
  }
  t->nuses = keep;
  ch->dst = r;
  return true;
}

bool pass_comm(Graph *g, Program *p, Diag *d) {
  Arena *a = g->arena;
  int S = p->nv;
  int *mark = ARENA_ARRAY(a, int, S + 1); // per stage: 1 + id of the last tensor sent to it
  int nch = 0;
  for (int pass = 0; pass < 2; pass++) { // count, then fill
    memset(mark, 0, sizeof(int) * (size_t)(S + 1));
    int c = 0;
    for (int i = 0; i < g->nnodes; i++) {
      const Node *n = g->nodes[i];
      if (n->role == ROLE_STEP) continue;
      int v = p->vstage_of_node[i];
      for (int k = 0; k < n->nout; k++) {
        Tensor *t = n->out[k];
        for (int j = 0; j < t->nuses; j++) {
          const Node *r = t->uses[j].node;
          int w = p->vstage_of_node[r->id];
          if (r->role == ROLE_STEP || w == v || mark[w] == t->id + 1) continue;
          mark[w] = t->id + 1;
          if (pass == 1)
            p->ch[c] = (Channel){.id = c,
                                 .t = t,
                                 .from_v = v,
                                 .to_v = w,
                                 .grad = n->role != ROLE_FWD,
                                 .tag = c,
                                 .bytes = channel_bytes(p, t)};
          c++;
        }
      }
    }
    if (pass == 0) p->ch = ARENA_ARRAY(a, Channel, c + 1);
    nch = c;
  }
  p->nch = nch;
  for (int c = 0; c < nch; c++)
    if (!rewire(g, p, &p->ch[c], d)) return false;
  build_exchanges(g, p);
  return true;
}

#define COMM_ERR(...)                                                                              \
  do {                                                                                             \
    diag_error(d, (Loc){0, 0}, __VA_ARGS__);                                                       \
    return false;                                                                                  \
  } while (0)

bool comm_check(const Program *p, Diag *d) {
  const Graph *g = p->g;
  Arena *a = g->arena;
  int S = p->nv;
  int *recv_of = ARENA_ARRAY(a, int, g->ntensors + 1); // per tensor: 1 + the channel it is dst of
  int *mark = ARENA_ARRAY(a, int, (size_t)S + 1);      // per stage: 1 + id of a tensor sent there
  // Two channels of one tensor to one stage (each tensor's channels linked, stages stamped).
  int *head = ARENA_ARRAY(a, int, g->ntensors + 1), *next = ARENA_ARRAY(a, int, p->nch + 1);
  for (int i = p->nch - 1; i >= 0; i--) {
    if (!p->ch[i].t) continue; // reported below
    next[i] = head[p->ch[i].t->id];
    head[p->ch[i].t->id] = i + 1;
  }
  for (int i = 0; i < g->ntensors; i++)
    for (int c = head[i]; c; c = next[c - 1]) {
      int w = p->ch[c - 1].to_v;
      if (w < 0 || w >= S) continue; // reported below
      if (mark[w] == i + 1)
        COMM_ERR("comm: '%s' has more than one channel to stage v%d", g->tensors[i]->name, w);
      mark[w] = i + 1;
    }
  for (int i = 0; i < p->nch; i++) {
    const Channel *ch = &p->ch[i];
    const Node *pr = ch->t ? ch->t->producer : NULL;
    if (ch->id != i || !pr || ch->from_v < 0 || ch->from_v >= S || ch->to_v < 0 || ch->to_v >= S ||
        ch->from_v == ch->to_v || p->vstage_of_node[pr->id] != ch->from_v ||
        ch->grad != (pr->role != ROLE_FWD)) {
      diag_error(d, (Loc){0, 0},
                 "comm: channel c%d ('%s' v%d -> v%d) is not a cross-stage edge "
                 "from its producer's stage",
                 i, ch->t ? ch->t->name : "?", ch->from_v, ch->to_v);
      return false;
    }
    const Tensor *r = ch->dst;
    if (!r || r->kind != T_RECV || r->id < 0 || r->id >= g->ntensors || g->tensors[r->id] != r ||
        recv_of[r->id] || r->dtype != ch->t->dtype || !shape_eq(&r->shape, &ch->t->shape) ||
        r->nuses == 0) {
      diag_error(d, (Loc){0, 0},
                 "comm: channel c%d ('%s' v%d -> v%d) has no received tensor of its own with its "
                 "dtype and shape, read on v%d",
                 i, ch->t->name, ch->from_v, ch->to_v, ch->to_v);
      return false;
    }
    recv_of[r->id] = i + 1;
    for (int u = 0; u < r->nuses; u++) {
      const Node *n = r->uses[u].node;
      if (n->role == ROLE_STEP || p->vstage_of_node[n->id] != ch->to_v)
        COMM_ERR("comm: '%s' (received on v%d) is read by '%s' on stage v%d", r->name, ch->to_v,
                 n->name, p->vstage_of_node[n->id]);
    }
  }
  // No F/B/W node reads a tensor made on another stage, or one received for another stage.
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->role == ROLE_STEP) continue;
    int v = p->vstage_of_node[i];
    for (int k = 0; k < n->nin; k++) {
      const Tensor *t = n->in[k];
      if (t->kind == T_RECV) {
        if (!recv_of[t->id] || p->ch[recv_of[t->id] - 1].to_v != v)
          COMM_ERR("comm: '%s' on stage v%d reads '%s', not received for it", n->name, v, t->name);
      } else if (t->producer && p->vstage_of_node[t->producer->id] != v) {
        COMM_ERR("comm: '%s' is read on stage v%d (by '%s') but made on v%d: no channel brings it",
                 t->name, v, n->name, p->vstage_of_node[t->producer->id]);
      }
    }
  }
  for (int i = 0; i < g->ntensors; i++)
    if (g->tensors[i]->kind == T_RECV && !recv_of[i])
      COMM_ERR("comm: '%s' is a received tensor of no channel", g->tensors[i]->name);
  // Exchange groups: the use buffers are the inputs of the parameter's step-end sum.
  for (int i = 0; i < p->nex; i++) {
    const Exchange *e = &p->ex[i];
    const Tensor *gr = e->param->grad;
    const Node *sum = gr && gr->producer && gr->producer->role == ROLE_STEP ? gr->producer : NULL;
    bool ok = e->nbufs == (sum ? sum->nin : gr ? 1 : 0);
    for (int j = 0; j < e->nbufs && ok; j++)
      ok = e->bufs[j] == (sum ? sum->in[j] : gr) && e->bufs[j]->per_step && e->bufs[j]->producer &&
           e->buf_stage[j] == p->vstage_of_node[e->bufs[j]->producer->id];
    if (!ok)
      COMM_ERR("comm: exchange '%s': its use buffers are not those its sum reads", e->param->name);
  }
  return true;
}

void comm_print(const Program *p, FILE *out) {
  int nf = 0;
  for (int i = 0; i < p->nch; i++) nf += !p->ch[i].grad;
  fprintf(out, "channels of %s: %d (%d activations, %d gradients), %d exchange group%s\n",
          p->g->name, p->nch, nf, p->nch - nf, p->nex, p->nex == 1 ? "" : "s");
  for (int i = 0; i < p->nch; i++) {
    const Channel *ch = &p->ch[i];
    fprintf(out, "c%d '%s' v%d -> v%d as '%s' %lld B per microbatch %s\n", ch->id, ch->t->name,
            ch->from_v, ch->to_v, ch->dst ? ch->dst->name : "?", (long long)ch->bytes,
            ch->grad ? "grad" : "fwd");
  }
  for (int i = 0; i < p->nex; i++) {
    const Exchange *e = &p->ex[i];
    fprintf(out, "exchange '%s' stages", e->param->name);
    for (int j = 0; j < e->n; j++) fprintf(out, " v%d", e->stages[j]);
    fprintf(out, " (partial sums, in use order)\n");
    for (int j = 0; j < e->nbufs; j++)
      fprintf(out, "  use buffer '%s' v%d\n", e->bufs[j]->name, e->buf_stage[j]);
  }
}

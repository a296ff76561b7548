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
// Step-end nodes (a parameter's sum of its per-use gradients) are not channels: a parameter used
// on several stages is held by each, and its stages, in the order of its first forward use on
// each, form its exchange group. Model inputs and targets have no producer: each stage that
// uses one reads it locally. Per-stage marks are stamped with the tensor's id, so the walk is
// O(nodes + uses) plus O(uses x S) for the exchange groups.
#include <string.h>

#include "pipeline.h"

static const Tensor *owner(const Tensor *t) {
  return t->tied_to ? t->tied_to : t;
}

static int64_t channel_bytes(const Program *p, const Tensor *t) {
  return shape_numel(&t->shape, p->tc->mb_size) * (int64_t)dtype_size(t->dtype);
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
  for (int i = 0; i < g->ntensors; i++)
    if (nst[i] >= 2) p->ex[p->nex++] = (Exchange){g->tensors[i], st[i], nst[i]};
}

bool pass_comm(Graph *g, Program *p, Diag *d) {
  (void)d;
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
  build_exchanges(g, p);
  return true;
}

bool comm_check(const Program *p, Diag *d) {
  const Graph *g = p->g;
  Arena *a = g->arena;
  int S = p->nv;
  int *head = ARENA_ARRAY(a, int, g->ntensors + 1); // per tensor: 1 + its first channel, 0: none
  int *next = ARENA_ARRAY(a, int, p->nch + 1);      // per channel: 1 + the tensor's next one
  for (int i = p->nch - 1; i >= 0; i--) {
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
    next[i] = head[ch->t->id];
    head[ch->t->id] = i + 1;
  }
  int *need = ARENA_ARRAY(a, int, S + 1); // per stage: 1 + id of the tensor it reads
  int *have = ARENA_ARRAY(a, int, S + 1); // per stage: 1 + id of the tensor a channel brings
  for (int i = 0; i < g->ntensors; i++) {
    const Tensor *t = g->tensors[i];
    if (!t->producer) {
      if (head[i]) {
        diag_error(d, (Loc){0, 0}, "comm: '%s' has no producer but a channel", t->name);
        return false;
      }
      continue;
    }
    int v = p->vstage_of_node[t->producer->id];
    for (int j = 0; j < t->nuses; j++) {
      const Node *r = t->uses[j].node;
      int w = p->vstage_of_node[r->id];
      if (r->role != ROLE_STEP && w != v) need[w] = t->id + 1;
    }
    for (int c = head[i]; c; c = next[c - 1]) {
      int w = p->ch[c - 1].to_v;
      if (have[w] == t->id + 1 || need[w] != t->id + 1) {
        diag_error(d, (Loc){0, 0}, "comm: '%s' has %s channel to stage v%d", t->name,
                   have[w] == t->id + 1 ? "more than one" : "a needless", w);
        return false;
      }
      have[w] = t->id + 1;
    }
    for (int w = 0; w < S; w++)
      if (need[w] == t->id + 1 && have[w] != t->id + 1) {
        diag_error(d, (Loc){0, 0}, "comm: '%s' is read on stage v%d but has no channel to it",
                   t->name, w);
        return false;
      }
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
    fprintf(out, "c%d '%s' v%d -> v%d %lld B per microbatch %s\n", ch->id, ch->t->name, ch->from_v,
            ch->to_v, (long long)ch->bytes, ch->grad ? "grad" : "fwd");
  }
  for (int i = 0; i < p->nex; i++) {
    const Exchange *e = &p->ex[i];
    fprintf(out, "exchange '%s' stages", e->param->name);
    for (int j = 0; j < e->n; j++) fprintf(out, " v%d", e->stages[j]);
    fprintf(out, " (partial sums, in use order)\n");
  }
}

// buckets.c: the buckets of the replicas' gradient exchange (--replicas D; docs/pipeline.md,
// "Stage replication", and runtime/replicas.c, which sends them).
//
// Every parameter a rank trains is final after the last action of its list whose nodes write its
// gradient (a stage's last B, or its last W under zb-h1/zb-v, or its TIED_SUM for a parameter used
// in several places), and inside a B or W action after the last node of that action's segment
// that writes it. The parameters in the order their gradients become final (the actions in list
// order, the nodes in segment order, canonical within one node) make the buckets: a new bucket at
// each such action, at each layer (a node of another repeat-block instance than the bucket's, as
// segment.c groups them; the nodes outside any block count as one layer of their own), and within
// one layer after every REP_BUCKET_BYTES of gradients (a larger parameter is a bucket alone).
// A bucket of a B or W action is final after the node of its last parameter: the B_v / W_v
// function calls pr_replicas_ready(k) right after that node's kernel, guarded by rep_final, which
// train_step sets around that one action (the last microbatch's; the function runs for every
// microbatch of the step). A loop over repeat-block instances calls it with k = base + l * (the
// buckets of one instance): the buckets never span two instances, so that is exact. A TIED_SUM's
// buckets are sent right after the action (train_step). Parameters no action writes (none today)
// go in a last bucket, sent at the step end. The order of a bucket's parameters in the message
// does not change a sum (the replicas add element by element in replica order).
#include <stdlib.h>
#include <string.h>

#include "emit.h"

enum {
  REP_BUCKET_BYTES = 1 << 20 // the most gradient bytes of a bucket (1 MiB), unless one
                             // parameter alone is larger
};

// The segment of action x whose nodes make gradients (NULL: none).
static const Segment *act_segment(const Program *P, const Action *x) {
  if (x->v < 0) return NULL;
  const VStage *s = &P->vs[x->v];
  return x->kind == ACT_B          ? &s->b
         : x->kind == ACT_W        ? &s->w
         : x->kind == ACT_TIED_SUM ? &s->step
                                   : NULL;
}

// A trained parameter's place in the order its gradient becomes final.
typedef struct Final {
  int act;   // its last writing action (the rank's action count: none, the step end)
  int node;  // inside it, its last writing node's index in the segment (-1: after the action)
  int param; // its parameter-table index
} Final;

static int by_final(const void *pa, const void *pb) {
  const Final *a = pa, *b = pb;
  if (a->act != b->act) return a->act < b->act ? -1 : 1;
  if (a->node != b->node) return a->node < b->node ? -1 : 1;
  return (a->param > b->param) - (a->param < b->param);
}

// Whether two nodes belong to one layer (the same repeat-block instance, or both outside any).
static bool same_layer(const Node *a, const Node *b) {
  const char *ba, *bb;
  int ia, ib;
  segment_node_key(a, &ba, &ia);
  segment_node_key(b, &bb, &ib);
  if (!ba || !bb) return !ba && !bb;
  return !strcmp(ba, bb) && ia == ib;
}

const RepBuckets *rep_buckets(E *e) {
  const Graph *G = e->g;
  const RankProgram *rp = e->rp;
  const Program *P = e->prog;
  int np = G->nparams;
  int *of = ARENA_ARRAY(e->a, int, G->ntensors + 1); // per tensor id: the param whose gradient
  int *ready = ARENA_ARRAY(e->a, int, np + 1);       // per param: its last writing action
  int *at = ARENA_ARRAY(e->a, int, np + 1);          // per param: its last writing node there
  for (int i = 0; i < G->ntensors; i++) of[i] = -1;
  RepBuckets *b = ARENA_ARRAY(e->a, RepBuckets, 1);
  *b = (RepBuckets){.param = ARENA_ARRAY(e->a, int, np + 1),
                    .end = ARENA_ARRAY(e->a, int, np + 1),
                    .after = ARENA_ARRAY(e->a, int, np + 1),
                    .node = ARENA_ARRAY(e->a, int, np + 1),
                    .first = ARENA_ARRAY(e->a, int, G->nnodes + 1),
                    .count = ARENA_ARRAY(e->a, int, G->nnodes + 1)};
  for (int i = 0; i < G->nnodes; i++) b->first[i] = -1, b->count[i] = 0;
  for (int i = 0; i < np; i++) {
    const Tensor *t = G->params[i];
    ready[i] = -2; // not trained here
    at[i] = -1;
    if (t->tied_to || !t->grad || e->p->offset[t->grad->id] < 0) continue;
    ready[i] = -1;
    of[t->grad->id] = i;
  }
  for (int j = 0; j < rp->nacts; j++) {
    const Segment *sg = act_segment(P, &rp->acts[j]);
    for (int k = 0; sg && k < sg->n; k++)
      for (int o = 0; o < sg->nodes[k]->nout; o++) {
        int i = of[sg->nodes[k]->out[o]->id];
        if (i >= 0) ready[i] = j, at[i] = k;
      }
  }
  // Ascending by action (the step end's -1 last), then by node (a TIED_SUM's as one node: sent
  // after the action), canonical within one node.
  Final *ord = ARENA_ARRAY(e->a, Final, np + 1);
  int nord = 0;
  for (int i = 0; i < np; i++) {
    if (ready[i] == -2) continue;
    const Action *x = ready[i] >= 0 ? &rp->acts[ready[i]] : NULL;
    bool inside = x && x->kind != ACT_TIED_SUM; // sent from inside B_v / W_v
    ord[nord++] = (Final){ready[i] >= 0 ? ready[i] : rp->nacts, inside ? at[i] : -1, i};
  }
  qsort(ord, (size_t)nord, sizeof *ord, by_final);
  int64_t bytes = 0;
  const Node *layer = NULL; // the current bucket's layer (a node of it; NULL: after an action)
  for (int j = 0; j < nord; j++) {
    int i = ord[j].param, a = ready[i];
    const Node *n = ord[j].node >= 0 ? act_segment(P, &rp->acts[a])->nodes[ord[j].node] : NULL;
    int64_t nb = shape_numel(&G->params[i]->shape, e->tc->mb_size) * (int64_t)sizeof(float);
    bool fresh = b->nb == 0 || b->after[b->nb - 1] != a || (n && layer && !same_layer(n, layer)) ||
                 (bytes > 0 && bytes + nb > REP_BUCKET_BYTES);
    if (fresh) {
      b->after[b->nb] = a;
      b->nb++;
      bytes = 0;
      layer = n;
    }
    b->param[b->n++] = i;
    b->end[b->nb - 1] = b->n;
    b->node[b->nb - 1] = n ? n->id : -1;
    bytes += nb;
  }
  for (int k = 0; k < b->nb; k++) // per node: the buckets final after it (consecutive)
    if (b->node[k] >= 0) {
      if (b->first[b->node[k]] < 0) b->first[b->node[k]] = k;
      b->count[b->node[k]]++;
    }
  return b;
}

bool rep_final_action(const RepBuckets *b, int i) {
  for (int k = 0; b && k < b->nb; k++)
    if (b->after[k] == i && b->node[k] >= 0) return true;
  return false;
}

bool rep_any_inside(const RepBuckets *b) {
  for (int k = 0; b && k < b->nb; k++)
    if (b->node[k] >= 0) return true;
  return false;
}

void rep_emit_ready(E *e, const Node *n, const char *indent, int per) {
  const RepBuckets *b = e->rep;
  if (!b || b->count[n->id] == 0) return;
  for (int k = b->first[n->id]; k < b->first[n->id] + b->count[n->id]; k++)
    if (per)
      out(e, "%sif (rep_final) pr_replicas_ready(%d + l%s); // final: to the replicas\n", indent, k,
          per > 1 ? arena_printf(e->a, " * %d", per) : "");
    else
      out(e, "%sif (rep_final) pr_replicas_ready(%d); // final: to the replicas\n", indent, k);
}

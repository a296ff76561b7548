// Activation recomputation (--recompute all|none|STAGES; docs/pipeline.md): which stages rerun
// their forward before their backward, and what each of them keeps per microbatch.
//
// A recomputing stage keeps in its K slots only its boundary tensors (recompute_boundary): what
// it receives and loads, what it sends (until the send completes), and every output of the F
// nodes that make a sent tensor, the loss or a model output (the host reads those after F, and a
// rerun must never rewrite a buffer whose send may be in flight, so those nodes are not rerun).
// Everything else it makes is live within one action: its B_v first reruns the other F nodes
// whose outputs B needs (directly or through other rerun nodes; segment r, graph order) into the
// rank's one work area, then its B nodes. The kernels are
// deterministic, so the rerun writes the bits the first F wrote, and B reads exactly what it
// would have read: the results are bitwise those without recomputation. A recomputing stage
// keeps B and W fused (sched_lower: its W would need the forward again, or the B intermediates
// kept across actions). The memory plan (memplan.c) places the work area once per rank above the
// slots; its checker (plan_check.c) recomputes all of this independently.
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "recompute.h"

const char *recompute_parse(const char *arg, Arena *a, int **stages, int *n) {
  *stages = NULL;
  *n = 0;
  if (strcmp(arg, "all") == 0) {
    *n = RECOMPUTE_ALL;
    return NULL;
  }
  if (strcmp(arg, "none") == 0) return NULL;
  if (!*arg)
    return "--recompute: expected all, none or stage indices separated by commas (0,2), got an "
           "empty string";
  int cap = 1;
  for (const char *q = arg; *q; q++) cap += *q == ',';
  *stages = ARENA_ARRAY(a, int, cap);
  for (const char *q = arg;;) {
    size_t len = strcspn(q, ",");
    if (len == 0) return arena_printf(a, "--recompute: an empty stage index in '%s'", arg);
    long v = 0;
    for (size_t i = 0; i < len; i++) {
      if (q[i] < '0' || q[i] > '9' || v > 65535)
        return arena_printf(a,
                            "--recompute: expected all, none or stage indices separated by "
                            "commas (0,2), got '%s'",
                            arg);
      v = v * 10 + (q[i] - '0');
    }
    if (v > 65535)
      return arena_printf(a, "--recompute: stage %ld is out of range (at most 65535 stages)", v);
    (*stages)[(*n)++] = (int)v;
    if (!q[len]) break;
    q += len + 1;
  }
  return NULL;
}

bool recompute_flags(const int *stages, int n, int nv, Arena *a, bool **flags, int *bad) {
  *flags = NULL;
  if (n == 0) return true;
  *flags = ARENA_ARRAY(a, bool, nv + 1);
  for (int v = 0; v < nv; v++) (*flags)[v] = n == RECOMPUTE_ALL;
  for (int i = 0; i < n; i++) {
    if (stages[i] >= nv) {
      *bad = stages[i];
      return false;
    }
    (*flags)[stages[i]] = true;
  }
  return true;
}

// Whether F node nd of stage v makes a tensor the host or a send reads after F (it is not rerun).
static bool kept_node(const Program *p, int v, const Node *nd, const int *sent) {
  const Graph *g = p->g;
  for (int k = 0; k < nd->nout; k++) {
    const Tensor *t = nd->out[k];
    if (sent[t->id] == v + 1 || t == g->loss || graph_is_output(g, t)) return true;
  }
  return false;
}

bool recompute_boundary(const Program *p, int v, const Tensor *t, const int *sent) {
  if (t->kind == T_RECV || t->kind == T_INPUT) return true;
  if (t->kind != T_ACT || !t->producer) return false;
  if (t->producer->role != ROLE_FWD) return sent[t->id] == v + 1;
  return kept_node(p, v, t->producer, sent);
}

void recompute_apply(Program *p, const bool *flags, Arena *a) {
  const Graph *g = p->g;
  int *sent = ARENA_ARRAY(a, int, g->ntensors + 1);
  for (int c = 0; c < p->nch; c++) sent[p->ch[c].t->id] = p->ch[c].from_v + 1;
  for (int v = 0; v < p->nv; v++) {
    VStage *s = &p->vs[v];
    s->recompute = flags && flags[v];
    s->r = (Segment){NULL, 0};
    if (!s->recompute) continue;
    // What B reads, and backwards through the forward what the rerun nodes read: only the F
    // nodes whose outputs are needed that way are rerun (the rest would be wasted work).
    bool *need = ARENA_ARRAY(a, bool, g->ntensors + 1), *in_r = ARENA_ARRAY(a, bool, s->f.n + 1);
    for (int k = 0; k < s->b.n; k++)
      for (int e = 0; e < s->b.nodes[k]->nin; e++) need[s->b.nodes[k]->in[e]->id] = true;
    for (int k = s->f.n - 1; k >= 0; k--) {
      const Node *nd = s->f.nodes[k];
      if (kept_node(p, v, nd, sent)) continue;
      for (int o = 0; o < nd->nout && !in_r[k]; o++) in_r[k] = need[nd->out[o]->id];
      for (int e = 0; in_r[k] && e < nd->nin; e++) need[nd->in[e]->id] = true;
    }
    s->r.nodes = ARENA_ARRAY(a, Node *, s->f.n + 1);
    for (int k = 0; k < s->f.n; k++)
      if (in_r[k]) s->r.nodes[s->r.n++] = s->f.nodes[k];
  }
}

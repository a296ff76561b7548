// partition pass: cuts the differentiated graph into S stages (pipeline.h), its checker and its
// dump (the partition table).
//
// The cut is made on the forward order (the graph's topological order, nodes [0, nfwd)): every
// stage is a contiguous range of it, so every forward edge goes from a stage to the same or a
// later one. The candidates are the starts of units: a block instance (its consecutive nodes) or
// one node outside blocks; with more stages than units, every node. How the cut is chosen:
// - --split NAME,...: cut exactly before each named node or block instance (its label, e.g.
//   transformer.h.2, or BLOCK.INDEX), S = names + 1;
// - the model's `stage` hints (S > 1): each node on its stage, an unpinned node on the stage of
//   the node before it;
// - otherwise the automatic partitioner, an exact dynamic program over the units (partition_dp),
//   restricted to the units whose first node is marked `split_before` when any is.
// The backward graph follows: a B/W node sits with its forward node, the add_n summing an
// activation's gradient contributions with the activation's producer, a parameter's step-end sum
// with every stage that uses the parameter (each owner sums its own copy's uses).
//
// The cost model (docs/pipeline.md): a stage's time per microbatch is the FLOPs of its F, B and
// W nodes (the registry's OpCost at the microbatch size) / rate, plus the bytes of the
// cross-stage tensors it reads / bandwidth: each activation it receives from an earlier stage (a
// tensor read by several later stages is sent to each of them, never relayed) and the gradient
// contribution it sends back for it. Charging a transfer to the stage that reads it makes a
// stage's cost a function of its own range, which is what lets the dynamic program be exact;
// the dump prints the bytes each stage sends, counted on the sender. The memory estimate of stage
// r is its parameters' bytes (value, gradient, optimizer state; a parameter used on several
// stages counts on each) + its forward activations x the microbatches the schedule keeps in flight
// on it (sched_inflight: 1F1B's min(S - r, M) along the chain, zb-v's K): an estimate until
// per-rank memory plans exist.
//
// With --topology the bandwidth is the link's between the two ranks (CutProblem.stage_bw,
// Program.rank_bw): the dynamic program charges all of stage r's receives at the link from
// stage r - 1, the channel costs and the table each transfer at its own link.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ops.h"
#include "costs.h"
#include "cut.h"
#include "partition.h"
#include "pipeline.h"
#include "precision.h"
#include "recompute.h"
#include "schedule.h"
#include "simulate.h"

// ---- From the graph to units, and back

typedef struct Part {
  Graph *g;              // the differentiated graph
  const TrainConfig *tc; // microbatch size (costs), M, optimizer (state bytes)
  Diag *d;               // diagnostics
  Arena *a;              // the graph's arena (everything the Program keeps)
  int nf;                // forward nodes
  int *unit_of;          // per forward node: its unit
  int nunits;            // count
  int *unit_start;       // per unit: its first forward node (nunits + 1 entries)
  const char **label;    // per unit: block instance label or node name (--split)
  int *fstage;           // per forward node: its stage
  bool refined;          // the simulated step moved the dynamic program's cut (place_auto)
  int *inflight;         // per stage: the microbatches in flight its estimate counts
} Part;

// The units (cut.h's units_make) of the forward nodes into pt; every node when by_node.
static void make_units(Part *pt, bool by_node) {
  pt->nunits = units_make(pt->g, pt->nf, by_node, pt->a, &pt->unit_of, &pt->unit_start, &pt->label);
}

static double tensor_bytes(const Part *pt, const Tensor *t) {
  return (double)shape_numel(&t->shape, pt->tc->mb_size) * precision_elem_size(t);
}

static const Tensor *owner(const Tensor *t) {
  return t->tied_to ? t->tied_to : t;
}

// The automatic partitioner's problem over the units.
static void build_problem(Part *pt, const PartitionOptions *o, CutProblem *cp) {
  Graph *g = pt->g;
  Arena *a = pt->a;
  int n = pt->nunits;
  *cp = (CutProblem){.n = n,
                     .rate = o->flops_rate,
                     .bandwidth = o->bandwidth,
                     .mem_cap = (double)o->mem_cap,
                     .M = (int)pt->tc->microbatches};
  cp->flops = ARENA_ARRAY(a, double, n + 1);
  cp->act_bytes = ARENA_ARRAY(a, double, n + 1);
  if (pt->tc->precision != DT_F32) cp->conv_bytes = ARENA_ARRAY(a, double, n + 1);
  cp->uf = ARENA_ARRAY(a, double, n + 1);
  cp->ub = ARENA_ARRAY(a, double, n + 1);
  cp->uw = ARENA_ARRAY(a, double, n + 1);
  const Costs *cs = o->costs;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n0 = g->nodes[i], *f = unit_anchor(n0);
    if (!f) continue;
    OpCost c = {0, 0};
    n0->op->cost(n0, pt->tc->mb_size, &c);
    int u = pt->unit_of[f->id];
    // Seconds: measured (the costs file's share of this node), else FLOPs at the rate.
    double sec = cs ? cs->node_s[i] : c.flops / o->flops_rate;
    double *role = n0->role == ROLE_FWD ? cp->uf : n0->role == ROLE_BWD ? cp->ub : cp->uw;
    role[u] += sec;
    cp->flops[u] += cs ? sec * o->flops_rate : c.flops; // the program's FLOPs / rate = seconds
    if (n0->role == ROLE_FWD)
      for (int k = 0; k < n0->nout; k++)
        cp->act_bytes[pt->unit_of[i]] += tensor_bytes(pt, n0->out[k]);
    if (cp->conv_bytes) { // the plan's conversion area: the largest call of the rank's nodes
      double cb = (double)precision_conv_bytes(n0, pt->tc->mb_size);
      if (cb > cp->conv_bytes[u]) cp->conv_bytes[u] = cb;
    }
  }
  // Which activations get a gradient (some gradient tensor is one of theirs).
  bool *has_grad = ARENA_ARRAY(a, bool, g->ntensors + 1);
  for (int i = 0; i < g->ntensors; i++)
    if (g->tensors[i]->grad_of) has_grad[g->tensors[i]->grad_of->id] = true;
  // Tensors made by a forward node and read by a forward node of another unit.
  cp->t = ARENA_ARRAY(a, CutTensor, g->ntensors + 1);
  for (int i = 0; i < pt->nf; i++) {
    const Node *m = g->nodes[i];
    for (int k = 0; k < m->nout; k++) {
      const Tensor *t = m->out[k];
      CutTensor *x = &cp->t[cp->nt];
      *x = (CutTensor){
          .from = pt->unit_of[i], .bytes = tensor_bytes(pt, t), .grad = has_grad[t->id]};
      x->to = ARENA_ARRAY(a, int, t->nuses + 1);
      for (int j = 0; j < t->nuses; j++) {
        const Node *c = t->uses[j].node;
        if (c->role != ROLE_FWD) continue;
        int u = pt->unit_of[c->id];
        if (u != x->from && (x->nto == 0 || x->to[x->nto - 1] != u)) x->to[x->nto++] = u;
      }
      if (x->nto) cp->nt++;
    }
  }
  // Parameters: value + gradient + optimizer state, on every unit that reads them.
  int slots = pt->tc->opt == OPT_ADAMW ? 2 : 1;
  if (cs) {
    cp->bandwidth = cs->bandwidth;
    cp->latency = cs->latency;
    cp->opt_per_byte = cs->opt_per_byte / (2 + slots); // CutParam.bytes counts 2 + slots copies
  }
  int *pindex = ARENA_ARRAY(a, int, g->ntensors + 1);
  cp->p = ARENA_ARRAY(a, CutParam, g->nparams + 1);
  for (int i = 0; i < g->nparams; i++) {
    const Tensor *p = g->params[i];
    pindex[p->id] = -1;
    if (p->tied_to) continue;
    pindex[p->id] = cp->np;
    CutParam *q = &cp->p[cp->np++];
    q->bytes =
        (double)shape_numel(&p->shape, pt->tc->mb_size) * precision_param_elem_size(p, slots);
  }
  int *uses = ARENA_ARRAY(a, int, cp->np + 1); // forward reads of each: bounds its unit list
  for (int i = 0; i < pt->nf; i++)
    for (int j = 0; j < g->nodes[i]->nin; j++) {
      const Tensor *t = g->nodes[i]->in[j];
      if (t->kind == T_PARAM && pindex[owner(t)->id] >= 0) uses[pindex[owner(t)->id]]++;
    }
  for (int q = 0; q < cp->np; q++) cp->p[q].units = ARENA_ARRAY(a, int, uses[q] + 1);
  for (int i = 0; i < pt->nf; i++) {
    const Node *m = g->nodes[i];
    for (int j = 0; j < m->nin; j++) {
      if (m->in[j]->kind != T_PARAM) continue;
      int q = pindex[owner(m->in[j])->id];
      if (q < 0) continue;
      CutParam *x = &cp->p[q];
      int u = pt->unit_of[i];
      if (x->nunits == 0 || x->units[x->nunits - 1] != u) x->units[x->nunits++] = u;
    }
  }
}

// Index of the unit or forward node --split names: a unit's label, BLOCK.INDEX, a node name, or
// a module's name (a prefix of node names up to a '.': "layers.4" starts at the first forward node
// named "layers.4.*", as an imported .pt2's nodes are named after their modules, and torchtitan's
// module_fqns_per_model_part cuts). Returns the forward node a stage starts at, or -1.
static int find_cut(Part *pt, const char *name) {
  for (int u = 0; u < pt->nunits; u++)
    if (strcmp(pt->label[u], name) == 0) return pt->unit_start[u];
  for (int i = 0; i < pt->nf; i++) {
    const Node *n = pt->g->nodes[i];
    if (strcmp(n->name, name) == 0) return i;
    if (n->block && (i == 0 || pt->unit_of[i - 1] != pt->unit_of[i])) {
      const char *bi = arena_printf(pt->a, "%s.%d", n->block, n->instance);
      if (strcmp(bi, name) == 0) return i;
    }
  }
  size_t len = strlen(name);
  for (int i = 0; i < pt->nf; i++) {
    const char *nm = pt->g->nodes[i]->name;
    if (strncmp(nm, name, len) == 0 && nm[len] == '.') return i;
  }
  return -1;
}

static bool place_split(Part *pt, const PartitionOptions *o, int S) {
  int *cut = ARENA_ARRAY(pt->a, int, o->nsplit + 1);
  for (int k = 0; k < o->nsplit; k++) {
    cut[k] = find_cut(pt, o->split[k]);
    if (cut[k] < 0) {
      diag_error(pt->d, (Loc){0, 0},
                 "--split: the model has no node, block instance or module named '%s'",
                 o->split[k]);
      return false;
    }
    if (cut[k] == 0) {
      diag_error(pt->d, (Loc){0, 0},
                 "--split: '%s' is the first node; a cut before it leaves stage 0 empty",
                 o->split[k]);
      return false;
    }
    if (k && cut[k] <= cut[k - 1]) {
      diag_error(pt->d, (Loc){0, 0},
                 "--split: '%s' %s '%s'; name the cuts once each, in the model's order",
                 o->split[k], cut[k] == cut[k - 1] ? "is the same cut as" : "comes before",
                 o->split[k - 1]);
      return false;
    }
  }
  for (int i = 0, s = 0; i < pt->nf; i++) {
    while (s < S - 1 && cut[s] <= i) s++;
    pt->fstage[i] = s;
  }
  return true;
}

static bool place_hints(Part *pt, int S) {
  Graph *g = pt->g;
  int cur = 0;
  for (int i = 0; i < pt->nf; i++) {
    const Node *n = g->nodes[i];
    if (n->stage >= S) {
      node_error(pt->d, n, "stage %d, but there are %d stages (--stages %d: 0 to %d)", n->stage, S,
                 S, S - 1);
      return false;
    }
    if (n->stage >= 0) cur = n->stage;
    pt->fstage[i] = cur;
  }
  // Non-decreasing along every edge: a node cannot run before a stage that feeds it.
  for (int i = 0; i < pt->nf; i++) {
    const Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++) {
      const Node *p = n->in[j]->producer;
      if (p && p->role == ROLE_FWD && pt->fstage[p->id] > pt->fstage[i]) {
        node_error(pt->d, n,
                   "on stage %d, but its input '%s' is made on stage %d (stages only go "
                   "forward along the model)",
                   pt->fstage[i], n->in[j]->name, pt->fstage[p->id]);
        return false;
      }
    }
  }
  // Every stage with a node (a stage left empty has nothing to run: hints 0 only, or 0 and 2).
  bool *used = ARENA_ARRAY(pt->a, bool, S);
  for (int i = 0; i < pt->nf; i++) used[pt->fstage[i]] = true;
  for (int s = 0; s < S; s++)
    if (!used[s]) {
      diag_error(pt->d, (Loc){0, 0},
                 "--stages %d: the stage hints leave stage %d without a node (each of the %d "
                 "stages needs one; a node without a hint runs on the stage of the node before it)",
                 S, s, S);
      return false;
    }
  return true;
}

static bool place_auto(Part *pt, const PartitionOptions *o, int S) {
  Graph *g = pt->g;
  bool marks = false;
  for (int i = 0; i < pt->nf; i++) marks |= g->nodes[i]->split_before;
  if (!marks && pt->nunits < S) make_units(pt, true);
  CutProblem cp;
  build_problem(pt, o, &cp);
  // The schedule's microbatches in flight per stage (pass_partition).
  cp.inflight = pt->inflight;
  bool *rcf = NULL; // --recompute (its indices checked against S on the command line)
  int bad;
  if (recompute_flags(o->recomp, o->nrecomp, S, pt->a, &rcf, &bad)) cp.recomp = rcf;
  if (o->rank_bw) { // --topology: stage r receives over the link from stage r - 1's rank
    double *sbw = ARENA_ARRAY(pt->a, double, S);
    int nr = o->nranks;
    sbw[0] = o->bandwidth;
    for (int r = 1; r < S; r++) sbw[r] = o->rank_bw[((r - 1) % nr) * nr + r % nr];
    cp.stage_bw = sbw;
  }
  bool *ok = NULL;
  int nok = 1;
  if (marks) {
    ok = ARENA_ARRAY(pt->a, bool, pt->nunits + 1);
    for (int u = 0; u < pt->nunits; u++) {
      ok[u] = u == 0 || g->nodes[pt->unit_start[u]]->split_before;
      nok += u > 0 && ok[u];
    }
    cp.cut_ok = ok;
  }
  if ((marks ? nok : cp.n) < S) {
    diag_error(pt->d, (Loc){0, 0}, "--stages %d: the model has only %d places to start a stage%s",
               S, marks ? nok : cp.n, marks ? " (the first node and the split_before marks)" : "");
    return false;
  }
  Arena scratch;
  arena_init(&scratch);
  int *starts = ARENA_ARRAY(pt->a, int, S + 1);
  double best = partition_dp(&cp, S, starts, &scratch);
  arena_free(&scratch);
  // With measured costs (--costs), the schedule's simulated step: keep the cut that shortens it.
  // Without, the registry's estimate keeps the dynamic program's cut (its step would weigh
  // guessed transfers against guessed FLOPs).
  if (best < INFINITY && o->costs) {
    int V = o->virt > 1 ? o->virt : 1, *ref = ARENA_ARRAY(pt->a, int, S + 1);
    for (int v = 0; v < S; v++) ref[v] = starts[v];
    int *pin = ARENA_ARRAY(pt->a, int, S / V + 1); // the ranks' sharing of the profiled cores
    cp.slots = costs_rank_cores(o->costs, S / V, pin);
    cp.pin = pin[0] >= 0 ? pin : NULL, cp.npin = S / V;
    cp.stolen = o->costs->nstolen == S / V ? o->costs->stolen : NULL;
    double dp = partition_simulate(&cp, o->sched, S / V, V, starts);
    double t = S % V == 0 ? partition_refine(&cp, o->sched, S / V, V, ref) : INFINITY;
    if (t < dp * (1 - 1e-9)) {
      starts = ref;
      pt->refined = true;
    }
  }
  if (best == INFINITY) {
    diag_error(pt->d, (Loc){0, 0},
               "--mem-cap %lld: no cut into %d stages keeps every stage's estimated memory under "
               "the cap",
               (long long)o->mem_cap, S);
    return false;
  }
  for (int i = 0, s = 0; i < pt->nf; i++) {
    while (s + 1 < S && pt->unit_start[starts[s + 1]] <= i) s++;
    pt->fstage[i] = s;
  }
  return true;
}

static void seg_push(Segment *s, Node *n) {
  s->nodes[s->n++] = n;
}

bool pass_partition(Graph *g, const TrainConfig *tc, const PartitionOptions *o, Program *p,
                    Diag *d) {
  Arena *a = g->arena;
  Part pt = {.g = g, .tc = tc, .d = d, .a = a, .nf = g->nfwd};
  int S = o->stages ? o->stages : o->nsplit ? o->nsplit + 1 : 1;
  *p = (Program){0};
  p->g = g;
  p->tc = tc;
  p->M = (int)tc->microbatches;
  p->part_rate = o->flops_rate;
  p->part_bandwidth = o->bandwidth;
  p->rank_bw = o->rank_bw, p->rank_device = o->rank_device, p->nrank_bw = o->nranks;
  p->costs = o->costs;
  if (o->nsplit && S != o->nsplit + 1) {
    diag_error(d, (Loc){0, 0}, "--split names %d cut%s, which make %d stages, but --stages is %d",
               o->nsplit, o->nsplit == 1 ? "" : "s", o->nsplit + 1, S);
    return false;
  }
  if (S > pt.nf) {
    diag_error(d, (Loc){0, 0}, "--stages %d: the model has only %d forward nodes", S, pt.nf);
    return false;
  }
  // The microbatches in flight the memory estimates count, per stage: the schedule's.
  int V = o->est_sched == SCHED_ZBV ? 2 : o->virt > 1 ? o->virt : 1; // (a CSV's: po.virt 1)
  pt.inflight = p->part_inflight = ARENA_ARRAY(a, int, S + 1);
  for (int v = 0; v < S; v++)
    pt.inflight[v] = S % V == 0 ? sched_inflight((SchedKind)o->est_sched, S / V, V, p->M, v)
                                : (S - v < p->M ? S - v : p->M);
  pt.fstage = ARENA_ARRAY(a, int, pt.nf + 1);
  make_units(&pt, false);
  bool hints = false;
  for (int i = 0; i < pt.nf; i++) hints |= g->nodes[i]->stage >= 0;
  bool ok = true;
  if (S == 1)
    p->part_how = "one stage";
  else if (o->nsplit)
    p->part_how = "--split", ok = place_split(&pt, o, S);
  else if (hints)
    p->part_how = "stage hints", ok = place_hints(&pt, S);
  else
    p->part_how = "automatic", ok = place_auto(&pt, o, S);
  if (!ok) return false;
  if (pt.refined) p->part_how = "automatic, moved for the simulated step";
  // Every node on a stage: forward nodes as placed, the rest after their anchor.
  p->nv = p->nranks = S;
  p->vstage_of_node = ARENA_ARRAY(a, int, g->nnodes + 1);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i], *f = unit_anchor(n);
    if (f) {
      p->vstage_of_node[i] = pt.fstage[f->id];
      continue;
    }
    int v = S; // a step-end sum: the first stage among its inputs' producers
    for (int j = 0; j < n->nin; j++) {
      const Node *q = n->in[j]->producer;
      if (q && q->id < i && p->vstage_of_node[q->id] < v) v = p->vstage_of_node[q->id];
    }
    p->vstage_of_node[i] = v < S ? v : 0;
  }
  p->vs = ARENA_ARRAY(a, VStage, S);
  int *nf = ARENA_ARRAY(a, int, S), *nb = ARENA_ARRAY(a, int, S), *nst = ARENA_ARRAY(a, int, S);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    int v = p->vstage_of_node[i];
    if (n->role == ROLE_FWD)
      nf[v]++;
    else if (n->role == ROLE_STEP) // an upper bound: on each of its inputs' stages at most once
      for (int j = 0; j < n->nin; j++) {
        const Node *q = n->in[j]->producer;
        nst[q ? p->vstage_of_node[q->id] : v]++;
      }
    else
      nb[v]++;
  }
  for (int v = 0; v < S; v++) {
    VStage *s = &p->vs[v];
    int K = S - v < p->M ? S - v : p->M;
    *s = (VStage){.v = v, .rank = v, .K = K};
    s->f.nodes = ARENA_ARRAY(a, Node *, nf[v] + 1);
    s->b.nodes = ARENA_ARRAY(a, Node *, nb[v] + 1);
    s->w.nodes = ARENA_ARRAY(a, Node *, 1);
    s->step.nodes = ARENA_ARRAY(a, Node *, nst[v] + 1);
  }
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    int v = p->vstage_of_node[i];
    VStage *s = &p->vs[v];
    if (n->role == ROLE_FWD)
      seg_push(&s->f, n);
    else if (n->role != ROLE_STEP)
      seg_push(&s->b, n); // B and W nodes in graph order (the schedule decides a split)
    else {                // on every stage that holds one of the uses it sums, once each
      int mark = -1;
      for (int j = 0; j < n->nin; j++) {
        const Node *q = n->in[j]->producer;
        int w = q ? p->vstage_of_node[q->id] : v;
        if (w != mark && (p->vs[w].step.n == 0 || p->vs[w].step.nodes[p->vs[w].step.n - 1] != n))
          seg_push(&p->vs[w].step, n);
        mark = w;
      }
    }
    for (int j = 0; j < n->nin; j++) {
      const Tensor *t = n->in[j];
      if (t->kind == T_INPUT) s->loads = true;
    }
    for (int k = 0; k < n->nout; k++)
      if (n->out[k] == g->loss) s->has_loss = true;
  }
  // Each stage's parameters, in canonical order: an owner is listed on every stage with a
  // forward use of it or of a parameter tied to it.
  int *tied_next = ARENA_ARRAY(a, int, (size_t)g->ntensors + 1),
      *tied_head = ARENA_ARRAY(a, int, (size_t)g->ntensors + 1);
  for (int i = 0; i < g->ntensors; i++) tied_head[i] = -1;
  for (int i = g->nparams - 1; i >= 0; i--) {
    const Tensor *q = g->params[i];
    if (!q->tied_to) continue;
    tied_next[q->id] = tied_head[q->tied_to->id];
    tied_head[q->tied_to->id] = q->id;
  }
  // Two passes: count each stage's parameters, then list them.
  int *listed = ARENA_ARRAY(a, int, S); // per stage: 1 + the canonical index last listed
  for (int pass = 0; pass < 2; pass++) {
    for (int v = 0; v < S; v++) {
      listed[v] = 0;
      if (pass) p->vs[v].params = ARENA_ARRAY(a, Tensor *, p->vs[v].nparams + 1);
      p->vs[v].nparams = 0;
    }
    for (int i = 0; i < g->nparams; i++) {
      Tensor *q = g->params[i];
      if (q->tied_to || !q->grad) continue;
      for (int id = q->id; id >= 0; id = id == q->id ? tied_head[q->id] : tied_next[id]) {
        const Tensor *t = g->tensors[id];
        for (int j = 0; j < t->nuses; j++) {
          const Node *n = t->uses[j].node;
          if (n->role != ROLE_FWD) continue;
          int v = p->vstage_of_node[n->id];
          if (listed[v] == i + 1) continue;
          listed[v] = i + 1;
          VStage *s = &p->vs[v];
          if (pass) s->params[s->nparams] = q;
          s->nparams++;
        }
      }
    }
  }
  return true;
}

// ---- Checker

bool partition_check(const Program *p, Diag *d) {
  const Graph *g = p->g;
  if (p->nv < 1 || p->nv > g->nfwd) {
    diag_error(d, (Loc){0, 0}, "partition: %d stages for %d forward nodes", p->nv, g->nfwd);
    return false;
  }
  int placed = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    int v = p->vstage_of_node[i];
    if (v < 0 || v >= p->nv) {
      diag_error(d, (Loc){0, 0}, "partition: node '%s' on stage %d of %d", n->name, v, p->nv);
      return false;
    }
    if (n->fwd && v != p->vstage_of_node[n->fwd->id]) {
      diag_error(d, (Loc){0, 0}, "partition: node '%s' on stage %d, its forward node '%s' on %d",
                 n->name, v, n->fwd->name, p->vstage_of_node[n->fwd->id]);
      return false;
    }
    if (n->role != ROLE_FWD) continue;
    for (int j = 0; j < n->nin; j++) {
      const Node *q = n->in[j]->producer;
      if (q && q->role == ROLE_FWD && p->vstage_of_node[q->id] > v) {
        diag_error(d, (Loc){0, 0}, "partition: edge '%s' goes back from stage %d to stage %d",
                   n->in[j]->name, p->vstage_of_node[q->id], v);
        return false;
      }
    }
  }
  for (int v = 0; v < p->nv; v++) {
    const VStage *s = &p->vs[v];
    if (s->f.n == 0) {
      diag_error(d, (Loc){0, 0}, "partition: stage %d has no forward node", v);
      return false;
    }
    const Segment *segs[2] = {&s->f, &s->b};
    for (int k = 0; k < 2; k++)
      for (int i = 0; i < segs[k]->n; i++) {
        const Node *n = segs[k]->nodes[i];
        if (p->vstage_of_node[n->id] != v || (i && segs[k]->nodes[i - 1]->id >= n->id)) {
          diag_error(d, (Loc){0, 0}, "partition: stage %d's segment holds '%s' out of place", v,
                     n->name);
          return false;
        }
      }
    placed += s->f.n + s->b.n;
  }
  int nstep = 0;
  for (int i = 0; i < g->nnodes; i++) nstep += g->nodes[i]->role == ROLE_STEP;
  if (placed + nstep != g->nnodes) {
    diag_error(d, (Loc){0, 0}, "partition: the segments hold %d of %d F/B/W nodes", placed,
               g->nnodes - nstep);
    return false;
  }
  return true;
}

// ---- Dump

static const char *human(char *buf, size_t cap, double v, const char *unit) {
  static const char *const si[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (v >= 1000 && i < 5) v /= 1000, i++;
  snprintf(buf, cap, i ? "%.2f %s%s" : "%.0f %s%s", v, si[i], unit);
  return buf;
}

// The stage's forward nodes, a block instance as its label and a run of instances P.i, P.i+1,
// ... as P.i..j.
static void print_nodes(const Program *p, const VStage *s, FILE *out) {
  const Graph *g = p->g;
  const char *run_prefix = NULL; // the open run's label prefix ("transformer.h")
  int run_lo = 0, run_hi = 0, items = 0;
  const Node *prev = NULL;
  fputs("  nodes    ", out);
  for (int i = 0; i <= s->f.n; i++) {
    const Node *n = i < s->f.n ? s->f.nodes[i] : NULL;
    if (n && prev && n->block && prev->block == n->block && prev->instance == n->instance) {
      continue; // the same instance
    }
    prev = n;
    // This item: an instance label "X.k" (k its instance number) or a node name.
    const char *lab = NULL;
    int k = -1;
    size_t plen = 0;
    if (n && n->block) {
      int end = i + 1;
      while (end < s->f.n && s->f.nodes[end]->block == n->block &&
             s->f.nodes[end]->instance == n->instance)
        end++;
      lab = unit_label(s->f.nodes + i, end - i, g->arena);
      const char *dot = strrchr(lab, '.');
      if (dot && dot[1] >= '0' && dot[1] <= '9' && atoi(dot + 1) == n->instance)
        k = n->instance, plen = (size_t)(dot - lab);
    }
    bool extends = run_prefix && lab && k >= 0 && k == run_hi + 1 && strlen(run_prefix) == plen &&
                   strncmp(run_prefix, lab, plen) == 0;
    if (extends) {
      run_hi = k;
      continue;
    }
    if (run_prefix) { // close the open run
      if (run_hi > run_lo)
        fprintf(out, "%s%s.%d..%d", items++ ? ", " : " ", run_prefix, run_lo, run_hi);
      else
        fprintf(out, "%s%s.%d", items++ ? ", " : " ", run_prefix, run_lo);
      run_prefix = NULL;
    }
    if (!n) break;
    if (k >= 0) {
      run_prefix = arena_printf(g->arena, "%.*s", (int)plen, lab);
      run_lo = run_hi = k;
    } else
      fprintf(out, "%s%s", items++ ? ", " : " ", lab ? lab : n->name);
  }
  fputc('\n', out);
}

// FLOPs per microbatch of each stage's nodes by role: fbw[3v] forward, fbw[3v + 1] input
// gradient, fbw[3v + 2] weight gradient (the registry's OpCost at the microbatch size; step-end
// nodes, run once per step, not counted). The partition table and the predicted step time count the
// same.
static void stage_flops(const Program *p, double *fbw) {
  const Graph *g = p->g;
  for (int k = 0; k < 3 * p->nv; k++) fbw[k] = 0;
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    if (n->role == ROLE_STEP) continue;
    OpCost c = {0, 0};
    n->op->cost(n, p->tc->mb_size, &c);
    fbw[3 * p->vstage_of_node[i] + (n->role == ROLE_FWD   ? 0
                                    : n->role == ROLE_BWD ? 1
                                                          : 2)] += c.flops;
  }
}

void partition_stage_costs(const Program *p, StageCost *cost, double *flops) {
  Arena scratch;
  arena_init(&scratch);
  double *fbw = ARENA_ARRAY(&scratch, double, 3 * p->nv);
  stage_flops(p, fbw);
  for (int v = 0; v < p->nv; v++) {
    // W: the nodes of its segment (empty unsplit); B: the rest of the backward.
    double w = 0;
    for (int i = 0; i < p->vs[v].w.n; i++) {
      OpCost c = {0, 0};
      p->vs[v].w.nodes[i]->op->cost(p->vs[v].w.nodes[i], p->tc->mb_size, &c);
      w += c.flops;
    }
    cost[v] = (StageCost){.f = fbw[3 * v] / p->part_rate,
                          .b = (fbw[3 * v + 1] + fbw[3 * v + 2] - w) / p->part_rate,
                          .w = w / p->part_rate};
    if (flops) flops[v] = fbw[3 * v] + fbw[3 * v + 1] + fbw[3 * v + 2];
  }
  for (int i = 0; i < p->nch; i++) {
    const Channel *c = &p->ch[i];
    double t = (double)c->bytes / program_link_bw(p, c->from_v, c->to_v);
    if (c->grad)
      cost[c->to_v].b += t;
    else
      cost[c->to_v].f += t;
  }
  arena_free(&scratch);
}

double program_link_bw(const Program *p, int from_v, int to_v) {
  if (!p->rank_bw) return p->part_bandwidth;
  int n = p->nrank_bw, a = p->vs[from_v].rank % n, b = p->vs[to_v].rank % n;
  return p->rank_bw[a * n + b];
}

// The stages other than v whose forward nodes read t, in first-use order, into out (count
// returned); once the comm pass ran, the reads of t's received copies (its channels' dst) count
// as reads of t. chs: per tensor id 1 + its first channel, next: per channel 1 + the next one of
// its tensor (NULL before the comm pass). mark: S entries, cleared here.
static int fwd_readers(const Program *p, const Tensor *t, int v, const int *chs, const int *next,
                       int *mark, int *out) {
  int S = p->nv, n = 0;
  for (int w = 0; w < S; w++) mark[w] = 0;
  const Tensor *x = t;
  for (int c = chs ? chs[t->id] : 0;; c = next[c - 1]) {
    for (int j = 0; x && j < x->nuses; j++) {
      const Node *c2 = x->uses[j].node;
      int w = p->vstage_of_node[c2->id];
      if (c2->role != ROLE_FWD || w == v || mark[w]) continue;
      mark[w] = 1;
      out[n++] = w;
    }
    if (!c) break;
    x = p->ch[c - 1].dst; // the next channel's received copy
  }
  return n;
}

void partition_print(const Program *p, FILE *out) {
  const Graph *g = p->g;
  Arena *a = g->arena;
  int S = p->nv;
  int64_t mb = p->tc->mb_size;
  fprintf(out, "partition of %s: %d stage%s (%s), microbatch of %lld rows, M %d\n", g->name, S,
          S == 1 ? "" : "s", p->part_how, (long long)mb, p->M);
  if (p->costs) // measured seconds (costs.h) in the time lines
    fprintf(out, "cost model: measured (%s), transfers %.1f us + bytes at %.3g GB/s\n",
            p->costs->path, p->costs->latency * 1e6, p->costs->bandwidth / 1e9);
  else if (p->rank_bw)
    fprintf(out, "cost model: FLOPs at %g GFLOP/s, transfers at the --topology links (per rank)\n",
            p->part_rate / 1e9);
  else
    fprintf(out, "cost model: FLOPs at %g GFLOP/s, transfers at %g GB/s (per rank)\n",
            p->part_rate / 1e9, p->part_bandwidth / 1e9);
  double *flops = ARENA_ARRAY(a, double, S), *act = ARENA_ARRAY(a, double, S),
         *sent = ARENA_ARRAY(a, double, S), *gsent = ARENA_ARRAY(a, double, S),
         *recv = ARENA_ARRAY(a, double, S), *pbytes = ARENA_ARRAY(a, double, S),
         *recv_s = ARENA_ARRAY(a, double, S),  // --topology: seconds of what each stage receives
             *bnd = ARENA_ARRAY(a, double, S); // --recompute: bytes received and sent on
  int *mark = ARENA_ARRAY(a, int, S), *rd = ARENA_ARRAY(a, int, S), *chs = NULL, *next = NULL;
  if (p->nch > 0) { // after the comm pass: each tensor's channels
    chs = ARENA_ARRAY(a, int, g->ntensors + 1);
    next = ARENA_ARRAY(a, int, p->nch + 1);
    for (int c = p->nch - 1; c >= 0; c--)
      next[c] = chs[p->ch[c].t->id], chs[p->ch[c].t->id] = c + 1;
  }
  bool *has_grad = ARENA_ARRAY(a, bool, g->ntensors + 1);
  for (int i = 0; i < g->ntensors; i++)
    if (g->tensors[i]->grad_of) has_grad[g->tensors[i]->grad_of->id] = true;
  double *fbw = ARENA_ARRAY(a, double, 3 * S);
  stage_flops(p, fbw);
  for (int v = 0; v < S; v++) flops[v] = fbw[3 * v] + fbw[3 * v + 1] + fbw[3 * v + 2];
  for (int i = 0; i < g->nfwd; i++) {
    const Node *n = g->nodes[i];
    int v = p->vstage_of_node[i];
    if (n->role != ROLE_FWD) continue;
    for (int k = 0; k < n->nout; k++) {
      const Tensor *t = n->out[k];
      double bytes = (double)shape_numel(&t->shape, mb) * precision_elem_size(t);
      act[v] += bytes;
      int nr = fwd_readers(p, t, v, chs, next, mark, rd);
      if (nr) bnd[v] += bytes; // kept until sent
      for (int j = 0; j < nr; j++) {
        int w = rd[j];
        bnd[v] += has_grad[t->id] ? bytes : 0;       // each reader's gradient back
        bnd[w] += bytes * (has_grad[t->id] ? 2 : 1); // received, its gradient sent back
        sent[v] += bytes;                            // sent to each consuming stage
        recv[w] += bytes * (has_grad[t->id] ? 2 : 1);
        if (p->rank_bw) recv_s[w] += bytes * (has_grad[t->id] ? 2 : 1) / program_link_bw(p, v, w);
        if (has_grad[t->id]) gsent[w] += bytes; // its gradient contribution comes back
      }
    }
  }
  // --precision: each stage's conversion area (the largest call of its nodes), as the plan's.
  double *conv = ARENA_ARRAY(a, double, S);
  for (int i = 0; p->tc->precision != DT_F32 && i < g->nnodes; i++) {
    double c = (double)precision_conv_bytes(g->nodes[i], mb);
    int v = p->vstage_of_node[i];
    if (v >= 0 && v < S && c > conv[v]) conv[v] = c;
  }
  int slots = p->tc->opt == OPT_ADAMW ? 2 : 1;
  for (int v = 0; v < S; v++)
    for (int k = 0; k < p->vs[v].nparams; k++) {
      const Tensor *q = p->vs[v].params[k];
      pbytes[v] += (double)shape_numel(&q->shape, 1) * precision_param_elem_size(q, slots);
    }
  char b1[64];
  for (int v = 0; v < S; v++) {
    const VStage *s = &p->vs[v];
    fprintf(out, "stage %d (rank %d)\n", v, s->rank);
    print_nodes(p, s, out);
    fprintf(out, "  params    %d:", s->nparams);
    for (int k = 0; k < s->nparams; k++) fprintf(out, " %s", s->params[k]->name);
    fprintf(out, "\n  flops     %s per microbatch (F, B, W)\n",
            human(b1, sizeof b1, flops[v], "FLOP"));
    fprintf(out, "  acts      %s per microbatch (forward outputs)\n",
            human(b1, sizeof b1, act[v], "B"));
    fprintf(out, "  sends     %s activations", human(b1, sizeof b1, sent[v], "B"));
    fprintf(out, ", %s gradients per microbatch\n", human(b1, sizeof b1, gsent[v], "B"));
    int inflight = p->part_inflight ? p->part_inflight[v] : S - v < p->M ? S - v : p->M;
    char b2[64], b3[96] = "";
    if (conv[v] > 0) // --precision
      snprintf(b3, sizeof b3, "; conversion area %s", human(b2, sizeof b2, conv[v], "B"));
    if (s->recompute) // --recompute: the boundary per microbatch in flight, the acts once
      fprintf(out,
              "  memory    %s estimated (params, grads, optimizer state; recompute: acts once + "
              "boundary %s x %d in flight%s)\n",
              human(b1, sizeof b1, pbytes[v] + act[v] + bnd[v] * inflight + conv[v], "B"),
              human(b2, sizeof b2, bnd[v], "B"), inflight, b3);
    else
      fprintf(out,
              "  memory    %s estimated (params, grads, optimizer state; acts x %d in flight%s)\n",
              human(b1, sizeof b1, pbytes[v] + act[v] * inflight + conv[v], "B"), inflight, b3);
    double sec = flops[v] / p->part_rate + (p->rank_bw ? recv_s[v] : recv[v] / p->part_bandwidth);
    if (p->costs) { // its nodes' measured seconds, its received messages at the measured link
      sec = recv[v] > 0 ? p->costs->latency + recv[v] / p->costs->bandwidth : 0;
      const Segment *sg[3] = {&s->f, &s->b, &s->w};
      for (int k = 0; k < 3; k++)
        for (int i = 0; i < sg[k]->n; i++) sec += p->costs->node_s[sg[k]->nodes[i]->id];
    }
    fprintf(out, "  time      %.3f ms per microbatch predicted\n", 1e3 * sec);
  }
  // The tensors that cross, each with its consuming stages.
  for (int i = 0; i < g->nfwd; i++) {
    const Node *n = g->nodes[i];
    int v = p->vstage_of_node[i];
    for (int k = 0; k < n->nout; k++) {
      const Tensor *t = n->out[k];
      int nr = fwd_readers(p, t, v, chs, next, mark, rd);
      if (nr) fprintf(out, "send '%s' %s stage %d ->", t->name, fmt_shape(g, &t->shape), v);
      for (int j = 0; j < nr; j++) fprintf(out, " %d", rd[j]);
      if (nr) fputc('\n', out);
    }
  }
}

// costs.c: the costs file (costs.h): reading and checking it, binding it to a graph's nodes,
// the stage costs the simulator uses, and `pipec profile`'s conversion of a program's
// measurement into one.
//
// Why per unit and not per stage: a stage's measured seconds hold only for the partition it was
// measured with, and the partitioner tries others. The units (block instances, nodes outside
// blocks) are what it moves, so a unit's F, B and W seconds carry over to any cut; within the
// profiled stage they are its measured seconds shared by the registry's roofline estimate
// (FLOPs and bytes both count: an embedding or a layer norm moves bytes, a GEMM computes), the
// one assumption. The link is latency + bytes / bandwidth (a ping-pong fit), the optimizer
// linear in parameter bytes (AdamW and SGD stream over them).
#include "costs.h"
#include "simulate.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ops.h"
#include "../ir/strmap.h"
#include "cut.h"
#include "files.h"
#include "json.h"

enum { ROOF_GFLOPS = 50, ROOF_GBYTES = 10 }; // the roofline weights of costs_weight

double costs_weight(const Node *n, int64_t mb) {
  OpCost c = {0, 0};
  n->op->cost(n, mb, &c);
  return c.flops / (ROOF_GFLOPS * 1e9) + c.bytes / (ROOF_GBYTES * 1e9);
}

// A number in [lo, hi] at it (lo > 0: a positive one), else an error naming path: first for
// a negative (lo > 0: not positive) number or none at all, then for one outside the range, which
// is no measurement (seconds past MAX_SECONDS, a bandwidth below 1 byte per second: they would
// overflow the simulator's sums to infinity, which the partitioner reads as "nothing fits").
#define MAX_SECONDS 1e6
static bool want_seconds(const JsonIn *j, const cJSON *it, const char *path, double lo, double hi,
                         const char *what, double *out) {
  char num[64];
  if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < 0 ||
      (lo > 0 && !(it->valuedouble > 0))) {
    diag_error(j->d, json_loc(j, it), "%s: expected a %s number (%s), got %s", path,
               lo > 0 ? "positive" : "non-negative", what,
               cJSON_IsNumber(it) ? source_number_str(j->src, it, num, sizeof num) : json_type(it));
    return false;
  }
  if (it->valuedouble < lo || it->valuedouble > hi) {
    bool low = it->valuedouble < lo;
    diag_error(j->d, json_loc(j, it), "%s: %s %s is no measurement (expected %s %g)", path,
               source_number_str(j->src, it, num, sizeof num), what, low ? "at least" : "at most",
               low ? lo : hi);
    return false;
  }
  *out = it->valuedouble;
  return true;
}

bool costs_load(Costs *c, const char *path, Arena *a, Diag *d) {
  *c = (Costs){.path = path};
  Source *src = arena_alloc(a, sizeof *src);
  memset(src, 0, sizeof *src);
  c->src = src;
  if (!source_load_file(src, a, path, "the costs file", d)) return false;
  JsonIn j = {src, d, a};
  const cJSON *root = src->root, *it;
  static const char *const top[] = {"pipec_costs", "model", "measured", "link",
                                    "optimizer",   "units", "machine"};
  if (!json_check_keys(&j, root, "costs", top, 7)) return false;
  int64_t version;
  if (!json_need(&j, root, "costs", "pipec_costs", &it) ||
      !json_want_int(&j, it, "pipec_costs", &version))
    return false;
  if (version != 1) {
    diag_error(d, json_loc(&j, it), "pipec_costs: version %lld, this pipec reads version 1",
               (long long)version);
    return false;
  }
  c->model = "";
  if ((it = json_get(root, "model")) && !json_want_string(&j, it, "model", &c->model)) return false;
  const cJSON *link;
  if (!json_need(&j, root, "costs", "link", &link)) return false;
  static const char *const lk[] = {"latency", "bandwidth"};
  if (!json_check_keys(&j, link, "link", lk, 2)) return false;
  if (!json_need(&j, link, "link", "latency", &it) ||
      !want_seconds(&j, it, "link.latency", 0, MAX_SECONDS, "seconds", &c->latency))
    return false;
  if (!json_need(&j, link, "link", "bandwidth", &it) ||
      !want_seconds(&j, it, "link.bandwidth", 1, INFINITY, "bytes per second", &c->bandwidth))
    return false;
  if (!json_need(&j, root, "costs", "optimizer", &it) ||
      !want_seconds(&j, it, "optimizer", 0, 1, "seconds per parameter byte", &c->opt_per_byte))
    return false;
  // Optional: the machine the ranks shared when measured (fewer cores than ranks: they queue).
  const cJSON *mach = json_get(root, "machine");
  c->cores = c->threads = c->concurrent = 0;
  if (mach) {
    static const char *const mk[] = {"cores", "threads", "bound", "stolen"};
    int64_t cores, threads;
    if (!json_check_keys(&j, mach, "machine", mk, 4) ||
        !json_need(&j, mach, "machine", "cores", &it) ||
        !json_want_int(&j, it, "machine.cores", &cores))
      return false;
    if (cores < 1 || cores > 1 << 20) {
      diag_error(d, json_loc(&j, it), "machine.cores: %lld; expected a count of cores, 1 or more",
                 (long long)cores);
      return false;
    }
    if (!json_need(&j, mach, "machine", "threads", &it) ||
        !json_want_int(&j, it, "machine.threads", &threads))
      return false;
    if (threads < 1 || threads > 1 << 20) {
      diag_error(d, json_loc(&j, it),
                 "machine.threads: %lld; expected each rank's thread count, 1 or more",
                 (long long)threads);
      return false;
    }
    c->cores = (int)cores, c->threads = (int)threads;
    c->concurrent = cores / threads > 1 ? (int)(cores / threads) : 1;
    // Optional: the CPU each rank was bound to (mpirun --bind-to core), in rank order.
    c->bound = NULL, c->nbound = 0;
    const cJSON *bl = json_get(mach, "bound");
    if (bl) {
      if (!json_want_array(&j, bl, "machine.bound")) return false;
      c->nbound = cJSON_GetArraySize(bl);
      c->bound = ARENA_ARRAY(a, int, (size_t)c->nbound + 1);
      int r = 0;
      for (const cJSON *x = bl->child; x; x = x->next, r++) {
        int64_t cpu;
        if (!json_want_int(&j, x, "machine.bound[]", &cpu)) return false;
        if (cpu < 0 || cpu >= 1 << 20) {
          diag_error(d, json_loc(&j, x),
                     "machine.bound[%d]: %lld; expected the CPU rank %d was bound to, 0 or more", r,
                     (long long)cpu, r);
          return false;
        }
        c->bound[r] = (int)cpu;
      }
    }
    // Optional: per rank the seconds per step its core lost inside its ranks' actions.
    c->stolen = NULL, c->nstolen = 0;
    const cJSON *sl = json_get(mach, "stolen");
    if (sl) {
      if (!json_want_array(&j, sl, "machine.stolen")) return false;
      c->nstolen = cJSON_GetArraySize(sl);
      c->stolen = ARENA_ARRAY(a, double, (size_t)c->nstolen + 1);
      int r = 0;
      for (const cJSON *x = sl->child; x; x = x->next, r++)
        if (!want_seconds(&j, x, arena_printf(a, "machine.stolen[%d]", r), 0, MAX_SECONDS,
                          "seconds", &c->stolen[r]))
          return false;
    }
  }
  const cJSON *units;
  if (!json_need(&j, root, "costs", "units", &units) || !json_want_array(&j, units, "units"))
    return false;
  c->nu = cJSON_GetArraySize(units);
  c->u = ARENA_ARRAY(a, UnitCost, c->nu + 1);
  // Each name once (costs_bind would take one of a unit's two entries, silently): seen maps a name
  // to 1 + its unit's index, names[k] is unit k's name item (the first one's place).
  const cJSON **names = ARENA_ARRAY(a, const cJSON *, c->nu + 1);
  StrMap seen;
  strmap_init(&seen, a);
  int k = 0;
  for (const cJSON *u = units->child; u; u = u->next, k++) {
    const char *p = arena_printf(a, "units[%d]", k);
    static const char *const uk[] = {"name", "f", "b", "w"};
    if (!json_check_keys(&j, u, p, uk, 4)) return false;
    UnitCost *x = &c->u[k];
    const char *kinds[3] = {"f", "b", "w"};
    double *dst[3] = {&x->f, &x->b, &x->w};
    if (!json_need(&j, u, p, "name", &it) ||
        !json_want_string(&j, it, arena_printf(a, "%s.name", p), &x->name))
      return false;
    names[k] = it;
    intptr_t first = (intptr_t)strmap_put(&seen, x->name, (void *)(intptr_t)(k + 1)) - 1;
    if (first >= 0) {
      Loc at = json_loc(&j, names[first]);
      diag_error(d, json_loc(&j, it),
                 "%s.name: unit '%s' is listed twice (first at line %d, column %d: units[%d])", p,
                 x->name, at.line, at.col, (int)first);
      return false;
    }
    for (int q = 0; q < 3; q++)
      if (!json_need(&j, u, p, kinds[q], &it) ||
          !want_seconds(&j, it, arena_printf(a, "%s.%s", p, kinds[q]), 0, MAX_SECONDS, "seconds",
                        dst[q]))
        return false;
  }
  return true;
}

void costs_free(Costs *c) {
  if (c->src) source_free(c->src);
  c->src = NULL;
}

bool costs_bind(Costs *c, Graph *g, const TrainConfig *tc, Diag *d) {
  int *unit = ARENA_ARRAY(g->arena, int, g->nnodes + 1);
  const char **label;
  int n = partition_units(g, unit, &label);
  int *idx = ARENA_ARRAY(g->arena, int, n + 1); // per graph unit: its entry in c->u
  for (int u = 0, at = 0; u < n; u++) {
    int found = -1;
    for (int t = 0; t < c->nu && found < 0; t++) { // forward order on both sides: from the last
      int q = (at + t) % c->nu;
      if (strcmp(c->u[q].name, label[u]) == 0) found = q;
    }
    if (found < 0) {
      diag_error(d, (Loc){0, 0},
                 "has no unit '%s' of model '%s'%s: run pipec profile on this model", label[u],
                 g->name,
                 *c->model ? arena_printf(g->arena, " (it was measured on '%s')", c->model) : "");
      return false;
    }
    idx[u] = found;
    at = found + 1;
  }
  // Each unit's seconds of a role shared by its nodes of that role, by weight.
  double *sum = ARENA_ARRAY(g->arena, double, 3 * (size_t)n + 3);
  int *cnt = ARENA_ARRAY(g->arena, int, 3 * (size_t)n + 3);
  double *wt = ARENA_ARRAY(g->arena, double, g->nnodes + 1);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *x = g->nodes[i];
    if (unit[i] < 0 || x->role == ROLE_STEP) continue;
    int r = x->role == ROLE_FWD ? 0 : x->role == ROLE_BWD ? 1 : 2;
    wt[i] = costs_weight(x, tc->mb_size);
    sum[3 * unit[i] + r] += wt[i];
    cnt[3 * unit[i] + r]++;
  }
  c->node_s = ARENA_ARRAY(g->arena, double, g->nnodes + 1);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *x = g->nodes[i];
    if (unit[i] < 0 || x->role == ROLE_STEP) continue;
    int r = x->role == ROLE_FWD ? 0 : x->role == ROLE_BWD ? 1 : 2, k = 3 * unit[i] + r;
    const UnitCost *uc = &c->u[idx[unit[i]]];
    double s = r == 0 ? uc->f : r == 1 ? uc->b : uc->w;
    c->node_s[i] = sum[k] > 0 ? s * wt[i] / sum[k] : s / cnt[k];
  }
  return true;
}

static double seg_seconds(const Costs *c, const Segment *s) {
  double t = 0;
  for (int i = 0; i < s->n; i++) t += c->node_s[s->nodes[i]->id];
  return t;
}

static double param_bytes(const Tensor *q) {
  return (double)shape_numel(&q->shape, 1) * dtype_size(q->dtype);
}

int costs_rank_cores(const Costs *c, int nranks, int *pin) {
  pin[0] = -1;
  if (c->bound && c->nbound == nranks) { // each rank on its own CPU: a queue per CPU
    int slots = 0;
    for (int r = 0; r < nranks; r++) {
      int q = 0;
      while (q < r && c->bound[q] != c->bound[r]) q++;
      pin[r] = q < r ? pin[q] : slots++;
    }
    if (slots < nranks) return slots;
    pin[0] = -1;
    return 0;
  }
  return c->concurrent > 0 && c->concurrent < nranks ? c->concurrent : 0;
}

void costs_stage_costs(const Costs *c, const Program *p, StageCost *cost, double *xfer,
                       double *opt) {
  for (int r = 0; r < p->nranks; r++) opt[r] = 0;
  for (int v = 0; v < p->nv; v++) {
    const VStage *s = &p->vs[v];
    cost[v] = (StageCost){seg_seconds(c, &s->f), seg_seconds(c, &s->b), seg_seconds(c, &s->w)};
    for (int k = 0; k < s->nparams; k++)
      opt[s->rank] += param_bytes(s->params[k]) * c->opt_per_byte;
  }
  for (int i = 0; i < p->nch; i++) {
    const Channel *ch = &p->ch[i];
    bool local = p->vs[ch->from_v].rank == p->vs[ch->to_v].rank;
    xfer[i] = local ? 0 : c->latency + (double)ch->bytes / c->bandwidth;
  }
  // The step end's messages, which every rank waits for before its optimizer: each tied
  // parameter's gradient partial sums between its holders' ranks (one transfer of its bytes,
  // both ways at once), then the loss and norm all-gather (a latency).
  double ex = p->nranks > 1 ? c->latency : 0;
  for (int i = 0; i < p->nex; i++) {
    const Exchange *e = &p->ex[i];
    bool remote = false;
    for (int k = 1; k < e->n; k++) remote |= p->vs[e->stages[k]].rank != p->vs[e->stages[0]].rank;
    if (remote) ex += c->latency + param_bytes(e->param) / c->bandwidth;
  }
  for (int r = 0; r < p->nranks; r++) opt[r] += ex;
}

// ---- pipec profile

static bool raw_num(const cJSON *o, const char *key, double *out) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble)) return false;
  *out = it->valuedouble;
  return true;
}

// Shares T seconds over the segment's nodes by weight (node_s).
static void share(const Segment *s, double T, int64_t mb, double *node_s) {
  double sum = 0;
  for (int i = 0; i < s->n; i++) sum += costs_weight(s->nodes[i], mb);
  for (int i = 0; i < s->n; i++)
    node_s[s->nodes[i]->id] = sum > 0 ? T * costs_weight(s->nodes[i], mb) / sum : T / s->n;
}

bool costs_from_profile(const Program *p, const char *sched, const char *raw_path, const char *out,
                        int *unbound, Diag *d) {
  *unbound = 0;
  Graph *g = p->g;
  Arena *a = g->arena;
  FILE *f = fopen(raw_path, "rb");
  if (!f) {
    diag_error(d, (Loc){0, 0}, "the profiled program wrote no '%s': %s", raw_path, strerror(errno));
    return false;
  }
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  char buf[1 << 14];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, k, m);
  fclose(f);
  fclose(m);
  cJSON *raw = cJSON_Parse(text);
  free(text);
  const cJSON *stages = raw ? cJSON_GetObjectItemCaseSensitive(raw, "stages") : NULL;
  const cJSON *optv = raw ? cJSON_GetObjectItemCaseSensitive(raw, "opt") : NULL;
  double lat = 0, bw = 0;
  if (!cJSON_IsArray(stages) || !cJSON_IsArray(optv) || !raw_num(raw, "latency", &lat) ||
      !raw_num(raw, "bandwidth", &bw) || !(bw > 0)) {
    diag_error(d, (Loc){0, 0},
               "'%s': not a profile of the program (stages, opt, latency, bandwidth)", raw_path);
    cJSON_Delete(raw);
    return false;
  }
  int64_t mb = p->tc->mb_size;
  // Where the ranks shared cores with one thread each, an action's clock time holds the time
  // its core ran another rank, which the simulator's shared-cores replay adds again: the costs
  // are then the actions' CPU seconds (with more threads per rank the calling thread's CPU time
  // is not the action's; those keep the clock).
  double cores = 0, threads = 0;
  bool have_machine = raw_num(raw, "cores", &cores) && raw_num(raw, "threads", &threads) &&
                      cores >= 1 && threads >= 1;
  bool cpu = have_machine && threads == 1 && p->nranks > cores;
  const char *ck[3] = {"f_cpu", "b_cpu", "w_cpu"};
  for (const cJSON *s = stages->child; s && cpu; s = s->next) {
    double x;
    for (int q = 0; q < 3; q++) cpu = cpu && raw_num(s, ck[q], &x); // an older program's profile
  }
  // meas: the seconds the units get (per stage F, B, W); wall, cpus: both clocks for the record.
  double *meas = ARENA_ARRAY(a, double, 3 * (size_t)p->nv + 3);
  double *wall = ARENA_ARRAY(a, double, 3 * (size_t)p->nv + 3);
  double *cpus = ARENA_ARRAY(a, double, 3 * (size_t)p->nv + 3);
  bool *seen = ARENA_ARRAY(a, bool, p->nv + 1);
  for (const cJSON *s = stages->child; s; s = s->next) {
    double v, x[3], y[3] = {-1, -1, -1};
    if (!raw_num(s, "v", &v) || v < 0 || v >= p->nv || !raw_num(s, "f", &x[0]) ||
        !raw_num(s, "b", &x[1]) || !raw_num(s, "w", &x[2]))
      continue;
    for (int q = 0; q < 3; q++) {
      raw_num(s, ck[q], &y[q]);
      wall[3 * (int)v + q] = x[q], cpus[3 * (int)v + q] = y[q];
      meas[3 * (int)v + q] = cpu ? y[q] : x[q];
    }
    seen[(int)v] = true;
  }
  for (int v = 0; v < p->nv; v++)
    if (!seen[v]) { // (the file is pipec profile's own: say what the run lacked)
      diag_error(d, (Loc){0, 0},
                 "the profiled run timed no action of stage %d: it needs --steps 1 or more after "
                 "its warm-up step (PROGRAM-OPTIONS after --)",
                 v);
      cJSON_Delete(raw);
      return false;
    }
  double opt_s = 0, pbytes = 0;
  for (const cJSON *o = optv->child; o; o = o->next)
    if (cJSON_IsNumber(o) && o->valuedouble > 0) opt_s += o->valuedouble;
  double *node_s = ARENA_ARRAY(a, double, g->nnodes + 1);
  for (int v = 0; v < p->nv; v++) {
    const VStage *s = &p->vs[v];
    share(&s->f, meas[3 * v], mb, node_s);
    share(&s->b, meas[3 * v + 1], mb, node_s);
    share(&s->w, meas[3 * v + 2], mb, node_s);
    for (int q = 0; q < s->nparams; q++) pbytes += param_bytes(s->params[q]);
  }
  int *unit = ARENA_ARRAY(a, int, g->nnodes + 1);
  const char **label;
  int n = partition_units(g, unit, &label);
  double *us = ARENA_ARRAY(a, double, 3 * (size_t)n + 3);
  for (int i = 0; i < g->nnodes; i++) {
    const Node *x = g->nodes[i];
    if (unit[i] < 0 || x->role == ROLE_STEP) continue;
    us[3 * unit[i] + (x->role == ROLE_FWD ? 0 : x->role == ROLE_BWD ? 1 : 2)] += node_s[i];
  }
  char *doc = NULL;
  size_t dlen = 0;
  FILE *o = open_memstream(&doc, &dlen);
  fprintf(o, "{\n  \"pipec_costs\": 1,\n  \"model\": ");
  cJSON *jn = cJSON_CreateString(g->name);
  char *name = cJSON_PrintUnformatted(jn); // escaped
  cJSON_Delete(jn);
  fprintf(o, "%s,\n", name);
  free(name);
  fprintf(o,
          "  \"measured\": {\"stages\": %d, \"schedule\": \"%s\", \"microbatch\": %lld, "
          "\"microbatches\": %d, \"clock\": \"%s\", \"stage\": [",
          p->nranks, sched, (long long)mb, p->M, cpu ? "cpu" : "wall");
  for (int v = 0; v < p->nv; v++) {
    const double *x = wall + 3 * v, *y = cpus + 3 * v;
    fprintf(o, "%s{\"f\": %.9g, \"b\": %.9g, \"w\": %.9g", v ? ", " : "", x[0], x[1], x[2]);
    if (y[0] >= 0 && y[1] >= 0 && y[2] >= 0)
      fprintf(o, ", \"f_cpu\": %.9g, \"b_cpu\": %.9g, \"w_cpu\": %.9g", y[0], y[1], y[2]);
    fprintf(o, "}");
  }
  fprintf(o, "], \"opt\": [");
  int r = 0;
  for (const cJSON *x = optv->child; x; x = x->next, r++)
    fprintf(o, "%s%.9g", r ? ", " : "", cJSON_IsNumber(x) ? x->valuedouble : 0);
  fprintf(o, "], \"step\": [");
  const cJSON *stepv = cJSON_GetObjectItemCaseSensitive(raw, "step");
  r = 0;
  for (const cJSON *x = cJSON_IsArray(stepv) ? stepv->child : NULL; x; x = x->next, r++)
    fprintf(o, "%s%.9g", r ? ", " : "", cJSON_IsNumber(x) ? x->valuedouble : 0);
  fprintf(o, "]},\n  \"link\": {\"latency\": %.9g, \"bandwidth\": %.9g},\n", lat, bw);
  if (have_machine) {
    fprintf(o, "  \"machine\": {\"cores\": %.0f, \"threads\": %.0f", cores, threads);
    // Every rank bound to one CPU (else the simulator pools the cores).
    const cJSON *bl = cJSON_GetObjectItemCaseSensitive(raw, "bound"), *x;
    bool all = cJSON_IsArray(bl) && cJSON_GetArraySize(bl) == p->nranks;
    for (x = all ? bl->child : NULL; x; x = x->next)
      all = all && cJSON_IsNumber(x) && x->valuedouble >= 0;
    if (all) {
      fprintf(o, ", \"bound\": [");
      r = 0;
      cJSON_ArrayForEach(x, bl) fprintf(o, "%s%.0f", r++ ? ", " : "", x->valuedouble);
      fprintf(o, "]");
    }
    // Measured in CPU seconds: per rank the seconds per step its core lost inside its ranks'
    // actions (a partner polling for messages, the kernel's switches; profile.c).
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(raw, "stolen");
    bool sto = cpu && all && cJSON_IsArray(sv) && cJSON_GetArraySize(sv) == p->nranks;
    for (x = sto ? sv->child : NULL; x; x = x->next)
      sto = sto && cJSON_IsNumber(x) && x->valuedouble >= 0;
    *unbound = cpu && !all ? (int)cores : 0;
    if (sto) {
      fprintf(o, ", \"stolen\": [");
      r = 0;
      cJSON_ArrayForEach(x, sv) fprintf(o, "%s%.9g", r++ ? ", " : "", x->valuedouble);
      fprintf(o, "]");
    }
    fprintf(o, "},\n");
  }
  fprintf(o, "  \"optimizer\": %.9g,\n  \"units\": [\n", pbytes > 0 ? opt_s / pbytes : 0);
  for (int u = 0; u < n; u++) {
    cJSON *js = cJSON_CreateString(label[u]);
    char *lab = cJSON_PrintUnformatted(js);
    cJSON_Delete(js);
    fprintf(o, "    {\"name\": %s, \"f\": %.9g, \"b\": %.9g, \"w\": %.9g}%s\n", lab, us[3 * u],
            us[3 * u + 1], us[3 * u + 2], u + 1 < n ? "," : "");
    free(lab);
  }
  fprintf(o, "  ]\n}\n");
  fclose(o);
  cJSON_Delete(raw);
  bool ok = write_file_atomic(out, doc, dlen, d);
  free(doc);
  return ok;
}

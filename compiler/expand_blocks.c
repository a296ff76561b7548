// expand_blocks.c: blocks and repeats for the expand pass. A block (inputs, outputs, params,
// nodes) is checked and kept as JSON; a repeat entry instantiates it count times from `start`,
// substituting "{i}" in its names, binding instance 0's formal inputs to the repeat's inputs and
// instance k+1's to instance k's outputs, spreading per-instance stages, and publishing the last
// instance's outputs under the repeat's output names.
#include <string.h>

#include "expand.h"

bool ex_parse_blocks(X *x, const cJSON *root) {
  const cJSON *arr = json_get(root, "blocks");
  if (!arr) return true;
  if (!json_want_array(&x->j, arr, "blocks")) return false;
  static const char *const keys[] = {"name", "inputs", "outputs", "params", "nodes"};
  int i = 0;
  for (const cJSON *c = arr->child; c; c = c->next, i++) {
    const char *path = ex_path_idx(x, "blocks", i);
    BlockDef *b = ARENA_NEW(x->j.a, BlockDef);
    const cJSON *nm;
    b->obj = c;
    b->path = path;
    if (!json_check_keys(&x->j, c, path, keys, 5) || !json_need(&x->j, c, path, "name", &nm) ||
        !json_want_string(&x->j, nm, ex_pathk(x, path, "name"), &b->name) ||
        !json_need(&x->j, c, path, "inputs", &b->inputs) ||
        !json_want_array(&x->j, b->inputs, ex_pathk(x, path, "inputs")) ||
        !json_need(&x->j, c, path, "outputs", &b->outputs) ||
        !json_want_array(&x->j, b->outputs, ex_pathk(x, path, "outputs")) ||
        !json_need(&x->j, c, path, "nodes", &b->nodes) ||
        !json_want_array(&x->j, b->nodes, ex_pathk(x, path, "nodes")))
      return false;
    b->params = json_get(c, "params");
    b->nin = cJSON_GetArraySize(b->inputs);
    int nout = cJSON_GetArraySize(b->outputs);
    if (b->nin < 1 || nout != b->nin) {
      diag_error(x->j.d, json_loc(&x->j, b->outputs),
                 "%s: block '%s' has %d inputs and %d outputs; instance k+1 reads instance k's "
                 "outputs, so the "
                 "counts must be equal and at least 1",
                 path, json_shown(x->j.a, b->name), b->nin, nout);
      return false;
    }
    int k = 0;
    for (const cJSON *e = b->inputs->child; e; e = e->next, k++) {
      const char *fp = ex_path_idx(x, ex_pathk(x, path, "inputs"), k), *s;
      if (!json_want_string(&x->j, e, fp, &s) || !ex_check_name(x, e, fp, s, false)) return false;
    }
    k = 0;
    for (const cJSON *e = b->outputs->child; e; e = e->next, k++) {
      const char *s;
      if (!json_want_string(&x->j, e, ex_path_idx(x, ex_pathk(x, path, "outputs"), k), &s))
        return false;
    }
    if (strmap_put(&x->blocks, b->name, b)) {
      diag_error(x->j.d, json_loc(&x->j, nm), "%s: duplicate block name '%s'", path,
                 json_shown(x->j.a, b->name));
      return false;
    }
  }
  return true;
}

// The global name a block-local reference denotes in instance inst.
const char *ex_block_ref(X *x, const Spec *s, const cJSON *it, const char *path, const char *ref) {
  int k = 0;
  for (const cJSON *f = s->blk->inputs->child; f; f = f->next, k++)
    if (strcmp(f->valuestring, ref) == 0) return s->actuals[k];
  return ex_subst(x, it, path, ref, s->inst);
}

bool ex_repeat(X *x, const cJSON *c, const char *path) {
  static const char *const keys[] = {"repeat", "count",        "inputs", "outputs",
                                     "start",  "split_before", "stage"};
  const cJSON *rj, *cj, *ins, *outs;
  const char *bname;
  if (!json_check_keys(&x->j, c, path, keys, 7) ||
      !json_want_string(&x->j, rj = json_get(c, "repeat"), ex_pathk(x, path, "repeat"), &bname) ||
      !json_need(&x->j, c, path, "count", &cj) || !json_need(&x->j, c, path, "inputs", &ins) ||
      !json_want_array(&x->j, ins, ex_pathk(x, path, "inputs")) ||
      !json_need(&x->j, c, path, "outputs", &outs) ||
      !json_want_array(&x->j, outs, ex_pathk(x, path, "outputs")))
    return false;
  const BlockDef *b = strmap_get(&x->blocks, bname);
  if (!b) {
    diag_error(x->j.d, json_loc(&x->j, rj), "%s: unknown block '%s'", path,
               json_shown(x->j.a, bname));
    return false;
  }
  int64_t count = 0, start = 0;
  if (cJSON_IsString(cj)) {
    char err[512];
    Dim dd;
    if (!ex_eval_expr(x, cj->valuestring, &dd, err, sizeof err)) {
      diag_error(x->j.d, json_loc(&x->j, cj), "%s.count: %s", path, err);
      return false;
    }
    count = dd.b ? -1 : dd.n;
  } else if (!json_want_int(&x->j, cj, ex_pathk(x, path, "count"), &count)) {
    return false;
  }
  if (count < 1 || count > MAX_REPEAT) {
    diag_error(x->j.d, json_loc(&x->j, cj), "%s.count: repeat count must be from 1 to %d, got %lld",
               path, MAX_REPEAT, (long long)count);
    return false;
  }
  const cJSON *sj = json_get(c, "start");
  if (sj && !json_want_int(&x->j, sj, ex_pathk(x, path, "start"), &start)) return false;
  if (start < 0 || start > MAX_REPEAT) {
    diag_error(x->j.d, json_loc(&x->j, sj), "%s.start: must be from 0 to %d, got %lld", path,
               MAX_REPEAT, (long long)start);
    return false;
  }
  if (cJSON_GetArraySize(ins) != b->nin || cJSON_GetArraySize(outs) != b->nin) {
    diag_error(x->j.d, json_loc(&x->j, c),
               "%s: block '%s' has %d inputs and %d outputs, the repeat gives %d and %d", path,
               json_shown(x->j.a, b->name), b->nin, b->nin, cJSON_GetArraySize(ins),
               cJSON_GetArraySize(outs));
    return false;
  }
  const cJSON *stage = json_get(c, "stage"), *sb = json_get(c, "split_before");
  bool split = false;
  if (sb && !json_want_bool(&x->j, sb, ex_pathk(x, path, "split_before"), &split)) return false;
  if (stage && (!json_want_array(&x->j, stage, ex_pathk(x, path, "stage")) ||
                cJSON_GetArraySize(stage) != count)) {
    if (cJSON_IsArray(stage))
      diag_error(x->j.d, json_loc(&x->j, stage),
                 "%s.stage: needs one stage per instance (%lld), got %d", path, (long long)count,
                 cJSON_GetArraySize(stage));
    return false;
  }
  const char **prev = ARENA_ARRAY(x->j.a, const char *, b->nin);
  int k = 0;
  for (const cJSON *e = ins->child; e; e = e->next, k++)
    if (!json_want_string(&x->j, e, ex_path_idx(x, ex_pathk(x, path, "inputs"), k), &prev[k]))
      return false;
  const cJSON *st = stage ? stage->child : NULL;
  for (int64_t inst = start; inst < start + count; inst++, st = st ? st->next : NULL) {
    int stg = -1;
    if (st) {
      int64_t v;
      if (!json_want_int(&x->j, st, ex_path_idx(x, ex_pathk(x, path, "stage"), (int)(inst - start)),
                         &v))
        return false;
      if (v < 0 || v > 65535) {
        diag_error(x->j.d, json_loc(&x->j, st), "%s.stage: stages are from 0 to 65535, got %lld",
                   path, (long long)v);
        return false;
      }
      stg = (int)v;
    }
    if (!ex_parse_params(x, b->params, ex_pathk(x, b->path, "params"), (int)inst)) return false;
    int j = 0;
    bool first = true;
    for (const cJSON *nd = b->nodes->child; nd; nd = nd->next, j++) {
      const char *np = ex_path_idx(x, ex_pathk(x, b->path, "nodes"), j);
      if (!cJSON_IsObject(nd) || json_get(nd, "repeat")) {
        diag_error(x->j.d, json_loc(&x->j, nd),
                   "%s: expected an op node object (blocks cannot contain repeats)", np);
        return false;
      }
      Node *n = ex_make_node(x, nd, np, b, (int)inst);
      if (!n) return false;
      if (stg >= 0 && n->stage < 0) n->stage = stg;
      if (first && split) n->split_before = true;
      first = false;
      ex_add_spec(x, (Spec){nd, n, b, (int)inst, prev});
    }
    const char **next = ARENA_ARRAY(x->j.a, const char *, b->nin);
    k = 0;
    for (const cJSON *e = b->outputs->child; e; e = e->next, k++) {
      const char *op = ex_path_idx(x, ex_pathk(x, b->path, "outputs"), k);
      if (!(next[k] = ex_subst(x, e, op, e->valuestring, (int)inst))) return false;
      Tensor *t = graph_find(x->g, next[k]);
      if (!t || t->kind != T_ACT || !t->producer || t->producer->instance != inst ||
          t->producer->block != b->name) {
        diag_error(x->j.d, json_loc(&x->j, e),
                   "%s: '%s' is not a tensor defined by block '%s' (instance %lld)", op,
                   json_shown(x->j.a, e->valuestring), json_shown(x->j.a, b->name),
                   (long long)inst);
        return false;
      }
    }
    prev = next;
  }
  // The last instance's outputs under the repeat's names.
  k = 0;
  for (const cJSON *e = outs->child; e; e = e->next, k++) {
    const char *op = ex_path_idx(x, ex_pathk(x, path, "outputs"), k), *alias;
    if (!json_want_string(&x->j, e, op, &alias) || !ex_check_name(x, e, op, alias, false) ||
        !ex_name_free(x, e, op, alias))
      return false;
    strmap_put(&x->g->names, alias, graph_find(x->g, prev[k]));
  }
  return true;
}

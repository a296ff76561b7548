// pt2_import.c: pt2_import (pt2_import.h), the importer's top: reads the archive's graph (its
// values through pt2_graph.c, the signature, buffers and nodes, each node's ATen row from
// pt2_aten.c), folds what is constant (pt2_const.c), lowers from the loss with an explicit stack
// (imp_lower: a value's deps first, then its row's lower hook) and assembles pipec's JSON. It
// sits above the graph, the table and the constant evaluator, which do not import it.
#include "pt2_graph.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOLOC ((Loc){0, 0})

static const char *strip_target(const char *t) {
  const char *pre = "torch.ops.aten.";
  return strncmp(t, pre, strlen(pre)) == 0 ? t + strlen(pre) : t;
}

// The innermost module of nn_module_stack ("...;L__self__layers.0.attention,layers.0.attention,
// cls"): its FQN, the second field of the last entry.
static const char *module_of(Imp *im, const cJSON *meta) {
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(meta, "nn_module_stack");
  if (!cJSON_IsString(s)) return "";
  const char *last = strrchr(s->valuestring, ';');
  last = last ? last + 1 : s->valuestring;
  const char *c1 = strchr(last, ',');
  const char *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
  if (!c2) return "";
  const char *m = arena_strndup(im->a, c1 + 1, (size_t)(c2 - c1 - 1));
  if (strstr(m, "_empty_nn_module_stack")) return "";
  for (char *c = (char *)m; *c; c++)
    if (*c == ':' || *c == '{' || *c == '}' || (unsigned char)*c < 0x20) *c = '_';
  return m;
}

static bool read_buffer(Imp *im, Val *v, const char *fqn) {
  const Pt2Weight *w = pt2_constant(im->p, fqn);
  if (!w) {
    imp_error(im, NULL, "buffer '%s' has no entry in the archive's constants", fqn);
    return false;
  }
  if (w->dtype != 7 && w->dtype != 5 && w->dtype != 4 && w->dtype != 12 && w->dtype != 1 &&
      w->dtype != 10) {
    imp_error(im, NULL,
              "buffer '%s' is %s; buffers are read as f32, c64, i64, i32, u8 or "
              "bool",
              fqn, w->dtype_name);
    return false;
  }
  if (w->numel != (uint64_t)ishape_numel_k(&v->shape)) {
    imp_error(im, NULL, "buffer '%s' holds %llu values; its graph input %s needs %lld", fqn,
              (unsigned long long)w->numel, ishape_str(im, &v->shape),
              (long long)ishape_numel_k(&v->shape));
    return false;
  }
  v->kind = VAL_CONST, v->fqn = fqn;
  bool raw_f32 = w->dtype == 7 || w->dtype == 10; // complex64: (re, im) f32 pairs as they are
  v->data = arena_alloc(im->a, w->bytes ? w->bytes + 4 * w->numel : 1);
  unsigned char *raw = raw_f32 ? (unsigned char *)v->data : arena_alloc(im->a, w->bytes + 1);
  if (!pt2_read_weight(im->p, w, raw, im->d)) return false;
  for (uint64_t i = 0; !raw_f32 && i < w->numel; i++) { // ids, masks: exact in f32 below 2^24
    int64_t x = 0;
    if (w->dtype == 5)
      memcpy(&x, raw + 8 * i, 8);
    else if (w->dtype == 4) {
      int32_t y;
      memcpy(&y, raw + 4 * i, 4);
      x = y;
    } else
      x = raw[i];
    v->data[i] = (float)x;
  }
  return true;
}

// The graph value an input spec names: {"arg": {"name": N}} or {"arg": {"as_tensor": {"name": N}}}.
static Val *spec_val(Imp *im, const cJSON *k) {
  const cJSON *arg = cJSON_GetObjectItemCaseSensitive(k, "arg");
  const cJSON *an = cJSON_GetObjectItemCaseSensitive(arg, "name");
  if (!an)
    an = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(arg, "as_tensor"),
                                          "name");
  return cJSON_IsString(an) ? imp_val(im, an->valuestring) : NULL;
}

// The signature: parameters (tied ones: the first FQN of a weight file owns it), buffers, user
// inputs.
static bool read_signature(Imp *im, const cJSON *sig) {
  const cJSON *specs = cJSON_GetObjectItemCaseSensitive(sig, "input_specs"), *s;
  StrMap owner; // weight entry -> the FQN that owns it
  strmap_init(&owner, im->a);
  cJSON_ArrayForEach(s, specs) {
    const cJSON *k = s->child;
    const char *kind = k && k->string ? k->string : "";
    Val *v = spec_val(im, k);
    if (!v) {
      imp_error(im, NULL, "signature: a %s input names no tensor of the graph", kind);
      return false;
    }
    if (strcmp(kind, "parameter") == 0) {
      const cJSON *pn = cJSON_GetObjectItemCaseSensitive(k, "parameter_name");
      const Pt2Weight *w = cJSON_IsString(pn) ? pt2_weight(im->p, pn->valuestring) : NULL;
      if (!w) {
        imp_error(im, NULL, "parameter '%s' has no weight in the archive",
                  cJSON_IsString(pn) ? pn->valuestring : v->name);
        return false;
      }
      if (w->dtype != 7) {
        imp_error(im, NULL, "parameter '%s' is %s; pipec imports f32 parameters", w->fqn,
                  w->dtype_name);
        return false;
      }
      v->kind = VAL_LEAF, v->fqn = w->fqn, v->pipec = w->fqn;
      strmap_put(&im->names, w->fqn, (void *)w->fqn);
      cJSON *j = cJSON_CreateObject();
      cJSON_AddStringToObject(j, "name", w->fqn);
      cJSON_AddItemToObject(j, "shape", imp_shape_json(&v->shape));
      const char *own = strmap_put(&owner, w->entry, (void *)w->fqn);
      if (own) cJSON_AddStringToObject(j, "tied_to", own);
      cJSON_AddItemToArray(im->jparams, j);
    } else if (strcmp(kind, "buffer") == 0) {
      const cJSON *bn = cJSON_GetObjectItemCaseSensitive(k, "buffer_name");
      if (!cJSON_IsString(bn) || !read_buffer(im, v, bn->valuestring)) {
        if (!cJSON_IsString(bn)) imp_error(im, NULL, "signature: a buffer without a name");
        return false;
      }
    } else if (strcmp(kind, "user_input") == 0) {
      if (v->dtype != 7 && v->dtype != 5 && v->dtype != 4) {
        imp_error(im, NULL,
                  "input '%s': dtype code %d is not supported (float32, int64, "
                  "int32)",
                  v->name, v->dtype);
        return false;
      }
      v->kind = VAL_LEAF, v->is_input = true, v->pipec = v->name;
      strmap_put(&im->names, v->name, (void *)v->name);
    } else {
      imp_error(im, NULL,
                "signature: input kind '%s' is not supported (parameter, buffer, "
                "user_input)",
                kind);
      return false;
    }
  }
  return true;
}

static bool read_nodes(Imp *im, const cJSON *graph) {
  const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(graph, "nodes"), *n;
  im->nnodes = cJSON_GetArraySize(nodes);
  im->nodes = ARENA_ARRAY(im->a, ImpNode, im->nnodes ? im->nnodes : 1);
  int i = 0, bad = 0;
  cJSON_ArrayForEach(n, nodes) {
    ImpNode *x = &im->nodes[i++];
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(n, "target");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(n, "name");
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(n, "metadata");
    x->json = n;
    x->target = cJSON_IsString(t) ? strip_target(t->valuestring) : "?";
    if (!*x->target) x->target = "''"; // (named in messages)
    x->name = cJSON_IsString(nm) ? nm->valuestring : "?";
    x->inputs = cJSON_GetObjectItemCaseSensitive(n, "inputs");
    x->module = module_of(im, meta);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(meta, "stack_trace");
    if (cJSON_IsString(st)) imp_py_frame(im, x, st->valuestring);
    x->row = aten_row(x->target);
    if (!x->row) {
      imp_error(im, x, "%s%s is not supported",
                cJSON_IsString(t) && strncmp(t->valuestring, "torch.ops.aten.", 15) == 0 ? "aten."
                                                                                         : "",
                x->target);
      bad++;
    }
  }
  return bad == 0;
}

// Each node's outputs, in graph order (a node reads values made before it).
static bool read_outputs(Imp *im) {
  for (int i = 0; i < im->nnodes; i++) {
    ImpNode *x = &im->nodes[i];
    const cJSON *o, *outs = cJSON_GetObjectItemCaseSensitive(x->json, "outputs");
    cJSON_ArrayForEach(o, outs) {
      const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "as_tensor");
      const cJSON *ts = cJSON_GetObjectItemCaseSensitive(o, "as_tensors");
      const cJSON *e;
      if (t) ts = NULL;
      for (e = t ? t : ts ? ts->child : NULL; e; e = t ? NULL : e->next) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        Val *v = cJSON_IsString(nm) ? imp_val(im, nm->valuestring) : NULL;
        if (!v || v->kind != VAL_TENSOR || v->producer || x->nout == 8) {
          imp_error(im, x, "an output is not a tensor of tensor_values (or is made twice)");
          return false;
        }
        v->producer = x;
        x->out[x->nout++] = v;
      }
    }
    im->cur = x;
    bool none = !strcmp(x->target, "_assert_tensor_metadata.default") ||
                !strcmp(x->target, "sym_size.int"); // the rows with no tensor output
    if (x->nout == 0 && !none) {
      imp_error(im, x, "%s has no tensor output", x->target);
      return false;
    }
    if (imp_const_eval(im, x)) continue;
    if (x->row->read && !x->row->read(im, x)) return false;
  }
  return true;
}

// ---- lowering

static bool plan(Imp *im, ImpNode *n) {
  if (n->planned) return true;
  n->planned = true;
  im->cur = n;
  if (n->row->plan) return n->row->plan(im, n);
  Val *args[IMP_MAX_DEPS];
  int k = imp_tensor_args(im, n, args, IMP_MAX_DEPS);
  for (int i = 0; i < k && i < IMP_MAX_DEPS; i++)
    if (args[i]) n->deps[n->ndeps++] = args[i];
  return true;
}

// Lowers v's tensor (and everything it reads first): an explicit stack, graph order.
bool imp_lower(Imp *im, Val *v);
bool imp_lower(Imp *im, Val *want) {
  int cap = im->nnodes + 16, top = 0;
  Val **stack = ARENA_ARRAY(im->a, Val *, (size_t)cap);
  stack[top++] = imp_root(want);
  imp_root(want)->visiting = true;
  while (top) {
    Val *v = imp_root(stack[top - 1]);
    if (v->pipec || v->failed || v->kind == VAL_LEAF || v->kind == VAL_SYM) {
      v->visiting = false;
      top--;
      continue;
    }
    ImpNode *n = v->producer;
    if (v->kind == VAL_CONST) {
      imp_error(im, n,
                "the constant '%s' (computed from buffers%s%s) is read as a tensor: pipec "
                "models have no constants; only RoPE tables are recognised",
                v->name, v->fqn ? ": " : "", v->fqn ? v->fqn : "");
      v->failed = true;
      continue;
    }
    if (!n) { // (a value no node makes)
      imp_error(im, NULL, "tensor '%s' is read but no node computes it", v->name);
      v->failed = true;
      continue;
    }
    if (!plan(im, n)) {
      for (int i = 0; i < n->nout; i++) n->out[i]->failed = true;
      v->failed = true;
      continue;
    }
    bool pushed = false;
    for (int i = 0; i < n->ndeps && !pushed; i++) {
      Val *d = imp_root(n->deps[i]);
      if (!d->pipec && !d->failed && d->kind != VAL_LEAF && d->kind != VAL_SYM) {
        if (d->visiting || top == cap) { // a cycle: the graph's order is broken
          imp_error(im, n, "%s: tensor '%s' depends on itself (the graph has a cycle)", n->target,
                    d->name);
          v->failed = true;
          break;
        }
        d->visiting = true;
        stack[top++] = d, pushed = true;
      }
    }
    if (pushed || v->failed) continue;
    bool depfail = false;
    for (int i = 0; i < n->ndeps; i++) depfail |= imp_root(n->deps[i])->failed;
    im->cur = n;
    if (depfail || !n->row->lower(im, n)) {
      for (int i = 0; i < n->nout; i++) n->out[i]->failed = true;
      v->failed = true;
    } else if (!v->pipec && v->kind != VAL_LAYOUT) {
      imp_error(im, n, "%s: lowered without its output (an importer bug)", n->target);
      v->failed = true;
    }
  }
  return !imp_root(want)->failed;
}

// ---- the document

static cJSON *new_doc(Imp *im, const Pt2ImportOptions *o) {
  cJSON *doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "format", "pipec-model");
  cJSON_AddNumberToObject(doc, "version", 1);
  cJSON_AddStringToObject(doc, "name", o->name ? o->name : "model");
  if (o->weights) cJSON_AddStringToObject(doc, "weights", o->weights);
  im->jinputs = cJSON_AddArrayToObject(doc, "inputs");
  im->jparams = cJSON_AddArrayToObject(doc, "params");
  im->jnodes = cJSON_AddArrayToObject(doc, "nodes");
  return doc;
}

static void add_inputs(Imp *im, const cJSON *sig) {
  const cJSON *s;
  cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(sig, "input_specs")) {
    if (!s->child || !s->child->string || strcmp(s->child->string, "user_input") != 0) continue;
    Val *v = spec_val(im, s->child);
    if (!v) continue; // (read_signature refused it)
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", v->name);
    cJSON_AddStringToObject(j, "dtype", v->dtype == 7 ? "f32" : "i32");
    cJSON_AddItemToObject(j, "shape", imp_shape_json(&v->shape));
    if (v->is_target) cJSON_AddBoolToObject(j, "target", true);
    cJSON_AddItemToArray(im->jinputs, j);
  }
}

// The loss: the one user output, a scalar.
static Val *loss_of(Imp *im, const cJSON *sig) {
  const cJSON *specs = cJSON_GetObjectItemCaseSensitive(sig, "output_specs");
  if (cJSON_GetArraySize(specs) != 1) {
    imp_error(im, NULL,
              "the module returns %d outputs; pipec imports a module that returns "
              "its scalar loss (given inputs and targets)",
              cJSON_GetArraySize(specs));
    return NULL;
  }
  const cJSON *k = specs->child->child;
  const cJSON *t =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(k, "arg"), "as_tensor");
  const cJSON *nm = cJSON_GetObjectItemCaseSensitive(t, "name");
  Val *v = cJSON_IsString(nm) ? imp_val(im, nm->valuestring) : NULL;
  if (!k || !k->string || (strcmp(k->string, "user_output") && strcmp(k->string, "loss_output")) ||
      !v || v->shape.rank != 0 || v->dtype != 7) {
    imp_error(im, NULL, "the module's output must be its scalar float32 loss (got %s)",
              v ? ishape_str(im, &v->shape) : "no tensor");
    return NULL;
  }
  return v;
}

// The prediction the loss reads (its first tensor argument), exposed as the model's output.
static Val *prediction_of(Val *loss) {
  ImpNode *n = loss->producer;
  if (!n || !n->planned || n->ndeps == 0) return NULL;
  Val *p = n->deps[0];
  bool reshapes = p->kind == VAL_LAYOUT;
  for (int i = 0; reshapes && i < p->nsteps; i++) reshapes = !p->steps[i].permute;
  if (reshapes) p = p->base; // logits.view(-1, V): the logits
  return p->kind == VAL_LEAF ? NULL : p;
}

bool pt2_import(const Pt2 *p, const Pt2ImportOptions *o, cJSON **out, Arena *a, Diag *d) {
  Imp im = {.p = p, .a = a, .d = d};
  strmap_init(&im.vals, a);
  strmap_init(&im.names, a);
  strmap_init(&im.bases, a);
  *out = NULL;
  const cJSON *gm = cJSON_GetObjectItemCaseSensitive(p->model, "graph_module");
  const cJSON *graph = cJSON_GetObjectItemCaseSensitive(gm, "graph");
  const cJSON *sig = cJSON_GetObjectItemCaseSensitive(gm, "signature");
  if (!cJSON_IsObject(graph) || !cJSON_IsObject(sig)) {
    diag_error(d, NOLOC, "models/model.json: no graph_module with a graph and a signature");
    return false;
  }
  im.doc = new_doc(&im, o);
  int errs = d->errors;
  bool ok = imp_read_values(&im, graph) && read_nodes(&im, graph) && read_signature(&im, sig) &&
            read_outputs(&im);
  Val *loss = ok ? loss_of(&im, sig) : NULL;
  ok = loss && imp_lower(&im, loss) && d->errors == errs;
  Val *pred = ok ? prediction_of(loss) : NULL;
  const char *pname = pred ? imp_realize(&im, pred) : NULL;
  if (ok) {
    add_inputs(&im, sig);
    if (o->training) cJSON_AddItemToObject(im.doc, "training", o->training);
    cJSON_AddStringToObject(im.doc, "loss", loss->pipec);
    if (pname) {
      cJSON *l = cJSON_AddArrayToObject(im.doc, "outputs");
      cJSON_AddItemToArray(l, cJSON_CreateString(pname));
    }
    *out = im.doc;
  } else {
    if (o->training) cJSON_Delete(o->training);
    cJSON_Delete(im.doc);
  }
  return ok && d->errors == errs;
}

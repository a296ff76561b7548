// IR printer: a stable, line-per-entity text form for `pipec print` and --dump-after. Same graph,
// same text (no addresses, fixed number formats), so dumps diff cleanly between versions.
//
//   model "gpt_char"
//   dims B=batch T=64 C=128
//   input idx: i32(B,64)
//   param lm_head.weight: f32(65,128) tied_to=transformer.wte.weight
//   recv transformer.h.1.out@v1: f32(B,64,128)      (after the comm pass, --stages S)
//   node h.0.fc = linear(x, h.0.fc.weight): f32(B,128)  ; stage=1 block=layer[0]
//   loss loss
#include <ctype.h>
#include <string.h>

#include "ops.h"

// Names print bare when they are made of [A-Za-z0-9_.:-], else quoted with escapes.
static void put_name(FILE *f, const char *s) {
  bool plain = *s != 0;
  for (const char *p = s; *p && plain; p++)
    plain = isalnum((unsigned char)*p) || strchr("_.:-", *p);
  if (plain) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\x%02x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

static void put_type(FILE *f, const Graph *g, const Tensor *t) {
  if (t->kind == T_ACT && !g->shapes_known) {
    fputs("?", f);
    return;
  }
  fprintf(f, "%s%s", dtype_name(t->dtype), fmt_shape(g, &t->shape));
}

static void put_init(FILE *f, const Init *in) {
  switch (in->kind) {
  case INIT_ZEROS:
    fputs("zeros", f);
    break;
  case INIT_ONES:
    fputs("ones", f);
    break;
  case INIT_NORMAL:
    fprintf(f, "normal(mean=%.9g,std=%.9g)", in->a, in->b);
    break;
  case INIT_UNIFORM:
    fprintf(f, "uniform(a=%.9g,b=%.9g)", in->a, in->b);
    break;
  case INIT_XAVIER:
    fprintf(f, "xavier(gain=%.9g)", in->a);
    break;
  }
}

static void put_attr(FILE *f, const Graph *g, const AttrDef *ad, const AttrValue *v) {
  char buf[64];
  fprintf(f, "%s=", ad->name);
  switch (ad->type) {
  case ATTR_INT:
    fprintf(f, "%lld", (long long)v->i);
    break;
  case ATTR_BOOL:
    fputs(v->i ? "true" : "false", f);
    break;
  case ATTR_ENUM:
    fputs(ad->choices[v->i], f);
    break;
  case ATTR_FLOAT:
    fprintf(f, "%.9g", v->f);
    break;
  case ATTR_INTS:
  case ATTR_SHAPE:
    fputc('[', f);
    for (int i = 0; i < v->count; i++) {
      if (i) fputc(',', f);
      if (ad->type == ATTR_INTS)
        fprintf(f, "%lld", (long long)v->ints[i]);
      else if (v->dims[i].n < 0)
        fputs("-1", f);
      else
        fputs(dim_str(buf, sizeof buf, v->dims[i], g->batch_sym), f);
    }
    fputc(']', f);
    break;
  }
}

void graph_print(const Graph *g, FILE *f) {
  fputs("model ", f);
  put_name(f, g->name ? g->name : "");
  fputc('\n', f);
  fprintf(f, "dims %s=batch", g->batch_sym);
  for (int i = 0; i < g->ndims; i++)
    fprintf(f, " %s=%lld", g->dims[i].name, (long long)g->dims[i].value.n);
  fputc('\n', f);
  for (int i = 0; i < g->ninputs; i++) {
    const Tensor *t = g->inputs[i];
    fputs("input ", f);
    put_name(f, t->name);
    fputs(": ", f);
    put_type(f, g, t);
    if (t->is_target) fputs(" target", f);
    fputc('\n', f);
  }
  for (int i = 0; i < g->nparams; i++) {
    const Tensor *t = g->params[i];
    fputs("param ", f);
    put_name(f, t->name);
    fputs(": ", f);
    put_type(f, g, t);
    if (t->tied_to) {
      fputs(" tied_to=", f);
      put_name(f, t->tied_to->name);
    } else {
      fputs(" init=", f);
      put_init(f, &t->init);
    }
    fputc('\n', f);
  }
  for (int i = 0; i < g->ntensors; i++) { // after the comm pass: the received copies
    const Tensor *t = g->tensors[i];
    if (t->kind != T_RECV) continue;
    fputs("recv ", f);
    put_name(f, t->name);
    fputs(": ", f);
    put_type(f, g, t);
    fputc('\n', f);
  }
  for (int i = 0; i < g->nnodes; i++) {
    const Node *n = g->nodes[i];
    fputs("node ", f);
    for (int k = 0; k < n->nout; k++) {
      if (k) fputs(", ", f);
      put_name(f, n->out[k]->name);
    }
    fprintf(f, " = %s(", n->op->name);
    for (int j = 0; j < n->nin; j++) {
      if (j) fputs(", ", f);
      put_name(f, n->in[j]->name);
    }
    fputc(')', f);
    for (int a = 0; a < n->op->nattrs; a++) {
      if ((n->op->quiet_attrs >> a & 1u) && !n->attrs[a].present) continue;
      fputc(' ', f);
      put_attr(f, g, &n->op->attrs[a], &n->attrs[a]);
    }
    fputs(":", f);
    for (int k = 0; k < n->nout; k++) {
      fputs(k ? ", " : " ", f);
      put_type(f, g, n->out[k]);
    }
    static const char *const roles[] = {"", "B", "W", "step"};
    if (n->stage >= 0 || n->split_before || n->block || n->role != ROLE_FWD) {
      fputs("  ;", f);
      if (n->role != ROLE_FWD) fprintf(f, " %s", roles[n->role]);
      if (n->stage >= 0) fprintf(f, " stage=%d", n->stage);
      if (n->split_before) fputs(" split_before", f);
      if (n->block) {
        fputs(" block=", f);
        put_name(f, n->block);
        fprintf(f, "[%d]", n->instance);
      }
    }
    fputc('\n', f);
  }
  fputs("loss ", f);
  put_name(f, g->loss ? g->loss->name : "?");
  fputc('\n', f);
  for (int i = 0; i < g->noutputs; i++) {
    fputs("output ", f);
    put_name(f, g->outputs[i]->name);
    fputc('\n', f);
  }
}

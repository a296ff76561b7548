// data_io.c: the lines that move a batch between the data and the tensors of a rank, as the
// loaders and the evaluation print them (emit_rank.c) and the program's --predict output names it
// (emit_c.c): a table load's destinations (each fed input's pointer, cu_in on the CUDA target),
// --predict's copy of the model's first output after an evaluation batch's forward, and the count
// of an evaluation batch's correct predictions (TrainConfig.accuracy).
#include <string.h>

#include "../compiler/training.h"
#include "emit.h"

const char *feed_dsts(E *e, const bool *held) {
  const char *s = "void *const in_[] = {";
  for (int k = 0; k < e->tc->nfeeds; k++)
    s = arena_printf(e->a, "%s%s%s", s, k ? ", " : "",
                     cu_in(e, e->tc->feeds[k].t, !held || held[k]));
  return arena_printf(e->a, "%s};", s);
}

const Tensor *predict_output(E *e, const Tensor **name) {
  const Tensor *t = e->g->noutputs ? e->g->outputs[0] : NULL;
  bool ok = t && t->dtype == DT_F32 && t->shape.rank >= 1 && t->shape.d[0].b == 1;
  for (int d = 1; ok && d < t->shape.rank; d++) ok = t->shape.d[d].b == 0;
  *name = ok ? t : NULL;
  if (!ok) return NULL;
  // The loss stage's copy when it has one (its own or received), else the producer's (S = 1:
  // the one rank's own), else (no producer) wherever it is held.
  const Program *P = e->prog;
  int lv = -1, home = -1;
  for (int v = 0; v < P->nv; v++)
    if (P->vs[v].has_loss) lv = v;
  const Tensor *at_loss = NULL;
  if (lv >= 0 && t->producer && P->vstage_of_node[t->producer->id] == lv) at_loss = t;
  for (int c = 0; !at_loss && lv >= 0 && c < P->nch; c++)
    if (P->ch[c].t == t && P->ch[c].to_v == lv) at_loss = P->ch[c].dst;
  if (at_loss)
    home = P->vs[lv].rank;
  else if (t->producer)
    home = P->vs[P->vstage_of_node[t->producer->id]].rank;
  else if (e->p->offset[t->id] >= 0)
    home = e->rp->rank;
  if (home != e->rp->rank) return NULL;
  return at_loss ? at_loss : t;
}

const char *predict_copy(E *e, const Tensor *t) {
  if (!t) return "";
  int64_t per = 1; // floats per sample
  for (int d = 0; d < t->shape.rank; d++) per *= t->shape.d[d].n;
  return arena_printf(e->a, "  if (r->out) %s(r->out, %s, (size_t)valid * %lld * sizeof(float));\n",
                      e->cuda ? "pr_cu_download" : "memcpy", tid(e, t), (long long)per);
}

// The correct predictions of one evaluation batch (TrainConfig.accuracy's logits and class ids,
// as the node reads them on its stage), or "" without accuracy.
const char *count_correct(E *e) {
  const Node *n = e->tc->accuracy;
  if (!n) return "";
  const Tensor *logits = accuracy_logits(n);
  return arena_printf(e->a, "  r->correct = %s(%s, %s, valid, %lld);\n  r->seen = valid;\n",
                      kernel_name(e, "pr_count_correct"), tid(e, logits), tid(e, accuracy_ids(n)),
                      (long long)logits->shape.d[1].n);
}

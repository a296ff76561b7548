// memplan pass: the order of one rank's nodes and a static offset for every buffer.
//
// Regions: params (owners back to back in canonical order; a tied parameter shares its owner's
// bytes), grads (every per-step gradient buffer back to back), optimizer state (AdamW m and v,
// SGD momentum, per owner parameter that gets a gradient), activations. The activation region
// holds everything that lives within one microbatch: data inputs, activations, hidden saved
// outputs, activation gradients, kernel workspaces, and the constants. Each gets a live interval
// over the microbatch's node sequence (forward nodes, then backward nodes) and is placed by
// first fit, biggest first, at the lowest offset free for its whole interval.
//
// Every size, sum, alignment and offset is computed with checked arithmetic: a plan whose regions
// together would exceed 2^63 - 1 bytes is an error naming the tensor (or node workspace) that
// pushes it over, never a wrapped size.
#include <stdlib.h>
#include <unistd.h>

#include "../ir/ops.h"
#include "program.h"

enum { ALIGN = 64 };

// Sizes here are at most 2^55 bytes (2^53 elements, checked by the training pass, of 4 bytes).
static int64_t align_up(int64_t v) {
  return (v + ALIGN - 1) / ALIGN * ALIGN;
}

// *region += bytes and *total (all regions so far) += bytes; false, nothing changed, when either
// would overflow int64.
static bool grow(int64_t *total, int64_t *region, int64_t bytes) {
  int64_t r, t;
  if (__builtin_add_overflow(*region, bytes, &r) || __builtin_add_overflow(*total, bytes, &t))
    return false;
  *region = r;
  *total = t;
  return true;
}

static bool too_big(Diag *d, const Graph *g, const Tensor *t, const char *region) {
  diag_error(d, t->loc,
             "%s: '%s' %s: placing it in the %s region, the memory plan would exceed 2^63 bytes",
             t->path ? t->path : "model", t->name, fmt_shape(g, &t->shape), region);
  return false;
}

typedef struct Item {
  int64_t bytes; // size
  int lo, hi;    // live interval (node positions, inclusive)
  int64_t *dst;  // where the offset goes
  int key;       // tie-break for a stable order
} Item;

static int by_size(const void *a, const void *b) {
  const Item *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  return x->key - y->key;
}

static int by_offset(const void *a, const void *b) {
  int64_t x = *(*(Item *const *)a)->dst, y = *(*(Item *const *)b)->dst;
  return (x > y) - (x < y);
}

// First fit over intervals; returns the region size, or -1 when an item would end past room
// (*over: that item's key).
static int64_t place(Item *items, int n, Arena *a, int64_t room, int *over) {
  qsort(items, (size_t)n, sizeof(Item), by_size);
  Item **placed = ARENA_ARRAY(a, Item *, n + 1), **live = ARENA_ARRAY(a, Item *, n + 1);
  int np = 0;
  int64_t top = 0;
  for (int i = 0; i < n; i++) {
    Item *it = &items[i];
    int nl = 0;
    for (int j = 0; j < np; j++)
      if (placed[j]->lo <= it->hi && it->lo <= placed[j]->hi) live[nl++] = placed[j];
    qsort(live, (size_t)nl, sizeof(Item *), by_offset);
    int64_t off = 0;
    for (int j = 0; j < nl; j++) {
      int64_t lo = *live[j]->dst, hi = lo + align_up(live[j]->bytes);
      if (off + align_up(it->bytes) <= lo) break;
      if (hi > off) off = hi;
    }
    int64_t end;
    if (__builtin_add_overflow(off, align_up(it->bytes), &end) || end > room) {
      *over = it->key;
      return -1;
    }
    *it->dst = off;
    if (end > top) top = end;
    placed[np++] = it;
  }
  return top;
}

// Bytes of t with the batch bound (at most 2^55: shape_numel caps elements at 2^53); -1 when the
// element count is not known to fit.
static int64_t tensor_bytes(const Tensor *t, int64_t batch) {
  int64_t n = shape_numel(&t->shape, batch), bytes;
  if (n < 0 || __builtin_mul_overflow(n, (int64_t)dtype_size(t->dtype), &bytes)) return -1;
  return bytes;
}

bool plan_memory(Graph *g, const TrainConfig *tc, Plan *p, Diag *d) {
  Arena *a = g->arena;
  int64_t B = tc->mb_size;
  *p = (Plan){0};
  p->fwd = ARENA_ARRAY(a, Node *, g->nnodes + 1);
  p->bwd = ARENA_ARRAY(a, Node *, g->nnodes + 1);
  p->step = ARENA_ARRAY(a, Node *, g->nnodes + 1);
  int *pos = ARENA_ARRAY(a, int, g->nnodes + 1);
  for (int i = 0; i < g->nnodes; i++) {
    Node *n = g->nodes[i];
    if (n->role == ROLE_FWD)
      pos[i] = p->nfwd, p->fwd[p->nfwd++] = n;
    else if (n->role == ROLE_STEP)
      pos[i] = -1, p->step[p->nstep++] = n;
    else
      pos[i] = -2, p->bwd[p->nbwd++] = n;
  }
  for (int i = 0; i < p->nbwd; i++) pos[p->bwd[i]->id] = p->nfwd + i;
  int end = p->nfwd + p->nbwd; // one past the last position

  p->region = ARENA_ARRAY(a, Region, g->ntensors);
  p->offset = ARENA_ARRAY(a, int64_t, g->ntensors);
  p->opt_offset = ARENA_ARRAY(a, int64_t, g->ntensors);
  p->ws_offset = ARENA_ARRAY(a, int64_t, g->nnodes + 1);
  p->opt_slots = tc->opt == OPT_ADAMW ? 2 : 1;
  for (int i = 0; i < g->ntensors; i++) p->offset[i] = p->opt_offset[i] = -1;
  for (int i = 0; i < g->nnodes; i++) p->ws_offset[i] = -1;

  // Every tensor's size is known to fit before anything is summed.
  for (int i = 0; i < g->ntensors; i++)
    if (tensor_bytes(g->tensors[i], B) < 0) return too_big(d, g, g->tensors[i], "activations");
  int64_t total = 0; // bytes of all regions so far
  // Parameters and optimizer state, in canonical order.
  for (int i = 0; i < g->nparams; i++) {
    Tensor *t = g->params[i];
    if (t->tied_to) continue;
    int64_t sz = align_up(tensor_bytes(t, B)), opt;
    p->region[t->id] = REG_PARAMS;
    p->offset[t->id] = p->bytes[REG_PARAMS];
    if (!grow(&total, &p->bytes[REG_PARAMS], sz)) return too_big(d, g, t, "params");
    if (t->grad) {
      p->opt_offset[t->id] = p->bytes[REG_OPT];
      if (__builtin_mul_overflow((int64_t)p->opt_slots, sz, &opt) ||
          !grow(&total, &p->bytes[REG_OPT], opt))
        return too_big(d, g, t, "optimizer");
    }
  }
  for (int i = 0; i < g->nparams; i++) {
    Tensor *t = g->params[i];
    if (t->tied_to) p->region[t->id] = REG_PARAMS, p->offset[t->id] = p->offset[t->tied_to->id];
  }
  // Per-step gradient buffers.
  for (int i = 0; i < g->ntensors; i++) {
    Tensor *t = g->tensors[i];
    if (t->kind != T_ACT || !t->per_step) continue;
    p->region[t->id] = REG_GRADS;
    p->offset[t->id] = p->bytes[REG_GRADS];
    if (!grow(&total, &p->bytes[REG_GRADS], align_up(tensor_bytes(t, B))))
      return too_big(d, g, t, "grads");
  }
  // Everything else lives in the activation region with an interval.
  Item *items = ARENA_ARRAY(a, Item, g->ntensors + g->nnodes + 1);
  int n = 0;
  for (int i = 0; i < g->ntensors; i++) {
    Tensor *t = g->tensors[i];
    if (t->kind == T_PARAM || (t->kind == T_ACT && t->per_step)) continue;
    int lo, hi;
    if (t->kind == T_CONST)
      lo = -2, hi = end;
    else if (t->kind == T_INPUT)
      lo = -1, hi = -1;
    else
      lo = hi = pos[t->producer->id];
    if (t->kind == T_ACT && lo < 0) {
      diag_error(d, t->loc,
                 "internal error: memplan: per-microbatch tensor '%s' made by a step node",
                 t->name);
      return false;
    }
    for (int u = 0; u < t->nuses; u++) {
      int q = pos[t->uses[u].node->id];
      if (q < 0) q = end; // read by a step node: must outlive the microbatch
      if (q > hi) hi = q;
    }
    if (t == g->loss || t->kind == T_INPUT)
      hi = hi > p->nfwd ? hi : p->nfwd; // read by the host after F
    for (int k = 0; k < g->noutputs; k++)
      if (g->outputs[k] == t && hi < p->nfwd) hi = p->nfwd;
    p->region[t->id] = REG_ACTS;
    items[n++] = (Item){tensor_bytes(t, B), lo, hi, &p->offset[t->id], i};
  }
  for (int i = 0; i < g->nnodes; i++) {
    Node *nd = g->nodes[i];
    if (!nd->op->workspace) continue;
    int64_t ws = nd->op->workspace(nd, B);
    if (ws < 0 || ws > ((int64_t)1 << 55)) { // the bound of a tensor's bytes
      diag_error(d, nd->loc, "%s \"%s\": its kernel workspace (%lld bytes) is too large",
                 nd->path ? nd->path : "model", nd->name, (long long)ws);
      return false;
    }
    items[n++] = (Item){ws, pos[i], pos[i], &p->ws_offset[i], g->ntensors + i};
  }
  int over = -1;
  p->bytes[REG_ACTS] = place(items, n, a, INT64_MAX - total, &over);
  if (p->bytes[REG_ACTS] < 0) {
    if (over < g->ntensors) return too_big(d, g, g->tensors[over], "activations");
    const Node *nd = g->nodes[over - g->ntensors];
    diag_error(d, nd->loc,
               "%s \"%s\": placing its kernel workspace in the activations region, the memory plan "
               "would exceed 2^63 bytes",
               nd->path ? nd->path : "model", nd->name);
    return false;
  }
  // Check the placement: no two buffers that are live at the same time share a byte.
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      const Item *x = &items[i], *y = &items[j];
      if (x->lo > y->hi || y->lo > x->hi) continue;
      if (*x->dst + x->bytes <= *y->dst || *y->dst + y->bytes <= *x->dst) continue;
      diag_error(d, (Loc){0, 0},
                 "internal error: memplan: buffers %d and %d overlap while both are live", x->key,
                 y->key);
      return false;
    }
  return true;
}

static const char *mib(char *buf, size_t cap, int64_t b) {
  snprintf(buf, cap, "%10.3f MiB", (double)b / (1 << 20));
  return buf;
}

void plan_print(const Graph *g, const TrainConfig *tc, const Plan *p, FILE *out) {
  static const char *const names[REG_COUNT] = {"params", "grads", "optimizer", "activations"};
  char b[64];
  int64_t total = 0;
  fprintf(out, "memory plan for %s: batch %lld = %lld microbatch%s of %lld, %s\n", g->name,
          (long long)tc->batch, (long long)tc->microbatches, tc->microbatches == 1 ? "" : "es",
          (long long)tc->mb_size, tc->opt == OPT_ADAMW ? "adamw" : "sgd");
  for (int r = 0; r < REG_COUNT; r++) {
    fprintf(out, "  %-12s %s  (%lld bytes)\n", names[r], mib(b, sizeof b, p->bytes[r]),
            (long long)p->bytes[r]);
    total += p->bytes[r];
  }
  fprintf(out, "  %-12s %s  (%lld bytes)\n", "total", mib(b, sizeof b, total), (long long)total);
}

void plan_warn_memory(const Plan *p, Diag *d) {
  int64_t total = 0;
  for (int r = 0; r < REG_COUNT; r++) total += p->bytes[r]; // fits: plan_memory checked it
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return;
  double phys = (double)pages * (double)page;
  if ((double)total <= phys) return;
  diag_warning(d, (Loc){0, 0},
               "the memory plan needs %lld bytes (%.1f GiB) but this machine has %.0f bytes "
               "(%.1f GiB) of physical memory: the program will refuse to start here",
               (long long)total, (double)total / (1 << 30), phys, phys / (1 << 30));
}

// Placement of buffers with live intervals, and its checker, each O(n log n).
//
// place_items sweeps the positions in order. At each position it first releases the items whose
// interval ended before it (their bytes join a free list that merges neighbouring blocks), then
// places the items that start there, biggest first, each at the lowest-addressed free block that
// holds it (first fit); when none does, at the free block that ends at the high-water mark (which
// then grows by the difference), else at the mark. The buffers of a training step are born and
// die nearly in stack order (forward activations die in reverse in the backward pass), so first
// fit in time order leaves little fragmentation. The same sweep also runs backwards in time (the
// backward pass seen from its end looks like a forward pass), and for at most GREEDY_MAX items
// the planner's original algorithm runs too: biggest first, each at the lowest offset free for its
// whole interval (quadratic, so bounded to a constant: GREEDY_MAX^2 / 2 interval tests). The
// smallest result wins; ties go to the first of sweep, reverse sweep, greedy. The samples'
// activation regions are all at the lower bound (the most bytes live at one position) this way.
//
// place_verify sweeps the positions keeping the live items ordered by offset: an item that
// starts must end before its successor starts and begin after its predecessor ends. The live
// set never overlaps (each insertion checked it), so neighbours are the only candidates.
//
// Both keep their ordered sets in a treap (a binary search tree kept balanced by random
// priorities: expected O(log n) per operation), keyed by (offset, key). The free list's treap
// also keeps in every node the largest block of its subtree, so "the lowest-addressed block of at
// least s bytes" is one descent.
#include <stdlib.h>

#include "place.h"

enum { GREEDY_MAX = 2048 }; // most items the quadratic greedy placement is tried on

typedef struct TNode {
  int64_t off;   // key: block or item offset
  int64_t key;   // key tie-break (item key; the offset in the size-ordered free list; 0)
  int64_t size;  // block or item bytes
  int64_t max;   // largest size in this subtree
  uint32_t prio; // heap priority (random)
  int l, r;      // children (-1: none)
} TNode;

typedef struct Treap {
  TNode *t;      // node pool
  int root;      // root index (-1: empty)
  int nfree;     // head of the list of released pool slots (-1: none), linked through l
  int used;      // pool slots handed out so far
  uint64_t seed; // xorshift state for priorities
} Treap;

static void treap_init(Treap *tr, Arena *a, int cap) {
  tr->t = ARENA_ARRAY(a, TNode, cap + 1);
  tr->root = tr->nfree = -1;
  tr->used = 0;
  tr->seed = 0x9e3779b97f4a7c15ull;
}

static int64_t tmax(const Treap *tr, int i) {
  return i < 0 ? -1 : tr->t[i].max;
}

static void pull(Treap *tr, int i) {
  TNode *n = &tr->t[i];
  int64_t m = n->size, a = tmax(tr, n->l), b = tmax(tr, n->r);
  n->max = m > a ? (m > b ? m : b) : (a > b ? a : b);
}

static bool less(const TNode *n, int64_t off, int64_t key) {
  return n->off < off || (n->off == off && n->key < key);
}

// Splits i into nodes < (off, key) and the rest.
static void split(Treap *tr, int i, int64_t off, int64_t key, int *lo, int *hi) {
  if (i < 0) {
    *lo = *hi = -1;
    return;
  }
  if (less(&tr->t[i], off, key)) {
    split(tr, tr->t[i].r, off, key, &tr->t[i].r, hi);
    *lo = i;
  } else {
    split(tr, tr->t[i].l, off, key, lo, &tr->t[i].l);
    *hi = i;
  }
  pull(tr, i);
}

static int merge(Treap *tr, int a, int b) {
  if (a < 0) return b;
  if (b < 0) return a;
  if (tr->t[a].prio > tr->t[b].prio) {
    tr->t[a].r = merge(tr, tr->t[a].r, b);
    pull(tr, a);
    return a;
  }
  tr->t[b].l = merge(tr, a, tr->t[b].l);
  pull(tr, b);
  return b;
}

static void insert(Treap *tr, int64_t off, int64_t key, int64_t size) {
  int i;
  if (tr->nfree >= 0)
    i = tr->nfree, tr->nfree = tr->t[i].l;
  else
    i = tr->used++;
  tr->seed ^= tr->seed << 13, tr->seed ^= tr->seed >> 7, tr->seed ^= tr->seed << 17;
  tr->t[i] = (TNode){off, key, size, size, (uint32_t)(tr->seed >> 32), -1, -1};
  int lo, hi;
  split(tr, tr->root, off, key, &lo, &hi);
  tr->root = merge(tr, merge(tr, lo, i), hi);
}

// Removes the node with exactly (off, key).
static void erase(Treap *tr, int64_t off, int64_t key) {
  int lo, mid, hi;
  split(tr, tr->root, off, key, &lo, &mid);
  split(tr, mid, off, key + 1, &mid, &hi); // keys are below 2^62: key + 1 is safe
  if (mid >= 0) tr->t[mid].l = tr->nfree, tr->nfree = mid;
  tr->root = merge(tr, lo, hi);
}

// The last node < (off, key), or -1.
static int pred(const Treap *tr, int64_t off, int64_t key) {
  int i = tr->root, best = -1;
  while (i >= 0)
    if (less(&tr->t[i], off, key))
      best = i, i = tr->t[i].r;
    else
      i = tr->t[i].l;
  return best;
}

// The first node > (off, key), or -1.
static int succ(const Treap *tr, int64_t off, int64_t key) {
  int i = tr->root, best = -1;
  while (i >= 0)
    if (!less(&tr->t[i], off, key) && !(tr->t[i].off == off && tr->t[i].key == key))
      best = i, i = tr->t[i].l;
    else
      i = tr->t[i].r;
  return best;
}

// The lowest-addressed node of size >= s, or -1.
static int first_fit(const Treap *tr, int64_t s) {
  int i = tr->root;
  if (tmax(tr, i) < s) return -1;
  for (;;) {
    const TNode *n = &tr->t[i];
    if (tmax(tr, n->l) >= s)
      i = n->l;
    else if (n->size >= s)
      return i;
    else
      i = n->r;
  }
}

static int64_t aligned(int64_t b) {
  return (b + PLACE_ALIGN - 1) / PLACE_ALIGN * PLACE_ALIGN;
}

static int cmp_key(const PlaceItem *x, const PlaceItem *y) {
  return (x->key > y->key) - (x->key < y->key);
}

// By start, the biggest first at one start.
static int by_start(const void *a, const void *b) {
  const PlaceItem *x = *(PlaceItem *const *)a, *y = *(PlaceItem *const *)b;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  return cmp_key(x, y);
}

static int by_end(const void *a, const void *b) {
  const PlaceItem *x = *(PlaceItem *const *)a, *y = *(PlaceItem *const *)b;
  if (x->hi != y->hi) return x->hi < y->hi ? -1 : 1;
  return cmp_key(x, y);
}

// The items sorted by start (biggest first at one position) and by end.
static void orders(const PlaceItem *items, int n, Arena *a, const PlaceItem ***start,
                   const PlaceItem ***end) {
  *start = ARENA_ARRAY(a, const PlaceItem *, n + 1);
  *end = ARENA_ARRAY(a, const PlaceItem *, n + 1);
  for (int i = 0; i < n; i++) (*start)[i] = (*end)[i] = &items[i];
  qsort(*start, (size_t)n, sizeof(PlaceItem *), by_start);
  qsort(*end, (size_t)n, sizeof(PlaceItem *), by_end);
}

static bool occupies(const PlaceItem *it) {
  return it->bytes > 0 && it->lo <= it->hi;
}

// Returns [off, off + size) to the free list, merged with the blocks it touches.
static void release(Treap *fl, int64_t off, int64_t size) {
  int p = pred(fl, off, 0);
  if (p >= 0 && fl->t[p].off + fl->t[p].size == off) {
    off = fl->t[p].off, size += fl->t[p].size;
    erase(fl, off, 0);
  }
  int s = succ(fl, off, 0);
  if (s >= 0 && fl->t[s].off == off + size) {
    size += fl->t[s].size;
    erase(fl, fl->t[s].off, 0);
  }
  insert(fl, off, 0, size);
}

// The sweep over items (see the top paragraph): offsets into off[] (per item index); returns the
// high-water mark, or -1 when an item would end past room (*over: its key).
static int64_t sweep(const PlaceItem *items, int n, int64_t room, Arena *a, int64_t *off,
                     int *over) {
  const PlaceItem **start, **end;
  orders(items, n, a, &start, &end);
  Treap fl;
  treap_init(&fl, a, n + 1); // at most one free block per live item, plus one
  int64_t top = 0;
  for (int i = 0, j = 0; i < n; i++) {
    const PlaceItem *it = start[i];
    for (; j < n && end[j]->hi < it->lo; j++)
      if (occupies(end[j])) release(&fl, off[end[j] - items], aligned(end[j]->bytes));
    int64_t s = aligned(it->bytes), *o = &off[it - items];
    *o = 0;
    if (!occupies(it)) continue;
    int b = first_fit(&fl, s);
    if (b >= 0) {
      int64_t bo = fl.t[b].off, bs = fl.t[b].size;
      erase(&fl, bo, 0);
      if (bs > s) insert(&fl, bo + s, 0, bs - s);
      *o = bo;
      continue;
    }
    int last = pred(&fl, INT64_MAX, 0);
    int64_t at = top;
    if (last >= 0 && fl.t[last].off + fl.t[last].size == top) {
      at = fl.t[last].off;
      erase(&fl, at, 0);
    }
    if (at > room || s > room - at) {
      *over = it->key;
      return -1;
    }
    *o = at;
    top = at + s;
  }
  return top;
}

static int by_size(const void *a, const void *b) {
  const PlaceItem *x = *(PlaceItem *const *)a, *y = *(PlaceItem *const *)b;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  return cmp_key(x, y);
}

static const int64_t *g_off; // by_offset's offsets (qsort has no context argument)

static int by_offset(const void *a, const void *b) {
  int64_t x = g_off[*(const int *)a], y = g_off[*(const int *)b];
  return (x > y) - (x < y);
}

// The original greedy (n <= GREEDY_MAX): biggest first, each at the lowest offset free for its
// whole interval. Same results as sweep's contract.
static int64_t greedy(const PlaceItem *items, int n, int64_t room, Arena *a, int64_t *off,
                      int *over) {
  const PlaceItem **order = ARENA_ARRAY(a, const PlaceItem *, n + 1);
  int *placed = ARENA_ARRAY(a, int, n + 1), *live = ARENA_ARRAY(a, int, n + 1), np = 0;
  for (int i = 0; i < n; i++) order[i] = &items[i];
  qsort(order, (size_t)n, sizeof(PlaceItem *), by_size);
  int64_t top = 0;
  g_off = off;
  for (int i = 0; i < n; i++) {
    const PlaceItem *it = order[i];
    int self = (int)(it - items), nl = 0;
    off[self] = 0;
    if (!occupies(it)) continue;
    for (int j = 0; j < np; j++) {
      const PlaceItem *q = &items[placed[j]];
      if (q->lo <= it->hi && it->lo <= q->hi) live[nl++] = placed[j];
    }
    qsort(live, (size_t)nl, sizeof(int), by_offset);
    int64_t o = 0, s = aligned(it->bytes);
    for (int j = 0; j < nl; j++) {
      int64_t lo = off[live[j]], hi = lo + aligned(items[live[j]].bytes);
      if (o + s <= lo) break;
      if (hi > o) o = hi;
    }
    if (o > room || s > room - o) {
      *over = it->key;
      return -1;
    }
    off[self] = o;
    if (o + s > top) top = o + s;
    placed[np++] = self;
  }
  return top;
}

int64_t place_items(PlaceItem *items, int n, int64_t room, Arena *a, int *over) {
  int64_t *off = ARENA_ARRAY(a, int64_t, n + 1), *best = ARENA_ARRAY(a, int64_t, n + 1), top;
  top = sweep(items, n, room, a, best, over);
  if (top < 0) return -1;
  // The same sweep backwards in time: intervals mirrored.
  PlaceItem *mirror = ARENA_ARRAY(a, PlaceItem, n + 1);
  for (int i = 0; i < n; i++) {
    mirror[i] = items[i];
    mirror[i].lo = -items[i].hi, mirror[i].hi = -items[i].lo;
  }
  int dummy;
  for (int k = 0; k < 2; k++) {
    int64_t t = k == 0            ? sweep(mirror, n, room, a, off, &dummy)
                : n <= GREEDY_MAX ? greedy(items, n, room, a, off, &dummy)
                                  : -1;
    if (t >= 0 && t < top) {
      int64_t *x = best;
      best = off, off = x, top = t;
    }
  }
  for (int i = 0; i < n; i++) items[i].off = best[i];
  return top;
}

bool place_verify(const PlaceItem *items, int n, Arena *a, int *x, int *y) {
  const PlaceItem **start, **end;
  orders(items, n, a, &start, &end);
  Treap live;
  treap_init(&live, a, n + 1);
  for (int i = 0, j = 0; i < n; i++) {
    const PlaceItem *it = start[i];
    for (; j < n && end[j]->hi < it->lo; j++)
      if (occupies(end[j])) erase(&live, end[j]->off, end[j]->key);
    if (!occupies(it)) continue;
    int p = pred(&live, it->off, it->key), s = succ(&live, it->off, it->key);
    // Sizes and offsets are below 2^62 (the planner's bounds): the sums do not overflow.
    if (p >= 0 && live.t[p].off + live.t[p].size > it->off) {
      *x = (int)live.t[p].key, *y = it->key;
      return false;
    }
    if (s >= 0 && it->off + it->bytes > live.t[s].off) {
      *x = it->key, *y = (int)live.t[s].key;
      return false;
    }
    insert(&live, it->off, it->key, it->bytes);
  }
  return true;
}

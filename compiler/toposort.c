// toposort.c: the expand pass's topological sort of the graph's nodes. Kahn's algorithm with a
// min-heap on file order, so independent nodes keep the order they were written in, O(n log n);
// the nodes are then renumbered in that order. Leftover nodes are on or behind a cycle: one cycle
// is found by walking back through leftover producers and reported producer -> consumer.
#include <stdio.h>

#include "expand.h"

static void heap_push(Node **h, int *n, Node *v) {
  int i = (*n)++;
  while (i > 0) {
    int p = (i - 1) / 2;
    if (h[p]->file_order <= v->file_order) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = v;
}

static Node *heap_pop(Node **h, int *n) {
  Node *top = h[0], *v = h[--(*n)];
  int i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && h[c + 1]->file_order < h[c]->file_order) c++;
    if (v->file_order <= h[c]->file_order) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = v;
  return top;
}

bool ex_toposort(Graph *g, Diag *d) {
  int nn = g->nnodes;
  int *indeg = ARENA_ARRAY(g->arena, int, nn + 1);
  Node **heap = ARENA_ARRAY(g->arena, Node *, nn + 1),
       **order = ARENA_ARRAY(g->arena, Node *, nn + 1);
  int hn = 0, on = 0;
  for (int i = 0; i < nn; i++) {
    Node *n = g->nodes[i];
    for (int j = 0; j < n->nin; j++) indeg[i] += n->in[j]->producer != NULL;
    if (!indeg[i]) heap_push(heap, &hn, n);
  }
  graph_link_uses(g);
  while (hn) {
    Node *n = heap_pop(heap, &hn);
    order[on++] = n;
    for (int k = 0; k < n->nout; k++)
      for (int u = 0; u < n->out[k]->nuses; u++) {
        Node *c = n->out[k]->uses[u].node;
        if (--indeg[c->file_order] == 0) heap_push(heap, &hn, c);
      }
  }
  if (on < nn) {
    // Walk backwards from a leftover node through leftover producers until a node repeats.
    Node *start = NULL;
    for (int i = 0; i < nn && !start; i++)
      if (indeg[i]) start = g->nodes[i];
    int *seen = ARENA_ARRAY(g->arena, int, nn + 1);
    Node **path = ARENA_ARRAY(g->arena, Node *, nn + 1);
    int len = 0;
    Node *n = start;
    while (!seen[n->file_order]) {
      seen[n->file_order] = len + 1;
      path[len++] = n;
      Node *p = NULL;
      for (int j = 0; j < n->nin && !p; j++)
        if (n->in[j]->producer && indeg[n->in[j]->producer->file_order]) p = n->in[j]->producer;
      n = p;
    }
    int from = seen[n->file_order] - 1;
    // path[from..len-1] goes consumer -> producer; print producer -> consumer.
    char buf[2048];
    size_t o = 0;
    for (int i = len - 1; i >= from && o < sizeof buf - 8; i--)
      o += (size_t)snprintf(buf + o, sizeof buf - o, "%s -> ", path[i]->name);
    if (o < sizeof buf - 8) snprintf(buf + o, sizeof buf - o, "%s", path[len - 1]->name);
    node_error(d, path[len - 1], "cycle: %s", buf);
    return false;
  }
  for (int i = 0; i < nn; i++) {
    g->nodes[i] = order[i];
    order[i]->id = i;
  }
  graph_link_uses(g);
  return true;
}

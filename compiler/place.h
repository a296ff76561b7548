// Placement of buffers with live intervals in one address range, and its checker: both sweeps
// over time in O(n log n) (place.c).
#ifndef PIPEC_PLACE_H
#define PIPEC_PLACE_H

#include "../ir/arena.h"
#include <stdbool.h>
#include <stdint.h>

typedef struct PlaceItem {
  int64_t bytes; // size (the placer reserves it rounded up to PLACE_ALIGN)
  int lo, hi;    // live interval: first and last position it is live at (inclusive)
  int key;       // identity (for messages) and tie-break for a stable order
  int64_t off;   // result: byte offset of its first byte
} PlaceItem;

enum { PLACE_ALIGN = 64 }; // every offset is a multiple of this

// Sets every item's offset so that no two items live at a common position share a byte. Returns
// the high-water mark (bytes needed), or -1 when an item would end past room (*over: its key).
int64_t place_items(PlaceItem *items, int n, int64_t room, Arena *a, int *over);

// Whether no two items live at a common position share a byte (zero-byte items share none);
// false with the keys of one offending pair in *x and *y. Independent of place_items.
bool place_verify(const PlaceItem *items, int n, Arena *a, int *x, int *y);

#endif

// String -> pointer hash map (open addressing, linear probing, FNV-1a), storage in the arena.
// Keys are not copied: they must outlive the map (arena strings do).
#ifndef PIPEC_STRMAP_H
#define PIPEC_STRMAP_H

#include <stddef.h>

#include "arena.h"

typedef struct StrMapEntry {
  const char *key; // NULL = empty slot
  void *value;     // stored pointer
} StrMapEntry;

typedef struct StrMap {
  Arena *arena;       // where slots are allocated
  StrMapEntry *slots; // power-of-two sized table
  size_t cap;         // slots
  size_t len;         // occupied slots
} StrMap;

void strmap_init(StrMap *m, Arena *a);
void *strmap_get(const StrMap *m, const char *key);
// Inserts key -> value; returns the existing value instead when key is present (no overwrite).
void *strmap_put(StrMap *m, const char *key, void *value);

#endif

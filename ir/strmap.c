// String -> pointer hash map; grows at 50% load by rehashing into a fresh arena table.
#include "strmap.h"

#include <stdint.h>
#include <string.h>

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

void strmap_init(StrMap *m, Arena *a) {
  m->arena = a;
  m->slots = NULL;
  m->cap = 0;
  m->len = 0;
}

void *strmap_get(const StrMap *m, const char *key) {
  if (!m->cap) return NULL;
  size_t i = hash_str(key) & (m->cap - 1);
  for (;;) {
    const StrMapEntry *e = &m->slots[i];
    if (!e->key) return NULL;
    if (strcmp(e->key, key) == 0) return e->value;
    i = (i + 1) & (m->cap - 1);
  }
}

static void insert_slot(StrMapEntry *slots, size_t cap, const char *key, void *value) {
  size_t i = hash_str(key) & (cap - 1);
  while (slots[i].key) i = (i + 1) & (cap - 1);
  slots[i].key = key;
  slots[i].value = value;
}

void *strmap_put(StrMap *m, const char *key, void *value) {
  void *old = strmap_get(m, key);
  if (old) return old;
  if ((m->len + 1) * 2 > m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    StrMapEntry *slots = ARENA_ARRAY(m->arena, StrMapEntry, cap);
    for (size_t i = 0; i < m->cap; i++)
      if (m->slots[i].key) insert_slot(slots, cap, m->slots[i].key, m->slots[i].value);
    m->slots = slots;
    m->cap = cap;
  }
  insert_slot(m->slots, m->cap, key, value);
  m->len++;
  return NULL;
}

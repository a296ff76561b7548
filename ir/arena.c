// Arena allocator: chunks of at least 64 KiB, bump allocation, one free at the end.
#include "arena.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ArenaChunk {
  ArenaChunk *next; // older chunk
  size_t cap;       // usable bytes in data
  _Alignas(16) unsigned char data[];
};

enum { ARENA_CHUNK = 64 * 1024 };

void arena_init(Arena *a) {
  memset(a, 0, sizeof *a);
}

void arena_free(Arena *a) {
  ArenaChunk *c = a->head;
  while (c) {
    ArenaChunk *next = c->next;
    free(c);
    c = next;
  }
  memset(a, 0, sizeof *a);
}

void *arena_alloc(Arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n == 0) n = 16;
  if (!a->head || a->cap - a->used < n) {
    size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
    ArenaChunk *c = malloc(sizeof(ArenaChunk) + cap);
    if (!c) {
      fprintf(stderr, "pipec: error: out of memory (arena chunk of %zu bytes)\n", cap);
      exit(1);
    }
    c->next = a->head;
    c->cap = cap;
    a->head = c;
    a->used = 0;
    a->cap = cap;
  }
  void *p = a->head->data + a->used;
  a->used += n;
  a->total += n;
  memset(p, 0, n);
  return p;
}

void *arena_array(Arena *a, size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n) || n > SIZE_MAX / 2) {
    fprintf(stderr, "pipec: error: out of memory (array of %zu x %zu bytes)\n", count, size);
    exit(1);
  }
  return arena_alloc(a, n);
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
  char *p = arena_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

char *arena_strdup(Arena *a, const char *s) {
  return arena_strndup(a, s, strlen(s));
}

char *arena_printf(Arena *a, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < (int)sizeof buf) return arena_strndup(a, buf, (size_t)n);
  char *p = arena_alloc(a, (size_t)n + 1); // long result: format again into its final place
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

// Arena allocator for the compiler: every IR object, string and table lives in one arena that is
// freed at exit. Allocation is a pointer bump inside large chunks; nothing is freed one by one.
#ifndef PIPEC_ARENA_H
#define PIPEC_ARENA_H

#include <stddef.h>

typedef struct ArenaChunk ArenaChunk;

typedef struct Arena {
  ArenaChunk *head; // newest chunk; older chunks are linked behind it
  size_t used;      // bytes used in head
  size_t cap;       // bytes available in head
  size_t total;     // bytes handed out over the arena's life (for statistics)
} Arena;

void arena_init(Arena *a);
void arena_free(Arena *a);
// Zeroed memory of n bytes, aligned to 16. Aborts with a message when out of memory.
void *arena_alloc(Arena *a, size_t n);
// Zeroed array of count elements of size bytes each; checks the multiplication for overflow.
void *arena_array(Arena *a, size_t count, size_t size);
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define ARENA_NEW(a, T)      ((T *)arena_alloc((a), sizeof(T)))
#define ARENA_ARRAY(a, T, n) ((T *)arena_array((a), (size_t)(n), sizeof(T)))

#endif

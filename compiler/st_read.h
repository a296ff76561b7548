// st_read.h: the compiler's safetensors header reader (the model's "weights" file checked against
// its parameters at compile time, compiler/weights.c). It reads the header alone, never the
// tensors' values, and checks it as the generated program's reader does (runtime/safetensors.c,
// itself the reference reader's rules): the 8-byte length N against the file's size and a limit
// of 100,000,000 bytes; the header valid UTF-8 JSON without a NUL byte, a raw control character
// in a string or an escaped NUL, blanks allowed after it; "__metadata__" an object of strings;
// every other member a tensor of a known dtype, a shape of at most 8 non-negative integers whose
// byte size fits in 64 bits, data offsets [begin, end] inside the data section holding exactly
// that size; names unique; the tensors, sorted by offset, tiling the data section exactly.
#ifndef PIPEC_ST_READ_H
#define PIPEC_ST_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../ir/arena.h"
#include "st_write.h"

#define ST_MAX_HEADER 100000000ULL // bytes: the reference reader's limit on N

typedef struct StEntry {
  const char *name;           // tensor name (arena)
  const char *dtype;          // "F32", "BF16", ... (arena)
  int elem;                   // bytes per element
  int rank;                   // dimensions
  int64_t shape[ST_MAX_RANK]; // sizes
  uint64_t begin, end;        // its bytes, relative to the data section
} StEntry;

typedef struct StHeader {
  uint64_t data_start; // 8 + N: the data section's offset in the file
  uint64_t data_bytes; // the data section's size
  StEntry *e;          // the tensors, in the header's order (arena)
  int n;               // count
  StEntry **by_name;   // the same, sorted by name (st_find; arena)
} StHeader;

// Reads and checks path's header (see the top). False with one line saying why in why (cap
// bytes; it names the file); everything it allocates is in a or freed.
bool st_read_header(const char *path, Arena *a, StHeader *h, char *why, size_t cap);
// The tensor called name, or NULL.
const StEntry *st_find(const StHeader *h, const char *name);

#endif

// The random stream, the byte buffer and the byte mutations of the fuzzers (mutate.h). Each
// mutation picks its position and size from the stream; an empty input only grows (insertions).
#include "mutate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- the random stream

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

void rng_seed(Rng *r, uint64_t seed, uint64_t stream) {
  uint64_t x = seed;
  uint64_t a = splitmix64(&x);
  x = a ^ stream;
  splitmix64(&x);
  r->s = splitmix64(&x);
  if (!r->s) r->s = 1;
}

uint64_t rng_next(Rng *r) {
  uint64_t x = r->s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  r->s = x;
  return x * 0x2545f4914f6cdd1du;
}

uint64_t rng_below(Rng *r, uint64_t n) {
  return n ? rng_next(r) % n : 0;
}

bool rng_chance(Rng *r, int pct) {
  return (int)rng_below(r, 100) < pct;
}

// ---- the buffer

static void buf_reserve(Buf *b, size_t n) {
  if (n <= b->cap) return;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < n) cap *= 2;
  unsigned char *p = realloc(b->p, cap);
  if (!p) {
    fprintf(stderr, "fuzz: out of memory (%zu bytes)\n", cap);
    exit(2);
  }
  b->p = p, b->cap = cap;
}

void buf_set(Buf *b, const void *data, size_t n) {
  buf_reserve(b, n ? n : 1);
  if (n) memmove(b->p, data, n);
  b->n = n;
}

void buf_insert(Buf *b, size_t at, const void *data, size_t n) {
  if (at > b->n) at = b->n;
  buf_reserve(b, b->n + n);
  memmove(b->p + at + n, b->p + at, b->n - at);
  memcpy(b->p + at, data, n);
  b->n += n;
}

void buf_erase(Buf *b, size_t at, size_t n) {
  if (at >= b->n) return;
  if (n > b->n - at) n = b->n - at;
  memmove(b->p + at, b->p + at + n, b->n - at - n);
  b->n -= n;
}

void buf_free(Buf *b) {
  free(b->p);
  *b = (Buf){0};
}

// ---- byte mutations

static const unsigned char INTERESTING8[] = {0,    0xff, 0x7f, 0x80, 0x01, ' ', '"', '\\',
                                             '\n', '{',  '}',  '[',  ']',  ',', ':', '0'};
static const uint64_t INTERESTING[] = {
    0, 1, 0x7f, 0x80, 0xff, 0x7fff, 0x8000, 0xffff, 0x7fffffff, 0x80000000, 0xffffffff, UINT64_MAX};

// A chunk length for b: mostly short, sometimes up to a quarter of the input.
static size_t chunk_len(Rng *r, size_t n) {
  if (n == 0) return 0;
  size_t max = rng_chance(r, 80) ? 16 : n / 4 + 1;
  if (max > n) max = n;
  return 1 + (size_t)rng_below(r, max);
}

// A little-endian integer of 2, 4 or 8 bytes set to a boundary value (or the old one +- 1).
static void set_int(Rng *r, Buf *b) {
  size_t w = (size_t)1 << (1 + rng_below(r, 3));
  if (b->n < w) return;
  size_t at = (size_t)rng_below(r, b->n - w + 1);
  uint64_t v = 0;
  for (size_t i = 0; i < w; i++) v |= (uint64_t)b->p[at + i] << (8 * i);
  switch (rng_below(r, 4)) {
  case 0:
    v += 1;
    break;
  case 1:
    v -= 1;
    break;
  default:
    v = INTERESTING[rng_below(r, sizeof INTERESTING / sizeof INTERESTING[0])];
  }
  for (size_t i = 0; i < w; i++) b->p[at + i] = (unsigned char)(v >> (8 * i));
}

// Inserts (or writes over) a chunk of donor at a random place.
static void splice(Rng *r, Buf *b, const Buf *donor) {
  if (!donor || !donor->n) return;
  size_t len = chunk_len(r, donor->n), from = (size_t)rng_below(r, donor->n - len + 1);
  size_t at = (size_t)rng_below(r, b->n + 1);
  if (rng_chance(r, 50)) { // the donor's tail after b's head: a classic crossover
    b->n = at;
    len = donor->n - from;
  } else if (rng_chance(r, 50) && at + len <= b->n) {
    memcpy(b->p + at, donor->p + from, len);
    return;
  }
  if (b->n + len <= FUZZ_MAX_INPUT) buf_insert(b, at, donor->p + from, len);
}

static void mutate_once(Rng *r, Buf *b, const Buf *donor, const char *const *dict, int ndict) {
  size_t n = b->n;
  switch (rng_below(r, 11)) {
  case 0: // flip one bit
    if (n) b->p[rng_below(r, n)] ^= (unsigned char)(1u << rng_below(r, 8));
    break;
  case 1: // a byte set to an interesting value
    if (n) b->p[rng_below(r, n)] = INTERESTING8[rng_below(r, sizeof INTERESTING8)];
    break;
  case 2: // a random byte
    if (n) b->p[rng_below(r, n)] = (unsigned char)rng_next(r);
    break;
  case 3: // truncated at a random point
    b->n = (size_t)rng_below(r, n + 1);
    break;
  case 4: { // a chunk duplicated (copied to a random place)
    size_t len = chunk_len(r, n), from = (size_t)rng_below(r, n - len + 1);
    if (!len || n + len > FUZZ_MAX_INPUT) break;
    unsigned char *tmp = malloc(len);
    if (!tmp) break;
    memcpy(tmp, b->p + from, len);
    buf_insert(b, (size_t)rng_below(r, n + 1), tmp, len);
    free(tmp);
    break;
  }
  case 5: { // a chunk deleted
    size_t len = chunk_len(r, n);
    buf_erase(b, (size_t)rng_below(r, n - len + 1), len);
    break;
  }
  case 6:
    splice(r, b, donor);
    break;
  case 7:
  case 8: // a dictionary token inserted or written over
    if (ndict && n + 64 <= FUZZ_MAX_INPUT) {
      const char *t = dict[rng_below(r, (uint64_t)ndict)];
      size_t len = strlen(t), at = (size_t)rng_below(r, n + 1);
      if (rng_chance(r, 50) && at + len <= n)
        memcpy(b->p + at, t, len);
      else
        buf_insert(b, at, t, len);
    }
    break;
  case 9:
    set_int(r, b);
    break;
  default: // a run of one byte value (a long number, a deep nesting)
    if (n + 4096 <= FUZZ_MAX_INPUT) {
      size_t len = 1 + (size_t)rng_below(r, rng_chance(r, 90) ? 64 : 4096);
      unsigned char *run = malloc(len);
      if (!run) break;
      memset(run, n ? b->p[rng_below(r, n)] : '[', len);
      buf_insert(b, (size_t)rng_below(r, n + 1), run, len);
      free(run);
    }
    break;
  }
}

void mutate_bytes(Rng *r, Buf *b, const Buf *donor, const char *const *dict, int ndict) {
  int k = 1 + (int)rng_below(r, rng_chance(r, 70) ? 2 : 4);
  for (int i = 0; i < k; i++) mutate_once(r, b, donor, dict, ndict);
}

// The fuzzers' mutations (tests/fuzz/README.md): a seeded random stream, a growable byte buffer,
// and the mutations that turn a seed input into a mutant. Everything is a function of the random
// stream, so mutant i of a run is the same bytes on every machine (harness.c seeds one stream per
// mutant from the run's seed and i).
//
// Byte mutations (mutate.c) know nothing of the format: bit flips, bytes set to interesting
// values (0, 0xff, 0x7f, 0x80, ...), little-endian integers set to boundary values, truncation,
// chunks duplicated, deleted or spliced in from another seed, dictionary tokens inserted.
// Structural JSON mutations (mutate_json.c) parse the text with cJSON and change the tree: a value
// deleted, duplicated (a duplicate key, in objects), replaced by an interesting literal, by another
// value of the same document or by a subtree of another seed, a key renamed, an array reordered;
// printed again, the mutant is valid JSON that reaches the passes behind the parser.
#ifndef PIPEC_FUZZ_MUTATE_H
#define PIPEC_FUZZ_MUTATE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Largest mutant (bytes): duplications stop growing an input here.
enum { FUZZ_MAX_INPUT = 8 << 20 };

typedef struct Rng {
  uint64_t s; // xorshift64* state (never 0)
} Rng;

// Stream `stream` of run seed `seed` (splitmix64 of both: neighbouring streams are unrelated).
void rng_seed(Rng *r, uint64_t seed, uint64_t stream);
uint64_t rng_next(Rng *r);
// Uniform in [0, n) (0 when n is 0).
uint64_t rng_below(Rng *r, uint64_t n);
// True with probability pct / 100.
bool rng_chance(Rng *r, int pct);

typedef struct Buf {
  unsigned char *p; // bytes (malloc'd; not NUL-terminated)
  size_t n;         // bytes used
  size_t cap;       // bytes allocated
} Buf;

void buf_set(Buf *b, const void *data, size_t n);
void buf_insert(Buf *b, size_t at, const void *data, size_t n);
void buf_erase(Buf *b, size_t at, size_t n);
void buf_free(Buf *b);

// Applies 1 to 4 byte mutations to b. donor (may be NULL or empty): another input for splicing;
// dict (ndict entries, may be 0): tokens worth inserting (JSON punctuation, keywords, names).
void mutate_bytes(Rng *r, Buf *b, const Buf *donor, const char *const *dict, int ndict);

// Applies 1 to 4 structural mutations to the JSON text in b (donor: another JSON document to take
// subtrees from, or NULL) and prints the tree back into b. False, b unchanged, when b does not
// parse as JSON.
bool mutate_json_text(Rng *r, Buf *b, const cJSON *donor);
// Replaces 1 to 3 numbers of the JSON text in b (boundary values: 0, -1, 2^31, 2^53 + 1, 1e999,
// or the old value +- 1, doubled, negated) and nothing else, so that a model that passed keeps
// passing the parser and reaches the later passes with odd sizes and settings. False, b unchanged,
// when b does not parse or holds no number.
bool mutate_json_numbers(Rng *r, Buf *b);
// One structural mutation of the tree under root (root itself is never replaced).
void mutate_json_tree(Rng *r, cJSON *root, const cJSON *donor);
// The JSON text of tree into b: indented or compact, by the stream.
void json_print(Rng *r, const cJSON *tree, Buf *b);

#endif

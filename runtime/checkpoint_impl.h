// checkpoint_impl.h: what the one-file checkpoints (checkpoint.c) and the sharded ones
// (shards.c) share inside the runtime: the save id's hash (of tensors in memory, and of a file's
// tensors as a load verifies them, safetensors.c), the step and vocabulary metadata, and the test
// for a save in progress in another process. Not installed; generated code never sees it.
#ifndef PIPERT_CHECKPOINT_IMPL_H
#define PIPERT_CHECKPOINT_IMPL_H

#include "pipert.h"

#define PR_CK_MAX_STEP 9007199254740992LL // 2^53: steps stay exact in the schedule's doubles

// The save id's starting values: the hash of a whole save, of one rank's shards in a sharded
// save, and the word between the parameters and the optimizer state.
#define PR_CK_SEED  0x70697065635f636bULL
#define PR_CK_SHARD 0x7368617264ULL
#define PR_CK_OPTIM 0x6f7074696dULL
#define PR_CK_CORRUPT                                                                              \
  "a file changed on disk after the save (bit rot, a bad copy, an edit): restore the checkpoint "  \
  "from a copy, or load another one"

// One round of the save id's hash: h combined with the word w.
uint64_t pr_ck_mix(uint64_t h, uint64_t w);
// h combined with the bits of x[0..n-1]: 8-byte words, then a last 4-byte one when n is odd (so
// hashing a tensor in pieces of even length gives the same).
uint64_t pr_ck_hash_values(uint64_t h, const float *x, int64_t n);
// h combined with the names, sizes and every value's bits of r[0..n-1], in order.
uint64_t pr_ck_hash_refs(uint64_t h, const PrTensorRef *r, int n);
// The same over the tensors of the file path in the order of their data (the order a save wrote
// them; safetensors.c), continuing *h. False when a tensor is not F32 (no save wrote the file as
// it is); stops the program when the file cannot be read.
bool pr_safetensors_hash(const char *path, uint64_t *h);
// Another running process of this machine (a save in progress there).
bool pr_ck_alive_elsewhere(long pid);
// A step from metadata: decimal digits only, at most 2^53; stops the program naming file else.
int64_t pr_ck_parse_step(const char *file, const char *s);
// The vocabulary as metadata: two hex digits per character (out: 2 n + 1 bytes).
void pr_ck_vocab_hex(char *out, const char *v, int n);
// The characters of "vocab" metadata hex (sorted distinct bytes, two hex digits each) into chars
// (room for 256); their count. Stops the program naming path when hex is not such a list.
int pr_ck_vocab_parse(const char *path, const char *hex, char *chars);
// Refuses a file whose "vocab" metadata differs from c's (a file without one passes).
void pr_ck_check_vocab(const char *path, const PrCheckpoint *c);

#endif

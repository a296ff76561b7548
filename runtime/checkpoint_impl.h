// checkpoint_impl.h: what the one-file checkpoints (checkpoint.c) and the sharded ones
// (shards.c) share inside the runtime: the save id's hash, the step and vocabulary metadata, and
// the test for a save in progress in another process. Not installed; generated code never sees it.
#ifndef PIPERT_CHECKPOINT_IMPL_H
#define PIPERT_CHECKPOINT_IMPL_H

#include "pipert.h"

#define PR_CK_MAX_STEP 9007199254740992LL // 2^53: steps stay exact in the schedule's doubles

// One round of the save id's hash: h combined with the word w.
uint64_t pr_ck_mix(uint64_t h, uint64_t w);
// h combined with the names, sizes and every value's bits of r[0..n-1], in order.
uint64_t pr_ck_hash_refs(uint64_t h, const PrTensorRef *r, int n);
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

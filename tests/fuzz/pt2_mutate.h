// fuzz_pt2's seeds and mutants (tests/fuzz/README.md): a fixture read entry by entry, and the raw
// and structured mutations of a torch.export archive (pt2_mutate.c).
#ifndef PIPEC_FUZZ_PT2_MUTATE_H
#define PIPEC_FUZZ_PT2_MUTATE_H

#include "harness.h"
#include "zip_mutate.h"

// FuzzCase.knob: the archive is libzip's writing with every weight stored or deflated and not
// encrypted, untouched by raw changes: every weight of it must read.
enum { KNOB_INTACT = 1 };

typedef struct SeedInfo {
  ZArchive z;    // the fixture's entries
  char *prefix;  // its folder with its '/': "nanogpt/"
  cJSON *model;  // its models/model.json, parsed (a donor of subtrees)
  cJSON *config; // its data/weights/model_weights_config.json, parsed
} SeedInfo;

// FuzzTarget.load / unload: s->user is its SeedInfo.
bool pt2_seed_load(Seed *s);
void pt2_seed_unload(Seed *s);
// FuzzTarget.mutate.
void pt2_mutate(Rng *r, const Seeds *seeds, FuzzCase *c);

#endif

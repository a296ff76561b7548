// The fuzzers' driver loop (tests/fuzz/README.md): a target (fuzz_json.c, fuzz_pt2.c) says how
// to make mutant i from the seeds and how to run one; fuzz_main reads the seeds, makes and runs
// the mutants one after the other, each from its own random stream (rng_seed(run seed, i)), so
// that `--one I` remakes mutant I alone, and checks what every run reported (fuzz_check_diag).
//
//   fuzz_NAME [--iters N] [--seed S] [--seconds T] [--timeout T] [--one I] [--out DIR]
//             [--from I] [--leak-check] [-v]
//             SEED_FILE_OR_DIR...
//
// The environment overrides the command line (ctest's fixed arguments, a longer local run):
// PIPEC_FUZZ_ITERS, PIPEC_FUZZ_SEED, PIPEC_FUZZ_SECONDS. A mutant that fails an assertion is
// saved as DIR/NAME-S-I.EXT (DIR: --out, else $TMPDIR, else /tmp) and the run goes on; one that
// crashes or runs past --timeout seconds is saved as DIR/NAME-crash.EXT with its index printed,
// and the process dies (the sanitizers' report, or the signal). Exit status: 0 when every mutant
// passed, 1 otherwise, 2 on a usage or setup error.
#ifndef PIPEC_FUZZ_HARNESS_H
#define PIPEC_FUZZ_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mutate.h"

typedef struct Seed {
  const char *path; // as found (a path under a directory given)
  Buf data;         // the file's bytes
  void *user;       // the target's parsed form (FuzzTarget.load), or NULL
} Seed;

typedef struct Seeds {
  Seed *s; // sorted by path: the same order on every machine
  int n;   // count
} Seeds;

// One mutant.
typedef struct FuzzCase {
  Buf input;      // its bytes: what is run and what is saved
  char what[512]; // how it was made, for the report ("samples/gpt_char.json: json tree x2")
  char why[2048]; // the failed assertion ("" when every one held)
  bool verbose;   // -v or --one: the target prints the diagnostics of the run to stderr
  uint64_t knob;  // a choice the target's mutate makes for its run (fuzz_json: the stages S)
} FuzzCase;

typedef struct FuzzTarget {
  const char *name;          // the program's name in messages and saved files: "fuzz_json"
  const char *ext;           // the seeds' extension, also the saved mutants': ".json"
  const char *const *stages; // what stopped a run, by index: "parse", ..., the last "accepted"
  int nstages;               // entries in stages
  // Prepares a seed (s->user); false: the seed is unusable (the run stops with an error).
  bool (*load)(Seed *s);
  void (*unload)(Seed *s);
  // Makes the mutant into c->input and c->what from the stream r.
  void (*mutate)(Rng *r, const Seeds *seeds, FuzzCase *c);
  // Runs the target on c->input and checks it; the index in stages of where it stopped. A failed
  // check writes c->why.
  int (*run)(FuzzCase *c);
} FuzzTarget;

int fuzz_main(int argc, char **argv, const FuzzTarget *t);

// The checks of what one run reported: text is everything written to the Diag (excerpts off) for
// a file named file, errors its error count, rejected whether the run refused the input. A
// rejected input reported at least one error; an accepted one none; every line is one whole
// message "FILE:LINE:COL: error|warning: MESSAGE" (LINE, COL >= 1), "FILE: error|warning:
// MESSAGE" or "pipec: note: MESSAGE", MESSAGE not empty and free of control bytes (a newline in a
// message breaks it in two); with one_error, a rejection is exactly one line. False, with the
// reason in why (cap bytes), when one fails.
bool fuzz_check_diag(const char *text, const char *file, int errors, bool rejected, bool one_error,
                     char *why, size_t cap);

// A seed picked uniformly, and another one for splicing.
const Seed *fuzz_pick(Rng *r, const Seeds *seeds);

#endif

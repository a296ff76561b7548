// rope_table.c: the rotary position embedding's cos and sin tables, computed once per process.
//
// A table is keyed by (T, D, theta): cos then sin of the angles t * inv_freq_i for t < T and
// i < D/2, each (T, D/2), in torch's float32 recipe: e = float(2i) / float(D), inv_freq =
// 1 / float(theta^e), a = float(t) * inv_freq, each operation rounded to float; pow, cos and sin
// are libm's in double, rounded to float (the float nearest the exact result but in rare ties;
// torch's vectorised powf/cosf/sinf may be an ulp away). A generated program prepares the tables
// of its rope nodes at start (pr_rope_prepare, from setup), so the training loop only looks them
// up; a kernel called with a key nobody prepared (a unit test, a gradient check) builds its table
// at that first call. The tables are not parameters and are in no checkpoint: a function of the
// key. This file is built once (not per ISA level): every level's kernels share its tables, and
// libm's double functions give the same bits whatever the level.
#include "pipert.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ROPE_TABLES = 64 }; // distinct (T, D, theta) in one process

typedef struct RopeTable {
  int64_t T, D;   // positions, head dim
  float theta;    // base
  const float *cs; // (2, T, D/2): cos then sin
} RopeTable;

static RopeTable tables[ROPE_TABLES];
static int ntables;

static float *build(int64_t T, int64_t D, float theta) {
  int64_t half = D / 2;
  float *cs = malloc((size_t)(2 * T * half) * sizeof(float));
  prCheck(cs, "the rope tables are 2*T*D/2 floats; give the process more memory",
          "out of memory for a rope table of %lld x %lld", (long long)T, (long long)D);
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = 0; i < half; i++) {
      float e = (float)(2 * i) / (float)D;
      float inv = 1.0f / (float)pow((double)theta, (double)e);
      float a = (float)t * inv;
      cs[t * half + i] = (float)cos((double)a);
      cs[(T + t) * half + i] = (float)sin((double)a);
    }
  return cs;
}

const float *pr_rope_table(int64_t T, int64_t D, float theta) {
  for (int i = 0; i < ntables; i++)
    if (tables[i].T == T && tables[i].D == D && !memcmp(&tables[i].theta, &theta, sizeof theta))
      return tables[i].cs;
  prCheck(T > 0 && D > 0 && D % 2 == 0 && T <= INT64_MAX / D,
          "rope needs positions T >= 1 and an even head dim D", "rope table of T %lld, D %lld",
          (long long)T, (long long)D);
  prCheck(ntables < ROPE_TABLES, "a program has at most 64 distinct rope (T, D, theta)",
          "too many rope tables (T %lld, D %lld, theta %g)", (long long)T, (long long)D,
          (double)theta);
  tables[ntables] = (RopeTable){T, D, theta, build(T, D, theta)};
  return tables[ntables++].cs;
}

void pr_rope_prepare(int64_t T, int64_t D, float theta) {
  (void)pr_rope_table(T, D, theta);
}

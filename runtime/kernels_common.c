// kernels_common.c: the kernel scratch, the accumulate helpers and the id check that every
// kernel family shares (declared in kernels_common.h).
//
// The scratch is a per-thread stack carved from one buffer per thread; the accumulate helpers let
// a kernel compute its contribution in scratch and then add it, rounded, into its output (`acc` =
// 1), so that accumulating a microbatch adds exactly what acc = 0 would produce.
#pragma GCC optimize("fp-contract=off", "no-trapping-math")

#include "kernels_common.h"

#include <stdlib.h>

// Kernel scratch: a per-thread stack carved from one buffer that only grows, so that once the
// kernels have run (the generated program's warm-up before the first step) they allocate nothing.
// Blocks are released in any order; the stack top falls back past released blocks. A request that
// does not fit while blocks are live is served by the heap once, and the buffer is resized to the
// high-water mark when the stack is next empty.
typedef struct ScratchBlock {
  void *p;    // the block
  size_t end; // offset just past it in the buffer (0 for heap blocks)
  bool heap;  // served by aligned_alloc
  bool live;  // not yet released
} ScratchBlock;

static _Thread_local struct {
  char *buf;             // the buffer
  size_t cap, top, want; // its size, the stack top, the high-water mark of a step
  ScratchBlock st[32];   // live and released blocks, in allocation order
  int n;                 // entries in st
} S;

void *pr_scratch(size_t bytes) {
  size_t need = ((bytes ? bytes : 1) + 63) & ~(size_t)63;
  prCheck(S.n < 32, "this is a pipec bug", "kernel scratch: too many live blocks");
  if (S.top + need > S.want) S.want = S.top + need;
  if (S.n == 0 && S.want > S.cap) {
    free(S.buf);
    S.cap = S.want > 65536 ? S.want : 65536;
    S.buf = aligned_alloc(64, S.cap);
    prCheck(S.buf != NULL, "reduce the batch size or the model",
            "out of memory (%zu bytes of kernel scratch)", S.cap);
  }
  ScratchBlock *b = &S.st[S.n++];
  b->live = true;
  if (S.top + need <= S.cap) {
    b->p = S.buf + S.top;
    b->heap = false;
    S.top += need;
    b->end = S.top;
  } else {
    b->p = aligned_alloc(64, need);
    b->heap = true;
    b->end = S.top;
    prCheck(b->p != NULL, "reduce the batch size or the model",
            "out of memory (%zu bytes of kernel scratch)", bytes);
  }
  return b->p;
}

void pr_scratch_free(void *p) {
  if (!p) return;
  for (int i = S.n - 1; i >= 0; i--)
    if (S.st[i].p == p && S.st[i].live) {
      S.st[i].live = false;
      if (S.st[i].heap) free(p);
      break;
    }
  while (S.n > 0 && !S.st[S.n - 1].live) S.n--;
  S.top = S.n ? S.st[S.n - 1].end : 0;
}

// Frees the calling thread's scratch buffer (no block may be live).
static void scratch_release(void) {
  free(S.buf);
  S.buf = NULL;
  S.cap = S.top = S.want = 0;
  S.n = 0;
}

void pr_release_scratch(void) {
  // Each thread of a team frees its own buffer; the team the kernels ran in is reused (libgomp
  // keeps its pool), and the calling thread's is freed too (the only one with --threads 1).
  PR_PARALLEL(1, { scratch_release(); });
  scratch_release();
}

// out = acc ? out + t : t (t is the already rounded contribution)
static void store_acc(float *restrict out, const float *restrict t, int64_t n, int acc) {
  if (acc) {
    PR_PARALLEL_FOR(n >= 4 * PAR_MIN, (int64_t i = 0; i < n; i++), out[i] = out[i] + t[i]);
  } else {
    memcpy(out, t, (size_t)n * sizeof(float));
  }
}

// Where a kernel computes its contribution: the output itself, or (acc) scratch that
// acc_finish then adds into the output and releases.
float *pr_acc_target(float *out, int64_t n, int acc) {
  return acc ? pr_scratch((size_t)n * sizeof(float)) : out;
}

void pr_acc_finish(float *out, float *t, int64_t n, int acc) {
  if (!acc) return;
  store_acc(out, t, n, 1);
  pr_scratch_free(t);
}

// prChecks that every id lies in [0, V).
void pr_check_ids(const char *what, const int32_t *idx, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; i++)
    prCheck(idx[i] >= 0 && idx[i] < V,
            "ids must lie in [0, vocab_size): check that the data was tokenized with the model's "
            "vocabulary and that vocab_size (or the number of classes) is large enough",
            "%s: id %d at position %lld is outside [0, %lld)", what, (int)idx[i], (long long)i,
            (long long)V);
}

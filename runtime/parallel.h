// parallel.h: how the runtime threads a loop without ever entering a serialized OpenMP region
// (internal to the runtime; used by the kernels, kernels_common.h, and the optimizers, optim.c).
//
// libgomp allocates and frees a team for every parallel region that runs on one thread (its `if`
// clause false, or one thread set), which would put a malloc in every training step. So a loop
// whose work is too small to split, or that runs with --threads 1, runs directly on the calling
// thread instead: the macros below take the body once and expand it twice, into the OpenMP
// region and into the plain loop. Both copies compute every element the same way (the kernels
// never let the split over threads change a result: kernels_common.h), so the output is bitwise
// the same on either path. A body may not contain `return` or `#pragma` (a `_Pragma` works), and
// error lines point at the macro's first line.

#ifndef PIPERT_PARALLEL_H
#define PIPERT_PARALLEL_H

#include "pipert.h" // pr_threads

// PR_PARALLEL_FOR(cond, (head), body): `for (head) body`, its iterations split statically over
// the kernels' threads when cond holds and there is more than one thread (pr_threads()). (Not
// clang-formatted: it would split `for head`.)
// clang-format off
#define PR_PARALLEL_FOR(cond, head, ...)                                                           \
  do {                                                                                             \
    if ((cond) && pr_threads() > 1) {                                                              \
      _Pragma("omp parallel for schedule(static)") for head {                                      \
        __VA_ARGS__;                                                                               \
      }                                                                                            \
    } else {                                                                                       \
      for head {                                                                                   \
        __VA_ARGS__;                                                                               \
      }                                                                                            \
    }                                                                                              \
  } while (0)
// clang-format on

// PR_PARALLEL(cond, block): block on every one of the kernels' threads when cond holds and there
// is more than one, else once on the calling thread. A loop in the block that the threads share
// is an `_Pragma("omp for schedule(static)")`, which on the calling thread alone (no region)
// runs every iteration; omp_get_thread_num() and omp_get_num_threads() are 0 and 1 there.
#define PR_PARALLEL(cond, ...)                                                                     \
  do {                                                                                             \
    if ((cond) && pr_threads() > 1) {                                                              \
      _Pragma("omp parallel") __VA_ARGS__                                                          \
    } else {                                                                                       \
      __VA_ARGS__                                                                                  \
    }                                                                                              \
  } while (0)

#endif // PIPERT_PARALLEL_H

// train.c: the checks of a training step's numbers. Each step the generated program sums the
// squared global gradient norm (parameters in canonical order, each one's pr_sumsq: the very sum
// gradient clipping uses, so clipping's numbers do not change) and stops, before the optimizer
// applies anything, the first time the loss or that norm is not finite; an evaluation stops on a
// non-finite validation loss. A NaN never trains on silently and never reaches a saved file.
#include "kernels_common.h" // pr_scratch, PR_PARALLEL
#include "pipert.h"

#include <math.h>
#include <omp.h>

double pr_grad_norm2(const PrGrad *p, int count) {
  // Each parameter's pr_sumsq on one thread, then summed here in canonical order: the bits do not
  // depend on the thread count. Parameter i goes to the thread whose equal share of all the
  // elements holds its middle (sizes differ: gpt_char's run from 128 to 65,536 elements); the
  // threads pick their own, no OpenMP schedule (a dynamic one allocates in libgomp every step:
  // tests/alloc). This ran on one thread: 0.8 M elements a gpt_char step.
  double *s = pr_scratch((size_t)(count > 0 ? count : 1) * sizeof(double));
  int64_t total = 0;
  for (int i = 0; i < count; i++) total += p[i].g ? p[i].n : 0;
  PR_PARALLEL(total >= 65536 && count > 1, {
    int64_t nt = omp_get_num_threads(), me = omp_get_thread_num(), at = 0;
    for (int i = 0; i < count; i++) {
      int64_t ni = p[i].g ? p[i].n : 0, owner = total > 0 ? (at + ni / 2) * nt / total : 0;
      if ((owner < nt ? owner : nt - 1) == me) s[i] = ni ? pr_sumsq(p[i].g, ni) : 0.0;
      at += ni;
    }
  });
  double norm2 = 0;
  for (int i = 0; i < count; i++)
    if (p[i].g) norm2 += s[i];
  pr_scratch_free(s);
  return norm2;
}

// Index of the first parameter (canonical order) whose gradient holds a NaN or an infinity, or -1.
int pr_first_nonfinite_grad(const PrGrad *p, int count) {
  for (int i = 0; i < count; i++) {
    if (!p[i].g) continue;
    for (int64_t k = 0; k < p[i].n; k++)
      if (!isfinite(p[i].g[k])) return i;
  }
  return -1;
}

// A non-finite value as text: "NaN" (whatever its sign bit), "inf" or "-inf".
static const char *nonfinite(double v) {
  return isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf";
}

static const char *const hint_train =
    "the run diverged: lower --lr, check the data for extreme values, or clip the gradients "
    "(training.grad_clip)";

void pr_check_step(int64_t step, double loss, double norm2, const PrGrad *p, int count) {
  if (isfinite(loss) && isfinite(norm2)) return;
  int bad = isfinite(loss) ? pr_first_nonfinite_grad(p, count) : -1;
  pr_check_step_named(step, loss, norm2, bad >= 0 ? p[bad].name : NULL);
}

void pr_check_step_named(int64_t step, double loss, double norm2, const char *first_bad) {
  prCheck(isfinite(loss), hint_train, "step %lld: the loss is %s; stopped before the update",
          (long long)step, nonfinite(loss));
  prCheck(isfinite(norm2), hint_train,
          "step %lld: the gradient norm is %s (first non-finite gradient: '%s'); stopped before "
          "the update",
          (long long)step, nonfinite(norm2), first_bad ? first_bad : "none, the sum overflows");
}

void pr_check_val_loss(int64_t step, double loss) {
  prCheck(isfinite(loss),
          "the parameters or the validation data hold extreme values: lower --lr, check the data",
          "step %lld: the validation loss is %s", (long long)step, nonfinite(loss));
}

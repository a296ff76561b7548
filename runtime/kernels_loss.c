// kernels_loss.c: the losses (cross-entropy over logits with integer targets, mean squared error)
// with their backward, and count_correct for evaluation accuracy.
//
// The loss of a batch is a mean whose terms are summed in double in ascending row (element)
// order, so it does not depend on the thread count; cross-entropy's row softmax is softmax_row
// (kernels_common.h).
#pragma GCC optimize("fp-contract=off", "no-trapping-math")

#include "kernels_common.h"

// loss = mean over rows of logsumexp(logits_r) - logits_r[tgt_r], row terms summed in double
void pr_cross_entropy_fwd(float *loss, const float *logits, const int32_t *tgt, int64_t rows,
                          int64_t V) {
  pr_check_ids("cross_entropy target", tgt, rows, V);
  double *term = pr_scratch((size_t)(rows ? rows : 1) * sizeof(double));
  PR_PARALLEL(rows * V >= PAR_MIN, {
    float *e = pr_scratch((size_t)V * sizeof(float));
    _Pragma("omp for schedule(static)") for (int64_t r = 0; r < rows; r++) {
      const float *restrict x = logits + r * V;
      float m = max_f(x, V);
      for (int64_t i = 0; i < V; i++) e[i] = exp_f(x[i] - m);
      term[r] = ((double)m + log((double)sum_f(e, V))) - (double)x[tgt[r]];
    }
    pr_scratch_free(e);
  });
  double s = 0.0;
  for (int64_t r = 0; r < rows; r++) s += term[r];
  pr_scratch_free(term);
  loss[0] = rows ? (float)(s / (double)rows) : 0.0f;
}

// dlogits (rows,V) = (softmax(logits) - onehot(tgt)) * dloss / rows
void pr_cross_entropy_bwd(float *dlogits, const float *dloss, const float *logits,
                          const int32_t *tgt, int64_t rows, int64_t V, int acc) {
  pr_check_ids("cross_entropy target", tgt, rows, V);
  if (rows == 0) return;
  float gscale = dloss[0] / (float)rows;
  PR_PARALLEL(rows * V >= PAR_MIN, {
    float *p = pr_scratch((size_t)V * sizeof(float));
    _Pragma("omp for schedule(static)") for (int64_t r = 0; r < rows; r++) {
      float *restrict out = dlogits + r * V;
      softmax_row(p, logits + r * V, V);
      p[tgt[r]] -= 1.0f;
      if (acc)
        for (int64_t i = 0; i < V; i++) out[i] = out[i] + p[i] * gscale;
      else
        for (int64_t i = 0; i < V; i++) out[i] = p[i] * gscale;
    }
    pr_scratch_free(p);
  });
}

// loss = mean (p - t)^2 over n, summed in double in ascending order
void pr_mse_fwd(float *loss, const float *p, const float *t, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double d = (double)p[i] - (double)t[i];
    s += d * d;
  }
  loss[0] = n ? (float)(s / (double)n) : 0.0f;
}

// which = 0: dp = 2 (p - t) dloss / n; which = 1: dt = -(that)
void pr_mse_bwd(float *dx, const float *dloss, const float *p, const float *t, int64_t n, int which,
                int acc) {
  if (n == 0) return;
  float g = (which ? -2.0f : 2.0f) * dloss[0] / (float)n;
  if (acc)
    UNARY_FOR(dx[i] = dx[i] + (p[i] - t[i]) * g);
  else
    UNARY_FOR(dx[i] = (p[i] - t[i]) * g);
}
// rows (of logits (rows,V)) whose argmax (ties: lowest index) equals tgt
int64_t pr_count_correct(const float *logits, const int32_t *tgt, int64_t rows, int64_t V) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float *x = logits + r * V;
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
      if (x[i] > x[best]) best = i;
    count += V > 0 && best == tgt[r];
  }
  return count;
}

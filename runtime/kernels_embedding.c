// kernels_embedding.c: embedding lookup y (n,C) = w (V,C)[idx (n)] and its weight gradient.
//
// Ids are checked against V (pr_check_ids). The backward buckets ids with a stable counting sort
// so that one thread builds each row of dw, summing its dy rows in ascending position order.
#pragma GCC optimize("fp-contract=off", "no-trapping-math")

#include "kernels_common.h"

// ---------------------------------------------------------------------------------------------
// embedding: y (n,C) = w (V,C)[idx (n)]

void pr_embedding_fwd(float *y, const int32_t *idx, const float *w, int64_t n, int64_t V,
                      int64_t C) {
  pr_check_ids("embedding", idx, n, V);
  for (int64_t i = 0; i < n; i++)
    memcpy(y + i * C, w + (int64_t)idx[i] * C, (size_t)C * sizeof(float));
}

// dw (V,C): row v = sum of dy rows i with idx[i] == v, i ascending. Ids are bucketed (counting
// sort, stable) so each row of dw is built by one thread.
void pr_embedding_bwd_w(float *dw, const float *dy, const int32_t *idx, int64_t n, int64_t V,
                        int64_t C, int acc) {
  pr_check_ids("embedding backward", idx, n, V);
  int64_t *start = pr_scratch((size_t)(V + 1) * sizeof(int64_t));
  int64_t *order = pr_scratch((size_t)(n ? n : 1) * sizeof(int64_t));
  memset(start, 0, (size_t)(V + 1) * sizeof(int64_t));
  for (int64_t i = 0; i < n; i++) start[idx[i] + 1]++;
  for (int64_t v = 0; v < V; v++) start[v + 1] += start[v];
  for (int64_t i = 0; i < n; i++) order[start[idx[i]]++] = i; // start[v] now = end of bucket v
  PR_PARALLEL(V * C >= PAR_MIN, {
    float *tmp = acc ? pr_scratch((size_t)C * sizeof(float)) : NULL;
    _Pragma("omp for schedule(static)") for (int64_t v = 0; v < V; v++) {
      int64_t b0 = v == 0 ? 0 : start[v - 1], b1 = start[v];
      float *restrict row = dw + v * C;
      if (b0 == b1) {
        if (!acc) memset(row, 0, (size_t)C * sizeof(float));
        continue;
      }
      float *restrict t = acc ? tmp : row; // the contribution
      memcpy(t, dy + order[b0] * C, (size_t)C * sizeof(float));
      for (int64_t k = b0 + 1; k < b1; k++) {
        const float *restrict d = dy + order[k] * C;
        for (int64_t j = 0; j < C; j++) t[j] += d[j];
      }
      if (acc)
        for (int64_t j = 0; j < C; j++) row[j] = row[j] + t[j];
    }
    pr_scratch_free(tmp);
  });
  pr_scratch_free(order);
  pr_scratch_free(start);
}

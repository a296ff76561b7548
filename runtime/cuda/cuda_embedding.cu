// cuda_embedding.cu: embedding lookup and its deterministic weight gradient. The backward never
// uses atomics: one thread sorts the ids into buckets (a stable counting sort, O(n + V), as the
// CPU's), then one thread per element of dw sums its bucket's dy rows in ascending position order,
// so the result is the CPU's bit for bit.
#include "cuda_common.cuh"

__global__ void embedding_fwd_k(float *y, const int32_t *idx, const float *w, int64_t n, int64_t V,
                                int64_t C, int *flag) {
  GRID_FOR(e, n * C) {
    int64_t i = e / C, j = e % C;
    int32_t v = idx[i];
    if (v < 0 || v >= V) {
      y[e] = 0.0f;
      *flag = 1; // racing writes of the same value: no atomic needed
    } else
      y[e] = w[(int64_t)v * C + j];
  }
}
void pr_cu_embedding_fwd(float *y, const int32_t *idx, const float *w, int64_t n, int64_t V,
                         int64_t C) {
  if (n * C <= 0) return;
  embedding_fwd_k<<<pr_cu_blocks(n * C), PR_CU_THREADS, 0, pr_cu_s()>>>(y, idx, w, n, V, C,
                                                                        pr_cu_status_flag());
  cudaCheckLaunch();
}

size_t pr_cu_embedding_bwd_scratch(int64_t n, int64_t V) {
  return (size_t)(V + 1 + n) * sizeof(int64_t);
}

// start (V+1): bucket ends after the sort (bucket v = [start[v-1], start[v])); order (n).
__global__ void embedding_bucket_k(int64_t *start, int64_t *order, const int32_t *idx, int64_t n,
                                   int64_t V, int *flag) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (int64_t v = 0; v <= V; v++) start[v] = 0;
  for (int64_t i = 0; i < n; i++) {
    int32_t v = idx[i];
    if (v < 0 || v >= V)
      *flag = 1;
    else
      start[v + 1]++;
  }
  for (int64_t v = 0; v < V; v++) start[v + 1] += start[v];
  for (int64_t i = 0; i < n; i++) {
    int32_t v = idx[i];
    if (v >= 0 && v < V) order[start[v]++] = i;
  }
}
__global__ void embedding_bwd_k(float *dw, const float *dy, const int64_t *start,
                                const int64_t *order, int64_t V, int64_t C, int acc) {
  GRID_FOR(e, V * C) {
    int64_t v = e / C, j = e % C;
    int64_t b0 = v == 0 ? 0 : start[v - 1], b1 = start[v];
    float t = 0.0f;
    if (b0 < b1) {
      t = dy[order[b0] * C + j];
      for (int64_t k = b0 + 1; k < b1; k++) t += dy[order[k] * C + j];
    }
    dw[e] = acc ? dw[e] + t : t;
  }
}
void pr_cu_embedding_bwd_w(float *dw, const float *dy, const int32_t *idx, int64_t n, int64_t V,
                           int64_t C, int acc) {
  if (V * C <= 0) return;
  int64_t *start =
      (int64_t *)pr_cu_take_scratch(pr_cu_embedding_bwd_scratch(n, V), "embedding backward");
  int64_t *order = start + V + 1;
  embedding_bucket_k<<<1, 1, 0, pr_cu_s()>>>(start, order, idx, n, V, pr_cu_status_flag());
  cudaCheckLaunch();
  embedding_bwd_k<<<pr_cu_blocks(V * C), PR_CU_THREADS, 0, pr_cu_s()>>>(dw, dy, start, order, V, C,
                                                                        acc);
  cudaCheckLaunch();
}

// cuda_layout.cu: data movement on 4-byte elements: copy (cudaMemcpyAsync), permute (one thread
// per output element gathering through x's strides), split, concat, slice and pad (one thread per
// element of the moved rows; pad fills zeros first). Exact: no arithmetic but slice's and pad's
// accumulate.
#include "cuda_common.cuh"

#include <string.h>

void pr_cu_copy(void *y, const void *x, int64_t bytes) {
  if (y != x && bytes > 0)
    cudaCheck(cudaMemcpyAsync(y, x, (size_t)bytes, cudaMemcpyDeviceToDevice, pr_cu_s()));
}

typedef struct Perm8 { // y's dims and their strides in x
  int rank;            // dims
  int64_t d[8];        // y's sizes
  int64_t s[8];        // x's stride of each of y's dims
} Perm8;
__global__ void permute_k(uint32_t *y, const uint32_t *x, Perm8 p, int64_t total) {
  GRID_FOR(i, total) {
    int64_t r = i, off = 0;
    for (int k = p.rank - 1; k >= 0; k--) {
      off += (r % p.d[k]) * p.s[k];
      r /= p.d[k];
    }
    y[i] = x[off];
  }
}
void pr_cu_permute(void *y, const void *x, int rank, const int64_t *xdims, const int64_t *perm) {
  prCheck(rank >= 0 && rank <= 8, "this is a pipec bug", "pr_cu_permute: rank %d unsupported",
          rank);
  int64_t xstr[8], total = 1;
  int seen = 0;
  for (int i = rank - 1; i >= 0; i--) {
    xstr[i] = total;
    total *= xdims[i];
  }
  Perm8 p;
  memset(&p, 0, sizeof p);
  p.rank = rank;
  for (int i = 0; i < rank; i++) {
    prCheck(perm[i] >= 0 && perm[i] < rank && !(seen & (1 << perm[i])), "this is a pipec bug",
            "pr_cu_permute: perm is not a permutation of %d dims", rank);
    seen |= 1 << perm[i];
    p.d[i] = xdims[perm[i]];
    p.s[i] = xstr[perm[i]];
  }
  if (total == 0) return;
  permute_k<<<pr_cu_blocks(total), PR_CU_THREADS, 0, pr_cu_s()>>>((uint32_t *)y,
                                                                  (const uint32_t *)x, p, total);
  cudaCheckLaunch();
}

// dst (outer, n) <- src (outer, ld) at column off: dst[o*n + i] = src[o*ld + off + i] (acc: +=);
// src NULL: zeros. Used by split, concat and slice.
__global__ void rows_k(float *dst, int64_t dld, int64_t doff, const float *src, int64_t sld,
                       int64_t soff, int64_t outer, int64_t n, int acc) {
  GRID_FOR(e, outer * n) {
    int64_t o = e / n, i = e % n;
    float v = src ? src[o * sld + soff + i] : 0.0f;
    float *d = dst + o * dld + doff + i;
    *d = acc ? *d + v : v;
  }
}
static void rows(float *dst, int64_t dld, int64_t doff, const float *src, int64_t sld, int64_t soff,
                 int64_t outer, int64_t n, int acc) {
  if (outer * n <= 0) return;
  rows_k<<<pr_cu_blocks(outer * n), PR_CU_THREADS, 0, pr_cu_s()>>>(dst, dld, doff, src, sld, soff,
                                                                   outer, n, acc);
  cudaCheckLaunch();
}

void pr_cu_split(float *const *ys, const float *x, int64_t outer, int64_t inner, int n,
                 const int64_t *sizes) {
  int64_t total = 0, off = 0;
  for (int k = 0; k < n; k++) total += sizes[k];
  for (int k = 0; k < n; k++) {
    if (ys[k])
      rows(ys[k], sizes[k] * inner, 0, x, total * inner, off * inner, outer, sizes[k] * inner, 0);
    off += sizes[k];
  }
}

void pr_cu_concat(float *y, const float *const *xs, int64_t outer, int64_t inner, int n,
                  const int64_t *sizes) {
  int64_t total = 0, off = 0;
  for (int k = 0; k < n; k++) total += sizes[k];
  for (int k = 0; k < n; k++) {
    rows(y, total * inner, off * inner, xs[k], sizes[k] * inner, 0, outer, sizes[k] * inner, 0);
    off += sizes[k];
  }
}

void pr_cu_slice(float *dx, const float *dy, int64_t outer, int64_t inner, int64_t total,
                 int64_t offset, int64_t size, int acc) {
  rows(dx, size * inner, 0, dy, total * inner, offset * inner, outer, size * inner, acc);
}

void pr_cu_pad(float *dx, const float *dy, int64_t outer, int64_t inner, int64_t total,
               int64_t offset, int64_t size, int acc) {
  if (!acc) pr_cu_fill(dx, outer * total * inner, 0.0f);
  rows(dx, total * inner, offset * inner, dy, size * inner, 0, outer, size * inner, acc);
}

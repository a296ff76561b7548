// kernels_layout.c: data movement on 4-byte elements (f32 or i32): copy, permute, split, concat
// and slice (the backward of a slice-like read, optionally accumulating; the slice op), and pad
// (the slice op's backward).
//
// permute collapses dims (kernels_common.h) and then copies rows, transposes the last two dims
// in 32x32 tiles, or gathers along the innermost dim; the others are row memcpys.
#pragma GCC optimize("fp-contract=off", "no-trapping-math")

#include "kernels_common.h"

void pr_copy(void *y, const void *x, int64_t bytes) {
  if (y != x && bytes > 0) memmove(y, x, (size_t)bytes);
}

// y (n0,n1) = x (n1,n0)^T for one contiguous matrix, in 32x32 tiles.
static void transpose2d(uint32_t *restrict y, const uint32_t *restrict x, int64_t n0, int64_t n1) {
  for (int64_t i0 = 0; i0 < n0; i0 += 32)
    for (int64_t j0 = 0; j0 < n1; j0 += 32) {
      int64_t ie = i0 + 32 < n0 ? i0 + 32 : n0, je = j0 + 32 < n1 ? j0 + 32 : n1;
      for (int64_t i = i0; i < ie; i++)
        for (int64_t j = j0; j < je; j++) y[i * n1 + j] = x[j * n0 + i];
    }
}

// y dims[i] = x dims[perm[i]], rank <= 8
void pr_permute(void *y_, const void *x_, int rank, const int64_t *xdims, const int64_t *perm) {
  prCheck(rank >= 0 && rank <= 8, "this is a pipec bug", "pr_permute: rank %d unsupported", rank);
  uint32_t *y = y_;
  const uint32_t *x = x_;
  int64_t xstr[8], total = 1;
  int seen = 0;
  for (int i = rank - 1; i >= 0; i--) {
    xstr[i] = total;
    total *= xdims[i];
  }
  for (int i = 0; i < rank; i++) {
    prCheck(perm[i] >= 0 && perm[i] < rank && !(seen & (1 << perm[i])), "this is a pipec bug",
            "pr_permute: perm is not a permutation of %d dims", rank);
    seen |= 1 << perm[i];
  }
  if (total == 0) return;
  // y's dims with their strides in x, size-1 dims dropped, x-consecutive neighbours merged
  int64_t d[8], s[8];
  int r = 0;
  for (int i = 0; i < rank; i++) {
    int64_t n = xdims[perm[i]], st = xstr[perm[i]];
    if (n == 1) continue;
    if (r > 0 && s[r - 1] == st * n) {
      d[r - 1] *= n;
      s[r - 1] = st;
      continue;
    }
    d[r] = n;
    s[r] = st;
    r++;
  }
  if (r <= 1) { // identity after collapsing
    memcpy(y, x, (size_t)total * 4);
    return;
  }
  if (s[r - 1] == 1) { // innermost dim contiguous in x: copy rows
    int64_t inner = d[r - 1], outer = total / inner;
    const int64_t(*sp)[8] = (const int64_t(*)[8])s;
    PR_PARALLEL_FOR(total >= PAR_MIN, (int64_t o = 0; o < outer; o++), {
      int64_t off;
      row_offsets(o, r, d, 1, sp, &off);
      memcpy(y + o * inner, x + off, (size_t)inner * 4);
    });
    return;
  }
  if (s[r - 2] == 1 && s[r - 1] == d[r - 2]) { // last two dims transposed: tiled per matrix
    int64_t n0 = d[r - 2], n1 = d[r - 1], mats = total / (n0 * n1);
    int64_t dd[8], ss[1][8];
    for (int i = 0; i < r - 2; i++) dd[i] = d[i], ss[0][i] = s[i];
    dd[r - 2] = 1; // row_offsets ignores the last entry
    PR_PARALLEL_FOR(total >= PAR_MIN, (int64_t mi = 0; mi < mats; mi++), {
      int64_t off;
      row_offsets(mi, r - 1, dd, 1, (const int64_t(*)[8])ss, &off);
      transpose2d(y + mi * n0 * n1, x + off, n0, n1);
    });
    return;
  }
  // general: gather along the innermost dim
  int64_t inner = d[r - 1], outer = total / inner, is = s[r - 1];
  const int64_t(*sp)[8] = (const int64_t(*)[8])s;
  PR_PARALLEL_FOR(total >= PAR_MIN, (int64_t o = 0; o < outer; o++), {
    int64_t off;
    row_offsets(o, r, d, 1, sp, &off);
    uint32_t *restrict yr = y + o * inner;
    const uint32_t *restrict xr = x + off;
    for (int64_t j = 0; j < inner; j++) yr[j] = xr[j * is];
  });
}

// ys[k] (outer,sizes[k],inner) = x (outer,sum(sizes),inner)[:, off_k:off_k+sizes[k], :]
void pr_split(float *const *ys, const float *x, int64_t outer, int64_t inner, int n,
              const int64_t *sizes) {
  int64_t total = 0;
  for (int k = 0; k < n; k++) total += sizes[k];
  for (int64_t o = 0; o < outer; o++) {
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
      if (ys[k])
        memcpy(ys[k] + o * sizes[k] * inner, x + (o * total + off) * inner,
               (size_t)(sizes[k] * inner) * sizeof(float));
      off += sizes[k];
    }
  }
}

// y (outer,sum(sizes),inner) = concat of xs[k] (outer,sizes[k],inner); NULL reads as zeros
void pr_concat(float *y, const float *const *xs, int64_t outer, int64_t inner, int n,
               const int64_t *sizes) {
  int64_t total = 0;
  for (int k = 0; k < n; k++) total += sizes[k];
  for (int64_t o = 0; o < outer; o++) {
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
      float *dst = y + (o * total + off) * inner;
      size_t bytes = (size_t)(sizes[k] * inner) * sizeof(float);
      if (xs[k])
        memcpy(dst, xs[k] + o * sizes[k] * inner, bytes);
      else
        memset(dst, 0, bytes);
      off += sizes[k];
    }
  }
}

// dx (outer,size,inner) = dy (outer,total,inner)[:, offset:offset+size, :]
void pr_slice(float *dx, const float *dy, int64_t outer, int64_t inner, int64_t total,
              int64_t offset, int64_t size, int acc) {
  int64_t n = size * inner;
  for (int64_t o = 0; o < outer; o++) {
    float *restrict dst = dx + o * n;
    const float *restrict src = dy + (o * total + offset) * inner;
    if (acc)
      for (int64_t i = 0; i < n; i++) dst[i] = dst[i] + src[i];
    else
      memcpy(dst, src, (size_t)n * sizeof(float));
  }
}

void pr_pad(float *dx, const float *dy, int64_t outer, int64_t inner, int64_t total, int64_t offset,
            int64_t size, int acc) {
  int64_t n = size * inner;
  for (int64_t o = 0; o < outer; o++) {
    float *restrict dst = dx + (o * total + offset) * inner;
    const float *restrict src = dy + o * n;
    if (acc) {
      for (int64_t i = 0; i < n; i++) dst[i] = dst[i] + src[i];
      continue;
    }
    memset(dx + o * total * inner, 0, (size_t)(offset * inner) * sizeof(float));
    memcpy(dst, src, (size_t)n * sizeof(float));
    memset(dst + n, 0, (size_t)((total - offset - size) * inner) * sizeof(float));
  }
}

// cuda_elementwise.cu: broadcasting binary ops and their reducing backward, scale, the
// activations (relu, gelu, tanh, sigmoid, silu, SwiGLU's silu(g) * u), exp, rsqrt, pow by a
// constant, add_n, fill, accumulate, and the fused bias + GELU.
// One thread per output element (grid-stride); the activations use the CPU's polynomials
// (cuda_common.cuh), so with --fmad=false they compute the CPU's bits. binary_bwd: one thread per
// element of dx, summing its dy elements in ascending row-major order (the CPU's order).
#include "cuda_common.cuh"

#include <string.h>

typedef struct Dims8 { // a shape and up to 3 stride sets, passed by value to a kernel
  int rank;            // dims used
  int64_t d[8];        // sizes
  int64_t s[3][8];     // element strides of up to three operands over those dims
} Dims8;

__global__ void binary_fwd_k(float *y, const float *a, const float *b, int op, Dims8 g,
                             int64_t total) {
  GRID_FOR(i, total) {
    int64_t r = i, oa = 0, ob = 0;
    for (int k = g.rank - 1; k >= 0; k--) {
      int64_t q = r % g.d[k];
      r /= g.d[k];
      oa += q * g.s[0][k];
      ob += q * g.s[1][k];
    }
    float av = a[oa], bv = b[ob];
    y[i] = op == 0 ? av + bv : op == 1 ? av - bv : op == 2 ? av * bv : av / bv;
  }
}

void pr_cu_binary_fwd(float *y, const float *a, const float *b, int op, int rank,
                      const int64_t *ydims, const int64_t *astr, const int64_t *bstr) {
  prCheck(rank >= 0 && rank <= 8 && op >= 0 && op <= 3, "this is a pipec bug",
          "pr_cu_binary_fwd: rank %d / op %d unsupported", rank, op);
  Dims8 g;
  memset(&g, 0, sizeof g);
  int64_t total = 1;
  g.rank = rank;
  for (int i = 0; i < rank; i++) {
    g.d[i] = ydims[i];
    g.s[0][i] = astr[i];
    g.s[1][i] = bstr[i];
    total *= ydims[i];
  }
  if (total == 0) return;
  binary_fwd_k<<<pr_cu_blocks(total), PR_CU_THREADS, 0, pr_cu_s()>>>(y, a, b, op, g, total);
  cudaCheckLaunch();
}

// g.d: x's dims (1 where broadcast); g.s[0]: the reduced dims' sizes (y's size where x is 1,
// else 1); y strides g.s[1]; other's strides g.s[2]. Thread per x element: it walks the
// y elements mapping to it in ascending row-major order.
__global__ void binary_bwd_k(float *dx, const float *dy, const float *other, float sign,
                             const Dims8 g, int64_t nx, int64_t nred, int acc) {
  GRID_FOR(ix, nx) {
    int64_t xi[8], r = ix;
    for (int k = g.rank - 1; k >= 0; k--) {
      xi[k] = r % g.d[k];
      r /= g.d[k];
    }
    float t = 0.0f;
    for (int64_t j = 0; j < nred; j++) { // j: row-major index over the reduced dims
      int64_t rj = j, oy = 0, oo = 0;
      for (int k = g.rank - 1; k >= 0; k--) {
        int64_t red = g.s[0][k];
        int64_t yk = red > 1 ? rj % red : xi[k];
        if (red > 1) rj /= red;
        oy += yk * g.s[1][k];
        oo += yk * g.s[2][k];
      }
      float v = dy[oy];
      t += other ? v * other[oo] : sign * v;
    }
    dx[ix] = acc ? dx[ix] + t : t;
  }
}

void pr_cu_binary_bwd(float *dx, const float *dy, const float *other, int op, int which, int rank,
                      const int64_t *ydims, const int64_t *xdims, const int64_t *ostr, int acc) {
  prCheck(rank >= 0 && rank <= 8 && op >= 0 && op <= 2 && (op != 2 || other != NULL),
          "this is a pipec bug", "pr_cu_binary_bwd: rank %d / op %d unsupported", rank, op);
  Dims8 g;
  memset(&g, 0, sizeof g);
  g.rank = rank;
  int64_t nx = 1, nred = 1, ys = 1;
  for (int i = rank - 1; i >= 0; i--) {
    g.d[i] = xdims[i];
    g.s[0][i] = xdims[i] == 1 ? ydims[i] : 1;
    g.s[1][i] = ys;
    g.s[2][i] = op == 2 ? ostr[i] : 0;
    ys *= ydims[i];
    nx *= xdims[i];
    nred *= g.s[0][i];
  }
  if (nx == 0) return;
  float sign = (op == 1 && which == 1) ? -1.0f : 1.0f;
  if (ys == 0) nred = 0; // an empty y: dx = 0
  binary_bwd_k<<<pr_cu_blocks(nx), PR_CU_THREADS, 0, pr_cu_s()>>>(dx, dy, op == 2 ? other : NULL,
                                                                  sign, g, nx, nred, acc);
  cudaCheckLaunch();
}

// div's backward as binary_bwd_k: g.d x's dims, g.s[0] the reduced sizes, g.s[1] y's strides,
// g.s[2] / g.s[3] a's / b's strides over y's dims; a thread per x element summing in ascending
// row-major order. which 0: dy / b; 1: (-dy * a) / (b * b).
typedef struct Dims8x4 {
  int rank;
  int64_t d[8];
  int64_t s[4][8];
} Dims8x4;

__global__ void div_bwd_k(float *dx, const float *dy, const float *a, const float *b, int which,
                          const Dims8x4 g, int64_t nx, int64_t nred, int acc) {
  GRID_FOR(ix, nx) {
    int64_t xi[8], r = ix;
    for (int k = g.rank - 1; k >= 0; k--) {
      xi[k] = r % g.d[k];
      r /= g.d[k];
    }
    float t = 0.0f;
    for (int64_t j = 0; j < nred; j++) {
      int64_t rj = j, oy = 0, oa = 0, ob = 0;
      for (int k = g.rank - 1; k >= 0; k--) {
        int64_t red = g.s[0][k];
        int64_t yk = red > 1 ? rj % red : xi[k];
        if (red > 1) rj /= red;
        oy += yk * g.s[1][k];
        oa += yk * g.s[2][k];
        ob += yk * g.s[3][k];
      }
      float v = dy[oy], bv = b[ob];
      t += which == 0 ? v / bv : (-v * a[oa]) / (bv * bv);
    }
    dx[ix] = acc ? dx[ix] + t : t;
  }
}

void pr_cu_div_bwd(float *dx, const float *dy, const float *a, const float *b, int which, int rank,
                   const int64_t *ydims, const int64_t *xdims, const int64_t *astr,
                   const int64_t *bstr, int acc) {
  prCheck(rank >= 0 && rank <= 8 && (which == 0 || which == 1), "this is a pipec bug",
          "pr_cu_div_bwd: rank %d / operand %d unsupported", rank, which);
  Dims8x4 g;
  memset(&g, 0, sizeof g);
  g.rank = rank;
  int64_t nx = 1, nred = 1, ys = 1;
  for (int i = rank - 1; i >= 0; i--) {
    g.d[i] = xdims[i];
    g.s[0][i] = xdims[i] == 1 ? ydims[i] : 1;
    g.s[1][i] = ys;
    g.s[2][i] = astr[i];
    g.s[3][i] = bstr[i];
    ys *= ydims[i];
    nx *= xdims[i];
    nred *= g.s[0][i];
  }
  if (nx == 0) return;
  if (ys == 0) nred = 0; // an empty y: dx = 0
  div_bwd_k<<<pr_cu_blocks(nx), PR_CU_THREADS, 0, pr_cu_s()>>>(dx, dy, a, b, which, g, nx, nred,
                                                               acc);
  cudaCheckLaunch();
}

// One kernel per unary formula; acc as everywhere.
#define UNARY(name, ARGS, EXPR)                                                                    \
  __global__ void name##_k ARGS {                                                                  \
    GRID_FOR(i, n) {                                                                               \
      EXPR;                                                                                        \
    }                                                                                              \
  }
#define LAUNCH(name, ...)                                                                          \
  do {                                                                                             \
    if (n <= 0) return;                                                                            \
    name##_k<<<pr_cu_blocks(n), PR_CU_THREADS, 0, pr_cu_s()>>>(__VA_ARGS__);                       \
    cudaCheckLaunch();                                                                             \
  } while (0)

UNARY(scale_fwd, (float *y, const float *x, int64_t n, float f), y[i] = x[i] * f)
UNARY(scale_bwd, (float *dx, const float *dy, int64_t n, float f, int acc),
      dx[i] = acc ? dx[i] + dy[i] * f : dy[i] * f)
UNARY(relu_fwd, (float *y, const float *x, int64_t n), y[i] = x[i] <= 0.0f ? 0.0f : x[i])
UNARY(relu_bwd, (float *dx, const float *dy, const float *y, int64_t n, int acc), {
  float v = y[i] <= 0.0f ? 0.0f : dy[i];
  dx[i] = acc ? dx[i] + v : v;
})
UNARY(gelu_fwd, (float *y, float *cdf, const float *x, int64_t n, int exact), {
  float c = exact ? cu_gelu_phi(x[i]) : cu_gelu_s(x[i]);
  if (cdf) cdf[i] = c;
  y[i] = x[i] * c;
})
UNARY(gelu_bwd,
      (float *dx, const float *dy, const float *x, const float *cdf, int64_t n, int exact, int acc),
      {
        float c = cdf ? cdf[i] : exact ? cu_gelu_phi(x[i]) : cu_gelu_s(x[i]);
        float v = dy[i] * (exact ? cu_gelu_exact_grad_c(x[i], c) : cu_gelu_grad_c(x[i], c));
        dx[i] = acc ? dx[i] + v : v;
      })
UNARY(tanh_fwd, (float *y, const float *x, int64_t n), y[i] = cu_tanh_f(x[i]))
UNARY(tanh_bwd, (float *dx, const float *dy, const float *y, int64_t n, int acc), {
  float v = dy[i] * (1.0f - y[i] * y[i]);
  dx[i] = acc ? dx[i] + v : v;
})
UNARY(sigmoid_fwd, (float *y, const float *x, int64_t n), y[i] = cu_sigmoid_f(x[i]))
UNARY(sigmoid_bwd, (float *dx, const float *dy, const float *y, int64_t n, int acc), {
  float v = dy[i] * (y[i] * (1.0f - y[i]));
  dx[i] = acc ? dx[i] + v : v;
})
UNARY(silu_fwd, (float *y, const float *x, int64_t n), y[i] = x[i] * cu_sigmoid_f(x[i]))
UNARY(silu_bwd, (float *dx, const float *dy, const float *x, int64_t n, int acc), {
  float s = cu_sigmoid_f(x[i]);
  float v = dy[i] * (s * (1.0f + x[i] * (1.0f - s)));
  dx[i] = acc ? dx[i] + v : v;
})
UNARY(silu_mul_fwd, (float *y, const float *g, const float *u, int64_t n), {
  float s = g[i] * cu_sigmoid_f(g[i]);
  y[i] = s * u[i];
})
UNARY(silu_mul_bwd,
      (float *dg, float *du, const float *dy, const float *g, const float *u, int64_t n, int acc),
      {
        float sg = cu_sigmoid_f(g[i]);
        float s = g[i] * sg;
        float ds = dy[i] * u[i];
        float vg = ds * (sg * (1.0f + g[i] * (1.0f - sg)));
        float vu = dy[i] * s;
        dg[i] = acc ? dg[i] + vg : vg;
        du[i] = acc ? du[i] + vu : vu;
      })
UNARY(exp_fwd, (float *y, const float *x, int64_t n), {
  float h = cu_exp_f(0.5f * x[i]);
  y[i] = x[i] > 88.0f ? h * h : cu_exp_f(x[i]);
})
UNARY(exp_bwd, (float *dx, const float *dy, const float *y, int64_t n, int acc), {
  float v = dy[i] * y[i];
  dx[i] = acc ? dx[i] + v : v;
})
UNARY(rsqrt_fwd, (float *y, const float *x, int64_t n), y[i] = 1.0f / sqrtf(x[i]))
UNARY(rsqrt_bwd, (float *dx, const float *dy, const float *y, int64_t n, int acc), {
  float v = dy[i] * (-0.5f * (y[i] * y[i] * y[i]));
  dx[i] = acc ? dx[i] + v : v;
})
// x^e as the CPU's pow_e: k = pow_int(e), products for an integer, powf otherwise.
// pow_int is pr_pow_int of runtime/pipert.h (an integer of magnitude <= 64, else INT32_MIN).
static int pow_int(float e) {
  return e >= -64.0f && e <= 64.0f && e == (float)(int)e ? (int)e : INT32_MIN;
}
__device__ inline float cu_ipow_f(float x, int k) {
  float r = 1.0f, b = x;
  for (; k; k >>= 1) {
    if (k & 1) r = r * b;
    if (k > 1) b = b * b;
  }
  return r;
}
__device__ inline float cu_pow_e(float x, float e, int k) {
  if (k == INT32_MIN) return powf(x, e);
  return k >= 0 ? cu_ipow_f(x, k) : 1.0f / cu_ipow_f(x, -k);
}
UNARY(pow_fwd, (float *y, const float *x, int64_t n, float e, int k), y[i] = cu_pow_e(x[i], e, k))
UNARY(pow_bwd, (float *dx, const float *dy, const float *x, int64_t n, float e, int k, int acc), {
  float v = e == 0.0f ? 0.0f : dy[i] * (e * cu_pow_e(x[i], e - 1.0f, k));
  dx[i] = acc ? dx[i] + v : v;
})
UNARY(fill, (float *y, int64_t n, float value), y[i] = value)
UNARY(accumulate, (float *y, const float *x, int64_t n, int acc), y[i] = acc ? y[i] + x[i] : x[i])

void pr_cu_scale_fwd(float *y, const float *x, int64_t n, float f) {
  LAUNCH(scale_fwd, y, x, n, f);
}
void pr_cu_scale_bwd(float *dx, const float *dy, int64_t n, float f, int acc) {
  LAUNCH(scale_bwd, dx, dy, n, f, acc);
}
void pr_cu_relu_fwd(float *y, const float *x, int64_t n) {
  LAUNCH(relu_fwd, y, x, n);
}
void pr_cu_relu_bwd(float *dx, const float *dy, const float *y, int64_t n, int acc) {
  LAUNCH(relu_bwd, dx, dy, y, n, acc);
}
void pr_cu_gelu_fwd(float *y, float *cdf, const float *x, int64_t n, int exact) {
  LAUNCH(gelu_fwd, y, cdf, x, n, exact);
}
void pr_cu_gelu_bwd(float *dx, const float *dy, const float *x, const float *cdf, int64_t n,
                    int exact, int acc) {
  LAUNCH(gelu_bwd, dx, dy, x, cdf, n, exact, acc);
}
void pr_cu_tanh_fwd(float *y, const float *x, int64_t n) {
  LAUNCH(tanh_fwd, y, x, n);
}
void pr_cu_tanh_bwd(float *dx, const float *dy, const float *y, int64_t n, int acc) {
  LAUNCH(tanh_bwd, dx, dy, y, n, acc);
}
void pr_cu_sigmoid_fwd(float *y, const float *x, int64_t n) {
  LAUNCH(sigmoid_fwd, y, x, n);
}
void pr_cu_sigmoid_bwd(float *dx, const float *dy, const float *y, int64_t n, int acc) {
  LAUNCH(sigmoid_bwd, dx, dy, y, n, acc);
}
void pr_cu_silu_fwd(float *y, const float *x, int64_t n) {
  LAUNCH(silu_fwd, y, x, n);
}
void pr_cu_silu_bwd(float *dx, const float *dy, const float *x, int64_t n, int acc) {
  LAUNCH(silu_bwd, dx, dy, x, n, acc);
}
void pr_cu_silu_mul_fwd(float *y, const float *g, const float *u, int64_t n) {
  LAUNCH(silu_mul_fwd, y, g, u, n);
}
void pr_cu_silu_mul_bwd(float *dg, float *du, const float *dy, const float *g, const float *u,
                        int64_t n, int acc) {
  LAUNCH(silu_mul_bwd, dg, du, dy, g, u, n, acc);
}
void pr_cu_exp_fwd(float *y, const float *x, int64_t n) {
  LAUNCH(exp_fwd, y, x, n);
}
void pr_cu_exp_bwd(float *dx, const float *dy, const float *y, int64_t n, int acc) {
  LAUNCH(exp_bwd, dx, dy, y, n, acc);
}
void pr_cu_rsqrt_fwd(float *y, const float *x, int64_t n) {
  LAUNCH(rsqrt_fwd, y, x, n);
}
void pr_cu_rsqrt_bwd(float *dx, const float *dy, const float *y, int64_t n, int acc) {
  LAUNCH(rsqrt_bwd, dx, dy, y, n, acc);
}
void pr_cu_pow_fwd(float *y, const float *x, int64_t n, float exponent) {
  LAUNCH(pow_fwd, y, x, n, exponent, pow_int(exponent));
}
void pr_cu_pow_bwd(float *dx, const float *dy, const float *x, int64_t n, float exponent, int acc) {
  LAUNCH(pow_bwd, dx, dy, x, n, exponent, pow_int(exponent - 1.0f), acc);
}
void pr_cu_fill(float *y, int64_t n, float value) {
  LAUNCH(fill, y, n, value);
}
void pr_cu_accumulate(float *y, const float *x, int64_t n, int acc) {
  LAUNCH(accumulate, y, x, n, acc);
}

#define ADD_N_MAX 16
typedef struct Ptrs16 { // up to 16 device pointers, by value
  const float *p[ADD_N_MAX];
} Ptrs16;
__global__ void add_n_k(float *y, Ptrs16 xs, int k, int64_t n) {
  GRID_FOR(i, n) {
    float t = xs.p[0][i];
    for (int j = 1; j < k; j++) t += xs.p[j][i];
    y[i] = t;
  }
}
void pr_cu_add_n(float *y, const float *const *xs, int k, int64_t n) {
  prCheck(k <= ADD_N_MAX, "this is a pipec bug", "pr_cu_add_n: %d inputs (at most %d)", k,
          ADD_N_MAX);
  if (k <= 0) {
    pr_cu_fill(y, n, 0.0f);
    return;
  }
  Ptrs16 p;
  memset(&p, 0, sizeof p);
  for (int j = 0; j < k; j++) p.p[j] = xs[j];
  LAUNCH(add_n, y, p, k, n);
}

__global__ void bias_gelu_k(float *y, float *pre, const float *x, const float *bias, int64_t rows,
                            int64_t C) {
  GRID_FOR(i, rows * C) {
    float v = x[i] + bias[i % C];
    if (pre) pre[i] = v;
    y[i] = v * cu_gelu_s(v);
  }
}
void pr_cu_bias_gelu_fwd(float *y, float *pre, const float *x, const float *bias, int64_t rows,
                         int64_t C) {
  int64_t n = rows * C;
  LAUNCH(bias_gelu, y, pre, x, bias, rows, C);
}

// optim.c: the learning-rate schedule (PrLrSchedule: lr over the steps, not the pipeline's
// schedule of actions) and optimizers.
//
// Learning rate (pr_lr_at): nanoGPT's get_lr (train.py, current version), step `it` counting from
// 0:
//     if it < warmup:             lr * (it + 1) / (warmup + 1)
//     if decay == 0:              lr                      (constant after the warmup)
//     if it > decay:              min_lr
//     if decay <= warmup:         min_lr                  (nanoGPT divides by zero here)
//     else: ratio = (it - warmup) / (decay - warmup);
//           min_lr + 0.5 * (1 + cos(pi * ratio)) * (lr - min_lr)
// all in double.
//
// Optimizers compute in float, mirroring PyTorch's single-tensor CPU implementations
// (torch/optim/adamw.py _single_tensor_adamw, sgd.py _single_tensor_sgd, foreach=False) one
// tensor operation at a time, with the scalars computed in double as Python does and rounded to
// float as ATen does. In ATen's CPU kernels `add_(x, alpha=a)` is a fused multiply-add
// (vec::fmadd(x, a, self)) and addcmul's `self + s*t1*t2` is compiled to fma(s*t1, t2, self);
// mul/div/sqrt/addcdiv round each operation. So, per element (f() rounds a double to float; g is
// the gradient times gscale, rounded: clip_grad_norm_'s in-place scale, 1 without clipping):
//   AdamW (t >= 1):
//     p = p * f(1 - lr*wd)
//     m = fmaf(g, f(1 - b1), m * f(b1))
//     v = fmaf(f(1 - b2) * g, g, v * f(b2))
//     bc1 = 1 - b1^t; bc2 = 1 - b2^t  (double, pow)
//     denom = sqrtf(v) / f(sqrt(bc2)) + f(eps)
//     p = p + (f(-(lr / bc1)) * m) / denom
//   SGD (dampening 0, no Nesterov):
//     d = wd != 0 ? fmaf(p, f(wd), g) : g
//     momentum != 0: buf = (t == 1) ? d : buf * f(momentum) + d;  d = buf
//     p = fmaf(d, f(-lr), p)
// Verified bit-for-bit against Debian's torch 1.13.1 (CPU, AVX2 kernels) over three steps with
// changing lr on tensors of 16, 37, 4096 and 100000 elements (p, m, v and the momentum buffer).
// Other PyTorch builds may contract differently (an ulp here and there). The training loop updates
// all the parameters with pr_adamw_params: one parallel region over the tensors (one per tensor
// cost gpt_char 8 wake-ups of the threads a step and left 20 small tensors on one thread), the
// per-element formula the same inline function as pr_adamw_step's.
#pragma GCC optimize("fp-contract=off")
#include "parallel.h"
#include "pipert.h"

#include <math.h>

double pr_lr_at(const PrLrSchedule *s, int64_t step) {
  if (step < s->warmup) return s->lr * (double)(step + 1) / (double)(s->warmup + 1);
  if (s->decay == 0) return s->lr;
  if (step > s->decay) return s->min_lr;
  if (s->decay <= s->warmup) return s->min_lr;
  double ratio = (double)(step - s->warmup) / (double)(s->decay - s->warmup);
  double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
  return s->min_lr + coeff * (s->lr - s->min_lr);
}

// AdamW's per-tensor constants (the scalars in double, rounded to float as ATen does).
typedef struct Adamw {
  float decay, b1, omb1, b2, omb2, neg_step, bc2_sqrt, eps;
} Adamw;

static Adamw adamw_consts(double lr, double beta1, double beta2, double eps, double weight_decay,
                          int64_t t) {
  const double bc1 = 1.0 - pow(beta1, (double)t);
  const double bc2 = 1.0 - pow(beta2, (double)t);
  return (Adamw){.decay = (float)(1.0 - lr * weight_decay),
                 .b1 = (float)beta1,
                 .omb1 = (float)(1.0 - beta1),
                 .b2 = (float)beta2,
                 .omb2 = (float)(1.0 - beta2),
                 .neg_step = (float)(-(lr / bc1)),
                 .bc2_sqrt = (float)sqrt(bc2),
                 .eps = (float)eps};
}

// Element i of one tensor's update (the formula at the top of this file); inlined into loops
// that GCC vectorises.
static inline void adamw_elem(const Adamw *c, float *restrict p, const float *restrict g,
                              float gscale, float *restrict m, float *restrict v, int64_t i) {
  float pi = p[i] * c->decay;
  float gi = g[i] * gscale;
  float mi = fmaf(gi, c->omb1, m[i] * c->b1);
  float vi = fmaf(c->omb2 * gi, gi, v[i] * c->b2);
  float denom = sqrtf(vi) / c->bc2_sqrt + c->eps;
  p[i] = pi + (c->neg_step * mi) / denom;
  m[i] = mi;
  v[i] = vi;
}

void pr_adamw_step(float *p, const float *g, float gscale, float *m, float *v, int64_t n, double lr,
                   double beta1, double beta2, double eps, double weight_decay, int64_t t) {
  prCheck(t >= 1, "the optimizer step counts from 1", "pr_adamw_step: t = %lld", (long long)t);
  const Adamw c = adamw_consts(lr, beta1, beta2, eps, weight_decay, t);
  // Elementwise: splitting over threads cannot change any element's result.
  PR_PARALLEL_FOR(n >= 65536, (int64_t i = 0; i < n; i++), adamw_elem(&c, p, g, gscale, m, v, i));
}

void pr_adamw_params(const PrParam *params, int count, float gscale, double lr, double beta1,
                     double beta2, double eps, double weight_decay, int64_t t) {
  prCheck(t >= 1, "the optimizer step counts from 1", "pr_adamw_params: t = %lld", (long long)t);
  int64_t total = 0;
  for (int k = 0; k < count; k++)
    if (params[k].grad && params[k].data) total += params[k].n;
  // One parallel region for all the tensors instead of one per tensor (gpt_char: 8 regions, each
  // waking the threads, and 20 small tensors on one thread): each tensor's elements split
  // statically over the threads, `nowait` (the tensors are independent), one barrier at the end.
  PR_PARALLEL(total >= 65536, {
    for (int k = 0; k < count; k++) {
      const PrParam *q = &params[k];
      if (!q->grad || !q->data) continue;
      const Adamw c = adamw_consts(lr, beta1, beta2, eps, q->decay ? weight_decay : 0.0, t);
      float *p = q->data, *m = q->m, *v = q->v;
      const float *g = q->grad;
      _Pragma("omp for schedule(static) nowait") for (int64_t i = 0; i < q->n; i++)
          adamw_elem(&c, p, g, gscale, m, v, i);
    }
  });
}

void pr_sgd_step(float *p, const float *g, float gscale, float *buf, int64_t n, double lr,
                 double momentum, double weight_decay, int64_t t) {
  prCheck(t >= 1, "the optimizer step counts from 1", "pr_sgd_step: t = %lld", (long long)t);
  const float wd = (float)weight_decay, mom = (float)momentum, neg_lr = (float)(-lr);
  const int use_wd = weight_decay != 0.0, use_mom = momentum != 0.0;
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i] * gscale;
    float d = use_wd ? fmaf(p[i], wd, gi) : gi;
    if (use_mom) {
      d = (t == 1) ? d : buf[i] * mom + d;
      buf[i] = d;
    }
    p[i] = fmaf(d, neg_lr, p[i]);
  }
}

double pr_sumsq(const float *g, int64_t n) {
  // 16 independent chains (one addition's latency each per 16 elements, not per element); the
  // combination is fixed: pairs (j, j+8), then (j, j+4), (j, j+2), (0, 1).
  double l[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; j++) l[j] += (double)g[i + j] * (double)g[i + j];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; j++) l[j] += l[j + w];
  double s = l[0];
  for (; i < n; i++) s += (double)g[i] * (double)g[i];
  return s;
}

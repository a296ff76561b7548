// half.c: 16-bit storage of a --precision bf16|fp16 program: the conversions between f32 and the
// 16-bit formats, the narrowing of the parameters' 16-bit copies from their f32 master weights,
// and fp16's dynamic loss scaler.
//
// The conversions (half_impl.h) are the same bits at every ISA level (tests/e2e/march.sh's
// promise): bf16 rounds to nearest even from f32 (a NaN stays a quiet NaN, an overflow becomes
// inf); fp16 is IEEE binary16, round to nearest even, overflow to inf, subnormals kept, NaN
// quiet. Widening is exact in both. The generated program calls the array forms
// (kernels_half.c) pr_bf16_widen / pr_f16_widen on every 16-bit operand of a kernel call (into
// the rank's conversion area) and pr_*_narrow on every 16-bit result (compiler/precision.c says
// which tensors).
#include <math.h>
#include <string.h>

#include "half_impl.h"
#include "pipert.h"

uint16_t pr_bf16_from_f32(float f) {
  return bf16_from_f32(f);
}

float pr_bf16_to_f32(uint16_t h) {
  return bf16_to_f32(h);
}

uint16_t pr_f16_from_f32(float f) {
  return f16_from_f32(f);
}

float pr_f16_to_f32(uint16_t h) {
  return f16_to_f32(h);
}

void pr_params_narrow(const PrProgram *p) {
  for (int i = 0; i < p->nparams; i++) {
    const PrParam *q = &p->params[i];
    if (!q->half || !q->data || q->tied) continue; // a tied entry shares its owner's copy
    (p->precision == PR_FP16 ? pr_f16_narrow : pr_bf16_narrow)(q->half, q->data, q->n);
  }
}

void pr_scaler_start(PrScaler *s, const PrProgram *p, double scale, int64_t window, bool report) {
  *s = (PrScaler){p, scale, 1.0 / scale, window, 0, 0, 0, report};
}

void pr_scaler_seed(const PrScaler *s) {
  if (s->p->seed_offset >= 0)
    *(float *)(*s->p->region[PR_NREGIONS - 1] + s->p->seed_offset) =
        (float)((double)s->p->seed_value * s->scale);
}

bool pr_scaler_skip(PrScaler *s, int64_t step, double *norm2) {
  s->inv = 1.0 / s->scale;
  if (!isfinite(*norm2)) { // an inf or NaN in some gradient (of any rank): skip, halve
    int was;
    frexp(s->scale, &was); // the scale is 2^(was - 1)
    prCheck(s->scale > 0x1p-24,
            "the model diverged (check the learning rate), or train it in bf16 or f32",
            "step %lld: fp16: the gradients are not finite even at loss scale 2^%d (%lld steps "
            "skipped before)",
            (long long)step + 1, was - 1, (long long)s->skipped);
    s->scale /= 2, s->good = 0, s->skipped++, s->skipped_all++;
    if (s->report)
      printf("step %lld: fp16 gradient overflow at loss scale 2^%d: step skipped, loss scale "
             "2^%d\n",
             (long long)step + 1, was - 1, was - 2);
    return true;
  }
  *norm2 *= s->inv * s->inv;                              // exact: a power of two
  if (++s->good == s->window) s->scale *= 2, s->good = 0; // from the next step on
  return false;
}

void pr_scaler_text(const PrScaler *s, char *out) {
  snprintf(out, PR_SCALE_TEXT, "%.17g %lld %lld", s->scale, (long long)s->good,
           (long long)s->skipped_all);
}

void pr_scaler_restore(PrScaler *s, const char *text, const char *file) {
  double scale;
  long long good, all;
  int ex, used = 0;
  bool ok = sscanf(text, "%lf %lld %lld%n", &scale, &good, &all, &used) == 3 &&
            text[used] == '\0' && frexp(scale, &ex) == 0.5 && ex >= -23 && ex <= 121 && good >= 0 &&
            all >= 0;
  prCheck(ok, "resume from a checkpoint saved by an fp16 program of this version of pipec",
          "%s: metadata 'loss_scale' is '%.40s'; expected a power of two and two counts of steps",
          file, text);
  s->scale = scale, s->good = good, s->skipped_all = all;
}

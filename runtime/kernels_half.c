// kernels_half.c: the array conversions of --precision between f32 and bf16 / fp16, one of the
// kernel sources built at every ISA level (isa_kernels.h). Element by element as the scalar
// functions of half_impl.h; the v3 and v4 builds convert fp16 eight at a time with F16C
// (vcvtps2ph with round-to-nearest-even, vcvtph2ps), which gives the same bits: IEEE binary16
// conversions, their NaNs as half_impl.h makes them (the runtime never sets MXCSR's DAZ, so f32
// subnormals convert as values). tests/unit's test_half_conversions checks the arrays against
// the scalars at each level the machine has.
#include "half_impl.h"
#include "pipert.h"

#ifdef __F16C__
#include <immintrin.h>
#endif

void pr_bf16_widen(float *dst, const uint16_t *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

void pr_bf16_narrow(uint16_t *dst, const float *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = bf16_from_f32(src[i]);
}

void pr_f16_widen(float *dst, const uint16_t *src, int64_t n) {
  int64_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
  for (; i < n; i++) dst[i] = f16_to_f32(src[i]);
}

void pr_f16_narrow(uint16_t *dst, const float *src, int64_t n) {
  int64_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(
        (__m128i *)(dst + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; i++) dst[i] = f16_from_f32(src[i]);
}

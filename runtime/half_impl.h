// half_impl.h: the scalar conversions between f32 and the 16-bit formats of --precision, shared
// by half.c (the exported scalar functions) and kernels_half.c (the array conversions, built at
// every ISA level). Integer code: the same bits on every x86-64. bf16: round to nearest even,
// a NaN stays a quiet NaN; fp16: IEEE binary16, round to nearest even, overflow to inf,
// subnormals kept, a NaN quiet with the top of its payload (what F16C's vcvtps2ph and vcvtph2ps
// do, so that the v3 and v4 builds may use them).
#ifndef PIPERT_HALF_IMPL_H
#define PIPERT_HALF_IMPL_H

#include <stdint.h>
#include <string.h>

static inline uint16_t bf16_from_f32(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); // quiet NaN
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

static inline float bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static inline uint16_t f16_from_f32(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); // NaN
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); // >= 65520: rounds to inf
  if (ax < 0x38800000u) {                                   // below 2^-14: subnormal or zero
    if (ax <= 0x33000000u) return (uint16_t)sign;           // <= 2^-25: to zero (ties even)
    uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ax - 0x38000000u, h = r >> 13, rem = r & 0x1fffu; // exponent rebiased 127 -> 15
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;         // a carry moves the exponent
  return (uint16_t)(sign | h);
}

static inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  if (e == 0x1f) // inf, or a NaN made quiet (as F16C's vcvtph2ps does)
    x = sign | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0);
  else if (e == 0) { // zero or subnormal: m * 2^-24, exact in f32
    float f = (float)m * 0x1p-24f;
    memcpy(&x, &f, 4);
    x |= sign;
  } else
    x = sign | ((e + 112) << 23) | (m << 13);
  float f;
  memcpy(&f, &x, 4);
  return f;
}

#endif

// init.c: random numbers and parameter initialisation.
//
// Every parameter's values are a pure function of (seed, name), so that partitioning a model over
// stages cannot change them. Exact definitions (all integer arithmetic modulo 2^64):
//
//   pr_hash_name(name)  FNV-1a 64 over the bytes of name:
//                         h = 0xcbf29ce484222325; for each byte c: h = (h ^ c) * 0x100000001b3
//   pr_splitmix64(&s)   s += 0x9e3779b97f4a7c15; z = s;
//                       z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
//                       z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
//                       return z ^ (z >> 31)
//   pr_uniform01(&s)    (pr_splitmix64(&s) >> 11) * 2^-53            in [0, 1)
//
// A parameter's stream starts at s = seed ^ pr_hash_name(name). Then, in double precision,
// each value rounded to float at the end:
//   uniform(a, b):  p[i] = a + (b - a) * u,  u = pr_uniform01(&s), i = 0, 1, ...
//   xavier(gain, fan_in, fan_out): uniform(-bound, bound), bound = gain * sqrt(6 / (fan_in +
//   fan_out)) normal(mean, std): Box-Muller on pairs: for i = 0, 2, 4, ...
//       u1 = pr_uniform01(&s); u2 = pr_uniform01(&s);
//       r = sqrt(-2 * log(1 - u1)); th = 2 * pi * u2;
//       p[i] = mean + std * r * cos(th);  p[i+1] = mean + std * r * sin(th)  (when i+1 < n)
//     (std * r * cos(th) is evaluated as (std * r) * cos(th); an odd n drops the last sine.)
// No fused multiply-adds (fp-contract is off in this file), so the values do not depend on the
// compiler's target and a Python reimplementation with math.log/cos/sin reproduces them.
#pragma GCC optimize("fp-contract=off")
#include "pipert.h"

#include <math.h>

uint64_t pr_hash_name(const char *name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
    h ^= *c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t pr_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double pr_uniform01(uint64_t *state) {
  return (double)(pr_splitmix64(state) >> 11) * 0x1.0p-53;
}

void pr_init_zeros(float *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) p[i] = 0.0f;
}

void pr_init_ones(float *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) p[i] = 1.0f;
}

void pr_init_normal(float *p, int64_t n, uint64_t seed, const char *name, double mean, double std) {
  uint64_t s = seed ^ pr_hash_name(name);
  const double two_pi = 6.283185307179586; // 2 * math.pi, exactly as Python computes it
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = pr_uniform01(&s);
    double u2 = pr_uniform01(&s);
    double r = sqrt(-2.0 * log(1.0 - u1));
    double th = two_pi * u2;
    double sr = std * r;
    p[i] = (float)(mean + sr * cos(th));
    if (i + 1 < n) p[i + 1] = (float)(mean + sr * sin(th));
  }
}

void pr_init_uniform(float *p, int64_t n, uint64_t seed, const char *name, double a, double b) {
  uint64_t s = seed ^ pr_hash_name(name);
  double w = b - a;
  for (int64_t i = 0; i < n; i++) p[i] = (float)(a + w * pr_uniform01(&s));
}

void pr_init_xavier(float *p, int64_t n, uint64_t seed, const char *name, double gain,
                    int64_t fan_in, int64_t fan_out) {
  prCheck(fan_in + fan_out > 0, "xavier needs a parameter of rank >= 2 with non-zero sizes",
          "xavier init of '%s': fan_in + fan_out = %lld", name, (long long)(fan_in + fan_out));
  double bound = gain * sqrt(6.0 / (double)(fan_in + fan_out));
  pr_init_uniform(p, n, seed, name, -bound, bound);
}

// e^x and ln x for float32 written without branches, so that a loop calling them vectorises
// (`#pragma omp simd`) where std::exp / std::log stay one element at a time (~5 ns each: 250
// us over a 49,152-token vocabulary). The polynomials are Cephes' expf and logf (Stephen L.
// Moshier's library, in the public domain), within 2 ulp of the correctly rounded result
// over the whole float32 range, subnormals included (tests/engine/test_step_stats.py holds
// them to torch's exp and log through the ops that use them).

#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

namespace vmath {

inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// 2^n for n in [-126, 127]
inline float pow2(int32_t n) { return from_bits(static_cast<uint32_t>(n + 127) << 23); }

// e^x: 0 below -103.97 (past the last subnormal), +inf above 88.72, NaN stays NaN
inline float exp(float x) {
  constexpr float kHigh = 88.72283935546875f, kLow = -103.97208404541016f;
  const bool nan = x != x;
  float t = nan ? 0.f : x;
  t = t < kLow ? kLow : (t > kHigh ? kHigh : t);
  const float n = __builtin_floorf(t * 1.44269504088896341f + 0.5f);
  const float r = (t - n * 0.693359375f) + n * 2.12194440e-4f;  // t - n ln 2, in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  // 2^n in two factors, each a normal float, so that results down to the subnormals are right
  const auto k = static_cast<int32_t>(n);
  const int32_t half = k >> 1;
  float y = p * pow2(half) * pow2(k - half);
  y = x > kHigh ? std::numeric_limits<float>::infinity() : y;
  y = x < kLow ? 0.f : y;
  return nan ? x : y;
}

// ln x for x > 0 (subnormals too); +inf gives +inf. Callers pass x > 0 only (the value at
// 0, below it, or NaN is not ln's)
inline float log(float x) {
  constexpr float kMinNormal = 1.17549435e-38f;
  const bool sub = x < kMinNormal;
  const uint32_t bits = to_bits(sub ? x * 8388608.f : x);  // subnormal: times 2^23 first
  const auto biased = static_cast<int32_t>((bits >> 23) & 0xff);
  float e = static_cast<float>(biased - 126) - (sub ? 23.f : 0.f);
  const float m = from_bits((bits & 0x007fffffu) | 0x3f000000u);  // x = m 2^e, m in [0.5, 1)
  const bool low = m < 0.707106781186547524f;
  e = low ? e - 1.f : e;
  const float f = low ? m + m - 1.f : m - 1.f;  // in [sqrt(1/2) - 1, sqrt(2) - 1)
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  float y = f * z * p + e * -2.12194440e-4f - 0.5f * z;
  y = f + y + e * 0.693359375f;
  return x == std::numeric_limits<float>::infinity() ? x : y;
}

// float -> bfloat16's bits, rounded to nearest even, NaN -> 0x7fc0: what c10::BFloat16(float)
// gives, without its branch (which keeps a loop from vectorising)
inline uint16_t bf16_bits(float f) {
  const uint32_t u = to_bits(f);
  const auto rounded = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  return f != f ? static_cast<uint16_t>(0x7fc0) : rounded;
}

}  // namespace vmath

// The integer dot products of the lab's int8 / int4 kernels (engine/quant/csrc/matvec.cpp
// includes this once): activations as int16 in groups of 32, one weight row against one
// quantised row of x, for AVX512-VNNI / AVX-512, AVX2 or plain C++ (chosen by -march).

#pragma once

#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX512BW__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace {

constexpr int64_t kGroup = 32;     // activation group (and int4 weight group)
// Each row's weights are asked for this many bytes ahead of their use (the hardware's own
// prefetch left a cold int4 pass at 0.6 of its speed with the weights in cache: 18 vs 11 ms
// for the 24 layers of Qwen2.5-0.5B on a 2-core Xeon). int8's into the L2 cache, int4's into
// L1, as measured on two CPUs (a cold pass over those layers on 2 threads, builds alternated):
//   int8, L1 -> L2: AMD Zen 4 (32 KB L1, which four rows 8 KB ahead fill) 20.7-21.6 ->
//   13.6-14.4 ms; a Xeon with AMX (48 KB L1) 22.8-24.3 -> 17.4-19.3 ms;
//   int4, L1 -> L2: Zen 4 the same either way; the Xeon 13.1-13.7 -> 16.4-17.5 ms.
constexpr int64_t kAhead = 8192;

// an address, not a pointer into the array (it may lie past its end; a prefetch never faults)
inline const char* ahead_of(const void* p) {
  return reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(p) +
                                       static_cast<std::uintptr_t>(kAhead));
}

inline void ahead_to_l2(const void* p) {
#if defined(__AVX512BW__) || defined(__AVX2__)
  _mm_prefetch(ahead_of(p), _MM_HINT_T1);
#endif
}

inline void ahead_to_l1(const void* p) {
#if defined(__AVX512BW__) || defined(__AVX2__)
  _mm_prefetch(ahead_of(p), _MM_HINT_T0);
#endif
}

// A span's cache lines asked for `ahead` bytes before their use, into L1 (int4's scales: a
// quarter of its weights' bytes, a stream of their own that the hardware fetched too late)
inline void span_to_l1(const void* p, int64_t bytes, int64_t ahead) {
#if defined(__AVX512BW__) || defined(__AVX2__)
  const auto at = reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(ahead);
  for (int64_t o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(at + static_cast<std::uintptr_t>(o)), _MM_HINT_T0);
#endif
}

inline float bf16(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One row of x as int16 in groups of 32 (xq), each group's scale (r) and, for int4, its sum
// in float32 (sum).
struct QuantRow {
  std::vector<int16_t> xq;
  std::vector<float> r, sum;
};

void quantise_row(const c10::BFloat16* x, int64_t k, QuantRow& out) {
  const int64_t groups = k / kGroup;
  out.xq.resize(k);
  out.r.resize(groups);
  out.sum.resize(groups);
  for (int64_t g = 0; g < groups; ++g) {
    float v[kGroup];
    float amax = 0.f, total = 0.f;
    for (int j = 0; j < kGroup; ++j) {
      v[j] = static_cast<float>(x[g * kGroup + j]);
      const float a = std::fabs(v[j]);
      if (a > amax || std::isnan(a)) amax = a;  // a NaN stays, whatever follows
      total += v[j];
    }
    // NaN or infinity: the group's scale is NaN, carried into every product that reads it.
    // A group under 1e-30 counts as zeros (32767 / amax would overflow; its products are
    // below anything a bfloat16 output keeps beside the other groups').
    const bool finite = std::isfinite(amax);
    const bool tiny = finite && amax < 1e-30f;
    if (tiny) amax = 0.f;
    const float inv = (finite && amax > 0.f) ? 32767.f / amax : 0.f;
    for (int j = 0; j < kGroup; ++j)
      out.xq[g * kGroup + j] = finite ? static_cast<int16_t>(std::nearbyint(v[j] * inv)) : 0;
    out.r[g] = finite ? amax / 32767.f : std::numeric_limits<float>::quiet_NaN();
    out.sum[g] = total;
  }
}

#if defined(__AVX2__) && !defined(__AVX512BW__)
inline float sum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}
#endif

#if defined(__AVX2__)
// Four 8-lane vectors' sums, each added in the same order (a row summed alone, a, a, a, a,
// gets the bits it gets beside three others)
inline __m128 sum8x4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}
#endif

// ---- the integer dot products of one weight row with one quantised row of x ----------------

#if defined(__AVX512BW__)
inline __m512i dot16(__m512i acc, __m512i a, __m512i b) {
#if defined(__AVX512VNNI__)
  return _mm512_dpwssd_epi32(acc, a, b);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}
#endif

#if defined(__AVX2__)
// 16 int16 pairs multiplied, summed in twos and added to acc: 8 int32
inline __m256i dot16y(__m256i acc, __m256i a, __m256i b) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(acc, a, b);
#elif defined(__AVXVNNI__)
  return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}
#endif

// R weight rows at a time (rows `stride` bytes apart), so that each load of x serves R rows
// and R chains of additions run side by side.

// int8: out[r] = sum over groups of r_g * (w_g . xq_g); the caller multiplies by the row's
// scale
template <int R>
void dot_int8(const int8_t* w, int64_t stride, const QuantRow& x, int64_t k, float* out) {
  const int64_t groups = k / kGroup;
  const int16_t* xq = x.xq.data();
#if defined(__AVX512BW__)
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const __m512i xv = _mm512_loadu_si512((const void*)(xq + g * kGroup));
    const __m512 rg = _mm512_set1_ps(x.r[g]);
    for (int r = 0; r < R; ++r) {
      ahead_to_l2(w + r * stride + g * kGroup);
      __m512i wv = _mm512_cvtepi8_epi16(
          _mm256_loadu_si256((const __m256i*)(w + r * stride + g * kGroup)));
      __m512i s = dot16(_mm512_setzero_si512(), wv, xv);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), rg, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
#elif defined(__AVX2__)
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const int16_t* xg = xq + g * kGroup;
    const __m256i x0 = _mm256_loadu_si256((const __m256i*)xg);
    const __m256i x1 = _mm256_loadu_si256((const __m256i*)(xg + 16));
    const __m256 rg = _mm256_set1_ps(x.r[g]);
    for (int r = 0; r < R; ++r) {
      const int8_t* wg = w + r * stride + g * kGroup;
      ahead_to_l2(wg);
      __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)wg));
      __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(wg + 16)));
      __m256i s = _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), rg, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = sum8(acc[r]);
#else
  for (int r = 0; r < R; ++r) {
    float acc = 0.f;
    for (int64_t g = 0; g < groups; ++g) {
      int32_t s = 0;
      for (int j = 0; j < kGroup; ++j)
        s += int32_t(w[r * stride + g * kGroup + j]) * xq[g * kGroup + j];
      acc += float(s) * x.r[g];
    }
    out[r] = acc;
  }
#endif
}

// int4: out[r] = sum over groups of scale_g * r_g * (u_g . xq_g), plus the zeros' part; fac
// (R rows, `groups` apart) holds scale_g * r_g and part (R rows of 8) the zeros' part in 8
// lanes, both from row_factors. 256-bit vectors on every x86 build, AVX-512 too: a group's
// two halves of 16 products meet in one 8-lane accumulator, so a group costs one conversion
// and one FMA of 8 lanes where 512-bit vectors took one of 16 (which Zen 4 executes as two
// of 8). 30 SmolLM2-135M-shape layers, 1 thread, AMD EPYC Zen 4, best of 450 passes:
// 7.00 ms with 512-bit vectors and the scales unfetched, 6.11 ms so (2 threads 4.34 -> 3.88)
template <int R>
void dot_int4(const uint8_t* w, int64_t stride, const float* fac, const float* part,
              const QuantRow& x, int64_t k, float* out) {
  const int64_t runs = k / 64, groups = k / kGroup;
  const int16_t* xq = x.xq.data();
#if defined(__AVX2__)
  const __m256i low = _mm256_set1_epi16(0x0F);
  __m256 acc[2 * R];
  for (int r = 0; r < 2 * R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < runs; ++b) {
    const int16_t* xb = xq + b * 64;
    const __m256i x0 = _mm256_loadu_si256((const __m256i*)xb);
    const __m256i x1 = _mm256_loadu_si256((const __m256i*)(xb + 16));
    const __m256i x2 = _mm256_loadu_si256((const __m256i*)(xb + 32));
    const __m256i x3 = _mm256_loadu_si256((const __m256i*)(xb + 48));
    for (int r = 0; r < R; ++r) {
      const uint8_t* wb = w + r * stride + b * 32;
      ahead_to_l1(wb);
      __m256i by0 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)wb));
      __m256i by1 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(wb + 16)));
      const __m256i zero = _mm256_setzero_si256();
      const __m256i s0 = dot16y(dot16y(zero, _mm256_and_si256(by0, low), x0),
                                _mm256_and_si256(by1, low), x1);
      const __m256i s1 = dot16y(dot16y(zero, _mm256_srli_epi16(by0, 4), x2),
                                _mm256_srli_epi16(by1, 4), x3);
      const float* f = fac + r * groups + 2 * b;
      acc[2 * r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(f[0]), acc[2 * r]);
      acc[2 * r + 1] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_set1_ps(f[1]), acc[2 * r + 1]);
    }
  }
  __m256 v[R];
  for (int r = 0; r < R; ++r)
    v[r] = _mm256_add_ps(_mm256_add_ps(acc[2 * r], acc[2 * r + 1]), _mm256_loadu_ps(part + 8 * r));
  if constexpr (R == 4) {
    _mm_storeu_ps(out, sum8x4(v[0], v[1], v[2], v[3]));
  } else {
    for (int r = 0; r < R; ++r) out[r] = _mm_cvtss_f32(sum8x4(v[r], v[r], v[r], v[r]));
  }
#else
  for (int r = 0; r < R; ++r) {
    float acc = 0.f;
    for (int64_t b = 0; b < runs; ++b) {
      int32_t s0 = 0, s1 = 0;
      for (int j = 0; j < 32; ++j) {
        const uint8_t byte = w[r * stride + b * 32 + j];
        s0 += int32_t(byte & 15) * xq[b * 64 + j];
        s1 += int32_t(byte >> 4) * xq[b * 64 + 32 + j];
      }
      const float* f = fac + r * groups + 2 * b;
      acc += float(s0) * f[0] + float(s1) * f[1];
    }
    for (int j = 0; j < 8; ++j) acc += part[8 * r + j];
    out[r] = acc;
  }
#endif
}

// For one int4 weight row and one row of x: fac[g] = scale_g * r_g, and in part's 8 lanes the
// sum over groups of (zero_g - 8 scale_g) * sum_g (scales: the row's G scales, then its G
// zeros), added to the dot products' lanes before their sum
void row_factors(const uint16_t* scales, int64_t groups, const QuantRow& x, float* fac,
                 float* part) {
  int64_t g = 0;
#if defined(__AVX2__)
  __m256 acc = _mm256_setzero_ps();
  for (; g + 8 <= groups; g += 8) {
    __m256 s = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(scales + g))), 16));
    __m256 z = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(scales + groups + g))), 16));
    _mm256_storeu_ps(fac + g, _mm256_mul_ps(s, _mm256_loadu_ps(x.r.data() + g)));
    __m256 off = _mm256_fnmadd_ps(_mm256_set1_ps(8.f), s, z);
    acc = _mm256_fmadd_ps(off, _mm256_loadu_ps(x.sum.data() + g), acc);
  }
  _mm256_storeu_ps(part, acc);
#else
  for (int j = 0; j < 8; ++j) part[j] = 0.f;
#endif
  for (int j = 0; g < groups; ++g, j = (j + 1) % 8) {
    const float scale = bf16(scales[g]);
    fac[g] = scale * x.r[g];
    part[j] += (bf16(scales[groups + g]) - 8.f * scale) * x.sum[g];
  }
}

}  // namespace

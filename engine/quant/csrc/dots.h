// The integer dot products of the lab's int8 / int4 kernels (engine/quant/csrc/matvec.cpp
// includes this once): activations as integers in groups of 32 (int8's int16, int4's 15
// bits in two bytes); int8's one weight row against one quantised row of x, int4's a block of
// 8 rows in the lanes of one vector; for
// AVX512-VNNI / AVX-512, AVX2 or plain C++ (chosen by -march).

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

inline float bf16(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One row of x as integers in groups of 32 (xq), each group's scale (r) and, for int4, its
// sum in float32 (sum). The grid: int8's products take int16 (r = max|x_g| / 32767); int4's
// 15 bits (r = max|x_g| / 16383), so that each splits into two bytes, x = 128 h + l with h
// in [-128, 127] and l in [0, 127], for the byte dot products (int4_bytes).
constexpr int kInt8Grid = 32767;
constexpr int kInt4Grid = 16383;

struct QuantRow {
  std::vector<int16_t> xq;
  std::vector<float> r, sum;
};

#if defined(__AVX512BW__)
// 16 bfloat16 as float32
inline __m512 bf16x16(const c10::BFloat16* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
#endif

void quantise_row(const c10::BFloat16* x, int64_t k, int grid, QuantRow& out) {
  const int64_t groups = k / kGroup;
  const float top = static_cast<float>(grid);
  out.xq.resize(k);
  out.r.resize(groups);
  out.sum.resize(groups);
  for (int64_t g = 0; g < groups; ++g) {
    const c10::BFloat16* xg = x + g * kGroup;
    int16_t* q = out.xq.data() + g * kGroup;
#if defined(__AVX512BW__)
    // the scalar loop's numbers (its products and rounding; the sum in another order) in a
    // fraction of its time: a token's ~120 rows were 2% of it
    const __m512 a = bf16x16(xg), b = bf16x16(xg + 16);
    const bool nan = (_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) |
                      _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q)) != 0;
    float amax = nan ? std::numeric_limits<float>::quiet_NaN()
                     : _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
    const float total = _mm512_reduce_add_ps(_mm512_add_ps(a, b));
#else
    float amax = 0.f, total = 0.f;
    for (int j = 0; j < kGroup; ++j) {
      const float v = static_cast<float>(xg[j]);
      const float a = std::fabs(v);
      if (a > amax || std::isnan(a)) amax = a;  // a NaN stays, whatever follows
      total += v;
    }
#endif
    // NaN or infinity: the group's scale is NaN, carried into every product that reads it.
    // A group under 1e-30 counts as zeros (grid / amax would overflow; its products are
    // below anything a bfloat16 output keeps beside the other groups').
    const bool finite = std::isfinite(amax);
    if (finite && amax < 1e-30f) amax = 0.f;
    const float inv = (finite && amax > 0.f) ? top / amax : 0.f;
#if defined(__AVX512BW__)
    // rounded to nearest, ties to even (the default mode, as std::nearbyint), |x inv| <= grid
    const __m512 m = _mm512_set1_ps(inv);
    auto to_int = [&](__m512 v) {
      return _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(v, m)));
    };
    _mm256_storeu_si256((__m256i*)q, to_int(a));
    _mm256_storeu_si256((__m256i*)(q + 16), to_int(b));
    if (!finite) std::fill(q, q + kGroup, int16_t{0});
#else
    for (int j = 0; j < kGroup; ++j)
      q[j] = finite ? static_cast<int16_t>(std::nearbyint(static_cast<float>(xg[j]) * inv)) : 0;
#endif
    out.r[g] = finite ? amax / top : std::numeric_limits<float>::quiet_NaN();
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

// ---- int4: blocks of 8 weight rows, the rows in the vector lanes ---------------------------
//
// Layout (engine/quant/native.py's pack4 / scales4): a block of 8 rows holds, for each group
// of 32 columns and each of its 4 chunks of 8 columns, the 8 rows' 32-bit words, one a row:
// nibble t of a word is column 8c + t (bits 4t..4t+3), so byte b holds columns 2b and 2b + 1.
// The block's scales follow the same order: per group, the 8 rows' scales, then their zeros
// (bfloat16). Masking a word's bytes with 0x0F gives each row's columns 8c + 0, 2, 4, 6 as
// unsigned bytes, shifting it by 4 first its columns 8c + 1, 3, 5, 7; each vpdpbusd
// multiplies those 4 bytes in each of the 8 rows' lanes by one broadcast 4 bytes of x's
// (int4_bytes) and sums them into the row's own lane: no sum across lanes, and a group's
// factor is one 8-lane multiply for 8 rows. x's 15-bit integers meet the weights in two
// byte halves, x = 128 h + l, so each chunk takes 4 byte products where 16-bit pairs took 4
// products and 3 more shifts and masks. Without byte dot products (AVX2 alone) vpmaddubsw
// gives int16 pairs, summed in int16 over a group and widened once: on Zen 4 built for
// Haswell, 45.4 -> 44.0 us for a 3072 x 576 matrix in cache against the 16-bit pairs.
// Stop 49 (AMD EPYC Zen 4, both kernels in one process, alternated, best of 150 passes),
// blocks of 8 rows against one row at a time: 30 SmolLM2-135M-shape layers 5.23 -> 3.53 ms on
// 1 thread, 3.42 -> 2.50 ms on 2; 24 Qwen2.5-0.5B-shape layers 16.3 -> 11.3 and 10.9 -> 8.1
// ms. Stop 50 (the same machine), byte products against 16-bit pairs, one 576 x 576 matrix
// in cache: 9.1 -> 6.8 us on 1 thread, 5.0 -> 3.9 us on 2.

// x's bytes in the words' order (x's xq on int4's grid): xb[g * 16 + c * 4 + q] holds, for
// chunk c's columns 8c + {0, 2, 4, 6} (q even) or 8c + {1, 3, 5, 7} (q odd), their h (q < 2)
// or l (q >= 2) bytes
void int4_bytes(const QuantRow& x, int64_t k, std::vector<int32_t>& xb) {
  xb.resize(k / 2);
  for (int64_t c8 = 0; c8 < k / 8; ++c8) {
    const int16_t* v = x.xq.data() + c8 * 8;
    for (int q = 0; q < 4; ++q) {
      uint32_t word = 0;
      for (int b = 0; b < 4; ++b) {
        const int col = 2 * b + (q & 1);
        const int part = q < 2 ? (v[col] >> 7) : (v[col] & 127);  // arithmetic shift: h
        word |= uint32_t(uint8_t(part)) << (8 * b);
      }
      xb[c8 * 4 + q] = static_cast<int32_t>(word);
    }
  }
}

#if defined(__AVX2__)
inline __m256 bf16x8(const uint16_t* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
#endif

#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
// 4 unsigned bytes times 4 signed bytes in each 32-bit lane, summed and added to acc
inline __m256i dot4y(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#endif
}
#endif

// One block's 8 outputs: out[i] = sum over groups of scale_g r_g (u_g . xq_g) + (zero_g -
// 8 scale_g) sum_g, for the block's words w (groups x 4 x 8) and scales sz (groups x 16)
void dot_int4_block(const uint32_t* w, const uint16_t* sz, const QuantRow& x,
                    const int32_t* xb, int64_t groups, float* out) {
#if defined(__AVX2__)
  const __m256i mask = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps(), off = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const uint32_t* wg = w + g * 32;
    ahead_to_l1(wg);
    ahead_to_l1(wg + 16);
    const int32_t* xg = xb + g * 16;
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
    // four chains side by side: h and l bytes of the even and odd columns
    __m256i he = _mm256_setzero_si256(), ho = he, le = he, lo = he;
    for (int c = 0; c < 4; ++c) {
      const __m256i v = _mm256_loadu_si256((const __m256i*)(wg + c * 8));
      const __m256i even = _mm256_and_si256(v, mask);
      const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(v, 4), mask);
      const int32_t* xc = xg + c * 4;
      he = dot4y(he, even, _mm256_set1_epi32(xc[0]));
      ho = dot4y(ho, odd, _mm256_set1_epi32(xc[1]));
      le = dot4y(le, even, _mm256_set1_epi32(xc[2]));
      lo = dot4y(lo, odd, _mm256_set1_epi32(xc[3]));
    }
    const __m256i h32 = _mm256_add_epi32(he, ho), l32 = _mm256_add_epi32(le, lo);
#else
    // no byte dot products: vpmaddubsw's int16 pairs (each at most 2 x 15 x 128 = 3,840),
    // summed in int16 over the group's 4 chunks (at most 30,720), then widened once
    __m256i h16 = _mm256_setzero_si256(), l16 = h16;
    for (int c = 0; c < 4; ++c) {
      const __m256i v = _mm256_loadu_si256((const __m256i*)(wg + c * 8));
      const __m256i even = _mm256_and_si256(v, mask);
      const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(v, 4), mask);
      const int32_t* xc = xg + c * 4;
      h16 = _mm256_add_epi16(h16, _mm256_add_epi16(
          _mm256_maddubs_epi16(even, _mm256_set1_epi32(xc[0])),
          _mm256_maddubs_epi16(odd, _mm256_set1_epi32(xc[1]))));
      l16 = _mm256_add_epi16(l16, _mm256_add_epi16(
          _mm256_maddubs_epi16(even, _mm256_set1_epi32(xc[2])),
          _mm256_maddubs_epi16(odd, _mm256_set1_epi32(xc[3]))));
    }
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i h32 = _mm256_madd_epi16(h16, ones), l32 = _mm256_madd_epi16(l16, ones);
#endif
    // |sum| <= 32 x 15 x 16384: exact in int32
    const __m256i sum = _mm256_add_epi32(_mm256_slli_epi32(h32, 7), l32);
    const __m256 scale = bf16x8(sz + g * 16), zero = bf16x8(sz + g * 16 + 8);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum),
                          _mm256_mul_ps(scale, _mm256_set1_ps(x.r[g])), acc);
    off = _mm256_fmadd_ps(_mm256_fnmadd_ps(_mm256_set1_ps(8.f), scale, zero),
                          _mm256_set1_ps(x.sum[g]), off);
  }
  _mm256_storeu_ps(out, _mm256_add_ps(acc, off));
#else
  float acc[8] = {}, off[8] = {};
  for (int64_t g = 0; g < groups; ++g) {
    for (int i = 0; i < 8; ++i) {
      int32_t s = 0;
      for (int c = 0; c < 4; ++c) {
        const uint32_t word = w[g * 32 + c * 8 + i];
        for (int t = 0; t < 8; ++t)
          s += int32_t((word >> (4 * t)) & 15) * x.xq[g * 32 + c * 8 + t];
      }
      const float scale = bf16(sz[g * 16 + i]), zero = bf16(sz[g * 16 + 8 + i]);
      acc[i] += float(s) * (scale * x.r[g]);
      off[i] += (zero - 8.f * scale) * x.sum[g];
    }
  }
  for (int i = 0; i < 8; ++i) out[i] = acc[i] + off[i];
  (void)xb;
#endif
}

// One block's weights dequantised to float32 columns: tile[col * ld + i] = (u - 8) * scale +
// zero for its 8 rows i (a prompt's products multiply the tile by at::mm)
void int4_block_columns(const uint32_t* w, const uint16_t* sz, int64_t groups, float* tile,
                        int64_t ld) {
  for (int64_t g = 0; g < groups; ++g) {
#if defined(__AVX2__)
    const __m256i low = _mm256_set1_epi32(15);
    const __m256 scale = bf16x8(sz + g * 16);
    const __m256 zero = _mm256_fnmadd_ps(_mm256_set1_ps(8.f), scale, bf16x8(sz + g * 16 + 8));
    for (int c = 0; c < 4; ++c) {
      const __m256i v = _mm256_loadu_si256((const __m256i*)(w + g * 32 + c * 8));
      float* col = tile + (g * 32 + c * 8) * ld;
      for (int t = 0; t < 8; ++t) {
        const __m256 u = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(
            v, _mm256_set1_epi32(4 * t)), low));
        _mm256_storeu_ps(col + t * ld, _mm256_fmadd_ps(u, scale, zero));
      }
    }
#else
    for (int i = 0; i < 8; ++i) {
      const float scale = bf16(sz[g * 16 + i]), zero = bf16(sz[g * 16 + 8 + i]) - 8.f * scale;
      for (int c = 0; c < 4; ++c)
        for (int t = 0; t < 8; ++t)
          tile[(g * 32 + c * 8 + t) * ld + i] =
              float((w[g * 32 + c * 8 + i] >> (4 * t)) & 15) * scale + zero;
    }
#endif
  }
}

}  // namespace

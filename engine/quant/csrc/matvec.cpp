// The lab's own int8 / int4 weight-only products for the CPU (engine/quant/native.py builds
// this file on the machine that runs it, with -march=native, and says why it does).
//
// Why: PyTorch's weight-only kernels (_weight_int8pack_mm, _weight_int4pack_mm_for_cpu) are
// bound by their arithmetic on a 2-core CPU, not by memory (resources/notes/
// quantized-weights.md, "Stop 43" and "Stop 44"). Here each group of 32 activations becomes
// int16 with its own scale (r = max|x| / 32767 over the group: an element is off by at most
// r / 2), and the integer weights meet them in 16-bit integer dot products (AVX512-VNNI's
// vpdpwssd, or vpmaddwd on AVX-512 / AVX2), so a weight costs a fraction of an instruction.
// Sums are exact in int32 within a group, then scaled and added in float32; the output is
// rounded to bfloat16 like PyTorch's kernels.
//
// Layouts (engine/quant/native.py makes them):
//   int8: w int8 [N, K / 32, 32] (the plain [N, K] matrix, viewed); s bfloat16 [N]:
//         weight = q * s.
//   int4: w uint8 [N, K / 64, 32]: in each run of 64 columns, byte j holds column j in its
//         low nibble and column 32 + j in its high one; sz bfloat16 [N, 2, K / 32]: per row,
//         the groups' scales, then their zeros: weight = (u - 8) * scale + zero.
// A few rows of x (decode, beam, a draft's check) go through the integer dot products; more
// rows (a prompt, a scored text) through float32 tiles of the dequantised weights and at::mm.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#if defined(__AVX512BW__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace {

constexpr int64_t kGroup = 32;     // activation group (and int4 weight group)
constexpr int64_t kFewRows = 4;    // at most this many rows of x use the integer products
constexpr int64_t kTileRows = 512;  // weight rows dequantised at a time for more rows of x
// Each row's weights are asked for this many bytes ahead of their use (the hardware's own
// prefetch left a cold int4 pass at 0.6 of its speed with the weights in cache: 18 vs 11 ms
// for the 24 layers of Qwen2.5-0.5B on a 2-core Xeon)
constexpr int64_t kAhead = 8192;

inline void ahead(const void* p) {
#if defined(__AVX512BW__) || defined(__AVX2__)
  // an address, not a pointer into the array (it may lie past its end; a prefetch never faults)
  const auto at = reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(kAhead);
  _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T0);
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
      ahead(w + r * stride + g * kGroup);
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
      ahead(wg);
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

// int4: out[r] = sum over groups of scale_g * r_g * (u_g . xq_g); fac (R rows, `groups`
// apart) holds scale_g * r_g, computed by the caller with the zeros' part
template <int R>
void dot_int4(const uint8_t* w, int64_t stride, const float* fac, const QuantRow& x, int64_t k,
              float* out) {
  const int64_t runs = k / 64, groups = k / kGroup;
  const int16_t* xq = x.xq.data();
#if defined(__AVX512BW__)
  const __m512i low = _mm512_set1_epi16(0x0F);
  __m512 acc[2 * R];
  for (int r = 0; r < 2 * R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < runs; ++b) {
    const __m512i x0 = _mm512_loadu_si512((const void*)(xq + b * 64));
    const __m512i x1 = _mm512_loadu_si512((const void*)(xq + b * 64 + 32));
    for (int r = 0; r < R; ++r) {
      ahead(w + r * stride + b * 32);
      __m512i bytes = _mm512_cvtepu8_epi16(
          _mm256_loadu_si256((const __m256i*)(w + r * stride + b * 32)));
      __m512i s0 = dot16(_mm512_setzero_si512(), _mm512_and_si512(bytes, low), x0);
      __m512i s1 = dot16(_mm512_setzero_si512(), _mm512_srli_epi16(bytes, 4), x1);
      const float* f = fac + r * groups + 2 * b;
      acc[2 * r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_set1_ps(f[0]), acc[2 * r]);
      acc[2 * r + 1] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_set1_ps(f[1]), acc[2 * r + 1]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[2 * r], acc[2 * r + 1]));
#elif defined(__AVX2__)
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
      ahead(wb);
      __m256i by0 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)wb));
      __m256i by1 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(wb + 16)));
      __m256i s0 = _mm256_add_epi32(_mm256_madd_epi16(_mm256_and_si256(by0, low), x0),
                                    _mm256_madd_epi16(_mm256_and_si256(by1, low), x1));
      __m256i s1 = _mm256_add_epi32(_mm256_madd_epi16(_mm256_srli_epi16(by0, 4), x2),
                                    _mm256_madd_epi16(_mm256_srli_epi16(by1, 4), x3));
      const float* f = fac + r * groups + 2 * b;
      acc[2 * r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(f[0]), acc[2 * r]);
      acc[2 * r + 1] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_set1_ps(f[1]), acc[2 * r + 1]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = sum8(_mm256_add_ps(acc[2 * r], acc[2 * r + 1]));
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
    out[r] = acc;
  }
#endif
}

// For one int4 weight row and one row of x: fac[g] = scale_g * r_g, and the returned sum over
// groups of (zero_g - 8 scale_g) * sum_g (scales: the row's G scales, then its G zeros)
float row_factors(const uint16_t* scales, int64_t groups, const QuantRow& x, float* fac) {
  int64_t g = 0;
  float offsets = 0.f;
#if defined(__AVX512BW__)
  __m512 acc = _mm512_setzero_ps();
  for (; g < groups; g += 16) {
    const __mmask16 live = groups - g >= 16 ? 0xFFFF : (__mmask16)((1u << (groups - g)) - 1);
    __m512 s = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(live, scales + g)), 16));
    __m512 z = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(live, scales + groups + g)), 16));
    _mm512_mask_storeu_ps(fac + g, live, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(live, x.r.data() + g)));
    __m512 off = _mm512_fnmadd_ps(_mm512_set1_ps(8.f), s, z);
    acc = _mm512_fmadd_ps(off, _mm512_maskz_loadu_ps(live, x.sum.data() + g), acc);
  }
  return _mm512_reduce_add_ps(acc);
#elif defined(__AVX2__)
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
  float part[8];
  _mm256_storeu_ps(part, acc);
  for (float v : part) offsets += v;
#endif
  for (; g < groups; ++g) {
    const float scale = bf16(scales[g]);
    fac[g] = scale * x.r[g];
    offsets += (bf16(scales[groups + g]) - 8.f * scale) * x.sum[g];
  }
  return offsets;
}

// ---- checks -----------------------------------------------------------------------------

void check_x(const at::Tensor& x, int64_t k, int64_t multiple) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.is_contiguous(),
              "x must be a contiguous bfloat16 [M, K] matrix");
  TORCH_CHECK(x.size(1) == k && k % multiple == 0, "x has ", x.size(1),
              " columns; the weights take ", k, " (a multiple of ", multiple, ")");
}

std::vector<QuantRow> quantise_rows(const at::Tensor& x) {
  const int64_t m = x.size(0), k = x.size(1);
  std::vector<QuantRow> rows(m);
  const auto* xp = x.data_ptr<c10::BFloat16>();
  for (int64_t i = 0; i < m; ++i) quantise_row(xp + i * k, k, rows[i]);
  return rows;
}

// ---- more rows of x ----------------------------------------------------------------------

// The product for more than a few rows of x (a prompt, a scored text): the weights
// dequantised to float32 a tile of rows at a time (`row` writes one row's K floats) and
// multiplied by at::mm (float32, as PyTorch's own kernels compute these rows).
template <typename Row>
at::Tensor many_rows(const at::Tensor& x, int64_t n, int64_t k, const Row& row,
                     at::ScalarType out_type = at::kBFloat16) {
  at::Tensor out = at::empty({x.size(0), n}, x.options().dtype(out_type));
  const at::Tensor xf = x.to(at::kFloat);
  for (int64_t n0 = 0; n0 < n; n0 += kTileRows) {
    const int64_t n1 = std::min(n, n0 + kTileRows);
    at::Tensor tile = at::empty({n1 - n0, k}, at::kFloat);
    float* t = tile.data_ptr<float>();
    at::parallel_for(n0, n1, 16, [&](int64_t a, int64_t b) {
      for (int64_t r = a; r < b; ++r) row(r, t + (r - n0) * k);
    });
    out.narrow(1, n0, n1 - n0).copy_(at::mm(xf, tile.t()));
  }
  return out;
}

// ---- int8 ---------------------------------------------------------------------------------


// The few-rows route of int8: out[i, r] = scale(r) * sum over groups of r_g * (w . xq)
template <typename Out, typename Scale>
void int8_rows(const int8_t* wp, const Scale& scale, const std::vector<QuantRow>& rows,
               int64_t n, int64_t k, Out* op) {
  const int64_t m = static_cast<int64_t>(rows.size());
  at::parallel_for(0, n, 16, [&](int64_t a, int64_t b) {
    float dots[4];
    for (int64_t r = a; r < b;) {
      const int step = b - r >= 4 ? 4 : 1;
      for (int64_t i = 0; i < m; ++i) {
        if (step == 4) dot_int8<4>(wp + r * k, k, rows[i], k, dots);
        else dot_int8<1>(wp + r * k, k, rows[i], k, dots);
        for (int j = 0; j < step; ++j) op[i * n + r + j] = Out(scale(r + j) * dots[j]);
      }
      r += step;
    }
  });
}

// bfloat16 scales give a bfloat16 product (a layer); float32 scales a float32 one (an output
// head: its logits are not rounded to bfloat16's steps of 0.03-0.06 at 10-20)
at::Tensor int8_mm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& s) {
  TORCH_CHECK(w.dim() == 3 && w.size(2) == kGroup && w.scalar_type() == at::kChar &&
                  w.is_contiguous(), "int8 weights must be contiguous int8 [N, K / 32, 32]");
  const int64_t n = w.size(0), k = w.size(1) * kGroup, m = x.size(0);
  check_x(x, k, kGroup);
  const bool head = s.scalar_type() == at::kFloat;
  TORCH_CHECK(s.dim() == 1 && s.size(0) == n && s.is_contiguous() &&
                  (head || s.scalar_type() == at::kBFloat16),
              "int8 scales must be contiguous bfloat16 or float32 [N]");
  const auto* wp = w.data_ptr<int8_t>();
  const auto* bp = head ? nullptr : reinterpret_cast<const uint16_t*>(s.data_ptr<c10::BFloat16>());
  const float* fp = head ? s.data_ptr<float>() : nullptr;
  auto scale = [&](int64_t r) { return head ? fp[r] : bf16(bp[r]); };
  if (m > kFewRows) {
    at::Tensor y = many_rows(x, n, k, [&](int64_t r, float* v) {
      const float sc = scale(r);
      for (int64_t j = 0; j < k; ++j) v[j] = float(wp[r * k + j]) * sc;
    }, head ? at::kFloat : at::kBFloat16);
    return y;
  }
  const std::vector<QuantRow> rows = quantise_rows(x);
  if (head) {
    at::Tensor out = at::empty({m, n}, x.options().dtype(at::kFloat));
    int8_rows(wp, scale, rows, n, k, out.data_ptr<float>());
    return out;
  }
  at::Tensor out = at::empty({m, n}, x.options());
  int8_rows(wp, scale, rows, n, k, out.data_ptr<c10::BFloat16>());
  return out;
}

// One int4 row dequantised to float32: v[c] = (u_c - 8) * scale + zero
void int4_row(const uint8_t* bytes, const uint16_t* scales, int64_t k, float* v) {
  const int64_t groups = k / kGroup;
  for (int64_t run = 0; run < k / 64; ++run) {
    const float s0 = bf16(scales[2 * run]), z0 = bf16(scales[groups + 2 * run]) - 8.f * s0;
    const float s1 = bf16(scales[2 * run + 1]), z1 = bf16(scales[groups + 2 * run + 1]) - 8.f * s1;
    const uint8_t* b = bytes + run * 32;
    float* out = v + run * 64;
#if defined(__AVX512BW__)
    const __m512i low = _mm512_set1_epi32(15);
    const __m512 vs0 = _mm512_set1_ps(s0), vz0 = _mm512_set1_ps(z0);
    const __m512 vs1 = _mm512_set1_ps(s1), vz1 = _mm512_set1_ps(z1);
    for (int half = 0; half < 2; ++half) {
      const __m512i u = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(b + 16 * half)));
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(u, low));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(u, 4));
      _mm512_storeu_ps(out + 16 * half, _mm512_fmadd_ps(lo, vs0, vz0));
      _mm512_storeu_ps(out + 32 + 16 * half, _mm512_fmadd_ps(hi, vs1, vz1));
    }
#else
    for (int j = 0; j < 32; ++j) {
      out[j] = float(b[j] & 15) * s0 + z0;
      out[32 + j] = float(b[j] >> 4) * s1 + z1;
    }
#endif
  }
}

// ---- int4 ---------------------------------------------------------------------------------


at::Tensor int4_mm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& sz) {
  TORCH_CHECK(w.dim() == 3 && w.size(2) == 32 && w.scalar_type() == at::kByte &&
                  w.is_contiguous(), "int4 weights must be contiguous uint8 [N, K / 64, 32]");
  const int64_t n = w.size(0), k = w.size(1) * 64, m = x.size(0), groups = k / kGroup;
  check_x(x, k, 64);
  TORCH_CHECK(sz.dim() == 3 && sz.size(0) == n && sz.size(1) == 2 && sz.size(2) == groups &&
                  sz.scalar_type() == at::kBFloat16 && sz.is_contiguous(),
              "int4 scales must be contiguous bfloat16 [N, 2, K / 32]");
  const auto* wp = w.data_ptr<uint8_t>();
  const auto* sp = reinterpret_cast<const uint16_t*>(sz.data_ptr<c10::BFloat16>());
  if (m > kFewRows)
    return many_rows(x, n, k, [&](int64_t r, float* v) {
      int4_row(wp + r * (k / 2), sp + r * 2 * groups, k, v);
    });
  at::Tensor out = at::empty({m, n}, x.options());
  auto* op = out.data_ptr<c10::BFloat16>();
  const std::vector<QuantRow> rows = quantise_rows(x);
  at::parallel_for(0, n, 16, [&](int64_t a, int64_t b) {
    std::vector<float> fac(4 * groups);
    float dots[4], offsets[4];
    for (int64_t r = a; r < b;) {
      const int step = b - r >= 4 ? 4 : 1;
      for (int64_t i = 0; i < m; ++i) {
        for (int j = 0; j < step; ++j)
          offsets[j] = row_factors(sp + (r + j) * 2 * groups, groups, rows[i],
                                   fac.data() + j * groups);
        if (step == 4) dot_int4<4>(wp + r * (k / 2), k / 2, fac.data(), rows[i], k, dots);
        else dot_int4<1>(wp + r * (k / 2), k / 2, fac.data(), rows[i], k, dots);
        for (int j = 0; j < step; ++j)
          op[i * n + r + j] = c10::BFloat16(dots[j] + offsets[j]);
      }
      r += step;
    }
  });
  return out;
}

std::string isa() {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  return "avx512-vnni";
#elif defined(__AVX512BW__)
  return "avx512";
#elif defined(__AVX2__)
  return "avx2";
#else
  return "scalar";
#endif
}

}  // namespace

// The products' schemas are defined in Python (engine/step/kernels.py), so that TorchScript
// can compile the fast step where this library is not built; here their CPU kernels.
TORCH_LIBRARY_IMPL(decoding_lab, CPU, m) {
  m.impl("int8_mm", &int8_mm);
  m.impl("int4_mm", &int4_mm);
}

TORCH_LIBRARY_FRAGMENT(decoding_lab, m) { m.def("isa() -> str", &isa); }

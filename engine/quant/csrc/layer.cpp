// The small steps of one decoder layer for one new token, fused (step.cpp's Decoder calls
// them; engine/quant/native.py builds this file with matvec.cpp).
//
// Why: at one token a layer's matrix products are a few hundred microseconds, and the ~30
// small operations around them (the RMS norms' casts and reductions, the rotary embedding's
// slices and concatenations, the cache writes by indexing, attention over one query, SiLU
// and the residual additions) cost ~110 us a layer in dispatch alone on a 2-core CPU: a
// third of a quantised token (resources/notes/quantized-weights.md, "Stop 44"). Each op here
// does one of those groups in one call, in bfloat16 with float32 arithmetic, rounding to
// bfloat16 where the unfused step rounds, so it gives the same numbers up to the order of a
// sum (attention keeps its probabilities in float32 where SDPA's CPU kernel rounds them).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/mean.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#include "lab.h"
#include "vmath.h"

namespace {

using bf16 = c10::BFloat16;
using lab::check_bf16;
using lab::round_bf16;
using lab::to_bf16;

// A layer's element type: bfloat16 rounds each result, float32 keeps it
template <typename T>
struct Num;
template <>
struct Num<bf16> {
  static float round(float v) { return round_bf16(v); }
  static bf16 store(float v) { return to_bf16(v); }
};
template <>
struct Num<float> {
  static float round(float v) { return v; }
  static float store(float v) { return v; }
};

// A norm's last step, one row of h: y = w * (x * r).to(T), r = rsqrt(mean(x^2) + eps)
template <typename T>
void scale_row(const T* x, const T* w, float r, int64_t h, T* y) {
  for (int64_t j = 0; j < h; ++j)
    y[j] = Num<T>::store(static_cast<float>(w[j]) * Num<T>::round(static_cast<float>(x[j]) * r));
}

// y = bf16(w * bf16(x * rsqrt(mean(x^2) + eps))), one row of h, the mean summed here
void norm_row(const bf16* x, const bf16* w, int64_t h, double eps, bf16* y) {
  float sq = 0.f;
#pragma omp simd reduction(+ : sq)
  for (int64_t j = 0; j < h; ++j) {
    const float v = static_cast<float>(x[j]);
    sq += v * v;
  }
  scale_row(x, w, 1.f / std::sqrt(sq / static_cast<float>(h) + static_cast<float>(eps)), h, y);
}

}  // namespace

namespace lab {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor* slot) {
  check_bf16(x, "x");
  check_bf16(w, "w");
  const int64_t h = x.size(-1), rows = x.numel() / std::max<int64_t>(h, 1);
  TORCH_CHECK(w.numel() == h, "the norm's weight has ", w.numel(), " values for ", h);
  at::Tensor y = out_of(slot, x.sizes(), x.options());
  for (int64_t i = 0; i < rows; ++i)
    norm_row(x.data_ptr<bf16>() + i * h, w.data_ptr<bf16>(), h, eps, y.data_ptr<bf16>() + i * h);
  return y;
}


// (s, norm(s)) with s = bf16(x + a): a residual addition and the next norm
// (slots: the sum's, then the norm's)
std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& a,
                                                const at::Tensor& w, double eps,
                                                at::Tensor* slots) {
  check_bf16(x, "x");
  check_bf16(a, "a");
  const at::Tensor s = add(x, a, slots);  // torch's bfloat16 addition's bits
  return {s, rms_norm(s, w, eps, slots != nullptr ? slots + 1 : nullptr)};
}


// u [n, 2I] (gate, then up) -> bf16(bf16(silu(gate)) * up) [n, I]
at::Tensor silu_mul(const at::Tensor& u, at::Tensor* slot) {
  check_bf16(u, "u");
  TORCH_CHECK(u.dim() == 2 && u.size(1) % 2 == 0, "u must be [n, 2I]");
  const int64_t n = u.size(0), inner = u.size(1) / 2;
  at::Tensor out = out_of(slot, {n, inner}, u.options());
  const bf16* up = u.data_ptr<bf16>();
  bf16* op = out.data_ptr<bf16>();
  for (int64_t i = 0; i < n; ++i) {
    const bf16* gate = up + i * 2 * inner;
    const bf16* lift = gate + inner;
    bf16* o = op + i * inner;
#pragma omp simd
    for (int64_t j = 0; j < inner; ++j) {
      const float g = static_cast<float>(gate[j]);
      const float act = round_bf16(g / (1.f + vmath::exp(-g)));
      o[j] = to_bf16(act * static_cast<float>(lift[j]));
    }
  }
  return out;
}


}  // namespace lab

namespace {

void check_float(const at::Tensor& t, const at::Tensor& like, const char* name) {
  TORCH_CHECK(t.scalar_type() == like.scalar_type() && t.is_contiguous() && t.device().is_cpu(),
              name, " must be a contiguous CPU tensor of x's dtype");
}

constexpr int64_t kMaxLanes = 16;

// torch's sum of h contiguous floats on the CPU, in its order (aten's cascade sum for an
// inner reduction, h under its grain of 32,768 so on one thread): `lanes`-wide vectors in
// four chains (vector 4i + c into chain c); each chain's vectors added at level 0, and every
// 2^p of them (p = max(4, ceil(log2(n)) / 4), n vectors a chain) carried up the levels as a
// counter carries; the levels into level 0, the vectors past the chains into chain 0, the
// chains into chain 0; then the scalars past the vectors, then chain 0's lanes in order
float torch_sum(const float* x, int64_t h, int64_t lanes) {
  constexpr int64_t kChains = 4, kLevels = 4;
  const int64_t vecs = h / lanes, n = vecs / kChains;
  int64_t log = 0;
  while ((int64_t{1} << log) < n) ++log;
  const int64_t power = std::max<int64_t>(4, log / kLevels), step = int64_t{1} << power;
  float acc[kLevels][kChains][kMaxLanes] = {};
  const auto add = [&](float* to, int64_t v) {
    for (int64_t l = 0; l < lanes; ++l) to[l] += x[v * lanes + l];
  };
  const auto carry = [&](int64_t from, int64_t to) {
    for (int64_t c = 0; c < kChains; ++c)
      for (int64_t l = 0; l < lanes; ++l) acc[to][c][l] += acc[from][c][l];
  };
  int64_t i = 0;
  while (i + step <= n) {
    for (int64_t j = 0; j < step; ++j, ++i)
      for (int64_t c = 0; c < kChains; ++c) add(acc[0][c], i * kChains + c);
    for (int64_t level = 1; level < kLevels; ++level) {
      carry(level - 1, level);
      std::fill_n(&acc[level - 1][0][0], kChains * kMaxLanes, 0.f);
      if ((i & ((step - 1) << (level * power))) != 0) break;
    }
  }
  for (; i < n; ++i)
    for (int64_t c = 0; c < kChains; ++c) add(acc[0][c], i * kChains + c);
  for (int64_t level = 1; level < kLevels; ++level) carry(level, 0);
  for (int64_t v = n * kChains; v < vecs; ++v) add(acc[0][0], v);
  for (int64_t c = 1; c < kChains; ++c)
    for (int64_t l = 0; l < lanes; ++l) acc[0][0][l] += acc[0][c][l];
  float total = 0.f;
  for (int64_t k = vecs * lanes; k < h; ++k) total += x[k];
  for (int64_t l = 0; l < lanes; ++l) total += acc[0][0][l];
  return 0.f + total;  // into an output torch fills with zeros first
}

// The lanes for which torch_sum gives at::mean's bits in this process, or 0 where neither
// width does: found once, on sums of 40 to 4,099 values of mixed signs. torch 2.13 sums with
// AVX2's 8 even where it dispatches to AVX-512 (a kernel without an AVX-512 build); 16 is
// tried too, for a torch that builds one.
int64_t torch_lanes() {
  static const int64_t lanes = [] {
#if defined(__x86_64__) || defined(_M_X64)
    for (const int64_t width : {8, 16}) {
      uint32_t state = 12345;
      bool same = true;
      for (const int64_t size : {40, 576, 896, 1000, 2048, 4099}) {
        at::Tensor v = at::empty({1, size}, at::kFloat);
        float* p = v.data_ptr<float>();
        for (int64_t j = 0; j < size; ++j) {
          state = state * 1664525u + 1013904223u;
          p[j] = static_cast<float>(static_cast<int32_t>(state >> 8) - (1 << 23)) * 0x1p-20f;
        }
        const float want = at::mean(v, -1).item<float>();
        const float got = torch_sum(p, size, width) / static_cast<float>(size);
        same = same && std::memcmp(&want, &got, sizeof(float)) == 0;
      }
      if (same) return width;
    }
#endif
    return int64_t{0};  // elsewhere (ARM's SVE and NEON widths): at::mean
  }();
  return lanes;
}

// The float32 mean of each of `rows` rows of h values (sq, contiguous) as at::mean(sq, -1)
// gives it (its sum, then a division by h), into mean: by torch_sum where its width is
// known (true), else by at::mean itself (false)
bool row_means(const float* sq, int64_t rows, int64_t h, float* mean) {
  const int64_t lanes = torch_lanes();
  if (lanes == 0 || h < lanes || h >= 32768) {
    const at::Tensor m = at::mean(at::from_blob(const_cast<float*>(sq), {rows, h}), -1);
    std::copy_n(m.contiguous().data_ptr<float>(), rows, mean);
    return false;
  }
  for (int64_t i = 0; i < rows; ++i)
    mean[i] = torch_sum(sq + i * h, h, lanes) / static_cast<float>(h);
  return true;
}

// out = w * (x * r).to(T), r = 1 / sqrt(mean + eps) a row, the mean as torch's reduction's
template <typename T>
void finish_norm(const at::Tensor& x, const at::Tensor& w, const float* mp, double eps,
                 at::Tensor& out) {
  const int64_t h = x.size(-1), rows = x.numel() / h;
  const T* xp = x.data_ptr<T>();
  const T* wp = w.data_ptr<T>();
  T* op = out.data_ptr<T>();
  for (int64_t i = 0; i < rows; ++i)  // mean + eps in float32, rsqrt as 1 / sqrt: torch's
    scale_row(xp + i * h, wp, 1.f / std::sqrt(mp[i] + static_cast<float>(eps)), h, op + i * h);
}

template <typename T>
at::Tensor exact_norm(const at::Tensor& x, const at::Tensor& w, double eps, at::Tensor* slot) {
  const int64_t h = x.size(-1), rows = x.numel() / std::max<int64_t>(h, 1);
  TORCH_CHECK(w.numel() == h, "the norm's weight has ", w.numel(), " values for ", h);
  thread_local std::vector<float> sq, mean;  // grown once a thread
  sq.resize(x.numel());
  mean.resize(rows);
  const T* xp = x.data_ptr<T>();
  for (int64_t j = 0; j < x.numel(); ++j) {
    const float v = static_cast<float>(xp[j]);
    sq[j] = v * v;  // pow(2): torch squares by a product
  }
  row_means(sq.data(), rows, h, mean.data());
  at::Tensor out = lab::out_of(slot, x.sizes(), x.options());
  finish_norm<T>(x, w, mean.data(), eps, out);
  return out;
}

// op(x, a) elementwise in float32, stored in x's dtype (one rounding, as torch's)
template <typename T, typename Op>
at::Tensor zip_rows(const at::Tensor& x, const at::Tensor& a, Op op, at::Tensor* slot) {
  at::Tensor s = lab::out_of(slot, x.sizes(), x.options());
  const T* xp = x.data_ptr<T>();
  const T* ap = a.data_ptr<T>();
  T* sp = s.data_ptr<T>();
  for (int64_t j = 0; j < x.numel(); ++j)
    sp[j] = Num<T>::store(op(static_cast<float>(xp[j]), static_cast<float>(ap[j])));
  return s;
}

template <typename Op>
at::Tensor zip(const at::Tensor& x, const at::Tensor& a, Op op, at::Tensor* slot = nullptr) {
  check_float(x, x, "x");
  check_float(a, x, "a");
  TORCH_CHECK(x.sizes() == a.sizes(), "x and a differ in shape");
  if (x.scalar_type() == at::kFloat) return zip_rows<float>(x, a, op, slot);
  TORCH_CHECK(x.scalar_type() == at::kBFloat16, "x must be bfloat16 or float32");
  return zip_rows<bf16>(x, a, op, slot);
}

}  // namespace

namespace lab {

// forward.py's norm for NORM_RMS on bfloat16 or float32 rows, bit for bit: w * (x.float() *
// rsqrt(x.float().pow(2).mean(-1) + eps)).to(x.dtype), in two passes where its spelling takes
// eight operations (the mean summed in torch's order, row_means, so its bits)
at::Tensor exact_rms_norm(const at::Tensor& x, const at::Tensor& w, double eps,
                          at::Tensor* slot) {
  check_float(x, x, "x");
  check_float(w, x, "w");
  if (x.scalar_type() == at::kFloat) return exact_norm<float>(x, w, eps, slot);
  TORCH_CHECK(x.scalar_type() == at::kBFloat16, "x must be bfloat16 or float32");
  return exact_norm<bf16>(x, w, eps, slot);
}

// x + a and x * a in x's dtype, torch's additions' and products' bits (float32 arithmetic,
// one rounding)
at::Tensor add(const at::Tensor& x, const at::Tensor& a, at::Tensor* slot) {
  return zip(x, a, [](float u, float v) { return u + v; }, slot);
}

at::Tensor mul(const at::Tensor& x, const at::Tensor& a) {
  return zip(x, a, [](float u, float v) { return u * v; });
}

}  // namespace lab

namespace {

// One head's rotary embedding: out = bf16(bf16(x * cos) + bf16(rotate_half(x) * sin)) on the
// first `rot` dims (rotate_half: (-x[half:rot], x[:half])), the rest as they are
void rotate_head(const bf16* x, const bf16* cos, const bf16* sin, int64_t d, int64_t rot,
                 bf16* out) {
  const int64_t half = rot / 2;
  for (int64_t j = 0; j < rot; ++j) {
    const float other =
        j < half ? -static_cast<float>(x[j + half]) : static_cast<float>(x[j - half]);
    const float a = round_bf16(static_cast<float>(x[j]) * static_cast<float>(cos[j]));
    const float b = round_bf16(other * static_cast<float>(sin[j]));
    out[j] = to_bf16(a + b);
  }
  for (int64_t j = rot; j < d; ++j) out[j] = x[j];
}

// The same in float32: x * cos + rotate_half(x) * sin, each product rounded before the sum
// as torch's separate operations round them (GCC would fuse a product into the addition;
// the attribute keeps it from that, and tests/engine/test_fused_layer.py's float32 steps,
// bit for bit the unfused one's, would show it if a compiler did)
__attribute__((optimize("fp-contract=off"))) void rotate_head(const float* x, const float* cos,
                                                              const float* sin, int64_t d,
                                                              int64_t rot, float* out) {
  const int64_t half = rot / 2;
  for (int64_t j = 0; j < rot; ++j) {
    const float other = j < half ? -x[j + half] : x[j - half];
    const float a = x[j] * cos[j];
    const float b = other * sin[j];
    out[j] = a + b;
  }
  for (int64_t j = rot; j < d; ++j) out[j] = x[j];
}

// rope_kv's rows, in bfloat16 or float32
template <typename T>
void rope_rows(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
               at::Tensor& k_all, at::Tensor& v_all, int64_t layer, const int64_t* pos,
               int64_t n_heads, int64_t n_kv, int64_t rot, at::Tensor& q) {
  const int64_t n = qkv.size(0), d = k_all.size(3), cap = k_all.size(2);
  const T* src = qkv.data_ptr<T>();
  T* qp = q.data_ptr<T>();
  T* kp = k_all.data_ptr<T>();
  T* vp = v_all.data_ptr<T>();
  for (int64_t t = 0; t < n; ++t) {
    const T* row = src + t * qkv.size(1);
    const T* c = cos.data_ptr<T>() + t * rot;
    const T* s = sin.data_ptr<T>() + t * rot;
    for (int64_t h = 0; h < n_heads; ++h)
      rotate_head(row + h * d, c, s, d, rot, qp + (h * n + t) * d);
    for (int64_t h = 0; h < n_kv; ++h) {
      const int64_t slot = ((layer * n_kv + h) * cap + pos[t]) * d;
      rotate_head(row + (n_heads + h) * d, c, s, d, rot, kp + slot);
      std::copy(row + (n_heads + n_kv + h) * d, row + (n_heads + n_kv + h + 1) * d, vp + slot);
    }
  }
}

}  // namespace

namespace lab {

// qkv [n, (H + 2 KV) D]: the rows' queries rotated and returned [H, n, D]; their keys rotated
// and their values written into the cache k_all / v_all [layers, KV, capacity, D] at `pos`.
// bfloat16, or float32 (a float32 model's layer, step.cpp): the unfused step's bits in both
at::Tensor rope_kv(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                   at::Tensor& k_all, at::Tensor& v_all, int64_t layer, const at::Tensor& pos,
                   int64_t n_heads, int64_t n_kv, int64_t rot, at::Tensor* slot) {
  const bool wide = qkv.scalar_type() == at::kFloat;
  const auto check = [wide](const at::Tensor& t, const char* name) {
    if (!wide) return check_bf16(t, name);
    TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous() && t.device().is_cpu(),
                name, " must be a contiguous float32 CPU tensor, as qkv is");
  };
  check(qkv, "qkv");
  check(cos, "cos");
  check(sin, "sin");
  check(k_all, "k_all");
  check(v_all, "v_all");
  const int64_t n = qkv.size(0), d = k_all.size(3), cap = k_all.size(2);
  TORCH_CHECK(qkv.size(1) == (n_heads + 2 * n_kv) * d, "qkv's width does not fit the heads");
  TORCH_CHECK(cos.size(-1) == rot && rot <= d && rot % 2 == 0, "the rotary tables do not fit");
  TORCH_CHECK(layer >= 0 && layer < k_all.size(0) && k_all.size(1) == n_kv,
              "the layer or kv heads do not fit the cache");
  TORCH_CHECK(v_all.sizes() == k_all.sizes(), "k_all and v_all differ in shape");
  TORCH_CHECK(cos.dim() == 2 && cos.size(0) == n && sin.sizes() == cos.sizes(),
              "one row of the rotary tables per row of qkv");
  TORCH_CHECK(!at::isFloatingType(pos.scalar_type()) && pos.numel() == n,
              "one integer position per row");
  const at::Tensor p = pos.scalar_type() == at::kLong && pos.is_contiguous()
                           ? pos : pos.to(at::kLong).contiguous();
  for (int64_t t = 0; t < n; ++t) {  // all checked before any is written
    const int64_t at_pos = p.data_ptr<int64_t>()[t];
    TORCH_CHECK(at_pos >= 0 && at_pos < cap, "position ", at_pos, " is past the cache");
  }
  at::Tensor q = out_of(slot, {n_heads, n, d}, qkv.options());
  if (wide)
    rope_rows<float>(qkv, cos, sin, k_all, v_all, layer, p.data_ptr<int64_t>(), n_heads, n_kv,
                     rot, q);
  else
    rope_rows<bf16>(qkv, cos, sin, k_all, v_all, layer, p.data_ptr<int64_t>(), n_heads, n_kv,
                    rot, q);
  return q;
}

}  // namespace lab

TORCH_LIBRARY_IMPL(decoding_lab, CPU, m) {  // the ops: new tensors each call
  m.impl("rms_norm", [](const at::Tensor& x, const at::Tensor& w, double eps) {
    return lab::rms_norm(x, w, eps);
  });
  m.impl("add_rms_norm", [](const at::Tensor& x, const at::Tensor& a, const at::Tensor& w,
                            double eps) { return lab::add_rms_norm(x, a, w, eps); });
  m.impl("silu_mul", [](const at::Tensor& u) { return lab::silu_mul(u); });
  m.impl("rope_kv", [](const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                       at::Tensor& k_all, at::Tensor& v_all, int64_t layer,
                       const at::Tensor& pos, int64_t n_heads, int64_t n_kv, int64_t rot) {
    return lab::rope_kv(qkv, cos, sin, k_all, v_all, layer, pos, n_heads, n_kv, rot);
  });
}

namespace {

// For the tests: each row's mean of sq [rows, h] (float32) as the exact norms take it, and
// whether it came from torch_sum (false: from at::mean, where its order is not known here)
std::tuple<at::Tensor, bool> row_means_op(const at::Tensor& sq) {
  TORCH_CHECK(sq.dim() == 2 && sq.scalar_type() == at::kFloat && sq.is_contiguous() &&
                  sq.size(1) > 0, "sq must be a contiguous float32 [rows, h], h > 0");
  at::Tensor mean = at::empty({sq.size(0)}, sq.options());
  const bool summed = row_means(sq.data_ptr<float>(), sq.size(0), sq.size(1),
                                mean.data_ptr<float>());
  return {mean, summed};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(decoding_lab, m) {
  m.def("row_means(Tensor sq) -> (Tensor, bool)", &row_means_op);
}

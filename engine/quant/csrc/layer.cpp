// The small steps of one decoder layer for one new token, fused (engine/step/forward.py's
// fused_layer calls them; engine/quant/native.py builds this file with matvec.cpp).
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
#include <ATen/ops/_weight_int4pack_mm_for_cpu.h>
#include <ATen/ops/_weight_int8pack_mm.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "lab.h"
#include "vmath.h"

namespace {

using bf16 = c10::BFloat16;

// float -> bfloat16 as c10::BFloat16(float) rounds it, in a form loops vectorise
inline bf16 to_bf16(float v) { return bf16(vmath::bf16_bits(v), bf16::from_bits()); }
inline float round_bf16(float v) {
  return vmath::from_bits(static_cast<uint32_t>(vmath::bf16_bits(v)) << 16);
}

void check_bf16(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kBFloat16 && t.is_contiguous() && t.device().is_cpu(),
              name, " must be a contiguous bfloat16 CPU tensor");
}

// y = bf16(w * bf16(x * rsqrt(mean(x^2) + eps))), one row of h
void norm_row(const bf16* x, const bf16* w, int64_t h, double eps, bf16* y) {
  float sq = 0.f;
#pragma omp simd reduction(+ : sq)
  for (int64_t j = 0; j < h; ++j) {
    const float v = static_cast<float>(x[j]);
    sq += v * v;
  }
  const float r = 1.f / std::sqrt(sq / static_cast<float>(h) + static_cast<float>(eps));
  for (int64_t j = 0; j < h; ++j)
    y[j] = to_bf16(static_cast<float>(w[j]) * round_bf16(static_cast<float>(x[j]) * r));
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  check_bf16(x, "x");
  check_bf16(w, "w");
  const int64_t h = x.size(-1), rows = x.numel() / std::max<int64_t>(h, 1);
  TORCH_CHECK(w.numel() == h, "the norm's weight has ", w.numel(), " values for ", h);
  at::Tensor y = at::empty_like(x);
  for (int64_t i = 0; i < rows; ++i)
    norm_row(x.data_ptr<bf16>() + i * h, w.data_ptr<bf16>(), h, eps, y.data_ptr<bf16>() + i * h);
  return y;
}

// (s, norm(s)) with s = bf16(x + a): a residual addition and the next norm
std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& a,
                                                const at::Tensor& w, double eps) {
  check_bf16(x, "x");
  check_bf16(a, "a");
  TORCH_CHECK(x.sizes() == a.sizes(), "x and a differ in shape");
  at::Tensor s = at::empty_like(x);
  const bf16* xp = x.data_ptr<bf16>();
  const bf16* ap = a.data_ptr<bf16>();
  bf16* sp = s.data_ptr<bf16>();
  for (int64_t j = 0; j < x.numel(); ++j)
    sp[j] = to_bf16(static_cast<float>(xp[j]) + static_cast<float>(ap[j]));
  return {s, rms_norm(s, w, eps)};
}

// u [n, 2I] (gate, then up) -> bf16(bf16(silu(gate)) * up) [n, I]
at::Tensor silu_mul(const at::Tensor& u) {
  check_bf16(u, "u");
  TORCH_CHECK(u.dim() == 2 && u.size(1) % 2 == 0, "u must be [n, 2I]");
  const int64_t n = u.size(0), inner = u.size(1) / 2;
  at::Tensor out = at::empty({n, inner}, u.options());
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

// qkv [n, (H + 2 KV) D]: the rows' queries rotated and returned [H, n, D]; their keys rotated
// and their values written into the cache k_all / v_all [layers, KV, capacity, D] at `pos`
at::Tensor rope_kv(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                   at::Tensor& k_all, at::Tensor& v_all, int64_t layer, const at::Tensor& pos,
                   int64_t n_heads, int64_t n_kv, int64_t rot) {
  check_bf16(qkv, "qkv");
  check_bf16(cos, "cos");
  check_bf16(sin, "sin");
  check_bf16(k_all, "k_all");
  check_bf16(v_all, "v_all");
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
  at::Tensor p = pos.to(at::kLong).contiguous();
  for (int64_t t = 0; t < n; ++t) {  // all checked before any is written
    const int64_t at_pos = p.data_ptr<int64_t>()[t];
    TORCH_CHECK(at_pos >= 0 && at_pos < cap, "position ", at_pos, " is past the cache");
  }
  at::Tensor q = at::empty({n_heads, n, d}, qkv.options());
  const bf16* src = qkv.data_ptr<bf16>();
  bf16* qp = q.data_ptr<bf16>();
  bf16* kp = k_all.data_ptr<bf16>();
  bf16* vp = v_all.data_ptr<bf16>();
  for (int64_t t = 0; t < n; ++t) {
    const int64_t at_pos = p.data_ptr<int64_t>()[t];
    const bf16* row = src + t * qkv.size(1);
    const bf16* c = cos.data_ptr<bf16>() + t * rot;
    const bf16* s = sin.data_ptr<bf16>() + t * rot;
    for (int64_t h = 0; h < n_heads; ++h)
      rotate_head(row + h * d, c, s, d, rot, qp + (h * n + t) * d);
    for (int64_t h = 0; h < n_kv; ++h) {
      const int64_t slot = ((layer * n_kv + h) * cap + at_pos) * d;
      rotate_head(row + (n_heads + h) * d, c, s, d, rot, kp + slot);
      std::copy(row + (n_heads + n_kv + h) * d, row + (n_heads + n_kv + h + 1) * d, vp + slot);
    }
  }
  return q;
}

// Attention of one query per head over the cache's first `len` positions: q [H, 1, D] ->
// [H, 1, D]; head h reads kv head h / (H / KV); scores, softmax and sums in float32
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_all,
                            const at::Tensor& v_all, int64_t layer, int64_t len, double scale) {
  check_bf16(k_all, "k_all");
  check_bf16(v_all, "v_all");
  const at::Tensor qc = q.contiguous();
  check_bf16(qc, "q");
  const int64_t heads = qc.size(0), d = qc.size(2), kv = k_all.size(1), cap = k_all.size(2);
  TORCH_CHECK(qc.dim() == 3 && qc.size(1) == 1 && k_all.dim() == 4 && k_all.size(3) == d,
              "q must be [H, 1, D] and the cache [layers, KV, capacity, D]");
  TORCH_CHECK(v_all.sizes() == k_all.sizes(), "k_all and v_all differ in shape");
  TORCH_CHECK(layer >= 0 && layer < k_all.size(0), "layer ", layer, " is not in the cache");
  TORCH_CHECK(kv > 0 && heads % kv == 0 && len > 0 && len <= cap, "heads or length do not fit");
  at::Tensor out = at::empty_like(qc);
  const bf16* qp = qc.data_ptr<bf16>();
  const bf16* kp = k_all.data_ptr<bf16>();
  const bf16* vp = v_all.data_ptr<bf16>();
  bf16* op = out.data_ptr<bf16>();
  at::parallel_for(0, heads, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> qf(d), score(len), acc(d);
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t base = (layer * kv + h / (heads / kv)) * cap * d;
      for (int64_t j = 0; j < d; ++j) qf[j] = static_cast<float>(qp[h * d + j]);
      float top = -INFINITY;
      for (int64_t t = 0; t < len; ++t) {
        const bf16* k = kp + base + t * d;
        float dot = 0.f;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < d; ++j) dot += qf[j] * static_cast<float>(k[j]);
        score[t] = dot * static_cast<float>(scale);
        top = std::max(top, score[t]);
      }
      float total = 0.f;
#pragma omp simd reduction(+ : total)
      for (int64_t t = 0; t < len; ++t) {
        score[t] = vmath::exp(score[t] - top);
        total += score[t];
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t t = 0; t < len; ++t) {
        const bf16* v = vp + base + t * d;
        const float pt = score[t];
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) acc[j] += pt * static_cast<float>(v[j]);
      }
      for (int64_t j = 0; j < d; ++j) op[h * d + j] = to_bf16(acc[j] / total);
    }
  });
  return out;
}

// x [1, K] bfloat16 @ w.T (+ b): engine/step/kernels.py's mm for the quantised weights a
// fused layer holds (the lab's layouts, or PyTorch's where a matrix's shape kept it there)
at::Tensor affine(const at::Tensor& x, const at::Tensor& w, const at::Tensor& s,
                  const at::Tensor& b) {
  TORCH_CHECK(s.numel() > 0 && !w.is_mkldnn(), "a fused layer's matrices are int8 or int4");
  at::Tensor y;
  if (w.dim() == 3)
    y = w.scalar_type() == at::kChar ? lab::int8_mm(x, w, s) : lab::int4_mm(x, w, s);
  else if (w.scalar_type() == at::kChar)
    y = at::_weight_int8pack_mm(x, w, s);  // x from at::empty: aligned as the kernel needs
  else
    y = at::_weight_int4pack_mm_for_cpu(x, w, x.size(1) / s.size(0), s);
  if (b.numel() == 0) return y;
  check_bf16(y, "the product");
  check_bf16(b, "the bias");
  TORCH_CHECK(b.numel() == y.numel(), "the bias has ", b.numel(), " values for ", y.numel());
  bf16* yp = y.data_ptr<bf16>();
  const bf16* bp = b.data_ptr<bf16>();
  for (int64_t j = 0; j < y.numel(); ++j)
    yp[j] = to_bf16(static_cast<float>(yp[j]) + static_cast<float>(bp[j]));
  return y;
}

// The order of the tensors decode_layer reads from a layer's list (engine/step/forward.py's
// fused_layer passes their slots in it)
enum Slot { kInW, kQkvW, kQkvS, kQkvB, kOW, kOS, kOB, kPfW, kUpW, kUpS, kUpB, kDownW,
            kDownS, kDownB, kSlots };

// One token's Llama-shaped layer in one call: x [1, hidden] bfloat16 -> [1, hidden]. The
// same operations fused_layer made one op call each (rms_norm, the q/k/v product and bias,
// rope_kv, decode_attention, the output product, add_rms_norm, the up product, silu_mul, the
// down product, the residual), so the same bits; TorchScript then interprets one call a
// layer where it interpreted ~40 (0.4 ms a SmolLM2 token on a 2-core CPU).
at::Tensor decode_layer(const at::Tensor& x, at::TensorList w, at::IntArrayRef slots,
                        int64_t layer, const at::Tensor& pos, const at::Tensor& cos,
                        const at::Tensor& sin, at::Tensor& k_all, at::Tensor& v_all,
                        int64_t len, int64_t n_heads, int64_t n_kv, int64_t rot, double eps,
                        double scale) {
  TORCH_CHECK(static_cast<int64_t>(slots.size()) == kSlots, "decode_layer reads ", kSlots,
              " slots of a layer");
  for (const int64_t at_slot : slots)
    TORCH_CHECK(at_slot >= 0 && at_slot < static_cast<int64_t>(w.size()), "slot ", at_slot,
                " is not in the layer's ", w.size(), " tensors");
  auto t = [&](Slot i) -> const at::Tensor& { return w[slots[i]]; };
  check_bf16(x, "x");
  TORCH_CHECK(x.dim() == 2 && x.size(0) == 1, "decode_layer takes one token, x [1, hidden]");
  at::Tensor qkv = affine(rms_norm(x, t(kInW), eps), t(kQkvW), t(kQkvS), t(kQkvB));
  at::Tensor q = rope_kv(qkv, cos, sin, k_all, v_all, layer, pos, n_heads, n_kv, rot);
  at::Tensor att = decode_attention(q, k_all, v_all, layer, len, scale);
  at::Tensor a = affine(att.view({1, -1}), t(kOW), t(kOS), t(kOB));
  auto [s, h] = add_rms_norm(x, a, t(kPfW), eps);
  at::Tensor m = affine(silu_mul(affine(h, t(kUpW), t(kUpS), t(kUpB))), t(kDownW), t(kDownS),
                        t(kDownB));
  check_bf16(m, "the down product");
  TORCH_CHECK(m.sizes() == s.sizes(), "the down product does not give the hidden width");
  bf16* sp = s.data_ptr<bf16>();
  const bf16* mp = m.data_ptr<bf16>();
  for (int64_t j = 0; j < s.numel(); ++j)
    sp[j] = to_bf16(static_cast<float>(sp[j]) + static_cast<float>(mp[j]));
  return s;
}

}  // namespace

TORCH_LIBRARY_IMPL(decoding_lab, CPU, m) {
  m.impl("decode_layer", &decode_layer);
  m.impl("rms_norm", &rms_norm);
  m.impl("add_rms_norm", &add_rms_norm);
  m.impl("silu_mul", &silu_mul);
  m.impl("rope_kv", &rope_kv);
  m.impl("decode_attention", &decode_attention);
}

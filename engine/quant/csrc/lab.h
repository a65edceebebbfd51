// What the files of the lab's library share: the products (matvec.cpp) and one token's layer
// steps (layer.cpp), called directly by step.cpp's Decoder and decode_layer, not through the
// dispatcher; and bfloat16 rounding in a form loops vectorise.

#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>

#include <cstdint>
#include <tuple>

#include "vmath.h"

namespace lab {

// float -> bfloat16 as c10::BFloat16(float) rounds it
inline c10::BFloat16 to_bf16(float v) {
  return c10::BFloat16(vmath::bf16_bits(v), c10::BFloat16::from_bits());
}
inline float round_bf16(float v) {
  return vmath::from_bits(static_cast<uint32_t>(vmath::bf16_bits(v)) << 16);
}

inline void check_bf16(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kBFloat16 && t.is_contiguous() && t.device().is_cpu(),
              name, " must be a contiguous bfloat16 CPU tensor");
}

// A step's output tensor: `*slot` where it holds one of these sizes and options already (the
// Decoder's scratch, reused layer after layer and token after token: a token's ~330 small
// tensors cost ~0.1 ms to allocate and free), else a new one, kept in `*slot` where given
inline at::Tensor out_of(at::Tensor* slot, at::IntArrayRef sizes, const at::TensorOptions& o) {
  if (slot == nullptr) return at::empty(sizes, o);
  if (!slot->defined() || slot->sizes() != sizes || slot->dtype() != o.dtype() ||
      slot->device() != o.device())
    *slot = at::empty(sizes, o);
  return *slot;
}

// matvec.cpp: x [m, K] bfloat16 @ int8 w [N, K / 32, 32] (scales s [N], bfloat16 or float32)
at::Tensor int8_mm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& s,
                   at::Tensor* slot = nullptr);
// x [m, K] bfloat16 @ int4 w [N, K / 64, 32] (scales and zeros sz [N, 2, K / 32])
at::Tensor int4_mm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& sz,
                   at::Tensor* slot = nullptr);

// layer.cpp: one token's layer steps (the file says what each does); `slot`, `slots`: where
// the outputs are kept between calls (out_of), none: new tensors
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps,
                    at::Tensor* slot = nullptr);
std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& a,
                                                const at::Tensor& w, double eps,
                                                at::Tensor* slots = nullptr);
at::Tensor silu_mul(const at::Tensor& u, at::Tensor* slot = nullptr);
// a float layer's steps (bfloat16 or float32), the unfused step's bits
at::Tensor exact_rms_norm(const at::Tensor& x, const at::Tensor& w, double eps,
                          at::Tensor* slot = nullptr);
at::Tensor add(const at::Tensor& x, const at::Tensor& a, at::Tensor* slot = nullptr);
at::Tensor mul(const at::Tensor& x, const at::Tensor& a);
at::Tensor rope_kv(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                   at::Tensor& k_all, at::Tensor& v_all, int64_t layer, const at::Tensor& pos,
                   int64_t n_heads, int64_t n_kv, int64_t rot, at::Tensor* slot = nullptr);
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_all,
                            const at::Tensor& v_all, int64_t layer, int64_t len, double scale,
                            bool sdpa_rounding = false, at::Tensor* slot = nullptr);

}  // namespace lab

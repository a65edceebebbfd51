// One token's Llama-shaped decoder layer in one call (engine/step/forward.py's fused_layer):
// TorchScript then interprets one call a layer where the unfused layer makes ~30 (and ~40
// more of views and branches), which was 0.4 ms of a SmolLM2 int4 token and 1.4 ms of a
// bfloat16 one on a 2-core CPU (resources/notes/quantized-weights.md, "Stop 45").
//
// Two kinds of layer take it:
//   quantised (int8 / int4 matrices): the lab's own steps (layer.cpp), as fused_layer made
//     them one op call each before, the same numbers up to the order of a sum;
//   bfloat16 (float matrices): torch's own operations in the unfused step's order
//     (engine/step/forward.py's decoder_layer: its norm, SiLU, SDPA and additions) and
//     layer.cpp's rotary and cache write (the unfused one's bits), so the same bits, and
//     transformers' greedy tokens with them.

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <string>

#include "lab.h"

namespace {

// mkldnn::_linear_pointwise(x, w, None, "none", [], ""): kernels.py's linear for the
// bfloat16 matrices engine.step.fastpath.prepared packed for oneDNN
at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& w) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  torch::jit::Stack stack{x, w, c10::IValue(), c10::IValue(std::string("none")),
                          c10::IValue(c10::List<std::optional<at::Scalar>>()),
                          c10::IValue(std::string(""))};
  op.callBoxed(&stack);
  return stack.back().toTensor();
}

// x [1, K] bfloat16 @ w.T (+ b): kernels.py's mm and forward.py's affine for the matrices a
// fused layer holds: int8 / int4 in the lab's layouts or PyTorch's (a matrix whose shape
// kept it there), or bfloat16 (oneDNN's packing, or plain)
at::Tensor affine(const at::Tensor& x, const at::Tensor& w, const at::Tensor& s,
                  const at::Tensor& b, bool onednn) {
  TORCH_CHECK(s.numel() == 0 || !w.is_mkldnn(),
              "a fused layer's int8 matrices are not packed for oneDNN");
  at::Tensor y;
  if (s.numel() == 0)
    y = onednn ? onednn_linear(x, w) : at::matmul(x, w.t());
  else if (w.dim() == 3)
    y = w.scalar_type() == at::kChar ? lab::int8_mm(x, w, s) : lab::int4_mm(x, w, s);
  else if (w.scalar_type() == at::kChar)
    y = at::_weight_int8pack_mm(x, w, s);  // x from at::empty: aligned as the kernel needs
  else
    y = at::_weight_int4pack_mm_for_cpu(x, w, x.size(1) / s.size(0), s);
  return b.numel() > 0 ? y + b : y;  // torch's bfloat16 add, as the unfused step's
}

// forward.py's norm for NORM_RMS: w * rms(x.float(), eps).to(x.dtype), rms spelt out as
// forward.rms spells it on the CPU (the same operations, so the same bits)
at::Tensor torch_rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor r = xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps);
  return w * r.to(x.scalar_type());
}

// forward.py's attend for one query without a mask or soft cap: SDPA over the cache
at::Tensor torch_attention(const at::Tensor& q, const at::Tensor& k_all, const at::Tensor& v_all,
                           int64_t layer, int64_t len, double scale, bool gqa) {
  const at::Tensor k = k_all.select(0, layer).slice(1, 0, len);
  const at::Tensor v = v_all.select(0, layer).slice(1, 0, len);
  return at::scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                                          std::nullopt, 0.0, false, scale, gqa)[0];
}

// The order of the tensors decode_layer reads from a layer's list (fused_layer passes their
// slots in it)
enum Slot { kInW, kQkvW, kQkvS, kQkvB, kOW, kOS, kOB, kPfW, kUpW, kUpS, kUpB, kDownW,
            kDownS, kDownB, kSlots };

struct LayerIn {
  at::TensorList w;
  at::IntArrayRef slots;
  const at::Tensor& operator[](Slot i) const { return w[slots[i]]; }
};

// x [1, hidden] bfloat16 -> [1, hidden]: the file's head says which steps each kind takes
at::Tensor decode_layer(const at::Tensor& x, at::TensorList w, at::IntArrayRef slots,
                        int64_t layer, const at::Tensor& pos, const at::Tensor& cos,
                        const at::Tensor& sin, at::Tensor& k_all, at::Tensor& v_all,
                        int64_t len, int64_t n_heads, int64_t n_kv, int64_t rot, double eps,
                        double scale, bool onednn) {
  TORCH_CHECK(static_cast<int64_t>(slots.size()) == kSlots, "decode_layer reads ", kSlots,
              " slots of a layer");
  for (const int64_t at_slot : slots)
    TORCH_CHECK(at_slot >= 0 && at_slot < static_cast<int64_t>(w.size()), "slot ", at_slot,
                " is not in the layer's ", w.size(), " tensors");
  const LayerIn t{w, slots};
  lab::check_bf16(x, "x");
  TORCH_CHECK(x.dim() == 2 && x.size(0) == 1, "decode_layer takes one token, x [1, hidden]");
  const bool exact = t[kQkvS].numel() == 0;  // float matrices: torch's own steps
  const at::Tensor h = exact ? torch_rms_norm(x, t[kInW], eps) : lab::rms_norm(x, t[kInW], eps);
  const at::Tensor qkv = affine(h, t[kQkvW], t[kQkvS], t[kQkvB], onednn).contiguous();
  const at::Tensor q = lab::rope_kv(qkv, cos, sin, k_all, v_all, layer, pos, n_heads, n_kv, rot);
  const at::Tensor att =
      exact ? torch_attention(q, k_all, v_all, layer, len, scale, n_heads != n_kv)
            : lab::decode_attention(q, k_all, v_all, layer, len, scale);
  const at::Tensor a =
      affine(att.transpose(0, 1).reshape({1, -1}), t[kOW], t[kOS], t[kOB], onednn);
  at::Tensor s, u;
  if (exact) {
    s = x + a;
    const at::Tensor up = affine(torch_rms_norm(s, t[kPfW], eps), t[kUpW], t[kUpS], t[kUpB],
                                 onednn);
    const auto halves = up.chunk(2, -1);
    u = at::silu(halves[0]) * halves[1];
  } else {
    at::Tensor h2;
    std::tie(s, h2) = lab::add_rms_norm(x, a, t[kPfW], eps);
    u = lab::silu_mul(affine(h2, t[kUpW], t[kUpS], t[kUpB], onednn));
  }
  const at::Tensor m = affine(u, t[kDownW], t[kDownS], t[kDownB], onednn);
  TORCH_CHECK(m.sizes() == s.sizes(), "the down product does not give the hidden width");
  return s + m;  // torch's bfloat16 add: one rounding of the float32 sum, as the lab's
}

}  // namespace

TORCH_LIBRARY_IMPL(decoding_lab, CPU, m) { m.impl("decode_layer", &decode_layer); }
// a bfloat16 layer's matrices packed for oneDNN are MkldnnCPU tensors, which pick this key
TORCH_LIBRARY_IMPL(decoding_lab, MkldnnCPU, m) { m.impl("decode_layer", &decode_layer); }

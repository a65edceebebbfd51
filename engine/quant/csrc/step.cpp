// One token's Llama-shaped decoder layer in one call, and a whole token's step in one call
// (the Decoder class: embedding, rotary tables, every layer, final norm and head), for
// engine.step.fastpath.FastStepper: TorchScript then interprets nothing for a new token,
// where the unfused step makes ~30 op calls a layer (and ~40 more of views and branches),
// and the fused layer of stop 45 one op call a layer with its 22 tensors converted each time
// (resources/notes/quantized-weights.md, "Stop 45" and "Stop 46").
//
// Three kinds of layer take it:
//   quantised (int8 / int4 matrices): the lab's own steps (layer.cpp), the unfused step's
//     numbers up to the order of a sum;
//   bfloat16 and float32 (float matrices): the unfused step's operations in its order
//     (engine/step/forward.py's decoder_layer): torch's own SiLU, float32's SDPA, bfloat16's
//     lab attention with SDPA's rounding (as the unfused step takes it: attention.cpp), and
//     layer.cpp's passes for the norm (its mean summed in aten's order), the additions,
//     SiLU's product and the rotary with its cache write, each the unfused operation's bits;
//     so the same bits, and in float32 transformers' greedy tokens with them.

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lab.h"
#include "stats.h"

namespace {

// mkldnn::_linear_pointwise(x, w, None, "none", [], ""): kernels.py's linear for the
// bfloat16 matrices engine.step.fastpath.prepared packed for oneDNN
at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& w) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  // the constant arguments made once (a string or list IValue allocates; ~120 calls a token)
  static const c10::IValue none_attr{std::string("none")}, no_algorithm{std::string("")},
      no_scalars{c10::List<std::optional<at::Scalar>>()};
  torch::jit::Stack stack{x, w, c10::IValue(), none_attr, no_scalars, no_algorithm};
  op.callBoxed(&stack);
  return stack.back().toTensor();
}

// x [1, K] @ w.T (+ b): kernels.py's mm and forward.py's affine for the matrices a fused
// layer holds: int8 / int4 (x bfloat16) in the lab's layouts or PyTorch's (a matrix whose
// shape kept it there), or float ones in x's dtype (bfloat16 packed for oneDNN, or plain;
// float32 as the model holds it)
at::Tensor affine(const at::Tensor& x, const at::Tensor& w, const at::Tensor& s,
                  const at::Tensor& b, bool onednn, at::Tensor* slot = nullptr) {
  TORCH_CHECK(s.numel() == 0 || !w.is_mkldnn(),
              "a fused layer's int8 matrices are not packed for oneDNN");
  at::Tensor y;
  if (s.numel() == 0)
    y = onednn ? onednn_linear(x, w) : at::matmul(x, w.t());
  else if (w.dim() == 3)
    y = w.scalar_type() == at::kChar ? lab::int8_mm(x, w, s, slot) : lab::int4_mm(x, w, s, slot);
  else if (w.scalar_type() == at::kChar)
    y = at::_weight_int8pack_mm(x, w, s);  // x from at::empty: aligned as the kernel needs
  else
    y = at::_weight_int4pack_mm_for_cpu(x, w, x.size(1) / s.size(0), s);
  return b.numel() > 0 ? y + b : y;  // torch's bfloat16 add, as the unfused step's
}

// forward.py's attend for one query without a mask or soft cap: SDPA over the cache (a
// float32 layer's; a bfloat16 one takes the lab's attention, as forward.py does)
at::Tensor torch_attention(const at::Tensor& q, const at::Tensor& k_all, const at::Tensor& v_all,
                           int64_t layer, int64_t len, double scale, bool gqa) {
  const at::Tensor k = k_all.select(0, layer).slice(1, 0, len);
  const at::Tensor v = v_all.select(0, layer).slice(1, 0, len);
  return at::scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                                          std::nullopt, 0.0, false, scale, gqa)[0];
}

// The order of the tensors a layer's step reads (engine.step.fastpath.FUSED_SLOTS names the
// layer's slots in it; the Decoder holds each layer's tensors in it)
enum Slot { kInW, kQkvW, kQkvS, kQkvB, kOW, kOS, kOB, kPfW, kUpW, kUpS, kUpB, kDownW,
            kDownS, kDownB, kSlots };

struct LayerIn {
  at::TensorList w;
  at::IntArrayRef slots;
  const at::Tensor& operator[](Slot i) const { return w[slots[i]]; }
};

// The model's numbers every layer shares
struct Shape {
  int64_t n_heads, n_kv, rot;
  double eps, scale;
  bool onednn;
};

// A layer's output as the two terms of its last residual addition, x = s + d (d undefined:
// x = s): the next layer adds them in the same pass as its first norm
struct Residual {
  at::Tensor s, d;
};

// Where a quantised layer's steps keep their outputs from layer to layer and token to token
// (lab::out_of): each step its own, so no step writes what a later one still reads. kX, kH
// and kS, kH2: each norm's (sum, output) pair, as add_rms_norm takes its slots.
enum Scratch { kX, kH, kQkv, kQ, kAtt, kA, kS, kH2, kUp, kU, kDown, kScratch };

// (x, norm(x)) from the residual terms: float matrices take the unfused norm's bits, a
// quantised layer the lab's (the same numbers up to the order of a sum), in `slots` (x's,
// then the norm's) where given
std::tuple<at::Tensor, at::Tensor> add_norm(const Residual& r, const at::Tensor& w, double eps,
                                            bool exact, at::Tensor* slots = nullptr) {
  if (exact) {
    const at::Tensor x = r.d.defined() ? lab::add(r.s, r.d, slots) : r.s;
    return {x, lab::exact_rms_norm(x, w, eps, slots != nullptr ? slots + 1 : nullptr)};
  }
  if (r.d.defined()) return lab::add_rms_norm(r.s, r.d, w, eps, slots);
  return {r.s, lab::rms_norm(r.s, w, eps, slots != nullptr ? slots + 1 : nullptr)};
}

at::Tensor sum(const Residual& r) { return r.d.defined() ? lab::add(r.s, r.d) : r.s; }

// One layer over x = in.s + in.d [1, hidden], bfloat16 (or float32 for float matrices): the
// file's head says which steps each kind takes. `scratch` (kScratch tensors, or none: new
// ones): where a quantised layer's steps keep their outputs; the residual returned is in it
Residual layer_step(const Residual& in, const LayerIn& t, int64_t layer, const at::Tensor& pos,
                    const at::Tensor& cos, const at::Tensor& sin, at::Tensor& k_all,
                    at::Tensor& v_all, int64_t len, const Shape& m,
                    at::Tensor* scratch = nullptr) {
  const auto at = [scratch](Scratch i) { return scratch != nullptr ? scratch + i : nullptr; };
  const bool exact = t[kQkvS].numel() == 0;  // float matrices: the unfused step's bits
  const at::Tensor& x0 = in.s;
  if (!exact || x0.scalar_type() != at::kFloat) lab::check_bf16(x0, "x");
  TORCH_CHECK(x0.dim() == 2 && x0.size(0) == 1 && x0.is_contiguous(),
              "decode_layer takes one token, x [1, hidden]");
  const auto [x, h] = add_norm(in, t[kInW], m.eps, exact, at(kX));
  const at::Tensor qkv =
      affine(h, t[kQkvW], t[kQkvS], t[kQkvB], m.onednn, at(kQkv)).contiguous();
  const at::Tensor q = lab::rope_kv(qkv, cos, sin, k_all, v_all, layer, pos, m.n_heads, m.n_kv,
                                    m.rot, at(kQ));
  const at::Tensor att =
      exact && x0.scalar_type() == at::kFloat
          ? torch_attention(q, k_all, v_all, layer, len, m.scale, m.n_heads != m.n_kv)
          : lab::decode_attention(q, k_all, v_all, layer, len, m.scale, exact, at(kAtt));
  const at::Tensor a =
      affine(att.transpose(0, 1).reshape({1, -1}), t[kOW], t[kOS], t[kOB], m.onednn, at(kA));
  const auto [s, h2] = add_norm(Residual{x, a}, t[kPfW], m.eps, exact, at(kS));
  const at::Tensor up = affine(h2, t[kUpW], t[kUpS], t[kUpB], m.onednn, at(kUp));
  at::Tensor u;
  if (exact) {  // torch's SiLU, then its product's bits
    const int64_t inner = up.size(1) / 2;
    u = lab::mul(at::silu(up.narrow(1, 0, inner)), up.narrow(1, inner, inner).contiguous());
  } else {
    u = lab::silu_mul(up, at(kU));
  }
  const at::Tensor down = affine(u, t[kDownW], t[kDownS], t[kDownB], m.onednn, at(kDown));
  TORCH_CHECK(down.sizes() == s.sizes(), "the down product does not give the hidden width");
  return Residual{s, down};
}

void check_slots(at::TensorList w, at::IntArrayRef slots) {
  TORCH_CHECK(static_cast<int64_t>(slots.size()) == kSlots, "decode_layer reads ", kSlots,
              " slots of a layer");
  for (const int64_t at_slot : slots)
    TORCH_CHECK(at_slot >= 0 && at_slot < static_cast<int64_t>(w.size()), "slot ", at_slot,
                " is not in the layer's ", w.size(), " tensors");
}

// The op: one layer, its tensors `w` read at `slots` (in Slot's order)
at::Tensor decode_layer(const at::Tensor& x, at::TensorList w, at::IntArrayRef slots,
                        int64_t layer, const at::Tensor& pos, const at::Tensor& cos,
                        const at::Tensor& sin, at::Tensor& k_all, at::Tensor& v_all,
                        int64_t len, int64_t n_heads, int64_t n_kv, int64_t rot, double eps,
                        double scale, bool onednn) {
  check_slots(w, slots);
  const Shape m{n_heads, n_kv, rot, eps, scale, onednn};
  return sum(layer_step(Residual{x, {}}, LayerIn{w, slots}, layer, pos, cos, sin, k_all, v_all,
                        len, m));
}

constexpr int64_t kInOrder[kSlots] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};

// A whole token's step for one model (engine.step.fastpath.FastStepper builds it once, with
// the tensors the step holds, shared, not copied): engine/step/forward.py's forward for one
// id at one position with keep = 1, in its operations' order, so its bits
struct Decoder : torch::CustomClassHolder {
  // the rotary tables are made this many positions at a time, by the unfused step's own
  // operations on the block's positions: each row its bits (a test runs past a block)
  static constexpr int64_t kRopeRows = 64;

  std::vector<at::Tensor> layers;  // kSlots a layer, in Slot's order
  at::Tensor embed, final_w, head, head_s, inv_freq, none, at_pos;
  std::vector<at::Tensor> cos_rows, sin_rows;  // [kRopeRows, rot] blocks, in x's dtype
  std::vector<at::Tensor> scratch = std::vector<at::Tensor>(kScratch);  // layer_step's
  Shape shape;
  double rope_scale;

  // rest: embed, final norm's weight, head, head's scales, the rotary's inverse frequencies;
  // ints: rot, heads, kv heads; floats: rotary scale, eps, attention scale
  Decoder(std::vector<at::Tensor> w, std::vector<at::Tensor> rest, std::vector<int64_t> ints,
          std::vector<double> floats, bool onednn)
      : layers(std::move(w)) {
    TORCH_CHECK(!layers.empty() && layers.size() % kSlots == 0, "a Decoder takes ", kSlots,
                " tensors a layer");
    TORCH_CHECK(rest.size() == 5 && ints.size() == 3 && floats.size() == 3,
                "a Decoder takes 5 model tensors, 3 ints and 3 floats");
    embed = rest[0];
    final_w = rest[1];
    head = rest[2];
    head_s = rest[3];
    inv_freq = rest[4];
    TORCH_CHECK(head_s.numel() == 0 || !head.is_mkldnn(),
                "a Decoder's head is not packed for oneDNN's int8: give it none");
    TORCH_CHECK(embed.dim() == 2 && inv_freq.dim() == 1 && 2 * inv_freq.size(0) == ints[0],
                "the embedding or the rotary frequencies do not fit");
    shape = Shape{ints[1], ints[2], ints[0], floats[1], floats[2], onednn};
    rope_scale = floats[0];
    none = at::empty({0}, embed.options());
    at_pos = at::zeros({1}, embed.options().dtype(at::kLong));
  }

  // forward.py's rotary tables at `pos` ([1, rot] views), made a block at a time
  std::pair<at::Tensor, at::Tensor> rotary(int64_t pos) {
    const int64_t block = pos / kRopeRows;
    while (static_cast<int64_t>(cos_rows.size()) <= block) {
      const int64_t first = static_cast<int64_t>(cos_rows.size()) * kRopeRows;
      const at::Tensor at = at::arange(first, first + kRopeRows, at_pos.options());
      const at::Tensor freqs = at::outer(at.to(at::kFloat), inv_freq);
      const at::Tensor emb = at::cat({freqs, freqs}, -1);
      cos_rows.push_back((emb.cos() * rope_scale).to(embed.scalar_type()));
      sin_rows.push_back((emb.sin() * rope_scale).to(embed.scalar_type()));
    }
    const int64_t row = pos % kRopeRows;
    return {cos_rows[block].narrow(0, row, 1), sin_rows[block].narrow(0, row, 1)};
  }

  // logits [1, vocab] float32 of `token` at position `pos`; its keys and values written into
  // k_all / v_all, attention over their first `len` positions. A Decoder given no head (an
  // empty one) returns the final norm's output [1, hidden], for the caller's head
  at::Tensor step(int64_t token, int64_t pos, at::Tensor k_all, at::Tensor v_all, int64_t len) {
    TORCH_CHECK(token >= 0 && token < embed.size(0), "token ", token, " is not in the vocabulary");
    TORCH_CHECK(pos >= 0 && len == pos + 1 && len <= k_all.size(2), "position ", pos,
                " with attention over ", len, " does not fit the cache (one new token: ",
                "attention reads the positions up to it)");
    at_pos.data_ptr<int64_t>()[0] = pos;
    const auto [cos, sin] = rotary(pos);
    const int64_t n = static_cast<int64_t>(layers.size()) / kSlots;
    Residual r{embed.narrow(0, token, 1), {}};  // the token's row, read, never written
    for (int64_t i = 0; i < n; ++i) {
      const LayerIn t{at::TensorList(layers).slice(i * kSlots, kSlots), kInOrder};
      r = layer_step(r, t, i, at_pos, cos, sin, k_all, v_all, len, shape, scratch.data());
    }
    // forward.py's final norm: torch's bits for float layers, the lab's (as a quantised
    // layer's norms, the same numbers up to the order of a sum) after quantised ones; in new
    // tensors, as the head's output: the step's caller keeps what it returns
    const bool exact = layers[kQkvS].numel() == 0;
    const at::Tensor x = std::get<1>(add_norm(r, final_w, shape.eps, exact));
    if (head.numel() == 0) return x;
    return affine(x, head, head_s, none, shape.onednn).to(at::kFloat);
  }

  // step's logits and, from them in the same call, a greedy step's packed record of the top
  // n (greedy.cpp's greedy_stats, its finiteness read from the logits): its passes run while
  // each thread's part of the logits, which its share of the head wrote, is in its cache.
  // For a Decoder that holds the head.
  std::tuple<at::Tensor, at::Tensor> step_greedy(int64_t token, int64_t pos, at::Tensor k_all,
                                                 at::Tensor v_all, int64_t len, int64_t n) {
    TORCH_CHECK(head.numel() > 0, "a Decoder without its head gives no logits to measure");
    at::Tensor logits = step(token, pos, std::move(k_all), std::move(v_all), len);
    const at::Tensor unread = at::empty({0}, logits.options().dtype(at::kBool));
    return {logits, stats::greedy_stats(logits, n, unread)};
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(decoding_lab, CPU, m) { m.impl("decode_layer", &decode_layer); }
// a bfloat16 layer's matrices packed for oneDNN are MkldnnCPU tensors, which pick this key
TORCH_LIBRARY_IMPL(decoding_lab, MkldnnCPU, m) { m.impl("decode_layer", &decode_layer); }

TORCH_LIBRARY_FRAGMENT(decoding_lab, m) {
  m.class_<Decoder>("Decoder")
      .def(torch::init<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<int64_t>,
                       std::vector<double>, bool>())
      .def("step", &Decoder::step)
      .def("step_greedy", &Decoder::step_greedy);
}

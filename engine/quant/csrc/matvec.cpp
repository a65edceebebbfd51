// The lab's own int8 / int4 weight-only products for the CPU (engine/quant/native.py builds
// this file on the machine that runs it, with -march=native, and says why it does).
//
// Why: PyTorch's weight-only kernels (_weight_int8pack_mm, _weight_int4pack_mm_for_cpu) are
// bound by their arithmetic on a 2-core CPU, not by memory (resources/notes/
// quantized-weights.md, "Stop 43" and "Stop 44"). Here each group of 32 activations becomes
// integers with its own scale (r = max|x| / 32767 over the group for int8, int16; / 16383 for
// int4, 15 bits: an element is off by at most r / 2), and the integer weights meet them in
// integer dot products (int8: 16-bit, AVX512-VNNI's vpdpwssd or vpmaddwd; int4: bytes, x's
// two byte halves, vpdpbusd or vpmaddubsw), so a weight costs a fraction of an instruction.
// Sums are exact in int32 within a group, then scaled and added in float32; the output is
// rounded to bfloat16 like PyTorch's kernels.
//
// Layouts (engine/quant/native.py makes them):
//   int8: w int8 [N, K / 32, 32] (the plain [N, K] matrix, viewed); s bfloat16 [N]:
//         weight = q * s.
//   int4: w uint8 [N, K / 64, 32] and sz bfloat16 [N, 2, K / 32] by shape, in memory blocks
//         of 8 rows (N a multiple of 8): per group of 32 columns, 4 chunks of the 8 rows'
//         32-bit words (nibble t of a word: column 8c + t), then per group the 8 rows'
//         scales and their 8 zeros: weight = (u - 8) * scale + zero (dots.h). A slice of
//         whole blocks is a matrix of its own (q, k and v fused).
// A few rows of x (decode, beam, a draft's check) go through the integer dot products; more
// rows (a prompt, a scored text) through float32 tiles of the dequantised weights and at::mm.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "dots.h"
#include "lab.h"

namespace {

constexpr int64_t kFewRows = 4;    // at most this many rows of x use the integer products
constexpr int64_t kTileBytes = 256 * 1024;  // a thread's tile of weights for more rows of x

// ---- checks -----------------------------------------------------------------------------

void check_x(const at::Tensor& x, int64_t k, int64_t multiple) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.is_contiguous(),
              "x must be a contiguous bfloat16 [M, K] matrix");
  TORCH_CHECK(x.size(1) == k && k % multiple == 0, "x has ", x.size(1),
              " columns; the weights take ", k, " (a multiple of ", multiple, ")");
}

// x's rows quantised, in this thread's buffers (reused from call to call: a token's ~120
// products allocated and freed four vectors each)
const std::vector<QuantRow>& quantise_rows(const at::Tensor& x, int grid) {
  const int64_t m = x.size(0), k = x.size(1);
  thread_local std::vector<QuantRow> rows;
  rows.resize(m);
  const auto* xp = x.data_ptr<c10::BFloat16>();
  for (int64_t i = 0; i < m; ++i) quantise_row(xp + i * k, k, grid, rows[i]);
  return rows;
}

// ---- more rows of x ----------------------------------------------------------------------

// The product for more than a few rows of x (a prompt, a scored text): the weights
// dequantised to float32 and multiplied by at::mm (float32, as PyTorch's own kernels compute
// these rows), a tile of rows at a time, each thread its own tiles: a tile of ~256 KB stays in
// the thread's L2 cache from its writing to at::mm's reading (one tile of 512 rows for both
// threads was up to 10 MB, written to and read back from L3 or memory: 0.28 of 0.76 s in a
// 38-token Qwen2.5-0.5B int4 prompt, AMD EPYC). Tiles of rows [rows, K], `fill(r, t)`
// writing row r's K floats; or, kBlocks (int4's blocks of 8 rows), tiles of columns [K,
// rows], `fill(r, t, ld)` writing rows r..r + 7 as 8 columns, ld = rows apart.
template <bool kBlocks = false, typename Fill>
at::Tensor many_rows(const at::Tensor& x, int64_t n, int64_t k, const Fill& fill,
                     at::ScalarType out_type = at::kBFloat16) {
  at::Tensor out = at::empty({x.size(0), n}, x.options().dtype(out_type));
  const at::Tensor xf = x.to(at::kFloat);
  const int64_t rows = std::clamp<int64_t>(kTileBytes / (k * 4) / 16 * 16, 16, 512);
  const bool inference = c10::InferenceMode::is_enabled();  // thread-local: carried over
  at::parallel_for(0, (n + rows - 1) / rows, 1, [&](int64_t a, int64_t b) {
    const c10::InferenceMode mode(inference);
    // at::mm inside: one thread
    at::Tensor tile = at::empty({kBlocks ? k : rows, kBlocks ? rows : k}, at::kFloat);
    float* t = tile.data_ptr<float>();
    for (int64_t i = a; i < b; ++i) {
      const int64_t n0 = i * rows, m = std::min(rows, n - n0);
      if constexpr (kBlocks) {
        for (int64_t r = 0; r < m; r += 8) fill(n0 + r, t + r, rows);
        out.narrow(1, n0, m).copy_(at::mm(xf, tile.narrow(1, 0, m)));
      } else {
        for (int64_t r = 0; r < m; ++r) fill(n0 + r, t + r * k);
        out.narrow(1, n0, m).copy_(at::mm(xf, tile.narrow(0, 0, m).t()));
      }
    }
  });
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

}  // namespace

namespace lab {

// bfloat16 scales give a bfloat16 product (a layer); float32 scales a float32 one (an output
// head: its logits are not rounded to bfloat16's steps of 0.03-0.06 at 10-20)
at::Tensor int8_mm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& s,
                   at::Tensor* slot) {
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
  const std::vector<QuantRow>& rows = quantise_rows(x, kInt8Grid);
  if (head) {
    at::Tensor out = out_of(slot, {m, n}, x.options().dtype(at::kFloat));
    int8_rows(wp, scale, rows, n, k, out.data_ptr<float>());
    return out;
  }
  at::Tensor out = out_of(slot, {m, n}, x.options());
  int8_rows(wp, scale, rows, n, k, out.data_ptr<c10::BFloat16>());
  return out;
}

}  // namespace lab

// ---- int4 ---------------------------------------------------------------------------------

namespace lab {

at::Tensor int4_mm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& sz,
                   at::Tensor* slot) {
  TORCH_CHECK(w.dim() == 3 && w.size(2) == 32 && w.scalar_type() == at::kByte &&
                  w.is_contiguous() && w.size(0) % 8 == 0,
              "int4 weights must be contiguous uint8 [N, K / 64, 32], N a multiple of 8");
  const int64_t n = w.size(0), k = w.size(1) * 64, m = x.size(0), groups = k / kGroup;
  check_x(x, k, 64);
  TORCH_CHECK(sz.dim() == 3 && sz.size(0) == n && sz.size(1) == 2 && sz.size(2) == groups &&
                  sz.scalar_type() == at::kBFloat16 && sz.is_contiguous(),
              "int4 scales must be contiguous bfloat16 [N, 2, K / 32]");
  const auto* wp = reinterpret_cast<const uint32_t*>(w.data_ptr<uint8_t>());
  const auto* sp = reinterpret_cast<const uint16_t*>(sz.data_ptr<c10::BFloat16>());
  auto words = [&](int64_t b) { return wp + b * groups * 32; };  // block b's, rows 8b..8b+7
  auto scales = [&](int64_t b) { return sp + b * groups * 16; };
  if (m > kFewRows)
    return many_rows<true>(x, n, k, [&](int64_t r, float* t, int64_t ld) {
      int4_block_columns(words(r / 8), scales(r / 8), groups, t, ld);
    });
  at::Tensor out = out_of(slot, {m, n}, x.options());
  auto* op = out.data_ptr<c10::BFloat16>();
  const std::vector<QuantRow>& rows = quantise_rows(x, kInt4Grid);
  thread_local std::vector<std::vector<int32_t>> kept;  // this thread's, reused
  std::vector<std::vector<int32_t>>& bytes = kept;      // the workers read the caller's
  bytes.resize(m);
  for (int64_t i = 0; i < m; ++i) int4_bytes(rows[i], k, bytes[i]);
  at::parallel_for(0, n / 8, 2, [&](int64_t a, int64_t b) {
    float got[8];
    for (int64_t blk = a; blk < b; ++blk)
      for (int64_t i = 0; i < m; ++i) {
        dot_int4_block(words(blk), scales(blk), rows[i], bytes[i].data(), groups, got);
        for (int j = 0; j < 8; ++j) op[i * n + blk * 8 + j] = c10::BFloat16(got[j]);
      }
  });
  return out;
}

}  // namespace lab

namespace {

std::string isa() {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  return "avx512-vnni";
#elif defined(__AVX512BW__)
  return "avx512";
#elif defined(__AVXVNNI__) && defined(__AVX2__)
  return "avx-vnni";
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
  m.impl("int8_mm", [](const at::Tensor& x, const at::Tensor& w, const at::Tensor& s) {
    return lab::int8_mm(x, w, s);
  });
  m.impl("int4_mm", [](const at::Tensor& x, const at::Tensor& w, const at::Tensor& sz) {
    return lab::int4_mm(x, w, sz);
  });
}

TORCH_LIBRARY_FRAGMENT(decoding_lab, m) { m.def("isa() -> str", &isa); }

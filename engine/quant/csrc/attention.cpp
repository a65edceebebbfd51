// Attention of one new token's query heads over the KV cache, for a quantised model's layer
// (step.cpp's Decoder; engine/quant/native.py builds this file with the others): scores,
// softmax and sums in float32 from the bfloat16 cache, in fixed chunks of positions spread
// over the threads, each chunk's partial softmax then combined in order, so the numbers do
// not depend on the number of threads. Within bfloat16's rounding of the exact attention,
// and no further from it than SDPA (tests/engine/test_fused_layer.py); a float model's layer
// runs SDPA itself, for the unfused step's bits.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "lab.h"
#include "vmath.h"

using bf16 = c10::BFloat16;
using lab::check_bf16;
using lab::to_bf16;

namespace {

struct GroupArgs {
  const bf16 *q, *k, *v;
  int64_t layer, kv, cap, d, len, rep;
  float scale;
};

// Positions a unit of attention's work covers: kv head g's positions [c kChunk, (c + 1)
// kChunk) for the query heads that read it. Fixed, whatever the threads, so the numbers do
// not depend on how many there are; small enough that two threads share a short context's
// few kv heads evenly (SmolLM2's 3 at 40-70 positions: 6-9 units where whole heads split 2 + 1)
constexpr int64_t kChunk = 32;

// One unit's partial softmax, for each of its `rep` query heads r: the largest score top[r],
// the sum of e^(score - top) total[r] and the e^(score - top)-weighted sum of the value rows
// acc[r * d, (r + 1) d), float32. Each key and value row is read and widened once for the
// query heads that read it. D: the head width, known when the compiler can unroll a row (64,
// 128), 0 when it is read from `a`
template <int D>
void attend_chunk(const GroupArgs& a, int64_t g, int64_t t0, int64_t t1, float* top, float* total,
                  float* acc) {
  const int64_t d = D > 0 ? D : a.d, rep = a.rep, n = t1 - t0;
  float qf[8 * 128], score[8 * kChunk], row[128];
  std::vector<float> spill;  // a head wider than 128 or more than 8 query heads a kv head
  float* q = qf;
  float* sc = score;
  float* rw = row;
  if (d > 128 || rep > 8) {
    spill.resize(rep * d + rep * kChunk + d);
    q = spill.data();
    sc = q + rep * d;
    rw = sc + rep * kChunk;
  }
  const int64_t base = (a.layer * a.kv + g) * a.cap * d;
  for (int64_t j = 0; j < rep * d; ++j) q[j] = static_cast<float>(a.q[g * rep * d + j]);
  for (int64_t r = 0; r < rep; ++r) top[r] = -INFINITY;
  for (int64_t t = 0; t < n; ++t) {
    const bf16* k = a.k + base + (t0 + t) * d;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) rw[j] = static_cast<float>(k[j]);
    for (int64_t r = 0; r < rep; ++r) {
      const float* qr = q + r * d;
      float dot = 0.f;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < d; ++j) dot += qr[j] * rw[j];
      sc[r * n + t] = dot * a.scale;
      top[r] = std::max(top[r], dot * a.scale);
    }
  }
  for (int64_t r = 0; r < rep; ++r) {
    float* sr = sc + r * n;
    const float most = top[r];
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t t = 0; t < n; ++t) {
      sr[t] = vmath::exp(sr[t] - most);
      sum += sr[t];
    }
    total[r] = sum;
  }
  std::fill(acc, acc + rep * d, 0.f);
  for (int64_t t = 0; t < n; ++t) {
    const bf16* v = a.v + base + (t0 + t) * d;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) rw[j] = static_cast<float>(v[j]);
    for (int64_t r = 0; r < rep; ++r) {
      const float pt = sc[r * n + t];
      float* ar = acc + r * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) ar[j] += pt * rw[j];
    }
  }
}

}  // namespace

namespace lab {

// Attention of one query per head over the cache's first `len` positions: q [H, 1, D] ->
// [H, 1, D]; head h reads kv head h / (H / KV); scores, softmax and sums in float32, in
// fixed chunks of positions (attend_chunk) whose partial softmaxes are then combined in order
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_all,
                            const at::Tensor& v_all, int64_t layer, int64_t len, double scale,
                            at::Tensor* slot) {
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
  at::Tensor out = out_of(slot, qc.sizes(), qc.options());
  const bf16* qp = qc.data_ptr<bf16>();
  const bf16* kp = k_all.data_ptr<bf16>();
  const bf16* vp = v_all.data_ptr<bf16>();
  bf16* op = out.data_ptr<bf16>();
  const int64_t rep = heads / kv;  // query heads that read each kv head
  const GroupArgs args{qp, kp, vp, layer, kv, cap, d, len, rep, static_cast<float>(scale)};
  // each unit's partials (top, total, acc for each query head), then each head's in order
  const int64_t chunks = (len + kChunk - 1) / kChunk, width = rep * (d + 2);
  // in the calling thread's buffer, grown once (a thread_local named inside the threads'
  // lambda would be each thread's own: they are given its data)
  thread_local std::vector<float> parts;
  parts.resize(kv * chunks * width);
  float* const part = parts.data();
  at::parallel_for(0, kv * chunks, 1, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t g = u / chunks, t0 = (u % chunks) * kChunk;
      const int64_t t1 = std::min(len, t0 + kChunk);
      float* p = part + u * width;
      if (d == 64) attend_chunk<64>(args, g, t0, t1, p, p + rep, p + 2 * rep);
      else if (d == 128) attend_chunk<128>(args, g, t0, t1, p, p + rep, p + 2 * rep);
      else attend_chunk<0>(args, g, t0, t1, p, p + rep, p + 2 * rep);
    }
  });
  thread_local std::vector<float> acc;
  acc.resize(d);
  for (int64_t g = 0; g < kv; ++g)
    for (int64_t r = 0; r < rep; ++r) {
      float most = -INFINITY;
      for (int64_t c = 0; c < chunks; ++c)
        most = std::max(most, part[(g * chunks + c) * width + r]);
      float total = 0.f;
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t c = 0; c < chunks; ++c) {
        const float* p = part + (g * chunks + c) * width;
        const float w = vmath::exp(p[r] - most);  // the chunk's partials, rescaled
        total += w * p[rep + r];
        const float* pa = p + 2 * rep + r * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) acc[j] += w * pa[j];
      }
      bf16* o = op + (g * rep + r) * d;
      for (int64_t j = 0; j < d; ++j) o[j] = to_bf16(acc[j] / total);
    }
  return out;
}

}  // namespace lab

TORCH_LIBRARY_IMPL(decoding_lab, CPU, m) {  // the op: a new tensor each call
  m.impl("decode_attention", [](const at::Tensor& q, const at::Tensor& k_all,
                                const at::Tensor& v_all, int64_t layer, int64_t len,
                                double scale) {
    return lab::decode_attention(q, k_all, v_all, layer, len, scale);
  });
}

// Attention of one new token's query heads over the KV cache (step.cpp's Decoder, and the
// unfused step's one-query attention where engine.step.fastpath turns it on; engine/quant/
// native.py builds this file with the others): scores, softmax and sums in float32 from the
// bfloat16 cache, in fixed chunks of positions spread over the threads, each chunk's partial
// softmax then combined in order, so the numbers do not depend on the number of threads.
//
// Two roundings. A quantised model's: the weights stay float32; within bfloat16's rounding
// of the exact attention and no further from it than SDPA (tests/engine/test_fused_layer.py).
// A bfloat16 model's (`sdpa_rounding`): torch's CPU SDPA rounds each weight e^(s - max) to
// bfloat16 before it multiplies V (the sum is of the unrounded ones), its max the largest
// score of a 512-position block and those before, so this does the same. Its products' sums
// run in another order than MKL's, so about 2% of the outputs sit a bfloat16 unit or two from
// SDPA's (tests/engine/test_fused_layer.py), and a greedy pick may part from
// transformers.generate's at a tie (tests/engine/test_bundled.py). SDPA itself costs 34 us for
// SmolLM2's 9 heads over 50 positions in bfloat16 (one MKL gemv call a head and pass), this
// ~11 us from Python.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "lab.h"
#include "vmath.h"

using bf16 = c10::BFloat16;
using lab::check_bf16;
using lab::round_bf16;
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
// SDPA's blocks of positions (its kv split, 512 on the CPU): it takes each block's weights
// against the largest score so far. A multiple of kChunk
constexpr int64_t kSdpaBlock = 512;
static_assert(kSdpaBlock % kChunk == 0, "a chunk lies in one block");

// One unit's scores: sc[r * n + t] = scale q_r . k_t for its `rep` query heads r over
// positions [t0, t1) of kv head g (n = t1 - t0), and each head's largest, top[r]; float32,
// each key row read and widened once for the query heads that read it. D: the head width,
// known when the compiler can unroll a row (64, 128), 0 when it is read from `a`; the rep
// heads' queries are widened into `q`, `rw` is a row's room
template <int D>
void chunk_scores(const GroupArgs& a, int64_t g, int64_t t0, int64_t t1, float* q,
                  float* rw, float* sc, float* top) {
  const int64_t d = D > 0 ? D : a.d, rep = a.rep, n = t1 - t0;
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
}

// The unit's weights e^(score - top[r]) and their sum total[r], and their weighted sum of
// the value rows acc[r * d, (r + 1) d), float32. `rounded`: each weight is rounded to
// bfloat16 before it multiplies its value row (the sum is of the unrounded ones), as torch's
// CPU SDPA does in bfloat16
template <int D>
void chunk_sums(const GroupArgs& a, int64_t g, int64_t t0, int64_t t1, bool rounded,
                float* rw, float* sc, const float* top, float* total, float* acc) {
  const int64_t d = D > 0 ? D : a.d, rep = a.rep, n = t1 - t0;
  const int64_t base = (a.layer * a.kv + g) * a.cap * d;
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
    if (rounded)
      for (int64_t t = 0; t < n; ++t) sr[t] = round_bf16(sr[t]);
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

// A unit's working room: the rep heads' queries widened (q), a chunk's scores (sc) and one
// row (rw); on the stack, or on the heap for a head wider than 128 or more than 8 query heads
// a kv head
struct Room {
  float qf[8 * 128], own[8 * kChunk], row[128];
  std::vector<float> spill;
  float* q = qf;
  float* sc = own;
  float* rw = row;
  Room(int64_t d, int64_t rep) {
    if (d <= 128 && rep <= 8) return;
    spill.resize(rep * d + rep * kChunk + d);
    q = spill.data();
    sc = q + rep * d;
    rw = sc + rep * kChunk;
  }
  Room(const Room&) = delete;  // its pointers point into itself
  Room& operator=(const Room&) = delete;
};

// One unit of work, kv head g's positions [t0, t1): its partial softmax (top[r], total[r],
// acc[r * d...]) for each of its query heads. `scores` null: the unit's own scores, its own
// largest as top. Else the scores are already there (the first pass) and top[r] given: the
// largest of its block of kSdpaBlock positions and those before (SDPA's running maximum)
template <int D>
void attend_chunk(const GroupArgs& a, int64_t g, int64_t t0, int64_t t1, float* scores,
                  float* top, float* total, float* acc) {
  Room room(D > 0 ? D : a.d, a.rep);
  if (scores == nullptr) chunk_scores<D>(a, g, t0, t1, room.q, room.rw, room.sc, top);
  chunk_sums<D>(a, g, t0, t1, scores != nullptr, room.rw, scores != nullptr ? scores : room.sc,
                top, total, acc);
}

// The first pass of the SDPA-rounding mode: the unit's scores into `scores`, its largest
// into top
template <int D>
void score_chunk(const GroupArgs& a, int64_t g, int64_t t0, int64_t t1, float* scores,
                 float* top) {
  Room room(D > 0 ? D : a.d, a.rep);
  chunk_scores<D>(a, g, t0, t1, room.q, room.rw, scores, top);
}

template <typename F>
void by_width(int64_t d, F&& f) {
  if (d == 64) f(std::integral_constant<int, 64>{});
  else if (d == 128) f(std::integral_constant<int, 128>{});
  else f(std::integral_constant<int, 0>{});
}

}  // namespace

namespace lab {

// Attention of one query per head over the cache's first `len` positions: q [H, 1, D] ->
// [H, 1, D]; head h reads kv head h / (H / KV); scores, softmax and sums in float32, in
// fixed chunks of positions (attend_chunk) whose partial softmaxes are then combined in order.
// `sdpa_rounding`: the weights are rounded as torch's CPU SDPA rounds them in bfloat16 (see
// the file's head), each taken against the largest score of its block of kSdpaBlock
// positions and those before, and the sum divided by as a reciprocal
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_all,
                            const at::Tensor& v_all, int64_t layer, int64_t len, double scale,
                            bool sdpa_rounding, at::Tensor* slot) {
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
  // in the calling thread's buffers, grown once (a thread_local named inside the threads'
  // lambda would be each thread's own: they are given its data)
  thread_local std::vector<float> parts, scores;
  parts.resize(kv * chunks * width);
  float* const part = parts.data();
  float* sc = nullptr;
  if (sdpa_rounding) {  // the scores first, then each block's running maximum as the top
    scores.resize(kv * chunks * rep * kChunk);
    sc = scores.data();
    at::parallel_for(0, kv * chunks, 1, [&](int64_t u0, int64_t u1) {
      by_width(d, [&](auto w) {
        for (int64_t u = u0; u < u1; ++u) {
          const int64_t t0 = (u % chunks) * kChunk;
          score_chunk<decltype(w)::value>(args, u / chunks, t0, std::min(len, t0 + kChunk),
                                          sc + u * rep * kChunk, part + u * width);
        }
      });
    });
    constexpr int64_t per_block = kSdpaBlock / kChunk;
    for (int64_t g = 0; g < kv; ++g)
      for (int64_t r = 0; r < rep; ++r) {
        float most = -INFINITY;  // the largest score up to this chunk's block's end
        for (int64_t c = 0; c < chunks; ++c) {
          most = std::max(most, part[(g * chunks + c) * width + r]);
          if ((c + 1) % per_block != 0 && c + 1 != chunks) continue;
          for (int64_t b = c - c % per_block; b <= c; ++b)
            part[(g * chunks + b) * width + r] = most;
        }
      }
  }
  at::parallel_for(0, kv * chunks, 1, [&](int64_t u0, int64_t u1) {
    by_width(d, [&](auto w) {
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t g = u / chunks, t0 = (u % chunks) * kChunk;
        const int64_t t1 = std::min(len, t0 + kChunk);
        float* p = part + u * width;
        attend_chunk<decltype(w)::value>(args, g, t0, t1,
                                         sc != nullptr ? sc + u * rep * kChunk : nullptr, p,
                                         p + rep, p + 2 * rep);
      }
    });
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
      if (sdpa_rounding) {
        const float inverse = 1.f / total;
        for (int64_t j = 0; j < d; ++j) o[j] = to_bf16(acc[j] * inverse);
      } else {
        for (int64_t j = 0; j < d; ++j) o[j] = to_bf16(acc[j] / total);
      }
    }
  return out;
}

}  // namespace lab

TORCH_LIBRARY_IMPL(decoding_lab, CPU, m) {  // the op: a new tensor each call
  m.impl("decode_attention", [](const at::Tensor& q, const at::Tensor& k_all,
                                const at::Tensor& v_all, int64_t layer, int64_t len,
                                double scale, bool sdpa_rounding) {
    return lab::decode_attention(q, k_all, v_all, layer, len, scale, sdpa_rounding);
  });
}

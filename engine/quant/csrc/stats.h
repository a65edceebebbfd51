// What stats.cpp (a step record's numbers) and greedy.cpp (a greedy step's) share: the
// packed row's layout, the top-n list, a row's inputs, and the passes over a vocabulary's
// blocks both make, so a greedy step split over the threads adds the same numbers in the same
// order as one_row.

#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

namespace stats {

constexpr int64_t kScalars = 8;  // measure.py's _SCALARS
constexpr double kLn2 = 0.693147180559945309;
constexpr float kInf = std::numeric_limits<float>::infinity();

using Entry = std::pair<float, int64_t>;  // (raw probability, token id)

// a before b in the top list: more probable, or as probable with the lower id
inline bool before(const Entry& a, const Entry& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

struct RowIn {
  const float* x;      // raw logits [v]
  const float* p;      // probabilities after the chain [v]; nullptr: temperature 0's (below)
  const int16_t* cut;  // stage that cut each token [v], or nullptr
  int64_t v, n, token;
  std::optional<bool> finite;  // given by the caller, else read from x

  // A greedy chain (temperature 0 alone) over finite logits leaves the one-hot distribution
  // at the token and cuts every other token at its stage 0: p and cut without the arrays
  bool greedy() const { return p == nullptr; }
  float prob(int64_t j) const { return greedy() ? (j == token ? 1.f : 0.f) : p[j]; }
  double cut_at(int64_t j) const {
    if (greedy()) return j == token ? -1.0 : 0.0;
    return cut != nullptr ? cut[j] : -1.0;
  }
};

// Sums run in float32 within blocks of this many tokens (vector lanes), in float64 across
// them: 128 terms a lane at most, where one float32 lane over 151,936 tokens would hold 9,500
constexpr int64_t kSum = 1024;

// One block of raw_softmax's terms: e^(x - top) into raw, and their sums in float32 (t: the
// terms below the top; w: e (x - top); ones: how many at the top; check: x 0, NaN where x
// holds a NaN or an inf)
struct Terms {
  float t = 0.f, w = 0.f, check = 0.f;
  int32_t ones = 0;
};

Terms exp_block(const float* __restrict x, int64_t n, float top, float* __restrict raw);
// the largest of x[0, n) (a NaN passed over); whether x[0, n) holds no NaN and no inf
float block_max(const float* __restrict x, int64_t n);
bool block_clean(const float* __restrict x, int64_t n);
// raw *= inv over n, and how many then exceed `chosen`
int64_t scale_block(float* __restrict raw, int64_t n, float inv, float chosen);
// the top n of raw[0, v) (no NaN in it), best first
std::vector<Entry> top_of(const float* raw, int64_t v, int64_t n);
// one row's packed record (measure.py's step_columns) into out[0, 8 + 4 n)
void one_row(const RowIn& in, std::vector<float>& raw, double* out);
// A row's numbers, as the packed record holds them: the chosen token's raw probability, how
// many tokens are more probable, how many the chain keeps, both entropies in nats, finiteness
struct RowNumbers {
  float chosen;
  int64_t above, survivors;
  double h_raw, h;
  bool finite;
};
// the packed record from them and the top n (`top`; none: a broken row, its numbers NaN and
// its list the first n ids)
void pack_row(const RowIn& in, const RowNumbers& m, const std::vector<Entry>* top, double* out);
// logits-like [rows, vocab] float32, contiguous, on the CPU
void check_scores(const at::Tensor& t, const char* name);
// greedy.cpp: a greedy step's packed record from logits [rows, vocab] float32 (finite: one
// bool a row, or empty: read from the logits)
at::Tensor greedy_stats(const at::Tensor& logits, int64_t n, const at::Tensor& finite);

// bits, as measure.py's entropy_bits gives them: float32, never -0.0 or below 0
inline double bits(double nats) {
  const float b = static_cast<float>(nats / kLn2);
  return static_cast<double>((b < 0.f ? 0.f : b) + 0.f);
}

// The first j with hit(x[j]), -1 where none: blocks of 64 are looked into one by one only
// where a vector pass finds a hit in them
template <typename Hit>
int64_t find_first(const float* x, int64_t v, Hit hit) {
  constexpr int64_t kBlock = 64;
  for (int64_t j0 = 0; j0 < v; j0 += kBlock) {
    const int64_t j1 = std::min(v, j0 + kBlock);
    int32_t hits = 0;
#pragma omp simd reduction(+ : hits)
    for (int64_t j = j0; j < j1; ++j) hits += hit(x[j]);
    if (hits == 0) continue;
    for (int64_t j = j0; j < j1; ++j)
      if (hit(x[j])) return j;
  }
  return -1;
}

}  // namespace stats

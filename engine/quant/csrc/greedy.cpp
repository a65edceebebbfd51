// A greedy step's passes over the vocabulary (temperature 0 alone: engine.sampling.greedy and
// engine.decode.measure's greedy_measured): the first maximum, temperature 0's kept scores and
// one-hot probabilities, and the whole step's record in one op, on a long vocabulary over
// every thread (each over the part of the logits its share of the head's product wrote).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "stats.h"

namespace {

using namespace stats;

// The index of a row's first maximum, as torch.max(dim=-1) gives it: a NaN is the maximum
// (the first NaN), a row of -inf gives 0. Separate passes for the maximum and the NaNs: one
// pass doing both does not vectorise (25 us on 49,152 tokens where these take 8)
int64_t first_max_row(const float* x, int64_t v) {
  const float top = block_max(x, v);  // NaN: passed over
  int32_t nans = 0;
#pragma omp simd reduction(+ : nans)
  for (int64_t j = 0; j < v; ++j) nans += x[j] != x[j];
  const int64_t at = nans > 0 ? find_first(x, v, [](float a) { return a != a; })
                              : find_first(x, v, [top](float a) { return a == top; });
  return at < 0 ? 0 : at;
}

// [rows, vocab] float32 -> [rows] int64: each row's first maximum (sampling.chain's greedy pick)
at::Tensor first_max(const at::Tensor& x) {
  check_scores(x, "x");
  const int64_t rows = x.size(0), v = x.size(1);
  TORCH_CHECK(v > 0, "an empty vocabulary");
  at::Tensor out = at::empty({rows}, x.options().dtype(at::kLong));
  for (int64_t r = 0; r < rows; ++r)
    out.data_ptr<int64_t>()[r] = first_max_row(x.data_ptr<float>() + r * v, v);
  return out;
}

// Temperature 0's scores: each row's first maximum kept, every other score -inf (torch's
// full_like(-inf).scatter_(first, gather(first)) in one op)
at::Tensor keep_first_max(const at::Tensor& x) {
  check_scores(x, "x");
  const int64_t rows = x.size(0), v = x.size(1);
  TORCH_CHECK(v > 0, "an empty vocabulary");
  at::Tensor out = at::empty_like(x);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data_ptr<float>() + r * v;
    float* o = out.data_ptr<float>() + r * v;
    const int64_t at = first_max_row(xr, v);
    std::fill(o, o + v, -kInf);
    o[at] = xr[at];
  }
  return out;
}

// The softmax of rows that each keep one finite score (every other -inf): one-hot, as
// torch's softmax gives them (e^0 / 1 and e^-inf = 0) without its exponentials. Any other
// row (two scores left, a NaN, +inf, nothing left): an empty tensor, for the caller's softmax
at::Tensor one_hot_probs(const at::Tensor& x) {
  check_scores(x, "x");
  const int64_t rows = x.size(0), v = x.size(1);
  TORCH_CHECK(v < (int64_t{1} << 31), "a vocabulary of ", v, " tokens");
  std::vector<int64_t> at(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data_ptr<float>() + r * v;
    int32_t left = 0;
#pragma omp simd reduction(+ : left)
    for (int64_t j = 0; j < v; ++j) left += xr[j] != -kInf;
    if (left != 1) return at::empty({0}, x.options());
    at[r] = find_first(xr, v, [](float a) { return a != -kInf; });
    if (!std::isfinite(xr[at[r]])) return at::empty({0}, x.options());
  }
  at::Tensor out = at::zeros_like(x);
  for (int64_t r = 0; r < rows; ++r) out.data_ptr<float>()[r * v + at[r]] = 1.f;
  return out;
}

// A vocabulary at least this long is read by every thread at once in a greedy step, each
// over the part of the logits it wrote (the head's product splits its rows alike): ~150 us
// of one core reading the other's half just after a forward pass, on SmolLM2's 49,152
constexpr int64_t kSplit = 8 * kSum;

// one_row for a greedy row (temperature 0 alone) of a long vocabulary, its passes spread
// over the threads in whole blocks of kSum, and its sums combined in the blocks' order: the
// same additions in the same order as one_row's, so its bits. A row with a NaN or +inf, or
// nothing above -inf, goes to one_row.
void greedy_row_split(RowIn in, std::vector<float>& raw, double* out) {
  const float* x = in.x;
  const int64_t v = in.v, blocks = (v + kSum - 1) / kSum;
  const auto span = [v](int64_t b) {
    return std::pair<int64_t, int64_t>{b * kSum, std::min(v, (b + 1) * kSum)};
  };
  // each block's numbers, so that any split of the blocks over the threads gives the same
  std::vector<float> most(blocks), rest(blocks), weighted(blocks);
  std::vector<int64_t> first(blocks, -1), ones(blocks), above(blocks);
  std::vector<char> clean(blocks);
  std::vector<std::vector<Entry>> tops(blocks);  // a part's top n, at its first block
  const int64_t grain = (blocks + at::get_num_threads() - 1) / at::get_num_threads();
  at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {  // the maxima, NaNs, infs
    for (int64_t b = b0; b < b1; ++b) {
      const auto [j0, j1] = span(b);
      most[b] = block_max(x + j0, j1 - j0);
      clean[b] = block_clean(x + j0, j1 - j0);
    }
  });
  float top = -kInf;
  bool finite = true;
  for (int64_t b = 0; b < blocks; ++b) {
    top = std::max(top, most[b]);
    finite = finite && clean[b];
  }
  if (!finite || top == -kInf) {  // a NaN or an inf, or nothing left: one_row's way
    in.token = first_max_row(x, v);
    return one_row(in, raw, out);
  }
  raw.resize(v);
  float* r = raw.data();
  at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {  // e^(x - top), the token
    bool found = false;
    for (int64_t b = b0; b < b1; ++b) {
      const auto [j0, j1] = span(b);
      if (!found && most[b] == top) {
        first[b] = j0 + find_first(x + j0, j1 - j0, [top](float a) { return a == top; });
        found = true;
      }
      const Terms terms = exp_block(x + j0, j1 - j0, top, r + j0);  // raw_softmax's blocks
      rest[b] = terms.t;
      weighted[b] = terms.w;
      ones[b] = terms.ones;
    }
  });
  double sum = 0.0, wsum = 0.0;  // in the blocks' order, as raw_softmax adds them
  int64_t at_top = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    sum += rest[b];
    wsum += weighted[b];
    at_top += ones[b];
    if (in.token < 0 && first[b] >= 0) in.token = first[b];
  }
  const double total = static_cast<double>(at_top) + sum;
  const float inv = static_cast<float>(1.0 / total);
  const double log_total = at_top == 1 ? std::log1p(sum) : std::log(total);
  const double h_raw = log_total - wsum / total;
  const float chosen = r[in.token] * inv;
  at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {  // probabilities, top n
    for (int64_t b = b0; b < b1; ++b) {
      const auto [j0, j1] = span(b);
      above[b] = scale_block(r + j0, j1 - j0, inv, chosen);
    }
    const int64_t j0 = span(b0).first, j1 = span(b1 - 1).second;
    tops[b0] = top_of(r + j0, j1 - j0, in.n);
    for (Entry& e : tops[b0]) e.second += j0;
  });
  std::vector<Entry> best;
  int64_t higher = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    best.insert(best.end(), tops[b].begin(), tops[b].end());
    higher += above[b];
  }
  std::sort(best.begin(), best.end(), before);
  // one survivor, its entropy 0, as one_row's greedy row
  pack_row(in, RowNumbers{chosen, higher, 1, h_raw, 0.0, in.finite.value_or(true)}, &best, out);
}

}  // namespace

namespace stats {

// A greedy step whole, for logits [rows, vocab] float32 (engine.decode.measure's
// greedy_measured: what temperature 0's chain, its softmax, the pick and step_stats give, in
// one op): each row's token is its first maximum, its probabilities one-hot there, every
// other token cut by stage 0; finite: [rows] bool, the source's own logits' (copied to the
// row), or empty: read from the logits (a row with a NaN or an inf then says so, and its
// numbers are not the chain's) -> [rows, 8 + 4 n] float64 as step_stats packs it
at::Tensor greedy_stats(const at::Tensor& logits, int64_t n, const at::Tensor& finite) {
  check_scores(logits, "logits");
  const int64_t rows = logits.size(0), v = logits.size(1);
  TORCH_CHECK(n >= 0 && n <= v && v > 0, "top ", n, " of a vocabulary of ", v);
  const at::Tensor fin = finite.contiguous();
  const bool given = fin.numel() > 0;
  TORCH_CHECK(!given || (fin.scalar_type() == at::kBool && fin.numel() == rows &&
                         fin.device().is_cpu()),
              "finite must be one bool a row, or empty");
  at::Tensor out = at::empty({rows, kScalars + 4 * n}, logits.options().dtype(at::kDouble));
  thread_local std::vector<float> raw;
  const bool split = v >= kSplit && at::get_num_threads() > 1 && !at::in_parallel_region();
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits.data_ptr<float>() + r * v;
    const auto flag = given ? std::optional<bool>(fin.data_ptr<bool>()[r]) : std::nullopt;
    double* o = out.data_ptr<double>() + r * (kScalars + 4 * n);
    if (split) {
      greedy_row_split(RowIn{x, nullptr, nullptr, v, n, -1, flag}, raw, o);
      continue;
    }
    one_row(RowIn{x, nullptr, nullptr, v, n, first_max_row(x, v), flag}, raw, o);
  }
  return out;
}

}  // namespace stats

TORCH_LIBRARY_IMPL(decoding_lab, CPU, m) {
  m.impl("first_max", &first_max);
  m.impl("keep_first_max", &keep_first_max);
  m.impl("one_hot_probs", &one_hot_probs);
  m.impl("greedy_stats", &stats::greedy_stats);
}

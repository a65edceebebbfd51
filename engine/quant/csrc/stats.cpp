// What a Step record says about a token (engine/decode/measure.py's step_columns) for float32
// CPU rows, in four passes over the vocabulary where torch's ~20 operations take 0.4 ms on
// SmolLM2's 49,152 tokens and 1 ms on Qwen2.5's 151,936 on a 2-core CPU (each a few microseconds
// of dispatch and a pass of its own; top-k alone 130-600 us). That was a sixth of an int4
// token (resources/notes/quantized-weights.md, "Stop 45").
//
// One row of logits x and of the sampler's probabilities p gives the packed row measure()
// copies to the host: the chosen token, its raw probability (softmax of x) and processed one,
// its rank in the raw distribution, how many tokens p keeps, the entropy of both in bits,
// whether x was finite, then the top n by raw probability (ties: the lower id first) with
// their raw and processed probabilities and the chain stage that cut each (-1: kept).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "vmath.h"

namespace {

constexpr int64_t kScalars = 8;  // measure.py's _SCALARS
constexpr double kLn2 = 0.693147180559945309;
constexpr float kInf = std::numeric_limits<float>::infinity();

using Entry = std::pair<float, int64_t>;  // (raw probability, token id)

// a before b in the top list: more probable, or as probable with the lower id
inline bool before(const Entry& a, const Entry& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// The top n of raw[0, v) (no NaN in it), best first. A block of 16 is looked at one by one
// only where its largest beats the n-th best so far: after the first few thousand tokens,
// almost never.
std::vector<Entry> top_of(const float* raw, int64_t v, int64_t n) {
  std::vector<Entry> heap;  // a min-heap by `before`: its front is the n-th best
  heap.reserve(n + 1);
  if (n == 0) return heap;
  constexpr int64_t kBlock = 16;
  for (int64_t j0 = 0; j0 < v; j0 += kBlock) {
    const int64_t j1 = std::min(v, j0 + kBlock);
    float most = -kInf;
#pragma omp simd reduction(max : most)
    for (int64_t j = j0; j < j1; ++j) most = std::max(most, raw[j]);
    if (static_cast<int64_t>(heap.size()) == n && most <= heap.front().first) continue;
    for (int64_t j = j0; j < j1; ++j) {
      const Entry e{raw[j], j};
      if (static_cast<int64_t>(heap.size()) < n) {
        heap.push_back(e);
        std::push_heap(heap.begin(), heap.end(), before);
      } else if (before(e, heap.front())) {
        std::pop_heap(heap.begin(), heap.end(), before);
        heap.back() = e;
        std::push_heap(heap.begin(), heap.end(), before);
      }
    }
  }
  std::sort(heap.begin(), heap.end(), before);
  return heap;
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

// e^(x - max x) into raw, and `inv` = 1 / their sum (raw times inv: the softmax of x, float32
// as torch's log_softmax().exp()); returns the softmax's entropy in nats, or NaN where x holds
// a NaN or +inf or nothing above -inf. `finite`: x holds no NaN or inf.
double raw_softmax(const RowIn& in, float* raw, float& inv, bool& finite) {
  const float* x = in.x;
  float top = -kInf;
#pragma omp simd reduction(max : top)
  for (int64_t j = 0; j < in.v; ++j) top = x[j] > top ? x[j] : top;  // NaN: passed over
  // the sum of e^(x - top) as (tokens at the top, each 1) + (the rest): a lane that held the
  // top's 1 would round away every term under 6e-8 beside it, and with them the entropy of a
  // confident row (4% of 1e-6 bits on a 300-token row with one logit 22 above the rest)
  double rest = 0.0, weighted = 0.0;  // sum of e^(x - top) below the top, and of e (x - top)
  int64_t at_top = 0;
  float check = 0.f;  // sum of x 0: NaN where x holds a NaN or an inf
  for (int64_t j0 = 0; j0 < in.v; j0 += kSum) {
    const int64_t j1 = std::min(in.v, j0 + kSum);
    float t = 0.f, w = 0.f;
    int32_t ones = 0;
#pragma omp simd reduction(+ : t, w, check, ones)
    for (int64_t j = j0; j < j1; ++j) {
      const float d = x[j] - top;
      const float e = vmath::exp(d);
      raw[j] = e;
      ones += d == 0.f;
      t += d == 0.f ? 0.f : e;
      w += e > 0.f ? e * d : 0.f;  // x = -inf: 0, not 0 (-inf)
      check += x[j] * 0.f;
    }
    rest += t;
    weighted += w;
    at_top += ones;
  }
  finite = check == 0.f;
  const double total = static_cast<double>(at_top) + rest;
  if (top == -kInf || top == kInf || total != total)
    return std::numeric_limits<double>::quiet_NaN();
  inv = static_cast<float>(1.0 / total);
  const double log_total = at_top == 1 ? std::log1p(rest) : std::log(total);
  // -sum(raw (x - top - ln total)) = ln total - weighted / total
  return log_total - weighted / total;
}

// -sum p ln p over p > 0 (a NaN stays), in nats; survivors: how many p > 0
double processed_entropy(const float* p, int64_t v, int64_t& survivors) {
  double sum = 0.0;
  int64_t kept = 0;
  for (int64_t j0 = 0; j0 < v; j0 += kSum) {
    const int64_t j1 = std::min(v, j0 + kSum);
    int32_t k = 0, odd = 0;
#pragma omp simd reduction(+ : k, odd)
    for (int64_t j = j0; j < j1; ++j) {
      k += p[j] > 0.f;
      odd += p[j] != p[j];
    }
    kept += k;
    if (k == 0 && odd == 0) continue;  // a block the chain cut whole: no logs to take
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = j0; j < j1; ++j) {
      const float q = p[j];
      const bool pos = q > 0.f;
      s += pos ? q * vmath::log(pos ? q : 1.f) : (q == q ? 0.f : q);
    }
    sum += s;
  }
  survivors = kept;
  return -sum;
}

// bits, as measure.py's entropy_bits gives them: float32, never -0.0 or below 0
inline double bits(double nats) {
  const float b = static_cast<float>(nats / kLn2);
  return static_cast<double>((b < 0.f ? 0.f : b) + 0.f);
}

void one_row(const RowIn& in, std::vector<float>& raw, double* out) {
  raw.resize(in.v);
  int64_t survivors = 0;
  bool finite = true;
  float inv = 0.f;
  const double h_raw = raw_softmax(in, raw.data(), inv, finite);
  const bool broken = h_raw != h_raw;  // NaN or +inf in x: torch gives NaNs, and so do we
  const double nan = std::numeric_limits<double>::quiet_NaN();
  double h = 0.0;  // one-hot: -(1 ln 1) = 0
  if (in.greedy()) survivors = 1;
  else h = processed_entropy(in.p, in.v, survivors);
  const float chosen = broken ? 0.f : raw[in.token] * inv;
  int64_t above = 0;
  if (!broken) {
    float* r = raw.data();
#pragma omp simd reduction(+ : above)
    for (int64_t j = 0; j < in.v; ++j) {
      r[j] *= inv;
      above += r[j] > chosen;
    }
  }
  out[0] = static_cast<double>(in.token);
  out[1] = broken ? nan : chosen;
  out[2] = in.prob(in.token);
  out[3] = static_cast<double>(above + 1);
  out[4] = static_cast<double>(survivors);
  out[5] = broken ? nan : bits(h_raw);
  out[6] = bits(h);
  out[7] = in.finite.value_or(finite) ? 1.0 : 0.0;
  std::vector<Entry> top;
  if (!broken) top = top_of(raw.data(), in.v, in.n);
  double* block = out + kScalars;
  for (int64_t i = 0; i < in.n; ++i) {
    const int64_t id = broken ? i : top[i].second;  // no order without numbers: the first n
    block[i] = static_cast<double>(id);
    block[in.n + i] = broken ? nan : top[i].first;
    block[2 * in.n + i] = in.prob(id);
    block[3 * in.n + i] = in.cut_at(id);
  }
}

void check_rows(const at::Tensor& t, const at::Tensor& like, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.sizes() == like.sizes(), name,
              " must be a contiguous CPU tensor shaped as the logits");
}

void check_scores(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() == 2 && t.scalar_type() == at::kFloat, name,
              " must be [rows, vocab] float32");
  check_rows(t, t, name);
}

// logits, probs: [rows, vocab] float32; tokens: [rows] int64; n: top entries; cut: [rows,
// vocab] int16 or empty; finite: [rows] bool or empty -> [rows, 8 + 4 n] float64
at::Tensor step_stats(const at::Tensor& logits, const at::Tensor& probs,
                      const at::Tensor& tokens, int64_t n, const at::Tensor& cut,
                      const at::Tensor& finite) {
  check_scores(logits, "logits");
  TORCH_CHECK(probs.scalar_type() == at::kFloat, "probs must be float32");
  check_rows(probs, logits, "probs");
  const int64_t rows = logits.size(0), v = logits.size(1);
  TORCH_CHECK(n >= 0 && n <= v, "top ", n, " of a vocabulary of ", v);
  TORCH_CHECK(v > 0 || rows == 0, "an empty vocabulary");
  const at::Tensor tok = tokens.contiguous();
  TORCH_CHECK(tok.device().is_cpu() && tok.scalar_type() == at::kLong && tok.numel() == rows,
              "tokens must be one int64 id a row");
  const bool has_cut = cut.numel() > 0, has_finite = finite.numel() > 0;
  if (has_cut) {
    TORCH_CHECK(cut.scalar_type() == at::kShort, "cut must be int16");
    check_rows(cut, logits, "cut");
  }
  const at::Tensor fin = finite.contiguous();
  TORCH_CHECK(!has_finite || (fin.scalar_type() == at::kBool && fin.numel() == rows &&
                               fin.device().is_cpu()),
              "finite must be one bool a row");
  const int64_t* ids = tok.data_ptr<int64_t>();
  for (int64_t i = 0; i < rows; ++i)
    TORCH_CHECK(ids[i] >= 0 && ids[i] < v, "token ", ids[i], " is not in the vocabulary of ", v);
  at::Tensor out = at::empty({rows, kScalars + 4 * n}, logits.options().dtype(at::kDouble));
  const float* xp = logits.data_ptr<float>();
  const float* pp = probs.data_ptr<float>();
  const int16_t* cp = has_cut ? cut.data_ptr<int16_t>() : nullptr;
  const bool* fp = has_finite ? fin.data_ptr<bool>() : nullptr;
  double* op = out.data_ptr<double>();
  at::parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> raw;  // grown once a thread, not allocated a call
    for (int64_t r = r0; r < r1; ++r) {
      RowIn in{xp + r * v, pp + r * v, cp != nullptr ? cp + r * v : nullptr, v, n, ids[r],
               fp != nullptr ? std::optional<bool>(fp[r]) : std::nullopt};
      one_row(in, raw, op + r * (kScalars + 4 * n));
    }
  });
  return out;
}

int64_t first_max_row(const float* x, int64_t v);

// A greedy step whole, for finite logits [rows, vocab] float32 (engine.decode.measure's
// greedy_measured: what temperature 0's chain, its softmax, the pick and step_stats give, in
// one op): each row's token is its first maximum, its probabilities one-hot there, every
// other token cut by stage 0; finite: [rows] bool, the source's own logits' (copied to the
// row) -> [rows, 8 + 4 n] float64 as step_stats packs it
at::Tensor greedy_stats(const at::Tensor& logits, int64_t n, const at::Tensor& finite) {
  check_scores(logits, "logits");
  const int64_t rows = logits.size(0), v = logits.size(1);
  TORCH_CHECK(n >= 0 && n <= v && v > 0, "top ", n, " of a vocabulary of ", v);
  const at::Tensor fin = finite.contiguous();
  TORCH_CHECK(fin.scalar_type() == at::kBool && fin.numel() == rows && fin.device().is_cpu(),
              "finite must be one bool a row");
  at::Tensor out = at::empty({rows, kScalars + 4 * n}, logits.options().dtype(at::kDouble));
  thread_local std::vector<float> raw;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits.data_ptr<float>() + r * v;
    RowIn in{x, nullptr, nullptr, v, n, first_max_row(x, v), fin.data_ptr<bool>()[r]};
    one_row(in, raw, out.data_ptr<double>() + r * (kScalars + 4 * n));
  }
  return out;
}

// Which rows of x [rows, vocab] float32 hold no NaN and no inf -> [rows] bool (measure.py's
// all_finite: one pass where abs, amax and isfinite take three)
at::Tensor all_finite(const at::Tensor& x) {
  check_scores(x, "x");
  const int64_t rows = x.size(0), v = x.size(1);
  at::Tensor out = at::empty({rows}, x.options().dtype(at::kBool));
  bool* op = out.data_ptr<bool>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data_ptr<float>() + r * v;
    float check = 0.f;  // x 0 is 0, or NaN for a NaN or an inf
#pragma omp simd reduction(+ : check)
    for (int64_t j = 0; j < v; ++j) check += xr[j] * 0.f;
    op[r] = check == 0.f;
  }
  return out;
}

// What chain stage `stage` cut (chain.py's apply_chain), in one pass where torch takes eight:
// before, after [rows, vocab] float32, the scores into and out of the stage; cut [rows, vocab]
// int16 (or empty: not tracked), in place: where `after` is -inf and `before` was not, and no
// earlier stage cut the token, it takes `stage`. Returns [rows, 1] bool: the rows `after`
// leaves all -inf. Such a row is skipped (its cut untouched) unless the stage binds.
at::Tensor stage_cut(const at::Tensor& before, const at::Tensor& after, at::Tensor& cut,
                     int64_t stage, bool binding) {
  check_scores(before, "before");
  check_rows(after, before, "after");
  TORCH_CHECK(after.scalar_type() == at::kFloat, "after must be float32");
  const bool track = cut.numel() > 0;
  if (track) {
    TORCH_CHECK(cut.scalar_type() == at::kShort, "cut must be int16");
    check_rows(cut, before, "cut");
  }
  TORCH_CHECK(stage >= 0 && stage < 32768, "stage ", stage, " does not fit int16");
  const int64_t rows = before.size(0), v = before.size(1);
  at::Tensor emptied = at::empty({rows, 1}, before.options().dtype(at::kBool));
  for (int64_t r = 0; r < rows; ++r) {
    const float* b = before.data_ptr<float>() + r * v;
    const float* a = after.data_ptr<float>() + r * v;
    int64_t alive = 0;  // NaN counts as alive, as amax(NaN) == -inf is false
#pragma omp simd reduction(+ : alive)
    for (int64_t j = 0; j < v; ++j) alive += a[j] != -kInf;
    emptied.data_ptr<bool>()[r] = alive == 0;
    if (!track || (alive == 0 && !binding)) continue;
    int16_t* c = cut.data_ptr<int16_t>() + r * v;
    const auto mark = static_cast<int16_t>(stage);
#pragma omp simd
    for (int64_t j = 0; j < v; ++j)
      c[j] = (a[j] == -kInf && b[j] != -kInf && c[j] < 0) ? mark : c[j];
  }
  return emptied;
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

// The index of a row's first maximum, as torch.max(dim=-1) gives it: a NaN is the maximum
// (the first NaN), a row of -inf gives 0. Separate passes for the maximum and the NaNs: one
// pass doing both does not vectorise (25 us on 49,152 tokens where these take 8)
int64_t first_max_row(const float* x, int64_t v) {
  float top = -kInf;
#pragma omp simd reduction(max : top)
  for (int64_t j = 0; j < v; ++j) top = x[j] > top ? x[j] : top;  // NaN: passed over
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

}  // namespace

TORCH_LIBRARY_IMPL(decoding_lab, CPU, m) {
  m.impl("first_max", &first_max);
  m.impl("keep_first_max", &keep_first_max);
  m.impl("one_hot_probs", &one_hot_probs);
  m.impl("step_stats", &step_stats);
  m.impl("greedy_stats", &greedy_stats);
  m.impl("all_finite", &all_finite);
  m.impl("stage_cut", &stage_cut);
}

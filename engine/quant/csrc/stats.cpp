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

#include "stats.h"
#include "vmath.h"

namespace stats {

// The top n of raw[0, v) (no NaN in it), best first. A block is looked at one by one only
// where one of its values beats the n-th best so far (a later token as probable does not):
// after the first few thousand tokens, almost never.
std::vector<Entry> top_of(const float* raw, int64_t v, int64_t n) {
  std::vector<Entry> heap;  // a min-heap by `before`: its front is the n-th best
  heap.reserve(n + 1);
  if (n == 0) return heap;
  constexpr int64_t kBlock = 64;
  for (int64_t j0 = 0; j0 < v; j0 += kBlock) {
    const int64_t j1 = std::min(v, j0 + kBlock);
    if (static_cast<int64_t>(heap.size()) == n) {
      const float least = heap.front().first;
      int32_t beats = 0;
#pragma omp simd reduction(+ : beats)
      for (int64_t j = j0; j < j1; ++j) beats += raw[j] > least;
      if (beats == 0) continue;
    }
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

Terms exp_block(const float* __restrict x, int64_t n, float top, float* __restrict raw) {
  float t = 0.f, w = 0.f, check = 0.f;
  int32_t ones = 0;
#pragma omp simd reduction(+ : t, w, check, ones)
  for (int64_t j = 0; j < n; ++j) {
    const float d = x[j] - top;
    const float e = vmath::exp(d);
    raw[j] = e;
    ones += d == 0.f;
    t += d == 0.f ? 0.f : e;
    w += e > 0.f ? e * d : 0.f;  // x = -inf: 0, not 0 (-inf)
    check += x[j] * 0.f;
  }
  return Terms{t, w, check, ones};
}

// The largest of x[0, n) (a NaN passed over), and whether x holds no NaN and no inf
float block_max(const float* __restrict x, int64_t n) {
  float top = -kInf;
#pragma omp simd reduction(max : top)
  for (int64_t j = 0; j < n; ++j) top = x[j] > top ? x[j] : top;
  return top;
}

bool block_clean(const float* __restrict x, int64_t n) {
  float check = 0.f;  // x 0 is 0, or NaN for a NaN or an inf
#pragma omp simd reduction(+ : check)
  for (int64_t j = 0; j < n; ++j) check += x[j] * 0.f;
  return check == 0.f;
}

// raw *= inv over n, and how many then exceed `chosen`
int64_t scale_block(float* __restrict raw, int64_t n, float inv, float chosen) {
  int64_t above = 0;
#pragma omp simd reduction(+ : above)
  for (int64_t j = 0; j < n; ++j) {
    raw[j] *= inv;
    above += raw[j] > chosen;
  }
  return above;
}

namespace {

// e^(x - max x) into raw, and `inv` = 1 / their sum (raw times inv: the softmax of x, float32
// as torch's log_softmax().exp()); returns the softmax's entropy in nats, or NaN where x holds
// a NaN or +inf or nothing above -inf. `finite`: x holds no NaN or inf.
double raw_softmax(const RowIn& in, float* raw, float& inv, bool& finite) {
  const float* x = in.x;
  const float top = block_max(x, in.v);  // NaN: passed over
  // the sum of e^(x - top) as (tokens at the top, each 1) + (the rest): a lane that held the
  // top's 1 would round away every term under 6e-8 beside it, and with them the entropy of a
  // confident row (4% of 1e-6 bits on a 300-token row with one logit 22 above the rest)
  double rest = 0.0, weighted = 0.0;  // sum of e^(x - top) below the top, and of e (x - top)
  int64_t at_top = 0;
  float check = 0.f;  // sum of x 0: NaN where x holds a NaN or an inf
  for (int64_t j0 = 0; j0 < in.v; j0 += kSum) {
    const Terms b = exp_block(x + j0, std::min(in.v, j0 + kSum) - j0, top, raw + j0);
    rest += b.t;
    weighted += b.w;
    at_top += b.ones;
    check += b.check;
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

}  // namespace

void one_row(const RowIn& in, std::vector<float>& raw, double* out) {
  raw.resize(in.v);
  int64_t survivors = 0;
  bool finite = true;
  float inv = 0.f;
  const double h_raw = raw_softmax(in, raw.data(), inv, finite);
  const bool broken = h_raw != h_raw;  // NaN or +inf in x: torch gives NaNs, and so do we
  double h = 0.0;  // one-hot: -(1 ln 1) = 0
  if (in.greedy()) survivors = 1;
  else h = processed_entropy(in.p, in.v, survivors);
  const float chosen = broken ? 0.f : raw[in.token] * inv;
  const int64_t above = broken ? 0 : scale_block(raw.data(), in.v, inv, chosen);
  const RowNumbers m{chosen, above, survivors, h_raw, h, in.finite.value_or(finite)};
  if (broken) return pack_row(in, m, nullptr, out);
  const std::vector<Entry> top = top_of(raw.data(), in.v, in.n);
  pack_row(in, m, &top, out);
}

void pack_row(const RowIn& in, const RowNumbers& m, const std::vector<Entry>* top, double* out) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  out[0] = static_cast<double>(in.token);
  out[1] = top == nullptr ? nan : m.chosen;
  out[2] = in.prob(in.token);
  out[3] = static_cast<double>(m.above + 1);
  out[4] = static_cast<double>(m.survivors);
  out[5] = top == nullptr ? nan : bits(m.h_raw);
  out[6] = bits(m.h);
  out[7] = m.finite ? 1.0 : 0.0;
  double* block = out + kScalars;
  for (int64_t i = 0; i < in.n; ++i) {
    // no order without numbers: the first n
    const int64_t id = top == nullptr ? i : (*top)[i].second;
    block[i] = static_cast<double>(id);
    block[in.n + i] = top == nullptr ? nan : (*top)[i].first;
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

}  // namespace stats

namespace {

using namespace stats;

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

// Which rows of x [rows, vocab] float32 hold no NaN and no inf -> [rows] bool (measure.py's
// all_finite: one pass where abs, amax and isfinite take three)
at::Tensor all_finite(const at::Tensor& x) {
  check_scores(x, "x");
  const int64_t rows = x.size(0), v = x.size(1);
  at::Tensor out = at::empty({rows}, x.options().dtype(at::kBool));
  bool* op = out.data_ptr<bool>();
  for (int64_t r = 0; r < rows; ++r) {
    op[r] = block_clean(x.data_ptr<float>() + r * v, v);
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

}  // namespace

TORCH_LIBRARY_IMPL(decoding_lab, CPU, m) {
  m.impl("step_stats", &step_stats);
  m.impl("all_finite", &all_finite);
  m.impl("stage_cut", &stage_cut);
}

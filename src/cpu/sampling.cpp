// Logit adjustments (bias and penalties), token selection and log-probabilities over one row of logits on the
// host: the CPU backend's sampler and logprobs, and the reference the GPU's kernels are tested against.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <numeric>

#include "core/random.hpp"
#include "cpu/exp.hpp"
#include "cpu/isa.hpp"
#include "cpu/kernels.hpp"

namespace photon::cpu {

void adjust_logits(std::span<float> logits, const SampleRequest& p, std::span<const LogitAdjustment> entries,
                   std::span<float> saved) {
  const bool additive = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  for (size_t i = 0; i < entries.size(); ++i) {
    const LogitAdjustment& e = entries[i];
    float& l = logits[static_cast<size_t>(e.token)];
    if (!saved.empty()) saved[i] = l;
    if (e.bias != 0.0f) l = l + e.bias;
    if (e.in_context != 0 && p.repetition_penalty != 1.0f) {
      l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
    if (additive && e.output_count > 0) {
      const float frequency = p.frequency_penalty * static_cast<float>(e.output_count);
      const float total = p.presence_penalty + frequency;
      l = l - total;
    }
  }
}

void restore_logits(std::span<float> logits, std::span<const LogitAdjustment> entries, std::span<const float> saved) {
  for (size_t i = 0; i < entries.size(); ++i) logits[static_cast<size_t>(entries[i].token)] = saved[i];
}

namespace {

// The sum of e^(x[i] - max) over [0, n): f32 partial sums of 128 terms (each within 1e-6 of exact), added in double.
// Inlined into one copy per instruction set below: exp_nonpositive's selects vectorise as blends only from AVX2 on.
inline double sum_exp(const float* x, int64_t n, float max) {
  constexpr int64_t kBlock = 128;
  double sum = 0.0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = b + kBlock < n ? b + kBlock : n;
    float part = 0.0f;
#pragma omp simd reduction(+ : part)
    for (int64_t i = b; i < end; ++i) part += exp_nonpositive(x[i] - max);
    sum += static_cast<double>(part);
  }
  return sum;
}
__attribute__((target("avx512f,avx512bw,avx512vl,fma"), flatten)) double sum_exp_avx512(const float* x, int64_t n,
                                                                                        float max) {
  return sum_exp(x, n, max);
}
__attribute__((target("avx2,fma"), flatten)) double sum_exp_avx2(const float* x, int64_t n, float max) {
  return sum_exp(x, n, max);
}

}  // namespace

double log_sum_exp(std::span<const float> logits) {
  const float* x = logits.data();
  const auto n = static_cast<int64_t>(logits.size());
  float max_logit = x[0];
#pragma omp simd reduction(max : max_logit)
  for (int64_t i = 0; i < n; ++i) max_logit = x[i] > max_logit ? x[i] : max_logit;
  if (max_logit == INFINITY) return NAN;
  const Isa isa = active_isa();
  const double sum = isa >= Isa::kAvx512 ? sum_exp_avx512(x, n, max_logit)
                     : isa == Isa::kAvx2 ? sum_exp_avx2(x, n, max_logit)
                                         : sum_exp(x, n, max_logit);
  return static_cast<double>(max_logit) + std::log(sum);
}

TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int k) {
  const double lse = log_sum_exp(logits);
  TokenLogprob out;
  out.token = token;
  out.logprob = static_cast<float>(logits[static_cast<size_t>(token)] - lse);
  k = std::min<int>(k, static_cast<int>(logits.size()));
  if (k > 0) {
    // One pass keeping the k best in a small sorted buffer: O(V k) worst case, O(V) typically.
    std::vector<int32_t> best;
    best.reserve(static_cast<size_t>(k) + 1);
    auto better = [&](int32_t a, int32_t b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
             (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
    };
    // Blocks of 64 whose largest logit is no better than the k-th best so far are skipped whole (ids only grow, so
    // a tie with it does not enter): past the first blocks, one vectorised max a block.
    constexpr int32_t kBlock = 64;
    const auto n = static_cast<int32_t>(logits.size());
    for (int32_t b = 0; b < n; b += kBlock) {
      const int32_t end = std::min(n, b + kBlock);
      if (static_cast<int>(best.size()) == k) {
        float block_max = -INFINITY;
#pragma omp simd reduction(max : block_max)
        for (int32_t i = b; i < end; ++i)
          block_max = logits[static_cast<size_t>(i)] > block_max ? logits[static_cast<size_t>(i)] : block_max;
        if (!(block_max > logits[static_cast<size_t>(best.back())])) continue;
      }
      for (int32_t i = b; i < end; ++i) {
        if (static_cast<int>(best.size()) == k && !better(i, best.back())) continue;
        best.insert(std::upper_bound(best.begin(), best.end(), i, better), i);
        if (static_cast<int>(best.size()) > k) best.pop_back();
      }
    }
    for (int32_t id : best) out.top.emplace_back(id, static_cast<float>(logits[static_cast<size_t>(id)] - lse));
  }
  return out;
}

namespace {

// Buckets of a relative probability w in [0, 1] by its f32 bits, both non-decreasing in w: the exponent and three
// leading mantissa bits (2,048 buckets, eight an octave), then within one of those the next twelve mantissa bits.
constexpr int kCoarseBuckets = 1 << 11;
constexpr int kFineBuckets = 1 << 12;
inline uint32_t coarse_bucket(double w) { return std::bit_cast<uint32_t>(static_cast<float>(w)) >> 20; }
inline uint32_t fine_bucket(double w) { return (std::bit_cast<uint32_t>(static_cast<float>(w)) >> 8) & 0xfffu; }
// Up to this many candidates top-p sorts them all; above, it sorts only the tokens its buckets cannot tell apart.
constexpr size_t kSortAll = 4096;

// Top-p over the candidates ids[0, n), whose probabilities relative to the best one's are weight(id): moves the
// smallest prefix of the order (`better`) whose mass reaches top_p * (their total) to ids[0, returned count), in no
// particular order. `keys` is scratch.
template <class Weight, class Better>
size_t top_p_prefix(std::vector<int32_t>& ids, size_t n, double top_p, const Weight& weight, const Better& better,
                    std::vector<uint16_t>& keys) {
  // Sorts ids[begin, end) and walks it from `above` until the mass reaches the target: the count kept, or 0 when it
  // does not get there.
  const auto walk = [&](size_t begin, size_t end, double above, double target) -> size_t {
    std::sort(ids.begin() + static_cast<std::ptrdiff_t>(begin), ids.begin() + static_cast<std::ptrdiff_t>(end), better);
    for (size_t i = begin; i < end; ++i) {
      above += weight(ids[i]);
      if (above >= target) return i + 1;
    }
    return 0;
  };
  double total = 0.0;
  if (n <= kSortAll) {
    for (size_t i = 0; i < n; ++i) total += weight(ids[i]);
    const size_t keep = walk(0, n, 0.0, top_p * total);
    return keep > 0 ? keep : n;
  }
  // Every token of a bucket above the one where the mass reaches the target is kept, none below it is; only the
  // tokens of that bucket need ordering, and the fine buckets split it again. Buckets fall along the order.
  keys.resize(n);
  std::array<double, kCoarseBuckets> coarse{};
  for (size_t i = 0; i < n; ++i) {
    const double w = weight(ids[i]);
    total += w;
    keys[i] = static_cast<uint16_t>(coarse_bucket(w));
    coarse[keys[i]] += w;
  }
  const double target = top_p * total;
  // Moves the ids whose key is above `cut` to the front of [begin, end), then those at it; returns where each group
  // ends.
  const auto split = [&](size_t begin, size_t end, uint32_t cut) {
    size_t above = begin;
    for (size_t i = begin; i < end; ++i) {
      if (keys[i] > cut) {
        std::swap(ids[above], ids[i]);
        std::swap(keys[above], keys[i]);
        ++above;
      }
    }
    size_t at = above;
    for (size_t i = above; i < end; ++i) {
      if (keys[i] == cut) {
        std::swap(ids[at], ids[i]);
        std::swap(keys[at], keys[i]);
        ++at;
      }
    }
    return std::make_pair(above, at);
  };
  double mass = 0.0;  // of the buckets above the cut
  uint32_t cut = kCoarseBuckets - 1;
  for (; cut > 0 && mass + coarse[cut] < target; --cut) mass += coarse[cut];
  const auto [above, at] = split(0, n, cut);
  std::array<double, kFineBuckets> fine{};
  for (size_t i = above; i < at; ++i) {
    const double w = weight(ids[i]);
    keys[i] = static_cast<uint16_t>(fine_bucket(w));
    fine[keys[i]] += w;
  }
  uint32_t fine_cut = kFineBuckets - 1;
  for (; fine_cut > 0 && mass + fine[fine_cut] < target; --fine_cut) mass += fine[fine_cut];
  const auto [fine_above, fine_at] = split(above, at, fine_cut);
  const size_t keep = walk(fine_above, fine_at, mass, target);
  if (keep > 0) return keep;
  // The buckets' sums and the walk's differ in their last bits and the target was not reached: order everything.
  const size_t all = walk(0, n, 0.0, target);
  return all > 0 ? all : n;
}

}  // namespace

int32_t sample_row(std::span<const float> logits, const SampleRequest& p, SampleScratch& scratch) {
  const auto vocab = static_cast<int32_t>(logits.size());
  const auto top = std::max_element(logits.begin(), logits.end());  // the first of equal maxima
  const auto top_id = static_cast<int32_t>(top - logits.begin());
  if (p.temperature <= 0.0f) return top_id;
  const int32_t k = p.top_k > 0 ? std::min(p.top_k, vocab) : vocab;
  std::vector<int32_t>& ids = scratch.ids;
  ids.resize(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
           (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
  };
  size_t n = ids.size();
  if (k < vocab) {
    std::nth_element(ids.begin(), ids.begin() + k, ids.end(), better);
    n = static_cast<size_t>(k);
  }

  // Probabilities relative to the best candidate's (1), unnormalised.
  const double inv_t = 1.0 / p.temperature;
  const double max_logit = *top;
  auto scaled = [&](int32_t id) { return (logits[static_cast<size_t>(id)] - max_logit) * inv_t; };
  if (p.top_p < 1.0f) {
    // The smallest prefix of the order (logit descending, id ascending) whose mass reaches top_p; at least one token.
    n = top_p_prefix(
        ids, n, static_cast<double>(p.top_p), [&](int32_t id) { return std::exp(scaled(id)); }, better, scratch.keys);
  }
  if (p.min_p > 0.0f) {
    const double log_min_p = std::log(static_cast<double>(p.min_p));
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      if (scaled(ids[i]) >= log_min_p) ids[kept++] = ids[i];
    }
    n = kept;
  }
  // Gumbel-max over the surviving candidates: an exact draw from their renormalised distribution. The best token
  // survives every filter and goes first, so that tokens too far below it to win are passed over without a draw.
  int32_t best = top_id;
  float best_value = static_cast<float>(scaled(top_id)) + gumbel(p.seed, p.index, static_cast<uint32_t>(top_id));
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    const auto s = static_cast<float>(scaled(id));
    if (s + kGumbelMax < best_value) continue;  // cannot win: no variate
    const float value = s + gumbel(p.seed, p.index, static_cast<uint32_t>(id));
    if (value > best_value || (value == best_value && id < best)) {
      best_value = value;
      best = id;
    }
  }
  return best;
}

}  // namespace photon::cpu

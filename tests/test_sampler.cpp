// The sampler: support sets of top-k / top-p / min-p, logit bias and penalties, greedy ties, reproducible random
// streams; through the CPU backend's sample(), which the GPU's is tested against.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "core/random.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"
#include "engine/sampler.hpp"

using namespace photon;

namespace {

// Logits whose softmax is exactly `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// What one draw gives besides its token.
struct Draw {
  int32_t token = -1;
  TokenLogprob logprob;         // when asked for
  std::vector<float> row;       // the row as sample() left it
  std::vector<int32_t> counts;  // append_logit_adjustments' scratch afterwards
};

// Draw `index` of stream `seed` from one row of logits through the CPU backend's sampler, as the engine asks for it:
// the request's adjustments (append_logit_adjustments) applied by the backend, then the selection.
Draw draw(std::span<const float> logits, const SamplingParams& p, std::span<const int32_t> prompt = {},
          std::span<const int32_t> output = {}, uint64_t seed = 1, uint64_t index = 0, int logprobs = -1) {
  static const auto backend = make_cpu_backend(default_cpu_allocator());
  const auto vocab = static_cast<int64_t>(logits.size());
  Tensor row = Tensor::empty({1, vocab}, DType::kF32, backend->allocator()).value();
  std::copy(logits.begin(), logits.end(), row.data<float>());
  Tensor ids = Tensor::empty({1}, DType::kI32, backend->allocator()).value();
  SampleRequest r = sample_request(p, seed, index);
  r.logprobs = logprobs;
  Draw d;
  std::vector<LogitAdjustment> adjustments;
  if (has_adjustments(p)) append_logit_adjustments(p, prompt, output, d.counts, adjustments);
  r.adjustment_count = static_cast<int32_t>(adjustments.size());
  REQUIRE(backend->sample(row, {&r, 1}, adjustments, ids, &d.token).is_ok());
  REQUIRE(backend->wait_samples().is_ok());
  if (logprobs >= 0) REQUIRE(backend->sampled_logprobs({&d.logprob, 1}).is_ok());
  d.row.assign(row.data<float>(), row.data<float>() + vocab);
  return d;
}

// Draws `n` tokens with independent uniforms; returns how often each id came up.
std::vector<int> histogram(const std::vector<float>& logits, const SamplingParams& p, int n) {
  std::vector<int> counts(logits.size());
  for (int i = 0; i < n; ++i)
    counts[static_cast<size_t>(draw(logits, p, {}, {}, 99, static_cast<uint64_t>(i)).token)]++;
  return counts;
}

std::set<int> support(const std::vector<int>& counts) {
  std::set<int> s;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] > 0) s.insert(static_cast<int>(i));
  }
  return s;
}

const std::vector<double> kProbs = {0.05, 0.5, 0.15, 0.3};  // order: 1 > 3 > 2 > 0

}  // namespace

TEST_CASE("token logprobs' top tokens over a large vocabulary equal a full sort, ties to the lower id") {
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (const bool coarse : {false, true}) {  // coarse: logits in steps of 0.5, long runs of ties at every cut
    std::vector<float> logits(128256);
    for (float& l : logits) l = coarse ? std::round(d(rng) * 2) / 2 : d(rng);
    logits[100] = -INFINITY;
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
    });
    for (const int k : {1, 5, 20}) {
      INFO((coarse ? "coarse" : "fine") << " logits, top " << k);
      const TokenLogprob lp = cpu::token_logprob(logits, 100, k);
      CHECK(lp.logprob == -INFINITY);
      REQUIRE(lp.top.size() == static_cast<size_t>(k));
      for (int j = 0; j < k; ++j) CHECK(lp.top[static_cast<size_t>(j)].first == order[static_cast<size_t>(j)]);
    }
  }
}

TEST_CASE("token logprobs and their top-k, ties to the lower id") {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, -2.0f};
  const auto lp = cpu::token_logprob(logits, 0, 3);
  double lse = 0;
  for (float l : logits) lse += std::exp(static_cast<double>(l));
  lse = std::log(lse);
  CHECK(std::abs(lp.logprob - (1.0 - lse)) < 1e-6);
  REQUIRE(lp.top.size() == 3);
  CHECK(lp.top[0].first == 1);
  CHECK(lp.top[1].first == 2);
  CHECK(lp.top[2].first == 0);
  CHECK(cpu::token_logprob(logits, 3, 0).top.empty());
  CHECK(cpu::token_logprob(logits, 3, 10).top.size() == 4);
  CHECK(argmax(logits) == 1);
}

TEST_CASE("temperature sampling follows softmax(logits / T)") {
  SamplingParams p;
  p.temperature = 1.0f;
  const auto counts = histogram(logits_of(kProbs), p, 40000);
  for (size_t i = 0; i < kProbs.size(); ++i) CHECK(std::abs(counts[i] / 40000.0 - kProbs[i]) < 0.01);
  p.temperature = 0.5f;  // squares the probabilities before renormalising
  const auto sharp = histogram(logits_of(kProbs), p, 40000);
  double z = 0;
  for (double q : kProbs) z += q * q;
  for (size_t i = 0; i < kProbs.size(); ++i) CHECK(std::abs(sharp[i] / 40000.0 - kProbs[i] * kProbs[i] / z) < 0.01);
  p.temperature = 0.0f;
  CHECK(support(histogram(logits_of(kProbs), p, 100)) == std::set<int>{1});
}

TEST_CASE("top-k, top-p and min-p keep exactly their support sets") {
  SamplingParams p;
  p.top_k = 2;
  CHECK(support(histogram(logits_of(kProbs), p, 5000)) == std::set<int>{1, 3});
  p.top_k = 0;
  p.top_p = 0.79f;  // 0.5 + 0.3 reaches 0.79
  CHECK(support(histogram(logits_of(kProbs), p, 5000)) == std::set<int>{1, 3});
  p.top_p = 0.81f;
  CHECK(support(histogram(logits_of(kProbs), p, 5000)) == std::set<int>{1, 2, 3});
  p.top_p = 0.01f;  // always at least the top token
  CHECK(support(histogram(logits_of(kProbs), p, 500)) == std::set<int>{1});
  p.top_p = 1.0f;
  p.min_p = 0.35f;  // threshold 0.175: keeps 0.5 and 0.3
  CHECK(support(histogram(logits_of(kProbs), p, 5000)) == std::set<int>{1, 3});
  p.min_p = 0.05f;  // threshold 0.025: keeps all
  CHECK(support(histogram(logits_of(kProbs), p, 20000)) == std::set<int>{0, 1, 2, 3});
  // Within the top-k set the proportions are renormalised: 0.5 : 0.3.
  p.min_p = 0.0f;
  p.top_k = 2;
  const auto counts = histogram(logits_of(kProbs), p, 40000);
  CHECK(std::abs(counts[1] / 40000.0 - 0.625) < 0.01);
}

TEST_CASE("top-p over a large vocabulary keeps what sorting the whole vocabulary keeps") {
  // The reference: every token sorted (logit descending, id ascending), the smallest prefix whose mass reaches top_p
  // (at least one token), then min_p, then the Gumbel-max draw among what is left.
  auto reference = [](const std::vector<float>& logits, const SampleRequest& r) {
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
    });
    const double max_logit = logits[static_cast<size_t>(order[0])];
    auto scaled = [&](int32_t id) { return (logits[static_cast<size_t>(id)] - max_logit) / r.temperature; };
    double total = 0.0;
    for (int32_t id : order) total += std::exp(scaled(id));
    size_t keep = 0;
    for (double mass = 0.0; keep < order.size() && (keep == 0 || mass < r.top_p * total);) {
      mass += std::exp(scaled(order[keep++]));
    }
    int32_t best = -1;
    float best_value = -INFINITY;
    for (size_t i = 0; i < keep; ++i) {
      const int32_t id = order[i];
      if (r.min_p > 0.0f && scaled(id) < std::log(static_cast<double>(r.min_p))) continue;
      const float v = static_cast<float>(scaled(id)) + gumbel(r.seed, r.index, static_cast<uint32_t>(id));
      if (best < 0 || v > best_value || (v == best_value && id < best)) {
        best_value = v;
        best = id;
      }
    }
    return best;
  };
  std::mt19937 rng(21);
  cpu::SampleScratch scratch;
  for (const float spread : {0.05f, 1.0f, 4.0f}) {  // nearly flat to peaked; steps of 0.25 give long runs of ties
    std::normal_distribution<float> d(0.0f, spread);
    std::vector<float> logits(50000);
    for (float& l : logits) l = std::round(d(rng) * 4) / 4;
    for (const float top_p : {0.01f, 0.3f, 0.9f, 0.95f, 0.999f}) {
      for (uint64_t index = 0; index < 20; ++index) {
        SampleRequest r;
        r.temperature = index % 2 == 0 ? 1.0f : 0.6f;
        r.top_p = top_p;
        r.min_p = index % 5 == 0 ? 0.2f : 0.0f;
        r.seed = 3;
        r.index = index;
        INFO("spread " << spread << ", top_p " << top_p << ", draw " << index);
        CHECK(cpu::sample_row(logits, r, scratch) == reference(logits, r));
      }
    }
  }
}

TEST_CASE("repetition, presence and frequency penalties") {
  SamplingParams p;
  p.temperature = 0.0f;
  const std::vector<float> logits = {2.0f, 1.9f, -1.0f, -1.05f};
  CHECK(draw(logits, p).token == 0);
  p.repetition_penalty = 2.0f;  // 2.0 -> 1.0 for token 0 (in the prompt)
  const std::vector<int32_t> prompt = {0, 0, 0};
  CHECK(draw(logits, p, prompt).token == 1);
  // Negative logits are multiplied: token 2 (in the output) falls from -1.0 to -2.0, below token 3.
  const std::vector<float> negative = {-1.0f, -1.05f};
  const std::vector<int32_t> out0 = {0};
  CHECK(draw(negative, p, {}, out0).token == 1);
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.05f;
  const std::vector<int32_t> output = {0, 0};
  CHECK(draw(logits, p, {}, output).token == 0);  // 2.0 - 0.05 > 1.9
  p.frequency_penalty = 0.04f;                    // 2.0 - 0.05 - 2 * 0.04 < 1.9
  const Draw d = draw(logits, p, {}, output);
  CHECK(d.token == 1);
  // The row keeps its adjustments (no logprobs were asked for), and the scratch counters are zeroed for the next call.
  CHECK(d.row == std::vector<float>{2.0f - (0.05f + 0.04f * 2), 1.9f, -1.0f, -1.05f});
  for (int32_t c : d.counts) CHECK(c == 0);
  // Prompt tokens do not count for presence/frequency.
  CHECK(draw(logits, p, prompt).token == 0);
}

TEST_CASE("a logit bias is added before the penalties; logprobs are of the model's row") {
  SamplingParams p;
  p.temperature = 0.0f;
  const std::vector<float> logits = {2.0f, 1.9f, -1.0f, -1.05f};
  p.logit_bias = {{0, -0.2f}};  // 1.8 < 1.9
  CHECK(draw(logits, p).token == 1);
  p.logit_bias = {{3, 3.1f}};  // 2.05 > 2.0
  CHECK(draw(logits, p).token == 3);
  // The bias comes before the repetition penalty (tokens 0 and 2 in the prompt; token 0 falls from 2.0 to 1.0):
  // token 2 biased by 5 to 4.0 is halved to 2.0 and beats token 1's 1.9; biased by 4.5 to 3.5 it is halved to 1.75
  // and loses, where a bias after the penalty (-1.0 -> -2.0, + 4.5 = 2.5) would have won.
  p.logit_bias = {{2, 5.0f}};
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {0, 2};
  CHECK(draw(logits, p, prompt).token == 2);
  p.logit_bias = {{2, 4.5f}, {1, 0.25f}};  // token 1 only biased: no repetition penalty, 2.15 > 1.75
  const Draw d = draw(logits, p, prompt);
  CHECK(d.token == 1);
  for (int32_t c : d.counts) CHECK(c == 0);
  // With logprobs the row is the model's again afterwards, and the logprobs are its own, whatever was drawn.
  const Draw with = draw(logits, p, prompt, {}, 1, 0, 2);
  CHECK(with.token == 1);
  CHECK(with.row == logits);
  const TokenLogprob model = cpu::token_logprob(logits, 1, 2);
  CHECK(with.logprob.token == 1);
  CHECK(with.logprob.logprob == model.logprob);
  CHECK(with.logprob.top == model.top);
  // Sampling with temperature: -100 all but bans the most likely token.
  p = SamplingParams{};
  p.logit_bias = {{0, -100.0f}};
  for (uint64_t i = 0; i < 200; ++i) CHECK(draw(logits, p, {}, {}, 5, i).token != 0);
}

TEST_CASE("the logit adjustments list each token once, with its bias and whether it is in context") {
  SamplingParams p;
  std::vector<int32_t> counts;
  std::vector<LogitAdjustment> out = {{9, 9, 9.0f, 9}};  // an earlier request's entry stays
  const std::vector<int32_t> prompt = {5, 3, 5}, output = {3, 7, 7};
  p.logit_bias = {{7, 1.5f}, {11, -2.0f}};
  append_logit_adjustments(p, prompt, output, counts, out);  // no penalties: the biased tokens only
  REQUIRE(out.size() == 3);
  CHECK((out[1].token == 7 && out[1].bias == 1.5f && out[1].in_context == 0 && out[1].output_count == 0));
  CHECK((out[2].token == 11 && out[2].bias == -2.0f));
  out.resize(1);
  p.presence_penalty = 0.5f;
  append_logit_adjustments(p, prompt, output, counts, out);
  REQUIRE(out.size() == 5);
  const auto entry = [&](size_t i) {
    return std::make_tuple(out[i].token, out[i].output_count, out[i].bias, out[i].in_context);
  };
  CHECK(entry(0) == std::make_tuple(9, 9, 9.0f, 9));
  CHECK(entry(1) == std::make_tuple(5, 0, 0.0f, 1));
  CHECK(entry(2) == std::make_tuple(3, 1, 0.0f, 1));
  CHECK(entry(3) == std::make_tuple(7, 2, 1.5f, 1));
  CHECK(entry(4) == std::make_tuple(11, 0, -2.0f, 0));
  for (int32_t c : counts) CHECK(c == 0);
}

TEST_CASE("random streams depend only on (seed, index, lane)") {
  CHECK(uniform01(1, 5, 3) == uniform01(1, 5, 3));
  CHECK(uniform01(1, 5, 3) != uniform01(2, 5, 3));
  CHECK(uniform01(1, 5, 3) != uniform01(1, 6, 3));
  CHECK(uniform01(1, 5, 3) != uniform01(1, 5, 4));
  double sum = 0, gsum = 0;
  for (uint32_t i = 0; i < 20000; ++i) {
    const float u = uniform01(7, i / 100, i % 100);
    REQUIRE(u > 0.0f);
    REQUIRE(u < 1.0f);
    sum += u;
    gsum += gumbel(7, i / 100, i % 100);
  }
  CHECK(std::abs(sum / 20000 - 0.5) < 0.01);
  CHECK(std::abs(gsum / 20000 - 0.5772) < 0.03);  // the Gumbel mean is the Euler-Mascheroni constant
  // The extremes, which a draw meets about once in 8 million variates (every few dozen draws over a vocabulary of
  // 128,256): strictly inside (0, 1), so every variate is finite and kGumbelMax bounds it, closely.
  const float lowest = uniform01_from_bits(0), highest = uniform01_from_bits(0x7fffffu);
  CHECK(lowest == std::ldexp(1.0f, -24));
  CHECK(highest == 1.0f - std::ldexp(1.0f, -24));
  CHECK(uniform01_from_bits(0xffffffffu) == highest);  // the low 23 bits only
  CHECK(std::isfinite(gumbel_of(lowest)));
  CHECK(std::isfinite(gumbel_of(highest)));
  CHECK(gumbel_of(highest) <= kGumbelMax);
  CHECK(gumbel_of(highest) > kGumbelMax - 0.01f);
  CHECK(gumbel_of(lowest) > -3.0f);
}

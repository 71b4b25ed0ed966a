#include "engine/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace photon {
namespace {

double log_sum_exp(std::span<const float> logits, double max_logit, double scale) {
  double sum = 0.0;
  for (float l : logits) sum += std::exp((static_cast<double>(l) - max_logit) * scale);
  return std::log(sum);
}

}  // namespace

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int k) {
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  const double lse = max_logit + log_sum_exp(logits, max_logit, 1.0);
  TokenLogprob out;
  out.token = token;
  out.logprob = static_cast<float>(logits[static_cast<size_t>(token)] - lse);
  k = std::min<int>(k, static_cast<int>(logits.size()));
  if (k > 0) {
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    auto better = [&](int32_t a, int32_t b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
             (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
    };
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), better);
    for (int i = 0; i < k; ++i) {
      const int32_t id = ids[static_cast<size_t>(i)];
      out.top.emplace_back(id, static_cast<float>(logits[static_cast<size_t>(id)] - lse));
    }
  }
  return out;
}

int32_t sample_token(std::span<const float> logits, float temperature, std::mt19937_64& rng) {
  if (temperature <= 0.0f) return argmax(logits);
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  const double inv_t = 1.0 / temperature;
  const double total = std::exp(log_sum_exp(logits, max_logit, inv_t));
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  double acc = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    acc += std::exp((static_cast<double>(logits[i]) - max_logit) * inv_t);
    if (acc > u) return static_cast<int32_t>(i);
  }
  return argmax(logits);  // only reachable through rounding at the very end
}

}  // namespace photon

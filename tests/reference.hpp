// Naive double-precision references for the kernel tests, random inputs, and the greedy run of an engine over a
// parity checkpoint's reference prompts.
#pragma once

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>
#include <photon/engine.hpp>

namespace photon::test {

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// Largest |a - b| / (atol + rtol * |b|) over the elements: <= 1 means within tolerance. A NaN or infinite element
/// of `a` where `b` is finite (a NaN-filled output never written, a read past its input) counts as infinity; so do
/// lengths that differ.
inline double max_violation(const std::vector<float>& a, const std::vector<double>& b, double atol, double rtol) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double v = std::abs(static_cast<double>(a[i]) - b[i]) / (atol + rtol * std::abs(b[i]));
    if (!std::isfinite(v)) return INFINITY;
    worst = std::max(worst, v);
  }
  return worst;
}

/// Largest |a - b| over the elements; infinity when the lengths differ or a difference is not finite (a NaN or an
/// infinity on either side, unless both hold the same infinity).
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    const double diff = std::abs(static_cast<double>(a[i]) - b[i]);
    if (!std::isfinite(diff)) return INFINITY;
    d = std::max(d, diff);
  }
  return d;
}

/// Runs every case of a parity checkpoint's reference.json (`ref`) greedily for `max_tokens` tokens (EOS ignored)
/// and checks each output against transformers' ids.
inline void check_greedy_against_reference(Engine& engine, const nlohmann::json& ref, int max_tokens) {
  std::map<uint64_t, size_t> case_of;
  for (size_t i = 0; i < ref["cases"].size(); ++i) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    case_of[engine.submit(ref["cases"][i]["prompt_ids"].get<std::vector<int32_t>>(), p).value()] = i;
  }
  std::map<uint64_t, std::vector<int32_t>> tokens;
  while (engine.has_unfinished_requests()) {
    REQUIRE(engine.step().is_ok());
    for (auto& e : engine.poll()) {
      CHECK(e.error.empty());
      tokens[e.request_id].insert(tokens[e.request_id].end(), e.token_ids.begin(), e.token_ids.end());
    }
  }
  REQUIRE(tokens.size() == case_of.size());
  for (const auto& [id, got] : tokens) {
    auto expected = ref["cases"][case_of.at(id)]["output_ids"].get<std::vector<int32_t>>();
    expected.resize(static_cast<size_t>(max_tokens));
    CHECK(got == expected);
  }
}

}  // namespace photon::test

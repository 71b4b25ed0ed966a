#include "cuda/w8a16_choices.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "cuda/cuda_check.hpp"
#include "cuda/launch_timer.hpp"

namespace photon::cuda {
namespace {

constexpr int kStepK = 64;  // the W8A16 GEMM's K step: splits beyond k / kStepK do not exist
constexpr int kTokenTiles[] = {64, 128, 256};
constexpr int kSplits[] = {1, 2, 4, 8};
constexpr float kMargin = 0.97f;  // a timed path replaces the rule's only when this much faster

W8a16Choice rule(int64_t m, int64_t n, int64_t k) {
  return {!w8a16_gemm_pays(m, n, k), w8a16_gemm_plan(static_cast<int>(m), static_cast<int>(n), static_cast<int>(k))};
}

bool same(const W8a16Choice& a, const W8a16Choice& b) {
  return a.widen == b.widen && (a.widen || (a.plan.token_tile == b.plan.token_tile && a.plan.splits == b.plan.splits));
}

}  // namespace

size_t W8a16Choices::scratch_bytes(int64_t n, int64_t k) {
  const auto rows = static_cast<size_t>(kRows.back());
  return rows * static_cast<size_t>(k) * 2 + rows * static_cast<size_t>(n) * 2 + LaunchTimer::flush_bytes();
}

bool W8a16Choices::wants(int64_t n, int64_t k, int group) const {
  // The alignment that time_shape's scratch gives the activations.
  alignas(16) static const char aligned[16] = {};
  return gemm_tuning_enabled() &&
         w8a16_gemm_supported(kRows.back(), static_cast<int>(n), static_cast<int>(k), k, aligned, group) &&
         timed_.count({n, k, group}) == 0;
}

Status W8a16Choices::time_shape(const Int8Weights& w, int n, int k, Gemm& gemm, uint16_t* wide, void* scratch,
                                cudaStream_t s) {
  auto* x = static_cast<uint16_t*>(scratch);
  auto* out = x + static_cast<size_t>(kRows.back()) * static_cast<size_t>(k);
  void* flush = out + static_cast<size_t>(kRows.back()) * static_cast<size_t>(n);
  PHOTON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(x, 0, static_cast<size_t>(kRows.back()) * k * 2, s));
  // Enqueues one launch of `c` for m rows; false where the W8A16 GEMM declines the plan.
  const auto enqueue = [&](const W8a16Choice& c, int m) -> Result<bool> {
    if (!c.widen) return w8a16_gemm(x, m, k, w, n, k, out, false, s, c.plan);
    dequantize_int8(w, n, k, wide, s);
    PHOTON_RETURN_IF_ERROR(gemm.run(x, m, k, k, wide, n, out, false, s));
    return true;
  };
  LaunchTimer timer;
  std::array<W8a16Choice, kRows.size()> choices;
  for (size_t i = 0; i < kRows.size(); ++i) {
    const int m = kRows[i];
    std::vector<W8a16Choice> candidates = {rule(m, n, k), {true, {}}};
    for (const int tok : kTokenTiles) {
      if (tok > 64 && tok >= 2 * m) continue;  // a tile more than half padding
      for (const int splits : kSplits) {
        if (splits * kStepK <= k) candidates.push_back({false, {tok, splits}});
      }
    }
    // A rule's path that does not run (its plan declined: it then widens) competes at no time of its own.
    float rule_us = std::numeric_limits<float>::infinity(), best_us = rule_us;
    choices[i] = candidates.front();
    for (size_t c = 0; c < candidates.size(); ++c) {
      if (c > 0 && same(candidates[c], candidates.front())) continue;
      PHOTON_ASSIGN_OR_RETURN(const float us, timer.least_us(s, flush, [&] { return enqueue(candidates[c], m); }));
      if (us < 0.0f) continue;
      if (c == 0) {
        rule_us = best_us = us;
      } else if (us < best_us && us < kMargin * rule_us) {
        best_us = us;
        choices[i] = candidates[c];
      }
    }
  }
  timed_[{n, k, w.group}] = choices;
  return Status::ok();
}

W8a16Choice W8a16Choices::choose(int64_t m, int64_t n, int64_t k, int group) const {
  const auto it = timed_.find({n, k, group});
  if (it == timed_.end() || m <= 16 || m > kRows.back()) return rule(m, n, k);
  const auto row = std::lower_bound(kRows.begin(), kRows.end(), static_cast<int>(m));
  return it->second[static_cast<size_t>(row - kRows.begin())];
}

std::string W8a16Choices::describe(int64_t n, int64_t k, int group) const {
  const auto it = timed_.find({n, k, group});
  if (it == timed_.end()) return {};
  std::string out;
  for (size_t i = 0; i < kRows.size(); ++i) {
    const W8a16Choice& c = it->second[i];
    out += fmt::format("{}{}: {}", i == 0 ? "" : ", ", kRows[i],
                       c.widen ? std::string("widen") : fmt::format("{}/{}", c.plan.token_tile, c.plan.splits));
  }
  return out;
}

}  // namespace photon::cuda

#include "latency_stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace photon::cli {

nlohmann::json latency_summary(std::vector<double> values, bool with_mean) {
  nlohmann::json out;
  if (with_mean) out["mean"] = nullptr;
  if (values.empty()) {
    out["p50"] = out["p90"] = out["p99"] = nullptr;
    return out;
  }
  std::sort(values.begin(), values.end());
  const auto at = [&](double q) {
    const double pos = q * static_cast<double>(values.size() - 1);
    const auto lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, values.size() - 1);
    return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
  };
  if (with_mean) out["mean"] = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  out["p50"] = at(0.50);
  out["p90"] = at(0.90);
  out["p99"] = at(0.99);
  return out;
}

}  // namespace photon::cli

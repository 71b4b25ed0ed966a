// Latency summaries shared by photon bench and photon bench serve.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

namespace photon::cli {

/// {"p50", "p90", "p99"} of `values` (linear interpolation between ranks), plus "mean" with `with_mean`; every field
/// null when `values` is empty.
nlohmann::json latency_summary(std::vector<double> values, bool with_mean);

}  // namespace photon::cli

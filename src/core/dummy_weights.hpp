// The values of dummy (random) weights, element by element, as one formula the host and the GPU both evaluate, so
// a model's dummy weights are the same bits wherever they are generated and however a tensor is sharded.
//
// Element i of a whole tensor (row-major) is uniform in mean +- half_width: draw i % 2^16 of a SplitMix64 stream
// seeded by (seed, i / 2^16). Rows past the tensor's end (padded vocabulary rows of a shard) are zeros.
#pragma once

#include <cstdint>

#include "core/random.hpp"  // PHOTON_HOST_DEVICE

namespace photon {

/// A block of a whole tensor [full_rows, full_cols] to fill: rows [row0, row0 + rows) by columns [col0, col0 + cols).
struct DummyFill {
  uint64_t seed = 0;
  float mean = 0.0f;
  float half_width = 0.0f;  ///< stddev * sqrt(3)
  int64_t full_rows = 1, full_cols = 1;
  int64_t rows = 1, cols = 1;
  int64_t row0 = 0, col0 = 0;
};

/// Element (r, c) of the block.
PHOTON_HOST_DEVICE inline float dummy_value(const DummyFill& f, int64_t r, int64_t c) {
  constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;
  constexpr int kChunkBits = 16;
  const int64_t row = f.row0 + r;
  if (row >= f.full_rows) return 0.0f;
  const int64_t i = row * f.full_cols + f.col0 + c;
  const uint64_t stream = f.seed ^ (static_cast<uint64_t>(i >> kChunkBits) * 0xd1b54a32d192ed03ull);
  const uint64_t draw = static_cast<uint64_t>(i & ((int64_t{1} << kChunkBits) - 1)) + 1;
  uint64_t z = stream + draw * kGamma;  // SplitMix64's output for that state
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const double u = static_cast<double>(z >> 11) * 0x1.0p-53;  // [0, 1)
  return f.mean + static_cast<float>((2.0 * u - 1.0) * static_cast<double>(f.half_width));
}

}  // namespace photon

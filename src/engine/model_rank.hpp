// One tensor-parallel rank of a model on this process.
#pragma once

#include <memory>

#include "core/backend.hpp"
#include "models/decoder.hpp"
#include "models/kv_cache.hpp"

namespace photon {

/// One rank of the model: its backend, its share of the decoder and its KV heads' cache.
struct ModelRank {
  Backend* backend = nullptr;  ///< not owned; outlives the runner
  std::unique_ptr<Decoder> decoder;
  PagedKvCache kv_cache;
};

}  // namespace photon

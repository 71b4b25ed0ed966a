// Writer for the safetensors format (the reader's counterpart, core/safetensors.hpp): the header lists every tensor
// with its dtype, shape and byte range, padded with spaces to a multiple of 8 bytes, then the tensors' bytes in
// the order given.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <photon/status.hpp>

#include "core/dtype.hpp"

namespace photon {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const unsigned char> bytes;  ///< borrowed until write_safetensors returns; its size must fit the shape
};

/// Writes `tensors` and `metadata` (string pairs, e.g. {"format": "pt"}) to `path`, replacing it. Errors: a size
/// that does not match its shape, a repeated name, or a file that cannot be written (the message names the path).
Status write_safetensors(const std::string& path, std::span<const SafetensorsTensor> tensors,
                         const std::map<std::string, std::string>& metadata);

}  // namespace photon

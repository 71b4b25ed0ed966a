// The tensor-parallel wire format: how rank 0 of a multi-process group sends each step's batch to the other
// processes (ProcessGroup::broadcast carries the bytes), and how it tells them to stop.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/decoder.hpp"

namespace photon {

/// A batch as bytes: a kind word, then each index array as its length and its int32 values.
void serialize_batch(const ForwardBatch& batch, std::vector<uint8_t>& out);
/// The inverse; kFormatError for bytes that are not a serialised batch.
Status deserialize_batch(std::span<const uint8_t> bytes, ForwardBatch& batch);
/// The message that tells the other processes to stop (no batch serialises to it).
std::vector<uint8_t> stop_message();
bool is_stop_message(std::span<const uint8_t> bytes);

}  // namespace photon

#include "engine/batch_message.hpp"

#include <cstring>

namespace photon {

namespace {

// Message layout: a kind word, then for a batch each array as its length and its int32 values, in the order below.
constexpr uint32_t kBatchMessage = 0x42415443;  // "BATC"
constexpr uint32_t kStopMessage = 0x53544f50;   // "STOP"

// Calls f on each index array of a batch (const or not), in message order.
template <typename Batch, typename F>
void for_each_array(Batch& b, const F& f) {
  f(b.token_ids);
  f(b.positions);
  f(b.slot_mapping);
  f(b.query_start);
  f(b.seq_lens);
  f(b.block_indptr);
  f(b.block_indices);
  f(b.logits_indices);
}

void put(std::vector<uint8_t>& out, const void* data, size_t bytes) {
  const size_t at = out.size();
  out.resize(at + bytes);
  if (bytes > 0) std::memcpy(out.data() + at, data, bytes);
}
void put_u32(std::vector<uint8_t>& out, uint32_t v) { put(out, &v, sizeof(v)); }

}  // namespace

void serialize_batch(const ForwardBatch& batch, std::vector<uint8_t>& out) {
  out.clear();
  put_u32(out, kBatchMessage);
  for_each_array(batch, [&](const std::vector<int32_t>& a) {
    put_u32(out, static_cast<uint32_t>(a.size()));
    put(out, a.data(), a.size() * sizeof(int32_t));
  });
}

Status deserialize_batch(std::span<const uint8_t> bytes, ForwardBatch& batch) {
  size_t at = 0;
  const auto take_u32 = [&](uint32_t* v) {
    if (bytes.size() - at < sizeof(*v)) return false;
    std::memcpy(v, bytes.data() + at, sizeof(*v));
    at += sizeof(*v);
    return true;
  };
  uint32_t kind = 0;
  if (!take_u32(&kind) || kind != kBatchMessage) return Status(StatusCode::kFormatError, "not a batch message");
  bool ok = true;
  for_each_array(batch, [&](std::vector<int32_t>& a) {
    uint32_t n = 0;
    if (!ok || !take_u32(&n) || (bytes.size() - at) / sizeof(int32_t) < n) {
      ok = false;
      return;
    }
    a.resize(n);
    std::memcpy(a.data(), bytes.data() + at, n * sizeof(int32_t));
    at += n * sizeof(int32_t);
  });
  if (!ok || at != bytes.size()) return Status(StatusCode::kFormatError, "a truncated or oversized batch message");
  return Status::ok();
}

std::vector<uint8_t> stop_message() {
  std::vector<uint8_t> out;
  put_u32(out, kStopMessage);
  return out;
}

bool is_stop_message(std::span<const uint8_t> bytes) {
  uint32_t kind = 0;
  if (bytes.size() != sizeof(kind)) return false;
  std::memcpy(&kind, bytes.data(), sizeof(kind));
  return kind == kStopMessage;
}

}  // namespace photon

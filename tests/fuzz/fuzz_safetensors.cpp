// libFuzzer target: the safetensors header validator on arbitrary bytes (a hostile or truncated file).
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto header = photon::parse_safetensors_header(std::span<const unsigned char>(data, size), "fuzz.safetensors");
  if (header.is_ok()) {
    for (const auto& e : header->entries) {
      // Every accepted range must lie inside the input: touch its first and last byte.
      if (e.end > e.begin) {
        volatile unsigned char first = data[header->data_offset + e.begin];
        volatile unsigned char last = data[header->data_offset + e.end - 1];
        (void)first;
        (void)last;
      }
    }
  }
  return 0;
}

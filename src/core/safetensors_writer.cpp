#include "core/safetensors_writer.hpp"

#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace photon {

Status write_safetensors(const std::string& path, std::span<const SafetensorsTensor> tensors,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    uint64_t elements = 1;
    for (int64_t d : t.shape) elements *= static_cast<uint64_t>(d);
    if (elements * dtype_size(t.dtype) != t.bytes.size()) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("tensor '{}': {} bytes do not make its shape", t.name, t.bytes.size()));
    }
    if (!names.insert(t.name).second) {
      return Status(StatusCode::kInvalidArgument, fmt::format("tensor '{}' is given twice", t.name));
    }
    header[t.name] = {{"dtype", dtype_safetensors_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t length = text.size();
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(length >> (8 * i));
  out.write(reinterpret_cast<const char*>(prefix), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const SafetensorsTensor& t : tensors) {
    out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  }
  out.close();
  if (!out) return Status(StatusCode::kIoError, fmt::format("cannot write '{}' (disk full or not writable?)", path));
  return Status::ok();
}

}  // namespace photon

// Reader for the safetensors format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then the raw bytes.
//
// Files are memory-mapped and validated fully before any tensor is handed out: the header is well-formed JSON,
// every dtype is known, shape x element size equals the byte range, every range lies inside the file and no two
// ranges overlap. A truncated or hostile file yields a kFormatError naming the file, never an out-of-bounds read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/mapped_file.hpp"
#include "core/tensor.hpp"

namespace photon {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  ///< byte offset of the first element, from the start of the data section
  uint64_t end = 0;    ///< one past the last byte
};

/// The validated header of one file.
struct SafetensorsHeader {
  uint64_t data_offset = 0;  ///< 8 + header length: where the data section starts in the file
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
};

/// Validates the header of a complete safetensors file held in `bytes`. `file_name` appears in error messages.
Result<SafetensorsHeader> parse_safetensors_header(std::span<const unsigned char> bytes, std::string_view file_name);

/// One mapped, validated safetensors file.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);

  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const SafetensorsEntry* find(std::string_view name) const;
  /// A read-only CPU view of an entry's bytes; the view keeps the mapping alive.
  Tensor tensor(const SafetensorsEntry& entry) const;
  const std::string& path() const { return file_->path(); }

 private:
  std::shared_ptr<MappedFile> file_;
  SafetensorsHeader header_;
  std::unordered_map<std::string, size_t> index_;
};

/// All the tensors of a checkpoint folder: `model.safetensors`, or the shards listed by
/// `model.safetensors.index.json`.
class SafetensorsCheckpoint {
 public:
  /// Opens the checkpoint in `dir`. Errors name the file at fault.
  static Result<SafetensorsCheckpoint> open(const std::string& dir);

  /// The tensor called `name`, or nullopt. The view keeps its file mapped.
  std::optional<Tensor> find(std::string_view name) const;
  /// The entry (dtype, shape) of `name`, or nullptr.
  const SafetensorsEntry* entry(std::string_view name) const;
  std::vector<std::string> names() const;
  /// Total bytes of all tensors.
  uint64_t total_bytes() const;

 private:
  std::vector<SafetensorsFile> files_;
  std::unordered_map<std::string, std::pair<size_t, size_t>> by_name_;  // name -> (file, entry)
};

}  // namespace photon

#include "core/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/logging.hpp"

namespace photon {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit

Status format_error(std::string_view file, std::string message) {
  return Status(StatusCode::kFormatError, fmt::format("{}: {}", file, message));
}

Result<SafetensorsEntry> parse_entry(const std::string& name, const json& v, std::string_view file) {
  if (!v.is_object()) return format_error(file, fmt::format("tensor '{}': header entry is not an object", name));
  SafetensorsEntry e;
  e.name = name;
  const auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) {
    return format_error(file, fmt::format("tensor '{}': missing string field 'dtype'", name));
  }
  const auto dtype = dtype_from_safetensors(dt->get_ref<const std::string&>());
  if (!dtype) {
    return format_error(file, fmt::format("tensor '{}': unknown dtype '{}' (supported: F32, F16, BF16, I8, I32, "
                                          "I64, F8_E4M3)",
                                          name, dt->get_ref<const std::string&>()));
  }
  e.dtype = *dtype;
  const auto shape = v.find("shape");
  if (shape == v.end() || !shape->is_array() || shape->size() > 8) {
    return format_error(file, fmt::format("tensor '{}': 'shape' must be an array of at most 8 integers", name));
  }
  uint64_t numel = 1;
  for (const json& d : *shape) {
    if (!d.is_number_unsigned()) {
      return format_error(file, fmt::format("tensor '{}': shape entries must be non-negative integers", name));
    }
    const auto dim = d.get<uint64_t>();
    if (dim > (uint64_t{1} << 62) || __builtin_mul_overflow(numel, dim, &numel)) {
      return format_error(file, fmt::format("tensor '{}': shape is too large", name));
    }
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  const auto offs = v.find("data_offsets");
  if (offs == v.end() || !offs->is_array() || offs->size() != 2 || !(*offs)[0].is_number_unsigned() ||
      !(*offs)[1].is_number_unsigned()) {
    return format_error(file, fmt::format("tensor '{}': 'data_offsets' must be [begin, end] integers", name));
  }
  e.begin = (*offs)[0].get<uint64_t>();
  e.end = (*offs)[1].get<uint64_t>();
  if (e.end < e.begin) {
    return format_error(file, fmt::format("tensor '{}': data_offsets end {} is before begin {}", name, e.end, e.begin));
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, dtype_size(e.dtype), &nbytes) || nbytes != e.end - e.begin) {
    return format_error(file, fmt::format("tensor '{}': shape and dtype give {} bytes but data_offsets cover {}", name,
                                          numel * dtype_size(e.dtype), e.end - e.begin));
  }
  return e;
}

}  // namespace

Result<SafetensorsHeader> parse_safetensors_header(std::span<const unsigned char> bytes, std::string_view file) {
  if (bytes.size() < 8) {
    return format_error(file, fmt::format("file is {} bytes, too short for a safetensors header; the file is "
                                          "truncated or not a safetensors file",
                                          bytes.size()));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[static_cast<size_t>(i)];
  if (header_len > kMaxHeaderBytes) {
    return format_error(file,
                        fmt::format("header length {} exceeds the 100 MiB limit; the file is corrupt", header_len));
  }
  if (header_len > bytes.size() - 8) {
    return format_error(file, fmt::format("header length {} runs past the end of the {}-byte file; the file is "
                                          "truncated",
                                          header_len, bytes.size()));
  }
  SafetensorsHeader header;
  header.data_offset = 8 + header_len;
  const auto* text = reinterpret_cast<const char*>(bytes.data() + 8);
  json root = json::parse(text, text + header_len, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return format_error(file, "header is not well-formed JSON");
  if (!root.is_object()) return format_error(file, "header is not a JSON object");

  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return format_error(file, "'__metadata__' is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) return format_error(file, fmt::format("metadata '{}' is not a string", m.key()));
        header.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    PHOTON_ASSIGN_OR_RETURN(SafetensorsEntry e, parse_entry(it.key(), *it, file));
    header.entries.push_back(std::move(e));
  }

  const uint64_t data_size = bytes.size() - header.data_offset;
  std::vector<const SafetensorsEntry*> sorted;
  for (const auto& e : header.entries) {
    if (e.end > data_size) {
      return format_error(file, fmt::format("tensor '{}': bytes [{}, {}) lie past the end of the data section ({} "
                                            "bytes); the file is truncated",
                                            e.name, e.begin, e.end, data_size));
    }
    sorted.push_back(&e);
  }
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->begin < sorted[i - 1]->end) {
      return format_error(
          file, fmt::format("tensors '{}' and '{}' overlap in the data section", sorted[i - 1]->name, sorted[i]->name));
    }
  }
  return header;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  PHOTON_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  PHOTON_ASSIGN_OR_RETURN(auto header, parse_safetensors_header({file->data(), file->size()}, path));
  SafetensorsFile f;
  f.file_ = std::move(file);
  f.header_ = std::move(header);
  for (size_t i = 0; i < f.header_.entries.size(); ++i) f.index_[f.header_.entries[i].name] = i;
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &header_.entries[it->second];
}

Tensor SafetensorsFile::tensor(const SafetensorsEntry& e) const {
  auto* p = const_cast<unsigned char*>(file_->data() + header_.data_offset + e.begin);
  std::vector<int64_t> shape = e.shape;
  if (shape.empty()) shape.push_back(1);  // scalars become one-element vectors
  // Tensors have at most kMaxDims dimensions; fold leading ones of higher-rank entries.
  while (shape.size() > static_cast<size_t>(Tensor::kMaxDims)) {
    shape[1] *= shape[0];
    shape.erase(shape.begin());
  }
  return Tensor::view(p, shape, e.dtype, Device::cpu(), file_);
}

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open(const std::string& dir) {
  namespace fs = std::filesystem;
  SafetensorsCheckpoint ckpt;
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";
  std::error_code ec;
  std::vector<std::string> shard_names;
  std::unordered_map<std::string, std::string> weight_map;
  if (fs::exists(index_path, ec)) {
    PHOTON_ASSIGN_OR_RETURN(std::string text, read_text_file(index_path.string()));
    json index = json::parse(text, nullptr, false);
    if (index.is_discarded() || !index.is_object()) {
      return format_error(index_path.string(), "not a well-formed JSON object");
    }
    const auto wm = index.find("weight_map");
    if (wm == index.end() || !wm->is_object()) {
      return format_error(index_path.string(), "missing object field 'weight_map'");
    }
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it->is_string())
        return format_error(index_path.string(), fmt::format("weight_map['{}'] is not a string", it.key()));
      const std::string shard = it->get<std::string>();
      if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos) {
        return format_error(index_path.string(), fmt::format("shard name '{}' must be a plain file name", shard));
      }
      weight_map[it.key()] = shard;
      if (std::find(shard_names.begin(), shard_names.end(), shard) == shard_names.end()) shard_names.push_back(shard);
    }
  } else if (fs::exists(single_path, ec)) {
    shard_names.emplace_back("model.safetensors");
  } else {
    return Status(StatusCode::kNotFound,
                  fmt::format("no model.safetensors or model.safetensors.index.json in '{}'; point --model at a "
                              "Hugging Face checkpoint folder, or use --load-format dummy",
                              dir));
  }
  for (const auto& shard : shard_names) {
    PHOTON_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open((fs::path(dir) / shard).string()));
    ckpt.files_.push_back(std::move(f));
  }
  for (size_t i = 0; i < ckpt.files_.size(); ++i) {
    const auto& entries = ckpt.files_[i].entries();
    for (size_t j = 0; j < entries.size(); ++j) {
      const SafetensorsEntry& e = entries[j];
      if (!weight_map.empty()) {
        const auto it = weight_map.find(e.name);
        if (it == weight_map.end() || it->second != shard_names[i]) continue;  // index names another shard
      }
      if (!ckpt.by_name_.emplace(e.name, std::make_pair(i, j)).second) {
        return format_error(ckpt.files_[i].path(), fmt::format("tensor '{}' appears in more than one shard", e.name));
      }
    }
  }
  for (const auto& [name, shard] : weight_map) {
    if (!ckpt.by_name_.contains(name)) {
      return format_error(index_path.string(), fmt::format("tensor '{}' is listed for '{}' but that shard does not "
                                                           "contain it",
                                                           name, shard));
    }
  }
  return ckpt;
}

std::optional<Tensor> SafetensorsCheckpoint::find(std::string_view name) const {
  const auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  const SafetensorsFile& f = files_[it->second.first];
  return f.tensor(f.entries()[it->second.second]);
}

const SafetensorsEntry* SafetensorsCheckpoint::entry(std::string_view name) const {
  const auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &files_[it->second.first].entries()[it->second.second];
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : by_name_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t SafetensorsCheckpoint::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [_, loc] : by_name_) {
    const SafetensorsEntry& e = files_[loc.first].entries()[loc.second];
    total += e.end - e.begin;
  }
  return total;
}

}  // namespace photon

// A read-only memory mapping of a whole file.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <photon/status.hpp>

namespace photon {

class MappedFile {
 public:
  /// Maps `path` read-only. Errors name the path and the OS reason.
  static Result<std::shared_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const unsigned char* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const unsigned char* data_;
  size_t size_;
};

/// Reads a whole (small) file into a string, e.g. config.json.
Result<std::string> read_text_file(const std::string& path);

}  // namespace photon

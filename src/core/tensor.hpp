// Tensor: shape, strides, dtype and device over a block of memory that it either owns (through a shared buffer)
// or merely views (the memory belongs to someone else, e.g. a memory-mapped checkpoint).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "core/device.hpp"
#include "core/dtype.hpp"

namespace photon {

/// Memory from an Allocator, returned to it when the last owner goes away.
class Buffer {
 public:
  static Result<std::shared_ptr<Buffer>> allocate(Allocator& allocator, size_t bytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Buffer(Allocator& allocator, void* data, size_t size) : allocator_(&allocator), data_(data), size_(size) {}
  Allocator* allocator_;
  void* data_;
  size_t size_;
};

class Tensor {
 public:
  static constexpr int kMaxDims = 5;
  using Shape = std::array<int64_t, kMaxDims>;

  Tensor() = default;

  /// A new contiguous tensor from `allocator` (contents uninitialised).
  static Result<Tensor> empty(std::initializer_list<int64_t> shape, DType dtype, Allocator& allocator);
  static Result<Tensor> empty(std::span<const int64_t> shape, DType dtype, Allocator& allocator);
  /// A contiguous view of memory owned elsewhere. `keep_alive`, when given, is held for the view's lifetime.
  static Tensor view(void* data, std::span<const int64_t> shape, DType dtype, Device device,
                     std::shared_ptr<const void> keep_alive = {});
  static Tensor view(void* data, std::initializer_list<int64_t> shape, DType dtype, Device device,
                     std::shared_ptr<const void> keep_alive = {});

  bool defined() const { return ndim_ > 0; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int ndim() const { return ndim_; }
  int64_t size(int dim) const { return shape_[static_cast<size_t>(dim < 0 ? dim + ndim_ : dim)]; }
  int64_t stride(int dim) const { return strides_[static_cast<size_t>(dim < 0 ? dim + ndim_ : dim)]; }
  std::span<const int64_t> shape() const { return {shape_.data(), static_cast<size_t>(ndim_)}; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_);
  }

  /// Same memory, new shape (contiguous tensors only; element counts must agree).
  Tensor reshape(std::initializer_list<int64_t> shape) const;
  /// Rows [begin, end) along dimension 0; shares memory.
  Tensor slice_rows(int64_t begin, int64_t end) const;

 private:
  void set_shape(std::span<const int64_t> shape);

  void* data_ = nullptr;
  Shape shape_{};
  Shape strides_{};
  int ndim_ = 0;
  DType dtype_ = DType::kF32;
  Device device_{};
  std::shared_ptr<const void> owner_;
};

}  // namespace photon

#include "core/tensor.hpp"

#include <cassert>

#include <fmt/format.h>

namespace photon {

Result<std::shared_ptr<Buffer>> Buffer::allocate(Allocator& allocator, size_t bytes) {
  PHOTON_ASSIGN_OR_RETURN(void* p, allocator.allocate(bytes));
  return std::shared_ptr<Buffer>(new Buffer(allocator, p, bytes));
}

Buffer::~Buffer() { allocator_->deallocate(data_, size_); }

Result<Tensor> Tensor::empty(std::initializer_list<int64_t> shape, DType dtype, Allocator& allocator) {
  return empty(std::span<const int64_t>(shape.begin(), shape.size()), dtype, allocator);
}

Result<Tensor> Tensor::empty(std::span<const int64_t> shape, DType dtype, Allocator& allocator) {
  if (shape.size() > kMaxDims || shape.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("tensors have 1 to {} dimensions, not {}", kMaxDims, shape.size()));
  }
  Tensor t;
  t.dtype_ = dtype;
  t.device_ = allocator.device();
  t.set_shape(shape);
  for (int64_t d : shape) {
    if (d < 0) return Status(StatusCode::kInvalidArgument, "tensor dimensions must not be negative");
  }
  PHOTON_ASSIGN_OR_RETURN(auto buffer, Buffer::allocate(allocator, t.nbytes()));
  t.data_ = buffer->data();
  t.owner_ = std::move(buffer);
  return t;
}

Tensor Tensor::view(void* data, std::span<const int64_t> shape, DType dtype, Device device,
                    std::shared_ptr<const void> keep_alive) {
  assert(shape.size() >= 1 && shape.size() <= kMaxDims);
  Tensor t;
  t.data_ = data;
  t.dtype_ = dtype;
  t.device_ = device;
  t.owner_ = std::move(keep_alive);
  t.set_shape(shape);
  return t;
}

Tensor Tensor::view(void* data, std::initializer_list<int64_t> shape, DType dtype, Device device,
                    std::shared_ptr<const void> keep_alive) {
  return view(data, std::span<const int64_t>(shape.begin(), shape.size()), dtype, device, std::move(keep_alive));
}

void Tensor::set_shape(std::span<const int64_t> shape) {
  ndim_ = static_cast<int>(shape.size());
  shape_ = {};
  strides_ = {};
  int64_t stride = 1;
  for (int i = ndim_ - 1; i >= 0; --i) {
    shape_[static_cast<size_t>(i)] = shape[static_cast<size_t>(i)];
    strides_[static_cast<size_t>(i)] = stride;
    stride *= shape[static_cast<size_t>(i)];
  }
}

int64_t Tensor::numel() const {
  if (ndim_ == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= shape_[static_cast<size_t>(i)];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t stride = 1;
  for (int i = ndim_ - 1; i >= 0; --i) {
    if (shape_[static_cast<size_t>(i)] != 1 && strides_[static_cast<size_t>(i)] != stride) return false;
    stride *= shape_[static_cast<size_t>(i)];
  }
  return true;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> shape) const {
  assert(is_contiguous());
  Tensor t = *this;
  t.set_shape(std::span<const int64_t>(shape.begin(), shape.size()));
  assert(t.numel() == numel());
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  assert(ndim_ >= 1 && begin >= 0 && begin <= end && end <= shape_[0]);
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = static_cast<char*>(data_) + static_cast<size_t>(begin * strides_[0]) * dtype_size(dtype_);
  return t;
}

}  // namespace photon

// Collective operations between the ranks of a tensor-parallel group. Each rank owns one Communicator, bound to its
// backend: operations are enqueued on that backend's stream in order with its kernels (on the GPU they are NCCL
// collectives and may be captured into CUDA graphs), and every rank must issue the same operations in the same
// order with the same shapes.
//
// Thread safety: a communicator is used by its rank's thread only. Errors are recorded and returned by take_error(),
// as the backend's operations do.
#pragma once

#include <photon/status.hpp>

#include <utility>

#include "core/backend.hpp"
#include "core/tensor.hpp"

namespace photon {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// x = the elementwise sum of every rank's x (same shape and dtype on every rank), in place.
  virtual void all_reduce_sum(Tensor& x) = 0;
  /// out (contiguous, size() times the elements of `in`) = every rank's `in` one after another, in rank order.
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  /// residual += the elementwise sum of every rank's x, then out = rms_norm(residual) * weight, on `backend` (this
  /// rank's): the all-reduce after a row-parallel projection with the residual add and norm that follow it, which a
  /// communicator may run as one step. Afterwards x holds either the sum or its own values. By default
  /// all_reduce_sum, then backend.add_rms_norm.
  virtual void all_reduce_add_rms_norm(Backend& backend, Tensor& x, Tensor& residual, const Tensor& weight, float eps,
                                       Tensor& out) {
    all_reduce_sum(x);
    backend.add_rms_norm(residual, x, weight, eps, out);
  }
  /// The first error since the last call; clears it.
  Status take_error() {
    Status s = std::move(error_);
    error_ = Status::ok();
    return s;
  }

 protected:
  /// Keeps the first error for take_error(); returns whether `s` is ok.
  bool record(Status s) {
    if (s.is_ok()) return true;
    if (error_.is_ok()) error_ = std::move(s);
    return false;
  }

 private:
  Status error_;
};

}  // namespace photon

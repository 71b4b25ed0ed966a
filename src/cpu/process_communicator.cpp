#include "cpu/process_communicator.hpp"

#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace photon {
namespace {

class ProcessCommunicator final : public Communicator {
 public:
  explicit ProcessCommunicator(ProcessGroup& group) : group_(group) {}

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }

  void all_reduce_sum(Tensor& x) override {
    if (!check_f32(x, "all_reduce_sum")) return;
    const auto* mine = static_cast<const uint8_t*>(x.raw());
    if (!record(group_.gather({mine, x.nbytes()}, &parts_))) return;
    if (rank() == 0) {
      result_.assign(x.nbytes(), 0);
      auto* sum = reinterpret_cast<float*>(result_.data());
      const int64_t n = x.numel();
      for (const auto& part : parts_) {
        if (part.size() != x.nbytes()) {
          record(Status(StatusCode::kInternal, "all_reduce_sum: the ranks' tensors differ in size"));
          return;
        }
        const auto* p = reinterpret_cast<const float*>(part.data());
        for (int64_t i = 0; i < n; ++i) sum[i] += p[i];
      }
    }
    if (!record(group_.broadcast(result_))) return;
    if (result_.size() != x.nbytes()) {
      record(Status(StatusCode::kInternal, "all_reduce_sum: rank 0 sent a result of another size"));
      return;
    }
    std::memcpy(x.raw(), result_.data(), x.nbytes());
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    if (!check_f32(in, "all_gather")) return;
    if (out.numel() != in.numel() * size()) {
      record(Status(StatusCode::kInternal, "all_gather: the output must hold size() inputs"));
      return;
    }
    if (!record(group_.gather({static_cast<const uint8_t*>(in.raw()), in.nbytes()}, &parts_))) return;
    if (rank() == 0) {
      result_.clear();
      for (const auto& part : parts_) result_.insert(result_.end(), part.begin(), part.end());
    }
    if (!record(group_.broadcast(result_))) return;
    if (result_.size() != out.nbytes()) {
      record(Status(StatusCode::kInternal, "all_gather: the gathered size does not match the output"));
      return;
    }
    std::memcpy(out.raw(), result_.data(), out.nbytes());
  }

 private:
  bool check_f32(const Tensor& t, const char* op) {
    if (t.dtype() == DType::kF32 && t.is_contiguous()) return true;
    return record(
        Status(StatusCode::kUnsupported, fmt::format("{} between CPU processes takes contiguous f32 tensors", op)));
  }
  ProcessGroup& group_;
  std::vector<std::vector<uint8_t>> parts_;
  std::vector<uint8_t> result_;
};

}  // namespace

std::unique_ptr<Communicator> make_process_communicator(ProcessGroup& group) {
  return std::make_unique<ProcessCommunicator>(group);
}

}  // namespace photon

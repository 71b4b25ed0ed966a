#include "cpu/thread_communicator.hpp"

#include <barrier>
#include <cstring>

#include <fmt/format.h>

namespace photon {
namespace {

// What the ranks of one group share: a barrier and the buffer each rank posts for the current collective.
struct Group {
  explicit Group(int n) : barrier(n), posted(static_cast<size_t>(n)) {}
  std::barrier<> barrier;
  std::vector<const void*> posted;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_->posted.size()); }

  void all_reduce_sum(Tensor& x) override {
    if (!check_f32(x, "all_reduce_sum")) return;
    Group& g = *group_;
    g.posted[static_cast<size_t>(rank_)] = x.raw();
    g.barrier.arrive_and_wait();
    // Rank r sums, and writes back to every rank, the r-th slice of the elements: slices are disjoint, so no rank
    // reads what another is writing, and every rank ends with the same bits.
    const int64_t n = x.numel();
    const int64_t begin = n * rank_ / size(), end = n * (rank_ + 1) / size();
    for (int64_t i = begin; i < end; ++i) {
      float sum = 0.0f;
      for (const void* p : g.posted) sum += static_cast<const float*>(p)[i];
      for (const void* p : g.posted) const_cast<float*>(static_cast<const float*>(p))[i] = sum;
    }
    g.barrier.arrive_and_wait();
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    if (!check_f32(in, "all_gather")) return;
    if (out.numel() != in.numel() * size()) {
      record(Status(StatusCode::kInternal, "all_gather: the output must hold size() inputs"));
      return;
    }
    Group& g = *group_;
    g.posted[static_cast<size_t>(rank_)] = in.raw();
    g.barrier.arrive_and_wait();
    const size_t bytes = in.nbytes();
    for (size_t r = 0; r < g.posted.size(); ++r)
      std::memcpy(static_cast<char*>(out.raw()) + r * bytes, g.posted[r], bytes);
    g.barrier.arrive_and_wait();
  }

 private:
  bool check_f32(const Tensor& t, const char* op) {
    if (t.dtype() == DType::kF32 && t.is_contiguous()) return true;
    record(Status(StatusCode::kUnsupported, fmt::format("{} between CPU ranks takes contiguous f32 tensors", op)));
    return false;
  }

  std::shared_ptr<Group> group_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int size) {
  auto group = std::make_shared<Group>(size);
  std::vector<std::unique_ptr<Communicator>> out;
  out.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<ThreadCommunicator>(group, r));
  return out;
}

}  // namespace photon

// The ranks of a tensor-parallel group in one process, other than rank 0, each on a thread of its own: the caller
// (rank 0's thread) hands out a step, runs rank 0's forward itself, then waits for the others. Their collectives
// meet on the devices.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "engine/model_rank.hpp"

namespace photon {

class RankThreads {
 public:
  /// Starts a thread for each of `ranks` (not owned: they outlive this object), which run forward over `batch` (not
  /// owned) at each start(). `first_rank` is the group rank of ranks[0], for error messages.
  RankThreads(std::span<ModelRank> ranks, const ForwardBatch& batch, int first_rank);
  /// Stops and joins the threads (after any step handed out has finished).
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  /// Every thread runs one forward over the batch. Call wait() before the next start() or a change to the batch.
  void start();
  /// Waits until every thread has finished the step; returns the first error of any of them.
  Status wait();

 private:
  void run(size_t index);

  std::span<ModelRank> ranks_;
  const ForwardBatch& batch_;
  int first_rank_;
  // `generation` counts steps handed out; each thread runs one forward per increment and counts itself into
  // `finished`.
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> finished_{0};
  bool stopping_ = false;
  std::vector<Status> status_;
};

}  // namespace photon

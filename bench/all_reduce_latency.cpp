// Time per all-reduce between the GPUs of this process, as tensor-parallel decode issues them: each rank captures
// 100 back-to-back all-reduces of one message into a CUDA graph and replays it; both paths are measured (the one-shot
// peer all-reduce and NCCL). Prints one JSON line per (path, bytes): {"path", "gpus", "bytes", "us"}.
// Usage: photon_all_reduce_latency [BYTES ...]   (default: 8192 32768 131072 1048576; needs >= 2 GPUs)
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/tensor.hpp"
#include "cuda/cuda_allocator.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/nccl_communicator.hpp"

using namespace photon;

namespace {

constexpr int kCallsPerGraph = 100;
constexpr int kReplays = 20;

[[noreturn]] void fail(const Status& s) {
  std::fprintf(stderr, "%s\n", s.to_string().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  if (sizes.empty()) sizes = {8192, 32768, 131072, 1048576};
  const int gpus = cuda::device_count();
  if (gpus < 2) {
    std::fprintf(stderr, "all-reduce needs at least 2 GPUs (%d visible)\n", gpus);
    return 1;
  }
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<Backend*> raw;
  for (int r = 0; r < gpus; ++r) {
    auto b = make_cuda_backend(r);
    if (!b) fail(b.status());
    backends.push_back(std::move(*b));
    raw.push_back(backends.back().get());
  }
  for (const char* path : {"peer", "nccl"}) {
    auto comms = make_nccl_communicators(raw, /*peer_all_reduce=*/path[0] == 'p');
    if (!comms) fail(comms.status());
    for (const size_t bytes : sizes) {
      std::vector<double> seconds(static_cast<size_t>(gpus));
      std::barrier sync(gpus);
      std::vector<std::thread> threads;
      for (int r = 0; r < gpus; ++r) {
        threads.emplace_back([&, r] {
          const auto i = static_cast<size_t>(r);
          Backend& b = *backends[i];
          if (Status s = b.make_current(); !s.is_ok()) fail(s);
          auto x = Tensor::empty({static_cast<int64_t>(bytes / 2)}, DType::kBF16, b.allocator());
          if (!x) fail(x.status());
          std::vector<uint8_t> zeros(bytes, 0);
          b.copy_to_device(zeros.data(), *x, bytes);
          (*comms)[i]->all_reduce_sum(*x);  // NCCL connects on its first call, which cannot happen in a capture
          b.synchronize();
          if (Status s = b.begin_capture(); !s.is_ok()) fail(s);
          for (int c = 0; c < kCallsPerGraph; ++c) (*comms)[i]->all_reduce_sum(*x);
          auto graph = b.end_capture();
          if (!graph) fail(graph.status());
          if (Status s = b.launch_graph(*graph); !s.is_ok()) fail(s);  // warm-up
          b.synchronize();
          sync.arrive_and_wait();
          const auto start = std::chrono::steady_clock::now();
          for (int k = 0; k < kReplays; ++k) {
            if (Status s = b.launch_graph(*graph); !s.is_ok()) fail(s);
          }
          b.synchronize();
          seconds[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (Status s = (*comms)[i]->take_error(); !s.is_ok()) fail(s);
          if (Status s = b.take_error(); !s.is_ok()) fail(s);
          b.destroy_graph(*graph);
        });
      }
      for (auto& t : threads) t.join();
      std::printf("{\"path\": \"%s\", \"gpus\": %d, \"bytes\": %zu, \"us\": %.2f}\n", path, gpus, bytes,
                  seconds[0] * 1e6 / (kReplays * kCallsPerGraph));
      std::fflush(stdout);
    }
  }
  return 0;
}

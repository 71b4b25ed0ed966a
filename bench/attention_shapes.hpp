// Shared by the attention kernel benchmarks: the attention layers of the models photon bench runs, the engine's cache
// block size, host-to-device uploads and the BATCHxLENGTH arguments of their command lines.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "graph_timing.hpp"

namespace photon::bench {

/// One model's attention layer: query heads, KV heads, head dimension.
struct AttentionShape {
  const char* model;
  int heads;
  int kv_heads;
  int head_dim;
};

inline constexpr AttentionShape kAttentionShapes[] = {
    {"llama-3.2-1b", 32, 8, 64},
    {"qwen3-0.6b", 16, 8, 128},
    {"llama-3.1-8b", 32, 8, 128},
    {"llama-3.1-70b", 64, 8, 128},
};
/// Tokens per cache block, the engine's default.
inline constexpr int kCacheBlockSize = 16;

/// A device copy of `host` (cudaMalloc'd; the caller frees it). Exits on a CUDA error.
template <typename T>
T* upload(const std::vector<T>& host) {
  T* device = nullptr;
  CHECK_CUDA(cudaMalloc(&device, host.size() * sizeof(T)));
  CHECK_CUDA(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return device;
}

/// The command line's AxB pairs of positive integers (`example` shows one in the error message), or `defaults` when
/// there are none. Exits with a message on anything else.
inline std::vector<std::pair<int, int>> parse_pairs(int argc, char** argv, const char* example,
                                                    std::vector<std::pair<int, int>> defaults) {
  std::vector<std::pair<int, int>> pairs;
  for (int i = 1; i < argc; ++i) {
    int a = 0, b = 0;
    char tail = 0;
    if (std::sscanf(argv[i], "%dx%d%c", &a, &b, &tail) != 2 || a < 1 || b < 1) {
      std::fprintf(stderr, "'%s': expected %s\n", argv[i], example);
      std::exit(1);
    }
    pairs.emplace_back(a, b);
  }
  return pairs.empty() ? defaults : pairs;
}

}  // namespace photon::bench

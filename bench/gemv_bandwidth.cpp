// Streaming speed of the decode matmul kernels (cuda::gemv, cuda::gemv_swiglu, their int8 forms with scales per
// group of 128, and the tensor-core int8 kernel cuda::w8a16_mma) at the projection shapes of the models photon bench
// runs, against the read bandwidth a kernel could reach. Each shape cycles through enough
// weight copies (>= 512 MiB) that no launch finds its weights in the L2 cache; launches run back to back in a CUDA
// graph, as decode steps replay them. Prints one JSON line per shape:
// {"model", "matrix", "weights", "kernel", "m", "rows", "k", "us", "gb_per_s"} where bytes are the weight bytes read
// (int8: values and scales), weights is "bf16" or "int8" and kernel "gemv" (SIMT) or "mma" (tensor cores, int8).
// Usage: photon_gemv_bandwidth [M ...] [--only TEXT]   (activation rows, 1..16, default 1; the SIMT kernels stop at
// 8, the tensor-core kernel starts at 2; --only keeps the rows whose "model matrix weights kernel", e.g. "llama-3.2-1b
// o int8 mma", contains TEXT)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/kernels.hpp"
#include "graph_timing.hpp"

namespace {

struct Shape {
  const char* model;
  const char* matrix;
  int rows;  // output columns (for swiglu: the intermediate size; the matrix has twice as many rows)
  int k;
  bool swiglu;
};

constexpr Shape kShapes[] = {
    {"llama-3.2-1b", "qkv", 3072, 2048, false},       {"llama-3.2-1b", "o", 2048, 2048, false},
    {"llama-3.2-1b", "gate_up", 8192, 2048, true},    {"llama-3.2-1b", "down", 2048, 8192, false},
    {"llama-3.2-1b", "lm_head", 128256, 2048, false}, {"qwen3-0.6b", "qkv", 4096, 1024, false},
    {"qwen3-0.6b", "o", 1024, 2048, false},           {"qwen3-0.6b", "gate_up", 3072, 1024, true},
    {"qwen3-0.6b", "down", 1024, 3072, false},        {"llama-3.1-8b", "qkv", 6144, 4096, false},
    {"llama-3.1-8b", "o", 4096, 4096, false},         {"llama-3.1-8b", "gate_up", 14336, 4096, true},
    {"llama-3.1-8b", "down", 4096, 14336, false},
};

}  // namespace

int main(int argc, char** argv) {
  const photon::bench::RowsArgs args = photon::bench::parse_rows_args(argc, argv, {1});
  const std::vector<int>& ms = args.rows;
  const std::string& only = args.only;
  for (int m : ms) {
    if (m < 1 || m > 16) {
      std::fprintf(stderr, "M = %d is outside the kernels' range (1..16)\n", m);
      return 1;
    }
  }
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  void* x = nullptr;
  void* out = nullptr;
  CHECK_CUDA(cudaMalloc(&x, size_t{16} * 16384 * 2));
  CHECK_CUDA(cudaMalloc(&out, size_t{16} * 131072 * 4));
  CHECK_CUDA(cudaMemset(x, 0x3c, size_t{16} * 16384 * 2));
  constexpr int kGroup = 128;
  for (int m : ms) {
    for (const int variant : {0, 1, 2})  // bf16 GEMV, int8 GEMV, int8 tensor-core kernel
      for (const Shape& s : kShapes) {
        const bool int8 = variant > 0, mma = variant == 2;
        if (mma ? !photon::cuda::w8a16_mma_supported(m, s.k, s.k, kGroup) : !photon::cuda::gemv_supported(m, s.k, s.k))
          continue;
        const std::string label =
            std::string(s.model) + " " + s.matrix + (int8 ? " int8" : " bf16") + (mma ? " mma" : " gemv");
        if (label.find(only) == std::string::npos) continue;
        const size_t rows = size_t{1} * s.rows * (s.swiglu ? 2 : 1);
        const int groups = (s.k + kGroup - 1) / kGroup;
        const size_t value_bytes = rows * s.k * (int8 ? 1 : 2);
        const size_t bytes = value_bytes + (int8 ? rows * groups * 4 : 0);
        const int copies = static_cast<int>((size_t{512} << 20) / bytes + 1);
        std::vector<void*> weights(static_cast<size_t>(copies));
        for (auto& w : weights) {
          CHECK_CUDA(cudaMalloc(&w, bytes));
          CHECK_CUDA(cudaMemset(w, 0x3c, bytes));
        }
        constexpr int kLaunches = 64;
        auto enqueue = [&] {
          for (int i = 0; i < kLaunches; ++i) {
            const auto* w = static_cast<const uint16_t*>(weights[static_cast<size_t>(i % copies)]);
            const auto* xs = static_cast<const uint16_t*>(x);
            const auto* base = static_cast<const char*>(weights[static_cast<size_t>(i % copies)]);
            const photon::cuda::Int8Weights q{reinterpret_cast<const int8_t*>(base),
                                              reinterpret_cast<const float*>(base + value_bytes), groups, kGroup};
            if (mma && s.swiglu) {
              photon::cuda::w8a16_mma_swiglu(xs, m, s.k, q, s.rows, s.k, static_cast<uint16_t*>(out), stream);
            } else if (mma) {
              photon::cuda::w8a16_mma(xs, m, s.k, q, s.rows, s.k, out, false, stream);
            } else if (int8 && s.swiglu) {
              photon::cuda::gemv_swiglu_int8(xs, m, s.k, q, s.rows, s.k, static_cast<uint16_t*>(out), stream);
            } else if (int8) {
              photon::cuda::gemv_int8(xs, m, s.k, q, s.rows, s.k, out, false, stream);
            } else if (s.swiglu) {
              photon::cuda::gemv_swiglu(xs, m, s.k, w, s.rows, s.k, static_cast<uint16_t*>(out), stream);
            } else {
              photon::cuda::gemv(xs, m, s.k, w, s.rows, s.k, out, false, stream);
            }
          }
        };
        const double us = photon::bench::graph_us_per_launch(stream, kLaunches, enqueue);
        std::printf(
            "{\"model\": \"%s\", \"matrix\": \"%s\", \"weights\": \"%s\", \"kernel\": \"%s\", \"m\": %d, "
            "\"rows\": %d, \"k\": %d, \"us\": %.2f, \"gb_per_s\": %.1f}\n",
            s.model, s.matrix, int8 ? "int8" : "bf16", mma ? "mma" : "gemv", m, s.rows * (s.swiglu ? 2 : 1), s.k, us,
            static_cast<double>(bytes) / us / 1e3);
        for (void* w : weights) CHECK_CUDA(cudaFree(w));
      }
  }
  return 0;
}

// The int8 matmul paths for batches beyond the decode kernels (17 rows and up), at the projection shapes of the
// models photon bench runs, against bf16 weights: cuBLASLt on bf16 weights ("bf16"), int8 weights widened to bf16
// then cuBLASLt ("widen"), and the tensor-core W8A16 GEMM reading int8 directly (cuda::w8a16_gemm, "w8a16").
// Weights cycle through enough copies (>= 512 MiB) that no launch finds them in the L2 cache; launches run back to
// back in a CUDA graph. Prints one JSON line per shape and path:
// {"model", "matrix", "path", "m", "n", "k", "us", "tflops"}.
// Usage: photon_int8_gemm [M ...]   (activation rows; default 32 64 128 256 512 1024 2048)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/gemm.hpp"
#include "cuda/kernels.hpp"

namespace {

struct Shape {
  const char* model;
  const char* matrix;
  int n;
  int k;
};

constexpr Shape kShapes[] = {
    {"llama-3.2-1b", "qkv", 3072, 2048},     {"llama-3.2-1b", "o", 2048, 2048},
    {"llama-3.2-1b", "gate_up", 16384, 2048}, {"llama-3.2-1b", "down", 2048, 8192},
    {"llama-3.1-8b", "qkv", 6144, 4096},     {"llama-3.1-8b", "gate_up", 28672, 4096},
    {"llama-3.1-8b", "down", 4096, 14336},
};
constexpr int kGroup = 128;

#define CHECK_CUDA(call)                                                 \
  do {                                                                   \
    const cudaError_t err_ = (call);                                     \
    if (err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ms;
  for (int i = 1; i < argc; ++i) ms.push_back(std::atoi(argv[i]));
  if (ms.empty()) ms = {32, 64, 128, 256, 512, 1024, 2048};
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  void* workspace = nullptr;
  CHECK_CUDA(cudaMalloc(&workspace, photon::cuda::Gemm::kWorkspaceBytes));
  photon::cuda::Gemm gemm;
  if (!gemm.init(workspace).is_ok()) {
    std::fprintf(stderr, "cuBLASLt init failed\n");
    return 1;
  }
  for (const Shape& s : kShapes) {
    const size_t elems = static_cast<size_t>(s.n) * s.k, groups = static_cast<size_t>(s.n) * (s.k / kGroup);
    const int copies = static_cast<int>((size_t{512} << 20) / elems + 1);
    std::vector<void*> bf16_w(copies), int8_w(copies), scales(copies);
    for (int c = 0; c < copies; ++c) {
      CHECK_CUDA(cudaMalloc(&bf16_w[c], elems * 2));
      CHECK_CUDA(cudaMemset(bf16_w[c], 0x3c, elems * 2));
      CHECK_CUDA(cudaMalloc(&int8_w[c], elems));
      CHECK_CUDA(cudaMemset(int8_w[c], 0x11, elems));
      CHECK_CUDA(cudaMalloc(&scales[c], groups * 4));
      CHECK_CUDA(cudaMemset(scales[c], 0x3c, groups * 4));
    }
    void* wide = nullptr;
    CHECK_CUDA(cudaMalloc(&wide, elems * 2));
    for (const int m : ms) {
      void *x = nullptr, *out = nullptr;
      CHECK_CUDA(cudaMalloc(&x, static_cast<size_t>(m) * s.k * 2));
      CHECK_CUDA(cudaMemset(x, 0x3c, static_cast<size_t>(m) * s.k * 2));
      CHECK_CUDA(cudaMalloc(&out, static_cast<size_t>(m) * s.n * 2));
      for (const char* path : {"bf16", "widen", "w8a16"}) {
        const std::string p = path;
        constexpr int kLaunches = 16;
        auto enqueue = [&] {
          for (int i = 0; i < kLaunches; ++i) {
            const int c = i % copies;
            const photon::cuda::Int8Weights q{static_cast<const int8_t*>(int8_w[c]),
                                              static_cast<const float*>(scales[c]), s.k / kGroup, kGroup};
            if (p == "bf16") {
              (void)gemm.run(x, m, s.k, s.k, bf16_w[c], s.n, out, false, stream);
            } else if (p == "widen") {
              photon::cuda::dequantize_int8(q, s.n, s.k, static_cast<uint16_t*>(wide), stream);
              (void)gemm.run(x, m, s.k, s.k, wide, s.n, out, false, stream);
            } else {
              photon::cuda::w8a16_gemm(static_cast<const uint16_t*>(x), m, s.k, q, s.n, s.k, out, false, stream);
            }
          }
        };
        enqueue();  // plans cuBLASLt's algorithms outside the capture
        CHECK_CUDA(cudaStreamSynchronize(stream));
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        enqueue();
        CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
        CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
        CHECK_CUDA(cudaGraphLaunch(exec, stream));
        cudaEvent_t start, stop;
        CHECK_CUDA(cudaEventCreate(&start));
        CHECK_CUDA(cudaEventCreate(&stop));
        constexpr int kReplays = 5;
        CHECK_CUDA(cudaEventRecord(start, stream));
        for (int r = 0; r < kReplays; ++r) CHECK_CUDA(cudaGraphLaunch(exec, stream));
        CHECK_CUDA(cudaEventRecord(stop, stream));
        CHECK_CUDA(cudaEventSynchronize(stop));
        float ms_total = 0;
        CHECK_CUDA(cudaEventElapsedTime(&ms_total, start, stop));
        const double us = 1e3 * ms_total / (kReplays * kLaunches);
        std::printf(
            "{\"model\": \"%s\", \"matrix\": \"%s\", \"path\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"us\": %.2f, "
            "\"tflops\": %.1f}\n",
            s.model, s.matrix, path, m, s.n, s.k, us, 2.0 * m * s.n * s.k / us / 1e6);
        std::fflush(stdout);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
      }
      CHECK_CUDA(cudaFree(x));
      CHECK_CUDA(cudaFree(out));
    }
    for (int c = 0; c < copies; ++c) {
      CHECK_CUDA(cudaFree(bf16_w[c]));
      CHECK_CUDA(cudaFree(int8_w[c]));
      CHECK_CUDA(cudaFree(scales[c]));
    }
    CHECK_CUDA(cudaFree(wide));
  }
  return 0;
}

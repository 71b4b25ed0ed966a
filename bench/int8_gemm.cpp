// The int8 matmul paths for batches beyond the decode kernels (17 rows and up), at the projection shapes of the
// models photon bench runs, against bf16 weights: cuBLASLt on bf16 weights ("bf16"), int8 weights widened to bf16
// then cuBLASLt ("widen"), and the Hopper W8A16 GEMM reading int8 directly ("w8a16": its own plan; "w8a16/T/S":
// tiles of T tokens, K split over S blocks). Weights cycle through enough copies (>= 512 MiB) that no launch finds them
// in the L2 cache; launches run back to back in a CUDA graph. Before timing, each w8a16 form's output on random weights
// and activations is compared with the widening path's ("max_rel": largest |difference| over the largest |output|).
// Prints one JSON line per shape and path: {"model", "matrix", "path", "m", "n", "k", "us", "tflops", "max_rel"}.
// Usage: photon_int8_gemm [M ...]   (activation rows; default 32 64 128 256 512 1024 4096)
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
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
    {"llama-3.2-1b", "qkv", 3072, 2048},      {"llama-3.2-1b", "o", 2048, 2048},
    {"llama-3.2-1b", "gate_up", 16384, 2048}, {"llama-3.2-1b", "down", 2048, 8192},
    {"qwen3-0.6b", "qkv", 4096, 1024},        {"qwen3-0.6b", "gate_up", 6144, 1024},
    {"qwen3-0.6b", "down", 1024, 3072},       {"llama-3.1-8b", "qkv", 6144, 4096},
    {"llama-3.1-8b", "gate_up", 28672, 4096}, {"llama-3.1-8b", "down", 4096, 14336},
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

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<float> read_bf16(const void* d, size_t n) {
  std::vector<uint16_t> bits(n);
  CHECK_CUDA(cudaMemcpy(bits.data(), d, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = from_bf16(bits[i]);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ms;
  for (int i = 1; i < argc; ++i) ms.push_back(std::atoi(argv[i]));
  if (ms.empty()) ms = {32, 64, 128, 256, 512, 1024, 4096};
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  void* workspace = nullptr;
  CHECK_CUDA(cudaMalloc(&workspace, photon::cuda::Gemm::kWorkspaceBytes));
  photon::cuda::Gemm gemm;
  if (!gemm.init(workspace).is_ok()) {
    std::fprintf(stderr, "cuBLASLt init failed\n");
    return 1;
  }
  std::mt19937 rng(7);
  for (const Shape& s : kShapes) {
    const size_t elems = static_cast<size_t>(s.n) * s.k, groups = static_cast<size_t>(s.n) * (s.k / kGroup);
    const int copies = static_cast<int>((size_t{512} << 20) / elems + 1);
    std::vector<void*> bf16_w(copies), int8_w(copies), scales(copies);
    std::vector<int8_t> host_q(elems);
    std::vector<float> host_scales(groups);
    std::uniform_int_distribution<int> qd(-127, 127);
    std::uniform_real_distribution<float> sd(0.5e-3f, 2e-3f);
    for (auto& q : host_q) q = static_cast<int8_t>(qd(rng));
    for (auto& v : host_scales) v = sd(rng);
    for (int c = 0; c < copies; ++c) {
      CHECK_CUDA(cudaMalloc(&bf16_w[c], elems * 2));
      CHECK_CUDA(cudaMemset(bf16_w[c], 0x3c, elems * 2));
      CHECK_CUDA(cudaMalloc(&int8_w[c], elems));
      CHECK_CUDA(cudaMemcpy(int8_w[c], host_q.data(), elems, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMalloc(&scales[c], groups * 4));
      CHECK_CUDA(cudaMemcpy(scales[c], host_scales.data(), groups * 4, cudaMemcpyHostToDevice));
    }
    void* wide = nullptr;
    CHECK_CUDA(cudaMalloc(&wide, elems * 2));
    for (const int m : ms) {
      void *x = nullptr, *out = nullptr, *ref = nullptr;
      const size_t x_elems = static_cast<size_t>(m) * s.k, out_elems = static_cast<size_t>(m) * s.n;
      std::vector<uint16_t> host_x(x_elems);
      std::normal_distribution<float> xd(0.0f, 1.0f);
      for (auto& v : host_x) v = to_bf16(xd(rng));
      CHECK_CUDA(cudaMalloc(&x, x_elems * 2));
      CHECK_CUDA(cudaMemcpy(x, host_x.data(), x_elems * 2, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMalloc(&out, out_elems * 2));
      CHECK_CUDA(cudaMalloc(&ref, out_elems * 2));
      const photon::cuda::Int8Weights q0{static_cast<const int8_t*>(int8_w[0]), static_cast<const float*>(scales[0]),
                                         s.k / kGroup, kGroup};
      photon::cuda::dequantize_int8(q0, s.n, s.k, static_cast<uint16_t*>(wide), stream);
      (void)gemm.run(x, m, s.k, s.k, wide, s.n, ref, false, stream);
      CHECK_CUDA(cudaStreamSynchronize(stream));
      const std::vector<float> expected = read_bf16(ref, out_elems);
      double ref_max = 0;
      for (float v : expected) ref_max = std::max(ref_max, static_cast<double>(std::fabs(v)));
      for (const char* path : {"bf16", "widen", "w8a16", "w8a16/64/1", "w8a16/128/1", "w8a16/256/1", "w8a16/64/4",
                               "w8a16/128/2", "w8a16/128/4", "w8a16/256/2", "w8a16/256/4", "w8a16/256/8"}) {
        const std::string p = path;
        photon::cuda::W8a16GemmPlan plan;
        if (p.rfind("w8a16/", 0) == 0) {
          plan.token_tile = std::atoi(path + 6);
          plan.splits = std::atoi(p.c_str() + p.rfind('/') + 1);
        }
        double max_rel = -1;
        if (p.rfind("w8a16", 0) == 0) {
          if (!photon::cuda::w8a16_gemm(static_cast<const uint16_t*>(x), m, s.k, q0, s.n, s.k, out, false, stream,
                                        plan)) {
            std::fprintf(stderr, "w8a16_gemm declined %s %s m=%d\n", s.model, s.matrix, m);
            continue;
          }
          CHECK_CUDA(cudaStreamSynchronize(stream));
          const std::vector<float> got = read_bf16(out, out_elems);
          double worst = 0;
          for (size_t i = 0; i < out_elems; ++i) {
            worst = std::max(worst, static_cast<double>(std::fabs(got[i] - expected[i])));
          }
          max_rel = worst / ref_max;
        }
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
              photon::cuda::w8a16_gemm(static_cast<const uint16_t*>(x), m, s.k, q, s.n, s.k, out, false, stream, plan);
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
            "\"tflops\": %.1f, \"max_rel\": %.2e}\n",
            s.model, s.matrix, path, m, s.n, s.k, us, 2.0 * m * s.n * s.k / us / 1e6, max_rel);
        std::fflush(stdout);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
      }
      CHECK_CUDA(cudaFree(x));
      CHECK_CUDA(cudaFree(out));
      CHECK_CUDA(cudaFree(ref));
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

// The int8 matmul paths for batches beyond the decode kernels (17 rows and up), at the projection shapes of the
// models photon bench runs, against bf16 weights: cuBLASLt on bf16 weights ("bf16"), int8 weights widened to bf16
// then cuBLASLt ("widen"), and the Hopper W8A16 GEMM reading int8 directly ("w8a16": its own plan; "w8a16/T/S":
// tiles of T tokens, K split over S blocks). Weights cycle through enough copies (>= 512 MiB) that no launch finds
// them in the L2 cache; launches run back to back in a CUDA graph. Before timing, each w8a16 form's output on random
// weights and activations is compared with the widening path's ("max_rel": largest |difference| over the largest
// |output|; -1 for the other paths). Prints one JSON line per shape and path:
// {"model", "matrix", "path", "m", "n", "k", "us", "tflops", "max_rel"}.
// Usage: photon_int8_gemm [M ...] [--only TEXT]   (default M: 32 64 128 256 512 1024 4096; --only filters "model
// matrix")
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
#include "graph_timing.hpp"
#include "projection_shapes.hpp"

namespace {

constexpr int kGroup = 128;
constexpr const char* kPaths[] = {"bf16",        "widen",       "w8a16",       "w8a16/64/1",  "w8a16/64/2",
                                  "w8a16/64/4",  "w8a16/64/8",  "w8a16/128/1", "w8a16/128/2", "w8a16/128/4",
                                  "w8a16/128/8", "w8a16/256/1", "w8a16/256/2", "w8a16/256/4", "w8a16/256/8"};

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

std::vector<float> read_bf16(const void* d, size_t n) {
  std::vector<uint16_t> bits(n);
  CHECK_CUDA(cudaMemcpy(bits.data(), d, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(bits[i]) << 16;
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

// The plan a "w8a16/T/S" path names; the default plan for "w8a16".
photon::cuda::W8a16GemmPlan plan_of(const std::string& path) {
  photon::cuda::W8a16GemmPlan plan;
  if (path.rfind("w8a16/", 0) == 0) {
    plan.token_tile = std::atoi(path.c_str() + 6);
    plan.splits = std::atoi(path.c_str() + path.rfind('/') + 1);
  }
  return plan;
}

}  // namespace

int main(int argc, char** argv) {
  const photon::bench::RowsArgs args = photon::bench::parse_rows_args(argc, argv, {32, 64, 128, 256, 512, 1024, 4096});
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  void* workspace = nullptr;
  CHECK_CUDA(cudaMalloc(&workspace, photon::cuda::Gemm::kWorkspaceBytes));
  photon::cuda::Gemm gemm;
  if (const photon::Status st = gemm.init(workspace); !st.is_ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  std::mt19937 rng(7);
  for (const photon::bench::ProjectionShape& s : photon::bench::kProjectionShapes) {
    const std::string label = std::string(s.model) + " " + s.matrix;
    if (label.find(args.only) == std::string::npos) continue;
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
    const auto int8_weights = [&](int c) {
      return photon::cuda::Int8Weights{static_cast<const int8_t*>(int8_w[c]), static_cast<const float*>(scales[c]),
                                       s.k / kGroup, kGroup};
    };
    void* wide = nullptr;
    CHECK_CUDA(cudaMalloc(&wide, elems * 2));
    for (const int m : args.rows) {
      const size_t x_elems = static_cast<size_t>(m) * s.k, out_elems = static_cast<size_t>(m) * s.n;
      std::vector<uint16_t> host_x(x_elems);
      std::normal_distribution<float> xd(0.0f, 1.0f);
      for (auto& v : host_x) v = to_bf16(xd(rng));
      void *x = nullptr, *out = nullptr, *ref = nullptr;
      CHECK_CUDA(cudaMalloc(&x, x_elems * 2));
      CHECK_CUDA(cudaMemcpy(x, host_x.data(), x_elems * 2, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMalloc(&out, out_elems * 2));
      CHECK_CUDA(cudaMalloc(&ref, out_elems * 2));
      const auto* x16 = static_cast<const uint16_t*>(x);
      // The widening path's output on copy 0: the reference each w8a16 form is checked against.
      photon::cuda::dequantize_int8(int8_weights(0), s.n, s.k, static_cast<uint16_t*>(wide), stream);
      (void)gemm.run(x, m, s.k, s.k, wide, s.n, ref, false, stream);
      const std::vector<float> expected = read_bf16(ref, out_elems);
      double ref_max = 0;
      for (float v : expected) ref_max = std::max(ref_max, static_cast<double>(std::fabs(v)));
      for (const char* path : kPaths) {
        const std::string p = path;
        const bool w8a16 = p.rfind("w8a16", 0) == 0;
        const photon::cuda::W8a16GemmPlan plan = plan_of(p);
        double max_rel = -1;
        if (w8a16) {
          if (!photon::cuda::w8a16_gemm(x16, m, s.k, int8_weights(0), s.n, s.k, out, false, stream, plan)) {
            std::fprintf(stderr, "w8a16_gemm declined %s m=%d\n", label.c_str(), m);
            continue;
          }
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
            if (p == "bf16") {
              (void)gemm.run(x, m, s.k, s.k, bf16_w[c], s.n, out, false, stream);
            } else if (p == "widen") {
              photon::cuda::dequantize_int8(int8_weights(c), s.n, s.k, static_cast<uint16_t*>(wide), stream);
              (void)gemm.run(x, m, s.k, s.k, wide, s.n, out, false, stream);
            } else {
              photon::cuda::w8a16_gemm(x16, m, s.k, int8_weights(c), s.n, s.k, out, false, stream, plan);
            }
          }
        };
        enqueue();  // plans cuBLASLt's algorithms outside the capture
        CHECK_CUDA(cudaStreamSynchronize(stream));
        const double us = photon::bench::graph_us_per_launch(stream, kLaunches, enqueue);
        std::printf(
            "{\"model\": \"%s\", \"matrix\": \"%s\", \"path\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"us\": %.2f, "
            "\"tflops\": %.1f, \"max_rel\": %.2e}\n",
            s.model, s.matrix, path, m, s.n, s.k, us, 2.0 * m * s.n * s.k / us / 1e6, max_rel);
        std::fflush(stdout);
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

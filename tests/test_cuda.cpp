// CPU-vs-CUDA parity of every backend operation on fresh random inputs (odd sizes), and the CUDA engine against
// transformers' float32 reference. Skipped, with a message, where no GPU is visible.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>
#include <photon/engine.hpp>
#include <photon/quantize.hpp>

#include "core/mapped_file.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"
#include "cuda/cuda_allocator.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/gemm.hpp"
#include "cuda/kernels.hpp"
#include "cuda/w8a16_choices.hpp"
#include "engine/sampler.hpp"
#include "models/decoder.hpp"
#include "models/model_loader.hpp"
#include "models/presets.hpp"
#include "models/tensor_parallel.hpp"
#include "models/weights.hpp"
#include "reference.hpp"

using namespace photon;

namespace {

struct Backends {
  std::unique_ptr<Backend> cpu = make_cpu_backend(default_cpu_allocator());
  std::unique_ptr<Backend> gpu;
};

// Both backends, or a skip when there is no GPU.
#define REQUIRE_GPU(b)                                                            \
  Backends b;                                                                     \
  if (cuda::device_count() == 0) SKIP("no CUDA GPU visible: CUDA tests skipped"); \
  b.gpu = std::move(make_cuda_backend(0).value())

std::vector<float> random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = bf16_to_f32(f32_to_bf16(d(rng)));  // exactly representable in bf16
  return v;
}

Tensor cpu_tensor(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
  Tensor t = Tensor::empty(shape, DType::kF32, default_cpu_allocator()).value();
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

Tensor gpu_tensor(Backend& gpu, const std::vector<float>& v, std::initializer_list<int64_t> shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, gpu.allocator()).value();
  if (dtype == DType::kF32) {
    gpu.copy_to_device(v.data(), t, v.size() * 4);
  } else {
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = f32_to_bf16(v[i]);
    gpu.copy_to_device(bits.data(), t, bits.size() * 2);
  }
  return t;
}

template <typename T>
Tensor gpu_ints(Backend& gpu, const std::vector<T>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32, gpu.allocator()).value();
  gpu.copy_to_device(v.data(), t, v.size() * sizeof(T));
  return t;
}

std::vector<float> read_back(Backend& gpu, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kF32) {
    gpu.copy_to_host(t, out.data(), out.size() * 4);
  } else {
    std::vector<uint16_t> bits(out.size());
    gpu.copy_to_host(t, bits.data(), bits.size() * 2);
    for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_f32(bits[i]);
  }
  return out;
}

// Largest |a - b| / (atol + rtol |b|); infinity for a NaN or infinite difference (test::max_violation).
double violation(const std::vector<float>& a, const std::vector<float>& b, double atol, double rtol) {
  return photon::test::max_violation(a, std::vector<double>(b.begin(), b.end()), atol, rtol);
}

}  // namespace

// A cuBLASLt GEMM of the test's own (with its workspace), for comparing a kernel with cuBLASLt's product.
struct TestGemm {
  void* workspace = nullptr;
  cuda::Gemm gemm;  // destroyed before the workspace is freed
  TestGemm() {
    REQUIRE(cudaMalloc(&workspace, cuda::Gemm::kWorkspaceBytes) == cudaSuccess);
    REQUIRE(gemm.init(workspace).is_ok());
  }
  ~TestGemm() { cudaFree(workspace); }
  TestGemm(const TestGemm&) = delete;
  TestGemm& operator=(const TestGemm&) = delete;
};

TEST_CASE("CUDA linear matches the CPU (bf16 and f32 outputs, odd sizes)", "[cuda]") {
  REQUIRE_GPU(b);
  std::mt19937 rng(1);
  // M <= 8 takes the GEMV kernel (K % 8 == 0), the rest cuBLASLt.
  for (auto [m, k, n] : {std::tuple{1, 64, 200},
                         {3, 128, 77},
                         {8, 2048, 333},
                         {1, 1000, 50},
                         {5, 4104, 129},
                         {17, 96, 1000},
                         {130, 256, 64}}) {
    const auto x = random_vec(static_cast<size_t>(m * k), rng);
    const auto w = random_vec(static_cast<size_t>(n * k), rng, 0.1f);
    Tensor cx = cpu_tensor(x, {m, k}), cw = cpu_tensor(w, {n, k});
    Tensor cout = Tensor::empty({m, n}, DType::kF32, default_cpu_allocator()).value();
    b.cpu->linear(cx, cw, cout);
    for (DType out_dtype : {DType::kBF16, DType::kF32}) {
      Tensor gx = gpu_tensor(*b.gpu, x, {m, k}, DType::kBF16), gw = gpu_tensor(*b.gpu, w, {n, k}, DType::kBF16);
      Tensor gout = Tensor::empty({m, n}, out_dtype, b.gpu->allocator()).value();
      b.gpu->linear(gx, gw, gout);
      REQUIRE(b.gpu->take_error().is_ok());
      INFO("m=" << m << " k=" << k << " n=" << n << " out=" << dtype_name(out_dtype));
      const std::vector<float> ref(cout.data<float>(), cout.data<float>() + cout.numel());
      CHECK(violation(read_back(*b.gpu, gout), ref, 1e-2, out_dtype == DType::kF32 ? 1e-3 : 1e-2) <= 1.0);
    }
  }
}

TEST_CASE("every algorithm cuBLASLt ranks for a matmul computes it; a rank it does not offer is an error", "[cuda]") {
  REQUIRE_GPU(b);
  std::mt19937 rng(5);
  const int m = 64, k = 512, n = 384;
  const auto x = random_vec(static_cast<size_t>(m * k), rng);
  const auto w = random_vec(static_cast<size_t>(n * k), rng, 0.1f);
  Tensor cx = cpu_tensor(x, {m, k}), cw = cpu_tensor(w, {n, k});
  Tensor cout = Tensor::empty({m, n}, DType::kF32, default_cpu_allocator()).value();
  b.cpu->linear(cx, cw, cout);
  const std::vector<float> ref(cout.data<float>(), cout.data<float>() + cout.numel());
  Tensor gx = gpu_tensor(*b.gpu, x, {m, k}, DType::kBF16), gw = gpu_tensor(*b.gpu, w, {n, k}, DType::kBF16);
  Tensor gout = Tensor::empty({m, n}, DType::kF32, b.gpu->allocator()).value();
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // the uploads (the backend's stream) are done
  TestGemm tg;
  cuda::Gemm& gemm = tg.gemm;
  const Result<int> count = gemm.algorithm_count(m, k, k, n, true);
  REQUIRE(count.is_ok());
  REQUIRE(*count >= 1);
  REQUIRE(*count <= cuda::Gemm::kMaxAlgorithms);
  for (int rank = 0; rank < *count; ++rank) {
    REQUIRE(gemm.run(gx.data<uint16_t>(), m, k, k, gw.data<uint16_t>(), n, gout.data<float>(), true, nullptr, rank)
                .is_ok());
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    INFO("rank " << rank << " of " << *count);
    CHECK(violation(read_back(*b.gpu, gout), ref, 1e-2, 1e-3) <= 1.0);
  }
  const Status beyond =
      gemm.run(gx.data<uint16_t>(), m, k, k, gw.data<uint16_t>(), n, gout.data<float>(), true, nullptr, *count);
  CHECK(beyond.code() == StatusCode::kInvalidArgument);
  CHECK(beyond.message().find("rank") != std::string::npos);
}

TEST_CASE("timed cuBLASLt algorithms: prompt buckets when prepared, others on first use outside a capture", "[cuda]") {
  REQUIRE_GPU(b);
  if (!cuda::gemm_tuning_enabled()) SKIP("PHOTON_GEMM_TUNING=0: nothing is timed");
  std::mt19937 rng(7);
  const int max_m = 2000, k = 512, n = 384, budget = 700;
  const auto x = random_vec(static_cast<size_t>(max_m * k), rng);
  const auto w = random_vec(static_cast<size_t>(n * k), rng, 0.1f);
  Tensor cx = cpu_tensor(x, {max_m, k}), cw = cpu_tensor(w, {n, k});
  Tensor cout = Tensor::empty({max_m, n}, DType::kF32, default_cpu_allocator()).value();
  b.cpu->linear(cx, cw, cout);
  Tensor gx = gpu_tensor(*b.gpu, x, {max_m, k}, DType::kBF16), gw = gpu_tensor(*b.gpu, w, {n, k}, DType::kBF16);
  Tensor gout = Tensor::empty({max_m, n}, DType::kF32, b.gpu->allocator()).value();
  Tensor scratch = Tensor::empty({static_cast<int64_t>(cuda::Gemm::prompt_scratch_bytes(n, k, true, budget))},
                                 DType::kI8, b.gpu->allocator())
                       .value();
  auto* stream = static_cast<cudaStream_t>(cuda_backend_stream(*b.gpu));
  TestGemm tg;
  cuda::Gemm& gemm = tg.gemm;
  CHECK(gemm.describe(n, k, true).empty());
  CHECK_FALSE(gemm.wants_prompt_rows(n, k, true, cuda::Gemm::kHeuristicRows));  // decode sizes are never timed
  REQUIRE(gemm.wants_prompt_rows(n, k, true, budget));
  REQUIRE(gemm.time_prompt_rows(gw.raw(), n, k, true, budget, scratch.raw(), stream).is_ok());
  CHECK_FALSE(gemm.wants_prompt_rows(n, k, true, budget));
  CHECK(gemm.wants_prompt_rows(n, k, false, budget));  // bf16 products are another shape
  CHECK(gemm.wants_prompt_rows(n, k, true, 1500));     // a larger budget has an untimed bucket
  const std::string prepared = gemm.describe(n, k, true);
  INFO("choices: " << prepared);
  CHECK(prepared.rfind("512: rank ", 0) == 0);
  CHECK(prepared.find("1024: rank ") != std::string::npos);  // 700 rows fall in the bucket of 1024
  CHECK(prepared.find("2048") == std::string::npos);
  // Every row count runs its bucket's algorithm (timed at another row count for most) and computes the product; the
  // first call of an untimed bucket times it.
  const auto check_rows = [&](int m) {
    INFO("m=" << m);
    const std::vector<float> ref(cout.data<float>(), cout.data<float>() + static_cast<size_t>(m) * n);
    CHECK(violation(read_back(*b.gpu, gout.slice_rows(0, m)), ref, 1e-2, 1e-3) <= 1.0);
  };
  for (const int m : {9, 17, 256, 257, 300, 700, 1000}) {
    REQUIRE(gemm.run(gx.raw(), m, k, k, gw.raw(), n, gout.raw(), true, stream).is_ok());
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    check_rows(m);
  }
  CHECK(gemm.describe(n, k, true) == prepared);
  // Under a graph capture nothing is timed: the heuristic's algorithm is captured and the bucket stays untimed.
  REQUIRE(cudaMemsetAsync(gout.raw(), 0, gout.numel() * 4, stream) == cudaSuccess);
  REQUIRE(b.gpu->begin_capture().is_ok());
  const Status captured = gemm.run(gx.raw(), max_m, k, k, gw.raw(), n, gout.raw(), true, stream);
  const Result<int> graph = b.gpu->end_capture();
  REQUIRE(captured.is_ok());
  REQUIRE(graph.is_ok());
  REQUIRE(b.gpu->launch_graph(*graph).is_ok());
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  check_rows(max_m);
  b.gpu->destroy_graph(*graph);
  CHECK(gemm.describe(n, k, true) == prepared);
  // Outside one, the bucket's first call times it.
  REQUIRE(gemm.run(gx.raw(), 1500, k, k, gw.raw(), n, gout.raw(), true, stream).is_ok());
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  check_rows(1500);
  CHECK(gemm.describe(n, k, true).find("2048: rank ") != std::string::npos);
}

TEST_CASE("CUDA gated MLP projection (SwiGLU) matches the CPU on both paths", "[cuda]") {
  REQUIRE_GPU(b);
  std::mt19937 rng(11);
  // M <= 8: SwiGLU in the GEMV's epilogue; larger M: cuBLASLt into the scratch, then the SwiGLU kernel.
  for (auto [m, k, inter] : {std::tuple{1, 64, 100}, {3, 1024, 77}, {8, 2048, 333}, {2, 4104, 9}, {40, 256, 130}}) {
    const auto x = random_vec(static_cast<size_t>(m * k), rng);
    const auto w = random_vec(static_cast<size_t>(2 * inter * k), rng, 0.1f);
    Tensor cx = cpu_tensor(x, {m, k}), cw = cpu_tensor(w, {2 * inter, k});
    Tensor cscratch = Tensor::empty({m, 2 * inter}, DType::kF32, default_cpu_allocator()).value();
    Tensor cout = Tensor::empty({m, inter}, DType::kF32, default_cpu_allocator()).value();
    b.cpu->linear_swiglu(cx, cw, cscratch, cout);
    Tensor gx = gpu_tensor(*b.gpu, x, {m, k}, DType::kBF16), gw = gpu_tensor(*b.gpu, w, {2 * inter, k}, DType::kBF16);
    Tensor gscratch = Tensor::empty({m, 2 * inter}, DType::kBF16, b.gpu->allocator()).value();
    Tensor gout = Tensor::empty({m, inter}, DType::kBF16, b.gpu->allocator()).value();
    b.gpu->linear_swiglu(gx, gw, gscratch, gout);
    REQUIRE(b.gpu->take_error().is_ok());
    INFO("m=" << m << " k=" << k << " inter=" << inter);
    const std::vector<float> ref(cout.data<float>(), cout.data<float>() + cout.numel());
    CHECK(violation(read_back(*b.gpu, gout), ref, 2e-2, 2e-2) <= 1.0);
  }
}

TEST_CASE("CUDA norms and residual adds fused into the GEMVs equal the separate operations bit for bit", "[cuda]") {
  REQUIRE_GPU(b);
  std::mt19937 rng(31);
  const float eps = 1e-5f;
  // bf16 weights fuse at 1 to 8 rows, int8 at one row (in integers, the row staged where a block has several thread
  // groups, K < 4096, or quantised by each thread, K = 4096: 1 x 600 in groups of 256 threads, 1 x 2048 in groups
  // of 128, as at 4,096 weight rows and more); 12 rows, K = 8200 (> 8192), int8 at 3 rows and the 1 x 9000 SwiGLU
  // (a grid of more than one wave) compose the plain operations.
  for (auto [m, k, n, group] : {std::tuple{1, 2048, 300, 0},
                                {3, 1024, 77, 0},
                                {8, 4104, 40, 0},
                                {12, 512, 64, 0},
                                {1, 8200, 24, 0},
                                {1, 1024, 504, 64},
                                {1, 2048, 96, 128},
                                {1, 2048, 1104, 128},
                                {1, 4096, 600, 64},
                                {1, 4096, 2048, 128},
                                {3, 512, 72, 64},
                                {1, 256, 9000, 64}}) {
    INFO("m=" << m << " k=" << k << " n=" << n << " group=" << group);
    const auto x = random_vec(static_cast<size_t>(m * k), rng, 2.0f);
    const auto norm = random_vec(static_cast<size_t>(k), rng);
    const auto w = random_vec(static_cast<size_t>(2 * n * k), rng, 0.1f);  // [2n, k]: the SwiGLU form's [gate; up]
    const auto res_k = random_vec(static_cast<size_t>(m * k), rng);
    const auto act = random_vec(static_cast<size_t>(m * 2 * n), rng);
    Weight gw{gpu_tensor(*b.gpu, w, {2 * n, k}, DType::kBF16)}, cw{cpu_tensor(w, {2 * n, k})};
    Weight gw_down{gpu_tensor(*b.gpu, w, {k, 2 * n}, DType::kBF16)}, cw_down{cpu_tensor(w, {k, 2 * n})};
    if (group > 0) {
      gw = b.gpu->quantize_int8(gw.values, group).value();
      cw = b.cpu->quantize_int8(cw.values, group).value();
      gw_down = b.gpu->quantize_int8(gw_down.values, group).value();
      cw_down = b.cpu->quantize_int8(cw_down.values, group).value();
      REQUIRE(b.gpu->prepare_weight(gw, m, DType::kBF16).is_ok());
      REQUIRE(b.gpu->prepare_weight(gw_down, m, DType::kBF16).is_ok());
    }
    CHECK(b.gpu->fuses_norm_into_linear(m, gw) == (m <= 8 && (group == 0 || m == 1)));
    CHECK_FALSE(b.cpu->fuses_norm_into_linear(m, cw));
    const auto gpu_empty = [&](int64_t rows, int64_t cols) {
      return Tensor::empty({rows, cols}, DType::kBF16, b.gpu->allocator()).value();
    };
    const auto cpu_empty = [&](int64_t rows, int64_t cols) {
      return Tensor::empty({rows, cols}, DType::kF32, default_cpu_allocator()).value();
    };
    Tensor gx = gpu_tensor(*b.gpu, x, {m, k}, DType::kBF16), gnorm = gpu_tensor(*b.gpu, norm, {k}, DType::kF32);
    Tensor cx = cpu_tensor(x, {m, k}), cnorm = cpu_tensor(norm, {k});

    // rms_norm_linear against rms_norm then linear; the CPU composes the same (in f32).
    Tensor normed = gpu_empty(m, k), fused = gpu_empty(m, 2 * n), apart = gpu_empty(m, 2 * n);
    b.gpu->rms_norm_linear(gx, gnorm, eps, gw, normed, fused);
    b.gpu->rms_norm(gx, gnorm, eps, normed);
    b.gpu->linear(normed, gw, apart);
    Tensor cnormed = cpu_empty(m, k), cout = cpu_empty(m, 2 * n);
    b.cpu->rms_norm_linear(cx, cnorm, eps, cw, cnormed, cout);
    REQUIRE(b.gpu->take_error().is_ok());
    CHECK(read_back(*b.gpu, fused) == read_back(*b.gpu, apart));
    const std::vector<float> ref(cout.data<float>(), cout.data<float>() + cout.numel());
    CHECK(violation(read_back(*b.gpu, fused), ref, 5e-2, 2e-2) <= 1.0);

    // The SwiGLU form.
    Tensor scratch = gpu_empty(m, 2 * n), mlp_fused = gpu_empty(m, n), mlp_apart = gpu_empty(m, n);
    b.gpu->rms_norm_linear_swiglu(gx, gnorm, eps, gw, normed, scratch, mlp_fused);
    b.gpu->rms_norm(gx, gnorm, eps, normed);
    b.gpu->linear_swiglu(normed, gw, scratch, mlp_apart);
    REQUIRE(b.gpu->take_error().is_ok());
    CHECK(read_back(*b.gpu, mlp_fused) == read_back(*b.gpu, mlp_apart));

    // linear_add of a [k, 2n] projection into a residual against linear then add.
    Tensor gact = gpu_tensor(*b.gpu, act, {m, 2 * n}, DType::kBF16), proj = gpu_empty(m, k);
    Tensor r_fused = gpu_tensor(*b.gpu, res_k, {m, k}, DType::kBF16);
    Tensor r_apart = gpu_tensor(*b.gpu, res_k, {m, k}, DType::kBF16);
    b.gpu->linear_add(gact, gw_down, proj, r_fused);
    b.gpu->linear(gact, gw_down, proj);
    b.gpu->add(r_apart, proj);
    Tensor cact = cpu_tensor(act, {m, 2 * n}), cproj = cpu_empty(m, k), cres = cpu_tensor(res_k, {m, k});
    b.cpu->linear_add(cact, cw_down, cproj, cres);
    REQUIRE(b.gpu->take_error().is_ok());
    const auto added = read_back(*b.gpu, r_fused);
    CHECK(added == read_back(*b.gpu, r_apart));
    CHECK(added != res_k);
    const std::vector<float> res_ref(cres.data<float>(), cres.data<float>() + cres.numel());
    CHECK(violation(added, res_ref, 5e-2, 2e-2) <= 1.0);
  }
}

TEST_CASE("CUDA int8 weights: quantization equals the CPU's bit for bit; linear, SwiGLU and embedding match it",
          "[cuda]") {
  REQUIRE_GPU(b);
  std::mt19937 rng(23);
  // 2 to 16 rows with k and the group multiples of 64 take the tensor-core kernel (on the H200's 132 SMs these shapes
  // give each of its block shapes, two tiles and 16 warps, four tiles and 8 or 4 warps, for the linear and the SwiGLU
  // form; rows 8..15 when m > 8); one row and other shapes of up to 8 rows take the SIMT GEMV, which dots one row in
  // integers, the row staged where a block has several thread groups (K < 4096) or quantised by each thread (K = 4096
  // and 16512; 1 x 4200 outputs and SwiGLU 1 x 2100 in groups of 128 threads), and widens more rows to f32; larger M
  // widens the weights to bf16 for cuBLASLt, or, for wide matrices on Hopper (40 x 128 x 4200), reads them in the
  // W8A16 GEMM; k not a multiple of the group (a shorter last group), k below one group, and output counts that are
  // not multiples of the 8-row tiles.
  for (auto [m, k, n, group] : {std::tuple{1, 64, 200, 32},
                                {3, 1024, 77, 128},
                                {8, 2048, 333, 64},
                                {2, 208, 50, 128},
                                {1, 48, 9, 128},
                                {9, 512, 45, 64},
                                {16, 320, 2500, 128},
                                {2, 128, 13001, 64},
                                {4, 128, 3000, 64},
                                {1, 256, 9000, 64},
                                {1, 4096, 600, 64},
                                {1, 4096, 2100, 64},
                                {1, 16512, 160, 128},
                                {12, 192, 6500, 64},
                                {17, 96, 300, 32},
                                {40, 128, 2100, 64},
                                {130, 256, 64, 128}}) {
    INFO("m=" << m << " k=" << k << " n=" << n << " group=" << group);
    const auto w = random_vec(static_cast<size_t>(2 * n * k), rng, 0.1f);  // bf16 values, [2n, k] for SwiGLU
    Tensor cw = cpu_tensor(w, {2 * n, k});
    Tensor gw = gpu_tensor(*b.gpu, w, {2 * n, k}, DType::kBF16);
    Weight cq = b.cpu->quantize_int8(cw, group).value();
    Weight gq = b.gpu->quantize_int8(gw, group).value();
    REQUIRE(b.gpu->prepare_weight(gq, m, DType::kBF16).is_ok());  // as a decoder does: the GEMM path's bf16 scratch
    REQUIRE(gq.num_groups() == cq.num_groups());
    std::vector<int8_t> values(static_cast<size_t>(2 * n * k));
    std::vector<float> scales(static_cast<size_t>(gq.scales.numel()));
    b.gpu->copy_to_host(gq.values, values.data(), values.size());
    b.gpu->copy_to_host(gq.scales, scales.data(), scales.size() * 4);
    CHECK(std::equal(values.begin(), values.end(), cq.values.data<int8_t>()));
    CHECK(std::equal(scales.begin(), scales.end(), cq.scales.data<float>()));

    const auto x = random_vec(static_cast<size_t>(m * k), rng);
    Tensor cx = cpu_tensor(x, {m, k});
    Tensor gx = gpu_tensor(*b.gpu, x, {m, k}, DType::kBF16);
    Tensor cout = Tensor::empty({m, 2 * n}, DType::kF32, default_cpu_allocator()).value();
    b.cpu->linear(cx, cq, cout);
    Tensor gout = Tensor::empty({m, 2 * n}, DType::kF32, b.gpu->allocator()).value();
    b.gpu->linear(gx, gq, gout);
    REQUIRE(b.gpu->take_error().is_ok());
    const std::vector<float> ref(cout.data<float>(), cout.data<float>() + cout.numel());
    // The GEMV and the tensor-core kernel sum in f32 like the CPU; the GEMM path multiplies bf16-rounded dequantized
    // weights.
    const bool skinny = m <= 8 || (m <= 16 && k % 64 == 0 && group % 64 == 0);
    CHECK(violation(read_back(*b.gpu, gout), ref, 1e-2, skinny ? 1e-3 : 1e-2) <= 1.0);

    Tensor cscratch = Tensor::empty({m, 2 * n}, DType::kF32, default_cpu_allocator()).value();
    Tensor cmlp = Tensor::empty({m, n}, DType::kF32, default_cpu_allocator()).value();
    b.cpu->linear_swiglu(cx, cq, cscratch, cmlp);
    Tensor gscratch = Tensor::empty({m, 2 * n}, DType::kBF16, b.gpu->allocator()).value();
    Tensor gmlp = Tensor::empty({m, n}, DType::kBF16, b.gpu->allocator()).value();
    b.gpu->linear_swiglu(gx, gq, gscratch, gmlp);
    REQUIRE(b.gpu->take_error().is_ok());
    const std::vector<float> mlp_ref(cmlp.data<float>(), cmlp.data<float>() + cmlp.numel());
    CHECK(violation(read_back(*b.gpu, gmlp), mlp_ref, 2e-2, 2e-2) <= 1.0);

    // The int8 table as an embedding (a tied, quantized LM head): rows 0, 5 and past the end (zeros).
    const std::vector<int32_t> ids = {0, 5, static_cast<int32_t>(2 * n) + 3};
    Tensor cids = Tensor::empty({3}, DType::kI32, default_cpu_allocator()).value();
    std::copy(ids.begin(), ids.end(), cids.data<int32_t>());
    Tensor cemb = Tensor::empty({3, k}, DType::kF32, default_cpu_allocator()).value();
    b.cpu->embed(cids, Tensor(), cq, 0, cemb);
    Tensor gemb = Tensor::empty({3, k}, DType::kBF16, b.gpu->allocator()).value();
    b.gpu->embed(gpu_ints(*b.gpu, ids), Tensor(), gq, 0, gemb);
    REQUIRE(b.gpu->take_error().is_ok());
    const std::vector<float> emb_ref(cemb.data<float>(), cemb.data<float>() + cemb.numel());
    CHECK(violation(read_back(*b.gpu, gemb), emb_ref, 1e-6, 4e-3) <= 1.0);
  }
}

TEST_CASE("the Hopper W8A16 GEMM equals widening the int8 weights then cuBLASLt", "[cuda]") {
  REQUIRE_GPU(b);
  if (!cuda::w8a16_gemm_available()) SKIP("the W8A16 GEMM needs compute capability 9.0 and an sm_90a build");
  std::mt19937 rng(29);
  auto* gpu = b.gpu.get();
  TestGemm tg;
  cuda::Gemm& gemm = tg.gemm;
  // Each token tile (64, 128, 256) with partial tiles of tokens (m not a multiple) and of weight rows (n not a
  // multiple of 128), one 64-column step and many, K split over clusters of 2 to 8 blocks (evenly and not: 8 steps
  // over 3), groups of 32 (two groups a step), 64 and 128, strided activation rows, f32 and bf16 outputs, and the
  // default plan (the last: a narrow matrix's 64-token tiles over three token tiles, split 4 ways).
  for (auto [m, n, k, group, ldx, tile, splits, out_f32] : {std::tuple{17, 200, 64, 32, 64, 64, 1, true},
                                                            {64, 128, 2048, 128, 2048, 64, 1, false},
                                                            {130, 392, 192, 64, 200, 128, 1, true},
                                                            {100, 1024, 1024, 128, 1024, 128, 4, false},
                                                            {300, 136, 512, 32, 520, 256, 3, false},
                                                            {256, 3072, 2048, 128, 2048, 256, 1, true},
                                                            {256, 2048, 8192, 128, 8192, 256, 8, false},
                                                            {70, 512, 1024, 64, 1024, 128, 2, true},
                                                            {1000, 264, 320, 64, 320, 0, 0, false},
                                                            {150, 1024, 2048, 128, 2048, 0, 0, true}}) {
    INFO("m=" << m << " n=" << n << " k=" << k << " group=" << group << " ldx=" << ldx << " tile=" << tile
              << " splits=" << splits);
    const auto w = random_vec(static_cast<size_t>(n) * k, rng, 0.05f);
    Tensor gw = gpu_tensor(*gpu, w, {n, k}, DType::kBF16);
    Weight q = gpu->quantize_int8(gw, group).value();
    const cuda::Int8Weights iw{q.values.data<int8_t>(), q.scales.data<float>(), static_cast<int>(q.num_groups()),
                               group};
    const auto x = random_vec(static_cast<size_t>(m) * ldx, rng);
    Tensor gx = gpu_tensor(*gpu, x, {m, ldx}, DType::kBF16);
    const auto* x16 = static_cast<const uint16_t*>(gx.raw());
    const DType out_type = out_f32 ? DType::kF32 : DType::kBF16;
    Tensor wide = Tensor::empty({n, k}, DType::kBF16, gpu->allocator()).value();
    Tensor ref = Tensor::empty({m, n}, out_type, gpu->allocator()).value();
    Tensor got = Tensor::empty({m, n}, out_type, gpu->allocator()).value();
    auto* stream = static_cast<cudaStream_t>(cuda_backend_stream(*gpu));
    cuda::dequantize_int8(iw, n, k, static_cast<uint16_t*>(wide.raw()), stream);
    REQUIRE(gemm.run(x16, m, k, ldx, wide.raw(), n, ref.raw(), out_f32, stream).is_ok());
    REQUIRE(cuda::w8a16_gemm_supported(m, n, k, ldx, x16, group));
    REQUIRE(cuda::w8a16_gemm(x16, m, ldx, iw, n, k, got.raw(), out_f32, stream, {tile, splits}));
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    // The same bf16 products summed in another order: f32 rounding (and one bf16 rounding of the output).
    CHECK(violation(read_back(*gpu, got), read_back(*gpu, ref), 1e-4, out_f32 ? 1e-5 : 8e-3) <= 1.0);
  }
  // Shapes it declines: K not a multiple of 64, N not of 8, groups of 16, misaligned activations.
  CHECK_FALSE(cuda::w8a16_gemm_supported(32, 64, 96, 96, tg.workspace, 32));
  CHECK_FALSE(cuda::w8a16_gemm_supported(32, 60, 128, 128, tg.workspace, 32));
  CHECK_FALSE(cuda::w8a16_gemm_supported(32, 64, 128, 128, tg.workspace, 16));
  CHECK_FALSE(cuda::w8a16_gemm_supported(32, 64, 128, 128, static_cast<char*>(tg.workspace) + 2, 32));
  CHECK_FALSE(cuda::w8a16_gemm_supported(32, 64, 128, 130, tg.workspace, 32));
}

TEST_CASE("timed W8A16 choices cover every row count, run, and equal widening the int8 weights", "[cuda]") {
  REQUIRE_GPU(b);
  if (!cuda::w8a16_gemm_available()) SKIP("the W8A16 GEMM needs compute capability 9.0 and an sm_90a build");
  std::mt19937 rng(31);
  auto* gpu = b.gpu.get();
  TestGemm tg;
  cuda::Gemm& gemm = tg.gemm;
  auto* stream = static_cast<cudaStream_t>(cuda_backend_stream(*gpu));
  const int n = 1024, k = 2048, group = 128, max_m = cuda::W8a16Choices::kRows.back();
  Weight q = gpu->quantize_int8(
                    gpu_tensor(*gpu, random_vec(static_cast<size_t>(n) * k, rng, 0.05f), {n, k}, DType::kBF16), group)
                 .value();
  const cuda::Int8Weights iw{q.values.data<int8_t>(), q.scales.data<float>(), static_cast<int>(q.num_groups()), group};
  Tensor wide = Tensor::empty({n, k}, DType::kBF16, gpu->allocator()).value();
  Tensor scratch =
      Tensor::empty({static_cast<int64_t>(cuda::W8a16Choices::scratch_bytes(n, k))}, DType::kI8, gpu->allocator())
          .value();
  cuda::W8a16Choices choices;
  // Untimed, every row count takes the rule's path.
  for (int m = 17; m <= max_m; ++m) {
    const cuda::W8a16Choice c = choices.choose(m, n, k, group);
    CHECK(c.widen == !cuda::w8a16_gemm_pays(m, n, k));
    CHECK(c.plan.token_tile == cuda::w8a16_gemm_plan(m, n, k).token_tile);
    CHECK(c.plan.splits == cuda::w8a16_gemm_plan(m, n, k).splits);
  }
  REQUIRE(choices.wants(n, k, group));
  REQUIRE(choices.time_shape(iw, n, k, gemm, static_cast<uint16_t*>(wide.raw()), scratch.raw(), stream).is_ok());
  CHECK_FALSE(choices.wants(n, k, group));
  CHECK(choices.wants(n, k, 64));  // another group size is another shape
  // Timed, each row count's path runs and gives widening's sums (the same bf16 products in another order).
  const auto x = random_vec(static_cast<size_t>(max_m) * k, rng);
  Tensor gx = gpu_tensor(*gpu, x, {max_m, k}, DType::kBF16);
  const auto* x16 = static_cast<const uint16_t*>(gx.raw());
  Tensor ref = Tensor::empty({max_m, n}, DType::kF32, gpu->allocator()).value();
  Tensor got = Tensor::empty({max_m, n}, DType::kF32, gpu->allocator()).value();
  cuda::dequantize_int8(iw, n, k, static_cast<uint16_t*>(wide.raw()), stream);
  for (const int m : {17, 24, 25, 63, 100, 128, 129, 200, 256}) {
    INFO("m=" << m);
    const cuda::W8a16Choice c = choices.choose(m, n, k, group);
    CHECK((c.widen || c.plan.token_tile == 64 || c.plan.token_tile == 128 || c.plan.token_tile == 256));
    if (c.widen) continue;
    REQUIRE(gemm.run(x16, m, k, k, wide.raw(), n, ref.raw(), true, stream).is_ok());
    REQUIRE(cuda::w8a16_gemm(x16, m, k, iw, n, k, got.raw(), true, stream, c.plan));
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    CHECK(violation(read_back(*gpu, got.slice_rows(0, m)), read_back(*gpu, ref.slice_rows(0, m)), 1e-4, 1e-5) <= 1.0);
  }
  // Beyond the timed rows, and at decode sizes, the rule's path.
  CHECK(choices.choose(300, n, k, group).widen == !cuda::w8a16_gemm_pays(300, n, k));
  CHECK(choices.choose(16, n, k, group).widen == !cuda::w8a16_gemm_pays(16, n, k));
}

TEST_CASE("dummy weights generated on the GPU are the host's bits, whole and sharded", "[cuda]") {
  REQUIRE_GPU(b);
  const ModelConfig config = dummy_preset_config("tiny-qwen3").value();
  for (const int tp : {1, 2}) {
    const TensorParallelShard shard = make_shard(config, tp - 1, tp);
    ModelWeights host = make_dummy_weights(config, *b.cpu, 7, DType::kBF16, shard).value();
    ModelWeights gpu = make_dummy_weights(config, *b.gpu, 7, DType::kBF16, shard).value();
    REQUIRE(b.gpu->take_error().is_ok());
    const auto same = [&](const Tensor& h, const Tensor& g) {
      REQUIRE(h.nbytes() == g.nbytes());
      std::vector<unsigned char> back(g.nbytes());
      b.gpu->copy_to_host(g, back.data(), back.size());
      return std::memcmp(back.data(), h.raw(), back.size()) == 0;
    };
    INFO("tensor-parallel size " << tp);
    CHECK(same(host.embed.values, gpu.embed.values));
    CHECK(same(host.final_norm, gpu.final_norm));
    for (size_t l = 0; l < host.layers.size(); ++l) {
      CHECK(same(host.layers[l].qkv_proj.values, gpu.layers[l].qkv_proj.values));
      CHECK(same(host.layers[l].o_proj.values, gpu.layers[l].o_proj.values));
      CHECK(same(host.layers[l].gate_up_proj.values, gpu.layers[l].gate_up_proj.values));
      CHECK(same(host.layers[l].down_proj.values, gpu.layers[l].down_proj.values));
      CHECK(same(host.layers[l].input_norm, gpu.layers[l].input_norm));
      CHECK(same(host.layers[l].q_norm, gpu.layers[l].q_norm));
    }
  }
}

TEST_CASE("CUDA q/k norm, RoPE and cache write of the fused projection match the CPU", "[cuda]") {
  REQUIRE_GPU(b);
  std::mt19937 rng(12);
  for (auto [heads, kv_heads, hd, with_norm] :
       {std::tuple{4, 2, 64, false}, {3, 3, 24, true}, {2, 1, 128, true}, {6, 2, 256, false}}) {
    const int t = 5, bs = 4, blocks = 4, width = (heads + 2 * kv_heads) * hd;
    const auto qkv = random_vec(static_cast<size_t>(t * width), rng);
    std::vector<float> qn = random_vec(static_cast<size_t>(hd), rng), kn = random_vec(static_cast<size_t>(hd), rng);
    for (auto& v : qn) v = 1.0f + 0.1f * v;
    for (auto& v : kn) v = 1.0f + 0.1f * v;
    std::vector<float> inv(static_cast<size_t>(hd / 2));
    for (int i = 0; i < hd / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / hd);
    const std::vector<int32_t> positions = {0, 7, 3, 100, 2}, slots = {5, 0, -1, 15, 9};
    const KvCacheLayout layout{blocks, kv_heads, bs, hd};
    std::vector<float> q_out[2], cache_out[2];
    for (int which = 0; which < 2; ++which) {
      Backend& be = which == 0 ? *b.cpu : *b.gpu;
      const bool gpu = which == 1;
      const DType act = gpu ? DType::kBF16 : DType::kF32;
      auto floats = [&](const std::vector<float>& v, std::initializer_list<int64_t> shape, DType dtype) {
        return gpu ? gpu_tensor(be, v, shape, dtype) : cpu_tensor(v, shape);
      };
      auto ints = [&](const std::vector<int32_t>& v) {
        if (gpu) return gpu_ints(be, v);
        Tensor x = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32, default_cpu_allocator()).value();
        std::copy(v.begin(), v.end(), x.data<int32_t>());
        return x;
      };
      Tensor tqkv = floats(qkv, {t, width}, act);
      Tensor tqn = with_norm ? floats(qn, {hd}, DType::kF32) : Tensor(),
             tkn = with_norm ? floats(kn, {hd}, DType::kF32) : Tensor();
      Tensor cos = Tensor::empty({t, hd / 2}, DType::kF32, be.allocator()).value();
      Tensor sin = Tensor::empty({t, hd / 2}, DType::kF32, be.allocator()).value();
      be.rope_cos_sin(ints(positions), floats(inv, {hd / 2}, DType::kF32), cos, sin);
      Tensor cache = floats(std::vector<float>(static_cast<size_t>(layout.elements_per_block() * blocks), -3.0f),
                            {blocks, 2, kv_heads, bs, hd}, act);
      Tensor q = Tensor::empty({t, heads * hd}, act, be.allocator()).value();
      Tensor tslots = ints(slots);
      be.qkv_rope_cache_write(tqkv, tqn, tkn, 1e-6f, cos, sin, tslots, layout, cache, q);
      REQUIRE(be.take_error().is_ok());
      if (gpu) {
        q_out[which] = read_back(be, q);
        cache_out[which] = read_back(be, cache);
      } else {
        q_out[which].assign(q.data<float>(), q.data<float>() + q.numel());
        cache_out[which].assign(cache.data<float>(), cache.data<float>() + cache.numel());
      }
    }
    INFO("heads " << heads << "/" << kv_heads << " head_dim " << hd << (with_norm ? " with q/k norm" : ""));
    CHECK(violation(q_out[1], q_out[0], 2e-2, 2e-2) <= 1.0);
    CHECK(violation(cache_out[1], cache_out[0], 2e-2, 2e-2) <= 1.0);  // untouched slots stay -3 on both
  }
}

TEST_CASE("CUDA norms, embedding and gathers match the CPU", "[cuda]") {
  REQUIRE_GPU(b);
  std::mt19937 rng(2);
  // 200: the vector kernels (a multiple of 8); 203: the scalar ones.
  for (const int dim : {203, 200}) {
    const int rows = 5;
    const auto x = random_vec(rows * dim, rng), r0 = random_vec(rows * dim, rng);
    std::vector<float> w = random_vec(dim, rng);
    for (auto& v : w) v = 1.0f + 0.1f * v;
    Tensor gw = gpu_tensor(*b.gpu, w, {dim}, DType::kF32), cw = cpu_tensor(w, {dim});

    Tensor cx = cpu_tensor(x, {rows, dim}), cout = cpu_tensor(x, {rows, dim});
    b.cpu->rms_norm(cx, cw, 1e-6f, cout);
    Tensor gx = gpu_tensor(*b.gpu, x, {rows, dim}, DType::kBF16);
    Tensor gout = Tensor::empty({rows, dim}, DType::kBF16, b.gpu->allocator()).value();
    b.gpu->rms_norm(gx, gw, 1e-6f, gout);
    CHECK(violation(read_back(*b.gpu, gout), {cout.data<float>(), cout.data<float>() + rows * dim}, 1e-2, 1e-2) <= 1);

    // add_rms_norm: the GPU rounds the residual to bf16 as transformers does; compare against that.
    std::vector<float> rounded(r0.size());
    for (size_t i = 0; i < r0.size(); ++i) rounded[i] = bf16_to_f32(f32_to_bf16(r0[i] + x[i]));
    Tensor cres = cpu_tensor(r0, {rows, dim});
    b.cpu->add_rms_norm(cres, cx, cw, 1e-6f, cout);
    Tensor gres = gpu_tensor(*b.gpu, r0, {rows, dim}, DType::kBF16);
    b.gpu->add_rms_norm(gres, gx, gw, 1e-6f, gout);
    CHECK(violation(read_back(*b.gpu, gres), rounded, 1e-6, 1e-6) <= 1);
    CHECK(violation(read_back(*b.gpu, gout), {cout.data<float>(), cout.data<float>() + rows * dim}, 2e-2, 2e-2) <= 1);
    if (dim != 200) continue;  // the embedding and copies below run once

    const std::vector<int32_t> ids = {4, 0, 4, 2};
    Tensor gids = gpu_ints(*b.gpu, ids);
    Tensor gemb = Tensor::empty({4, dim}, DType::kBF16, b.gpu->allocator()).value();
    const Tensor none;
    b.gpu->embed(gids, none, gx, 0, gemb);
    const auto emb = read_back(*b.gpu, gemb);
    for (int t = 0; t < 4; ++t)
      for (int i = 0; i < dim; ++i) REQUIRE(emb[t * dim + i] == x[ids[t] * dim + i]);
    // Placeholders -(k + 1) read the k-th id of a sampled-ids array on the device.
    Tensor gsampled = gpu_ints(*b.gpu, std::vector<int32_t>{3, 1});
    b.gpu->embed(gpu_ints(*b.gpu, std::vector<int32_t>{-2, 0, -1, 4}), gsampled, gx, 0, gemb);
    const auto resolved = read_back(*b.gpu, gemb);
    const int resolved_ids[] = {1, 0, 3, 4};
    for (int t = 0; t < 4; ++t)
      for (int i = 0; i < dim; ++i) REQUIRE(resolved[t * dim + i] == x[resolved_ids[t] * dim + i]);
    // A vocabulary slice holding ids [2, 4): ids 4 and 0 embed as zeros.
    b.gpu->embed(gids, none, gx.slice_rows(0, 2), 2, gemb);
    const auto part = read_back(*b.gpu, gemb);
    for (int t = 0; t < 4; ++t)
      for (int i = 0; i < dim; ++i) REQUIRE(part[t * dim + i] == (ids[t] == 2 ? x[0 * dim + i] : 0.0f));
    // copy_columns places a [rows, 3] block at column 198 of a [rows, 200] tensor, clipping the third column.
    Tensor gcols = gpu_tensor(*b.gpu, x, {rows, dim}, DType::kF32);
    Tensor gblock = gpu_tensor(*b.gpu, std::vector<float>(x.begin(), x.begin() + rows * 3), {rows, 3}, DType::kF32);
    b.gpu->copy_columns(gblock, gcols, dim - 2);
    const auto cols = read_back(*b.gpu, gcols);
    for (int r = 0; r < rows; ++r) {
      REQUIRE(cols[r * dim + dim - 3] == x[r * dim + dim - 3]);
      REQUIRE(cols[r * dim + dim - 2] == x[r * 3]);
      REQUIRE(cols[r * dim + dim - 1] == x[r * 3 + 1]);
    }
    Tensor ggath = Tensor::empty({2, dim}, DType::kBF16, b.gpu->allocator()).value();
    b.gpu->gather_rows(gx, gpu_ints(*b.gpu, std::vector<int32_t>{3, 1}), ggath);
    const auto gath = read_back(*b.gpu, ggath);
    for (int i = 0; i < dim; ++i) REQUIRE(gath[dim + i] == x[dim + i]);
    REQUIRE(b.gpu->take_error().is_ok());
  }
}

TEST_CASE("CUDA RoPE, KV write and paged attention match the CPU", "[cuda]") {
  REQUIRE_GPU(b);
  // Short chunks go to the decode kernel; a 300-token chunk after 120 cached tokens (head_dim 64 / 128) to the
  // tensor-core prefill kernel: several query tiles, the last one partly empty, and key tiles across the chunk's start.
  // KV heads 2, 1 and 4 of 4 query heads, and 1 of 8: GQA groups of 2, 4, 1 and 8 in the decode kernel.
  // Cache blocks of 4 tokens, and of 5 for a few shapes (the page lookup's division path; 4 takes shifts).
  for (auto [hd, long_chunk, kv_heads, heads, bs] : {std::tuple{16, false, 2, 4, 4},
                                                     {24, false, 2, 4, 5},
                                                     {64, false, 2, 4, 4},
                                                     {128, false, 2, 4, 4},
                                                     {256, false, 2, 4, 4},
                                                     {64, true, 2, 4, 5},
                                                     {128, true, 2, 4, 4},
                                                     {64, false, 1, 4, 4},
                                                     {128, false, 1, 4, 4},
                                                     {64, false, 4, 4, 4},
                                                     {128, false, 4, 4, 4},
                                                     {128, true, 1, 4, 5},
                                                     {64, false, 1, 8, 5},
                                                     {128, false, 1, 8, 4}}) {
    std::mt19937 rng(static_cast<unsigned>(hd));
    const int num_blocks = 530;
    // Three sequences: a prompt, a chunk after cached context, and one decode token over a long context (its
    // splits span several rounds of the warps' tiles); blocks scattered.
    const std::vector<int32_t> ctx = {9, 420, 8000};
    const std::vector<int32_t> q_lens = {9, long_chunk ? 300 : 5, 1};
    std::vector<int32_t> perm(num_blocks * 4);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> query_start = {0}, seq_lens, indptr = {0}, indices, positions, slots;
    size_t next = 0;
    for (size_t s = 0; s < ctx.size(); ++s) {
      const int nb = (ctx[s] + bs - 1) / bs;
      for (int k = 0; k < nb; ++k) indices.push_back(perm[next++]);
      indptr.push_back(static_cast<int32_t>(indices.size()));
      query_start.push_back(query_start.back() + ctx[s]);  // write the whole context, then attend with the tail
      seq_lens.push_back(ctx[s]);
      for (int p = 0; p < ctx[s]; ++p) {
        positions.push_back(p);
        slots.push_back(indices[indptr[s] + p / bs] * bs + p % bs);
      }
    }
    const int total = query_start.back();
    const auto q = random_vec(static_cast<size_t>(total * heads * hd), rng);
    const auto k = random_vec(static_cast<size_t>(total * kv_heads * hd), rng);
    const auto v = random_vec(static_cast<size_t>(total * kv_heads * hd), rng);
    std::vector<float> qkv;  // each token's row: its q heads, k heads, v heads
    for (int t = 0; t < total; ++t) {
      const auto row = [&](const std::vector<float>& src, int n) {
        qkv.insert(qkv.end(), src.begin() + static_cast<ptrdiff_t>(t) * n,
                   src.begin() + static_cast<ptrdiff_t>(t + 1) * n);
      };
      row(q, heads * hd);
      row(k, kv_heads * hd);
      row(v, kv_heads * hd);
    }
    std::vector<float> inv(static_cast<size_t>(hd / 2));
    for (int i = 0; i < hd / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / hd);
    const KvCacheLayout layout{num_blocks * 4, kv_heads, bs, hd};
    AttentionBatch batch;  // the attention step: each sequence's last q_lens tokens
    std::vector<int32_t> aq_start = {0};
    for (size_t s = 0; s < ctx.size(); ++s) aq_start.push_back(aq_start.back() + q_lens[s]);

    auto run = [&](Backend& be, DType act, int max_seq_len, std::vector<float>& out) {
      auto make = [&](const std::vector<float>& data, std::initializer_list<int64_t> shape) {
        return be.device() == Device::cpu() ? cpu_tensor(data, shape) : gpu_tensor(be, data, shape, act);
      };
      Tensor tqkv = make(qkv, {total, (heads + 2 * kv_heads) * hd});
      Tensor tq = Tensor::empty({total, heads * hd}, act, be.allocator()).value();
      Tensor tinv =
          be.device() == Device::cpu() ? cpu_tensor(inv, {hd / 2}) : gpu_tensor(be, inv, {hd / 2}, DType::kF32);
      auto ints = [&](const std::vector<int32_t>& data) {
        if (be.device() == Device::cpu()) {
          Tensor t = Tensor::empty({static_cast<int64_t>(data.size())}, DType::kI32, default_cpu_allocator()).value();
          std::copy(data.begin(), data.end(), t.data<int32_t>());
          return t;
        }
        return gpu_ints(be, data);
      };
      Tensor tpos = ints(positions), tslots = ints(slots);
      Tensor cos = Tensor::empty({total, hd / 2}, DType::kF32, be.allocator()).value();
      Tensor sin = Tensor::empty({total, hd / 2}, DType::kF32, be.allocator()).value();
      Tensor cache = Tensor::empty({layout.num_blocks, 2, kv_heads, bs, hd}, act, be.allocator()).value();
      be.rope_cos_sin(tpos, tinv, cos, sin);
      be.qkv_rope_cache_write(tqkv, Tensor(), Tensor(), 0.0f, cos, sin, tslots, layout, cache, tq);
      // Attend with the tail of each sequence: gather those q rows.
      std::vector<int32_t> tail_rows;
      for (size_t s = 0; s < ctx.size(); ++s)
        for (int i = 0; i < q_lens[s]; ++i) tail_rows.push_back(query_start[s] + ctx[s] - q_lens[s] + i);
      Tensor tq_tail = Tensor::empty({aq_start.back(), heads * hd}, act, be.allocator()).value();
      be.gather_rows(tq, ints(tail_rows), tq_tail);
      AttentionBatch ab;
      ab.num_seqs = 3;
      ab.num_tokens = aq_start.back();
      ab.max_seq_len = max_seq_len;
      ab.max_query_len = long_chunk ? 300 : 9;
      std::vector<int32_t> decode_rows, prefill_seqs;
      for (int32_t s = 0; s < 3; ++s) {
        if (q_lens[s] >= AttentionBatch::kLongChunk && be.separates_long_chunks(hd)) {
          prefill_seqs.push_back(s);
          ab.max_prefill_query_len = std::max(ab.max_prefill_query_len, q_lens[s]);
        } else {
          for (int32_t r = aq_start[s]; r < aq_start[s + 1]; ++r) decode_rows.push_back(r);
        }
      }
      ab.num_decode_tokens = static_cast<int32_t>(decode_rows.size());
      ab.num_prefill_seqs = static_cast<int32_t>(prefill_seqs.size());
      if (!decode_rows.empty()) ab.decode_tokens = ints(decode_rows);
      if (!prefill_seqs.empty()) ab.prefill_seqs = ints(prefill_seqs);
      ab.query_start = ints(aq_start);
      ab.seq_lens = ints(seq_lens);
      ab.block_indptr = ints(indptr);
      ab.block_indices = ints(indices);
      Tensor o = Tensor::empty({aq_start.back(), heads * hd}, act, be.allocator()).value();
      be.attention(tq_tail, cache, layout, ab, 1.0f / std::sqrt(static_cast<float>(hd)), o);
      REQUIRE(be.take_error().is_ok());
      if (be.device() == Device::cpu()) {
        out.assign(o.data<float>(), o.data<float>() + o.numel());
      } else {
        out = read_back(be, o);
      }
    };
    // max_seq_len picks the split count and the tiles each warp keeps in flight (1 where the longest split it
    // expects fits one round of tiles, up to 3; head dim 128 takes 3 only for splits of 512 keys and more): the
    // contexts may exceed it, and every choice must give the same results.
    std::vector<float> cpu_out, gpu_out, gpu_split, gpu_long_split, gpu_mid, gpu_most;
    run(*b.cpu, DType::kF32, 8000, cpu_out);
    run(*b.gpu, DType::kBF16, 0, gpu_out);          // one block per (token, head), one slot
    run(*b.gpu, DType::kBF16, 300, gpu_split);      // splits of 30 keys expected, far more met; one slot
    run(*b.gpu, DType::kBF16, 64, gpu_long_split);  // two splits, each many rounds of tiles long
    run(*b.gpu, DType::kBF16, 8000, gpu_mid);       // splits of ~450 keys: two slots for head dim 128, three for 64
    run(*b.gpu, DType::kBF16, 100000, gpu_most);    // the most splits, three slots per warp, each cycled
    INFO("head_dim " << hd << ", " << heads << " heads, " << kv_heads << " KV heads, blocks of " << bs << " tokens"
                     << (long_chunk ? ", tensor-core prefill" : ""));
    CHECK(violation(gpu_out, cpu_out, 2e-2, 3e-2) <= 1.0);
    CHECK(violation(gpu_split, cpu_out, 2e-2, 3e-2) <= 1.0);
    CHECK(violation(gpu_long_split, cpu_out, 2e-2, 3e-2) <= 1.0);
    CHECK(violation(gpu_mid, cpu_out, 2e-2, 3e-2) <= 1.0);
    CHECK(violation(gpu_most, cpu_out, 2e-2, 3e-2) <= 1.0);
  }
}

TEST_CASE("attention split counts stay within the workspace, also for no decode tokens", "[cuda]") {
  CHECK(cuda::attention_splits(0, 32, 8, 64, 4096) == 1);   // a step of prompt chunks only
  CHECK(cuda::attention_splits(1, 32, 8, 64, 30) == 1);     // one split's worth of keys: nothing to split
  CHECK(cuda::attention_splits(1, 32, 8, 64, 384) == 12);   // contexts of up to 384 keys: splits of 32
  CHECK(cuda::attention_splits(1, 32, 8, 64, 4096) == 64);  // 8 blocks (one per KV head) x 64 splits
  CHECK(cuda::attention_splits(1, 32, 32, 64, 4096) == 16);
  CHECK(cuda::attention_splits(256, 32, 8, 64, 4096) == 1);
  for (int t : {1, 3, 7, 15}) {
    for (int len : {1, 200, 5000, 100000}) {
      for (int kv : {1, 4, 32}) {
        const int splits = cuda::attention_splits(t, 32, kv, 128, len);
        CHECK(splits >= 1);
        CHECK(static_cast<size_t>(t) * 32 * splits * (128 + 2) <= cuda::attention_workspace_floats(128));
      }
    }
  }
}

TEST_CASE(
    "CUDA sampling applies the logit bias and penalties, draws what the host does, and reports the model's logprobs",
    "[cuda]") {
  REQUIRE_GPU(b);
  std::mt19937 rng(3);
  const int rows = 8, vocab = 5003;
  auto logits = random_vec(static_cast<size_t>(rows * vocab), rng, 2.0f);
  // Rows 6 and 7 have logits in steps of 0.5: long runs of equal values, so cuts land inside ties.
  for (size_t i = 6 * static_cast<size_t>(vocab); i < logits.size(); ++i) logits[i] = std::round(logits[i] * 2) / 2;
  Tensor g = gpu_tensor(*b.gpu, logits, {rows, vocab}, DType::kF32);
  const int top_ks[] = {0, 1, 7, 50, 700, vocab, vocab + 5};
  const float top_ps[] = {1.0f, 0.5f, 0.9f, 0.99f, 0.999f};
  std::vector<SampleRequest> reqs;
  for (int i = 0; i < 160; ++i) {
    SampleRequest r;
    r.row = i % rows;
    r.temperature = i % 8 == 0 ? 0.0f : 0.25f * static_cast<float>(1 + i % 6);
    r.top_k = top_ks[(i / 3) % 7];
    r.top_p = top_ps[(i / 2) % 5];
    r.min_p = i % 5 == 0 ? 0.05f : 0.0f;
    r.seed = 1000 + static_cast<uint64_t>(i);
    r.index = static_cast<uint64_t>(i * 7);
    reqs.push_back(r);
  }
  // The first request of each row also has adjustments (rows with adjustments must be distinct), over random
  // distinct tokens with output counts 0-3, in context or only biased, at values whose products and sums round; the
  // even ones want logprobs too, of their rows as the model gave them.
  std::vector<LogitAdjustment> adjustments;
  for (int i = 0; i < rows; ++i) {
    SampleRequest& r = reqs[static_cast<size_t>(i)];
    r.repetition_penalty = i % 3 == 2 ? 1.0f : 1.3f + 0.1f * static_cast<float>(i);
    r.presence_penalty = i % 2 == 0 ? 0.37f : 0.0f;
    r.frequency_penalty = i % 4 == 1 ? 0.0f : 0.11f * static_cast<float>(i + 1);
    r.logprobs = i % 2 == 0 ? 3 * i : -1;
    r.adjustment_begin = static_cast<int32_t>(adjustments.size());
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int k = 0; k < 300 + 50 * i; ++k) {
      const bool biased = rng() % 3 == 0, in_context = !biased || rng() % 2 == 0;
      adjustments.push_back({ids[static_cast<size_t>(k)], in_context ? static_cast<int32_t>(rng() % 4) : 0,
                             biased ? static_cast<float>(static_cast<int>(rng() % 2001) - 1000) * 0.0173f : 0.0f,
                             in_context ? 1 : 0});
    }
    r.adjustment_count = static_cast<int32_t>(adjustments.size()) - r.adjustment_begin;
  }
  // The ids land on the device (for the next step's placeholders) and, once waited for, on the host.
  Tensor device_ids = Tensor::empty({static_cast<int64_t>(reqs.size())}, DType::kI32, b.gpu->allocator()).value();
  auto host = b.gpu->allocate_host(reqs.size() * sizeof(int32_t)).value();
  REQUIRE(b.gpu->sample(g, reqs, adjustments, device_ids, static_cast<int32_t*>(host.get())).is_ok());
  REQUIRE(b.gpu->wait_samples().is_ok());
  std::vector<TokenLogprob> chosen(rows / 2);
  REQUIRE(b.gpu->sampled_logprobs(chosen).is_ok());
  const auto* host_ids = static_cast<const int32_t*>(host.get());
  const std::vector<int32_t> ids(host_ids, host_ids + reqs.size());
  std::vector<int32_t> on_device(reqs.size());
  b.gpu->copy_to_host(device_ids, on_device.data(), on_device.size() * sizeof(int32_t));
  CHECK(on_device == ids);
  // The host applies the same adjustments (the GPU's rows afterwards must be bit-identical to them, or to the model's
  // where logprobs were asked for), then selects.
  const std::vector<float> model = logits;
  std::vector<float> expected = logits;
  for (const SampleRequest& r : reqs) {
    const auto entries = std::span<const LogitAdjustment>(adjustments)
                             .subspan(static_cast<size_t>(r.adjustment_begin), static_cast<size_t>(r.adjustment_count));
    cpu::adjust_logits({logits.data() + static_cast<size_t>(r.row) * vocab, static_cast<size_t>(vocab)}, r, entries);
    if (r.logprobs < 0) {
      cpu::adjust_logits({expected.data() + static_cast<size_t>(r.row) * vocab, static_cast<size_t>(vocab)}, r,
                         entries);
    }
  }
  CHECK(logits != model);
  std::vector<float> after(logits.size());
  b.gpu->copy_to_host(g, after.data(), after.size() * sizeof(float));
  CHECK(after == expected);
  for (int i = 0; i < rows; i += 2) {
    const SampleRequest& r = reqs[static_cast<size_t>(i)];
    INFO("logprobs of request " << i);
    const TokenLogprob want = cpu::token_logprob(
        {model.data() + static_cast<size_t>(r.row) * vocab, static_cast<size_t>(vocab)}, host_ids[i], r.logprobs);
    const TokenLogprob& got = chosen[static_cast<size_t>(i / 2)];
    CHECK(got.token == host_ids[i]);
    CHECK(std::abs(got.logprob - want.logprob) <= 1e-5f * std::max(1.0f, std::abs(want.logprob)));
    REQUIRE(got.top.size() == want.top.size());
    for (size_t t = 0; t < want.top.size(); ++t) {
      CHECK(got.top[t].first == want.top[t].first);
      CHECK(std::abs(got.top[t].second - want.top[t].second) <= 1e-5f * std::max(1.0f, std::abs(want.top[t].second)));
    }
  }
  cpu::SampleScratch scratch;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& r = reqs[i];
    INFO("request " << i << ": row " << r.row << ", temperature " << r.temperature << ", top_k " << r.top_k
                    << ", top_p " << r.top_p << ", min_p " << r.min_p << ", adjustments " << r.adjustment_count);
    const std::span<const float> row(logits.data() + static_cast<size_t>(r.row) * vocab, vocab);
    CHECK(ids[i] == cpu::sample_row(row, r, scratch));
  }
}

TEST_CASE("CUDA greedy selection takes the lowest id among ties, over large vocabularies and many rows", "[cuda]") {
  REQUIRE_GPU(b);
  std::mt19937 rng(4);
  // Vocabularies: Qwen3's and an odd one; batches of 1, 3 and 300 rows.
  for (const int vocab : {151936, 5003}) {
    for (const int rows : {1, 3, 300}) {
      INFO("vocab " << vocab << ", " << rows << " rows");
      auto logits = random_vec(static_cast<size_t>(rows) * vocab, rng, 2.0f);
      for (int r = 0; r < rows; ++r) {
        float* row = logits.data() + static_cast<size_t>(r) * vocab;
        // The maximum appears four times, far apart and side by side: the lowest id wins.
        const int first = static_cast<int>(rng() % static_cast<unsigned>(vocab / 2));
        for (int id : {vocab - 1 - first / 3, first, first + 1, vocab / 2 + first / 2}) row[id] = 100.0f;
      }
      Tensor g = gpu_tensor(*b.gpu, logits, {rows, vocab}, DType::kF32);
      std::vector<SampleRequest> reqs(static_cast<size_t>(rows));
      for (int r = 0; r < rows; ++r) reqs[static_cast<size_t>(rows - 1 - r)].row = r;  // rows in reverse order
      Tensor device_ids = Tensor::empty({rows}, DType::kI32, b.gpu->allocator()).value();
      auto host = b.gpu->allocate_host(static_cast<size_t>(rows) * sizeof(int32_t)).value();
      cpu::SampleScratch scratch;
      for (int launch = 0; launch < 2; ++launch) {
        REQUIRE(b.gpu->sample(g, reqs, {}, device_ids, static_cast<int32_t*>(host.get())).is_ok());
        REQUIRE(b.gpu->wait_samples().is_ok());
        for (size_t i = 0; i < reqs.size(); ++i) {
          const std::span<const float> row(logits.data() + static_cast<size_t>(reqs[i].row) * vocab, vocab);
          REQUIRE(static_cast<const int32_t*>(host.get())[i] == cpu::sample_row(row, reqs[i], scratch));
        }
      }
    }
  }
}

TEST_CASE("CUDA top-p over a large vocabulary draws what the host does, peaked rows or flat", "[cuda]") {
  // Peaked rows put top-p's cut among a few hundred tokens, which the kernel gathers and sorts in shared memory;
  // flat ones need more than it gathers, and it searches the order instead. Logits in bf16 steps: long runs of ties.
  REQUIRE_GPU(b);
  std::mt19937 rng(8);
  const int vocab = 128256;
  const float spreads[] = {0.5f, 1.0f, 3.0f, 6.0f};
  const int rows = 4;
  std::vector<float> logits;
  for (const float spread : spreads) {
    const auto row = random_vec(static_cast<size_t>(vocab), rng, spread);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  Tensor g = gpu_tensor(*b.gpu, logits, {rows, vocab}, DType::kF32);
  const float top_ps[] = {0.05f, 0.3f, 0.8f, 0.9f, 0.95f, 0.99f};
  std::vector<SampleRequest> reqs;
  for (int i = 0; i < 96; ++i) {
    SampleRequest r;
    r.row = i % rows;
    r.temperature = i % 3 == 0 ? 0.6f : (i % 3 == 1 ? 1.0f : 1.3f);
    r.top_p = top_ps[(i / rows) % 6];
    r.min_p = i % 7 == 0 ? 0.02f : 0.0f;
    r.seed = 77 + static_cast<uint64_t>(i);
    r.index = static_cast<uint64_t>(i);
    reqs.push_back(r);
  }
  Tensor device_ids = Tensor::empty({static_cast<int64_t>(reqs.size())}, DType::kI32, b.gpu->allocator()).value();
  auto host = b.gpu->allocate_host(reqs.size() * sizeof(int32_t)).value();
  REQUIRE(b.gpu->sample(g, reqs, {}, device_ids, static_cast<int32_t*>(host.get())).is_ok());
  REQUIRE(b.gpu->wait_samples().is_ok());
  cpu::SampleScratch scratch;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const SampleRequest& r = reqs[i];
    INFO("request " << i << ": spread " << spreads[r.row] << ", temperature " << r.temperature << ", top_p " << r.top_p
                    << ", min_p " << r.min_p);
    const std::span<const float> row(logits.data() + static_cast<size_t>(r.row) * vocab, vocab);
    CHECK(static_cast<const int32_t*>(host.get())[i] == cpu::sample_row(row, r, scratch));
  }
}

TEST_CASE("CUDA draws share a few rows among a cluster's blocks and draw what the host does", "[cuda]") {
  // Up to 132 / 8 rows each row is split over 8 blocks, then 4 and 2 (the odd vocabulary into runs of unequal
  // length), and 100 rows take one block each; rows flat, peaked (most tokens too far below the best to win: their
  // variates are skipped), in bf16 steps (ties across the runs, at the cuts too), with -inf runs, and all -inf but
  // one token. Greedy, temperature alone, top-k, top-k with top-p, and min-p.
  REQUIRE_GPU(b);
  std::mt19937 rng(12);
  for (const int vocab : {128256, 50001}) {
    for (const int rows : {1, 5, 20, 40, 100}) {
      INFO("vocab " << vocab << ", " << rows << " rows");
      auto logits = random_vec(static_cast<size_t>(rows) * vocab, rng, 1.0f);
      for (int r = 0; r < rows; ++r) {
        float* row = logits.data() + static_cast<size_t>(r) * vocab;
        for (int i = 0; i < vocab; ++i) {
          switch (r % 5) {
            case 1:
              row[i] *= 30.0f;
              break;
            case 2:
              row[i] = std::round(row[i] * 4.0f) / 4.0f;
              break;
            case 3:
              if ((i / 1000) % 3 == 0) row[i] = -INFINITY;
              break;
            case 4:
              row[i] = i == vocab - 3 ? 1.0f : -INFINITY;
              break;
            default:
              break;
          }
        }
      }
      Tensor g = gpu_tensor(*b.gpu, logits, {rows, vocab}, DType::kF32);
      std::vector<SampleRequest> reqs(static_cast<size_t>(rows));
      for (int i = 0; i < rows; ++i) {
        SampleRequest& r = reqs[static_cast<size_t>(i)];
        r.row = rows - 1 - i;
        r.temperature = i % 4 == 3 ? 0.0f : (i % 4 == 0 ? 0.7f : (i % 4 == 1 ? 1.0f : 1.5f));
        r.top_k = i % 6 == 5 ? vocab : (i % 6 == 1 ? 40 : (i % 6 == 4 ? 2000 : 0));  // the vocabulary cuts nothing
        // Top-p only after a top-k: a request with top-p alone sends its step to the one-block kernels.
        const bool cuts = i % 6 == 1 || i % 6 == 4;
        r.top_p = cuts && i % 5 == 2 ? 0.9f : (cuts && i % 5 == 4 ? 0.5f : 1.0f);
        r.min_p = i % 7 == 2 ? 0.05f : 0.0f;
        r.seed = 500 + static_cast<uint64_t>(i);
        r.index = static_cast<uint64_t>(3 * i);
      }
      Tensor device_ids = Tensor::empty({rows}, DType::kI32, b.gpu->allocator()).value();
      auto host = b.gpu->allocate_host(static_cast<size_t>(rows) * sizeof(int32_t)).value();
      REQUIRE(b.gpu->sample(g, reqs, {}, device_ids, static_cast<int32_t*>(host.get())).is_ok());
      REQUIRE(b.gpu->wait_samples().is_ok());
      cpu::SampleScratch scratch;
      for (size_t i = 0; i < reqs.size(); ++i) {
        const SampleRequest& r = reqs[i];
        INFO("request " << i << ": row kind " << r.row % 5 << ", temperature " << r.temperature << ", top_k " << r.top_k
                        << ", top_p " << r.top_p << ", min_p " << r.min_p);
        const std::span<const float> row(logits.data() + static_cast<size_t>(r.row) * vocab, vocab);
        CHECK(static_cast<const int32_t*>(host.get())[i] == cpu::sample_row(row, r, scratch));
      }
    }
  }
}

TEST_CASE("CUDA token logprobs, of prompt tokens and of sampled ones, and their top tokens are the host's", "[cuda]") {
  REQUIRE_GPU(b);
  std::mt19937 rng(5);
  // The normaliser's sums run in another order: 1e-5 relative; -inf stays -inf.
  auto close = [](float x, float y) {
    return std::isinf(y) ? x == y : std::abs(x - y) <= 1e-5f * std::max(1.0f, std::abs(y));
  };
  for (const int vocab : {128256, 5003, 7}) {
    const int rows = 6;
    auto logits = random_vec(static_cast<size_t>(rows) * vocab, rng, 3.0f);
    // Row 1 in steps of 0.5 (ties cut inside runs of equal logits); row 2 with -inf entries and a tied maximum;
    // row 3 one logit far above the rest; row 4 all -inf but one.
    for (int i = 0; i < vocab; ++i) {
      float* row = logits.data() + static_cast<size_t>(vocab);
      row[i] = std::round(row[i] * 2) / 2;
      logits[2 * static_cast<size_t>(vocab) + static_cast<size_t>(i)] =
          i % 3 == 0 ? -INFINITY : logits[2 * static_cast<size_t>(vocab) + static_cast<size_t>(i)];
      logits[4 * static_cast<size_t>(vocab) + static_cast<size_t>(i)] = i == vocab / 2 ? 0.5f : -INFINITY;
    }
    logits[2 * static_cast<size_t>(vocab) + 1] = logits[2 * static_cast<size_t>(vocab) + 2] = 9.0f;
    logits[3 * static_cast<size_t>(vocab) + 5] = 80.0f;
    Tensor g = gpu_tensor(*b.gpu, logits, {rows, vocab}, DType::kF32);
    std::vector<LogprobQuery> queries;
    for (int i = 0; i < 40; ++i) {  // rows out of order and repeated; targets likely, unlikely and -inf
      queries.push_back({(i * 5) % rows, static_cast<int32_t>(rng() % static_cast<unsigned>(vocab))});
    }
    queries.push_back({2, 0});  // a -inf logit: -inf logprob
    queries.push_back({4, vocab / 2});
    // Then the sampler's: the chosen tokens' logprobs, computed with the selection (greedy and drawn; some rows
    // without logprobs, whose answers are not read).
    std::vector<SampleRequest> reqs(12);
    for (size_t i = 0; i < reqs.size(); ++i) {
      reqs[i].row = static_cast<int32_t>(i % rows);
      reqs[i].temperature = i % 2 == 0 ? 0.0f : 0.7f;
      reqs[i].seed = 40 + i;
      reqs[i].logprobs = i % 4 == 3 ? -1 : static_cast<int32_t>(i % 3) * 10;
    }
    Tensor device_ids = Tensor::empty({static_cast<int64_t>(reqs.size())}, DType::kI32, b.gpu->allocator()).value();
    auto host = b.gpu->allocate_host(reqs.size() * sizeof(int32_t)).value();
    REQUIRE(b.gpu->sample(g, reqs, {}, device_ids, static_cast<int32_t*>(host.get())).is_ok());
    REQUIRE(b.gpu->wait_samples().is_ok());
    std::vector<TokenLogprob> chosen(9);
    REQUIRE(b.gpu->sampled_logprobs(chosen).is_ok());
    std::vector<TokenLogprob> wrong_count(3);
    CHECK_FALSE(b.gpu->sampled_logprobs(wrong_count).is_ok());
    size_t j = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i].logprobs < 0) continue;
      const int32_t id = static_cast<const int32_t*>(host.get())[i];
      INFO("vocab " << vocab << ", sampled request " << i << ", token " << id);
      const TokenLogprob want = cpu::token_logprob(
          {logits.data() + static_cast<size_t>(reqs[i].row) * vocab, static_cast<size_t>(vocab)}, id, reqs[i].logprobs);
      const TokenLogprob& got = chosen[j++];
      CHECK(got.token == id);
      CHECK(close(got.logprob, want.logprob));
      REQUIRE(got.top.size() == want.top.size());
      for (size_t t = 0; t < want.top.size(); ++t) {
        CHECK(got.top[t].first == want.top[t].first);
        CHECK(close(got.top[t].second, want.top[t].second));
      }
    }
    for (const int k : {0, 1, 5, kMaxTopLogprobs}) {
      INFO("vocab " << vocab << ", top " << k);
      std::vector<TokenLogprob> got(queries.size());
      REQUIRE(b.gpu->token_logprobs(g, queries, k, got).is_ok());
      for (size_t i = 0; i < queries.size(); ++i) {
        const LogprobQuery& q = queries[i];
        INFO("query " << i << ": row " << q.row << ", token " << q.token);
        const TokenLogprob want = cpu::token_logprob(
            {logits.data() + static_cast<size_t>(q.row) * vocab, static_cast<size_t>(vocab)}, q.token, k);
        CHECK(got[i].token == q.token);
        CHECK(close(got[i].logprob, want.logprob));
        REQUIRE(got[i].top.size() == want.top.size());
        for (size_t j = 0; j < want.top.size(); ++j) {
          CHECK(got[i].top[j].first == want.top[j].first);
          CHECK(close(got[i].top[j].second, want.top[j].second));
        }
      }
    }
  }
}

TEST_CASE("the CUDA engine tracks transformers' float32 logprobs on the parity checkpoints", "[cuda]") {
  if (cuda::device_count() == 0) SKIP("no CUDA GPU visible: CUDA tests skipped");
  for (const char* name :
       {"llama3-gqa-tied-ropescaled", "llama3-mha-untied", "qwen3-gqa-tied-headdim32", "qwen3-mha-untied-headdim24"}) {
    const std::string dir = std::string(PHOTON_TEST_DATA_DIR) + "/parity/" + name;
    const auto ref = nlohmann::json::parse(read_text_file(dir + "/reference.json").value());
    EngineConfig c;
    c.model = dir;
    c.device = "cuda";
    c.max_model_len = 128;
    c.num_kv_blocks = 64;
    auto engine = Engine::create(c);
    REQUIRE(engine.is_ok());
    double sum = 0;
    int count = 0, greedy_equal = 0, greedy_total = 0;
    for (const auto& cs : ref["cases"]) {
      SamplingParams p;
      p.temperature = 0.0f;
      p.max_tokens = 24;
      p.ignore_eos = true;
      p.prompt_logprobs = 0;
      const uint64_t id = (*engine)->submit(cs["prompt_ids"].get<std::vector<int32_t>>(), p).value();
      std::vector<int32_t> tokens;
      std::vector<TokenLogprob> plp;
      while ((*engine)->has_unfinished_requests()) {
        REQUIRE((*engine)->step().is_ok());
        for (auto& e : (*engine)->poll()) {
          if (e.request_id != id) continue;
          tokens.insert(tokens.end(), e.token_ids.begin(), e.token_ids.end());
          plp.insert(plp.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
        }
      }
      REQUIRE(plp.size() == cs["prompt_ids"].size() - 1);
      for (size_t i = 0; i < plp.size(); ++i) {
        sum += std::abs(plp[i].logprob - cs["prompt_logprobs"][i + 1]["logprob"].get<double>());
        ++count;
      }
      const auto expected = cs["output_ids"].get<std::vector<int32_t>>();
      // Greedy ids may part only after a near-tie; count the agreeing prefix.
      size_t agree = 0;
      while (agree < expected.size() && agree < tokens.size() && tokens[agree] == expected[agree]) ++agree;
      greedy_equal += static_cast<int>(agree);
      greedy_total += static_cast<int>(expected.size());
    }
    const double mean = sum / count;
    WARN(name << ": mean |delta logprob| vs float32 = " << mean << ", greedy prefix " << greedy_equal << "/"
              << greedy_total);
    CHECK(mean < 0.05);
    CHECK(greedy_equal >= greedy_total / 2);
  }
}

namespace {

// Prompt logprobs (positions 1 ..) of one request through an engine built from `c`.
std::vector<float> engine_prompt_logprobs(EngineConfig c, const std::vector<int32_t>& prompt) {
  c.max_model_len = 128;
  c.num_kv_blocks = 64;
  auto engine = Engine::create(c);
  INFO(engine.status().to_string());
  REQUIRE(engine.is_ok());
  SamplingParams p;
  p.max_tokens = 1;
  p.prompt_logprobs = 0;
  REQUIRE((*engine)->submit(prompt, p).is_ok());
  std::vector<float> out;
  while ((*engine)->has_unfinished_requests()) {
    REQUIRE((*engine)->step().is_ok());
    for (auto& e : (*engine)->poll()) {
      for (const TokenLogprob& r : e.prompt_logprobs) out.push_back(r.logprob);
    }
  }
  return out;
}

double mean_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(double{a[i]} - b[i]);
  return sum / static_cast<double>(a.size());
}

}  // namespace

TEST_CASE("the CUDA engine's int8 weights track the CPU's ideal int8 within bf16's error", "[cuda]") {
  if (cuda::device_count() == 0) SKIP("no CUDA GPU visible: CUDA tests skipped");
  for (const char* name : {"llama3-gqa-tied-ropescaled", "qwen3-mha-untied-headdim24"}) {
    const std::string dir = std::string(PHOTON_TEST_DATA_DIR) + "/parity/" + name;
    const auto ref = nlohmann::json::parse(read_text_file(dir + "/reference.json").value());
    const auto prompt = ref["cases"][0]["prompt_ids"].get<std::vector<int32_t>>();
    for (const int32_t group : {32, 128}) {
      EngineConfig c;
      c.model = dir;
      c.quantization = "int8";
      c.group_size = group;
      c.quantize_lm_head = group == 32;
      const auto cpu = engine_prompt_logprobs(c, prompt);
      c.device = "cuda";
      const auto gpu = engine_prompt_logprobs(c, prompt);
      const double mean = mean_abs_diff(gpu, cpu);
      WARN(name << " int8 group " << group << ": mean |delta logprob| CUDA vs CPU = " << mean);
      CHECK(mean < 0.05);  // the bf16-vs-float32 bound of the test above
      // One token a step: every matmul then has one activation row, as in decode (the GEMV's integer form).
      c.max_num_batched_tokens = 1;
      const auto one_row = engine_prompt_logprobs(c, prompt);
      const double one_row_mean = mean_abs_diff(one_row, cpu);
      WARN(name << " int8 group " << group
                << ", one token a step: mean |delta logprob| CUDA vs CPU = " << one_row_mean);
      CHECK(one_row_mean < 0.05);
    }
  }
}

TEST_CASE("an int8 checkpoint served on the GPU tracks the CPU serving it", "[cuda]") {
  if (cuda::device_count() == 0) SKIP("no CUDA GPU visible: CUDA tests skipped");
  const std::string dir = std::string(PHOTON_TEST_DATA_DIR) + "/parity/llama3-mha-untied";
  const std::string out = (std::filesystem::temp_directory_path() / "photon-cuda-int8-checkpoint").string();
  QuantizeOptions q;
  q.model = dir;
  q.out = out;
  q.group_size = 32;
  q.quantize_lm_head = true;
  REQUIRE(quantize_checkpoint(q).is_ok());
  const auto ref = nlohmann::json::parse(read_text_file(dir + "/reference.json").value());
  const auto prompt = ref["cases"][2]["prompt_ids"].get<std::vector<int32_t>>();
  REQUIRE(prompt.size() > 8);  // the prompt's matmuls take the widened-weights GEMM path
  EngineConfig c;
  c.model = out;
  const auto cpu = engine_prompt_logprobs(c, prompt);
  c.device = "cuda";
  const auto gpu = engine_prompt_logprobs(c, prompt);
  CHECK(mean_abs_diff(gpu, cpu) < 0.05);
  std::filesystem::remove_all(out);
}

TEST_CASE("decode steps replayed as CUDA graphs match eager steps", "[cuda]") {
  if (cuda::device_count() == 0) SKIP("no CUDA GPU visible: CUDA tests skipped");
  const std::string dir = std::string(PHOTON_TEST_DATA_DIR) + "/parity/llama3-gqa-tied-ropescaled";
  auto run = [&](bool eager) {
    EngineConfig c;
    c.model = dir;
    c.device = "cuda";
    c.max_model_len = 96;
    c.num_kv_blocks = 128;
    c.enforce_eager = eager;
    auto engine = std::move(Engine::create(c).value());
    std::map<uint64_t, std::vector<int32_t>> out;
    std::mt19937 rng(5);
    SamplingParams p;
    p.max_tokens = 30;
    p.ignore_eos = true;
    p.temperature = 0.7f;
    p.seed = 11;
    // Batches of changing size (requests join and leave) exercise several graph buckets and their padding.
    for (int i = 0; i < 11; ++i) {
      std::vector<int32_t> prompt(static_cast<size_t>(3 + i * 5));
      for (auto& t : prompt) t = static_cast<int32_t>(rng() % 1000);
      p.max_tokens = 10 + 3 * i;
      const uint64_t id = engine->submit(prompt, p).value();
      out[id];
      REQUIRE(engine->step().is_ok());
    }
    while (engine->has_unfinished_requests()) {
      REQUIRE(engine->step().is_ok());
      for (auto& e : engine->poll())
        out[e.request_id].insert(out[e.request_id].end(), e.token_ids.begin(), e.token_ids.end());
    }
    for (auto& e : engine->poll())
      out[e.request_id].insert(out[e.request_id].end(), e.token_ids.begin(), e.token_ids.end());
    return out;
  };
  const auto eager = run(true), graphs = run(false);
  REQUIRE(eager.size() == graphs.size());
  size_t same = 0, total = 0;
  for (const auto& [id, tokens] : eager) {
    const auto& other = graphs.at(id);
    REQUIRE(other.size() == tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) same += tokens[i] == other[i];
    total += tokens.size();
  }
  WARN("graph vs eager: " << same << "/" << total << " tokens equal");
  CHECK(same * 10 >= total * 9);  // bf16 GEMMs of padded batches may round differently; near-ties may flip
}

TEST_CASE("device allocations failing anywhere in loading are clean out-of-memory errors", "[cuda]") {
  if (cuda::device_count() == 0) SKIP("no CUDA GPU visible: CUDA tests skipped");
  const std::string model = std::string(PHOTON_TEST_DATA_DIR) + "/parity/llama3-mha-untied";
  // Weights, decoder workspace and KV cache: everything an engine keeps on the device before its first step (in
  // `kept`, bytes). Loading also takes scratch for timing kernel choices, for a while; that is optional (under a
  // budget it does not fit, nothing is timed), so the budgets below are fractions of what is kept, not of the peak.
  auto build = [&](Backend& gpu, size_t* kept = nullptr) -> Status {
    PHOTON_ASSIGN_OR_RETURN(LoadedModel m, load_model({model}, gpu));
    PHOTON_ASSIGN_OR_RETURN(auto decoder, Decoder::create(m.config, std::move(m.weights), gpu, DecoderLimits{}));
    PHOTON_ASSIGN_OR_RETURN(auto kv, PagedKvCache::create(m.config, gpu, 64, 16, DType::kBF16));
    if (kept != nullptr) *kept = gpu.allocator().bytes_in_use();
    return Status::ok();
  };
  size_t needed = 0;
  {
    auto gpu = make_cuda_backend(0).value();
    REQUIRE(build(*gpu, &needed).is_ok());
  }
  for (size_t k = 0; k < 16; ++k) {
    const size_t limit = needed * k / 16;
    INFO("device budget " << limit << " of " << needed << " bytes");
    auto gpu = make_cuda_backend(0, limit);
    if (!gpu) {  // the backend's own workspaces did not fit
      CHECK(gpu.status().code() == StatusCode::kOutOfMemory);
      continue;
    }
    const size_t base = (*gpu)->allocator().bytes_in_use();
    CHECK(build(**gpu).code() == StatusCode::kOutOfMemory);
    CHECK((*gpu)->allocator().bytes_in_use() == base);  // what was taken before the failure was given back
  }
}

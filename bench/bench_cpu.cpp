// CPU speed against this machine's memory bandwidth, measured in the same run:
//   memcpy of a large buffer            -> bandwidth (bytes read + written per second)
//   sum over a large buffer              -> read-only bandwidth
//   bf16 and int8 GEMV (batch-1 matmul)  -> weight bytes streamed per second (int8: values and scales), from memory
//   dummy:llama-3.2-1b decode, batch 1   -> tokens/s, and weight bytes per token / bandwidth as the roofline
//                                           (bf16, and int8 projections in groups of 128)
//   f32 multiply-adds on every thread    -> this machine's f32 FMA peak on the active kernel path (FLOP/s)
//   bf16 and int8 GEMM at prompt shapes  -> FLOP/s of cpu::matmul(_int8) for 512 tokens, against that peak
// Every figure is for cpu::active_isa() (PHOTON_CPU_ISA=avx2 or portable tries a lower path).
// Run: build/bin/photon_bench_cpu [--benchmark_filter=...], or scripts/cpu-bench.sh for the roofline summary.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "cpu/isa.hpp"
#include "cpu/kernels.hpp"
#include "models/decoder.hpp"
#include "models/model_loader.hpp"

namespace photon {
namespace {

// Buffers several times the largest last-level caches (server CPUs have several hundred MiB of L3).
constexpr size_t kCopyBytes = size_t{1} << 30;  // each of memcpy's source and destination
constexpr size_t kReadBytes = size_t{4} << 30;

void BM_MemcpyBandwidth(benchmark::State& state) {
  std::vector<char> src(kCopyBytes, 1), dst(kCopyBytes, 0);
  const auto copy = [&] {
    // Split across threads like the kernels are, so both measure the same memory system.
    const int64_t chunks = 64;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const size_t part = kCopyBytes / chunks;
      std::memcpy(dst.data() + c * part, src.data() + c * part, part);
    }
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  };
  copy();  // untimed: a VM can run the first pass over new pages at a fraction of the speed
  for (auto _ : state) copy();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(2 * kCopyBytes));
}
BENCHMARK(BM_MemcpyBandwidth)->Unit(benchmark::kMillisecond)->UseRealTime();

// Read-only streaming (a sum over a large buffer): the bound a GEMV, which only reads weights, can approach. Each
// thread sums its contiguous share with the widest loads of the active path into independent accumulators, so the
// loads, not the adds, are the limit (the portable loop, built for the baseline ISA, would measure SSE2's adds).
constexpr int kReadChains = 8;
__attribute__((target("avx512f"))) float read_sum_avx512(const float* p, int64_t n) {
  __m512 acc[kReadChains];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t i = 0; i + 16 * kReadChains <= n; i += 16 * kReadChains)
    for (int c = 0; c < kReadChains; ++c) acc[c] = _mm512_add_ps(acc[c], _mm512_loadu_ps(p + i + 16 * c));
  for (int c = 1; c < kReadChains; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc[0]);
  return std::accumulate(lanes, lanes + 16, 0.0f);
}
__attribute__((target("avx2"))) float read_sum_avx2(const float* p, int64_t n) {
  __m256 acc[kReadChains];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int64_t i = 0; i + 8 * kReadChains <= n; i += 8 * kReadChains)
    for (int c = 0; c < kReadChains; ++c) acc[c] = _mm256_add_ps(acc[c], _mm256_loadu_ps(p + i + 8 * c));
  for (int c = 1; c < kReadChains; ++c) acc[0] = _mm256_add_ps(acc[0], acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  return std::accumulate(lanes, lanes + 8, 0.0f);
}
float read_sum_portable(const float* p, int64_t n) {
  constexpr int64_t kLanes = 64;  // independent sums, so the adds vectorise and never wait on each other
  float acc[kLanes] = {};
  for (int64_t i = 0; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += p[i + l];
  }
  return std::accumulate(acc, acc + kLanes, 0.0f);
}

void BM_ReadBandwidth(benchmark::State& state) {
  const cpu::Isa isa = std::min(cpu::active_isa(), cpu::Isa::kAvx512);
  std::vector<float> src(kReadBytes / sizeof(float), 1.0f);
  const auto n = static_cast<int64_t>(src.size());
  const auto sum = [&] {
    float total = 0.0f;
#pragma omp parallel reduction(+ : total)
    {
      const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t begin = n * t / threads, end = n * (t + 1) / threads;
      const float* p = src.data() + begin;
      total += isa == cpu::Isa::kAvx512 ? read_sum_avx512(p, end - begin)
               : isa == cpu::Isa::kAvx2 ? read_sum_avx2(p, end - begin)
                                        : read_sum_portable(p, end - begin);
    }
    return total;
  };
  benchmark::DoNotOptimize(sum());  // untimed: a VM can run the first pass over new pages at a fraction of the speed
  for (auto _ : state) benchmark::DoNotOptimize(sum());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kReadBytes));
  state.SetLabel(std::string(cpu::isa_name(isa)));
}
BENCHMARK(BM_ReadBandwidth)->Unit(benchmark::kMillisecond)->UseRealTime();

// Independent chains of vector multiply-adds, enough to cover the FMA latency on two ports: FLOP per call =
// 2 * lanes * kChains * iterations.
constexpr int kChains = 12;
__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t iterations) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  alignas(64) float lanes[16];
  float sum = 0.0f;
  for (int c = 0; c < kChains; ++c) {
    _mm512_store_ps(lanes, acc[c]);
    for (float v : lanes) sum += v;
  }
  return sum;
}
__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t iterations) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  alignas(32) float lanes[8];
  float sum = 0.0f;
  for (int c = 0; c < kChains; ++c) {
    _mm256_store_ps(lanes, acc[c]);
    for (float v : lanes) sum += v;
  }
  return sum;
}
float fma_chains_portable(int64_t iterations) {
  float acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = static_cast<float>(c);
  for (int64_t i = 0; i < iterations; ++i)
    for (float& v : acc) v = v * 0.999f + 0.001f;
  float sum = 0.0f;
  for (float v : acc) sum += v;
  return sum;
}

void BM_FmaPeak(benchmark::State& state) {
  const cpu::Isa isa = std::min(cpu::active_isa(), cpu::Isa::kAvx512);  // the FMA peak: AMX tiles are not FMAs
  const int lanes = isa == cpu::Isa::kAvx512 ? 16 : isa == cpu::Isa::kAvx2 ? 8 : 1;
  constexpr int64_t kIterations = int64_t{1} << 24;
  int threads = 1;
  for (auto _ : state) {
    float total = 0.0f;
#pragma omp parallel reduction(+ : total)
    {
#pragma omp single
      threads = omp_get_num_threads();
      total += isa == cpu::Isa::kAvx512 ? fma_chains_avx512(kIterations)
               : isa == cpu::Isa::kAvx2 ? fma_chains_avx2(kIterations)
                                        : fma_chains_portable(kIterations);
    }
    benchmark::DoNotOptimize(total);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 2 * lanes * kChains * kIterations * threads);
  state.SetLabel(std::string(cpu::isa_name(isa)));
}
BENCHMARK(BM_FmaPeak)->Unit(benchmark::kMillisecond)->UseRealTime();

// A prompt's projections: 512 tokens against a [n, k] bf16 weight (items = FLOP).
void BM_MatmulBf16Gemm(benchmark::State& state) {
  const int64_t m = 512, n = state.range(0), k = state.range(1);
  std::vector<uint16_t> w(static_cast<size_t>(n * k));
  std::mt19937 rng(2);
  for (auto& v : w) v = f32_to_bf16(static_cast<float>(rng() % 1000) / 1000.0f - 0.5f);
  std::vector<float> x(static_cast<size_t>(m * k), 0.01f), out(static_cast<size_t>(m * n));
  for (auto _ : state) {
    cpu::matmul(x.data(), m, k, k, w.data(), DType::kBF16, n, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 2 * m * n * k);
  state.SetLabel(std::string(cpu::isa_name(cpu::active_isa())));
}
BENCHMARK(BM_MatmulBf16Gemm)->Args({2048, 2048})->Args({16384, 2048})->Unit(benchmark::kMillisecond)->UseRealTime();

// matmul_int8 of m tokens against n x k int8 weights in groups of 128 (items = FLOP); the weights stay in cache
// when they fit.
void run_matmul_int8(benchmark::State& state, int64_t m, int64_t n, int64_t k) {
  const int64_t group = 128, groups = (k + group - 1) / group;
  std::vector<int8_t> w(static_cast<size_t>(n * k));
  std::mt19937 rng(2);
  for (auto& v : w) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  std::vector<float> scales(static_cast<size_t>(n * groups), 0.01f);
  std::vector<float> x(static_cast<size_t>(m * k), 0.01f), out(static_cast<size_t>(m * n));
  for (auto _ : state) {
    cpu::matmul_int8(x.data(), m, k, k, w.data(), scales.data(), group, n, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 2 * m * n * k);
  state.SetLabel(std::string(cpu::isa_name(cpu::active_isa())));
}

// The same prompt shapes with int8 weights: the dequantization the GEMM adds.
void BM_MatmulInt8Gemm(benchmark::State& state) { run_matmul_int8(state, 512, state.range(0), state.range(1)); }
BENCHMARK(BM_MatmulInt8Gemm)->Args({2048, 2048})->Args({16384, 2048})->Unit(benchmark::kMillisecond)->UseRealTime();

// matmul_int8 for a few tokens (decode batches, short prompts: where the paths hand over); weights in cache after
// the first iteration, so this is the compute side.
void BM_MatmulInt8Tokens(benchmark::State& state) {
  run_matmul_int8(state, state.range(0), state.range(1), state.range(2));
}
BENCHMARK(BM_MatmulInt8Tokens)
    ->ArgsProduct({{2, 4, 8, 12, 16, 32, 48, 64, 128, 512}, {2048}, {8192}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Copies of a GEMV's weights cycled through, so that together they exceed the last-level cache (hundreds of MiB on
// server CPUs) and every call streams from memory, as a decode step does.
int64_t copies_beyond_cache(int64_t bytes_per_copy) {
  constexpr int64_t kBeyondCache = int64_t{1} << 30;
  return (kBeyondCache + bytes_per_copy - 1) / bytes_per_copy;
}

void BM_MatmulBf16Gemv(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), copies = copies_beyond_cache(n * k * 2);
  std::vector<uint16_t> w(static_cast<size_t>(copies * n * k));
  std::mt19937 rng(1);
  for (int64_t i = 0; i < n * k; ++i)
    w[static_cast<size_t>(i)] = f32_to_bf16(static_cast<float>(rng() % 1000) / 1000.0f - 0.5f);
  for (int64_t c = 1; c < copies; ++c) std::copy_n(w.begin(), n * k, w.begin() + c * n * k);
  std::vector<float> x(static_cast<size_t>(k), 0.01f), out(static_cast<size_t>(n));
  int64_t copy = 0;
  for (auto _ : state) {
    cpu::matmul(x.data(), 1, k, k, w.data() + copy * n * k, DType::kBF16, n, out.data());
    benchmark::DoNotOptimize(out.data());
    copy = (copy + 1) % copies;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * k * 2);
}
BENCHMARK(BM_MatmulBf16Gemv)->Args({8192, 2048})->Args({128256, 2048})->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MatmulInt8Gemv(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), group = 128, groups = (k + group - 1) / group;
  const int64_t copies = copies_beyond_cache(n * k + n * groups * 4);
  std::vector<int8_t> w(static_cast<size_t>(copies * n * k));
  std::mt19937 rng(1);
  for (int64_t i = 0; i < n * k; ++i)
    w[static_cast<size_t>(i)] = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  for (int64_t c = 1; c < copies; ++c) std::copy_n(w.begin(), n * k, w.begin() + c * n * k);
  std::vector<float> scales(static_cast<size_t>(copies * n * groups), 0.01f);
  std::vector<float> x(static_cast<size_t>(k), 0.01f), out(static_cast<size_t>(n));
  int64_t copy = 0;
  for (auto _ : state) {
    cpu::matmul_int8(x.data(), 1, k, k, w.data() + copy * n * k, scales.data() + copy * n * groups, group, n,
                     out.data());
    benchmark::DoNotOptimize(out.data());
    copy = (copy + 1) % copies;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * (n * k + n * groups * 4));
}
BENCHMARK(BM_MatmulInt8Gemv)->Args({8192, 2048})->Args({128256, 2048})->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_DecodeDummyModel(benchmark::State& state, const char* model, bool int8) {
  auto backend = make_cpu_backend(default_cpu_allocator());
  ModelSource source{model};
  source.quantization.int8 = int8;
  auto loaded = load_model(source, *backend);
  if (!loaded) {
    state.SkipWithError(loaded.status().to_string().c_str());
    return;
  }
  const ModelConfig config = loaded->config;
  const uint64_t weight_bytes = loaded->weights.bytes;
  // Bytes a decode step must read: every weight except the embedding table, of which one row is read.
  const uint64_t step_bytes =
      weight_bytes -
      (config.tie_word_embeddings ? 0 : static_cast<uint64_t>(config.vocab_size * config.hidden_size * 2));
  auto decoder = Decoder::create(config, std::move(loaded->weights), *backend, {64, 1, 1, 64}).value();
  const int64_t context = 64;
  auto kv = PagedKvCache::create(config, *backend, 64, 16, DType::kF32).value();
  std::vector<int32_t> blocks(64);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::vector<int32_t> prompt(static_cast<size_t>(context), 1000);
  ForwardBatch batch;
  batch.add_sequence(prompt, 0, blocks, 16, ForwardBatch::Logits::kLast);
  (void)decoder->forward(batch, kv);
  int32_t pos = static_cast<int32_t>(context);
  for (auto _ : state) {
    const int32_t token = 1000 + pos % 100;
    batch.clear();
    batch.add_sequence(std::span(&token, 1), pos, blocks, 16, ForwardBatch::Logits::kLast);
    auto logits = decoder->forward(batch, kv);
    benchmark::DoNotOptimize(logits);
    if (++pos >= 64 * 16) pos = static_cast<int32_t>(context);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * step_bytes));
  state.counters["weight_bytes_per_token"] = static_cast<double>(step_bytes);
}
BENCHMARK_CAPTURE(BM_DecodeDummyModel, llama_3_2_1b, "dummy:llama-3.2-1b", false)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(5.0);
BENCHMARK_CAPTURE(BM_DecodeDummyModel, llama_3_2_1b_int8, "dummy:llama-3.2-1b", true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(5.0);

}  // namespace
}  // namespace photon

BENCHMARK_MAIN();

// Tensor parallelism on the CPU: ranks are threads exchanging sums and gathers in memory, so the sharding math
// (column/row-parallel projections, split and replicated KV heads, vocabulary-parallel embedding and LM head) is
// checked here against the unsharded model; the GPU tests run the same decoder over NCCL.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <photon/engine.hpp>

#include "core/mapped_file.hpp"
#include "core/safetensors.hpp"
#include "core/safetensors_writer.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/thread_communicator.hpp"
#include "models/decoder.hpp"
#include "models/model_loader.hpp"
#include "models/presets.hpp"
#include "models/tensor_parallel.hpp"
#include "reference.hpp"
#if defined(PHOTON_WITH_NCCL)
#include "cuda/cuda_backend.hpp"
#include "cuda/nccl_communicator.hpp"
#endif

using namespace photon;
using nlohmann::json;
using photon::test::max_abs_diff;

namespace {

const std::string kParity = std::string(PHOTON_TEST_DATA_DIR) + "/parity/";

ModelConfig config_of(int64_t heads, int64_t kv_heads, int64_t intermediate, int64_t vocab) {
  json j = {{"architectures", {"Qwen3ForCausalLM"}}, {"vocab_size", vocab},    {"hidden_size", 32},
            {"intermediate_size", intermediate},     {"num_hidden_layers", 2}, {"num_attention_heads", heads},
            {"num_key_value_heads", kv_heads},       {"head_dim", 8},          {"max_position_embeddings", 128}};
  return parse_model_config(j.dump()).value();
}

std::vector<float> to_vector(Backend& backend, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  backend.copy_to_host(t, v.data(), v.size() * sizeof(float));
  return v;
}

// Every rank of one model: its backend, communicator, decoder and cache. CPU ranks are threads; GPU ranks (given
// their backends) talk through NCCL.
struct Group {
  Group(const std::string& model, int size) {
    for (int r = 0; r < size; ++r) backends.push_back(make_cpu_backend(default_cpu_allocator()));
    if (size > 1) comms = make_thread_communicators(size);
    build(model, DType::kF32);
  }
  Group(const std::string& model, std::vector<std::unique_ptr<Backend>> gpus,
        std::vector<std::unique_ptr<Communicator>> nccl)
      : backends(std::move(gpus)), comms(std::move(nccl)) {
    build(model, DType::kBF16);
  }

  void build(const std::string& model, DType kv_dtype) {
    const int size = static_cast<int>(backends.size());
    ModelSource source{model};
    config = load_config(source).value();
    REQUIRE(check_tensor_parallel(config, size).is_ok());
    for (int r = 0; r < size; ++r) {
      Backend& backend = *backends[static_cast<size_t>(r)];
      const TensorParallelShard shard = make_shard(config, r, size);
      auto w = load_model_weights(source, config, backend, shard);
      REQUIRE(w.is_ok());
      auto d = Decoder::create(config, std::move(*w), backend, DecoderLimits{64, 8, 64, 256},
                               size > 1 ? comms[static_cast<size_t>(r)].get() : nullptr);
      REQUIRE(d.is_ok());
      decoders.push_back(std::move(*d));
      auto kv = PagedKvCache::create(shard_config(config, shard), backend, 64, 4, kv_dtype);
      REQUIRE(kv.is_ok());
      caches.push_back(std::move(*kv));
    }
  }

  // Runs the batch on every rank at once (rank 0 on this thread); returns each rank's logits.
  std::vector<std::vector<float>> run(const ForwardBatch& batch) {
    std::vector<std::vector<float>> out(decoders.size());
    std::vector<Status> status(decoders.size());
    auto one = [&](size_t r) {
      status[r] = backends[r]->make_current();
      if (!status[r].is_ok()) return;
      auto logits = decoders[r]->forward(batch, caches[r]);
      status[r] = logits.status();
      if (logits) out[r] = to_vector(*backends[r], *logits);
    };
    std::vector<std::thread> threads;
    for (size_t r = 1; r < decoders.size(); ++r) threads.emplace_back(one, r);
    one(0);
    for (auto& t : threads) t.join();
    for (const Status& s : status) {
      INFO(s.to_string());
      REQUIRE(s.is_ok());
    }
    return out;
  }

  // Destroyed in reverse: caches and decoders, then communicators (which flush their backends' streams), then
  // the backends.
  ModelConfig config;
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::unique_ptr<Decoder>> decoders;
  std::vector<PagedKvCache> caches;
};

// A prefill of two sequences (every row's logits of one), then a decode step of both.
std::vector<ForwardBatch> prefill_then_decode() {
  std::mt19937 rng(11);
  std::vector<int32_t> a(13), b(5);
  for (auto& t : a) t = static_cast<int32_t>(rng() % 1000);
  for (auto& t : b) t = static_cast<int32_t>(rng() % 1000);
  const std::vector<int32_t> blocks_a = {0, 1, 2, 3, 4}, blocks_b = {9, 7, 8};
  std::vector<ForwardBatch> steps(2);
  steps[0].add_sequence(a, 0, blocks_a, 4, ForwardBatch::Logits::kAll);
  steps[0].add_sequence(b, 0, blocks_b, 4, ForwardBatch::Logits::kLast);
  steps[1].add_sequence(std::vector<int32_t>{17}, 13, blocks_a, 4, ForwardBatch::Logits::kLast);
  steps[1].add_sequence(std::vector<int32_t>{3}, 5, blocks_b, 4, ForwardBatch::Logits::kLast);
  return steps;
}

}  // namespace

TEST_CASE("shards split heads, KV heads, MLP features and the vocabulary") {
  const ModelConfig c = config_of(8, 2, 48, 1001);
  // Two ranks: each holds one of the two KV heads.
  const TensorParallelShard a = make_shard(c, 1, 2);
  CHECK(a.q_head_begin == 4);
  CHECK(a.num_heads == 4);
  CHECK(a.kv_head_begin == 1);
  CHECK(a.num_kv_heads == 1);
  CHECK(a.intermediate_begin == 24);
  CHECK(a.intermediate_size == 24);
  CHECK(a.vocab_begin == 501);
  CHECK(a.vocab_rows == 501);
  CHECK(a.vocab_begin + a.vocab_rows == c.vocab_size + 1);  // the last row is padding
  // Four ranks over two KV heads: ranks 0-1 keep head 0, ranks 2-3 head 1 (the heads their queries read).
  for (int r = 0; r < 4; ++r) {
    const TensorParallelShard s = make_shard(c, r, 4);
    CHECK(s.num_kv_heads == 1);
    CHECK(s.kv_head_begin == r / 2);
    CHECK(s.num_heads == 2);
  }
  const ModelConfig local = shard_config(c, make_shard(c, 0, 4));
  CHECK(local.num_heads == 2);
  CHECK(local.num_kv_heads == 1);
  CHECK(local.intermediate_size == 12);
  CHECK(local.vocab_size == 1001);
}

TEST_CASE("the 70B-class presets split over 2, 4 and 8 ranks") {
  for (const char* name : {"llama-3.1-70b", "qwen3-32b"}) {
    const ModelConfig c = dummy_preset_config(name).value();
    for (const int size : {2, 4, 8}) {
      INFO(name << " on " << size << " ranks");
      REQUIRE(check_tensor_parallel(c, size).is_ok());
      const TensorParallelShard last = make_shard(c, size - 1, size);
      CHECK(last.num_heads == 64 / size);
      CHECK(last.num_kv_heads == 8 / size);
      CHECK(last.kv_head_begin == 8 - 8 / size);
      CHECK(last.intermediate_size * size == c.intermediate_size);
      CHECK(last.vocab_begin + last.vocab_rows >= c.vocab_size);
    }
    // 16 ranks (two hosts of eight GPUs): 4 query heads each, the 8 KV heads replicated twice.
    REQUIRE(check_tensor_parallel(c, 16).is_ok());
    CHECK(make_shard(c, 15, 16).num_kv_heads == 1);
    CHECK(make_shard(c, 15, 16).kv_head_begin == 7);
  }
}

TEST_CASE("a model that does not split over the ranks is an error naming the dimension") {
  CHECK(check_tensor_parallel(config_of(8, 2, 48, 1000), 8).is_ok());
  const Status heads = check_tensor_parallel(config_of(6, 2, 48, 1000), 4);
  CHECK(heads.code() == StatusCode::kInvalidArgument);
  CHECK(heads.message().find("6 attention heads") != std::string::npos);
  const Status kv = check_tensor_parallel(config_of(12, 3, 48, 1000), 2);
  CHECK(kv.message().find("3 KV heads") != std::string::npos);
  const Status mlp = check_tensor_parallel(config_of(8, 2, 50, 1000), 4);
  CHECK(mlp.message().find("50 features") != std::string::npos);
  CHECK(check_tensor_parallel(config_of(8, 2, 48, 1000), 0).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a rank's dummy weights are exactly its slice of the unsharded weights") {
  const ModelConfig c = config_of(4, 2, 24, 101);
  auto backend = make_cpu_backend(default_cpu_allocator());
  const ModelWeights whole = make_dummy_weights(c, *backend, 7, DType::kF32).value();
  const TensorParallelShard s = make_shard(c, 1, 2);
  const ModelWeights part = make_dummy_weights(c, *backend, 7, DType::kF32, s).value();
  const int64_t h = c.hidden_size, hd = c.head_dim;
  auto at = [](const Tensor& t, int64_t r, int64_t col) { return t.data<float>()[r * t.size(1) + col]; };
  const LayerWeights& w = whole.layers[1];
  const LayerWeights& p = part.layers[1];
  // Fused q/k/v: the whole holds 4 q heads, 2 k heads, 2 v heads; rank 1 holds q heads 2-3, k head 1, v head 1.
  REQUIRE(w.qkv_proj.values.size(0) == 8 * hd);
  REQUIRE(p.qkv_proj.values.size(0) == 4 * hd);
  REQUIRE(p.o_proj.values.size(1) == 2 * hd);
  REQUIRE(p.down_proj.values.size(1) == 12);
  const auto whole_qkv_row = [&](int64_t r) {
    return r < 2 * hd ? 2 * hd + r : (r < 3 * hd ? 5 * hd + (r - 2 * hd) : 7 * hd + (r - 3 * hd));
  };
  for (int64_t r = 0; r < p.qkv_proj.values.size(0); ++r)
    for (int64_t col = 0; col < h; ++col)
      REQUIRE(at(p.qkv_proj.values, r, col) == at(w.qkv_proj.values, whole_qkv_row(r), col));
  // Fused gate/up: intermediate 24, rank 1 holds gate rows 12-23 and up rows 12-23.
  REQUIRE(p.gate_up_proj.values.size(0) == 24);
  for (int64_t r = 0; r < 24; ++r)
    for (int64_t col = 0; col < h; ++col)
      REQUIRE(at(p.gate_up_proj.values, r, col) == at(w.gate_up_proj.values, r < 12 ? 12 + r : 36 + (r - 12), col));
  for (int64_t r = 0; r < h; ++r) {
    for (int64_t col = 0; col < 2 * hd; ++col)
      REQUIRE(at(p.o_proj.values, r, col) == at(w.o_proj.values, r, 2 * hd + col));
    for (int64_t col = 0; col < 12; ++col)
      REQUIRE(at(p.down_proj.values, r, col) == at(w.down_proj.values, r, 12 + col));
  }
  // Vocabulary rows 51..101, the last one padding (zeros).
  REQUIRE(part.embed.values.size(0) == 51);
  for (int64_t col = 0; col < h; ++col) {
    REQUIRE(at(part.embed.values, 0, col) == at(whole.embed.values, 51, col));
    REQUIRE(at(part.embed.values, 49, col) == at(whole.embed.values, 100, col));
    REQUIRE(at(part.embed.values, 50, col) == 0.0f);
  }
  for (int64_t i = 0; i < h; ++i) REQUIRE(p.input_norm.data<float>()[i] == w.input_norm.data<float>()[i]);
}

TEST_CASE("sharded decoders over a checkpoint reproduce the unsharded logits") {
  // MHA and GQA, tied and untied LM heads, Llama and Qwen3; four ranks replicate the GQA models' two KV heads.
  const std::string model = GENERATE("llama3-gqa-tied-ropescaled", "llama3-mha-untied", "qwen3-gqa-tied-headdim32",
                                     "qwen3-mha-untied-headdim24");
  const int size = GENERATE(2, 4);
  INFO(model << " on " << size << " ranks");
  Group whole(kParity + model, 1), split(kParity + model, size);
  for (const ForwardBatch& batch : prefill_then_decode()) {
    const auto ref = whole.run(batch)[0];
    const auto got = split.run(batch);
    REQUIRE(ref.size() == static_cast<size_t>(batch.logits_indices.size() * 1000));
    for (size_t r = 0; r < got.size(); ++r) {
      INFO("rank " << r);
      CHECK(max_abs_diff(got[r], ref) < 1e-4);
    }
  }
}

TEST_CASE("a checkpoint sharded over several files loads rank by rank and reproduces the unsharded logits") {
  // The layout of the large models' checkpoints: model-0000i-of-0000n.safetensors and an index naming each
  // tensor's file. Every rank takes its slices from whichever file holds each tensor.
  const std::string model = GENERATE("llama3-gqa-tied-ropescaled", "qwen3-mha-untied-headdim24");
  const int size = GENERATE(2, 4);
  INFO(model << " on " << size << " ranks");
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("photon-tp-sharded-" + std::string(model) + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kParity + model + "/config.json", dir / "config.json");
  const auto whole_file = SafetensorsFile::open(kParity + model + "/model.safetensors").value();
  constexpr int kFiles = 3;
  std::vector<std::vector<SafetensorsTensor>> files(kFiles);
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  int next = 0;
  for (const SafetensorsEntry& e : whole_file.entries()) {
    const Tensor t = whole_file.tensor(e);
    const auto* bytes = static_cast<const unsigned char*>(t.raw());
    const int f = next++ % kFiles;
    files[static_cast<size_t>(f)].push_back({e.name, e.dtype, e.shape, {bytes, t.nbytes()}});
    index["weight_map"][e.name] = fmt::format("model-{:05d}-of-{:05d}.safetensors", f + 1, kFiles);
    index["metadata"]["total_size"] = index["metadata"]["total_size"].get<uint64_t>() + t.nbytes();
  }
  for (int f = 0; f < kFiles; ++f) {
    const auto path = dir / fmt::format("model-{:05d}-of-{:05d}.safetensors", f + 1, kFiles);
    REQUIRE(write_safetensors(path.string(), files[static_cast<size_t>(f)], {{"format", "pt"}}).is_ok());
  }
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  REQUIRE_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  {
    Group whole(kParity + model, 1), split(dir.string(), size);
    for (const ForwardBatch& batch : prefill_then_decode()) {
      const auto ref = whole.run(batch)[0];
      const auto got = split.run(batch);
      for (size_t r = 0; r < got.size(); ++r) {
        INFO("rank " << r);
        CHECK(max_abs_diff(got[r], ref) < 1e-4);
      }
    }
  }
  std::filesystem::remove_all(dir);
}

#if defined(PHOTON_WITH_NCCL)
TEST_CASE("GPU ranks over NCCL reproduce one GPU's logits within bf16 rounding", "[cuda][tp]") {
  const int gpus = cuda_device_count();
  if (gpus < 2) SKIP("tensor parallelism on GPUs needs at least 2 visible GPUs (" << gpus << " here)");
  const std::string model = GENERATE("llama3-gqa-tied-ropescaled", "qwen3-mha-untied-headdim24");
  const int size = GENERATE(2, 4);
  if (size > gpus) SKIP(size << " ranks need " << size << " GPUs");
  INFO(model << " on " << size << " GPUs");
  auto gpu_group = [&](int n) {
    std::vector<std::unique_ptr<Backend>> backends;
    std::vector<Backend*> raw;
    for (int r = 0; r < n; ++r) {
      backends.push_back(make_cuda_backend(r).value());
      raw.push_back(backends.back().get());
    }
    std::vector<std::unique_ptr<Communicator>> comms;
    if (n > 1) {
      auto made = make_nccl_communicators(raw, /*peer_all_reduce=*/true);
      INFO(made.status().to_string());
      REQUIRE(made.is_ok());
      comms = std::move(*made);
    }
    return std::make_unique<Group>(kParity + model, std::move(backends), std::move(comms));
  };
  auto whole = gpu_group(1);
  auto split = gpu_group(size);
  for (const ForwardBatch& batch : prefill_then_decode()) {
    const auto ref = whole->run(batch)[0];
    const auto got = split->run(batch);
    double mean = 0;
    for (size_t i = 0; i < ref.size(); ++i) mean += std::abs(got[0][i] - ref[i]);
    mean /= static_cast<double>(ref.size());
    // Partial sums are all-reduced in bf16, one more rounding than on one GPU: logits agree to bf16 precision.
    CHECK(mean < 0.02);
    CHECK(max_abs_diff(got[0], ref) < 0.25);
    for (size_t r = 1; r < got.size(); ++r) CHECK(got[r] == got[0]);  // every rank ends with the same logits
  }
}
// One NCCL group over the first `size` GPUs, with a way to run a body on every rank at once.
struct GpuRanks {
  explicit GpuRanks(int size) : ranks(static_cast<size_t>(size)) {
    std::vector<Backend*> raw;
    for (int r = 0; r < size; ++r) {
      backends.push_back(make_cuda_backend(r).value());
      raw.push_back(backends.back().get());
    }
    auto made = make_nccl_communicators(raw, /*peer_all_reduce=*/true);
    INFO(made.status().to_string());
    REQUIRE(made.is_ok());
    comms = std::move(*made);
  }
  // Runs `body` on every rank at once, one thread each; then checks the ranks' errors.
  void on_ranks(const std::function<void(size_t)>& body) {
    std::vector<Status> status(ranks);
    std::vector<std::thread> threads;
    for (size_t r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        status[r] = backends[r]->make_current();
        if (!status[r].is_ok()) return;
        body(r);
        backends[r]->synchronize();
        status[r] = comms[r]->take_error();
        if (status[r].is_ok()) status[r] = backends[r]->take_error();
      });
    }
    for (auto& t : threads) t.join();
    for (const Status& s : status) {
      INFO(s.to_string());
      REQUIRE(s.is_ok());
    }
  }
  size_t ranks;
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::unique_ptr<Communicator>> comms;
};

TEST_CASE("GPU all-reduce sums exactly on every path, eagerly and in replayed graphs", "[cuda][tp]") {
  const int gpus = cuda_device_count();
  if (gpus < 2) SKIP("tensor parallelism on GPUs needs at least 2 visible GPUs (" << gpus << " here)");
  const int size = GENERATE(2, 4);
  if (size > gpus) SKIP(size << " ranks need " << size << " GPUs");
  GpuRanks group(size);
  auto& backends = group.backends;
  auto& comms = group.comms;
  const size_t ranks = group.ranks;
  const auto on_ranks = [&](const std::function<void(size_t)>& body) { group.on_ranks(body); };

  // Byte counts around the peer path's limits: one vector, one 8 KB chunk, several chunks with a partial last one,
  // exactly 1 MiB, just over (NCCL), and messages that are not whole 16-byte vectors (NCCL). Small integers keep
  // every sum exact, so every path must give the exact result, on every rank.
  for (const DType dtype : {DType::kBF16, DType::kF32}) {
    for (const size_t bytes : {16, 8192, 3 * 8192 + 16, 1 << 20, (1 << 20) + 16, 24, 2000}) {
      const size_t esize = dtype_size(dtype);
      const auto elems = static_cast<int64_t>(bytes / esize);
      INFO(size << " ranks, " << elems << " " << dtype_name(dtype) << " elements");
      std::vector<std::vector<uint8_t>> inputs(ranks, std::vector<uint8_t>(bytes));
      std::vector<float> sum(static_cast<size_t>(elems), 0.0f);
      std::mt19937 rng(7);
      for (auto& in : inputs) {
        for (size_t i = 0; i < sum.size(); ++i) {
          const float v = static_cast<float>(static_cast<int>(rng() % 17) - 8);
          sum[i] += v;
          uint32_t bits = 0;
          std::memcpy(&bits, &v, 4);
          if (dtype == DType::kF32) {
            std::memcpy(in.data() + 4 * i, &bits, 4);
          } else {
            const auto half = static_cast<uint16_t>(bits >> 16);  // small integers are exact in bf16
            std::memcpy(in.data() + 2 * i, &half, 2);
          }
        }
      }
      auto value = [&](const std::vector<uint8_t>& out, size_t i) {
        uint32_t bits = 0;
        if (dtype == DType::kF32) {
          std::memcpy(&bits, out.data() + 4 * i, 4);
        } else {
          uint16_t half = 0;
          std::memcpy(&half, out.data() + 2 * i, 2);
          bits = static_cast<uint32_t>(half) << 16;
        }
        float v = 0;
        std::memcpy(&v, &bits, 4);
        return v;
      };
      std::vector<Tensor> xs;
      for (size_t r = 0; r < ranks; ++r) {
        REQUIRE(backends[r]->make_current().is_ok());
        xs.push_back(Tensor::empty({elems}, dtype, backends[r]->allocator()).value());
      }
      std::vector<std::vector<uint8_t>> out(ranks, std::vector<uint8_t>(bytes));
      auto check = [&](float factor) {
        for (size_t r = 0; r < ranks; ++r) {
          size_t wrong = 0, first = 0;
          for (size_t i = 0; i < sum.size(); ++i) {
            if (value(out[r], i) != sum[i] * factor && wrong++ == 0) first = i;
          }
          INFO("rank " << r << ": first wrong element " << first << " = " << value(out[r], first) << ", want "
                       << sum[first] * factor);
          REQUIRE(wrong == 0);
        }
      };
      // Eagerly, three times over (the peer path alternates its buffers from call to call).
      for (int round = 0; round < 3; ++round) {
        on_ranks([&](size_t r) {
          backends[r]->copy_to_device(inputs[r].data(), xs[r], bytes);
          comms[r]->all_reduce_sum(xs[r]);
          backends[r]->copy_to_host(xs[r], out[r].data(), bytes);
        });
        check(1.0f);
      }
      // Two all-reduces captured in a graph per rank, replayed three times: x ends as size^5 times the sum.
      std::vector<int> graph(ranks, -1);
      on_ranks([&](size_t r) {
        Backend& b = *backends[r];
        b.copy_to_device(inputs[r].data(), xs[r], bytes);
        b.synchronize();
        if (!b.begin_capture().is_ok()) return;
        comms[r]->all_reduce_sum(xs[r]);
        comms[r]->all_reduce_sum(xs[r]);
        auto id = b.end_capture();
        if (!id.is_ok()) return;
        graph[r] = *id;
        for (int k = 0; k < 3; ++k) {
          if (!b.launch_graph(graph[r]).is_ok()) return;
        }
        b.copy_to_host(xs[r], out[r].data(), bytes);
      });
      for (size_t r = 0; r < ranks; ++r) {
        REQUIRE(graph[r] >= 0);
        backends[r]->destroy_graph(graph[r]);
      }
      check(static_cast<float>(std::pow(size, 5)));
    }
  }
}
TEST_CASE("GPU all-reduce fused with the residual add and RMSNorm equals the two steps", "[cuda][tp]") {
  const int gpus = cuda_device_count();
  if (gpus < 2) SKIP("tensor parallelism on GPUs needs at least 2 visible GPUs (" << gpus << " here)");
  GpuRanks group(2);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto bf16_bits = [&](float v) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v, 4);
    return static_cast<uint16_t>(bits >> 16);
  };
  // Row counts and widths of decode steps (the fused kernel), and shapes it hands to the two steps (65 rows, a
  // width that is not a multiple of 8, one above 8192).
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 4096},  {3, 2048}, {64, 1024}, {8, 8192},
                                                           {65, 1024}, {2, 1004}, {1, 8200}};
  for (const auto& [rows, dim] : shapes) {
    INFO(rows << " x " << dim);
    const auto n = static_cast<size_t>(rows * dim);
    std::vector<std::vector<uint16_t>> x(group.ranks, std::vector<uint16_t>(n));
    std::vector<uint16_t> residual(n);
    std::vector<float> weight(static_cast<size_t>(dim));
    for (auto& xr : x)
      for (auto& v : xr) v = bf16_bits(normal(rng));
    for (auto& v : residual) v = bf16_bits(4.0f * normal(rng));
    for (auto& v : weight) v = 1.0f + 0.1f * normal(rng);
    // results[path][rank] = residual then out, as bits
    std::vector<std::vector<std::vector<uint16_t>>> results(2, std::vector<std::vector<uint16_t>>(group.ranks));
    for (int fused = 0; fused < 2; ++fused) {
      group.on_ranks([&](size_t r) {
        Backend& b = *group.backends[r];
        Allocator& a = b.allocator();
        Tensor tx = Tensor::empty({rows, dim}, DType::kBF16, a).value();
        Tensor tres = Tensor::empty({rows, dim}, DType::kBF16, a).value();
        Tensor tout = Tensor::empty({rows, dim}, DType::kBF16, a).value();
        Tensor tw = Tensor::empty({dim}, DType::kF32, a).value();
        b.copy_to_device(x[r].data(), tx, n * 2);
        b.copy_to_device(residual.data(), tres, n * 2);
        b.copy_to_device(weight.data(), tw, weight.size() * 4);
        Communicator& comm = *group.comms[r];
        if (fused == 1) {
          comm.all_reduce_add_rms_norm(b, tx, tres, tw, 1e-5f, tout);
        } else {
          comm.Communicator::all_reduce_add_rms_norm(b, tx, tres, tw, 1e-5f, tout);  // the two steps
        }
        std::vector<uint16_t>& got = results[static_cast<size_t>(fused)][r];
        got.resize(2 * n);
        b.copy_to_host(tres, got.data(), n * 2);
        b.copy_to_host(tout, got.data() + n, n * 2);
      });
    }
    for (size_t r = 0; r < group.ranks; ++r) {
      CHECK(results[1][r] == results[0][r]);  // bit for bit
      CHECK(results[1][r] == results[1][0]);  // every rank ends with the same residual and output
    }
  }
}
#endif

TEST_CASE("an engine split over CPU ranks gives the greedy tokens of one rank and of transformers") {
  const std::string model = kParity + "llama3-gqa-tied-ropescaled";
  const json ref = json::parse(read_text_file(model + "/reference.json").value());
  EngineConfig c;
  c.model = model;
  c.block_size = 4;
  c.num_kv_blocks = 40;
  c.max_model_len = 64;
  c.max_num_batched_tokens = 16;
  c.tensor_parallel_size = 2;
  auto engine = Engine::create(c);
  INFO(engine.status().to_string());
  REQUIRE(engine.is_ok());
  test::check_greedy_against_reference(**engine, ref, 16);
}

TEST_CASE("an engine refuses a tensor-parallel size the model cannot take") {
  EngineConfig c;
  c.model = kParity + "llama3-gqa-tied-ropescaled";  // 4 heads, 2 KV heads
  c.num_kv_blocks = 40;
  c.tensor_parallel_size = 3;
  auto engine = Engine::create(c);
  REQUIRE_FALSE(engine.is_ok());
  CHECK(engine.status().message().find("do not split over 3 ranks") != std::string::npos);
  c.tensor_parallel_size = 0;
  CHECK(Engine::create(c).status().code() == StatusCode::kInvalidArgument);
}

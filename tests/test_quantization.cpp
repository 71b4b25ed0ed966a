// Int8 weights against the ideal they approximate: on the parity checkpoints the engine's int8 logprobs must differ
// from bf16 (the weights were quantized) and match a model whose weights are the round-to-nearest group
// quantization computed here, dequantized to float32 (so only the kernels' arithmetic may differ, within 2e-3).
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <filesystem>
#include <numeric>

#include <photon/engine.hpp>

#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"
#include "models/decoder.hpp"
#include "models/model_loader.hpp"

using namespace photon;
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> parity_dirs() {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(fs::path(PHOTON_TEST_DATA_DIR) / "parity")) {
    if (e.is_directory()) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

// The ideal: per row and group, scale = max |w| / 127 and w' = round(w / scale) * scale, in float32.
Weight ideal_dequantized(const Weight& w, int64_t group) {
  const int64_t n = w.rows(), k = w.cols();
  std::vector<float> f(static_cast<size_t>(n * k));
  cpu::to_f32(w.values.raw(), w.values.dtype(), n * k, f.data());
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t g0 = 0; g0 < k; g0 += group) {
      const int64_t g1 = std::min(k, g0 + group);
      double max_abs = 0.0;
      for (int64_t c = g0; c < g1; ++c) max_abs = std::max(max_abs, std::fabs(double{f[static_cast<size_t>(j * k + c)]}));
      const auto scale = static_cast<float>(max_abs / 127.0);
      for (int64_t c = g0; c < g1; ++c) {
        float& v = f[static_cast<size_t>(j * k + c)];
        v = scale == 0.0f ? 0.0f : std::nearbyint(v / scale) * scale;
      }
    }
  }
  Tensor t = Tensor::empty({n, k}, DType::kF32, default_cpu_allocator()).value();
  std::copy(f.begin(), f.end(), t.data<float>());
  return t;
}

// Prompt logprobs of every position of `prompt` under `weights` (a [positions, vocab] matrix, flattened).
std::vector<float> prompt_logprobs(const ModelConfig& config, ModelWeights weights, Backend& backend,
                                   const std::vector<int32_t>& prompt) {
  DecoderLimits limits{128, 1, 128, 64};
  auto decoder = Decoder::create(config, std::move(weights), backend, limits);
  REQUIRE(decoder.is_ok());
  auto kv = PagedKvCache::create(config, backend, 16, 16, DType::kF32);
  REQUIRE(kv.is_ok());
  std::vector<int32_t> blocks(16);
  std::iota(blocks.begin(), blocks.end(), 0);
  ForwardBatch batch;
  batch.add_sequence(prompt, 0, blocks, 16, ForwardBatch::Logits::kAll);
  auto logits = (*decoder)->forward(batch, *kv);
  REQUIRE(logits.is_ok());
  const auto vocab = static_cast<size_t>(config.vocab_size);
  std::vector<float> out(logits->data<float>(), logits->data<float>() + prompt.size() * vocab);
  for (size_t p = 0; p < prompt.size(); ++p) {
    float* row = out.data() + p * vocab;
    const float max = *std::max_element(row, row + vocab);
    double sum = 0.0;
    for (size_t v = 0; v < vocab; ++v) sum += std::exp(double{row[v]} - max);
    const auto log_sum = static_cast<float>(std::log(sum)) + max;
    for (size_t v = 0; v < vocab; ++v) row[v] -= log_sum;
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double{a[i]} - b[i]));
  return m;
}

}  // namespace

TEST_CASE("int8 weights on the CPU match the ideal group quantization and differ from bf16") {
  const std::vector<int32_t> prompt = {1, 17, 250, 3, 99, 42, 7, 130, 11, 64, 5, 200};
  for (const fs::path& dir : parity_dirs()) {
    for (const int64_t group : {32, 128}) {
      for (const bool lm_head : {false, true}) {
        INFO(dir.filename().string() << " group " << group << " lm_head " << lm_head);
        auto backend = make_cpu_backend(default_cpu_allocator());
        auto plain = load_model({dir.string()}, *backend);
        REQUIRE(plain.is_ok());
        const ModelConfig config = plain->config;
        const uint64_t bf16_bytes = plain->weights.bytes;

        ModelSource source{dir.string()};
        source.quantization = {true, group, lm_head};
        auto int8 = load_model(source, *backend);
        REQUIRE(int8.is_ok());
        CHECK(int8->weights.layers[0].qkv_proj.quantized());
        CHECK(int8->weights.lm_head.quantized() == lm_head);
        CHECK(int8->weights.bytes < bf16_bytes);
        // A tied head is one int8 table for the embedding too.
        CHECK(int8->weights.embed.quantized() == (lm_head && config.tie_word_embeddings));

        auto ideal = load_model({dir.string()}, *backend);
        REQUIRE(ideal.is_ok());
        for (LayerWeights& l : ideal->weights.layers) {
          for (Weight* w : {&l.qkv_proj, &l.o_proj, &l.gate_up_proj, &l.down_proj}) *w = ideal_dequantized(*w, group);
        }
        if (lm_head) {
          ideal->weights.lm_head = ideal_dequantized(ideal->weights.lm_head, group);
          if (config.tie_word_embeddings) ideal->weights.embed = ideal->weights.lm_head;
        }

        const auto lp_bf16 = prompt_logprobs(config, std::move(plain->weights), *backend, prompt);
        const auto lp_int8 = prompt_logprobs(config, std::move(int8->weights), *backend, prompt);
        const auto lp_ideal = prompt_logprobs(config, std::move(ideal->weights), *backend, prompt);
        CHECK(max_abs_diff(lp_int8, lp_ideal) <= 2e-3);
        CHECK(max_abs_diff(lp_int8, lp_bf16) > 1e-4);  // the weights were quantized
        CHECK(max_abs_diff(lp_ideal, lp_bf16) > 1e-4);
      }
    }
  }
}

TEST_CASE("int8 engines: tensor parallelism computes the same model, and bad settings are clear errors") {
  const auto greedy = [](EngineConfig c) {
    c.num_kv_blocks = 16;
    c.max_model_len = 256;
    auto engine = Engine::create(c);
    INFO(engine.status().to_string());
    REQUIRE(engine.is_ok());
    SamplingParams p;
    p.max_tokens = 12;
    p.temperature = 0.0f;
    p.ignore_eos = true;
    REQUIRE((*engine)->submit({1, 2, 3, 4, 5}, p).is_ok());
    std::vector<int32_t> tokens;
    for (int guard = 0; (*engine)->has_unfinished_requests(); ++guard) {
      REQUIRE(guard < 1000);
      REQUIRE((*engine)->step().is_ok());
      for (const RequestEvent& e : (*engine)->poll()) tokens.insert(tokens.end(), e.token_ids.begin(), e.token_ids.end());
    }
    return tokens;
  };
  EngineConfig c;
  c.model = "dummy:tiny-llama3";
  const auto bf16 = greedy(c);
  c.quantization = "int8";
  c.group_size = 32;
  const auto tp1 = greedy(c);
  c.tensor_parallel_size = 2;
  CHECK(greedy(c) == tp1);
  c.tensor_parallel_size = 1;
  c.quantize_lm_head = true;
  (void)greedy(c);
  CHECK(bf16.size() == tp1.size());

  const auto error = [](EngineConfig c) {
    auto engine = Engine::create(c);
    REQUIRE_FALSE(engine.is_ok());
    return engine.status().message();
  };
  EngineConfig bad;
  bad.model = "dummy:tiny-llama3";
  bad.quantization = "int4";
  CHECK(error(bad).find("none or int8") != std::string::npos);
  bad.quantization = "int8";
  bad.group_size = 48;
  CHECK(error(bad).find("32, 64 or 128") != std::string::npos);
  bad.quantization = "none";
  bad.group_size = 128;
  bad.quantize_lm_head = true;
  CHECK(error(bad).find("int8") != std::string::npos);
  // Groups never straddle ranks: tiny-llama3's o_proj has 64 / 4 = 16 in_features per rank of four.
  bad.quantization = "int8";
  bad.quantize_lm_head = false;
  bad.group_size = 32;
  bad.tensor_parallel_size = 4;
  CHECK(error(bad).find("does not divide") != std::string::npos);
}

// Parity with Hugging Face transformers: tiny random-weight checkpoints (bf16 safetensors) and transformers'
// float32 prompt logprobs and greedy continuations, made by tools/parity/make_parity_data.py.
#include <catch2/catch_test_macros.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/mapped_file.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"
#include "engine/sampler.hpp"
#include "models/decoder.hpp"
#include "models/model_loader.hpp"

using namespace photon;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr double kLogprobTolerance = 2e-3;

std::vector<fs::path> parity_dirs() {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(fs::path(PHOTON_TEST_DATA_DIR) / "parity")) {
    if (e.is_directory() && fs::exists(e.path() / "reference.json")) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

void check_logprob(const std::vector<float>& logits, const json& ref, int k) {
  const auto lp = cpu::token_logprob(logits, ref.at("token").get<int32_t>(), k);
  CHECK(std::abs(lp.logprob - ref.at("logprob").get<double>()) <= kLogprobTolerance);
  const auto& top = ref.at("top");
  REQUIRE(lp.top.size() == top.size());
  for (size_t i = 0; i < top.size(); ++i) {
    // Ids may swap only between near-ties; the logprob at each rank must agree.
    CHECK(std::abs(lp.top[i].second - top[i][1].get<double>()) <= kLogprobTolerance);
  }
}

}  // namespace

TEST_CASE("CPU logits match Hugging Face transformers on the parity checkpoints") {
  const auto dirs = parity_dirs();
  REQUIRE(dirs.size() >= 4);
  for (const auto& dir : dirs) {
    INFO("checkpoint " << dir.filename().string());
    auto text = read_text_file((dir / "reference.json").string());
    REQUIRE(text.is_ok());
    const json ref = json::parse(*text);
    auto backend = make_cpu_backend(default_cpu_allocator());
    auto model = load_model({dir.string()}, *backend);
    REQUIRE(model.is_ok());
    const ModelConfig config = model->config;
    const auto vocab = static_cast<size_t>(config.vocab_size);
    DecoderLimits limits{128, 1, 128, 64};
    auto decoder = Decoder::create(config, std::move(model->weights), *backend, limits);
    REQUIRE(decoder.is_ok());
    for (const json& c : ref.at("cases")) {
      const auto prompt = c.at("prompt_ids").get<std::vector<int32_t>>();
      const auto expected = c.at("output_ids").get<std::vector<int32_t>>();
      const int k = ref.at("top_k").get<int>();
      auto kv = PagedKvCache::create(config, *backend, 16, 16, DType::kF32);
      REQUIRE(kv.is_ok());
      std::vector<int32_t> blocks(16);
      std::iota(blocks.begin(), blocks.end(), 0);
      std::reverse(blocks.begin(), blocks.end());  // pages in any order

      ForwardBatch batch;
      batch.add_sequence(prompt, 0, blocks, 16, ForwardBatch::Logits::kAll);
      auto logits = (*decoder)->forward(batch, *kv);
      REQUIRE(logits.is_ok());
      const json& plp = c.at("prompt_logprobs");
      REQUIRE(plp.size() == prompt.size());
      for (size_t i = 1; i < prompt.size(); ++i) {
        const float* row = logits->data<float>() + (i - 1) * vocab;
        check_logprob({row, row + vocab}, plp[i], k);
      }
      std::vector<float> next(logits->data<float>() + (prompt.size() - 1) * vocab,
                              logits->data<float>() + prompt.size() * vocab);
      std::vector<int32_t> output;
      for (size_t step = 0; step < expected.size(); ++step) {
        const int32_t token = argmax(next);
        output.push_back(token);
        check_logprob(next, c.at("logprobs")[step], k);
        batch.clear();
        batch.add_sequence(std::span(&output.back(), 1), static_cast<int32_t>(prompt.size() + step), blocks, 16,
                           ForwardBatch::Logits::kLast);
        auto step_logits = (*decoder)->forward(batch, *kv);
        REQUIRE(step_logits.is_ok());
        next.assign(step_logits->data<float>(), step_logits->data<float>() + vocab);
      }
      CHECK(output == expected);
    }
  }
}

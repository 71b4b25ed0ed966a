// The decoder's batching invariants: however a sequence's tokens are split into chunks, batched with others or
// scattered over KV blocks, its logits are the same.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "cpu/cpu_backend.hpp"
#include "models/decoder.hpp"
#include "models/model_config.hpp"
#include "models/weights.hpp"
#include "reference.hpp"

using namespace photon;
using nlohmann::json;
using photon::test::max_abs_diff;

namespace {

ModelConfig small_config(bool qwen) {
  json j = {{"architectures", {qwen ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
            {"vocab_size", 300},
            {"hidden_size", 48},
            {"intermediate_size", 80},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"head_dim", qwen ? 16 : 12},
            {"rms_norm_eps", 1e-6},
            {"max_position_embeddings", 512},
            {"tie_word_embeddings", qwen}};
  if (!qwen) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 16}};
  }
  return parse_model_config(j.dump()).value();
}

struct Fixture {
  explicit Fixture(bool qwen, int64_t num_blocks = 64, int64_t block_size = 4) : config(small_config(qwen)) {
    backend = make_cpu_backend(default_cpu_allocator());
    auto w = make_dummy_weights(config, *backend, 1234, DType::kBF16);
    REQUIRE(w.is_ok());
    DecoderLimits limits{64, 8, 64, 256};
    auto d = Decoder::create(config, std::move(*w), *backend, limits);
    REQUIRE(d.is_ok());
    decoder = std::move(*d);
    auto kv = PagedKvCache::create(config, *backend, num_blocks, block_size, DType::kF32);
    REQUIRE(kv.is_ok());
    cache = std::make_unique<PagedKvCache>(std::move(*kv));
  }

  // Logits rows copied out of the forward pass.
  std::vector<float> run(const ForwardBatch& b) {
    auto logits = decoder->forward(b, *cache);
    REQUIRE(logits.is_ok());
    return {logits->data<float>(), logits->data<float>() + logits->numel()};
  }

  ModelConfig config;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Decoder> decoder;
  std::unique_ptr<PagedKvCache> cache;
};

std::vector<int32_t> random_tokens(size_t n, std::mt19937& rng) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 300);
  return t;
}

}  // namespace

TEST_CASE("chunked prefill and single-token decode give the logits of one whole prefill") {
  const bool qwen = GENERATE(false, true);
  Fixture f(qwen);
  std::mt19937 rng(qwen ? 1 : 2);
  const auto tokens = random_tokens(23, rng);
  const std::vector<int32_t> blocks_a = {0, 1, 2, 3, 4, 5};
  const std::vector<int32_t> blocks_b = {17, 9, 30, 11, 2, 40};  // same sequence, scattered blocks

  ForwardBatch whole;
  whole.add_sequence(tokens, 0, blocks_a, 4, ForwardBatch::Logits::kAll);
  const auto ref = f.run(whole);
  const size_t vocab = 300;
  // Logits must not be flat: the dummy weights spread them.
  const auto [mn, mx] = std::minmax_element(ref.begin(), ref.begin() + vocab);
  CHECK(*mx - *mn > 4.0f);

  // Chunks of 10, 7, then single tokens, written to other blocks.
  std::vector<float> pieces;
  size_t start = 0;
  for (size_t n : {10u, 7u, 1u, 1u, 1u, 1u, 1u, 1u}) {
    ForwardBatch b;
    b.add_sequence(std::span(tokens).subspan(start, n), static_cast<int32_t>(start), blocks_b, 4,
                   ForwardBatch::Logits::kAll);
    const auto out = f.run(b);
    pieces.insert(pieces.end(), out.begin(), out.end());
    start += n;
  }
  REQUIRE(start == tokens.size());
  CHECK(max_abs_diff(pieces, ref) < 2e-4);
}

TEST_CASE("a ragged batch gives each sequence the logits it gets alone") {
  Fixture f(false);
  std::mt19937 rng(3);
  const auto a = random_tokens(9, rng);
  const auto b = random_tokens(5, rng);
  const auto c = random_tokens(14, rng);
  const std::vector<int32_t> ba = {0, 1, 2}, bb = {3, 4}, bc = {5, 6, 7, 8};
  auto alone = [&](const std::vector<int32_t>& t, const std::vector<int32_t>& blocks) {
    ForwardBatch batch;
    batch.add_sequence(t, 0, blocks, 4, ForwardBatch::Logits::kLast);
    return f.run(batch);
  };
  const auto ra = alone(a, ba), rb = alone(b, bb), rc = alone(c, bc);
  // Now all three at once: c split into a cached prefix and a chunk, b as prompt, a as prompt.
  ForwardBatch prefix;
  prefix.add_sequence(std::span(c).first(8), 0, bc, 4, ForwardBatch::Logits::kNone);
  REQUIRE(f.decoder->forward(prefix, *f.cache).is_ok());
  ForwardBatch mixed;
  mixed.add_sequence(b, 0, bb, 4, ForwardBatch::Logits::kLast);
  mixed.add_sequence(std::span(c).subspan(8), 8, bc, 4, ForwardBatch::Logits::kLast);
  mixed.add_sequence(a, 0, ba, 4, ForwardBatch::Logits::kLast);
  const auto out = f.run(mixed);
  const size_t v = 300;
  CHECK(max_abs_diff({out.begin(), out.begin() + v}, rb) < 2e-4);
  CHECK(max_abs_diff({out.begin() + v, out.begin() + 2 * v}, rc) < 2e-4);
  CHECK(max_abs_diff({out.begin() + 2 * v, out.end()}, ra) < 2e-4);
}

TEST_CASE("malformed batches are rejected with an error, not run") {
  Fixture f(true, 8, 4);
  const std::vector<int32_t> blocks = {0, 1};
  auto expect = [&](ForwardBatch b, const std::string& fragment) {
    auto r = f.decoder->forward(b, *f.cache);
    INFO(r.status().to_string());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK(r.status().message().find(fragment) != std::string::npos);
  };
  ForwardBatch ok;
  ok.add_sequence(std::vector<int32_t>{1, 2, 3}, 0, blocks, 4, ForwardBatch::Logits::kLast);
  CHECK(f.decoder->forward(ok, *f.cache).is_ok());

  ForwardBatch bad_token = ok;
  bad_token.token_ids[1] = 300;
  expect(bad_token, "outside the vocabulary");
  ForwardBatch bad_block = ok;
  bad_block.block_indices[0] = 8;
  expect(bad_block, "outside the KV cache");
  ForwardBatch short_table;
  short_table.add_sequence(std::vector<int32_t>(9, 1), 0, blocks, 4, ForwardBatch::Logits::kLast);
  expect(short_table, "do not fit");
  ForwardBatch too_many;
  too_many.add_sequence(std::vector<int32_t>(65, 1), 0, std::vector<int32_t>(17, 0), 4, ForwardBatch::Logits::kNone);
  expect(too_many, "exceeds the limit");
  expect(ForwardBatch{}, "at least one token");
  ForwardBatch bad_logits = ok;
  bad_logits.logits_indices = {5};
  expect(bad_logits, "logits index");
}

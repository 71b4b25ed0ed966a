#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_floating_point.hpp>

#include <cmath>
#include <numbers>
#include <string>

#include <nlohmann/json.hpp>

#include "models/model_config.hpp"
#include "models/presets.hpp"
#include "models/rope_frequencies.hpp"

using namespace photon;
using nlohmann::json;

namespace {

json llama_base() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"vocab_size", 1000},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"rms_norm_eps", 1e-5},
          {"max_position_embeddings", 256},
          {"eos_token_id", 7}};
}

}  // namespace

TEST_CASE("config.json fields map onto ModelConfig") {
  auto c = parse_model_config(llama_base().dump());
  REQUIRE(c.is_ok());
  CHECK(c->architecture == Architecture::kLlama);
  CHECK(c->head_dim == 16);  // hidden / heads when absent
  CHECK(c->num_kv_heads == 2);
  CHECK(c->rope.type == RopeType::kDefault);
  CHECK(c->rope.theta == 10000.0);
  CHECK_FALSE(c->tie_word_embeddings);
  CHECK(c->eos_token_ids == std::vector<int32_t>{7});
}

TEST_CASE("RoPE settings are read in both the transformers 4.x and 5.x spellings") {
  json v4 = llama_base();
  v4["rope_theta"] = 500000.0;
  v4["rope_scaling"] = {{"rope_type", "llama3"},
                        {"factor", 32.0},
                        {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192}};
  json v5 = llama_base();
  v5["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                           {"factor", 32.0},          {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  auto a = parse_model_config(v4.dump());
  auto b = parse_model_config(v5.dump());
  REQUIRE(a.is_ok());
  REQUIRE(b.is_ok());
  for (const auto* c : {&*a, &*b}) {
    CHECK(c->rope.type == RopeType::kLlama3);
    CHECK(c->rope.theta == 500000.0);
    CHECK(c->rope.factor == 32.0);
    CHECK(c->rope.original_max_position_embeddings == 8192);
  }
  json v4_old_key = llama_base();
  v4_old_key["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  auto lin = parse_model_config(v4_old_key.dump());
  REQUIRE(lin.is_ok());
  CHECK(lin->rope.type == RopeType::kLinear);
  json v5_default = llama_base();
  v5_default["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  CHECK(parse_model_config(v5_default.dump())->rope.theta == 1000000.0);
}

TEST_CASE("config errors name the field and the file") {
  auto expect = [](const json& j, StatusCode code, const std::string& fragment) {
    auto c = parse_model_config(j.dump(), "dir/config.json");
    INFO(c.status().to_string());
    CHECK(c.status().code() == code);
    CHECK(c.status().message().find(fragment) != std::string::npos);
    CHECK(c.status().message().find("dir/config.json") != std::string::npos);
  };
  json j = llama_base();
  j.erase("hidden_size");
  expect(j, StatusCode::kFormatError, "'hidden_size' is missing");
  j = llama_base();
  j["architectures"] = {"MistralForCausalLM"};
  expect(j, StatusCode::kUnsupported, "MistralForCausalLM");
  j = llama_base();
  j.erase("architectures");
  expect(j, StatusCode::kFormatError, "architectures");
  j = llama_base();
  j["num_key_value_heads"] = 3;
  expect(j, StatusCode::kFormatError, "multiple of num_key_value_heads");
  j = llama_base();
  j["hidden_size"] = "64";
  expect(j, StatusCode::kFormatError, "'hidden_size' must be an integer");
  j = llama_base();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect(j, StatusCode::kUnsupported, "yarn");
  j = llama_base();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  expect(j, StatusCode::kFormatError, "low_freq_factor");
  j = llama_base();
  j["attention_bias"] = true;
  expect(j, StatusCode::kUnsupported, "attention_bias");
  j = llama_base();
  j["vocab_size"] = -5;
  expect(j, StatusCode::kFormatError, "vocab_size");
  CHECK(parse_model_config("{not json", "x.json").status().code() == StatusCode::kFormatError);
  CHECK(parse_model_config("[]", "x.json").status().code() == StatusCode::kFormatError);
}

TEST_CASE("generation_config.json adds EOS ids and sampling defaults") {
  auto c = parse_model_config(llama_base().dump());
  REQUIRE(c.is_ok());
  REQUIRE(
      apply_generation_config(R"({"eos_token_id":[7,9],"do_sample":true,"temperature":0.6,"top_p":0.9})", *c).is_ok());
  CHECK(c->eos_token_ids == std::vector<int32_t>{7, 9});
  CHECK(c->generation.do_sample);
  CHECK(c->generation.temperature == 0.6f);
  CHECK(apply_generation_config(R"({"eos_token_id":"x"})", *c).code() == StatusCode::kFormatError);
}

TEST_CASE("dummy presets have the real checkpoints' shapes") {
  auto l1 = dummy_preset_config("llama-3.2-1b");
  REQUIRE(l1.is_ok());
  CHECK(l1->num_parameters() == 1235814400);  // Llama-3.2-1B: 1.24 B parameters
  CHECK(l1->tie_word_embeddings);
  auto q = dummy_preset_config("qwen3-0.6b");
  REQUIRE(q.is_ok());
  CHECK(q->has_qk_norm());
  CHECK(q->head_dim == 128);
  CHECK(q->num_parameters() == 596049920);  // Qwen3-0.6B: 0.6 B parameters
  auto l8 = dummy_preset_config("llama-3.1-8b");
  REQUIRE(l8.is_ok());
  CHECK(l8->num_parameters() == 8030261248);  // Llama-3.1-8B: 8.03 B parameters
  auto l70 = dummy_preset_config("llama-3.1-70b");
  REQUIRE(l70.is_ok());
  CHECK(l70->num_parameters() == 70553706496);  // Llama-3.1-70B: 70.55 B parameters
  CHECK(l70->num_layers == 80);
  CHECK(l70->num_kv_heads == 8);
  CHECK_FALSE(l70->tie_word_embeddings);
  CHECK(l70->rope.factor == 8.0);
  auto q32 = dummy_preset_config("qwen3-32b");
  REQUIRE(q32.is_ok());
  CHECK(q32->num_parameters() == 32762123264);  // Qwen3-32B: 32.76 B parameters
  CHECK(q32->has_qk_norm());
  CHECK(q32->num_heads * q32->head_dim == 8192);  // wider than hidden_size 5120
  CHECK(dummy_preset_config("tiny-qwen3")->vocab_size == 151936);
  auto bad = dummy_preset_config("llama-9");
  CHECK(bad.status().message().find("tiny-llama3") != std::string::npos);
}

TEST_CASE("llama3 RoPE scaling matches the published formula") {
  RopeConfig rope;
  rope.type = RopeType::kLlama3;
  rope.theta = 500000.0;
  rope.factor = 32.0;
  rope.low_freq_factor = 1.0;
  rope.high_freq_factor = 4.0;
  rope.original_max_position_embeddings = 8192;
  const auto inv = rope_inv_freq(rope, 64);
  RopeConfig plain = rope;
  plain.type = RopeType::kDefault;
  const auto base = rope_inv_freq(plain, 64);
  REQUIRE(inv.size() == 32);
  for (size_t i = 0; i < inv.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / base[i];
    double expected = base[i];
    if (wavelen > 8192.0) {
      expected = base[i] / 32.0;
    } else if (wavelen >= 2048.0) {
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      expected = (1 - smooth) * base[i] / 32.0 + smooth * base[i];
    }
    CHECK_THAT(inv[i], Catch::Matchers::WithinRel(expected, 1e-6));
  }
  CHECK(inv[0] == base[0]);           // highest frequency untouched
  CHECK(inv[31] < base[31] / 31.0f);  // lowest frequency divided by 32
}

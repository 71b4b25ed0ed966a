// Int8 weights against the ideal they approximate: on the parity checkpoints the engine's int8 logprobs must differ
// from bf16 (the weights were quantized) and match a model whose weights are the round-to-nearest group
// quantization computed here, dequantized to float32 (so only the kernels' arithmetic may differ, within 2e-3).
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <filesystem>
#include <numeric>

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include <nlohmann/json.hpp>
#include <photon/engine.hpp>
#include <photon/quantize.hpp>

#include "core/mapped_file.hpp"
#include "core/safetensors.hpp"
#include "core/safetensors_writer.hpp"

#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"
#include "models/decoder.hpp"
#include "models/model_loader.hpp"
#include "reference.hpp"

using namespace photon;
namespace fs = std::filesystem;

namespace {

using photon::test::max_abs_diff;

std::vector<fs::path> parity_dirs() {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(fs::path(PHOTON_TEST_DATA_DIR) / "parity")) {
    if (e.is_directory()) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

// The ideal: per row and group, scale = max |w| / 127 (rounded to `scale_dtype`, as a checkpoint stores it) and
// w' = round(w / scale) * scale within +-127 scales, in float32.
Weight ideal_dequantized(const Weight& w, int64_t group, DType scale_dtype = DType::kF32) {
  const int64_t n = w.rows(), k = w.cols();
  std::vector<float> f(static_cast<size_t>(n * k));
  cpu::to_f32(w.values.raw(), w.values.dtype(), n * k, f.data());
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t g0 = 0; g0 < k; g0 += group) {
      const int64_t g1 = std::min(k, g0 + group);
      double max_abs = 0.0;
      for (int64_t c = g0; c < g1; ++c)
        max_abs = std::max(max_abs, std::fabs(double{f[static_cast<size_t>(j * k + c)]}));
      auto scale = static_cast<float>(max_abs / 127.0);
      if (scale_dtype == DType::kBF16) scale = bf16_to_f32(f32_to_bf16(scale));
      for (int64_t c = g0; c < g1; ++c) {
        float& v = f[static_cast<size_t>(j * k + c)];
        v = scale == 0.0f ? 0.0f : std::clamp(std::nearbyint(v / scale), -127.0f, 127.0f) * scale;
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

// The greedy tokens (12, EOS ignored) of `prompt` on a fresh engine built from `c` with a small KV cache.
std::vector<int32_t> greedy(EngineConfig c, const std::vector<int32_t>& prompt = {1, 2, 3, 4, 5}) {
  c.num_kv_blocks = 16;
  c.max_model_len = 128;
  auto engine = Engine::create(c);
  INFO(engine.status().to_string());
  REQUIRE(engine.is_ok());
  SamplingParams p;
  p.max_tokens = 12;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  REQUIRE((*engine)->submit(prompt, p).is_ok());
  std::vector<int32_t> tokens;
  for (int guard = 0; (*engine)->has_unfinished_requests(); ++guard) {
    REQUIRE(guard < 1000);
    REQUIRE((*engine)->step().is_ok());
    for (const RequestEvent& e : (*engine)->poll()) tokens.insert(tokens.end(), e.token_ids.begin(), e.token_ids.end());
  }
  return tokens;
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

namespace {

// A fresh temporary folder.
fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("photon-quant-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Rewrites DIR/model.safetensors through `edit`, which may change, add or drop tensors (by name).
void rewrite(
    const fs::path& dir,
    const std::function<void(std::map<std::string, std::pair<SafetensorsTensor, std::vector<unsigned char>>>&)>& edit) {
  auto file = SafetensorsFile::open((dir / "model.safetensors").string()).value();
  std::map<std::string, std::pair<SafetensorsTensor, std::vector<unsigned char>>> all;
  for (const SafetensorsEntry& e : file.entries()) {
    const Tensor t = file.tensor(e);
    const auto* b = static_cast<const unsigned char*>(t.raw());
    all[e.name] = {SafetensorsTensor{e.name, e.dtype, e.shape, {}}, std::vector<unsigned char>(b, b + t.nbytes())};
  }
  edit(all);
  std::vector<SafetensorsTensor> out;
  for (auto& [name, entry] : all) {
    entry.first.bytes = entry.second;
    out.push_back(entry.first);
  }
  REQUIRE(write_safetensors((dir / "model.safetensors").string(), out, {}).is_ok());
}

void edit_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  auto j = nlohmann::json::parse(read_text_file((dir / "config.json").string()).value());
  edit(j);
  std::ofstream(dir / "config.json") << j.dump();
}

std::string load_error(const fs::path& dir) {
  auto backend = make_cpu_backend(default_cpu_allocator());
  auto m = load_model({dir.string()}, *backend);
  REQUIRE_FALSE(m.is_ok());
  return m.status().message();
}

}  // namespace

TEST_CASE("photon quantize writes a compressed-tensors checkpoint that loads as written") {
  const fs::path src = fs::path(PHOTON_TEST_DATA_DIR) / "parity" / "llama3-mha-untied";
  const fs::path out = temp_dir("written");
  QuantizeOptions o;
  o.model = src.string();
  o.out = out.string();
  o.group_size = 32;
  o.quantize_lm_head = true;
  REQUIRE(quantize_checkpoint(o).is_ok());
  const auto config = nlohmann::json::parse(read_text_file((out / "config.json").string()).value());
  const auto& qc = config["quantization_config"];
  CHECK(qc["quant_method"] == "compressed-tensors");
  CHECK(qc["format"] == "pack-quantized");
  CHECK(qc["config_groups"]["group_0"]["weights"]["group_size"] == 32);
  CHECK(qc["ignore"].empty());  // the untied head was quantized too
  CHECK(fs::exists(out / "generation_config.json"));

  // The packed values and stored scales are exactly what the engine loads, with no second rounding.
  auto ckpt = SafetensorsCheckpoint::open(out.string()).value();
  const std::string module = "model.layers.0.mlp.down_proj";
  REQUIRE(ckpt.entry(module + ".weight") == nullptr);
  const SafetensorsEntry* packed = ckpt.entry(module + ".weight_packed");
  REQUIRE(packed != nullptr);
  CHECK(packed->dtype == DType::kI32);
  const SafetensorsEntry* scales = ckpt.entry(module + ".weight_scale");
  REQUIRE(scales != nullptr);
  CHECK(scales->dtype == DType::kBF16);
  auto backend = make_cpu_backend(default_cpu_allocator());
  auto loaded = load_model({out.string()}, *backend);
  INFO(loaded.status().to_string());
  REQUIRE(loaded.is_ok());
  const Weight& down = loaded->weights.layers[0].down_proj;
  REQUIRE(down.quantized());
  CHECK(down.group_size == 32);
  CHECK(loaded->weights.lm_head.quantized());
  const Tensor p = *ckpt.find(module + ".weight_packed");
  const int64_t k = down.cols(), row_bytes = (k + 3) / 4 * 4;
  for (int64_t r = 0; r < down.rows(); ++r) {
    for (int64_t c = 0; c < k; ++c) {
      REQUIRE(down.values.data<int8_t>()[r * k + c] ==
              static_cast<int8_t>(static_cast<const uint8_t*>(p.raw())[r * row_bytes + c] ^ 0x80u));
    }
  }
  std::vector<float> stored(static_cast<size_t>(down.scales.numel()));
  cpu::to_f32(ckpt.find(module + ".weight_scale")->raw(), DType::kBF16, down.scales.numel(), stored.data());
  CHECK(std::equal(stored.begin(), stored.end(), down.scales.data<float>()));

  // The ideal quantization with scales rounded to bf16 as stored, dequantized to float32.
  const std::vector<int32_t> prompt = {1, 17, 250, 3, 99, 42, 7, 130};
  auto ideal = load_model({src.string()}, *backend);
  REQUIRE(ideal.is_ok());
  for (LayerWeights& l : ideal->weights.layers) {
    for (Weight* w : {&l.qkv_proj, &l.o_proj, &l.gate_up_proj, &l.down_proj}) {
      *w = ideal_dequantized(*w, 32, DType::kBF16);
    }
  }
  ideal->weights.lm_head = ideal_dequantized(ideal->weights.lm_head, 32, DType::kBF16);
  const auto lp_file = prompt_logprobs(loaded->config, std::move(loaded->weights), *backend, prompt);
  const auto lp_ideal = prompt_logprobs(ideal->config, std::move(ideal->weights), *backend, prompt);
  CHECK(max_abs_diff(lp_file, lp_ideal) <= 2e-3);

  // Tensor parallelism slices the int8 values and their groups; a group may not straddle two ranks.
  const fs::path tied = temp_dir("tied");
  QuantizeOptions t = o;
  t.model = (fs::path(PHOTON_TEST_DATA_DIR) / "parity" / "llama3-gqa-tied-ropescaled").string();
  t.out = tied.string();
  REQUIRE(quantize_checkpoint(t).is_ok());
  const auto tokens = [&](const fs::path& model, int tp) {
    EngineConfig c;
    c.model = model.string();
    c.tensor_parallel_size = tp;
    return greedy(c, prompt);
  };
  CHECK(tokens(tied, 2) == tokens(tied, 1));
  EngineConfig straddle;
  straddle.model = out.string();  // intermediate 96: 48 columns per rank of two, groups of 32
  straddle.tensor_parallel_size = 2;
  straddle.max_model_len = 128;
  auto refused = Engine::create(straddle);
  REQUIRE_FALSE(refused.is_ok());
  CHECK(refused.status().message().find("straddle") != std::string::npos);
  fs::remove_all(tied);

  QuantizeOptions again = o;
  again.model = out.string();
  again.out = temp_dir("again").string();
  CHECK(quantize_checkpoint(again).message().find("already quantized") != std::string::npos);
  again.model = src.string();
  again.group_size = 100;
  CHECK(quantize_checkpoint(again).message().find("32, 64 or 128") != std::string::npos);
  fs::remove_all(out);
}

TEST_CASE("int-quantized per-channel checkpoints load, and unsupported or corrupt ones are errors naming the field") {
  const fs::path src = fs::path(PHOTON_TEST_DATA_DIR) / "parity" / "qwen3-mha-untied-headdim24";
  const fs::path base = temp_dir("base");
  QuantizeOptions o;
  o.model = src.string();
  o.out = base.string();
  o.group_size = 32;
  REQUIRE(quantize_checkpoint(o).is_ok());
  const std::string module = "model.layers.0.self_attn.o_proj";
  const auto fresh = [&](const std::string& name) {
    const fs::path dir = temp_dir(name);
    for (const auto& e : fs::directory_iterator(base)) fs::copy_file(e.path(), dir / e.path().filename());
    return dir;
  };

  // The int-quantized form with one f32 scale per output channel, written by hand from the float checkpoint.
  {
    const fs::path dir = fresh("channel");
    auto ckpt = SafetensorsCheckpoint::open(src.string()).value();
    std::map<std::string, std::vector<unsigned char>> replaced;
    rewrite(dir, [&](auto& all) {
      for (auto it = all.begin(); it != all.end();) {
        const std::string& name = it->first;
        if (name.ends_with(".weight_packed") || name.ends_with(".weight_scale") || name.ends_with(".weight_shape")) {
          it = all.erase(it);
          continue;
        }
        ++it;
      }
      for (const std::string& name : ckpt.names()) {
        if (name.find("_proj.weight") == std::string::npos) continue;
        const SafetensorsEntry& e = *ckpt.entry(name);
        const int64_t n = e.shape[0], k = e.shape[1];
        std::vector<unsigned char> q(static_cast<size_t>(n * k));
        std::vector<float> s(static_cast<size_t>(n));
        cpu::quantize_int8(ckpt.find(name)->raw(), e.dtype, n, k, k, reinterpret_cast<int8_t*>(q.data()), s.data());
        const std::string m = name.substr(0, name.size() - 7);
        all[name] = {SafetensorsTensor{name, DType::kI8, {n, k}, {}}, q};
        std::vector<unsigned char> sb(s.size() * 4);
        std::memcpy(sb.data(), s.data(), sb.size());
        all[m + ".weight_scale"] = {SafetensorsTensor{m + ".weight_scale", DType::kF32, {n, 1}, {}}, sb};
      }
    });
    edit_config(dir, [](nlohmann::json& j) {
      auto& qc = j["quantization_config"];
      qc["format"] = "int-quantized";
      qc["config_groups"]["group_0"]["format"] = "int-quantized";
      qc["config_groups"]["group_0"]["weights"]["strategy"] = "channel";
      qc["config_groups"]["group_0"]["weights"]["group_size"] = nullptr;
      // A W8A8 scheme's dynamic activations are served as W8A16.
      qc["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 8}, {"dynamic", true}, {"strategy", "token"}};
    });
    auto backend = make_cpu_backend(default_cpu_allocator());
    auto m = load_model({dir.string()}, *backend);
    INFO(m.status().to_string());
    REQUIRE(m.is_ok());
    CHECK(m->weights.layers[0].o_proj.quantized());
    CHECK(m->weights.layers[0].o_proj.num_groups() == 1);
    auto ideal = load_model({src.string()}, *backend);
    REQUIRE(ideal.is_ok());
    for (LayerWeights& l : ideal->weights.layers) {
      for (Weight* w : {&l.qkv_proj, &l.o_proj, &l.gate_up_proj, &l.down_proj}) *w = ideal_dequantized(*w, w->cols());
    }
    const std::vector<int32_t> prompt = {5, 6, 7, 8, 9, 10};
    const auto a = prompt_logprobs(m->config, std::move(m->weights), *backend, prompt);
    const auto b = prompt_logprobs(ideal->config, std::move(ideal->weights), *backend, prompt);
    CHECK(max_abs_diff(a, b) <= 2e-3);
    fs::remove_all(dir);
  }

  struct Bad {
    std::string name, expect;
    std::function<void(nlohmann::json&)> config;
    std::function<void(std::map<std::string, std::pair<SafetensorsTensor, std::vector<unsigned char>>>&)> tensors;
  };
  const auto group0 = [](nlohmann::json& j) -> nlohmann::json& {
    return j["quantization_config"]["config_groups"]["group_0"];
  };
  const std::vector<Bad> bad = {
      {"int4", "num_bits is 4", [&](auto& j) { group0(j)["weights"]["num_bits"] = 4; }, {}},
      {"asym", "asymmetric", [&](auto& j) { group0(j)["weights"]["symmetric"] = false; }, {}},
      {"static",
       "static scales",
       [&](auto& j) {
         group0(j)["input_activations"] = {{"num_bits", 8}, {"dynamic", false}};
       },
       {}},
      {"method", "quant_method 'gptq'", [](auto& j) { j["quantization_config"]["quant_method"] = "gptq"; }, {}},
      {"tensor", "strategy 'tensor'", [&](auto& j) { group0(j)["weights"]["strategy"] = "tensor"; }, {}},
      {"no scale", module + ".weight_scale' is missing", {}, [&](auto& all) { all.erase(module + ".weight_scale"); }},
      {"bad scale",
       module + ".weight_scale' is",
       {},
       [&](auto& all) {
         auto& [t, b] = all[module + ".weight_scale"];
         t.shape[1] -= 1;
         b.resize(b.size() - static_cast<size_t>(t.shape[0]) * 2);
       }},
      {"bad packed",
       module + ".weight_packed' is",
       {},
       [&](auto& all) { all[module + ".weight_packed"].first.dtype = DType::kF32; }},
      {"bad shape",
       module + ".weight_shape' must be",
       {},
       [&](auto& all) { reinterpret_cast<int64_t*>(all[module + ".weight_shape"].second.data())[1] += 1; }},
      {"zero point",
       "asymmetric",
       {},
       [&](auto& all) {
         const auto& s = all[module + ".weight_scale"].first;
         std::vector<unsigned char> zp(static_cast<size_t>(s.shape[0] * s.shape[1]), 1);
         all[module + ".weight_zero_point"] = {
             SafetensorsTensor{module + ".weight_zero_point", DType::kI8, s.shape, {}}, zp};
       }},
      {"ignored",
       "leaves this module in floats",
       [&](auto& j) { j["quantization_config"]["ignore"].push_back(module); },
       {}},
  };
  for (const Bad& b : bad) {
    INFO(b.name);
    const fs::path dir = fresh("bad");
    if (b.config) edit_config(dir, b.config);
    if (b.tensors) rewrite(dir, b.tensors);
    const std::string message = load_error(dir);
    INFO(message);
    CHECK(message.find(b.expect) != std::string::npos);
    fs::remove_all(dir);
  }
  fs::remove_all(base);
}

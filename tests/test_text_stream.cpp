// Text deltas and stop strings: UTF-8 safe, adding up to decode(), and a stop string never leaks.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <photon/engine.hpp>
#include <photon/tokenizer.hpp>

#include "engine/text_stream.hpp"

using namespace photon;
namespace fs = std::filesystem;

namespace {

std::string llama3_dir() {
  const char* home = std::getenv("HOME");
  std::string cache = std::getenv("PHOTON_TOKENIZER_CACHE") ? std::getenv("PHOTON_TOKENIZER_CACHE")
                      : std::getenv("XDG_CACHE_HOME")
                          ? std::string(std::getenv("XDG_CACHE_HOME")) + "/photon/tokenizers"
                      : home ? std::string(home) + "/.cache/photon/tokenizers"
                             : "";
  const fs::path dir = fs::path(cache) / "llama3";
  return fs::exists(dir / "tokenizer.json") ? dir.string() : std::string();
}

// dummy:tiny-llama3 with the real Llama 3 tokenizer (and its chat template).
EngineConfig tiny_engine_config(const std::string& tokenizer_dir) {
  EngineConfig c;
  c.model = "dummy:tiny-llama3";
  c.tokenizer = tokenizer_dir;
  c.max_model_len = 128;
  c.num_kv_blocks = 64;
  return c;
}

// Streams `ids` and returns (joined text, index of the id that stopped or -1).
std::pair<std::string, int> stream_all(const Tokenizer& tok, const std::vector<int32_t>& ids,
                                       std::vector<std::string> stop) {
  TextStream s(tok, {}, std::move(stop));
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    bool stopped = false;
    out += s.push(ids[i], &stopped);
    if (stopped) return {out, static_cast<int>(i)};
  }
  out += s.finish();
  return {out, -1};
}

}  // namespace

TEST_CASE("text deltas add up to the decoded text and stop strings end it exactly") {
  const std::string dir = llama3_dir();
  if (dir.empty()) SKIP("tokenizer files not fetched (run scripts/fetch-tokenizers.sh)");
  auto tok = std::move(Tokenizer::load(dir).value());
  const std::string text = "Héllo wörld! 日本語 😀 The END is near. Done.";
  const auto ids = tok->encode(text, false);
  CHECK(stream_all(*tok, ids, {}).first == text);
  // A stop string spanning several tokens: everything before it, nothing of it.
  auto [out, at] = stream_all(*tok, ids, {"END is"});
  CHECK(out == "Héllo wörld! 日本語 😀 The ");
  CHECK(at >= 0);
  // The earliest of several stop strings wins; a partial match that does not complete is released.
  CHECK(stream_all(*tok, ids, {"near", "wörld"}).first == "Héllo ");
  CHECK(stream_all(*tok, ids, {"wörlx"}).first == text);
  CHECK(stream_all(*tok, ids, {"Done.!"}).first == text);  // held to the end, then flushed
  // Special tokens are left out of the text.
  auto with_bos = tok->encode(text, true);
  CHECK(stream_all(*tok, with_bos, {}).first == text);
}

TEST_CASE("the engine streams text and honours stop strings") {
  const std::string dir = llama3_dir();
  if (dir.empty()) SKIP("tokenizer files not fetched (run scripts/fetch-tokenizers.sh)");
  const EngineConfig c = tiny_engine_config(dir);
  auto engine = std::move(Engine::create(c).value());
  REQUIRE(engine->tokenizer() != nullptr);
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 20;
  p.ignore_eos = true;
  const uint64_t a = engine->submit_text("The capital of France is", p).value();
  std::string text_a;
  std::vector<int32_t> ids_a;
  while (engine->has_unfinished_requests()) {
    REQUIRE(engine->step().is_ok());
    for (auto& e : engine->poll()) {
      text_a += e.text;
      ids_a.insert(ids_a.end(), e.token_ids.begin(), e.token_ids.end());
    }
  }
  REQUIRE(ids_a.size() == 20);
  CHECK(text_a == *engine->tokenizer()->decode(ids_a, true));
  // Stop on a piece of that text: the same run ends before it.
  REQUIRE(text_a.size() > 6);
  p.stop = {text_a.substr(text_a.size() / 2, 4)};
  const uint64_t b = engine->submit_text("The capital of France is", p).value();
  std::string text_b;
  FinishReason reason = FinishReason::kNone;
  while (engine->has_unfinished_requests()) {
    REQUIRE(engine->step().is_ok());
    for (auto& e : engine->poll()) {
      text_b += e.text;
      if (e.finished) reason = e.finish_reason;
    }
  }
  CHECK(reason == FinishReason::kStop);
  CHECK(text_b == text_a.substr(0, text_a.find(p.stop[0])));
  CHECK(a != b);
  // Without a tokenizer: ids only, and a clear error for text.
  EngineConfig no_tok = c;
  no_tok.tokenizer.clear();
  auto plain = std::move(Engine::create(no_tok).value());
  CHECK(plain->submit_text("hi", p).status().code() == StatusCode::kUnsupported);
  CHECK(plain->submit({1, 2}, p).status().message().find("stop strings need a tokenizer") != std::string::npos);
}

TEST_CASE("chat messages go through the model's template with exactly one BOS") {
  const std::string dir = llama3_dir();
  if (dir.empty()) SKIP("tokenizer files not fetched (run scripts/fetch-tokenizers.sh)");
  const EngineConfig c = tiny_engine_config(dir);
  auto engine = std::move(Engine::create(c).value());
  REQUIRE(engine->chat_template() != nullptr);
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 3;
  p.prompt_logprobs = 0;  // reports the prompt ids back through prompt logprobs
  const uint64_t id = engine->submit_chat(R"([{"role":"user","content":"Hello"}])", p).value();
  std::vector<int32_t> prompt_tokens;
  int prompt_len = 0;
  while (engine->has_unfinished_requests()) {
    REQUIRE(engine->step().is_ok());
    for (auto& e : engine->poll()) {
      if (e.request_id != id) continue;
      prompt_len = e.num_prompt_tokens;
      for (const auto& lp : e.prompt_logprobs) prompt_tokens.push_back(lp.token);
    }
  }
  ChatTemplate::Options o;
  const std::string rendered = engine->chat_template()->render(R"([{"role":"user","content":"Hello"}])", "", o).value();
  const auto expected = engine->tokenizer()->encode(rendered, false);
  REQUIRE(prompt_len == static_cast<int>(expected.size()));
  CHECK(expected[0] == 128000);
  CHECK(std::count(expected.begin(), expected.end(), 128000) == 1);
  CHECK(prompt_tokens == std::vector<int32_t>(expected.begin() + 1, expected.end()));
  CHECK(engine->submit_chat("not json", p).status().code() == StatusCode::kInvalidArgument);
}

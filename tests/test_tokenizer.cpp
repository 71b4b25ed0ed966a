// Tokenizers against Hugging Face `tokenizers`: every id of the golden corpus must match (Llama 3 and Qwen3 files,
// fetched by scripts/fetch-tokenizers.sh), streaming detokenization never splits a character, bad files and
// inputs give clear errors.
#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <photon/tokenizer.hpp>

#include "tokenizer/byte_level.hpp"
#include "tokenizer/utf8.hpp"

using namespace photon;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The folder scripts/fetch-tokenizers.sh fills, or "" when the files are not there.
std::string tokenizer_dir(const std::string& name) {
  std::string cache;
  if (const char* env = std::getenv("PHOTON_TOKENIZER_CACHE")) {
    cache = env;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME")) {
    cache = std::string(xdg) + "/photon/tokenizers";
  } else if (const char* home = std::getenv("HOME")) {
    cache = std::string(home) + "/.cache/photon/tokenizers";
  }
  const fs::path dir = fs::path(cache) / name;
  return fs::exists(dir / "tokenizer.json") ? dir.string() : std::string();
}

std::vector<std::string> corpus() {
  std::ifstream in(std::string(PHOTON_TEST_DATA_DIR) + "/tokenizer/corpus.jsonl");
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(json::parse(line).get<std::string>());
  }
  return out;
}

std::vector<json> golden(const std::string& name) {
  std::ifstream in(std::string(PHOTON_TEST_DATA_DIR) + "/tokenizer/" + name + ".golden.jsonl");
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(json::parse(line));
  }
  return out;
}

fs::path write_temp(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("photon_tok_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p;
}

}  // namespace

TEST_CASE("UTF-8 helpers repair invalid input and find complete prefixes") {
  CHECK(utf8::is_valid("héllo 😀"));
  CHECK_FALSE(utf8::is_valid("\xff"));
  CHECK_FALSE(utf8::is_valid("\xc0\xaf"));      // overlong
  CHECK_FALSE(utf8::is_valid("\xed\xa0\x80"));  // surrogate
  CHECK(utf8::repair("a\xffz") == "a\xEF\xBF\xBDz");
  const std::string smile = "😀";  // 4 bytes
  for (size_t cut = 1; cut < 4; ++cut) CHECK(utf8::complete_prefix("ab" + smile.substr(0, cut)) == 2);
  CHECK(utf8::complete_prefix("ab" + smile) == 6);
  for (int b = 0; b < 256; ++b) {
    std::string one(1, static_cast<char>(b)), back;
    byte_level::decode_append(byte_level::encode(one), back);
    REQUIRE(back == one);
  }
  CHECK(byte_level::encode(" ") == "Ġ");
  CHECK(byte_level::encode("\n") == "Ċ");
}

TEST_CASE("token ids match Hugging Face tokenizers on the whole corpus") {
  const auto texts = corpus();
  REQUIRE(texts.size() > 50);
  for (const std::string name : {"llama3", "llama3_2", "qwen3"}) {
    const std::string dir = tokenizer_dir(name);
    if (dir.empty()) SKIP("tokenizer files not fetched (run scripts/fetch-tokenizers.sh): " << name);
    auto tok = Tokenizer::load(dir);
    INFO(tok.status().to_string());
    REQUIRE(tok.is_ok());
    const auto refs = golden(name);
    REQUIRE(refs.size() == texts.size());
    size_t matched = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      INFO(name << " corpus line " << i + 1);
      const auto ids = (*tok)->encode(texts[i], false);
      const auto ids_special = (*tok)->encode(texts[i], true);
      CHECK(ids == refs[i]["ids"].get<std::vector<int32_t>>());
      CHECK(ids_special == refs[i]["ids_special"].get<std::vector<int32_t>>());
      const auto decoded = (*tok)->decode(refs[i]["ids_special"].get<std::vector<int32_t>>());
      REQUIRE(decoded.is_ok());
      CHECK(*decoded == refs[i]["decoded"].get<std::string>());
      matched += ids == refs[i]["ids"].get<std::vector<int32_t>>();
    }
    CHECK(matched == texts.size());
  }
}

TEST_CASE("tokenizer metadata: special tokens, BOS and EOS") {
  const std::string dir = tokenizer_dir("llama3");
  if (dir.empty()) SKIP("tokenizer files not fetched (run scripts/fetch-tokenizers.sh)");
  auto tok = std::move(Tokenizer::load(dir).value());
  CHECK(tok->vocab_size() == 128256);
  CHECK(tok->bos_token_id() == 128000);
  CHECK(tok->eos_token_id().has_value());
  CHECK(tok->is_special(128000));
  CHECK_FALSE(tok->is_special(9906));
  CHECK(tok->token_to_piece(9906) == "Hello");
  CHECK(tok->token_to_id("<|eot_id|>") == 128009);
  CHECK(*tok->decode(std::vector<int32_t>{128000, 9906}, true) == "Hello");
  const auto bad = tok->decode(std::vector<int32_t>{5, 999999});
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("999999") != std::string::npos);
  // Invalid UTF-8 is replaced, never rejected: the ids are those of the repaired text.
  CHECK(tok->encode("a\xff"
                    "b") == tok->encode("a\xEF\xBF\xBD"
                                        "b"));
}

TEST_CASE("streaming detokenization never splits a character and adds up to decode()") {
  for (const std::string name : {"llama3", "qwen3"}) {
    const std::string dir = tokenizer_dir(name);
    if (dir.empty()) SKIP("tokenizer files not fetched (run scripts/fetch-tokenizers.sh): " << name);
    auto tok = std::move(Tokenizer::load(dir).value());
    for (const std::string& text : corpus()) {
      const auto ids = tok->encode(text, false);
      StreamingDetokenizer stream(*tok);
      std::string joined;
      for (int32_t id : ids) {
        const std::string delta = stream.push(id);
        REQUIRE(utf8::is_valid(delta));
        REQUIRE(delta.find("\xEF\xBF\xBD") == std::string::npos);  // no half characters were emitted as U+FFFD
        joined += delta;
      }
      joined += stream.finish();
      CHECK(joined == *tok->decode(ids));
    }
  }
}

TEST_CASE("malformed tokenizer files give errors that name the problem") {
  auto expect = [](const std::string& text, StatusCode code, const std::string& fragment) {
    const fs::path p = write_temp("tokenizer.json", text);
    auto tok = Tokenizer::load(p.string());
    INFO(tok.status().to_string());
    CHECK(tok.status().code() == code);
    CHECK(tok.status().message().find(fragment) != std::string::npos);
    fs::remove(p);
  };
  const std::string model = R"("model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]})";
  expect("{not json", StatusCode::kFormatError, "well-formed");
  expect(R"({"model":{"type":"WordPiece","vocab":{}}})", StatusCode::kUnsupported, "WordPiece");
  expect("{" + model + R"(,"normalizer":{"type":"BertNormalizer"}})", StatusCode::kUnsupported, "BertNormalizer");
  expect("{" + model + R"(,"pre_tokenizer":{"type":"Whitespace"}})", StatusCode::kUnsupported, "Whitespace");
  expect("{" + model + R"(,"decoder":{"type":"WordPiece"}})", StatusCode::kUnsupported, "WordPiece");
  expect(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":["a b"]}})", StatusCode::kFormatError, "missing");
  // An empty vocabulary (found by fuzz_tokenizer_json: merges were looked up in an empty table).
  expect(R"({"model":{"type":"BPE","vocab":{},"merges":["a b"]}})", StatusCode::kFormatError, "no tokens");
  expect(R"({"model":{"type":"BPE","vocab":{},"merges":[]}})", StatusCode::kFormatError, "no tokens");
  expect(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[3]}})", StatusCode::kFormatError, "merge #0");
  expect("{" + model + R"(,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(unclosed"}}})",
         StatusCode::kFormatError, "does not compile");
  expect("{" + model + R"(,"added_tokens":[{"id":"x"}]})", StatusCode::kFormatError, "added token");
  // A field of the wrong type (found by fuzz_tokenizer_json; its input is in the fuzz corpus).
  expect("{" + model + R"(,"pre_tokenizer":{"type":"ByteLevel","use_regex":1}})", StatusCode::kFormatError,
         "wrong type");
  expect(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[],"ignore_merges":"yes"}})", StatusCode::kFormatError,
         "wrong type");
  CHECK(Tokenizer::load("/nonexistent/dir").status().code() == StatusCode::kNotFound);
  // A small valid file works end to end, merges in both spellings.
  for (const std::string merges : {R"(["a b"])", R"([["a","b"]])"}) {
    const fs::path p =
        write_temp("ok.json", R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":)" + merges + "}}");
    auto tok = Tokenizer::load(p.string());
    REQUIRE(tok.is_ok());
    CHECK((*tok)->encode("abab") == std::vector<int32_t>{2, 2});
    CHECK(*(*tok)->decode(std::vector<int32_t>{2, 0}) == "aba");
    fs::remove(p);
  }
}

TEST_CASE("SentencePiece models encode and decode as libsentencepiece does") {
  const std::string dir = std::string(PHOTON_TEST_DATA_DIR) + "/tokenizer/sentencepiece";
  auto tok = Tokenizer::load(dir);
#if defined(PHOTON_WITH_SENTENCEPIECE)
  INFO(tok.status().to_string());
  REQUIRE(tok.is_ok());
  CHECK((*tok)->vocab_size() == 600);
  CHECK((*tok)->bos_token_id() == 1);
  CHECK((*tok)->eos_token_id() == 2);
  CHECK((*tok)->is_special(1));
  const auto texts = corpus();
  const auto refs = golden("sentencepiece");
  REQUIRE(refs.size() == texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    INFO("corpus line " << i + 1);
    const auto ids = (*tok)->encode(texts[i], false);
    CHECK(ids == refs[i]["ids"].get<std::vector<int32_t>>());
    CHECK((*tok)->encode(texts[i], true) == refs[i]["ids_special"].get<std::vector<int32_t>>());
    CHECK(*(*tok)->decode(ids) == refs[i]["decoded"].get<std::string>());
    // Streaming adds up to the same text, whole characters only.
    StreamingDetokenizer stream(**tok);
    std::string joined;
    for (int32_t id : ids) {
      const std::string delta = stream.push(id);
      CHECK(utf8::is_valid(delta));
      joined += delta;
    }
    joined += stream.finish();
    CHECK(joined == refs[i]["decoded"].get<std::string>());
  }
  CHECK((*tok)->decode(std::vector<int32_t>{5, 600}).status().code() == StatusCode::kInvalidArgument);
#else
  CHECK(tok.status().code() == StatusCode::kUnsupported);
  CHECK(tok.status().message().find("libsentencepiece") != std::string::npos);
#endif
}

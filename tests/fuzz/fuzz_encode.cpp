// libFuzzer target: encoding arbitrary bytes (invalid UTF-8 included) with a byte-level BPE tokenizer, decoding
// the ids back and streaming them. Uses the real Llama 3 tokenizer when PHOTON_FUZZ_TOKENIZER names it, else a
// small built-in one.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <photon/tokenizer.hpp>

namespace {

std::unique_ptr<photon::Tokenizer> load() {
  if (const char* path = std::getenv("PHOTON_FUZZ_TOKENIZER")) {
    auto tok = photon::Tokenizer::load(path);
    if (tok.is_ok()) return std::move(*tok);
  }
  // Byte-level alphabet for the bytes of "ab <>|" plus a few merges and an added token.
  const std::string json = R"({
    "added_tokens": [{"id": 9, "content": "<|x|>", "special": true}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+|\\s+"}, "behavior": "Isolated"},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "byte_fallback": false, "ignore_merges": true,
              "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġa": 4, "<": 5, ">": 6, "|": 7, "abab": 8},
              "merges": ["a b", "Ġ a", "ab ab"]}})";
  const std::string path = "/tmp/photon_fuzz_encode_" + std::to_string(::getpid()) + ".json";
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(json.data(), 1, json.size(), f);
    std::fclose(f);
  }
  auto tok = photon::Tokenizer::load(path);
  if (!tok.is_ok()) std::abort();
  return std::move(*tok);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<photon::Tokenizer> tok = load();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto ids = tok->encode(text, true);
  (void)tok->decode(ids);
  photon::StreamingDetokenizer stream(*tok);
  for (int32_t id : ids) (void)stream.push(id);
  (void)stream.finish();
  return 0;
}

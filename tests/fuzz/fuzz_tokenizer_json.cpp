// libFuzzer target: loading an arbitrary tokenizer.json, then encoding and decoding with whatever loaded.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include <photon/tokenizer.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/photon_fuzz_tokenizer_" + std::to_string(::getpid()) + ".json";
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  auto tok = photon::Tokenizer::load(path);
  if (tok.is_ok()) {
    const auto ids = (*tok)->encode("Hello world! <|x|> 日本 😀 123", true);
    (void)(*tok)->decode(ids);
    photon::StreamingDetokenizer stream(**tok);
    for (int32_t id : ids) (void)stream.push(id);
    (void)stream.finish();
  }
  return 0;
}

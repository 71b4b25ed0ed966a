// Greedy generation through the C++ API, linked with find_package(Photon).
//   generate_cpp MODEL [ID,ID,...]    e.g. generate_cpp dummy:tiny-llama3 128000,9906
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <photon/engine.hpp>
#include <photon/version.hpp>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL [PROMPT_IDS]\n", argv[0]);
    return 2;
  }
  std::vector<int32_t> prompt = {1, 2, 3};
  if (argc > 2) {
    prompt.clear();
    std::stringstream ss(argv[2]);
    for (std::string item; std::getline(ss, item, ',');) prompt.push_back(std::stoi(item));
  }
  photon::EngineConfig config;
  config.model = argv[1];
  config.max_model_len = 256;
  auto engine = photon::Engine::create(config);
  if (!engine) {
    std::fprintf(stderr, "error: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  photon::SamplingParams params;
  params.temperature = 0.0f;  // greedy
  params.max_tokens = 8;
  params.ignore_eos = true;
  auto id = (*engine)->submit(prompt, params);
  if (!id) {
    std::fprintf(stderr, "error: %s\n", id.status().to_string().c_str());
    return 1;
  }
  std::printf("photon %s, %s\n", photon::version_string(), (*engine)->model_info().architecture.c_str());
  while ((*engine)->has_unfinished_requests()) {
    if (auto s = (*engine)->step(); !s) std::fprintf(stderr, "step: %s\n", s.to_string().c_str());
    for (const auto& event : (*engine)->poll()) {
      for (int32_t t : event.token_ids) std::printf("%d ", t);
      if (event.finished) std::printf("[%s]\n", photon::finish_reason_name(event.finish_reason));
    }
  }
  return 0;
}

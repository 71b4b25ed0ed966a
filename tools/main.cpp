// photon: the PhotonInfer command-line tool.
#include <cstdio>
#include <cstring>
#include <string_view>

#include <fmt/format.h>
#include <photon/version.hpp>

#include "commands.hpp"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

constexpr Command kCommands[] = {
    {"generate", "generate from token-id prompts (one, or a JSON Lines batch), with logprobs",
     photon::cli::run_generate},
    {"bench", "offline throughput and latency benchmark on random prompts", photon::cli::run_bench},
    {"tokenize", "text (JSON Lines of strings) to token ids", photon::cli::run_tokenize},
    {"detokenize", "token ids (JSON Lines of arrays) to text", photon::cli::run_detokenize},
    {"template", "render a chat request with the model's chat template", photon::cli::run_template},
    {"quantize", "write an int8 (compressed-tensors) copy of a float checkpoint", photon::cli::run_quantize},
    {"perplexity", "perplexity over a text file (llama.cpp's method), e.g. int8 against bf16 weights",
     photon::cli::run_perplexity},
#if defined(PHOTON_WITH_SERVER)
    {"serve", "OpenAI-compatible HTTP server (chat, completions, streaming, metrics)", photon::cli::run_serve},
#endif
};

void print_help() {
  fmt::print(
      "Usage: photon <command> [options]\n\nPhotonInfer {}: LLM inference (Llama 3.x, Qwen3) on {}.\n\n"
      "Commands:\n",
      photon::version_string(), photon::built_with_cuda() ? "CUDA GPUs and CPUs" : "CPUs");
  for (const auto& c : kCommands) fmt::print("  {:<12}{}\n", c.name, c.summary);
  fmt::print(
      "\nGlobal options:\n  --help      show this help\n  --version   print the version\n\n"
      "Run 'photon <command> --help' for a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    print_help();
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    fmt::print("photon {}\n", photon::version_string());
    return 0;
  }
  for (const auto& c : kCommands) {
    if (std::string_view(argv[1]) == c.name) return c.run(argc, argv);
  }
  fmt::print(stderr, "photon: error: unknown command '{}'; run 'photon --help' for the list\n", argv[1]);
  return 2;
}

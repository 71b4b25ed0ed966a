// Tokenizer speed: load time of a tokenizer.json and single-threaded encoding of a 1 MB input, printed as JSON so
// scripts/tokenizer-bench.sh can set it beside Hugging Face `tokenizers` on the same input.
//   photon_bench_tokenizer TOKENIZER_DIR INPUT_FILE
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <photon/tokenizer.hpp>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR INPUT_FILE\n", argv[0]);
    return 2;
  }
  using Clock = std::chrono::steady_clock;
  std::ifstream in(argv[2], std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  auto t0 = Clock::now();
  auto tok = photon::Tokenizer::load(argv[1]);
  const double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!tok) {
    std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
    return 1;
  }
  double best = 1e30;
  size_t ids = 0;
  for (int i = 0; i < 5; ++i) {
    t0 = Clock::now();
    const auto out = (*tok)->encode(text, false);
    best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    ids = out.size();
  }
  std::printf("{\"impl\": \"photon\", \"load_ms\": %.1f, \"encode_ms\": %.1f, \"ids\": %zu, \"mb_per_s\": %.2f}\n",
              load_ms, best, ids, static_cast<double>(text.size()) / 1e6 / (best / 1e3));
  return 0;
}

// photon tokenize / photon detokenize: JSON Lines in, JSON Lines out, exactly Hugging Face `tokenizers`' ids.
#include <cstdio>
#include <iostream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <photon/tokenizer.hpp>

#include "args.hpp"
#include "commands.hpp"

namespace photon::cli {
namespace {

using nlohmann::json;

int fail(const char* command, const std::string& message, int code) {
  fmt::print(stderr, "photon {}: error: {}\n", command, message);
  return code;
}

// Parses the common flags; returns the tokenizer or an exit code.
std::unique_ptr<Tokenizer> open(Args& args, int argc, char** argv, const char* command, int* exit_code) {
  if (Status s = args.parse(argc, argv, 2); !s) {
    *exit_code = fail(command, s.message(), 2);
    return nullptr;
  }
  if (args.help_requested()) {
    fmt::print("{}", args.help_text());
    *exit_code = 0;
    return nullptr;
  }
  if (!args.has("tokenizer")) {
    *exit_code = fail(command, "option '--tokenizer' is required (a folder holding tokenizer.json, or the file)", 2);
    return nullptr;
  }
  auto tok = Tokenizer::load(args.get("tokenizer"));
  if (!tok) {
    *exit_code = fail(command, tok.status().message(), 1);
    return nullptr;
  }
  return std::move(*tok);
}

}  // namespace

int run_tokenize(int argc, char** argv) {
  Args args("photon tokenize --tokenizer DIR_OR_FILE [--add-special-tokens] < strings.jsonl",
            "Reads JSON Lines on stdin, each one JSON string, and writes JSON Lines, each the array of its token "
            "ids. Special-token text inside the strings is recognised. Invalid UTF-8 is replaced by U+FFFD.");
  args.option("tokenizer", "DIR_OR_FILE", "folder holding tokenizer.json (and tokenizer_config.json), or the file");
  args.flag("add-special-tokens", "let the post-processor add its tokens (BOS for Llama 3)");
  int code = 0;
  auto tok = open(args, argc, argv, "tokenize", &code);
  if (!tok) return code;
  const bool special = args.has("add-special-tokens");
  std::string line;
  for (int n = 1; std::getline(std::cin, line); ++n) {
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_string()) {
      return fail("tokenize", fmt::format("stdin line {}: expected one JSON string per line", n), 1);
    }
    fmt::print("{}\n", json(tok->encode(j.get_ref<const std::string&>(), special)).dump());
  }
  std::fflush(stdout);
  return 0;
}

int run_detokenize(int argc, char** argv) {
  Args args("photon detokenize --tokenizer DIR_OR_FILE < ids.jsonl",
            "Reads JSON Lines on stdin, each an array of token ids, and writes JSON Lines, each the decoded text as a "
            "JSON string (special tokens kept).");
  args.option("tokenizer", "DIR_OR_FILE", "folder holding tokenizer.json (and tokenizer_config.json), or the file");
  args.flag("skip-special-tokens", "leave special tokens out of the text");
  int code = 0;
  auto tok = open(args, argc, argv, "detokenize", &code);
  if (!tok) return code;
  std::string line;
  for (int n = 1; std::getline(std::cin, line); ++n) {
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    std::vector<int32_t> ids;
    bool ok = !j.is_discarded() && j.is_array();
    for (const json& v : ok ? j : json::array()) {
      if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX) {
        ok = false;
        break;
      }
      ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    if (!ok) return fail("detokenize", fmt::format("stdin line {}: expected one JSON array of token ids", n), 1);
    auto text = tok->decode(ids, args.has("skip-special-tokens"));
    if (!text) return fail("detokenize", fmt::format("stdin line {}: {}", n, text.status().message()), 1);
    fmt::print("{}\n", json(*text).dump());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace photon::cli

// photon template: renders a chat request through a model's own chat template, exactly, for inspection and tests.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <photon/chat_template.hpp>

#include "args.hpp"
#include "commands.hpp"

namespace photon::cli {

int run_template(int argc, char** argv) {
  Args args("photon template --tokenizer DIR --request FILE",
            "Renders a chat request with the chat template of DIR/tokenizer_config.json and prints the prompt "
            "exactly (nothing added). FILE: {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": "
            "true|false, \"extra\": {...}} where tools and extra (template variables) are optional.");
  args.option("tokenizer", "DIR", "folder holding tokenizer_config.json with a chat_template");
  args.option("request", "FILE", "the chat request as JSON");
  auto fail = [](const std::string& m, int code) {
    fmt::print(stderr, "photon template: error: {}\n", m);
    return code;
  };
  if (Status s = args.parse(argc, argv, 2); !s) return fail(s.message(), 2);
  if (args.help_requested()) {
    fmt::print("{}", args.help_text());
    return 0;
  }
  if (!args.has("tokenizer") || !args.has("request"))
    return fail("options '--tokenizer' and '--request' are required", 2);
  auto tmpl = ChatTemplate::load(args.get("tokenizer"));
  if (!tmpl) return fail(tmpl.status().message(), 1);
  std::ifstream in(args.get("request"));
  if (!in) return fail(fmt::format("cannot open '{}'", args.get("request")), 1);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto req = nlohmann::ordered_json::parse(ss.str(), nullptr, false);
  if (req.is_discarded() || !req.is_object() || !req.contains("messages")) {
    return fail(fmt::format("'{}' must be a JSON object with 'messages'", args.get("request")), 1);
  }
  ChatTemplate::Options options;
  options.add_generation_prompt = req.value("add_generation_prompt", false);
  if (req.contains("extra")) options.extra_json = req["extra"].dump();
  const std::string tools = req.contains("tools") ? req["tools"].dump() : std::string();
  auto out = (*tmpl)->render(req["messages"].dump(), tools, options);
  if (!out) return fail(out.status().message(), 1);
  std::fwrite(out->data(), 1, out->size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace photon::cli

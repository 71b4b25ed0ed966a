// libFuzzer target: the HTTP server's request parser (chat and completions bodies) and its output parsers (tool
// calls in both formats, reasoning), on arbitrary bytes fed in two pieces. Checks that output parsers lose no text:
// when no call is found the content is the input, and the reasoning splitter never makes text up.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/openai_request.hpp"
#include "server/reasoning.hpp"
#include "server/tool_calls.hpp"

using namespace photon::server;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)parse_generation_request(text, Endpoint::kChat);
  (void)parse_generation_request(text, Endpoint::kCompletion);
  const size_t cut = size == 0 ? 0 : data[0] % (size + 1);
  for (ToolCallFormat format : {ToolCallFormat::kHermes, ToolCallFormat::kLlamaJson}) {
    ToolCallParser p(format);
    std::string content = p.feed(text.substr(0, cut)).content;
    content += p.feed(text.substr(cut)).content;
    content += p.finish().content;
    if (!p.found_calls() && content != text) __builtin_trap();
  }
  ReasoningSplitter s;
  auto a = s.feed(text.substr(0, cut));
  auto b = s.feed(text.substr(cut));
  auto c = s.finish();
  if (a.reasoning.size() + a.content.size() + b.reasoning.size() + b.content.size() + c.reasoning.size() +
          c.content.size() >
      size) {
    __builtin_trap();
  }
  return 0;
}

// libFuzzer target: parsing and rendering arbitrary chat-template source against a fixed conversation.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <photon/chat_template.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto tmpl = photon::ChatTemplate::from_source(source, R"({"bos_token": "<s>", "eos_token": "</s>"})");
  if (tmpl.is_ok()) {
    photon::ChatTemplate::Options options;
    options.extra_json = R"({"enable_thinking": false})";
    (void)(*tmpl)->render(
        R"([{"role":"system","content":"sys"},{"role":"user","content":"Hi ü"},{"role":"assistant","content":"<think>r</think>ok","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]}])",
        R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])", options);
  }
  return 0;
}

// Function calls in a model's output, as OpenAI's `tool_calls`: Qwen3 (Hermes style) writes
// <tool_call>{"name": ..., "arguments": {...}}</tool_call> blocks among its text; Llama 3.x answers with a JSON
// object {"name": ..., "parameters": {...}} (after an optional <|python_tag|>, several separated by ';'). Text that
// does not parse as a call stays content. Streamed text arrives in pieces: a call is held back until it is whole.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace photon::server {

enum class ToolCallFormat {
  kHermes,     ///< <tool_call>{json}</tool_call> (Qwen3, Hermes)
  kLlamaJson,  ///< the whole answer is {"name", "parameters"} objects (Llama 3.1 / 3.2)
};

struct ToolCall {
  std::string id;  ///< "call_" + random hex
  std::string name;
  std::string arguments;  ///< a JSON object, as text
};

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallFormat format) : format_(format) {}

  struct Delta {
    std::string content;
    std::vector<ToolCall> calls;
  };
  /// The next piece of (non-reasoning) output.
  Delta feed(std::string_view text);
  /// The end of the output: what is still held back, as calls or as content.
  Delta finish();
  /// Whether any call was found so far (the finish reason is then "tool_calls").
  bool found_calls() const { return found_; }

 private:
  Delta feed_hermes(std::string_view text);
  ToolCallFormat format_;
  std::string pending_;
  bool inside_ = false;     // Hermes: within <tool_call>
  bool decided_ = false;    // Llama: whether the answer is a call or text is known
  bool buffering_ = false;  // Llama: the answer looks like a call; hold it to the end
  bool found_ = false;
};

/// The text that opens a call in `format`, for a prompt that forces one (OpenAI's tool_choice "required" or a named
/// function): the model continues from it, and a parser fed the same text first reads the whole call. An empty
/// `function_name` leaves the name to the model.
std::string call_opening(ToolCallFormat format, std::string_view function_name);

/// The calls in `json_text` (one object, or a list of them) with a string "name" and an object "arguments" or
/// "parameters" (or arguments already as a JSON string); empty when it is not that.
std::vector<ToolCall> parse_call_objects(std::string_view json_text);

}  // namespace photon::server

// photon quantize: writes an int8 (compressed-tensors) copy of a float checkpoint.
#include <fmt/format.h>
#include <photon/quantize.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "progress.hpp"

namespace photon::cli {

int run_quantize(int argc, char** argv) {
  Args args("photon quantize --model DIR --out DIR2 [--group-size 32|64|128] [--quantize-lm-head]",
            "Quantizes the projections of a float checkpoint to symmetric int8 with one scale per group of input "
            "features and writes them in the compressed-tensors layout (pack-quantized), with the model's config, "
            "tokenizer and generation files. Load the result with --model DIR2; transformers and vLLM read it too.");
  args.option("model", "DIR", "Hugging Face checkpoint folder with float weights");
  args.option("out", "DIR2", "folder to write (created if missing)");
  args.option("group-size", "32|64|128", "input features per scale", "128");
  args.flag("quantize-lm-head", "quantize an untied LM head too (a tied one stays with the embedding in floats)");
  const auto fail = [](const std::string& message, int code) {
    fmt::print(stderr, "photon quantize: error: {}\n", message);
    return code;
  };
  if (Status s = args.parse(argc, argv, 2); !s) return fail(s.message(), 2);
  if (args.help_requested()) {
    fmt::print("{}", args.help_text());
    return 0;
  }
  for (const char* required : {"model", "out"}) {
    if (!args.has(required)) return fail(fmt::format("option '--{}' is required", required), 2);
  }
  auto group = args.get_int("group-size", 1, 1 << 20);
  if (!group) return fail(group.status().message(), 2);
  if (*group != 32 && *group != 64 && *group != 128) {
    return fail(fmt::format("option '--group-size' must be 32, 64 or 128, not {}", *group), 2);
  }
  QuantizeOptions o;
  o.model = args.get("model");
  o.out = args.get("out");
  o.group_size = static_cast<int32_t>(*group);
  o.quantize_lm_head = args.has("quantize-lm-head");
  ProgressBar bar("quantizing");
  o.progress = [&](uint64_t done, uint64_t total) { bar.update(done, total); };
  if (Status s = quantize_checkpoint(o); !s) return fail(s.message(), 1);
  bar.finish();
  fmt::print("wrote {} (int8, groups of {})\n", o.out, o.group_size);
  return 0;
}

}  // namespace photon::cli

// Engine flags shared by the photon subcommands that run models (generate, bench, serve): model, device, memory and
// scheduling limits. Each subcommand chooses its own defaults for the sizes, by device.
#pragma once

#include <photon/engine.hpp>

#include "args.hpp"

namespace photon::cli {

struct EngineFlagDefaults {
  const char* device;  ///< "cpu", "cuda" or "auto" (cuda when a GPU is visible)
  int max_num_seqs;
  int max_num_batched_tokens;
  /// The two limits on a large GPU — compute capability 9.0 or newer with at least 70 GiB (H100, H200 and later),
  /// where vLLM's defaults are larger too: more rows per decode step read each weight once for more tokens.
  int large_gpu_max_num_seqs;
  int large_gpu_max_num_batched_tokens;
};

/// Registers --model, --load-format, --tokenizer, --dtype, --device, --seed, --max-num-seqs, --max-num-batched-tokens,
/// --max-model-len, --block-size, --num-kv-blocks, --kv-cache-memory, --memory-utilization, --kv-cache-dtype,
/// --enable-prefix-caching / --no-prefix-caching, --tensor-parallel-size, --dist-init-addr, --rank, --threads and
/// --log-level.
void add_engine_flags(Args& a, const EngineFlagDefaults& defaults);

/// Reads them into `config` (sets the OpenMP thread count and the log level as side effects). `defaults` must be the
/// ones given to add_engine_flags: the size limits not given on the command line come from them, by device.
Status read_engine_config(const Args& a, const EngineFlagDefaults& defaults, EngineConfig& config);

/// Engine::create(config) with a "loading" progress bar on a terminal (config.load_progress is replaced); `load_s` gets
/// the seconds it took.
Result<std::unique_ptr<Engine>> load_engine(EngineConfig config, double& load_s);

}  // namespace photon::cli

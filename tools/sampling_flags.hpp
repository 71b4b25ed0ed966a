// Token-selection flags shared by the photon subcommands that sample (generate, bench): --temperature, --top-k,
// --top-p and --min-p, with the same meaning, defaults and ranges in both.
#pragma once

#include <photon/sampling.hpp>

#include "args.hpp"

namespace photon::cli {

/// Registers --temperature, --top-k, --top-p and --min-p (defaults: greedy, no filtering).
void add_sampling_flags(Args& a);

/// Reads them into `params`; an out-of-range value is an error naming the flag.
Status read_sampling_flags(const Args& a, SamplingParams& params);

}  // namespace photon::cli

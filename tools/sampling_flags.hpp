// Token-selection flags shared by the photon subcommands that sample (generate, bench): --temperature, --top-k,
// --top-p, --min-p and the repetition, presence and frequency penalties, with the same meaning, defaults and ranges
// in both.
#pragma once

#include <photon/sampling.hpp>

#include "args.hpp"

namespace photon::cli {

/// Registers --temperature, --top-k, --top-p, --min-p, --repetition-penalty, --presence-penalty and
/// --frequency-penalty (defaults: greedy, no filtering, no penalties).
void add_sampling_flags(Args& a);

/// Reads them into `params`; an out-of-range value is an error naming the flag.
Status read_sampling_flags(const Args& a, SamplingParams& params);

}  // namespace photon::cli

#include "sampling_flags.hpp"

namespace photon::cli {

void add_sampling_flags(Args& a) {
  a.option("temperature", "T", "0 for greedy; above 0 samples from softmax(logits / T)", "0");
  a.option("top-k", "K", "sample among the K most likely tokens (0: all)", "0");
  a.option("top-p", "P", "sample among the most likely tokens holding probability P", "1");
  a.option("min-p", "P", "drop tokens less likely than P times the most likely one", "0");
  a.option("repetition-penalty", "R", "penalise tokens already in the prompt or output (1: off)", "1");
  a.option("presence-penalty", "X", "subtract X from logits of tokens already generated", "0");
  a.option("frequency-penalty", "X", "subtract X per earlier occurrence in the output", "0");
}

Status read_sampling_flags(const Args& a, SamplingParams& params) {
  PHOTON_ASSIGN_OR_RETURN(const double t, a.get_double("temperature", 0.0, 100.0));
  PHOTON_ASSIGN_OR_RETURN(const int64_t k, a.get_int("top-k", -1, 1 << 24));
  PHOTON_ASSIGN_OR_RETURN(const double top_p, a.get_double("top-p", 1e-9, 1.0));
  PHOTON_ASSIGN_OR_RETURN(const double min_p, a.get_double("min-p", 0.0, 1.0));
  PHOTON_ASSIGN_OR_RETURN(const double repetition, a.get_double("repetition-penalty", 1e-6, 100.0));
  PHOTON_ASSIGN_OR_RETURN(const double presence, a.get_double("presence-penalty", -2.0, 2.0));
  PHOTON_ASSIGN_OR_RETURN(const double frequency, a.get_double("frequency-penalty", -2.0, 2.0));
  params.temperature = static_cast<float>(t);
  params.top_k = static_cast<int32_t>(k);
  params.top_p = static_cast<float>(top_p);
  params.min_p = static_cast<float>(min_p);
  params.repetition_penalty = static_cast<float>(repetition);
  params.presence_penalty = static_cast<float>(presence);
  params.frequency_penalty = static_cast<float>(frequency);
  return Status::ok();
}

}  // namespace photon::cli

#include "sampling_flags.hpp"

namespace photon::cli {

void add_sampling_flags(Args& a) {
  a.option("temperature", "T", "0 for greedy; above 0 samples from softmax(logits / T)", "0");
  a.option("top-k", "K", "sample among the K most likely tokens (0: all)", "0");
  a.option("top-p", "P", "sample among the most likely tokens holding probability P", "1");
  a.option("min-p", "P", "drop tokens less likely than P times the most likely one", "0");
}

Status read_sampling_flags(const Args& a, SamplingParams& params) {
  PHOTON_ASSIGN_OR_RETURN(const double t, a.get_double("temperature", 0.0, 100.0));
  PHOTON_ASSIGN_OR_RETURN(const int64_t k, a.get_int("top-k", -1, 1 << 24));
  PHOTON_ASSIGN_OR_RETURN(const double top_p, a.get_double("top-p", 1e-9, 1.0));
  PHOTON_ASSIGN_OR_RETURN(const double min_p, a.get_double("min-p", 0.0, 1.0));
  params.temperature = static_cast<float>(t);
  params.top_k = static_cast<int32_t>(k);
  params.top_p = static_cast<float>(top_p);
  params.min_p = static_cast<float>(min_p);
  return Status::ok();
}

}  // namespace photon::cli

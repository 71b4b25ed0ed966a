#include "models/weights.hpp"

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cpu/kernels.hpp"

namespace photon {
namespace {

// Describes one tensor the decoder needs.
struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  Tensor* slot;
  bool is_norm;  // kept in f32 whatever the checkpoint holds
};

std::vector<Spec> weight_specs(const ModelConfig& c, ModelWeights& w) {
  std::vector<Spec> specs;
  const int64_t h = c.hidden_size;
  specs.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, &w.embed, false});
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = fmt::format("model.layers.{}.", i);
    specs.push_back({p + "input_layernorm.weight", {h}, &l.input_norm, true});
    specs.push_back({p + "self_attn.q_proj.weight", {c.q_size(), h}, &l.q_proj, false});
    specs.push_back({p + "self_attn.k_proj.weight", {c.kv_size(), h}, &l.k_proj, false});
    specs.push_back({p + "self_attn.v_proj.weight", {c.kv_size(), h}, &l.v_proj, false});
    specs.push_back({p + "self_attn.o_proj.weight", {h, c.q_size()}, &l.o_proj, false});
    if (c.has_qk_norm()) {
      specs.push_back({p + "self_attn.q_norm.weight", {c.head_dim}, &l.q_norm, true});
      specs.push_back({p + "self_attn.k_norm.weight", {c.head_dim}, &l.k_norm, true});
    }
    specs.push_back({p + "post_attention_layernorm.weight", {h}, &l.post_norm, true});
    specs.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, h}, &l.gate_proj, false});
    specs.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, h}, &l.up_proj, false});
    specs.push_back({p + "mlp.down_proj.weight", {h, c.intermediate_size}, &l.down_proj, false});
  }
  specs.push_back({"model.norm.weight", {h}, &w.final_norm, true});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {c.vocab_size, h}, &w.lm_head, false});
  return specs;
}

uint64_t spec_bytes(const Spec& s, DType dtype) {
  uint64_t n = 1;
  for (int64_t d : s.shape) n *= static_cast<uint64_t>(d);
  return n * (s.is_norm ? 4 : dtype_size(dtype));
}

// Puts a host tensor on the backend's device in `dtype`: a zero-copy view when it already fits, else a copy.
Result<Tensor> place(const Tensor& host, DType dtype, Backend& backend) {
  if (backend.device() == Device::cpu() && host.dtype() == dtype) return host;
  PHOTON_ASSIGN_OR_RETURN(Tensor dst, Tensor::empty(host.shape(), dtype, backend.allocator()));
  if (host.dtype() == dtype) {
    backend.copy_to_device(host.raw(), dst, host.nbytes());
    return dst;
  }
  std::vector<float> f32(static_cast<size_t>(host.numel()));
  cpu::to_f32(host.raw(), host.dtype(), host.numel(), f32.data());
  std::vector<char> converted(dst.nbytes());
  cpu::from_f32(f32.data(), host.numel(), dtype, converted.data());
  backend.copy_to_device(converted.data(), dst, dst.nbytes());
  return dst;
}

void finish(const ModelConfig& c, ModelWeights& w) {
  if (c.tie_word_embeddings) w.lm_head = w.embed;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t hash_name(std::string_view s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char ch : s) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h;
}

// Uniform values of the given standard deviation (or `mean` +- that spread for norms), written as `dtype`.
// Chunks are seeded independently, so the result does not depend on the thread count.
void fill_random(void* dst, DType dtype, int64_t n, uint64_t seed, float mean, float stddev) {
  constexpr int64_t kChunk = 1 << 16;
  const float half_width = stddev * std::sqrt(3.0f);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    uint64_t state = seed ^ (static_cast<uint64_t>(c) * 0xd1b54a32d192ed03ull);
    const int64_t begin = c * kChunk;
    const int64_t end = std::min(n, begin + kChunk);
    float buf[256];
    for (int64_t i = begin; i < end; i += 256) {
      const int64_t len = std::min<int64_t>(256, end - i);
      for (int64_t j = 0; j < len; ++j) {
        const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;  // [0, 1)
        buf[j] = mean + static_cast<float>((2.0 * u - 1.0) * half_width);
      }
      cpu::from_f32(buf, len, dtype, static_cast<char*>(dst) + static_cast<size_t>(i) * dtype_size(dtype));
    }
  }
}

}  // namespace

Result<ModelWeights> load_weights(const ModelConfig& config, const SafetensorsCheckpoint& ckpt, Backend& backend,
                                  const LoadProgress& progress) {
  ModelWeights w;
  const auto specs = weight_specs(config, w);
  uint64_t total = 0;
  for (const auto& s : specs) {
    const SafetensorsEntry* e = ckpt.entry(s.name);
    if (e == nullptr) {
      return Status(StatusCode::kFormatError,
                    fmt::format("checkpoint has no tensor '{}', which {} needs", s.name, config.architecture_name));
    }
    total += e->end - e->begin;
  }
  uint64_t done = 0;
  for (const auto& s : specs) {
    Tensor host = *ckpt.find(s.name);
    const SafetensorsEntry* e = ckpt.entry(s.name);
    if (e->shape != s.shape) {
      return Status(StatusCode::kFormatError, fmt::format("tensor '{}' has shape [{}] but config.json implies [{}]",
                                                          s.name, fmt::join(e->shape, ", "), fmt::join(s.shape, ", ")));
    }
    if (!is_float_dtype(host.dtype())) {
      return Status(StatusCode::kUnsupported, fmt::format("tensor '{}' is {}; weights must be f32, f16 or bf16",
                                                          s.name, dtype_name(host.dtype())));
    }
    PHOTON_ASSIGN_OR_RETURN(*s.slot,
                            place(host, s.is_norm ? DType::kF32 : backend.weight_dtype(host.dtype()), backend));
    w.bytes += s.slot->nbytes();
    done += e->end - e->begin;
    if (progress) progress(done, total);
  }
  finish(config, w);
  return w;
}

Result<ModelWeights> make_dummy_weights(const ModelConfig& config, Backend& backend, uint64_t seed, DType dtype,
                                        const LoadProgress& progress) {
  if (!is_float_dtype(dtype)) {
    return Status(StatusCode::kInvalidArgument, fmt::format("dummy weights must be f32, f16 or bf16, not {}",
                                                            dtype_name(dtype)));
  }
  dtype = backend.weight_dtype(dtype);
  ModelWeights w;
  const auto specs = weight_specs(config, w);
  uint64_t total = 0;
  for (const auto& s : specs) total += spec_bytes(s, dtype);
  uint64_t done = 0;
  const bool on_host = backend.device() == Device::cpu();
  for (const auto& s : specs) {
    const DType t = s.is_norm ? DType::kF32 : dtype;
    PHOTON_ASSIGN_OR_RETURN(Tensor dst, Tensor::empty(s.shape, t, backend.allocator()));
    std::vector<char> staging(on_host ? 0 : dst.nbytes());
    void* target = on_host ? dst.raw() : staging.data();
    const uint64_t tensor_seed = seed ^ hash_name(s.name);
    if (s.is_norm) {
      fill_random(target, t, dst.numel(), tensor_seed, 1.0f, 0.1f);
    } else {
      // Embeddings: logit spread ~3 once hidden states are normalised; projections: unit gain (1/sqrt(fan_in)).
      const bool is_embedding = s.shape[0] == config.vocab_size;
      const float stddev = (is_embedding ? 3.0f : 1.0f) / std::sqrt(static_cast<float>(s.shape[1]));
      fill_random(target, t, dst.numel(), tensor_seed, 0.0f, stddev);
    }
    if (!on_host) backend.copy_to_device(staging.data(), dst, dst.nbytes());
    *s.slot = std::move(dst);
    w.bytes += s.slot->nbytes();
    done += spec_bytes(s, dtype);
    if (progress) progress(done, total);
  }
  finish(config, w);
  return w;
}

}  // namespace photon

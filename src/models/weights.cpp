#include "models/weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/dummy_weights.hpp"
#include "cpu/kernels.hpp"

namespace photon {
namespace {

// Describes one tensor the decoder needs, and which part of it this rank keeps.
struct Spec {
  std::string name;
  std::vector<int64_t> shape;  // the whole tensor, as the checkpoint holds it
  Tensor* slot;
  bool is_norm;              // kept in f32 whatever the checkpoint holds
  Weight* weight = nullptr;  // matrices: the Weight whose values `slot` is (its scales when the checkpoint is int8)
  // Part of a fused tensor (qkv_proj, gate_up_proj): the slot has slot_rows rows and this tensor fills
  // [slot_row_offset, slot_row_offset + local rows). slot_rows == 0: the slot is this tensor alone.
  int64_t slot_rows = 0;
  int64_t slot_row_offset = 0;
  int split_dim = -1;  // -1: whole; 0: rows [begin, begin + count); 1: columns [begin, begin + count)
  int64_t begin = 0;
  int64_t count = 0;  // may reach past the tensor (padded vocabulary rows, which are zeros)

  std::vector<int64_t> local_shape() const {
    std::vector<int64_t> local = shape;
    if (split_dim >= 0) local[static_cast<size_t>(split_dim)] = count;
    return local;
  }
};

std::vector<Spec> weight_specs(const ModelConfig& c, const TensorParallelShard& tp, ModelWeights& w) {
  std::vector<Spec> specs;
  const int64_t h = c.hidden_size, hd = c.head_dim;
  const auto rows = [](int64_t begin, int64_t count) { return std::tuple{0, begin, count}; };
  const auto cols = [](int64_t begin, int64_t count) { return std::tuple{1, begin, count}; };
  const auto add = [&](std::string name, std::vector<int64_t> shape, Tensor* slot, bool is_norm,
                       std::tuple<int, int64_t, int64_t> split = {-1, 0, 0}) {
    Spec spec{std::move(name), std::move(shape), slot, is_norm};
    std::tie(spec.split_dim, spec.begin, spec.count) = split;
    if (!tp.is_sharded()) spec.split_dim = -1;
    specs.push_back(std::move(spec));
  };
  const auto add_matrix = [&](std::string name, std::vector<int64_t> shape, Weight& m,
                              std::tuple<int, int64_t, int64_t> split = {-1, 0, 0}) {
    add(std::move(name), std::move(shape), &m.values, false, split);
    specs.back().weight = &m;
  };
  // Lays the last `parts` specs' rows one after another in their shared slot.
  const auto fuse = [&](size_t parts) {
    int64_t rows = 0;
    for (size_t i = specs.size() - parts; i < specs.size(); ++i) {
      specs[i].slot_row_offset = rows;
      rows += specs[i].local_shape()[0];
    }
    for (size_t i = specs.size() - parts; i < specs.size(); ++i) specs[i].slot_rows = rows;
  };
  const auto vocab = rows(tp.vocab_begin, tp.vocab_rows);
  const auto q_rows = rows(tp.q_head_begin * hd, tp.num_heads * hd);
  const auto kv_rows = rows(tp.kv_head_begin * hd, tp.num_kv_heads * hd);
  const auto mlp_rows = rows(tp.intermediate_begin, tp.intermediate_size);
  add_matrix("model.embed_tokens.weight", {c.vocab_size, h}, w.embed, vocab);
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = fmt::format("model.layers.{}.", i);
    add(p + "input_layernorm.weight", {h}, &l.input_norm, true);
    add_matrix(p + "self_attn.q_proj.weight", {c.q_size(), h}, l.qkv_proj, q_rows);
    add_matrix(p + "self_attn.k_proj.weight", {c.kv_size(), h}, l.qkv_proj, kv_rows);
    add_matrix(p + "self_attn.v_proj.weight", {c.kv_size(), h}, l.qkv_proj, kv_rows);
    fuse(3);
    add_matrix(p + "self_attn.o_proj.weight", {h, c.q_size()}, l.o_proj, cols(tp.q_head_begin * hd, tp.num_heads * hd));
    if (c.has_qk_norm()) {
      add(p + "self_attn.q_norm.weight", {hd}, &l.q_norm, true);
      add(p + "self_attn.k_norm.weight", {hd}, &l.k_norm, true);
    }
    add(p + "post_attention_layernorm.weight", {h}, &l.post_norm, true);
    add_matrix(p + "mlp.gate_proj.weight", {c.intermediate_size, h}, l.gate_up_proj, mlp_rows);
    add_matrix(p + "mlp.up_proj.weight", {c.intermediate_size, h}, l.gate_up_proj, mlp_rows);
    fuse(2);
    add_matrix(p + "mlp.down_proj.weight", {h, c.intermediate_size}, l.down_proj,
               cols(tp.intermediate_begin, tp.intermediate_size));
  }
  add("model.norm.weight", {h}, &w.final_norm, true);
  if (!c.tie_word_embeddings) add_matrix("lm_head.weight", {c.vocab_size, h}, w.lm_head, vocab);
  return specs;
}

// The part of a host tensor a spec keeps: a view where it is a plain row range, else a copy (columns, or rows
// padded with zeros past the end).
Result<Tensor> slice_host(const Tensor& full, const Spec& s) {
  if (s.split_dim < 0) return full;
  const int64_t full_rows = full.size(0);
  if (s.split_dim == 0 && s.begin + s.count <= full_rows) return full.slice_rows(s.begin, s.begin + s.count);
  const std::vector<int64_t> shape = s.local_shape();
  PHOTON_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(shape, full.dtype(), default_cpu_allocator()));
  std::memset(out.raw(), 0, out.nbytes());
  const size_t esize = dtype_size(full.dtype());
  const auto* src = static_cast<const char*>(full.raw());
  auto* dst = static_cast<char*>(out.raw());
  const auto full_row_bytes = static_cast<size_t>(full.size(1)) * esize;
  if (s.split_dim == 0) {
    const int64_t have = std::max<int64_t>(0, full_rows - s.begin);
    std::memcpy(dst, src + static_cast<size_t>(s.begin) * full_row_bytes, static_cast<size_t>(have) * full_row_bytes);
  } else {
    const auto row_bytes = static_cast<size_t>(s.count) * esize;
    for (int64_t r = 0; r < full_rows; ++r) {
      std::memcpy(dst + static_cast<size_t>(r) * row_bytes,
                  src + static_cast<size_t>(r) * full_row_bytes + static_cast<size_t>(s.begin) * esize, row_bytes);
    }
  }
  return out;
}

uint64_t spec_bytes(const Spec& s, DType dtype) {
  uint64_t n = 1;
  for (int64_t d : s.local_shape()) n *= static_cast<uint64_t>(d);
  return n * (s.is_norm ? 4 : dtype_size(dtype));
}

// Copies a host tensor into device memory `dst` of the same element count, converting to dst's dtype.
void copy_converted(const Tensor& host, Tensor& dst, Backend& backend) {
  if (host.dtype() == dst.dtype()) {
    backend.copy_to_device(host.raw(), dst, host.nbytes());
    return;
  }
  std::vector<float> f32(static_cast<size_t>(host.numel()));
  cpu::to_f32(host.raw(), host.dtype(), host.numel(), f32.data());
  std::vector<char> converted(dst.nbytes());
  cpu::from_f32(f32.data(), host.numel(), dst.dtype(), converted.data());
  backend.copy_to_device(converted.data(), dst, dst.nbytes());
}

// The device memory a spec's data goes to: its slot (allocated here), or its rows of a fused slot (allocated by the
// first part). Adds newly allocated bytes to `bytes`.
Result<Tensor> destination(const Spec& s, DType dtype, Backend& backend, uint64_t& bytes) {
  const std::vector<int64_t> local = s.local_shape();
  if (s.slot_rows == 0) {
    PHOTON_ASSIGN_OR_RETURN(*s.slot, Tensor::empty(local, dtype, backend.allocator()));
    bytes += s.slot->nbytes();
    return *s.slot;
  }
  if (!s.slot->defined()) {
    PHOTON_ASSIGN_OR_RETURN(*s.slot, Tensor::empty({s.slot_rows, local[1]}, dtype, backend.allocator()));
    bytes += s.slot->nbytes();
  }
  return s.slot->slice_rows(s.slot_row_offset, s.slot_row_offset + local[0]);
}

// Puts a spec's host data on the backend's device in `dtype`: a zero-copy view when it already fits (CPU, whole
// tensor), else a copy.
Status place(const Tensor& host, const Spec& s, DType dtype, Backend& backend, uint64_t& bytes) {
  if (backend.device() == Device::cpu() && host.dtype() == dtype && s.slot_rows == 0) {
    *s.slot = host;
    bytes += host.nbytes();
    return Status::ok();
  }
  PHOTON_ASSIGN_OR_RETURN(Tensor dst, destination(s, dtype, backend, bytes));
  copy_converted(host, dst, backend);
  return Status::ok();
}

// The checkpoint's name for the module of a matrix spec ("model.layers.0.self_attn.q_proj").
std::string module_of(const Spec& s) { return s.name.substr(0, s.name.size() - std::strlen(".weight")); }

Status tensor_error(const std::string& name, const std::string& what) {
  return Status(StatusCode::kFormatError, fmt::format("tensor '{}' {}", name, what));
}

// The int8 values [N, K] and float scales [N, groups] of a quantized matrix, checked against the spec and scheme
// (compressed-tensors names: weight or weight_packed + weight_shape, weight_scale).
struct HostInt8 {
  Tensor values;  // i8
  Tensor scales;  // the checkpoint's float dtype
  int64_t group = 0;
};

Result<HostInt8> read_int8(const SafetensorsCheckpoint& ckpt, const Spec& s, const Int8Scheme& scheme) {
  const std::string module = module_of(s);
  const int64_t n = s.shape[0], k = s.shape[1];
  for (const char* refused : {".weight_g_idx", ".input_scale", ".weight_zero_point"}) {
    const std::string name = module + refused;
    const SafetensorsEntry* e = ckpt.entry(name);
    if (e == nullptr) continue;
    if (std::string_view(refused) == ".weight_zero_point") {
      // Symmetric checkpoints may still carry zero points; they must all be zero.
      const Tensor t = *ckpt.find(name);
      const auto* bytes = static_cast<const unsigned char*>(t.raw());
      if (std::all_of(bytes, bytes + t.nbytes(), [](unsigned char b) { return b == 0; })) continue;
      return tensor_error(name, "holds non-zero zero points (asymmetric quantization), which is not supported");
    }
    return tensor_error(name, std::string_view(refused) == ".input_scale"
                                  ? "is a static activation scale, which is not supported"
                                  : "is an activation reordering (g_idx), which is not supported");
  }
  HostInt8 h;
  if (scheme.storage == Int8Storage::kInt8) {
    const std::string name = module + ".weight";
    const SafetensorsEntry* e = ckpt.entry(name);
    if (e == nullptr) return tensor_error(name, "is missing (the int8 values of an int-quantized module)");
    if (e->dtype != DType::kI8 || e->shape != s.shape) {
      return tensor_error(name, fmt::format("is {} [{}] but an int-quantized module needs i8 [{}]",
                                            dtype_name(e->dtype), fmt::join(e->shape, ", "), fmt::join(s.shape, ", ")));
    }
    h.values = *ckpt.find(name);
  } else {
    const std::string name = module + ".weight_packed", shape_name = module + ".weight_shape";
    const SafetensorsEntry* e = ckpt.entry(name);
    const std::vector<int64_t> packed_shape = {n, (k + 3) / 4};
    if (e == nullptr) return tensor_error(name, "is missing (the packed values of a pack-quantized module)");
    if (e->dtype != DType::kI32 || e->shape != packed_shape) {
      return tensor_error(
          name, fmt::format("is {} [{}] but 8-bit values of [{}] pack into i32 [{}]", dtype_name(e->dtype),
                            fmt::join(e->shape, ", "), fmt::join(s.shape, ", "), fmt::join(packed_shape, ", ")));
    }
    const SafetensorsEntry* se = ckpt.entry(shape_name);
    bool shape_ok = se != nullptr && (se->dtype == DType::kI32 || se->dtype == DType::kI64) && se->shape.size() == 1 &&
                    se->shape[0] == 2;
    if (shape_ok) {
      const Tensor st = *ckpt.find(shape_name);
      const auto at = [&](int i) {
        return se->dtype == DType::kI32 ? int64_t{st.data<int32_t>()[i]} : st.data<int64_t>()[i];
      };
      shape_ok = at(0) == n && at(1) == k;
    }
    if (!shape_ok) return tensor_error(shape_name, fmt::format("must be an integer pair [{}, {}]", n, k));
    // Byte j of each little-endian int32 is value + 128.
    const Tensor packed = *ckpt.find(name);
    PHOTON_ASSIGN_OR_RETURN(h.values, Tensor::empty({n, k}, DType::kI8, default_cpu_allocator()));
    const auto* src = static_cast<const uint8_t*>(packed.raw());
    auto* dst = h.values.data<int8_t>();
    const int64_t row_bytes = packed_shape[1] * 4;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) dst[r * k + c] = static_cast<int8_t>(src[r * row_bytes + c] ^ 0x80u);
    }
  }
  const std::string scale_name = module + ".weight_scale";
  const SafetensorsEntry* se = ckpt.entry(scale_name);
  h.group = scheme.group_size == 0 ? k : scheme.group_size;
  const std::vector<int64_t> scale_shape = {n, (k + h.group - 1) / h.group};
  if (se == nullptr) return tensor_error(scale_name, "is missing (the scales of an int8 module)");
  if (!is_float_dtype(se->dtype) || se->shape != scale_shape) {
    return tensor_error(
        scale_name,
        fmt::format("is {} [{}] but {} needs float scales [{}]", dtype_name(se->dtype), fmt::join(se->shape, ", "),
                    scheme.group_size == 0 ? "per-channel quantization" : fmt::format("groups of {}", h.group),
                    fmt::join(scale_shape, ", ")));
  }
  h.scales = *ckpt.find(scale_name);
  return h;
}

// Places an int8 matrix's shard: values as i8 into the spec's slot, scales as f32 beside them (rows of a fused slot
// alike), groups cut where the shard's columns are.
Status place_int8(const HostInt8& h, const Spec& s, Backend& backend, uint64_t& bytes) {
  Weight& w = *s.weight;
  const bool column_split = s.split_dim == 1;
  if (column_split && h.group != s.shape[1] && (s.begin % h.group != 0 || s.count % h.group != 0)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("tensor '{}': its groups of {} columns would straddle tensor-parallel ranks (each rank "
                              "keeps {} columns); pick another tensor-parallel size",
                              s.name, h.group, s.count));
  }
  const int64_t local_group = column_split && h.group == s.shape[1] ? s.count : h.group;
  if (w.values.defined() && (w.values.dtype() != DType::kI8 || w.group_size != local_group)) {
    return tensor_error(s.name,
                        "is quantized differently from the matrices it is fused with (q/k/v or gate/up "
                        "must share one scheme)");
  }
  PHOTON_ASSIGN_OR_RETURN(const Tensor values, slice_host(h.values, s));
  PHOTON_RETURN_IF_ERROR(place(values, s, DType::kI8, backend, bytes));
  Spec scales = s;
  scales.slot = &w.scales;
  scales.shape = {h.scales.size(0), h.scales.size(1)};
  if (column_split) {
    if (h.group == s.shape[1]) {
      scales.split_dim = -1;  // one scale per row: every rank keeps it
    } else {
      scales.begin = s.begin / h.group;
      scales.count = s.count / h.group;
    }
  }
  PHOTON_ASSIGN_OR_RETURN(const Tensor part, slice_host(h.scales, scales));
  PHOTON_RETURN_IF_ERROR(place(part, scales, DType::kF32, backend, bytes));
  w.group_size = local_group;
  return Status::ok();
}

void finish(const ModelConfig& c, ModelWeights& w) {
  if (c.tie_word_embeddings) w.lm_head = w.embed;
}

uint64_t hash_name(std::string_view s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char ch : s) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h;
}

// The block of the whole tensor that a spec's slot holds, filled with uniform values of the given standard
// deviation around `mean` (core/dummy_weights.hpp).
DummyFill dummy_fill(const Spec& s, uint64_t seed, float mean, float stddev) {
  DummyFill f;
  f.seed = seed;
  f.mean = mean;
  f.half_width = stddev * std::sqrt(3.0f);
  f.full_rows = s.shape.size() == 2 ? s.shape[0] : 1;
  f.full_cols = s.shape.back();
  const std::vector<int64_t> local = s.local_shape();
  f.rows = local.size() == 2 ? local[0] : 1;
  f.cols = local.back();
  f.row0 = s.split_dim == 0 ? s.begin : 0;
  f.col0 = s.split_dim == 1 ? s.begin : 0;
  return f;
}

// Fills host memory `dst` (the block, written as `dtype`) on the CPU's threads.
void fill_on_host(void* dst, DType dtype, const DummyFill& f) {
  const size_t esize = dtype_size(dtype);
#pragma omp parallel
  {
    std::vector<float> buf(static_cast<size_t>(f.cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < f.rows; ++r) {
      for (int64_t c = 0; c < f.cols; ++c) buf[static_cast<size_t>(c)] = dummy_value(f, r, c);
      cpu::from_f32(buf.data(), f.cols, dtype, static_cast<char*>(dst) + static_cast<size_t>(r * f.cols) * esize);
    }
  }
}

}  // namespace

Result<ModelWeights> load_weights(const ModelConfig& config, const SafetensorsCheckpoint& ckpt, Backend& backend,
                                  const TensorParallelShard& shard, const LoadProgress& progress) {
  ModelWeights w;
  const auto specs = weight_specs(config, shard, w);
  // Linear modules only: the embedding is a lookup table, which compressed-tensors' "Linear" target never means.
  const auto scheme = [&](const Spec& s) {
    const bool linear = s.weight != nullptr && s.weight != &w.embed;
    return linear ? config.quantization.scheme_for(module_of(s)) : std::nullopt;
  };
  uint64_t total = 0;
  for (const auto& s : specs) {
    const SafetensorsEntry* e = ckpt.entry(s.name);
    const auto q = scheme(s);
    if (q && q->storage == Int8Storage::kPacked) e = ckpt.entry(module_of(s) + ".weight_packed");
    if (!q && s.weight != nullptr && ckpt.entry(module_of(s) + ".weight_scale") != nullptr) {
      return tensor_error(module_of(s) + ".weight_scale",
                          "exists but quantization_config leaves this module in floats (check targets and ignore)");
    }
    if (e == nullptr) {
      return Status(StatusCode::kFormatError,
                    fmt::format("checkpoint has no tensor '{}', which {} needs", s.name, config.architecture_name));
    }
    total += e->end - e->begin;
  }
  uint64_t done = 0;
  for (const auto& s : specs) {
    if (const auto q = scheme(s)) {
      PHOTON_ASSIGN_OR_RETURN(const HostInt8 h, read_int8(ckpt, s, *q));
      PHOTON_RETURN_IF_ERROR(place_int8(h, s, backend, w.bytes));
      done += h.values.nbytes();
      if (progress) progress(std::min(done, total), total);
      continue;
    }
    if (s.weight != nullptr && s.weight->quantized()) {
      return tensor_error(s.name,
                          "is in floats but the matrices it is fused with are int8 (q/k/v or gate/up must "
                          "share one scheme)");
    }
    Tensor host = *ckpt.find(s.name);
    const SafetensorsEntry* e = ckpt.entry(s.name);
    if (e->shape != s.shape) {
      return Status(StatusCode::kFormatError, fmt::format("tensor '{}' has shape [{}] but config.json implies [{}]",
                                                          s.name, fmt::join(e->shape, ", "), fmt::join(s.shape, ", ")));
    }
    if (!is_float_dtype(host.dtype())) {
      return Status(StatusCode::kUnsupported, fmt::format("tensor '{}' is {}; weights must be f32, f16 or bf16", s.name,
                                                          dtype_name(host.dtype())));
    }
    PHOTON_ASSIGN_OR_RETURN(const Tensor part, slice_host(host, s));
    PHOTON_RETURN_IF_ERROR(
        place(part, s, s.is_norm ? DType::kF32 : backend.weight_dtype(host.dtype()), backend, w.bytes));
    done += e->end - e->begin;
    if (progress) progress(done, total);
  }
  finish(config, w);
  return w;
}

Result<ModelWeights> make_dummy_weights(const ModelConfig& config, Backend& backend, uint64_t seed, DType dtype,
                                        const TensorParallelShard& shard, const LoadProgress& progress) {
  if (!is_float_dtype(dtype)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("dummy weights must be f32, f16 or bf16, not {}", dtype_name(dtype)));
  }
  dtype = backend.weight_dtype(dtype);
  ModelWeights w;
  const auto specs = weight_specs(config, shard, w);
  uint64_t total = 0;
  for (const auto& s : specs) total += spec_bytes(s, dtype);
  uint64_t done = 0;
  for (const auto& s : specs) {
    const DType t = s.is_norm ? DType::kF32 : dtype;
    PHOTON_ASSIGN_OR_RETURN(Tensor dst, destination(s, t, backend, w.bytes));
    const uint64_t tensor_seed = seed ^ hash_name(s.name);
    // Norms near 1; embeddings: logit spread ~3 once hidden states are normalised; projections: unit gain.
    const bool is_embedding = !s.is_norm && s.shape[0] == config.vocab_size;
    const float stddev = s.is_norm ? 0.1f : (is_embedding ? 3.0f : 1.0f) / std::sqrt(static_cast<float>(s.shape[1]));
    const DummyFill f = dummy_fill(s, tensor_seed, s.is_norm ? 1.0f : 0.0f, stddev);
    if (!backend.fill_dummy(dst, f)) {  // a device that cannot generate them gets a host copy
      std::vector<char> staging(dst.nbytes());
      fill_on_host(staging.data(), t, f);
      backend.copy_to_device(staging.data(), dst, dst.nbytes());
    }
    done += spec_bytes(s, dtype);
    if (progress) progress(done, total);
  }
  finish(config, w);
  return w;
}

}  // namespace photon

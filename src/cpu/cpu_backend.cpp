#include "cpu/cpu_backend.hpp"

#include <omp.h>

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/random.hpp"
#include "cpu/kernels.hpp"

namespace photon {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(Allocator& allocator) : allocator_(allocator) {}

  Device device() const override { return Device::cpu(); }
  std::string description() const override { return "cpu (" + std::to_string(omp_get_max_threads()) + " threads)"; }
  Allocator& allocator() override { return allocator_; }
  DType activation_dtype() const override { return DType::kF32; }
  void copy_to_device(const void* host, Tensor& dst, size_t bytes) override { std::memcpy(dst.raw(), host, bytes); }
  void copy_to_host(const Tensor& src, void* host, size_t bytes) override { std::memcpy(host, src.raw(), bytes); }
  void synchronize() override {}
  Status memory_info(size_t* free_bytes, size_t* total_bytes) override {
    // MemAvailable counts reclaimable page cache, so memory-mapped weights still count as available.
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    uint64_t kib = 0;
    *free_bytes = *total_bytes = 0;
    while (in >> key >> kib >> unit) {
      if (key == "MemTotal:") *total_bytes = kib * 1024;
      if (key == "MemAvailable:") *free_bytes = kib * 1024;
    }
    if (*total_bytes == 0) return Status(StatusCode::kUnsupported, "cannot read /proc/meminfo; set the KV cache size");
    return Status::ok();
  }

  void embed(const Tensor& ids, const Tensor& sampled, const Weight& table, int64_t first_id, Tensor& out) override {
    cpu::embed(ids.data<int32_t>(), ids.numel(), sampled.numel() > 0 ? sampled.data<int32_t>() : nullptr,
               table.values.raw(), table.values.dtype(), table.rows(), table.cols(), first_id, out.data<float>(),
               table.quantized() ? table.scales.data<float>() : nullptr, table.group_size);
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    assert(weight.dtype() == DType::kF32);
    cpu::rms_norm(x.data<float>(), weight.data<float>(), x.size(0), x.size(-1), eps, out.data<float>());
  }

  void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& weight, float eps, Tensor& out) override {
    cpu::add_rms_norm(residual.data<float>(), x.data<float>(), weight.data<float>(), x.size(0), x.size(-1), eps,
                      out.data<float>());
  }

  void add(Tensor& residual, const Tensor& x) override {
    float* r = residual.data<float>();
    const float* v = x.data<float>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) r[i] += v[i];
  }

  bool fill_dummy(Tensor& dst, const DummyFill& f) override {
    if (!is_float_dtype(dst.dtype())) return false;
    cpu::fill_dummy(f, dst.dtype(), dst.raw());
    return true;
  }

  void linear(const Tensor& x, const Weight& w, Tensor& out) override {
    assert(x.size(1) == w.cols() && out.size(1) == w.rows() && out.size(0) == x.size(0));
    if (w.quantized()) {
      cpu::matmul_int8(x.data<float>(), x.size(0), x.size(1), x.stride(0), w.values.data<int8_t>(),
                       w.scales.data<float>(), w.group_size, w.rows(), out.data<float>());
      return;
    }
    cpu::matmul(x.data<float>(), x.size(0), x.size(1), x.stride(0), w.values.raw(), w.values.dtype(), w.rows(),
                out.data<float>());
  }

  Result<Weight> quantize_int8(const Tensor& w, int64_t group_size) override {
    const int64_t n = w.size(0), k = w.size(1);
    Weight q;
    q.group_size = group_size;
    PHOTON_ASSIGN_OR_RETURN(q.values, Tensor::empty({n, k}, DType::kI8, allocator_));
    PHOTON_ASSIGN_OR_RETURN(q.scales, Tensor::empty({n, (k + group_size - 1) / group_size}, DType::kF32, allocator_));
    cpu::quantize_int8(w.raw(), w.dtype(), n, k, group_size, q.values.data<int8_t>(), q.scales.data<float>());
    return q;
  }

  void linear_swiglu(const Tensor& x, const Weight& w, Tensor& scratch, Tensor& out) override {
    linear(x, w, scratch);
    cpu::swiglu(scratch.data<float>(), x.size(0), out.size(1), scratch.stride(0), out.data<float>(), out.stride(0));
  }

  void gather_rows(const Tensor& x, const Tensor& indices, Tensor& out) override {
    cpu::gather_rows(x.data<float>(), indices.data<int32_t>(), indices.numel(), x.size(-1), out.data<float>());
  }
  void copy_columns(const Tensor& src, Tensor& out, int64_t col_offset) override {
    const int64_t cols = std::min(src.size(1), out.size(1) - col_offset);
    for (int64_t r = 0; r < src.size(0); ++r) {
      std::memcpy(out.data<float>() + r * out.stride(0) + col_offset, src.data<float>() + r * src.stride(0),
                  static_cast<size_t>(std::max<int64_t>(cols, 0)) * sizeof(float));
    }
  }

  void rope_cos_sin(const Tensor& positions, const Tensor& inv_freq, Tensor& cos, Tensor& sin) override {
    cpu::rope_cos_sin(positions.data<int32_t>(), positions.numel(), inv_freq.data<float>(), inv_freq.numel(),
                      cos.data<float>(), sin.data<float>());
  }

  void qkv_rope_cache_write(Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps, const Tensor& cos,
                            const Tensor& sin, const Tensor& slot_mapping, const KvCacheLayout& layout,
                            Tensor& kv_cache, Tensor& q_out) override {
    const int64_t hd = layout.head_dim, t = qkv.size(0), ld = qkv.stride(0);
    const int64_t q_width = q_out.size(1), kv_width = layout.num_kv_heads * hd;
    float* q = q_out.data<float>();
    float* k = qkv.data<float>() + q_width;
#pragma omp parallel for schedule(static) if (t >= 16)
    for (int64_t i = 0; i < t; ++i) {
      std::memcpy(q + i * q_width, qkv.data<float>() + i * ld, static_cast<size_t>(q_width) * sizeof(float));
    }
    if (q_norm.defined()) {
      cpu::rms_norm(q, q_norm.data<float>(), t * (q_width / hd), hd, eps, q);
      for (int64_t i = 0; i < t; ++i)
        cpu::rms_norm(k + i * ld, k_norm.data<float>(), layout.num_kv_heads, hd, eps, k + i * ld);
    }
    cpu::rope(q, t, q_width / hd, hd, q_width, cos.data<float>(), sin.data<float>());
    cpu::rope(k, t, layout.num_kv_heads, hd, ld, cos.data<float>(), sin.data<float>());
    cpu::cache_write(k, k + kv_width, ld, t, paged_kv(kv_cache, layout, nullptr, &slot_mapping));
  }

  void attention(const Tensor& q, const Tensor& kv_cache, const KvCacheLayout& layout, const AttentionBatch& batch,
                 float scale, Tensor& out) override {
    cpu::paged_attention(q.data<float>(), q.size(1) / layout.head_dim, paged_kv(kv_cache, layout, &batch, nullptr),
                         scale, out.data<float>());
  }

  Result<std::shared_ptr<void>> allocate_host(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == nullptr) return Status(StatusCode::kOutOfMemory, "host staging allocation failed");
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }

  Status sample(Tensor& logits, std::span<const SampleRequest> requests, std::span<const LogitAdjustment> adjustments,
                Tensor& ids, int32_t* host_ids) override {
    const auto vocab = static_cast<size_t>(logits.size(1));
    const auto row = [&](const SampleRequest& r) {
      return std::span<float>(logits.data<float>() + static_cast<size_t>(r.row) * vocab, vocab);
    };
    // All adjustments first, as on the GPU; the logits they replace are kept where logprobs are wanted.
    saved_logits_.resize(adjustments.size());
    for (const SampleRequest& r : requests) {
      const auto begin = static_cast<size_t>(r.adjustment_begin), count = static_cast<size_t>(r.adjustment_count);
      const std::span<float> saved =
          r.logprobs >= 0 ? std::span<float>(saved_logits_).subspan(begin, count) : std::span<float>();
      cpu::adjust_logits(row(r), r, adjustments.subspan(begin, count), saved);
    }
    // The selections, a row per thread (each reads its row only).
    const auto count = static_cast<int64_t>(requests.size());
    sample_scratch_.resize(static_cast<size_t>(omp_get_max_threads()));
#pragma omp parallel for schedule(dynamic) if (count > 1)
    for (int64_t i = 0; i < count; ++i) {
      cpu::SampleScratch& scratch = sample_scratch_[static_cast<size_t>(omp_get_thread_num())];
      const SampleRequest& r = requests[static_cast<size_t>(i)];
      ids.data<int32_t>()[i] = host_ids[i] = cpu::sample_row(row(r), r, scratch);
    }
    asking_.clear();
    for (size_t i = 0; i < requests.size(); ++i) {
      if (requests[i].logprobs >= 0) asking_.push_back(i);
    }
    // The chosen tokens' logprobs, from the model's rows: a log-softmax over the vocabulary each, over the cores.
    sampled_logprobs_.resize(asking_.size());
    const auto n = static_cast<int64_t>(asking_.size());
#pragma omp parallel for schedule(static) if (n > 1)
    for (int64_t j = 0; j < n; ++j) {
      const SampleRequest& r = requests[asking_[static_cast<size_t>(j)]];
      const auto begin = static_cast<size_t>(r.adjustment_begin), count = static_cast<size_t>(r.adjustment_count);
      cpu::restore_logits(row(r), adjustments.subspan(begin, count),
                          std::span<const float>(saved_logits_).subspan(begin, count));
      sampled_logprobs_[static_cast<size_t>(j)] =
          cpu::token_logprob(row(r), host_ids[asking_[static_cast<size_t>(j)]], r.logprobs);
    }
    return Status::ok();
  }

  Status wait_samples() override { return Status::ok(); }  // sample() ran to completion

  Status sampled_logprobs(std::span<TokenLogprob> out) override {
    if (out.size() != sampled_logprobs_.size()) {
      return Status(StatusCode::kInvalidArgument, "sampled_logprobs: " + std::to_string(out.size()) +
                                                      " answers asked for, the last sample() call had " +
                                                      std::to_string(sampled_logprobs_.size()));
    }
    std::copy(sampled_logprobs_.begin(), sampled_logprobs_.end(), out.begin());  // kept: the same on every call
    return Status::ok();
  }

  // Computed here, at once (this backend runs every operation as it is called), and kept for the read.
  Status enqueue_token_logprobs(const Tensor& logits, std::span<const LogprobQuery> queries, int top_k) override {
    const auto vocab = static_cast<size_t>(logits.size(1));
    const auto n = static_cast<int64_t>(queries.size());
    token_logprobs_.resize(queries.size());
    // Each is a log-softmax over the vocabulary: a prompt chunk's rows are spread over the cores.
#pragma omp parallel for schedule(static) if (n > 1)
    for (int64_t i = 0; i < n; ++i) {
      const LogprobQuery& q = queries[static_cast<size_t>(i)];
      token_logprobs_[static_cast<size_t>(i)] =
          cpu::token_logprob({logits.data<float>() + static_cast<size_t>(q.row) * vocab, vocab}, q.token, top_k);
    }
    return Status::ok();
  }

  Status read_token_logprobs(std::span<TokenLogprob> out) override {
    if (out.size() != token_logprobs_.size()) {
      return Status(StatusCode::kInvalidArgument, "read_token_logprobs: " + std::to_string(out.size()) +
                                                      " answers asked for, the last enqueue had " +
                                                      std::to_string(token_logprobs_.size()));
    }
    std::move(token_logprobs_.begin(), token_logprobs_.end(), out.begin());
    token_logprobs_.clear();
    return Status::ok();
  }

 private:
  Allocator& allocator_;
  std::vector<cpu::SampleScratch> sample_scratch_;  // per OpenMP thread
  std::vector<float> saved_logits_;                 // the logits the adjustments replaced, per adjustment
  std::vector<size_t> asking_;                      // the last sample() call's requests with logprobs
  std::vector<TokenLogprob> sampled_logprobs_;      // and their chosen tokens' logprobs
  std::vector<TokenLogprob> token_logprobs_;        // the last enqueue_token_logprobs() call's answers, until read
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(Allocator& allocator) { return std::make_unique<CpuBackend>(allocator); }

}  // namespace photon

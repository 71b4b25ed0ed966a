#include "cuda/cuda_backend.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/logging.hpp"
#include "cuda/cuda_allocator.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/gemm.hpp"
#include "cuda/kernel_trace.hpp"
#include "cuda/kernels.hpp"
#include "cuda/w8a16_choices.hpp"

namespace photon {
namespace {

// Split-KV partials for head dimensions up to 256.
const size_t kAttentionWorkspaceBytes = cuda::attention_workspace_floats(256) * sizeof(float);

const uint16_t* bf16(const Tensor& t) { return static_cast<const uint16_t*>(t.raw()); }
uint16_t* bf16_mut(const Tensor& t) { return static_cast<uint16_t*>(t.raw()); }
int to_int(int64_t v) { return static_cast<int>(v); }
double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, size_t limit) : device_(device), allocator_(device, limit) {}

  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (stream_) cudaStreamSynchronize(stream_);
#ifdef PHOTON_KERNEL_TRACE
    if (!trace_path_.empty()) {
      const Status s = cuda::trace::finish(trace_path_);
      if (!s.is_ok()) log::error("{}", s.message());
    }
#endif
    for (cudaGraphExec_t g : graphs_) {
      if (g != nullptr) cudaGraphExecDestroy(g);
    }
    gemm_.reset();
    allocator_.deallocate(gemm_workspace_, cuda::Gemm::kWorkspaceBytes);
    allocator_.deallocate(attention_workspace_, kAttentionWorkspaceBytes);
    allocator_.deallocate(sample_args_.device, sample_args_.capacity);
    allocator_.deallocate(adjustments_.device, adjustments_.capacity);
    allocator_.deallocate(saved_logits_.device, saved_logits_.capacity);
    allocator_.deallocate(logprob_queries_.device, logprob_queries_.capacity);
    allocator_.deallocate(logprob_answers_.device, logprob_answers_.capacity);
    allocator_.deallocate(sampled_answers_.device, sampled_answers_.capacity);
    if (samples_ready_) cudaEventDestroy(samples_ready_);
    if (logprobs_ready_) cudaEventDestroy(logprobs_ready_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status init() {
    PHOTON_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    PHOTON_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    PHOTON_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&samples_ready_, cudaEventDisableTiming));
    PHOTON_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&logprobs_ready_, cudaEventDisableTiming));
    PHOTON_ASSIGN_OR_RETURN(gemm_workspace_, allocator_.allocate(cuda::Gemm::kWorkspaceBytes));
    gemm_ = std::make_unique<cuda::Gemm>();
    PHOTON_RETURN_IF_ERROR(gemm_->init(gemm_workspace_));
    PHOTON_ASSIGN_OR_RETURN(attention_workspace_, allocator_.allocate(kAttentionWorkspaceBytes));
    PHOTON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(attention_workspace_, 0, kAttentionWorkspaceBytes, stream_));
#ifdef PHOTON_KERNEL_TRACE
    if (const char* path = std::getenv("PHOTON_KERNEL_TRACE")) {
      trace_path_ = path;
      PHOTON_RETURN_IF_ERROR(cuda::trace::start());
    }
#endif
    return Status::ok();
  }

  Device device() const override { return Device::cuda(device_); }
  std::string description() const override { return cuda::device_name(device_); }
  Allocator& allocator() override { return allocator_; }
  DType activation_dtype() const override { return DType::kBF16; }
  DType weight_dtype(DType) const override { return DType::kBF16; }

  void copy_to_device(const void* host, Tensor& dst, size_t bytes) override {
    record(cuda::cuda_status(cudaMemcpyAsync(dst.raw(), host, bytes, cudaMemcpyHostToDevice, stream_),
                             "cudaMemcpyAsync(H2D)", __FILE__, __LINE__));
  }
  void copy_to_host(const Tensor& src, void* host, size_t bytes) override {
    record(cuda::cuda_status(cudaMemcpyAsync(host, src.raw(), bytes, cudaMemcpyDeviceToHost, stream_),
                             "cudaMemcpyAsync(D2H)", __FILE__, __LINE__));
    synchronize();
  }
  void synchronize() override {
    record(cuda::cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", __FILE__, __LINE__));
  }
  Status memory_info(size_t* free_bytes, size_t* total_bytes) override {
    return cuda::device_memory(device_, free_bytes, total_bytes);
  }
  Status take_error() override {
    record(cuda::cuda_status(cudaGetLastError(), "kernel launch", __FILE__, __LINE__));
    Status s = std::move(error_);
    error_ = Status::ok();
    return s;
  }

  void embed(const Tensor& ids, const Tensor& sampled, const Weight& table, int64_t first_id, Tensor& out) override {
    const int32_t* placed = sampled.numel() > 0 ? sampled.data<int32_t>() : nullptr;
    if (table.quantized()) {
      cuda::embed_int8(ids.data<int32_t>(), placed, to_int(ids.numel()), int8(table), to_int(table.rows()),
                       to_int(table.cols()), to_int(first_id), bf16_mut(out), stream_);
      return;
    }
    cuda::embed(ids.data<int32_t>(), placed, to_int(ids.numel()), bf16(table.values), to_int(table.rows()),
                to_int(table.cols()), to_int(first_id), bf16_mut(out), stream_);
  }
  void copy_columns(const Tensor& src, Tensor& out, int64_t col_offset) override {
    const int64_t cols = std::min(src.size(1), out.size(1) - col_offset);
    if (cols <= 0 || src.size(0) == 0) return;
    const size_t esize = dtype_size(src.dtype());
    record(cuda::cuda_status(
        cudaMemcpy2DAsync(static_cast<char*>(out.raw()) + static_cast<size_t>(col_offset) * esize,
                          static_cast<size_t>(out.stride(0)) * esize, src.raw(),
                          static_cast<size_t>(src.stride(0)) * esize, static_cast<size_t>(cols) * esize,
                          static_cast<size_t>(src.size(0)), cudaMemcpyDeviceToDevice, stream_),
        "cudaMemcpy2DAsync", __FILE__, __LINE__));
  }
  Status make_current() override {
    PHOTON_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    return Status::ok();
  }
  /// The stream every operation of this backend is enqueued on (for the NCCL communicator).
  cudaStream_t stream() const { return stream_; }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override {
    cuda::rms_norm(bf16(x), w.data<float>(), to_int(x.size(0)), to_int(x.size(-1)), eps, bf16_mut(out), stream_);
  }
  void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& w, float eps, Tensor& out) override {
    cuda::add_rms_norm(bf16_mut(residual), bf16(x), w.data<float>(), to_int(x.size(0)), to_int(x.size(-1)), eps,
                       bf16_mut(out), stream_);
  }
  void linear_swiglu(const Tensor& x, const Weight& w, Tensor& scratch, Tensor& out) override {
    const int64_t m = x.size(0), inter = out.size(1);
    if (skinny(x, w, inter, out.raw(), false, true)) return;
    record(gemm(x, w, scratch));
    cuda::swiglu(bf16(scratch), m, to_int(inter), bf16_mut(out), stream_);
  }
  void add(Tensor& residual, const Tensor& x) override { cuda::add(bf16_mut(residual), bf16(x), x.numel(), stream_); }
  // At decode sizes the GEMV kernels take the norm into their prologue and the residual add into their epilogue;
  // int8 weights only at one row (from two rows the tensor-core kernel, which fuses neither, serves them).
  bool fuses_norm_into_linear(int64_t rows, const Weight& w) const override {
    return rows >= 1 && rows <= 8 && (!w.quantized() || rows == 1);
  }
  void rms_norm_linear(const Tensor& x, const Tensor& norm, float eps, const Weight& w, Tensor& normed,
                       Tensor& out) override {
    if (!skinny(x, w, out.size(1), out.raw(), false, false, {norm.data<float>(), eps, false})) {
      Backend::rms_norm_linear(x, norm, eps, w, normed, out);
    }
  }
  void rms_norm_linear_swiglu(const Tensor& x, const Tensor& norm, float eps, const Weight& w, Tensor& normed,
                              Tensor& scratch, Tensor& out) override {
    if (!skinny(x, w, out.size(1), out.raw(), false, true, {norm.data<float>(), eps, false})) {
      Backend::rms_norm_linear_swiglu(x, norm, eps, w, normed, scratch, out);
    }
  }
  void linear_add(const Tensor& x, const Weight& w, Tensor& proj, Tensor& residual) override {
    if (!skinny(x, w, residual.size(1), residual.raw(), false, false, {nullptr, 0.0f, true})) {
      Backend::linear_add(x, w, proj, residual);
    }
  }
  void gather_rows(const Tensor& x, const Tensor& indices, Tensor& out) override {
    cuda::gather_rows(bf16(x), indices.data<int32_t>(), to_int(indices.numel()), to_int(x.size(-1)), bf16_mut(out),
                      stream_);
  }
  void rope_cos_sin(const Tensor& positions, const Tensor& inv_freq, Tensor& cos, Tensor& sin) override {
    cuda::rope_cos_sin(positions.data<int32_t>(), to_int(positions.numel()), inv_freq.data<float>(),
                       to_int(inv_freq.numel()), cos.data<float>(), sin.data<float>(), stream_);
  }
  void qkv_rope_cache_write(Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps, const Tensor& cos,
                            const Tensor& sin, const Tensor& slots, const KvCacheLayout& layout, Tensor& kv_cache,
                            Tensor& q_out) override {
    const int hd = to_int(layout.head_dim);
    if (!cuda::qkv_rope_supported(hd)) {
      record(Status(StatusCode::kUnsupported,
                    fmt::format("the CUDA RoPE kernel needs an even head_dim <= 256, not {}", hd)));
      return;
    }
    cuda::qkv_rope_cache_write(bf16(qkv), qkv.stride(0), q_norm.defined() ? q_norm.data<float>() : nullptr,
                               k_norm.defined() ? k_norm.data<float>() : nullptr, eps, cos.data<float>(),
                               sin.data<float>(), to_int(qkv.size(0)), to_int(q_out.size(1)) / hd,
                               paged_kv(kv_cache, layout, nullptr, &slots), bf16_mut(q_out), stream_);
  }
  void attention(const Tensor& q, const Tensor& kv_cache, const KvCacheLayout& layout, const AttentionBatch& b,
                 float scale, Tensor& out) override {
    const int hd = to_int(layout.head_dim);
    const int heads = to_int(q.size(1)) / hd;
    if (hd % 8 != 0 && hd > 128) {
      record(Status(StatusCode::kUnsupported, "the CUDA attention kernel needs head_dim <= 128 or a multiple of 8"));
      return;
    }
    // Long prompt chunks: tensor-core tiles of 64 queries sharing each K/V tile.
    const PagedKv kv = paged_kv(kv_cache, layout, &b, nullptr);
    if (b.num_prefill_seqs > 0) {
      cuda::prefill_attention(bf16(q), heads, kv, b.prefill_seqs.data<int32_t>(), b.num_prefill_seqs,
                              b.max_prefill_query_len, scale, bf16_mut(out), stream_);
    }
    // Decode tokens and short chunks: few tokens over long contexts split their keys across blocks
    // (flash-decoding); the split count depends only on the batch's shape, so a captured graph always sees the
    // same one.
    const int splits =
        cuda::attention_splits(b.num_decode_tokens, heads, to_int(layout.num_kv_heads), hd, b.max_seq_len);
    cuda::paged_attention(bf16(q), heads, kv, b.decode_tokens.data<int32_t>(), b.num_decode_tokens, scale, splits,
                          b.max_seq_len, static_cast<float*>(attention_workspace_), bf16_mut(out), stream_);
  }

  void linear(const Tensor& x, const Weight& w, Tensor& out) override { record(gemm(x, w, out)); }

  bool fill_dummy(Tensor& dst, const DummyFill& f) override {
    if (dst.dtype() != DType::kF32 && dst.dtype() != DType::kBF16) return false;
    cuda::fill_dummy(f, dst.raw(), dst.dtype() == DType::kBF16, stream_);
    return true;
  }

  Result<Weight> quantize_int8(const Tensor& w, int64_t group_size) override {
    const int64_t n = w.size(0), k = w.size(1);
    if (k % 16 != 0) {
      return Status(StatusCode::kUnsupported,
                    fmt::format("int8 weights on the GPU need in_features to be a multiple of 16, not {}", k));
    }
    Weight q;
    q.group_size = group_size;
    PHOTON_ASSIGN_OR_RETURN(q.values, Tensor::empty({n, k}, DType::kI8, allocator_));
    PHOTON_ASSIGN_OR_RETURN(q.scales, Tensor::empty({n, (k + group_size - 1) / group_size}, DType::kF32, allocator_));
    cuda::quantize_int8(bf16(w), n, k, to_int(group_size), q.values.data<int8_t>(), q.scales.data<float>(), stream_);
    PHOTON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));  // w may be freed when this returns
    return q;
  }

  Status prepare_weight(const Weight& w, int64_t max_rows, DType out) override {
    const int64_t n = w.rows(), k = w.cols();
    if (w.quantized()) {
      PHOTON_RETURN_IF_ERROR(reserve_dequantized(n * k));
      PHOTON_RETURN_IF_ERROR(time_int8_paths(w));
    }
    const bool out_f32 = out == DType::kF32;
    if (!gemm_->wants_prompt_rows(n, k, out_f32, max_rows)) return Status::ok();
    // Timing is optional: where its scratch does not fit the memory budget, the buckets are timed on first use.
    Result<Tensor> scratch = Tensor::empty(
        {static_cast<int64_t>(cuda::Gemm::prompt_scratch_bytes(n, k, out_f32, max_rows))}, DType::kI8, allocator_);
    if (!scratch) {
      log::debug("cuBLASLt algorithms for {} x {} not timed at load: {}", n, k, scratch.status().message());
      return Status::ok();
    }
    const void* values = w.values.raw();
    if (w.quantized()) {  // beyond the int8 paths' rows the weights are widened for cuBLASLt
      cuda::dequantize_int8(int8(w), n, k, bf16_mut(dequantized_), stream_);
      values = dequantized_.raw();
    }
    const auto start = std::chrono::steady_clock::now();
    PHOTON_RETURN_IF_ERROR(gemm_->time_prompt_rows(values, n, k, out_f32, max_rows, scratch->raw(), stream_));
    log::debug("cuBLASLt algorithms for {} x {} ({} out), timed in {:.0f} ms, by rows: {}", n, k, dtype_name(out),
               ms_since(start), gemm_->describe(n, k, out_f32));
    return Status::ok();
  }

  Result<std::shared_ptr<void>> allocate_host(size_t bytes) override {
    void* p = nullptr;
    PHOTON_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, bytes == 0 ? 64 : bytes, cudaHostAllocDefault));
    return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
  }

  bool supports_graphs() const override { return true; }
  bool separates_long_chunks(int64_t head_dim) const override {
    return cuda::prefill_attention_supported(static_cast<int>(head_dim));
  }
  Status begin_capture() override {
    PHOTON_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    return Status::ok();
  }
  Result<int> end_capture() override {
    cudaGraph_t graph = nullptr;
    PHOTON_CUDA_RETURN_IF_ERROR(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    PHOTON_RETURN_IF_ERROR(cuda::cuda_status(err, "cudaGraphInstantiate", __FILE__, __LINE__));
    graphs_.push_back(exec);
    return static_cast<int>(graphs_.size() - 1);
  }
  void destroy_graph(int id) override {
    if (id < 0 || static_cast<size_t>(id) >= graphs_.size() || graphs_[static_cast<size_t>(id)] == nullptr) return;
    cudaSetDevice(device_);
    synchronize();
    cudaGraphExecDestroy(graphs_[static_cast<size_t>(id)]);
    graphs_[static_cast<size_t>(id)] = nullptr;
  }
  Status launch_graph(int id) override {
    PHOTON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graphs_.at(static_cast<size_t>(id)), stream_));
    return Status::ok();
  }

  Status sample(Tensor& logits, std::span<const SampleRequest> requests, std::span<const LogitAdjustment> adjustments,
                Tensor& ids, int32_t* host_ids) override {
    const size_t n = requests.size();
    sampled_logprobs_.clear();
    sampled_host_ids_ = host_ids;
    sampled_vocab_ = to_int(logits.size(1));
    if (n == 0) return Status::ok();
    // The previous call's uploads have run: its ids were waited for.
    PHOTON_ASSIGN_OR_RETURN(const void* args, upload(sample_args_, requests.data(), n * sizeof(SampleRequest)));
    const auto* sample_args = static_cast<const SampleRequest*>(args);
    const LogitAdjustment* entries = nullptr;
    float* saved = nullptr;  // the logits the adjustments replace, for the rows whose logprobs are wanted
    if (!adjustments.empty()) {
      PHOTON_ASSIGN_OR_RETURN(const void* list,
                              upload(adjustments_, adjustments.data(), adjustments.size() * sizeof(LogitAdjustment)));
      entries = static_cast<const LogitAdjustment*>(list);
      PHOTON_RETURN_IF_ERROR(grow(saved_logits_, adjustments.size() * sizeof(float)));
      saved = static_cast<float*>(saved_logits_.device);
      cuda::adjust_logits(logits.data<float>(), to_int(logits.size(1)), sample_args, static_cast<int>(n), entries,
                          saved, stream_);
    }
    const int vocab = to_int(logits.size(1));
    const bool any_top_p_alone =
        std::any_of(requests.begin(), requests.end(), [&](const SampleRequest& r) { return top_p_alone(r, vocab); });
    cuda::sample_rows(logits.data<float>(), vocab, sample_args, static_cast<int>(n), any_top_p_alone,
                      ids.data<int32_t>(), stream_);
    for (size_t i = 0; i < n; ++i) {
      if (requests[i].logprobs >= 0) sampled_logprobs_.emplace_back(static_cast<int32_t>(i), requests[i].logprobs);
    }
    if (!sampled_logprobs_.empty()) {  // the chosen tokens' logprobs, from the model's rows
      if (entries != nullptr) {
        cuda::restore_logits(logits.data<float>(), to_int(logits.size(1)), sample_args, static_cast<int>(n), entries,
                             saved, stream_);
      }
      const size_t bytes = n * cuda::kSampledLogprobWords * sizeof(uint32_t);
      PHOTON_RETURN_IF_ERROR(grow(sampled_answers_, bytes));
      auto* answers = static_cast<uint32_t*>(sampled_answers_.device);
      cuda::sampled_logprobs(logits.data<float>(), to_int(logits.size(1)), sample_args, static_cast<int>(n),
                             ids.data<int32_t>(), answers, stream_);
      PHOTON_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(sampled_answers_.host.get(), answers, bytes, cudaMemcpyDeviceToHost, stream_));
    }
    PHOTON_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host_ids, ids.data<int32_t>(), n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    PHOTON_CUDA_RETURN_IF_ERROR(cudaEventRecord(samples_ready_, stream_));
    return Status::ok();
  }

  Status wait_samples() override {
    PHOTON_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(samples_ready_));
    return take_error();
  }

  Status sampled_logprobs(std::span<TokenLogprob> out) override {
    if (out.size() != sampled_logprobs_.size()) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("sampled_logprobs: {} answers asked for, the last sample() call had {}", out.size(),
                                sampled_logprobs_.size()));
    }
    const auto* host = static_cast<const uint32_t*>(sampled_answers_.host.get());
    for (size_t j = 0; j < out.size(); ++j) {
      const auto [request, top_k] = sampled_logprobs_[j];
      out[j] = unpack_logprob(host + static_cast<size_t>(request) * cuda::kSampledLogprobWords,
                              sampled_host_ids_[request], std::min(top_k, sampled_vocab_));
    }
    return Status::ok();
  }

  Status enqueue_token_logprobs(const Tensor& logits, std::span<const LogprobQuery> queries, int top_k) override {
    const size_t n = queries.size();
    logprob_tokens_.clear();
    for (const LogprobQuery& q : queries) logprob_tokens_.push_back(q.token);
    logprob_top_k_ = std::min(top_k, to_int(logits.size(1)));  // the kernel writes as many as the row has
    logprob_words_ = 1 + 2 * static_cast<size_t>(top_k);
    if (n == 0) return Status::ok();
    PHOTON_ASSIGN_OR_RETURN(const void* args, upload(logprob_queries_, queries.data(), n * sizeof(LogprobQuery)));
    PHOTON_RETURN_IF_ERROR(grow(logprob_answers_, n * logprob_words_ * sizeof(uint32_t)));
    auto* answers = static_cast<uint32_t*>(logprob_answers_.device);
    cuda::token_logprobs(logits.data<float>(), to_int(logits.size(1)), static_cast<const LogprobQuery*>(args),
                         static_cast<int>(n), top_k, answers, stream_);
    PHOTON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        logprob_answers_.host.get(), answers, n * logprob_words_ * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream_));
    PHOTON_CUDA_RETURN_IF_ERROR(cudaEventRecord(logprobs_ready_, stream_));
    return Status::ok();
  }

  Status read_token_logprobs(std::span<TokenLogprob> out) override {
    if (out.size() != logprob_tokens_.size()) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("read_token_logprobs: {} answers asked for, the last enqueue had {}", out.size(),
                                logprob_tokens_.size()));
    }
    if (out.empty()) return Status::ok();
    PHOTON_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(logprobs_ready_));
    PHOTON_RETURN_IF_ERROR(take_error());
    const auto* host = static_cast<const uint32_t*>(logprob_answers_.host.get());
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = unpack_logprob(host + i * logprob_words_, logprob_tokens_[i], logprob_top_k_);
    }
    logprob_tokens_.clear();
    return Status::ok();
  }

 private:
  // A device buffer with a page-locked mirror on the host, so that copies between them are asynchronous DMA (an
  // upload never waits for the work ahead of it on the stream); both grow to twice the largest request so far, rarely.
  struct UploadBuffer {
    void* device = nullptr;
    std::shared_ptr<void> host;
    size_t capacity = 0;  // bytes
  };

  // Makes `b` hold at least `bytes` (twice that when it grows); its contents are lost when it grows.
  Status grow(UploadBuffer& b, size_t bytes) {
    if (bytes <= b.capacity) return Status::ok();
    allocator_.deallocate(b.device, b.capacity);
    b = UploadBuffer{};
    PHOTON_ASSIGN_OR_RETURN(b.device, allocator_.allocate(bytes * 2));
    PHOTON_ASSIGN_OR_RETURN(b.host, allocate_host(bytes * 2));
    b.capacity = bytes * 2;
    return Status::ok();
  }

  // Copies `bytes` from `src` into `b` on the stream (growing it first when needed); returns the device copy. The
  // previous upload through `b` must have run.
  Result<const void*> upload(UploadBuffer& b, const void* src, size_t bytes) {
    PHOTON_RETURN_IF_ERROR(grow(b, bytes));
    std::memcpy(b.host.get(), src, bytes);
    PHOTON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.device, b.host.get(), bytes, cudaMemcpyHostToDevice, stream_));
    return static_cast<const void*>(b.device);
  }

  // One answer of the logprob kernels (cuda/kernels.hpp): the logprob, then top_k (id, logprob) pairs, ids past the
  // vocabulary (-1) dropped.
  static TokenLogprob unpack_logprob(const uint32_t* a, int32_t token, int top_k) {
    TokenLogprob t;
    t.token = token;
    t.logprob = std::bit_cast<float>(a[0]);
    for (int j = 0; j < top_k; ++j) {
      const auto id = static_cast<int32_t>(a[1 + 2 * j]);
      if (id >= 0) t.top.emplace_back(id, std::bit_cast<float>(a[2 + 2 * j]));
    }
    return t;
  }

  void record(Status s) {
    if (!s.is_ok() && error_.is_ok()) {
      log::error("{}", s.message());
      error_ = std::move(s);
    }
  }

  static cuda::Int8Weights int8(const Weight& w) {
    return {w.values.data<int8_t>(), w.scales.data<float>(), to_int(w.num_groups()), to_int(w.group_size)};
  }

  // Times the int8 matmul paths of w's shape at decode sizes (W8a16Choices), once per shape.
  Status time_int8_paths(const Weight& w) {
    const int64_t n = w.rows(), k = w.cols();
    if (!w8a16_choices_.wants(n, k, to_int(w.group_size))) return Status::ok();
    // Timing is optional: where its scratch does not fit the memory budget, the shape keeps the rule's paths.
    Result<Tensor> scratch =
        Tensor::empty({static_cast<int64_t>(cuda::W8a16Choices::scratch_bytes(n, k))}, DType::kI8, allocator_);
    if (!scratch) {
      log::debug("int8 matmul paths for {} x {} not timed: {}", n, k, scratch.status().message());
      return Status::ok();
    }
    const auto start = std::chrono::steady_clock::now();
    PHOTON_RETURN_IF_ERROR(w8a16_choices_.time_shape(int8(w), to_int(n), to_int(k), *gemm_, bf16_mut(dequantized_),
                                                     scratch->raw(), stream_));
    log::debug("int8 matmul paths for {} x {} (groups of {}), timed in {:.0f} ms, by rows: {}", n, k, w.group_size,
               ms_since(start), w8a16_choices_.describe(n, k, to_int(w.group_size)));
    return Status::ok();
  }

  // The bf16 scratch that int8 weights are widened into for the tensor-core GEMM: as large as the largest one.
  Status reserve_dequantized(int64_t elements) {
    if (dequantized_.defined() && elements <= dequantized_.numel()) return Status::ok();
    dequantized_ = Tensor();
    PHOTON_ASSIGN_OR_RETURN(dequantized_, Tensor::empty({elements}, DType::kBF16, allocator_));
    return Status::ok();
  }

  // out[M, n] = x[M, K] * w^T for decode-sized M, SwiGLU-gated when swiglu (n = the intermediate size), with
  // fusion's norm or residual add. int8 weights take the tensor-core W8A16 kernel for 2 to 16 rows where its shape
  // rules allow, else the SIMT GEMV (up to 8 rows; one row always: there its integer dot products are the faster);
  // bf16 weights the SIMT GEMV. Only the GEMV fuses, and the norm only where gemv takes it. False, with nothing
  // launched, when no kernel serves the shape and fusion: the caller runs cuBLASLt or composes the plain operations.
  bool skinny(const Tensor& x, const Weight& w, int64_t n, void* out, bool out_f32, bool swiglu,
              const cuda::GemvFusion& fusion = {}) {
    const int m = to_int(x.size(0)), k = to_int(x.size(1)), cols = to_int(n);
    const int64_t ldx = x.stride(0);
    if (m == 0) return true;
    auto* out16 = static_cast<uint16_t*>(out);
    if (w.quantized()) {
      const int group = to_int(w.group_size);
      if (cuda::w8a16_mma_supported(m, k, ldx, group)) {
        if (fusion.norm != nullptr || fusion.accumulate) return false;
        if (swiglu) {
          cuda::w8a16_mma_swiglu(bf16(x), m, ldx, int8(w), cols, k, out16, stream_);
        } else {
          cuda::w8a16_mma(bf16(x), m, ldx, int8(w), cols, k, out, out_f32, stream_);
        }
        return true;
      }
      if (!cuda::gemv_int8_supported(m, k, ldx, group)) return false;
      return swiglu ? cuda::gemv_swiglu_int8(bf16(x), m, ldx, int8(w), cols, k, out16, stream_, fusion)
                    : cuda::gemv_int8(bf16(x), m, ldx, int8(w), cols, k, out, out_f32, stream_, fusion);
    }
    if (!cuda::gemv_supported(m, k, ldx)) return false;
    return swiglu ? cuda::gemv_swiglu(bf16(x), m, ldx, bf16(w.values), cols, k, out16, stream_, fusion)
                  : cuda::gemv(bf16(x), m, ldx, bf16(w.values), cols, k, out, out_f32, stream_, fusion);
  }

  // out[M, N] = x[M, K] * w[N, K]^T: the skinny kernels for decode-sized M, cuBLASLt above; int8 weights above
  // take the Hopper W8A16 GEMM where it serves the shape faster, else are widened to bf16 for cuBLASLt.
  Status gemm(const Tensor& x, const Weight& w, Tensor& out) {
    const int64_t m = x.size(0), k = x.size(1), n = w.rows(), ldx = x.stride(0);
    const bool out_f32 = out.dtype() == DType::kF32;
    if (skinny(x, w, n, out.raw(), out_f32, false)) return Status::ok();
    if (!w.quantized()) return gemm_->run(x.raw(), m, k, ldx, w.values.raw(), n, out.raw(), out_f32, stream_);
    const cuda::W8a16Choice path = w8a16_choices_.choose(m, n, k, to_int(w.group_size));
    if (!path.widen && cuda::w8a16_gemm(bf16(x), to_int(m), ldx, int8(w), to_int(n), to_int(k), out.raw(), out_f32,
                                        stream_, path.plan)) {
      return Status::ok();
    }
    auto* wide = bf16_mut(dequantized_);
    cuda::dequantize_int8(int8(w), n, k, wide, stream_);
    return gemm_->run(x.raw(), m, k, ldx, wide, n, out.raw(), out_f32, stream_);
  }

  int device_;
  cuda::CudaAllocator allocator_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::Gemm> gemm_;
  void* gemm_workspace_ = nullptr;
  void* attention_workspace_ = nullptr;
  Tensor dequantized_;                // bf16 scratch for int8 weights in the GEMM path (reserve_dequantized)
  cuda::W8a16Choices w8a16_choices_;  // the int8 GEMM path for each weight shape and row count (prepare_weight)
  std::vector<cudaGraphExec_t> graphs_;
  UploadBuffer sample_args_, adjustments_;                 // sample(): the requests and their logit adjustments
  UploadBuffer saved_logits_;                              // sample(): the logits adjustments replaced (device only)
  UploadBuffer logprob_queries_;                           // token_logprobs(): the queries
  UploadBuffer logprob_answers_;                           // and their answers, copied back through the host mirror
  std::vector<int32_t> logprob_tokens_;                    // the last enqueue's query tokens, until read
  int logprob_top_k_ = 0;                                  // its top tokens per answer
  size_t logprob_words_ = 1;                               // and its words per answer
  cudaEvent_t logprobs_ready_ = nullptr;                   // recorded after its copy to the host
  UploadBuffer sampled_answers_;                           // sample(): the chosen tokens' logprobs, where asked for
  std::vector<std::pair<int32_t, int>> sampled_logprobs_;  // the last sample() call's (request, top_k) asking
  int sampled_vocab_ = 0;                                  // and its rows' length
  const int32_t* sampled_host_ids_ = nullptr;              // and where its ids land
  cudaEvent_t samples_ready_ = nullptr;                    // recorded after the last sample() call's copy to the host
  Status error_;
#ifdef PHOTON_KERNEL_TRACE
  std::string trace_path_;  // PHOTON_KERNEL_TRACE: where the destructor writes the kernel timeline
#endif
};

}  // namespace

void* cuda_backend_stream(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  return cuda ? static_cast<void*>(cuda->stream()) : nullptr;
}

Result<std::unique_ptr<Backend>> make_cuda_backend(int device, size_t memory_limit_bytes) {
  const int count = cuda::device_count();
  if (count == 0) {
    return Status(StatusCode::kUnsupported,
                  "no CUDA GPU is visible (check the driver and CUDA_VISIBLE_DEVICES); "
                  "use device \"cpu\"");
  }
  if (device < 0 || device >= count) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("GPU {} does not exist; {} GPU(s) are visible", device, count));
  }
  auto backend = std::make_unique<CudaBackend>(device, memory_limit_bytes);
  PHOTON_RETURN_IF_ERROR(backend->init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace photon

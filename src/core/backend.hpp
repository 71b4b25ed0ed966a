// The backend interface: the small set of operations the decoder is written against. The CPU and CUDA backends
// implement the same interface, so the model's forward pass exists once.
//
// Conventions for every operation:
// - Tensors live on the backend's device. Activations are row-major [tokens, features] in activation_dtype();
//   weights are [out_features, in_features] in f32, f16 or bf16, or group-wise int8 (core/weight.hpp); index
//   tensors are i32.
// - Shapes are validated when the model is loaded, so operations assume them (debug builds assert).
// - Operations are enqueued in order on the backend's stream; synchronize() waits for all of them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <photon/sampling.hpp>

#include "core/dummy_weights.hpp"
#include "core/paged_kv.hpp"
#include "core/sample_request.hpp"
#include "core/tensor.hpp"
#include "core/weight.hpp"

namespace photon {

/// Where one step's tokens sit in the paged KV cache, as tensors on the device (FlashInfer-style CSR page tables).
/// Sequence s contributes tokens [query_start[s], query_start[s+1]) of the batch; they are the last
/// (query_start[s+1] - query_start[s]) positions of its context, whose total length after this step is seq_lens[s].
struct AttentionBatch {
  int32_t num_seqs = 0;
  int32_t num_tokens = 0;
  int32_t max_seq_len = 0;    ///< max over seq_lens
  int32_t max_query_len = 0;  ///< max tokens of one sequence in this step
  Tensor query_start;         ///< i32 [num_seqs + 1]
  Tensor seq_lens;            ///< i32 [num_seqs]
  Tensor block_indptr;   ///< i32 [num_seqs + 1]: sequence s owns block_indices[block_indptr[s] .. block_indptr[s+1])
  Tensor block_indices;  ///< i32 [total blocks]: physical block ids in logical order
  Tensor slot_mapping;   ///< i32 [num_tokens]: block_id * block_size + offset where each token's K/V is written
  /// The same batch split by chunk length, for backends with separate decode and prefill kernels: rows of tokens
  /// whose sequence brings fewer than kLongChunk tokens this step, and the sequences that bring more.
  static constexpr int32_t kLongChunk = 16;
  int32_t num_decode_tokens = 0;
  Tensor decode_tokens;  ///< i32 [num_decode_tokens]: batch rows
  int32_t num_prefill_seqs = 0;
  int32_t max_prefill_query_len = 0;
  Tensor prefill_seqs;  ///< i32 [num_prefill_seqs]: sequence indices
};

/// Geometry of one layer's paged KV cache: a tensor [num_blocks, 2, num_kv_heads, block_size, head_dim] where index
/// 0 of the second dimension holds keys and 1 values. Blocks are the unit the block manager hands out.
struct KvCacheLayout {
  int64_t num_blocks = 0;
  int64_t num_kv_heads = 0;
  int64_t block_size = 0;
  int64_t head_dim = 0;
  int64_t elements_per_block() const { return 2 * num_kv_heads * block_size * head_dim; }
};

/// The kernels' description of `cache` (one layer, `layout`) and of `batch`'s page tables (null: none, for a KV
/// write) with `slots` (undefined: none, for attention). Borrows the tensors' memory.
inline PagedKv paged_kv(const Tensor& cache, const KvCacheLayout& layout, const AttentionBatch* batch,
                        const Tensor* slots) {
  PagedKv kv;
  kv.cache = cache.raw();
  kv.element_bytes = static_cast<int32_t>(dtype_size(cache.dtype()));
  kv.num_kv_heads = static_cast<int32_t>(layout.num_kv_heads);
  kv.block_size = static_cast<int32_t>(layout.block_size);
  kv.head_dim = static_cast<int32_t>(layout.head_dim);
  if (batch != nullptr) {
    kv.num_seqs = batch->num_seqs;
    kv.query_start = batch->query_start.data<int32_t>();
    kv.seq_lens = batch->seq_lens.data<int32_t>();
    kv.block_indptr = batch->block_indptr.data<int32_t>();
    kv.block_indices = batch->block_indices.data<int32_t>();
  }
  if (slots != nullptr) kv.slot_mapping = slots->data<int32_t>();
  return kv;
}

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  /// Human-readable device, e.g. "NVIDIA H200 (sm_90, 139.8 GiB)" or "cpu (16 threads)".
  virtual std::string description() const = 0;
  virtual Allocator& allocator() = 0;
  /// dtype of activations between operations (f32 on the CPU).
  virtual DType activation_dtype() const = 0;
  /// Copies `bytes` host bytes into device tensor memory (and back).
  virtual void copy_to_device(const void* host, Tensor& dst, size_t bytes) = 0;
  virtual void copy_to_host(const Tensor& src, void* host, size_t bytes) = 0;
  virtual void synchronize() = 0;
  /// Makes this backend's device the calling thread's current one (a thread that drives a GPU it did not create
  /// calls this first). A no-op on the CPU.
  virtual Status make_current() { return Status::ok(); }
  /// The first error an operation hit since the last call (operations themselves return nothing, so that the
  /// forward pass stays a plain sequence of calls); clears it. Asynchronous failures surface at the next sync.
  virtual Status take_error() { return Status::ok(); }
  /// Free and total bytes of the device's memory (for the CPU: MemAvailable and MemTotal of /proc/meminfo).
  virtual Status memory_info(size_t* free_bytes, size_t* total_bytes) = 0;
  /// The dtype this backend keeps matmul weights in, given the checkpoint's (the CPU computes on any float dtype;
  /// the GPU converts to bf16 at load).
  virtual DType weight_dtype(DType stored) const { return stored; }

  /// out[t, :] = table[id - first_id, :], or zeros where that row is outside the table (a rank's slice of a
  /// vocabulary-parallel embedding), where id = ids[t], or for a placeholder ids[t] = -(k + 1), id = sampled[k]: the
  /// k-th id that an earlier sample() call wrote on the device (a step planned before the host had that id).
  /// ids i32 [T]; sampled i32 [>= k + 1] on this backend (may be empty when ids holds no placeholder); table
  /// [rows, hidden] (float or group-wise int8); out [T, hidden].
  virtual void embed(const Tensor& ids, const Tensor& sampled, const Weight& table, int64_t first_id, Tensor& out) = 0;
  /// out[r, :] = x[r, :] / rms(x[r, :]) * weight.  x, out [rows, dim] (may alias); weight f32 [dim].
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) = 0;
  /// residual += x; out = rms_norm(residual) * weight (the pre-norm of the next sub-layer).
  virtual void add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& weight, float eps, Tensor& out) = 0;
  /// out[m, n] = sum_k x[m, k] * w[n, k].  x [M, K]; w [N, K] (float or group-wise int8); out [M, N].
  virtual void linear(const Tensor& x, const Weight& w, Tensor& out) = 0;
  /// The gated MLP's first half: out = silu(x . Wg) * (x . Wu), where w = [Wg; Wu] stacks the gate and up
  /// projections ([2 * I, K], gate rows first).  x [M, K]; out [M, I]. `scratch` [M, 2 * I] is free for the
  /// backend to hold both projections (some backends fuse the product into the matmul and leave it untouched).
  virtual void linear_swiglu(const Tensor& x, const Weight& w, Tensor& scratch, Tensor& out) = 0;
  /// residual += x, each sum rounded to the activation dtype.  residual, x [rows, dim].
  virtual void add(Tensor& residual, const Tensor& x) = 0;

  /// Fused forms of a decoder layer's sub-layer boundaries (matmul, residual add, RMSNorm), for backends on which a
  /// launch costs more than a norm's work at decode sizes (the GPU). Whether they run fused for `rows` activation
  /// rows and weights stored like `w` (float or int8): where false, callers use linear and add_rms_norm, which then
  /// take fewer launches than these (their default forms below compose the plain operations).
  virtual bool fuses_norm_into_linear(int64_t rows, const Weight& w) const {
    (void)rows;
    (void)w;
    return false;
  }
  /// out = (rms_norm(x) * norm) . w^T, rounded as rms_norm then linear would. x [M, K]; norm f32 [K]; out [M, N];
  /// `normed` [M, K] is scratch for a backend that normalises apart (left unwritten when fused).
  virtual void rms_norm_linear(const Tensor& x, const Tensor& norm, float eps, const Weight& w, Tensor& normed,
                               Tensor& out) {
    rms_norm(x, norm, eps, normed);
    linear(normed, w, out);
  }
  /// linear_swiglu of rms_norm(x) * norm, rounded as rms_norm then linear_swiglu would; `normed` as above.
  virtual void rms_norm_linear_swiglu(const Tensor& x, const Tensor& norm, float eps, const Weight& w, Tensor& normed,
                                      Tensor& scratch, Tensor& out) {
    rms_norm(x, norm, eps, normed);
    linear_swiglu(normed, w, scratch, out);
  }
  /// residual += x . w^T, the product rounded to the activation dtype before the add (as linear then add would).
  /// x [M, K]; residual [M, N]; `proj` [M, N] is scratch for a backend that adds apart (left unwritten when fused).
  virtual void linear_add(const Tensor& x, const Weight& w, Tensor& proj, Tensor& residual) {
    linear(x, w, proj);
    add(residual, proj);
  }

  /// Called once for every matmul weight of a model when its decoder is made, before the first operation with it:
  /// `max_rows` is the most activation rows one product with it will have (the step's token budget; the logits rows
  /// for the LM head) and `out` the dtype of those products (the activation dtype; f32 for the LM head). The backend
  /// reserves what its kernels will need for the weight and may time its choices of kernel for the shape (the GPU:
  /// the scratch that int8 weights are widened into for large batches, the int8 matmul paths at decode sizes and
  /// cuBLASLt's algorithms at prompt sizes). Errors: out of device memory, device failures.
  virtual Status prepare_weight(const Weight& w, int64_t max_rows, DType out) {
    (void)w;
    (void)max_rows;
    (void)out;
    return Status::ok();
  }
  /// Symmetric group-wise int8 of a float weight [N, K] on this device: for each row and each group of
  /// `group_size` consecutive columns, scale = max |w| / 127 and values = round-half-even(w / scale) (0 where the
  /// group is all zeros). group_size is a multiple of 16. Errors: out of device memory.
  virtual Result<Weight> quantize_int8(const Tensor& w, int64_t group_size) = 0;
  /// out[i, :] = x[indices[i], :].
  virtual void gather_rows(const Tensor& x, const Tensor& indices, Tensor& out) = 0;
  /// out[r, col_offset + c] = src[r, c] for the columns c that fit in out.  src, out f32 [rows, *].
  virtual void copy_columns(const Tensor& src, Tensor& out, int64_t col_offset) = 0;

  /// cos/sin f32 [T, head_dim / 2] of positions (i32 [T]) times inv_freq (f32 [head_dim / 2]).
  virtual void rope_cos_sin(const Tensor& positions, const Tensor& inv_freq, Tensor& cos, Tensor& sin) = 0;
  /// Finishes the fused q/k/v projection qkv [T, (heads + 2 * kv_heads) * head_dim] (all q heads, then k, then v):
  /// when q_norm / k_norm are defined (f32 [head_dim], Qwen3) each q and k head is RMS-normalised with them; q and
  /// k are rotated (rotate-half RoPE with cos/sin of rope_cos_sin); q goes to q_out [T, heads * head_dim] and k, v
  /// into `kv_cache` (layout above) at slot_mapping (negative slots are skipped). qkv's k part may be overwritten.
  virtual void qkv_rope_cache_write(Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                                    const Tensor& cos, const Tensor& sin, const Tensor& slot_mapping,
                                    const KvCacheLayout& layout, Tensor& kv_cache, Tensor& q_out) = 0;
  /// Causal attention of q [T, heads * head_dim] over each sequence's cached K/V (GQA: query head h reads kv head
  /// h / (heads / kv_heads)); out [T, heads * head_dim]. `scale` multiplies q.k (usually 1/sqrt(head_dim)).
  virtual void attention(const Tensor& q, const Tensor& kv_cache, const KvCacheLayout& layout,
                         const AttentionBatch& batch, float scale, Tensor& out) = 0;

  /// Whether attention() wants sequences with long chunks (>= AttentionBatch::kLongChunk tokens) listed apart
  /// from short ones (separate prefill and decode kernels). When false every token is listed as a decode token.
  virtual bool separates_long_chunks(int64_t head_dim) const {
    (void)head_dim;
    return false;
  }
  /// Fills dst (f32 or bf16, `f.rows` x `f.cols`, contiguous) with dummy weights on the device, the same bits the
  /// host computes (core/dummy_weights.hpp). False when this backend does not generate them (the caller fills a
  /// host copy instead).
  virtual bool fill_dummy(Tensor& dst, const DummyFill& f) {
    (void)dst;
    (void)f;
    return false;
  }
  /// Host memory for staging uploads: page-locked on a GPU (so copies are asynchronous DMA), plain on the CPU.
  virtual Result<std::shared_ptr<void>> allocate_host(size_t bytes) = 0;

  /// CUDA graphs: record the operations issued between begin_capture and end_capture once, then replay them with
  /// launch_graph (same shapes and buffers, new contents). Backends without graphs return false / kUnsupported.
  virtual bool supports_graphs() const { return false; }
  virtual Status begin_capture() { return Status(StatusCode::kUnsupported, "graphs are not supported"); }
  /// Ends the capture; returns an id for launch_graph.
  virtual Result<int> end_capture() { return Status(StatusCode::kUnsupported, "graphs are not supported"); }
  virtual Status launch_graph(int) { return Status(StatusCode::kUnsupported, "graphs are not supported"); }
  /// Releases a graph from end_capture once its launches are done (its id is not reused). Graphs that captured
  /// collectives must be released before their communicators are destroyed: NCCL waits for them.
  virtual void destroy_graph(int) {}

  /// Chooses one token per request from f32 logits [rows, vocab] into `ids` (i32 on this backend, >= requests.size()
  /// entries) and copies them to `host_ids` (>= requests.size() entries; memory from allocate_host, so the copy is
  /// asynchronous): first each request's adjustments (logit bias and penalties) over its entries of `adjustments`,
  /// applied to its row in place (requests with adjustments name distinct rows), then the selection — the same
  /// arithmetic and draws as cpu::adjust_logits and cpu::sample_row. The rows of requests with logprobs >= 0 are
  /// the model's again afterwards (their logprobs are of the unadjusted logits); the others keep their adjustments.
  /// Enqueued in order with the other operations: it returns before the ids exist, so a following pass can use them
  /// on the device (embed's placeholders) while they travel to the host. wait_samples() waits for them, and must be
  /// called before the next sample() call. `requests` and `adjustments` are read before the call returns.
  virtual Status sample(Tensor& logits, std::span<const SampleRequest> requests,
                        std::span<const LogitAdjustment> adjustments, Tensor& ids, int32_t* host_ids) = 0;
  /// Waits until the ids of the last sample() call are in its host_ids; returns any error of the enqueued work.
  virtual Status wait_samples() = 0;
  /// After wait_samples(): for each request of the last sample() call with logprobs >= 0, in their order, into
  /// out[j] (out.size() == their count): its chosen token's log-softmax and its row's `logprobs` most likely tokens
  /// in the model's logits (before the adjustments), as token_logprobs gives them — computed on the device with the
  /// selection, so only they cross to the host. The same answers on every call until the next sample(). Errors:
  /// kInvalidArgument when out.size() is not that count.
  virtual Status sampled_logprobs(std::span<TokenLogprob> out) = 0;
  /// Enqueues, after the operations before it, for each query: the log-softmax of f32 logits [rows, vocab] at row
  /// queries[i].row for token queries[i].token, and that row's `top_k` (0 to kMaxTopLogprobs) most likely tokens with
  /// theirs, best first, ties by the lower id — cpu::token_logprob's values (a GPU sums the normaliser in another
  /// order: within 1e-5 relative of the host's). Only these values cross to the host, never the rows. Returns without
  /// waiting for them, so a following pass may be enqueued (and overwrite `logits`) while they are computed;
  /// read_token_logprobs() waits for them. `queries` are read before the call returns; the answers of a call must be
  /// read before the next call. Errors: the device's (earlier work's).
  virtual Status enqueue_token_logprobs(const Tensor& logits, std::span<const LogprobQuery> queries, int top_k) = 0;
  /// Waits for the last enqueue_token_logprobs() call's answers and writes them into out, in query order. Errors:
  /// kInvalidArgument when out.size() is not that call's query count; the device's (that work's or earlier work's).
  virtual Status read_token_logprobs(std::span<TokenLogprob> out) = 0;
  /// enqueue_token_logprobs, then read_token_logprobs: returns once `out` is filled.
  Status token_logprobs(const Tensor& logits, std::span<const LogprobQuery> queries, int top_k,
                        std::span<TokenLogprob> out) {
    if (Status s = enqueue_token_logprobs(logits, queries, top_k); !s) return s;
    return read_token_logprobs(out);
  }
};

}  // namespace photon

// The decoder-only transformer (Llama 3.x and Qwen3), written once against the Backend interface.
//
// One forward pass runs a ragged batch: any mix of prompt chunks and single decode tokens from several sequences,
// each reading and extending its own pages of the KV cache. Only the rows named in logits_indices reach the LM
// head. All activation memory is taken at creation, sized by DecoderLimits; forward() allocates nothing.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <vector>

#include "core/backend.hpp"
#include "core/communicator.hpp"
#include "models/kv_cache.hpp"
#include "models/model_config.hpp"
#include "models/tensor_parallel.hpp"
#include "models/weights.hpp"

namespace photon {

/// One step's batch as host arrays (see AttentionBatch for the meaning of each).
struct ForwardBatch {
  std::vector<int32_t> token_ids;       ///< [T]; -(k + 1): the k-th id in Decoder::sampled_ids() (see there)
  std::vector<int32_t> positions;       ///< [T] position of each token in its sequence
  std::vector<int32_t> slot_mapping;    ///< [T]
  std::vector<int32_t> query_start;     ///< [S + 1]
  std::vector<int32_t> seq_lens;        ///< [S]
  std::vector<int32_t> block_indptr;    ///< [S + 1]
  std::vector<int32_t> block_indices;   ///< blocks of each sequence, in order
  std::vector<int32_t> logits_indices;  ///< rows of [0, T) whose logits are wanted, in output order

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(seq_lens.size()); }
  void clear();
  /// Appends one sequence's chunk: `tokens` are the sequence's positions [start, start + tokens.size()); `blocks`
  /// its whole block table. When `want_logits` is "last", only the chunk's last row is added to logits_indices;
  /// "all" adds every row.
  enum class Logits { kNone, kLast, kAll };
  void add_sequence(std::span<const int32_t> tokens, int32_t start, std::span<const int32_t> blocks, int32_t block_size,
                    Logits want_logits);
};

/// Capacity of one forward pass, fixed at creation.
struct DecoderLimits {
  int64_t max_num_tokens = 512;   ///< tokens per forward pass
  int64_t max_num_seqs = 64;      ///< sequences per forward pass
  int64_t max_num_logits = 64;    ///< rows of logits per forward pass
  int64_t max_num_blocks = 4096;  ///< block-table entries per forward pass
  int64_t max_seq_len = 4096;     ///< longest context of a sequence (sizes the graphs' attention splits)
  bool use_graphs = true;         ///< replay decode steps as graphs where the backend supports them
};

class Decoder {
 public:
  /// Takes ownership of `weights`; `backend` must outlive the decoder. With a communicator (tensor parallelism),
  /// the decoder is that rank's share: `weights` hold the rank's slice (make_shard(config, rank, size)), the KV
  /// cache its KV heads (shard_config), and every rank must call forward() with the same batch at the same time;
  /// each then returns the whole logits. `communicator` must outlive the decoder.
  static Result<std::unique_ptr<Decoder>> create(const ModelConfig& config, ModelWeights weights, Backend& backend,
                                                 const DecoderLimits& limits, Communicator* communicator = nullptr);

  /// Releases the graphs this decoder captured (before the communicator they captured goes away).
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  /// Runs the batch and returns logits f32 [logits_indices.size(), vocab] on the backend's device, valid until the
  /// next forward. Errors (batch past the limits, ids out of range, blocks outside the cache) leave the cache's
  /// other sequences untouched.
  Result<Tensor> forward(const ForwardBatch& batch, PagedKvCache& kv_cache);

  /// The whole model's config (not the rank's share).
  const ModelConfig& config() const { return full_config_; }
  const TensorParallelShard& shard() const { return shard_; }
  const ModelWeights& weights() const { return weights_; }
  const DecoderLimits& limits() const { return limits_; }
  /// Bytes of activation workspace.
  uint64_t workspace_bytes() const { return workspace_bytes_; }
  /// i32 [max_num_logits] on the backend's device, at a fixed address: where the engine has Backend::sample write
  /// a step's ids, so that the next step can be enqueued before they reach the host — its batch names the id of
  /// sample k as the placeholder token -(k + 1), resolved on the device when the pass runs. Single-rank decoders
  /// only (a tensor-parallel batch with a placeholder is an error).
  Tensor& sampled_ids() { return sampled_; }

 private:
  // The host-side numbers a pass's operations depend on (grid sizes, GEMM shapes): a graph is captured per shape.
  struct Shape {
    int64_t tokens = 0, seqs = 0, logits = 0, blocks = 0, max_seq_len = 0, max_query_len = 0;
    int64_t decode_tokens = 0, prefill_seqs = 0, max_prefill_query_len = 0;
  };

  Decoder(const ModelConfig& config, ModelWeights weights, Backend& backend, const DecoderLimits& limits,
          Communicator* communicator);
  Status allocate_workspace();
  Status validate(const ForwardBatch& batch, const PagedKvCache& kv_cache) const;
  /// Lays the index arrays of a pass with these sizes out back to back in indices_, the block table last, so a
  /// pass's upload is one copy of the buffer's used prefix. A graph keeps the views of its bucket's layout, which
  /// every replay of the bucket recreates.
  void place_indices(int64_t tokens, int64_t seqs, int64_t logits);
  /// Copies the batch's arrays (and its decode / prefill split) to the device in one copy; fills the shape's split
  /// counts.
  void upload(const ForwardBatch& batch, Shape& shape);
  void run(const Shape& shape, PagedKvCache& kv_cache);
  /// The graph bucket for a decode-only batch of `tokens` sequences, or 0 when it runs eagerly.
  int64_t graph_bucket(const ForwardBatch& batch) const;

  ModelConfig full_config_;
  TensorParallelShard shard_;
  ModelConfig config_;  // this rank's share
  ModelWeights weights_;
  Backend& backend_;
  Communicator* comm_;
  DecoderLimits limits_;
  uint64_t workspace_bytes_ = 0;

  // Device workspace, each sized for the limits.
  Tensor inv_freq_;
  // Index arrays: views into one device buffer (placed per pass by place_indices), mirrored by page-locked host
  // staging buffers used in turn.
  Tensor indices_;
  std::shared_ptr<void> staging_[2];
  int next_staging_ = 0;
  Tensor ids_, positions_, slots_, query_start_, seq_lens_, block_indptr_, block_indices_, logits_indices_;
  Tensor decode_tokens_, prefill_seqs_;
  std::vector<int32_t> decode_host_, prefill_host_;
  Tensor sampled_;
  ForwardBatch padded_;
  std::map<std::pair<int64_t, const void*>, int> graphs_;  // (bucket, KV cache) -> graph id
  Tensor residual_, hidden_, qkv_, q_, attn_, proj_, gate_up_, mlp_, cos_, sin_, last_hidden_, logits_;
  Tensor logits_shard_, logits_gathered_;  // tensor parallelism: this rank's vocabulary columns, and every rank's
};

}  // namespace photon

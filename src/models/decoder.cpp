#include "models/decoder.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "models/rope_frequencies.hpp"

namespace photon {
namespace {

Status batch_error(std::string message) { return Status(StatusCode::kInvalidArgument, std::move(message)); }

int64_t aligned(int64_t n) { return (n + 15) / 16 * 16; }  // index arrays start on 64-byte boundaries

// Lengths of the index arrays before the block table, in buffer order (see Decoder::place_indices): ids, positions,
// slots, query_start, seq_lens, block_indptr, logits_indices, decode_tokens, prefill_seqs.
std::array<int64_t, 9> index_array_lengths(int64_t tokens, int64_t seqs, int64_t logits) {
  return {tokens, tokens, tokens, seqs + 1, seqs, seqs + 1, logits, tokens, seqs};
}

// Where the block table starts in a layout of these sizes.
int64_t block_table_offset(int64_t tokens, int64_t seqs, int64_t logits) {
  int64_t offset = 0;
  for (int64_t n : index_array_lengths(tokens, seqs, logits)) offset += aligned(n);
  return offset;
}

}  // namespace

void ForwardBatch::clear() {
  token_ids.clear();
  positions.clear();
  slot_mapping.clear();
  query_start.clear();
  seq_lens.clear();
  block_indptr.clear();
  block_indices.clear();
  logits_indices.clear();
}

void ForwardBatch::add_sequence(std::span<const int32_t> tokens, int32_t start, std::span<const int32_t> blocks,
                                int32_t block_size, Logits want_logits) {
  if (query_start.empty()) query_start.push_back(0);
  if (block_indptr.empty()) block_indptr.push_back(0);
  const auto first_row = static_cast<int32_t>(token_ids.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t pos = start + static_cast<int32_t>(i);
    token_ids.push_back(tokens[i]);
    positions.push_back(pos);
    // A position past the block table gets no slot; validate() then rejects the batch as not fitting.
    const auto block = static_cast<size_t>(pos / block_size);
    slot_mapping.push_back(block < blocks.size() ? blocks[block] * block_size + pos % block_size : -1);
    if (want_logits == Logits::kAll) logits_indices.push_back(first_row + static_cast<int32_t>(i));
  }
  if (want_logits == Logits::kLast && !tokens.empty()) {
    logits_indices.push_back(first_row + static_cast<int32_t>(tokens.size()) - 1);
  }
  query_start.push_back(static_cast<int32_t>(token_ids.size()));
  seq_lens.push_back(start + static_cast<int32_t>(tokens.size()));
  block_indices.insert(block_indices.end(), blocks.begin(), blocks.end());
  block_indptr.push_back(static_cast<int32_t>(block_indices.size()));
}

Decoder::Decoder(const ModelConfig& config, ModelWeights weights, Backend& backend, const DecoderLimits& limits,
                 Communicator* communicator)
    : full_config_(config),
      shard_(make_shard(config, communicator ? communicator->rank() : 0, communicator ? communicator->size() : 1)),
      config_(shard_config(config, shard_)),
      weights_(std::move(weights)),
      backend_(backend),
      comm_(communicator && communicator->size() > 1 ? communicator : nullptr),
      limits_(limits) {}

Decoder::~Decoder() {
  for (const auto& [key, id] : graphs_) backend_.destroy_graph(id);
}

Result<std::unique_ptr<Decoder>> Decoder::create(const ModelConfig& config, ModelWeights weights, Backend& backend,
                                                 const DecoderLimits& limits, Communicator* communicator) {
  if (limits.max_num_tokens <= 0 || limits.max_num_seqs <= 0 || limits.max_num_logits <= 0 ||
      limits.max_num_blocks <= 0) {
    return Status(StatusCode::kInvalidArgument, "decoder limits must all be positive");
  }
  if (communicator) PHOTON_RETURN_IF_ERROR(check_tensor_parallel(config, communicator->size()));
  for (const LayerWeights& l : weights.layers) {
    for (const Weight* w : {&l.qkv_proj, &l.o_proj, &l.gate_up_proj, &l.down_proj}) {
      PHOTON_RETURN_IF_ERROR(backend.prepare_weight(*w, limits.max_num_tokens, backend.activation_dtype()));
    }
  }
  PHOTON_RETURN_IF_ERROR(backend.prepare_weight(weights.lm_head, limits.max_num_logits, DType::kF32));
  std::unique_ptr<Decoder> d(new Decoder(config, std::move(weights), backend, limits, communicator));
  PHOTON_RETURN_IF_ERROR(d->allocate_workspace());
  return d;
}

Status Decoder::allocate_workspace() {
  Allocator& a = backend_.allocator();
  const DType act = backend_.activation_dtype();
  const int64_t t = limits_.max_num_tokens;
  const int64_t l = limits_.max_num_logits;
  const ModelConfig& c = config_;
  struct Item {
    Tensor* slot;
    std::vector<int64_t> shape;
    DType dtype;
  };
  std::vector<Item> items = {
      {&inv_freq_, {c.head_dim / 2}, DType::kF32},
      {&residual_, {t, c.hidden_size}, act},
      {&hidden_, {t, c.hidden_size}, act},
      {&proj_, {t, c.hidden_size}, act},
      {&qkv_, {t, c.q_size() + 2 * c.kv_size()}, act},
      {&q_, {t, c.q_size()}, act},
      {&attn_, {t, c.q_size()}, act},
      {&gate_up_, {t, 2 * c.intermediate_size}, act},
      {&mlp_, {t, c.intermediate_size}, act},
      {&cos_, {t, c.head_dim / 2}, DType::kF32},
      {&sin_, {t, c.head_dim / 2}, DType::kF32},
      {&last_hidden_, {l, c.hidden_size}, act},
      {&logits_, {l, c.vocab_size}, DType::kF32},
      {&sampled_, {l}, DType::kI32},
  };
  if (comm_) {
    items.push_back({&logits_shard_, {l, shard_.vocab_rows}, DType::kF32});
    items.push_back({&logits_gathered_, {shard_.size * l, shard_.vocab_rows}, DType::kF32});
  }
  for (const Item& item : items) {
    auto tensor = Tensor::empty(item.shape, item.dtype, a);
    if (!tensor) {
      return tensor.status().with_context(
          fmt::format("allocating the activation workspace for {} tokens and {} "
                      "logit rows (lower --max-num-batched-tokens)",
                      t, l));
    }
    *item.slot = std::move(*tensor);
    workspace_bytes_ += item.slot->nbytes();
  }
  // One device buffer (and its host mirror) for all index arrays: large enough for every layout place_indices makes.
  const int64_t seqs = limits_.max_num_seqs;
  const int64_t total = block_table_offset(t, seqs, l) + limits_.max_num_blocks;
  auto indices = Tensor::empty({total}, DType::kI32, a);
  if (!indices) return indices.status().with_context("allocating the batch index buffer");
  indices_ = std::move(*indices);
  for (auto& buffer : staging_) {
    PHOTON_ASSIGN_OR_RETURN(buffer, backend_.allocate_host(static_cast<size_t>(total) * sizeof(int32_t)));
  }
  workspace_bytes_ += indices_.nbytes();
  place_indices(t, seqs, l);
  const std::vector<float> inv = rope_inv_freq(c.rope, c.head_dim);
  backend_.copy_to_device(inv.data(), inv_freq_, inv.size() * sizeof(float));
  return Status::ok();
}

Status Decoder::validate(const ForwardBatch& b, const PagedKvCache& kv) const {
  const auto t = static_cast<int64_t>(b.token_ids.size());
  const auto s = static_cast<int64_t>(b.seq_lens.size());
  if (t == 0 || s == 0) return batch_error("a forward pass needs at least one token");
  if (t > limits_.max_num_tokens) {
    return batch_error(fmt::format("batch of {} tokens exceeds the limit of {}", t, limits_.max_num_tokens));
  }
  if (s > limits_.max_num_seqs) {
    return batch_error(fmt::format("batch of {} sequences exceeds the limit of {}", s, limits_.max_num_seqs));
  }
  if (static_cast<int64_t>(b.logits_indices.size()) > limits_.max_num_logits) {
    return batch_error(
        fmt::format("{} logit rows exceed the limit of {}", b.logits_indices.size(), limits_.max_num_logits));
  }
  if (static_cast<int64_t>(b.block_indices.size()) > limits_.max_num_blocks) {
    return batch_error(
        fmt::format("{} block-table entries exceed the limit of {}", b.block_indices.size(), limits_.max_num_blocks));
  }
  if (static_cast<int64_t>(b.positions.size()) != t || static_cast<int64_t>(b.slot_mapping.size()) != t ||
      static_cast<int64_t>(b.query_start.size()) != s + 1 || static_cast<int64_t>(b.block_indptr.size()) != s + 1) {
    return batch_error("batch arrays have inconsistent lengths");
  }
  if (b.query_start[0] != 0 || b.query_start[static_cast<size_t>(s)] != t || b.block_indptr[0] != 0 ||
      b.block_indptr[static_cast<size_t>(s)] != static_cast<int32_t>(b.block_indices.size())) {
    return batch_error("query_start / block_indptr must start at 0 and end at the array lengths");
  }
  const int64_t bs = kv.block_size();
  for (int64_t i = 0; i < s; ++i) {
    const auto u = static_cast<size_t>(i);
    const int32_t q_len = b.query_start[u + 1] - b.query_start[u];
    const int32_t n_blocks = b.block_indptr[u + 1] - b.block_indptr[u];
    if (q_len < 0 || n_blocks < 0 || b.seq_lens[u] < q_len || static_cast<int64_t>(n_blocks) * bs < b.seq_lens[u]) {
      return batch_error(
          fmt::format("sequence {} of the batch: {} new tokens, context {} and {} blocks of {} do not "
                      "fit together",
                      i, q_len, b.seq_lens[u], n_blocks, bs));
    }
  }
  for (int32_t block : b.block_indices) {
    if (block < 0 || block >= kv.num_blocks()) {
      return batch_error(fmt::format("block id {} is outside the KV cache (0..{})", block, kv.num_blocks() - 1));
    }
  }
  for (int64_t i = 0; i < t; ++i) {
    const auto u = static_cast<size_t>(i);
    if (b.token_ids[u] < 0) {  // a placeholder for sampled_ids()[-id - 1]
      if (comm_) return batch_error("placeholder token ids need a decoder of one rank");
      if (-static_cast<int64_t>(b.token_ids[u]) > sampled_.numel()) {
        return batch_error(fmt::format("placeholder token id {} names a sample past the {} of a step", b.token_ids[u],
                                       sampled_.numel()));
      }
    } else if (b.token_ids[u] >= config_.vocab_size) {
      return batch_error(
          fmt::format("token id {} is outside the vocabulary (0..{})", b.token_ids[u], config_.vocab_size - 1));
    }
    if (b.slot_mapping[u] < -1 || b.slot_mapping[u] >= kv.capacity_tokens() || b.positions[u] < 0) {
      return batch_error(
          fmt::format("token {} has slot {} / position {} outside the KV cache", i, b.slot_mapping[u], b.positions[u]));
    }
  }
  for (int32_t row : b.logits_indices) {
    if (row < 0 || row >= t) return batch_error(fmt::format("logits index {} is outside the batch", row));
  }
  return Status::ok();
}

void Decoder::place_indices(int64_t tokens, int64_t seqs, int64_t logits) {
  Tensor* regions[] = {&ids_,          &positions_,      &slots_,         &query_start_, &seq_lens_,
                       &block_indptr_, &logits_indices_, &decode_tokens_, &prefill_seqs_};
  const auto lengths = index_array_lengths(tokens, seqs, logits);
  int64_t offset = 0;
  for (size_t i = 0; i < std::size(regions); ++i) {
    *regions[i] = indices_.slice_rows(offset, offset + lengths[i]);
    offset += aligned(lengths[i]);
  }
  block_indices_ = indices_.slice_rows(offset, indices_.size(0));
}

void Decoder::upload(const ForwardBatch& b, Shape& shape) {
  place_indices(shape.tokens, shape.seqs, shape.logits);
  decode_host_.clear();
  prefill_host_.clear();
  shape.max_prefill_query_len = 0;
  const bool separate_long_chunks = backend_.separates_long_chunks(config_.head_dim);
  for (int32_t s = 0; s < b.num_seqs(); ++s) {
    const auto u = static_cast<size_t>(s);
    const int32_t q_len = b.query_start[u + 1] - b.query_start[u];
    if (q_len >= AttentionBatch::kLongChunk && separate_long_chunks) {
      prefill_host_.push_back(s);
      shape.max_prefill_query_len = std::max<int64_t>(shape.max_prefill_query_len, q_len);
    } else {
      for (int32_t r = b.query_start[u]; r < b.query_start[u + 1]; ++r) decode_host_.push_back(r);
    }
  }
  shape.decode_tokens = static_cast<int64_t>(decode_host_.size());
  shape.prefill_seqs = static_cast<int64_t>(prefill_host_.size());
  // The host buffer mirrors the device buffer; the used prefix (the block table last) goes over in one copy.
  // Two host buffers in turn: with async scheduling this pass is enqueued before the previous pass's copy has
  // necessarily run, but after the one before it has (its step's ids were waited for).
  auto* host = static_cast<int32_t*>(staging_[next_staging_].get());
  next_staging_ ^= 1;
  auto put = [&](const std::vector<int32_t>& src, const Tensor& dst) {
    std::copy(src.begin(), src.end(), host + (dst.data<int32_t>() - indices_.data<int32_t>()));
  };
  put(b.token_ids, ids_);
  put(b.positions, positions_);
  put(b.slot_mapping, slots_);
  put(b.query_start, query_start_);
  put(b.seq_lens, seq_lens_);
  put(b.block_indptr, block_indptr_);
  put(b.logits_indices, logits_indices_);
  put(decode_host_, decode_tokens_);
  put(prefill_host_, prefill_seqs_);
  put(b.block_indices, block_indices_);
  const auto used =
      static_cast<size_t>(block_indices_.data<int32_t>() - indices_.data<int32_t>()) + b.block_indices.size();
  backend_.copy_to_device(host, indices_, used * sizeof(int32_t));
}

int64_t Decoder::graph_bucket(const ForwardBatch& b) const {
  if (!limits_.use_graphs || !backend_.supports_graphs()) return 0;
  const int64_t t = b.num_tokens();
  if (t != b.num_seqs() || static_cast<int64_t>(b.logits_indices.size()) != t) return 0;  // decode steps only
  static constexpr int64_t kBuckets[] = {1,   2,   4,   8,   16,  24,  32,  48,  64,  80, 96,
                                         112, 128, 160, 192, 224, 256, 320, 384, 448, 512};
  const int64_t cap = std::min({limits_.max_num_tokens, limits_.max_num_seqs, limits_.max_num_logits});
  for (int64_t bucket : kBuckets) {
    if (bucket > cap) break;
    if (bucket >= t) return bucket;
  }
  return 0;
}

Result<Tensor> Decoder::forward(const ForwardBatch& b, PagedKvCache& kv) {
  PHOTON_RETURN_IF_ERROR(validate(b, kv));
  Shape shape;
  shape.tokens = b.num_tokens();
  shape.seqs = b.num_seqs();
  shape.logits = static_cast<int64_t>(b.logits_indices.size());
  shape.blocks = static_cast<int64_t>(b.block_indices.size());
  for (int64_t i = 0; i < shape.seqs; ++i) {
    const auto u = static_cast<size_t>(i);
    shape.max_seq_len = std::max<int64_t>(shape.max_seq_len, b.seq_lens[u]);
    shape.max_query_len = std::max<int64_t>(shape.max_query_len, b.query_start[u + 1] - b.query_start[u]);
  }
  int64_t bucket = graph_bucket(b);
  if (bucket > 0 && static_cast<int64_t>(b.block_indices.size()) + (bucket - shape.tokens) > limits_.max_num_blocks) {
    bucket = 0;  // no room for the padding's block-table entries
  }
  if (bucket == 0) {
    upload(b, shape);
    run(shape, kv);
    PHOTON_RETURN_IF_ERROR(backend_.take_error());
    if (comm_) PHOTON_RETURN_IF_ERROR(comm_->take_error());
    return logits_.slice_rows(0, shape.logits);
  }
  // Decode step as a graph: pad to the bucket with dummy sequences (one token at position 0 of block 0 whose K/V
  // write is skipped), so one captured graph serves every batch size up to the bucket.
  padded_ = b;
  const std::vector<int32_t> pad_token = {0}, pad_blocks = {b.block_indices.empty() ? 0 : b.block_indices[0]};
  for (int64_t i = shape.tokens; i < bucket; ++i) {
    padded_.add_sequence(pad_token, 0, pad_blocks, static_cast<int32_t>(kv.block_size()), ForwardBatch::Logits::kLast);
    padded_.slot_mapping.back() = -1;
  }
  Shape graph_shape;
  graph_shape.tokens = graph_shape.seqs = graph_shape.logits = bucket;
  graph_shape.blocks = limits_.max_num_blocks;
  graph_shape.max_seq_len = limits_.max_seq_len;  // fixes the attention split count for every replay
  graph_shape.max_query_len = 1;
  upload(padded_, graph_shape);
  const auto key = std::make_pair(bucket, static_cast<const void*>(kv.layer(0).raw()));
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    PHOTON_RETURN_IF_ERROR(backend_.begin_capture());
    run(graph_shape, kv);
    auto id = backend_.end_capture();
    if (!id) return id.status().with_context("capturing the decode graph");
    it = graphs_.emplace(key, *id).first;
  }
  PHOTON_RETURN_IF_ERROR(backend_.launch_graph(it->second));
  PHOTON_RETURN_IF_ERROR(backend_.take_error());
  if (comm_) PHOTON_RETURN_IF_ERROR(comm_->take_error());
  return logits_.slice_rows(0, shape.logits);
}

void Decoder::run(const Shape& shape, PagedKvCache& kv) {
  const ModelConfig& c = config_;
  const int64_t t = shape.tokens;
  const int64_t s = shape.seqs;
  const int64_t n_logits = shape.logits;
  AttentionBatch attn_batch;
  attn_batch.num_seqs = static_cast<int32_t>(s);
  attn_batch.num_tokens = static_cast<int32_t>(t);
  attn_batch.max_seq_len = static_cast<int32_t>(shape.max_seq_len);
  attn_batch.max_query_len = static_cast<int32_t>(shape.max_query_len);
  attn_batch.query_start = query_start_.slice_rows(0, s + 1);
  attn_batch.seq_lens = seq_lens_.slice_rows(0, s);
  attn_batch.block_indptr = block_indptr_.slice_rows(0, s + 1);
  attn_batch.block_indices = block_indices_.slice_rows(0, shape.blocks);
  attn_batch.slot_mapping = slots_.slice_rows(0, t);
  attn_batch.num_decode_tokens = static_cast<int32_t>(shape.decode_tokens);
  attn_batch.decode_tokens = decode_tokens_.slice_rows(0, shape.decode_tokens);
  attn_batch.num_prefill_seqs = static_cast<int32_t>(shape.prefill_seqs);
  attn_batch.max_prefill_query_len = static_cast<int32_t>(shape.max_prefill_query_len);
  attn_batch.prefill_seqs = prefill_seqs_.slice_rows(0, shape.prefill_seqs);
  const Tensor ids = ids_.slice_rows(0, t);
  const Tensor positions = positions_.slice_rows(0, t);
  Tensor residual = residual_.slice_rows(0, t);
  Tensor hidden = hidden_.slice_rows(0, t);
  Tensor proj = proj_.slice_rows(0, t);
  Tensor qkv = qkv_.slice_rows(0, t);
  Tensor q = q_.slice_rows(0, t);
  Tensor attn = attn_.slice_rows(0, t);
  Tensor gate_up = gate_up_.slice_rows(0, t);
  Tensor mlp = mlp_.slice_rows(0, t);
  Tensor cos = cos_.slice_rows(0, t);
  Tensor sin = sin_.slice_rows(0, t);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const KvCacheLayout& layout = kv.layout();

  backend_.embed(ids, sampled_, weights_.embed, shard_.vocab_begin, residual);
  if (comm_) comm_->all_reduce_sum(residual);  // each rank embedded the ids of its vocabulary slice
  backend_.rope_cos_sin(positions, inv_freq_, cos, sin);
  // residual += proj, hidden = rms_norm(residual) * weight; under tensor parallelism proj is first summed over the
  // ranks (row-parallel projections leave each rank a partial sum over its heads or features).
  const auto add_norm = [&](const Tensor& weight) {
    if (comm_) {
      comm_->all_reduce_add_rms_norm(backend_, proj, residual, weight, eps, hidden);
    } else {
      backend_.add_rms_norm(residual, proj, weight, eps, hidden);
    }
  };
  // At decode sizes a backend may fuse each norm into the matmul that reads it and each residual add into the
  // matmul that produces it (three launches a layer fewer on a GPU); otherwise, and under tensor parallelism (the
  // ranks' partial sums meet in the all-reduce before the add), the add and the norm are one operation in between.
  const bool fused = !comm_ && backend_.fuses_norm_into_linear(t, weights_.layers.front().o_proj);
  if (!fused) backend_.rms_norm(residual, weights_.layers.front().input_norm, eps, hidden);
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const auto l = static_cast<size_t>(li);
    const LayerWeights& w = weights_.layers[l];
    if (fused) {
      backend_.rms_norm_linear(residual, w.input_norm, eps, w.qkv_proj, hidden, qkv);
    } else {
      backend_.linear(hidden, w.qkv_proj, qkv);
    }
    backend_.qkv_rope_cache_write(qkv, w.q_norm, w.k_norm, eps, cos, sin, attn_batch.slot_mapping, layout, kv.layer(li),
                                  q);
    backend_.attention(q, kv.layer(li), layout, attn_batch, scale, attn);
    if (fused) {
      backend_.linear_add(attn, w.o_proj, proj, residual);
      backend_.rms_norm_linear_swiglu(residual, w.post_norm, eps, w.gate_up_proj, hidden, gate_up, mlp);
      backend_.linear_add(mlp, w.down_proj, proj, residual);
      continue;
    }
    backend_.linear(attn, w.o_proj, proj);
    add_norm(w.post_norm);
    backend_.linear_swiglu(hidden, w.gate_up_proj, gate_up, mlp);
    backend_.linear(mlp, w.down_proj, proj);
    add_norm(l + 1 < weights_.layers.size() ? weights_.layers[l + 1].input_norm : weights_.final_norm);
  }
  if (fused) backend_.rms_norm(residual, weights_.final_norm, eps, hidden);
  if (n_logits > 0) {
    Tensor logits = logits_.slice_rows(0, n_logits);
    Tensor last = last_hidden_.slice_rows(0, n_logits);
    backend_.gather_rows(hidden, logits_indices_.slice_rows(0, n_logits), last);
    if (!comm_) {
      backend_.linear(last, weights_.lm_head, logits);
      return;
    }
    // Vocabulary-parallel LM head: each rank computes its columns; gather them all and lay them side by side.
    Tensor part = logits_shard_.slice_rows(0, n_logits);
    Tensor gathered = logits_gathered_.slice_rows(0, shard_.size * n_logits);
    backend_.linear(last, weights_.lm_head, part);
    comm_->all_gather(part, gathered);
    for (int r = 0; r < shard_.size; ++r) {
      backend_.copy_columns(gathered.slice_rows(r * n_logits, (r + 1) * n_logits), logits, r * shard_.vocab_rows);
    }
  }
}

}  // namespace photon

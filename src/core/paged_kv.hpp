// The paged KV-cache description that attention and KV-write kernels take, on the CPU and on the GPU (FlashInfer's
// paged_kv_t is the model): one layer's cache and where one step's sequences and tokens sit in it. Plain data —
// no tensors, no CUDA types — so host C++ and .cu files share the one definition. Pointers are borrowed, on the
// kernel's device, valid for the call (or, in a captured graph, for its replays).
#pragma once

#include <cstdint>

namespace photon {

struct PagedKv {
  /// One layer's cache [num_blocks][2][num_kv_heads][block_size][head_dim]: index 0 of the second dimension holds
  /// keys, 1 values. bf16 on the GPU; f32 or bf16 (element_bytes) on the CPU.
  void* cache = nullptr;
  int32_t element_bytes = 2;
  int32_t num_kv_heads = 0;
  int32_t block_size = 0;  ///< tokens per block
  int32_t head_dim = 0;
  /// The step's sequences, CSR-style: sequence s brings tokens [query_start[s], query_start[s + 1]) of the batch,
  /// the last positions of its context, which holds seq_lens[s] tokens after this step; it owns the blocks
  /// block_indices[block_indptr[s] .. block_indptr[s + 1]) in logical order.
  int32_t num_seqs = 0;
  const int32_t* query_start = nullptr;    ///< [num_seqs + 1]
  const int32_t* seq_lens = nullptr;       ///< [num_seqs]
  const int32_t* block_indptr = nullptr;   ///< [num_seqs + 1]
  const int32_t* block_indices = nullptr;  ///< [block_indptr[num_seqs]]: physical block ids
  /// [num_tokens]: block_id * block_size + offset where each token's key and value are written; negative: skipped.
  const int32_t* slot_mapping = nullptr;
};

}  // namespace photon

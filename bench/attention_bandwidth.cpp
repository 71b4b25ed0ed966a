// Streaming speed of decode attention (cuda::paged_attention) over the paged KV cache, against the bytes it must
// read: every sequence's keys and values once per step. Shapes are the attention layers of the models photon bench
// runs (query heads, KV heads, head dimension), at batch sizes and context lengths given on the command line; the
// cache uses the engine's block size (16) with its blocks scattered. Each shape cycles through enough cache copies
// (>= 512 MiB) that no launch finds its keys in the L2 cache, and the launches run back to back in a CUDA graph
// with the split count the engine picks for that batch and a graph sized for that context, as decode steps replay
// them. Prints one JSON line per shape:
// {"model", "batch", "context", "splits", "us", "kv_bytes", "gb_per_s"} (kv_bytes: keys and values read per call).
// Usage: photon_attention_bandwidth [BATCHxCONTEXT ...]   (default 1x512 1x8192 1x32768 64x4096)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "attention_shapes.hpp"
#include "cuda/kernels.hpp"
#include "graph_timing.hpp"

using photon::bench::kAttentionShapes;
using photon::bench::kCacheBlockSize;
using photon::bench::upload;

int main(int argc, char** argv) {
  const auto cases = photon::bench::parse_pairs(argc, argv, "BATCHxCONTEXT, e.g. 1x8192",
                                                {{1, 512}, {1, 8192}, {1, 32768}, {64, 4096}});
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  for (const auto& [batch, context] : cases) {
    for (const auto& s : kAttentionShapes) {
      // One decode token per sequence, each with `context` keys (its own included) in scattered blocks.
      const int blocks_per_seq = (context + kCacheBlockSize - 1) / kCacheBlockSize;
      const int num_blocks = batch * blocks_per_seq;
      std::vector<int32_t> indices(static_cast<size_t>(num_blocks));
      std::iota(indices.begin(), indices.end(), 0);
      std::shuffle(indices.begin(), indices.end(), std::mt19937(7));
      std::vector<int32_t> query_start(static_cast<size_t>(batch) + 1), indptr(static_cast<size_t>(batch) + 1);
      std::iota(query_start.begin(), query_start.end(), 0);
      for (int b = 0; b <= batch; ++b) indptr[static_cast<size_t>(b)] = b * blocks_per_seq;
      const std::vector<int32_t> seq_lens(static_cast<size_t>(batch), context);
      int32_t* d_query_start = upload(query_start);
      int32_t* d_seq_lens = upload(seq_lens);
      int32_t* d_indptr = upload(indptr);
      int32_t* d_indices = upload(indices);
      int32_t* d_tokens = upload(std::vector<int32_t>(query_start.begin(), query_start.end() - 1));

      const size_t block_elems = size_t{2} * s.kv_heads * kCacheBlockSize * s.head_dim;
      const size_t cache_bytes = block_elems * num_blocks * 2;
      const size_t kv_bytes = size_t{2} * batch * context * s.kv_heads * s.head_dim * 2;
      const int copies = static_cast<int>((size_t{512} << 20) / cache_bytes + 1);
      std::vector<void*> caches(static_cast<size_t>(copies));
      for (auto& c : caches) {
        CHECK_CUDA(cudaMalloc(&c, cache_bytes));
        CHECK_CUDA(cudaMemset(c, 0x3c, cache_bytes));  // bf16 ~0.0115: finite scores and values
      }
      const size_t q_elems = static_cast<size_t>(batch) * s.heads * s.head_dim;
      void *q = nullptr, *out = nullptr;
      CHECK_CUDA(cudaMalloc(&q, q_elems * 2));
      CHECK_CUDA(cudaMalloc(&out, q_elems * 2));
      CHECK_CUDA(cudaMemset(q, 0x3c, q_elems * 2));
      const size_t workspace_floats = photon::cuda::attention_workspace_floats(s.head_dim);
      float* workspace = nullptr;
      CHECK_CUDA(cudaMalloc(&workspace, workspace_floats * 4));
      CHECK_CUDA(cudaMemset(workspace, 0, workspace_floats * 4));
      const int splits = photon::cuda::attention_splits(batch, s.heads, s.kv_heads, s.head_dim, context);

      constexpr int kLaunches = 64;
      auto enqueue = [&] {
        for (int i = 0; i < kLaunches; ++i) {
          photon::PagedKv kv;
          kv.cache = caches[static_cast<size_t>(i % copies)];
          kv.num_kv_heads = s.kv_heads;
          kv.block_size = kCacheBlockSize;
          kv.head_dim = s.head_dim;
          kv.num_seqs = batch;
          kv.query_start = d_query_start;
          kv.seq_lens = d_seq_lens;
          kv.block_indptr = d_indptr;
          kv.block_indices = d_indices;
          photon::cuda::paged_attention(static_cast<const uint16_t*>(q), s.heads, kv, d_tokens, batch, 1.0f / 8.0f,
                                        splits, context, workspace, static_cast<uint16_t*>(out), stream);
        }
      };
      const double us = photon::bench::graph_us_per_launch(stream, kLaunches, enqueue);
      std::printf(
          "{\"model\": \"%s\", \"batch\": %d, \"context\": %d, \"splits\": %d, \"us\": %.2f, \"kv_bytes\": %zu, "
          "\"gb_per_s\": %.1f}\n",
          s.model, batch, context, splits, us, kv_bytes, static_cast<double>(kv_bytes) / us / 1e3);
      std::fflush(stdout);
      for (void* c : caches) CHECK_CUDA(cudaFree(c));
      for (void* p : {static_cast<void*>(q), out, static_cast<void*>(workspace), static_cast<void*>(d_query_start),
                      static_cast<void*>(d_seq_lens), static_cast<void*>(d_indptr), static_cast<void*>(d_indices),
                      static_cast<void*>(d_tokens)})
        CHECK_CUDA(cudaFree(p));
    }
  }
  return 0;
}

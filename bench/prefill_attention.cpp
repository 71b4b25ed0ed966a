// Speed of causal prompt attention (cuda::prefill_attention) against the tensor-core work it must do. Shapes are the
// attention layers of the models photon bench runs (query heads, KV heads, head dimension); each case is a batch of
// SEQS prompts of LEN tokens attended as one chunk each (as a prefill step of SEQS x LEN tokens runs them), over a
// paged cache with the engine's block size (16) and its blocks scattered. The launches run back to back in a CUDA
// graph. Prints one JSON line per shape:
// {"model", "seqs", "len", "us", "tflops"} (tflops: 4 x heads x head_dim x visible (query, key) pairs per second).
// Usage: photon_prefill_attention [SEQSxLEN ...]   (default 4x2048 8x1024 1x8192)
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
  const auto cases = photon::bench::parse_pairs(argc, argv, "SEQSxLEN, e.g. 4x2048", {{4, 2048}, {8, 1024}, {1, 8192}});
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  for (const auto& [seqs, len] : cases) {
    for (const auto& s : kAttentionShapes) {
      const int blocks_per_seq = (len + kCacheBlockSize - 1) / kCacheBlockSize;
      const int num_blocks = seqs * blocks_per_seq;
      std::vector<int32_t> indices(static_cast<size_t>(num_blocks));
      std::iota(indices.begin(), indices.end(), 0);
      std::shuffle(indices.begin(), indices.end(), std::mt19937(7));
      std::vector<int32_t> query_start(static_cast<size_t>(seqs) + 1), indptr(static_cast<size_t>(seqs) + 1);
      for (int b = 0; b <= seqs; ++b) {
        query_start[static_cast<size_t>(b)] = b * len;
        indptr[static_cast<size_t>(b)] = b * blocks_per_seq;
      }
      std::vector<int32_t> seq_ids(static_cast<size_t>(seqs));
      std::iota(seq_ids.begin(), seq_ids.end(), 0);
      int32_t* d_query_start = upload(query_start);
      int32_t* d_seq_lens = upload(std::vector<int32_t>(static_cast<size_t>(seqs), len));
      int32_t* d_indptr = upload(indptr);
      int32_t* d_indices = upload(indices);
      int32_t* d_seqs = upload(seq_ids);

      const size_t cache_bytes = size_t{2} * s.kv_heads * kCacheBlockSize * s.head_dim * num_blocks * 2;
      const size_t q_bytes = static_cast<size_t>(seqs) * len * s.heads * s.head_dim * 2;
      void *cache = nullptr, *q = nullptr, *out = nullptr;
      CHECK_CUDA(cudaMalloc(&cache, cache_bytes));
      CHECK_CUDA(cudaMalloc(&q, q_bytes));
      CHECK_CUDA(cudaMalloc(&out, q_bytes));
      CHECK_CUDA(cudaMemset(cache, 0x3c, cache_bytes));  // bf16 ~0.0115: finite scores and values
      CHECK_CUDA(cudaMemset(q, 0x3c, q_bytes));

      photon::PagedKv kv;
      kv.cache = cache;
      kv.num_kv_heads = s.kv_heads;
      kv.block_size = kCacheBlockSize;
      kv.head_dim = s.head_dim;
      kv.num_seqs = seqs;
      kv.query_start = d_query_start;
      kv.seq_lens = d_seq_lens;
      kv.block_indptr = d_indptr;
      kv.block_indices = d_indices;
      constexpr int kLaunches = 16;
      auto enqueue = [&] {
        for (int i = 0; i < kLaunches; ++i)
          photon::cuda::prefill_attention(static_cast<const uint16_t*>(q), s.heads, kv, d_seqs, seqs, len, 1.0f / 8.0f,
                                          static_cast<uint16_t*>(out), stream);
      };
      const double us = photon::bench::graph_us_per_launch(stream, kLaunches, enqueue);
      const double pairs = static_cast<double>(seqs) * len * (len + 1) / 2.0;
      const double flops = 4.0 * s.heads * s.head_dim * pairs;
      std::printf("{\"model\": \"%s\", \"seqs\": %d, \"len\": %d, \"us\": %.1f, \"tflops\": %.1f}\n", s.model, seqs,
                  len, us, flops / us / 1e6);
      std::fflush(stdout);
      for (void* p : {cache, q, out, static_cast<void*>(d_query_start), static_cast<void*>(d_seq_lens),
                      static_cast<void*>(d_indptr), static_cast<void*>(d_indices), static_cast<void*>(d_seqs)})
        CHECK_CUDA(cudaFree(p));
    }
  }
  return 0;
}

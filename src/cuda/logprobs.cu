// Log-probabilities of chosen tokens on the GPU, one block per query, so that only the answers cross to the host
// (a prompt of 512 tokens has 512 rows of logits: 262 MB for a vocabulary of 128,256, against 2 KB of logprobs).
// The values of the host's cpu::token_logprob: log-softmax = logit - (max + log(sum e^(logit - max))), the sum of
// each thread's f32 partial sums taken in f64; the top tokens are the first top_k of the row's order
// (cuda/token_order.cuh), found without sorting the row, then sorted among themselves. For prompt tokens (queries
// from the host) and for the tokens the sampler just chose (their ids still on the device).
#include "cuda/kernels.hpp"
#include "cuda/token_order.cuh"

namespace photon::cuda {
namespace {

// The log-softmax of `row` at `token` and its k most likely tokens into answer[0 .. 1 + 2 k) (the layout of
// token_logprobs). One block; contains barriers, so every thread of the block calls it.
__device__ void row_logprobs(const float* row, int vocab, int32_t token, int top_k, uint32_t* answer) {
  __shared__ float scratch[32];
  __shared__ double sums[kWarps][kPoints];
  __shared__ uint32_t top_keys[kMaxTopLogprobs];
  __shared__ int32_t top_ids[kMaxTopLogprobs];
  __shared__ int top_count;
  float max_logit = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kThreads) max_logit = fmaxf(max_logit, row[i]);
  max_logit = block_max(max_logit, scratch);
  float part[kPoints] = {};
  for (int i = threadIdx.x; i < vocab; i += kThreads) part[0] += expf(row[i] - max_logit);
  double total[kPoints];
  block_sums(part, total, sums);
  // As the host: NaN when a logit is +inf (or NaN, or every one -inf, which the sum gives by itself).
  const double lse = max_logit == INFINITY ? NAN : static_cast<double>(max_logit) + log(total[0]);
  if (threadIdx.x == 0) {
    answer[0] = __float_as_uint(static_cast<float>(static_cast<double>(row[token]) - lse));
    top_count = 0;
  }
  const int k = top_k < vocab ? top_k : vocab;
  if (k == 0) return;
  // The first k tokens of the order, gathered in any order, then sorted by one thread (k <= kMaxTopLogprobs).
  const Row r{row, vocab, max_logit, 1.0f};
  const Cut cut = k < vocab ? find_cut<false>(r, Cut{0u, INT_MAX}, static_cast<double>(k), sums) : Cut{0u, INT_MAX};
  __syncthreads();  // top_count is 0
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const uint32_t key = order_key(row[i]);
    if (!inside(key, i, cut)) continue;
    const int slot = atomicAdd(&top_count, 1);
    if (slot < k) {
      top_keys[slot] = key;
      top_ids[slot] = i;
    }
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  const int n = top_count < k ? top_count : k;
  for (int a = 1; a < n; ++a) {  // insertion sort: key descending, id ascending
    const uint32_t key = top_keys[a];
    const int32_t id = top_ids[a];
    int b = a;
    for (; b > 0 && (top_keys[b - 1] < key || (top_keys[b - 1] == key && top_ids[b - 1] > id)); --b) {
      top_keys[b] = top_keys[b - 1];
      top_ids[b] = top_ids[b - 1];
    }
    top_keys[b] = key;
    top_ids[b] = id;
  }
  for (int j = 0; j < k; ++j) {
    const int32_t id = j < n ? top_ids[j] : -1;
    answer[1 + 2 * j] = static_cast<uint32_t>(id);
    answer[2 + 2 * j] = __float_as_uint(id < 0 ? NAN : static_cast<float>(static_cast<double>(row[id]) - lse));
  }
}

__global__ void __launch_bounds__(kThreads)
    query_kernel(const float* logits, int vocab, const LogprobQuery* queries, int top_k, uint32_t* out) {
  const LogprobQuery q = queries[blockIdx.x];
  row_logprobs(logits + static_cast<int64_t>(q.row) * vocab, vocab, q.token, top_k,
               out + static_cast<int64_t>(blockIdx.x) * (1 + 2 * top_k));
}

__global__ void __launch_bounds__(kThreads)
    sampled_kernel(const float* logits, int vocab, const SampleRequest* args, const int32_t* ids, uint32_t* out) {
  const SampleRequest a = args[blockIdx.x];
  if (a.logprobs < 0) return;
  row_logprobs(logits + static_cast<int64_t>(a.row) * vocab, vocab, ids[blockIdx.x], a.logprobs,
               out + static_cast<int64_t>(blockIdx.x) * kSampledLogprobWords);
}

}  // namespace

void token_logprobs(const float* logits, int vocab, const LogprobQuery* queries, int n, int top_k, uint32_t* out,
                    cudaStream_t s) {
  if (n > 0) query_kernel<<<n, kThreads, 0, s>>>(logits, vocab, queries, top_k, out);
}

void sampled_logprobs(const float* logits, int vocab, const SampleRequest* requests, int n, const int32_t* ids,
                      uint32_t* out, cudaStream_t s) {
  if (n > 0) sampled_kernel<<<n, kThreads, 0, s>>>(logits, vocab, requests, ids, out);
}

}  // namespace photon::cuda

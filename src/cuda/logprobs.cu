// Log-probabilities of chosen tokens on the GPU, one block per query, so that only the answers cross to the host
// (a prompt of 512 tokens has 512 rows of logits: 262 MB for a vocabulary of 128,256, against 2 KB of logprobs).
// The values of the host's cpu::token_logprob: log-softmax = logit - (max + log(sum e^(logit - max))), the sum of
// each thread's f32 partial sums taken in f64; the top tokens are the first top_k of the row's order
// (cuda/token_order.cuh), gathered in a second pass over the row above a threshold found in the first, then ranked. For
// prompt tokens (queries from the host) and for the tokens the sampler just chose (their ids still on the device).
#include "cuda/kernels.hpp"
#include "cuda/token_order.cuh"

namespace photon::cuda {
namespace {

// Candidates for the top tokens a block gathers in one pass (16 KB of shared memory); more (long runs of tied
// logits at the threshold) and the block searches the order instead.
constexpr int kMaxCandidates = 2048;

// The first k tokens of the row's order (1 <= k <= kMaxTopLogprobs, k <= vocab) into keys/ids[0, k), best first, by
// the search over the order's keys (token_order.cuh): about a dozen passes over the row. Every thread calls it.
__device__ void search_top(const float* row, int vocab, int k, uint32_t* keys, int32_t* ids, int* count,
                           double (*sums)[kPoints]) {
  __syncthreads();  // every thread has read *count (the caller's candidate count) before it is reset below
  const Row r{row, vocab, 0.0f, 1.0f};
  SoloTeam team{sums, 0, vocab};
  const Cut cut = k < vocab ? find_cut<false>(r, Cut{0u, INT_MAX}, static_cast<double>(k), team) : Cut{0u, INT_MAX};
  if (threadIdx.x == 0) *count = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const uint32_t key = order_key(row[i]);
    if (!inside(key, i, cut)) continue;
    const int slot = atomicAdd(count, 1);
    if (slot < k) {
      keys[slot] = key;
      ids[slot] = i;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int a = 1; a < k; ++a) {  // insertion sort: key descending, id ascending
      const uint32_t key = keys[a];
      const int32_t id = ids[a];
      int b = a;
      for (; b > 0 && (keys[b - 1] < key || (keys[b - 1] == key && ids[b - 1] > id)); --b) {
        keys[b] = keys[b - 1];
        ids[b] = ids[b - 1];
      }
      keys[b] = key;
      ids[b] = id;
    }
  }
  __syncthreads();
}

// The log-softmax of `row` at `token` and its k most likely tokens into answer[0 .. 1 + 2 k) (the layout of
// token_logprobs). One block; contains barriers, so every thread of the block calls it.
//
// The row is read once for the normaliser and a threshold, once more for the top tokens: each thread keeps a running
// maximum and its sum of e^(logit - maximum) (rescaled when the maximum grows) and its largest order key. The k-th
// largest of the threads' largest keys is at most the row's k-th largest key, so the tokens at or above it hold the
// top k: usually a few more than k, gathered into shared memory and ranked there.
__device__ void row_logprobs(const float* row, int vocab, int32_t token, int top_k, uint32_t* answer) {
  __shared__ float scratch[32];
  __shared__ double sums[kWarps][kPoints];
  __shared__ uint32_t thread_keys[kThreads];
  __shared__ uint32_t candidate_keys[kMaxCandidates];
  __shared__ int32_t candidate_ids[kMaxCandidates];
  __shared__ uint32_t threshold;
  __shared__ int count;
  float m = -INFINITY, s = 0.0f;
  uint32_t best_key = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float x = row[i];
    best_key = max(best_key, order_key(x));
    if (x > m) {
      s = s * expf(m - x) + 1.0f;
      m = x;
    } else if (x != -INFINITY) {
      s += expf(x - m);
    }
  }
  const float max_logit = block_max(m, scratch);
  float part[kPoints] = {};
  part[0] = s == 0.0f ? 0.0f : s * expf(m - max_logit);  // NaN stays NaN
  double total[kPoints];
  block_sums(part, total, sums);
  // As the host: NaN when a logit is +inf or NaN, or every one is -inf.
  const double lse =
      max_logit == INFINITY || max_logit == -INFINITY ? NAN : static_cast<double>(max_logit) + log(total[0]);
  auto logprob = [&](int32_t id) { return __float_as_uint(static_cast<float>(static_cast<double>(row[id]) - lse)); };
  if (threadIdx.x == 0) answer[0] = logprob(token);
  const int k = top_k < vocab ? top_k : vocab;
  if (k == 0) return;

  thread_keys[threadIdx.x] = best_key;
  if (threadIdx.x == 0) {
    threshold = 0xffffffffu;
    count = 0;
  }
  __syncthreads();
  int greater = 0;  // threads whose largest key is above this one's
  for (int j = 0; j < kThreads; ++j) greater += thread_keys[j] > best_key ? 1 : 0;
  if (greater < k) atomicMin(&threshold, best_key);
  __syncthreads();
  const uint32_t t = threshold;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const uint32_t key = order_key(row[i]);
    if (key < t) continue;
    const int slot = atomicAdd(&count, 1);
    if (slot < kMaxCandidates) {
      candidate_keys[slot] = key;
      candidate_ids[slot] = i;
    }
  }
  __syncthreads();
  const int n = count;  // >= k
  if (n > kMaxCandidates) {
    search_top(row, vocab, k, candidate_keys, candidate_ids, &count, sums);
    for (int j = threadIdx.x; j < k; j += kThreads) {
      answer[1 + 2 * j] = static_cast<uint32_t>(candidate_ids[j]);
      answer[2 + 2 * j] = logprob(candidate_ids[j]);
    }
    return;
  }
  // A candidate's rank: the candidates before it in the order (key descending, id ascending).
  for (int c = threadIdx.x; c < n; c += kThreads) {
    const uint32_t key = candidate_keys[c];
    const int32_t id = candidate_ids[c];
    int rank = 0;
    for (int d = 0; d < n && rank < k; ++d) {
      const uint32_t other = candidate_keys[d];
      rank += other > key || (other == key && candidate_ids[d] < id) ? 1 : 0;
    }
    if (rank < k) {
      answer[1 + 2 * rank] = static_cast<uint32_t>(id);
      answer[2 + 2 * rank] = logprob(id);
    }
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

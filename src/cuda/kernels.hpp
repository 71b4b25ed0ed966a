// Launchers of the CUDA kernels, callable from host C++ (no CUDA types beyond cudaStream_t). Activations and the KV
// cache are bf16, passed as uint16_t bit patterns; accumulation is f32. All launches are asynchronous on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dummy_weights.hpp"
#include "core/paged_kv.hpp"
#include "core/sample_request.hpp"

namespace photon::cuda {

/// A group-wise int8 weight on the device (core/weight.hpp): values i8 [N, K], scales f32 [N, groups], one per
/// `group` consecutive columns.
struct Int8Weights {
  const int8_t* values;
  const float* scales;
  int groups;
  int group;
};

/// out[t] = table[id - first_id], zeros where that row is outside the table's `rows`; id = ids[t], or
/// sampled[-ids[t] - 1] for a negative ids[t] (a placeholder for an id an earlier kernel sampled).
void embed(const int32_t* ids, const int32_t* sampled, int num_tokens, const uint16_t* table, int rows, int hidden,
           int first_id, uint16_t* out, cudaStream_t s);
/// The same over an int8 table: each value times its group's scale, rounded to bf16.
void embed_int8(const int32_t* ids, const int32_t* sampled, int num_tokens, const Int8Weights& table, int rows,
                int hidden, int first_id, uint16_t* out, cudaStream_t s);
void rms_norm(const uint16_t* x, const float* w, int rows, int dim, float eps, uint16_t* out, cudaStream_t s);
void add_rms_norm(uint16_t* residual, const uint16_t* x, const float* w, int rows, int dim, float eps, uint16_t* out,
                  cudaStream_t s);
/// out [rows, inter] = silu(gate) * up, where gate_up [rows, 2 * inter] holds gate then up in each row.
void swiglu(const uint16_t* gate_up, int64_t rows, int inter, uint16_t* out, cudaStream_t s);
/// residual[i] = bf16(residual[i] + x[i]) for i < n.
void add(uint16_t* residual, const uint16_t* x, int64_t n, cudaStream_t s);
void gather_rows(const uint16_t* x, const int32_t* indices, int count, int dim, uint16_t* out, cudaStream_t s);
void rope_cos_sin(const int32_t* positions, int num_tokens, const float* inv_freq, int half, float* cos, float* sin,
                  cudaStream_t s);
/// Whether qkv_rope_cache_write handles this head dimension (<= 256).
bool qkv_rope_supported(int head_dim);
/// The fused projection's epilogue: qkv [T, (heads + 2 * kv.num_kv_heads) * hd] rows ld apart; optional per-head
/// RMSNorm of q and k (q_norm / k_norm f32 [hd], or null); RoPE of q and k with cos/sin [T, hd / 2]; q to q_out
/// [T, heads * hd], k and v to kv's cache at kv.slot_mapping (negative: skipped; the page tables are not read).
void qkv_rope_cache_write(const uint16_t* qkv, int64_t ld, const float* q_norm, const float* k_norm, float eps,
                          const float* cos, const float* sin, int num_tokens, int heads, const PagedKv& kv,
                          uint16_t* q_out, cudaStream_t s);
/// How many KV splits attention uses for this shape (1: none); a pure function of its arguments.
int attention_splits(int num_tokens, int heads, int kv_heads, int head_dim, int max_seq_len);
/// f32 workspace the split path needs for head dimensions up to max_head_dim (any split count it picks).
size_t attention_workspace_floats(int max_head_dim);
/// Causal GQA attention of q [T, heads * head_dim] over kv's sequences, for the batch rows listed in `tokens`
/// (num_tokens of them; kv.slot_mapping is not read). `workspace` holds attention_workspace_floats(...) floats when
/// splits > 1, zeroed once before its first use and used by nothing else (it keeps arrival counters from launch to
/// launch). max_seq_len (the longest context the launch may see, as given to attention_splits) only tunes the
/// kernel's pipelining and how its splits merge: any value gives the same results up to float rounding.
void paged_attention(const uint16_t* q, int heads, const PagedKv& kv, const int32_t* tokens, int num_tokens,
                     float scale, int splits, int max_seq_len, float* workspace, uint16_t* out, cudaStream_t s);

/// What a GEMV does around its product, so that a decode step's norms and residual adds cost no launches:
/// - norm (f32 [K], with eps): the activation rows are RMS-normalised first, x[m] / rms(x[m]) * norm, each value
///   rounded to bf16 exactly as rms_norm stores it. Only where the grid fits in one wave of resident blocks and
///   K <= 8192: every block pays the prologue's read of the rows and its reduction, which a grid of several waves
///   pays once a wave — more than the separate norm kernel costs (docs/performance.md, 2026-12-03, late night);
/// - accumulate: the product, rounded to bf16, is added to the bf16 out in place, out = bf16(out + product), as
///   add_rms_norm adds (bf16 out only; not with SwiGLU).
struct GemvFusion {
  const float* norm = nullptr;
  float eps = 0.0f;
  bool accumulate = false;
};

/// Whether gemv handles this shape (1 to 8 activation rows, K and the row stride multiples of 8).
bool gemv_supported(int m, int k, int64_t ldx);
/// out[m, n] = x[m, :] . w[n, :] for m < M <= 8; x rows are ldx apart; out is f32 or bf16 [M, N]. Returns false,
/// launching nothing, when fusion.norm is set and this shape cannot take the norm (see GemvFusion): the caller
/// normalises separately. True otherwise.
bool gemv(const uint16_t* x, int m, int64_t ldx, const uint16_t* w, int n, int k, void* out, bool out_f32,
          cudaStream_t s, const GemvFusion& fusion = {});
/// out[m, j] = silu(x[m] . w[j]) * (x[m] . w[inter + j]) for the stacked [gate; up] matrix w [2 * inter, K];
/// out bf16 [M, inter]. Same shapes and return as gemv.
bool gemv_swiglu(const uint16_t* x, int m, int64_t ldx, const uint16_t* w, int inter, int k, uint16_t* out,
                 cudaStream_t s, const GemvFusion& fusion = {});

/// Whether gemv_int8 handles this shape (1 to 8 rows, K a multiple of 16, the group a multiple of 16).
bool gemv_int8_supported(int m, int k, int64_t ldx, int group);
/// gemv and gemv_swiglu over int8 weights (W8A16): bf16 activations, f32 accumulation, the group's scale applied to
/// each 16-weight partial sum. For one activation row the partial sums are exact integer sums
/// against the row quantised to int16 per 16 activations (relative error <= 1 / 65,534 of each 16's largest value,
/// far below bf16's rounding of the result). Same return as gemv.
bool gemv_int8(const uint16_t* x, int m, int64_t ldx, const Int8Weights& w, int n, int k, void* out, bool out_f32,
               cudaStream_t s, const GemvFusion& fusion = {});
bool gemv_swiglu_int8(const uint16_t* x, int m, int64_t ldx, const Int8Weights& w, int inter, int k, uint16_t* out,
                      cudaStream_t s, const GemvFusion& fusion = {});
/// Whether w8a16_mma handles this shape: 2 to 16 rows, K and the group multiples of 64, the row stride of 8. (One
/// row is gemv_int8's: its integer dot products stream every matrix faster; docs/performance.md, 2026-12-04.)
bool w8a16_mma_supported(int m, int k, int64_t ldx, int group);
/// gemv_int8 and gemv_swiglu_int8 on the tensor cores (w8a16_mma.cu): the same sums (each 64-column step's f32
/// partial scaled by its group's scale) for up to 16 activation rows, at a cost per weight that does not grow with M.
void w8a16_mma(const uint16_t* x, int m, int64_t ldx, const Int8Weights& w, int n, int k, void* out, bool out_f32,
               cudaStream_t s);
void w8a16_mma_swiglu(const uint16_t* x, int m, int64_t ldx, const Int8Weights& w, int inter, int k, uint16_t* out,
                      cudaStream_t s);
/// Whether this process's GPU runs w8a16_gemm (compute capability 9.0 and a build for sm_90a).
bool w8a16_gemm_available();
/// Whether w8a16_gemm handles this shape: available, N a multiple of 8, K of 64, the group of 32, x 16-byte aligned
/// with a row stride that is a multiple of 8.
bool w8a16_gemm_supported(int m, int n, int k, int64_t ldx, const void* x, int group);
/// How w8a16_gemm cuts its work: activation rows a block (64, 128 or 256; 0: w8a16_gemm_plan's choice) and the
/// blocks of a thread block cluster that split K between them (1 to 8).
struct W8a16GemmPlan {
  int token_tile = 0;
  int splits = 1;
};
/// The plan w8a16_gemm takes by default for M activation rows, N weight rows and K columns.
W8a16GemmPlan w8a16_gemm_plan(int m, int n, int k);
/// Whether w8a16_gemm is the faster int8 path than widening + cuBLASLt for M activation rows, N weight rows and K
/// columns (measured rule).
bool w8a16_gemm_pays(int64_t m, int64_t n, int64_t k);
/// out[m, n] = x[m, :] . bf16(w[n, :] * scale) for any M (w8a16_gemm.cu, Hopper's wgmma): the widening kernel's
/// bf16 weights, f32 accumulation, out f32 or bf16 [M, N] (rows N apart), without widening through memory.
/// `plan` overrides the default cut (benchmarks and tests). Returns false, with nothing run, where the shape or the
/// plan is not supported, a tensor map cannot be made or the device refuses the launch.
bool w8a16_gemm(const uint16_t* x, int m, int64_t ldx, const Int8Weights& w, int n, int k, void* out, bool out_f32,
                cudaStream_t s, W8a16GemmPlan plan = {});
/// Symmetric group-wise int8 of a bf16 weight w [n, k]: the same values as the CPU's cpu::quantize_int8 (scale =
/// max |w| / 127 per group, round-half-even of w / scale).
void quantize_int8(const uint16_t* w, int64_t n, int64_t k, int group, int8_t* values, float* scales, cudaStream_t s);
/// out bf16 [n, k] = values * scale, each product rounded to bf16 (for the tensor-core GEMM of large batches).
void dequantize_int8(const Int8Weights& w, int64_t n, int64_t k, uint16_t* out, cudaStream_t s);

/// Dummy weights (core/dummy_weights.hpp) into out, f32 or bf16 [f.rows, f.cols].
void fill_dummy(const DummyFill& f, void* out, bool bf16, cudaStream_t s);

/// Whether prefill_attention handles this head dimension (64 or 128).
bool prefill_attention_supported(int head_dim);
/// Causal attention for the prompt chunks of kv's sequences listed in `seqs` on tensor cores (FlashAttention-2
/// style tiles of 128 queries x 64 keys). `max_query_len` bounds those chunks.
void prefill_attention(const uint16_t* q, int heads, const PagedKv& kv, const int32_t* seqs, int num_seqs,
                       int max_query_len, float scale, uint16_t* out, cudaStream_t s);

/// One token per row: argmax when temperature is 0, else Gumbel-max over logits[row] / temperature among the top_k
/// best tokens (0: all), within them the smallest set whose probability reaches top_p, and within those the tokens
/// whose probability is at least min_p times the top one's (adjustments first: adjust_logits). `requests` [n] on the
/// device.
/// any_top_p_alone: whether some request is top_p_alone (core/sample_request.hpp) — those take a faster path
/// (one launch more).
void sample_rows(const float* logits, int vocab, const SampleRequest* requests, int n, bool any_top_p_alone,
                 int32_t* out_ids, cudaStream_t s);
/// For each of the n queries (device memory), the log-softmax of its row of logits [rows, vocab] at its token and its
/// row's top_k (0 to kMaxTopLogprobs) most likely tokens, best first, ties by the lower id — cpu::token_logprob's
/// values up to the order of the sum. out [n, 1 + 2 * top_k] 32-bit words: the logprob (f32), then top_k pairs of
/// id (i32; -1 past the vocabulary) and logprob (f32).
void token_logprobs(const float* logits, int vocab, const LogprobQuery* queries, int n, int top_k, uint32_t* out,
                    cudaStream_t s);
/// 32-bit words of one request's answer in sampled_logprobs' output: room for the most top tokens.
constexpr int kSampledLogprobWords = 1 + 2 * kMaxTopLogprobs;
/// token_logprobs for each of the n requests with logprobs >= 0, of its row at the token sample_rows chose for it
/// (ids [n], device) with its `logprobs` top tokens; out [n, kSampledLogprobWords] (the others' entries untouched).
void sampled_logprobs(const float* logits, int vocab, const SampleRequest* requests, int n, const int32_t* ids,
                      uint32_t* out, cudaStream_t s);
/// For each of the n requests with adjustments (device memory), in place on its row: each listed token's bias, its
/// repetition penalty (logit / p when positive, else * p) when in context, then presence + frequency * output_count
/// subtracted where the output holds it, every operation rounded on its own as cpu::adjust_logits does. Rows with
/// adjustments must be distinct. For requests with logprobs >= 0, the logits replaced are kept in saved[begin + i]
/// (one float per entry of `entries`), for restore_logits.
void adjust_logits(float* logits, int vocab, const SampleRequest* requests, int n, const LogitAdjustment* entries,
                   float* saved, cudaStream_t s);
/// Undoes adjust_logits on the rows of the requests with logprobs >= 0, from what it kept in `saved`.
void restore_logits(float* logits, int vocab, const SampleRequest* requests, int n, const LogitAdjustment* entries,
                    const float* saved, cudaStream_t s);

/// Where the one-shot all-reduce between the GPUs of one process finds every rank's workspace: base[r] is rank r's
/// peer_all_reduce_workspace_bytes(size) bytes of device memory on its own GPU, zeroed before first use, readable and
/// writable from every other rank's GPU (peer access enabled).
struct PeerAllReduceBuffers {
  static constexpr int kMaxRanks = 8;
  void* base[kMaxRanks];
  int rank;
  int size;
};
size_t peer_all_reduce_workspace_bytes(int size);
/// Whether peer_all_reduce takes this message: 16-byte aligned, a multiple of 16 bytes, at most 1 MiB.
bool peer_all_reduce_fits(const void* x, size_t bytes);
/// x (bf16, or f32 when `f32`) = the sum over the ranks of their x, in place; every rank gets the same bits. Every
/// rank must issue the same calls in the same order (as for NCCL); a rank that never arrives stops the kernel with a
/// device error after two minutes instead of hanging.
void peer_all_reduce(void* x, size_t bytes, bool f32, const PeerAllReduceBuffers& buffers, cudaStream_t s);
/// Whether peer_all_reduce_add_rms_norm takes rows x dim (at most 64 rows, dim a multiple of 8 up to 8192).
bool peer_all_reduce_add_rms_norm_fits(int rows, int dim);
/// The row-parallel projection's epilogue in one kernel: residual = bf16(residual + bf16(sum over ranks of x)), then
/// out = rms_norm(residual) * w — what peer_all_reduce followed by add_rms_norm computes, x left unchanged. All
/// pointers 16-byte aligned, bf16 [rows, dim] (w f32 [dim]); the same rules for calls as peer_all_reduce.
void peer_all_reduce_add_rms_norm(const uint16_t* x, int rows, int dim, uint16_t* residual, const float* w, float eps,
                                  uint16_t* out, const PeerAllReduceBuffers& buffers, cudaStream_t s);

}  // namespace photon::cuda

// CPU kernels on raw pointers: f32 activations, f32 accumulation, weights in f32, f16 or bf16. OpenMP spreads the
// work over cores; the matmuls take AVX-512 or AVX2 paths where the CPU has them (cpu/isa.hpp). CpuBackend adapts these
// to the Backend interface; tests call them directly against double-precision references.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <photon/sampling.hpp>

#include "core/backend.hpp"
#include "core/dtype.hpp"
#include "core/dummy_weights.hpp"

namespace photon::cpu {

/// Widens n elements of `src` (f32, f16 or bf16) to f32.
void to_f32(const void* src, DType dtype, int64_t n, float* dst);
/// Narrows n f32 values to `dtype` (f32, f16 or bf16), rounding to nearest even.
void from_f32(const float* src, int64_t n, DType dtype, void* dst);

/// Fills dst (`f.rows` x `f.cols` of `dtype`: f32, f16 or bf16, contiguous) with the dummy weights of
/// core/dummy_weights.hpp, bit for bit what dummy_value gives (rounded to `dtype` as from_f32 rounds).
void fill_dummy(const DummyFill& f, DType dtype, void* dst);

/// out[i, j] = sum_k x[i, k] * w[j, k].  x f32 [m, k] (rows ldx apart); w [n, k] contiguous; out f32 [m, n].
void matmul(const float* x, int64_t m, int64_t k, int64_t ldx, const void* w, DType w_dtype, int64_t n, float* out);
/// The same for a group-wise int8 weight (core/weight.hpp): w[j, k] = values[j, k] * scales[j, k / group], f32
/// accumulation (the sums of the dequantized f32 weight's matmul up to rounding). values i8 [n, k]; scales f32
/// [n, ceil(k / group)]; group a multiple of 16, or k.
void matmul_int8(const float* x, int64_t m, int64_t k, int64_t ldx, const int8_t* values, const float* scales,
                 int64_t group, int64_t n, float* out);
/// Symmetric group-wise int8 of w [n, k] (f32, f16 or bf16): per row and group of `group` columns, scale = max |w|
/// / 127 (rounded to `scale_dtype` when that is not f32, as a checkpoint stores it) and q = round-half-even(w /
/// scale) within [-127, 127], or 0 with scale 0 for an all-zero group. values [n, k]; scales f32 [n, ceil(k /
/// group)].
void quantize_int8(const void* w, DType dtype, int64_t n, int64_t k, int64_t group, int8_t* values, float* scales,
                   DType scale_dtype = DType::kF32);

/// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, rows of `dim`. out may alias x.
void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out);
/// residual += x, then out = rms_norm(residual).
void add_rms_norm(float* residual, const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out);
/// SwiGLU of rows whose first `inter` columns are the gate and next `inter` the up projection: out[r, i] =
/// silu(gate_up[r, i]) * gate_up[r, inter + i]. Rows of gate_up are `ld` floats apart, rows of out `ldo`.
void swiglu(const float* gate_up, int64_t rows, int64_t inter, int64_t ld, float* out, int64_t ldo);
/// out[t] = table[id - first_id] widened to f32, or zeros where that is outside the table's `rows` rows;
/// id = ids[t], or sampled[-ids[t] - 1] for a negative ids[t] (a placeholder for an id sampled earlier; sampled may
/// then not be null). An int8 table (table_dtype i8) has f32 `scales` [rows, ceil(hidden / group)].
void embed(const int32_t* ids, int64_t num_tokens, const int32_t* sampled, const void* table, DType table_dtype,
           int64_t rows, int64_t hidden, int64_t first_id, float* out, const float* scales = nullptr,
           int64_t group = 0);
/// out[i] = x[indices[i]] for rows of `dim`.
void gather_rows(const float* x, const int32_t* indices, int64_t count, int64_t dim, float* out);

/// cos/sin [T, half] of positions[t] * inv_freq[i], with the angle rounded to f32 as Hugging Face computes it.
void rope_cos_sin(const int32_t* positions, int64_t num_tokens, const float* inv_freq, int64_t half, float* cos,
                  float* sin);
/// Rotate-half RoPE in place on `heads` heads of `head_dim` per token row (row stride ld).
void rope(float* x, int64_t num_tokens, int64_t heads, int64_t head_dim, int64_t ld, const float* cos,
          const float* sin);

/// Writes k, v [T, kv_heads * head_dim] (token rows ld apart) to the slots of kv.slot_mapping (f32 or bf16 cache,
/// kv.element_bytes 4 or 2). Negative slots are skipped.
void cache_write(const float* k, const float* v, int64_t ld, int64_t num_tokens, const PagedKv& kv);

/// Causal paged attention of q [T, heads * head_dim] over kv's sequences (see Backend::attention); out likewise.
void paged_attention(const float* q, int64_t heads, const PagedKv& kv, float scale, float* out);

/// sample_row's buffers, grown to the vocabulary on first use and reused; one per thread.
struct SampleScratch {
  std::vector<int32_t> ids;
  std::vector<uint16_t> keys;
};
/// The token `p` selects from `logits` (p.row is not used): argmax when p.temperature is 0 (lowest id on ties),
/// else the Gumbel-max draw keyed by (p.seed, p.index) among the top_k best tokens, within those the smallest set
/// whose probability mass reaches top_p, and within those the tokens whose probability is at least min_p times the
/// top one's (transformers' order of logits warpers). The same selection as the GPU's sample kernel. Top-p over a
/// large vocabulary sorts only the part of the order its probability buckets show it needs.
int32_t sample_row(std::span<const float> logits, const SampleRequest& p, SampleScratch& scratch);
/// log(sum_i e^logits[i]), the log-softmax's normaliser, in double: e^(logit - max) to within 2 ulp of float (a loop
/// that vectorises), summed in double, so a log-probability from it is as exact as its f32 result can hold. NaN when
/// a logit is NaN or +inf, or every one is -inf (as the direct formula gives). Empty logits are not allowed.
double log_sum_exp(std::span<const float> logits);
/// log_softmax(logits)[token] (logit - log_sum_exp) and the top `k` (k may be 0; at most the vocabulary) tokens with
/// theirs, best first, ties by the lower id.
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int k);
/// A request's adjustments on its row of logits, in place, over its entries (LogitAdjustment: the bias, the
/// repetition penalty for tokens in context, then presence + frequency * count for tokens the output holds); each
/// product and sum rounded to f32 on its own (no fused multiply-add), as the GPU kernel does. When `saved` is not
/// empty (entries.size() floats) the logits before the adjustments are written there, for restore_logits.
void adjust_logits(std::span<float> logits, const SampleRequest& p, std::span<const LogitAdjustment> entries,
                   std::span<float> saved = {});
/// Undoes adjust_logits: writes `saved` (from adjust_logits over the same entries) back to the entries' tokens.
void restore_logits(std::span<float> logits, std::span<const LogitAdjustment> entries, std::span<const float> saved);

}  // namespace photon::cpu

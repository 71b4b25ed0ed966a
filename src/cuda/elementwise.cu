// Embedding lookup, SwiGLU, the residual add and row gathers.
#include <algorithm>

#include "cuda/common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/launch.cuh"

namespace photon::cuda {
namespace {

// A bf16 table row as it is, or an int8 one times its group scales.
struct Bf16Rows {
  const uint16_t* table;
  __device__ uint16_t at(int64_t r, int hidden, int i) const { return table[r * hidden + i]; }
};
struct Int8Rows {
  Int8Weights w;
  __device__ uint16_t at(int64_t r, int hidden, int i) const {
    return f2bf(static_cast<float>(w.values[r * hidden + i]) * w.scales[r * w.groups + i / w.group]);
  }
};

template <typename Rows>
__global__ void embed_kernel(const int32_t* ids, const int32_t* sampled, Rows table, int rows, int hidden, int first_id,
                             uint16_t* out) {
  pdl_begin();
  const int t = blockIdx.x;
  const int id = ids[t];
  const int r = (id >= 0 ? id : sampled[-id - 1]) - first_id;
  uint16_t* dst = out + static_cast<int64_t>(t) * hidden;
  if (r < 0 || r >= rows) {  // another rank's slice of the vocabulary
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = 0;
    return;
  }
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = table.at(r, hidden, i);
}

// Rows whose length is a multiple of 8 (every model's hidden size) take the vector kernel: each thread keeps up to
// kMaxVecs 16-byte vectors of its row in registers, issues the loads of x, the residual and the weight together, and
// writes once. Other lengths take the scalar kernels.
// out[r, j] = silu(gate_up[r, j]) * gate_up[r, inter + j], eight columns per thread (inter % 8 == 0) or one.
template <int kVec>
__global__ void swiglu_kernel(const uint16_t* gate_up, int64_t rows, int inter, uint16_t* out) {
  pdl_begin();
  const int cols = inter / kVec;
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = (i % cols) * kVec;
    const uint16_t* g = gate_up + r * 2 * inter + c;
    if constexpr (kVec == 8) {
      float gv[8], uv[8], o[8];
      unpack8(*reinterpret_cast<const uint4*>(g), gv);
      unpack8(*reinterpret_cast<const uint4*>(g + inter), uv);
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = gv[e] / (1.0f + __expf(-gv[e])) * uv[e];
      *reinterpret_cast<uint4*>(out + r * inter + c) = pack8(o);
    } else {
      const float gv = bf2f(g[0]);
      out[r * inter + c] = f2bf(gv / (1.0f + __expf(-gv)) * bf2f(g[inter]));
    }
  }
}

__global__ void gather_rows_kernel(const uint16_t* x, const int32_t* indices, int dim, uint16_t* out) {
  pdl_begin();
  const uint16_t* src = x + static_cast<int64_t>(indices[blockIdx.x]) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) out[static_cast<int64_t>(blockIdx.x) * dim + i] = src[i];
}

__global__ void add_kernel(uint16_t* residual, const uint16_t* x, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    residual[i] = f2bf(bf2f(residual[i]) + bf2f(x[i]));
  }
}

int threads_for(int dim) { return dim >= 1024 ? 256 : (dim >= 256 ? 128 : 64); }

}  // namespace

void embed(const int32_t* ids, const int32_t* sampled, int num_tokens, const uint16_t* table, int rows, int hidden,
           int first_id, uint16_t* out, cudaStream_t s) {
  if (num_tokens > 0)
    launch(embed_kernel<Bf16Rows>, num_tokens, threads_for(hidden), 0, s, ids, sampled, Bf16Rows{table}, rows, hidden,
           first_id, out);
}

void embed_int8(const int32_t* ids, const int32_t* sampled, int num_tokens, const Int8Weights& table, int rows,
                int hidden, int first_id, uint16_t* out, cudaStream_t s) {
  if (num_tokens > 0)
    launch(embed_kernel<Int8Rows>, num_tokens, threads_for(hidden), 0, s, ids, sampled, Int8Rows{table}, rows, hidden,
           first_id, out);
}

void swiglu(const uint16_t* gate_up, int64_t rows, int inter, uint16_t* out, cudaStream_t s) {
  const int vec = inter % 8 == 0 ? 8 : 1;
  const int64_t n = rows * inter / vec;
  if (n <= 0) return;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535));
  if (vec == 8) {
    launch(swiglu_kernel<8>, blocks, 256, 0, s, gate_up, rows, inter, out);
  } else {
    launch(swiglu_kernel<1>, blocks, 256, 0, s, gate_up, rows, inter, out);
  }
}

void add(uint16_t* residual, const uint16_t* x, int64_t n, cudaStream_t s) {
  if (n > 0)
    launch(add_kernel, static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096)), 256, 0, s, residual, x, n);
}

void gather_rows(const uint16_t* x, const int32_t* indices, int count, int dim, uint16_t* out, cudaStream_t s) {
  if (count > 0) launch(gather_rows_kernel, count, threads_for(dim), 0, s, x, indices, dim, out);
}

}  // namespace photon::cuda

// The projection matrices of the models photon bench runs, as the GEMM benchmarks time them: out[m, n] = x[m, k] .
// w[n, k]^T with n output columns (weight rows) and k input features.
#pragma once

namespace photon::bench {

struct ProjectionShape {
  const char* model;
  const char* matrix;
  int n;  // output columns (weight rows)
  int k;
};

inline constexpr ProjectionShape kProjectionShapes[] = {
    {"llama-3.2-1b", "qkv", 3072, 2048},       {"llama-3.2-1b", "o", 2048, 2048},
    {"llama-3.2-1b", "gate_up", 16384, 2048},  {"llama-3.2-1b", "down", 2048, 8192},
    {"llama-3.2-1b", "lm_head", 128256, 2048}, {"qwen3-0.6b", "qkv", 4096, 1024},
    {"qwen3-0.6b", "o", 1024, 2048},           {"qwen3-0.6b", "gate_up", 6144, 1024},
    {"qwen3-0.6b", "down", 1024, 3072},        {"qwen3-0.6b", "lm_head", 151936, 1024},
    {"llama-3.1-8b", "qkv", 6144, 4096},       {"llama-3.1-8b", "o", 4096, 4096},
    {"llama-3.1-8b", "gate_up", 28672, 4096},  {"llama-3.1-8b", "down", 4096, 14336},
};

}  // namespace photon::bench

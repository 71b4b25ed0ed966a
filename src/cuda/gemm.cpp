#include "cuda/gemm.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "core/logging.hpp"
#include "cuda/cuda_check.hpp"

namespace photon::cuda {
namespace {

constexpr float kMargin = 0.97f;  // a timed algorithm replaces the heuristic's first only when this much faster

}  // namespace

bool gemm_tuning_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("PHOTON_GEMM_TUNING");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

struct Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;  // the heuristic's, best guess first
  int queried = 0;                          // how many were asked for
  bool resolved = false;                    // `chosen` holds the bucket's timed choice (chosen())
  cublasLtMatmulAlgo_t chosen{};
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

Gemm::Gemm() = default;

Gemm::~Gemm() {
  plans_.clear();  // before the handle they were made with
  if (handle_) cublasLtDestroy(handle_);
}

Status Gemm::init(void* workspace) {
  workspace_ = workspace;
  PHOTON_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle_));
  return Status::ok();
}

int64_t Gemm::bucket(int64_t m) {
  if (m <= kHeuristicRows) return 0;  // never timed
  int64_t b = 2 * kHeuristicRows;
  while (b < m) b *= 2;
  return b;
}

// cuBLASLt is column-major: out^T (n x m) = W (k x n, transposed) * x^T (k x m).
Result<Gemm::Plan*> Gemm::plan(int64_t m, int64_t k, int64_t ldx, int64_t n, bool out_f32, int algorithms) {
  const auto key = std::make_tuple(m, n, k, ldx, out_f32);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    const cudaDataType_t out_type = out_f32 ? CUDA_R_32F : CUDA_R_16BF;
    auto plan = std::make_unique<Plan>();
    PHOTON_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    PHOTON_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    PHOTON_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    PHOTON_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, k, n, k));
    PHOTON_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, k, m, ldx));
    PHOTON_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->c, out_type, n, m, n));
    it = plans_.emplace(key, std::move(plan)).first;
  }
  Plan& p = *it->second;
  if (p.queried < algorithms) {
    cublasLtMatmulPreference_t pref = nullptr;
    PHOTON_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    cublasLtMatmulHeuristicResult_t results[kMaxAlgorithms]{};
    int found = 0;
    const cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, algorithms, results, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
      return Status(StatusCode::kInternal,
                    fmt::format("cuBLASLt has no algorithm for a {}x{}x{} bf16 matmul", m, n, k));
    }
    p.algos.clear();
    for (int i = 0; i < found; ++i) p.algos.push_back(results[i].algo);
    p.queried = algorithms;
  }
  return &p;
}

Status Gemm::launch(Plan& p, const cublasLtMatmulAlgo_t& algo, const void* x, const void* w, void* out,
                    cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  PHOTON_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, out, p.c, out, p.c, &algo,
                                               workspace_, kWorkspaceBytes, stream));
  return Status::ok();
}

const cublasLtMatmulAlgo_t& Gemm::chosen(Plan& p, int64_t m, int64_t n, int64_t k, bool out_f32) {
  if (p.resolved) return p.chosen;
  const auto shape = choices_.find({n, k, out_f32});
  if (shape == choices_.end()) return p.algos.front();
  const auto choice = shape->second.find(bucket(m));
  if (choice == shape->second.end()) return p.algos.front();
  // The bucket's algorithm was timed at another row count: cuBLASLt says whether it serves this one.
  cublasLtMatmulHeuristicResult_t check{};
  const bool serves = cublasLtMatmulAlgoCheck(handle_, p.op, p.a, p.b, p.c, p.c, &choice->second.algo, &check) ==
                          CUBLAS_STATUS_SUCCESS &&
                      check.workspaceSize <= kWorkspaceBytes;
  p.chosen = serves ? choice->second.algo : p.algos.front();
  p.resolved = true;
  return p.chosen;
}

Result<Gemm::Choice> Gemm::time_bucket(const void* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n,
                                       void* out, bool out_f32, cudaStream_t stream) {
  PHOTON_ASSIGN_OR_RETURN(Plan * p, plan(m, k, ldx, n, out_f32, kMaxAlgorithms));
  const std::vector<cublasLtMatmulAlgo_t> algos = p->algos;
  Choice c;
  c.algo = algos.front();
  c.timed = static_cast<int>(algos.size());
  float first_us = std::numeric_limits<float>::infinity(), best_us = first_us;
  for (size_t i = 0; i < algos.size(); ++i) {
    PHOTON_ASSIGN_OR_RETURN(const float us, timer_.least_us(stream, nullptr, [&]() -> Result<bool> {
      return launch(*p, algos[i], x, w, out, stream).is_ok();
    }));
    if (us < 0.0f) continue;  // an algorithm that declines these operands
    if (i == 0) {
      first_us = best_us = us;
    } else if (us < best_us && us < kMargin * first_us) {
      best_us = us;
      c.algo = algos[i];
      c.rank = static_cast<int>(i);
    }
  }
  c.first_us = first_us;
  c.best_us = best_us;
  choices_[{n, k, out_f32}][bucket(m)] = c;
  for (auto& [key, plan] : plans_) {
    if (std::get<1>(key) == n && std::get<2>(key) == k && std::get<4>(key) == out_f32) plan->resolved = false;
  }
  return c;
}

Status Gemm::run(const void* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, void* out, bool out_f32,
                 cudaStream_t stream, int rank) {
  if (rank != kChosen) {
    PHOTON_ASSIGN_OR_RETURN(Plan * p, plan(m, k, ldx, n, out_f32, kMaxAlgorithms));
    if (rank < 0 || rank >= static_cast<int>(p->algos.size())) {
      return Status(StatusCode::kInvalidArgument, fmt::format("cuBLASLt offers {} algorithms for a {}x{}x{} matmul, "
                                                              "not a rank {}",
                                                              p->algos.size(), m, n, k, rank));
    }
    return launch(*p, p->algos[static_cast<size_t>(rank)], x, w, out, stream);
  }
  if (m > kHeuristicRows && gemm_tuning_enabled()) {
    const auto shape = choices_.find({n, k, out_f32});
    if (shape == choices_.end() || shape->second.count(bucket(m)) == 0) {
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      PHOTON_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
      if (capture == cudaStreamCaptureStatusNone) {
        PHOTON_ASSIGN_OR_RETURN(const Choice c, time_bucket(x, m, k, ldx, w, n, out, out_f32, stream));
        log::debug(
            "cuBLASLt algorithms for {} rows of {} x {} ({} out; rows up to {}): rank {} of {} kept, {:.1f} us "
            "(the first: {:.1f} us)",
            m, n, k, out_f32 ? "f32" : "bf16", bucket(m), c.rank, c.timed, c.best_us, c.first_us);
      }
    }
  }
  PHOTON_ASSIGN_OR_RETURN(Plan * p, plan(m, k, ldx, n, out_f32, 1));
  return launch(*p, chosen(*p, m, n, k, out_f32), x, w, out, stream);
}

Result<int> Gemm::algorithm_count(int64_t m, int64_t k, int64_t ldx, int64_t n, bool out_f32) {
  PHOTON_ASSIGN_OR_RETURN(Plan * p, plan(m, k, ldx, n, out_f32, kMaxAlgorithms));
  return static_cast<int>(p->algos.size());
}

namespace {

// The largest row count time_prompt_rows times for products of up to max_rows rows.
int64_t prepared_rows(int64_t max_rows) { return std::min(max_rows, Gemm::kMaxPreparedRows); }

}  // namespace

size_t Gemm::prompt_scratch_bytes(int64_t n, int64_t k, bool out_f32, int64_t max_rows) {
  const auto rows = static_cast<size_t>(prepared_rows(max_rows));
  return rows * static_cast<size_t>(k) * 2 + rows * static_cast<size_t>(n) * (out_f32 ? 4 : 2);
}

std::vector<int64_t> Gemm::untimed_prompt_buckets(int64_t n, int64_t k, bool out_f32, int64_t max_rows) const {
  std::vector<int64_t> untimed;
  if (!gemm_tuning_enabled() || max_rows <= kHeuristicRows) return untimed;
  const auto shape = choices_.find({n, k, out_f32});
  for (int64_t b = bucket(kHeuristicRows + 1); b <= bucket(prepared_rows(max_rows)); b *= 2) {
    if (shape == choices_.end() || shape->second.count(b) == 0) untimed.push_back(b);
  }
  return untimed;
}

bool Gemm::wants_prompt_rows(int64_t n, int64_t k, bool out_f32, int64_t max_rows) const {
  return !untimed_prompt_buckets(n, k, out_f32, max_rows).empty();
}

Status Gemm::time_prompt_rows(const void* w, int64_t n, int64_t k, bool out_f32, int64_t max_rows, void* scratch,
                              cudaStream_t s) {
  const std::vector<int64_t> untimed = untimed_prompt_buckets(n, k, out_f32, max_rows);
  if (untimed.empty()) return Status::ok();
  const int64_t top = prepared_rows(max_rows);
  auto* x = static_cast<char*>(scratch);
  char* out = x + static_cast<size_t>(top) * static_cast<size_t>(k) * 2;
  // Activations of a typical magnitude (bf16 0x3c3c, about 0.0115), not zeros, which tensor cores multiply faster.
  PHOTON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(x, 0x3c, static_cast<size_t>(top) * static_cast<size_t>(k) * 2, s));
  for (const int64_t b : untimed) {
    PHOTON_ASSIGN_OR_RETURN(const Choice c, time_bucket(x, std::min(b, top), k, k, w, n, out, out_f32, s));
    (void)c;
  }
  return Status::ok();
}

std::string Gemm::describe(int64_t n, int64_t k, bool out_f32) const {
  const auto shape = choices_.find({n, k, out_f32});
  if (shape == choices_.end()) return {};
  std::string text;
  for (const auto& [rows, c] : shape->second) {
    text += fmt::format("{}{}: rank {} of {}, {:.1f} us (first {:.1f})", text.empty() ? "" : ", ", rows, c.rank,
                        c.timed, c.best_us, c.first_us);
  }
  return text;
}

}  // namespace photon::cuda

#include "cuda/gemm.hpp"

#include <fmt/format.h>

#include "cuda/cuda_check.hpp"

namespace photon::cuda {

struct Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;  // the heuristic's, best guess first
  int queried = 0;                          // how many were asked for
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

Status Gemm::run(const void* x, int64_t m, int64_t k, int64_t ldx, const void* w, int64_t n, void* out, bool out_f32,
                 cudaStream_t stream, int rank) {
  PHOTON_ASSIGN_OR_RETURN(Plan * p, plan(m, k, ldx, n, out_f32, rank == 0 ? 1 : kMaxAlgorithms));
  if (rank < 0 || rank >= static_cast<int>(p->algos.size())) {
    return Status(StatusCode::kInvalidArgument, fmt::format("cuBLASLt offers {} algorithms for a {}x{}x{} matmul, "
                                                            "not a rank {}",
                                                            p->algos.size(), m, n, k, rank));
  }
  const float alpha = 1.0f, beta = 0.0f;
  PHOTON_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(handle_, p->op, &alpha, w, p->a, x, p->b, &beta, out, p->c, out, p->c,
                                               &p->algos[static_cast<size_t>(rank)], workspace_, kWorkspaceBytes,
                                               stream));
  return Status::ok();
}

Result<int> Gemm::algorithm_count(int64_t m, int64_t k, int64_t ldx, int64_t n, bool out_f32) {
  PHOTON_ASSIGN_OR_RETURN(Plan * p, plan(m, k, ldx, n, out_f32, kMaxAlgorithms));
  return static_cast<int>(p->algos.size());
}

}  // namespace photon::cuda

#include "cuda/kernel_trace.hpp"

#ifdef PHOTON_KERNEL_TRACE

#include <cuda_runtime.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "cuda/cuda_check.hpp"

namespace photon::cuda::trace {
namespace {

std::vector<void (*)(Slot*)>& binders() {
  static std::vector<void (*)(Slot*)> list;
  return list;
}
Slot* slots = nullptr;
constexpr size_t kSlots = static_cast<size_t>(kGrids) * kBlocks;

}  // namespace

void register_binder(void (*bind)(Slot*)) { binders().push_back(bind); }

Status start() {
  if (slots != nullptr) return Status::ok();
  PHOTON_CUDA_RETURN_IF_ERROR(cudaMalloc(&slots, kSlots * sizeof(Slot)));
  PHOTON_CUDA_RETURN_IF_ERROR(cudaMemset(slots, 0, kSlots * sizeof(Slot)));
  for (auto bind : binders()) bind(slots);
  PHOTON_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return Status::ok();
}

Status finish(const std::string& path) {
  if (slots == nullptr) return Status::ok();
  std::vector<Slot> host(kSlots);
  PHOTON_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  PHOTON_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.data(), slots, kSlots * sizeof(Slot), cudaMemcpyDeviceToHost));
  for (auto bind : binders()) bind(nullptr);
  cudaFree(slots);
  slots = nullptr;
  const std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file || std::fwrite(host.data(), sizeof(Slot), host.size(), file.get()) != host.size()) {
    return Status(StatusCode::kInternal, "cannot write the kernel trace to " + path);
  }
  return Status::ok();
}

}  // namespace photon::cuda::trace

#endif

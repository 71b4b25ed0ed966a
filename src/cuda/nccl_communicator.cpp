#include "cuda/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "core/logging.hpp"
#include "core/process_group.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/kernels.hpp"

namespace photon {
namespace {

Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::ok();
  return Status(StatusCode::kInternal,
                fmt::format("{} failed: {} (set NCCL_DEBUG=WARN for details)", what, ncclGetErrorString(r)));
}

// The NCCL communicators of one process's ranks (one per GPU), and the workspaces of the peer all-reduce when the
// GPUs reach each other's memory. Tearing one down is collective (ncclCommDestroy finalizes, which waits for every
// rank), so they are destroyed together, each on a thread of its own, once the last rank's Communicator is gone.
struct CommGroup {
  std::vector<ncclComm_t> comms;
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
  std::vector<void*> peer_workspaces;  // one per rank on its GPU, or empty: NCCL only
  ~CommGroup() {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < comms.size(); ++i) {
      threads.emplace_back([this, i] {
        cudaSetDevice(devices[i]);
        cudaStreamSynchronize(streams[i]);
        ncclCommDestroy(comms[i]);
        if (i < peer_workspaces.size()) cudaFree(peer_workspaces[i]);
      });
    }
    for (std::thread& t : threads) t.join();
  }
};

// Messages up to 1 MiB (decode steps' hidden states) go through the one-shot peer all-reduce when every pair of
// GPUs has peer access, unless the engine was configured without it or PHOTON_PEER_ALL_REDUCE=0. Returns why not, or
// fills group.peer_workspaces.
Status setup_peer_all_reduce(CommGroup& group, bool wanted) {
  const int n = static_cast<int>(group.devices.size());
  if (!wanted) return Status(StatusCode::kUnsupported, "turned off (peer_all_reduce = false)");
  if (const char* env = std::getenv("PHOTON_PEER_ALL_REDUCE"); env != nullptr && std::strcmp(env, "0") == 0) {
    return Status(StatusCode::kUnsupported, "PHOTON_PEER_ALL_REDUCE=0");
  }
  if (n > cuda::PeerAllReduceBuffers::kMaxRanks) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("{} GPUs (at most {})", n, cuda::PeerAllReduceBuffers::kMaxRanks));
  }
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      int ok = 0;
      if (i != j && (cudaDeviceCanAccessPeer(&ok, group.devices[i], group.devices[j]) != cudaSuccess || ok == 0)) {
        return Status(StatusCode::kUnsupported,
                      fmt::format("GPU {} cannot access GPU {}'s memory", group.devices[i], group.devices[j]));
      }
    }
  }
  int current = 0;
  cudaGetDevice(&current);
  Status status = Status::ok();
  const size_t bytes = cuda::peer_all_reduce_workspace_bytes(n);
  for (int i = 0; i < n && status.is_ok(); ++i) {
    cudaSetDevice(group.devices[i]);
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(group.devices[j], 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // not an error: another group enabled it
      } else if (e != cudaSuccess) {
        status =
            Status(StatusCode::kUnsupported, fmt::format("enabling peer access from GPU {} to GPU {}: {}",
                                                         group.devices[i], group.devices[j], cudaGetErrorString(e)));
      }
    }
    void* workspace = nullptr;
    if (status.is_ok() && cudaMalloc(&workspace, bytes) != cudaSuccess) {
      cudaGetLastError();
      status = Status(StatusCode::kOutOfMemory,
                      fmt::format("{} bytes for the peer all-reduce on GPU {}", bytes, group.devices[i]));
    }
    if (workspace == nullptr) continue;
    group.peer_workspaces.push_back(workspace);
    if (cudaMemset(workspace, 0, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
      status = Status(StatusCode::kInternal,
                      fmt::format("clearing the peer all-reduce workspace on GPU {}", group.devices[i]));
    }
  }
  if (!status.is_ok()) {
    for (size_t i = 0; i < group.peer_workspaces.size(); ++i) {
      cudaSetDevice(group.devices[i]);
      cudaFree(group.peer_workspaces[i]);
    }
    group.peer_workspaces.clear();
  }
  cudaSetDevice(current);
  return status;
}

class NcclCommunicator final : public Communicator {
 public:
  /// The communicator at `index` of `group`, which is rank `rank` of `size` in NCCL's group.
  NcclCommunicator(std::shared_ptr<CommGroup> group, size_t index, int rank, int size)
      : group_(std::move(group)),
        comm_(group_->comms[index]),
        stream_(group_->streams[index]),
        rank_(rank),
        size_(size) {
    peer_.rank = rank;
    peer_.size = size;
    for (size_t r = 0; r < group_->peer_workspaces.size(); ++r) peer_.base[r] = group_->peer_workspaces[r];
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(Tensor& x) override {
    ncclDataType_t type = ncclFloat32;
    if (!nccl_type(x, type)) return;
    const size_t bytes = static_cast<size_t>(x.numel()) * dtype_size(x.dtype());
    if (has_peer() && type != ncclFloat16 && cuda::peer_all_reduce_fits(x.raw(), bytes)) {
      cuda::peer_all_reduce(x.raw(), bytes, type == ncclFloat32, peer_, stream_);
      return;
    }
    record(nccl_status(ncclAllReduce(x.raw(), x.raw(), static_cast<size_t>(x.numel()), type, ncclSum, comm_, stream_),
                       "ncclAllReduce"));
  }
  void all_reduce_add_rms_norm(Backend& backend, Tensor& x, Tensor& residual, const Tensor& weight, float eps,
                               Tensor& out) override {
    const auto aligned = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0; };
    const bool bf16 = x.dtype() == DType::kBF16 && residual.dtype() == DType::kBF16 && out.dtype() == DType::kBF16;
    if (!has_peer() || !bf16 || weight.dtype() != DType::kF32 || x.ndim() != 2 || !x.is_contiguous() ||
        !residual.is_contiguous() || !out.is_contiguous() || !aligned(x) || !aligned(residual) || !aligned(out) ||
        !aligned(weight) ||
        !cuda::peer_all_reduce_add_rms_norm_fits(static_cast<int>(x.size(0)), static_cast<int>(x.size(1)))) {
      Communicator::all_reduce_add_rms_norm(backend, x, residual, weight, eps, out);
      return;
    }
    cuda::peer_all_reduce_add_rms_norm(static_cast<const uint16_t*>(x.raw()), static_cast<int>(x.size(0)),
                                       static_cast<int>(x.size(1)), static_cast<uint16_t*>(residual.raw()),
                                       weight.data<float>(), eps, static_cast<uint16_t*>(out.raw()), peer_, stream_);
  }
  void all_gather(const Tensor& in, Tensor& out) override {
    ncclDataType_t type = ncclFloat32;
    if (!nccl_type(in, type)) return;
    if (out.numel() != in.numel() * size_) {
      record(Status(StatusCode::kInternal, "all_gather: the output must hold size() inputs"));
      return;
    }
    record(nccl_status(ncclAllGather(in.raw(), out.raw(), static_cast<size_t>(in.numel()), type, comm_, stream_),
                       "ncclAllGather"));
  }

 private:
  // Whether the GPUs of this group reach each other's memory (the peer all-reduce is set up).
  bool has_peer() const { return !group_->peer_workspaces.empty(); }
  bool nccl_type(const Tensor& t, ncclDataType_t& type) {
    switch (t.dtype()) {
      case DType::kF32:
        type = ncclFloat32;
        break;
      case DType::kBF16:
        type = ncclBfloat16;
        break;
      case DType::kF16:
        type = ncclFloat16;
        break;
      default:
        record(Status(StatusCode::kUnsupported, fmt::format("NCCL collectives on {} tensors", dtype_name(t.dtype()))));
        return false;
    }
    if (!t.is_contiguous()) {
      record(Status(StatusCode::kInternal, "NCCL collectives take contiguous tensors"));
      return false;
    }
    return true;
  }

  std::shared_ptr<CommGroup> group_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  int rank_, size_;
  cuda::PeerAllReduceBuffers peer_{};
};

Result<cudaStream_t> stream_of(Backend& backend) {
  void* stream = cuda_backend_stream(backend);
  if (stream == nullptr) return Status(StatusCode::kInvalidArgument, "NCCL communicators need CUDA backends");
  return static_cast<cudaStream_t>(stream);
}

}  // namespace

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(std::span<Backend* const> backends,
                                                                           bool peer_all_reduce) {
  const int n = static_cast<int>(backends.size());
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
  for (Backend* b : backends) {
    PHOTON_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(*b));
    devices.push_back(b->device().index);
    streams.push_back(s);
  }
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  PHOTON_RETURN_IF_ERROR(nccl_status(ncclCommInitAll(comms.data(), n, devices.data()), "ncclCommInitAll"));
  auto group = std::make_shared<CommGroup>();
  group->comms = std::move(comms);
  group->devices = std::move(devices);
  group->streams = std::move(streams);
  if (n > 1) {
    if (Status peer = setup_peer_all_reduce(*group, peer_all_reduce); peer.is_ok()) {
      log::info("tensor parallel: one-shot peer all-reduce for messages up to 1 MiB over {} GPUs", n);
    } else {
      log::info("tensor parallel: NCCL for every all-reduce ({})", peer.message());
    }
  }
  std::vector<std::unique_ptr<Communicator>> out;
  out.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<NcclCommunicator>(group, static_cast<size_t>(r), r, n));
  return out;
}

Result<std::unique_ptr<Communicator>> make_nccl_communicator(Backend& backend, ProcessGroup& group) {
  PHOTON_ASSIGN_OR_RETURN(cudaStream_t stream, stream_of(backend));
  // NCCL's standard bootstrap: rank 0 makes the unique id, the launcher's channel (here the group) hands it out.
  std::vector<uint8_t> id_bytes(sizeof(ncclUniqueId));
  ncclUniqueId id{};
  if (group.rank() == 0) {
    PHOTON_RETURN_IF_ERROR(nccl_status(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    std::memcpy(id_bytes.data(), &id, sizeof(id));
  }
  PHOTON_RETURN_IF_ERROR(group.broadcast(id_bytes).with_context("handing out NCCL's unique id"));
  if (id_bytes.size() != sizeof(id)) return Status(StatusCode::kInternal, "rank 0 sent an NCCL id of the wrong size");
  std::memcpy(&id, id_bytes.data(), sizeof(id));
  PHOTON_RETURN_IF_ERROR(backend.make_current());
  ncclComm_t comm = nullptr;
  PHOTON_RETURN_IF_ERROR(nccl_status(ncclCommInitRank(&comm, group.size(), id, group.rank()), "ncclCommInitRank"));
  auto comms = std::make_shared<CommGroup>();
  comms->comms = {comm};
  comms->devices = {backend.device().index};
  comms->streams = {stream};
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(comms, 0, group.rank(), group.size()));
}

}  // namespace photon

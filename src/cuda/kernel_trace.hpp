// Kernel timeline for builds configured with -DPHOTON_KERNEL_TRACE=ON (off in normal builds: then nothing here is
// compiled and pdl_begin() records nothing).
//
// Every kernel launched through launch() calls pdl_begin(); in a trace build, thread 0 of each block stamps the
// GPU's global nanosecond timer when it arrives there (after the loads it issues before the wait) and when the wait
// releases it (the kernel before it has finished and its writes are visible). A kernel's post-wait time is then
// the gap between its release and the next kernel's, and its launch delay the gap between the previous kernel's
// release and its own first arrival: the chain of a CUDA-graph step, which a profiler that serialises kernels
// cannot show. The stamps cost two timer reads and one fire-and-forget store per block.
//
// Use: set PHOTON_KERNEL_TRACE=FILE when running any program on a trace build: the CUDA backend starts recording
// when it is created and writes FILE when it is destroyed. tools/profile/kernel_timeline.py summarises FILE.
#pragma once

#ifdef PHOTON_KERNEL_TRACE

#include <cstdint>
#include <string>

#include <photon/status.hpp>

namespace photon::cuda::trace {

/// One block's stamps. Slots are indexed by (grid id mod kGrids, block): blocks past kBlocks - 1 are not recorded,
/// except the grid's last block, which takes slot kBlocks - 1. A later grid with the same index overwrites; the
/// kernels of a CUDA graph keep their grid ids across replays, so the trace holds each graph's latest replay.
struct Slot {
  uint64_t grid;     // %gridid: the launch's grid number (0: slot never written)
  uint64_t arrive;   // ns: block reached pdl_begin()
  uint64_t release;  // ns: the wait released it
  uint64_t where;    // block (bits 0-19) | SM (20-27) | threads per block (28-38) | blocks in the grid (39-63)
};
constexpr int kGrids = 4096;
constexpr int kBlocks = 1024;

/// Called at static initialisation by each CUDA source (its own copy of the device pointer): `bind` sets that copy.
void register_binder(void (*bind)(Slot* slots));
/// Allocates the slots (kGrids * kBlocks, 128 MB) on the current device and points every source's kernels at them.
Status start();
/// Copies the slots back and writes them, raw, to `path`; frees them.
Status finish(const std::string& path);

}  // namespace photon::cuda::trace

#endif

#include "engine/model_setup.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <span>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cpu/cpu_backend.hpp"
#include "cpu/process_communicator.hpp"
#include "cpu/thread_communicator.hpp"
#if defined(PHOTON_WITH_CUDA)
#include "cuda/cuda_backend.hpp"
#endif
#if defined(PHOTON_WITH_NCCL)
#include "cuda/nccl_communicator.hpp"
#endif
#include "models/kv_cache.hpp"
#include "models/tensor_parallel.hpp"

namespace photon {
namespace {

// The KV cache's dtype on `backend` (checked before anything is loaded).
Result<DType> kv_cache_dtype(const std::string& name, const Backend& backend) {
  const auto d = name == "auto" ? std::optional<DType>(backend.activation_dtype()) : parse_dtype(name);
  if (!d || (*d != DType::kF32 && *d != DType::kBF16)) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("KV cache dtype must be auto, f32 or bf16, not '{}'", name));
  }
  if (backend.device().kind == DeviceKind::kCuda && *d != DType::kBF16) {
    return Status(StatusCode::kUnsupported, "the GPU keeps its KV cache in bf16; use kv_cache_dtype auto or bf16");
  }
  return *d;
}

// The N of "cuda:N" (0 for "cuda"); an error for anything else that starts with "cuda".
Result<int> first_gpu(const std::string& device) {
  if (device == "cuda") return 0;
  const std::string n = device.substr(5);
  if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos || n.size() > 4) {
    return Status(StatusCode::kInvalidArgument, fmt::format("device '{}' is not cuda:N", device));
  }
  return std::stoi(n);
}

// "cpu", "cuda" or "cuda:N"; GPU `offset` from N on.
Result<std::unique_ptr<Backend>> make_backend(const std::string& device, int offset) {
  if (device == "cpu") return make_cpu_backend(default_cpu_allocator());
  if (device == "cuda" || device.starts_with("cuda:")) {
    PHOTON_ASSIGN_OR_RETURN(const int first, first_gpu(device));
#if defined(PHOTON_WITH_CUDA)
    auto backend = make_cuda_backend(first + offset);
    if (!backend && offset > 0) {
      return backend.status().with_context(
          fmt::format("GPU {} (lower the tensor-parallel size to the GPUs there are)", first + offset));
    }
    return backend;
#else
    (void)first;
    (void)offset;
    return Status(StatusCode::kUnsupported,
                  "this build has no CUDA backend (configure with -DPHOTON_CUDA=ON and a "
                  "CUDA toolkit); use device \"cpu\"");
#endif
  }
  return Status(StatusCode::kInvalidArgument, fmt::format("device must be cpu, cuda or cuda:N, not '{}'", device));
}

[[maybe_unused]] Status no_nccl() {
  return Status(StatusCode::kUnsupported,
                "this build has no NCCL, which tensor parallelism on GPUs needs; install NCCL and reconfigure, or use "
                "tensor_parallel_size 1");
}

// KV blocks one sequence of max_model_len tokens needs.
int64_t blocks_per_seq(const EngineConfig& config, int32_t max_model_len) {
  return (max_model_len + config.block_size - 1) / config.block_size;
}

// The share of a device's memory the engine may take in all (EngineConfig::memory_utilization, or its default).
double memory_utilization(const EngineConfig& config, bool on_gpu) {
  return config.memory_utilization > 0 ? config.memory_utilization : (on_gpu ? 0.9 : 0.5);
}

// The KV blocks this rank can hold: an exact count, else a byte budget, else a share of the device's memory
// (CPU ranks of one process share one memory, so they split it). Never more than max_num_seqs full-length
// sequences can use.
Result<int64_t> kv_blocks(const EngineConfig& config, Backend& backend, uint64_t per_block, int ranks_sharing_memory,
                          int64_t blocks_per_seq, std::string* budget_hint) {
  if (config.num_kv_blocks > 0) {
    *budget_hint = "raise num_kv_blocks";
    return config.num_kv_blocks;
  }
  uint64_t budget = config.kv_cache_memory_bytes;
  *budget_hint = "raise the KV cache memory";
  if (budget == 0) {
    const bool on_gpu = backend.device().kind == DeviceKind::kCuda;
    const double utilization = memory_utilization(config, on_gpu);
    size_t free_bytes = 0, total_bytes = 0;
    PHOTON_RETURN_IF_ERROR(backend.memory_info(&free_bytes, &total_bytes));
    // The engine may use `utilization` of the device in all; weights and activations already took their part.
    const double allowed = utilization * static_cast<double>(total_bytes);
    const auto used = static_cast<double>(total_bytes - free_bytes);
    budget = static_cast<uint64_t>(std::max(0.0, allowed - used) / ranks_sharing_memory);
    *budget_hint = fmt::format("raise memory_utilization (now {:.2f}; {:.2f} of {:.2f} GB already in use)", utilization,
                               used / 1e9, static_cast<double>(total_bytes) / 1e9);
    if (!on_gpu && config.memory_utilization <= 0) {
      // The CPU shares its memory with everything else: by default at most 4 GiB (or one full-length sequence,
      // when that is larger), not a fraction of all of it.
      constexpr uint64_t kCpuDefault = uint64_t{4} << 30;
      const uint64_t one_sequence = per_block * static_cast<uint64_t>(blocks_per_seq);
      const uint64_t cap = std::max(kCpuDefault / static_cast<uint64_t>(ranks_sharing_memory), one_sequence);
      if (cap < budget) {
        budget = cap;
        *budget_hint = "set the KV cache memory or memory_utilization (the CPU's default is at most 4 GiB)";
      }
    }
  }
  return std::min<int64_t>(static_cast<int64_t>(budget / per_block),
                           static_cast<int64_t>(config.max_num_seqs) * blocks_per_seq);
}

// What the processes of a group agree on once their models are loaded: the KV block count (the smallest any rank
// can hold: block ids must mean the same everywhere) and the weight bytes of the whole group.
struct GroupTotals {
  int64_t num_blocks = 0;
  uint64_t weight_bytes = 0;
};

Result<GroupTotals> agree(ProcessGroup& group, GroupTotals mine) {
  std::vector<uint8_t> bytes(sizeof(GroupTotals));
  std::memcpy(bytes.data(), &mine, sizeof(mine));
  std::vector<std::vector<uint8_t>> all;
  PHOTON_RETURN_IF_ERROR(group.gather(bytes, &all).with_context("agreeing on the KV cache size"));
  if (group.rank() == 0) {
    GroupTotals totals{mine.num_blocks, 0};
    for (const auto& b : all) {
      GroupTotals theirs;
      if (b.size() != sizeof(theirs)) return Status(StatusCode::kInternal, "a rank sent malformed totals");
      std::memcpy(&theirs, b.data(), sizeof(theirs));
      totals.num_blocks = std::min(totals.num_blocks, theirs.num_blocks);
      totals.weight_bytes += theirs.weight_bytes;
    }
    std::memcpy(bytes.data(), &totals, sizeof(totals));
  }
  PHOTON_RETURN_IF_ERROR(group.broadcast(bytes).with_context("agreeing on the KV cache size"));
  GroupTotals agreed;
  if (bytes.size() != sizeof(agreed)) return Status(StatusCode::kInternal, "rank 0 sent malformed totals");
  std::memcpy(&agreed, bytes.data(), sizeof(agreed));
  return agreed;
}

}  // namespace

Result<ModelSource> model_source(const EngineConfig& config) {
  ModelSource source;
  source.model = config.model;
  const auto format = parse_load_format(config.load_format);
  if (!format) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("load_format must be auto, safetensors or dummy, not '{}'", config.load_format));
  }
  source.format = *format;
  const auto dtype = parse_dtype(config.dtype);
  if (!dtype || !is_float_dtype(*dtype)) {
    return Status(StatusCode::kInvalidArgument, fmt::format("dtype must be bf16, f16 or f32, not '{}'", config.dtype));
  }
  source.dummy_dtype = *dtype;
  source.seed = config.seed;
  const auto int8 = parse_quantization(config.quantization);
  if (!int8) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("quantization must be none or int8, not '{}'", config.quantization));
  }
  source.quantization.int8 = *int8;
  source.quantization.group_size = config.group_size;
  source.quantization.lm_head = config.quantize_lm_head;
  if (*int8 && config.group_size != 32 && config.group_size != 64 && config.group_size != 128) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("group_size must be 32, 64 or 128, not {}", config.group_size));
  }
  if (!*int8 && config.quantize_lm_head) {
    return Status(StatusCode::kInvalidArgument, "quantize_lm_head needs quantization int8");
  }
  return source;
}

namespace {

// Step 1: which tensor-parallel ranks this process hosts — all of them, or in a multi-process group its own.
Result<std::vector<int>> hosted_ranks(const EngineConfig& config, const ModelConfig& mc) {
  const int tp = config.tensor_parallel_size;
  if (tp < 1 || tp > 64) return Status(StatusCode::kInvalidArgument, "tensor_parallel_size must be from 1 to 64");
  PHOTON_RETURN_IF_ERROR(check_tensor_parallel(mc, tp));
  if (!config.dist_init_addr.empty()) {
    if (tp < 2) {
      return Status(StatusCode::kInvalidArgument,
                    "a multi-process group (dist_init_addr) needs tensor_parallel_size of 2 or more");
    }
    return std::vector<int>{config.rank};
  }
  std::vector<int> hosted(static_cast<size_t>(tp));
  std::iota(hosted.begin(), hosted.end(), 0);
  return hosted;
}

// Errors of one rank name it when there are several.
Status for_rank(const EngineConfig& config, int rank, const Status& s) {
  return config.tensor_parallel_size == 1 ? s : s.with_context(fmt::format("tensor-parallel rank {}", rank));
}

// Step 2: one backend per hosted rank. One GPU per rank, from the device's N on: in one process the ranks take
// consecutive GPUs; in a group of processes rank r takes GPU N + (r mod the GPUs from N on), so that ranks placed
// host by host fill each host.
Status make_rank_backends(const EngineConfig& config, std::span<const int> hosted, LocalModel& local) {
  const bool distributed = !config.dist_init_addr.empty();
  for (int r : hosted) {
    int offset = r;
    if (distributed && config.device != "cpu") {
      PHOTON_ASSIGN_OR_RETURN(const int first, first_gpu(config.device));
      offset = r % std::max(1, cuda_device_count() - first);
    }
    auto backend = make_backend(config.device, offset);
    if (!backend) return for_rank(config, r, backend.status());
    local.backends.push_back(std::move(*backend));
  }
  return Status::ok();
}

// Step 3: the communicators between the ranks: none for one rank, threads or NCCL in one process, and for a group
// of processes its TCP group plus NCCL (GPUs) or messages over the group (CPUs).
Status connect_ranks(const EngineConfig& config, LocalModel& local) {
  const int tp = config.tensor_parallel_size;
  Backend& first = *local.backends[0];
  const bool on_gpu = first.device().kind == DeviceKind::kCuda;
  if (!config.dist_init_addr.empty()) {
    PHOTON_ASSIGN_OR_RETURN(local.group, ProcessGroup::join(config.dist_init_addr, config.rank, tp));
    if (!on_gpu) {
      local.communicators.push_back(make_process_communicator(*local.group));
      return Status::ok();
    }
#if defined(PHOTON_WITH_NCCL)
    PHOTON_ASSIGN_OR_RETURN(auto comm, make_nccl_communicator(first, *local.group));
    local.communicators.push_back(std::move(comm));
    return Status::ok();
#else
    return no_nccl();
#endif
  }
  if (tp == 1) return Status::ok();
  if (!on_gpu) {
    local.communicators = make_thread_communicators(tp);
    return Status::ok();
  }
#if defined(PHOTON_WITH_NCCL)
  std::vector<Backend*> raw;
  for (auto& b : local.backends) raw.push_back(b.get());
  PHOTON_ASSIGN_OR_RETURN(local.communicators, make_nccl_communicators(raw, config.peer_all_reduce));
  return Status::ok();
#else
  return no_nccl();
#endif
}

// Step 3b: weights that cannot fit are refused before any byte is loaded — a 70B model on one GPU, or on a host of
// a few dozen GB, would otherwise fill the memory first and fail at the KV cache. A lower bound from the shapes, so
// that nothing that fits is refused: 2 bytes a parameter (bf16, the narrowest float weights), int8 projections 1
// byte plus a 4-byte scale per group; against the share of the device the engine may take (memory_utilization),
// or all of it when the KV cache is sized explicitly. Each GPU holds 1/N of the model; CPU ranks share the host.
Status check_weights_fit(const EngineConfig& config, const ModelSource& source, const ModelConfig& mc,
                         LocalModel& local) {
  const auto table = static_cast<double>(mc.vocab_size * mc.hidden_size);
  const double tables = table * (mc.tie_word_embeddings ? 1 : 2);
  const double projections = static_cast<double>(mc.num_parameters()) - tables;
  // The projections and `int8_table` embedding / LM-head weights at `per_weight` bytes each, the other tables bf16.
  const auto int8_bytes = [&](double per_weight, double int8_table) {
    return (projections + int8_table) * per_weight + (tables - int8_table) * 2.0;
  };
  const bool int8 = source.quantization.int8 || mc.quantization.quantized();
  double bytes = 2.0 * static_cast<double>(mc.num_parameters());
  if (source.quantization.int8) {
    bytes = int8_bytes(1.0 + 4.0 / static_cast<double>(source.quantization.group_size),
                       source.quantization.lm_head ? table : 0.0);
  } else if (int8) {
    bytes = int8_bytes(1.0, 0.0);  // a quantized checkpoint: its scales' layout varies, values alone bound it
  }
  Backend& backend = *local.backends[0];
  const bool on_gpu = backend.device().kind == DeviceKind::kCuda;
  // GPUs: each rank its 1/N on its own device. CPU: every hosted rank's 1/N in the one host memory.
  const double ranks_here = on_gpu ? 1.0 : static_cast<double>(local.backends.size());
  const double need = bytes * ranks_here / static_cast<double>(config.tensor_parallel_size);
  size_t free_bytes = 0, total_bytes = 0;
  if (!backend.memory_info(&free_bytes, &total_bytes).is_ok()) return Status::ok();
  const auto total = static_cast<double>(total_bytes);
  const bool explicit_kv = config.kv_cache_memory_bytes > 0 || config.num_kv_blocks > 0;
  const double utilization = explicit_kv ? 1.0 : memory_utilization(config, on_gpu);
  if (need <= utilization * total) return Status::ok();
  std::vector<std::string> fixes;
  if (need < total) fixes.emplace_back("raise memory_utilization (--memory-utilization)");
  if (on_gpu) fixes.emplace_back("split it over more GPUs (--tensor-parallel-size)");
  if (!int8) {
    fixes.push_back(fmt::format("quantize it (--quantization int8: about {:.1f} GB in all)",
                                int8_bytes(1.0 + 4.0 / 128.0, 0.0) / 1e9));
  }
  if (fixes.empty()) fixes.emplace_back("use a device with more memory");
  return Status(StatusCode::kOutOfMemory,
                fmt::format("{}'s weights need at least {:.1f} GB on {} ({:.2f} B parameters{}), more than the {:.1f} "
                            "GB the engine may take there ({:.2f} of {:.1f} GB); {}",
                            config.model, need / 1e9, backend.device().to_string(),
                            static_cast<double>(mc.num_parameters()) / 1e9, int8 ? ", int8 projections" : " in bf16",
                            utilization * total / 1e9, utilization, total / 1e9, fmt::join(fixes, ", or ")));
}

// Step 4: each hosted rank's shard of the weights onto its device. Progress counts every hosted rank's bytes: rank
// i's share is the i-th of n equal parts of the total.
Result<std::vector<ModelWeights>> load_rank_weights(const EngineConfig& config, const ModelSource& source,
                                                    const ModelConfig& mc, std::span<const int> hosted,
                                                    LocalModel& local) {
  std::vector<ModelWeights> weights;
  const auto n = static_cast<uint64_t>(hosted.size());
  for (size_t i = 0; i < hosted.size(); ++i) {
    LoadProgress progress;
    if (config.load_progress) {
      progress = [&config, i, n](uint64_t done, uint64_t total) { config.load_progress(i * total + done, n * total); };
    }
    auto w = load_model_weights(source, mc, *local.backends[i], make_shard(mc, hosted[i], config.tensor_parallel_size),
                                progress);
    if (!w) return for_rank(config, hosted[i], w.status());
    local.weight_bytes += w->bytes;
    weights.push_back(std::move(*w));
  }
  return weights;
}

// Step 5: the decoder's limits: the engine's max_model_len (the model's context unless the config asks for less)
// and the batch sizes its buffers are made for.
Result<DecoderLimits> decoder_limits(const EngineConfig& config, const ModelConfig& mc) {
  int32_t max_model_len = static_cast<int32_t>(std::min<int64_t>(mc.max_position_embeddings, INT32_MAX / 2));
  if (config.max_model_len > 0) {
    if (config.max_model_len > max_model_len) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("max_model_len {} exceeds the model's context of {} tokens", config.max_model_len,
                                max_model_len));
    }
    max_model_len = config.max_model_len;
  }
  DecoderLimits limits;
  limits.max_num_tokens = config.max_num_batched_tokens;
  limits.max_num_seqs = config.max_num_seqs;
  limits.max_num_logits = std::max(config.max_num_seqs, std::min(config.max_num_batched_tokens, 512));
  limits.max_num_blocks = static_cast<int64_t>(config.max_num_seqs) * blocks_per_seq(config, max_model_len);
  limits.max_seq_len = max_model_len;
  limits.use_graphs = !config.enforce_eager;
  return limits;
}

// Step 6: a decoder per hosted rank over its weights.
Status create_decoders(const EngineConfig& config, const ModelConfig& mc, std::vector<ModelWeights> weights,
                       LocalModel& local) {
  for (size_t i = 0; i < local.backends.size(); ++i) {
    ModelRank rank;
    rank.backend = local.backends[i].get();
    Communicator* comm = config.tensor_parallel_size > 1 ? local.communicators[i].get() : nullptr;
    PHOTON_ASSIGN_OR_RETURN(rank.decoder,
                            Decoder::create(mc, std::move(weights[i]), *rank.backend, local.limits, comm));
    local.ranks.push_back(std::move(rank));
  }
  return Status::ok();
}

// Step 7: the KV caches. Budgets are per device; each rank holds its KV heads' share. Every rank's cache has the
// same block count, so that block ids mean the same everywhere (a group of processes agrees on the smallest).
Status create_kv_caches(const EngineConfig& config, const ModelConfig& mc, int first_rank, DType kv_dtype,
                        LocalModel& local) {
  Backend& first = *local.backends[0];
  const bool on_gpu = first.device().kind == DeviceKind::kCuda;
  const bool distributed = !config.dist_init_addr.empty();
  const int tp = config.tensor_parallel_size;
  const int32_t max_model_len = local.limits.max_seq_len;
  const ModelConfig rank_config = shard_config(mc, make_shard(mc, first_rank, tp));
  const uint64_t per_block = PagedKvCache::bytes_per_block(rank_config, config.block_size, kv_dtype);
  std::string budget_hint;
  const int sharing = on_gpu || distributed ? 1 : tp;
  PHOTON_ASSIGN_OR_RETURN(int64_t num_blocks, kv_blocks(config, first, per_block, sharing,
                                                        blocks_per_seq(config, max_model_len), &budget_hint));
  if (distributed) {
    PHOTON_ASSIGN_OR_RETURN(const GroupTotals totals, agree(*local.group, {num_blocks, local.weight_bytes}));
    num_blocks = totals.num_blocks;
    local.weight_bytes = totals.weight_bytes;
  }
  const int64_t capacity = num_blocks * config.block_size;
  if (capacity < max_model_len) {
    return Status(StatusCode::kOutOfMemory,
                  fmt::format("the KV cache budget holds {} tokens ({} blocks of {}), fewer than max_model_len {}; "
                              "lower max_model_len to {} or {}",
                              capacity, num_blocks, config.block_size, max_model_len, capacity, budget_hint));
  }
  for (ModelRank& rank : local.ranks) {
    PHOTON_ASSIGN_OR_RETURN(rank.kv_cache,
                            PagedKvCache::create(rank_config, *rank.backend, num_blocks, config.block_size, kv_dtype));
  }
  local.num_blocks = num_blocks;
  return Status::ok();
}

}  // namespace

Result<LocalModel> build_local_model(const EngineConfig& config, const ModelSource& source, const ModelConfig& mc) {
  PHOTON_ASSIGN_OR_RETURN(const std::vector<int> hosted, hosted_ranks(config, mc));
  LocalModel local;
  PHOTON_RETURN_IF_ERROR(make_rank_backends(config, hosted, local));
  PHOTON_ASSIGN_OR_RETURN(const DType kv_dtype, kv_cache_dtype(config.kv_cache_dtype, *local.backends[0]));
  PHOTON_RETURN_IF_ERROR(connect_ranks(config, local));
  PHOTON_RETURN_IF_ERROR(check_weights_fit(config, source, mc, local));
  PHOTON_ASSIGN_OR_RETURN(std::vector<ModelWeights> weights, load_rank_weights(config, source, mc, hosted, local));
  PHOTON_ASSIGN_OR_RETURN(local.limits, decoder_limits(config, mc));
  PHOTON_RETURN_IF_ERROR(create_decoders(config, mc, std::move(weights), local));
  PHOTON_RETURN_IF_ERROR(create_kv_caches(config, mc, hosted[0], kv_dtype, local));
  return local;
}

}  // namespace photon

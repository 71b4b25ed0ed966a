#include "engine_flags.hpp"

#include <omp.h>

#include <chrono>
#include <cstdlib>

#include <fmt/format.h>
#include <photon/log.hpp>

#include "progress.hpp"

namespace photon::cli {
namespace {

Status bad(std::string message) { return Status(StatusCode::kInvalidArgument, std::move(message)); }

// Whether `device` ("cuda" or "cuda:N"; with tensor parallelism, the first of its GPUs) is a large GPU in the sense
// of EngineFlagDefaults. False for "cpu", a malformed name or a GPU that is not there.
bool is_large_gpu(const std::string& device) {
  int index = 0;
  if (device.starts_with("cuda:")) {
    const std::string n = device.substr(5);
    if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos) return false;
    index = std::stoi(n);
  } else if (device != "cuda") {
    return false;
  }
  const CudaDeviceProperties p = cuda_device_properties(index);
  return p.compute_capability >= 90 && p.total_memory_bytes >= uint64_t{70} << 30;
}

}  // namespace

void add_engine_flags(Args& a, const EngineFlagDefaults& d) {
  a.option("model", "DIR|dummy:NAME",
           "Hugging Face checkpoint folder (config.json + safetensors), or a built-in "
           "shape with random weights: dummy:llama-3.2-1b, dummy:llama-3.2-3b, "
           "dummy:llama-3.1-8b, dummy:llama-3.1-70b, dummy:qwen3-0.6b, dummy:qwen3-1.7b, dummy:qwen3-8b, "
           "dummy:qwen3-32b, dummy:tiny-llama3, dummy:tiny-qwen3");
  a.option("load-format", "auto|safetensors|dummy", "dummy: random weights for a folder holding only config.json",
           "auto");
  a.option("tokenizer", "DIR_OR_FILE", "tokenizer folder or tokenizer.json (default: the model folder's, if any)");
  a.option("dtype", "bf16|f16|f32", "dtype of dummy weights (the GPU computes in bf16)", "bf16");
  a.option("device", "cpu|cuda|cuda:N",
           std::string("where to run") + (std::string(d.device) == "auto" ? " (default: cuda when a GPU is "
                                                                            "visible, else cpu)"
                                                                          : ""),
           d.device);
  a.option("seed", "N", "seed of dummy weights and of requests without their own seed", "0");
  a.option("tensor-parallel-size", "N", "GPUs to split the model across (with --device cpu: threads)", "1");
  a.option("dist-init-addr", "HOST:PORT",
           "one process per tensor-parallel rank, on one host or several: every process runs the same command with "
           "this address, where rank 0 listens (rank 0 prints the results; the others serve it)");
  a.option("rank", "R",
           "this process's rank with --dist-init-addr (default: $PHOTON_RANK, $SLURM_PROCID, "
           "$OMPI_COMM_WORLD_RANK or $PMI_RANK)");
  // The default, and the large-GPU one where it differs.
  const auto by_gpu = [](int normal, int large) {
    return large == normal
               ? fmt::format("default: {}", normal)
               : fmt::format("default: {}; {} on a GPU of sm_90 or newer with 70 GiB or more", normal, large);
  };
  a.option("max-num-seqs", "N",
           fmt::format("requests per step at most ({})", by_gpu(d.max_num_seqs, d.large_gpu_max_num_seqs)));
  a.option("max-num-batched-tokens", "N",
           fmt::format("tokens per step at most, longer prompts are chunked ({})",
                       by_gpu(d.max_num_batched_tokens, d.large_gpu_max_num_batched_tokens)));
  a.option("max-model-len", "N", "longest prompt + output per request (default: the model's context)");
  a.option("block-size", "N", "tokens per KV-cache block", "16");
  a.option("num-kv-blocks", "N", "exact number of KV-cache blocks (overrides the memory budgets)");
  a.option("kv-cache-memory", "BYTES", "bytes for the KV cache (default: from --memory-utilization)");
  a.option("memory-utilization", "F",
           "fraction of the device's memory the engine may take in all (default: 0.9 on "
           "a GPU, 0.5 on the CPU)");
  a.option("quantization", "none|int8",
           "int8: quantize the projections' weights at load, symmetric int8 with one scale per group of input "
           "features (the embedding and the LM head stay as they are)",
           "none");
  a.option("group-size", "32|64|128", "input features per int8 scale with --quantization int8", "128");
  a.flag("quantize-lm-head", "with --quantization int8: the LM head too");
  a.option("kv-cache-dtype", "auto|f32|bf16", "dtype of the KV cache (auto: f32 on the CPU, bf16 on a GPU)", "auto");
  a.flag("enable-prefix-caching", "reuse the KV cache of shared prompt prefixes (the default)");
  a.flag("no-prefix-caching", "compute every prompt in full");
  a.flag("no-async-scheduling", "wait for each step's sampled tokens before planning the next");
  a.flag("enforce-eager", "never replay decode steps as CUDA graphs");
  a.flag("disable-custom-all-reduce",
         "tensor parallelism: use NCCL for every all-reduce, not the one-shot NVLink kernel for small messages");
  a.option("threads", "N", "CPU threads (default: OpenMP's choice, usually all cores)");
  a.option("log-level", "LEVEL", "debug, info, warn, error or off", "warn");
}

Status read_engine_config(const Args& a, const EngineFlagDefaults& d, EngineConfig& c) {
  if (!a.has("model")) return bad("option '--model' is required");
  c.model = a.get("model");
  c.tokenizer = a.get("tokenizer");
  c.load_format = a.get("load-format");
  if (c.load_format != "auto" && c.load_format != "safetensors" && c.load_format != "dummy") {
    return bad(fmt::format("option '--load-format' must be auto, safetensors or dummy, not '{}'", c.load_format));
  }
  c.dtype = a.get("dtype");
  if (c.dtype != "bf16" && c.dtype != "f16" && c.dtype != "f32") {
    return bad(fmt::format("option '--dtype' must be bf16, f16 or f32, not '{}'", c.dtype));
  }
  c.device = a.get("device");
  if (c.device == "auto") c.device = cuda_device_count() > 0 ? "cuda" : "cpu";
  if (c.device != "cpu" && c.device != "cuda" && !c.device.starts_with("cuda:")) {
    return bad(fmt::format("option '--device' must be cpu, cuda or cuda:N, not '{}'", c.device));
  }
  c.quantization = a.get("quantization");
  if (c.quantization != "none" && c.quantization != "int8") {
    return bad(fmt::format("option '--quantization' must be none or int8, not '{}'", c.quantization));
  }
  PHOTON_ASSIGN_OR_RETURN(int64_t group_size, a.get_int("group-size", 1, 1 << 20));
  if (group_size != 32 && group_size != 64 && group_size != 128) {
    return bad(fmt::format("option '--group-size' must be 32, 64 or 128, not {}", group_size));
  }
  c.group_size = static_cast<int32_t>(group_size);
  c.quantize_lm_head = a.has("quantize-lm-head");
  if (c.quantize_lm_head && c.quantization != "int8")
    return bad("option '--quantize-lm-head' needs '--quantization int8'");
  if (a.has("group-size") && c.quantization != "int8") return bad("option '--group-size' needs '--quantization int8'");
  c.kv_cache_dtype = a.get("kv-cache-dtype");
  if (c.kv_cache_dtype != "auto" && c.kv_cache_dtype != "f32" && c.kv_cache_dtype != "bf16") {
    return bad(fmt::format("option '--kv-cache-dtype' must be auto, f32 or bf16, not '{}'", c.kv_cache_dtype));
  }
  PHOTON_ASSIGN_OR_RETURN(int64_t seed, a.get_int("seed", 0, INT64_MAX));
  c.seed = static_cast<uint64_t>(seed);
  PHOTON_ASSIGN_OR_RETURN(int64_t tp, a.get_int("tensor-parallel-size", 1, 64));
  c.tensor_parallel_size = static_cast<int32_t>(tp);
  c.dist_init_addr = a.get("dist-init-addr");
  if (a.has("rank") && c.dist_init_addr.empty()) return bad("option '--rank' needs '--dist-init-addr HOST:PORT'");
  if (!c.dist_init_addr.empty()) {
    if (c.tensor_parallel_size < 2) return bad("option '--dist-init-addr' needs '--tensor-parallel-size' of 2 or more");
    int64_t rank = -1;
    if (a.has("rank")) {
      PHOTON_ASSIGN_OR_RETURN(rank, a.get_int("rank", 0, c.tensor_parallel_size - 1));
    } else {
      // Launchers say which process this is: srun, mpirun (Open MPI, MPICH / Intel MPI), or by hand.
      for (const char* var : {"PHOTON_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
        const char* v = std::getenv(var);
        if (v == nullptr || *v == '\0') continue;
        char* end = nullptr;
        const long r = std::strtol(v, &end, 10);
        if (*end != '\0' || r < 0 || r >= c.tensor_parallel_size) {
          return bad(fmt::format("${} is '{}', not a rank from 0 to {}", var, v, c.tensor_parallel_size - 1));
        }
        rank = r;
        break;
      }
      if (rank < 0) return bad("option '--dist-init-addr' needs '--rank R' (or $PHOTON_RANK / $SLURM_PROCID)");
    }
    c.rank = static_cast<int32_t>(rank);
  }
  const bool large = is_large_gpu(c.device);
  int64_t seqs = large ? d.large_gpu_max_num_seqs : d.max_num_seqs;
  int64_t tokens = large ? d.large_gpu_max_num_batched_tokens : d.max_num_batched_tokens;
  if (a.has("max-num-seqs")) {
    PHOTON_ASSIGN_OR_RETURN(seqs, a.get_int("max-num-seqs", 1, 65536));
  }
  if (a.has("max-num-batched-tokens")) {
    PHOTON_ASSIGN_OR_RETURN(tokens, a.get_int("max-num-batched-tokens", 1, 1 << 20));
  }
  PHOTON_ASSIGN_OR_RETURN(int64_t block, a.get_int("block-size", 1, 1024));
  c.max_num_seqs = static_cast<int32_t>(seqs);
  c.max_num_batched_tokens = static_cast<int32_t>(tokens);
  c.block_size = static_cast<int32_t>(block);
  if (a.has("max-model-len")) {
    PHOTON_ASSIGN_OR_RETURN(int64_t len, a.get_int("max-model-len", 1, 1 << 30));
    c.max_model_len = static_cast<int32_t>(len);
  }
  if (a.has("num-kv-blocks")) {
    PHOTON_ASSIGN_OR_RETURN(c.num_kv_blocks, a.get_int("num-kv-blocks", 1, 1 << 30));
  }
  if (a.has("kv-cache-memory")) {
    PHOTON_ASSIGN_OR_RETURN(int64_t bytes, a.get_int("kv-cache-memory", 1, INT64_MAX));
    c.kv_cache_memory_bytes = static_cast<uint64_t>(bytes);
  }
  if (a.has("memory-utilization")) {
    PHOTON_ASSIGN_OR_RETURN(c.memory_utilization, a.get_double("memory-utilization", 0.01, 1.0));
  }
  if (a.has("enable-prefix-caching") && a.has("no-prefix-caching")) {
    return bad("give only one of '--enable-prefix-caching' and '--no-prefix-caching'");
  }
  c.enable_prefix_caching = !a.has("no-prefix-caching");
  c.enforce_eager = a.has("enforce-eager");
  c.async_scheduling = !a.has("no-async-scheduling");
  c.peer_all_reduce = !a.has("disable-custom-all-reduce");
  if (a.has("threads")) {
    PHOTON_ASSIGN_OR_RETURN(int64_t threads, a.get_int("threads", 1, 4096));
    omp_set_num_threads(static_cast<int>(threads));
  }
  LogLevel level{};
  if (!parse_log_level(a.get("log-level"), &level)) {
    return bad(
        fmt::format("option '--log-level' must be debug, info, warn, error or off, not '{}'", a.get("log-level")));
  }
  set_log_level(level);
  return Status::ok();
}

Result<std::unique_ptr<Engine>> load_engine(EngineConfig config, double& load_s) {
  const auto start = std::chrono::steady_clock::now();
  ProgressBar bar("loading");
  config.load_progress = [&](uint64_t done, uint64_t total) { bar.update(done, total); };
  auto engine = Engine::create(config);
  bar.finish();
  load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return engine;
}

}  // namespace photon::cli

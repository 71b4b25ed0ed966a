// Fault injection: allocations that fail at every point of engine creation, an allocator with no headroom left
// while requests run, and weight files that cannot be read. Each must end in a clean error (and, under the
// sanitizer build, without a leak), after which the process can build a working engine.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include <photon/engine.hpp>

#include "core/device.hpp"

using namespace photon;
namespace fs = std::filesystem;

namespace {

const std::string kParity = std::string(PHOTON_TEST_DATA_DIR) + "/parity/";

// Restores the process-wide host allocator's limit however the test ends.
struct LimitGuard {
  ~LimitGuard() { default_cpu_allocator().set_limit(CpuAllocator::kNoLimit); }
};

EngineConfig small_engine(int tp) {
  EngineConfig c;
  c.model = kParity + "llama3-gqa-tied-ropescaled";
  c.num_kv_blocks = 32;
  c.block_size = 8;
  c.max_model_len = 128;
  c.max_num_batched_tokens = 64;
  c.max_num_seqs = 4;
  c.tensor_parallel_size = tp;
  return c;
}

// Runs a few greedy requests to the end; returns how many finished without error.
int run_requests(Engine& engine) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 12;
  p.ignore_eos = true;
  for (int i = 0; i < 3; ++i) REQUIRE(engine.submit({5, 6, 7, static_cast<int32_t>(8 + i)}, p).is_ok());
  int ok = 0;
  while (engine.has_unfinished_requests()) {
    REQUIRE(engine.step().is_ok());
    for (const auto& e : engine.poll()) ok += e.finished && e.error.empty() ? 1 : 0;
  }
  return ok;
}

// A private copy of a parity checkpoint to damage.
fs::path copy_checkpoint(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("photon-fault-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(kParity + name, dir, fs::copy_options::recursive);
  return dir;
}

}  // namespace

TEST_CASE("an allocation failing anywhere in engine creation is a clean out-of-memory error") {
  const int tp = GENERATE(1, 2);
  INFO("tensor-parallel size " << tp);
  LimitGuard guard;
  CpuAllocator& a = default_cpu_allocator();
  const size_t base = a.bytes_in_use();
  size_t needed = 0;
  {
    auto engine = Engine::create(small_engine(tp));
    REQUIRE(engine.is_ok());
    needed = a.bytes_in_use() - base;
  }
  REQUIRE(a.bytes_in_use() == base);
  REQUIRE(needed > 0);
  // Budgets from nothing up to just short of what creation takes: every one fails at a different allocation.
  for (int k = 0; k < 24; ++k) {
    const size_t limit = base + needed * static_cast<size_t>(k) / 24;
    a.set_limit(limit);
    auto engine = Engine::create(small_engine(tp));
    INFO("limit " << limit - base << " of " << needed << " bytes");
    REQUIRE_FALSE(engine.is_ok());
    CHECK(engine.status().code() == StatusCode::kOutOfMemory);
    CHECK_FALSE(engine.status().message().empty());
    CHECK(a.bytes_in_use() == base);  // whatever was allocated before the failure was returned
  }
  a.set_limit(base + needed);
  auto engine = Engine::create(small_engine(tp));
  REQUIRE(engine.is_ok());
  CHECK(run_requests(**engine) == 3);
}

TEST_CASE("steps allocate nothing, so an exhausted allocator cannot fail them") {
  LimitGuard guard;
  auto engine = Engine::create(small_engine(1));
  REQUIRE(engine.is_ok());
  CpuAllocator& a = default_cpu_allocator();
  a.set_limit(a.bytes_in_use());  // no headroom at all
  CHECK(run_requests(**engine) == 3);
  CHECK(run_requests(**engine) == 3);
}

TEST_CASE("weights that cannot be read are errors naming the file") {
  const fs::path dir = copy_checkpoint("llama3-mha-untied");
  const fs::path weights = dir / "model.safetensors";
  EngineConfig c = small_engine(1);
  c.model = dir.string();
  SECTION("truncated after the header") {
    fs::resize_file(weights, fs::file_size(weights) / 2);
    auto engine = Engine::create(c);
    REQUIRE_FALSE(engine.is_ok());
    CHECK(engine.status().message().find("model.safetensors") != std::string::npos);
  }
  SECTION("a directory in place of the file") {
    fs::remove(weights);
    fs::create_directory(weights);
    auto engine = Engine::create(c);
    REQUIRE_FALSE(engine.is_ok());
    CHECK(engine.status().message().find("model.safetensors") != std::string::npos);
  }
  SECTION("a FIFO in place of the file: an error, not a hang waiting for a writer") {
    fs::remove(weights);
    REQUIRE(::mkfifo(weights.c_str(), 0600) == 0);
    auto engine = Engine::create(c);
    REQUIRE_FALSE(engine.is_ok());
    CHECK(engine.status().message().find("not a regular file") != std::string::npos);
  }
  SECTION("an empty file") {
    std::ofstream(weights, std::ios::trunc).close();
    CHECK_FALSE(Engine::create(c).is_ok());
  }
  fs::remove_all(dir);
  // The process is unharmed: the intact checkpoint still loads and runs.
  auto engine = Engine::create(small_engine(1));
  REQUIRE(engine.is_ok());
  CHECK(run_requests(**engine) == 3);
}

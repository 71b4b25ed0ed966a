#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/safetensors.hpp"

using namespace photon;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::vector<unsigned char> make_file(const std::string& header, size_t data_bytes, size_t header_len_override = 0) {
  std::vector<unsigned char> out(8 + header.size() + data_bytes, 0);
  const uint64_t len = header_len_override ? header_len_override : header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<unsigned char>(len >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < data_bytes; ++i) out[8 + header.size() + i] = static_cast<unsigned char>(i);
  return out;
}

Status parse(const std::vector<unsigned char>& bytes) {
  return parse_safetensors_header(bytes, "t.safetensors").status();
}

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("photon_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write(const fs::path& p, const std::vector<unsigned char>& bytes) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

const std::string kGood = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                          R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}})";

}  // namespace

TEST_CASE("a well-formed safetensors header is parsed") {
  auto h = parse_safetensors_header(make_file(kGood, 22), "t.safetensors");
  REQUIRE(h.is_ok());
  CHECK(h->entries.size() == 2);
  CHECK(h->metadata.at("format") == "pt");
  CHECK(h->data_offset == 8 + kGood.size());
}

TEST_CASE("corrupt safetensors files give format errors, never crashes") {
  auto expect = [](const std::vector<unsigned char>& bytes, const std::string& fragment) {
    Status s = parse(bytes);
    INFO(s.to_string());
    CHECK(s.code() == StatusCode::kFormatError);
    CHECK(s.message().find(fragment) != std::string::npos);
    CHECK(s.message().find("t.safetensors") != std::string::npos);
  };
  SECTION("shorter than the length prefix") { expect({1, 2, 3}, "too short"); }
  SECTION("header length past the end of the file") { expect(make_file(kGood, 22, kGood.size() + 100), "truncated"); }
  SECTION("absurd header length") { expect(make_file(kGood, 22, uint64_t{1} << 40), "exceeds"); }
  SECTION("data truncated") { expect(make_file(kGood, 21), "truncated"); }
  SECTION("not JSON") { expect(make_file("{\"a\": [1, 2", 0), "JSON"); }
  SECTION("not an object") { expect(make_file("[1,2,3]", 0), "not a JSON object"); }
  SECTION("unknown dtype") {
    expect(make_file(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}})", 2), "unknown dtype 'Q4'");
  }
  SECTION("shape and byte range disagree") {
    expect(make_file(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})", 16), "shape and dtype give 24");
  }
  SECTION("negative dimension") {
    expect(make_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "non-negative");
  }
  SECTION("huge shape overflows") {
    expect(make_file(R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,4]}})", 4), "too large");
  }
  SECTION("end before begin") {
    expect(make_file(R"({"a":{"dtype":"I8","shape":[0],"data_offsets":[4,2]}})", 4), "before begin");
  }
  SECTION("overlapping ranges") {
    expect(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                     12),
           "overlap");
  }
  SECTION("missing offsets") { expect(make_file(R"({"a":{"dtype":"F32","shape":[1]}})", 4), "data_offsets"); }
  SECTION("metadata not strings") { expect(make_file(R"({"__metadata__":{"x":1}})", 0), "metadata"); }
}

TEST_CASE("random byte corruption of a valid file never crashes the parser") {
  const auto good = make_file(kGood, 22);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    auto bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<unsigned char>(rng());
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    auto h = parse_safetensors_header(bytes, "fuzz");
    if (h.is_ok()) {
      for (const auto& e : h->entries) CHECK(h->data_offset + e.end <= bytes.size());
    }
  }
}

TEST_CASE("sharded checkpoints are read through the index") {
  const fs::path dir = temp_dir("shards");
  write(dir / "model-00001-of-00002.safetensors",
        make_file(R"({"w1":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8));
  write(dir / "model-00002-of-00002.safetensors",
        make_file(R"({"w2":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})", 8));
  json index = {
      {"metadata", {{"total_size", 16}}},
      {"weight_map", {{"w1", "model-00001-of-00002.safetensors"}, {"w2", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  auto ckpt = SafetensorsCheckpoint::open(dir.string());
  REQUIRE(ckpt.is_ok());
  CHECK(ckpt->names() == std::vector<std::string>{"w1", "w2"});
  CHECK(ckpt->total_bytes() == 16);
  auto w2 = ckpt->find("w2");
  REQUIRE(w2.has_value());
  CHECK(w2->dtype() == DType::kBF16);
  CHECK(w2->size(0) == 2);
  CHECK(w2->data<unsigned char>()[3] == 3);
  CHECK_FALSE(ckpt->find("w3").has_value());

  // An index naming a tensor its shard lacks is an error naming the tensor.
  index["weight_map"]["w3"] = "model-00002-of-00002.safetensors";
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  auto bad = SafetensorsCheckpoint::open(dir.string());
  CHECK(bad.status().message().find("'w3'") != std::string::npos);

  // A shard name that escapes the folder is refused.
  index["weight_map"]["w3"] = "../etc/passwd";
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  CHECK(SafetensorsCheckpoint::open(dir.string()).status().message().find("plain file name") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a folder without a checkpoint says what to do") {
  const fs::path dir = temp_dir("empty");
  auto ckpt = SafetensorsCheckpoint::open(dir.string());
  CHECK(ckpt.status().code() == StatusCode::kNotFound);
  CHECK(ckpt.status().message().find("--load-format dummy") != std::string::npos);
  fs::remove_all(dir);
}

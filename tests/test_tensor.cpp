#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstdint>

#include "core/device.hpp"
#include "core/dtype.hpp"
#include "core/tensor.hpp"

using namespace photon;

TEST_CASE("CPU allocator aligns to 64 bytes, tracks use and enforces its limit") {
  CpuAllocator a(1000);
  auto p = a.allocate(100);
  REQUIRE(p.is_ok());
  CHECK(reinterpret_cast<uintptr_t>(*p) % 64 == 0);
  CHECK(a.bytes_in_use() == 100);
  auto too_big = a.allocate(901);
  CHECK(too_big.status().code() == StatusCode::kOutOfMemory);
  CHECK(too_big.status().message().find("limit") != std::string::npos);
  a.deallocate(*p, 100);
  CHECK(a.bytes_in_use() == 0);
  CHECK(a.peak_bytes() == 100);
}

TEST_CASE("CPU allocations of 2 MiB and more are aligned to 2 MiB, usable and released") {
  CpuAllocator a;
  for (const size_t bytes : {CpuAllocator::kHugePage, CpuAllocator::kHugePage * 3 + 12345}) {
    auto p = a.allocate(bytes);
    REQUIRE(p.is_ok());
    CHECK(reinterpret_cast<uintptr_t>(*p) % CpuAllocator::kHugePage == 0);
    auto* bytes_at = static_cast<unsigned char*>(*p);
    bytes_at[0] = 1;
    bytes_at[bytes - 1] = 2;  // the whole range is writable
    CHECK(bytes_at[0] + bytes_at[bytes - 1] == 3);
    a.deallocate(*p, bytes);
  }
  CHECK(a.bytes_in_use() == 0);
}

TEST_CASE("tensors own or view memory and slice rows") {
  CpuAllocator a;
  auto t = Tensor::empty({3, 4}, DType::kF32, a);
  REQUIRE(t.is_ok());
  CHECK(t->numel() == 12);
  CHECK(t->nbytes() == 48);
  CHECK(t->is_contiguous());
  CHECK(t->stride(0) == 4);
  for (int i = 0; i < 12; ++i) t->data<float>()[i] = static_cast<float>(i);
  Tensor rows = t->slice_rows(1, 3);
  CHECK(rows.size(0) == 2);
  CHECK(rows.data<float>()[0] == 4.0f);
  Tensor flat = t->reshape({12});
  CHECK(flat.size(0) == 12);
  float local[6] = {};
  Tensor v = Tensor::view(local, {2, 3}, DType::kF32, Device::cpu());
  CHECK(v.raw() == local);
  {
    Tensor keep = *t;  // copies share the buffer
    t = Tensor::empty({1}, DType::kF32, a);
    CHECK(keep.data<float>()[5] == 5.0f);
  }
}

TEST_CASE("bf16 and f16 conversions round to nearest even") {
  for (float f : {0.0f, 1.0f, -2.5f, 3.140625f, 65504.0f, 1e-5f, -1e30f}) {
    CHECK(bf16_to_f32(f32_to_bf16(f)) == bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(f)))));
    CHECK(std::abs(bf16_to_f32(f32_to_bf16(f)) - f) <= std::abs(f) * (1.0f / 256));
  }
  CHECK(f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80);  // tie -> even
  CHECK(f32_to_bf16(1.0f + 3.0f / 256) == 0x3f82);  // tie -> even (up)
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  for (float f : {0.0f, 1.0f, -2.5f, 0.333251953125f, 65504.0f, 6.0e-8f, -3.0e-5f}) {
    CHECK(std::abs(f16_to_f32(f32_to_f16(f)) - f) <= std::abs(f) * (1.0f / 1024) + 6e-8f);
  }
  CHECK(f32_to_f16(1e6f) == 0x7c00);
  CHECK(f16_to_f32(0x3c00) == 1.0f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(parse_dtype("bfloat16") == DType::kBF16);
  CHECK(dtype_from_safetensors("F8_E4M3") == DType::kFP8E4M3);
  CHECK_FALSE(dtype_from_safetensors("Q4").has_value());
}

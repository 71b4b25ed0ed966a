// Each CPU kernel against a naive double-precision reference on fresh random inputs.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/generators/catch_generators_range.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "cpu/isa.hpp"
#include "cpu/kernels.hpp"
#include "reference.hpp"

using namespace photon;
using photon::test::max_violation;
using photon::test::random_floats;

namespace {

// Every matmul path this CPU can run, lowest first (each is compared with the double reference).
std::vector<cpu::Isa> available_isas() {
  std::vector<cpu::Isa> isas;
  for (const cpu::Isa isa : {cpu::Isa::kPortable, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAmx}) {
    if (isa <= cpu::detected_isa()) isas.push_back(isa);
  }
  return isas;
}

// Rounds f32 values to `dtype` and back, so the reference sees exactly the weights the kernel sees.
std::vector<char> encode(const std::vector<float>& v, DType dtype, std::vector<float>& rounded) {
  std::vector<char> bytes(v.size() * dtype_size(dtype));
  cpu::from_f32(v.data(), static_cast<int64_t>(v.size()), dtype, bytes.data());
  rounded.resize(v.size());
  cpu::to_f32(bytes.data(), dtype, static_cast<int64_t>(v.size()), rounded.data());
  return bytes;
}

}  // namespace

TEST_CASE("the CPU kernel path is detected, named, and capped by set_isa_cap") {
  for (const cpu::Isa isa : {cpu::Isa::kPortable, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAmx}) {
    CHECK(cpu::parse_isa(cpu::isa_name(isa)) == isa);
  }
  CHECK(!cpu::parse_isa("avx").has_value());
  CHECK(!cpu::parse_isa("").has_value());
  CHECK(cpu::active_isa() <= cpu::detected_isa());
  cpu::set_isa_cap(cpu::Isa::kPortable);
  CHECK(cpu::active_isa() == cpu::Isa::kPortable);
  cpu::set_isa_cap(cpu::Isa::kAmx);  // a cap above the CPU's path changes nothing
  CHECK(cpu::active_isa() <= cpu::detected_isa());
  cpu::set_isa_cap(std::nullopt);
}

// Sizes cover vector tails, every token tile (6, 4, 2 and 1 rows), k past one 512-column block of the prompt GEMM, and
// for AMX (k a multiple of 32): one and two weight tiles, weight rows past the last tile, one and two token tiles, and
// tokens past one packed block of 128; for the AVX2 and AVX-512 prompt GEMMs (48 tokens and more): a short last
// column block, a partial panel of rows (also narrower than one AVX-512 vector), a partial tile of tokens and tokens
// past one packed block (512 or 516).
TEST_CASE("matmul matches a double reference for every weight dtype, odd sizes and every path") {
  const auto dtype = GENERATE(DType::kF32, DType::kF16, DType::kBF16);
  const auto isa = GENERATE(from_range(available_isas()));
  std::mt19937 rng(static_cast<unsigned>(dtype_size(dtype) * 31 + static_cast<int>(isa)));
  cpu::set_isa_cap(isa);
  for (auto [m, k, n] : {std::tuple{1, 64, 8},
                         {1, 37, 13},
                         {3, 100, 9},
                         {7, 257, 33},
                         {5, 16, 1},
                         {70, 48, 21},
                         {13, 1100, 11},
                         {2, 96, 16},
                         {20, 64, 37},
                         {33, 128, 50},
                         {131, 64, 96},
                         {17, 576, 48},
                         {50, 300, 19},
                         {520, 40, 17},
                         {60, 200, 9},
                         {64, 301, 64}}) {
    const auto x = random_floats(static_cast<size_t>(m * k), rng);
    std::vector<float> w_rounded;
    const auto w = encode(random_floats(static_cast<size_t>(n * k), rng), dtype, w_rounded);
    std::vector<float> out(static_cast<size_t>(m * n), NAN);
    cpu::matmul(x.data(), m, k, k, w.data(), dtype, n, out.data());
    std::vector<double> ref(out.size());
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double acc = 0;
        for (int kk = 0; kk < k; ++kk)
          acc += static_cast<double>(x[static_cast<size_t>(i * k + kk)]) * w_rounded[static_cast<size_t>(j * k + kk)];
        ref[static_cast<size_t>(i * n + j)] = acc;
      }
    INFO("m=" << m << " k=" << k << " n=" << n << " dtype=" << dtype_name(dtype) << " path=" << cpu::isa_name(isa));
    CHECK(max_violation(out, ref, 1e-5 * k, 1e-5) <= 1.0);
  }
  cpu::set_isa_cap(std::nullopt);
}

TEST_CASE(
    "int8 quantization rounds each group to its own scale, and matmul_int8 is the matmul over the dequantized "
    "weights") {
  const auto isa = GENERATE(from_range(available_isas()));
  cpu::set_isa_cap(isa);
  std::mt19937 rng(5 + static_cast<unsigned>(isa));
  // k not a multiple of the group (a shorter last group), k below one group, a whole-row group (channel), and prompt
  // shapes (48 tokens and more: the packed GEMM, whole panels through the transposing packer) whose groups straddle
  // its column blocks (128 columns on the AVX-512 path, 256 on AVX2) and whose last columns are no multiple of 16.
  for (auto [m, k, n, group] : {std::tuple{1, 64, 8, 32},
                                {3, 200, 9, 64},
                                {1, 48, 13, 128},
                                {6, 256, 33, 128},
                                {70, 96, 5, 32},
                                {2, 80, 7, 80},
                                {5, 52, 6, 52},
                                {60, 300, 19, 32},
                                {64, 600, 40, 80},
                                // AMX tiles: groups of one, two and four 32-column steps and a whole-row group; two
                                // and one weight tiles a chunk plus AVX-512 rows; token blocks and partial tiles; the
                                // fewest tokens AMX takes
                                {40, 192, 48, 32},
                                {300, 256, 67, 64},
                                {17, 96, 16, 128},
                                {9, 320, 35, 128},
                                {8, 64, 17, 256}}) {
    INFO("m=" << m << " k=" << k << " n=" << n << " group=" << group << " path=" << cpu::isa_name(isa));
    std::vector<float> w = random_floats(static_cast<size_t>(n * k), rng);
    for (int kk = 0; kk < k; ++kk) w[static_cast<size_t>(kk)] = 0.0f;  // an all-zero row: scale 0, values 0
    const int64_t groups = (k + group - 1) / group;
    std::vector<int8_t> q(w.size());
    std::vector<float> scales(static_cast<size_t>(n * groups));
    cpu::quantize_int8(w.data(), DType::kF32, n, k, group, q.data(), scales.data());
    // The reference quantization, element by element, and the dequantized weights.
    std::vector<float> dequantized(w.size());
    for (int j = 0; j < n; ++j)
      for (int64_t g = 0; g < groups; ++g) {
        float max_abs = 0.0f;
        for (int64_t c = g * group; c < std::min<int64_t>(k, (g + 1) * group); ++c)
          max_abs = std::max(max_abs, std::fabs(w[static_cast<size_t>(j * k + c)]));
        const float scale = max_abs / 127.0f;
        REQUIRE(scales[static_cast<size_t>(j * groups + g)] == scale);
        for (int64_t c = g * group; c < std::min<int64_t>(k, (g + 1) * group); ++c) {
          const size_t at = static_cast<size_t>(j * k + c);
          const float expect = scale == 0.0f ? 0.0f : std::nearbyint(w[at] / scale);
          REQUIRE(static_cast<float>(q[at]) == expect);
          REQUIRE(std::abs(q[at]) <= 127);
          dequantized[at] = static_cast<float>(q[at]) * scale;
          CHECK(std::fabs(dequantized[at] - w[at]) <= 0.5f * scale * 1.0001f);  // round to nearest
        }
      }
    // Activation rows ldx = k + 5 apart (a slice of a wider buffer), the gaps NaN: a path that reads them fails.
    const int64_t ldx = k + 5;
    auto x = random_floats(static_cast<size_t>(m * ldx), rng);
    for (int i = 0; i < m; ++i)
      for (int64_t c = k; c < ldx; ++c) x[static_cast<size_t>(i * ldx + c)] = NAN;
    std::vector<float> out(static_cast<size_t>(m * n), NAN);
    cpu::matmul_int8(x.data(), m, k, ldx, q.data(), scales.data(), group, n, out.data());
    std::vector<double> ref(out.size());
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double acc = 0;
        for (int kk = 0; kk < k; ++kk)
          acc += double{x[static_cast<size_t>(i * ldx + kk)]} * dequantized[static_cast<size_t>(j * k + kk)];
        ref[static_cast<size_t>(i * n + j)] = acc;
      }
    CHECK(max_violation(out, ref, 1e-5 * k, 1e-5) <= 1.0);
  }
  cpu::set_isa_cap(std::nullopt);
}

// Rows that cross SplitMix64's chunks of 2^16 draws, odd widths and offsets (a tensor-parallel shard's block), and
// rows past the tensor's end (zeros).
TEST_CASE("dummy weights on the CPU are dummy_value's bits on every path") {
  const auto isa = GENERATE(from_range(available_isas()));
  cpu::set_isa_cap(isa);
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const DummyFill& f :
         {DummyFill{7, 0.0f, 0.05f, 3, 70001, 3, 70001, 0, 0}, DummyFill{11, 1.0f, 0.2f, 10, 131, 6, 37, 5, 90},
          DummyFill{3, 0.0f, 1.5f, 4, 65536, 2, 65533, 1, 3}}) {
      INFO("cols=" << f.cols << " dtype=" << dtype_name(dtype) << " path=" << cpu::isa_name(isa));
      const size_t count = static_cast<size_t>(f.rows * f.cols);
      std::vector<char> got(count * dtype_size(dtype)), want(got.size());
      cpu::fill_dummy(f, dtype, got.data());
      std::vector<float> values(count);
      for (int64_t r = 0; r < f.rows; ++r)
        for (int64_t c = 0; c < f.cols; ++c) values[static_cast<size_t>(r * f.cols + c)] = dummy_value(f, r, c);
      cpu::from_f32(values.data(), static_cast<int64_t>(count), dtype, want.data());
      CHECK(std::memcmp(got.data(), want.data(), got.size()) == 0);
      CHECK(std::any_of(values.begin(), values.end(), [](float v) { return v != 0.0f; }));
    }
  }
  cpu::set_isa_cap(std::nullopt);
}

TEST_CASE("matmul reads x rows with a stride") {
  std::mt19937 rng(3);
  const int m = 3, k = 40, n = 5, ldx = 50;
  const auto x = random_floats(static_cast<size_t>(m * ldx), rng);
  const auto w = random_floats(static_cast<size_t>(n * k), rng);
  std::vector<float> out(static_cast<size_t>(m * n));
  cpu::matmul(x.data(), m, k, ldx, w.data(), DType::kF32, n, out.data());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int kk = 0; kk < k; ++kk)
        acc += static_cast<double>(x[static_cast<size_t>(i * ldx + kk)]) * w[static_cast<size_t>(j * k + kk)];
      CHECK(std::abs(out[static_cast<size_t>(i * n + j)] - acc) < 1e-4);
    }
}

TEST_CASE("rms_norm and add_rms_norm") {
  std::mt19937 rng(11);
  const int rows = 5, dim = 67;
  const float eps = 1e-5f;
  auto x = random_floats(rows * dim, rng, -3, 3);
  const auto w = random_floats(dim, rng, 0.5f, 1.5f);
  const auto resid0 = random_floats(rows * dim, rng, -3, 3);
  std::vector<double> ref(rows * dim), ref_resid(rows * dim), ref_add(rows * dim);
  for (int r = 0; r < rows; ++r) {
    double ss = 0, ss2 = 0;
    for (int i = 0; i < dim; ++i) {
      ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
      ref_resid[r * dim + i] = static_cast<double>(resid0[r * dim + i]) + x[r * dim + i];
      ss2 += ref_resid[r * dim + i] * ref_resid[r * dim + i];
    }
    for (int i = 0; i < dim; ++i) {
      ref[r * dim + i] = x[r * dim + i] / std::sqrt(ss / dim + eps) * w[i];
      ref_add[r * dim + i] = ref_resid[r * dim + i] / std::sqrt(ss2 / dim + eps) * w[i];
    }
  }
  std::vector<float> out(rows * dim);
  cpu::rms_norm(x.data(), w.data(), rows, dim, eps, out.data());
  CHECK(max_violation(out, ref, 1e-6, 1e-5) <= 1.0);
  auto resid = resid0;
  cpu::add_rms_norm(resid.data(), x.data(), w.data(), rows, dim, eps, out.data());
  CHECK(max_violation(resid, ref_resid, 1e-6, 1e-6) <= 1.0);
  CHECK(max_violation(out, ref_add, 1e-6, 1e-5) <= 1.0);
  cpu::rms_norm(x.data(), w.data(), rows, dim, eps, x.data());  // in place
  CHECK(max_violation(x, ref, 1e-6, 1e-5) <= 1.0);
}

TEST_CASE("swiglu, embed and gather_rows") {
  std::mt19937 rng(5);
  // Rows of [gate | up] with padding between them, and a row count and width that split unevenly over threads.
  for (auto [rows, inter] : {std::pair{1, 1001}, {7, 5000}, {3, 3}}) {
    const int64_t ld = 2 * inter + 5, ldo = inter + 2;
    const auto gate_up = random_floats(static_cast<size_t>(rows * ld), rng, -8, 8);
    std::vector<float> out(static_cast<size_t>(rows * ldo), 7.0f);
    cpu::swiglu(gate_up.data(), rows, inter, ld, out.data(), ldo);
    std::vector<float> got;
    std::vector<double> ref;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < inter; ++i) {
        const double g = gate_up[static_cast<size_t>(r * ld + i)];
        ref.push_back(g / (1.0 + std::exp(-g)) * gate_up[static_cast<size_t>(r * ld + inter + i)]);
        got.push_back(out[static_cast<size_t>(r * ldo + i)]);
      }
      CHECK(out[static_cast<size_t>(r * ldo + inter)] == 7.0f);  // nothing written past a row
    }
    CHECK(max_violation(got, ref, 1e-6, 1e-5) <= 1.0);
  }

  std::vector<float> table_rounded;
  const auto table = encode(random_floats(10 * 6, rng), DType::kBF16, table_rounded);
  const int32_t ids[] = {9, 0, 4, 4};
  std::vector<float> e(4 * 6);
  cpu::embed(ids, 4, nullptr, table.data(), DType::kBF16, 10, 6, 0, e.data());
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 6; ++i) CHECK(e[t * 6 + i] == table_rounded[ids[t] * 6 + i]);
  // Placeholders -(k + 1) take the k-th sampled id.
  const int32_t sampled[] = {7, 2};
  const int32_t with_placeholders[] = {-2, 0, -1, 4};
  std::vector<float> p(4 * 6);
  cpu::embed(with_placeholders, 4, sampled, table.data(), DType::kBF16, 10, 6, 0, p.data());
  const int32_t resolved[] = {2, 0, 7, 4};
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 6; ++i) CHECK(p[t * 6 + i] == table_rounded[resolved[t] * 6 + i]);
  // A vocabulary slice: the table holds ids [4, 8); other ids embed as zeros.
  std::vector<float> slice(4 * 6, -1.0f);
  cpu::embed(ids, 4, nullptr, table.data() + 4 * 6 * 2, DType::kBF16, 4, 6, 4, slice.data());
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 6; ++i) CHECK(slice[t * 6 + i] == (ids[t] == 4 ? table_rounded[4 * 6 + i] : 0.0f));

  const int32_t rows[] = {3, 1};
  std::vector<float> gathered(2 * 6);
  cpu::gather_rows(e.data(), rows, 2, 6, gathered.data());
  for (int i = 0; i < 6; ++i) {
    CHECK(gathered[i] == e[3 * 6 + i]);
    CHECK(gathered[6 + i] == e[1 * 6 + i]);
  }
}

TEST_CASE("rope rotates halves by position-dependent angles") {
  std::mt19937 rng(9);
  const int t = 4, heads = 3, hd = 10, half = hd / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) inv[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / hd));
  const int32_t pos[] = {0, 1, 17, 1000};
  std::vector<float> c(t * half), s(t * half);
  cpu::rope_cos_sin(pos, t, inv.data(), half, c.data(), s.data());
  auto x = random_floats(t * heads * hd, rng);
  const auto x0 = x;
  cpu::rope(x.data(), t, heads, hd, heads * hd, c.data(), s.data());
  std::vector<double> ref(x.size());
  for (int tt = 0; tt < t; ++tt)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < half; ++i) {
        const double ang = static_cast<double>(static_cast<float>(pos[tt]) * inv[i]);
        const size_t b = static_cast<size_t>(tt * heads * hd + h * hd);
        ref[b + i] = x0[b + i] * std::cos(ang) - x0[b + i + half] * std::sin(ang);
        ref[b + i + half] = x0[b + i + half] * std::cos(ang) + x0[b + i] * std::sin(ang);
      }
  CHECK(max_violation(x, ref, 1e-6, 1e-5) <= 1.0);
}

TEST_CASE("paged attention matches dense causal GQA attention on every path") {
  const auto kv_dtype = GENERATE(DType::kF32, DType::kBF16);
  const auto isa = GENERATE(from_range(available_isas()));
  // 64 and 128 take the kernel's compiled-in head dimensions; 12 its general form.
  const int hd = GENERATE(12, 64, 128);
  cpu::set_isa_cap(isa);
  INFO("path=" << cpu::isa_name(isa) << " head_dim=" << hd);
  std::mt19937 rng(kv_dtype == DType::kF32 ? 21 : 22);
  const int heads = 6, kv_heads = 2, bs = 4, num_blocks = 64;
  // A fresh prompt, a prompt chunk after cached context, a single decode token, and a long chunk (several query
  // tiles of 16 and key blocks of 64, the last ones partly visible).
  const std::vector<int32_t> ctx = {7, 13, 22, 150};
  const std::vector<int32_t> q_lens = {7, 5, 1, 70};
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);  // blocks scattered in the cache
  std::vector<int32_t> query_start = {0}, block_indptr = {0}, block_indices;
  size_t next_block = 0;
  for (size_t s = 0; s < ctx.size(); ++s) {
    query_start.push_back(query_start.back() + q_lens[s]);
    const int nb = (ctx[s] + bs - 1) / bs;
    for (int b = 0; b < nb; ++b) block_indices.push_back(perm[next_block++]);
    block_indptr.push_back(static_cast<int32_t>(block_indices.size()));
  }
  // Whole-context K/V per sequence; all of it is written to the cache (earlier context as if from earlier steps).
  std::vector<std::vector<float>> keys(ctx.size()), values(ctx.size());
  std::vector<float> cache(static_cast<size_t>(num_blocks) * 2 * kv_heads * bs * hd * 4);
  PagedKv kv;
  kv.cache = cache.data();
  kv.element_bytes = static_cast<int32_t>(dtype_size(kv_dtype));
  kv.num_kv_heads = kv_heads;
  kv.block_size = bs;
  kv.head_dim = hd;
  for (size_t s = 0; s < ctx.size(); ++s) {
    keys[s] = random_floats(static_cast<size_t>(ctx[s] * kv_heads * hd), rng);
    values[s] = random_floats(static_cast<size_t>(ctx[s] * kv_heads * hd), rng);
    if (kv_dtype == DType::kBF16) {
      std::vector<float> tmp;
      encode(keys[s], DType::kBF16, tmp);
      keys[s] = tmp;
      encode(values[s], DType::kBF16, tmp);
      values[s] = tmp;
    }
    std::vector<int32_t> slots(static_cast<size_t>(ctx[s]));
    for (int p = 0; p < ctx[s]; ++p) slots[p] = block_indices[block_indptr[s] + p / bs] * bs + p % bs;
    kv.slot_mapping = slots.data();
    cpu::cache_write(keys[s].data(), values[s].data(), kv_heads * hd, ctx[s], kv);
  }
  const int total_q = query_start.back();
  const auto q = random_floats(static_cast<size_t>(total_q * heads * hd), rng);
  std::vector<float> out(q.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  kv.num_seqs = static_cast<int32_t>(ctx.size());
  kv.query_start = query_start.data();
  kv.seq_lens = ctx.data();
  kv.block_indptr = block_indptr.data();
  kv.block_indices = block_indices.data();
  cpu::paged_attention(q.data(), heads, kv, scale, out.data());
  std::vector<double> ref(out.size());
  for (size_t s = 0; s < ctx.size(); ++s) {
    for (int i = 0; i < q_lens[s]; ++i) {
      const int t = query_start[s] + i;
      const int pos = ctx[s] - q_lens[s] + i;
      for (int h = 0; h < heads; ++h) {
        const int kvh = h / (heads / kv_heads);
        std::vector<double> sc(static_cast<size_t>(pos + 1));
        double mx = -1e300;
        for (int j = 0; j <= pos; ++j) {
          double d = 0;
          for (int e = 0; e < hd; ++e)
            d += static_cast<double>(q[(t * heads + h) * hd + e]) * keys[s][(j * kv_heads + kvh) * hd + e];
          sc[j] = d * scale;
          mx = std::max(mx, sc[j]);
        }
        double den = 0;
        for (double& v : sc) den += (v = std::exp(v - mx));
        for (int e = 0; e < hd; ++e) {
          double acc = 0;
          for (int j = 0; j <= pos; ++j) acc += sc[j] * values[s][(j * kv_heads + kvh) * hd + e];
          ref[(t * heads + h) * hd + e] = acc / den;
        }
      }
    }
  }
  CHECK(max_violation(out, ref, 1e-5, 1e-4) <= 1.0);
  cpu::set_isa_cap(std::nullopt);
}

TEST_CASE("log_sum_exp matches a double reference on every path, with masked, NaN and infinite logits") {
  const auto isa = GENERATE(from_range(available_isas()));
  cpu::set_isa_cap(isa);
  INFO("path=" << cpu::isa_name(isa));
  std::mt19937 rng(31);
  const auto reference = [](const std::vector<float>& x) {
    const double m = *std::max_element(x.begin(), x.end());
    double sum = 0.0;
    for (float v : x) sum += std::exp(static_cast<double>(v) - m);
    return m + std::log(sum);
  };
  // Vocabulary sizes around the 128-term blocks and the vector widths, and Llama 3's; logits spread as a model's.
  for (const int64_t n : {1, 7, 127, 128, 129, 1000, 128256}) {
    std::vector<float> x = random_floats(static_cast<size_t>(n), rng, -8.0f, 8.0f);
    INFO("n=" << n);
    const double want = reference(x);
    CHECK(std::abs(cpu::log_sum_exp(x) - want) <= 1e-6 * std::max(1.0, std::abs(want)));
    // Masked logits (-inf) add nothing; far-below ones (e^-100 against the maximum) next to nothing.
    if (n > 1) {
      for (int64_t i = 1; i < n; i += 3) x[static_cast<size_t>(i)] = -INFINITY;
      x[0] = -100.0f + *std::max_element(x.begin() + 1, x.end());
      const double masked = reference(x);
      CHECK(std::abs(cpu::log_sum_exp(x) - masked) <= 1e-6 * std::max(1.0, std::abs(masked)));
    }
  }
  CHECK(std::isnan(cpu::log_sum_exp(std::vector<float>{1.0f, NAN, 2.0f})));
  CHECK(std::isnan(cpu::log_sum_exp(std::vector<float>{NAN, 1.0f})));
  CHECK(std::isnan(cpu::log_sum_exp(std::vector<float>{1.0f, INFINITY})));
  CHECK(std::isnan(cpu::log_sum_exp(std::vector<float>{-INFINITY, -INFINITY})));
  CHECK(std::abs(cpu::log_sum_exp(std::vector<float>{0.0f, 0.0f}) - std::log(2.0)) < 1e-7);
  cpu::set_isa_cap(std::nullopt);
}

TEST_CASE("cache_write skips negative slots") {
  std::vector<float> cache(2 * 2 * 1 * 2 * 2, -7.0f);
  const int32_t slots[] = {3, -1};
  PagedKv kv;
  kv.cache = cache.data();
  kv.element_bytes = 4;
  kv.num_kv_heads = 1;
  kv.block_size = 2;
  kv.head_dim = 2;
  kv.slot_mapping = slots;
  const float k[] = {1, 2, 3, 4}, v[] = {5, 6, 7, 8};
  cpu::cache_write(k, v, 2, 2, kv);
  // slot 3 = block 1, offset 1: keys at ((1*2+0)*1+0)*2+1 rows of 2.
  CHECK(cache[(2 * 2 + 1) * 2] == 1.0f);
  CHECK(cache[(3 * 2 + 1) * 2 + 1] == 6.0f);
  CHECK(std::count(cache.begin(), cache.end(), -7.0f) == static_cast<long>(cache.size()) - 4);
}

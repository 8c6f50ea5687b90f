//===- GeneratedPrimitivesTest.cpp - what generated kernels call ----------===//
//
// kernel_abi.h, "Generated kernels": kiln_k_parallel_for covers its range
// exactly once in align-multiple chunks that do not depend on the thread
// count (one chunk when the work is too small for threads); kiln_k_widen /
// kiln_k_narrow equal the scalar conversions bit for bit; a linear tile over
// f16 / bf16 weights equals the float32 tile on the widened weights; the
// batched-decode tile (2 to 15 tokens: the serving engine's decode steps)
// matches a double reference and gives each token the same bits whatever
// the number of tokens beside it; with batch-invariant linears on, every
// weight kind gives each token the same bits for any token count (1 to 70:
// the GEMV, batched and GEMM ranges of the default paths) and any row range.
//
//===----------------------------------------------------------------------===//
#include "cpu/Kernels.h"
#include "kiln_rt/api.h"
#include "kiln_rt/block_formats.h"
#include "kiln_rt/kernel_abi.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

namespace {

struct Chunks {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> seen;
};

void record(void *env, int64_t b, int64_t e) {
  auto *c = static_cast<Chunks *>(env);
  std::lock_guard<std::mutex> lock(c->mu);
  c->seen.emplace_back(b, e);
}

std::vector<std::pair<int64_t, int64_t>> chunksOf(int64_t count, int64_t align,
                                                  int64_t work) {
  Chunks c;
  kiln_k_parallel_for(count, align, work, record, &c);
  std::sort(c.seen.begin(), c.seen.end());
  return c.seen;
}

TEST(GeneratedPrimitives, ParallelForChunks) {
  for (int threads : {1, 2, 3}) {
    kiln_rt_set_threads(threads);
    // Enough work for threads: align-multiple chunks covering [0, 1000).
    auto big = chunksOf(1000, 16, int64_t(1) << 20);
    ASSERT_FALSE(big.empty());
    int64_t next = 0;
    for (auto [b, e] : big) {
      EXPECT_EQ(b, next);
      EXPECT_EQ(b % 16, 0);
      EXPECT_LT(b, e);
      next = e;
    }
    EXPECT_EQ(next, 1000);
    EXPECT_LE(big.size(), 32u);
    EXPECT_EQ(big, chunksOf(1000, 16, int64_t(1) << 20)) << threads;
    // Too little work: the whole range in one call.
    auto small = chunksOf(1000, 16, 1000);
    ASSERT_EQ(small.size(), 1u);
    EXPECT_EQ(small[0], std::make_pair(int64_t(0), int64_t(1000)));
    EXPECT_TRUE(chunksOf(0, 16, 1 << 20).empty());
  }
  kiln_rt_set_threads(0);
}

TEST(GeneratedPrimitives, WidenNarrowMatchScalar) {
  std::vector<uint16_t> h(65536);
  for (size_t i = 0; i < h.size(); ++i)
    h[i] = uint16_t(i);
  std::vector<float> f(h.size());
  kiln_k_widen(KILN_ELEM_F16, h.data(), f.data(), int64_t(h.size()));
  for (size_t i = 0; i < h.size(); ++i)
    ASSERT_EQ(kiln_float_bits(f[i]), kiln_float_bits(kiln_f16_to_float(h[i])))
        << "f16 " << i;
  kiln_k_widen(KILN_ELEM_BF16, h.data(), f.data(), int64_t(h.size()));
  for (size_t i = 0; i < h.size(); ++i)
    ASSERT_EQ(kiln_float_bits(f[i]), kiln_float_bits(kiln_bf16_to_float(h[i])))
        << "bf16 " << i;
  // Rounding: random bit patterns (NaNs, infinities, subnormals, ties).
  std::mt19937 rng(7);
  std::vector<float> x(1 << 16);
  for (float &v : x)
    v = kiln_bits_float(uint32_t(rng()));
  x[0] = 65520.0f;                 // f16 overflow boundary: rounds to inf
  x[1] = 0x1p-25f;                 // f16 tie at the smallest subnormal
  x[2] = kiln_bits_float(0x3f808000u); // bf16 tie, rounds to even
  std::vector<uint16_t> y(x.size());
  kiln_k_narrow(KILN_ELEM_F16, x.data(), y.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(y[i], kiln_float_to_f16(x[i])) << "f16 " << x[i];
  kiln_k_narrow(KILN_ELEM_BF16, x.data(), y.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(y[i], kiln_float_to_bf16(x[i])) << "bf16 " << x[i];
  EXPECT_EQ(kiln_float_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(kiln_float_to_f16(0x1p-25f), 0x0000);
  EXPECT_EQ(kiln_float_to_bf16(kiln_bits_float(0x3f808000u)), 0x3f80);
}

/// Rows [o0, o1) of x [n, in] * W^T for 16-bit weights against a double
/// reference on the widened weights: decode (n = 1) and prefill (n = 20).
TEST(GeneratedPrimitives, LinearTileHalfWeights) {
  const int64_t in = 300, out = 70;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int32_t kind : {KILN_WEIGHT_F16, KILN_WEIGHT_BF16}) {
    std::vector<uint16_t> w(size_t(in * out));
    std::vector<float> wf(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      float v = dist(rng);
      w[i] = kind == KILN_WEIGHT_F16 ? kiln_float_to_f16(v)
                                     : kiln_float_to_bf16(v);
      wf[i] = kind == KILN_WEIGHT_F16 ? kiln_f16_to_float(w[i])
                                      : kiln_bf16_to_float(w[i]);
    }
    kiln_linear_weight desc{};
    desc.kind = kind;
    desc.data = w.data();
    for (int64_t n : {1, 20}) {
      std::vector<float> x(size_t(n * in));
      for (float &v : x)
        v = dist(rng);
      const int64_t o0 = 5, o1 = 53, rows = o1 - o0;
      std::vector<float> c(size_t(n * rows), -1.0f);
      kiln_k_linear_tile(&desc, x.data(), n, in, o0, o1, c.data(), rows);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          double ref = 0, mag = 0;
          for (int64_t i = 0; i < in; ++i) {
            ref += double(x[t * in + i]) * wf[(o0 + r) * in + i];
            mag += std::fabs(double(x[t * in + i]) * wf[(o0 + r) * in + i]);
          }
          ASSERT_NEAR(c[t * rows + r], ref, 1e-5 * mag + 1e-6)
              << "kind " << kind << " n " << n << " t " << t << " row " << r;
        }
    }
  }
}

/// The serving engine's decode steps: 2..15 token rows through
/// kiln_k_linear_tile on block-format and f16 weights. Each row matches a
/// double reference on the decoded weights, and a row's result does not
/// depend on how many rows share the call (batch invariance).
TEST(GeneratedPrimitives, LinearTileBatchedDecode) {
  const int64_t in = 512, out = 40, o0 = 3, o1 = 37, rows = o1 - o0;
  const int64_t kMax = 15; // the batched path up to 32 rows, or 15 on AMX
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  struct Case {
    int32_t kind, format;
  };
  for (Case k : {Case{KILN_WEIGHT_BLOCKS, KILN_BLOCK_Q4_0},
                 Case{KILN_WEIGHT_BLOCKS, KILN_BLOCK_Q4_1},
                 Case{KILN_WEIGHT_BLOCKS, KILN_BLOCK_Q8_0},
                 Case{KILN_WEIGHT_BLOCKS, KILN_BLOCK_Q5_1},
                 Case{KILN_WEIGHT_F16, 0}}) {
    std::vector<uint8_t> w;
    std::vector<float> wf(size_t(in * out));
    if (k.kind == KILN_WEIGHT_BLOCKS) {
      const int64_t bytes = kiln_block_bytes(k.format), blocks = in / 32;
      w.resize(size_t(out * blocks * bytes));
      for (uint8_t &b : w)
        b = uint8_t(byte(rng));
      for (int64_t i = 0; i < out * blocks; ++i) { // finite d (and m)
        uint8_t *blk = w.data() + i * bytes;
        uint16_t d = kiln_float_to_f16(0.05f * dist(rng));
        std::memcpy(blk, &d, 2);
        if (k.format == KILN_BLOCK_Q4_1 || k.format == KILN_BLOCK_Q5_1) {
          uint16_t m = kiln_float_to_f16(0.1f * dist(rng));
          std::memcpy(blk + 2, &m, 2);
        }
      }
      for (int64_t o = 0; o < out; ++o)
        kiln_block_decode_row(k.format, w.data() + o * blocks * bytes, in,
                              wf.data() + o * in);
    } else {
      w.resize(size_t(in * out) * 2);
      for (int64_t i = 0; i < in * out; ++i) {
        uint16_t h = kiln_float_to_f16(dist(rng));
        std::memcpy(w.data() + 2 * i, &h, 2);
        wf[size_t(i)] = kiln_f16_to_float(h);
      }
    }
    kiln_linear_weight desc{};
    desc.kind = k.kind;
    desc.format = k.format;
    desc.data = w.data();
    std::vector<float> x(size_t(kMax * in));
    for (float &v : x)
      v = dist(rng);
    std::vector<float> all(size_t(kMax * rows), -1.0f);
    kiln_k_linear_tile(&desc, x.data(), kMax, in, o0, o1, all.data(), rows);
    for (int64_t t = 0; t < kMax; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < in; ++i) {
          double p = double(x[t * in + i]) * wf[(o0 + r) * in + i];
          ref += p;
          mag += std::fabs(p);
        }
        ASSERT_NEAR(all[t * rows + r], ref, 1e-5 * mag + 1e-6)
            << "kind " << k.kind << " format " << k.format << " t " << t
            << " row " << r;
      }
    for (int64_t n = 2; n < kMax; ++n) {
      std::vector<float> part(size_t(n * rows), -1.0f);
      kiln_k_linear_tile(&desc, x.data(), n, in, o0, o1, part.data(), rows);
      for (int64_t i = 0; i < n * rows; ++i)
        ASSERT_EQ(part[size_t(i)], all[size_t(i)])
            << "kind " << k.kind << " format " << k.format << " n " << n
            << " element " << i;
    }
  }
}

/// A random weight of `kind` (and block `format`) for out x in, with every
/// f16 field finite (bit 6 of each byte cleared: exponents below 31).
struct RandomWeight {
  std::vector<uint8_t> data;
  std::vector<float> scales;
  std::vector<int8_t> zeros;
  kiln_linear_weight desc{};
};

RandomWeight randomWeight(int32_t kind, int32_t format, int32_t actQuant,
                          int64_t groupSize, int64_t in, int64_t out,
                          std::mt19937 &rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> unit(0.01f, 0.1f);
  RandomWeight w;
  int64_t bytes = 0, groups = 1;
  switch (kind) {
  case KILN_WEIGHT_F32:
    bytes = out * in * 4;
    break;
  case KILN_WEIGHT_F16:
  case KILN_WEIGHT_BF16:
    bytes = out * in * 2;
    break;
  case KILN_WEIGHT_W8:
    bytes = out * in;
    groups = groupSize > 0 ? in / groupSize : 1;
    break;
  case KILN_WEIGHT_W4:
    bytes = out * kiln::rt::cpu::q4RowBytes(in);
    groups = kiln::rt::cpu::q4Groups(in, groupSize);
    break;
  default:
    bytes = out * in / kiln_block_elems(format) * kiln_block_bytes(format);
  }
  w.data.resize(size_t(bytes));
  for (uint8_t &b : w.data)
    b = uint8_t(byte(rng) & 0xBF);
  if (kind == KILN_WEIGHT_F32) // finite floats in (-4, 4)
    for (int64_t i = 0; i < out * in; ++i) {
      float v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
      std::memcpy(w.data.data() + 4 * i, &v, 4);
    }
  w.scales.resize(size_t(out * groups));
  for (float &v : w.scales)
    v = unit(rng);
  w.zeros.resize(size_t(out * groups));
  for (int8_t &z : w.zeros)
    z = int8_t(byte(rng) % 16);
  w.desc.kind = kind;
  w.desc.format = format;
  w.desc.act_quant = actQuant;
  w.desc.group_size = groupSize;
  w.desc.data = w.data.data();
  w.desc.scales = w.scales.data();
  w.desc.zeros = w.zeros.data();
  return w;
}

TEST(GeneratedPrimitives, LinearTileBatchInvariant) {
  struct Case {
    int32_t kind, format, actQuant;
    int64_t groupSize, in;
  };
  const Case cases[] = {
      {KILN_WEIGHT_F32, 0, 0, 0, 76}, // in % 8 != 0: the scalar tail
      {KILN_WEIGHT_F16, 0, 0, 0, 76},
      {KILN_WEIGHT_BF16, 0, 0, 0, 64},
      {KILN_WEIGHT_W8, 0, 0, 0, 76},
      {KILN_WEIGHT_W8, 0, 0, 32, 64},
      {KILN_WEIGHT_W4, 0, 0, 32, 64},
      {KILN_WEIGHT_BLOCKS, KILN_BLOCK_Q4_0, 0, 0, 256},
      {KILN_WEIGHT_BLOCKS, KILN_BLOCK_Q4_1, 0, 0, 256},
      {KILN_WEIGHT_BLOCKS, KILN_BLOCK_Q8_0, 0, 0, 256},
      {KILN_WEIGHT_BLOCKS, KILN_BLOCK_Q5_1, 0, 0, 256},
      {KILN_WEIGHT_BLOCKS, KILN_BLOCK_Q4_K, 0, 0, 256},
      {KILN_WEIGHT_BLOCKS, KILN_BLOCK_Q6_K, 0, 0, 256},
      {KILN_WEIGHT_BLOCKS, KILN_BLOCK_Q4_0, KILN_ACT_INT8_PER_BLOCK, 0, 256},
  };
  const int64_t out = 70, nMax = 70;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  kiln::rt::cpu::acquireBatchInvariantKernels();
  ASSERT_TRUE(kiln::rt::cpu::batchInvariantKernels());
  for (const Case &k : cases) {
    RandomWeight w =
        randomWeight(k.kind, k.format, k.actQuant, k.groupSize, k.in, out, rng);
    std::vector<float> x(size_t(nMax * k.in));
    for (float &v : x)
      v = dist(rng);
    // Each token alone, all rows.
    std::vector<float> alone(size_t(nMax * out));
    for (int64_t t = 0; t < nMax; ++t)
      kiln_k_linear_tile(&w.desc, x.data() + t * k.in, 1, k.in, 0, out,
                         alone.data() + t * out, out);
    for (float v : alone)
      ASSERT_TRUE(std::isfinite(v)) << "kind " << k.kind << " format " << k.format;
    // The same values as the default (fastest) path, up to rounding.
    kiln::rt::cpu::releaseBatchInvariantKernels();
    std::vector<float> fast(static_cast<size_t>(out));
    kiln_k_linear_tile(&w.desc, x.data(), 1, k.in, 0, out, fast.data(), out);
    kiln::rt::cpu::acquireBatchInvariantKernels();
    for (int64_t r = 0; r < out; ++r)
      ASSERT_NEAR(alone[size_t(r)], fast[size_t(r)],
                  2e-3f * (1.0f + std::fabs(fast[size_t(r)])))
          << "kind " << k.kind << " format " << k.format << " row " << r;
    // Any token count, and a row range that starts and ends mid-tile.
    for (int64_t n : {2, 3, 5, 16, 17, 33, 70}) {
      for (auto [o0, o1] : {std::pair<int64_t, int64_t>{0, out}, {3, 67}}) {
        const int64_t rows = o1 - o0;
        std::vector<float> got(size_t(n * rows), -1.0f);
        kiln_k_linear_tile(&w.desc, x.data(), n, k.in, o0, o1, got.data(), rows);
        for (int64_t t = 0; t < n; ++t)
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_EQ(got[size_t(t * rows + r)], alone[size_t(t * out + o0 + r)])
                << "kind " << k.kind << " format " << k.format << " act "
                << k.actQuant << " n " << n << " token " << t << " row "
                << o0 + r;
      }
    }
  }
  kiln::rt::cpu::releaseBatchInvariantKernels();
  EXPECT_FALSE(kiln::rt::cpu::batchInvariantKernels());
}

} // namespace

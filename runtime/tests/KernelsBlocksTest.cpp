//===- KernelsBlocksTest.cpp - GGML block-format kernels vs decode + dot --===//
//
// kiln_k_embedding_blocks and kiln_k_linear_blocks (kernel_abi.h) for every
// block format of kiln_rt/block_formats.h, on random blocks (random quants
// and scale bits, f16 fields set to random finite values), against rows
// decoded with kiln_block_decode_row and a float64 dot product: embedding
// rows are exact, linear outputs (GEMV for one token, decoded tiles + sgemm
// for several, a depth that is not a multiple of the 512-wide tile for the
// 32-element formats) agree to 1e-5 of max|y|. (Bit-exact agreement of the
// decoder with gguf-py is test/Import/gguf-block-formats.test.)
//
//===----------------------------------------------------------------------===//
#include "SimdLevels.h"
#include "kiln_rt/block_formats.h"
#include "cpu/Kernels.h"
#include "cpu/WholeOpKernels.h"
#include "kiln_rt/kernel_abi.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace {

struct Format {
  int64_t id;
  std::vector<int> halves; ///< byte offsets of the f16 fields in a block
};

const std::vector<Format> &formats() {
  static const std::vector<Format> all = {
      {KILN_BLOCK_Q4_0, {0}},      {KILN_BLOCK_Q4_1, {0, 2}},
      {KILN_BLOCK_Q5_0, {0}},      {KILN_BLOCK_Q5_1, {0, 2}},
      {KILN_BLOCK_Q8_0, {0}},      {KILN_BLOCK_Q2_K, {80, 82}},
      {KILN_BLOCK_Q3_K, {108}},    {KILN_BLOCK_Q4_K, {0, 2}},
      {KILN_BLOCK_Q5_K, {0, 2}},   {KILN_BLOCK_Q6_K, {208}}};
  return all;
}

/// rows x cols weights of `f` with random bytes; f16 fields hold values of
/// magnitude 2^-10 .. 2^-4 so products stay well inside float range.
std::vector<int8_t> randomBlocks(const Format &f, int64_t rows, int64_t cols,
                                 std::mt19937 &rng) {
  const int64_t elems = kiln_block_elems(f.id), bytes = kiln_block_bytes(f.id);
  std::vector<int8_t> w(size_t(rows * cols / elems * bytes));
  std::uniform_int_distribution<int> byte(0, 255), exp(5, 11), man(0, 1023),
      sign(0, 1);
  for (int8_t &b : w)
    b = int8_t(byte(rng));
  for (size_t blk = 0; blk < w.size() / size_t(bytes); ++blk)
    for (int off : f.halves) {
      uint16_t h = uint16_t((sign(rng) << 15) | (exp(rng) << 10) | man(rng));
      w[blk * bytes + off] = int8_t(h & 0xff);
      w[blk * bytes + off + 1] = int8_t(h >> 8);
    }
  return w;
}

std::vector<float> decodeAll(const Format &f, const std::vector<int8_t> &w,
                             int64_t rows, int64_t cols) {
  std::vector<float> out(size_t(rows * cols));
  const int64_t rowBytes = cols / kiln_block_elems(f.id) * kiln_block_bytes(f.id);
  for (int64_t r = 0; r < rows; ++r)
    kiln_block_decode_row(f.id,
                          reinterpret_cast<const uint8_t *>(w.data()) +
                              r * rowBytes,
                          cols, out.data() + r * cols);
  return out;
}

TEST(BlockKernels, EmbeddingRowsAreDecodedRows) {
  std::mt19937 rng(7);
  for (const Format &f : formats()) {
    const int64_t vocab = 5, dim = 512;
    std::vector<int8_t> table = randomBlocks(f, vocab, dim, rng);
    std::vector<float> ref = decodeAll(f, table, vocab, dim);
    std::vector<int32_t> tokens = {4, 0, 2, 4};
    std::vector<float> out(tokens.size() * dim, -1.0f);
    kiln_k_embedding_blocks(tokens.data(), int64_t(tokens.size()), table.data(),
                            vocab, dim, out.data(), f.id);
    for (size_t i = 0; i < tokens.size(); ++i)
      for (int64_t j = 0; j < dim; ++j)
        ASSERT_EQ(out[i * dim + j], ref[tokens[i] * dim + j])
            << kiln_block_format_name(f.id) << " token " << tokens[i];
  }
}

void linearMatchesDecoded(const char *level) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Format &f : formats()) {
    const int64_t elems = kiln_block_elems(f.id);
    // 32-element formats: 800 inputs, one full 512 tile and a 288 tail.
    const int64_t in = elems == 32 ? 800 : 768, out = 37;
    std::vector<int8_t> w = randomBlocks(f, out, in, rng);
    std::vector<float> wf = decodeAll(f, w, out, in);
    // 1: the GEMV; 2-32: the multi-token GEMV (token groups of 8 on
    // AVX-512, 4 on AVX2, with their tails); 40: the GEMM.
    for (int64_t n : {1, 2, 3, 5, 6, 8, 9, 13, 32, 40}) {
      std::vector<float> x(size_t(n * in));
      for (float &v : x)
        v = normal(rng);
      std::vector<float> y(size_t(n * out), NAN);
      kiln_k_linear_blocks(x.data(), w.data(), y.data(), n, in, out, f.id);
      double maxRef = 0.0, maxErr = 0.0;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t o = 0; o < out; ++o) {
          double ref = 0.0;
          for (int64_t i = 0; i < in; ++i)
            ref += double(x[r * in + i]) * double(wf[o * in + i]);
          maxRef = std::max(maxRef, std::fabs(ref));
          maxErr = std::max(maxErr, std::fabs(ref - double(y[r * out + o])));
        }
      EXPECT_LE(maxErr, 1e-5 * maxRef)
          << kiln_block_format_name(f.id) << " n " << n << " at " << level;
    }
  }
}

// The multi-token GEMV (a verify step's or a batched decode step's few rows)
// gives a token the same bits whatever the other tokens: the outputs of 11
// tokens equal those of each token paired with another one.
void multiTokenRowsIndependent(const char *level) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Format &f : formats()) {
    const int64_t in = kiln_block_elems(f.id) == 32 ? 800 : 768, out = 37;
    std::vector<int8_t> w = randomBlocks(f, out, in, rng);
    const int64_t n = 11;
    std::vector<float> x(size_t(n * in));
    for (float &v : x)
      v = normal(rng);
    std::vector<float> all(size_t(n * out)), pair(size_t(2 * out));
    kiln_k_linear_blocks(x.data(), w.data(), all.data(), n, in, out, f.id);
    for (int64_t t = 1; t < n; ++t) {
      std::vector<float> xp(x.begin() + (t - 1) * in, x.begin() + (t + 1) * in);
      kiln_k_linear_blocks(xp.data(), w.data(), pair.data(), 2, in, out, f.id);
      for (int64_t o = 0; o < out; ++o)
        ASSERT_EQ(pair[size_t(out + o)], all[size_t(t * out + o)])
            << kiln_block_format_name(f.id) << " token " << t << " row " << o
            << " at " << level;
    }
  }
}

TEST(BlockKernels, MultiTokenRowsIndependent) {
  for (kiln::rt::cpu::SimdLevel level : kiln::rt::test::supportedLevels()) {
    kiln::rt::test::ScopedSimdLevel scoped(level);
    multiTokenRowsIndependent(kiln::rt::test::levelName(level));
  }
}

// The decode GEMV of Q8_0 / Q4_0 / Q4_1 / Q4_K / Q6_K reads the codes in
// registers (BlockKernelsHwy.cpp), once per SIMD target: every level this
// CPU runs is checked (37 rows: groups of four and a tail).
TEST(BlockKernels, LinearMatchesDecodedFloat64) {
  for (kiln::rt::cpu::SimdLevel level : kiln::rt::test::supportedLevels()) {
    kiln::rt::test::ScopedSimdLevel scoped(level);
    linearMatchesDecoded(kiln::rt::test::levelName(level));
  }
}

/// The int8-activation recipe's input, written from kernel_abi.h
/// (kiln_k_linear_blocks_a8): per 32 inputs d = max|x| / 127 (float32),
/// q = clamp(roundf(x / d), -127, 127); returns d * q in float64.
std::vector<double> quantizedInput(const float *x, int64_t in) {
  std::vector<double> xhat(static_cast<size_t>(in));
  for (int64_t b = 0; b < in / 32; ++b) {
    float amax = 0.0f;
    for (int64_t i = 0; i < 32; ++i)
      amax = std::max(amax, std::fabs(x[32 * b + i]));
    const float d = amax / 127.0f;
    for (int64_t i = 0; i < 32; ++i) {
      float q = d == 0.0f ? 0.0f : std::roundf(x[32 * b + i] / d);
      q = std::min(127.0f, std::max(-127.0f, q));
      xhat[size_t(32 * b + i)] = double(d) * double(q);
    }
  }
  return xhat;
}

void linearA8MatchesQuantizedInput(const char *level) {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Format &f : formats()) {
    const int64_t in = kiln_block_elems(f.id) == 32 ? 800 : 768, out = 37;
    std::vector<int8_t> w = randomBlocks(f, out, in, rng);
    std::vector<float> wf = decodeAll(f, w, out, in);
    // 1 and 3 tokens: integer dots; 5: the float path (kA8FloatTokens).
    for (int64_t n : {int64_t(1), int64_t(3), int64_t(5)}) {
      std::vector<float> x(size_t(n * in));
      for (float &v : x)
        v = normal(rng);
      x[3] = 0.0f; // a block with a zero, and one that is all zeros
      for (int64_t i = 64; i < 96; ++i)
        x[size_t(i)] = 0.0f;
      std::vector<float> y(size_t(n * out), NAN);
      kiln_k_linear_blocks_a8(x.data(), w.data(), y.data(), n, in, out, f.id);
      double maxRef = 0.0, maxErr = 0.0, maxFloat = 0.0;
      for (int64_t r = 0; r < n; ++r) {
        std::vector<double> xhat = quantizedInput(x.data() + r * in, in);
        for (int64_t o = 0; o < out; ++o) {
          double ref = 0.0, exact = 0.0;
          for (int64_t i = 0; i < in; ++i) {
            ref += xhat[size_t(i)] * double(wf[o * in + i]);
            exact += double(x[r * in + i]) * double(wf[o * in + i]);
          }
          maxRef = std::max(maxRef, std::fabs(ref));
          maxErr = std::max(maxErr, std::fabs(ref - double(y[r * out + o])));
          maxFloat = std::max(maxFloat, std::fabs(exact - ref));
        }
      }
      const char *name = kiln_block_format_name(f.id);
      EXPECT_LE(maxErr, 1e-5 * maxRef) << name << " n " << n << " at " << level;
      // The quantization is really applied: the float-activation result
      // differs by far more than the tolerance.
      EXPECT_GT(maxFloat, 1e-4 * maxRef) << name << " n " << n;
      // A fused kernel's tile (kiln_k_linear_tile) computes the same rows
      // with the same arithmetic: bit for bit on the integer-dot path; on
      // the float path (n >= kA8FloatTokens) both call sgemm, whose BLAS
      // may pick its micro-kernel by the matrix shape (OpenBLAS on AMD Zen
      // sums a 20-row tile and a 37-row matrix in different orders), so
      // there they agree to float rounding.
      kiln_linear_weight lw{};
      lw.kind = KILN_WEIGHT_BLOCKS;
      lw.format = int32_t(f.id);
      lw.data = w.data();
      lw.act_quant = KILN_ACT_INT8_PER_BLOCK;
      std::vector<float> tile(size_t(n * 20), NAN);
      kiln_k_linear_tile(&lw, x.data(), n, in, 10, 30, tile.data(), 20);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t o = 10; o < 30; ++o) {
          if (n < kiln::rt::cpu::kA8FloatTokens)
            ASSERT_EQ(tile[size_t(r * 20 + o - 10)], y[size_t(r * out + o)])
                << name << " n " << n << " row " << o << " at " << level;
          else
            ASSERT_NEAR(tile[size_t(r * 20 + o - 10)], y[size_t(r * out + o)],
                        1e-6 * maxRef)
                << name << " n " << n << " row " << o << " at " << level;
        }
    }
  }
}

// kiln_k_linear_blocks_a8 at every SIMD level (VNNI or AVX2 integer dots,
// the portable float path) against the recipe's formula in float64.
TEST(BlockKernels, LinearA8MatchesQuantizedInputFloat64) {
  for (kiln::rt::cpu::SimdLevel level : kiln::rt::test::supportedLevels()) {
    kiln::rt::test::ScopedSimdLevel scoped(level);
    linearA8MatchesQuantizedInput(kiln::rt::test::levelName(level));
  }
}

} // namespace

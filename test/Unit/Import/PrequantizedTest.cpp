//===- PrequantizedTest.cpp - Repacking GGUF Q8_0 into grouped 8-bit ------===//
//
// The Q8_0 repack on the real TinyStories-656K Q8_0 GGUF, whatever
// kKeepGgufQ8_0Quantized says: scales[o, b] * q[o, i] must equal the
// dequantized float weight exactly (both are f32(d) * q, ggml's
// dequantize_row_q8_0).
//
//===----------------------------------------------------------------------===//

#include "ImportTestUtils.h"

#include "dialects/Kiln/Import/Importers.h"
#include "dialects/Kiln/Import/Prequantized.h"

#include "llvm/Support/Endian.h"

#include "gtest/gtest.h"

#include <cstring>

using namespace mlir::kiln;
using namespace kiln::test;

namespace {

TEST(Prequantized, GgufQ8_0RepacksExactly) {
  auto model =
      importGguf(modelPath("tinystories-656k/gguf/TinyStories-656K-Q8_0.gguf"));
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  for (const char *name : {"layers.0.wq", "layers.1.w2"}) {
    WeightDesc w = *model->lookup(name);
    ASSERT_EQ(w.source.storage, StorageType::Q8_0);
    w.quantized.reset();
    makeGgufQuantized(w);
    ASSERT_TRUE(w.quantized);
    EXPECT_EQ(w.quantized->bits, 8);
    EXPECT_EQ(w.quantized->groupSize, 32);
    ASSERT_EQ(w.quantized->parts.size(), 2u); // no zero points at 8 bits
    int64_t rows = w.source.shape[0], cols = w.source.shape[1];
    std::vector<float> ref(rows * cols);
    ASSERT_FALSE(static_cast<bool>(materializeWeight(w, ref)));

    std::vector<char> q, s;
    const WeightDesc &qp = w.quantized->parts[0], &sp = w.quantized->parts[1];
    auto ql = repackedLayout(qp), sl = repackedLayout(sp);
    ASSERT_TRUE(static_cast<bool>(ql) && static_cast<bool>(sl));
    EXPECT_EQ(ql->dtype, "i8");
    EXPECT_EQ(std::vector<int64_t>(ql->shape.begin(), ql->shape.end()),
              (std::vector<int64_t>{rows, cols}));
    EXPECT_EQ(std::vector<int64_t>(sl->shape.begin(), sl->shape.end()),
              (std::vector<int64_t>{rows, cols / 32}));
    llvm::Error e1 = materializeRepacked(qp, q);
    ASSERT_FALSE(static_cast<bool>(e1)) << llvm::toString(std::move(e1));
    llvm::Error e2 = materializeRepacked(sp, s);
    ASSERT_FALSE(static_cast<bool>(e2)) << llvm::toString(std::move(e2));
    ASSERT_EQ(q.size(), ql->bytes);
    ASSERT_EQ(s.size(), sl->bytes);
    for (int64_t o = 0; o < rows; ++o)
      for (int64_t i = 0; i < cols; ++i) {
        uint32_t u = llvm::support::endian::read32le(
            s.data() + 4 * (o * (cols / 32) + i / 32));
        float scale;
        std::memcpy(&scale, &u, 4);
        float v =
            scale * static_cast<float>(static_cast<int8_t>(q[o * cols + i]));
        ASSERT_EQ(v, ref[o * cols + i])
            << name << " [" << o << ", " << i << "]";
      }
  }
}

TEST(Prequantized, RepackRefusesFloatMaterialization) {
  auto model =
      importGguf(modelPath("tinystories-656k/gguf/TinyStories-656K-Q8_0.gguf"));
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  WeightDesc w = *model->lookup("layers.0.wk");
  makeGgufQuantized(w);
  std::vector<float> out(w.source.shape[0] * w.source.shape[1]);
  llvm::Error e = materializeWeight(w.quantized->parts[0], out);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("is a repacked quantized part"),
            std::string::npos);
}

} // namespace

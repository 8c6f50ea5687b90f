//===- SyntheticTest.cpp - synthetic:<shape> models -----------------------===//

#include "ImportTestUtils.h"

#include "dialects/Kiln/Import/ModelDesc.h"

#include "gtest/gtest.h"

#include <chrono>
#include <cmath>
#include <cstring>

using namespace mlir::kiln;
using namespace kiln::test;

namespace {


TEST(SyntheticImport, Llama2_7BIsInstant) {
  auto start = std::chrono::steady_clock::now();
  llvm::Expected<ModelDesc> m = importModel("synthetic:llama-2-7b");
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(bool(m)) << errorMessage(m);
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(elapsed)
                .count(),
            500);
  const LlamaConfig &c = m->config;
  EXPECT_EQ(c.dim, 4096);
  EXPECT_EQ(c.hiddenDim, 11008);
  EXPECT_EQ(c.nLayers, 32);
  EXPECT_EQ(c.nHeads, 32);
  EXPECT_EQ(c.nKvHeads, 32);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_EQ(c.vocabSize, 32000);
  EXPECT_EQ(c.maxSeqLen, 4096);
  EXPECT_FALSE(c.tiedEmbeddings);
  EXPECT_EQ(c.sourceFormat, "synthetic");
  EXPECT_EQ(m->weights.size(), 3u + 9u * 32u);
  for (const WeightDesc &w : m->weights) {
    EXPECT_EQ(w.source.storage, StorageType::Synthetic);
    EXPECT_EQ(w.source.bytes, 0u);
  }
  EXPECT_NE(m->lookup("output")->source.seed,
            m->lookup("tok_embeddings")->source.seed);
  EXPECT_EQ(m->tokenizer.pieces.size(), 32000u);
}

TEST(SyntheticImport, OtherShapes) {
  llvm::Expected<ModelDesc> m13 = importModel("synthetic:llama-2-13b");
  ASSERT_TRUE(bool(m13)) << errorMessage(m13);
  EXPECT_EQ(m13->config.dim, 5120);
  EXPECT_EQ(m13->config.nLayers, 40);
  llvm::Expected<ModelDesc> m110 = importModel("synthetic:llama-110m");
  ASSERT_TRUE(bool(m110)) << errorMessage(m110);
  EXPECT_EQ(m110->config.dim, 768);
  EXPECT_EQ(m110->config.maxSeqLen, 1024);
  EXPECT_TRUE(m110->config.tiedEmbeddings);
  llvm::Expected<ModelDesc> s = importModel("synthetic:stories260k");
  ASSERT_TRUE(bool(s)) << errorMessage(s);
  EXPECT_EQ(s->config.nKvHeads, 4);
  EXPECT_EQ(s->config.hiddenDim, 172);
  EXPECT_EQ(s->lookup("output")->source.seed,
            s->lookup("tok_embeddings")->source.seed);

  llvm::Expected<ModelDesc> bad = importModel("synthetic:gpt-5");
  std::string msg = errorMessage(bad);
  EXPECT_NE(msg.find("unknown synthetic shape 'gpt-5'"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("llama-2-7b"), std::string::npos) << msg;
}

TEST(SyntheticImport, MaterializeIsDeterministic) {
  llvm::Expected<ModelDesc> m = importModel("synthetic:llama-2-7b");
  ASSERT_TRUE(bool(m)) << errorMessage(m);
  const WeightDesc *wk = m->lookup("layers.3.wk");
  std::vector<float> a = materialize(*wk);
  std::vector<float> b = materialize(*wk);
  ASSERT_EQ(a.size(), 4096u * 4096u);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  double sum = 0.0, maxAbs = 0.0;
  for (float v : a) {
    sum += v;
    maxAbs = std::max(maxAbs, double(std::fabs(v)));
  }
  EXPECT_LE(maxAbs, 0.02);
  EXPECT_GT(maxAbs, 0.019);
  EXPECT_LT(std::fabs(sum / a.size()), 1e-4);

  // Re-importing gives the same values; another tensor differs.
  llvm::Expected<ModelDesc> again = importModel("synthetic:llama-2-7b");
  ASSERT_TRUE(bool(again)) << errorMessage(again);
  std::vector<float> c = materialize(*again->lookup("layers.3.wk"));
  EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * 4), 0);
  std::vector<float> d = materialize(*again->lookup("layers.3.wv"));
  EXPECT_NE(std::memcmp(a.data(), d.data(), a.size() * 4), 0);

  // Norms are exactly 1.
  std::vector<float> norm = materialize(*m->lookup("layers.0.ffn_norm"));
  ASSERT_EQ(norm.size(), 4096u);
  for (float v : norm)
    ASSERT_EQ(v, 1.0f);
}

/// Pins the generator so values are the same on every platform and build.
TEST(SyntheticImport, GoldenValues) {
  llvm::Expected<ModelDesc> m = importModel("synthetic:stories260k");
  ASSERT_TRUE(bool(m)) << errorMessage(m);
  std::vector<float> v = materialize(*m->lookup("layers.0.wq"));
  uint32_t bits[4];
  std::memcpy(bits, v.data(), sizeof(bits));
  EXPECT_EQ(bits[0], 1002310799u);
  EXPECT_EQ(bits[1], 3164784161u);
  EXPECT_EQ(bits[2], 3154727905u);
  EXPECT_EQ(bits[3], 3149814779u);
}

} // namespace

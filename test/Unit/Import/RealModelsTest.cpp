//===- RealModelsTest.cpp - Importers on the real shared model files ------===//

#include "ImportTestUtils.h"

#include "dialects/Kiln/Import/Importers.h"
#include "dialects/Kiln/Import/ModelDesc.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>

using namespace mlir::kiln;
using namespace kiln::test;

namespace {

std::string stories260KBin() { return modelPath("stories260K/stories260K.bin"); }
std::string stories260KGguf() {
  return modelPath("stories260K/stories260K.gguf");
}
std::string tiny656KHf() { return modelPath("tinystories-656k/hf"); }
std::string tiny656KGguf() {
  return modelPath("tinystories-656k/gguf/TinyStories-656K-Q8_0.gguf");
}

/// Checks names and shapes of the canonical weight list.
void expectCanonicalWeights(const ModelDesc &m) {
  const LlamaConfig &c = m.config;
  ASSERT_EQ(m.weights.size(), static_cast<size_t>(3 + 9 * c.nLayers));
  int64_t q = c.nHeads * c.headDim, kv = c.nKvHeads * c.headDim;
  auto expect = [&](size_t i, const std::string &name,
                    std::vector<int64_t> shape) {
    EXPECT_EQ(m.weights[i].name, name);
    EXPECT_EQ(std::vector<int64_t>(m.weights[i].source.shape.begin(),
                                   m.weights[i].source.shape.end()),
              shape)
        << name;
  };
  expect(0, "tok_embeddings", {c.vocabSize, c.dim});
  for (int64_t l = 0; l < c.nLayers; ++l) {
    std::string p = "layers." + std::to_string(l) + ".";
    size_t b = 1 + 9 * l;
    expect(b + 0, p + "attention_norm", {c.dim});
    expect(b + 1, p + "wq", {q, c.dim});
    expect(b + 2, p + "wk", {kv, c.dim});
    expect(b + 3, p + "wv", {kv, c.dim});
    expect(b + 4, p + "wo", {c.dim, q});
    expect(b + 5, p + "ffn_norm", {c.dim});
    expect(b + 6, p + "w1", {c.hiddenDim, c.dim});
    expect(b + 7, p + "w2", {c.dim, c.hiddenDim});
    expect(b + 8, p + "w3", {c.hiddenDim, c.dim});
  }
  expect(m.weights.size() - 2, "norm", {c.dim});
  expect(m.weights.size() - 1, "output", {c.vocabSize, c.dim});
  EXPECT_NE(m.lookup("layers.0.wq"), nullptr);
  EXPECT_EQ(m.lookup("layers.99.wq"), nullptr);
}

void expectStories260KConfig(const LlamaConfig &c) {
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hiddenDim, 172);
  EXPECT_EQ(c.nLayers, 5);
  EXPECT_EQ(c.nHeads, 8);
  EXPECT_EQ(c.nKvHeads, 4);
  EXPECT_EQ(c.headDim, 8);
  EXPECT_EQ(c.vocabSize, 512);
  EXPECT_FLOAT_EQ(c.rmsNormEps, 1e-5f);
  EXPECT_FLOAT_EQ(c.ropeTheta, 10000.0f);
  EXPECT_TRUE(c.tiedEmbeddings);
}

void expectTiny656KConfig(const LlamaConfig &c) {
  EXPECT_EQ(c.dim, 128);
  EXPECT_EQ(c.hiddenDim, 384);
  EXPECT_EQ(c.nLayers, 2);
  EXPECT_EQ(c.nHeads, 8);
  EXPECT_EQ(c.nKvHeads, 4);
  EXPECT_EQ(c.headDim, 16);
  EXPECT_EQ(c.vocabSize, 2048);
  EXPECT_EQ(c.maxSeqLen, 512);
  EXPECT_FLOAT_EQ(c.rmsNormEps, 1e-6f);
  EXPECT_FLOAT_EQ(c.ropeTheta, 10000.0f);
  EXPECT_TRUE(c.tiedEmbeddings);
}

TEST(Llama2cImport, Stories260K) {
  KILN_REQUIRE_MODELS();
  llvm::Expected<ModelDesc> m = importModel(stories260KBin());
  ASSERT_TRUE(bool(m)) << errorMessage(m);
  expectStories260KConfig(m->config);
  EXPECT_EQ(m->config.maxSeqLen, 512);
  EXPECT_EQ(m->config.sourceFormat, "llama2c");
  EXPECT_EQ(m->config.name, "stories260K");
  expectCanonicalWeights(*m);
  // Offsets follow the legacy layout.
  EXPECT_EQ(m->weights[0].source.offset, 28u);
  EXPECT_EQ(m->lookup("layers.1.wq")->source.offset,
            28u + 4u * (512 * 64 + 5 * 64 + 64 * 64));
  EXPECT_EQ(m->lookup("output")->source.offset,
            m->lookup("tok_embeddings")->source.offset);
  for (const WeightDesc &w : m->weights) {
    EXPECT_EQ(w.source.storage, StorageType::F32);
    EXPECT_TRUE(w.transforms.empty());
  }
  // tok512.bin is found beside the checkpoint.
  const TokenizerDesc &tok = m->tokenizer;
  ASSERT_EQ(tok.pieces.size(), 512u);
  EXPECT_EQ(tok.pieces[0], "<unk>");
  EXPECT_EQ(tok.pieces[1], "<s>");
  EXPECT_EQ(tok.pieces[2], "</s>");
  EXPECT_EQ(tok.pieces[3], "<0x00>");
  EXPECT_EQ(tok.pieces[13], "<0x0A>");
  EXPECT_EQ(tok.types[0], 2);
  EXPECT_EQ(tok.types[1], 3);
  EXPECT_EQ(tok.types[2], 3);
  EXPECT_EQ(tok.types[13], 6);
  EXPECT_EQ(tok.types[300], 1);
  EXPECT_EQ(tok.model, "spm");
  // run.c encodes "Once upon a time" as [1, 403, 407, 261, 378].
  EXPECT_EQ(tok.pieces[403] + tok.pieces[407] + tok.pieces[261] +
                tok.pieces[378],
            "\xe2\x96\x81Once\xe2\x96\x81upon\xe2\x96\x81"
            "a\xe2\x96\x81time");
  EXPECT_EQ(encodeSpm(tok, "Once upon a time"),
            (std::vector<int>{1, 403, 407, 261, 378}));
}

TEST(Llama2cImport, ExplicitTokenizer) {
  KILN_REQUIRE_MODELS();
  llvm::Expected<ModelDesc> m =
      importModel(stories260KBin(), modelPath("stories260K/tok512.bin"));
  ASSERT_TRUE(bool(m)) << errorMessage(m);
  EXPECT_EQ(m->tokenizer.pieces.size(), 512u);
  // A tokenizer bigger than the vocabulary is rejected.
  llvm::Expected<ModelDesc> bad = importModel(
      stories260KBin(), modelPath("llama2-tokenizer/tokenizer.bin"));
  std::string msg = errorMessage(bad);
  EXPECT_NE(msg.find("tokenizer.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("32000 pieces"), std::string::npos) << msg;
}

TEST(GgufImport, Stories260K) {
  KILN_REQUIRE_MODELS();
  llvm::Expected<ModelDesc> m = importModel(stories260KGguf());
  ASSERT_TRUE(bool(m)) << errorMessage(m);
  expectStories260KConfig(m->config);
  EXPECT_EQ(m->config.maxSeqLen, 2048); // llama.context_length
  EXPECT_EQ(m->config.sourceFormat, "gguf");
  expectCanonicalWeights(*m);
  // output.weight is a byte copy of token_embd.weight: recognised as tied.
  EXPECT_EQ(m->lookup("output")->source.offset,
            m->lookup("tok_embeddings")->source.offset);
  EXPECT_EQ(m->lookup("tok_embeddings")->source.offset, 14176u);
  EXPECT_EQ(m->lookup("layers.0.wk")->source.tensor, "blk.0.attn_k.weight");
  EXPECT_EQ(m->lookup("layers.3.w1")->source.tensor, "blk.3.ffn_gate.weight");
  EXPECT_EQ(m->lookup("layers.3.w2")->source.tensor, "blk.3.ffn_down.weight");
  EXPECT_EQ(m->lookup("layers.3.w3")->source.tensor, "blk.3.ffn_up.weight");

  // Same tokenizer as tok512.bin after normalisation.
  llvm::Expected<TokenizerDesc> bin =
      readLlama2cTokenizer(modelPath("stories260K/tok512.bin"));
  ASSERT_TRUE(bool(bin)) << errorMessage(bin);
  EXPECT_EQ(m->tokenizer.pieces, bin->pieces);
  EXPECT_EQ(m->tokenizer.scores, bin->scores);
  EXPECT_EQ(m->tokenizer.types, bin->types);
  EXPECT_EQ(m->tokenizer.bosId, 1);
  EXPECT_EQ(m->tokenizer.eosId, 2);
  EXPECT_EQ(m->tokenizer.unkId, 0);
}

TEST(GgufImport, BinAndGgufMaterializeIdentically) {
  KILN_REQUIRE_MODELS();
  llvm::Expected<ModelDesc> bin = importModel(stories260KBin());
  llvm::Expected<ModelDesc> gguf = importModel(stories260KGguf());
  ASSERT_TRUE(bool(bin)) << errorMessage(bin);
  ASSERT_TRUE(bool(gguf)) << errorMessage(gguf);
  ASSERT_EQ(bin->weights.size(), gguf->weights.size());
  for (size_t i = 0; i < bin->weights.size(); ++i) {
    const WeightDesc &a = bin->weights[i], &b = gguf->weights[i];
    ASSERT_EQ(a.name, b.name);
    ASSERT_EQ(a.source.shape, b.source.shape) << a.name;
    std::vector<float> va = materialize(a), vb = materialize(b);
    ASSERT_EQ(va.size(), vb.size());
    EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * 4), 0) << a.name;
  }
}

TEST(HfImport, TinyStories656K) {
  KILN_REQUIRE_MODELS();
  llvm::Expected<ModelDesc> m = importModel(tiny656KHf());
  ASSERT_TRUE(bool(m)) << errorMessage(m);
  expectTiny656KConfig(m->config);
  EXPECT_EQ(m->config.sourceFormat, "hf");
  expectCanonicalWeights(*m);
  // Only lm_head.weight is stored; embed_tokens is an alias of it.
  EXPECT_EQ(m->lookup("tok_embeddings")->source.tensor, "lm_head.weight");
  EXPECT_EQ(m->lookup("output")->source.offset,
            m->lookup("tok_embeddings")->source.offset);
  const WeightDesc *wq = m->lookup("layers.1.wq");
  ASSERT_EQ(wq->transforms.size(), 1u);
  EXPECT_EQ(wq->transforms[0].kind,
            WeightTransform::Kind::RopeHalfToAdjacent);
  EXPECT_EQ(wq->transforms[0].heads, 8);
  const WeightDesc *wk = m->lookup("layers.1.wk");
  ASSERT_EQ(wk->transforms.size(), 1u);
  EXPECT_EQ(wk->transforms[0].heads, 4);
  EXPECT_TRUE(m->lookup("layers.1.wv")->transforms.empty());
  EXPECT_EQ(wq->source.tensor, "model.layers.1.self_attn.q_proj.weight");
  // tokenizer.json: a SentencePiece-style BPE with merges.
  const TokenizerDesc &tok = m->tokenizer;
  ASSERT_EQ(tok.pieces.size(), 2048u);
  EXPECT_EQ(tok.model, "bpe");
  EXPECT_EQ(tok.merges.size(), 1967u);
  EXPECT_EQ(tok.merges[0], "e \xe2\x96\x81");
  EXPECT_EQ(tok.bosId, 1);
  EXPECT_EQ(tok.eosId, 2);
  EXPECT_EQ(tok.unkId, 0);
  EXPECT_EQ(tok.pieces[1], "<|start_story|>");
  EXPECT_EQ(tok.types[0], 2);
  EXPECT_EQ(tok.types[1], 3);
  EXPECT_TRUE(tok.addBos);
  EXPECT_TRUE(tok.addDummyPrefix);
  EXPECT_TRUE(tok.byteFallback);
  // Same vocabulary as the GGUF conversion, and the same encoding.
  llvm::Expected<TokenizerDesc> ggufTok = readTokenizer(tiny656KGguf());
  ASSERT_TRUE(bool(ggufTok)) << errorMessage(ggufTok);
  EXPECT_EQ(tok.pieces, ggufTok->pieces);
  EXPECT_EQ(encodeBpe(tok, "Once upon a time"),
            (std::vector<int>{1, 80, 147, 201, 282, 57}));

  // An explicit tokenizer overrides the one in the directory.
  llvm::Expected<ModelDesc> withTok = importModel(tiny656KHf(), tiny656KGguf());
  ASSERT_TRUE(bool(withTok)) << errorMessage(withTok);
  EXPECT_EQ(withTok->tokenizer.pieces.size(), 2048u);
  EXPECT_EQ(withTok->tokenizer.model, "spm");
}

TEST(GgufImport, TinyStories656KQ8_0) {
  KILN_REQUIRE_MODELS();
  llvm::Expected<ModelDesc> m = importModel(tiny656KGguf());
  ASSERT_TRUE(bool(m)) << errorMessage(m);
  expectTiny656KConfig(m->config);
  expectCanonicalWeights(*m);
  EXPECT_EQ(m->lookup("tok_embeddings")->source.storage, StorageType::Q8_0);
  EXPECT_EQ(m->lookup("layers.0.wq")->source.storage, StorageType::Q8_0);
  EXPECT_EQ(m->lookup("layers.0.attention_norm")->source.storage,
            StorageType::F32);
  EXPECT_EQ(m->lookup("tok_embeddings")->source.bytes, 2048u * 128 / 32 * 34);
  EXPECT_EQ(m->lookup("output")->source.offset,
            m->lookup("tok_embeddings")->source.offset);

  const TokenizerDesc &tok = m->tokenizer;
  ASSERT_EQ(tok.pieces.size(), 2048u);
  EXPECT_EQ(tok.pieces[1], "<|start_story|>");
  EXPECT_EQ(tok.pieces[2], "<|end_story|>");
  EXPECT_EQ(tok.types[1], 3);
  EXPECT_EQ(tok.scores[100], -1000.0f);
  EXPECT_TRUE(tok.addBos);
  // llama.cpp's (spm, leftmost on ties) encoding from SOURCE.md.
  EXPECT_EQ(encodeSpm(tok, "Once upon a time"),
            (std::vector<int>{1, 80, 147, 201, 282, 57}));
}

/// The Q8_0 GGUF dequantises to the HF f32 weights after the HF q/k rows
/// are moved from rotate-half to adjacent-pair order. Q8_0 rounds to half a
/// quantisation step, amax/254: 0.0159 for the largest block here (amax
/// 4.03 in layers.1.wo; an independent numpy decode gives 0.015625 too).
TEST(GgufImport, Q8_0MatchesHfAfterRopePermutation) {
  KILN_REQUIRE_MODELS();
  llvm::Expected<ModelDesc> hf = importModel(tiny656KHf());
  llvm::Expected<ModelDesc> gguf = importModel(tiny656KGguf());
  ASSERT_TRUE(bool(hf)) << errorMessage(hf);
  ASSERT_TRUE(bool(gguf)) << errorMessage(gguf);
  ASSERT_EQ(hf->weights.size(), gguf->weights.size());
  for (size_t i = 0; i < hf->weights.size(); ++i) {
    const WeightDesc &a = hf->weights[i], &b = gguf->weights[i];
    ASSERT_EQ(a.name, b.name);
    std::vector<float> va = materialize(a), vb = materialize(b);
    ASSERT_EQ(va.size(), vb.size());
    float maxDiff = 0.0f;
    for (size_t k = 0; k < va.size(); ++k)
      maxDiff = std::max(maxDiff, std::fabs(va[k] - vb[k]));
    EXPECT_LE(maxDiff, 0.016f) << a.name;

    // Without the permutation q and k do not match: the transform matters.
    if (!a.transforms.empty()) {
      WeightDesc raw = a;
      raw.transforms.clear();
      std::vector<float> vr = materialize(raw);
      float rawDiff = 0.0f;
      for (size_t k = 0; k < vr.size(); ++k)
        rawDiff = std::max(rawDiff, std::fabs(vr[k] - vb[k]));
      EXPECT_GT(rawDiff, 0.05f) << a.name;
    }
  }
}

} // namespace

//===- TokenizerTest.cpp - Tokenizer readers ------------------------------===//

#include "ImportTestUtils.h"

#include "dialects/Kiln/Import/Importers.h"

#include "llvm/Support/JSON.h"

#include "gtest/gtest.h"

using namespace mlir::kiln;
using namespace kiln::test;

namespace {

/// llama2.c's tokenizer.bin and SentencePiece's tokenizer.model hold the
/// same Llama 2 vocabulary; after normalisation they must agree exactly.
TEST(Tokenizer, Llama2BinMatchesSentencePieceModel) {
  KILN_REQUIRE_MODELS();
  llvm::Expected<TokenizerDesc> bin =
      readTokenizer(modelPath("llama2-tokenizer/tokenizer.bin"));
  llvm::Expected<TokenizerDesc> spm =
      readTokenizer(modelPath("llama2-tokenizer/tokenizer.model"));
  ASSERT_TRUE(bool(bin)) << errorMessage(bin);
  ASSERT_TRUE(bool(spm)) << errorMessage(spm);
  ASSERT_EQ(bin->pieces.size(), 32000u);
  EXPECT_EQ(bin->pieces, spm->pieces);
  EXPECT_EQ(bin->scores, spm->scores);
  EXPECT_EQ(bin->types, spm->types);
  EXPECT_EQ(spm->bosId, 1);
  EXPECT_EQ(spm->eosId, 2);
  EXPECT_EQ(spm->unkId, 0);
  EXPECT_TRUE(spm->byteFallback);
  EXPECT_TRUE(spm->addDummyPrefix);
}

TEST(Tokenizer, Llama2ReferenceEncodings) {
  KILN_REQUIRE_MODELS();
  llvm::Expected<TokenizerDesc> tok =
      readLlama2cTokenizer(modelPath("llama2-tokenizer/tokenizer.bin"));
  ASSERT_TRUE(bool(tok)) << errorMessage(tok);
  std::string json =
      readFileBytes(modelPath("llama2-tokenizer/reference_encodings.json"));
  llvm::Expected<llvm::json::Value> v = llvm::json::parse(json);
  ASSERT_TRUE(bool(v)) << errorMessage(v);
  const llvm::json::Array *cases = v->getAsObject()->getArray("cases");
  ASSERT_NE(cases, nullptr);
  ASSERT_GE(cases->size(), 5u);
  for (const llvm::json::Value &c : *cases) {
    const llvm::json::Object *o = c.getAsObject();
    std::string text = o->getString("text")->str();
    std::vector<int> ids;
    for (const llvm::json::Value &id : *o->getArray("ids"))
      ids.push_back(static_cast<int>(*id.getAsInteger()));
    EXPECT_EQ(encodeSpm(*tok, text), ids) << text;
  }
}

TEST(Tokenizer, HuggingFaceTokenizerJson) {
  TempDir dir;
  // A small SentencePiece-style BPE tokenizer.json with both merge spellings.
  writeFileBytes(dir.path("tokenizer.json"), R"({
    "version": "1.0",
    "added_tokens": [
      {"id": 0, "content": "<unk>", "special": true},
      {"id": 1, "content": "<s>", "special": true},
      {"id": 2, "content": "</s>", "special": true},
      {"id": 9, "content": "<extra>", "special": false}
    ],
    "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "\u2581"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": null,
    "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true,
      "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "a": 4,
                "b": 5, "\u2581": 6, "ab": 7, "\u2581ab": 8},
      "merges": ["a b", ["\u2581", "ab"]]}
  })");
  writeFileBytes(dir.path("tokenizer_config.json"),
                 R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
                     "add_bos_token": false})");
  llvm::Expected<TokenizerDesc> tok = readTokenizer(dir.root());
  ASSERT_TRUE(bool(tok)) << errorMessage(tok);
  EXPECT_EQ(tok->model, "bpe");
  ASSERT_EQ(tok->pieces.size(), 10u);
  EXPECT_EQ(tok->pieces[8], "\xe2\x96\x81"
                            "ab");
  EXPECT_EQ(tok->pieces[9], "<extra>");
  EXPECT_EQ(tok->types, (std::vector<int32_t>{2, 3, 3, 6, 1, 1, 1, 1, 1, 4}));
  EXPECT_EQ(tok->merges, (std::vector<std::string>{
                             "a b", "\xe2\x96\x81 ab"}));
  EXPECT_EQ(tok->scores[7], 0.0f);  // merge rank 0
  EXPECT_EQ(tok->scores[8], -1.0f); // merge rank 1
  EXPECT_TRUE(tok->addDummyPrefix);
  EXPECT_TRUE(tok->byteFallback);
  EXPECT_FALSE(tok->addBos);
  EXPECT_EQ(tok->bosId, 1);
  EXPECT_EQ(tok->eosId, 2);
  EXPECT_EQ(tok->unkId, 0);
}

TEST(Tokenizer, HuggingFaceErrors) {
  TempDir dir;
  std::string path = dir.path("tokenizer.json");
  writeFileBytes(path, R"({"model": {"type": "BPE", "vocab": {"a": 0}, )");
  llvm::Expected<TokenizerDesc> tok = readTokenizer(path);
  std::string msg = errorMessage(tok);
  EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("invalid JSON"), std::string::npos) << msg;

  writeFileBytes(path, R"({"model": {"type": "Unigram", "vocab": []}})");
  tok = readTokenizer(path);
  msg = errorMessage(tok);
  EXPECT_NE(msg.find("unsupported tokenizer model.type 'Unigram'"),
            std::string::npos)
      << msg;

  writeFileBytes(path, R"({"pre_tokenizer": {"type": "ByteLevel"},
      "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  tok = readTokenizer(path);
  msg = errorMessage(tok);
  EXPECT_NE(msg.find("ByteLevel"), std::string::npos) << msg;

  writeFileBytes(path, R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 2},
      "merges": []}})");
  tok = readTokenizer(path);
  msg = errorMessage(tok);
  EXPECT_NE(msg.find("no piece has id 1"), std::string::npos) << msg;
}

TEST(Tokenizer, Llama2cErrors) {
  TempDir dir;
  std::string path = dir.path("tok9.bin");
  // max_token_length 4, then a token claiming 100 bytes.
  std::string bytes("\x04\x00\x00\x00"
                    "\x00\x00\x00\x00"
                    "\x64\x00\x00\x00"
                    "abc",
                    15);
  writeFileBytes(path, bytes);
  llvm::Expected<TokenizerDesc> tok = readLlama2cTokenizer(path);
  std::string msg = errorMessage(tok);
  EXPECT_NE(msg.find("tok9.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("token 0 has length 100"), std::string::npos) << msg;

  writeFileBytes(path, std::string("\x04\x00\x00\x00\x00\x00\x00\x00\x02",
                                   9));
  tok = readLlama2cTokenizer(path);
  msg = errorMessage(tok);
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(Tokenizer, Synthetic) {
  TokenizerDesc tok = makeSyntheticTokenizer(300);
  ASSERT_EQ(tok.pieces.size(), 300u);
  EXPECT_EQ(tok.pieces[3], "<0x00>");
  EXPECT_EQ(tok.pieces[258], "<0xFF>");
  EXPECT_EQ(tok.types[258], 6);
  EXPECT_EQ(tok.pieces[259], "<tok_259>");
  EXPECT_EQ(tok.types[259], 4);
  // Text still tokenizes through byte fallback.
  std::vector<int> ids = encodeSpm(tok, "hi");
  EXPECT_EQ(ids, (std::vector<int>{1, 0xE2 + 3, 0x96 + 3, 0x81 + 3, 'h' + 3,
                                   'i' + 3}));
}

} // namespace

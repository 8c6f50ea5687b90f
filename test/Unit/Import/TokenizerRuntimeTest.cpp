//===- TokenizerRuntimeTest.cpp - What kiln-compile writes, kiln-run loads
//-===//
//
// The compile-time guarantee of docs/artifact.md ("Validity"): every
// tokenizer the importers accept is written by TokenizerWriter and loaded by
// the runtime's tokenizer (kiln::rt::Tokenizer, no LLVM), and every
// tokenizer the shared check rejects is refused by the writer.
//
//===----------------------------------------------------------------------===//

#include "ImportTestUtils.h"

#include "codegen/Artifact/TokenizerWriter.h"
#include "dialects/Kiln/Import/ImportUtils.h"
#include "dialects/Kiln/Import/Importers.h"

#include "tokenizer/Tokenizer.h"

#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <functional>
#include <limits>

using namespace mlir::kiln;
using namespace kiln::test;

namespace {

/// Writes `tok` as the artifact's tokenizer.json text, or returns the
/// writer's error in `error`.
std::string writerText(const TokenizerDesc &tok, std::string &error) {
  llvm::Expected<llvm::json::Value> doc = tokenizerToJson(tok);
  if (!doc) {
    error = errorMessage(doc.takeError());
    return "";
  }
  std::string text;
  llvm::raw_string_ostream(text) << *doc;
  return text;
}

/// Loads writer output into the runtime tokenizer; returns its status.
kiln::rt::TokenizerStatus runtimeLoad(const std::string &text,
                                      kiln::rt::Tokenizer &out) {
  return kiln::rt::Tokenizer::parse(text, "artifact/tokenizer.json", out);
}

TEST(TokenizerRuntime, RealTokenizersLoadAndEncodeAlike) {
  KILN_REQUIRE_MODELS();
  struct Source {
    const char *path;
    bool bpe;
  } sources[] = {
      {"stories260K/tok512.bin", false},
      {"stories260K/stories260K.gguf", false},
      {"llama2-tokenizer/tokenizer.bin", false},
      {"llama2-tokenizer/tokenizer.model", false},
      {"tinystories-656k/hf", true},
      {"tinystories-656k/gguf/TinyStories-656K-Q8_0.gguf", false},
  };
  for (const Source &s : sources) {
    llvm::Expected<TokenizerDesc> tok = readTokenizer(modelPath(s.path));
    ASSERT_TRUE(bool(tok)) << errorMessage(tok);
    std::string error;
    std::string text = writerText(*tok, error);
    ASSERT_EQ(error, "") << s.path;
    kiln::rt::Tokenizer rt;
    kiln::rt::TokenizerStatus status = runtimeLoad(text, rt);
    ASSERT_TRUE(status.ok) << s.path << ": " << status.message;
    EXPECT_EQ(rt.vocabSize(), static_cast<int32_t>(tok->pieces.size()));
    EXPECT_EQ(rt.bosId(), tok->bosId);
    EXPECT_EQ(rt.eosId(), tok->eosId);
    EXPECT_EQ(rt.unkId(), tok->unkId);
    for (const char *prompt :
         {"Once upon a time, there was a little girl named Lily.",
          "  two spaces\nand a newline"}) {
      std::vector<int> expected =
          s.bpe ? encodeBpe(*tok, prompt) : encodeSpm(*tok, prompt);
      std::vector<int32_t> got = rt.encode(prompt, tok->addBos);
      EXPECT_EQ(std::vector<int>(got.begin(), got.end()), expected)
          << s.path << ": " << prompt;
    }
  }
}

/// TinyStories-656K's tokenizer.json has byte_fallback but no <0xXX>
/// pieces, and fuse_unk: a run of code points with no piece is one unk, as
/// in Hugging Face tokenizers.
TEST(TokenizerRuntime, TinyStoriesFusesUnknownRuns) {
  KILN_REQUIRE_MODELS();
  llvm::Expected<TokenizerDesc> tok =
      readTokenizer(modelPath("tinystories-656k/hf"));
  ASSERT_TRUE(bool(tok)) << errorMessage(tok);
  EXPECT_TRUE(tok->fuseUnk);
  EXPECT_TRUE(tok->byteFallback);
  std::string error;
  kiln::rt::Tokenizer rt;
  ASSERT_TRUE(runtimeLoad(writerText(*tok, error), rt).ok) << error;
  // "€€" (two 3-byte code points with no piece) -> one unk.
  std::vector<int32_t> fused = rt.encode("a\xe2\x82\xac\xe2\x82\xac", false);
  ASSERT_GE(fused.size(), 2u);
  EXPECT_EQ(fused.back(), tok->unkId);
  EXPECT_NE(fused[fused.size() - 2], tok->unkId);
  // Without fuse_unk: one unk per code point.
  tok->fuseUnk = false;
  ASSERT_TRUE(runtimeLoad(writerText(*tok, error), rt).ok) << error;
  std::vector<int32_t> unfused = rt.encode("a\xe2\x82\xac\xe2\x82\xac", false);
  ASSERT_EQ(unfused.size(), fused.size() + 1);
  EXPECT_EQ(unfused[unfused.size() - 1], tok->unkId);
  EXPECT_EQ(unfused[unfused.size() - 2], tok->unkId);
}

/// Anything the shared check accepts, the writer writes and the runtime
/// loads; anything it rejects, the writer refuses (no artifact kiln-run
/// would refuse).
TEST(TokenizerRuntime, CheckAcceptsExactlyWhatTheWriterWrites) {
  TokenizerDesc spm = makeSyntheticTokenizer(300);
  TokenizerDesc bpe = spm;
  bpe.model = "bpe";
  bpe.pieces[260] = "ab";
  bpe.pieces[261] = "a";
  bpe.pieces[262] = "b";
  bpe.types[260] = bpe.types[261] = bpe.types[262] = 1;
  bpe.merges = {"a b"};
  float inf = std::numeric_limits<float>::infinity();
  float nan = std::numeric_limits<float>::quiet_NaN();
  using Edit = std::function<void(TokenizerDesc &)>;
  std::vector<std::pair<const char *, Edit>> edits = {
      {"unchanged", [](TokenizerDesc &) {}},
      {"nan score", [&](TokenizerDesc &t) { t.scores[5] = nan; }},
      {"inf score", [&](TokenizerDesc &t) { t.scores[5] = inf; }},
      {"-inf score", [&](TokenizerDesc &t) { t.scores[5] = -inf; }},
      {"largest score",
       [](TokenizerDesc &t) {
         t.scores[5] = std::numeric_limits<float>::max();
       }},
      {"smallest score",
       [](TokenizerDesc &t) {
         t.scores[5] = std::numeric_limits<float>::denorm_min();
       }},
      {"type 0", [](TokenizerDesc &t) { t.types[9] = 0; }},
      {"type 5", [](TokenizerDesc &t) { t.types[9] = 5; }},
      {"type 7", [](TokenizerDesc &t) { t.types[9] = 7; }},
      {"type -1", [](TokenizerDesc &t) { t.types[9] = -1; }},
      {"bos out of range", [](TokenizerDesc &t) { t.bosId = 300; }},
      {"eos -1", [](TokenizerDesc &t) { t.eosId = -1; }},
      {"unk -1", [](TokenizerDesc &t) { t.unkId = -1; }},
      {"unk -2", [](TokenizerDesc &t) { t.unkId = -2; }},
      {"unk last", [](TokenizerDesc &t) { t.unkId = 299; }},
      {"empty piece", [](TokenizerDesc &t) { t.pieces[270] = ""; }},
      {"duplicate piece", [](TokenizerDesc &t) { t.pieces[270] = "<s>"; }},
      {"piece with a space", [](TokenizerDesc &t) { t.pieces[270] = "a b"; }},
      {"piece with a NUL",
       [](TokenizerDesc &t) { t.pieces[270] = std::string("a\0b", 3); }},
      {"model other", [](TokenizerDesc &t) { t.model = "unigram"; }},
      {"flags flipped",
       [](TokenizerDesc &t) {
         t.addBos = !t.addBos;
         t.addDummyPrefix = !t.addDummyPrefix;
         t.prefixIfNoSpace = !t.prefixIfNoSpace;
         t.byteFallback = !t.byteFallback;
         t.fuseUnk = !t.fuseUnk;
       }},
      {"short scores", [](TokenizerDesc &t) { t.scores.pop_back(); }},
      {"merge missing half", [](TokenizerDesc &t) { t.merges = {"a c"}; }},
      {"merge missing result", [](TokenizerDesc &t) { t.merges = {"b a"}; }},
      {"merge three parts", [](TokenizerDesc &t) { t.merges = {"a b a"}; }},
      {"merge one part", [](TokenizerDesc &t) { t.merges = {"ab"}; }},
      {"merge leading space", [](TokenizerDesc &t) { t.merges = {" ab"}; }},
      {"merge repeated",
       [](TokenizerDesc &t) {
         t.merges = {"a b", "a b"};
       }},
  };
  int accepted = 0, rejected = 0;
  for (const TokenizerDesc &base : {spm, bpe}) {
    for (const auto &[what, edit] : edits) {
      TokenizerDesc t = base;
      edit(t);
      std::string label = base.model + ", " + what;
      llvm::Error check = detail::checkTokenizer(t, "t");
      bool ok = !check;
      llvm::consumeError(std::move(check));
      std::string error;
      std::string text = writerText(t, error);
      if (!ok) {
        ++rejected;
        EXPECT_NE(error, "") << label << ": the writer must refuse it";
        continue;
      }
      ++accepted;
      ASSERT_EQ(error, "") << label;
      kiln::rt::Tokenizer rt;
      kiln::rt::TokenizerStatus status = runtimeLoad(text, rt);
      EXPECT_TRUE(status.ok) << label << ": " << status.message;
      // And it encodes without failing (ids in range).
      for (int32_t id : rt.encode("ab a\xc3\xa9\xff", true))
        EXPECT_TRUE(rt.isValid(id)) << label;
    }
  }
  EXPECT_GT(accepted, 10);
  EXPECT_GT(rejected, 10);
}

} // namespace

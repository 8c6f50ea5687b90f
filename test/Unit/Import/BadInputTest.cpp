//===- BadInputTest.cpp - Corrupted checkpoints give clear errors ---------===//
//
// Writes corrupted copies of the real model files into a temp directory and
// checks that each import fails with a message naming the file and the key
// fact (never a crash).
//
//===----------------------------------------------------------------------===//

#include "ImportTestUtils.h"

#include "dialects/Kiln/Import/Importers.h"
#include "dialects/Kiln/Import/ModelDesc.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cstring>
#include <functional>

using namespace mlir::kiln;
using namespace kiln::test;

namespace {

#define EXPECT_CONTAINS(haystack, needle)                                      \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos)             \
      << "message: " << (haystack) << "\nexpected to contain: " << (needle)

void putU32(std::string &s, size_t at, uint32_t v) {
  ASSERT_LE(at + 4, s.size());
  std::memcpy(&s[at], &v, 4);
}
void putU64(std::string &s, size_t at, uint64_t v) {
  ASSERT_LE(at + 8, s.size());
  std::memcpy(&s[at], &v, 8);
}

/// Imports `bytes` written as `name` in a temp dir; returns the error text.
std::string importBytes(const TempDir &dir, const std::string &name,
                        const std::string &bytes) {
  std::string path = dir.path(name);
  writeFileBytes(path, bytes);
  llvm::Expected<ModelDesc> m = importModel(path);
  EXPECT_FALSE(bool(m)) << "import of corrupted " << name << " succeeded";
  return errorMessage(m);
}

//===----------------------------------------------------------------------===//
// llama2.c
//===----------------------------------------------------------------------===//

TEST(BadInput, Llama2cTruncated) {
  KILN_REQUIRE_MODELS();
  TempDir dir;
  std::string bin = readFileBytes(modelPath("stories260K/stories260K.bin"));
  std::string msg = importBytes(dir, "stories260K.bin", bin.substr(0, 1000));
  EXPECT_CONTAINS(msg, "stories260K.bin: file is 1000 bytes but the header "
                       "(dim=64, hidden_dim=172, n_layers=5, n_heads=8, "
                       "n_kv_heads=4, vocab_size=512, seq_len=512) implies "
                       "1056540");
  msg = importBytes(dir, "tiny.bin", bin.substr(0, 20));
  EXPECT_CONTAINS(msg, "tiny.bin");
  EXPECT_CONTAINS(msg, "28-byte llama2.c header");
  // An untied header (negative vocab) needs a wcls the file lacks: an error
  // naming the missing tensor, never a silent tie.
  std::string untied = bin;
  putU32(untied, 20, static_cast<uint32_t>(-512));
  msg = importBytes(dir, "untied.bin", untied);
  EXPECT_CONTAINS(msg, "untied.bin: llama2.c header: vocab_size is -512 at "
                       "offset 20, which means an unshared classifier, but "
                       "the file ends at offset 1056540 where that classifier "
                       "(missing tensor 'wcls', 131072 bytes) would begin");
  // Cut shorter still, it is a plain size mismatch.
  msg = importBytes(dir, "untied-cut.bin", untied.substr(0, 1056536));
  EXPECT_CONTAINS(msg, "untied-cut.bin: file is 1056536 bytes");
  EXPECT_CONTAINS(msg, "implies 1187612");
}

TEST(BadInput, Llama2cNonsensicalHeader) {
  KILN_REQUIRE_MODELS();
  TempDir dir;
  std::string bin = readFileBytes(modelPath("stories260K/stories260K.bin"));
  std::string h = bin;
  putU32(h, 0, 0); // dim = 0
  EXPECT_CONTAINS(importBytes(dir, "a.bin", h), "dim is 0");
  h = bin;
  putU32(h, 12, 7); // n_heads = 7
  EXPECT_CONTAINS(importBytes(dir, "b.bin", h),
                  "dim 64 is not a multiple of n_heads 7");
  h = bin;
  putU32(h, 16, 3); // n_kv_heads = 3
  EXPECT_CONTAINS(importBytes(dir, "c.bin", h),
                  "n_heads (8) is not a multiple of n_kv_heads (3)");
  h = bin;
  putU32(h, 8, static_cast<uint32_t>(-5)); // n_layers = -5
  EXPECT_CONTAINS(importBytes(dir, "d.bin", h), "n_layers is -5");
  h = bin;
  putU32(h, 4, 0x7fffffff); // hidden_dim huge: no overflow, clear error
  EXPECT_CONTAINS(importBytes(dir, "e.bin", h),
                  "e.bin: llama2.c header: implausible hidden_dim 2147483647: "
                  "it exceeds the limit of 16777216 (2^24)");
}

/// Number of non-overlapping occurrences of `needle` in `s`.
size_t countOf(const std::string &s, const std::string &needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos;
       at = s.find(needle, at + needle.size()))
    ++n;
  return n;
}

TEST(BadInput, Llama2cHeaderMessages) {
  KILN_REQUIRE_MODELS();
  TempDir dir;
  std::string bin = readFileBytes(modelPath("stories260K/stories260K.bin"));
  // One sentence naming the field, its offset and value; the path once and
  // no dump of the whole header.
  std::string h = bin;
  putU32(h, 0, 0);
  std::string msg = importBytes(dir, "a.bin", h);
  EXPECT_CONTAINS(msg, "a.bin: llama2.c header: dim is 0 at offset 0, "
                       "expected a positive value");
  EXPECT_EQ(countOf(msg, "a.bin"), 1u) << msg;
  EXPECT_EQ(msg.find("hidden_dim="), std::string::npos) << msg;
  h = bin;
  putU32(h, 16, 3);
  msg = importBytes(dir, "c.bin", h);
  EXPECT_CONTAINS(msg, "c.bin: llama2.c header: n_heads (8) is not a "
                       "multiple of n_kv_heads (3)");
  EXPECT_EQ(countOf(msg, "c.bin"), 1u) << msg;
  // vocab_size = INT32_MIN cannot be negated: not "expected a non-zero value".
  h = bin;
  putU32(h, 20, 0x80000000u);
  msg = importBytes(dir, "v.bin", h);
  EXPECT_CONTAINS(msg, "v.bin: llama2.c header: vocab_size is -2147483648 at "
                       "offset 20");
  EXPECT_CONTAINS(msg, "does not fit in a 32-bit int");
  EXPECT_EQ(msg.find("non-zero"), std::string::npos) << msg;
  h = bin;
  putU32(h, 20, 0);
  EXPECT_CONTAINS(importBytes(dir, "v0.bin", h),
                  "v0.bin: llama2.c header: vocab_size is 0 at offset 20, "
                  "expected a non-zero value");
  // Each limit is named.
  h = bin;
  putU32(h, 16, 70000); // n_kv_heads
  EXPECT_CONTAINS(importBytes(dir, "s.bin", h),
                  "implausible n_kv_heads 70000: it exceeds the limit "
                  "of 65536 (2^16)");
  h = bin;
  putU32(h, 8, 5000); // n_layers
  EXPECT_CONTAINS(importBytes(dir, "l.bin", h),
                  "implausible n_layers 5000: it exceeds the limit of 4096");
}

//===----------------------------------------------------------------------===//
// Format detection
//===----------------------------------------------------------------------===//

TEST(BadInput, FormatSniffing) {
  KILN_REQUIRE_MODELS();
  TempDir dir;
  // A safetensors file given instead of its directory.
  std::string st = modelPath("tinystories-656k/hf/model.safetensors");
  std::string msg = errorMessage(importModel(st).takeError());
  EXPECT_CONTAINS(msg, st + ": this is a safetensors file; pass the Hugging "
                            "Face directory that holds it and its "
                            "config.json");
  // Also under another name.
  msg = importBytes(dir, "weights.bin", readFileBytes(st));
  EXPECT_CONTAINS(msg, "weights.bin: this is a safetensors file");
  // JSON files.
  std::string cfg = modelPath("tinystories-656k/hf/config.json");
  msg = errorMessage(importModel(cfg).takeError());
  EXPECT_CONTAINS(msg, cfg + ": this looks like a JSON file, not a "
                             "checkpoint");
  msg = importBytes(dir, "x.json", "\n  {\"a\": 1}");
  EXPECT_CONTAINS(msg, "x.json: this looks like a JSON file");
  // Text and other junk without a .bin name.
  msg = importBytes(dir, "notes.txt",
                    "Once upon a time there was a little model.\n");
  EXPECT_CONTAINS(msg, "notes.txt: unrecognised checkpoint format (expected "
                       "a llama2.c .bin, a GGUF file, a Hugging Face "
                       "directory or synthetic:<shape>)");
  msg = importBytes(dir, "short.dat", "abc");
  EXPECT_CONTAINS(msg, "short.dat: unrecognised checkpoint format");
  // A .bin keeps the llama2.c diagnosis.
  msg = importBytes(dir, "notes.bin",
                    "Once upon a time there was a little model.\n");
  EXPECT_CONTAINS(msg, "notes.bin: llama2.c header: implausible dim");
  // A renamed llama2.c checkpoint still imports.
  writeFileBytes(dir.path("model.dat"),
                 readFileBytes(modelPath("stories260K/stories260K.bin")));
  writeFileBytes(dir.path("tok512.bin"),
                 readFileBytes(modelPath("stories260K/tok512.bin")));
  llvm::Expected<ModelDesc> m = importModel(dir.path("model.dat"));
  ASSERT_TRUE(bool(m)) << errorMessage(m);
  EXPECT_EQ(m->config.sourceFormat, "llama2c");
  EXPECT_EQ(m->tokenizer.pieces.size(), 512u);
}

//===----------------------------------------------------------------------===//
// Tokenizers
//===----------------------------------------------------------------------===//

/// A llama2.c tokenizer file with `n` pieces.
std::string llama2cTokenizerBytes(int n) {
  std::string s;
  auto i32 = [&](int32_t v) { s.append(reinterpret_cast<char *>(&v), 4); };
  i32(8);
  for (int id = 0; id < n; ++id) {
    std::string piece = id == 0   ? "<unk>"
                        : id == 1 ? "\n<s>\n"
                        : id == 2 ? "\n</s>\n"
                                  : "t" + std::to_string(id);
    float score = 0.0f;
    s.append(reinterpret_cast<char *>(&score), 4);
    i32(static_cast<int32_t>(piece.size()));
    s += piece;
  }
  return s;
}

TEST(BadInput, Llama2cMissingTokenizer) {
  KILN_REQUIRE_MODELS();
  TempDir dir;
  std::string bin = readFileBytes(modelPath("stories260K/stories260K.bin"));
  std::string msg = importBytes(dir, "stories260K.bin", bin);
  EXPECT_CONTAINS(msg, "stories260K.bin: no tokenizer: expected a tok*.bin or "
                       "tokenizer.bin beside the checkpoint, or pass "
                       "--tokenizer FILE");
}

TEST(BadInput, TokenizerSmallerThanVocab) {
  KILN_REQUIRE_MODELS();
  TempDir dir;
  std::string tok7 = dir.path("tok7.bin");
  writeFileBytes(tok7, llama2cTokenizerBytes(7));
  ASSERT_TRUE(bool(readLlama2cTokenizer(tok7)));
  // llama2.c and GGUF: the tokenizer must cover the whole vocabulary.
  for (std::string model : {modelPath("stories260K/stories260K.bin"),
                            modelPath("stories260K/stories260K.gguf")}) {
    llvm::Expected<ModelDesc> m = importModel(model, tok7);
    EXPECT_CONTAINS(errorMessage(m), "tokenizer " + tok7 +
                                         " has 7 pieces but the model's "
                                         "vocab_size is 512");
  }
  // A tok*.bin beside a llama2.c checkpoint with the wrong size is no match.
  writeFileBytes(dir.path("stories260K.bin"),
                 readFileBytes(modelPath("stories260K/stories260K.bin")));
  llvm::Expected<ModelDesc> m = importModel(dir.path("stories260K.bin"));
  std::string msg = errorMessage(m);
  EXPECT_CONTAINS(msg, "no tokenizer beside the checkpoint has 512 pieces");
  EXPECT_CONTAINS(msg, "tok7.bin has 7 pieces");
}

TEST(BadInput, TokenizerLargerThanVocab) {
  KILN_REQUIRE_MODELS();
  std::string big = modelPath("llama2-tokenizer/tokenizer.bin");
  for (std::string model : {modelPath("stories260K/stories260K.bin"),
                            modelPath("stories260K/stories260K.gguf"),
                            modelPath("tinystories-656k/hf")}) {
    llvm::Expected<ModelDesc> m = importModel(model, big);
    std::string msg = errorMessage(m);
    EXPECT_CONTAINS(msg, "tokenizer " + big +
                             " has 32000 pieces but the "
                             "model's vocab_size is");
  }
}

TEST(BadInput, HfTokenizerPaddedToVocab) {
  KILN_REQUIRE_MODELS();
  // tok512.bin has 512 pieces, the model 2048 embedding rows: HF embedding
  // tables are often padded, so the rest become unmatchable control pieces.
  llvm::Expected<ModelDesc> m = importModel(
      modelPath("tinystories-656k/hf"), modelPath("stories260K/tok512.bin"));
  ASSERT_TRUE(bool(m)) << errorMessage(m);
  const TokenizerDesc &tok = m->tokenizer;
  ASSERT_EQ(tok.pieces.size(), 2048u);
  ASSERT_EQ(tok.scores.size(), 2048u);
  ASSERT_EQ(tok.types.size(), 2048u);
  llvm::Expected<TokenizerDesc> small =
      readLlama2cTokenizer(modelPath("stories260K/tok512.bin"));
  ASSERT_TRUE(bool(small)) << errorMessage(small);
  EXPECT_TRUE(std::equal(small->pieces.begin(), small->pieces.end(),
                         tok.pieces.begin()));
  EXPECT_EQ(tok.pieces[512], "<pad_512>");
  EXPECT_EQ(tok.pieces[2047], "<pad_2047>");
  EXPECT_EQ(tok.types[512], 3);
  EXPECT_EQ(tok.types[2047], 3);
  EXPECT_EQ(tok.scores[1000], 0.0f);
  EXPECT_EQ(tok.types[300], 1);
}

TEST(BadInput, MissingFile) {
  llvm::Expected<ModelDesc> m = importModel("/nonexistent/model.bin");
  std::string msg = errorMessage(m);
  EXPECT_CONTAINS(msg, "/nonexistent/model.bin");
  EXPECT_CONTAINS(msg, "no such file");
}

//===----------------------------------------------------------------------===//
// GGUF
//===----------------------------------------------------------------------===//

/// Offset just after the GGUF string `s` (u64 length + bytes) in `file`.
size_t afterString(const std::string &file, const std::string &s) {
  size_t at = file.find(s);
  EXPECT_NE(at, std::string::npos) << s;
  return at + s.size();
}

class GgufBadInput : public ::testing::Test {
protected:
  void SetUp() override {
    if (!haveModels())
      GTEST_SKIP() << "shared models not found";
    gguf = readFileBytes(modelPath("stories260K/stories260K.gguf"));
    q8 = readFileBytes(
        modelPath("tinystories-656k/gguf/TinyStories-656K-Q8_0.gguf"));
  }
  TempDir dir;
  std::string gguf, q8;
};

TEST_F(GgufBadInput, WrongMagic) {
  std::string g = gguf;
  g[0] = 'X';
  std::string msg = importBytes(dir, "model.gguf", g);
  EXPECT_CONTAINS(msg, "model.gguf");
  EXPECT_CONTAINS(msg, "model.gguf: bad magic 58 47 55 46 at offset 0 "
                       "(expected 'GGUF' = 47 47 55 46)");
  g[1] = '\xa7';
  g[3] = '\0';
  msg = importBytes(dir, "model.gguf", g);
  EXPECT_CONTAINS(msg, "bad magic 58 a7 55 00 at offset 0");
}

TEST_F(GgufBadInput, UnsupportedVersion) {
  std::string g = gguf;
  putU32(g, 4, 7);
  EXPECT_CONTAINS(importBytes(dir, "v7.gguf", g),
                  "unsupported GGUF version 7 at offset 4");
}

TEST_F(GgufBadInput, TruncatedHeader) {
  std::string msg = importBytes(dir, "cut.gguf", gguf.substr(0, 5000));
  EXPECT_CONTAINS(msg, "cut.gguf");
  EXPECT_CONTAINS(msg, "offset");
  EXPECT_TRUE(msg.find("truncated") != std::string::npos ||
              msg.find("remain") != std::string::npos)
      << msg;
}

TEST_F(GgufBadInput, HugeCounts) {
  std::string g = gguf;
  putU64(g, 16, uint64_t(1) << 60); // kv_count
  EXPECT_CONTAINS(importBytes(dir, "kv.gguf", g), "kv_count 1152921504606846976");
  g = gguf;
  putU64(g, 8, uint64_t(1) << 60); // tensor_count
  EXPECT_CONTAINS(importBytes(dir, "tc.gguf", g), "tensor_count");
  g = gguf;
  putU64(g, 24, uint64_t(1) << 62); // length of the first key
  std::string msg = importBytes(dir, "len.gguf", g);
  EXPECT_CONTAINS(msg, "len.gguf");
  EXPECT_CONTAINS(msg, "has length 4611686018427387904");
  // Array count of tokenizer.ggml.tokens.
  g = gguf;
  size_t at = afterString(g, "tokenizer.ggml.tokens");
  putU64(g, at + 8, uint64_t(1) << 40);
  msg = importBytes(dir, "arr.gguf", g);
  EXPECT_CONTAINS(msg, "array of 1099511627776 string");
}

TEST_F(GgufBadInput, TensorPastEndOfFile) {
  std::string msg = importBytes(dir, "short.gguf", gguf.substr(0, 1000000));
  EXPECT_CONTAINS(msg, "short.gguf");
  EXPECT_CONTAINS(msg, "extends past the end of the file (1000000 bytes)");
  // A corrupted tensor offset.
  std::string g = gguf;
  size_t at = afterString(g, "blk.2.ffn_up.weight");
  putU64(g, at + 4 + 16 + 4, uint64_t(1) << 50);
  msg = importBytes(dir, "off.gguf", g);
  EXPECT_CONTAINS(msg, "tensor 'blk.2.ffn_up.weight' at offset 14176 + "
                       "1125899906842624");
  EXPECT_CONTAINS(msg, "past the end of the file");
}

/// Offset of the type field of tensor `name` (with `nDims` dims) in the
/// tensor infos of `g`; its data offset follows at +4.
size_t tensorTypeAt(const std::string &g, const std::string &name, int nDims) {
  return afterString(g, name) + 4 + 8 * nDims;
}

TEST_F(GgufBadInput, MisalignedTensorOffset) {
  std::string g = gguf;
  putU64(g, tensorTypeAt(g, "token_embd.weight", 2) + 4, 3);
  std::string msg = importBytes(dir, "align.gguf", g);
  EXPECT_CONTAINS(msg, "align.gguf: tensor 'token_embd.weight': data offset 3 "
                       "is not a multiple of the alignment 32");
  g = gguf;
  putU64(g, tensorTypeAt(g, "blk.0.attn_q.weight", 2) + 4, 262400 + 16);
  msg = importBytes(dir, "align2.gguf", g);
  EXPECT_CONTAINS(msg, "tensor 'blk.0.attn_q.weight': data offset 262416 is "
                       "not a multiple of the alignment 32");
}

TEST_F(GgufBadInput, BadAlignmentKey) {
  // llama.block_count and general.alignment have the same length: rename
  // the key in place and give it a bad value.
  size_t key = afterString(gguf, "llama.block_count") - 17;
  for (uint32_t value : {0u, 48u, 1u << 30}) {
    std::string g = gguf;
    g.replace(key, 17, "general.alignment");
    putU32(g, key + 17 + 4, value);
    std::string msg = importBytes(dir, "al.gguf", g);
    EXPECT_CONTAINS(msg, "al.gguf: general.alignment is " +
                             std::to_string(value) + " at offset");
    EXPECT_CONTAINS(msg, "expected a non-zero power of two");
  }
}

TEST_F(GgufBadInput, OverlappingTensors) {
  // output_norm.weight moved into token_embd.weight [0, 131072).
  std::string g = gguf;
  putU64(g, tensorTypeAt(g, "output_norm.weight", 1) + 4, 32);
  std::string msg = importBytes(dir, "overlap.gguf", g);
  EXPECT_CONTAINS(msg, "overlap.gguf: tensors 'token_embd.weight' (F32 [64, "
                       "512]) [0, 131072) and 'output_norm.weight' (F32 [64]) "
                       "[32, 288) overlap (offsets relative to the data "
                       "section at 14176)");
  // blk.0.attn_q.weight [262400, 278784) starting 32 bytes early.
  g = gguf;
  putU64(g, tensorTypeAt(g, "blk.0.attn_q.weight", 2) + 4, 262400 - 32);
  msg = importBytes(dir, "overlap2.gguf", g);
  EXPECT_CONTAINS(msg, "tensors 'output.weight' (F32 [64, 512]) [131328, "
                       "262400) and 'blk.0.attn_q.weight' (F32 [64, 64]) "
                       "[262368, 278752) overlap");
}

TEST_F(GgufBadInput, TypeRelabelledBreaksLayout) {
  // F32 -> F16 / BF16 halves the span: the bytes after it are unaccounted
  // for, and the tensor would decode to garbage.
  for (uint32_t type : {1u, 30u}) {
    std::string g = gguf;
    putU32(g, tensorTypeAt(g, "blk.0.attn_q.weight", 2), type);
    std::string msg = importBytes(dir, "f16.gguf", g);
    EXPECT_CONTAINS(msg, std::string("f16.gguf: tensor 'blk.0.attn_q.weight' "
                                     "(") +
                             (type == 1 ? "F16" : "BF16") +
                             " [64, 64]) [262400, 270592) is followed by "
                             "tensor 'blk.0.attn_k.weight'");
    EXPECT_CONTAINS(msg, "leaving bytes [270592, 278784) unused");
    EXPECT_CONTAINS(msg, "the type or shape of 'blk.0.attn_q.weight'");
  }
  // The first tensor relabelled.
  std::string g = gguf;
  putU32(g, tensorTypeAt(g, "token_embd.weight", 2), 1);
  EXPECT_CONTAINS(importBytes(dir, "first.gguf", g),
                  "tensor 'token_embd.weight' (F16 [64, 512]) [0, 65536) is "
                  "followed by tensor 'output_norm.weight'");
  // The last tensor relabelled: bytes left at the end of the data section.
  g = gguf;
  putU32(g, tensorTypeAt(g, "blk.4.ffn_norm.weight", 1), 1);
  EXPECT_CONTAINS(importBytes(dir, "last.gguf", g),
                  "last.gguf: the data section holds 1171200 bytes but the "
                  "last tensor 'blk.4.ffn_norm.weight' (F16 [64]) [1170944, "
                  "1171072) ends at 1171072");
  // A relabelled type with a compensating shape is caught by the shape.
  g = gguf;
  size_t at = tensorTypeAt(g, "blk.0.attn_q.weight", 2);
  putU32(g, at, 1);
  putU64(g, at - 8, 128); // ne[1] 64 -> 128: 16384 bytes again
  EXPECT_CONTAINS(importBytes(dir, "shape.gguf", g),
                  "blk.0.attn_q.weight: shape [128, 64] but the config "
                  "implies [64, 64]");
}

TEST_F(GgufBadInput, NoTokenizer) {
  std::string g = gguf;
  size_t at = afterString(g, "tokenizer.ggml.tokens");
  g[at - 1] = 'z';
  std::string msg = importBytes(dir, "notok.gguf", g);
  EXPECT_CONTAINS(msg, "notok.gguf: no tokenizer.ggml.tokens");
  // An explicit tokenizer makes it usable.
  llvm::Expected<ModelDesc> m =
      importModel(dir.path("notok.gguf"), modelPath("stories260K/tok512.bin"));
  ASSERT_TRUE(bool(m)) << errorMessage(m);
  EXPECT_EQ(m->tokenizer.pieces.size(), 512u);
}

TEST_F(GgufBadInput, MissingTensor) {
  std::string g = gguf;
  size_t at = g.find("blk.3.ffn_up.weight");
  ASSERT_NE(at, std::string::npos);
  g.replace(at, 12, "blk.3.ffn_xx");
  std::string msg = importBytes(dir, "missing.gguf", g);
  EXPECT_CONTAINS(msg, "missing.gguf: missing tensor 'blk.3.ffn_up.weight'");
}

TEST_F(GgufBadInput, WrongShape) {
  std::string g = gguf;
  size_t at = afterString(g, "blk.0.attn_k.weight");
  putU64(g, at + 4 + 8, 64); // ne1: 32 -> 64
  std::string msg = importBytes(dir, "shape.gguf", g);
  EXPECT_CONTAINS(msg, "shape.gguf: blk.0.attn_k.weight: shape [64, 64] but "
                       "the config implies [32, 64]");
}

TEST_F(GgufBadInput, UnsupportedType) {
  std::string g = gguf;
  size_t at = afterString(g, "blk.0.attn_q.weight");
  putU32(g, at + 4 + 16, 16); // IQ2_XXS: an i-quant, not read by Kiln
  std::string msg = importBytes(dir, "iq2.gguf", g);
  EXPECT_CONTAINS(msg, "iq2.gguf");
  EXPECT_CONTAINS(msg, "tensor 'blk.0.attn_q.weight'");
  EXPECT_CONTAINS(msg, "unsupported type IQ2_XXS (16)");
}

TEST_F(GgufBadInput, PartialKQuantBlocks) {
  std::string g = gguf;
  size_t at = afterString(g, "blk.0.attn_q.weight");
  putU32(g, at + 4 + 16, 12); // Q4_K: rows of 64 are not whole 256-blocks
  std::string msg = importBytes(dir, "q4k.gguf", g);
  EXPECT_CONTAINS(msg, "q4k.gguf: tensor 'blk.0.attn_q.weight' is Q4_K but "
                       "its row length ne[0] = 64 is not a multiple of 256, "
                       "the format's block length");
}

TEST_F(GgufBadInput, WrongArchitecture) {
  std::string g = gguf;
  size_t at = afterString(g, "general.architecture");
  ASSERT_EQ(g.substr(at + 12, 5), "llama");
  g.replace(at + 12, 5, "gemma");
  std::string msg = importBytes(dir, "gemma.gguf", g);
  EXPECT_CONTAINS(msg, "gemma.gguf: unsupported architecture 'gemma' "
                       "(expected 'llama' or 'qwen2')");
}

TEST_F(GgufBadInput, WrongKeyType) {
  std::string g = gguf;
  size_t at = afterString(g, "llama.block_count");
  putU32(g, at, 6); // uint32 -> float32 (same size)
  std::string msg = importBytes(dir, "kt.gguf", g);
  EXPECT_CONTAINS(msg, "key 'llama.block_count'");
  EXPECT_CONTAINS(msg, "has type float32, expected an integer");
}

TEST_F(GgufBadInput, Q8_0MaterializeAfterTruncation) {
  // Import succeeds, then the file shrinks: materialization names the file,
  // tensor and offset.
  std::string path = dir.path("q8.gguf");
  writeFileBytes(path, q8);
  llvm::Expected<ModelDesc> m = importModel(path);
  ASSERT_TRUE(bool(m)) << errorMessage(m);
  writeFileBytes(path, q8.substr(0, 300000));
  const WeightDesc *w = m->lookup("layers.0.wq");
  std::vector<float> out(128 * 128);
  std::string msg = errorMessage(materializeWeight(*w, out));
  EXPECT_CONTAINS(msg, "q8.gguf");
  EXPECT_CONTAINS(msg, "blk.0.attn_q.weight");
  // blk.0.attn_q.weight starts at 50848 + 305664, past the new end.
  EXPECT_CONTAINS(msg, "unexpected end of file at offset 356512");
  // A wrongly sized output buffer is an error, not a crash.
  std::vector<float> small(10);
  msg = errorMessage(materializeWeight(*w, small));
  EXPECT_CONTAINS(msg, "output buffer holds 10 floats");
}

//===----------------------------------------------------------------------===//
// Hugging Face
//===----------------------------------------------------------------------===//

class HfBadInput : public ::testing::Test {
protected:
  void SetUp() override {
    if (!haveModels())
      GTEST_SKIP() << "shared models not found";
    config = readFileBytes(modelPath("tinystories-656k/hf/config.json"));
    st = readFileBytes(modelPath("tinystories-656k/hf/model.safetensors"));
    // A good tokenizer beside, so that only what a test breaks is wrong.
    writeFileBytes(
        dir.path("tokenizer.json"),
        readFileBytes(modelPath("tinystories-656k/hf/tokenizer.json")));
  }

  /// Writes the HF dir with config/safetensors optionally edited; returns
  /// the import error.
  std::string importEdited(
      std::function<void(llvm::json::Object &)> editConfig,
      std::function<void(llvm::json::Object &)> editHeader,
      const std::string *rawSafetensors = nullptr) {
    llvm::Expected<llvm::json::Value> cfg = llvm::json::parse(config);
    EXPECT_TRUE(bool(cfg));
    if (editConfig)
      editConfig(*cfg->getAsObject());
    std::string cfgText;
    llvm::raw_string_ostream(cfgText) << *cfg;
    writeFileBytes(dir.path("config.json"), cfgText);

    std::string out;
    if (rawSafetensors) {
      out = *rawSafetensors;
    } else {
      uint64_t n;
      std::memcpy(&n, st.data(), 8);
      llvm::Expected<llvm::json::Value> header =
          llvm::json::parse(st.substr(8, n));
      EXPECT_TRUE(bool(header));
      if (editHeader)
        editHeader(*header->getAsObject());
      std::string text;
      llvm::raw_string_ostream(text) << *header;
      uint64_t len = text.size();
      out.assign(reinterpret_cast<const char *>(&len), 8);
      out += text;
      out += st.substr(8 + n);
    }
    writeFileBytes(dir.path("model.safetensors"), out);
    llvm::Expected<ModelDesc> m = importModel(dir.root());
    EXPECT_FALSE(bool(m)) << "import of corrupted HF dir succeeded";
    return errorMessage(m);
  }

  TempDir dir;
  std::string config, st;
};

TEST_F(HfBadInput, Unmodified) {
  writeFileBytes(dir.path("config.json"), config);
  writeFileBytes(dir.path("model.safetensors"), st);
  llvm::Expected<ModelDesc> m = importModel(dir.root());
  ASSERT_TRUE(bool(m)) << errorMessage(m);
  EXPECT_EQ(m->tokenizer.pieces.size(), 2048u);
}

TEST_F(HfBadInput, NoTokenizer) {
  writeFileBytes(dir.path("config.json"), config);
  writeFileBytes(dir.path("model.safetensors"), st);
  llvm::sys::fs::remove(dir.path("tokenizer.json"));
  llvm::Expected<ModelDesc> m = importModel(dir.root());
  EXPECT_CONTAINS(errorMessage(m),
                  dir.root() + ": no tokenizer.json or tokenizer.model");
}

/// The tensor whose data_offsets begin at `begin` in `header`.
std::string tensorAt(const llvm::json::Object &header, int64_t begin) {
  for (const auto &kv : header)
    if (const llvm::json::Object *t = kv.second.getAsObject())
      if (const llvm::json::Array *o = t->getArray("data_offsets"))
        if ((*o)[0].getAsInteger() == begin)
          return kv.first.str();
  ADD_FAILURE() << "no tensor at " << begin;
  return "";
}

/// Sets the data_offsets of tensor `name` to [begin, end].
void setOffsets(llvm::json::Object &header, const std::string &name,
                int64_t begin, int64_t end) {
  (*header.getObject(name))["data_offsets"] = llvm::json::Array{begin, end};
}

TEST_F(HfBadInput, OffsetsShifted) {
  // The first tensor ([0, 1048576), lm_head.weight) shifted by one byte: the
  // right length, but byte 0 is unindexed and its span runs into the next.
  std::string msg = importEdited(nullptr, [](llvm::json::Object &o) {
    EXPECT_EQ(tensorAt(o, 0), "lm_head.weight");
    setOffsets(o, "lm_head.weight", 1, 1048577);
  });
  EXPECT_CONTAINS(msg, "model.safetensors: bytes [0, 1) of the data section "
                       "belong to no tensor (before the first tensor "
                       "'lm_head.weight' data_offsets [1, 1048577))");
}

TEST_F(HfBadInput, OffsetsOverlap) {
  std::string msg = importEdited(nullptr, [](llvm::json::Object &o) {
    std::string second = tensorAt(o, 1048576);
    setOffsets(o, second, 1048576 - 4, 1048576 + 512 - 4);
  });
  EXPECT_CONTAINS(msg, "model.safetensors: tensors 'lm_head.weight' "
                       "data_offsets [0, 1048576) and "
                       "'model.layers.0.input_layernorm.weight' data_offsets "
                       "[1048572, 1049084) overlap");
}

TEST_F(HfBadInput, OffsetsLeaveHole) {
  // The second tensor moved 4 bytes later (its old end now overlaps the
  // third, but the hole comes first in offset order).
  std::string msg = importEdited(nullptr, [](llvm::json::Object &o) {
    std::string second = tensorAt(o, 1048576);
    setOffsets(o, second, 1048576 + 4, 1048576 + 512 + 4);
  });
  EXPECT_CONTAINS(msg, "bytes [1048576, 1048580) of the data section belong "
                       "to no tensor (between tensors 'lm_head.weight' "
                       "data_offsets [0, 1048576) and "
                       "'model.layers.0.input_layernorm.weight' data_offsets "
                       "[1048580, 1049092))");
  // Trailing bytes after the last tensor.
  std::string raw = st + std::string(8, '\0');
  msg = importEdited(nullptr, nullptr, &raw);
  EXPECT_CONTAINS(msg, "model.safetensors: the data section");
  EXPECT_CONTAINS(msg, "holds 2624008 bytes but the tensors end at data "
                       "offset 2624000");
}

TEST_F(HfBadInput, OffsetsWrongLengthOrOrder) {
  std::string msg = importEdited(nullptr, [](llvm::json::Object &o) {
    setOffsets(o, "model.norm.weight", 600, 100);
  });
  EXPECT_CONTAINS(msg, "tensor 'model.norm.weight': data_offsets 600, 100 "
                       "must be integers [begin, end) with 0 <= begin <= "
                       "end");
  msg = importEdited(nullptr, [](llvm::json::Object &o) {
    setOffsets(o, "lm_head.weight", 0, 1048576 - 4);
  });
  EXPECT_CONTAINS(msg, "tensor 'lm_head.weight': F32 [2048, 128] needs "
                       "1048576 bytes but data_offsets [0, 1048572) span "
                       "1048572");
  msg = importEdited(nullptr, [](llvm::json::Object &o) {
    (*o.getObject("model.norm.weight"))["dtype"] = "F17";
  });
  EXPECT_CONTAINS(msg, "tensor 'model.norm.weight' has unknown dtype 'F17'");
}

TEST_F(HfBadInput, WrongArchitecture) {
  std::string msg = importEdited(
      [](llvm::json::Object &o) {
        o["architectures"] = llvm::json::Array{"GPT2LMHeadModel"};
      },
      nullptr);
  EXPECT_CONTAINS(msg, "config.json: unsupported architectures "
                       "['GPT2LMHeadModel'] (expected 'LlamaForCausalLM', "
                       "'Qwen2ForCausalLM' or 'MistralForCausalLM')");
}

TEST_F(HfBadInput, BadConfigJson) {
  writeFileBytes(dir.path("config.json"), "{\"hidden_size\": 12,");
  writeFileBytes(dir.path("model.safetensors"), st);
  llvm::Expected<ModelDesc> m = importModel(dir.root());
  std::string msg = errorMessage(m);
  EXPECT_CONTAINS(msg, "config.json: invalid JSON");
}

TEST_F(HfBadInput, MissingField) {
  std::string msg = importEdited(
      [](llvm::json::Object &o) { o.erase("hidden_size"); }, nullptr);
  EXPECT_CONTAINS(msg, "config.json: missing integer field 'hidden_size'");
}

TEST_F(HfBadInput, ShapeMismatch) {
  std::string msg = importEdited(
      [](llvm::json::Object &o) { o["num_key_value_heads"] = 8; }, nullptr);
  EXPECT_CONTAINS(msg, "model.safetensors: model.layers.0.self_attn.k_proj."
                       "weight: shape [64, 128] but the config implies "
                       "[128, 128]");
}

TEST_F(HfBadInput, MissingTensor) {
  std::string msg = importEdited(nullptr, [](llvm::json::Object &o) {
    llvm::json::Value v = *o.get("model.layers.1.mlp.up_proj.weight");
    o.erase("model.layers.1.mlp.up_proj.weight");
    o["renamed"] = std::move(v);
  });
  EXPECT_CONTAINS(msg, "missing tensor 'model.layers.1.mlp.up_proj.weight'");
}

TEST_F(HfBadInput, UnsupportedDtype) {
  std::string msg = importEdited(nullptr, [](llvm::json::Object &o) {
    (*o.getObject("model.layers.0.mlp.down_proj.weight"))["dtype"] = "I32";
  });
  EXPECT_CONTAINS(msg, "model.safetensors: tensor "
                       "'model.layers.0.mlp.down_proj.weight' has unsupported "
                       "dtype 'I32'");
}

TEST_F(HfBadInput, OffsetsPastEnd) {
  std::string msg = importEdited(nullptr, [](llvm::json::Object &o) {
    (*o.getObject("model.norm.weight"))["data_offsets"] =
        llvm::json::Array{int64_t(1) << 40, (int64_t(1) << 40) + 512};
  });
  EXPECT_CONTAINS(msg, "model.safetensors: tensor 'model.norm.weight'");
  EXPECT_CONTAINS(msg, "extend past the end of the file");
}

TEST_F(HfBadInput, HeaderLengthAndJson) {
  std::string raw = st;
  putU64(raw, 0, uint64_t(1) << 40);
  std::string msg = importEdited(nullptr, nullptr, &raw);
  EXPECT_CONTAINS(msg, "model.safetensors: header length 1099511627776 at "
                       "offset 0 exceeds the file");
  raw = st;
  raw[8] = '[';
  raw[9] = '!';
  msg = importEdited(nullptr, nullptr, &raw);
  EXPECT_CONTAINS(msg, "model.safetensors: invalid JSON header");
  raw = st.substr(0, 5);
  msg = importEdited(nullptr, nullptr, &raw);
  EXPECT_CONTAINS(msg, "too small");
}

TEST_F(HfBadInput, NoSafetensors) {
  writeFileBytes(dir.path("config.json"), config);
  llvm::Expected<ModelDesc> m = importModel(dir.root());
  EXPECT_CONTAINS(errorMessage(m), "no *.safetensors file");
}

TEST_F(HfBadInput, BadTokenizerJson) {
  writeFileBytes(dir.path("config.json"), config);
  writeFileBytes(dir.path("model.safetensors"), st);
  writeFileBytes(dir.path("tokenizer.json"), "{ nope");
  llvm::Expected<ModelDesc> m = importModel(dir.root());
  std::string msg = errorMessage(m);
  EXPECT_CONTAINS(msg, "tokenizer.json: invalid JSON");
}

//===----------------------------------------------------------------------===//
// Random corruption: errors or valid models, never a crash (run under
// ASan/UBSan with KILN_ENABLE_SANITIZERS).
//===----------------------------------------------------------------------===//

/// Flips random bytes in the first `headerBytes` of `original` and imports
/// the result; a successful import must also materialize every weight.
void fuzzHeader(const std::string &original, size_t headerBytes,
                const std::string &name, int rounds) {
  TempDir dir;
  // The tokenizer a llama2.c checkpoint needs beside it.
  writeFileBytes(dir.path("tok512.bin"),
                 readFileBytes(modelPath("stories260K/tok512.bin")));
  uint64_t state = 0x1234567;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  for (int round = 0; round < rounds; ++round) {
    std::string bytes = original;
    int flips = 1 + next() % 4;
    for (int f = 0; f < flips; ++f)
      bytes[next() % headerBytes] = static_cast<char>(next());
    std::string path = dir.path(name);
    writeFileBytes(path, bytes);
    llvm::Expected<ModelDesc> m = importModel(path);
    if (!m) {
      EXPECT_NE(errorMessage(m.takeError()).find(name), std::string::npos);
      continue;
    }
    for (const WeightDesc &w : m->weights) {
      std::vector<float> out;
      uint64_t n = 1;
      for (int64_t d : w.source.shape)
        n *= d;
      if (n > (uint64_t(1) << 26))
        continue;
      out.resize(n);
      llvm::consumeError(materializeWeight(w, out));
    }
  }
}

TEST(BadInput, RandomCorruptionNeverCrashes) {
  KILN_REQUIRE_MODELS();
  fuzzHeader(readFileBytes(modelPath("stories260K/stories260K.gguf")), 14176,
             "fuzz.gguf", 300);
  fuzzHeader(readFileBytes(modelPath("stories260K/stories260K.bin")), 28,
             "fuzz.bin", 100);
}

} // namespace

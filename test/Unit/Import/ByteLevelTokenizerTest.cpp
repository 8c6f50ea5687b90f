//===- ByteLevelTokenizerTest.cpp - Byte-level BPE equals Hugging Face ----===//
//
// GPT-2 style byte-level BPE, end to end as kiln-compile and kiln-run use
// it: a GGUF (`tokenizer.ggml.model` gpt2) or Hugging Face tokenizer.json is
// read by the importer, written as the artifact's tokenizer.json
// (TokenizerWriter) and loaded by the runtime tokenizer, whose ids must
// equal Hugging Face tokenizers':
//
//  * test/Inputs/bytelevel: four tiny tokenizers (Llama 3, Qwen2, GPT-2 and
//    SmolLM2 pre-tokenizers, special and non-special added tokens,
//    ignore_merges) with the ids PyPI `tokenizers` gives for tricky strings,
//    made offline by test/reference/make_bytelevel_fixtures.py, each also
//    as a GGUF (tokenizer.ggml.pre llama-bpe / qwen2 / gpt2 / smollm);
//  * SmolLM2-135M-Instruct's GGUF vocabulary (49152 pieces, pre `smollm`)
//    against its reference_outputs.json (transformers): every case's
//    prompt_ids (the chat case holds <|im_start|>/<|im_end|>), and the count,
//    first 64 ids and sha256 of the ids of the two shared texts.
//
//===----------------------------------------------------------------------===//

#include "ImportTestUtils.h"

#include "codegen/Artifact/TokenizerWriter.h"
#include "dialects/Kiln/Import/ImportUtils.h"
#include "dialects/Kiln/Import/Importers.h"

#include "tokenizer/Tokenizer.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

using namespace mlir::kiln;
using namespace kiln::test;
using Ids = std::vector<int32_t>;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

namespace {

std::string inputPath(llvm::StringRef rel) {
  return std::string(KILN_TEST_INPUTS_DIR "/bytelevel/") + rel.str();
}

/// The importer's tokenizer as kiln-run loads it from an artifact.
::testing::AssertionResult toRuntime(const TokenizerDesc &tok,
                                     kiln::rt::Tokenizer &out) {
  llvm::Expected<llvm::json::Value> doc = tokenizerToJson(tok);
  if (!doc)
    return ::testing::AssertionFailure()
           << "writer: " << errorMessage(doc.takeError());
  std::string text;
  llvm::raw_string_ostream(text) << *doc;
  kiln::rt::TokenizerStatus st =
      kiln::rt::Tokenizer::parse(text, "artifact/tokenizer.json", out);
  if (!st.ok)
    return ::testing::AssertionFailure() << "runtime: " << st.message;
  return ::testing::AssertionSuccess();
}

llvm::json::Value readJson(const std::string &path) {
  llvm::Expected<llvm::json::Value> v =
      llvm::json::parse(readFileBytes(path));
  EXPECT_TRUE(bool(v)) << path;
  if (!v) {
    llvm::consumeError(v.takeError());
    return nullptr;
  }
  return std::move(*v);
}

Ids toIds(const llvm::json::Value *v) {
  Ids ids;
  if (const llvm::json::Array *a = v ? v->getAsArray() : nullptr)
    for (const llvm::json::Value &e : *a)
      ids.push_back(static_cast<int32_t>(e.getAsInteger().value_or(-1)));
  return ids;
}

kiln::rt::EncodeOptions withSpecial(const kiln::rt::Tokenizer &tok,
                                    bool parseSpecial) {
  kiln::rt::EncodeOptions o;
  o.addBos = tok.addBos();
  o.addEos = tok.addEos();
  o.parseSpecial = parseSpecial;
  return o;
}

std::string sha256OfIds(const Ids &ids) {
  std::string joined;
  for (size_t i = 0; i < ids.size(); ++i)
    joined += (i ? "," : "") + std::to_string(ids[i]);
  std::array<uint8_t, 32> digest = llvm::SHA256::hash(llvm::arrayRefFromStringRef(joined));
  return llvm::toHex(digest, /*LowerCase=*/true);
}

/// Checks `rt` against every case of fixture `name` in expected.json.
void checkFixture(const kiln::rt::Tokenizer &rt, const std::string &name,
                  const std::string &what) {
  llvm::json::Value expected = readJson(inputPath("expected.json"));
  const llvm::json::Object *top = expected.getAsObject();
  ASSERT_TRUE(top);
  const llvm::json::Array *strings = top->getArray("strings");
  const llvm::json::Object *fixture =
      top->getObject("fixtures")->getObject(name);
  ASSERT_TRUE(strings && fixture);
  const llvm::json::Array *cases = fixture->getArray("cases");
  ASSERT_EQ(cases->size(), strings->size());
  for (size_t i = 0; i < strings->size(); ++i) {
    std::string text = (*strings)[i].getAsString()->str();
    const llvm::json::Object *c = (*cases)[i].getAsObject();
    Ids ids = toIds(c->get("ids"));
    EXPECT_EQ(rt.encode(text, withSpecial(rt, true)), ids)
        << what << ": " << text;
    EXPECT_EQ(rt.encode(text, withSpecial(rt, false)),
              toIds(c->get("ids_no_special")))
        << what << " (no special): " << text;
    EXPECT_EQ(rt.decode(ids), c->getString("decoded")->str())
        << what << " decode: " << text;
  }
}

const char *const kFixtures[] = {"llama3", "qwen2", "gpt2", "smollm"};

} // namespace

TEST(ByteLevelTokenizer, HuggingFaceTokenizerJsonMatchesTokenizers) {
  for (const char *name : kFixtures) {
    std::string path = inputPath(std::string(name) + "/tokenizer.json");
    llvm::Expected<TokenizerDesc> tok = readTokenizer(path);
    ASSERT_TRUE(bool(tok)) << errorMessage(tok);
    EXPECT_EQ(tok->model, "byte_bpe");
    EXPECT_EQ(tok->pieces.size(), 512u);
    kiln::rt::Tokenizer rt;
    ASSERT_TRUE(toRuntime(*tok, rt));
    checkFixture(rt, name, path);
  }
}

TEST(ByteLevelTokenizer, GgufMatchesTokenizers) {
  for (const char *name : kFixtures) {
    std::string path = inputPath(std::string(name) + ".gguf");
    llvm::Expected<TokenizerDesc> tok = readTokenizer(path);
    ASSERT_TRUE(bool(tok)) << errorMessage(tok);
    EXPECT_EQ(tok->model, "byte_bpe");
    kiln::rt::Tokenizer rt;
    ASSERT_TRUE(toRuntime(*tok, rt));
    checkFixture(rt, name, path);
  }
}

/// The fixtures' ignore_merges case: " Kiln" is a vocabulary word no merge
/// makes, so only ignore_merges gives its id (Llama 3; llama.cpp sets it for
/// llama-bpe).
TEST(ByteLevelTokenizer, IgnoreMergesMatters) {
  llvm::Expected<TokenizerDesc> tok =
      readTokenizer(inputPath("llama3/tokenizer.json"));
  ASSERT_TRUE(bool(tok)) << errorMessage(tok);
  EXPECT_TRUE(tok->ignoreMerges);
  kiln::rt::Tokenizer rt;
  ASSERT_TRUE(toRuntime(*tok, rt));
  EXPECT_EQ(rt.encode(" Kiln", false), Ids{510});
  tok->ignoreMerges = false;
  ASSERT_TRUE(toRuntime(*tok, rt));
  EXPECT_NE(rt.encode(" Kiln", false), Ids{510});
}

/// Qwen2's NFC normalizer (HF tokenizer.json, and implied by GGUF pre
/// qwen2): decomposed accents compose before the merges.
TEST(ByteLevelTokenizer, NfcMatters) {
  for (const char *file : {"qwen2/tokenizer.json", "qwen2.gguf"}) {
    llvm::Expected<TokenizerDesc> tok = readTokenizer(inputPath(file));
    ASSERT_TRUE(bool(tok)) << errorMessage(tok);
    EXPECT_EQ(tok->normalizer, "nfc") << file;
    kiln::rt::Tokenizer rt;
    ASSERT_TRUE(toRuntime(*tok, rt));
    std::string decomposed = "cafe\xcc\x81", composed = "caf\xc3\xa9";
    EXPECT_EQ(rt.encode(decomposed, false), rt.encode(composed, false));
    tok->normalizer.clear();
    ASSERT_TRUE(toRuntime(*tok, rt));
    EXPECT_NE(rt.encode(decomposed, false), rt.encode(composed, false));
    // Only NFC, only for byte_bpe.
    tok->normalizer = "nfkc";
    EXPECT_NE(errorMessage(detail::checkTokenizer(*tok, "t"))
                  .find("normalizer 'nfkc' is not implemented"),
              std::string::npos);
  }
}

/// llama.cpp's "default" pre-tokenizer (no Hugging Face twin): loads, and
/// every string (also invalid UTF-8) decodes back to its bytes.
TEST(ByteLevelTokenizer, DefaultPreTokenizerAndInvalidUtf8RoundTrip) {
  llvm::Expected<TokenizerDesc> tok =
      readTokenizer(inputPath("gpt2.gguf"));
  ASSERT_TRUE(bool(tok)) << errorMessage(tok);
  for (const char *pre : {"default", "gpt2", "llama-bpe", "qwen2", "smollm"}) {
    std::optional<std::vector<std::string>> regexes =
        detail::ggufPreTokenizerRegexes(pre);
    ASSERT_TRUE(regexes.has_value()) << pre;
    tok->preTokenizer = pre;
    tok->preTokenizerRegexes = *regexes;
    kiln::rt::Tokenizer rt;
    ASSERT_TRUE(toRuntime(*tok, rt)) << pre;
    for (std::string text :
         {std::string("x=1+2; y==3 && z!=4 ... 1234567 'll 's"),
          std::string("\xff\xfe a\xc3 \xe2\x82 b\xf0\x9f\x98\x80\x80"),
          std::string("  \t\n\r\n  \xc2\xa0 end"), std::string("\0a\0", 3)}) {
      kiln::rt::EncodeOptions noSpecial;
      noSpecial.parseSpecial = false;
      Ids ids = rt.encode(text, noSpecial);
      EXPECT_EQ(rt.decode(ids), text) << pre;
      for (int32_t id : ids)
        EXPECT_TRUE(rt.isValid(id));
    }
  }
  EXPECT_FALSE(detail::ggufPreTokenizerRegexes("no-such-pre").has_value());
}

/// What the runtime refuses in a hand-edited artifact, and the compile-side
/// check refuses alike (the writer never writes what kiln-run refuses).
TEST(ByteLevelTokenizer, CompileAndRuntimeChecksAgree) {
  llvm::Expected<TokenizerDesc> good =
      readTokenizer(inputPath("qwen2.gguf"));
  ASSERT_TRUE(bool(good)) << errorMessage(good);
  struct Case {
    const char *what;
    std::function<void(TokenizerDesc &)> edit;
    const char *compileError;
    const char *runtimeError;
  } cases[] = {
      {"missing byte symbol",
       [](TokenizerDesc &t) {
         for (std::string &p : t.pieces)
           if (p == "!")
             p = "<bang>";
         t.merges.clear();
       },
       "byte-level vocabulary has no normal piece for byte 0x21",
       "byte-level vocabulary has no normal piece for byte 0x21"},
      {"byte symbol not normal",
       [](TokenizerDesc &t) {
         for (auto [i, p] : llvm::enumerate(t.pieces))
           if (p == "A")
             t.types[i] = 3;
       },
       "no normal piece for byte 0x41", "no normal piece for byte 0x41"},
      {"bad regex",
       [](TokenizerDesc &t) { t.preTokenizerRegexes.push_back("(\\p{L}"); },
       "pre-tokenizer pattern 1", "field 'pre_tokenizer_regexes': pattern 1"},
      {"merge of missing piece",
       [](TokenizerDesc &t) { t.merges.push_back("zq nope"); },
       "piece 'zq' is not in the vocabulary",
       "piece 'zq' is not in the vocabulary"},
  };
  for (const Case &c : cases) {
    TokenizerDesc t = *good;
    c.edit(t);
    std::string compileMsg = errorMessage(detail::checkTokenizer(t, "t"));
    EXPECT_NE(compileMsg.find(c.compileError), std::string::npos)
        << c.what << ": " << compileMsg;
    kiln::rt::TokenizerConfig config;
    config.model = kiln::rt::TokenizerModel::ByteBpe;
    config.pieces = t.pieces;
    config.scores = t.scores;
    config.types = t.types;
    config.merges = t.merges;
    config.bosId = t.bosId;
    config.eosId = t.eosId;
    config.unkId = t.unkId;
    config.preTokenizerRegexes = t.preTokenizerRegexes;
    kiln::rt::Tokenizer rt;
    kiln::rt::TokenizerStatus st = kiln::rt::Tokenizer::create(config, rt);
    EXPECT_FALSE(st.ok) << c.what;
    EXPECT_NE(st.message.find(c.runtimeError), std::string::npos)
        << c.what << ": " << st.message;
  }
}

//===----------------------------------------------------------------------===//
// SmolLM2-135M-Instruct (real vocabulary, transformers reference)
//===----------------------------------------------------------------------===//

namespace {
struct SmolLM2 {
  TokenizerDesc desc;
  kiln::rt::Tokenizer rt;
  llvm::json::Value reference = nullptr;
};

/// Loads SmolLM2's GGUF tokenizer once for the suite.
const SmolLM2 *smolLM2() {
  static SmolLM2 *loaded = [] {
    auto *s = new SmolLM2;
    llvm::Expected<TokenizerDesc> tok = readGgufTokenizer(modelPath(
        "smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"));
    if (!tok) {
      ADD_FAILURE() << errorMessage(tok);
      return s;
    }
    s->desc = std::move(*tok);
    EXPECT_TRUE(toRuntime(s->desc, s->rt));
    s->reference = readJson(
        modelPath("smollm2-135m-instruct/reference_outputs.json"));
    return s;
  }();
  return loaded;
}
} // namespace

TEST(ByteLevelTokenizer, SmolLM2GgufReadsAsExpected) {
  KILN_REQUIRE_MODELS();
  const SmolLM2 *s = smolLM2();
  EXPECT_EQ(s->desc.model, "byte_bpe");
  EXPECT_EQ(s->desc.preTokenizer, "smollm");
  EXPECT_EQ(s->desc.pieces.size(), 49152u);
  EXPECT_EQ(s->desc.merges.size(), 48900u);
  EXPECT_EQ(s->desc.bosId, 1);
  EXPECT_EQ(s->desc.eosId, 2);
  EXPECT_FALSE(s->desc.addBos);
  EXPECT_EQ(s->desc.pieces[1], "<|im_start|>");
  EXPECT_EQ(s->desc.types[1], 3);
  EXPECT_EQ(s->rt.vocabSize(), 49152);
}

TEST(ByteLevelTokenizer, SmolLM2PromptIdsEqualTransformers) {
  KILN_REQUIRE_MODELS();
  const SmolLM2 *s = smolLM2();
  const llvm::json::Object *ref = s->reference.getAsObject();
  ASSERT_TRUE(ref);
  const llvm::json::Array *cases = ref->getArray("cases");
  ASSERT_TRUE(cases && !cases->empty());
  for (const llvm::json::Value &v : *cases) {
    const llvm::json::Object *c = v.getAsObject();
    std::string prompt = c->getString("rendered_prompt")->str();
    Ids got = s->rt.encode(prompt, withSpecial(s->rt, true));
    EXPECT_EQ(got, toIds(c->get("prompt_ids"))) << prompt;
    // The generated text decodes as transformers printed it, less the
    // control tokens (llama-cli prints none).
    std::string text = c->getString("greedy_text")->str();
    std::string decoded = s->rt.decode(toIds(c->get("greedy_ids")));
    llvm::StringRef t(text);
    if (t.ends_with("<|im_end|>"))
      t = t.drop_back(strlen("<|im_end|>"));
    EXPECT_EQ(decoded, t.str()) << prompt;
  }
  // --no-special: "<|im_start|>" as text is several ordinary tokens.
  Ids plain = s->rt.encode("<|im_start|>user", withSpecial(s->rt, false));
  EXPECT_GT(plain.size(), 2u);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(s->rt.decode(plain), "<|im_start|>user");
}

TEST(ByteLevelTokenizer, SmolLM2SharedTextsEqualTransformers) {
  KILN_REQUIRE_MODELS();
  const SmolLM2 *s = smolLM2();
  const llvm::json::Object *texts =
      s->reference.getAsObject()->getObject("tokenized_texts");
  ASSERT_TRUE(texts);
  ASSERT_EQ(texts->size(), 2u);
  for (const auto &kv : *texts) {
    std::string path = modelPath("../data/" + std::string(kv.first.str()));
    std::string text = readFileBytes(path);
    ASSERT_FALSE(text.empty()) << path;
    const llvm::json::Object *want = kv.second.getAsObject();
    auto start = std::chrono::steady_clock::now();
    Ids ids = s->rt.encode(text, withSpecial(s->rt, true));
    double seconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    EXPECT_EQ(static_cast<int64_t>(ids.size()),
              want->getInteger("count").value_or(-1))
        << path;
    Ids first = toIds(want->get("first_64"));
    EXPECT_EQ(Ids(ids.begin(), ids.begin() + std::min(ids.size(), first.size())),
              first)
        << path;
    EXPECT_EQ(sha256OfIds(ids), want->getString("sha256_of_ids")->str())
        << path;
    // Decoding gives the text back, less the control tokens it holds
    // (TinyStories' <|endoftext|> separators).
    std::string withoutControl;
    for (llvm::StringRef rest = text; !rest.empty();) {
      auto [head, tail] = rest.split("<|endoftext|>");
      withoutControl += head.str();
      rest = tail;
    }
    EXPECT_TRUE(s->rt.decode(ids) == withoutControl) << path;
    // Well under a second for ~150 KB (sanitizer builds get 10x).
    EXPECT_LT(seconds, kSanitized ? 10.0 : 1.0)
        << path << ": encoding took " << seconds << " s";
    std::printf("[ info ] %s: %zu bytes -> %zu ids in %.3f s\n",
                kv.first.str().c_str(), text.size(), ids.size(), seconds);
  }
}

/// A checkpoint whose embedding has more rows than the vocabulary (padded
/// vocab_size) gets unused pieces for the extra ids: never matched in text
/// (control pieces would be, in a byte-level vocabulary), never produced.
TEST(ByteLevelTokenizer, PaddedVocabularyUsesUnusedPieces) {
  llvm::Expected<TokenizerDesc> tok =
      readTokenizer(inputPath("gpt2/tokenizer.json"));
  ASSERT_TRUE(bool(tok)) << errorMessage(tok);
  ASSERT_FALSE(bool(detail::fitTokenizer(*tok, "t", 520, true)));
  ASSERT_EQ(tok->pieces.size(), 520u);
  EXPECT_EQ(tok->types[515], 5);
  kiln::rt::Tokenizer rt;
  ASSERT_TRUE(toRuntime(*tok, rt));
  for (int32_t id : rt.encode("<pad_515>", false))
    EXPECT_LT(id, 512);
  EXPECT_EQ(rt.decode({515}), "");
}

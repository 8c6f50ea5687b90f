//===- TokenizerTest.cpp - Tokenizer readers ------------------------------===//

#include "ImportTestUtils.h"

#include "dialects/Kiln/Import/Importers.h"

#include "dialects/Kiln/Import/ImportUtils.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <cstring>
#include <functional>
#include <limits>

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
      {"id": 9, "content": "<extra>", "special": true}
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
  EXPECT_EQ(tok->types, (std::vector<int32_t>{2, 3, 3, 6, 1, 1, 1, 1, 1, 3}));
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
  EXPECT_FALSE(tok->fuseUnk);
  EXPECT_FALSE(tok->prefixIfNoSpace);
}

namespace {
/// A valid SentencePiece-style tokenizer.json, as a JSON value to edit.
llvm::json::Value hfBase() {
  llvm::Expected<llvm::json::Value> v = llvm::json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [
      {"id": 0, "content": "<unk>", "special": true, "normalized": false},
      {"id": 1, "content": "<s>", "special": true, "lstrip": true},
      {"id": 2, "content": "</s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "\u2581"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}}]},
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>",
      "continuing_subword_prefix": null, "end_of_word_suffix": null,
      "fuse_unk": true, "byte_fallback": false, "ignore_merges": false,
      "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4,
                "\u2581": 5, "ab": 6, "\u2581ab": 7},
      "merges": ["a b", "\u2581 ab"]}
  })");
  EXPECT_TRUE(bool(v)) << errorMessage(v);
  return v ? std::move(*v) : llvm::json::Value(nullptr);
}

/// Writes `v` as DIR/tokenizer.json and reads it back; returns the error
/// message ("" on success).
std::string hfError(const TempDir &dir, const llvm::json::Value &v) {
  std::string text;
  llvm::raw_string_ostream(text) << v;
  writeFileBytes(dir.path("tokenizer.json"), text);
  llvm::Expected<TokenizerDesc> tok = readTokenizer(dir.path("tokenizer.json"));
  return tok ? std::string() : errorMessage(tok);
}

llvm::json::Object &obj(llvm::json::Value &v, llvm::StringRef key) {
  return *v.getAsObject()->getObject(key);
}
} // namespace

/// The base tokenizer.json is accepted; every feature Kiln does not
/// implement is an error naming it.
TEST(Tokenizer, HuggingFaceUnimplementedFeatures) {
  TempDir dir;
  llvm::json::Value base = hfBase();
  ASSERT_EQ(hfError(dir, base), "");
  llvm::Expected<TokenizerDesc> ok = readTokenizer(dir.path("tokenizer.json"));
  ASSERT_TRUE(bool(ok)) << errorMessage(ok);
  EXPECT_TRUE(ok->fuseUnk);
  EXPECT_FALSE(ok->byteFallback);
  EXPECT_TRUE(ok->addBos);

  struct Case {
    const char *what;
    std::function<void(llvm::json::Value &)> edit;
    const char *message;
  } cases[] = {
      {"Lowercase normalizer",
       [](llvm::json::Value &v) {
         obj(v, "normalizer")
             .getArray("normalizers")
             ->push_back(llvm::json::Object{{"type", "Lowercase"}});
       },
       "normalizer 'Lowercase' is not implemented"},
      {"NFKC normalizer",
       [](llvm::json::Value &v) {
         (*v.getAsObject())["normalizer"] =
             llvm::json::Object{{"type", "NFKC"}};
       },
       "normalizer 'NFKC' is not implemented"},
      {"Replace of another string",
       [](llvm::json::Value &v) {
         (*v.getAsObject())["normalizer"] = llvm::json::Object{
             {"type", "Replace"},
             {"pattern", llvm::json::Object{{"String", "  "}}},
             {"content", " "}};
       },
       "normalizer Replace other than ' ' -> "},
      {"no space rule",
       [](llvm::json::Value &v) { (*v.getAsObject())["normalizer"] = nullptr; },
       "neither the normalizer nor the pre_tokenizer turns ' ' into"},
      {"Digits pre_tokenizer",
       [](llvm::json::Value &v) {
         (*v.getAsObject())["pre_tokenizer"] =
             llvm::json::Object{{"type", "Digits"}};
       },
       "pre_tokenizer 'Digits' is not implemented"},
      // A ByteLevel pre_tokenizer makes it a byte-level tokenizer, whose
      // added tokens may not strip spaces (ByteLevelTokenizerTest.cpp has
      // the working ones).
      {"ByteLevel pre_tokenizer",
       [](llvm::json::Value &v) {
         (*v.getAsObject())["pre_tokenizer"] =
             llvm::json::Object{{"type", "ByteLevel"}};
       },
       "has lstrip true, which is not implemented"},
      {"fuse_unk not a boolean",
       [](llvm::json::Value &v) { obj(v, "model")["fuse_unk"] = "yes"; },
       "model.fuse_unk must be true or false"},
      {"byte_fallback not a boolean",
       [](llvm::json::Value &v) { obj(v, "model")["byte_fallback"] = 1; },
       "model.byte_fallback must be true or false"},
      {"dropout",
       [](llvm::json::Value &v) { obj(v, "model")["dropout"] = 0.1; },
       "model.dropout is not implemented"},
      {"continuing_subword_prefix",
       [](llvm::json::Value &v) {
         obj(v, "model")["continuing_subword_prefix"] = "##";
       },
       "model.continuing_subword_prefix is not implemented"},
      {"ignore_merges",
       [](llvm::json::Value &v) { obj(v, "model")["ignore_merges"] = true; },
       "model.ignore_merges is true, which is not implemented"},
      {"WordPiece model",
       [](llvm::json::Value &v) { obj(v, "model")["type"] = "WordPiece"; },
       "unsupported tokenizer model.type 'WordPiece'"},
      {"non-special added token",
       [](llvm::json::Value &v) {
         (*(*v.getAsObject()->getArray("added_tokens"))[2]
               .getAsObject())["special"] = false;
       },
       "added_tokens[2] '</s>' is not special: matching added tokens inside "
       "text is not implemented"},
      {"merge naming a missing piece",
       [](llvm::json::Value &v) {
         (*obj(v, "model").getArray("merges"))[0] = "a c";
       },
       "model.merges[0]: piece 'c' is not in the vocabulary"},
      {"merge whose result is missing",
       [](llvm::json::Value &v) {
         (*obj(v, "model").getArray("merges"))[0] = "b a";
       },
       "model.merges[0]: merged piece 'ba' is not in the vocabulary"},
      {"merge with three parts",
       [](llvm::json::Value &v) {
         (*obj(v, "model").getArray("merges"))[0] = "a b c";
       },
       "model.merges[0]: 'a b c' is not of the form 'left right'"},
      {"unk_token missing",
       [](llvm::json::Value &v) { obj(v, "model")["unk_token"] = "<nope>"; },
       "model.unk_token '<nope>' is not in the vocabulary"},
      {"two pieces with one id",
       [](llvm::json::Value &v) {
         obj(v, "model").getObject("vocab")->insert({"c", 3});
       },
       "id 3 is already the id of"},
      {"WordPiece decoder",
       [](llvm::json::Value &v) {
         (*v.getAsObject())["decoder"] =
             llvm::json::Object{{"type", "WordPiece"}};
       },
       "decoder 'WordPiece' is not implemented"},
      {"EOS appended by the post_processor",
       [](llvm::json::Value &v) {
         obj(v, "post_processor")
             .getArray("single")
             ->push_back(llvm::json::Object{
                 {"SpecialToken", llvm::json::Object{{"id", "</s>"}}}});
       },
       "post_processor TemplateProcessing 'single' adds tokens Kiln does "
       "not"},
      {"Bert post_processor",
       [](llvm::json::Value &v) {
         (*v.getAsObject())["post_processor"] =
             llvm::json::Object{{"type", "BertProcessing"}};
       },
       "post_processor 'BertProcessing' is not implemented"},
      {"truncation",
       [](llvm::json::Value &v) {
         (*v.getAsObject())["truncation"] =
             llvm::json::Object{{"max_length", 8}};
       },
       "truncation is not implemented"},
      {"Metaspace splitting inside pieces",
       [](llvm::json::Value &v) {
         (*v.getAsObject())["normalizer"] = nullptr;
         (*v.getAsObject())["pre_tokenizer"] =
             llvm::json::Object{{"type", "Metaspace"},
                                {"replacement", "\xe2\x96\x81"},
                                {"prepend_scheme", "first"},
                                {"split", true}};
         obj(v, "model").getObject("vocab")->insert({"a\xe2\x96\x81", 8});
       },
       "pre_tokenizer Metaspace splits words at"},
  };
  for (const Case &c : cases) {
    llvm::json::Value v = hfBase();
    c.edit(v);
    std::string msg = hfError(dir, v);
    EXPECT_NE(msg.find(c.message), std::string::npos)
        << c.what << ": '" << msg << "'";
    EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
  }
}

/// Metaspace instead of Prepend + Replace: the prefix is added only when the
/// text does not start with a space; split=false is accepted with any
/// pieces.
TEST(Tokenizer, HuggingFaceMetaspace) {
  TempDir dir;
  for (const char *scheme : {"first", "always", "never"}) {
    llvm::json::Value v = hfBase();
    (*v.getAsObject())["normalizer"] = nullptr;
    (*v.getAsObject())["pre_tokenizer"] =
        llvm::json::Object{{"type", "Metaspace"},
                           {"replacement", "\xe2\x96\x81"},
                           {"prepend_scheme", scheme},
                           {"split", false}};
    ASSERT_EQ(hfError(dir, v), "") << scheme;
    llvm::Expected<TokenizerDesc> tok =
        readTokenizer(dir.path("tokenizer.json"));
    ASSERT_TRUE(bool(tok)) << errorMessage(tok);
    bool prepend = llvm::StringRef(scheme) != "never";
    EXPECT_EQ(tok->addDummyPrefix, prepend) << scheme;
    EXPECT_EQ(tok->prefixIfNoSpace, prepend) << scheme;
  }
}

TEST(Tokenizer, HuggingFaceAddEosRejected) {
  TempDir dir;
  writeFileBytes(dir.path("tokenizer_config.json"),
                 R"({"add_eos_token": true})");
  std::string msg = hfError(dir, hfBase());
  EXPECT_NE(msg.find("tokenizer_config.json: add_eos_token is true"),
            std::string::npos)
      << msg;
  writeFileBytes(dir.path("tokenizer_config.json"),
                 R"({"add_bos_token": false})");
  msg = hfError(dir, hfBase());
  EXPECT_NE(msg.find("post_processor TemplateProcessing prepends BOS but "
                     "tokenizer_config.json has add_bos_token false"),
            std::string::npos)
      << msg;
}

/// llama2.c tok512.bin with a NaN score: the error names the token and the
/// offset of its score.
TEST(Tokenizer, Llama2cNanScore) {
  KILN_REQUIRE_MODELS();
  std::string bytes = readFileBytes(modelPath("stories260K/tok512.bin"));
  // max_token_length, then (f32 score, i32 length, bytes) per token.
  size_t pos = 4;
  for (int id = 0; id < 5; ++id) {
    int32_t len;
    std::memcpy(&len, bytes.data() + pos + 4, 4);
    pos += 8 + static_cast<size_t>(len);
  }
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bytes.data() + pos, &nan, 4);
  TempDir dir;
  writeFileBytes(dir.path("tok512.bin"), bytes);
  llvm::Expected<TokenizerDesc> tok = readTokenizer(dir.path("tok512.bin"));
  EXPECT_EQ(errorMessage(tok),
            dir.path("tok512.bin") + ": token 5 has score nan at offset " +
                std::to_string(pos) + ", expected a finite number");
}

/// The shared checks: what checkTokenizer rejects, by field.
TEST(Tokenizer, CheckTokenizerRules) {
  TokenizerDesc good = makeSyntheticTokenizer(300);
  ASSERT_FALSE(bool(detail::checkTokenizer(good, "t")));
  auto expectError = [&](TokenizerDesc tok, const std::string &message) {
    std::string msg = errorMessage(detail::checkTokenizer(tok, "t"));
    EXPECT_NE(msg.find(message), std::string::npos)
        << "'" << msg << "' lacks '" << message << "'";
  };
  TokenizerDesc t = good;
  t.scores[260] = std::numeric_limits<float>::infinity();
  expectError(t, "t: token 260 '<tok_260>' has score inf, expected a finite "
                 "number");
  t = good;
  t.scores[4] = std::numeric_limits<float>::quiet_NaN();
  expectError(t, "token 4 '<0x01>' has score nan");
  t = good;
  t.types[7] = 0;
  expectError(t, "token 7 '<0x04>' has type 0, expected 1 (normal)");
  t = good;
  t.types[7] = 7;
  expectError(t, "has type 7");
  t = good;
  t.bosId = 300;
  expectError(t, "bos id 300 is out of range for a vocabulary of 300 pieces");
  t = good;
  t.eosId = -1;
  expectError(t, "eos id -1 is out of range");
  t = good;
  t.unkId = -2;
  expectError(t, "unk id -2 is out of range");
  t = good;
  t.unkId = -1; // no unknown piece
  EXPECT_FALSE(bool(detail::checkTokenizer(t, "t")));
  t = good;
  t.model = "wordpiece";
  expectError(t, "tokenizer model 'wordpiece' is not implemented");
  t = good;
  t.merges = {"a b"};
  expectError(t, "tokenizer model 'spm' merges by score but has 1 merges");
  t = good;
  t.model = "bpe";
  t.merges = {"<tok_259> <tok_260>"};
  expectError(t, "merge 0 '<tok_259> <tok_260>': merged piece "
                 "'<tok_259><tok_260>' is not in the vocabulary");
  t.merges = {"<tok_259> x"};
  expectError(t, "piece 'x' is not in the vocabulary");
  t.merges = {"<tok_259>  <tok_260>"};
  expectError(t, "is not two non-empty pieces separated by one space");
}

/// Patches a copy of stories260K.gguf: the score / type / key at a given
/// place, and checks the import error.
TEST(Tokenizer, GgufContentErrors) {
  KILN_REQUIRE_MODELS();
  std::string base = readFileBytes(modelPath("stories260K/stories260K.gguf"));
  // Array payload of a key: the key string, u32 value type 9, u32 element
  // type, u64 count, then the elements.
  auto arrayElem = [&](llvm::StringRef key, size_t index) {
    size_t at = base.find(key.str());
    EXPECT_NE(at, std::string::npos) << key.str();
    return at + key.size() + 4 + 4 + 8 + 4 * index;
  };
  TempDir dir;
  auto importWith = [&](size_t offset, const void *bytes) {
    std::string copy = base;
    std::memcpy(copy.data() + offset, bytes, 4);
    writeFileBytes(dir.path("m.gguf"), copy);
    llvm::Expected<TokenizerDesc> tok = readTokenizer(dir.path("m.gguf"));
    return errorMessage(tok);
  };
  float inf = std::numeric_limits<float>::infinity();
  std::string msg = importWith(arrayElem("tokenizer.ggml.scores", 7), &inf);
  EXPECT_NE(msg.find("key 'tokenizer.ggml.scores' at offset"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(": token 7 has score inf, expected a finite number"),
            std::string::npos)
      << msg;
  int32_t type = 9;
  msg = importWith(arrayElem("tokenizer.ggml.token_type", 9), &type);
  EXPECT_NE(msg.find(": token 9 has type 9, expected 1 (normal)"),
            std::string::npos)
      << msg;
  type = 4;
  msg = importWith(arrayElem("tokenizer.ggml.token_type", 300), &type);
  EXPECT_NE(msg.find("token 300 "), std::string::npos) << msg;
  EXPECT_NE(msg.find("is user-defined (type 4): matching user-defined pieces "
                     "inside text is not implemented"),
            std::string::npos)
      << msg;
  // padding_token_id: key, u32 type 4, then the value.
  size_t pad = base.find("tokenizer.ggml.padding_token_id") +
               strlen("tokenizer.ggml.padding_token_id") + 4;
  uint32_t padId = 5000;
  msg = importWith(pad, &padId);
  EXPECT_NE(msg.find("tokenizer.ggml.padding_token_id 5000 is out of range "
                     "for a vocabulary of 512 pieces"),
            std::string::npos)
      << msg;
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

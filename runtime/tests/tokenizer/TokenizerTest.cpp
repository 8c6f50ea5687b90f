//===- TokenizerTest.cpp - kiln::rt::Tokenizer against published data -----===//

#include "tokenizer/Tokenizer.h"
#include "TestHelpers.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>

#include <sys/stat.h>

using namespace kiln::rt;
using namespace kiln::rt::test;
using Ids = std::vector<int32_t>;

namespace {

/// Builds a Tokenizer from `config`, failing the test on error.
Tokenizer build(TokenizerConfig config) {
  Tokenizer tok;
  TokenizerStatus status = Tokenizer::create(std::move(config), tok);
  EXPECT_TRUE(status.ok) << status.message;
  return tok;
}

const Tokenizer &llama2() {
  static const Tokenizer tok =
      build(readLlama2cTokenizer(modelPath("llama2-tokenizer/tokenizer.bin")));
  return tok;
}

const Tokenizer &tok512() {
  static const Tokenizer tok =
      build(readLlama2cTokenizer(modelPath("stories260K/tok512.bin")));
  return tok;
}

TokenizerConfig tinyStoriesConfig() {
  return readHfBpeTokenizer(modelPath("tinystories-656k/hf/tokenizer.json"),
                            /*bosId=*/1, /*eosId=*/2);
}

const Tokenizer &tinyStories() {
  static const Tokenizer tok = build(tinyStoriesConfig());
  return tok;
}

Ids toIds(const nlohmann::json &array) { return array.get<Ids>(); }

/// A scratch file under the test's working directory, removed on scope exit.
struct TempFile {
  std::string path;
  TempFile(const std::string &name, const std::string &contents)
      : path(::testing::TempDir() + name) {
    std::ofstream(path, std::ios::binary) << contents;
  }
  ~TempFile() { std::remove(path.c_str()); }
};

} // namespace

//===----------------------------------------------------------------------===//
// Encoding against published references
//===----------------------------------------------------------------------===//

// llama2.c test.c's five cases plus llama.cpp #167 (emoji via byte fallback).
TEST(TokenizerEncode, Llama2ReferenceEncodings) {
  nlohmann::json ref =
      readJson(modelPath("llama2-tokenizer/reference_encodings.json"));
  ASSERT_EQ(ref.at("cases").size(), 6u);
  ASSERT_EQ(llama2().vocabSize(), 32000);
  for (const auto &c : ref.at("cases")) {
    std::string text = c.at("text").get<std::string>();
    EXPECT_EQ(llama2().encode(text, /*addBos=*/true), toIds(c.at("ids")))
        << "text: " << text;
  }
}

TEST(TokenizerEncode, Tok512OnceUponATime) {
  nlohmann::json ref =
      readJson(modelPath("stories260K/reference_outputs.json"));
  Ids expected = {1, 403, 407, 261, 378};
  EXPECT_EQ(toIds(ref.at("published")
                      .at("prompted_variant")
                      .at("prompt_ids_runc_encoder")),
            expected);
  EXPECT_EQ(tok512().encode("Once upon a time", true), expected);
  EXPECT_EQ(tok512().encode("Once upon a time", false),
            Ids(expected.begin() + 1, expected.end()));
}

TEST(TokenizerEncode, EmptyText) {
  EXPECT_EQ(tok512().encode("", true), Ids{1});
  EXPECT_EQ(tok512().encode("", false), Ids{});
  EXPECT_EQ(tinyStories().encode("", true), Ids{1});
}

// HF BPE merges: "▁", "On", "ce▁", "upon▁a▁tim", "e".
TEST(TokenizerEncode, TinyStoriesBpe) {
  EXPECT_EQ(tinyStories().model(), TokenizerModel::Bpe);
  EXPECT_EQ(tinyStories().encode("Once upon a time", true),
            (Ids{1, 80, 147, 201, 282, 57}));
  nlohmann::json ref =
      readJson(modelPath("tinystories-656k/reference_outputs.json"));
  for (const auto &c : ref.at("derived_independently_hf_f32").at("cases"))
    EXPECT_EQ(tinyStories().encode(c.at("prompt").get<std::string>(), true),
              toIds(c.at("prompt_ids")));
}

// The GGUF stores the same vocabulary as SentencePiece with all scores -1000:
// leftmost-first merging gives the same ids for this prompt.
TEST(TokenizerEncode, TinyStoriesSpmEqualScores) {
  TokenizerConfig config = tinyStoriesConfig();
  config.model = TokenizerModel::Spm;
  config.merges.clear();
  config.scores.assign(config.pieces.size(), -1000.0f);
  TokenizerConfig naiveConfig = config;
  Tokenizer tok = build(std::move(config));
  EXPECT_EQ(tok.encode("Once upon a time", true),
            (Ids{1, 80, 147, 201, 282, 57}));
  EXPECT_EQ(naiveSpmEncode(naiveConfig, "Once upon a time", true),
            (Ids{1, 80, 147, 201, 282, 57}));
}

// Control pieces are never matched inside text.
TEST(TokenizerEncode, SpecialPiecesNotMatchedInText) {
  Ids ids = tinyStories().encode("<|end_story|>", false);
  for (int32_t id : ids)
    EXPECT_NE(tinyStories().type(id), PieceType::Control);
  EXPECT_EQ(tinyStories().decode(ids, 1), "<|end_story|>");
  Ids llamaIds = llama2().encode("<s>hi</s>", false);
  for (int32_t id : llamaIds)
    EXPECT_GT(id, 2);
}

// Code points with no piece and no byte pieces become unk (TinyStories has
// byte_fallback but no <0xXX> pieces).
TEST(TokenizerEncode, UnknownCodePointWithoutBytePieces) {
  Ids ids = tinyStories().encode("a\xe2\x82\xac", false); // "a€"
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), tinyStories().unkId());
}

// The priority-queue encoder agrees with a literal transcription of run.c on
// long inputs (ties, bytes, newlines) and is not quadratic-slow.
TEST(TokenizerEncode, MatchesNaiveRunCEncoderOnLongText) {
  nlohmann::json ref =
      readJson(modelPath("stories260K/reference_outputs.json"));
  std::string story =
      ref.at("published").at("expected_text").get<std::string>();
  std::string text = story + " caf\xc3\xa9 \xf0\x9f\xa6\x99 \t\x01 ok\xff!";
  TokenizerConfig llamaConfig =
      readLlama2cTokenizer(modelPath("llama2-tokenizer/tokenizer.bin"));
  TokenizerConfig tokConfig =
      readLlama2cTokenizer(modelPath("stories260K/tok512.bin"));
  EXPECT_EQ(llama2().encode(text, true),
            naiveSpmEncode(llamaConfig, text, true));
  EXPECT_EQ(tok512().encode(text, true), naiveSpmEncode(tokConfig, text, true));

  std::string longText;
  while (longText.size() < 16000)
    longText += story + "\n";
  auto start = std::chrono::steady_clock::now();
  Ids ids = llama2().encode(longText, true);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_GT(ids.size(), 3000u);
  EXPECT_LT(seconds, 1.0) << ids.size() << " tokens";
  ASSERT_EQ(ids[0], 1);
  Ids body(ids.begin() + 1, ids.end());
  // EXPECT_TRUE: a mismatch would print 16 kB twice.
  EXPECT_TRUE(llama2().decode(body, -1) == " " + longText)
      << "decoding without BOS keeps the dummy-prefix space";
  EXPECT_TRUE(llama2().decode(body, 1) == longText);
}

// Random word salad (many equal-score ties with all scores -1000) through the
// fast encoders and the literal transcriptions.
TEST(TokenizerEncode, MatchesNaiveEncodersOnRandomText) {
  nlohmann::json ref =
      readJson(modelPath("tinystories-656k/reference_outputs.json"));
  std::string source = ref.at("derived_independently_hf_f32")
                           .at("cases")
                           .at(0)
                           .at("generated_text")
                           .get<std::string>();
  TokenizerConfig bpeConfig = tinyStoriesConfig();
  TokenizerConfig spmConfig = bpeConfig;
  spmConfig.model = TokenizerModel::Spm;
  spmConfig.merges.clear();
  spmConfig.scores.assign(spmConfig.pieces.size(), -1000.0f);
  Tokenizer spm = build(spmConfig);
  TokenizerConfig tokConfig =
      readLlama2cTokenizer(modelPath("stories260K/tok512.bin"));
  uint32_t seed = 12345;
  auto next = [&] { return (seed = seed * 1103515245u + 12345u) >> 16; };
  for (int round = 0; round < 200; ++round) {
    std::string text;
    int words = 1 + next() % 12;
    for (int w = 0; w < words; ++w) {
      size_t start = next() % source.size();
      text += source.substr(start, 1 + next() % 9);
      if (next() % 3 == 0)
        text += "  ";
    }
    EXPECT_EQ(tinyStories().encode(text, true),
              naiveBpeEncode(bpeConfig, text, true))
        << "bpe: '" << text << "'";
    EXPECT_EQ(spm.encode(text, true), naiveSpmEncode(spmConfig, text, true))
        << "spm: '" << text << "'";
    EXPECT_EQ(tok512().encode(text, false),
              naiveSpmEncode(tokConfig, text, false))
        << "tok512: '" << text << "'";
  }
}

//===----------------------------------------------------------------------===//
// Decoding
//===----------------------------------------------------------------------===//

// run.c -t 0.0 -n 200 on stories260K: the published text, from the 200 ids.
TEST(TokenizerDecode, Stories260KGreedyText) {
  nlohmann::json ref =
      readJson(modelPath("stories260K/reference_outputs.json"));
  Ids ids = toIds(ref.at("derived_independently").at("greedy_ids_200"));
  ASSERT_EQ(ids.size(), 200u);
  std::string text;
  int32_t prev = tok512().bosId();
  for (int32_t id : ids) {
    text += tok512().decodePiece(prev, id);
    prev = id;
  }
  EXPECT_EQ(text, ref.at("published").at("expected_text").get<std::string>());
  EXPECT_EQ(tok512().decode(ids, tok512().bosId()), text);
}

TEST(TokenizerDecode, TinyStoriesReferenceTexts) {
  nlohmann::json ref =
      readJson(modelPath("tinystories-656k/reference_outputs.json"));
  int checked = 0;
  for (const auto &c : ref.at("derived_independently_hf_f32").at("cases")) {
    Ids prompt = toIds(c.at("prompt_ids"));
    EXPECT_EQ(tinyStories().decode(toIds(c.at("generated_ids")), prompt.back()),
              c.at("generated_text").get<std::string>());
    ++checked;
  }
  // Published llama.cpp Q8_0 text; ids derived independently.
  const auto &published = ref.at("published_q8_0_gguf").at("cases").at(0);
  const auto &derived =
      ref.at("derived_independently_q8_0_gguf").at("cases").at(0);
  ASSERT_EQ(published.at("prompt"), derived.at("prompt"));
  Ids prompt = toIds(derived.at("prompt_ids"));
  EXPECT_EQ(
      tinyStories().decode(toIds(derived.at("generated_ids")), prompt.back()),
      published.at("expected_generated_text").get<std::string>());
  EXPECT_EQ(checked, 2);
}

TEST(TokenizerDecode, PieceRules) {
  const Tokenizer &tok = llama2();
  EXPECT_EQ(tok.decodePiece(-1, 1), "");        // control <s>
  EXPECT_EQ(tok.decodePiece(5, 2), "");         // control </s>
  EXPECT_EQ(tok.decodePiece(5, 13), "\n");      // <0x0A>
  EXPECT_EQ(tok.decodePiece(1, 3 + 0x20), " "); // <0x20> is not stripped
  EXPECT_EQ(tok.decodePiece(5, 29871), " ");    // "▁"
  EXPECT_EQ(tok.decodePiece(1, 29871), "");     // "▁" right after BOS
  EXPECT_EQ(tok.decodePiece(1, 306), "I");      // "▁I" after BOS
  EXPECT_EQ(tok.decodePiece(5, 306), " I");
  EXPECT_EQ(tok.decodePiece(5, -1), "");
  EXPECT_EQ(tok.decodePiece(5, 32000), "");
  EXPECT_TRUE(tok.isValid(31999));
  EXPECT_FALSE(tok.isValid(32000));
  EXPECT_FALSE(tok.isValid(-1));
  EXPECT_EQ(tok.bosId(), 1);
  EXPECT_EQ(tok.eosId(), 2);
  // The emoji's four byte pieces decode back to its UTF-8.
  EXPECT_EQ(tok.decode({243, 162, 169, 156}, 5), "\xf0\x9f\xa6\x99");
}

TEST(TokenizerDecode, RoundTripsReferenceTexts) {
  nlohmann::json ref =
      readJson(modelPath("llama2-tokenizer/reference_encodings.json"));
  for (const auto &c : ref.at("cases")) {
    std::string text = c.at("text").get<std::string>();
    Ids ids = llama2().encode(text, true);
    EXPECT_EQ(llama2().decode(Ids(ids.begin() + 1, ids.end()), ids[0]), text);
  }
}

//===----------------------------------------------------------------------===//
// tokenizer.json loading
//===----------------------------------------------------------------------===//

TEST(TokenizerLoad, RoundTripsKilnJson) {
  for (const char *source :
       {"stories260K/tok512.bin", "llama2-tokenizer/tokenizer.bin"}) {
    TokenizerConfig config = readLlama2cTokenizer(modelPath(source));
    TempFile file("tok.json", toKilnJson(config).dump());
    Tokenizer tok;
    TokenizerStatus status = Tokenizer::load(file.path, tok);
    ASSERT_TRUE(status.ok) << status.message;
    EXPECT_EQ(tok.vocabSize(), static_cast<int32_t>(config.pieces.size()));
    EXPECT_EQ(tok.model(), TokenizerModel::Spm);
    EXPECT_TRUE(tok.addBos());
    EXPECT_EQ(tok.piece(1), "<s>");
    EXPECT_EQ(tok.type(1), PieceType::Control);
    EXPECT_EQ(tok.score(300), config.scores[300]);
    std::string text =
        "Once upon a time, Lily's \xf0\x9f\xa6\x99 said \"hi\".\n";
    EXPECT_EQ(tok.encode(text, true), naiveSpmEncode(config, text, true));
  }
  TokenizerConfig config = tinyStoriesConfig();
  TempFile file("tok.json", toKilnJson(config).dump());
  Tokenizer tok;
  TokenizerStatus status = Tokenizer::load(file.path, tok);
  ASSERT_TRUE(status.ok) << status.message;
  EXPECT_EQ(tok.model(), TokenizerModel::Bpe);
  EXPECT_EQ(tok.encode("Once upon a time", true),
            (Ids{1, 80, 147, 201, 282, 57}));
}

// The documented example shape, with merges in both string and pair form.
TEST(TokenizerLoad, ParsesMinimalBpe) {
  const char *json = R"({
    "format": "kiln-tokenizer", "version": 1, "model": "bpe",
    "pieces_hex": ["3c756e6b3e", "3c733e", "3c2f733e", "e29681", "61", "62",
                   "e2968161", "e296816162"],
    "scores": [0, 0, 0, 0, 0, 0, 0, 0],
    "types": [2, 3, 3, 1, 1, 1, 1, 1],
    "merges": ["\u2581 a", ["\u2581a", "b"]],
    "bos_id": 1, "eos_id": 2, "unk_id": 0,
    "add_bos": false, "add_dummy_prefix": true, "byte_fallback": false,
    "future_field": {"ignored": true}
  })";
  Tokenizer tok;
  TokenizerStatus status = Tokenizer::parse(json, "inline.json", tok);
  ASSERT_TRUE(status.ok) << status.message;
  EXPECT_FALSE(tok.addBos());
  EXPECT_EQ(tok.encode("ab", tok.addBos()), Ids{7});
  EXPECT_EQ(tok.encode("ab a", true), (Ids{1, 7, 6}));
  EXPECT_EQ(tok.encode("c", false), (Ids{3, 0})); // unk without byte pieces
}

namespace {
/// Parses `json` and expects failure with a message containing each of
/// `fragments`.
void expectParseError(const std::string &json,
                      std::initializer_list<const char *> fragments) {
  Tokenizer tok;
  TokenizerStatus status = Tokenizer::parse(json, "bad.json", tok);
  ASSERT_FALSE(status.ok) << json;
  EXPECT_EQ(status.message.rfind("bad.json: ", 0), 0u) << status.message;
  for (const char *f : fragments)
    EXPECT_NE(status.message.find(f), std::string::npos)
        << "'" << status.message << "' lacks '" << f << "'";
  EXPECT_EQ(tok.vocabSize(), 0) << "out is untouched on failure";
}

std::string validJsonWith(const std::string &key, const nlohmann::json &value) {
  TokenizerConfig config;
  config.pieces = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a"};
  config.scores = {0, 0, 0, -1, -2};
  config.types = {2, 3, 3, 1, 1};
  nlohmann::json j = toKilnJson(config);
  if (value.is_discarded())
    j.erase(key);
  else
    j[key] = value;
  return j.dump();
}
} // namespace

TEST(TokenizerLoad, Errors) {
  Tokenizer tok;
  TokenizerStatus missing = Tokenizer::load("/nonexistent/tokenizer.json", tok);
  EXPECT_FALSE(missing.ok);
  EXPECT_EQ(missing.message,
            "/nonexistent/tokenizer.json: cannot open: No such file or directory");

  expectParseError("{\"format\": ", {"invalid JSON"});
  expectParseError("[1, 2]", {"not a JSON object"});
  nlohmann::json discard = nlohmann::json::value_t::discarded;
  expectParseError(validJsonWith("scores", discard),
                   {"missing field 'scores'"});
  expectParseError(validJsonWith("format", "gguf"),
                   {"'format'", "kiln-tokenizer"});
  expectParseError(validJsonWith("version", 3), {"'version'", "3"});
  expectParseError(validJsonWith("model", "wordpiece"),
                   {"'model'", "wordpiece"});
  expectParseError(validJsonWith("scores", {0, 0, 0, 0}),
                   {"'scores' has 4 entries but 'pieces_hex' has 5"});
  expectParseError(validJsonWith("types", {2, 3, 3, 1}),
                   {"'types' has 4 entries but 'pieces_hex' has 5"});
  expectParseError(validJsonWith("types", {2, 3, 3, 1, 9}), {"types[4] is 9"});
  expectParseError(validJsonWith("types", {2, 3, 3, 1, "x"}),
                   {"types[4] is not an integer"});
  expectParseError(validJsonWith("scores", {0, 0, "x", 0, 0}),
                   {"scores[2] is not a number"});
  expectParseError(validJsonWith("pieces_hex", {"3c756e6b3e", "3c733e",
                                                "3c2f733g", "e29681", "61"}),
                   {"pieces_hex[2]", "invalid hex digit 'g' at offset 7"});
  expectParseError(validJsonWith("pieces_hex", {"3c756e6b3e", "3c733e",
                                                "3c2f733e", "e2968", "61"}),
                   {"pieces_hex[3]", "odd number of hex digits"});
  expectParseError(validJsonWith("pieces_hex", {"3c756e6b3e", 7, "", "", ""}),
                   {"pieces_hex[1] is not a string"});
  expectParseError(validJsonWith("pieces_hex", nlohmann::json::array()),
                   {"'pieces_hex' is empty"});
  expectParseError(validJsonWith("bos_id", 5), {"'bos_id' is 5", "[0, 5)"});
  expectParseError(validJsonWith("eos_id", -1), {"'eos_id' is -1"});
  expectParseError(validJsonWith("unk_id", 7), {"'unk_id' is 7"});
  expectParseError(validJsonWith("bos_id", "1"),
                   {"'bos_id' must be an integer"});
  expectParseError(validJsonWith("add_bos", 1),
                   {"'add_bos' must be true or false"});
  expectParseError(validJsonWith("merges", {1}), {"merges[0]"});

  std::string bpe = validJsonWith("model", "bpe");
  nlohmann::json j = nlohmann::json::parse(bpe);
  j["merges"] = {"\xe2\x96\x81 a"};
  expectParseError(j.dump(),
                   {"merges[0]", "merged piece", "not in the vocabulary"});
  j["merges"] = {"a b"};
  expectParseError(j.dump(),
                   {"merges[0]", "piece 'b' is not in the vocabulary"});
  j["merges"] = {"ab"};
  expectParseError(j.dump(), {"merges[0] 'ab' is not two pieces"});
}

TEST(TokenizerLoad, CreateValidatesInMemoryFields) {
  TokenizerConfig config;
  config.pieces = {"<unk>", "<s>", "</s>"};
  config.scores = {0, 0};
  config.types = {2, 3, 3};
  Tokenizer tok;
  TokenizerStatus status = Tokenizer::create(config, tok);
  EXPECT_FALSE(status.ok);
  EXPECT_EQ(status.message,
            "<memory>: field 'scores' has 2 entries but 'pieces_hex' has 3");
  config.scores.push_back(0);
  config.unkId = -1; // allowed: no unknown piece
  status = Tokenizer::create(config, tok);
  EXPECT_TRUE(status.ok) << status.message;
  EXPECT_EQ(tok.encode("xyz", true), Ids{1}); // nothing encodable, all dropped
}

// Scores must be finite floats; JSON numbers beyond float range are refused
// instead of being converted (and beyond double range are invalid JSON).
TEST(TokenizerLoad, RejectsNonFiniteScores) {
  std::string text = validJsonWith("scores", {0, 0, 12345.5, 0, 0});
  std::string inf = text;
  inf.replace(inf.find("12345.5"), 7, "1e999");
  expectParseError(inf, {"invalid JSON"}); // nlohmann refuses overflow
  std::string huge = text;
  huge.replace(huge.find("12345.5"), 7, "1e300");
  expectParseError(huge, {"scores[2] is 1e+300, beyond float range; "
                          "expected a finite number"});

  TokenizerConfig config;
  config.pieces = {"<unk>", "<s>", "</s>"};
  config.scores = {0, std::numeric_limits<float>::infinity(), 0};
  config.types = {2, 3, 3};
  Tokenizer tok;
  TokenizerStatus status = Tokenizer::create(config, tok);
  EXPECT_EQ(status.message,
            "<memory>: scores[1] is infinite, expected a finite number");
  config.scores[1] = std::numeric_limits<float>::quiet_NaN();
  status = Tokenizer::create(config, tok);
  EXPECT_EQ(status.message,
            "<memory>: scores[1] is NaN, expected a finite number");
}

// Deeply nested JSON is refused before it can exhaust the stack, and error
// messages never dump structured values.
TEST(TokenizerLoad, RejectsDeepJson) {
  std::string text = validJsonWith("add_bos", true);
  text.pop_back(); // '}'
  text +=
      ", \"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  expectParseError(text, {"JSON nests deeper than 16 levels"});
  expectParseError(validJsonWith("format", {{1, 2}, {3}}),
                   {"'format' must be \"kiln-tokenizer\", got an array"});
}

// The optional fields: absent means false; present, they must be booleans.
TEST(TokenizerLoad, OptionalFlags) {
  expectParseError(validJsonWith("fuse_unk", "yes"),
                   {"field 'fuse_unk' must be true or false"});
  expectParseError(validJsonWith("dummy_prefix_unless_space", 1),
                   {"field 'dummy_prefix_unless_space' must be true or false"});
  Tokenizer tok;
  TokenizerStatus status =
      Tokenizer::parse(validJsonWith("fuse_unk", true), "ok.json", tok);
  EXPECT_TRUE(status.ok) << status.message;
}

namespace {
/// <unk> <s> </s> ▁ a ▁a <0xC3>; no byte piece for 0xA9.
TokenizerConfig unknownsConfig() {
  TokenizerConfig config;
  config.pieces = {"<unk>",
                   "<s>",
                   "</s>",
                   "\xe2\x96\x81",
                   "a",
                   "\xe2\x96\x81"
                   "a",
                   "<0xC3>"};
  config.scores = {0, 0, 0, -1, -2, -0.5f, 0};
  config.types = {2, 3, 3, 1, 1, 1, 6};
  config.addDummyPrefix = false;
  config.byteFallback = true;
  return config;
}
} // namespace

// A code point takes byte fallback only if all its bytes have pieces (as
// Hugging Face BPE), else one unk; fuse_unk merges a run of unks into one.
TEST(TokenizerEncode, UnknownCodePointsAndFuseUnk) {
  const std::string e = "\xc3\xa9"; // é: <0xC3> exists, <0xA9> does not
  Tokenizer plain = build(unknownsConfig());
  EXPECT_EQ(plain.encode("a" + e + e + "a", false), (Ids{4, 0, 0, 4}));
  TokenizerConfig fused = unknownsConfig();
  fused.fuseUnk = true;
  Tokenizer fuse = build(fused);
  EXPECT_EQ(fuse.encode("a" + e + e + "a", false), (Ids{4, 0, 4}));
  EXPECT_EQ(fuse.encode(e + "a" + e, false), (Ids{0, 4, 0}));
  // No unk piece: unknown code points are dropped.
  TokenizerConfig noUnk = unknownsConfig();
  noUnk.unkId = -1;
  EXPECT_EQ(build(noUnk).encode("a" + e + "a", false), (Ids{4, 4}));
  // The flag round-trips through tokenizer.json.
  Tokenizer loaded;
  nlohmann::json j = toKilnJson(fused);
  j["fuse_unk"] = true;
  ASSERT_TRUE(Tokenizer::parse(j.dump(), "f.json", loaded).ok);
  EXPECT_EQ(loaded.encode("a" + e + e, false), (Ids{4, 0}));
}

// dummy_prefix_unless_space (Hugging Face Metaspace): the "▁" prefix is not
// added to text that already starts with a space or "▁".
TEST(TokenizerEncode, DummyPrefixUnlessSpace) {
  TokenizerConfig config = unknownsConfig();
  config.addDummyPrefix = true;
  Tokenizer always = build(config);
  EXPECT_EQ(always.encode("a", false), Ids{5});
  EXPECT_EQ(always.encode(" a", false), (Ids{3, 5}));
  config.dummyPrefixUnlessSpace = true;
  Tokenizer unless = build(config);
  EXPECT_EQ(unless.encode("a", false), Ids{5});
  EXPECT_EQ(unless.encode(" a", false), Ids{5});
  EXPECT_EQ(unless.encode("\xe2\x96\x81"
                          "a",
                          false),
            Ids{5});
  nlohmann::json j = toKilnJson(config);
  j["dummy_prefix_unless_space"] = true;
  Tokenizer loaded;
  ASSERT_TRUE(Tokenizer::parse(j.dump(), "p.json", loaded).ok);
  EXPECT_EQ(loaded.encode(" a", false), Ids{5});
}

// Only regular files are read: a directory or a FIFO is an error, not a
// hang.
TEST(TokenizerLoad, RejectsNonRegularFiles) {
  Tokenizer tok;
  TokenizerStatus dir = Tokenizer::load(::testing::TempDir(), tok);
  EXPECT_EQ(dir.message, ::testing::TempDir() +
                             ": is a directory, expected a tokenizer.json");
  std::string fifo = ::testing::TempDir() + "kiln-tok-fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  TokenizerStatus status = Tokenizer::load(fifo, tok);
  std::remove(fifo.c_str());
  EXPECT_EQ(status.message,
            fifo + ": is a FIFO (named pipe), expected a tokenizer.json");
}

//===----------------------------------------------------------------------===//
// Byte-level BPE (model "byte_bpe", tokenizer.json version 2)
//===----------------------------------------------------------------------===//

namespace {
/// The GPT-2 byte-to-unicode symbol of `b`, as UTF-8 (openai/gpt-2
/// encoder.py bytes_to_unicode), computed independently of the library.
std::string byteSymbol(unsigned b) {
  auto self = [](unsigned x) {
    return (x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) ||
           (x >= 0xae && x <= 0xff);
  };
  unsigned cp = b;
  if (!self(b)) {
    cp = 256;
    for (unsigned x = 0; x < b; ++x)
      cp += self(x) ? 0 : 1;
  }
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
  return out;
}

/// 256 byte symbols (ids 0..255), then "Ġa" (256), "Ġab" (257), control
/// "<|c|>" (258), user-defined "[[u]]" (259); merges "Ġ a", "Ġa b".
TokenizerConfig byteLevelConfig() {
  TokenizerConfig c;
  c.model = TokenizerModel::ByteBpe;
  for (unsigned b = 0; b < 256; ++b)
    c.pieces.push_back(byteSymbol(b));
  std::string space = byteSymbol(' ');
  c.pieces.push_back(space + "a");
  c.pieces.push_back(space + "ab");
  c.pieces.push_back("<|c|>");
  c.pieces.push_back("[[u]]");
  c.types.assign(c.pieces.size(), 1);
  c.types[258] = 3;
  c.types[259] = 4;
  c.scores.assign(c.pieces.size(), 0.0f);
  c.merges = {space + " a", space + "a b"};
  c.bosId = 258;
  c.eosId = 258;
  c.unkId = -1;
  c.addBos = false;
  c.preTokenizerRegexes = {
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
      "\\s+(?!\\S)|\\s+"};
  return c;
}
} // namespace

TEST(ByteLevel, EncodesSpecialsWordsAndBytes) {
  Tokenizer tok;
  TokenizerStatus st = Tokenizer::create(byteLevelConfig(), tok);
  ASSERT_TRUE(st.ok) << st.message;
  EXPECT_EQ(tok.model(), TokenizerModel::ByteBpe);
  // " ab" merges to one piece; "x" is a byte symbol; the control and
  // user-defined pieces are their ids.
  EXPECT_EQ(tok.encode("x ab<|c|> ab[[u]]", false),
            (Ids{'x', 257, 258, 257, 259}));
  EncodeOptions plain;
  plain.parseSpecial = false; // control as text, user-defined still matched
  Ids ids = tok.encode("<|c|>[[u]]", plain);
  EXPECT_EQ(ids, (Ids{'<', '|', 'c', '|', '>', 259}));
  // Bytes outside ASCII map through the alphabet and back.
  std::string text = "\xc3\xa9 \xff\x00 ab";
  text[4] = '\0';
  Ids bytes = tok.encode(text, false);
  EXPECT_EQ(tok.decode(bytes), text);
  // Control pieces print nothing, user-defined ones their text.
  EXPECT_EQ(tok.decode({258, 257, 259}), " ab[[u]]");
  // BOS / EOS as asked.
  EncodeOptions both;
  both.addBos = both.addEos = true;
  EXPECT_EQ(tok.encode(" a", both), (Ids{258, 256, 258}));
}

TEST(ByteLevel, RejectsBadConfigs) {
  Tokenizer tok;
  TokenizerConfig c = byteLevelConfig();
  c.pieces['A'] = "<A>";
  c.merges.clear();
  TokenizerStatus st = Tokenizer::create(c, tok);
  EXPECT_FALSE(st.ok);
  EXPECT_NE(st.message.find("no normal piece for byte 0x41"),
            std::string::npos)
      << st.message;

  c = byteLevelConfig();
  c.preTokenizerRegexes.push_back("[unclosed");
  st = Tokenizer::create(c, tok);
  EXPECT_NE(st.message.find("field 'pre_tokenizer_regexes': pattern 1: "),
            std::string::npos)
      << st.message;

  c = byteLevelConfig();
  c.normalizer = "nfkc";
  st = Tokenizer::create(c, tok);
  EXPECT_NE(st.message.find("field 'normalizer'"), std::string::npos)
      << st.message;

  c = byteLevelConfig();
  c.model = TokenizerModel::Bpe; // patterns only for byte_bpe
  c.merges.clear();
  st = Tokenizer::create(c, tok);
  EXPECT_NE(st.message.find("model is not \"byte_bpe\""), std::string::npos)
      << st.message;
}

TEST(ByteLevel, LongTextIsFast) {
  Tokenizer tok;
  ASSERT_TRUE(Tokenizer::create(byteLevelConfig(), tok).ok);
  std::string text;
  while (text.size() < 200000)
    text += "ab ab x12 <|c|> \xe2\x82\xac  \n";
  auto start = std::chrono::steady_clock::now();
  Ids ids = tok.encode(text, false);
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  std::string withoutControl;
  for (size_t pos = 0; pos < text.size();) {
    size_t next = text.find("<|c|>", pos);
    withoutControl += text.substr(pos, next - pos);
    pos = next == std::string::npos ? text.size() : next + 5;
  }
  EXPECT_TRUE(tok.decode(ids) == withoutControl);
  EXPECT_LT(seconds, 2.0);
}

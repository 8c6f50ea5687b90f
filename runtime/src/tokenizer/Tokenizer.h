//===- Tokenizer.h - Kiln tokenizer (SPM / BPE / byte-level BPE) -*- C++ -*-===//
//
// Encodes prompts and stream-decodes generated ids for the Kiln runtime. The
// vocabulary comes from an artifact's tokenizer.json (docs/artifact.md,
// "tokenizer.json (Kiln tokenizer format)") or from in-memory fields.
//
// No exception escapes this library: every fallible entry point returns a
// TokenizerStatus whose message names the file, the field and the index.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_TOKENIZER_TOKENIZER_H
#define KILN_RUNTIME_SRC_TOKENIZER_TOKENIZER_H

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::rt {

/// Outcome of a fallible tokenizer operation. `message` is empty on success;
/// on failure it is lowercase, has no trailing period and names the source
/// (file path or "<memory>"), the field and, where relevant, the index.
struct TokenizerStatus {
  bool ok = true;
  std::string message;

  explicit operator bool() const { return ok; }
  static TokenizerStatus success() { return {}; }
  static TokenizerStatus error(std::string message) {
    return {false, std::move(message)};
  }
};

/// How pairs of adjacent symbols are chosen for merging.
enum class TokenizerModel {
  /// SentencePiece BPE by score: highest-scoring merged piece, leftmost on
  /// ties.
  Spm,
  /// Hugging Face BPE: lowest merge rank, leftmost on ties.
  Bpe,
  /// Byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM2): special tokens split
  /// out first, then the regex pre-tokenizer, then each word's bytes mapped
  /// to the GPT-2 byte alphabet and merged by rank.
  ByteBpe,
};

class RegexSplitter;

/// SentencePiece piece types, as stored in `types`.
enum class PieceType : int32_t {
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

/// The in-memory form of tokenizer.json; field meanings as in docs/artifact.md.
/// `pieces` hold raw bytes (already hex-decoded), SentencePiece conventions
/// ("▁" for space, "<0xXX>" byte pieces). `merges` ("a b", rank = index) are
/// used only by the BPE model. `unkId` may be -1 (no unknown piece: code
/// points with neither a piece nor byte pieces are dropped).
struct TokenizerConfig {
  TokenizerModel model = TokenizerModel::Spm;
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  int32_t bosId = 1;
  int32_t eosId = 2;
  int32_t unkId = 0;
  bool addBos = true;
  bool addDummyPrefix = true;
  /// With addDummyPrefix: prepend only if the text does not already start
  /// with a space or "▁" (Hugging Face Metaspace) instead of always
  /// (SentencePiece).
  bool dummyPrefixUnlessSpace = false;
  bool byteFallback = true;
  /// Consecutive unknown code points give one unkId (HF BPE fuse_unk,
  /// SentencePiece) instead of one each.
  bool fuseUnk = false;
  /// Append eosId when special tokens are added (EncodeOptions::addEos).
  bool addEos = false;
  /// ByteBpe: a word that is itself a piece is one token, merges or not
  /// (Hugging Face BPE ignore_merges; llama.cpp for Llama 3).
  bool ignoreMerges = false;
  /// ByteBpe: the pre-tokenizer's name (informational, e.g. "llama-bpe")
  /// and its PCRE2 patterns, applied in order (see RegexSplitter).
  std::string preTokenizer;
  std::vector<std::string> preTokenizerRegexes;
  /// ByteBpe: Unicode normalisation of the text between added tokens before
  /// pre-tokenization: "" (none) or "nfc" (Hugging Face NFC normalizer, as
  /// Qwen2 has; utf8proc). Text that is not valid UTF-8 is left as is.
  std::string normalizer;
};

/// What encode() adds and recognises besides the text itself.
struct EncodeOptions {
  /// Prepend bosId().
  bool addBos = false;
  /// Append eosId().
  bool addEos = false;
  /// ByteBpe: control pieces (type 3) written in the text are their ids
  /// (Hugging Face's default, llama.cpp parse_special); false encodes them
  /// as plain text. User-defined pieces (type 4) are matched either way.
  bool parseSpecial = true;
};

/// A validated, immutable vocabulary with encode/decode. Copyable and movable;
/// all const methods are thread-safe.
class Tokenizer {
public:
  /// An empty tokenizer (vocabSize() == 0); assign one from load()/create().
  Tokenizer() = default;

  /// Reads and validates a Kiln tokenizer.json file into `out`. The path
  /// must name a regular file of at most 512 MiB (a FIFO or device is an
  /// error, never a hang).
  static TokenizerStatus load(const std::string &path, Tokenizer &out);
  /// Parses and validates tokenizer.json text; `sourceName` prefixes errors.
  static TokenizerStatus parse(std::string_view jsonText,
                               const std::string &sourceName, Tokenizer &out);
  /// Validates in-memory fields into `out`; `sourceName` prefixes errors.
  static TokenizerStatus create(TokenizerConfig config, Tokenizer &out,
                                const std::string &sourceName = "<memory>");

  /// Encodes `text` (UTF-8; invalid bytes go through byte fallback / unk),
  /// prepending bosId() when `addBos`. Control pieces are never matched
  /// inside text. A code point with no piece becomes its bytes' "<0xXX>"
  /// pieces when byte fallback is on and all of them exist, else unkId (one
  /// per code point, or one per run with fuseUnk), else nothing (unkId -1).
  /// Symbols from byte fallback or unk never merge.
  std::vector<int32_t> encode(std::string_view text, bool addBos) const {
    EncodeOptions options;
    options.addBos = addBos;
    return encode(text, options);
  }
  /// encode() with every option. For ByteBpe: the text is split at control
  /// pieces (with parseSpecial) and then at user-defined pieces, leftmost
  /// longest match first (Hugging Face AddedVocabulary); each part between
  /// them is split by the pre-tokenizer regexes; each word's bytes become
  /// GPT-2 byte symbols merged by lowest rank (leftmost on ties).
  std::vector<int32_t> encode(std::string_view text,
                              const EncodeOptions &options) const;

  /// The bytes to print for `id` when it follows `prevId` (pass -1 for none),
  /// as llama2.c run.c decode(): the leading space of a piece following BOS is
  /// stripped, "<0xXX>" pieces give the raw byte, control pieces give "",
  /// "▁" gives " ". Invalid ids give "". ByteBpe: normal pieces map back
  /// through the GPT-2 byte alphabet, user-defined and unknown pieces give
  /// their text, control and unused pieces "" (as llama.cpp's llama-cli
  /// prints generated text), and no space is stripped.
  std::string decodePiece(int32_t prevId, int32_t id) const;
  /// decodePiece over `ids` in order, the first one following `prevId`.
  std::string decode(const std::vector<int32_t> &ids,
                     int32_t prevId = -1) const;

  bool isValid(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < pieces_.size();
  }
  int32_t vocabSize() const { return static_cast<int32_t>(pieces_.size()); }
  int32_t bosId() const { return bosId_; }
  int32_t eosId() const { return eosId_; }
  int32_t unkId() const { return unkId_; }
  /// Whether the source asks for BOS to be prepended (pass to encode()).
  bool addBos() const { return addBos_; }
  /// Whether the source asks for EOS to be appended.
  bool addEos() const { return addEos_; }
  TokenizerModel model() const { return model_; }

  /// The raw bytes of piece `id` ("" if invalid).
  const std::string &piece(int32_t id) const;
  float score(int32_t id) const { return isValid(id) ? scores_[id] : 0.0f; }
  PieceType type(int32_t id) const {
    return isValid(id) ? static_cast<PieceType>(types_[id]) : PieceType::Unused;
  }

private:
  struct Symbol;
  void initialSymbols(std::string_view text,
                      std::vector<Symbol> &symbols) const;
  void mergeSymbols(std::string_view normalised,
                    std::vector<Symbol> &symbols) const;
  int32_t lookupText(std::string_view piece) const;
  void encodeSentencePieceStyle(std::string_view text,
                                std::vector<int32_t> &ids) const;
  void encodeByteLevel(std::string_view text, bool parseSpecial,
                       std::vector<int32_t> &ids) const;
  void encodeWord(std::string_view word, std::vector<int32_t> &ids) const;

  TokenizerModel model_ = TokenizerModel::Spm;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<int32_t> types_;
  int32_t bosId_ = -1;
  int32_t eosId_ = -1;
  int32_t unkId_ = -1;
  bool addBos_ = true;
  bool addDummyPrefix_ = true;
  bool dummyPrefixUnlessSpace_ = false;
  bool byteFallback_ = true;
  bool fuseUnk_ = false;
  bool addEos_ = false;
  bool ignoreMerges_ = false;
  bool nfc_ = false;

  /// Pieces that text may be split into (normal / user-defined, not byte
  /// pieces); the first id wins for duplicate pieces.
  std::unordered_map<std::string, int32_t> textPieces_;
  /// Id of piece "<0xXX>" for each byte, or -1.
  std::vector<int32_t> byteIds_;
  /// What each id prints (before the after-BOS space strip).
  std::vector<std::string> decoded_;
  /// BPE: (leftId << 32 | rightId) -> (rank, mergedId).
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;

  // ByteBpe only.
  std::shared_ptr<const RegexSplitter> splitter_;
  /// Id of the piece spelling byte b in the GPT-2 alphabet.
  std::vector<int32_t> byteSymbolIds_;
  /// Pieces matched in text before pre-tokenization, by piece text:
  /// [0] control (type 3), [1] user-defined (type 4).
  std::unordered_map<std::string, int32_t> specials_[2];
  /// Distinct byte lengths of specials_[k], longest first.
  std::vector<size_t> specialLengths_[2];
  /// Bit b set if some piece of specials_[k] starts with byte b.
  std::vector<bool> specialFirstBytes_[2];
};

} // namespace kiln::rt

#endif // KILN_RUNTIME_SRC_TOKENIZER_TOKENIZER_H

//===- Tokenizer.cpp - Kiln tokenizer (SPM / BPE / byte-level BPE) --------===//
//
// Encoding follows llama2.c run.c encode() (SPM) and Hugging Face tokenizers'
// BPE model (byte-level: AddedVocabulary, Split/ByteLevel pre-tokenizers,
// then BPE per word); all use a priority queue of adjacent-symbol
// candidates over a linked list of symbols (as llama.cpp's
// llm_tokenizer_spm does), which picks
// the same pair at every step as run.c's quadratic scan: best score (SPM) or
// lowest rank (BPE), leftmost on ties.
//
//===----------------------------------------------------------------------===//

#include "Tokenizer.h"
#include "PreTokenizer.h"

#include "base/RegularFile.h"

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <queue>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kiln::rt {

namespace {
/// "▁" (U+2581), SentencePiece's stand-in for a space.
constexpr std::string_view kSpaceMarker = "\xe2\x96\x81";

/// An empty piece returned by piece() for invalid ids.
const std::string &emptyPiece() {
  static const std::string empty;
  return empty;
}
} // namespace

/// Escapes `bytes` for an error message: printable ASCII as is, the rest \xNN.
static std::string quote(std::string_view bytes) {
  std::string out = "'";
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out.push_back(static_cast<char>(c));
      continue;
    }
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\x%02x", c);
    out += buf;
  }
  out += "'";
  return out;
}

static int hexValue(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/// If `piece` is exactly "<0xXX>" (two hex digits), returns the byte, else -1.
static int parseBytePiece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>')
    return -1;
  int hi = hexValue(piece[3]), lo = hexValue(piece[4]);
  if (hi < 0 || lo < 0)
    return -1;
  return hi * 16 + lo;
}

/// Byte length of the UTF-8 code point starting at text[pos]; 1 for a byte
/// that does not start a well-formed sequence (it then takes byte fallback).
static size_t codePointLength(std::string_view text, size_t pos) {
  unsigned char lead = static_cast<unsigned char>(text[pos]);
  size_t len = lead < 0x80           ? 1
               : (lead >> 5) == 0x6  ? 2
               : (lead >> 4) == 0xe  ? 3
               : (lead >> 3) == 0x1e ? 4
                                     : 0;
  if (len <= 1 || pos + len > text.size())
    return 1;
  for (size_t i = 1; i < len; ++i)
    if ((static_cast<unsigned char>(text[pos + i]) & 0xc0) != 0x80)
      return 1;
  return len;
}

//===----------------------------------------------------------------------===//
// Construction and validation
//===----------------------------------------------------------------------===//

TokenizerStatus Tokenizer::create(TokenizerConfig config, Tokenizer &out,
                                  const std::string &sourceName) {
  auto fail = [&](const std::string &what) {
    return TokenizerStatus::error(sourceName + ": " + what);
  };
  size_t n = config.pieces.size();
  if (n == 0)
    return fail("field 'pieces_hex' is empty");
  if (n > static_cast<size_t>(INT32_MAX))
    return fail("field 'pieces_hex' has too many entries");
  if (config.scores.size() != n)
    return fail("field 'scores' has " + std::to_string(config.scores.size()) +
                " entries but 'pieces_hex' has " + std::to_string(n));
  if (config.types.size() != n)
    return fail("field 'types' has " + std::to_string(config.types.size()) +
                " entries but 'pieces_hex' has " + std::to_string(n));
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(config.scores[i]))
      return fail("scores[" + std::to_string(i) + "] is " +
                  (std::isnan(config.scores[i]) ? "NaN" : "infinite") +
                  ", expected a finite number");
    int32_t t = config.types[i];
    if (t < static_cast<int32_t>(PieceType::Normal) ||
        t > static_cast<int32_t>(PieceType::Byte))
      return fail("types[" + std::to_string(i) + "] is " + std::to_string(t) +
                  ", expected 1 (normal), 2 (unknown), 3 (control), "
                  "4 (user-defined), 5 (unused) or 6 (byte)");
  }
  auto checkId = [&](int32_t id, const char *field,
                     bool allowNone) -> TokenizerStatus {
    if ((allowNone && id == -1) || (id >= 0 && static_cast<size_t>(id) < n))
      return TokenizerStatus::success();
    return fail(std::string("field '") + field + "' is " + std::to_string(id) +
                ", out of range [0, " + std::to_string(n) + ")" +
                (allowNone ? " and not -1" : ""));
  };
  if (TokenizerStatus s = checkId(config.bosId, "bos_id", false); !s)
    return s;
  if (TokenizerStatus s = checkId(config.eosId, "eos_id", false); !s)
    return s;
  if (TokenizerStatus s = checkId(config.unkId, "unk_id", true); !s)
    return s;

  Tokenizer tok;
  tok.model_ = config.model;
  tok.bosId_ = config.bosId;
  tok.eosId_ = config.eosId;
  tok.unkId_ = config.unkId;
  tok.addBos_ = config.addBos;
  tok.addDummyPrefix_ = config.addDummyPrefix;
  tok.dummyPrefixUnlessSpace_ = config.dummyPrefixUnlessSpace;
  tok.byteFallback_ = config.byteFallback;
  tok.fuseUnk_ = config.fuseUnk;
  tok.addEos_ = config.addEos;
  tok.ignoreMerges_ = config.ignoreMerges;
  if (config.normalizer == "nfc")
    tok.nfc_ = true;
  else if (!config.normalizer.empty())
    return fail("field 'normalizer' is " + quote(config.normalizer) +
                ", expected \"nfc\" or absent");
  if (tok.nfc_ && config.model != TokenizerModel::ByteBpe)
    return fail("field 'normalizer' is set but model is not \"byte_bpe\"");
  tok.byteIds_.assign(256, -1);
  tok.decoded_.resize(n);

  std::unordered_map<std::string, int32_t> allPieces;
  allPieces.reserve(n);
  tok.textPieces_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string &p = config.pieces[i];
    auto id = static_cast<int32_t>(i);
    auto type = static_cast<PieceType>(config.types[i]);
    allPieces.emplace(p, id);
    if (config.model == TokenizerModel::ByteBpe) {
      if (type == PieceType::Normal && !p.empty())
        tok.textPieces_.emplace(p, id);
      if ((type == PieceType::Control || type == PieceType::UserDefined) &&
          !p.empty()) {
        int k = type == PieceType::Control ? 0 : 1;
        if (tok.specials_[k].emplace(p, id).second)
          tok.specialLengths_[k].push_back(p.size());
      }
      if (type == PieceType::Control || type == PieceType::Unused)
        continue; // decodes to ""
      if (type != PieceType::Normal) {
        tok.decoded_[i] = p; // user-defined, unknown, byte: as written
        continue;
      }
      // Normal pieces are spelled in the GPT-2 byte alphabet; a code point
      // outside it (not produced by the encoder) prints as itself.
      std::string &text = tok.decoded_[i];
      for (size_t pos = 0; pos < p.size();) {
        size_t len = codePointLength(p, pos);
        uint32_t cp = static_cast<unsigned char>(p[pos]);
        if (len == 2)
          cp = ((cp & 0x1f) << 6) | (static_cast<unsigned char>(p[pos + 1]) &
                                     0x3f);
        int byte = len <= 2 ? unicodeToByte(cp) : -1;
        if (byte >= 0)
          text.push_back(static_cast<char>(byte));
        else
          text.append(p, pos, len);
        pos += len;
      }
      continue;
    }
    int byte = parseBytePiece(p);
    bool isText = type == PieceType::Normal || type == PieceType::UserDefined;
    if (byte >= 0 && type != PieceType::Control && type != PieceType::Unknown) {
      if (tok.byteIds_[byte] < 0)
        tok.byteIds_[byte] = id;
      tok.decoded_[i] = std::string(1, static_cast<char>(byte));
      continue;
    }
    if (isText && !p.empty())
      tok.textPieces_.emplace(p, id);
    if (type == PieceType::Control)
      continue; // decodes to ""
    std::string &text = tok.decoded_[i];
    text.reserve(p.size());
    for (size_t pos = 0; pos < p.size();) {
      if (p.compare(pos, kSpaceMarker.size(), kSpaceMarker) == 0) {
        text.push_back(' ');
        pos += kSpaceMarker.size();
        continue;
      }
      text.push_back(p[pos++]);
    }
  }

  if (config.model == TokenizerModel::ByteBpe) {
    // Real vocabularies lack the symbols of bytes their training text never
    // had (SmolLM2: some control characters and bytes invalid in UTF-8);
    // those bytes become unk_id, or nothing without one. Printable ASCII,
    // tab, LF and CR are required: without them it is no byte-level
    // vocabulary.
    tok.byteSymbolIds_.assign(256, -1);
    for (unsigned b = 0; b < 256; ++b) {
      std::string symbol;
      appendUtf8(byteToUnicode(static_cast<uint8_t>(b)), symbol);
      auto it = tok.textPieces_.find(symbol);
      bool required = (b >= 0x20 && b < 0x7f) || b == '\t' || b == '\n' ||
                      b == '\r';
      if (it == tok.textPieces_.end() && !required)
        continue;
      if (it == tok.textPieces_.end()) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "0x%02x", b);
        return fail("byte-level vocabulary has no normal piece for byte " +
                    std::string(hex) + " (its GPT-2 symbol " + quote(symbol) +
                    ")");
      }
      tok.byteSymbolIds_[b] = it->second;
    }
    for (int k = 0; k < 2; ++k) {
      std::vector<size_t> &lengths = tok.specialLengths_[k];
      std::sort(lengths.begin(), lengths.end(), std::greater<size_t>());
      lengths.erase(std::unique(lengths.begin(), lengths.end()),
                    lengths.end());
      tok.specialFirstBytes_[k].assign(256, false);
      for (const auto &entry : tok.specials_[k])
        tok.specialFirstBytes_[k][static_cast<unsigned char>(
            entry.first[0])] = true;
    }
    std::string error;
    if (!RegexSplitter::create(config.preTokenizerRegexes, tok.splitter_,
                               error))
      return fail("field 'pre_tokenizer_regexes': " + error);
  } else if (!config.preTokenizerRegexes.empty()) {
    return fail("field 'pre_tokenizer_regexes' is set but model is not "
                "\"byte_bpe\"");
  }

  if (config.model == TokenizerModel::Bpe ||
      config.model == TokenizerModel::ByteBpe) {
    tok.merges_.reserve(config.merges.size());
    for (size_t r = 0; r < config.merges.size(); ++r) {
      const std::string &m = config.merges[r];
      std::string where = "merges[" + std::to_string(r) + "] " + quote(m);
      size_t sp = m.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == m.size() ||
          m.find(' ', sp + 1) != std::string::npos)
        return fail(where + " is not two pieces separated by one space");
      std::string left = m.substr(0, sp), right = m.substr(sp + 1);
      auto l = allPieces.find(left), rt = allPieces.find(right),
           merged = allPieces.find(left + right);
      if (l == allPieces.end())
        return fail(where + ": piece " + quote(left) +
                    " is not in the vocabulary");
      if (rt == allPieces.end())
        return fail(where + ": piece " + quote(right) +
                    " is not in the vocabulary");
      if (merged == allPieces.end())
        return fail(where + ": merged piece " + quote(left + right) +
                    " is not in the vocabulary");
      uint64_t key =
          (static_cast<uint64_t>(static_cast<uint32_t>(l->second)) << 32) |
          static_cast<uint32_t>(rt->second);
      // A repeated merge keeps its first (lowest) rank.
      tok.merges_.emplace(
          key, std::make_pair(static_cast<int32_t>(r), merged->second));
    }
  }

  tok.pieces_ = std::move(config.pieces);
  tok.scores_ = std::move(config.scores);
  tok.types_ = std::move(config.types);
  out = std::move(tok);
  return TokenizerStatus::success();
}

//===----------------------------------------------------------------------===//
// tokenizer.json
//===----------------------------------------------------------------------===//

using Json = nlohmann::json;

/// A short rendering of `v` for an error message: scalars as JSON text
/// (strings cut at 64 bytes), arrays and objects by type only (dumping
/// them is recursive and unbounded).
static std::string describe(const Json &v) {
  if (v.is_structured())
    return std::string("an ") + v.type_name();
  std::string text =
      v.dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
  if (text.size() > 64)
    text = text.substr(0, 64) + "...";
  return text;
}

/// Far above any real vocabulary (Llama 3's 128K pieces are a few MB).
/// kiln-compile's TokenizerWriter (kMaxTokenizerJsonBytes) stays within it.
constexpr uint64_t kMaxTokenizerBytes = uint64_t(512) << 20;

/// The Kiln tokenizer format nests 3 deep (object, merges, pair); deeper
/// input is refused before it can exhaust the stack.
constexpr int kMaxJsonDepth = 16;

static TokenizerStatus parseFields(const Json &root,
                                   const std::string &sourceName,
                                   TokenizerConfig &config) {
  auto fail = [&](const std::string &what) {
    return TokenizerStatus::error(sourceName + ": " + what);
  };
  if (!root.is_object())
    return fail("top level is not a JSON object");
  auto field = [&](const char *name, const Json *&value) -> TokenizerStatus {
    auto it = root.find(name);
    if (it == root.end())
      return fail(std::string("missing field '") + name + "'");
    value = &*it;
    return TokenizerStatus::success();
  };
  auto typeError = [&](const std::string &name, const char *expected) {
    return fail("field '" + name + "' must be " + expected);
  };
  const Json *v = nullptr;

  if (TokenizerStatus s = field("format", v); !s)
    return s;
  if (!v->is_string() || v->get<std::string>() != "kiln-tokenizer")
    return fail("field 'format' must be \"kiln-tokenizer\", got " +
                describe(*v));
  if (TokenizerStatus s = field("version", v); !s)
    return s;
  if (!v->is_number_integer() || v->get<int64_t>() < 1 ||
      v->get<int64_t>() > 2)
    return fail("field 'version' is " + describe(*v) +
                ", this runtime reads versions 1 and 2");

  if (TokenizerStatus s = field("model", v); !s)
    return s;
  std::string model = v->is_string() ? v->get<std::string>() : "";
  if (model == "spm")
    config.model = TokenizerModel::Spm;
  else if (model == "bpe")
    config.model = TokenizerModel::Bpe;
  else if (model == "byte_bpe")
    config.model = TokenizerModel::ByteBpe;
  else
    return fail("field 'model' is " + describe(*v) +
                ", expected \"spm\", \"bpe\" or \"byte_bpe\"");

  if (TokenizerStatus s = field("pieces_hex", v); !s)
    return s;
  if (!v->is_array())
    return typeError("pieces_hex", "an array of hex strings");
  config.pieces.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const Json &e = (*v)[i];
    std::string where = "pieces_hex[" + std::to_string(i) + "]";
    if (!e.is_string())
      return fail(where + " is not a string");
    const std::string &hex = e.get_ref<const std::string &>();
    if (hex.size() % 2 != 0)
      return fail(where + " has an odd number of hex digits (" +
                  std::to_string(hex.size()) + ")");
    std::string bytes(hex.size() / 2, '\0');
    for (size_t k = 0; k < hex.size(); k += 2) {
      int hi = hexValue(hex[k]), lo = hexValue(hex[k + 1]);
      if (hi < 0 || lo < 0)
        return fail(where + " has an invalid hex digit " +
                    quote(std::string(1, hex[hi < 0 ? k : k + 1])) +
                    " at offset " + std::to_string(hi < 0 ? k : k + 1));
      bytes[k / 2] = static_cast<char>(hi * 16 + lo);
    }
    config.pieces.push_back(std::move(bytes));
  }

  if (TokenizerStatus s = field("scores", v); !s)
    return s;
  if (!v->is_array())
    return typeError("scores", "an array of numbers");
  config.scores.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const Json &e = (*v)[i];
    if (!e.is_number())
      return fail("scores[" + std::to_string(i) + "] is not a number");
    // Range-check as double: converting an out-of-range double to float is
    // undefined behaviour.
    auto d = e.get<double>();
    if (!std::isfinite(d))
      return fail("scores[" + std::to_string(i) +
                  "] overflows to infinity, expected a finite number");
    if (std::fabs(d) > FLT_MAX)
      return fail("scores[" + std::to_string(i) + "] is " + e.dump() +
                  ", beyond float range; expected a finite number");
    config.scores.push_back(static_cast<float>(d));
  }

  if (TokenizerStatus s = field("types", v); !s)
    return s;
  if (!v->is_array())
    return typeError("types", "an array of integers");
  config.types.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const Json &e = (*v)[i];
    if (!e.is_number_integer() || e.get<int64_t>() < INT32_MIN ||
        e.get<int64_t>() > INT32_MAX)
      return fail("types[" + std::to_string(i) + "] is not an integer");
    config.types.push_back(static_cast<int32_t>(e.get<int64_t>()));
  }

  if (TokenizerStatus s = field("merges", v); !s)
    return s;
  if (!v->is_array())
    return typeError("merges", "an array of \"left right\" strings");
  config.merges.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const Json &e = (*v)[i];
    if (e.is_string()) {
      config.merges.push_back(e.get<std::string>());
      continue;
    }
    // Also accept the newer Hugging Face form ["left", "right"].
    if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      config.merges.push_back(e[0].get<std::string>() + " " +
                              e[1].get<std::string>());
      continue;
    }
    return fail("merges[" + std::to_string(i) +
                "] is not a \"left right\" string");
  }

  for (auto [name, out] :
       {std::pair<const char *, int32_t *>{"bos_id", &config.bosId},
        {"eos_id", &config.eosId},
        {"unk_id", &config.unkId}}) {
    if (TokenizerStatus s = field(name, v); !s)
      return s;
    if (!v->is_number_integer() || v->get<int64_t>() < INT32_MIN ||
        v->get<int64_t>() > INT32_MAX)
      return typeError(name, "an integer");
    *out = static_cast<int32_t>(v->get<int64_t>());
  }
  for (auto [name, out] :
       {std::pair<const char *, bool *>{"add_bos", &config.addBos},
        {"add_dummy_prefix", &config.addDummyPrefix},
        {"byte_fallback", &config.byteFallback}}) {
    if (TokenizerStatus s = field(name, v); !s)
      return s;
    if (!v->is_boolean())
      return typeError(name, "true or false");
    *out = v->get<bool>();
  }
  // Optional (added in a later Kiln; absent means false).
  for (auto [name, out] :
       {std::pair<const char *, bool *>{"dummy_prefix_unless_space",
                                        &config.dummyPrefixUnlessSpace},
        {"fuse_unk", &config.fuseUnk},
        {"add_eos", &config.addEos},
        {"ignore_merges", &config.ignoreMerges}}) {
    auto it = root.find(name);
    if (it == root.end())
      continue;
    if (!it->is_boolean())
      return typeError(name, "true or false");
    *out = it->get<bool>();
  }
  // Version 2, byte_bpe only (absent: no pre-tokenizer).
  if (auto it = root.find("pre_tokenizer"); it != root.end()) {
    if (!it->is_string())
      return typeError("pre_tokenizer", "a string");
    config.preTokenizer = it->get<std::string>();
  }
  if (auto it = root.find("normalizer"); it != root.end()) {
    if (!it->is_string())
      return typeError("normalizer", "a string");
    config.normalizer = it->get<std::string>();
  }
  if (auto it = root.find("pre_tokenizer_regexes"); it != root.end()) {
    if (!it->is_array())
      return typeError("pre_tokenizer_regexes", "an array of strings");
    for (size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_string())
        return fail("pre_tokenizer_regexes[" + std::to_string(i) +
                    "] is not a string");
      config.preTokenizerRegexes.push_back((*it)[i].get<std::string>());
    }
  }
  return TokenizerStatus::success();
}

TokenizerStatus Tokenizer::parse(std::string_view jsonText,
                                 const std::string &sourceName,
                                 Tokenizer &out) {
  TokenizerConfig config;
#if defined(__cpp_exceptions)
  try {
#endif
    bool tooDeep = false;
    Json::parser_callback_t limitDepth = [&](int depth, Json::parse_event_t,
                                             Json &) {
      if (depth > kMaxJsonDepth)
        tooDeep = true;
      return !tooDeep;
    };
    Json root = Json::parse(jsonText.begin(), jsonText.end(), limitDepth,
                            /*allow_exceptions=*/false);
    if (tooDeep)
      return TokenizerStatus::error(sourceName + ": JSON nests deeper than " +
                                    std::to_string(kMaxJsonDepth) + " levels");
    if (root.is_discarded())
      return TokenizerStatus::error(sourceName + ": invalid JSON");
    if (TokenizerStatus s = parseFields(root, sourceName, config); !s)
      return s;
#if defined(__cpp_exceptions)
  } catch (const std::exception &e) {
    // parseFields checks every type before reading it; this is a backstop
    // so that nothing thrown by nlohmann escapes.
    return TokenizerStatus::error(sourceName + ": " + e.what());
  }
#endif
  return create(std::move(config), out, sourceName);
}

TokenizerStatus Tokenizer::load(const std::string &path, Tokenizer &out) {
  // A FIFO must not hang the caller nor a device feed it forever: a regular
  // file of plausible size, read whole (base/RegularFile).
  std::string contents, error;
  if (!readRegularFile(path, kMaxTokenizerBytes, "a tokenizer.json", contents,
                       error))
    return TokenizerStatus::error(error);
  return parse(contents, path, out);
}

const std::string &Tokenizer::piece(int32_t id) const {
  return isValid(id) ? pieces_[id] : emptyPiece();
}

//===----------------------------------------------------------------------===//
// Encoding
//===----------------------------------------------------------------------===//

/// One node of the doubly linked list of symbols being merged. A symbol
/// covers text[start, start + len) of the normalised text.
struct Tokenizer::Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t start;
  uint32_t len;   // 0 once merged into its left neighbour
  bool mergeable; // false for byte-fallback and unknown symbols (as run.c)
};

int32_t Tokenizer::lookupText(std::string_view piece) const {
  auto it = textPieces_.find(std::string(piece));
  return it == textPieces_.end() ? -1 : it->second;
}

void Tokenizer::initialSymbols(std::string_view text,
                               std::vector<Symbol> &symbols) const {
  auto push = [&](int32_t id, size_t start, size_t n, bool mergeable) {
    auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, static_cast<uint32_t>(start),
                       static_cast<uint32_t>(n), mergeable});
  };
  bool prevUnk = false;
  for (size_t pos = 0; pos < text.size();) {
    size_t len = codePointLength(text, pos);
    int32_t id = lookupText(text.substr(pos, len));
    bool unk = false;
    if (id >= 0) {
      push(id, pos, len, true);
    } else {
      // Byte fallback only if every byte of the code point has a piece (as
      // Hugging Face BPE; SentencePiece vocabularies have all 256).
      bool allBytes = byteFallback_;
      for (size_t k = 0; allBytes && k < len; ++k)
        allBytes = byteIds_[static_cast<unsigned char>(text[pos + k])] >= 0;
      if (allBytes) {
        for (size_t k = 0; k < len; ++k)
          push(byteIds_[static_cast<unsigned char>(text[pos + k])], pos + k, 1,
               false);
      } else if (unkId_ >= 0) {
        unk = true;
        if (fuseUnk_ && prevUnk)
          symbols.back().len += static_cast<uint32_t>(len);
        else
          push(unkId_, pos, len, false);
      }
    }
    prevUnk = unk;
    pos += len;
  }
  if (!symbols.empty())
    symbols.back().next = -1;
}

namespace {
/// A candidate merge of symbols[left] and its right neighbour symbols[right].
struct Bigram {
  int32_t left;
  int32_t right;
  uint32_t len; // combined byte length when queued (detects stale entries)
  float score;  // SPM: higher first
  int32_t rank; // BPE: lower first
  int32_t id;   // the merged piece
};
struct SpmOrder {
  bool operator()(const Bigram &a, const Bigram &b) const {
    // priority_queue pops the "largest": best score, then leftmost.
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};
struct BpeOrder {
  bool operator()(const Bigram &a, const Bigram &b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};
} // namespace

/// Queues every adjacent pair through `makeBigram`, then repeatedly applies
/// the best queued merge that is still current, queueing the new neighbours.
template <typename SymbolT, typename Queue, typename Make>
static void runMerges(std::vector<SymbolT> &symbols, Queue &queue,
                      Make makeBigram) {
  for (size_t i = 0; i + 1 < symbols.size(); ++i)
    makeBigram(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));
  while (!queue.empty()) {
    Bigram top = queue.top();
    queue.pop();
    auto &left = symbols[top.left];
    auto &right = symbols[top.right];
    if (left.len == 0 || right.len == 0 || left.next != top.right ||
        left.len + right.len != top.len)
      continue; // stale: one side has changed since it was queued
    left.id = top.id;
    left.len += right.len;
    left.next = right.next;
    right.len = 0;
    if (right.next >= 0)
      symbols[right.next].prev = top.left;
    if (left.prev >= 0)
      makeBigram(left.prev, top.left);
    if (left.next >= 0)
      makeBigram(top.left, left.next);
  }
}

void Tokenizer::mergeSymbols(std::string_view normalised,
                             std::vector<Symbol> &symbols) const {
  switch (model_) {
  case TokenizerModel::Spm: {
    std::priority_queue<Bigram, std::vector<Bigram>, SpmOrder> queue;
    runMerges(symbols, queue, [&](int32_t l, int32_t r) {
      const Symbol &a = symbols[l], &b = symbols[r];
      if (!a.mergeable || !b.mergeable)
        return;
      int32_t id = lookupText(normalised.substr(a.start, a.len + b.len));
      if (id < 0)
        return;
      queue.push({l, r, a.len + b.len, scores_[id], 0, id});
    });
    return;
  }
  case TokenizerModel::Bpe:
  case TokenizerModel::ByteBpe: {
    std::priority_queue<Bigram, std::vector<Bigram>, BpeOrder> queue;
    runMerges(symbols, queue, [&](int32_t l, int32_t r) {
      const Symbol &a = symbols[l], &b = symbols[r];
      if (!a.mergeable || !b.mergeable)
        return;
      uint64_t key =
          (static_cast<uint64_t>(static_cast<uint32_t>(a.id)) << 32) |
          static_cast<uint32_t>(b.id);
      auto it = merges_.find(key);
      if (it == merges_.end())
        return;
      queue.push(
          {l, r, a.len + b.len, 0.0f, it->second.first, it->second.second});
    });
    return;
  }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text,
                                       const EncodeOptions &options) const {
  std::vector<int32_t> ids;
  if (options.addBos && isValid(bosId_))
    ids.push_back(bosId_);
  if (!text.empty() && !pieces_.empty()) {
    if (model_ == TokenizerModel::ByteBpe)
      encodeByteLevel(text, options.parseSpecial, ids);
    else
      encodeSentencePieceStyle(text, ids);
  }
  if (options.addEos && isValid(eosId_))
    ids.push_back(eosId_);
  return ids;
}

void Tokenizer::encodeSentencePieceStyle(std::string_view text,
                                         std::vector<int32_t> &ids) const {

  std::string normalised;
  normalised.reserve(text.size() * 3 + 3);
  // Metaspace prepends "▁" unless the text, spaces replaced, starts with one.
  bool startsWithSpace =
      text[0] == ' ' || text.substr(0, kSpaceMarker.size()) == kSpaceMarker;
  if (addDummyPrefix_ && !(dummyPrefixUnlessSpace_ && startsWithSpace))
    normalised += kSpaceMarker;
  for (char c : text) {
    if (c == ' ')
      normalised += kSpaceMarker;
    else
      normalised.push_back(c);
  }

  std::vector<Symbol> symbols;
  symbols.reserve(normalised.size());
  initialSymbols(normalised, symbols);

  mergeSymbols(normalised, symbols);

  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next)
    ids.push_back(symbols[i].id);
}

void Tokenizer::encodeWord(std::string_view word,
                           std::vector<int32_t> &ids) const {
  if (ignoreMerges_) {
    std::string mapped;
    for (char c : word)
      appendUtf8(byteToUnicode(static_cast<uint8_t>(c)), mapped);
    if (int32_t id = lookupText(mapped); id >= 0) {
      ids.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t k = 0; k < word.size(); ++k) {
    auto index = static_cast<int32_t>(symbols.size());
    int32_t id = byteSymbolIds_[static_cast<unsigned char>(word[k])];
    if (id < 0 && unkId_ < 0)
      continue; // a byte without a symbol, and no unk: dropped
    symbols.push_back({id < 0 ? unkId_ : id, index - 1, index + 1,
                       static_cast<uint32_t>(k), 1, id >= 0});
  }
  if (symbols.empty())
    return;
  symbols.back().next = -1;
  mergeSymbols(word, symbols);
  for (int32_t i = 0; i >= 0; i = symbols[i].next)
    ids.push_back(symbols[i].id);
}

void Tokenizer::encodeByteLevel(std::string_view text, bool parseSpecial,
                                std::vector<int32_t> &ids) const {
  // 1. Added tokens: control pieces (if parsed), then user-defined pieces
  //    in what is left, leftmost-longest (Hugging Face AddedVocabulary).
  struct Part {
    size_t offset, length;
    int32_t id; // >= 0: a matched piece; -1: text
  };
  std::vector<Part> parts{{0, text.size(), -1}}, next;
  for (int k = parseSpecial ? 0 : 1; k < 2; ++k) {
    if (specials_[k].empty())
      continue;
    next.clear();
    for (const Part &part : parts) {
      if (part.id >= 0) {
        next.push_back(part);
        continue;
      }
      size_t end = part.offset + part.length, last = part.offset;
      for (size_t pos = part.offset; pos < end;) {
        int32_t found = -1;
        size_t foundLength = 0;
        if (specialFirstBytes_[k][static_cast<unsigned char>(text[pos])])
          for (size_t len : specialLengths_[k]) {
            if (len > end - pos)
              continue;
            auto it = specials_[k].find(std::string(text.substr(pos, len)));
            if (it != specials_[k].end()) {
              found = it->second;
              foundLength = len;
              break;
            }
          }
        if (found < 0) {
          ++pos;
          continue;
        }
        if (pos > last)
          next.push_back({last, pos - last, -1});
        next.push_back({pos, foundLength, found});
        pos += foundLength;
        last = pos;
      }
      if (last < end)
        next.push_back({last, end - last, -1});
    }
    parts.swap(next);
  }

  // 2. Pre-tokenize each text part; 3. BPE per word, cached per call
  //    (running text repeats its words).
  std::unordered_map<std::string_view, std::vector<int32_t>> cache;
  std::vector<std::pair<size_t, size_t>> words;
  std::vector<int32_t> wordIds;
  std::deque<std::string> normalised; // keeps cache keys alive
  for (const Part &part : parts) {
    if (part.id >= 0) {
      ids.push_back(part.id);
      continue;
    }
    std::string_view partText = text.substr(part.offset, part.length);
    if (nfc_) {
      utf8proc_uint8_t *out = nullptr;
      utf8proc_ssize_t n = utf8proc_map(
          reinterpret_cast<const utf8proc_uint8_t *>(partText.data()),
          static_cast<utf8proc_ssize_t>(partText.size()), &out,
          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
      if (n >= 0 && out) {
        normalised.emplace_back(reinterpret_cast<const char *>(out),
                                static_cast<size_t>(n));
        partText = normalised.back();
      }
      std::free(out);
    }
    words.clear();
    splitter_->split(partText, words);
    for (auto [offset, length] : words) {
      std::string_view word = partText.substr(offset, length);
      if (int32_t id = byteSymbolIds_[static_cast<unsigned char>(word[0])];
          word.size() == 1 && id >= 0) {
        ids.push_back(id);
        continue;
      }
      auto it = cache.find(word);
      if (it == cache.end()) {
        wordIds.clear();
        encodeWord(word, wordIds);
        if (cache.size() > (1u << 16))
          cache.clear(); // bound memory on huge varied inputs
        it = cache.emplace(word, wordIds).first;
      }
      ids.insert(ids.end(), it->second.begin(), it->second.end());
    }
  }
}

//===----------------------------------------------------------------------===//
// Decoding
//===----------------------------------------------------------------------===//

std::string Tokenizer::decodePiece(int32_t prevId, int32_t id) const {
  if (!isValid(id))
    return {};
  const std::string &text = decoded_[id];
  // run.c strips the space only from text pieces, never from a <0x20> piece.
  if (model_ != TokenizerModel::ByteBpe && prevId == bosId_ &&
      !text.empty() && text[0] == ' ' && parseBytePiece(pieces_[id]) < 0)
    return text.substr(1);
  return text;
}

std::string Tokenizer::decode(const std::vector<int32_t> &ids,
                              int32_t prevId) const {
  std::string out;
  for (int32_t id : ids) {
    out += decodePiece(prevId, id);
    prevId = id;
  }
  return out;
}

} // namespace kiln::rt

//===- Tokenizers.cpp - Tokenizer readers ---------------------------------===//
//
// Reads llama2.c tok*.bin, Hugging Face tokenizer.json and SentencePiece
// tokenizer.model files into a TokenizerDesc with SentencePiece conventions
// (docs/artifact.md, "tokenizer.json"). The GGUF reader is in
// GgufImporter.cpp.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kiln/Import/ImportUtils.h"
#include "dialects/Kiln/Import/Importers.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <cstring>

using namespace llvm;
using namespace mlir::kiln::detail;

namespace mlir::kiln {

static constexpr StringLiteral kSpace = "\xe2\x96\x81"; // U+2581 "▁"

/// Reads a whole tokenizer file (regular, at most kMaxTokenizerBytes).
static Expected<std::unique_ptr<MemoryBuffer>> readWholeFile(StringRef path) {
  return readRegularFile(path, kMaxTokenizerBytes, "a tokenizer file");
}

static std::string replaceSpaces(StringRef s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    if (ch == ' ')
      out += kSpace;
    else
      out += ch;
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

Expected<TokenizerDesc> readTokenizer(StringRef path) {
  if (sys::fs::is_directory(path)) {
    std::string json = joinPath(path, "tokenizer.json");
    if (sys::fs::exists(json))
      return readHfTokenizer(json);
    std::string spm = joinPath(path, "tokenizer.model");
    if (sys::fs::exists(spm))
      return readSentencePieceModel(spm);
    return fileError(path, "directory has no tokenizer.json or "
                           "tokenizer.model");
  }
  Expected<uint64_t> size = getFileSize(path, "a tokenizer file");
  if (!size)
    return size.takeError();
  StringRef ext = sys::path::extension(path);
  if (ext.equals_insensitive(".json"))
    return readHfTokenizer(path);
  if (ext.equals_insensitive(".model"))
    return readSentencePieceModel(path);
  char magic[4] = {0, 0, 0, 0};
  if (*size >= 4)
    if (Error e = readFileRange(path, 0, magic, "magic"))
      return std::move(e);
  if (StringRef(magic, 4) == "GGUF" || ext.equals_insensitive(".gguf"))
    return readGgufTokenizer(path);
  return readLlama2cTokenizer(path);
}

//===----------------------------------------------------------------------===//
// llama2.c
//===----------------------------------------------------------------------===//

Expected<TokenizerDesc> readLlama2cTokenizer(StringRef path) {
  Expected<std::unique_ptr<MemoryBuffer>> buf = readWholeFile(path);
  if (!buf)
    return buf.takeError();
  ByteReader r(path, (*buf)->getBuffer());
  int32_t maxLen;
  if (Error e = r.readI32(maxLen, "max_token_length"))
    return std::move(e);
  if (maxLen <= 0 || maxLen > (1 << 20))
    return fileError(path, "max_token_length is " + Twine(maxLen) +
                               " at offset 0, expected a value in [1, "
                               "1048576] (is this a llama2.c tokenizer?)");
  TokenizerDesc tok;
  tok.model = "spm";
  tok.addBos = tok.addDummyPrefix = tok.byteFallback = true;
  tok.bosId = 1;
  tok.eosId = 2;
  tok.unkId = 0;
  while (r.remaining() > 0) {
    size_t id = tok.pieces.size();
    float score;
    int32_t len;
    if (Error e = r.readF32(score, "score of token " + Twine(id)))
      return std::move(e);
    if (Error e = r.readI32(len, "length of token " + Twine(id)))
      return std::move(e);
    if (len < 0 || len > maxLen)
      return fileError(path, "token " + Twine(id) + " has length " +
                                 Twine(len) + " at offset " +
                                 Twine(r.offset() - 4) +
                                 ", expected 0.." + Twine(maxLen) +
                                 " (max_token_length)");
    StringRef bytes;
    if (Error e = r.readBytes(len, bytes, "bytes of token " + Twine(id)))
      return std::move(e);
    std::string piece;
    int32_t type = 1;
    if (id == 0) {
      type = 2;
      piece = bytes.str();
    } else if (bytes == "\n<s>\n" || (id == 1 && bytes.trim() == "<s>")) {
      piece = "<s>";
      type = 3;
    } else if (bytes == "\n</s>\n" || (id == 2 && bytes.trim() == "</s>")) {
      piece = "</s>";
      type = 3;
    } else if (id == 1 || id == 2) {
      piece = replaceSpaces(bytes);
      type = 3;
    } else {
      piece = replaceSpaces(bytes);
      if (isBytePiece(piece))
        type = 6;
    }
    tok.pieces.push_back(std::move(piece));
    tok.scores.push_back(score);
    tok.types.push_back(type);
  }
  if (tok.pieces.size() < 3)
    return fileError(path, "tokenizer has " + Twine(tok.pieces.size()) +
                               " pieces, expected at least 3 (<unk>, <s>, "
                               "</s>)");
  if (Error e = checkTokenizer(tok, path))
    return std::move(e);
  return tok;
}

//===----------------------------------------------------------------------===//
// Hugging Face tokenizer.json
//===----------------------------------------------------------------------===//

static Expected<json::Value> parseJsonFile(StringRef path) {
  return readJsonFile(path, kMaxTokenizerBytes, "a JSON file");
}

/// True if `v` (a normalizer or pre-tokenizer, possibly a Sequence) contains
/// an object for which `pred` holds.
static bool anyComponent(const json::Value *v,
                         function_ref<bool(const json::Object &)> pred,
                         int depth = 0) {
  if (!v || depth > 16)
    return false;
  const json::Object *o = v->getAsObject();
  if (!o)
    return false;
  if (pred(*o))
    return true;
  for (StringRef key : {"normalizers", "pretokenizers"})
    if (const json::Array *items = o->getArray(key))
      for (const json::Value &item : *items)
        if (anyComponent(&item, pred, depth + 1))
          return true;
  return false;
}

/// Reads a special token given as "text" or {"content": "text"}.
static std::optional<std::string> tokenContent(const json::Value *v) {
  if (!v)
    return std::nullopt;
  if (std::optional<StringRef> s = v->getAsString())
    return s->str();
  if (const json::Object *o = v->getAsObject())
    if (std::optional<StringRef> s = o->getString("content"))
      return s->str();
  return std::nullopt;
}

Expected<TokenizerDesc> readHfTokenizer(StringRef path) {
  Expected<json::Value> root = parseJsonFile(path);
  if (!root)
    return root.takeError();
  const json::Object *top = root->getAsObject();
  if (!top)
    return fileError(path, "expected a JSON object at the top level");
  const json::Object *model = top->getObject("model");
  if (!model)
    return fileError(path, "missing object field 'model'");
  std::optional<StringRef> type = model->getString("type");
  if (type && *type != "BPE")
    return fileError(path, "unsupported tokenizer model.type '" + *type +
                               "' (expected 'BPE')");
  const json::Object *vocab = model->getObject("vocab");
  if (!vocab)
    return fileError(path, "missing object field 'model.vocab'");
  if (anyComponent(top->get("pre_tokenizer"), [](const json::Object &o) {
        return o.getString("type") == std::optional<StringRef>("ByteLevel");
      }))
    return fileError(path, "unsupported pre_tokenizer 'ByteLevel' (GPT-2 "
                           "style byte-level BPE); expected a SentencePiece-"
                           "style BPE tokenizer");

  // Collect (id, piece, type).
  struct Entry {
    std::string piece;
    int32_t type = 1;
    bool set = false;
  };
  std::vector<Entry> entries;
  constexpr int64_t kMaxVocab = int64_t(1) << 24;
  auto place = [&](int64_t id, StringRef piece, int32_t ty,
                   const Twine &field) -> Error {
    if (id < 0 || id >= kMaxVocab)
      return fileError(path, field + ": id " + Twine(id) +
                                 " is out of range [0, " + Twine(kMaxVocab) +
                                 ")");
    if (static_cast<size_t>(id) >= entries.size())
      entries.resize(id + 1);
    entries[id].piece = piece.str();
    entries[id].type = ty;
    entries[id].set = true;
    return Error::success();
  };
  for (const auto &kv : *vocab) {
    std::optional<int64_t> id = kv.second.getAsInteger();
    if (!id)
      return fileError(path, "model.vocab['" + StringRef(kv.first) +
                                 "']: expected an integer id");
    if (Error e = place(*id, kv.first, isBytePiece(kv.first) ? 6 : 1,
                        "model.vocab['" + StringRef(kv.first) + "']"))
      return std::move(e);
  }
  if (const json::Array *added = top->getArray("added_tokens")) {
    for (auto [i, v] : llvm::enumerate(*added)) {
      const json::Object *o = v.getAsObject();
      std::optional<int64_t> id = o ? o->getInteger("id") : std::nullopt;
      std::optional<StringRef> content =
          o ? o->getString("content") : std::nullopt;
      if (!id || !content)
        return fileError(path, "added_tokens[" + Twine(i) +
                                   "]: expected an object with integer 'id' "
                                   "and string 'content'");
      bool special = o->getBoolean("special").value_or(false);
      if (Error e = place(*id, *content, special ? 3 : 4,
                          "added_tokens[" + Twine(i) + "]"))
        return std::move(e);
    }
  }
  if (entries.empty())
    return fileError(path, "model.vocab is empty");

  TokenizerDesc tok;
  tok.model = "bpe";
  StringMap<int32_t> ids;
  for (auto [id, e] : llvm::enumerate(entries)) {
    if (!e.set)
      return fileError(path, "no piece has id " + Twine(id) +
                                 " (model.vocab and added_tokens leave a "
                                 "gap)");
    tok.pieces.push_back(e.piece);
    tok.types.push_back(e.type);
    tok.scores.push_back(0.0f);
    ids.try_emplace(e.piece, static_cast<int32_t>(id));
  }

  // Merges: "a b" strings or ["a", "b"] pairs. Each merged piece's score is
  // minus the rank of the first merge producing it, so merging by score
  // (spm) agrees with merging by rank wherever the pair determines the piece.
  std::vector<bool> scored(tok.pieces.size(), false);
  if (const json::Array *merges = model->getArray("merges")) {
    tok.merges.reserve(merges->size());
    for (auto [rank, v] : llvm::enumerate(*merges)) {
      std::string left, right;
      if (std::optional<StringRef> s = v.getAsString()) {
        auto [l, r] = s->split(' ');
        if (r.empty() && !s->contains(' '))
          return fileError(path, "model.merges[" + Twine(rank) + "]: '" + *s +
                                     "' is not of the form 'left right'");
        left = l.str();
        right = r.str();
      } else if (const json::Array *pair = v.getAsArray();
                 pair && pair->size() == 2 && (*pair)[0].getAsString() &&
                 (*pair)[1].getAsString()) {
        left = (*pair)[0].getAsString()->str();
        right = (*pair)[1].getAsString()->str();
      } else {
        return fileError(path, "model.merges[" + Twine(rank) +
                                   "]: expected a string 'left right' or a "
                                   "pair of strings");
      }
      auto it = ids.find(left + right);
      if (it != ids.end() && !scored[it->second]) {
        scored[it->second] = true;
        tok.scores[it->second] = -static_cast<float>(rank);
      }
      tok.merges.push_back(left + " " + right);
    }
  }

  tok.byteFallback = model->getBoolean("byte_fallback").value_or(false);
  tok.addDummyPrefix =
      anyComponent(top->get("normalizer"),
                   [](const json::Object &o) {
                     return o.getString("type") ==
                                std::optional<StringRef>("Prepend") &&
                            o.getString("prepend") ==
                                std::optional<StringRef>(kSpace);
                   }) ||
      anyComponent(top->get("pre_tokenizer"), [](const json::Object &o) {
        if (o.getString("type") != std::optional<StringRef>("Metaspace"))
          return false;
        if (std::optional<StringRef> scheme = o.getString("prepend_scheme"))
          return *scheme != "never";
        return o.getBoolean("add_prefix_space").value_or(true);
      });

  auto idOf = [&](StringRef piece) -> std::optional<int32_t> {
    auto it = ids.find(piece);
    if (it == ids.end())
      return std::nullopt;
    return it->second;
  };

  // unk.
  tok.unkId = 0;
  if (std::optional<StringRef> unk = model->getString("unk_token")) {
    if (std::optional<int32_t> id = idOf(*unk)) {
      tok.unkId = *id;
      tok.types[*id] = 2;
    }
  }

  // bos/eos: tokenizer_config.json, then config.json, then "<s>"/"</s>".
  std::optional<int32_t> bos, eos;
  tok.addBos = true;
  StringRef dir = sys::path::parent_path(path);
  std::string tcPath = joinPath(dir, "tokenizer_config.json");
  if (sys::fs::exists(tcPath)) {
    Expected<json::Value> tc = parseJsonFile(tcPath);
    if (!tc)
      return tc.takeError();
    if (const json::Object *o = tc->getAsObject()) {
      if (std::optional<std::string> s = tokenContent(o->get("bos_token")))
        bos = idOf(*s);
      if (std::optional<std::string> s = tokenContent(o->get("eos_token")))
        eos = idOf(*s);
      if (std::optional<bool> b = o->getBoolean("add_bos_token"))
        tok.addBos = *b;
    }
  }
  std::string cfgPath = joinPath(dir, "config.json");
  if ((!bos || !eos) && sys::fs::exists(cfgPath)) {
    Expected<json::Value> cfg = parseJsonFile(cfgPath);
    if (!cfg)
      return cfg.takeError();
    if (const json::Object *o = cfg->getAsObject()) {
      if (!bos)
        if (std::optional<int64_t> id = o->getInteger("bos_token_id"))
          bos = static_cast<int32_t>(*id);
      if (!eos)
        if (std::optional<int64_t> id = o->getInteger("eos_token_id"))
          eos = static_cast<int32_t>(*id);
    }
  }
  if (!bos)
    bos = idOf("<s>");
  if (!eos)
    eos = idOf("</s>");
  tok.bosId = bos.value_or(1);
  tok.eosId = eos.value_or(2);
  if (Error e = checkTokenizer(tok, path))
    return std::move(e);
  return tok;
}

//===----------------------------------------------------------------------===//
// SentencePiece ModelProto
//===----------------------------------------------------------------------===//

namespace {
/// Minimal protobuf wire-format reader.
class ProtoReader {
public:
  ProtoReader(StringRef file, StringRef data, uint64_t base)
      : file(file), data(data), base(base) {}

  bool atEnd() const { return pos >= data.size(); }
  uint64_t offset() const { return base + pos; }

  Error varint(uint64_t &v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= data.size())
        return fileError(file, "truncated varint at offset " +
                                   Twine(offset()));
      uint8_t b = static_cast<uint8_t>(data[pos++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80))
        return Error::success();
    }
    return fileError(file, "varint too long at offset " + Twine(offset()));
  }

  /// Reads a field key and its payload: varints/fixed values in `value`,
  /// length-delimited payloads in `bytes`.
  Error field(uint32_t &number, uint32_t &wireType, uint64_t &value,
              StringRef &bytes, uint64_t &payloadOffset) {
    uint64_t key;
    if (Error e = varint(key))
      return e;
    number = static_cast<uint32_t>(key >> 3);
    wireType = static_cast<uint32_t>(key & 7);
    payloadOffset = offset();
    switch (wireType) {
    case 0:
      return varint(value);
    case 1:
    case 5: {
      size_t n = wireType == 1 ? 8 : 4;
      if (data.size() - pos < n)
        return fileError(file, "truncated fixed-width field " +
                                   Twine(number) + " at offset " +
                                   Twine(offset()));
      value = 0;
      for (size_t i = 0; i < n; ++i)
        value |= uint64_t(static_cast<uint8_t>(data[pos + i])) << (8 * i);
      pos += n;
      return Error::success();
    }
    case 2: {
      uint64_t len;
      if (Error e = varint(len))
        return e;
      payloadOffset = offset();
      if (len > data.size() - pos)
        return fileError(file, "field " + Twine(number) + " at offset " +
                                   Twine(offset()) + " has length " +
                                   Twine(len) + " but only " +
                                   Twine(data.size() - pos) +
                                   " bytes remain");
      bytes = data.substr(pos, len);
      pos += len;
      return Error::success();
    }
    default:
      return fileError(file, "unsupported protobuf wire type " +
                                 Twine(wireType) + " at offset " +
                                 Twine(offset()) +
                                 " (is this a SentencePiece model?)");
    }
  }

private:
  std::string file;
  StringRef data;
  uint64_t base;
  size_t pos = 0;
};
} // namespace

Expected<TokenizerDesc> readSentencePieceModel(StringRef path) {
  Expected<std::unique_ptr<MemoryBuffer>> buf = readWholeFile(path);
  if (!buf)
    return buf.takeError();
  TokenizerDesc tok;
  tok.model = "spm";
  tok.addBos = true;
  tok.addDummyPrefix = true;
  tok.byteFallback = false;
  tok.unkId = 0;
  tok.bosId = 1;
  tok.eosId = 2;
  uint64_t modelType = 1; // UNIGRAM is the proto default.
  ProtoReader top(path, (*buf)->getBuffer(), 0);
  while (!top.atEnd()) {
    uint32_t num, wt;
    uint64_t value, at;
    StringRef bytes;
    if (Error e = top.field(num, wt, value, bytes, at))
      return std::move(e);
    if (wt != 2)
      continue;
    ProtoReader sub(path, bytes, at);
    if (num == 1) { // SentencePiece
      std::string piece;
      float score = 0.0f;
      int32_t type = 1;
      while (!sub.atEnd()) {
        uint32_t n2, wt2;
        uint64_t v2, at2;
        StringRef b2;
        if (Error e = sub.field(n2, wt2, v2, b2, at2))
          return std::move(e);
        if (n2 == 1 && wt2 == 2)
          piece = b2.str();
        else if (n2 == 2 && wt2 == 5) {
          uint32_t bits = static_cast<uint32_t>(v2);
          std::memcpy(&score, &bits, 4);
        } else if (n2 == 3 && wt2 == 0)
          type = static_cast<int32_t>(v2);
      }
      tok.pieces.push_back(std::move(piece));
      tok.scores.push_back(score);
      tok.types.push_back(type);
      continue;
    }
    if (num == 2 || num == 3) { // TrainerSpec / NormalizerSpec
      while (!sub.atEnd()) {
        uint32_t n2, wt2;
        uint64_t v2, at2;
        StringRef b2;
        if (Error e = sub.field(n2, wt2, v2, b2, at2))
          return std::move(e);
        if (wt2 != 0)
          continue;
        if (num == 3) {
          if (n2 == 3)
            tok.addDummyPrefix = v2 != 0;
          continue;
        }
        switch (n2) {
        case 3:
          modelType = v2;
          break;
        case 35:
          tok.byteFallback = v2 != 0;
          break;
        case 40:
          tok.unkId = static_cast<int32_t>(v2);
          break;
        case 41:
          tok.bosId = static_cast<int32_t>(v2);
          break;
        case 42:
          tok.eosId = static_cast<int32_t>(v2);
          break;
        default:
          break;
        }
      }
    }
  }
  if (modelType != 2)
    return fileError(path, "unsupported SentencePiece model_type " +
                               Twine(modelType) +
                               " (expected 2, BPE; unigram is not supported)");
  if (tok.pieces.empty())
    return fileError(path, "no pieces (is this a SentencePiece model?)");
  if (Error e = checkTokenizer(tok, path))
    return std::move(e);
  return tok;
}

//===----------------------------------------------------------------------===//
// Synthetic
//===----------------------------------------------------------------------===//

TokenizerDesc makeSyntheticTokenizer(int64_t vocabSize) {
  TokenizerDesc tok;
  tok.model = "spm";
  tok.addBos = tok.addDummyPrefix = tok.byteFallback = true;
  tok.unkId = 0;
  tok.bosId = 1;
  tok.eosId = 2;
  for (int64_t id = 0; id < vocabSize; ++id) {
    std::string piece;
    int32_t type;
    if (id == 0) {
      piece = "<unk>";
      type = 2;
    } else if (id == 1) {
      piece = "<s>";
      type = 3;
    } else if (id == 2) {
      piece = "</s>";
      type = 3;
    } else if (id < 259) {
      raw_string_ostream os(piece);
      os << "<0x" << format_hex_no_prefix(id - 3, 2, /*Upper=*/true) << ">";
      type = 6;
    } else {
      piece = "<tok_" + std::to_string(id) + ">";
      type = 4;
    }
    tok.pieces.push_back(std::move(piece));
    tok.scores.push_back(0.0f);
    tok.types.push_back(type);
  }
  return tok;
}

} // namespace mlir::kiln

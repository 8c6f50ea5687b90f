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
    if (!std::isfinite(score))
      return fileError(path, "token " + Twine(id) + " has score " +
                                 (std::isnan(score) ? "nan" : "inf") +
                                 " at offset " + Twine(r.offset() - 4) +
                                 ", expected a finite number");
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

/// The "type" field of a tokenizer component ("" if it has none).
static StringRef componentType(const json::Object &o) {
  return o.getString("type").value_or("");
}

/// Appends the components of `v` to `out`: nothing for null, the items of a
/// "Sequence" (listed under `listKey`, flattened), else `v` itself. Errors
/// name `field` (e.g. "normalizer").
static Error flattenComponents(StringRef path, const json::Value *v,
                               StringRef field, StringRef listKey,
                               SmallVectorImpl<const json::Object *> &out,
                               int depth = 0) {
  if (!v || v->kind() == json::Value::Null)
    return Error::success();
  const json::Object *o = v->getAsObject();
  if (!o)
    return fileError(path, field + " must be an object or null");
  if (depth > 16)
    return fileError(path, field + " nests Sequences more than 16 deep");
  if (componentType(*o) != "Sequence") {
    out.push_back(o);
    return Error::success();
  }
  const json::Array *items = o->getArray(listKey);
  if (!items)
    return fileError(path, field + " Sequence has no '" + listKey + "' array");
  for (const json::Value &item : *items)
    if (Error e =
            flattenComponents(path, &item, field, listKey, out, depth + 1))
      return e;
  return Error::success();
}

/// True if `v` is {"String": `s`} (a Replace pattern).
static bool isStringPattern(const json::Value *v, StringRef s) {
  const json::Object *o = v ? v->getAsObject() : nullptr;
  return o && o->size() == 1 && o->getString("String") == s;
}

static Error byteLevelError(StringRef path, StringRef field) {
  return fileError(path, "unsupported " + field +
                             " 'ByteLevel' (GPT-2 style byte-level BPE is "
                             "not implemented); expected a SentencePiece-"
                             "style BPE tokenizer");
}

/// Reads an optional boolean field: absent or null gives `dflt`, anything
/// but a boolean is an error naming `field`.
static Expected<bool> optionalBool(StringRef path, const json::Object &o,
                                   StringRef key, StringRef field, bool dflt) {
  const json::Value *v = o.get(key);
  if (!v || v->kind() == json::Value::Null)
    return dflt;
  if (std::optional<bool> b = v->getAsBoolean())
    return *b;
  return fileError(path, field + " must be true or false");
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

/// How the normalizer and pre-tokenizer of a tokenizer.json prepare text.
/// Kiln implements exactly: optionally prepend "▁", then every ' ' becomes
/// "▁" (docs/artifact.md, "Hugging Face tokenizer.json").
struct TextPrep {
  bool prepend = false;          ///< normalizer Prepend("▁"): always
  bool replaceSpace = false;     ///< normalizer Replace(' ', "▁")
  bool metaspace = false;        ///< pre_tokenizer Metaspace("▁")
  bool metaspacePrepend = false; ///< ... prepending unless a space leads
  bool metaspaceSplit = false;   ///< ... splitting words at "▁"
};

static Expected<TextPrep> readTextPrep(StringRef path,
                                       const json::Object &top) {
  TextPrep prep;
  SmallVector<const json::Object *> normalizers, preTokenizers;
  if (Error e = flattenComponents(path, top.get("normalizer"), "normalizer",
                                  "normalizers", normalizers))
    return std::move(e);
  for (const json::Object *o : normalizers) {
    StringRef type = componentType(*o);
    if (type == "Prepend") {
      if (o->getString("prepend") != StringRef(kSpace) || prep.prepend)
        return fileError(path,
                         "normalizer Prepend of " +
                             quotePiece(o->getString("prepend").value_or("")) +
                             " is not implemented (Kiln prepends "
                             "one '\xe2\x96\x81' at most)");
      prep.prepend = true;
      continue;
    }
    if (type == "Replace") {
      if (!isStringPattern(o->get("pattern"), " ") ||
          o->getString("content") != StringRef(kSpace))
        return fileError(path, "normalizer Replace other than ' ' -> "
                               "'\xe2\x96\x81' is not implemented");
      prep.replaceSpace = true;
      continue;
    }
    if (type == "ByteLevel")
      return byteLevelError(path, "normalizer");
    return fileError(path, "normalizer '" + type +
                               "' is not implemented (Kiln implements "
                               "Prepend('\xe2\x96\x81') and Replace(' ', "
                               "'\xe2\x96\x81') only)");
  }
  if (Error e =
          flattenComponents(path, top.get("pre_tokenizer"), "pre_tokenizer",
                            "pretokenizers", preTokenizers))
    return std::move(e);
  for (const json::Object *o : preTokenizers) {
    StringRef type = componentType(*o);
    if (type == "ByteLevel")
      return byteLevelError(path, "pre_tokenizer");
    if (type != "Metaspace" || prep.metaspace)
      return fileError(path, "pre_tokenizer '" + type +
                                 "' is not implemented (Kiln implements "
                                 "one Metaspace('\xe2\x96\x81') only)");
    if (o->getString("replacement") != StringRef(kSpace))
      return fileError(
          path, "pre_tokenizer Metaspace with replacement " +
                    quotePiece(o->getString("replacement").value_or("")) +
                    " is not implemented (expected "
                    "'\xe2\x96\x81')");
    prep.metaspace = true;
    if (std::optional<StringRef> scheme = o->getString("prepend_scheme")) {
      if (*scheme != "always" && *scheme != "first" && *scheme != "never")
        return fileError(path, "pre_tokenizer Metaspace prepend_scheme '" +
                                   *scheme + "' is not implemented");
      prep.metaspacePrepend = *scheme != "never";
    } else {
      Expected<bool> b = optionalBool(path, *o, "add_prefix_space",
                                      "pre_tokenizer Metaspace "
                                      "add_prefix_space",
                                      true);
      if (!b)
        return b.takeError();
      prep.metaspacePrepend = *b;
    }
    Expected<bool> split =
        optionalBool(path, *o, "split", "pre_tokenizer Metaspace split", true);
    if (!split)
      return split.takeError();
    prep.metaspaceSplit = *split;
  }
  if (!prep.replaceSpace && !prep.metaspace)
    return fileError(path, "neither the normalizer nor the pre_tokenizer "
                           "turns ' ' into '\xe2\x96\x81' (expected a "
                           "Replace normalizer or a Metaspace pre_tokenizer); "
                           "Kiln's encoder always does");
  return prep;
}

/// Rejects decoders Kiln's decoding does not match.
static Error checkDecoder(StringRef path, const json::Object &top) {
  SmallVector<const json::Object *> decoders;
  if (Error e = flattenComponents(path, top.get("decoder"), "decoder",
                                  "decoders", decoders))
    return e;
  for (const json::Object *o : decoders) {
    StringRef type = componentType(*o);
    if (type == "ByteFallback" || type == "Fuse" || type == "Strip")
      continue;
    if (type == "Metaspace" && o->getString("replacement") == StringRef(kSpace))
      continue;
    if (type == "Replace" && isStringPattern(o->get("pattern"), kSpace) &&
        o->getString("content") == StringRef(" "))
      continue;
    if (type == "ByteLevel")
      return byteLevelError(path, "decoder");
    return fileError(path, "decoder '" + type +
                               "' is not implemented (Kiln implements "
                               "Replace('\xe2\x96\x81', ' '), ByteFallback, "
                               "Fuse, Strip and Metaspace)");
  }
  return Error::success();
}

/// Reads model.* options that change BPE encoding; rejects those Kiln does
/// not implement.
static Error readBpeOptions(StringRef path, const json::Object &model,
                            TokenizerDesc &tok) {
  if (const json::Value *d = model.get("dropout");
      d && d->kind() != json::Value::Null &&
      d->getAsNumber().value_or(1.0) != 0.0)
    return fileError(path, "model.dropout is not implemented (BPE dropout "
                           "skips merges at random); expected null");
  for (StringRef key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const json::Value *v = model.get(key);
        v && v->kind() != json::Value::Null &&
        v->getAsString().value_or("x") != "")
      return fileError(path,
                       "model." + key + " is not implemented; expected null");
  Expected<bool> ignoreMerges =
      optionalBool(path, model, "ignore_merges", "model.ignore_merges", false);
  if (!ignoreMerges)
    return ignoreMerges.takeError();
  if (*ignoreMerges && tok.model != "byte_bpe")
    return fileError(path, "model.ignore_merges is true, which is not "
                           "implemented for SentencePiece-style BPE (only "
                           "for byte-level BPE)");
  tok.ignoreMerges = *ignoreMerges;
  Expected<bool> fuse =
      optionalBool(path, model, "fuse_unk", "model.fuse_unk", false);
  if (!fuse)
    return fuse.takeError();
  Expected<bool> fallback =
      optionalBool(path, model, "byte_fallback", "model.byte_fallback", false);
  if (!fallback)
    return fallback.takeError();
  tok.fuseUnk = *fuse;
  tok.byteFallback = *fallback;
  if (tok.model == "byte_bpe" && *fallback)
    return fileError(path, "model.byte_fallback is true in a byte-level BPE "
                           "tokenizer, which is not implemented (every byte "
                           "has a symbol); expected false");
  return Error::success();
}

/// True if the pre_tokenizer has a ByteLevel component: a GPT-2 style
/// byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2, SmolLM2).
static bool isByteLevel(const json::Object &top) {
  SmallVector<const json::Object *> items;
  if (Error e = flattenComponents("", top.get("pre_tokenizer"),
                                  "pre_tokenizer", "pretokenizers", items)) {
    consumeError(std::move(e));
    return false;
  }
  return llvm::any_of(items, [](const json::Object *o) {
    return componentType(*o) == "ByteLevel";
  });
}

/// A PCRE2 pattern matching `s` literally.
static std::string literalPattern(StringRef s) {
  std::string out;
  for (char c : s) {
    if (!isAlnum(c) && static_cast<unsigned char>(c) < 0x80)
      out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

/// Reads the normalizer, pre_tokenizer and decoder of a byte-level BPE
/// tokenizer.json into `tok.preTokenizerRegexes`. Implemented: no
/// normalizer or NFC; pre_tokenizer a ByteLevel (add_prefix_space false; its
/// use_regex adds GPT-2's pattern) after any number of Split (behavior
/// Isolated, invert false; Regex or String pattern) and Digits; decoder
/// ByteLevel.
static Error readByteLevelPrep(StringRef path, const json::Object &top,
                               TokenizerDesc &tok) {
  SmallVector<const json::Object *> normalizers;
  if (Error e = flattenComponents(path, top.get("normalizer"), "normalizer",
                                  "normalizers", normalizers))
    return e;
  for (const json::Object *o : normalizers) {
    if (componentType(*o) == "NFC" && tok.normalizer.empty()) {
      tok.normalizer = "nfc";
      continue;
    }
    return fileError(path, "normalizer '" + componentType(*o) +
                               "' is not implemented for byte-level BPE "
                               "(expected null or NFC)");
  }
  SmallVector<const json::Object *> items;
  if (Error e = flattenComponents(path, top.get("pre_tokenizer"),
                                  "pre_tokenizer", "pretokenizers", items))
    return e;
  tok.preTokenizer = "hf";
  for (auto [i, o] : llvm::enumerate(items)) {
    StringRef type = componentType(*o);
    std::string field = "pre_tokenizer " + type.str();
    if (type == "ByteLevel") {
      if (i + 1 != items.size())
        return fileError(path, "pre_tokenizer ByteLevel must come last "
                               "(a component after it would see "
                               "byte-level symbols)");
      Expected<bool> prefix = optionalBool(path, *o, "add_prefix_space",
                                           field + " add_prefix_space",
                                           true);
      if (!prefix)
        return prefix.takeError();
      if (*prefix)
        return fileError(path, "pre_tokenizer ByteLevel add_prefix_space is "
                               "true, which is not implemented; expected "
                               "false");
      Expected<bool> useRegex =
          optionalBool(path, *o, "use_regex", field + " use_regex", true);
      if (!useRegex)
        return useRegex.takeError();
      if (*useRegex)
        tok.preTokenizerRegexes.push_back(gpt2Pattern().str());
      continue;
    }
    if (type == "Digits") {
      Expected<bool> single = optionalBool(
          path, *o, "individual_digits", field + " individual_digits", false);
      if (!single)
        return single.takeError();
      tok.preTokenizerRegexes.push_back(*single ? "\\p{N}" : "\\p{N}+");
      continue;
    }
    if (type == "Split") {
      if (o->getString("behavior") != StringRef("Isolated"))
        return fileError(path, "pre_tokenizer Split behavior '" +
                                   o->getString("behavior").value_or("") +
                                   "' is not implemented (expected "
                                   "'Isolated')");
      Expected<bool> invert =
          optionalBool(path, *o, "invert", field + " invert", false);
      if (!invert)
        return invert.takeError();
      if (*invert)
        return fileError(path, "pre_tokenizer Split invert is true, which "
                               "is not implemented");
      const json::Object *pattern = o->getObject("pattern");
      std::optional<StringRef> regex =
          pattern ? pattern->getString("Regex") : std::nullopt;
      std::optional<StringRef> literal =
          pattern ? pattern->getString("String") : std::nullopt;
      if (regex)
        tok.preTokenizerRegexes.push_back(regex->str());
      else if (literal && !literal->empty())
        tok.preTokenizerRegexes.push_back(literalPattern(*literal));
      else
        return fileError(path, "pre_tokenizer Split pattern must be "
                               "{\"Regex\": ...} or a non-empty "
                               "{\"String\": ...}");
      continue;
    }
    return fileError(path, "pre_tokenizer '" + type +
                               "' is not implemented for byte-level BPE "
                               "(Kiln implements Split, Digits and "
                               "ByteLevel)");
  }
  SmallVector<const json::Object *> decoders;
  if (Error e = flattenComponents(path, top.get("decoder"), "decoder",
                                  "decoders", decoders))
    return e;
  if (decoders.size() != 1 || componentType(*decoders[0]) != "ByteLevel")
    return fileError(path, "decoder must be ByteLevel for a byte-level BPE "
                           "tokenizer (got " +
                               (decoders.empty()
                                    ? std::string("none")
                                    : "'" +
                                          componentType(*decoders[0]).str() +
                                          "'" +
                                          (decoders.size() > 1 ? ", ..." : "")) +
                               ")");
  return Error::success();
}

/// The post_processor of a byte-level tokenizer.json: null, ByteLevel (ids
/// unchanged), TemplateProcessing whose `single` is at most one special
/// token, the text, at most one special token, or a Sequence of these. The
/// leading token becomes BOS (add_bos), the trailing one must be EOS
/// (add_eos). Without a TemplateProcessing nothing is added, whatever
/// tokenizer_config.json says (as Hugging Face's fast tokenizers do).
static Error readByteLevelPostProcessor(
    StringRef path, const json::Object &top,
    function_ref<std::optional<int32_t>(StringRef)> idOf,
    TokenizerDesc &tok) {
  tok.addBos = false;
  tok.addEos = false;
  SmallVector<const json::Object *> items;
  if (Error e = flattenComponents(path, top.get("post_processor"),
                                  "post_processor", "processors", items))
    return e;
  for (const json::Object *o : items) {
    StringRef type = componentType(*o);
    if (type == "ByteLevel")
      continue;
    const json::Array *single =
        type == "TemplateProcessing" ? o->getArray("single") : nullptr;
    if (!single)
      return fileError(path, "post_processor '" + type +
                                 "' is not implemented (Kiln implements "
                                 "ByteLevel and TemplateProcessing)");
    std::optional<std::string> before, after;
    bool sawText = false, ok = true;
    for (const json::Value &item : *single) {
      const json::Object *io = item.getAsObject();
      const json::Object *special =
          io && io->size() == 1 ? io->getObject("SpecialToken") : nullptr;
      if (special && special->getString("id")) {
        std::optional<std::string> &slot = sawText ? after : before;
        if (slot) {
          ok = false;
          break;
        }
        slot = special->getString("id")->str();
        continue;
      }
      if (io && io->size() == 1 && io->getObject("Sequence") && !sawText) {
        sawText = true;
        continue;
      }
      ok = false;
      break;
    }
    if (!ok || !sawText)
      return fileError(path, "post_processor TemplateProcessing 'single' "
                             "adds tokens Kiln does not (implemented: an "
                             "optional special token, the text, an "
                             "optional special token)");
    if (before) {
      std::optional<int32_t> id = idOf(*before);
      if (!id)
        return fileError(path, "post_processor TemplateProcessing token " +
                                   quotePiece(*before) +
                                   " is not in the vocabulary");
      tok.bosId = *id;
      tok.addBos = true;
    }
    if (after) {
      if (idOf(*after) != std::optional<int32_t>(tok.eosId))
        return fileError(path, "post_processor TemplateProcessing appends " +
                                   quotePiece(*after) +
                                   ", which is not the EOS token (id " +
                                   Twine(tok.eosId) + ")");
      tok.addEos = true;
    }
  }
  return Error::success();
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
  bool byteLevel = isByteLevel(*top);
  // Collect (id, piece, type); an id names one piece.
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
    Entry &e = entries[id];
    if (e.set && e.piece != piece)
      return fileError(path, field + ": id " + Twine(id) +
                                 " is already the id of " +
                                 quotePiece(e.piece));
    e.piece = piece.str();
    e.type = ty;
    e.set = true;
    return Error::success();
  };
  for (const auto &kv : *vocab) {
    std::optional<int64_t> id = kv.second.getAsInteger();
    if (!id)
      return fileError(path, "model.vocab['" + StringRef(kv.first) +
                                 "']: expected an integer id");
    if (Error e = place(*id, kv.first,
                        !byteLevel && isBytePiece(kv.first) ? 6 : 1,
                        "model.vocab['" + StringRef(kv.first) + "']"))
      return std::move(e);
  }
  if (const json::Value *addedValue = top->get("added_tokens");
      addedValue && addedValue->kind() != json::Value::Null) {
    const json::Array *added = addedValue->getAsArray();
    if (!added)
      return fileError(path, "added_tokens must be an array");
    for (auto [i, v] : llvm::enumerate(*added)) {
      const json::Object *o = v.getAsObject();
      std::optional<int64_t> id = o ? o->getInteger("id") : std::nullopt;
      std::optional<StringRef> content =
          o ? o->getString("content") : std::nullopt;
      if (!id || !content)
        return fileError(path, "added_tokens[" + Twine(i) +
                                   "]: expected an object with integer 'id' "
                                   "and string 'content'");
      Expected<bool> special = optionalBool(
          path, *o, "special",
          "added_tokens[" + std::to_string(i) + "].special", false);
      if (!special)
        return special.takeError();
      // Byte-level tokenizers match added tokens in text, special ones as
      // control pieces (type 3), the others as user-defined (type 4), as
      // Hugging Face does. Other tokenizers never match them, which gives
      // Hugging Face's ids only for special ones (control pieces).
      if (byteLevel) {
        for (StringRef flag : {"lstrip", "rstrip", "single_word"}) {
          Expected<bool> b = optionalBool(
              path, *o, flag,
              "added_tokens[" + std::to_string(i) + "]." + flag.str(), false);
          if (!b)
            return b.takeError();
          if (*b)
            return fileError(path, "added_tokens[" + Twine(i) + "] " +
                                       quotePiece(*content) + " has " + flag +
                                       " true, which is not implemented");
        }
        if (content->empty())
          return fileError(path, "added_tokens[" + Twine(i) +
                                     "] has empty content");
      }
      if (!*special && !byteLevel)
        return fileError(path, "added_tokens[" + Twine(i) + "] " +
                                   quotePiece(*content) +
                                   " is not special: matching added tokens "
                                   "inside text is not implemented");
      if (const json::Value *vid = vocab->get(*content))
        if (vid->getAsInteger() != id)
          return fileError(path, "added_tokens[" + Twine(i) + "] " +
                                     quotePiece(*content) + " has id " +
                                     Twine(*id) +
                                     " but model.vocab gives it another");
      if (Error e = place(*id, *content, *special ? 3 : 4,
                          "added_tokens[" + Twine(i) + "]"))
        return std::move(e);
    }
  }
  if (entries.empty())
    return fileError(path, "model.vocab is empty");

  TokenizerDesc tok;
  tok.model = byteLevel ? "byte_bpe" : "bpe";
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
  // Features: what Kiln does not implement is an error, never other ids.
  TextPrep noPrep;
  Expected<TextPrep> prep = noPrep;
  if (byteLevel) {
    if (Error e = readByteLevelPrep(path, *top, tok))
      return std::move(e);
  } else {
    prep = readTextPrep(path, *top);
    if (!prep)
      return prep.takeError();
    if (Error e = checkDecoder(path, *top))
      return std::move(e);
  }
  for (StringRef key : {"truncation", "padding"})
    if (const json::Value *v = top->get(key);
        v && v->kind() != json::Value::Null)
      return fileError(path, key + " is not implemented; expected null");
  // Metaspace with split=true never merges across a word boundary; Kiln
  // does not split words, which gives the same ids only if no piece holds
  // "▁" after its first character.
  if (prep->metaspace && prep->metaspaceSplit)
    for (auto [id, p] : llvm::enumerate(tok.pieces))
      if (tok.types[id] == 1 && StringRef(p).drop_front().contains(kSpace))
        return fileError(path, "pre_tokenizer Metaspace splits words at "
                               "'\xe2\x96\x81' but piece " +
                                   Twine(id) + " " + quotePiece(p) +
                                   " crosses a word boundary; splitting "
                                   "words is not implemented");

  // Merges: "a b" strings or ["a", "b"] pairs. Each merged piece's score is
  // minus the rank of the first merge producing it, so merging by score
  // (spm) agrees with merging by rank wherever the pair determines the piece.
  std::vector<bool> scored(tok.pieces.size(), false);
  if (const json::Value *mergesValue = model->get("merges");
      mergesValue && mergesValue->kind() != json::Value::Null) {
    const json::Array *merges = mergesValue->getAsArray();
    if (!merges)
      return fileError(path, "model.merges must be an array");
    tok.merges.reserve(merges->size());
    for (auto [rank, v] : llvm::enumerate(*merges)) {
      std::string left, right;
      if (std::optional<StringRef> s = v.getAsString()) {
        auto [l, r] = s->split(' ');
        if (l.empty() || r.empty() || r.contains(' '))
          return fileError(path, "model.merges[" + Twine(rank) +
                                     "]: " + quotePiece(*s) +
                                     " is not of the form 'left right'");
        left = l.str();
        right = r.str();
      } else if (const json::Array *pair = v.getAsArray();
                 pair && pair->size() == 2 && (*pair)[0].getAsString() &&
                 (*pair)[1].getAsString()) {
        left = (*pair)[0].getAsString()->str();
        right = (*pair)[1].getAsString()->str();
        if (left.empty() || right.empty() || StringRef(left).contains(' ') ||
            StringRef(right).contains(' '))
          return fileError(path, "model.merges[" + Twine(rank) +
                                     "]: " + quotePiece(left) + " + " +
                                     quotePiece(right) +
                                     ": pieces holding a space or empty "
                                     "pieces are not implemented");
      } else {
        return fileError(path, "model.merges[" + Twine(rank) +
                                   "]: expected a string 'left right' or a "
                                   "pair of strings");
      }
      for (const std::string *p : {&left, &right})
        if (!ids.count(*p))
          return fileError(path, "model.merges[" + Twine(rank) + "]: piece " +
                                     quotePiece(*p) +
                                     " is not in the vocabulary");
      auto it = ids.find(left + right);
      if (it == ids.end())
        return fileError(
            path, "model.merges[" + Twine(rank) + "]: merged piece " +
                      quotePiece(left + right) + " is not in the vocabulary");
      if (!scored[it->second]) {
        scored[it->second] = true;
        tok.scores[it->second] = -static_cast<float>(rank);
      }
      tok.merges.push_back(left + " " + right);
    }
  }

  if (Error e = readBpeOptions(path, *model, tok))
    return std::move(e);
  tok.addDummyPrefix = prep->prepend || prep->metaspacePrepend;
  tok.prefixIfNoSpace = !prep->prepend && prep->metaspacePrepend;
  if (byteLevel)
    tok.byteFallback = false;

  auto idOf = [&](StringRef piece) -> std::optional<int32_t> {
    auto it = ids.find(piece);
    if (it == ids.end())
      return std::nullopt;
    return it->second;
  };

  // unk: none means unknown code points are dropped, as in Hugging Face.
  tok.unkId = -1;
  if (const json::Value *unkValue = model->get("unk_token");
      unkValue && unkValue->kind() != json::Value::Null) {
    std::optional<StringRef> unk = unkValue->getAsString();
    if (!unk)
      return fileError(path, "model.unk_token must be a string or null");
    std::optional<int32_t> id = idOf(*unk);
    if (!id)
      return fileError(path, "model.unk_token " + quotePiece(*unk) +
                                 " is not in the vocabulary");
    tok.unkId = *id;
    // An added token stays what it is (SmolLM2's unk is the special
    // <|endoftext|>, which is still matched in text).
    if (!byteLevel || tok.types[*id] == 1)
      tok.types[*id] = 2;
  }

  // bos/eos: tokenizer_config.json, then config.json, then "<s>"/"</s>".
  std::optional<int32_t> bos, eos;
  std::optional<bool> configAddBos;
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
      configAddBos = o->getBoolean("add_bos_token");
      // Byte-level: the post_processor alone decides (below).
      if (!byteLevel && o->getBoolean("add_eos_token").value_or(false))
        return fileError(tcPath, "add_eos_token is true: appending EOS to "
                                 "prompts is not implemented");
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
  if (configAddBos)
    tok.addBos = *configAddBos;

  if (byteLevel) {
    if (Error e = readByteLevelPostProcessor(path, *top, idOf, tok))
      return std::move(e);
  }
  // post_processor: what encode() adds around the text. Kiln can prepend
  // BOS and nothing else.
  else if (const json::Value *pp = top->get("post_processor");
           pp && pp->kind() != json::Value::Null) {
    const json::Object *o = pp->getAsObject();
    StringRef ppType = o ? componentType(*o) : "";
    const json::Array *single =
        ppType == "TemplateProcessing" ? o->getArray("single") : nullptr;
    if (!single)
      return fileError(path, "post_processor '" + ppType +
                                 "' is not implemented (Kiln implements "
                                 "TemplateProcessing with an optional BOS "
                                 "before the text)");
    std::optional<std::string> special;
    bool sawText = false, ok = true;
    for (const json::Value &item : *single) {
      const json::Object *io = item.getAsObject();
      if (!io || io->size() != 1) {
        ok = false;
        break;
      }
      if (const json::Object *s = io->getObject("SpecialToken");
          s && !sawText && !special && s->getString("id")) {
        special = s->getString("id")->str();
        continue;
      }
      if (io->getObject("Sequence") && !sawText) {
        sawText = true;
        continue;
      }
      ok = false;
      break;
    }
    if (!ok || !sawText)
      return fileError(path, "post_processor TemplateProcessing 'single' "
                             "adds tokens Kiln does not (implemented: an "
                             "optional BOS, then the text)");
    if (special && idOf(*special) != std::optional<int32_t>(tok.bosId))
      return fileError(path, "post_processor TemplateProcessing prepends " +
                                 quotePiece(*special) +
                                 ", which is not the BOS token (id " +
                                 Twine(tok.bosId) + ")");
    if (configAddBos && *configAddBos != special.has_value())
      return fileError(path, "post_processor TemplateProcessing " +
                                 Twine(special ? "prepends"
                                               : "does not "
                                                 "prepend") +
                                 " BOS but tokenizer_config.json has "
                                 "add_bos_token " +
                                 (*configAddBos ? "true" : "false"));
    tok.addBos = special.has_value();
  }
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
  // SentencePiece merges runs of unknown pieces into one.
  tok.fuseUnk = true;
  uint64_t modelType = 1; // UNIGRAM is the proto default.
  // NormalizerSpec defaults (sentencepiece_model.proto).
  bool removeExtraWhitespaces = true, escapeWhitespaces = true;
  bool whitespaceAsSuffix = false;
  std::string normalizerName, charsmap;
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
        if (num == 3 && wt2 == 2) {
          if (n2 == 1)
            normalizerName = b2.str();
          else if (n2 == 2)
            charsmap = b2.str();
          continue;
        }
        if (wt2 != 0)
          continue;
        if (num == 3) {
          if (n2 == 3)
            tok.addDummyPrefix = v2 != 0;
          else if (n2 == 4)
            removeExtraWhitespaces = v2 != 0;
          else if (n2 == 5)
            escapeWhitespaces = v2 != 0;
          continue;
        }
        switch (n2) {
        case 3:
          modelType = v2;
          break;
        case 24:
          whitespaceAsSuffix = v2 != 0;
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
  // Kiln's encoder does no normalisation beyond the dummy prefix and
  // ' ' -> "▁"; anything else would silently give other ids.
  if (!charsmap.empty())
    return fileError(path, "normalizer_spec '" + normalizerName +
                               "' has a precompiled_charsmap: Unicode "
                               "normalisation is not implemented");
  if (removeExtraWhitespaces)
    return fileError(path, "normalizer_spec.remove_extra_whitespaces is "
                           "true, which is not implemented");
  if (!escapeWhitespaces)
    return fileError(path, "normalizer_spec.escape_whitespaces is false, "
                           "which is not implemented");
  if (whitespaceAsSuffix)
    return fileError(path, "trainer_spec.treat_whitespace_as_suffix is "
                           "true, which is not implemented");
  if (Error e = rejectUserDefinedPieces(tok, path))
    return std::move(e);
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

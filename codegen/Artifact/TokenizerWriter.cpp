//===- TokenizerWriter.cpp - Kiln tokenizer.json writer -------------------===//

#include "codegen/Artifact/TokenizerWriter.h"

#include "dialects/Kiln/Import/ImportUtils.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace mlir::kiln {

Expected<json::Value> tokenizerToJson(const TokenizerDesc &tok) {
  // The runtime's loader applies the same rules (docs/artifact.md,
  // "Validity"): never write a tokenizer kiln-run would refuse.
  if (Error e = detail::checkTokenizer(tok, "tokenizer"))
    return std::move(e);
  if (tok.pieces.empty())
    return createStringError(inconvertibleErrorCode(),
                             "tokenizer has no pieces");
  size_t n = tok.pieces.size();
  json::Array pieces, scores, types, merges;
  pieces.reserve(n);
  scores.reserve(n);
  types.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    pieces.push_back(toHex(tok.pieces[i], /*LowerCase=*/true));
    scores.push_back(static_cast<double>(tok.scores[i])); // finite
    types.push_back(tok.types[i]);
  }
  merges.reserve(tok.merges.size());
  for (const std::string &m : tok.merges)
    merges.push_back(m);
  bool byteLevel = tok.model == "byte_bpe";
  json::Object doc{
      {"format", "kiln-tokenizer"},
      // Version 2 adds byte_bpe; older runtimes refuse it by version.
      {"version", byteLevel || tok.addEos ? 2 : 1},
      {"model", tok.model},
      {"pieces_hex", std::move(pieces)},
      {"scores", std::move(scores)},
      {"types", std::move(types)},
      {"merges", std::move(merges)},
      {"bos_id", tok.bosId},
      {"eos_id", tok.eosId},
      {"unk_id", tok.unkId},
      {"add_bos", tok.addBos},
      {"add_dummy_prefix", tok.addDummyPrefix},
      {"dummy_prefix_unless_space", tok.prefixIfNoSpace},
      {"byte_fallback", tok.byteFallback},
      {"fuse_unk", tok.fuseUnk},
  };
  if (tok.addEos)
    doc["add_eos"] = true;
  if (byteLevel) {
    doc["ignore_merges"] = tok.ignoreMerges;
    doc["pre_tokenizer"] = tok.preTokenizer;
    json::Array regexes;
    for (const std::string &r : tok.preTokenizerRegexes)
      regexes.push_back(r);
    doc["pre_tokenizer_regexes"] = std::move(regexes);
    if (!tok.normalizer.empty())
      doc["normalizer"] = tok.normalizer;
  }
  return json::Value(std::move(doc));
}

Error writeTokenizerJson(StringRef path, const TokenizerDesc &tok) {
  Expected<json::Value> doc = tokenizerToJson(tok);
  if (!doc)
    return createStringError(inconvertibleErrorCode(),
                             path + ": " + toString(doc.takeError()));
  std::string text;
  raw_string_ostream(text) << *doc << '\n';
  if (text.size() > kMaxTokenizerJsonBytes)
    return createStringError(
        inconvertibleErrorCode(),
        path + ": would be " + Twine(text.size()) + " bytes, more than the " +
            Twine(kMaxTokenizerJsonBytes >> 20) +
            " MiB the runtime reads (vocabulary too large)");
  std::error_code ec;
  raw_fd_ostream os(path, ec, sys::fs::OF_None);
  if (ec)
    return createStringError(inconvertibleErrorCode(),
                             path + ": cannot open for writing: " +
                                 ec.message());
  os << text;
  os.close();
  if (os.has_error()) {
    std::string msg = os.error().message();
    os.clear_error();
    return createStringError(inconvertibleErrorCode(),
                             path + ": write error: " + msg);
  }
  return Error::success();
}

} // namespace mlir::kiln

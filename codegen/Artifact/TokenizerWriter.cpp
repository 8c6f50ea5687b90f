//===- TokenizerWriter.cpp - Kiln tokenizer.json writer -------------------===//

#include "codegen/Artifact/TokenizerWriter.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace llvm;

namespace mlir::kiln {

Expected<json::Value> tokenizerToJson(const TokenizerDesc &tok) {
  size_t n = tok.pieces.size();
  if (tok.scores.size() != n || tok.types.size() != n)
    return createStringError(inconvertibleErrorCode(),
                             "tokenizer has " + Twine(n) + " pieces but " +
                                 Twine(tok.scores.size()) + " scores and " +
                                 Twine(tok.types.size()) + " types");
  for (auto [what, id] : {std::pair<StringRef, int32_t>{"bos_id", tok.bosId},
                          {"eos_id", tok.eosId},
                          {"unk_id", tok.unkId}})
    if (n > 0 && (id < 0 || static_cast<size_t>(id) >= n))
      return createStringError(inconvertibleErrorCode(),
                               "tokenizer " + what + " " + Twine(id) +
                                   " is out of range for " + Twine(n) +
                                   " pieces");
  json::Array pieces, scores, types, merges;
  pieces.reserve(n);
  scores.reserve(n);
  types.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    pieces.push_back(toHex(tok.pieces[i], /*LowerCase=*/true));
    float s = tok.scores[i];
    // JSON has no infinities or NaN.
    if (!std::isfinite(s))
      s = std::isnan(s) ? 0.0f : (s < 0 ? -1e30f : 1e30f);
    scores.push_back(static_cast<double>(s));
    types.push_back(tok.types[i]);
  }
  merges.reserve(tok.merges.size());
  for (const std::string &m : tok.merges)
    merges.push_back(m);
  return json::Object{
      {"format", "kiln-tokenizer"},
      {"version", 1},
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
      {"byte_fallback", tok.byteFallback},
  };
}

Error writeTokenizerJson(StringRef path, const TokenizerDesc &tok) {
  Expected<json::Value> doc = tokenizerToJson(tok);
  if (!doc)
    return createStringError(inconvertibleErrorCode(),
                             path + ": " + toString(doc.takeError()));
  std::error_code ec;
  raw_fd_ostream os(path, ec, sys::fs::OF_None);
  if (ec)
    return createStringError(inconvertibleErrorCode(),
                             path + ": cannot open for writing: " +
                                 ec.message());
  os << *doc << '\n';
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

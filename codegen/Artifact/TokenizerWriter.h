//===- TokenizerWriter.h - Kiln tokenizer.json writer -----------*- C++ -*-===//
//
// Writes the artifact's tokenizer.json in the "kiln-tokenizer" format of
// docs/artifact.md.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_ARTIFACT_TOKENIZERWRITER_H
#define KILN_CODEGEN_ARTIFACT_TOKENIZERWRITER_H

#include "dialects/Kiln/Import/ModelDesc.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>

namespace mlir::kiln {

/// The kiln-tokenizer JSON document for `tok` (pieces hex-encoded).
/// Fails unless `tok` is valid by detail::checkTokenizer, the rules the
/// runtime's loader applies (so an artifact's tokenizer always loads), and
/// on an empty vocabulary.
llvm::Expected<llvm::json::Value> tokenizerToJson(const TokenizerDesc &tok);

/// The most bytes the runtime's tokenizer loader reads (kMaxTokenizerBytes
/// in runtime/src/tokenizer/Tokenizer.cpp); the writer stays within it.
constexpr uint64_t kMaxTokenizerJsonBytes = uint64_t(512) << 20;

/// Writes tokenizerToJson(tok) to `path`; fails if the text would exceed
/// kMaxTokenizerJsonBytes.
llvm::Error writeTokenizerJson(llvm::StringRef path, const TokenizerDesc &tok);

} // namespace mlir::kiln

#endif // KILN_CODEGEN_ARTIFACT_TOKENIZERWRITER_H

//===- ParseLimits.h - Limits checked before MLIR parses text ---*- C++ -*-===//
//
// MLIR's parser (libMLIR 22) recurses once per nesting level of a type,
// attribute or region and has no depth limit: text such as "((((..." a few
// thousand levels deep overflows the stack inside mlir::detail::Parser
// (found by the ir fuzz target, docs/reliability.md "Findings"). Kiln's IR
// nests a handful of levels, so every entry point that parses IR text
// (kiln-opt, the ir fuzz target) refuses deeper nesting before MLIR sees it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECTS_KILN_IR_PARSELIMITS_H
#define KILN_DIALECTS_KILN_IR_PARSELIMITS_H

#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <cstdint>
#include <optional>

namespace mlir::kiln {

/// Deepest bracket nesting accepted in IR text.
constexpr int64_t kMaxIrNesting = 256;

/// Scans MLIR text for bracket nesting ((, [, {, <) deeper than `maxDepth`,
/// skipping string literals (with backslash escapes) and `//` comments.
/// Returns the byte offset of the first bracket past the limit, or
/// std::nullopt when the text is within it. Linear time, no allocation.
inline std::optional<size_t> findExcessiveNesting(llvm::StringRef text,
                                                  int64_t maxDepth =
                                                      kMaxIrNesting) {
  int64_t depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
      continue;
    }
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      i = std::min(text.find('\n', i), text.size());
      continue;
    }
    if (c == '(' || c == '[' || c == '{' || c == '<') {
      if (++depth > maxDepth)
        return i;
    } else if ((c == ')' || c == ']' || c == '}' || c == '>') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

} // namespace mlir::kiln

#endif // KILN_DIALECTS_KILN_IR_PARSELIMITS_H

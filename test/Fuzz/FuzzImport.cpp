//===- FuzzImport.cpp - Helpers of the importer fuzz targets --------------===//

#include "FuzzImport.h"

#include "codegen/Artifact/TokenizerWriter.h"
#include "dialects/Kiln/Import/Prequantized.h"
#include "tokenizer/Tokenizer.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace mlir::kiln;

namespace kiln::fuzz {

/// Elements decoded per input at most, and per tensor: a larger tensor is
/// decoded for its first rows only (every code path of a format is reached
/// within a few blocks; decoding whole tensors made the importer targets
/// spend most of their time in the decoders).
static constexpr uint64_t kMaxElements = uint64_t(1) << 16;
static constexpr uint64_t kMaxTensorElements = uint64_t(1) << 13;

static uint64_t elementsOf(const TensorSource &s) {
  uint64_t n = 1;
  for (int64_t d : s.shape) {
    if (d < 0 || (d != 0 && n > kMaxElements / uint64_t(d)))
      return kMaxElements + 1;
    n *= uint64_t(d);
  }
  return n;
}

/// `w` cut to its first rows so that it has at most kMaxTensorElements
/// elements, when it is a 2-D tensor whose transforms (repacks only) allow
/// that; otherwise `w` unchanged.
static WeightDesc firstRows(const WeightDesc &w) {
  const TensorSource &s = w.source;
  if (s.shape.size() != 2 || s.shape[0] <= 1 || s.shape[1] <= 0 ||
      uint64_t(s.shape[1]) > kMaxTensorElements ||
      s.bytes % uint64_t(s.shape[0]) != 0)
    return w;
  int64_t rows = std::max<int64_t>(
      1, int64_t(kMaxTensorElements / uint64_t(s.shape[1])));
  if (rows >= s.shape[0])
    return w;
  for (const WeightTransform &t : w.transforms)
    if (t.kind != WeightTransform::Kind::Repack || t.rows != s.shape[0])
      return w;
  WeightDesc cut = w;
  cut.source.bytes = s.bytes / uint64_t(s.shape[0]) * uint64_t(rows);
  cut.source.shape[0] = rows;
  for (WeightTransform &t : cut.transforms)
    t.rows = rows;
  return cut;
}

void materializeWeights(const ModelDesc &model) {
  uint64_t budget = kMaxElements;
  std::vector<float> buf;
  std::vector<char> packed;
  auto decode = [&](const WeightDesc &whole) {
    WeightDesc w = firstRows(whole);
    uint64_t n = elementsOf(w.source);
    if (n > budget)
      return;
    budget -= n;
    if (repackStep(w)) {
      llvm::consumeError(materializeRepacked(w, packed));
      return;
    }
    buf.assign(n, 0.0f);
    llvm::consumeError(materializeWeight(w, buf));
  };
  for (const WeightDesc &w : model.weights) {
    if (!w.quantized) {
      decode(w);
      continue;
    }
    for (const WeightDesc &part : w.quantized->parts)
      decode(part);
  }
}

void checkRuntimeAccepts(const TokenizerDesc &tok) {
  static const bool strict = [] {
    const char *s = std::getenv("KILN_FUZZ_STRICT");
    return s && std::strcmp(s, "1") == 0;
  }();
  if (!strict)
    return;
  llvm::Expected<llvm::json::Value> doc = tokenizerToJson(tok);
  if (!doc) {
    std::fprintf(stderr, "imported tokenizer cannot be written: %s\n",
                 llvm::toString(doc.takeError()).c_str());
    std::abort();
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  os << *doc;
  os.flush();
  kiln::rt::Tokenizer rt;
  kiln::rt::TokenizerStatus st =
      kiln::rt::Tokenizer::parse(text, "<fuzz>", rt);
  if (!st.ok) {
    std::fprintf(stderr,
                 "the importer accepted a tokenizer the runtime refuses: %s\n",
                 st.message.c_str());
    std::abort();
  }
}

} // namespace kiln::fuzz

//===- FuzzImport.cpp - Helpers of the importer fuzz targets --------------===//

#include "FuzzImport.h"

#include "codegen/Artifact/TokenizerWriter.h"
#include "dialects/Kiln/Import/Prequantized.h"
#include "tokenizer/Tokenizer.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace mlir::kiln;

namespace kiln::fuzz {

/// Elements decoded per input at most (keeps executions fast).
static constexpr uint64_t kMaxElements = uint64_t(1) << 18;

static uint64_t elementsOf(const TensorSource &s) {
  uint64_t n = 1;
  for (int64_t d : s.shape) {
    if (d < 0 || (d != 0 && n > kMaxElements / uint64_t(d)))
      return kMaxElements + 1;
    n *= uint64_t(d);
  }
  return n;
}

void materializeWeights(const ModelDesc &model) {
  uint64_t budget = kMaxElements;
  std::vector<float> buf;
  std::vector<char> packed;
  auto decode = [&](const WeightDesc &w) {
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

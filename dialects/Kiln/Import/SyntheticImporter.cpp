//===- SyntheticImporter.cpp - Synthetic model shapes ---------------------===//
//
// `synthetic:<shape>` models have real Llama shapes but no file: every weight
// is StorageType::Synthetic with its own seed, and values are generated only
// by materializeWeight(). Import is O(number of tensors).
//
//===----------------------------------------------------------------------===//

#include "dialects/Kiln/Import/ImportUtils.h"
#include "dialects/Kiln/Import/Importers.h"

#include "llvm/ADT/StringExtras.h"

using namespace llvm;
using namespace mlir::kiln::detail;

namespace mlir::kiln {

namespace {
struct SyntheticShape {
  StringLiteral name;
  int64_t dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabSize, maxSeqLen;
  float rmsNormEps;
  bool tied;
};
} // namespace

static constexpr SyntheticShape kShapes[] = {
    // Touvron et al. 2023, Llama 2, table 1 / the HF configs.
    {"llama-2-7b", 4096, 11008, 32, 32, 32, 32000, 4096, 1e-5f, false},
    {"llama-2-13b", 5120, 13824, 40, 40, 40, 32000, 4096, 1e-5f, false},
    // Llama 2 70B: 64 heads, 8 KV heads (GQA).
    {"llama-2-70b", 8192, 28672, 80, 64, 8, 32000, 4096, 1e-5f, false},
    // A Llama-shaped 175B (GPT-3 175B's dim, layers and heads, Brown et al.
    // 2020, table 2.1, with a SwiGLU FFN of 8/3 dim): ~174B parameters, the
    // seed's two-node example (kiln-plan, docs/planning.md).
    {"llama-175b", 12288, 32768, 96, 96, 96, 32000, 2048, 1e-5f, false},
    // llama2.c stories110M (shared classifier).
    {"llama-110m", 768, 2048, 12, 12, 12, 32000, 1024, 1e-5f, true},
    // llama2.c stories260K, as in shared/models/stories260K.
    {"stories260k", 64, 172, 5, 8, 4, 512, 512, 1e-5f, true},
};

/// FNV-1a 64 of `s`: a platform-independent per-tensor seed.
static uint64_t fnv1a(StringRef s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char ch : s) {
    h ^= static_cast<uint8_t>(ch);
    h *= 0x100000001b3ull;
  }
  return h;
}

Expected<ModelDesc> importSynthetic(StringRef shape) {
  const SyntheticShape *found = nullptr;
  for (const SyntheticShape &s : kShapes)
    if (shape.equals_insensitive(s.name))
      found = &s;
  if (!found) {
    std::string known;
    for (const SyntheticShape &s : kShapes)
      known += (known.empty() ? "" : ", ") + s.name.str();
    return makeError("synthetic:" + shape + ": unknown synthetic shape '" +
                     shape + "' (expected one of " + known + ")");
  }
  ModelDesc model;
  LlamaConfig &c = model.config;
  c.name = found->name.str();
  c.sourceFormat = "synthetic";
  c.sourcePath = ("synthetic:" + found->name).str();
  c.dim = found->dim;
  c.hiddenDim = found->hiddenDim;
  c.nLayers = found->nLayers;
  c.nHeads = found->nHeads;
  c.nKvHeads = found->nKvHeads;
  c.headDim = found->dim / found->nHeads;
  c.vocabSize = found->vocabSize;
  c.maxSeqLen = found->maxSeqLen;
  c.rmsNormEps = found->rmsNormEps;
  c.ropeTheta = 10000.0f;
  c.tiedEmbeddings = found->tied;
  if (Error e = checkConfig(c, c.sourcePath))
    return std::move(e);

  std::vector<CanonicalWeight> canon = canonicalWeights(c);
  model.weights.reserve(canon.size());
  for (const CanonicalWeight &cw : canon) {
    WeightDesc w;
    w.name = cw.name;
    if (cw.name == "output" && c.tiedEmbeddings) {
      w.source = model.weights.front().source;
      model.weights.push_back(std::move(w));
      continue;
    }
    TensorSource &s = w.source;
    s.tensor = cw.name;
    s.storage = StorageType::Synthetic;
    s.shape = cw.shape;
    s.seed = fnv1a(c.name + "/" + cw.name);
    bool isNorm = cw.shape.size() == 1;
    s.scale = isNorm ? 0.0f : 0.02f;
    s.center = isNorm ? 1.0f : 0.0f;
    model.weights.push_back(std::move(w));
  }
  model.tokenizer = makeSyntheticTokenizer(c.vocabSize);
  return model;
}

} // namespace mlir::kiln

//===- ModelDesc.cpp - Model description and import dispatch -------------===//

#include "dialects/Kiln/Import/ModelDesc.h"

#include "dialects/Kiln/Import/ImportUtils.h"
#include "dialects/Kiln/Import/Importers.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

using namespace llvm;
using namespace mlir::kiln::detail;

namespace mlir::kiln {

StringRef stringifyStorageType(StorageType t) {
  switch (t) {
  case StorageType::F32:
    return "f32";
  case StorageType::F16:
    return "f16";
  case StorageType::BF16:
    return "bf16";
  case StorageType::Q8_0:
    return "q8_0";
  case StorageType::Synthetic:
    return "synthetic";
  }
  return "unknown";
}

const WeightDesc *ModelDesc::lookup(StringRef name) const {
  for (const WeightDesc &w : weights)
    if (w.name == name)
      return &w;
  return nullptr;
}

Expected<ModelDesc> importModel(StringRef spec, StringRef tokenizer) {
  if (spec.consume_front("synthetic:"))
    return importSynthetic(spec);
  if (spec.empty())
    return makeError("empty model path (expected a llama2.c .bin, a .gguf "
                     "file, a Hugging Face directory or synthetic:<shape>)");
  if (sys::fs::is_directory(spec))
    return importHuggingFace(spec, tokenizer);
  if (!sys::fs::exists(spec))
    return fileError(spec, "no such file or directory (expected a llama2.c "
                           ".bin, a .gguf file, a Hugging Face directory or "
                           "synthetic:<shape>)");
  // Sniff the GGUF magic so renamed files still work.
  char magic[4] = {0, 0, 0, 0};
  Expected<uint64_t> size = getFileSize(spec);
  if (!size)
    return size.takeError();
  if (*size >= 4)
    if (Error e = readFileRange(spec, 0, magic, "magic"))
      return std::move(e);
  if (StringRef(magic, 4) == "GGUF" ||
      sys::path::extension(spec).equals_insensitive(".gguf"))
    return importGguf(spec, tokenizer);
  return importLlama2c(spec, tokenizer);
}

} // namespace mlir::kiln

std::vector<mlir::kiln::CanonicalWeight>
mlir::kiln::canonicalWeights(const LlamaConfig &c) {
  std::vector<CanonicalWeight> ws;
  int64_t qDim = c.nHeads * c.headDim;
  int64_t kvDim = c.nKvHeads * c.headDim;
  ws.push_back({"tok_embeddings", {c.vocabSize, c.dim}});
  for (int64_t i = 0; i < c.nLayers; ++i) {
    std::string p = "layers." + std::to_string(i) + ".";
    ws.push_back({p + "attention_norm", {c.dim}});
    ws.push_back({p + "wq", {qDim, c.dim}});
    ws.push_back({p + "wk", {kvDim, c.dim}});
    ws.push_back({p + "wv", {kvDim, c.dim}});
    ws.push_back({p + "wo", {c.dim, qDim}});
    ws.push_back({p + "ffn_norm", {c.dim}});
    ws.push_back({p + "w1", {c.hiddenDim, c.dim}});
    ws.push_back({p + "w2", {c.dim, c.hiddenDim}});
    ws.push_back({p + "w3", {c.hiddenDim, c.dim}});
  }
  ws.push_back({"norm", {c.dim}});
  ws.push_back({"output", {c.vocabSize, c.dim}});
  return ws;
}

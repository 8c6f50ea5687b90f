//===- ModelDesc.cpp - Model description and import dispatch -------------===//

#include "dialects/Kiln/Import/ModelDesc.h"

#include "kiln_rt/block_formats.h"

#include "dialects/Kiln/Import/ImportUtils.h"
#include "dialects/Kiln/Import/Importers.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cstdlib>

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
  case StorageType::Q4_0:
    return "q4_0";
  case StorageType::Q4_1:
    return "q4_1";
  case StorageType::Q5_0:
    return "q5_0";
  case StorageType::Q5_1:
    return "q5_1";
  case StorageType::Q2_K:
    return "q2_k";
  case StorageType::Q3_K:
    return "q3_k";
  case StorageType::Q4_K:
    return "q4_k";
  case StorageType::Q5_K:
    return "q5_k";
  case StorageType::Q6_K:
    return "q6_k";
  case StorageType::I32:
    return "i32";
  case StorageType::Synthetic:
    return "synthetic";
  }
  return "unknown";
}

static constexpr StorageType kAllStorageTypes[] = {
    StorageType::F32,  StorageType::F16,  StorageType::BF16, StorageType::Q8_0,
    StorageType::Q4_0, StorageType::Q4_1, StorageType::Q5_0, StorageType::Q5_1,
    StorageType::Q2_K, StorageType::Q3_K, StorageType::Q4_K, StorageType::Q5_K,
    StorageType::Q6_K, StorageType::I32,  StorageType::Synthetic};

std::optional<StorageType> parseStorageType(StringRef name) {
  for (StorageType t : kAllStorageTypes)
    if (stringifyStorageType(t) == name)
      return t;
  return std::nullopt;
}

std::optional<int64_t> blockFormatOf(StorageType t) {
  switch (t) {
  case StorageType::Q4_0: return KILN_BLOCK_Q4_0;
  case StorageType::Q4_1: return KILN_BLOCK_Q4_1;
  case StorageType::Q5_0: return KILN_BLOCK_Q5_0;
  case StorageType::Q5_1: return KILN_BLOCK_Q5_1;
  case StorageType::Q8_0: return KILN_BLOCK_Q8_0;
  case StorageType::Q2_K: return KILN_BLOCK_Q2_K;
  case StorageType::Q3_K: return KILN_BLOCK_Q3_K;
  case StorageType::Q4_K: return KILN_BLOCK_Q4_K;
  case StorageType::Q5_K: return KILN_BLOCK_Q5_K;
  case StorageType::Q6_K: return KILN_BLOCK_Q6_K;
  default: return std::nullopt;
  }
}

std::optional<StorageType> storageOfGgmlType(uint32_t ggmlType) {
  switch (ggmlType) {
  case 0: return StorageType::F32;
  case 1: return StorageType::F16;
  case 30: return StorageType::BF16;
  default:
    break;
  }
  for (StorageType t : kAllStorageTypes)
    if (std::optional<int64_t> f = blockFormatOf(t); f && *f == int64_t(ggmlType))
      return t;
  return std::nullopt;
}

const WeightDesc *ModelDesc::lookup(StringRef name) const {
  for (const WeightDesc &w : weights)
    if (w.name == name)
      return &w;
  return nullptr;
}

/// safetensors: a little-endian uint64 header length N that fits in the
/// file, then a JSON object. A llama2.c header read this way gives
/// dim + hidden_dim * 2^32, far beyond any file size.
static bool looksLikeSafetensors(StringRef head, uint64_t fileSize) {
  if (head.size() < 9 || head[8] != '{')
    return false;
  uint64_t n = support::endian::read64le(head.data());
  return n >= 2 && n <= fileSize - 8;
}

/// A JSON object: '{' first, after an optional UTF-8 byte-order mark and,
/// when `allowWhitespace`, blanks.
static bool looksLikeJson(StringRef head, bool allowWhitespace) {
  head.consume_front("\xef\xbb\xbf");
  if (allowWhitespace)
    head = head.ltrim(" \t\r\n");
  return head.starts_with("{");
}

/// Whether the 7 x int32 llama2.c header in `head` describes a model at all
/// (positive sizes within the limits checkConfig() enforces). Used only to
/// tell other files apart from llama2.c checkpoints without a .bin name.
static bool plausibleLlama2cHeader(StringRef head) {
  if (head.size() < 28)
    return false;
  int32_t h[7];
  for (int i = 0; i < 7; ++i)
    h[i] = static_cast<int32_t>(support::endian::read32le(head.data() + 4 * i));
  auto within = [](int64_t v, int log2) {
    return v > 0 && v <= (int64_t(1) << log2);
  };
  int64_t vocab = h[5] == INT32_MIN ? 0 : std::abs(int64_t(h[5]));
  return within(h[0], 24) && within(h[1], 24) && within(h[2], 12) &&
         within(h[3], 16) && within(h[4], 16) && h[4] <= h[3] &&
         within(vocab, 26) && within(h[6], 26);
}

static Expected<ModelDesc> importModelImpl(StringRef spec,
                                           StringRef tokenizer);

Expected<ModelDesc> importModel(StringRef spec, StringRef tokenizer) {
  Expected<ModelDesc> model = importModelImpl(spec, tokenizer);
  if (model) {
    // The tokenizer's notes (e.g. a pre-tokenizer chosen by default), named
    // by the file it came from, join the model's.
    for (std::string &note : model->tokenizer.notes)
      model->notes.push_back(
          (tokenizer.empty() ? spec : tokenizer).str() + ": " + note);
    model->tokenizer.notes.clear();
  }
  return model;
}

static Expected<ModelDesc> importModelImpl(StringRef spec,
                                           StringRef tokenizer) {
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
  // Sniff the contents so renamed files still work and files of the wrong
  // kind get a message about what they are, not a llama2.c header error.
  Expected<uint64_t> size = getFileSize(spec, "a checkpoint file");
  if (!size)
    return size.takeError();
  char head[28] = {};
  size_t headSize = static_cast<size_t>(std::min<uint64_t>(*size, 28));
  if (Error e = readFileRange(spec, 0, MutableArrayRef<char>(head, headSize),
                              "file header"))
    return std::move(e);
  StringRef bytes(head, headSize);
  StringRef ext = sys::path::extension(spec);
  bool binExt = ext.equals_insensitive(".bin");
  if (bytes.starts_with("GGUF"))
    return importGguf(spec, tokenizer);
  if (looksLikeSafetensors(bytes, *size))
    return fileError(spec, "this is a safetensors file; pass the Hugging Face "
                           "directory that holds it and its config.json");
  if (looksLikeJson(bytes, /*allowWhitespace=*/!binExt))
    return fileError(spec, "this looks like a JSON file, not a checkpoint "
                           "(expected a llama2.c .bin, a GGUF file, a Hugging "
                           "Face directory or synthetic:<shape>)");
  if (ext.equals_insensitive(".gguf"))
    return importGguf(spec, tokenizer);
  if (!binExt && !plausibleLlama2cHeader(bytes))
    return fileError(spec, "unrecognised checkpoint format (expected a "
                           "llama2.c .bin, a GGUF file, a Hugging Face "
                           "directory or synthetic:<shape>)");
  return importLlama2c(spec, tokenizer);
}

} // namespace mlir::kiln

std::vector<mlir::kiln::CanonicalWeight>
mlir::kiln::canonicalWeights(const LlamaConfig &c) {
  std::vector<CanonicalWeight> ws;
  int64_t qDim = c.nHeads * c.headDim;
  int64_t kvDim = c.nKvHeads * c.headDim;
  ws.push_back({"tok_embeddings", {c.vocabSize, c.dim}});
  if (c.ropeFreqFactors)
    ws.push_back({"rope_freqs", {c.headDim / 2}});
  for (int64_t i = 0; i < c.nLayers; ++i) {
    std::string p = "layers." + std::to_string(i) + ".";
    ws.push_back({p + "attention_norm", {c.dim}});
    ws.push_back({p + "wq", {qDim, c.dim}});
    ws.push_back({p + "wk", {kvDim, c.dim}});
    ws.push_back({p + "wv", {kvDim, c.dim}});
    if (c.qkvBias) {
      ws.push_back({p + "bq", {qDim}});
      ws.push_back({p + "bk", {kvDim}});
      ws.push_back({p + "bv", {kvDim}});
    }
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

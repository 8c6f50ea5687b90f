//===- Llama2cImporter.cpp - llama2.c checkpoint importer -----------------===//
//
// llama2.c legacy (version 0) checkpoints, as written by export.py
// `legacy_export` and read by run.c: a header of 7 little-endian int32
// (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a
// negative vocab_size means the classifier is not shared), then float32
// weights, each matrix row-major [out][in]:
//   token_embedding [vocab][dim], rms_att [L][dim], wq [L][dim][dim],
//   wk [L][kv_dim][dim], wv [L][kv_dim][dim], wo [L][dim][dim],
//   rms_ffn [L][dim], w1 [L][hidden][dim], w2 [L][dim][hidden],
//   w3 [L][hidden][dim], rms_final [dim], freq_cis_real [seq][hs/2],
//   freq_cis_imag [seq][hs/2], then wcls [vocab][dim] when not shared.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kiln/Import/ImportUtils.h"
#include "dialects/Kiln/Import/Importers.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"

using namespace llvm;
using namespace mlir::kiln::detail;

namespace mlir::kiln {

namespace {
/// Lays out consecutive float32 tensors, checking for overflow.
class Layout {
public:
  explicit Layout(uint64_t start) : cursor(start) {}

  /// Reserves `count` tensors of `shape`; returns the offset of the first.
  uint64_t add(ArrayRef<int64_t> shape, uint64_t count = 1) {
    uint64_t numel = numElements(shape).value_or(0);
    uint64_t bytes;
    uint64_t start = cursor;
    if (mulOverflow(numel, 4, bytes) ||
        mulOverflow(bytes, count, bytes) ||
        addOverflow(cursor, bytes, cursor))
      overflow = true;
    return start;
  }

  uint64_t cursor;
  bool overflow = false;
};
} // namespace

/// True if the `n` bytes at offsets `a` and `b` of `path` are equal
/// (compared in chunks).
static Expected<bool> sameFileBytes(StringRef path, uint64_t a, uint64_t b,
                                    uint64_t n) {
  constexpr uint64_t kChunk = uint64_t(1) << 20;
  std::string x, y;
  for (uint64_t done = 0; done < n; done += kChunk) {
    uint64_t len = std::min(kChunk, n - done);
    x.resize(len);
    y.resize(len);
    if (Error e = readFileRange(path, a + done, x, "token_embedding_table"))
      return std::move(e);
    if (Error e = readFileRange(path, b + done, y, "wcls"))
      return std::move(e);
    if (x != y)
      return false;
  }
  return true;
}

/// Finds the tokenizer beside a llama2.c checkpoint: tok<vocab>.bin, then
/// tokenizer.bin, then any other tok*.bin with `vocabSize` pieces.
static Expected<TokenizerDesc> findLlama2cTokenizer(StringRef modelPath,
                                                    int64_t vocabSize) {
  SmallString<256> dir = sys::path::parent_path(modelPath);
  if (dir.empty())
    dir = ".";
  std::vector<std::string> candidates;
  candidates.push_back(joinPath(dir, "tok" + std::to_string(vocabSize) + ".bin"));
  candidates.push_back(joinPath(dir, "tokenizer.bin"));
  std::vector<std::string> others;
  std::error_code ec;
  for (sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec)) {
    StringRef name = sys::path::filename(it->path());
    if (name.starts_with("tok") && name.ends_with(".bin"))
      others.push_back(it->path());
  }
  llvm::sort(others);
  candidates.insert(candidates.end(), others.begin(), others.end());

  std::string mismatches;
  StringMap<bool> seen;
  for (const std::string &path : candidates) {
    if (!seen.insert({path, true}).second || !sys::fs::is_regular_file(path))
      continue;
    if (sys::fs::equivalent(path, modelPath))
      continue;
    Expected<TokenizerDesc> tok = readLlama2cTokenizer(path);
    if (!tok) {
      // A candidate that is not a tokenizer at all is only a problem if no
      // other one fits.
      mismatches += "; " + toString(tok.takeError());
      continue;
    }
    if (static_cast<int64_t>(tok->pieces.size()) == vocabSize) {
      tok->file = path;
      return tok;
    }
    mismatches += "; " + path + " has " + std::to_string(tok->pieces.size()) +
                  " pieces";
  }
  if (mismatches.empty())
    return fileError(modelPath, "no tokenizer: expected a tok*.bin or "
                                "tokenizer.bin beside the checkpoint, or pass "
                                "--tokenizer FILE");
  return fileError(modelPath, "no tokenizer beside the checkpoint has " +
                                  Twine(vocabSize) + " pieces (vocab_size)" +
                                  mismatches + "; pass --tokenizer FILE");
}

Expected<ModelDesc> importLlama2c(StringRef path, StringRef tokenizer) {
  Expected<uint64_t> fileSize = getFileSize(path, "a llama2.c checkpoint");
  if (!fileSize)
    return fileSize.takeError();
  if (*fileSize < 28)
    return fileError(path, "file is " + Twine(*fileSize) +
                               " bytes, too small for the 28-byte llama2.c "
                               "header");
  char header[28];
  if (Error e = readFileRange(path, 0, header, "llama2.c header"))
    return std::move(e);
  ByteReader r(path, StringRef(header, 28));
  int32_t h[7];
  static const char *const names[7] = {"dim",        "hidden_dim", "n_layers",
                                       "n_heads",    "n_kv_heads", "vocab_size",
                                       "seq_len"};
  for (int i = 0; i < 7; ++i)
    if (Error e = r.readI32(h[i], names[i]))
      return std::move(e);

  ModelDesc model;
  LlamaConfig &c = model.config;
  c.name = sys::path::stem(path).str();
  c.sourceFormat = "llama2c";
  c.sourcePath = path.str();
  c.dim = h[0];
  c.hiddenDim = h[1];
  c.nLayers = h[2];
  c.nHeads = h[3];
  c.nKvHeads = h[4];
  c.tiedEmbeddings = h[5] > 0;
  c.vocabSize = h[5] == INT32_MIN ? 0 : std::abs(h[5]);
  c.maxSeqLen = h[6];
  c.headDim = c.nHeads > 0 ? c.dim / c.nHeads : 0;
  c.rmsNormEps = 1e-5f;
  c.ropeTheta = 10000.0f;

  std::string headerText;
  {
    raw_string_ostream os(headerText);
    os << "dim=" << h[0] << ", hidden_dim=" << h[1] << ", n_layers=" << h[2]
       << ", n_heads=" << h[3] << ", n_kv_heads=" << h[4]
       << ", vocab_size=" << h[5] << ", seq_len=" << h[6];
  }
  // Header fields one at a time, each error naming the field, its offset and
  // value once.
  auto headerError = [&](int field, const Twine &msg) {
    return fileError(path, "llama2.c header: " + Twine(names[field]) + " is " +
                               Twine(h[field]) + " at offset " +
                               Twine(4 * field) + ", " + msg);
  };
  for (int i : {0, 1, 2, 3, 4, 6})
    if (h[i] <= 0)
      return headerError(i, "expected a positive value");
  if (h[5] == 0)
    return headerError(5, "expected a non-zero value (negative means the "
                          "classifier is not shared with the embedding)");
  if (h[5] == INT32_MIN)
    return headerError(5, "which cannot be a vocabulary size: a negative "
                          "vocab_size means an unshared classifier of "
                          "-vocab_size rows, and 2147483648 does not fit in "
                          "a 32-bit int");
  // Shared checks; their messages start with what is given as the file, so
  // name the header there.
  std::string where = (path + ": llama2.c header").str();
  if (Error e = checkLimits(c, where))
    return std::move(e);
  if (c.dim % c.nHeads != 0)
    return fileError(path, "llama2.c header: dim " + Twine(c.dim) +
                               " is not a multiple of n_heads " +
                               Twine(c.nHeads));
  if (Error e = checkConfig(c, where))
    return std::move(e);

  // Lay out the tensors.
  int64_t dim = c.dim, hidden = c.hiddenDim, layers = c.nLayers;
  int64_t kvDim = c.nKvHeads * c.headDim;
  Layout l(28);
  uint64_t tokEmb = l.add({c.vocabSize, dim});
  uint64_t rmsAtt = l.add({dim}, layers);
  uint64_t wq = l.add({dim, dim}, layers);
  uint64_t wk = l.add({kvDim, dim}, layers);
  uint64_t wv = l.add({kvDim, dim}, layers);
  uint64_t wo = l.add({dim, dim}, layers);
  uint64_t rmsFfn = l.add({dim}, layers);
  uint64_t w1 = l.add({hidden, dim}, layers);
  uint64_t w2 = l.add({dim, hidden}, layers);
  uint64_t w3 = l.add({hidden, dim}, layers);
  uint64_t rmsFinal = l.add({dim});
  l.add({c.maxSeqLen, c.headDim / 2}, 2); // freq_cis_real, freq_cis_imag
  uint64_t wcls = c.tiedEmbeddings ? tokEmb : l.add({c.vocabSize, dim});
  if (l.overflow)
    return fileError(path, "header (" + headerText +
                               ") implies a size that overflows 64 bits");
  // Tied embeddings, resolved the safe way: an unshared classifier
  // (negative vocab_size) that the file does not hold is an error, never a
  // silent tie; a shared one (positive vocab_size) followed by a whole
  // classifier that differs from the embedding uses that classifier.
  uint64_t wclsBytes = *numElements({c.vocabSize, dim}) * 4;
  if (!c.tiedEmbeddings && l.cursor - wclsBytes == *fileSize)
    return fileError(path,
                     "llama2.c header: vocab_size is " + Twine(h[5]) +
                         " at offset 20, which means an unshared classifier, "
                         "but the file ends at offset " + Twine(*fileSize) +
                         " where that classifier (missing tensor 'wcls', " +
                         Twine(wclsBytes) +
                         " bytes) would begin; a shared classifier is "
                         "written as a positive vocab_size");
  if (c.tiedEmbeddings && *fileSize > l.cursor &&
      *fileSize - l.cursor == wclsBytes) {
    uint64_t extra = l.add({c.vocabSize, dim});
    Expected<bool> same = sameFileBytes(path, tokEmb, extra, wclsBytes);
    if (!same)
      return same.takeError();
    if (!*same) {
      c.tiedEmbeddings = false;
      wcls = extra;
      model.notes.push_back(
          (path + ": the llama2.c header has a positive vocab_size (" +
           Twine(h[5]) +
           ", a shared classifier) but the file also holds a classifier "
           "'wcls' that differs from the embedding; using the stored wcls")
              .str());
    }
  }
  if (l.cursor != *fileSize)
    return fileError(path, "file is " + Twine(*fileSize) +
                               " bytes but the header (" + headerText +
                               ") implies " + Twine(l.cursor));

  auto make = [&](StringRef canonical, StringRef tensor, uint64_t base,
                  ArrayRef<int64_t> shape, int64_t layer) {
    WeightDesc w;
    w.name = canonical.str();
    w.source.file = path.str();
    w.source.tensor = layer < 0 ? tensor.str()
                                : (tensor + "[" + Twine(layer) + "]").str();
    w.source.storage = StorageType::F32;
    w.source.shape.assign(shape.begin(), shape.end());
    w.source.bytes = *numElements(shape) * 4;
    w.source.offset = base + (layer < 0 ? 0 : uint64_t(layer) * w.source.bytes);
    model.weights.push_back(std::move(w));
  };

  make("tok_embeddings", "token_embedding_table", tokEmb, {c.vocabSize, dim},
       -1);
  for (int64_t i = 0; i < layers; ++i) {
    std::string p = "layers." + std::to_string(i) + ".";
    make(p + "attention_norm", "rms_att_weight", rmsAtt, {dim}, i);
    make(p + "wq", "wq", wq, {dim, dim}, i);
    make(p + "wk", "wk", wk, {kvDim, dim}, i);
    make(p + "wv", "wv", wv, {kvDim, dim}, i);
    make(p + "wo", "wo", wo, {dim, dim}, i);
    make(p + "ffn_norm", "rms_ffn_weight", rmsFfn, {dim}, i);
    make(p + "w1", "w1", w1, {hidden, dim}, i);
    make(p + "w2", "w2", w2, {dim, hidden}, i);
    make(p + "w3", "w3", w3, {hidden, dim}, i);
  }
  make("norm", "rms_final_weight", rmsFinal, {dim}, -1);
  make("output", c.tiedEmbeddings ? "token_embedding_table" : "wcls", wcls,
       {c.vocabSize, dim}, -1);

  // Tokenizer: it must have exactly vocab_size pieces.
  Expected<TokenizerDesc> tok = tokenizer.empty()
                                    ? findLlama2cTokenizer(path, c.vocabSize)
                                    : readTokenizer(tokenizer);
  if (!tok)
    return tok.takeError();
  if (!tokenizer.empty())
    if (Error e = fitTokenizer(*tok, tokenizer, c.vocabSize,
                               /*allowPadding=*/false))
      return std::move(e);
  model.tokenizer = std::move(*tok);
  return model;
}

} // namespace mlir::kiln

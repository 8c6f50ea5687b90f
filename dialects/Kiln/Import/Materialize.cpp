//===- Materialize.cpp - Decode one weight to float32 ---------------------===//
//
// materializeWeight() reads only the bytes of one tensor (in bounded chunks,
// so memory stays at the output buffer plus a few MiB), decodes F32 / F16 /
// BF16 / the GGML block formats (kiln_rt/block_formats.h) to float32, or
// generates synthetic values, then applies
// the pending transforms in place.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kiln/Import/ImportUtils.h"
#include "dialects/Kiln/Import/ModelDesc.h"

#include "kiln_rt/block_formats.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/ADT/bit.h"

#include <cstring>

using namespace llvm;
using namespace mlir::kiln::detail;

namespace mlir::kiln {

/// splitmix64 (Steele et al. 2014): a counter-based generator, so element i
/// of a tensor is a pure function of (seed, i).
static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static void generateSynthetic(const TensorSource &s, MutableArrayRef<float> out) {
  if (s.scale == 0.0f) {
    std::fill(out.begin(), out.end(), s.center);
    return;
  }
  uint64_t base = splitmix64(s.seed);
  for (size_t i = 0, e = out.size(); i < e; ++i) {
    // 24 random bits -> an exact float in [-1, 1).
    int32_t r = static_cast<int32_t>(splitmix64(base + i) >> 40) - (1 << 23);
    float u = static_cast<float>(r) * 0x1p-23f;
    float scaled = u * s.scale;
    out[i] = scaled + s.center;
  }
}

namespace {
/// Reads a file range in chunks.
class ChunkedReader {
public:
  ChunkedReader(StringRef file, sys::fs::file_t fd, uint64_t offset)
      : file(file), fd(fd), offset(offset) {}

  Error read(MutableArrayRef<char> buf, StringRef tensor) {
    uint64_t done = 0;
    while (done < buf.size()) {
      Expected<size_t> n =
          sys::fs::readNativeFileSlice(fd, buf.slice(done), offset + done);
      if (!n)
        return fileError(file, "tensor '" + tensor + "': read error at offset " +
                                   Twine(offset + done) + ": " +
                                   toString(n.takeError()));
      if (*n == 0)
        return fileError(file, "tensor '" + tensor +
                                   "': unexpected end of file at offset " +
                                   Twine(offset + done) +
                                   " (the file changed or is truncated)");
      done += *n;
    }
    offset += buf.size();
    return Error::success();
  }

private:
  StringRef file;
  sys::fs::file_t fd;
  uint64_t offset;
};
} // namespace

static Error decodeFromFile(const TensorSource &s, MutableArrayRef<float> out) {
  std::optional<uint64_t> bytes = storageBytes(s.storage, out.size());
  if (!bytes || *bytes != s.bytes)
    return fileError(s.file, "tensor '" + s.tensor + "' at offset " +
                                 Twine(s.offset) + ": " + Twine(s.bytes) +
                                 " stored bytes do not hold " +
                                 Twine(out.size()) + " " +
                                 stringifyStorageType(s.storage) +
                                 " elements");
  uint64_t fileSize = 0;
  Expected<int> fd = openRegularFile(s.file, "a checkpoint file", UINT64_MAX,
                                     fileSize);
  if (!fd)
    return fileError(s.file, "cannot open to read tensor '" + s.tensor +
                                 "': " + toString(fd.takeError()));
  scope_exit closeOnExit([&] { sys::fs::closeFile(*fd); });
  ChunkedReader reader(s.file, *fd, s.offset);

  if (s.storage == StorageType::F32) {
    MutableArrayRef<char> raw(reinterpret_cast<char *>(out.data()),
                              out.size() * sizeof(float));
    if (Error e = reader.read(raw, s.tensor))
      return e;
    if constexpr (!sys::IsLittleEndianHost)
      for (float &f : out) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        u = llvm::byteswap(u);
        std::memcpy(&f, &u, 4);
      }
    return Error::success();
  }

  // Chunked decode: F16/BF16 in 1M-element chunks, block formats in 2 MiB.
  constexpr size_t kChunkBytes = size_t(2) << 20;
  std::vector<char> buf;
  size_t produced = 0;
  if (s.storage == StorageType::F16 || s.storage == StorageType::BF16) {
    bool half = s.storage == StorageType::F16;
    while (produced < out.size()) {
      size_t n = std::min(out.size() - produced, kChunkBytes / 2);
      buf.resize(n * 2);
      if (Error e = reader.read(buf, s.tensor))
        return e;
      for (size_t i = 0; i < n; ++i) {
        uint16_t v = support::endian::read16le(buf.data() + 2 * i);
        out[produced + i] = half ? halfToFloat(v) : bf16ToFloat(v);
      }
      produced += n;
    }
    return Error::success();
  }
  if (std::optional<int64_t> format = blockFormatOf(s.storage)) {
    // GGML blocks (kiln_rt/block_formats.h), about 2 MiB at a time.
    size_t blockBytes = size_t(kiln_block_bytes(*format));
    size_t blockElems = size_t(kiln_block_elems(*format));
    size_t blocksPerChunk = kChunkBytes / blockBytes;
    size_t totalBlocks = out.size() / blockElems;
    size_t block = 0;
    while (block < totalBlocks) {
      size_t nb = std::min(totalBlocks - block, blocksPerChunk);
      buf.resize(nb * blockBytes);
      if (Error e = reader.read(buf, s.tensor))
        return e;
      for (size_t b = 0; b < nb; ++b)
        kiln_block_decode(*format,
                          reinterpret_cast<const uint8_t *>(buf.data()) +
                              b * blockBytes,
                          out.data() + (block + b) * blockElems);
      block += nb;
    }
    return Error::success();
  }
  return fileError(s.file, "tensor '" + s.tensor + "': storage " +
                               stringifyStorageType(s.storage) +
                               " cannot be read from a file");
}

/// Per head of `rows / heads` rows: adjacent-pair row 2i <- rotate-half row
/// i, row 2i+1 <- row i + hd/2 (inverse of HF's convert_llama_weights_to_hf
/// permute, same as llama.cpp's convert_hf_to_gguf permute).
static Error ropeHalfToAdjacent(const WeightDesc &w, int64_t heads,
                                ArrayRef<int64_t> shape,
                                MutableArrayRef<float> data) {
  // A vector (the bias of a projection) is a matrix of one column.
  if (shape.size() < 1 || shape.size() > 2 || heads <= 0 ||
      shape[0] % heads != 0 || (shape[0] / heads) % 2 != 0)
    return makeError("weight '" + w.name + "' (" + w.source.file + ", tensor '" +
                     w.source.tensor + "'): RopeHalfToAdjacent with " +
                     Twine(heads) + " heads does not fit shape " +
                     formatShape(shape));
  size_t headDim = shape[0] / heads;
  size_t cols = shape.size() == 2 ? shape[1] : 1;
  size_t half = headDim / 2;
  std::vector<float> tmp(headDim * cols);
  for (int64_t h = 0; h < heads; ++h) {
    float *head = data.data() + h * headDim * cols;
    std::memcpy(tmp.data(), head, tmp.size() * sizeof(float));
    for (size_t i = 0; i < half; ++i) {
      std::memcpy(head + (2 * i) * cols, tmp.data() + i * cols,
                  cols * sizeof(float));
      std::memcpy(head + (2 * i + 1) * cols, tmp.data() + (i + half) * cols,
                  cols * sizeof(float));
    }
  }
  return Error::success();
}

/// Multiplies rows (axis 0; the elements of a vector) or columns (axis 1)
/// of `data` by `t.factors`.
static Error applyScale(const WeightDesc &w, const WeightTransform &t,
                        ArrayRef<int64_t> shape, MutableArrayRef<float> data) {
  bool fits = (t.axis == 0 && !shape.empty() &&
               static_cast<int64_t>(t.factors.size()) == shape[0]) ||
              (t.axis == 1 && shape.size() == 2 &&
               static_cast<int64_t>(t.factors.size()) == shape[1]);
  if (!fits || shape.size() > 2)
    return makeError("weight '" + w.name + "': scale transform with " +
                     Twine(t.factors.size()) + " factors along axis " +
                     Twine(t.axis) + " does not fit shape " +
                     formatShape(shape));
  size_t rows = shape[0], cols = shape.size() == 2 ? shape[1] : 1;
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c)
      data[r * cols + c] *= t.factors[t.axis == 0 ? r : c];
  return Error::success();
}

std::vector<int64_t> floatShape(const WeightDesc &w) {
  std::vector<int64_t> shape(w.source.shape.begin(), w.source.shape.end());
  for (const WeightTransform &t : w.transforms)
    if (t.kind == WeightTransform::Kind::Slice && t.axis >= 0 &&
        t.axis < int64_t(shape.size()))
      shape[size_t(t.axis)] = t.size;
  return shape;
}

/// Keeps t.size rows (axis 0) or columns (axis 1) from t.offset of `data`
/// (shape `shape`, updated), in place.
static Error applySlice(const WeightDesc &w, const WeightTransform &t,
                        std::vector<int64_t> &shape, std::vector<float> &data) {
  if (shape.empty() || shape.size() > 2 || t.axis < 0 ||
      t.axis >= int64_t(shape.size()) || t.offset < 0 || t.size < 1 ||
      t.offset + t.size > shape[size_t(t.axis)])
    return makeError("weight '" + w.name + "': slice [" + Twine(t.offset) +
                     ", " + Twine(t.offset + t.size) + ") along axis " +
                     Twine(t.axis) + " does not fit shape " +
                     formatShape(shape));
  const size_t rows = size_t(shape[0]),
               cols = shape.size() == 2 ? size_t(shape[1]) : 1;
  if (t.axis == 0) {
    data.erase(data.begin(), data.begin() + size_t(t.offset) * cols);
    data.resize(size_t(t.size) * cols);
  } else {
    for (size_t r = 0; r < rows; ++r)
      std::memmove(data.data() + r * size_t(t.size),
                   data.data() + r * cols + size_t(t.offset),
                   size_t(t.size) * sizeof(float));
    data.resize(rows * size_t(t.size));
  }
  shape[size_t(t.axis)] = t.size;
  return Error::success();
}

Error materializeWeight(const WeightDesc &w, MutableArrayRef<float> out) {
  const TensorSource &s = w.source;
  std::vector<int64_t> finalShape = floatShape(w);
  std::optional<uint64_t> numel = numElements(finalShape);
  if (!numel || *numel != out.size())
    return makeError("weight '" + w.name + "': output buffer holds " +
                     Twine(out.size()) + " floats but the shape " +
                     formatShape(finalShape) + " needs " +
                     Twine(numel.value_or(0)));
  const bool sliced = llvm::any_of(w.transforms, [](const WeightTransform &t) {
    return t.kind == WeightTransform::Kind::Slice;
  });
  for (const WeightTransform &t : w.transforms)
    if (t.kind == WeightTransform::Kind::Repack)
      return makeError("weight '" + w.name + "' (" + s.file + ", tensor '" +
                       s.tensor +
                       "') is a repacked quantized part, not a "
                       "float tensor (materializeRepacked writes it)");
  // Unsliced weights are decoded straight into `out`; sliced ones into a
  // source-sized buffer first.
  std::vector<float> whole;
  std::vector<int64_t> shape(s.shape.begin(), s.shape.end());
  MutableArrayRef<float> data = out;
  if (sliced) {
    std::optional<uint64_t> sourceNumel = numElements(s.shape);
    if (!sourceNumel)
      return makeError("weight '" + w.name + "': invalid source shape " +
                       formatShape(s.shape));
    whole.resize(size_t(*sourceNumel));
    data = whole;
  }
  if (s.storage == StorageType::Synthetic) {
    generateSynthetic(s, data);
  } else if (Error e = decodeFromFile(s, data)) {
    return e;
  }
  for (const WeightTransform &t : w.transforms) {
    switch (t.kind) {
    case WeightTransform::Kind::RopeHalfToAdjacent:
      if (Error e = ropeHalfToAdjacent(w, t.heads, shape, data))
        return e;
      break;
    case WeightTransform::Kind::Scale:
      if (Error e = applyScale(w, t, shape, data))
        return e;
      break;
    case WeightTransform::Kind::Slice:
      if (Error e = applySlice(w, t, shape, whole))
        return e;
      data = whole;
      break;
    case WeightTransform::Kind::Quantize:
      break; // applied by the artifact writer to the f32 result
    case WeightTransform::Kind::Repack:
      break; // refused above
    }
  }
  if (sliced)
    std::copy(whole.begin(), whole.end(), out.begin());
  return Error::success();
}

} // namespace mlir::kiln

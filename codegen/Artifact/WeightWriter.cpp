//===- WeightWriter.cpp - weights.bin writer and file hashing -------------===//

#include "codegen/Artifact/WeightWriter.h"
#include "passes/Quantization/Calibration.h"
#include "passes/Quantization/QuantMath.h"

#include "dialects/Kiln/Import/Prequantized.h"
#include "runtime/include/kiln_rt/block_formats.h"
#include "runtime/src/sign/Signing.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <xxhash.h>

using namespace llvm;

namespace mlir::kiln {

static Error writerError(StringRef path, const Twine &msg) {
  return createStringError(inconvertibleErrorCode(), path + ": " + msg);
}

/// Identity of the data a weight materializes to.
static std::string sourceKey(const WeightDesc &w) {
  const TensorSource &s = w.source;
  std::string key;
  raw_string_ostream os(key);
  os << stringifyStorageType(s.storage) << '|' << s.file.size() << ':'
     << s.file << '|' << s.offset << '|' << s.bytes << '|';
  for (int64_t d : s.shape)
    os << d << ',';
  if (s.storage == StorageType::Synthetic) {
    uint32_t scale, center;
    std::memcpy(&scale, &s.scale, 4);
    std::memcpy(&center, &s.center, 4);
    os << '|' << s.seed << '|' << scale << '|' << center;
  }
  for (const WeightTransform &t : w.transforms) {
    os << "|t" << static_cast<int>(t.kind) << ':' << t.heads << ':' << t.bits
       << ':' << t.groupSize << ':' << static_cast<int>(t.part) << ':'
       << t.format << ':' << t.rows << ':' << t.cols;
    if (t.kind == WeightTransform::Kind::Quantize &&
        t.method == WeightTransform::QuantMethod::GPTQ)
      os << ":gptq:" << t.calibration.size() << ':' << t.calibration << ':'
         << t.hessian << ':' << t.actOrder << ':' << format("%a", t.damp);
    if (t.kind == WeightTransform::Kind::Slice)
      os << ":slice" << t.axis << ':' << t.offset << ':' << t.size;
    if (t.kind == WeightTransform::Kind::Scale) {
      os << ":scale" << t.axis << ':' << t.factors.size() << ':';
      for (float f : t.factors)
        os << format_hex_no_prefix(llvm::bit_cast<uint32_t>(f), 8);
    }
  }
  return key;
}

/// The recipe of `w` without its final Quantize step's `part`: the three
/// parts of one quantized weight share it (GPTQ runs once for all three).
static std::string quantizedKey(const WeightDesc &w) {
  WeightDesc copy = w;
  copy.transforms.back().part = WeightTransform::QuantPart::QWeight;
  return sourceKey(copy);
}

/// GPTQ for one materialized weight `buffer` [rows, cols]: reads the
/// weight's Hessian from the calibration file named by the recipe; when the
/// recipe scaled the weight's columns by s (AWQ/SmoothQuant), the input it
/// sees is x / s, whose Hessian is diag(1/s) H diag(1/s).
static Expected<Quantized4> runGptq(const WeightDesc &w,
                                    const WeightTransform &quant,
                                    ArrayRef<float> buffer, int64_t rows,
                                    int64_t cols) {
  Expected<CalibrationFile> calib = CalibrationFile::open(quant.calibration);
  if (!calib)
    return calib.takeError();
  // A row-parallel tensor-parallel shard (a slice of the columns) sees
  // inputs [offset, offset + cols) of the layer: the block of the whole
  // layer's Hessian on them (GPTQ per shard, as each rank quantizes its
  // own). Column-parallel shards keep every input, so the whole Hessian.
  int64_t full = cols, offset = 0;
  for (const WeightTransform &t : w.transforms)
    if (t.kind == WeightTransform::Kind::Slice && t.axis == 1) {
      offset = t.offset;
      full = w.source.shape.size() == 2 ? w.source.shape[1] : t.offset + t.size;
    }
  Expected<std::vector<float>> h =
      calib->readBlock(quant.hessian, full, offset, cols);
  if (!h)
    return h.takeError();
  std::vector<double> hessian(h->begin(), h->end());
  std::vector<double> colScale(cols, 1.0);
  for (const WeightTransform &t : w.transforms)
    if (t.kind == WeightTransform::Kind::Scale && t.axis == 1)
      for (int64_t c = 0; c < cols; ++c)
        colScale[c] *= t.factors[c];
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < cols; ++j)
      hessian[i * cols + j] /= colScale[i] * colScale[j];
  GptqOptions options;
  options.groupSize = quant.groupSize;
  options.actOrder = quant.actOrder;
  options.damp = quant.damp;
  Expected<Quantized4> q = quantizeGptq4(buffer, rows, cols, hessian, options);
  if (!q)
    return createStringError(inconvertibleErrorCode(),
                             "weight '" + w.name + "' (Hessian '" +
                                 quant.hessian + "' of " + quant.calibration +
                                 "): " + toString(q.takeError()));
  return q;
}

/// The Quantize step ending `w`'s recipe, if any.
static const WeightTransform *quantizeStep(const WeightDesc &w) {
  if (w.transforms.empty() ||
      w.transforms.back().kind != WeightTransform::Kind::Quantize)
    return nullptr;
  return &w.transforms.back();
}

/// Symmetric int8 quantization (round to nearest, ties away from zero as
/// std::lround does) per row (groupSize 0) or per group of groupSize
/// consecutive columns of a row (the last group of a row may be shorter;
/// scales [rows, ceil(cols / groupSize)] row-major): scale = max|w| / 127
/// over the row or group, q = round(w / scale); an all-zero row or group
/// gets scale 0 and q 0.
static void quantizeRows(ArrayRef<float> w, int64_t rows, int64_t cols,
                         int64_t groupSize, MutableArrayRef<int8_t> q,
                         MutableArrayRef<float> scales) {
  int64_t group = groupSize > 0 ? groupSize : std::max<int64_t>(cols, 1);
  int64_t groups = (cols + group - 1) / group;
  for (int64_t r = 0; r < rows; ++r) {
    ArrayRef<float> row = w.slice(r * cols, cols);
    for (int64_t g = 0; g < groups; ++g) {
      int64_t begin = g * group, end = std::min(cols, begin + group);
      float maxAbs = 0.0f;
      for (int64_t c = begin; c < end; ++c)
        maxAbs = std::max(maxAbs, std::fabs(row[c]));
      float scale = maxAbs / 127.0f;
      scales[r * groups + g] = scale;
      for (int64_t c = begin; c < end; ++c) {
        long v = scale > 0.0f ? std::lround(row[c] / scale) : 0;
        q[r * cols + c] = static_cast<int8_t>(std::clamp(v, -127L, 127L));
      }
    }
  }
}

/// IEEE binary32 -> bfloat16, round to nearest even; NaN stays a quiet NaN.
static uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// IEEE binary32 -> binary16, round to nearest even (the compiler's
/// conversion; overflow gives infinity, as IEEE 754 prescribes).
static uint16_t floatToHalf(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

static unsigned storageBytes(StorageType t) {
  return t == StorageType::F32 ? 4 : 2;
}

namespace {
/// What the writer reuses from one tensor to the next: the last 4-bit
/// result (the qweight/scales/zeros parts of one weight, declared next to
/// each other, quantize it once) and the conversion buffers, so memory
/// stays at the largest tensor.
struct WriterState {
  std::string cachedKey;
  Quantized4 cached;
  std::vector<float> buffer;
  std::vector<uint16_t> narrow;
  std::vector<char> repacked;
};
} // namespace

/// weights.bin stores floats little-endian (a no-op on x86 and Arm hosts);
/// floats are converted only right before they are written, after any
/// quantization has read them.
static void toLittleEndian(MutableArrayRef<float> values) {
  if constexpr (!sys::IsLittleEndianHost)
    for (float &f : values) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      u = llvm::byteswap(u);
      std::memcpy(&f, &u, 4);
    }
}

/// A GGML block-format weight kept as stored, sliced for one tensor-parallel
/// rank (kiln-partition): `w` is [repack blocks, row reorderings..., slice...]
/// with the slices last, in the tensor's element coordinates. The whole
/// tensor's blocks (materializeRepacked) are cut without decoding: rows
/// (axis 0) are a byte range of whole rows, columns (axis 1) in every row a
/// range of whole blocks, so a column slice must start and end on a block
/// boundary. Leaves the shard's bytes in `st.repacked`; sets t.shape, t.dtype
/// and t.bytes.
static Error emitSlicedBlocks(StringRef path, const WeightDesc &w,
                              WriterState &st, WrittenTensor &t) {
  const WeightTransform &r = *repackStep(w);
  const size_t firstSlice =
      llvm::find_if(w.transforms,
                    [](const WeightTransform &x) {
                      return x.kind == WeightTransform::Kind::Slice;
                    }) -
      w.transforms.begin();
  ArrayRef<WeightTransform> slices =
      ArrayRef(w.transforms).drop_front(firstSlice);
  std::optional<int64_t> format = blockFormatOf(w.source.storage);
  if (r.part != WeightTransform::QuantPart::Blocks || !format)
    return writerError(path, "weight '" + w.name +
                                 "': a repacked quantized part cannot be "
                                 "sliced (only GGML blocks kept as stored)");
  if (llvm::any_of(slices, [](const WeightTransform &x) {
        return x.kind != WeightTransform::Kind::Slice;
      }))
    return writerError(path, "weight '" + w.name +
                                 "': only slices can follow a slice of GGML "
                                 "blocks");
  WeightDesc whole = w;
  whole.transforms.resize(whole.transforms.size() - slices.size());
  if (Error e = materializeRepacked(whole, st.repacked))
    return e;
  const int64_t elems = kiln_block_elems(*format),
                blockBytes = kiln_block_bytes(*format);
  int64_t rows = r.rows, cols = r.cols;
  for (const WeightTransform &sl : slices) {
    const int64_t extent = sl.axis == 0 ? rows : cols;
    if ((sl.axis != 0 && sl.axis != 1) || sl.offset < 0 || sl.size < 1 ||
        sl.offset + sl.size > extent)
      return writerError(
          path, "weight '" + w.name + "': slice [" + Twine(sl.offset) + ", " +
                    Twine(sl.offset + sl.size) + ") along axis " +
                    Twine(sl.axis) + " does not fit shape [" + Twine(rows) +
                    ", " + Twine(cols) + "]");
    const size_t rowBytes = size_t(cols / elems * blockBytes);
    if (sl.axis == 0) {
      std::memmove(st.repacked.data(),
                   st.repacked.data() + size_t(sl.offset) * rowBytes,
                   size_t(sl.size) * rowBytes);
      rows = sl.size;
      st.repacked.resize(size_t(rows) * rowBytes);
      continue;
    }
    if (sl.offset % elems != 0 || sl.size % elems != 0)
      return writerError(
          path, "weight '" + w.name + "' (" + r.format + ", blocks of " +
                    Twine(elems) + "): columns [" + Twine(sl.offset) + ", " +
                    Twine(sl.offset + sl.size) + ") do not hold whole blocks");
    const size_t begin = size_t(sl.offset / elems * blockBytes),
                 keep = size_t(sl.size / elems * blockBytes);
    for (int64_t o = 0; o < rows; ++o)
      std::memmove(st.repacked.data() + size_t(o) * keep,
                   st.repacked.data() + size_t(o) * rowBytes + begin, keep);
    cols = sl.size;
    st.repacked.resize(size_t(rows) * keep);
  }
  t.shape = {rows, cols / elems * blockBytes};
  t.dtype = "i8";
  t.bytes = st.repacked.size();
  return Error::success();
}

/// Materializes `w` (without its concat_rows parts) as the bytes weights.bin
/// stores, handing them to `sink` in order; sets t.shape, t.dtype and
/// t.bytes. Errors name `path` and the weight.
static Error emitTensor(StringRef path, const WeightDesc &w, StorageType dtype,
                        WriterState &st, WrittenTensor &t,
                        function_ref<void(const char *, size_t)> sink) {
  // The float tensor's shape: the source's, narrowed by any slice.
  const std::vector<int64_t> shape = floatShape(w);
  t.shape.assign(shape.begin(), shape.end());
  if (repackStep(w) && llvm::any_of(w.transforms, [](const WeightTransform &x) {
        return x.kind == WeightTransform::Kind::Slice;
      })) { // a rank's shard of GGML blocks kept as stored
    if (Error e = emitSlicedBlocks(path, w, st, t))
      return e;
    sink(st.repacked.data(), t.bytes);
    return Error::success();
  }
  if (repackStep(w)) { // a part of a pre-quantized checkpoint's linear
    Expected<RepackedLayout> layout = repackedLayout(w);
    if (!layout)
      return layout.takeError();
    t.shape = layout->shape;
    t.dtype = layout->dtype;
    t.bytes = layout->bytes;
    if (Error e = materializeRepacked(w, st.repacked))
      return e;
    sink(st.repacked.data(), t.bytes);
    return Error::success();
  }
  const WeightTransform *quant = quantizeStep(w);
  if (quant && shape.size() != 2)
    return writerError(path, "weight '" + w.name + "': quantize needs a matrix");
  int64_t groups = 0, packedCols = 0;
  if (quant) {
    int64_t rows = shape[0], cols = shape[1];
    bool four = quant->bits == 4;
    // 4-bit: always groups; 8-bit: per row (group_size 0) or groups.
    groups = quant->groupSize > 0
                 ? (cols + quant->groupSize - 1) / quant->groupSize
                 : 0;
    packedCols = four ? (cols + 1) / 2 : cols;
    switch (quant->part) {
    case WeightTransform::QuantPart::QWeight:
      t.shape = {rows, packedCols};
      break;
    case WeightTransform::QuantPart::Scales:
      t.shape = groups > 0 ? SmallVector<int64_t, 2>{rows, groups}
                           : SmallVector<int64_t, 2>{rows};
      break;
    case WeightTransform::QuantPart::Zeros:
      t.shape = {rows, groups};
      break;
    case WeightTransform::QuantPart::Blocks:
      break;
    }
  }
  // Float weights take the model's dtype, except those the graph keeps
  // in f32 whatever it (calibration data such as key means).
  const StorageType floatType = w.keepF32 ? StorageType::F32 : dtype;
  t.dtype = quant ? (quant->part == WeightTransform::QuantPart::Scales ? "f32" : "i8")
                  : std::string(stringifyStorageType(floatType));
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d),
                                          &numel))
      return writerError(path, "weight '" + w.name + "' has an invalid shape");
  }
  if (numel > (uint64_t(1) << 36))
    return writerError(path, "weight '" + w.name + "' has " + Twine(numel) +
                                 " elements, more than 2^36");
  uint64_t writtenElems = 1;
  for (int64_t d : t.shape)
    writtenElems *= static_cast<uint64_t>(d);
  t.bytes = !quant ? numel * storageBytes(floatType)
            : writtenElems *
                  (quant->part == WeightTransform::QuantPart::Scales ? 4 : 1);
  std::vector<float> &buffer = st.buffer;
  buffer.resize(numel);
  if (Error e = materializeWeight(w, buffer))
    return e;
  if (!quant) {
    if (floatType == StorageType::F32) {
      toLittleEndian(buffer);
      sink(reinterpret_cast<const char *>(buffer.data()), t.bytes);
      return Error::success();
    }
    st.narrow.resize(numel);
    for (uint64_t i = 0; i < numel; ++i)
      st.narrow[i] = dtype == StorageType::BF16 ? floatToBf16(buffer[i])
                                                : floatToHalf(buffer[i]);
    if constexpr (!sys::IsLittleEndianHost)
      for (uint16_t &u : st.narrow)
        u = llvm::byteswap(u);
    sink(reinterpret_cast<const char *>(st.narrow.data()), t.bytes);
    return Error::success();
  }
  int64_t rows = shape[0], cols = shape[1];
  std::vector<uint8_t> bytes;     // qweight or zeros
  std::vector<float> scaleValues; // scales
  if (quant->bits == 8) {
    std::vector<int8_t> q(numel);
    scaleValues.resize(rows * std::max<int64_t>(groups, 1));
    quantizeRows(buffer, rows, cols, quant->groupSize, q, scaleValues);
    bytes.assign(reinterpret_cast<uint8_t *>(q.data()),
                 reinterpret_cast<uint8_t *>(q.data()) + q.size());
  } else {
    std::string qkey = quantizedKey(w);
    if (qkey != st.cachedKey) {
      st.cachedKey.clear();
      if (quant->method == WeightTransform::QuantMethod::GPTQ) {
        Expected<Quantized4> q = runGptq(w, *quant, buffer, rows, cols);
        if (!q)
          return writerError(path, toString(q.takeError()));
        st.cached = std::move(*q);
      } else {
        st.cached = quantizeRtn4(buffer, rows, cols, quant->groupSize);
      }
      st.cachedKey = std::move(qkey);
    }
    scaleValues = st.cached.scales;
    bytes = quant->part == WeightTransform::QuantPart::Zeros ? st.cached.zeros
                                                             : st.cached.packed;
  }
  if (quant->part == WeightTransform::QuantPart::Scales) {
    toLittleEndian(scaleValues);
    sink(reinterpret_cast<const char *>(scaleValues.data()), t.bytes);
  } else {
    sink(reinterpret_cast<const char *>(bytes.data()), t.bytes);
  }
  return Error::success();
}

/// The identity of everything `w` materializes to, its concat parts included.
static std::string recipeKey(const WeightDesc &w) {
  std::string key = sourceKey(w) + (w.keepF32 ? "|keep-f32" : "");
  for (const WeightDesc &part : w.concatRows)
    key += "|concat_rows{" + recipeKey(part) + "}";
  return key;
}

Expected<std::vector<WrittenTensor>>
writeWeightsFile(StringRef path, ArrayRef<WeightDesc> weights,
                 StorageType dtype) {
  if (dtype != StorageType::F32 && dtype != StorageType::F16 &&
      dtype != StorageType::BF16)
    return writerError(path, "weights can be written as f32, f16 or bf16, "
                             "not " + stringifyStorageType(dtype));
  std::error_code ec;
  raw_fd_ostream os(path, ec, sys::fs::OF_None);
  if (ec)
    return writerError(path, "cannot open for writing: " + ec.message());
  auto fail = [&](Error err) -> Expected<std::vector<WrittenTensor>> {
    os.close();
    os.clear_error();
    sys::fs::remove(path);
    return std::move(err);
  };
  std::vector<WrittenTensor> written;
  written.reserve(weights.size());
  StringMap<size_t> firstBySource; // recipe key -> index into `written`
  WriterState state;
  static const char zeros[kWeightAlignment] = {};
  uint64_t offset = 0;
  auto sink = [&](const char *data, size_t n) { os.write(data, n); };
  for (const WeightDesc &w : weights) {
    auto [it, inserted] = firstBySource.try_emplace(recipeKey(w), written.size());
    if (!inserted) { // identical recipe: share the bytes written before
      WrittenTensor t = written[it->second];
      t.name = w.name;
      written.push_back(std::move(t));
      continue;
    }
    WrittenTensor t;
    t.name = w.name;
    t.offset = offset;
    if (Error e = emitTensor(path, w, dtype, state, t, sink))
      return fail(std::move(e));
    // Horizontal fusion: the parts' rows follow, each written by its own
    // recipe; they continue the shape's first dimension.
    for (const WeightDesc &part : w.concatRows) {
      WrittenTensor p;
      if (Error e = emitTensor(path, part, dtype, state, p, sink))
        return fail(std::move(e));
      if (p.dtype != t.dtype || p.shape.size() != t.shape.size() ||
          !std::equal(p.shape.begin() + 1, p.shape.end(), t.shape.begin() + 1))
        return fail(writerError(path, "weight '" + w.name + "': concat_rows "
                                "part '" + part.name +
                                "' does not continue its rows"));
      t.shape[0] += p.shape[0];
      t.bytes += p.bytes;
    }
    uint64_t end = offset + t.bytes;
    uint64_t padded = alignTo(end, kWeightAlignment);
    os.write(zeros, padded - end);
    offset = padded;
    if (os.has_error())
      return fail(writerError(path, "write error at offset " + Twine(end) +
                                        ": " + os.error().message()));
    written.push_back(std::move(t));
  }
  // Give the memory of the largest tensor back before flushing.
  state = WriterState();
  os.close();
  if (os.has_error()) {
    std::string msg = os.error().message();
    os.clear_error();
    sys::fs::remove(path);
    return writerError(path, "write error: " + msg);
  }
  return written;
}

/// Reads the file at `path` in 1 MiB chunks, handing each to `consume`.
static Error streamFile(StringRef path,
                        function_ref<void(const char *, size_t)> consume) {
  Expected<sys::fs::file_t> fd = sys::fs::openNativeFileForRead(path);
  if (!fd)
    return writerError(path, "cannot open for hashing: " +
                                 toString(fd.takeError()));
  std::vector<char> chunk(size_t(1) << 20);
  Error err = Error::success();
  while (true) {
    Expected<size_t> n = sys::fs::readNativeFile(*fd, chunk);
    if (!n) {
      err = writerError(path, "read error while hashing: " +
                                  toString(n.takeError()));
      break;
    }
    if (*n == 0)
      break;
    consume(chunk.data(), *n);
  }
  sys::fs::closeFile(*fd);
  return err;
}

Expected<std::string> hashFileXXH3(StringRef path) {
  XXH3_state_t *state = XXH3_createState();
  if (!state)
    return writerError(path, "cannot allocate an XXH3 state");
  XXH3_64bits_reset(state);
  Error err = streamFile(path, [&](const char *data, size_t n) {
    XXH3_64bits_update(state, data, n);
  });
  uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  if (err)
    return std::move(err);
  std::string hex;
  raw_string_ostream(hex) << format_hex_no_prefix(hash, 16, /*Upper=*/false);
  return hex;
}

Expected<FileHashes> hashFileForManifest(StringRef path) {
  XXH3_state_t *state = XXH3_createState();
  if (!state)
    return writerError(path, "cannot allocate an XXH3 state");
  XXH3_64bits_reset(state);
  ::kiln::sign::Blake2b blake;
  Error err = streamFile(path, [&](const char *data, size_t n) {
    XXH3_64bits_update(state, data, n);
    blake.update(data, n);
  });
  uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  if (err)
    return std::move(err);
  FileHashes out;
  raw_string_ostream(out.xxh3) << format_hex_no_prefix(hash, 16,
                                                       /*Upper=*/false);
  out.blake2b = blake.hexDigest();
  return out;
}

} // namespace mlir::kiln

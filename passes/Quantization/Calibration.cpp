//===- Calibration.cpp - kiln-calibration file reader ---------------------===//

#include "passes/Quantization/Calibration.h"
#include "dialects/Kiln/Import/ImportUtils.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/ADT/bit.h"

#include <cmath>
#include <cstring>

using namespace llvm;

namespace mlir::kiln {

static Error calibError(StringRef file, const Twine &msg) {
  return createStringError(inconvertibleErrorCode(),
                           "calibration file " + file + ": " + msg);
}

static std::string shapeString(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Reads `size` bytes at `offset` of the open file `fd`.
static Error readAt(StringRef file, sys::fs::file_t fd, uint64_t offset,
                    MutableArrayRef<char> out) {
  uint64_t done = 0;
  while (done < out.size()) {
    Expected<size_t> n =
        sys::fs::readNativeFileSlice(fd, out.slice(done), offset + done);
    if (!n)
      return calibError(file, "read error at offset " + Twine(offset + done) +
                                  ": " + toString(n.takeError()));
    if (*n == 0)
      return calibError(file, "unexpected end of file at offset " +
                                  Twine(offset + done) + " (truncated?)");
    done += *n;
  }
  return Error::success();
}

Expected<CalibrationFile> CalibrationFile::open(StringRef path) {
  CalibrationFile f;
  f.filePath = path.str();
  uint64_t fileSize = 0;
  if (!sys::fs::exists(path))
    return calibError(path, "cannot read: no such file (create one with "
                            "`kiln-calibrate MODEL -o FILE`)");
  // A regular file: a FIFO or device is refused before anything blocks.
  Expected<int> fd = detail::openRegularFile(path, "a calibration file",
                                             UINT64_MAX, fileSize);
  if (!fd)
    return createStringError(inconvertibleErrorCode(),
                             "calibration file " + toString(fd.takeError()));
  scope_exit closeOnExit([&] { sys::fs::closeFile(*fd); });
  if (fileSize < 8)
    return calibError(path, Twine(fileSize) +
                                " bytes, too small for a safetensors header "
                                "(expected a kiln-calibration safetensors file)");
  char lenBytes[8];
  if (Error e = readAt(path, *fd, 0, lenBytes))
    return std::move(e);
  uint64_t headerLen = support::endian::read64le(lenBytes);
  if (headerLen == 0 || headerLen > fileSize - 8 ||
      headerLen > detail::kMaxSafetensorsHeaderBytes)
    return calibError(path, "header length " + Twine(headerLen) +
                                " does not fit the file (" + Twine(fileSize) +
                                " bytes); not a safetensors file");
  std::string header(headerLen, '\0');
  if (Error e = readAt(path, *fd, 8, MutableArrayRef<char>(header.data(),
                                                            header.size())))
    return std::move(e);
  if (Error e = detail::checkJsonDepth(header, path, /*baseOffset=*/8))
    return createStringError(inconvertibleErrorCode(),
                             "calibration file " + toString(std::move(e)));
  Expected<json::Value> parsed = json::parse(header);
  if (!parsed)
    return calibError(path, "header is not valid JSON: " +
                                toString(parsed.takeError()));
  json::Object *root = parsed->getAsObject();
  if (!root)
    return calibError(path, "header is not a JSON object");
  if (json::Object *m = root->getObject("__metadata__"))
    for (auto &kv : *m)
      if (std::optional<StringRef> v = kv.second.getAsString())
        f.meta[kv.first.str()] = v->str();
  StringRef format = f.metadata("format");
  if (format != "kiln-calibration")
    return calibError(path, "metadata format is '" + format +
                                "', expected 'kiln-calibration' (write one "
                                "with `kiln-calibrate MODEL -o FILE`)");
  if (f.metadata("version") != kCalibrationVersion)
    return calibError(path, "calibration format version '" +
                                f.metadata("version") + "', this Kiln reads "
                                "version " + kCalibrationVersion +
                                " (recalibrate with this Kiln's kiln-calibrate)");
  uint64_t dataBegin = 8 + headerLen;
  for (auto &kv : *root) {
    StringRef name = kv.first;
    if (name == "__metadata__")
      continue;
    const json::Object *t = kv.second.getAsObject();
    const json::Array *shape = t ? t->getArray("shape") : nullptr;
    const json::Array *offsets = t ? t->getArray("data_offsets") : nullptr;
    std::optional<StringRef> dtype = t ? t->getString("dtype") : std::nullopt;
    if (!shape || !offsets || !dtype || offsets->size() != 2)
      return calibError(path, "tensor '" + name +
                                  "' lacks dtype, shape or data_offsets");
    Entry e;
    e.dtype = dtype->str();
    for (const json::Value &d : *shape) {
      std::optional<int64_t> v = d.getAsInteger();
      if (!v || *v < 0)
        return calibError(path, "tensor '" + name + "' has a bad shape");
      e.shape.push_back(*v);
    }
    std::optional<int64_t> b = (*offsets)[0].getAsInteger();
    std::optional<int64_t> en = (*offsets)[1].getAsInteger();
    if (!b || !en || *b < 0 || *en < *b ||
        static_cast<uint64_t>(*en) > fileSize - dataBegin)
      return calibError(path, "tensor '" + name +
                                  "' has data_offsets outside the file");
    e.begin = dataBegin + *b;
    e.end = dataBegin + *en;
    f.tensors[name] = std::move(e);
  }
  return f;
}

StringRef CalibrationFile::metadata(StringRef key) const {
  auto it = meta.find(key);
  return it == meta.end() ? StringRef() : StringRef(it->second);
}

Expected<std::string> CalibrationFile::tapOf(StringRef weight) const {
  StringRef tap = metadata(("input:" + weight).str());
  if (tap.empty())
    return calibError(filePath, "no metadata 'input:" + weight +
                                    "' naming the activation that feeds "
                                    "weight '" + weight +
                                    "' (calibrated on another model?)");
  return tap.str();
}

Error CalibrationFile::check(StringRef tensor, ArrayRef<int64_t> shape) const {
  auto it = tensors.find(tensor);
  if (it == tensors.end())
    return calibError(filePath, "no tensor '" + tensor + "' (expected F32 " +
                                    shapeString(shape) + ")");
  const Entry &e = it->second;
  if (e.dtype != "F32")
    return calibError(filePath, "tensor '" + tensor + "' is " + e.dtype +
                                    ", expected F32");
  if (ArrayRef<int64_t>(e.shape) != shape)
    return calibError(filePath, "tensor '" + tensor + "' has shape " +
                                    shapeString(e.shape) + ", expected " +
                                    shapeString(shape) +
                                    " (calibrated on another model?)");
  uint64_t numel = 1;
  for (int64_t d : shape)
    numel *= static_cast<uint64_t>(d);
  if (e.end - e.begin != numel * 4)
    return calibError(filePath, "tensor '" + tensor + "' holds " +
                                    Twine(e.end - e.begin) + " bytes, " +
                                    shapeString(shape) + " F32 needs " +
                                    Twine(numel * 4));
  return Error::success();
}

Expected<CalibrationFile::TensorLocation>
CalibrationFile::locate(StringRef tensor, ArrayRef<int64_t> shape) const {
  // Read it once (it is small) so non-finite values are refused here, with
  // the tensor's name, rather than poisoning the artifact.
  Expected<std::vector<float>> values = read(tensor, shape);
  if (!values)
    return values.takeError();
  const Entry &e = tensors.find(tensor)->second;
  return TensorLocation{e.begin, e.end - e.begin};
}

Expected<std::vector<float>>
CalibrationFile::read(StringRef tensor, ArrayRef<int64_t> shape) const {
  if (Error e = check(tensor, shape))
    return std::move(e);
  const Entry &e = tensors.find(tensor)->second;
  std::vector<float> out((e.end - e.begin) / 4);
  Expected<sys::fs::file_t> fd = sys::fs::openNativeFileForRead(filePath);
  if (!fd)
    return calibError(filePath, "cannot open to read tensor '" + tensor +
                                    "': " + toString(fd.takeError()));
  scope_exit closeOnExit([&] { sys::fs::closeFile(*fd); });
  if (Error err = readAt(filePath, *fd, e.begin,
                         MutableArrayRef<char>(
                             reinterpret_cast<char *>(out.data()),
                             out.size() * 4)))
    return std::move(err);
  if constexpr (!sys::IsLittleEndianHost)
    for (float &f : out) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      u = llvm::byteswap(u);
      std::memcpy(&f, &u, 4);
    }
  for (float v : out)
    if (!std::isfinite(v))
      return calibError(filePath, "tensor '" + tensor +
                                      "' holds a non-finite value");
  return out;
}

/// Checks that [offset, offset + size) lies inside `channels`.
static Error checkRange(StringRef path, StringRef tensor, int64_t channels,
                        int64_t offset, int64_t size) {
  if (offset >= 0 && size > 0 && offset <= channels - size)
    return Error::success();
  return calibError(path, "tensor '" + tensor + "': channels [" +
                              Twine(offset) + ", " + Twine(offset + size) +
                              ") are not inside its " + Twine(channels));
}

Expected<std::vector<float>>
CalibrationFile::readChannels(StringRef tensor, int64_t channels,
                              int64_t offset, int64_t size) const {
  if (Error e = checkRange(filePath, tensor, channels, offset, size))
    return std::move(e);
  Expected<std::vector<float>> all = read(tensor, {channels});
  if (!all)
    return all.takeError();
  return std::vector<float>(all->begin() + offset,
                            all->begin() + offset + size);
}

Expected<std::vector<float>>
CalibrationFile::readBlock(StringRef tensor, int64_t channels, int64_t offset,
                           int64_t size) const {
  if (Error e = checkRange(filePath, tensor, channels, offset, size))
    return std::move(e);
  Expected<std::vector<float>> all = read(tensor, {channels, channels});
  if (!all)
    return all.takeError();
  std::vector<float> block(static_cast<size_t>(size * size));
  for (int64_t i = 0; i < size; ++i)
    std::copy_n(all->begin() + (offset + i) * channels + offset, size,
                block.begin() + i * size);
  return block;
}

Expected<CalibrationFile::TensorLocation>
CalibrationFile::locateChannels(StringRef tensor, int64_t channels,
                                int64_t offset, int64_t size) const {
  if (Error e = checkRange(filePath, tensor, channels, offset, size))
    return std::move(e);
  Expected<TensorLocation> all = locate(tensor, {channels});
  if (!all)
    return all.takeError();
  return TensorLocation{all->offset + 4 * static_cast<uint64_t>(offset),
                        4 * static_cast<uint64_t>(size)};
}

} // namespace mlir::kiln

//===- CalibrationFuzzer.cpp - libFuzzer target: calibration files --------===//
//
// Input: a kiln-calibration safetensors file. Opens it with
// CalibrationFile::open(); if that succeeds, asks tapOf() for every
// "input:<W>" metadata entry and check()/locate()/read() for every tensor
// of the header at the shape the header states (and at a wrong one).
//
//===----------------------------------------------------------------------===//

#include "FuzzUtils.h"

#include "passes/Quantization/Calibration.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/JSON.h"

using namespace mlir::kiln;

/// Tensor elements read per input at most.
static constexpr uint64_t kMaxElements = uint64_t(1) << 20;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln::fuzz::ScratchDir &dir = kiln::fuzz::ScratchDir::get();
  dir.clear();
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  std::string path = dir.write("calib.safetensors",
                               std::string_view(bytes.data(), bytes.size()));
  llvm::Expected<CalibrationFile> file = CalibrationFile::open(path);
  if (!file) {
    llvm::consumeError(file.takeError());
    return 0;
  }
  // open() succeeded, so the header is a JSON object of this length.
  uint64_t len = llvm::support::endian::read64le(bytes.data());
  llvm::Expected<llvm::json::Value> header =
      llvm::json::parse(bytes.substr(8, len));
  if (!header) {
    llvm::consumeError(header.takeError());
    return 0;
  }
  uint64_t budget = kMaxElements;
  for (auto &kv : *header->getAsObject()) {
    llvm::StringRef name = kv.first;
    if (name == "__metadata__") {
      if (const llvm::json::Object *meta = kv.second.getAsObject())
        for (auto &m : *meta) {
          llvm::StringRef key = m.first;
          if (key.consume_front("input:")) {
            if (llvm::Expected<std::string> tap = file->tapOf(key))
              (void)file->has(*tap + ".absmax");
            else
              llvm::consumeError(tap.takeError());
          }
        }
      continue;
    }
    llvm::SmallVector<int64_t, 2> shape;
    uint64_t elems = 1;
    if (const llvm::json::Object *t = kv.second.getAsObject())
      if (const llvm::json::Array *dims = t->getArray("shape"))
        for (const llvm::json::Value &d : *dims) {
          std::optional<int64_t> v = d.getAsInteger();
          if (!v || *v < 0 || (*v != 0 && elems > kMaxElements / uint64_t(*v)))
            return 0;
          shape.push_back(*v);
          elems *= uint64_t(*v);
        }
    llvm::consumeError(file->check(name, {int64_t(elems) + 1}));
    if (elems > budget)
      continue;
    budget -= elems;
    if (auto loc = file->locate(name, shape); !loc)
      llvm::consumeError(loc.takeError());
    if (auto values = file->read(name, shape); !values)
      llvm::consumeError(values.takeError());
  }
  return 0;
}

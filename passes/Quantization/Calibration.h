//===- Calibration.h - kiln-calibration file reader --------------*- C++ -*-===//
//
// Reads the activation statistics written by kiln-calibrate (docs/
// quantization.md, "Calibration file"): a safetensors file
// (https://huggingface.co/docs/safetensors: 8-byte little-endian header
// length N, N bytes of JSON, then raw little-endian data) whose
// `__metadata__` has format = "kiln-calibration", version = "1", the model
// name and, for every linear weight W, "input:<W>" = "<tap>". Per tap T with
// C channels it holds F32 tensors T.absmax [C] (max_t |x_c|), T.absmean [C]
// (mean_t |x_c|) and, for a linear-layer input, T.hessian [C, C]
// ((1/N) sum_t x_t x_t^T). The pre-RoPE key taps layers.<l>.key feed no
// weight: they have T.mean [C] ((1/N) sum_t x_t[c]) instead of a Hessian and
// no "input:" entry. Nothing here enumerates taps: tensors are looked up by
// name (tapOf() for a weight's tap, then check()/read()/locate()).
//
// Only the header is parsed when the file is opened; tensors are read one
// at a time on request. Every error names the file and, where there is one,
// the tensor or weight and what was expected.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_QUANTIZATION_CALIBRATION_H
#define KILN_PASSES_QUANTIZATION_CALIBRATION_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::kiln {

/// The version of the calibration format this reader understands.
constexpr llvm::StringLiteral kCalibrationVersion = "1";

/// An opened calibration file: its metadata and tensor table.
class CalibrationFile {
public:
  /// Opens `path` and parses its safetensors header. Fails (naming the
  /// file) if it cannot be read, is not safetensors, its metadata format is
  /// not "kiln-calibration" or its version is not kCalibrationVersion.
  static llvm::Expected<CalibrationFile> open(llvm::StringRef path);

  llvm::StringRef path() const { return filePath; }
  /// A metadata string ("" if absent).
  llvm::StringRef metadata(llvm::StringRef key) const;
  /// The tap feeding linear weight `weight` (metadata "input:<weight>");
  /// an error naming the file and the weight if there is none.
  llvm::Expected<std::string> tapOf(llvm::StringRef weight) const;
  /// Checks that `tensor` exists, is F32 and has shape `shape`; the error
  /// names the file, the tensor, the shape found and the one expected (a
  /// mismatch usually means the file was calibrated on another model).
  llvm::Error check(llvm::StringRef tensor, llvm::ArrayRef<int64_t> shape) const;
  /// True if the file has a tensor named `tensor` (any dtype or shape).
  bool has(llvm::StringRef tensor) const { return tensors.count(tensor) != 0; }
  /// Where a tensor's bytes lie in the file.
  struct TensorLocation {
    uint64_t offset = 0; ///< absolute byte offset of the first element
    uint64_t bytes = 0;  ///< stored byte count
  };
  /// check() (so F32 and `shape`) then the tensor's byte range, so that a
  /// kiln.weight can name the tensor inside the file as its source (e.g.
  /// `layers.<l>.key.mean` for kiln-center-keys). The values are read once
  /// and a non-finite one is refused, naming the tensor.
  llvm::Expected<TensorLocation> locate(llvm::StringRef tensor,
                                        llvm::ArrayRef<int64_t> shape) const;
  /// check() then reads the tensor as f32 (row-major).
  llvm::Expected<std::vector<float>> read(llvm::StringRef tensor,
                                          llvm::ArrayRef<int64_t> shape) const;

  /// The statistics of a tensor-parallel shard's inputs, taken by
  /// kiln-calibrate on the whole model: channels [offset, offset + size)
  /// of the [channels] tensor `tensor` (readChannels, locateChannels), or
  /// the [size, size] diagonal block at (offset, offset) of the [channels,
  /// channels] one (readBlock: a Hessian restricted to the shard's inputs).
  /// The whole tensor is checked as read() / locate() check it; a range
  /// past `channels` is an error naming the tensor.
  llvm::Expected<std::vector<float>> readChannels(llvm::StringRef tensor,
                                                  int64_t channels,
                                                  int64_t offset,
                                                  int64_t size) const;
  llvm::Expected<std::vector<float>> readBlock(llvm::StringRef tensor,
                                               int64_t channels,
                                               int64_t offset,
                                               int64_t size) const;
  llvm::Expected<TensorLocation> locateChannels(llvm::StringRef tensor,
                                                int64_t channels,
                                                int64_t offset,
                                                int64_t size) const;

private:
  struct Entry {
    std::string dtype;
    llvm::SmallVector<int64_t, 2> shape;
    uint64_t begin = 0, end = 0; ///< absolute byte range in the file
  };
  std::string filePath;
  llvm::StringMap<std::string> meta;
  llvm::StringMap<Entry> tensors;
};

} // namespace mlir::kiln

#endif // KILN_PASSES_QUANTIZATION_CALIBRATION_H

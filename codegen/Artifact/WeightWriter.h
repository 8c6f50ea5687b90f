//===- WeightWriter.h - weights.bin writer and file hashing -----*- C++ -*-===//
//
// Writes the artifact's weights.bin (docs/artifact.md): every weight as
// float32 little-endian, each tensor starting at a multiple of 64 bytes.
// Tensors are materialized one at a time into one reused buffer, so memory
// stays at the largest tensor.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_ARTIFACT_WEIGHTWRITER_H
#define KILN_CODEGEN_ARTIFACT_WEIGHTWRITER_H

#include "dialects/Kiln/Import/ModelDesc.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::kiln {

/// Alignment of every tensor in weights.bin.
constexpr uint64_t kWeightAlignment = 64;

/// Where one weight landed in weights.bin (the manifest's weights.tensors).
struct WrittenTensor {
  std::string name;                   ///< canonical weight name
  uint64_t offset = 0;                ///< byte offset, multiple of 64
  uint64_t bytes = 0;                 ///< numel * dtype size
  llvm::SmallVector<int64_t, 2> shape; ///< as written (scales [out] / [out, G])
  std::string dtype;                   ///< "f32", "f16", "bf16" or "i8"
};

/// Writes `weights` to `path` in order as `dtype` (f32, or f16/bf16 rounded
/// to nearest even from the f32 materialization; a weight whose recipe ends
/// in a Quantize transform is written as its integer values, f32 scales or
/// zero points instead: round-to-nearest, or GPTQ (Frantar et al. 2022)
/// with the Hessian its recipe names in a calibration file, computed once
/// for the three parts of one weight; a part of a pre-quantized
/// checkpoint's linear, whose recipe starts with a Repack transform, is
/// written in Kiln's quantized layout by materializeRepacked(), see
/// Prequantized.h), each tensor 64-byte
/// aligned (zero padding; the file ends after the last tensor's padding).
/// Weights whose sources are identical (same file, offset, storage, shape,
/// synthetic parameters and transforms), e.g. a tied "output" and
/// "tok_embeddings", are written once and share an offset. Returns one
/// WrittenTensor per weight, in the order of `weights`. On error the
/// partial file is removed.
llvm::Expected<std::vector<WrittenTensor>>
writeWeightsFile(llvm::StringRef path, llvm::ArrayRef<WeightDesc> weights,
                 StorageType dtype = StorageType::F32);

/// XXH3-64 of the file at `path` as 16 lowercase hex digits (streamed).
llvm::Expected<std::string> hashFileXXH3(llvm::StringRef path);

/// The hashes manifest.json lists for a file (docs/artifact.md).
struct FileHashes {
  std::string xxh3;    ///< XXH3-64, 16 lowercase hex digits (files.*.xxh3_64)
  std::string blake2b; ///< unkeyed BLAKE2b-256 (libsodium crypto_generichash),
                       ///< 64 lowercase hex digits (files.*.blake2b_256)
};

/// Both hashes of the file at `path`, in one streamed pass.
llvm::Expected<FileHashes> hashFileForManifest(llvm::StringRef path);

} // namespace mlir::kiln

#endif // KILN_CODEGEN_ARTIFACT_WEIGHTWRITER_H

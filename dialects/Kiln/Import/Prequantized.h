//===- Prequantized.h - Pre-quantized checkpoints kept quantized -*- C++
//-*-===//
//
// Hugging Face GPTQ / AWQ checkpoints and GGUF Q4_0 / Q8_0 tensors store
// linear weights as small integers plus scales (and zero points). Instead of
// dequantizing them to float, the importers describe each such linear as a
// QuantizedWeight whose parts are in Kiln's quantized-linear layout
// (runtime/include/kiln_rt/kernel_abi.h, W8A16 / W4A16 sections):
//
//   4 bits: qweight bytes [out, ceil(in/2)] (element 2j in the low nibble),
//           scales f32 [out, G], zeros bytes [out, G] (0..15),
//           W[o, i] = scales[o, g] * (q[o, i] - zeros[o, g]), g = i / gs;
//   8 bits: qweight int8 [out, in], scales f32 [out] (gs 0) or
//           [out, ceil(in / gs)], W[o, i] = scales[o, i / gs] * q[o, i].
//
// Each part is a WeightDesc whose source is one checkpoint tensor and whose
// recipe starts with a Repack transform (IR: #kiln.transform<"repack",
// {format, part, bits, group_size, rows, cols}>). The conversion is exact
// (integers moved, f16 scales widened to f32) and done lazily, one tensor at
// a time, by materializeRepacked() when the artifact is written.
//
// Format specs (docs/quantization.md, "Pre-quantized checkpoints"):
//   * GPTQ (AutoGPTQ / GPTQModel `QuantLinear`, Frantar et al. 2022): per
//     linear `qweight` int32 [in/8, out] (eight 4-bit values along the input
//     dimension, LSB first), `qzeros` int32 [G, out/8] (packed along out,
//     LSB first; checkpoint_format "gptq" stores zero - 1, "gptq_v2" the
//     zero), `scales` f16 [G, out], `g_idx` int32 [in] (group of each input
//     column); W[o, i] = scales[g_idx[i], o] * (q[i, o] - zero[g_idx[i], o]).
//   * AWQ (AutoAWQ GEMM, Lin et al. 2023): `qweight` int32 [in, out/8] and
//     `qzeros` int32 [G, out/8], both packed along out with nibble p holding
//     column 8c + [0, 2, 4, 6, 1, 3, 5, 7][p], `scales` f16 [G, out];
//     W[o, i] = scales[i / gs, o] * (q[i, o] - zero[i / gs, o]).
//   * GGUF Q4_0 / Q8_0 (ggml-quants.c): blocks of 32 along a row, f16 d then
//     16 bytes (Q4_0: byte j = element j low nibble, element j + 16 high;
//     w = d * (q - 8)) or 32 int8 (Q8_0: w = d * q).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECTS_KILN_IMPORT_PREQUANTIZED_H
#define KILN_DIALECTS_KILN_IMPORT_PREQUANTIZED_H

#include "dialects/Kiln/Import/ModelDesc.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/JSON.h"

#include <optional>

namespace mlir::kiln {

/// GGUF Q8_0 linears are kept as grouped 8-bit weights (group 32,
/// kiln_k_linear_w8a16 with group_size) when this is true, else dequantized
/// to float. Q4_0 linears are always kept as 4-bit weights.
constexpr bool kKeepGgufQ8_0Quantized = true;

/// The `quantization_config` of a Hugging Face config.json.
struct HfQuantConfig {
  std::string method; ///< "gptq" or "awq"
  std::string format; ///< Repack format: "gptq" (v1), "gptq_v2", "awq"
  int64_t bits = 4;
  int64_t groupSize = 128; ///< -1: one group per row (per output channel)
  bool descAct = false;    ///< GPTQ act-order (needs a trivial g_idx here)
  std::string configPath;  ///< for messages
  /// "GPTQ 4-bit, group 32, checkpoint_format gptq" and the like.
  std::string describe() const;
};

/// Parses `quantization_config` of `cfg` (read from `cfgPath`): std::nullopt
/// when absent. Errors (naming the file and field) for methods other than
/// GPTQ and AWQ, bits other than 4, group sizes other than -1 or a positive
/// even number, AWQ versions other than GEMM or without zero points, and a
/// GPTQ checkpoint_format other than gptq / gptq_v2.
llvm::Expected<std::optional<HfQuantConfig>>
parseHfQuantConfig(const llvm::json::Object &cfg, llvm::StringRef cfgPath);

/// One tensor of a checkpoint as its importer found it.
struct CheckpointTensor {
  std::string file;  ///< absolute path
  std::string dtype; ///< safetensors dtype: "I32", "F16", "BF16", "F32", ...
  llvm::SmallVector<int64_t, 2> shape;
  uint64_t offset = 0; ///< absolute file offset of the first byte
  uint64_t bytes = 0;
};

/// Finds a tensor by checkpoint name (std::nullopt if absent).
using TensorLookup =
    llvm::function_ref<std::optional<CheckpointTensor>(llvm::StringRef)>;

/// Describes canonical linear `name` of logical shape [out, in] stored as
/// `<prefix>.qweight`, `.qzeros`, `.scales` (and GPTQ `.g_idx`) as a
/// kept-quantized WeightDesc; `rowTransforms` (RopeHalfToAdjacent) are
/// applied to every part after repacking. Reads only `g_idx` (to check it is
/// the trivial i / group_size: act-order checkpoints whose groups are not
/// contiguous are rejected, since Kiln's kernels need contiguous groups).
/// Errors name the file, the tensor and what was expected (dtype, shape,
/// missing tensor, g_idx value).
llvm::Expected<WeightDesc>
importHfQuantizedLinear(const HfQuantConfig &config, llvm::StringRef name,
                        llvm::StringRef prefix, llvm::ArrayRef<int64_t> shape,
                        TensorLookup lookup,
                        llvm::ArrayRef<WeightTransform> rowTransforms);

/// Whether a GGUF linear stored as `storage` is kept quantized.
bool keepGgufQuantized(StorageType storage);

/// Makes `w` (a GGUF linear [out, in] stored as Q4_0, or Q8_0 when
/// kKeepGgufQ8_0Quantized) kept-quantized: Q4_0 -> 4 bits, group 32, zero
/// points 8; Q8_0 -> 8 bits, group 32.
void makeGgufQuantized(WeightDesc &w);

/// Keeps `w` (a 2-D GGUF tensor in a GGML block format, [rows, cols]) in that
/// format: a Repack step of part Blocks, so the artifact holds its raw
/// blocks, [rows, cols / block_elems * block_bytes] bytes, and the graph reads
/// it with ops carrying a `format` attribute (kiln.linear, kiln.embedding,
/// kiln.logits).
void keepGgufBlocks(WeightDesc &w);

/// Undoes makeGgufQuantized on every linear of `model` that it repacked
/// (Q4_0 / Q8_0 into W4A16 / W8A16) and whose rows need no reordering:
/// keepGgufBlocks instead, so that kernels that read the GGML formats
/// themselves (the int8-activation recipe) get the blocks as stored.
void keepGgufLinearsAsBlocks(ModelDesc &model);

/// Whether `model` has linears keepGgufLinearsAsBlocks would change.
bool hasRepackedGgufLinears(const ModelDesc &model);

/// The recipe name an artifact records for a model whose linears are kept
/// quantized from its checkpoint: "prequantized-<format>-w<bits>[g<group>]"
/// (the group size only when all such linears share it), e.g.
/// "prequantized-gptq-w4g32", "prequantized-q4_0-w4g32"; "" if none is.
std::string prequantizedRecipe(const ModelDesc &model);

/// The Repack step of `w`'s recipe (always the first transform), if any.
const WeightTransform *repackStep(const WeightDesc &w);

/// What a repacked part becomes in weights.bin.
struct RepackedLayout {
  llvm::SmallVector<int64_t, 2> shape; ///< e.g. [out, ceil(in/2)]
  std::string dtype;                   ///< "i8" or "f32"
  uint64_t bytes = 0;
};

/// The Kiln layout of `w`, which must have a Repack step.
llvm::Expected<RepackedLayout> repackedLayout(const WeightDesc &w);

/// Reads `w`'s source tensor, converts it exactly into its Kiln part
/// (little-endian bytes, repackedLayout(w).bytes of them) and applies the
/// row transforms after the Repack step. Errors name the file and tensor:
/// stored byte counts that do not match, truncated files, non-finite scales,
/// GPTQ v1 zero points that wrapped (stored nibble 15 = zero point 16).
llvm::Error materializeRepacked(const WeightDesc &w, std::vector<char> &out);

} // namespace mlir::kiln

#endif // KILN_DIALECTS_KILN_IMPORT_PREQUANTIZED_H

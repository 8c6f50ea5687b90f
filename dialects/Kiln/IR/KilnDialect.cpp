//===- KilnDialect.cpp - kiln dialect registration and types --------------===//

#include "dialects/Kiln/IR/KilnDialect.h"
#include "dialects/Kiln/IR/KilnOps.h"
#include "dialects/Kiln/IR/KilnTypes.h"
#include "kiln_rt/block_formats.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/CheckedArithmetic.h"

using namespace mlir;
using namespace mlir::kiln;

#include "dialects/Kiln/IR/KilnDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/Kiln/IR/KilnTypes.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Kiln/IR/KilnAttrs.cpp.inc"

void KilnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Kiln/IR/KilnOps.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/Kiln/IR/KilnTypes.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Kiln/IR/KilnAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// KVCacheType
//===----------------------------------------------------------------------===//

LogicalResult KVCacheType::verify(function_ref<InFlightDiagnostic()> emitError,
                                  int64_t numLayers, int64_t maxSeq,
                                  int64_t numKvHeads, int64_t headDim,
                                  Type elementType, int64_t summaryBlock) {
  if (numLayers <= 0 || maxSeq <= 0 || numKvHeads <= 0 || headDim <= 0)
    return emitError() << "kv_cache dimensions must be positive, got <"
                       << numLayers << ", " << maxSeq << ", " << numKvHeads
                       << ", " << headDim << ">";
  if (!isa<FloatType>(elementType) && !elementType.isInteger(8))
    return emitError() << "kv_cache element type must be a float type or i8, "
                          "got "
                       << elementType;
  // getLayerBytes() and getSizeInBytes() (and the offsets lowered from them)
  // use plain int64_t arithmetic: bound the total here, overflow-checked.
  bool quantized = elementType.isInteger(8) || isa<Float8E4M3FNType>(elementType);
  int64_t elemBytes = std::max<int64_t>(1, elementType.getIntOrFloatBitWidth() / 8);
  std::optional<int64_t> row = llvm::checkedMul(numKvHeads, headDim);
  if (row)
    row = llvm::checkedMul(*row, elemBytes);
  if (row && quantized)
    row = llvm::checkedAdd(*row, llvm::checkedMul(numKvHeads, int64_t(4)).value_or(-1));
  std::optional<int64_t> total = row;
  for (int64_t factor : {maxSeq, int64_t(2), numLayers})
    if (total && *total >= 0)
      total = llvm::checkedMul(*total, factor);
  if (summaryBlock < 0 || summaryBlock > 4096)
    return emitError() << "kv_cache summary pages must be in [1, 4096] "
                          "positions, got "
                       << summaryBlock;
  if (summaryBlock > 0 && quantized)
    return emitError() << "kv_cache key summaries need a float cache, got "
                       << elementType;
  // The summaries: 2 x ceil(maxSeq / B) x kv heads x head_dim f32 per
  // layer, at most as many values as the keys themselves (B >= 1).
  if (total && summaryBlock > 0)
    total = llvm::checkedMul(*total, int64_t(3));
  if (!total || *total < 0 || *total > kMaxKVCacheBytes)
    return emitError() << "kv_cache of " << numLayers << " layers x "
                       << maxSeq << " tokens x " << numKvHeads
                       << " kv heads x " << headDim << " " << elementType
                       << " needs more than 2^48 bytes";
  return success();
}

LogicalResult
PagedKVCacheType::verify(function_ref<InFlightDiagnostic()> emitError,
                         int64_t numLayers, int64_t numKvHeads, int64_t headDim,
                         Type elementType) {
  if (numLayers <= 0 || numKvHeads <= 0 || headDim <= 0)
    return emitError() << "paged_kv_cache dimensions must be positive, got <"
                       << numLayers << ", " << numKvHeads << ", " << headDim
                       << ">";
  if (!elementType.isF32() && !elementType.isF16() && !elementType.isBF16() &&
      !elementType.isInteger(8) && !isa<Float8E4M3FNType>(elementType))
    return emitError() << "paged_kv_cache element type must be f32, f16, "
                          "bf16, i8 or f8E4M3FN, got "
                       << elementType;
  if (!llvm::checkedMul(numKvHeads, headDim) ||
      numKvHeads * headDim > (int64_t(1) << 24))
    return emitError() << "paged_kv_cache rows of " << numKvHeads << " x "
                       << headDim << " elements exceed 2^24";
  return success();
}

int64_t KVCacheType::getSummaryOffset() const {
  int64_t elemBytes = getElementType().getIntOrFloatBitWidth() / 8;
  int64_t data = 2 * getMaxSeq() * getNumKvHeads() * getHeadDim() * elemBytes;
  if (isQuantized())
    data += 2 * getMaxSeq() * getNumKvHeads() * 4;
  return data;
}

int64_t KVCacheType::getLayerBytes() const {
  return getSummaryOffset() +
         2 * getSummaryPages() * getNumKvHeads() * getHeadDim() * 4;
}

int64_t KVCacheType::getSizeInBytes() const {
  return getNumLayers() * getLayerBytes();
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

LogicalResult
WeightSourceAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                         StringRef file, StringRef tensor, StringRef storage,
                         DenseI64ArrayAttr shape, uint64_t offset,
                         uint64_t bytes, uint64_t seed,
                         FloatAttr scale, FloatAttr center) {
  if (!llvm::is_contained(
          ArrayRef<StringRef>{"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1",
                              "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k",
                              "q6_k", "i32", "synthetic"},
          storage))
    return emitError() << "unknown weight storage type '" << storage
                       << "' (expected f32, f16, bf16, a GGML block format "
                          "q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, "
                          "q5_k, q6_k, i32 or synthetic)";
  if (!shape || llvm::any_of(shape.asArrayRef(), [](int64_t d) { return d <= 0; }))
    return emitError() << "weight source of '" << tensor
                       << "' needs a shape of positive dimensions";
  if (storage != "synthetic" && file.empty())
    return emitError() << "weight source of '" << tensor
                       << "' names no file";
  return success();
}

/// `repack` (pre-quantized checkpoints, dialects/Kiln/Import/Prequantized.h):
/// `format` gptq | gptq_v2 | awq | q4_0 | q8_0, `part` qweight | scales |
/// zeros, `bits` 4 (8 for q8_0), `group_size`, `rows` and `cols` (the
/// linear's out and in features). Or `part` blocks: a GGUF tensor in GGML
/// block format `format` (q4_0 ... q6_k) kept as stored, `rows` and `cols`
/// its logical shape.
static LogicalResult
verifyRepackParams(function_ref<InFlightDiagnostic()> emitError,
                   DictionaryAttr params) {
  auto str = [&](StringRef key) {
    auto a = params ? params.getAs<StringAttr>(key) : StringAttr();
    return a ? a.getValue() : StringRef();
  };
  auto num = [&](StringRef key) -> std::optional<int64_t> {
    auto a = params ? params.getAs<IntegerAttr>(key) : IntegerAttr();
    if (!a)
      return std::nullopt;
    return a.getInt();
  };
  StringRef format = str("format"), part = str("part");
  if (part == "blocks") {
    if (kiln_block_format_from_name(format.str().c_str()) == 0)
      return emitError() << "'repack' of part \"blocks\" needs a GGML block "
                            "'format' (q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, "
                            "q3_k, q4_k, q5_k or q6_k), got '"
                         << format << "'";
    std::optional<int64_t> rows = num("rows"), cols = num("cols");
    if (!rows || !cols || *rows <= 0 || *cols <= 0)
      return emitError() << "'repack' transform needs positive 'rows' and "
                            "'cols'";
    return success();
  }
  if (!llvm::is_contained(
          ArrayRef<StringRef>{"gptq", "gptq_v2", "awq", "q4_0", "q8_0"},
          format))
    return emitError() << "'repack' transform needs 'format' = \"gptq\", "
                          "\"gptq_v2\", \"awq\", \"q4_0\" or \"q8_0\"";
  if (part != "qweight" && part != "scales" && part != "zeros")
    return emitError() << "'repack' transform needs 'part' = \"qweight\", "
                          "\"scales\", \"zeros\" or \"blocks\"";
  std::optional<int64_t> bits = num("bits"), group = num("group_size"),
                         rows = num("rows"), cols = num("cols");
  int64_t wantBits = format == "q8_0" ? 8 : 4;
  if (bits != wantBits)
    return emitError() << "'repack' of format '" << format
                       << "' needs 'bits' = " << wantBits;
  if (!group || *group <= 0 || (wantBits == 4 && *group % 2))
    return emitError() << "'repack' transform needs a positive"
                       << (wantBits == 4 ? " even" : "") << " 'group_size'";
  if (!rows || !cols || *rows <= 0 || *cols <= 0)
    return emitError() << "'repack' transform needs positive 'rows' and "
                          "'cols'";
  if (part == "zeros" && wantBits != 4)
    return emitError() << "only 4-bit 'repack' has zero points";
  return success();
}

LogicalResult
SparseAttentionAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                            StringRef mode, FloatAttr gamma, int64_t block,
                            int64_t sink, int64_t local, int64_t minBudget,
                            int64_t maxBudget, int64_t minTokens,
                            int64_t stride, DenseI64ArrayAttr streaming) {
  if (mode != "flex" && mode != "antidiag")
    return emitError() << "sparse attention mode must be \"flex\" or "
                          "\"antidiag\", got \""
                       << mode << "\"";
  if (mode == "flex" && stride != 0)
    return emitError() << "sparse attention mode \"flex\" (pooled keys) "
                          "takes no stride, got "
                       << stride;
  if (mode == "antidiag" && (stride < 1 || stride > block))
    return emitError() << "sparse attention mode \"antidiag\" needs a "
                          "stride in [1, block = "
                       << block << "], got " << stride;
  const double g = gamma ? gamma.getValueAsDouble() : -1.0;
  if (!(g > 0.0 && g <= 1.0))
    return emitError() << "sparse attention gamma must be in (0, 1], got "
                       << g;
  if (block < 1 || block > 4096)
    return emitError() << "sparse attention block must be in [1, 4096] "
                          "positions, got "
                       << block;
  if (sink < 0 || local < 1)
    return emitError() << "sparse attention needs sink >= 0 and local >= 1 "
                          "blocks (the diagonal's), got sink "
                       << sink << " and local " << local;
  if (minBudget < 0 || maxBudget < 0 || minTokens < 0)
    return emitError() << "sparse attention min_budget, max_budget and "
                          "min_tokens must not be negative";
  if (maxBudget > 0 && maxBudget < minBudget)
    return emitError() << "sparse attention max_budget (" << maxBudget
                       << ") is below min_budget (" << minBudget << ")";
  if (streaming) {
    int64_t previous = -1;
    for (int64_t g : streaming.asArrayRef()) {
      if (g <= previous || g >= 64)
        return emitError() << "sparse attention streaming heads must be "
                              "ascending KV head indices in [0, 64), got "
                           << g << (g <= previous ? " after " : "")
                           << (g <= previous ? std::to_string(previous)
                                             : std::string());
      previous = g;
    }
  }
  return success();
}

uint64_t SparseAttentionAttr::getStreamingMask() const {
  uint64_t mask = 0;
  if (DenseI64ArrayAttr streaming = getStreaming())
    for (int64_t g : streaming.asArrayRef())
      if (g >= 0 && g < 64)
        mask |= uint64_t(1) << g;
  return mask;
}

LogicalResult
WeightTransformAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                            StringRef kind, DictionaryAttr params) {
  if (kind == "dequantize")
    return success();
  if (kind == "rope_half_to_adjacent") {
    auto heads = params ? params.getAs<IntegerAttr>("heads") : IntegerAttr();
    if (!heads || heads.getInt() <= 0)
      return emitError()
             << "'rope_half_to_adjacent' transform needs a positive 'heads'";
    return success();
  }
  if (kind == "quantize") {
    auto bits = params ? params.getAs<IntegerAttr>("bits") : IntegerAttr();
    auto group = params ? params.getAs<IntegerAttr>("group_size") : IntegerAttr();
    auto part = params ? params.getAs<StringAttr>("part") : StringAttr();
    if (!bits || (bits.getInt() != 8 && bits.getInt() != 4))
      return emitError() << "'quantize' transform needs 'bits' = 8 or 4";
    if (!group || group.getInt() < 0)
      return emitError()
             << "'quantize' transform needs a non-negative 'group_size'";
    if (bits.getInt() == 4 && (group.getInt() == 0 || group.getInt() % 2))
      return emitError() << "4-bit 'quantize' needs a positive even "
                            "'group_size', got "
                         << group.getInt();
    if (!part || (part.getValue() != "qweight" && part.getValue() != "scales" &&
                  part.getValue() != "zeros"))
      return emitError() << "'quantize' transform needs 'part' = \"qweight\", "
                            "\"scales\" or \"zeros\"";
    if (part.getValue() == "zeros" && bits.getInt() != 4)
      return emitError() << "only 4-bit 'quantize' has zero points";
    auto method = params.getAs<StringAttr>("method");
    if (method && method.getValue() != "rtn" && method.getValue() != "gptq")
      return emitError() << "'quantize' transform 'method' must be \"rtn\" "
                            "or \"gptq\", got \""
                         << method.getValue() << "\"";
    if (method && method.getValue() == "gptq") {
      if (bits.getInt() != 4)
        return emitError() << "GPTQ 'quantize' is implemented for 4 bits";
      auto calib = params.getAs<StringAttr>("calibration");
      auto hessian = params.getAs<StringAttr>("hessian");
      if (!calib || calib.getValue().empty() || !hessian ||
          hessian.getValue().empty())
        return emitError() << "GPTQ 'quantize' needs non-empty 'calibration' "
                              "(file) and 'hessian' (tensor) strings";
      auto actOrder = params.get("act_order");
      if (actOrder && !isa<BoolAttr>(actOrder))
        return emitError() << "GPTQ 'act_order' must be a bool";
      auto damp = params.getAs<FloatAttr>("damp");
      if (params.get("damp") &&
          (!damp || !(damp.getValueAsDouble() >= 0.0)))
        return emitError() << "GPTQ 'damp' must be a non-negative float";
    }
    return success();
  }
  if (kind == "scale") {
    auto axis = params ? params.getAs<IntegerAttr>("axis") : IntegerAttr();
    auto factors =
        params ? params.getAs<DenseFPElementsAttr>("factors") : DenseFPElementsAttr();
    if (!axis || (axis.getInt() != 0 && axis.getInt() != 1))
      return emitError() << "'scale' transform needs 'axis' = 0 (rows or "
                            "vector elements) or 1 (columns)";
    if (!factors || factors.getType().getRank() != 1 ||
        !factors.getElementType().isF32() || factors.getNumElements() == 0)
      return emitError() << "'scale' transform needs 'factors', a non-empty "
                            "1-D dense f32 tensor";
    for (const APFloat &f : factors.getValues<APFloat>())
      if (!f.isFiniteNonZero())
        return emitError() << "'scale' transform factors must be finite and "
                              "non-zero";
    return success();
  }
  if (kind == "slice") {
    auto axis = params ? params.getAs<IntegerAttr>("axis") : IntegerAttr();
    auto offset = params ? params.getAs<IntegerAttr>("offset") : IntegerAttr();
    auto size = params ? params.getAs<IntegerAttr>("size") : IntegerAttr();
    if (!axis || (axis.getInt() != 0 && axis.getInt() != 1))
      return emitError() << "'slice' transform needs 'axis' = 0 (rows or "
                            "vector elements) or 1 (columns)";
    if (!offset || offset.getInt() < 0 || !size || size.getInt() < 1)
      return emitError() << "'slice' transform needs 'offset' >= 0 and "
                            "'size' >= 1";
    return success();
  }
  if (kind == "repack")
    return verifyRepackParams(emitError, params);
  if (kind == "concat_rows") {
    auto parts = params ? params.getAs<ArrayAttr>("parts") : ArrayAttr();
    if (!parts || parts.empty())
      return emitError() << "'concat_rows' transform needs 'parts', a "
                            "non-empty array";
    for (Attribute p : parts) {
      auto part = dyn_cast<DictionaryAttr>(p);
      auto type = part ? part.getAs<TypeAttr>("type") : TypeAttr();
      if (!part || !type || !isa<RankedTensorType>(type.getValue()) ||
          !part.getAs<WeightSourceAttr>("source") ||
          !part.getAs<ArrayAttr>("transforms") ||
          !llvm::all_of(part.getAs<ArrayAttr>("transforms"),
                        llvm::IsaPred<WeightTransformAttr>))
        return emitError() << "'concat_rows' parts must be dictionaries "
                              "{type = tensor type, source = #kiln.source, "
                              "transforms = [#kiln.transform...]}";
    }
    return success();
  }
  return emitError() << "unknown weight transform '" << kind << "'";
}

//===- KilnOps.cpp - kiln dialect operation verifiers ---------------------===//
//
// Verifiers check what ODS constraints cannot: shape agreement between
// operands, attributes and the KV cache. Messages follow MLIR style:
// lowercase, no trailing period, values quoted.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kiln/IR/KilnOps.h"
#include "dialects/Kiln/IR/PipelineStage.h"
#include "kiln_rt/block_formats.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace mlir::kiln;

/// True when two dimensions may be equal (either is dynamic or both match).
static bool compatibleDim(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

static std::string dimStr(int64_t d) {
  return ShapedType::isDynamic(d) ? std::string("?") : std::to_string(d);
}

static LogicalResult verifySameElementType(Operation *op, Type a, Type b,
                                           StringRef aName, StringRef bName) {
  Type ea = cast<ShapedType>(a).getElementType();
  Type eb = cast<ShapedType>(b).getElementType();
  if (ea != eb)
    return op->emitOpError() << "expects " << aName << " and " << bName
                             << " to have the same element type, got " << ea
                             << " and " << eb;
  return success();
}

/// Checks a weight kept in GGML block format `format` (the optional `format`
/// attribute of kiln.embedding / kiln.linear / kiln.logits): a known format,
/// an i8 weight whose rows hold `cols` elements as whole blocks, and f32
/// values on the other side (`valueType`: the activations the kernels read
/// or write; block kernels compute in float32).
static LogicalResult verifyBlockWeight(Operation *op, StringRef format,
                                       RankedTensorType weight, int64_t cols,
                                       Type valueType, StringRef what) {
  int64_t id = kiln_block_format_from_name(format.str().c_str());
  if (id == 0)
    return op->emitOpError()
           << "unknown block format '" << format
           << "' (expected q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, "
              "q5_k or q6_k)";
  if (!weight.getElementType().isInteger(8))
    return op->emitOpError() << "expects the " << what << " in block format '"
                             << format << "' to be i8 bytes, got "
                             << weight.getElementType();
  int64_t elems = kiln_block_elems(id), bytes = kiln_block_bytes(id);
  if (!ShapedType::isDynamic(cols)) {
    if (cols % elems != 0)
      return op->emitOpError() << "expects a row length that is a multiple of "
                               << elems << " (the block length of '" << format
                               << "'), got " << cols;
    if (!compatibleDim(weight.getDimSize(1), cols / elems * bytes))
      return op->emitOpError()
             << "expects " << what << " rows of " << cols / elems * bytes
             << " bytes (" << cols / elems << " blocks of " << bytes
             << " bytes for " << cols << " elements), got "
             << dimStr(weight.getDimSize(1));
  }
  if (!valueType.isF32())
    return op->emitOpError() << "block-format weights need f32 activations, got "
                             << valueType;
  return success();
}

/// Checks that `result` has the same number of tokens (dim 0) as `input`.
static LogicalResult verifyTokenDim(Operation *op, RankedTensorType input,
                                    RankedTensorType result) {
  if (!compatibleDim(input.getDimSize(0), result.getDimSize(0)))
    return op->emitOpError()
           << "expects the result to have as many tokens as the input ("
           << dimStr(input.getDimSize(0)) << "), got "
           << dimStr(result.getDimSize(0));
  return success();
}

//===----------------------------------------------------------------------===//
// WeightOp / WeightRefOp
//===----------------------------------------------------------------------===//

/// Bytes of a static `type`, overflow-checked; std::nullopt past 2^48 (the
/// lowering, the weight writer and the runtime use plain int64_t sizes).
static std::optional<int64_t> checkedStaticBytes(ShapedType type) {
  int64_t bytes =
      std::max<int64_t>(1, llvm::divideCeil(type.getElementTypeBitWidth(), 8));
  for (int64_t d : type.getShape()) {
    std::optional<int64_t> r = llvm::checkedMul(bytes, d);
    if (!r || *r > (int64_t(1) << 48))
      return std::nullopt;
    bytes = *r;
  }
  return bytes;
}

/// Checks that `source` and `transforms` produce a weight of `type` (for a
/// kiln.weight, and for each part of its "concat_rows" step). `emitOpError`
/// prefixes the messages with the part being checked.
static LogicalResult
verifyWeightRecipe(RankedTensorType type, WeightSourceAttr source,
                   ArrayAttr transforms,
                   function_ref<InFlightDiagnostic()> emitOpError) {
  if (!type.hasStaticShape())
    return emitOpError() << "expects a static weight shape, got " << type;
  if (!checkedStaticBytes(type))
    return emitOpError() << "weight of type " << type
                         << " needs more than 2^48 bytes";
  ArrayRef<int64_t> sourceShape = source.getShape().asArrayRef();
  // The shape the recipe produces: the source's, unless a quantize step
  // splits it into integer values (same shape) and per-row scales.
  SmallVector<int64_t, 2> produced(sourceShape.begin(), sourceShape.end());
  // The float tensor that rope / scale / quantize act on: the source's,
  // narrowed by any 'slice' (tensor parallelism, kiln-partition).
  SmallVector<int64_t, 2> floatShape(sourceShape.begin(), sourceShape.end());
  bool quantizedToInt = false, repacked = false, quantized = false;
  // A GGML block-format tensor kept as stored (a "repack" of part
  // "blocks"): its format's id, 0 otherwise.
  int64_t blockFormat = 0;
  for (auto [index, a] : llvm::enumerate(transforms)) {
    auto t = cast<WeightTransformAttr>(a);
    if (t.getKind() == "concat_rows") {
      // Horizontal fusion: the rows of each part, materialized from its own
      // recipe, follow the rows produced so far (docs/fusion.md).
      if (index + 1 != transforms.size())
        return emitOpError() << "'concat_rows' must be the last transform";
      Type element = type.getElementType();
      for (auto [i, p] :
           llvm::enumerate(t.getParams().getAs<ArrayAttr>("parts"))) {
        auto part = cast<DictionaryAttr>(p);
        auto partType =
            cast<RankedTensorType>(part.getAs<TypeAttr>("type").getValue());
        if (llvm::any_of(part.getAs<ArrayAttr>("transforms"), [](Attribute a) {
              return cast<WeightTransformAttr>(a).getKind() == "concat_rows";
            }))
          return emitOpError() << "'concat_rows' part #" << i
                               << " is itself a concatenation (the parts of "
                                  "a concat_rows are plain recipes)";
        auto partDiag = [&, i = i]() {
          InFlightDiagnostic d = emitOpError();
          d << "'concat_rows' part #" << i << ": ";
          return d;
        };
        if (failed(verifyWeightRecipe(partType,
                                      part.getAs<WeightSourceAttr>("source"),
                                      part.getAs<ArrayAttr>("transforms"),
                                      partDiag)))
          return failure();
        if (partType.getElementType() != element ||
            partType.getRank() != int64_t(produced.size()) ||
            partType.getShape().drop_front() !=
                ArrayRef<int64_t>(produced).drop_front())
          return emitOpError()
                 << "'concat_rows' part #" << i << " of type " << partType
                 << " does not continue the rows of shape ["
                 << llvm::join(llvm::map_range(produced, dimStr), ", ")
                 << "] x " << element;
        produced[0] += partType.getDimSize(0);
      }
      continue;
    }
    if (t.getKind() == "slice") {
      int64_t axis = t.getParams().getAs<IntegerAttr>("axis").getInt();
      int64_t offset = t.getParams().getAs<IntegerAttr>("offset").getInt();
      int64_t size = t.getParams().getAs<IntegerAttr>("size").getInt();
      // A slice cuts the float tensor, or the rows of GGML blocks kept as
      // stored (in the tensor's element coordinates, after their repack):
      // never a quantized or repacked part.
      if (quantized || (repacked && !blockFormat))
        return emitOpError() << "'slice' must come before 'quantize' and "
                                "cannot follow 'repack' (slice the float "
                                "weight, or GGML blocks kept as stored)";
      if (axis >= int64_t(floatShape.size()) ||
          offset + size > floatShape[axis])
        return emitOpError() << "'slice' [" << offset << ", " << offset + size
                             << ") along axis " << axis
                             << " does not fit shape ["
                             << llvm::join(llvm::map_range(floatShape, dimStr),
                                           ", ")
                             << "]";
      floatShape[axis] = size;
      produced = floatShape;
      if (!blockFormat)
        continue;
      // Blocks: whole rows, or a range of whole blocks of every row.
      const int64_t elems = kiln_block_elems(blockFormat);
      if (axis == 1 && (offset % elems != 0 || size % elems != 0))
        return emitOpError()
               << "'slice' [" << offset << ", " << offset + size
               << ") along axis 1 of " << kiln_block_format_name(blockFormat)
               << " blocks must hold whole blocks of " << elems << " elements";
      produced = {floatShape[0],
                  floatShape[1] / elems * kiln_block_bytes(blockFormat)};
      continue;
    }
    if (t.getKind() == "quantize") {
      if (floatShape.size() != 2)
        return emitOpError() << "'quantize' needs a matrix source, got shape ["
                             << llvm::join(llvm::map_range(floatShape, dimStr), ", ")
                             << "]";
      StringRef part = t.getParams().getAs<StringAttr>("part").getValue();
      int64_t bits = t.getParams().getAs<IntegerAttr>("bits").getInt();
      int64_t group = t.getParams().getAs<IntegerAttr>("group_size").getInt();
      int64_t rows = floatShape[0], cols = floatShape[1];
      quantized = true;
      if (part == "qweight") {
        produced = {rows, bits == 4 ? llvm::divideCeilSigned(cols, int64_t(2)) : cols};
        quantizedToInt = true;
      } else if (group == 0) {
        produced = {rows};
      } else {
        produced = {rows, llvm::divideCeilSigned(cols, group)};
        quantizedToInt = part == "zeros";
      }
      continue;
    }
    if (t.getKind() == "repack") {
      // A pre-quantized checkpoint tensor becomes one part of Kiln's
      // quantized-linear layout for a [rows, cols] weight. It reads the
      // stored tensor whole, so it is the first step: a slice of blocks
      // comes after it.
      if (index != 0)
        return emitOpError() << "'repack' must be the first transform (it "
                                "reads the stored tensor whole; row "
                                "reorderings and slices follow it)";
      DictionaryAttr p = t.getParams();
      StringRef part = p.getAs<StringAttr>("part").getValue();
      if (part == "blocks") {
        // A GGML block-format tensor kept as stored: rows of raw blocks.
        StringRef format = p.getAs<StringAttr>("format").getValue();
        int64_t id = kiln_block_format_from_name(format.str().c_str());
        int64_t rows = p.getAs<IntegerAttr>("rows").getInt();
        int64_t cols = p.getAs<IntegerAttr>("cols").getInt();
        if (source.getStorage() != format)
          return emitOpError() << "keeps blocks of format '" << format
                               << "' but its source is stored as '"
                               << source.getStorage() << "'";
        if (sourceShape != ArrayRef<int64_t>{rows, cols} ||
            cols % kiln_block_elems(id) != 0)
          return emitOpError()
                 << "'repack' of blocks: rows " << rows << " x cols " << cols
                 << " must be the source shape and whole " << format
                 << " blocks of " << kiln_block_elems(id) << " elements";
        produced = {rows, cols / kiln_block_elems(id) * kiln_block_bytes(id)};
        quantizedToInt = true;
        repacked = true;
        blockFormat = id;
        continue;
      }
      int64_t bits = p.getAs<IntegerAttr>("bits").getInt();
      int64_t group = p.getAs<IntegerAttr>("group_size").getInt();
      int64_t rows = p.getAs<IntegerAttr>("rows").getInt();
      int64_t cols = p.getAs<IntegerAttr>("cols").getInt();
      produced = {
          rows,
          part == "qweight"
              ? (bits == 4 ? llvm::divideCeilSigned(cols, int64_t(2)) : cols)
              : llvm::divideCeilSigned(cols, group)};
      quantizedToInt = part != "scales";
      repacked = true;
      continue;
    }
    if (t.getKind() == "scale") {
      // Applies to the source-shaped tensor, before any quantize step.
      int64_t axis = t.getParams().getAs<IntegerAttr>("axis").getInt();
      int64_t n = t.getParams().getAs<DenseElementsAttr>("factors").getNumElements();
      if (produced != floatShape)
        return emitOpError() << "'scale' must come before 'quantize'";
      bool fits = floatShape.size() <= 2 &&
                  (axis == 0 ? n == floatShape[0]
                             : floatShape.size() == 2 && n == floatShape[1]);
      if (!fits)
        return emitOpError() << "'scale' with " << n << " factors along axis "
                             << axis << " does not fit shape ["
                             << llvm::join(llvm::map_range(floatShape, dimStr), ", ")
                             << "]";
      continue;
    }
    if (t.getKind() != "rope_half_to_adjacent")
      continue;
    // Applies to the source-shaped tensor, before any quantize step (or to
    // the repacked rows, one per output feature).
    ArrayRef<int64_t> rowShape =
        repacked ? ArrayRef<int64_t>(produced) : ArrayRef<int64_t>(floatShape);
    int64_t heads = t.getParams().getAs<IntegerAttr>("heads").getInt();
    if (rowShape.empty() || rowShape.size() > 2 || rowShape[0] % heads != 0 ||
        (rowShape[0] / heads) % 2 != 0)
      return emitOpError() << "'rope_half_to_adjacent' with " << heads
                           << " heads needs a matrix or vector whose rows "
                              "split into heads of even size, got shape ["
                           << llvm::join(llvm::map_range(rowShape, dimStr),
                                         ", ")
                           << "]";
  }
  if (ArrayRef<int64_t>(produced) != type.getShape())
    return emitOpError() << "recipe produces shape ["
                         << llvm::join(llvm::map_range(produced, dimStr), ", ")
                         << "] but the weight is declared " << type;
  if (quantizedToInt != type.getElementType().isInteger(8))
    return emitOpError() << "an i8 weight must end with a 'quantize' "
                            "transform producing \"qweight\" or \"zeros\", "
                            "and only it; got "
                         << type;
  return success();
}

LogicalResult WeightOp::verify() {
  return verifyWeightRecipe(getTensorType(), getSource(), getTransforms(),
                            [&] { return emitOpError(); });
}

LogicalResult WeightRefOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto weight = symbols.lookupNearestSymbolFrom<WeightOp>(*this, getNameAttr());
  if (!weight)
    return emitOpError() << "'" << getName()
                         << "' does not reference a kiln.weight";
  if (weight.getType() != getType())
    return emitOpError() << "result type " << getType()
                         << " does not match the type " << weight.getType()
                         << " of weight '" << getName() << "'";
  return success();
}

//===----------------------------------------------------------------------===//
// Compute ops
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  auto tokens = cast<RankedTensorType>(getTokens().getType());
  auto table = cast<RankedTensorType>(getTable().getType());
  auto result = cast<RankedTensorType>(getResult().getType());
  if (!compatibleDim(tokens.getDimSize(0), result.getDimSize(0)))
    return emitOpError() << "expects one result row per token ("
                         << dimStr(tokens.getDimSize(0)) << "), got "
                         << dimStr(result.getDimSize(0));
  if (std::optional<StringRef> format = getFormat())
    return verifyBlockWeight(*this, *format, table, result.getDimSize(1),
                             result.getElementType(), "table");
  if (!compatibleDim(table.getDimSize(1), result.getDimSize(1)))
    return emitOpError() << "expects the result width "
                         << dimStr(result.getDimSize(1))
                         << " to equal the embedding width "
                         << dimStr(table.getDimSize(1));
  return verifySameElementType(*this, table, result, "table", "result");
}

LogicalResult RmsNormOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  auto weight = cast<RankedTensorType>(getWeight().getType());
  if (!compatibleDim(input.getDimSize(1), weight.getDimSize(0)))
    return emitOpError() << "expects the weight length "
                         << dimStr(weight.getDimSize(0))
                         << " to equal the innermost input dimension "
                         << dimStr(input.getDimSize(1));
  if (!(getEpsilon().convertToFloat() > 0.0f))
    return emitOpError() << "expects a positive epsilon, got "
                         << getEpsilon().convertToFloat();
  return verifySameElementType(*this, input, weight, "input", "weight");
}

/// act_quant of a kiln.linear / kiln.logits: "int8_per_block", on a weight
/// kept in a GGML block format.
static LogicalResult verifyBlockActQuant(Operation *op,
                                         std::optional<StringRef> actQuant,
                                         std::optional<StringRef> format) {
  if (!actQuant)
    return success();
  if (*actQuant != "int8_per_block")
    return op->emitOpError() << "unknown act_quant '" << *actQuant
                             << "' (expected int8_per_block)";
  if (!format)
    return op->emitOpError()
           << "act_quant 'int8_per_block' needs a weight in a GGML block "
              "format (a 'format' attribute)";
  return success();
}

LogicalResult LinearOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  auto weight = cast<RankedTensorType>(getWeight().getType());
  auto result = cast<RankedTensorType>(getResult().getType());
  if (failed(verifyBlockActQuant(*this, getActQuant(), getFormat())))
    return failure();
  if (std::optional<StringRef> format = getFormat()) {
    if (failed(verifyBlockWeight(*this, *format, weight, input.getDimSize(1),
                                 input.getElementType(), "weight")))
      return failure();
    if (!compatibleDim(result.getDimSize(1), weight.getDimSize(0)))
      return emitOpError() << "expects the result width "
                           << dimStr(result.getDimSize(1))
                           << " to equal the weight's out_features "
                           << dimStr(weight.getDimSize(0));
    if (failed(verifyTokenDim(*this, input, result)))
      return failure();
    return verifySameElementType(*this, input, result, "input", "result");
  }
  if (!compatibleDim(input.getDimSize(1), weight.getDimSize(1)))
    return emitOpError() << "expects the input width "
                         << dimStr(input.getDimSize(1))
                         << " to equal the weight's in_features "
                         << dimStr(weight.getDimSize(1));
  if (!compatibleDim(result.getDimSize(1), weight.getDimSize(0)))
    return emitOpError() << "expects the result width "
                         << dimStr(result.getDimSize(1))
                         << " to equal the weight's out_features "
                         << dimStr(weight.getDimSize(0));
  if (failed(verifyTokenDim(*this, input, result)))
    return failure();
  if (failed(verifySameElementType(*this, input, result, "input", "result")))
    return failure();
  return verifySameElementType(*this, input, weight, "input", "weight");
}

LogicalResult QuantizedLinearOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  auto qweight = cast<RankedTensorType>(getQweight().getType());
  auto scales = cast<RankedTensorType>(getScales().getType());
  auto result = cast<RankedTensorType>(getResult().getType());
  int64_t bits = getBits(), group = getGroupSize();
  if (bits != 8 && bits != 4)
    return emitOpError() << "supports 8-bit and 4-bit weights, got " << bits
                         << " bits";
  if (bits == 4 && (group <= 0 || group % 2 != 0))
    return emitOpError() << "4-bit weights need a positive even group_size, got "
                         << group;
  if (bits == 8 && group < 0)
    return emitOpError() << "8-bit weights need group_size 0 (per channel) or "
                            "a positive group size, got "
                         << group;
  if (StringRef act = getActQuant().value_or("none"); act != "none") {
    if (act != "int8_per_token" && act != "int8_per_tensor")
      return emitOpError() << "unknown act_quant '" << act
                           << "' (expected none, int8_per_token or "
                              "int8_per_tensor)";
    if (bits != 8 || group != 0)
      return emitOpError() << "int8 activations (act_quant '" << act
                           << "') need 8-bit per-channel weights (group_size "
                              "0), got "
                           << bits << " bits, group_size " << group;
    bool perTensor = act == "int8_per_tensor";
    if (perTensor != getActScale().has_value())
      return emitOpError() << (perTensor ? "act_quant 'int8_per_tensor' needs "
                                           "a static act_scale"
                                         : "act_scale is only meaningful with "
                                           "act_quant 'int8_per_tensor'");
    if (perTensor && !(getActScale()->convertToFloat() > 0.0f))
      return emitOpError() << "act_scale must be positive, got "
                           << getActScale()->convertToFloat();
  } else if (getActScale()) {
    return emitOpError() << "act_scale is only meaningful with act_quant "
                            "'int8_per_tensor'";
  }
  if ((bits == 4) != static_cast<bool>(getZeroPoints()))
    return emitOpError() << (bits == 4 ? "4-bit weights need zero_points"
                                       : "8-bit weights are symmetric: no "
                                         "zero_points");
  int64_t out = qweight.getDimSize(0), in = input.getDimSize(1);
  int64_t packed = qweight.getDimSize(1);
  int64_t expectedPacked =
      ShapedType::isDynamic(in) ? ShapedType::kDynamic
                                : (bits == 4 ? llvm::divideCeil(in, 2) : in);
  if (!compatibleDim(packed, expectedPacked))
    return emitOpError() << "expects qweight rows of " << dimStr(expectedPacked)
                         << " bytes for " << dimStr(in) << " inputs at " << bits
                         << " bits, got " << dimStr(packed);
  if (!compatibleDim(result.getDimSize(1), out))
    return emitOpError() << "expects the result width "
                         << dimStr(result.getDimSize(1))
                         << " to equal the weight's out_features " << dimStr(out);
  if (failed(verifyTokenDim(*this, input, result)))
    return failure();
  if (failed(verifySameElementType(*this, input, result, "input", "result")))
    return failure();
  SmallVector<int64_t, 2> expected = {out};
  if (group > 0)
    expected.push_back(ShapedType::isDynamic(in) ? ShapedType::kDynamic
                                                 : llvm::divideCeil(in, group));
  auto matches = [&](RankedTensorType t) {
    return t.getRank() == static_cast<int64_t>(expected.size()) &&
           llvm::all_of(llvm::zip_equal(t.getShape(), expected), [](auto p) {
             return compatibleDim(std::get<0>(p), std::get<1>(p));
           });
  };
  std::string shape =
      "[" + llvm::join(llvm::map_range(expected, dimStr), ", ") + "]";
  if (!matches(scales))
    return emitOpError() << "expects scales of shape " << shape
                         << " for group_size " << group << ", got " << scales;
  if (auto zeros = getZeroPoints()) {
    auto zerosType = cast<RankedTensorType>(zeros.getType());
    if (!matches(zerosType))
      return emitOpError() << "expects zero_points of shape " << shape
                           << ", got " << zerosType;
  }
  return success();
}

LogicalResult RopeOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  int64_t heads = getNumHeads(), headDim = getHeadDim();
  if (!compatibleDim(input.getDimSize(1), heads * headDim))
    return emitOpError() << "expects the input width "
                         << dimStr(input.getDimSize(1)) << " to equal num_heads ("
                         << heads << ") * head_dim (" << headDim << ")";
  int64_t rotaryDim = getRotaryDim();
  if (rotaryDim > headDim || rotaryDim % 2 != 0)
    return emitOpError() << "expects an even rotary_dim <= head_dim ("
                         << headDim << "), got " << getRotaryDim();
  if (!(getTheta().convertToFloat() > 0.0f))
    return emitOpError() << "expects a positive theta, got "
                         << getTheta().convertToFloat();
  float factor = getScalingFactor().convertToFloat();
  if (!(factor > 0.0f) || !std::isfinite(factor))
    return emitOpError() << "expects a positive scaling_factor, got "
                         << factor;
  StringRef scaling = getScaling().value_or("linear");
  if (scaling != "linear" && scaling != "dynamic" && scaling != "llama3")
    return emitOpError() << "has unknown scaling '" << scaling
                         << "' (expected \"linear\", \"dynamic\" or "
                            "\"llama3\")";
  bool llama3 = scaling == "llama3";
  if (llama3 != bool(getLowFreqFactor()) ||
      llama3 != bool(getHighFreqFactor()))
    return emitOpError() << "expects low_freq_factor and high_freq_factor "
                         << (llama3 ? "with" : "only with")
                         << " scaling \"llama3\"";
  if (llama3) {
    float low = getLowFreqFactor()->convertToFloat();
    float high = getHighFreqFactor()->convertToFloat();
    if (!(low > 0.0f) || !(high > low) || !std::isfinite(high))
      return emitOpError() << "expects 0 < low_freq_factor < "
                              "high_freq_factor, got "
                           << low << " and " << high;
  }
  bool needsOriginal = llama3 || scaling == "dynamic";
  if (needsOriginal != bool(getOriginalMaxPositions()))
    return emitOpError() << "expects original_max_positions "
                         << (needsOriginal ? "with" : "only with")
                         << " scaling \"dynamic\" or \"llama3\"";
  if (Value ff = getFreqFactors()) {
    if (getScaling() || !getScalingFactor().isExactlyValue(1.0))
      return emitOpError()
             << "expects no scaling and scaling_factor 1 with freq_factors";
    int64_t len = cast<RankedTensorType>(ff.getType()).getDimSize(0);
    if (len != rotaryDim / 2)
      return emitOpError() << "expects freq_factors of rotary_dim / 2 = "
                           << rotaryDim / 2 << " elements, got "
                           << dimStr(len);
  }
  return success();
}

LogicalResult AllGatherOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "result element type " << out.getElementType()
                         << " differs from the input's "
                         << in.getElementType();
  if (in.getDimSize(0) != out.getDimSize(0))
    return emitOpError() << "result rows differ from the input's (" << out
                         << " vs " << in << ")";
  const int64_t cols = in.getDimSize(1), group = getGroupSize();
  if (ShapedType::isDynamic(cols) || ShapedType::isDynamic(out.getDimSize(1)) ||
      out.getDimSize(1) != cols * group)
    return emitOpError() << "result must have group_size (" << group
                         << ") x " << cols << " columns, got " << out;
  return success();
}

/// The sequence-parallel collectives: the rows are the entry point's
/// token count (dynamic), which the group splits (kernel_abi.h
/// kiln_sequence_shard), and below group_size rows some rank would hold
/// none.
static LogicalResult verifySequenceCollective(Operation *op, Value input,
                                              int64_t groupSize,
                                              int64_t minTokens) {
  auto type = cast<RankedTensorType>(input.getType());
  if (!type.isDynamicDim(0))
    return op->emitOpError()
           << "splits the rows of a sequence: the input's rows must be the "
              "entry point's token count (dynamic), got "
           << type;
  if (minTokens < groupSize)
    return op->emitOpError() << "min_tokens (" << minTokens
                             << ") must be at least group_size (" << groupSize
                             << "): every rank needs a row";
  return success();
}

LogicalResult ReduceScatterOp::verify() {
  return verifySequenceCollective(*this, getInput(), getGroupSize(),
                                  getMinTokens());
}
LogicalResult AllSliceOp::verify() {
  return verifySequenceCollective(*this, getInput(), getGroupSize(),
                                  getMinTokens());
}
LogicalResult AllGatherRowsOp::verify() {
  if (failed(verifySequenceCollective(*this, getInput(), getGroupSize(),
                                      getMinTokens())))
    return failure();
  std::optional<StringRef> wire = getWireQuant();
  if (!wire) {
    if (getWireScale())
      return emitOpError() << "wire_scale needs wire_quant = "
                              "\"int8_per_tensor\"";
    return success();
  }
  auto type = cast<RankedTensorType>(getInput().getType());
  if (*wire != "int8_per_token" && *wire != "int8_per_block" &&
      *wire != "int8_per_tensor")
    return emitOpError() << "wire_quant must be \"int8_per_token\", "
                            "\"int8_per_block\" or \"int8_per_tensor\", got \""
                         << *wire << "\"";
  if (!type.getElementType().isF32())
    return emitOpError() << "an 8-bit gather (wire_quant) dequantizes to f32 "
                            "rows, got "
                         << type;
  if (*wire == "int8_per_block" && type.getDimSize(1) % 32 != 0)
    return emitOpError() << "wire_quant = \"int8_per_block\" needs a "
                            "multiple of 32 columns, got "
                         << type.getDimSize(1);
  const bool perTensor = *wire == "int8_per_tensor";
  if (perTensor != bool(getWireScale()))
    return emitOpError() << (perTensor ? "wire_quant = \"int8_per_tensor\" "
                                         "needs a wire_scale"
                                       : "wire_scale goes only with "
                                         "wire_quant = \"int8_per_tensor\"");
  if (perTensor) {
    float scale = getWireScale()->convertToFloat();
    if (!(scale > 0.0f) || !std::isfinite(scale))
      return emitOpError() << "wire_scale must be a positive finite number, "
                              "got "
                           << scale;
  }
  return success();
}

LogicalResult ReduceScatterAddRmsNormOp::verify() {
  if (failed(verifySequenceCollective(*this, getPartial(), getGroupSize(),
                                      getMinTokens())))
    return failure();
  auto type = cast<RankedTensorType>(getPartial().getType());
  auto weight = cast<RankedTensorType>(getWeight().getType());
  if (weight.getElementType() != type.getElementType() ||
      weight.getDimSize(0) != type.getDimSize(1))
    return emitOpError() << "weight must be " << type.getDimSize(1)
                         << " elements of " << type.getElementType()
                         << " (the rows' width and type), got " << weight;
  return success();
}

/// A kiln.send / kiln.recv peer against the module's pipeline stage
/// (kiln.partition {pp, stage}, when the module has one): a stage in
/// [0, pp) other than the program's own.
static LogicalResult verifyPeerStage(Operation *op, StringRef what,
                                     int64_t peer) {
  std::optional<PipelineStage> stage = pipelineStageOf(op);
  if (!stage)
    return success();
  if (peer >= stage->pp)
    return op->emitOpError() << what << " " << peer
                             << " is not a stage of the pipeline (pp = "
                             << stage->pp << ")";
  if (peer == stage->stage)
    return op->emitOpError() << what << " " << peer
                             << " is this program's own stage";
  return success();
}

/// The kiln.partition entry `key` of the module holding `op` (or `op`).
static IntegerAttr partitionEntry(Operation *op, StringRef key) {
  auto module = isa<ModuleOp>(op) ? cast<ModuleOp>(op)
                                  : op->getParentOfType<ModuleOp>();
  auto partition =
      module ? module->getAttrOfType<DictionaryAttr>("kiln.partition")
             : DictionaryAttr();
  return partition ? partition.getAs<IntegerAttr>(key) : IntegerAttr();
}

std::optional<PipelineStage> mlir::kiln::pipelineStageOf(Operation *op) {
  IntegerAttr pp = partitionEntry(op, "pp"), stage = partitionEntry(op, "stage");
  if (!pp || !stage)
    return std::nullopt;
  IntegerAttr first = partitionEntry(op, "first_layer");
  return PipelineStage{pp.getInt(), stage.getInt(),
                       first ? first.getInt() : 0};
}

int64_t mlir::kiln::modelLayerOf(Operation *op, int64_t layer) {
  std::optional<PipelineStage> stage = pipelineStageOf(op);
  return layer + (stage ? stage->firstLayer : 0);
}

std::optional<KvHeadShard> mlir::kiln::kvHeadShardOf(Operation *op) {
  IntegerAttr offset = partitionEntry(op, "kv_head_offset"),
              heads = partitionEntry(op, "model_kv_heads");
  if (!offset || !heads)
    return std::nullopt;
  return KvHeadShard{offset.getInt(), heads.getInt()};
}

LogicalResult SendOp::verify() {
  return verifyPeerStage(*this, "destination", getDestination());
}

LogicalResult RecvOp::verify() {
  return verifyPeerStage(*this, "source", getSource());
}

LogicalResult AddBiasOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  auto bias = cast<RankedTensorType>(getBias().getType());
  if (!compatibleDim(input.getDimSize(1), bias.getDimSize(0)))
    return emitOpError() << "expects the bias length "
                         << dimStr(bias.getDimSize(0))
                         << " to equal the input width "
                         << dimStr(input.getDimSize(1));
  return verifySameElementType(*this, input, bias, "input", "bias");
}

//===----------------------------------------------------------------------===//
// Batched step: the position operand's type and the cache geometry
//===----------------------------------------------------------------------===//

// A type, then `, !kiln.batch` for a batch position; an index position
// prints nothing more (the form of the single-sequence entry points).
static ParseResult parseWithPositionType(OpAsmParser &parser, Type &type,
                                         Type &position) {
  if (parser.parseType(type))
    return failure();
  if (succeeded(parser.parseOptionalComma()))
    return parser.parseType(position);
  position = parser.getBuilder().getIndexType();
  return success();
}

static void printWithPositionType(OpAsmPrinter &printer, Operation *,
                                  Type type, Type position) {
  printer << type;
  if (!isa<IndexType>(position))
    printer << ", " << position;
}

namespace {
/// The geometry shared by !kiln.kv_cache and !kiln.paged_kv_cache.
struct CacheGeometry {
  int64_t layers, kvHeads, headDim;
  Type element;
};
} // namespace

static CacheGeometry cacheGeometry(Type type) {
  if (auto paged = dyn_cast<PagedKVCacheType>(type))
    return {paged.getNumLayers(), paged.getNumKvHeads(), paged.getHeadDim(),
            paged.getElementType()};
  auto cache = cast<KVCacheType>(type);
  return {cache.getNumLayers(), cache.getNumKvHeads(), cache.getHeadDim(),
          cache.getElementType()};
}

int64_t AttentionOp::getCacheLayers() {
  return cacheGeometry(getKvCache().getType()).layers;
}
int64_t AttentionOp::getCacheKvHeads() {
  return cacheGeometry(getKvCache().getType()).kvHeads;
}
int64_t AttentionOp::getCacheHeadDim() {
  return cacheGeometry(getKvCache().getType()).headDim;
}
Type AttentionOp::getCacheElementType() {
  return cacheGeometry(getKvCache().getType()).element;
}
bool AttentionOp::isCacheQuantized() {
  Type e = getCacheElementType();
  return e.isInteger(8) || isa<Float8E4M3FNType>(e);
}
bool AttentionOp::isCacheFp8() {
  return isa<Float8E4M3FNType>(getCacheElementType());
}

LogicalResult AttentionOp::verify() {
  auto query = cast<RankedTensorType>(getQuery().getType());
  auto key = cast<RankedTensorType>(getKey().getType());
  auto value = cast<RankedTensorType>(getValue().getType());
  auto result = cast<RankedTensorType>(getResult().getType());
  bool paged = isa<PagedKVCacheType>(getKvCache().getType());
  if (paged != isBatched())
    return emitOpError() << (paged ? "expects the !kiln.batch as position "
                                     "with a !kiln.paged_kv_cache"
                                   : "expects a !kiln.paged_kv_cache with the "
                                     "!kiln.batch as position")
                         << ", got " << getKvCache().getType() << " and "
                         << getPosition().getType();
  CacheGeometry cache = cacheGeometry(getKvCache().getType());
  bool quantized = isCacheQuantized();
  int64_t heads = getNumHeads(), kvHeads = getNumKvHeads(),
          headDim = getHeadDim();
  if (heads % kvHeads != 0)
    return emitOpError() << "expects num_heads (" << heads
                         << ") to be a multiple of num_kv_heads (" << kvHeads
                         << ")";
  if (!compatibleDim(query.getDimSize(1), heads * headDim))
    return emitOpError() << "expects the query width "
                         << dimStr(query.getDimSize(1))
                         << " to equal num_heads * head_dim ("
                         << heads * headDim << ")";
  for (auto [name, type] : {std::pair<StringRef, RankedTensorType>("key", key),
                            std::pair<StringRef, RankedTensorType>("value", value)}) {
    if (!compatibleDim(type.getDimSize(1), kvHeads * headDim))
      return emitOpError() << "expects the " << name << " width "
                           << dimStr(type.getDimSize(1))
                           << " to equal num_kv_heads * head_dim ("
                           << kvHeads * headDim << ")";
    if (!compatibleDim(type.getDimSize(0), query.getDimSize(0)))
      return emitOpError() << "expects the " << name
                           << " to have as many tokens as the query";
  }
  if (cache.kvHeads != kvHeads || cache.headDim != headDim)
    return emitOpError() << "kv_cache has " << cache.kvHeads << " heads of "
                         << cache.headDim << " but the op expects " << kvHeads
                         << " heads of " << headDim;
  if (static_cast<int64_t>(getLayer()) >= cache.layers)
    return emitOpError() << "layer " << getLayer()
                         << " is out of range for a kv_cache of "
                         << cache.layers << " layers";
  if (query != result)
    return emitOpError() << "expects the result type " << result
                         << " to equal the query type " << query;
  if (!quantized && cache.element != query.getElementType())
    return emitOpError() << "expects a kv_cache of the query's element type "
                         << query.getElementType() << " or i8, got "
                         << cache.element;
  if (!getCausal())
    return emitOpError() << "supports only causal attention";
  bool hasMean = bool(getKeyMean()), hasTheta = getKeyMeanThetaAttr() != nullptr,
       hasRot = getKeyMeanRotaryDimAttr() != nullptr;
  if (hasMean != hasTheta || hasMean != hasRot)
    return emitOpError() << "expects key_mean, key_mean_theta and "
                            "key_mean_rotary_dim together (key centering) or "
                            "none of them";
  if (hasMean) {
    if (!quantized)
      return emitOpError() << "key centering (key_mean) needs an 8-bit "
                              "kv_cache (i8 or f8E4M3FN), got "
                           << cache.element;
    auto mean = cast<RankedTensorType>(getKeyMean().getType());
    if (mean.getDimSize(0) != kvHeads * headDim)
      return emitOpError() << "expects key_mean of num_kv_heads * head_dim ("
                           << kvHeads * headDim << ") elements, got "
                           << dimStr(mean.getDimSize(0));
    int64_t rot = static_cast<int64_t>(*getKeyMeanRotaryDim());
    if (rot % 2 != 0 || rot > headDim)
      return emitOpError() << "expects an even key_mean_rotary_dim <= head_dim ("
                           << headDim << "), got " << rot;
    float theta = getKeyMeanThetaAttr().getValueAsDouble();
    if (!(theta > 0.0f) || !std::isfinite(theta))
      return emitOpError() << "expects a positive finite key_mean_theta, got "
                           << theta;
  }
  if (std::optional<uint64_t> window = getSlidingWindow();
      window && int64_t(*window) <= 0)
    return emitOpError() << "expects a positive sliding_window, got "
                         << int64_t(*window);
  if (auto contiguous = dyn_cast<KVCacheType>(getKvCache().getType());
      contiguous && contiguous.getSummaryBlock() > 0 && !getSparseAttr())
    return emitOpError() << "writes a kv_cache with key summaries without "
                            "sparse attention (only the sparse kernels keep "
                            "the summaries up to date)";
  if (SparseAttentionAttr sparse = getSparseAttr()) {
    if (isCacheQuantized() || getKeyMean() || getSlidingWindow())
      return emitOpError()
             << "sparse attention runs on a cache of the activation dtype "
                "without sliding_window or key centering (the kernels so "
                "far: kiln_k_attention_sparse, kiln_k_step_attention_sparse)";
    auto query = cast<RankedTensorType>(getQuery().getType());
    const bool oneRow = !query.isDynamicDim(0) && query.getDimSize(0) == 1;
    auto contiguous = dyn_cast<KVCacheType>(getKvCache().getType());
    const int64_t summary = contiguous ? contiguous.getSummaryBlock() : 0;
    if (oneRow && summary == 0)
      return emitOpError()
             << "sparse decode (one row) needs a kv_cache with key summaries "
                "(summary = "
             << sparse.getBlock() << "; kiln-sparse-attention{decode=quest})";
    if (summary > 0 && summary != sparse.getBlock())
      return emitOpError() << "sparse attention blocks of "
                           << sparse.getBlock()
                           << " positions on a kv_cache with summary pages of "
                           << summary;
    if (summary > 0 && !query.getElementType().isF32())
      return emitOpError() << "key summaries have f32 kernels only, got "
                           << query.getElementType();
    if (DenseI64ArrayAttr streaming = sparse.getStreaming())
      for (int64_t g : streaming.asArrayRef())
        if (g >= getNumKvHeads())
          return emitOpError() << "sparse attention names streaming KV head "
                               << g << ", but the layer has "
                               << getNumKvHeads() << " KV heads";
  }
  return success();
}

LogicalResult LogitsOp::verify() {
  auto hidden = cast<RankedTensorType>(getHidden().getType());
  auto weight = cast<RankedTensorType>(getWeight().getType());
  auto result = cast<RankedTensorType>(getResult().getType());
  if (failed(verifyBlockActQuant(*this, getActQuant(), getFormat())))
    return failure();
  // One row of logits (the last token's), or one per row with all_rows.
  std::string rowsStr = getAllRows() ? dimStr(hidden.getDimSize(0)) : "1";
  auto rowsMatch = [&](int64_t d) {
    return getAllRows() ? compatibleDim(d, hidden.getDimSize(0)) : d == 1;
  };
  if (std::optional<StringRef> format = getFormat()) {
    if (failed(verifyBlockWeight(*this, *format, weight, hidden.getDimSize(1),
                                 hidden.getElementType(), "weight")))
      return failure();
    if (!rowsMatch(result.getDimSize(0)) ||
        !compatibleDim(result.getDimSize(1), weight.getDimSize(0)) ||
        !result.getElementType().isF32())
      return emitOpError() << "expects a result of shape [" << rowsStr
                           << ", " << dimStr(weight.getDimSize(0))
                           << "] f32, got " << result;
    return success();
  }
  if (!compatibleDim(hidden.getDimSize(1), weight.getDimSize(1)))
    return emitOpError() << "expects the hidden width "
                         << dimStr(hidden.getDimSize(1))
                         << " to equal the classifier's in_features "
                         << dimStr(weight.getDimSize(1));
  if (!rowsMatch(result.getDimSize(0)) ||
      !compatibleDim(result.getDimSize(1), weight.getDimSize(0)))
    return emitOpError() << "expects a result of shape [" << rowsStr << ", "
                         << dimStr(weight.getDimSize(0)) << "], got "
                         << result;
  if (!result.getElementType().isF32() &&
      result.getElementType() != hidden.getElementType())
    return emitOpError() << "expects f32 logits or the hidden element type "
                         << hidden.getElementType() << ", got "
                         << result.getElementType();
  return verifySameElementType(*this, hidden, weight, "hidden", "weight");
}

//===----------------------------------------------------------------------===//
// ObserveOp
//===----------------------------------------------------------------------===//

LogicalResult ObserveOp::verify() {
  StringRef tap = getTap();
  if (tap.empty())
    return emitOpError() << "expects a non-empty tap name";
  for (char c : tap)
    if (!llvm::isAlnum(c) && c != '_' && c != '.' && c != '-')
      return emitOpError() << "tap name '" << tap
                           << "' may only contain letters, digits, '_', '.' "
                              "and '-'";
  return success();
}

LogicalResult SliceColumnsOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  auto result = cast<RankedTensorType>(getResult().getType());
  if (!compatibleDim(input.getDimSize(0), result.getDimSize(0)))
    return emitOpError() << "expects the result to have the input's "
                         << dimStr(input.getDimSize(0)) << " rows, got "
                         << dimStr(result.getDimSize(0));
  int64_t in = input.getDimSize(1), width = result.getDimSize(1);
  if (ShapedType::isDynamic(in) || ShapedType::isDynamic(width))
    return emitOpError() << "expects static widths, got " << input << " -> "
                         << result;
  int64_t offset = static_cast<int64_t>(getOffset());
  if (width <= 0 || offset > in - width)
    return emitOpError() << "columns [" << offset << ", " << offset + width
                         << ") are not inside the input's " << in
                         << " columns";
  return verifySameElementType(*this, input, result, "input", "result");
}

Operation *FusedOp::getAnchor() {
  for (Operation &op : getBody().front())
    if (isa<LinearOp, QuantizedLinearOp>(op))
      return &op;
  return nullptr;
}

LogicalResult FusedOp::verify() {
  if (getFamilies().empty() &&
      !llvm::hasSingleElement(getBody().front().without_terminator()))
    return emitOpError() << "expects at least one fusion family (only a "
                            "region of a single op has none)";
  for (Attribute a : getFamilies()) {
    StringRef family = cast<StringAttr>(a).getValue();
    if (!llvm::is_contained(kFusionFamilies, family))
      return emitOpError() << "unknown fusion family '" << family
                           << "' (expected horizontal, prologue, epilogue or "
                              "elementwise)";
  }
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError() << "has " << getInputs().size()
                         << " operands but its region takes "
                         << body.getNumArguments() << " arguments";
  for (auto [i, operand, arg] :
       llvm::enumerate(getInputs(), body.getArguments()))
    if (operand.getType() != arg.getType())
      return emitOpError() << "operand #" << i << " has type "
                           << operand.getType()
                           << " but the region argument has type "
                           << arg.getType();
  return success();
}

LogicalResult FusedOp::verifyRegions() {
  Block &body = getBody().front();
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError() << "expects its region to end in kiln.yield";
  for (Value v : yield.getValues())
    if (isa<BlockArgument>(v))
      return emitOpError() << "yields one of its own operands; a kiln.fused "
                              "region yields values it computes";
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError() << "yields " << yield.getValues().size()
                         << " values whose types do not match its "
                         << getNumResults() << " results";
  Operation *anchor = nullptr;
  for (Operation &op : body.without_terminator()) {
    bool linear = isa<LinearOp, QuantizedLinearOp>(op);
    if (!linear && !isFusableElementwise(&op) &&
        !isa<RmsNormOp, SliceColumnsOp, RopeOp>(op))
      return op.emitOpError() << "cannot be part of a kiln.fused region "
                                 "(expected a linear, rms_norm, "
                                 "slice_columns, rope or elementwise op)";
    for (Type t : op.getResultTypes()) {
      Type e = cast<RankedTensorType>(t).getElementType();
      if (!e.isF32() && !e.isF16() && !e.isBF16())
        return op.emitOpError()
               << "in a kiln.fused region must compute in f32, f16 or bf16, "
                  "got "
               << t;
    }
    if (!linear)
      continue;
    if (anchor)
      return op.emitOpError()
             << "is a second linear in one kiln.fused region (horizontal "
                "fusion concatenates weights into one linear instead)";
    anchor = &op;
    if (auto q = dyn_cast<QuantizedLinearOp>(op); q && q.hasQuantizedActivations())
      return op.emitOpError() << "with quantized activations (W8A8) cannot be "
                                 "part of a kiln.fused region";
  }
  for (Operation &op : body.without_terminator()) {
    if (auto norm = dyn_cast<RmsNormOp>(op)) {
      if (!anchor || !norm->hasOneUse() ||
          *norm->getUsers().begin() != anchor ||
          anchor->getOperand(0) != norm.getResult())
        return op.emitOpError() << "in a kiln.fused region must be the "
                                   "prologue of the region's linear (its only "
                                   "user, as the linear's input)";
    }
    if (auto slice = dyn_cast<SliceColumnsOp>(op))
      if (!anchor || slice.getInput() != anchor->getResult(0))
        return op.emitOpError() << "in a kiln.fused region must slice the "
                                   "result of the region's linear";
    if (auto rope = dyn_cast<RopeOp>(op))
      if (!rope.isUnscaled() || !rope.getInput().getDefiningOp<SliceColumnsOp>() ||
          !isa<BlockArgument>(rope.getPosition()))
        return op.emitOpError()
               << "in a kiln.fused region must be unscaled RoPE of a column "
                  "slice of the region's linear, at a position operand";
  }
  return success();
}

#define GET_OP_CLASSES
#include "dialects/Kiln/IR/KilnOps.cpp.inc"

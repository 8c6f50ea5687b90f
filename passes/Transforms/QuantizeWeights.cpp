//===- QuantizeWeights.cpp - weight quantization (W8A16, W4A16, W8A8) -----===//
//
// Edits only the weights' recipes and the ops that read them: the integer
// values and scales are produced when the artifact writer materializes the
// new weights, one tensor at a time.
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"
#include "passes/Transforms/WeightRecipe.h"
#include "passes/Quantization/Calibration.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <optional>

namespace mlir::kiln {
#define GEN_PASS_DEF_QUANTIZEWEIGHTSPASS
#include "passes/Transforms/Passes.h.inc"

namespace {
struct QuantizeWeightsPass final
    : impl::QuantizeWeightsPassBase<QuantizeWeightsPass> {
  using Base::Base;
  void runOnOperation() override;
};
} // namespace

/// Declares `@<weight>.<part>` after `weight`: the same source, the same
/// transforms plus a quantize step producing `part`.
static WeightOp declarePart(OpBuilder &builder, SymbolTable &symbols,
                            WeightOp weight, StringRef part, Type type,
                            int64_t bits, int64_t groupSize,
                            ArrayRef<NamedAttribute> extra) {
  std::string name = (weight.getSymName() + "." + part).str();
  if (auto existing = symbols.lookup<WeightOp>(name))
    return existing;
  MLIRContext *ctx = builder.getContext();
  SmallVector<Attribute> transforms(weight.getTransforms().begin(),
                                    weight.getTransforms().end());
  SmallVector<NamedAttribute> params = {
      builder.getNamedAttr("bits", builder.getI64IntegerAttr(bits)),
      builder.getNamedAttr("group_size", builder.getI64IntegerAttr(groupSize)),
      builder.getNamedAttr("part", builder.getStringAttr(part))};
  params.append(extra.begin(), extra.end());
  transforms.push_back(WeightTransformAttr::get(
      ctx, "quantize", builder.getDictionaryAttr(params)));
  builder.setInsertionPointAfter(weight);
  auto op = WeightOp::create(builder, weight.getLoc(), name,
                             cast<RankedTensorType>(type), weight.getSource(),
                             builder.getArrayAttr(transforms));
  symbols.insert(op);
  return op;
}

/// Product of the column scales (axis 1 "scale" steps) in `weight`'s
/// recipe: the input the quantized op sees is x / s.
static std::vector<double> columnScales(WeightOp weight, int64_t cols) {
  std::vector<double> s(cols, 1.0);
  for (Attribute a : weight.getTransforms()) {
    auto t = cast<WeightTransformAttr>(a);
    if (t.getKind() != "scale" ||
        t.getParams().getAs<IntegerAttr>("axis").getInt() != 1)
      continue;
    auto factors = t.getParams().getAs<DenseFPElementsAttr>("factors");
    if (factors.getNumElements() != cols)
      continue; // the weight's verifier-level mismatch is reported later
    int64_t c = 0;
    for (const APFloat &f : factors.getValues<APFloat>())
      s[c++] *= f.convertToDouble();
  }
  return s;
}

void QuantizeWeightsPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (scheme != "w8a16" && scheme != "w4a16-rtn" && scheme != "w4a16-gptq" &&
      scheme != "w8a8") {
    module.emitError() << "unsupported quantization scheme '" << scheme
                       << "' (implemented: w8a16, w4a16-rtn, w4a16-gptq, w8a8)";
    return signalPassFailure();
  }
  bool fourBit = scheme == "w4a16-rtn" || scheme == "w4a16-gptq";
  bool gptq = scheme == "w4a16-gptq";
  bool w8a8 = scheme == "w8a8";
  if (fourBit && (this->groupSize <= 0 || this->groupSize % 2 != 0)) {
    module.emitError() << "unsupported group size "
                       << static_cast<int64_t>(this->groupSize)
                       << " for w4a16 (expected a positive even number, e.g. "
                          "32, 64 or 128)";
    return signalPassFailure();
  }
  if (actOrder && !gptq) {
    module.emitError() << "act-order applies to scheme=w4a16-gptq, not "
                       << scheme;
    return signalPassFailure();
  }
  if (gptq && !(damp >= 0.0 && std::isfinite(static_cast<double>(damp)))) {
    module.emitError() << "GPTQ damp must be a non-negative number, got "
                       << static_cast<double>(damp);
    return signalPassFailure();
  }
  if (w8a8 && actQuant != "per-token" && actQuant != "per-tensor") {
    module.emitError() << "unsupported act-quant '" << actQuant
                       << "' for w8a8 (expected per-token or per-tensor)";
    return signalPassFailure();
  }
  bool needCalibration = gptq || (w8a8 && actQuant == "per-tensor");
  std::optional<CalibrationFile> calib;
  if (needCalibration) {
    if (calibration.empty()) {
      module.emitError() << "scheme=" << scheme
                         << (w8a8 ? " with act-quant=per-tensor" : "")
                         << " needs calibration=FILE (create one with "
                            "`kiln-calibrate MODEL -o FILE`)";
      return signalPassFailure();
    }
    llvm::Expected<CalibrationFile> opened = CalibrationFile::open(calibration);
    if (!opened) {
      module.emitError() << llvm::toString(opened.takeError());
      return signalPassFailure();
    }
    calib = std::move(*opened);
  }
  const int64_t bits = fourBit ? 4 : 8;
  const int64_t groupSize = fourBit ? static_cast<int64_t>(this->groupSize) : 0;
  MLIRContext *ctx = &getContext();
  OpBuilder builder(ctx);
  SymbolTable symbols(module);

  SmallVector<LinearOp> linears;
  module.walk([&](LinearOp op) { linears.push_back(op); });
  DenseSet<Operation *> touched;
  for (LinearOp linear : linears) {
    auto ref = linear.getWeight().getDefiningOp<WeightRefOp>();
    if (!ref)
      continue; // not a model weight: nothing to quantize ahead of time
    auto weight = symbols.lookup<WeightOp>(ref.getName());
    if (!weight)
      continue;
    RankedTensorType type = weight.getTensorType();
    if (!isa<FloatType>(type.getElementType()))
      continue;
    int64_t out = type.getDimSize(0), in = type.getDimSize(1);
    SmallVector<NamedAttribute> extra;
    FloatAttr actScale;
    if (calib) {
      llvm::Expected<std::string> tap = calib->tapOf(weight.getSymName());
      if (!tap) {
        linear.emitError() << llvm::toString(tap.takeError());
        return signalPassFailure();
      }
      // A row-parallel shard's inputs are columns [offset, offset + in)
      // of the whole model's statistics (GPTQ: the Hessian's diagonal
      // block, cut from the file when the artifact is written).
      InputColumns cols = inputColumnsOf(weight);
      if (gptq) {
        std::string hessian = *tap + ".hessian";
        if (llvm::Error e = calib->check(hessian, {cols.full, cols.full})) {
          linear.emitError() << llvm::toString(std::move(e));
          return signalPassFailure();
        }
        Builder b(ctx);
        extra = {b.getNamedAttr("method", b.getStringAttr("gptq")),
                 b.getNamedAttr("calibration", b.getStringAttr(calibration)),
                 b.getNamedAttr("hessian", b.getStringAttr(hessian)),
                 b.getNamedAttr("act_order", b.getBoolAttr(actOrder)),
                 b.getNamedAttr("damp", b.getF64FloatAttr(damp))};
      } else {
        // Static per-tensor activation scale (SmoothQuant W8A8): the input
        // is x / s after smoothing, so its channel maxima are absmax / s.
        auto absmax =
            calib->readChannels(*tap + ".absmax", cols.full, cols.offset, in);
        if (!absmax) {
          linear.emitError() << llvm::toString(absmax.takeError());
          return signalPassFailure();
        }
        std::vector<double> s = columnScales(weight, in);
        double amax = 0.0;
        for (int64_t c = 0; c < in; ++c)
          amax = std::max(amax, (*absmax)[c] / s[c]);
        if (!(amax > 0.0)) {
          linear.emitError() << "calibration file " << calibration << ": tap '"
                             << *tap << "' never saw a non-zero value; no "
                                        "static activation scale for '"
                             << weight.getSymName() << "'";
          return signalPassFailure();
        }
        actScale = FloatAttr::get(Float32Type::get(ctx), amax / 127.0);
      }
    }
    int64_t groups = fourBit ? llvm::divideCeil(in, groupSize) : 0;
    auto i8 = builder.getI8Type();
    auto qType = RankedTensorType::get(
        {out, fourBit ? llvm::divideCeilSigned(in, int64_t(2)) : in}, i8);
    auto sType = fourBit ? RankedTensorType::get({out, groups}, builder.getF32Type())
                         : RankedTensorType::get({out}, builder.getF32Type());
    auto zType = RankedTensorType::get({out, groups}, i8);
    // Each part is declared right after the original, so declaring them in
    // reverse makes the module read `w.qweight`, `w.scales`, `w.zeros`.
    WeightOp zeros = fourBit ? declarePart(builder, symbols, weight, "zeros",
                                           zType, bits, groupSize, extra)
                             : WeightOp();
    WeightOp scales =
        declarePart(builder, symbols, weight, "scales", sType, bits, groupSize,
                    extra);
    WeightOp qweight =
        declarePart(builder, symbols, weight, "qweight", qType, bits, groupSize,
                    extra);
    builder.setInsertionPoint(linear);
    Value q = WeightRefOp::create(builder, ref.getLoc(), qType,
                                  qweight.getSymName());
    Value s = WeightRefOp::create(builder, ref.getLoc(), sType,
                                  scales.getSymName());
    Value z = fourBit ? Value(WeightRefOp::create(builder, ref.getLoc(), zType,
                                                  zeros.getSymName()))
                      : Value();
    auto quantized = QuantizedLinearOp::create(
        builder, linear.getLoc(), linear.getType(), linear.getInput(), q, s, z,
        builder.getI64IntegerAttr(bits), builder.getI64IntegerAttr(groupSize),
        /*act_quant=*/
        w8a8 ? builder.getStringAttr(actQuant == "per-token" ? "int8_per_token"
                                                             : "int8_per_tensor")
             : StringAttr(),
        /*act_scale=*/actScale);
    linear.replaceAllUsesWith(quantized.getResult());
    linear.erase();
    if (ref->use_empty())
      ref.erase();
    touched.insert(weight);
  }
  // Originals that nothing reads any more are dropped from the model.
  for (Operation *op : touched)
    if (SymbolTable::symbolKnownUseEmpty(op, module))
      op->erase();
}

} // namespace mlir::kiln

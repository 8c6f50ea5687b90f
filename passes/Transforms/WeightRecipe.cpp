//===- WeightRecipe.cpp - kiln.weight <-> WeightDesc ----------------------===//

#include "passes/Transforms/WeightRecipe.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace mlir::kiln {

static FailureOr<StorageType> parseStorage(WeightOp op, StringRef s) {
  if (std::optional<StorageType> t = parseStorageType(s))
    return *t;
  return op.emitOpError() << "unknown storage type '" << s << "'";
}

/// The recipe of a weight named `name` with `src` and `transforms` (a
/// kiln.weight, or one part of its "concat_rows" step); errors on `op`.
static FailureOr<WeightDesc> getRecipe(WeightOp op, StringRef name,
                                       WeightSourceAttr src,
                                       ArrayAttr transforms) {
  WeightDesc w;
  w.name = name.str();
  w.source.file = src.getFile().str();
  w.source.tensor = src.getTensor().str();
  FailureOr<StorageType> storage = parseStorage(op, src.getStorage());
  if (failed(storage))
    return failure();
  w.source.storage = *storage;
  w.source.offset = src.getOffset();
  w.source.bytes = src.getBytes();
  w.source.seed = src.getSeed();
  if (src.getScale())
    w.source.scale = src.getScale().getValueAsDouble();
  if (src.getCenter())
    w.source.center = src.getCenter().getValueAsDouble();
  for (int64_t d : src.getShape().asArrayRef())
    w.source.shape.push_back(d);
  for (Attribute a : transforms) {
    auto t = cast<WeightTransformAttr>(a);
    DictionaryAttr params = t.getParams();
    if (t.getKind() == "dequantize")
      continue; // implied by the storage type
    if (t.getKind() == "concat_rows") { // always last (the verifier checks)
      for (auto [i, p] : llvm::enumerate(params.getAs<ArrayAttr>("parts"))) {
        auto part = cast<DictionaryAttr>(p);
        FailureOr<WeightDesc> d = getRecipe(
            op, (name + ".part" + Twine(i + 1)).str(),
            part.getAs<WeightSourceAttr>("source"),
            part.getAs<ArrayAttr>("transforms"));
        if (failed(d))
          return failure();
        d->keepF32 = cast<RankedTensorType>(part.getAs<TypeAttr>("type").getValue())
                         .getElementType()
                         .isF32();
        w.concatRows.push_back(std::move(*d));
      }
      continue;
    }
    if (t.getKind() == "rope_half_to_adjacent") {
      WeightTransform wt{WeightTransform::Kind::RopeHalfToAdjacent};
      wt.heads = params.getAs<IntegerAttr>("heads").getInt();
      w.transforms.push_back(wt);
      continue;
    }
    if (t.getKind() == "quantize") {
      WeightTransform wt{WeightTransform::Kind::Quantize};
      wt.bits = params.getAs<IntegerAttr>("bits").getInt();
      wt.groupSize = params.getAs<IntegerAttr>("group_size").getInt();
      StringRef part = params.getAs<StringAttr>("part").getValue();
      wt.part = part == "scales"  ? WeightTransform::QuantPart::Scales
                : part == "zeros" ? WeightTransform::QuantPart::Zeros
                                  : WeightTransform::QuantPart::QWeight;
      auto method = params.getAs<StringAttr>("method");
      if (method && method.getValue() == "gptq") {
        wt.method = WeightTransform::QuantMethod::GPTQ;
        wt.calibration = params.getAs<StringAttr>("calibration").str();
        wt.hessian = params.getAs<StringAttr>("hessian").str();
        if (auto b = params.getAs<BoolAttr>("act_order"))
          wt.actOrder = b.getValue();
        if (auto d = params.getAs<FloatAttr>("damp"))
          wt.damp = d.getValueAsDouble();
      }
      w.transforms.push_back(wt);
      continue;
    }
    if (t.getKind() == "repack") { // pre-quantized checkpoints
      WeightTransform wt{WeightTransform::Kind::Repack};
      wt.format = params.getAs<StringAttr>("format").getValue().str();
      StringRef part = params.getAs<StringAttr>("part").getValue();
      wt.rows = params.getAs<IntegerAttr>("rows").getInt();
      wt.cols = params.getAs<IntegerAttr>("cols").getInt();
      if (part == "blocks") { // a GGML block-format tensor kept as stored
        wt.part = WeightTransform::QuantPart::Blocks;
        w.transforms.push_back(wt);
        continue;
      }
      wt.part = part == "scales"  ? WeightTransform::QuantPart::Scales
                : part == "zeros" ? WeightTransform::QuantPart::Zeros
                                  : WeightTransform::QuantPart::QWeight;
      wt.bits = params.getAs<IntegerAttr>("bits").getInt();
      wt.groupSize = params.getAs<IntegerAttr>("group_size").getInt();
      wt.rows = params.getAs<IntegerAttr>("rows").getInt();
      wt.cols = params.getAs<IntegerAttr>("cols").getInt();
      w.transforms.push_back(wt);
      continue;
    }
    if (t.getKind() == "slice") {
      WeightTransform wt{WeightTransform::Kind::Slice};
      wt.axis = params.getAs<IntegerAttr>("axis").getInt();
      wt.offset = params.getAs<IntegerAttr>("offset").getInt();
      wt.size = params.getAs<IntegerAttr>("size").getInt();
      w.transforms.push_back(wt);
      continue;
    }
    if (t.getKind() == "scale") {
      WeightTransform wt{WeightTransform::Kind::Scale};
      wt.axis = params.getAs<IntegerAttr>("axis").getInt();
      for (const APFloat &f :
           params.getAs<DenseFPElementsAttr>("factors").getValues<APFloat>())
        wt.factors.push_back(f.convertToFloat());
      w.transforms.push_back(std::move(wt));
      continue;
    }
    return op.emitOpError() << "transform '" << t.getKind()
                            << "' cannot be materialized yet";
  }
  return w;
}

FailureOr<WeightDesc> getWeightRecipe(WeightOp op) {
  return getRecipe(op, op.getSymName(), op.getSource(), op.getTransforms());
}

/// `w` without its row slices (kiln-partition's axis-0 "slice"); false when
/// a later transform depends on the sliced rows.
static bool dropRowSlices(WeightDesc &w) {
  bool sliced = false;
  std::vector<WeightTransform> kept;
  for (WeightTransform &t : w.transforms) {
    if (t.kind == WeightTransform::Kind::Slice && t.axis == 0) {
      sliced = true;
      continue;
    }
    if (sliced && t.kind == WeightTransform::Kind::Scale && t.axis == 0)
      return false;
    kept.push_back(std::move(t));
  }
  w.transforms = std::move(kept);
  for (WeightDesc &part : w.concatRows)
    if (!dropRowSlices(part))
      return false;
  return true;
}

/// The f32 values of `w` and its concat_rows parts, row-major.
static FailureOr<std::vector<float>> materializeDesc(WeightOp op,
                                                     const WeightDesc &w);

FailureOr<std::vector<float>> materializeWholeRows(WeightOp op) {
  FailureOr<WeightDesc> w = getWeightRecipe(op);
  if (failed(w))
    return failure();
  if (!dropRowSlices(*w))
    return op.emitOpError()
           << "cannot read the whole model's rows of this tensor-parallel "
              "shard: a row scale follows its slice";
  return materializeDesc(op, *w);
}

FailureOr<std::vector<float>> materializeWeightOp(WeightOp op) {
  FailureOr<WeightDesc> w = getWeightRecipe(op);
  if (failed(w))
    return failure();
  return materializeDesc(op, *w);
}

static FailureOr<std::vector<float>> materializeDesc(WeightOp op,
                                                     const WeightDesc &whole) {
  // The weight's own rows first, then the rows of each concat_rows part.
  SmallVector<const WeightDesc *> pieces = {&whole};
  for (const WeightDesc &part : whole.concatRows)
    pieces.push_back(&part);
  std::vector<float> out;
  for (const WeightDesc *d : pieces) {
    size_t numel = 1;
    for (int64_t dim : floatShape(*d))
      numel *= static_cast<size_t>(dim);
    size_t at = out.size();
    out.resize(at + numel);
    if (llvm::Error e = materializeWeight(
            *d, llvm::MutableArrayRef<float>(out).slice(at, numel)))
      return op.emitOpError() << "cannot read the weight's values: "
                              << llvm::toString(std::move(e));
  }
  return out;
}

WeightTransformAttr makeScaleTransform(MLIRContext *ctx, int64_t axis,
                                       ArrayRef<float> factors) {
  Builder b(ctx);
  auto type = RankedTensorType::get({static_cast<int64_t>(factors.size())},
                                    b.getF32Type());
  return WeightTransformAttr::get(
      ctx, "scale",
      b.getDictionaryAttr(
          {b.getNamedAttr("axis", b.getI64IntegerAttr(axis)),
           b.getNamedAttr("factors", DenseElementsAttr::get(type, factors))}));
}

void appendTransform(WeightOp op, WeightTransformAttr transform) {
  SmallVector<Attribute> transforms(op.getTransforms().begin(),
                                    op.getTransforms().end());
  transforms.push_back(transform);
  op.setTransformsAttr(ArrayAttr::get(op.getContext(), transforms));
}

InputColumns inputColumnsOf(WeightOp op) {
  RankedTensorType type = op.getTensorType();
  const int64_t in = type.getRank() == 2 ? type.getDimSize(1) : 0;
  InputColumns cols{0, in, in};
  for (WeightTransformAttr t :
       op.getTransforms().getAsRange<WeightTransformAttr>()) {
    if (t.getKind() != "slice")
      continue;
    DictionaryAttr params = t.getParams();
    if (params.getAs<IntegerAttr>("axis").getInt() != 1)
      continue;
    cols.offset = params.getAs<IntegerAttr>("offset").getInt();
    cols.size = params.getAs<IntegerAttr>("size").getInt();
    ArrayRef<int64_t> shape = op.getSource().getShape().asArrayRef();
    cols.full = shape.size() == 2 ? shape[1] : cols.offset + cols.size;
  }
  return cols;
}

} // namespace mlir::kiln

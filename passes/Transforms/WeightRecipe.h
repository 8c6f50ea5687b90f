//===- WeightRecipe.h - kiln.weight <-> WeightDesc ---------------*- C++ -*-===//
//
// The bridge between a `kiln.weight` op (source + `#kiln.transform` list)
// and the WeightDesc recipe materializeWeight() and the artifact writer
// execute; used by the writer and by the passes that read weight values at
// compile time (AWQ, SmoothQuant).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_TRANSFORMS_WEIGHTRECIPE_H
#define KILN_PASSES_TRANSFORMS_WEIGHTRECIPE_H

#include "dialects/Kiln/IR/KilnOps.h"
#include "dialects/Kiln/Import/ModelDesc.h"

#include "mlir/Support/LLVM.h"

namespace mlir::kiln {

/// The recipe of `op`: its source and transforms in order ("dequantize" is
/// implied by the storage type and skipped). Emits an error on `op` for an
/// unknown storage type or transform.
FailureOr<WeightDesc> getWeightRecipe(WeightOp op);

/// Materializes `op` (all its transforms up to a final quantize step) as
/// f32, row-major. Emits an error on `op` naming the file on failure.
FailureOr<std::vector<float>> materializeWeightOp(WeightOp op);

/// Materializes `op` as materializeWeightOp does, but with every row of the
/// model: a column-parallel tensor-parallel shard (kiln-partition's "slice"
/// on axis 0: wq, wk, wv, w1, w3) is read without its slice, so statistics
/// of the weight (SmoothQuant's max |W_j|, AWQ's search) are those of the
/// whole model and equal on every rank. Emits an error on `op` when a
/// transform after the slice depends on the shard's rows (a scale on axis
/// 0). Returns the rows of the whole weight, f32 row-major.
FailureOr<std::vector<float>> materializeWholeRows(WeightOp op);

/// `#kiln.transform<"scale", {axis, factors}>`.
WeightTransformAttr makeScaleTransform(MLIRContext *ctx, int64_t axis,
                                       ArrayRef<float> factors);

/// Appends `transform` to `op`'s recipe.
void appendTransform(WeightOp op, WeightTransformAttr transform);

/// The input features of a linear weight [out, in] that its recipe keeps:
/// columns [offset, offset + size) of the model's `full`. A row-parallel
/// tensor-parallel shard (kiln-partition's "slice" on axis 1: wo, w2) keeps
/// a range; every other weight all of them (offset 0, size = full = in).
/// Calibration statistics of the whole model (a linear input's absmax,
/// absmean, Hessian) apply to the shard restricted to this range.
struct InputColumns {
  int64_t offset = 0, size = 0, full = 0;
  bool isSlice() const { return size != full; }
};
InputColumns inputColumnsOf(WeightOp op);

} // namespace mlir::kiln

#endif // KILN_PASSES_TRANSFORMS_WEIGHTRECIPE_H

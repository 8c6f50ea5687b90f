//===- PlanOps.cpp - plan dialect -----------------------------------------===//

#include "dialects/Plan/IR/PlanOps.h"
#include "dialects/Kiln/IR/KilnOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::kiln::plan;

#include "dialects/Plan/IR/PlanDialect.cpp.inc"

void PlanDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Plan/IR/PlanOps.cpp.inc"
      >();
}

/// Bytes of the static part of `type` (dynamic dimensions count as 1),
/// overflow-checked; std::nullopt past 2^48.
static std::optional<int64_t> checkedStaticBytes(MemRefType type) {
  int64_t bytes =
      std::max<int64_t>(1, llvm::divideCeil(type.getElementTypeBitWidth(), 8));
  for (int64_t d : type.getShape()) {
    if (ShapedType::isDynamic(d))
      continue;
    std::optional<int64_t> r = llvm::checkedMul(bytes, d);
    if (!r || *r > (int64_t(1) << 48))
      return std::nullopt;
    bytes = *r;
  }
  return bytes;
}

/// Checks that [offset, offset + size of `type`) fits in 2^48 bytes.
static LogicalResult verifyExtent(Operation *op, MemRefType type,
                                  int64_t offset, StringRef what) {
  std::optional<int64_t> bytes = checkedStaticBytes(type);
  std::optional<int64_t> end =
      bytes ? llvm::checkedAdd(offset, *bytes) : std::nullopt;
  if (!end || *end > (int64_t(1) << 48))
    return op->emitOpError() << what << " of type " << type << " at offset "
                             << offset << " ends past 2^48 bytes";
  return success();
}

LogicalResult WeightOp::verify() {
  auto type = cast<MemRefType>(getType());
  if (!type.hasStaticShape())
    return emitOpError() << "expects a static weight shape, got " << type;
  if (getOffset() % 64 != 0)
    return emitOpError() << "expects a 64-byte aligned offset, got "
                         << getOffset();
  return verifyExtent(*this, type, getOffset(), "weight");
}

LogicalResult WeightRefOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto weight = symbols.lookupNearestSymbolFrom<WeightOp>(*this, getNameAttr());
  if (!weight)
    return emitOpError() << "'" << getName()
                         << "' does not reference a plan.weight";
  if (weight.getType() != getType())
    return emitOpError() << "result type " << getType()
                         << " does not match the weight type "
                         << weight.getType();
  return success();
}

LogicalResult ArenaViewOp::verify() {
  auto type = cast<MemRefType>(getType());
  if (getOffset() % 64 != 0)
    return emitOpError() << "expects a 64-byte aligned offset, got "
                         << getOffset();
  if (static_cast<int64_t>(getDynamicSizes().size()) !=
      static_cast<int64_t>(type.getNumDynamicDims()))
    return emitOpError() << "expects " << type.getNumDynamicDims()
                         << " dynamic sizes, got " << getDynamicSizes().size();
  return verifyExtent(*this, type, getOffset(), "arena view");
}

LogicalResult CallKernelOp::verify() {
  if (!getCallee().starts_with("kiln_k_"))
    return emitOpError() << "callee '" << getCallee()
                         << "' is not a kernel of the runtime ABI (kiln_k_*)";
  for (Value arg : getArgs()) {
    Type t = arg.getType();
    if (!isa<MemRefType, IndexType>(t) && !t.isF32())
      return emitOpError() << "cannot pass a value of type " << t
                           << " to a kernel (expected memref, index or f32)";
  }
  return success();
}

LogicalResult FusedKernelOp::verify() {
  if (getFamilies().empty() &&
      !llvm::hasSingleElement(getBody().front().without_terminator()))
    return emitOpError() << "expects at least one fusion family (only a "
                            "kernel of a single op has none)";
  for (Attribute a : getFamilies())
    if (!llvm::is_contained(mlir::kiln::kFusionFamilies,
                            cast<StringAttr>(a).getValue()))
      return emitOpError() << "unknown fusion family '"
                           << cast<StringAttr>(a).getValue()
                           << "' (expected horizontal, prologue, epilogue or "
                              "elementwise)";
  Block &body = getBody().front();
  // By name: the kiln dialect's ops are not linked into this library.
  if (body.empty() ||
      body.back().getName().getStringRef() !=
          mlir::kiln::YieldOp::getOperationName())
    return emitOpError() << "body must end in kiln.yield";
  return success();
}

LogicalResult CallFusedOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto kernel =
      symbols.lookupNearestSymbolFrom<FusedKernelOp>(*this, getKernelAttr());
  if (!kernel)
    return emitOpError() << "'" << getKernel()
                         << "' does not reference a plan.fused_kernel";
  Block &body = kernel.getBody().front();
  size_t expected = body.getNumArguments() +
                    body.getTerminator()->getNumOperands() + 1;
  if (getArgs().size() != expected)
    return emitOpError() << "passes " << getArgs().size() << " operands to '"
                         << getKernel() << "', which takes " << expected
                         << " (its arguments, its results and n)";
  // Region arguments: a buffer for each tensor, the position for an index;
  // results: buffers.
  for (auto [i, arg] : llvm::enumerate(getArgs().drop_back())) {
    bool index = i < body.getNumArguments() &&
                 body.getArgument(i).getType().isIndex();
    if (index ? !arg.getType().isIndex() : !isa<MemRefType>(arg.getType()))
      return emitOpError() << "operand #" << i << " must be "
                           << (index ? "an index" : "a buffer") << ", got "
                           << arg.getType();
    if (index)
      continue;
    // The buffer holds the region's value: same element type and rank,
    // equal sizes where both are static (the generated kernel's loops and
    // row readers take the region's sizes).
    Type want = i < body.getNumArguments()
                    ? body.getArgument(i).getType()
                    : body.getTerminator()
                          ->getOperand(i - body.getNumArguments())
                          .getType();
    auto tensor = dyn_cast<RankedTensorType>(want);
    auto memref = cast<MemRefType>(arg.getType());
    bool ok = tensor && tensor.getElementType() == memref.getElementType() &&
              tensor.getRank() == memref.getRank();
    for (int64_t d = 0; ok && d < memref.getRank(); ++d)
      ok = ShapedType::isDynamic(tensor.getDimSize(d)) ||
           ShapedType::isDynamic(memref.getDimSize(d)) ||
           tensor.getDimSize(d) == memref.getDimSize(d);
    if (!ok)
      return emitOpError() << "operand #" << i << " (" << memref
                           << ") does not hold '" << getKernel() << "''s "
                           << (i < body.getNumArguments() ? "argument"
                                                          : "result")
                           << " of type " << want;
  }
  if (!getArgs().back().getType().isIndex())
    return emitOpError() << "expects the token count n (index) last";
  return success();
}

#define GET_OP_CLASSES
#include "dialects/Plan/IR/PlanOps.cpp.inc"

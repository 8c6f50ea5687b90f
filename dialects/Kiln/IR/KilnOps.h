//===- KilnOps.h - kiln dialect operations ----------------------*- C++ -*-===//

#ifndef KILN_DIALECTS_KILN_IR_KILNOPS_H
#define KILN_DIALECTS_KILN_IR_KILNOPS_H

#include "dialects/Kiln/IR/KilnDialect.h"
#include "dialects/Kiln/IR/KilnTypes.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::kiln {
/// Side-effect resource standing for the contents of a KV cache.
struct KVCacheResource : public SideEffects::Resource::Base<KVCacheResource> {
  llvm::StringRef getName() final { return "KVCache"; }
};
/// Side-effect resource standing for the calibration observer of a session
/// (kiln.observe writes to it).
struct ObserverResource : public SideEffects::Resource::Base<ObserverResource> {
  llvm::StringRef getName() final { return "Observer"; }
};
/// Inter-rank communication (kiln.all_reduce).
struct CommResource : public SideEffects::Resource::Base<CommResource> {
  llvm::StringRef getName() final { return "Comm"; }
};
} // namespace mlir::kiln

#define GET_OP_CLASSES
#include "dialects/Kiln/IR/KilnOps.h.inc"

namespace mlir::kiln {
/// The fusion families of kiln.fused / kiln-fuse / kiln-compile --fuse, in
/// the order the pass applies them (docs/fusion.md).
inline constexpr llvm::StringLiteral kFusionFamilies[] = {
    "horizontal", "prologue", "epilogue", "elementwise"};

/// Unit attribute kiln-outline-kernels puts on a kiln.logits op that the
/// CPU target instantiates as a generated kernel (kiln-lower-to-plan lowers
/// it to a single-op plan.fused_kernel instead of a runtime call).
inline constexpr llvm::StringLiteral kGeneratedKernelAttr =
    "kiln.generated_kernel";

/// The elementwise ops a kiln.fused region computes per element (the
/// epilogue and elementwise families).
inline bool isFusableElementwise(Operation *op) {
  return isa<AddOp, MulOp, SiluOp, SwigluOp, AddBiasOp>(op);
}
} // namespace mlir::kiln

#endif // KILN_DIALECTS_KILN_IR_KILNOPS_H

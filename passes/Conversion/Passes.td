//===- Passes.td - kiln lowerings --------------------------*- tablegen -*-===//

#ifndef KILN_PASSES_CONVERSION_PASSES_TD
#define KILN_PASSES_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def LowerToPlanPass : Pass<"kiln-lower-to-plan", "::mlir::ModuleOp"> {
  let summary = "Lower memory-planned kiln graph IR to the plan dialect";
  let description = [{
    Every `kiln.weight` becomes a `plan.weight` at a fixed, 64-byte aligned
    offset of the artifact's weights file (in declaration order; weights
    with identical recipes share one copy). Each entry point becomes
    `func.func @name(%n: index, %pos: index)` whose body views the arena at
    the offsets chosen by `kiln-memory-plan` and calls one runtime kernel per
    kiln op. Requires `kiln.buffer_offset` on every activation (run
    `--kiln-memory-plan` first). A calibration `kiln.observe` becomes
    `kiln_k_observe(x, rows, cols, tap)` where `tap` is the tap's index in
    the module's `kiln.observe_taps` (run `--kiln-insert-observers`).
  }];
  let dependentDialects = ["::mlir::kiln::plan::PlanDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect"];
}

#endif // KILN_PASSES_CONVERSION_PASSES_TD

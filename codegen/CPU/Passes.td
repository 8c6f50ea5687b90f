//===- Passes.td - CPU codegen passes ----------------------*- tablegen -*-===//

#ifndef KILN_CODEGEN_CPU_PASSES_TD
#define KILN_CODEGEN_CPU_PASSES_TD

include "mlir/Pass/PassBase.td"

def PlanToEmitCPass : Pass<"kiln-plan-to-emitc", "::mlir::ModuleOp"> {
  let summary = "Lower plan IR to EmitC for the CPU target";
  let description = [{
    Each plan entry point `@name` becomes
    `extern "C" void kiln_name(kiln_exec_ctx *, int64_t n, int64_t pos)`;
    buffers become pointers computed from the context (arena, weights, KV
    cache, tokens, logits) at the plan's static offsets, and each
    `plan.call_kernel` an opaque call of the runtime kernel ABI
    (runtime/include/kiln_rt/kernel_abi.h). The result prints as C++ with
    `mlir-translate --mlir-to-cpp` / `emitc::translateToCpp`.
  }];
  let dependentDialects = ["::mlir::emitc::EmitCDialect"];
}

#endif // KILN_CODEGEN_CPU_PASSES_TD

//===- Passes.td - CPU codegen passes ----------------------*- tablegen -*-===//

#ifndef KILN_CODEGEN_CPU_PASSES_TD
#define KILN_CODEGEN_CPU_PASSES_TD

include "mlir/Pass/PassBase.td"

def PlanToEmitCPass : Pass<"kiln-plan-to-emitc", "::mlir::ModuleOp"> {
  let summary = "Lower plan IR to EmitC for the CPU or CUDA target";
  let description = [{
    Each plan entry point `@name` becomes
    `extern "C" void kiln_name(CTX *, int64_t n, int64_t pos)`; buffers
    become pointers computed from the context (arena, weights, KV cache,
    tokens, logits) at the plan's static offsets.

    * `target=cpu`: CTX is `kiln_exec_ctx` and each `plan.call_kernel
      "kiln_k_X"` calls the runtime kernel ABI
      (runtime/include/kiln_rt/kernel_abi.h); only f32 buffers. Kernels
      that need the execution context (`kiln_k_observe`, calibration) get
      the context as their first argument.
    * `target=cuda`: CTX is `kiln_cuda_ctx` and each kernel becomes the
      launch wrapper `kiln_cuda_X(ctx, ...)` of codegen/CUDA/KilnKernels.cuh
      (f32, f16 as `__half`, bf16 as `__nv_bfloat16`); the module also
      exports the workspace-size, sampling and ABI-version functions of
      runtime/include/kiln_rt/cuda_abi.h. Calibration observers
      (`kiln_k_observe`) are CPU-only and rejected here.

    The result prints as C++/CUDA C++ with `mlir-translate --mlir-to-cpp` /
    `emitc::translateToCpp`.
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
           "Code generation target: cpu or cuda">,
  ];
  let dependentDialects = ["::mlir::emitc::EmitCDialect"];
}

#endif // KILN_CODEGEN_CPU_PASSES_TD

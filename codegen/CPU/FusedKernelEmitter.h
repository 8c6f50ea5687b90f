//===- FusedKernelEmitter.h - C++ for plan.fused_kernel ---------*- C++ -*-===//
//
// Instantiates the kernel template of a fused region (docs/fusion.md) for
// the CPU or the CUDA target (KilnCudaFused.cuh). CPU:
// a linear-anchored region becomes a tile loop over output rows on the
// runtime's threads (kernel_abi.h kiln_k_parallel_for), each tile computed
// by kiln_k_linear_tile for the weight's format with the region's prologue
// (rms_norm of the input) before it and its epilogue (column slices routed
// to their buffers, elementwise ops) generated as C++ expressions applied
// while the tile is in cache; an elementwise region becomes one loop.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_CPU_FUSEDKERNELEMITTER_H
#define KILN_CODEGEN_CPU_FUSEDKERNELEMITTER_H

#include "dialects/Plan/IR/PlanOps.h"

#include "llvm/ADT/StringMap.h"

#include <string>

namespace mlir::kiln {

/// The C++ definition of `kernel`: `static void <sym_name>(const T *a0, ...,
/// float *r0, ..., int64_t n)` taking the region's arguments, its results
/// and the token count, plus the helpers it needs. Emits an error on the
/// op the CPU template cannot express (a 16-bit value, a second linear, a
/// weight kind without a tile kernel) and fails.
FailureOr<std::string> emitFusedKernelCpu(plan::FusedKernelOp kernel);

/// The CUDA definition of `kernel` (KilnCudaFused.cuh): an epilogue struct
/// generated from the region (`row(g, k)`, `store(t, g, v)`; `elem(t, col)`
/// for an elementwise region) and `static void <sym_name>(kiln_cuda_ctx
/// *ctx, <arguments>, float *r0, ..., int64_t n)` calling
/// kiln_cuda_fused_linear / _linear_residual / _elementwise with the
/// weight's row reader. `maxTokens` bounds n; `scratchBytes` gets the C++
/// expression of the fused scratch the prefill path needs in bytes (a
/// kiln_cuda_fused_scratch_bytes call; empty when none). Emits an error on
/// what the CUDA template cannot express (the CPU's limits, W8A8 or int8
/// activations, RoPE pairs split across column ranges) and fails.
/// `epilogueTypes` (optional, shared by the kernels of one module): epilogue
/// bodies already emitted, keyed with their name blanked, to the struct
/// name; a kernel whose body is there gets `using <name>_epi = <that>;`
/// instead of a new struct, so equal regions share one device kernel.
FailureOr<std::string>
emitFusedKernelCuda(plan::FusedKernelOp kernel, int64_t maxTokens,
                    std::string &scratchBytes,
                    llvm::StringMap<std::string> *epilogueTypes = nullptr);

} // namespace mlir::kiln

#endif // KILN_CODEGEN_CPU_FUSEDKERNELEMITTER_H

//===- Passes.h - CPU codegen -----------------------------------*- C++ -*-===//

#ifndef KILN_CODEGEN_CPU_PASSES_H
#define KILN_CODEGEN_CPU_PASSES_H

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "llvm/Support/Error.h"

namespace mlir::kiln {

#define GEN_PASS_DECL
#include "codegen/CPU/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "codegen/CPU/Passes.h.inc"

/// Prints an EmitC module (the output of kiln-plan-to-emitc) as C++.
LogicalResult emitCpp(ModuleOp module, llvm::raw_ostream &os);

/// Compiles `cppPath` into the shared object `soPath` with the host C++
/// compiler ($KILN_HOST_CXX, else c++), adding `includeDir` to the include
/// path. `includeDir` is a scratch directory the caller owns and removes:
/// the compiler's output is captured in `includeDir`/compiler.log (and
/// removed) and `includeDir`/tmp is its TMPDIR, so nothing goes to the
/// system temporary directory. A SIGINT/SIGTERM
/// meanwhile stops the compiler as well. Errors name the file as
/// `displayName` (default `cppPath`; a scratch path is gone by the time the
/// user reads it) and carry the compiler's exit status and the last 20
/// lines of its output.
llvm::Error compileSharedObject(llvm::StringRef cppPath, llvm::StringRef soPath,
                                llvm::StringRef includeDir,
                                llvm::StringRef displayName = "");

/// Compiles the CUDA C++ file `cuPath` into the shared object `soPath` with
/// nvcc ($KILN_NVCC, else nvcc on PATH, else /usr/local/cuda/bin/nvcc) for
/// sm_80 and sm_90a, with compute_90 PTX for newer GPUs to JIT, linking
/// cuBLASLt and the CUDA runtime (rpath to the
/// toolkit's lib64), and NCCL when `linkNccl` (a partitioned plan's
/// all-reduces). `includeDir` and `displayName` as for compileSharedObject.
llvm::Error compileCudaSharedObject(llvm::StringRef cuPath,
                                    llvm::StringRef soPath,
                                    llvm::StringRef includeDir,
                                    llvm::StringRef displayName = "",
                                    bool linkNccl = false);

} // namespace mlir::kiln

#endif // KILN_CODEGEN_CPU_PASSES_H

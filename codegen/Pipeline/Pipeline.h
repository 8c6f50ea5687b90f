//===- Pipeline.h - checkpoint description to artifact ----------*- C++ -*-===//
//
// The compile pipeline shared by kiln-compile and kiln-calibrate: build the
// kiln graph from an imported ModelDesc, run
//   kiln-verify, canonicalize, <caller's graph passes>,
//   kiln-memory-plan, kiln-lower-to-plan, canonicalize, kiln-plan-to-emitc
// and write the artifact (or print an intermediate stage).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_PIPELINE_PIPELINE_H
#define KILN_CODEGEN_PIPELINE_PIPELINE_H

#include "dialects/Kiln/Import/ModelDesc.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <string>
#include <vector>

namespace kiln::sign {
struct SecretKey;
} // namespace kiln::sign

namespace mlir::kiln {

/// Where compileModel() stops: after the graph passes (kiln IR), after
/// lowering (plan IR), after emission (C++), or with a written artifact.
enum class CompileStage { Kiln, Plan, Cpp, Artifact };

struct CompileOptions {
  std::string target = "cpu";   ///< "cpu" or "cuda"
  std::string dtype = "f32";    ///< weights/activations: f32, f16, bf16
  std::string kvCache;          ///< KV cache: "" (the dtype), "int8", "fp8"
  int64_t maxSeqLen = 0;        ///< 0: the model's context
  int64_t maxPrefillTokens = 0; ///< 0: min(context, 512)
  /// Tensor parallelism (docs/parallelism.md): > 1 runs kiln-partition
  /// right after canonicalize, once per rank. Rank 0's program is planned
  /// and emitted (every rank runs the same code over shards of one
  /// layout); every rank's weights go to its own weights.rank<R>.bin.
  int64_t tp = 1;
  /// Pipeline parallelism (kiln-partition{pp stage}): pp > 1 compiles one
  /// program per stage (each planned and emitted for its tp rank 0, its
  /// ranks' shards beside it); stage 0's is the artifact's own, stages
  /// 1 .. pp - 1 go to its stage<S>/ directories. --emit prints every
  /// stage, separated by "// -----" lines.
  int64_t pp = 1;
  /// Sequence parallelism (kiln-sequence-parallel, with tp > 1): -1 off,
  /// 0 on from the pass's default threshold, T > 0 on from T tokens.
  int64_t spMinTokens = -1;
  /// With sequence parallelism: kiln-sequence-parallel{fuse-norm} (only
  /// when fusion is on, fuseFamilies not empty).
  bool spFuseNorm = true;
  /// With sequence parallelism: kiln-sequence-parallel{int8-gather} (the
  /// 8-bit all-gather where every reader quantizes to int8 anyway).
  bool spInt8Gather = true;
  /// Adds graph passes (quantization, observers) after kiln-verify and
  /// canonicalize (and kiln-partition); may be empty.
  std::function<void(OpPassManager &)> addGraphPasses;
  /// Called with the graph after those passes, before memory planning (to
  /// read what they recorded); failure stops the pipeline.
  std::function<LogicalResult(ModuleOp)> onGraph;
  /// kiln-fuse families run after the graph passes (docs/fusion.md); empty:
  /// no fusion.
  std::vector<std::string> fuseFamilies;
  /// Add the batched step entry point (kiln-batch-step, after the graph
  /// passes, before kiln-fuse) where the model allows it; a model it does
  /// not cover gets a note and no step.
  bool batchStep = false;
  /// Add speculative decoding's verify entry point (kiln-verify-entry,
  /// after the batched step, before kiln-fuse; docs/speculative.md).
  bool verifyEntry = false;
  /// The pass pipeline and recipe recorded in the manifest.
  std::string pipeline;
  std::string quant = "none";
  CompileStage stop = CompileStage::Artifact;
  /// CompileStage::Artifact: the artifact directory to write.
  std::string outputDir;
  /// CompileStage::Artifact: when set, the artifact is signed with it
  /// (manifest.sig, docs/security.md).
  const ::kiln::sign::SecretKey *signKey = nullptr;
  /// Other stages: where the IR or C++ is printed.
  llvm::raw_ostream *emitStream = nullptr;
};

/// Prints `diag` as Kiln's tools report: `<tool>: error: <message>` (or
/// `warning:`, or `note:` for remarks and notes), then each attached note as `<tool>: note: ...`,
/// one line each. The operation a diagnostic is attached to is not printed
/// (compileModel() turns MLIRContext::printOpOnDiagnostic off while it runs).
void printToolDiagnostic(Diagnostic &diag, llvm::StringRef tool,
                         llvm::raw_ostream &os);

/// Runs the pipeline on `desc` (context with the kiln, plan, func, arith and
/// emitc dialects loaded). Errors are emitted as diagnostics on `context`
/// (pass failures, and an artifact that cannot be written, whose message
/// names the file) and return failure. Diagnostics carry no printed copy
/// of the module (printOpOnDiagnostic is off during the call and restored
/// after it): a pass failure is one message, not megabytes of IR.
LogicalResult compileModel(MLIRContext &context, const ModelDesc &desc,
                           const CompileOptions &options);

} // namespace mlir::kiln

#endif // KILN_CODEGEN_PIPELINE_PIPELINE_H

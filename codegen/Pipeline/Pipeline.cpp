//===- Pipeline.cpp - checkpoint description to artifact ------------------===//
//
// Moved out of kiln-compile's main() so kiln-calibrate compiles its
// observing artifact with exactly the same pipeline.
//
//===----------------------------------------------------------------------===//

#include "codegen/Pipeline/Pipeline.h"
#include "codegen/Artifact/ArtifactWriter.h"
#include "codegen/CPU/Passes.h"
#include "dialects/Kiln/Builder/LlamaBuilder.h"
#include "dialects/Kiln/IR/KilnOps.h"
#include "passes/Conversion/Passes.h"
#include "passes/Transforms/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/WithColor.h"

namespace mlir::kiln {

void printToolDiagnostic(Diagnostic &diag, llvm::StringRef tool,
                         llvm::raw_ostream &os) {
  auto print = [&](Diagnostic &d) {
    switch (d.getSeverity()) {
    case DiagnosticSeverity::Error:
      llvm::WithColor::error(os, tool);
      break;
    case DiagnosticSeverity::Warning:
      llvm::WithColor::warning(os, tool);
      break;
    case DiagnosticSeverity::Remark: // informational: the tools' "note:"
    case DiagnosticSeverity::Note:
      llvm::WithColor::note(os, tool);
      break;
    }
    os << d << "\n";
  };
  print(diag);
  for (Diagnostic &note : diag.getNotes())
    print(note);
}

LogicalResult compileModel(MLIRContext &context, const ModelDesc &desc,
                           const CompileOptions &opts) {
  // A failing pass reports one message, not the module it ran on.
  bool printOp = context.shouldPrintOpOnDiagnostic();
  context.printOpOnDiagnostic(false);
  llvm::scope_exit restore([&] { context.printOpOnDiagnostic(printOp); });
  LlamaBuildOptions options;
  options.maxSeqLen = opts.maxSeqLen;
  options.maxPrefillTokens = opts.maxPrefillTokens;
  options.dtype = opts.dtype;
  options.kvDtype = opts.kvCache;
  // The graph of one rank (the whole model when tp and pp are 1) after the
  // graph passes.
  auto buildGraph = [&](int64_t rank,
                        int64_t stage) -> FailureOr<OwningOpRef<ModuleOp>> {
    auto module = buildLlamaModule(&context, desc, options);
    if (failed(module))
      return failure();
    PassManager graphPm(&context);
    graphPm.addPass(createVerifyModelPass());
    graphPm.addPass(createCanonicalizerPass());
    if (opts.tp > 1 || opts.pp > 1) {
      PartitionPassOptions partition;
      partition.tp = opts.tp;
      partition.rank = rank;
      partition.pp = opts.pp;
      partition.stage = stage;
      graphPm.addPass(createPartitionPass(partition));
    }
    if (opts.addGraphPasses)
      opts.addGraphPasses(graphPm);
    if (opts.batchStep) {
      BatchStepPassOptions step;
      step.required = false;
      graphPm.addPass(createBatchStepPass(step));
    }
    if (opts.verifyEntry)
      graphPm.addPass(createVerifyEntryPass());
    // After the batched step exists (it shards too), before fusion (whose
    // regions must not span a collective).
    if (opts.tp > 1 && opts.spMinTokens >= 0) {
      SequenceParallelPassOptions sp;
      sp.minTokens = opts.spMinTokens;
      // Communication fusion goes with the other fusions (--fuse=none
      // turns it off too).
      sp.fuseNorm = opts.spFuseNorm && !opts.fuseFamilies.empty();
      sp.int8Gather = opts.spInt8Gather;
      graphPm.addPass(createSequenceParallelPass(sp));
    }
    if (!opts.fuseFamilies.empty()) {
      FusePassOptions fuse;
      fuse.families.assign(opts.fuseFamilies.begin(), opts.fuseFamilies.end());
      graphPm.addPass(createFusePass(fuse));
    }
    if (failed(graphPm.run(**module)))
      return failure();
    return std::move(*module);
  };
  // Manifest names (docs/artifact.md): the FP8 cache is "fp8_e4m3".
  const std::string kvDtype = opts.kvCache.empty()    ? opts.dtype
                              : opts.kvCache == "fp8" ? std::string("fp8_e4m3")
                                                      : opts.kvCache;
  // One stage's program (planned and emitted for its tp rank 0) and every
  // tp rank's weight recipes; with --emit, its text is printed instead.
  std::vector<OwningOpRef<ModuleOp>> plans;
  auto compileStage = [&](int64_t stage) -> FailureOr<ArtifactInputs> {
    if (stage > 0 && opts.emitStream)
      *opts.emitStream << "// -----\n// pipeline stage " << stage << "\n";
    auto module = buildGraph(0, stage);
    if (failed(module))
      return failure();
    ModuleOp graph = **module;
    if (opts.onGraph && failed(opts.onGraph(graph)))
      return failure();
    ArtifactInputs inputs;
    if (opts.stop == CompileStage::Kiln) {
      graph.print(*opts.emitStream);
      *opts.emitStream << "\n";
      return inputs;
    }
    auto recipes = collectWeightRecipes(graph);
    if (failed(recipes))
      return failure();
    // The rank's KV heads and the stage's layers, from the cache type of the
    // entry points (the manifest's kv_cache describes one rank's cache).
    int64_t kvHeads = 0, kvLayers = 0, kvSummaryBlock = 0;
    for (auto f : graph.getOps<func::FuncOp>())
      for (Type t : f.getArgumentTypes())
        if (auto c = dyn_cast<KVCacheType>(t)) {
          kvHeads = c.getNumKvHeads();
          kvLayers = c.getNumLayers();
          kvSummaryBlock = c.getSummaryBlock();
        }
    // The other ranks' weight recipes (their slices of the same layout).
    std::vector<std::vector<WeightDesc>> shards;
    if (opts.stop == CompileStage::Artifact)
      for (int64_t rank = 1; rank < opts.tp; ++rank) {
        auto other = buildGraph(rank, stage);
        if (failed(other))
          return failure();
        auto weights = collectWeightRecipes(**other);
        if (failed(weights))
          return failure();
        shards.push_back(std::move(*weights));
      }

    PassManager planPm(&context);
    // The CPU target instantiates a kernel for every linear and elementwise
    // op left outside a fused region (kernel_abi.h, "Generated kernels").
    if (opts.target == "cpu")
      planPm.addPass(createOutlineKernelsPass());
    planPm.addNestedPass<func::FuncOp>(createMemoryPlanPass());
    planPm.addPass(createLowerToPlanPass());
    planPm.addPass(createCanonicalizerPass());
    if (failed(planPm.run(graph)))
      return failure();
    if (opts.stop == CompileStage::Plan) {
      graph.print(*opts.emitStream);
      *opts.emitStream << "\n";
      return inputs;
    }
    plans.push_back(graph.clone());

    PassManager emitPm(&context);
    PlanToEmitCPassOptions emitOptions;
    emitOptions.target = opts.target;
    emitPm.addPass(createPlanToEmitCPass(emitOptions));
    if (failed(emitPm.run(graph)))
      return failure();
    std::string cpp;
    llvm::raw_string_ostream cppStream(cpp);
    if (failed(emitCpp(graph, cppStream)))
      return failure();
    if (opts.stop == CompileStage::Cpp) {
      *opts.emitStream << cpp;
      return inputs;
    }

    inputs.model = &desc;
    inputs.weights = std::move(*recipes);
    inputs.shards = std::move(shards);
    inputs.tp = opts.tp;
    inputs.pp = opts.pp;
    inputs.stage = stage;
    inputs.kvHeads = kvHeads;
    inputs.kvLayers = kvLayers;
    inputs.kvSummaryBlock = kvSummaryBlock;
    inputs.plan = *plans.back();
    inputs.cpp = std::move(cpp);
    inputs.target = opts.target;
    inputs.dtype = opts.dtype;
    inputs.kvDtype = kvDtype;
    inputs.pipeline = opts.pipeline;
    inputs.quant = opts.quant;
    inputs.signKey = opts.signKey;
    inputs.note = [&](const llvm::Twine &message) {
      emitRemark(UnknownLoc::get(&context)) << message.str();
    };
    return inputs;
  };
  FailureOr<ArtifactInputs> first = compileStage(0);
  if (failed(first))
    return failure();
  ArtifactInputs inputs = std::move(*first);
  for (int64_t stage = 1; stage < opts.pp; ++stage) {
    FailureOr<ArtifactInputs> later = compileStage(stage);
    if (failed(later))
      return failure();
    inputs.laterStages.push_back(std::move(*later));
  }
  if (opts.stop != CompileStage::Artifact)
    return success();
  if (auto err = writeArtifact(opts.outputDir, inputs))
    return emitError(UnknownLoc::get(&context))
           << llvm::toString(std::move(err));
  return success();
}

} // namespace mlir::kiln

//===- ArtifactWriter.h - write a compiled artifact directory ---*- C++ -*-===//

#ifndef KILN_CODEGEN_ARTIFACT_ARTIFACTWRITER_H
#define KILN_CODEGEN_ARTIFACT_ARTIFACTWRITER_H

#include "dialects/Kiln/Import/ModelDesc.h"
#include "mlir/IR/BuiltinOps.h"
#include "runtime/src/sign/Signing.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <vector>

namespace mlir::kiln {

/// Reads the recipe of every kiln.weight of `graph` back into WeightDescs, in
/// declaration order (the order kiln-lower-to-plan lays them out in).
FailureOr<std::vector<WeightDesc>> collectWeightRecipes(ModuleOp graph);

struct ArtifactInputs {
  const ModelDesc *model;              ///< config and tokenizer
  std::vector<WeightDesc> weights;     ///< from collectWeightRecipes
  /// Tensor parallelism: tp > 1 writes `weights` (rank 0's) as
  /// weights.rank0.bin and shards[r - 1] as weights.rank<r>.bin, which must
  /// lay out the same tensors at the same offsets and sizes.
  int64_t tp = 1;
  std::vector<std::vector<WeightDesc>> shards;
  /// Pipeline parallelism: this program is stage `stage` of `pp`; stage 0's
  /// inputs carry the later stages' (`laterStages`, stages 1 .. pp - 1),
  /// written as complete artifacts in stage<S>/ and listed by stage 0's
  /// manifest (parallel.pp, .stage, .stages).
  int64_t pp = 1, stage = 0;
  std::vector<ArtifactInputs> laterStages;
  /// KV cache layers of the program (a stage's); 0: the model's.
  int64_t kvLayers = 0;
  /// Positions per page of the cache's key summaries (kiln.kv_cache
  /// `summary`); 0: none.
  int64_t kvSummaryBlock = 0;
  /// KV heads of the plan's cache (a rank's share when partitioned); 0:
  /// the model's.
  int64_t kvHeads = 0;
  ModuleOp plan;                       ///< after kiln-lower-to-plan
  std::string cpp;                     ///< emitted C++ of the plan
  std::string target = "cpu";          ///< "cpu" or "cuda"
  std::string dtype = "f32";           ///< weights/activations: f32, f16, bf16
  std::string kvDtype = "f32"; ///< KV cache: f32, f16, bf16, int8 or fp8_e4m3
  std::string pipeline;                ///< pass pipeline, for the manifest
  std::string quant = "none";          ///< quantization recipe, for the manifest
  /// Receives notes (stale temporary directories removed or left alone);
  /// unset: printed to stderr as "kiln: note: ...".
  std::function<void(const llvm::Twine &)> note;
  /// When set, manifest.sig (its Ed25519 signature of manifest.json) is
  /// written too (docs/security.md).
  const ::kiln::sign::SecretKey *signKey = nullptr;
};

/// Writes the artifact directory `outPath` (docs/artifact.md): weights.bin
/// streamed one tensor at a time at the plan's offsets in `dtype`,
/// tokenizer.json, the emitted code (model.cpp compiled by the host compiler
/// for the cpu target, model.cu compiled by nvcc for sm_80/sm_90a for the
/// cuda target) as model.so, manifest.json with the checksums (XXH3-64 and
/// BLAKE2b-256 of every file) and, given `signKey`, manifest.sig.
/// Trailing slashes are ignored and a symbolic link is followed (what it
/// points to is replaced, the link kept). Everything, build files included,
/// is written into a private scratch directory beside the target
/// (`<name>.kiln-tmp-XXXXXX`, ScratchDir), moved into place with an atomic
/// rename/exchange at the end and removed on every failure path, signals
/// included, so a failure leaves any previous artifact untouched. Scratch
/// directories of killed runs are removed (or reported) first. Refuses to
/// replace anything but an empty directory or a Kiln artifact. Errors name
/// the file and the step that failed.
llvm::Error writeArtifact(llvm::StringRef outPath, const ArtifactInputs &in);

} // namespace mlir::kiln

#endif // KILN_CODEGEN_ARTIFACT_ARTIFACTWRITER_H

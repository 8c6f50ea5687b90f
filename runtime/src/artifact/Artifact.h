//===- Artifact.h - Loading and validating a Kiln artifact --------*- C++ -*-===//
//
// An artifact directory (docs/artifact.md) as the runtime sees it after
// validation: the parsed manifest, weights.bin mapped read-only, the
// tokenizer, and model.so loaded with its two entry points resolved.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_ARTIFACT_ARTIFACT_H
#define KILN_RUNTIME_ARTIFACT_ARTIFACT_H

#include "base/Status.h"
#include "kiln_rt/cuda_abi.h"
#include "kiln_rt/kernel_abi.h"
#include "tokenizer/Tokenizer.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::rt {

class CudaBackend;
class Executor;

/// Where an artifact's model.so runs (manifest "target").
enum class Target { Cpu, Cuda };

/// One entry of manifest weights.tensors (bytes of weights.bin).
struct WeightTensor {
  std::string name;
  uint64_t offset = 0; ///< bytes from the start of weights.bin, % 64 == 0
  uint64_t bytes = 0;
  std::string dtype; ///< "f32", "f16", "bf16"; empty when not given
};

/// One entry of manifest files: expected size and XXH3-64 (16 hex digits).
struct ArtifactFile {
  std::string name;
  uint64_t bytes = 0;
  std::string xxh3;
};

/// What the runtime reads from manifest.json (docs/artifact.md, version 1).
struct Manifest {
  Target target = Target::Cpu;
  std::string targetName;      ///< "cpu" or "cuda"
  std::string dtype = "f32";   ///< recipe.dtype: f32, f16 or bf16 (default f32)
  std::string quant = "none";  ///< recipe.quant (informative)
  std::string kvDtype = "f32"; ///< runtime.kv_cache.dtype
  std::string modelName;
  int64_t vocabSize = 0;
  int64_t maxSeqLen = 0; ///< model.max_seq_len
  uint64_t arenaBytes = 0;
  int64_t maxPrefillTokens = 0;
  std::string prefillEntry, decodeEntry;
  int64_t kvLayers = 0, kvHeads = 0, kvHeadDim = 0, kvMaxSeq = 0;
  uint64_t kvBytes = 0;
  std::string weightsFile, tokenizerFile;
  std::vector<WeightTensor> tensors;
  std::vector<ArtifactFile> files;
};

using EntryPoint = void (*)(kiln_exec_ctx *ctx, int64_t n, int64_t pos);

/// Bytes per element of "f32", "f16", "bf16"; 0 for anything else.
uint64_t dtypeBytes(const std::string &dtype);

/// Parses and validates manifest text (no file system access beyond none).
/// `dir` prefixes messages: "DIR/manifest.json: ...".
Status parseManifest(const std::string &text, const std::string &dir,
                     Manifest &out);

/// XXH3-64 of a file's contents as 16 lowercase hex digits.
Status hashFile(const std::string &path, std::string &outHex);

/// A loaded, validated artifact. Immutable after open() except the scratch
/// string used by detokenization.
class Artifact {
public:
  ~Artifact();
  Artifact(const Artifact &) = delete;
  Artifact &operator=(const Artifact &) = delete;

  /// Validates and loads the artifact in directory `dir` (see api.h
  /// kiln_rt_artifact_open). `verifyChecksums` = false skips XXH3 hashing.
  static Status open(const std::string &dir, bool verifyChecksums,
                     std::unique_ptr<Artifact> &out);

  const Manifest &manifest() const { return manifest_; }
  const std::string &dir() const { return dir_; }
  const uint8_t *weights() const { return weights_; }
  uint64_t weightsBytes() const { return weightsBytes_; }
  const Tokenizer &tokenizer() const { return tokenizer_; }
  Target target() const { return manifest_.target; }
  /// CPU target: model.so's entry points (nullptr for CUDA artifacts).
  EntryPoint prefill() const { return prefill_; }
  EntryPoint decode() const { return decode_; }
  /// The device the model runs on ("cpu" or the CUDA device's name).
  const std::string &deviceName() const { return deviceName_; }
  /// The per-session buffers and step runner for this artifact's target.
  Status createExecutor(std::unique_ptr<Executor> &out) const;
  /// CUDA target: device-to-device copy bandwidth in bytes/s.
  Status deviceBandwidth(uint64_t bytes, int32_t reps, double &out) const;
  /// Context length: min(model.max_seq_len, runtime.kv_cache.max_seq).
  int64_t contextLength() const;

  std::string pieceScratch; ///< backing store for kiln_rt_detokenize

private:
  Artifact() = default;
  Status load(bool verifyChecksums);
  Status loadModelLibrary();
  Status loadCuda();
  /// dlsym in model.so; `field` names the manifest field, nullptr for a
  /// fixed cuda_abi.h symbol.
  /// Compares model.so's kiln_plan_info with the manifest.
  Status checkPlanInfo() const;
  Status resolveSymbol(const std::string &name, const char *field,
                       void *&out) const;

  std::string dir_;
  Manifest manifest_;
  Tokenizer tokenizer_;
  const uint8_t *weights_ = nullptr;
  uint64_t weightsBytes_ = 0;
  void *mapping_ = nullptr;
  uint64_t mappingBytes_ = 0;
  void *library_ = nullptr;
  EntryPoint prefill_ = nullptr, decode_ = nullptr;
  std::string deviceName_ = "cpu";
  std::unique_ptr<CudaBackend> cuda_; ///< released before model.so
};

} // namespace kiln::rt

#endif // KILN_RUNTIME_ARTIFACT_ARTIFACT_H

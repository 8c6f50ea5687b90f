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

/// One entry of manifest files: expected size, XXH3-64 (16 hex digits) and,
/// when listed, BLAKE2b-256 (64 hex digits; required for signed artifacts).
struct ArtifactFile {
  std::string name;
  uint64_t bytes = 0;
  std::string xxh3;
  std::string blake2b; ///< empty when the manifest has none
};

class Communicator;

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
  /// runtime.entry_points.step (optional): the batched step; empty if none.
  std::string stepEntry;
  /// runtime.entry_points.verify (optional): speculative decoding's verify
  /// step (kiln-verify-entry: prefill with every row's logits); empty if
  /// none.
  std::string verifyEntry;
  int64_t kvLayers = 0, kvHeads = 0, kvHeadDim = 0, kvMaxSeq = 0;
  uint64_t kvBytes = 0;
  std::string weightsFile, tokenizerFile;
  /// manifest "parallel" (optional; docs/parallelism.md): the tensor-
  /// parallel group size the plan was partitioned for (1: not partitioned)
  /// and rank r's weight shard file, rankWeightsFiles[r], all of one size
  /// and one layout (`tensors`); weightsFile is then this process's shard
  /// once the artifact is opened (rank 0's in a parsed manifest).
  int64_t tp = 1;
  std::vector<std::string> rankWeightsFiles;
  /// Pipeline parallelism (parallel.pp, .stage, .stages): `pp` stages of tp
  /// ranks each; this manifest's program is stage `stage`'s. The
  /// artifact's own manifest is stage 0's and names the directories of
  /// stages 1 .. pp - 1 (`stageDirs`, each listed in `files` by its
  /// manifest.json), which hold their own programs and shards.
  int64_t pp = 1, stage = 0;
  std::vector<std::string> stageDirs;
  std::vector<WeightTensor> tensors;
  std::vector<ArtifactFile> files;
  /// manifest "chat" (optional; docs/artifact.md): the template file (empty:
  /// none), the ids that end an assistant turn (default: the tokenizer's
  /// EOS) and the bos_token / eos_token strings templates print.
  std::string chatTemplateFile;
  std::vector<int32_t> endOfTurnIds;
  std::string bosToken, eosToken;
};

using EntryPoint = void (*)(kiln_exec_ctx *ctx, int64_t n, int64_t pos);

/// Bytes per element of "f32", "f16", "bf16"; 0 for anything else.
uint64_t dtypeBytes(const std::string &dtype);

/// Parses and validates manifest text (no file system access beyond none).
/// `dir` prefixes messages: "DIR/manifest.json: ...".
Status parseManifest(const std::string &text, const std::string &dir,
                     Manifest &out);

/// How Artifact::open validates (api.h kiln_rt_open_options_t).
struct OpenOptions {
  bool verifyChecksums = true; ///< false skips XXH3 hashing (sizes checked)
  /// Non-empty: a directory of trusted *.pub keys or one key file; the
  /// artifact must be signed by one of them (docs/security.md).
  std::string trustedKeys;
};

/// A loaded, validated artifact. Immutable after open() except the scratch
/// string used by detokenization.
class Artifact {
public:
  ~Artifact();
  Artifact(const Artifact &) = delete;
  Artifact &operator=(const Artifact &) = delete;

  /// Validates and loads the artifact in directory `dir` (see api.h
  /// kiln_rt_artifact_open_with_options).
  static Status open(const std::string &dir, const OpenOptions &options,
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
  /// CPU target: the batched step kiln_step (nullptr when the artifact has
  /// none) and the most token rows one step may take.
  EntryPoint step() const { return step_; }
  int64_t stepMaxTokens() const { return stepMaxTokens_; }
  /// Whether the plan has the batched step (either target).
  bool hasStep() const { return !manifest_.stepEntry.empty(); }
  /// CPU target: the verify entry point kiln_verify (nullptr when the
  /// artifact has none): prefill's step writing float32[n, vocab] logits.
  EntryPoint verify() const { return verify_; }
  bool hasVerify() const { return !manifest_.verifyEntry.empty(); }
  /// CUDA target: the device model (nullptr for cpu artifacts).
  const CudaBackend *cudaBackend() const { return cuda_.get(); }
  /// The device the model runs on ("cpu" or the CUDA device's name).
  const std::string &deviceName() const { return deviceName_; }
  /// The per-session buffers and step runner for this artifact's target.
  /// Partitioned artifacts: on rank 0 an executor that drives the other
  /// ranks too (comm/ParallelExecutor.h); refused on the other ranks,
  /// which follow rank 0 (followRankZero).
  Status createExecutor(std::unique_ptr<Executor> &out) const;
  /// This rank's own executor for the target (no commands to the other
  /// ranks): what rank 0's executor wraps and what followers run.
  Status createRankExecutor(std::unique_ptr<Executor> &out) const;
  /// Partitioned artifacts: this process's group (null when tp is 1).
  Communicator *group() const { return group_; }
  /// CUDA target: device-to-device copy bandwidth in bytes/s.
  Status deviceBandwidth(uint64_t bytes, int32_t reps, double &out) const;
  /// Context length: min(model.max_seq_len, runtime.kv_cache.max_seq).
  int64_t contextLength() const;
  /// chat_template.jinja's text (hash-checked like every file); empty when
  /// the artifact has none.
  const std::string &chatTemplate() const { return chatTemplate_; }

  std::string pieceScratch; ///< backing store for kiln_rt_detokenize

private:
  Artifact() = default;
  Status load(const OpenOptions &options);
  /// Opens `name` inside the artifact directory: never through a symbolic
  /// link, never blocking on a FIFO; anything but a regular file is refused.
  /// `ifMissing` ends the message when it does not exist.
  Status openMember(const std::string &name, int &fd, uint64_t &bytes,
                    const std::string &ifMissing) const;
  /// Reads the whole of `fd` (at most `limit` bytes) into `out`.
  Status readMember(int fd, const std::string &name, uint64_t limit,
                    std::string &out) const;
  /// Checks manifest.sig against `manifestText` and the trusted keys.
  Status verifySignature(const std::string &manifestText,
                         const std::string &trustedKeys);
  /// Opens, size-checks and hashes every file manifest.json lists, keeping
  /// what the runtime uses (weights.bin, tokenizer.json, model.so) open or
  /// in memory so that what was checked is what is used.
  Status checkFiles(const OpenOptions &options, std::string &tokenizerText);
  std::string chatTemplate_;
  Status loadModelLibrary();
  Status loadCuda();
  /// dlsym in model.so; `field` names the manifest field, nullptr for a
  /// fixed cuda_abi.h symbol.
  /// Compares model.so's kiln_plan_info with the manifest and the size of
  /// weights.bin.
  Status checkPlanInfo();
  Status resolveSymbol(const std::string &name, const char *field,
                       void *&out) const;

  std::string dir_;
  int dirFd_ = -1;        ///< the artifact directory, while loading
  int weightsFd_ = -1;    ///< weights.bin, while loading
  int modelFd_ = -1;      ///< model.so as checked, until dlopen
  std::string modelCode_; ///< model.so's verified bytes (signed artifacts)
  bool signatureVerified_ = false;
  Manifest manifest_;
  Tokenizer tokenizer_;
  const uint8_t *weights_ = nullptr;
  uint64_t weightsBytes_ = 0;
  void *mapping_ = nullptr;
  uint64_t mappingBytes_ = 0;
  void *library_ = nullptr;
  EntryPoint prefill_ = nullptr, decode_ = nullptr, step_ = nullptr,
             verify_ = nullptr;
  int64_t stepMaxTokens_ = 0;
  std::string deviceName_ = "cpu";
  std::unique_ptr<CudaBackend> cuda_; ///< released before model.so
  Communicator *group_ = nullptr;
  /// A rank of pipeline stage `stage` > 0: checks that stage's manifest
  /// against stage 0's listing and makes its directory this artifact's.
  Status enterStage(int32_t stage, const OpenOptions &options);
};

} // namespace kiln::rt

#endif // KILN_RUNTIME_ARTIFACT_ARTIFACT_H

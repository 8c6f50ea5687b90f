//===- ArtifactWriter.cpp - write a compiled artifact directory -----------===//

#include "codegen/Artifact/ArtifactWriter.h"
#include "codegen/Artifact/SafeOutput.h"
#include "codegen/Artifact/TokenizerWriter.h"
#include "codegen/Artifact/WeightWriter.h"
#include "codegen/CPU/Passes.h"
#include "dialects/Kiln/IR/KilnOps.h"
#include "dialects/Kiln/Import/ImportUtils.h"
#include "dialects/Kiln/Import/Prequantized.h"
#include "dialects/Plan/IR/PlanOps.h"
#include "passes/Transforms/WeightRecipe.h"
#include "kiln_rt/cuda_abi.h"
#include "kiln_rt/kernel_abi.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <utility>

using namespace mlir;
using namespace mlir::kiln;

/// The kernel ABI header, embedded at build time so emitted code compiles
/// wherever kiln-compile runs.
static constexpr const char *kKernelAbiHeader =
#include "codegen/Artifact/KernelAbiHeader.inc"
    ;
static constexpr const char *kPlanInfoHeader =
#include "codegen/Artifact/PlanInfoHeader.inc"
    ;
static constexpr const char *kSequenceShardHeader =
#include "codegen/Artifact/SequenceShardHeader.inc"
    ;
static constexpr const char *kBlockFormatsHeader =
#include "codegen/Artifact/BlockFormatsHeader.inc"
    ;
static constexpr const char *kRopeScalingHeader =
#include "codegen/Artifact/RopeScalingHeader.inc"
    ;
static constexpr const char *kCudaAbiHeader =
#include "codegen/Artifact/CudaAbiHeader.inc"
    ;
static constexpr const char *kCudaKernelsHeader =
#include "codegen/Artifact/CudaKernelsHeader.inc"
    ;
/// The family headers KilnKernels.cuh includes, beside it.
static constexpr std::pair<const char *, const char *> kCudaFamilyHeaders[] = {
    {"KilnCudaCommon.cuh",
#include "codegen/Artifact/KilnCudaCommon.inc"
    },
    {"KilnCudaPointwise.cuh",
#include "codegen/Artifact/KilnCudaPointwise.inc"
    },
    {"KilnCudaLinear.cuh",
#include "codegen/Artifact/KilnCudaLinear.inc"
    },
    {"KilnCudaQuantLinear.cuh",
#include "codegen/Artifact/KilnCudaQuantLinear.inc"
    },
    {"KilnCudaAttention.cuh",
#include "codegen/Artifact/KilnCudaAttention.inc"
    },
    {"KilnCudaSampling.cuh",
#include "codegen/Artifact/KilnCudaSampling.inc"
    },
    {"KilnCudaBlocks.cuh",
#include "codegen/Artifact/KilnCudaBlocks.inc"
    },
    {"KilnCudaHost.cuh",
#include "codegen/Artifact/KilnCudaHost.inc"
    },
    {"KilnCudaFused.cuh",
#include "codegen/Artifact/KilnCudaFused.inc"
    },
    {"KilnCudaStep.cuh",
#include "codegen/Artifact/KilnCudaStep.inc"
    },
    {"KilnCudaSparse.cuh",
#include "codegen/Artifact/KilnCudaSparse.inc"
    },
    {"KilnCudaComm.cuh",
#include "codegen/Artifact/KilnCudaComm.inc"
    },
};

FailureOr<std::vector<WeightDesc>> mlir::kiln::collectWeightRecipes(ModuleOp graph) {
  std::vector<WeightDesc> out;
  for (WeightOp op : graph.getOps<WeightOp>()) {
    FailureOr<WeightDesc> w = getWeightRecipe(op);
    if (failed(w))
      return failure();
    w->keepF32 = op.getTensorType().getElementType().isF32();
    out.push_back(std::move(*w));
  }
  return out;
}

static llvm::Error writeFile(StringRef path, StringRef contents) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return llvm::createStringError(ec, "cannot write " + path + ": " +
                                           ec.message());
  os << contents;
  os.close();
  if (os.has_error())
    return llvm::createStringError(os.error(), "cannot write " + path + ": " +
                                                   os.error().message());
  return llvm::Error::success();
}

/// Files a Kiln artifact directory may hold.
namespace fs = llvm::sys::fs;

static bool isArtifactFile(StringRef name) {
  // weights.rank<R>.bin: a partitioned artifact's shards.
  StringRef rank = name;
  if (rank.consume_front("weights.rank") && rank.consume_back(".bin") &&
      !rank.empty() && llvm::all_of(rank, llvm::isDigit))
    return true;
  return llvm::is_contained(ArrayRef<StringRef>{"manifest.json", "model.so",
                                                "model.cpp", "model.cu",
                                                "weights.bin", "tokenizer.json",
                                                "chat_template.jinja",
                                                "manifest.sig"},
                            name);
}

/// Succeeds if `dir` is empty or an existing Kiln artifact (manifest.json
/// with "format": "kiln-artifact" and only artifact files), so replacing it
/// loses nothing the user put there.
static llvm::Error checkReplaceable(StringRef dir, bool isStage = false);

/// The pipeline stages an artifact's manifest names (parallel.stages).
static SmallVector<std::string> stagesOf(const llvm::json::Object &manifest) {
  SmallVector<std::string> stages;
  if (const llvm::json::Object *p = manifest.getObject("parallel"))
    if (const llvm::json::Array *a = p->getArray("stages"))
      for (const llvm::json::Value &v : *a)
        if (std::optional<StringRef> name = v.getAsString())
          stages.push_back(name->str());
  return stages;
}

/// `isStage`: `dir` is a pipeline stage of the artifact above it (a stage
/// holds no stages of its own).
static llvm::Error checkReplaceable(StringRef dir, bool isStage) {
  std::error_code ec;
  SmallVector<std::string> entries;
  for (fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec))
    entries.push_back(llvm::sys::path::filename(it->path()).str());
  if (ec)
    return llvm::createStringError(ec, "cannot list " + dir + ": " +
                                           ec.message());
  if (entries.empty())
    return llvm::Error::success();
  auto refuse = [&](const Twine &why) {
    return llvm::createStringError(
        dir + " " + why +
        "; refusing to replace something that is not a Kiln artifact "
        "(choose another -o or remove it)");
  };
  SmallString<256> manifestPath(dir);
  llvm::sys::path::append(manifestPath, "manifest.json");
  // A regular file of bounded size (a FIFO here must not hang us), nested
  // at most kMaxJsonDepth deep (json::parse recurses).
  auto buffer = mlir::kiln::detail::readRegularFile(
      manifestPath, mlir::kiln::detail::kMaxJsonConfigBytes, "a manifest file");
  if (!buffer) {
    std::string why = llvm::toString(buffer.takeError());
    if (!fs::exists(manifestPath))
      return refuse("is a non-empty directory without manifest.json");
    return refuse("has a manifest.json that cannot be read (" + why + ")");
  }
  if (llvm::Error e = mlir::kiln::detail::checkJsonDepth(
          (*buffer)->getBuffer(), manifestPath))
    return refuse("has a manifest.json that is not valid JSON (" +
                  llvm::toString(std::move(e)) + ")");
  llvm::Expected<llvm::json::Value> manifest =
      llvm::json::parse((*buffer)->getBuffer());
  if (!manifest) {
    llvm::consumeError(manifest.takeError());
    return refuse("has a manifest.json that is not valid JSON");
  }
  const llvm::json::Object *object = manifest->getAsObject();
  std::optional<StringRef> format =
      object ? object->getString("format") : std::nullopt;
  if (!format || *format != "kiln-artifact")
    return refuse("has a manifest.json whose \"format\" is not "
                  "\"kiln-artifact\"");
  // A pipeline stage's directory is part of the artifact when the manifest
  // names it and it is itself an artifact of artifact files only.
  SmallVector<std::string> stages =
      isStage ? SmallVector<std::string>() : stagesOf(*object);
  for (const std::string &name : entries) {
    if (isArtifactFile(name))
      continue;
    SmallString<256> sub(dir);
    llvm::sys::path::append(sub, name);
    if (llvm::is_contained(stages, name) && !fs::is_symlink_file(sub) &&
        fs::is_directory(sub)) {
      if (auto err = checkReplaceable(sub, /*isStage=*/true))
        return err;
      continue;
    }
    return refuse("holds '" + name + "', which is not an artifact file");
  }
  return llvm::Error::success();
}

static llvm::json::Object modelJson(const LlamaConfig &c, ModuleOp plan) {
  int64_t maxSeq = c.maxSeqLen;
  if (auto model = plan->getAttrOfType<DictionaryAttr>("kiln.model"))
    if (auto s = model.getAs<IntegerAttr>("max_seq_len"))
      maxSeq = s.getInt();
  return llvm::json::Object{
      {"name", c.name},
      {"architecture", "llama"},
      {"source", c.sourcePath},
      {"source_format", c.sourceFormat},
      {"dim", c.dim},
      {"hidden_dim", c.hiddenDim},
      {"n_layers", c.nLayers},
      {"n_heads", c.nHeads},
      {"n_kv_heads", c.nKvHeads},
      {"head_dim", c.headDim},
      {"vocab_size", c.vocabSize},
      {"max_seq_len", maxSeq},
      {"rms_norm_eps", c.rmsNormEps},
      {"rope_theta", c.ropeTheta},
      {"tied_embeddings", c.tiedEmbeddings},
  };
}

/// Writes the files of one program's artifact (`in`) into `tmp`, building
/// in `includeDir`; `outDir` names it in messages. `stageManifests`: the
/// pipeline stages' manifests already in `tmp` (stage 0 lists them).
static llvm::Error writeArtifactFiles(const ArtifactInputs &in, StringRef tmp,
                                      StringRef includeDir, StringRef outDir,
                                      ArrayRef<std::string> stageManifests) {
  ModuleOp planModule = in.plan;
  const LlamaConfig &cfg = in.model->config;
  auto pathIn = [&](StringRef name) {
    SmallString<256> p(tmp);
    llvm::sys::path::append(p, name);
    return std::string(p);
  };

  bool cuda = in.target == "cuda";
  StorageType dtype = in.dtype == "bf16"  ? StorageType::BF16
                      : in.dtype == "f16" ? StorageType::F16
                                          : StorageType::F32;
  std::string codeFile = cuda ? "model.cu" : "model.cpp";

  // Weights, streamed one tensor at a time, at the offsets the plan chose;
  // a partitioned plan's shards one file per rank, each laid out as rank
  // 0's (the code reads them at the same offsets).
  const bool partitioned = in.tp > 1;
  if (partitioned && in.shards.size() != size_t(in.tp - 1))
    return llvm::createStringError(
        "internal error: " + std::to_string(in.tp) + " ranks but " +
        std::to_string(in.shards.size() + 1) + " weight shards");
  std::vector<std::string> weightFiles;
  for (int64_t r = 0; r < (partitioned ? in.tp : 1); ++r)
    weightFiles.push_back(partitioned
                              ? "weights.rank" + std::to_string(r) + ".bin"
                              : std::string("weights.bin"));
  auto written = writeWeightsFile(pathIn(weightFiles[0]), in.weights, dtype);
  if (!written)
    return written.takeError();
  for (int64_t r = 1; r < int64_t(weightFiles.size()); ++r) {
    auto shard = writeWeightsFile(pathIn(weightFiles[size_t(r)]),
                                  in.shards[size_t(r - 1)], dtype);
    if (!shard)
      return shard.takeError();
    bool same = shard->size() == written->size();
    for (size_t i = 0; same && i < shard->size(); ++i) {
      const WrittenTensor &a = (*written)[i], &b = (*shard)[i];
      same = a.name == b.name && a.offset == b.offset && a.bytes == b.bytes &&
             a.dtype == b.dtype && a.shape == b.shape;
    }
    if (!same)
      return llvm::createStringError(
          "internal error: rank " + std::to_string(r) +
          "'s weights are not laid out as rank 0's (one model.so reads "
          "every shard at the same offsets)");
  }
  llvm::StringMap<int64_t> planOffsets;
  for (auto w : planModule.getOps<plan::WeightOp>())
    planOffsets[w.getSymName()] = w.getOffset();
  llvm::json::Array tensors;
  for (const WrittenTensor &t : *written) {
    auto it = planOffsets.find(t.name);
    if (it == planOffsets.end() || static_cast<uint64_t>(it->second) != t.offset)
      return llvm::createStringError(
          "internal error: weight '" + t.name + "' written at offset " +
          std::to_string(t.offset) + " but the plan expects it at " +
          (it == planOffsets.end() ? std::string("no offset")
                                   : std::to_string(it->second)));
    tensors.push_back(llvm::json::Object{
        {"name", t.name},
        {"offset", static_cast<int64_t>(t.offset)},
        {"bytes", static_cast<int64_t>(t.bytes)},
        {"dtype", t.dtype},
        {"shape", llvm::json::Array(t.shape)}});
  }

  if (auto err = writeTokenizerJson(pathIn("tokenizer.json"), in.model->tokenizer))
    return err;
  if (auto err = writeFile(pathIn(codeFile), in.cpp))
    return err;
  const ChatDesc &chat = in.model->chat;
  if (!chat.tmpl.empty())
    if (auto err = writeFile(pathIn("chat_template.jinja"), chat.tmpl))
      return err;

  // Compile the emitted code against the embedded kernel ABI header.
  // Errors name the code as the user knows it: the scratch path is removed
  // before they are printed.
  std::string shownCode = codeFile + " (emitted for " + outDir.str() + ")";
  SmallString<256> headerDir(includeDir);
  llvm::sys::path::append(headerDir, "kiln_rt");
  if (std::error_code ec = fs::create_directory(headerDir))
    return llvm::createStringError(ec, "cannot create " + headerDir + ": " +
                                           ec.message());
  auto writeHeader = [&](StringRef dir, StringRef name, StringRef text) {
    SmallString<256> header(dir);
    llvm::sys::path::append(header, name);
    return writeFile(header, text);
  };
  if (auto err = writeHeader(headerDir, "kernel_abi.h", kKernelAbiHeader))
    return err;
  if (auto err = writeHeader(headerDir, "plan_info.h", kPlanInfoHeader))
    return err;
  if (auto err =
          writeHeader(headerDir, "sequence_shard.h", kSequenceShardHeader))
    return err;
  if (cuda) {
    if (auto err = writeHeader(headerDir, "cuda_abi.h", kCudaAbiHeader))
      return err;
    if (auto err =
            writeHeader(headerDir, "block_formats.h", kBlockFormatsHeader))
      return err;
    if (auto err =
            writeHeader(headerDir, "rope_scaling.h", kRopeScalingHeader))
      return err;
    if (auto err = writeHeader(includeDir, "KilnKernels.cuh", kCudaKernelsHeader))
      return err;
    for (const auto &[name, text] : kCudaFamilyHeaders)
      if (auto err = writeHeader(includeDir, name, text))
        return err;
    if (auto err = compileCudaSharedObject(pathIn(codeFile), pathIn("model.so"),
                                           includeDir, shownCode,
                                           /*linkNccl=*/partitioned || in.pp > 1))
      return err;
  } else if (auto err = compileSharedObject(pathIn(codeFile), pathIn("model.so"),
                                            includeDir, shownCode)) {
    return err;
  }

  // Checksums of every file, then the manifest.
  llvm::json::Object files;
  std::vector<StringRef> fileNames = {StringRef("model.so"), StringRef(codeFile)};
  for (const std::string &w : weightFiles)
    fileNames.push_back(w);
  fileNames.push_back("tokenizer.json");
  if (!chat.tmpl.empty())
    fileNames.push_back("chat_template.jinja");
  for (const std::string &m : stageManifests)
    fileNames.push_back(m);
  for (StringRef name : fileNames) {
    std::string p = pathIn(name);
    uint64_t size = 0;
    if (std::error_code ec = fs::file_size(p, size))
      return llvm::createStringError(ec, "cannot stat " + p);
    // BLAKE2b-256 is what a signature of the manifest binds contents to.
    auto hashes = hashFileForManifest(p);
    if (!hashes)
      return hashes.takeError();
    files[name] = llvm::json::Object{{"bytes", static_cast<int64_t>(size)},
                                     {"xxh3_64", hashes->xxh3},
                                     {"blake2b_256", hashes->blake2b}};
  }
  auto getI64 = [&](Operation *op, StringRef name) -> int64_t {
    auto a = op->getAttrOfType<IntegerAttr>(name);
    return a ? a.getInt() : 0;
  };
  int64_t maxTokens = 0;
  for (auto f : planModule.getOps<func::FuncOp>())
    if (f.getSymName() == "prefill")
      maxTokens = getI64(f, "plan.max_tokens");
  llvm::json::Object model = modelJson(cfg, planModule);
  // The batched step (kiln-batch-step) when the plan has one.
  llvm::json::Object entryPoints{{"prefill", "kiln_prefill"},
                                 {"decode", "kiln_decode"}};
  // The verify step (kiln-verify-entry) likewise.
  for (auto f : planModule.getOps<func::FuncOp>()) {
    if (f.getSymName() == "step")
      entryPoints["step"] = "kiln_step";
    if (f.getSymName() == "verify")
      entryPoints["verify"] = "kiln_verify";
  }
  int64_t maxSeq = *model.getInteger("max_seq_len");
  // Per layer: keys and values, then (int8, fp8_e4m3) their per-(token,
  // head) f32 scales.
  bool kvQuantized = in.kvDtype == "int8" || in.kvDtype == "fp8_e4m3";
  int64_t kvElementBytes = kvQuantized ? 1 : in.kvDtype == "f32" ? 4 : 2;
  const int64_t kvHeads = in.kvHeads > 0 ? in.kvHeads : cfg.nKvHeads;
  const int64_t kvLayers = in.kvLayers > 0 ? in.kvLayers : cfg.nLayers;
  int64_t kvBytes = kvLayers * 2 * maxSeq * kvHeads *
                    (cfg.headDim * kvElementBytes + (kvQuantized ? 4 : 0));
  // Then (summary = B) the pages' f32 key minimum and maximum.
  if (in.kvSummaryBlock > 0)
    kvBytes += kvLayers * 2 *
               ((maxSeq + in.kvSummaryBlock - 1) / in.kvSummaryBlock) *
               kvHeads * cfg.headDim * 4;
  // A pre-quantized checkpoint names its format (Prequantized.h).
  std::string quant = in.quant;
  if (std::string pre = prequantizedRecipe(*in.model);
      quant == "none" && !pre.empty())
    quant = pre;
  llvm::json::Object manifest{
      {"format", "kiln-artifact"},
      {"version", 1},
      {"abi_version", cuda ? KILN_CUDA_ABI_VERSION : KILN_ABI_VERSION},
      {"target", in.target},
      {"model", std::move(model)},
      {"recipe", llvm::json::Object{{"dtype", in.dtype},
                                    {"quant", quant},
                                    {"pipeline", in.pipeline}}},
      {"runtime",
       llvm::json::Object{
           {"arena_bytes", getI64(planModule, "plan.arena_bytes")},
           {"max_prefill_tokens", maxTokens},
           {"entry_points", std::move(entryPoints)},
           {"kv_cache", llvm::json::Object{{"layers", kvLayers},
                                           {"kv_heads", kvHeads},
                                           {"head_dim", cfg.headDim},
                                           {"max_seq", maxSeq},
                                           {"dtype", in.kvDtype},
                                           {"key_summary_block",
                                            in.kvSummaryBlock},
                                           {"bytes", kvBytes}}}}},
      {"weights", llvm::json::Object{{"file", weightFiles[0]},
                                     {"tensors", std::move(tensors)}}},
      {"tokenizer", llvm::json::Object{{"file", "tokenizer.json"}}},
      {"files", std::move(files)},
  };
  if (partitioned || in.pp > 1) {
    llvm::json::Object parallel{{"tp", in.tp},
                                {"weights", llvm::json::Array(weightFiles)}};
    if (in.pp > 1) {
      parallel["pp"] = in.pp;
      parallel["stage"] = in.stage;
      if (in.stage == 0) {
        llvm::json::Array dirs;
        for (int64_t st = 1; st < in.pp; ++st)
          dirs.push_back("stage" + std::to_string(st));
        parallel["stages"] = std::move(dirs);
      }
    }
    manifest["parallel"] = std::move(parallel);
  }
  // Chat: the template file (when the checkpoint has one), the tokens that
  // end a turn, and the strings templates use as bos_token / eos_token.
  {
    const TokenizerDesc &tok = in.model->tokenizer;
    std::vector<int32_t> eot = chat.endOfTurnIds;
    if (eot.empty())
      eot.push_back(tok.eosId);
    // llama2.c's run.c also ends a sequence at BOS (its story delimiter).
    if (cfg.sourceFormat == "llama2c" &&
        std::find(eot.begin(), eot.end(), tok.bosId) == eot.end())
      eot.push_back(tok.bosId);
    auto piece = [&](int32_t id) -> std::string {
      if (id < 0 || size_t(id) >= tok.pieces.size() ||
          !llvm::json::isUTF8(tok.pieces[size_t(id)]))
        return std::string();
      return tok.pieces[size_t(id)];
    };
    llvm::json::Object c{{"end_of_turn_ids", llvm::json::Array(eot)},
                         {"bos_token", piece(tok.bosId)},
                         {"eos_token", piece(tok.eosId)}};
    if (!chat.tmpl.empty())
      c["template"] = "chat_template.jinja";
    manifest["chat"] = std::move(c);
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(manifest))) << "\n";
  if (auto err = writeFile(pathIn("manifest.json"), text))
    return err;
  if (in.signKey) {
    ::kiln::sign::Signature sig = ::kiln::sign::signMessage(*in.signKey, text);
    if (auto err = writeFile(pathIn(::kiln::sign::kSignatureFile),
                             StringRef(reinterpret_cast<const char *>(sig.data()),
                                       sig.size())))
      return err;
  }
  return llvm::Error::success();
}

llvm::Error mlir::kiln::writeArtifact(StringRef outPath,
                                      const ArtifactInputs &in) {
  auto note = [&](const llvm::Twine &message) {
    if (in.note)
      in.note(message);
    else
      llvm::errs() << "kiln: note: " << message << "\n";
  };

  // "out.kiln/" is out.kiln; a symbolic link is followed, so what it points
  // to is replaced and the link is kept (docs/artifact.md).
  llvm::Expected<ResolvedOutput> resolved = resolveOutputPath(outPath);
  if (!resolved)
    return resolved.takeError();
  std::string outDir = resolved->path;
  std::string via = resolved->symlinkVia.empty()
                        ? std::string()
                        : " (where the symbolic link " + resolved->symlinkVia +
                              " points)";

  // Refuse to clobber anything but a Kiln artifact: an existing directory
  // may be replaced only if its manifest.json says it is one and it holds
  // nothing but artifact files.
  auto checkTarget = [&]() -> llvm::Error {
    if (!fs::exists(outDir))
      return llvm::Error::success();
    if (!fs::is_directory(outDir))
      return llvm::createStringError(outDir + via +
                                     " exists and is not a directory");
    if (auto err = checkReplaceable(outDir))
      return llvm::createStringError(llvm::toString(std::move(err)) + via);
    return llvm::Error::success();
  };
  // Not inside another artifact (a pipeline stage's directory): replacing
  // it would break the artifact above, whose manifest lists its checksums.
  {
    SmallString<256> above(llvm::sys::path::parent_path(outDir));
    llvm::sys::path::append(above, "manifest.json");
    auto text = fs::exists(above)
                    ? mlir::kiln::detail::readRegularFile(
                          above, mlir::kiln::detail::kMaxJsonConfigBytes,
                          "a manifest file")
                    : llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>(
                          nullptr);
    if (!text)
      llvm::consumeError(text.takeError());
    else if (*text && (*text)->getBuffer().contains("\"kiln-artifact\""))
      return llvm::createStringError(
          outDir + via + " is inside the artifact " +
          llvm::sys::path::parent_path(outDir) +
          " (a pipeline stage's directory?); refusing to write an artifact "
          "there: choose a directory outside it");
  }
  if (auto err = checkTarget())
    return err;

  SmallString<256> parent(llvm::sys::path::parent_path(outDir));
  if (parent.empty())
    parent = ".";
  if (std::error_code ec = fs::create_directories(parent))
    return llvm::createStringError(ec, "cannot create " + parent + ": " +
                                           ec.message());

  // Everything is written into a private scratch directory beside the
  // target (same file system, so the final rename is atomic), named
  // unpredictably and removed on every exit path (SafeOutput.h):
  //   <name>.kiln-tmp-XXXXXX/artifact/  the new artifact
  //   <name>.kiln-tmp-XXXXXX/build/     headers and compiler log
  // First, what killed runs left there.
  std::string scratchPrefix =
      (llvm::sys::path::filename(outDir) + ".kiln-tmp-").str();
  for (const std::string &line : removeStaleScratchDirs(parent, scratchPrefix))
    note(line);
  llvm::Expected<ScratchDir> scratch = ScratchDir::create(parent, scratchPrefix);
  if (!scratch)
    return scratch.takeError();
  std::string tmp = scratch->child("artifact");
  std::string includeDir = scratch->child("build");
  for (const std::string &dir : {tmp, includeDir})
    if (std::error_code ec = fs::create_directory(dir, /*IgnoreExisting=*/false))
      return llvm::createStringError(ec, "cannot create " + dir + ": " +
                                             ec.message());
  // Pipeline stages 1 .. pp - 1 first, each a complete artifact in its own
  // stage<S>/ directory (and build directory); stage 0's manifest lists
  // their manifests.
  std::vector<std::string> stageManifests;
  for (const ArtifactInputs &later : in.laterStages) {
    const std::string name = "stage" + std::to_string(later.stage);
    SmallString<256> stageDir(tmp), stageBuild(includeDir);
    llvm::sys::path::append(stageDir, name);
    llvm::sys::path::append(stageBuild, name);
    for (StringRef dir : {StringRef(stageDir), StringRef(stageBuild)})
      if (std::error_code ec =
              fs::create_directory(dir, /*IgnoreExisting=*/false))
        return llvm::createStringError(ec, "cannot create " + dir + ": " +
                                               ec.message());
    if (auto err = writeArtifactFiles(later, stageDir, stageBuild,
                                      outDir + "/" + name, {}))
      return err;
    stageManifests.push_back(name + "/manifest.json");
  }
  if (auto err = writeArtifactFiles(in, tmp, includeDir, outDir,
                                    stageManifests))
    return err;

  // Swap into place: renameat2(RENAME_EXCHANGE) over an existing artifact,
  // so outDir is the old or the new artifact at every instant. Check the
  // target again first: compiling took a while.
  if (auto err = checkTarget())
    return err;
  llvm::Expected<std::string> old =
      moveDirectoryIntoPlace(tmp, outDir, scratch->child("old"));
  if (!old)
    return llvm::createStringError("cannot move the artifact into " + outDir +
                                   via + ": " +
                                   llvm::toString(old.takeError()));
  // The old artifact (if any) and the build files go with the scratch
  // directory.
  if (auto err = scratch->remove())
    note(llvm::toString(std::move(err)));
  return llvm::Error::success();
}

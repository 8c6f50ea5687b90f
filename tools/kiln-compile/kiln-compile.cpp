//===- kiln-compile.cpp - checkpoint to artifact --------------------------===//
//
//   kiln-compile MODEL -o ARTIFACT [--target=cpu|cuda] [--dtype=f32|f16|bf16]
//                [--emit=kiln|plan|cpp]
//
// Imports MODEL (llama2.c .bin, GGUF, Hugging Face directory or
// synthetic:<shape>) into kiln graph IR and runs the pipeline
//   kiln-verify, canonicalize, [kiln-quantize-weights], kiln-memory-plan,
//   kiln-lower-to-plan, canonicalize, kiln-plan-to-emitc
// (codegen/Pipeline: compileModel) then writes the artifact. --emit stops
// early and prints that stage to stdout, or with -o FILE writes it to FILE
// (through a temporary file renamed into place, as clang -S -o does).
//
//===----------------------------------------------------------------------===//

#include "codegen/Artifact/SafeOutput.h"
#include "codegen/Pipeline/Pipeline.h"
#include "dialects/Kiln/IR/KilnOps.h"
#include "dialects/Kiln/Import/ImportUtils.h"
#include "dialects/Kiln/Import/ModelDesc.h"
#include "dialects/Kiln/Import/Prequantized.h"
#include "dialects/Plan/IR/PlanOps.h"
#include "passes/Conversion/Passes.h"
#include "passes/Transforms/Passes.h"
#include "runtime/src/sign/Signing.h"
#include "tools/common/ToolSupport.h"

#include "kiln_rt/api.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <cfloat>
#include <cstdio>
#include <optional>
#include <variant>

using namespace mlir;
using namespace mlir::kiln;
namespace cl = llvm::cl;

static cl::OptionCategory category("kiln-compile options");
static cl::opt<std::string> modelPath(cl::Positional, cl::Required,
                                      cl::desc("MODEL"), cl::cat(category));
static cl::opt<std::string> outputDir("o", cl::desc("Artifact directory to write "
                                               "(with --emit: the text file; "
                                               "default stdout)"),
                                      cl::value_desc("ARTIFACT"), cl::cat(category));
static cl::opt<std::string> target(
    "target", cl::desc("Code generation target: cpu (C++ compiled by the host "
                       "compiler) or cuda (CUDA C++ compiled by nvcc for "
                       "sm_80 and sm_90a)"),
    cl::init("cpu"), cl::value_desc("cpu|cuda"), cl::cat(category));
static cl::opt<std::string> fuse(
    "fuse",
    cl::desc("Kernel fusion (kiln-fuse, docs/fusion.md): all, none, or a "
             "comma-separated list of horizontal, prologue, epilogue and "
             "elementwise (default all, on both targets)"),
    cl::value_desc("all|none|LIST"), cl::cat(category));
static cl::opt<std::string> dtype(
    "dtype", cl::desc("Element type of weights, activations and the KV cache; "
                      "logits are always f32 (f32 is the exactness mode)"),
    cl::init("f32"), cl::value_desc("f32|f16|bf16"), cl::cat(category));
enum class Emit { Artifact, Kiln, Plan, Cpp };
static cl::opt<Emit> emit(
    "emit", cl::desc("Print an intermediate stage instead of writing an "
                     "artifact (to stdout, or to the file named by -o)"),
    cl::values(clEnumValN(Emit::Kiln, "kiln",
                          "kiln graph IR after the graph passes "
                          "(quantization, kiln-fuse)"),
               clEnumValN(Emit::Plan, "plan", "plan IR (buffers and kernel calls)"),
               clEnumValN(Emit::Cpp, "cpp", "the emitted C++")),
    cl::init(Emit::Artifact), cl::cat(category));
static cl::opt<std::string> quant(
    "quant", cl::desc("Quantization recipe (docs/quantization.md): none, "
                      "w8a16 (int8 weights, per-channel scales), w4a16-rtn "
                      "(4-bit weights, group-wise scales and zero points), "
                      "w4a16-gptq (GPTQ), w4a16-awq (AWQ scaling + RTN), "
                      "smoothquant (SmoothQuant W8A8) or smooth-only "
                      "(SmoothQuant's smoothing without quantization); the "
                      "last four need --calibration"),
    cl::init("none"),
    cl::value_desc("none|w8a16|w4a16-rtn|w4a16-gptq|w4a16-awq|smoothquant|"
                   "smooth-only"),
    cl::cat(category));
static cl::opt<int64_t> groupSize(
    "group-size", cl::desc("Inputs per scale/zero-point group for 4-bit "
                           "recipes (positive and even; default 128)"),
    cl::init(128), cl::cat(category));
static cl::opt<std::string> calibrationPath(
    "calibration", cl::desc("Activation statistics from kiln-calibrate "
                            "(required by w4a16-gptq, w4a16-awq, smoothquant "
                            "and smooth-only; with --kv=int8|fp8 it also "
                            "enables key centering)"),
    cl::value_desc("FILE"), cl::cat(category));
static cl::opt<bool> actOrder(
    "act-order", cl::desc("GPTQ: quantize columns in descending Hessian "
                          "diagonal order (static groups)"),
    cl::init(false), cl::cat(category));
static cl::opt<double> smoothAlpha(
    "smoothquant-alpha", cl::desc("SmoothQuant migration strength in [0, 1] "
                                  "(default 0.5)"),
    cl::init(0.5), cl::cat(category));
static cl::opt<std::string> actScales(
    "act-scales", cl::desc("SmoothQuant activation scales: per-token "
                           "(dynamic, default) or static (one per-tensor "
                           "scale from calibration)"),
    cl::init("per-token"), cl::value_desc("per-token|static"),
    cl::cat(category));
static cl::opt<std::string> ggufLinears(
    "gguf-linears",
    cl::desc("Layout of GGUF Q4_0 / Q8_0 linear weights: auto (the default: "
             "blocks for --target=cpu with --dtype=f32, else repacked), "
             "blocks (the GGML "
             "blocks as stored, read by the block kernels) or repacked "
             "(Kiln's W4A16 / W8A16 layout: codes, float32 scales, zero "
             "points); other GGML formats are always kept as blocks"),
    cl::init("auto"), cl::value_desc("auto|blocks|repacked"), cl::cat(category));

static cl::opt<std::string> sparseAttention(
    "sparse-attention",
    cl::desc("Dynamic block-sparse prefill attention (kiln-sparse-attention, "
             "docs/sparse-attention.md): none (default), flex (the blocks' "
             "mean keys estimate the mass) or antidiag (every stride-th key "
             "on antidiagonals, XAttention), optionally with settings: "
             "flex:gamma=0.95,block=64,sink=1,local=2,"
             "min-budget=0,max-budget=0,min-tokens=1024,streaming=0 (each "
             "query block keeps the key blocks holding gamma of its "
             "estimated attention mass; shorter steps run dense; streaming=F "
             "makes the fraction F of KV heads with the lowest retrieval "
             "scores in --calibration (kiln-calibrate --heads) keep only "
             "sink and local blocks; antidiag takes stride=16 too and "
             "defaults to gamma=0.98, a fraction of the true mass; "
             "decode=quest makes decode select pages too, from key "
             "summaries kept with the KV cache; f32). Both targets"),
    cl::init("none"), cl::value_desc("none|flex|antidiag[:KEY=VALUE,...]"),
    cl::cat(category));

static cl::opt<std::string> sparseReport(
    "sparse-report",
    cl::desc("With --sparse-attention: after writing the artifact, prefill "
             "the first --sparse-report-tokens tokens of this UTF-8 text in "
             "it and print sparse attention's price per layer (density, "
             "captured attention mass mean and minimum, attention-output "
             "relative error against dense; docs/sparse-attention.md)"),
    cl::value_desc("TEXT"), cl::cat(category));
static cl::opt<int64_t> sparseReportTokens(
    "sparse-report-tokens",
    cl::desc("Tokens of --sparse-report's prefill, BOS included (default "
             "4096, capped at the context and the text)"),
    cl::init(4096), cl::value_desc("N"), cl::cat(category));

/// --sparse-attention parsed: the pass's options, or an error message.
static std::variant<std::string, SparseAttentionPassOptions>
parseSparseAttention(llvm::StringRef text) {
  SparseAttentionPassOptions o;
  auto [mode, settings] = text.split(':');
  if (mode == "none")
    return "--sparse-attention=" + text.str() +
           ": none takes no settings (drop ':" + settings.str() + "')";
  if (mode != "flex" && mode != "antidiag")
    return "--sparse-attention=" + text.str() +
           ": the mode must be none, flex or antidiag";
  o.mode = mode.str();
  // antidiag's gamma is a fraction of the estimated true mass (exact sink
  // and local blocks): 0.98 meets docs/sparse-attention.md's accuracy bar
  // on SmolLM2 where 0.95 does not; flex's pooled proxy keeps 0.95.
  if (mode == "antidiag") {
    o.stride = 16;
    o.gamma = 0.98;
  }
  llvm::SmallVector<llvm::StringRef> items;
  if (text.contains(':')) {
    if (settings.empty())
      return "--sparse-attention=" + text.str() +
             ": nothing after ':' (expected KEY=VALUE settings, or drop "
             "the ':')";
    settings.split(items, ',');
  }
  llvm::StringSet<> seen;
  for (llvm::StringRef item : items) {
    auto [key, value] = item.split('=');
    const std::string where = "--sparse-attention: '" + item.str() + "'";
    if (item.empty())
      return "--sparse-attention=" + text.str() +
             ": an empty setting (a stray ',')";
    if (!seen.insert(key).second)
      return where + ": " + key.str() + " is given twice";
    if (key == "gamma") {
      double g = 0;
      // The attribute stores f32: a gamma below its smallest normal value
      // is refused too.
      if (value.getAsDouble(g) || !(g >= double(FLT_MIN) && g <= 1.0))
        return where + ": gamma must be a number in (0, 1] (at least "
                       "1.2e-38, an f32)";
      o.gamma = g;
      continue;
    }
    int64_t v = 0;
    const bool isInt = !value.getAsInteger(10, v);
    if (key == "block") {
      if (!isInt || v < 1 || v > 4096)
        return where + ": block must be an integer in [1, 4096] positions";
      o.block = v;
    } else if (key == "sink") {
      if (!isInt || v < 0 || v > 1 << 20)
        return where + ": sink must be a block count in [0, 1048576]";
      o.sink = v;
    } else if (key == "local") {
      if (!isInt || v < 1 || v > 1 << 20)
        return where + ": local must be a block count in [1, 1048576] (1: "
                       "the diagonal block)";
      o.local = v;
    } else if (key == "stride") {
      if (mode != "antidiag")
        return where + ": stride applies to antidiag (flex pools whole "
                       "blocks)";
      if (!isInt || v < 1 || v > 4096)
        return where + ": stride must be an integer in [1, block]";
      o.stride = v;
    } else if (key == "decode") {
      if (value != "dense" && value != "quest")
        return where + ": decode must be dense or quest (page selection "
                       "from key summaries kept with the KV cache)";
      o.decode = value.str();
    } else if (key == "streaming") {
      double f = -1;
      if (value.getAsDouble(f) || !(f >= 0.0 && f < 1.0))
        return where + ": streaming must be a fraction of the KV heads in "
                       "[0, 1) (those with the lowest retrieval scores of "
                       "--calibration keep only sink and local blocks)";
      o.streaming = f;
    } else if (key == "min-budget" || key == "max-budget" ||
               key == "min-tokens") {
      if (!isInt || v < 0 || v > int64_t(1) << 40)
        return where + ": " + key.str() +
               " must be a token count in [0, 2^40]";
      (key == "min-budget"   ? o.minBudget
       : key == "max-budget" ? o.maxBudget
                             : o.minTokens) = v;
    } else {
      return where + ": unknown setting (expected gamma, block, sink, "
                     "local, min-budget, max-budget, min-tokens, "
                     "streaming, stride, decode)";
    }
  }
  if (o.stride > o.block)
    return "--sparse-attention: stride " + std::to_string(o.stride) +
           " exceeds the block of " + std::to_string(o.block) + " positions";
  if (o.maxBudget > 0 && o.maxBudget < o.minBudget)
    return "--sparse-attention: max-budget " + std::to_string(o.maxBudget) +
           " is below min-budget " + std::to_string(o.minBudget);
  return o;
}

/// The parsed --sparse-attention (main); std::nullopt: none.
static std::optional<SparseAttentionPassOptions> sparseOptions;

static cl::opt<std::string> actQuant(
    "act-quant",
    cl::desc("Activations of linears over GGML block-format weights (GGUF "
             "Q4_0 ... Q6_K, kept as stored): none (f32, the default) or "
             "int8 (quantized per 32 inputs as llama.cpp does for its "
             "quantized matmuls, integer dot products; an explicit recipe "
             "with a perplexity price, docs/quantization.md); cpu target "
             "only"),
    cl::init("none"), cl::value_desc("none|int8"), cl::cat(category));
static cl::opt<std::string> kvCache(
    "kv", cl::desc("KV-cache storage: the compute dtype (default), int8 or "
                   "fp8 (FP8 E4M3; both with per-token, per-KV-head scales, "
                   "dequantized inside attention)"),
    cl::init(""), cl::value_desc("int8|fp8"), cl::cat(category));
static cl::opt<bool> batchStep(
    "batch-step",
    cl::desc("Add the batched step entry point kiln_step that kiln-serve "
             "runs (continuous batching over a paged KV cache; "
             "kiln-batch-step, docs/serving.md). Default true (cpu and cuda "
             "targets); models with scaled RoPE get a note and no step"),
    cl::init(true), cl::cat(category));
static cl::opt<bool> speculative(
    "speculative",
    cl::desc("Add the verify entry point kiln_verify that speculative "
             "decoding needs (kiln-run --speculative; prefill with every "
             "row's logits; kiln-verify-entry, docs/speculative.md); cpu "
             "and cuda targets, not with --pp"),
    cl::init(false), cl::cat(category));
static cl::opt<std::string> selfDraft(
    "self-draft",
    cl::desc("With --speculative: also write a self-draft (kiln-run "
             "--speculative=self) to ARTIFACT/self-draft, compiled from the "
             "same checkpoint with a cheaper recipe: 4-bit weights "
             "(w4a16-rtn) where the linears are float and no --quant is "
             "given, otherwise the artifact's; LAYERS (e.g. 8-21 or "
             "3,5,7): decoder layers left out (kiln-skip-layers; "
             "docs/speculative.md)"),
    cl::ValueOptional, cl::value_desc("LAYERS"), cl::cat(category));
static cl::opt<bool> kvCentering(
    "kv-centering",
    cl::desc("With --kv=int8|fp8 and --calibration: store keys relative to "
             "their calibrated pre-RoPE mean, rotated to the key's position, "
             "and add it back inside attention (kiln-center-keys; default "
             "true)"),
    cl::init(true), cl::cat(category));
static cl::opt<std::string> tokenizerPath(
    "tokenizer", cl::desc("Tokenizer file for llama2.c checkpoints (default: "
                          "a tok*.bin beside the model)"),
    cl::cat(category));
static cl::opt<int64_t> maxSeqLen(
    "max-seq-len", cl::desc("Context length to plan the KV cache for "
                            "(default: the model's; more is an error)"),
    cl::init(0), cl::cat(category));
static cl::opt<int64_t> maxPrefillTokens(
    "max-prefill-tokens", cl::desc("Tokens per prefill call the activation "
                                   "plan is sized for (default: min(context, 512))"),
    cl::init(0), cl::cat(category));

static cl::opt<std::string> tensorParallel(
    "tp",
    cl::desc("Tensor parallelism: partition the model over N ranks "
             "(kiln-partition, Megatron-LM splits; docs/parallelism.md). The "
             "artifact holds one program and a weights.rank<R>.bin shard per "
             "rank; run it with `mpirun -np N kiln-run ARTIFACT ...`. "
             "Default 1"),
    cl::init("1"), cl::value_desc("N"), cl::cat(category));
static cl::opt<std::string> pipelineParallel(
    "pp",
    cl::desc("Pipeline parallelism: split the layers into M stages balanced "
             "by the weight bytes each reads per token (kiln-partition; "
             "docs/parallelism.md). Stage 0 is the artifact's program, "
             "stages 1..M-1 its stage<S>/ directories; with --tp N it runs "
             "as N x M ranks: `mpirun -np N*M kiln-run ARTIFACT ...`. "
             "Default 1 (cpu target)"),
    cl::init("1"), cl::value_desc("M"), cl::cat(category));

static cl::opt<std::string> sequenceParallel(
    "sp", cl::ValueOptional,
    cl::desc("Sequence parallelism with --tp N (kiln-sequence-parallel, "
             "Korthikanti et al. 2022; docs/parallelism.md): the residual "
             "stream, its adds and rms_norms on each rank's shard of the "
             "tokens, reduce-scatter + all-gather in place of each "
             "all-reduce. auto (or --sp alone): from the target's measured "
             "token threshold (shorter prefill chunks and decode keep plain "
             "TP); on: from --sp-min-tokens (default N); off: plain TP "
             "(default)"),
    cl::init("off"), cl::value_desc("auto|on|off"), cl::cat(category));
static cl::opt<int64_t> sequenceParallelMinTokens(
    "sp-min-tokens",
    cl::desc("With --sp=on: rows from which a prefill chunk or batched "
             "step splits the sequence (at least --tp)"),
    cl::init(0), cl::value_desc("T"), cl::cat(category));

static cl::opt<bool> sequenceParallelFuseNorm(
    "sp-fuse-norm",
    cl::desc("With --sp: fuse each reduce-scatter with the residual add and "
             "rms_norm after it (kiln.reduce_scatter_add_rms_norm; default "
             "on unless --fuse=none)"),
    cl::init(true), cl::cat(category));

static cl::opt<bool> sequenceParallelInt8Gather(
    "sp-int8-gather",
    cl::desc("With --sp: an all-gather of rows whose every reader quantizes "
             "them to int8 (--quant=smoothquant, GGUF block weights with "
             "--act-quant=int8) sends int8 codes and scales instead of f32 "
             "rows (kiln.all_gather_rows wire_quant: 1/4 of the bytes, the "
             "same codes for the readers). Default: on for --target=cuda, "
             "off for cpu, where ranks share memory and quantizing costs "
             "more than the bytes it saves (docs/parallelism.md)"),
    cl::init(true), cl::cat(category));

/// --sp=auto: the token count from which sequence parallelism pays, per
/// target (docs/parallelism.md, "Sequence parallelism"): CPU ranks as
/// measured there; CUDA from vLLM-Ascend's report (it hurts below about
/// 1,000 tokens), not yet measured by Kiln.
static int64_t autoSequenceParallelMinTokens(llvm::StringRef target) {
  return target == "cuda" ? 1024 : 256;
}

/// --tp, --pp, parsed (main).
static int64_t tensorParallelRanks = 1, pipelineStages = 1;

/// A rank count of --tp / --pp: decimal digits only (no sign, hex or octal),
/// in [1, 64]; 0 when `text` is not one.
static int64_t parseRanks(llvm::StringRef text) {
  if (text.empty() || text.size() > 2 || !llvm::all_of(text, llvm::isDigit))
    return 0;
  int64_t v = 0;
  text.getAsInteger(10, v);
  return v >= 1 && v <= 64 ? v : 0;
}

static cl::opt<std::string> signKeyPath(
    "sign-key",
    cl::desc("Sign the artifact with this Ed25519 secret key (written by "
             "kiln-keygen, mode 0600): writes manifest.sig, checked by "
             "kiln-run --trusted-keys (docs/security.md)"),
    cl::value_desc("KEY"), cl::cat(category));

/// `v` as printf's %g (0.5, not 0.500000).
static std::string shortDouble(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

static bool isFourBit(StringRef q) {
  return q == "w4a16-rtn" || q == "w4a16-gptq" || q == "w4a16-awq";
}
static bool needsCalibration(StringRef q) {
  return q == "w4a16-gptq" || q == "w4a16-awq" || q == "smoothquant" ||
         q == "smooth-only";
}

/// Validates the quantization flags together (docs/quantization.md).
static llvm::Error checkQuantFlags() {
  auto error = [](const llvm::Twine &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
  };
  if (!llvm::is_contained(ArrayRef<StringRef>{"none", "w8a16", "w4a16-rtn",
                                              "w4a16-gptq", "w4a16-awq",
                                              "smoothquant", "smooth-only"},
                          StringRef(quant)))
    return error("--quant=" + quant +
                 " is not a quantization recipe (expected none, w8a16, "
                 "w4a16-rtn, w4a16-gptq, w4a16-awq, smoothquant or "
                 "smooth-only)");
  if (groupSize <= 0 || groupSize % 2 != 0)
    return error("unsupported --group-size=" + std::to_string(groupSize) +
                 " (expected a positive even number, e.g. 32, 64 or 128)");
  if (groupSize.getNumOccurrences() && !isFourBit(quant))
    return error("--group-size applies to 4-bit recipes (--quant=w4a16-rtn, "
                 "w4a16-gptq, w4a16-awq), not --quant=" + quant);
  if (needsCalibration(quant) && calibrationPath.empty())
    return error("--quant=" + quant +
                 " needs calibration data: run `kiln-calibrate " + modelPath +
                 " -o calib.safetensors` and pass --calibration "
                 "calib.safetensors");
  bool kv8 = kvCache == "int8" || kvCache == "fp8";
  const bool headRoles = sparseOptions && sparseOptions->streaming > 0.0;
  if (!calibrationPath.empty() && !needsCalibration(quant) && !kv8 &&
      !headRoles)
    return error("--calibration applies to --quant=w4a16-gptq, w4a16-awq, "
                 "smoothquant and smooth-only, to --kv=int8|fp8 (key "
                 "centering) and to --sparse-attention with streaming=F "
                 "(head roles), not --quant=" + quant + " without --kv");
  if (kvCentering.getNumOccurrences() && !kv8)
    return error("--kv-centering applies to --kv=int8|fp8");
  if (kvCentering.getNumOccurrences() && kvCentering && calibrationPath.empty())
    return error("--kv-centering needs --calibration FILE (the keys' "
                 "calibrated means; run `kiln-calibrate " + modelPath +
                 " -o calib.safetensors`)");
  if (actOrder && quant != "w4a16-gptq")
    return error("--act-order applies to --quant=w4a16-gptq, not --quant=" +
                 quant);
  if (smoothAlpha.getNumOccurrences() && quant != "smoothquant" &&
      quant != "smooth-only")
    return error("--smoothquant-alpha applies to --quant=smoothquant and "
                 "smooth-only, not --quant=" + quant);
  if (!(smoothAlpha >= 0.0 && smoothAlpha <= 1.0))
    return error("--smoothquant-alpha=" + shortDouble(smoothAlpha) +
                 " is outside [0, 1]");
  if (actScales != "per-token" && actScales != "static")
    return error("unsupported --act-scales=" + actScales +
                 " (expected per-token or static)");
  if (actScales.getNumOccurrences() && quant != "smoothquant")
    return error("--act-scales applies to --quant=smoothquant, not --quant=" +
                 quant);
  return llvm::Error::success();
}

/// The graph passes of the quantization recipe, as a textual pipeline
/// (without the surrounding builtin.module) and the recipe's name with its
/// options for the manifest's recipe.quant.
static void addQuantPasses(OpPassManager &pm);

static bool centerKeys() {
  return (kvCache == "int8" || kvCache == "fp8") && !calibrationPath.empty() &&
         kvCentering;
}

static std::pair<std::string, std::string> quantPipeline() {
  std::string g = std::to_string(groupSize);
  std::string calib = calibrationPath;
  std::string alpha = shortDouble(smoothAlpha);
  if (quant == "w8a16")
    return {"kiln-quantize-weights{scheme=w8a16}", "w8a16"};
  if (quant == "w4a16-rtn")
    return {"kiln-quantize-weights{scheme=w4a16-rtn group-size=" + g + "}",
            "w4a16-rtn"};
  if (quant == "w4a16-gptq")
    return {"kiln-quantize-weights{scheme=w4a16-gptq group-size=" + g +
                " calibration=" + calib +
                " act-order=" + (actOrder ? "true" : "false") + " damp=0.01}",
            "w4a16-gptq group-size=" + g + (actOrder ? " act-order" : "")};
  if (quant == "w4a16-awq")
    return {"kiln-awq{calibration=" + calib + " group-size=" + g +
                " grid=20},kiln-quantize-weights{scheme=w4a16-rtn group-size=" +
                g + "}",
            "w4a16-awq group-size=" + g};
  std::string smooth = "kiln-smooth{calibration=" + calib + " alpha=" + alpha + "}";
  if (quant == "smooth-only")
    return {smooth, "smooth-only alpha=" + alpha};
  if (quant == "smoothquant") {
    bool isStatic = actScales == "static";
    return {smooth + ",kiln-quantize-weights{scheme=w8a8 act-quant=" +
                (isStatic ? "per-tensor calibration=" + calib : "per-token") +
                "}",
            "smoothquant alpha=" + alpha + " act-scales=" +
                std::string(actScales)};
  }
  return {"", "none"};
}

/// The graph passes of quantPipeline() plus key centering and the
/// int8-activation recipe, as text.
static std::string graphPipeline() {
  std::string passes = quantPipeline().first;
  auto append = [&](const std::string &pass) {
    passes += (passes.empty() ? "" : ",") + pass;
  };
  if (centerKeys())
    append("kiln-center-keys{calibration=" + calibrationPath + "}");
  if (actQuant == "int8")
    append("kiln-quantize-block-activations{scheme=int8-per-block}");
  if (sparseOptions) {
    const SparseAttentionPassOptions &o = *sparseOptions;
    char gamma[32];
    std::snprintf(gamma, sizeof(gamma), "%.9g", double(o.gamma));
    append(llvm::formatv("kiln-sparse-attention{{mode={0} gamma={1} "
                         "block={2} sink={3} local={4} min-budget={5} "
                         "max-budget={6} min-tokens={7}{9}{8}}",
                         o.mode, gamma, int64_t(o.block),
                         int64_t(o.sink), int64_t(o.local),
                         int64_t(o.minBudget), int64_t(o.maxBudget),
                         int64_t(o.minTokens),
                         o.streaming > 0.0
                             ? " streaming=" + shortDouble(o.streaming) +
                                   " calibration=" + o.calibration
                             : std::string(),
                         (o.stride > 0 ? " stride=" + std::to_string(o.stride)
                                       : std::string()) +
                             (o.decode == "quest" ? " decode=quest"
                                                  : std::string()))
               .str());
  }
  return passes;
}

/// Adds the passes graphPipeline() describes.
static void addGraphPasses(OpPassManager &pm) {
  addQuantPasses(pm);
  if (centerKeys()) {
    CenterKeysPassOptions o;
    o.calibration = calibrationPath;
    pm.addPass(createCenterKeysPass(o));
  }
  if (actQuant == "int8")
    pm.addPass(createQuantizeBlockActivationsPass());
  if (sparseOptions)
    pm.addPass(createSparseAttentionPass(*sparseOptions));
}

/// Adds the passes quantPipeline() describes.
static void addQuantPasses(OpPassManager &pm) {
  if (quant == "none")
    return;
  bool smooth = quant == "smoothquant" || quant == "smooth-only";
  if (smooth) {
    SmoothPassOptions o;
    o.calibration = calibrationPath;
    o.alpha = smoothAlpha;
    pm.addPass(createSmoothPass(o));
    if (quant == "smooth-only")
      return;
  }
  if (quant == "w4a16-awq") {
    AwqPassOptions o;
    o.calibration = calibrationPath;
    o.groupSize = groupSize;
    o.grid = 20;
    pm.addPass(createAwqPass(o));
  }
  QuantizeWeightsPassOptions o;
  o.scheme = quant == "w4a16-awq"     ? std::string("w4a16-rtn")
             : quant == "smoothquant" ? std::string("w8a8")
                                      : std::string(quant);
  o.groupSize = groupSize;
  if (quant == "w4a16-gptq") {
    o.calibration = calibrationPath;
    o.actOrder = actOrder;
    o.damp = 0.01;
  }
  if (quant == "smoothquant") {
    o.actQuant = actScales == "static" ? "per-tensor" : "per-token";
    if (actScales == "static")
      o.calibration = calibrationPath;
  }
  pm.addPass(createQuantizeWeightsPass(o));
}

static int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "kiln-compile") << message << "\n";
  return 1;
}

/// Other compilers' spellings of our flags.
static const ::kiln::tool::FlagAlias kCompileAliases[] = {
    {"ctx-size", "max-seq-len"}, {"context-length", "max-seq-len"},
    {"calib", "calibration"}, {"kv-cache", "kv"}};

/// --sparse-report: prefills the first `tokens` tokens of `text` (BOS
/// first) in the artifact at `dir` with the runtime's sparse attention
/// audit on (api.h kiln_rt_sparse_attention_audit) and prints, per layer,
/// the density (kept / causal block pairs), the captured attention mass
/// (mean and minimum over rows and query heads) and the attention output's
/// relative error against dense. A message on failure.
static llvm::Error printSparseReport(llvm::StringRef dir, llvm::StringRef text,
                                     int64_t tokens, int64_t layers,
                                     int64_t kvHeads) {
  auto error = [](const llvm::Twine &what, kiln_rt_status_t st) {
    std::string message =
        (what + ": " + kiln_rt_status_message(st)).str();
    kiln_rt_status_free(st);
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  kiln_rt_artifact_t *artifact = nullptr;
  kiln_rt_session_t *session = nullptr;
  llvm::scope_exit release([&] {
    kiln_rt_session_release(session);
    kiln_rt_artifact_release(artifact);
  });
  std::string path = dir.str();
  if (kiln_rt_status_t st = kiln_rt_artifact_open(
          path.c_str(), KILN_RT_OPEN_SKIP_CHECKSUMS, &artifact))
    return error("--sparse-report: opening " + dir, st);
  if (kiln_rt_status_t st = kiln_rt_session_create(artifact, &session))
    return error("--sparse-report: creating a session", st);
  kiln_rt_model_info_t info;
  kiln_rt_artifact_info(artifact, &info);
  std::vector<int32_t> ids(text.size() + 16);
  size_t count = 0;
  if (kiln_rt_status_t st =
          kiln_rt_tokenize(artifact, text.data(), text.size(), /*add_bos=*/1,
                           ids.data(), ids.size(), &count))
    return error("--sparse-report: tokenizing " + sparseReport, st);
  ids.resize(std::min<size_t>(
      count, size_t(std::min<int64_t>(tokens, info.max_seq_len))));
  if (ids.size() < 2)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "--sparse-report " + sparseReport + ": the text gives " +
            std::to_string(ids.size()) + " token(s); the report needs at "
            "least 2");
  int64_t before[4];
  kiln_rt_sparse_attention_stats(before, /*reset=*/1);
  kiln_rt_sparse_attention_audit(1);
  llvm::scope_exit auditOff([] { kiln_rt_sparse_attention_audit(0); });
  if (kiln_rt_status_t st = kiln_rt_session_prefill(session, ids.data(),
                                                    int64_t(ids.size())))
    return error("--sparse-report: prefilling", st);
  int64_t total[4];
  kiln_rt_sparse_attention_stats(total, /*reset=*/0);
  auto &os = llvm::errs();
  os << "kiln-compile: sparse attention price on " << ids.size()
     << " tokens of " << sparseReport << " (prefill steps of at most "
     << info.max_prefill_tokens << " tokens; " << total[3] << " of "
     << total[2]
     << " attention calls (layers x steps) ran dense and count as density "
        "1):\n";
  os << "  layer  density  captured mass (mean / min)  output rel. error\n";
  double capturedSum = 0, pairsSum = 0, minCaptured = 1, worstError = 0;
  for (int64_t l = 0; l < layers; ++l) {
    int64_t kept = 0, seen = 0;
    for (int64_t g = 0; g < kvHeads; ++g) {
      int64_t h[2];
      kiln_rt_sparse_attention_head_stats(l, g, h);
      kept += h[0];
      seen += h[1];
    }
    double audit[4];
    kiln_rt_sparse_attention_layer_audit(l, audit);
    if (audit[0] <= 0)
      continue;
    capturedSum += audit[1] * audit[0];
    pairsSum += audit[0];
    minCaptured = std::min(minCaptured, audit[2]);
    worstError = std::max(worstError, audit[3]);
    os << llvm::format("  %5lld  %7.4f  %8.4f / %-8.4f          %.3e\n",
                       (long long)l, seen ? double(kept) / double(seen) : 1.0,
                       audit[1], audit[2], audit[3]);
  }
  os << llvm::format("  all    %7.4f  %8.4f / %-8.4f          %.3e (worst "
                     "layer)\n",
                     total[1] ? double(total[0]) / double(total[1]) : 1.0,
                     pairsSum ? capturedSum / pairsSum : 1.0, minCaptured,
                     worstError);
  os << "kiln-compile: next-token KL, greedy agreement and perplexity: "
        "kiln-eval DENSE.art --compare "
     << dir << " --prefill-tokens N (docs/sparse-attention.md)\n";
  return llvm::Error::success();
}

int main(int argc, char **argv) {
  ::kiln::tool::ToolMain tool(argc, argv, "kiln-compile",
                            ::kiln::tool::ToolKind::Compiler);
  cl::HideUnrelatedOptions(category);
  ::kiln::tool::parseCommandLine(
      argc, argv,
      "Kiln ahead-of-time compiler: checkpoint -> artifact\n\n"
      "  kiln-compile MODEL -o ARTIFACT [--target=cpu|cuda] [--dtype=f32|f16|bf16]\n"
      "               [--quant=none|w8a16|w4a16-rtn|w4a16-gptq|w4a16-awq|\n"
      "                        smoothquant|smooth-only] [--group-size G]\n"
      "               [--calibration FILE] [--act-order] [--smoothquant-alpha A]\n"
      "               [--act-scales=per-token|static] [--kv=int8|fp8]\n"
      "               [--kv-centering=true|false] [--act-quant=none|int8]\n"
      "               [--gguf-linears=auto|blocks|repacked]\n"
      "               [--fuse=all|none|horizontal,prologue,epilogue,elementwise]\n"
      "               [--emit=kiln|plan|cpp] [--tokenizer FILE]\n"
      "               [--max-seq-len N] [--max-prefill-tokens N] [--sign-key KEY]\n"
      "               [--tp N]\n\n"
      "MODEL is a llama2.c checkpoint (.bin), a GGUF file, a Hugging Face\n"
      "directory (config.json + *.safetensors) or synthetic:<shape>\n"
      "(llama-2-7b, llama-2-13b, llama-110m, stories260k).\n",
      kCompileAliases);

  if (target != "cpu" && target != "cuda")
    return fail("unsupported --target='" + target + "' (expected cpu or cuda)");
  if (dtype != "f32" && dtype != "f16" && dtype != "bf16")
    return fail("unsupported --dtype='" + dtype + "' (expected f32, f16 or bf16)");
  // --fuse: the families of kiln-fuse, validated here so a typo fails
  // before the model is read.
  std::vector<std::string> fuseFamilies;
  if (fuse.getNumOccurrences() > 1)
    return fail("--fuse given more than once (list the families in one "
                "--fuse=A,B)");
  {
    std::string value = fuse.getNumOccurrences() ? std::string(fuse)
                                                 : std::string("all");
    llvm::SmallVector<llvm::StringRef> parts;
    llvm::StringRef(value).split(parts, ',');
    for (llvm::StringRef p : parts) {
      if (p != "all" && p != "none" && !llvm::is_contained(kFusionFamilies, p))
        return fail("unknown --fuse family '" + p +
                    "' (expected all, none, or a comma-separated list of "
                    "horizontal, prologue, epilogue and elementwise)");
      if (llvm::is_contained(fuseFamilies, p.str()))
        return fail("--fuse=" + value + ": '" + p + "' is listed twice");
      if ((p == "all" || p == "none") && parts.size() > 1)
        return fail("--fuse=" + value + ": '" + p +
                    "' cannot be combined with other families");
      fuseFamilies.push_back(p.str());
    }
    if (fuseFamilies == std::vector<std::string>{"none"})
      fuseFamilies.clear();
    // The manifest records one spelling per choice: the four families in
    // their pipeline order, or "all".
    if (fuseFamilies.size() == 4 ||
        llvm::is_contained(fuseFamilies, std::string("all")))
      fuseFamilies = {"all"};
    else
      llvm::sort(fuseFamilies, [](const std::string &a, const std::string &b) {
        return llvm::find(kFusionFamilies, a) < llvm::find(kFusionFamilies, b);
      });
    if (fuse.getNumOccurrences() && !fuseFamilies.empty() && dtype != "f32")
      llvm::errs() << "kiln-compile: note: --fuse=" << value
                   << " has no effect with --dtype=" << dtype
                   << ": fused kernels compute in f32, 16-bit graphs are "
                      "compiled unfused (docs/fusion.md)\n";
  }
  if (emit == Emit::Artifact && outputDir.empty())
    return fail("no output: pass -o ARTIFACT or --emit=kiln|plan|cpp");
  if (emit.getNumOccurrences() > 1)
    return fail("--emit given more than once");
  if (!kvCache.empty() && kvCache != "int8" && kvCache != "fp8")
    return fail("unsupported --kv='" + kvCache + "' (expected int8 or fp8)");
  for (cl::opt<std::string> *o : {&tensorParallel, &pipelineParallel})
    if (o->getNumOccurrences() > 1)
      return fail("--" + o->ArgStr + " given more than once");
  tensorParallelRanks = parseRanks(tensorParallel);
  if (!tensorParallelRanks)
    return fail("--tp=" + tensorParallel +
                " is not a rank count (a decimal number in [1, 64])");
  pipelineStages = parseRanks(pipelineParallel);
  if (!pipelineStages)
    return fail("--pp=" + pipelineParallel +
                " is not a stage count (a decimal number in [1, 64])");
  if (tensorParallelRanks * pipelineStages > 64)
    return fail("--tp " + std::to_string(tensorParallelRanks) + " x --pp " +
                std::to_string(pipelineStages) +
                " is more than 64 ranks");
  const bool parallel = tensorParallelRanks > 1 || pipelineStages > 1;
  if (speculative && pipelineStages > 1)
    return fail("--speculative with --pp " + std::to_string(pipelineStages) +
                ": the verify step of a pipeline is not built yet (its "
                "stages before the last have no logits)");
  if (speculative && sparseAttention != "none")
    return fail("--speculative with --sparse-attention: verify rows would "
                "select key blocks where decode does not, changing the "
                "output; not built yet");
  // --self-draft's layers to skip.
  std::vector<int64_t> draftSkip;
  if (selfDraft.getNumOccurrences()) {
    if (!speculative)
      return fail("--self-draft needs --speculative (the self-draft is "
                  "only run by speculative decoding)");
    if (parallel)
      return fail("--self-draft with --tp / --pp is not built yet (the "
                  "draft runs on one rank)");
    llvm::SmallVector<llvm::StringRef> items;
    llvm::StringRef(selfDraft).split(items, ',', -1, false);
    for (llvm::StringRef item : items) {
      auto [lo, hi] = item.trim().split('-');
      int64_t a = -1, b = -1;
      if (lo.getAsInteger(10, a) || a < 0 ||
          (hi.empty() ? (b = a, false) : hi.getAsInteger(10, b)) || b < a)
        return fail("--self-draft=" + selfDraft + ": '" + item.str() +
                    "' is not a layer index or range (e.g. 8-21 or 3,5,7)");
      for (int64_t l = a; l <= b; ++l)
        draftSkip.push_back(l);
    }
  }
  // --sp: the threshold kiln-sequence-parallel gets (-1: off).
  int64_t spMinTokens = -1;
  {
    const std::string mode =
        sequenceParallel.getNumOccurrences() && sequenceParallel.empty()
            ? std::string("auto")
            : sequenceParallel.getValue();
    if (mode != "auto" && mode != "on" && mode != "off")
      return fail("--sp=" + mode + " is not auto, on or off");
    if (sequenceParallelMinTokens.getNumOccurrences() && mode != "on")
      return fail("--sp-min-tokens needs --sp=on");
    if (sequenceParallelFuseNorm.getNumOccurrences() && mode == "off")
      return fail("--sp-fuse-norm needs --sp");
    if (sequenceParallelInt8Gather.getNumOccurrences() &&
        sequenceParallelInt8Gather && mode == "off")
      return fail("--sp-int8-gather needs --sp");
    if (mode != "off" && tensorParallelRanks < 2)
      return fail("--sp=" + mode +
                  " needs tensor parallelism (--tp N with N >= 2): sequence "
                  "parallelism shards the tokens of a tensor-parallel group");
    if (mode == "auto")
      spMinTokens = autoSequenceParallelMinTokens(target);
    if (mode == "on") {
      spMinTokens = sequenceParallelMinTokens.getNumOccurrences()
                        ? sequenceParallelMinTokens.getValue()
                        : tensorParallelRanks;
      if (spMinTokens < tensorParallelRanks)
        return fail("--sp-min-tokens=" + std::to_string(spMinTokens) +
                    " is below --tp " + std::to_string(tensorParallelRanks) +
                    ": every rank needs a row of the sequence");
    }
  }
  // --sparse-attention first: its head roles read --calibration.
  if (sparseAttention != "none") {
    auto parsed = parseSparseAttention(sparseAttention);
    if (auto *error = std::get_if<std::string>(&parsed))
      return fail(*error);
    sparseOptions = std::get<SparseAttentionPassOptions>(parsed);
    if (sparseOptions->streaming > 0.0) {
      if (calibrationPath.empty())
        return fail("--sparse-attention: streaming=" +
                    shortDouble(sparseOptions->streaming) +
                    " needs --calibration FILE with head scores (run "
                    "`kiln-calibrate " +
                    modelPath + " --heads -o calib.safetensors`)");
      sparseOptions->calibration = calibrationPath;
    }
  }
  std::unique_ptr<llvm::MemoryBuffer> sparseReportText;
  if (sparseReport.getNumOccurrences()) {
    if (!sparseOptions)
      return fail("--sparse-report measures --sparse-attention; pass both");
    if (sparseReport.empty())
      return fail("--sparse-report needs a text file");
    auto text = mlir::kiln::detail::readRegularFile(
        sparseReport, mlir::kiln::detail::kMaxTextBytes, "a text file");
    if (!text)
      return fail("--sparse-report " + llvm::toString(text.takeError()));
    sparseReportText = std::move(*text);
    if (sparseReportText->getBuffer().trim().empty())
      return fail("--sparse-report " + sparseReport + ": the text is empty");
    if (!llvm::json::isUTF8(sparseReportText->getBuffer()))
      return fail("--sparse-report " + sparseReport +
                  ": not UTF-8 text (the report tokenizes a text file)");
  } else if (sparseReportTokens.getNumOccurrences()) {
    return fail("--sparse-report-tokens applies to --sparse-report");
  }
  if (sparseReportTokens < 2 || sparseReportTokens > (int64_t(1) << 24))
    return fail("--sparse-report-tokens=" +
                std::to_string(sparseReportTokens) +
                " is out of range (expected 2 to 16777216 tokens)");
  if (llvm::Error err = checkQuantFlags())
    return fail(llvm::toString(std::move(err)));
  if (kvCache.getNumOccurrences() && kvCache.empty())
    return fail("--kv= needs a value (int8 or fp8)");
  if (actQuant != "none" && actQuant != "int8")
    return fail("unsupported --act-quant='" + actQuant +
                "' (expected none or int8)");
  if (actQuant == "int8" && target == "cuda")
    return fail("--act-quant=int8 has kernels for --target=cpu only so far");
  if (sparseOptions) {
    if (sparseOptions->decode == "quest" && dtype != "f32")
      return fail("--sparse-attention: decode=quest has f32 kernels only so "
                  "far; compile with --dtype=f32");
    if (kvCache == "int8" || kvCache == "fp8")
      return fail("--sparse-attention reads a cache of the activation dtype; "
                  "--kv=" +
                  kvCache + " has no sparse kernel yet");
    llvm::WithColor::note(llvm::errs(), "kiln-compile")
        << "--sparse-attention makes prefill sparse in sessions (kiln-run "
           "--no-engine / --chat, kiln-eval) and in the serving engine's "
           "prefill chunks (kiln-serve, kiln-run's default); "
        << (sparseOptions->decode == "quest"
                ? "decode selects pages in sessions, while the engine's "
                  "decode rows stay dense"
                : "decode stays dense")
        << " (docs/sparse-attention.md)\n";
  }
  if (ggufLinears != "auto" && ggufLinears != "blocks" &&
      ggufLinears != "repacked")
    return fail("unsupported --gguf-linears='" + ggufLinears +
                "' (expected auto, blocks or repacked)");
  if (actQuant == "int8" && ggufLinears == "repacked")
    return fail("--act-quant=int8 reads GGUF linears as stored blocks: drop "
                "--gguf-linears=repacked");
  if (!kvCache.empty() && calibrationPath.empty() &&
      !kvCentering.getNumOccurrences())
    llvm::errs() << "kiln-compile: note: --kv=" << kvCache
                 << " without --calibration stores keys uncentered; keys "
                    "with per-channel offsets then lose accuracy (on "
                    "stories260K "
                 << (kvCache == "fp8" ? "+2.9%" : "+0.4%")
                 << " perplexity, about 0% centered): run kiln-calibrate and "
                    "pass --calibration (docs/quantization.md)\n";
  if ((maxSeqLen.getNumOccurrences() && maxSeqLen <= 0) ||
      (maxPrefillTokens.getNumOccurrences() && maxPrefillTokens <= 0) ||
      maxSeqLen < 0 || maxPrefillTokens < 0)
    return fail("--max-seq-len and --max-prefill-tokens must be positive");

  // The signing key is read before compiling, so a bad key fails at once.
  ::kiln::sign::SecretKey signKey;
  if (signKeyPath.getNumOccurrences() && signKeyPath.empty())
    return fail("--sign-key needs a secret key file (from kiln-keygen); an "
                "empty value would write an unsigned artifact");
  if (!signKeyPath.empty()) {
    if (emit != Emit::Artifact)
      return fail("--sign-key signs an artifact; --emit writes none");
    std::string error;
    if (!::kiln::sign::readSecretKeyFile(signKeyPath, signKey, error))
      return fail("--sign-key: " + error);
  }

  auto desc = importModel(modelPath, tokenizerPath);
  if (!desc)
    return fail(llvm::toString(desc.takeError()));
  for (const std::string &note : desc->notes)
    llvm::errs() << "kiln-compile: note: " << note << "\n";
  if (maxSeqLen > desc->config.maxSeqLen)
    return fail("--max-seq-len=" + std::to_string(maxSeqLen) +
                " exceeds the model's context of " +
                std::to_string(desc->config.maxSeqLen) + " tokens");
  int64_t contextLen = maxSeqLen > 0 ? maxSeqLen : desc->config.maxSeqLen;
  if (sparseOptions && sparseOptions->minTokens > contextLen)
    llvm::WithColor::note(llvm::errs(), "kiln-compile")
        << "--sparse-attention: min-tokens=" << sparseOptions->minTokens
        << " exceeds the context of " << contextLen
        << " tokens: every step will run dense (lower min-tokens)\n";
  if (maxPrefillTokens > contextLen)
    return fail("--max-prefill-tokens=" + std::to_string(maxPrefillTokens) +
                " exceeds the context of " + std::to_string(contextLen) +
                " tokens");
  // --sp=on from more rows than a prefill chunk or step can hold would
  // never split (the plan's rows: LlamaBuilder's min(context, 512) default).
  const int64_t planRows = maxPrefillTokens > 0
                               ? int64_t(maxPrefillTokens)
                               : std::min<int64_t>(contextLen, 512);
  if (sequenceParallelMinTokens.getNumOccurrences() &&
      spMinTokens > planRows)
    return fail("--sp-min-tokens=" + std::to_string(spMinTokens) +
                " exceeds the " + std::to_string(planRows) +
                " rows a prefill chunk or batched step holds "
                "(--max-prefill-tokens): sequence parallelism would never "
                "split; lower it or raise --max-prefill-tokens");
  if (quant != "none")
    for (const WeightDesc &w : desc->weights)
      if (w.quantized)
        return fail(modelPath + " is a pre-quantized checkpoint (" +
                    std::to_string(w.quantized->bits) +
                    "-bit weights, e.g. " + w.source.tensor +
                    "); its linear weights are kept quantized as stored, so "
                    "--quant=" + quant +
                    " would quantize them twice: drop --quant");
  if (quant != "none")
    for (const WeightDesc &w : desc->weights)
      if (const WeightTransform *r = repackStep(w);
          r && r->part == WeightTransform::QuantPart::Blocks &&
          w.name != "tok_embeddings" && w.name != "output")
        return fail(modelPath + " stores its linear weights in GGML block "
                    "formats (e.g. " + w.source.tensor + " as " + r->format +
                    "), kept as stored, so --quant=" + quant +
                    " would quantize them twice: drop --quant");
  // GGUF Q4_0 / Q8_0 linears are imported repacked into W4A16 / W8A16 (the
  // layout of the CUDA W4A16 / W8A16 kernels). On the CPU the block kernels
  // read them as stored, in fewer bytes (18 per 32 Q4_0 weights against 21)
  // and faster (one core: 13 against 10 billion Q4_0 weights per second,
  // docs/benchmarks.md); the int8-activation kernels read nothing else.
  // With --dtype f16 / bf16 block-format linears are decoded to the compute
  // type when the artifact is written, while the repack keeps 8 / 4 bits:
  // auto means blocks only for f32 on the CPU.
  const bool repackable = hasRepackedGgufLinears(*desc);
  if (ggufLinears.getNumOccurrences() && !repackable)
    llvm::errs() << "kiln-compile: note: --gguf-linears=" << ggufLinears
                 << " has no effect: " << modelPath
                 << " has no GGUF Q4_0 / Q8_0 linear weights\n";
  else if (ggufLinears == "blocks" && dtype != "f32")
    llvm::errs() << "kiln-compile: note: --gguf-linears=blocks with --dtype="
                 << dtype << " decodes the Q4_0 / Q8_0 linears to " << dtype
                 << " (block kernels compute in f32); --gguf-linears="
                    "repacked keeps them 4 / 8-bit\n";
  if (actQuant == "int8" || ggufLinears == "blocks" ||
      (ggufLinears == "auto" && target == "cpu" && dtype == "f32"))
    keepGgufLinearsAsBlocks(*desc);
  if (actQuant == "int8") {
    bool anyBlockLinear = llvm::any_of(desc->weights, [](const WeightDesc &w) {
      const WeightTransform *r = repackStep(w);
      return r && r->part == WeightTransform::QuantPart::Blocks &&
             w.name != "tok_embeddings";
    });
    if (!anyBlockLinear)
      return fail("--act-quant=int8 applies to linears whose weights are "
                  "kept in a GGML block format (GGUF Q4_0, Q8_0, Q4_K, ...); " +
                  modelPath + " has none");
  }
  if (quant != "none" && !kKeepGgufQ8_0Quantized)
    for (const WeightDesc &w : desc->weights)
      if (w.source.storage == StorageType::Q8_0) {
        llvm::errs() << "kiln-compile: note: " << modelPath
                     << " stores weights as q8_0; --quant=" << quant
                     << " dequantizes and quantizes them again (two lossy "
                        "steps)\n";
        break;
      }

  MLIRContext context;
  context.loadDialect<KilnDialect, plan::PlanDialect, func::FuncDialect,
                      arith::ArithDialect, emitc::EmitCDialect>();
  // Diagnostics go to stderr with the tool's prefix.
  ScopedDiagnosticHandler handler(&context, [](Diagnostic &diag) {
    printToolDiagnostic(diag, "kiln-compile", llvm::errs());
    return success();
  });

  CompileOptions options;
  options.target = target;
  options.dtype = dtype;
  options.kvCache = kvCache;
  options.maxSeqLen = maxSeqLen;
  options.maxPrefillTokens = maxPrefillTokens;
  auto quantName = quantPipeline().second;
  std::string quantPasses = graphPipeline();
  if (!quantPasses.empty())
    options.addGraphPasses = [&](OpPassManager &pm) { addGraphPasses(pm); };
  options.fuseFamilies = fuseFamilies;
  options.batchStep = batchStep;
  options.verifyEntry = speculative;
  std::string fusePass =
      fuseFamilies.empty()
          ? std::string()
          : "kiln-fuse{families=" + llvm::join(fuseFamilies, ",") + "},";
  options.tp = tensorParallelRanks;
  options.pp = pipelineStages;
  options.spMinTokens = spMinTokens;
  options.spFuseNorm = sequenceParallelFuseNorm;
  // Measured on CPU ranks (docs/parallelism.md): the gather of f32 rows
  // through shared memory is cheaper than quantizing them.
  const bool int8Gather = sequenceParallelInt8Gather.getNumOccurrences()
                              ? bool(sequenceParallelInt8Gather)
                              : target == "cuda";
  options.spInt8Gather = int8Gather;
  // An explicit --sp-int8-gather that finds no reader quantizing to int8
  // changes nothing: say so rather than leave the user guessing.
  bool anyInt8Gather = false;
  if (int8Gather && sequenceParallelInt8Gather.getNumOccurrences() &&
      spMinTokens >= 0)
    options.onGraph = [&](ModuleOp graph) {
      graph.walk([&](AllGatherRowsOp g) {
        if (g.getWireQuant())
          anyInt8Gather = true;
      });
      return success();
    };
  auto noteInt8Gather = [&] {
    if (options.onGraph && !anyInt8Gather)
      llvm::WithColor::note(llvm::errs(), "kiln-compile")
          << "--sp-int8-gather: no all-gather of rows is read only by "
             "linears that quantize to int8 (--quant=smoothquant, or GGUF "
             "blocks with --act-quant=int8, f32 activations): every gather "
             "stays f32\n";
  };
  const std::string spPass =
      spMinTokens >= 0 ? "kiln-sequence-parallel{min-tokens=" +
                             std::to_string(spMinTokens) +
                             (fuseFamilies.empty() || !sequenceParallelFuseNorm
                                  ? ""
                                  : " fuse-norm=true") +
                             (int8Gather ? " int8-gather=true" : "") +
                             "},"
                       : std::string();
  options.pipeline = "kiln-verify,canonicalize," +
                     (parallel ? "kiln-partition{tp=" +
                                     std::to_string(tensorParallelRanks) +
                                     " rank=R" +
                                     (pipelineStages > 1
                                          ? " pp=" +
                                                std::to_string(pipelineStages) +
                                                " stage=S"
                                          : std::string()) +
                                     "},"
                               : std::string()) +
                     (quantPasses.empty() ? "" : quantPasses + ",") +
                     (options.batchStep ? "kiln-batch-step{required=false},"
                                        : "") +
                     (options.verifyEntry ? "kiln-verify-entry," : "") +
                     spPass + fusePass +
                     (target == "cpu" ? "kiln-outline-kernels," : "") +
                     "kiln-memory-plan,kiln-lower-to-plan,canonicalize,"
                     "kiln-plan-to-emitc";
  options.quant = actQuant == "int8"
                      ? (quantName == "none" ? std::string()
                                             : quantName + " ") +
                            "act-quant=int8"
                      : quantName;
  if (sparseReportText && emit != Emit::Artifact)
    return fail("--sparse-report runs the compiled artifact; it cannot be "
                "combined with --emit");
  if (sparseReportText && target == "cuda")
    return fail("--sparse-report runs the CPU runtime's audit; compile a "
                "--target=cpu artifact with the same --sparse-attention to "
                "see the price (the CUDA kernels select the same blocks)");
  if (sparseReportText && (tensorParallel != "1" || pipelineParallel != "1"))
    return fail("--sparse-report runs the artifact in this process; compile "
                "it without --tp / --pp");
  switch (emit) {
  case Emit::Kiln:
    options.stop = CompileStage::Kiln;
    break;
  case Emit::Plan:
    options.stop = CompileStage::Plan;
    break;
  case Emit::Cpp:
    options.stop = CompileStage::Cpp;
    break;
  case Emit::Artifact:
    options.stop = CompileStage::Artifact;
    break;
  }
  if (emit != Emit::Artifact) {
    // --emit: the text goes to -o FILE (writeFileOutput: a regular FILE is
    // written to a temporary file beside it and renamed into place, so a
    // failure leaves it as it was; a character device such as /dev/null is
    // written in place; a FIFO or directory is refused) or, by default or
    // with -o -, to stdout.
    if (llvm::Error e = mlir::kiln::checkOutputIsNotAnInput(
            outputDir, {{"MODEL", modelPath},
                        {"--tokenizer", tokenizerPath},
                        {"the tokenizer beside MODEL", desc->tokenizer.file},
                        {"--calibration", calibrationPath}}))
      return fail(llvm::toString(std::move(e)));
    bool ran = false, compiled = false;
    llvm::Error err = mlir::kiln::writeFileOutput(
        outputDir.empty() ? std::string("-") : outputDir.getValue(),
        [&](llvm::raw_ostream &os) -> llvm::Error {
          ran = true;
          options.emitStream = &os;
          compiled = succeeded(compileModel(context, *desc, options));
          if (!compiled) // diagnosed already; keep FILE as it was
            return llvm::createStringError("compilation failed");
          return llvm::Error::success();
        });
    if (ran && !compiled) {
      llvm::consumeError(std::move(err));
      return 1;
    }
    if (err)
      return fail(llvm::toString(std::move(err)));
    noteInt8Gather();
    return 0;
  }
  if (outputDir == "-")
    return fail("-o - would write the artifact to a directory named '-'; "
                "artifacts are directories, use --emit=kiln|plan|cpp to print "
                "to stdout");
  options.outputDir = outputDir;
  options.signKey = signKeyPath.empty() ? nullptr : &signKey;
  if (failed(compileModel(context, *desc, options)))
    return 1;
  noteInt8Gather();
  llvm::errs() << "kiln-compile: wrote " << outputDir << "\n";
  if (selfDraft.getNumOccurrences()) {
    // The self-draft: the same checkpoint and options, fewer layers and
    // (float linears without --quant) 4-bit weights; no verify step.
    bool storedQuantized = false;
    for (const WeightDesc &w : desc->weights) {
      const WeightTransform *r = repackStep(w);
      if (w.quantized || (r && r->part == WeightTransform::QuantPart::Blocks &&
                          w.name != "tok_embeddings" && w.name != "output"))
        storedQuantized = true;
    }
    const bool draft4Bit = quant == "none" && !storedQuantized;
    CompileOptions draft = options;
    draft.verifyEntry = false;
    draft.batchStep = false;
    // Written beside the artifact, then moved into it (the writer refuses
    // to write inside another artifact).
    const std::string draftDir = outputDir + "/self-draft";
    const std::string staging = outputDir + ".self-draft.tmp";
    (void)llvm::sys::fs::remove_directories(staging);
    draft.outputDir = staging;
    draft.addGraphPasses = [&](OpPassManager &pm) {
      if (!draftSkip.empty()) {
        SkipLayersPassOptions o;
        o.layers.assign(draftSkip.begin(), draftSkip.end());
        pm.addPass(createSkipLayersPass(o));
      }
      if (draft4Bit) {
        QuantizeWeightsPassOptions o;
        o.scheme = "w4a16-rtn";
        o.groupSize = groupSize;
        pm.addPass(createQuantizeWeightsPass(o));
      } else if (!quantPasses.empty()) {
        addGraphPasses(pm);
      }
    };
    std::string skipText;
    for (int64_t l : draftSkip)
      skipText += (skipText.empty() ? "" : ",") + std::to_string(l);
    draft.pipeline =
        (draftSkip.empty() ? std::string()
                           : "kiln-skip-layers{layers=" + skipText + "},") +
        (draft4Bit ? "kiln-quantize-weights{scheme=w4a16-rtn group-size=" +
                         std::to_string(groupSize) + "}," : "") +
        options.pipeline;
    draft.quant = draft4Bit ? std::string("w4a16-rtn") : options.quant;
    if (failed(compileModel(context, *desc, draft))) {
      (void)llvm::sys::fs::remove_directories(staging);
      return 1;
    }
    if (std::error_code ec = llvm::sys::fs::rename(staging, draftDir)) {
      (void)llvm::sys::fs::remove_directories(staging);
      return fail("cannot move the self-draft to " + draftDir + ": " +
                  ec.message());
    }
    llvm::errs() << "kiln-compile: wrote the self-draft " << draftDir
                 << " (" << (draft4Bit ? "4-bit weights" : "the same weights")
                 << ", " << draftSkip.size() << " layers skipped)\n";
  }
  if (sparseReportText)
    if (llvm::Error e = printSparseReport(
            outputDir, sparseReportText->getBuffer(), sparseReportTokens,
            desc->config.nLayers, desc->config.nKvHeads))
      return fail(llvm::toString(std::move(e)));
  return 0;
}

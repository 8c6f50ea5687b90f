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
// early and prints that stage.
//
//===----------------------------------------------------------------------===//

#include "codegen/Pipeline/Pipeline.h"
#include "dialects/Kiln/IR/KilnOps.h"
#include "dialects/Kiln/Import/ModelDesc.h"
#include "dialects/Kiln/Import/Prequantized.h"
#include "dialects/Plan/IR/PlanOps.h"
#include "passes/Conversion/Passes.h"
#include "passes/Transforms/Passes.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::kiln;
namespace cl = llvm::cl;

static cl::OptionCategory category("kiln-compile options");
static cl::opt<std::string> modelPath(cl::Positional, cl::Required,
                                      cl::desc("MODEL"), cl::cat(category));
static cl::opt<std::string> outputDir("o", cl::desc("Artifact directory to write"),
                                      cl::value_desc("ARTIFACT"), cl::cat(category));
static cl::opt<std::string> target(
    "target", cl::desc("Code generation target: cpu (C++ compiled by the host "
                       "compiler) or cuda (CUDA C++ compiled by nvcc for "
                       "sm_80 and sm_90a)"),
    cl::init("cpu"), cl::value_desc("cpu|cuda"), cl::cat(category));
static cl::opt<std::string> dtype(
    "dtype", cl::desc("Element type of weights, activations and the KV cache; "
                      "logits are always f32 (f32 is the exactness mode)"),
    cl::init("f32"), cl::value_desc("f32|f16|bf16"), cl::cat(category));
enum class Emit { Artifact, Kiln, Plan, Cpp };
static cl::opt<Emit> emit(
    "emit", cl::desc("Print an intermediate stage to stdout instead of "
                     "writing an artifact"),
    cl::values(clEnumValN(Emit::Kiln, "kiln", "kiln graph IR after import"),
               clEnumValN(Emit::Plan, "plan", "plan IR (buffers and kernel calls)"),
               clEnumValN(Emit::Cpp, "cpp", "the emitted C++")),
    cl::init(Emit::Artifact), cl::cat(category));
static cl::opt<std::string> quant(
    "quant", cl::desc("Quantization recipe (docs/quantization.md): none, "
                      "w8a16 (int8 weights, per-channel scales) or w4a16-rtn "
                      "(4-bit weights, group-wise scales and zero points); "
                      "w4a16-gptq, w4a16-awq and smoothquant are not "
                      "implemented yet"),
    cl::init("none"), cl::value_desc("none|w8a16|w4a16-rtn"), cl::cat(category));
static cl::opt<int64_t> groupSize(
    "group-size", cl::desc("Inputs per scale/zero-point group for 4-bit "
                           "recipes (positive and even; default 128)"),
    cl::init(128), cl::cat(category));
static cl::opt<std::string> kvCache(
    "kv", cl::desc("KV-cache storage: the compute dtype (default), int8 or "
                   "fp8 (FP8 E4M3; both with per-token, per-KV-head scales, "
                   "dequantized inside attention)"),
    cl::init(""), cl::value_desc("int8|fp8"), cl::cat(category));
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

static constexpr const char *kPipeline =
    "kiln-verify,canonicalize,kiln-memory-plan,kiln-lower-to-plan,canonicalize,"
    "kiln-plan-to-emitc";

static int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "kiln-compile") << message << "\n";
  return 1;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "Kiln ahead-of-time compiler: checkpoint -> artifact\n\n"
      "  kiln-compile MODEL -o ARTIFACT [--target=cpu|cuda] [--dtype=f32|f16|bf16]\n"
      "               [--quant=none|w8a16|w4a16-rtn] [--group-size G] [--kv=int8|fp8]\n"
      "               [--emit=kiln|plan|cpp] [--tokenizer FILE]\n"
      "               [--max-seq-len N] [--max-prefill-tokens N]\n\n"
      "MODEL is a llama2.c checkpoint (.bin), a GGUF file, a Hugging Face\n"
      "directory (config.json + *.safetensors) or synthetic:<shape>\n"
      "(llama-2-7b, llama-2-13b, llama-110m, stories260k).\n");

  if (target != "cpu" && target != "cuda")
    return fail("unsupported --target='" + target + "' (expected cpu or cuda)");
  if (dtype != "f32" && dtype != "f16" && dtype != "bf16")
    return fail("unsupported --dtype='" + dtype + "' (expected f32, f16 or bf16)");
  if (emit == Emit::Artifact && outputDir.empty())
    return fail("no output: pass -o ARTIFACT or --emit=kiln|plan|cpp");
  if (emit != Emit::Artifact && !outputDir.empty())
    return fail("--emit prints to stdout and writes no artifact: drop -o " +
                outputDir + " or --emit");
  if (emit.getNumOccurrences() > 1)
    return fail("--emit given more than once");
  if (quant != "none" && quant != "w8a16" && quant != "w4a16-rtn") {
    bool known = quant == "w4a16-gptq" || quant == "w4a16-awq" ||
                 quant == "smoothquant";
    return fail("--quant=" + quant +
                (known ? " is not implemented yet (implemented: none, w8a16, "
                         "w4a16-rtn)"
                       : " is not a quantization recipe (expected none, w8a16, "
                         "w4a16-rtn, w4a16-gptq, w4a16-awq or smoothquant)"));
  }
  if (!kvCache.empty() && kvCache != "int8" && kvCache != "fp8")
    return fail("unsupported --kv='" + kvCache + "' (expected int8 or fp8)");
  if (groupSize <= 0 || groupSize % 2 != 0)
    return fail("unsupported --group-size=" + std::to_string(groupSize) +
                " (expected a positive even number, e.g. 32, 64 or 128)");
  if (groupSize.getNumOccurrences() && quant != "w4a16-rtn")
    return fail("--group-size applies to 4-bit recipes (--quant=w4a16-rtn), "
                "not --quant=" + quant);
  if ((maxSeqLen.getNumOccurrences() && maxSeqLen <= 0) ||
      (maxPrefillTokens.getNumOccurrences() && maxPrefillTokens <= 0) ||
      maxSeqLen < 0 || maxPrefillTokens < 0)
    return fail("--max-seq-len and --max-prefill-tokens must be positive");

  auto desc = importModel(modelPath, tokenizerPath);
  if (!desc)
    return fail(llvm::toString(desc.takeError()));
  if (maxSeqLen > desc->config.maxSeqLen)
    return fail("--max-seq-len=" + std::to_string(maxSeqLen) +
                " exceeds the model's context of " +
                std::to_string(desc->config.maxSeqLen) + " tokens");
  int64_t contextLen = maxSeqLen > 0 ? maxSeqLen : desc->config.maxSeqLen;
  if (maxPrefillTokens > contextLen)
    return fail("--max-prefill-tokens=" + std::to_string(maxPrefillTokens) +
                " exceeds the context of " + std::to_string(contextLen) +
                " tokens");
  if (quant != "none")
    for (const WeightDesc &w : desc->weights)
      if (w.quantized)
        return fail(modelPath + " is a pre-quantized checkpoint (" +
                    std::to_string(w.quantized->bits) +
                    "-bit weights, e.g. " + w.source.tensor +
                    "); its linear weights are kept quantized as stored, so "
                    "--quant=" + quant +
                    " would quantize them twice: drop --quant");
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
    llvm::raw_ostream &os = llvm::errs();
    if (diag.getSeverity() == DiagnosticSeverity::Error)
      llvm::WithColor::error(os, "kiln-compile");
    else
      os << "kiln-compile: ";
    os << diag << "\n";
    return success();
  });

  CompileOptions options;
  options.target = target;
  options.dtype = dtype;
  options.kvCache = kvCache;
  options.maxSeqLen = maxSeqLen;
  options.maxPrefillTokens = maxPrefillTokens;
  if (quant != "none")
    options.addGraphPasses = [&](OpPassManager &pm) {
      QuantizeWeightsPassOptions quantOptions;
      quantOptions.scheme = quant;
      quantOptions.groupSize = groupSize;
      pm.addPass(createQuantizeWeightsPass(quantOptions));
    };
  options.pipeline = quant == "none"
                       ? std::string(kPipeline)
                       : "kiln-verify,canonicalize,kiln-quantize-weights{scheme=" +
                             quant +
                             (quant == "w4a16-rtn"
                                  ? " group-size=" + std::to_string(groupSize)
                                  : std::string()) +
                             "},kiln-memory-plan,kiln-lower-to-plan,"
                             "canonicalize,kiln-plan-to-emitc";
  options.quant = quant;
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
  options.outputDir = outputDir;
  options.emitStream = &llvm::outs();
  if (failed(compileModel(context, *desc, options)))
    return 1;
  if (emit != Emit::Artifact)
    return 0;
  llvm::errs() << "kiln-compile: wrote " << outputDir << "\n";
  return 0;
}

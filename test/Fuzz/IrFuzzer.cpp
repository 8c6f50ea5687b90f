//===- IrFuzzer.cpp - libFuzzer target: kiln IR parser and verifier -------===//
//
// Input: MLIR text. Parsed (and so verified) with the dialects kiln-opt
// registers (kiln, plan, func, arith, emitc); what parses is verified again
// and printed. With KILN_FUZZ_STRICT=1 the printed text must parse again.
// Text nested deeper than kiln-opt accepts (ParseLimits.h) is skipped, as
// kiln-opt refuses it. Diagnostics are swallowed. The context is recreated every few thousand
// inputs, since uniqued types and attributes accumulate in it.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kiln/IR/KilnOps.h"
#include "dialects/Kiln/IR/ParseLimits.h"
#include "dialects/Plan/IR/PlanOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <cstring>
#include <memory>

using namespace mlir;

/// Inputs parsed in one context before it is recreated.
static constexpr int kInputsPerContext = 4096;

static std::unique_ptr<MLIRContext> makeContext() {
  DialectRegistry registry;
  registry.insert<kiln::KilnDialect, kiln::plan::PlanDialect, func::FuncDialect,
                  arith::ArithDialect, emitc::EmitCDialect>();
  auto ctx = std::make_unique<MLIRContext>(registry,
                                           MLIRContext::Threading::DISABLED);
  ctx->loadAllAvailableDialects();
  ctx->printOpOnDiagnostic(false);
  ctx->printStackTraceOnDiagnostic(false);
  // Swallow every diagnostic: the fuzzer looks for crashes, not messages.
  ctx->getDiagEngine().registerHandler([](Diagnostic &) { return success(); });
  return ctx;
}

static OwningOpRef<ModuleOp> parse(MLIRContext &ctx, llvm::StringRef text) {
  llvm::SourceMgr sm;
  sm.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(text, "fuzz.mlir"),
                        llvm::SMLoc());
  ParserConfig config(&ctx, /*verifyAfterParse=*/true);
  return parseSourceFile<ModuleOp>(sm, config);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static std::unique_ptr<MLIRContext> ctx;
  static int uses = 0;
  static const bool strict = [] {
    const char *s = std::getenv("KILN_FUZZ_STRICT");
    return s && std::strcmp(s, "1") == 0;
  }();
  if (!ctx || ++uses > kInputsPerContext) {
    ctx.reset();
    ctx = makeContext();
    uses = 0;
  }
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  // kiln-opt refuses such text before MLIR's recursive parser sees it.
  if (kiln::findExcessiveNesting(text))
    return 0;
  OwningOpRef<ModuleOp> module = parse(*ctx, text);
  if (!module)
    return 0;
  (void)verify(*module);
  std::string printed;
  llvm::raw_string_ostream os(printed);
  module->print(os);
  os.flush();
  if (strict && !parse(*ctx, printed)) {
    std::fprintf(stderr, "printed IR does not parse again:\n%s\n",
                 printed.c_str());
    std::abort();
  }
  return 0;
}

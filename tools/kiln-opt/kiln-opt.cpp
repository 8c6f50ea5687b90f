//===- kiln-opt.cpp - mlir-opt for the kiln dialects and passes -----------===//
//
// Registers exactly what Kiln uses: the kiln and plan dialects, the upstream
// dialects they produce (func, arith, emitc), every Kiln pass, and the
// upstream canonicalizer/CSE/symbol-DCE.
//
// The command line is MlirOptMain's (registered here as
// mlir::registerAndParseCLIOptions does, then parsed by Kiln's
// tools/common), with three differences:
//   * --help lists Kiln's passes and MLIR's options only: the options libLLVM
//     registers when it is loaded (code generation for every backend, ...)
//     are hidden (also from --help-hidden) but still accepted;
//   * --mlir-print-op-on-diagnostic defaults to false, so a failing pass
//     reports its message without the whole module;
//   * a mistyped option is one line with a suggestion.
//
//===----------------------------------------------------------------------===//

#include "codegen/CPU/Passes.h"
#include "dialects/Kiln/IR/KilnOps.h"
#include "dialects/Kiln/IR/ParseLimits.h"
#include "dialects/Plan/IR/PlanOps.h"
#include "passes/Conversion/Passes.h"
#include "passes/Transforms/Passes.h"
#include "tools/common/ToolSupport.h"

#include "mlir/Debug/Counter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

namespace cl = llvm::cl;

int main(int argc, char **argv) {
  kiln::tool::ToolMain tool(argc, argv, "kiln-opt",
                            kiln::tool::ToolKind::Compiler);
  // Everything registered so far came with the libraries (libLLVM's backend
  // options, ...); MLIR's tool options are registered below, on demand.
  llvm::StringSet<> fromLibraries;
  for (const auto &entry : cl::getRegisteredOptions())
    fromLibraries.insert(entry.first);

  mlir::DialectRegistry registry;
  registry.insert<mlir::kiln::KilnDialect, mlir::kiln::plan::PlanDialect,
                  mlir::func::FuncDialect, mlir::arith::ArithDialect,
                  mlir::emitc::EmitCDialect>();
  mlir::kiln::registerKilnTransformsPasses();
  mlir::kiln::registerKilnConversionPasses();
  mlir::kiln::registerKilnCodegenCPUPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();

  // What mlir::registerAndParseCLIOptions registers.
  static cl::opt<std::string> inputFilename(
      cl::Positional, cl::desc("<input file>"), cl::init("-"));
  static cl::opt<std::string> outputFilename(
      "o", cl::desc("Output filename"), cl::value_desc("filename"),
      cl::init("-"));
  mlir::MlirOptMainConfig::registerCLOptions(registry);
  mlir::registerAsmPrinterCLOptions();
  mlir::registerMLIRContextCLOptions();
  mlir::registerPassManagerCLOptions();
  mlir::registerDefaultTimingManagerCLOptions();
  mlir::tracing::DebugCounter::registerCLOptions();

  auto &options = cl::getRegisteredOptions();
  for (auto &entry : options) {
    llvm::StringRef name = entry.first;
    if (fromLibraries.contains(name) && !name.starts_with("mlir-") &&
        !name.starts_with("help") && name != "version")
      entry.second->setHiddenFlag(cl::ReallyHidden);
  }
  // Registered by registerMLIRContextCLOptions() as cl::opt<bool>
  // (MLIRContextOptions), default true upstream.
  if (cl::Option *o = options.lookup("mlir-print-op-on-diagnostic")) {
    static_cast<cl::opt<bool> *>(o)->setInitialValue(false);
    o->setDescription("When a diagnostic is emitted on an operation, also "
                      "print the operation as an attached note (default "
                      "false in kiln-opt)");
  }

  std::string header = "Kiln optimizer driver\nAvailable Dialects: ";
  llvm::interleave(
      registry.getDialectNames(), [&](llvm::StringRef d) { header += d; },
      [&] { header += ","; });
  kiln::tool::parseCommandLine(argc, argv, header);
  // MlirOptMain reports a missing input without the tool's name, and reads
  // a FIFO (blocking) or a device (without end) as if it were a file; check
  // here, without opening it. Standard input ("-") stays allowed.
  llvm::sys::fs::file_status status;
  if (inputFilename != "-") {
    auto refuse = [&](const llvm::Twine &why) {
      llvm::errs() << "kiln-opt: error: " << inputFilename << ": " << why
                   << "\n";
      return 1;
    };
    if (std::error_code ec = llvm::sys::fs::status(inputFilename, status)) {
      llvm::errs() << "kiln-opt: error: cannot open input file '"
                   << inputFilename << "': " << ec.message() << "\n";
      return 1;
    }
    switch (status.type()) {
    case llvm::sys::fs::file_type::regular_file:
      break;
    case llvm::sys::fs::file_type::directory_file:
      return refuse("is a directory, expected an MLIR file");
    case llvm::sys::fs::file_type::fifo_file:
      return refuse("is a FIFO (named pipe), expected an MLIR file (pipe "
                    "the text to standard input instead: kiln-opt - < ...)");
    case llvm::sys::fs::file_type::character_file:
    case llvm::sys::fs::file_type::block_file:
      return refuse("is a device, expected an MLIR file");
    default:
      return refuse("is not a regular file, expected an MLIR file");
    }
    // Kiln's IR never holds weights (they are symbols): even a 70B model's
    // graph is well under a megabyte.
    constexpr uint64_t kMaxInputBytes = uint64_t(1) << 30;
    if (status.getSize() > kMaxInputBytes)
      return refuse("is " + llvm::Twine(status.getSize()) +
                    " bytes, more than the limit of " +
                    llvm::Twine(kMaxInputBytes) + " bytes for an MLIR file");
    // MLIR's parser has no depth limit (dialects/Kiln/IR/ParseLimits.h):
    // refuse nesting deeper than kMaxIrNesting before MLIR parses it.
    auto buffer = llvm::MemoryBuffer::getFile(inputFilename);
    if (!buffer)
      return refuse("cannot read input file: " + buffer.getError().message());
    if (std::optional<size_t> at =
            mlir::kiln::findExcessiveNesting((*buffer)->getBuffer()))
      return refuse("nested deeper than " +
                    llvm::Twine(mlir::kiln::kMaxIrNesting) +
                    " brackets at offset " + llvm::Twine(*at) +
                    " (MLIR's parser would overflow the stack)");
  }
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, inputFilename, outputFilename, registry));
}

//===- kiln-opt.cpp - mlir-opt for the kiln dialects and passes -----------===//
//
// Registers exactly what Kiln uses: the kiln and plan dialects, the upstream
// dialects they produce (func, arith, emitc), every Kiln pass, and the
// upstream canonicalizer/CSE/symbol-DCE.
//
//===----------------------------------------------------------------------===//

#include "codegen/CPU/Passes.h"
#include "dialects/Kiln/IR/KilnOps.h"
#include "dialects/Plan/IR/PlanOps.h"
#include "passes/Conversion/Passes.h"
#include "passes/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
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
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "Kiln optimizer driver\n", registry));
}

//===- PlanToEmitC.cpp - plan IR to EmitC for the CPU target --------------===//
//
// The plan is already a flat list of kernel calls on static buffers, so the
// lowering maps it value by value: every buffer becomes a pointer computed
// from the execution context, every index an int64_t. Naming and order come
// from the plan's program order, so emission is deterministic.
//
//===----------------------------------------------------------------------===//

#include "codegen/CPU/Passes.h"
#include "dialects/Plan/IR/PlanOps.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_PLANTOEMITCPASS
#include "codegen/CPU/Passes.h.inc"

namespace {
struct PlanToEmitCPass final : impl::PlanToEmitCPassBase<PlanToEmitCPass> {
  using Base::Base;
  void runOnOperation() override;
};
} // namespace

/// Pointer helpers the emitted code uses; kept as macros so the printed C++
/// reads like the plan.
static constexpr const char *kPrologue = R"(// Emitted by kiln-compile (CPU target). Do not edit.
#define KILN_ARENA(ctx, off, T) ((T *)((ctx)->arena + (off)))
#define KILN_WEIGHT(ctx, off, T) ((T *)((ctx)->weights + (off)))
#define KILN_KV(ctx, off) ((ctx)->kv + (off))
#define KILN_TOKENS(ctx) ((int32_t *)(ctx)->tokens)
#define KILN_LOGITS(ctx) ((ctx)->logits)
#define KILN_ROW(p, row, width) ((p) + (row) * (width))
#if KILN_ABI_VERSION != 1
#error "emitted for kernel ABI version 1"
#endif)";

static FailureOr<StringRef> cTypeName(Operation *op, Type t) {
  if (t.isF32())
    return StringRef("float");
  if (t.isInteger(32))
    return StringRef("int32_t");
  return op->emitOpError() << "element type " << t
                           << " is not supported by the cpu target yet";
}

static LogicalResult lowerFunction(func::FuncOp func, OpBuilder &builder,
                                   SymbolTable &symbols) {
  MLIRContext *ctx = func.getContext();
  Location loc = func.getLoc();
  auto i64 = builder.getI64Type();
  auto ctxType = emitc::PointerType::get(
      emitc::OpaqueType::get(ctx, "kiln_exec_ctx"));
  auto fnType = builder.getFunctionType({ctxType, i64, i64}, {});
  builder.setInsertionPoint(func);
  auto fn = emitc::FuncOp::create(builder, loc,
                                  ("kiln_" + func.getSymName()).str(), fnType);
  fn.setSpecifiersAttr(builder.getStrArrayAttr({"extern \"C\""}));
  Block *entry = fn.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  Value ctxValue = entry->getArgument(0);

  IRMapping map;
  Block &body = func.getBody().front();
  map.map(body.getArgument(0), entry->getArgument(1));
  map.map(body.getArgument(1), entry->getArgument(2));

  auto ptrTo = [&](Type elem) { return emitc::PointerType::get(elem); };
  auto opaque = [&](StringRef s) { return emitc::OpaqueAttr::get(ctx, s); };
  auto i64Attr = [&](int64_t v) { return builder.getI64IntegerAttr(v); };
  auto callOpaque = [&](Location l, Type result, StringRef callee,
                        ValueRange operands, ArrayRef<Attribute> args) {
    return emitc::CallOpaqueOp::create(builder, l, TypeRange{result}, callee,
                                       operands, builder.getArrayAttr(args))
        .getResult(0);
  };

  for (Operation &op : body) {
    Location l = op.getLoc();
    LogicalResult status =
        llvm::TypeSwitch<Operation *, LogicalResult>(&op)
            .Case([&](arith::ConstantOp c) -> LogicalResult {
              Attribute value = c.getValue();
              if (isa<IndexType>(c.getType()))
                value = i64Attr(cast<IntegerAttr>(value).getInt());
              Type type = isa<IndexType>(c.getType()) ? Type(i64) : c.getType();
              map.map(c.getResult(), emitc::ConstantOp::create(
                                         builder, l, type, cast<TypedAttr>(value)));
              return success();
            })
            .Case([&](arith::MulIOp m) {
              map.map(m.getResult(),
                      emitc::MulOp::create(builder, l, i64, map.lookup(m.getLhs()),
                                           map.lookup(m.getRhs())));
              return success();
            })
            .Case([&](arith::SubIOp s) {
              map.map(s.getResult(),
                      emitc::SubOp::create(builder, l, i64, map.lookup(s.getLhs()),
                                           map.lookup(s.getRhs())));
              return success();
            })
            .Case([&](plan::ArenaViewOp v) -> LogicalResult {
              Type elem = v.getType().getElementType();
              FailureOr<StringRef> name = cTypeName(v, elem);
              if (failed(name))
                return failure();
              map.map(v.getResult(),
                      callOpaque(l, ptrTo(elem), "KILN_ARENA", {ctxValue},
                                 {builder.getIndexAttr(0), i64Attr(v.getOffset()),
                                  opaque(*name)}));
              return success();
            })
            .Case([&](plan::WeightRefOp w) -> LogicalResult {
              auto decl = symbols.lookup<plan::WeightOp>(w.getName());
              Type elem = w.getType().getElementType();
              FailureOr<StringRef> name = cTypeName(w, elem);
              if (failed(name))
                return failure();
              map.map(w.getResult(),
                      callOpaque(l, ptrTo(elem), "KILN_WEIGHT", {ctxValue},
                                 {builder.getIndexAttr(0),
                                  i64Attr(decl.getOffset()), opaque(*name)}));
              return success();
            })
            .Case([&](plan::KVCacheViewOp v) -> LogicalResult {
              MemRefType type = v.getType();
              if (!type.getElementType().isF32())
                return v.emitOpError() << "only f32 KV caches are supported "
                                          "by the cpu target yet";
              int64_t rowsTimesWidth = type.getNumElements();
              int64_t offset = (v.getLayer() * 2 + v.getPart()) * rowsTimesWidth;
              map.map(v.getResult(),
                      callOpaque(l, ptrTo(type.getElementType()), "KILN_KV",
                                 {ctxValue},
                                 {builder.getIndexAttr(0), i64Attr(offset)}));
              return success();
            })
            .Case([&](plan::TokensOp t) {
              map.map(t.getResult(), callOpaque(l, ptrTo(builder.getI32Type()),
                                                "KILN_TOKENS", {ctxValue},
                                                {builder.getIndexAttr(0)}));
              return success();
            })
            .Case([&](plan::LogitsOp t) {
              map.map(t.getResult(),
                      callOpaque(l, ptrTo(builder.getF32Type()), "KILN_LOGITS",
                                 {ctxValue}, {builder.getIndexAttr(0)}));
              return success();
            })
            .Case([&](plan::RowOp r) {
              auto type = cast<MemRefType>(r.getSource().getType());
              map.map(r.getResult(),
                      callOpaque(l, ptrTo(type.getElementType()), "KILN_ROW",
                                 {map.lookup(r.getSource()), map.lookup(r.getRow())},
                                 {builder.getIndexAttr(0), builder.getIndexAttr(1),
                                  i64Attr(type.getDimSize(1))}));
              return success();
            })
            .Case([&](plan::CallKernelOp c) {
              SmallVector<Value> operands;
              for (Value a : c.getArgs())
                operands.push_back(map.lookup(a));
              emitc::CallOpaqueOp::create(builder, l, TypeRange{}, c.getCallee(),
                                          operands);
              return success();
            })
            .Case([&](func::ReturnOp) {
              emitc::ReturnOp::create(builder, l, Value());
              return success();
            })
            .Default([&](Operation *other) {
              return other->emitOpError()
                     << "cannot be emitted for the cpu target";
            });
    if (failed(status))
      return failure();
  }
  return success();
}

void PlanToEmitCPass::runOnOperation() {
  ModuleOp module = getOperation();
  OpBuilder builder(&getContext());
  SymbolTable symbols(module);

  builder.setInsertionPointToStart(module.getBody());
  emitc::IncludeOp::create(builder, module.getLoc(), "stdint.h", true);
  emitc::IncludeOp::create(builder, module.getLoc(), "kiln_rt/kernel_abi.h",
                           false);
  emitc::VerbatimOp::create(builder, module.getLoc(), kPrologue);

  SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
  for (func::FuncOp func : funcs) {
    if (func.isExternal())
      continue;
    if (failed(lowerFunction(func, builder, symbols)))
      return signalPassFailure();
  }
  for (func::FuncOp func : funcs)
    func.erase();
  for (auto weight : llvm::make_early_inc_range(module.getOps<plan::WeightOp>()))
    weight.erase();
}

LogicalResult emitCpp(ModuleOp module, llvm::raw_ostream &os) {
  return emitc::translateToCpp(module, os);
}

llvm::Error compileSharedObject(StringRef cppPath, StringRef soPath,
                                StringRef includeDir) {
  std::string compiler = "c++";
  if (const char *env = std::getenv("KILN_HOST_CXX"))
    compiler = env;
  llvm::ErrorOr<std::string> exe = llvm::sys::findProgramByName(compiler);
  if (!exe)
    return llvm::createStringError("host C++ compiler '" + compiler +
                                   "' not found on PATH (set KILN_HOST_CXX)");
  SmallString<128> log;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("kiln-cxx", "log", log))
    return llvm::createStringError(ec, "cannot create a temporary file");
  std::string include = ("-I" + includeDir).str();
  SmallVector<StringRef> argv = {*exe, "-std=c++17", "-O2", "-fPIC", "-shared",
                                 include, cppPath, "-o", soPath};
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(log),
                                          StringRef(log)};
  std::string errMsg;
  int rc = llvm::sys::ExecuteAndWait(*exe, argv, std::nullopt, redirects, 0, 0,
                                     &errMsg);
  auto diagnostics = llvm::MemoryBuffer::getFile(log);
  std::string text = diagnostics ? (*diagnostics)->getBuffer().str() : "";
  llvm::sys::fs::remove(log);
  if (rc != 0)
    return llvm::createStringError(
        "compiling " + cppPath + " with " + *exe + " failed (exit " +
        std::to_string(rc) + ")" + (errMsg.empty() ? "" : ": " + errMsg) +
        (text.empty() ? "" : "\n" + text));
  return llvm::Error::success();
}

} // namespace mlir::kiln

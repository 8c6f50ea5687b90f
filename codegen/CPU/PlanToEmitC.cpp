//===- PlanToEmitC.cpp - plan IR to EmitC for the CPU target --------------===//
//
// The plan is already a flat list of kernel calls on static buffers, so the
// lowering maps it value by value: every buffer becomes a pointer computed
// from the execution context, every index an int64_t. Naming and order come
// from the plan's program order, so emission is deterministic.
//
//===----------------------------------------------------------------------===//

#include "codegen/CPU/Passes.h"
#include "codegen/CPU/TraceSites.h"
#include "codegen/CPU/FusedKernelEmitter.h"
#include "codegen/Artifact/SafeOutput.h"
#include "dialects/Plan/IR/PlanOps.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
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
/// reads like the plan. All offsets are in bytes.
static constexpr const char *kPointerMacros = R"(
#define KILN_ARENA(ctx, off, T) ((T *)((ctx)->arena + (off)))
#define KILN_WEIGHT(ctx, off, T) ((T *)((ctx)->weights + (off)))
#define KILN_KV(ctx, off, T) ((T *)((uint8_t *)(ctx)->kv + (off)))
#define KILN_TOKENS(ctx) ((int32_t *)(ctx)->tokens)
#define KILN_LOGITS(ctx) ((ctx)->logits)
#define KILN_BATCH_SIZE(ctx) ((int64_t)((ctx)->batch->logit_count ? (ctx)->batch->num_logit_rows : (ctx)->batch->num_seqs))
#define KILN_ROW(p, row, width) ((p) + (row) * (width)))";

static constexpr const char *kCpuPrologue =
    R"(// Emitted by kiln-compile (CPU target). Do not edit.
#if KILN_ABI_VERSION != 16
#error "emitted for kernel ABI version 15"
#endif
#define KILN_SEQUENCE_ROWS(ctx, n, min_tokens) \
  kiln_k_sequence_rows((ctx), (n), (min_tokens)))";

static constexpr const char *kCudaPrologue =
    R"(// Emitted by kiln-compile (CUDA target). Do not edit.
#if KILN_CUDA_ABI_VERSION != 8
#error "emitted for CUDA ABI version 7"
#endif
#define KILN_SEQUENCE_ROWS(ctx, n, min_tokens) \
  kiln_sequence_shard_rows((n), (ctx)->tp_size, (ctx)->tp_rank, (min_tokens)))";

/// Kernels the CPU target instantiates from the IR (kernel_abi.h,
/// "Generated kernels"; kiln-outline-kernels) instead of calling the
/// runtime: the linears other than W8A8 and the elementwise ops.
static bool isGeneratedOnCpu(StringRef callee) {
  return llvm::is_contained(
      {"kiln_k_linear", "kiln_k_linear_blocks", "kiln_k_linear_blocks_a8",
       "kiln_k_linear_w8a16", "kiln_k_linear_w4a16", "kiln_k_add",
       "kiln_k_mul", "kiln_k_silu", "kiln_k_swiglu", "kiln_k_add_bias"},
      callee);
}

/// Kernels of the batched step (kernel_abi.h, "Batched steps"): they read
/// the step's kiln_batch and paged pools from the context, which they take
/// first, and name their element type with an argument (no dtype suffix).
static bool isStepKernel(StringRef callee) {
  return callee.starts_with("kiln_k_step_");
}

/// The kernels that talk to the other ranks (kernel_abi.h): the context
/// first, the element type as an argument, and a name for messages last.
static bool isCommKernel(StringRef callee) {
  return llvm::is_contained({"kiln_k_all_reduce", "kiln_k_all_gather",
                             "kiln_k_send", "kiln_k_recv",
                             "kiln_k_reduce_scatter", "kiln_k_all_slice",
                             "kiln_k_all_gather_rows",
                             "kiln_k_all_gather_rows_q8",
                             "kiln_k_reduce_scatter_add_rms_norm"},
                            callee);
}

namespace {
/// What differs between the CPU and the CUDA flavour of the emitted code.
struct TargetInfo {
  bool cuda;
  StringRef ctxType() const { return cuda ? "kiln_cuda_ctx" : "kiln_exec_ctx"; }

  /// The function a `plan.call_kernel` becomes. CUDA: the overloaded launch
  /// wrapper kiln_cuda_X. CPU: kiln_k_X for f32, kiln_k_X_f16 / _bf16 for
  /// 16-bit buffers (named after the first floating-point buffer).
  std::string callee(plan::CallKernelOp call) const {
    StringRef kernel = call.getCallee();
    if (cuda)
      return ("kiln_cuda_" + kernel.drop_front(StringRef("kiln_k_").size())).str();
    // Kernels that take their element type as an argument.
    if (isStepKernel(kernel) || isCommKernel(kernel))
      return kernel.str();
    SmallVector<Type> floats;
    for (Value arg : call.getArgs())
      if (auto memref = dyn_cast<MemRefType>(arg.getType()))
        if (isa<FloatType>(memref.getElementType()))
          floats.push_back(memref.getElementType());
    if (floats.empty() || floats.front().isF32())
      return kernel.str();
    return (kernel + (floats.front().isF16() ? "_f16" : "_bf16")).str();
  }
};
} // namespace

static FailureOr<StringRef> cTypeName(Operation *op, Type t,
                                      const TargetInfo &target) {
  // FP8 E4M3FN KV caches are raw codes to both targets' kernels
  // (kernel_abi.h kiln_k_attention_kvf8, KilnKernels.cuh
  // kiln_cuda_attention_kvf8 take uint8_t).
  if (isa<Float8E4M3FNType>(t))
    return StringRef("uint8_t");
  if (t.isF32())
    return StringRef("float");
  if (t.isInteger(32))
    return StringRef("int32_t");
  if (t.isInteger(8))
    return StringRef("int8_t");
  if (t.isF16())
    return target.cuda ? StringRef("__half") : StringRef("kiln_f16_t");
  if (t.isBF16())
    return target.cuda ? StringRef("__nv_bfloat16") : StringRef("kiln_bf16_t");
  return op->emitOpError() << "element type " << t << " is not supported by the "
                           << (target.cuda ? "cuda" : "cpu") << " target yet";
}

/// The EmitC type of a buffer element: builtin for f32/i32, opaque otherwise.
static Type emitcElementType(MLIRContext *ctx, Type t, StringRef cName) {
  if (t.isF32() || t.isInteger(32) || t.isInteger(8))
    return t;
  return emitc::OpaqueType::get(ctx, cName);
}

static LogicalResult lowerFunction(func::FuncOp func, OpBuilder &builder,
                                   SymbolTable &symbols,
                                   const TargetInfo &target) {
  MLIRContext *ctx = func.getContext();
  Location loc = func.getLoc();
  auto i64 = builder.getI64Type();
  auto ctxType = emitc::PointerType::get(
      emitc::OpaqueType::get(ctx, target.ctxType()));
  auto fnType = builder.getFunctionType({ctxType, i64, i64}, {});
  builder.setInsertionPoint(func);
  // CPU: the static descriptions of the kernel calls, for the trace
  // (kernel_abi.h kiln_trace_site), in call order.
  std::string sitesName = ("kiln_trace_sites_" + func.getSymName()).str();
  int64_t nextSite = 0;
  if (!target.cuda) {
    SmallVector<TraceSite> sites;
    func.walk([&](Operation *op) {
      if (auto c = dyn_cast<plan::CallKernelOp>(op))
        sites.push_back(traceSiteOf(c, target.callee(c)));
      else if (auto f = dyn_cast<plan::CallFusedOp>(op))
        sites.push_back(traceSiteOfFused(
            f, symbols.lookup<plan::FusedKernelOp>(f.getKernel())));
    });
    emitc::VerbatimOp::create(builder, loc, traceSiteTable(sitesName, sites));
  }
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

  // CPU: uint64_t t = KILN_TRACE_BEGIN(ctx); callee(...);
  // KILN_TRACE_END(ctx, sites, i, t, n, pos); with i the next call site.
  auto callTraced = [&](Location l, StringRef callee, ValueRange operands) {
    Value start =
        callOpaque(l, emitc::OpaqueType::get(ctx, "uint64_t"),
                   "KILN_TRACE_BEGIN", {ctxValue}, {builder.getIndexAttr(0)});
    emitc::CallOpaqueOp::create(builder, l, TypeRange{}, callee, operands);
    emitc::CallOpaqueOp::create(
        builder, l, TypeRange{}, "KILN_TRACE_END",
        ValueRange{ctxValue, start, entry->getArgument(1),
                   entry->getArgument(2)},
        builder.getArrayAttr({builder.getIndexAttr(0), opaque(sitesName),
                              i64Attr(nextSite++), builder.getIndexAttr(1),
                              builder.getIndexAttr(2),
                              builder.getIndexAttr(3)}));
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
              FailureOr<StringRef> name = cTypeName(v, elem, target);
              if (failed(name))
                return failure();
              map.map(v.getResult(),
                      callOpaque(l, ptrTo(emitcElementType(ctx, elem, *name)),
                                 "KILN_ARENA", {ctxValue},
                                 {builder.getIndexAttr(0), i64Attr(v.getOffset()),
                                  opaque(*name)}));
              return success();
            })
            .Case([&](plan::WeightRefOp w) -> LogicalResult {
              auto decl = symbols.lookup<plan::WeightOp>(w.getName());
              Type elem = w.getType().getElementType();
              FailureOr<StringRef> name = cTypeName(w, elem, target);
              if (failed(name))
                return failure();
              map.map(w.getResult(),
                      callOpaque(l, ptrTo(emitcElementType(ctx, elem, *name)),
                                 "KILN_WEIGHT", {ctxValue},
                                 {builder.getIndexAttr(0),
                                  i64Attr(decl.getOffset()), opaque(*name)}));
              return success();
            })
            .Case([&](plan::KVCacheViewOp v) -> LogicalResult {
              Type elem = v.getType().getElementType();
              FailureOr<StringRef> name = cTypeName(v, elem, target);
              if (failed(name))
                return failure();
              map.map(v.getResult(),
                      callOpaque(l, ptrTo(emitcElementType(ctx, elem, *name)),
                                 "KILN_KV", {ctxValue},
                                 {builder.getIndexAttr(0), i64Attr(v.getOffset()),
                                  opaque(*name)}));
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
            .Case([&](plan::BatchSizeOp b) -> LogicalResult {
              map.map(b.getResult(),
                      callOpaque(l, i64, "KILN_BATCH_SIZE", {ctxValue},
                                 {builder.getIndexAttr(0)}));
              return success();
            })
            .Case([&](plan::SequenceRowsOp r) -> LogicalResult {
              Value minTokens = emitc::ConstantOp::create(
                  builder, l, i64, i64Attr(r.getMinTokens()));
              map.map(r.getResult(),
                      callOpaque(l, i64, "KILN_SEQUENCE_ROWS",
                                 {ctxValue, map.lookup(r.getRows()), minTokens},
                                 {builder.getIndexAttr(0), builder.getIndexAttr(1),
                                  builder.getIndexAttr(2)}));
              return success();
            })
            .Case([&](plan::RowOp r) {
              auto type = cast<MemRefType>(r.getSource().getType());
              Value source = map.lookup(r.getSource());
              map.map(r.getResult(),
                      callOpaque(l, source.getType(), "KILN_ROW",
                                 {map.lookup(r.getSource()), map.lookup(r.getRow())},
                                 {builder.getIndexAttr(0), builder.getIndexAttr(1),
                                  i64Attr(type.getDimSize(1))}));
              return success();
            })
            .Case([&](plan::CallKernelOp c) -> LogicalResult {
              SmallVector<Value> operands;
              bool observe = c.getCallee() == "kiln_k_observe";
              bool step = isStepKernel(c.getCallee());
              if (observe && target.cuda)
                return c.emitOpError()
                       << "calibration observers (kiln_k_observe) run on "
                          "the cpu target only; compile with target=cpu";
              if (!target.cuda && isGeneratedOnCpu(c.getCallee()))
                return c.emitOpError()
                       << "'" << c.getCallee()
                       << "' is a generated kernel on the cpu target, not a "
                          "runtime entry point; run kiln-outline-kernels "
                          "before kiln-memory-plan";
              if (target.cuda && c.getCallee() == "kiln_k_linear_blocks_a8")
                return c.emitOpError()
                       << "int8 activations (act_quant 'int8_per_block') "
                          "have kernels for the cpu target only so far; "
                          "compile without --act-quant";
              bool allReduce = isCommKernel(c.getCallee());
              // CUDA launch wrappers take the context first, and so do CPU
              // kernels that talk to the runtime (kernel_abi.h).
              if (target.cuda || observe || step || allReduce)
                operands.push_back(ctxValue);
              for (Value a : c.getArgs())
                operands.push_back(map.lookup(a));
              // The all-reduce names itself in messages by its call site's
              // IR location ("layers.3.wo"): the CPU trace site table's
              // `loc`, a string literal on CUDA.
              if (allReduce)
                operands.push_back(emitc::LiteralOp::create(
                    builder, l,
                    emitc::PointerType::get(
                        emitc::OpaqueType::get(ctx, "const char")),
                    target.cuda ? cStringLiteral(locationLabel(c.getLoc()))
                                : (sitesName + "[" + Twine(nextSite) + "].loc")
                                      .str()));
              if (target.cuda) {
                emitc::CallOpaqueOp::create(builder, l, TypeRange{},
                                            target.callee(c), operands);
                return success();
              }
              callTraced(l, target.callee(c), operands);
              return success();
            })
            .Case([&](plan::CallFusedOp c) -> LogicalResult {
              SmallVector<Value> operands;
              if (target.cuda)
                operands.push_back(ctxValue);
              for (Value a : c.getArgs())
                operands.push_back(map.lookup(a));
              if (target.cuda) {
                emitc::CallOpaqueOp::create(builder, l, TypeRange{},
                                            c.getKernel(), operands);
                return success();
              }
              callTraced(l, c.getKernel(), operands);
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

/// The model's shape for the CUDA code (from the module's kiln.model):
/// constants emitted before the fused kernels, which place their scratch
/// after the workspace regions of kiln_cuda_workspace_bytes_for. Empty
/// when the attribute lacks a size (reported by cudaShapeError).
static std::optional<std::string> cudaConstants(ModuleOp module) {
  auto model = module->getAttrOfType<DictionaryAttr>("kiln.model");
  auto get = [&](StringRef key) -> int64_t {
    auto a = model ? model.getAs<IntegerAttr>(key) : IntegerAttr();
    return a ? a.getInt() : -1;
  };
  int64_t heads = get("n_heads"), headDim = get("head_dim"),
          maxSeq = get("max_seq_len"), vocab = get("vocab_size"),
          dim = get("dim"), hidden = get("hidden_dim");
  if (heads <= 0 || headDim <= 0 || maxSeq <= 0 || vocab <= 0 || dim <= 0 ||
      hidden <= 0)
    return std::nullopt;
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "static const int64_t kKilnHeads = " << heads << ";\n"
     << "static const int64_t kKilnHeadDim = " << headDim << ";\n"
     << "static const int64_t kKilnVocab = " << vocab << ";\n"
     << "static const uint64_t kKilnFusedScratchOffset =\n"
        "    kiln_cuda_workspace_bytes_for(kKilnHeads, kKilnHeadDim, "
        "kKilnVocab);";
  return text;
}

/// The defines that narrow the attention kernels nvcc compiles to the ones
/// this plan calls (KilnCudaAttention.cuh KILN_CUDA_ATTN_HDM_MASK and
/// KILN_CUDA_STEP_KV_FORMAT_MASK): the head-dim bucket of kiln.model's
/// head_dim and of every kiln_k_step_attention* call's head_dim operand,
/// and the formats of those calls' format operand; the GGML block formats
/// of the kiln_k_{linear,embedding}_blocks calls (KilnCudaHost.cuh
/// KILN_CUDA_BLOCK_FORMAT_MASK). A non-constant operand
/// (or no kiln.model) keeps the header's default (every bucket / format).
static std::string cudaAttentionDefines(ModuleOp module) {
  auto bucketBit = [](int64_t headDim) {
    return headDim <= 32 ? 1 : headDim <= 64 ? 2 : headDim <= 128 ? 4 : 8;
  };
  int hdmMask = 0, formatMask = 0;
  uint64_t blockMask = 0;
  bool hdmKnown = true, formatKnown = true, blockKnown = true;
  if (auto model = module->getAttrOfType<DictionaryAttr>("kiln.model")) {
    if (auto hd = model.getAs<IntegerAttr>("head_dim"); hd && hd.getInt() > 0)
      hdmMask |= bucketBit(hd.getInt());
    else
      hdmKnown = false;
  } else {
    hdmKnown = false;
  }
  // kiln_k_step_attention{,_centered}(q, k, v, out, layer, elem, format,
  // heads, kv_heads, head_dim, ...): kernel_abi.h.
  module.walk([&](plan::CallKernelOp call) {
    auto operands = call.getOperands();
    // kiln_k_{linear,embedding}_blocks(..., format): operand 6.
    if (call.getCallee() == "kiln_k_linear_blocks" ||
        call.getCallee() == "kiln_k_embedding_blocks") {
      APInt format;
      if (operands.size() == 7 &&
          matchPattern(operands[6], m_ConstantInt(&format)) &&
          format.getSExtValue() > 0 && format.getSExtValue() < 63)
        blockMask |= uint64_t(1) << format.getSExtValue();
      else
        blockKnown = false;
      return;
    }
    if (!call.getCallee().starts_with("kiln_k_step_attention"))
      return;
    APInt format, headDim;
    if (operands.size() > 9 && matchPattern(operands[6], m_ConstantInt(&format)) &&
        format.getSExtValue() >= 0 && format.getSExtValue() <= 2)
      formatMask |= 1 << format.getSExtValue();
    else
      formatKnown = false;
    if (operands.size() > 9 &&
        matchPattern(operands[9], m_ConstantInt(&headDim)) &&
        headDim.getSExtValue() > 0)
      hdmMask |= bucketBit(headDim.getSExtValue());
    else
      hdmKnown = false;
  });
  std::string text;
  llvm::raw_string_ostream os(text);
  if (hdmKnown && hdmMask)
    os << "#define KILN_CUDA_ATTN_HDM_MASK " << hdmMask << "\n";
  if (formatKnown && formatMask)
    os << "#define KILN_CUDA_STEP_KV_FORMAT_MASK " << formatMask << "\n";
  if (blockKnown && blockMask)
    os << "#define KILN_CUDA_BLOCK_FORMAT_MASK 0x"
       << llvm::utohexstr(blockMask, /*LowerCase=*/true) << "\n";
  return text;
}

static LogicalResult cudaShapeError(ModuleOp module) {
  return module.emitError() << "the cuda target needs the module attribute "
                               "kiln.model with positive n_heads, head_dim, "
                               "max_seq_len, vocab_size, dim and hidden_dim";
}

/// The functions cuda_abi.h says model.so exports besides the entry points.
/// `fusedScratch`: the scratch expressions of the fused kernels
/// (emitFusedKernelCuda), whose largest value follows the regions of
/// kiln_cuda_workspace_bytes_for.
static std::string cudaExports(ArrayRef<std::string> fusedScratch) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "static constexpr uint64_t kKilnFusedScratchBytes = "
        "kiln_cuda_fused_scratch_max({";
  llvm::interleaveComma(fusedScratch, os);
  os << "});\n"
     << R"(extern "C" uint64_t kiln_cuda_workspace_bytes(void) {
  return kKilnFusedScratchOffset + kKilnFusedScratchBytes;
}
extern "C" void kiln_cuda_sample(kiln_cuda_ctx *ctx, float temperature, int32_t top_k,
                                 float top_p, const float *d_coin, int32_t *d_token) {
  if (temperature == 0.0f) {
    kiln_cuda_argmax(ctx, ctx->logits, kKilnVocab, d_token);
    return;
  }
  kiln_cuda_sample_topk_topp(ctx, ctx->logits, kKilnVocab, temperature, top_k, top_p,
                             d_coin, kiln_cuda_sample_scratch(ctx, kKilnHeads, kKilnHeadDim),
                             d_token);
}
extern "C" int32_t kiln_cuda_abi_version(void) { return KILN_CUDA_ABI_VERSION; })";
  return text;
}

/// `kiln_plan_info` (plan_info.h): the sizes this plan was made for, read
/// from the plan before its functions are rewritten.
static std::string planInfoExport(ModuleOp module) {
  auto attr = [&](Operation *op, StringRef name) -> int64_t {
    auto a = op->getAttrOfType<IntegerAttr>(name);
    return a ? a.getInt() : 0;
  };
  int64_t arena = attr(module, "plan.arena_bytes"), maxTokens = 0, vocab = 0,
          kvBytes = 0, maxSeq = 0, stepTokens = 0;
  // Weight extent of an entry point: the end of the furthest weight it
  // addresses, which the runtime checks against the size of weights.bin.
  SymbolTable symbols(module);
  llvm::StringMap<int64_t> weightExtent;
  for (func::FuncOp f : module.getOps<func::FuncOp>()) {
    int64_t &extent = weightExtent[f.getSymName()];
    f.walk([&](plan::WeightRefOp ref) {
      auto decl = symbols.lookup<plan::WeightOp>(ref.getName());
      if (!decl)
        return;
      MemRefType t = cast<MemRefType>(decl.getType());
      int64_t bytes = t.getNumElements() * (int64_t)
                      llvm::divideCeil(t.getElementTypeBitWidth(), 8);
      extent = std::max<int64_t>(extent, int64_t(decl.getOffset()) + bytes);
    });
  }
  module.walk([&](Operation *op) {
    if (auto f = dyn_cast<func::FuncOp>(op); f && f.getSymName() == "prefill")
      maxTokens = attr(f, "plan.max_tokens");
    if (auto f = dyn_cast<func::FuncOp>(op); f && f.getSymName() == "step")
      stepTokens = attr(f, "plan.max_tokens");
    if (auto l = dyn_cast<plan::LogitsOp>(op))
      vocab = std::max(vocab, l.getType().getDimSize(1));
    if (auto v = dyn_cast<plan::KVCacheViewOp>(op)) {
      MemRefType t = v.getType();
      int64_t bytes = t.getNumElements() * (int64_t)
                      llvm::divideCeil(t.getElementTypeBitWidth(), 8);
      kvBytes = std::max<int64_t>(kvBytes, v.getOffset() + bytes);
      maxSeq = std::max(maxSeq, t.getDimSize(0));
    }
  });
  // A pipeline stage before the last writes no logits; its plan info
  // still names the model's vocabulary (the artifact's, checked at load).
  if (vocab == 0)
    if (auto model = module->getAttrOfType<DictionaryAttr>("kiln.model"))
      if (auto v = model.getAs<IntegerAttr>("vocab_size"))
        vocab = v.getInt();
  // kiln-partition's group size (1: not partitioned).
  int64_t tpSize = 1;
  if (auto p = module->getAttrOfType<DictionaryAttr>("kiln.partition"))
    if (auto tp = p.getAs<IntegerAttr>("tp"))
      tpSize = tp.getInt();
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "extern \"C\" void kiln_plan_info(kiln_plan_info_t *out) {\n"
     << "  out->arena_bytes = " << arena << ";\n"
     << "  out->max_prefill_tokens = " << maxTokens << ";\n"
     << "  out->vocab_size = " << vocab << ";\n"
     << "  out->kv_cache_bytes = " << kvBytes << ";\n"
     << "  out->max_seq = " << maxSeq << ";\n"
     << "  out->prefill_weights_extent = " << weightExtent.lookup("prefill")
     << ";\n"
     << "  out->decode_weights_extent = " << weightExtent.lookup("decode")
     << ";\n"
     << "  out->step_max_tokens = " << stepTokens << ";\n"
     << "  out->step_weights_extent = " << weightExtent.lookup("step")
     << ";\n"
     << "  out->tp_size = " << tpSize << ";\n"
     << "}";
  return text;
}

void PlanToEmitCPass::runOnOperation() {
  ModuleOp module = getOperation();
  OpBuilder builder(&getContext());
  SymbolTable symbols(module);
  if (target != "cpu" && target != "cuda") {
    module.emitError() << "unknown target '" << target
                       << "' (expected cpu or cuda)";
    return signalPassFailure();
  }
  TargetInfo info{target == "cuda"};

  Location loc = module.getLoc();
  builder.setInsertionPointToStart(module.getBody());
  emitc::IncludeOp::create(builder, loc, "stdint.h", true);
  if (info.cuda) {
    emitc::IncludeOp::create(builder, loc, "kiln_rt/cuda_abi.h", false);
    std::string defines = cudaAttentionDefines(module);
    if (!defines.empty())
      emitc::VerbatimOp::create(builder, loc, StringRef(defines).rtrim());
    emitc::IncludeOp::create(builder, loc, "KilnKernels.cuh", false);
    // NCCL only for partitioned plans (KilnCudaComm.cuh).
    bool collectives = false;
    module.walk([&](plan::CallKernelOp c) {
      collectives |= isCommKernel(c.getCallee());
    });
    if (collectives)
      emitc::IncludeOp::create(builder, loc, "KilnCudaComm.cuh", false);
    emitc::VerbatimOp::create(builder, loc, kCudaPrologue);
  } else {
    emitc::IncludeOp::create(builder, loc, "kiln_rt/kernel_abi.h", false);
    emitc::VerbatimOp::create(builder, loc, kCpuPrologue);
  }
  emitc::VerbatimOp::create(builder, loc, kPointerMacros);
  // Fused kernels (kiln.fused regions): one generated function each.
  SmallVector<plan::FusedKernelOp> fusedKernels(
      module.getOps<plan::FusedKernelOp>());
  std::optional<std::string> constants;
  if (info.cuda) {
    // Without the model's shape, errors in the functions are reported
    // first and the shape's at the end (the fused kernels need it now).
    constants = cudaConstants(module);
    if (constants)
      emitc::VerbatimOp::create(builder, loc, *constants);
    else if (!fusedKernels.empty())
      return (void)cudaShapeError(module), signalPassFailure();
  }
  // The most tokens one call takes: prefill's plan.max_tokens (decode: 1).
  int64_t maxTokens = 1;
  for (func::FuncOp f : module.getOps<func::FuncOp>())
    if (auto a = f->getAttrOfType<IntegerAttr>("plan.max_tokens"))
      maxTokens = std::max(maxTokens, a.getInt());
  std::vector<std::string> fusedScratch; // one of each expression
  // The all-gathers of several rows (the batched step's logits) stage the
  // ranks' blocks in the same scratch (KilnCudaComm.cuh): rows (the step's
  // plan.max_tokens when dynamic) x gathered columns x element bytes.
  bool gathers = false;
  int64_t tp = 1;
  if (auto partition = module->getAttrOfType<DictionaryAttr>("kiln.partition"))
    if (auto a = partition.getAs<IntegerAttr>("tp"))
      tp = std::max<int64_t>(1, a.getInt());
  if (info.cuda)
    module.walk([&](plan::CallKernelOp c) {
      // Sequence parallelism's padded shards (KilnCudaComm.cuh): at most
      // 2 (max_tokens + tp) rows of x's width.
      StringRef callee = c.getCallee();
      if ((callee == "kiln_k_reduce_scatter" || callee == "kiln_k_all_slice" ||
           callee == "kiln_k_all_gather_rows" ||
           callee == "kiln_k_all_gather_rows_q8" ||
           callee == "kiln_k_reduce_scatter_add_rms_norm") &&
          !c.getArgs().empty()) {
        gathers = true;
        auto x = dyn_cast<MemRefType>(c.getArgs()[0].getType());
        if (!x || x.getRank() != 2 || x.isDynamicDim(1))
          return;
        std::string scratch =
            "kiln_cuda_align256(uint64_t(" +
            std::to_string(2 * (maxTokens + tp)) + ") * uint64_t(" +
            std::to_string(x.getDimSize(1)) + ") * " +
            std::to_string(std::max(
                1u, x.getElementType().getIntOrFloatBitWidth() / 8)) +
            ")";
        if (!llvm::is_contained(fusedScratch, scratch))
          fusedScratch.push_back(scratch);
        return;
      }
      if (c.getCallee() != "kiln_k_all_gather" || c.getArgs().size() < 2)
        return;
      gathers = true;
      auto y = dyn_cast<MemRefType>(c.getArgs()[1].getType());
      if (!y || y.getRank() != 2)
        return;
      const int64_t rows = y.isDynamicDim(0) ? maxTokens : y.getDimSize(0);
      if (rows == 1)
        return;
      const std::string cols = y.isDynamicDim(1)
                                   ? std::string("kKilnVocab")
                                   : std::to_string(y.getDimSize(1));
      const unsigned bytes =
          std::max(1u, y.getElementType().getIntOrFloatBitWidth() / 8);
      std::string scratch = "kiln_cuda_align256(uint64_t(" +
                            std::to_string(rows) + ") * uint64_t(" + cols +
                            ") * " + std::to_string(bytes) + ")";
      if (!llvm::is_contained(fusedScratch, scratch))
        fusedScratch.push_back(scratch);
    });
  llvm::StringMap<std::string> epilogueTypes;
  for (plan::FusedKernelOp kernel : fusedKernels) {
    std::string scratch;
    FailureOr<std::string> text =
        info.cuda ? emitFusedKernelCuda(kernel, maxTokens, scratch,
                                        &epilogueTypes)
                  : emitFusedKernelCpu(kernel);
    if (!scratch.empty() && !llvm::is_contained(fusedScratch, scratch))
      fusedScratch.push_back(scratch);
    if (failed(text))
      return signalPassFailure();
    emitc::VerbatimOp::create(builder, kernel.getLoc(), *text);
  }

  std::string planInfo = planInfoExport(module);
  SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
  for (func::FuncOp func : funcs) {
    if (func.isExternal())
      continue;
    if (failed(lowerFunction(func, builder, symbols, info)))
      return signalPassFailure();
  }
  builder.setInsertionPointToEnd(module.getBody());
  emitc::VerbatimOp::create(builder, loc, planInfo);
  if (info.cuda) {
    if (!constants)
      return (void)cudaShapeError(module), signalPassFailure();
    builder.setInsertionPointToEnd(module.getBody());
    emitc::VerbatimOp::create(builder, loc, cudaExports(fusedScratch));
    if (gathers)
      emitc::VerbatimOp::create(
          builder, loc,
          "static void *kiln_cuda_gather_scratch(const kiln_cuda_ctx *ctx,\n"
          "                                      uint64_t *bytes) {\n"
          "  return kiln_cuda_fused_scratch(ctx, kKilnFusedScratchOffset, "
          "bytes);\n}");
  }
  for (func::FuncOp func : funcs)
    func.erase();
  for (auto weight : llvm::make_early_inc_range(module.getOps<plan::WeightOp>()))
    weight.erase();
  for (plan::FusedKernelOp kernel : fusedKernels)
    kernel.erase();
}

LogicalResult emitCpp(ModuleOp module, llvm::raw_ostream &os) {
  return emitc::translateToCpp(module, os);
}

/// Runs `argv` (argv[0] is the program), capturing its output in
/// `buildDir`/compiler.log, with `buildDir`/tmp as its TMPDIR; on failure
/// the error names the file being compiled as `what` and carries the last
/// 20 lines of the compiler's output. The compiler runs in a process
/// group of its own, registered with the cleanup registry (runProcess,
/// SafeOutput.h), so a SIGINT or SIGTERM to Kiln stops it and its
/// subprocesses too instead of leaving them writing into a removed
/// directory.
static llvm::Error runCompiler(ArrayRef<StringRef> argv, StringRef what,
                               StringRef buildDir) {
  SmallString<256> log(buildDir);
  llvm::sys::path::append(log, "compiler.log");
  llvm::sys::fs::remove(log);
  SmallString<256> tmp(buildDir);
  llvm::sys::path::append(tmp, "tmp");
  if (std::error_code ec = llvm::sys::fs::create_directories(tmp))
    return llvm::createStringError(ec, "cannot create " + tmp + ": " +
                                           ec.message());
  llvm::Expected<int> status = runProcess(argv, log, tmp);
  if (!status)
    return status.takeError();
  int rc = *status;
  auto diagnostics = llvm::MemoryBuffer::getFile(log);
  std::string text = diagnostics ? (*diagnostics)->getBuffer().str() : "";
  llvm::sys::fs::remove(log);
  if (rc == 0)
    return llvm::Error::success();
  // The last lines of the log carry the cause (the first error, or "No
  // space left on device" from the assembler or linker at the end).
  constexpr size_t kTailLines = 20;
  StringRef body = StringRef(text).rtrim();
  SmallVector<StringRef> lines;
  body.split(lines, '\n');
  std::string shown;
  if (body.empty()) {
    shown = "\n(the compiler printed nothing)";
  } else {
    size_t first = lines.size() > kTailLines ? lines.size() - kTailLines : 0;
    if (first > 0)
      shown = "\n(last " + std::to_string(kTailLines) + " of " +
              std::to_string(lines.size()) + " lines of its output)";
    for (size_t i = first; i < lines.size(); ++i)
      shown += "\n" + lines[i].str();
  }
  return llvm::createStringError(
      "compiling " + what + " with " + argv[0] + " failed (" +
      (rc < 0 ? "killed by signal " + std::to_string(-rc)
              : "exit " + std::to_string(rc)) +
      ")" + shown);
}

llvm::Error compileSharedObject(StringRef cppPath, StringRef soPath,
                                StringRef includeDir, StringRef displayName) {
  std::string compiler = "c++";
  if (const char *env = std::getenv("KILN_HOST_CXX"))
    compiler = env;
  llvm::ErrorOr<std::string> exe = llvm::sys::findProgramByName(compiler);
  if (!exe)
    return llvm::createStringError("host C++ compiler '" + compiler +
                                   "' not found on PATH (set KILN_HOST_CXX)");
  std::string include = ("-I" + includeDir).str();
  return runCompiler({*exe, "-std=c++17", "-O2", "-fPIC", "-shared", include,
                      cppPath, "-o", soPath},
                     displayName.empty() ? cppPath : displayName, includeDir);
}

llvm::Error compileCudaSharedObject(StringRef cuPath, StringRef soPath,
                                    StringRef includeDir,
                                    StringRef displayName, bool linkNccl) {
  std::string nvcc;
  if (const char *env = std::getenv("KILN_NVCC"))
    nvcc = env;
  else if (llvm::ErrorOr<std::string> onPath = llvm::sys::findProgramByName("nvcc"))
    nvcc = *onPath;
  else if (llvm::sys::fs::can_execute("/usr/local/cuda/bin/nvcc"))
    nvcc = "/usr/local/cuda/bin/nvcc";
  else
    return llvm::createStringError(
        "nvcc not found (looked at $KILN_NVCC, PATH and /usr/local/cuda/bin); "
        "the cuda target needs the CUDA toolkit");
  // The toolkit's libraries sit beside its bin/ directory.
  SmallString<256> libDir(llvm::sys::path::parent_path(
      llvm::sys::path::parent_path(nvcc)));
  llvm::sys::path::append(libDir, "lib64");
  std::string include = ("-I" + includeDir).str();
  std::string libPath = ("-L" + libDir).str();
  std::string rpath = ("-Xlinker=-rpath=" + libDir).str();
  SmallVector<StringRef> argv = {
      nvcc, "-std=c++17", "-O3", "-shared", "-Xcompiler=-fPIC",
      "--cudart=shared", "-gencode=arch=compute_80,code=sm_80",
      "-gencode=arch=compute_90a,code=sm_90a",
      // PTX beside the cubins: GPUs newer than sm_90 JIT it when the
      // artifact is loaded.
      "-gencode=arch=compute_90,code=compute_90", include, cuPath, "-o",
      soPath, libPath, rpath, "-lcublasLt"};
  // Partitioned plans call NCCL (KilnCudaComm.cuh).
  if (linkNccl)
    argv.push_back("-lnccl");
  return runCompiler(argv, displayName.empty() ? cuPath : displayName,
                     includeDir);
}

} // namespace mlir::kiln

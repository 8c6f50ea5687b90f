//===- KilnToPlan.cpp - kiln graph IR to the plan dialect -----------------===//
//
// After memory planning every activation has an arena offset; this lowering
// turns tensors into buffers at those offsets and each kiln op into one call
// of the runtime kernel ABI (runtime/include/kiln_rt/kernel_abi.h). The
// entry points change signature (tensors -> token count and position), so
// the lowering rebuilds each function rather than converting it in place.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/Passes.h"
#include "kiln_rt/block_formats.h"
#include "kiln_rt/kernel_abi.h"
#include "kiln_rt/rope_scaling.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/MathExtras.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_LOWERTOPLANPASS
#include "passes/Conversion/Passes.h.inc"

namespace {
struct LowerToPlanPass final : impl::LowerToPlanPassBase<LowerToPlanPass> {
  using Base::Base;
  void runOnOperation() override;
};

/// Lowers the body of one entry point.
class FunctionLowering {
public:
  FunctionLowering(func::FuncOp source, func::FuncOp target)
      : source(source), builder(target.getBody()) {
    Block &entry = target.getBody().front();
    tokenCount = entry.getArgument(0);
    position = entry.getArgument(1);
    builder.setInsertionPointToStart(&entry);
  }

  LogicalResult run();

private:
  Value indexConst(int64_t v) {
    return arith::ConstantIndexOp::create(builder, loc(), v);
  }
  Value f32Const(APFloat v) {
    return arith::ConstantFloatOp::create(builder, loc(), builder.getF32Type(),
                                          v);
  }
  /// Rows (tokens) of a rank-2 activation: a constant, the entry's `n`,
  /// or, for the batched step's rows after kiln.last_rows, the number of
  /// sequences.
  Value rows(Value tensor) {
    if (perSequence.contains(tensor))
      return numSequences();
    if (auto it = sequenceShard.find(tensor); it != sequenceShard.end())
      return shardRows(it->second);
    int64_t d = cast<RankedTensorType>(tensor.getType()).getDimSize(0);
    return ShapedType::isDynamic(d) ? tokenCount : indexConst(d);
  }
  /// plan.batch_size, made once per function.
  Value numSequences() {
    if (!batchSize) {
      OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPointToStart(builder.getInsertionBlock());
      batchSize = plan::BatchSizeOp::create(builder, source.getLoc(),
                                            builder.getIndexType());
    }
    return batchSize;
  }
  /// plan.sequence_rows of the entry's `n` for threshold `minTokens`, made
  /// once per function and threshold.
  Value shardRows(int64_t minTokens) {
    Value &v = shardRowsByThreshold[minTokens];
    if (!v) {
      OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPointAfterValue(tokenCount);
      v = plan::SequenceRowsOp::create(builder, source.getLoc(),
                                       builder.getIndexType(), tokenCount,
                                       builder.getI64IntegerAttr(minTokens));
    }
    return v;
  }
  /// The sequence shard's threshold of the first sharded value among
  /// `values`, if any.
  std::optional<int64_t> shardOf(ValueRange values) {
    for (Value v : values)
      if (auto it = sequenceShard.find(v); it != sequenceShard.end())
        return it->second;
    return std::nullopt;
  }
  /// The KILN_ELEM_* code of an activation's element type.
  Value elemCode(Value tensor) {
    Type e = cast<RankedTensorType>(tensor.getType()).getElementType();
    return indexConst(e.isF16()    ? KILN_ELEM_F16
                      : e.isBF16() ? KILN_ELEM_BF16
                                   : KILN_ELEM_F32);
  }
  Value elements(Value tensor) {
    int64_t width = cast<RankedTensorType>(tensor.getType()).getDimSize(1);
    return arith::MulIOp::create(builder, loc(), rows(tensor),
                                 indexConst(width));
  }
  Location loc() { return current ? current->getLoc() : source.getLoc(); }

  LogicalResult lowerOp(Operation *op);
  LogicalResult lowerObserve(ObserveOp op);
  /// kiln.attention of the batched step: kiln_k_step_attention[_centered]
  /// (kernel_abi.h) over the layer's paged pool and the step's batch.
  LogicalResult lowerStepAttention(AttentionOp op, Value out);
  /// Appends the sparse kernels' selection parameters (kernel_abi.h
  /// kiln_k_attention_sparse): gamma, block, sink, local, min_budget,
  /// max_budget, min_tokens, then `layer` when given, the streaming mask
  /// and the stride.
  void appendSparseParams(SmallVectorImpl<Value> &args,
                          SparseAttentionAttr sparse,
                          std::optional<int64_t> layer) {
    args.append({f32Const(sparse.getGamma().getValue()),
                 indexConst(sparse.getBlock()), indexConst(sparse.getSink()),
                 indexConst(sparse.getLocal()),
                 indexConst(sparse.getMinBudget()),
                 indexConst(sparse.getMaxBudget()),
                 indexConst(sparse.getMinTokens())});
    if (layer)
      args.push_back(indexConst(*layer));
    args.append({indexConst(int64_t(sparse.getStreamingMask())),
                 indexConst(sparse.getStride())});
  }
  LogicalResult lowerFused(FusedOp op);
  /// kiln.logits marked by kiln-outline-kernels -> plan.fused_kernel
  /// @kiln_logits_<func>_<i> holding the op + plan.call_fused(hidden,
  /// weight, logits, n): the CPU target's generated classifier.
  LogicalResult lowerGeneratedLogits(LogitsOp op, Value logits);
  FailureOr<Value> bufferFor(Operation *op);
  /// The activation buffer of `type` at arena `offset` (`n` rows when its
  /// first dimension is dynamic).
  Value arenaView(MemRefType type, int64_t offset);
  void call(StringRef callee, ArrayRef<Value> args) {
    plan::CallKernelOp::create(builder, loc(), builder.getStringAttr(callee),
                               args);
  }

  func::FuncOp source;
  OpBuilder builder;
  Value tokenCount, position;
  Value batchSize;
  /// Activations with one row per sequence of the batched step (the rows
  /// kiln.last_rows picked, and what is computed from them).
  llvm::DenseSet<Value> perSequence;
  /// Activations holding this rank's sequence shard of the rows (after
  /// kiln.all_slice / kiln.reduce_scatter, and what is computed from them
  /// before kiln.all_gather_rows), with the split's min_tokens.
  llvm::DenseMap<Value, int64_t> sequenceShard;
  llvm::DenseMap<int64_t, Value> shardRowsByThreshold;
  Operation *current = nullptr;
  IRMapping buffers;
  int64_t numFused = 0;
};
} // namespace

static MemRefType toMemRef(Type t) {
  auto tensor = cast<RankedTensorType>(t);
  return MemRefType::get(tensor.getShape(), tensor.getElementType());
}

FailureOr<Value> FunctionLowering::bufferFor(Operation *op) {
  Value result = op->getResult(0);
  MemRefType type = toMemRef(result.getType());
  // The entry point's result (kiln.logits, or the kiln.all_gather of a
  // vocab-parallel classifier's logits) is the context's logits buffer.
  if (isa<LogitsOp, AllGatherOp>(op) &&
      llvm::any_of(result.getUsers(),
                   [](Operation *u) { return isa<func::ReturnOp>(u); }))
    return plan::LogitsOp::create(builder, loc(), type).getResult();
  auto offset = op->getAttrOfType<IntegerAttr>("kiln.buffer_offset");
  if (!offset)
    return op->emitOpError()
           << "has no kiln.buffer_offset; run --kiln-memory-plan first";
  return arenaView(type, offset.getInt());
}

Value FunctionLowering::arenaView(MemRefType type, int64_t offset) {
  SmallVector<Value> dynamicSizes;
  if (type.getNumDynamicDims() > 0)
    dynamicSizes.push_back(tokenCount);
  return plan::ArenaViewOp::create(builder, loc(), type, offset, dynamicSizes)
      .getResult();
}

/// The GGML type id (kiln_rt/block_formats.h) the kernels take for a
/// verified `format` attribute.
static int64_t blockFormatId(StringRef format) {
  return kiln_block_format_from_name(format.str().c_str());
}

// kiln.observe %x {tap} -> kiln_k_observe(x, rows, cols, tap index), the
// index being the tap's position in the module's kiln.observe_taps.
LogicalResult FunctionLowering::lowerObserve(ObserveOp op) {
  auto module = op->getParentOfType<ModuleOp>();
  auto taps = module ? module->getAttrOfType<ArrayAttr>("kiln.observe_taps")
                     : ArrayAttr();
  auto it = taps ? llvm::find(taps.getValue(), op.getTapAttr())
                 : ArrayRef<Attribute>::iterator();
  if (!taps || it == taps.getValue().end())
    return op.emitOpError() << "tap '" << op.getTap()
                            << "' is not listed in the module's "
                               "kiln.observe_taps (run --kiln-insert-observers)";
  Value input = op.getInput();
  call("kiln_k_observe",
       {buffers.lookup(input), rows(input),
        indexConst(cast<RankedTensorType>(input.getType()).getDimSize(1)),
        indexConst(it - taps.getValue().begin())});
  return success();
}

// kiln.fused -> plan.fused_kernel @kiln_fused_<func>_<i> (or
// @kiln_<op>_<func>_<i> for a single op; the region, moved) + plan.call_fused(operand buffers, result buffers, n).
LogicalResult FunctionLowering::lowerFused(FusedOp op) {
  auto offsets = op->getAttrOfType<DenseI64ArrayAttr>("kiln.buffer_offsets");
  if (!offsets || offsets.size() != int64_t(op.getNumResults()))
    return op.emitOpError()
           << "has no kiln.buffer_offsets; run --kiln-memory-plan first";
  SmallVector<Value> args;
  for (Value v : op.getInputs()) {
    if (isa<IndexType>(v.getType())) { // a RoPE epilogue's position
      if (v != source.getBody().front().getArgument(1))
        return op.emitOpError() << "takes an index operand other than the "
                                   "entry point's position";
      args.push_back(position);
      continue;
    }
    args.push_back(buffers.lookup(v));
  }
  for (auto [result, offset] : llvm::zip(op.getResults(), offsets.asArrayRef())) {
    if (offset < 0)
      return op.emitOpError() << "returns a fused result; entry points must "
                                 "return the result of kiln.logits";
    Value buffer = arenaView(toMemRef(result.getType()), offset);
    buffers.map(result, buffer);
    args.push_back(buffer);
  }
  bool sequences = llvm::any_of(op.getInputs(), [&](Value v) {
    return perSequence.contains(v);
  });
  if (sequences)
    perSequence.insert(op.getResults().begin(), op.getResults().end());
  std::optional<int64_t> shard = shardOf(op.getInputs());
  if (shard)
    for (Value r : op.getResults())
      sequenceShard[r] = *shard;
  args.push_back(sequences ? numSequences()
                 : shard   ? shardRows(*shard)
                           : tokenCount);
  // A single-op kernel (kiln-outline-kernels) is named after its op:
  // kiln_linear_decode_3; a fused one kiln_fused_decode_4.
  StringRef what = "fused";
  if (op.getFamilies().empty())
    what = op.getBody().front().front().getName().stripDialect();
  std::string name = ("kiln_" + what + "_" + source.getSymName() + "_" +
                      Twine(numFused++))
                         .str();
  OpBuilder moduleBuilder(source);
  auto kernel = plan::FusedKernelOp::create(
      moduleBuilder, op.getLoc(), moduleBuilder.getStringAttr(name),
      op.getFamilies());
  kernel.getBody().takeBody(op.getBody());
  plan::CallFusedOp::create(builder, loc(),
                            FlatSymbolRefAttr::get(builder.getContext(), name),
                            args);
  return success();
}

LogicalResult FunctionLowering::lowerGeneratedLogits(LogitsOp op,
                                                    Value logits) {
  std::string name =
      ("kiln_logits_" + source.getSymName() + "_" + Twine(numFused++)).str();
  OpBuilder moduleBuilder(source);
  auto kernel = plan::FusedKernelOp::create(
      moduleBuilder, op.getLoc(), moduleBuilder.getStringAttr(name),
      moduleBuilder.getStrArrayAttr({}));
  Block *body = moduleBuilder.createBlock(&kernel.getBody());
  IRMapping map;
  for (Value v : op->getOperands())
    map.map(v, body->addArgument(v.getType(), v.getLoc()));
  Operation *clone = moduleBuilder.clone(*op, map);
  clone->removeAttr(kGeneratedKernelAttr);
  YieldOp::create(moduleBuilder, op.getLoc(), clone->getResults());
  plan::CallFusedOp::create(
      builder, loc(), FlatSymbolRefAttr::get(builder.getContext(), name),
      {buffers.lookup(op.getHidden()), buffers.lookup(op.getWeight()), logits,
       perSequence.contains(op.getHidden()) ? numSequences() : tokenCount});
  return success();
}

LogicalResult FunctionLowering::lowerStepAttention(AttentionOp a, Value out) {
  int64_t format = !a.isCacheQuantized() ? KILN_KV_PLAIN
                   : a.isCacheFp8()      ? KILN_KV_FP8
                                         : KILN_KV_INT8;
  SmallVector<Value> args = {
      buffers.lookup(a.getQuery()), buffers.lookup(a.getKey()),
      buffers.lookup(a.getValue()), out,
      indexConst(a.getLayer()),     elemCode(a.getQuery()),
      indexConst(format),           indexConst(a.getNumHeads()),
      indexConst(a.getNumKvHeads()), indexConst(a.getHeadDim()),
      f32Const(a.getScale()),
      indexConst(int64_t(a.getSlidingWindow().value_or(0)))};
  if (a.getKeyMean()) {
    args.append({buffers.lookup(a.getKeyMean()),
                 indexConst(int64_t(*a.getKeyMeanRotaryDim())),
                 f32Const(*a.getKeyMeanTheta())});
    call("kiln_k_step_attention_centered", args);
    return success();
  }
  // Dynamic block-sparse chunks (kernel_abi.h kiln_k_step_attention_sparse):
  // the selection's parameters after the window, as for the contiguous
  // kernel (no layer-independent summaries in the paged pools).
  if (SparseAttentionAttr sparse = a.getSparseAttr()) {
    appendSparseParams(args, sparse, std::nullopt);
    call("kiln_k_step_attention_sparse", args);
    return success();
  }
  call("kiln_k_step_attention", args);
  return success();
}

LogicalResult FunctionLowering::lowerOp(Operation *op) {
  current = op;
  if (auto ref = dyn_cast<WeightRefOp>(op)) {
    Value w = plan::WeightRefOp::create(builder, loc(), toMemRef(ref.getType()),
                                        ref.getName());
    buffers.map(ref.getResult(), w);
    return success();
  }
  if (isa<func::ReturnOp>(op)) {
    for (Value v : op->getOperands()) {
      auto gather = v.getDefiningOp<AllGatherOp>();
      if (!v.getDefiningOp<LogitsOp>() &&
          !(gather && gather.getInput().getDefiningOp<LogitsOp>()))
        return op->emitOpError()
               << "entry points must return the result of kiln.logits (or "
                  "its kiln.all_gather)";
    }
    func::ReturnOp::create(builder, loc());
    return success();
  }
  if (auto observe = dyn_cast<ObserveOp>(op))
    return lowerObserve(observe);
  if (auto fused = dyn_cast<FusedOp>(op))
    return lowerFused(fused);
  // Pipeline stages (kernel_abi.h kiln_k_send): the residual stream to the
  // next stage.
  if (auto send = dyn_cast<SendOp>(op)) {
    Value x = send.getInput();
    call("kiln_k_send",
         {buffers.lookup(x), rows(x),
          indexConst(cast<RankedTensorType>(x.getType()).getDimSize(1)),
          elemCode(x), indexConst(send.getDestination())});
    return success();
  }
  // Communication fusion: one call writes the sum and the normed sum
  // (kernel_abi.h kiln_k_reduce_scatter_add_rms_norm), both the shard.
  if (auto f = dyn_cast<ReduceScatterAddRmsNormOp>(op)) {
    auto offsets = op->getAttrOfType<DenseI64ArrayAttr>("kiln.buffer_offsets");
    if (!offsets || offsets.size() != 2 || offsets[0] < 0 || offsets[1] < 0)
      return op->emitOpError()
             << "has no kiln.buffer_offsets; run --kiln-memory-plan first";
    Value sum = arenaView(toMemRef(f.getSum().getType()), offsets[0]);
    Value normed = arenaView(toMemRef(f.getNormed().getType()), offsets[1]);
    call("kiln_k_reduce_scatter_add_rms_norm",
         {buffers.lookup(f.getPartial()), buffers.lookup(f.getResidual()),
          buffers.lookup(f.getWeight()), sum, normed, tokenCount,
          indexConst(cast<RankedTensorType>(f.getPartial().getType())
                         .getDimSize(1)),
          elemCode(f.getPartial()), indexConst(f.getMinTokens()),
          f32Const(f.getEpsilon())});
    buffers.map(f.getSum(), sum);
    buffers.map(f.getNormed(), normed);
    sequenceShard[f.getSum()] = f.getMinTokens();
    sequenceShard[f.getNormed()] = f.getMinTokens();
    return success();
  }
  if (op->getNumResults() != 1)
    return op->emitOpError() << "cannot be lowered to the plan dialect";

  FailureOr<Value> out = bufferFor(op);
  if (failed(out))
    return failure();
  // The sequence shard, from the split to the gather: marked before the
  // op's call, whose row count may be its result's.
  // The sequence shard: from the split to the gather.
  if (auto r = dyn_cast<ReduceScatterOp>(op))
    sequenceShard[r.getResult()] = r.getMinTokens();
  else if (auto r = dyn_cast<AllSliceOp>(op))
    sequenceShard[r.getResult()] = r.getMinTokens();
  else if (!isa<AllGatherRowsOp>(op))
    if (std::optional<int64_t> shard = shardOf(op->getOperands()))
      sequenceShard[op->getResult(0)] = *shard;
  auto in = [&](Value v) { return buffers.lookup(v); };
  auto width = [&](Value v) {
    return indexConst(cast<RankedTensorType>(v.getType()).getDimSize(1));
  };

  LogicalResult status =
      llvm::TypeSwitch<Operation *, LogicalResult>(op)
          .Case([&](EmbeddingOp e) {
            auto table = cast<RankedTensorType>(e.getTable().getType());
            if (std::optional<StringRef> format = e.getFormat()) {
              call("kiln_k_embedding_blocks",
                   {in(e.getTokens()), rows(e.getResult()), in(e.getTable()),
                    indexConst(table.getDimSize(0)), width(e.getResult()),
                    *out, indexConst(blockFormatId(*format))});
              return success();
            }
            call("kiln_k_embedding",
                 {in(e.getTokens()), rows(e.getResult()), in(e.getTable()),
                  indexConst(table.getDimSize(0)),
                  indexConst(table.getDimSize(1)), *out});
            return success();
          })
          .Case([&](RmsNormOp r) {
            call("kiln_k_rms_norm",
                 {in(r.getInput()), in(r.getWeight()), *out, rows(r.getInput()),
                  width(r.getInput()), f32Const(r.getEpsilon())});
            return success();
          })
          .Case([&](LinearOp l) {
            if (std::optional<StringRef> format = l.getFormat()) {
              call(l.hasQuantizedActivations() ? "kiln_k_linear_blocks_a8"
                                               : "kiln_k_linear_blocks",
                   {in(l.getInput()), in(l.getWeight()), *out,
                    rows(l.getInput()), width(l.getInput()),
                    width(l.getResult()), indexConst(blockFormatId(*format))});
              return success();
            }
            call("kiln_k_linear",
                 {in(l.getInput()), in(l.getWeight()), *out, rows(l.getInput()),
                  width(l.getInput()), width(l.getResult())});
            return success();
          })
          .Case([&](QuantizedLinearOp q) -> LogicalResult {
            auto qweight = cast<RankedTensorType>(q.getQweight().getType());
            Value inFeatures = width(q.getInput());
            Value outFeatures = indexConst(qweight.getDimSize(0));
            if (q.hasQuantizedActivations()) {
              // SmoothQuant W8A8: act_scale 0 selects dynamic per-token
              // activation scales, a positive one the static per-tensor scale.
              APFloat actScale = q.getActScale().value_or(APFloat(0.0f));
              if (q.getActQuant() == "int8_per_token")
                actScale = APFloat(0.0f);
              call("kiln_k_linear_w8a8",
                   {in(q.getInput()), in(q.getQweight()), in(q.getScales()),
                    *out, rows(q.getInput()), inFeatures, outFeatures,
                    f32Const(actScale)});
              return success();
            }
            if (q.getBits() == 8) {
              call("kiln_k_linear_w8a16",
                   {in(q.getInput()), in(q.getQweight()), in(q.getScales()),
                    *out, rows(q.getInput()), inFeatures, outFeatures,
                    indexConst(q.getGroupSize())});
              return success();
            }
            call("kiln_k_linear_w4a16",
                 {in(q.getInput()), in(q.getQweight()), in(q.getScales()),
                  in(q.getZeroPoints()), *out, rows(q.getInput()), inFeatures,
                  outFeatures, indexConst(q.getGroupSize())});
            return success();
          })
          .Case([&](RopeOp r) -> LogicalResult {
            if (r.isBatched()) {
              if (!r.isUnscaled())
                return r.emitOpError()
                       << "with scaled frequencies has no batched kernel "
                          "yet (kiln_k_step_rope takes plain RoPE)";
              call("kiln_k_step_rope",
                   {in(r.getInput()), *out, rows(r.getInput()),
                    indexConst(r.getNumHeads()), indexConst(r.getHeadDim()),
                    indexConst(r.getRotaryDim()), f32Const(r.getTheta()),
                    elemCode(r.getInput())});
              return success();
            }
            SmallVector<Value> args = {
                in(r.getInput()),           *out,
                rows(r.getInput()),         indexConst(r.getNumHeads()),
                indexConst(r.getHeadDim()), indexConst(r.getRotaryDim()),
                position,                   f32Const(r.getTheta())};
            if (r.isUnscaled()) {
              call("kiln_k_rope", args);
              return success();
            }
            if (Value factors = r.getFreqFactors()) {
              args.push_back(in(factors));
              call("kiln_k_rope_factors", args);
              return success();
            }
            // kiln_rt/rope_scaling.h: KILN_ROPE_LINEAR / DYNAMIC / LLAMA3.
            StringRef scaling = r.getScaling().value_or("linear");
            int64_t kind = scaling == "dynamic"  ? KILN_ROPE_DYNAMIC
                           : scaling == "llama3" ? KILN_ROPE_LLAMA3
                                                 : KILN_ROPE_LINEAR;
            args.append(
                {indexConst(kind), f32Const(r.getScalingFactor()),
                 f32Const(r.getLowFreqFactor().value_or(APFloat(0.0f))),
                 f32Const(r.getHighFreqFactor().value_or(APFloat(0.0f))),
                 indexConst(int64_t(r.getOriginalMaxPositions().value_or(0)))});
            call("kiln_k_rope_scaled", args);
            return success();
          })
          .Case([&](AddBiasOp b) {
            call("kiln_k_add_bias", {in(b.getInput()), in(b.getBias()), *out,
                                     rows(b.getInput()), width(b.getInput())});
            return success();
          })
          .Case([&](LastRowsOp l) {
            call("kiln_k_step_last_rows",
                 {in(l.getInput()), *out, width(l.getInput()),
                  elemCode(l.getInput())});
            return success();
          })
          .Case([&](AttentionOp a) -> LogicalResult {
            if (a.isBatched())
              return lowerStepAttention(a, *out);
            auto cache = cast<KVCacheType>(a.getKvCache().getType());
            int64_t kvDim = cache.getNumKvHeads() * cache.getHeadDim();
            int64_t layerBase = a.getLayer() * cache.getLayerBytes();
            int64_t dataBytes = cache.getMaxSeq() * kvDim *
                                (cache.getElementType().getIntOrFloatBitWidth() / 8);
            auto dataType = MemRefType::get({cache.getMaxSeq(), kvDim},
                                            cache.getElementType());
            auto view = [&](int64_t part, MemRefType type, int64_t offset) {
              return plan::KVCacheViewOp::create(builder, loc(), type,
                                                 a.getLayer(), part, offset)
                  .getResult();
            };
            Value keys = view(0, dataType, layerBase);
            Value values = view(1, dataType, layerBase + dataBytes);
            SmallVector<Value> args = {in(a.getQuery()), in(a.getKey()),
                                       in(a.getValue()), keys, values};
            StringRef callee = "kiln_k_attention";
            std::optional<uint64_t> window = a.getSlidingWindow();
            if (window && cache.isQuantized())
              return a.emitOpError()
                     << "sliding_window with an 8-bit kv_cache ("
                     << cache.getElementType()
                     << ") is not supported yet; compile without --kv-dtype";
            if (window)
              callee = "kiln_k_attention_window";
            if (cache.isQuantized()) {
              auto scaleType = MemRefType::get(
                  {cache.getMaxSeq(), cache.getNumKvHeads()}, builder.getF32Type());
              int64_t scaleBytes = cache.getMaxSeq() * cache.getNumKvHeads() * 4;
              args.push_back(view(2, scaleType, layerBase + 2 * dataBytes));
              args.push_back(
                  view(3, scaleType, layerBase + 2 * dataBytes + scaleBytes));
              callee = cache.isFp8() ? "kiln_k_attention_kvf8"
                                     : "kiln_k_attention_kv8";
            }
            // Key centering (kernel_abi.h kiln_k_attention_kv8_centered):
            // the key mean after the scales, the rotary dim after head_dim
            // and theta last.
            bool centered = bool(a.getKeyMean());
            if (centered) {
              args.push_back(in(a.getKeyMean()));
              callee = cache.isFp8() ? "kiln_k_attention_kvf8_centered"
                                     : "kiln_k_attention_kv8_centered";
            }
            args.append({*out, rows(a.getQuery()), position,
                         indexConst(a.getNumHeads()), indexConst(a.getNumKvHeads()),
                         indexConst(a.getHeadDim())});
            if (centered)
              args.push_back(indexConst(
                  static_cast<int64_t>(*a.getKeyMeanRotaryDim())));
            args.append({indexConst(cache.getMaxSeq()), f32Const(a.getScale())});
            if (centered)
              args.push_back(f32Const(*a.getKeyMeanTheta()));
            if (window)
              args.push_back(indexConst(int64_t(*window)));
            // Dynamic block-sparse prefill (kernel_abi.h
            // kiln_k_attention_sparse): the selection's parameters last.
            if (SparseAttentionAttr sparse = a.getSparseAttr()) {
              callee = "kiln_k_attention_sparse";
              // A cache with key summaries: the summary views after the
              // values; one-row steps run Quest decode.
              if (cache.getSummaryBlock() > 0) {
                auto summaryType = MemRefType::get(
                    {cache.getSummaryPages(), kvDim}, builder.getF32Type());
                int64_t at = layerBase + cache.getSummaryOffset();
                args.insert(args.begin() + 5, view(4, summaryType, at));
                args.insert(args.begin() + 6,
                            view(5, summaryType,
                                 at + cache.getSummaryPages() * kvDim * 4));
                auto query = cast<RankedTensorType>(a.getQuery().getType());
                callee = !query.isDynamicDim(0) && query.getDimSize(0) == 1
                             ? "kiln_k_attention_sparse_decode"
                             : "kiln_k_attention_sparse_summary";
              }
              appendSparseParams(args, sparse, int64_t(a.getLayer()));
            }
            call(callee, args);
            return success();
          })
          .Case([&](SliceColumnsOp s) {
            call("kiln_k_slice_columns",
                 {in(s.getInput()), *out, rows(s.getInput()),
                  width(s.getInput()),
                  indexConst(static_cast<int64_t>(s.getOffset())),
                  width(s.getResult())});
            return success();
          })
          .Case([&](SwigluOp s) {
            call("kiln_k_swiglu",
                 {in(s.getLhs()), in(s.getRhs()), *out, elements(s.getResult())});
            return success();
          })
          .Case([&](SiluOp s) {
            call("kiln_k_silu", {in(s.getInput()), *out, elements(s.getResult())});
            return success();
          })
          .Case([&](AddOp s) {
            call("kiln_k_add",
                 {in(s.getLhs()), in(s.getRhs()), *out, elements(s.getResult())});
            return success();
          })
          .Case([&](AllReduceOp r) {
            // In place when the memory plan gave input and result one
            // buffer; the kernel copies otherwise.
            call("kiln_k_all_reduce", {in(r.getInput()), *out,
                                       elements(r.getResult()),
                                       elemCode(r.getInput())});
            return success();
          })
          .Case([&](RecvOp r) {
            call("kiln_k_recv", {*out, rows(r.getResult()),
                                 width(r.getResult()),
                                 elemCode(r.getResult()),
                                 indexConst(r.getSource())});
            return success();
          })
          // Sequence parallelism: `n` is every row; the kernels split it
          // (kiln_rt/sequence_shard.h).
          .Case([&](ReduceScatterOp r) {
            call("kiln_k_reduce_scatter",
                 {in(r.getInput()), *out, tokenCount, width(r.getInput()),
                  elemCode(r.getInput()), indexConst(r.getMinTokens())});
            return success();
          })
          .Case([&](AllSliceOp r) {
            call("kiln_k_all_slice",
                 {in(r.getInput()), *out, tokenCount, width(r.getInput()),
                  elemCode(r.getInput()), indexConst(r.getMinTokens())});
            return success();
          })
          .Case([&](AllGatherRowsOp r) {
            if (std::optional<StringRef> wire = r.getWireQuant()) {
              // The 8-bit gather: the wire rule's code (kernel_abi.h
              // KILN_WIRE_INT8_*) and its static scale (0: dynamic).
              int64_t code = *wire == "int8_per_token"   ? 1
                             : *wire == "int8_per_block" ? 2
                                                         : 3;
              call("kiln_k_all_gather_rows_q8",
                   {in(r.getInput()), *out, tokenCount, width(r.getInput()),
                    elemCode(r.getInput()), indexConst(r.getMinTokens()),
                    indexConst(code),
                    f32Const(r.getWireScale().value_or(APFloat(0.0f)))});
              return success();
            }
            call("kiln_k_all_gather_rows",
                 {in(r.getInput()), *out, tokenCount, width(r.getInput()),
                  elemCode(r.getInput()), indexConst(r.getMinTokens())});
            return success();
          })
          .Case([&](AllGatherOp g) {
            auto in = cast<RankedTensorType>(g.getInput().getType());
            call("kiln_k_all_gather", {buffers.lookup(g.getInput()), *out,
                                       rows(g.getInput()),
                                       indexConst(in.getDimSize(1)),
                                       elemCode(g.getInput())});
            return success();
          })
          .Case([&](MulOp s) {
            call("kiln_k_mul",
                 {in(s.getLhs()), in(s.getRhs()), *out, elements(s.getResult())});
            return success();
          })
          .Case([&](LogitsOp l) -> LogicalResult {
            if (l->hasAttr(kGeneratedKernelAttr))
              return lowerGeneratedLogits(l, *out);
            auto hidden = cast<RankedTensorType>(l.getHidden().getType());
            auto weight = cast<RankedTensorType>(l.getWeight().getType());
            // The classifier of every row (the batched step: one row per
            // sequence), or of the last row only.
            Value row, count;
            if (l.getAllRows()) {
              row = in(l.getHidden());
              count = rows(l.getHidden());
            } else {
              Value last = arith::SubIOp::create(builder, loc(),
                                                 rows(l.getHidden()),
                                                 indexConst(1));
              auto rowType = MemRefType::get({1, hidden.getDimSize(1)},
                                             hidden.getElementType());
              row = plan::RowOp::create(builder, loc(), rowType,
                                        in(l.getHidden()), last);
              count = indexConst(1);
            }
            if (std::optional<StringRef> format = l.getFormat()) {
              call(l.hasQuantizedActivations() ? "kiln_k_linear_blocks_a8"
                                               : "kiln_k_linear_blocks",
                   {row, in(l.getWeight()), *out, count,
                    indexConst(hidden.getDimSize(1)),
                    indexConst(weight.getDimSize(0)),
                    indexConst(blockFormatId(*format))});
              return success();
            }
            call("kiln_k_linear",
                 {row, in(l.getWeight()), *out, count,
                  indexConst(hidden.getDimSize(1)),
                  indexConst(weight.getDimSize(0))});
            return success();
          })
          .Default([&](Operation *other) {
            return other->emitOpError()
                   << "has no lowering to the plan dialect";
          });
  if (failed(status))
    return failure();
  buffers.map(op->getResult(0), *out);
  // Rows of the batched step's sequences: kiln.last_rows and every op
  // computed from its rows (the final norm, the classifier).
  if (isa<LastRowsOp>(op) ||
      llvm::any_of(op->getOperands(),
                   [&](Value v) { return perSequence.contains(v); }))
    perSequence.insert(op->getResult(0));
  return success();
}

LogicalResult FunctionLowering::run() {
  Block &body = source.getBody().front();
  Value tokens = body.getArgument(0);
  auto tokensType = cast<RankedTensorType>(tokens.getType());
  current = nullptr;
  buffers.map(tokens,
              plan::TokensOp::create(builder, loc(),
                                     MemRefType::get(tokensType.getShape(),
                                                     tokensType.getElementType()),
                                     tokenCount)
                  .getResult());
  for (Operation &op : body)
    if (failed(lowerOp(&op)))
      return failure();
  return success();
}

void LowerToPlanPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *ctx = &getContext();
  OpBuilder builder(ctx);
  auto i64 = builder.getI64Type();

  // Weights: fixed offsets in declaration order; identical recipes share.
  llvm::MapVector<std::tuple<Attribute, Attribute, Type>, int64_t> layout;
  int64_t weightBytes = 0;
  SmallVector<WeightOp> weights(module.getOps<WeightOp>());
  for (WeightOp w : weights) {
    RankedTensorType type = w.getTensorType();
    auto key = std::make_tuple(Attribute(w.getSource()),
                               Attribute(w.getTransforms()), Type(type));
    auto [it, inserted] = layout.try_emplace(key, weightBytes);
    if (inserted) {
      // Each weight is below 2^48 bytes (kiln.weight's verifier); their sum
      // is checked too, so the offsets written to the plan cannot wrap.
      int64_t bytes = llvm::alignTo(
          type.getNumElements() *
              llvm::divideCeil(type.getElementTypeBitWidth(), 8),
          64);
      std::optional<int64_t> end = llvm::checkedAdd(weightBytes, bytes);
      if (!end || *end > (int64_t(1) << 48)) {
        w.emitOpError() << "would end the weights file past 2^48 bytes "
                           "(offset "
                        << weightBytes << " + " << bytes << " bytes)";
        return signalPassFailure();
      }
      weightBytes = *end;
    }
    builder.setInsertionPoint(w);
    plan::WeightOp::create(builder, w.getLoc(), w.getSymNameAttr(),
                           TypeAttr::get(toMemRef(type)),
                           builder.getIntegerAttr(i64, it->second));
  }

  int64_t arenaBytes = 0;
  SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
  for (func::FuncOp func : funcs) {
    if (func.isExternal())
      continue;
    builder.setInsertionPoint(func);
    auto indexType = builder.getIndexType();
    auto planned = func::FuncOp::create(
        builder, func.getLoc(), func.getSymName(),
        builder.getFunctionType({indexType, indexType}, {}));
    planned.addEntryBlock();
    if (auto arena = func->getAttrOfType<IntegerAttr>("kiln.arena_bytes")) {
      arenaBytes = std::max(arenaBytes, arena.getInt());
      planned->setAttr("plan.arena_bytes", arena);
    }
    if (auto maxTokens = func->getAttrOfType<IntegerAttr>("kiln.max_tokens"))
      planned->setAttr("plan.max_tokens", maxTokens);
    FunctionLowering lowering(func, planned);
    if (failed(lowering.run()))
      return signalPassFailure();
    func.erase();
  }
  for (WeightOp w : weights)
    w.erase();
  module->setAttr("plan.arena_bytes", builder.getIntegerAttr(i64, arenaBytes));
  module->setAttr("plan.weights_bytes", builder.getIntegerAttr(i64, weightBytes));
}

} // namespace mlir::kiln

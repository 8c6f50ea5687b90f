//===- Partition.cpp - kiln-partition: tensor-parallel shards
//--------------===//
//
// One rank's program of a tensor-parallel group (Passes.td, PartitionPass;
// Megatron-LM, Shoeybi et al. 2019, section 3): the attention heads and the
// FFN's hidden features are split across `tp` ranks. Per layer
//   column-parallel  wq, wk, wv (and their biases), w1, w3: rows of the
//                    rank's heads / hidden features (a "slice" transform on
//                    axis 0 of the weight's recipe);
//   row-parallel     wo, w2: the matching columns (axis 1), each followed
//                    by a kiln.all_reduce of the partial products;
// the attention, RoPE and the KV cache take the rank's heads. The
// classifier is vocab-parallel (the rank's rows of @output, the logits
// gathered by kiln.all_gather) when tp divides the vocabulary; the
// embedding and the norms stay whole on every rank.
//
// The slice is the last step of the recipe, in the float tensor's element
// coordinates ([out, in]). A GGUF weight kept in a GGML block format has the
// recipe [repack{part = "blocks", rows, cols}, slice{...}]: the repack stays
// first (it names the stored tensor, whole: its rows / cols are the
// source's) and the slice then keeps whole rows, or in every row a range of
// whole blocks, of the kept bytes; exact, nothing is decoded. A column shard
// must therefore start and end on a block boundary (32 elements for
// Q4_0 ... Q8_0, 256 for the K-quants), or the weight is refused. The
// declared type narrows as block weights are declared: [rows, cols /
// block_elems * block_bytes] x i8 of the shard.
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"
#include "passes/Transforms/WeightRecipe.h"

// Header-only block codec; the runtime include root is not on this
// library's path.
#include "runtime/include/kiln_rt/block_formats.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Verifier.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"

#include <limits>

namespace mlir::kiln {
#define GEN_PASS_DEF_PARTITIONPASS
#include "passes/Transforms/Passes.h.inc"

namespace {

/// Where a linear's weight sits in the Megatron split.
enum class Split { None, Columns, Rows };

/// The rank's share of one dimension: [offset, offset + size).
struct Shard {
  int64_t offset = 0, size = 0;
};

struct PartitionPass final : impl::PartitionPassBase<PartitionPass> {
  using Base::Base;
  void runOnOperation() override;

private:
  /// Rank `rank`'s shard of every layer (tp > 1).
  LogicalResult splitTensorParallel();
  /// Stage `stage`'s layers, with kiln.recv / kiln.send at its edges
  /// (pp > 1).
  LogicalResult keepPipelineStage();
  /// Sets `key` in the module's kiln.partition dictionary.
  void setPartitionEntry(StringRef key, Attribute value);

  /// The canonical role ("wq", "w2", ...) of `name` = "layers.<i>.<role>",
  /// or "" for another weight.
  static StringRef roleOf(StringRef name);
  /// The split and shard of a weight of `role` (column-parallel roles slice
  /// rows, row-parallel roles slice columns); Split::None for the others.
  std::pair<Split, Shard> shardOf(StringRef role) const;

  int64_t heads = 0, kvHeads = 0, headDim = 0, hidden = 0;
  /// vocab: the rank's rows of the classifier (size 0: kept whole).
  Shard q, kv, ffn, vocab;
  int64_t headsPerRank = 0, kvHeadsPerRank = 0;
};

/// The GGML block format of a weight kept in it (its first step a "repack"
/// of part "blocks"): format name, elements and bytes per block.
struct BlockFormat {
  StringRef name;
  int64_t elems = 0, bytes = 0;
};

} // namespace

static std::optional<BlockFormat> blockFormatOf(WeightOp w) {
  ArrayAttr transforms = w.getTransforms();
  if (transforms.empty())
    return std::nullopt;
  auto first = cast<WeightTransformAttr>(transforms[0]);
  DictionaryAttr params = first.getParams();
  auto part = params ? params.getAs<StringAttr>("part") : StringAttr();
  if (first.getKind() != "repack" || !part || part.getValue() != "blocks")
    return std::nullopt;
  StringRef name = params.getAs<StringAttr>("format").getValue();
  int64_t id = kiln_block_format_from_name(name.str().c_str());
  return BlockFormat{name, kiln_block_elems(id), kiln_block_bytes(id)};
}

/// Why `w`'s recipe cannot be split ("" when it can): quantized or fused
/// weights, and parts repacked from pre-quantized checkpoints, are refused;
/// float weights and GGML blocks kept as stored are split.
static std::string unsplittableWhy(WeightOp w) {
  for (Attribute a : w.getTransforms()) {
    auto t = cast<WeightTransformAttr>(a);
    StringRef kind = t.getKind();
    auto part =
        t.getParams() ? t.getParams().getAs<StringAttr>("part") : StringAttr();
    if (kind == "repack" && part && part.getValue() == "blocks")
      continue;
    if (kind == "repack")
      return ("weight '" + w.getSymName() +
              "' has a 'repack' step: parts repacked from a pre-quantized "
              "checkpoint into the W4A16 / W8A16 layout are not partitioned "
              "yet (GGUF Q4_0 / Q8_0 linears kept as GGML blocks are: "
              "kiln-compile --gguf-linears=blocks)")
          .str();
    if (kind == "quantize" || kind == "concat_rows")
      return ("weight '" + w.getSymName() + "' has a '" + kind +
              "' step: run kiln-partition before the quantization and "
              "fusion passes, on float weights or GGML blocks kept as "
              "stored")
          .str();
  }
  return "";
}

StringRef PartitionPass::roleOf(StringRef name) {
  if (name == "output")
    return name; // the classifier
  if (!name.consume_front("layers."))
    return "";
  auto [index, role] = name.split('.');
  int64_t layer;
  if (index.getAsInteger(10, layer) || role.contains('.'))
    return "";
  return role;
}

std::pair<Split, Shard> PartitionPass::shardOf(StringRef role) const {
  if (role == "wq" || role == "bq")
    return {Split::Columns, q};
  if (role == "wk" || role == "wv" || role == "bk" || role == "bv")
    return {Split::Columns, kv};
  if (role == "w1" || role == "w3")
    return {Split::Columns, ffn};
  if (role == "wo")
    return {Split::Rows, q};
  if (role == "w2")
    return {Split::Rows, ffn};
  if (role == "output" && vocab.size > 0)
    return {Split::Columns, vocab};
  return {Split::None, {}};
}

void PartitionPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto fail = [&](Operation *op, const Twine &why) {
    op->emitError() << "kiln-partition: " << why;
    signalPassFailure();
  };
  if (tp < 1 || rank < 0 || rank >= tp)
    return fail(module, "needs tp >= 1 and 0 <= rank < tp, got tp=" +
                            Twine(tp) + " rank=" + Twine(rank));
  if (pp < 1 || stage < 0 || stage >= pp)
    return fail(module, "needs pp >= 1 and 0 <= stage < pp, got pp=" +
                            Twine(pp) + " stage=" + Twine(stage));
  if (tp == 1 && pp == 1)
    return;
  if (module->hasAttr("kiln.partition"))
    return fail(module, "the module is already partitioned");
  Builder b(&getContext());
  module->setAttr(
      "kiln.partition",
      b.getDictionaryAttr({b.getNamedAttr("tp", b.getI64IntegerAttr(tp)),
                           b.getNamedAttr("rank", b.getI64IntegerAttr(rank)),
                           b.getNamedAttr("vocab_parallel",
                                          b.getBoolAttr(false))}));
  if (tp > 1 && failed(splitTensorParallel()))
    return signalPassFailure();
  if (pp > 1 && failed(keepPipelineStage()))
    return signalPassFailure();
  if (failed(verify(module)))
    return signalPassFailure();
}

LogicalResult PartitionPass::splitTensorParallel() {
  ModuleOp module = getOperation();
  MLIRContext *ctx = &getContext();
  auto fail = [&](Operation *op, const Twine &why) -> LogicalResult {
    op->emitError() << "kiln-partition: " << why;
    return failure();
  };
  // Already quantized or fused layers: the split needs the float weights
  // and the plain ops.
  Operation *late = nullptr;
  std::string lateWhy;
  module.walk([&](Operation *op) {
    if (late)
      return;
    if (isa<FusedOp>(op)) {
      late = op;
      lateWhy = "found a kiln.fused region: run kiln-partition before "
                "kiln-fuse";
    } else if (isa<QuantizedLinearOp>(op)) {
      late = op;
      lateWhy = "found a kiln.quantized_linear: run kiln-partition before "
                "kiln-quantize-weights (each shard is then quantized on its "
                "own)";
    } else if (auto w = dyn_cast<WeightOp>(op);
               w && w.getSymName().starts_with("layers.")) {
      lateWhy = unsplittableWhy(w);
      if (!lateWhy.empty())
        late = op;
    }
  });
  if (late)
    return fail(late, lateWhy);

  // The geometry, from the IR itself: every attention must agree on heads
  // and head size, every gate / up projection on the FFN width.
  Operation *mismatch = nullptr;
  module.walk([&](Operation *op) {
    if (auto att = dyn_cast<AttentionOp>(op)) {
      if (heads == 0) {
        heads = att.getNumHeads();
        kvHeads = att.getNumKvHeads();
        headDim = att.getHeadDim();
      } else if (heads != int64_t(att.getNumHeads()) ||
                 kvHeads != int64_t(att.getNumKvHeads()) ||
                 headDim != int64_t(att.getHeadDim())) {
        mismatch = op;
      }
    } else if (auto w = dyn_cast<WeightOp>(op)) {
      StringRef role = roleOf(w.getSymName());
      if (role != "w1" && role != "w3")
        return;
      const int64_t rows = w.getTensorType().getDimSize(0);
      if (hidden == 0)
        hidden = rows;
      else if (hidden != rows)
        mismatch = op;
    }
  });
  if (mismatch)
    return fail(mismatch, "layers of different attention or FFN shapes "
                          "cannot share one split");
  if (heads == 0 || hidden == 0)
    return fail(module, "found no kiln.attention or no FFN gate/up weight "
                        "('layers.<i>.w1' / 'w3') to split");

  // Attention heads: each rank its own query heads; KV heads split too, or
  // replicated when there are fewer of them than ranks (every query head
  // of a rank then shares one KV head).
  // The group sizes this model does split into, for the errors below.
  std::string valid;
  for (int64_t t = 1; t <= heads && t <= 64; ++t)
    if (heads % t == 0 && (kvHeads % t == 0 || t % kvHeads == 0) &&
        hidden % t == 0)
      valid += (valid.empty() ? "" : ", ") + std::to_string(t);
  const std::string hint = " (this model splits into tp = " + valid + ")";
  if (heads % tp != 0)
    return fail(module, "the model's " + Twine(heads) +
                            " attention heads do not divide among tp=" +
                            Twine(tp) + " ranks" + hint);
  headsPerRank = heads / tp;
  if (kvHeads % tp == 0) {
    kvHeadsPerRank = kvHeads / tp;
    kv = {rank * kvHeadsPerRank * headDim, kvHeadsPerRank * headDim};
  } else if (tp % kvHeads == 0) {
    kvHeadsPerRank = 1; // replicated: ranks tp / kvHeads share a KV head
    kv = {rank / (tp / kvHeads) * headDim, headDim};
  } else {
    return fail(module, "the model's " + Twine(kvHeads) +
                            " KV heads and tp=" + Twine(tp) +
                            ": one must divide the other (split or "
                            "replicate the KV heads)" + hint);
  }
  if (hidden % tp != 0)
    return fail(module, "the FFN's " + Twine(hidden) +
                            " hidden features do not divide among tp=" +
                            Twine(tp) + " ranks" + hint);
  q = {rank * headsPerRank * headDim, headsPerRank * headDim};
  ffn = {rank * (hidden / tp), hidden / tp};
  // The classifier: vocab-parallel when every kiln.logits reads @output and
  // tp divides its rows; else whole on every rank (with a remark).
  if (vocabParallel) {
    SymbolTable table(module);
    auto output = table.lookup<WeightOp>("output");
    bool onlyOutput = true;
    module.walk([&](LogitsOp l) {
      auto ref = l.getWeight().getDefiningOp<WeightRefOp>();
      onlyOutput &= ref && ref.getName() == "output";
    });
    const int64_t rows = output ? output.getTensorType().getDimSize(0) : 0;
    if (!output) {
      // No classifier weight (a module of layers only): nothing to split.
    } else if (!onlyOutput || !unsplittableWhy(output).empty())
      emitRemark(module.getLoc())
          << "kiln-partition: the classifier stays whole on every rank "
             "(a kiln.logits reads a weight other than @output, or @output "
             "cannot be split)";
    else if (rows % tp != 0)
      emitRemark(module.getLoc())
          << "kiln-partition: the classifier's " << rows
          << " vocabulary rows do not divide among tp=" << tp
          << " ranks: it stays whole on every rank";
    else
      vocab = {rank * (rows / tp), rows / tp};
  }

  // 1. Weights: append the rank's slice and narrow the declared type.
  bool failedWeight = false;
  module.walk([&](WeightOp w) {
    auto [split, shard] = shardOf(roleOf(w.getSymName()));
    if (split == Split::None || failedWeight)
      return;
    if (std::string why = unsplittableWhy(w); !why.empty()) {
      (void)fail(w, why);
      failedWeight = true;
      return;
    }
    RankedTensorType type = w.getTensorType();
    // A bias is a vector: its elements follow the rows of its linear.
    const int64_t axis = split == Split::Rows && type.getRank() == 2 ? 1 : 0;
    std::optional<BlockFormat> blocks = blockFormatOf(w);
    // GGML blocks: a column shard keeps whole blocks of every row.
    if (blocks && axis == 1 &&
        (shard.offset % blocks->elems != 0 ||
         shard.size % blocks->elems != 0)) {
      (void)fail(w, "weight '" + w.getSymName() + "' (" + blocks->name +
                  ", blocks of " + Twine(blocks->elems) +
                  ") cannot be split into columns [" + Twine(shard.offset) +
                  ", " + Twine(shard.offset + shard.size) +
                  ") at tp=" + Twine(tp) +
                  ": a shard must hold whole blocks (use a tp whose column "
                  "shards are multiples of " +
                  Twine(blocks->elems) +
                  ", or decode the blocks to float: kiln-compile "
                  "--dtype=f16 or bf16)");
      failedWeight = true;
      return;
    }
    Builder b(ctx);
    appendTransform(
        w, WeightTransformAttr::get(
               ctx, "slice",
               b.getDictionaryAttr(
                   {b.getNamedAttr("axis", b.getI64IntegerAttr(axis)),
                    b.getNamedAttr("offset", b.getI64IntegerAttr(shard.offset)),
                    b.getNamedAttr("size", b.getI64IntegerAttr(shard.size))})));
    SmallVector<int64_t> shape(type.getShape());
    shape[axis] = blocks && axis == 1
                      ? shard.size / blocks->elems * blocks->bytes
                      : shard.size;
    w.setTypeAttr(TypeAttr::get(type.clone(shape)));
  });
  if (failedWeight)
    return failure();
  SymbolTable symbols(module);
  module.walk([&](WeightRefOp ref) {
    if (auto w = symbols.lookup<WeightOp>(ref.getName()))
      ref.getResult().setType(w.getType());
  });

  // 2. The KV caches of the function signatures: the rank's KV heads.
  auto narrowCache = [&](Type t) -> Type {
    if (auto c = dyn_cast<KVCacheType>(t))
      return KVCacheType::get(ctx, c.getNumLayers(), c.getMaxSeq(),
                              kvHeadsPerRank, c.getHeadDim(),
                              c.getElementType(), c.getSummaryBlock());
    if (auto c = dyn_cast<PagedKVCacheType>(t))
      return PagedKVCacheType::get(ctx, c.getNumLayers(), kvHeadsPerRank,
                                   c.getHeadDim(), c.getElementType());
    return t;
  };
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    for (BlockArgument arg : func.getArguments())
      arg.setType(narrowCache(arg.getType()));
    func.setType(FunctionType::get(ctx, func.getBody().getArgumentTypes(),
                                   func.getFunctionType().getResults()));

    // 3. Ops in order: results take the narrowed widths; row-parallel
    // linears get their all-reduce.
    auto narrow = [](Value v, int64_t width) {
      auto t = cast<RankedTensorType>(v.getType());
      v.setType(t.clone({t.getDimSize(0), width}));
    };
    WalkResult walk = func.walk([&](Operation *op) -> WalkResult {
      if (auto lin = dyn_cast<LinearOp>(op)) {
        auto ref = lin.getWeight().getDefiningOp<WeightRefOp>();
        auto [split, shard] = ref ? shardOf(roleOf(ref.getName()))
                                  : std::pair{Split::None, Shard{}};
        if (split == Split::None)
          return WalkResult::advance();
        auto weight = cast<RankedTensorType>(lin.getWeight().getType());
        narrow(lin.getResult(), weight.getDimSize(0));
        if (split == Split::Rows) {
          OpBuilder b(ctx);
          b.setInsertionPointAfter(lin);
          auto reduce =
              AllReduceOp::create(b, lin.getLoc(), lin.getResult().getType(),
                                  lin.getResult(), b.getI64IntegerAttr(tp));
          lin.getResult().replaceAllUsesExcept(reduce.getResult(), reduce);
        }
        return WalkResult::advance();
      }
      if (isa<QuantizedLinearOp>(op)) {
        op->emitError() << "kiln-partition: run before kiln-quantize-weights "
                           "(the shards are quantized on their own)";
        return WalkResult::interrupt();
      }
      // Vocab-parallel classifier: the rank's columns of the logits, then
      // every rank's side by side.
      if (auto logits = dyn_cast<LogitsOp>(op); logits && vocab.size > 0) {
        auto whole = cast<RankedTensorType>(logits.getResult().getType());
        narrow(logits.getResult(), vocab.size);
        OpBuilder b(ctx);
        b.setInsertionPointAfter(logits);
        auto gather =
            AllGatherOp::create(b, logits.getLoc(), whole, logits.getResult(),
                                b.getI64IntegerAttr(tp));
        logits.getResult().replaceAllUsesExcept(gather.getResult(), gather);
        return WalkResult::advance();
      }
      if (auto bias = dyn_cast<AddBiasOp>(op)) {
        narrow(bias.getResult(),
               cast<RankedTensorType>(bias.getInput().getType()).getDimSize(1));
        return WalkResult::advance();
      }
      if (auto rope = dyn_cast<RopeOp>(op)) {
        const int64_t width =
            cast<RankedTensorType>(rope.getInput().getType()).getDimSize(1);
        narrow(rope.getResult(), width);
        rope.setNumHeads(width / rope.getHeadDim());
        return WalkResult::advance();
      }
      if (auto att = dyn_cast<AttentionOp>(op)) {
        if (att.getKeyMean()) {
          op->emitError() << "kiln-partition: centered keys "
                             "(kiln-center-keys) are not partitioned yet; "
                             "partition first";
          return WalkResult::interrupt();
        }
        att.setNumHeads(headsPerRank);
        att.setNumKvHeads(kvHeadsPerRank);
        narrow(att.getResult(), headsPerRank * headDim);
        return WalkResult::advance();
      }
      if (isa<SiluOp, MulOp, SwigluOp>(op)) {
        narrow(
            op->getResult(0),
            cast<RankedTensorType>(op->getOperand(0).getType()).getDimSize(1));
        return WalkResult::advance();
      }
      if (isa<FusedOp>(op)) {
        op->emitError() << "kiln-partition: run before kiln-fuse";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
  }
  setPartitionEntry("vocab_parallel", BoolAttr::get(ctx, vocab.size > 0));
  // The rank's first KV head: passes that attach per-KV-head statistics of
  // the whole model (kiln-center-keys) take the rank's range from it.
  auto i64 = IntegerType::get(ctx, 64);
  setPartitionEntry("kv_head_offset", IntegerAttr::get(i64, kv.offset / headDim));
  setPartitionEntry("model_kv_heads", IntegerAttr::get(i64, kvHeads));
  return success();
}


void PartitionPass::setPartitionEntry(StringRef key, Attribute value) {
  ModuleOp module = getOperation();
  NamedAttrList entries(
      module->getAttrOfType<DictionaryAttr>("kiln.partition"));
  entries.set(key, value);
  module->setAttr("kiln.partition",
                  entries.getDictionary(module.getContext()));
}

/// Bytes of the tensor `type` declares (i8 for GGML blocks kept as stored,
/// so their size is the stored one).
static int64_t tensorBytes(RankedTensorType type) {
  if (!type.hasStaticShape())
    return 0;
  return type.getNumElements() *
         int64_t(llvm::divideCeil(type.getElementTypeBitWidth(), 8));
}

/// The layer index of weight `name` = "layers.<i>.<role>", or -1.
static int64_t layerOfWeight(StringRef name) {
  if (!name.consume_front("layers."))
    return -1;
  int64_t layer;
  if (name.split('.').first.getAsInteger(10, layer))
    return -1;
  return layer;
}

std::vector<int64_t> planPipelineStages(ArrayRef<int64_t> layerCost,
                                        int64_t firstCost, int64_t lastCost,
                                        int64_t stages) {
  const int64_t n = int64_t(layerCost.size());
  if (stages < 1 || stages > n)
    return {};
  // prefix[i]: cost of layers [0, i).
  std::vector<int64_t> prefix(n + 1, 0);
  for (int64_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + layerCost[i];
  auto cost = [&](int64_t s, int64_t from, int64_t to) {
    return prefix[to] - prefix[from] + (s == 0 ? firstCost : 0) +
           (s == stages - 1 ? lastCost : 0);
  };
  // best[s][i]: the least largest-stage cost of layers [0, i) in stages
  // [0, s]; cut[s][i]: where stage s starts in it. The latest start wins a
  // tie, so earlier stages take the extra layer.
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(stages,
                                         std::vector<int64_t>(n + 1, kInf)),
      cut(stages, std::vector<int64_t>(n + 1, 0));
  for (int64_t i = 1; i <= n; ++i)
    best[0][i] = cost(0, 0, i);
  for (int64_t s = 1; s < stages; ++s)
    for (int64_t i = s + 1; i <= n; ++i)
      for (int64_t j = s; j < i; ++j) {
        if (best[s - 1][j] == kInf)
          continue;
        const int64_t c = std::max(best[s - 1][j], cost(s, j, i));
        if (c <= best[s][i]) {
          best[s][i] = c;
          cut[s][i] = j;
        }
      }
  std::vector<int64_t> counts(stages, 0);
  int64_t end = n;
  for (int64_t s = stages - 1; s > 0; --s) {
    counts[s] = end - cut[s][end];
    end = cut[s][end];
  }
  counts[0] = end;
  return counts;
}

LogicalResult PartitionPass::keepPipelineStage() {
  ModuleOp module = getOperation();
  MLIRContext *ctx = &getContext();
  auto fail = [&](Operation *op, const Twine &why) -> LogicalResult {
    op->emitError() << "kiln-partition: " << why;
    return failure();
  };
  if (Operation *observe = [&]() -> Operation * {
        Operation *found = nullptr;
        module.walk([&](ObserveOp op) { found = found ? found : op; });
        return found;
      }())
    return fail(observe, "calibration observers (kiln.observe) are not "
                         "split into pipeline stages: calibrate the whole "
                         "model");
  if (Operation *fused = [&]() -> Operation * {
        Operation *found = nullptr;
        module.walk([&](FusedOp op) { found = found ? found : op; });
        return found;
      }())
    return fail(fused, "found a kiln.fused region: run kiln-partition "
                       "before kiln-fuse");

  // 1. The cost of each layer and of the two ends: bytes of the weights
  // each reads per decoded token.
  SymbolTable symbols(module);
  SmallVector<int64_t> layerCost;
  for (WeightOp w : module.getOps<WeightOp>()) {
    const int64_t layer = layerOfWeight(w.getSymName());
    if (layer < 0)
      continue;
    if (layer >= int64_t(layerCost.size()))
      layerCost.resize(layer + 1, 0);
    layerCost[layer] += tensorBytes(w.getTensorType());
  }
  const int64_t numLayers = int64_t(layerCost.size());
  if (numLayers == 0)
    return fail(module, "found no layer weights ('layers.<i>.*') to split "
                        "into pipeline stages");
  if (pp > numLayers)
    return fail(module, "pp=" + Twine(pp) + " stages need at least " +
                            Twine(pp) + " layers; the model has " +
                            Twine(numLayers));
  // The last stage's final norm and classifier; the first stage's
  // embedding reads one row per token.
  int64_t lastCost = 0, firstCost = 0;
  llvm::DenseSet<StringRef> headWeights;
  module.walk([&](Operation *op) {
    Value w;
    if (auto logits = dyn_cast<LogitsOp>(op))
      w = logits.getWeight();
    else if (auto emb = dyn_cast<EmbeddingOp>(op)) {
      auto t = dyn_cast<RankedTensorType>(emb.getResult().getType());
      if (t && !t.isDynamicDim(1))
        firstCost = std::max<int64_t>(
            firstCost, t.getDimSize(1) * int64_t(llvm::divideCeil(
                                             t.getElementTypeBitWidth(), 8)));
      return;
    } else if (auto norm = dyn_cast<RmsNormOp>(op)) {
      w = norm.getWeight();
    }
    auto ref = w ? w.getDefiningOp<WeightRefOp>() : WeightRefOp();
    if (!ref || layerOfWeight(ref.getName()) >= 0 ||
        !headWeights.insert(ref.getName()).second)
      return;
    if (auto decl = symbols.lookup<WeightOp>(ref.getName()))
      lastCost += tensorBytes(decl.getTensorType());
  });
  std::vector<int64_t> counts =
      planPipelineStages(layerCost, firstCost, lastCost, pp);
  int64_t first = 0;
  for (int64_t s = 0; s < stage; ++s)
    first += counts[s];
  const int64_t last = first + counts[stage]; // exclusive
  const bool isFirst = stage == 0, isLast = stage == pp - 1;

  // 2. Each entry point: the residual stream at the stage's edges.
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    Block &body = func.getBody().front();
    // The value entering layer i (i < numLayers: the input of
    // layers.<i>.attention_norm) or the final norm (i == numLayers).
    auto residualBefore = [&](int64_t layer) -> Value {
      Value found;
      std::string name = layer < numLayers
                             ? "layers." + std::to_string(layer) +
                                   ".attention_norm"
                             : std::string("norm");
      func.walk([&](RmsNormOp norm) {
        auto ref = norm.getWeight().getDefiningOp<WeightRefOp>();
        if (!found && ref && ref.getName() == name)
          found = norm.getInput();
      });
      return found;
    };
    OpBuilder b(ctx);
    if (!isFirst) {
      Value in = residualBefore(first);
      if (!in)
        return fail(func, "cannot find where layer " + Twine(first) +
                              " starts in @" + func.getSymName() +
                              " (no kiln.rms_norm of @layers." +
                              Twine(first) + ".attention_norm)");
      b.setInsertionPointToStart(&body);
      auto recv = RecvOp::create(b, in.getLoc(), in.getType(),
                                 b.getI64IntegerAttr(stage - 1));
      in.replaceAllUsesWith(recv.getResult());
    }
    if (!isLast) {
      Value out = residualBefore(last);
      if (!out)
        return fail(func, "cannot find where layer " + Twine(last) +
                              " starts in @" + func.getSymName() +
                              " (no kiln.rms_norm of @layers." +
                              Twine(last) + ".attention_norm)");
      b.setInsertionPointAfterValue(out);
      SendOp::create(b, out.getLoc(), out, b.getI64IntegerAttr(stage + 1));
      // Nothing to return: the logits are the last stage's.
      Operation *ret = body.getTerminator();
      b.setInsertionPoint(ret);
      func::ReturnOp::create(b, ret->getLoc());
      ret->erase();
      func.setType(
          FunctionType::get(ctx, func.getFunctionType().getInputs(), {}));
    }
    // 3. The other stages' ops are now unused: erase them, last first.
    bool changed = true;
    while (changed) {
      changed = false;
      for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body))) {
        if (op.getNumResults() == 0 || !op.use_empty() ||
            isa<SendOp, RecvOp>(op))
          continue;
        op.erase();
        changed = true;
      }
    }
    // 4. The stage's attention ops index its own KV cache from 0.
    WalkResult walk = func.walk([&](AttentionOp att) -> WalkResult {
      const int64_t layer = att.getLayer();
      if (layer < first || layer >= last) {
        att.emitError() << "kiln-partition: attention of layer " << layer
                        << " left in stage " << stage << " (layers ["
                        << first << ", " << last << "))";
        return WalkResult::interrupt();
      }
      att.setLayer(layer - first);
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
    for (BlockArgument arg : body.getArguments()) {
      if (auto c = dyn_cast<KVCacheType>(arg.getType()))
        arg.setType(KVCacheType::get(ctx, last - first, c.getMaxSeq(),
                                     c.getNumKvHeads(), c.getHeadDim(),
                                     c.getElementType(),
                                     c.getSummaryBlock()));
      else if (auto c = dyn_cast<PagedKVCacheType>(arg.getType()))
        arg.setType(PagedKVCacheType::get(ctx, last - first,
                                          c.getNumKvHeads(), c.getHeadDim(),
                                          c.getElementType()));
    }
    func.setType(FunctionType::get(ctx, body.getArgumentTypes(),
                                   func.getFunctionType().getResults()));
  }

  // 5. Weights no program of this stage reads.
  llvm::DenseSet<StringRef> used;
  module.walk([&](WeightRefOp ref) { used.insert(ref.getName()); });
  for (WeightOp w : llvm::make_early_inc_range(module.getOps<WeightOp>()))
    if (!used.contains(w.getSymName()))
      w.erase();

  Builder b(ctx);
  setPartitionEntry("pp", b.getI64IntegerAttr(pp));
  setPartitionEntry("stage", b.getI64IntegerAttr(stage));
  setPartitionEntry("first_layer", b.getI64IntegerAttr(first));
  setPartitionEntry("num_layers", b.getI64IntegerAttr(last - first));
  setPartitionEntry("stage_layers", b.getDenseI64ArrayAttr(counts));
  return success();
}

} // namespace mlir::kiln

//===- SparseAttention.cpp - kiln-sparse-attention ------------------------===//
//
// Dynamic block-sparse prefill attention (Passes.td, SparseAttentionPass;
// docs/sparse-attention.md): sets `sparse = #kiln.sparse_attention<...>` on
// the prefill kiln.attention ops the sparse kernels serve. The selection
// itself happens at run time (kernel_abi.h kiln_k_attention_sparse), per
// (KV head, query block), from the keys the step actually sees.
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"

#include "dialects/Kiln/IR/PipelineStage.h"
#include "passes/Quantization/Calibration.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/Support/FileSystem.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <map>
#include <set>
#include <string>

namespace mlir::kiln {
#define GEN_PASS_DEF_SPARSEATTENTIONPASS
#include "passes/Transforms/Passes.h.inc"

namespace {

/// Head roles from a calibration file: the layers it scores (metadata
/// head_layers) and the model's streaming KV heads.
struct HeadRoles {
  int64_t layers = 0;
  std::set<std::pair<int64_t, int64_t>> streaming;
};

/// The model's streaming KV heads, as (model layer, model KV head) pairs:
/// the floor(fraction N) of the N KV heads with the lowest retrieval score
/// (a KV head: the maximum over its query heads of
/// `layers.<l>.attn_retrieval` [modelHeads]), ties to the earlier (layer,
/// head). Errors name the file and what is missing or malformed.
static FailureOr<HeadRoles>
streamingHeads(ModuleOp module, StringRef calibration, double fraction,
               int64_t modelHeads, int64_t modelKvHeads) {
  SmallString<256> path(calibration);
  if (std::error_code ec = llvm::sys::fs::make_absolute(path))
    return module.emitError() << "kiln-sparse-attention: cannot resolve '"
                              << calibration << "': " << ec.message();
  auto file = CalibrationFile::open(path);
  if (!file)
    return module.emitError() << "kiln-sparse-attention: "
                              << llvm::toString(file.takeError());
  int64_t layers = 0;
  if (file->metadata("head_layers").getAsInteger(10, layers) || layers <= 0)
    return module.emitError()
           << "kiln-sparse-attention: calibration file " << path
           << " has no head scores (metadata 'head_layers'); write it with "
              "`kiln-calibrate --heads`";
  const int64_t group = modelHeads / modelKvHeads;
  std::vector<std::pair<double, std::pair<int64_t, int64_t>>> scores;
  for (int64_t l = 0; l < layers; ++l) {
    std::string name = "layers." + std::to_string(l) + ".attn_retrieval";
    auto values = file->read(name, {modelHeads});
    if (!values)
      return module.emitError() << "kiln-sparse-attention: "
                                << llvm::toString(values.takeError());
    for (int64_t g = 0; g < modelKvHeads; ++g) {
      double best = -INFINITY;
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        float v = (*values)[size_t(h)];
        if (!std::isfinite(v) || v < 0.0f || v > 1.0f + 1e-5f)
          return module.emitError()
                 << "kiln-sparse-attention: calibration file " << path
                 << ": tensor '" << name << "' element " << h << " is " << v
                 << ", not an attention mass in [0, 1]";
        best = std::max(best, double(v));
      }
      scores.push_back({best, {l, g}});
    }
  }
  std::stable_sort(scores.begin(), scores.end(),
                   [](const auto &a, const auto &b) { return a.first < b.first; });
  HeadRoles roles;
  roles.layers = layers;
  const size_t count = size_t(std::floor(fraction * double(scores.size())));
  if (count == 0)
    module.emitWarning() << "kiln-sparse-attention: streaming=" << fraction
                         << " of the model's " << scores.size()
                         << " KV heads makes none streaming";
  for (size_t i = 0; i < count; ++i)
    roles.streaming.insert(scores[i].second);
  return roles;
}

struct SparseAttentionPass final
    : impl::SparseAttentionPassBase<SparseAttentionPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    Builder b(ctx);
    // The options as the attribute; its verifier names what is wrong.
    auto fail = [&](const Twine &why) {
      module.emitError() << "kiln-sparse-attention: " << why;
      signalPassFailure();
    };
    if (mode != "flex" && mode != "antidiag")
      return fail("mode '" + mode + "' is not flex or antidiag");
    if (mode == "flex" && stride != 0)
      return fail("stride applies to mode=antidiag (flex pools whole "
                  "blocks)");
    // antidiag's gamma is a fraction of the estimated true mass (exact
    // sink and local blocks, Horvitz-Thompson sampling elsewhere): its
    // default is 0.98, flex's 0.95 (docs/sparse-attention.md).
    if (mode == "antidiag" && !gamma.hasValue())
      gamma = 0.98;
    // The attribute holds an f32: a gamma that rounds to 0 is refused too.
    if (!(gamma >= double(FLT_MIN) && gamma <= 1.0))
      return fail("gamma " + std::to_string(double(gamma)) +
                  " is not in (0, 1]");
    if (block < 1 || block > 4096)
      return fail("block " + Twine(int64_t(block)) +
                  " is not in [1, 4096] positions");
    // antidiag samples every 16th key unless told otherwise.
    const int64_t antidiagStride =
        mode == "antidiag" ? (stride > 0 ? int64_t(stride) : 16) : 0;
    if (mode == "antidiag" && (antidiagStride < 1 || antidiagStride > block))
      return fail("stride " + Twine(antidiagStride) +
                  " is not in [1, block = " + Twine(int64_t(block)) + "]");
    if (sink < 0 || local < 1 || sink > (1 << 20) || local > (1 << 20))
      return fail("sink must be in [0, 1048576] and local in [1, 1048576] "
                  "blocks (1: the diagonal block), got sink " +
                  Twine(int64_t(sink)) + " and local " + Twine(int64_t(local)));
    if (minBudget < 0 || maxBudget < 0 || minTokens < 0)
      return fail("min-budget, max-budget and min-tokens must not be "
                  "negative");
    if (maxBudget > 0 && maxBudget < minBudget)
      return fail("max-budget " + Twine(int64_t(maxBudget)) +
                  " is below min-budget " + Twine(int64_t(minBudget)));
    if (decode != "dense" && decode != "quest")
      return fail("decode '" + decode + "' is not dense or quest");
    const bool quest = decode == "quest";
    if (!(streaming >= 0.0 && streaming < 1.0))
      return fail("streaming " + std::to_string(double(streaming)) +
                  " is not a fraction of the KV heads in [0, 1)");
    if (streaming > 0.0 && calibration.empty())
      return fail("streaming > 0 needs calibration=FILE with head scores "
                  "(kiln-calibrate --heads)");
    auto attr = SparseAttentionAttr::get(
        ctx, mode, b.getF32FloatAttr(float(gamma)), block, sink, local,
        minBudget, maxBudget, minTokens, antidiagStride, DenseI64ArrayAttr());
    // Head roles: the model's streaming KV heads, from the first prefill
    // attention's geometry (a TP rank's heads scaled to the model's).
    std::optional<std::set<std::pair<int64_t, int64_t>>> roles;
    if (streaming > 0.0) {
      AttentionOp first;
      module.walk([&](AttentionOp a) {
        if (!first && !a.isBatched())
          first = a;
      });
      if (first) {
        std::optional<KvHeadShard> shard = kvHeadShardOf(first);
        const int64_t modelKv =
            shard ? shard->modelKvHeads : first.getNumKvHeads();
        const int64_t modelHeads =
            first.getNumHeads() / first.getNumKvHeads() * modelKv;
        auto found = streamingHeads(module, calibration, streaming,
                                    modelHeads, modelKv);
        if (failed(found))
          return signalPassFailure();
        roles = std::move(found->streaming);
        // Every layer must have scores: a file of fewer layers is another
        // model's (or a stage's), never silently dense.
        const int64_t layers = found->layers;
        WalkResult walk = module.walk([&](AttentionOp a) {
          if (a.isBatched() || modelLayerOf(a, a.getLayer()) < layers)
            return WalkResult::advance();
          a.emitOpError() << "is model layer " << modelLayerOf(a, a.getLayer())
                          << ", but calibration file " << calibration
                          << " has head scores for " << layers
                          << " layers (another model's?)";
          return WalkResult::interrupt();
        });
        if (walk.wasInterrupted())
          return signalPassFailure();
      }
    }
    int64_t sparse = 0, dense = 0, streamingCount = 0;
    for (func::FuncOp func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (func->hasAttr("kiln.arena_bytes")) {
        func.emitError() << "kiln-sparse-attention: '" << func.getSymName()
                         << "' is already memory-planned; run this pass "
                            "before kiln-memory-plan";
        return signalPassFailure();
      }
      func.walk([&](AttentionOp a) {
        // Prefill: the rows are the step's token count. Decode (one row)
        // only with decode=quest. The batched step, derived later by
        // kiln-batch-step, inherits prefill's attribute.
        auto query = cast<RankedTensorType>(a.getQuery().getType());
        if (a.isBatched() || (!query.isDynamicDim(0) && !quest))
          return;
        if (a.isCacheQuantized() || a.getKeyMean() || a.getSlidingWindow()) {
          if (quest) {
            a.emitOpError() << "cannot take decode=quest: sparse attention "
                               "needs a float cache of the activation dtype "
                               "without sliding_window or key centering";
            signalPassFailure();
          }
          ++dense;
          return;
        }
        if (quest && !query.getElementType().isF32()) {
          a.emitOpError() << "decode=quest has f32 kernels only, got "
                          << query.getElementType();
          signalPassFailure();
          return;
        }
        SparseAttentionAttr opAttr = attr;
        if (roles) {
          std::optional<KvHeadShard> shard = kvHeadShardOf(a);
          const int64_t offset = shard ? shard->offset : 0;
          const int64_t layer = modelLayerOf(a, a.getLayer());
          SmallVector<int64_t> heads;
          for (int64_t g = 0; g < a.getNumKvHeads(); ++g)
            if (roles->count({layer, offset + g}))
              heads.push_back(g);
          streamingCount += int64_t(heads.size());
          if (!heads.empty())
            opAttr = SparseAttentionAttr::get(
                ctx, mode, attr.getGamma(), block, sink, local, minBudget,
                maxBudget, minTokens, antidiagStride,
                DenseI64ArrayAttr::get(ctx, heads));
        }
        // The verifier names an op whose streaming heads the kernel cannot
        // take (index 64 or more).
        if (opAttr.getStreaming() &&
            opAttr.getStreaming().asArrayRef().back() >= 64) {
          a.emitOpError() << "has streaming KV head "
                          << opAttr.getStreaming().asArrayRef().back()
                          << "; the sparse kernel takes KV heads below 64";
          signalPassFailure();
          return;
        }
        a.setSparseAttr(opAttr);
        ++sparse;
      });
    }
    // decode=quest: the contiguous caches keep the pages' key summaries.
    if (quest)
      for (func::FuncOp func : module.getOps<func::FuncOp>()) {
        if (func.isExternal())
          continue;
        Block &body = func.getBody().front();
        for (BlockArgument arg : body.getArguments())
          if (auto c = dyn_cast<KVCacheType>(arg.getType()))
            arg.setType(KVCacheType::get(ctx, c.getNumLayers(), c.getMaxSeq(),
                                         c.getNumKvHeads(), c.getHeadDim(),
                                         c.getElementType(), block));
        func.setType(FunctionType::get(ctx, body.getArgumentTypes(),
                                       func.getResultTypes()));
      }
    if (report)
      module.emitRemark() << "kiln-sparse-attention: " << sparse
                          << " attention ops sparse (gamma " << double(gamma)
                          << ", block " << int64_t(block) << "), " << dense
                          << " left dense (8-bit cache, sliding window or "
                             "key centering), " << streamingCount
                          << " streaming KV heads";
  }
};

} // namespace
} // namespace mlir::kiln

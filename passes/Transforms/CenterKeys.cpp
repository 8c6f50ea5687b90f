//===- CenterKeys.cpp - calibrated key centering for 8-bit KV caches ------===//
//
// kiln-center-keys: gives every kiln.attention that stores its keys in an
// 8-bit cache (int8 or FP8 E4M3) the calibrated mean mu of its pre-RoPE key
// (`layers.<l>.key.mean` of a kiln-calibrate file) and the RoPE parameters
// of the kiln.rope producing the key. The cache then holds `k - RoPE_t(mu)`
// and attention adds `RoPE_t(mu)` back (kernel_abi.h,
// kiln_k_attention_kv8_centered): exact in real arithmetic, while the 8-bit
// grid of each (token, kv head) no longer has to cover the keys' per-channel
// offset. The idea of handling keys per channel before RoPE is KVQuant's
// (Hooper et al. 2024, "KVQuant: Towards 10 Million Context Length LLM
// Inference with KV Cache Quantization", sections 3.1-3.2).
//
// mu becomes a kiln.weight whose source is the F32 tensor inside the
// calibration file: nothing is read or copied until the artifact is written.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kiln/IR/PipelineStage.h"
#include "passes/Quantization/Calibration.h"
#include "passes/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cmath>

namespace mlir::kiln {
#define GEN_PASS_DEF_CENTERKEYSPASS
#include "passes/Transforms/Passes.h.inc"

namespace {
struct CenterKeysPass final : impl::CenterKeysPassBase<CenterKeysPass> {
  using Base::Base;
  void runOnOperation() override;
};
} // namespace

void CenterKeysPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *ctx = &getContext();
  if (calibration.empty()) {
    module.emitError() << "kiln-center-keys needs a calibration file "
                          "(calibration=FILE, written by kiln-calibrate)";
    return signalPassFailure();
  }
  SmallString<256> path(calibration);
  if (std::error_code ec = llvm::sys::fs::make_absolute(path)) {
    module.emitError() << "kiln-center-keys: cannot resolve '" << calibration
                       << "': " << ec.message();
    return signalPassFailure();
  }
  auto file = CalibrationFile::open(path);
  if (!file) {
    module.emitError() << llvm::toString(file.takeError());
    return signalPassFailure();
  }

  SymbolTable symbols(module);
  OpBuilder builder(ctx);
  // One weight per layer, shared by the prefill and decode functions.
  llvm::StringMap<WeightOp> means;
  bool changed = false;
  WalkResult walk = module.walk([&](AttentionOp att) -> WalkResult {
    if (!att.isCacheQuantized() || att.getKeyMean())
      return WalkResult::advance();
    auto rope = att.getKey().getDefiningOp<RopeOp>();
    if (!rope) {
      att.emitError() << "kiln.attention of layer " << att.getLayer()
                      << ": the key is not produced by kiln.rope; kiln-center-keys "
                           "needs the RoPE parameters of the key";
      return WalkResult::interrupt();
    }
    if (!rope.isUnscaled()) {
      att.emitError() << "kiln.attention of layer " << att.getLayer()
                      << ": the key's kiln.rope uses scaled frequencies "
                         "(scaling or freq_factors); key centering supports "
                         "plain RoPE only (compile with --kv-centering=false)";
      return WalkResult::interrupt();
    }
    if (att.getSlidingWindow()) {
      att.emitError() << "kiln.attention of layer " << att.getLayer()
                      << ": sliding_window with an 8-bit KV cache is not "
                         "supported";
      return WalkResult::interrupt();
    }
    // A tensor-parallel rank holds KV heads [kvOffset, kvOffset +
    // num_kv_heads) and a pipeline stage renumbers its layers from 0: the
    // statistics are the whole model's, taken per model layer.
    const int64_t headDim = att.getHeadDim();
    int64_t width = att.getNumKvHeads() * headDim;
    std::optional<KvHeadShard> shard = kvHeadShardOf(att);
    int64_t first = shard ? shard->offset * headDim : 0;
    int64_t channels = shard ? shard->modelKvHeads * headDim : width;
    int64_t layer = modelLayerOf(att, att.getLayer());
    std::string name = ("layers." + Twine(att.getLayer()) + ".key_mean").str();
    WeightOp weight = means.lookup(name);
    if (!weight) {
      if (symbols.lookup(name)) {
        att.emitError() << "symbol '" << name
                          << "' already exists; cannot add the key mean";
        return WalkResult::interrupt();
      }
      std::string tensor = ("layers." + Twine(layer) + ".key.mean").str();
      bool missing = !file->has(tensor);
      auto where = file->locateChannels(tensor, channels, first, width);
      if (!where) {
        InFlightDiagnostic diag = att.emitError()
                                  << llvm::toString(where.takeError());
        if (missing)
          diag << " (files from kiln-calibrate before key taps existed lack "
                  "it: rerun kiln-calibrate, or compile with "
                  "--kv-centering=false)";
        return WalkResult::interrupt();
      }
      // A mean never exceeds the largest magnitude seen (the file's
      // `.absmax` of the same tap): refuse corrupt or foreign means rather
      // than silently degrading every key.
      std::string absmaxName = ("layers." + Twine(layer) + ".key.absmax").str();
      if (file->has(absmaxName)) {
        auto mean = file->readChannels(tensor, channels, first, width);
        auto absmax = file->readChannels(absmaxName, channels, first, width);
        if (!mean || !absmax) {
          att.emitError() << llvm::toString(mean ? absmax.takeError()
                                                 : mean.takeError());
          return WalkResult::interrupt();
        }
        for (int64_t c = 0; c < width; ++c)
          if (std::fabs((*mean)[c]) > (*absmax)[c] * (1.0f + 1e-5f)) {
            att.emitError() << "calibration file " << path << ": tensor '"
                            << tensor << "' element " << first + c << " is "
                            << (*mean)[c] << ", larger in magnitude than "
                            << absmaxName << " (" << (*absmax)[c]
                            << "): the file is corrupt";
            return WalkResult::interrupt();
          }
      }
      auto type = RankedTensorType::get({width}, builder.getF32Type());
      auto source = WeightSourceAttr::get(
          ctx, path, tensor, "f32", DenseI64ArrayAttr::get(ctx, {width}),
          where->offset, where->bytes, 0, FloatAttr(), FloatAttr());
      builder.setInsertionPointToEnd(module.getBody());
      // Next to the other weights: before the first function.
      if (auto first = module.getOps<func::FuncOp>().begin();
          first != module.getOps<func::FuncOp>().end())
        builder.setInsertionPoint(*first);
      weight = WeightOp::create(builder, att.getLoc(), name, type, source,
                                builder.getArrayAttr({}));
      symbols.insert(weight);
      means[name] = weight;
    }
    builder.setInsertionPoint(att);
    Value mu = WeightRefOp::create(builder, att.getLoc(), weight.getTensorType(),
                                   weight.getSymName());
    att.getKeyMeanMutable().assign(mu);
    att.setKeyMeanThetaAttr(rope.getThetaAttr());
    att.setKeyMeanRotaryDimAttr(rope.getRotaryDimAttr());
    changed = true;
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return signalPassFailure();
  if (!changed)
    module.emitWarning() << "kiln-center-keys: no kiln.attention with an "
                            "8-bit KV cache; nothing to center";
}

} // namespace mlir::kiln

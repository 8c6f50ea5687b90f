//===- ActivationScaling.cpp - AWQ and SmoothQuant per-channel scaling ----===//
//
// Both passes move a per-input-channel scale s between an activation and the
// weights that read it: W's columns are multiplied by s and the op producing
// the activation is made to produce x / s (its weight is multiplied by 1/s),
// so the unquantized model computes the same function. They differ in how s
// is chosen:
//   * AWQ (Lin et al. 2023, "AWQ: Activation-aware Weight Quantization",
//     section 3.2): grid search over s = absmean^alpha minimizing the 4-bit
//     quantization error of the group's outputs;
//   * SmoothQuant (Xiao et al. 2023, "SmoothQuant: Accurate and Efficient
//     Post-Training Quantization for Large Language Models", eq. 4):
//     s_j = max|X_j|^alpha / max|W_j|^(1 - alpha).
// Everything is recorded as lazy `#kiln.transform<"scale">` steps; weight
// values are read (materialized) at compile time one group at a time.
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"
#include "passes/Transforms/WeightRecipe.h"
#include "passes/Quantization/Calibration.h"
#include "passes/Quantization/QuantMath.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/MapVector.h"

#include <cmath>

namespace mlir::kiln {
#define GEN_PASS_DEF_AWQPASS
#define GEN_PASS_DEF_SMOOTHPASS
#include "passes/Transforms/Passes.h.inc"

namespace {

/// Linears sharing one input, and the op (weight) producing that input.
struct ScalingGroup {
  enum class Producer { Norm, UpRows, ValueRows };
  Producer producer = Producer::Norm;
  WeightOp producerWeight;
  SmallVector<WeightOp> linears;
  int64_t channels = 0;
  /// ValueRows: the attention's head layout (GQA ties scales across the
  /// query heads reading one KV head).
  int64_t numHeads = 0, numKvHeads = 0, headDim = 0;

  /// Channel c -> searched scale index (identity except for GQA).
  SmallVector<int64_t> tie() const {
    SmallVector<int64_t> t(channels);
    for (int64_t c = 0; c < channels; ++c) {
      if (producer != Producer::ValueRows) {
        t[c] = c;
        continue;
      }
      int64_t h = c / headDim, d = c % headDim;
      t[c] = (h / (numHeads / numKvHeads)) * headDim + d;
    }
    return t;
  }
  int64_t numTied() const {
    return producer == Producer::ValueRows ? numKvHeads * headDim : channels;
  }
  std::string describe() {
    std::string s;
    for (WeightOp w : linears)
      s += (s.empty() ? "" : ",") + w.getSymName().str();
    return s;
  }
};

using GroupKey = std::pair<int, Operation *>;

WeightOp lookupWeight(SymbolTable &symbols, Value v) {
  auto ref = v.getDefiningOp<WeightRefOp>();
  return ref ? symbols.lookup<WeightOp>(ref.getName()) : WeightOp();
}

/// True if another kiln.weight reads the same stored tensor (tied weights).
bool isTied(ModuleOp module, WeightOp w) {
  WeightSourceAttr src = w.getSource();
  for (WeightOp other : module.getOps<WeightOp>())
    if (other != w && other.getSource().getFile() == src.getFile() &&
        other.getSource().getTensor() == src.getTensor() &&
        other.getSource().getOffset() == src.getOffset() &&
        other.getSource().getStorage() == src.getStorage())
      return true;
  return false;
}

/// Every use of `w` is a weight_ref whose users all satisfy `ok`.
bool onlyUsedAs(ModuleOp module, WeightOp w,
                function_ref<bool(OpOperand &)> ok) {
  auto uses = SymbolTable::getSymbolUses(w, module);
  if (!uses)
    return false;
  for (const SymbolTable::SymbolUse &use : *uses) {
    auto ref = dyn_cast<WeightRefOp>(use.getUser());
    if (!ref)
      return false;
    for (OpOperand &operand : ref->getUses())
      if (!ok(operand))
        return false;
  }
  return true;
}

/// Finds the scaling groups of `module` in model order (first use).
SmallVector<ScalingGroup> findScalingGroups(ModuleOp module) {
  SymbolTable symbols(module);
  llvm::MapVector<GroupKey, ScalingGroup> groups;
  DenseMap<Operation *, GroupKey> groupOf; // linear weight -> group
  DenseSet<Operation *> rejected;          // linear weights in no group
  DenseSet<GroupKey> badGroups;

  module.walk([&](LinearOp linear) {
    WeightOp w = lookupWeight(symbols, linear.getWeight());
    if (!w)
      return;
    auto type = w.getTensorType();
    if (!isa<FloatType>(type.getElementType()))
      return;
    Operation *def = linear.getInput().getDefiningOp();
    ScalingGroup g;
    GroupKey key{-1, nullptr};
    if (auto norm = dyn_cast_or_null<RmsNormOp>(def)) {
      if (WeightOp nw = lookupWeight(symbols, norm.getWeight())) {
        g.producer = ScalingGroup::Producer::Norm;
        g.producerWeight = nw;
        key = {0, nw};
      }
    } else if (auto glu = dyn_cast_or_null<SwigluOp>(def)) {
      if (auto up = glu.getRhs().getDefiningOp<LinearOp>())
        if (WeightOp uw = lookupWeight(symbols, up.getWeight())) {
          g.producer = ScalingGroup::Producer::UpRows;
          g.producerWeight = uw;
          key = {1, uw};
        }
    } else if (auto att = dyn_cast_or_null<AttentionOp>(def)) {
      if (auto v = att.getValue().getDefiningOp<LinearOp>())
        if (WeightOp vw = lookupWeight(symbols, v.getWeight())) {
          g.producer = ScalingGroup::Producer::ValueRows;
          g.producerWeight = vw;
          g.numHeads = att.getNumHeads();
          g.numKvHeads = att.getNumKvHeads();
          g.headDim = att.getHeadDim();
          key = {2, vw};
        }
    }
    if (!key.second) {
      rejected.insert(w);
      return;
    }
    auto [it, inserted] = groupOf.try_emplace(w, key);
    if (!inserted && it->second != key) {
      // One weight read from two different inputs: cannot be scaled.
      badGroups.insert(it->second);
      badGroups.insert(key);
    }
    g.channels = type.getDimSize(1);
    auto [git, ginserted] = groups.try_emplace(key, g);
    if (!llvm::is_contained(git->second.linears, w))
      git->second.linears.push_back(w);
    if (git->second.channels != g.channels)
      badGroups.insert(key);
  });

  SmallVector<ScalingGroup> result;
  for (auto &[key, g] : groups) {
    if (badGroups.contains(key))
      continue;
    bool ok = !isTied(module, g.producerWeight);
    for (WeightOp w : g.linears)
      ok = ok && !rejected.contains(w) && !isTied(module, w) &&
           g.producerWeight != w;
    auto inGroup = [&](Operation *op) {
      auto lin = dyn_cast<LinearOp>(op);
      if (!lin)
        return false;
      WeightOp w = lookupWeight(symbols, lin.getWeight());
      return w && llvm::is_contained(g.linears, w);
    };
    // The producer's output may feed only this group's linears, so scaling
    // it by 1/s changes nothing else.
    ok = ok && onlyUsedAs(module, g.producerWeight, [&](OpOperand &use) {
      Operation *user = use.getOwner();
      switch (g.producer) {
      case ScalingGroup::Producer::Norm:
        return isa<RmsNormOp>(user) && use.getOperandNumber() == 1 &&
               llvm::all_of(user->getUsers(), inGroup);
      case ScalingGroup::Producer::UpRows:
        return isa<LinearOp>(user) && use.getOperandNumber() == 1 &&
               llvm::all_of(user->getUses(), [&](OpOperand &u) {
                 return isa<SwigluOp>(u.getOwner()) &&
                        u.getOperandNumber() == 1 &&
                        llvm::all_of(u.getOwner()->getUsers(), inGroup);
               });
      case ScalingGroup::Producer::ValueRows:
        return isa<LinearOp>(user) && use.getOperandNumber() == 1 &&
               llvm::all_of(user->getUses(), [&](OpOperand &u) {
                 auto att = dyn_cast<AttentionOp>(u.getOwner());
                 return att && u.get() == att.getValue() &&
                        u.get() != att.getQuery() && u.get() != att.getKey() &&
                        att.getNumHeads() == g.numHeads &&
                        att.getNumKvHeads() == g.numKvHeads &&
                        att.getHeadDim() == g.headDim &&
                        llvm::all_of(att->getUsers(), inGroup);
               });
      }
      return false;
    });
    if (g.producer == ScalingGroup::Producer::ValueRows)
      ok = ok && g.numKvHeads > 0 && g.numHeads % g.numKvHeads == 0 &&
           g.channels == g.numHeads * g.headDim &&
           g.producerWeight.getTensorType().getDimSize(0) ==
               g.numKvHeads * g.headDim;
    else
      ok = ok && g.producerWeight.getTensorType().getDimSize(0) == g.channels;
    if (ok)
      result.push_back(g);
  }
  return result;
}

/// The calibration statistics of the tap feeding `g` (every weight of the
/// group must name the same tap).
struct TapStats {
  std::string tap;
  std::vector<float> absmax, absmean;
  std::vector<double> hessian;
};

FailureOr<TapStats> readTap(const CalibrationFile &calib, ScalingGroup &g,
                            bool needHessian) {
  TapStats t;
  for (WeightOp w : g.linears) {
    llvm::Expected<std::string> tap = calib.tapOf(w.getSymName());
    if (!tap)
      return w.emitError() << llvm::toString(tap.takeError());
    if (!t.tap.empty() && *tap != t.tap)
      return w.emitError() << "calibration file " << calib.path()
                           << ": weight '" << w.getSymName() << "' reads tap '"
                           << *tap << "' but '" << g.linears.front().getSymName()
                           << "', which shares its input, reads '" << t.tap
                           << "'";
    t.tap = *tap;
  }
  int64_t c = g.channels;
  auto fail = [&](llvm::Error e) {
    return g.linears.front().emitError() << llvm::toString(std::move(e));
  };
  // A row-parallel shard (wo, w2 under tensor parallelism) reads its own
  // columns of the whole model's statistics.
  InputColumns cols = inputColumnsOf(g.linears.front());
  for (WeightOp w : g.linears) {
    InputColumns other = inputColumnsOf(w);
    if (other.offset != cols.offset || other.full != cols.full)
      return w.emitError() << "weight '" << w.getSymName()
                           << "' keeps input columns [" << other.offset
                           << ", " << other.offset + other.size << ") but '"
                           << g.linears.front().getSymName()
                           << "', which shares its input, keeps ["
                           << cols.offset << ", " << cols.offset + cols.size
                           << ")";
  }
  if (cols.size != c)
    return g.linears.front().emitError()
           << "weight '" << g.linears.front().getSymName() << "' has " << c
           << " input columns but its recipe keeps " << cols.size;
  auto absmax = calib.readChannels(t.tap + ".absmax", cols.full, cols.offset, c);
  if (!absmax)
    return fail(absmax.takeError());
  auto absmean =
      calib.readChannels(t.tap + ".absmean", cols.full, cols.offset, c);
  if (!absmean)
    return fail(absmean.takeError());
  t.absmax = std::move(*absmax);
  t.absmean = std::move(*absmean);
  if (needHessian) {
    auto h = calib.readBlock(t.tap + ".hessian", cols.full, cols.offset, c);
    if (!h)
      return fail(h.takeError());
    t.hessian.assign(h->begin(), h->end());
  }
  return t;
}

/// Appends W[:, c] *= s[c] to the group's weights and 1/s to the producer.
void foldScales(ScalingGroup &g, ArrayRef<float> s) {
  MLIRContext *ctx = g.producerWeight.getContext();
  for (WeightOp w : g.linears)
    appendTransform(w, makeScaleTransform(ctx, /*axis=*/1, s));
  SmallVector<int64_t> tie = g.tie();
  std::vector<float> inv(g.numTied());
  for (int64_t c = 0; c < g.channels; ++c)
    inv[tie[c]] = 1.0f / s[c];
  appendTransform(g.producerWeight, makeScaleTransform(ctx, /*axis=*/0, inv));
}

FailureOr<CalibrationFile> openCalibration(ModuleOp module, StringRef pass,
                                           StringRef path) {
  if (path.empty())
    return module.emitError()
           << pass << " needs calibration=FILE (create one with "
                      "`kiln-calibrate MODEL -o FILE`)";
  llvm::Expected<CalibrationFile> calib = CalibrationFile::open(path);
  if (!calib)
    return module.emitError() << llvm::toString(calib.takeError());
  return std::move(*calib);
}

struct AwqPass final : impl::AwqPassBase<AwqPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (groupSize <= 0 || groupSize % 2 != 0) {
      module.emitError() << "kiln-awq: unsupported group size "
                         << static_cast<int64_t>(groupSize)
                         << " (expected a positive even number, e.g. 32, 64 "
                            "or 128)";
      return signalPassFailure();
    }
    if (grid < 1 || grid > 1000) {
      module.emitError() << "kiln-awq: grid must be in [1, 1000], got "
                         << static_cast<int64_t>(grid);
      return signalPassFailure();
    }
    FailureOr<CalibrationFile> calib =
        openCalibration(module, "kiln-awq", calibration);
    if (failed(calib))
      return signalPassFailure();
    for (ScalingGroup &g : findScalingGroups(module)) {
      FailureOr<TapStats> stats = readTap(*calib, g, true);
      if (failed(stats))
        return signalPassFailure();
      std::vector<std::vector<float>> values;
      SmallVector<AwqWeight> weights;
      // Every row of a column-parallel shard: the search sees the whole
      // model's weights, so every rank folds the same scales into the norm
      // it shares with the others (sequence parallelism runs that norm on
      // a shard of the tokens and gathers the rows).
      for (WeightOp w : g.linears) {
        FailureOr<std::vector<float>> v = materializeWholeRows(w);
        if (failed(v))
          return signalPassFailure();
        values.push_back(std::move(*v));
      }
      for (const std::vector<float> &v : values)
        weights.push_back({v, int64_t(v.size()) / g.channels});
      SmallVector<int64_t> tie = g.tie();
      AwqResult r = searchAwqScales(weights, g.channels, stats->hessian,
                                    stats->absmean, tie, g.numTied(),
                                    groupSize, grid);
      if (report)
        g.linears.front().emitRemark()
            << "kiln-awq: " << g.describe() << " (tap " << stats->tap
            << "): alpha " << r.alpha << ", output error " << r.loss
            << " (RTN " << r.rtnLoss << ")";
      foldScales(g, r.scales);
    }
  }
};

struct SmoothPass final : impl::SmoothPassBase<SmoothPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!(alpha >= 0.0 && alpha <= 1.0)) {
      module.emitError() << "kiln-smooth: alpha must be in [0, 1], got "
                         << static_cast<double>(alpha);
      return signalPassFailure();
    }
    FailureOr<CalibrationFile> calib =
        openCalibration(module, "kiln-smooth", calibration);
    if (failed(calib))
      return signalPassFailure();
    for (ScalingGroup &g : findScalingGroups(module)) {
      FailureOr<TapStats> stats = readTap(*calib, g, false);
      if (failed(stats))
        return signalPassFailure();
      SmallVector<int64_t> tie = g.tie();
      std::vector<double> xmax(g.numTied(), 0.0), wmax(g.numTied(), 0.0);
      for (int64_t c = 0; c < g.channels; ++c)
        xmax[tie[c]] = std::max<double>(xmax[tie[c]], stats->absmax[c]);
      // max |W_j| over every row of the model (a column-parallel shard's
      // too): the same s on every rank, so the norm weight that s folds
      // into stays replicated (sequence parallelism gathers its rows).
      for (WeightOp w : g.linears) {
        FailureOr<std::vector<float>> v = materializeWholeRows(w);
        if (failed(v))
          return signalPassFailure();
        int64_t rows = int64_t(v->size()) / g.channels;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < g.channels; ++c)
            wmax[tie[c]] = std::max<double>(
                wmax[tie[c]], std::fabs((*v)[r * g.channels + c]));
      }
      std::vector<float> s(g.channels);
      for (int64_t c = 0; c < g.channels; ++c) {
        double x = xmax[tie[c]], wm = std::max(wmax[tie[c]], 1e-5);
        double v = x > 0.0 ? std::pow(x, static_cast<double>(alpha)) /
                                 std::pow(wm, 1.0 - alpha)
                           : 1.0;
        s[c] = static_cast<float>(std::max(v, 1e-5));
      }
      if (report)
        g.linears.front().emitRemark()
            << "kiln-smooth: " << g.describe() << " (tap " << stats->tap
            << "): alpha " << static_cast<double>(alpha);
      foldScales(g, s);
    }
  }
};

} // namespace
} // namespace mlir::kiln

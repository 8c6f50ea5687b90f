//===- InsertObservers.cpp - observe linear-layer inputs -------*- C++ -*-===//
//
// Calibration support: every activation that feeds a model-weight
// kiln.linear gets one kiln.observe, named after the weights it feeds, and
// the module records which tap feeds which weight (the "input:<W>" metadata
// of the calibration file, docs/quantization.md). The pre-RoPE key of every
// kiln.attention (the input of the kiln.rope giving its `key`) is observed
// too, as tap `layers.<layer>.key`, for the key means of key centering;
// with `attention`, each attention's query and key after RoPE too
// (`layers.<layer>.attn_q` / `attn_k`), for the head scores.
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_INSERTOBSERVERSPASS
#include "passes/Transforms/Passes.h.inc"

namespace {
struct InsertObserversPass final
    : impl::InsertObserversPassBase<InsertObserversPass> {
  using Base::Base;
  void runOnOperation() override;
};
} // namespace

/// The tap feeding weight `weight`: the Llama names of the calibration file
/// contract for `layers.<i>.{wq,wk,wv,wo,w1,w2,w3}`, `<weight>.input`
/// otherwise.
static std::string tapForWeight(StringRef weight) {
  StringRef layer, proj;
  if (weight.starts_with("layers.")) {
    size_t dot = weight.find('.', strlen("layers."));
    if (dot != StringRef::npos) {
      StringRef index = weight.slice(strlen("layers."), dot);
      if (!index.empty() && llvm::all_of(index, llvm::isDigit)) {
        layer = weight.take_front(dot);
        proj = weight.drop_front(dot + 1);
      }
    }
  }
  StringRef suffix = llvm::StringSwitch<StringRef>(proj)
                         .Cases({"wq", "wk", "wv"}, "attn_in")
                         .Case("wo", "attn_out")
                         .Cases({"w1", "w3"}, "ffn_in")
                         .Case("w2", "ffn_down_in")
                         .Default("");
  if (!layer.empty() && !suffix.empty())
    return (layer + "." + suffix).str();
  return (weight + ".input").str();
}

void InsertObserversPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *ctx = &getContext();
  OpBuilder builder(ctx);

  // Taps in order of first appearance, starting from an earlier run's.
  llvm::SetVector<StringRef> taps;
  llvm::MapVector<StringRef, StringRef> inputs;
  if (auto old = module->getAttrOfType<ArrayAttr>("kiln.observe_taps"))
    for (auto s : old.getAsRange<StringAttr>())
      taps.insert(s.getValue());
  if (auto old = module->getAttrOfType<DictionaryAttr>("kiln.observe_inputs"))
    for (NamedAttribute entry : old)
      if (auto s = dyn_cast<StringAttr>(entry.getValue()))
        inputs[entry.getName().getValue()] = s.getValue();

  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    // Tap of each observed value, and the value each tap observes, in this
    // function (existing observers first).
    DenseMap<Value, StringAttr> tapOf;
    llvm::StringMap<Value> valueOf;
    auto claim = [&](Value v, StringAttr tap, Operation *at) -> LogicalResult {
      auto [it, inserted] = valueOf.try_emplace(tap.getValue(), v);
      if (!inserted && it->second != v)
        return at->emitOpError()
               << "would observe a second activation as tap '" << tap.getValue()
               << "' in '" << func.getSymName()
               << "' (tap names must be unique per function)";
      tapOf[v] = tap;
      taps.insert(tap.getValue());
      return success();
    };
    // The pre-RoPE key of `attention` (the input of the kiln.rope giving its
    // key; nothing without one) as tap "layers.<layer>.key". Not a linear
    // input: it gets no kiln.observe_inputs entry.
    auto observeKey = [&](AttentionOp attention) -> LogicalResult {
      auto rope = attention.getKey().getDefiningOp<RopeOp>();
      if (!rope)
        return success();
      Value key = rope.getInput();
      StringAttr want = builder.getStringAttr(
          "layers." + Twine(attention.getLayer()) + ".key");
      if (StringAttr tap = tapOf.lookup(key)) {
        if (tap == want)
          return success();
        return attention.emitOpError()
               << "pre-RoPE key is already observed as tap '" << tap.getValue()
               << "' in '" << func.getSymName() << "'; key taps must be named '"
               << want.getValue() << "'";
      }
      auto type = cast<RankedTensorType>(key.getType());
      if (!type.getElementType().isF32())
        return rope.emitOpError()
               << "input (the pre-RoPE key of layer " << attention.getLayer()
               << ") has element type " << type.getElementType()
               << "; calibration observes f32 activations (compile with "
                  "--dtype=f32)";
      if (failed(claim(key, want, attention)))
        return failure();
      builder.setInsertionPoint(rope);
      ObserveOp::create(builder, rope.getLoc(), key, want);
      return success();
    };
    WalkResult walk = func.walk([&](Operation *op) {
      if (auto observe = dyn_cast<ObserveOp>(op)) {
        if (failed(claim(observe.getInput(), observe.getTapAttr(), op)))
          return WalkResult::interrupt();
        return WalkResult::advance();
      }
      if (auto attention = dyn_cast<AttentionOp>(op)) {
        if (failed(observeKey(attention)))
          return WalkResult::interrupt();
        if (this->attention && !attention.isBatched())
          for (auto [value, suffix] :
               {std::pair<Value, StringRef>(attention.getQuery(), "attn_q"),
                {attention.getKey(), "attn_k"}}) {
            StringAttr want = builder.getStringAttr(
                "layers." + Twine(attention.getLayer()) + "." + suffix);
            if (tapOf.lookup(value) == want)
              continue;
            if (!cast<RankedTensorType>(value.getType())
                     .getElementType()
                     .isF32()) {
              attention.emitOpError()
                  << suffix << " is not f32; calibration observes f32 "
                  << "activations (compile with --dtype=f32)";
              return WalkResult::interrupt();
            }
            if (failed(claim(value, want, attention)))
              return WalkResult::interrupt();
            builder.setInsertionPoint(attention);
            ObserveOp::create(builder, attention.getLoc(), value, want);
          }
        return WalkResult::advance();
      }
      auto linear = dyn_cast<LinearOp>(op);
      if (!linear)
        return WalkResult::advance();
      auto ref = linear.getWeight().getDefiningOp<WeightRefOp>();
      if (!ref)
        return WalkResult::advance();
      Value input = linear.getInput();
      StringRef weight = ref.getName();
      StringAttr tap = tapOf.lookup(input);
      if (!tap) {
        auto type = cast<RankedTensorType>(input.getType());
        if (!type.getElementType().isF32()) {
          linear.emitOpError()
              << "input has element type " << type.getElementType()
              << "; calibration observes f32 activations (compile with "
                 "--dtype=f32)";
          return WalkResult::interrupt();
        }
        tap = builder.getStringAttr(tapForWeight(weight));
        if (failed(claim(input, tap, op)))
          return WalkResult::interrupt();
        builder.setInsertionPoint(linear);
        ObserveOp::create(builder, linear.getLoc(), input, tap);
      }
      auto [it, inserted] = inputs.try_emplace(weight, tap.getValue());
      if (!inserted && it->second != tap.getValue()) {
        linear.emitOpError() << "weight '" << weight << "' is fed by tap '"
                             << tap.getValue() << "' in '" << func.getSymName()
                             << "' but by tap '" << it->second << "' elsewhere";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();
  }

  SmallVector<Attribute> tapAttrs;
  for (StringRef t : taps)
    tapAttrs.push_back(builder.getStringAttr(t));
  SmallVector<NamedAttribute> inputAttrs;
  for (auto &[weight, tap] : inputs)
    inputAttrs.push_back(
        builder.getNamedAttr(weight, builder.getStringAttr(tap)));
  module->setAttr("kiln.observe_taps", builder.getArrayAttr(tapAttrs));
  module->setAttr("kiln.observe_inputs", builder.getDictionaryAttr(inputAttrs));
}

} // namespace mlir::kiln

//===- Fuse.cpp - kiln-fuse: fused regions for generated kernels ----------===//
//
// Two steps. Horizontal fusion rewrites the graph: linears sharing an input
// become one linear over a concat_rows weight plus kiln.slice_columns.
// Region formation then groups ops around each linear (prologue norm,
// slices, elementwise epilogue) or along elementwise chains and outlines
// each group into a kiln.fused op, which codegen instantiates as one
// kernel (docs/fusion.md).
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"

#include <map>

namespace mlir::kiln {
#define GEN_PASS_DEF_FUSEPASS
#include "passes/Transforms/Passes.h.inc"

namespace {
/// Which fusion families run.
struct Families {
  bool horizontal = false, prologue = false, epilogue = false,
       elementwise = false;
};

struct FusePass final : impl::FusePassBase<FusePass> {
  using Base::Base;
  void runOnOperation() override;
};

/// Ops of one future kiln.fused region, and why they were grouped.
struct Group {
  SmallVector<Operation *> ops; ///< in block order once sorted
  SmallVector<StringRef> families;
};
} // namespace

static bool hasF32Result(Operation *op) {
  return op->getNumResults() == 1 &&
         cast<RankedTensorType>(op->getResult(0).getType())
             .getElementType()
             .isF32();
}

/// A linear the generated kernels handle: kiln.linear (float or block
/// weights) or weight-only kiln.quantized_linear, f32 in and out.
static bool isFusableLinear(Operation *op) {
  if (auto q = dyn_cast<QuantizedLinearOp>(op))
    if (q.hasQuantizedActivations())
      return false;
  return isa<LinearOp, QuantizedLinearOp>(op) && hasF32Result(op) &&
         cast<RankedTensorType>(op->getOperand(0).getType())
             .getElementType()
             .isF32();
}

//===----------------------------------------------------------------------===//
// Horizontal fusion
//===----------------------------------------------------------------------===//

/// The kiln.weight a value references, if it is a kiln.weight_ref of one.
static WeightOp weightOf(Value v, SymbolTable &symbols) {
  auto ref = v.getDefiningOp<WeightRefOp>();
  return ref ? symbols.lookup<WeightOp>(ref.getName()) : WeightOp();
}

/// The weight operands of a fusable linear, in the order the ops take them
/// (weight; or qweight, scales[, zero_points]).
static SmallVector<Value> weightOperands(Operation *op) {
  if (auto l = dyn_cast<LinearOp>(op))
    return {l.getWeight()};
  auto q = cast<QuantizedLinearOp>(op);
  SmallVector<Value> w = {q.getQweight(), q.getScales()};
  if (q.getZeroPoints())
    w.push_back(q.getZeroPoints());
  return w;
}

/// What two linears must share to be concatenated: op kind, format and
/// activation quantization or bits / group size, and the element types of
/// every weight operand.
static std::string horizontalKey(Operation *op) {
  std::string key;
  llvm::raw_string_ostream os(key);
  os << op->getName().getStringRef();
  if (auto l = dyn_cast<LinearOp>(op))
    os << '|' << l.getFormat().value_or("") << '|'
       << l.getActQuant().value_or("");
  if (auto q = dyn_cast<QuantizedLinearOp>(op))
    os << '|' << q.getBits() << '|' << q.getGroupSize();
  // Weights: the element type and every dimension but the rows (the
  // output features, which the concatenation adds up).
  for (Value w : weightOperands(op)) {
    auto t = cast<RankedTensorType>(w.getType());
    os << '|' << t.getElementType();
    for (int64_t d : t.getShape().drop_front())
      os << 'x' << d;
  }
  os << '|' << cast<RankedTensorType>(op->getResult(0).getType())
                   .getElementType();
  return key;
}

/// Name of the concatenation of `names`: the first in full, then each
/// other without the prefix it shares with the first ("layers.0.wq+wk+wv").
static std::string concatName(ArrayRef<StringRef> names) {
  std::string out = names.front().str();
  for (StringRef n : names.drop_front()) {
    size_t common = 0;
    while (common < n.size() && common < names.front().size() &&
           n[common] == names.front()[common])
      ++common;
    // Cut at a '.' so the suffix is a whole name component.
    size_t cut = n.substr(0, common).rfind('.');
    out += "+" + n.substr(cut == StringRef::npos ? 0 : cut + 1).str();
  }
  return out;
}

/// The weight whose rows are those of `parts` in order: the first part's
/// source and transforms followed by a concat_rows step with the others.
/// Reuses a weight made earlier for the same parts (prefill and decode).
static WeightOp concatWeights(ArrayRef<WeightOp> parts, SymbolTable &symbols,
                              OpBuilder &builder) {
  SmallVector<StringRef> names;
  for (WeightOp w : parts)
    names.push_back(w.getSymName());
  std::string name = concatName(names);
  if (auto existing = symbols.lookup<WeightOp>(name))
    return existing;
  MLIRContext *ctx = builder.getContext();
  WeightOp front = parts.front();
  SmallVector<Attribute> rest;
  int64_t rows = 0;
  for (WeightOp w : parts) {
    rows += w.getTensorType().getDimSize(0);
    if (w == front)
      continue;
    rest.push_back(builder.getDictionaryAttr(
        {builder.getNamedAttr("type", TypeAttr::get(w.getTensorType())),
         builder.getNamedAttr("source", w.getSource()),
         builder.getNamedAttr("transforms", w.getTransforms())}));
  }
  SmallVector<Attribute> transforms(front.getTransforms().begin(),
                                    front.getTransforms().end());
  transforms.push_back(WeightTransformAttr::get(
      ctx, "concat_rows",
      builder.getDictionaryAttr(
          builder.getNamedAttr("parts", builder.getArrayAttr(rest)))));
  RankedTensorType first = front.getTensorType();
  SmallVector<int64_t> shape(first.getShape());
  shape[0] = rows;
  OpBuilder::InsertionGuard guard(builder);
  WeightOp back = parts.back();
  builder.setInsertionPointAfter(back);
  auto weight = WeightOp::create(
      builder, front.getLoc(), builder.getStringAttr(name),
      TypeAttr::get(RankedTensorType::get(shape, first.getElementType())),
      front.getSource(), builder.getArrayAttr(transforms));
  symbols.insert(weight);
  return weight;
}

/// Replaces `linears` (same input, same horizontalKey, block order) by one
/// linear over concatenated weights and a slice_columns per former result.
/// Returns the new linear, or null when a weight is not a kiln.weight.
static Operation *fuseHorizontally(ArrayRef<Operation *> linears,
                                   SymbolTable &symbols) {
  Operation *first = linears.front();
  size_t numWeights = weightOperands(first).size();
  SmallVector<SmallVector<WeightOp>> parts(numWeights);
  for (Operation *l : linears) {
    SmallVector<Value> ws = weightOperands(l);
    for (size_t i = 0; i < numWeights; ++i) {
      WeightOp w = weightOf(ws[i], symbols);
      // Already a concatenation: leave it (the writer's recipe is flat).
      if (!w || llvm::any_of(w.getTransforms(), [](Attribute a) {
            return cast<WeightTransformAttr>(a).getKind() == "concat_rows";
          }))
        return nullptr;
      parts[i].push_back(w);
    }
  }
  OpBuilder builder(first);
  Location loc = builder.getFusedLoc(llvm::map_to_vector(
      linears, [](Operation *op) { return op->getLoc(); }));
  SmallVector<Value> refs;
  for (ArrayRef<WeightOp> ws : parts) {
    WeightOp fused = concatWeights(ws, symbols, builder);
    refs.push_back(WeightRefOp::create(builder, loc, fused.getTensorType(),
                                       fused.getSymName()));
  }
  auto firstType = cast<RankedTensorType>(first->getResult(0).getType());
  int64_t width = 0;
  for (Operation *l : linears)
    width += cast<RankedTensorType>(l->getResult(0).getType()).getDimSize(1);
  auto resultType = RankedTensorType::get({firstType.getDimSize(0), width},
                                          firstType.getElementType());
  Value input = first->getOperand(0);
  Operation *fused;
  if (auto l = dyn_cast<LinearOp>(first)) {
    fused = LinearOp::create(builder, loc, resultType, input, refs[0],
                             l.getFormatAttr(), l.getActQuantAttr());
  } else {
    auto q = cast<QuantizedLinearOp>(first);
    fused = QuantizedLinearOp::create(
        builder, loc, resultType, input, refs[0], refs[1],
        refs.size() > 2 ? refs[2] : Value(), q.getBitsAttr(),
        q.getGroupSizeAttr(), q.getActQuantAttr(), q.getActScaleAttr());
  }
  int64_t offset = 0;
  for (Operation *l : linears) {
    auto type = cast<RankedTensorType>(l->getResult(0).getType());
    auto slice = SliceColumnsOp::create(builder, l->getLoc(), type,
                                        fused->getResult(0),
                                        builder.getI64IntegerAttr(offset));
    offset += type.getDimSize(1);
    l->getResult(0).replaceAllUsesWith(slice.getResult());
  }
  for (Operation *l : linears) {
    SmallVector<Value> ws = weightOperands(l);
    l->erase();
    for (Value w : ws)
      if (w.use_empty())
        w.getDefiningOp()->erase();
  }
  return fused;
}

/// Horizontal fusion in `func`; returns the new linears.
static SmallVector<Operation *> runHorizontal(func::FuncOp func,
                                              SymbolTable &symbols) {
  // Fusable linears by input and horizontalKey, in block order.
  llvm::MapVector<std::string, SmallVector<Operation *>,
                  std::map<std::string, unsigned>>
      groups;
  for (Operation &op : func.getBody().front())
    if (isFusableLinear(&op))
      groups[std::to_string(reinterpret_cast<uintptr_t>(
                 op.getOperand(0).getAsOpaquePointer())) +
             "|" + horizontalKey(&op)]
          .push_back(&op);
  SmallVector<Operation *> fused;
  for (auto &[key, linears] : groups)
    if (linears.size() >= 2)
      if (Operation *l = fuseHorizontally(linears, symbols))
        fused.push_back(l);
  return fused;
}

//===----------------------------------------------------------------------===//
// Region formation
//===----------------------------------------------------------------------===//

/// True when `v` can be an operand of a region whose first op is `start`:
/// a block argument, or defined before `start` in its block. Weight
/// references defined later are recreated before `start` by hoistRefs.
static bool availableAt(Value v, Operation *start) {
  Operation *def = v.getDefiningOp();
  if (!def || isa<WeightRefOp>(def))
    return true;
  return def->getBlock() == start->getBlock() && def->isBeforeInBlock(start);
}

/// True for a kiln.rope the generated kernels apply as an epilogue: plain
/// RoPE (no scaling, no frequency factors) of a column slice of the group's
/// linear, whose head_dim, rotary_dim and theta match any other rope of the
/// group (they share one cos/sin table).
static bool isRopeEpilogue(Operation *op, const Group &group) {
  auto rope = dyn_cast<RopeOp>(op);
  if (!rope || !rope.isUnscaled() || rope.isBatched() ||
      !isa<BlockArgument>(rope.getPosition()))
    return false;
  auto slice = rope.getInput().getDefiningOp<SliceColumnsOp>();
  if (!slice || !llvm::is_contained(group.ops, slice.getOperation()) ||
      slice.getOffset() % 2 != 0)
    return false;
  for (Operation *other : group.ops)
    if (auto r = dyn_cast<RopeOp>(other))
      if (r.getHeadDim() != rope.getHeadDim() ||
          r.getRotaryDim() != rope.getRotaryDim() ||
          r.getTheta() != rope.getTheta())
        return false;
  return rope.getHeadDim() % 2 == 0;
}

/// Adds to `group` the elementwise users of its values that can join it
/// (every operand in the group or available at `start`, and each group
/// value they read used by them alone), until none can.
static void growEpilogue(Group &group, Operation *start,
                         const DenseSet<Operation *> &taken,
                         bool mayCombine) {
  SmallPtrSet<Operation *, 8> members(group.ops.begin(), group.ops.end());
  bool grew = true;
  while (grew) {
    grew = false;
    for (Operation *op : SmallVector<Operation *>(group.ops)) {
      for (Operation *user : op->getResult(0).getUsers()) {
        if (members.contains(user) || taken.contains(user) ||
            !(isFusableElementwise(user) || isRopeEpilogue(user, group)) ||
            !hasF32Result(user))
          continue;
        bool ok = llvm::all_of(user->getOperands(), [&](Value v) {
          Operation *def = v.getDefiningOp();
          if (def && members.contains(def))
            return v.hasOneUse() ||
                   llvm::all_of(v.getUsers(), [&](Operation *u) {
                     return u == user;
                   });
          return availableAt(v, start);
        });
        // Combining two group values (swiglu of the gate and up slices)
        // needs column ranges of one width (the generated kernel computes
        // the same rows of each).
        if (ok && !mayCombine &&
            llvm::count_if(user->getOperands(), [&](Value v) {
              return members.contains(v.getDefiningOp());
            }) > 1)
          ok = false;
        if (!ok)
          continue;
        group.ops.push_back(user);
        members.insert(user);
        grew = true;
      }
    }
  }
}

/// Recreates the weight references that `group`'s ops read from outside
/// and that come after `start`, just before `start`.
static void hoistRefs(Group &group, Operation *start) {
  SmallPtrSet<Operation *, 8> members(group.ops.begin(), group.ops.end());
  for (Operation *op : group.ops)
    for (OpOperand &operand : op->getOpOperands()) {
      auto ref = operand.get().getDefiningOp<WeightRefOp>();
      if (!ref || members.contains(ref) || ref->isBeforeInBlock(start))
        continue;
      OpBuilder builder(start);
      operand.set(cast<WeightRefOp>(builder.clone(*ref)).getResult());
      if (ref->use_empty())
        ref->erase();
    }
}

FusedOp outlineFusedRegion(SmallVector<Operation *> ops,
                           ArrayRef<StringRef> families) {
  Group group;
  group.ops = std::move(ops);
  group.families.assign(families.begin(), families.end());
  llvm::sort(group.ops, [](Operation *a, Operation *b) {
    return a->isBeforeInBlock(b);
  });
  hoistRefs(group, group.ops.front());
  SmallPtrSet<Operation *, 8> members(group.ops.begin(), group.ops.end());
  llvm::SetVector<Value> inputs;
  SmallVector<Value> outputs;
  for (Operation *op : group.ops) {
    for (Value v : op->getOperands())
      if (!members.contains(v.getDefiningOp()))
        inputs.insert(v);
    for (Value r : op->getResults())
      if (llvm::any_of(r.getUsers(), [&](Operation *u) {
            return !members.contains(u);
          }))
        outputs.push_back(r);
  }
  OpBuilder builder(group.ops.front());
  Location loc = builder.getFusedLoc(llvm::map_to_vector(
      group.ops, [](Operation *op) { return op->getLoc(); }));
  auto fused = FusedOp::create(
      builder, loc, TypeRange(ValueRange(outputs)), inputs.getArrayRef(),
      builder.getStrArrayAttr(group.families));
  Block *body = builder.createBlock(&fused.getBody());
  IRMapping map;
  for (Value v : inputs)
    map.map(v, body->addArgument(v.getType(), v.getLoc()));
  for (Operation *op : group.ops)
    builder.clone(*op, map);
  YieldOp::create(builder, loc,
                  llvm::map_to_vector(outputs, [&](Value v) {
                    return map.lookup(v);
                  }));
  for (auto [v, r] : llvm::zip(outputs, fused.getResults()))
    v.replaceAllUsesWith(r);
  for (Operation *op : llvm::reverse(group.ops))
    op->erase();
  return fused;
}

/// Forms and outlines the regions of `func`. `horizontal` are the linears
/// made by horizontal fusion (their slices join their region).
static void formRegions(func::FuncOp func, const Families &families,
                        const DenseSet<Operation *> &horizontal,
                        llvm::StringMap<int64_t> &counts) {
  Block &block = func.getBody().front();
  SmallVector<Group> groups;
  DenseSet<Operation *> taken;
  // Regions anchored on a linear.
  for (Operation &op : block) {
    if (!isFusableLinear(&op))
      continue;
    Group g;
    g.ops.push_back(&op);
    Operation *start = &op;
    if (horizontal.contains(&op))
      g.families.push_back("horizontal");
    if (families.prologue) {
      auto norm = op.getOperand(0).getDefiningOp<RmsNormOp>();
      if (norm && norm->hasOneUse() && hasF32Result(norm)) {
        g.ops.push_back(norm);
        start = norm;
        g.families.push_back("prologue");
      }
    }
    SmallVector<int64_t> sliceWidths;
    if (horizontal.contains(&op))
      for (Operation *user : op.getResult(0).getUsers())
        if (auto slice = dyn_cast<SliceColumnsOp>(user)) {
          g.ops.push_back(user);
          sliceWidths.push_back(
              cast<RankedTensorType>(slice.getType()).getDimSize(1));
        }
    bool mayCombine =
        sliceWidths.size() <= 3 &&
        llvm::all_equal(sliceWidths);
    if (families.epilogue) {
      size_t before = g.ops.size();
      growEpilogue(g, start, taken, mayCombine);
      if (g.ops.size() > before)
        g.families.push_back("epilogue");
    }
    if (g.families.empty())
      continue;
    taken.insert(g.ops.begin(), g.ops.end());
    groups.push_back(std::move(g));
  }
  // Elementwise chains outside those regions.
  if (families.elementwise) {
    for (Operation &op : block) {
      if (taken.contains(&op) || !isFusableElementwise(&op) || !hasF32Result(&op))
        continue;
      Group g;
      g.ops.push_back(&op);
      for (Operation *last = &op; last->getResult(0).hasOneUse();) {
        Operation *next = *last->getResult(0).getUsers().begin();
        if (taken.contains(next) || !isFusableElementwise(next) ||
            !hasF32Result(next) ||
            !llvm::all_of(next->getOperands(), [&](Value v) {
              return v.getDefiningOp() == last || availableAt(v, &op);
            }))
          break;
        g.ops.push_back(next);
        last = next;
      }
      if (g.ops.size() < 2)
        continue;
      g.families.push_back("elementwise");
      taken.insert(g.ops.begin(), g.ops.end());
      groups.push_back(std::move(g));
    }
  }
  for (Group &g : groups) {
    for (StringRef f : g.families)
      ++counts[f];
    outlineFusedRegion(std::move(g.ops), g.families);
  }
}

/// Ops of `func` that become kernel calls (weight references excluded).
static int64_t countKernelOps(func::FuncOp func) {
  int64_t n = 0;
  for (Operation &op : func.getBody().front())
    if (!isa<WeightRefOp, func::ReturnOp>(op))
      ++n;
  return n;
}

void FusePass::runOnOperation() {
  ModuleOp module = getOperation();
  Families f;
  bool none = false;
  for (const std::string &name : families) {
    if (name == "all")
      f.horizontal = f.prologue = f.epilogue = f.elementwise = true;
    else if (name == "none")
      none = true;
    else if (name == "horizontal")
      f.horizontal = true;
    else if (name == "prologue")
      f.prologue = true;
    else if (name == "epilogue")
      f.epilogue = true;
    else if (name == "elementwise")
      f.elementwise = true;
    else {
      module.emitError() << "kiln-fuse: unknown fusion family '" << name
                         << "' (expected horizontal, prologue, epilogue, "
                            "elementwise, all or none)";
      return signalPassFailure();
    }
  }
  if (families.empty()) {
    // `families=` written with nothing after it is a mistake, not "all".
    if (families.getNumOccurrences() > 0) {
      module.emitError() << "kiln-fuse: 'families=' lists no fusion family "
                            "(expected horizontal, prologue, epilogue, "
                            "elementwise, all or none)";
      return signalPassFailure();
    }
    f.horizontal = f.prologue = f.epilogue = f.elementwise = true;
  }
  if (none && (f.horizontal || f.prologue || f.epilogue || f.elementwise)) {
    module.emitError() << "kiln-fuse: 'none' cannot be combined with other "
                          "fusion families";
    return signalPassFailure();
  }
  if (none)
    return;

  SymbolTable symbols(module);
  for (func::FuncOp func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    if (func->hasAttr("kiln.arena_bytes")) {
      func.emitError() << "kiln-fuse: '" << func.getSymName()
                       << "' is already memory-planned; run kiln-fuse before "
                          "kiln-memory-plan";
      return signalPassFailure();
    }
    int64_t before = countKernelOps(func);
    DenseSet<Operation *> horizontal;
    if (f.horizontal)
      for (Operation *op : runHorizontal(func, symbols))
        horizontal.insert(op);
    llvm::StringMap<int64_t> counts;
    formRegions(func, f, horizontal, counts);
    if (report) {
      auto count = [&](StringRef k) { return counts.lookup(k); };
      func.emitRemark() << "kiln-fuse '" << func.getSymName()
                        << "': kernel ops " << before << " -> "
                        << countKernelOps(func) << "; regions with horizontal "
                        << count("horizontal") << ", prologue "
                        << count("prologue") << ", epilogue "
                        << count("epilogue") << ", elementwise "
                        << count("elementwise");
    }
  }
  // Weights that horizontal fusion left unreferenced.
  for (WeightOp w : llvm::make_early_inc_range(module.getOps<WeightOp>()))
    if (SymbolTable::symbolKnownUseEmpty(w, module))
      w.erase();
}

} // namespace mlir::kiln

//===- FusedKernelEmitter.cpp - C++ for plan.fused_kernel -----------------===//
//
// The generated code is the same template for every linear-anchored region;
// what varies is instantiated from the region: the weight descriptor
// (format, scales, zero points), the prologue, the segments (column ranges
// of the fused linear, from its kiln.slice_columns) and the epilogue's
// per-element statements. Two iteration shapes:
//
//  * independent segments (Q, K, V; or one plain linear): tiles of the
//    concatenated output rows; each element belongs to one segment and is
//    routed to that segment's buffer after its epilogue;
//  * paired segments (an epilogue op combines segments, swiglu(gate, up)):
//    tiles of one segment's width; each tile computes the same rows of every
//    segment, so the epilogue sees gate[j] and up[j] together.
//
//===----------------------------------------------------------------------===//

#include "codegen/CPU/FusedKernelEmitter.h"
#include "dialects/Kiln/IR/KilnOps.h"
#include "kiln_rt/block_formats.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

namespace mlir::kiln {

namespace {
/// A column range of the anchor linear's result.
struct Segment {
  int64_t offset, width;
};

class Emitter {
public:
  Emitter(plan::FusedKernelOp kernel, bool cuda)
      : kernel(kernel), body(kernel.getBody().front()),
        name(kernel.getSymName().str()), cuda(cuda) {}
  FailureOr<std::string> run();
  FailureOr<std::string> runCuda(int64_t maxTokens, std::string &scratchBytes,
                                 llvm::StringMap<std::string> *epilogueTypes);

private:
  LogicalResult classify();
  /// Checks the argument and result element types the templates take.
  LogicalResult checkTypes();
  /// The region's residual operand when it is a dense f32 linear whose
  /// only epilogue is an add of a region argument (cuBLASLt's beta = 1
  /// epilogue on CUDA), else -1.
  int64_t residualArg();
  /// The CUDA row reader of the anchor's weight.
  FailureOr<std::string> cudaRowsExpr();
  std::string argDecl(unsigned i);
  /// `static void <name>(<ctxParam><arguments>, float *r0, ..., int64_t n)
  /// {`, the statement `envDecl` declaring `e`, and the copies of the
  /// arguments and results into e.
  void emitEntryHead(llvm::raw_ostream &os, StringRef ctxParam,
                     StringRef envDecl);
  std::string envFields();
  /// Statements computing every epilogue value whose segments are `only`
  /// (all of them when `only` is -1), then the stores of those yielded.
  LogicalResult emitElementStatements(llvm::raw_ostream &os, int only,
                                      StringRef indent);
  FailureOr<std::string> operandExpr(Value v);
  std::string rowsExpr();

  plan::FusedKernelOp kernel;
  Block &body;
  std::string name;
  Operation *anchor = nullptr;
  RmsNormOp norm;
  RopeOp rope; ///< the first RoPE epilogue (all share its table)
  SmallVector<Segment> segments;
  /// Segment of each anchor-derived value: the bit per segment it reads.
  DenseMap<Value, llvm::SmallBitVector> deps;
  /// C variable of each computed value.
  DenseMap<Value, std::string> vars;
  SmallVector<Operation *> epilogue; ///< elementwise ops, in order
  bool paired = false;
  int64_t width = 0; ///< elementwise regions: the common width
  /// Elementwise regions: 16-bit row operands widened a column range at a
  /// time into these float buffers (argument number -> variable), and the
  /// 16-bit result computed into one before rounding (yield index ->
  /// variable).
  std::map<unsigned, std::string> widened, narrowed;
  bool cuda;         ///< CUDA template (else the CPU one)
};
} // namespace

static std::string cFloat(APFloat v) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::format("%a", double(v.convertToFloat())) << "f";
  return s;
}

static int64_t widthOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getDimSize(1);
}

/// C element type of a region argument or result.
static FailureOr<StringRef> cType(Operation *at, Type t) {
  if (t.isIndex())
    return StringRef("int64_t");
  Type e = cast<RankedTensorType>(t).getElementType();
  if (e.isF32())
    return StringRef("float");
  if (e.isF16())
    return StringRef("kiln_f16_t");
  if (e.isBF16())
    return StringRef("kiln_bf16_t");
  if (e.isInteger(8))
    return StringRef("int8_t");
  return at->emitOpError()
         << "fused kernels take f32, f16, bf16 and i8 buffers, got " << e;
}

/// 16-bit element type of a tensor value's elements, if it has one.
static bool is16Bit(Type t) {
  auto tensor = dyn_cast<RankedTensorType>(t);
  return tensor && (tensor.getElementType().isF16() ||
                    tensor.getElementType().isBF16());
}

/// `expr` (a float) converted for a store to elements of `t`.
static std::string storeExpr(Type t, const std::string &expr) {
  Type e = cast<RankedTensorType>(t).getElementType();
  if (e.isF16())
    return "kiln_float_to_f16(" + expr + ")";
  if (e.isBF16())
    return "kiln_float_to_bf16(" + expr + ")";
  return expr;
}

std::string Emitter::rowsExpr() {
  Value v = anchor ? anchor->getResult(0) : epilogue.front()->getResult(0);
  int64_t rows = cast<RankedTensorType>(v.getType()).getDimSize(0);
  return ShapedType::isDynamic(rows) ? std::string("n") : std::to_string(rows);
}

LogicalResult Emitter::classify() {
  for (Operation &op : body.without_terminator()) {
    if (isa<LinearOp, QuantizedLinearOp, LogitsOp>(op)) {
      if (anchor)
        return op.emitOpError() << "is a second linear in fused kernel '"
                                << name << "'";
      anchor = &op;
    } else if (auto n = dyn_cast<RmsNormOp>(op)) {
      norm = n;
    } else if (isa<SliceColumnsOp>(op)) {
      continue;
    } else if (isFusableElementwise(&op)) {
      epilogue.push_back(&op);
    } else if (auto r = dyn_cast<RopeOp>(op)) {
      if (!r.isUnscaled())
        return op.emitOpError()
               << "in fused kernel '" << name
               << "' must be plain RoPE (scaled RoPE runs as its own kernel)";
      if (rope && (r.getHeadDim() != rope.getHeadDim() ||
                   r.getRotaryDim() != rope.getRotaryDim() ||
                   r.getTheta() != rope.getTheta()))
        return op.emitOpError() << "in fused kernel '" << name
                                << "' needs the RoPE table of the first rope";
      rope = r;
      epilogue.push_back(&op);
    } else {
      return op.emitOpError() << "has no fused-kernel template";
    }
  }
  auto yield = cast<YieldOp>(body.getTerminator());
  if (!anchor) {
    if (epilogue.empty())
      return kernel.emitOpError() << "fused kernel '" << name
                                  << "' has nothing to compute";
    if (rope)
      return rope.emitOpError() << "in fused kernel '" << name
                                << "' needs a linear's column slice";
    // One loop over rows x width computes every op and stores every result.
    width = widthOf(epilogue.front()->getResult(0));
    for (Operation *op : epilogue)
      if (widthOf(op->getResult(0)) != width)
        return op->emitOpError() << "in fused kernel '" << name
                                 << "' has width " << widthOf(op->getResult(0))
                                 << ", the region's first op " << width;
    for (Value v : yield.getValues())
      if (!llvm::is_contained(epilogue, v.getDefiningOp()))
        return kernel.emitOpError() << "fused kernel '" << name
                                    << "' yields a value it does not compute";
  } else {
    Value result = anchor->getResult(0);
    SmallVector<SliceColumnsOp> slices;
    for (Operation *user : result.getUsers())
      if (auto slice = dyn_cast<SliceColumnsOp>(user))
        slices.push_back(slice);
    if (!slices.empty() && slices.size() != size_t(std::distance(
                                                result.getUsers().begin(),
                                                result.getUsers().end())))
      return anchor->emitOpError()
             << "in fused kernel '" << name
             << "' is read both whole and through column slices";
    llvm::sort(slices, [](SliceColumnsOp a, SliceColumnsOp b) {
      return a.getOffset() < b.getOffset();
    });
    for (SliceColumnsOp slice : slices) {
      llvm::SmallBitVector bits(slices.size());
      bits.set(segments.size());
      deps[slice.getResult()] = bits;
      segments.push_back({int64_t(slice.getOffset()), widthOf(slice.getResult())});
    }
    if (slices.empty()) {
      segments.push_back({0, widthOf(result)});
      deps[result] = llvm::SmallBitVector(1, true);
    }
    for (Operation *op : epilogue) {
      llvm::SmallBitVector bits(segments.size());
      for (Value v : op->getOperands())
        if (auto it = deps.find(v); it != deps.end())
          bits |= it->second;
      if (bits.count() > 1)
        paired = true;
      deps[op->getResult(0)] = bits;
    }
    if (paired && rope)
      return rope.emitOpError() << "in fused kernel '" << name
                                << "' cannot follow combined column ranges";
    // RoPE takes its pair partner from the linear's raw output, so it must
    // read a column range of it directly.
    for (Operation *op : epilogue)
      if (auto r = dyn_cast<RopeOp>(op)) {
        Value in = r.getInput();
        if (in != result && !isa_and_nonnull<SliceColumnsOp>(in.getDefiningOp()))
          return r.emitOpError() << "in fused kernel '" << name
                                 << "' must read a column slice of the "
                                    "region's linear";
      }
    // Every result is computed per element of the linear's output.
    for (Value v : yield.getValues())
      if (auto it = deps.find(v); it == deps.end() || it->second.none())
        return kernel.emitOpError()
               << "fused kernel '" << name
               << "' yields a value not computed from its linear's output";
    if (paired) {
      for (const Segment &s : segments)
        if (s.width != segments.front().width)
          return kernel.emitOpError()
                 << "fused kernel '" << name
                 << "' combines column ranges of different widths";
      if (segments.size() > 3)
        return kernel.emitOpError() << "fused kernel '" << name
                                    << "' combines more than 3 column ranges";
    }
  }
  // Every value computed per element gets a C variable.
  for (auto [i, s] : llvm::enumerate(segments))
    for (auto &[v, bits] : deps)
      if (v.getDefiningOp() == anchor || isa_and_nonnull<SliceColumnsOp>(v.getDefiningOp()))
        if (bits.count() == 1 && bits.test(i))
          vars[v] = "seg" + std::to_string(i);
  for (auto [i, op] : llvm::enumerate(epilogue))
    vars[op->getResult(0)] = "e" + std::to_string(i);
  return success();
}

FailureOr<std::string> Emitter::operandExpr(Value v) {
  if (auto it = vars.find(v); it != vars.end())
    return it->second;
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg)
    return failure();
  if (auto it = widened.find(arg.getArgNumber()); it != widened.end())
    return it->second + "[col]";
  auto type = cast<RankedTensorType>(v.getType());
  std::string a = "e.a" + std::to_string(arg.getArgNumber());
  std::string elem = type.getRank() == 1
                         ? a + "[col]"
                         : a + "[t * " + std::to_string(type.getDimSize(1)) +
                               " + col]";
  if (type.getElementType().isF16())
    return "kiln_f16_to_float(" + elem + ")";
  if (type.getElementType().isBF16())
    return "kiln_bf16_to_float(" + elem + ")";
  return elem;
}

LogicalResult Emitter::emitElementStatements(llvm::raw_ostream &os, int only,
                                             StringRef indent) {
  auto selected = [&](Value v) {
    if (only < 0)
      return true;
    auto it = deps.find(v);
    return it != deps.end() && it->second.count() == 1 && it->second.test(only);
  };
  for (Operation *op : epilogue) {
    if (anchor && !selected(op->getResult(0)))
      continue;
    if (auto r = dyn_cast<RopeOp>(op)) {
      // The pair partner (column col ^ 1, in the same tile: tiles and
      // segments start at even rows) read raw from the tile.
      FailureOr<std::string> x = operandExpr(r.getInput());
      if (failed(x) || paired)
        return op->emitOpError() << "in fused kernel '" << name
                                 << "' must read a column slice";
      if (cuda) {
        // `partner`: the raw linear output at column j ^ 1 (runCuda).
        os << indent << "const float " << vars[op->getResult(0)]
           << " = kiln_cuda_rope_elem(" << *x << ", partner, col, "
           << r.getHeadDim() << ", " << r.getRotaryDim() << ", "
           << cFloat(r.getTheta()) << ", *e.pos + t);\n";
        continue;
      }
      int64_t pairs = r.getRotaryDim() / 2;
      os << indent << "const float " << vars[op->getResult(0)]
         << " = kiln_rope_elem(" << *x << ", c0[t * tw + ((j ^ 1) - s0)], col, "
         << r.getHeadDim() << ", " << r.getRotaryDim() << ", e.cs + t * "
         << 2 * pairs << ");\n";
      continue;
    }
    SmallVector<std::string> in;
    for (Value v : op->getOperands()) {
      FailureOr<std::string> e = operandExpr(v);
      if (failed(e))
        return op->emitOpError() << "reads a value the fused kernel '" << name
                                 << "' does not compute per element";
      in.push_back(*e);
    }
    std::string expr =
        llvm::TypeSwitch<Operation *, std::string>(op)
            .Case([&](AddOp) { return in[0] + " + " + in[1]; })
            .Case([&](AddBiasOp) { return in[0] + " + " + in[1]; })
            .Case([&](MulOp) { return in[0] + " * " + in[1]; })
            .Case([&](SiluOp) {
              return (cuda ? "kiln_cuda_silu_elem(" : "kiln_silu(") + in[0] +
                     ")";
            })
            .Case([&](SwigluOp) {
              return (cuda ? "kiln_cuda_swiglu_elem(" : "kiln_swiglu(") +
                     in[0] + ", " + in[1] + ")";
            })
            .Default([](Operation *) { return std::string(); });
    os << indent << "const float " << vars[op->getResult(0)] << " = " << expr
       << ";\n";
  }
  auto yield = cast<YieldOp>(body.getTerminator());
  for (auto [i, v] : llvm::enumerate(yield.getValues())) {
    if (anchor && !selected(v))
      continue;
    FailureOr<std::string> e = operandExpr(v);
    if (failed(e))
      return kernel.emitOpError() << "fused kernel '" << name
                                  << "' yields a value it does not compute";
    if (auto it = narrowed.find(i); it != narrowed.end())
      os << indent << it->second << "[col] = " << *e << ";\n";
    else
      os << indent << "e.r" << i << "[t * " << widthOf(v)
         << " + col] = " << storeExpr(v.getType(), *e) << ";\n";
  }
  return success();
}

std::string Emitter::argDecl(unsigned i) {
  Type t = body.getArgument(i).getType();
  FailureOr<StringRef> c = cType(kernel, t);
  if (t.isIndex()) // the position of a RoPE epilogue
    return "int64_t a" + std::to_string(i);
  return "const " + c->str() + " *a" + std::to_string(i);
}

std::string Emitter::envFields() {
  std::string s;
  llvm::raw_string_ostream os(s);
  for (unsigned i = 0; i < body.getNumArguments(); ++i)
    os << "  " << argDecl(i) << ";\n";
  auto yield = cast<YieldOp>(body.getTerminator());
  for (auto [i, v] : llvm::enumerate(yield.getValues()))
    os << "  " << *cType(kernel, v.getType()) << " *r" << i << ";\n";
  os << "  int64_t n;\n";
  if (anchor)
    os << "  const float *x;\n  kiln_linear_weight w;\n";
  if (rope)
    os << "  const float *cs;\n";
  return s;
}

LogicalResult Emitter::checkTypes() {
  for (unsigned i = 0; i < body.getNumArguments(); ++i)
    if (failed(cType(kernel, body.getArgument(i).getType())))
      return failure();
  auto yield = cast<YieldOp>(body.getTerminator());
  for (Value v : yield.getValues()) {
    Type e = cast<RankedTensorType>(v.getType()).getElementType();
    if (!e.isF32() && !(!cuda && (e.isF16() || e.isBF16())))
      return kernel.emitOpError()
             << "fused kernel '" << name << "' yields a " << e
             << " value (the " << (cuda ? "CUDA" : "CPU")
             << " template stores f32" << (cuda ? "" : ", f16 and bf16") << ")";
  }
  if (cuda)
    for (unsigned i = 0; i < body.getNumArguments(); ++i)
      if (is16Bit(body.getArgument(i).getType()))
        return kernel.emitOpError()
               << "fused kernel '" << name
               << "' takes a 16-bit operand (the CUDA template reads f32)";
  return success();
}

void Emitter::emitEntryHead(llvm::raw_ostream &os, StringRef ctxParam,
                            StringRef envDecl) {
  auto yield = cast<YieldOp>(body.getTerminator());
  os << "static void " << name << "(" << ctxParam;
  for (unsigned i = 0; i < body.getNumArguments(); ++i)
    os << argDecl(i) << ", ";
  for (auto [i, v] : llvm::enumerate(yield.getValues()))
    os << *cType(kernel, v.getType()) << " *r" << i << ", ";
  os << "int64_t n) {\n  " << envDecl << "\n";
  for (unsigned i = 0; i < body.getNumArguments(); ++i)
    os << "  e.a" << i << " = a" << i << ";\n";
  for (unsigned i = 0; i < yield.getValues().size(); ++i)
    os << "  e.r" << i << " = r" << i << ";\n";
}

FailureOr<std::string> Emitter::run() {
  if (failed(classify()) || failed(checkTypes()))
    return failure();

  // A linear whose result is stored as computed: no epilogue, no column
  // slices.
  auto yieldOp = cast<YieldOp>(body.getTerminator());
  const bool direct =
      anchor && epilogue.empty() && segments.size() == 1 &&
      segments.front().offset == 0 && yieldOp.getValues().size() == 1 &&
      yieldOp.getValues().front() == anchor->getResult(0);

  std::string text;
  llvm::raw_string_ostream os(text);
  std::string env = name + "_env";
  if (kernel.getFamilies().empty()) {
    os << "// " << name << ": " << body.front().getName().getStringRef()
       << " (a single op)";
  } else {
    os << "// " << name << ": kiln.fused region (families:";
    for (Attribute f : kernel.getFamilies())
      os << " " << cast<StringAttr>(f).getValue();
    os << ")";
  }
  os << "\nnamespace {\nstruct " << env << " {\n" << envFields() << "};\n}\n";

  auto argIndex = [&](Value v) -> int64_t {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg ? int64_t(arg.getArgNumber()) : -1;
  };

  // The tile function.
  os << "static void " << name << "_tile(void *p, int64_t j0, int64_t j1) {\n"
     << "  const " << env << " &e = *(const " << env << " *)p;\n"
     << "  const int64_t n = e.n;\n  (void)n;\n";
  if (!anchor) {
    // Rows of the chunk [j0, j1) of the n x width elements, each a column
    // range [c0, c1). 16-bit row operands (up to two) are widened and a
    // 16-bit result is rounded a range at a time (kiln_k_widen / _narrow,
    // SIMD), so the loop over columns is plain float code.
    auto yield = cast<YieldOp>(body.getTerminator());
    for (unsigned i = 0; i < body.getNumArguments() && widened.size() < 2; ++i) {
      auto t = dyn_cast<RankedTensorType>(body.getArgument(i).getType());
      if (t && t.getRank() == 2 && is16Bit(t) && !body.getArgument(i).use_empty())
        widened[i] = "w" + std::to_string(widened.size());
    }
    for (auto [i, v] : llvm::enumerate(yield.getValues()))
      if (is16Bit(v.getType()) && narrowed.empty())
        narrowed[i] = "o0";
    int slot = 1;
    for (auto &[i, var] : widened)
      os << "  float *" << var << " = kiln_k_scratch(" << slot++ << ", "
         << width << ");\n";
    for (auto &[i, var] : narrowed)
      os << "  float *" << var << " = kiln_k_scratch(3, " << width << ");\n";
    auto elem = [](Type t) {
      return cast<RankedTensorType>(t).getElementType().isF16()
                 ? "KILN_ELEM_F16"
                 : "KILN_ELEM_BF16";
    };
    os << "  for (int64_t t = j0 / " << width << "; t * " << width
       << " < j1; ++t) {\n"
       << "    const int64_t c0 = j0 > t * " << width << " ? j0 - t * "
       << width << " : 0;\n"
       << "    const int64_t c1 = j1 - t * " << width << " < " << width
       << " ? j1 - t * " << width << " : " << width << ";\n";
    for (auto &[i, var] : widened)
      os << "    kiln_k_widen(" << elem(body.getArgument(i).getType()) << ", e.a"
         << i << " + t * " << width << " + c0, " << var << " + c0, c1 - c0);\n";
    os << "    for (int64_t col = c0; col < c1; ++col) {\n";
    if (failed(emitElementStatements(os, -1, "      ")))
      return failure();
    os << "    }\n";
    for (auto &[i, var] : narrowed)
      os << "    kiln_k_narrow(" << elem(yield.getValues()[i].getType())
         << ", " << var << " + c0, e.r" << i << " + t * " << width
         << " + c0, c1 - c0);\n";
    os << "  }\n}\n";
  } else if (direct) {
    // A linear without epilogue: f32 tiles go straight into the result,
    // 16-bit ones are rounded into it a row at a time.
    int64_t in = widthOf(anchor->getOperand(0));
    int64_t out = widthOf(anchor->getResult(0));
    Type re = cast<RankedTensorType>(anchor->getResult(0).getType())
                  .getElementType();
    os << "  const int64_t rows = " << rowsExpr() << ";\n"
       << "  const int64_t step = rows == 1 ? j1 - j0 : 128;\n";
    if (!re.isF32())
      os << "  float *c0 = kiln_k_scratch(1, rows * step);\n";
    os << "  for (int64_t s0 = j0; s0 < j1; s0 += step) {\n"
       << "    const int64_t s1 = s0 + step < j1 ? s0 + step : j1;\n";
    if (re.isF32()) {
      os << "    kiln_k_linear_tile(&e.w, e.x, rows, " << in
         << ", s0, s1, e.r0 + s0, " << out << ");\n";
    } else {
      os << "    kiln_k_linear_tile(&e.w, e.x, rows, " << in
         << ", s0, s1, c0, s1 - s0);\n"
         << "    for (int64_t t = 0; t < rows; ++t)\n"
         << "      kiln_k_narrow("
         << (re.isF16() ? "KILN_ELEM_F16" : "KILN_ELEM_BF16")
         << ", c0 + t * (s1 - s0), e.r0 + t * " << out << " + s0, s1 - s0);\n";
    }
    os << "  }\n}\n";
  } else {
    int64_t in = widthOf(anchor->getOperand(0));
    os << "  const int64_t rows = " << rowsExpr() << ";\n"
       << "  const int64_t step = rows == 1 ? j1 - j0 : 128;\n";
    size_t tiles = paired ? segments.size() : 1;
    for (size_t k = 0; k < tiles; ++k)
      os << "  float *c" << k << " = kiln_k_scratch(" << k + 1
         << ", rows * step);\n";
    os << "  for (int64_t s0 = j0; s0 < j1; s0 += step) {\n"
       << "    const int64_t s1 = s0 + step < j1 ? s0 + step : j1, tw = s1 - "
          "s0;\n";
    if (paired) {
      for (auto [k, s] : llvm::enumerate(segments))
        os << "    kiln_k_linear_tile(&e.w, e.x, rows, " << in << ", "
           << s.offset << " + s0, " << s.offset << " + s1, c" << k
           << ", tw);\n";
      os << "    for (int64_t t = 0; t < rows; ++t)\n"
         << "      for (int64_t j = s0; j < s1; ++j) {\n"
         << "        const int64_t col = j;\n        (void)col;\n";
      for (size_t k = 0; k < segments.size(); ++k)
        os << "        const float seg" << k << " = c" << k
           << "[t * tw + (j - s0)];\n";
      if (failed(emitElementStatements(os, -1, "        ")))
        return failure();
      os << "      }\n";
    } else {
      os << "    kiln_k_linear_tile(&e.w, e.x, rows, " << in
         << ", s0, s1, c0, tw);\n";
      for (auto [k, s] : llvm::enumerate(segments)) {
        int64_t end = s.offset + s.width;
        os << "    {\n"
           << "      const int64_t lo = s0 > " << s.offset << " ? s0 : "
           << s.offset << ", hi = s1 < " << end << " ? s1 : " << end << ";\n"
           << "      for (int64_t t = 0; t < rows; ++t)\n"
           << "        for (int64_t j = lo; j < hi; ++j) {\n"
           << "          const int64_t col = j - " << s.offset << ";\n"
           << "          const float seg" << k << " = c0[t * tw + (j - s0)];\n"
           << "          (void)col;\n";
        if (failed(emitElementStatements(os, int(k), "          ")))
          return failure();
        os << "        }\n    }\n";
      }
    }
    os << "  }\n}\n";
  }

  // The entry function.
  emitEntryHead(os, "", env + " e;");
  os << "  e.n = n;\n";
  if (!anchor) {
    os << "  const int64_t count = " << rowsExpr() << " * " << width << ";\n"
       << "  kiln_k_parallel_for(count, 16, count, " << name
       << "_tile, &e);\n}\n";
    return text;
  }
  int64_t in = widthOf(anchor->getOperand(0));
  int64_t out = widthOf(anchor->getResult(0));
  os << "  const int64_t rows = " << rowsExpr() << ";\n";
  if (norm) {
    int64_t x = argIndex(norm.getInput()), w = argIndex(norm.getWeight());
    if (x < 0 || w < 0)
      return norm.emitOpError() << "prologue must read region arguments";
    if (is16Bit(norm.getInput().getType()))
      return norm.emitOpError() << "in fused kernel '" << name
                                << "' reads 16-bit values (an rms_norm "
                                   "prologue takes f32)";
    // Prologue: the normalized input once per call, in per-call scratch.
    os << "  float *xn = kiln_k_scratch(0, rows * " << in << ");\n"
       << "  kiln_k_rms_norm(a" << x << ", a" << w << ", xn, rows, " << in
       << ", " << cFloat(norm.getEpsilon()) << ");\n"
       << "  e.x = xn;\n";
  } else {
    int64_t x = argIndex(anchor->getOperand(0));
    if (x < 0)
      return anchor->emitOpError() << "input must be a region argument";
    // The classifier reads the last of the n hidden rows (all n rows with
    // all_rows: the batched step's one row per sequence).
    std::string xp = "a" + std::to_string(x);
    if (auto l = dyn_cast<LogitsOp>(anchor); l && !l.getAllRows())
      xp = "(" + xp + " + (n - 1) * " + std::to_string(in) + ")";
    Type xe = cast<RankedTensorType>(anchor->getOperand(0).getType())
                  .getElementType();
    if (xe.isF16() || xe.isBF16()) {
      // 16-bit activations: widened once, exactly, for every tile.
      os << "  float *xw = kiln_k_scratch(0, rows * " << in << ");\n"
         << "  kiln_k_widen(" << (xe.isF16() ? "KILN_ELEM_F16" : "KILN_ELEM_BF16")
         << ", " << xp << ", xw, rows * " << in << ");\n"
         << "  e.x = xw;\n";
    } else {
      os << "  e.x = " << xp << ";\n";
    }
  }
  if (rope) {
    int64_t pos = argIndex(rope.getPosition());
    if (pos < 0)
      return rope.emitOpError() << "position must be a region argument";
    int64_t pairs = rope.getRotaryDim() / 2;
    os << "  float *cs = kiln_k_scratch(3, rows * " << 2 * pairs << ");\n"
       << "  kiln_k_rope_table(cs, rows, a" << pos << ", " << rope.getHeadDim()
       << ", " << rope.getRotaryDim() << ", "
       << cFloat(rope.getTheta()) << ");\n"
       << "  e.cs = cs;\n";
  }
  os << "  e.w = kiln_linear_weight{};\n";
  // kiln.linear and kiln.logits: float or block weights.
  auto floatOrBlocks = [&](auto l) -> LogicalResult {
    int64_t w = argIndex(l.getWeight());
    if (std::optional<StringRef> format = l.getFormat()) {
      os << "  e.w.kind = KILN_WEIGHT_BLOCKS;\n  e.w.format = "
         << kiln_block_format_from_name(format->str().c_str()) << ";\n";
      if (l.hasQuantizedActivations())
        os << "  e.w.act_quant = KILN_ACT_INT8_PER_BLOCK;\n";
    } else {
      Type we = cast<RankedTensorType>(l.getWeight().getType()).getElementType();
      if (we.isF32())
        os << "  e.w.kind = KILN_WEIGHT_F32;\n";
      else if (we.isF16())
        os << "  e.w.kind = KILN_WEIGHT_F16;\n";
      else if (we.isBF16())
        os << "  e.w.kind = KILN_WEIGHT_BF16;\n";
      else
        return l.emitOpError()
               << "in a fused kernel needs f32, f16, bf16 or block weights";
    }
    os << "  e.w.data = a" << w << ";\n";
    return success();
  };
  if (auto l = dyn_cast<LinearOp>(anchor)) {
    if (failed(floatOrBlocks(l)))
      return failure();
  } else if (auto l = dyn_cast<LogitsOp>(anchor)) {
    if (failed(floatOrBlocks(l)))
      return failure();
  } else {
    auto q = cast<QuantizedLinearOp>(anchor);
    os << "  e.w.kind = " << (q.getBits() == 8 ? "KILN_WEIGHT_W8" : "KILN_WEIGHT_W4")
       << ";\n  e.w.data = a" << argIndex(q.getQweight()) << ";\n"
       << "  e.w.scales = a" << argIndex(q.getScales()) << ";\n";
    if (q.getZeroPoints())
      os << "  e.w.zeros = a" << argIndex(q.getZeroPoints()) << ";\n";
    os << "  e.w.group_size = " << q.getGroupSize() << ";\n";
  }
  int64_t iterations = paired ? segments.front().width : out;
  // Decode: chunks of 16 rows (cache lines); prefill: of 128, since every
  // chunk's sgemm calls pack the activations again.
  os << "  kiln_k_parallel_for(" << iterations
     << ", rows == 1 ? 16 : 128, rows * " << in
     << " * " << out << ", " << name << "_tile, &e);\n}\n";
  return text;
}

int64_t Emitter::residualArg() {
  auto linear = dyn_cast_or_null<LinearOp>(anchor);
  auto yield = cast<YieldOp>(body.getTerminator());
  if (!linear || linear.getFormat() || norm || epilogue.size() != 1 ||
      yield.getValues().size() != 1 ||
      yield.getValues().front() != epilogue.front()->getResult(0) ||
      !cast<RankedTensorType>(linear.getWeight().getType())
           .getElementType()
           .isF32())
    return -1;
  auto add = dyn_cast<AddOp>(epilogue.front());
  if (!add)
    return -1;
  Value result = anchor->getResult(0);
  Value other = add.getLhs() == result   ? add.getRhs()
                : add.getRhs() == result ? add.getLhs()
                                         : Value();
  auto arg = dyn_cast_or_null<BlockArgument>(other);
  if (!arg || arg.getType() != result.getType())
    return -1;
  return arg.getArgNumber();
}

FailureOr<std::string> Emitter::cudaRowsExpr() {
  auto argIndex = [&](Value v) -> int64_t {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg ? int64_t(arg.getArgNumber()) : -1;
  };
  int64_t in = widthOf(anchor->getOperand(0));
  std::string ins = std::to_string(in);
  std::string text;
  llvm::raw_string_ostream os(text);
  if (auto l = dyn_cast<LinearOp>(anchor)) {
    int64_t w = argIndex(l.getWeight());
    if (w < 0)
      return l.emitOpError() << "weight must be a region argument";
    if (std::optional<StringRef> format = l.getFormat()) {
      if (l.hasQuantizedActivations())
        return l.emitOpError()
               << "int8 activations (act_quant 'int8_per_block') have "
                  "kernels for the cpu target only so far";
      int64_t id = kiln_block_format_from_name(format->str().c_str());
      if (id < 0)
        return l.emitOpError() << "unknown block format '" << *format << "'";
      os << "kiln_cuda_detail::BlockRows<" << id
         << ">{reinterpret_cast<const uint8_t *>(a" << w << "), " << ins
         << "}";
      return text;
    }
    if (!cast<RankedTensorType>(l.getWeight().getType())
             .getElementType()
             .isF32())
      return l.emitOpError() << "in a fused kernel needs f32 or block weights";
    os << "kiln_cuda_detail::DenseRows<float>{a" << w << ", " << ins << "}";
    return text;
  }
  auto q = cast<QuantizedLinearOp>(anchor);
  if (q.hasQuantizedActivations())
    return q.emitOpError() << "W8A8 linears are not fused";
  int64_t qw = argIndex(q.getQweight()), sc = argIndex(q.getScales());
  if (qw < 0 || sc < 0)
    return q.emitOpError() << "weights must be region arguments";
  int64_t group = q.getGroupSize();
  if (q.getBits() == 8) {
    if (group > 0)
      os << "kiln_cuda_detail::W8GroupRows<float>::make(a" << qw << ", a" << sc
         << ", " << ins << ", " << group << ")";
    else
      os << "kiln_cuda_detail::W8Rows<float>{a" << qw << ", a" << sc << ", "
         << ins << "}";
    return text;
  }
  int64_t z = q.getZeroPoints() ? argIndex(q.getZeroPoints()) : -1;
  if (z < 0)
    return q.emitOpError() << "4-bit weights need zero points on cuda";
  os << "kiln_cuda_detail::W4Rows<float>::make(a" << qw << ", a" << sc
     << ", a" << z << ", " << ins << ", " << group << ")";
  return text;
}

FailureOr<std::string>
Emitter::runCuda(int64_t maxTokens, std::string &scratchBytes,
                 llvm::StringMap<std::string> *epilogueTypes) {
  scratchBytes.clear();
  if (failed(classify()) || failed(checkTypes()))
    return failure();
  if (isa_and_nonnull<LogitsOp>(anchor))
    return anchor->emitOpError() << "in fused kernel '" << name
                                 << "' has no CUDA template (the CUDA target "
                                    "calls its classifier kernel)";
  if (!anchor && rope)
    return rope.emitOpError() << "in fused kernel '" << name
                              << "' needs a linear's column slice";
  auto yield = cast<YieldOp>(body.getTerminator());
  auto argIndex = [&](Value v) -> int64_t {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg ? int64_t(arg.getArgNumber()) : -1;
  };

  std::string text;
  llvm::raw_string_ostream os(text);
  std::string epi = name + "_epi";
  os << "// " << name << ": kiln.fused region (families:";
  for (Attribute f : kernel.getFamilies())
    os << " " << cast<StringAttr>(f).getValue();
  os << "), CUDA template (KilnCudaFused.cuh)\n";
  const size_t structBegin = text.size();
  os << "namespace {\nstruct " << epi << " {\n";
  for (unsigned i = 0; i < body.getNumArguments(); ++i)
    os << "  " << argDecl(i) << ";\n";
  for (unsigned i = 0; i < yield.getValues().size(); ++i)
    os << "  float *r" << i << ";\n";
  os << "  const int64_t *pos; // RoPE position of token 0 (ctx->d_pos)\n";

  int k = 1;
  int64_t count = 0, in = 0, out = 0;
  if (!anchor) {
    os << "  __device__ void elem(int64_t t, int64_t col) const {\n"
       << "    const " << epi << " &e = *this;\n";
    if (failed(emitElementStatements(os, -1, "    ")))
      return failure();
    os << "  }\n";
  } else {
    in = widthOf(anchor->getOperand(0));
    out = widthOf(anchor->getResult(0));
    // Output groups: the K values an epilogue needs together.
    os << "  __device__ int64_t row(int64_t g, int k) const {\n";
    if (paired) {
      k = int(segments.size());
      count = segments.front().width;
      os << "    const int64_t off[" << k << "] = {";
      for (auto [i, s] : llvm::enumerate(segments))
        os << (i ? ", " : "") << s.offset;
      os << "};\n    return off[k] + g;\n";
    } else if (rope) {
      // A RoPE pair (j, j ^ 1) in one group: segments start at even rows.
      for (const Segment &s : segments)
        if (s.offset % 2 || s.width % 2)
          return rope.emitOpError()
                 << "in fused kernel '" << name
                 << "' needs column ranges of even offset and width";
      k = 2;
      count = out / 2;
      os << "    return 2 * g + k;\n";
    } else {
      count = out;
      os << "    (void)k;\n    return g;\n";
    }
    os << "  }\n"
       << "  __device__ void store(int64_t t, int64_t g, const float *v) "
          "const {\n"
       << "    const " << epi << " &e = *this;\n";
    if (paired) {
      os << "    const int64_t col = g;\n    (void)col;\n";
      for (int i = 0; i < k; ++i)
        os << "    const float seg" << i << " = v[" << i << "];\n";
      if (failed(emitElementStatements(os, -1, "    ")))
        return failure();
    } else {
      os << "    for (int k = 0; k < " << k << "; ++k) {\n"
         << "      const int64_t j = row(g, k);\n"
         << "      const float val = v[k];\n";
      if (rope)
        os << "      const float partner = v[k ^ 1];\n      (void)partner;\n";
      for (auto [i, s] : llvm::enumerate(segments)) {
        os << "      " << (i ? "else if" : "if") << " (j >= " << s.offset
           << " && j < " << s.offset + s.width << ") {\n"
           << "        const int64_t col = j - " << s.offset << ";\n"
           << "        const float seg" << i << " = val;\n"
           << "        (void)col;\n";
        if (failed(emitElementStatements(os, int(i), "        ")))
          return failure();
        os << "      }\n";
      }
      os << "    }\n";
    }
    os << "  }\n";
  }
  os << "};\n} // namespace\n";
  // Regions with the same body (the same layer's fusion in every layer and
  // entry point) share one epilogue type, so nvcc compiles one kernel
  // template instance for all of them instead of one per call site.
  if (epilogueTypes) {
    std::string key = text.substr(structBegin);
    for (size_t at = key.find(epi); at != std::string::npos;
         at = key.find(epi, at + 1))
      key.replace(at, epi.size(), "@");
    auto [it, inserted] = epilogueTypes->try_emplace(key, epi);
    if (!inserted) {
      text.resize(structBegin);
      os << "namespace {\nusing " << epi << " = " << it->second
         << "; // same body\n} // namespace\n";
    }
  }

  // The host function plan.call_fused calls.
  emitEntryHead(os, "kiln_cuda_ctx *ctx, ", "(void)n;\n  " + epi + " e{};");
  os << "  e.pos = ctx->d_pos;\n"
     << "  const int64_t rows = " << rowsExpr() << ";\n";
  if (!anchor) {
    os << "  kiln_cuda_fused_elementwise(ctx, \"" << name << "\", rows, "
       << width << ", e);\n}\n";
    return text;
  }
  FailureOr<std::string> reader = cudaRowsExpr();
  if (failed(reader))
    return failure();
  if (int64_t res = residualArg(); res >= 0) {
    int64_t x = argIndex(anchor->getOperand(0));
    if (x < 0)
      return anchor->emitOpError() << "input must be a region argument";
    os << "  kiln_cuda_fused_linear_residual(ctx, \"" << name << "\", "
       << *reader << ", a" << x << ", a" << res << ", r0, rows, " << in << ", "
       << out << ", e);\n}\n";
    return text;
  }
  std::string x, normW = "nullptr", eps = "0.0f";
  if (norm) {
    int64_t xi = argIndex(norm.getInput()), wi = argIndex(norm.getWeight());
    if (xi < 0 || wi < 0)
      return norm.emitOpError() << "prologue must read region arguments";
    x = "a" + std::to_string(xi);
    normW = "a" + std::to_string(wi);
    eps = cFloat(norm.getEpsilon());
  } else {
    int64_t xi = argIndex(anchor->getOperand(0));
    if (xi < 0)
      return anchor->emitOpError() << "input must be a region argument";
    x = "a" + std::to_string(xi);
  }
  // Prefill scratch: the normalized input and the linear's result, float32,
  // for the largest call, as the header computes it.
  scratchBytes = "kiln_cuda_fused_scratch_bytes(" +
                 std::to_string(std::max<int64_t>(maxTokens, 1)) + ", " +
                 std::to_string(in) + ", " + std::to_string(out) + ", " +
                 (norm ? "true" : "false") + ")";
  os << "  uint64_t scratchBytes = 0;\n"
     << "  void *scratch = kiln_cuda_fused_scratch(ctx, "
        "kKilnFusedScratchOffset, &scratchBytes);\n"
     << "  kiln_cuda_fused_linear<" << k << ">(ctx, \"" << name << "\", "
     << *reader << ", " << x << ", " << normW << ", " << eps << ", rows, "
     << in << ", " << out << ", " << count
     << ", e, scratch, scratchBytes);\n}\n";
  return text;
}

FailureOr<std::string> emitFusedKernelCpu(plan::FusedKernelOp kernel) {
  return Emitter(kernel, /*cuda=*/false).run();
}

FailureOr<std::string>
emitFusedKernelCuda(plan::FusedKernelOp kernel, int64_t maxTokens,
                    std::string &scratchBytes,
                    llvm::StringMap<std::string> *epilogueTypes) {
  return Emitter(kernel, /*cuda=*/true)
      .runCuda(maxTokens, scratchBytes, epilogueTypes);
}

} // namespace mlir::kiln

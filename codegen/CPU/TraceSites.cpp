//===- TraceSites.cpp - Cost model of the plan's kernel calls -------------===//

#include "codegen/CPU/TraceSites.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::kiln {

std::string locationLabel(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return (llvm::sys::path::filename(file.getFilename().getValue()) + ":" +
            Twine(file.getLine()) + ":" + Twine(file.getColumn()))
        .str();
  if (auto fused = dyn_cast<FusedLoc>(loc)) {
    SmallVector<std::string> parts;
    for (Location part : fused.getLocations()) {
      std::string label = locationLabel(part);
      if (label != "?" && !llvm::is_contained(parts, label))
        parts.push_back(label);
    }
    return parts.empty() ? "?" : llvm::join(parts, "+");
  }
  if (auto call = dyn_cast<CallSiteLoc>(loc))
    return locationLabel(call.getCallee());
  if (auto opaque = dyn_cast<OpaqueLoc>(loc))
    return locationLabel(opaque.getFallbackLocation());
  return "?";
}

static int64_t elementBytes(MemRefType t) {
  return int64_t(llvm::divideCeil(t.getElementTypeBitWidth(), 8));
}

/// Bytes of one row (all dimensions but the first) of `t`.
static int64_t rowBytes(MemRefType t) {
  int64_t n = elementBytes(t);
  for (int64_t d : t.getShape().drop_front())
    n *= d;
  return n;
}

/// Width (last dimension) of `t`, 1 for rank 1.
static int64_t width(MemRefType t) {
  return t.getRank() >= 2 ? t.getShape().back() : 1;
}

static std::string kindOf(StringRef base) {
  for (StringRef prefix : {"embedding", "rms_norm", "rope", "add_bias",
                           "attention", "linear", "swiglu", "silu", "observe"})
    if (base.starts_with(prefix))
      return prefix.str();
  if (base == "add" || base.starts_with("add_"))
    return "add";
  if (base == "mul" || base.starts_with("mul_"))
    return "mul";
  return base.str();
}

/// FLOPs per token of an op of `kind` reading rows of `in` and writing
/// rows of `out` elements (attention's are per attended position, apart).
static int64_t flopsPerRow(StringRef kind, int64_t in, int64_t out) {
  if (kind == "linear" || kind == "logits")
    return 2 * in * out;
  if (kind == "rms_norm")
    return 4 * in;
  if (kind == "rope")
    return 3 * out;
  if (kind == "silu")
    return 4 * out;
  if (kind == "swiglu")
    return 5 * out;
  if (kind == "add" || kind == "mul" || kind == "add_bias")
    return out;
  return 0;
}

TraceSite traceSiteOfFused(plan::CallFusedOp call, plan::FusedKernelOp kernel) {
  TraceSite site;
  site.kernel = call.getKernel().str();
  site.loc = locationLabel(call.getLoc());
  // Kind: the region's op kinds in order ("rms_norm+linear+swiglu"); the
  // column slices cost nothing and are left out.
  SmallVector<std::string> kinds;
  int64_t perRow = 0;
  if (kernel)
    for (Operation &op : kernel.getBody().front().without_terminator()) {
      StringRef kind = op.getName().stripDialect();
      if (kind == "slice_columns")
        continue;
      if (kind == "quantized_linear")
        kind = "linear";
      if (!llvm::is_contained(kinds, kind))
        kinds.push_back(kind.str());
      auto in = cast<RankedTensorType>(op.getOperand(0).getType());
      auto out = cast<RankedTensorType>(op.getResult(0).getType());
      perRow += flopsPerRow(kind, in.getShape().back(), out.getShape().back());
    }
  site.kind = kinds.empty() ? "fused" : llvm::join(kinds, "+");
  for (Value arg : call.getArgs()) {
    auto type = dyn_cast<MemRefType>(arg.getType());
    if (!type)
      continue;
    if (isa_and_nonnull<plan::WeightRefOp>(arg.getDefiningOp()) ||
        !type.isDynamicDim(0)) {
      if (type.hasStaticShape())
        site.bytesFixed += type.getNumElements() * elementBytes(type);
      continue;
    }
    site.perToken = true;
    site.bytesPerToken += rowBytes(type);
  }
  // The classifier reads one row of its hidden input, whatever n is.
  if (site.kind == "logits") {
    site.bytesFixed += site.bytesPerToken;
    site.bytesPerToken = 0;
    site.perToken = false;
  }
  if (site.perToken)
    site.flopsPerToken = perRow;
  else
    site.flopsFixed = perRow;
  return site;
}

TraceSite traceSiteOf(plan::CallKernelOp call, StringRef kernel) {
  TraceSite site;
  site.kernel = kernel.str();
  StringRef base = call.getCallee();
  base.consume_front("kiln_k_");
  // The batched step's kernels (kiln_k_step_rope, ...) are of their op's kind.
  base.consume_front("step_");
  site.kind = kindOf(base);
  site.loc = locationLabel(call.getLoc());

  // Buffers: weights, KV-cache views and activations (first and last are
  // the op's input and output).
  SmallVector<MemRefType> activations;
  bool writesLogits = false;
  int64_t staticRows = 1; // rows of a call whose row count is fixed
  for (Value arg : call.getArgs()) {
    auto type = dyn_cast<MemRefType>(arg.getType());
    if (!type || !type.hasRank())
      continue;
    Operation *def = arg.getDefiningOp();
    if (isa_and_nonnull<plan::WeightRefOp>(def)) {
      if (site.kind == "embedding") // one table row per token
        site.bytesPerToken += rowBytes(type);
      else if (type.hasStaticShape())
        site.bytesFixed += type.getNumElements() * elementBytes(type);
      continue;
    }
    if (isa_and_nonnull<plan::KVCacheViewOp>(def)) {
      site.kvBytesPerPos += rowBytes(type);
      continue;
    }
    if (isa_and_nonnull<plan::LogitsOp>(def))
      writesLogits = true;
    if (type.getRank() >= 1 && type.isDynamicDim(0)) {
      site.perToken = true;
      site.bytesPerToken += rowBytes(type);
    } else if (type.hasStaticShape()) {
      site.bytesFixed += type.getNumElements() * elementBytes(type);
      if (activations.empty() && type.getRank() >= 1)
        staticRows = type.getDimSize(0);
    }
    // Token ids are not activations (embedding's input).
    if (!type.getElementType().isInteger(32))
      activations.push_back(type);
  }
  if (writesLogits && site.kind == "linear")
    site.kind = "logits";
  if (!site.perToken) { // embedding rows of a fixed-row call
    site.bytesFixed += site.bytesPerToken * staticRows;
    site.bytesPerToken = 0;
  }

  // FLOPs per row of the op's output.
  int64_t perRow = 0;
  if (!activations.empty()) {
    MemRefType x = activations.front(), y = activations.back();
    StringRef kind = site.kind;
    perRow = flopsPerRow(kind, width(x), width(y));
    if (kind == "attention") {
      // QK^T and PV: 2 * head_dim each per (query, key) pair and head.
      site.flopsPerPos = 4 * width(x);
      if (base.starts_with("attention_window")) {
        auto window =
            call.getArgs().back().getDefiningOp<arith::ConstantIndexOp>();
        site.window = window ? window.value() : 0;
      }
    }
    if (perRow) {
      if (x.isDynamicDim(0))
        site.flopsPerToken = perRow;
      else
        site.flopsFixed = perRow * x.getDimSize(0);
    }
  }
  return site;
}

std::string cStringLiteral(StringRef s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\%03o", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

std::string traceSiteTable(StringRef name, ArrayRef<TraceSite> sites) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "static const kiln_trace_site " << name << "[] = {\n";
  for (const TraceSite &s : sites)
    os << "  {" << cStringLiteral(s.kernel) << ", " << cStringLiteral(s.kind) << ", "
       << cStringLiteral(s.loc) << ", " << s.bytesFixed << ", " << s.bytesPerToken
       << ", " << s.kvBytesPerPos << ", " << s.flopsFixed << ", "
       << s.flopsPerToken << ", " << s.flopsPerPos << ", " << s.window << ", "
       << (s.perToken ? 1 : 0) << "},\n";
  if (sites.empty())
    os << "  {\"\", \"\", \"\", 0, 0, 0, 0, 0, 0, 0, 0},\n";
  os << "};";
  return text;
}

} // namespace mlir::kiln

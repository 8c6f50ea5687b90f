//===- TraceSites.h - Cost model of the plan's kernel calls -----*- C++ -*-===//
//
// What the emitted code tells the trace about each kernel call
// (kernel_abi.h kiln_trace_site): the op kind, the op's IR location and a
// cost model in bytes and FLOPs, derived from the call's buffers: weights
// (plan.weight_ref) are read whole except embedding tables (one row per
// token), activation buffers count their rows (per token when the row count
// is the entry point's n), KV-cache views count per cached position.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CODEGEN_CPU_TRACESITES_H
#define KILN_CODEGEN_CPU_TRACESITES_H

#include "dialects/Plan/IR/PlanOps.h"

#include <string>

namespace mlir::kiln {

/// One kiln_trace_site (kernel_abi.h), as the compiler computes it.
struct TraceSite {
  std::string kernel, kind, loc;
  int64_t bytesFixed = 0, bytesPerToken = 0, kvBytesPerPos = 0;
  int64_t flopsFixed = 0, flopsPerToken = 0, flopsPerPos = 0;
  int64_t window = 0;
  bool perToken = false;
};

/// The site of `call`, named `kernel` (the function the emitted code calls).
TraceSite traceSiteOf(plan::CallKernelOp call, StringRef kernel);

/// The site of a call of the generated fused kernel `kernel` (null when the
/// symbol is missing): kind from the region's ops, weights read whole,
/// activations per token, FLOPs summed over the region.
TraceSite traceSiteOfFused(plan::CallFusedOp call, plan::FusedKernelOp kernel);

/// A short, human-readable form of `loc`: the name of a NameLoc ("layers.3.wq"),
/// "file:line:col" (file without directories) for a file location, the
/// parts of a fused location joined by '+', "?" when unknown.
std::string locationLabel(Location loc);

/// `s` as a C string literal (quotes, backslashes and bytes outside
/// printable ASCII escaped).
std::string cStringLiteral(llvm::StringRef s);

/// `static const kiln_trace_site NAME[] = {...};` for `sites` (C++).
std::string traceSiteTable(StringRef name, ArrayRef<TraceSite> sites);

} // namespace mlir::kiln

#endif // KILN_CODEGEN_CPU_TRACESITES_H

//===- LlamaBuilder.h - ModelDesc to kiln graph IR --------------*- C++ -*-===//

#ifndef KILN_DIALECTS_KILN_BUILDER_LLAMABUILDER_H
#define KILN_DIALECTS_KILN_BUILDER_LLAMABUILDER_H

#include "dialects/Kiln/Import/ModelDesc.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace mlir::kiln {

/// Largest KV cache (bytes, one sequence) a build accepts: 256 GiB, more than
/// any single accelerator holds; a longer context is refused with a hint to
/// --max-seq-len.
constexpr int64_t kMaxKvCacheBytes = int64_t(256) << 30;

struct LlamaBuildOptions {
  /// Tokens one prefill call may take (plans size activations for it);
  /// 0 means min(context, 512).
  int64_t maxPrefillTokens = 0;
  /// Context length (KV-cache rows); 0 means the model's trained context.
  int64_t maxSeqLen = 0;
  /// Element type of weights, activations and the KV cache: "f32", "f16" or
  /// "bf16". Logits are always f32.
  std::string dtype = "f32";
  /// KV-cache storage: "" (the compute dtype), "int8" or "fp8" (FP8 E4M3FN,
  /// element type f8E4M3FN); both per-(token, kv-head) scaled, dequantized
  /// inside attention.
  std::string kvDtype;
};

/// Builds the kiln graph of a Llama decoder (Touvron et al. 2023, fig. /
/// eq. of Llama 2: pre-norm RMSNorm, RoPE, GQA attention with a KV cache,
/// SwiGLU FFN, residual adds, final RMSNorm, classifier) from `desc`:
/// one kiln.weight per weight and two entry points,
///   func.func @prefill(tensor<?xi32>, index, !kiln.kv_cache<...>) -> tensor<1xVxf32>
///   func.func @decode(tensor<1xi32>, index, !kiln.kv_cache<...>) -> tensor<1xVxf32>
/// Model hyper-parameters are recorded in the module attribute `kiln.model`.
/// The FFN is built as mul(silu(gate), up); canonicalization fuses it into
/// kiln.swiglu. Fails (with a diagnostic) if a weight is missing or its
/// shape disagrees with the configuration.
FailureOr<OwningOpRef<ModuleOp>> buildLlamaModule(MLIRContext *context,
                                                  const ModelDesc &desc,
                                                  const LlamaBuildOptions &options);

} // namespace mlir::kiln

#endif // KILN_DIALECTS_KILN_BUILDER_LLAMABUILDER_H

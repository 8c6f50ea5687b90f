//===- Passes.td - kiln graph transformations --------------*- tablegen -*-===//

#ifndef KILN_PASSES_TRANSFORMS_PASSES_TD
#define KILN_PASSES_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def VerifyModelPass : Pass<"kiln-verify", "::mlir::ModuleOp"> {
  let summary = "Check model-level invariants the op verifiers cannot see";
  let description = [{
    Beyond per-op verification: every entry point (`prefill`, `decode`)
    exists with the signature `(tensor<?xi32> | tensor<1xi32>, index,
    !kiln.kv_cache<...>) -> tensor<1xVxf32>`, all functions share one
    KV-cache type, each layer of the cache is written by exactly one
    `kiln.attention` per function, and every weight is referenced.
  }];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def MemoryPlanPass : Pass<"kiln-memory-plan", "::mlir::func::FuncOp"> {
  let summary = "Assign activation buffers static arena offsets by liveness";
  let description = [{
    Computes each activation's live range (definition to last use in program
    order) and packs the buffers into one arena, first-fit with 64-byte
    alignment, reusing the space of dead buffers. Dynamic token dimensions are
    sized for `max-tokens` (or the function's `kiln.max_tokens`). Annotates
    every planned op with `kiln.buffer_offset` and the function with
    `kiln.arena_bytes` and `kiln.peak_activation_bytes` (the largest sum of
    simultaneously live buffers; the arena can only be larger). The value
    returned and the function arguments live outside the arena.
  }];
  let options = [
    Option<"maxTokens", "max-tokens", "int64_t", /*default=*/"0",
           "Tokens per call to size dynamic dimensions for (0: use the "
           "function's kiln.max_tokens attribute)">,
    Option<"report", "report", "bool", /*default=*/"false",
           "Emit a remark with the peak activation and arena bytes">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def QuantizeWeightsPass : Pass<"kiln-quantize-weights", "::mlir::ModuleOp"> {
  let summary = "Weight-only quantization of every kiln.linear (W8A16, W4A16 RTN)";
  let description = [{
    Rewrites each `kiln.linear` whose weight is a `kiln.weight` into a
    `kiln.quantized_linear` over new weights `@<w>.qweight`, `@<w>.scales`
    (and `@<w>.zeros` for 4 bits) whose recipes append a
    `#kiln.transform<"quantize">` to the original's. The weights stay lazy:
    nothing is computed until the artifact is written. Embeddings and the
    classifier (`kiln.logits`) keep the compute type, as the serving stacks
    do. Weights left unused are removed.

    * `scheme=w8a16`: symmetric round-to-nearest int8, one scale per output
      channel (`scale = max|w_row| / 127`, `q = round(w / scale)`).
    * `scheme=w4a16-rtn`: asymmetric round-to-nearest 4-bit in groups of
      `group-size` inputs along each row (the quantizer of Frantar et al.,
      GPTQ, without the error compensation): per group `lo = min(w, 0)`,
      `hi = max(w, 0)`, `scale = (hi - lo) / 15`, `zero = round(-lo / scale)`,
      `q = clamp(round(w / scale) + zero, 0, 15)`. A row whose width is not
      a multiple of the group size ends with a shorter group.

    GPTQ, AWQ and SmoothQuant need calibration data and are not implemented
    yet; other schemes are rejected with a diagnostic.
  }];
  let options = [
    Option<"scheme", "scheme", "std::string", /*default=*/"\"w8a16\"",
           "Quantization recipe: w8a16 or w4a16-rtn">,
    Option<"groupSize", "group-size", "int64_t", /*default=*/"128",
           "Inputs per scale/zero-point group for 4-bit schemes (positive, even)">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def InsertObserversPass : Pass<"kiln-insert-observers", "::mlir::ModuleOp"> {
  let summary = "Observe the input of every linear layer for calibration";
  let description = [{
    For calibration (kiln-calibrate, docs/quantization.md): for each
    `kiln.linear` whose weight is a model weight (`kiln.weight_ref`), inserts
    one `kiln.observe` of its input before the first such linear reading it,
    so an activation feeding several projections (wq, wk and wv) is observed
    once. The tap is named after the weight: for `layers.<i>.<w>`,
    `layers.<i>.attn_in` (wq, wk, wv), `layers.<i>.attn_out` (wo),
    `layers.<i>.ffn_in` (w1, w3) and `layers.<i>.ffn_down_in` (w2); any other
    weight `W` gives the tap `W.input`. An input that is already observed
    keeps its tap (the pass is idempotent).

    Records on the module `kiln.observe_taps`, the tap names in order of
    first appearance (the index `kiln_k_observe` reports), and
    `kiln.observe_inputs`, a dictionary from weight name to the tap feeding
    it. Errors: an observed input that is not f32 (calibrate an f32
    compile), two different activations of one function given the same
    tap, or one weight fed by different taps in different functions.
  }];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

#endif // KILN_PASSES_TRANSFORMS_PASSES_TD

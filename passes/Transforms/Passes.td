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
    every planned op with `kiln.buffer_offset` (a `kiln.fused` op with
    `kiln.buffer_offsets`, one per result, -1 for a returned one) and the
    function with
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
  let summary = "Weight quantization of every kiln.linear (W8A16, W4A16 RTN/GPTQ, W8A8)";
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
    * `scheme=w4a16-gptq`: the same layout, values from GPTQ (Frantar et
      al. 2022, Algorithm 1) with each weight's input Hessian from the
      `calibration` file (its `input:<W>` metadata names the tap, the tensor
      is `<tap>.hessian`); `act-order` visits columns in descending diag(H)
      order with static groups; `damp` is the dampening fraction of
      mean(diag H). The pass checks the file and records the recipe; the
      artifact writer computes GPTQ one weight at a time.
    * `scheme=w8a8`: SmoothQuant's W8A8 (Xiao et al. 2023): int8 weights as
      w8a16, plus int8 activations, `act-quant=per-token` (dynamic, no
      calibration needed) or `per-tensor` (a static `act_scale` = max over
      input channels j of absmax_j / s_j / 127 from the `calibration`
      file's `<tap>.absmax`, where s is the product of the column scales
      already in the weight's recipe, e.g. from `kiln-smooth`).
  }];
  let options = [
    Option<"scheme", "scheme", "std::string", /*default=*/"\"w8a16\"",
           "Quantization recipe: w8a16, w4a16-rtn, w4a16-gptq or w8a8">,
    Option<"groupSize", "group-size", "int64_t", /*default=*/"128",
           "Inputs per scale/zero-point group for 4-bit schemes (positive, even)">,
    Option<"calibration", "calibration", "std::string", /*default=*/"\"\"",
           "kiln-calibration file (w4a16-gptq; w8a8 with act-quant=per-tensor)">,
    Option<"actOrder", "act-order", "bool", /*default=*/"false",
           "GPTQ: quantize columns in descending diag(H) order (static groups)">,
    Option<"damp", "damp", "double", /*default=*/"0.01",
           "GPTQ: dampening added to diag(H), as a fraction of its mean (>= 0)">,
    Option<"actQuant", "act-quant", "std::string", /*default=*/"\"per-token\"",
           "w8a8: int8 activation scales per-token (dynamic) or per-tensor (static)">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def AwqPass : Pass<"kiln-awq", "::mlir::ModuleOp"> {
  let summary = "AWQ activation-aware per-channel weight scaling (Lin et al. 2023)";
  let description = [{
    For each group of `kiln.linear`s sharing one input (q/k/v after the
    attention RMSNorm; w1/w3 after the FFN RMSNorm; w2 after SwiGLU; wo
    after attention), searches AWQ's per-input-channel scale (section 3.2):
    for alpha = k / `grid`, `s = absmean^alpha`, normalized by
    `sqrt(max(s) * min(s))`, minimizing the sum over the group of
    `trace(dW H dW^T)`, `dW = W - Q(W diag(s)) diag(s)^-1`, with Q the
    4-bit RTN quantizer in groups of `group-size` and H, absmean the
    calibration file's statistics of the tap (the mean squared output error
    over the calibration tokens). Then appends `#kiln.transform<"scale">`
    steps: W's columns times s, and 1/s folded into the op that produces the
    input: the RMSNorm weight, the rows of w3 (`silu(w1 x) * (w3 x) / s`),
    or the rows of wv (with grouped-query attention one scale per (KV head,
    channel), shared by the query heads reading it). The unquantized model
    computes the same function; run `kiln-quantize-weights` after it.
    Weight values are read at compile time, one group at a time. Groups
    whose producing weight is shared (tied) or used elsewhere are skipped.
  }];
  let options = [
    Option<"calibration", "calibration", "std::string", /*default=*/"\"\"",
           "kiln-calibration file (required)">,
    Option<"groupSize", "group-size", "int64_t", /*default=*/"128",
           "Group size of the 4-bit quantizer the search optimizes for">,
    Option<"grid", "grid", "int64_t", /*default=*/"20",
           "Number of alpha values searched in [0, 1)">,
    Option<"report", "report", "bool", /*default=*/"false",
           "Emit a remark per group with the chosen alpha and the output "
           "error against RTN's">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def CenterKeysPass : Pass<"kiln-center-keys", "::mlir::ModuleOp"> {
  let summary = "Calibrated key centering for 8-bit KV caches";
  let description = [{
    For every `kiln.attention` with an 8-bit KV cache (int8 or f8E4M3FN)
    whose key comes from `kiln.rope`, adds the weight
    `@layers.<l>.key_mean` ([num_kv_heads * head_dim] f32; its source is the
    tensor `layers.<l>.key.mean` of the kiln-calibrate file, the mean of the
    pre-RoPE key over the calibration tokens) and sets the attention's
    `key_mean`, `key_mean_theta` and `key_mean_rotary_dim` (copied from the
    kiln.rope). The cache then stores keys relative to the rotated mean and
    attention adds it back: exact in real arithmetic, and the per-channel
    offset of the keys no longer sets the 8-bit scale of every token
    (docs/quantization.md, "Key centering"; cf. KVQuant, Hooper et al. 2024).
    Values are unchanged. Errors: no or unreadable calibration file, a
    missing `layers.<l>.key.mean` or one of the wrong shape.
  }];
  let options = [
    Option<"calibration", "calibration", "std::string", /*default=*/"\"\"",
           "kiln-calibration file with layers.<l>.key.mean (required)">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def SmoothPass : Pass<"kiln-smooth", "::mlir::ModuleOp"> {
  let summary = "SmoothQuant activation smoothing (Xiao et al. 2023, eq. 4)";
  let description = [{
    For each group of `kiln.linear`s sharing one input (as `kiln-awq`),
    computes `s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)` (max|X_j| from the
    calibration file's `<tap>.absmax`, max|W_j| over column j of all the
    group's weights) and appends `#kiln.transform<"scale">` steps: W's
    columns times s, the producing op's weight (RMSNorm weight, rows of w3,
    rows of wv with shared scales under grouped-query attention) times 1/s,
    so the unquantized model computes the same function while activation
    outliers move into the weights. Channels never active in calibration
    (absmax 0) keep s = 1. Run `kiln-quantize-weights{scheme=w8a8}` after it.
  }];
  let options = [
    Option<"calibration", "calibration", "std::string", /*default=*/"\"\"",
           "kiln-calibration file (required)">,
    Option<"alpha", "alpha", "double", /*default=*/"0.5",
           "Migration strength in [0, 1]">,
    Option<"report", "report", "bool", /*default=*/"false",
           "Emit a remark per smoothed group">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def InsertObserversPass : Pass<"kiln-insert-observers", "::mlir::ModuleOp"> {
  let summary = "Observe linear-layer inputs and pre-RoPE keys for calibration";
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

    For each `kiln.attention` whose `key` is the result of a `kiln.rope`, it
    also observes the pre-RoPE key (the rope's input, `[n, num_kv_heads *
    head_dim]`) before the rope, as tap `layers.<l>.key` with `l` the
    attention's `layer` (the key means of calibrated key centering,
    `kiln-center-keys`). This tap feeds no weight, so it has no
    `kiln.observe_inputs` entry; kiln-calibrate stores its mean instead of a
    Hessian. Attentions whose key is not a rope result are not observed.

    Records on the module `kiln.observe_taps`, the tap names in order of
    first appearance (the index `kiln_k_observe` reports), and
    `kiln.observe_inputs`, a dictionary from weight name to the tap feeding
    it. Errors: an observed input or pre-RoPE key that is not f32 (calibrate
    an f32 compile), two different activations of one function given the
    same tap, one weight fed by different taps in different functions, or a
    pre-RoPE key already observed under another tap than `layers.<l>.key`.

    With `attention`, each non-batched `kiln.attention` also gets its query
    and key operands observed (after RoPE, as the kernel reads them: `[n,
    num_heads * head_dim]` and `[n, num_kv_heads * head_dim]`) as taps
    `layers.<l>.attn_q` and `layers.<l>.attn_k`, for the head scores of
    `kiln-calibrate --heads`; neither feeds a weight.
  }];
  let options = [
    Option<"attention", "attention", "bool", /*default=*/"false",
           "Also observe each attention's query and key after RoPE">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def FusePass : Pass<"kiln-fuse", "::mlir::ModuleOp"> {
  let summary = "Kernel fusion: horizontal, prologue, epilogue and elementwise regions";
  let description = [{
    Forms `kiln.fused` regions that codegen emits as one generated kernel
    each (docs/fusion.md), in four families that can be switched
    separately with `families` (a list of `horizontal`, `prologue`,
    `epilogue`, `elementwise`; `all`, the default, or `none`):

    * `horizontal`: linears that read the same input with weights of the
      same kind (`kiln.linear` of one format and element type, or weight-only
      `kiln.quantized_linear` of the same bits and group size) become one
      linear over a new weight whose recipe ends in
      `#kiln.transform<"concat_rows", {parts = [...]}>` (each part keeps its
      own source and transforms); each former result becomes a
      `kiln.slice_columns` of the fused result (Q, K, V; gate, up). Weights
      left unused are removed.
    * `prologue`: a `kiln.rms_norm` whose only user is a linear's input moves
      into that linear's region.
    * `epilogue`: elementwise ops (`kiln.add` residual, `kiln.swiglu`,
      `kiln.silu`, `kiln.mul`, `kiln.add_bias`) applied to a linear's result,
      and plain `kiln.rope` (no scaling, no frequency factors) of a column
      slice (Q and K after QKV), join its region when the value they consume
      has no other user; the
      slices of a horizontally fused linear always join it (the generated
      kernel stores each column range to its own buffer).
    * `elementwise`: chains of two or more elementwise ops, each the only
      user of the previous one's result, become one loop.

    Only f32 activations are fused (16-bit graphs and W8A8 linears are left
    as they are). Operands from outside a region must be defined before its
    first op (weight references are moved up); an op that would need a
    value computed later stays outside. With `report`, a remark per
    function counts the regions of each family and the ops before and after.
  }];
  let options = [
    ListOption<"families", "families", "std::string",
               "Fusion families to apply: horizontal, prologue, epilogue, "
               "elementwise, all (default) or none">,
    Option<"report", "report", "bool", /*default=*/"false",
           "Emit a remark per function with region and op counts">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def OutlineKernelsPass : Pass<"kiln-outline-kernels", "::mlir::ModuleOp"> {
  let summary = "One kiln.fused region per remaining linear and elementwise op (CPU codegen)";
  let description = [{
    The CPU target instantiates a generated kernel for every linear and
    elementwise op instead of calling a fixed runtime entry point per
    element type and weight kind (kernel_abi.h, "Generated kernels"). This
    pass, run after `kiln-fuse` and before `kiln-memory-plan`, wraps each
    such op left outside a fused region in a `kiln.fused` region of its own
    with no fusion family:

    * `kiln.linear` (f32, f16 or bf16 weights, or a GGML block format, with
      or without int8 block activations) and weight-only
      `kiln.quantized_linear` (W8A16, W4A16), for f32, f16 and bf16
      activations and outputs (the classifier writes f32 logits);
    * `kiln.add`, `kiln.mul`, `kiln.silu`, `kiln.swiglu`, `kiln.add_bias`;
    * `kiln.logits` (the classifier, whose result is the entry point's
      logits buffer rather than a region result) is marked
      `kiln.generated_kernel` instead, and `kiln-lower-to-plan` makes it a
      single-op `plan.fused_kernel`.

    W8A8 linears (their activations are quantized per call), norms, RoPE,
    attention, embeddings, column slices and observers stay runtime
    kernels. Ops already inside a `kiln.fused` region are left alone, so a
    second run changes nothing. Codegen then emits each region exactly as a
    fused one (`--fuse=none` still means no fusion: one generated kernel per
    op). Fails on IR that is already memory-planned.
  }];
}

def QuantizeBlockActivationsPass
    : Pass<"kiln-quantize-block-activations", "::mlir::ModuleOp"> {
  let summary = "Int8 activations for linears over GGML block-format weights";
  let description = [{
    An explicit recipe, never applied by default: sets `act_quant =
    "int8_per_block"` on every `kiln.linear` and `kiln.logits` whose weight
    is kept in a GGML block format (a `format` attribute) and whose input is
    f32. Their input rows are then quantized per 32 elements as llama.cpp
    quantizes activations for its quantized matmuls (Q8_0:
    `d = max|x| / 127`, `q = round(x / d)`), and the kernels multiply the
    weight codes with q in integer arithmetic (docs/quantization.md gives
    the formula, its speed and its measured perplexity price). Linears with
    float or `kiln.quantized_linear` weights are left as they are.

    `scheme` is `int8-per-block` (the default) or `none` (the pass does
    nothing). It must run before `kiln-memory-plan`; with `report`, a remark
    counts the linears it changed.
  }];
  let options = [
    Option<"scheme", "scheme", "std::string", /*default=*/"\"int8-per-block\"",
           "Activation quantization: int8-per-block or none">,
    Option<"report", "report", "bool", /*default=*/"false",
           "Emit a remark with the number of linears changed">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def SparseAttentionPass
    : Pass<"kiln-sparse-attention", "::mlir::ModuleOp"> {
  let summary = "Dynamic block-sparse prefill attention with per-block budgets";
  let description = [{
    Lowers dense prefill attention to its dynamic block-sparse form
    (docs/sparse-attention.md): every `kiln.attention` of a prefill entry
    point (rows = the token count, a contiguous cache of the activation
    dtype, no sliding window or key centering) gets `sparse =
    #kiln.sparse_attention<...>` with the options below. At run time each
    (KV head, query block of `block` positions) estimates, per query head,
    the attention mass of every earlier key block from the blocks' mean
    keys (`mode=flex`; FlexPrefill, Lai et al. 2025) or from every
    `stride`-th key on antidiagonals of the optional blocks, the sink and
    local blocks' keys scored exactly (`mode=antidiag`; XAttention, Xu et
    al. 2025; a Horvitz-Thompson estimate of the true mass, so its `gamma`
    defaults to 0.98), keeps the `sink` first and `local` last blocks, adds blocks
    by their largest mass over the group's heads until every head's kept
    mass reaches `gamma` (one block list per GQA group), clamps to [`min-budget`,
    `max-budget`] keys, and runs exact attention over the kept keys with
    the dense kernel's softmax; chunked prefill and a KV prefix select
    among all earlier blocks. Dense fallback: `gamma` = 1, steps with fewer
    than `min-tokens` keys, and steps that keep 90% of their block pairs
    run the dense kernel. The batched step derived later (kiln-batch-step)
    keeps the attribute: its sequences' multi-row chunks select, their
    one-row decode rows run dense. Decode stays dense unless `decode=quest`.
    Attention ops it cannot serve (8-bit caches, sliding windows, key
    centering) stay dense; with `report` a remark counts both.

    Decode (`decode=quest`; Quest, Tang et al. 2024): every contiguous
    `!kiln.kv_cache` of the module's functions gets `summary = block` (the
    pages' key minimum and maximum kept with the cache) and the decode
    attention (one row) gets the same `sparse` attribute: each decode step
    bounds every page's scores from the summaries, keeps pages by the same
    gamma rule and attends exactly over them. Needs every non-batched
    attention to be sparse-capable and f32 (the summaries are only kept up
    to date by the sparse kernels); errors otherwise.

    Head roles (DuoAttention, Xiao et al. 2024; RTPurbo): with `streaming`
    = F > 0 and `calibration` = a file written by `kiln-calibrate --heads`,
    the floor(F N) KV heads of the model's N with the lowest retrieval
    score (tensor `layers.<l>.attn_retrieval` [num_heads]: the attention
    mass a repeated passage's second copy sends to its first copy, beyond
    the local window; a KV head scores the maximum of its query heads) are
    listed in the attribute's `streaming` and keep only the sink and local
    blocks; ties go to the earlier (layer, head). Errors: a file without
    head scores, scores of another shape, KV head indices of 64 or more.

    ```mlir
    %o = kiln.attention %q, %k, %v, %cache, %pos {head_dim = 8 : i64, layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.353553385 : f32, sparse = #kiln.sparse_attention<mode = "flex", gamma = 9.500000e-01 : f32, block = 64, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 1024>} : ...
    ```
  }];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"flex\"",
           "Mass estimate: flex (the blocks' mean keys) or antidiag (every "
           "stride-th key on antidiagonals)">,
    Option<"stride", "stride", "int64_t", /*default=*/"0",
           "antidiag: the sampling stride in [1, block] (0 with flex)">,
    Option<"gamma", "gamma", "double", /*default=*/"0.95",
           "Attention mass each query block's kept keys must cover, (0, 1] "
           "(default 0.95 with flex, 0.98 with antidiag)">,
    Option<"block", "block", "int64_t", /*default=*/"64",
           "Positions per query and key block">,
    Option<"sink", "sink", "int64_t", /*default=*/"1",
           "First key blocks always kept (attention sinks)">,
    Option<"local", "local", "int64_t", /*default=*/"2",
           "Key blocks ending at the diagonal always kept (>= 1)">,
    Option<"minBudget", "min-budget", "int64_t", /*default=*/"0",
           "Keys each query block keeps at least">,
    Option<"maxBudget", "max-budget", "int64_t", /*default=*/"0",
           "Keys each query block keeps at most beyond the mandatory blocks "
           "(0: no limit)">,
    Option<"minTokens", "min-tokens", "int64_t", /*default=*/"1024",
           "Steps with fewer keys run dense">,
    Option<"streaming", "streaming", "double", /*default=*/"0.0",
           "Fraction of the model's KV heads, in [0, 1), made streaming "
           "heads (sink and local blocks only): those with the lowest "
           "retrieval scores in `calibration`">,
    Option<"calibration", "calibration", "std::string", /*default=*/"\"\"",
           "Calibration file with head scores (kiln-calibrate --heads); "
           "needed when streaming > 0">,
    Option<"decode", "decode", "std::string", /*default=*/"\"dense\"",
           "Decode attention: dense, or quest (page selection from key "
           "summaries kept with the KV cache)">,
    Option<"report", "report", "bool", /*default=*/"false",
           "Emit a remark with the ops made sparse and left dense">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def BatchStepPass : Pass<"kiln-batch-step", "::mlir::ModuleOp"> {
  let summary = "Add the batched step entry point @step, derived from @prefill";
  let description = [{
    Continuous batching (Orca, Yu et al. 2022) runs one model step over
    several sequences: decode tokens and prefill chunks of different
    requests share the step's T token rows. This pass clones `@prefill`
    into

    ```mlir
    func.func @step(%tokens: tensor<?xi32>, %batch: !kiln.batch,
                    %cache: !kiln.paged_kv_cache<L, H, D, E>)
        -> tensor<?xVxf32>
    ```

    where the position argument becomes the `!kiln.batch` (its only users,
    `kiln.rope` and `kiln.attention`, then take per-row positions and
    per-sequence block tables), the contiguous `!kiln.kv_cache` becomes the
    paged cache of the same layers, heads and element type, and the
    classifier gets the last row of every sequence (`kiln.last_rows`, put
    before the final `kiln.rms_norm`, which is per row) with `all_rows`:
    one logits row per sequence. Linears, norms and elementwise ops are
    unchanged: they already treat the T rows as one matrix, so decode of B
    sequences reads every weight once.

    Run after the quantization passes (the step inherits their rewrites)
    and before `kiln-fuse`. Models the batched kernels do not cover yet
    (scaled RoPE: `scaling` or `freq_factors`) and calibration graphs
    (`kiln.observe`) are refused with an error naming the op, or, with
    `required=false`, left without `@step` and a remark saying why.
  }];
  let options = [
    Option<"required", "required", "bool", /*default=*/"true",
           "Fail when the model cannot have a step entry point (false: "
           "leave the module unchanged with a remark)">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def VerifyEntryPass : Pass<"kiln-verify-entry", "::mlir::ModuleOp"> {
  let summary = "Add the speculative-decoding verify entry point @verify, derived from @prefill";
  let description = [{
    Speculative decoding (Leviathan et al. 2023, Chen et al. 2023) scores a
    draft of k tokens, plus the last accepted one, against the KV cache in
    one step and needs the logits of every row, not only of the last. This
    pass clones `@prefill` into

    ```mlir
    func.func @verify(%tokens: tensor<?xi32>, %pos: index,
                      %cache: !kiln.kv_cache<...>) -> tensor<?xVxf32>
    ```

    whose `kiln.logits` gets `all_rows`: logits row i is the next-token
    distribution after token i (docs/speculative.md). Everything else is
    prefill's (the same kernels, the same KV appends at [pos, pos + n), the
    same `max_tokens`); rejected positions are rolled back by the runtime
    (the session's position moves back; rows past it are overwritten by the
    next step). Run after the quantization and sparse-attention passes
    (the entry inherits their rewrites) and before `kiln-fuse`. Errors: no
    `@prefill` or a symbol `@verify` already, a prefill that does not
    return `kiln.logits` (a pipeline stage before the last; a
    vocab-parallel classifier's all-gather is kept), sparse attention
    (its selection over the verify rows would differ from decode's, so
    speculation would change the output).
  }];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def SkipLayersPass : Pass<"kiln-skip-layers", "::mlir::ModuleOp"> {
  let summary = "Drop transformer layers: the self-draft of speculative decoding";
  let description = [{
    Removes the decoder layers listed in `layers` from every entry point:
    the layer's output (the residual stream after its attention and FFN
    blocks) is replaced by its input, so the stream skips it (the
    self-speculative draft of Zhang et al. 2023, "Draft & Verify: Lossless
    Large Language Model Acceleration via Self-Speculative Decoding", and
    Elhoushi et al. 2024, "LayerSkip"). The layer's ops and the weights
    only they read go; its KV-cache rows are never written (the cache type
    keeps every layer, so the artifact's cache layout is the model's).
    `kiln-compile --self-draft=LAYERS` runs it on the draft it writes
    beside the artifact (docs/speculative.md). A layer is found from its
    `kiln.attention` (attribute `layer`): the query's rms_norm gives the
    layer input x, x + attention-output is the mid-layer residual h, and
    h + FFN-output (the add that uses h beside its rms_norm) the output.
    Run on the imported graph, before quantization and fusion. Errors: an
    index that is not a layer of the model, every layer listed, a layer
    whose residual structure is not that pre-norm shape.
  }];
  let options = [
    ListOption<"layers", "layers", "int64_t",
               "Indices of the layers to remove">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def PartitionPass : Pass<"kiln-partition", "::mlir::ModuleOp"> {
  let summary = "Tensor and pipeline parallelism: one rank's shard of its stage's layers (Megatron-LM splits)";
  let description = [{
    Rewrites the module into rank `rank`'s program of a tensor-parallel
    group of `tp` ranks (Shoeybi et al. 2019, "Megatron-LM", section 3):
    per layer, the query, key and value projections and the FFN's gate and
    up projections are column-parallel (the rank keeps the rows of its
    attention heads and of its `hidden_dim / tp` hidden features, as a
    `#kiln.transform<"slice", {axis = 0, ...}>` appended to each weight's
    recipe), the attention output and FFN down projections row-parallel
    (the matching columns, axis 1), each followed by a `kiln.all_reduce`
    summing the ranks' partial products: exactly two all-reduces per
    layer. Attention, RoPE and the KV cache (the function signatures'
    `!kiln.kv_cache` / `!kiln.paged_kv_cache`) take the rank's
    `n_heads / tp` query heads and `n_kv_heads / tp` KV heads; with fewer
    KV heads than ranks (tp a multiple of n_kv_heads) each KV head is
    replicated on the `tp / n_kv_heads` ranks whose query heads use it.
    The classifier is vocab-parallel by default (Megatron-LM's parallel
    output embedding): the rank keeps `vocab / tp` rows of `@output`, its
    `kiln.logits` computes those columns of the logits and a
    `kiln.all_gather` puts the ranks' columns side by side, so each rank
    reads 1/tp of the classifier instead of all of it (with
    `vocab-parallel=false`, or a vocabulary tp does not divide, it stays
    whole on every rank). The embedding and the norms stay whole on every
    rank. The module gets `kiln.partition = {tp, rank, vocab_parallel}`.

    Pipeline parallelism (`pp` > 1; GPipe, Huang et al. 2019; Narayanan
    et al. 2021): the layers are split into `pp` contiguous stages that
    minimise the largest stage's cost, the bytes of weights it reads per
    decoded token (each layer's weights; the first stage also holds the
    embedding, read one row per token; the last the final norm and the
    classifier, often as large as several layers). Stage `stage` keeps its
    layers: unless it is the first, a `kiln.recv {source = stage - 1}` of
    the residual stream replaces the embedding and the layers before it;
    unless it is the last, a `kiln.send {destination = stage + 1}` of the
    residual entering the next stage's first layer ends it, and its entry
    points return nothing (the last stage returns the logits). Its
    attention ops are renumbered from 0, its KV caches hold its layers
    only, and weights it no longer reads are dropped. Runs after the
    tensor-parallel split (a rank's program is stage `stage` of tp rank
    `rank`). The module gets `kiln.partition = {..., pp, stage,
    first_layer, num_layers, stage_layers}` (stage_layers: every stage's
    layer count).

    Errors, naming the counts: heads, hidden features or KV heads that do
    not divide (nor are divided by) tp; more stages than layers; a layer
    whose start cannot be found (no `kiln.rms_norm` of
    `@layers.<i>.attention_norm`); calibration observers; weights already
    quantized, fused or kept in GGUF block formats (run the pass first, on
    float weights: the quantization passes then quantize each shard on its
    own); centered keys.

    ```mlir
    // tp=2, rank=1 of a 64-wide model with 8 heads of 8:
    kiln.weight @layers.0.wq : tensor<32x64xf32> {..., transforms = [
        #kiln.transform<"slice", {axis = 0 : i64, offset = 32 : i64, size = 32 : i64}>]}
    %o = kiln.linear %a, %wo : tensor<?x32xf32>, tensor<64x32xf32> -> tensor<?x64xf32>
    %r = kiln.all_reduce %o {group_size = 2 : i64} : tensor<?x64xf32>
    ```
  }];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"1",
           "Ranks of the tensor-parallel group (1: no change)">,
    Option<"rank", "rank", "int64_t", /*default=*/"0",
           "The rank whose program is produced, in [0, tp)">,
    Option<"vocabParallel", "vocab-parallel", "bool", /*default=*/"true",
           "Split the classifier's vocabulary rows across the ranks and "
           "gather the logits (kiln.all_gather); false, or a vocabulary "
           "that tp does not divide, keeps it whole on every rank">,
    Option<"pp", "pp", "int64_t", /*default=*/"1",
           "Pipeline stages: the layers split into pp contiguous stages "
           "balanced by the bytes of weights each reads per token (1: no "
           "change)">,
    Option<"stage", "stage", "int64_t", /*default=*/"0",
           "The pipeline stage whose program is produced, in [0, pp)">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def SequenceParallelPass : Pass<"kiln-sequence-parallel", "::mlir::ModuleOp"> {
  let summary = "Sequence parallelism: the residual stream, its adds and rms_norms on each rank's shard of the tokens";
  let description = [{
    Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
    Transformer Models", section 4.2.2): with tensor parallelism every rank
    otherwise recomputes the same rms_norm and residual add on every token.
    In a tensor-parallel module (kiln.partition with tp > 1, after
    kiln-partition), in every entry point whose rows are the token count
    (prefill and the batched step; decode's one token keeps plain TP):

    * each `kiln.all_reduce` whose one user is a `kiln.add` of the residual
      stream becomes a `kiln.reduce_scatter`: the rank keeps the sum's rows
      of its sequence shard (kiln_rt/sequence_shard.h), and the add runs on
      the shard;
    * the residual stream entering the first such add (the embedding's
      output, or a pipeline stage's received stream) is cut to the shard by
      a `kiln.all_slice`;
    * a `kiln.rms_norm` of a sharded value runs on the shard;
    * every other use of a sharded value (the column-parallel linears after
      a norm, the classifier, `kiln.last_rows`, a stage's `kiln.send`) reads
      it through one `kiln.all_gather_rows` (`all-reduce = reduce-scatter +
      all-gather`: the same bytes on the wire, the norm and add computed
      once per token instead of tp times).

    With `fuse-norm`, each reduce-scatter, its add and the rms_norm of the
    sum become one `kiln.reduce_scatter_add_rms_norm` (communication
    fusion: one kernel, the sum written once) where the sum has no use
    before the norm.

    With `int8-gather`, a gather whose every reader is a linear that
    quantizes its input to int8 by the same rule (`kiln.quantized_linear`
    with `act_quant` "int8_per_token", or "int8_per_tensor" with one common
    `act_scale`; `kiln.linear` / `kiln.logits` with "int8_per_block") gets
    that rule as `wire_quant`: the ranks exchange int8 codes and scales
    instead of f32 rows (an 8-bit all-gather after norm + quantize), and
    the readers quantize the dequantized rows back to the same codes.

    All three ops carry `min-tokens`: a prefill chunk (or batched step) of
    fewer rows runs plain TP at run time (the reduce-scatter is the
    all-reduce, slice and gather copy), vLLM-Ascend's observation that the
    split does not pay on short sequences. `min-tokens` must be at least
    tp. A module without tensor parallelism (tp 1 or no kiln.partition) is
    left unchanged.

    ```mlir
    %s = kiln.reduce_scatter %o {group_size = 2 : i64, min_tokens = 64 : i64} : tensor<?x64xf32>
    %h1 = kiln.add %h0, %s : tensor<?x64xf32>
    %n = kiln.rms_norm %h1, %w {epsilon = 1.0e-05 : f32} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
    %x = kiln.all_gather_rows %n {group_size = 2 : i64, min_tokens = 64 : i64} : tensor<?x64xf32>
    ```
  }];
  let options = [
    Option<"minTokens", "min-tokens", "int64_t", /*default=*/"0",
           "Rows from which a step splits the sequence (below: plain TP); "
           "0 chooses the target's measured default (kiln-compile --sp)">,
    Option<"fuseNorm", "fuse-norm", "bool", /*default=*/"false",
           "Communication fusion: each reduce-scatter, the residual add it "
           "feeds and the rms_norm of the sum become one "
           "kiln.reduce_scatter_add_rms_norm (kiln-compile: unless "
           "--fuse=none)">,
    Option<"int8Gather", "int8-gather", "bool", /*default=*/"false",
           "8-bit all-gather: a kiln.all_gather_rows of f32 rows whose "
           "every reader quantizes its input to int8 by one rule "
           "(SmoothQuant W8A8, GGUF block linears with act_quant) sends "
           "int8 codes and scales (wire_quant), exact for its readers "
           "(kiln-compile: --sp-int8-gather, on by default)">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

#endif // KILN_PASSES_TRANSFORMS_PASSES_TD

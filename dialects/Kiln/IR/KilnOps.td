//===- KilnOps.td - kiln dialect operations ----------------*- tablegen -*-===//
//
// Shapes: activations are rank-2 tensors [tokens, features] whose token
// dimension may be dynamic (prefill) or 1 (decode); weights are
// [out_features, in_features] (PyTorch nn.Linear layout).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECTS_KILN_IR_KILNOPS_TD
#define KILN_DIALECTS_KILN_IR_KILNOPS_TD

include "dialects/Kiln/IR/KilnBase.td"
include "dialects/Kiln/IR/KilnTypes.td"
include "dialects/Kiln/IR/KilnAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def Kiln_FloatTensor : RankedTensorOf<[F16, BF16, F32]>;
def Kiln_Activation : 2DTensorOf<[F16, BF16, F32]>;
def Kiln_TokenTensor : 1DTensorOf<[I32]>;

// Resource for the KV cache: attention reads and writes it.
def Kiln_Position : AnyTypeOf<[Index, Kiln_BatchType],
    "a position (index) or the batch of a step (!kiln.batch)">;
def Kiln_AnyKVCache : AnyTypeOf<[Kiln_KVCacheType, Kiln_PagedKVCacheType]>;

def Kiln_KVCacheResource : Resource<"::mlir::kiln::KVCacheResource">;
// Resource for the calibration observer: kiln.observe writes to it, so the
// op has an effect and is never removed as dead.
def Kiln_ObserverResource : Resource<"::mlir::kiln::ObserverResource">;
// Resource for inter-rank communication: collectives read and write it, so
// they keep their order (every rank must issue them in the same order) and
// are never removed as dead.
def Kiln_CommResource : Resource<"::mlir::kiln::CommResource">;

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

def Kiln_WeightOp : Kiln_Op<"weight", [Symbol, IsolatedFromAbove]> {
  let summary = "A model weight: a symbol naming its source and recipe";
  let description = [{
    Declares a weight at module level. `source` names where its stored bytes
    live; `transforms` is the ordered list of pending transforms (permute,
    dequantize, later slice/concat/quantize) that produce the tensor of
    `type` from them. Passes edit the recipe; the artifact writer
    materializes it one tensor at a time. The IR never holds weight data.

    ```mlir
    kiln.weight @layers.0.wq : tensor<64x64xf32>
        {source = #kiln.source<file = "m.bin", tensor = "wq[0]", storage = "f32",
                               offset = 4124, bytes = 16384, seed = 0>,
         transforms = []}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<RankedTensorOf<[F16, BF16, F32, I8]>>:$type,
                       Kiln_WeightSourceAttr:$source,
                       TypedArrayAttrBase<Kiln_WeightTransformAttr,
                                          "weight transforms">:$transforms);
  let assemblyFormat = "$sym_name `:` $type attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
  }];
}

def Kiln_WeightRefOp : Kiln_Op<"weight_ref",
    [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The value of a module-level kiln.weight";
  let description = [{
    ```mlir
    %wq = kiln.weight_ref @layers.0.wq : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs RankedTensorOf<[F16, BF16, F32, I8]>:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Compute
//===----------------------------------------------------------------------===//

def Kiln_EmbeddingOp : Kiln_Op<"embedding", [Pure]> {
  let summary = "Token embedding lookup";
  let description = [{
    `result[i, :] = table[tokens[i], :]`; tokens `[n] i32`, table
    `[vocab, dim]`, result `[n, dim]`.

    With `format` (a GGML block format: "q4_0", "q4_1", "q5_0", "q5_1",
    "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"; layouts in
    runtime/include/kiln_rt/block_formats.h) the table stays in that format:
    an i8 tensor `[vocab, dim / block_elems * block_bytes]` of raw blocks,
    and each looked-up row is decoded (result f32).

    ```mlir
    %h = kiln.embedding %tokens, %table : tensor<?xi32>, tensor<512x64xf32> -> tensor<?x64xf32>
    %e = kiln.embedding %tokens, %qtable {format = "q8_0"}
        : tensor<?xi32>, tensor<512x68xi8> -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Kiln_TokenTensor:$tokens,
                       2DTensorOf<[F16, BF16, F32, I8]>:$table,
                       OptionalAttr<StrAttr>:$format);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat =
      "$tokens `,` $table attr-dict `:` type($tokens) `,` type($table) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_RmsNormOp : Kiln_Op<"rms_norm", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "RMS normalization over the innermost dimension";
  let description = [{
    Zhang & Sennrich 2019, eq. 4:
    `y = x / sqrt(mean(x^2) + epsilon) * weight`, per row of `[n, dim]`.

    ```mlir
    %y = kiln.rms_norm %x, %w {epsilon = 1.0e-05 : f32} : tensor<?x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Kiln_Activation:$input, 1DTensorOf<[F16, BF16, F32]>:$weight,
                       DefaultValuedAttr<F32Attr, "1.0e-6">:$epsilon);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "$input `,` $weight attr-dict `:` type($input) `,` type($weight)";
  let hasVerifier = 1;
}

def Kiln_LinearOp : Kiln_Op<"linear", [Pure]> {
  let summary = "Linear layer without bias: x * W^T";
  let description = [{
    `result[n, out] = input[n, in] * weight[out, in]^T`.

    With `format` (a GGML block format, as on kiln.embedding) the weight is
    kept as stored in a GGUF file: an i8 tensor `[out, in / block_elems *
    block_bytes]` of raw blocks, decoded by the kernels while they multiply
    (f32 activations; GEMV for one token, dequantized tiles for more).

    `act_quant = "int8_per_block"` (only with `format`; set by
    `kiln-quantize-block-activations`, an explicit recipe) quantizes each
    input row per 32 elements as llama.cpp's Q8_0 activations,
    `d_b = max_{i in b} |x_i| / 127`, `q_i = clamp(round(x_i / d_b), -127,
    127)`, and computes `result[n, o] = sum_b d_b * sum_{i in b} W[o, i] *
    q_i` with integer dot products of the weight codes and q.

    ```mlir
    %q = kiln.linear %x, %wq : tensor<?x64xf32>, tensor<64x64xf32> -> tensor<?x64xf32>
    %k = kiln.linear %x, %wk {format = "q4_k"}
        : tensor<?x256xf32>, tensor<128x144xi8> -> tensor<?x128xf32>
    ```
  }];
  let arguments = (ins Kiln_Activation:$input,
                       2DTensorOf<[F16, BF16, F32, I8]>:$weight,
                       OptionalAttr<StrAttr>:$format,
                       OptionalAttr<StrAttr>:$act_quant);
  let results = (outs Kiln_Activation:$result);
  let extraClassDeclaration = [{
    /// True when activations are quantized to int8 per 32-element block.
    bool hasQuantizedActivations() { return getActQuant().has_value(); }
  }];
  let assemblyFormat =
      "$input `,` $weight attr-dict `:` type($input) `,` type($weight) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_QuantizedLinearOp : Kiln_Op<"quantized_linear", [Pure]> {
  let summary = "Linear layer with integer weights: x * dequant(W)^T";
  let description = [{
    Weight-only quantization (W8A16 / W4A16 in the serving stacks' terms):
    `result[n, out] = input[n, in] * W[out, in]^T` where
    `W[o, i] = scales[o, g] * (q[o, i] - zero_points[o, g])`,
    `g = i / group_size` (one group per row when `group_size` is 0).

    * `bits = 8`: `qweight` is `[out, in]` i8 (q in [-127, 127]),
      symmetric (no zero points), scales `[out]` (group_size 0).
    * `bits = 4`: `qweight` is `[out, ceil(in / 2)]` bytes, two unsigned
      4-bit values per byte (element `2j` in the low nibble, `2j + 1` in the
      high one); scales `[out, G]` f32 and zero points `[out, G]` (one byte
      each, 0..15), `G = ceil(in / group_size)`; the last group of a row may
      be shorter.

    * `bits = 8` with `group_size > 0` (e.g. GGUF Q8_0 kept quantized,
      groups of 32): symmetric int8 `[out, in]`, scales `[out, G]`.

    Scales are f32. By default (`act_quant` absent or `"none"`) activations
    stay in the compute type (W8A16 / W4A16). SmoothQuant's W8A8 (Xiao et
    al. 2023) sets `act_quant` (8-bit per-channel weights only):

    * `"int8_per_token"`: each input row r is quantized on the fly,
      `sx[r] = max_i |x[r, i]| / 127`, `xq = clamp(round(x / sx[r]), -127, 127)`,
      and `result[r, o] = sx[r] * scales[o] * sum_i xq[r, i] * q[o, i]`
      (int32 accumulation);
    * `"int8_per_tensor"`: the same with the static `act_scale` (f32,
      from calibration) for every row.

    ```mlir
    %q = kiln.quantized_linear %x, %wq, %sq {bits = 8 : i64, group_size = 0 : i64}
        : tensor<?x64xf32>, tensor<64x64xi8>, tensor<64xf32> -> tensor<?x64xf32>
    %f = kiln.quantized_linear %x, %w1, %s1, %z1 {bits = 4 : i64, group_size = 128 : i64}
        : tensor<?x64xf32>, tensor<172x32xi8>, tensor<172x1xf32>, tensor<172x1xi8>
        -> tensor<?x172xf32>
    ```
  }];
  let arguments = (ins Kiln_Activation:$input, 2DTensorOf<[I8]>:$qweight,
                       RankedTensorOf<[F32]>:$scales,
                       Optional<2DTensorOf<[I8]>>:$zero_points,
                       ConfinedAttr<I64Attr, [IntPositive]>:$bits,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$group_size,
                       OptionalAttr<StrAttr>:$act_quant,
                       OptionalAttr<F32Attr>:$act_scale);
  let results = (outs Kiln_Activation:$result);
  let extraClassDeclaration = [{
    /// True when activations are quantized to int8 (SmoothQuant W8A8).
    bool hasQuantizedActivations() {
      return getActQuant() && *getActQuant() != "none";
    }
  }];
  let assemblyFormat = [{
    $input `,` $qweight `,` $scales (`,` $zero_points^)? attr-dict `:`
    type($input) `,` type($qweight) `,` type($scales)
    (`,` type($zero_points)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_RopeOp : Kiln_Op<"rope", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "Rotary position embedding (adjacent-pair layout)";
  let description = [{
    RoFormer (Su et al. 2021), eq. 34, in the layout of Meta's Llama code:
    within each of `num_heads` heads of `head_dim`, the pair `(2i, 2i+1)`,
    `i < rotary_dim / 2`, of token `t` is rotated by angle
    `(position + t) * inv_freq(i)`, `inv_freq(i) = theta^(-2i / head_dim)`
    without scaling. Context-extension scaling (formulas in
    runtime/include/kiln_rt/rope_scaling.h):

    * `scaling` absent or `"linear"`: `inv_freq(i) / scaling_factor`
      (linear position interpolation, Chen et al. 2023); factor 1.0 is none.
    * `"dynamic"`: dynamic NTK; when the sequence `position + tokens`
      exceeds `original_max_positions`, theta grows to
      `theta * (f * L / original - (f - 1))^(rotary_dim / (rotary_dim - 2))`.
    * `"llama3"`: Llama 3.1's three frequency bands with `scaling_factor`,
      `low_freq_factor`, `high_freq_factor`, `original_max_positions`.

    With `freq_factors` (`[rotary_dim / 2]` f32, GGUF `rope_freqs.weight`)
    `inv_freq(i) = theta^(-2i / head_dim) / freq_factors[i]` instead (no
    `scaling` allowed then).

    In the batched step entry point `position` is the `!kiln.batch`: row
    `r` is rotated by the angle of its own position `positions[r]`
    (sequences at different positions share one call); only unscaled RoPE
    has that form so far.

    ```mlir
    %br = kiln.rope %q, %batch {num_heads = 8 : i64, head_dim = 8 : i64,
                                rotary_dim = 8 : i64, theta = 1.0e+04 : f32}
        : tensor<?x64xf32>, !kiln.batch
    %qr = kiln.rope %q, %pos {num_heads = 8 : i64, head_dim = 8 : i64,
                              rotary_dim = 8 : i64, theta = 1.0e+04 : f32}
        : tensor<?x64xf32>
    %kr = kiln.rope %k, %pos {num_heads = 2 : i64, head_dim = 8 : i64,
                              rotary_dim = 8 : i64, theta = 5.0e+05 : f32,
                              scaling = "llama3", scaling_factor = 8.0 : f32,
                              low_freq_factor = 1.0 : f32, high_freq_factor = 4.0 : f32,
                              original_max_positions = 8192 : i64}
        : tensor<?x16xf32>
    %fr = kiln.rope %q, %pos freq_factors(%ff : tensor<4xf32>)
        {num_heads = 8 : i64, head_dim = 8 : i64, rotary_dim = 8 : i64,
         theta = 5.0e+05 : f32} : tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Kiln_Activation:$input, Kiln_Position:$position,
                       Optional<1DTensorOf<[F32]>>:$freq_factors,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
                       ConfinedAttr<I64Attr, [IntPositive]>:$head_dim,
                       ConfinedAttr<I64Attr, [IntPositive]>:$rotary_dim,
                       F32Attr:$theta,
                       DefaultValuedAttr<F32Attr, "1.0">:$scaling_factor,
                       OptionalAttr<StrAttr>:$scaling,
                       OptionalAttr<F32Attr>:$low_freq_factor,
                       OptionalAttr<F32Attr>:$high_freq_factor,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$original_max_positions);
  let results = (outs Kiln_Activation:$result);
  let builders = [
    // Plain RoPE (no scaling, no frequency factors).
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$input,
                   "::mlir::Value":$position, "::mlir::IntegerAttr":$num_heads,
                   "::mlir::IntegerAttr":$head_dim,
                   "::mlir::IntegerAttr":$rotary_dim,
                   "::mlir::FloatAttr":$theta,
                   "::mlir::FloatAttr":$scaling_factor), [{
      build($_builder, $_state, result, input, position, ::mlir::Value(),
            num_heads, head_dim, rotary_dim, theta, scaling_factor,
            ::mlir::StringAttr(), ::mlir::FloatAttr(), ::mlir::FloatAttr(),
            ::mlir::IntegerAttr());
    }]>
  ];
  let extraClassDeclaration = [{
    /// True when the angles are plain theta^(-2i/head_dim) per position
    /// (no scaling, no frequency factors).
    /// True in the batched step: per-row positions from the !kiln.batch.
    bool isBatched() { return ::llvm::isa<BatchType>(getPosition().getType()); }
    bool isUnscaled() {
      return !getFreqFactors() &&
             (!getScaling() || *getScaling() == "linear") &&
             getScalingFactor().isExactlyValue(1.0);
    }
  }];
  let assemblyFormat = [{
    $input `,` $position
    (`freq_factors` `(` $freq_factors^ `:` type($freq_factors) `)`)?
    attr-dict `:` custom<WithPositionType>(type($input), type($position))
  }];
  let hasVerifier = 1;
}

def Kiln_AttentionOp : Kiln_Op<"attention", [
    MemoryEffects<[MemRead<Kiln_KVCacheResource>, MemWrite<Kiln_KVCacheResource>]>]> {
  let summary = "Causal grouped-query attention through a KV cache";
  let description = [{
    Appends `key`/`value` (`[n, num_kv_heads * head_dim]`) of the new tokens
    to layer `layer` of `kv_cache` at rows `[position, position + n)`, then
    computes for each new token `i` and head `h` (GQA, Ainslie et al. 2023:
    KV head `h / (num_heads / num_kv_heads)`)
    `softmax(q_i,h . K^T * scale) V` over cached rows `[0, position + i]`.
    `query` and `result` are `[n, num_heads * head_dim]`.

    ```mlir
    %o = kiln.attention %q, %k, %v, %cache, %pos
        {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 4 : i64,
         head_dim = 8 : i64, scale = 0.353553385 : f32}
        : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>,
          !kiln.kv_cache<5, 512, 4, 8, f32> -> tensor<?x64xf32>
    ```

    Key centering (8-bit caches only, written by `kiln-center-keys`): with
    `key_mean` mu (`[num_kv_heads * head_dim]` f32, the calibrated mean of
    the pre-RoPE key), `key_mean_theta` and `key_mean_rotary_dim`, the cache
    stores each key of position `t` as `k - m_t` and attention reads
    `dequant + m_t`, where `m_t` is mu rotated by RoPE (adjacent pairs,
    angle `t * theta^(-2i / head_dim)` for `2i < key_mean_rotary_dim`).
    With `sliding_window` W (Mistral; a banded causal mask) token `i` sees
    only cached rows `[max(0, position + i - W + 1), position + i]`, the W
    most recent positions including its own; the cache still keeps every
    row.

    Exact in real arithmetic; it takes the per-channel offset of the keys
    out of the 8-bit quantization (kernel_abi.h,
    kiln_k_attention_kv8_centered; cf. KVQuant, Hooper et al. 2024).

    ```mlir
    %o = kiln.attention %q, %k, %v, %cache, %pos key_mean(%mu : tensor<32xf32>)
        {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 4 : i64,
         head_dim = 8 : i64, scale = 0.353553385 : f32,
         key_mean_theta = 1.0e+04 : f32, key_mean_rotary_dim = 8 : i64}
        : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>,
          !kiln.kv_cache<5, 512, 4, 8, f8E4M3FN> -> tensor<?x64xf32>
    ```

    With `sparse` (a `#kiln.sparse_attention`, written by
    `kiln-sparse-attention`) a prefill step attends per query block only to
    the key blocks its estimate keeps (dynamic block-sparse attention,
    docs/sparse-attention.md); caches of the activation dtype only, no
    sliding window or key centering. In the batched step each sequence's
    multi-row chunk selects the same way and its one-row decode rows run
    dense. A one-row (decode) attention with `sparse` selects pages from
    the key summaries of a `!kiln.kv_cache<..., summary = B>` (Quest), B
    the attribute's block; a cache with summaries must only be written by
    sparse attention (the kernels that keep them up to date).

    In the batched step entry point the cache is a `!kiln.paged_kv_cache`
    and `position` the `!kiln.batch`: each sequence of the batch appends
    its rows at its positions through its block table and attends over its
    own positions only (kernel_abi.h kiln_k_paged_attention_batch), with
    the same arithmetic per sequence as running it alone.

    ```mlir
    %o = kiln.attention %q, %k, %v, %cache, %batch
        {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 4 : i64,
         head_dim = 8 : i64, scale = 0.353553385 : f32}
        : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>,
          !kiln.paged_kv_cache<5, 4, 8, f32>, !kiln.batch -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Kiln_Activation:$query, Kiln_Activation:$key,
                       Kiln_Activation:$value, Kiln_AnyKVCache:$kv_cache,
                       Kiln_Position:$position,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$layer,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_heads,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_kv_heads,
                       ConfinedAttr<I64Attr, [IntPositive]>:$head_dim,
                       F32Attr:$scale,
                       DefaultValuedAttr<BoolAttr, "true">:$causal,
                       Optional<1DTensorOf<[F32]>>:$key_mean,
                       OptionalAttr<F32Attr>:$key_mean_theta,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$key_mean_rotary_dim,
                       OptionalAttr<I64Attr>:$sliding_window,
                       OptionalAttr<Kiln_SparseAttentionAttr>:$sparse);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $kv_cache `,` $position
    (`key_mean` `(` $key_mean^ `:` type($key_mean) `)`)? attr-dict `:`
    type($query) `,` type($key) `,` type($value) `,`
    custom<WithPositionType>(type($kv_cache), type($position)) `->` type($result)
  }];
  let extraClassDeclaration = [{
    /// True in the batched step: a !kiln.paged_kv_cache and a !kiln.batch.
    bool isBatched() { return ::llvm::isa<BatchType>(getPosition().getType()); }
    /// Geometry of the cache operand, contiguous or paged.
    int64_t getCacheLayers();
    int64_t getCacheKvHeads();
    int64_t getCacheHeadDim();
    ::mlir::Type getCacheElementType();
    bool isCacheQuantized();
    bool isCacheFp8();
  }];
  let hasVerifier = 1;
}

class Kiln_ElementwiseUnaryOp<string mnemonic, string summaryText>
    : Kiln_Op<mnemonic, [Pure, SameOperandsAndResultType]> {
  let summary = summaryText;
  let arguments = (ins Kiln_Activation:$input);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

class Kiln_ElementwiseBinaryOp<string mnemonic, string summaryText>
    : Kiln_Op<mnemonic, [Pure, SameOperandsAndResultType]> {
  let summary = summaryText;
  let arguments = (ins Kiln_Activation:$lhs, Kiln_Activation:$rhs);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Kiln_SiluOp : Kiln_ElementwiseUnaryOp<"silu", "SiLU: x * sigmoid(x)"> {
  let description = [{
    Elfwing et al. 2017 / Hendrycks & Gimpel 2016 (sigmoid-weighted linear unit).

    ```mlir
    %s = kiln.silu %gate : tensor<?x172xf32>
    ```
  }];
}

def Kiln_SwigluOp : Kiln_ElementwiseBinaryOp<"swiglu", "SwiGLU gate: silu(gate) * up"> {
  let description = [{
    Shazeer 2020, "GLU Variants Improve Transformer", eq. 6 (the gating part;
    the projections are separate `kiln.linear` ops). `lhs` is the gate.

    ```mlir
    %a = kiln.swiglu %gate, %up : tensor<?x172xf32>
    ```
  }];
}

def Kiln_MulOp : Kiln_ElementwiseBinaryOp<"mul", "Elementwise product"> {
  let description = [{
    ```mlir
    %p = kiln.mul %a, %b : tensor<?x172xf32>
    ```
  }];
  let hasCanonicalizer = 1;
}

def Kiln_AddOp : Kiln_ElementwiseBinaryOp<"add", "Elementwise sum (residual)"> {
  let description = [{
    ```mlir
    %h2 = kiln.add %h, %attn_out : tensor<?x64xf32>
    ```
  }];
}

def Kiln_AddBiasOp : Kiln_Op<"add_bias", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "Adds a bias vector to every row (the bias of a linear layer)";
  let description = [{
    `result[n, j] = input[n, j] + bias[j]`; input `[n, width]`, bias
    `[width]` of the same element type. Kept apart from `kiln.linear` so
    that a linear in any weight format (float, block formats, quantized)
    takes a bias, and passes that rewrite or scale linears need not know
    about it (Qwen2's q/k/v projection biases).

    ```mlir
    %qb = kiln.add_bias %q, %bq : tensor<?x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Kiln_Activation:$input, 1DTensorOf<[F16, BF16, F32]>:$bias);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "$input `,` $bias attr-dict `:` type($input) `,` type($bias)";
  let hasVerifier = 1;
}

def Kiln_AllReduceOp : Kiln_Op<"all_reduce", [
    AllTypesMatch<["input", "result"]>,
    MemoryEffects<[MemRead<Kiln_CommResource>, MemWrite<Kiln_CommResource>]>]> {
  let summary = "Elementwise sum of a tensor over the ranks of a tensor-parallel group";
  let description = [{
    `result = sum over the group_size ranks r of input_r`, elementwise; every
    rank receives the sum (MPI_Allreduce / ncclAllReduce with a sum). Written
    by `kiln-partition` after each row-parallel linear (the attention output
    projection and the FFN down projection), whose per-rank products are
    partial sums of the full one: Megatron-LM's `g` operator (Shoeybi et
    al. 2019, section 3), two per layer. A ring all-reduce moves
    `2 (N - 1) / N` times the tensor's bytes per rank.

    ```mlir
    %o = kiln.all_reduce %partial {group_size = 2 : i64} : tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Kiln_Activation:$input,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$group_size);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Kiln_AllGatherOp : Kiln_Op<"all_gather", [
    MemoryEffects<[MemRead<Kiln_CommResource>, MemWrite<Kiln_CommResource>]>]> {
  let summary = "Concatenation of the ranks' column blocks over a tensor-parallel group";
  let description = [{
    `result[r, k * C + c] = input_k[r, c]` for every rank k of the
    `group_size` ranks, on every rank (MPI_Allgather / ncclAllGather of the
    ranks' `[R, C]` blocks, laid out side by side): input `[R, C]`, result
    `[R, group_size * C]`. Written by `kiln-partition` after a
    vocab-parallel classifier, whose rank computes the logits of its
    `vocab / group_size` rows of the output weight (Megatron-LM's
    parallel output embedding, Shoeybi et al. 2019, section 3). Moves
    `(N - 1) / N` of the result's bytes into each rank.

    ```mlir
    %l = kiln.all_gather %part {group_size = 2 : i64} : tensor<1x256xf32> -> tensor<1x512xf32>
    ```
  }];
  let arguments = (ins Kiln_Activation:$input,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$group_size);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

// Sequence parallelism (Korthikanti et al. 2022, "Reducing Activation
// Recomputation in Large Transformer Models", section 4.2.2): between the
// tensor-parallel regions the residual stream, its add and rms_norm run on
// the rank's shard of the rows (tokens). Rank r of N holds rows
// [floor(n r / N), floor(n (r + 1) / N)) of an n-row activation when n >=
// min_tokens, and every row (plain tensor parallelism) below it: one rule,
// kernel_abi.h kiln_sequence_shard, shared by the ops below, the lowering
// and the kernels. Written by `kiln-sequence-parallel`.
class Kiln_SequenceCollective<string mnemonic, string summaryText>
    : Kiln_Op<mnemonic, [AllTypesMatch<["input", "result"]>,
        MemoryEffects<[MemRead<Kiln_CommResource>, MemWrite<Kiln_CommResource>]>]> {
  let summary = summaryText;
  let arguments = (ins Kiln_Activation:$input,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$group_size,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$min_tokens);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Kiln_ReduceScatterOp : Kiln_SequenceCollective<"reduce_scatter",
    "Sum over a tensor-parallel group, each rank keeping its sequence shard"> {
  let description = [{
    `result = rows of this rank's sequence shard of (sum over the
    group_size ranks r of input_r)`: input `[n, C]` (every row, a partial
    sum on each rank), result the shard's rows `[n_r, C]` (MPI_Reduce_
    scatter / ncclReduceScatter; MLIR's `shard.reduce_scatter` with
    `scatter_axis = 0`). Below `min_tokens` rows it is `kiln.all_reduce`
    (every rank gets every row). Sequence parallelism's replacement of the
    all-reduce after a row-parallel linear (Korthikanti et al. 2022,
    operator g-bar): the same sum with half the traffic, `(N - 1) / N` of
    the input's bytes per rank.

    ```mlir
    %s = kiln.reduce_scatter %partial {group_size = 2 : i64, min_tokens = 64 : i64} : tensor<?x64xf32>
    ```
  }];
}

def Kiln_AllSliceOp : Kiln_SequenceCollective<"all_slice",
    "This rank's sequence shard of a tensor every rank holds"> {
  let description = [{
    `result = input[rows of this rank's sequence shard]`: input `[n, C]`,
    the same on every rank (the embedding's output, a pipeline stage's
    received residual stream), result `[n_r, C]`; every row below
    `min_tokens` rows. Local: no communication (MLIR's `shard.all_slice`
    with `slice_axis = 0`). Starts the sharded residual stream.

    ```mlir
    %h = kiln.all_slice %x {group_size = 2 : i64, min_tokens = 64 : i64} : tensor<?x64xf32>
    ```
  }];
}

def Kiln_AllGatherRowsOp : Kiln_SequenceCollective<"all_gather_rows",
    "The ranks' sequence shards put back together"> {
  let description = [{
    `result[rows of rank r's shard] = input_r` for every rank r of the
    group: input the shard `[n_r, C]`, result every row `[n, C]`
    (MPI_Allgatherv / ncclAllGather; MLIR's `shard.all_gather` with
    `gather_axis = 0`). Below `min_tokens` rows every rank already holds
    every row and it copies. Sequence parallelism's operator g (Korthikanti
    et al. 2022): the normed sequence before a column-parallel linear,
    `(N - 1) / N` of the result's bytes into each rank.

    With `wire_quant` (an 8-bit all-gather, written by
    `kiln-sequence-parallel{int8-gather=true}` when every reader of the
    result quantizes it to int8 anyway: SmoothQuant W8A8 or GGUF block
    linears with `act_quant`), each rank quantizes its shard's f32 rows by
    the readers' own rule and sends int8 codes plus their f32 scales; the
    result is `q * scale`. A reader quantizing `q * scale` again gets the
    same codes `q` and a scale within one ulp of the sender's, so the 8-bit
    gather costs no accuracy while it moves `1/4` of the bytes (plus
    `4 / cols` per row for per-token scales, `1 / 8` for per-block ones):

    * `"int8_per_token"`: `s[r] = max_i |x[r, i]| / 127`,
      `q = clamp(round(x / s[r]), -127, 127)` (kiln.quantized_linear's
      per-token rule);
    * `"int8_per_block"`: the same per 32 consecutive elements (kiln.linear
      `act_quant = "int8_per_block"`, llama.cpp's Q8_0 activations); cols a
      multiple of 32;
    * `"int8_per_tensor"`: the static `wire_scale` (the readers' common
      `act_scale`), no scales on the wire.

    ```mlir
    %x = kiln.all_gather_rows %normed {group_size = 2 : i64, min_tokens = 64 : i64} : tensor<?x64xf32>
    %x8 = kiln.all_gather_rows %normed {group_size = 2 : i64, min_tokens = 64 : i64, wire_quant = "int8_per_token"} : tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Kiln_Activation:$input,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$group_size,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$min_tokens,
                       OptionalAttr<StrAttr>:$wire_quant,
                       OptionalAttr<F32Attr>:$wire_scale);
}

def Kiln_ReduceScatterAddRmsNormOp : Kiln_Op<"reduce_scatter_add_rms_norm", [
    AllTypesMatch<["partial", "residual", "sum", "normed"]>,
    MemoryEffects<[MemRead<Kiln_CommResource>, MemWrite<Kiln_CommResource>]>]> {
  let summary = "Communication fusion: reduce-scatter, residual add and rms_norm in one kernel";
  let description = [{
    `s = kiln.reduce_scatter partial; sum = residual + s; normed =
    rms_norm(sum, weight, epsilon)` (the three ops of a sequence-parallel
    layer boundary, Korthikanti et al. 2022) as one call: the collective's
    result is written straight into `sum` and the add and norm run over the
    rank's shard rows while they are in cache, instead of three kernels and
    a round trip of `s` through memory (TensorRT-LLM's all-reduce fusion
    with RESIDUAL_RMS_NORM; vLLM's fused_add_rms_norm after its
    sequence-parallel reduce-scatter). `residual`, `sum` and `normed` are
    the shard `[n_r, C]`, `partial` every row `[n, C]`; below `min_tokens`
    rows the collective is the all-reduce and every rank holds every row.
    Written by `kiln-sequence-parallel{fuse-norm=true}`.

    ```mlir
    %h, %n = kiln.reduce_scatter_add_rms_norm %o, %h0, %w {epsilon = 1.0e-05 : f32, group_size = 2 : i64, min_tokens = 64 : i64} : tensor<?x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Kiln_Activation:$partial, Kiln_Activation:$residual,
                       1DTensorOf<[F16, BF16, F32]>:$weight,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$group_size,
                       ConfinedAttr<I64Attr, [IntMinValue<2>]>:$min_tokens,
                       F32Attr:$epsilon);
  let results = (outs Kiln_Activation:$sum, Kiln_Activation:$normed);
  let assemblyFormat = "$partial `,` $residual `,` $weight attr-dict `:` type($partial) `,` type($weight)";
  let hasVerifier = 1;
}

def Kiln_SendOp : Kiln_Op<"send", [
    MemoryEffects<[MemRead<Kiln_CommResource>, MemWrite<Kiln_CommResource>]>]> {
  let summary = "Sends an activation to another pipeline stage";
  let description = [{
    Point-to-point transfer of `input` (`[R, C]`, every row) to pipeline
    stage `destination` (MPI_Send / ncclSend to the rank of that stage with
    the same tensor-parallel rank; the name and meaning of MLIR's
    `shard.send`). Written by `kiln-partition{pp=M stage=S}` at the end of
    a stage that is not the last: the residual stream entering the next
    stage's first layer (GPipe, Huang et al. 2019; Megatron-LM's pipeline
    schedule, Narayanan et al. 2021). Moves `R * C * sizeof(elem)` bytes
    per step: `dim * sizeof(elem)` per token, independent of the layer
    count. Pairs with a `kiln.recv {source = S}` in stage `destination`'s
    program.

    ```mlir
    kiln.send %h {destination = 1 : i64} : tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Kiln_Activation:$input,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$destination);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Kiln_RecvOp : Kiln_Op<"recv", [
    MemoryEffects<[MemRead<Kiln_CommResource>, MemWrite<Kiln_CommResource>]>]> {
  let summary = "Receives an activation from another pipeline stage";
  let description = [{
    The matching end of a `kiln.send {destination = S}` in pipeline stage
    `source`'s program: `result` (`[R, C]`) is that stage's `input`. Its
    rows are the entry point's token count (the dynamic dimension, as for
    every activation of the function). Written by
    `kiln-partition{pp=M stage=S}` at the start of a stage that is not the
    first, in place of the layers before it (MLIR's `shard.recv`).

    ```mlir
    %h = kiln.recv {source = 0 : i64} : tensor<?x64xf32>
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$source);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Kiln_LogitsOp : Kiln_Op<"logits", [Pure]> {
  let summary = "Classifier logits of the last token";
  let description = [{
    `result[0, v] = hidden[n - 1, :] . weight[v, :]`: the language-model head
    applied to the last token only (what sampling needs after prefill or a
    decode step). hidden `[n, dim]`, weight `[vocab, dim]`, result
    `[1, vocab]`. With `format` the weight is kept in a GGML block format,
    and `act_quant` quantizes the hidden row, as on kiln.linear. With
    `all_rows` every row of `hidden` is classified: result `[n, vocab]`
    (the batched step, after `kiln.last_rows`).

    ```mlir
    %l = kiln.logits %h, %wcls : tensor<?x64xf32>, tensor<512x64xf32> -> tensor<1x512xf32>
    ```
  }];
  let arguments = (ins Kiln_Activation:$hidden,
                       2DTensorOf<[F16, BF16, F32, I8]>:$weight,
                       OptionalAttr<StrAttr>:$format,
                       OptionalAttr<StrAttr>:$act_quant,
                       UnitAttr:$all_rows);
  let results = (outs Kiln_Activation:$result);
  let extraClassDeclaration = [{
    /// True when the hidden row is quantized to int8 per 32-element block.
    bool hasQuantizedActivations() { return getActQuant().has_value(); }
  }];
  let assemblyFormat =
      "$hidden `,` $weight attr-dict `:` type($hidden) `,` type($weight) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_LastRowsOp : Kiln_Op<"last_rows", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "The last row of every sequence of a batched step";
  let description = [{
    `result[s, :] = input[row_start[s] + row_count[s] - 1, :]` for each
    sequence `s` of `batch` (`!kiln.batch`): the rows whose logits the
    step samples. input and result `[?, width]`; the result has one row per
    sequence.

    ```mlir
    %last = kiln.last_rows %h, %batch : tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Kiln_Activation:$input, Kiln_BatchType:$batch);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "$input `,` $batch attr-dict `:` type($input)";
}

def Kiln_SliceColumnsOp : Kiln_Op<"slice_columns", [Pure]> {
  let summary = "Columns [offset, offset + width) of every row";
  let description = [{
    `result[n, j] = input[n, offset + j]` for `j < width`; input `[n, in]`,
    result `[n, width]`, same element type. Written by `kiln-fuse` when
    linears that share an input become one linear over concatenated weights
    (horizontal fusion): each former result is a column range of the fused
    one. Inside a `kiln.fused` region it costs nothing (the generated
    epilogue stores each range to its own buffer); alone it is a copy.

    ```mlir
    %q = kiln.slice_columns %qkv {offset = 0 : i64} : tensor<?x96xf32> -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Kiln_Activation:$input,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$offset);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat =
      "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def Kiln_FusedOp : Kiln_Op<"fused", [IsolatedFromAbove, SingleBlock,
    RecursiveMemoryEffects]> {
  let summary = "A fused region: kiln ops that codegen emits as one kernel";
  let description = [{
    Formed by `kiln-fuse` (docs/fusion.md), or around a single op by
    `kiln-outline-kernels`. The region's block arguments
    are the operands, in order; `kiln.yield` gives the results. The body is
    kiln ops that codegen instantiates together into one generated kernel:
    at most one linear anchor (`kiln.linear`, float, 16-bit or block-format
    weights, or a weight-only `kiln.quantized_linear`), an optional
    `kiln.rms_norm` prologue feeding it, `kiln.slice_columns` of its result
    and elementwise epilogue ops (`kiln.add`, `kiln.mul`, `kiln.silu`,
    `kiln.swiglu`, `kiln.add_bias`, and unscaled `kiln.rope` of a column
    slice, its position an index operand); or, without a linear, a chain of
    elementwise ops computed in one loop. `families` lists the fusion
    families that formed the region (`horizontal`, `prologue`, `epilogue`,
    `elementwise`), for reports and traces; it is empty for a region of a
    single op (`kiln-outline-kernels`). Values are f32, f16 or bf16:
    the generated kernel widens 16-bit operands exactly, computes in f32 and
    rounds each result once to its element type.

    ```mlir
    %a = kiln.fused(%x, %nw, %w13) attributes {families = ["horizontal", "prologue", "epilogue"]} {
    ^bb0(%x0: tensor<?x64xf32>, %n0: tensor<64xf32>, %w0: tensor<344x64xf32>):
      %xn = kiln.rms_norm %x0, %n0 {epsilon = 1.0e-05 : f32} : tensor<?x64xf32>, tensor<64xf32>
      %gu = kiln.linear %xn, %w0 : tensor<?x64xf32>, tensor<344x64xf32> -> tensor<?x344xf32>
      %g = kiln.slice_columns %gu {offset = 0 : i64} : tensor<?x344xf32> -> tensor<?x172xf32>
      %u = kiln.slice_columns %gu {offset = 172 : i64} : tensor<?x344xf32> -> tensor<?x172xf32>
      %s = kiln.swiglu %g, %u : tensor<?x172xf32>
      kiln.yield %s : tensor<?x172xf32>
    } : (tensor<?x64xf32>, tensor<64xf32>, tensor<344x64xf32>) -> tensor<?x172xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyTypeOf<[AnyRankedTensor, Index]>>:$inputs,
                       TypedArrayAttrBase<StrAttr, "fusion families">:$families);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `(` $inputs `)` attr-dict-with-keyword $body `:` functional-type($inputs, $results)
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The linear anchor of the region (kiln.linear or
    /// kiln.quantized_linear), if any.
    ::mlir::Operation *getAnchor();
  }];
}

def Kiln_YieldOp : Kiln_Op<"yield", [Pure, Terminator]> {
  let summary = "The results of a kiln.fused region";
  let description = [{
    Terminates the region of a `kiln.fused` op (and of the
    `plan.fused_kernel` it is outlined into by `kiln-lower-to-plan`).
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

//===----------------------------------------------------------------------===//
// Calibration
//===----------------------------------------------------------------------===//

def Kiln_ObserveOp : Kiln_Op<"observe", [
    MemoryEffects<[MemRead<Kiln_ObserverResource>, MemWrite<Kiln_ObserverResource>]>]> {
  let summary = "Hand an activation to the calibration observer";
  let description = [{
    Calibration (kiln-calibrate, docs/quantization.md) needs the statistics
    of the inputs of the linear layers and of the pre-RoPE keys (for key
    centering of 8-bit KV caches). `kiln.observe` passes every row of
    `input` (`[n, C]` f32, one row per token) to the observer registered on
    the running session (`kiln_rt_session_set_observer`), tagged with the tap
    name `tap`; it computes nothing and has no result. Its side effect on the
    observer keeps it alive through canonicalization, and the memory plan
    keeps `input` alive until it runs. `kiln-insert-observers` inserts these
    ops; they lower to `kiln_k_observe` (CPU target only).

    `tap` is non-empty and made of `[A-Za-z0-9_.-]` (it names tensors of the
    calibration file).

    ```mlir
    kiln.observe %x {tap = "layers.0.attn_in"} : tensor<?x64xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[F32]>:$input, StrAttr:$tap);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

#endif // KILN_DIALECTS_KILN_IR_KILNOPS_TD

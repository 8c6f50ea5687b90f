//===- KilnAttrs.td - kiln dialect attributes --------------*- tablegen -*-===//

#ifndef KILN_DIALECTS_KILN_IR_KILNATTRS_TD
#define KILN_DIALECTS_KILN_IR_KILNATTRS_TD

include "dialects/Kiln/IR/KilnBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

def Kiln_WeightSourceAttr : AttrDef<Kiln_Dialect, "WeightSource"> {
  let mnemonic = "source";
  let summary = "Where the stored bytes of a weight live";
  let description = [{
    Names the checkpoint file, the tensor inside it, the storage type
    (`f32`, `f16`, `bf16`, `q8_0`, `q4_0`, `i32` (packed integers, only
    under a `repack` transform), `synthetic`), its logical row-major shape
    as stored (`[out, in]` for matrices), the byte offset of its first
    element and its stored byte count. For `synthetic` weights the
    file is empty, `seed` selects the deterministic pseudo-random stream and
    values lie in `[center - scale, center + scale]`.

    ```mlir
    #kiln.source<file = "/m/stories260K.bin", tensor = "wq[0]",
                 storage = "f32", shape = array<i64: 64, 64>, offset = 133148,
                 bytes = 16384>
    #kiln.source<file = "", tensor = "synthetic", storage = "synthetic",
                 shape = array<i64: 64>, offset = 0, bytes = 0, seed = 7,
                 scale = 2.0e-02 : f32, center = 0.0 : f32>
    ```
  }];
  let parameters = (ins StringRefParameter<>:$file,
                        StringRefParameter<>:$tensor,
                        StringRefParameter<>:$storage,
                        "::mlir::DenseI64ArrayAttr":$shape,
                        "uint64_t":$offset, "uint64_t":$bytes,
                        DefaultValuedParameter<"uint64_t", "0">:$seed,
                        OptionalParameter<"::mlir::FloatAttr">:$scale,
                        OptionalParameter<"::mlir::FloatAttr">:$center);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Kiln_WeightTransformAttr : AttrDef<Kiln_Dialect, "WeightTransform"> {
  let mnemonic = "transform";
  let summary = "A pending transform of a weight, applied when materialized";
  let description = [{
    One step of a weight's recipe, applied in order after decoding the
    stored bytes to the compute type. `kind` is one of:
    * `"dequantize"` — decode the storage type (params: none);
    * `"rope_half_to_adjacent"` — reorder the rows of each of `heads` heads
      from Hugging Face's rotate-half order to the adjacent-pair order of
      `kiln.rope` (params: `heads`);
    * `"quantize"` — symmetric round-to-nearest integer quantization of the
      rows (params: `bits` = 8, `group_size` (0: one scale per row), `part`
      = `"qweight"` for the integers or `"scales"` for the f32 scales:
      `scale = max|w| / 127`, `q = round(w / scale)`; `bits` = 4: GPTQ's
      asymmetric group quantizer, `part` also `"zeros"`; optional `method` =
      `"rtn"` (default) or `"gptq"` with `calibration` (file), `hessian`
      (tensor name in it), `act_order` (bool) and `damp` (f64): GPTQ
      computed by the artifact writer, docs/quantization.md);
    * `"scale"` — multiply the rows (`axis = 0`; the elements of a vector)
      or the columns (`axis = 1`) of the weight by `factors` (1-D f32), as
      written by the AWQ and SmoothQuant passes;
    * `"repack"` — exact conversion of a pre-quantized checkpoint tensor into
      one part of Kiln's quantized-linear layout (always first; params:
      `format` = `"gptq"` (v1 zeros stored minus one), `"gptq_v2"`, `"awq"`,
      `"q4_0"` or `"q8_0"`, `part` = `"qweight"`, `"scales"` or `"zeros"`,
      `bits`, `group_size`, `rows` / `cols` = the linear's out / in
      features; see docs/quantization.md, "Pre-quantized checkpoints").

    ```mlir
    #kiln.transform<"rope_half_to_adjacent", {heads = 8 : i64}>
    #kiln.transform<"scale", {axis = 1 : i64, factors = dense<[0.5, 2.0]> : tensor<2xf32>}>
    ```
  }];
  let parameters = (ins StringRefParameter<>:$kind, "::mlir::DictionaryAttr":$params);
  let assemblyFormat = "`<` $kind `,` $params `>`";
  let genVerifyDecl = 1;
}

def Kiln_SparseAttentionAttr : AttrDef<Kiln_Dialect, "SparseAttention"> {
  let mnemonic = "sparse_attention";
  let summary = "Dynamic block-sparse attention: how a kiln.attention selects its keys";
  let description = [{
    Set on a prefill `kiln.attention` by `kiln-sparse-attention`
    (docs/sparse-attention.md; kernel_abi.h kiln_k_attention_sparse). Keys
    and queries are cut into blocks of `block` positions; per (KV head,
    query block) the attention mass on each earlier key block is estimated
    by each query head of the group, from the blocks' mean keys (`mode =
    "flex"`: FlexPrefill's pooled estimate, Lai et al. 2025) or from every
    `stride`-th key on antidiagonals (`mode = "antidiag"`, `stride` in [1,
    block]: XAttention's scoring, Xu et al. 2025), the `sink` first and
    `local` last blocks are always kept, then blocks by their largest
    estimated mass over the group's heads until every head's kept mass
    reaches `gamma` (in (0, 1]; 1 is dense), bounded below by `min_budget`
    keys and above by `max_budget` keys (0: no bound). Steps with fewer
    than `min_tokens` keys, and steps keeping most blocks, run the dense
    kernel.

    `streaming` (optional) lists the KV heads of this layer, ascending, in
    [0, 64), that are streaming heads (DuoAttention, Xiao et al. 2024): they
    keep only the sink and local blocks, with no estimate; the other heads
    are retrieval heads and select by mass. Written by the pass from the
    head scores of `kiln-calibrate --heads`.

    ```mlir
    #kiln.sparse_attention<mode = "flex", gamma = 9.500000e-01 : f32, block = 64, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 1024>
    #kiln.sparse_attention<mode = "flex", gamma = 9.500000e-01 : f32, block = 64, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 1024, streaming = [0, 2]>
    #kiln.sparse_attention<mode = "antidiag", gamma = 9.500000e-01 : f32, block = 64, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 1024, stride = 16>
    ```
  }];
  let parameters = (ins StringRefParameter<>:$mode, "::mlir::FloatAttr":$gamma,
                        "int64_t":$block, "int64_t":$sink, "int64_t":$local,
                        "int64_t":$min_budget, "int64_t":$max_budget,
                        "int64_t":$min_tokens,
                        DefaultValuedParameter<"int64_t", "0">:$stride,
                        OptionalParameter<"::mlir::DenseI64ArrayAttr">:$streaming);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The `streaming` KV heads as a bit mask (bit g: KV head g streams);
    /// 0 without the parameter. The verifier keeps every index below 64.
    uint64_t getStreamingMask() const;
  }];
}

#endif // KILN_DIALECTS_KILN_IR_KILNATTRS_TD

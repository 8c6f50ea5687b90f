//===- KilnTypes.td - kiln dialect types -------------------*- tablegen -*-===//

#ifndef KILN_DIALECTS_KILN_IR_KILNTYPES_TD
#define KILN_DIALECTS_KILN_IR_KILNTYPES_TD

include "dialects/Kiln/IR/KilnBase.td"

def Kiln_KVCacheType : TypeDef<Kiln_Dialect, "KVCache"> {
  let mnemonic = "kv_cache";
  let summary = "Key/value cache of all layers of a decoder";
  let description = [{
    `!kiln.kv_cache<layers, max_seq, kv_heads, head_dim, element_type>`:
    per layer, a key and a value tensor of shape
    `[max_seq, kv_heads * head_dim]`. Attention ops read and write it; it
    carries state across prefill and decode calls. With element type `i8`
    the cache is quantized: each (token, kv head) row of keys and of values
    is stored as int8 with an f32 scale (`scale = max|x| / 127`), and
    attention dequantizes it.

    With `summary = B` (written by `kiln-sparse-attention{decode=quest}`;
    float caches only) each layer also keeps, after its keys and values,
    the element-wise minimum and maximum of the keys of every page of B
    positions (`[ceil(max_seq / B), kv_heads * head_dim]` f32 each, the
    pages' key summaries of Quest, Tang et al. 2024), updated by the
    sparse attention kernels whenever they append rows, read by sparse
    decode to bound each page's attention scores.

    ```mlir
    !kiln.kv_cache<5, 512, 4, 8, f32>
    !kiln.kv_cache<5, 512, 4, 8, f32, summary = 64>
    ```
  }];
  let parameters = (ins "int64_t":$numLayers, "int64_t":$maxSeq,
                        "int64_t":$numKvHeads, "int64_t":$headDim,
                        "::mlir::Type":$elementType,
                        DefaultValuedParameter<"int64_t", "0">:$summaryBlock);
  let assemblyFormat =
      "`<` $numLayers `,` $maxSeq `,` $numKvHeads `,` $headDim `,` $elementType (`,` `summary` `=` $summaryBlock^)? `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// True for an int8 or FP8 E4M3 cache with per-(token, kv-head) scales.
    bool isQuantized() const {
      return getElementType().isInteger(8) ||
             ::llvm::isa<::mlir::Float8E4M3FNType>(getElementType());
    }
    /// True for an FP8 E4M3 cache.
    bool isFp8() const {
      return ::llvm::isa<::mlir::Float8E4M3FNType>(getElementType());
    }
    /// Largest cache the verifier accepts (2^48 bytes), so the byte sizes
    /// and offsets below cannot overflow.
    static constexpr int64_t kMaxKVCacheBytes = int64_t(1) << 48;
    /// Bytes of one layer: keys, values, (8-bit) their scales and (with
    /// summary pages) the pages' key minimum and maximum.
    int64_t getLayerBytes() const;
    /// Pages of the key summaries: ceil(max_seq / summary); 0 without.
    int64_t getSummaryPages() const {
      return getSummaryBlock() > 0
                 ? (getMaxSeq() + getSummaryBlock() - 1) / getSummaryBlock()
                 : 0;
    }
    /// Byte offset of the key minimum summaries within a layer (the
    /// maximum follows, getSummaryPages() * kv_heads * head_dim floats on).
    int64_t getSummaryOffset() const;
    /// Bytes of the whole cache.
    int64_t getSizeInBytes() const;
  }];
}

def Kiln_PagedKVCacheType : TypeDef<Kiln_Dialect, "PagedKVCache"> {
  let mnemonic = "paged_kv_cache";
  let summary = "Paged key/value cache shared by the sequences of a batch";
  let description = [{
    `!kiln.paged_kv_cache<layers, kv_heads, head_dim, element_type>`: the
    KV cache of the batched step entry point (PagedAttention, Kwon et al.
    2023, section 4.2). Per layer a pool of fixed-size blocks of positions,
    each position a key and a value row of `kv_heads * head_dim` elements
    of `element_type` (plus an f32 scale per kv head for an int8 or FP8
    E4M3 cache, as in `!kiln.kv_cache`); each sequence of the batch has a
    block table mapping its positions to pool rows. The pool's size and
    the block size are chosen by the runtime when it starts (kiln-serve
    `--kv-cache-bytes`, `--block-size`), so the type states neither and the
    memory plan allocates nothing for it.

    ```mlir
    !kiln.paged_kv_cache<5, 4, 8, f32>
    ```
  }];
  let parameters = (ins "int64_t":$numLayers, "int64_t":$numKvHeads,
                        "int64_t":$headDim, "::mlir::Type":$elementType);
  let assemblyFormat =
      "`<` $numLayers `,` $numKvHeads `,` $headDim `,` $elementType `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// True for an int8 or FP8 E4M3 cache with per-(token, kv-head) scales.
    bool isQuantized() const {
      return getElementType().isInteger(8) ||
             ::llvm::isa<::mlir::Float8E4M3FNType>(getElementType());
    }
    bool isFp8() const {
      return ::llvm::isa<::mlir::Float8E4M3FNType>(getElementType());
    }
  }];
}

def Kiln_BatchType : TypeDef<Kiln_Dialect, "Batch"> {
  let mnemonic = "batch";
  let summary = "The sequences of one batched step";
  let description = [{
    The `T` token rows of a batched step split into sequences (the
    flattened "varlen" batch of vLLM): sequence `s` owns rows
    `[row_start[s], row_start[s] + row_count[s])` at positions
    `[pos[s], pos[s] + row_count[s])` and has its own block table in the
    `!kiln.paged_kv_cache`. Linears, norms and elementwise ops treat the T
    rows as one matrix; `kiln.rope` rotates each row by its own position,
    `kiln.attention` runs each sequence over its blocks and
    `kiln.last_rows` picks each sequence's last row. At run time it is
    kernel_abi.h's `kiln_batch`.

    ```mlir
    func.func @step(%tokens: tensor<?xi32>, %batch: !kiln.batch,
                    %cache: !kiln.paged_kv_cache<5, 4, 8, f32>)
    ```
  }];
}

#endif // KILN_DIALECTS_KILN_IR_KILNTYPES_TD

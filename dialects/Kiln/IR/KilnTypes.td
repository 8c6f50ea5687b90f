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

    ```mlir
    !kiln.kv_cache<5, 512, 4, 8, f32>
    ```
  }];
  let parameters = (ins "int64_t":$numLayers, "int64_t":$maxSeq,
                        "int64_t":$numKvHeads, "int64_t":$headDim,
                        "::mlir::Type":$elementType);
  let assemblyFormat =
      "`<` $numLayers `,` $maxSeq `,` $numKvHeads `,` $headDim `,` $elementType `>`";
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
    /// Bytes of one layer: keys, values and (int8) their scales.
    int64_t getLayerBytes() const;
    /// Bytes of the whole cache.
    int64_t getSizeInBytes() const;
  }];
}

#endif // KILN_DIALECTS_KILN_IR_KILNTYPES_TD

//===- PlanOps.td - plan dialect ---------------------------*- tablegen -*-===//
//
// The executable plan: static buffers carved out of one activation arena,
// weights at fixed offsets of the weights file, KV-cache views, and kernel
// calls. One func.func per entry point (prefill, decode) taking the token
// count `n` and the start position `pos`.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECTS_PLAN_IR_PLANOPS_TD
#define KILN_DIALECTS_PLAN_IR_PLANOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Plan_Dialect : Dialect {
  let name = "plan";
  let cppNamespace = "::mlir::kiln::plan";
  let summary = "Executable plans: static buffers and kernel calls";
  let dependentDialects = ["::mlir::func::FuncDialect", "::mlir::arith::ArithDialect"];
}

class Plan_Op<string mnemonic, list<Trait> traits = []>
    : Op<Plan_Dialect, mnemonic, traits>;

def Plan_Buffer : MemRefOf<[F16, BF16, F32, I32, I8, F8E4M3FN]>;

def Plan_WeightOp : Plan_Op<"weight", [Symbol, IsolatedFromAbove]> {
  let summary = "A weight at a fixed byte offset of the artifact's weights file";
  let description = [{
    `offset` is the byte offset (a multiple of 64) of the weight in
    `weights.bin`; weights with identical recipes share one offset.

    ```mlir
    plan.weight @layers.0.wq : memref<64x64xf32> {offset = 4096 : i64}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<Plan_Buffer>:$type,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$offset);
  let assemblyFormat = "$sym_name `:` $type attr-dict";
  let hasVerifier = 1;
}

def Plan_WeightRefOp : Plan_Op<"weight_ref",
    [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The buffer of a plan.weight";
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs Plan_Buffer:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

def Plan_ArenaViewOp : Plan_Op<"arena_view", [Pure]> {
  let summary = "A buffer at a static byte offset of the activation arena";
  let description = [{
    The memory plan fixed `offset` (bytes, 64-aligned) for the largest
    size of this buffer; `dynamic_sizes` give the `?` dimensions at run time.

    ```mlir
    %x = plan.arena_view [1024] (%n) : memref<?x64xf32>
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$offset,
                       Variadic<Index>:$dynamic_sizes);
  let results = (outs Plan_Buffer:$result);
  let assemblyFormat = "`[` $offset `]` (`(` $dynamic_sizes^ `)`)? attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Plan_KVCacheViewOp : Plan_Op<"kv_cache_view", [Pure]> {
  let summary = "Keys, values or their scales of one layer of the KV cache";
  let description = [{
    A view at byte `offset` of the runtime's KV cache. Each layer holds, in
    order, keys and values `[max_seq, kv_heads * head_dim]` and, for an int8
    or FP8 E4M3 (`f8E4M3FN`) cache, their per-(token, kv-head) f32 scales
    `[max_seq, kv_heads]`, and, for a cache with key summaries
    (`summary = B`), the pages' key minimum and maximum `[ceil(max_seq /
    B), kv_heads * head_dim]` f32;
    `part` is 0 keys, 1 values, 2 key scales, 3 value scales, 4 key
    minimum, 5 key maximum.

    ```mlir
    %k = plan.kv_cache_view layer 0 part 0 offset 0 : memref<512x32xf32>
    ```
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$layer,
                       ConfinedAttr<I64Attr, [IntMinValue<0>, IntMaxValue<5>]>:$part,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$offset);
  let results = (outs Plan_Buffer:$result);
  let assemblyFormat = "`layer` $layer `part` $part `offset` $offset attr-dict `:` type($result)";
}

def Plan_TokensOp : Plan_Op<"tokens", [Pure]> {
  let summary = "The entry point's input token ids";
  let arguments = (ins Index:$count);
  let results = (outs MemRefRankOf<[I32], [1]>:$result);
  let assemblyFormat = "`(` $count `)` attr-dict `:` type($result)";
}

def Plan_LogitsOp : Plan_Op<"logits", [Pure]> {
  let summary = "The entry point's output logits buffer";
  let results = (outs Plan_Buffer:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def Plan_BatchSizeOp : Plan_Op<"batch_size", [Pure]> {
  let summary = "Number of sequences in the batched step's kiln_batch";
  let description = [{
    The `num_seqs` of the step's batch (kernel_abi.h kiln_batch): the rows
    of the activations after `kiln.last_rows` and of the logits.

    ```mlir
    %s = plan.batch_size
    ```
  }];
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
}

def Plan_SequenceRowsOp : Plan_Op<"sequence_rows", [Pure]> {
  let summary = "Rows of this rank's sequence shard of n rows";
  let description = [{
    Sequence parallelism (kiln.reduce_scatter, kiln.all_slice): the rows of
    `n` this tensor-parallel rank holds, kiln_rt/sequence_shard.h's rule
    with the rank and group of the running program (one program serves
    every TP rank, so they are read at run time: the CPU runtime's group,
    the CUDA context's tp_rank / tp_size). `n` below `min_tokens`: `n`.

    ```mlir
    %r = plan.sequence_rows %n {min_tokens = 64 : i64}
    ```
  }];
  let arguments = (ins Index:$rows, I64Attr:$min_tokens);
  let results = (outs Index:$result);
  let assemblyFormat = "$rows attr-dict";
}

def Plan_RowOp : Plan_Op<"row", [Pure]> {
  let summary = "One row of a rank-2 buffer, as a [1, width] buffer";
  let description = [{
    ```mlir
    %last = plan.row %hidden[%n_minus_1] : memref<?x64xf32> -> memref<1x64xf32>
    ```
  }];
  let arguments = (ins MemRefRankOf<[F16, BF16, F32], [2]>:$source, Index:$row);
  let results = (outs MemRefRankOf<[F16, BF16, F32], [2]>:$result);
  let assemblyFormat = "$source `[` $row `]` attr-dict `:` type($source) `->` type($result)";
}

def Plan_CallKernelOp : Plan_Op<"call_kernel", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "Call a runtime kernel from kernel_abi.h";
  let description = [{
    Calls `callee`, a function of the runtime's kernel ABI
    (runtime/include/kiln_rt/kernel_abi.h), with the operands in order:
    buffers pass their base pointer, `index` values an int64_t, `f32`
    values a float.

    ```mlir
    plan.call_kernel "kiln_k_rms_norm"(%x, %w, %y, %n, %c64, %eps)
        : memref<?x64xf32>, memref<64xf32>, memref<?x64xf32>, index, index, f32
    ```
  }];
  let arguments = (ins StrAttr:$callee, Variadic<AnyType>:$args);
  let assemblyFormat = "$callee `(` $args `)` attr-dict `:` type($args)";
  let hasVerifier = 1;
}

def Plan_FusedKernelOp : Plan_Op<"fused_kernel", [Symbol, IsolatedFromAbove,
    SingleBlock]> {
  let summary = "A generated kernel: the body of a kiln.fused region";
  let description = [{
    The region of a `kiln.fused` op, outlined by `kiln-lower-to-plan` (kiln
    ops on tensors, ending in `kiln.yield`). Codegen instantiates it as one
    function of the target's language (docs/fusion.md); `plan.call_fused`
    calls it with the buffers of the region's operands and results.

    ```mlir
    plan.fused_kernel @kiln_fused_decode_0 families ["epilogue"] {
    ^bb0(%x: tensor<1x64xf32>, %w: tensor<64x64xf32>, %h: tensor<1x64xf32>):
      %o = kiln.linear %x, %w : tensor<1x64xf32>, tensor<64x64xf32> -> tensor<1x64xf32>
      %r = kiln.add %h, %o : tensor<1x64xf32>
      kiln.yield %r : tensor<1x64xf32>
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrArrayAttr:$families);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name `families` $families attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

def Plan_CallFusedOp : Plan_Op<"call_fused", [
    MemoryEffects<[MemRead, MemWrite]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Call a plan.fused_kernel";
  let description = [{
    Operands: one buffer per tensor argument of the kernel's region (the
    entry point's position for an index argument: a RoPE epilogue's), one
    buffer per value it yields (written), then the entry point's token
    count `n`.

    ```mlir
    plan.call_fused @kiln_fused_decode_0(%x, %w, %h, %out, %n)
        : memref<1x64xf32>, memref<64x64xf32>, memref<1x64xf32>, memref<1x64xf32>, index
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$kernel, Variadic<AnyType>:$args);
  let assemblyFormat = "$kernel `(` $args `)` attr-dict `:` type($args)";
}

#endif // KILN_DIALECTS_PLAN_IR_PLANOPS_TD

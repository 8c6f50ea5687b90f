// kiln-partition refuses what cannot be split evenly or is not handled yet,
// naming the counts or the weight: heads, KV heads and FFN features that
// do not divide among the ranks, a rank outside the group, weights already
// quantized or fused or repacked from a pre-quantized checkpoint, column
// shards of GGML blocks that would cut a block, centered keys.
// RUN: kiln-opt %s --split-input-file --kiln-partition="tp=2 rank=0" --verify-diagnostics
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-partition="tp=3 rank=0" 2>&1 | FileCheck %s --check-prefix=HEADS
// HEADS: error: kiln-partition: the model's 4 attention heads do not divide among tp=3 ranks
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-partition="tp=2 rank=2" 2>&1 | FileCheck %s --check-prefix=RANK
// RANK: error: kiln-partition: needs tp >= 1 and 0 <= rank < tp, got tp=2 rank=2
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-quantize-weights{scheme=w8a16},kiln-partition{tp=2 rank=0})" 2>&1 | FileCheck %s --check-prefix=QUANT
// QUANT: error: kiln-partition: {{found a kiln.quantized_linear: run kiln-partition before kiln-quantize-weights|weight 'layers.0.w[a-z0-9.]+' has a 'quantize' step}}
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-fuse,kiln-partition{tp=2 rank=0})" 2>&1 | FileCheck %s --check-prefix=FUSED
// FUSED: error: kiln-partition: weight 'layers.0.wq+wk+wv' has a 'concat_rows' step: run kiln-partition before the quantization and fusion passes

// 6 heads over 2 ranks, but 3 KV heads: neither divides the other.
// expected-error @+1 {{kiln-partition: the model's 3 KV heads and tp=2: one must divide the other (split or replicate the KV heads)}}
module {
  kiln.weight @layers.0.w1 : tensor<8x4xf32> {source = #kiln.source<file = "t.bin", tensor = "w1", storage = "f32", shape = [8, 4], offset = 0, bytes = 128>, transforms = []}
  func.func @prefill(%q: tensor<?x12xf32>, %k: tensor<?x6xf32>, %pos: index, %cache: !kiln.kv_cache<1, 8, 3, 2, f32>) -> tensor<?x12xf32> {
    %a = kiln.attention %q, %k, %k, %cache, %pos {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 3 : i64, head_dim = 2 : i64, scale = 0.5 : f32} : tensor<?x12xf32>, tensor<?x6xf32>, tensor<?x6xf32>, !kiln.kv_cache<1, 8, 3, 2, f32> -> tensor<?x12xf32>
    return %a : tensor<?x12xf32>
  }
}

// -----

// An FFN of 5 hidden features over 2 ranks.
// expected-error @+1 {{kiln-partition: the FFN's 5 hidden features do not divide among tp=2 ranks}}
module {
  kiln.weight @layers.0.w1 : tensor<5x4xf32> {source = #kiln.source<file = "t.bin", tensor = "w1", storage = "f32", shape = [5, 4], offset = 0, bytes = 80>, transforms = []}
  func.func @prefill(%q: tensor<?x8xf32>, %k: tensor<?x4xf32>, %pos: index, %cache: !kiln.kv_cache<1, 8, 2, 2, f32>) -> tensor<?x8xf32> {
    %a = kiln.attention %q, %k, %k, %cache, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 2 : i64, scale = 0.5 : f32} : tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x4xf32>, !kiln.kv_cache<1, 8, 2, 2, f32> -> tensor<?x8xf32>
    return %a : tensor<?x8xf32>
  }
}

// -----

// Layers of different FFN widths cannot share one split.
module {
  kiln.weight @layers.0.w1 : tensor<8x4xf32> {source = #kiln.source<file = "t.bin", tensor = "w1", storage = "f32", shape = [8, 4], offset = 0, bytes = 128>, transforms = []}
  // expected-error @+1 {{kiln-partition: layers of different attention or FFN shapes cannot share one split}}
  kiln.weight @layers.1.w1 : tensor<6x4xf32> {source = #kiln.source<file = "t.bin", tensor = "w1b", storage = "f32", shape = [6, 4], offset = 128, bytes = 96>, transforms = []}
  func.func @prefill(%q: tensor<?x8xf32>, %k: tensor<?x4xf32>, %pos: index, %cache: !kiln.kv_cache<1, 8, 2, 2, f32>) -> tensor<?x8xf32> {
    %a = kiln.attention %q, %k, %k, %cache, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 2 : i64, scale = 0.5 : f32} : tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x4xf32>, !kiln.kv_cache<1, 8, 2, 2, f32> -> tensor<?x8xf32>
    return %a : tensor<?x8xf32>
  }
}

// -----

// Nothing to split.
// expected-error @+1 {{kiln-partition: found no kiln.attention or no FFN gate/up weight ('layers.<i>.w1' / 'w3') to split}}
module {
  func.func @prefill(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
    return %x : tensor<?x8xf32>
  }
}

// -----

// GGML blocks are split exactly, so a column shard must hold whole blocks:
// wo's 256 columns over 2 ranks are 128 each, half a Q4_K block.
module {
  kiln.weight @layers.0.w1 : tensor<512x144xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.ffn_gate.weight", storage = "q4_k", shape = [512, 256], offset = 0, bytes = 73728>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "q4_k", part = "blocks", rows = 512 : i64}>]}
  // expected-error @+1 {{kiln-partition: weight 'layers.0.wo' (q4_k, blocks of 256) cannot be split into columns [0, 128) at tp=2: a shard must hold whole blocks (use a tp whose column shards are multiples of 256, or decode the blocks to float: kiln-compile --dtype=f16 or bf16)}}
  kiln.weight @layers.0.wo : tensor<256x144xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.attn_output.weight", storage = "q4_k", shape = [256, 256], offset = 73728, bytes = 36864>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "q4_k", part = "blocks", rows = 256 : i64}>]}
  func.func @prefill(%q: tensor<?x256xf32>, %k: tensor<?x128xf32>, %pos: index, %cache: !kiln.kv_cache<1, 8, 2, 64, f32>) -> tensor<?x256xf32> {
    %a = kiln.attention %q, %k, %k, %cache, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 64 : i64, scale = 0.125 : f32} : tensor<?x256xf32>, tensor<?x128xf32>, tensor<?x128xf32>, !kiln.kv_cache<1, 8, 2, 64, f32> -> tensor<?x256xf32>
    %wo = kiln.weight_ref @layers.0.wo : tensor<256x144xi8>
    %o = kiln.linear %a, %wo {format = "q4_k"} : tensor<?x256xf32>, tensor<256x144xi8> -> tensor<?x256xf32>
    return %o : tensor<?x256xf32>
  }
}

// -----

// A linear repacked from a pre-quantized checkpoint into Kiln's W4A16
// layout (GGUF Q4_0 here) is not split yet; kept as GGML blocks it would be.
module {
  kiln.weight @layers.0.w1 : tensor<8x4xf32> {source = #kiln.source<file = "t.bin", tensor = "w1", storage = "f32", shape = [8, 4], offset = 0, bytes = 128>, transforms = []}
  // expected-error @+1 {{kiln-partition: weight 'layers.0.wq.qweight' has a 'repack' step: parts repacked from a pre-quantized checkpoint into the W4A16 / W8A16 layout are not partitioned yet (GGUF Q4_0 / Q8_0 linears kept as GGML blocks are: kiln-compile --gguf-linears=blocks)}}
  kiln.weight @layers.0.wq.qweight : tensor<64x32xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.attn_q.weight", storage = "q4_0", shape = [64, 64], offset = 0, bytes = 2304>, transforms = [#kiln.transform<"repack", {bits = 4 : i64, cols = 64 : i64, format = "q4_0", group_size = 32 : i64, part = "qweight", rows = 64 : i64}>]}
  func.func @prefill(%q: tensor<?x8xf32>, %k: tensor<?x4xf32>, %pos: index, %cache: !kiln.kv_cache<1, 8, 2, 2, f32>) -> tensor<?x8xf32> {
    %a = kiln.attention %q, %k, %k, %cache, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 2 : i64, scale = 0.5 : f32} : tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x4xf32>, !kiln.kv_cache<1, 8, 2, 2, f32> -> tensor<?x8xf32>
    return %a : tensor<?x8xf32>
  }
}

// -----

// A slice of GGML blocks (after their repack) keeps whole blocks of a row.
module {
  // expected-error @+1 {{'slice' [0, 128) along axis 1 of q4_k blocks must hold whole blocks of 256 elements}}
  kiln.weight @w : tensor<256x72xi8> {source = #kiln.source<file = "m.gguf", tensor = "w", storage = "q4_k", shape = [256, 256], offset = 0, bytes = 36864>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "q4_k", part = "blocks", rows = 256 : i64}>, #kiln.transform<"slice", {axis = 1 : i64, offset = 0 : i64, size = 128 : i64}>]}
}

// -----

// The repack reads the stored tensor whole: a slice follows it, never
// precedes it.
module {
  // expected-error @+1 {{'repack' must be the first transform (it reads the stored tensor whole; row reorderings and slices follow it)}}
  kiln.weight @w : tensor<128x144xi8> {source = #kiln.source<file = "m.gguf", tensor = "w", storage = "q4_k", shape = [256, 256], offset = 0, bytes = 36864>, transforms = [#kiln.transform<"slice", {axis = 0 : i64, offset = 0 : i64, size = 128 : i64}>, #kiln.transform<"repack", {cols = 256 : i64, format = "q4_k", part = "blocks", rows = 256 : i64}>]}
}

// -----

// A slice is a float-recipe step: not after a quantize.
module {
  // expected-error @+1 {{'slice' must come before 'quantize' and cannot follow 'repack'}}
  kiln.weight @w : tensor<8x2xi8> {source = #kiln.source<file = "t.bin", tensor = "w", storage = "f32", shape = [8, 4], offset = 0, bytes = 128>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "qweight"}>, #kiln.transform<"slice", {axis = 1 : i64, offset = 0 : i64, size = 2 : i64}>]}
}

// -----

module {
  // expected-error @+1 {{'slice' [2, 6) along axis 1 does not fit shape [8, 4]}}
  kiln.weight @w : tensor<8x4xf32> {source = #kiln.source<file = "t.bin", tensor = "w", storage = "f32", shape = [8, 4], offset = 0, bytes = 128>, transforms = [#kiln.transform<"slice", {axis = 1 : i64, offset = 2 : i64, size = 4 : i64}>]}
}

// -----

module {
  // expected-error @+1 {{'slice' transform needs 'offset' >= 0 and 'size' >= 1}}
  kiln.weight @w : tensor<8x4xf32> {source = #kiln.source<file = "t.bin", tensor = "w", storage = "f32", shape = [8, 4], offset = 0, bytes = 128>, transforms = [#kiln.transform<"slice", {axis = 0 : i64, offset = 0 : i64, size = 0 : i64}>]}
}

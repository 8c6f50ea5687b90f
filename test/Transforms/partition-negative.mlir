// kiln-partition refuses what cannot be split evenly or is not handled yet,
// naming the counts or the weight: heads, KV heads and FFN features that
// do not divide among the ranks, a rank outside the group, weights already
// quantized or fused, centered keys.
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

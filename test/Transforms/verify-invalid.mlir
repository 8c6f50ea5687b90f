// RUN: kiln-opt %s --kiln-verify --split-input-file --verify-diagnostics

// expected-error @+1 {{module has no 'prefill' or 'decode' entry point}}
module {
  func.func @main() {
    return
  }
}

// -----

// expected-error @+1 {{'func.func' op entry point 'prefill' must take (tensor<?xi32>, index, !kiln.kv_cache<...>), got '(tensor<?xf32>, index) -> ()'}}
func.func @prefill(%t: tensor<?xf32>, %pos: index) {
  return
}

// -----

kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}
// expected-error @+1 {{'func.func' op entry point 'decode' must take exactly one token, got 'tensor<2xi32>'}}
func.func @decode(%t: tensor<2xi32>, %pos: index, %c: !kiln.kv_cache<1, 64, 2, 4, f32>) -> tensor<1x32xf32> {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  %h = kiln.embedding %t, %table : tensor<2xi32>, tensor<32x16xf32> -> tensor<2x16xf32>
  %l = kiln.logits %h, %table : tensor<2x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %l : tensor<1x32xf32>
}

// -----

kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}
// expected-error @+1 {{'func.func' op entry point 'decode' must return the logits of one token (tensor<1xVxf32>), got '(tensor<1xi32>, index, !kiln.kv_cache<1, 64, 2, 4, f32>) -> tensor<32x16xf32>'}}
func.func @decode(%t: tensor<1xi32>, %pos: index, %c: !kiln.kv_cache<1, 64, 2, 4, f32>) -> tensor<32x16xf32> {
  %w = kiln.weight_ref @table : tensor<32x16xf32>
  return %w : tensor<32x16xf32>
}

// -----

kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}
func.func @prefill(%t: tensor<?xi32>, %pos: index, %c: !kiln.kv_cache<1, 64, 1, 16, f32>) -> tensor<1x32xf32> {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  %h = kiln.embedding %t, %table : tensor<?xi32>, tensor<32x16xf32> -> tensor<?x16xf32>
  %a = kiln.attention %h, %h, %h, %c, %pos {layer = 0 : i64, num_heads = 1 : i64, num_kv_heads = 1 : i64, head_dim = 16 : i64, scale = 0.25 : f32} : tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, !kiln.kv_cache<1, 64, 1, 16, f32> -> tensor<?x16xf32>
  %l = kiln.logits %a, %table : tensor<?x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %l : tensor<1x32xf32>
}
// Two entry points must share one KV cache.
// expected-error @+1 {{'func.func' op uses kv_cache type '!kiln.kv_cache<2, 64, 2, 4, f32>' but another entry point uses '!kiln.kv_cache<1, 64, 1, 16, f32>'}}
func.func @decode(%t: tensor<1xi32>, %pos: index, %c: !kiln.kv_cache<2, 64, 2, 4, f32>) -> tensor<1x32xf32> {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  %h = kiln.embedding %t, %table : tensor<1xi32>, tensor<32x16xf32> -> tensor<1x16xf32>
  %l = kiln.logits %h, %table : tensor<1x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %l : tensor<1x32xf32>
}

// -----

kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}
// A layer written twice would overwrite its own cache rows.
func.func @decode(%t: tensor<1xi32>, %pos: index, %c: !kiln.kv_cache<1, 64, 1, 16, f32>) -> tensor<1x32xf32> {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  %h = kiln.embedding %t, %table : tensor<1xi32>, tensor<32x16xf32> -> tensor<1x16xf32>
  %a = kiln.attention %h, %h, %h, %c, %pos {layer = 0 : i64, num_heads = 1 : i64, num_kv_heads = 1 : i64, head_dim = 16 : i64, scale = 0.25 : f32} : tensor<1x16xf32>, tensor<1x16xf32>, tensor<1x16xf32>, !kiln.kv_cache<1, 64, 1, 16, f32> -> tensor<1x16xf32>
  // expected-error @+1 {{'kiln.attention' op writes layer 0 of the kv_cache a second time in 'decode'}}
  %b = kiln.attention %a, %a, %a, %c, %pos {layer = 0 : i64, num_heads = 1 : i64, num_kv_heads = 1 : i64, head_dim = 16 : i64, scale = 0.25 : f32} : tensor<1x16xf32>, tensor<1x16xf32>, tensor<1x16xf32>, !kiln.kv_cache<1, 64, 1, 16, f32> -> tensor<1x16xf32>
  %l = kiln.logits %b, %table : tensor<1x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %l : tensor<1x32xf32>
}

// -----

kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}
// A layer never written leaves its cache empty: the model is incomplete.
// expected-error @+1 {{'func.func' op 'decode' writes 1 of the 2 kv_cache layers}}
func.func @decode(%t: tensor<1xi32>, %pos: index, %c: !kiln.kv_cache<2, 64, 1, 16, f32>) -> tensor<1x32xf32> {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  %h = kiln.embedding %t, %table : tensor<1xi32>, tensor<32x16xf32> -> tensor<1x16xf32>
  %a = kiln.attention %h, %h, %h, %c, %pos {layer = 0 : i64, num_heads = 1 : i64, num_kv_heads = 1 : i64, head_dim = 16 : i64, scale = 0.25 : f32} : tensor<1x16xf32>, tensor<1x16xf32>, tensor<1x16xf32>, !kiln.kv_cache<2, 64, 1, 16, f32> -> tensor<1x16xf32>
  %l = kiln.logits %a, %table : tensor<1x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %l : tensor<1x32xf32>
}

// -----

kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}
// expected-error @+1 {{'kiln.weight' op 'unused' is never used}}
kiln.weight @unused : tensor<16xf32> {source = #kiln.source<file = "m.bin", tensor = "u", storage = "f32", shape = [16], offset = 2048, bytes = 64>, transforms = []}
func.func @decode(%t: tensor<1xi32>, %pos: index, %c: !kiln.kv_cache<1, 64, 1, 16, f32>) -> tensor<1x32xf32> {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  %h = kiln.embedding %t, %table : tensor<1xi32>, tensor<32x16xf32> -> tensor<1x16xf32>
  %a = kiln.attention %h, %h, %h, %c, %pos {layer = 0 : i64, num_heads = 1 : i64, num_kv_heads = 1 : i64, head_dim = 16 : i64, scale = 0.25 : f32} : tensor<1x16xf32>, tensor<1x16xf32>, tensor<1x16xf32>, !kiln.kv_cache<1, 64, 1, 16, f32> -> tensor<1x16xf32>
  %l = kiln.logits %a, %table : tensor<1x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %l : tensor<1x32xf32>
}

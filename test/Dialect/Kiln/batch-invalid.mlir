// RUN: kiln-opt %s --split-input-file --verify-diagnostics

func.func @paged_with_index(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %pos: index, %c: !kiln.paged_kv_cache<1, 4, 8, f32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'kiln.attention' op expects the !kiln.batch as position with a !kiln.paged_kv_cache, got '!kiln.paged_kv_cache<1, 4, 8, f32>' and 'index'}}
  %o = kiln.attention %q, %k, %k, %c, %pos {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 4 : i64, head_dim = 8 : i64, scale = 0.35 : f32} : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, !kiln.paged_kv_cache<1, 4, 8, f32> -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}

// -----

func.func @contiguous_with_batch(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %b: !kiln.batch, %c: !kiln.kv_cache<1, 16, 4, 8, f32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'kiln.attention' op expects a !kiln.paged_kv_cache with the !kiln.batch as position, got '!kiln.kv_cache<1, 16, 4, 8, f32>' and '!kiln.batch'}}
  %o = kiln.attention %q, %k, %k, %c, %b {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 4 : i64, head_dim = 8 : i64, scale = 0.35 : f32} : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, !kiln.kv_cache<1, 16, 4, 8, f32>, !kiln.batch -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}

// -----

func.func @paged_layer(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %b: !kiln.batch, %c: !kiln.paged_kv_cache<1, 4, 8, f32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'kiln.attention' op layer 1 is out of range for a kv_cache of 1 layers}}
  %o = kiln.attention %q, %k, %k, %c, %b {layer = 1 : i64, num_heads = 8 : i64, num_kv_heads = 4 : i64, head_dim = 8 : i64, scale = 0.35 : f32} : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, !kiln.paged_kv_cache<1, 4, 8, f32>, !kiln.batch -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}

// -----

func.func @paged_heads(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %b: !kiln.batch, %c: !kiln.paged_kv_cache<1, 2, 16, f32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'kiln.attention' op kv_cache has 2 heads of 16 but the op expects 4 heads of 8}}
  %o = kiln.attention %q, %k, %k, %c, %b {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 4 : i64, head_dim = 8 : i64, scale = 0.35 : f32} : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, !kiln.paged_kv_cache<1, 2, 16, f32>, !kiln.batch -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}

// -----

// expected-error @+1 {{paged_kv_cache dimensions must be positive, got <0, 4, 8>}}
func.func @bad_type(%c: !kiln.paged_kv_cache<0, 4, 8, f32>)

// -----

// expected-error @+1 {{paged_kv_cache element type must be f32, f16, bf16, i8 or f8E4M3FN, got 'f64'}}
func.func @bad_elem(%c: !kiln.paged_kv_cache<1, 4, 8, f64>)

// -----

func.func @logits_rows(%h: tensor<4x64xf32>, %w: tensor<512x64xf32>) -> tensor<3x512xf32> {
  // expected-error @+1 {{'kiln.logits' op expects a result of shape [4, 512], got 'tensor<3x512xf32>'}}
  %l = kiln.logits %h, %w {all_rows} : tensor<4x64xf32>, tensor<512x64xf32> -> tensor<3x512xf32>
  return %l : tensor<3x512xf32>
}

// -----

func.func @logits_one_row(%h: tensor<4x64xf32>, %w: tensor<512x64xf32>) -> tensor<4x512xf32> {
  // expected-error @+1 {{'kiln.logits' op expects a result of shape [1, 512], got 'tensor<4x512xf32>'}}
  %l = kiln.logits %h, %w : tensor<4x64xf32>, tensor<512x64xf32> -> tensor<4x512xf32>
  return %l : tensor<4x512xf32>
}

// -----

func.func @rope_position(%x: tensor<?x64xf32>, %p: i64) -> tensor<?x64xf32> {
  // expected-error @+1 {{'kiln.rope' op operand #1 must be a position (index) or the batch of a step (!kiln.batch), but got 'i64'}}
  %r = kiln.rope %x, %p {num_heads = 8 : i64, head_dim = 8 : i64, rotary_dim = 8 : i64, theta = 1.0e4 : f32} : tensor<?x64xf32>, i64
  return %r : tensor<?x64xf32>
}

// -----

func.func @last_rows_type(%x: tensor<?x64xf32>, %b: index) -> tensor<?x64xf32> {
  // expected-error @+1 {{'kiln.last_rows' op operand #1 must be}}
  %r = "kiln.last_rows"(%x, %b) : (tensor<?x64xf32>, index) -> tensor<?x64xf32>
  return %r : tensor<?x64xf32>
}

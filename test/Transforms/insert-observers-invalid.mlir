// RUN: kiln-opt %s --kiln-insert-observers --split-input-file --verify-diagnostics

// Calibration observes f32 activations only.
kiln.weight @layers.0.wq : tensor<8x16xf16> {source = #kiln.source<file = "m.bin", tensor = "wq", storage = "f16", shape = [8, 16], offset = 0, bytes = 256>, transforms = []}
func.func @negative_f16_input(%x: tensor<?x16xf16>) -> tensor<?x8xf16> {
  %w = kiln.weight_ref @layers.0.wq : tensor<8x16xf16>
  // expected-error @+1 {{'kiln.linear' op input has element type 'f16'; calibration observes f32 activations (compile with --dtype=f32)}}
  %y = kiln.linear %x, %w : tensor<?x16xf16>, tensor<8x16xf16> -> tensor<?x8xf16>
  return %y : tensor<?x8xf16>
}

// -----

// Two different activations would both be "layers.0.attn_in".
kiln.weight @layers.0.wq : tensor<8x16xf32> {source = #kiln.source<file = "m.bin", tensor = "wq", storage = "f32", shape = [8, 16], offset = 0, bytes = 512>, transforms = []}
kiln.weight @layers.0.wk : tensor<8x16xf32> {source = #kiln.source<file = "m.bin", tensor = "wk", storage = "f32", shape = [8, 16], offset = 512, bytes = 512>, transforms = []}
func.func @negative_tap_collision(%x: tensor<?x16xf32>, %z: tensor<?x16xf32>) -> tensor<?x8xf32> {
  %wq = kiln.weight_ref @layers.0.wq : tensor<8x16xf32>
  %q = kiln.linear %x, %wq : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
  %wk = kiln.weight_ref @layers.0.wk : tensor<8x16xf32>
  // expected-error @+1 {{'kiln.linear' op would observe a second activation as tap 'layers.0.attn_in' in 'negative_tap_collision' (tap names must be unique per function)}}
  %k = kiln.linear %z, %wk : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
  %s = kiln.add %q, %k : tensor<?x8xf32>
  return %s : tensor<?x8xf32>
}

// -----

// An existing observer names the input of @layers.0.wq "custom" in @first,
// while @second would derive "layers.0.attn_in" for it.
kiln.weight @layers.0.wq : tensor<8x16xf32> {source = #kiln.source<file = "m.bin", tensor = "wq", storage = "f32", shape = [8, 16], offset = 0, bytes = 512>, transforms = []}
func.func @first(%x: tensor<?x16xf32>) -> tensor<?x8xf32> {
  kiln.observe %x {tap = "custom"} : tensor<?x16xf32>
  %w = kiln.weight_ref @layers.0.wq : tensor<8x16xf32>
  %y = kiln.linear %x, %w : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
func.func @second(%x: tensor<?x16xf32>) -> tensor<?x8xf32> {
  %w = kiln.weight_ref @layers.0.wq : tensor<8x16xf32>
  // expected-error @+1 {{'kiln.linear' op weight 'layers.0.wq' is fed by tap 'layers.0.attn_in' in 'second' but by tap 'custom' elsewhere}}
  %y = kiln.linear %x, %w : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// The pre-RoPE key is observed in f32 only.
func.func @negative_f16_key(%q: tensor<?x8xf16>, %k: tensor<?x8xf16>, %v: tensor<?x8xf16>, %pos: index, %cache: !kiln.kv_cache<1, 64, 2, 4, f16>) -> tensor<?x8xf16> {
  // expected-error @+1 {{'kiln.rope' op input (the pre-RoPE key of layer 0) has element type 'f16'; calibration observes f32 activations (compile with --dtype=f32)}}
  %kr = kiln.rope %k, %pos {num_heads = 2 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32} : tensor<?x8xf16>
  %a = kiln.attention %q, %kr, %v, %cache, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<?x8xf16>, tensor<?x8xf16>, tensor<?x8xf16>, !kiln.kv_cache<1, 64, 2, 4, f16> -> tensor<?x8xf16>
  return %a : tensor<?x8xf16>
}

// -----

// A pre-RoPE key already observed under another name: kiln-center-keys
// looks for "layers.<l>.key".
func.func @negative_key_other_tap(%q: tensor<?x8xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %pos: index, %cache: !kiln.kv_cache<1, 64, 2, 4, f32>) -> tensor<?x8xf32> {
  kiln.observe %k {tap = "custom"} : tensor<?x8xf32>
  %kr = kiln.rope %k, %pos {num_heads = 2 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32} : tensor<?x8xf32>
  // expected-error @+1 {{'kiln.attention' op pre-RoPE key is already observed as tap 'custom' in 'negative_key_other_tap'; key taps must be named 'layers.0.key'}}
  %a = kiln.attention %q, %kr, %v, %cache, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x8xf32>
  return %a : tensor<?x8xf32>
}

// -----

// One pre-RoPE key shared by two attention layers would need two names.
func.func @negative_shared_key(%q: tensor<?x8xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %pos: index, %cache: !kiln.kv_cache<2, 64, 2, 4, f32>) -> tensor<?x8xf32> {
  %kr = kiln.rope %k, %pos {num_heads = 2 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32} : tensor<?x8xf32>
  %a = kiln.attention %q, %kr, %v, %cache, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<2, 64, 2, 4, f32> -> tensor<?x8xf32>
  // expected-error @+1 {{'kiln.attention' op pre-RoPE key is already observed as tap 'layers.0.key' in 'negative_shared_key'; key taps must be named 'layers.1.key'}}
  %b = kiln.attention %q, %kr, %v, %cache, %pos {layer = 1 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<2, 64, 2, 4, f32> -> tensor<?x8xf32>
  %c = kiln.add %a, %b : tensor<?x8xf32>
  return %c : tensor<?x8xf32>
}

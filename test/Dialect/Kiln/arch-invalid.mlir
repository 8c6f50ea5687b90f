// RUN: kiln-opt %s --split-input-file --verify-diagnostics

func.func @unknown_scaling(%x: tensor<?x16xf32>, %pos: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{'kiln.rope' op has unknown scaling 'yarn' (expected "linear", "dynamic" or "llama3")}}
  %r = kiln.rope %x, %pos {num_heads = 4 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32, scaling = "yarn"} : tensor<?x16xf32>
  return %r : tensor<?x16xf32>
}

// -----

func.func @llama3_missing_bands(%x: tensor<?x16xf32>, %pos: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{'kiln.rope' op expects low_freq_factor and high_freq_factor with scaling "llama3"}}
  %r = kiln.rope %x, %pos {num_heads = 4 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32, scaling = "llama3", scaling_factor = 8.0 : f32, original_max_positions = 8192 : i64} : tensor<?x16xf32>
  return %r : tensor<?x16xf32>
}

// -----

func.func @dynamic_needs_original(%x: tensor<?x16xf32>, %pos: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{'kiln.rope' op expects original_max_positions with scaling "dynamic" or "llama3"}}
  %r = kiln.rope %x, %pos {num_heads = 4 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32, scaling = "dynamic", scaling_factor = 2.0 : f32} : tensor<?x16xf32>
  return %r : tensor<?x16xf32>
}

// -----

func.func @freq_factors_length(%x: tensor<?x16xf32>, %pos: index, %ff: tensor<3xf32>) -> tensor<?x16xf32> {
  // expected-error @+1 {{'kiln.rope' op expects freq_factors of rotary_dim / 2 = 2 elements, got 3}}
  %r = kiln.rope %x, %pos freq_factors(%ff : tensor<3xf32>) {num_heads = 4 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32} : tensor<?x16xf32>
  return %r : tensor<?x16xf32>
}

// -----

func.func @bias_length(%x: tensor<?x16xf32>, %b: tensor<8xf32>) -> tensor<?x16xf32> {
  // expected-error @+1 {{'kiln.add_bias' op expects the bias length 8 to equal the input width 16}}
  %r = kiln.add_bias %x, %b : tensor<?x16xf32>, tensor<8xf32>
  return %r : tensor<?x16xf32>
}

// -----

func.func @window(%q: tensor<?x16xf32>, %pos: index, %cache: !kiln.kv_cache<1, 16, 4, 4, f32>) -> tensor<?x16xf32> {
  // expected-error @+1 {{'kiln.attention' op expects a positive sliding_window, got 0}}
  %a = kiln.attention %q, %q, %q, %cache, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sliding_window = 0 : i64} : tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, !kiln.kv_cache<1, 16, 4, 4, f32> -> tensor<?x16xf32>
  return %a : tensor<?x16xf32>
}

// RUN: kiln-opt %s --split-input-file --verify-diagnostics

// Weight shapes must be static: the artifact lays weights out at compile time.
// expected-error @+1 {{'kiln.weight' op expects a static weight shape, got 'tensor<?x16xf32>'}}
kiln.weight @w : tensor<?x16xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 16], offset = 0, bytes = 64>, transforms = []}

// -----

// expected-error @+1 {{unknown weight storage type 'q7_k' (expected f32, f16, bf16, a GGML block format q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, i32 or synthetic)}}
kiln.weight @w : tensor<4x16xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "q7_k", shape = [4, 16], offset = 0, bytes = 64>, transforms = []}

// -----

// expected-error @+1 {{weight source of 'w' names no file}}
kiln.weight @w : tensor<4x16xf32> {source = #kiln.source<file = "", tensor = "w", storage = "f32", shape = [4, 16], offset = 0, bytes = 64>, transforms = []}

// -----

// expected-error @+1 {{unknown weight transform 'transpose_twice'}}
kiln.weight @w : tensor<4x16xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 16], offset = 0, bytes = 256>, transforms = [#kiln.transform<"transpose_twice", {}>]}

// -----

// expected-error @+1 {{'rope_half_to_adjacent' transform needs a positive 'heads'}}
kiln.weight @w : tensor<4x16xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 16], offset = 0, bytes = 256>, transforms = [#kiln.transform<"rope_half_to_adjacent", {}>]}

// -----

// 12 rows do not split into 8 heads of even size.
// expected-error @+1 {{'kiln.weight' op 'rope_half_to_adjacent' with 8 heads needs a matrix or vector whose rows split into heads of even size, got shape [12, 16]}}
kiln.weight @w : tensor<12x16xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [12, 16], offset = 0, bytes = 768>, transforms = [#kiln.transform<"rope_half_to_adjacent", {heads = 8 : i64}>]}

// -----

// expected-error @+1 {{kv_cache dimensions must be positive, got <0, 64, 2, 4>}}
func.func @negative_kv_cache_dims(%c: !kiln.kv_cache<0, 64, 2, 4, f32>) {
  return
}

// -----

// expected-error @+1 {{kv_cache element type must be a float type or i8, got 'i32'}}
func.func @negative_kv_cache_int(%c: !kiln.kv_cache<1, 64, 2, 4, i32>) {
  return
}

// -----

func.func @negative_weight_ref_missing() {
  // expected-error @+1 {{'kiln.weight_ref' op 'nowhere' does not reference a kiln.weight}}
  %w = kiln.weight_ref @nowhere : tensor<4x16xf32>
  return
}

// -----

kiln.weight @w : tensor<4x16xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 16], offset = 0, bytes = 256>, transforms = []}
func.func @negative_weight_ref_type() {
  // expected-error @+1 {{'kiln.weight_ref' op result type 'tensor<16x4xf32>' does not match the type 'tensor<4x16xf32>' of weight 'w'}}
  %w = kiln.weight_ref @w : tensor<16x4xf32>
  return
}

// -----

func.func @negative_embedding_width(%t: tensor<?xi32>, %table: tensor<32x16xf32>) {
  // expected-error @+1 {{'kiln.embedding' op expects the result width 8 to equal the embedding width 16}}
  %h = kiln.embedding %t, %table : tensor<?xi32>, tensor<32x16xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_embedding_rows(%t: tensor<3xi32>, %table: tensor<32x16xf32>) {
  // expected-error @+1 {{'kiln.embedding' op expects one result row per token (3), got 4}}
  %h = kiln.embedding %t, %table : tensor<3xi32>, tensor<32x16xf32> -> tensor<4x16xf32>
  return
}

// -----

func.func @negative_rms_norm_weight(%x: tensor<?x16xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{'kiln.rms_norm' op expects the weight length 8 to equal the innermost input dimension 16}}
  %y = kiln.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<?x16xf32>, tensor<8xf32>
  return
}

// -----

func.func @negative_rms_norm_epsilon(%x: tensor<?x16xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'kiln.rms_norm' op expects a positive epsilon, got 0}}
  %y = kiln.rms_norm %x, %w {epsilon = 0.0 : f32} : tensor<?x16xf32>, tensor<16xf32>
  return
}

// -----

func.func @negative_rms_norm_dtype(%x: tensor<?x16xf32>, %w: tensor<16xf16>) {
  // expected-error @+1 {{'kiln.rms_norm' op expects input and weight to have the same element type, got 'f32' and 'f16'}}
  %y = kiln.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<?x16xf32>, tensor<16xf16>
  return
}

// -----

func.func @negative_linear_in(%x: tensor<?x16xf32>, %w: tensor<8x12xf32>) {
  // expected-error @+1 {{'kiln.linear' op expects the input width 16 to equal the weight's in_features 12}}
  %y = kiln.linear %x, %w : tensor<?x16xf32>, tensor<8x12xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_linear_out(%x: tensor<?x16xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{'kiln.linear' op expects the result width 4 to equal the weight's out_features 8}}
  %y = kiln.linear %x, %w : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x4xf32>
  return
}

// -----

func.func @negative_linear_tokens(%x: tensor<2x16xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{'kiln.linear' op expects the result to have as many tokens as the input (2), got 3}}
  %y = kiln.linear %x, %w : tensor<2x16xf32>, tensor<8x16xf32> -> tensor<3x8xf32>
  return
}

// -----

func.func @negative_linear_dtype(%x: tensor<?x16xf32>, %w: tensor<8x16xbf16>) {
  // expected-error @+1 {{'kiln.linear' op expects input and weight to have the same element type, got 'f32' and 'bf16'}}
  %y = kiln.linear %x, %w : tensor<?x16xf32>, tensor<8x16xbf16> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_rope_width(%x: tensor<?x16xf32>, %pos: index) {
  // expected-error @+1 {{'kiln.rope' op expects the input width 16 to equal num_heads (2) * head_dim (4)}}
  %y = kiln.rope %x, %pos {num_heads = 2 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32} : tensor<?x16xf32>
  return
}

// -----

func.func @negative_rope_rotary_dim(%x: tensor<?x16xf32>, %pos: index) {
  // expected-error @+1 {{'kiln.rope' op expects an even rotary_dim <= head_dim (4), got 3}}
  %y = kiln.rope %x, %pos {num_heads = 4 : i64, head_dim = 4 : i64, rotary_dim = 3 : i64, theta = 1.0e4 : f32} : tensor<?x16xf32>
  return
}

// -----

func.func @negative_rope_theta(%x: tensor<?x16xf32>, %pos: index) {
  // expected-error @+1 {{'kiln.rope' op expects a positive theta, got -1}}
  %y = kiln.rope %x, %pos {num_heads = 4 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = -1.0 : f32} : tensor<?x16xf32>
  return
}

// -----

func.func @negative_rope_scaling(%x: tensor<?x16xf32>, %pos: index) {
  // expected-error @+1 {{'kiln.rope' op expects a positive scaling_factor, got 0}}
  %y = kiln.rope %x, %pos {num_heads = 4 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32, scaling_factor = 0.0 : f32} : tensor<?x16xf32>
  return
}

// -----

func.func @negative_rope_heads(%x: tensor<?x16xf32>, %pos: index) {
  // expected-error @+1 {{'kiln.rope' op attribute 'num_heads' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %y = kiln.rope %x, %pos {num_heads = 0 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32} : tensor<?x16xf32>
  return
}

// -----

func.func @negative_attention_gqa(%q: tensor<?x12xf32>, %k: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %pos: index) {
  // expected-error @+1 {{'kiln.attention' op expects num_heads (3) to be a multiple of num_kv_heads (2)}}
  %o = kiln.attention %q, %k, %k, %c, %pos {layer = 0 : i64, num_heads = 3 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<?x12xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x12xf32>
  return
}

// -----

func.func @negative_attention_query(%q: tensor<?x12xf32>, %k: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %pos: index) {
  // expected-error @+1 {{'kiln.attention' op expects the query width 12 to equal num_heads * head_dim (16)}}
  %o = kiln.attention %q, %k, %k, %c, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<?x12xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x12xf32>
  return
}

// -----

func.func @negative_attention_key(%q: tensor<?x16xf32>, %k: tensor<?x16xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %pos: index) {
  // expected-error @+1 {{'kiln.attention' op expects the key width 16 to equal num_kv_heads * head_dim (8)}}
  %o = kiln.attention %q, %k, %k, %c, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  return
}

// -----

func.func @negative_attention_tokens(%q: tensor<2x16xf32>, %k: tensor<3x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %pos: index) {
  // expected-error @+1 {{'kiln.attention' op expects the key to have as many tokens as the query}}
  %o = kiln.attention %q, %k, %k, %c, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<2x16xf32>, tensor<3x8xf32>, tensor<3x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<2x16xf32>
  return
}

// -----

func.func @negative_attention_cache(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 4, 2, f32>, %pos: index) {
  // expected-error @+1 {{'kiln.attention' op kv_cache has 4 heads of 2 but the op expects 2 heads of 4}}
  %o = kiln.attention %q, %k, %k, %c, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 4, 2, f32> -> tensor<?x16xf32>
  return
}

// -----

func.func @negative_attention_layer(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %c: !kiln.kv_cache<2, 64, 2, 4, f32>, %pos: index) {
  // expected-error @+1 {{'kiln.attention' op layer 2 is out of range for a kv_cache of 2 layers}}
  %o = kiln.attention %q, %k, %k, %c, %pos {layer = 2 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<2, 64, 2, 4, f32> -> tensor<?x16xf32>
  return
}

// -----

func.func @negative_attention_result(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %pos: index) {
  // expected-error @+1 {{'kiln.attention' op expects the result type 'tensor<1x16xf32>' to equal the query type 'tensor<?x16xf32>'}}
  %o = kiln.attention %q, %k, %k, %c, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<1x16xf32>
  return
}

// -----

func.func @negative_attention_noncausal(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %pos: index) {
  // expected-error @+1 {{'kiln.attention' op supports only causal attention}}
  %o = kiln.attention %q, %k, %k, %c, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, causal = false} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  return
}

// -----

func.func @negative_add_types(%a: tensor<?x16xf32>, %b: tensor<?x8xf32>) {
  // expected-error @+1 {{'kiln.add' op requires the same type for all operands and results}}
  %y = "kiln.add"(%a, %b) : (tensor<?x16xf32>, tensor<?x8xf32>) -> tensor<?x16xf32>
  return
}

// -----

func.func @negative_logits_width(%h: tensor<?x16xf32>, %w: tensor<32x8xf32>) {
  // expected-error @+1 {{'kiln.logits' op expects the hidden width 16 to equal the classifier's in_features 8}}
  %l = kiln.logits %h, %w : tensor<?x16xf32>, tensor<32x8xf32> -> tensor<1x32xf32>
  return
}

// -----

func.func @negative_logits_shape(%h: tensor<?x16xf32>, %w: tensor<32x16xf32>) {
  // expected-error @+1 {{'kiln.logits' op expects a result of shape [1, 32], got 'tensor<2x32xf32>'}}
  %l = kiln.logits %h, %w : tensor<?x16xf32>, tensor<32x16xf32> -> tensor<2x32xf32>
  return
}

// -----

func.func @negative_quantized_linear_bits(%x: tensor<?x16xf32>, %q: tensor<8x16xi8>, %s: tensor<8xf32>) {
  // expected-error @+1 {{'kiln.quantized_linear' op supports 8-bit and 4-bit weights, got 3 bits}}
  %y = kiln.quantized_linear %x, %q, %s {bits = 3 : i64, group_size = 0 : i64} : tensor<?x16xf32>, tensor<8x16xi8>, tensor<8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_quantized_linear_in(%x: tensor<?x12xf32>, %q: tensor<8x16xi8>, %s: tensor<8xf32>) {
  // expected-error @+1 {{'kiln.quantized_linear' op expects qweight rows of 12 bytes for 12 inputs at 8 bits, got 16}}
  %y = kiln.quantized_linear %x, %q, %s {bits = 8 : i64, group_size = 0 : i64} : tensor<?x12xf32>, tensor<8x16xi8>, tensor<8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_quantized_linear_scales(%x: tensor<?x16xf32>, %q: tensor<8x8xi8>, %s: tensor<8xf32>, %z: tensor<8x4xi8>) {
  // 4-bit groups of 4 over 16 inputs need [8, 4] scales.
  // expected-error @+1 {{'kiln.quantized_linear' op expects scales of shape [8, 4] for group_size 4, got 'tensor<8xf32>'}}
  %y = kiln.quantized_linear %x, %q, %s, %z {bits = 4 : i64, group_size = 4 : i64} : tensor<?x16xf32>, tensor<8x8xi8>, tensor<8xf32>, tensor<8x4xi8> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_quantized_linear_packing(%x: tensor<?x16xf32>, %q: tensor<8x16xi8>, %s: tensor<8x1xf32>, %z: tensor<8x1xi8>) {
  // Two 4-bit values per byte: 16 inputs are 8 bytes per row.
  // expected-error @+1 {{'kiln.quantized_linear' op expects qweight rows of 8 bytes for 16 inputs at 4 bits, got 16}}
  %y = kiln.quantized_linear %x, %q, %s, %z {bits = 4 : i64, group_size = 16 : i64} : tensor<?x16xf32>, tensor<8x16xi8>, tensor<8x1xf32>, tensor<8x1xi8> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_quantized_linear_no_zeros(%x: tensor<?x16xf32>, %q: tensor<8x8xi8>, %s: tensor<8x1xf32>) {
  // expected-error @+1 {{'kiln.quantized_linear' op 4-bit weights need zero_points}}
  %y = kiln.quantized_linear %x, %q, %s {bits = 4 : i64, group_size = 16 : i64} : tensor<?x16xf32>, tensor<8x8xi8>, tensor<8x1xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_quantized_linear_odd_group(%x: tensor<?x16xf32>, %q: tensor<8x8xi8>, %s: tensor<8x6xf32>, %z: tensor<8x6xi8>) {
  // expected-error @+1 {{'kiln.quantized_linear' op 4-bit weights need a positive even group_size, got 3}}
  %y = kiln.quantized_linear %x, %q, %s, %z {bits = 4 : i64, group_size = 3 : i64} : tensor<?x16xf32>, tensor<8x8xi8>, tensor<8x6xf32>, tensor<8x6xi8> -> tensor<?x8xf32>
  return
}

// -----

// expected-error @+1 {{'quantize' transform needs 'part' = "qweight", "scales" or "zeros"}}
kiln.weight @w : tensor<4x16xi8> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 16], offset = 0, bytes = 256>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "signs"}>]}

// -----

// expected-error @+1 {{only 4-bit 'quantize' has zero points}}
kiln.weight @w : tensor<4x1xi8> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 16], offset = 0, bytes = 256>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "zeros"}>]}

// -----

// expected-error @+1 {{4-bit 'quantize' needs a positive even 'group_size', got 0}}
kiln.weight @w : tensor<4x8xi8> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 16], offset = 0, bytes = 256>, transforms = [#kiln.transform<"quantize", {bits = 4 : i64, group_size = 0 : i64, part = "qweight"}>]}

// -----

// expected-error @+1 {{'kiln.weight' op an i8 weight must end with a 'quantize' transform producing "qweight" or "zeros", and only it; got 'tensor<4x16xi8>'}}
kiln.weight @w : tensor<4x16xi8> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 16], offset = 0, bytes = 256>, transforms = []}

// -----

// Scales are one per row: [4], not [16].
// expected-error @+1 {{'kiln.weight' op recipe produces shape [4] but the weight is declared 'tensor<16xf32>'}}
kiln.weight @w : tensor<16xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 16], offset = 0, bytes = 256>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "scales"}>]}

// -----

// expected-error @+1 {{weight source of 'w' needs a shape of positive dimensions}}
kiln.weight @w : tensor<4x16xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [0, 16], offset = 0, bytes = 256>, transforms = []}

// -----

func.func @negative_w8a8_unknown(%x: tensor<?x16xf32>, %q: tensor<8x16xi8>, %s: tensor<8xf32>) {
  // expected-error @+1 {{'kiln.quantized_linear' op unknown act_quant 'fp8' (expected none, int8_per_token or int8_per_tensor)}}
  %y = kiln.quantized_linear %x, %q, %s {bits = 8 : i64, group_size = 0 : i64, act_quant = "fp8"} : tensor<?x16xf32>, tensor<8x16xi8>, tensor<8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_w8a8_grouped(%x: tensor<?x16xf32>, %q: tensor<8x16xi8>, %s: tensor<8x2xf32>) {
  // expected-error @+1 {{'kiln.quantized_linear' op int8 activations (act_quant 'int8_per_token') need 8-bit per-channel weights (group_size 0), got 8 bits, group_size 8}}
  %y = kiln.quantized_linear %x, %q, %s {bits = 8 : i64, group_size = 8 : i64, act_quant = "int8_per_token"} : tensor<?x16xf32>, tensor<8x16xi8>, tensor<8x2xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_w8a8_static_no_scale(%x: tensor<?x16xf32>, %q: tensor<8x16xi8>, %s: tensor<8xf32>) {
  // expected-error @+1 {{'kiln.quantized_linear' op act_quant 'int8_per_tensor' needs a static act_scale}}
  %y = kiln.quantized_linear %x, %q, %s {bits = 8 : i64, group_size = 0 : i64, act_quant = "int8_per_tensor"} : tensor<?x16xf32>, tensor<8x16xi8>, tensor<8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_w8a8_scale_without_static(%x: tensor<?x16xf32>, %q: tensor<8x16xi8>, %s: tensor<8xf32>) {
  // expected-error @+1 {{'kiln.quantized_linear' op act_scale is only meaningful with act_quant 'int8_per_tensor'}}
  %y = kiln.quantized_linear %x, %q, %s {bits = 8 : i64, group_size = 0 : i64, act_scale = 0.5 : f32} : tensor<?x16xf32>, tensor<8x16xi8>, tensor<8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_w8a8_nonpositive_scale(%x: tensor<?x16xf32>, %q: tensor<8x16xi8>, %s: tensor<8xf32>) {
  // expected-error @+1 {{'kiln.quantized_linear' op act_scale must be positive, got 0}}
  %y = kiln.quantized_linear %x, %q, %s {bits = 8 : i64, group_size = 0 : i64, act_quant = "int8_per_tensor", act_scale = 0.0 : f32} : tensor<?x16xf32>, tensor<8x16xi8>, tensor<8xf32> -> tensor<?x8xf32>
  return
}

// -----

func.func @negative_w8_grouped_scales(%x: tensor<?x64xf32>, %q: tensor<8x64xi8>, %s: tensor<8xf32>) {
  // expected-error @+1 {{'kiln.quantized_linear' op expects scales of shape [8, 2] for group_size 32, got 'tensor<8xf32>'}}
  %y = kiln.quantized_linear %x, %q, %s {bits = 8 : i64, group_size = 32 : i64} : tensor<?x64xf32>, tensor<8x64xi8>, tensor<8xf32> -> tensor<?x8xf32>
  return
}

// -----

// expected-error @+1 {{'scale' transform needs 'axis' = 0 (rows or vector elements) or 1 (columns)}}
kiln.weight @w : tensor<4x2xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 2], offset = 0, bytes = 32>, transforms = [#kiln.transform<"scale", {axis = 2 : i64, factors = dense<[1.0, 2.0]> : tensor<2xf32>}>]}

// -----

// expected-error @+1 {{'scale' transform factors must be finite and non-zero}}
kiln.weight @w : tensor<4x2xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 2], offset = 0, bytes = 32>, transforms = [#kiln.transform<"scale", {axis = 1 : i64, factors = dense<[1.0, 0.0]> : tensor<2xf32>}>]}

// -----

// expected-error @+1 {{'kiln.weight' op 'scale' with 3 factors along axis 1 does not fit shape [4, 2]}}
kiln.weight @w : tensor<4x2xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 2], offset = 0, bytes = 32>, transforms = [#kiln.transform<"scale", {axis = 1 : i64, factors = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>}>]}

// -----

// expected-error @+1 {{'kiln.weight' op 'scale' must come before 'quantize'}}
kiln.weight @w.scales : tensor<4xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 2], offset = 0, bytes = 32>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "scales"}>, #kiln.transform<"scale", {axis = 0 : i64, factors = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>}>]}

// -----

// expected-error @+1 {{'quantize' transform 'method' must be "rtn" or "gptq", got "awq"}}
kiln.weight @w.scales : tensor<4x1xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 2], offset = 0, bytes = 32>, transforms = [#kiln.transform<"quantize", {bits = 4 : i64, group_size = 2 : i64, part = "scales", method = "awq"}>]}

// -----

// expected-error @+1 {{GPTQ 'quantize' needs non-empty 'calibration' (file) and 'hessian' (tensor) strings}}
kiln.weight @w.scales : tensor<4x1xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 2], offset = 0, bytes = 32>, transforms = [#kiln.transform<"quantize", {bits = 4 : i64, group_size = 2 : i64, part = "scales", method = "gptq"}>]}

// -----

// expected-error @+1 {{GPTQ 'quantize' is implemented for 4 bits}}
kiln.weight @w.scales : tensor<4xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4, 2], offset = 0, bytes = 32>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "scales", method = "gptq", calibration = "c", hessian = "h"}>]}

// -----

func.func @negative_observe_empty_tap(%x: tensor<?x16xf32>) {
  // expected-error @+1 {{'kiln.observe' op expects a non-empty tap name}}
  kiln.observe %x {tap = ""} : tensor<?x16xf32>
  return
}

// -----

// Tap names become tensor names of the calibration file.
func.func @negative_observe_bad_tap(%x: tensor<?x16xf32>) {
  // expected-error @+1 {{'kiln.observe' op tap name 'layers 0/in' may only contain letters, digits, '_', '.' and '-'}}
  kiln.observe %x {tap = "layers 0/in"} : tensor<?x16xf32>
  return
}

// -----

// Calibration runs the model in f32.
func.func @negative_observe_f16(%x: tensor<?x16xf16>) {
  // expected-error @+1 {{'kiln.observe' op operand #0 must be 2D tensor of 32-bit float values}}
  kiln.observe %x {tap = "t"} : tensor<?x16xf16>
  return
}

// -----

func.func @negative_key_mean_f32_cache(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %mu: tensor<8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %pos: index) {
  // expected-error @+1 {{'kiln.attention' op key centering (key_mean) needs an 8-bit kv_cache (i8 or f8E4M3FN), got 'f32'}}
  %o = kiln.attention %q, %k, %k, %c, %pos key_mean(%mu : tensor<8xf32>) {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, key_mean_theta = 1.0e4 : f32, key_mean_rotary_dim = 4 : i64} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  return
}

// -----

func.func @negative_key_mean_size(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %mu: tensor<6xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f8E4M3FN>, %pos: index) {
  // expected-error @+1 {{'kiln.attention' op expects key_mean of num_kv_heads * head_dim (8) elements, got 6}}
  %o = kiln.attention %q, %k, %k, %c, %pos key_mean(%mu : tensor<6xf32>) {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, key_mean_theta = 1.0e4 : f32, key_mean_rotary_dim = 4 : i64} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f8E4M3FN> -> tensor<?x16xf32>
  return
}

// -----

func.func @negative_key_mean_no_theta(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %mu: tensor<8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, i8>, %pos: index) {
  // expected-error @+1 {{'kiln.attention' op expects key_mean, key_mean_theta and key_mean_rotary_dim together (key centering) or none of them}}
  %o = kiln.attention %q, %k, %k, %c, %pos key_mean(%mu : tensor<8xf32>) {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, key_mean_rotary_dim = 4 : i64} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, i8> -> tensor<?x16xf32>
  return
}

// -----

func.func @negative_key_mean_attrs_only(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %mu: tensor<8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, i8>, %pos: index) {
  // expected-error @+1 {{'kiln.attention' op expects key_mean, key_mean_theta and key_mean_rotary_dim together (key centering) or none of them}}
  %o = kiln.attention %q, %k, %k, %c, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, key_mean_theta = 1.0e4 : f32, key_mean_rotary_dim = 4 : i64} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, i8> -> tensor<?x16xf32>
  return
}

// -----

func.func @negative_key_mean_odd_rotary(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %mu: tensor<8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f8E4M3FN>, %pos: index) {
  // expected-error @+1 {{'kiln.attention' op expects an even key_mean_rotary_dim <= head_dim (4), got 3}}
  %o = kiln.attention %q, %k, %k, %c, %pos key_mean(%mu : tensor<8xf32>) {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, key_mean_theta = 1.0e4 : f32, key_mean_rotary_dim = 3 : i64} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f8E4M3FN> -> tensor<?x16xf32>
  return
}

// -----

func.func @negative_key_mean_theta(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %mu: tensor<8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f8E4M3FN>, %pos: index) {
  // expected-error @+1 {{'kiln.attention' op expects a positive finite key_mean_theta, got 0}}
  %o = kiln.attention %q, %k, %k, %c, %pos key_mean(%mu : tensor<8xf32>) {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, key_mean_theta = 0.0 : f32, key_mean_rotary_dim = 4 : i64} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f8E4M3FN> -> tensor<?x16xf32>
  return
}

// RUN: kiln-opt %s | FileCheck %s
// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s

// One decoder layer of a GQA Llama (2 query heads per KV head), every op of
// the dialect once, round-tripped through the printer and parser.

// CHECK: kiln.weight @tok_embeddings : tensor<32x16xf32>
// CHECK-SAME: #kiln.source<file = "m.bin", tensor = "tok_embeddings", storage = "f32", shape = [32, 16], offset = 28, bytes = 2048>
kiln.weight @tok_embeddings : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "tok_embeddings", storage = "f32", shape = [32, 16], offset = 28, bytes = 2048>, transforms = []}
kiln.weight @norm : tensor<16xf32> {source = #kiln.source<file = "m.bin", tensor = "norm", storage = "f32", shape = [16], offset = 2076, bytes = 64>, transforms = []}
// Hugging Face q_proj: dequantized, then rows reordered for adjacent-pair RoPE.
// CHECK: kiln.weight @wq : tensor<16x16xf32>
// CHECK-SAME: transforms = [#kiln.transform<"dequantize", {}>, #kiln.transform<"rope_half_to_adjacent", {heads = 4 : i64}>]
kiln.weight @wq : tensor<16x16xf32> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.attn_q.weight", storage = "q8_0", shape = [16, 16], offset = 4096, bytes = 272>, transforms = [#kiln.transform<"dequantize", {}>, #kiln.transform<"rope_half_to_adjacent", {heads = 4 : i64}>]}
kiln.weight @wk : tensor<8x16xf32> {source = #kiln.source<file = "m.bin", tensor = "wk", storage = "f32", shape = [8, 16], offset = 3200, bytes = 512>, transforms = []}
// Synthetic weights carry their generator's parameters instead of a file.
// CHECK: kiln.weight @wv : tensor<8x16xf32>
// CHECK-SAME: storage = "synthetic", shape = [8, 16], offset = 0, bytes = 0, seed = 7, scale = 2.000000e-02 : f32, center = 0.000000e+00 : f32
kiln.weight @wv : tensor<8x16xf32> {source = #kiln.source<file = "", tensor = "wv", storage = "synthetic", shape = [8, 16], offset = 0, bytes = 0, seed = 7, scale = 2.0e-02 : f32, center = 0.0 : f32>, transforms = []}
kiln.weight @w1 : tensor<24x16xf32> {source = #kiln.source<file = "m.bin", tensor = "w1", storage = "f32", shape = [24, 16], offset = 4000, bytes = 1536>, transforms = []}

// CHECK-LABEL: func.func @decoder_layer
// CHECK-SAME: !kiln.kv_cache<1, 64, 2, 4, f32>
func.func @decoder_layer(%tokens: tensor<?xi32>, %pos: index, %cache: !kiln.kv_cache<1, 64, 2, 4, f32>) -> tensor<1x32xf32> {
  // CHECK: %[[TABLE:.*]] = kiln.weight_ref @tok_embeddings : tensor<32x16xf32>
  %table = kiln.weight_ref @tok_embeddings : tensor<32x16xf32>
  // CHECK: %[[H:.*]] = kiln.embedding %{{.*}}, %[[TABLE]] : tensor<?xi32>, tensor<32x16xf32> -> tensor<?x16xf32>
  %h = kiln.embedding %tokens, %table : tensor<?xi32>, tensor<32x16xf32> -> tensor<?x16xf32>
  %g = kiln.weight_ref @norm : tensor<16xf32>
  // CHECK: kiln.rms_norm %[[H]], %{{.*}} {epsilon = 9.99999974E-6 : f32} : tensor<?x16xf32>, tensor<16xf32>
  %x = kiln.rms_norm %h, %g {epsilon = 1.0e-5 : f32} : tensor<?x16xf32>, tensor<16xf32>
  %wq = kiln.weight_ref @wq : tensor<16x16xf32>
  %wk = kiln.weight_ref @wk : tensor<8x16xf32>
  %wv = kiln.weight_ref @wv : tensor<8x16xf32>
  // CHECK: kiln.linear %{{.*}}, %{{.*}} : tensor<?x16xf32>, tensor<16x16xf32> -> tensor<?x16xf32>
  %q = kiln.linear %x, %wq : tensor<?x16xf32>, tensor<16x16xf32> -> tensor<?x16xf32>
  %k = kiln.linear %x, %wk : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
  %v = kiln.linear %x, %wv : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
  // CHECK: kiln.rope %{{.*}}, %{{.*}} {head_dim = 4 : i64, num_heads = 4 : i64, rotary_dim = 4 : i64, theta = 1.000000e+04 : f32} : tensor<?x16xf32>
  %qr = kiln.rope %q, %pos {num_heads = 4 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32} : tensor<?x16xf32>
  // Linear RoPE scaling (position interpolation) is an attribute.
  // CHECK: kiln.rope {{.*}}scaling_factor = 4.000000e+00 : f32
  %kr = kiln.rope %k, %pos {num_heads = 2 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32, scaling_factor = 4.0 : f32} : tensor<?x8xf32>
  // CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {head_dim = 4 : i64, layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 5.000000e-01 : f32}
  // CHECK-SAME: -> tensor<?x16xf32>
  %a = kiln.attention %qr, %kr, %v, %cache, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  // CHECK: kiln.add
  %h2 = kiln.add %h, %a : tensor<?x16xf32>
  %w1 = kiln.weight_ref @w1 : tensor<24x16xf32>
  %gate = kiln.linear %h2, %w1 : tensor<?x16xf32>, tensor<24x16xf32> -> tensor<?x24xf32>
  // CHECK: kiln.silu
  %s = kiln.silu %gate : tensor<?x24xf32>
  // CHECK: kiln.mul
  %m = kiln.mul %s, %gate : tensor<?x24xf32>
  // CHECK: kiln.swiglu
  %sw = kiln.swiglu %gate, %m : tensor<?x24xf32>
  // CHECK: kiln.logits %{{.*}}, %[[TABLE]] : tensor<?x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  %logits = kiln.logits %h2, %table : tensor<?x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %logits : tensor<1x32xf32>
}

// Quantized forms added for SmoothQuant W8A8, GGUF Q8_0 kept quantized
// (8-bit groups of 32) and the FP8 E4M3 KV cache.
// CHECK-LABEL: func.func @quantized_forms
// CHECK-SAME: !kiln.kv_cache<1, 64, 2, 4, f8E4M3FN>
// CHECK: act_quant = "int8_per_token"
// CHECK: act_quant = "int8_per_tensor", act_scale = 2.500000e-01 : f32
// CHECK: bits = 8 : i64, group_size = 32 : i64
func.func @quantized_forms(%x: tensor<?x64xf32>, %q: tensor<8x64xi8>, %s: tensor<8xf32>, %sg: tensor<8x2xf32>, %cache: !kiln.kv_cache<1, 64, 2, 4, f8E4M3FN>) {
  %a = kiln.quantized_linear %x, %q, %s {bits = 8 : i64, group_size = 0 : i64, act_quant = "int8_per_token"} : tensor<?x64xf32>, tensor<8x64xi8>, tensor<8xf32> -> tensor<?x8xf32>
  %b = kiln.quantized_linear %x, %q, %s {bits = 8 : i64, group_size = 0 : i64, act_quant = "int8_per_tensor", act_scale = 0.25 : f32} : tensor<?x64xf32>, tensor<8x64xi8>, tensor<8xf32> -> tensor<?x8xf32>
  %c = kiln.quantized_linear %x, %q, %sg {bits = 8 : i64, group_size = 32 : i64} : tensor<?x64xf32>, tensor<8x64xi8>, tensor<8x2xf32> -> tensor<?x8xf32>
  return
}

// Calibration observer: no result, kept by its effect on the observer.
// CHECK-LABEL: func.func @observe_activation
// CHECK: kiln.observe %{{.*}} {tap = "layers.0.attn_in"} : tensor<?x64xf32>
func.func @observe_activation(%x: tensor<?x64xf32>) {
  kiln.observe %x {tap = "layers.0.attn_in"} : tensor<?x64xf32>
  return
}

// Key centering on an 8-bit cache (kiln-center-keys): the calibrated
// pre-RoPE key mean and the RoPE parameters it is rotated with.
// CHECK-LABEL: func.func @centered_keys
// CHECK: kiln.attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} key_mean(%{{.*}} : tensor<8xf32>) {head_dim = 4 : i64, key_mean_rotary_dim = 4 : i64, key_mean_theta = 1.000000e+04 : f32, layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 5.000000e-01 : f32}
// CHECK-SAME: !kiln.kv_cache<1, 64, 2, 4, i8>
func.func @centered_keys(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %mu: tensor<8xf32>, %cache: !kiln.kv_cache<1, 64, 2, 4, i8>, %pos: index) -> tensor<?x16xf32> {
  %a = kiln.attention %q, %k, %k, %cache, %pos key_mean(%mu : tensor<8xf32>) {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, key_mean_theta = 1.0e4 : f32, key_mean_rotary_dim = 4 : i64} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, i8> -> tensor<?x16xf32>
  return %a : tensor<?x16xf32>
}

// RUN: kiln-opt %s --kiln-lower-to-plan --split-input-file --verify-diagnostics

// The lowering relies on the verifier for the quantized forms it accepts:
// W8A8 only over 8-bit per-channel weights ...
func.func @negative_w8a8_grouped(%x: tensor<?x16xf32>, %q: tensor<8x16xi8>, %s: tensor<8x3xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'kiln.quantized_linear' op int8 activations (act_quant 'int8_per_token') need 8-bit per-channel weights (group_size 0), got 8 bits, group_size 6}}
  %y = kiln.quantized_linear %x, %q, %s {bits = 8 : i64, group_size = 6 : i64, act_quant = "int8_per_token"} : tensor<?x16xf32>, tensor<8x16xi8>, tensor<8x3xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// ... group-wise 8-bit scales of shape [out, ceil(in / group_size)] ...
func.func @negative_grouped_scales(%x: tensor<?x16xf32>, %q: tensor<8x16xi8>, %s: tensor<8x2xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'kiln.quantized_linear' op expects scales of shape [8, 3] for group_size 6, got 'tensor<8x2xf32>'}}
  %y = kiln.quantized_linear %x, %q, %s {bits = 8 : i64, group_size = 6 : i64} : tensor<?x16xf32>, tensor<8x16xi8>, tensor<8x2xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// ... and a positive static activation scale.
func.func @negative_static_scale(%x: tensor<?x16xf32>, %q: tensor<8x16xi8>, %s: tensor<8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'kiln.quantized_linear' op act_scale must be positive, got 0.000000e+00}}
  %y = kiln.quantized_linear %x, %q, %s {bits = 8 : i64, group_size = 0 : i64, act_quant = "int8_per_tensor", act_scale = 0.0 : f32} : tensor<?x16xf32>, tensor<8x16xi8>, tensor<8xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// Planned buffers are still required for the new kernels.
kiln.weight @wv.qweight : tensor<8x16xi8> {source = #kiln.source<file = "m.bin", tensor = "wv", storage = "f32", shape = [8, 16], offset = 0, bytes = 512>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "qweight"}>]}
kiln.weight @wv.scales : tensor<8xf32> {source = #kiln.source<file = "m.bin", tensor = "wv", storage = "f32", shape = [8, 16], offset = 0, bytes = 512>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "scales"}>]}
kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 512, bytes = 2048>, transforms = []}
func.func @negative_unplanned_w8a8(%tokens: tensor<1xi32>, %pos: index) -> tensor<1x32xf32> {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  %x = kiln.embedding %tokens, %table {kiln.buffer_offset = 0 : i64} : tensor<1xi32>, tensor<32x16xf32> -> tensor<1x16xf32>
  %q = kiln.weight_ref @wv.qweight : tensor<8x16xi8>
  %s = kiln.weight_ref @wv.scales : tensor<8xf32>
  // expected-error @+1 {{'kiln.quantized_linear' op has no kiln.buffer_offset; run --kiln-memory-plan first}}
  %y = kiln.quantized_linear %x, %q, %s {bits = 8 : i64, group_size = 0 : i64, act_quant = "int8_per_token"} : tensor<1x16xf32>, tensor<8x16xi8>, tensor<8xf32> -> tensor<1x8xf32>
  %logits = kiln.logits %x, %table : tensor<1x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %logits : tensor<1x32xf32>
}

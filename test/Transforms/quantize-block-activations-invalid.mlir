// RUN: kiln-opt %s --split-input-file --verify-diagnostics
// RUN: not kiln-opt %S/quantize-block-activations.mlir --kiln-quantize-block-activations="scheme=int4" 2>&1 | FileCheck %s --check-prefix=SCHEME

// SCHEME: kiln-quantize-block-activations: unknown scheme 'int4' (expected int8-per-block or none)

func.func @unknown_act_quant(%h: tensor<?x256xf32>, %w: tensor<32x144xi8>) -> tensor<?x32xf32> {
  // expected-error @+1 {{'kiln.linear' op unknown act_quant 'int8_per_token' (expected int8_per_block)}}
  %q = kiln.linear %h, %w {format = "q4_k", act_quant = "int8_per_token"} : tensor<?x256xf32>, tensor<32x144xi8> -> tensor<?x32xf32>
  return %q : tensor<?x32xf32>
}

// -----

func.func @float_weight(%h: tensor<?x256xf32>, %w: tensor<32x256xf32>) -> tensor<?x32xf32> {
  // expected-error @+1 {{'kiln.linear' op act_quant 'int8_per_block' needs a weight in a GGML block format (a 'format' attribute)}}
  %q = kiln.linear %h, %w {act_quant = "int8_per_block"} : tensor<?x256xf32>, tensor<32x256xf32> -> tensor<?x32xf32>
  return %q : tensor<?x32xf32>
}

// -----

func.func @float_classifier(%h: tensor<?x256xf32>, %w: tensor<8x256xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{'kiln.logits' op act_quant 'int8_per_block' needs a weight in a GGML block format (a 'format' attribute)}}
  %l = kiln.logits %h, %w {act_quant = "int8_per_block"} : tensor<?x256xf32>, tensor<8x256xf32> -> tensor<1x8xf32>
  return %l : tensor<1x8xf32>
}

// RUN: kiln-opt %s --pass-pipeline="builtin.module(func.func(kiln-memory-plan))" --split-input-file --verify-diagnostics

kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}

// A dynamic token dimension with no bound cannot be given a static buffer.
func.func @negative_unbounded(%tokens: tensor<?xi32>) -> tensor<1x32xf32> {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  // expected-error @+1 {{'kiln.embedding' op has a dynamic dimension but neither the max-tokens option nor kiln.max_tokens on the function bounds it}}
  %h = kiln.embedding %tokens, %table : tensor<?xi32>, tensor<32x16xf32> -> tensor<?x16xf32>
  %logits = kiln.logits %h, %table : tensor<?x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %logits : tensor<1x32xf32>
}

// -----

kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}

// A bound so large the buffer size would overflow is refused, not wrapped.
func.func @negative_overflow(%tokens: tensor<?xi32>) -> tensor<1x32xf32> attributes {kiln.max_tokens = 9223372036854775807 : i64} {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  // expected-error @+1 {{'kiln.embedding' op needs a buffer of more than 2^48 bytes for 'tensor<?x16xf32>' at 9223372036854775807 tokens}}
  %h = kiln.embedding %tokens, %table : tensor<?xi32>, tensor<32x16xf32> -> tensor<?x16xf32>
  %logits = kiln.logits %h, %table : tensor<?x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %logits : tensor<1x32xf32>
}

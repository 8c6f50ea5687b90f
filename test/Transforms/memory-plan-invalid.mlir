// RUN: kiln-opt %s --pass-pipeline="builtin.module(func.func(kiln-memory-plan))" --split-input-file --verify-diagnostics

kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", offset = 0, bytes = 2048>, transforms = []}

// A dynamic token dimension with no bound cannot be given a static buffer.
func.func @negative_unbounded(%tokens: tensor<?xi32>) -> tensor<1x32xf32> {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  // expected-error @+1 {{'kiln.embedding' op has a dynamic dimension but neither the max-tokens option nor kiln.max_tokens on the function bounds it}}
  %h = kiln.embedding %tokens, %table : tensor<?xi32>, tensor<32x16xf32> -> tensor<?x16xf32>
  %logits = kiln.logits %h, %table : tensor<?x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %logits : tensor<1x32xf32>
}

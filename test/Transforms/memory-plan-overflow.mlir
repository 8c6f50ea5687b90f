// RUN: kiln-opt %s --pass-pipeline="builtin.module(func.func(kiln-memory-plan))" --verify-diagnostics

// Each buffer fits (2^42 tokens x 16 x f32 = 2^48 bytes) but two live at
// once would put the second past 2^48 bytes of arena: refused, not wrapped.
kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}
kiln.weight @g : tensor<16xf32> {source = #kiln.source<file = "m.bin", tensor = "g", storage = "f32", shape = [16], offset = 2048, bytes = 64>, transforms = []}

func.func @negative_arena_overflow(%tokens: tensor<?xi32>) -> tensor<1x32xf32> attributes {kiln.max_tokens = 4398046511104 : i64} {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  %g = kiln.weight_ref @g : tensor<16xf32>
  %h = kiln.embedding %tokens, %table : tensor<?xi32>, tensor<32x16xf32> -> tensor<?x16xf32>
  // expected-error @+1 {{'kiln.rms_norm' op would place a buffer of 281474976710656 bytes at arena offset 281474976710656, past 2^48 bytes}}
  %x = kiln.rms_norm %h, %g {epsilon = 1.0e-5 : f32} : tensor<?x16xf32>, tensor<16xf32>
  %s = kiln.add %h, %x : tensor<?x16xf32>
  %logits = kiln.logits %s, %table : tensor<?x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %logits : tensor<1x32xf32>
}

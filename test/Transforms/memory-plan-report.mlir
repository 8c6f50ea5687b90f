// RUN: kiln-opt %s --pass-pipeline="builtin.module(func.func(kiln-memory-plan{report=true}))" --verify-diagnostics -o /dev/null

kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}
kiln.weight @g : tensor<16xf32> {source = #kiln.source<file = "m.bin", tensor = "g", storage = "f32", shape = [16], offset = 2048, bytes = 64>, transforms = []}

// report=true states the peak activation bytes (largest sum of live
// buffers) and the arena they were packed into.
// expected-remark @+1 {{memory plan for 'report_chain': 5 buffers, peak activation bytes 768, arena bytes 768 (max tokens 4)}}
func.func @report_chain(%tokens: tensor<?xi32>, %pos: index) -> tensor<1x32xf32> attributes {kiln.max_tokens = 4 : i64} {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  %g = kiln.weight_ref @g : tensor<16xf32>
  %h = kiln.embedding %tokens, %table : tensor<?xi32>, tensor<32x16xf32> -> tensor<?x16xf32>
  %x = kiln.rms_norm %h, %g {epsilon = 1.0e-5 : f32} : tensor<?x16xf32>, tensor<16xf32>
  %y = kiln.rms_norm %x, %g {epsilon = 1.0e-5 : f32} : tensor<?x16xf32>, tensor<16xf32>
  %z = kiln.rms_norm %y, %g {epsilon = 1.0e-5 : f32} : tensor<?x16xf32>, tensor<16xf32>
  %s = kiln.add %h, %z : tensor<?x16xf32>
  %logits = kiln.logits %s, %table : tensor<?x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %logits : tensor<1x32xf32>
}

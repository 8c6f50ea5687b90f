// RUN: kiln-opt %s --kiln-lower-to-plan --split-input-file --verify-diagnostics

kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}

// Lowering needs the memory plan's offsets.
func.func @negative_unplanned(%tokens: tensor<1xi32>, %pos: index) -> tensor<1x32xf32> {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  // expected-error @+1 {{'kiln.embedding' op has no kiln.buffer_offset; run --kiln-memory-plan first}}
  %h = kiln.embedding %tokens, %table : tensor<1xi32>, tensor<32x16xf32> -> tensor<1x16xf32>
  %logits = kiln.logits %h, %table : tensor<1x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %logits : tensor<1x32xf32>
}

// -----

kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}

// The runtime reads logits from one place: entry points return kiln.logits.
func.func @negative_returns_hidden(%tokens: tensor<1xi32>, %pos: index) -> tensor<1x16xf32> {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  %h = kiln.embedding %tokens, %table {kiln.buffer_offset = 0 : i64} : tensor<1xi32>, tensor<32x16xf32> -> tensor<1x16xf32>
  // expected-error @+1 {{'func.return' op entry points must return the result of kiln.logits}}
  return %h : tensor<1x16xf32>
}

// -----

// Observer tap indices come from kiln.observe_taps (kiln-insert-observers).
kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}
func.func @negative_observe_unlisted_tap(%tokens: tensor<1xi32>, %pos: index) -> tensor<1x32xf32> {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  %x = kiln.embedding %tokens, %table {kiln.buffer_offset = 0 : i64} : tensor<1xi32>, tensor<32x16xf32> -> tensor<1x16xf32>
  // expected-error @+1 {{'kiln.observe' op tap 'emb' is not listed in the module's kiln.observe_taps (run --kiln-insert-observers)}}
  kiln.observe %x {tap = "emb"} : tensor<1x16xf32>
  %logits = kiln.logits %x, %table : tensor<1x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %logits : tensor<1x32xf32>
}

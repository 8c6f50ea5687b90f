// RUN: kiln-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(kiln-memory-plan))" | FileCheck %s
// RUN: kiln-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(kiln-memory-plan{max-tokens=8}))" | FileCheck %s --check-prefix=EIGHT

kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}
kiln.weight @g : tensor<16xf32> {source = #kiln.source<file = "m.bin", tensor = "g", storage = "f32", shape = [16], offset = 2048, bytes = 64>, transforms = []}

// Each [4, 16] f32 activation takes 256 bytes. %x dies at %z's op, so %z
// reuses its slot; %y dies before the add, whose result takes its place.
// Weights and the returned logits are not in the arena.
// CHECK-LABEL: func.func @plan_chain
// CHECK-SAME: kiln.arena_bytes = 768 : i64
// CHECK-SAME: kiln.peak_activation_bytes = 768 : i64
// CHECK: kiln.weight_ref @table
// CHECK-NOT: kiln.buffer_offset
// CHECK: kiln.embedding {{.*}}kiln.buffer_offset = 0 : i64
// CHECK: kiln.rms_norm {{.*}}kiln.buffer_offset = 256 : i64
// CHECK: kiln.rms_norm {{.*}}kiln.buffer_offset = 512 : i64
// CHECK: kiln.rms_norm {{.*}}kiln.buffer_offset = 256 : i64
// CHECK: kiln.add {{.*}}kiln.buffer_offset = 512 : i64
// CHECK: kiln.logits
// CHECK-NOT: kiln.buffer_offset
// CHECK: return

// The max-tokens option overrides the function's bound.
// EIGHT-LABEL: func.func @plan_chain
// EIGHT-SAME: kiln.arena_bytes = 1536 : i64
func.func @plan_chain(%tokens: tensor<?xi32>, %pos: index) -> tensor<1x32xf32> attributes {kiln.max_tokens = 4 : i64} {
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

// -----

kiln.weight @table : tensor<32x16xf32> {source = #kiln.source<file = "m.bin", tensor = "t", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}

// Static decode shapes need no bound; buffers are 64-byte aligned
// ([1, 16] f32 = 64 bytes).
// CHECK-LABEL: func.func @plan_decode_static
// CHECK-SAME: kiln.arena_bytes = 64 : i64
// EIGHT-LABEL: func.func @plan_decode_static
func.func @plan_decode_static(%tokens: tensor<1xi32>) -> tensor<1x32xf32> {
  %table = kiln.weight_ref @table : tensor<32x16xf32>
  %h = kiln.embedding %tokens, %table : tensor<1xi32>, tensor<32x16xf32> -> tensor<1x16xf32>
  %logits = kiln.logits %h, %table : tensor<1x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %logits : tensor<1x32xf32>
}

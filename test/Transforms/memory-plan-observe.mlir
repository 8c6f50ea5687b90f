// RUN: kiln-opt %s --pass-pipeline="builtin.module(func.func(kiln-memory-plan))" | FileCheck %s

// An observer is a use: %a stays live until kiln.observe, after %c is made,
// so %c cannot take %a's slot (without the observer %c would reuse offset 0).
// The observer has no result and gets no buffer.
// CHECK-LABEL: func.func @observe_extends_liveness
// CHECK-SAME: kiln.arena_bytes = 768 : i64
// CHECK: %[[A:.*]] = kiln.silu {{.*}}kiln.buffer_offset = 0 : i64
// CHECK: kiln.silu {{.*}}kiln.buffer_offset = 256 : i64
// CHECK: kiln.silu {{.*}}kiln.buffer_offset = 512 : i64
// CHECK: kiln.observe %[[A]] {tap = "a"} : tensor<4x16xf32>
// CHECK: kiln.silu {{.*}}kiln.buffer_offset = 0 : i64
func.func @observe_extends_liveness(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %a = kiln.silu %x : tensor<4x16xf32>
  %b = kiln.silu %a : tensor<4x16xf32>
  %c = kiln.silu %b : tensor<4x16xf32>
  kiln.observe %a {tap = "a"} : tensor<4x16xf32>
  %d = kiln.silu %c : tensor<4x16xf32>
  %e = kiln.add %d, %c : tensor<4x16xf32>
  return %e : tensor<4x16xf32>
}

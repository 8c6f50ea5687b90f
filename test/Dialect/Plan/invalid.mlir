// RUN: kiln-opt %s --split-input-file --verify-diagnostics

// expected-error @+1 {{'plan.weight' op expects a 64-byte aligned offset, got 100}}
plan.weight @w : memref<8x16xf32> {offset = 100 : i64}

// -----

// expected-error @+1 {{'plan.weight' op expects a static weight shape, got 'memref<?x16xf32>'}}
plan.weight @w : memref<?x16xf32> {offset = 0 : i64}

// -----

func.func @negative_weight_ref() {
  // expected-error @+1 {{'plan.weight_ref' op 'missing' does not reference a plan.weight}}
  %w = plan.weight_ref @missing : memref<8x16xf32>
  return
}

// -----

plan.weight @w : memref<8x16xf32> {offset = 0 : i64}
func.func @negative_weight_ref_type() {
  // expected-error @+1 {{'plan.weight_ref' op result type 'memref<16x8xf32>' does not match the weight type 'memref<8x16xf32>'}}
  %w = plan.weight_ref @w : memref<16x8xf32>
  return
}

// -----

func.func @negative_arena_alignment(%n: index) {
  // expected-error @+1 {{'plan.arena_view' op expects a 64-byte aligned offset, got 4}}
  %x = plan.arena_view [4] (%n) : memref<?x16xf32>
  return
}

// -----

func.func @negative_arena_sizes(%n: index) {
  // expected-error @+1 {{'plan.arena_view' op expects 1 dynamic sizes, got 0}}
  %x = plan.arena_view [0] : memref<?x16xf32>
  return
}

// -----

func.func @negative_kernel_name(%n: index) {
  // expected-error @+1 {{'plan.call_kernel' op callee 'printf' is not a kernel of the runtime ABI (kiln_k_*)}}
  plan.call_kernel "printf"(%n) : index
  return
}

// -----

func.func @negative_kernel_arg(%n: index, %x: i8) {
  // expected-error @+1 {{'plan.call_kernel' op cannot pass a value of type 'i8' to a kernel (expected memref, index or f32)}}
  plan.call_kernel "kiln_k_silu"(%x) : i8
  return
}

// -----

// expected-error @+1 {{'plan.fused_kernel' op unknown fusion family 'vertical' (expected horizontal, prologue, epilogue or elementwise)}}
plan.fused_kernel @k families ["vertical"] {
^bb0(%a: tensor<?x16xf32>, %b: tensor<?x16xf32>):
  %0 = kiln.add %a, %b : tensor<?x16xf32>
  kiln.yield %0 : tensor<?x16xf32>
}

// -----

// expected-error @+1 {{'plan.fused_kernel' op expects at least one fusion family (only a kernel of a single op has none)}}
plan.fused_kernel @k families [] {
^bb0(%a: tensor<?x16xf32>, %b: tensor<?x16xf32>):
  %0 = kiln.add %a, %b : tensor<?x16xf32>
  %1 = kiln.silu %0 : tensor<?x16xf32>
  kiln.yield %1 : tensor<?x16xf32>
}

// -----

// The buffers a call passes must hold the region's values: the generated
// kernel's loops and row readers take the region's sizes.
plan.fused_kernel @k families ["elementwise"] {
^bb0(%a: tensor<?x24xf32>, %b: tensor<?x24xf32>):
  %0 = kiln.add %a, %b : tensor<?x24xf32>
  %1 = kiln.silu %0 : tensor<?x24xf32>
  kiln.yield %1 : tensor<?x24xf32>
}
func.func @f(%n: index) {
  %a = plan.arena_view[0] (%n) : memref<?x16xf32>
  %b = plan.arena_view[4096] (%n) : memref<?x24xf32>
  %y = plan.arena_view[8192] (%n) : memref<?x24xf32>
  // expected-error @+1 {{'plan.call_fused' op operand #0 ('memref<?x16xf32>') does not hold 'k''s argument of type 'tensor<?x24xf32>'}}
  plan.call_fused @k(%a, %b, %y, %n) : memref<?x16xf32>, memref<?x24xf32>, memref<?x24xf32>, index
  return
}

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

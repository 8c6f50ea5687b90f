// RUN: kiln-opt %s --kiln-plan-to-emitc --split-input-file --verify-diagnostics

// bf16 activations have no CPU kernels yet.
func.func @negative_bf16(%n: index, %pos: index) {
  // expected-error @+1 {{'plan.arena_view' op element type 'bf16' is not supported by the cpu target yet}}
  %x = plan.arena_view [0] (%n) : memref<?x16xbf16>
  return
}

// -----

func.func @negative_kv_f16(%n: index, %pos: index) {
  // expected-error @+1 {{'plan.kv_cache_view' op only f32 KV caches are supported by the cpu target yet}}
  %k = plan.kv_cache_view layer 0 part 0 : memref<64x8xf16>
  return
}

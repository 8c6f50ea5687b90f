// RUN: kiln-opt %s --split-input-file --verify-diagnostics
//
// Size arithmetic in the verifiers is overflow-checked: shapes whose byte
// sizes overflow 64 bits (or pass 2^48 bytes) are located errors, never a
// wrapped size that the lowering, the weight writer or the runtime would use.

// 2^40 tokens x 2^20 x f32: the product wraps int64.
// expected-error @+1 {{kv_cache of 2 layers x 1099511627776 tokens x 1024 kv heads x 1024 'f32' needs more than 2^48 bytes}}
func.func @kv_cache_overflow(%c: !kiln.kv_cache<2, 1099511627776, 1024, 1024, f32>) {
  return
}

// -----

// Fits in int64 but not in 2^48 bytes.
// expected-error @+1 {{kv_cache of 32 layers x 1073741824 tokens x 64 kv heads x 128 'i8' needs more than 2^48 bytes}}
func.func @kv_cache_too_big(%c: !kiln.kv_cache<32, 1073741824, 64, 128, i8>) {
  return
}

// -----

// expected-error @+1 {{'kiln.weight' op weight of type 'tensor<4294967296x4294967296xf32>' needs more than 2^48 bytes}}
kiln.weight @w : tensor<4294967296x4294967296xf32> {source = #kiln.source<file = "m.bin", tensor = "w", storage = "f32", shape = [4294967296, 4294967296], offset = 0, bytes = 64>, transforms = []}

// -----

// expected-error @+1 {{'plan.weight' op weight of type 'memref<4294967296x4294967296xf32>' at offset 0 ends past 2^48 bytes}}
plan.weight @w : memref<4294967296x4294967296xf32> {offset = 0 : i64}

// -----

// The offset alone is near 2^63: offset + size overflows.
// expected-error @+1 {{'plan.weight' op weight of type 'memref<16xf32>' at offset 9223372036854775744 ends past 2^48 bytes}}
plan.weight @w : memref<16xf32> {offset = 9223372036854775744 : i64}

// -----

func.func @arena_view_overflow(%n: index) {
  // expected-error @+1 {{'plan.arena_view' op arena view of type 'memref<?x281474976710656xf32>' at offset 0 ends past 2^48 bytes}}
  %x = plan.arena_view [0] (%n) : memref<?x281474976710656xf32>
  return
}

// -----

// The largest sizes that fit are fine.
func.func @kv_cache_ok(%c: !kiln.kv_cache<32, 131072, 8, 128, f16>) {
  return
}

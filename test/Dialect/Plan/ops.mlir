// RUN: kiln-opt %s | FileCheck %s
// RUN: kiln-opt %s | kiln-opt | FileCheck %s

// CHECK: plan.weight @w : memref<8x16xf32> {offset = 64 : i64}
plan.weight @w : memref<8x16xf32> {offset = 64 : i64}

// CHECK-LABEL: func.func @prefill
func.func @prefill(%n: index, %pos: index) {
  // CHECK: %[[T:.*]] = plan.tokens(%{{.*}}) : memref<?xi32>
  %t = plan.tokens(%n) : memref<?xi32>
  // CHECK: plan.weight_ref @w : memref<8x16xf32>
  %w = plan.weight_ref @w : memref<8x16xf32>
  // CHECK: plan.arena_view[128] (%{{.*}}) : memref<?x16xf32>
  %x = plan.arena_view [128] (%n) : memref<?x16xf32>
  %y = plan.arena_view [0] (%n) : memref<?x8xf32>
  // CHECK: plan.kv_cache_view layer 1 part 1 offset 6144 : memref<64x8xf32>
  %v = plan.kv_cache_view layer 1 part 1 offset 6144 : memref<64x8xf32>
  %c1 = arith.constant 1 : index
  // CHECK: plan.row %{{.*}}[%{{.*}}] : memref<?x16xf32> -> memref<1x16xf32>
  %r = plan.row %x[%c1] : memref<?x16xf32> -> memref<1x16xf32>
  // CHECK: plan.logits : memref<1x8xf32>
  %l = plan.logits : memref<1x8xf32>
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  // CHECK: plan.call_kernel "kiln_k_linear"(%{{.*}}) : memref<?x16xf32>, memref<8x16xf32>, memref<?x8xf32>, index, index, index
  plan.call_kernel "kiln_k_linear"(%x, %w, %y, %n, %c16, %c8) : memref<?x16xf32>, memref<8x16xf32>, memref<?x8xf32>, index, index, index
  return
}

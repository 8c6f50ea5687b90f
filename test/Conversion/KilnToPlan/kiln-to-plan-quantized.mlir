// RUN: kiln-opt %S/../../Inputs/tiny-quantized.mlir --pass-pipeline="builtin.module(func.func(kiln-memory-plan),kiln-lower-to-plan)" | FileCheck %s

// Quantized weights are plain int8 / f32 buffers; grouped 8-bit scales keep
// their [out, groups] shape.
// CHECK: plan.weight @wq.qweight : memref<16x16xi8>
// CHECK: plan.weight @wq.scales : memref<16xf32>
// CHECK: plan.weight @wk.scales : memref<8x3xf32>

// CHECK-LABEL: func.func @prefill
// CHECK-SAME: (%[[N:.*]]: index, %[[POS:.*]]: index)
// W8A16 per channel: trailing group_size 0.
// CHECK: %[[WQ:.*]] = plan.weight_ref @wq.qweight : memref<16x16xi8>
// CHECK: %[[SQ:.*]] = plan.weight_ref @wq.scales : memref<16xf32>
// CHECK: %[[ZERO:.*]] = arith.constant 0 : index
// CHECK-NEXT: plan.call_kernel "kiln_k_linear_w8a16"(%{{.*}}, %[[WQ]], %[[SQ]], %{{.*}}, %[[N]], %{{.*}}, %{{.*}}, %[[ZERO]])

// W8A16 group-wise (GGUF Q8_0-style): trailing group_size 6, [8, 3] scales.
// CHECK: %[[SK:.*]] = plan.weight_ref @wk.scales : memref<8x3xf32>
// CHECK: %[[SIX:.*]] = arith.constant 6 : index
// CHECK-NEXT: plan.call_kernel "kiln_k_linear_w8a16"(%{{.*}}, %{{.*}}, %[[SK]], %{{.*}}, %[[N]], %{{.*}}, %{{.*}}, %[[SIX]])

// W8A8 with dynamic per-token activation scales: act_scale 0.
// CHECK: %[[SV:.*]] = plan.weight_ref @wv.scales : memref<8xf32>
// CHECK: %[[DYN:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: plan.call_kernel "kiln_k_linear_w8a8"(%{{.*}}, %{{.*}}, %[[SV]], %{{.*}}, %[[N]], %{{.*}}, %{{.*}}, %[[DYN]])

// FP8 KV cache: E4M3 keys and values (64 rows x 8 bytes each), then the f32
// scales of keys and values (64 x 2 each), addressed by byte offset.
// CHECK: %[[K:.*]] = plan.kv_cache_view layer 0 part 0 offset 0 : memref<64x8xf8E4M3FN>
// CHECK: %[[V:.*]] = plan.kv_cache_view layer 0 part 1 offset 512 : memref<64x8xf8E4M3FN>
// CHECK: %[[KS:.*]] = plan.kv_cache_view layer 0 part 2 offset 1024 : memref<64x2xf32>
// CHECK: %[[VS:.*]] = plan.kv_cache_view layer 0 part 3 offset 1536 : memref<64x2xf32>
// CHECK: plan.call_kernel "kiln_k_attention_kvf8"(%{{.*}}, %{{.*}}, %{{.*}}, %[[K]], %[[V]], %[[KS]], %[[VS]], %{{.*}}, %[[N]], %[[POS]],

// W8A8 with the static per-tensor activation scale.
// CHECK: %[[STATIC:.*]] = arith.constant 2.500000e-01 : f32
// CHECK-NEXT: plan.call_kernel "kiln_k_linear_w8a8"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[N]], %{{.*}}, %{{.*}}, %[[STATIC]])
// CHECK-NOT: kiln.quantized_linear
// CHECK: return

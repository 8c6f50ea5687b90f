// RUN: kiln-opt %S/../../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(func.func(kiln-memory-plan),kiln-lower-to-plan)" | FileCheck %s

// Weights get 64-byte aligned offsets in declaration order; the tied
// classifier shares the embedding's copy.
// CHECK: module attributes {{.*}}plan.arena_bytes = [[ARENA:[0-9]+]] : i64, plan.weights_bytes = 9920 : i64
// CHECK: plan.weight @tok_embeddings : memref<32x16xf32> {offset = 0 : i64}
// CHECK: plan.weight @layers.0.attention_norm : memref<16xf32> {offset = 2048 : i64}
// CHECK: plan.weight @layers.0.wq : memref<16x16xf32> {offset = 2112 : i64}
// CHECK: plan.weight @output : memref<32x16xf32> {offset = 0 : i64}
// CHECK-NOT: kiln.

// Entry points take the token count and start position; tensors become
// arena views at the planned offsets, sized by %n when dynamic.
// CHECK-LABEL: func.func @prefill
// CHECK-SAME: (%[[N:.*]]: index, %[[POS:.*]]: index)
// CHECK-SAME: plan.max_tokens = 8
// CHECK: %[[TOK:.*]] = plan.tokens(%[[N]]) : memref<?xi32>
// CHECK: %[[EMB:.*]] = plan.weight_ref @tok_embeddings : memref<32x16xf32>
// CHECK: %[[H0:.*]] = plan.arena_view[0] (%[[N]]) : memref<?x16xf32>
// CHECK: plan.call_kernel "kiln_k_embedding"(%[[TOK]], %[[N]], %[[EMB]], %{{.*}}, %{{.*}}, %[[H0]])
// CHECK: plan.call_kernel "kiln_k_rms_norm"
// CHECK: plan.call_kernel "kiln_k_linear"
// RoPE gets the start position.
// CHECK: plan.call_kernel "kiln_k_rope"({{.*}}, %[[POS]], %{{.*}}) :
// Attention reads and writes layer 0 of the KV cache.
// CHECK: %[[K:.*]] = plan.kv_cache_view layer 0 part 0 offset 0 : memref<64x8xf32>
// CHECK: %[[V:.*]] = plan.kv_cache_view layer 0 part 1 offset 2048 : memref<64x8xf32>
// CHECK: plan.call_kernel "kiln_k_attention"(%{{.*}}, %{{.*}}, %{{.*}}, %[[K]], %[[V]], %{{.*}}, %[[N]], %[[POS]],
// Elementwise kernels get the element count n * width.
// CHECK: %[[COUNT:.*]] = arith.muli %[[N]], %{{.*}} : index
// CHECK: plan.call_kernel "kiln_k_add"({{.*}}, %[[COUNT]])
// CHECK: plan.call_kernel "kiln_k_swiglu"
// The classifier runs on the last token's row only, into the logits buffer.
// CHECK: %[[LOGITS:.*]] = plan.logits : memref<1x32xf32>
// CHECK: %[[LAST:.*]] = arith.subi %[[N]], %{{.*}} : index
// CHECK: %[[ROW:.*]] = plan.row %{{.*}}[%[[LAST]]] : memref<?x16xf32> -> memref<1x16xf32>
// CHECK: plan.call_kernel "kiln_k_linear"(%[[ROW]], %{{.*}}, %[[LOGITS]],
// CHECK: return

// Decode is static: one token, no dynamic sizes.
// CHECK-LABEL: func.func @decode
// CHECK: plan.tokens(%{{.*}}) : memref<1xi32>
// CHECK: plan.arena_view[0] : memref<1x16xf32>

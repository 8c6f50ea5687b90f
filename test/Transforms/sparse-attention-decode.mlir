// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="decode=quest block=16 min-tokens=32" | FileCheck %s
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="decode=quest block=16 min-tokens=32" | kiln-opt | FileCheck %s
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-sparse-attention{decode=quest block=16 min-tokens=32},kiln-batch-step,func.func(kiln-memory-plan),kiln-lower-to-plan)" | FileCheck %s --check-prefix=PLAN
// Sparse decode (Quest; docs/sparse-attention.md): decode=quest gives every
// contiguous cache key summaries of the block's pages and the decode
// attention the same `sparse` attribute; the batched step keeps a paged
// cache without summaries (its chunks select, its decode rows run dense).

// CHECK-LABEL: func.func @prefill
// CHECK-SAME: !kiln.kv_cache<1, 64, 2, 4, f32, summary = 16>
// CHECK: kiln.attention {{.*}}sparse = #kiln.sparse_attention<mode = "flex", {{.*}}block = 16
// CHECK-LABEL: func.func @decode
// CHECK-SAME: !kiln.kv_cache<1, 64, 2, 4, f32, summary = 16>
// CHECK: kiln.attention {{.*}}sparse = #kiln.sparse_attention<mode = "flex", {{.*}}block = 16

// The layer's keys (64 x 8 f32 = 2048 bytes) and values, then the pages'
// key minimum (4 pages x 8 f32 at byte 4096) and maximum (at 4224); prefill
// updates the summaries, decode selects pages from them.
// PLAN-LABEL: func.func @prefill
// PLAN: %[[MIN:.*]] = plan.kv_cache_view layer 0 part 4 offset 4096 : memref<4x8xf32>
// PLAN: %[[MAX:.*]] = plan.kv_cache_view layer 0 part 5 offset 4224 : memref<4x8xf32>
// PLAN: plan.call_kernel "kiln_k_attention_sparse_summary"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[MIN]], %[[MAX]],
// PLAN-LABEL: func.func @step
// PLAN: plan.call_kernel "kiln_k_step_attention_sparse"
// PLAN-LABEL: func.func @decode
// PLAN: plan.call_kernel "kiln_k_attention_sparse_decode"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}},

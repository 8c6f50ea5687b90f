// kiln-partition: rank R's program of a tensor-parallel group (Megatron-LM
// splits). On tiny-llama (4 heads of 4, 2 KV heads, FFN 24): q/k/v and
// gate/up keep the rows of the rank's heads and hidden features, o/down the
// matching columns, each followed by one all-reduce (two per layer and
// entry point); attention, RoPE and the KV cache take the rank's heads;
// the classifier is vocab-parallel (the rank's rows of @output, the logits
// gathered by kiln.all_gather) unless vocab-parallel=false; embedding and
// norms stay whole. tp=4 replicates the 2 KV heads: ranks 0-1 share KV
// head 0, ranks 2-3 KV head 1.
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-partition="tp=2 rank=1" | FileCheck %s --check-prefix=TP2
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-partition="tp=4 rank=3" | FileCheck %s --check-prefix=TP4
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-partition="tp=1 rank=0" | FileCheck %s --check-prefix=TP1
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-partition="tp=2 rank=1 vocab-parallel=false" | FileCheck %s --check-prefix=WHOLE
// The partitioned module goes on through the rest of the pipeline: the
// rank's q, k and v shards fuse into one weight (8 + 4 + 4 rows), the
// all-reduces stay outside the fused regions.
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-partition{tp=2 rank=0},kiln-verify,kiln-batch-step,kiln-fuse)" | FileCheck %s --check-prefix=PIPE

// TP2: module attributes {kiln.model = {{.*}}, kiln.partition = {kv_head_offset = 1 : i64, model_kv_heads = 2 : i64, rank = 1 : i64, tp = 2 : i64, vocab_parallel = true}}
// TP2: kiln.weight @tok_embeddings : tensor<32x16xf32> {{.*}}transforms = []}
// TP2: kiln.weight @layers.0.wq : tensor<8x16xf32> {{.*}}transforms = [#kiln.transform<"slice", {axis = 0 : i64, offset = 8 : i64, size = 8 : i64}>]}
// TP2: kiln.weight @layers.0.wk : tensor<4x16xf32> {{.*}}transforms = [#kiln.transform<"slice", {axis = 0 : i64, offset = 4 : i64, size = 4 : i64}>]}
// TP2: kiln.weight @layers.0.wv : tensor<4x16xf32> {{.*}}transforms = [#kiln.transform<"slice", {axis = 0 : i64, offset = 4 : i64, size = 4 : i64}>]}
// TP2: kiln.weight @layers.0.wo : tensor<16x8xf32> {{.*}}transforms = [#kiln.transform<"slice", {axis = 1 : i64, offset = 8 : i64, size = 8 : i64}>]}
// TP2: kiln.weight @layers.0.ffn_norm : tensor<16xf32> {{.*}}transforms = []}
// TP2: kiln.weight @layers.0.w1 : tensor<12x16xf32> {{.*}}transforms = [#kiln.transform<"slice", {axis = 0 : i64, offset = 12 : i64, size = 12 : i64}>]}
// TP2: kiln.weight @layers.0.w2 : tensor<16x12xf32> {{.*}}transforms = [#kiln.transform<"slice", {axis = 1 : i64, offset = 12 : i64, size = 12 : i64}>]}
// TP2: kiln.weight @layers.0.w3 : tensor<12x16xf32> {{.*}}transforms = [#kiln.transform<"slice", {axis = 0 : i64, offset = 12 : i64, size = 12 : i64}>]}
// TP2: kiln.weight @output : tensor<16x16xf32> {{.*}}transforms = [#kiln.transform<"slice", {axis = 0 : i64, offset = 16 : i64, size = 16 : i64}>]}
// TP2-LABEL: func.func @prefill(
// TP2-SAME: !kiln.kv_cache<1, 64, 1, 4, f32>
// TP2: %[[Q:.*]] = kiln.linear {{.*}} -> tensor<?x8xf32>
// TP2: kiln.rope %[[Q]], %{{.*}} {head_dim = 4 : i64, num_heads = 2 : i64
// TP2: kiln.rope {{.*}} {head_dim = 4 : i64, num_heads = 1 : i64
// TP2: %[[A:.*]] = kiln.attention {{.*}} {head_dim = 4 : i64, layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, {{.*}} : tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x4xf32>, !kiln.kv_cache<1, 64, 1, 4, f32> -> tensor<?x8xf32>
// TP2: %[[O:.*]] = kiln.linear %[[A]], {{.*}} : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<?x16xf32>
// TP2: %[[R1:.*]] = kiln.all_reduce %[[O]] {group_size = 2 : i64} : tensor<?x16xf32>
// TP2: kiln.add %{{.*}}, %[[R1]] : tensor<?x16xf32>
// TP2: kiln.swiglu {{.*}} : tensor<?x12xf32>
// TP2: %[[D:.*]] = kiln.linear {{.*}} : tensor<?x12xf32>, tensor<16x12xf32> -> tensor<?x16xf32>
// TP2: %[[R2:.*]] = kiln.all_reduce %[[D]] {group_size = 2 : i64} : tensor<?x16xf32>
// TP2: kiln.add %{{.*}}, %[[R2]] : tensor<?x16xf32>
// TP2-NOT: kiln.all_reduce
// TP2: %[[L:.*]] = kiln.logits {{.*}} : tensor<?x16xf32>, tensor<16x16xf32> -> tensor<1x16xf32>
// TP2: %[[G:.*]] = kiln.all_gather %[[L]] {group_size = 2 : i64} : tensor<1x16xf32> -> tensor<1x32xf32>
// TP2: return %[[G]] : tensor<1x32xf32>
// TP2-LABEL: func.func @decode(
// TP2-COUNT-2: kiln.all_reduce
// TP2-NOT: kiln.all_reduce

// TP4: kiln.partition = {kv_head_offset = 1 : i64, model_kv_heads = 2 : i64, rank = 3 : i64, tp = 4 : i64, vocab_parallel = true}
// TP4: kiln.weight @layers.0.wq : tensor<4x16xf32> {{.*}}{axis = 0 : i64, offset = 12 : i64, size = 4 : i64}
// TP4: kiln.weight @layers.0.wk : tensor<4x16xf32> {{.*}}{axis = 0 : i64, offset = 4 : i64, size = 4 : i64}
// TP4: kiln.weight @layers.0.wv : tensor<4x16xf32> {{.*}}{axis = 0 : i64, offset = 4 : i64, size = 4 : i64}
// TP4: kiln.weight @layers.0.wo : tensor<16x4xf32> {{.*}}{axis = 1 : i64, offset = 12 : i64, size = 4 : i64}
// TP4: kiln.weight @layers.0.w1 : tensor<6x16xf32> {{.*}}{axis = 0 : i64, offset = 18 : i64, size = 6 : i64}
// TP4: kiln.weight @layers.0.w2 : tensor<16x6xf32> {{.*}}{axis = 1 : i64, offset = 18 : i64, size = 6 : i64}
// TP4: kiln.attention {{.*}} {head_dim = 4 : i64, layer = 0 : i64, num_heads = 1 : i64, num_kv_heads = 1 : i64, {{.*}} -> tensor<?x4xf32>
// TP4: kiln.all_reduce {{.*}} {group_size = 4 : i64}

// TP1-NOT: kiln.partition
// TP1-NOT: slice
// TP1-NOT: kiln.all_reduce

// PIPE: kiln.partition = {kv_head_offset = 0 : i64, model_kv_heads = 2 : i64, rank = 0 : i64, tp = 2 : i64, vocab_parallel = true}
// PIPE: kiln.weight @"layers.0.wq+wk+wv" : tensor<16x16xf32>
// PIPE-LABEL: func.func @step(
// PIPE-SAME: !kiln.paged_kv_cache<1, 1, 4, f32>
// PIPE: kiln.all_reduce
// PIPE: kiln.all_reduce
// The batched step gathers one logits row per sequence.
// PIPE: %[[SL:.*]] = kiln.logits {{.*}} {all_rows} : tensor<?x16xf32>, tensor<16x16xf32> -> tensor<?x16xf32>
// PIPE: kiln.all_gather %[[SL]] {group_size = 2 : i64} : tensor<?x16xf32> -> tensor<?x32xf32>

// WHOLE: kiln.partition = {kv_head_offset = 1 : i64, model_kv_heads = 2 : i64, rank = 1 : i64, tp = 2 : i64, vocab_parallel = false}
// WHOLE: kiln.weight @output : tensor<32x16xf32> {{.*}}transforms = []}
// WHOLE-NOT: kiln.all_gather
// WHOLE: kiln.logits {{.*}} : tensor<?x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
// WHOLE-NOT: kiln.all_gather

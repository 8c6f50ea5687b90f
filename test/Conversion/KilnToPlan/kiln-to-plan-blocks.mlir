// RUN: kiln-opt %s --pass-pipeline="builtin.module(func.func(kiln-memory-plan),kiln-lower-to-plan)" | FileCheck %s

// Weights in GGML block formats lower to the block kernels, with the GGML
// type id (kiln_rt/block_formats.h) as the last argument: q5_1 = 7,
// q4_k = 12, q6_k = 14. kiln.logits reads the last row only.
module attributes {kiln.model = {name = "tiny-blocks", max_seq_len = 16 : i64}} {
  kiln.weight @emb : tensor<8x192xi8> {source = #kiln.source<file = "m.gguf", tensor = "token_embd.weight", storage = "q5_1", shape = [8, 256], offset = 0, bytes = 1536>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "q5_1", part = "blocks", rows = 8 : i64}>]}
  kiln.weight @wq : tensor<256x144xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.attn_q.weight", storage = "q4_k", shape = [256, 256], offset = 1536, bytes = 36864>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "q4_k", part = "blocks", rows = 256 : i64}>]}
  kiln.weight @out : tensor<8x210xi8> {source = #kiln.source<file = "m.gguf", tensor = "output.weight", storage = "q6_k", shape = [8, 256], offset = 38400, bytes = 1680>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "q6_k", part = "blocks", rows = 8 : i64}>]}
  // CHECK: plan.weight @emb : memref<8x192xi8>
  // CHECK-LABEL: func.func @prefill
  // CHECK-SAME: (%[[N:.*]]: index, %[[POS:.*]]: index)
  func.func @prefill(%tokens: tensor<?xi32>, %pos: index, %cache: !kiln.kv_cache<1, 16, 2, 4, f32>) -> tensor<1x8xf32> attributes {kiln.max_tokens = 4 : i64} {
    // CHECK: %[[E:.*]] = plan.weight_ref @emb : memref<8x192xi8>
    // CHECK: %[[Q51:.*]] = arith.constant 7 : index
    // CHECK-NEXT: plan.call_kernel "kiln_k_embedding_blocks"(%{{.*}}, %[[N]], %[[E]], %{{.*}}, %{{.*}}, %{{.*}}, %[[Q51]])
    %e = kiln.weight_ref @emb : tensor<8x192xi8>
    %x = kiln.embedding %tokens, %e {format = "q5_1"} : tensor<?xi32>, tensor<8x192xi8> -> tensor<?x256xf32>
    // CHECK: %[[W:.*]] = plan.weight_ref @wq : memref<256x144xi8>
    // CHECK: %[[Q4K:.*]] = arith.constant 12 : index
    // CHECK-NEXT: plan.call_kernel "kiln_k_linear_blocks"(%{{.*}}, %[[W]], %{{.*}}, %[[N]], %{{.*}}, %{{.*}}, %[[Q4K]])
    %w = kiln.weight_ref @wq : tensor<256x144xi8>
    %q = kiln.linear %x, %w {format = "q4_k"} : tensor<?x256xf32>, tensor<256x144xi8> -> tensor<?x256xf32>
    // CHECK: %[[O:.*]] = plan.weight_ref @out : memref<8x210xi8>
    // CHECK: %[[ROW:.*]] = plan.row
    // CHECK: %[[Q6K:.*]] = arith.constant 14 : index
    // CHECK-NEXT: plan.call_kernel "kiln_k_linear_blocks"(%[[ROW]], %[[O]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[Q6K]])
    %o = kiln.weight_ref @out : tensor<8x210xi8>
    %l = kiln.logits %q, %o {format = "q6_k"} : tensor<?x256xf32>, tensor<8x210xi8> -> tensor<1x8xf32>
    return %l : tensor<1x8xf32>
  }
}

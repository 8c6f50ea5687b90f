// RUN: kiln-opt %s --kiln-quantize-block-activations | FileCheck %s
// RUN: kiln-opt %s --kiln-quantize-block-activations="report=true" -o /dev/null 2>&1 | FileCheck %s --check-prefix=REPORT
// RUN: kiln-opt %s --kiln-quantize-block-activations="scheme=none" | FileCheck %s --check-prefix=NONE
// RUN: kiln-opt %s --kiln-quantize-block-activations --kiln-fuse | FileCheck %s --check-prefix=FUSED
// RUN: kiln-opt %s --pass-pipeline="builtin.module(kiln-quantize-block-activations,func.func(kiln-memory-plan),kiln-lower-to-plan)" | FileCheck %s --check-prefix=PLAN

// The explicit int8-activation recipe marks every linear and classifier over
// a GGML block-format weight, and nothing else: the float linear and the
// embedding keep f32 activations. Fusion keeps the attribute on the
// horizontally fused Q/K linear; the plan calls kiln_k_linear_blocks_a8.
module attributes {kiln.model = {name = "tiny-a8", max_seq_len = 16 : i64}} {
  kiln.weight @emb : tensor<8x192xi8> {source = #kiln.source<file = "m.gguf", tensor = "token_embd.weight", storage = "q5_1", shape = [8, 256], offset = 0, bytes = 1536>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "q5_1", part = "blocks", rows = 8 : i64}>]}
  kiln.weight @wq : tensor<256x144xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.attn_q.weight", storage = "q4_k", shape = [256, 256], offset = 1536, bytes = 36864>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "q4_k", part = "blocks", rows = 256 : i64}>]}
  kiln.weight @wk : tensor<256x144xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.attn_k.weight", storage = "q4_k", shape = [256, 256], offset = 38400, bytes = 36864>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "q4_k", part = "blocks", rows = 256 : i64}>]}
  kiln.weight @wf : tensor<256x256xf32> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.attn_v.weight", storage = "f32", shape = [256, 256], offset = 75264, bytes = 262144>, transforms = []}
  kiln.weight @out : tensor<8x210xi8> {source = #kiln.source<file = "m.gguf", tensor = "output.weight", storage = "q6_k", shape = [8, 256], offset = 337408, bytes = 1680>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "q6_k", part = "blocks", rows = 8 : i64}>]}
  // CHECK-LABEL: func.func @prefill
  // REPORT: remark: kiln-quantize-block-activations 'prefill': 3 block-format linears with int8 activations
  func.func @prefill(%tokens: tensor<?xi32>, %pos: index, %cache: !kiln.kv_cache<1, 16, 2, 4, f32>) -> tensor<1x8xf32> attributes {kiln.max_tokens = 4 : i64} {
    // CHECK: kiln.embedding %{{.*}}, %{{.*}} {format = "q5_1"}
    // NONE: kiln.embedding %{{.*}}, %{{.*}} {format = "q5_1"}
    %e = kiln.weight_ref @emb : tensor<8x192xi8>
    %x = kiln.embedding %tokens, %e {format = "q5_1"} : tensor<?xi32>, tensor<8x192xi8> -> tensor<?x256xf32>
    // CHECK: kiln.linear %{{.*}}, %{{.*}} {act_quant = "int8_per_block", format = "q4_k"}
    // CHECK: kiln.linear %{{.*}}, %{{.*}} {act_quant = "int8_per_block", format = "q4_k"}
    // NONE: kiln.linear %{{.*}}, %{{.*}} {format = "q4_k"}
    // FUSED: kiln.linear %{{.*}}, %{{.*}} {act_quant = "int8_per_block", format = "q4_k"} : tensor<?x256xf32>, tensor<512x144xi8> -> tensor<?x512xf32>
    // PLAN: plan.call_kernel "kiln_k_linear_blocks_a8"
    // PLAN: plan.call_kernel "kiln_k_linear_blocks_a8"
    %wq = kiln.weight_ref @wq : tensor<256x144xi8>
    %q = kiln.linear %x, %wq {format = "q4_k"} : tensor<?x256xf32>, tensor<256x144xi8> -> tensor<?x256xf32>
    %wk = kiln.weight_ref @wk : tensor<256x144xi8>
    %k = kiln.linear %x, %wk {format = "q4_k"} : tensor<?x256xf32>, tensor<256x144xi8> -> tensor<?x256xf32>
    // CHECK: kiln.linear %{{.*}}, %{{.*}} : tensor<?x256xf32>, tensor<256x256xf32>
    // PLAN: plan.call_kernel "kiln_k_linear"(
    %wf = kiln.weight_ref @wf : tensor<256x256xf32>
    %v = kiln.linear %q, %wf : tensor<?x256xf32>, tensor<256x256xf32> -> tensor<?x256xf32>
    // CHECK: kiln.logits %{{.*}}, %{{.*}} {act_quant = "int8_per_block", format = "q6_k"}
    // NONE: kiln.logits %{{.*}}, %{{.*}} {format = "q6_k"}
    // PLAN: plan.call_kernel "kiln_k_linear_blocks_a8"
    %o = kiln.weight_ref @out : tensor<8x210xi8>
    %s = kiln.add %v, %k : tensor<?x256xf32>
    %l = kiln.logits %s, %o {format = "q6_k"} : tensor<?x256xf32>, tensor<8x210xi8> -> tensor<1x8xf32>
    return %l : tensor<1x8xf32>
  }
}

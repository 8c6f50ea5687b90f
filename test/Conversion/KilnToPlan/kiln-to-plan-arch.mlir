// RUN: kiln-opt %s --pass-pipeline="builtin.module(func.func(kiln-memory-plan),kiln-lower-to-plan)" | FileCheck %s

// Llama-family switches: RoPE scaling lowers to kiln_k_rope_scaled with the
// rope_scaling.h kind (linear 0, dynamic 1, llama3 2), its factor, the band
// factors and the original context; frequency divisors to
// kiln_k_rope_factors; biases to kiln_k_add_bias; a sliding window to
// kiln_k_attention_window with the window last.
module attributes {kiln.model = {name = "tiny-arch", max_seq_len = 16 : i64}} {
  kiln.weight @emb : tensor<8x16xf32> {source = #kiln.source<file = "m.bin", tensor = "e", storage = "f32", shape = [8, 16], offset = 0, bytes = 512>, transforms = []}
  kiln.weight @bq : tensor<16xf32> {source = #kiln.source<file = "m.bin", tensor = "b", storage = "f32", shape = [16], offset = 512, bytes = 64>, transforms = []}
  kiln.weight @ff : tensor<2xf32> {source = #kiln.source<file = "m.bin", tensor = "f", storage = "f32", shape = [2], offset = 576, bytes = 8>, transforms = []}
  // CHECK-LABEL: func.func @prefill
  func.func @prefill(%tokens: tensor<?xi32>, %pos: index, %cache: !kiln.kv_cache<1, 16, 4, 4, f32>) -> tensor<1x8xf32> attributes {kiln.max_tokens = 4 : i64} {
    %e = kiln.weight_ref @emb : tensor<8x16xf32>
    %x = kiln.embedding %tokens, %e : tensor<?xi32>, tensor<8x16xf32> -> tensor<?x16xf32>
    // CHECK: %[[B:.*]] = plan.weight_ref @bq : memref<16xf32>
    // CHECK: plan.call_kernel "kiln_k_add_bias"(%{{.*}}, %[[B]], %{{.*}}, %{{.*}}, %{{.*}})
    %b = kiln.weight_ref @bq : tensor<16xf32>
    %xb = kiln.add_bias %x, %b : tensor<?x16xf32>, tensor<16xf32>
    // CHECK: %[[KIND:.*]] = arith.constant 2 : index
    // CHECK: %[[FAC:.*]] = arith.constant 8.000000e+00 : f32
    // CHECK: %[[LOW:.*]] = arith.constant 1.000000e+00 : f32
    // CHECK: %[[HIGH:.*]] = arith.constant 4.000000e+00 : f32
    // CHECK: %[[ORIG:.*]] = arith.constant 8192 : index
    // CHECK: plan.call_kernel "kiln_k_rope_scaled"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[KIND]], %[[FAC]], %[[LOW]], %[[HIGH]], %[[ORIG]])
    %q = kiln.rope %xb, %pos {num_heads = 4 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 5.0e5 : f32, scaling = "llama3", scaling_factor = 8.0 : f32, low_freq_factor = 1.0 : f32, high_freq_factor = 4.0 : f32, original_max_positions = 8192 : i64} : tensor<?x16xf32>
    // CHECK: %[[FF:.*]] = plan.weight_ref @ff : memref<2xf32>
    // CHECK: plan.call_kernel "kiln_k_rope_factors"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[FF]])
    %ff = kiln.weight_ref @ff : tensor<2xf32>
    %k = kiln.rope %x, %pos freq_factors(%ff : tensor<2xf32>) {num_heads = 4 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 5.0e5 : f32} : tensor<?x16xf32>
    // CHECK: %[[W:.*]] = arith.constant 3 : index
    // CHECK: plan.call_kernel "kiln_k_attention_window"({{.*}}, %[[W]])
    %a = kiln.attention %q, %k, %x, %cache, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sliding_window = 3 : i64} : tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, !kiln.kv_cache<1, 16, 4, 4, f32> -> tensor<?x16xf32>
    %l = kiln.logits %a, %e : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<1x8xf32>
    return %l : tensor<1x8xf32>
  }
}

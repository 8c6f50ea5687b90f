// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-insert-observers | FileCheck %s
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-insert-observers --kiln-insert-observers | FileCheck %s --check-prefix=TWICE
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-insert-observers --canonicalize | FileCheck %s --check-prefix=KEPT
// RUN: kiln-opt %s --kiln-insert-observers --split-input-file | FileCheck %s --check-prefix=GENERIC
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-quantize-weights --kiln-insert-observers | FileCheck %s --check-prefix=QUANT

// One observer per distinct input, named after the weights it feeds, before
// the first linear reading it; the module records taps and weight -> tap.
// The pre-RoPE key (the input of the kiln.rope feeding kiln.attention's key)
// is observed before the rope as "layers.<layer>.key"; it feeds no weight,
// so kiln.observe_inputs does not name it.
// CHECK: module attributes
// CHECK-SAME: kiln.observe_inputs = {layers.0.w1 = "layers.0.ffn_in", layers.0.w2 = "layers.0.ffn_down_in", layers.0.w3 = "layers.0.ffn_in", layers.0.wk = "layers.0.attn_in", layers.0.wo = "layers.0.attn_out", layers.0.wq = "layers.0.attn_in", layers.0.wv = "layers.0.attn_in"}
// CHECK-SAME: kiln.observe_taps = ["layers.0.attn_in", "layers.0.key", "layers.0.attn_out", "layers.0.ffn_in", "layers.0.ffn_down_in"]
// CHECK-LABEL: func.func @prefill
// CHECK: %[[X:.*]] = kiln.rms_norm
// CHECK: kiln.observe %[[X]] {tap = "layers.0.attn_in"} : tensor<?x16xf32>
// CHECK-NEXT: kiln.linear %[[X]]
// CHECK-NOT: kiln.observe %[[X]]
// CHECK: %[[WK:.*]] = kiln.weight_ref @layers.0.wk
// CHECK-NEXT: %[[K:.*]] = kiln.linear %[[X]], %[[WK]]
// CHECK-NOT: kiln.observe
// CHECK: %[[QR:.*]] = kiln.rope
// CHECK-NEXT: kiln.observe %[[K]] {tap = "layers.0.key"} : tensor<?x8xf32>
// CHECK-NEXT: %[[KR:.*]] = kiln.rope %[[K]],
// CHECK-NEXT: %[[ATT:.*]] = kiln.attention %[[QR]], %[[KR]],
// CHECK: kiln.observe %[[ATT]] {tap = "layers.0.attn_out"}
// CHECK: %[[X2:.*]] = kiln.rms_norm
// CHECK: kiln.observe %[[X2]] {tap = "layers.0.ffn_in"}
// CHECK-NOT: kiln.observe %[[X2]]
// CHECK: %[[ACT:.*]] = kiln.swiglu
// CHECK: kiln.observe %[[ACT]] {tap = "layers.0.ffn_down_in"} : tensor<?x24xf32>
// CHECK-NOT: kiln.observe
// CHECK-LABEL: func.func @decode
// CHECK: kiln.observe %{{.*}} {tap = "layers.0.attn_in"} : tensor<1x16xf32>
// CHECK: kiln.observe %{{.*}} {tap = "layers.0.key"} : tensor<1x8xf32>
// CHECK-NEXT: kiln.rope
// CHECK: kiln.observe %{{.*}} {tap = "layers.0.attn_out"}
// CHECK: kiln.observe %{{.*}} {tap = "layers.0.ffn_in"}
// CHECK: kiln.observe %{{.*}} {tap = "layers.0.ffn_down_in"}
// CHECK-NOT: kiln.observe

// Running the pass again adds nothing (the key observer included).
// TWICE: kiln.observe_taps = ["layers.0.attn_in", "layers.0.key", "layers.0.attn_out", "layers.0.ffn_in", "layers.0.ffn_down_in"]
// TWICE-LABEL: func.func @prefill
// TWICE-COUNT-5: kiln.observe
// TWICE-NOT: kiln.observe
// TWICE-LABEL: func.func @decode
// TWICE-COUNT-5: kiln.observe
// TWICE-NOT: kiln.observe

// Only float kiln.linear layers are observed: calibration measures the
// unquantized model, so after weight quantization no linear input is
// observed. The pre-RoPE key is still an f32 activation and keeps its tap.
// QUANT: kiln.observe_inputs = {}
// QUANT-SAME: kiln.observe_taps = ["layers.0.key"]
// QUANT-LABEL: func.func @prefill
// QUANT-NOT: kiln.observe %
// QUANT: kiln.observe %{{.*}} {tap = "layers.0.key"}
// QUANT-NOT: kiln.observe %
// QUANT-LABEL: func.func @decode

// Canonicalization keeps observers (they write the observer resource).
// KEPT-LABEL: func.func @prefill
// KEPT-COUNT-5: kiln.observe

// -----

// Weights outside the Llama naming get the tap "<weight>.input"; a linear
// over a function argument (not a model weight) is not observed.
// GENERIC: kiln.observe_inputs = {proj = "proj.input"}
// GENERIC-SAME: kiln.observe_taps = ["proj.input"]
// GENERIC-LABEL: func.func @generic_weight_name
// GENERIC: kiln.observe %{{.*}} {tap = "proj.input"}
// GENERIC-NOT: kiln.observe %
kiln.weight @proj : tensor<8x16xf32> {source = #kiln.source<file = "m.bin", tensor = "proj", storage = "f32", shape = [8, 16], offset = 0, bytes = 512>, transforms = []}
func.func @generic_weight_name(%x: tensor<?x16xf32>, %w: tensor<8x16xf32>) -> tensor<?x8xf32> {
  %p = kiln.weight_ref @proj : tensor<8x16xf32>
  %a = kiln.linear %x, %p : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
  %b = kiln.linear %x, %w : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
  %c = kiln.add %a, %b : tensor<?x8xf32>
  return %c : tensor<?x8xf32>
}

// -----

// "layers.x.wq" is not a layer index: generic name.
// GENERIC-LABEL: func.func @negative_layer_index
// GENERIC: kiln.observe %{{.*}} {tap = "layers.x.wq.input"}
kiln.weight @layers.x.wq : tensor<8x16xf32> {source = #kiln.source<file = "m.bin", tensor = "q", storage = "f32", shape = [8, 16], offset = 0, bytes = 512>, transforms = []}
func.func @negative_layer_index(%x: tensor<?x16xf32>) -> tensor<?x8xf32> {
  %p = kiln.weight_ref @layers.x.wq : tensor<8x16xf32>
  %a = kiln.linear %x, %p : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
  return %a : tensor<?x8xf32>
}

// -----

// Keys: only a key that is a kiln.rope result is observed (its input, tap
// from the attention's `layer`, here 3), even when the pre-RoPE key does not
// come from a linear; an attention over an unrotated key observes nothing.
// GENERIC-LABEL: func.func @key_taps
// GENERIC-SAME: (%[[Q:.*]]: tensor<?x8xf32>, %[[K:.*]]: tensor<?x8xf32>, %[[V:.*]]: tensor<?x8xf32>
// GENERIC: kiln.observe %[[K]] {tap = "layers.3.key"} : tensor<?x8xf32>
// GENERIC-NEXT: %[[KR:.*]] = kiln.rope %[[K]]
// GENERIC-NEXT: kiln.attention %[[Q]], %[[KR]], %[[V]]
// GENERIC-NOT: kiln.observe
// GENERIC: kiln.attention %[[Q]], %[[V]], %[[V]]
// GENERIC-NOT: kiln.observe
// GENERIC: return
func.func @key_taps(%q: tensor<?x8xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %pos: index, %cache: !kiln.kv_cache<4, 64, 2, 4, f32>) -> tensor<?x8xf32> {
  %kr = kiln.rope %k, %pos {num_heads = 2 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32} : tensor<?x8xf32>
  %a = kiln.attention %q, %kr, %v, %cache, %pos {layer = 3 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<4, 64, 2, 4, f32> -> tensor<?x8xf32>
  %b = kiln.attention %q, %v, %v, %cache, %pos {layer = 2 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<4, 64, 2, 4, f32> -> tensor<?x8xf32>
  %c = kiln.add %a, %b : tensor<?x8xf32>
  return %c : tensor<?x8xf32>
}

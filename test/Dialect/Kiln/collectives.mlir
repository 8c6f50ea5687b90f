// RUN: kiln-opt %s --split-input-file --verify-diagnostics | FileCheck %s
// The tensor-parallel collectives kiln-partition writes (docs/parallelism.md):
// kiln.all_reduce sums [n, d] over the group in place of its shape;
// kiln.all_gather puts the ranks' [r, c] column blocks side by side.

// CHECK-LABEL: func.func @collectives
// CHECK: kiln.all_reduce %{{.*}} {group_size = 2 : i64} : tensor<?x64xf32>
// CHECK: kiln.all_gather %{{.*}} {group_size = 4 : i64} : tensor<1x128xf32> -> tensor<1x512xf32>
// CHECK: kiln.all_gather %{{.*}} {group_size = 2 : i64} : tensor<?x8xbf16> -> tensor<?x16xbf16>
func.func @collectives(%x: tensor<?x64xf32>, %l: tensor<1x128xf32>, %s: tensor<?x8xbf16>) -> (tensor<?x64xf32>, tensor<1x512xf32>, tensor<?x16xbf16>) {
  %r = kiln.all_reduce %x {group_size = 2 : i64} : tensor<?x64xf32>
  %g = kiln.all_gather %l {group_size = 4 : i64} : tensor<1x128xf32> -> tensor<1x512xf32>
  %h = kiln.all_gather %s {group_size = 2 : i64} : tensor<?x8xbf16> -> tensor<?x16xbf16>
  return %r, %g, %h : tensor<?x64xf32>, tensor<1x512xf32>, tensor<?x16xbf16>
}

// -----

func.func @gather_columns(%l: tensor<1x128xf32>) -> tensor<1x500xf32> {
  // expected-error @+1 {{'kiln.all_gather' op result must have group_size (4) x 128 columns, got 'tensor<1x500xf32>'}}
  %g = kiln.all_gather %l {group_size = 4 : i64} : tensor<1x128xf32> -> tensor<1x500xf32>
  return %g : tensor<1x500xf32>
}

// -----

func.func @gather_rows(%l: tensor<1x128xf32>) -> tensor<2x256xf32> {
  // expected-error @+1 {{'kiln.all_gather' op result rows differ from the input's}}
  %g = kiln.all_gather %l {group_size = 2 : i64} : tensor<1x128xf32> -> tensor<2x256xf32>
  return %g : tensor<2x256xf32>
}

// -----

func.func @gather_type(%l: tensor<1x128xf32>) -> tensor<1x256xf16> {
  // expected-error @+1 {{'kiln.all_gather' op result element type 'f16' differs from the input's 'f32'}}
  %g = kiln.all_gather %l {group_size = 2 : i64} : tensor<1x128xf32> -> tensor<1x256xf16>
  return %g : tensor<1x256xf16>
}

// -----

func.func @group_of_one(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'kiln.all_reduce' op attribute 'group_size' failed to satisfy constraint}}
  %r = kiln.all_reduce %x {group_size = 1 : i64} : tensor<?x64xf32>
  return %r : tensor<?x64xf32>
}

// -----

// Pipeline stages: kiln.send / kiln.recv of the residual stream.
// CHECK-LABEL: func.func @stage_edges
// CHECK: %[[H:.*]] = kiln.recv {source = 0 : i64} : tensor<?x64xf32>
// CHECK: kiln.send %[[H]] {destination = 2 : i64} : tensor<?x64xf32>
func.func @stage_edges() {
  %h = kiln.recv {source = 0 : i64} : tensor<?x64xf32>
  kiln.send %h {destination = 2 : i64} : tensor<?x64xf32>
  return
}

// -----

// A stage program's peers are other stages of its pipeline.
module attributes {kiln.partition = {pp = 2 : i64, stage = 1 : i64, tp = 1 : i64, rank = 0 : i64}} {
  func.func @own_stage(%h: tensor<?x64xf32>) {
    // expected-error @+1 {{'kiln.send' op destination 1 is this program's own stage}}
    kiln.send %h {destination = 1 : i64} : tensor<?x64xf32>
    return
  }
}

// -----

module attributes {kiln.partition = {pp = 2 : i64, stage = 1 : i64, tp = 1 : i64, rank = 0 : i64}} {
  func.func @no_such_stage() {
    // expected-error @+1 {{'kiln.recv' op source 2 is not a stage of the pipeline (pp = 2)}}
    %h = kiln.recv {source = 2 : i64} : tensor<?x64xf32>
    return
  }
}

// -----

func.func @negative_peer(%h: tensor<?x64xf32>) {
  // expected-error @+1 {{'kiln.send' op attribute 'destination' failed to satisfy constraint}}
  kiln.send %h {destination = -1 : i64} : tensor<?x64xf32>
  return
}

// -----

// Sequence parallelism (kiln-sequence-parallel): the rows of the token
// count split over the group from min_tokens rows.
// CHECK-LABEL: func.func @sequence_collectives
// CHECK: %[[S:.*]] = kiln.all_slice %{{.*}} {group_size = 2 : i64, min_tokens = 64 : i64} : tensor<?x64xf32>
// CHECK: %[[R:.*]] = kiln.reduce_scatter %{{.*}} {group_size = 2 : i64, min_tokens = 64 : i64} : tensor<?x64xf32>
// CHECK: kiln.all_gather_rows %{{.*}} {group_size = 2 : i64, min_tokens = 64 : i64} : tensor<?x64xf32>
func.func @sequence_collectives(%h: tensor<?x64xf32>, %o: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %s = kiln.all_slice %h {group_size = 2 : i64, min_tokens = 64 : i64} : tensor<?x64xf32>
  %r = kiln.reduce_scatter %o {group_size = 2 : i64, min_tokens = 64 : i64} : tensor<?x64xf32>
  %a = kiln.add %s, %r : tensor<?x64xf32>
  %g = kiln.all_gather_rows %a {group_size = 2 : i64, min_tokens = 64 : i64} : tensor<?x64xf32>
  return %g : tensor<?x64xf32>
}

// -----

func.func @scatter_static_rows(%o: tensor<1x64xf32>) -> tensor<1x64xf32> {
  // expected-error @+1 {{'kiln.reduce_scatter' op splits the rows of a sequence: the input's rows must be the entry point's token count (dynamic), got 'tensor<1x64xf32>'}}
  %r = kiln.reduce_scatter %o {group_size = 2 : i64, min_tokens = 64 : i64} : tensor<1x64xf32>
  return %r : tensor<1x64xf32>
}

// -----

func.func @slice_threshold(%h: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'kiln.all_slice' op min_tokens (2) must be at least group_size (4): every rank needs a row}}
  %s = kiln.all_slice %h {group_size = 4 : i64, min_tokens = 2 : i64} : tensor<?x64xf32>
  return %s : tensor<?x64xf32>
}

// -----

func.func @gather_rows_type(%h: tensor<?x64xf32>) -> tensor<?x64xf16> {
  // expected-error @+1 {{'kiln.all_gather_rows' op failed to verify that all of {input, result} have same type}}
  %g = "kiln.all_gather_rows"(%h) {group_size = 2 : i64, min_tokens = 2 : i64} : (tensor<?x64xf32>) -> tensor<?x64xf16>
  return %g : tensor<?x64xf16>
}

// -----

// CHECK-LABEL: func.func @fused_boundary
// CHECK: %{{.*}}, %{{.*}} = kiln.reduce_scatter_add_rms_norm %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 9.99999974E-6 : f32, group_size = 2 : i64, min_tokens = 8 : i64} : tensor<?x64xbf16>, tensor<64xbf16>
func.func @fused_boundary(%o: tensor<?x64xbf16>, %h: tensor<?x64xbf16>, %w: tensor<64xbf16>) -> (tensor<?x64xbf16>, tensor<?x64xbf16>) {
  %s, %n = kiln.reduce_scatter_add_rms_norm %o, %h, %w {epsilon = 1.0e-05 : f32, group_size = 2 : i64, min_tokens = 8 : i64} : tensor<?x64xbf16>, tensor<64xbf16>
  return %s, %n : tensor<?x64xbf16>, tensor<?x64xbf16>
}

// -----

func.func @fused_weight(%o: tensor<?x64xf32>, %h: tensor<?x64xf32>, %w: tensor<32xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'kiln.reduce_scatter_add_rms_norm' op weight must be 64 elements of 'f32' (the rows' width and type), got 'tensor<32xf32>'}}
  %s, %n = kiln.reduce_scatter_add_rms_norm %o, %h, %w {epsilon = 1.0e-05 : f32, group_size = 2 : i64, min_tokens = 8 : i64} : tensor<?x64xf32>, tensor<32xf32>
  return %n : tensor<?x64xf32>
}

// -----

// The 8-bit all-gather (wire_quant): f32 rows, a known rule, per-block on a
// multiple of 32 columns, a positive static scale only per tensor.
// CHECK-LABEL: func.func @int8_gathers
// CHECK: kiln.all_gather_rows %{{.*}} {group_size = 2 : i64, min_tokens = 4 : i64, wire_quant = "int8_per_token"} : tensor<?x48xf32>
// CHECK: kiln.all_gather_rows %{{.*}} {group_size = 2 : i64, min_tokens = 4 : i64, wire_quant = "int8_per_block"} : tensor<?x64xf32>
// CHECK: kiln.all_gather_rows %{{.*}} {group_size = 2 : i64, min_tokens = 4 : i64, wire_quant = "int8_per_tensor", wire_scale = 2.500000e-01 : f32} : tensor<?x48xf32>
func.func @int8_gathers(%a: tensor<?x48xf32>, %b: tensor<?x64xf32>) -> (tensor<?x48xf32>, tensor<?x64xf32>, tensor<?x48xf32>) {
  %t = kiln.all_gather_rows %a {group_size = 2 : i64, min_tokens = 4 : i64, wire_quant = "int8_per_token"} : tensor<?x48xf32>
  %k = kiln.all_gather_rows %b {group_size = 2 : i64, min_tokens = 4 : i64, wire_quant = "int8_per_block"} : tensor<?x64xf32>
  %s = kiln.all_gather_rows %a {group_size = 2 : i64, min_tokens = 4 : i64, wire_quant = "int8_per_tensor", wire_scale = 0.25 : f32} : tensor<?x48xf32>
  return %t, %k, %s : tensor<?x48xf32>, tensor<?x64xf32>, tensor<?x48xf32>
}

// -----

func.func @int8_gather_rule(%a: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'kiln.all_gather_rows' op wire_quant must be "int8_per_token", "int8_per_block" or "int8_per_tensor", got "int4_per_token"}}
  %g = kiln.all_gather_rows %a {group_size = 2 : i64, min_tokens = 4 : i64, wire_quant = "int4_per_token"} : tensor<?x64xf32>
  return %g : tensor<?x64xf32>
}

// -----

func.func @int8_gather_bf16(%a: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  // expected-error @+1 {{'kiln.all_gather_rows' op an 8-bit gather (wire_quant) dequantizes to f32 rows, got 'tensor<?x64xbf16>'}}
  %g = kiln.all_gather_rows %a {group_size = 2 : i64, min_tokens = 4 : i64, wire_quant = "int8_per_token"} : tensor<?x64xbf16>
  return %g : tensor<?x64xbf16>
}

// -----

func.func @int8_gather_blocks(%a: tensor<?x48xf32>) -> tensor<?x48xf32> {
  // expected-error @+1 {{'kiln.all_gather_rows' op wire_quant = "int8_per_block" needs a multiple of 32 columns, got 48}}
  %g = kiln.all_gather_rows %a {group_size = 2 : i64, min_tokens = 4 : i64, wire_quant = "int8_per_block"} : tensor<?x48xf32>
  return %g : tensor<?x48xf32>
}

// -----

func.func @int8_gather_no_scale(%a: tensor<?x48xf32>) -> tensor<?x48xf32> {
  // expected-error @+1 {{'kiln.all_gather_rows' op wire_quant = "int8_per_tensor" needs a wire_scale}}
  %g = kiln.all_gather_rows %a {group_size = 2 : i64, min_tokens = 4 : i64, wire_quant = "int8_per_tensor"} : tensor<?x48xf32>
  return %g : tensor<?x48xf32>
}

// -----

func.func @int8_gather_stray_scale(%a: tensor<?x48xf32>) -> tensor<?x48xf32> {
  // expected-error @+1 {{'kiln.all_gather_rows' op wire_scale goes only with wire_quant = "int8_per_tensor"}}
  %g = kiln.all_gather_rows %a {group_size = 2 : i64, min_tokens = 4 : i64, wire_quant = "int8_per_token", wire_scale = 1.0 : f32} : tensor<?x48xf32>
  return %g : tensor<?x48xf32>
}

// -----

func.func @int8_gather_scale_alone(%a: tensor<?x48xf32>) -> tensor<?x48xf32> {
  // expected-error @+1 {{'kiln.all_gather_rows' op wire_scale needs wire_quant = "int8_per_tensor"}}
  %g = kiln.all_gather_rows %a {group_size = 2 : i64, min_tokens = 4 : i64, wire_scale = 1.0 : f32} : tensor<?x48xf32>
  return %g : tensor<?x48xf32>
}

// -----

func.func @int8_gather_bad_scale(%a: tensor<?x48xf32>) -> tensor<?x48xf32> {
  // expected-error @+1 {{'kiln.all_gather_rows' op wire_scale must be a positive finite number, got -1}}
  %g = kiln.all_gather_rows %a {group_size = 2 : i64, min_tokens = 4 : i64, wire_quant = "int8_per_tensor", wire_scale = -1.0 : f32} : tensor<?x48xf32>
  return %g : tensor<?x48xf32>
}

// RUN: kiln-opt %s --kiln-sequence-parallel="min-tokens=4 int8-gather=true" --split-input-file | FileCheck %s
// RUN: kiln-opt %s --kiln-sequence-parallel="min-tokens=4" --split-input-file | FileCheck %s --check-prefix=OFF
// kiln-sequence-parallel{int8-gather}: an all-gather of rows whose every
// reader quantizes its input to int8 by one rule sends int8 (wire_quant);
// a reader that keeps floats, two static scales that differ, or 16-bit
// rows keep the f32 gather. Off by default in the pass (kiln-compile turns
// it on).

// OFF-NOT: wire_quant

// SmoothQuant W8A8 per token: q and k projections of the norm.
// CHECK-LABEL: func.func @per_token
// CHECK: %[[N:.*]] = kiln.rms_norm
// CHECK-NEXT: %[[G:.*]] = kiln.all_gather_rows %[[N]] {group_size = 2 : i64, min_tokens = 4 : i64, wire_quant = "int8_per_token"} : tensor<?x64xf32>
// CHECK: kiln.quantized_linear %[[G]]
// CHECK: kiln.quantized_linear %[[G]]
module attributes {kiln.partition = {rank = 0 : i64, tp = 2 : i64, vocab_parallel = false}} {
  func.func @per_token(%o: tensor<?x64xf32>, %h: tensor<?x64xf32>, %w: tensor<64xf32>, %q: tensor<16x64xi8>, %s: tensor<16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
    %r = kiln.all_reduce %o {group_size = 2 : i64} : tensor<?x64xf32>
    %a = kiln.add %h, %r : tensor<?x64xf32>
    %n = kiln.rms_norm %a, %w {epsilon = 1.0e-05 : f32} : tensor<?x64xf32>, tensor<64xf32>
    %y0 = kiln.quantized_linear %n, %q, %s {act_quant = "int8_per_token", bits = 8 : i64, group_size = 0 : i64} : tensor<?x64xf32>, tensor<16x64xi8>, tensor<16xf32> -> tensor<?x16xf32>
    %y1 = kiln.quantized_linear %n, %q, %s {act_quant = "int8_per_token", bits = 8 : i64, group_size = 0 : i64} : tensor<?x64xf32>, tensor<16x64xi8>, tensor<16xf32> -> tensor<?x16xf32>
    return %y0, %y1 : tensor<?x16xf32>, tensor<?x16xf32>
  }
}

// -----

// Static per-tensor scales: one common act_scale goes on the wire.
// CHECK-LABEL: func.func @per_tensor
// CHECK: kiln.all_gather_rows %{{.*}} {group_size = 2 : i64, min_tokens = 4 : i64, wire_quant = "int8_per_tensor", wire_scale = 5.000000e-01 : f32} : tensor<?x64xf32>
module attributes {kiln.partition = {rank = 0 : i64, tp = 2 : i64, vocab_parallel = false}} {
  func.func @per_tensor(%o: tensor<?x64xf32>, %h: tensor<?x64xf32>, %w: tensor<64xf32>, %q: tensor<16x64xi8>, %s: tensor<16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
    %r = kiln.all_reduce %o {group_size = 2 : i64} : tensor<?x64xf32>
    %a = kiln.add %h, %r : tensor<?x64xf32>
    %n = kiln.rms_norm %a, %w {epsilon = 1.0e-05 : f32} : tensor<?x64xf32>, tensor<64xf32>
    %y0 = kiln.quantized_linear %n, %q, %s {act_quant = "int8_per_tensor", act_scale = 0.5 : f32, bits = 8 : i64, group_size = 0 : i64} : tensor<?x64xf32>, tensor<16x64xi8>, tensor<16xf32> -> tensor<?x16xf32>
    %y1 = kiln.quantized_linear %n, %q, %s {act_quant = "int8_per_tensor", act_scale = 0.5 : f32, bits = 8 : i64, group_size = 0 : i64} : tensor<?x64xf32>, tensor<16x64xi8>, tensor<16xf32> -> tensor<?x16xf32>
    return %y0, %y1 : tensor<?x16xf32>, tensor<?x16xf32>
  }
}

// -----

// Two static scales that differ: no one rule, the f32 gather stays.
// CHECK-LABEL: func.func @two_scales
// CHECK: kiln.all_gather_rows %{{.*}} {group_size = 2 : i64, min_tokens = 4 : i64} : tensor<?x64xf32>
module attributes {kiln.partition = {rank = 0 : i64, tp = 2 : i64, vocab_parallel = false}} {
  func.func @two_scales(%o: tensor<?x64xf32>, %h: tensor<?x64xf32>, %w: tensor<64xf32>, %q: tensor<16x64xi8>, %s: tensor<16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
    %r = kiln.all_reduce %o {group_size = 2 : i64} : tensor<?x64xf32>
    %a = kiln.add %h, %r : tensor<?x64xf32>
    %n = kiln.rms_norm %a, %w {epsilon = 1.0e-05 : f32} : tensor<?x64xf32>, tensor<64xf32>
    %y0 = kiln.quantized_linear %n, %q, %s {act_quant = "int8_per_tensor", act_scale = 0.5 : f32, bits = 8 : i64, group_size = 0 : i64} : tensor<?x64xf32>, tensor<16x64xi8>, tensor<16xf32> -> tensor<?x16xf32>
    %y1 = kiln.quantized_linear %n, %q, %s {act_quant = "int8_per_tensor", act_scale = 0.25 : f32, bits = 8 : i64, group_size = 0 : i64} : tensor<?x64xf32>, tensor<16x64xi8>, tensor<16xf32> -> tensor<?x16xf32>
    return %y0, %y1 : tensor<?x16xf32>, tensor<?x16xf32>
  }
}

// -----

// A W8A16 reader keeps f32 activations: the f32 gather stays.
// CHECK-LABEL: func.func @mixed
// CHECK: kiln.all_gather_rows %{{.*}} {group_size = 2 : i64, min_tokens = 4 : i64} : tensor<?x64xf32>
module attributes {kiln.partition = {rank = 0 : i64, tp = 2 : i64, vocab_parallel = false}} {
  func.func @mixed(%o: tensor<?x64xf32>, %h: tensor<?x64xf32>, %w: tensor<64xf32>, %q: tensor<16x64xi8>, %s: tensor<16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
    %r = kiln.all_reduce %o {group_size = 2 : i64} : tensor<?x64xf32>
    %a = kiln.add %h, %r : tensor<?x64xf32>
    %n = kiln.rms_norm %a, %w {epsilon = 1.0e-05 : f32} : tensor<?x64xf32>, tensor<64xf32>
    %y0 = kiln.quantized_linear %n, %q, %s {act_quant = "int8_per_token", bits = 8 : i64, group_size = 0 : i64} : tensor<?x64xf32>, tensor<16x64xi8>, tensor<16xf32> -> tensor<?x16xf32>
    %y1 = kiln.quantized_linear %n, %q, %s {bits = 8 : i64, group_size = 0 : i64} : tensor<?x64xf32>, tensor<16x64xi8>, tensor<16xf32> -> tensor<?x16xf32>
    return %y0, %y1 : tensor<?x16xf32>, tensor<?x16xf32>
  }
}

// -----

// GGUF block weights with int8 activations (llama.cpp's Q8_0 rows): per
// 32-element block, the classifier too.
// CHECK-LABEL: func.func @blocks
// CHECK: %[[G:.*]] = kiln.all_gather_rows %{{.*}} {group_size = 2 : i64, min_tokens = 4 : i64, wire_quant = "int8_per_block"} : tensor<?x64xf32>
// CHECK: kiln.linear %[[G]]
// CHECK: kiln.logits %[[G]]
module attributes {kiln.partition = {rank = 0 : i64, tp = 2 : i64, vocab_parallel = false}} {
  func.func @blocks(%o: tensor<?x64xf32>, %h: tensor<?x64xf32>, %w: tensor<64xf32>, %q: tensor<16x68xi8>, %c: tensor<32x68xi8>) -> (tensor<?x16xf32>, tensor<1x32xf32>) {
    %r = kiln.all_reduce %o {group_size = 2 : i64} : tensor<?x64xf32>
    %a = kiln.add %h, %r : tensor<?x64xf32>
    %n = kiln.rms_norm %a, %w {epsilon = 1.0e-05 : f32} : tensor<?x64xf32>, tensor<64xf32>
    %y = kiln.linear %n, %q {act_quant = "int8_per_block", format = "q8_0"} : tensor<?x64xf32>, tensor<16x68xi8> -> tensor<?x16xf32>
    %l = kiln.logits %n, %c {act_quant = "int8_per_block", format = "q8_0"} : tensor<?x64xf32>, tensor<32x68xi8> -> tensor<1x32xf32>
    return %y, %l : tensor<?x16xf32>, tensor<1x32xf32>
  }
}

// -----

// 16-bit rows: the readers quantize bf16 values, which the f32 wire would
// not reproduce; the gather stays.
// CHECK-LABEL: func.func @bf16_rows
// CHECK: kiln.all_gather_rows %{{.*}} {group_size = 2 : i64, min_tokens = 4 : i64} : tensor<?x64xbf16>
module attributes {kiln.partition = {rank = 0 : i64, tp = 2 : i64, vocab_parallel = false}} {
  func.func @bf16_rows(%o: tensor<?x64xbf16>, %h: tensor<?x64xbf16>, %w: tensor<64xbf16>, %q: tensor<16x64xi8>, %s: tensor<16xf32>) -> tensor<?x16xbf16> {
    %r = kiln.all_reduce %o {group_size = 2 : i64} : tensor<?x64xbf16>
    %a = kiln.add %h, %r : tensor<?x64xbf16>
    %n = kiln.rms_norm %a, %w {epsilon = 1.0e-05 : f32} : tensor<?x64xbf16>, tensor<64xbf16>
    %y = kiln.quantized_linear %n, %q, %s {act_quant = "int8_per_token", bits = 8 : i64, group_size = 0 : i64} : tensor<?x64xbf16>, tensor<16x64xi8>, tensor<16xf32> -> tensor<?x16xbf16>
    return %y : tensor<?x16xbf16>
  }
}

// Cases kiln-fuse must leave alone (or fuse only partly), one per function.
// RUN: kiln-opt %s --kiln-fuse | FileCheck %s
// Unknown or contradictory families are errors.
// RUN: not kiln-opt %s --pass-pipeline="builtin.module(kiln-fuse{families=vertical})" 2>&1 | FileCheck %s --check-prefix=BADFAMILY
// BADFAMILY: error: kiln-fuse: unknown fusion family 'vertical' (expected horizontal, prologue, epilogue, elementwise, all or none)
// RUN: not kiln-opt %s --pass-pipeline="builtin.module(kiln-fuse{families=none,epilogue})" 2>&1 | FileCheck %s --check-prefix=NONEMIX
// NONEMIX: error: kiln-fuse: 'none' cannot be combined with other fusion families
// An empty list is a mistake, not "all".
// RUN: not kiln-opt %s --pass-pipeline="builtin.module(kiln-fuse{families=})" 2>&1 | FileCheck %s --check-prefix=EMPTY
// EMPTY: error: kiln-fuse: 'families=' lists no fusion family (expected horizontal, prologue, epilogue, elementwise, all or none)
// Fusing after memory planning would leave stale buffer offsets.
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(func.func(kiln-memory-plan),kiln-fuse)" 2>&1 | FileCheck %s --check-prefix=PLANNED
// PLANNED: error: kiln-fuse: 'prefill' is already memory-planned; run kiln-fuse before kiln-memory-plan

module {
  kiln.weight @a : tensor<8x16xf32> {source = #kiln.source<file = "t.bin", tensor = "a", storage = "f32", shape = [8, 16], offset = 0, bytes = 512>, transforms = []}
  kiln.weight @b : tensor<8x16xf32> {source = #kiln.source<file = "t.bin", tensor = "b", storage = "f32", shape = [8, 16], offset = 512, bytes = 512>, transforms = []}
  kiln.weight @c : tensor<4x16xf32> {source = #kiln.source<file = "t.bin", tensor = "c", storage = "f32", shape = [4, 16], offset = 1024, bytes = 256>, transforms = []}
  kiln.weight @n : tensor<16xf32> {source = #kiln.source<file = "t.bin", tensor = "n", storage = "f32", shape = [16], offset = 1280, bytes = 64>, transforms = []}
  kiln.weight @q4 : tensor<8x18xi8> {source = #kiln.source<file = "t.gguf", tensor = "q4", storage = "q4_0", shape = [8, 32], offset = 0, bytes = 144>, transforms = [#kiln.transform<"repack", {format = "q4_0", part = "blocks", rows = 8 : i64, cols = 32 : i64}>]}
  kiln.weight @q8 : tensor<8x34xi8> {source = #kiln.source<file = "t.gguf", tensor = "q8", storage = "q8_0", shape = [8, 32], offset = 160, bytes = 272>, transforms = [#kiln.transform<"repack", {format = "q8_0", part = "blocks", rows = 8 : i64, cols = 32 : i64}>]}
  kiln.weight @h16 : tensor<8x16xf16> {source = #kiln.source<file = "t.bin", tensor = "a", storage = "f32", shape = [8, 16], offset = 0, bytes = 512>, transforms = []}
  kiln.weight @h16b : tensor<8x16xf16> {source = #kiln.source<file = "t.bin", tensor = "b", storage = "f32", shape = [8, 16], offset = 512, bytes = 512>, transforms = []}

  // Different block formats (Q4_K_M files mix Q4_K and Q6_K): no concat.
  // CHECK-LABEL: func.func @mixed_formats
  // CHECK-NOT: concat_rows
  // CHECK: kiln.linear %{{.*}} {format = "q4_0"}
  // CHECK: kiln.linear %{{.*}} {format = "q8_0"}
  func.func @mixed_formats(%x: tensor<?x32xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
    %w0 = kiln.weight_ref @q4 : tensor<8x18xi8>
    %w1 = kiln.weight_ref @q8 : tensor<8x34xi8>
    %y0 = kiln.linear %x, %w0 {format = "q4_0"} : tensor<?x32xf32>, tensor<8x18xi8> -> tensor<?x8xf32>
    %y1 = kiln.linear %x, %w1 {format = "q8_0"} : tensor<?x32xf32>, tensor<8x34xi8> -> tensor<?x8xf32>
    return %y0, %y1 : tensor<?x8xf32>, tensor<?x8xf32>
  }

  // A weight that is not a kiln.weight (an argument) cannot be concatenated.
  // CHECK-LABEL: func.func @argument_weight
  // CHECK-NOT: kiln.fused
  // CHECK-COUNT-2: kiln.linear
  func.func @argument_weight(%x: tensor<?x16xf32>, %w: tensor<8x16xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
    %w0 = kiln.weight_ref @a : tensor<8x16xf32>
    %y0 = kiln.linear %x, %w0 : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
    %y1 = kiln.linear %x, %w : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
    return %y0, %y1 : tensor<?x8xf32>, tensor<?x8xf32>
  }

  // The linear's result has another user: the add stays outside.
  // CHECK-LABEL: func.func @shared_result
  // CHECK-NOT: kiln.fused
  // CHECK: %[[Y:.*]] = kiln.linear
  // CHECK: kiln.add %{{.*}}, %[[Y]]
  func.func @shared_result(%x: tensor<?x16xf32>, %h: tensor<?x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
    %w0 = kiln.weight_ref @a : tensor<8x16xf32>
    %y = kiln.linear %x, %w0 : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
    %s = kiln.add %h, %y : tensor<?x8xf32>
    return %s, %y : tensor<?x8xf32>, tensor<?x8xf32>
  }

  // A norm with another user (here observed for calibration) is no prologue.
  // CHECK-LABEL: func.func @shared_norm
  // CHECK-NOT: kiln.fused
  // CHECK: kiln.rms_norm
  // CHECK: kiln.observe
  func.func @shared_norm(%x: tensor<?x16xf32>) -> tensor<?x8xf32> {
    %nw = kiln.weight_ref @n : tensor<16xf32>
    %xn = kiln.rms_norm %x, %nw {epsilon = 1.0e-5 : f32} : tensor<?x16xf32>, tensor<16xf32>
    kiln.observe %xn {tap = "t"} : tensor<?x16xf32>
    %w0 = kiln.weight_ref @a : tensor<8x16xf32>
    %y = kiln.linear %xn, %w0 : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
    return %y : tensor<?x8xf32>
  }

  // The add's other operand is computed after the linear: joining would
  // move the add before its operand. The silu and the add form an
  // elementwise chain instead, reading the linear's result.
  // CHECK-LABEL: func.func @operand_after_anchor
  // CHECK: %[[Y:.*]] = kiln.linear
  // CHECK-NEXT: kiln.fused(%{{.*}}, %[[Y]]) attributes {families = ["elementwise"]}
  func.func @operand_after_anchor(%x: tensor<?x16xf32>, %h: tensor<?x8xf32>) -> tensor<?x8xf32> {
    %w0 = kiln.weight_ref @a : tensor<8x16xf32>
    %y = kiln.linear %x, %w0 : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
    %late = kiln.silu %h : tensor<?x8xf32>
    %s = kiln.add %late, %y : tensor<?x8xf32>
    return %s : tensor<?x8xf32>
  }

  // 16-bit activations are not fused (the generated kernels compute f32).
  // CHECK-LABEL: func.func @half
  // CHECK-NOT: kiln.fused
  // CHECK-NOT: concat_rows
  func.func @half(%x: tensor<?x16xf16>, %h: tensor<?x8xf16>) -> (tensor<?x8xf16>, tensor<?x8xf16>) {
    %w0 = kiln.weight_ref @h16 : tensor<8x16xf16>
    %w1 = kiln.weight_ref @h16b : tensor<8x16xf16>
    %y0 = kiln.linear %x, %w0 : tensor<?x16xf16>, tensor<8x16xf16> -> tensor<?x8xf16>
    %y1 = kiln.linear %x, %w1 : tensor<?x16xf16>, tensor<8x16xf16> -> tensor<?x8xf16>
    %s = kiln.add %h, %y0 : tensor<?x8xf16>
    return %s, %y1 : tensor<?x8xf16>, tensor<?x8xf16>
  }

  // Column ranges of different widths are never combined by one op: the
  // mul of the two 8-wide ranges of a 8+8+4 concatenation stays outside
  // (the ranges of the 4-wide part differ).
  // CHECK-LABEL: func.func @uneven_combine
  // CHECK: %[[R:.*]]:3 = kiln.fused
  // CHECK-SAME: families = ["horizontal"]
  // CHECK: kiln.mul %[[R]]#0, %[[R]]#1
  func.func @uneven_combine(%x: tensor<?x16xf32>) -> (tensor<?x8xf32>, tensor<?x4xf32>) {
    %w0 = kiln.weight_ref @a : tensor<8x16xf32>
    %w1 = kiln.weight_ref @b : tensor<8x16xf32>
    %w2 = kiln.weight_ref @c : tensor<4x16xf32>
    %y0 = kiln.linear %x, %w0 : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
    %y1 = kiln.linear %x, %w1 : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
    %y2 = kiln.linear %x, %w2 : tensor<?x16xf32>, tensor<4x16xf32> -> tensor<?x4xf32>
    %p = kiln.mul %y0, %y1 : tensor<?x8xf32>
    return %p, %y2 : tensor<?x8xf32>, tensor<?x4xf32>
  }

  // Scaled RoPE (and RoPE after a bias, Qwen2) stays outside the QKV region:
  // the generated epilogue applies plain RoPE to a raw column range only.
  // CHECK-LABEL: func.func @scaled_rope
  // CHECK: %[[R:.*]]:2 = kiln.fused
  // CHECK-NOT: kiln.rope
  // CHECK: kiln.add_bias
  // CHECK-NEXT: kiln.yield
  // CHECK: kiln.rope %[[R]]#0, %arg1 {{.*}}scaling = "linear"
  // CHECK-NEXT: kiln.rope %[[R]]#1, %arg1
  func.func @scaled_rope(%x: tensor<?x16xf32>, %pos: index, %bias: tensor<8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
    %w0 = kiln.weight_ref @a : tensor<8x16xf32>
    %w1 = kiln.weight_ref @b : tensor<8x16xf32>
    %y0 = kiln.linear %x, %w0 : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
    %y1 = kiln.linear %x, %w1 : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
    %r0 = kiln.rope %y0, %pos {num_heads = 2 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32, scaling = "linear", scaling_factor = 4.0 : f32} : tensor<?x8xf32>
    %b1 = kiln.add_bias %y1, %bias : tensor<?x8xf32>, tensor<8xf32>
    %r1 = kiln.rope %b1, %pos {num_heads = 2 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32} : tensor<?x8xf32>
    return %r0, %r1 : tensor<?x8xf32>, tensor<?x8xf32>
  }

  // Elementwise family: a chain of single-use elementwise ops is one loop;
  // an op whose result is used twice ends it.
  // CHECK-LABEL: func.func @chain
  // CHECK: %[[E:.*]] = kiln.fused(%{{.*}}, %{{.*}}) attributes {families = ["elementwise"]} {
  // CHECK: kiln.add
  // CHECK-NEXT: kiln.silu
  // CHECK-NEXT: kiln.mul
  // CHECK-NEXT: kiln.yield
  // CHECK: return %[[E]], %[[E]]
  func.func @chain(%a: tensor<?x8xf32>, %b: tensor<?x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
    %s = kiln.add %a, %b : tensor<?x8xf32>
    %t = kiln.silu %s : tensor<?x8xf32>
    %u = kiln.mul %t, %a : tensor<?x8xf32>
    return %u, %u : tensor<?x8xf32>, tensor<?x8xf32>
  }
}

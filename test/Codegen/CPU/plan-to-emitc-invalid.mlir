// RUN: kiln-opt %s --kiln-plan-to-emitc --split-input-file --verify-diagnostics
// RUN: kiln-opt %s --split-input-file --verify-diagnostics --pass-pipeline="builtin.module(kiln-plan-to-emitc{target=cuda})"
// RUN: not kiln-opt %s --split-input-file --pass-pipeline="builtin.module(kiln-plan-to-emitc{target=tpu})" 2>&1 | FileCheck %s --check-prefix=TARGET

// TARGET: error: unknown target 'tpu' (expected cpu or cuda)

// Only what kiln-lower-to-plan produces is emitted; anything else is an
// error at the op, not silently dropped code.
func.func @negative_unknown_op(%n: index, %pos: index) {
  // expected-error @+1 {{'arith.addi' op cannot be emitted for the}}
  %sum = arith.addi %n, %pos : index
  return
}

// -----

// Fused kernels (either target: the checks are shared). RoPE takes its pair
// partner from the linear's raw output, so it must read a column slice of it.
module attributes {kiln.model = {n_heads = 4 : i64, head_dim = 4 : i64, max_seq_len = 64 : i64, vocab_size = 32 : i64, dim = 16 : i64, hidden_dim = 24 : i64}} {
  plan.fused_kernel @k families ["epilogue"] {
  ^bb0(%x: tensor<?x16xf32>, %w: tensor<16x16xf32>, %q: tensor<?x16xf32>, %pos: index):
    %0 = kiln.linear %x, %w : tensor<?x16xf32>, tensor<16x16xf32> -> tensor<?x16xf32>
    // expected-error @below {{'kiln.rope' op in fused kernel 'k' must read a column slice of the region's linear}}
    %1 = kiln.rope %q, %pos {head_dim = 4 : i64, num_heads = 4 : i64, rotary_dim = 4 : i64, theta = 1.000000e+04 : f32} : tensor<?x16xf32>
    %2 = kiln.add %1, %0 : tensor<?x16xf32>
    kiln.yield %2 : tensor<?x16xf32>
  }
}

// -----

module attributes {kiln.model = {n_heads = 4 : i64, head_dim = 4 : i64, max_seq_len = 64 : i64, vocab_size = 32 : i64, dim = 16 : i64, hidden_dim = 24 : i64}} {
  plan.fused_kernel @k families ["epilogue"] {
  ^bb0(%x: tensor<?x16xf32>, %w: tensor<16x16xf32>, %pos: index):
    %0 = kiln.linear %x, %w : tensor<?x16xf32>, tensor<16x16xf32> -> tensor<?x16xf32>
    // expected-error @below {{'kiln.rope' op in fused kernel 'k' must be plain RoPE (scaled RoPE runs as its own kernel)}}
    %1 = kiln.rope %0, %pos {head_dim = 4 : i64, num_heads = 4 : i64, rotary_dim = 4 : i64, theta = 1.000000e+04 : f32, scaling = "linear", scaling_factor = 2.0 : f32} : tensor<?x16xf32>
    kiln.yield %1 : tensor<?x16xf32>
  }
}

// -----

// Every result is computed per element of the linear's output: the
// prologue's normalized input is not.
module attributes {kiln.model = {n_heads = 4 : i64, head_dim = 4 : i64, max_seq_len = 64 : i64, vocab_size = 32 : i64, dim = 16 : i64, hidden_dim = 24 : i64}} {
  // expected-error @below {{'plan.fused_kernel' op fused kernel 'k' yields a value not computed from its linear's output}}
  plan.fused_kernel @k families ["prologue"] {
  ^bb0(%x: tensor<?x16xf32>, %g: tensor<16xf32>, %w: tensor<16x16xf32>):
    %0 = kiln.rms_norm %x, %g {epsilon = 1.0e-5 : f32} : tensor<?x16xf32>, tensor<16xf32>
    %1 = kiln.linear %0, %w : tensor<?x16xf32>, tensor<16x16xf32> -> tensor<?x16xf32>
    kiln.yield %1, %0 : tensor<?x16xf32>, tensor<?x16xf32>
  }
}

// -----

// An elementwise region is one loop over rows x width.
module attributes {kiln.model = {n_heads = 4 : i64, head_dim = 4 : i64, max_seq_len = 64 : i64, vocab_size = 32 : i64, dim = 16 : i64, hidden_dim = 24 : i64}} {
  plan.fused_kernel @k families ["elementwise"] {
  ^bb0(%a: tensor<?x16xf32>, %b: tensor<?x16xf32>, %r: tensor<?x24xf32>):
    %0 = kiln.add %a, %b : tensor<?x16xf32>
    // expected-error @below {{'kiln.silu' op in fused kernel 'k' has width 24, the region's first op 16}}
    %1 = kiln.silu %r : tensor<?x24xf32>
    kiln.yield %0, %1 : tensor<?x16xf32>, tensor<?x24xf32>
  }
}

// RUN: kiln-opt %s --pass-pipeline="builtin.module(kiln-plan-to-emitc{target=cuda})" --split-input-file --verify-diagnostics

// The CUDA target sizes its workspace and sampling exports from the model's
// shape (the kiln.model module attribute the importer records).
// expected-error @below {{the cuda target needs the module attribute kiln.model with positive n_heads, head_dim, max_seq_len, vocab_size, dim and hidden_dim}}
module {
  func.func @prefill(%n: index, %pos: index) {
    return
  }
}

// -----

// Calibration observers call back into the host runtime: CPU target only.
module attributes {kiln.model = {n_heads = 4 : i64, head_dim = 4 : i64, max_seq_len = 64 : i64, vocab_size = 32 : i64, dim = 16 : i64, hidden_dim = 24 : i64}} {
  func.func @prefill(%n: index, %pos: index) {
    %x = plan.arena_view[0] (%n) : memref<?x16xf32>
    %c16 = arith.constant 16 : index
    %c0 = arith.constant 0 : index
    // expected-error @+1 {{'plan.call_kernel' op calibration observers (kiln_k_observe) run on the cpu target only; compile with target=cpu}}
    plan.call_kernel "kiln_k_observe"(%x, %n, %c16, %c0) : memref<?x16xf32>, index, index, index
    return
  }
}

// -----

// A fused RoPE epilogue computes pairs (j, j ^ 1) in one output group, so its
// column ranges must start and end on even rows.
module attributes {kiln.model = {n_heads = 4 : i64, head_dim = 4 : i64, max_seq_len = 64 : i64, vocab_size = 32 : i64, dim = 16 : i64, hidden_dim = 24 : i64}} {
  plan.fused_kernel @k families ["horizontal", "epilogue"] {
  ^bb0(%x: tensor<?x16xf32>, %w: tensor<9x16xf32>, %pos: index):
    %0 = kiln.linear %x, %w : tensor<?x16xf32>, tensor<9x16xf32> -> tensor<?x9xf32>
    %1 = kiln.slice_columns %0 {offset = 0 : i64} : tensor<?x9xf32> -> tensor<?x6xf32>
    %2 = kiln.slice_columns %0 {offset = 6 : i64} : tensor<?x9xf32> -> tensor<?x3xf32>
    // expected-error @below {{'kiln.rope' op in fused kernel 'k' needs column ranges of even offset and width}}
    %3 = kiln.rope %1, %pos {head_dim = 2 : i64, num_heads = 3 : i64, rotary_dim = 2 : i64, theta = 1.000000e+04 : f32} : tensor<?x6xf32>
    kiln.yield %3, %2 : tensor<?x6xf32>, tensor<?x3xf32>
  }
}

// -----

// W8A8 quantizes its activations per call: never a fused region's anchor.
module attributes {kiln.model = {n_heads = 4 : i64, head_dim = 4 : i64, max_seq_len = 64 : i64, vocab_size = 32 : i64, dim = 16 : i64, hidden_dim = 24 : i64}} {
  plan.fused_kernel @k families ["epilogue"] {
  ^bb0(%x: tensor<?x16xf32>, %w: tensor<16x16xi8>, %s: tensor<16xf32>, %r: tensor<?x16xf32>):
    // expected-error @below {{'kiln.quantized_linear' op W8A8 linears are not fused}}
    %0 = kiln.quantized_linear %x, %w, %s {bits = 8 : i64, group_size = 0 : i64, act_quant = "int8_per_token"} : tensor<?x16xf32>, tensor<16x16xi8>, tensor<16xf32> -> tensor<?x16xf32>
    %1 = kiln.add %r, %0 : tensor<?x16xf32>
    kiln.yield %1 : tensor<?x16xf32>
  }
}

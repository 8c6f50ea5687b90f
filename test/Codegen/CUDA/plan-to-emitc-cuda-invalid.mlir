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

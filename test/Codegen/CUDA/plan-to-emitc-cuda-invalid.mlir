// RUN: kiln-opt %s --pass-pipeline="builtin.module(kiln-plan-to-emitc{target=cuda})" --verify-diagnostics

// The CUDA target sizes its workspace and sampling exports from the model's
// shape (the kiln.model module attribute the importer records).
// expected-error @below {{the cuda target needs the module attribute kiln.model with positive n_heads, head_dim, max_seq_len, vocab_size, dim and hidden_dim}}
module {
  func.func @prefill(%n: index, %pos: index) {
    return
  }
}

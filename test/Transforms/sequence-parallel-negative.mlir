// RUN: kiln-opt %s --kiln-sequence-parallel="min-tokens=2" --split-input-file --verify-diagnostics
// kiln-sequence-parallel refuses a threshold below the group size (some
// rank would get no row) and a module it already rewrote.

// expected-error @+1 {{kiln-sequence-parallel: min-tokens (2) must be at least the tensor-parallel group's size (4): every rank needs a row of the sequence}}
module attributes {kiln.partition = {rank = 0 : i64, tp = 4 : i64, vocab_parallel = false}} {
  func.func @prefill(%o: tensor<?x16xf32>, %h: tensor<?x16xf32>) -> tensor<?x16xf32> {
    %r = kiln.all_reduce %o {group_size = 4 : i64} : tensor<?x16xf32>
    %a = kiln.add %h, %r : tensor<?x16xf32>
    return %a : tensor<?x16xf32>
  }
}

// -----

// expected-error @+1 {{kiln-sequence-parallel: the module is already sequence-parallel}}
module attributes {kiln.partition = {rank = 0 : i64, sequence_parallel_min_tokens = 2 : i64, tp = 2 : i64, vocab_parallel = false}} {
  func.func @prefill(%o: tensor<?x16xf32>, %h: tensor<?x16xf32>) -> tensor<?x16xf32> {
    %r = kiln.reduce_scatter %o {group_size = 2 : i64, min_tokens = 2 : i64} : tensor<?x16xf32>
    %a = kiln.add %h, %r : tensor<?x16xf32>
    return %a : tensor<?x16xf32>
  }
}

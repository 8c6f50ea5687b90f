// kiln-sequence-parallel (Korthikanti et al. 2022; docs/parallelism.md): in
// a tensor-parallel module, each all-reduce that feeds the residual add
// becomes a reduce-scatter, the residual stream starts with the rank's
// all_slice of the embedding, the adds and rms_norms run on the shard, and
// whatever else reads a sharded value (the column-parallel linears after a
// norm, last_rows, the classifier, a stage's send) reads one
// all_gather_rows of it. Decode (one token) keeps plain TP; a module without
// TP is unchanged.
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-partition{tp=2 rank=1},kiln-verify,kiln-batch-step,kiln-sequence-parallel{min-tokens=4})" | FileCheck %s
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sequence-parallel="min-tokens=4" | FileCheck %s --check-prefix=NOTP
// Communication fusion: each reduce-scatter, its residual add and the norm
// of the sum become one op whose two results are the sum and the normed
// sum; a sum used before its norm (none here) or gathered instead of
// normed (the step's last) keeps the separate ops.
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-partition{tp=2 rank=1},kiln-verify,kiln-batch-step,kiln-sequence-parallel{min-tokens=4 fuse-norm=true})" | FileCheck %s --check-prefix=FUSE
// The threshold's default (kiln-compile --sp=auto on the cpu target).
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-partition{tp=2 rank=0},kiln-sequence-parallel)" | FileCheck %s --check-prefix=DEFAULT

// CHECK: kiln.partition = {kv_head_offset = 1 : i64, model_kv_heads = 2 : i64, rank = 1 : i64, sequence_parallel_min_tokens = 4 : i64, tp = 2 : i64, vocab_parallel = true}
// CHECK-LABEL: func.func @prefill(
// CHECK: %[[E:.*]] = kiln.embedding
// CHECK-NEXT: %[[H0:.*]] = kiln.all_slice %[[E]] {group_size = 2 : i64, min_tokens = 4 : i64} : tensor<?x16xf32>
// CHECK: %[[N0:.*]] = kiln.rms_norm %[[H0]], {{.*}} : tensor<?x16xf32>, tensor<16xf32>
// CHECK-NEXT: %[[X0:.*]] = kiln.all_gather_rows %[[N0]] {group_size = 2 : i64, min_tokens = 4 : i64} : tensor<?x16xf32>
// CHECK: kiln.linear %[[X0]]
// CHECK: %[[O:.*]] = kiln.linear {{.*}} : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<?x16xf32>
// CHECK-NEXT: %[[S1:.*]] = kiln.reduce_scatter %[[O]] {group_size = 2 : i64, min_tokens = 4 : i64} : tensor<?x16xf32>
// CHECK-NEXT: %[[H1:.*]] = kiln.add %[[H0]], %[[S1]] : tensor<?x16xf32>
// CHECK: %[[N1:.*]] = kiln.rms_norm %[[H1]]
// CHECK-NEXT: %[[X1:.*]] = kiln.all_gather_rows %[[N1]]
// CHECK: kiln.linear %[[X1]]
// CHECK: %[[D:.*]] = kiln.linear {{.*}} : tensor<?x12xf32>, tensor<16x12xf32> -> tensor<?x16xf32>
// CHECK-NEXT: %[[S2:.*]] = kiln.reduce_scatter %[[D]]
// CHECK-NEXT: %[[H2:.*]] = kiln.add %[[H1]], %[[S2]]
// CHECK: %[[NF:.*]] = kiln.rms_norm %[[H2]]
// CHECK-NEXT: %[[XF:.*]] = kiln.all_gather_rows %[[NF]]
// CHECK: kiln.logits %[[XF]]
// CHECK-NOT: kiln.all_reduce
// The batched step: the stream is gathered before kiln.last_rows picks each
// sequence's last row.
// CHECK-LABEL: func.func @step(
// CHECK: kiln.all_slice
// CHECK-COUNT-2: kiln.reduce_scatter
// CHECK: %[[HS:.*]] = kiln.add
// CHECK-NEXT: %[[G:.*]] = kiln.all_gather_rows %[[HS]]
// CHECK: kiln.last_rows %[[G]]
// CHECK-NOT: kiln.all_reduce
// CHECK-LABEL: func.func @decode(
// CHECK-NOT: kiln.reduce_scatter
// CHECK-NOT: kiln.all_slice
// CHECK-NOT: kiln.all_gather_rows
// CHECK-COUNT-2: kiln.all_reduce
// CHECK-NOT: kiln.reduce_scatter

// NOTP-NOT: kiln.all_slice
// NOTP-NOT: kiln.reduce_scatter
// NOTP-NOT: sequence_parallel_min_tokens

// DEFAULT: sequence_parallel_min_tokens = 256 : i64
// DEFAULT: kiln.reduce_scatter %{{.*}} {group_size = 2 : i64, min_tokens = 256 : i64}

// FUSE-LABEL: func.func @prefill(
// FUSE: %[[H0:.*]] = kiln.all_slice
// FUSE: %[[O:.*]] = kiln.linear {{.*}} -> tensor<?x16xf32>
// FUSE: %[[H1:.*]], %[[N1:.*]] = kiln.reduce_scatter_add_rms_norm %[[O]], %[[H0]], %{{.*}} {epsilon = {{.*}}, group_size = 2 : i64, min_tokens = 4 : i64} : tensor<?x16xf32>, tensor<16xf32>
// FUSE-NEXT: kiln.all_gather_rows %[[N1]]
// FUSE: %[[D:.*]] = kiln.linear {{.*}} : tensor<?x12xf32>, tensor<16x12xf32> -> tensor<?x16xf32>
// FUSE: %[[H2:.*]], %[[N2:.*]] = kiln.reduce_scatter_add_rms_norm %[[D]], %[[H1]]
// FUSE-NOT: kiln.reduce_scatter %
// FUSE-NOT: kiln.add
// FUSE-LABEL: func.func @step(
// FUSE: kiln.reduce_scatter_add_rms_norm
// FUSE: %[[S:.*]] = kiln.reduce_scatter %
// FUSE-NEXT: %[[A:.*]] = kiln.add %{{.*}}, %[[S]]
// FUSE-NEXT: kiln.all_gather_rows %[[A]]

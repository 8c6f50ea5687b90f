// kiln-partition{pp=M stage=S}: stage S's layers of an M-stage pipeline
// (docs/parallelism.md). stories260K (5 layers of 180 KiB of f32 weights,
// a 128 KiB classifier): pp=2 balances the weight bytes read per token as
// layers [0, 3) | [3, 5) + final norm and classifier. Stage 0 keeps the
// embedding and ends with a kiln.send of the residual entering layer 3;
// its entry points return nothing. Stage 1 starts with a kiln.recv in place
// of the embedding and layers 0-2, renumbers its attention layers from 0,
// its KV caches hold 2 layers, and it returns the logits.
// RUN: kiln-compile %shared/models/stories260K/stories260K.bin --emit=kiln --fuse=none --batch-step=false -o %t.mlir
// RUN: kiln-opt %t.mlir --kiln-partition="pp=2 stage=0" | FileCheck %s --check-prefix=S0
// RUN: kiln-opt %t.mlir --kiln-partition="pp=2 stage=1" | FileCheck %s --check-prefix=S1
// RUN: kiln-opt %t.mlir --kiln-partition="pp=3 stage=1" | FileCheck %s --check-prefix=MID
// RUN: kiln-opt %t.mlir --kiln-partition="tp=2 rank=1 pp=2 stage=1" | FileCheck %s --check-prefix=TPPP
// The stage programs go on through the rest of the pipeline: the batched
// step of a stage is its prefill with the paged cache (the classifier's
// rows only on the last stage).
// RUN: kiln-opt %t.mlir --pass-pipeline="builtin.module(kiln-partition{pp=2 stage=0},kiln-verify,kiln-batch-step,kiln-fuse)" | FileCheck %s --check-prefix=STEP0
// RUN: kiln-opt %t.mlir --pass-pipeline="builtin.module(kiln-partition{pp=2 stage=1},kiln-verify,kiln-batch-step,kiln-fuse)" | FileCheck %s --check-prefix=STEP1

// S0: kiln.partition = {first_layer = 0 : i64, num_layers = 3 : i64, pp = 2 : i64, rank = 0 : i64, stage = 0 : i64, stage_layers = array<i64: 3, 2>, tp = 1 : i64, vocab_parallel = false}
// S0: kiln.weight @tok_embeddings
// S0: kiln.weight @layers.2.w3
// S0-NOT: kiln.weight @layers.3.
// S0-NOT: kiln.weight @norm
// S0-NOT: kiln.weight @output
// S0-LABEL: func.func @prefill(%{{.*}}: tensor<?xi32>, %{{.*}}: index, %{{.*}}: !kiln.kv_cache<3, 512, 4, 8, f32>) attributes
// S0: kiln.embedding
// S0: kiln.attention {{.*}}layer = 2 : i64
// S0: kiln.add %{{[0-9]+}}, %{{[0-9]+}} : tensor<?x64xf32>{{[[:space:]]+}}kiln.send %{{[0-9]+}} {destination = 1 : i64} : tensor<?x64xf32>
// S0-NEXT: return{{$}}
// S0-LABEL: func.func @decode(%{{.*}}: tensor<1xi32>, %{{.*}}: index, %{{.*}}: !kiln.kv_cache<3, 512, 4, 8, f32>) attributes
// S0: kiln.send %{{.*}} {destination = 1 : i64} : tensor<1x64xf32>

// S1: kiln.partition = {first_layer = 3 : i64, num_layers = 2 : i64, pp = 2 : i64, rank = 0 : i64, stage = 1 : i64, stage_layers = array<i64: 3, 2>, tp = 1 : i64, vocab_parallel = false}
// S1-NOT: kiln.weight @tok_embeddings
// S1-NOT: kiln.weight @layers.2.
// S1: kiln.weight @layers.3.attention_norm
// S1: kiln.weight @output
// S1-LABEL: func.func @prefill(%{{.*}}: tensor<?xi32>, %{{.*}}: index, %{{.*}}: !kiln.kv_cache<2, 512, 4, 8, f32>) -> tensor<1x512xf32>
// S1-NEXT: %[[H:.*]] = kiln.recv {source = 0 : i64} : tensor<?x64xf32>
// S1-NEXT: kiln.weight_ref @layers.3.attention_norm
// S1-NEXT: kiln.rms_norm %[[H]]
// S1-NOT: kiln.embedding
// S1: kiln.attention {{.*}}layer = 0 : i64
// S1: kiln.attention {{.*}}layer = 1 : i64
// S1: %[[L:.*]] = kiln.logits
// S1-NEXT: return %[[L]] : tensor<1x512xf32>

// A middle stage receives and sends: pp=3 gives 2 | 2 | 1 + classifier.
// MID: first_layer = 2 : i64, num_layers = 2 : i64, pp = 3 : i64{{.*}}stage = 1 : i64, stage_layers = array<i64: 2, 2, 1>
// MID-LABEL: func.func @prefill(%{{.*}}: !kiln.kv_cache<2, 512, 4, 8, f32>) attributes
// MID-NEXT: kiln.recv {source = 0 : i64}
// MID: kiln.send %{{.*}} {destination = 2 : i64}
// MID-NEXT: return{{$}}

// TP x PP: tp rank 1's shard of stage 1 (its KV heads, two all-reduces per
// layer, the vocab-parallel classifier).
// TPPP: kiln.partition = {first_layer = 3 : i64, kv_head_offset = 2 : i64, model_kv_heads = 4 : i64, num_layers = 2 : i64, pp = 2 : i64, rank = 1 : i64, stage = 1 : i64, stage_layers = array<i64: 3, 2>, tp = 2 : i64, vocab_parallel = true}
// TPPP-LABEL: func.func @prefill(%{{.*}}: !kiln.kv_cache<2, 512, 2, 8, f32>) -> tensor<1x512xf32>
// TPPP-NEXT: kiln.recv {source = 0 : i64} : tensor<?x64xf32>
// TPPP: kiln.all_reduce
// TPPP: kiln.all_gather

// STEP0-LABEL: func.func @step(%{{.*}}: tensor<?xi32>, %{{.*}}: !kiln.batch, %{{.*}}: !kiln.paged_kv_cache<3, 4, 8, f32>) attributes
// STEP0: kiln.send %{{.*}} {destination = 1 : i64} : tensor<?x64xf32>
// STEP0-NEXT: return{{$}}
// STEP1-LABEL: func.func @step(%{{.*}}: tensor<?xi32>, %{{.*}}: !kiln.batch, %{{.*}}: !kiln.paged_kv_cache<2, 4, 8, f32>) -> tensor<?x512xf32>
// STEP1-NEXT: kiln.recv {source = 0 : i64} : tensor<?x64xf32>
// STEP1: kiln.last_rows
// STEP1: kiln.logits

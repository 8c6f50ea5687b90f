// RUN: kiln-opt %s --split-input-file --verify-diagnostics
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="gamma=0" 2>&1 | FileCheck %s --check-prefix=GAMMA
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="gamma=1.5" 2>&1 | FileCheck %s --check-prefix=GAMMA
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="gamma=1e-46" 2>&1 | FileCheck %s --check-prefix=GAMMA
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="block=0" 2>&1 | FileCheck %s --check-prefix=BLOCK
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="local=0" 2>&1 | FileCheck %s --check-prefix=LOCAL
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="min-budget=512 max-budget=256" 2>&1 | FileCheck %s --check-prefix=BUDGET
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="mode=topk" 2>&1 | FileCheck %s --check-prefix=MODE
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(func.func(kiln-memory-plan),kiln-sparse-attention)" 2>&1 | FileCheck %s --check-prefix=PLANNED
// kiln-sparse-attention's options and the attribute's verifier.

// GAMMA: kiln-sparse-attention: gamma {{.*}} is not in (0, 1]
// BLOCK: kiln-sparse-attention: block 0 is not in [1, 4096] positions
// LOCAL: kiln-sparse-attention: sink must be in [0, 1048576] and local in [1, 1048576] blocks (1: the diagonal block), got sink 1 and local 0
// BUDGET: kiln-sparse-attention: max-budget 256 is below min-budget 512
// MODE: kiln-sparse-attention: mode 'topk' is not flex
// PLANNED: kiln-sparse-attention: 'prefill' is already memory-planned; run this pass before kiln-memory-plan

func.func @gamma(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %p: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{sparse attention gamma must be in (0, 1], got 0}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.0 : f32, block = 16, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 32>} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

// -----

func.func @mode(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %p: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{sparse attention mode must be "flex", got "quest"}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sparse = #kiln.sparse_attention<mode = "quest", gamma = 0.9 : f32, block = 16, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 32>} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

// -----

func.func @budget(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %p: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{sparse attention max_budget (64) is below min_budget (128)}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.9 : f32, block = 16, sink = 1, local = 2, min_budget = 128, max_budget = 64, min_tokens = 32>} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

// -----

func.func @local(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %p: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{sparse attention needs sink >= 0 and local >= 1 blocks (the diagonal's), got sink 1 and local 0}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.9 : f32, block = 16, sink = 1, local = 0, min_budget = 0, max_budget = 0, min_tokens = 32>} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

// -----

func.func @window(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %p: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{'kiln.attention' op sparse attention runs on a contiguous cache of the activation dtype without sliding_window or key centering}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sliding_window = 8 : i64, sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.9 : f32, block = 16, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 32>} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

// -----

func.func @int8_cache(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, i8>, %p: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{'kiln.attention' op sparse attention runs on a contiguous cache of the activation dtype}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.9 : f32, block = 16, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 32>} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, i8> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

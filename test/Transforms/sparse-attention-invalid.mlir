// RUN: kiln-opt %s --split-input-file --verify-diagnostics
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="gamma=0" 2>&1 | FileCheck %s --check-prefix=GAMMA
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="gamma=1.5" 2>&1 | FileCheck %s --check-prefix=GAMMA
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="gamma=1e-46" 2>&1 | FileCheck %s --check-prefix=GAMMA
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="gamma=1e-40" 2>&1 | FileCheck %s --check-prefix=GAMMA
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="block=0" 2>&1 | FileCheck %s --check-prefix=BLOCK
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="local=0" 2>&1 | FileCheck %s --check-prefix=LOCAL
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="min-budget=512 max-budget=256" 2>&1 | FileCheck %s --check-prefix=BUDGET
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="mode=topk" 2>&1 | FileCheck %s --check-prefix=MODE
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(func.func(kiln-memory-plan),kiln-sparse-attention)" 2>&1 | FileCheck %s --check-prefix=PLANNED
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="stride=8" 2>&1 | FileCheck %s --check-prefix=FLEXSTRIDE
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="mode=antidiag block=8" 2>&1 | FileCheck %s --check-prefix=NOSTRIDE
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="mode=antidiag stride=65" 2>&1 | FileCheck %s --check-prefix=BIGSTRIDE
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="decode=sparse" 2>&1 | FileCheck %s --check-prefix=DECODE
// RUN: rm -rf %t && mkdir -p %t
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="streaming=0.5" 2>&1 | FileCheck %s --check-prefix=NOCALIB
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="streaming=1" 2>&1 | FileCheck %s --check-prefix=FRACTION
// RUN: %python %S/head_scores_calib.py %t/nolayers.safetensors --scores 0.5,0.6,0.05,0.02 --no-head-layers
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="streaming=0.5 calibration=%t/nolayers.safetensors" 2>&1 | FileCheck %s --check-prefix=NOHEADS
// RUN: %python %S/head_scores_calib.py %t/shape.safetensors --scores 0.5,0.6,0.05
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="streaming=0.5 calibration=%t/shape.safetensors" 2>&1 | FileCheck %s --check-prefix=SHAPE
// RUN: %python %S/head_scores_calib.py %t/zero-layers.safetensors --scores 0.5,0.6,0.05,0.02 --layers 1
// RUN: %python -c "import sys, json, struct; b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); h['__metadata__']['head_layers'] = '0'; j = json.dumps(h).encode(); j += b' ' * ((8 - len(j) %% 8) %% 8); open(sys.argv[1], 'wb').write(struct.pack('<Q', len(j)) + j + b[8 + n:])" %t/zero-layers.safetensors
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="streaming=0.5 calibration=%t/zero-layers.safetensors" 2>&1 | FileCheck %s --check-prefix=ZEROLAYERS
// RUN: %python %S/head_scores_calib.py %t/range.safetensors --scores 0.5,1.6,0.05,0.02
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="streaming=0.5 calibration=%t/range.safetensors" 2>&1 | FileCheck %s --check-prefix=RANGE
// kiln-sparse-attention's options and the attribute's verifier.

// GAMMA: kiln-sparse-attention: gamma {{.*}} is not in (0, 1]
// BLOCK: kiln-sparse-attention: block 0 is not in [1, 4096] positions
// LOCAL: kiln-sparse-attention: sink must be in [0, 1048576] and local in [1, 1048576] blocks (1: the diagonal block), got sink 1 and local 0
// BUDGET: kiln-sparse-attention: max-budget 256 is below min-budget 512
// MODE: kiln-sparse-attention: mode 'topk' is not flex or antidiag
// PLANNED: kiln-sparse-attention: 'prefill' is already memory-planned; run this pass before kiln-memory-plan
// DECODE: kiln-sparse-attention: decode 'sparse' is not dense or quest
// FLEXSTRIDE: kiln-sparse-attention: stride applies to mode=antidiag (flex pools whole blocks)
// NOSTRIDE: kiln-sparse-attention: stride 16 is not in [1, block = 8]
// BIGSTRIDE: kiln-sparse-attention: stride 65 is not in [1, block = 64]
// NOCALIB: kiln-sparse-attention: streaming > 0 needs calibration=FILE with head scores (kiln-calibrate --heads)
// FRACTION: kiln-sparse-attention: streaming 1.000000 is not a fraction of the KV heads in [0, 1)
// NOHEADS: kiln-sparse-attention: calibration file {{.*}}nolayers.safetensors has no head scores (metadata 'head_layers'); write it with `kiln-calibrate --heads`
// ZEROLAYERS: zero-layers.safetensors has no head scores (metadata 'head_layers')
// SHAPE: kiln-sparse-attention: {{.*}}shape.safetensors{{.*}}layers.0.attn_retrieval{{.*}}
// RANGE: kiln-sparse-attention: calibration file {{.*}}range.safetensors: tensor 'layers.0.attn_retrieval' element 1 is 1.6{{0*}}e+00, not an attention mass in [0, 1]

func.func @gamma(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %p: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{sparse attention gamma must be in (0, 1], got 0}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.0 : f32, block = 16, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 32>} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

// -----

func.func @mode(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %p: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{sparse attention mode must be "flex" or "antidiag", got "quest"}}
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
  // expected-error @+1 {{'kiln.attention' op sparse attention runs on a cache of the activation dtype without sliding_window or key centering}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sliding_window = 8 : i64, sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.9 : f32, block = 16, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 32>} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

// -----

func.func @int8_cache(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, i8>, %p: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{'kiln.attention' op sparse attention runs on a cache of the activation dtype}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.9 : f32, block = 16, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 32>} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, i8> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

// -----

func.func @streaming_order(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %p: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{sparse attention streaming heads must be ascending KV head indices in [0, 64), got 0 after 1}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.9 : f32, block = 16, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 32, streaming = [1, 0]>} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

// -----

func.func @streaming_range(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %p: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{'kiln.attention' op sparse attention names streaming KV head 2, but the layer has 2 KV heads}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.9 : f32, block = 16, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 32, streaming = [2]>} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

// -----

func.func @streaming_64(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %p: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{sparse attention streaming heads must be ascending KV head indices in [0, 64), got 64}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.9 : f32, block = 16, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 32, streaming = [64]>} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

// -----

func.func @flex_stride(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %p: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{sparse attention mode "flex" (pooled keys) takes no stride, got 8}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.9 : f32, block = 16, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 32, stride = 8>} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

// -----

func.func @antidiag_stride(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %p: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{sparse attention mode "antidiag" needs a stride in [1, block = 16], got 0}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sparse = #kiln.sparse_attention<mode = "antidiag", gamma = 0.9 : f32, block = 16, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 32>} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

// -----

func.func @decode_without_summaries(%q: tensor<1x16xf32>, %k: tensor<1x8xf32>, %v: tensor<1x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32>, %p: index) -> tensor<1x16xf32> {
  // expected-error @+1 {{'kiln.attention' op sparse decode (one row) needs a kv_cache with key summaries (summary = 16; kiln-sparse-attention{decode=quest})}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.9 : f32, block = 16, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 32>} : tensor<1x16xf32>, tensor<1x8xf32>, tensor<1x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<1x16xf32>
  return %o : tensor<1x16xf32>
}

// -----

func.func @summaries_dense(%q: tensor<1x16xf32>, %k: tensor<1x8xf32>, %v: tensor<1x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32, summary = 16>, %p: index) -> tensor<1x16xf32> {
  // expected-error @+1 {{'kiln.attention' op writes a kv_cache with key summaries without sparse attention (only the sparse kernels keep the summaries up to date)}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<1x16xf32>, tensor<1x8xf32>, tensor<1x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32, summary = 16> -> tensor<1x16xf32>
  return %o : tensor<1x16xf32>
}

// -----

func.func @summary_block(%q: tensor<?x16xf32>, %k: tensor<?x8xf32>, %v: tensor<?x8xf32>, %c: !kiln.kv_cache<1, 64, 2, 4, f32, summary = 32>, %p: index) -> tensor<?x16xf32> {
  // expected-error @+1 {{'kiln.attention' op sparse attention blocks of 16 positions on a kv_cache with summary pages of 32}}
  %o = kiln.attention %q, %k, %v, %c, %p {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32, sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.9 : f32, block = 16, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 32>} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32, summary = 32> -> tensor<?x16xf32>
  return %o : tensor<?x16xf32>
}

// -----

// expected-error @+1 {{kv_cache key summaries need a float cache, got 'i8'}}
func.func private @quantized_summaries(!kiln.kv_cache<1, 64, 2, 4, i8, summary = 16>)

// -----

// expected-error @+1 {{kv_cache summary pages must be in [1, 4096] positions, got 5000}}
func.func private @big_summary(!kiln.kv_cache<1, 64, 2, 4, f32, summary = 5000>)

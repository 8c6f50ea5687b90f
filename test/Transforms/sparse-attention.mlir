// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="gamma=0.9 block=16 min-tokens=32 report=true" 2>&1 | FileCheck %s
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-sparse-attention,kiln-batch-step)" | FileCheck %s --check-prefix=STEP
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-sparse-attention,func.func(kiln-memory-plan),kiln-lower-to-plan)" | FileCheck %s --check-prefix=PLAN
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-sparse-attention{mode=antidiag stride=8 block=32},func.func(kiln-memory-plan),kiln-lower-to-plan)" | FileCheck %s --check-prefix=ANTIDIAG
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="mode=antidiag stride=8" | kiln-opt | FileCheck %s --check-prefix=ROUNDTRIP
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="mode=antidiag gamma=0.95" | FileCheck %s --check-prefix=ADGAMMA
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-sparse-attention,kiln-batch-step,func.func(kiln-memory-plan),kiln-lower-to-plan)" | FileCheck %s --check-prefix=STEPPLAN
// kiln-sparse-attention (docs/sparse-attention.md): prefill's attention
// gets the selection's parameters; decode (one row) and the batched step
// stay dense.

// CHECK: remark: kiln-sparse-attention: 1 attention ops sparse (gamma 9.000000e-01, block 16), 0 left dense
// CHECK-LABEL: func.func @prefill
// CHECK: kiln.attention {{.*}}sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.899999976 : f32, block = 16, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 32>
// CHECK-LABEL: func.func @decode
// CHECK-NOT: sparse_attention

// The defaults: gamma 0.95, blocks of 64, one sink block, two local ones,
// no budget limits, dense below 1024 keys. The batched step derived from
// prefill keeps the attribute (its multi-row chunks select; its one-row
// decode rows run dense) and lowers to kiln_k_step_attention_sparse.
// STEP-LABEL: func.func @prefill
// STEP: sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.949999988 : f32, block = 64, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 1024>
// STEP-LABEL: func.func @step
// STEP: kiln.attention {{.*}}sparse = #kiln.sparse_attention<mode = "flex", gamma = 0.949999988 : f32, block = 64
// STEP-SAME: !kiln.paged_kv_cache

// The lowering calls the sparse kernel with the parameters last.
// PLAN-LABEL: func.func @prefill
// PLAN: plan.call_kernel "kiln_k_attention_sparse"
// PLAN-LABEL: func.func @decode
// PLAN: plan.call_kernel "kiln_k_attention"(

// Antidiagonal scoring: the stride is the kernel's last argument (after the
// layer, 0, and the streaming mask, 0).
// ANTIDIAG-LABEL: func.func @prefill
// ANTIDIAG: plan.call_kernel "kiln_k_attention_sparse"({{.*}}, %c0{{[_0-9]*}}, %c0{{[_0-9]*}}, %c8{{[_0-9]*}}) :
// antidiag's gamma (a fraction of the estimated true mass) defaults to
// 0.98; a given one is kept.
// ROUNDTRIP: sparse = #kiln.sparse_attention<mode = "antidiag", gamma = 9.800000e-01 : f32, block = 64, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 1024, stride = 8>
// ADGAMMA: sparse = #kiln.sparse_attention<mode = "antidiag", gamma = 0.949999988 : f32, block = 64, sink = 1, local = 2, min_budget = 0, max_budget = 0, min_tokens = 1024, stride = 16>

// The batched step's sparse chunks: the step kernel with the selection's
// parameters after the window.
// STEPPLAN-LABEL: func.func @step
// STEPPLAN: plan.call_kernel "kiln_k_step_attention_sparse"

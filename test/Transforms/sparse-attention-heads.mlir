// RUN: rm -rf %t && mkdir -p %t
// RUN: %python %S/head_scores_calib.py %t/heads.safetensors --scores 0.5,0.6,0.05,0.02
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="streaming=0.5 calibration=%t/heads.safetensors report=true" 2>&1 | FileCheck %s
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="streaming=0.4 calibration=%t/heads.safetensors report=true" 2>&1 | FileCheck %s --check-prefix=NONE
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="streaming=0.4 calibration=%t/heads.safetensors" 2>&1 | FileCheck %s --check-prefix=WARN
// RUN: %python %S/head_scores_calib.py %t/flip.safetensors --scores 0.01,0.02,0.7,0.3
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-sparse-attention="streaming=0.5 calibration=%t/flip.safetensors" | FileCheck %s --check-prefix=FLIP
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-sparse-attention{streaming=0.5 calibration=%t/heads.safetensors},func.func(kiln-memory-plan),kiln-lower-to-plan)" | FileCheck %s --check-prefix=PLAN
// Head roles (docs/sparse-attention.md): the fraction `streaming` of the
// model's KV heads with the lowest retrieval score (a KV head scores the
// maximum of its query heads: here KV head 0 = max(0.5, 0.6) = 0.6, KV
// head 1 = max(0.05, 0.02) = 0.05) become streaming heads.

// CHECK: remark: kiln-sparse-attention: 1 attention ops sparse (gamma 9.500000e-01, block 64), 0 left dense {{.*}}, 1 streaming KV heads
// CHECK-LABEL: func.func @prefill
// CHECK: sparse = #kiln.sparse_attention<{{.*}}min_tokens = 1024, streaming = [1]>
// CHECK-LABEL: func.func @decode
// CHECK-NOT: sparse_attention

// floor(0.4 * 2) = 0 streaming heads: no `streaming` parameter.
// NONE: 0 streaming KV heads
// NONE: sparse = #kiln.sparse_attention<{{.*}}min_tokens = 1024>}

// WARN: warning: kiln-sparse-attention: streaming=4.000000e-01 of the model's 2 KV heads makes none streaming

// FLIP: sparse = #kiln.sparse_attention<{{.*}}streaming = [0]>

// The kernel takes the heads as a bit mask after min_tokens (1024) and the
// layer (0), before the stride (0): 0b10 = 2.
// PLAN-LABEL: func.func @prefill
// PLAN: plan.call_kernel "kiln_k_attention_sparse"({{.*}}, %c1024{{[_0-9]*}}, %c0{{[_0-9]*}}, %c2{{[_0-9]*}}, %c0{{[_0-9]*}}) :

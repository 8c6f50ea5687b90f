// kiln-batch-step refuses what the batched kernels do not cover, naming the
// op: scaled RoPE, calibration observers, IR already fused, a module
// without @prefill or with a @step already. With required=false the module
// is left without @step and a remark says why (kiln-compile's mode).
// RUN: kiln-opt %s --split-input-file --kiln-batch-step --verify-diagnostics
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-insert-observers,kiln-batch-step)" 2>&1 | FileCheck %s --check-prefix=OBSERVE
// OBSERVE: error: kiln-batch-step: calibration graphs (kiln.observe) run one sequence at a time
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-fuse,kiln-batch-step)" 2>&1 | FileCheck %s --check-prefix=FUSED
// FUSED: error: kiln-batch-step: run before kiln-fuse (found a kiln.fused region in @prefill)
// RUN: not kiln-opt %s --split-input-file --pass-pipeline="builtin.module(kiln-batch-step{required=false})" 2>&1 | FileCheck %s --check-prefix=SOFT
// SOFT: remark: kiln-batch-step: no batched step entry point: RoPE with scaled frequencies (scaling or freq_factors) has no per-row batched kernel yet
// SOFT-NOT: func.func @step
// SOFT: remark: kiln-batch-step: no batched step entry point: the module has no @prefill to derive @step from

func.func @prefill(%tokens: tensor<?xi32>, %pos: index, %cache: !kiln.kv_cache<1, 64, 2, 4, f32>) -> tensor<1x32xf32> {
  %w = arith.constant dense<0.0> : tensor<32x16xf32>
  %e = kiln.embedding %tokens, %w : tensor<?xi32>, tensor<32x16xf32> -> tensor<?x16xf32>
  // expected-error @+1 {{kiln-batch-step: RoPE with scaled frequencies (scaling or freq_factors) has no per-row batched kernel yet}}
  %r = kiln.rope %e, %pos {num_heads = 4 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32, scaling = "linear", scaling_factor = 2.0 : f32} : tensor<?x16xf32>
  %l = kiln.logits %r, %w : tensor<?x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
  return %l : tensor<1x32xf32>
}

// -----

// expected-error @+1 {{kiln-batch-step: the module has no @prefill to derive @step from}}
module {
  func.func @decode(%tokens: tensor<1xi32>, %pos: index, %cache: !kiln.kv_cache<1, 64, 2, 4, f32>) -> tensor<1x32xf32> {
    %l = arith.constant dense<0.0> : tensor<1x32xf32>
    return %l : tensor<1x32xf32>
  }
}

// -----

// expected-error @+1 {{kiln-batch-step: the module already has a symbol @step}}
module {
  func.func @prefill(%tokens: tensor<?xi32>, %pos: index, %cache: !kiln.kv_cache<1, 64, 2, 4, f32>) -> tensor<1x32xf32> {
    %l = arith.constant dense<0.0> : tensor<1x32xf32>
    return %l : tensor<1x32xf32>
  }
  func.func @step() {
    return
  }
}

// -----

// expected-error @+1 {{kiln-batch-step: @prefill must take (tensor<?xi32>, index, !kiln.kv_cache<...>) and return logits}}
func.func @prefill(%tokens: tensor<?xi32>, %pos: index) -> tensor<1x32xf32> {
  %l = arith.constant dense<0.0> : tensor<1x32xf32>
  return %l : tensor<1x32xf32>
}

// -----

func.func @prefill(%tokens: tensor<?xi32>, %pos: index, %cache: !kiln.kv_cache<1, 64, 2, 4, f32>) -> tensor<1x32xf32> {
  %l = arith.constant dense<0.0> : tensor<1x32xf32>
  // expected-error @+1 {{kiln-batch-step: @prefill must return the result of kiln.logits}}
  return %l : tensor<1x32xf32>
}

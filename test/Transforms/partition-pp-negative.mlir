// kiln-partition{pp=M stage=S} refuses what it cannot split: more stages
// than layers, a stage outside the pipeline, a layer whose start it cannot
// find, calibration observers, fused regions.
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-partition="pp=2 stage=0" 2>&1 | FileCheck %s --check-prefix=LAYERS
// LAYERS: error: kiln-partition: pp=2 stages need at least 2 layers; the model has 1
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-partition="pp=2 stage=2" 2>&1 | FileCheck %s --check-prefix=STAGE
// STAGE: error: kiln-partition: needs pp >= 1 and 0 <= stage < pp, got pp=2 stage=2
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-fuse,kiln-partition{pp=2 stage=0})" 2>&1 | FileCheck %s --check-prefix=FUSED
// FUSED: error: kiln-partition: found a kiln.fused region: run kiln-partition before kiln-fuse
// RUN: kiln-opt %s --split-input-file --kiln-partition="pp=2 stage=1" --verify-diagnostics

// Two layers, but layer 1 has no attention_norm to start from.
module {
  kiln.weight @layers.0.w1 : tensor<8x4xf32> {source = #kiln.source<file = "t.bin", tensor = "w1", storage = "f32", shape = [8, 4], offset = 0, bytes = 128>, transforms = []}
  kiln.weight @layers.1.w1 : tensor<8x4xf32> {source = #kiln.source<file = "t.bin", tensor = "w1", storage = "f32", shape = [8, 4], offset = 0, bytes = 128>, transforms = []}
  // expected-error @+1 {{kiln-partition: cannot find where layer 1 starts in @prefill (no kiln.rms_norm of @layers.1.attention_norm)}}
  func.func @prefill(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
    return %x : tensor<?x4xf32>
  }
}

// -----

module {
  kiln.weight @layers.0.w1 : tensor<8x4xf32> {source = #kiln.source<file = "t.bin", tensor = "w1", storage = "f32", shape = [8, 4], offset = 0, bytes = 128>, transforms = []}
  kiln.weight @layers.1.w1 : tensor<8x4xf32> {source = #kiln.source<file = "t.bin", tensor = "w1", storage = "f32", shape = [8, 4], offset = 0, bytes = 128>, transforms = []}
  func.func @prefill(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
    // expected-error @+1 {{kiln-partition: calibration observers (kiln.observe) are not split into pipeline stages: calibrate the whole model}}
    kiln.observe %x {tap = "layers.0.wq.in"} : tensor<?x4xf32>
    return %x : tensor<?x4xf32>
  }
}

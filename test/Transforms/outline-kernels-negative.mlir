// kiln-outline-kernels refuses memory-planned IR (the regions' results would
// have no buffer offsets).
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(func.func(kiln-memory-plan),kiln-outline-kernels)" 2>&1 | FileCheck %s
// CHECK: error: kiln-outline-kernels: 'prefill' is already memory-planned; run kiln-outline-kernels before kiln-memory-plan

// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-quantize-weights{scheme=w3a16})" 2>&1 | FileCheck %s
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-quantize-weights{scheme=w4a16-gptq})" 2>&1 | FileCheck %s --check-prefix=GPTQ

// CHECK: error: unsupported quantization scheme 'w3a16' (implemented: w8a16)
// GPTQ: error: unsupported quantization scheme 'w4a16-gptq' (implemented: w8a16)

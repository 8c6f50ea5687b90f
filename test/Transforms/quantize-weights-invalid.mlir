// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-quantize-weights{scheme=w3a16})" 2>&1 | FileCheck %s
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-quantize-weights{scheme=w4a16-gptq})" 2>&1 | FileCheck %s --check-prefix=GPTQ
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-quantize-weights{scheme=w4a16-gptq calibration=%t.missing})" 2>&1 | FileCheck %s --check-prefix=GPTQFILE
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-quantize-weights{scheme=w4a16-rtn group-size=7})" 2>&1 | FileCheck %s --check-prefix=GROUP
// RUN: not kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-quantize-weights{scheme=w4a16-rtn group-size=0})" 2>&1 | FileCheck %s --check-prefix=GROUP0

// CHECK: error: unsupported quantization scheme 'w3a16' (implemented: w8a16, w4a16-rtn, w4a16-gptq, w8a8)
// GPTQ: error: scheme=w4a16-gptq needs calibration=FILE (create one with `kiln-calibrate MODEL -o FILE`)
// GPTQFILE: error: calibration file {{.*}}.missing: cannot read: {{.*}} (create one with `kiln-calibrate MODEL -o FILE`)
// GROUP: error: unsupported group size 7 for w4a16 (expected a positive even number, e.g. 32, 64 or 128)
// GROUP0: error: unsupported group size 0 for w4a16

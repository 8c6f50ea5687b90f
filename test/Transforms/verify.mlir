// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-verify | FileCheck %s

// A complete model passes unchanged.
// CHECK-LABEL: func.func @prefill
// CHECK: kiln.attention
// CHECK-LABEL: func.func @decode

// RUN: not kiln-opt %s --pass-pipeline="builtin.module(func.func(kiln-memory-plan{max-tokens=-1}))" 2>&1 | FileCheck %s

// A negative bound is a user error, reported against the function.
// CHECK: error: max-tokens must be in [0, 16777216], got -1
func.func @f(%tokens: tensor<1xi32>) {
  return
}

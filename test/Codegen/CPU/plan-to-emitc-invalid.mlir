// RUN: kiln-opt %s --kiln-plan-to-emitc --split-input-file --verify-diagnostics
// RUN: kiln-opt %s --split-input-file --verify-diagnostics --pass-pipeline="builtin.module(kiln-plan-to-emitc{target=cuda})"
// RUN: not kiln-opt %s --split-input-file --pass-pipeline="builtin.module(kiln-plan-to-emitc{target=tpu})" 2>&1 | FileCheck %s --check-prefix=TARGET

// TARGET: error: unknown target 'tpu' (expected cpu or cuda)

// Only what kiln-lower-to-plan produces is emitted; anything else is an
// error at the op, not silently dropped code.
func.func @negative_unknown_op(%n: index, %pos: index) {
  // expected-error @+1 {{'arith.addi' op cannot be emitted for the}}
  %sum = arith.addi %n, %pos : index
  return
}

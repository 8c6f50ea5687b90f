// RUN: kiln-opt %s --canonicalize --split-input-file | FileCheck %s

// The FFN gate mul(silu(gate), up) becomes one kiln.swiglu.
// CHECK-LABEL: func.func @fuse_swiglu
// CHECK-SAME: (%[[GATE:.*]]: tensor<?x24xf32>, %[[UP:.*]]: tensor<?x24xf32>)
// CHECK-NEXT: %[[R:.*]] = kiln.swiglu %[[GATE]], %[[UP]] : tensor<?x24xf32>
// CHECK-NEXT: return %[[R]]
func.func @fuse_swiglu(%gate: tensor<?x24xf32>, %up: tensor<?x24xf32>) -> tensor<?x24xf32> {
  %s = kiln.silu %gate : tensor<?x24xf32>
  %m = kiln.mul %s, %up : tensor<?x24xf32>
  return %m : tensor<?x24xf32>
}

// -----

// The silu may be either operand of the product.
// CHECK-LABEL: func.func @fuse_swiglu_commuted
// CHECK-SAME: (%[[GATE:.*]]: tensor<1x24xf32>, %[[UP:.*]]: tensor<1x24xf32>)
// CHECK: kiln.swiglu %[[GATE]], %[[UP]]
// CHECK-NOT: kiln.silu
func.func @fuse_swiglu_commuted(%gate: tensor<1x24xf32>, %up: tensor<1x24xf32>) -> tensor<1x24xf32> {
  %s = kiln.silu %gate : tensor<1x24xf32>
  %m = kiln.mul %up, %s : tensor<1x24xf32>
  return %m : tensor<1x24xf32>
}

// -----

// A product of two plain tensors is not a gate.
// CHECK-LABEL: func.func @negative_fuse_swiglu_no_silu
// CHECK: kiln.mul
// CHECK-NOT: kiln.swiglu
func.func @negative_fuse_swiglu_no_silu(%a: tensor<?x24xf32>, %b: tensor<?x24xf32>) -> tensor<?x24xf32> {
  %m = kiln.mul %a, %b : tensor<?x24xf32>
  return %m : tensor<?x24xf32>
}

// -----

// The silu has a second user, so it stays; the product still fuses.
// CHECK-LABEL: func.func @fuse_swiglu_silu_multi_use
// CHECK-DAG: %[[S:.*]] = kiln.silu
// CHECK-DAG: kiln.swiglu
// CHECK: return %[[S]]
func.func @fuse_swiglu_silu_multi_use(%gate: tensor<?x24xf32>, %up: tensor<?x24xf32>) -> (tensor<?x24xf32>, tensor<?x24xf32>) {
  %s = kiln.silu %gate : tensor<?x24xf32>
  %m = kiln.mul %s, %up : tensor<?x24xf32>
  return %s, %m : tensor<?x24xf32>, tensor<?x24xf32>
}

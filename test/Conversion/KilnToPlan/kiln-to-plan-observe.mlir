// RUN: kiln-opt %S/../../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-insert-observers,func.func(kiln-memory-plan),kiln-lower-to-plan)" | FileCheck %s
// RUN: kiln-opt %S/../../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-insert-observers,kiln-outline-kernels,func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize,kiln-plan-to-emitc)" -o %t.mlir
// RUN: mlir-translate --mlir-to-cpp %t.mlir | FileCheck %s --check-prefix=CPP
// The emitted C++ compiles against the runtime's kernel ABI header.
// RUN: mlir-translate --mlir-to-cpp %t.mlir -o %t.cpp
// RUN: c++ -std=c++17 -fsyntax-only -Wall -Werror -I%kiln_src_root/runtime/include %t.cpp

// kiln.observe -> kiln_k_observe(x, rows, cols, tap index), the index being
// the tap's position in kiln.observe_taps; the observed buffer is the arena
// view the linear reads too.
// CHECK-LABEL: func.func @prefill
// CHECK-SAME: (%[[N:.*]]: index, %[[POS:.*]]: index)
// CHECK: plan.call_kernel "kiln_k_rms_norm"(%{{[0-9]+}}, %{{[0-9]+}}, %[[X:[0-9]+]],
// CHECK: %[[C16:.*]] = arith.constant 16 : index
// CHECK: %[[TAP0:.*]] = arith.constant 0 : index
// CHECK: plan.call_kernel "kiln_k_observe"(%[[X]], %[[N]], %[[C16]], %[[TAP0]])
// CHECK-NEXT: plan.arena_view
// CHECK: plan.call_kernel "kiln_k_linear"(%[[X]],
// The pre-RoPE key (tap 1, layers.0.key) is the buffer the key's rope reads.
// CHECK: plan.call_kernel "kiln_k_rope"
// CHECK: %[[C8:.*]] = arith.constant 8 : index
// CHECK: %[[TAP1:.*]] = arith.constant 1 : index
// CHECK: plan.call_kernel "kiln_k_observe"(%[[K:[0-9]+]], %[[N]], %[[C8]], %[[TAP1]]) : memref<?x8xf32>
// CHECK: plan.call_kernel "kiln_k_rope"(%[[K]],
// CHECK: plan.call_kernel "kiln_k_attention"
// CHECK: %[[TAP2:.*]] = arith.constant 2 : index
// CHECK: plan.call_kernel "kiln_k_observe"({{.*}}, %[[N]], %{{.*}}, %[[TAP2]])
// CHECK: %[[TAP3:.*]] = arith.constant 3 : index
// CHECK: plan.call_kernel "kiln_k_observe"({{.*}}, %[[N]], %{{.*}}, %[[TAP3]])
// CHECK: plan.call_kernel "kiln_k_swiglu"
// CHECK: %[[C24:.*]] = arith.constant 24 : index
// CHECK: %[[TAP4:.*]] = arith.constant 4 : index
// CHECK: plan.call_kernel "kiln_k_observe"({{.*}}, %[[N]], %[[C24]], %[[TAP4]])
// Decode observes its single row with the same tap indices.
// CHECK-LABEL: func.func @decode
// CHECK-COUNT-5: plan.call_kernel "kiln_k_observe"
// CHECK-NOT: plan.call_kernel "kiln_k_observe"

// On the CPU target the observer kernel gets the execution context first.
// CPP: extern "C" void kiln_prefill(kiln_exec_ctx* [[CTX:v[0-9]+]], int64_t [[N:v[0-9]+]], int64_t
// CPP: kiln_k_observe([[CTX]], {{v[0-9]+}}, [[N]],
// CPP: kiln_linear_prefill_0(

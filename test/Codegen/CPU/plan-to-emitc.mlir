// RUN: kiln-opt %S/../../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize,kiln-plan-to-emitc)" | FileCheck %s
// RUN: kiln-opt %S/../../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize,kiln-plan-to-emitc)" -o %t.mlir
// RUN: mlir-translate --mlir-to-cpp %t.mlir | FileCheck %s --check-prefix=CPP
// The emitted C++ compiles against the runtime's kernel ABI header.
// RUN: mlir-translate --mlir-to-cpp %t.mlir -o %t.cpp
// RUN: c++ -std=c++17 -fsyntax-only -Wall -Werror -I%kiln_src_root/runtime/include %t.cpp

// CHECK: emitc.include <"stdint.h">
// CHECK: emitc.include "kiln_rt/kernel_abi.h"
// CHECK: emitc.func @kiln_prefill(%[[CTX:.*]]: !emitc.ptr<!emitc.opaque<"kiln_exec_ctx">>, %[[N:.*]]: i64, %[[POS:.*]]: i64)
// CHECK-SAME: specifiers = ["extern \22C\22"]
// CHECK: %[[TOK:.*]] = call_opaque "KILN_TOKENS"(%[[CTX]])
// CHECK: call_opaque "KILN_WEIGHT"(%[[CTX]]) {args = [0 : index, 0, #emitc.opaque<"float">]}
// CHECK: call_opaque "kiln_k_embedding"(%[[TOK]], %[[N]],
// CHECK: call_opaque "KILN_KV"(%[[CTX]]) {args = [0 : index, 0, #emitc.opaque<"float">]}
// Values of layer 0 start after its 64 x 8 f32 keys (byte offsets).
// CHECK: call_opaque "KILN_KV"(%[[CTX]]) {args = [0 : index, 2048, #emitc.opaque<"float">]}
// CHECK: call_opaque "kiln_k_attention"
// CHECK: call_opaque "KILN_LOGITS"(%[[CTX]])
// CHECK: call_opaque "KILN_ROW"
// CHECK: return
// CHECK: emitc.func @kiln_decode
// CHECK-NOT: plan.
// CHECK-NOT: func.func

// CPP: #include "kiln_rt/kernel_abi.h"
// CPP: #define KILN_ARENA(ctx, off, T) ((T *)((ctx)->arena + (off)))
// CPP: extern "C" void kiln_prefill(kiln_exec_ctx* [[CTX:v[0-9]+]], int64_t [[N:v[0-9]+]], int64_t [[POS:v[0-9]+]]) {
// CPP: kiln_k_embedding(
// CPP: kiln_k_rope({{.*}}, [[POS]], {{.*}});
// CPP: kiln_k_attention(
// CPP: kiln_k_swiglu(
// CPP: float* [[LOGITS:v[0-9]+]] = KILN_LOGITS([[CTX]]);
// CPP: kiln_k_linear({{.*}}, [[LOGITS]],
// CPP: return;
// CPP-LABEL: extern "C" void kiln_decode(

// RUN: kiln-opt %S/../../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-outline-kernels,func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize,kiln-plan-to-emitc)" | FileCheck %s
// RUN: kiln-opt %S/../../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-outline-kernels,func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize,kiln-plan-to-emitc)" -o %t.mlir
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
// CHECK: %[[LOGITS:.*]] = call_opaque "KILN_LOGITS"(%[[CTX]])
// CHECK: call_opaque "kiln_logits_prefill_{{[0-9]+}}"(%{{.*}}, %{{.*}}, %[[LOGITS]], %[[N]])
// CHECK: return
// CHECK: emitc.func @kiln_decode
// CHECK-NOT: plan.
// CHECK-NOT: func.func

// CPP: #include "kiln_rt/kernel_abi.h"
// CPP: #define KILN_ARENA(ctx, off, T) ((T *)((ctx)->arena + (off)))
// Trace sites (kernel_abi.h kiln_trace_site), one per kernel call in call
// order: kernel, op kind, IR location, bytes fixed / per token / per cached
// position, FLOPs fixed / per token / per (query, key) pair, window, per-token.
// The 16x16 f32 wq: 1024 weight bytes, 64 + 64 activation bytes and
// 2 * 16 * 16 FLOPs per token. Attention: q, k, v, out rows per token, K and
// V rows (8 floats each) per cached position, 4 * 16 FLOPs per pair.
// CPP: static const kiln_trace_site kiln_trace_sites_prefill[] = {
// CPP-NEXT: {"kiln_k_embedding", "embedding", "tiny-llama.mlir:18:11", 0, 132, 0, 0, 0, 0, 0, 1},
// CPP-NEXT: {"kiln_k_rms_norm", "rms_norm", "tiny-llama.mlir:20:10", 64, 128, 0, 0, 64, 0, 0, 1},
// CPP-NEXT: {"kiln_linear_prefill_0", "linear", "tiny-llama.mlir:22:10", 1024, 128, 0, 0, 512, 0, 0, 1},
// CPP: {"kiln_k_attention", "attention", "tiny-llama.mlir:29:12", 0, 192, 64, 0, 0, 64, 0, 1},
// The classifier reads one hidden row whatever n is: 2048 weight bytes,
// 64 + 128 bytes of hidden row and logits, 2 * 16 * 32 FLOPs, all fixed.
// CPP: {"kiln_logits_prefill_10", "logits", "tiny-llama.mlir:46:15", 2240, 0, 0, 1024, 0, 0, 0, 0},
// CPP: extern "C" void kiln_prefill(kiln_exec_ctx* [[CTX:v[0-9]+]], int64_t [[N:v[0-9]+]], int64_t [[POS:v[0-9]+]]) {
// Every kernel call is bracketed by the trace macros with its site index.
// CPP: uint64_t [[T0:v[0-9]+]] = KILN_TRACE_BEGIN([[CTX]]);
// CPP-NEXT: kiln_k_embedding(
// CPP-NEXT: KILN_TRACE_END([[CTX]], kiln_trace_sites_prefill, 0, [[T0]], [[N]], [[POS]]);
// CPP: kiln_k_rope({{.*}}, [[POS]], {{.*}});
// CPP: kiln_k_attention(
// CPP: kiln_swiglu_prefill_7(
// CPP: float* [[LOGITS:v[0-9]+]] = KILN_LOGITS([[CTX]]);
// CPP: kiln_logits_prefill_10({{.*}}, [[LOGITS]], [[N]]);
// CPP: return;
// CPP-LABEL: extern "C" void kiln_decode(

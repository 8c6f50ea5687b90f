// RUN: kiln-opt %S/../../Inputs/tiny-quantized.mlir --pass-pipeline="builtin.module(kiln-outline-kernels,func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize,kiln-plan-to-emitc)" -o %t.mlir
// RUN: mlir-translate --mlir-to-cpp %t.mlir | FileCheck %s
// The calls type-check against the kernel ABI header (argument counts and
// pointer types of the new signatures).
// RUN: mlir-translate --mlir-to-cpp %t.mlir -o %t.cpp
// RUN: c++ -std=c++17 -fsyntax-only -Wall -Werror -I%kiln_src_root/runtime/include %t.cpp

// CHECK: #if KILN_ABI_VERSION != {{[0-9]+}}
// W8A16 per channel and group-wise: generated kernels (kiln-outline-kernels)
// whose weight descriptor carries the group size.
// CHECK: static void kiln_quantized_linear_prefill_0(const float *a0, const int8_t *a1, const float *a2, float *r0, int64_t n) {
// CHECK: e.w.kind = KILN_WEIGHT_W8;
// CHECK: e.w.group_size = 0;
// CHECK: static void kiln_quantized_linear_prefill_1(const float *a0, const int8_t *a1, const float *a2, float *r0, int64_t n) {
// CHECK: e.w.kind = KILN_WEIGHT_W8;
// CHECK: e.w.group_size = 6;
// CHECK: extern "C" void kiln_prefill(kiln_exec_ctx* {{v[0-9]+}}, int64_t [[N:v[0-9]+]], int64_t [[POS:v[0-9]+]])
// CHECK-DAG: float [[STATIC:v[0-9]+]] = 2.500000000e-01f;
// CHECK-DAG: float [[DYN:v[0-9]+]] = 0.0e+00f;
// CHECK: kiln_quantized_linear_prefill_0({{v[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}}, [[N]]);
// CHECK: kiln_quantized_linear_prefill_1({{v[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}}, [[N]]);
// W8A8, dynamic per-token scales: act_scale 0.
// CHECK: kiln_k_linear_w8a8({{v[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}}, [[N]], {{v[0-9]+}}, {{v[0-9]+}}, [[DYN]]);
// The FP8 cache is addressed as raw E4M3 bytes, its scales as float.
// CHECK: uint8_t* [[KC:v[0-9]+]] = KILN_KV({{v[0-9]+}}, 0, uint8_t);
// CHECK: uint8_t* [[VC:v[0-9]+]] = KILN_KV({{v[0-9]+}}, 512, uint8_t);
// CHECK: float* [[KS:v[0-9]+]] = KILN_KV({{v[0-9]+}}, 1024, float);
// CHECK: float* [[VS:v[0-9]+]] = KILN_KV({{v[0-9]+}}, 1536, float);
// CHECK: kiln_k_attention_kvf8({{v[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}}, [[KC]], [[VC]], [[KS]], [[VS]], {{v[0-9]+}}, [[N]], [[POS]],
// W8A8 with the static per-tensor scale.
// CHECK: kiln_k_linear_w8a8({{v[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}}, [[N]], {{v[0-9]+}}, {{v[0-9]+}}, [[STATIC]]);

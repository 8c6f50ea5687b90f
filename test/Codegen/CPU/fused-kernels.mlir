// Generated fused kernels (kiln-fuse -> plan.fused_kernel -> C++): the CPU
// template instantiated per region, for float and quantized weights; the
// emitted C++ compiles against the kernel ABI header.
// RUN: kiln-opt %S/../../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-fuse,kiln-outline-kernels,func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize,kiln-plan-to-emitc)" | mlir-translate --mlir-to-cpp -o %t.f32.cpp
// RUN: FileCheck %s --input-file=%t.f32.cpp
// RUN: c++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -I%kiln_src_root/runtime/include %t.f32.cpp
// RUN: kiln-opt %S/../../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-quantize-weights{scheme=w4a16-rtn group-size=8},kiln-fuse,kiln-outline-kernels,func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize,kiln-plan-to-emitc)" | mlir-translate --mlir-to-cpp -o %t.w4.cpp
// RUN: FileCheck %s --check-prefix=W4 --input-file=%t.w4.cpp
// RUN: c++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -I%kiln_src_root/runtime/include %t.w4.cpp
// RUN: kiln-opt %S/../../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-quantize-weights{scheme=w8a16},kiln-fuse,kiln-outline-kernels,func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize,kiln-plan-to-emitc)" | mlir-translate --mlir-to-cpp | FileCheck %s --check-prefix=W8
// W8A8 linears and W8A16 linears of different group sizes are not fused.
// RUN: kiln-opt %S/../../Inputs/tiny-quantized.mlir --pass-pipeline="builtin.module(kiln-fuse{report=true})" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOFUSE
// NOFUSE: kiln-fuse 'prefill': kernel ops 7 -> 7; regions with horizontal 0, prologue 0, epilogue 0, elementwise 0
// The CUDA template of the same regions: test/Codegen/CUDA/fused-kernels-cuda.test.

// Q, K, V: one tile of the concatenated rows, each column range stored to
// its own buffer, RoPE applied to Q and K with the pair partner read from the
// tile; the attention norm computed once per call as prologue.
// CHECK: // kiln_fused_prefill_0: kiln.fused region (families: horizontal prologue epilogue)
// CHECK: static void kiln_fused_prefill_0_tile(void *p, int64_t j0, int64_t j1) {
// CHECK: kiln_k_linear_tile(&e.w, e.x, rows, 16, s0, s1, c0, tw);
// CHECK: const int64_t lo = s0 > 0 ? s0 : 0, hi = s1 < 16 ? s1 : 16;
// CHECK: const float e0 = kiln_rope_elem(seg0, c0[t * tw + ((j ^ 1) - s0)], col, 4, 4, e.cs + t * 4);
// CHECK: e.r1[t * 16 + col] = e0;
// CHECK: const int64_t lo = s0 > 16 ? s0 : 16, hi = s1 < 24 ? s1 : 24;
// CHECK: const float e1 = kiln_rope_elem(seg1, c0[t * tw + ((j ^ 1) - s0)], col, 4, 4, e.cs + t * 4);
// CHECK: e.r2[t * 8 + col] = e1;
// CHECK: const int64_t lo = s0 > 24 ? s0 : 24, hi = s1 < 32 ? s1 : 32;
// CHECK: e.r0[t * 8 + col] = seg2;
// CHECK: static void kiln_fused_prefill_0(const float *a0, const float *a1, const float *a2, int64_t a3, float *r0, float *r1, float *r2, int64_t n) {
// CHECK: kiln_k_rms_norm(a0, a1, xn, rows, 16, 0x1.4f8b58p-17f);
// CHECK: kiln_k_rope_table(cs, rows, a3, 4, 4, 0x1.388p+13f);
// CHECK: e.w.kind = KILN_WEIGHT_F32;
// CHECK: kiln_k_parallel_for(32, rows == 1 ? 16 : 128, rows * 16 * 32, kiln_fused_prefill_0_tile, &e);
// Output projection + residual.
// CHECK: // kiln_fused_prefill_1: kiln.fused region (families: epilogue)
// CHECK: const float e0 = e.a2[t * 16 + col] + seg0;
// CHECK: e.r0[t * 16 + col] = e0;
// Gate and up: the same rows of both column ranges per tile, SwiGLU applied.
// CHECK: // kiln_fused_prefill_2: kiln.fused region (families: horizontal prologue epilogue)
// CHECK: kiln_k_linear_tile(&e.w, e.x, rows, 16, 0 + s0, 0 + s1, c0, tw);
// CHECK: kiln_k_linear_tile(&e.w, e.x, rows, 16, 24 + s0, 24 + s1, c1, tw);
// CHECK: const float e0 = kiln_swiglu(seg0, seg1);
// CHECK: e.r0[t * 24 + col] = e0;
// CHECK: kiln_k_parallel_for(24, rows == 1 ? 16 : 128, rows * 16 * 48, kiln_fused_prefill_2_tile, &e);
// The entry point calls the generated kernels between trace brackets.
// CHECK: extern "C" void kiln_prefill(
// CHECK: KILN_TRACE_BEGIN
// CHECK: kiln_fused_prefill_0(
// CHECK: KILN_TRACE_END
// The trace site names the kernel, the region's op kinds and the fused
// ops' locations; bytes: the weights (2112) plus 192 per token (input 64,
// Q 64, K 32, V 32); FLOPs per token: norm 4 * 16 + linear 2 * 16 * 32 +
// RoPE 3 * (16 + 8).
// RUN: FileCheck %s --check-prefix=SITES --input-file=%t.f32.cpp
// SITES: {"kiln_fused_prefill_0", "rms_norm+linear+rope", "tiny-llama.mlir:20:10+tiny-llama.mlir:22:10+tiny-llama.mlir:24:10+tiny-llama.mlir:26:10+tiny-llama.mlir:27:11+tiny-llama.mlir:28:11", 2112, 192, 0, 0, 1160, 0, 0, 1},
// SITES: {"kiln_fused_prefill_2", "rms_norm+linear+swiglu",

// W4A16: packed nibbles with scales and zero points, group 8.
// W4: e.w.kind = KILN_WEIGHT_W4;
// W4-NEXT: e.w.data = a2;
// W4-NEXT: e.w.scales = a3;
// W4-NEXT: e.w.zeros = a4;
// W4-NEXT: e.w.group_size = 8;

// W8A16: int8 per channel.
// W8: e.w.kind = KILN_WEIGHT_W8;
// W8-NEXT: e.w.data = a2;
// W8-NEXT: e.w.scales = a3;
// W8-NEXT: e.w.group_size = 0;

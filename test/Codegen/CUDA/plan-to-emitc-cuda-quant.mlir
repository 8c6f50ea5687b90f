// RUN: kiln-opt %s --pass-pipeline="builtin.module(kiln-plan-to-emitc{target=cuda})" -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: mlir-translate --mlir-to-cpp %t.mlir | FileCheck %s --check-prefix=CU
// The emitted CUDA C++ compiles against KilnKernels.cuh for sm_80 and sm_90a.
// RUN: %if nvcc %{ mlir-translate --mlir-to-cpp %t.mlir -o %t.cu && /usr/local/cuda/bin/nvcc -std=c++17 -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a -c -I%kiln_src_root/runtime/include -I%kiln_src_root/codegen/CUDA %t.cu -o %t.o %}
// RUN: %if nvcc %{ %python -c "import sys; d = open(sys.argv[1], 'rb').read(); print('archs:', *[a for a in ('sm_80', 'sm_90a') if a.encode() in d])" %t.o | FileCheck %s --check-prefix=ELF %}
// RUN: %if nvcc %{ nm -C %t.o | FileCheck %s --check-prefix=SYMS %}

// Hand-written plan IR with the quantized kernel calls kiln-lower-to-plan
// emits (kernel_abi.h): group-wise W8A16 (trailing group_size), SmoothQuant
// W8A8 per token (act_scale 0) and static per tensor (act_scale > 0), and
// attention over an FP8 E4M3 KV cache (byte cache views, float scales).
// The cuda target maps each to its context-first kiln_cuda_* wrapper.
// The plan dialect's buffers do not admit f8E4M3FN element types yet, so the
// FP8 codes are viewed as i8 here (int8_t*; kiln_cuda_attention_kvf8 takes
// int8_t or uint8_t code pointers); an f8E4M3FN view is emitted as uint8_t.
module attributes {kiln.model = {n_heads = 4 : i64, head_dim = 8 : i64, max_seq_len = 16 : i64, vocab_size = 32 : i64, dim = 64 : i64, hidden_dim = 64 : i64}} {
  plan.weight @wq8 : memref<16x64xi8> {offset = 0 : i64}
  plan.weight @wq8_scales : memref<16x2xf32> {offset = 1024 : i64}
  plan.weight @wa8 : memref<16x64xi8> {offset = 1280 : i64}
  plan.weight @wa8_scales : memref<16xf32> {offset = 2304 : i64}
  func.func @prefill(%n: index, %pos: index) attributes {plan.max_tokens = 8 : i64} {
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %c8 = arith.constant 8 : index
    %c16 = arith.constant 16 : index
    %c32 = arith.constant 32 : index
    %c64 = arith.constant 64 : index
    %per_token = arith.constant 0.0 : f32
    %static = arith.constant 0.03125 : f32
    %scale = arith.constant 0.353553385 : f32
    %x = plan.arena_view [0] (%n) : memref<?x64xbf16>
    %y = plan.arena_view [1024] (%n) : memref<?x16xbf16>
    %q = plan.arena_view [2048] (%n) : memref<?x32xbf16>
    %att = plan.arena_view [3072] (%n) : memref<?x32xbf16>
    %wq8 = plan.weight_ref @wq8 : memref<16x64xi8>
    %wq8s = plan.weight_ref @wq8_scales : memref<16x2xf32>
    %wa8 = plan.weight_ref @wa8 : memref<16x64xi8>
    %wa8s = plan.weight_ref @wa8_scales : memref<16xf32>
    plan.call_kernel "kiln_k_linear_w8a16"(%x, %wq8, %wq8s, %y, %n, %c64, %c16, %c32) : memref<?x64xbf16>, memref<16x64xi8>, memref<16x2xf32>, memref<?x16xbf16>, index, index, index, index
    plan.call_kernel "kiln_k_linear_w8a8"(%x, %wa8, %wa8s, %y, %n, %c64, %c16, %per_token) : memref<?x64xbf16>, memref<16x64xi8>, memref<16xf32>, memref<?x16xbf16>, index, index, index, f32
    plan.call_kernel "kiln_k_linear_w8a8"(%x, %wa8, %wa8s, %y, %n, %c64, %c16, %static) : memref<?x64xbf16>, memref<16x64xi8>, memref<16xf32>, memref<?x16xbf16>, index, index, index, f32
    %kc = plan.kv_cache_view layer 0 part 0 offset 0 : memref<16x16xi8>
    %vc = plan.kv_cache_view layer 0 part 1 offset 256 : memref<16x16xi8>
    %ks = plan.kv_cache_view layer 0 part 2 offset 512 : memref<16x2xf32>
    %vs = plan.kv_cache_view layer 0 part 3 offset 640 : memref<16x2xf32>
    plan.call_kernel "kiln_k_attention_kvf8"(%q, %y, %y, %kc, %vc, %ks, %vs, %att, %n, %pos, %c4, %c2, %c8, %c16, %scale) : memref<?x32xbf16>, memref<?x16xbf16>, memref<?x16xbf16>, memref<16x16xi8>, memref<16x16xi8>, memref<16x2xf32>, memref<16x2xf32>, memref<?x32xbf16>, index, index, index, index, index, index, f32
    return
  }
}

// CHECK: emitc.func @kiln_prefill(%[[CTX:.*]]: !emitc.ptr<!emitc.opaque<"kiln_cuda_ctx">>
// CHECK: call_opaque "KILN_WEIGHT"(%[[CTX]]) {args = [0 : index, 0, #emitc.opaque<"int8_t">]} : {{.*}} -> !emitc.ptr<i8>
// CHECK: call_opaque "kiln_cuda_linear_w8a16"(%[[CTX]],
// CHECK: call_opaque "kiln_cuda_linear_w8a8"(%[[CTX]],
// CHECK: call_opaque "KILN_KV"(%[[CTX]]) {args = [0 : index, 0, #emitc.opaque<"int8_t">]} : {{.*}} -> !emitc.ptr<i8>
// CHECK: call_opaque "kiln_cuda_attention_kvf8"(%[[CTX]],

// CU: extern "C" void kiln_prefill(kiln_cuda_ctx* [[CTX:v[0-9]+]], int64_t [[N:v[0-9]+]], int64_t [[POS:v[0-9]+]]) {
// CU-DAG: int64_t [[C16:v[0-9]+]] = 16;
// CU-DAG: int64_t [[C32:v[0-9]+]] = 32;
// CU-DAG: int64_t [[C64:v[0-9]+]] = 64;
// CU-DAG: float [[PERTOKEN:v[0-9]+]] = 0.0e+00f;
// CU-DAG: float [[STATIC:v[0-9]+]] = 3.125000000e-02f;
// CU: __nv_bfloat16* [[X:v[0-9]+]] = KILN_ARENA([[CTX]], 0, __nv_bfloat16);
// CU: __nv_bfloat16* [[Y:v[0-9]+]] = KILN_ARENA([[CTX]], 1024, __nv_bfloat16);
// CU: int8_t* [[WQ8:v[0-9]+]] = KILN_WEIGHT([[CTX]], 0, int8_t);
// CU: float* [[WQ8S:v[0-9]+]] = KILN_WEIGHT([[CTX]], 1024, float);
// CU: int8_t* [[WA8:v[0-9]+]] = KILN_WEIGHT([[CTX]], 1280, int8_t);
// CU: float* [[WA8S:v[0-9]+]] = KILN_WEIGHT([[CTX]], 2304, float);
// CU: kiln_cuda_linear_w8a16([[CTX]], [[X]], [[WQ8]], [[WQ8S]], [[Y]], [[N]], [[C64]], [[C16]], [[C32]]);
// CU: kiln_cuda_linear_w8a8([[CTX]], [[X]], [[WA8]], [[WA8S]], [[Y]], [[N]], [[C64]], [[C16]], [[PERTOKEN]]);
// CU: kiln_cuda_linear_w8a8([[CTX]], [[X]], [[WA8]], [[WA8S]], [[Y]], [[N]], [[C64]], [[C16]], [[STATIC]]);
// CU: int8_t* [[KC:v[0-9]+]] = KILN_KV([[CTX]], 0, int8_t);
// CU: int8_t* [[VC:v[0-9]+]] = KILN_KV([[CTX]], 256, int8_t);
// CU: float* [[KS:v[0-9]+]] = KILN_KV([[CTX]], 512, float);
// CU: float* [[VS:v[0-9]+]] = KILN_KV([[CTX]], 640, float);
// CU: kiln_cuda_attention_kvf8([[CTX]], {{v[0-9]+}}, [[Y]], [[Y]], [[KC]], [[VC]], [[KS]], [[VS]], {{v[0-9]+}}, [[N]], [[POS]],
// The plan info counts the FP8 cache as bytes: 640 + 16 * 2 * 4.
// CU: out->kv_cache_bytes = 768;

// ELF: archs: sm_80 sm_90a

// The object holds the new kernels (host stubs of their __global__s).
// SYMS-DAG: kiln_cuda_detail::gemvKernel<kiln_cuda_detail::W8GroupRows<__nv_bfloat16>, __nv_bfloat16>
// SYMS-DAG: kiln_cuda_detail::linearW8TiledKernel<__nv_bfloat16, __nv_bfloat16>
// SYMS-DAG: kiln_cuda_detail::actQuantKernel<__nv_bfloat16>
// SYMS-DAG: kiln_cuda_detail::gemvW8A8Kernel<__nv_bfloat16>
// SYMS-DAG: kiln_cuda_detail::linearW8A8TiledKernel<__nv_bfloat16>
// SYMS-DAG: kiln_cuda_detail::kvAppendFp8Kernel<__nv_bfloat16, kiln_cuda_detail::RowsContiguous>
// SYMS-DAG: kiln_cuda_detail::attnPrefillKernel<__nv_bfloat16, 32, kiln_cuda_detail::KvFp8, false>
// SYMS-DAG: kiln_cuda_detail::attnDecodeSplitKernel<__nv_bfloat16, 32, kiln_cuda_detail::KvFp8, false>

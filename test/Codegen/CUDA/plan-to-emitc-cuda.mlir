// RUN: kiln-opt %s --pass-pipeline="builtin.module(func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize,kiln-plan-to-emitc{target=cuda})" -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: mlir-translate --mlir-to-cpp %t.mlir | FileCheck %s --check-prefix=CU
// RUN: %if nvcc %{ mlir-translate --mlir-to-cpp %t.mlir -o %t.cu && /usr/local/cuda/bin/nvcc -std=c++17 -arch=sm_90a -c -I%kiln_src_root/runtime/include -I%kiln_src_root/codegen/CUDA %t.cu -o %t.o %}

// A one-layer f16 model: f16 buffers are `__half`, kernels become the
// context-first CUDA launch wrappers, logits stay float.
module attributes {kiln.model = {n_heads = 2 : i64, head_dim = 4 : i64, max_seq_len = 16 : i64, vocab_size = 32 : i64, dim = 8 : i64, hidden_dim = 8 : i64}} {
  kiln.weight @emb : tensor<32x8xf16> {source = #kiln.source<file = "m.gguf", tensor = "emb", storage = "f16", shape = [32, 8], offset = 0, bytes = 512>, transforms = [#kiln.transform<"dequantize", {}>]}
  func.func @decode(%tokens: tensor<1xi32>, %pos: index, %cache: !kiln.kv_cache<1, 16, 2, 4, f16>) -> tensor<1x32xf32> attributes {kiln.max_tokens = 1 : i64} {
    %emb = kiln.weight_ref @emb : tensor<32x8xf16>
    %h = kiln.embedding %tokens, %emb : tensor<1xi32>, tensor<32x8xf16> -> tensor<1x8xf16>
    %a = kiln.attention %h, %h, %h, %cache, %pos {layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<1x8xf16>, tensor<1x8xf16>, tensor<1x8xf16>, !kiln.kv_cache<1, 16, 2, 4, f16> -> tensor<1x8xf16>
    %logits = kiln.logits %a, %emb : tensor<1x8xf16>, tensor<32x8xf16> -> tensor<1x32xf32>
    return %logits : tensor<1x32xf32>
  }
}

// CHECK: emitc.include "kiln_rt/cuda_abi.h"
// CHECK: emitc.func @kiln_decode(%[[CTX:.*]]: !emitc.ptr<!emitc.opaque<"kiln_cuda_ctx">>
// CHECK: call_opaque "KILN_WEIGHT"(%[[CTX]]) {{.*}} -> !emitc.ptr<!emitc.opaque<"__half">>
// CHECK: call_opaque "kiln_cuda_embedding"(%[[CTX]],

// CU: static const int64_t kKilnVocab = 32;
// CU: extern "C" void kiln_decode(kiln_cuda_ctx* [[CTX:v[0-9]+]],
// CU: __half* {{v[0-9]+}} = KILN_KV([[CTX]], 0, __half);
// CU: __half* {{v[0-9]+}} = KILN_KV([[CTX]], 256, __half);
// CU: kiln_cuda_attention([[CTX]],
// CU: float* [[LOGITS:v[0-9]+]] = KILN_LOGITS([[CTX]]);
// CU: kiln_cuda_linear([[CTX]], {{v[0-9]+}}, {{v[0-9]+}}, [[LOGITS]],

//===- KilnKernels.cuh - CUDA kernel library of emitted models -*- CUDA -*-===//
//
// The CUDA kernels that `--target=cuda` artifacts run. Codegen copies this
// header and its family headers (KilnCudaCommon.cuh: sizes, errors, element
// types, reductions; KilnCudaPointwise.cuh: embedding, RMSNorm, RoPE,
// elementwise; KilnCudaLinear.cuh: GEMV and cuBLASLt; KilnCudaQuantLinear.cuh:
// W8A16, W8A8, W4A16; KilnCudaAttention.cuh; KilnCudaSampling.cuh;
// KilnCudaBlocks.cuh: GGML block formats; KilnCudaHost.cuh: the host
// wrappers; KilnCudaFused.cuh: the templates of generated fused kernels;
// KilnCudaStep.cuh: the batched step's paged-cache kernels;
// KilnCudaSparse.cuh: dynamic block-sparse prefill and Quest decode)
// next to the emitted model.cu, which includes this one once; nvcc
// compiles them for sm_80 and sm_90a into model.so. Self-contained: they
// include only CUDA runtime, cuBLASLt and CCCL headers, the C++ standard
// library, the runtime contract "kiln_rt/cuda_abi.h", the GGML block codec
// "kiln_rt/block_formats.h" and the RoPE scaling rules
// "kiln_rt/rope_scaling.h".
//
// Semantics: every kernel computes the math of its CPU twin in
// runtime/include/kiln_rt/kernel_abi.h (reference implementations in
// runtime/src/cpu/Kernels.cpp): same formulas, same order of the float
// operations where it matters (RMSNorm, RoPE angles, SiLU), float accumulation
// everywhere. Element type T is float, __half or __nv_bfloat16; activations and
// weights share T (W8A16 and W8A8 weights are int8 with float scales, W4A16
// weights packed 4-bit with group-wise float scales and int8 zeros; the
// quantized KV caches are int8 or FP8 E4M3 bytes with float scales), logits
// are float.
//
// Host wrappers (all templates deduce T from the pointers):
//   kiln_cuda_embedding, kiln_cuda_rms_norm, kiln_cuda_linear,
//   kiln_cuda_linear_w8a16 (int8 weights, per-channel or group-wise float
//   scales), kiln_cuda_linear_w8a8 (SmoothQuant: int8 activations quantized
//   per token or per tensor, int8 weights, __dp4a int32 sums),
//   kiln_cuda_linear_w4a16 (packed 4-bit weights, group scales / zeros),
//   kiln_cuda_embedding_blocks / kiln_cuda_linear_blocks (weights kept in a
//   GGML block format, decoded by kiln_rt/block_formats.h), kiln_cuda_rope,
//   kiln_cuda_attention, kiln_cuda_attention_kv8 (int8 KV cache with
//   per-(token, kv head) float scales), kiln_cuda_attention_kvf8 (FP8 E4M3
//   KV cache, same scales), kiln_cuda_attention_kv8_centered /
//   kiln_cuda_attention_kvf8_centered (keys stored relative to a calibrated
//   mean rotated to their position), kiln_cuda_swiglu, kiln_cuda_silu,
//   kiln_cuda_add, kiln_cuda_mul, kiln_cuda_argmax,
//   kiln_cuda_sample_topk_topp.
// Each enqueues on (cudaStream_t)ctx->stream and never synchronizes, so all of
// them may be captured into a CUDA graph. Errors never abort: the first
// failure stores a status and "<call> failed at <file>:<line>: <reason>" in
// ctx->status / ctx->error, and every later wrapper returns immediately.
// ctx->status is the cudaError_t for CUDA errors (argument errors detected by
// a wrapper use cudaErrorInvalidValue) and KILN_CUDA_CUBLAS_STATUS_BASE +
// cublasStatus_t for cuBLASLt errors.
//
// Workspace (ctx->workspace, ctx->workspace_bytes; see
// kiln_cuda_workspace_bytes_for()):
//   [0, KILN_CUDA_GEMM_WORKSPACE_BYTES)            cuBLASLt workspace (prefill
//                                                  GEMMs; less if smaller);
//                                                  also the quantized
//                                                  activations of W8A8
//                                                  (kiln_cuda_w8a8_scratch_bytes)
//   [KILN_CUDA_ATTN_SCRATCH_OFFSET, + kiln_cuda_attention_scratch_bytes(
//        heads, head_dim, KILN_CUDA_ATTN_MAX_SPLITS))  flash-decoding partials
//   then kiln_cuda_sample_scratch_bytes(vocab)      sampling scratch, passed
//                                                  explicitly by the caller
// Everything runs in stream order on one stream, so the regions are only
// live during the call that uses them.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CODEGEN_CUDA_KILNKERNELS_CUH
#define KILN_CODEGEN_CUDA_KILNKERNELS_CUH

#include "KilnCudaSparse.cuh"

#endif // KILN_CODEGEN_CUDA_KILNKERNELS_CUH

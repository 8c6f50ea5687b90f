//===- KilnCudaCommon.cuh - Shared pieces of the CUDA kernels --*- CUDA -*-===//
//
// Workspace sizes and offsets the executor and the emitter need, error
// handling (the first failure is stored in the context; later wrappers
// return at once), element types (float, __half, __nv_bfloat16) and the
// warp / block reductions. Part of KilnKernels.cuh.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CODEGEN_CUDA_KILNCUDACOMMON_CUH
#define KILN_CODEGEN_CUDA_KILNCUDACOMMON_CUH

#include "kiln_rt/block_formats.h"
#include "kiln_rt/rope_scaling.h"
#include "kiln_rt/cuda_abi.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <type_traits>


//===----------------------------------------------------------------------===//
// Sizes the executor and the emitter need
//===----------------------------------------------------------------------===//

/// ctx->status of a cuBLASLt failure is this plus the cublasStatus_t.
#define KILN_CUDA_CUBLAS_STATUS_BASE 100000
/// cuBLASLt workspace at the start of ctx->workspace (NVIDIA recommends 32 MiB
/// on Hopper). A smaller ctx->workspace_bytes limits the GEMM workspace.
#define KILN_CUDA_GEMM_WORKSPACE_BYTES (uint64_t(32) << 20)
/// Byte offset of the flash-decoding scratch inside ctx->workspace.
#define KILN_CUDA_ATTN_SCRATCH_OFFSET KILN_CUDA_GEMM_WORKSPACE_BYTES
/// Upper bound of the KV-sequence splits of decode attention.
#define KILN_CUDA_ATTN_MAX_SPLITS 64
/// Largest head_dim kiln_cuda_attention supports.
#define KILN_CUDA_ATTN_MAX_HEAD_DIM 256
/// Largest top_k that kiln_cuda_sample_topk_topp applies exactly; larger
/// values (below vocab) are clamped to it.
#define KILN_CUDA_SAMPLE_MAX_TOP_K 1024

/// Rounds bytes up to a multiple of 256 (cuBLASLt and vector alignment).
constexpr uint64_t kiln_cuda_align256(uint64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

/// Bytes of flash-decoding scratch: per (head, split) a running max, a sum of
/// exponentials and a head_dim accumulator, all float32:
///   heads * max_splits * (2 + head_dim) * 4, rounded up to 256.
constexpr uint64_t kiln_cuda_attention_scratch_bytes(int64_t heads,
                                                     int64_t head_dim,
                                                     int64_t max_splits) {
  return kiln_cuda_align256(uint64_t(heads) * uint64_t(max_splits) *
                            uint64_t(2 + head_dim) * sizeof(float));
}

/// Bytes of the scratch of kiln_cuda_sample_topk_topp: vocab float32.
constexpr uint64_t kiln_cuda_sample_scratch_bytes(int64_t vocab) {
  return kiln_cuda_align256(uint64_t(vocab) * sizeof(float));
}

/// Byte offset of the sampling scratch in the recommended layout.
constexpr uint64_t kiln_cuda_sample_scratch_offset(int64_t heads,
                                                   int64_t head_dim) {
  return KILN_CUDA_ATTN_SCRATCH_OFFSET +
         kiln_cuda_attention_scratch_bytes(heads, head_dim,
                                           KILN_CUDA_ATTN_MAX_SPLITS);
}

/// The sampling scratch of the recommended layout inside ctx->workspace.
inline float *kiln_cuda_sample_scratch(const kiln_cuda_ctx *ctx, int64_t heads,
                                       int64_t head_dim) {
  return reinterpret_cast<float *>(
      static_cast<uint8_t *>(ctx->workspace) +
      kiln_cuda_sample_scratch_offset(heads, head_dim));
}

/// Total ctx->workspace bytes for a model with `heads` query heads of
/// `head_dim` and a `vocab`-entry vocabulary (largest values over layers).
constexpr uint64_t
kiln_cuda_workspace_bytes_for(int64_t heads, int64_t head_dim, int64_t vocab) {
  return kiln_cuda_sample_scratch_offset(heads, head_dim) +
         kiln_cuda_sample_scratch_bytes(vocab);
}

namespace kiln_cuda_detail {

//===----------------------------------------------------------------------===//
// Error handling
//===----------------------------------------------------------------------===//

/// True when the wrapper must do nothing (no context or an earlier error).
inline bool skip(const kiln_cuda_ctx *ctx) {
  return ctx == nullptr || ctx->status != 0;
}

/// Records the first error of the context.
inline void setError(kiln_cuda_ctx *ctx, int32_t status, const char *call,
                     const char *file, int line, const char *reason) {
  if (ctx->status != 0)
    return;
  ctx->status = status != 0 ? status : -1;
  std::snprintf(ctx->error, sizeof(ctx->error), "%s failed at %s:%d: %s", call,
                file, line, reason);
}

inline bool checkCuda(kiln_cuda_ctx *ctx, cudaError_t err, const char *call,
                      const char *file, int line) {
  if (err == cudaSuccess)
    return true;
  setError(ctx, int32_t(err), call, file, line, cudaGetErrorString(err));
  return false;
}

inline bool checkCublas(kiln_cuda_ctx *ctx, cublasStatus_t st, const char *call,
                        const char *file, int line) {
  if (st == CUBLAS_STATUS_SUCCESS)
    return true;
  setError(ctx, KILN_CUDA_CUBLAS_STATUS_BASE + int32_t(st), call, file, line,
           cublasLtGetStatusString(st));
  return false;
}

/// Argument errors found by a wrapper (shape or workspace out of range).
inline bool checkArg(kiln_cuda_ctx *ctx, bool ok, const char *call,
                     const char *file, int line, const char *reason) {
  if (ok)
    return true;
  setError(ctx, int32_t(cudaErrorInvalidValue), call, file, line, reason);
  return false;
}

#define KILN_CUDA_CHECK(ctx, expr)                                             \
  ::kiln_cuda_detail::checkCuda((ctx), (expr), #expr, __FILE__, __LINE__)
#define KILN_CUBLAS_CHECK(ctx, expr)                                           \
  ::kiln_cuda_detail::checkCublas((ctx), (expr), #expr, __FILE__, __LINE__)
#define KILN_CUDA_ARG(ctx, cond, call, reason)                                 \
  ::kiln_cuda_detail::checkArg((ctx), (cond), (call), __FILE__, __LINE__,      \
                               (reason))
/// After a <<<>>> launch: reports launch-configuration errors.
#define KILN_CUDA_LAUNCHED(ctx, name)                                          \
  ::kiln_cuda_detail::checkCuda((ctx), cudaGetLastError(), name, __FILE__,     \
                                __LINE__)

inline cudaStream_t streamOf(const kiln_cuda_ctx *ctx) {
  return static_cast<cudaStream_t>(ctx->stream);
}

/// Grid size for a grid-stride loop over `work` items of `block` threads.
inline unsigned gridFor(const kiln_cuda_ctx *ctx, int64_t work, int block) {
  int64_t blocks = (work + block - 1) / block;
  int64_t cap = int64_t(ctx->sm_count > 0 ? ctx->sm_count : 108) * 16;
  if (blocks > cap)
    blocks = cap;
  return unsigned(blocks < 1 ? 1 : blocks);
}

__host__ __device__ inline bool aligned16(const void *p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

//===----------------------------------------------------------------------===//
// Element types
//===----------------------------------------------------------------------===//

template <typename T>
struct IsElem
    : std::integral_constant<bool, std::is_same<T, float>::value ||
                                       std::is_same<T, __half>::value ||
                                       std::is_same<T, __nv_bfloat16>::value> {
};

/// Float conversions (round to nearest even when narrowing).
__device__ __forceinline__ float toF(float v) { return v; }
__device__ __forceinline__ float toF(__half v) { return __half2float(v); }
__device__ __forceinline__ float toF(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T> __device__ __forceinline__ T fromF(float v);
template <> __device__ __forceinline__ float fromF<float>(float v) { return v; }
template <> __device__ __forceinline__ __half fromF<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 fromF<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename T> struct CudaType;
template <> struct CudaType<float> {
  static constexpr cudaDataType_t value = CUDA_R_32F;
};
template <> struct CudaType<__half> {
  static constexpr cudaDataType_t value = CUDA_R_16F;
};
template <> struct CudaType<__nv_bfloat16> {
  static constexpr cudaDataType_t value = CUDA_R_16BF;
};

/// 16 bytes of T: one 128-bit load or store (pointer must be 16-aligned).
template <typename T> struct alignas(16) Pack {
  static constexpr int kN = 16 / int(sizeof(T));
  T v[kN];
};

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(kFull, v, o);
  return v;
}

__device__ __forceinline__ float warpMax(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024). Every
/// thread must call it; every thread gets the result. `sh` holds 32 floats.
__device__ __forceinline__ float blockSum(float v, float *sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = warpSum(v);
  __syncthreads(); // sh may still be read by a previous reduction
  if (lane == 0)
    sh[warp] = v;
  __syncthreads();
  float r = 0.0f;
  for (int w = 0; w < warps; ++w)
    r += sh[w];
  return r;
}

__device__ __forceinline__ float blockMax(float v, float *sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = warpMax(v);
  __syncthreads();
  if (lane == 0)
    sh[warp] = v;
  __syncthreads();
  float r = -INFINITY;
  for (int w = 0; w < warps; ++w)
    r = fmaxf(r, sh[w]);
  return r;
}

/// (value, index) maximum with the first index winning ties; NaN never wins.
__device__ __forceinline__ void argmaxCombine(float &v, int &i, float ov,
                                              int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

/// Block-wide first argmax of x[0, n); every thread gets the index (0 when
/// no element is > -inf, as the CPU sampler's argmax returns 0 then).
__device__ __forceinline__ int blockArgmax(const float *x, int n, float *shV,
                                           int *shI) {
  float best = -INFINITY;
  int bi = n; // sentinel: nothing found
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    if (x[i] > best) { // ascending i per thread: keeps the first maximum
      best = x[i];
      bi = i;
    }
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(kFull, best, o);
    int oi = __shfl_xor_sync(kFull, bi, o);
    argmaxCombine(best, bi, ov, oi);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) {
    shV[warp] = best;
    shI[warp] = bi;
  }
  __syncthreads();
  best = -INFINITY;
  bi = n;
  for (int w = 0; w < int(blockDim.x >> 5); ++w)
    argmaxCombine(best, bi, shV[w], shI[w]);
  return bi >= n ? 0 : bi;
}

//===----------------------------------------------------------------------===//

} // namespace kiln_cuda_detail

#endif // KILN_CODEGEN_CUDA_KILNCUDACOMMON_CUH

//===- KilnKernels.cuh - CUDA kernel library of emitted models -*- CUDA -*-===//
//
// The CUDA kernels that `--target=cuda` artifacts run. Codegen copies this
// header next to the emitted model.cu, which includes it once; nvcc compiles
// both for sm_80 and sm_90a into model.so. Self-contained: it includes only
// CUDA runtime, cuBLASLt and CCCL headers, the C++ standard library, the
// runtime contract "kiln_rt/cuda_abi.h", the GGML block codec
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
// Embedding
//===----------------------------------------------------------------------===//

/// out[i, :] = table[tokens[i], :]. One block per row (grid-stride). Ids
/// outside [0, vocab) (the runtime validates them) produce a zero row instead
/// of an out-of-bounds read. `vec`: table, out 16-aligned and dim * sizeof(T)
/// a multiple of 16, so rows copy as 16-byte packs.
template <typename T>
__global__ void __launch_bounds__(256)
    embeddingKernel(const int32_t *__restrict__ tokens, int64_t n,
                    const T *__restrict__ table, int64_t vocab, int64_t dim,
                    T *__restrict__ out, bool vec) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t tok = tokens[i];
    const bool ok = tok >= 0 && tok < vocab;
    const T *src = table + (ok ? tok : 0) * dim;
    T *dst = out + i * dim;
    if (vec) {
      const int64_t packs = dim / Pack<T>::kN;
      const Pack<T> *s = reinterpret_cast<const Pack<T> *>(src);
      Pack<T> *d = reinterpret_cast<Pack<T> *>(dst);
      for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
        Pack<T> v = s[j];
        if (!ok)
          for (int e = 0; e < Pack<T>::kN; ++e)
            v.v[e] = fromF<T>(0.0f);
        d[j] = v;
      }
      continue;
    }
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
      dst[j] = ok ? src[j] : fromF<T>(0.0f);
  }
}

//===----------------------------------------------------------------------===//
// RMSNorm (Zhang & Sennrich 2019), llama2.c rmsnorm arithmetic
//===----------------------------------------------------------------------===//

/// y[i, j] = w[j] * (s * x[i, j]), s = 1 / sqrtf(sum_j x^2 / dim + eps).
/// One block per row, float sum of squares reduced with warp shuffles.
/// In-place (x == y) is safe: all reads of the sum finish at the barrier in
/// blockSum, and each thread rewrites only elements it read itself.
template <typename T>
__global__ void __launch_bounds__(256)
    rmsNormKernel(const T *x, const T *__restrict__ w, T *y, int64_t n,
                  int64_t dim, float eps) {
  __shared__ float sh[32];
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const T *xi = x + i * dim;
    T *yi = y + i * dim;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      float v = toF(xi[j]);
      ss = fmaf(v, v, ss);
    }
    ss = blockSum(ss, sh);
    float s = ss / float(dim);
    s += eps;
    s = 1.0f / sqrtf(s);
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
      yi[j] = fromF<T>(toF(w[j]) * (s * toF(xi[j])));
  }
}

//===----------------------------------------------------------------------===//
// Linear, decode: memory-bound GEMV
//===----------------------------------------------------------------------===//

template <typename T>
__device__ __forceinline__ float dotPack(const Pack<T> &a, const Pack<T> &b) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < Pack<T>::kN; ++e)
    s = fmaf(toF(a.v[e]), toF(b.v[e]), s);
  return s;
}

constexpr int kGemvThreads = 256;

/// y[r] = sum_j w[r, j] * x[j] for r < out (x [in], w [out, in] row-major).
/// Each warp owns rows (grid-stride). Per row: the elements before w's first
/// 16-byte boundary ("head", < 16 / sizeof(T)), then 16-byte packs of w
/// (unrolled 4x so each lane keeps 4 loads in flight), then a scalar tail.
/// x is read as packs when x + head is 16-aligned too, else element-wise.
/// Any `in`, any element-aligned pointers. Float accumulation, warp-shuffle
/// reduction; Y is T or float.
template <typename T, typename Y>
__global__ void __launch_bounds__(kGemvThreads)
    gemvKernel(const T *__restrict__ x, const T *__restrict__ w,
               Y *__restrict__ y, int64_t in, int64_t out) {
  constexpr int kN = Pack<T>::kN;
  const int lane = threadIdx.x & 31;
  const int64_t warpsPerBlock = blockDim.x >> 5;
  const int64_t stride = int64_t(gridDim.x) * warpsPerBlock;
  for (int64_t row = int64_t(blockIdx.x) * warpsPerBlock + (threadIdx.x >> 5);
       row < out; row += stride) {
    const T *wr = w + row * in;
    int64_t head = int64_t((16 - (reinterpret_cast<uintptr_t>(wr) & 15)) & 15) /
                   int64_t(sizeof(T));
    if (head > in)
      head = in;
    float acc = 0.0f;
    if (lane < head) // head < kN <= 8 < 32
      acc = toF(wr[lane]) * toF(x[lane]);
    const int64_t packs = (in - head) / kN;
    const Pack<T> *wv = reinterpret_cast<const Pack<T> *>(wr + head);
    const T *xh = x + head;
    if (aligned16(xh)) {
      const Pack<T> *xv = reinterpret_cast<const Pack<T> *>(xh);
      int64_t v = lane;
      for (; v + 96 < packs; v += 128) {
        Pack<T> w0 = wv[v], w1 = wv[v + 32], w2 = wv[v + 64], w3 = wv[v + 96];
        Pack<T> x0 = xv[v], x1 = xv[v + 32], x2 = xv[v + 64], x3 = xv[v + 96];
        acc += dotPack(w0, x0) + dotPack(w1, x1) + dotPack(w2, x2) +
               dotPack(w3, x3);
      }
      for (; v < packs; v += 32)
        acc += dotPack(wv[v], xv[v]);
    } else {
      for (int64_t v = lane; v < packs; v += 32) {
        Pack<T> wq = wv[v];
        const T *xs = xh + v * kN;
#pragma unroll
        for (int e = 0; e < kN; ++e)
          acc = fmaf(toF(wq.v[e]), toF(xs[e]), acc);
      }
    }
    for (int64_t j = head + packs * kN + lane; j < in; j += 32)
      acc = fmaf(toF(wr[j]), toF(x[j]), acc);
    acc = warpSum(acc);
    if (lane == 0)
      y[row] = fromF<Y>(acc);
  }
}

//===----------------------------------------------------------------------===//
// Linear, prefill: cuBLASLt
//===----------------------------------------------------------------------===//

/// One cached cuBLASLt plan: descriptors, layouts and the heuristic's algo
/// for a (handle, n, in, out, types, alignments, workspace) key. Created on
/// first use (host memory only, allowed during stream capture); never freed
/// (a handful per model; the process exit reclaims them).
struct LtPlan {
  bool used = false;
  const void *handle = nullptr;
  int64_t n = 0, in = 0, out = 0;
  cudaDataType_t ab = CUDA_R_32F, cd = CUDA_R_32F;
  uint32_t alignA = 0, alignB = 0, alignD = 0;
  uint64_t workspace = 0;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

constexpr int kLtCacheSize = 64;

struct LtCache {
  std::mutex mutex;
  LtPlan plans[kLtCacheSize];
  int next = 0; // round-robin victim when full
};

inline LtCache &ltCache() {
  static LtCache *cache = new LtCache(); // leaked: no teardown order issues
  return *cache;
}

/// Largest power of two dividing the address, at most 256 (cuBLASLt's
/// default alignment assumption; smaller values restrict the heuristic).
inline uint32_t alignmentOf(const void *p) {
  uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && (v & (a - 1)) != 0)
    a >>= 1;
  return a;
}

inline void destroyPlan(LtPlan &p) {
  if (p.op)
    cublasLtMatmulDescDestroy(p.op);
  if (p.a)
    cublasLtMatrixLayoutDestroy(p.a);
  if (p.b)
    cublasLtMatrixLayoutDestroy(p.b);
  if (p.d)
    cublasLtMatrixLayoutDestroy(p.d);
  p = LtPlan();
}

/// y[n, out] = x[n, in] * w[out, in]^T with cuBLASLt, all row-major.
///
/// Row-/column-major mapping: cuBLASLt is column-major, and a row-major
/// [r, c] buffer with leading dimension c is the column-major [c, r] matrix,
/// i.e. its transpose. So the buffers are, column-major:
///   w: W^T [in, out], ld in;   x: X^T [in, n], ld in;   y: Y^T [out, n], ld
///   out
/// and Y^T = W X^T = op_T(W^T) * op_N(X^T): a "TN" GEMM with
/// A = w (transa = T), B = x (transb = N), m = out, n = n, k = in.
/// Compute type CUBLAS_COMPUTE_32F (no TF32: f32 stays exact), scale float.
template <typename T, typename Y>
inline void ltLinear(kiln_cuda_ctx *ctx, const T *x, const T *w, Y *y,
                     int64_t n, int64_t in, int64_t out) {
  const char *what = "kiln_cuda_linear(cuBLASLt)";
  if (!KILN_CUDA_ARG(ctx, ctx->cublaslt != nullptr, what,
                     "ctx->cublaslt is null"))
    return;
  cublasLtHandle_t handle = static_cast<cublasLtHandle_t>(ctx->cublaslt);
  uint64_t ws = ctx->workspace ? ctx->workspace_bytes : 0;
  if (ws > KILN_CUDA_GEMM_WORKSPACE_BYTES)
    ws = KILN_CUDA_GEMM_WORKSPACE_BYTES;
  const cudaDataType_t ab = CudaType<T>::value, cd = CudaType<Y>::value;
  const uint32_t alA = alignmentOf(w), alB = alignmentOf(x),
                 alD = alignmentOf(y);

  LtCache &cache = ltCache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  LtPlan *plan = nullptr;
  for (LtPlan &p : cache.plans)
    if (p.used && p.handle == ctx->cublaslt && p.n == n && p.in == in &&
        p.out == out && p.ab == ab && p.cd == cd && p.alignA == alA &&
        p.alignB == alB && p.alignD == alD && p.workspace == ws) {
      plan = &p;
      break;
    }
  if (!plan) {
    for (LtPlan &p : cache.plans)
      if (!p.used) {
        plan = &p;
        break;
      }
    if (!plan) {
      plan = &cache.plans[cache.next];
      cache.next = (cache.next + 1) % kLtCacheSize;
      destroyPlan(*plan); // host descriptors only: enqueued work is unaffected
    }
    LtPlan p;
    p.handle = ctx->cublaslt;
    p.n = n;
    p.in = in;
    p.out = out;
    p.ab = ab;
    p.cd = cd;
    p.alignA = alA;
    p.alignB = alB;
    p.alignD = alD;
    p.workspace = ws;
    cublasOperation_t opA = CUBLAS_OP_T, opB = CUBLAS_OP_N;
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    bool ok =
        KILN_CUBLAS_CHECK(ctx, cublasLtMatmulDescCreate(
                                   &p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) &&
        KILN_CUBLAS_CHECK(
            ctx, cublasLtMatmulDescSetAttribute(
                     p.op, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA))) &&
        KILN_CUBLAS_CHECK(
            ctx, cublasLtMatmulDescSetAttribute(
                     p.op, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB))) &&
        KILN_CUBLAS_CHECK(ctx,
                          cublasLtMatrixLayoutCreate(&p.a, ab, uint64_t(in),
                                                     uint64_t(out), in)) &&
        KILN_CUBLAS_CHECK(ctx, cublasLtMatrixLayoutCreate(
                                   &p.b, ab, uint64_t(in), uint64_t(n), in)) &&
        KILN_CUBLAS_CHECK(ctx,
                          cublasLtMatrixLayoutCreate(&p.d, cd, uint64_t(out),
                                                     uint64_t(n), out)) &&
        KILN_CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceCreate(&pref)) &&
        KILN_CUBLAS_CHECK(ctx,
                          cublasLtMatmulPreferenceSetAttribute(
                              pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                              &ws, sizeof(ws))) &&
        KILN_CUBLAS_CHECK(ctx,
                          cublasLtMatmulPreferenceSetAttribute(
                              pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                              &alA, sizeof(alA))) &&
        KILN_CUBLAS_CHECK(ctx,
                          cublasLtMatmulPreferenceSetAttribute(
                              pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                              &alB, sizeof(alB))) &&
        KILN_CUBLAS_CHECK(ctx,
                          cublasLtMatmulPreferenceSetAttribute(
                              pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                              &alD, sizeof(alD))) &&
        KILN_CUBLAS_CHECK(ctx,
                          cublasLtMatmulPreferenceSetAttribute(
                              pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                              &alD, sizeof(alD))) &&
        KILN_CUBLAS_CHECK(
            ctx, cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.a, p.b, p.d,
                                                p.d, pref, 1, &result, &found));
    if (pref)
      cublasLtMatmulPreferenceDestroy(pref);
    if (ok && found == 0) {
      setError(ctx, KILN_CUDA_CUBLAS_STATUS_BASE + CUBLAS_STATUS_NOT_SUPPORTED,
               "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__,
               "no cuBLASLt algorithm for this shape and alignment");
      ok = false;
    }
    if (!ok) {
      destroyPlan(p);
      return;
    }
    p.algo = result.algo;
    p.used = true;
    *plan = p;
  }
  const float alpha = 1.0f, beta = 0.0f;
  KILN_CUBLAS_CHECK(ctx, cublasLtMatmul(handle, plan->op, &alpha, w, plan->a, x,
                                        plan->b, &beta, y, plan->d, y, plan->d,
                                        &plan->algo, ctx->workspace, size_t(ws),
                                        streamOf(ctx)));
}

//===----------------------------------------------------------------------===//
// Linear, W8A16: int8 weights, per-output-channel float scales
//===----------------------------------------------------------------------===//

/// Byte b (0..3) of `flipped` (an int8 word XOR 0x80808080, i.e. each byte
/// holds value + 128) as an exact float: PRMT builds the float 2^23 + byte,
/// one FADD removes 2^23 + 128. Cheaper than I2F, which runs at quarter rate.
__device__ __forceinline__ float i8ToF(uint32_t flipped, int b) {
  const uint32_t bits = __byte_perm(flipped, 0x4B000000u, 0x7650u + unsigned(b));
  return __uint_as_float(bits) - 8388736.0f; // 2^23 + 128
}

/// acc += sum_{e < 16} float(q[e]) * x[e] for 16 int8 weights held in `w`
/// (one 16-byte load) and 16 elements of x starting at xs; `vec`: xs is
/// 16-aligned, so x is read as 16-byte packs.
template <typename T, bool Vec>
__device__ __forceinline__ float dotW8(const int4 &w, const T *xs, float acc) {
  float xf[16];
  if (Vec) {
    constexpr int kN = Pack<T>::kN;
    const Pack<T> *xv = reinterpret_cast<const Pack<T> *>(xs);
#pragma unroll
    for (int p = 0; p < 16 / kN; ++p) {
      const Pack<T> xp = xv[p];
#pragma unroll
      for (int e = 0; e < kN; ++e)
        xf[p * kN + e] = toF(xp.v[e]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < 16; ++e)
      xf[e] = toF(xs[e]);
  }
  const uint32_t words[4] = {uint32_t(w.x) ^ 0x80808080u,
                             uint32_t(w.y) ^ 0x80808080u,
                             uint32_t(w.z) ^ 0x80808080u,
                             uint32_t(w.w) ^ 0x80808080u};
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int b = 0; b < 4; ++b)
      acc = fmaf(i8ToF(words[k], b), xf[4 * k + b], acc);
  return acc;
}

/// y[r] = scales[r] * sum_j float(q[r, j]) * x[j] for r < out (x [in], q
/// [out, in] int8 row-major). The structure of gemvKernel: a warp per row
/// (grid-stride); per row the bytes before q's first 16-byte boundary
/// ("head", < 16), then 16-byte loads of 16 weights per lane, dequantized in
/// registers (unrolled 2x), then a scalar tail; x read as packs when x + head
/// is 16-aligned. Float accumulation, warp-shuffle reduction, the row scale
/// applied to the sum; Y is T or float.
template <typename T, typename Y>
__global__ void __launch_bounds__(kGemvThreads)
    gemvW8Kernel(const T *__restrict__ x, const int8_t *__restrict__ q,
                 const float *__restrict__ scales, Y *__restrict__ y,
                 int64_t in, int64_t out) {
  const int lane = threadIdx.x & 31;
  const int64_t warpsPerBlock = blockDim.x >> 5;
  const int64_t stride = int64_t(gridDim.x) * warpsPerBlock;
  for (int64_t row = int64_t(blockIdx.x) * warpsPerBlock + (threadIdx.x >> 5);
       row < out; row += stride) {
    const int8_t *qr = q + row * in;
    int64_t head = int64_t((16 - (reinterpret_cast<uintptr_t>(qr) & 15)) & 15);
    if (head > in)
      head = in;
    float acc = 0.0f;
    if (lane < head) // head < 16
      acc = float(qr[lane]) * toF(x[lane]);
    const int64_t packs = (in - head) / 16;
    const int4 *qv = reinterpret_cast<const int4 *>(qr + head);
    const T *xh = x + head;
    if (aligned16(xh)) {
      int64_t v = lane;
      for (; v + 32 < packs; v += 64) {
        const int4 w0 = __ldg(qv + v), w1 = __ldg(qv + v + 32);
        acc = dotW8<T, true>(w0, xh + v * 16, acc);
        acc = dotW8<T, true>(w1, xh + (v + 32) * 16, acc);
      }
      for (; v < packs; v += 32)
        acc = dotW8<T, true>(__ldg(qv + v), xh + v * 16, acc);
    } else {
      for (int64_t v = lane; v < packs; v += 32)
        acc = dotW8<T, false>(__ldg(qv + v), xh + v * 16, acc);
    }
    for (int64_t j = head + packs * 16 + lane; j < in; j += 32)
      acc = fmaf(float(qr[j]), toF(x[j]), acc);
    acc = warpSum(acc);
    if (lane == 0)
      y[row] = fromF<Y>(acc * scales[row]);
  }
}

/// Group-wise W8A16 GEMV (GGUF Q8_0 style): y[r] = sum_g scales[r, g] *
/// sum_{j in g} float(q[r, j]) * x[j], g = j / groupSize, scales float
/// [out, ceil(in / groupSize)]. A warp per row (grid-stride). `fast`
/// (uniform: in % 16 == 0, groupSize % 16 == 0, q 16-aligned, in / 16 <
/// 2^31, so every row is 16-aligned and no 16-byte pack straddles a group):
/// each lane takes 16-byte packs (unrolled 2x), dequantizes them in
/// registers as gemvW8Kernel does and adds scale * partial sum; x read as
/// packs when 16-aligned. Otherwise (any shape or alignment) element by
/// element with the scale applied per weight. Float accumulation,
/// warp-shuffle reduction; Y is T or float.
template <typename T, typename Y>
__global__ void __launch_bounds__(kGemvThreads)
    gemvW8GroupKernel(const T *__restrict__ x, const int8_t *__restrict__ q,
                      const float *__restrict__ scales, Y *__restrict__ y,
                      int64_t in, int64_t out, int64_t groupSize, bool fast) {
  const int lane = threadIdx.x & 31;
  const int64_t warpsPerBlock = blockDim.x >> 5;
  const int64_t stride = int64_t(gridDim.x) * warpsPerBlock;
  const int64_t groups = (in + groupSize - 1) / groupSize;
  for (int64_t row = int64_t(blockIdx.x) * warpsPerBlock + (threadIdx.x >> 5);
       row < out; row += stride) {
    const int8_t *qr = q + row * in;
    const float *sr = scales + row * groups;
    float acc = 0.0f;
    if (fast) {
      // Pack v belongs to group v / packsPerGroup: a shift when that is a
      // power of two (Q8_0: 2), else a 32-bit division (packs < 2^31).
      const uint32_t packs = uint32_t(in / 16);
      const uint32_t packsPerGroup = uint32_t(groupSize / 16);
      const int shift = (packsPerGroup & (packsPerGroup - 1)) == 0
                            ? __ffs(int(packsPerGroup)) - 1
                            : -1;
      auto groupOf = [&](uint32_t v) {
        return shift >= 0 ? v >> shift : v / packsPerGroup;
      };
      const int4 *qv = reinterpret_cast<const int4 *>(qr);
      if (aligned16(x)) {
        uint32_t v = lane;
        for (; v + 32 < packs; v += 64) {
          const int4 w0 = __ldg(qv + v), w1 = __ldg(qv + v + 32);
          const float s0 = __ldg(sr + groupOf(v));
          const float s1 = __ldg(sr + groupOf(v + 32));
          acc = fmaf(s0, dotW8<T, true>(w0, x + int64_t(v) * 16, 0.0f), acc);
          acc = fmaf(s1, dotW8<T, true>(w1, x + int64_t(v + 32) * 16, 0.0f),
                     acc);
        }
        for (; v < packs; v += 32)
          acc = fmaf(__ldg(sr + groupOf(v)),
                     dotW8<T, true>(__ldg(qv + v), x + int64_t(v) * 16, 0.0f),
                     acc);
      } else {
        for (uint32_t v = lane; v < packs; v += 32)
          acc = fmaf(__ldg(sr + groupOf(v)),
                     dotW8<T, false>(__ldg(qv + v), x + int64_t(v) * 16, 0.0f),
                     acc);
      }
    } else {
      for (int64_t j = lane; j < in; j += 32)
        acc = fmaf(__ldg(sr + j / groupSize) * float(qr[j]), toF(x[j]), acc);
    }
    acc = warpSum(acc);
    if (lane == 0)
      y[row] = fromF<Y>(acc);
  }
}

/// Prefill tile: kW8TileM tokens x kW8TileN output rows per block, depth
/// kW8TileK per step, kW8Threads threads each computing 4 x 4 outputs.
constexpr int kW8TileM = 64, kW8TileN = 64, kW8TileK = 32, kW8Threads = 256;

/// y[m, o] = scales[o] * sum_k float(x[m, k]) * float(q[o, k]) for x [n, in]
/// of T, q [out, in] int8 (groupSize == 0: per-channel scales [out]); with
/// groupSize > 0, y[m, o] = sum_k float(x[m, k]) * W[o, k], W[o, k] =
/// scales[o, k / groupSize] * q[o, k] rounded once while staging (scales
/// [out, ceil(in / groupSize)]). Block (blockIdx.x, blockIdx.y) computes output
/// rows [64 bx, +64) of tokens [64 by, +64): per depth step, x and the int8
/// weights (widened exactly to float) are staged k-major in shared memory,
/// then each thread accumulates its 4 tokens x 4 rows in float registers
/// (SIMT FMA; every T, no TF32). Out-of-range elements load as 0. Any
/// shape, any element alignment.
template <typename T, typename Y>
__global__ void __launch_bounds__(kW8Threads)
    linearW8TiledKernel(const T *__restrict__ x, const int8_t *__restrict__ q,
                        const float *__restrict__ scales, Y *__restrict__ y,
                        int64_t n, int64_t in, int64_t out,
                        int64_t groupSize) {
  // +4 floats of padding keeps rows 16-aligned (float4 reads) and spreads
  // the transposed stores over banks.
  __shared__ __align__(16) float xs[kW8TileK][kW8TileM + 4];
  __shared__ __align__(16) float ws[kW8TileK][kW8TileN + 4];
  const int tid = threadIdx.x;
  const int tx = tid % (kW8TileN / 4), ty = tid / (kW8TileN / 4);
  const int64_t m0 = int64_t(blockIdx.y) * kW8TileM;
  const int64_t o0 = int64_t(blockIdx.x) * kW8TileN;
  const int64_t groups = groupSize > 0 ? (in + groupSize - 1) / groupSize : 0;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < in; k0 += kW8TileK) {
    // Stage: element e -> (row e / 32, depth e % 32): a warp reads 32
    // consecutive depths of one row.
#pragma unroll
    for (int i = 0; i < kW8TileM * kW8TileK / kW8Threads; ++i) {
      const int e = tid + i * kW8Threads;
      const int r = e / kW8TileK, k = e % kW8TileK;
      const int64_t m = m0 + r, kk = k0 + k;
      xs[k][r] = (m < n && kk < in) ? toF(x[m * in + kk]) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kW8TileN * kW8TileK / kW8Threads; ++i) {
      const int e = tid + i * kW8Threads;
      const int r = e / kW8TileK, k = e % kW8TileK;
      const int64_t o = o0 + r, kk = k0 + k;
      float wv = 0.0f;
      if (o < out && kk < in) {
        wv = float(q[o * in + kk]);
        if (groupSize > 0) // group-wise: dequantize while staging
          wv = __fmul_rn(scales[o * groups + kk / groupSize], wv);
      }
      ws[k][r] = wv;
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < kW8TileK; ++k) {
      const float4 a = *reinterpret_cast<const float4 *>(&xs[k][ty * 4]);
      const float4 b = *reinterpret_cast<const float4 *>(&ws[k][tx * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t o = o0 + tx * 4 + j;
    if (o >= out)
      continue;
    const float s = groupSize > 0 ? 1.0f : scales[o];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t m = m0 + ty * 4 + i;
      if (m < n)
        y[m * out + o] = fromF<Y>(acc[i][j] * s);
    }
  }
}

//===----------------------------------------------------------------------===//
// Linear, W8A8 (SmoothQuant): int8 activations x int8 weights, int32 sums
//===----------------------------------------------------------------------===//

/// Activation quantization of W8A8 (Xiao et al. 2023, SmoothQuant, sec. 3:
/// per-token dynamic or static per-tensor int8), rows [0, n) of x [n, in]:
///   sx[r] = actScale > 0 ? actScale : max_i |x[r, i]| / 127,
///   xq[r, i] = sx[r] == 0 ? 0 : clamp(roundf(x[r, i] / sx[r]), -127, 127)
/// (roundf: half away from zero; correctly rounded divisions, __fdiv_rn, so
/// the codes equal the CPU kernel's bit for bit). xq is int8 with row stride
/// `ld` (a multiple of 16 >= in; elements [in, ld) are written 0), sx float
/// [n]. One block per row (grid-stride), block reduction for the maximum.
template <typename T>
__global__ void __launch_bounds__(256)
    actQuantKernel(const T *__restrict__ x, int8_t *__restrict__ xq,
                   float *__restrict__ sx, int64_t n, int64_t in, int64_t ld,
                   float actScale) {
  __shared__ float sh[32];
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const T *xr = x + r * in;
    float s = actScale;
    if (!(actScale > 0.0f)) {
      float amax = 0.0f;
      for (int64_t i = threadIdx.x; i < in; i += blockDim.x)
        amax = fmaxf(amax, fabsf(toF(xr[i])));
      s = __fdiv_rn(blockMax(amax, sh), 127.0f);
    }
    int8_t *qr = xq + r * ld;
    for (int64_t i = threadIdx.x; i < ld; i += blockDim.x) {
      float v = 0.0f;
      if (i < in && s != 0.0f)
        v = fminf(127.0f, fmaxf(-127.0f, roundf(__fdiv_rn(toF(xr[i]), s))));
      qr[i] = int8_t(v);
    }
    if (threadIdx.x == 0)
      sx[r] = s;
  }
}

/// y = (sx * scale) * float(acc), each product rounded once (the CPU
/// formula's order), then rounded to Y.
template <typename Y>
__device__ __forceinline__ Y w8a8Out(float sx, float scale, int32_t acc) {
  return fromF<Y>(__fmul_rn(__fmul_rn(sx, scale), float(acc)));
}

/// W8A8 GEMV (n == 1): y[r] = (sx * scales[r]) * float(sum_j xq[j] * q[r, j])
/// with xq the quantized activation row (16-aligned, zero-padded to a
/// multiple of 16) and sx its scale (device scalar). A warp per row
/// (grid-stride); `fast` (in % 16 == 0 and q 16-aligned): 16-byte loads of
/// q and xq, four __dp4a (4-way int8 dot product, int32 accumulate) per
/// load, unrolled 2x; otherwise byte loads. The int32 sum is exact (|sum| <=
/// 127^2 in < 2^31 for in < 133143), so the result is independent of the
/// summation order. Warp reduction with __reduce_add_sync; Y is T or float.
template <typename Y>
__global__ void __launch_bounds__(kGemvThreads)
    gemvW8A8Kernel(const int8_t *__restrict__ xq, const float *__restrict__ sx,
                   const int8_t *__restrict__ q,
                   const float *__restrict__ scales, Y *__restrict__ y,
                   int64_t in, int64_t out, bool fast) {
  const int lane = threadIdx.x & 31;
  const int64_t warpsPerBlock = blockDim.x >> 5;
  const int64_t stride = int64_t(gridDim.x) * warpsPerBlock;
  const float s = *sx;
  for (int64_t row = int64_t(blockIdx.x) * warpsPerBlock + (threadIdx.x >> 5);
       row < out; row += stride) {
    const int8_t *qr = q + row * in;
    int32_t acc = 0;
    if (fast) {
      const int64_t packs = in / 16;
      const int4 *qv = reinterpret_cast<const int4 *>(qr);
      const int4 *xv = reinterpret_cast<const int4 *>(xq);
      int64_t v = lane;
      for (; v + 32 < packs; v += 64) {
        const int4 w0 = __ldg(qv + v), w1 = __ldg(qv + v + 32);
        const int4 a0 = xv[v], a1 = xv[v + 32];
        acc = __dp4a(w0.x, a0.x, acc);
        acc = __dp4a(w0.y, a0.y, acc);
        acc = __dp4a(w0.z, a0.z, acc);
        acc = __dp4a(w0.w, a0.w, acc);
        acc = __dp4a(w1.x, a1.x, acc);
        acc = __dp4a(w1.y, a1.y, acc);
        acc = __dp4a(w1.z, a1.z, acc);
        acc = __dp4a(w1.w, a1.w, acc);
      }
      for (; v < packs; v += 32) {
        const int4 w0 = __ldg(qv + v), a0 = xv[v];
        acc = __dp4a(w0.x, a0.x, acc);
        acc = __dp4a(w0.y, a0.y, acc);
        acc = __dp4a(w0.z, a0.z, acc);
        acc = __dp4a(w0.w, a0.w, acc);
      }
    } else {
      for (int64_t j = lane; j < in; j += 32)
        acc += int32_t(qr[j]) * int32_t(xq[j]);
    }
    acc = __reduce_add_sync(kFull, acc);
    if (lane == 0)
      y[row] = w8a8Out<Y>(s, scales[row], acc);
  }
}

/// W8A8 prefill tile: kW8A8TileM tokens x kW8A8TileN output rows a block,
/// kW8A8TileKW int32 words (4 int8 each) of depth a step, 256 threads each
/// computing 4 x 4 int32 outputs with __dp4a.
constexpr int kW8A8TileM = 64, kW8A8TileN = 64, kW8A8TileKW = 16;

/// Four int8 weights q[o, kk .. kk + 3] as one word (byte b = element kk + b;
/// elements >= in read as 0). `wordLoads`: q 4-aligned and in % 4 == 0.
__device__ __forceinline__ int32_t loadQ4(const int8_t *__restrict__ qr,
                                          int64_t kk, int64_t in,
                                          bool wordLoads) {
  if (kk + 4 <= in && wordLoads)
    return __ldg(reinterpret_cast<const int32_t *>(qr + kk));
  uint32_t w = 0;
#pragma unroll
  for (int b = 0; b < 4; ++b)
    if (kk + b < in)
      w |= uint32_t(uint8_t(qr[kk + b])) << (8 * b);
  return int32_t(w);
}

/// W8A8 GEMM (n > 1): y[m, o] = (sx[m] * scales[o]) * float(sum_k xq[m, k] *
/// q[o, k]) for xq [n, ld] int8 (16-aligned rows, zero-padded), q [out, in]
/// int8 (any alignment; word loads when possible). Block (bx, by) computes
/// output rows [64 bx, +64) of tokens [64 by, +64): per depth step 64 int8
/// of xq and q are staged word-major in shared memory, then each thread
/// accumulates 4 tokens x 4 rows with __dp4a in int32 (exact, as in the
/// GEMV). SIMT integer pipe, no tensor cores (see docs/cuda.md).
template <typename Y>
__global__ void __launch_bounds__(kW8Threads)
    linearW8A8TiledKernel(const int8_t *__restrict__ xq,
                          const float *__restrict__ sx,
                          const int8_t *__restrict__ q,
                          const float *__restrict__ scales, Y *__restrict__ y,
                          int64_t n, int64_t in, int64_t ld, int64_t out,
                          bool wordLoads) {
  __shared__ __align__(16) int32_t xs[kW8A8TileKW][kW8A8TileM + 4];
  __shared__ __align__(16) int32_t ws[kW8A8TileKW][kW8A8TileN + 4];
  const int tid = threadIdx.x;
  const int tx = tid % (kW8A8TileN / 4), ty = tid / (kW8A8TileN / 4);
  const int64_t m0 = int64_t(blockIdx.y) * kW8A8TileM;
  const int64_t o0 = int64_t(blockIdx.x) * kW8A8TileN;
  const int64_t ldWords = ld / 4;
  int32_t acc[4][4] = {};
  for (int64_t k0 = 0; k0 < ldWords; k0 += kW8A8TileKW) {
    // Stage: element e -> (row e / 16, word e % 16).
#pragma unroll
    for (int i = 0; i < kW8A8TileM * kW8A8TileKW / kW8Threads; ++i) {
      const int e = tid + i * kW8Threads;
      const int r = e / kW8A8TileKW, k = e % kW8A8TileKW;
      const int64_t m = m0 + r, kw = k0 + k;
      xs[k][r] = (m < n && kw < ldWords)
                     ? reinterpret_cast<const int32_t *>(xq + m * ld)[kw]
                     : 0;
    }
#pragma unroll
    for (int i = 0; i < kW8A8TileN * kW8A8TileKW / kW8Threads; ++i) {
      const int e = tid + i * kW8Threads;
      const int r = e / kW8A8TileKW, k = e % kW8A8TileKW;
      const int64_t o = o0 + r, kw = k0 + k;
      ws[k][r] = o < out ? loadQ4(q + o * in, 4 * kw, in, wordLoads) : 0;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kW8A8TileKW; ++k) {
      const int4 a = *reinterpret_cast<const int4 *>(&xs[k][ty * 4]);
      const int4 b = *reinterpret_cast<const int4 *>(&ws[k][tx * 4]);
      const int av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          acc[i][j] = __dp4a(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t o = o0 + tx * 4 + j;
    if (o >= out)
      continue;
    const float s = scales[o];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t m = m0 + ty * 4 + i;
      if (m < n)
        y[m * out + o] = w8a8Out<Y>(sx[m], s, acc[i][j]);
    }
  }
}

//===----------------------------------------------------------------------===//
// Linear, W4A16: packed 4-bit weights, group-wise float scales and zeros
//===----------------------------------------------------------------------===//

/// Byte b (0..3) of `nibbles` (each byte 0..15) as the exact float 2^23 +
/// byte: PRMT places it under the exponent of 2^23 (no I2F).
__device__ __forceinline__ float nibF(uint32_t nibbles, int b) {
  return __uint_as_float(
      __byte_perm(nibbles, 0x4B000000u, 0x7650u + unsigned(b)));
}

/// Eight elements of x starting at xs as float; `Vec`: xs is 16-aligned.
template <typename T, bool Vec>
__device__ __forceinline__ void loadX8(const T *xs, float (&xf)[8]) {
  if (Vec) {
    constexpr int kN = Pack<T>::kN; // 4 or 8: divides 8
    const Pack<T> *xv = reinterpret_cast<const Pack<T> *>(xs);
#pragma unroll
    for (int p = 0; p < 8 / kN; ++p) {
      const Pack<T> xp = xv[p];
#pragma unroll
      for (int e = 0; e < kN; ++e)
        xf[p * kN + e] = toF(xp.v[e]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      xf[e] = toF(xs[e]);
  }
}

/// sum_{e < 32} x[e] * (q[e] - z) for the 32 nibbles of one 16-byte load
/// (element 2m of each word in byte m's low nibble, 2m + 1 in its high one)
/// and x from xs; zf = 2^23 + z, so nibF(..) - zf is q - z exactly.
template <typename T, bool Vec>
__device__ __forceinline__ float dotW4(const int4 &w, const T *xs, float zf) {
  const uint32_t words[4] = {uint32_t(w.x), uint32_t(w.y), uint32_t(w.z),
                             uint32_t(w.w)};
  float even = 0.0f, odd = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    float xf[8];
    loadX8<T, Vec>(xs + 8 * k, xf);
    const uint32_t lo = words[k] & 0x0F0F0F0Fu;
    const uint32_t hi = (words[k] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      even = fmaf(nibF(lo, m) - zf, xf[2 * m], even);
      odd = fmaf(nibF(hi, m) - zf, xf[2 * m + 1], odd);
    }
  }
  return even + odd;
}

/// y[r] = sum_g scales[r, g] * sum_{j in g} x[j] * (q[r, j] - zeros[r, g])
/// for r < out (layout of kernel_abi.h kiln_k_linear_w4a16). A warp per row
/// (grid-stride). `fast` (uniform; in % 32 == 0, groupSize % 32 == 0, q
/// 16-aligned, hence every row): each lane takes 16-byte loads of 32 nibbles
/// (unrolled 2x), all in one group, dequantizes them in registers and adds
/// scale * partial sum; x read as packs when 16-aligned. Otherwise (any
/// shape or alignment) a lane takes single bytes (two elements of one
/// group). Float accumulation, warp-shuffle reduction; Y is T or float.
template <typename T, typename Y>
__global__ void __launch_bounds__(kGemvThreads)
    gemvW4Kernel(const T *__restrict__ x, const int8_t *__restrict__ q,
                 const float *__restrict__ scales,
                 const int8_t *__restrict__ zeros, Y *__restrict__ y,
                 int64_t in, int64_t out, int64_t groupSize, bool fast) {
  const int lane = threadIdx.x & 31;
  const int64_t warpsPerBlock = blockDim.x >> 5;
  const int64_t stride = int64_t(gridDim.x) * warpsPerBlock;
  const int64_t rowBytes = (in + 1) / 2;
  const int64_t groups = (in + groupSize - 1) / groupSize;
  for (int64_t row = int64_t(blockIdx.x) * warpsPerBlock + (threadIdx.x >> 5);
       row < out; row += stride) {
    const int8_t *qr = q + row * rowBytes;
    const float *sr = scales + row * groups;
    const int8_t *zr = zeros + row * groups;
    float acc = 0.0f;
    if (fast) {
      const uint32_t packs = uint32_t(in / 32);
      const uint32_t packsPerGroup = uint32_t(groupSize / 32);
      const int4 *qv = reinterpret_cast<const int4 *>(qr);
      const bool vec = aligned16(x);
      uint32_t v = lane;
      for (; v + 32 < packs; v += 64) {
        const int4 w0 = __ldg(qv + v), w1 = __ldg(qv + v + 32);
        const uint32_t g0 = v / packsPerGroup, g1 = (v + 32) / packsPerGroup;
        const float z0 = 8388608.0f + float(__ldg(zr + g0));
        const float z1 = 8388608.0f + float(__ldg(zr + g1));
        const float s0 = __ldg(sr + g0), s1 = __ldg(sr + g1);
        const T *x0 = x + int64_t(v) * 32, *x1 = x + int64_t(v + 32) * 32;
        const float p0 = vec ? dotW4<T, true>(w0, x0, z0)
                             : dotW4<T, false>(w0, x0, z0);
        const float p1 = vec ? dotW4<T, true>(w1, x1, z1)
                             : dotW4<T, false>(w1, x1, z1);
        acc = fmaf(s0, p0, acc);
        acc = fmaf(s1, p1, acc);
      }
      for (; v < packs; v += 32) {
        const int4 w0 = __ldg(qv + v);
        const uint32_t g0 = v / packsPerGroup;
        const float z0 = 8388608.0f + float(__ldg(zr + g0));
        const T *x0 = x + int64_t(v) * 32;
        const float p0 = vec ? dotW4<T, true>(w0, x0, z0)
                             : dotW4<T, false>(w0, x0, z0);
        acc = fmaf(__ldg(sr + g0), p0, acc);
      }
    } else {
      for (int64_t j = lane; j < rowBytes; j += 32) {
        const uint32_t b = uint8_t(__ldg(qr + j));
        const int64_t e = 2 * j, g = e / groupSize; // e, e + 1: same group
        const int z = __ldg(zr + g);
        float p = float(int(b & 15u) - z) * toF(x[e]);
        if (e + 1 < in)
          p = fmaf(float(int(b >> 4) - z), toF(x[e + 1]), p);
        acc = fmaf(__ldg(sr + g), p, acc);
      }
    }
    acc = warpSum(acc);
    if (lane == 0)
      y[row] = fromF<Y>(acc);
  }
}

/// y[m, o] = sum_k float(x[m, k]) * W[o, k] for x [n, in] of T, W the W4A16
/// weight dequantized while staging: W[o, k] = scales[o, g] * float(q[o, k]
/// - zeros[o, g]) (rounded once, as the CPU prefill tiles). The tiling of
/// linearW8TiledKernel (64 x 64 outputs a block, depth 32 a step, 4 x 4
/// float accumulators a thread); the group index is uniform per step when
/// groupSize % 32 == 0. Any shape, any alignment.
template <typename T, typename Y>
__global__ void __launch_bounds__(kW8Threads)
    linearW4TiledKernel(const T *__restrict__ x, const int8_t *__restrict__ q,
                        const float *__restrict__ scales,
                        const int8_t *__restrict__ zeros, Y *__restrict__ y,
                        int64_t n, int64_t in, int64_t out,
                        int64_t groupSize) {
  __shared__ __align__(16) float xs[kW8TileK][kW8TileM + 4];
  __shared__ __align__(16) float ws[kW8TileK][kW8TileN + 4];
  const int tid = threadIdx.x;
  const int tx = tid % (kW8TileN / 4), ty = tid / (kW8TileN / 4);
  const int64_t m0 = int64_t(blockIdx.y) * kW8TileM;
  const int64_t o0 = int64_t(blockIdx.x) * kW8TileN;
  const int64_t rowBytes = (in + 1) / 2;
  const int64_t groups = (in + groupSize - 1) / groupSize;
  const bool uniformGroup = groupSize % kW8TileK == 0;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < in; k0 += kW8TileK) {
    const int64_t gStep = uniformGroup ? k0 / groupSize : 0;
#pragma unroll
    for (int i = 0; i < kW8TileM * kW8TileK / kW8Threads; ++i) {
      const int e = tid + i * kW8Threads;
      const int r = e / kW8TileK, k = e % kW8TileK;
      const int64_t m = m0 + r, kk = k0 + k;
      xs[k][r] = (m < n && kk < in) ? toF(x[m * in + kk]) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kW8TileN * kW8TileK / kW8Threads; ++i) {
      const int e = tid + i * kW8Threads;
      const int r = e / kW8TileK, k = e % kW8TileK;
      const int64_t o = o0 + r, kk = k0 + k;
      float wv = 0.0f;
      if (o < out && kk < in) {
        const uint32_t b = uint8_t(q[o * rowBytes + (kk >> 1)]);
        const int nib = int((kk & 1) ? b >> 4 : b & 15u);
        const int64_t g = uniformGroup ? gStep : kk / groupSize;
        wv = __fmul_rn(scales[o * groups + g],
                       float(nib - int(zeros[o * groups + g])));
      }
      ws[k][r] = wv;
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < kW8TileK; ++k) {
      const float4 a = *reinterpret_cast<const float4 *>(&xs[k][ty * 4]);
      const float4 b = *reinterpret_cast<const float4 *>(&ws[k][tx * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t o = o0 + tx * 4 + j;
    if (o >= out)
      continue;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t m = m0 + ty * 4 + i;
      if (m < n)
        y[m * out + o] = fromF<Y>(acc[i][j]);
    }
  }
}

//===----------------------------------------------------------------------===//
// RoPE (Su et al. 2021, RoFormer eq. 34), adjacent-pair layout
//===----------------------------------------------------------------------===//

/// One thread per (row, head, pair slot i < ceil(head_dim / 2)). For
/// i < rot_dim / 2 it rotates (x[2i], x[2i+1]) by p * theta^(-2i/head_dim),
/// p = *dPos + row; other slots copy through. The CPU computes
/// freq = 1 / powf(theta, float(2i) / float(head_dim)) and cosf / sinf of
/// float(p) * freq in float with glibc (correctly rounded in practice); the
/// device evaluates pow / cos / sin in double and rounds to float, which
/// reproduces those float values (CUDA's powf / cosf are only 2 to 4 ulp,
/// amplified by p at long positions). In-place (x == y) is safe.
template <typename T>
__global__ void __launch_bounds__(256)
    ropeKernel(const T *x, T *y, int64_t n, int64_t heads, int64_t headDim,
               int64_t rotDim, float theta, const int64_t *__restrict__ dPos) {
  const int64_t slots = (headDim + 1) / 2;
  const int64_t pairs = rotDim / 2;
  const int64_t total = n * heads * slots;
  const int64_t p0 = *dPos;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % slots;
    const int64_t rowHead = e / slots; // row * heads + head
    const int64_t row = rowHead / heads;
    const int64_t base = rowHead * headDim + 2 * i;
    if (i < pairs) {
      float expo = float(2 * i) / float(headDim);
      float freq = 1.0f / float(pow(double(theta), double(expo)));
      float val = float(p0 + row) * freq;
      float fcr = float(cos(double(val))), fci = float(sin(double(val)));
      float v0 = toF(x[base]), v1 = toF(x[base + 1]);
      y[base] = fromF<T>(v0 * fcr - v1 * fci);
      y[base + 1] = fromF<T>(v0 * fci + v1 * fcr);
      continue;
    }
    y[base] = x[base];
    if (2 * i + 1 < headDim)
      y[base + 1] = x[base + 1];
  }
}

/// ropeKernel with scaled inverse frequencies (kernel_abi.h
/// kiln_k_rope_scaled / kiln_k_rope_factors; kiln_rt/rope_scaling.h):
/// `factors` non-null gives theta^(-2i/head_dim) / factors[i], else the
/// `scaling` rule with theta from kiln_rope_theta for L = *dPos + n. The
/// frequency is computed with the device's powf (a few ulp from the CPU).
template <typename T>
__global__ void __launch_bounds__(256)
    ropeScaledKernel(const T *x, T *y, int64_t n, int64_t heads,
                     int64_t headDim, int64_t rotDim, float theta,
                     int64_t scaling, float factor, float low, float high,
                     int64_t originalMax, const float *__restrict__ factors,
                     const int64_t *__restrict__ dPos) {
  const int64_t slots = (headDim + 1) / 2;
  const int64_t pairs = rotDim / 2;
  const int64_t total = n * heads * slots;
  const int64_t p0 = *dPos;
  const float t = factors ? theta
                          : kiln_rope_theta(theta, rotDim, scaling, factor,
                                            originalMax, p0 + n);
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % slots;
    const int64_t rowHead = e / slots;
    const int64_t row = rowHead / heads;
    const int64_t base = rowHead * headDim + 2 * i;
    if (i < pairs) {
      float freq =
          factors ? 1.0f / powf(theta, float(2 * i) / float(headDim)) /
                        factors[i]
                  : kiln_rope_inv_freq(i, headDim, rotDim, t, scaling, factor,
                                       low, high, originalMax);
      float val = float(p0 + row) * freq;
      float fcr = float(cos(double(val))), fci = float(sin(double(val)));
      float v0 = toF(x[base]), v1 = toF(x[base + 1]);
      y[base] = fromF<T>(v0 * fcr - v1 * fci);
      y[base + 1] = fromF<T>(v0 * fci + v1 * fcr);
      continue;
    }
    y[base] = x[base];
    if (2 * i + 1 < headDim)
      y[base + 1] = x[base + 1];
  }
}

/// y = x + b per row (kernel_abi.h kiln_k_add_bias).
template <typename T>
__global__ void __launch_bounds__(256)
    addBiasKernel(const T *x, const T *b, T *y, int64_t n, int64_t width) {
  const int64_t total = n * width;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x)
    y[e] = fromF<T>(toF(x[e]) + toF(b[e % width]));
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// Stores k, v ([n, kvDim]) at rows [p, p + n) of the caches ([maxSeq, kvDim]),
/// p = *dPos; rows >= maxSeq are dropped. k may already be the cache slot
/// (identity copy); partially overlapping buffers are not supported.
template <typename T>
__global__ void __launch_bounds__(256)
    kvAppendKernel(const T *k, const T *v, T *kCache, T *vCache, int64_t n,
                   int64_t kvDim, int64_t maxSeq,
                   const int64_t *__restrict__ dPos) {
  const int64_t p = *dPos;
  const int64_t total = n * kvDim;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = p + e / kvDim;
    if (row < 0 || row >= maxSeq)
      continue;
    const int64_t off = row * kvDim + e % kvDim;
    kCache[off] = k[e];
    vCache[off] = v[e];
  }
}

/// How the attention kernels read the KV cache: element `off` of the K / V
/// cache (row `row`, kv head `kvh`) is kScale(row, kvh) * kAt(off) (V alike),
/// plus m_t[kvh, d] for the keys of a trait with kCentered (KvCentered).
/// KvPlain: a T cache, scale 1 (x * 1.0f == x, folded away).
template <typename T> struct KvPlain {
  static constexpr bool kCentered = false;
  const T *__restrict__ k;
  const T *__restrict__ v;
  __device__ __forceinline__ float kScale(int64_t, int) const { return 1.0f; }
  __device__ __forceinline__ float vScale(int64_t, int) const { return 1.0f; }
  __device__ __forceinline__ float kAt(int64_t off) const { return toF(k[off]); }
  __device__ __forceinline__ float vAt(int64_t off) const { return toF(v[off]); }
};
/// KvInt8: int8 caches with float scales [max_seq][kv_heads] (kv=int8).
struct KvInt8 {
  static constexpr bool kCentered = false;
  const int8_t *__restrict__ k;
  const int8_t *__restrict__ v;
  const float *__restrict__ ks;
  const float *__restrict__ vs;
  int kvHeads;
  __device__ __forceinline__ float kScale(int64_t row, int kvh) const {
    return ks[row * kvHeads + kvh];
  }
  __device__ __forceinline__ float vScale(int64_t row, int kvh) const {
    return vs[row * kvHeads + kvh];
  }
  __device__ __forceinline__ float kAt(int64_t off) const {
    return float(k[off]);
  }
  __device__ __forceinline__ float vAt(int64_t off) const {
    return float(v[off]);
  }
};

/// Rotated calibrated key mean of one channel d of kv head h along positions
/// (kernel_abi.h, centered keys): m_t[h, d] = float(a c + b s + 0) with
/// (c, s) = (cos, sin)(t w_i), (a, b) = (mu[2i], -mu[2i+1]) for d = 2i and
/// (mu[2i+1], mu[2i]) for d = 2i + 1 (i < rotDim / 2, w_i = theta^(-2i /
/// headDim), all double), (a, b) = (mu[d], 0) and w = 0 beyond (+ 0 turns -0
/// into +0: a zero mean leaves keys bit for bit). seek(t) evaluates cos / sin
/// exactly, next() moves to t + 1 by complex multiplication with e^(i w)
/// (the brief's anchored recurrence: a few dozen steps stay within 1e-14).
struct KeyMeanChannel {
  double a, b, w, cw, sw, c, s;
  __device__ void init(const float *__restrict__ mu, int h, int d, int headDim,
                       int rotDim, float theta) {
    const float *mh = mu + int64_t(h) * headDim;
    const int i = d / 2;
    if (i < rotDim / 2) {
      const double m0 = mh[2 * i], m1 = mh[2 * i + 1];
      a = d % 2 == 0 ? m0 : m1;
      b = d % 2 == 0 ? -m1 : m0;
      w = pow(double(theta), -double(2 * i) / double(headDim));
      sincos(w, &sw, &cw);
    } else {
      a = mh[d];
      b = 0.0;
      w = 0.0;
      cw = 1.0;
      sw = 0.0;
    }
    c = 1.0;
    s = 0.0;
  }
  __device__ __forceinline__ void seek(int64_t t) {
    sincos(double(t) * w, &s, &c);
  }
  __device__ __forceinline__ float value() const {
    return float(a * c + b * s + 0.0);
  }
  __device__ __forceinline__ void next() {
    const double c1 = c * cw - s * sw;
    s = c * sw + s * cw;
    c = c1;
  }
};

/// Most head dims one lane covers in the append kernels (head_dim <= 256).
constexpr int kAppendLaneDims = KILN_CUDA_ATTN_MAX_HEAD_DIM / 32;

/// m_t[h, d] of row `row` for the lane's dims d = lane + 32 j (kernel_abi.h,
/// centered keys; 0 where d >= headDim), or all 0 when mu is null: the
/// append kernels quantize x - m[j] (x - 0 == x, also for -0).
__device__ __forceinline__ void
keyMeanLanes(float (&m)[kAppendLaneDims], const float *__restrict__ mu, int h,
             int headDim, int rotDim, float theta, int64_t row, int lane) {
#pragma unroll
  for (int j = 0; j < kAppendLaneDims; ++j) {
    const int d = lane + 32 * j;
    m[j] = 0.0f;
    if (mu != nullptr && d < headDim) {
      KeyMeanChannel ch;
      ch.init(mu, h, d, headDim, rotDim, theta);
      ch.seek(row);
      m[j] = ch.value();
    }
  }
}

/// KvCentered<KvInt8 | KvFp8>: an 8-bit cache whose keys hold k - m_t
/// (kernel_abi.h, kiln_k_attention_kv8_centered): the attention kernels read
/// keys as kScale * kAt + m_t, m_t from KeyMeanChannel with kMean (a device
/// pointer, float [kv_heads * head_dim]), rotDim and theta.
template <typename Kv> struct KvCentered : Kv {
  static constexpr bool kCentered = true;
  const float *__restrict__ kMean;
  int rotDim;
  float theta;
};

/// INT8 KV append (kernel_abi.h, kiln_k_attention_kv8): one warp per (new
/// token i, kv head h, K or V). amax = max_d |x[d]| by warp reduction, scale =
/// amax / 127, q = clamp(roundf(x / scale), -127, 127) (0 when scale == 0),
/// with correctly rounded divisions (__fdiv_rn: same bits as the CPU even
/// under --use_fast_math). Rows p + i >= maxSeq are dropped. With kMean (the
/// centered caches) keys are quantized as x - m_t (keyMeanLanes).
template <typename T>
__global__ void __launch_bounds__(256)
    kvAppendInt8Kernel(const T *__restrict__ k, const T *__restrict__ v,
                       int8_t *__restrict__ kCache, int8_t *__restrict__ vCache,
                       float *__restrict__ kScales, float *__restrict__ vScales,
                       int64_t n, int kvHeads, int headDim, int64_t maxSeq,
                       const int64_t *__restrict__ dPos,
                       const float *__restrict__ kMean, int rotDim,
                       float theta) {
  const int64_t p = *dPos;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  const int64_t total = 2 * n * kvHeads;
  const int64_t kvDim = int64_t(kvHeads) * headDim;
  for (int64_t w = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
       w < total; w += warps) {
    const bool isV = w & 1;
    const int64_t ih = w >> 1, i = ih / kvHeads;
    const int h = int(ih % kvHeads);
    const int64_t row = p + i;
    if (row < 0 || row >= maxSeq)
      continue; // uniform over the warp
    const T *x = (isV ? v : k) + i * kvDim + int64_t(h) * headDim;
    float m[kAppendLaneDims];
    keyMeanLanes(m, isV ? nullptr : kMean, h, headDim, rotDim, theta, row,
                 lane);
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kAppendLaneDims; ++j)
      if (lane + 32 * j < headDim)
        amax = fmaxf(amax, fabsf(toF(x[lane + 32 * j]) - m[j]));
    amax = warpMax(amax);
    const float sc = __fdiv_rn(amax, 127.0f);
    int8_t *qd = (isV ? vCache : kCache) + row * kvDim + int64_t(h) * headDim;
#pragma unroll
    for (int j = 0; j < kAppendLaneDims; ++j) {
      const int d = lane + 32 * j;
      if (d >= headDim)
        break;
      float r = sc == 0.0f ? 0.0f : roundf(__fdiv_rn(toF(x[d]) - m[j], sc));
      r = fminf(127.0f, fmaxf(-127.0f, r));
      qd[d] = int8_t(r);
    }
    if (lane == 0)
      (isV ? vScales : kScales)[row * kvHeads + h] = sc;
  }
}

/// FP8 E4M3 (OCP 8-bit floating point spec v1.0, "E4M3": 1 sign, 4
/// exponent bits with bias 7, 3 mantissa bits, no infinities, S.1111.111 =
/// NaN, max normal 448) byte as float: exact (through __half, which holds
/// every E4M3 value). Hardware cvt on sm_89+, bit manipulation on sm_80.
__device__ __forceinline__ float e4m3ToF(uint8_t b) {
  return __half2float(__half(
      __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(b), __NV_E4M3)));
}

/// float to FP8 E4M3, round to nearest even, saturating finite values to
/// +-448 (__NV_SATFINITE; NaN stays NaN, 0x7F).
__device__ __forceinline__ uint8_t fToE4m3(float v) {
  return uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

/// KvFp8: FP8 E4M3 caches (bytes) with float scales [max_seq][kv_heads]
/// (kv=fp8).
struct KvFp8 {
  static constexpr bool kCentered = false;
  const uint8_t *__restrict__ k;
  const uint8_t *__restrict__ v;
  const float *__restrict__ ks;
  const float *__restrict__ vs;
  int kvHeads;
  __device__ __forceinline__ float kScale(int64_t row, int kvh) const {
    return ks[row * kvHeads + kvh];
  }
  __device__ __forceinline__ float vScale(int64_t row, int kvh) const {
    return vs[row * kvHeads + kvh];
  }
  __device__ __forceinline__ float kAt(int64_t off) const {
    return e4m3ToF(k[off]);
  }
  __device__ __forceinline__ float vAt(int64_t off) const {
    return e4m3ToF(v[off]);
  }
};

/// FP8 KV append (kernel_abi.h, kiln_k_attention_kvf8): one warp per (new
/// token i, kv head h, K or V). amax = max_d |x[d]| by warp reduction, scale
/// = amax / 448 (E4M3's largest finite value), code = e4m3(x / scale) with
/// round to nearest even and saturation to +-448 (0 when scale == 0);
/// correctly rounded divisions (__fdiv_rn), as the CPU. Rows p + i >= maxSeq
/// are dropped. With kMean (the centered caches) keys are quantized as
/// x - m_t (keyMeanLanes).
template <typename T>
__global__ void __launch_bounds__(256)
    kvAppendFp8Kernel(const T *__restrict__ k, const T *__restrict__ v,
                      uint8_t *__restrict__ kCache,
                      uint8_t *__restrict__ vCache, float *__restrict__ kScales,
                      float *__restrict__ vScales, int64_t n, int kvHeads,
                      int headDim, int64_t maxSeq,
                      const int64_t *__restrict__ dPos,
                      const float *__restrict__ kMean, int rotDim,
                      float theta) {
  const int64_t p = *dPos;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  const int64_t total = 2 * n * kvHeads;
  const int64_t kvDim = int64_t(kvHeads) * headDim;
  for (int64_t w = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
       w < total; w += warps) {
    const bool isV = w & 1;
    const int64_t ih = w >> 1, i = ih / kvHeads;
    const int h = int(ih % kvHeads);
    const int64_t row = p + i;
    if (row < 0 || row >= maxSeq)
      continue; // uniform over the warp
    const T *x = (isV ? v : k) + i * kvDim + int64_t(h) * headDim;
    float m[kAppendLaneDims];
    keyMeanLanes(m, isV ? nullptr : kMean, h, headDim, rotDim, theta, row,
                 lane);
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kAppendLaneDims; ++j)
      if (lane + 32 * j < headDim)
        amax = fmaxf(amax, fabsf(toF(x[lane + 32 * j]) - m[j]));
    amax = warpMax(amax);
    const float sc = __fdiv_rn(amax, 448.0f);
    uint8_t *qd = (isV ? vCache : kCache) + row * kvDim + int64_t(h) * headDim;
#pragma unroll
    for (int j = 0; j < kAppendLaneDims; ++j) {
      const int d = lane + 32 * j;
      if (d >= headDim)
        break;
      qd[d] =
          sc == 0.0f ? uint8_t(0) : fToE4m3(__fdiv_rn(toF(x[d]) - m[j], sc));
    }
    if (lane == 0)
      (isV ? vScales : kScales)[row * kvHeads + h] = sc;
  }
}

constexpr int kAttnWarps = 4;
constexpr int kAttnThreads = kAttnWarps * 32;
constexpr int kPrefillRowsPerWarp = 4;
constexpr int kPrefillBr = kAttnWarps * kPrefillRowsPerWarp; // query rows
constexpr int kPrefillBc = 32;                               // keys per tile

/// Dynamic shared memory of attnPrefillKernel: Q [Br][hd], K [Bc][hd + 1]
/// (padded: lane j reads row j, conflict-free), V [Bc][hd], all float.
inline size_t prefillSmemBytes(int headDim) {
  return sizeof(float) *
         size_t(kPrefillBr * headDim + kPrefillBc * (headDim + 1) +
                kPrefillBc * headDim);
}

/// Prefill attention, FlashAttention-2 (Dao 2023, Algorithm 1) on CUDA cores:
/// block = (tile of kPrefillBr query rows, query head h); it streams K/V tiles
/// of kPrefillBc cached keys through shared memory and keeps, per query row,
/// the running max m, running sum l and an unnormalised float accumulator:
///   m' = max(m, max_j s_j),  l' = l e^(m - m') + sum_j e^(s_j - m'),
///   acc' = acc e^(m - m') + sum_j e^(s_j - m') v_j,   out = acc / l.
/// Warp w owns rows w*R .. w*R + R - 1 (R = kPrefillRowsPerWarp). Scores: lane
/// j computes q_r . k_j for key j of the tile; P*V: lane owns dims lane + 32 t.
/// Causal: row i (absolute position p + i) sees keys [0, p + i]. HDM is
/// head_dim rounded up to a multiple of 32 (register accumulators).
template <typename T, int HDM, typename Kv>
__global__ void __launch_bounds__(kAttnThreads)
    attnPrefillKernel(const T *__restrict__ q, const Kv cache,
                      T *__restrict__ out,
                      int64_t n, int heads, int group, int headDim,
                      int64_t maxSeq, float scale,
                      const int64_t *__restrict__ dPos, int64_t window) {
  constexpr int kR = kPrefillRowsPerWarp, kT = HDM / 32;
  extern __shared__ float smem[];
  const int hd = headDim;
  float *sQ = smem;                       // [Br][hd]
  float *sK = sQ + kPrefillBr * hd;       // [Bc][hd + 1]
  float *sV = sK + kPrefillBc * (hd + 1); // [Bc][hd]

  const int64_t p = *dPos;
  const int h = blockIdx.y, kvh = h / group;
  const int64_t i0 = int64_t(blockIdx.x) * kPrefillBr;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t qDim = int64_t(heads) * hd;
  const int64_t kvDim = int64_t(heads / group) * hd;

  for (int e = threadIdx.x; e < kPrefillBr * hd; e += blockDim.x) {
    const int r = e / hd, d = e % hd;
    const int64_t qi = i0 + r;
    sQ[e] = qi < n ? toF(q[qi * qDim + int64_t(h) * hd + d]) : 0.0f;
  }
  const int64_t rows = n - i0 < kPrefillBr ? n - i0 : kPrefillBr;
  int64_t kEnd = p + i0 + rows; // keys [0, kEnd) cover every row of the tile
  if (kEnd > maxSeq)
    kEnd = maxSeq;

  float m[kR], l[kR], acc[kR][kT];
  int64_t last[kR]; // last visible key of the row, -1 for padding rows
  int64_t first[kR]; // first visible key (sliding window; else 0)
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int t = 0; t < kT; ++t)
      acc[r][t] = 0.0f;
    const int64_t qi = i0 + warp * kR + r;
    last[r] = qi < n ? p + qi : -1;
    first[r] = window > 0 && p + qi - window + 1 > 0 ? p + qi - window + 1 : 0;
  }
  // Sliding window: no row of the tile sees keys before its first row's.
  const int64_t kStart =
      window > 0 && p + i0 - window + 1 > 0 ? p + i0 - window + 1 : 0;

  // Centered keys: thread owns channels d = threadIdx.x + kAttnThreads c and
  // walks each tile's kPrefillBc keys with the m_t recurrence.
  constexpr int kCh =
      Kv::kCentered ? (HDM + kAttnThreads - 1) / kAttnThreads : 1;
  [[maybe_unused]] KeyMeanChannel km[kCh];
  if constexpr (Kv::kCentered) {
#pragma unroll
    for (int c = 0; c < kCh; ++c) {
      const int d = threadIdx.x + kAttnThreads * c;
      if (d < hd)
        km[c].init(cache.kMean, kvh, d, hd, cache.rotDim, cache.theta);
    }
  }

  for (int64_t kt = kStart; kt < kEnd; kt += kPrefillBc) {
    __syncthreads(); // previous tile fully consumed (and sQ written)
    for (int e = threadIdx.x; e < kPrefillBc * hd; e += blockDim.x) {
      const int j = e / hd, d = e % hd;
      const int64_t kj = kt + j;
      float kv = 0.0f, vv = 0.0f;
      if (kj < kEnd) {
        const int64_t off = kj * kvDim + int64_t(kvh) * hd + d;
        if constexpr (!Kv::kCentered)
          kv = cache.kScale(kj, kvh) * cache.kAt(off);
        vv = cache.vScale(kj, kvh) * cache.vAt(off);
      }
      if constexpr (!Kv::kCentered)
        sK[j * (hd + 1) + d] = kv;
      sV[j * hd + d] = vv;
    }
    if constexpr (Kv::kCentered) {
#pragma unroll
      for (int c = 0; c < kCh; ++c) {
        const int d = threadIdx.x + kAttnThreads * c;
        if (d >= hd)
          continue;
        km[c].seek(kt);
        for (int j = 0; j < kPrefillBc; ++j) {
          const int64_t kj = kt + j;
          float kv = 0.0f;
          if (kj < kEnd)
            kv = cache.kScale(kj, kvh) *
                     cache.kAt(kj * kvDim + int64_t(kvh) * hd + d) +
                 km[c].value();
          sK[j * (hd + 1) + d] = kv;
          km[c].next();
        }
      }
    }
    __syncthreads();

    // s[r] = q_r . k_lane for this warp's rows.
    float s[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r)
      s[r] = 0.0f;
    const float *kRow = sK + lane * (hd + 1);
    const float *qRows = sQ + warp * kR * hd;
    for (int d = 0; d < hd; ++d) {
      const float kd = kRow[d];
#pragma unroll
      for (int r = 0; r < kR; ++r)
        s[r] = fmaf(qRows[r * hd + d], kd, s[r]);
    }
    const int64_t kj = kt + lane;
    const int64_t tileKeys = kEnd - kt < kPrefillBc ? kEnd - kt : kPrefillBc;
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const float sr = (kj <= last[r] && kj >= first[r] && kj < kEnd)
                           ? s[r] * scale
                           : -INFINITY;
      const float mNew = fmaxf(m[r], warpMax(sr));
      const float pj = sr == -INFINITY ? 0.0f : expf(sr - mNew);
      const float alpha = m[r] == -INFINITY ? 0.0f : expf(m[r] - mNew);
      l[r] = l[r] * alpha + warpSum(pj);
      m[r] = mNew;
#pragma unroll
      for (int t = 0; t < kT; ++t)
        acc[r][t] *= alpha;
      for (int j = 0; j < int(tileKeys); ++j) {
        const float pjj = __shfl_sync(kFull, pj, j);
        const float *vRow = sV + j * hd;
#pragma unroll
        for (int t = 0; t < kT; ++t) {
          const int d = lane + 32 * t;
          if (d < hd)
            acc[r][t] = fmaf(pjj, vRow[d], acc[r][t]);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int64_t qi = i0 + warp * kR + r;
    if (qi >= n || !(l[r] > 0.0f))
      continue;
    const float inv = 1.0f / l[r];
    T *o = out + qi * qDim + int64_t(h) * hd;
#pragma unroll
    for (int t = 0; t < kT; ++t) {
      const int d = lane + 32 * t;
      if (d < hd)
        o[d] = fromF<T>(acc[r][t] * inv);
    }
  }
}

constexpr int kDecodeKeysPerStep = 8;

/// Decode attention, flash-decoding (Dao, Haziza, Massa, Sizov 2023,
/// "Flash-Decoding for long-context inference"), split phase: block =
/// (split s, query head h). The L = p + 1 visible keys are cut into gridDim.x
/// chunks of ceil(L / S); this block's chunk is [s * chunk, min(L, ...)),
/// possibly empty (the grid is fixed for graph capture while p changes).
/// Each warp walks keys kDecodeKeysPerStep at a time with lanes over head
/// dims (dims lane + 32 t: coalesced K/V row loads), keeps an online-softmax
/// state (m, l, acc); the block merges its 4 warp states and writes the
/// partial (m, l, acc[hd]) to partM/partL/partAcc[h * S + s]. An empty chunk
/// writes the neutral partial (-inf, 0, 0).
template <typename T, int HDM, typename Kv>
__global__ void __launch_bounds__(kAttnThreads)
    attnDecodeSplitKernel(const T *__restrict__ q, const Kv cache,
                          float *partM,
                          float *partL, float *partAcc, int heads, int group,
                          int headDim, int64_t maxSeq, float scale,
                          const int64_t *__restrict__ dPos, int64_t window) {
  constexpr int kT = HDM / 32, kKB = kDecodeKeysPerStep;
  __shared__ float sM[kAttnWarps], sL[kAttnWarps];
  __shared__ float sAcc[kAttnWarps][HDM];
  const int hd = headDim;
  const int64_t p = *dPos;
  int64_t L = p + 1;
  if (L > maxSeq)
    L = maxSeq;
  const int64_t S = gridDim.x, s = blockIdx.x;
  const int h = blockIdx.y, kvh = h / group;
  const int64_t kvDim = int64_t(heads / group) * hd;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Sliding window: keys [L - window, L) only.
  const int64_t lo = window > 0 && L - window > 0 ? L - window : 0;
  const int64_t chunk = (L - lo + S - 1) / S;
  const int64_t start = lo + s * chunk;
  const int64_t end = start + chunk < L ? start + chunk : L;

  float qr[kT], acc[kT];
  // Centered keys: m_t of the lane's dims, exact at each step's first key,
  // then the recurrence over its kKB keys.
  [[maybe_unused]] KeyMeanChannel km[Kv::kCentered ? kT : 1];
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    const int d = lane + 32 * t;
    qr[t] = d < hd ? toF(q[int64_t(h) * hd + d]) : 0.0f;
    acc[t] = 0.0f;
    if constexpr (Kv::kCentered)
      if (d < hd)
        km[t].init(cache.kMean, kvh, d, hd, cache.rotDim, cache.theta);
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t kb = start + int64_t(warp) * kKB; kb < end;
       kb += int64_t(kAttnWarps) * kKB) {
    if constexpr (Kv::kCentered) {
#pragma unroll
      for (int t = 0; t < kT; ++t)
        if (lane + 32 * t < hd)
          km[t].seek(kb);
    }
    float sc[kKB];
#pragma unroll
    for (int jj = 0; jj < kKB; ++jj) {
      float part = 0.0f;
      if (kb + jj < end) {
        const int64_t kr = (kb + jj) * kvDim + int64_t(kvh) * hd;
        const float ks = cache.kScale(kb + jj, kvh);
#pragma unroll
        for (int t = 0; t < kT; ++t) {
          const int d = lane + 32 * t;
          if (d >= hd)
            continue;
          float kd = ks * cache.kAt(kr + d);
          if constexpr (Kv::kCentered) {
            kd += km[t].value();
            km[t].next();
          }
          part = fmaf(qr[t], kd, part);
        }
      }
      sc[jj] = part;
    }
    float mt = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < kKB; ++jj) {
      sc[jj] = warpSum(sc[jj]);
      sc[jj] = kb + jj < end ? sc[jj] * scale : -INFINITY;
      mt = fmaxf(mt, sc[jj]);
    }
    const float mNew = fmaxf(m, mt); // finite: key kb < end is visible
    const float alpha = m == -INFINITY ? 0.0f : expf(m - mNew);
    l *= alpha;
#pragma unroll
    for (int t = 0; t < kT; ++t)
      acc[t] *= alpha;
#pragma unroll
    for (int jj = 0; jj < kKB; ++jj) {
      if (kb + jj >= end)
        break;
      const float pj = expf(sc[jj] - mNew);
      l += pj;
      const int64_t vr = (kb + jj) * kvDim + int64_t(kvh) * hd;
      const float vsc = cache.vScale(kb + jj, kvh);
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const int d = lane + 32 * t;
        if (d < hd)
          acc[t] = fmaf(pj, vsc * cache.vAt(vr + d), acc[t]);
      }
    }
    m = mNew;
  }

  if (lane == 0) {
    sM[warp] = m;
    sL[warp] = l;
  }
#pragma unroll
  for (int t = 0; t < kT; ++t)
    sAcc[warp][lane + 32 * t] = acc[t];
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w)
    M = fmaxf(M, sM[w]);
  float wgt[kAttnWarps];
  float lSum = 0.0f;
  for (int w = 0; w < kAttnWarps; ++w) {
    wgt[w] = sM[w] == -INFINITY ? 0.0f : expf(sM[w] - M);
    lSum += wgt[w] * sL[w];
  }
  const int64_t slot = int64_t(h) * S + s;
  if (threadIdx.x == 0) {
    partM[slot] = M;
    partL[slot] = lSum;
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w)
      a = fmaf(wgt[w], sAcc[w][d], a);
    partAcc[slot * hd + d] = a;
  }
}

/// Flash-decoding reduce phase: out[h, d] = sum_s w_s acc_s[d] / sum_s w_s l_s
/// with w_s = e^(m_s - max_s m_s) (0 for neutral partials). One block per head.
template <typename T>
__global__ void __launch_bounds__(kAttnThreads)
    attnDecodeReduceKernel(const float *__restrict__ partM,
                           const float *__restrict__ partL,
                           const float *__restrict__ partAcc, T *out,
                           int splits, int headDim) {
  const int h = blockIdx.x;
  const int64_t base = int64_t(h) * splits;
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s)
    M = fmaxf(M, partM[base + s]);
  float lSum = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float ms = partM[base + s];
    if (ms != -INFINITY)
      lSum = fmaf(expf(ms - M), partL[base + s], lSum);
  }
  const float inv = lSum > 0.0f ? 1.0f / lSum : 0.0f;
  for (int d = threadIdx.x; d < headDim; d += blockDim.x) {
    float a = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float ms = partM[base + s];
      if (ms != -INFINITY)
        a = fmaf(expf(ms - M), partAcc[(base + s) * headDim + d], a);
    }
    out[int64_t(h) * headDim + d] = fromF<T>(a * inv);
  }
}

/// Split count of decode attention: about 4 blocks per SM over all heads,
/// at least 32 keys per split at full length, at most
/// KILN_CUDA_ATTN_MAX_SPLITS. Fixed per (heads, max_seq) so graphs stay valid.
inline int decodeSplits(const kiln_cuda_ctx *ctx, int64_t heads,
                        int64_t maxSeq) {
  const int64_t sms = ctx->sm_count > 0 ? ctx->sm_count : 108;
  int64_t s = (4 * sms + heads - 1) / heads;
  const int64_t byLength = (maxSeq + 31) / 32;
  if (s > byLength)
    s = byLength;
  if (s > KILN_CUDA_ATTN_MAX_SPLITS)
    s = KILN_CUDA_ATTN_MAX_SPLITS;
  return int(s < 1 ? 1 : s);
}

template <typename T, int HDM, typename Kv>
inline void attentionLaunch(kiln_cuda_ctx *ctx, const T *q, const Kv &cache,
                            T *out, int64_t n, int64_t heads,
                            int64_t kvHeads, int64_t headDim, int64_t maxSeq,
                            float scale, int64_t window) {
  cudaStream_t stream = streamOf(ctx);
  const int group = int(heads / kvHeads);
  if (n == 1) {
    const int splits = decodeSplits(ctx, heads, maxSeq);
    const uint64_t need =
        kiln_cuda_attention_scratch_bytes(heads, headDim, splits);
    if (!KILN_CUDA_ARG(ctx,
                       ctx->workspace != nullptr &&
                           ctx->workspace_bytes >=
                               KILN_CUDA_ATTN_SCRATCH_OFFSET + need,
                       "kiln_cuda_attention",
                       "workspace too small for the flash-decoding scratch"))
      return;
    float *partM = reinterpret_cast<float *>(
        static_cast<uint8_t *>(ctx->workspace) + KILN_CUDA_ATTN_SCRATCH_OFFSET);
    float *partL = partM + heads * splits;
    float *partAcc = partL + heads * splits;
    attnDecodeSplitKernel<T, HDM, Kv>
        <<<dim3(unsigned(splits), unsigned(heads)), kAttnThreads, 0, stream>>>(
            q, cache, partM, partL, partAcc, int(heads), group,
            int(headDim), maxSeq, scale, ctx->d_pos, window);
    if (!KILN_CUDA_LAUNCHED(ctx, "attnDecodeSplitKernel<<<>>>"))
      return;
    attnDecodeReduceKernel<T><<<unsigned(heads), kAttnThreads, 0, stream>>>(
        partM, partL, partAcc, out, splits, int(headDim));
    KILN_CUDA_LAUNCHED(ctx, "attnDecodeReduceKernel<<<>>>");
    return;
  }
  const size_t smem = prefillSmemBytes(int(headDim));
  if (smem > 48 * 1024 &&
      !KILN_CUDA_CHECK(
          ctx, cudaFuncSetAttribute(attnPrefillKernel<T, HDM, Kv>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem))))
    return;
  const dim3 grid(unsigned((n + kPrefillBr - 1) / kPrefillBr), unsigned(heads));
  attnPrefillKernel<T, HDM, Kv><<<grid, kAttnThreads, smem, stream>>>(
      q, cache, out, n, int(heads), group, int(headDim), maxSeq, scale,
      ctx->d_pos, window);
  KILN_CUDA_LAUNCHED(ctx, "attnPrefillKernel<<<>>>");
}

/// Argument checks shared by the attention wrappers.
inline bool attentionArgsOk(kiln_cuda_ctx *ctx, const char *call,
                            int64_t heads, int64_t kvHeads, int64_t headDim,
                            int64_t maxSeq) {
  return KILN_CUDA_ARG(ctx,
                       heads > 0 && kvHeads > 0 && heads % kvHeads == 0 &&
                           heads <= 65535 && maxSeq > 0,
                       call, "heads must be a positive multiple of kv_heads") &&
         KILN_CUDA_ARG(ctx,
                       headDim >= 1 && headDim <= KILN_CUDA_ATTN_MAX_HEAD_DIM,
                       call, "head_dim outside [1, 256]");
}

/// Prefill / decode attention over `cache` (KvPlain, KvInt8 or KvFp8), HDM picked
/// from head_dim.
template <typename T, typename Kv>
inline void attentionDispatch(kiln_cuda_ctx *ctx, const T *q, const Kv &cache,
                              T *out, int64_t n, int64_t heads,
                              int64_t kvHeads, int64_t headDim, int64_t maxSeq,
                              float scale, int64_t window = 0) {
  if (headDim <= 32)
    return attentionLaunch<T, 32>(ctx, q, cache, out, n, heads, kvHeads,
                                  headDim, maxSeq, scale, window);
  if (headDim <= 64)
    return attentionLaunch<T, 64>(ctx, q, cache, out, n, heads, kvHeads,
                                  headDim, maxSeq, scale, window);
  if (headDim <= 128)
    return attentionLaunch<T, 128>(ctx, q, cache, out, n, heads, kvHeads,
                                   headDim, maxSeq, scale, window);
  attentionLaunch<T, 256>(ctx, q, cache, out, n, heads, kvHeads, headDim,
                          maxSeq, scale, window);
}

/// The 8-bit KV attention wrappers: `append` (kvAppendInt8Kernel /
/// kvAppendFp8Kernel) quantizes the new rows, then the prefill /
/// flash-decoding kernels read `cache` (KvInt8 / KvFp8), wrapped in
/// KvCentered with kCentered (keys relative to the rotated k_mean).
template <bool kCentered, typename T, typename Kv, typename Code>
inline void
attentionQuantKv(kiln_cuda_ctx *ctx, const char *call, const char *appendName,
                 void (*append)(const T *, const T *, Code *, Code *, float *,
                                float *, int64_t, int, int, int64_t,
                                const int64_t *, const float *, int, float),
                 const Kv &cache, const T *q, const T *k, const T *v,
                 Code *k_cache, Code *v_cache, float *k_scales, float *v_scales,
                 const float *k_mean, T *out, int64_t n, int64_t heads,
                 int64_t kv_heads, int64_t head_dim, int64_t rot_dim,
                 int64_t max_seq, float scale, float theta) {
  if (skip(ctx) || n <= 0)
    return;
  if (!attentionArgsOk(ctx, call, heads, kv_heads, head_dim, max_seq))
    return;
  if (kCentered &&
      !KILN_CUDA_ARG(ctx,
                     k_mean != nullptr && rot_dim >= 0 && rot_dim <= head_dim,
                     call, "needs k_mean and rot_dim in [0, head_dim]"))
    return;
  const int64_t warps = 2 * n * kv_heads; // (token, kv head, K|V)
  append<<<gridFor(ctx, warps * 32, 256), 256, 0, streamOf(ctx)>>>(
      k, v, k_cache, v_cache, k_scales, v_scales, n, int(kv_heads),
      int(head_dim), max_seq, ctx->d_pos, kCentered ? k_mean : nullptr,
      int(rot_dim), theta);
  if (!KILN_CUDA_LAUNCHED(ctx, appendName))
    return;
  if constexpr (kCentered)
    attentionDispatch(ctx, q,
                      KvCentered<Kv>{cache, k_mean, int(rot_dim), theta}, out,
                      n, heads, kv_heads, head_dim, max_seq, scale);
  else
    attentionDispatch(ctx, q, cache, out, n, heads, kv_heads, head_dim, max_seq,
                      scale);
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// llama2.c order: silu(g) = g * (1 / (1 + e^-g)), then times up.
struct SwigluOp {
  __device__ float operator()(float g, float u) const {
    g *= 1.0f / (1.0f + expf(-g));
    return g * u;
  }
};
struct SiluOp {
  __device__ float operator()(float x, float) const {
    return x * (1.0f / (1.0f + expf(-x)));
  }
};
struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MulOp {
  __device__ float operator()(float a, float b) const { return a * b; }
};

/// y[i] = op(a[i], b[i]) (b unused and may be null for unary ops). `vec`:
/// all pointers 16-aligned, so 16-byte packs, then a scalar tail.
template <typename T, typename Op, bool kUnary>
__global__ void __launch_bounds__(256)
    elementwiseKernel(const T *a, const T *b, T *y, int64_t count, bool vec) {
  constexpr int kN = Pack<T>::kN;
  Op op;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (vec) {
    const int64_t packs = count / kN;
    const Pack<T> *av = reinterpret_cast<const Pack<T> *>(a);
    const Pack<T> *bv = reinterpret_cast<const Pack<T> *>(b);
    Pack<T> *yv = reinterpret_cast<Pack<T> *>(y);
    for (int64_t i = tid; i < packs; i += stride) {
      const Pack<T> pa = av[i];
      const Pack<T> pb = kUnary ? pa : bv[i];
      Pack<T> py;
#pragma unroll
      for (int e = 0; e < kN; ++e)
        py.v[e] = fromF<T>(op(toF(pa.v[e]), kUnary ? 0.0f : toF(pb.v[e])));
      yv[i] = py;
    }
    done = packs * kN;
  }
  for (int64_t i = done + tid; i < count; i += stride)
    y[i] = fromF<T>(op(toF(a[i]), kUnary ? 0.0f : toF(b[i])));
}

template <typename T, typename Op, bool kUnary>
inline void elementwise(kiln_cuda_ctx *ctx, const char *name, const T *a,
                        const T *b, T *y, int64_t count) {
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  if (skip(ctx) || count <= 0)
    return;
  const bool vec = aligned16(a) && aligned16(y) && (kUnary || aligned16(b));
  const int64_t work = vec ? count / Pack<T>::kN + 1 : count;
  elementwiseKernel<T, Op, kUnary>
      <<<gridFor(ctx, work, 256), 256, 0, streamOf(ctx)>>>(a, b, y, count, vec);
  KILN_CUDA_LAUNCHED(ctx, name);
}

//===----------------------------------------------------------------------===//
// Sampling
//===----------------------------------------------------------------------===//

constexpr int kSampleThreads = 1024;
constexpr int kSampleCap = 2048; // candidates sorted in shared memory

template <int kUnused = 0>
__global__ void __launch_bounds__(kSampleThreads)
    argmaxKernel(const float *__restrict__ logits, int vocab,
                 int32_t *outToken) {
  __shared__ float shV[32];
  __shared__ int shI[32];
  const int best = blockArgmax(logits, vocab, shV, shI);
  if (threadIdx.x == 0)
    *outToken = best;
}

/// Softmax with temperature, top-k, top-p, inverse-CDF draw; the semantics of
/// the CPU sampler (runtime/src/tokenizer/Sampler.cpp, llama2.c run.c):
///   temperature == 0: argmax (first maximum).
///   e_i = exp(l_i / T - max_j l_j / T) (unnormalised probabilities, kept in
///   `e` = scratch[vocab]), Z = sum e_i.
///   top-k on (0 < k < vocab): the k most probable tokens (ties: lower id),
///     sorted by probability; with top-p in (0, 1) the shortest prefix whose
///     cumulative mass exceeds top_p times the kept mass; draw r = coin * kept
///     mass over the prefix in sorted order.
///   top-p only: candidates e_i >= (1 - top_p) / (vocab - 1) * Z (run.c's
///     prefilter, at most kSampleCap of the most probable), sorted, shortest
///     prefix with mass > top_p * Z, draw as above.
///   neither: draw r = coin * Z over token-id order.
/// Kept sets are found by a 4-pass 8-bit radix select on the float bits of e
/// (non-negative floats order like their bit patterns), gathered into shared
/// memory and bitonic-sorted by (probability desc, id asc). One block.
/// Results match the CPU sampler's distribution exactly and its token for a
/// given coin except where float summation order moves a CDF boundary.
template <int kUnused = 0>
__global__ void __launch_bounds__(kSampleThreads)
    sampleKernel(const float *__restrict__ logits, int vocab, float temperature,
                 int topK, float topP, const float *__restrict__ dCoin,
                 float *e, int32_t *outToken) {
  using ScanI = cub::BlockScan<int, kSampleThreads>;
  using ScanF = cub::BlockScan<float, kSampleThreads>;
  __shared__ union {
    typename ScanI::TempStorage i;
    typename ScanF::TempStorage f;
  } scanStorage;
  __shared__ float shV[32];
  __shared__ int shI[32];
  __shared__ unsigned hist[256];
  __shared__ float candV[kSampleCap];
  __shared__ int candI[kSampleCap];
  __shared__ float cum[kSampleCap];
  __shared__ unsigned sPrefix;
  __shared__ int sRemaining, sCount, sFound;
  const int tid = threadIdx.x;

  if (temperature == 0.0f) {
    const int best = blockArgmax(logits, vocab, shV, shI);
    if (tid == 0)
      *outToken = best;
    return;
  }
  const float coin = *dCoin;

  float mx = -INFINITY;
  for (int i = tid; i < vocab; i += blockDim.x)
    mx = fmaxf(mx, logits[i] / temperature);
  const float M = blockMax(mx, shV);
  float z = 0.0f;
  for (int i = tid; i < vocab; i += blockDim.x) {
    const float ei = expf(logits[i] / temperature - M);
    e[i] = ei;
    z += ei;
  }
  const float Z = blockSum(z, shV); // its barriers publish e[] to the block

  const bool useK = topK > 0 && topK < vocab;
  const bool useP = topP > 0.0f && topP < 1.0f;
  if (!useK && !useP) {
    // Inverse CDF in id order, one block-wide chunk at a time.
    const float r = coin * Z;
    float base = 0.0f;
    for (int c = 0; c < vocab; c += blockDim.x) {
      const int i = c + tid;
      const float v = i < vocab ? e[i] : 0.0f;
      float incl, total;
      __syncthreads(); // scanStorage reuse
      ScanF(scanStorage.f).InclusiveSum(v, incl, total);
      if (tid == 0)
        sFound = vocab;
      __syncthreads();
      if (i < vocab && r < base + incl)
        atomicMin(&sFound, i);
      __syncthreads();
      if (sFound < vocab) {
        if (tid == 0)
          *outToken = sFound;
        return;
      }
      base += total;
    }
    if (tid == 0)
      *outToken = vocab - 1;
    return;
  }

  int want;
  if (useK) {
    want =
        topK < KILN_CUDA_SAMPLE_MAX_TOP_K ? topK : KILN_CUDA_SAMPLE_MAX_TOP_K;
  } else {
    const float cutoff = (1.0f - topP) / float(vocab - 1) * Z;
    float cnt = 0.0f;
    for (int i = tid; i < vocab; i += blockDim.x)
      cnt += e[i] >= cutoff ? 1.0f : 0.0f;
    const int count = int(blockSum(cnt, shV) + 0.5f);
    want = count < 1 ? 1 : (count > kSampleCap ? kSampleCap : count);
  }

  // Radix select: tau = bits of the want-th largest e; `remaining` of the
  // elements equal to tau belong to the kept set.
  if (tid == 0) {
    sPrefix = 0;
    sRemaining = want;
  }
  unsigned mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    __syncthreads();
    for (int b = tid; b < 256; b += blockDim.x)
      hist[b] = 0;
    __syncthreads();
    const unsigned prefix = sPrefix;
    for (int i = tid; i < vocab; i += blockDim.x) {
      const unsigned u = __float_as_uint(e[i]);
      if ((u & mask) == prefix)
        atomicAdd(&hist[(u >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      int above = 0, rem = sRemaining;
      int b = 255;
      for (; b > 0; --b) {
        if (above + int(hist[b]) >= rem)
          break;
        above += int(hist[b]);
      }
      sRemaining = rem - above;
      sPrefix = prefix | (unsigned(b) << shift);
    }
    mask |= 255u << shift;
  }
  __syncthreads();
  const unsigned tau = sPrefix;
  const int ties = sRemaining;     // >= 1
  const int greater = want - ties; // elements strictly above tau
  if (tid == 0)
    sCount = 0;
  for (int i = tid; i < kSampleCap; i += blockDim.x) {
    candV[i] = -1.0f; // padding sorts last
    candI[i] = INT32_MAX;
  }
  __syncthreads();
  for (int i = tid; i < vocab; i += blockDim.x)
    if (__float_as_uint(e[i]) > tau) {
      const int slot = atomicAdd(&sCount, 1);
      candV[slot] = e[i];
      candI[slot] = i;
    }
  // Ties at tau in id order, a block-wide chunk at a time.
  int tieBase = 0;
  for (int c = 0; c < vocab && tieBase < ties; c += blockDim.x) {
    const int i = c + tid;
    const int flag = (i < vocab && __float_as_uint(e[i]) == tau) ? 1 : 0;
    int excl, total;
    __syncthreads();
    ScanI(scanStorage.i).ExclusiveSum(flag, excl, total);
    if (flag && tieBase + excl < ties) {
      candV[greater + tieBase + excl] = e[i];
      candI[greater + tieBase + excl] = i;
    }
    tieBase += total;
  }
  __syncthreads();

  // Bitonic sort, "before" = larger probability, then smaller id.
  for (int k = 2; k <= kSampleCap; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int t = tid; t < kSampleCap; t += blockDim.x) {
        const int o = t ^ j;
        if (o <= t)
          continue;
        const float vt = candV[t], vo = candV[o];
        const int it = candI[t], io = candI[o];
        const bool oFirst = vo > vt || (vo == vt && io < it);
        const bool tFirst = vt > vo || (vt == vo && it < io);
        if ((t & k) == 0 ? oFirst : tFirst) {
          candV[t] = vo;
          candV[o] = vt;
          candI[t] = io;
          candI[o] = it;
        }
      }
      __syncthreads();
    }

  // Inclusive prefix sums in sorted order (blocked: 2 items per thread).
  constexpr int kItems = kSampleCap / kSampleThreads;
  {
    float in[kItems], outv[kItems];
    for (int it = 0; it < kItems; ++it) {
      const int idx = tid * kItems + it;
      in[it] = idx < want ? candV[idx] : 0.0f;
    }
    __syncthreads();
    ScanF(scanStorage.f).InclusiveSum(in, outv);
    for (int it = 0; it < kItems; ++it)
      cum[tid * kItems + it] = outv[it];
  }
  __syncthreads();

  int lastIdx = want - 1;
  float total = cum[want - 1];
  if (useP) {
    const float limit = useK ? topP * total : topP * Z;
    if (tid == 0)
      sFound = want - 1;
    __syncthreads();
    for (int i = tid; i < want; i += blockDim.x)
      if (cum[i] > limit)
        atomicMin(&sFound, i);
    __syncthreads();
    lastIdx = sFound;
    total = cum[lastIdx];
    __syncthreads();
  }
  const float r = coin * total;
  if (tid == 0)
    sFound = lastIdx;
  __syncthreads();
  for (int i = tid; i <= lastIdx; i += blockDim.x)
    if (r < cum[i])
      atomicMin(&sFound, i);
  __syncthreads();
  if (tid == 0)
    *outToken = candI[sFound];
}

//===----------------------------------------------------------------------===//
// GGML block formats (kiln_rt/block_formats.h): weights kept as GGUF stores
// them, decoded in registers / shared memory by the shared codec
//===----------------------------------------------------------------------===//

/// out[i, :] = decode(table row tokens[i]) (zeros for an id outside
/// [0, vocab)); a CUDA block per token, a thread per GGML block of the row.
template <int64_t F>
__global__ void __launch_bounds__(256)
    blockEmbeddingKernel(const int32_t *__restrict__ tokens, int64_t n,
                         const uint8_t *__restrict__ table, int64_t vocab,
                         int64_t dim, float *__restrict__ out) {
  constexpr int64_t E = kiln_block_elems(F), B = kiln_block_bytes(F);
  const int64_t blocks = dim / E;
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t tok = tokens[i];
    const bool ok = tok >= 0 && tok < vocab;
    float *dst = out + i * dim;
    for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) {
      if (ok) {
        kiln_block_decode(F, table + (tok * blocks + b) * B, dst + b * E);
      } else {
        for (int64_t e = 0; e < E; ++e)
          dst[b * E + e] = 0.0f;
      }
    }
  }
}

/// Decode GEMV: y[r] = sum_j W[r, j] * x[j]; a warp per row (grid-stride),
/// lane l decodes blocks l, l + 32, ... into registers and dots them with x;
/// float accumulation, warp-shuffle reduction.
template <int64_t F>
__global__ void __launch_bounds__(kGemvThreads)
    blockGemvKernel(const float *__restrict__ x, const uint8_t *__restrict__ w,
                    float *__restrict__ y, int64_t in, int64_t out) {
  constexpr int64_t E = kiln_block_elems(F), B = kiln_block_bytes(F);
  const int64_t blocks = in / E, rowBytes = blocks * B;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  float buf[E];
  for (int64_t r = int64_t(blockIdx.x) * warps + warp; r < out;
       r += int64_t(gridDim.x) * warps) {
    const uint8_t *row = w + r * rowBytes;
    float acc = 0.0f;
    for (int64_t b = lane; b < blocks; b += 32) {
      kiln_block_decode(F, row + b * B, buf);
      const float *xb = x + b * E;
#pragma unroll 8
      for (int64_t j = 0; j < E; ++j)
        acc = fmaf(buf[j], xb[j], acc);
    }
    acc = warpSum(acc);
    if (lane == 0)
      y[r] = acc;
  }
}

constexpr int kBlockTileRows = 16, kBlockTileTokens = 16, kBlockTileDepth = 256;

/// Prefill GEMM: y[n, out] = x[n, in] * W^T, a 16 x 16 (rows x tokens) output
/// tile per CUDA block of 256 threads. Per step of kBlockTileDepth inputs the
/// block decodes its 16 weight rows (whole GGML blocks) and stages 16 token
/// rows of x in shared memory, then each thread accumulates its output over
/// the step in float. `in` is a multiple of the block length, so a step
/// (the last may be shorter) covers whole blocks.
template <int64_t F>
__global__ void __launch_bounds__(256)
    blockGemmKernel(const float *__restrict__ x, const uint8_t *__restrict__ w,
                    float *__restrict__ y, int64_t n, int64_t in, int64_t out) {
  constexpr int64_t E = kiln_block_elems(F), B = kiln_block_bytes(F);
  constexpr int TR = kBlockTileRows, TT = kBlockTileTokens, TK = kBlockTileDepth;
  __shared__ float ws[TR][TK + 1];
  __shared__ float xs[TT][TK + 1];
  const int64_t r0 = int64_t(blockIdx.x) * TR, t0 = int64_t(blockIdx.y) * TT;
  const int tid = threadIdx.x, tr = tid / TT, tt = tid % TT;
  const int64_t rowBytes = in / E * B;
  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < in; k0 += TK) {
    const int depth = int(in - k0 < TK ? in - k0 : TK);
    const int perRow = depth / int(E);
    for (int u = tid; u < TR * perRow; u += blockDim.x) {
      const int rr = u / perRow, bb = u % perRow;
      const int64_t r = r0 + rr;
      if (r < out) {
        kiln_block_decode(F, w + r * rowBytes + (k0 / E + bb) * B,
                          &ws[rr][bb * E]);
      } else {
        for (int64_t e = 0; e < E; ++e)
          ws[rr][bb * E + e] = 0.0f;
      }
    }
    for (int u = tid; u < TT * depth; u += blockDim.x) {
      const int t = u / depth, k = u % depth;
      xs[t][k] = t0 + t < n ? x[(t0 + t) * in + k0 + k] : 0.0f;
    }
    __syncthreads();
    for (int k = 0; k < depth; ++k)
      acc = fmaf(ws[tr][k], xs[tt][k], acc);
    __syncthreads();
  }
  if (r0 + tr < out && t0 + tt < n)
    y[(t0 + tt) * out + r0 + tr] = acc;
}

} // namespace kiln_cuda_detail

//===----------------------------------------------------------------------===//
// Host wrappers
//===----------------------------------------------------------------------===//

/// out[i, :] = table[tokens[i], :]. tokens int32 [n] (device), table T
/// [vocab, dim], out T [n, dim].
template <typename T>
inline void kiln_cuda_embedding(kiln_cuda_ctx *ctx, const int32_t *tokens,
                                int64_t n, const T *table, int64_t vocab,
                                int64_t dim, T *out) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  if (skip(ctx) || n <= 0 || dim <= 0)
    return;
  const bool vec = aligned16(table) && aligned16(out) &&
                   (dim * int64_t(sizeof(T))) % 16 == 0;
  const unsigned grid = unsigned(n < 65535 ? n : 65535);
  embeddingKernel<T>
      <<<grid, 256, 0, streamOf(ctx)>>>(tokens, n, table, vocab, dim, out, vec);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_embedding<<<>>>");
}

/// GGML block formats (kernel_abi.h kiln_k_embedding_blocks): out float
/// [n, dim] = decoded rows of table ([vocab, dim] in block format `format`,
/// a kiln_block_format id). An unknown format is refused
/// (cudaErrorInvalidValue).
inline void kiln_cuda_embedding_blocks(kiln_cuda_ctx *ctx,
                                       const int32_t *tokens, int64_t n,
                                       const int8_t *table, int64_t vocab,
                                       int64_t dim, float *out,
                                       int64_t format) {
  using namespace kiln_cuda_detail;
  if (skip(ctx) || n <= 0 || dim <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, kiln_block_elems(format) > 0 &&
                              dim % kiln_block_elems(format) == 0,
                     "kiln_cuda_embedding_blocks",
                     "unknown block format or dim not whole blocks"))
    return;
  const unsigned grid = unsigned(n < 65535 ? n : 65535);
  const auto *t = reinterpret_cast<const uint8_t *>(table);
  switch (format) {
#define KILN_BLOCK_CASE(f)                                                    \
  case f:                                                                     \
    blockEmbeddingKernel<f>                                                   \
        <<<grid, 256, 0, streamOf(ctx)>>>(tokens, n, t, vocab, dim, out);     \
    break;
    KILN_BLOCK_FORMATS(KILN_BLOCK_CASE)
#undef KILN_BLOCK_CASE
  default:
    break;
  }
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_embedding_blocks<<<>>>");
}

/// GGML block formats (kernel_abi.h kiln_k_linear_blocks): y float [n, out]
/// = x float [n, in] * W^T, W [out, in] in block format `format`. n == 1: a
/// warp-per-row GEMV decoding in registers; n > 1: a 16 x 16 tiled SIMT GEMM
/// decoding weight tiles into shared memory (float accumulation, no
/// workspace). An unknown format or an `in` that is not whole blocks is
/// refused (cudaErrorInvalidValue).
inline void kiln_cuda_linear_blocks(kiln_cuda_ctx *ctx, const float *x,
                                    const int8_t *w, float *y, int64_t n,
                                    int64_t in, int64_t out, int64_t format) {
  using namespace kiln_cuda_detail;
  if (skip(ctx) || n <= 0 || out <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, kiln_block_elems(format) > 0 &&
                              in % kiln_block_elems(format) == 0,
                     "kiln_cuda_linear_blocks",
                     "unknown block format or in not whole blocks"))
    return;
  if (in <= 0) {
    KILN_CUDA_CHECK(ctx, cudaMemsetAsync(y, 0, size_t(n * out) * sizeof(float),
                                         streamOf(ctx)));
    return;
  }
  const auto *wb = reinterpret_cast<const uint8_t *>(w);
  if (n == 1) {
    const int warps = kGemvThreads / 32;
    int64_t blocks = (out + warps - 1) / warps;
    if (blocks > (int64_t(1) << 20))
      blocks = int64_t(1) << 20;
    switch (format) {
#define KILN_BLOCK_CASE(f)                                                    \
  case f:                                                                     \
    blockGemvKernel<f><<<unsigned(blocks), kGemvThreads, 0, streamOf(ctx)>>>( \
        x, wb, y, in, out);                                                   \
    break;
      KILN_BLOCK_FORMATS(KILN_BLOCK_CASE)
#undef KILN_BLOCK_CASE
    default:
      break;
    }
    KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_blocks(gemv)<<<>>>");
    return;
  }
  const int64_t gx = (out + kBlockTileRows - 1) / kBlockTileRows;
  const int64_t gy = (n + kBlockTileTokens - 1) / kBlockTileTokens;
  if (!KILN_CUDA_ARG(ctx, gx <= INT32_MAX && gy <= 65535,
                     "kiln_cuda_linear_blocks", "n or out too large"))
    return;
  const dim3 grid{unsigned(gx), unsigned(gy), 1u};
  switch (format) {
#define KILN_BLOCK_CASE(f)                                                    \
  case f:                                                                     \
    blockGemmKernel<f><<<grid, 256, 0, streamOf(ctx)>>>(x, wb, y, n, in, out); \
    break;
    KILN_BLOCK_FORMATS(KILN_BLOCK_CASE)
#undef KILN_BLOCK_CASE
  default:
    break;
  }
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_blocks(gemm)<<<>>>");
}

/// RMSNorm: y[i, :] = w * x[i, :] / sqrt(mean(x[i, :]^2) + eps). x, y T
/// [n, dim] (may alias), w T [dim].
template <typename T>
inline void kiln_cuda_rms_norm(kiln_cuda_ctx *ctx, const T *x, const T *w, T *y,
                               int64_t n, int64_t dim, float eps) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  if (skip(ctx) || n <= 0 || dim <= 0)
    return;
  const unsigned grid = unsigned(n < 65535 ? n : 65535);
  rmsNormKernel<T><<<grid, 256, 0, streamOf(ctx)>>>(x, w, y, n, dim, eps);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_rms_norm<<<>>>");
}

/// y[n, out] = x[n, in] * w[out, in]^T, row-major, float accumulation. x, w
/// of type T; y of type T or float (logits). n == 1: Kiln's GEMV; n > 1:
/// cuBLASLt (plans cached per shape; workspace = ctx->workspace up to
/// KILN_CUDA_GEMM_WORKSPACE_BYTES).
template <typename T, typename Y>
inline void kiln_cuda_linear(kiln_cuda_ctx *ctx, const T *x, const T *w, Y *y,
                             int64_t n, int64_t in, int64_t out) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  static_assert(std::is_same<Y, T>::value || std::is_same<Y, float>::value,
                "y must have the element type of x or be float");
  if (skip(ctx) || n <= 0 || out <= 0)
    return;
  if (in <= 0) { // empty sum: y = 0 (all-zero bits are 0.0 in every type)
    KILN_CUDA_CHECK(
        ctx, cudaMemsetAsync(y, 0, size_t(n * out) * sizeof(Y), streamOf(ctx)));
    return;
  }
  if (n == 1) {
    const int warps = kGemvThreads / 32;
    int64_t blocks = (out + warps - 1) / warps;
    if (blocks > (int64_t(1) << 20))
      blocks = int64_t(1) << 20;
    gemvKernel<T, Y><<<unsigned(blocks), kGemvThreads, 0, streamOf(ctx)>>>(
        x, w, y, in, out);
    KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear(gemv)<<<>>>");
    return;
  }
  ltLinear(ctx, x, w, y, n, in, out);
}

/// W8A16 linear layer (kernel_abi.h kiln_k_linear_w8a16): y[n, out] =
/// x[n, in] * W[out, in]^T; x of type T, qweight int8 [out, in] row-major,
/// y of type T or float (logits), float accumulation, rounded once to Y.
///   group_size == 0: per-output-channel scales float [out],
///     W[o, i] = scales[o] * qweight[o, i]; each output is
///     scales[o] * (float sum of x * q);
///   group_size > 0: group-wise scales float [out, ceil(in / group_size)]
///     (GGUF Q8_0 kept quantized: group_size 32),
///     W[o, i] = scales[o, i / group_size] * qweight[o, i].
/// n == 1: GEMV dequantizing in registers (16-byte loads, a warp per row;
/// grouped: when in and group_size are multiples of 16 and qweight is
/// 16-aligned, else element loads); n > 1: a tiled SIMT kernel with float
/// accumulation (grouped: dequantized while staging; every shape, no
/// cuBLASLt, no workspace). Any alignment. group_size < 0 is refused
/// (cudaErrorInvalidValue). group_size defaults to 0 so plans emitted before
/// the argument existed keep their per-channel meaning.
template <typename T, typename Y>
inline void kiln_cuda_linear_w8a16(kiln_cuda_ctx *ctx, const T *x,
                                   const int8_t *qweight, const float *scales,
                                   Y *y, int64_t n, int64_t in, int64_t out,
                                   int64_t group_size = 0) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  static_assert(std::is_same<Y, T>::value || std::is_same<Y, float>::value,
                "y must have the element type of x or be float");
  if (skip(ctx) || n <= 0 || out <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, group_size >= 0, "kiln_cuda_linear_w8a16",
                     "group_size must be 0 (per-channel) or positive"))
    return;
  if (in <= 0) { // empty sum: y = 0
    KILN_CUDA_CHECK(
        ctx, cudaMemsetAsync(y, 0, size_t(n * out) * sizeof(Y), streamOf(ctx)));
    return;
  }
  if (n == 1) {
    const int warps = kGemvThreads / 32;
    int64_t blocks = (out + warps - 1) / warps;
    if (blocks > (int64_t(1) << 20))
      blocks = int64_t(1) << 20;
    if (group_size > 0) {
      const bool fast = in % 16 == 0 && group_size % 16 == 0 &&
                        aligned16(qweight) && in / 16 < (int64_t(1) << 31);
      gemvW8GroupKernel<T, Y>
          <<<unsigned(blocks), kGemvThreads, 0, streamOf(ctx)>>>(
              x, qweight, scales, y, in, out, group_size, fast);
      KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_w8a16(gemv, grouped)<<<>>>");
      return;
    }
    gemvW8Kernel<T, Y><<<unsigned(blocks), kGemvThreads, 0, streamOf(ctx)>>>(
        x, qweight, scales, y, in, out);
    KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_w8a16(gemv)<<<>>>");
    return;
  }
  const int64_t gx = (out + kW8TileN - 1) / kW8TileN;
  const int64_t gy = (n + kW8TileM - 1) / kW8TileM;
  if (!KILN_CUDA_ARG(ctx, gx <= INT32_MAX && gy <= 65535,
                     "kiln_cuda_linear_w8a16", "n or out too large"))
    return;
  linearW8TiledKernel<T, Y>
      <<<dim3(unsigned(gx), unsigned(gy)), kW8Threads, 0, streamOf(ctx)>>>(
          x, qweight, scales, y, n, in, out, group_size);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_w8a16(tiled)<<<>>>");
}

/// Bytes of ctx->workspace kiln_cuda_linear_w8a8 uses for `rows` quantized
/// activation rows of `in` features: the row scales (float [rows], rounded
/// up to 256) then the int8 rows (stride ceil(in / 16) * 16).
constexpr uint64_t kiln_cuda_w8a8_scratch_bytes(int64_t rows, int64_t in) {
  return kiln_cuda_align256(uint64_t(rows) * sizeof(float)) +
         uint64_t(rows) * uint64_t((in + 15) / 16 * 16);
}

/// SmoothQuant W8A8 linear layer (kernel_abi.h kiln_k_linear_w8a8; Xiao et
/// al. 2023, "SmoothQuant", eq. 1 with per-token / per-tensor activation
/// and per-channel weight scales): x T [n, in] (T float, __half or
/// __nv_bfloat16), qweight int8 [out, in] row-major, scales float [out]
/// (per output channel), y T or float [n, out]:
///   sx[r] = act_scale > 0 ? act_scale                 (static per-tensor)
///                         : max_i |x[r, i]| / 127     (dynamic per-token)
///   xq[r, i] = clamp(roundf(x[r, i] / sx[r]), -127, 127)  (0 if sx[r] == 0)
///   y[r, o] = sx[r] * scales[o] * (float) sum_i (int32) xq[r, i] * q[o, i]
/// (products evaluated left to right, each rounded once; a zero row gives
/// y = 0). Two steps per chunk of rows: actQuantKernel writes xq and sx to
/// ctx->workspace (the cuBLASLt region [0, KILN_CUDA_GEMM_WORKSPACE_BYTES),
/// unused by this wrapper and free in stream order; rows are processed in
/// chunks that fit), then n == 1: a __dp4a GEMV (a warp per output row),
/// n > 1: a tiled __dp4a GEMM. The int32 sums are exact, so the result
/// matches the CPU kernel up to the final float rounding. act_scale must be
/// >= 0 and finite, in < 133143 (int32 range of the sums); any alignment.
template <typename T, typename Y>
inline void kiln_cuda_linear_w8a8(kiln_cuda_ctx *ctx, const T *x,
                                  const int8_t *qweight, const float *scales,
                                  Y *y, int64_t n, int64_t in, int64_t out,
                                  float act_scale) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  static_assert(std::is_same<Y, T>::value || std::is_same<Y, float>::value,
                "y must have the element type of x or be float");
  if (skip(ctx) || n <= 0 || out <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, act_scale >= 0.0f && act_scale <= 3.4e38f,
                     "kiln_cuda_linear_w8a8",
                     "act_scale must be 0 (per-token) or a finite positive "
                     "per-tensor scale") ||
      !KILN_CUDA_ARG(ctx, in < 133143, "kiln_cuda_linear_w8a8",
                     "in >= 133143 would overflow the int32 sums"))
    return;
  if (in <= 0) { // empty sum: y = 0
    KILN_CUDA_CHECK(
        ctx, cudaMemsetAsync(y, 0, size_t(n * out) * sizeof(Y), streamOf(ctx)));
    return;
  }
  const int64_t ld = (in + 15) / 16 * 16;
  uint64_t avail = ctx->workspace_bytes < KILN_CUDA_GEMM_WORKSPACE_BYTES
                       ? ctx->workspace_bytes
                       : KILN_CUDA_GEMM_WORKSPACE_BYTES;
  if (ctx->workspace == nullptr)
    avail = 0;
  // Largest chunk of rows whose scratch fits (at most 65535 tiles of 64).
  int64_t chunk = avail > 256 ? int64_t((avail - 256) / uint64_t(ld + 4)) : 0;
  if (chunk > n)
    chunk = n;
  if (chunk > int64_t(65535) * kW8A8TileM)
    chunk = int64_t(65535) * kW8A8TileM;
  if (!KILN_CUDA_ARG(ctx, chunk >= 1 && kiln_cuda_w8a8_scratch_bytes(chunk, in) <= avail,
                     "kiln_cuda_linear_w8a8",
                     "workspace too small for one quantized activation row"))
    return;
  const int64_t gx = (out + kW8A8TileN - 1) / kW8A8TileN;
  if (!KILN_CUDA_ARG(ctx, gx <= INT32_MAX, "kiln_cuda_linear_w8a8",
                     "out too large"))
    return;
  float *sx = static_cast<float *>(ctx->workspace);
  int8_t *xq = static_cast<int8_t *>(ctx->workspace) +
               kiln_cuda_align256(uint64_t(chunk) * sizeof(float));
  cudaStream_t stream = streamOf(ctx);
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t m = n - r0 < chunk ? n - r0 : chunk;
    const unsigned qGrid = unsigned(m < 65535 ? m : 65535);
    actQuantKernel<T><<<qGrid, 256, 0, stream>>>(x + r0 * in, xq, sx, m, in,
                                                 ld, act_scale);
    if (!KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_w8a8(quantize)<<<>>>"))
      return;
    if (n == 1) {
      const int warps = kGemvThreads / 32;
      int64_t blocks = (out + warps - 1) / warps;
      if (blocks > (int64_t(1) << 20))
        blocks = int64_t(1) << 20;
      const bool fast = in % 16 == 0 && aligned16(qweight);
      gemvW8A8Kernel<Y><<<unsigned(blocks), kGemvThreads, 0, stream>>>(
          xq, sx, qweight, scales, y, in, out, fast);
      KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_w8a8(gemv)<<<>>>");
      return;
    }
    const bool wordLoads =
        in % 4 == 0 && (reinterpret_cast<uintptr_t>(qweight) & 3) == 0;
    const int64_t gy = (m + kW8A8TileM - 1) / kW8A8TileM;
    linearW8A8TiledKernel<Y>
        <<<dim3(unsigned(gx), unsigned(gy)), kW8Threads, 0, stream>>>(
            xq, sx, qweight, scales, y + r0 * out, m, in, ld, out, wordLoads);
    if (!KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_w8a8(tiled)<<<>>>"))
      return;
  }
}

/// W4A16 linear layer (kernel_abi.h kiln_k_linear_w4a16): y[n, out] =
/// x[n, in] * W[out, in]^T with W[o, i] = scales[o, g] * (q[o, i] -
/// zeros[o, g]), g = i / group_size; qweight int8 bytes [out, ceil(in / 2)]
/// (element 2j in byte j's low nibble, 2j + 1 in its high nibble), scales
/// float [out, G], zeros int8 [out, G] (0..15), G = ceil(in / group_size);
/// x of type T, y of type T or float (logits), float accumulation, rounded
/// once to Y. n == 1: GEMV dequantizing in registers (a warp per row; 16-byte
/// loads of 32 nibbles when in and group_size are multiples of 32 and qweight
/// is 16-aligned, else byte loads); n > 1: a tiled SIMT kernel dequantizing
/// while staging (every shape; no cuBLASLt, no workspace). Any alignment.
/// group_size must be > 0 and even (cudaErrorInvalidValue otherwise).
template <typename T, typename Y>
inline void kiln_cuda_linear_w4a16(kiln_cuda_ctx *ctx, const T *x,
                                   const int8_t *qweight, const float *scales,
                                   const int8_t *zeros, Y *y, int64_t n,
                                   int64_t in, int64_t out,
                                   int64_t group_size) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  static_assert(std::is_same<Y, T>::value || std::is_same<Y, float>::value,
                "y must have the element type of x or be float");
  if (skip(ctx) || n <= 0 || out <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, group_size > 0 && group_size % 2 == 0,
                     "kiln_cuda_linear_w4a16",
                     "group_size must be positive and even"))
    return;
  if (in <= 0) { // empty sum: y = 0
    KILN_CUDA_CHECK(
        ctx, cudaMemsetAsync(y, 0, size_t(n * out) * sizeof(Y), streamOf(ctx)));
    return;
  }
  if (n == 1) {
    const int warps = kGemvThreads / 32;
    int64_t blocks = (out + warps - 1) / warps;
    if (blocks > (int64_t(1) << 20))
      blocks = int64_t(1) << 20;
    const bool fast = in % 32 == 0 && group_size % 32 == 0 &&
                      aligned16(qweight) && in / 32 < (int64_t(1) << 31);
    gemvW4Kernel<T, Y><<<unsigned(blocks), kGemvThreads, 0, streamOf(ctx)>>>(
        x, qweight, scales, zeros, y, in, out, group_size, fast);
    KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_w4a16(gemv)<<<>>>");
    return;
  }
  const int64_t gx = (out + kW8TileN - 1) / kW8TileN;
  const int64_t gy = (n + kW8TileM - 1) / kW8TileM;
  if (!KILN_CUDA_ARG(ctx, gx <= INT32_MAX && gy <= 65535,
                     "kiln_cuda_linear_w4a16", "n or out too large"))
    return;
  linearW4TiledKernel<T, Y>
      <<<dim3(unsigned(gx), unsigned(gy)), kW8Threads, 0, streamOf(ctx)>>>(
          x, qweight, scales, zeros, y, n, in, out, group_size);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_linear_w4a16(tiled)<<<>>>");
}

/// Rotary embedding, adjacent pairs, positions *ctx->d_pos + row (the `pos`
/// argument is ignored). x, y T [n, heads * head_dim] (may alias).
template <typename T>
inline void kiln_cuda_rope(kiln_cuda_ctx *ctx, const T *x, T *y, int64_t n,
                           int64_t heads, int64_t head_dim, int64_t rot_dim,
                           int64_t pos, float theta) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  if (skip(ctx) || n <= 0 || heads <= 0 || head_dim <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, rot_dim >= 0 && rot_dim <= head_dim, "kiln_cuda_rope",
                     "rot_dim outside [0, head_dim]"))
    return;
  const int64_t work = n * heads * ((head_dim + 1) / 2);
  ropeKernel<T><<<gridFor(ctx, work, 256), 256, 0, streamOf(ctx)>>>(
      x, y, n, heads, head_dim, rot_dim, theta, ctx->d_pos);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_rope<<<>>>");
}

/// kiln_cuda_rope with scaled frequencies (kernel_abi.h kiln_k_rope_scaled).
template <typename T>
inline void kiln_cuda_rope_scaled(kiln_cuda_ctx *ctx, const T *x, T *y,
                                  int64_t n, int64_t heads, int64_t head_dim,
                                  int64_t rot_dim, int64_t pos, float theta,
                                  int64_t scaling, float factor,
                                  float low_freq_factor,
                                  float high_freq_factor,
                                  int64_t original_max) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  if (skip(ctx) || n <= 0 || heads <= 0 || head_dim <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, rot_dim >= 0 && rot_dim <= head_dim,
                     "kiln_cuda_rope_scaled", "rot_dim outside [0, head_dim]"))
    return;
  const int64_t work = n * heads * ((head_dim + 1) / 2);
  ropeScaledKernel<T><<<gridFor(ctx, work, 256), 256, 0, streamOf(ctx)>>>(
      x, y, n, heads, head_dim, rot_dim, theta, scaling, factor,
      low_freq_factor, high_freq_factor, original_max, nullptr, ctx->d_pos);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_rope_scaled<<<>>>");
}

/// kiln_cuda_rope with per-pair frequency divisors (kernel_abi.h
/// kiln_k_rope_factors; freq_factors float [rot_dim / 2] on the device).
template <typename T>
inline void kiln_cuda_rope_factors(kiln_cuda_ctx *ctx, const T *x, T *y,
                                   int64_t n, int64_t heads, int64_t head_dim,
                                   int64_t rot_dim, int64_t pos, float theta,
                                   const float *freq_factors) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos;
  if (skip(ctx) || n <= 0 || heads <= 0 || head_dim <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, rot_dim >= 0 && rot_dim <= head_dim && freq_factors,
                     "kiln_cuda_rope_factors",
                     "rot_dim outside [0, head_dim] or no freq_factors"))
    return;
  const int64_t work = n * heads * ((head_dim + 1) / 2);
  ropeScaledKernel<T><<<gridFor(ctx, work, 256), 256, 0, streamOf(ctx)>>>(
      x, y, n, heads, head_dim, rot_dim, theta, KILN_ROPE_LINEAR, 1.0f, 0.0f,
      0.0f, 0, freq_factors, ctx->d_pos);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_rope_factors<<<>>>");
}

/// Bias of a linear layer (kernel_abi.h kiln_k_add_bias).
template <typename T>
inline void kiln_cuda_add_bias(kiln_cuda_ctx *ctx, const T *x, const T *b,
                               T *y, int64_t n, int64_t width) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  if (skip(ctx) || n <= 0 || width <= 0)
    return;
  addBiasKernel<T><<<gridFor(ctx, n * width, 256), 256, 0, streamOf(ctx)>>>(
      x, b, y, n, width);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_add_bias<<<>>>");
}

/// Causal GQA attention with a KV cache (kernel_abi.h kiln_k_attention), with
/// p = *ctx->d_pos (the `pos` argument is ignored): stores k, v (T
/// [n, kv_heads * head_dim]) at rows [p, p + n) of k_cache, v_cache (T
/// [max_seq, kv_heads * head_dim]), then out[i, h] (T [n, heads * head_dim])
/// = softmax_j(q[i, h] . k_cache[j, h / (heads / kv_heads)] * scale) v_cache[j]
/// over j in [0, p + i]. n > 1: FlashAttention-2 tiling; n == 1:
/// flash-decoding with kiln_cuda_attention_scratch_bytes(heads, head_dim,
/// KILN_CUDA_ATTN_MAX_SPLITS) bytes at KILN_CUDA_ATTN_SCRATCH_OFFSET of
/// ctx->workspace. 1 <= head_dim <= 256, heads a multiple of kv_heads.
template <typename T>
inline void kiln_cuda_attention(kiln_cuda_ctx *ctx, const T *q, const T *k,
                                const T *v, T *k_cache, T *v_cache, T *out,
                                int64_t n, int64_t pos, int64_t heads,
                                int64_t kv_heads, int64_t head_dim,
                                int64_t max_seq, float scale) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  if (skip(ctx) || n <= 0)
    return;
  if (!attentionArgsOk(ctx, "kiln_cuda_attention", heads, kv_heads, head_dim,
                       max_seq))
    return;
  const int64_t kvDim = kv_heads * head_dim;
  kvAppendKernel<T><<<gridFor(ctx, n * kvDim, 256), 256, 0, streamOf(ctx)>>>(
      k, v, k_cache, v_cache, n, kvDim, max_seq, ctx->d_pos);
  if (!KILN_CUDA_LAUNCHED(ctx, "kvAppendKernel<<<>>>"))
    return;
  attentionDispatch(ctx, q, KvPlain<T>{k_cache, v_cache}, out, n, heads,
                    kv_heads, head_dim, max_seq, scale);
}

/// kiln_cuda_attention with a sliding window (kernel_abi.h
/// kiln_k_attention_window): row i sees keys [max(0, p + i - window + 1),
/// p + i].
template <typename T>
inline void kiln_cuda_attention_window(kiln_cuda_ctx *ctx, const T *q,
                                       const T *k, const T *v, T *k_cache,
                                       T *v_cache, T *out, int64_t n,
                                       int64_t pos, int64_t heads,
                                       int64_t kv_heads, int64_t head_dim,
                                       int64_t max_seq, float scale,
                                       int64_t window) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  if (skip(ctx) || n <= 0)
    return;
  if (!attentionArgsOk(ctx, "kiln_cuda_attention_window", heads, kv_heads,
                       head_dim, max_seq) ||
      !KILN_CUDA_ARG(ctx, window >= 1, "kiln_cuda_attention_window",
                     "window must be positive"))
    return;
  const int64_t kvDim = kv_heads * head_dim;
  kvAppendKernel<T><<<gridFor(ctx, n * kvDim, 256), 256, 0, streamOf(ctx)>>>(
      k, v, k_cache, v_cache, n, kvDim, max_seq, ctx->d_pos);
  if (!KILN_CUDA_LAUNCHED(ctx, "kvAppendKernel<<<>>>"))
    return;
  attentionDispatch(ctx, q, KvPlain<T>{k_cache, v_cache}, out, n, heads,
                    kv_heads, head_dim, max_seq, scale, window);
}

/// kiln_cuda_attention over an INT8 KV cache (kernel_abi.h
/// kiln_k_attention_kv8; p = *ctx->d_pos, `pos` ignored): k_cache, v_cache
/// int8 [max_seq, kv_heads * head_dim], k_scales, v_scales float
/// [max_seq, kv_heads]. The new rows are quantized per (token, kv head) by
/// kvAppendInt8Kernel, then the same prefill / flash-decoding kernels read
/// K/V as scale * q (KvInt8). Same workspace and limits as kiln_cuda_attention.
template <typename T>
inline void kiln_cuda_attention_kv8(kiln_cuda_ctx *ctx, const T *q, const T *k,
                                    const T *v, int8_t *k_cache,
                                    int8_t *v_cache, float *k_scales,
                                    float *v_scales, T *out, int64_t n,
                                    int64_t pos, int64_t heads,
                                    int64_t kv_heads, int64_t head_dim,
                                    int64_t max_seq, float scale) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  attentionQuantKv<false>(
      ctx, "kiln_cuda_attention_kv8", "kvAppendInt8Kernel<<<>>>",
      kvAppendInt8Kernel<T>,
      KvInt8{k_cache, v_cache, k_scales, v_scales, int(kv_heads)}, q, k, v,
      k_cache, v_cache, k_scales, v_scales, nullptr, out, n, heads, kv_heads,
      head_dim, 0, max_seq, scale, 0.0f);
}

/// kiln_cuda_attention_kv8 with centered keys (kernel_abi.h
/// kiln_k_attention_kv8_centered; p = *ctx->d_pos, `pos` ignored): keys are
/// quantized as k - m_t and read as scale * q + m_t (KvCentered<KvInt8>), m_t
/// the calibrated pre-RoPE key mean k_mean (device float [kv_heads *
/// head_dim], in the weights) rotated to position t as kiln_cuda_rope with
/// rot_dim and theta would, in double. Same workspace and limits.
template <typename T>
inline void kiln_cuda_attention_kv8_centered(
    kiln_cuda_ctx *ctx, const T *q, const T *k, const T *v, int8_t *k_cache,
    int8_t *v_cache, float *k_scales, float *v_scales, const float *k_mean,
    T *out, int64_t n, int64_t pos, int64_t heads, int64_t kv_heads,
    int64_t head_dim, int64_t rot_dim, int64_t max_seq, float scale,
    float theta) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  attentionQuantKv<true>(
      ctx, "kiln_cuda_attention_kv8_centered", "kvAppendInt8Kernel<<<>>>",
      kvAppendInt8Kernel<T>,
      KvInt8{k_cache, v_cache, k_scales, v_scales, int(kv_heads)}, q, k, v,
      k_cache, v_cache, k_scales, v_scales, k_mean, out, n, heads, kv_heads,
      head_dim, rot_dim, max_seq, scale, theta);
}

/// kiln_cuda_attention over an FP8 E4M3 KV cache (kernel_abi.h
/// kiln_k_attention_kvf8; p = *ctx->d_pos, `pos` ignored): k_cache, v_cache
/// uint8 E4M3 codes [max_seq, kv_heads * head_dim] (OCP OFP8 E4M3FN), k_scales,
/// v_scales float [max_seq, kv_heads]. kvAppendFp8Kernel quantizes the new
/// rows per (token, kv head): scale = amax / 448, code = e4m3(x / scale)
/// (round to nearest even, saturating); the prefill / flash-decoding kernels
/// read K/V as scale * float(code) (KvFp8). Same workspace and limits as
/// kiln_cuda_attention.
template <typename T>
inline void kiln_cuda_attention_kvf8(kiln_cuda_ctx *ctx, const T *q, const T *k,
                                     const T *v, uint8_t *k_cache,
                                     uint8_t *v_cache, float *k_scales,
                                     float *v_scales, T *out, int64_t n,
                                     int64_t pos, int64_t heads,
                                     int64_t kv_heads, int64_t head_dim,
                                     int64_t max_seq, float scale) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  attentionQuantKv<false>(
      ctx, "kiln_cuda_attention_kvf8", "kvAppendFp8Kernel<<<>>>",
      kvAppendFp8Kernel<T>,
      KvFp8{k_cache, v_cache, k_scales, v_scales, int(kv_heads)}, q, k, v,
      k_cache, v_cache, k_scales, v_scales, nullptr, out, n, heads, kv_heads,
      head_dim, 0, max_seq, scale, 0.0f);
}

/// kiln_cuda_attention_kvf8 with centered keys (kernel_abi.h
/// kiln_k_attention_kvf8_centered), as kiln_cuda_attention_kv8_centered
/// (KvCentered<KvFp8>).
template <typename T>
inline void kiln_cuda_attention_kvf8_centered(
    kiln_cuda_ctx *ctx, const T *q, const T *k, const T *v, uint8_t *k_cache,
    uint8_t *v_cache, float *k_scales, float *v_scales, const float *k_mean,
    T *out, int64_t n, int64_t pos, int64_t heads, int64_t kv_heads,
    int64_t head_dim, int64_t rot_dim, int64_t max_seq, float scale,
    float theta) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)pos; // graph replays read the position from ctx->d_pos
  attentionQuantKv<true>(
      ctx, "kiln_cuda_attention_kvf8_centered", "kvAppendFp8Kernel<<<>>>",
      kvAppendFp8Kernel<T>,
      KvFp8{k_cache, v_cache, k_scales, v_scales, int(kv_heads)}, q, k, v,
      k_cache, v_cache, k_scales, v_scales, k_mean, out, n, heads, kv_heads,
      head_dim, rot_dim, max_seq, scale, theta);
}

/// kiln_cuda_attention_kvf8 with the FP8 codes held as int8_t (a plan that
/// views the byte cache as i8): the same bytes, reinterpreted.
template <typename T>
inline void kiln_cuda_attention_kvf8(kiln_cuda_ctx *ctx, const T *q, const T *k,
                                     const T *v, int8_t *k_cache,
                                     int8_t *v_cache, float *k_scales,
                                     float *v_scales, T *out, int64_t n,
                                     int64_t pos, int64_t heads,
                                     int64_t kv_heads, int64_t head_dim,
                                     int64_t max_seq, float scale) {
  kiln_cuda_attention_kvf8(ctx, q, k, v, reinterpret_cast<uint8_t *>(k_cache),
                           reinterpret_cast<uint8_t *>(v_cache), k_scales,
                           v_scales, out, n, pos, heads, kv_heads, head_dim,
                           max_seq, scale);
}

/// kiln_cuda_attention_kvf8_centered with the FP8 codes held as int8_t.
template <typename T>
inline void kiln_cuda_attention_kvf8_centered(
    kiln_cuda_ctx *ctx, const T *q, const T *k, const T *v, int8_t *k_cache,
    int8_t *v_cache, float *k_scales, float *v_scales, const float *k_mean,
    T *out, int64_t n, int64_t pos, int64_t heads, int64_t kv_heads,
    int64_t head_dim, int64_t rot_dim, int64_t max_seq, float scale,
    float theta) {
  kiln_cuda_attention_kvf8_centered(
      ctx, q, k, v, reinterpret_cast<uint8_t *>(k_cache),
      reinterpret_cast<uint8_t *>(v_cache), k_scales, v_scales, k_mean, out, n,
      pos, heads, kv_heads, head_dim, rot_dim, max_seq, scale, theta);
}

/// y = silu(gate) * up, count elements of T (any alignment; in-place ok).
template <typename T>
inline void kiln_cuda_swiglu(kiln_cuda_ctx *ctx, const T *gate, const T *up,
                             T *y, int64_t count) {
  kiln_cuda_detail::elementwise<T, kiln_cuda_detail::SwigluOp, false>(
      ctx, "kiln_cuda_swiglu<<<>>>", gate, up, y, count);
}

/// y = x * sigmoid(x), count elements of T.
template <typename T>
inline void kiln_cuda_silu(kiln_cuda_ctx *ctx, const T *x, T *y,
                           int64_t count) {
  kiln_cuda_detail::elementwise<T, kiln_cuda_detail::SiluOp, true>(
      ctx, "kiln_cuda_silu<<<>>>", x, nullptr, y, count);
}

/// y[t, j] = x[t, offset + j] for t < n, j < width (x [n, in]): a column
/// range of T (kiln.slice_columns), one strided device-to-device copy.
template <typename T>
inline void kiln_cuda_slice_columns(kiln_cuda_ctx *ctx, const T *x, T *y,
                                    int64_t n, int64_t in, int64_t offset,
                                    int64_t width) {
  if (kiln_cuda_detail::skip(ctx) || n <= 0 || width <= 0)
    return;
  KILN_CUDA_CHECK(ctx, cudaMemcpy2DAsync(
                           y, size_t(width) * sizeof(T), x + offset,
                           size_t(in) * sizeof(T), size_t(width) * sizeof(T),
                           size_t(n), cudaMemcpyDeviceToDevice,
                           (cudaStream_t)ctx->stream));
}

/// y = a + b, count elements of T.
template <typename T>
inline void kiln_cuda_add(kiln_cuda_ctx *ctx, const T *a, const T *b, T *y,
                          int64_t count) {
  kiln_cuda_detail::elementwise<T, kiln_cuda_detail::AddOp, false>(
      ctx, "kiln_cuda_add<<<>>>", a, b, y, count);
}

/// y = a * b, count elements of T.
template <typename T>
inline void kiln_cuda_mul(kiln_cuda_ctx *ctx, const T *a, const T *b, T *y,
                          int64_t count) {
  kiln_cuda_detail::elementwise<T, kiln_cuda_detail::MulOp, false>(
      ctx, "kiln_cuda_mul<<<>>>", a, b, y, count);
}

/// *out_token = first index of the maximum of logits (float [vocab]).
inline void kiln_cuda_argmax(kiln_cuda_ctx *ctx, const float *logits,
                             int64_t vocab, int32_t *out_token) {
  using namespace kiln_cuda_detail;
  if (skip(ctx))
    return;
  if (!KILN_CUDA_ARG(ctx, vocab > 0 && vocab <= INT32_MAX, "kiln_cuda_argmax",
                     "vocab outside [1, 2^31)"))
    return;
  argmaxKernel<>
      <<<1, kSampleThreads, 0, streamOf(ctx)>>>(logits, int(vocab), out_token);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_argmax<<<>>>");
}

/// Samples *out_token from logits (float [vocab]): greedy when temperature
/// == 0, else softmax(logits / temperature), top-k (top_k <= 0 or >= vocab:
/// off; clamped to KILN_CUDA_SAMPLE_MAX_TOP_K), top-p over the kept set
/// (top_p <= 0 or >= 1: off), inverse-CDF draw with *d_coin (device float in
/// [0, 1)). scratch: device float [vocab] (kiln_cuda_sample_scratch_bytes).
inline void kiln_cuda_sample_topk_topp(kiln_cuda_ctx *ctx, const float *logits,
                                       int64_t vocab, float temperature,
                                       int32_t top_k, float top_p,
                                       const float *d_coin, float *scratch,
                                       int32_t *out_token) {
  using namespace kiln_cuda_detail;
  if (skip(ctx))
    return;
  if (!KILN_CUDA_ARG(ctx, vocab > 0 && vocab <= INT32_MAX,
                     "kiln_cuda_sample_topk_topp", "vocab outside [1, 2^31)") ||
      !KILN_CUDA_ARG(ctx, temperature >= 0.0f, "kiln_cuda_sample_topk_topp",
                     "negative temperature"))
    return;
  sampleKernel<><<<1, kSampleThreads, 0, streamOf(ctx)>>>(
      logits, int(vocab), temperature, top_k, top_p, d_coin, scratch,
      out_token);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_sample_topk_topp<<<>>>");
}

#endif // KILN_CODEGEN_CUDA_KILNKERNELS_CUH

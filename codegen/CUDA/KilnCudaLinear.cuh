//===- KilnCudaLinear.cuh - Dense linears: GEMV and cuBLASLt ---*- CUDA -*-===//
//
// Linear layers over float / 16-bit weights: the memory-bound decode GEMV
// and the cuBLASLt prefill GEMM. Part of KilnKernels.cuh.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CODEGEN_CUDA_KILNCUDALINEAR_CUH
#define KILN_CODEGEN_CUDA_KILNCUDALINEAR_CUH

#include "KilnCudaCommon.cuh"

namespace kiln_cuda_detail {

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

/// Row readers: the GEMV of every weight kind is gemvKernel<Rows, Y> over a
/// `Rows` that knows one kind's layout (DenseRows here; W8Rows, W8GroupRows
/// and W4Rows in KilnCudaQuantLinear.cuh; BlockRows in KilnCudaBlocks.cuh).
/// A Rows is a small by-value struct with
///   using Elem = <element type of x>;
///   __device__ float partial(const Elem *x, int64_t row, int lane) const;
///     // lane's share of the dot product of weight row `row` with x [in]
///   __device__ float finish(int64_t row, float sum) const;
///     // the warp's sum to the output (a per-row scale, or the sum)
/// The fused kernels (KilnCudaFused.cuh) call the same readers, so a fused
/// decode GEMV does the unfused kernel's row arithmetic.

/// y[r] = sum_j w[r, j] * x[j] (x [in], w [out, in] row-major). Per row: the
/// elements before w's first 16-byte boundary ("head", < 16 / sizeof(T)),
/// then 16-byte packs of w (unrolled 4x so each lane keeps 4 loads in
/// flight), then a scalar tail. x is read as packs when x + head is
/// 16-aligned too, else element-wise. Any `in`, any element-aligned
/// pointers; float accumulation.
template <typename T> struct DenseRows {
  using Elem = T;
  const T *w;
  int64_t in;

  __device__ float partial(const T *__restrict__ x, int64_t row,
                           int lane) const {
    constexpr int kN = Pack<T>::kN;
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
    return acc;
  }
  __device__ float finish(int64_t, float sum) const { return sum; }
};

/// y[r] = rows.finish(r, sum over the warp of rows.partial(x, r, lane)) for
/// r < out: a warp per row (grid-stride), warp-shuffle reduction; Y is the
/// element type of x or float.
template <typename Rows, typename Y>
__global__ void __launch_bounds__(kGemvThreads)
    gemvKernel(Rows rows, const typename Rows::Elem *__restrict__ x,
               Y *__restrict__ y, int64_t out) {
  const int lane = threadIdx.x & 31;
  const int64_t warpsPerBlock = blockDim.x >> 5;
  const int64_t stride = int64_t(gridDim.x) * warpsPerBlock;
  for (int64_t row = int64_t(blockIdx.x) * warpsPerBlock + (threadIdx.x >> 5);
       row < out; row += stride) {
    const float sum = warpSum(rows.partial(x, row, lane));
    if (lane == 0)
      y[row] = fromF<Y>(rows.finish(row, sum));
  }
}

/// Launches gemvKernel over `out` rows (at most 2^20 blocks of kGemvThreads).
template <typename Rows, typename Y>
inline void launchGemv(kiln_cuda_ctx *ctx, const Rows &rows,
                       const typename Rows::Elem *x, Y *y, int64_t out,
                       const char *name) {
  const int warps = kGemvThreads / 32;
  int64_t blocks = (out + warps - 1) / warps;
  if (blocks > (int64_t(1) << 20))
    blocks = int64_t(1) << 20;
  gemvKernel<Rows, Y><<<unsigned(blocks), kGemvThreads, 0, streamOf(ctx)>>>(
      rows, x, y, out);
  KILN_CUDA_LAUNCHED(ctx, name);
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
  uint32_t alignA = 0, alignB = 0, alignC = 0, alignD = 0;
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
/// With `c` (same layout as y, may alias it), y = x w^T + c: beta = 1, the
/// addition done by cuBLASLt's epilogue on the float accumulator (a fused
/// residual add, KilnCudaFused.cuh).
template <typename T, typename Y>
inline void ltLinear(kiln_cuda_ctx *ctx, const T *x, const T *w, Y *y,
                     int64_t n, int64_t in, int64_t out,
                     const Y *c = nullptr) {
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
                 alC = alignmentOf(c ? c : y), alD = alignmentOf(y);

  LtCache &cache = ltCache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  LtPlan *plan = nullptr;
  for (LtPlan &p : cache.plans)
    if (p.used && p.handle == ctx->cublaslt && p.n == n && p.in == in &&
        p.out == out && p.ab == ab && p.cd == cd && p.alignA == alA &&
        p.alignB == alB && p.alignC == alC && p.alignD == alD &&
        p.workspace == ws) {
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
    p.alignC = alC;
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
                              &alC, sizeof(alC))) &&
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
  const float alpha = 1.0f, beta = c ? 1.0f : 0.0f;
  KILN_CUBLAS_CHECK(ctx, cublasLtMatmul(handle, plan->op, &alpha, w, plan->a, x,
                                        plan->b, &beta, c ? c : y, plan->d, y,
                                        plan->d,
                                        &plan->algo, ctx->workspace, size_t(ws),
                                        streamOf(ctx)));
}

//===----------------------------------------------------------------------===//

} // namespace kiln_cuda_detail

#endif // KILN_CODEGEN_CUDA_KILNCUDALINEAR_CUH

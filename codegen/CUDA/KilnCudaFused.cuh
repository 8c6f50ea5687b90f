//===- KilnCudaFused.cuh - Templates of the generated fused kernels -*- CUDA -*-===//
//
// A kiln.fused region (docs/fusion.md) becomes, in the emitted model.cu, an
// epilogue struct generated from the region's ops (codegen/CPU/
// FusedKernelEmitter.cpp) and one call of a template below, instantiated
// with the weight's row reader (DenseRows, W8Rows, W8GroupRows, W4Rows,
// BlockRows: the readers of the unfused GEMVs) and that struct:
//
//   struct E {            // generated
//     __device__ int64_t row(int64_t g, int k) const;
//         // weight row of the k-th of the K values output group g needs
//     __device__ void store(int64_t t, int64_t g, const float *v) const;
//         // token t's values v[k] = (x W^T)[t, row(g, k)]: runs the
//         // region's epilogue on them and stores the region's results
//   };
//
// Decode (n == 1): one kernel. Each CUDA block stages the input row in
// shared memory, RMS-normalized there when the region has a prologue (the
// arithmetic of rmsNormKernel, the same 256-thread reduction), then each
// warp computes the K dot products of an output group with the row reader
// and its lane 0 runs the epilogue. A Llama layer's decode becomes four such
// kernels and the attention instead of fifteen launches (docs/fusion.md).
// Prefill (n > 1): the prologue's RMSNorm and the linear run as the unfused
// kernels (cuBLASLt, the tiled quantized GEMMs) into the fused scratch, then
// one generated epilogue kernel; a dense residual add instead rides on
// cuBLASLt's epilogue (beta = 1, C = the residual).
//
// Computation is float32 (16-bit graphs are compiled unfused). Part of
// KilnKernels.cuh; uses the host wrappers of KilnCudaHost.cuh.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CODEGEN_CUDA_KILNCUDAFUSED_CUH
#define KILN_CODEGEN_CUDA_KILNCUDAFUSED_CUH

#include "KilnCudaHost.cuh"

#include <initializer_list>
#include <type_traits>

/// kernel_abi.h's kiln_silu / kiln_swiglu for the generated epilogues, with
/// the arithmetic of the unfused CUDA kernels (KilnCudaPointwise.cuh).
__device__ __forceinline__ float kiln_cuda_silu_elem(float x) {
  return kiln_cuda_detail::SiluOp()(x, 0.0f);
}
__device__ __forceinline__ float kiln_cuda_swiglu_elem(float gate, float up) {
  return kiln_cuda_detail::SwigluOp()(gate, up);
}

/// RoPE (Su et al. 2021, RoFormer eq. 34) of one element, adjacent pairs:
/// x at column `col` of a row of heads of `head_dim`, `partner` the other
/// element of its pair (column col ^ 1), at position `pos`; columns at or
/// beyond rot_dim / 2 * 2 of their head pass through. The angle arithmetic
/// of ropeKernel (double pow / cos / sin rounded to float), so fused and
/// unfused RoPE agree bit for bit; kernel_abi.h kiln_rope_elem's formula.
__device__ __forceinline__ float kiln_cuda_rope_elem(float x, float partner,
                                                     int64_t col,
                                                     int64_t head_dim,
                                                     int64_t rot_dim,
                                                     float theta, int64_t pos) {
  const int64_t hc = col % head_dim;
  if (hc >= rot_dim / 2 * 2)
    return x;
  const float expo = float(2 * (hc / 2)) / float(head_dim);
  const float freq = 1.0f / float(pow(double(theta), double(expo)));
  const float val = float(pos) * freq;
  const float c = float(cos(double(val))), s = float(sin(double(val)));
  return (hc & 1) == 0 ? x * c - partner * s : partner * s + x * c;
}

namespace kiln_cuda_detail {

/// Widest input row (floats) a fused decode kernel stages in shared memory:
/// with the block reduction's 128 static bytes it stays within 48 KiB, the
/// shared memory every GPU gives a block without an opt-in. Wider rows take
/// the prefill path (norm and GEMV, then the epilogue).
constexpr int64_t kFusedStageMax = 12224;

/// Fused decode: y = x W^T for one token with the region's prologue and
/// epilogue. x float [in]; normW float [in] or null (no prologue);
/// `count` output groups of K values each (epi.row). Dynamic shared memory:
/// in floats.
template <int K, typename Rows, typename Epi>
__global__ void __launch_bounds__(kGemvThreads)
    fusedGemvKernel(Rows rows, const float *__restrict__ x,
                    const float *__restrict__ normW, float eps, int64_t in,
                    int64_t count, Epi epi) {
  extern __shared__ __align__(16) float xs[];
  __shared__ float red[32];
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < in; j += blockDim.x) {
    const float v = x[j];
    xs[j] = v;
    ss = fmaf(v, v, ss);
  }
  if (normW != nullptr) { // uniform: every thread takes part in blockSum
    ss = blockSum(ss, red);
    float s = ss / float(in);
    s += eps;
    s = 1.0f / sqrtf(s);
    for (int64_t j = threadIdx.x; j < in; j += blockDim.x)
      xs[j] = normW[j] * (s * xs[j]);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int64_t warpsPerBlock = blockDim.x >> 5;
  const int64_t stride = int64_t(gridDim.x) * warpsPerBlock;
  for (int64_t g = int64_t(blockIdx.x) * warpsPerBlock + (threadIdx.x >> 5);
       g < count; g += stride) {
    float v[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t r = epi.row(g, k);
      v[k] = rows.finish(r, warpSum(rows.partial(xs, r, lane)));
    }
    if (lane == 0)
      epi.store(0, g, v);
  }
}

/// Fused prefill epilogue: for every token t < total / count and group g,
/// epi.store(t, g, v) with v[k] = y[t, epi.row(g, k)] (y float [n, out]).
template <int K, typename Epi>
__global__ void __launch_bounds__(256)
    fusedEpilogueKernel(const float *__restrict__ y, int64_t out,
                        int64_t total, int64_t count, Epi epi) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = e / count, g = e % count;
    float v[K];
#pragma unroll
    for (int k = 0; k < K; ++k)
      v[k] = y[t * out + epi.row(g, k)];
    epi.store(t, g, v);
  }
}

/// An elementwise region: epi.elem(t, col) for t < total / width, col <
/// width.
template <typename Epi>
__global__ void __launch_bounds__(256)
    fusedElementwiseKernel(int64_t total, int64_t width, Epi epi) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x)
    epi.elem(e / width, e % width);
}

/// The unfused linear of each row reader (prefill path): y float [n, out] =
/// x float [n, in] W^T.
/// (Templates: a reader's kernels are compiled only when a region uses it.)
template <typename R>
inline void fusedLinear(kiln_cuda_ctx *ctx, const R &r, const float *x,
                        float *y, int64_t n, int64_t out) {
  if constexpr (std::is_same_v<R, DenseRows<float>>)
    kiln_cuda_linear(ctx, x, r.w, y, n, r.in, out);
  else if constexpr (std::is_same_v<R, W8Rows<float>>)
    kiln_cuda_linear_w8a16(ctx, x, r.q, r.scales, y, n, r.in, out, 0);
  else if constexpr (std::is_same_v<R, W8GroupRows<float>>)
    kiln_cuda_linear_w8a16(ctx, x, r.q, r.scales, y, n, r.in, out,
                           r.groupSize);
  else if constexpr (std::is_same_v<R, W4Rows<float>>)
    kiln_cuda_linear_w4a16(ctx, x, r.q, r.scales, r.zeros, y, n, r.in, out,
                           r.groupSize);
  else
    static_assert(sizeof(R) == 0, "no unfused linear for this row reader");
}
template <int64_t F>
inline void fusedLinear(kiln_cuda_ctx *ctx, const BlockRows<F> &r,
                        const float *x, float *y, int64_t n, int64_t out) {
  if (skip(ctx) || n <= 0 || out <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, r.in % kiln_block_elems(F) == 0,
                     "kiln_cuda_linear_blocks", "in not whole blocks"))
    return;
  linearBlocksOf<F>(ctx, x, r.w, y, n, r.in, out);
}

/// Launches fusedGemvKernel (n == 1, in <= kFusedStageMax).
template <int K, typename Rows, typename Epi>
inline void launchFusedGemv(kiln_cuda_ctx *ctx, const char *name,
                            const Rows &rows, const float *x,
                            const float *normW, float eps, int64_t in,
                            int64_t count, const Epi &epi) {
  const int warps = kGemvThreads / 32;
  int64_t blocks = (count + warps - 1) / warps;
  if (blocks > (int64_t(1) << 20))
    blocks = int64_t(1) << 20;
  fusedGemvKernel<K, Rows, Epi>
      <<<unsigned(blocks), kGemvThreads, size_t(in) * sizeof(float),
         streamOf(ctx)>>>(rows, x, normW, eps, in, count, epi);
  KILN_CUDA_LAUNCHED(ctx, name);
}

} // namespace kiln_cuda_detail

/// Bytes of fused scratch a linear-anchored region needs for `n` tokens of
/// `in` inputs and `out` outputs on the prefill path: the normalized input
/// (with a prologue) and the linear's result, float32, each rounded up to
/// 256 bytes.
constexpr uint64_t kiln_cuda_fused_scratch_bytes(int64_t n, int64_t in,
                                                 int64_t out, bool prologue) {
  return (prologue ? kiln_cuda_align256(uint64_t(n) * uint64_t(in) * 4) : 0) +
         kiln_cuda_align256(uint64_t(n) * uint64_t(out) * 4);
}

/// The largest of `sizes` (0 for none): model.cu's kKilnFusedScratchBytes
/// over its regions' kiln_cuda_fused_scratch_bytes.
constexpr uint64_t
kiln_cuda_fused_scratch_max(std::initializer_list<uint64_t> sizes) {
  uint64_t most = 0;
  for (uint64_t s : sizes)
    most = s > most ? s : most;
  return most;
}

/// The fused scratch inside ctx->workspace: from `offset` (the model's
/// kiln_cuda_workspace_bytes_for, which model.cu emits as
/// kKilnFusedScratchOffset) to the end of the workspace; *bytes gets its
/// size (null and 0 when the workspace ends before `offset`).
inline void *kiln_cuda_fused_scratch(const kiln_cuda_ctx *ctx, uint64_t offset,
                                     uint64_t *bytes) {
  *bytes = 0;
  if (ctx == nullptr || ctx->workspace == nullptr ||
      ctx->workspace_bytes <= offset)
    return nullptr;
  *bytes = ctx->workspace_bytes - offset;
  return static_cast<uint8_t *>(ctx->workspace) + offset;
}

/// A linear-anchored fused region (name: the generated function, for
/// errors). rows: the weight's reader of `in` inputs; x float [n, in];
/// normW float [in] with `eps`, or null without a prologue; the linear has
/// `out` outputs, read by the epilogue in `count` groups of K (epi.row);
/// scratch: `scratch_bytes` of device memory for the prefill path (at least
/// kiln_cuda_fused_scratch_bytes(n, in, out, normW != null), else the call
/// fails with cudaErrorInvalidValue). Decode (n == 1, in <=
/// kFusedStageMax): one fusedGemvKernel launch; otherwise RMSNorm into
/// scratch, the unfused linear into scratch and one fusedEpilogueKernel.
/// Enqueued on ctx's stream; errors recorded in ctx as every wrapper does.
template <int K, typename Rows, typename Epi>
inline void kiln_cuda_fused_linear(kiln_cuda_ctx *ctx, const char *name,
                                   const Rows &rows, const float *x,
                                   const float *normW, float eps, int64_t n,
                                   int64_t in, int64_t out, int64_t count,
                                   const Epi &epi, void *scratch,
                                   uint64_t scratch_bytes) {
  using namespace kiln_cuda_detail;
  if (skip(ctx) || n <= 0 || count <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, in > 0, name, "fused linear with no inputs"))
    return;
  if (n == 1 && in <= kFusedStageMax) {
    launchFusedGemv<K>(ctx, name, rows, x, normW, eps, in, count, epi);
    return;
  }
  const uint64_t xBytes =
      normW ? kiln_cuda_align256(uint64_t(n) * uint64_t(in) * 4) : 0;
  if (!KILN_CUDA_ARG(ctx,
                     scratch != nullptr &&
                         kiln_cuda_fused_scratch_bytes(n, in, out, normW) <=
                             scratch_bytes,
                     name, "fused scratch smaller than the call needs"))
    return;
  float *xn = static_cast<float *>(scratch);
  float *y = reinterpret_cast<float *>(static_cast<uint8_t *>(scratch) + xBytes);
  if (normW) {
    kiln_cuda_rms_norm(ctx, x, normW, xn, n, in, eps);
    x = xn;
  }
  fusedLinear(ctx, rows, x, y, n, out);
  if (skip(ctx))
    return;
  fusedEpilogueKernel<K, Epi>
      <<<gridFor(ctx, n * count, 256), 256, 0, streamOf(ctx)>>>(
          y, out, n * count, count, epi);
  KILN_CUDA_LAUNCHED(ctx, name);
}

/// A dense f32 linear whose only epilogue is a residual add: y float [n,
/// out] = x [n, in] W^T + residual [n, out] (residual may alias y). Decode
/// (n == 1, in <= kFusedStageMax): fusedGemvKernel with the generated
/// epilogue `epi` (K = 1); otherwise cuBLASLt with beta = 1 and C =
/// residual, so the add happens in the GEMM's epilogue.
template <typename Epi>
inline void kiln_cuda_fused_linear_residual(
    kiln_cuda_ctx *ctx, const char *name,
    const kiln_cuda_detail::DenseRows<float> &rows, const float *x,
    const float *residual, float *y, int64_t n, int64_t in, int64_t out,
    const Epi &epi) {
  using namespace kiln_cuda_detail;
  if (skip(ctx) || n <= 0 || out <= 0)
    return;
  if (!KILN_CUDA_ARG(ctx, in > 0, name, "fused linear with no inputs"))
    return;
  if (n == 1 && in <= kFusedStageMax) {
    launchFusedGemv<1>(ctx, name, rows, x, nullptr, 0.0f, in, out, epi);
    return;
  }
  ltLinear(ctx, x, rows.w, y, n, in, out, residual);
}

/// An elementwise fused region over `n` rows of `width` columns.
template <typename Epi>
inline void kiln_cuda_fused_elementwise(kiln_cuda_ctx *ctx, const char *name,
                                        int64_t n, int64_t width,
                                        const Epi &epi) {
  using namespace kiln_cuda_detail;
  if (skip(ctx) || n <= 0 || width <= 0)
    return;
  fusedElementwiseKernel<Epi>
      <<<gridFor(ctx, n * width, 256), 256, 0, streamOf(ctx)>>>(n * width,
                                                                 width, epi);
  KILN_CUDA_LAUNCHED(ctx, name);
}

#endif // KILN_CODEGEN_CUDA_KILNCUDAFUSED_CUH

//===- KilnCudaBlocks.cuh - GGML block-format embedding and linears -*- CUDA -*-===//
//
// Weights kept as GGUF stores them (kiln_rt/block_formats.h), decoded in
// registers / shared memory by the shared codec. Part of KilnKernels.cuh.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CODEGEN_CUDA_KILNCUDABLOCKS_CUH
#define KILN_CODEGEN_CUDA_KILNCUDABLOCKS_CUH

#include "KilnCudaLinear.cuh"

namespace kiln_cuda_detail {

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

/// GGML block rows (format F): y[r] = sum_j W[r, j] * x[j]; lane l decodes
/// blocks l, l + 32, ... into registers and dots them with x; float
/// accumulation. `in` is whole blocks.
template <int64_t F> struct BlockRows {
  using Elem = float;
  const uint8_t *w;
  int64_t in;

  __device__ float partial(const float *__restrict__ x, int64_t row,
                           int lane) const {
    constexpr int64_t E = kiln_block_elems(F), B = kiln_block_bytes(F);
    const int64_t blocks = in / E;
    const uint8_t *wr = w + row * blocks * B;
    float buf[E];
    float acc = 0.0f;
    for (int64_t b = lane; b < blocks; b += 32) {
      kiln_block_decode(F, wr + b * B, buf);
      const float *xb = x + b * E;
#pragma unroll 8
      for (int64_t j = 0; j < E; ++j)
        acc = fmaf(buf[j], xb[j], acc);
    }
    return acc;
  }
  __device__ float finish(int64_t, float sum) const { return sum; }
};

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

#endif // KILN_CODEGEN_CUDA_KILNCUDABLOCKS_CUH

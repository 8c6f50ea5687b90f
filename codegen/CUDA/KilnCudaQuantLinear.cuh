//===- KilnCudaQuantLinear.cuh - Weight-quantized linears ------*- CUDA -*-===//
//
// W8A16 (int8 weights, per-channel or group float scales), W8A8
// (SmoothQuant: int8 activations x int8 weights, int32 sums) and W4A16
// (packed 4-bit weights, group scales and zeros). Part of KilnKernels.cuh.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CODEGEN_CUDA_KILNCUDAQUANTLINEAR_CUH
#define KILN_CODEGEN_CUDA_KILNCUDAQUANTLINEAR_CUH

#include "KilnCudaLinear.cuh"

namespace kiln_cuda_detail {

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

/// Per-channel W8A16 rows: y[r] = scales[r] * sum_j float(q[r, j]) * x[j]
/// (x [in], q [out, in] int8 row-major). The structure of DenseRows: per
/// row the bytes before q's first 16-byte boundary ("head", < 16), then
/// 16-byte loads of 16 weights per lane, dequantized in registers (unrolled
/// 2x), then a scalar tail; x read as packs when x + head is 16-aligned.
/// Float accumulation, the row scale applied to the warp's sum.
template <typename T> struct W8Rows {
  using Elem = T;
  const int8_t *q;
  const float *scales;
  int64_t in;

  __device__ float partial(const T *__restrict__ x, int64_t row,
                           int lane) const {
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
    return acc;
  }
  __device__ float finish(int64_t row, float sum) const {
    return sum * scales[row];
  }
};

/// Group-wise W8A16 rows (GGUF Q8_0 style): y[r] = sum_g scales[r, g] *
/// sum_{j in g} float(q[r, j]) * x[j], g = j / groupSize, scales float
/// [out, ceil(in / groupSize)]. `fast` (uniform: in % 16 == 0,
/// groupSize % 16 == 0, q 16-aligned, in / 16 < 2^31, so every row is
/// 16-aligned and no 16-byte pack straddles a group; make() decides): each
/// lane takes 16-byte packs (unrolled 2x), dequantizes them in registers as
/// W8Rows does and adds scale * partial sum; x read as packs when
/// 16-aligned. Otherwise (any shape or alignment) element by element with
/// the scale applied per weight. Float accumulation.
template <typename T> struct W8GroupRows {
  using Elem = T;
  const int8_t *q;
  const float *scales;
  int64_t in, groupSize;
  bool fast;

  static W8GroupRows make(const int8_t *q, const float *scales, int64_t in,
                          int64_t groupSize) {
    return {q, scales, in, groupSize,
            in % 16 == 0 && groupSize % 16 == 0 && aligned16(q) &&
                in / 16 < (int64_t(1) << 31)};
  }

  __device__ float partial(const T *__restrict__ x, int64_t row,
                           int lane) const {
    const int64_t groups = (in + groupSize - 1) / groupSize;
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
    return acc;
  }
  __device__ float finish(int64_t, float sum) const { return sum; }
};

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

/// W4A16 rows: y[r] = sum_g scales[r, g] * sum_{j in g} x[j] * (q[r, j] -
/// zeros[r, g]) (layout of kernel_abi.h kiln_k_linear_w4a16). `fast`
/// (uniform; in % 32 == 0, groupSize % 32 == 0, q 16-aligned, hence every
/// row; make() decides): each lane takes 16-byte loads of 32 nibbles
/// (unrolled 2x), all in one group, dequantizes them in registers and adds
/// scale * partial sum; x read as packs when 16-aligned. Otherwise (any
/// shape or alignment) a lane takes single bytes (two elements of one
/// group). Float accumulation.
template <typename T> struct W4Rows {
  using Elem = T;
  const int8_t *q;
  const float *scales;
  const int8_t *zeros;
  int64_t in, groupSize;
  bool fast;

  static W4Rows make(const int8_t *q, const float *scales, const int8_t *zeros,
                     int64_t in, int64_t groupSize) {
    return {q,  scales,    zeros,
            in, groupSize, in % 32 == 0 && groupSize % 32 == 0 &&
                               aligned16(q) && in / 32 < (int64_t(1) << 31)};
  }

  __device__ float partial(const T *__restrict__ x, int64_t row,
                           int lane) const {
    const int64_t rowBytes = (in + 1) / 2;
    const int64_t groups = (in + groupSize - 1) / groupSize;
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
    return acc;
  }
  __device__ float finish(int64_t, float sum) const { return sum; }
};

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

} // namespace kiln_cuda_detail

#endif // KILN_CODEGEN_CUDA_KILNCUDAQUANTLINEAR_CUH

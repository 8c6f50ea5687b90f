//===- Linear.cpp - Dense and weight-quantized linears --------------------===//
//
// kernel_abi.h's linear layers y[n, out] = x[n, in] * W^T: float32 and
// f16 / bf16 weights, W8A16 (int8 weights, per-channel or group scales),
// W4A16 (packed nibbles, group scales and zeros), W8A8 (SmoothQuant int8
// activations x int8 weights, exact int32 GEMM) and the GGML block formats.
// Decode (n = 1) is a memory-bound GEMV that widens weights in registers
// (Gemv.cpp, QuantKernelsHwy.cpp, BlockKernelsHwy.cpp); prefill decodes tiles
// of kTileRows x kTileDepth weights to float and multiplies them on AMX
// tiles (AmxGemm.cpp) where the CPU has them, else with a single-threaded
// OpenBLAS sgemm (Blas.h), per chunk of output rows, the chunks spread over
// the thread pool.
//
//===----------------------------------------------------------------------===//
#include "cpu/Blas.h"
#include "cpu/KernelTemplates.h"
#include "kiln_rt/block_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

namespace kiln::rt::cpu {

/// Output rows and reduction depth of one float weight tile of the 16-bit
/// prefill GEMM (256 KiB: stays in L2 next to OpenBLAS's packed panels).
static constexpr int64_t kTileRows = 128, kTileDepth = 512;

/// y[n, out] = x[n, in] * w[out, in]^T for 16-bit x, w; OutT is E::T, or
/// float for the classifier.
template <class E, class OutT>
static void linear16(const typename E::T *x, const typename E::T *w, OutT *y,
                     int64_t n, int64_t in, int64_t out) {
  constexpr bool floatOut = std::is_same_v<OutT, float>;
  if (n <= 0 || out <= 0)
    return;
  if (in <= 0) {
    std::memset(static_cast<void *>(y), 0, sizeof(OutT) * size_t(n * out));
    return;
  }
  if (n == 1) {
    // Decode: memory-bound GEMV over the 16-bit weights, rows split over
    // threads; x is widened once.
    const float *xf = loadRow<E>(x, in, 0);
    const bool parallel = out * in > kParallelGrain;
    forRowChunks(out, parallel, [&](int64_t begin, int64_t end) {
      if constexpr (floatOut) {
        E::gemv(xf, w + begin * in, y + begin, in, end - begin);
      } else {
        float *yf = scratch(1, end - begin);
        E::gemv(xf, w + begin * in, yf, in, end - begin);
        E::narrow(yf, y + begin, end - begin);
      }
    });
    return;
  }
  // Prefill: x widened once; each thread owns a slice of w's rows and runs a
  // GEMM (gemmWeightTile) per float weight tile, accumulating over depth.
  std::vector<float> xf(size_t(n * in));
  bool parallel = n * out * in > kParallelGrain;
  forRows(n, parallel,
          [&](int64_t i) { E::widen(x + i * in, xf.data() + i * in, in); });
  forTileChunks(out, parallel, [&](int64_t begin, int64_t end) {
    float *wTile = scratch(1, kTileRows * kTileDepth);
    for (int64_t r0 = begin; r0 < end; r0 += kTileRows) {
      int64_t rows = std::min(kTileRows, end - r0);
      float *c;
      int64_t ldc;
      if constexpr (floatOut) {
        c = y + r0;
        ldc = out;
      } else {
        c = scratch(2, n * rows);
        ldc = rows;
      }
      for (int64_t k0 = 0; k0 < in; k0 += kTileDepth) {
        int64_t depth = std::min(kTileDepth, in - k0);
        for (int64_t r = 0; r < rows; ++r)
          E::widen(w + (r0 + r) * in + k0, wTile + r * depth, depth);
        gemmWeightTile(xf.data(), n, in, k0, wTile, rows, depth, c, ldc,
                       k0 != 0);
      }
      if constexpr (!floatOut)
        for (int64_t i = 0; i < n; ++i)
          E::narrow(c + i * rows, y + i * out + r0, rows);
    }
  });
}

/// Prefill (n > 1) of a weight-quantized linear y[n, out] = x[n, in] * W^T:
/// x as float (widened once for 16-bit); each thread owns a slice of the
/// output rows and runs a GEMM (gemmWeightTile) per tile of kTileRows x
/// kTileDepth weights that `dequantRow(o, k0, depth, dst)` writes as float
/// (row o, columns [k0, k0 + depth)), accumulating over depth. With
/// `rowScales`, the finished sums of row o are multiplied by rowScales[o]
/// (W8A16 per channel). Memory beyond x: one 256 KiB tile (+ n x 128
/// outputs for 16-bit y) per thread.
template <class E, class OutT, class DequantRow>
static void prefillDequantized(const typename E::T *x, OutT *y, int64_t n,
                               int64_t in, int64_t out,
                               const float *rowScales, DequantRow dequantRow) {
  constexpr bool floatOut = std::is_same_v<OutT, float>;
  std::vector<float> xBuf;
  const float *xf;
  if constexpr (kIsF32<E>) {
    xf = x;
  } else {
    xBuf.resize(size_t(n * in));
    xf = xBuf.data();
  }
  bool parallel = n * out * in > kParallelGrain;
  if constexpr (!kIsF32<E>)
    forRows(n, parallel, [&](int64_t i) {
      E::widen(x + i * in, xBuf.data() + i * in, in);
    });
  forTileChunks(out, parallel, [&](int64_t begin, int64_t end) {
    float *wTile = scratch(1, kTileRows * kTileDepth);
    for (int64_t r0 = begin; r0 < end; r0 += kTileRows) {
      int64_t rows = std::min(kTileRows, end - r0);
      float *c;
      int64_t ldc;
      if constexpr (floatOut) {
        c = y + r0;
        ldc = out;
      } else {
        c = scratch(2, n * rows);
        ldc = rows;
      }
      for (int64_t k0 = 0; k0 < in; k0 += kTileDepth) {
        int64_t depth = std::min(kTileDepth, in - k0);
        for (int64_t r = 0; r < rows; ++r)
          dequantRow(r0 + r, k0, depth, wTile + r * depth);
        gemmWeightTile(xf, n, in, k0, wTile, rows, depth, c, ldc, k0 != 0);
      }
      for (int64_t i = 0; i < n; ++i) {
        float *ci = c + i * ldc;
        if (rowScales) {
          const float *s = rowScales + r0;
#pragma omp simd
          for (int64_t r = 0; r < rows; ++r)
            ci[r] *= s[r];
        }
        if constexpr (!floatOut)
          E::narrow(ci, y + i * out + r0, rows);
      }
    }
  });
}

/// W8A16: y[n, out] = x[n, in] * W^T for x of E::T (float32 or 16-bit) and
/// int8 q, W[o, i] = scales[o] * q[o, i] (groupSize 0) or scales[o, g] *
/// q[o, i], g = i / groupSize; OutT is E::T, or float for 16-bit x with
/// float32 output. Per channel every output is scales[o] * (float sum of x *
/// q); group-wise the sum of the groups' scaled sums (decode) or the sum of
/// x * (scale * q) (prefill); then rounded once to OutT.
template <class E, class OutT>
static void linearW8(const typename E::T *x, const int8_t *q,
                     const float *scales, OutT *y, int64_t n, int64_t in,
                     int64_t out, int64_t groupSize) {
  constexpr bool floatOut = std::is_same_v<OutT, float>;
  if (n <= 0 || out <= 0)
    return;
  if (in <= 0) {
    std::memset(static_cast<void *>(y), 0, sizeof(OutT) * size_t(n * out));
    return;
  }
  if (groupSize < 0) // never emitted (the compiler checks): per channel
    groupSize = 0;
  const int64_t groups = groupSize > 0 ? (in + groupSize - 1) / groupSize : 1;
  if (n == 1) {
    // Decode: memory-bound GEMV reading one byte per weight, rows split over
    // threads; x is widened once.
    const float *xf = loadRow<E>(x, in, 0);
    const bool parallel = out * in > kParallelGrain;
    forRowChunks(out, parallel, [&](int64_t begin, int64_t end) {
      const float *sb = scales + begin * groups;
      if constexpr (floatOut) {
        gemvRowsI8(xf, q + begin * in, sb, y + begin, in, end - begin,
                   groupSize);
      } else {
        float *yf = scratch(1, end - begin);
        gemvRowsI8(xf, q + begin * in, sb, yf, in, end - begin, groupSize);
        E::narrow(yf, y + begin, end - begin);
      }
    });
    return;
  }
  // Prefill: int8 weights widened to float (exact) with the row scales
  // applied to the finished sums; group-wise weights are dequantized into
  // the tile instead (scale * q, one rounding).
  if (groupSize > 0)
    prefillDequantized<E>(x, y, n, in, out, /*rowScales=*/nullptr,
                          [&](int64_t o, int64_t k0, int64_t depth, float *dst) {
                            dequantRowI8(q + o * in, scales + o * groups, dst,
                                         k0, depth, groupSize);
                          });
  else
    prefillDequantized<E>(x, y, n, in, out, scales,
                          [&](int64_t o, int64_t k0, int64_t depth, float *dst) {
                            widenI8(q + o * in + k0, dst, depth);
                          });
}

/// W4A16: y[n, out] = x[n, in] * W^T with W[o, i] = scales[o, g] * (q[o, i]
/// - zeros[o, g]), g = i / groupSize, q packed two nibbles a byte
/// (kernel_abi.h), for x of E::T; OutT is E::T, or float for 16-bit x with
/// float32 output.
template <class E, class OutT>
static void linearW4(const typename E::T *x, const int8_t *q,
                     const float *scales, const int8_t *zeros, OutT *y,
                     int64_t n, int64_t in, int64_t out, int64_t groupSize) {
  constexpr bool floatOut = std::is_same_v<OutT, float>;
  if (n <= 0 || out <= 0)
    return;
  if (in <= 0) {
    std::memset(static_cast<void *>(y), 0, sizeof(OutT) * size_t(n * out));
    return;
  }
  if (groupSize <= 0) // never emitted (the compiler checks): treat as one group
    groupSize = in + (in & 1);
  const int64_t rowBytes = q4RowBytes(in), groups = q4Groups(in, groupSize);
  if (n == 1) {
    // Decode: memory-bound GEMV reading half a byte per weight, nibbles
    // unpacked in registers, rows split over threads; x is widened once.
    const float *xf = loadRow<E>(x, in, 0);
    const bool parallel = out * in > kParallelGrain;
    forRowChunks(out, parallel, [&](int64_t begin, int64_t end) {
      const int8_t *qb = q + begin * rowBytes;
      const float *sb = scales + begin * groups;
      const int8_t *zb = zeros + begin * groups;
      if constexpr (floatOut) {
        gemvRowsQ4(xf, qb, sb, zb, y + begin, in, end - begin, groupSize);
      } else {
        float *yf = scratch(1, end - begin);
        gemvRowsQ4(xf, qb, sb, zb, yf, in, end - begin, groupSize);
        E::narrow(yf, y + begin, end - begin);
      }
    });
    return;
  }
  // Prefill: weights dequantized to float (scale * (q - zero), rounded
  // once) tile by tile.
  prefillDequantized<E>(x, y, n, in, out, /*rowScales=*/nullptr,
                        [&](int64_t o, int64_t k0, int64_t depth, float *dst) {
                          dequantRowQ4(q + o * rowBytes, scales + o * groups,
                                       zeros + o * groups, dst, k0, depth,
                                       groupSize);
                        });
}

template <int64_t F>
static void linearBlocks(const float *x, const uint8_t *w, float *y, int64_t n,
                         int64_t in, int64_t out) {
  if (n <= 0 || out <= 0)
    return;
  if (in <= 0) {
    std::memset(y, 0, sizeof(float) * size_t(n * out));
    return;
  }
  constexpr int64_t elems = kiln_block_elems(F), bytes = kiln_block_bytes(F);
  const int64_t rowBytes = in / elems * bytes;
  if (n == 1) {
    // Decode: memory-bound GEMV over the raw blocks, rows split over threads.
    // Codes widened in registers (BlockKernelsHwy.cpp); the input's
    // 16-element sums are shared by every row.
    const bool parallel = out * in > kParallelGrain;
    std::vector<float> xsum16(size_t(in / 16));
    blockXSums16(x, in, xsum16.data());
    forRowChunks(out, parallel, [&](int64_t begin, int64_t end) {
      gemvRowsBlocksSimd(F, x, xsum16.data(), w + begin * rowBytes, y + begin,
                         in, end - begin);
    });
    return;
  }
  // Prefill: tiles decoded to float (kTileDepth is a multiple of 256, so a
  // tile starts on a block boundary; its depth is whole blocks).
  prefillDequantized<F32>(x, y, n, in, out, /*rowScales=*/nullptr,
                          [&](int64_t o, int64_t k0, int64_t depth, float *dst) {
                            kiln_block_decode_row(
                                F, w + o * rowBytes + k0 / elems * bytes,
                                depth, dst);
                          });
}

float quantizeActivationRow(const float *x, int8_t *xq, int64_t in,
                            float actScale) {
  float s = actScale;
  if (s == 0.0f) {
    float amax = 0.0f;
    for (int64_t i = 0; i < in; ++i)
      amax = std::max(amax, std::fabs(x[i]));
    s = amax / 127.0f;
    if (s == 0.0f) {
      std::memset(xq, 0, size_t(in));
      return s;
    }
  }
  for (int64_t i = 0; i < in; ++i) {
    float r = std::round(x[i] / s); // half away from zero, as roundf
    xq[i] = int8_t(std::min(127.0f, std::max(-127.0f, r)));
  }
  return s;
}

/// Output rows of one int32 accumulator block of the W8A8 GEMM.
static constexpr int64_t kW8A8BlockRows = 64;

/// W8A8 (SmoothQuant, Xiao et al. 2023): every activation row quantized to
/// int8 (quantizeActivationRow), int8 x int8 products summed exactly in
/// int32 (gemmRowsI8I8), y[r, o] = sx[r] * scales[o] * float(acc[r, o])
/// rounded once to E::T. Threads own slices of the output rows; each slice
/// is done in blocks of kW8A8BlockRows rows for all n tokens (the block's
/// weights stay in cache across the tokens).
template <class E>
static void linearW8A8(const typename E::T *x, const int8_t *q,
                       const float *scales, typename E::T *y, int64_t n,
                       int64_t in, int64_t out, float actScale) {
  using T = typename E::T;
  if (n <= 0 || out <= 0)
    return;
  if (in <= 0) {
    std::memset(static_cast<void *>(y), 0, sizeof(T) * size_t(n * out));
    return;
  }
  if (!(actScale > 0.0f)) // 0 (dynamic), or never emitted: negative / NaN
    actScale = 0.0f;
  std::vector<int8_t> xq(size_t(n * in));
  std::vector<float> sx(static_cast<size_t>(n));
  bool parallel = n * out * in > kParallelGrain;
  forRows(n, parallel, [&](int64_t i) {
    sx[size_t(i)] = quantizeActivationRow(loadRow<E>(x + i * in, in, 1),
                                          xq.data() + i * in, in, actScale);
  });
  forTileChunks(out, parallel, [&](int64_t begin, int64_t end) {
    thread_local std::vector<int32_t> acc;
    for (int64_t r0 = begin; r0 < end; r0 += kW8A8BlockRows) {
      const int64_t rows = std::min(kW8A8BlockRows, end - r0);
      if (acc.size() < size_t(n * rows))
        acc.resize(size_t(n * rows));
      gemmRowsI8I8(xq.data(), n, q + r0 * in, in, rows, acc.data());
      for (int64_t i = 0; i < n; ++i) {
        const float si = sx[size_t(i)];
        const int32_t *ai = acc.data() + i * rows;
        T *yi = y + i * out + r0;
        for (int64_t r = 0; r < rows; ++r) {
          const float v = si * scales[r0 + r] * float(ai[r]);
          if constexpr (kIsF32<E>)
            yi[r] = v;
          else if constexpr (std::is_same_v<E, F16>)
            yi[r] = floatToF16(v);
          else
            yi[r] = floatToBf16(v);
        }
      }
    }
  });
}

} // namespace kiln::rt::cpu

using namespace kiln::rt::cpu;

// The kernel ABI must stay exported from libkiln_runtime.so.
extern "C" {

void kiln_k_linear_blocks(const float *x, const int8_t *w, float *y, int64_t n,
                          int64_t in, int64_t out, int64_t format) {
  const auto *wb = reinterpret_cast<const uint8_t *>(w);
  switch (format) {
#define KILN_BLOCK_CASE(f)                                                    \
  case f:                                                                     \
    linearBlocks<f>(x, wb, y, n, in, out);                                    \
    return;
    KILN_BLOCK_FORMATS(KILN_BLOCK_CASE)
#undef KILN_BLOCK_CASE
  default:
    return; // never emitted: the compiler verifies the format
  }
}

void kiln_k_linear(const float *x, const float *w, float *y, int64_t n,
                   int64_t in, int64_t out) {
  if (n <= 0 || out <= 0)
    return;
  if (n == 1) {
    // Decode: memory-bound GEMV, rows split over threads.
    const bool parallel = out * in > kParallelGrain;
    forRowChunks(out, parallel, [&](int64_t begin, int64_t end) {
      gemvRows(x, w, y, in, begin, end);
    });
    return;
  }
  // Prefill: each chunk of w's rows (multiples of 128) is multiplied with x
  // on AMX tiles or by a single-threaded sgemm (no competing BLAS pool).
  forTileChunks(out, n * out * in > kParallelGrain,
                [&](int64_t begin, int64_t end) {
                  gemmDenseF32(x, n, in, w + begin * in, end - begin,
                               y + begin, out);
                });
}

// W8A16 (kernel_abi.h): int8 weights, per-output-channel float32 scales.
void kiln_k_linear_w8a16(const float *x, const int8_t *qweight,
                         const float *scales, float *y, int64_t n, int64_t in,
                         int64_t out, int64_t group_size) {
  linearW8<F32>(x, qweight, scales, y, n, in, out, group_size);
}

void kiln_k_linear_w8a16_f16(const kiln_f16_t *x, const int8_t *qweight,
                             const float *scales, kiln_f16_t *y, int64_t n,
                             int64_t in, int64_t out, int64_t group_size) {
  linearW8<F16>(x, qweight, scales, y, n, in, out, group_size);
}

void kiln_k_linear_w8a16_bf16(const kiln_bf16_t *x, const int8_t *qweight,
                              const float *scales, kiln_bf16_t *y, int64_t n,
                              int64_t in, int64_t out, int64_t group_size) {
  linearW8<Bf16>(x, qweight, scales, y, n, in, out, group_size);
}

void kiln_k_linear_w8a16_f16_f32(const kiln_f16_t *x, const int8_t *qweight,
                                 const float *scales, float *y, int64_t n,
                                 int64_t in, int64_t out, int64_t group_size) {
  linearW8<F16>(x, qweight, scales, y, n, in, out, group_size);
}

void kiln_k_linear_w8a16_bf16_f32(const kiln_bf16_t *x, const int8_t *qweight,
                                  const float *scales, float *y, int64_t n,
                                  int64_t in, int64_t out, int64_t group_size) {
  linearW8<Bf16>(x, qweight, scales, y, n, in, out, group_size);
}

// W8A8 (kernel_abi.h): SmoothQuant int8 activations x int8 weights.
void kiln_k_linear_w8a8(const float *x, const int8_t *qweight,
                        const float *scales, float *y, int64_t n, int64_t in,
                        int64_t out, float act_scale) {
  linearW8A8<F32>(x, qweight, scales, y, n, in, out, act_scale);
}

void kiln_k_linear_w8a8_f16(const kiln_f16_t *x, const int8_t *qweight,
                            const float *scales, kiln_f16_t *y, int64_t n,
                            int64_t in, int64_t out, float act_scale) {
  linearW8A8<F16>(x, qweight, scales, y, n, in, out, act_scale);
}

void kiln_k_linear_w8a8_bf16(const kiln_bf16_t *x, const int8_t *qweight,
                             const float *scales, kiln_bf16_t *y, int64_t n,
                             int64_t in, int64_t out, float act_scale) {
  linearW8A8<Bf16>(x, qweight, scales, y, n, in, out, act_scale);
}

// W4A16 (kernel_abi.h): packed 4-bit weights, group-wise scales and zeros.
void kiln_k_linear_w4a16(const float *x, const int8_t *qweight,
                         const float *scales, const int8_t *zeros, float *y,
                         int64_t n, int64_t in, int64_t out,
                         int64_t group_size) {
  linearW4<F32>(x, qweight, scales, zeros, y, n, in, out, group_size);
}

void kiln_k_linear_w4a16_f16(const kiln_f16_t *x, const int8_t *qweight,
                             const float *scales, const int8_t *zeros,
                             kiln_f16_t *y, int64_t n, int64_t in, int64_t out,
                             int64_t group_size) {
  linearW4<F16>(x, qweight, scales, zeros, y, n, in, out, group_size);
}

void kiln_k_linear_w4a16_bf16(const kiln_bf16_t *x, const int8_t *qweight,
                              const float *scales, const int8_t *zeros,
                              kiln_bf16_t *y, int64_t n, int64_t in,
                              int64_t out, int64_t group_size) {
  linearW4<Bf16>(x, qweight, scales, zeros, y, n, in, out, group_size);
}

void kiln_k_linear_w4a16_f16_f32(const kiln_f16_t *x, const int8_t *qweight,
                                 const float *scales, const int8_t *zeros,
                                 float *y, int64_t n, int64_t in, int64_t out,
                                 int64_t group_size) {
  linearW4<F16>(x, qweight, scales, zeros, y, n, in, out, group_size);
}

void kiln_k_linear_w4a16_bf16_f32(const kiln_bf16_t *x, const int8_t *qweight,
                                  const float *scales, const int8_t *zeros,
                                  float *y, int64_t n, int64_t in, int64_t out,
                                  int64_t group_size) {
  linearW4<Bf16>(x, qweight, scales, zeros, y, n, in, out, group_size);
}

// f16 and bf16: the same kernels over 16-bit elements (kernel_abi.h).
#define KILN_DEFINE_16BIT_LINEARS(sfx, E, T)                                   \
  void kiln_k_linear_##sfx(const T *x, const T *w, T *y, int64_t n,            \
                           int64_t in, int64_t out) {                          \
    linear16<E>(x, w, y, n, in, out);                                          \
  }                                                                            \
  void kiln_k_linear_##sfx##_f32(const T *x, const T *w, float *y, int64_t n,  \
                                 int64_t in, int64_t out) {                    \
    linear16<E>(x, w, y, n, in, out);                                          \
  }
KILN_DEFINE_16BIT_LINEARS(f16, F16, kiln_f16_t)
KILN_DEFINE_16BIT_LINEARS(bf16, Bf16, kiln_bf16_t)
#undef KILN_DEFINE_16BIT_LINEARS

} // extern "C"

//===- Linear.cpp - Whole-op linears over the linear tile; W8A8 -----------===//
//
// The runtime's whole-op linears y[n, out] = x[n, in] * W^T
// (WholeOpKernels.h) for every weight kind (float32, f16 / bf16, W8A16,
// W4A16, the GGML block formats) and activation type: exactly the loop that
// codegen instantiates for a linear (codegen/CPU/FusedKernelEmitter.cpp),
// chunks of output rows over the thread pool, each computed by
// kiln_k_linear_tile (FusedKernels.cpp: the decode GEMVs of Gemv.cpp,
// QuantKernelsHwy.cpp and BlockKernelsHwy.cpp; prefill on dequantized tiles
// multiplied on AMX tiles or with OpenBLAS). And W8A8 (SmoothQuant int8
// activations x int8 weights, exact int32 GEMM), which quantizes its
// activations per call and stays a runtime kernel (kernel_abi.h).
//
//===----------------------------------------------------------------------===//
#include "cpu/Blas.h"
#include "cpu/KernelTemplates.h"
#include "cpu/WholeOpKernels.h"
#include "kiln_rt/block_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

namespace kiln::rt::cpu {

/// Output rows of one prefill step of a quantized or 16-bit weight: one
/// 128-row tile, so the dequantized weights stay in L2.
static constexpr int64_t kTileRows = 128;

/// y[n, out] = x[n, in] * W^T for x of E::T and W as `w` describes; OutT is
/// E::T, or float for the classifier. x is widened once (16-bit); every
/// output element is computed in float32 by kiln_k_linear_tile and rounded
/// once to OutT. Chunks of output rows (multiples of 16 for decode, 128 for
/// prefill; a function of `out` alone, so results do not depend on the
/// thread count) go to the pool's threads.
template <class E, class OutT>
static void linearTiled(const kiln_linear_weight &w, const typename E::T *x,
                        OutT *y, int64_t n, int64_t in, int64_t out) {
  constexpr bool floatOut = std::is_same_v<OutT, float>;
  if (n <= 0 || out <= 0)
    return;
  if (in <= 0) {
    std::memset(static_cast<void *>(y), 0, sizeof(OutT) * size_t(n * out));
    return;
  }
  std::vector<float> xBuf;
  const float *xf;
  if constexpr (kIsF32<E>) {
    xf = x;
  } else {
    xBuf.resize(size_t(n * in));
    E::widen(x, xBuf.data(), n * in);
    xf = xBuf.data();
  }
  // Dense float32 weights go to the GEMM a whole chunk at a time (no
  // dequantized tile to keep in cache).
  const bool wholeChunk = n == 1 || (floatOut && w.kind == KILN_WEIGHT_F32);
  parallelFor(out, chunkGrain(out, n == 1 ? 16 : kTileRows),
              n * in * out > kParallelGrain, [&](int64_t begin, int64_t end) {
                const int64_t step = wholeChunk ? end - begin : kTileRows;
                for (int64_t s0 = begin; s0 < end; s0 += step) {
                  const int64_t s1 = std::min(s0 + step, end), rows = s1 - s0;
                  if constexpr (floatOut) {
                    kiln_k_linear_tile(&w, xf, n, in, s0, s1, y + s0, out);
                  } else {
                    float *c = scratch(2, n * rows);
                    kiln_k_linear_tile(&w, xf, n, in, s0, s1, c, rows);
                    for (int64_t t = 0; t < n; ++t)
                      E::narrow(c + t * rows, y + t * out + s0, rows);
                  }
                }
              });
}

/// The descriptor of a weight of `kind` (kernel_abi.h kiln_linear_weight).
static kiln_linear_weight weightOf(int32_t kind, const void *data,
                                   const float *scales = nullptr,
                                   const int8_t *zeros = nullptr,
                                   int64_t groupSize = 0, int32_t format = 0) {
  kiln_linear_weight w{};
  w.kind = kind;
  w.format = format;
  w.data = data;
  w.scales = scales;
  w.zeros = zeros;
  w.group_size = groupSize;
  return w;
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

// Exported from libkiln_runtime.so for the runtime's tests and benchmarks
// (WholeOpKernels.h); W8A8 is part of the kernel ABI.
extern "C" {

void kiln_k_linear(const float *x, const float *w, float *y, int64_t n,
                   int64_t in, int64_t out) {
  linearTiled<F32>(weightOf(KILN_WEIGHT_F32, w), x, y, n, in, out);
}

void kiln_k_linear_blocks(const float *x, const int8_t *w, float *y, int64_t n,
                          int64_t in, int64_t out, int64_t format) {
  if (kiln_block_elems(format) == 0)
    return; // never emitted: the compiler verifies the format
  linearTiled<F32>(
      weightOf(KILN_WEIGHT_BLOCKS, w, nullptr, nullptr, 0, int32_t(format)),
      x, y, n, in, out);
}

// W8A16 and W4A16 (kernel_abi.h): a negative group size (never emitted) is
// per channel for W8 and one group per row for W4, as kiln_k_linear_tile
// treats it.
#define KILN_DEFINE_QUANT_LINEARS(sfx, E, T, OutT)                             \
  void kiln_k_linear_w8a16##sfx(const T *x, const int8_t *qweight,             \
                                const float *scales, OutT *y, int64_t n,       \
                                int64_t in, int64_t out, int64_t group_size) { \
    linearTiled<E>(weightOf(KILN_WEIGHT_W8, qweight, scales, nullptr,          \
                            std::max<int64_t>(group_size, 0)),                 \
                   x, y, n, in, out);                                          \
  }                                                                            \
  void kiln_k_linear_w4a16##sfx(const T *x, const int8_t *qweight,             \
                                const float *scales, const int8_t *zeros,      \
                                OutT *y, int64_t n, int64_t in, int64_t out,   \
                                int64_t group_size) {                          \
    linearTiled<E>(weightOf(KILN_WEIGHT_W4, qweight, scales, zeros,            \
                            group_size),                                       \
                   x, y, n, in, out);                                          \
  }
KILN_DEFINE_QUANT_LINEARS(, F32, float, float)
KILN_DEFINE_QUANT_LINEARS(_f16, F16, kiln_f16_t, kiln_f16_t)
KILN_DEFINE_QUANT_LINEARS(_bf16, Bf16, kiln_bf16_t, kiln_bf16_t)
KILN_DEFINE_QUANT_LINEARS(_f16_f32, F16, kiln_f16_t, float)
KILN_DEFINE_QUANT_LINEARS(_bf16_f32, Bf16, kiln_bf16_t, float)
#undef KILN_DEFINE_QUANT_LINEARS

// f16 and bf16 weights and activations; _f32: float32 output (logits).
#define KILN_DEFINE_16BIT_LINEARS(sfx, E, T, KIND)                             \
  void kiln_k_linear_##sfx(const T *x, const T *w, T *y, int64_t n,            \
                           int64_t in, int64_t out) {                          \
    linearTiled<E>(weightOf(KIND, w), x, y, n, in, out);                       \
  }                                                                            \
  void kiln_k_linear_##sfx##_f32(const T *x, const T *w, float *y, int64_t n,  \
                                 int64_t in, int64_t out) {                    \
    linearTiled<E>(weightOf(KIND, w), x, y, n, in, out);                       \
  }
KILN_DEFINE_16BIT_LINEARS(f16, F16, kiln_f16_t, KILN_WEIGHT_F16)
KILN_DEFINE_16BIT_LINEARS(bf16, Bf16, kiln_bf16_t, KILN_WEIGHT_BF16)
#undef KILN_DEFINE_16BIT_LINEARS

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

} // extern "C"

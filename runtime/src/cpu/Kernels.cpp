//===- Kernels.cpp - CPU kernels of the Kiln kernel ABI -------*- C++ -*-===//
//
// Implementations of runtime/include/kiln_rt/kernel_abi.h, called by emitted
// model.so code: float32, and f16 / bf16 sharing the float32 code paths
// (16-bit rows are widened into small per-thread float buffers, computed with
// the float32 math and rounded back; the decode GEMV reads 16-bit weights
// directly and converts them in registers). Numerics follow llama2.c run.c
// (rmsnorm, softmax with max subtraction, RoPE with powf/cosf/sinf on float,
// SiLU with expf) so that greedy generation matches it token for token;
// reductions use several partial sums (and double where it is free) to stay
// within 1e-4 relative error of a float64 reference. Threads: OpenMP over rows
// / heads; cblas_sgemm (OpenBLAS, one BLAS thread per OpenMP thread) for linear
// layers with n > 1 (16-bit weights are converted to float one tile at a time).
// W8A16 linear layers (int8 weights, per-row or per-group float scales) follow
// the 16-bit linear: int8 GEMV widened in registers for decode, tiles widened
// (per row) or dequantized (per group) to float for sgemm in prefill. W4A16
// (packed unsigned nibbles, per-group scales and zeros) likewise: nibbles
// unpacked and zero-shifted in registers for decode (each group's sum scaled
// into the total), tiles dequantized to float for sgemm in prefill. W8A8
// (SmoothQuant) quantizes each activation row to int8 and runs an exact int32
// int8 x int8 GEMM. The SIMD loops of all quantized layers are Google Highway
// code in QuantKernelsHwy.cpp (dynamic dispatch: AVX-512, AVX2, SSE4, scalar).
// The INT8 and FP8 E4M3 KV cache attentions share the attention code: new K/V
// rows are quantized per (token, kv head) on append, cache rows dequantized
// into the per-thread float buffers the 16-bit attention widens into; the
// centered variants subtract the rotated calibrated key mean (one table per
// call) before quantizing keys and add it back after dequantizing.
//
//===----------------------------------------------------------------------===//
#include "cpu/Kernels.h"
#include "kiln_rt/block_formats.h"
#include "kiln_rt/rope_scaling.h"

#include "cpu/Blas.h"
#include "cpu/ThreadPool.h"

// GCC 12's AVX-512 intrinsics trip -W(maybe-)uninitialized on their own
// `__Y = __Y` placeholders (GCC PR 105593); the warnings point into the header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

namespace kiln::rt::cpu {

/// Work below this many floats (or multiply-adds) runs on one thread: an
/// OpenMP fork/join costs microseconds, far more when cores are shared.
static constexpr int64_t kParallelGrain = 1 << 17;

/// y[r] = dot(w[r, 0:in], x[0:in]) for r in [rowBegin, rowEnd). Sixteen
/// partial sums (vectorized, FMA where available) reduced pairwise: more
/// accurate than run.c's sequential sum, same result up to rounding.
__attribute__((target_clones("avx512f", "avx2", "default"))) void
gemvRows(const float *__restrict x, const float *__restrict w,
         float *__restrict y, int64_t in, int64_t rowBegin, int64_t rowEnd) {
  for (int64_t r = rowBegin; r < rowEnd; ++r) {
    const float *wr = w + r * in;
    float acc[16] = {0};
    int64_t j = 0;
    for (; j + 16 <= in; j += 16)
      for (int l = 0; l < 16; ++l)
        acc[l] += wr[j + l] * x[j + l];
    float tail = 0.0f;
    for (; j < in; ++j)
      tail += wr[j] * x[j];
    for (int s = 8; s > 0; s >>= 1)
      for (int l = 0; l < s; ++l)
        acc[l] += acc[l + s];
    y[r] = acc[0] + tail;
  }
}

//===----------------------------------------------------------------------===//
// 16-bit conversions and GEMV, one version per instruction set. Conversions
// are bit-identical to the scalar ones in Kernels.h at every level.
//===----------------------------------------------------------------------===//

namespace generic {
template <bool Bf16> static inline float widen1(uint16_t h) {
  return Bf16 ? bf16ToFloat(h) : f16ToFloat(h);
}
template <bool Bf16> static inline uint16_t narrow1(float f) {
  return Bf16 ? floatToBf16(f) : floatToF16(f);
}
template <bool Bf16>
static void widen(const uint16_t *src, float *dst, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    dst[i] = widen1<Bf16>(src[i]);
}
template <bool Bf16>
static void narrow(const float *src, uint16_t *dst, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    dst[i] = narrow1<Bf16>(src[i]);
}
template <bool Bf16>
static void gemv(const float *x, const uint16_t *w, float *y, int64_t in,
                 int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t *wr = w + r * in;
    float acc[16] = {0};
    int64_t j = 0;
    for (; j + 16 <= in; j += 16)
      for (int l = 0; l < 16; ++l)
        acc[l] += widen1<Bf16>(wr[j + l]) * x[j + l];
    float tail = 0.0f;
    for (; j < in; ++j)
      tail += widen1<Bf16>(wr[j]) * x[j];
    for (int s = 8; s > 0; s >>= 1)
      for (int l = 0; l < s; ++l)
        acc[l] += acc[l + s];
    y[r] = acc[0] + tail;
  }
}
} // namespace generic

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
/// Eight 16-bit values widened to float in a register.
template <bool Bf16> static inline __m256 load8(const uint16_t *p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
  if constexpr (Bf16)
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  else
    return _mm256_cvtph_ps(h);
}
/// Eight floats rounded to nearest even.
template <bool Bf16> static inline __m128i pack8(__m256 v) {
  if constexpr (Bf16) {
    __m256i b = _mm256_castps_si256(v);
    __m256i hi = _mm256_srli_epi32(b, 16);
    __m256i bias = _mm256_add_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(1)),
                                    _mm256_set1_epi32(0x7fff));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(b, bias), 16);
    __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, quiet, nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r),
                            _mm256_extracti128_si256(r, 1));
  } else {
    return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
}
static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
template <bool Bf16>
static void widen(const uint16_t *src, float *dst, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(dst + i, load8<Bf16>(src + i));
  for (; i < count; ++i)
    dst[i] = generic::widen1<Bf16>(src[i]);
}
template <bool Bf16>
static void narrow(const float *src, uint16_t *dst, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i),
                     pack8<Bf16>(_mm256_loadu_ps(src + i)));
  for (; i < count; ++i)
    dst[i] = generic::narrow1<Bf16>(src[i]);
}
/// y[0, R) = dot(w[r, :in], x) for R rows at once: x is loaded once per step
/// for all of them, two accumulators per row hide the FMA latency.
template <bool Bf16, int R>
static inline void dotRows(const float *x, const uint16_t *w, float *y,
                           int64_t in) {
  __m256 a[R], b[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    a[r] = b[r] = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= in; j += 16) {
    __m256 xa = _mm256_loadu_ps(x + j), xb = _mm256_loadu_ps(x + j + 8);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      a[r] = _mm256_fmadd_ps(load8<Bf16>(w + r * in + j), xa, a[r]);
      b[r] = _mm256_fmadd_ps(load8<Bf16>(w + r * in + j + 8), xb, b[r]);
    }
  }
  if (j + 8 <= in) {
    __m256 xa = _mm256_loadu_ps(x + j);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      a[r] = _mm256_fmadd_ps(load8<Bf16>(w + r * in + j), xa, a[r]);
    j += 8;
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    float s = hsum(_mm256_add_ps(a[r], b[r]));
    for (int64_t k = j; k < in; ++k)
      s += generic::widen1<Bf16>(w[r * in + k]) * x[k];
    y[r] = s;
  }
}
template <bool Bf16>
static void gemv(const float *x, const uint16_t *w, float *y, int64_t in,
                 int64_t rows) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    dotRows<Bf16, 4>(x, w + r * in, y + r, in);
  for (; r < rows; ++r)
    dotRows<Bf16, 1>(x, w + r * in, y + r, in);
}
} // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
namespace avx512 {
template <bool Bf16> static inline __m512 load16(const uint16_t *p) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
  if constexpr (Bf16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  else
    return _mm512_cvtph_ps(h);
}
template <bool Bf16> static inline __m256i pack16(__m512 v) {
  if constexpr (Bf16) {
    __m512i b = _mm512_castps_si512(v);
    __m512i hi = _mm512_srli_epi32(b, 16);
    __m512i bias = _mm512_add_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(1)),
                                    _mm512_set1_epi32(0x7fff));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, bias), 16);
    __m512i quiet = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, quiet));
  } else {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
}
template <bool Bf16>
static void widen(const uint16_t *src, float *dst, int64_t count) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16)
    _mm512_storeu_ps(dst + i, load16<Bf16>(src + i));
  avx2::widen<Bf16>(src + i, dst + i, count - i);
}
template <bool Bf16>
static void narrow(const float *src, uint16_t *dst, int64_t count) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i),
                        pack16<Bf16>(_mm512_loadu_ps(src + i)));
  avx2::narrow<Bf16>(src + i, dst + i, count - i);
}
template <bool Bf16, int R>
static inline void dotRows(const float *x, const uint16_t *w, float *y,
                           int64_t in) {
  __m512 a[R], b[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    a[r] = b[r] = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= in; j += 32) {
    __m512 xa = _mm512_loadu_ps(x + j), xb = _mm512_loadu_ps(x + j + 16);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      a[r] = _mm512_fmadd_ps(load16<Bf16>(w + r * in + j), xa, a[r]);
      b[r] = _mm512_fmadd_ps(load16<Bf16>(w + r * in + j + 16), xb, b[r]);
    }
  }
  if (j + 16 <= in) {
    __m512 xa = _mm512_loadu_ps(x + j);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      a[r] = _mm512_fmadd_ps(load16<Bf16>(w + r * in + j), xa, a[r]);
    j += 16;
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    float s = _mm512_reduce_add_ps(_mm512_add_ps(a[r], b[r]));
    for (int64_t k = j; k < in; ++k)
      s += generic::widen1<Bf16>(w[r * in + k]) * x[k];
    y[r] = s;
  }
}
template <bool Bf16>
static void gemv(const float *x, const uint16_t *w, float *y, int64_t in,
                 int64_t rows) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    dotRows<Bf16, 4>(x, w + r * in, y + r, in);
  for (; r < rows; ++r)
    dotRows<Bf16, 1>(x, w + r * in, y + r, in);
}
} // namespace avx512
#pragma GCC pop_options

SimdLevel maxSimdLevel() {
  static const SimdLevel level = [] {
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") &&
                __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    if (avx2 && __builtin_cpu_supports("avx512f"))
      return SimdLevel::Avx512;
    return avx2 ? SimdLevel::Avx2 : SimdLevel::Generic;
  }();
  return level;
}

/// Lowered by tests only; -1 means "the highest supported".
static std::atomic<int> forcedSimdLevel{-1};

SimdLevel simdLevel() {
  int forced = forcedSimdLevel.load(std::memory_order_relaxed);
  return forced < 0 ? maxSimdLevel() : SimdLevel(forced);
}

SimdLevel setSimdLevelForTesting(SimdLevel level) {
  SimdLevel previous = simdLevel();
  level = std::min(level, maxSimdLevel());
  forcedSimdLevel.store(int(level), std::memory_order_relaxed);
  setQuantKernelTargetsForTesting(level == maxSimdLevel() ? SimdLevel::Avx512
                                                          : level);
  return previous;
}

#define KILN_DISPATCH(fn, ...)                                                 \
  switch (simdLevel()) {                                                       \
  case SimdLevel::Avx512:                                                      \
    return avx512::fn(__VA_ARGS__);                                            \
  case SimdLevel::Avx2:                                                        \
    return avx2::fn(__VA_ARGS__);                                              \
  case SimdLevel::Generic:                                                     \
    return generic::fn(__VA_ARGS__);                                           \
  }

void widenF16(const uint16_t *src, float *dst, int64_t count) {
  KILN_DISPATCH(widen<false>, src, dst, count);
}
void widenBf16(const uint16_t *src, float *dst, int64_t count) {
  KILN_DISPATCH(widen<true>, src, dst, count);
}
void narrowF16(const float *src, uint16_t *dst, int64_t count) {
  KILN_DISPATCH(narrow<false>, src, dst, count);
}
void narrowBf16(const float *src, uint16_t *dst, int64_t count) {
  KILN_DISPATCH(narrow<true>, src, dst, count);
}
void gemvRowsF16(const float *x, const uint16_t *w, float *y, int64_t in,
                 int64_t rows) {
  KILN_DISPATCH(gemv<false>, x, w, y, in, rows);
}
void gemvRowsBf16(const float *x, const uint16_t *w, float *y, int64_t in,
                  int64_t rows) {
  KILN_DISPATCH(gemv<true>, x, w, y, in, rows);
}
#undef KILN_DISPATCH

//===----------------------------------------------------------------------===//
// Kernels, templated over the element type
//===----------------------------------------------------------------------===//

namespace {
/// float32 elements: kernels compute in place on the caller's buffers.
struct F32 {
  using T = float;
};
/// 16-bit elements: rows are widened to float, computed with the float32
/// code and rounded back once.
struct F16 {
  using T = kiln_f16_t;
  static void widen(const T *s, float *d, int64_t c) { widenF16(s, d, c); }
  static void narrow(const float *s, T *d, int64_t c) { narrowF16(s, d, c); }
  static void gemv(const float *x, const T *w, float *y, int64_t in,
                   int64_t rows) {
    gemvRowsF16(x, w, y, in, rows);
  }
};
struct Bf16 {
  using T = kiln_bf16_t;
  static void widen(const T *s, float *d, int64_t c) { widenBf16(s, d, c); }
  static void narrow(const float *s, T *d, int64_t c) { narrowBf16(s, d, c); }
  static void gemv(const float *x, const T *w, float *y, int64_t in,
                   int64_t rows) {
    gemvRowsBf16(x, w, y, in, rows);
  }
};
} // namespace

template <class E> static constexpr bool kIsF32 = std::is_same_v<E, F32>;

/// Per-thread float scratch. Slot 0 belongs to a kernel's calling thread
/// outside its parallel regions (that thread is also thread 0 inside them);
/// slots 1-3 hold the buffers live at once within one parallel iteration.
static float *scratch(int slot, int64_t count) {
  thread_local std::vector<float> buffers[4];
  std::vector<float> &b = buffers[slot];
  if (b.size() < size_t(count))
    b.resize(size_t(count));
  return b.data();
}

/// `count` elements at p as float32: p itself for F32, else widened into
/// scratch `slot`.
template <class E>
static const float *loadRow(const typename E::T *p, int64_t count, int slot) {
  if constexpr (kIsF32<E>) {
    (void)count, (void)slot;
    return p;
  } else {
    float *buf = scratch(slot, count);
    E::widen(p, buf, count);
    return buf;
  }
}

/// Where to compute `count` output elements destined for p: p itself for
/// F32, else scratch `slot`; storeRow then rounds them into p.
template <class E>
static float *rowOut(typename E::T *p, int64_t count, int slot) {
  if constexpr (kIsF32<E>) {
    (void)count, (void)slot;
    return p;
  } else {
    return scratch(slot, count);
  }
}
template <class E>
static void storeRow(const float *row, typename E::T *p, int64_t count) {
  if constexpr (kIsF32<E>)
    (void)row, (void)p, (void)count;
  else
    E::narrow(row, p, count);
}

template <class T>
static void embedding(const int32_t *tokens, int64_t n, const T *table,
                      int64_t dim, T *out) {
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out + i * dim, table + int64_t(tokens[i]) * dim,
                sizeof(T) * size_t(dim));
}

/// Output rows [0, out) in chunks of chunkGrain(out, 16) rows (multiples
/// of 16: whole cache lines of float outputs) over the pool's threads when
/// `parallel` (ThreadPool.h): fn(begin, end) runs on the thread that claimed
/// the chunk, so per-thread scratch buffers are safe in fn. The chunks depend
/// on `out` alone, so every row is computed the same way for any thread
/// count. Used by the GEMVs and the prefill GEMMs: each chunk streams its own
/// rows of the weights.
template <class Fn>
static void forRowChunks(int64_t out, bool parallel, Fn &&fn) {
  parallelFor(out, chunkGrain(out, 16), parallel, fn);
}

/// fn(i) for every i in [0, count), over the pool's threads when `parallel`
/// (independent rows: elementwise kernels, norms, RoPE, cache appends).
template <class Fn> static void forRows(int64_t count, bool parallel, Fn &&fn) {
  parallelFor(count, chunkGrain(count, 1), parallel,
              [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i)
                  fn(i);
              });
}

template <class E>
static void rmsNorm(const typename E::T *x, const typename E::T *w,
                    typename E::T *y, int64_t n, int64_t dim, float eps) {
  const float *wf = loadRow<E>(w, dim, 0);
  forRows(n, n * dim > kParallelGrain, [&](int64_t i) {
    const float *xi = loadRow<E>(x + i * dim, dim, 1);
    float *yi = rowOut<E>(y + i * dim, dim, 2);
    double ss = 0.0;
    for (int64_t j = 0; j < dim; ++j)
      ss += double(xi[j]) * double(xi[j]);
    // run.c: ss /= size; ss += 1e-5f; ss = 1.0f / sqrtf(ss).
    float s = float(ss / double(dim));
    s += eps;
    s = 1.0f / sqrtf(s);
    for (int64_t j = 0; j < dim; ++j)
      yi[j] = wf[j] * (s * xi[j]);
    storeRow<E>(yi, y + i * dim, dim);
  });
}

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
  // single-threaded sgemm per float weight tile, accumulating over depth.
  std::vector<float> xf(size_t(n * in));
  bool parallel = n * out * in > kParallelGrain;
  forRows(n, parallel,
          [&](int64_t i) { E::widen(x + i * in, xf.data() + i * in, in); });
  forRowChunks(out, parallel, [&](int64_t begin, int64_t end) {
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
        sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(rows),
                    int(depth), 1.0f, xf.data() + k0, int(in), wTile,
                    int(depth), k0 == 0 ? 0.0f : 1.0f, c, int(ldc));
      }
      if constexpr (!floatOut)
        for (int64_t i = 0; i < n; ++i)
          E::narrow(c + i * rows, y + i * out + r0, rows);
    }
  });
}

/// Prefill (n > 1) of a weight-quantized linear y[n, out] = x[n, in] * W^T:
/// x as float (widened once for 16-bit); each thread owns a slice of the
/// output rows and runs a single-threaded sgemm per tile of kTileRows x
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
  forRowChunks(out, parallel, [&](int64_t begin, int64_t end) {
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
        sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(rows),
                    int(depth), 1.0f, xf + k0, int(in), wTile, int(depth),
                    k0 == 0 ? 0.0f : 1.0f, c, int(ldc));
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
  forRowChunks(out, parallel, [&](int64_t begin, int64_t end) {
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

/// RoPE over the per-pair inverse frequencies `freq` [rot_dim / 2].
template <class E>
static void ropeWithFreqs(const typename E::T *x, typename E::T *y, int64_t n,
                          int64_t heads, int64_t head_dim, int64_t rot_dim,
                          int64_t pos, const std::vector<float> &freq) {
  int64_t pairs = rot_dim / 2;
  int64_t width = heads * head_dim;
  forRows(n, n * width > kParallelGrain, [&](int64_t r) {
    {
      thread_local std::vector<float> fcr, fci;
      fcr.resize(freq.size());
      fci.resize(freq.size());
      float p = float(pos + r);
      for (int64_t i = 0; i < pairs; ++i) {
        float val = p * freq[size_t(i)];
        fcr[size_t(i)] = cosf(val);
        fci[size_t(i)] = sinf(val);
      }
      const float *xr = loadRow<E>(x + r * width, width, 1);
      float *yr = rowOut<E>(y + r * width, width, 2);
      for (int64_t h = 0; h < heads; ++h) {
        const float *xh = xr + h * head_dim;
        float *yh = yr + h * head_dim;
        for (int64_t i = 0; i < pairs; ++i) {
          float v0 = xh[2 * i], v1 = xh[2 * i + 1];
          yh[2 * i] = v0 * fcr[size_t(i)] - v1 * fci[size_t(i)];
          yh[2 * i + 1] = v0 * fci[size_t(i)] + v1 * fcr[size_t(i)];
        }
        if (yh != xh)
          for (int64_t j = 2 * pairs; j < head_dim; ++j)
            yh[j] = xh[j];
      }
      storeRow<E>(yr, y + r * width, width);
    }
  });
}

template <class E>
static void rope(const typename E::T *x, typename E::T *y, int64_t n,
                 int64_t heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
                 float theta) {
  int64_t pairs = rot_dim / 2;
  std::vector<float> freq(size_t(pairs > 0 ? pairs : 0));
  for (int64_t i = 0; i < pairs; ++i) // run.c: head_dim_i / (float)head_size
    freq[size_t(i)] = 1.0f / powf(theta, float(2 * i) / float(head_dim));
  ropeWithFreqs<E>(x, y, n, heads, head_dim, rot_dim, pos, freq);
}

/// kiln_k_rope_scaled: the table of kiln_rt/rope_scaling.h for this call.
template <class E>
static void ropeScaled(const typename E::T *x, typename E::T *y, int64_t n,
                       int64_t heads, int64_t head_dim, int64_t rot_dim,
                       int64_t pos, float theta, int64_t scaling, float factor,
                       float low, float high, int64_t originalMax) {
  int64_t pairs = rot_dim / 2;
  float t = kiln_rope_theta(theta, rot_dim, scaling, factor, originalMax,
                            pos + n);
  std::vector<float> freq(size_t(pairs > 0 ? pairs : 0));
  for (int64_t i = 0; i < pairs; ++i)
    freq[size_t(i)] = kiln_rope_inv_freq(i, head_dim, rot_dim, t, scaling,
                                         factor, low, high, originalMax);
  ropeWithFreqs<E>(x, y, n, heads, head_dim, rot_dim, pos, freq);
}

/// kiln_k_rope_factors: theta^(-2i/head_dim) / freq_factors[i].
template <class E>
static void ropeFactors(const typename E::T *x, typename E::T *y, int64_t n,
                        int64_t heads, int64_t head_dim, int64_t rot_dim,
                        int64_t pos, float theta, const float *factors) {
  int64_t pairs = rot_dim / 2;
  std::vector<float> freq(size_t(pairs > 0 ? pairs : 0));
  for (int64_t i = 0; i < pairs; ++i)
    freq[size_t(i)] =
        1.0f / powf(theta, float(2 * i) / float(head_dim)) / factors[i];
  ropeWithFreqs<E>(x, y, n, heads, head_dim, rot_dim, pos, freq);
}

/// y[r, :] = x[r, :] + b (the bias of a linear layer).
template <class E>
static void addBias(const typename E::T *x, const typename E::T *b,
                    typename E::T *y, int64_t n, int64_t width) {
  std::vector<float> bf(static_cast<size_t>(width));
  {
    const float *w = loadRow<E>(b, width, 0);
    std::copy(w, w + width, bf.begin());
  }
  forRows(n, n * width > kParallelGrain, [&](int64_t r) {
    const float *xr = loadRow<E>(x + r * width, width, 1);
    float *yr = rowOut<E>(y + r * width, width, 2);
    for (int64_t j = 0; j < width; ++j)
      yr[j] = xr[j] + bf[size_t(j)];
    storeRow<E>(yr, y + r * width, width);
  });
}

/// Cache rows converted per step of the 16-bit attention (64 x head_dim
/// floats: 32 KiB for head_dim 128).
static constexpr int64_t kKvChunk = 64;

/// Rows [0, count) of one kv head's slice of a cache (row stride kvDim) as
/// float: the cache itself for F32, else widened into scratch `slot` with
/// row stride headDim. `stride` receives the row stride of the result.
template <class E>
static const float *cacheRows(const typename E::T *base, int64_t count,
                              int64_t headDim, int64_t kvDim, int slot,
                              int64_t &stride) {
  if constexpr (kIsF32<E>) {
    (void)count, (void)headDim, (void)slot;
    stride = kvDim;
    return base;
  } else {
    float *buf = scratch(slot, count * headDim);
    for (int64_t t = 0; t < count; ++t)
      E::widen(base + t * kvDim, buf + t * headDim, headDim);
    stride = headDim;
    return buf;
  }
}

/// Cache access of attention(): a float / 16-bit cache, rows appended as
/// given and read through cacheRows (in place for F32).
template <class E> struct PlainKv {
  using T = typename E::T;
  T *kCache, *vCache;
  int64_t kvDim, headDim;
  void append(const T *k, const T *v, int64_t n, int64_t pos) const {
    // The new keys/values may already live in the cache.
    T *kDst = kCache + pos * kvDim, *vDst = vCache + pos * kvDim;
    if (k != kDst)
      std::memmove(kDst, k, sizeof(T) * size_t(n * kvDim));
    if (v != vDst)
      std::memmove(vDst, v, sizeof(T) * size_t(n * kvDim));
  }
  /// Rows [t0, t0 + count) of kv head kvh of the K (isV false) or V cache as
  /// float, row stride in `stride`.
  const float *rows(bool isV, int64_t t0, int64_t count, int64_t kvh,
                    int64_t &stride) const {
    const T *base = (isV ? vCache : kCache) + t0 * kvDim + kvh * headDim;
    return cacheRows<E>(base, count, headDim, kvDim, 2, stride);
  }
};

/// Per-token, per-kv-head symmetric INT8 quantization of one row of
/// `headDim` floats (kernel_abi.h, kiln_k_attention_kv8): returns the scale.
static float quantizeKvRow(const float *x, int8_t *q, int64_t headDim) {
  float amax = 0.0f;
  for (int64_t d = 0; d < headDim; ++d)
    amax = std::max(amax, std::fabs(x[d]));
  float s = amax / 127.0f;
  if (s == 0.0f) {
    std::memset(q, 0, size_t(headDim));
    return s;
  }
  for (int64_t d = 0; d < headDim; ++d) {
    float r = std::round(x[d] / s); // half away from zero
    q[d] = int8_t(std::min(127.0f, std::max(-127.0f, r)));
  }
  return s;
}

/// Per-token, per-kv-head FP8 E4M3FN quantization of one row of `headDim`
/// floats (kernel_abi.h, kiln_k_attention_kvf8): returns the scale.
static float quantizeKvRowFp8(const float *x, uint8_t *q, int64_t headDim) {
  float amax = 0.0f;
  for (int64_t d = 0; d < headDim; ++d)
    amax = std::max(amax, std::fabs(x[d]));
  float s = amax / 448.0f;
  if (s == 0.0f) {
    std::memset(q, 0, size_t(headDim));
    return s;
  }
  for (int64_t d = 0; d < headDim; ++d)
    q[d] = floatToE4M3(x[d] / s);
  return s;
}

/// The 256 E4M3FN values, decoded once (e4m3ToFloat).
static const float *e4m3Table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c)
      t[size_t(c)] = e4m3ToFloat(uint8_t(c));
    return t;
  }();
  return table.data();
}

/// INT8 codes of the KV cache (kiln_k_attention_kv8): value float(code).
struct Int8Codec {
  using Code = int8_t;
  static float quantize(const float *x, int8_t *q, int64_t headDim) {
    return quantizeKvRow(x, q, headDim);
  }
  float operator()(int8_t c) const { return float(c); }
};

/// FP8 E4M3FN codes of the KV cache (kiln_k_attention_kvf8): value looked up
/// in e4m3Table.
struct Fp8Codec {
  using Code = uint8_t;
  static float quantize(const float *x, uint8_t *q, int64_t headDim) {
    return quantizeKvRowFp8(x, q, headDim);
  }
  const float *table = e4m3Table();
  float operator()(uint8_t c) const { return table[c]; }
};

/// Rows between exact cos / sin evaluations of rotatedKeyMeans (kernel_abi.h:
/// anchors at multiples of 64, complex multiplication in between).
static constexpr int64_t kKeyMeanAnchor = 64;

/// Row t of rotatedKeyMeans from c[i] = cos(t w_i), s[i] = sin(t w_i): per
/// kv head h, out[h, 2i] = float(mu[h, 2i] c[i] - mu[h, 2i+1] s[i]),
/// out[h, 2i+1] = float(mu[h, 2i] s[i] + mu[h, 2i+1] c[i]) in double,
/// out[h, d] = mu[h, d] from d = 2 pairs (+ 0 turns -0 into +0: a zero mean
/// leaves k unchanged bit for bit). muD is mu widened to double.
__attribute__((target_clones("avx512f", "avx2", "default"))) static void
rotatedKeyMeanRow(const double *__restrict muD, const double *__restrict c,
                  const double *__restrict s, float *__restrict out,
                  int64_t kvHeads, int64_t headDim, int64_t pairs) {
  for (int64_t h = 0; h < kvHeads; ++h) {
    const double *mh = muD + h * headDim;
    float *oh = out + h * headDim;
    for (int64_t i = 0; i < pairs; ++i) {
      const double m0 = mh[2 * i], m1 = mh[2 * i + 1];
      oh[2 * i] = float(m0 * c[i] - m1 * s[i] + 0.0);
      oh[2 * i + 1] = float(m0 * s[i] + m1 * c[i] + 0.0);
    }
    for (int64_t d = 2 * pairs; d < headDim; ++d)
      oh[d] = float(mh[d] + 0.0);
  }
}

void rotatedKeyMeans(const float *mu, int64_t rows, int64_t kvHeads,
                     int64_t headDim, int64_t rotDim, float theta, float *out) {
  const int64_t pairs = std::max<int64_t>(0, std::min(rotDim, headDim) / 2);
  const int64_t kvDim = kvHeads * headDim;
  // Per pair: w_i and the one-step rotation e^(i w_i); mu widened once.
  const size_t np = static_cast<size_t>(pairs);
  std::vector<double> w(np), cw(np), sw(np), muD(mu, mu + kvDim);
  for (size_t i = 0; i < np; ++i) {
    w[i] = std::pow(double(theta), -double(2 * i) / double(headDim));
    cw[i] = std::cos(w[i]);
    sw[i] = std::sin(w[i]);
  }
  const int64_t blocks = (rows + kKeyMeanAnchor - 1) / kKeyMeanAnchor;
  forRows(blocks, rows * kvDim > kParallelGrain, [&](int64_t b) {
    {
      thread_local std::vector<double> c, s;
      c.resize(np);
      s.resize(np);
      const int64_t t0 = b * kKeyMeanAnchor;
      const int64_t t1 = std::min(rows, t0 + kKeyMeanAnchor);
      for (size_t i = 0; i < np; ++i) { // exact at the anchor
        c[i] = std::cos(double(t0) * w[i]);
        s[i] = std::sin(double(t0) * w[i]);
      }
      for (int64_t t = t0; t < t1; ++t) {
        rotatedKeyMeanRow(muD.data(), c.data(), s.data(), out + t * kvDim,
                          kvHeads, headDim, pairs);
        for (size_t i = 0; i < np; ++i) { // advance by e^(i w_i)
          const double ci = c[i], si = s[i];
          c[i] = ci * cw[i] - si * sw[i];
          s[i] = ci * sw[i] + si * cw[i];
        }
      }
    }
  });
}

/// Cache access of attention() for the 8-bit KV caches (INT8: Int8Codec,
/// FP8 E4M3: Fp8Codec): new rows quantized per (token, kv head) on append,
/// cache rows dequantized (scale * value) into scratch slot 2 when read.
/// With `keyMean` (the centered caches) keys are stored as k - m_t and read
/// back as scale * value + m_t.
template <class E, class Codec> struct QuantKv {
  using T = typename E::T;
  using Code = typename Codec::Code;
  Code *kCache, *vCache;
  float *kScales, *vScales;
  int64_t kvHeads, headDim;
  /// Rotated key means m_t [pos + n, kvHeads * headDim] (rotatedKeyMeans);
  /// null for uncentered caches.
  const float *keyMean = nullptr;

  void append(const T *k, const T *v, int64_t n, int64_t pos) const {
    const int64_t kvDim = kvHeads * headDim, rows = n * kvHeads;
    forRows(rows, rows * headDim > kParallelGrain, [&](int64_t r) {
      int64_t i = r / kvHeads, h = r % kvHeads;
      int64_t src = i * kvDim + h * headDim;
      int64_t dst = (pos + i) * kvDim + h * headDim;
      int64_t sIdx = (pos + i) * kvHeads + h;
      const float *x = loadRow<E>(k + src, headDim, 1);
      if (keyMean) {
        const float *m = keyMean + dst;
        float *centered = scratch(3, headDim);
        for (int64_t d = 0; d < headDim; ++d)
          centered[d] = x[d] - m[d];
        x = centered;
      }
      kScales[sIdx] = Codec::quantize(x, kCache + dst, headDim);
      vScales[sIdx] = Codec::quantize(loadRow<E>(v + src, headDim, 1),
                                      vCache + dst, headDim);
    });
  }
  /// Rows [t0, t0 + count) of kv head kvh of the K (isV false) or V cache as
  /// float, row stride in `stride`.
  const float *rows(bool isV, int64_t t0, int64_t count, int64_t kvh,
                    int64_t &stride) const {
    const int64_t kvDim = kvHeads * headDim;
    const Code *q = (isV ? vCache : kCache) + t0 * kvDim + kvh * headDim;
    const float *sc = (isV ? vScales : kScales) + t0 * kvHeads + kvh;
    const float *mean =
        isV || !keyMean ? nullptr : keyMean + t0 * kvDim + kvh * headDim;
    const Codec value;
    float *buf = scratch(2, count * headDim);
    for (int64_t t = 0; t < count; ++t) {
      float s = sc[t * kvHeads];
      const Code *qt = q + t * kvDim;
      float *bt = buf + t * headDim;
      if (mean) {
        const float *mt = mean + t * kvDim;
#pragma omp simd
        for (int64_t d = 0; d < headDim; ++d)
          bt[d] = s * value(qt[d]) + mt[d];
        continue;
      }
#pragma omp simd
      for (int64_t d = 0; d < headDim; ++d)
        bt[d] = s * value(qt[d]);
    }
    stride = headDim;
    return buf;
  }
};

template <class E, class Kv>
static void attention(const typename E::T *q, const typename E::T *k,
                      const typename E::T *v, const Kv &kv, typename E::T *out,
                      int64_t n, int64_t pos, int64_t heads, int64_t kv_heads,
                      int64_t head_dim, int64_t max_seq, float scale,
                      int64_t window = 0) {
  using T = typename E::T;
  (void)max_seq; // pos + n <= max_seq was validated by the runtime
  const int64_t qDim = heads * head_dim;
  const int64_t group = heads / kv_heads;
  kv.append(k, v, n, pos);

  const int64_t work = n * heads;
  bool parallel =
      work > 1 && n * heads * (pos + n) * head_dim > kParallelGrain / 2;
  // One (token, head) per chunk: causal rows differ in length, and claimed
  // chunks balance them.
  parallelFor(work, 1, parallel, [&](int64_t w, int64_t) {
    {
      thread_local std::vector<float> att, acc;
      att.resize(static_cast<size_t>(pos + n));
      acc.resize(static_cast<size_t>(head_dim));
      int64_t i = w / heads, h = w % heads;
      int64_t kvh = h / group;
      int64_t last = pos + i; // causal: keys [0, pos + i]
      // Sliding window: only the `window` most recent keys.
      int64_t first = window > 0 ? std::max<int64_t>(0, last - window + 1) : 0;
      const float *qh = loadRow<E>(q + i * qDim + h * head_dim, head_dim, 1);
      float maxScore = -INFINITY;
      for (int64_t t0 = first; t0 <= last; t0 += kKvChunk) {
        int64_t rows = std::min(kKvChunk, last + 1 - t0), stride;
        const float *kr = kv.rows(false, t0, rows, kvh, stride);
        for (int64_t t = 0; t < rows; ++t) {
          const float *kt = kr + t * stride;
          float s = 0.0f;
          for (int64_t d = 0; d < head_dim; ++d)
            s += qh[d] * kt[d];
          s *= scale;
          att[size_t(t0 + t)] = s;
          maxScore = std::max(maxScore, s);
        }
      }
      // run.c softmax: exp(x - max), normalised by the sum.
      double sum = 0.0;
      for (int64_t t = first; t <= last; ++t) {
        float e = expf(att[size_t(t)] - maxScore);
        att[size_t(t)] = e;
        sum += e;
      }
      float inv = float(1.0 / sum);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t t0 = first; t0 <= last; t0 += kKvChunk) {
        int64_t rows = std::min(kKvChunk, last + 1 - t0), stride;
        const float *vr = kv.rows(true, t0, rows, kvh, stride);
        for (int64_t t = 0; t < rows; ++t) {
          const float *vt = vr + t * stride;
          float a = att[size_t(t0 + t)] * inv;
          for (int64_t d = 0; d < head_dim; ++d)
            acc[size_t(d)] += a * vt[d];
        }
      }
      T *o = out + i * qDim + h * head_dim;
      if constexpr (kIsF32<E>)
        std::memcpy(o, acc.data(), sizeof(float) * size_t(head_dim));
      else
        E::narrow(acc.data(), o, head_dim);
    }
  });
}

template <class E>
static void attention(const typename E::T *q, const typename E::T *k,
                      const typename E::T *v, typename E::T *k_cache,
                      typename E::T *v_cache, typename E::T *out, int64_t n,
                      int64_t pos, int64_t heads, int64_t kv_heads,
                      int64_t head_dim, int64_t max_seq, float scale,
                      int64_t window = 0) {
  PlainKv<E> kv{k_cache, v_cache, kv_heads * head_dim, head_dim};
  attention<E>(q, k, v, kv, out, n, pos, heads, kv_heads, head_dim, max_seq,
               scale, window);
}

/// Attention over an 8-bit KV cache (kiln_k_attention_kv8 / _kvf8), with
/// keys centered on the rotated k_mean when it is non-null (the _centered
/// kernels). The m_t table covers rows [0, pos + n), is computed once per
/// call into the calling thread's scratch slot 0 and shared by all heads.
template <class E, class Codec>
static void attentionQuantKv(
    const typename E::T *q, const typename E::T *k, const typename E::T *v,
    typename Codec::Code *k_cache, typename Codec::Code *v_cache,
    float *k_scales, float *v_scales, const float *k_mean, typename E::T *out,
    int64_t n, int64_t pos, int64_t heads, int64_t kv_heads, int64_t head_dim,
    int64_t rot_dim, int64_t max_seq, float scale, float theta) {
  QuantKv<E, Codec> kv{k_cache, v_cache, k_scales, v_scales, kv_heads,
                       head_dim};
  if (k_mean) {
    float *table = scratch(0, (pos + n) * kv_heads * head_dim);
    rotatedKeyMeans(k_mean, pos + n, kv_heads, head_dim, rot_dim, theta, table);
    kv.keyMean = table;
  }
  attention<E>(q, k, v, kv, out, n, pos, heads, kv_heads, head_dim, max_seq,
               scale);
}

/// Elements per widened block of the 16-bit elementwise kernels.
static constexpr int64_t kElementBlock = 4096;

/// y[i] = f(a[i], b[i]).
template <class E, class F>
static void binary(const typename E::T *a, const typename E::T *b,
                   typename E::T *y, int64_t count, F f) {
  if constexpr (kIsF32<E>) {
    parallelFor(count, chunkGrain(count, 16), count > kParallelGrain,
                [&](int64_t b0, int64_t b1) {
#pragma omp simd
                  for (int64_t i = b0; i < b1; ++i)
                    y[i] = f(a[i], b[i]);
                });
  } else {
    int64_t blocks = (count + kElementBlock - 1) / kElementBlock;
    forRows(blocks, count > kParallelGrain, [&](int64_t blk) {
      int64_t i0 = blk * kElementBlock;
      int64_t len = std::min(kElementBlock, count - i0);
      const float *af = loadRow<E>(a + i0, len, 1);
      const float *bf = loadRow<E>(b + i0, len, 2);
      float *yf = scratch(3, len);
#pragma omp simd
      for (int64_t i = 0; i < len; ++i)
        yf[i] = f(af[i], bf[i]);
      E::narrow(yf, y + i0, len);
    });
  }
}

/// y[i] = f(x[i]).
template <class E, class F>
static void unary(const typename E::T *x, typename E::T *y, int64_t count,
                  F f) {
  if constexpr (kIsF32<E>) {
    parallelFor(count, chunkGrain(count, 16), count > kParallelGrain,
                [&](int64_t b0, int64_t b1) {
#pragma omp simd
                  for (int64_t i = b0; i < b1; ++i)
                    y[i] = f(x[i]);
                });
  } else {
    int64_t blocks = (count + kElementBlock - 1) / kElementBlock;
    forRows(blocks, count > kParallelGrain, [&](int64_t blk) {
      int64_t i0 = blk * kElementBlock;
      int64_t len = std::min(kElementBlock, count - i0);
      const float *xf = loadRow<E>(x + i0, len, 1);
      float *yf = scratch(3, len);
#pragma omp simd
      for (int64_t i = 0; i < len; ++i)
        yf[i] = f(xf[i]);
      E::narrow(yf, y + i0, len);
    });
  }
}

// run.c order: silu(gate) then * up (kernel_abi.h; generated fused
// kernels call the same functions).
static inline float swigluOp(float g, float u) { return kiln_swiglu(g, u); }
static inline float siluOp(float x) { return kiln_silu(x); }
static inline float addOp(float a, float b) { return a + b; }
static inline float mulOp(float a, float b) { return a * b; }

} // namespace kiln::rt::cpu

using namespace kiln::rt::cpu;

namespace {
struct SwigluFn {
  float operator()(float g, float u) const { return swigluOp(g, u); }
};
struct SiluFn {
  float operator()(float x) const { return siluOp(x); }
};
struct AddFn {
  float operator()(float a, float b) const { return addOp(a, b); }
};
struct MulFn {
  float operator()(float a, float b) const { return mulOp(a, b); }
};
} // namespace

// The kernel ABI must stay exported from libkiln_runtime.so.
extern "C" {

void kiln_k_embedding(const int32_t *tokens, int64_t n, const float *table,
                      int64_t vocab, int64_t dim, float *out) {
  (void)vocab; // ids were validated against vocab by the runtime
  embedding(tokens, n, table, dim, out);
}

void kiln_k_embedding_blocks(const int32_t *tokens, int64_t n,
                             const int8_t *table, int64_t vocab, int64_t dim,
                             float *out, int64_t format) {
  (void)vocab; // ids were validated against vocab by the runtime
  const int64_t rowBytes =
      dim / kiln_block_elems(format) * kiln_block_bytes(format);
  const auto *t = reinterpret_cast<const uint8_t *>(table);
  for (int64_t i = 0; i < n; ++i)
    kiln_block_decode_row(format, t + int64_t(tokens[i]) * rowBytes, dim,
                          out + i * dim);
}

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

void kiln_k_rms_norm(const float *x, const float *w, float *y, int64_t n,
                     int64_t dim, float eps) {
  rmsNorm<F32>(x, w, y, n, dim, eps);
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
  // Prefill: each chunk of w's rows (multiples of 16: whole lines of y) is
  // multiplied with x by a single-threaded sgemm (no competing BLAS pool).
  forRowChunks(out, n * out * in > kParallelGrain,
               [&](int64_t begin, int64_t end) {
                 sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n),
                       int(end - begin), int(in), 1.0f, x, int(in),
                       w + begin * in, int(in), 0.0f, y + begin, int(out));
               });
}

void kiln_k_rope(const float *x, float *y, int64_t n, int64_t heads,
                 int64_t head_dim, int64_t rot_dim, int64_t pos, float theta) {
  rope<F32>(x, y, n, heads, head_dim, rot_dim, pos, theta);
}

void kiln_k_attention(const float *q, const float *k, const float *v,
                      float *k_cache, float *v_cache, float *out, int64_t n,
                      int64_t pos, int64_t heads, int64_t kv_heads,
                      int64_t head_dim, int64_t max_seq, float scale) {
  attention<F32>(q, k, v, k_cache, v_cache, out, n, pos, heads, kv_heads,
                 head_dim, max_seq, scale);
}

void kiln_k_rope_scaled(const float *x, float *y, int64_t n, int64_t heads,
                        int64_t head_dim, int64_t rot_dim, int64_t pos,
                        float theta, int64_t scaling, float factor,
                        float low_freq_factor, float high_freq_factor,
                        int64_t original_max) {
  ropeScaled<F32>(x, y, n, heads, head_dim, rot_dim, pos, theta, scaling,
                  factor, low_freq_factor, high_freq_factor, original_max);
}

void kiln_k_rope_factors(const float *x, float *y, int64_t n, int64_t heads,
                         int64_t head_dim, int64_t rot_dim, int64_t pos,
                         float theta, const float *freq_factors) {
  ropeFactors<F32>(x, y, n, heads, head_dim, rot_dim, pos, theta,
                   freq_factors);
}

void kiln_k_add_bias(const float *x, const float *b, float *y, int64_t n,
                     int64_t width) {
  addBias<F32>(x, b, y, n, width);
}

void kiln_k_attention_window(const float *q, const float *k, const float *v,
                             float *k_cache, float *v_cache, float *out,
                             int64_t n, int64_t pos, int64_t heads,
                             int64_t kv_heads, int64_t head_dim,
                             int64_t max_seq, float scale, int64_t window) {
  attention<F32>(q, k, v, k_cache, v_cache, out, n, pos, heads, kv_heads,
                 head_dim, max_seq, scale, window);
}

void kiln_k_swiglu(const float *gate, const float *up, float *y,
                   int64_t count) {
  binary<F32>(gate, up, y, count, SwigluFn());
}

void kiln_k_silu(const float *x, float *y, int64_t count) {
  unary<F32>(x, y, count, SiluFn());
}

void kiln_k_add(const float *a, const float *b, float *y, int64_t count) {
  binary<F32>(a, b, y, count, AddFn());
}

void kiln_k_mul(const float *a, const float *b, float *y, int64_t count) {
  binary<F32>(a, b, y, count, MulFn());
}

// f16 and bf16: the same kernels over 16-bit elements (kernel_abi.h).
#define KILN_DEFINE_16BIT_KERNELS(sfx, E, T)                                   \
  void kiln_k_embedding_##sfx(const int32_t *tokens, int64_t n,                \
                              const T *table, int64_t vocab, int64_t dim,      \
                              T *out) {                                        \
    (void)vocab;                                                               \
    embedding(tokens, n, table, dim, out);                                     \
  }                                                                            \
  void kiln_k_rms_norm_##sfx(const T *x, const T *w, T *y, int64_t n,          \
                             int64_t dim, float eps) {                         \
    rmsNorm<E>(x, w, y, n, dim, eps);                                          \
  }                                                                            \
  void kiln_k_linear_##sfx(const T *x, const T *w, T *y, int64_t n,            \
                           int64_t in, int64_t out) {                          \
    linear16<E>(x, w, y, n, in, out);                                          \
  }                                                                            \
  void kiln_k_linear_##sfx##_f32(const T *x, const T *w, float *y, int64_t n,  \
                                 int64_t in, int64_t out) {                    \
    linear16<E>(x, w, y, n, in, out);                                          \
  }                                                                            \
  void kiln_k_rope_##sfx(const T *x, T *y, int64_t n, int64_t heads,           \
                         int64_t head_dim, int64_t rot_dim, int64_t pos,       \
                         float theta) {                                        \
    rope<E>(x, y, n, heads, head_dim, rot_dim, pos, theta);                    \
  }                                                                            \
  void kiln_k_attention_##sfx(                                                 \
      const T *q, const T *k, const T *v, T *k_cache, T *v_cache, T *out,      \
      int64_t n, int64_t pos, int64_t heads, int64_t kv_heads,                 \
      int64_t head_dim, int64_t max_seq, float scale) {                        \
    attention<E>(q, k, v, k_cache, v_cache, out, n, pos, heads, kv_heads,      \
                 head_dim, max_seq, scale);                                    \
  }                                                                            \
  void kiln_k_rope_scaled_##sfx(const T *x, T *y, int64_t n, int64_t heads,    \
                                int64_t head_dim, int64_t rot_dim,             \
                                int64_t pos, float theta, int64_t scaling,     \
                                float factor, float low, float high,           \
                                int64_t original_max) {                        \
    ropeScaled<E>(x, y, n, heads, head_dim, rot_dim, pos, theta, scaling,      \
                  factor, low, high, original_max);                            \
  }                                                                            \
  void kiln_k_rope_factors_##sfx(const T *x, T *y, int64_t n, int64_t heads,   \
                                 int64_t head_dim, int64_t rot_dim,            \
                                 int64_t pos, float theta,                     \
                                 const float *freq_factors) {                  \
    ropeFactors<E>(x, y, n, heads, head_dim, rot_dim, pos, theta,              \
                   freq_factors);                                              \
  }                                                                            \
  void kiln_k_add_bias_##sfx(const T *x, const T *b, T *y, int64_t n,          \
                             int64_t width) {                                  \
    addBias<E>(x, b, y, n, width);                                             \
  }                                                                            \
  void kiln_k_attention_window_##sfx(                                          \
      const T *q, const T *k, const T *v, T *k_cache, T *v_cache, T *out,      \
      int64_t n, int64_t pos, int64_t heads, int64_t kv_heads,                 \
      int64_t head_dim, int64_t max_seq, float scale, int64_t window) {        \
    attention<E>(q, k, v, k_cache, v_cache, out, n, pos, heads, kv_heads,      \
                 head_dim, max_seq, scale, window);                            \
  }                                                                            \
  void kiln_k_swiglu_##sfx(const T *gate, const T *up, T *y, int64_t count) {  \
    binary<E>(gate, up, y, count, SwigluFn());                                 \
  }                                                                            \
  void kiln_k_silu_##sfx(const T *x, T *y, int64_t count) {                    \
    unary<E>(x, y, count, SiluFn());                                           \
  }                                                                            \
  void kiln_k_add_##sfx(const T *a, const T *b, T *y, int64_t count) {         \
    binary<E>(a, b, y, count, AddFn());                                        \
  }                                                                            \
  void kiln_k_mul_##sfx(const T *a, const T *b, T *y, int64_t count) {         \
    binary<E>(a, b, y, count, MulFn());                                        \
  }

KILN_DEFINE_16BIT_KERNELS(f16, F16, kiln_f16_t)
KILN_DEFINE_16BIT_KERNELS(bf16, Bf16, kiln_bf16_t)
#undef KILN_DEFINE_16BIT_KERNELS

// INT8 KV cache (kernel_abi.h): per-token, per-kv-head symmetric scales.
void kiln_k_attention_kv8(const float *q, const float *k, const float *v,
                          int8_t *k_cache, int8_t *v_cache, float *k_scales,
                          float *v_scales, float *out, int64_t n, int64_t pos,
                          int64_t heads, int64_t kv_heads, int64_t head_dim,
                          int64_t max_seq, float scale) {
  attentionQuantKv<F32, Int8Codec>(q, k, v, k_cache, v_cache, k_scales,
                                   v_scales, nullptr, out, n, pos, heads,
                                   kv_heads, head_dim, 0, max_seq, scale, 0.0f);
}
void kiln_k_attention_kv8_f16(const kiln_f16_t *q, const kiln_f16_t *k,
                              const kiln_f16_t *v, int8_t *k_cache,
                              int8_t *v_cache, float *k_scales, float *v_scales,
                              kiln_f16_t *out, int64_t n, int64_t pos,
                              int64_t heads, int64_t kv_heads, int64_t head_dim,
                              int64_t max_seq, float scale) {
  attentionQuantKv<F16, Int8Codec>(q, k, v, k_cache, v_cache, k_scales,
                                   v_scales, nullptr, out, n, pos, heads,
                                   kv_heads, head_dim, 0, max_seq, scale, 0.0f);
}
void kiln_k_attention_kv8_bf16(const kiln_bf16_t *q, const kiln_bf16_t *k,
                               const kiln_bf16_t *v, int8_t *k_cache,
                               int8_t *v_cache, float *k_scales,
                               float *v_scales, kiln_bf16_t *out, int64_t n,
                               int64_t pos, int64_t heads, int64_t kv_heads,
                               int64_t head_dim, int64_t max_seq, float scale) {
  attentionQuantKv<Bf16, Int8Codec>(
      q, k, v, k_cache, v_cache, k_scales, v_scales, nullptr, out, n, pos,
      heads, kv_heads, head_dim, 0, max_seq, scale, 0.0f);
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

// FP8 E4M3 KV cache (kernel_abi.h): per-token, per-kv-head f32 scales.
void kiln_k_attention_kvf8(const float *q, const float *k, const float *v,
                           uint8_t *k_cache, uint8_t *v_cache, float *k_scales,
                           float *v_scales, float *out, int64_t n, int64_t pos,
                           int64_t heads, int64_t kv_heads, int64_t head_dim,
                           int64_t max_seq, float scale) {
  attentionQuantKv<F32, Fp8Codec>(q, k, v, k_cache, v_cache, k_scales, v_scales,
                                  nullptr, out, n, pos, heads, kv_heads,
                                  head_dim, 0, max_seq, scale, 0.0f);
}
void kiln_k_attention_kvf8_f16(const kiln_f16_t *q, const kiln_f16_t *k,
                               const kiln_f16_t *v, uint8_t *k_cache,
                               uint8_t *v_cache, float *k_scales,
                               float *v_scales, kiln_f16_t *out, int64_t n,
                               int64_t pos, int64_t heads, int64_t kv_heads,
                               int64_t head_dim, int64_t max_seq, float scale) {
  attentionQuantKv<F16, Fp8Codec>(q, k, v, k_cache, v_cache, k_scales, v_scales,
                                  nullptr, out, n, pos, heads, kv_heads,
                                  head_dim, 0, max_seq, scale, 0.0f);
}
void kiln_k_attention_kvf8_bf16(const kiln_bf16_t *q, const kiln_bf16_t *k,
                                const kiln_bf16_t *v, uint8_t *k_cache,
                                uint8_t *v_cache, float *k_scales,
                                float *v_scales, kiln_bf16_t *out, int64_t n,
                                int64_t pos, int64_t heads, int64_t kv_heads,
                                int64_t head_dim, int64_t max_seq,
                                float scale) {
  attentionQuantKv<Bf16, Fp8Codec>(q, k, v, k_cache, v_cache, k_scales,
                                   v_scales, nullptr, out, n, pos, heads,
                                   kv_heads, head_dim, 0, max_seq, scale, 0.0f);
}

// Centered 8-bit KV caches (kernel_abi.h): keys relative to the rotated
// calibrated mean.
void kiln_k_attention_kv8_centered(const float *q, const float *k,
                                   const float *v, int8_t *k_cache,
                                   int8_t *v_cache, float *k_scales,
                                   float *v_scales, const float *k_mean,
                                   float *out, int64_t n, int64_t pos,
                                   int64_t heads, int64_t kv_heads,
                                   int64_t head_dim, int64_t rot_dim,
                                   int64_t max_seq, float scale, float theta) {
  attentionQuantKv<F32, Int8Codec>(
      q, k, v, k_cache, v_cache, k_scales, v_scales, k_mean, out, n, pos, heads,
      kv_heads, head_dim, rot_dim, max_seq, scale, theta);
}
void kiln_k_attention_kvf8_centered(const float *q, const float *k,
                                    const float *v, uint8_t *k_cache,
                                    uint8_t *v_cache, float *k_scales,
                                    float *v_scales, const float *k_mean,
                                    float *out, int64_t n, int64_t pos,
                                    int64_t heads, int64_t kv_heads,
                                    int64_t head_dim, int64_t rot_dim,
                                    int64_t max_seq, float scale, float theta) {
  attentionQuantKv<F32, Fp8Codec>(q, k, v, k_cache, v_cache, k_scales, v_scales,
                                  k_mean, out, n, pos, heads, kv_heads,
                                  head_dim, rot_dim, max_seq, scale, theta);
}
#define KILN_DEFINE_CENTERED_KV_KERNELS(sfx, E, T)                             \
  void kiln_k_attention_kv8_centered_##sfx(                                    \
      const T *q, const T *k, const T *v, int8_t *k_cache, int8_t *v_cache,    \
      float *k_scales, float *v_scales, const float *k_mean, T *out,           \
      int64_t n, int64_t pos, int64_t heads, int64_t kv_heads,                 \
      int64_t head_dim, int64_t rot_dim, int64_t max_seq, float scale,         \
      float theta) {                                                           \
    attentionQuantKv<E, Int8Codec>(                                            \
        q, k, v, k_cache, v_cache, k_scales, v_scales, k_mean, out, n, pos,    \
        heads, kv_heads, head_dim, rot_dim, max_seq, scale, theta);            \
  }                                                                            \
  void kiln_k_attention_kvf8_centered_##sfx(                                   \
      const T *q, const T *k, const T *v, uint8_t *k_cache, uint8_t *v_cache,  \
      float *k_scales, float *v_scales, const float *k_mean, T *out,           \
      int64_t n, int64_t pos, int64_t heads, int64_t kv_heads,                 \
      int64_t head_dim, int64_t rot_dim, int64_t max_seq, float scale,         \
      float theta) {                                                           \
    attentionQuantKv<E, Fp8Codec>(                                             \
        q, k, v, k_cache, v_cache, k_scales, v_scales, k_mean, out, n, pos,    \
        heads, kv_heads, head_dim, rot_dim, max_seq, scale, theta);            \
  }

KILN_DEFINE_CENTERED_KV_KERNELS(f16, F16, kiln_f16_t)
KILN_DEFINE_CENTERED_KV_KERNELS(bf16, Bf16, kiln_bf16_t)
#undef KILN_DEFINE_CENTERED_KV_KERNELS

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

} // extern "C"

//===- BlockA8Kernels.cpp - GGML block linears with int8 activations ------===//
//
// kernel_abi.h kiln_k_linear_blocks_a8 and kiln_linear_weight.act_quant: the
// explicit int8-activation recipe (kiln-compile --act-quant=int8, the IR's
// act_quant = "int8_per_block"). Each input row is quantized per 32
// elements, as llama.cpp's Q8_0 activations:
//
//   d_b = max_{i in b} |x_i| / 127,  q_i = clamp(round(x_i / d_b), -127, 127)
//
// (round half away from zero; q = 0 where d_b = 0), and the linear is
//
//   y[t, o] = sum_b d_b * sum_{i in b} W[o, i] * q_i
//
// with W the decoded weights (block_formats.h). Per 16- or 32-element group
// of a block, the weight codes are dotted with q exactly in int32 (vpdpbusd
// with AVX-512 VNNI / AVX-VNNI, vpmaddubsw + vpmaddwd with AVX2) and the
// group's scale is applied once in float, so the results equal that formula
// up to float summation order. Without AVX2, and for 4 tokens or more
// (kA8FloatTokens, a prefill), the same formula is computed in float: decoded
// weights times d_b * q_i (sgemm on tiles for the prefill).
//
//===----------------------------------------------------------------------===//
#include "cpu/WholeOpKernels.h"
#include "cpu/Kernels.h"
#include "cpu/ThreadPool.h"
#include "kiln_rt/block_formats.h"
#include "kiln_rt/kernel_abi.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace kiln::rt::cpu {

void quantizeA8Row(const float *x, int64_t in, int8_t *q, float *d,
                   int32_t *s4, float *s16) {
  for (int64_t b = 0; b < in / 32; ++b) {
    const float *xb = x + 32 * b;
    int8_t *qb = q + 32 * b;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i)
      amax = std::max(amax, std::fabs(xb[i]));
    const float db = amax / 127.0f;
    d[b] = db;
    for (int i = 0; i < 32; ++i) {
      float r = db == 0.0f ? 0.0f : std::round(xb[i] / db);
      qb[i] = int8_t(std::clamp(r, -127.0f, 127.0f));
    }
    for (int k = 0; k < 8; ++k)
      s4[8 * b + k] = int32_t(qb[4 * k]) + qb[4 * k + 1] + qb[4 * k + 2] +
                      qb[4 * k + 3];
    for (int h = 0; h < 2; ++h) {
      const int32_t *s = s4 + 8 * b + 4 * h;
      s16[2 * b + h] = db * float(s[0] + s[1] + s[2] + s[3]);
    }
  }
}

namespace {

/// Per-thread buffers of the quantized activations of up to `n` rows.
struct A8Buffers {
  std::vector<int8_t> q;
  std::vector<float> d, s16;
  std::vector<int32_t> s4;

  A8Row row(int64_t t, int64_t in) const {
    return {q.data() + t * in, d.data() + t * (in / 32),
            s4.data() + t * (in / 4), s16.data() + t * (in / 16)};
  }
};

/// x [n, in] quantized into buf.
void quantizeRowsInto(const float *x, int64_t n, int64_t in, A8Buffers &buf) {
  buf.q.resize(size_t(n * in));
  buf.d.resize(size_t(n * (in / 32)));
  buf.s4.resize(size_t(n * (in / 4)));
  buf.s16.resize(size_t(n * (in / 16)));
  for (int64_t t = 0; t < n; ++t) {
    A8Row r = buf.row(t, in);
    quantizeA8Row(x + t * in, in, const_cast<int8_t *>(r.q),
                  const_cast<float *>(r.d), const_cast<int32_t *>(r.s4),
                  const_cast<float *>(r.s16));
  }
}

/// x quantized into the calling thread's buffers.
A8Buffers &quantizeRows(const float *x, int64_t n, int64_t in) {
  thread_local A8Buffers buf;
  quantizeRowsInto(x, n, in, buf);
  return buf;
}

/// Which input a thread's loop-scoped buffers hold (ThreadPool.h
/// currentLoopId: within one parallel loop the input is constant).
struct LoopInputKey {
  const float *x = nullptr;
  int64_t n = 0, in = 0;
  uint64_t loop = 0;
  bool matches(const float *x2, int64_t n2, int64_t in2, uint64_t loop2) const {
    return loop2 != 0 && loop == loop2 && x == x2 && n == n2 && in == in2;
  }
};

/// quantizeRows, computed once per thread and parallel loop: the chunks of
/// a fused linear (kiln_k_linear_tile) share it instead of quantizing their
/// input again per chunk. Outside loops, quantized every call.
const A8Buffers &loopQuantizedRows(const float *x, int64_t n, int64_t in) {
  thread_local A8Buffers buf;
  thread_local LoopInputKey key;
  const uint64_t loop = currentLoopId();
  if (!key.matches(x, n, in, loop)) {
    quantizeRowsInto(x, n, in, buf);
    key = {x, n, in, loop};
  }
  return buf;
}

namespace generic {
/// Portable path: decoded weights dotted with d_b * q_i in float.
void A8Rows(int64_t format, const A8Row &a, const uint8_t *w, float *y,
            int64_t ldy, int64_t in, int64_t rows) {
  const int64_t elems = kiln_block_elems(format),
                bytes = kiln_block_bytes(format);
  const int64_t rowBytes = in / elems * bytes;
  thread_local std::vector<float> block(256);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t *row = w + r * rowBytes;
    float sum = 0.0f;
    for (int64_t k = 0; k < in / elems; ++k) {
      kiln_block_decode(format, row + k * bytes, block.data());
      for (int64_t i = 0; i < elems; ++i) {
        int64_t e = k * elems + i;
        sum += block[size_t(i)] * (a.d[e / 32] * float(a.q[e]));
      }
    }
    y[r * ldy] = sum;
  }
}
} // namespace generic

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
static inline __m256i A8Dot(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
#include "cpu/BlockA8Simd-inl.h"
} // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
namespace vnni {
static inline __m256i A8Dot(__m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}
#include "cpu/BlockA8Simd-inl.h"
} // namespace vnni
#pragma GCC pop_options

bool hasVnni() {
  static const bool vnni = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw");
  }();
  return vnni;
}

void a8Rows(int64_t format, const A8Row &a, const uint8_t *w, float *y,
            int64_t ldy, int64_t in, int64_t rows) {
  switch (simdLevel()) {
  case SimdLevel::Avx512:
    if (hasVnni())
      return vnni::A8Rows(format, a, w, y, ldy, in, rows);
    return avx2::A8Rows(format, a, w, y, ldy, in, rows);
  case SimdLevel::Avx2:
    return avx2::A8Rows(format, a, w, y, ldy, in, rows);
  case SimdLevel::Generic:
    return generic::A8Rows(format, a, w, y, ldy, in, rows);
  }
}

/// Weight rows per tile of the many-token path: 16 rows of a 4,096-wide
/// 4-bit matrix are 36 KiB, reused from cache by every token.
constexpr int64_t kA8TileRows = 16;

} // namespace

void dequantizedA8Input(const float *x, int64_t n, int64_t in, float *xhat) {
  const A8Buffers &act = loopQuantizedRows(x, n, in);
  for (int64_t t = 0; t < n; ++t) {
    A8Row r = act.row(t, in);
    for (int64_t i = 0; i < in; ++i)
      xhat[t * in + i] = r.d[i / 32] * float(r.q[i]);
  }
}

namespace {
/// linearBlocksA8 on activations already quantized into `act`.
void linearBlocksQuantized(int64_t format, const A8Buffers &act, int64_t n,
                           int64_t in, const uint8_t *w, int64_t rows,
                           float *c, int64_t ldc) {
  const int64_t rowBytes =
      in / kiln_block_elems(format) * kiln_block_bytes(format);
  for (int64_t r0 = 0; r0 < rows; r0 += kA8TileRows) {
    const int64_t tile = std::min(kA8TileRows, rows - r0);
    for (int64_t t = 0; t < n; ++t)
      a8Rows(format, act.row(t, in), w + r0 * rowBytes, c + t * ldc + r0, 1,
             in, tile);
  }
}
} // namespace

void linearBlocksA8(int64_t format, const float *x, int64_t n, int64_t in,
                    const uint8_t *w, int64_t rows, float *c, int64_t ldc) {
  if (n <= 0 || rows <= 0)
    return;
  linearBlocksQuantized(format, loopQuantizedRows(x, n, in), n, in, w, rows,
                        c, ldc);
}

const float *loopDequantizedA8Input(const float *x, int64_t n, int64_t in) {
  thread_local std::vector<float> xhat;
  thread_local LoopInputKey key;
  const uint64_t loop = currentLoopId();
  if (!key.matches(x, n, in, loop)) {
    xhat.resize(size_t(n * in));
    dequantizedA8Input(x, n, in, xhat.data());
    key = {x, n, in, loop};
  }
  return xhat.data();
}

} // namespace kiln::rt::cpu

using namespace kiln::rt::cpu;

extern "C" void kiln_k_linear_blocks_a8(const float *x, const int8_t *w,
                                        float *y, int64_t n, int64_t in,
                                        int64_t out, int64_t format) {
  if (n <= 0 || out <= 0)
    return;
  if (in <= 0 || kiln_block_elems(format) == 0) {
    std::memset(y, 0, sizeof(float) * size_t(n * out));
    return;
  }
  if (n >= kiln::rt::cpu::kA8FloatTokens) {
    // Prefill: the same formula with d_b * q_i as float32 against decoded
    // weight tiles (sgemm), the float block kernel's path.
    std::vector<float> xhat(size_t(n * in));
    dequantizedA8Input(x, n, in, xhat.data());
    kiln_k_linear_blocks(xhat.data(), w, y, n, in, out, format);
    return;
  }
  const auto *wb = reinterpret_cast<const uint8_t *>(w);
  const int64_t rowBytes =
      in / kiln_block_elems(format) * kiln_block_bytes(format);
  // The input quantized once (the calling thread's buffers, read by all),
  // then chunks of 16-row multiples over the pool's threads.
  const A8Buffers &act = quantizeRows(x, n, in);
  const bool parallel = n * in * out > (int64_t(1) << 17);
  parallelFor(out, chunkGrain(out, 16), parallel,
              [&](int64_t begin, int64_t end) {
                linearBlocksQuantized(format, act, n, in,
                                      wb + begin * rowBytes, end - begin,
                                      y + begin, out);
              });
}

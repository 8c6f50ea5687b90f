//===- Kernels.h - CPU kernels of the Kiln kernel ABI -------------*- C++ -*-===//
//
// The kernel ABI itself is declared in kiln_rt/kernel_abi.h (exported C
// symbols); this header adds the internal helpers shared with the tests.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_CPU_KERNELS_H
#define KILN_RUNTIME_CPU_KERNELS_H

#include "kiln_rt/kernel_abi.h"

#include <cstdint>
#include <cstring>

namespace kiln::rt::cpu {

/// y[r] = dot(w[r, :in], x[:in]) for rows [rowBegin, rowEnd); w row-major
/// [rows, in] float32. Single-threaded; SIMD-dispatched at load time.
void gemvRows(const float *x, const float *w, float *y, int64_t in,
              int64_t rowBegin, int64_t rowEnd);

/// Restricts OpenBLAS to one thread (kernels thread with OpenMP instead).
void setBlasSingleThreaded();

//===----------------------------------------------------------------------===//
// 16-bit element types (f16, bf16)
//===----------------------------------------------------------------------===//

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

/// Exact f16 -> float. A signalling NaN comes back quiet (as F16C does).
inline float f16ToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) // inf, NaN (quieted)
    return bitsFloat(sign | 0x7f800000u | (mant << 13) |
                     (mant ? 0x400000u : 0));
  if (exp != 0) // normal: rebias 15 -> 127
    return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  float mag = float(mant) * 0x1p-24f; // zero or subnormal, exact
  return sign ? -mag : mag;
}

/// float -> f16, round to nearest even; overflow gives inf; NaN stays NaN
/// (quiet, upper payload bits kept, as F16C's vcvtps2ph does).
inline uint16_t floatToF16(float f) {
  uint32_t x = floatBits(f);
  uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) // NaN
    return uint16_t(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x47800000u) // >= 65536 or inf
    return uint16_t(sign | 0x7c00u);
  if (ax >= 0x38800000u) { // f16 normal range (>= 2^-14), may round to inf
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
    return uint16_t(sign | ((r - 0x38000000u) >> 13));
  }
  // Zero or subnormal: adding 0.5 (ulp 2^-24, the f16 subnormal step) rounds
  // to nearest even in the FPU; 1024 steps correctly yield the smallest normal.
  float sum = bitsFloat(ax) + 0.5f;
  return uint16_t(sign | (floatBits(sum) - 0x3f000000u));
}

/// Exact bf16 -> float.
inline float bf16ToFloat(uint16_t h) { return bitsFloat(uint32_t(h) << 16); }

/// float -> bf16, round to nearest even; overflow gives inf; NaN stays NaN
/// (quiet bit set, so a NaN with only low payload bits cannot become inf).
inline uint16_t floatToBf16(float f) {
  uint32_t x = floatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((x >> 16) | 0x40u);
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/// Instruction sets of the 16-bit paths, chosen once from CPUID.
enum class SimdLevel { Generic, Avx2, Avx512 };
/// The level in use (highest supported unless lowered for a test).
SimdLevel simdLevel();
/// Tests only: use `level` (must be supported) or lower; returns the previous.
SimdLevel setSimdLevelForTesting(SimdLevel level);
/// Highest level this CPU supports (Avx2 means AVX2 + FMA + F16C).
SimdLevel maxSimdLevel();

/// Row conversions, bit-identical to the scalar functions above at every
/// SIMD level.
void widenF16(const uint16_t *src, float *dst, int64_t count);
void widenBf16(const uint16_t *src, float *dst, int64_t count);
void narrowF16(const float *src, uint16_t *dst, int64_t count);
void narrowBf16(const float *src, uint16_t *dst, int64_t count);

/// y[r] = dot(w[r, :in], x[:in]) for r in [0, rows); w row-major f16 / bf16
/// read directly (converted in registers), x and y float32. Single-threaded.
void gemvRowsF16(const float *x, const uint16_t *w, float *y, int64_t in,
                 int64_t rows);
void gemvRowsBf16(const float *x, const uint16_t *w, float *y, int64_t in,
                  int64_t rows);

//===----------------------------------------------------------------------===//
// int8 weights (W8A16)
//===----------------------------------------------------------------------===//

/// dst[i] = float(src[i]) (exact) for i < count. SIMD-dispatched.
void widenI8(const int8_t *src, float *dst, int64_t count);

/// y[r] = scales[r] * dot(float(q[r, :in]), x[:in]) for r in [0, rows); q
/// row-major int8 read directly (widened in registers), x, scales, y float32.
/// Single-threaded; SIMD-dispatched.
void gemvRowsI8(const float *x, const int8_t *q, const float *scales, float *y,
                int64_t in, int64_t rows);

//===----------------------------------------------------------------------===//
// packed 4-bit weights (W4A16)
//===----------------------------------------------------------------------===//
//
// One row of a W4A16 weight (kernel_abi.h): q packed two unsigned nibbles a
// byte (element 2j low, 2j + 1 high), ceil(in / 2) bytes; scales float and
// zeros bytes (0..15), one per group of groupSize (> 0, even) elements.

/// Bytes of one packed row of `in` 4-bit elements.
inline int64_t q4RowBytes(int64_t in) { return (in + 1) / 2; }
/// Groups of one row: ceil(in / groupSize).
inline int64_t q4Groups(int64_t in, int64_t groupSize) {
  return (in + groupSize - 1) / groupSize;
}
/// Element i of a packed row, 0..15.
inline int q4At(const int8_t *row, int64_t i) {
  uint8_t b = uint8_t(row[i >> 1]);
  return (i & 1) ? b >> 4 : b & 0x0f;
}

/// dst[k] = scales[g] * float(q[begin + k] - zeros[g]), g = (begin + k) /
/// groupSize, for k < count: elements [begin, begin + count) of one row
/// dequantized (the product rounded once). SIMD-dispatched.
void dequantRowQ4(const int8_t *q, const float *scales, const int8_t *zeros,
                  float *dst, int64_t begin, int64_t count, int64_t groupSize);

/// y[r] = sum_g scales[r, g] * sum_{i in g} x[i] * float(q[r, i] -
/// zeros[r, g]) for r in [0, rows): q rows of q4RowBytes(in) bytes, scales and
/// zeros rows of q4Groups(in, groupSize) entries, read directly (nibbles
/// unpacked in registers). Single-threaded; SIMD-dispatched.
void gemvRowsQ4(const float *x, const int8_t *q, const float *scales,
                const int8_t *zeros, float *y, int64_t in, int64_t rows,
                int64_t groupSize);

} // namespace kiln::rt::cpu

#endif // KILN_RUNTIME_CPU_KERNELS_H

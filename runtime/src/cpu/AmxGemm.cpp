//===- AmxGemm.cpp - float32 prefill GEMM on Intel AMX tiles -------------===//
//
// The prefill GEMM of the weight-quantized and 16-bit linears (Linear.cpp
// prefillDequantized / linear16, FusedKernels.cpp kiln_k_linear_tile) on
// the AMX tile unit of Intel Xeon (Sapphire Rapids and later): one
// TDPBF16PS multiplies a 16 x 32 bf16 tile by a 32 x 16 one into 16 x 16
// float32 sums, 16 x more multiply-adds per instruction than an AVX-512
// FMA.
//
// Float activations stay float. x and the dequantized weight tile are both
// split into three bf16 pieces, v = v0 + v1 + v2 (each the round-to-nearest
// bf16 of what the previous pieces left; 3 x 8 significand bits hold a
// float32's 24, so the split is exact for normal numbers), and
//   x . w = sum_{i + j <= 2} x_i . w_j
// is summed in float32 by the tile unit, each product x_i * w_j of two bf16
// being exact in float32 (Intel SDM, TDPBF16PS). The three terms left out
// (x1 w2, x2 w1, x2 w2) are below 2^-24 of |x w|: the result is the float32
// GEMM's up to float32 rounding and summation order, the same contract as
// OpenBLAS's sgemm that this replaces. Weights whose dequantized values fit
// 16 significand bits (Q4_0, Q5_0, Q8_0, W8A16 per channel, f16 / bf16 up
// to their exponent range) have no third piece, and its two products are
// skipped. The tile unit treats bf16 subnormals as zero: values below about
// 1e-38 (and the pieces of values below 2^16 times that) are flushed, far
// under float32 rounding of any activation a model produces.
//
// Tiles: C is 16 tokens x 16 output rows (float32); A (x piece) 16 tokens x
// 32 bf16; B (weight piece) 32 x 16 bf16 in the VNNI layout TDPBF16PS reads
// (row k / 2 holds, for each output row n, the pair k, k + 1). x is split
// once per thread and parallel loop (the chunks of one linear's output rows
// share it); per call the weight tile is split and packed once and then
// swept by every token; up to four C tiles (64 output rows) share each
// loaded A tile.
//
// Enabled when CPUID reports AMX-TILE, AMX-BF16 and AVX512-BF16, the OS
// enables the tile state (XCR0 bits 17 and 18), Linux grants this process
// the tile data (arch_prctl ARCH_REQ_XCOMP_PERM), and KILN_AMX does not turn
// it off ("0", "off", "no", "false").
//
//===----------------------------------------------------------------------===//
#include "cpu/Blas.h"
#include "cpu/Kernels.h"
#include "cpu/ThreadPool.h"

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define KILN_HAVE_AMX_CODE 1
#endif

namespace kiln::rt::cpu {

#if KILN_HAVE_AMX_CODE

namespace {

#define KILN_AMX_TARGET                                                        \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,"     \
                        "amx-bf16")))

/// Linux's arch_prctl request for permission to use an extended state
/// component, and the AMX tile data's component number (asm/prctl.h,
/// Documentation/arch/x86/xstate.rst).
constexpr long kArchReqXcompPerm = 0x1023;
constexpr long kXfeatureXtiledata = 18;

/// KILN_AMX: unset, empty, "1", "on", "yes" or "true" leave AMX on; "0",
/// "off", "no" or "false" turn it off (any case); another value leaves it
/// on with a warning on stderr.
bool amxWanted() {
  const char *env = std::getenv("KILN_AMX");
  if (!env || !*env)
    return true;
  std::string v(env);
  for (char &ch : v)
    ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (v == "0" || v == "off" || v == "no" || v == "false")
    return false;
  if (v != "1" && v != "on" && v != "yes" && v != "true")
    std::fprintf(stderr,
                 "kiln: warning: KILN_AMX='%s' is not 0/off/no/false or "
                 "1/on/yes/true; AMX stays on\n",
                 env);
  return true;
}

bool probeAmx() {
  if (!amxWanted())
    return false;
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
    return false;
  const bool avx512 = (b >> 16 & 1) && (b >> 30 & 1) && (b >> 31 & 1);
  const bool amx = (d >> 22 & 1) && (d >> 24 & 1); // AMX-BF16, AMX-TILE
  if (!avx512 || !amx)
    return false;
  unsigned a1, b1, c1, d1;
  if (!__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) || !(a1 >> 5 & 1))
    return false; // AVX512-BF16
  unsigned ecx1 = 0, d0 = 0;
  if (!__get_cpuid(1, &a, &b, &ecx1, &d0) || !(ecx1 >> 27 & 1)) // OSXSAVE
    return false;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  constexpr unsigned kAvx512State = 0xe6, kTileState = 3u << 17;
  if ((lo & kAvx512State) != kAvx512State || (lo & kTileState) != kTileState)
    return false;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

/// The 64-byte tile configuration LDTILECFG reads (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1, startRow = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

/// Tile registers: 0-3 C (16 x 16 float32), 4-6 A pieces (16 x 32 bf16),
/// 7 B (32 x 16 bf16, 16 rows of 64 bytes).
constexpr int kC = 4;

/// Per-thread buffers, 64-byte aligned, grown on demand, freed when the
/// thread ends.
struct Buffers {
  uint16_t *pieces = nullptr; // the split rows of one 16-row weight tile
  size_t piecesCap = 0;
  uint16_t *packed = nullptr; // VNNI-packed weight tiles
  size_t packedCap = 0;
  uint16_t *input = nullptr; // x's planes (AmxInput)
  size_t inputCap = 0;
  Buffers() = default;
  Buffers(const Buffers &) = delete;
  Buffers &operator=(const Buffers &) = delete;
  ~Buffers() {
    std::free(pieces);
    std::free(packed);
    std::free(input);
  }
};

/// x[n, in] split into three bf16 planes, x = p0 + p1 + p2, laid out as
/// the A tiles read them: plane p at planes + p * nPad * ldp holds, for
/// each 16-token tile m and 32-column step s, the 16 x 32 tile at (m *
/// ldp / 32 + s) * 512 (1 KiB, rows of 64 bytes: contiguous for the
/// hardware prefetchers). nPad = n rounded up to 16 rows and ldp = in
/// rounded up to 32 columns, the padding zero.
struct AmxInput {
  const float *x = nullptr;
  int64_t n = 0, in = 0, nPad = 0, ldp = 0;
  uint64_t loop = 0; // ThreadPool.h currentLoopId() when split
  uint16_t *planes = nullptr;
  const uint16_t *plane(int p) const { return planes + p * nPad * ldp; }
};

uint16_t *grow(uint16_t *&p, size_t &cap, size_t count) {
  if (cap < count) {
    std::free(p);
    p = static_cast<uint16_t *>(std::aligned_alloc(64, (count * 2 + 63) / 64 * 64));
    cap = p ? count : 0;
  }
  return p;
}

Buffers &threadBuffers() {
  thread_local Buffers b;
  return b;
}

/// Full masks: GCC 12's unmasked unpack / shuffle intrinsics warn of an
/// uninitialized pass-through operand.
constexpr __mmask16 kAll16 = 0xffff;
constexpr __mmask8 kAll8 = 0xff;

/// 16 bf16 (as 16-bit lanes) widened to float32 (exact: the bf16 bits are
/// the float's top half). Written out because GCC 12's _mm512_cvtpbh_ps and
/// _mm512_cvtepu16_epi32 warn of an uninitialized pass-through operand.
KILN_AMX_TARGET inline __m512i widen16(__m256i h) {
  return _mm512_maskz_cvtepu16_epi32(kAll16, h);
}
KILN_AMX_TARGET inline __m512 bf16ToFloat(__m256i h) {
  return _mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(kAll16, widen16(h), 16));
}

/// Splits n floats at x into bf16 pieces p0, p1, p2 (x = p0 + p1 + p2) and
/// zero-fills each piece up to padded (a multiple of 32). Element k of a
/// piece is written at (k / 32) * blockStride + k % 32 (blockStride 32: a
/// plain row). Returns whether a third piece is non-zero.
KILN_AMX_TARGET bool splitRow(const float *x, int64_t n, int64_t padded,
                              uint16_t *p0, uint16_t *p1, uint16_t *p2,
                              int64_t blockStride = 32) {
  __m512i any = _mm512_setzero_si512();
  for (int64_t k = 0; k < padded; k += 16) {
    const int64_t at = k / 32 * blockStride + k % 32;
    const int64_t left = n - k;
    const __mmask16 m =
        left >= 16 ? kAll16 : left <= 0 ? __mmask16(0)
                                                   : __mmask16((1u << left) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + k);
    __m256i i0, i1, i2;
    const __m256bh h0 = _mm512_cvtneps_pbh(v);
    std::memcpy(&i0, &h0, 32);
    const __m512 r0 = _mm512_sub_ps(v, bf16ToFloat(i0));
    const __m256bh h1 = _mm512_cvtneps_pbh(r0);
    std::memcpy(&i1, &h1, 32);
    const __m512 r1 = _mm512_sub_ps(r0, bf16ToFloat(i1));
    const __m256bh h2 = _mm512_cvtneps_pbh(r1);
    std::memcpy(&i2, &h2, 32);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(p0 + at), i0);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(p1 + at), i1);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(p2 + at), i2);
    // -0.0 pieces count as zero.
    any = _mm512_or_si512(
        any, _mm512_and_si512(widen16(i2), _mm512_set1_epi32(0x7fff)));
  }
  return _mm512_test_epi32_mask(any, any) != 0;
}

/// Transposes the 16 x 16 dwords r[0..15] in place (r[i] lane j becomes
/// r[j] lane i): 32-bit, 64-bit, then two 128-bit-lane interleaves.
KILN_AMX_TARGET inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int a = 0; a < 8; ++a) {
    t[2 * a] = _mm512_maskz_unpacklo_epi32(kAll16, r[2 * a], r[2 * a + 1]);
    t[2 * a + 1] = _mm512_maskz_unpackhi_epi32(kAll16, r[2 * a], r[2 * a + 1]);
  }
  // u[4b + c], 128-bit lane L: column 4L + c of rows 4b .. 4b + 3.
  for (int b = 0; b < 4; ++b) {
    u[4 * b + 0] = _mm512_maskz_unpacklo_epi64(kAll8, t[4 * b], t[4 * b + 2]);
    u[4 * b + 1] = _mm512_maskz_unpackhi_epi64(kAll8, t[4 * b], t[4 * b + 2]);
    u[4 * b + 2] = _mm512_maskz_unpacklo_epi64(kAll8, t[4 * b + 1], t[4 * b + 3]);
    u[4 * b + 3] = _mm512_maskz_unpackhi_epi64(kAll8, t[4 * b + 1], t[4 * b + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i x1 = _mm512_maskz_shuffle_i32x4(kAll16, u[c], u[4 + c], 0x44);
    const __m512i x2 = _mm512_maskz_shuffle_i32x4(kAll16, u[c], u[4 + c], 0xee);
    const __m512i y1 = _mm512_maskz_shuffle_i32x4(kAll16, u[8 + c], u[12 + c], 0x44);
    const __m512i y2 = _mm512_maskz_shuffle_i32x4(kAll16, u[8 + c], u[12 + c], 0xee);
    r[c] = _mm512_maskz_shuffle_i32x4(kAll16, x1, y1, 0x88);
    r[4 + c] = _mm512_maskz_shuffle_i32x4(kAll16, x1, y1, 0xdd);
    r[8 + c] = _mm512_maskz_shuffle_i32x4(kAll16, x2, y2, 0x88);
    r[12 + c] = _mm512_maskz_shuffle_i32x4(kAll16, x2, y2, 0xdd);
  }
}

/// Packs 16 rows (rows[r], r < 16, each at least 32 * ksteps bf16) into
/// ksteps B tiles of 16 x 16 dwords: tile s, row q, column r holds the bf16
/// pair 2q, 2q + 1 of row r at column block s (a 16 x 16 dword transpose
/// per tile).
KILN_AMX_TARGET void packTiles(const uint16_t *const *rows, int64_t ksteps,
                               uint16_t *out) {
  for (int64_t s = 0; s < ksteps; ++s) {
    __m512i v[16];
    for (int r = 0; r < 16; ++r)
      v[r] = _mm512_loadu_si512(rows[r] + 32 * s);
    transpose16(v);
    for (int q = 0; q < 16; ++q)
      _mm512_storeu_si512(out + s * 512 + q * 32, v[q]);
  }
}

/// Splits the rows of x into a's planes (a's x, n, in and padding set).
KILN_AMX_TARGET void splitInput(AmxInput &a) {
  const float zero[1] = {0.0f};
  for (int64_t t = 0; t < a.nPad; ++t) {
    uint16_t *p0 = a.planes + (t / 16 * a.ldp) * 16 + t % 16 * 32,
             *p1 = p0 + a.nPad * a.ldp, *p2 = p1 + a.nPad * a.ldp;
    // Rows past n: zeros (the split of nothing).
    splitRow(t < a.n ? a.x + t * a.in : zero, t < a.n ? a.in : 0, a.ldp, p0,
             p1, p2, 512);
  }
}

/// x[n, in] split for the tiles: once per thread and parallel loop (the
/// chunks of one linear share it; ThreadPool.h currentLoopId), every call
/// outside loops.
const AmxInput &loopInput(const float *x, int64_t n, int64_t in) {
  thread_local AmxInput a;
  const uint64_t loop = currentLoopId();
  if (loop != 0 && a.loop == loop && a.x == x && a.n == n && a.in == in)
    return a;
  Buffers &buf = threadBuffers();
  a.x = x;
  a.n = n;
  a.in = in;
  a.nPad = (n + 15) / 16 * 16;
  a.ldp = (in + 31) / 32 * 32;
  a.loop = loop;
  a.planes = grow(buf.input, buf.inputCap, size_t(3 * a.nPad * a.ldp));
  if (!a.planes)
    std::abort(); // out of memory: as the rest of the runtime's allocations
  splitInput(a);
  return a;
}

/// C[t, r] (+)= sum_k x[t, k0 + k] w[r, k] for t < a.n, r < rows, k <
/// depth; see amxGemmF32.
KILN_AMX_TARGET void gemmTiles(const AmxInput &a, int64_t k0, const float *w,
                               int64_t ldw, int64_t rows, int64_t depth,
                               float *c, int64_t ldc, bool accumulate) {
  Buffers &buf = threadBuffers();
  const int64_t n = a.n;
  const int64_t padded = (depth + 31) / 32 * 32, ksteps = padded / 32;
  const int64_t ntiles = (rows + 15) / 16;
  // Split the weight rows (zero rows past `rows`), then pack them.
  uint16_t *pieces = grow(buf.pieces, buf.piecesCap, size_t(3 * 16 * padded));
  uint16_t *packed =
      grow(buf.packed, buf.packedCap, size_t(3 * ntiles * ksteps * 512));
  if (!pieces || !packed)
    std::abort(); // out of memory: as the rest of the runtime's allocations
  bool third = false;
  for (int64_t nt = 0; nt < ntiles; ++nt) {
    const uint16_t *rowPtr[3][16];
    for (int r = 0; r < 16; ++r) {
      uint16_t *p0 = pieces + (0 * 16 + r) * padded,
               *p1 = pieces + (1 * 16 + r) * padded,
               *p2 = pieces + (2 * 16 + r) * padded;
      const int64_t row = nt * 16 + r;
      if (row < rows) {
        third |= splitRow(w + row * ldw, depth, padded, p0, p1, p2);
      } else {
        std::memset(p0, 0, size_t(padded) * 2);
        std::memset(p1, 0, size_t(padded) * 2);
        std::memset(p2, 0, size_t(padded) * 2);
      }
      rowPtr[0][r] = p0;
      rowPtr[1][r] = p1;
      rowPtr[2][r] = p2;
    }
    for (int p = 0; p < 3; ++p)
      packTiles(rowPtr[p], ksteps, packed + ((p * ntiles + nt) * ksteps) * 512);
  }

  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  alignas(64) float cbuf[kC][16 * 16];
  const int64_t xStride = 64;
  for (int64_t t0 = 0; t0 < n; t0 += 16) {
    const int64_t tn = n - t0 < 16 ? n - t0 : 16;
    const int64_t at = t0 * a.ldp + k0 * 16; // tile (t0 / 16, k0 / 32)
    const uint16_t *x0 = a.plane(0) + at, *x1 = a.plane(1) + at,
                   *x2 = a.plane(2) + at;
    for (int64_t nt0 = 0; nt0 < ntiles; nt0 += kC) {
      const int64_t group = ntiles - nt0 < kC ? ntiles - nt0 : kC;
      // C tiles: whole ones straight from and to c, partial ones (the last
      // tokens or rows) through cbuf.
      float *ct[kC];
      int64_t cstride[kC];
      for (int64_t g = 0; g < group; ++g) {
        const int64_t r0 = (nt0 + g) * 16, rn = rows - r0 < 16 ? rows - r0 : 16;
        if (tn == 16 && rn == 16) {
          ct[g] = c + t0 * ldc + r0;
          cstride[g] = ldc * 4;
          continue;
        }
        ct[g] = cbuf[g];
        cstride[g] = 64;
        float *cb = cbuf[g];
        for (int64_t t = 0; t < 16; ++t)
          for (int64_t r = 0; r < 16; ++r)
            cb[t * 16 + r] = accumulate && t < tn && r < rn
                                 ? c[(t0 + t) * ldc + r0 + r]
                                 : 0.0f;
      }
      // Tile register numbers are immediates: one copy of the loop per
      // group size.
#define KILN_AMX_LOAD_C(g)                                                     \
  if (group > g) {                                                             \
    if (accumulate || ct[g] == cbuf[g])                                        \
      _tile_loadd(g, ct[g], cstride[g]);                                       \
    else                                                                       \
      _tile_zero(g);                                                           \
  }
#define KILN_AMX_STORE_C(g)                                                    \
  if (group > g)                                                               \
    _tile_stored(g, ct[g], cstride[g]);
#define KILN_AMX_B(g, p)                                                       \
  (packed + (((p) * ntiles + nt0 + (g)) * ksteps + s) * 512)
#define KILN_AMX_DOT(g)                                                        \
  if (group > g) {                                                             \
    _tile_loadd(7, KILN_AMX_B(g, 0), 64);                                      \
    _tile_dpbf16ps(g, 4, 7);                                                   \
    _tile_dpbf16ps(g, 5, 7);                                                   \
    _tile_dpbf16ps(g, 6, 7);                                                   \
    _tile_loadd(7, KILN_AMX_B(g, 1), 64);                                      \
    _tile_dpbf16ps(g, 4, 7);                                                   \
    _tile_dpbf16ps(g, 5, 7);                                                   \
    if (third) {                                                               \
      _tile_loadd(7, KILN_AMX_B(g, 2), 64);                                    \
      _tile_dpbf16ps(g, 4, 7);                                                 \
    }                                                                          \
  }
      KILN_AMX_LOAD_C(0)
      KILN_AMX_LOAD_C(1)
      KILN_AMX_LOAD_C(2)
      KILN_AMX_LOAD_C(3)
      for (int64_t s = 0; s < ksteps; ++s) {
        _tile_loadd(4, x0 + 512 * s, xStride);
        _tile_loadd(5, x1 + 512 * s, xStride);
        _tile_loadd(6, x2 + 512 * s, xStride);
        KILN_AMX_DOT(0)
        KILN_AMX_DOT(1)
        KILN_AMX_DOT(2)
        KILN_AMX_DOT(3)
      }
      KILN_AMX_STORE_C(0)
      KILN_AMX_STORE_C(1)
      KILN_AMX_STORE_C(2)
      KILN_AMX_STORE_C(3)
#undef KILN_AMX_LOAD_C
#undef KILN_AMX_STORE_C
#undef KILN_AMX_B
#undef KILN_AMX_DOT
      for (int64_t g = 0; g < group; ++g) {
        if (ct[g] != cbuf[g])
          continue;
        const int64_t r0 = (nt0 + g) * 16, rn = rows - r0 < 16 ? rows - r0 : 16;
        for (int64_t t = 0; t < tn; ++t)
          std::memcpy(c + (t0 + t) * ldc + r0, cbuf[g] + t * 16,
                      size_t(rn) * sizeof(float));
      }
    }
  }
  _tile_release();
}

} // namespace

bool amxAvailable() {
  static const bool ok = probeAmx();
  return ok;
}

void amxGemmF32(const float *x, int64_t n, int64_t in, int64_t k0,
                const float *w, int64_t ldw, int64_t rows, int64_t depth,
                float *c, int64_t ldc, bool accumulate) {
  if (n <= 0 || rows <= 0 || depth <= 0)
    return;
  gemmTiles(loopInput(x, n, in), k0, w, ldw, rows, depth, c, ldc, accumulate);
}

#else // no AMX code for this target

bool amxAvailable() { return false; }

void amxGemmF32(const float *, int64_t, int64_t, int64_t, const float *,
                int64_t, int64_t, int64_t, float *, int64_t, bool) {
  std::abort(); // callers check amxAvailable() first
}

#endif

void gemmWeightTile(const float *x, int64_t n, int64_t in, int64_t k0,
                    const float *w, int64_t rows, int64_t depth, float *c,
                    int64_t ldc, bool accumulate) {
  if (n >= kAmxMinTokens && amxAvailable()) {
    amxGemmF32(x, n, in, k0, w, depth, rows, depth, c, ldc, accumulate);
    return;
  }
  sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(rows), int(depth),
        1.0f, x + k0, int(in), w, int(depth), accumulate ? 1.0f : 0.0f, c,
        int(ldc));
}

void gemmDenseF32(const float *x, int64_t n, int64_t in, const float *w,
                  int64_t rows, float *c, int64_t ldc) {
  if (n >= kAmxMinTokens && amxAvailable()) {
    for (int64_t k0 = 0; k0 < in; k0 += kAmxDepth)
      amxGemmF32(x, n, in, k0, w + k0, in, rows,
                 in - k0 < kAmxDepth ? in - k0 : kAmxDepth, c, ldc, k0 != 0);
    return;
  }
  sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(rows), int(in),
        1.0f, x, int(in), w, int(in), 0.0f, c, int(ldc));
}

} // namespace kiln::rt::cpu

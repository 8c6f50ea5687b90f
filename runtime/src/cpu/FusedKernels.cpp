//===- FusedKernels.cpp - primitives of generated fused kernels -----------===//
//
// kernel_abi.h, "Fused kernels": what the C++ that codegen emits for a
// kiln.fused region calls. The generated function owns the loop structure
// (tiles of output rows, the epilogue applied while a tile is in cache);
// the runtime owns the threads and the inner products of every weight
// format, the same row kernels the unfused linears use.
//
//===----------------------------------------------------------------------===//
#include "cpu/Kernels.h"
#include "cpu/ThreadPool.h"
#include "kiln_rt/block_formats.h"
#include "kiln_rt/kernel_abi.h"

#include "cpu/Blas.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace kiln::rt::cpu {
namespace {

/// Work (multiply-adds) below which kiln_k_parallel_for stays on the calling
/// thread; the unfused kernels' grain.
constexpr int64_t kParallelGrain = 1 << 17;

/// Reduction depth of one dequantized weight tile of a prefill tile (a
/// multiple of 256, so every block format's tile starts on a block).
constexpr int64_t kTileDepth = 512;

/// Per-thread scratch: slots 0-3 for generated code (kiln_k_scratch), 4-5
/// for kiln_k_linear_tile.
float *threadScratch(int slot, int64_t count) {
  thread_local std::vector<float> buffers[6];
  std::vector<float> &b = buffers[slot];
  if (b.size() < size_t(count))
    b.resize(size_t(count));
  return b.data();
}

/// Bytes of one weight row of `w` for `in` inputs (W8 and F32 count
/// elements, which the callers scale).
int64_t rowBytes(const kiln_linear_weight &w, int64_t in) {
  switch (w.kind) {
  case KILN_WEIGHT_BLOCKS:
    return in / kiln_block_elems(w.format) * kiln_block_bytes(w.format);
  case KILN_WEIGHT_W4:
    return q4RowBytes(in);
  case KILN_WEIGHT_W8:
    return in;
  case KILN_WEIGHT_F16:
  case KILN_WEIGHT_BF16:
    return in * 2;
  default:
    return in * int64_t(sizeof(float));
  }
}

/// Group size of a W4 weight (a non-positive one, never emitted, is one
/// group per row, as kiln_k_linear_w4a16 treats it).
int64_t q4GroupSize(const kiln_linear_weight &w, int64_t in) {
  return w.group_size > 0 ? w.group_size : in + (in & 1);
}

/// Scale groups per row of a W8/W4 weight (1 for W8 per channel).
int64_t groupsOf(const kiln_linear_weight &w, int64_t in) {
  if (w.kind == KILN_WEIGHT_W4)
    return q4Groups(in, q4GroupSize(w, in));
  return w.group_size > 0 ? (in + w.group_size - 1) / w.group_size : 1;
}

/// Decode: one token, rows [o0, o1) into c[0, o1 - o0).
void gemvTile(const kiln_linear_weight &w, const float *x, int64_t in,
              int64_t o0, int64_t o1, float *c) {
  const int64_t rows = o1 - o0;
  const auto *base = static_cast<const uint8_t *>(w.data);
  switch (w.kind) {
  case KILN_WEIGHT_F32:
    gemvRows(x, static_cast<const float *>(w.data) + o0 * in, c, in, 0, rows);
    return;
  case KILN_WEIGHT_F16:
    gemvRowsF16(x, static_cast<const uint16_t *>(w.data) + o0 * in, c, in,
                rows);
    return;
  case KILN_WEIGHT_BF16:
    gemvRowsBf16(x, static_cast<const uint16_t *>(w.data) + o0 * in, c, in,
                 rows);
    return;
  case KILN_WEIGHT_BLOCKS: {
    if (w.act_quant == KILN_ACT_INT8_PER_BLOCK) {
      linearBlocksA8(w.format, x, 1, in, base + o0 * rowBytes(w, in), rows, c,
                     rows);
      return;
    }
    float *xsum16 = threadScratch(4, in / 16);
    blockXSums16(x, in, xsum16);
    gemvRowsBlocksSimd(w.format, x, xsum16, base + o0 * rowBytes(w, in), c,
                       in, rows);
    return;
  }
  case KILN_WEIGHT_W8:
    gemvRowsI8(x, reinterpret_cast<const int8_t *>(base) + o0 * in,
               w.scales + o0 * groupsOf(w, in), c, in, rows, w.group_size);
    return;
  case KILN_WEIGHT_W4: {
    int64_t g = groupsOf(w, in);
    gemvRowsQ4(x, reinterpret_cast<const int8_t *>(base) + o0 * rowBytes(w, in),
               w.scales + o0 * g, w.zeros + o0 * g, c, in, rows,
               q4GroupSize(w, in));
    return;
  }
  default:
    return; // never emitted: codegen writes one of the kinds above
  }
}

/// Row o, columns [k0, k0 + depth), of `w` as float into dst.
void dequantRow(const kiln_linear_weight &w, int64_t in, int64_t o, int64_t k0,
                int64_t depth, float *dst) {
  const auto *base = static_cast<const uint8_t *>(w.data);
  switch (w.kind) {
  case KILN_WEIGHT_BLOCKS: {
    int64_t elems = kiln_block_elems(w.format), bytes = kiln_block_bytes(w.format);
    kiln_block_decode_row(w.format, base + o * rowBytes(w, in) + k0 / elems * bytes,
                          depth, dst);
    return;
  }
  case KILN_WEIGHT_W8: {
    const int8_t *q = reinterpret_cast<const int8_t *>(base) + o * in;
    if (w.group_size > 0)
      dequantRowI8(q, w.scales + o * groupsOf(w, in), dst, k0, depth,
                   w.group_size);
    else // per channel: the row scale is applied to the finished sums
      widenI8(q + k0, dst, depth);
    return;
  }
  case KILN_WEIGHT_F16:
    widenF16(static_cast<const uint16_t *>(w.data) + o * in + k0, dst, depth);
    return;
  case KILN_WEIGHT_BF16:
    widenBf16(static_cast<const uint16_t *>(w.data) + o * in + k0, dst, depth);
    return;
  case KILN_WEIGHT_W4: {
    int64_t g = groupsOf(w, in);
    dequantRowQ4(reinterpret_cast<const int8_t *>(base) + o * rowBytes(w, in),
                 w.scales + o * g, w.zeros + o * g, dst, k0, depth,
                 q4GroupSize(w, in));
    return;
  }
  default:
    return;
  }
}

/// Prefill: rows [o0, o1) for n tokens, c[t * ldc + r]. Float weights go
/// straight to gemmDenseF32; the others are dequantized kTileDepth columns at a
/// time into a float tile and accumulated.
void gemmTile(const kiln_linear_weight &w, const float *x, int64_t n,
              int64_t in, int64_t o0, int64_t o1, float *c, int64_t ldc) {
  const int64_t rows = o1 - o0;
  if (w.kind == KILN_WEIGHT_BLOCKS && w.act_quant == KILN_ACT_INT8_PER_BLOCK) {
    if (n < kA8FloatTokens) {
      linearBlocksA8(w.format, x, n, in,
                     static_cast<const uint8_t *>(w.data) + o0 * rowBytes(w, in),
                     rows, c, ldc);
      return;
    }
    // kiln_k_linear_blocks_a8's prefill: dequantized activations, then the
    // float path below.
    x = loopDequantizedA8Input(x, n, in);
  }
  if (w.kind == KILN_WEIGHT_F32) {
    gemmDenseF32(x, n, in, static_cast<const float *>(w.data) + o0 * in, rows,
                 c, ldc);
    return;
  }
  float *tile = threadScratch(5, rows * std::min(kTileDepth, in));
  for (int64_t k0 = 0; k0 < in; k0 += kTileDepth) {
    int64_t depth = std::min(kTileDepth, in - k0);
    for (int64_t r = 0; r < rows; ++r)
      dequantRow(w, in, o0 + r, k0, depth, tile + r * depth);
    gemmWeightTile(x, n, in, k0, tile, rows, depth, c, ldc, k0 != 0);
  }
  if (w.kind == KILN_WEIGHT_W8 && w.group_size <= 0)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < rows; ++r)
        c[t * ldc + r] *= w.scales[o0 + r];
}

} // namespace
} // namespace kiln::rt::cpu

using namespace kiln::rt::cpu;

extern "C" {

void kiln_k_linear_tile(const kiln_linear_weight *w, const float *x, int64_t n,
                        int64_t in, int64_t o0, int64_t o1, float *c,
                        int64_t ldc) {
  if (n <= 0 || o1 <= o0)
    return;
  if (in <= 0) {
    for (int64_t t = 0; t < n; ++t)
      std::memset(c + t * ldc, 0, sizeof(float) * size_t(o1 - o0));
    return;
  }
  if (n == 1)
    gemvTile(*w, x, in, o0, o1, c);
  else
    gemmTile(*w, x, n, in, o0, o1, c, ldc);
}

void kiln_k_parallel_for(int64_t count, int64_t align, int64_t work,
                         void (*fn)(void *env, int64_t begin, int64_t end),
                         void *env) {
  if (count <= 0)
    return;
  // Too little work for threads: one chunk on the calling thread (its
  // boundaries never depend on the thread count either way).
  const bool parallel = work > kParallelGrain;
  parallelChunks(count, parallel ? chunkGrain(count, align) : count, parallel,
                 fn, env);
}

void kiln_k_rope_table(float *cs, int64_t n, int64_t pos, int64_t head_dim,
                       int64_t rot_dim, float theta) {
  const int64_t pairs = rot_dim / 2;
  for (int64_t i = 0; i < pairs; ++i) { // kiln_k_rope's inverse frequencies
    const float freq = 1.0f / powf(theta, float(2 * i) / float(head_dim));
    for (int64_t r = 0; r < n; ++r) {
      const float val = float(pos + r) * freq;
      cs[(r * pairs + i) * 2] = cosf(val);
      cs[(r * pairs + i) * 2 + 1] = sinf(val);
    }
  }
}

void kiln_k_widen(int32_t elem, const uint16_t *x, float *y, int64_t count) {
  if (count <= 0)
    return;
  if (elem == KILN_ELEM_BF16)
    widenBf16(x, y, count);
  else
    widenF16(x, y, count);
}

void kiln_k_narrow(int32_t elem, const float *x, uint16_t *y, int64_t count) {
  if (count <= 0)
    return;
  if (elem == KILN_ELEM_BF16)
    narrowBf16(x, y, count);
  else
    narrowF16(x, y, count);
}

float *kiln_k_scratch(int64_t slot, int64_t count) {
  return threadScratch(int(std::clamp<int64_t>(slot, 0, 3)), count);
}

} // extern "C"

/// Column range copy for any element size (kiln.slice_columns).
template <class T>
static void sliceColumns(const T *x, T *y, int64_t n, int64_t in,
                         int64_t offset, int64_t width) {
  for (int64_t t = 0; t < n; ++t)
    std::memcpy(y + t * width, x + t * in + offset, sizeof(T) * size_t(width));
}

extern "C" {
void kiln_k_slice_columns(const float *x, float *y, int64_t n, int64_t in,
                          int64_t offset, int64_t width) {
  sliceColumns(x, y, n, in, offset, width);
}
void kiln_k_slice_columns_f16(const kiln_f16_t *x, kiln_f16_t *y, int64_t n,
                              int64_t in, int64_t offset, int64_t width) {
  sliceColumns(x, y, n, in, offset, width);
}
void kiln_k_slice_columns_bf16(const kiln_bf16_t *x, kiln_bf16_t *y, int64_t n,
                               int64_t in, int64_t offset, int64_t width) {
  sliceColumns(x, y, n, in, offset, width);
}
} // extern "C"

//===- KernelTemplates.h - Pieces shared by the CPU kernel families -*- C++ -*-===//
//
// Element traits (F32 computes in place; F16 / Bf16 rows are widened into
// per-thread float buffers, computed with the float32 code and rounded back
// once), the per-thread scratch buffers, and the loops that spread rows over
// the runtime's thread pool (ThreadPool.h). Shared by the kernel families:
// Kernels.cpp (embedding, norms, RoPE, bias, elementwise), Linear.cpp (dense
// and weight-quantized linears), Attention.cpp (attention over the plain,
// 8-bit and centered KV caches). Internal to the runtime.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_CPU_KERNELTEMPLATES_H
#define KILN_RUNTIME_CPU_KERNELTEMPLATES_H

#include "cpu/Kernels.h"
#include "cpu/ThreadPool.h"

#include <cstdint>
#include <type_traits>
#include <vector>

namespace kiln::rt::cpu {

/// Work below this many floats (or multiply-adds) runs on one thread: handing
/// a loop to the pool costs microseconds, far more when cores are shared.
inline constexpr int64_t kParallelGrain = 1 << 17;

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

template <class E> inline constexpr bool kIsF32 = std::is_same_v<E, F32>;

/// Per-thread float scratch. Slot 0 belongs to a kernel's calling thread
/// outside its parallel regions (that thread is also thread 0 inside them);
/// slots 1-3 hold the buffers live at once within one parallel iteration.
inline float *scratch(int slot, int64_t count) {
  thread_local std::vector<float> buffers[4];
  std::vector<float> &b = buffers[slot];
  if (b.size() < size_t(count))
    b.resize(size_t(count));
  return b.data();
}

/// `count` elements at p as float32: p itself for F32, else widened into
/// scratch `slot`.
template <class E>
inline const float *loadRow(const typename E::T *p, int64_t count, int slot) {
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
inline float *rowOut(typename E::T *p, int64_t count, int slot) {
  if constexpr (kIsF32<E>) {
    (void)count, (void)slot;
    return p;
  } else {
    return scratch(slot, count);
  }
}
template <class E>
inline void storeRow(const float *row, typename E::T *p, int64_t count) {
  if constexpr (kIsF32<E>)
    (void)row, (void)p, (void)count;
  else
    E::narrow(row, p, count);
}

/// Output rows [0, out) in chunks of chunkGrain(out, 16) rows (multiples
/// of 16: whole cache lines of float outputs) over the pool's threads when
/// `parallel` (ThreadPool.h): fn(begin, end) runs on the thread that claimed
/// the chunk, so per-thread scratch buffers are safe in fn. The chunks depend
/// on `out` alone, so every row is computed the same way for any thread
/// count. Used by the GEMVs and the prefill GEMMs: each chunk streams its own
/// rows of the weights.
template <class Fn>
inline void forRowChunks(int64_t out, bool parallel, Fn &&fn) {
  parallelFor(out, chunkGrain(out, 16), parallel, fn);
}

/// Output rows of a prefill GEMM in chunks of chunkGrain(out, kTileAlign)
/// rows: each chunk is one or more sgemm calls that pack the activations
/// again, so chunks are kept large (at most kMaxChunks, multiples of 128,
/// the rows of one weight tile).
inline constexpr int64_t kTileAlign = 128;
template <class Fn>
inline void forTileChunks(int64_t out, bool parallel, Fn &&fn) {
  parallelFor(out, chunkGrain(out, kTileAlign), parallel, fn);
}

/// fn(i) for every i in [0, count), over the pool's threads when `parallel`
/// (independent rows: elementwise kernels, norms, RoPE, cache appends).
template <class Fn> inline void forRows(int64_t count, bool parallel, Fn &&fn) {
  parallelFor(count, chunkGrain(count, 1), parallel,
              [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i)
                  fn(i);
              });
}

} // namespace kiln::rt::cpu

#endif // KILN_RUNTIME_CPU_KERNELTEMPLATES_H

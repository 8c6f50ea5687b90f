//===- Attention.cpp - Attention over the KV caches -----------------------===//
//
// kernel_abi.h's causal attention (optionally a sliding window) with the
// KV-cache append: float32 and f16 / bf16 caches, INT8 and FP8 E4M3 caches
// with per-(token, kv head) scales, and their centered variants (keys stored
// relative to the rotated calibrated key mean). Softmax as llama2.c run.c
// (max subtracted, exp, normalised by the sum); one (token, head) per chunk
// of the thread pool. The 8-bit caches share the code: new K/V rows are
// quantized on append, cache rows dequantized into per-thread float buffers
// when read.
//
//===----------------------------------------------------------------------===//
#include "cpu/Blas.h"
#include "cpu/KernelTemplates.h"
#include "kiln_rt/rope_scaling.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

namespace kiln::rt::cpu {

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

/// Where the KV row of sequence position t lives: row t of a contiguous
/// cache [max_seq, ...].
struct ContiguousSlots {
  int64_t operator()(int64_t t) const { return t; }
  /// Positions from t on stored in consecutive rows.
  int64_t run(int64_t) const { return std::numeric_limits<int64_t>::max(); }
};

/// Row table[t / B] * B + t % B of a paged cache: a pool of blocks of
/// B = blockTokens rows, `table` the sequence's block table
/// (kv/BlockManager.h; PagedAttention, Kwon et al. 2023).
struct PagedSlots {
  const int32_t *table;
  int64_t blockTokens;
  int64_t operator()(int64_t t) const {
    return int64_t(table[t / blockTokens]) * blockTokens + t % blockTokens;
  }
  int64_t run(int64_t t) const { return blockTokens - t % blockTokens; }
};

/// Cache access of attention(): a float / 16-bit cache, rows appended as
/// given and read through cacheRows (in place for F32 while the rows are
/// consecutive; gathered into scratch slot 2 across paged blocks).
template <class E, class Slots = ContiguousSlots> struct PlainKv {
  using T = typename E::T;
  T *kCache, *vCache;
  int64_t kvDim, headDim;
  Slots slot{};
  void append(const T *k, const T *v, int64_t n, int64_t pos) const {
    for (int64_t i = 0; i < n;) {
      // The new keys/values may already live in the cache.
      const int64_t run = std::min(n - i, slot.run(pos + i));
      T *kDst = kCache + slot(pos + i) * kvDim;
      T *vDst = vCache + slot(pos + i) * kvDim;
      if (k + i * kvDim != kDst)
        std::memmove(kDst, k + i * kvDim, sizeof(T) * size_t(run * kvDim));
      if (v + i * kvDim != vDst)
        std::memmove(vDst, v + i * kvDim, sizeof(T) * size_t(run * kvDim));
      i += run;
    }
  }
  /// Rows [t0, t0 + count) of kv head kvh of the K (isV false) or V cache as
  /// float, row stride in `stride`.
  const float *rows(bool isV, int64_t t0, int64_t count, int64_t kvh,
                    int64_t &stride) const {
    const T *cache = isV ? vCache : kCache;
    if (slot.run(t0) >= count)
      return cacheRows<E>(cache + slot(t0) * kvDim + kvh * headDim, count,
                          headDim, kvDim, 2, stride);
    float *buf = scratch(2, count * headDim);
    for (int64_t t = 0; t < count; ++t) {
      const T *row = cache + slot(t0 + t) * kvDim + kvh * headDim;
      if constexpr (kIsF32<E>)
        std::memcpy(buf + t * headDim, row, sizeof(float) * size_t(headDim));
      else
        E::widen(row, buf + t * headDim, headDim);
    }
    stride = headDim;
    return buf;
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
  });
}

/// Cache access of attention() for the 8-bit KV caches (INT8: Int8Codec,
/// FP8 E4M3: Fp8Codec): new rows quantized per (token, kv head) on append,
/// cache rows dequantized (scale * value) into scratch slot 2 when read.
/// With `keyMean` (the centered caches) keys are stored as k - m_t and read
/// back as scale * value + m_t.
template <class E, class Codec, class Slots = ContiguousSlots> struct QuantKv {
  using T = typename E::T;
  using Code = typename Codec::Code;
  Code *kCache, *vCache;
  float *kScales, *vScales;
  int64_t kvHeads, headDim;
  /// Rotated key means m_t [pos + n, kvHeads * headDim] (rotatedKeyMeans),
  /// by sequence position; null for uncentered caches.
  const float *keyMean = nullptr;
  Slots slot{};

  void append(const T *k, const T *v, int64_t n, int64_t pos) const {
    const int64_t kvDim = kvHeads * headDim, rows = n * kvHeads;
    forRows(rows, rows * headDim > kParallelGrain, [&](int64_t r) {
      int64_t i = r / kvHeads, h = r % kvHeads;
      int64_t src = i * kvDim + h * headDim;
      int64_t row = slot(pos + i);
      int64_t dst = row * kvDim + h * headDim;
      int64_t sIdx = row * kvHeads + h;
      const float *x = loadRow<E>(k + src, headDim, 1);
      if (keyMean) {
        const float *m = keyMean + (pos + i) * kvDim + h * headDim;
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
    const Code *q = (isV ? vCache : kCache) + kvh * headDim;
    const float *sc = (isV ? vScales : kScales) + kvh;
    const float *mean =
        isV || !keyMean ? nullptr : keyMean + t0 * kvDim + kvh * headDim;
    const Codec value;
    float *buf = scratch(2, count * headDim);
    for (int64_t t = 0; t < count; ++t) {
      const int64_t row = slot(t0 + t);
      float s = sc[row * kvHeads];
      const Code *qt = q + row * kvDim;
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

/// att[t] = scale * dot(q, k + t * stride) over d elements for t < rows;
/// returns max(maxScore, att[0..rows)). The dots are dotPairwise16 (a
/// sequential float sum, which the compiler may not reorder, does not
/// vectorize: the prefill of llama-110m spent 46% of its time in them).
__attribute__((target_clones("avx512f", "avx2", "default"))) static float
scoreRows(const float *__restrict q, const float *__restrict k, int64_t stride,
          int64_t rows, int64_t d, float scale, float *__restrict att,
          float maxScore) {
  for (int64_t t = 0; t < rows; ++t) {
    const float s = dotPairwise16(q, k + t * stride, d) * scale;
    att[t] = s;
    maxScore = std::max(maxScore, s);
  }
  return maxScore;
}

/// acc[e] += (att[t] * inv) * v[t * stride + e] for t < rows, e < d.
__attribute__((target_clones("avx512f", "avx2", "default"))) static void
accumulateRows(const float *__restrict att, float inv,
               const float *__restrict v, int64_t stride, int64_t rows,
               int64_t d, float *__restrict acc) {
  for (int64_t t = 0; t < rows; ++t) {
    const float *vt = v + t * stride;
    const float a = att[t] * inv;
    for (int64_t e = 0; e < d; ++e)
      acc[e] += a * vt[e];
  }
}

/// Rows [r0, r0 + tq) of head h of q [n, heads * headDim] as float: q itself
/// for F32 (row stride qDim), else widened into scratch slot 1 (row stride
/// headDim); the stride goes to `stride`.
template <class E>
static const float *queryRows(const typename E::T *q, int64_t r0, int64_t tq,
                              int64_t h, int64_t qDim, int64_t headDim,
                              int64_t &stride) {
  if constexpr (kIsF32<E>) {
    stride = qDim;
    return q + r0 * qDim + h * headDim;
  } else {
    float *b = scratch(1, tq * headDim);
    for (int64_t r = 0; r < tq; ++r)
      E::widen(q + (r0 + r) * qDim + h * headDim, b + r * headDim, headDim);
    stride = headDim;
    return b;
  }
}

/// out rows [r0, r0 + tq) of head h = P V: P [tq, keys] (row stride keys),
/// V [keys, headDim] (row stride vStride), by sgemm straight into out for
/// F32, else through scratch slot 1 and narrowed.
template <class E>
static void attendRows(const float *p, int64_t keys, const float *v,
                       int64_t vStride, typename E::T *out, int64_t r0,
                       int64_t tq, int64_t h, int64_t qDim, int64_t headDim) {
  float *o;
  int64_t oStride;
  if constexpr (kIsF32<E>) {
    o = out + r0 * qDim + h * headDim;
    oStride = qDim;
  } else {
    o = scratch(1, tq * headDim);
    oStride = headDim;
  }
  sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(tq), int(headDim),
        int(keys), 1.0f, p, int(keys), v, int(vStride), 0.0f, o,
        int(oStride));
  if constexpr (!kIsF32<E>)
    for (int64_t r = 0; r < tq; ++r)
      E::narrow(o + r * headDim, out + (r0 + r) * qDim + h * headDim,
                headDim);
}

/// Query rows per tile of the prefill attention, and the prefill chunk from
/// which the tiled path is taken.
static constexpr int64_t kQueryTile = 32;
static constexpr int64_t kTiledQueries = 16;

/// Prefill attention by query tiles: per (tile of kQueryTile query rows,
/// head) the scores S = scale * Q K^T over the keys the tile's rows can see
/// are one sgemm, each row's softmax (exp(s - max) / sum, masked causally
/// and by the sliding window; the formula of the per-row path below, with
/// vector exponentials: softmaxRow) is taken in place, and O = P V is a
/// second sgemm. The dot products are
/// summed in sgemm's order; per-row results still depend on nothing but
/// the tile, so they are identical for any thread count. Scratch: slot 1
/// the 16-bit Q tile and O tile, slot 2 the keys / values as float
/// (Kv::rows), slot 3 S (kQueryTile x keys floats).
template <class E, class Kv>
static void attentionTiles(const typename E::T *q, const Kv &kv,
                           typename E::T *out, int64_t n, int64_t pos,
                           int64_t heads, int64_t group, int64_t headDim,
                           float scale, int64_t window, bool parallel) {
  const int64_t qDim = heads * headDim;
  const int64_t tiles = (n + kQueryTile - 1) / kQueryTile;
  parallelFor(tiles * heads, 1, parallel, [&](int64_t w, int64_t) {
    const int64_t tile = w / heads, h = w % heads, kvh = h / group;
    const int64_t i0 = tile * kQueryTile, i1 = std::min(n, i0 + kQueryTile);
    const int64_t tq = i1 - i0;
    // Keys [kFirst, kEnd): those any row of the tile sees.
    const int64_t kEnd = pos + i1;
    const int64_t kFirst =
        window > 0 ? std::max<int64_t>(0, pos + i0 - window + 1) : 0;
    const int64_t keys = kEnd - kFirst;
    int64_t qStride;
    const float *qt = queryRows<E>(q, i0, tq, h, qDim, headDim, qStride);
    float *sc = scratch(3, tq * keys);
    int64_t stride;
    const float *kr = kv.rows(false, kFirst, keys, kvh, stride);
    sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(tq), int(keys),
          int(headDim), scale, qt, int(qStride), kr, int(stride), 0.0f, sc,
          int(keys));
    for (int64_t r = 0; r < tq; ++r) {
      const int64_t p = pos + i0 + r; // the row's position: keys [.., p]
      softmaxRow(sc + r * keys,
                 window > 0 ? std::max<int64_t>(0, p - window + 1) - kFirst
                            : 0,
                 p - kFirst, keys);
    }
    const float *vr = kv.rows(true, kFirst, keys, kvh, stride);
    attendRows<E>(sc, keys, vr, stride, out, i0, tq, h, qDim, headDim);
  });
}

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
  // Batch-invariant kernels: the per-row path for every chunk length, so a
  // row's result does not depend on how the prompt was chunked.
  if (n >= kTiledQueries && !batchInvariantKernels()) {
    attentionTiles<E>(q, kv, out, n, pos, heads, group, head_dim, scale,
                      window, parallel);
    return;
  }
  // One (token, head) per chunk: causal rows differ in length, and claimed
  // chunks balance them.
  parallelFor(work, 1, parallel, [&](int64_t w, int64_t) {
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
      maxScore = scoreRows(qh, kr, stride, rows, head_dim, scale,
                           att.data() + t0, maxScore);
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
      accumulateRows(att.data() + t0, inv, vr, stride, rows, head_dim,
                     acc.data());
    }
    T *o = out + i * qDim + h * head_dim;
    if constexpr (kIsF32<E>)
      std::memcpy(o, acc.data(), sizeof(float) * size_t(head_dim));
    else
      E::narrow(acc.data(), o, head_dim);
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

/// Attention of one sequence over a paged cache (kernel_abi.h
/// kiln_k_paged_attention), activations of E.
template <class E>
static void pagedAttention(const kiln_paged_kv &c, const void *q,
                           const void *k, const void *v, void *out, int64_t n,
                           int64_t pos, int64_t heads, int64_t kvHeads,
                           int64_t headDim, float scale, int64_t window) {
  using T = typename E::T;
  const PagedSlots slots{c.block_table, std::max<int64_t>(1, c.block_tokens)};
  const T *qt = static_cast<const T *>(q), *kt = static_cast<const T *>(k),
          *vt = static_cast<const T *>(v);
  T *ot = static_cast<T *>(out);
  auto quantized = [&](auto codec, auto *kPool, auto *vPool) {
    using Codec = decltype(codec);
    QuantKv<E, Codec, PagedSlots> kv{kPool,      vPool,   c.k_scales,
                                     c.v_scales, kvHeads, headDim};
    kv.slot = slots;
    if (c.k_mean) {
      float *table = scratch(0, (pos + n) * kvHeads * headDim);
      rotatedKeyMeans(c.k_mean, pos + n, kvHeads, headDim, c.rot_dim,
                      c.theta, table);
      kv.keyMean = table;
    }
    attention<E>(qt, kt, vt, kv, ot, n, pos, heads, kvHeads, headDim, 0,
                 scale, window);
  };
  switch (c.format) {
  case KILN_KV_INT8:
    quantized(Int8Codec(), static_cast<int8_t *>(c.k_pool),
              static_cast<int8_t *>(c.v_pool));
    return;
  case KILN_KV_FP8:
    quantized(Fp8Codec(), static_cast<uint8_t *>(c.k_pool),
              static_cast<uint8_t *>(c.v_pool));
    return;
  default: { // the activations' own type
    PlainKv<E, PagedSlots> kv{static_cast<T *>(c.k_pool),
                              static_cast<T *>(c.v_pool), kvHeads * headDim,
                              headDim, slots};
    attention<E>(qt, kt, vt, kv, ot, n, pos, heads, kvHeads, headDim, 0,
                 scale, window);
    return;
  }
  }
}

//===----------------------------------------------------------------------===//
// Dynamic block-sparse prefill attention (kernel_abi.h
// kiln_k_attention_sparse; kiln.attention's `sparse`, docs/sparse-attention.md)
//===----------------------------------------------------------------------===//

/// The selection's parameters (kiln.attention `sparse`).
struct SparseParams {
  float gamma;
  int64_t block, sink, local, minBudget, maxBudget, minTokens;
  int64_t layer; ///< the model layer, for the per-head counters
  /// Bit g: KV head g is a streaming head (sink and local blocks only).
  uint64_t streaming;
  /// 0: the pooled estimate (blocks' mean keys); S >= 1: antidiagonal
  /// scoring with stride S (every S-th key per row).
  int64_t stride;
  bool isStreaming(int64_t g) const {
    return g < 64 && ((streaming >> g) & 1u);
  }
};

/// Per (layer, KV head) counters exist for layers and KV heads below these.
static constexpr int64_t kStatLayers = 512, kStatKvHeads = 64;

/// The counters of one sparse kernel family over the process (api.h
/// kiln_rt_sparse_attention_stats for prefill's block pairs,
/// kiln_rt_sparse_decode_stats for decode's pages): units kept and seen by
/// the calls that selected, calls, calls run dense, and kept / seen per
/// (layer, KV head).
struct SparseCounters {
  std::atomic<int64_t> kept{0}, seen{0}, calls{0}, denseCalls{0};
  std::atomic<int64_t> headKept[kStatLayers * kStatKvHeads],
      headSeen[kStatLayers * kStatKvHeads];

  /// Files `keptUnits` of `seenUnits` for KV head g of `layer`.
  void fileHead(int64_t layer, int64_t g, int64_t keptUnits,
                int64_t seenUnits) {
    if (layer < 0 || layer >= kStatLayers || g < 0 || g >= kStatKvHeads)
      return;
    headKept[layer * kStatKvHeads + g] += keptUnits;
    headSeen[layer * kStatKvHeads + g] += seenUnits;
  }
  void read(int64_t out[4], int reset) {
    out[0] = kept.load();
    out[1] = seen.load();
    out[2] = calls.load();
    out[3] = denseCalls.load();
    if (!reset)
      return;
    kept = 0;
    seen = 0;
    calls = 0;
    denseCalls = 0;
    for (int64_t i = 0; i < kStatLayers * kStatKvHeads; ++i) {
      headKept[i] = 0;
      headSeen[i] = 0;
    }
  }
  void readHead(int64_t layer, int64_t g, int64_t out[2]) const {
    out[0] = out[1] = 0;
    if (layer < 0 || layer >= kStatLayers || g < 0 || g >= kStatKvHeads)
      return;
    out[0] = headKept[layer * kStatKvHeads + g].load();
    out[1] = headSeen[layer * kStatKvHeads + g].load();
  }
};
static SparseCounters prefillCounters, decodeCounters;

/// The audit (api.h kiln_rt_sparse_attention_audit): per layer, the
/// (row, head) pairs audited, their captured mass's sum and minimum, and
/// the squared output error and dense output norms.
struct SparseAudit {
  double pairs = 0, captured = 0, minCaptured = 1, errorSq = 0, denseSq = 0;
};
static std::atomic<bool> sparseAuditOn{false};
static std::mutex sparseAuditMutex;
static SparseAudit sparseAudit[kStatLayers];

/// One element of E as a double (the audit's sums).
template <class E> static double asDouble(const typename E::T &x) {
  if constexpr (kIsF32<E>) {
    return double(x);
  } else {
    float f;
    E::widen(&x, &f, 1);
    return double(f);
  }
}

/// Files `pairs` (row, head) pairs whose captured mass sums to `captured`
/// with minimum `minCaptured` for layer `layer`.
static void fileCapturedMass(int64_t layer, double pairs, double captured,
                             double minCaptured) {
  if (layer < 0 || layer >= kStatLayers)
    return;
  std::lock_guard<std::mutex> lock(sparseAuditMutex);
  SparseAudit &a = sparseAudit[layer];
  a.pairs += pairs;
  a.captured += captured;
  a.minCaptured = std::min(a.minCaptured, minCaptured);
}

/// Above this fraction of the causal (query block, key block) pairs kept,
/// the call runs the dense kernel (selection would save nothing).
static constexpr double kSparseDenseFraction = 0.9;

/// Adds softmax(logits) to m[0 .. logits.size()) (one row's share of each
/// block or page in an estimate), `maxLogit` the largest logit. `logits`
/// is overwritten.
static void addSoftmaxShares(std::vector<double> &logits, double maxLogit,
                             double *m) {
  double total = 0.0;
  for (double &l : logits) {
    l = std::exp(l - maxLogit);
    total += l;
  }
  for (size_t i = 0; i < logits.size(); ++i)
    m[i] += logits[i] / total;
}

/// The key blocks query block qb keeps, ascending, into `list`, given
/// each head's estimated mass `mass[h * (qb + 1) + kb]` (kb <= qb) for the
/// `heads` query heads of the GQA group and `lastPos` (one past the block's
/// last query position: block kb holds min(B, lastPos - kb B) keys it
/// sees). Sink blocks [0, sink) and the `local` blocks ending at the
/// diagonal are always kept, then blocks in order of their largest mass
/// over the heads (ties: the earlier block) until every head's kept mass
/// reaches gamma, then more until min_budget keys; then the least massive
/// of those optional blocks are dropped down to max_budget keys (mandatory
/// ones stay). `order` is scratch.
static void chooseSparseBlocks(const std::vector<double> &mass, int64_t heads,
                               int64_t qb, int64_t lastPos,
                               const SparseParams &sp,
                               std::vector<int32_t> &order,
                               std::vector<int32_t> &list,
                               const std::vector<double> *rank = nullptr) {
  const int64_t blocks = qb + 1, B = sp.block;
  std::vector<char> chosen(size_t(blocks), 0);
  std::vector<double> have(size_t(heads), 0.0), peak(size_t(blocks), 0.0);
  // The order optional blocks are taken in: `rank` when given (Quest
  // decode: the pages' score bounds), else the largest mass over heads.
  if (rank)
    peak = *rank;
  else
    for (int64_t kb = 0; kb < blocks; ++kb)
      for (int64_t h = 0; h < heads; ++h)
        peak[size_t(kb)] =
            std::max(peak[size_t(kb)], mass[size_t(h * blocks + kb)]);
  int64_t keys = 0;
  auto keysOf = [&](int64_t kb) { return std::min(B, lastPos - kb * B); };
  auto take = [&](int64_t kb, bool keep) {
    if (bool(chosen[size_t(kb)]) == keep)
      return;
    chosen[size_t(kb)] = keep;
    const double sign = keep ? 1.0 : -1.0;
    for (int64_t h = 0; h < heads; ++h)
      have[size_t(h)] += sign * mass[size_t(h * blocks + kb)];
    keys += keep ? keysOf(kb) : -keysOf(kb);
  };
  auto covered = [&] {
    for (double m : have)
      if (m < double(sp.gamma))
        return false;
    return true;
  };
  for (int64_t kb = 0; kb < std::min(sp.sink, blocks); ++kb)
    take(kb, true);
  for (int64_t kb = std::max<int64_t>(0, qb - sp.local + 1); kb <= qb; ++kb)
    take(kb, true);
  order.clear();
  for (int64_t kb = 0; kb < blocks; ++kb)
    if (!chosen[size_t(kb)])
      order.push_back(int32_t(kb));
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t c) {
    return peak[size_t(a)] > peak[size_t(c)];
  });
  size_t next = 0;
  while (next < order.size() && (!covered() || keys < sp.minBudget))
    take(order[next++], true);
  if (sp.maxBudget > 0)
    while (keys > sp.maxBudget && next > 0)
      take(order[--next], false);
  list.clear();
  for (int64_t kb = 0; kb < blocks; ++kb)
    if (chosen[size_t(kb)])
      list.push_back(int32_t(kb));
}

/// The rows of key blocks `list` (of B positions, the keys < T) of KV head
/// g, keys or values, gathered in list order into `buf` ([keys][headDim],
/// sized by the caller).
template <class Kv>
static void gatherBlocks(const Kv &kv, bool isV, const std::vector<int32_t> &list,
                         int64_t B, int64_t T, int64_t g, int64_t headDim,
                         float *buf) {
  int64_t at = 0;
  for (int32_t kb : list) {
    const int64_t t0 = int64_t(kb) * B, count = std::min(B, T - t0);
    int64_t stride;
    const float *rows = kv.rows(isV, t0, count, g, stride);
    for (int64_t t = 0; t < count; ++t)
      std::memcpy(buf + (at + t) * headDim, rows + t * stride,
                  sizeof(float) * size_t(headDim));
    at += count;
  }
}

/// The key blocks each (kv head g, query block) keeps (chooseSparseBlocks),
/// indexed g * queryBlocks + (qb - qb0). Query block qb covers the absolute
/// positions [qb B, (qb + 1) B); each head h of the group estimates the
/// attention mass of each key block kb <= qb as the mean over the block's
/// rows r of the row's share of a proxy softmax:
///  * stride 0 (pooled, FlexPrefill, Lai et al. 2025): softmax_kb(scale
///    q_{r,h} . kbar_kb + ln n_{r,kb}), kbar_kb the mean key of block kb and
///    n_{r,kb} its keys at or before row r;
///  * stride S (antidiagonal, XAttention, Xu et al. 2025), a
///    Horvitz-Thompson estimate of the row's softmax: the keys of the
///    mandatory blocks (sink, local) scored exactly with weight 1, the
///    optional blocks' keys sampled, j <= p (p the row's position) with
///    (p + j) mod S = S - 1, weight S (every S-th key, the offset moving
///    with the row, so S consecutive rows see every key once); the share of
///    block kb is sum_{j in kb} w_j e^(s_j) / sum_j w_j e^(s_j). (Without
///    the exact mandatory part a single strong sink key, sampled by one row
///    in S, was underestimated about S-fold and the renormalised rows
///    inflated the diffuse tail: at 8K tokens of kiln-attention-bench's
///    input the selection kept 3.7x the oracle's blocks.)
template <class E, class Kv>
static std::vector<std::vector<int32_t>>
selectSparseBlocks(const typename E::T *q, const Kv &kv, int64_t n,
                   int64_t pos, int64_t heads, int64_t kvHeads,
                   int64_t headDim, float scale, const SparseParams &sp,
                   bool parallel) {
  const int64_t T = pos + n, B = sp.block, S = sp.stride;
  const int64_t keyBlocks = (T + B - 1) / B;
  const int64_t qb0 = pos / B, queryBlocks = (T - 1) / B - qb0 + 1;
  const int64_t group = heads / kvHeads, qDim = heads * headDim;
  // Pooled: the mean key of every block of every kv head. Antidiagonal:
  // every kv head's keys in S residue classes, class e holding the keys
  // j = e, e + S, ... in order ([kvHeads][S][ceil(T / S)][headDim]).
  const int64_t perClass = S > 0 ? (T + S - 1) / S : 0;
  std::vector<float> keyMeans, keyClasses;
  if (S == 0) {
    keyMeans.resize(size_t(kvHeads * keyBlocks * headDim));
    parallelFor(kvHeads * keyBlocks, 1, parallel, [&](int64_t b, int64_t e) {
      for (int64_t w = b; w < e; ++w) {
        const int64_t g = w / keyBlocks, kb = w % keyBlocks;
        const int64_t t0 = kb * B, count = std::min(B, T - t0);
        int64_t stride;
        const float *rows = kv.rows(false, t0, count, g, stride);
        float *mean = keyMeans.data() + w * headDim;
        for (int64_t d = 0; d < headDim; ++d) {
          double sum = 0.0;
          for (int64_t t = 0; t < count; ++t)
            sum += rows[t * stride + d];
          mean[d] = float(sum / double(count));
        }
      }
    });
  } else {
    keyClasses.resize(size_t(kvHeads * S * perClass * headDim));
    parallelFor(kvHeads, 1, parallel, [&](int64_t b, int64_t e) {
      for (int64_t g = b; g < e; ++g) {
        int64_t stride;
        const float *rows = kv.rows(false, 0, T, g, stride);
        for (int64_t t = 0; t < T; ++t)
          std::memcpy(keyClasses.data() +
                          ((g * S + t % S) * perClass + t / S) * headDim,
                      rows + t * stride, sizeof(float) * size_t(headDim));
      }
    });
  }
  std::vector<std::vector<int32_t>> kept(size_t(kvHeads * queryBlocks));
  parallelFor(kvHeads * queryBlocks, 1, parallel, [&](int64_t b, int64_t e) {
    std::vector<double> mass, logits;
    std::vector<int32_t> order;
    // The mandatory blocks' keys (gathered, [mandKeys][headDim]), their
    // positions, and their exact scores for one head's rows.
    thread_local std::vector<float> mandK, mandS, qAll, qRes;
    std::vector<int32_t> mandBlocks;
    for (int64_t w = b; w < e; ++w) {
      const int64_t g = w / queryBlocks, qb = qb0 + w % queryBlocks;
      const int64_t r0 = std::max(pos, qb * B) - pos;
      const int64_t r1 = std::min(T, (qb + 1) * B) - pos;
      const int64_t blocks = qb + 1, tq = r1 - r0;
      mass.assign(size_t(group * blocks), 0.0);
      if (sp.isStreaming(g)) {
        // A streaming head: the mandatory blocks only, no estimate.
        SparseParams mandatory = sp;
        mandatory.gamma = 0.0f;
        mandatory.minBudget = 0;
        chooseSparseBlocks(mass, group, qb, pos + r1, mandatory, order,
                           kept[size_t(w)]);
        continue;
      }
      // Sink blocks [0, sink) and local blocks [localFirst, qb]: their
      // keys are scored exactly (they are kept anyway); the estimate only
      // covers the optional blocks between them.
      const int64_t sinkEnd = std::min(sp.sink, blocks);
      const int64_t localFirst = std::max(sinkEnd, qb - sp.local + 1);
      mandBlocks.clear();
      for (int64_t kb = 0; kb < blocks; ++kb)
        if (kb < sinkEnd || kb >= localFirst)
          mandBlocks.push_back(int32_t(kb));
      int64_t mandKeys = 0;
      for (int32_t kb : mandBlocks)
        mandKeys += std::min(B, T - int64_t(kb) * B);
      if (S > 0) {
        mandK.resize(size_t(mandKeys * headDim));
        gatherBlocks(kv, false, mandBlocks, B, T, g, headDim, mandK.data());
      }
      // Row r's exact mandatory share: softmax-normalised later with the
      // optional estimate. mandMax / mandSum: max and sum of exp(s - max)
      // over the mandatory keys the row sees; blockSum: per mandatory block.
      auto mandatoryStats = [&](int64_t hr, double &mx, double &sum,
                                std::vector<double> &blockSum) {
        // hr = head * tq + row. The mandatory keys the row sees are a
        // prefix of its scores (sink keys, then local keys up to p).
        const int64_t p = pos + r0 + hr % tq;
        float *row = mandS.data() + hr * mandKeys;
        int64_t visible = 0;
        for (int32_t kb : mandBlocks) {
          const int64_t t0 = int64_t(kb) * B, count = std::min(B, T - t0);
          visible += std::max<int64_t>(0, std::min(count, p + 1 - t0));
        }
        blockSum.assign(mandBlocks.size(), 0.0);
        mx = -INFINITY;
        sum = 0.0;
        if (visible == 0)
          return;
        float fMax = -INFINITY, fSum = 0.0f;
        softmaxRow(row, 0, visible - 1, mandKeys, &fMax, &fSum);
        mx = fMax;
        sum = fSum;
        int64_t at = 0;
        for (size_t i = 0; i < mandBlocks.size(); ++i) {
          const int64_t t0 = int64_t(mandBlocks[i]) * B;
          const int64_t count = std::min(B, T - t0);
          double bs = 0.0;
          for (int64_t t = 0; t < count; ++t)
            bs += row[at + t];
          blockSum[i] = bs * sum;
          at += count;
        }
      };
      std::vector<double> blockSum;
      if (S == 0) {
        for (int64_t hi = 0; hi < group; ++hi) {
          const int64_t h = g * group + hi;
          double *m = mass.data() + hi * blocks;
          int64_t qStride;
          const float *qt =
              queryRows<E>(q, r0, tq, h, qDim, headDim, qStride);
          // S = scale Q_h Kbar^T for the block's rows.
          float *sc = scratch(3, tq * blocks);
          const float *kbar = keyMeans.data() + g * keyBlocks * headDim;
          sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(tq),
                int(blocks), int(headDim), scale, qt, int(qStride), kbar,
                int(headDim), 0.0f, sc, int(blocks));
          logits.resize(size_t(blocks));
          for (int64_t r = 0; r < tq; ++r) {
            // Every earlier block holds B keys; the diagonal block the
            // keys up to the row (ln n relative to ln B). The pooled logits
            // are a ranking proxy of every block alike (mixing in exact
            // scores of the mandatory blocks would make the others' mean
            // keys look negligible).
            const int64_t seen = pos + r0 + r + 1 - qb * B;
            const float *row = sc + r * blocks;
            double maxLogit = -INFINITY;
            for (int64_t kb = 0; kb < blocks; ++kb) {
              logits[size_t(kb)] =
                  double(row[kb]) +
                  (kb == qb ? std::log(double(seen) / double(B)) : 0.0);
              maxLogit = std::max(maxLogit, logits[size_t(kb)]);
            }
            addSoftmaxShares(logits, maxLogit, m);
          }
        }
      } else {
        // Every head's rows, contiguous ([group][tq][headDim]), and their
        // exact scores on the mandatory keys ([group][tq][mandKeys]).
        qAll.resize(size_t(group * tq * headDim));
        for (int64_t hi = 0; hi < group; ++hi) {
          int64_t qStride;
          const float *qt = queryRows<E>(q, r0, tq, g * group + hi, qDim,
                                         headDim, qStride);
          for (int64_t r = 0; r < tq; ++r)
            std::memcpy(qAll.data() + (hi * tq + r) * headDim,
                        qt + r * qStride, sizeof(float) * size_t(headDim));
        }
        mandS.resize(size_t(group * tq * mandKeys));
        sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(group * tq),
              int(mandKeys), int(headDim), scale, qAll.data(), int(headDim),
              mandK.data(), int(headDim), 0.0f, mandS.data(), int(mandKeys));
        // Rows of one residue c (positions p = c mod S) sample the key class
        // e = (S - 1 - c) mod S: one sgemm per residue for the rows of
        // every head of the group (the class's keys packed once). Sampled
        // keys in mandatory blocks are dropped (scored exactly instead);
        // the optional keys' sum is scaled by S (each stands for S keys).
        const int64_t lastPos = pos + r1 - 1;
        const int64_t sampled = lastPos / S + 1; // class sizes up to here
        const int64_t perResidue = (tq + S - 1) / S;
        float *sc = scratch(3, group * perResidue * sampled);
        qRes.resize(size_t(group * perResidue * headDim));
        for (int64_t c = 0; c < S; ++c) {
          // The block's first row with position = c (mod S).
          const int64_t first = ((c - (pos + r0) % S) % S + S) % S;
          if (first >= tq)
            continue;
          const int64_t rows = (tq - first + S - 1) / S;
          const int64_t ec = ((S - 1 - c) % S + S) % S;
          // Class ec's keys up to the block's last position.
          const int64_t nk = lastPos >= ec ? (lastPos - ec) / S + 1 : 0;
          if (nk > 0) {
            for (int64_t hi = 0; hi < group; ++hi)
              for (int64_t i = 0; i < rows; ++i)
                std::memcpy(qRes.data() + (hi * rows + i) * headDim,
                            qAll.data() + (hi * tq + first + i * S) * headDim,
                            sizeof(float) * size_t(headDim));
            const float *kc =
                keyClasses.data() + (g * S + ec) * perClass * headDim;
            sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(group * rows),
                  int(nk), int(headDim), scale, qRes.data(), int(headDim), kc,
                  int(headDim), 0.0f, sc, int(nk));
          }
          // Sampled keys j = ec + t S in the optional blocks
          // [sinkEnd, localFirst): t in [tA, tB).
          const int64_t jA = sinkEnd * B, jB = localFirst * B;
          const int64_t tA = jA > ec ? (jA - ec + S - 1) / S : 0;
          for (int64_t hi = 0; hi < group; ++hi) {
            double *m = mass.data() + hi * blocks;
            for (int64_t i = 0; i < rows; ++i) {
              const int64_t r = first + i * S, p = pos + r0 + r;
              const int64_t count = p >= ec ? (p - ec) / S + 1 : 0;
              const int64_t tB =
                  std::min(count, jB > ec ? (jB - ec + S - 1) / S : 0);
              double mMax, mSum;
              mandatoryStats(hi * tq + r, mMax, mSum, blockSum);
              float optMax = -INFINITY, optSum = 0.0f;
              float *row = sc + (hi * rows + i) * nk;
              if (tB > tA)
                softmaxRow(row, tA, tB - 1, tB, &optMax, &optSum);
              const double top = std::max(mMax, double(optMax));
              const double wMand = std::exp(mMax - top);
              const double wOpt = tB > tA ? double(S) * double(optSum) *
                                                std::exp(double(optMax) - top)
                                          : 0.0;
              const double z = mSum * wMand + wOpt;
              if (!(z > 0.0))
                continue;
              for (size_t k = 0; k < mandBlocks.size(); ++k)
                m[mandBlocks[k]] += blockSum[k] * wMand / z;
              // The optional keys' shares (softmaxRow left each key's
              // fraction of optSum), summed per block.
              int64_t t = tA;
              while (t < tB) {
                const int64_t kb = (ec + t * S) / B;
                const int64_t end =
                    std::min(tB, ((kb + 1) * B - ec + S - 1) / S);
                double sum = 0.0;
                for (; t < end; ++t)
                  sum += row[t];
                m[kb] += sum * wOpt / z;
              }
            }
          }
        }
      }
      // Mean over the rows (each row's shares sum to 1).
      for (int64_t hi = 0; hi < group; ++hi) {
        double *m = mass.data() + hi * blocks, total = 0.0;
        for (int64_t kb = 0; kb < blocks; ++kb)
          total += m[kb];
        if (total > 0.0)
          for (int64_t kb = 0; kb < blocks; ++kb)
            m[kb] /= total;
      }
      chooseSparseBlocks(mass, group, qb, pos + r1, sp, order,
                         kept[size_t(w)]);
    }
  });
  return kept;
}

/// The audit's captured mass: for every new row and head, the exact
/// softmax over all the keys it sees (scale q . k, positions [0, p]),
/// summed over the keys its query block kept; filed for sp.layer.
template <class E, class Kv>
static void auditCapturedMass(const typename E::T *q, const Kv &kv,
                              const std::vector<std::vector<int32_t>> &kept,
                              int64_t n, int64_t pos, int64_t heads,
                              int64_t kvHeads, int64_t headDim, float scale,
                              const SparseParams &sp) {
  const int64_t T = pos + n, B = sp.block, group = heads / kvHeads;
  const int64_t qb0 = pos / B, queryBlocks = (T - 1) / B - qb0 + 1;
  const int64_t qDim = heads * headDim;
  std::vector<float> keys(size_t(T * headDim)), s;
  std::vector<char> isKept(static_cast<size_t>(T));
  double pairs = 0, captured = 0, minCaptured = 1;
  for (int64_t g = 0; g < kvHeads; ++g) {
    int64_t stride;
    const float *rows = kv.rows(false, 0, T, g, stride);
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(keys.data() + t * headDim, rows + t * stride,
                  sizeof(float) * size_t(headDim));
    for (int64_t qb = qb0; qb < qb0 + queryBlocks; ++qb) {
      std::fill(isKept.begin(), isKept.end(), 0);
      for (int32_t kb : kept[size_t(g * queryBlocks + (qb - qb0))])
        for (int64_t t = int64_t(kb) * B; t < std::min(T, (kb + 1) * B); ++t)
          isKept[size_t(t)] = 1;
      const int64_t r0 = std::max(pos, qb * B) - pos;
      const int64_t r1 = std::min(T, (qb + 1) * B) - pos, tq = r1 - r0;
      s.resize(size_t(tq * T));
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        int64_t qStride;
        const float *qt = queryRows<E>(q, r0, tq, h, qDim, headDim, qStride);
        sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(tq), int(T),
              int(headDim), scale, qt, int(qStride), keys.data(),
              int(headDim), 0.0f, s.data(), int(T));
        for (int64_t r = 0; r < tq; ++r) {
          const int64_t p = pos + r0 + r;
          const float *row = s.data() + r * T;
          double maxLogit = -INFINITY;
          for (int64_t t = 0; t <= p; ++t)
            maxLogit = std::max(maxLogit, double(row[t]));
          double total = 0, have = 0;
          for (int64_t t = 0; t <= p; ++t) {
            const double e = std::exp(double(row[t]) - maxLogit);
            total += e;
            have += isKept[size_t(t)] ? e : 0.0;
          }
          pairs += 1;
          captured += have / total;
          minCaptured = std::min(minCaptured, have / total);
        }
      }
    }
  }
  fileCapturedMass(sp.layer, pairs, captured, minCaptured);
}

/// Block-sparse prefill attention: per (query block, head) the kept key
/// blocks' rows gathered, S = scale Q K^T (sgemm), causal mask on the
/// diagonal block, softmaxRow, O = P V (sgemm): the arithmetic of
/// attentionTiles over the kept keys. False (nothing written) when the
/// call should run dense: gamma >= 1, fewer than min_tokens keys, all
/// blocks mandatory, or kSparseDenseFraction of the pairs kept.
template <class E, class Kv>
static bool sparseAttention(const typename E::T *q, const Kv &kv,
                            typename E::T *out, int64_t n, int64_t pos,
                            int64_t heads, int64_t kvHeads, int64_t headDim,
                            float scale, const SparseParams &sp) {
  const int64_t T = pos + n, B = sp.block;
  const int64_t keyBlocks = (T + B - 1) / B;
  ++prefillCounters.calls;
  if (!(sp.gamma < 1.0f) || T < sp.minTokens ||
      keyBlocks <= sp.sink + sp.local) {
    ++prefillCounters.denseCalls;
    return false;
  }
  const bool parallel = n * heads * T * headDim > kParallelGrain / 2;
  const int64_t qb0 = pos / B, queryBlocks = (T - 1) / B - qb0 + 1;
  std::vector<std::vector<int32_t>> kept = selectSparseBlocks<E>(
      q, kv, n, pos, heads, kvHeads, headDim, scale, sp, parallel);
  int64_t keptPairs = 0, totalPairs = 0;
  for (int64_t w = 0; w < kvHeads * queryBlocks; ++w) {
    keptPairs += int64_t(kept[size_t(w)].size());
    totalPairs += qb0 + w % queryBlocks + 1;
  }
  // Counted only when the call runs sparse: a call that keeps most pairs
  // runs dense and, like the other fallbacks, only counts as a dense call.
  if (double(keptPairs) >= kSparseDenseFraction * double(totalPairs)) {
    ++prefillCounters.denseCalls;
    return false;
  }
  prefillCounters.kept += keptPairs;
  prefillCounters.seen += totalPairs;
  for (int64_t w = 0; w < kvHeads * queryBlocks; ++w)
    prefillCounters.fileHead(sp.layer, w / queryBlocks,
                             int64_t(kept[size_t(w)].size()),
                             qb0 + w % queryBlocks + 1);
  const int64_t group = heads / kvHeads, qDim = heads * headDim;
  if (sparseAuditOn.load())
    auditCapturedMass<E>(q, kv, kept, n, pos, heads, kvHeads, headDim, scale,
                         sp);
  // Per (query block, KV head): the kept blocks' keys and values gathered
  // once for the group's heads (GQA), whose rows then go through one
  // S = scale Q K^T and one O = P V sgemm of group * tq rows.
  parallelFor(queryBlocks * kvHeads, 1, parallel, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> qg, og;
    for (int64_t w = b; w < e; ++w) {
      const int64_t qb = qb0 + w / kvHeads, g = w % kvHeads;
      const int64_t r0 = std::max(pos, qb * B) - pos;
      const int64_t r1 = std::min(T, (qb + 1) * B) - pos;
      const int64_t tq = r1 - r0, rowsAll = group * tq;
      const std::vector<int32_t> &list =
          kept[size_t(g * queryBlocks + (qb - qb0))];
      // Kept keys in position order; the diagonal block (always kept) last.
      int64_t keys = 0;
      for (int32_t kb : list)
        keys += std::min(B, T - int64_t(kb) * B);
      auto gather = [&](bool isV) {
        float *buf = scratch(0, keys * headDim);
        gatherBlocks(kv, isV, list, B, T, g, headDim, buf);
        return buf;
      };
      // The group's query rows, head-major: [group][tq][headDim].
      qg.resize(size_t(rowsAll * headDim));
      for (int64_t hi = 0; hi < group; ++hi) {
        int64_t qStride;
        const float *qt = queryRows<E>(q, r0, tq, g * group + hi, qDim,
                                       headDim, qStride);
        for (int64_t r = 0; r < tq; ++r)
          std::memcpy(qg.data() + (hi * tq + r) * headDim, qt + r * qStride,
                      sizeof(float) * size_t(headDim));
      }
      float *sc = scratch(3, rowsAll * keys);
      const float *kr = gather(false);
      sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rowsAll), int(keys),
            int(headDim), scale, qg.data(), int(headDim), kr, int(headDim),
            0.0f, sc, int(keys));
      // Row r (position pos + r0 + r) sees the kept keys up to its own
      // position: all but the diagonal block's later rows.
      const int64_t diagonalStart = keys - std::min(B, T - qb * B);
      for (int64_t hi = 0; hi < group; ++hi)
        for (int64_t r = 0; r < tq; ++r) {
          const int64_t p = pos + r0 + r;
          softmaxRow(sc + (hi * tq + r) * keys, 0,
                     diagonalStart + (p - qb * B), keys);
        }
      const float *vr = gather(true);
      og.resize(size_t(rowsAll * headDim));
      sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rowsAll),
            int(headDim), int(keys), 1.0f, sc, int(keys), vr, int(headDim),
            0.0f, og.data(), int(headDim));
      for (int64_t hi = 0; hi < group; ++hi)
        for (int64_t r = 0; r < tq; ++r) {
          auto *dst = out + (r0 + r) * qDim + (g * group + hi) * headDim;
          const float *src = og.data() + (hi * tq + r) * headDim;
          if constexpr (kIsF32<E>)
            std::memcpy(dst, src, sizeof(float) * size_t(headDim));
          else
            E::narrow(src, dst, headDim);
        }
    }
  });
  return true;
}

/// kiln_k_attention_sparse for activations and caches of E.
template <class E>
static void attentionSparse(const typename E::T *q, const typename E::T *k,
                            const typename E::T *v, typename E::T *k_cache,
                            typename E::T *v_cache, typename E::T *out,
                            int64_t n, int64_t pos, int64_t heads,
                            int64_t kv_heads, int64_t head_dim,
                            int64_t max_seq, float scale,
                            const SparseParams &sp) {
  PlainKv<E> kv{k_cache, v_cache, kv_heads * head_dim, head_dim};
  // Parameters the compiler verified; anything else runs dense.
  const bool valid = sp.block >= 1 && sp.sink >= 0 && sp.local >= 1 &&
                     sp.gamma > 0.0f && n >= 1 && heads % kv_heads == 0 &&
                     sp.stride >= 0 && sp.stride <= sp.block;
  const bool audit = sparseAuditOn.load();
  if (valid) {
    kv.append(k, v, n, pos);
    if (sparseAttention<E>(q, kv, out, n, pos, heads, kv_heads, head_dim,
                           scale, sp)) {
      if (audit) {
        // The output error against dense attention on the same inputs
        // (which appends the same rows again).
        std::vector<typename E::T> dense(size_t(n * heads * head_dim));
        attention<E>(q, k, v, kv, dense.data(), n, pos, heads, kv_heads,
                     head_dim, max_seq, scale);
        double errorSq = 0, denseSq = 0;
        for (size_t i = 0; i < dense.size(); ++i) {
          const double d = asDouble<E>(dense[i]), o = asDouble<E>(out[i]);
          errorSq += (o - d) * (o - d);
          denseSq += d * d;
        }
        if (sp.layer >= 0 && sp.layer < kStatLayers) {
          std::lock_guard<std::mutex> lock(sparseAuditMutex);
          sparseAudit[sp.layer].errorSq += errorSq;
          sparseAudit[sp.layer].denseSq += denseSq;
        }
      }
      return;
    }
  }
  attention<E>(q, k, v, kv, out, n, pos, heads, kv_heads, head_dim, max_seq,
               scale);
  if (audit) {
    // Run dense: every pair captures all its mass, no output error.
    double pairs = double(n * heads), denseSq = 0;
    for (int64_t i = 0; i < n * heads * head_dim; ++i)
      denseSq += asDouble<E>(out[i]) * asDouble<E>(out[i]);
    fileCapturedMass(sp.layer, pairs, pairs, 1.0);
    if (sp.layer >= 0 && sp.layer < kStatLayers) {
      std::lock_guard<std::mutex> lock(sparseAuditMutex);
      sparseAudit[sp.layer].denseSq += denseSq;
    }
  }
}

//===----------------------------------------------------------------------===//
// Key summaries and sparse decode (Quest; kernel_abi.h
// kiln_k_attention_sparse_summary / kiln_k_attention_sparse_decode)
//===----------------------------------------------------------------------===//

/// Recomputes the key summaries (element-wise minimum and maximum, f32
/// [pages, kvDim] each) of the pages of B positions that rows [pos, pos +
/// n) touch, from the cache rows [page start, pos + n): a page's rows past
/// pos + n (a rolled-back or reset sequence's) never count.
static void updateKeySummaries(const float *kCache, float *kMin, float *kMax,
                               int64_t pos, int64_t n, int64_t kvDim,
                               int64_t B) {
  for (int64_t page = pos / B; page <= (pos + n - 1) / B; ++page) {
    const int64_t t0 = page * B, t1 = std::min(pos + n, t0 + B);
    float *mn = kMin + page * kvDim, *mx = kMax + page * kvDim;
    std::memcpy(mn, kCache + t0 * kvDim, sizeof(float) * size_t(kvDim));
    std::memcpy(mx, kCache + t0 * kvDim, sizeof(float) * size_t(kvDim));
    for (int64_t t = t0 + 1; t < t1; ++t) {
      const float *row = kCache + t * kvDim;
      for (int64_t c = 0; c < kvDim; ++c) {
        mn[c] = std::min(mn[c], row[c]);
        mx[c] = std::max(mx[c], row[c]);
      }
    }
  }
}

/// Quest decode over the kept pages (kiln_k_attention_sparse_decode):
/// false when the call should run dense.
static bool sparseDecode(const float *q, const PlainKv<F32> &kv,
                         const float *kMin, const float *kMax, float *out,
                         int64_t n, int64_t pos, int64_t heads,
                         int64_t kvHeads, int64_t headDim, float scale,
                         const SparseParams &sp) {
  const int64_t T = pos + n, B = sp.block, pages = (T + B - 1) / B;
  const int64_t group = heads / kvHeads, qDim = heads * headDim;
  const int64_t kvDim = kvHeads * headDim;
  ++decodeCounters.calls;
  if (!(sp.gamma < 1.0f) || T < sp.minTokens || pages <= sp.sink + sp.local) {
    ++decodeCounters.denseCalls;
    return false;
  }
  // Per KV head: each query head's estimated mass per page, from the upper
  // bound of its scores over the page (Quest: sum_d max(q_d min_d, q_d
  // max_d)) plus ln(keys in the page), softmax over pages, mean over rows.
  std::vector<std::vector<int32_t>> kept(static_cast<size_t>(kvHeads));
  std::vector<double> mass, logits, rank;
  std::vector<int32_t> order;
  for (int64_t g = 0; g < kvHeads; ++g) {
    mass.assign(size_t(group * pages), 0.0);
    rank.assign(size_t(pages), -INFINITY);
    SparseParams rule = sp;
    if (sp.isStreaming(g)) {
      rule.gamma = 0.0f;
      rule.minBudget = 0;
    } else {
      logits.resize(size_t(pages));
      for (int64_t hi = 0; hi < group; ++hi) {
        const int64_t h = g * group + hi;
        for (int64_t i = 0; i < n; ++i) {
          const float *qh = q + i * qDim + h * headDim;
          const int64_t p = pos + i;
          double maxLogit = -INFINITY;
          for (int64_t kb = 0; kb < pages; ++kb) {
            const int64_t keys = std::min(B, p + 1 - kb * B);
            if (keys <= 0) {
              logits[size_t(kb)] = -INFINITY;
              continue;
            }
            const float *mn = kMin + kb * kvDim + g * headDim;
            const float *mx = kMax + kb * kvDim + g * headDim;
            // The page's score bound orders it (Quest); its midpoint key
            // (min + max) / 2 estimates its mass (a pooled estimate: the
            // bound's own softmax puts nearly all the mass on the top
            // pages, 89% greedy agreement on SmolLM2 at 4K against 95%;
            // a log-normal spread term from the range gave 93%).
            double bound = 0.0, mid = 0.0;
            for (int64_t d = 0; d < headDim; ++d) {
              const double a = double(qh[d]) * mn[d], b = double(qh[d]) * mx[d];
              bound += std::max(a, b);
              mid += 0.5 * (a + b);
            }
            const double lnKeys = std::log(double(keys));
            rank[size_t(kb)] =
                std::max(rank[size_t(kb)], double(scale) * bound + lnKeys);
            logits[size_t(kb)] = double(scale) * mid + lnKeys;
            maxLogit = std::max(maxLogit, logits[size_t(kb)]);
          }
          addSoftmaxShares(logits, maxLogit, mass.data() + hi * pages);
        }
        for (int64_t kb = 0; kb < pages; ++kb)
          mass[size_t(hi * pages + kb)] /= double(n);
      }
    }
    chooseSparseBlocks(mass, group, pages - 1, T, rule, order,
                       kept[size_t(g)], &rank);
  }
  int64_t keptPages = 0;
  for (const auto &list : kept)
    keptPages += int64_t(list.size());
  if (double(keptPages) >= kSparseDenseFraction * double(pages * kvHeads)) {
    ++decodeCounters.denseCalls;
    return false;
  }
  decodeCounters.kept += keptPages;
  decodeCounters.seen += pages * kvHeads;
  for (int64_t g = 0; g < kvHeads; ++g)
    decodeCounters.fileHead(sp.layer, g, int64_t(kept[size_t(g)].size()),
                            pages);
  // Exact attention over the kept pages' keys, per (row, head): the dense
  // decode's arithmetic (scoreRows, exp, accumulateRows) on fewer keys.
  const int64_t work = n * heads;
  const bool parallel = work > 1 && work * keptPages / kvHeads * B * headDim >
                                        kParallelGrain / 2;
  parallelFor(work, 1, parallel, [&](int64_t w, int64_t) {
    thread_local std::vector<float> att, acc;
    const int64_t i = w / heads, h = w % heads, g = h / group;
    const int64_t last = pos + i;
    const std::vector<int32_t> &list = kept[size_t(g)];
    att.resize(size_t(int64_t(list.size()) * B));
    acc.resize(size_t(headDim));
    const float *qh = q + i * qDim + h * headDim;
    float maxScore = -INFINITY;
    int64_t at = 0;
    for (int32_t kb : list) {
      const int64_t t0 = int64_t(kb) * B;
      const int64_t rows = std::min(B, last + 1 - t0);
      if (rows <= 0)
        continue;
      int64_t stride;
      const float *kr = kv.rows(false, t0, rows, g, stride);
      maxScore = scoreRows(qh, kr, stride, rows, headDim, scale,
                           att.data() + at, maxScore);
      at += rows;
    }
    double sum = 0.0;
    for (int64_t t = 0; t < at; ++t) {
      const float e = expf(att[size_t(t)] - maxScore);
      att[size_t(t)] = e;
      sum += e;
    }
    const float inv = float(1.0 / sum);
    std::fill(acc.begin(), acc.end(), 0.0f);
    at = 0;
    for (int32_t kb : list) {
      const int64_t t0 = int64_t(kb) * B;
      const int64_t rows = std::min(B, last + 1 - t0);
      if (rows <= 0)
        continue;
      int64_t stride;
      const float *vr = kv.rows(true, t0, rows, g, stride);
      accumulateRows(att.data() + at, inv, vr, stride, rows, headDim,
                     acc.data());
      at += rows;
    }
    std::memcpy(out + i * qDim + h * headDim, acc.data(),
                sizeof(float) * size_t(headDim));
  });
  return true;
}

} // namespace kiln::rt::cpu

using namespace kiln::rt::cpu;

// The kernel ABI must stay exported from libkiln_runtime.so.
extern "C" {

void kiln_k_paged_attention_batch(const kiln_paged_kv *kv,
                                  const kiln_batch *batch, int32_t act,
                                  const void *q, const void *k, const void *v,
                                  void *out, int64_t heads, int64_t kv_heads,
                                  int64_t head_dim, float scale,
                                  int64_t window) {
  // One sequence after the other, each parallel inside: a sequence's rows
  // are computed exactly as when it runs alone (batch invariance).
  const size_t act_bytes = act == KILN_ELEM_F32 ? 4 : 2;
  const int64_t qDim = heads * head_dim, kvDim = kv_heads * head_dim;
  for (int32_t s = 0; s < batch->num_seqs; ++s) {
    kiln_paged_kv one = *kv;
    one.block_table = batch->block_tables + int64_t(s) * batch->max_blocks;
    const int64_t r0 = batch->row_start[s], n = batch->row_count[s];
    auto at = [&](const void *p, int64_t dim) {
      return static_cast<const uint8_t *>(p) + size_t(r0 * dim) * act_bytes;
    };
    kiln_k_paged_attention(&one, act, at(q, qDim), at(k, kvDim), at(v, kvDim),
                           static_cast<uint8_t *>(out) +
                               size_t(r0 * qDim) * act_bytes,
                           n, batch->pos[s], heads, kv_heads, head_dim, scale,
                           window);
  }
}

void kiln_k_paged_attention(const kiln_paged_kv *kv, int32_t act,
                            const void *q, const void *k, const void *v,
                            void *out, int64_t n, int64_t pos, int64_t heads,
                            int64_t kv_heads, int64_t head_dim, float scale,
                            int64_t window) {
  if (n <= 0)
    return;
  switch (act) {
  case KILN_ELEM_F16:
    pagedAttention<F16>(*kv, q, k, v, out, n, pos, heads, kv_heads, head_dim,
                        scale, window);
    return;
  case KILN_ELEM_BF16:
    pagedAttention<Bf16>(*kv, q, k, v, out, n, pos, heads, kv_heads,
                         head_dim, scale, window);
    return;
  default:
    pagedAttention<F32>(*kv, q, k, v, out, n, pos, heads, kv_heads, head_dim,
                        scale, window);
    return;
  }
}

void kiln_k_attention(const float *q, const float *k, const float *v,
                      float *k_cache, float *v_cache, float *out, int64_t n,
                      int64_t pos, int64_t heads, int64_t kv_heads,
                      int64_t head_dim, int64_t max_seq, float scale) {
  attention<F32>(q, k, v, k_cache, v_cache, out, n, pos, heads, kv_heads,
                 head_dim, max_seq, scale);
}

void kiln_k_attention_window(const float *q, const float *k, const float *v,
                             float *k_cache, float *v_cache, float *out,
                             int64_t n, int64_t pos, int64_t heads,
                             int64_t kv_heads, int64_t head_dim,
                             int64_t max_seq, float scale, int64_t window) {
  attention<F32>(q, k, v, k_cache, v_cache, out, n, pos, heads, kv_heads,
                 head_dim, max_seq, scale, window);
}


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

// f16 and bf16: the same kernels over 16-bit elements (kernel_abi.h).
#define KILN_DEFINE_16BIT_ATTENTION(sfx, E, T)                                 \
  void kiln_k_attention_##sfx(                                                 \
      const T *q, const T *k, const T *v, T *k_cache, T *v_cache, T *out,      \
      int64_t n, int64_t pos, int64_t heads, int64_t kv_heads,                 \
      int64_t head_dim, int64_t max_seq, float scale) {                        \
    attention<E>(q, k, v, k_cache, v_cache, out, n, pos, heads, kv_heads,      \
                 head_dim, max_seq, scale);                                    \
  }                                                                            \
  void kiln_k_attention_window_##sfx(                                          \
      const T *q, const T *k, const T *v, T *k_cache, T *v_cache, T *out,      \
      int64_t n, int64_t pos, int64_t heads, int64_t kv_heads,                 \
      int64_t head_dim, int64_t max_seq, float scale, int64_t window) {        \
    attention<E>(q, k, v, k_cache, v_cache, out, n, pos, heads, kv_heads,      \
                 head_dim, max_seq, scale, window);                            \
  }
KILN_DEFINE_16BIT_ATTENTION(f16, F16, kiln_f16_t)
KILN_DEFINE_16BIT_ATTENTION(bf16, Bf16, kiln_bf16_t)
#undef KILN_DEFINE_16BIT_ATTENTION

// Dynamic block-sparse prefill attention (kernel_abi.h).
#define KILN_SPARSE_PARAMS                                                     \
  SparseParams{gamma,      block,      sink,       local,                   \
               min_budget, max_budget, min_tokens, layer,                   \
               uint64_t(streaming), stride}
void kiln_k_attention_sparse(const float *q, const float *k, const float *v,
                             float *k_cache, float *v_cache, float *out,
                             int64_t n, int64_t pos, int64_t heads,
                             int64_t kv_heads, int64_t head_dim,
                             int64_t max_seq, float scale, float gamma,
                             int64_t block, int64_t sink, int64_t local,
                             int64_t min_budget, int64_t max_budget,
                             int64_t min_tokens, int64_t layer,
                             int64_t streaming, int64_t stride) {
  attentionSparse<F32>(q, k, v, k_cache, v_cache, out, n, pos, heads,
                       kv_heads, head_dim, max_seq, scale, KILN_SPARSE_PARAMS);
}

void kiln_k_attention_sparse_f16(
    const kiln_f16_t *q, const kiln_f16_t *k, const kiln_f16_t *v,
    kiln_f16_t *k_cache, kiln_f16_t *v_cache, kiln_f16_t *out, int64_t n,
    int64_t pos, int64_t heads, int64_t kv_heads, int64_t head_dim,
    int64_t max_seq, float scale, float gamma, int64_t block, int64_t sink,
    int64_t local, int64_t min_budget, int64_t max_budget,
    int64_t min_tokens, int64_t layer, int64_t streaming, int64_t stride) {
  attentionSparse<F16>(q, k, v, k_cache, v_cache, out, n, pos, heads,
                       kv_heads, head_dim, max_seq, scale, KILN_SPARSE_PARAMS);
}

void kiln_k_attention_sparse_bf16(
    const kiln_bf16_t *q, const kiln_bf16_t *k, const kiln_bf16_t *v,
    kiln_bf16_t *k_cache, kiln_bf16_t *v_cache, kiln_bf16_t *out, int64_t n,
    int64_t pos, int64_t heads, int64_t kv_heads, int64_t head_dim,
    int64_t max_seq, float scale, float gamma, int64_t block, int64_t sink,
    int64_t local, int64_t min_budget, int64_t max_budget,
    int64_t min_tokens, int64_t layer, int64_t streaming, int64_t stride) {
  attentionSparse<Bf16>(q, k, v, k_cache, v_cache, out, n, pos, heads,
                        kv_heads, head_dim, max_seq, scale, KILN_SPARSE_PARAMS);
}
void kiln_k_attention_sparse_summary(
    const float *q, const float *k, const float *v, float *k_cache,
    float *v_cache, float *k_min, float *k_max, float *out, int64_t n,
    int64_t pos, int64_t heads, int64_t kv_heads, int64_t head_dim,
    int64_t max_seq, float scale, float gamma, int64_t block, int64_t sink,
    int64_t local, int64_t min_budget, int64_t max_budget,
    int64_t min_tokens, int64_t layer, int64_t streaming, int64_t stride) {
  attentionSparse<F32>(q, k, v, k_cache, v_cache, out, n, pos, heads,
                       kv_heads, head_dim, max_seq, scale, KILN_SPARSE_PARAMS);
  if (n >= 1 && block >= 1)
    updateKeySummaries(k_cache, k_min, k_max, pos, n, kv_heads * head_dim,
                       block);
}

void kiln_k_attention_sparse_decode(
    const float *q, const float *k, const float *v, float *k_cache,
    float *v_cache, float *k_min, float *k_max, float *out, int64_t n,
    int64_t pos, int64_t heads, int64_t kv_heads, int64_t head_dim,
    int64_t max_seq, float scale, float gamma, int64_t block, int64_t sink,
    int64_t local, int64_t min_budget, int64_t max_budget,
    int64_t min_tokens, int64_t layer, int64_t streaming, int64_t stride) {
  const SparseParams sp = KILN_SPARSE_PARAMS;
  PlainKv<F32> kv{k_cache, v_cache, kv_heads * head_dim, head_dim};
  const bool valid = block >= 1 && sink >= 0 && local >= 1 && gamma > 0.0f &&
                     n >= 1 && heads % kv_heads == 0;
  if (!valid) {
    attention<F32>(q, k, v, kv, out, n, pos, heads, kv_heads, head_dim,
                   max_seq, scale);
    return;
  }
  kv.append(k, v, n, pos);
  updateKeySummaries(k_cache, k_min, k_max, pos, n, kv_heads * head_dim,
                     block);
  if (!sparseDecode(q, kv, k_min, k_max, out, n, pos, heads, kv_heads,
                    head_dim, scale, sp))
    attention<F32>(q, k, v, kv, out, n, pos, heads, kv_heads, head_dim,
                   max_seq, scale);
}

void kiln_k_paged_attention_sparse(
    const kiln_paged_kv *kv, int32_t act, const void *q, const void *k,
    const void *v, void *out, int64_t n, int64_t pos, int64_t heads,
    int64_t kv_heads, int64_t head_dim, float scale, float gamma,
    int64_t block, int64_t sink, int64_t local, int64_t min_budget,
    int64_t max_budget, int64_t min_tokens, int64_t layer, int64_t streaming,
    int64_t stride) {
  if (n <= 0)
    return;
  const SparseParams sp = KILN_SPARSE_PARAMS;
  const bool valid = kv->format == KILN_KV_PLAIN && block >= 1 && sink >= 0 &&
                     local >= 1 && gamma > 0.0f && heads % kv_heads == 0 &&
                     stride >= 0 && stride <= block;
  auto run = [&](auto e) -> bool {
    using E = decltype(e);
    using T = typename E::T;
    PlainKv<E, PagedSlots> pkv{
        static_cast<T *>(kv->k_pool), static_cast<T *>(kv->v_pool),
        kv_heads * head_dim, head_dim,
        PagedSlots{kv->block_table, std::max<int64_t>(1, kv->block_tokens)}};
    pkv.append(static_cast<const T *>(k), static_cast<const T *>(v), n, pos);
    return sparseAttention<E>(static_cast<const T *>(q), pkv,
                              static_cast<T *>(out), n, pos, heads, kv_heads,
                              head_dim, scale, sp);
  };
  bool done = false;
  if (valid)
    done = act == KILN_ELEM_F16    ? run(F16())
           : act == KILN_ELEM_BF16 ? run(Bf16())
                                   : run(F32());
  if (!done)
    kiln_k_paged_attention(kv, act, q, k, v, out, n, pos, heads, kv_heads,
                           head_dim, scale, /*window=*/0);
}
#undef KILN_SPARSE_PARAMS

void kiln_rt_sparse_decode_stats(int64_t out[4], int reset) {
  decodeCounters.read(out, reset);
}

void kiln_rt_sparse_decode_head_stats(int64_t layer, int64_t kv_head,
                                      int64_t out[2]) {
  decodeCounters.readHead(layer, kv_head, out);
}

void kiln_rt_sparse_attention_stats(int64_t out[4], int reset) {
  prefillCounters.read(out, reset);
}

void kiln_rt_sparse_attention_audit(int enable) {
  std::lock_guard<std::mutex> lock(sparseAuditMutex);
  if (enable)
    for (SparseAudit &a : sparseAudit)
      a = SparseAudit();
  sparseAuditOn = enable != 0;
}

void kiln_rt_sparse_attention_layer_audit(int64_t layer, double out[4]) {
  out[0] = out[1] = out[2] = out[3] = 0.0;
  if (layer < 0 || layer >= kStatLayers)
    return;
  std::lock_guard<std::mutex> lock(sparseAuditMutex);
  const SparseAudit &a = sparseAudit[layer];
  if (a.pairs <= 0)
    return;
  out[0] = a.pairs;
  out[1] = a.captured / a.pairs;
  out[2] = a.minCaptured;
  out[3] = a.denseSq > 0 ? std::sqrt(a.errorSq / a.denseSq) : 0.0;
}

void kiln_rt_sparse_attention_head_stats(int64_t layer, int64_t kv_head,
                                         int64_t out[2]) {
  prefillCounters.readHead(layer, kv_head, out);
}

} // extern "C"

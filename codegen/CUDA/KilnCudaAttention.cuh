//===- KilnCudaAttention.cuh - Attention over the KV caches ----*- CUDA -*-===//
//
// Causal attention with the KV-cache append: plain, INT8 and FP8 E4M3
// caches (per-(token, kv head) scales) and the centered variants; prefill
// and flash-decoding split over the KV sequence. Part of KilnKernels.cuh.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CODEGEN_CUDA_KILNCUDAATTENTION_CUH
#define KILN_CODEGEN_CUDA_KILNCUDAATTENTION_CUH

#include "KilnCudaPointwise.cuh"

/// The head-dimension buckets (HDM = 32, 64, 128, 256: bits 0..3) whose
/// attention kernels attentionDispatch instantiates, and the KV formats
/// (bit KILN_CUDA_KV_*) of the batched step's paged pools whose kernels
/// kiln_cuda_step_attention instantiates. An emitted model.cu defines both
/// from its plan's constant head_dim / format operands before including
/// KilnKernels.cuh, so nvcc compiles the attention kernels the model calls
/// and not every (bucket, format) pair (about 4/5 of the device code of a
/// small model before, and most of its nvcc time). A call outside the
/// compiled set fails with cudaErrorInvalidValue naming the bucket or
/// format. Default: all of them.
#ifndef KILN_CUDA_ATTN_HDM_MASK
#define KILN_CUDA_ATTN_HDM_MASK 15
#endif
#ifndef KILN_CUDA_STEP_KV_FORMAT_MASK
#define KILN_CUDA_STEP_KV_FORMAT_MASK 7
#endif

namespace kiln_cuda_detail {

// Attention
//===----------------------------------------------------------------------===//

/// Where position `row` of a sequence lives in a cache: the contiguous
/// caches of a session store it at row `row`; the paged caches of the
/// serving engine (kernel_abi.h kiln_paged_kv, PagedAttention, Kwon et al.
/// 2023) at row table[row / B] * B + row % B of the pool, B positions per
/// block, `table` the sequence's block table (device int32).
struct RowsContiguous {
  __device__ __forceinline__ int64_t operator()(int64_t row) const {
    return row;
  }
};
struct RowsPaged {
  const int32_t *__restrict__ table;
  int blockTokens;
  __device__ __forceinline__ int64_t operator()(int64_t row) const {
    return int64_t(table[row / blockTokens]) * blockTokens + row % blockTokens;
  }
};

/// Stores k, v ([n, kvDim]) at positions [p, p + n) of the caches (rows
/// slot(position) of [.., kvDim]), p = *dPos; positions >= maxSeq are
/// dropped. k may already be the cache slot (identity copy); partially
/// overlapping buffers are not supported.
template <typename T, typename Rows>
__global__ void __launch_bounds__(256)
    kvAppendKernel(const T *k, const T *v, T *kCache, T *vCache, int64_t n,
                   int64_t kvDim, int64_t maxSeq,
                   const int64_t *__restrict__ dPos, Rows slot) {
  const int64_t p = *dPos;
  const int64_t total = n * kvDim;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = p + e / kvDim;
    if (row < 0 || row >= maxSeq)
      continue;
    const int64_t off = slot(row) * kvDim + e % kvDim;
    kCache[off] = k[e];
    vCache[off] = v[e];
  }
}

/// kvAppendKernel over contiguous caches at ctx->d_pos, launched on the
/// context's stream; false (error recorded) when the launch failed.
template <typename T>
inline bool appendContiguous(kiln_cuda_ctx *ctx, const T *k, const T *v,
                             T *kCache, T *vCache, int64_t n, int64_t kvDim,
                             int64_t maxSeq) {
  kvAppendKernel<T, RowsContiguous>
      <<<gridFor(ctx, n * kvDim, 256), 256, 0, streamOf(ctx)>>>(
          k, v, kCache, vCache, n, kvDim, maxSeq, ctx->d_pos,
          RowsContiguous());
  return KILN_CUDA_LAUNCHED(ctx, "kvAppendKernel<<<>>>");
}

/// How the attention kernels read the KV cache: element `off` of the K / V
/// cache (row `row`, kv head `kvh`) is kScale(row, kvh) * kAt(off) (V alike),
/// plus m_t[kvh, d] for the keys of a trait with kCentered (KvCentered).
/// KvPlain: a T cache, scale 1 (x * 1.0f == x, folded away).
template <typename T> struct KvPlain {
  static constexpr bool kCentered = false;
  const T *__restrict__ k;
  const T *__restrict__ v;
  __device__ __forceinline__ float kScale(int64_t, int) const { return 1.0f; }
  __device__ __forceinline__ float vScale(int64_t, int) const { return 1.0f; }
  __device__ __forceinline__ float kAt(int64_t off) const { return toF(k[off]); }
  __device__ __forceinline__ float vAt(int64_t off) const { return toF(v[off]); }
};
/// KvInt8: int8 caches with float scales [max_seq][kv_heads] (kv=int8).
struct KvInt8 {
  static constexpr bool kCentered = false;
  const int8_t *__restrict__ k;
  const int8_t *__restrict__ v;
  const float *__restrict__ ks;
  const float *__restrict__ vs;
  int kvHeads;
  __device__ __forceinline__ float kScale(int64_t row, int kvh) const {
    return ks[row * kvHeads + kvh];
  }
  __device__ __forceinline__ float vScale(int64_t row, int kvh) const {
    return vs[row * kvHeads + kvh];
  }
  __device__ __forceinline__ float kAt(int64_t off) const {
    return float(k[off]);
  }
  __device__ __forceinline__ float vAt(int64_t off) const {
    return float(v[off]);
  }
};

/// Rotated calibrated key mean of one channel d of kv head h along positions
/// (kernel_abi.h, centered keys): m_t[h, d] = float(a c + b s + 0) with
/// (c, s) = (cos, sin)(t w_i), (a, b) = (mu[2i], -mu[2i+1]) for d = 2i and
/// (mu[2i+1], mu[2i]) for d = 2i + 1 (i < rotDim / 2, w_i = theta^(-2i /
/// headDim), all double), (a, b) = (mu[d], 0) and w = 0 beyond (+ 0 turns -0
/// into +0: a zero mean leaves keys bit for bit). seek(t) evaluates cos / sin
/// exactly, next() moves to t + 1 by complex multiplication with e^(i w)
/// (the brief's anchored recurrence: a few dozen steps stay within 1e-14).
struct KeyMeanChannel {
  double a, b, w, cw, sw, c, s;
  __device__ void init(const float *__restrict__ mu, int h, int d, int headDim,
                       int rotDim, float theta) {
    const float *mh = mu + int64_t(h) * headDim;
    const int i = d / 2;
    if (i < rotDim / 2) {
      const double m0 = mh[2 * i], m1 = mh[2 * i + 1];
      a = d % 2 == 0 ? m0 : m1;
      b = d % 2 == 0 ? -m1 : m0;
      w = pow(double(theta), -double(2 * i) / double(headDim));
      sincos(w, &sw, &cw);
    } else {
      a = mh[d];
      b = 0.0;
      w = 0.0;
      cw = 1.0;
      sw = 0.0;
    }
    c = 1.0;
    s = 0.0;
  }
  __device__ __forceinline__ void seek(int64_t t) {
    sincos(double(t) * w, &s, &c);
  }
  __device__ __forceinline__ float value() const {
    return float(a * c + b * s + 0.0);
  }
  __device__ __forceinline__ void next() {
    const double c1 = c * cw - s * sw;
    s = c * sw + s * cw;
    c = c1;
  }
};

/// Most head dims one lane covers in the append kernels (head_dim <= 256).
constexpr int kAppendLaneDims = KILN_CUDA_ATTN_MAX_HEAD_DIM / 32;

/// m_t[h, d] of row `row` for the lane's dims d = lane + 32 j (kernel_abi.h,
/// centered keys; 0 where d >= headDim), or all 0 when mu is null: the
/// append kernels quantize x - m[j] (x - 0 == x, also for -0).
__device__ __forceinline__ void
keyMeanLanes(float (&m)[kAppendLaneDims], const float *__restrict__ mu, int h,
             int headDim, int rotDim, float theta, int64_t row, int lane) {
#pragma unroll
  for (int j = 0; j < kAppendLaneDims; ++j) {
    const int d = lane + 32 * j;
    m[j] = 0.0f;
    if (mu != nullptr && d < headDim) {
      KeyMeanChannel ch;
      ch.init(mu, h, d, headDim, rotDim, theta);
      ch.seek(row);
      m[j] = ch.value();
    }
  }
}

/// KvCentered<KvInt8 | KvFp8>: an 8-bit cache whose keys hold k - m_t
/// (kernel_abi.h, kiln_k_attention_kv8_centered): the attention kernels read
/// keys as kScale * kAt + m_t, m_t from KeyMeanChannel with kMean (a device
/// pointer, float [kv_heads * head_dim]), rotDim and theta.
template <typename Kv> struct KvCentered : Kv {
  static constexpr bool kCentered = true;
  const float *__restrict__ kMean;
  int rotDim;
  float theta;
};

/// KvPaged<KvPlain | KvInt8 | KvFp8>: the same cache read through a block
/// table (RowsPaged): the kernels address position `row` and element
/// off = row * kvDim + rest as if contiguous; reads go to pool row
/// slot(row). Key means (KvCentered<KvPaged<..>>) follow the position.
template <typename Kv> struct KvPaged : Kv {
  RowsPaged slot;
  int64_t kvDim;
  __device__ __forceinline__ int64_t at(int64_t off) const {
    return slot(off / kvDim) * kvDim + off % kvDim;
  }
  __device__ __forceinline__ float kScale(int64_t row, int kvh) const {
    return Kv::kScale(slot(row), kvh);
  }
  __device__ __forceinline__ float vScale(int64_t row, int kvh) const {
    return Kv::vScale(slot(row), kvh);
  }
  __device__ __forceinline__ float kAt(int64_t off) const {
    return Kv::kAt(at(off));
  }
  __device__ __forceinline__ float vAt(int64_t off) const {
    return Kv::vAt(at(off));
  }
};

/// INT8 KV append (kernel_abi.h, kiln_k_attention_kv8): one warp per (new
/// token i, kv head h, K or V). amax = max_d |x[d]| by warp reduction, scale =
/// amax / 127, q = clamp(roundf(x / scale), -127, 127) (0 when scale == 0),
/// with correctly rounded divisions (__fdiv_rn: same bits as the CPU even
/// under --use_fast_math). Rows p + i >= maxSeq are dropped. With kMean (the
/// centered caches) keys are quantized as x - m_t (keyMeanLanes).
template <typename T, typename Rows>
__global__ void __launch_bounds__(256)
    kvAppendInt8Kernel(const T *__restrict__ k, const T *__restrict__ v,
                       int8_t *__restrict__ kCache, int8_t *__restrict__ vCache,
                       float *__restrict__ kScales, float *__restrict__ vScales,
                       int64_t n, int kvHeads, int headDim, int64_t maxSeq,
                       const int64_t *__restrict__ dPos,
                       const float *__restrict__ kMean, int rotDim,
                       float theta, Rows slot) {
  const int64_t p = *dPos;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  const int64_t total = 2 * n * kvHeads;
  const int64_t kvDim = int64_t(kvHeads) * headDim;
  for (int64_t w = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
       w < total; w += warps) {
    const bool isV = w & 1;
    const int64_t ih = w >> 1, i = ih / kvHeads;
    const int h = int(ih % kvHeads);
    const int64_t row = p + i;
    if (row < 0 || row >= maxSeq)
      continue; // uniform over the warp
    const T *x = (isV ? v : k) + i * kvDim + int64_t(h) * headDim;
    float m[kAppendLaneDims];
    keyMeanLanes(m, isV ? nullptr : kMean, h, headDim, rotDim, theta, row,
                 lane);
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kAppendLaneDims; ++j)
      if (lane + 32 * j < headDim)
        amax = fmaxf(amax, fabsf(toF(x[lane + 32 * j]) - m[j]));
    amax = warpMax(amax);
    const float sc = __fdiv_rn(amax, 127.0f);
    const int64_t at = slot(row);
    int8_t *qd = (isV ? vCache : kCache) + at * kvDim + int64_t(h) * headDim;
#pragma unroll
    for (int j = 0; j < kAppendLaneDims; ++j) {
      const int d = lane + 32 * j;
      if (d >= headDim)
        break;
      float r = sc == 0.0f ? 0.0f : roundf(__fdiv_rn(toF(x[d]) - m[j], sc));
      r = fminf(127.0f, fmaxf(-127.0f, r));
      qd[d] = int8_t(r);
    }
    if (lane == 0)
      (isV ? vScales : kScales)[at * kvHeads + h] = sc;
  }
}

/// FP8 E4M3 (OCP 8-bit floating point spec v1.0, "E4M3": 1 sign, 4
/// exponent bits with bias 7, 3 mantissa bits, no infinities, S.1111.111 =
/// NaN, max normal 448) byte as float: exact (through __half, which holds
/// every E4M3 value). Hardware cvt on sm_89+, bit manipulation on sm_80.
__device__ __forceinline__ float e4m3ToF(uint8_t b) {
  return __half2float(__half(
      __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(b), __NV_E4M3)));
}

/// float to FP8 E4M3, round to nearest even, saturating finite values to
/// +-448 (__NV_SATFINITE; NaN stays NaN, 0x7F).
__device__ __forceinline__ uint8_t fToE4m3(float v) {
  return uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

/// KvFp8: FP8 E4M3 caches (bytes) with float scales [max_seq][kv_heads]
/// (kv=fp8).
struct KvFp8 {
  static constexpr bool kCentered = false;
  const uint8_t *__restrict__ k;
  const uint8_t *__restrict__ v;
  const float *__restrict__ ks;
  const float *__restrict__ vs;
  int kvHeads;
  __device__ __forceinline__ float kScale(int64_t row, int kvh) const {
    return ks[row * kvHeads + kvh];
  }
  __device__ __forceinline__ float vScale(int64_t row, int kvh) const {
    return vs[row * kvHeads + kvh];
  }
  __device__ __forceinline__ float kAt(int64_t off) const {
    return e4m3ToF(k[off]);
  }
  __device__ __forceinline__ float vAt(int64_t off) const {
    return e4m3ToF(v[off]);
  }
};

/// FP8 KV append (kernel_abi.h, kiln_k_attention_kvf8): one warp per (new
/// token i, kv head h, K or V). amax = max_d |x[d]| by warp reduction, scale
/// = amax / 448 (E4M3's largest finite value), code = e4m3(x / scale) with
/// round to nearest even and saturation to +-448 (0 when scale == 0);
/// correctly rounded divisions (__fdiv_rn), as the CPU. Rows p + i >= maxSeq
/// are dropped. With kMean (the centered caches) keys are quantized as
/// x - m_t (keyMeanLanes).
template <typename T, typename Rows>
__global__ void __launch_bounds__(256)
    kvAppendFp8Kernel(const T *__restrict__ k, const T *__restrict__ v,
                      uint8_t *__restrict__ kCache,
                      uint8_t *__restrict__ vCache, float *__restrict__ kScales,
                      float *__restrict__ vScales, int64_t n, int kvHeads,
                      int headDim, int64_t maxSeq,
                      const int64_t *__restrict__ dPos,
                      const float *__restrict__ kMean, int rotDim,
                      float theta, Rows slot) {
  const int64_t p = *dPos;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  const int64_t total = 2 * n * kvHeads;
  const int64_t kvDim = int64_t(kvHeads) * headDim;
  for (int64_t w = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
       w < total; w += warps) {
    const bool isV = w & 1;
    const int64_t ih = w >> 1, i = ih / kvHeads;
    const int h = int(ih % kvHeads);
    const int64_t row = p + i;
    if (row < 0 || row >= maxSeq)
      continue; // uniform over the warp
    const T *x = (isV ? v : k) + i * kvDim + int64_t(h) * headDim;
    float m[kAppendLaneDims];
    keyMeanLanes(m, isV ? nullptr : kMean, h, headDim, rotDim, theta, row,
                 lane);
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kAppendLaneDims; ++j)
      if (lane + 32 * j < headDim)
        amax = fmaxf(amax, fabsf(toF(x[lane + 32 * j]) - m[j]));
    amax = warpMax(amax);
    const float sc = __fdiv_rn(amax, 448.0f);
    const int64_t at = slot(row);
    uint8_t *qd = (isV ? vCache : kCache) + at * kvDim + int64_t(h) * headDim;
#pragma unroll
    for (int j = 0; j < kAppendLaneDims; ++j) {
      const int d = lane + 32 * j;
      if (d >= headDim)
        break;
      qd[d] =
          sc == 0.0f ? uint8_t(0) : fToE4m3(__fdiv_rn(toF(x[d]) - m[j], sc));
    }
    if (lane == 0)
      (isV ? vScales : kScales)[at * kvHeads + h] = sc;
  }
}

/// The kept key blocks of a dynamic block-sparse attention call
/// (KilnCudaSparse.cuh; kernel_abi.h kiln_k_attention_sparse): bit kb of
/// bits[(g * rows + r) * words + kb / 32] is set when KV head g's query
/// block row r keeps key block kb (positions [kb * block, (kb + 1) *
/// block)). Prefill (perQueryBlock): r = qb - p / block for the query
/// block qb of the row's position; Quest decode: one list per KV head (r =
/// 0) for every row. state[0] counts the kept (KV head, query block, key
/// block) triples, state[1] is nonzero when the selection fell back to
/// dense (too few tokens, every block mandatory). A null `bits` is dense
/// attention.
struct SparseMask {
  const uint32_t *bits = nullptr;
  const unsigned long long *state = nullptr;
  int64_t block = 0;
  int words = 0, rows = 0, kvHeads = 0;
  bool perQueryBlock = true;

  /// Whether the kernels apply the mask for a call at position p with n
  /// rows: not when the selection fell back to dense or kept 90% of the
  /// causal pairs (the CPU kernels' kSparseDenseFraction), which then runs
  /// the dense arithmetic exactly.
  __device__ bool active(int64_t p, int64_t n) const {
    if (bits == nullptr || state[1] != 0)
      return false;
    const int64_t last = (p + n - 1) / block;
    double pairs;
    if (perQueryBlock) {
      const double a = double(p / block), b = double(last + 1);
      pairs = (b * (b + 1.0) - a * (a + 1.0)) / 2.0;
    } else {
      pairs = double(last + 1);
    }
    return double(state[0]) < 0.9 * pairs * double(kvHeads);
  }
  /// Whether the row at position `row` (call start p) of KV head g keeps
  /// key `key`.
  __device__ __forceinline__ bool keeps(int g, int64_t p, int64_t row,
                                        int64_t key) const {
    const int64_t r = perQueryBlock ? row / block - p / block : 0;
    const int64_t kb = key / block;
    return (bits[(int64_t(g) * rows + r) * words + kb / 32] >> (kb % 32)) & 1u;
  }
  /// Whether some row in [rowFirst, rowLast] keeps a key in [k0, k1].
  __device__ bool keepsAny(int g, int64_t p, int64_t rowFirst, int64_t rowLast,
                           int64_t k0, int64_t k1) const {
    for (int64_t qb = rowFirst / block; qb <= rowLast / block; ++qb)
      for (int64_t kb = k0 / block; kb <= k1 / block; ++kb)
        if (keeps(g, p, qb * block < rowFirst ? rowFirst : qb * block,
                  kb * block))
          return true;
    return false;
  }
};

constexpr int kAttnWarps = 4;
constexpr int kAttnThreads = kAttnWarps * 32;
constexpr int kPrefillRowsPerWarp = 4;
constexpr int kPrefillBr = kAttnWarps * kPrefillRowsPerWarp; // query rows
constexpr int kPrefillBc = 32;                               // keys per tile

/// Dynamic shared memory of attnPrefillKernel: Q [Br][hd], K [Bc][hd + 1]
/// (padded: lane j reads row j, conflict-free), V [Bc][hd], all float.
inline size_t prefillSmemBytes(int headDim) {
  return sizeof(float) *
         size_t(kPrefillBr * headDim + kPrefillBc * (headDim + 1) +
                kPrefillBc * headDim);
}

/// Prefill attention, FlashAttention-2 (Dao 2023, Algorithm 1) on CUDA cores:
/// block = (tile of kPrefillBr query rows, query head h); it streams K/V tiles
/// of kPrefillBc cached keys through shared memory and keeps, per query row,
/// the running max m, running sum l and an unnormalised float accumulator:
///   m' = max(m, max_j s_j),  l' = l e^(m - m') + sum_j e^(s_j - m'),
///   acc' = acc e^(m - m') + sum_j e^(s_j - m') v_j,   out = acc / l.
/// Warp w owns rows w*R .. w*R + R - 1 (R = kPrefillRowsPerWarp). Scores: lane
/// j computes q_r . k_j for key j of the tile; P*V: lane owns dims lane + 32 t.
/// Causal: row i (absolute position p + i) sees keys [0, p + i]. HDM is
/// head_dim rounded up to a multiple of 32 (register accumulators).
/// kSparse: keys of blocks the row's query block does not keep (`sparse`)
/// score -inf, and tiles no row of the block keeps are skipped.
template <typename T, int HDM, typename Kv, bool kSparse>
__global__ void __launch_bounds__(kAttnThreads)
    attnPrefillKernel(const T *__restrict__ q, const Kv cache,
                      T *__restrict__ out,
                      int64_t n, int heads, int group, int headDim,
                      int64_t maxSeq, float scale,
                      const int64_t *__restrict__ dPos, int64_t window,
                      SparseMask sparse) {
  constexpr int kR = kPrefillRowsPerWarp, kT = HDM / 32;
  extern __shared__ float smem[];
  const int hd = headDim;
  float *sQ = smem;                       // [Br][hd]
  float *sK = sQ + kPrefillBr * hd;       // [Bc][hd + 1]
  float *sV = sK + kPrefillBc * (hd + 1); // [Bc][hd]

  const int64_t p = *dPos;
  const int h = blockIdx.y, kvh = h / group;
  const int64_t i0 = int64_t(blockIdx.x) * kPrefillBr;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t qDim = int64_t(heads) * hd;
  const int64_t kvDim = int64_t(heads / group) * hd;

  for (int e = threadIdx.x; e < kPrefillBr * hd; e += blockDim.x) {
    const int r = e / hd, d = e % hd;
    const int64_t qi = i0 + r;
    sQ[e] = qi < n ? toF(q[qi * qDim + int64_t(h) * hd + d]) : 0.0f;
  }
  const int64_t rows = n - i0 < kPrefillBr ? n - i0 : kPrefillBr;
  int64_t kEnd = p + i0 + rows; // keys [0, kEnd) cover every row of the tile
  if (kEnd > maxSeq)
    kEnd = maxSeq;

  float m[kR], l[kR], acc[kR][kT];
  int64_t last[kR]; // last visible key of the row, -1 for padding rows
  int64_t first[kR]; // first visible key (sliding window; else 0)
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int t = 0; t < kT; ++t)
      acc[r][t] = 0.0f;
    const int64_t qi = i0 + warp * kR + r;
    last[r] = qi < n ? p + qi : -1;
    first[r] = window > 0 && p + qi - window + 1 > 0 ? p + qi - window + 1 : 0;
  }
  // Sliding window: no row of the tile sees keys before its first row's.
  const int64_t kStart =
      window > 0 && p + i0 - window + 1 > 0 ? p + i0 - window + 1 : 0;
  [[maybe_unused]] bool masked = false;
  if constexpr (kSparse)
    masked = sparse.active(p, n);

  // Centered keys: thread owns channels d = threadIdx.x + kAttnThreads c and
  // walks each tile's kPrefillBc keys with the m_t recurrence.
  constexpr int kCh =
      Kv::kCentered ? (HDM + kAttnThreads - 1) / kAttnThreads : 1;
  [[maybe_unused]] KeyMeanChannel km[kCh];
  if constexpr (Kv::kCentered) {
#pragma unroll
    for (int c = 0; c < kCh; ++c) {
      const int d = threadIdx.x + kAttnThreads * c;
      if (d < hd)
        km[c].init(cache.kMean, kvh, d, hd, cache.rotDim, cache.theta);
    }
  }

  for (int64_t kt = kStart; kt < kEnd; kt += kPrefillBc) {
    if constexpr (kSparse) {
      // A tile none of the block's rows keeps: skipped by every thread.
      const int64_t kLast = (kt + kPrefillBc < kEnd ? kt + kPrefillBc : kEnd) - 1;
      if (masked && !sparse.keepsAny(kvh, p, p + i0, p + i0 + rows - 1, kt,
                                     kLast))
        continue;
    }
    __syncthreads(); // previous tile fully consumed (and sQ written)
    for (int e = threadIdx.x; e < kPrefillBc * hd; e += blockDim.x) {
      const int j = e / hd, d = e % hd;
      const int64_t kj = kt + j;
      float kv = 0.0f, vv = 0.0f;
      if (kj < kEnd) {
        const int64_t off = kj * kvDim + int64_t(kvh) * hd + d;
        if constexpr (!Kv::kCentered)
          kv = cache.kScale(kj, kvh) * cache.kAt(off);
        vv = cache.vScale(kj, kvh) * cache.vAt(off);
      }
      if constexpr (!Kv::kCentered)
        sK[j * (hd + 1) + d] = kv;
      sV[j * hd + d] = vv;
    }
    if constexpr (Kv::kCentered) {
#pragma unroll
      for (int c = 0; c < kCh; ++c) {
        const int d = threadIdx.x + kAttnThreads * c;
        if (d >= hd)
          continue;
        km[c].seek(kt);
        for (int j = 0; j < kPrefillBc; ++j) {
          const int64_t kj = kt + j;
          float kv = 0.0f;
          if (kj < kEnd)
            kv = cache.kScale(kj, kvh) *
                     cache.kAt(kj * kvDim + int64_t(kvh) * hd + d) +
                 km[c].value();
          sK[j * (hd + 1) + d] = kv;
          km[c].next();
        }
      }
    }
    __syncthreads();

    // s[r] = q_r . k_lane for this warp's rows.
    float s[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r)
      s[r] = 0.0f;
    const float *kRow = sK + lane * (hd + 1);
    const float *qRows = sQ + warp * kR * hd;
    for (int d = 0; d < hd; ++d) {
      const float kd = kRow[d];
#pragma unroll
      for (int r = 0; r < kR; ++r)
        s[r] = fmaf(qRows[r * hd + d], kd, s[r]);
    }
    const int64_t kj = kt + lane;
    const int64_t tileKeys = kEnd - kt < kPrefillBc ? kEnd - kt : kPrefillBc;
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      bool visible = kj <= last[r] && kj >= first[r] && kj < kEnd;
      if constexpr (kSparse)
        visible = visible && (!masked || sparse.keeps(kvh, p, last[r], kj));
      const float sr = visible ? s[r] * scale : -INFINITY;
      const float mNew = fmaxf(m[r], warpMax(sr));
      const float pj = sr == -INFINITY ? 0.0f : expf(sr - mNew);
      const float alpha = m[r] == -INFINITY ? 0.0f : expf(m[r] - mNew);
      l[r] = l[r] * alpha + warpSum(pj);
      m[r] = mNew;
#pragma unroll
      for (int t = 0; t < kT; ++t)
        acc[r][t] *= alpha;
      for (int j = 0; j < int(tileKeys); ++j) {
        const float pjj = __shfl_sync(kFull, pj, j);
        const float *vRow = sV + j * hd;
#pragma unroll
        for (int t = 0; t < kT; ++t) {
          const int d = lane + 32 * t;
          if (d < hd)
            acc[r][t] = fmaf(pjj, vRow[d], acc[r][t]);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int64_t qi = i0 + warp * kR + r;
    if (qi >= n || !(l[r] > 0.0f))
      continue;
    const float inv = 1.0f / l[r];
    T *o = out + qi * qDim + int64_t(h) * hd;
#pragma unroll
    for (int t = 0; t < kT; ++t) {
      const int d = lane + 32 * t;
      if (d < hd)
        o[d] = fromF<T>(acc[r][t] * inv);
    }
  }
}

constexpr int kDecodeKeysPerStep = 8;

/// Decode attention, flash-decoding (Dao, Haziza, Massa, Sizov 2023,
/// "Flash-Decoding for long-context inference"), split phase: block =
/// (split s, query head h). The L = p + 1 visible keys are cut into gridDim.x
/// chunks of ceil(L / S); this block's chunk is [s * chunk, min(L, ...)),
/// possibly empty (the grid is fixed for graph capture while p changes).
/// Each warp walks keys kDecodeKeysPerStep at a time with lanes over head
/// dims (dims lane + 32 t: coalesced K/V row loads), keeps an online-softmax
/// state (m, l, acc); the block merges its 4 warp states and writes the
/// partial (m, l, acc[hd]) to partM/partL/partAcc[h * S + s]. An empty chunk
/// writes the neutral partial (-inf, 0, 0). kSparse (sparse flash-decoding):
/// steps whose keys all lie in blocks `sparse` drops are skipped, dropped
/// keys of the other steps score -inf.
template <typename T, int HDM, typename Kv, bool kSparse>
__global__ void __launch_bounds__(kAttnThreads)
    attnDecodeSplitKernel(const T *__restrict__ q, const Kv cache,
                          float *partM,
                          float *partL, float *partAcc, int heads, int group,
                          int headDim, int64_t maxSeq, float scale,
                          const int64_t *__restrict__ dPos, int64_t window,
                          SparseMask sparse) {
  constexpr int kT = HDM / 32, kKB = kDecodeKeysPerStep;
  __shared__ float sM[kAttnWarps], sL[kAttnWarps];
  __shared__ float sAcc[kAttnWarps][HDM];
  const int hd = headDim;
  const int64_t p = *dPos;
  int64_t L = p + 1;
  if (L > maxSeq)
    L = maxSeq;
  const int64_t S = gridDim.x, s = blockIdx.x;
  const int h = blockIdx.y, kvh = h / group;
  const int64_t kvDim = int64_t(heads / group) * hd;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Sliding window: keys [L - window, L) only.
  const int64_t lo = window > 0 && L - window > 0 ? L - window : 0;
  const int64_t chunk = (L - lo + S - 1) / S;
  const int64_t start = lo + s * chunk;
  const int64_t end = start + chunk < L ? start + chunk : L;

  float qr[kT], acc[kT];
  // Centered keys: m_t of the lane's dims, exact at each step's first key,
  // then the recurrence over its kKB keys.
  [[maybe_unused]] KeyMeanChannel km[Kv::kCentered ? kT : 1];
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    const int d = lane + 32 * t;
    qr[t] = d < hd ? toF(q[int64_t(h) * hd + d]) : 0.0f;
    acc[t] = 0.0f;
    if constexpr (Kv::kCentered)
      if (d < hd)
        km[t].init(cache.kMean, kvh, d, hd, cache.rotDim, cache.theta);
  }
  float m = -INFINITY, l = 0.0f;
  [[maybe_unused]] bool masked = false;
  if constexpr (kSparse)
    masked = sparse.active(p, 1);
  for (int64_t kb = start + int64_t(warp) * kKB; kb < end;
       kb += int64_t(kAttnWarps) * kKB) {
    [[maybe_unused]] bool keep[kKB];
    if constexpr (kSparse) {
      bool any = false;
#pragma unroll
      for (int jj = 0; jj < kKB; ++jj) {
        keep[jj] = kb + jj < end && (!masked || sparse.keeps(kvh, p, p, kb + jj));
        any = any || keep[jj];
      }
      if (!any)
        continue;
    }
    if constexpr (Kv::kCentered) {
#pragma unroll
      for (int t = 0; t < kT; ++t)
        if (lane + 32 * t < hd)
          km[t].seek(kb);
    }
    float sc[kKB];
#pragma unroll
    for (int jj = 0; jj < kKB; ++jj) {
      float part = 0.0f;
      if (kb + jj < end) {
        const int64_t kr = (kb + jj) * kvDim + int64_t(kvh) * hd;
        const float ks = cache.kScale(kb + jj, kvh);
#pragma unroll
        for (int t = 0; t < kT; ++t) {
          const int d = lane + 32 * t;
          if (d >= hd)
            continue;
          float kd = ks * cache.kAt(kr + d);
          if constexpr (Kv::kCentered) {
            kd += km[t].value();
            km[t].next();
          }
          part = fmaf(qr[t], kd, part);
        }
      }
      sc[jj] = part;
    }
    float mt = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < kKB; ++jj) {
      sc[jj] = warpSum(sc[jj]);
      bool visible = kb + jj < end;
      if constexpr (kSparse)
        visible = keep[jj];
      sc[jj] = visible ? sc[jj] * scale : -INFINITY;
      mt = fmaxf(mt, sc[jj]);
    }
    // Finite: key kb < end is visible (sparse: a kept key of the step).
    const float mNew = fmaxf(m, mt);
    const float alpha = m == -INFINITY ? 0.0f : expf(m - mNew);
    l *= alpha;
#pragma unroll
    for (int t = 0; t < kT; ++t)
      acc[t] *= alpha;
#pragma unroll
    for (int jj = 0; jj < kKB; ++jj) {
      if (kb + jj >= end)
        break;
      if constexpr (kSparse)
        if (!keep[jj])
          continue;
      const float pj = expf(sc[jj] - mNew);
      l += pj;
      const int64_t vr = (kb + jj) * kvDim + int64_t(kvh) * hd;
      const float vsc = cache.vScale(kb + jj, kvh);
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const int d = lane + 32 * t;
        if (d < hd)
          acc[t] = fmaf(pj, vsc * cache.vAt(vr + d), acc[t]);
      }
    }
    m = mNew;
  }

  if (lane == 0) {
    sM[warp] = m;
    sL[warp] = l;
  }
#pragma unroll
  for (int t = 0; t < kT; ++t)
    sAcc[warp][lane + 32 * t] = acc[t];
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w)
    M = fmaxf(M, sM[w]);
  float wgt[kAttnWarps];
  float lSum = 0.0f;
  for (int w = 0; w < kAttnWarps; ++w) {
    wgt[w] = sM[w] == -INFINITY ? 0.0f : expf(sM[w] - M);
    lSum += wgt[w] * sL[w];
  }
  const int64_t slot = int64_t(h) * S + s;
  if (threadIdx.x == 0) {
    partM[slot] = M;
    partL[slot] = lSum;
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w)
      a = fmaf(wgt[w], sAcc[w][d], a);
    partAcc[slot * hd + d] = a;
  }
}

/// Flash-decoding reduce phase: out[h, d] = sum_s w_s acc_s[d] / sum_s w_s l_s
/// with w_s = e^(m_s - max_s m_s) (0 for neutral partials). One block per head.
template <typename T>
__global__ void __launch_bounds__(kAttnThreads)
    attnDecodeReduceKernel(const float *__restrict__ partM,
                           const float *__restrict__ partL,
                           const float *__restrict__ partAcc, T *out,
                           int splits, int headDim) {
  const int h = blockIdx.x;
  const int64_t base = int64_t(h) * splits;
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s)
    M = fmaxf(M, partM[base + s]);
  float lSum = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float ms = partM[base + s];
    if (ms != -INFINITY)
      lSum = fmaf(expf(ms - M), partL[base + s], lSum);
  }
  const float inv = lSum > 0.0f ? 1.0f / lSum : 0.0f;
  for (int d = threadIdx.x; d < headDim; d += blockDim.x) {
    float a = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float ms = partM[base + s];
      if (ms != -INFINITY)
        a = fmaf(expf(ms - M), partAcc[(base + s) * headDim + d], a);
    }
    out[int64_t(h) * headDim + d] = fromF<T>(a * inv);
  }
}

/// Split count of decode attention: about 4 blocks per SM over all heads,
/// at least 32 keys per split at full length, at most
/// KILN_CUDA_ATTN_MAX_SPLITS. Fixed per (heads, max_seq) so graphs stay valid.
inline int decodeSplits(const kiln_cuda_ctx *ctx, int64_t heads,
                        int64_t maxSeq) {
  const int64_t sms = ctx->sm_count > 0 ? ctx->sm_count : 108;
  int64_t s = (4 * sms + heads - 1) / heads;
  const int64_t byLength = (maxSeq + 31) / 32;
  if (s > byLength)
    s = byLength;
  if (s > KILN_CUDA_ATTN_MAX_SPLITS)
    s = KILN_CUDA_ATTN_MAX_SPLITS;
  return int(s < 1 ? 1 : s);
}

template <bool kSparse, typename T, int HDM, typename Kv>
inline void attentionLaunch(kiln_cuda_ctx *ctx, const T *q, const Kv &cache,
                            T *out, int64_t n, int64_t heads,
                            int64_t kvHeads, int64_t headDim, int64_t maxSeq,
                            float scale, int64_t window,
                            const int64_t *dPos, const SparseMask &sparse) {
  cudaStream_t stream = streamOf(ctx);
  const int group = int(heads / kvHeads);
  if (n == 1) {
    const int splits = decodeSplits(ctx, heads, maxSeq);
    const uint64_t need =
        kiln_cuda_attention_scratch_bytes(heads, headDim, splits);
    if (!KILN_CUDA_ARG(ctx,
                       ctx->workspace != nullptr &&
                           ctx->workspace_bytes >=
                               KILN_CUDA_ATTN_SCRATCH_OFFSET + need,
                       "kiln_cuda_attention",
                       "workspace too small for the flash-decoding scratch"))
      return;
    float *partM = reinterpret_cast<float *>(
        static_cast<uint8_t *>(ctx->workspace) + KILN_CUDA_ATTN_SCRATCH_OFFSET);
    float *partL = partM + heads * splits;
    float *partAcc = partL + heads * splits;
    attnDecodeSplitKernel<T, HDM, Kv, kSparse>
        <<<dim3(unsigned(splits), unsigned(heads)), kAttnThreads, 0, stream>>>(
            q, cache, partM, partL, partAcc, int(heads), group,
            int(headDim), maxSeq, scale, dPos, window, sparse);
    if (!KILN_CUDA_LAUNCHED(ctx, "attnDecodeSplitKernel<<<>>>"))
      return;
    attnDecodeReduceKernel<T><<<unsigned(heads), kAttnThreads, 0, stream>>>(
        partM, partL, partAcc, out, splits, int(headDim));
    KILN_CUDA_LAUNCHED(ctx, "attnDecodeReduceKernel<<<>>>");
    return;
  }
  const size_t smem = prefillSmemBytes(int(headDim));
  if (smem > 48 * 1024 &&
      !KILN_CUDA_CHECK(
          ctx, cudaFuncSetAttribute(attnPrefillKernel<T, HDM, Kv, kSparse>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem))))
    return;
  const dim3 grid(unsigned((n + kPrefillBr - 1) / kPrefillBr), unsigned(heads));
  attnPrefillKernel<T, HDM, Kv, kSparse><<<grid, kAttnThreads, smem, stream>>>(
      q, cache, out, n, int(heads), group, int(headDim), maxSeq, scale, dPos,
      window, sparse);
  KILN_CUDA_LAUNCHED(ctx, "attnPrefillKernel<<<>>>");
}

/// Argument checks shared by the attention wrappers.
inline bool attentionArgsOk(kiln_cuda_ctx *ctx, const char *call,
                            int64_t heads, int64_t kvHeads, int64_t headDim,
                            int64_t maxSeq) {
  return KILN_CUDA_ARG(ctx,
                       heads > 0 && kvHeads > 0 && heads % kvHeads == 0 &&
                           heads <= 65535 && maxSeq > 0,
                       call, "heads must be a positive multiple of kv_heads") &&
         KILN_CUDA_ARG(ctx,
                       headDim >= 1 && headDim <= KILN_CUDA_ATTN_MAX_HEAD_DIM,
                       call, "head_dim outside [1, 256]");
}

/// Prefill / decode attention over `cache` (KvPlain, KvInt8 or KvFp8, or
/// those KvPaged / KvCentered), HDM picked from head_dim; the first
/// position is *dPos (device), ctx->d_pos when dPos is null. kSparse: the
/// kernels skip the key blocks `sparse` drops (block-sparse prefill,
/// sparse flash-decoding).
template <bool kSparse = false, typename T, typename Kv>
inline void attentionDispatch(kiln_cuda_ctx *ctx, const T *q, const Kv &cache,
                              T *out, int64_t n, int64_t heads,
                              int64_t kvHeads, int64_t headDim, int64_t maxSeq,
                              float scale, int64_t window = 0,
                              const int64_t *dPos = nullptr,
                              const SparseMask &sparse = SparseMask()) {
  if (!dPos)
    dPos = ctx->d_pos;
  constexpr int kMask = KILN_CUDA_ATTN_HDM_MASK;
  const int bucket = headDim <= 32 ? 0 : headDim <= 64 ? 1 : headDim <= 128 ? 2 : 3;
  if (!KILN_CUDA_ARG(ctx, (kMask >> bucket) & 1, "kiln_cuda_attention",
                     "head_dim's bucket is not compiled into this model "
                     "(KILN_CUDA_ATTN_HDM_MASK)"))
    return;
  switch (bucket) {
  case 0:
    if constexpr ((kMask & 1) != 0)
      attentionLaunch<kSparse, T, 32>(ctx, q, cache, out, n, heads, kvHeads,
                                      headDim, maxSeq, scale, window, dPos,
                                      sparse);
    return;
  case 1:
    if constexpr ((kMask & 2) != 0)
      attentionLaunch<kSparse, T, 64>(ctx, q, cache, out, n, heads, kvHeads,
                                      headDim, maxSeq, scale, window, dPos,
                                      sparse);
    return;
  case 2:
    if constexpr ((kMask & 4) != 0)
      attentionLaunch<kSparse, T, 128>(ctx, q, cache, out, n, heads, kvHeads,
                                      headDim, maxSeq, scale, window, dPos,
                                      sparse);
    return;
  default:
    if constexpr ((kMask & 8) != 0)
      attentionLaunch<kSparse, T, 256>(ctx, q, cache, out, n, heads, kvHeads,
                                      headDim, maxSeq, scale, window, dPos,
                                      sparse);
    return;
  }
}

/// The 8-bit KV attention wrappers: `append` (kvAppendInt8Kernel /
/// kvAppendFp8Kernel) quantizes the new rows, then the prefill /
/// flash-decoding kernels read `cache` (KvInt8 / KvFp8, or KvPaged of
/// them), wrapped in KvCentered with kCentered (keys relative to the
/// rotated k_mean). Positions start at *dPos (ctx->d_pos when null) and
/// are stored at rows slot(position); `window` >= 1 limits each row to its
/// last `window` keys.
template <bool kCentered, typename T, typename Kv, typename Code,
          typename Rows = RowsContiguous>
inline void
attentionQuantKv(kiln_cuda_ctx *ctx, const char *call, const char *appendName,
                 void (*append)(const T *, const T *, Code *, Code *, float *,
                                float *, int64_t, int, int, int64_t,
                                const int64_t *, const float *, int, float,
                                Rows),
                 const Kv &cache, const T *q, const T *k, const T *v,
                 Code *k_cache, Code *v_cache, float *k_scales, float *v_scales,
                 const float *k_mean, T *out, int64_t n, int64_t heads,
                 int64_t kv_heads, int64_t head_dim, int64_t rot_dim,
                 int64_t max_seq, float scale, float theta,
                 const int64_t *dPos = nullptr, Rows slot = Rows(),
                 int64_t window = 0) {
  if (!dPos)
    dPos = ctx->d_pos;
  if (skip(ctx) || n <= 0)
    return;
  if (!attentionArgsOk(ctx, call, heads, kv_heads, head_dim, max_seq))
    return;
  if (kCentered &&
      !KILN_CUDA_ARG(ctx,
                     k_mean != nullptr && rot_dim >= 0 && rot_dim <= head_dim,
                     call, "needs k_mean and rot_dim in [0, head_dim]"))
    return;
  const int64_t warps = 2 * n * kv_heads; // (token, kv head, K|V)
  append<<<gridFor(ctx, warps * 32, 256), 256, 0, streamOf(ctx)>>>(
      k, v, k_cache, v_cache, k_scales, v_scales, n, int(kv_heads),
      int(head_dim), max_seq, dPos, kCentered ? k_mean : nullptr,
      int(rot_dim), theta, slot);
  if (!KILN_CUDA_LAUNCHED(ctx, appendName))
    return;
  if constexpr (kCentered)
    attentionDispatch(ctx, q,
                      KvCentered<Kv>{cache, k_mean, int(rot_dim), theta}, out,
                      n, heads, kv_heads, head_dim, max_seq, scale, window,
                      dPos);
  else
    attentionDispatch(ctx, q, cache, out, n, heads, kv_heads, head_dim, max_seq,
                      scale, window, dPos);
}

//===----------------------------------------------------------------------===//

} // namespace kiln_cuda_detail

#endif // KILN_CODEGEN_CUDA_KILNCUDAATTENTION_CUH

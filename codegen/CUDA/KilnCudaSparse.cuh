//===- KilnCudaSparse.cuh - Dynamic block-sparse attention -----*- CUDA -*-===//
//
// The CUDA twins of kernel_abi.h kiln_k_attention_sparse (block-sparse
// prefill), kiln_k_attention_sparse_summary / _decode (Quest page summaries
// and sparse decode) and kiln_k_step_attention_sparse (the batched step's
// prefill chunks); docs/sparse-attention.md. Part of KilnKernels.cuh.
//
// A call runs in three stream-ordered phases, all on the device (the start
// position lives in device memory, so the dense fallbacks are decided
// there too):
//   1. selection: one thread block per (query block, KV head) -- per KV head
//      for Quest decode -- estimates each query head's attention mass per key
//      block (pooled mean keys, FlexPrefill; antidiagonal sampling,
//      XAttention; page min/max bounds, Quest), sorts the optional blocks
//      (bitonic sort in shared memory: largest mass first, ties the earlier
//      block) and takes them as runtime/src/cpu/Attention.cpp
//      chooseSparseBlocks does (sink and local blocks, then until every head
//      of the GQA group reaches gamma, then min_budget, then max_budget),
//      writing one bit per kept key block (SparseMask);
//   2. attention: the dense kernels (FlashAttention-2 prefill tiles,
//      flash-decoding splits) with the mask: dropped keys score -inf, tiles
//      or key steps nobody keeps are skipped;
//   3. the scratch (mask, counters, mean keys) is freed in stream order.
// Dense fallbacks as on the CPU: gamma >= 1 or parameters outside the
// verified ranges (the dense wrapper itself), fewer than min_tokens keys or
// every block mandatory (state[1]), 90% of the causal pairs kept
// (SparseMask::active). The masses are float sums here and double sums on
// the CPU, so a block whose mass sits exactly at the gamma boundary may be
// chosen differently; otherwise the block lists, and so the outputs within
// float rounding, are the CPU's.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CODEGEN_CUDA_KILNCUDASPARSE_CUH
#define KILN_CODEGEN_CUDA_KILNCUDASPARSE_CUH

#include "KilnCudaStep.cuh"

namespace kiln_cuda_detail {

/// kernel_abi.h kiln_k_attention_sparse's selection parameters.
struct SparseRule {
  float gamma;
  int64_t block, sink, local, minBudget, maxBudget, minTokens, streaming,
      stride;
  __host__ __device__ bool isStreaming(int g) const {
    return g < 64 && ((uint64_t(streaming) >> g) & 1u);
  }
  /// The parameters the compiler verifies; anything else runs dense (as
  /// the CPU kernels do).
  bool valid() const {
    return block >= 1 && sink >= 0 && local >= 1 && gamma > 0.0f &&
           stride >= 0 && stride <= block;
  }
};

constexpr int kSelectThreads = 256, kSelectWarps = kSelectThreads / 32;

inline int64_t nextPow2(int64_t x) {
  int64_t p = 1;
  while (p < x)
    p <<= 1;
  return p;
}

/// Shared memory of the selection kernels for `blocks` key blocks (the
/// most a call can see): have (double [group]), mass (float [group *
/// blocks]), peak (float [blocks]), sort keys / indices ([pow2(blocks)]),
/// the kept bits ([words]) and one query row per warp (float [headDim]).
struct SelectSmem {
  double *have;
  float *mass, *peak, *sortKey;
  int *sortIdx;
  uint32_t *bits;
  float *qRow;
  int *kept;

  __host__ __device__ static size_t bytes(int group, int64_t blocks,
                                          int headDim) {
    int64_t p2 = 1;
    while (p2 < blocks)
      p2 <<= 1;
    const int64_t words = (blocks + 31) / 32;
    return sizeof(double) * size_t(group) +
           sizeof(float) * size_t(group * blocks + blocks + p2) +
           sizeof(int) * size_t(p2) + sizeof(uint32_t) * size_t(words) +
           sizeof(float) * size_t(kSelectWarps * headDim) + sizeof(int);
  }
  __device__ static SelectSmem carve(void *base, int group, int64_t blocks,
                                     int headDim) {
    int64_t p2 = 1;
    while (p2 < blocks)
      p2 <<= 1;
    SelectSmem s;
    s.have = static_cast<double *>(base);
    s.mass = reinterpret_cast<float *>(s.have + group);
    s.peak = s.mass + group * blocks;
    s.sortKey = s.peak + blocks;
    s.sortIdx = reinterpret_cast<int *>(s.sortKey + p2);
    s.bits = reinterpret_cast<uint32_t *>(s.sortIdx + p2);
    s.qRow = reinterpret_cast<float *>(s.bits + (blocks + 31) / 32);
    s.kept = reinterpret_cast<int *>(s.qRow + kSelectWarps * headDim);
    return s;
  }
};

/// Warp-wide softmax statistics of one row's logits: the lanes' running
/// (max, sum of e^(l - max)) merged into the row's (M, L).
__device__ __forceinline__ void onlineAdd(float &m, float &l, float x) {
  if (x == -INFINITY)
    return;
  if (x > m) {
    l = l * expf(m - x) + 1.0f;
    m = x;
  } else {
    l += expf(x - m);
  }
}
__device__ __forceinline__ void warpSoftmaxStats(float &m, float &l) {
  const float M = warpMax(m);
  l = warpSum(m == -INFINITY ? 0.0f : l * expf(m - M));
  m = M;
}

/// The kept key blocks of one (KV head, query block), chooseSparseBlocks
/// (runtime/src/cpu/Attention.cpp) over s.mass ([group][blocks], each
/// head's estimated mass) for query block qb (blocks = qb + 1) whose last
/// row sees keys [0, lastPos): blocks [0, sink) and the `local` blocks
/// ending at qb always, then the optional blocks in order of s.peak (the
/// largest mass over the heads, or the given rank when hasRank) until
/// every head's kept mass reaches gamma, then until min_budget keys, then
/// the least ranked of those dropped down to max_budget keys. Writes
/// s.bits and *s.kept (the count). Every thread of the block calls it.
__device__ void chooseBlocks(SelectSmem s, int group, int64_t blocks,
                             int64_t qb, int64_t lastPos,
                             const SparseRule &rule, float gamma,
                             int64_t minBudget, bool hasRank) {
  const int tid = threadIdx.x;
  const int64_t B = rule.block, words = (blocks + 31) / 32;
  const int64_t localFirst = qb - rule.local + 1;
  auto mandatory = [&](int64_t kb) {
    return kb < rule.sink || kb >= localFirst;
  };
  int64_t p2 = 1;
  while (p2 < blocks)
    p2 <<= 1;
  for (int64_t kb = tid; kb < blocks; kb += blockDim.x) {
    if (!hasRank) {
      float m = 0.0f;
      for (int hi = 0; hi < group; ++hi)
        m = fmaxf(m, s.mass[hi * blocks + kb]);
      s.peak[kb] = m;
    }
  }
  for (int64_t w = tid; w < words; w += blockDim.x)
    s.bits[w] = 0u;
  __syncthreads();
  for (int64_t i = tid; i < p2; i += blockDim.x) {
    s.sortIdx[i] = int(i);
    s.sortKey[i] = i < blocks ? s.peak[i] : -INFINITY;
  }
  __syncthreads();
  // Bitonic sort into "taken first" order: candidates (optional blocks)
  // before the rest, larger key first, then the smaller index.
  auto before = [&](float ka, int ia, float kb2, int ib) {
    const bool ca = ia < blocks && !mandatory(ia);
    const bool cb = ib < blocks && !mandatory(ib);
    if (ca != cb)
      return ca;
    if (ka != kb2)
      return ka > kb2;
    return ia < ib;
  };
  for (int64_t k = 2; k <= p2; k <<= 1) {
    for (int64_t j = k >> 1; j > 0; j >>= 1) {
      for (int64_t i = tid; i < p2; i += blockDim.x) {
        const int64_t o = i ^ j;
        if (o <= i)
          continue;
        const float ki = s.sortKey[i], ko = s.sortKey[o];
        const int ii = s.sortIdx[i], io = s.sortIdx[o];
        const bool up = (i & k) == 0;
        if (up ? before(ko, io, ki, ii) : before(ki, ii, ko, io)) {
          s.sortKey[i] = ko;
          s.sortKey[o] = ki;
          s.sortIdx[i] = io;
          s.sortIdx[o] = ii;
        }
      }
      __syncthreads();
    }
  }
  // Warp 0 takes the blocks: lane 0 the mandatory ones, then 32 sorted
  // candidates at a time, each lane the running sums (double, as the CPU)
  // of the heads' kept mass and of the kept keys through its candidate,
  // the first lane after which every head reaches gamma and the keys reach
  // min_budget ending the walk (the CPU's one-by-one loop, in chunks).
  const int lane = tid & 31;
  if (tid < 32) {
    auto keysOf = [&](int64_t kb) {
      return lastPos - kb * B < B ? lastPos - kb * B : B;
    };
    int64_t keys = 0, count = 0;
    if (lane == 0) {
      for (int hi = 0; hi < group; ++hi)
        s.have[hi] = 0.0;
      for (int64_t kb = 0; kb <= qb; ++kb) {
        if (!mandatory(kb))
          continue;
        s.bits[kb / 32] |= 1u << (kb % 32);
        for (int hi = 0; hi < group; ++hi)
          s.have[hi] += double(s.mass[hi * blocks + kb]);
        keys += keysOf(kb);
        ++count;
      }
    }
    __syncwarp();
    keys = __shfl_sync(0xffffffffu, keys, 0);
    count = __shfl_sync(0xffffffffu, count, 0);
    const int64_t optional = blocks - count;
    int64_t next = 0;
    while (next < optional) {
      const int64_t at = next + lane;
      const bool real = at < optional;
      const int kb = real ? s.sortIdx[at] : 0;
      // Whether the walk is done after this lane's candidate.
      bool done = true;
      for (int hi = 0; hi < group; ++hi) {
        double v = real ? double(s.mass[hi * blocks + kb]) : 0.0;
        for (int o = 1; o < 32; o <<= 1) {
          const double u = __shfl_up_sync(0xffffffffu, v, o);
          if (lane >= o)
            v += u;
        }
        done = done && s.have[hi] + v >= double(gamma);
      }
      int64_t kv = real ? keysOf(kb) : 0;
      for (int o = 1; o < 32; o <<= 1) {
        const int64_t u = __shfl_up_sync(0xffffffffu, kv, o);
        if (lane >= o)
          kv += u;
      }
      done = done && keys + kv >= minBudget;
      // Already done before the first candidate of the chunk?
      bool doneBefore = keys >= minBudget;
      for (int hi = 0; hi < group; ++hi)
        doneBefore = doneBefore && s.have[hi] >= double(gamma);
      if (doneBefore)
        break;
      const unsigned hit = __ballot_sync(0xffffffffu, done && real);
      const int64_t left = optional - next;
      const int take = hit ? __ffs(hit) : int(left < 32 ? left : 32);
      // Lanes [0, take) keep their candidates.
      __syncwarp();
      if (lane < take)
        atomicOr(&s.bits[kb / 32], 1u << (kb % 32));
      __syncwarp();
      if (lane == 0) {
        for (int t = 0; t < take; ++t) {
          const int64_t kt = s.sortIdx[next + t];
          for (int hi = 0; hi < group; ++hi)
            s.have[hi] += double(s.mass[hi * blocks + kt]);
        }
      }
      __syncwarp();
      keys += __shfl_sync(0xffffffffu, kv, take - 1);
      count += take;
      next += take;
      if (hit)
        break;
    }
    // max_budget: the least ranked optional blocks go again (lane 0).
    if (lane == 0 && rule.maxBudget > 0) {
      while (keys > rule.maxBudget && next > 0) {
        const int64_t kb = s.sortIdx[--next];
        s.bits[kb / 32] &= ~(1u << (kb % 32));
        keys -= keysOf(kb);
        --count;
      }
    }
    if (lane == 0)
      *s.kept = int(count);
  }
  __syncthreads();
}

/// Mean key of every key block (the pooled estimate's kbar): means[(g *
/// capBlocks + kb) * headDim + d] for the blocks of keys [0, p + n).
template <typename Kv>
__global__ void __launch_bounds__(256)
    sparseKeyMeansKernel(const Kv cache, float *__restrict__ means,
                         int kvHeads, int headDim, int64_t n, int64_t block,
                         int64_t capBlocks, const int64_t *__restrict__ dPos) {
  const int64_t T = *dPos + n, keyBlocks = (T + block - 1) / block;
  const int64_t kvDim = int64_t(kvHeads) * headDim;
  const int64_t total = int64_t(kvHeads) * keyBlocks * headDim;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int g = int(e / (keyBlocks * headDim));
    const int64_t kb = (e / headDim) % keyBlocks, d = e % headDim;
    const int64_t t0 = kb * block, count = T - t0 < block ? T - t0 : block;
    double sum = 0.0;
    for (int64_t t = t0; t < t0 + count; ++t)
      sum += double(cache.kScale(t, g) *
                    cache.kAt(t * kvDim + int64_t(g) * headDim + d));
    means[(int64_t(g) * capBlocks + kb) * headDim + d] =
        float(sum / double(count));
  }
}

/// q . key (key `row` of KV head g, read through the cache trait), float.
template <typename Kv>
__device__ __forceinline__ float dotKey(const float *__restrict__ q,
                                        const Kv &cache, int64_t row, int g,
                                        int headDim, int64_t kvDim) {
  const int64_t off = row * kvDim + int64_t(g) * headDim;
  const float ks = cache.kScale(row, g);
  float acc = 0.0f;
  for (int d = 0; d < headDim; ++d)
    acc = fmaf(q[d], ks * cache.kAt(off + d), acc);
  return acc;
}

/// Block selection of kiln_k_attention_sparse: block (x = query block row
/// w, y = KV head g). Each warp takes (head of the group, row) items,
/// computes the row's proxy softmax (two passes: statistics, then shares)
/// and adds its share of every key block to s.mass; masses are normalised
/// per head, then chooseBlocks writes the block row's bits.
template <typename T, typename Kv>
__global__ void __launch_bounds__(kSelectThreads)
    sparseSelectKernel(const T *__restrict__ q, const Kv cache,
                       const float *__restrict__ means, int64_t capBlocks,
                       SparseRule rule, uint32_t *__restrict__ maskBits,
                       unsigned long long *state, int maskRows, int words,
                       int64_t n, int heads, int group, int headDim,
                       float scale, const int64_t *__restrict__ dPos) {
  extern __shared__ double selectSmem[];
  const int64_t p = *dPos, total = p + n, B = rule.block;
  const int64_t keyBlocks = (total + B - 1) / B, qb0 = p / B;
  const int64_t queryBlocks = (total - 1) / B - qb0 + 1;
  const int w = blockIdx.x, g = blockIdx.y;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  if (w >= queryBlocks)
    return;
  // Dense: too few tokens, every block mandatory, or (a caller's bug) a
  // context past the scratch's capBlocks (the dense kernels clamp to
  // max_seq).
  if (total < rule.minTokens || keyBlocks <= rule.sink + rule.local ||
      keyBlocks > capBlocks) {
    if (w == 0 && g == 0 && tid == 0)
      state[1] = 1ull;
    return;
  }
  const int64_t qb = qb0 + w, blocks = qb + 1;
  const int64_t r0 = (p > qb * B ? p : qb * B) - p;
  const int64_t r1 = (total < (qb + 1) * B ? total : (qb + 1) * B) - p;
  const int64_t tq = r1 - r0;
  const int64_t qDim = int64_t(heads) * headDim;
  const int64_t kvDim = int64_t(heads / group) * headDim;
  SelectSmem s = SelectSmem::carve(selectSmem, group, blocks, headDim);
  for (int64_t i = tid; i < group * blocks; i += blockDim.x)
    s.mass[i] = 0.0f;
  __syncthreads();
  // The mandatory blocks: sink [0, sinkEnd), local [localFirst, qb].
  const int64_t sinkEnd = rule.sink < blocks ? rule.sink : blocks;
  const int64_t localFirst =
      qb - rule.local + 1 > sinkEnd ? qb - rule.local + 1 : sinkEnd;
  const bool streamingHead = rule.isStreaming(g);
  if (!streamingHead) {
    float *qw = s.qRow + warp * headDim;
    for (int64_t it = warp; it < group * tq; it += kSelectWarps) {
      const int hi = int(it / tq);
      const int64_t r = it % tq, row = r0 + r, pos = p + row;
      const int h = g * group + hi;
      __syncwarp();
      for (int d = lane; d < headDim; d += 32)
        qw[d] = toF(q[row * qDim + int64_t(h) * headDim + d]);
      __syncwarp();
      float *m = s.mass + hi * blocks;
      if (rule.stride == 0) {
        // Pooled (FlexPrefill): softmax over the blocks of scale q . kbar
        // + ln(keys the row sees in the block / B).
        const float lnDiag = logf(float(pos + 1 - qb * B) / float(B));
        auto logit = [&](int64_t kb) {
          const float *kbar = means + (int64_t(g) * capBlocks + kb) * headDim;
          float acc = 0.0f;
          for (int d = 0; d < headDim; ++d)
            acc = fmaf(qw[d], kbar[d], acc);
          return scale * acc + (kb == qb ? lnDiag : 0.0f);
        };
        float mx = -INFINITY, sum = 0.0f;
        for (int64_t kb = lane; kb < blocks; kb += 32)
          onlineAdd(mx, sum, logit(kb));
        warpSoftmaxStats(mx, sum);
        for (int64_t kb = lane; kb < blocks; kb += 32)
          atomicAdd(m + kb, expf(logit(kb) - mx) / sum);
      } else {
        // Antidiagonal (XAttention) as a Horvitz-Thompson estimate of the
        // row's softmax: the mandatory blocks' keys (sink [0, sinkEnd B),
        // local [localFirst B, pos]) scored exactly with weight 1, the
        // optional blocks' keys sampled (j <= pos with (pos + j) mod S =
        // S - 1) with weight S; index i < mk walks the mandatory keys,
        // then t = tA + (i - mk) the sampled ones.
        const int64_t S = rule.stride, ec = S - 1 - pos % S;
        const int64_t sinkKeys = sinkEnd * B < pos + 1 ? sinkEnd * B : pos + 1;
        const int64_t localKeys =
            pos + 1 - localFirst * B > 0 ? pos + 1 - localFirst * B : 0;
        const int64_t mk = sinkKeys + localKeys;
        const int64_t count = pos >= ec ? (pos - ec) / S + 1 : 0;
        const int64_t jA = sinkEnd * B, jB = localFirst * B;
        const int64_t tA = jA > ec ? (jA - ec + S - 1) / S : 0;
        int64_t tB = jB > ec ? (jB - ec + S - 1) / S : 0;
        tB = tB < count ? tB : count;
        const int64_t items = mk + (tB > tA ? tB - tA : 0);
        auto keyOf = [&](int64_t i) {
          return i < sinkKeys ? i
                 : i < mk     ? localFirst * B + (i - sinkKeys)
                              : ec + (tA + i - mk) * S;
        };
        float mx = -INFINITY, sum = 0.0f;
        for (int64_t i = lane; i < items; i += 32) {
          const float l =
              scale * dotKey(qw, cache, keyOf(i), g, headDim, kvDim);
          const float wt = i < mk ? 1.0f : float(S);
          if (l > mx) {
            sum = sum * expf(mx - l) + wt;
            mx = l;
          } else {
            sum += wt * expf(l - mx);
          }
        }
        warpSoftmaxStats(mx, sum);
        for (int64_t i = lane; i < items; i += 32) {
          const int64_t j = keyOf(i);
          const float l = scale * dotKey(qw, cache, j, g, headDim, kvDim);
          const float wt = i < mk ? 1.0f : float(S);
          atomicAdd(m + j / B, wt * expf(l - mx) / sum);
        }
      }
    }
    __syncthreads();
    // Mean over the rows that contributed: each head's masses sum to 1.
    for (int hi = warp; hi < group; hi += kSelectWarps) {
      float *m = s.mass + hi * blocks;
      float sum = 0.0f;
      for (int64_t kb = lane; kb < blocks; kb += 32)
        sum += m[kb];
      sum = warpSum(sum);
      if (sum > 0.0f)
        for (int64_t kb = lane; kb < blocks; kb += 32)
          m[kb] /= sum;
    }
    __syncthreads();
  }
  chooseBlocks(s, group, blocks, qb, p + r1, rule,
               streamingHead ? 0.0f : rule.gamma,
               streamingHead ? 0 : rule.minBudget, false);
  uint32_t *out = maskBits + (int64_t(g) * maskRows + w) * words;
  for (int64_t i = tid; i < words; i += blockDim.x)
    out[i] = i < (blocks + 31) / 32 ? s.bits[i] : 0u;
  if (tid == 0)
    atomicAdd(state, (unsigned long long)*s.kept);
}

/// Quest key summaries (kiln_k_attention_sparse_summary): the element-wise
/// min / max ([pages, kvDim] float) of every page of B positions that rows
/// [p, p + n) touch, recomputed from the cache rows [page start, p + n).
__global__ void __launch_bounds__(256)
    keySummaryKernel(const float *__restrict__ kCache, float *kMin,
                     float *kMax, int64_t n, int64_t kvDim, int64_t B,
                     int64_t maxSeq, int64_t capPages,
                     const int64_t *__restrict__ dPos) {
  const int64_t p = *dPos;
  const int64_t end = p + n < maxSeq ? p + n : maxSeq;
  if (end <= p)
    return;
  const int64_t first = p / B, touched = (end - 1) / B - first + 1;
  const int64_t total = (touched < capPages ? touched : capPages) * kvDim;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t page = first + e / kvDim, c = e % kvDim;
    const int64_t t0 = page * B, t1 = end < t0 + B ? end : t0 + B;
    float mn = kCache[t0 * kvDim + c], mx = mn;
    for (int64_t t = t0 + 1; t < t1; ++t) {
      const float x = kCache[t * kvDim + c];
      mn = fminf(mn, x);
      mx = fmaxf(mx, x);
    }
    kMin[page * kvDim + c] = mn;
    kMax[page * kvDim + c] = mx;
  }
}

/// Page selection of kiln_k_attention_sparse_decode (Quest, Tang et al.
/// 2024): block = KV head g. Each page's rank is the largest, over the
/// group's heads and the rows, of scale sum_d max(q_d min_d, q_d max_d) +
/// ln(keys); each head's mass is the mean over rows of the softmax over
/// pages of scale q . (min + max) / 2 + ln(keys); chooseBlocks in rank
/// order writes the KV head's single bit row.
__global__ void __launch_bounds__(kSelectThreads)
    questSelectKernel(const float *__restrict__ q,
                      const float *__restrict__ kMin,
                      const float *__restrict__ kMax, SparseRule rule,
                      uint32_t *__restrict__ maskBits,
                      unsigned long long *state, int words, int64_t n,
                      int heads, int group, int headDim, float scale,
                      const int64_t *__restrict__ dPos, int64_t capPages) {
  extern __shared__ double selectSmem[];
  const int64_t p = *dPos, T = p + n, B = rule.block;
  const int64_t pages = (T + B - 1) / B;
  const int g = blockIdx.x, tid = threadIdx.x, warp = tid >> 5,
            lane = tid & 31;
  if (T < rule.minTokens || pages <= rule.sink + rule.local ||
      pages > capPages) {
    if (g == 0 && tid == 0)
      state[1] = 1ull;
    return;
  }
  const int64_t qDim = int64_t(heads) * headDim;
  const int64_t kvDim = int64_t(heads / group) * headDim;
  SelectSmem s = SelectSmem::carve(selectSmem, group, pages, headDim);
  for (int64_t i = tid; i < group * pages; i += blockDim.x)
    s.mass[i] = 0.0f;
  for (int64_t i = tid; i < pages; i += blockDim.x)
    s.peak[i] = -INFINITY;
  __syncthreads();
  const bool streamingHead = rule.isStreaming(g);
  if (!streamingHead) {
    // Rank: one thread per page over every (head, row).
    for (int64_t kb = tid; kb < pages; kb += blockDim.x) {
      const float *mn = kMin + kb * kvDim + int64_t(g) * headDim;
      const float *mx = kMax + kb * kvDim + int64_t(g) * headDim;
      float rank = -INFINITY;
      for (int hi = 0; hi < group; ++hi)
        for (int64_t i = 0; i < n; ++i) {
          const int64_t keys = p + i + 1 - kb * B < B ? p + i + 1 - kb * B : B;
          if (keys <= 0)
            continue;
          const float *qh = q + i * qDim + int64_t(g * group + hi) * headDim;
          float bound = 0.0f;
          for (int d = 0; d < headDim; ++d)
            bound += fmaxf(qh[d] * mn[d], qh[d] * mx[d]);
          rank = fmaxf(rank, scale * bound + logf(float(keys)));
        }
      s.peak[kb] = rank;
    }
    // Mass: one warp per (head, row), softmax over the pages' midpoints.
    float *qw = s.qRow + warp * headDim;
    for (int64_t it = warp; it < group * n; it += kSelectWarps) {
      const int hi = int(it / n);
      const int64_t i = it % n, pos = p + i;
      __syncwarp();
      for (int d = lane; d < headDim; d += 32)
        qw[d] = q[i * qDim + int64_t(g * group + hi) * headDim + d];
      __syncwarp();
      auto logit = [&](int64_t kb) {
        const int64_t keys = pos + 1 - kb * B < B ? pos + 1 - kb * B : B;
        if (keys <= 0)
          return -INFINITY;
        const float *mn = kMin + kb * kvDim + int64_t(g) * headDim;
        const float *mx = kMax + kb * kvDim + int64_t(g) * headDim;
        float mid = 0.0f;
        for (int d = 0; d < headDim; ++d)
          mid = fmaf(qw[d], 0.5f * (mn[d] + mx[d]), mid);
        return scale * mid + logf(float(keys));
      };
      float mx = -INFINITY, sum = 0.0f;
      for (int64_t kb = lane; kb < pages; kb += 32)
        onlineAdd(mx, sum, logit(kb));
      warpSoftmaxStats(mx, sum);
      for (int64_t kb = lane; kb < pages; kb += 32) {
        const float l = logit(kb);
        if (l != -INFINITY)
          atomicAdd(s.mass + hi * pages + kb,
                    expf(l - mx) / sum / float(n));
      }
    }
    __syncthreads();
  }
  chooseBlocks(s, group, pages, pages - 1, T, rule,
               streamingHead ? 0.0f : rule.gamma,
               streamingHead ? 0 : rule.minBudget, true);
  uint32_t *out = maskBits + int64_t(g) * words;
  for (int64_t i = tid; i < words; i += blockDim.x)
    out[i] = i < (pages + 31) / 32 ? s.bits[i] : 0u;
  if (tid == 0)
    atomicAdd(state, (unsigned long long)*s.kept);
}

/// Selection then masked attention of one sparse call over `cache` (rows
/// [0, p + n) already appended), p = *dPos. kQuest: page selection from
/// kMin / kMax (f32) instead of the prefill estimate. Scratch (counters,
/// bits, mean keys) comes from the stream-ordered allocator and goes back
/// after the attention launch.
template <bool kQuest, typename T, typename Kv>
inline void sparseAttentionLaunch(kiln_cuda_ctx *ctx, const char *call,
                                  const T *q, const Kv &cache,
                                  const float *kMin, const float *kMax,
                                  T *out, int64_t n, int64_t heads,
                                  int64_t kvHeads, int64_t headDim,
                                  int64_t maxSeq, float scale,
                                  const SparseRule &rule,
                                  const int64_t *dPos) {
  cudaStream_t stream = streamOf(ctx);
  const int group = int(heads / kvHeads);
  const int64_t B = rule.block;
  const int64_t capBlocks = (maxSeq + B - 1) / B;
  const int words = int((capBlocks + 31) / 32);
  const int64_t perChunk = (n + B - 1) / B + 1;
  const int maskRows =
      kQuest ? 1 : int(perChunk < capBlocks ? perChunk : capBlocks);
  const bool pooled = !kQuest && rule.stride == 0;
  const size_t maskBytes =
      sizeof(uint32_t) * size_t(kvHeads) * size_t(maskRows) * size_t(words);
  const size_t head = 2 * sizeof(unsigned long long) + maskBytes;
  const size_t meanOffset = (head + 255) / 256 * 256;
  const size_t bytes =
      meanOffset + (pooled ? sizeof(float) * size_t(kvHeads) *
                                 size_t(capBlocks) * size_t(headDim)
                           : 0);
  const size_t smem = SelectSmem::bytes(group, capBlocks, int(headDim));
  int device = 0, smemMax = 0;
  if (!KILN_CUDA_CHECK(ctx, cudaGetDevice(&device)) ||
      !KILN_CUDA_CHECK(ctx, cudaDeviceGetAttribute(
                                &smemMax,
                                cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                device)) ||
      !KILN_CUDA_ARG(ctx, smem <= size_t(smemMax), call,
                     "too many key blocks for the block selection's shared "
                     "memory (max_seq / block); use a larger block"))
    return;
  void *buf = nullptr;
  if (!KILN_CUDA_CHECK(ctx, cudaMallocAsync(&buf, bytes, stream)))
    return;
  auto *state = static_cast<unsigned long long *>(buf);
  auto *bits = reinterpret_cast<uint32_t *>(state + 2);
  float *means = reinterpret_cast<float *>(static_cast<uint8_t *>(buf) +
                                           meanOffset);
  SparseMask mask;
  mask.bits = bits;
  mask.state = state;
  mask.block = B;
  mask.words = words;
  mask.rows = maskRows;
  mask.kvHeads = int(kvHeads);
  mask.perQueryBlock = !kQuest;
  bool ok = KILN_CUDA_CHECK(ctx, cudaMemsetAsync(buf, 0, head, stream));
  if (ok && pooled) {
    sparseKeyMeansKernel<Kv>
        <<<gridFor(ctx, kvHeads * capBlocks * headDim, 256), 256, 0,
           stream>>>(cache, means, int(kvHeads), int(headDim), n, B,
                     capBlocks, dPos);
    ok = KILN_CUDA_LAUNCHED(ctx, "sparseKeyMeansKernel<<<>>>");
  }
  if (ok) {
    if constexpr (kQuest) {
      ok = smem <= 48 * 1024 ||
           KILN_CUDA_CHECK(ctx, cudaFuncSetAttribute(
                                    questSelectKernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
      if (ok) {
        questSelectKernel<<<unsigned(kvHeads), kSelectThreads, smem,
                            stream>>>(q, kMin, kMax, rule, bits, state, words,
                                      n, int(heads), group, int(headDim),
                                      scale, dPos, capBlocks);
        ok = KILN_CUDA_LAUNCHED(ctx, "questSelectKernel<<<>>>");
      }
    } else {
      ok = smem <= 48 * 1024 ||
           KILN_CUDA_CHECK(ctx, cudaFuncSetAttribute(
                                    sparseSelectKernel<T, Kv>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
      if (ok) {
        sparseSelectKernel<T, Kv>
            <<<dim3(unsigned(maskRows), unsigned(kvHeads)), kSelectThreads,
               smem, stream>>>(q, cache, means, capBlocks, rule, bits, state,
                               maskRows, words, n, int(heads), group,
                               int(headDim), scale, dPos);
        ok = KILN_CUDA_LAUNCHED(ctx, "sparseSelectKernel<<<>>>");
      }
    }
  }
  if (ok)
    attentionDispatch<true>(ctx, q, cache, out, n, heads, kvHeads, headDim,
                            maxSeq, scale, 0, dPos, mask);
  // Back to the pool in stream order, also after an error.
  const cudaError_t freed = cudaFreeAsync(buf, stream);
  if (ok && !skip(ctx))
    KILN_CUDA_CHECK(ctx, freed);
}

/// The rule of a wrapper's arguments.
inline SparseRule sparseRule(float gamma, int64_t block, int64_t sink,
                             int64_t local, int64_t minBudget,
                             int64_t maxBudget, int64_t minTokens,
                             int64_t streaming, int64_t stride) {
  return SparseRule{gamma,     block,     sink,      local, minBudget,
                    maxBudget, minTokens, streaming, stride};
}

} // namespace kiln_cuda_detail

/// Dynamic block-sparse prefill attention (kernel_abi.h
/// kiln_k_attention_sparse; p = *ctx->d_pos, `pos` ignored): appends k, v
/// (T [n, kv_heads * head_dim]) at rows [p, p + n) of k_cache, v_cache (T
/// [max_seq, kv_heads * head_dim]), selects per (KV head, query block of
/// `block` positions) the key blocks to keep (stride 0: pooled estimate;
/// stride S: antidiagonal; the gamma / budget / streaming rule of the CPU
/// kernel) and runs the FlashAttention-2 / flash-decoding kernels over the
/// kept keys into out (T [n, heads * head_dim]). Dense (kiln_cuda_attention
/// exactly) when gamma >= 1, the parameters are outside the verified
/// ranges, p + n < min_tokens, every block is mandatory or 90% of the
/// causal block pairs are kept. `layer` is unused here (the CPU kernels'
/// counters). Errors: cudaErrorInvalidValue for bad shapes or a selection
/// that needs more shared memory than the device has (max_seq / block
/// above about 5,000 blocks on an H100 with GQA group 4).
template <typename T>
inline void kiln_cuda_attention_sparse(
    kiln_cuda_ctx *ctx, const T *q, const T *k, const T *v, T *k_cache,
    T *v_cache, T *out, int64_t n, int64_t pos, int64_t heads,
    int64_t kv_heads, int64_t head_dim, int64_t max_seq, float scale,
    float gamma, int64_t block, int64_t sink, int64_t local,
    int64_t min_budget, int64_t max_budget, int64_t min_tokens, int64_t layer,
    int64_t streaming, int64_t stride) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)layer;
  const SparseRule rule = sparseRule(gamma, block, sink, local, min_budget,
                                     max_budget, min_tokens, streaming, stride);
  if (!(gamma < 1.0f) || !rule.valid()) {
    kiln_cuda_attention(ctx, q, k, v, k_cache, v_cache, out, n, pos, heads,
                        kv_heads, head_dim, max_seq, scale);
    return;
  }
  if (skip(ctx) || n <= 0 ||
      !attentionArgsOk(ctx, "kiln_cuda_attention_sparse", heads, kv_heads,
                       head_dim, max_seq))
    return;
  const int64_t kvDim = kv_heads * head_dim;
  if (!appendContiguous(ctx, k, v, k_cache, v_cache, n, kvDim, max_seq))
    return;
  sparseAttentionLaunch<false>(ctx, "kiln_cuda_attention_sparse", q,
                               KvPlain<T>{k_cache, v_cache}, nullptr, nullptr,
                               out, n, heads, kv_heads, head_dim, max_seq,
                               scale, rule, ctx->d_pos);
}

/// kiln_cuda_attention_sparse on a cache with Quest key summaries
/// (kernel_abi.h kiln_k_attention_sparse_summary): also recomputes k_min,
/// k_max (f32 [ceil(max_seq / block), kv_heads * head_dim]) of the pages
/// rows [p, p + n) touch. f32 only.
template <typename T>
inline void kiln_cuda_attention_sparse_summary(
    kiln_cuda_ctx *ctx, const T *q, const T *k, const T *v, T *k_cache,
    T *v_cache, float *k_min, float *k_max, T *out, int64_t n, int64_t pos,
    int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t max_seq,
    float scale, float gamma, int64_t block, int64_t sink, int64_t local,
    int64_t min_budget, int64_t max_budget, int64_t min_tokens, int64_t layer,
    int64_t streaming, int64_t stride) {
  using namespace kiln_cuda_detail;
  static_assert(std::is_same<T, float>::value,
                "Quest key summaries have f32 kernels only");
  kiln_cuda_attention_sparse(ctx, q, k, v, k_cache, v_cache, out, n, pos,
                             heads, kv_heads, head_dim, max_seq, scale, gamma,
                             block, sink, local, min_budget, max_budget,
                             min_tokens, layer, streaming, stride);
  if (skip(ctx) || n <= 0 || block < 1)
    return;
  const int64_t kvDim = kv_heads * head_dim;
  const int64_t capPages = (n + block - 1) / block + 1;
  keySummaryKernel<<<gridFor(ctx, capPages * kvDim, 256), 256, 0,
                     streamOf(ctx)>>>(k_cache, k_min, k_max, n, kvDim, block,
                                      max_seq, capPages, ctx->d_pos);
  KILN_CUDA_LAUNCHED(ctx, "keySummaryKernel<<<>>>");
}

/// Sparse decode, Quest (kernel_abi.h kiln_k_attention_sparse_decode;
/// Tang et al. 2024): appends k, v and updates the key summaries of the
/// touched pages, then per KV head ranks the pages by their score bound,
/// estimates the heads' masses from the pages' midpoint keys, keeps pages
/// by the gamma / budget rule and runs flash-decoding (n == 1) or the
/// prefill tiles over the kept pages only. Dense as the CPU kernel. f32.
template <typename T>
inline void kiln_cuda_attention_sparse_decode(
    kiln_cuda_ctx *ctx, const T *q, const T *k, const T *v, T *k_cache,
    T *v_cache, float *k_min, float *k_max, T *out, int64_t n, int64_t pos,
    int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t max_seq,
    float scale, float gamma, int64_t block, int64_t sink, int64_t local,
    int64_t min_budget, int64_t max_budget, int64_t min_tokens, int64_t layer,
    int64_t streaming, int64_t stride) {
  using namespace kiln_cuda_detail;
  static_assert(std::is_same<T, float>::value,
                "Quest sparse decode has f32 kernels only");
  (void)layer;
  (void)pos;
  // Parameters outside the verified ranges run dense, summaries untouched
  // (as the CPU kernel).
  if (block < 1 || sink < 0 || local < 1 || !(gamma > 0.0f)) {
    kiln_cuda_attention(ctx, q, k, v, k_cache, v_cache, out, n, pos, heads,
                        kv_heads, head_dim, max_seq, scale);
    return;
  }
  if (skip(ctx) || n <= 0 ||
      !attentionArgsOk(ctx, "kiln_cuda_attention_sparse_decode", heads,
                       kv_heads, head_dim, max_seq))
    return;
  const int64_t kvDim = kv_heads * head_dim;
  cudaStream_t stream = streamOf(ctx);
  if (!appendContiguous(ctx, k, v, k_cache, v_cache, n, kvDim, max_seq))
    return;
  const int64_t capPages = (n + block - 1) / block + 1;
  keySummaryKernel<<<gridFor(ctx, capPages * kvDim, 256), 256, 0, stream>>>(
      k_cache, k_min, k_max, n, kvDim, block, max_seq, capPages, ctx->d_pos);
  if (!KILN_CUDA_LAUNCHED(ctx, "keySummaryKernel<<<>>>"))
    return;
  const SparseRule rule = sparseRule(gamma, block, sink, local, min_budget,
                                     max_budget, min_tokens, streaming, stride);
  if (!(gamma < 1.0f)) {
    attentionDispatch(ctx, q, KvPlain<T>{k_cache, v_cache}, out, n, heads,
                      kv_heads, head_dim, max_seq, scale);
    return;
  }
  sparseAttentionLaunch<true>(ctx, "kiln_cuda_attention_sparse_decode", q,
                              KvPlain<T>{k_cache, v_cache}, k_min, k_max, out,
                              n, heads, kv_heads, head_dim, max_seq, scale,
                              rule, ctx->d_pos);
}

/// kernel_abi.h kiln_k_step_attention_sparse: kiln_cuda_step_attention, but
/// each sequence's chunk of n > 1 rows over a plain pool selects its key
/// blocks as kiln_cuda_attention_sparse does (through its block table);
/// one-row decode steps and the 8-bit pools run the dense kernels.
template <typename T>
inline void kiln_cuda_step_attention_sparse(
    kiln_cuda_ctx *ctx, const T *q, const T *k, const T *v, T *out,
    int64_t layer, int64_t elem, int64_t format, int64_t heads,
    int64_t kv_heads, int64_t head_dim, float scale, int64_t window,
    float gamma, int64_t block, int64_t sink, int64_t local,
    int64_t min_budget, int64_t max_budget, int64_t min_tokens,
    int64_t streaming, int64_t stride) {
  using namespace kiln_cuda_detail;
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  (void)elem;
  const char *call = "kiln_cuda_step_attention_sparse";
  const SparseRule rule = sparseRule(gamma, block, sink, local, min_budget,
                                     max_budget, min_tokens, streaming, stride);
  if (skip(ctx) || !stepArgsOk(ctx, call, layer) ||
      !attentionArgsOk(ctx, call, heads, kv_heads, head_dim, 1))
    return;
  const kiln_cuda_batch &b = *ctx->batch;
  const kiln_cuda_paged_kv &c = ctx->kv_pages[layer];
  const bool sparse = gamma < 1.0f && rule.valid() && window <= 0 &&
                      c.format == KILN_CUDA_KV_PLAIN && format == c.format;
  const int64_t qDim = heads * head_dim, kvDim = kv_heads * head_dim;
  const int64_t maxSeq = int64_t(b.max_blocks) * c.block_tokens;
  for (int32_t s = 0; s < b.num_seqs; ++s) {
    const int64_t r0 = b.row_start[s], n = b.row_count[s];
    if (!sparse || n == 1) {
      stepAttentionSeq<false>(ctx, call, s, q, k, v, out, layer, format,
                              heads, kv_heads, head_dim, scale, window,
                              nullptr, 0, 0.0f);
    } else {
      const int64_t *dPos = b.d_seq_pos + s;
      const RowsPaged slot{b.d_block_tables + int64_t(s) * b.max_blocks,
                           int(c.block_tokens)};
      auto *kp = static_cast<T *>(c.k_pool);
      auto *vp = static_cast<T *>(c.v_pool);
      kvAppendKernel<T, RowsPaged>
          <<<gridFor(ctx, n * kvDim, 256), 256, 0, streamOf(ctx)>>>(
              k + r0 * kvDim, v + r0 * kvDim, kp, vp, n, kvDim, maxSeq, dPos,
              slot);
      if (!KILN_CUDA_LAUNCHED(ctx, "kvAppendKernel<<<>>>"))
        return;
      sparseAttentionLaunch<false>(
          ctx, call, q + r0 * qDim, KvPaged<KvPlain<T>>{{kp, vp}, slot, kvDim},
          nullptr, nullptr, out + r0 * qDim, n, heads, kv_heads, head_dim,
          maxSeq, scale, rule, dPos);
    }
    if (skip(ctx))
      return;
  }
}

#endif // KILN_CODEGEN_CUDA_KILNCUDASPARSE_CUH

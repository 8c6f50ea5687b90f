//===- KilnCudaSampling.cuh - Greedy and top-k / top-p sampling -*- CUDA -*-===//
//
// Sampling on the device: argmax and temperature / top-k / top-p.
// Part of KilnKernels.cuh.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CODEGEN_CUDA_KILNCUDASAMPLING_CUH
#define KILN_CODEGEN_CUDA_KILNCUDASAMPLING_CUH

#include "KilnCudaCommon.cuh"

namespace kiln_cuda_detail {

// Sampling
//===----------------------------------------------------------------------===//

constexpr int kSampleThreads = 1024;
constexpr int kSampleCap = 2048; // candidates sorted in shared memory

template <int kUnused = 0>
__global__ void __launch_bounds__(kSampleThreads)
    argmaxKernel(const float *__restrict__ logits, int vocab,
                 int32_t *outToken) {
  __shared__ float shV[32];
  __shared__ int shI[32];
  const int best = blockArgmax(logits, vocab, shV, shI);
  if (threadIdx.x == 0)
    *outToken = best;
}

/// Softmax with temperature, top-k, top-p, inverse-CDF draw; the semantics of
/// the CPU sampler (runtime/src/tokenizer/Sampler.cpp, llama2.c run.c):
///   temperature == 0: argmax (first maximum).
///   e_i = exp(l_i / T - max_j l_j / T) (unnormalised probabilities, kept in
///   `e` = scratch[vocab]), Z = sum e_i.
///   top-k on (0 < k < vocab): the k most probable tokens (ties: lower id),
///     sorted by probability; with top-p in (0, 1) the shortest prefix whose
///     cumulative mass exceeds top_p times the kept mass; draw r = coin * kept
///     mass over the prefix in sorted order.
///   top-p only: candidates e_i >= (1 - top_p) / (vocab - 1) * Z (run.c's
///     prefilter, at most kSampleCap of the most probable), sorted, shortest
///     prefix with mass > top_p * Z, draw as above.
///   neither: draw r = coin * Z over token-id order.
/// Kept sets are found by a 4-pass 8-bit radix select on the float bits of e
/// (non-negative floats order like their bit patterns), gathered into shared
/// memory and bitonic-sorted by (probability desc, id asc). One block.
/// Results match the CPU sampler's distribution exactly and its token for a
/// given coin except where float summation order moves a CDF boundary.
template <int kUnused = 0>
__global__ void __launch_bounds__(kSampleThreads)
    sampleKernel(const float *__restrict__ logits, int vocab, float temperature,
                 int topK, float topP, const float *__restrict__ dCoin,
                 float *e, int32_t *outToken) {
  using ScanI = cub::BlockScan<int, kSampleThreads>;
  using ScanF = cub::BlockScan<float, kSampleThreads>;
  __shared__ union {
    typename ScanI::TempStorage i;
    typename ScanF::TempStorage f;
  } scanStorage;
  __shared__ float shV[32];
  __shared__ int shI[32];
  __shared__ unsigned hist[256];
  __shared__ float candV[kSampleCap];
  __shared__ int candI[kSampleCap];
  __shared__ float cum[kSampleCap];
  __shared__ unsigned sPrefix;
  __shared__ int sRemaining, sCount, sFound;
  const int tid = threadIdx.x;

  if (temperature == 0.0f) {
    const int best = blockArgmax(logits, vocab, shV, shI);
    if (tid == 0)
      *outToken = best;
    return;
  }
  const float coin = *dCoin;

  float mx = -INFINITY;
  for (int i = tid; i < vocab; i += blockDim.x)
    mx = fmaxf(mx, logits[i] / temperature);
  const float M = blockMax(mx, shV);
  float z = 0.0f;
  for (int i = tid; i < vocab; i += blockDim.x) {
    const float ei = expf(logits[i] / temperature - M);
    e[i] = ei;
    z += ei;
  }
  const float Z = blockSum(z, shV); // its barriers publish e[] to the block

  const bool useK = topK > 0 && topK < vocab;
  const bool useP = topP > 0.0f && topP < 1.0f;
  if (!useK && !useP) {
    // Inverse CDF in id order, one block-wide chunk at a time.
    const float r = coin * Z;
    float base = 0.0f;
    for (int c = 0; c < vocab; c += blockDim.x) {
      const int i = c + tid;
      const float v = i < vocab ? e[i] : 0.0f;
      float incl, total;
      __syncthreads(); // scanStorage reuse
      ScanF(scanStorage.f).InclusiveSum(v, incl, total);
      if (tid == 0)
        sFound = vocab;
      __syncthreads();
      if (i < vocab && r < base + incl)
        atomicMin(&sFound, i);
      __syncthreads();
      if (sFound < vocab) {
        if (tid == 0)
          *outToken = sFound;
        return;
      }
      base += total;
    }
    if (tid == 0)
      *outToken = vocab - 1;
    return;
  }

  int want;
  if (useK) {
    want =
        topK < KILN_CUDA_SAMPLE_MAX_TOP_K ? topK : KILN_CUDA_SAMPLE_MAX_TOP_K;
  } else {
    const float cutoff = (1.0f - topP) / float(vocab - 1) * Z;
    float cnt = 0.0f;
    for (int i = tid; i < vocab; i += blockDim.x)
      cnt += e[i] >= cutoff ? 1.0f : 0.0f;
    const int count = int(blockSum(cnt, shV) + 0.5f);
    want = count < 1 ? 1 : (count > kSampleCap ? kSampleCap : count);
  }

  // Radix select: tau = bits of the want-th largest e; `remaining` of the
  // elements equal to tau belong to the kept set.
  if (tid == 0) {
    sPrefix = 0;
    sRemaining = want;
  }
  unsigned mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    __syncthreads();
    for (int b = tid; b < 256; b += blockDim.x)
      hist[b] = 0;
    __syncthreads();
    const unsigned prefix = sPrefix;
    for (int i = tid; i < vocab; i += blockDim.x) {
      const unsigned u = __float_as_uint(e[i]);
      if ((u & mask) == prefix)
        atomicAdd(&hist[(u >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      int above = 0, rem = sRemaining;
      int b = 255;
      for (; b > 0; --b) {
        if (above + int(hist[b]) >= rem)
          break;
        above += int(hist[b]);
      }
      sRemaining = rem - above;
      sPrefix = prefix | (unsigned(b) << shift);
    }
    mask |= 255u << shift;
  }
  __syncthreads();
  const unsigned tau = sPrefix;
  const int ties = sRemaining;     // >= 1
  const int greater = want - ties; // elements strictly above tau
  if (tid == 0)
    sCount = 0;
  for (int i = tid; i < kSampleCap; i += blockDim.x) {
    candV[i] = -1.0f; // padding sorts last
    candI[i] = INT32_MAX;
  }
  __syncthreads();
  for (int i = tid; i < vocab; i += blockDim.x)
    if (__float_as_uint(e[i]) > tau) {
      const int slot = atomicAdd(&sCount, 1);
      candV[slot] = e[i];
      candI[slot] = i;
    }
  // Ties at tau in id order, a block-wide chunk at a time.
  int tieBase = 0;
  for (int c = 0; c < vocab && tieBase < ties; c += blockDim.x) {
    const int i = c + tid;
    const int flag = (i < vocab && __float_as_uint(e[i]) == tau) ? 1 : 0;
    int excl, total;
    __syncthreads();
    ScanI(scanStorage.i).ExclusiveSum(flag, excl, total);
    if (flag && tieBase + excl < ties) {
      candV[greater + tieBase + excl] = e[i];
      candI[greater + tieBase + excl] = i;
    }
    tieBase += total;
  }
  __syncthreads();

  // Bitonic sort, "before" = larger probability, then smaller id.
  for (int k = 2; k <= kSampleCap; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int t = tid; t < kSampleCap; t += blockDim.x) {
        const int o = t ^ j;
        if (o <= t)
          continue;
        const float vt = candV[t], vo = candV[o];
        const int it = candI[t], io = candI[o];
        const bool oFirst = vo > vt || (vo == vt && io < it);
        const bool tFirst = vt > vo || (vt == vo && it < io);
        if ((t & k) == 0 ? oFirst : tFirst) {
          candV[t] = vo;
          candV[o] = vt;
          candI[t] = io;
          candI[o] = it;
        }
      }
      __syncthreads();
    }

  // Inclusive prefix sums in sorted order (blocked: 2 items per thread).
  constexpr int kItems = kSampleCap / kSampleThreads;
  {
    float in[kItems], outv[kItems];
    for (int it = 0; it < kItems; ++it) {
      const int idx = tid * kItems + it;
      in[it] = idx < want ? candV[idx] : 0.0f;
    }
    __syncthreads();
    ScanF(scanStorage.f).InclusiveSum(in, outv);
    for (int it = 0; it < kItems; ++it)
      cum[tid * kItems + it] = outv[it];
  }
  __syncthreads();

  int lastIdx = want - 1;
  float total = cum[want - 1];
  if (useP) {
    const float limit = useK ? topP * total : topP * Z;
    if (tid == 0)
      sFound = want - 1;
    __syncthreads();
    for (int i = tid; i < want; i += blockDim.x)
      if (cum[i] > limit)
        atomicMin(&sFound, i);
    __syncthreads();
    lastIdx = sFound;
    total = cum[lastIdx];
    __syncthreads();
  }
  const float r = coin * total;
  if (tid == 0)
    sFound = lastIdx;
  __syncthreads();
  for (int i = tid; i <= lastIdx; i += blockDim.x)
    if (r < cum[i])
      atomicMin(&sFound, i);
  __syncthreads();
  if (tid == 0)
    *outToken = candI[sFound];
}

//===----------------------------------------------------------------------===//

} // namespace kiln_cuda_detail

#endif // KILN_CODEGEN_CUDA_KILNCUDASAMPLING_CUH

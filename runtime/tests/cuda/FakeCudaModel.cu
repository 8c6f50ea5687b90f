//===- FakeCudaModel.cu - A stand-in CUDA model.so for executor tests -----===//
//
// Implements cuda_abi.h with trivial kernels so that the CUDA executor's
// plumbing can be checked on a GPU without a compiled model:
//  * weights: word 0 is the vocabulary size (float); word i > 0 is the
//    uint32 i * 2654435761 (prefill counts mismatches: checks the upload);
//  * each step reads its position from *ctx->d_pos (device memory, as graph
//    replay requires), stores kv[pos + i] = token, and writes logits:
//      [(last + 1) % vocab] = pos + n,  [0] = -sum(kv[0, pos + n)),
//      [1] = -(weight mismatches seen by the last prefill);
//  * kiln_cuda_sample: argmax when temperature == 0, else
//    min(vocab - 1, floor(coin * vocab)).
// Host-side counters are exported for the test; fake_fail_next makes the next
// entry point report an error through ctx->status.
//
//===----------------------------------------------------------------------===//
#include "kiln_rt/cuda_abi.h"

#include <cuda_runtime.h>

#include <cstdio>

extern "C" {
__attribute__((visibility("default"))) int64_t fake_cuda_prefill_calls = 0;
__attribute__((visibility("default"))) int64_t fake_cuda_decode_calls = 0;
__attribute__((visibility("default"))) int64_t fake_cuda_sm_count = 0;
__attribute__((visibility("default"))) int64_t fake_cuda_fail_next = 0;
}

namespace {

__device__ unsigned long long gMismatches;

__global__ void checkWeights(const uint32_t *w, uint64_t words) {
  unsigned long long bad = 0;
  for (uint64_t i = 1 + blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words;
       i += uint64_t(gridDim.x) * blockDim.x)
    bad += w[i] != uint32_t(i * 2654435761u);
  if (bad)
    atomicAdd(&gMismatches, bad);
}

__global__ void step(const int32_t *tokens, int64_t n, const int64_t *dPos,
                     float *kv, float *logits, const float *weights,
                     int64_t kvFloats) {
  int vocab = int(weights[0]);
  int64_t pos = *dPos;
  if (threadIdx.x == 0)
    for (int64_t i = 0; i < n && pos + i < kvFloats; ++i)
      kv[pos + i] = float(tokens[i]);
  __syncthreads();
  for (int i = threadIdx.x; i < vocab; i += blockDim.x)
    logits[i] = 0.0f;
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int64_t i = 0; i < pos + n; ++i)
      sum += kv[i];
    logits[0] = -sum;
    logits[1] = -float(gMismatches);
    logits[(tokens[n - 1] + 1) % vocab] = float(pos + n);
  }
}

__global__ void sampleKernel(const float *logits, int vocab, float temperature,
                             const float *coin, int32_t *out) {
  if (temperature == 0.0f) {
    int best = 0;
    for (int i = 1; i < vocab; ++i)
      if (logits[i] > logits[best])
        best = i;
    *out = best;
  } else {
    int t = int(*coin * float(vocab));
    *out = t < vocab ? t : vocab - 1;
  }
}

// The test's manifest: vocab 16, KV 1 layer * 2 * 32 * 1 * 2 floats.
constexpr int64_t kKvFloats = 1 * 2 * 32 * 1 * 2;
constexpr int kVocab = 16;

bool failRequested(kiln_cuda_ctx *ctx, const char *what) {
  if (!fake_cuda_fail_next)
    return false;
  fake_cuda_fail_next = 0;
  ctx->status = 1;
  std::snprintf(ctx->error, sizeof(ctx->error), "%s: fake failure", what);
  return true;
}

void checkLaunch(kiln_cuda_ctx *ctx, const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess && ctx->status == 0) {
    ctx->status = int32_t(e);
    std::snprintf(ctx->error, sizeof(ctx->error), "%s failed: %s", what,
                  cudaGetErrorString(e));
  }
}

} // namespace

extern "C" {

__attribute__((visibility("default"))) int32_t kiln_cuda_abi_version(void) {
  return KILN_CUDA_ABI_VERSION;
}

/// The sizes of CudaExecutorTest.cpp's manifest (plan_info.h).
__attribute__((visibility("default"))) void
kiln_plan_info(kiln_plan_info_t *out) {
  out->arena_bytes = 1024;
  out->max_prefill_tokens = 3;
  out->vocab_size = 16;
  out->kv_cache_bytes = 1 * 2 * 32 * 1 * 2 * 4;
  out->max_seq = 32;
  out->prefill_weights_extent = (int64_t(65) << 20) + 64; // all of weights.bin
  out->decode_weights_extent = 4;                          // word 0 only
  out->step_max_tokens = 0; // no batched step entry point
  out->step_weights_extent = 0;
  out->tp_size = 1;
}

__attribute__((visibility("default"))) uint64_t kiln_cuda_workspace_bytes(void) {
  return 4096;
}

__attribute__((visibility("default"))) void
kiln_prefill(kiln_cuda_ctx *ctx, int64_t n, int64_t pos) {
  (void)pos;
  ++fake_cuda_prefill_calls;
  fake_cuda_sm_count = ctx->sm_count;
  if (failRequested(ctx, "kiln_prefill"))
    return;
  if (!ctx->cublaslt || !ctx->workspace || ctx->workspace_bytes < 4096) {
    ctx->status = 2;
    std::snprintf(ctx->error, sizeof(ctx->error), "bad context");
    return;
  }
  cudaStream_t s = static_cast<cudaStream_t>(ctx->stream);
  void *mismatches = nullptr;
  cudaGetSymbolAddress(&mismatches, gMismatches);
  cudaMemsetAsync(mismatches, 0, sizeof(unsigned long long), s);
  // Word count: the test writes 65 MiB + 64 bytes of weights.
  uint64_t words = ((uint64_t(65) << 20) + 64) / 4;
  checkWeights<<<264, 256, 0, s>>>(reinterpret_cast<const uint32_t *>(ctx->weights),
                                   words);
  step<<<1, 128, 0, s>>>(ctx->tokens, n, ctx->d_pos, reinterpret_cast<float *>(ctx->kv),
                         ctx->logits, reinterpret_cast<const float *>(ctx->weights),
                         kKvFloats);
  checkLaunch(ctx, "fake prefill");
}

__attribute__((visibility("default"))) void
kiln_decode(kiln_cuda_ctx *ctx, int64_t n, int64_t pos) {
  (void)pos;
  ++fake_cuda_decode_calls;
  if (failRequested(ctx, "kiln_decode"))
    return;
  cudaStream_t s = static_cast<cudaStream_t>(ctx->stream);
  step<<<1, 128, 0, s>>>(ctx->tokens, n, ctx->d_pos, reinterpret_cast<float *>(ctx->kv),
                         ctx->logits, reinterpret_cast<const float *>(ctx->weights),
                         kKvFloats);
  checkLaunch(ctx, "fake decode");
}

__attribute__((visibility("default"))) void
kiln_cuda_sample(kiln_cuda_ctx *ctx, float temperature, int32_t top_k,
                 float top_p, const float *d_coin, int32_t *d_token) {
  (void)top_k;
  (void)top_p;
  sampleKernel<<<1, 1, 0, static_cast<cudaStream_t>(ctx->stream)>>>(
      ctx->logits, kVocab, temperature, d_coin, d_token);
  checkLaunch(ctx, "fake sample");
}

} // extern "C"

//===- Kernels.cpp - CPU kernels of the Kiln kernel ABI -----------*- C++ -*-===//
//
// float32 implementations of runtime/include/kiln_rt/kernel_abi.h, called by
// emitted model.so code. Numerics follow llama2.c run.c (rmsnorm, softmax with
// max subtraction, RoPE with powf/cosf/sinf on float, SiLU with expf) so that
// greedy generation matches it token for token; reductions use several partial
// sums (and double where it is free) to stay within 1e-4 relative error of a
// float64 reference. Threads: OpenMP over rows / heads; cblas_sgemm (OpenBLAS,
// one BLAS thread per OpenMP thread) for linear layers with n > 1.
//
//===----------------------------------------------------------------------===//
#include "cpu/Kernels.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace kiln::rt::cpu {

/// Work below this many floats (or multiply-adds) runs on one thread: an
/// OpenMP fork/join costs microseconds, far more when cores are shared.
static constexpr int64_t kParallelGrain = 1 << 17;

/// y[r] = dot(w[r, 0:in], x[0:in]) for r in [rowBegin, rowEnd). Sixteen
/// partial sums (vectorized, FMA where available) reduced pairwise: more
/// accurate than run.c's sequential sum, same result up to rounding.
__attribute__((target_clones("avx512f", "avx2", "default"))) void
gemvRows(const float *__restrict x, const float *__restrict w,
         float *__restrict y, int64_t in, int64_t rowBegin, int64_t rowEnd) {
  for (int64_t r = rowBegin; r < rowEnd; ++r) {
    const float *wr = w + r * in;
    float acc[16] = {0};
    int64_t j = 0;
    for (; j + 16 <= in; j += 16)
      for (int l = 0; l < 16; ++l)
        acc[l] += wr[j + l] * x[j + l];
    float tail = 0.0f;
    for (; j < in; ++j)
      tail += wr[j] * x[j];
    for (int s = 8; s > 0; s >>= 1)
      for (int l = 0; l < s; ++l)
        acc[l] += acc[l + s];
    y[r] = acc[0] + tail;
  }
}

void setBlasSingleThreaded() {
  static bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

} // namespace kiln::rt::cpu

using namespace kiln::rt::cpu;

// The kernel ABI must stay exported from libkiln_runtime.so.
extern "C" {

void kiln_k_embedding(const int32_t *tokens, int64_t n, const float *table,
                      int64_t vocab, int64_t dim, float *out) {
  (void)vocab; // ids were validated against vocab by the runtime
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out + i * dim, table + int64_t(tokens[i]) * dim,
                sizeof(float) * size_t(dim));
}

void kiln_k_rms_norm(const float *x, const float *w, float *y, int64_t n,
                     int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (n * dim > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const float *xi = x + i * dim;
    float *yi = y + i * dim;
    double ss = 0.0;
    for (int64_t j = 0; j < dim; ++j)
      ss += double(xi[j]) * double(xi[j]);
    // run.c: ss /= size; ss += 1e-5f; ss = 1.0f / sqrtf(ss).
    float s = float(ss / double(dim));
    s += eps;
    s = 1.0f / sqrtf(s);
    for (int64_t j = 0; j < dim; ++j)
      yi[j] = w[j] * (s * xi[j]);
  }
}

void kiln_k_linear(const float *x, const float *w, float *y, int64_t n,
                   int64_t in, int64_t out) {
  if (n <= 0 || out <= 0)
    return;
  if (n == 1) {
    // Decode: memory-bound GEMV, rows split over threads.
    bool parallel = out * in > kParallelGrain;
#pragma omp parallel if (parallel)
    {
      int t = omp_get_thread_num(), nt = omp_get_num_threads();
      int64_t chunk = (out + nt - 1) / nt;
      int64_t begin = std::min<int64_t>(out, t * chunk);
      int64_t end = std::min<int64_t>(out, begin + chunk);
      gemvRows(x, w, y, in, begin, end);
    }
    return;
  }
  // Prefill: each OpenMP thread multiplies x by its slice of w's rows with a
  // single-threaded sgemm (no competing BLAS thread pool).
  setBlasSingleThreaded();
  bool parallel = n * out * in > kParallelGrain;
#pragma omp parallel if (parallel)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    // Slices are multiples of 16 rows so each thread writes whole lines.
    int64_t chunk = ((out + nt - 1) / nt + 15) / 16 * 16;
    int64_t begin = std::min<int64_t>(out, t * chunk);
    int64_t end = std::min<int64_t>(out, begin + chunk);
    if (end > begin)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n),
                  int(end - begin), int(in), 1.0f, x, int(in), w + begin * in,
                  int(in), 0.0f, y + begin, int(out));
  }
}

void kiln_k_rope(const float *x, float *y, int64_t n, int64_t heads,
                 int64_t head_dim, int64_t rot_dim, int64_t pos, float theta) {
  int64_t pairs = rot_dim / 2;
  std::vector<float> freq(size_t(pairs > 0 ? pairs : 0));
  for (int64_t i = 0; i < pairs; ++i) // run.c: head_dim_i / (float)head_size
    freq[size_t(i)] = 1.0f / powf(theta, float(2 * i) / float(head_dim));
  int64_t width = heads * head_dim;
#pragma omp parallel if (n * width > kParallelGrain)
  {
    std::vector<float> fcr(freq.size()), fci(freq.size());
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      float p = float(pos + r);
      for (int64_t i = 0; i < pairs; ++i) {
        float val = p * freq[size_t(i)];
        fcr[size_t(i)] = cosf(val);
        fci[size_t(i)] = sinf(val);
      }
      const float *xr = x + r * width;
      float *yr = y + r * width;
      for (int64_t h = 0; h < heads; ++h) {
        const float *xh = xr + h * head_dim;
        float *yh = yr + h * head_dim;
        for (int64_t i = 0; i < pairs; ++i) {
          float v0 = xh[2 * i], v1 = xh[2 * i + 1];
          yh[2 * i] = v0 * fcr[size_t(i)] - v1 * fci[size_t(i)];
          yh[2 * i + 1] = v0 * fci[size_t(i)] + v1 * fcr[size_t(i)];
        }
        if (yh != xh)
          for (int64_t j = 2 * pairs; j < head_dim; ++j)
            yh[j] = xh[j];
      }
    }
  }
}

void kiln_k_attention(const float *q, const float *k, const float *v,
                      float *k_cache, float *v_cache, float *out, int64_t n,
                      int64_t pos, int64_t heads, int64_t kv_heads,
                      int64_t head_dim, int64_t max_seq, float scale) {
  (void)max_seq; // pos + n <= max_seq was validated by the runtime
  const int64_t kvDim = kv_heads * head_dim;
  const int64_t qDim = heads * head_dim;
  const int64_t group = heads / kv_heads;
  // Append the new keys/values (they may already live in the cache).
  float *kDst = k_cache + pos * kvDim, *vDst = v_cache + pos * kvDim;
  if (k != kDst)
    std::memmove(kDst, k, sizeof(float) * size_t(n * kvDim));
  if (v != vDst)
    std::memmove(vDst, v, sizeof(float) * size_t(n * kvDim));

  const int64_t work = n * heads;
  bool parallel = work > 1 && n * heads * (pos + n) * head_dim > kParallelGrain / 2;
#pragma omp parallel if (parallel)
  {
    std::vector<float> att(static_cast<size_t>(pos + n));
    std::vector<float> acc(static_cast<size_t>(head_dim));
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      int64_t i = w / heads, h = w % heads;
      int64_t kvh = h / group;
      int64_t last = pos + i; // causal: keys [0, pos + i]
      const float *qh = q + i * qDim + h * head_dim;
      float maxScore = -INFINITY;
      for (int64_t t = 0; t <= last; ++t) {
        const float *kt = k_cache + t * kvDim + kvh * head_dim;
        float s = 0.0f;
        for (int64_t d = 0; d < head_dim; ++d)
          s += qh[d] * kt[d];
        s *= scale;
        att[size_t(t)] = s;
        maxScore = std::max(maxScore, s);
      }
      // run.c softmax: exp(x - max), normalised by the sum.
      double sum = 0.0;
      for (int64_t t = 0; t <= last; ++t) {
        float e = expf(att[size_t(t)] - maxScore);
        att[size_t(t)] = e;
        sum += e;
      }
      float inv = float(1.0 / sum);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t t = 0; t <= last; ++t) {
        const float *vt = v_cache + t * kvDim + kvh * head_dim;
        float a = att[size_t(t)] * inv;
        for (int64_t d = 0; d < head_dim; ++d)
          acc[size_t(d)] += a * vt[d];
      }
      std::memcpy(out + i * qDim + h * head_dim, acc.data(),
                  sizeof(float) * size_t(head_dim));
    }
  }
}

void kiln_k_swiglu(const float *gate, const float *up, float *y,
                   int64_t count) {
#pragma omp parallel for simd schedule(static) if (count > kParallelGrain)
  for (int64_t i = 0; i < count; ++i) {
    float g = gate[i];
    g *= 1.0f / (1.0f + expf(-g)); // run.c order: silu(gate) then * up
    y[i] = g * up[i];
  }
}

void kiln_k_silu(const float *x, float *y, int64_t count) {
#pragma omp parallel for simd schedule(static) if (count > kParallelGrain)
  for (int64_t i = 0; i < count; ++i)
    y[i] = x[i] * (1.0f / (1.0f + expf(-x[i])));
}

void kiln_k_add(const float *a, const float *b, float *y, int64_t count) {
#pragma omp parallel for simd schedule(static) if (count > kParallelGrain)
  for (int64_t i = 0; i < count; ++i)
    y[i] = a[i] + b[i];
}

void kiln_k_mul(const float *a, const float *b, float *y, int64_t count) {
#pragma omp parallel for simd schedule(static) if (count > kParallelGrain)
  for (int64_t i = 0; i < count; ++i)
    y[i] = a[i] * b[i];
}

} // extern "C"

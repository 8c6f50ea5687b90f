//===- Kernels.cpp - Embedding, norms, RoPE and elementwise kernels -------===//
//
// kernel_abi.h's row-wise kernels: embedding lookup (float and GGML block
// tables), RMSNorm, RoPE (plain, scaled, per-pair factors), bias, SwiGLU,
// SiLU, add and mul, in float32 and f16 / bf16. Numerics follow llama2.c
// run.c (rmsnorm with the sum of squares in double, RoPE with powf / cosf /
// sinf on float, SiLU with expf) so that greedy generation matches it token
// for token. The other families: Linear.cpp, Attention.cpp, Gemv.cpp,
// FusedKernels.cpp, BlockA8Kernels.cpp.
//
//===----------------------------------------------------------------------===//
#include "cpu/WholeOpKernels.h"
#include "cpu/KernelTemplates.h"
#include "kiln_rt/block_formats.h"
#include "kiln_rt/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace kiln::rt::cpu {

template <class T>
static void embedding(const int32_t *tokens, int64_t n, const T *table,
                      int64_t dim, T *out) {
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out + i * dim, table + int64_t(tokens[i]) * dim,
                sizeof(T) * size_t(dim));
}

template <class E>
static void rmsNorm(const typename E::T *x, const typename E::T *w,
                    typename E::T *y, int64_t n, int64_t dim, float eps) {
  const float *wf = loadRow<E>(w, dim, 0);
  forRows(n, n * dim > kParallelGrain, [&](int64_t i) {
    const float *xi = loadRow<E>(x + i * dim, dim, 1);
    float *yi = rowOut<E>(y + i * dim, dim, 2);
    double ss = 0.0;
    for (int64_t j = 0; j < dim; ++j)
      ss += double(xi[j]) * double(xi[j]);
    // run.c: ss /= size; ss += 1e-5f; ss = 1.0f / sqrtf(ss).
    float s = float(ss / double(dim));
    s += eps;
    s = 1.0f / sqrtf(s);
    for (int64_t j = 0; j < dim; ++j)
      yi[j] = wf[j] * (s * xi[j]);
    storeRow<E>(yi, y + i * dim, dim);
  });
}

/// RoPE over the per-pair inverse frequencies `freq` [rot_dim / 2].
template <class E>
static void ropeWithFreqs(const typename E::T *x, typename E::T *y, int64_t n,
                          int64_t heads, int64_t head_dim, int64_t rot_dim,
                          int64_t pos, const std::vector<float> &freq,
                          const int32_t *positions = nullptr) {
  int64_t pairs = rot_dim / 2;
  int64_t width = heads * head_dim;
  forRows(n, n * width > kParallelGrain, [&](int64_t r) {
    thread_local std::vector<float> fcr, fci;
    fcr.resize(freq.size());
    fci.resize(freq.size());
    // Row r's position: pos + r, or positions[r] (a batch of sequences).
    float p = positions ? float(positions[r]) : float(pos + r);
    for (int64_t i = 0; i < pairs; ++i) {
      float val = p * freq[size_t(i)];
      fcr[size_t(i)] = cosf(val);
      fci[size_t(i)] = sinf(val);
    }
    const float *xr = loadRow<E>(x + r * width, width, 1);
    float *yr = rowOut<E>(y + r * width, width, 2);
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
    storeRow<E>(yr, y + r * width, width);
  });
}

template <class E>
static void rope(const typename E::T *x, typename E::T *y, int64_t n,
                 int64_t heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
                 float theta, const int32_t *positions = nullptr) {
  int64_t pairs = rot_dim / 2;
  std::vector<float> freq(size_t(pairs > 0 ? pairs : 0));
  for (int64_t i = 0; i < pairs; ++i) // run.c: head_dim_i / (float)head_size
    freq[size_t(i)] = 1.0f / powf(theta, float(2 * i) / float(head_dim));
  ropeWithFreqs<E>(x, y, n, heads, head_dim, rot_dim, pos, freq, positions);
}

/// kiln_k_rope_scaled: the table of kiln_rt/rope_scaling.h for this call.
template <class E>
static void ropeScaled(const typename E::T *x, typename E::T *y, int64_t n,
                       int64_t heads, int64_t head_dim, int64_t rot_dim,
                       int64_t pos, float theta, int64_t scaling, float factor,
                       float low, float high, int64_t originalMax) {
  int64_t pairs = rot_dim / 2;
  float t = kiln_rope_theta(theta, rot_dim, scaling, factor, originalMax,
                            pos + n);
  std::vector<float> freq(size_t(pairs > 0 ? pairs : 0));
  for (int64_t i = 0; i < pairs; ++i)
    freq[size_t(i)] = kiln_rope_inv_freq(i, head_dim, rot_dim, t, scaling,
                                         factor, low, high, originalMax);
  ropeWithFreqs<E>(x, y, n, heads, head_dim, rot_dim, pos, freq);
}

/// kiln_k_rope_factors: theta^(-2i/head_dim) / freq_factors[i].
template <class E>
static void ropeFactors(const typename E::T *x, typename E::T *y, int64_t n,
                        int64_t heads, int64_t head_dim, int64_t rot_dim,
                        int64_t pos, float theta, const float *factors) {
  int64_t pairs = rot_dim / 2;
  std::vector<float> freq(size_t(pairs > 0 ? pairs : 0));
  for (int64_t i = 0; i < pairs; ++i)
    freq[size_t(i)] =
        1.0f / powf(theta, float(2 * i) / float(head_dim)) / factors[i];
  ropeWithFreqs<E>(x, y, n, heads, head_dim, rot_dim, pos, freq);
}

/// y[r, :] = x[r, :] + b (the bias of a linear layer).
template <class E>
static void addBias(const typename E::T *x, const typename E::T *b,
                    typename E::T *y, int64_t n, int64_t width) {
  std::vector<float> bf(static_cast<size_t>(width));
  {
    const float *w = loadRow<E>(b, width, 0);
    std::copy(w, w + width, bf.begin());
  }
  forRows(n, n * width > kParallelGrain, [&](int64_t r) {
    const float *xr = loadRow<E>(x + r * width, width, 1);
    float *yr = rowOut<E>(y + r * width, width, 2);
    for (int64_t j = 0; j < width; ++j)
      yr[j] = xr[j] + bf[size_t(j)];
    storeRow<E>(yr, y + r * width, width);
  });
}

/// Elements per widened block of the 16-bit elementwise kernels.
static constexpr int64_t kElementBlock = 4096;

/// y[i] = f(a[i], b[i]).
template <class E, class F>
static void binary(const typename E::T *a, const typename E::T *b,
                   typename E::T *y, int64_t count, F f) {
  if constexpr (kIsF32<E>) {
    parallelFor(count, chunkGrain(count, 16), count > kParallelGrain,
                [&](int64_t b0, int64_t b1) {
#pragma omp simd
                  for (int64_t i = b0; i < b1; ++i)
                    y[i] = f(a[i], b[i]);
                });
  } else {
    int64_t blocks = (count + kElementBlock - 1) / kElementBlock;
    forRows(blocks, count > kParallelGrain, [&](int64_t blk) {
      int64_t i0 = blk * kElementBlock;
      int64_t len = std::min(kElementBlock, count - i0);
      const float *af = loadRow<E>(a + i0, len, 1);
      const float *bf = loadRow<E>(b + i0, len, 2);
      float *yf = scratch(3, len);
#pragma omp simd
      for (int64_t i = 0; i < len; ++i)
        yf[i] = f(af[i], bf[i]);
      E::narrow(yf, y + i0, len);
    });
  }
}

/// y[i] = f(x[i]).
template <class E, class F>
static void unary(const typename E::T *x, typename E::T *y, int64_t count,
                  F f) {
  if constexpr (kIsF32<E>) {
    parallelFor(count, chunkGrain(count, 16), count > kParallelGrain,
                [&](int64_t b0, int64_t b1) {
#pragma omp simd
                  for (int64_t i = b0; i < b1; ++i)
                    y[i] = f(x[i]);
                });
  } else {
    int64_t blocks = (count + kElementBlock - 1) / kElementBlock;
    forRows(blocks, count > kParallelGrain, [&](int64_t blk) {
      int64_t i0 = blk * kElementBlock;
      int64_t len = std::min(kElementBlock, count - i0);
      const float *xf = loadRow<E>(x + i0, len, 1);
      float *yf = scratch(3, len);
#pragma omp simd
      for (int64_t i = 0; i < len; ++i)
        yf[i] = f(xf[i]);
      E::narrow(yf, y + i0, len);
    });
  }
}

// run.c order: silu(gate) then * up (kernel_abi.h; generated fused
// kernels call the same functions).
static inline float swigluOp(float g, float u) { return kiln_swiglu(g, u); }
static inline float siluOp(float x) { return kiln_silu(x); }
static inline float addOp(float a, float b) { return a + b; }
static inline float mulOp(float a, float b) { return a * b; }

} // namespace kiln::rt::cpu

using namespace kiln::rt::cpu;

namespace {
struct SwigluFn {
  float operator()(float g, float u) const { return swigluOp(g, u); }
};
struct SiluFn {
  float operator()(float x) const { return siluOp(x); }
};
struct AddFn {
  float operator()(float a, float b) const { return addOp(a, b); }
};
struct MulFn {
  float operator()(float a, float b) const { return mulOp(a, b); }
};
} // namespace

// The kernel ABI must stay exported from libkiln_runtime.so.
extern "C" {

void kiln_k_embedding(const int32_t *tokens, int64_t n, const float *table,
                      int64_t vocab, int64_t dim, float *out) {
  (void)vocab; // ids were validated against vocab by the runtime
  embedding(tokens, n, table, dim, out);
}

void kiln_k_embedding_blocks(const int32_t *tokens, int64_t n,
                             const int8_t *table, int64_t vocab, int64_t dim,
                             float *out, int64_t format) {
  (void)vocab; // ids were validated against vocab by the runtime
  const int64_t rowBytes =
      dim / kiln_block_elems(format) * kiln_block_bytes(format);
  const auto *t = reinterpret_cast<const uint8_t *>(table);
  for (int64_t i = 0; i < n; ++i)
    kiln_block_decode_row(format, t + int64_t(tokens[i]) * rowBytes, dim,
                          out + i * dim);
}

void kiln_k_rms_norm(const float *x, const float *w, float *y, int64_t n,
                     int64_t dim, float eps) {
  rmsNorm<F32>(x, w, y, n, dim, eps);
}

void kiln_k_rope(const float *x, float *y, int64_t n, int64_t heads,
                 int64_t head_dim, int64_t rot_dim, int64_t pos, float theta) {
  rope<F32>(x, y, n, heads, head_dim, rot_dim, pos, theta);
}

void kiln_k_rope_scaled(const float *x, float *y, int64_t n, int64_t heads,
                        int64_t head_dim, int64_t rot_dim, int64_t pos,
                        float theta, int64_t scaling, float factor,
                        float low_freq_factor, float high_freq_factor,
                        int64_t original_max) {
  ropeScaled<F32>(x, y, n, heads, head_dim, rot_dim, pos, theta, scaling,
                  factor, low_freq_factor, high_freq_factor, original_max);
}

void kiln_k_rope_factors(const float *x, float *y, int64_t n, int64_t heads,
                         int64_t head_dim, int64_t rot_dim, int64_t pos,
                         float theta, const float *freq_factors) {
  ropeFactors<F32>(x, y, n, heads, head_dim, rot_dim, pos, theta,
                   freq_factors);
}

void kiln_k_add_bias(const float *x, const float *b, float *y, int64_t n,
                     int64_t width) {
  addBias<F32>(x, b, y, n, width);
}

void kiln_k_swiglu(const float *gate, const float *up, float *y,
                   int64_t count) {
  binary<F32>(gate, up, y, count, SwigluFn());
}

void kiln_k_silu(const float *x, float *y, int64_t count) {
  unary<F32>(x, y, count, SiluFn());
}

void kiln_k_add(const float *a, const float *b, float *y, int64_t count) {
  binary<F32>(a, b, y, count, AddFn());
}

void kiln_k_mul(const float *a, const float *b, float *y, int64_t count) {
  binary<F32>(a, b, y, count, MulFn());
}

void kiln_k_rope_rows(int32_t elem, const void *x, void *y, int64_t rows,
                      int64_t heads, int64_t head_dim, int64_t rot_dim,
                      const int32_t *positions, float theta) {
  switch (elem) {
  case KILN_ELEM_F16:
    rope<F16>(static_cast<const kiln_f16_t *>(x), static_cast<kiln_f16_t *>(y),
              rows, heads, head_dim, rot_dim, 0, theta, positions);
    return;
  case KILN_ELEM_BF16:
    rope<Bf16>(static_cast<const kiln_bf16_t *>(x),
               static_cast<kiln_bf16_t *>(y), rows, heads, head_dim, rot_dim,
               0, theta, positions);
    return;
  default:
    rope<F32>(static_cast<const float *>(x), static_cast<float *>(y), rows,
              heads, head_dim, rot_dim, 0, theta, positions);
    return;
  }
}

// f16 and bf16: the same kernels over 16-bit elements (kernel_abi.h).
#define KILN_DEFINE_16BIT_KERNELS(sfx, E, T)                                   \
  void kiln_k_embedding_##sfx(const int32_t *tokens, int64_t n,                \
                              const T *table, int64_t vocab, int64_t dim,      \
                              T *out) {                                        \
    (void)vocab;                                                               \
    embedding(tokens, n, table, dim, out);                                     \
  }                                                                            \
  void kiln_k_rms_norm_##sfx(const T *x, const T *w, T *y, int64_t n,          \
                             int64_t dim, float eps) {                         \
    rmsNorm<E>(x, w, y, n, dim, eps);                                          \
  }                                                                            \
  void kiln_k_rope_##sfx(const T *x, T *y, int64_t n, int64_t heads,           \
                         int64_t head_dim, int64_t rot_dim, int64_t pos,       \
                         float theta) {                                        \
    rope<E>(x, y, n, heads, head_dim, rot_dim, pos, theta);                    \
  }                                                                            \
  void kiln_k_rope_scaled_##sfx(const T *x, T *y, int64_t n, int64_t heads,    \
                                int64_t head_dim, int64_t rot_dim,             \
                                int64_t pos, float theta, int64_t scaling,     \
                                float factor, float low, float high,           \
                                int64_t original_max) {                        \
    ropeScaled<E>(x, y, n, heads, head_dim, rot_dim, pos, theta, scaling,      \
                  factor, low, high, original_max);                            \
  }                                                                            \
  void kiln_k_rope_factors_##sfx(const T *x, T *y, int64_t n, int64_t heads,   \
                                 int64_t head_dim, int64_t rot_dim,            \
                                 int64_t pos, float theta,                     \
                                 const float *freq_factors) {                  \
    ropeFactors<E>(x, y, n, heads, head_dim, rot_dim, pos, theta,              \
                   freq_factors);                                              \
  }                                                                            \
  void kiln_k_add_bias_##sfx(const T *x, const T *b, T *y, int64_t n,          \
                             int64_t width) {                                  \
    addBias<E>(x, b, y, n, width);                                             \
  }                                                                            \
  void kiln_k_swiglu_##sfx(const T *gate, const T *up, T *y, int64_t count) {  \
    binary<E>(gate, up, y, count, SwigluFn());                                 \
  }                                                                            \
  void kiln_k_silu_##sfx(const T *x, T *y, int64_t count) {                    \
    unary<E>(x, y, count, SiluFn());                                           \
  }                                                                            \
  void kiln_k_add_##sfx(const T *a, const T *b, T *y, int64_t count) {         \
    binary<E>(a, b, y, count, AddFn());                                        \
  }                                                                            \
  void kiln_k_mul_##sfx(const T *a, const T *b, T *y, int64_t count) {         \
    binary<E>(a, b, y, count, MulFn());                                        \
  }
KILN_DEFINE_16BIT_KERNELS(f16, F16, kiln_f16_t)
KILN_DEFINE_16BIT_KERNELS(bf16, Bf16, kiln_bf16_t)
#undef KILN_DEFINE_16BIT_KERNELS

} // extern "C"

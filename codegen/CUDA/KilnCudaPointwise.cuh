//===- KilnCudaPointwise.cuh - Embedding, RMSNorm, RoPE, elementwise -*- CUDA -*-===//
//
// Row-wise CUDA kernels: embedding lookup, RMSNorm, RoPE and the
// elementwise SwiGLU / SiLU / add / mul. Part of KilnKernels.cuh.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CODEGEN_CUDA_KILNCUDAPOINTWISE_CUH
#define KILN_CODEGEN_CUDA_KILNCUDAPOINTWISE_CUH

#include "KilnCudaCommon.cuh"

namespace kiln_cuda_detail {

// Embedding
//===----------------------------------------------------------------------===//

/// out[i, :] = table[tokens[i], :]. One block per row (grid-stride). Ids
/// outside [0, vocab) (the runtime validates them) produce a zero row instead
/// of an out-of-bounds read. `vec`: table, out 16-aligned and dim * sizeof(T)
/// a multiple of 16, so rows copy as 16-byte packs.
template <typename T>
__global__ void __launch_bounds__(256)
    embeddingKernel(const int32_t *__restrict__ tokens, int64_t n,
                    const T *__restrict__ table, int64_t vocab, int64_t dim,
                    T *__restrict__ out, bool vec) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t tok = tokens[i];
    const bool ok = tok >= 0 && tok < vocab;
    const T *src = table + (ok ? tok : 0) * dim;
    T *dst = out + i * dim;
    if (vec) {
      const int64_t packs = dim / Pack<T>::kN;
      const Pack<T> *s = reinterpret_cast<const Pack<T> *>(src);
      Pack<T> *d = reinterpret_cast<Pack<T> *>(dst);
      for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
        Pack<T> v = s[j];
        if (!ok)
          for (int e = 0; e < Pack<T>::kN; ++e)
            v.v[e] = fromF<T>(0.0f);
        d[j] = v;
      }
      continue;
    }
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
      dst[j] = ok ? src[j] : fromF<T>(0.0f);
  }
}

//===----------------------------------------------------------------------===//
// RMSNorm (Zhang & Sennrich 2019), llama2.c rmsnorm arithmetic
//===----------------------------------------------------------------------===//

/// RMSNorm of one row given its sum of squares `ss` (every thread of the
/// block): y[j] = w[j] * x[j] / sqrt(ss / dim + eps).
template <typename T>
__device__ __forceinline__ void normRow(const T *x, const T *__restrict__ w,
                                        T *y, int64_t dim, float ss,
                                        float eps) {
  float s = ss / float(dim);
  s += eps;
  s = 1.0f / sqrtf(s);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    y[j] = fromF<T>(toF(w[j]) * (s * toF(x[j])));
}

/// y[i, j] = w[j] * (s * x[i, j]), s = 1 / sqrtf(sum_j x^2 / dim + eps).
/// One block per row, float sum of squares reduced with warp shuffles.
/// In-place (x == y) is safe: all reads of the sum finish at the barrier in
/// blockSum, and each thread rewrites only elements it read itself.
template <typename T>
__global__ void __launch_bounds__(256)
    rmsNormKernel(const T *x, const T *__restrict__ w, T *y, int64_t n,
                  int64_t dim, float eps) {
  __shared__ float sh[32];
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const T *xi = x + i * dim;
    T *yi = y + i * dim;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      float v = toF(xi[j]);
      ss = fmaf(v, v, ss);
    }
    normRow(xi, w, yi, dim, blockSum(ss, sh), eps);
  }
}

//===----------------------------------------------------------------------===//

// RoPE (Su et al. 2021, RoFormer eq. 34), adjacent-pair layout
//===----------------------------------------------------------------------===//

/// One thread per (row, head, pair slot i < ceil(head_dim / 2)). For
/// i < rot_dim / 2 it rotates (x[2i], x[2i+1]) by p * theta^(-2i/head_dim),
/// p = *dPos + row, or rowPos[row] when rowPos is not null (the batched
/// step: each row at its own sequence's position); other slots copy
/// through. The CPU computes
/// freq = 1 / powf(theta, float(2i) / float(head_dim)) and cosf / sinf of
/// float(p) * freq in float with glibc (correctly rounded in practice); the
/// device evaluates pow / cos / sin in double and rounds to float, which
/// reproduces those float values (CUDA's powf / cosf are only 2 to 4 ulp,
/// amplified by p at long positions). In-place (x == y) is safe.
template <typename T>
__global__ void __launch_bounds__(256)
    ropeKernel(const T *x, T *y, int64_t n, int64_t heads, int64_t headDim,
               int64_t rotDim, float theta, const int64_t *__restrict__ dPos,
               const int32_t *__restrict__ rowPos) {
  const int64_t slots = (headDim + 1) / 2;
  const int64_t pairs = rotDim / 2;
  const int64_t total = n * heads * slots;
  const int64_t p0 = rowPos ? 0 : *dPos;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % slots;
    const int64_t rowHead = e / slots; // row * heads + head
    const int64_t row = rowHead / heads;
    const int64_t base = rowHead * headDim + 2 * i;
    if (i < pairs) {
      float expo = float(2 * i) / float(headDim);
      float freq = 1.0f / float(pow(double(theta), double(expo)));
      const int64_t p = rowPos ? int64_t(rowPos[row]) : p0 + row;
      float val = float(p) * freq;
      float fcr = float(cos(double(val))), fci = float(sin(double(val)));
      float v0 = toF(x[base]), v1 = toF(x[base + 1]);
      y[base] = fromF<T>(v0 * fcr - v1 * fci);
      y[base + 1] = fromF<T>(v0 * fci + v1 * fcr);
      continue;
    }
    y[base] = x[base];
    if (2 * i + 1 < headDim)
      y[base + 1] = x[base + 1];
  }
}

/// ropeKernel with scaled inverse frequencies (kernel_abi.h
/// kiln_k_rope_scaled / kiln_k_rope_factors; kiln_rt/rope_scaling.h):
/// `factors` non-null gives theta^(-2i/head_dim) / factors[i], else the
/// `scaling` rule with theta from kiln_rope_theta for L = *dPos + n. The
/// frequency is computed with the device's powf (a few ulp from the CPU).
template <typename T>
__global__ void __launch_bounds__(256)
    ropeScaledKernel(const T *x, T *y, int64_t n, int64_t heads,
                     int64_t headDim, int64_t rotDim, float theta,
                     int64_t scaling, float factor, float low, float high,
                     int64_t originalMax, const float *__restrict__ factors,
                     const int64_t *__restrict__ dPos) {
  const int64_t slots = (headDim + 1) / 2;
  const int64_t pairs = rotDim / 2;
  const int64_t total = n * heads * slots;
  const int64_t p0 = *dPos;
  const float t = factors ? theta
                          : kiln_rope_theta(theta, rotDim, scaling, factor,
                                            originalMax, p0 + n);
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % slots;
    const int64_t rowHead = e / slots;
    const int64_t row = rowHead / heads;
    const int64_t base = rowHead * headDim + 2 * i;
    if (i < pairs) {
      float freq =
          factors ? 1.0f / powf(theta, float(2 * i) / float(headDim)) /
                        factors[i]
                  : kiln_rope_inv_freq(i, headDim, rotDim, t, scaling, factor,
                                       low, high, originalMax);
      float val = float(p0 + row) * freq;
      float fcr = float(cos(double(val))), fci = float(sin(double(val)));
      float v0 = toF(x[base]), v1 = toF(x[base + 1]);
      y[base] = fromF<T>(v0 * fcr - v1 * fci);
      y[base + 1] = fromF<T>(v0 * fci + v1 * fcr);
      continue;
    }
    y[base] = x[base];
    if (2 * i + 1 < headDim)
      y[base + 1] = x[base + 1];
  }
}

/// y = x + b per row (kernel_abi.h kiln_k_add_bias).
template <typename T>
__global__ void __launch_bounds__(256)
    addBiasKernel(const T *x, const T *b, T *y, int64_t n, int64_t width) {
  const int64_t total = n * width;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x)
    y[e] = fromF<T>(toF(x[e]) + toF(b[e % width]));
}

//===----------------------------------------------------------------------===//

// Elementwise
//===----------------------------------------------------------------------===//

/// llama2.c order: silu(g) = g * (1 / (1 + e^-g)), then times up.
struct SwigluOp {
  __device__ float operator()(float g, float u) const {
    g *= 1.0f / (1.0f + expf(-g));
    return g * u;
  }
};
struct SiluOp {
  __device__ float operator()(float x, float) const {
    return x * (1.0f / (1.0f + expf(-x)));
  }
};
struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MulOp {
  __device__ float operator()(float a, float b) const { return a * b; }
};

/// y[i] = op(a[i], b[i]) (b unused and may be null for unary ops). `vec`:
/// all pointers 16-aligned, so 16-byte packs, then a scalar tail.
template <typename T, typename Op, bool kUnary>
__global__ void __launch_bounds__(256)
    elementwiseKernel(const T *a, const T *b, T *y, int64_t count, bool vec) {
  constexpr int kN = Pack<T>::kN;
  Op op;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (vec) {
    const int64_t packs = count / kN;
    const Pack<T> *av = reinterpret_cast<const Pack<T> *>(a);
    const Pack<T> *bv = reinterpret_cast<const Pack<T> *>(b);
    Pack<T> *yv = reinterpret_cast<Pack<T> *>(y);
    for (int64_t i = tid; i < packs; i += stride) {
      const Pack<T> pa = av[i];
      const Pack<T> pb = kUnary ? pa : bv[i];
      Pack<T> py;
#pragma unroll
      for (int e = 0; e < kN; ++e)
        py.v[e] = fromF<T>(op(toF(pa.v[e]), kUnary ? 0.0f : toF(pb.v[e])));
      yv[i] = py;
    }
    done = packs * kN;
  }
  for (int64_t i = done + tid; i < count; i += stride)
    y[i] = fromF<T>(op(toF(a[i]), kUnary ? 0.0f : toF(b[i])));
}

template <typename T, typename Op, bool kUnary>
inline void elementwise(kiln_cuda_ctx *ctx, const char *name, const T *a,
                        const T *b, T *y, int64_t count) {
  static_assert(IsElem<T>::value, "T must be float, __half or __nv_bfloat16");
  if (skip(ctx) || count <= 0)
    return;
  const bool vec = aligned16(a) && aligned16(y) && (kUnary || aligned16(b));
  const int64_t work = vec ? count / Pack<T>::kN + 1 : count;
  elementwiseKernel<T, Op, kUnary>
      <<<gridFor(ctx, work, 256), 256, 0, streamOf(ctx)>>>(a, b, y, count, vec);
  KILN_CUDA_LAUNCHED(ctx, name);
}

//===----------------------------------------------------------------------===//

} // namespace kiln_cuda_detail

#endif // KILN_CODEGEN_CUDA_KILNCUDAPOINTWISE_CUH

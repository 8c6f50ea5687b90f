//===- kernel_check.cu - GPU kernels against the CPU kernel ABI ---*- CUDA
//-*-===//
//
// kiln-gpu-kernel-check: runs every wrapper of codegen/CUDA/KilnKernels.cuh
// for f32, f16 and bf16 on random inputs (fixed seed) and compares with the
// CPU reference kernels kiln_k_* of libkiln_runtime on the same (rounded)
// inputs. Outputs are poisoned with 0xFF bytes (NaN in every type) before each
// run, and KV-cache rows past the visible ones are poisoned too, so skipped
// writes or out-of-range reads show up as NaN. The INT8 KV cache attention
// (kiln_cuda_attention_kv8) is checked against kiln_k_attention_kv8, its
// appended int8 rows and float scales against the CPU's. Group-wise W8A16,
// SmoothQuant W8A8 (per token and static per tensor) and the FP8 E4M3 KV
// cache (kiln_cuda_attention_kvf8) are checked both against host references
// written from kernel_abi.h's formulas and the OCP OFP8 spec and against the
// CPU kernels (kiln_k_linear_w8a16 with group_size, kiln_k_linear_w8a8,
// kiln_k_attention_kvf8, "-vs-cpu" cases); the centered 8-bit caches
// (kiln_cuda_attention_kv8_centered / kvf8_centered) against kiln_k_attention
// on their own cache read back through kernel_abi.h's formula (m_t from
// double cos / sin here) and against the CPU centered kernels; that E4M3
// reference is itself compared with cuda_fp8.h first (host only, so it also
// runs without a GPU: a disagreement exits 1). Dynamic sparse attention
// (kiln_cuda_attention_sparse, Quest's kiln_cuda_attention_sparse_summary /
// _decode) against the CPU sparse kernels on planted inputs whose block
// lists have wide margins, and its dense fallbacks against the dense
// kernel bit for bit.
//
//   kiln-gpu-kernel-check          correctness; one "PASS|FAIL kernel dtype
//                                  shape relerr" line per case, then
//                                  "kernel-check: N passed, M failed";
//                                  exit 0, 1 on failure, 77 without a GPU
//   kiln-gpu-kernel-check --bench  decode GEMV bandwidth (bf16, W8A16,
//                                  W4A16, grouped W8A16, W8A8), W8A16 tiled,
//                                  W8A8 __dp4a tiled and cuBLASLt GEMM
//                                  throughput (bf16), median of 20 runs
//
// relerr = max|gpu - ref| / max|ref|; limits: f32 1e-5, f16 5e-3, bf16 1e-2.
//
//===----------------------------------------------------------------------===//
#include "KilnKernels.cuh"
#include "cpu/WholeOpKernels.h"
#include "kiln_rt/api.h"
#include "kiln_rt/kernel_abi.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

//===----------------------------------------------------------------------===//
// Infrastructure
//===----------------------------------------------------------------------===//

int gPassed = 0, gFailed = 0;

#define CHECK_CUDA(expr)                                                       \
  do {                                                                         \
    cudaError_t err_ = (expr);                                                 \
    if (err_ != cudaSuccess) {                                                 \
      std::fprintf(stderr, "%s failed at %s:%d: %s\n", #expr, __FILE__,        \
                   __LINE__, cudaGetErrorString(err_));                        \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

template <typename T> struct Dtype;
template <> struct Dtype<float> {
  static constexpr const char *name = "f32";
  static constexpr double tol = 1e-5;
  static float from(float v) { return v; }
  static float to(float v) { return v; }
};
template <> struct Dtype<__half> {
  static constexpr const char *name = "f16";
  static constexpr double tol = 5e-3;
  static __half from(float v) { return __float2half_rn(v); }
  static float to(__half v) { return __half2float(v); }
};
template <> struct Dtype<__nv_bfloat16> {
  static constexpr const char *name = "bf16";
  static constexpr double tol = 1e-2;
  static __nv_bfloat16 from(float v) { return __float2bfloat16_rn(v); }
  static float to(__nv_bfloat16 v) { return __bfloat162float(v); }
};

std::mt19937_64 gRng(0x4b494c4eull); // "KILN"

/// Uniform values in [lo, hi) rounded to T (so CPU and GPU see equal inputs).
template <typename T>
std::vector<float> randomRounded(size_t count, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(count);
  for (float &x : v)
    x = Dtype<T>::to(Dtype<T>::from(dist(gRng)));
  return v;
}

/// Device buffer of `count` elements of T plus `pad` leading elements, so
/// that data() + pad can be deliberately misaligned.
template <typename T> struct DevBuf {
  T *base = nullptr;
  size_t pad = 0, count = 0;
  DevBuf(size_t count, size_t pad = 0) : pad(pad), count(count) {
    CHECK_CUDA(cudaMalloc(&base, sizeof(T) * (count + pad + 1)));
    poison();
  }
  ~DevBuf() { cudaFree(base); }
  DevBuf(const DevBuf &) = delete;
  DevBuf &operator=(const DevBuf &) = delete;
  T *data() const { return base + pad; }
  void poison() {
    CHECK_CUDA(cudaMemset(base, 0xFF, sizeof(T) * (count + pad + 1)));
  }
  void upload(const std::vector<float> &v, size_t offset = 0) {
    std::vector<T> h(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      h[i] = Dtype<T>::from(v[i]);
    CHECK_CUDA(cudaMemcpy(data() + offset, h.data(), sizeof(T) * h.size(),
                          cudaMemcpyHostToDevice));
  }
  std::vector<float> download(size_t n, size_t offset = 0) const {
    std::vector<T> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), data() + offset, sizeof(T) * n,
                          cudaMemcpyDeviceToHost));
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i)
      v[i] = Dtype<T>::to(h[i]);
    return v;
  }
};

/// The execution context the executor would build.
struct Context {
  kiln_cuda_ctx ctx{};
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void *workspace = nullptr;
  int64_t *dPos = nullptr;

  Context() {
    CHECK_CUDA(cudaStreamCreate(&stream));
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cublasLtCreate failed\n");
      std::exit(1);
    }
    const uint64_t ws = kiln_cuda_workspace_bytes_for(64, 256, 0);
    CHECK_CUDA(cudaMalloc(&workspace, ws));
    CHECK_CUDA(cudaMalloc(&dPos, sizeof(int64_t)));
    int dev = 0, sms = 0;
    CHECK_CUDA(cudaGetDevice(&dev));
    CHECK_CUDA(
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    ctx.stream = stream;
    ctx.cublaslt = lt;
    ctx.workspace = workspace;
    ctx.workspace_bytes = ws;
    ctx.sm_count = sms;
    ctx.d_pos = dPos;
  }
  ~Context() {
    cudaFree(dPos);
    cudaFree(workspace);
    cublasLtDestroy(lt);
    cudaStreamDestroy(stream);
  }
  void setPos(int64_t pos) {
    CHECK_CUDA(cudaMemcpy(dPos, &pos, sizeof(pos), cudaMemcpyHostToDevice));
  }
  /// Waits for the stream; returns the wrapper or asynchronous error, if any.
  std::string finish() {
    cudaError_t err = cudaStreamSynchronize(stream);
    if (ctx.status != 0) {
      std::string msg = ctx.error;
      ctx.status = 0; // keep checking the other cases
      ctx.error[0] = '\0';
      return msg;
    }
    if (err != cudaSuccess)
      return std::string("cudaStreamSynchronize: ") + cudaGetErrorString(err);
    return "";
  }
};

/// Records one case: relative error of got against ref, NaN always fails.
void report(const char *kernel, const char *dtype, const std::string &shape,
            const std::vector<float> &got, const std::vector<float> &ref,
            double tol, const std::string &error) {
  double maxDiff = 0.0, maxRef = 0.0;
  bool nan = got.size() != ref.size();
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) {
      nan = true;
      continue;
    }
    maxDiff = std::max(maxDiff, std::fabs(double(got[i]) - double(ref[i])));
    maxRef = std::max(maxRef, std::fabs(double(ref[i])));
  }
  const double rel = maxRef > 0.0 ? maxDiff / maxRef : maxDiff;
  const bool ok = error.empty() && !nan && rel <= tol;
  (ok ? gPassed : gFailed)++;
  std::printf("%s %s %s %s relerr=%.3g%s%s\n", ok ? "PASS" : "FAIL", kernel,
              dtype, shape.c_str(), rel, nan ? " (NaN/size mismatch)" : "",
              error.empty() ? "" : (" error: " + error).c_str());
  std::fflush(stdout);
}

std::string fmt(const char *f, long long a = 0, long long b = 0,
                long long c = 0, long long d = 0, long long e = 0,
                long long g = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, a, b, c, d, e, g);
  return buf;
}

//===----------------------------------------------------------------------===//
// Cases
//===----------------------------------------------------------------------===//

template <typename T> void checkEmbedding(Context &c) {
  struct Shape {
    int64_t n, vocab, dim;
  };
  for (Shape s : {Shape{5, 37, 19}, Shape{3, 1000, 4096}, Shape{1, 7, 8}}) {
    std::vector<int32_t> tokens(static_cast<size_t>(s.n));
    for (auto &t : tokens)
      t = int32_t(gRng() % uint64_t(s.vocab));
    std::vector<float> table = randomRounded<T>(size_t(s.vocab * s.dim), -1, 1);
    DevBuf<int32_t> dTok(tokens.size());
    CHECK_CUDA(cudaMemcpy(dTok.data(), tokens.data(), 4 * tokens.size(),
                          cudaMemcpyHostToDevice));
    DevBuf<T> dTable(table.size()), dOut(size_t(s.n * s.dim));
    dTable.upload(table);
    kiln_cuda_embedding(&c.ctx, dTok.data(), s.n, dTable.data(), s.vocab, s.dim,
                        dOut.data());
    std::string err = c.finish();
    std::vector<float> ref(static_cast<size_t>(s.n * s.dim));
    kiln_k_embedding(tokens.data(), s.n, table.data(), s.vocab, s.dim,
                     ref.data());
    report("embedding", Dtype<T>::name,
           fmt("n=%lld vocab=%lld dim=%lld", s.n, s.vocab, s.dim),
           dOut.download(ref.size()), ref, 0.0, err);
  }
}

template <typename T> void checkRmsNorm(Context &c) {
  struct Shape {
    int64_t n, dim;
  };
  for (Shape s : {Shape{1, 4096}, Shape{7, 333}, Shape{3, 1}, Shape{2, 8192}}) {
    std::vector<float> x = randomRounded<T>(size_t(s.n * s.dim), -2, 2);
    std::vector<float> w = randomRounded<T>(size_t(s.dim), 0.5f, 1.5f);
    DevBuf<T> dx(x.size()), dw(w.size()), dy(x.size());
    dx.upload(x);
    dw.upload(w);
    kiln_cuda_rms_norm(&c.ctx, dx.data(), dw.data(), dy.data(), s.n, s.dim,
                       1e-5f);
    std::string err = c.finish();
    std::vector<float> ref(x.size());
    kiln_k_rms_norm(x.data(), w.data(), ref.data(), s.n, s.dim, 1e-5f);
    report("rms_norm", Dtype<T>::name, fmt("n=%lld dim=%lld", s.n, s.dim),
           dy.download(ref.size()), ref, Dtype<T>::tol, err);
  }
}

/// y = x w^T with y of type Y (T or float); padX/padW/padY misalign the
/// pointers by that many elements.
template <typename T, typename Y> void checkLinear(Context &c) {
  struct Shape {
    int64_t n, in, out, padX, padW, padY;
  };
  const Shape shapes[] = {{1, 4096, 1000, 0, 0, 0}, {1, 1027, 33, 0, 0, 0},
                          {1, 515, 77, 1, 3, 1},    {1, 8, 5, 0, 0, 0},
                          {1, 3, 4, 0, 0, 0},       {5, 256, 384, 0, 0, 0},
                          {17, 100, 7, 0, 0, 0},    {64, 512, 1024, 0, 0, 0},
                          {9, 130, 66, 1, 1, 1}};
  for (const Shape &s : shapes) {
    std::vector<float> x = randomRounded<T>(size_t(s.n * s.in), -1, 1);
    std::vector<float> w = randomRounded<T>(size_t(s.out * s.in), -1, 1);
    DevBuf<T> dx(x.size(), size_t(s.padX)), dw(w.size(), size_t(s.padW));
    DevBuf<Y> dy(size_t(s.n * s.out), size_t(s.padY));
    dx.upload(x);
    dw.upload(w);
    kiln_cuda_linear(&c.ctx, dx.data(), dw.data(), dy.data(), s.n, s.in, s.out);
    std::string err = c.finish();
    std::vector<float> ref(static_cast<size_t>(s.n * s.out));
    kiln_k_linear(x.data(), w.data(), ref.data(), s.n, s.in, s.out);
    std::string name =
        std::is_same<Y, float>::value && !std::is_same<T, float>::value
            ? "linear->f32"
            : "linear";
    report(name.c_str(), Dtype<T>::name,
           fmt("n=%lld in=%lld out=%lld pad=%lld/%lld/%lld", s.n, s.in, s.out,
               s.padX, s.padW, s.padY),
           dy.download(ref.size()), ref,
           std::is_same<Y, float>::value ? Dtype<T>::tol / 4 + 1e-5
                                         : Dtype<T>::tol,
           err);
  }
}

/// Symmetric per-row int8 quantization (scale = max|row| / 127, q =
/// round(w / scale), an all-zero row gets scale 0) of random weights.
void quantizeRows(const std::vector<float> &w, int64_t out, int64_t in,
                  std::vector<int8_t> &q, std::vector<float> &scales) {
  q.assign(size_t(out * in), 0);
  scales.assign(size_t(out), 0.0f);
  for (int64_t o = 0; o < out; ++o) {
    float maxAbs = 0.0f;
    for (int64_t i = 0; i < in; ++i)
      maxAbs = std::max(maxAbs, std::fabs(w[size_t(o * in + i)]));
    const float scale = maxAbs / 127.0f;
    scales[size_t(o)] = scale;
    for (int64_t i = 0; i < in; ++i) {
      float v = scale > 0.0f ? std::nearbyint(w[size_t(o * in + i)] / scale)
                             : 0.0f;
      q[size_t(o * in + i)] = int8_t(std::min(127.0f, std::max(-127.0f, v)));
    }
  }
}

/// W8A16 y = x (scales * q)^T with y of type Y (T or float) against the CPU
/// kiln_k_linear_w8a16 on the same (rounded) x. Row 0 of the weights is all
/// zero (scale 0: must give 0, not NaN); padX/padQ/padY misalign pointers.
template <typename T, typename Y> void checkLinearW8(Context &c) {
  struct Shape {
    int64_t n, in, out, padX, padQ, padY;
  };
  const Shape shapes[] = {{1, 4096, 1001, 0, 0, 0}, {1, 172, 65, 0, 0, 0},
                          {1, 333, 7, 0, 0, 0},     {1, 333, 77, 1, 3, 1},
                          {1, 13, 1, 0, 0, 0},      {1, 11008, 37, 0, 0, 0},
                          {2, 333, 7, 0, 0, 0},     {5, 172, 65, 0, 0, 0},
                          {17, 1100, 301, 0, 0, 0}, {64, 512, 1023, 0, 0, 0},
                          {9, 130, 66, 1, 1, 1},    {100, 4096, 128, 0, 0, 0}};
  for (const Shape &s : shapes) {
    std::vector<float> x = randomRounded<T>(size_t(s.n * s.in), -1, 1);
    std::vector<float> w = randomRounded<float>(size_t(s.out * s.in), -1, 1);
    std::fill(w.begin(), w.begin() + s.in, 0.0f);
    std::vector<int8_t> q;
    std::vector<float> scales;
    quantizeRows(w, s.out, s.in, q, scales);
    DevBuf<T> dx(x.size(), size_t(s.padX));
    DevBuf<int8_t> dq(q.size(), size_t(s.padQ));
    DevBuf<float> dScales(scales.size());
    DevBuf<Y> dy(size_t(s.n * s.out), size_t(s.padY));
    dx.upload(x);
    CHECK_CUDA(cudaMemcpy(dq.data(), q.data(), q.size(),
                          cudaMemcpyHostToDevice));
    dScales.upload(scales);
    kiln_cuda_linear_w8a16(&c.ctx, dx.data(), dq.data(), dScales.data(),
                           dy.data(), s.n, s.in, s.out);
    std::string err = c.finish();
    std::vector<float> ref(static_cast<size_t>(s.n * s.out));
    kiln_k_linear_w8a16(x.data(), q.data(), scales.data(), ref.data(), s.n,
                        s.in, s.out, /*group_size=*/0);
    std::vector<float> got = dy.download(ref.size());
    for (int64_t i = 0; i < s.n; ++i)
      if (got[size_t(i * s.out)] != 0.0f && err.empty())
        err = "zero row (scale 0) gave " +
              std::to_string(got[size_t(i * s.out)]);
    std::string name =
        std::is_same<Y, float>::value && !std::is_same<T, float>::value
            ? "linear_w8a16->f32"
            : "linear_w8a16";
    report(name.c_str(), Dtype<T>::name,
           fmt("n=%lld in=%lld out=%lld pad=%lld/%lld/%lld", s.n, s.in, s.out,
               s.padX, s.padQ, s.padY),
           got, ref,
           std::is_same<Y, float>::value ? Dtype<T>::tol / 4 + 1e-5
                                         : Dtype<T>::tol,
           err);
  }
}

/// A random W4A16 weight in the writer's layout (kernel_abi.h): q and zeros
/// uniform in [0, 15], scales in [1e-3, 0.05); row 0 has all scales 0 (must
/// give exactly 0, not NaN). For odd in the padding nibble stays 0.
struct Q4Host {
  std::vector<int8_t> q, zeros;
  std::vector<float> scales;
};
Q4Host randomQ4(int64_t out, int64_t in, int64_t groupSize) {
  Q4Host w;
  const int64_t rowBytes = (in + 1) / 2;
  const int64_t groups = (in + groupSize - 1) / groupSize;
  w.q.assign(size_t(out * rowBytes), 0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      uint8_t &b =
          reinterpret_cast<uint8_t &>(w.q[size_t(o * rowBytes + i / 2)]);
      b = uint8_t(b | ((gRng() % 16) << ((i & 1) * 4)));
    }
  w.zeros.resize(size_t(out * groups));
  for (int8_t &z : w.zeros)
    z = int8_t(gRng() % 16);
  std::uniform_real_distribution<float> dist(1e-3f, 0.05f);
  w.scales.resize(size_t(out * groups));
  for (float &v : w.scales)
    v = dist(gRng);
  std::fill(w.scales.begin(), w.scales.begin() + groups, 0.0f);
  return w;
}

/// W4A16 y = x W^T (W = scales * (q - zeros), group-wise) with y of type Y
/// (T or float) against the CPU kiln_k_linear_w4a16 on the same (rounded) x.
/// Shapes cover the 16-byte GEMV path (in, group multiples of 32, aligned
/// q; x aligned or not), the byte path (odd in, short last group, groups not
/// a multiple of 32, misaligned q) and the tiled kernel; padX/padQ/padY
/// misalign pointers.
template <typename T, typename Y> void checkLinearW4(Context &c) {
  struct Shape {
    int64_t n, in, out, group, padX, padQ, padY;
  };
  const Shape shapes[] = {
      {1, 4096, 1001, 128, 0, 0, 0}, {1, 11008, 37, 128, 0, 0, 0},
      {1, 4096, 64, 32, 0, 0, 0},    {1, 2048, 129, 64, 1, 0, 1},
      {1, 96, 5, 32, 0, 0, 0},       {1, 172, 65, 128, 0, 0, 0},
      {1, 333, 7, 64, 0, 0, 0},      {1, 13, 1, 32, 0, 0, 0},
      {1, 4096, 77, 128, 0, 3, 0},   {1, 96, 9, 6, 0, 0, 0},
      {1, 1100, 33, 48, 1, 1, 1},    {2, 333, 7, 64, 0, 0, 0},
      {5, 172, 65, 128, 0, 0, 0},    {17, 1100, 301, 64, 0, 0, 0},
      {64, 512, 1023, 128, 0, 0, 0}, {9, 130, 66, 2, 1, 1, 1},
      {4, 1100, 33, 48, 0, 0, 0},    {100, 4096, 128, 128, 0, 0, 0}};
  for (const Shape &s : shapes) {
    std::vector<float> x = randomRounded<T>(size_t(s.n * s.in), -1, 1);
    Q4Host w = randomQ4(s.out, s.in, s.group);
    DevBuf<T> dx(x.size(), size_t(s.padX));
    DevBuf<int8_t> dq(w.q.size(), size_t(s.padQ)), dz(w.zeros.size());
    DevBuf<float> dScales(w.scales.size());
    DevBuf<Y> dy(size_t(s.n * s.out), size_t(s.padY));
    dx.upload(x);
    CHECK_CUDA(cudaMemcpy(dq.data(), w.q.data(), w.q.size(),
                          cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dz.data(), w.zeros.data(), w.zeros.size(),
                          cudaMemcpyHostToDevice));
    dScales.upload(w.scales);
    kiln_cuda_linear_w4a16(&c.ctx, dx.data(), dq.data(), dScales.data(),
                           dz.data(), dy.data(), s.n, s.in, s.out, s.group);
    std::string err = c.finish();
    std::vector<float> ref(static_cast<size_t>(s.n * s.out));
    kiln_k_linear_w4a16(x.data(), w.q.data(), w.scales.data(), w.zeros.data(),
                        ref.data(), s.n, s.in, s.out, s.group);
    std::vector<float> got = dy.download(ref.size());
    for (int64_t i = 0; i < s.n; ++i)
      if (got[size_t(i * s.out)] != 0.0f && err.empty())
        err = "zero row (scales 0) gave " +
              std::to_string(got[size_t(i * s.out)]);
    std::string name =
        std::is_same<Y, float>::value && !std::is_same<T, float>::value
            ? "linear_w4a16->f32"
            : "linear_w4a16";
    report(name.c_str(), Dtype<T>::name,
           fmt("n=%lld in=%lld out=%lld g=%lld pad=%lld/%lld", s.n, s.in,
               s.out, s.group, s.padX, s.padQ),
           got, ref,
           std::is_same<Y, float>::value ? Dtype<T>::tol / 4 + 1e-5
                                         : Dtype<T>::tol,
           err);
  }
  // An odd group_size is refused with an argument error.
  {
    DevBuf<T> dx(64);
    DevBuf<int8_t> dq(32 * 4), dz(4 * 4);
    DevBuf<float> dScales(4 * 4);
    DevBuf<Y> dy(4);
    kiln_cuda_linear_w4a16(&c.ctx, dx.data(), dq.data(), dScales.data(),
                           dz.data(), dy.data(), 1, 64, 4, 17);
    std::string err = c.finish();
    report("linear_w4a16(odd group)", Dtype<T>::name, "n=1 in=64 out=4 g=17",
           {}, {}, 0.0,
           err.find("group_size") != std::string::npos
               ? std::string()
               : "expected a group_size argument error, got '" + err + "'");
  }
}

/// GGML block formats (kiln_rt/block_formats.h): kiln_cuda_linear_blocks
/// (GEMV for n = 1, the 16 x 16 tiled GEMM for n > 1, depths that are not a
/// multiple of the 256-wide tile for the 32-element formats) and
/// kiln_cuda_embedding_blocks (an out-of-range id gives a zero row) against
/// the CPU kernels on random blocks whose f16 fields are finite.
void checkBlocks(Context &c) {
  struct Fmt {
    int64_t id;
    std::vector<int> halves;
  };
  const Fmt fmts[] = {{KILN_BLOCK_Q4_0, {0}},    {KILN_BLOCK_Q4_1, {0, 2}},
                      {KILN_BLOCK_Q5_0, {0}},    {KILN_BLOCK_Q5_1, {0, 2}},
                      {KILN_BLOCK_Q8_0, {0}},    {KILN_BLOCK_Q2_K, {80, 82}},
                      {KILN_BLOCK_Q3_K, {108}},  {KILN_BLOCK_Q4_K, {0, 2}},
                      {KILN_BLOCK_Q5_K, {0, 2}}, {KILN_BLOCK_Q6_K, {208}}};
  for (const Fmt &f : fmts) {
    const int64_t elems = kiln_block_elems(f.id), bytes = kiln_block_bytes(f.id);
    const int64_t in = elems == 32 ? 800 : 768;
    auto blocks = [&](int64_t rows) {
      std::vector<int8_t> w(size_t(rows * in / elems * bytes));
      for (int8_t &b : w)
        b = int8_t(gRng() & 0xff);
      for (size_t k = 0; k < w.size() / size_t(bytes); ++k)
        for (int off : f.halves) {
          uint16_t h = uint16_t(((gRng() & 1) << 15) | ((5 + gRng() % 7) << 10) |
                                (gRng() & 1023));
          w[k * bytes + off] = int8_t(h & 0xff);
          w[k * bytes + off + 1] = int8_t(h >> 8);
        }
      return w;
    };
    for (int64_t n : {int64_t(1), int64_t(20)}) {
      const int64_t out = n == 1 ? 37 : 70;
      std::vector<int8_t> w = blocks(out);
      std::vector<float> x = randomRounded<float>(size_t(n * in), -1, 1);
      DevBuf<float> dx(x.size()), dy(size_t(n * out));
      DevBuf<int8_t> dw(w.size());
      dx.upload(x);
      CHECK_CUDA(cudaMemcpy(dw.data(), w.data(), w.size(), cudaMemcpyHostToDevice));
      kiln_cuda_linear_blocks(&c.ctx, dx.data(), dw.data(), dy.data(), n, in,
                              out, f.id);
      std::string err = c.finish();
      std::vector<float> ref(size_t(n * out));
      kiln_k_linear_blocks(x.data(), w.data(), ref.data(), n, in, out, f.id);
      report("linear_blocks", kiln_block_format_name(f.id),
             fmt("n=%lld in=%lld out=%lld", (long long)n, (long long)in,
                 (long long)out),
             dy.download(ref.size()), ref, 1e-5, err);
    }
    const int64_t vocab = 6;
    std::vector<int8_t> table = blocks(vocab);
    std::vector<int32_t> tokens = {5, 0, 3, 5};
    DevBuf<int8_t> dt(table.size());
    DevBuf<int32_t> dtok(tokens.size());
    DevBuf<float> dout(tokens.size() * size_t(in));
    CHECK_CUDA(cudaMemcpy(dt.data(), table.data(), table.size(),
                          cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dtok.data(), tokens.data(), tokens.size() * 4,
                          cudaMemcpyHostToDevice));
    kiln_cuda_embedding_blocks(&c.ctx, dtok.data(), int64_t(tokens.size()),
                               dt.data(), vocab, in, dout.data(), f.id);
    std::string err = c.finish();
    std::vector<float> ref(tokens.size() * size_t(in));
    kiln_k_embedding_blocks(tokens.data(), int64_t(tokens.size()), table.data(),
                            vocab, in, ref.data(), f.id);
    report("embedding_blocks", kiln_block_format_name(f.id),
           fmt("n=4 dim=%lld", (long long)in), dout.download(ref.size()), ref,
           0.0, err);
  }
}

template <typename T> void checkRope(Context &c) {
  struct Shape {
    int64_t n, heads, headDim, rotDim, pos;
    bool inPlace;
  };
  const Shape shapes[] = {{1, 4, 64, 64, 37, false},
                          {5, 3, 128, 64, 100, false},
                          {3, 2, 8, 8, 0, true},
                          {2, 2, 9, 6, 4000, false},
                          {4, 32, 128, 128, 7, true}};
  for (const Shape &s : shapes) {
    const int64_t count = s.n * s.heads * s.headDim;
    std::vector<float> x = randomRounded<T>(size_t(count), -1, 1);
    DevBuf<T> dx(static_cast<size_t>(count)), dy(static_cast<size_t>(count));
    dx.upload(x);
    c.setPos(s.pos);
    T *out = s.inPlace ? dx.data() : dy.data();
    kiln_cuda_rope(&c.ctx, dx.data(), out, s.n, s.heads, s.headDim, s.rotDim,
                   /*pos ignored*/ -1, 10000.0f);
    std::string err = c.finish();
    std::vector<float> ref(static_cast<size_t>(count));
    kiln_k_rope(x.data(), ref.data(), s.n, s.heads, s.headDim, s.rotDim, s.pos,
                10000.0f);
    report("rope", Dtype<T>::name,
           fmt("n=%lld heads=%lld head_dim=%lld rot=%lld pos=%lld inplace=%lld",
               s.n, s.heads, s.headDim, s.rotDim, s.pos, s.inPlace),
           (s.inPlace ? dx : dy).download(size_t(count)), ref, Dtype<T>::tol,
           err);
  }
}

template <typename T> void checkAttention(Context &c) {
  struct Shape {
    int64_t n, pos, heads, kvHeads, headDim;
  };
  const Shape shapes[] = {
      {1, 0, 4, 4, 64},      {1, 300, 8, 2, 128}, {1, 1000, 4, 1, 8},
      {1, 2047, 32, 8, 128}, {1, 77, 3, 3, 80},   {1, 5, 2, 1, 256},
      {7, 0, 4, 2, 64},      {33, 50, 4, 1, 128}, {5, 3, 2, 2, 8},
      {20, 10, 2, 1, 256},   {64, 100, 8, 8, 64}, {17, 0, 3, 1, 96},
      {2, 0, 1, 1, 16}};
  for (const Shape &s : shapes) {
    const int64_t maxSeq = s.pos + s.n + 13;
    const int64_t qDim = s.heads * s.headDim, kvDim = s.kvHeads * s.headDim;
    // Wide q: peaked softmax rows exercise the online rescaling.
    std::vector<float> q = randomRounded<T>(size_t(s.n * qDim), -4, 4);
    std::vector<float> k = randomRounded<T>(size_t(s.n * kvDim), -2, 2);
    std::vector<float> v = randomRounded<T>(size_t(s.n * kvDim), -1, 1);
    std::vector<float> past =
        randomRounded<T>(size_t(2 * s.pos * kvDim), -2, 2);
    // CPU caches: rows [0, pos) from `past`, the rest zero.
    std::vector<float> kc(size_t(maxSeq * kvDim), 0.0f), vc(kc.size(), 0.0f);
    std::copy(past.begin(), past.begin() + s.pos * kvDim, kc.begin());
    std::copy(past.begin() + s.pos * kvDim, past.end(), vc.begin());
    DevBuf<T> dq(q.size()), dk(k.size()), dv(v.size()), dkc(kc.size()),
        dvc(vc.size()), dOut(q.size());
    dq.upload(q);
    dk.upload(k);
    dv.upload(v);
    // Device caches: rows [0, pos) uploaded, rows >= pos stay NaN-poisoned.
    if (s.pos > 0) {
      dkc.upload(std::vector<float>(kc.begin(), kc.begin() + s.pos * kvDim));
      dvc.upload(std::vector<float>(vc.begin(), vc.begin() + s.pos * kvDim));
    }
    c.setPos(s.pos);
    const float scale = 1.0f / std::sqrt(float(s.headDim));
    kiln_cuda_attention(&c.ctx, dq.data(), dk.data(), dv.data(), dkc.data(),
                        dvc.data(), dOut.data(), s.n, /*pos ignored*/ -1,
                        s.heads, s.kvHeads, s.headDim, maxSeq, scale);
    std::string err = c.finish();
    std::vector<float> ref(q.size());
    kiln_k_attention(q.data(), k.data(), v.data(), kc.data(), vc.data(),
                     ref.data(), s.n, s.pos, s.heads, s.kvHeads, s.headDim,
                     maxSeq, scale);
    const std::string shape =
        fmt("n=%lld pos=%lld heads=%lld kv_heads=%lld head_dim=%lld", s.n,
            s.pos, s.heads, s.kvHeads, s.headDim);
    report("attention", Dtype<T>::name, shape, dOut.download(ref.size()), ref,
           Dtype<T>::tol, err);
    // The appended rows must equal the new keys/values exactly.
    const size_t rows = size_t((s.pos + s.n) * kvDim);
    std::vector<float> gotK = dkc.download(rows), gotV = dvc.download(rows);
    std::vector<float> got(gotK), want(kc.begin(), kc.begin() + long(rows));
    got.insert(got.end(), gotV.begin(), gotV.end());
    want.insert(want.end(), vc.begin(), vc.begin() + long(rows));
    report("attention-kv-append", Dtype<T>::name, shape, got, want, 0.0, "");
  }
}

/// Raw device bytes (int8 caches, float scales) poisoned with 0xFF: int8 -1,
/// float NaN, so unwritten scales read by the attention show up as NaN.
template <typename E> struct RawBuf {
  E *p = nullptr;
  size_t count;
  explicit RawBuf(size_t count) : count(count) {
    CHECK_CUDA(cudaMalloc(&p, sizeof(E) * (count + 1)));
    CHECK_CUDA(cudaMemset(p, 0xFF, sizeof(E) * (count + 1)));
  }
  ~RawBuf() { cudaFree(p); }
  RawBuf(const RawBuf &) = delete;
  RawBuf &operator=(const RawBuf &) = delete;
  void upload(const E *h, size_t n) {
    CHECK_CUDA(cudaMemcpy(p, h, sizeof(E) * n, cudaMemcpyHostToDevice));
  }
  std::vector<E> download(size_t n) const {
    std::vector<E> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), p, sizeof(E) * n, cudaMemcpyDeviceToHost));
    return h;
  }
};

/// kiln_cuda_attention_kv8 against kiln_k_attention_kv8. Rows [0, pos) are
/// quantized by the CPU kernel and uploaded; the GPU appends rows [pos,
/// pos + n). Cache check: scales bit-exact, q equal; both sides divide with
/// correct rounding (__fdiv_rn / IEEE '/'), so they should agree exactly,
/// but a q differing by 1 (a quotient a rounding apart at a .5 tie, e.g. a
/// different division path) is tolerated and counted; anything else fails.
template <typename T> void checkAttentionKv8(Context &c) {
  struct Shape {
    int64_t n, pos, heads, kvHeads, headDim;
  };
  const Shape shapes[] = {
      {1, 0, 4, 4, 64},     {1, 300, 8, 2, 128}, {1, 1000, 4, 1, 8},
      {1, 77, 3, 3, 80},    {1, 5, 2, 1, 256},   {7, 0, 4, 2, 64},
      {33, 50, 4, 1, 128},  {5, 3, 2, 2, 8},     {20, 10, 2, 1, 256},
      {64, 100, 8, 8, 64},  {17, 0, 3, 1, 96},   {2, 0, 1, 1, 16}};
  for (const Shape &s : shapes) {
    const int64_t maxSeq = s.pos + s.n + 13;
    const int64_t qDim = s.heads * s.headDim, kvDim = s.kvHeads * s.headDim;
    std::vector<float> q = randomRounded<T>(size_t(s.n * qDim), -4, 4);
    std::vector<float> k = randomRounded<T>(size_t(s.n * kvDim), -2, 2);
    std::vector<float> v = randomRounded<T>(size_t(s.n * kvDim), -1, 1);
    std::vector<int8_t> kc(size_t(maxSeq * kvDim), 0), vc(kc.size(), 0);
    std::vector<float> ks(size_t(maxSeq * s.kvHeads), 0.0f), vs(ks.size(), 0);
    const float scale = 1.0f / std::sqrt(float(s.headDim));
    if (s.pos > 0) { // past rows, quantized by the CPU kernel
      std::vector<float> pk = randomRounded<T>(size_t(s.pos * kvDim), -2, 2);
      std::vector<float> pv = randomRounded<T>(size_t(s.pos * kvDim), -1, 1);
      std::vector<float> pq(size_t(s.pos * qDim), 0.0f), po(pq.size());
      kiln_k_attention_kv8(pq.data(), pk.data(), pv.data(), kc.data(),
                           vc.data(), ks.data(), vs.data(), po.data(), s.pos,
                           0, s.heads, s.kvHeads, s.headDim, maxSeq, scale);
    }
    DevBuf<T> dq(q.size()), dk(k.size()), dv(v.size()), dOut(q.size());
    RawBuf<int8_t> dkc(kc.size()), dvc(vc.size());
    RawBuf<float> dks(ks.size()), dvs(vs.size());
    dq.upload(q);
    dk.upload(k);
    dv.upload(v);
    if (s.pos > 0) { // rows >= pos stay poisoned
      dkc.upload(kc.data(), size_t(s.pos * kvDim));
      dvc.upload(vc.data(), size_t(s.pos * kvDim));
      dks.upload(ks.data(), size_t(s.pos * s.kvHeads));
      dvs.upload(vs.data(), size_t(s.pos * s.kvHeads));
    }
    c.setPos(s.pos);
    kiln_cuda_attention_kv8(&c.ctx, dq.data(), dk.data(), dv.data(), dkc.p,
                            dvc.p, dks.p, dvs.p, dOut.data(), s.n,
                            /*pos ignored*/ -1, s.heads, s.kvHeads, s.headDim,
                            maxSeq, scale);
    std::string err = c.finish();
    std::vector<float> ref(q.size());
    kiln_k_attention_kv8(q.data(), k.data(), v.data(), kc.data(), vc.data(),
                         ks.data(), vs.data(), ref.data(), s.n, s.pos, s.heads,
                         s.kvHeads, s.headDim, maxSeq, scale);
    const std::string shape =
        fmt("n=%lld pos=%lld heads=%lld kv_heads=%lld head_dim=%lld", s.n,
            s.pos, s.heads, s.kvHeads, s.headDim);
    report("attention-kv8", Dtype<T>::name, shape, dOut.download(ref.size()),
           ref, Dtype<T>::tol, err);
    // Appended rows: scales bit-exact, q within 1 (counted).
    const size_t rows = size_t(s.pos + s.n);
    std::vector<int8_t> gk = dkc.download(rows * kvDim),
                        gv = dvc.download(rows * kvDim);
    std::vector<float> gks = dks.download(rows * s.kvHeads),
                       gvs = dvs.download(rows * s.kvHeads);
    long off1 = 0, bad = 0;
    for (size_t i = 0; i < gk.size(); ++i)
      for (int d : {int(gk[i]) - int(kc[i]), int(gv[i]) - int(vc[i])})
        (d == 0 ? 0 : (d == 1 || d == -1) ? ++off1 : ++bad);
    for (size_t i = 0; i < gks.size(); ++i)
      bad += std::memcmp(&gks[i], &ks[i], 4) != 0 ||
             std::memcmp(&gvs[i], &vs[i], 4) != 0;
    const bool ok = bad == 0;
    (ok ? gPassed : gFailed)++;
    std::printf("%s attention-kv8-append %s %s mismatches=%ld off_by_one=%ld\n",
                ok ? "PASS" : "FAIL", Dtype<T>::name, shape.c_str(), bad, off1);
    std::fflush(stdout);
  }
}

//===----------------------------------------------------------------------===//
// Group-wise W8A16, SmoothQuant W8A8 and FP8 KV: host references written
// from the formulas of kernel_abi.h (and the OCP OFP8 spec for E4M3), so the
// CUDA kernels are checked independently of the CPU kernels' code.
//===----------------------------------------------------------------------===//

/// FP8 E4M3 ("E4M3FN"; OCP 8-bit Floating Point Specification (OFP8) v1.0,
/// sec. 5.3): sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is
/// subnormal (m * 2^-9), no infinities, S.1111.111 is NaN, so the largest
/// finite value is 1.75 * 2^8 = 448. Encoding as the kernels do: round to
/// nearest, ties to even, and saturate values beyond 448 (and +-inf) to
/// +-448; NaN gives 0x7F with the sign.
uint8_t e4m3Encode(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x))
    return uint8_t(sign | 0x7F);
  const double a = std::fabs(double(x));
  if (a >= 448.0)
    return uint8_t(sign | 0x7E);
  int e = 0;
  std::frexp(a, &e); // a = f 2^e, f in [0.5, 1): binade 2^(e - 1)
  int binade = e - 1;
  if (a == 0.0 || binade < -6)
    binade = -6; // subnormals share the quantum of the lowest normal binade
  // 3 mantissa bits: the quantum of the binade is 2^(binade - 3); the
  // division by a power of two is exact, nearbyint rounds ties to even.
  double m = std::nearbyint(std::ldexp(a, 3 - binade));
  if (m >= 16.0) { // rounded up into the next binade
    ++binade;
    m = 8.0;
  }
  int code = (binade == -6 && m < 8.0)
                 ? int(m) // subnormal (or zero): exponent field 0
                 : ((binade + 7) << 3) | (int(m) - 8);
  if (code > 0x7E)
    code = 0x7E;
  return uint8_t(sign | code);
}

/// The value of an E4M3 byte (NaN for S.1111.111).
float e4m3Decode(uint8_t b) {
  const int exp = (b >> 3) & 15, man = b & 7;
  if (exp == 15 && man == 7)
    return std::nanf("");
  const float v = exp == 0 ? std::ldexp(float(man), -9)
                           : std::ldexp(float(8 + man), exp - 10);
  return (b & 0x80) ? -v : v;
}

/// Compares the host E4M3 reference with cuda_fp8.h's conversions (their
/// host paths): every code decoded, and the encoder on every representable
/// value, every midpoint between neighbours (ties), the floats just around
/// each midpoint, the saturation and underflow boundaries and random
/// floats. Needs no GPU; returns the number of disagreements.
long checkE4m3Host() {
  long bad = 0, count = 0;
  auto cmpEncode = [&](float v) {
    ++count;
    const uint8_t mine = e4m3Encode(v);
    const uint8_t nv =
        uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
    if (mine != nv && bad++ < 10)
      std::printf("e4m3 encode mismatch: %a -> 0x%02x, cuda_fp8.h 0x%02x\n",
                  double(v), mine, nv);
  };
  std::vector<float> finite;
  for (int b = 0; b < 256; ++b) {
    ++count;
    const float mine = e4m3Decode(uint8_t(b));
    const float nv = __half2float(
        __half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(b), __NV_E4M3)));
    const bool same = std::isnan(mine) ? std::isnan(nv)
                                       : std::memcmp(&mine, &nv, 4) == 0;
    if (!same && bad++ < 10)
      std::printf("e4m3 decode mismatch: 0x%02x -> %a, cuda_fp8.h %a\n", b,
                  double(mine), double(nv));
    if (b < 0x80 && !std::isnan(mine))
      finite.push_back(mine); // ascending: codes 0x00 .. 0x7E
  }
  for (size_t i = 0; i < finite.size(); ++i) {
    for (float s : {1.0f, -1.0f})
      cmpEncode(s * finite[i]);
    if (i + 1 < finite.size()) {
      const float mid = 0.5f * (finite[i] + finite[i + 1]); // exact
      for (float s : {1.0f, -1.0f})
        for (float v : {mid, std::nextafter(mid, 0.0f),
                        std::nextafter(mid, 1000.0f)})
          cmpEncode(s * v);
    }
  }
  for (float v : {448.0f, 449.0f, 463.99f, 464.0f, 464.01f, 480.0f, 1e6f,
                  3.4e38f, INFINITY, 0.0f, 0x1p-10f, 0x1.000002p-10f,
                  0x1.fffffep-11f, 0x1p-12f, 1e-30f, 1e-45f, 0x1.7p-7f})
    for (float s : {1.0f, -1.0f})
      cmpEncode(s * v);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-14, 10);
  for (int i = 0; i < 200000; ++i)
    cmpEncode(((gRng() & 1) ? -1.0f : 1.0f) *
              std::ldexp(mant(gRng), expo(gRng)));
  std::printf("kiln-gpu-kernel-check: host E4M3 reference vs cuda_fp8.h: "
              "%ld values, %ld disagree\n",
              count, bad);
  return bad;
}

/// Group-wise symmetric int8 quantization of w [out, in]: per (row, group of
/// `group` columns) scale = max|w| / 127, q = round(w / scale); row 0 is
/// made all zero (scales 0).
void quantizeGroups(std::vector<float> &w, int64_t out, int64_t in,
                    int64_t group, std::vector<int8_t> &q,
                    std::vector<float> &scales) {
  const int64_t groups = (in + group - 1) / group;
  std::fill(w.begin(), w.begin() + in, 0.0f);
  q.assign(size_t(out * in), 0);
  scales.assign(size_t(out * groups), 0.0f);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t i0 = g * group, i1 = std::min(in, i0 + group);
      float maxAbs = 0.0f;
      for (int64_t i = i0; i < i1; ++i)
        maxAbs = std::max(maxAbs, std::fabs(w[size_t(o * in + i)]));
      const float scale = maxAbs / 127.0f;
      scales[size_t(o * groups + g)] = scale;
      for (int64_t i = i0; i < i1; ++i) {
        const float v =
            scale > 0.0f ? std::nearbyint(w[size_t(o * in + i)] / scale) : 0.0f;
        q[size_t(o * in + i)] = int8_t(std::min(127.0f, std::max(-127.0f, v)));
      }
    }
}

/// Group-wise W8A16 (kiln_cuda_linear_w8a16 with group_size > 0) against
/// y[r, o] = sum_i scales[o, i / G] * q[o, i] * x[r, i] in double. Shapes
/// cover the 16-byte GEMV path (G = 32, GGUF Q8_0; G = 48, 128), the
/// element path (in or G not a multiple of 16, misaligned q), the tiled
/// kernel, a short last group; row 0 has zero scales (must give 0).
template <typename T, typename Y> void checkLinearW8Group(Context &c) {
  struct Shape {
    int64_t n, in, out, group, padX, padQ, padY;
  };
  const Shape shapes[] = {
      {1, 4096, 1001, 32, 0, 0, 0}, {1, 11008, 37, 32, 0, 0, 0},
      {1, 4096, 64, 128, 1, 0, 1},  {1, 96, 5, 48, 0, 0, 0},
      {1, 172, 65, 32, 0, 0, 0},    {1, 333, 7, 32, 0, 0, 0},
      {1, 4096, 77, 32, 0, 3, 0},   {1, 100, 9, 7, 0, 0, 0},
      {1, 13, 1, 32, 0, 0, 0},      {2, 333, 7, 32, 0, 0, 0},
      {5, 172, 65, 32, 0, 0, 0},    {17, 1100, 301, 32, 0, 0, 0},
      {64, 512, 1023, 32, 0, 0, 0}, {9, 130, 66, 7, 1, 1, 1},
      {100, 4096, 128, 64, 0, 0, 0}};
  for (const Shape &s : shapes) {
    std::vector<float> x = randomRounded<T>(size_t(s.n * s.in), -1, 1);
    std::vector<float> w = randomRounded<float>(size_t(s.out * s.in), -1, 1);
    std::vector<int8_t> q;
    std::vector<float> scales;
    quantizeGroups(w, s.out, s.in, s.group, q, scales);
    const int64_t groups = (s.in + s.group - 1) / s.group;
    DevBuf<T> dx(x.size(), size_t(s.padX));
    DevBuf<int8_t> dq(q.size(), size_t(s.padQ));
    DevBuf<float> dScales(scales.size());
    DevBuf<Y> dy(size_t(s.n * s.out), size_t(s.padY));
    dx.upload(x);
    CHECK_CUDA(cudaMemcpy(dq.data(), q.data(), q.size(),
                          cudaMemcpyHostToDevice));
    dScales.upload(scales);
    kiln_cuda_linear_w8a16(&c.ctx, dx.data(), dq.data(), dScales.data(),
                           dy.data(), s.n, s.in, s.out, s.group);
    std::string err = c.finish();
    std::vector<float> ref(static_cast<size_t>(s.n * s.out));
    for (int64_t r = 0; r < s.n; ++r)
      for (int64_t o = 0; o < s.out; ++o) {
        double acc = 0.0;
        for (int64_t i = 0; i < s.in; ++i)
          acc += double(scales[size_t(o * groups + i / s.group)]) *
                 double(q[size_t(o * s.in + i)]) * double(x[size_t(r * s.in + i)]);
        ref[size_t(r * s.out + o)] = Dtype<Y>::to(Dtype<Y>::from(float(acc)));
      }
    std::vector<float> got = dy.download(ref.size());
    for (int64_t i = 0; i < s.n; ++i)
      if (got[size_t(i * s.out)] != 0.0f && err.empty())
        err = "zero row (scales 0) gave " +
              std::to_string(got[size_t(i * s.out)]);
    std::string name =
        std::is_same<Y, float>::value && !std::is_same<T, float>::value
            ? "linear_w8a16_grouped->f32"
            : "linear_w8a16_grouped";
    const double tol = std::is_same<Y, float>::value ? Dtype<T>::tol / 4 + 1e-5
                                                     : Dtype<T>::tol;
    const std::string shape =
        fmt("n=%lld in=%lld out=%lld g=%lld pad=%lld/%lld", s.n, s.in, s.out,
            s.group, s.padX, s.padQ);
    report(name.c_str(), Dtype<T>::name, shape, got, ref, tol, err);
    std::vector<float> cpu(ref.size());
    kiln_k_linear_w8a16(x.data(), q.data(), scales.data(), cpu.data(), s.n,
                        s.in, s.out, s.group);
    for (float &v : cpu)
      v = Dtype<Y>::to(Dtype<Y>::from(v));
    report((name + "-vs-cpu").c_str(), Dtype<T>::name, shape, got, cpu, tol,
           err);
  }
  { // A negative group_size is refused with an argument error.
    DevBuf<T> dx(64);
    DevBuf<int8_t> dq(64 * 4);
    DevBuf<float> dScales(4);
    DevBuf<Y> dy(4);
    kiln_cuda_linear_w8a16(&c.ctx, dx.data(), dq.data(), dScales.data(),
                           dy.data(), 1, 64, 4, -32);
    std::string err = c.finish();
    report("linear_w8a16(negative group)", Dtype<T>::name,
           "n=1 in=64 out=4 g=-32", {}, {}, 0.0,
           err.find("group_size") != std::string::npos
               ? std::string()
               : "expected a group_size argument error, got '" + err + "'");
  }
}

/// kernel_abi.h kiln_k_linear_w8a8, written from its formula: sx[r] =
/// actScale > 0 ? actScale : max_i |x[r, i]| / 127; xq = clamp(roundf(x /
/// sx), -127, 127) (0 when sx == 0); y[r, o] = sx[r] * scales[o] *
/// (float) sum_i xq[r, i] q[o, i] (int32 sum).
std::vector<float> refW8A8(const std::vector<float> &x,
                           const std::vector<int8_t> &q,
                           const std::vector<float> &scales, int64_t n,
                           int64_t in, int64_t out, float actScale) {
  std::vector<float> y(size_t(n * out));
  std::vector<int32_t> xq(static_cast<size_t>(in));
  for (int64_t r = 0; r < n; ++r) {
    float sx = actScale;
    if (!(actScale > 0.0f)) {
      float amax = 0.0f;
      for (int64_t i = 0; i < in; ++i)
        amax = std::max(amax, std::fabs(x[size_t(r * in + i)]));
      sx = amax / 127.0f;
    }
    for (int64_t i = 0; i < in; ++i) {
      const float v =
          sx == 0.0f ? 0.0f : std::round(x[size_t(r * in + i)] / sx);
      xq[size_t(i)] = int32_t(std::min(127.0f, std::max(-127.0f, v)));
    }
    for (int64_t o = 0; o < out; ++o) {
      int32_t acc = 0;
      for (int64_t i = 0; i < in; ++i)
        acc += xq[size_t(i)] * int32_t(q[size_t(o * in + i)]);
      const float prod = sx * scales[size_t(o)];
      y[size_t(r * out + o)] = prod * float(acc);
    }
  }
  return y;
}

/// SmoothQuant W8A8 (kiln_cuda_linear_w8a8) against refW8A8, per token
/// (act_scale 0) and static per tensor (act_scale = 0.6 max|x| / 127, so
/// the largest activations clip at +-127). x row 1 (when n > 1) is all zero
/// (per token: sx = 0 must give y = 0, not NaN); weight row 0 is zero.
/// Shapes cover the 16-byte __dp4a GEMV, its byte path (in % 16 != 0,
/// misaligned q), the tiled kernel with word and byte weight loads, and (a
/// 100 KB workspace) the chunking of the quantized activations.
template <typename T, typename Y> void checkLinearW8A8(Context &c, bool perTensor) {
  struct Shape {
    int64_t n, in, out, padX, padQ, padY;
    uint64_t workspace; // 0: the context's
  };
  const Shape shapes[] = {{1, 4096, 1001, 0, 0, 0, 0}, {1, 11008, 37, 0, 0, 0, 0},
                          {1, 333, 7, 0, 0, 0, 0},     {1, 4096, 77, 1, 3, 1, 0},
                          {1, 13, 1, 0, 0, 0, 0},      {2, 333, 7, 0, 0, 0, 0},
                          {5, 172, 65, 0, 0, 0, 0},    {17, 1100, 301, 0, 0, 0, 0},
                          {64, 512, 1023, 0, 0, 0, 0}, {9, 130, 66, 1, 1, 1, 0},
                          {100, 4096, 128, 0, 2, 0, 0},
                          {300, 1000, 70, 0, 0, 0, 100000}};
  for (const Shape &s : shapes) {
    std::vector<float> x = randomRounded<T>(size_t(s.n * s.in), -1, 1);
    if (s.n > 1)
      std::fill(x.begin() + s.in, x.begin() + 2 * s.in, 0.0f);
    std::vector<float> w = randomRounded<float>(size_t(s.out * s.in), -1, 1);
    std::fill(w.begin(), w.begin() + s.in, 0.0f);
    std::vector<int8_t> q;
    std::vector<float> scales;
    quantizeRows(w, s.out, s.in, q, scales);
    float actScale = 0.0f;
    if (perTensor) {
      float amax = 0.0f;
      for (float v : x)
        amax = std::max(amax, std::fabs(v));
      actScale = 0.6f * amax / 127.0f;
    }
    DevBuf<T> dx(x.size(), size_t(s.padX));
    DevBuf<int8_t> dq(q.size(), size_t(s.padQ));
    DevBuf<float> dScales(scales.size());
    DevBuf<Y> dy(size_t(s.n * s.out), size_t(s.padY));
    dx.upload(x);
    CHECK_CUDA(cudaMemcpy(dq.data(), q.data(), q.size(),
                          cudaMemcpyHostToDevice));
    dScales.upload(scales);
    const uint64_t fullWorkspace = c.ctx.workspace_bytes;
    if (s.workspace != 0)
      c.ctx.workspace_bytes = s.workspace;
    kiln_cuda_linear_w8a8(&c.ctx, dx.data(), dq.data(), dScales.data(),
                          dy.data(), s.n, s.in, s.out, actScale);
    std::string err = c.finish();
    c.ctx.workspace_bytes = fullWorkspace;
    std::vector<float> ref = refW8A8(x, q, scales, s.n, s.in, s.out, actScale);
    for (float &v : ref)
      v = Dtype<Y>::to(Dtype<Y>::from(v));
    std::vector<float> got = dy.download(ref.size());
    for (int64_t i = 0; i < s.n; ++i)
      if (got[size_t(i * s.out)] != 0.0f && err.empty())
        err = "zero weight row gave " + std::to_string(got[size_t(i * s.out)]);
    if (s.n > 1 && !perTensor)
      for (int64_t o = 0; o < s.out && err.empty(); ++o)
        if (got[size_t(s.out + o)] != 0.0f)
          err = "zero activation row gave " +
                std::to_string(got[size_t(s.out + o)]);
    std::string name = std::string("linear_w8a8_") +
                       (perTensor ? "static" : "per_token") +
                       (std::is_same<Y, float>::value &&
                                !std::is_same<T, float>::value
                            ? "->f32"
                            : "");
    // Integer sums are exact: only the final roundings may differ.
    const double tol = std::is_same<Y, float>::value ? Dtype<T>::tol / 4 + 1e-5
                                                     : Dtype<T>::tol;
    const std::string shape =
        fmt("n=%lld in=%lld out=%lld pad=%lld/%lld ws=%lld", s.n, s.in, s.out,
            s.padX, s.padQ, (long long)s.workspace);
    report(name.c_str(), Dtype<T>::name, shape, got, ref, tol, err);
    std::vector<float> cpu(ref.size());
    kiln_k_linear_w8a8(x.data(), q.data(), scales.data(), cpu.data(), s.n,
                       s.in, s.out, actScale);
    for (float &v : cpu)
      v = Dtype<Y>::to(Dtype<Y>::from(v));
    report((name + "-vs-cpu").c_str(), Dtype<T>::name, shape, got, cpu, tol,
           err);
  }
  { // A negative act_scale is refused with an argument error.
    DevBuf<T> dx(64);
    DevBuf<int8_t> dq(64 * 4);
    DevBuf<float> dScales(4);
    DevBuf<Y> dy(4);
    kiln_cuda_linear_w8a8(&c.ctx, dx.data(), dq.data(), dScales.data(),
                          dy.data(), 1, 64, 4, -1.0f);
    std::string err = c.finish();
    report("linear_w8a8(negative act_scale)", Dtype<T>::name,
           "n=1 in=64 out=4", {}, {}, 0.0,
           err.find("act_scale") != std::string::npos
               ? std::string()
               : "expected an act_scale argument error, got '" + err + "'");
  }
}

/// FP8 KV quantization of rows [n, kvHeads * headDim] per (row, kv head):
/// scale = amax / 448, code = e4m3Encode(x / scale) (0 when scale == 0);
/// codes / scales are written at row `row0` on of caches of max rows.
void quantizeFp8Rows(const std::vector<float> &x, int64_t n, int64_t kvHeads,
                     int64_t headDim, int64_t row0, std::vector<uint8_t> &codes,
                     std::vector<float> &scales) {
  const int64_t kvDim = kvHeads * headDim;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < kvHeads; ++h) {
      const float *xr = x.data() + i * kvDim + h * headDim;
      float amax = 0.0f;
      for (int64_t d = 0; d < headDim; ++d)
        amax = std::max(amax, std::fabs(xr[d]));
      const float sc = amax / 448.0f;
      scales[size_t((row0 + i) * kvHeads + h)] = sc;
      for (int64_t d = 0; d < headDim; ++d)
        codes[size_t((row0 + i) * kvDim + h * headDim + d)] =
            sc == 0.0f ? 0 : e4m3Encode(xr[d] / sc);
    }
}

/// Dequantized cache rows [0, rows): scale * e4m3Decode(code).
std::vector<float> dequantFp8(const std::vector<uint8_t> &codes,
                              const std::vector<float> &scales, int64_t rows,
                              int64_t kvHeads, int64_t headDim) {
  const int64_t kvDim = kvHeads * headDim;
  std::vector<float> v(size_t(rows * kvDim));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < kvDim; ++e)
      v[size_t(r * kvDim + e)] = scales[size_t(r * kvHeads + e / headDim)] *
                                 e4m3Decode(codes[size_t(r * kvDim + e)]);
  return v;
}

/// kiln_cuda_attention_kvf8 (prefill n > 1 and flash-decoding n == 1)
/// against the f32 CPU attention kiln_k_attention run on the dequantized
/// cache: rows [0, pos) quantized on the host and uploaded (rows >= pos stay
/// poisoned), the new K/V rows quantized on the host for the reference and
/// by the GPU append kernel. Cache check: appended codes equal the host
/// encoder's and scales are bit-exact (a code one apart, a division tie
/// resolved differently, is tolerated and counted).
template <typename T> void checkAttentionKvf8(Context &c) {
  struct Shape {
    int64_t n, pos, heads, kvHeads, headDim;
  };
  const Shape shapes[] = {
      {1, 0, 4, 4, 64},     {1, 300, 8, 2, 128}, {1, 1000, 4, 1, 8},
      {1, 77, 3, 3, 80},    {1, 5, 2, 1, 256},   {7, 0, 4, 2, 64},
      {33, 50, 4, 1, 128},  {5, 3, 2, 2, 8},     {20, 10, 2, 1, 256},
      {64, 100, 8, 8, 64},  {17, 0, 3, 1, 96},   {2, 0, 1, 1, 16}};
  for (const Shape &s : shapes) {
    const int64_t maxSeq = s.pos + s.n + 13;
    const int64_t qDim = s.heads * s.headDim, kvDim = s.kvHeads * s.headDim;
    std::vector<float> q = randomRounded<T>(size_t(s.n * qDim), -4, 4);
    std::vector<float> k = randomRounded<T>(size_t(s.n * kvDim), -2, 2);
    std::vector<float> v = randomRounded<T>(size_t(s.n * kvDim), -1, 1);
    // Large outliers in some rows: the scale follows them, small values
    // land in E4M3's subnormal range.
    if (s.n > 2) {
      k[size_t(kvDim + 1)] = Dtype<T>::to(Dtype<T>::from(300.0f));
      v[size_t(2 * kvDim)] = Dtype<T>::to(Dtype<T>::from(-900.0f));
    }
    std::vector<uint8_t> kc(size_t(maxSeq * kvDim), 0), vc(kc.size(), 0);
    std::vector<float> ks(size_t(maxSeq * s.kvHeads), 0.0f), vs(ks.size(), 0);
    if (s.pos > 0) {
      quantizeFp8Rows(randomRounded<T>(size_t(s.pos * kvDim), -2, 2), s.pos,
                      s.kvHeads, s.headDim, 0, kc, ks);
      quantizeFp8Rows(randomRounded<T>(size_t(s.pos * kvDim), -1, 1), s.pos,
                      s.kvHeads, s.headDim, 0, vc, vs);
    }
    std::vector<uint8_t> kcPast(kc), vcPast(vc);
    std::vector<float> ksPast(ks), vsPast(vs);
    quantizeFp8Rows(k, s.n, s.kvHeads, s.headDim, s.pos, kc, ks);
    quantizeFp8Rows(v, s.n, s.kvHeads, s.headDim, s.pos, vc, vs);
    DevBuf<T> dq(q.size()), dk(k.size()), dv(v.size()), dOut(q.size());
    RawBuf<uint8_t> dkc(kc.size()), dvc(vc.size());
    RawBuf<float> dks(ks.size()), dvs(vs.size());
    dq.upload(q);
    dk.upload(k);
    dv.upload(v);
    if (s.pos > 0) { // rows >= pos stay poisoned (0xFF: NaN code and scale)
      dkc.upload(kcPast.data(), size_t(s.pos * kvDim));
      dvc.upload(vcPast.data(), size_t(s.pos * kvDim));
      dks.upload(ksPast.data(), size_t(s.pos * s.kvHeads));
      dvs.upload(vsPast.data(), size_t(s.pos * s.kvHeads));
    }
    c.setPos(s.pos);
    const float scale = 1.0f / std::sqrt(float(s.headDim));
    kiln_cuda_attention_kvf8(&c.ctx, dq.data(), dk.data(), dv.data(), dkc.p,
                             dvc.p, dks.p, dvs.p, dOut.data(), s.n,
                             /*pos ignored*/ -1, s.heads, s.kvHeads,
                             s.headDim, maxSeq, scale);
    std::string err = c.finish();
    // Reference: f32 attention over the dequantized cache; the new rows
    // enter as their dequantized values (what the kernel must read back).
    const int64_t rows = s.pos + s.n;
    std::vector<float> kd = dequantFp8(kc, ks, rows, s.kvHeads, s.headDim);
    std::vector<float> vd = dequantFp8(vc, vs, rows, s.kvHeads, s.headDim);
    std::vector<float> kcRef(size_t(maxSeq * kvDim), 0.0f), vcRef(kcRef.size(), 0.0f);
    std::copy(kd.begin(), kd.begin() + s.pos * kvDim, kcRef.begin());
    std::copy(vd.begin(), vd.begin() + s.pos * kvDim, vcRef.begin());
    std::vector<float> kNew(kd.begin() + s.pos * kvDim, kd.end());
    std::vector<float> vNew(vd.begin() + s.pos * kvDim, vd.end());
    std::vector<float> ref(q.size());
    kiln_k_attention(q.data(), kNew.data(), vNew.data(), kcRef.data(),
                     vcRef.data(), ref.data(), s.n, s.pos, s.heads, s.kvHeads,
                     s.headDim, maxSeq, scale);
    const std::string shape =
        fmt("n=%lld pos=%lld heads=%lld kv_heads=%lld head_dim=%lld", s.n,
            s.pos, s.heads, s.kvHeads, s.headDim);
    const std::vector<float> gotOut = dOut.download(ref.size());
    report("attention-kvf8", Dtype<T>::name, shape, gotOut, ref,
           Dtype<T>::tol, err);
    { // The CPU kernel on the same past cache: output and appended bytes.
      std::vector<uint8_t> ckc(kcPast), cvc(vcPast);
      std::vector<float> cks(ksPast), cvs(vsPast), cpu(q.size());
      kiln_k_attention_kvf8(q.data(), k.data(), v.data(), ckc.data(),
                            cvc.data(), cks.data(), cvs.data(), cpu.data(), s.n,
                            s.pos, s.heads, s.kvHeads, s.headDim, maxSeq,
                            scale);
      report("attention-kvf8-vs-cpu", Dtype<T>::name, shape, gotOut, cpu,
             Dtype<T>::tol, err);
      long diff = 0;
      for (size_t i = 0; i < ckc.size(); ++i)
        diff += ckc[i] != kc[i] || cvc[i] != vc[i];
      for (size_t i = 0; i < cks.size(); ++i)
        diff += std::memcmp(&cks[i], &ks[i], 4) != 0 ||
                std::memcmp(&cvs[i], &vs[i], 4) != 0;
      report("kvf8-host-encoder-vs-cpu", Dtype<T>::name, shape,
             {float(diff)}, {0.0f}, 0.0, "");
    }
    std::vector<uint8_t> gk = dkc.download(size_t(rows * kvDim)),
                         gv = dvc.download(size_t(rows * kvDim));
    std::vector<float> gks = dks.download(size_t(rows * s.kvHeads)),
                       gvs = dvs.download(size_t(rows * s.kvHeads));
    long off1 = 0, bad = 0;
    for (size_t i = 0; i < gk.size(); ++i)
      for (int d : {int(gk[i]) - int(kc[i]), int(gv[i]) - int(vc[i])})
        (d == 0 ? 0 : (d == 1 || d == -1) ? ++off1 : ++bad);
    for (size_t i = 0; i < gks.size(); ++i)
      bad += std::memcmp(&gks[i], &ks[i], 4) != 0 ||
             std::memcmp(&gvs[i], &vs[i], 4) != 0;
    const bool ok = bad == 0;
    (ok ? gPassed : gFailed)++;
    std::printf("%s attention-kvf8-append %s %s mismatches=%ld off_by_one=%ld\n",
                ok ? "PASS" : "FAIL", Dtype<T>::name, shape.c_str(), bad, off1);
    std::fflush(stdout);
  }
}

/// m_t of kernel_abi.h's centered keys straight from the formula (double cos
/// / sin per element), [kvHeads * headDim].
std::vector<float> hostRotatedMean(const std::vector<float> &mu, int64_t t,
                                   int64_t kvHeads, int64_t headDim,
                                   int64_t rotDim, float theta) {
  std::vector<float> m(mu.size());
  for (int64_t h = 0; h < kvHeads; ++h)
    for (int64_t d = 0; d < headDim; ++d) {
      const float *mh = mu.data() + h * headDim;
      if (d >= rotDim / 2 * 2) {
        m[size_t(h * headDim + d)] = mh[d];
        continue;
      }
      const int64_t i = d / 2;
      const double w =
          std::pow(double(theta), -double(2 * i) / double(headDim));
      const double c = std::cos(double(t) * w), sn = std::sin(double(t) * w);
      const double m0 = mh[2 * i], m1 = mh[2 * i + 1];
      m[size_t(h * headDim + d)] =
          d % 2 == 0 ? float(m0 * c - m1 * sn) : float(m0 * sn + m1 * c);
    }
  return m;
}

/// The 8-bit caches of checkAttentionCentered: INT8 (kiln_k_attention_kv8)
/// or FP8 E4M3 (kiln_k_attention_kvf8).
template <bool kFp8> struct CenteredKv;
template <> struct CenteredKv<false> {
  using Code = int8_t;
  static constexpr const char *name = "attention-kv8-centered";
  static float value(int8_t c) { return float(c); }
  static constexpr auto cpu = kiln_k_attention_kv8_centered;
  template <typename T, typename... A> static void gpu(A... a) {
    kiln_cuda_attention_kv8_centered<T>(a...);
  }
};
template <> struct CenteredKv<true> {
  using Code = uint8_t;
  static constexpr const char *name = "attention-kvf8-centered";
  static float value(uint8_t c) { return e4m3Decode(c); }
  static constexpr auto cpu = kiln_k_attention_kvf8_centered;
  template <typename T, typename... A> static void gpu(A... a) {
    kiln_cuda_attention_kvf8_centered<T>(a...);
  }
};

/// kiln_cuda_attention_kv8_centered / kvf8_centered (prefill n > 1 and
/// flash-decoding n == 1; key means with stories260K-like offsets, partial
/// rotary, positions past several 64-row anchors). Rows [0, pos) come from
/// the CPU centered kernel and are uploaded (rows >= pos stay poisoned).
/// Checks: (1) the output against the f32 CPU attention kiln_k_attention on
/// the GPU's own cache bytes dequantized as scale * value + m_t, m_t from
/// hostRotatedMean (the read path, independently of the CPU's m_t code);
/// (2) the output against the CPU centered kernel ("-vs-cpu"); (3) the
/// appended codes and scales against the CPU's: m_t on the two sides may
/// differ in the last float bit (direct sincos vs recurrence, both within
/// the brief's 1e-12), so a code one apart or a scale one ulp apart is
/// tolerated and counted.
template <typename T, bool kFp8> void checkAttentionCentered(Context &c) {
  using Kv = CenteredKv<kFp8>;
  using Code = typename Kv::Code;
  struct Shape {
    int64_t n, pos, heads, kvHeads, headDim, rotDim;
    float theta;
  };
  const Shape shapes[] = {
      {1, 0, 4, 4, 64, 64, 1e4f},     {1, 300, 8, 2, 128, 128, 5e5f},
      {1, 1000, 4, 1, 8, 8, 1e4f},    {1, 77, 3, 3, 80, 40, 1e4f},
      {1, 5, 2, 1, 256, 256, 1e4f},   {7, 0, 4, 2, 64, 32, 1e4f},
      {33, 50, 4, 1, 128, 128, 1e4f}, {5, 3, 8, 4, 8, 8, 1e4f},
      {20, 10, 2, 1, 256, 128, 5e5f}, {64, 100, 8, 8, 64, 64, 1e4f},
      {17, 0, 3, 1, 96, 96, 1e4f},    {1, 4000, 8, 2, 64, 64, 1e4f},
      {40, 1990, 4, 2, 64, 64, 1e4f}};
  for (const Shape &s : shapes) {
    const int64_t maxSeq = s.pos + s.n + 13, rows = s.pos + s.n;
    const int64_t qDim = s.heads * s.headDim, kvDim = s.kvHeads * s.headDim;
    const float scale = 1.0f / std::sqrt(float(s.headDim));
    std::vector<float> mu = randomRounded<float>(size_t(kvDim), -0.5f, 0.5f);
    for (int64_t e = 0; e < kvDim; e += 5)
      mu[size_t(e)] += e % 2 ? -19.0f : 12.0f;
    std::vector<float> q = randomRounded<T>(size_t(s.n * qDim), -4, 4);
    std::vector<float> k = randomRounded<T>(size_t(s.n * kvDim), -2, 2);
    std::vector<float> v = randomRounded<T>(size_t(s.n * kvDim), -1, 1);
    std::vector<Code> kc(size_t(maxSeq * kvDim), 0), vc(kc.size(), 0);
    std::vector<float> ks(size_t(maxSeq * s.kvHeads), 0.0f), vs(ks.size(), 0);
    if (s.pos > 0) { // past rows, by the CPU centered kernel
      std::vector<float> pk = randomRounded<T>(size_t(s.pos * kvDim), -2, 2);
      std::vector<float> pv = randomRounded<T>(size_t(s.pos * kvDim), -1, 1);
      std::vector<float> pq(size_t(s.pos * qDim), 0.0f), po(pq.size());
      Kv::cpu(pq.data(), pk.data(), pv.data(), kc.data(), vc.data(), ks.data(),
              vs.data(), mu.data(), po.data(), s.pos, 0, s.heads, s.kvHeads,
              s.headDim, s.rotDim, maxSeq, scale, s.theta);
    }
    DevBuf<T> dq(q.size()), dk(k.size()), dv(v.size()), dOut(q.size());
    DevBuf<float> dMu(mu.size());
    RawBuf<Code> dkc(kc.size()), dvc(vc.size());
    RawBuf<float> dks(ks.size()), dvs(vs.size());
    dq.upload(q);
    dk.upload(k);
    dv.upload(v);
    dMu.upload(mu);
    if (s.pos > 0) { // rows >= pos stay poisoned
      dkc.upload(kc.data(), size_t(s.pos * kvDim));
      dvc.upload(vc.data(), size_t(s.pos * kvDim));
      dks.upload(ks.data(), size_t(s.pos * s.kvHeads));
      dvs.upload(vs.data(), size_t(s.pos * s.kvHeads));
    }
    c.setPos(s.pos);
    Kv::template gpu<T>(&c.ctx, dq.data(), dk.data(), dv.data(), dkc.p, dvc.p,
                        dks.p, dvs.p, dMu.data(), dOut.data(), s.n,
                        /*pos ignored*/ int64_t(-1), s.heads, s.kvHeads,
                        s.headDim, s.rotDim, maxSeq, scale, s.theta);
    std::string err = c.finish();
    const std::string shape =
        fmt("n=%lld pos=%lld heads=%lld kv_heads=%lld head_dim=%lld rot=%lld",
            s.n, s.pos, s.heads, s.kvHeads, s.headDim, s.rotDim);
    const std::vector<float> gotOut = dOut.download(q.size());
    std::vector<Code> gk = dkc.download(size_t(rows * kvDim)),
                      gv = dvc.download(size_t(rows * kvDim));
    std::vector<float> gks = dks.download(size_t(rows * s.kvHeads)),
                       gvs = dvs.download(size_t(rows * s.kvHeads));
    // (1) The GPU's cache read back through the contract.
    std::vector<float> kd(size_t(maxSeq * kvDim), 0.0f), vd(kd.size(), 0.0f);
    for (int64_t t = 0; t < rows; ++t) {
      std::vector<float> m =
          hostRotatedMean(mu, t, s.kvHeads, s.headDim, s.rotDim, s.theta);
      for (int64_t e = 0; e < kvDim; ++e) {
        const size_t i = size_t(t * kvDim + e),
                     si = size_t(t * s.kvHeads + e / s.headDim);
        kd[i] = gks[si] * Kv::value(gk[i]) + m[size_t(e)];
        vd[i] = gvs[si] * Kv::value(gv[i]);
      }
    }
    std::vector<float> ref(q.size());
    kiln_k_attention(q.data(), kd.data() + s.pos * kvDim,
                     vd.data() + s.pos * kvDim, kd.data(), vd.data(),
                     ref.data(), s.n, s.pos, s.heads, s.kvHeads, s.headDim,
                     maxSeq, scale);
    report(Kv::name, Dtype<T>::name, shape, gotOut, ref, Dtype<T>::tol, err);
    // (2) The CPU centered kernel on the same past cache.
    std::vector<float> cpu(q.size());
    Kv::cpu(q.data(), k.data(), v.data(), kc.data(), vc.data(), ks.data(),
            vs.data(), mu.data(), cpu.data(), s.n, s.pos, s.heads, s.kvHeads,
            s.headDim, s.rotDim, maxSeq, scale, s.theta);
    report((std::string(Kv::name) + "-vs-cpu").c_str(), Dtype<T>::name, shape,
           gotOut, cpu, Dtype<T>::tol, err);
    // (3) Appended bytes against the CPU's.
    long off1 = 0, bad = 0;
    for (size_t i = 0; i < gk.size(); ++i)
      for (int d : {int(gk[i]) - int(kc[i]), int(gv[i]) - int(vc[i])})
        (d == 0 ? 0 : (d == 1 || d == -1) ? ++off1 : ++bad);
    for (size_t i = 0; i < gks.size(); ++i)
      for (auto [g, r] : {std::pair{gks[i], ks[i]}, std::pair{gvs[i], vs[i]}})
        (std::memcmp(&g, &r, 4) == 0 ? 0
         : std::nextafter(r, g) == g ? ++off1
                                     : ++bad);
    const bool ok = bad == 0;
    (ok ? gPassed : gFailed)++;
    std::printf("%s %s-append %s %s mismatches=%ld off_by_one=%ld\n",
                ok ? "PASS" : "FAIL", Kv::name, Dtype<T>::name, shape.c_str(),
                bad, off1);
    std::fflush(stdout);
  }
}

enum class Ew { Swiglu, Silu, Add, Mul };

template <typename T> void checkElementwise(Context &c, Ew op) {
  const char *names[] = {"swiglu", "silu", "add", "mul"};
  struct Shape {
    int64_t count, pad;
  };
  for (Shape s : {Shape{1, 0}, Shape{1023, 0}, Shape{4099, 0}, Shape{4099, 1},
                  Shape{11008, 0}}) {
    std::vector<float> a = randomRounded<T>(size_t(s.count), -4, 4);
    std::vector<float> b = randomRounded<T>(size_t(s.count), -4, 4);
    DevBuf<T> da(a.size(), size_t(s.pad)), db(b.size(), size_t(s.pad)),
        dy(a.size(), size_t(s.pad));
    da.upload(a);
    db.upload(b);
    std::vector<float> ref(a.size());
    switch (op) {
    case Ew::Swiglu:
      kiln_cuda_swiglu(&c.ctx, da.data(), db.data(), dy.data(), s.count);
      kiln_k_swiglu(a.data(), b.data(), ref.data(), s.count);
      break;
    case Ew::Silu:
      kiln_cuda_silu(&c.ctx, da.data(), dy.data(), s.count);
      kiln_k_silu(a.data(), ref.data(), s.count);
      break;
    case Ew::Add:
      kiln_cuda_add(&c.ctx, da.data(), db.data(), dy.data(), s.count);
      kiln_k_add(a.data(), b.data(), ref.data(), s.count);
      break;
    case Ew::Mul:
      kiln_cuda_mul(&c.ctx, da.data(), db.data(), dy.data(), s.count);
      kiln_k_mul(a.data(), b.data(), ref.data(), s.count);
      break;
    }
    std::string err = c.finish();
    report(names[int(op)], Dtype<T>::name,
           fmt("count=%lld pad=%lld", s.count, s.pad), dy.download(ref.size()),
           ref, Dtype<T>::tol, err);
  }
}

//===----------------------------------------------------------------------===//
// Sampling
//===----------------------------------------------------------------------===//

/// The CPU sampler's arithmetic (runtime/src/tokenizer/Sampler.cpp).
int32_t cpuSample(std::vector<float> logits, float temperature, int32_t topK,
                  float topP, float coin) {
  const int32_t n = int32_t(logits.size());
  if (temperature == 0.0f)
    return int32_t(std::max_element(logits.begin(), logits.end()) -
                   logits.begin());
  for (float &l : logits)
    l /= temperature;
  float mx = *std::max_element(logits.begin(), logits.end());
  float sum = 0.0f;
  for (float &l : logits) {
    l = std::exp(l - mx);
    sum += l;
  }
  for (float &l : logits)
    l /= sum;
  struct PI {
    float p;
    int32_t i;
  };
  std::vector<PI> s;
  auto order = [](const PI &a, const PI &b) {
    return a.p > b.p || (a.p == b.p && a.i < b.i);
  };
  if (topK > 0 && topK < n) {
    for (int32_t i = 0; i < n; ++i)
      s.push_back({logits[size_t(i)], i});
    std::partial_sort(s.begin(), s.begin() + topK, s.end(), order);
    int32_t last = topK - 1;
    float total = 0.0f;
    for (int32_t i = 0; i < topK; ++i)
      total += s[size_t(i)].p;
    if (topP > 0.0f && topP < 1.0f) {
      float cum = 0.0f;
      for (int32_t i = 0; i < topK; ++i) {
        cum += s[size_t(i)].p;
        if (cum > topP * total) {
          last = i;
          total = cum;
          break;
        }
      }
    }
    float r = coin * total, cdf = 0.0f;
    for (int32_t i = 0; i <= last; ++i) {
      cdf += s[size_t(i)].p;
      if (r < cdf)
        return s[size_t(i)].i;
    }
    return s[size_t(last)].i;
  }
  if (topP > 0.0f && topP < 1.0f) {
    const float cutoff = (1.0f - topP) / float(n - 1);
    for (int32_t i = 0; i < n; ++i)
      if (logits[size_t(i)] >= cutoff)
        s.push_back({logits[size_t(i)], i});
    std::stable_sort(s.begin(), s.end(), order);
    int32_t last = int32_t(s.size()) - 1;
    float cum = 0.0f;
    for (int32_t i = 0; i < int32_t(s.size()); ++i) {
      cum += s[size_t(i)].p;
      if (cum > topP) {
        last = i;
        break;
      }
    }
    float r = coin * cum, cdf = 0.0f;
    for (int32_t i = 0; i <= last; ++i) {
      cdf += s[size_t(i)].p;
      if (r < cdf)
        return s[size_t(i)].i;
    }
    return s[size_t(last)].i;
  }
  float cdf = 0.0f;
  for (int32_t i = 0; i < n; ++i) {
    cdf += logits[size_t(i)];
    if (coin < cdf)
      return i;
  }
  return n - 1;
}

//===----------------------------------------------------------------------===//
// Dynamic sparse attention (KilnCudaSparse.cuh)
//===----------------------------------------------------------------------===//

/// Planted attention for the sparse kernels (as kiln-attention-bench's
/// synthetic prompts): every key is small noise except the "needle" blocks
/// (1, 5, 9, ...), whose keys point along a direction u_g of their KV head
/// that every query of the group shares, so the needles hold nearly all of
/// each row's mass (logit ~ `peak` against ~0), every block list is decided
/// with a wide margin (no float-vs-double tie at gamma) and the dropped
/// background still moves the output measurably.
struct PlantedAttention {
  std::vector<float> q, k, v; // q [n, heads * hd]; k, v [T, kvHeads * hd]
};
PlantedAttention plantedAttention(int64_t n, int64_t T, int64_t heads,
                                  int64_t kvHeads, int64_t hd, int64_t block,
                                  float peak) {
  std::normal_distribution<float> noise(0.0f, 1.0f);
  const int64_t group = heads / kvHeads, kvDim = kvHeads * hd;
  std::vector<float> u(static_cast<size_t>(kvDim));
  for (int64_t g = 0; g < kvHeads; ++g) {
    double norm = 0.0;
    for (int64_t d = 0; d < hd; ++d) {
      u[size_t(g * hd + d)] = noise(gRng);
      norm += double(u[size_t(g * hd + d)]) * u[size_t(g * hd + d)];
    }
    for (int64_t d = 0; d < hd; ++d)
      u[size_t(g * hd + d)] /= float(std::sqrt(norm));
  }
  // scale q . k = peak for a needle: |q| = |k| = sqrt(peak * sqrt(hd)).
  const float amp = std::sqrt(peak * std::sqrt(float(hd)));
  PlantedAttention a;
  a.q.resize(size_t(n * heads * hd));
  a.k.resize(size_t(T * kvDim));
  a.v.resize(size_t(T * kvDim));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < hd; ++d)
        a.q[size_t((i * heads + h) * hd + d)] =
            amp * u[size_t((h / group) * hd + d)] + 0.05f * noise(gRng);
  for (int64_t t = 0; t < T; ++t) {
    const bool needle = (t / block) % 4 == 1;
    for (int64_t c = 0; c < kvDim; ++c) {
      a.k[size_t(t * kvDim + c)] =
          (needle ? amp * u[size_t(c)] : 0.0f) + 0.3f * noise(gRng);
      a.v[size_t(t * kvDim + c)] = noise(gRng);
    }
  }
  return a;
}

template <typename T> std::vector<float> roundedTo(std::vector<float> v) {
  for (float &x : v)
    x = Dtype<T>::to(Dtype<T>::from(x));
  return v;
}

/// kiln_cuda_attention_sparse (block-sparse prefill, and its one-row path
/// through sparse flash-decoding) against kiln_k_attention_sparse on the
/// same planted inputs: a prefix of `pos` cached rows plus n new ones.
/// Also: the CPU ran sparse (its counters), the sparse output differs from
/// dense (f32: else the comparison says nothing about the selection), and
/// gamma = 1 / a min_tokens above the context equal kiln_cuda_attention
/// bit for bit.
template <typename T> void checkAttentionSparse(Context &c) {
  struct Shape {
    int64_t n, pos, heads, kvHeads, hd, block, stride, streaming;
    float gamma;
  };
  const Shape shapes[] = {
      {300, 0, 4, 1, 64, 16, 0, 0, 0.9f},   // flex, GQA 4
      {300, 0, 8, 2, 128, 32, 8, 0, 0.9f},  // antidiag, GQA 4
      {77, 203, 6, 2, 64, 16, 4, 0, 0.9f},  // a chunk after a KV prefix
      {250, 0, 3, 3, 64, 16, 7, 2, 0.9f},   // MHA, stride 7, streaming head 1
      {1, 400, 4, 1, 64, 16, 4, 0, 0.9f},   // one row: sparse flash-decoding
      {129, 0, 4, 2, 80, 16, 0, 0, 0.95f},  // head_dim 80, odd length
  };
  for (const Shape &s : shapes) {
    const int64_t total = s.pos + s.n, maxSeq = total + 5;
    const int64_t qDim = s.heads * s.hd, kvDim = s.kvHeads * s.hd;
    PlantedAttention a =
        plantedAttention(s.n, total, s.heads, s.kvHeads, s.hd, s.block, 6.0f);
    const std::vector<float> q = roundedTo<T>(a.q), k = roundedTo<T>(a.k),
                             v = roundedTo<T>(a.v);
    const std::vector<float> kNew(k.begin() + s.pos * kvDim, k.end()),
        vNew(v.begin() + s.pos * kvDim, v.end());
    const float scale = 1.0f / std::sqrt(float(s.hd));
    const int64_t sink = 1, local = 1;
    std::string shape = fmt("n=%lld pos=%lld heads=%lld kv_heads=%lld "
                            "head_dim=%lld block=%lld",
                            s.n, s.pos, s.heads, s.kvHeads, s.hd, s.block) +
                        fmt(" stride=%lld streaming=%lld", s.stride,
                            s.streaming);
    auto cpu = [&](float gamma, int64_t minTokens, bool sparse) {
      std::vector<float> kc(size_t(maxSeq * kvDim), 0.0f), vc(kc.size(), 0.0f);
      std::copy(k.begin(), k.begin() + s.pos * kvDim, kc.begin());
      std::copy(v.begin(), v.begin() + s.pos * kvDim, vc.begin());
      std::vector<float> out(q.size());
      if (sparse)
        kiln_k_attention_sparse(q.data(), kNew.data(), vNew.data(), kc.data(),
                                vc.data(), out.data(), s.n, s.pos, s.heads,
                                s.kvHeads, s.hd, maxSeq, scale, gamma,
                                s.block, sink, local, 0, 0, minTokens, 0,
                                s.streaming, s.stride);
      else
        kiln_k_attention(q.data(), kNew.data(), vNew.data(), kc.data(),
                         vc.data(), out.data(), s.n, s.pos, s.heads,
                         s.kvHeads, s.hd, maxSeq, scale);
      return out;
    };
    auto gpu = [&](float gamma, int64_t minTokens, bool sparse,
                   std::string &err) {
      DevBuf<T> dq(q.size()), dk(kNew.size()), dv(vNew.size()),
          dkc(size_t(maxSeq * kvDim)), dvc(size_t(maxSeq * kvDim)),
          dOut(q.size());
      dq.upload(q);
      dk.upload(kNew);
      dv.upload(vNew);
      if (s.pos > 0) {
        dkc.upload(std::vector<float>(k.begin(), k.begin() + s.pos * kvDim));
        dvc.upload(std::vector<float>(v.begin(), v.begin() + s.pos * kvDim));
      }
      c.setPos(s.pos);
      if (sparse)
        kiln_cuda_attention_sparse(&c.ctx, dq.data(), dk.data(), dv.data(),
                                   dkc.data(), dvc.data(), dOut.data(), s.n,
                                   -1, s.heads, s.kvHeads, s.hd, maxSeq,
                                   scale, gamma, s.block, sink, local, 0, 0,
                                   minTokens, 0, s.streaming, s.stride);
      else
        kiln_cuda_attention(&c.ctx, dq.data(), dk.data(), dv.data(),
                            dkc.data(), dvc.data(), dOut.data(), s.n, -1,
                            s.heads, s.kvHeads, s.hd, maxSeq, scale);
      err = c.finish();
      return dOut.download(q.size());
    };
    int64_t stats[4];
    kiln_rt_sparse_attention_stats(stats, 1);
    const std::vector<float> ref = cpu(s.gamma, 32, true);
    kiln_rt_sparse_attention_stats(stats, 1);
    const bool cpuSparse = stats[3] == 0 && stats[0] < stats[1];
    std::string err;
    std::vector<float> got = gpu(s.gamma, 32, true, err);
    if (!cpuSparse)
      err += fmt("the CPU ran dense (kept %lld of %lld pairs, %lld dense "
                 "calls): the case checks nothing",
                 stats[0], stats[1], stats[3]);
    const std::vector<float> dense = cpu(1.0f, 0, false);
    if (Dtype<T>::tol < 1e-4) {
      double diff = 0.0, mx = 0.0;
      for (size_t i = 0; i < dense.size(); ++i) {
        diff = std::max(diff, std::fabs(double(dense[i]) - ref[i]));
        mx = std::max(mx, std::fabs(double(dense[i])));
      }
      if (diff <= 100.0 * Dtype<T>::tol * mx)
        err += fmt(" sparse equals dense within 100 tol: the selection is "
                   "not checked");
    }
    report("attention-sparse", Dtype<T>::name,
           shape + fmt(" density=%lld/%lld", stats[0], stats[1]), got, ref,
           Dtype<T>::tol, err);
    // Dense fallbacks: bit for bit the dense CUDA kernel.
    std::string errDense, errG1, errShort;
    const std::vector<float> denseGpu = gpu(1.0f, 0, false, errDense);
    const std::vector<float> g1 = gpu(1.0f, 32, true, errG1);
    const std::vector<float> below = gpu(s.gamma, total + 1, true, errShort);
    report("attention-sparse-gamma1=dense", Dtype<T>::name, shape, g1,
           denseGpu, 0.0, errDense + errG1);
    report("attention-sparse-short=dense", Dtype<T>::name, shape, below,
           denseGpu, 0.0, errDense + errShort);
  }
}

/// Quest decode on the device (kiln_cuda_attention_sparse_summary over a
/// planted prompt, then kiln_cuda_attention_sparse_decode steps) against
/// the CPU kernels: the key summaries bit for bit, the decode outputs
/// within f32 rounding; the CPU's decode counters say it ran sparse.
void checkQuestDecode(Context &c) {
  const int64_t heads = 8, kvHeads = 2, hd = 64, B = 16, prompt = 500;
  const int64_t steps = 3, T = prompt + steps, maxSeq = T + 7;
  const int64_t qDim = heads * hd, kvDim = kvHeads * hd;
  const int64_t pages = (maxSeq + B - 1) / B;
  const float scale = 1.0f / std::sqrt(float(hd)), gamma = 0.9f;
  PlantedAttention a = plantedAttention(T, T, heads, kvHeads, hd, B, 6.0f);
  std::vector<float> kc(size_t(maxSeq * kvDim), 0.0f), vc(kc.size(), 0.0f);
  std::vector<float> kMin(size_t(pages * kvDim), 0.0f), kMax(kMin);
  DevBuf<float> dq(a.q.size()), dk(a.k.size()), dv(a.v.size()),
      dkc(kc.size()), dvc(vc.size()), dMin(kMin.size()), dMax(kMax.size()),
      dOut(a.q.size());
  dq.upload(a.q);
  dk.upload(a.k);
  dv.upload(a.v);
  std::vector<float> ref(a.q.size());
  // The prompt: sparse prefill writing the summaries.
  kiln_k_attention_sparse_summary(a.q.data(), a.k.data(), a.v.data(),
                                  kc.data(), vc.data(), kMin.data(),
                                  kMax.data(), ref.data(), prompt, 0, heads,
                                  kvHeads, hd, maxSeq, scale, gamma, B, 1, 1,
                                  0, 0, 32, 0, 0, 4);
  c.setPos(0);
  kiln_cuda_attention_sparse_summary(&c.ctx, dq.data(), dk.data(), dv.data(),
                                     dkc.data(), dvc.data(), dMin.data(),
                                     dMax.data(), dOut.data(), prompt, -1,
                                     heads, kvHeads, hd, maxSeq, scale, gamma,
                                     B, 1, 1, 0, 0, 32, 0, 0, 4);
  std::string err = c.finish();
  const size_t used = size_t(((prompt + B - 1) / B) * kvDim);
  report("attention-sparse-summary", "f32",
         fmt("prompt=%lld kv_heads=%lld head_dim=%lld page=%lld", prompt,
             kvHeads, hd, B),
         [&] {
           std::vector<float> g = dMin.download(used), x = dMax.download(used);
           g.insert(g.end(), x.begin(), x.end());
           return g;
         }(),
         [&] {
           std::vector<float> g(kMin.begin(), kMin.begin() + long(used));
           g.insert(g.end(), kMax.begin(), kMax.begin() + long(used));
           return g;
         }(),
         0.0, err);
  int64_t stats[4];
  kiln_rt_sparse_decode_stats(stats, 1);
  for (int64_t i = prompt; i < T; ++i) {
    kiln_k_attention_sparse_decode(
        a.q.data() + i * qDim, a.k.data() + i * kvDim, a.v.data() + i * kvDim,
        kc.data(), vc.data(), kMin.data(), kMax.data(), ref.data(), 1, i,
        heads, kvHeads, hd, maxSeq, scale, gamma, B, 1, 1, 0, 0, 32, 0, 0, 4);
    c.setPos(i);
    kiln_cuda_attention_sparse_decode(
        &c.ctx, dq.data() + i * qDim, dk.data() + i * kvDim,
        dv.data() + i * kvDim, dkc.data(), dvc.data(), dMin.data(),
        dMax.data(), dOut.data(), 1, -1, heads, kvHeads, hd, maxSeq, scale,
        gamma, B, 1, 1, 0, 0, 32, 0, 0, 4);
    err = c.finish();
    std::vector<float> want(ref.begin(), ref.begin() + qDim);
    kiln_rt_sparse_decode_stats(stats, 1);
    if (!(stats[3] == 0 && stats[0] < stats[1]))
      err += fmt("the CPU decode ran dense (kept %lld of %lld pages)",
                 stats[0], stats[1]);
    report("attention-sparse-decode", "f32",
           fmt("pos=%lld heads=%lld kv_heads=%lld head_dim=%lld page=%lld", i,
               heads, kvHeads, hd, B) +
               fmt(" pages kept=%lld/%lld", stats[0], stats[1]),
           dOut.download(size_t(qDim)), want, 1e-5, err);
  }
}


void checkSampling(Context &c) {
  const int64_t vocab = 32003;
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float &l : logits)
    l = dist(gRng);
  logits[12345] = logits[777] = 25.0f; // tied maximum: first index wins
  DevBuf<float> dLogits(logits.size()), dScratch(logits.size()), dCoin(1);
  DevBuf<int32_t> dTok(1);
  dLogits.upload(logits);

  {
    kiln_cuda_argmax(&c.ctx, dLogits.data(), vocab, dTok.data());
    std::string err = c.finish();
    int32_t got = -1;
    CHECK_CUDA(cudaMemcpy(&got, dTok.data(), 4, cudaMemcpyDeviceToHost));
    const int32_t want = cpuSample(logits, 0.0f, 0, 1.0f, 0.0f);
    report("argmax", "f32", fmt("vocab=%lld", vocab), {float(got)},
           {float(want)}, 0.0, err);
  }
  // Flatter logits for the sampling cases (the spike would win every draw).
  logits[12345] = logits[777] = 1.0f;
  dLogits.upload(logits);
  struct Case {
    float temperature;
    int32_t topK;
    float topP;
  };
  const Case cases[] = {{0.0f, 0, 1.0f},  {1.0f, 40, 1.0f}, {0.8f, 0, 0.9f},
                        {1.0f, 50, 0.7f}, {1.0f, 0, 0.0f},  {0.7f, 1024, 0.95f},
                        {1.0f, 1, 0.5f},  {1.5f, 0, 0.3f}};
  const float coins[] = {0.0f, 0.01f, 0.37f, 0.5f, 0.93f, 0.999f};
  for (const Case &k : cases)
    for (float coin : coins) {
      dCoin.upload({coin});
      kiln_cuda_sample_topk_topp(&c.ctx, dLogits.data(), vocab, k.temperature,
                                 k.topK, k.topP, dCoin.data(), dScratch.data(),
                                 dTok.data());
      std::string err = c.finish();
      int32_t got = -1;
      CHECK_CUDA(cudaMemcpy(&got, dTok.data(), 4, cudaMemcpyDeviceToHost));
      // Float summation order may move a CDF boundary: accept the CPU token
      // of a slightly perturbed coin too.
      int32_t want = cpuSample(logits, k.temperature, k.topK, k.topP, coin);
      for (float d : {-2e-4f, 2e-4f}) {
        float c2 = std::min(std::max(coin + d, 0.0f), 0.99999f);
        if (cpuSample(logits, k.temperature, k.topK, k.topP, c2) == got)
          want = got;
      }
      char shape[160];
      std::snprintf(shape, sizeof(shape),
                    "vocab=%lld temp=%.2f top_k=%d top_p=%.2f coin=%.3f "
                    "token=%d want=%d",
                    (long long)vocab, k.temperature, k.topK, k.topP, coin, got,
                    want);
      report("sample", "f32", shape, {float(got)}, {float(want)}, 0.0, err);
    }
}

//===----------------------------------------------------------------------===//
// Fused kernels (KilnCudaFused.cuh) with epilogues written as codegen writes
// them, against the unfused CPU kernels run op by op
//===----------------------------------------------------------------------===//

/// RMSNorm + Q/K/V + RoPE of Q and K: output groups of a RoPE pair, each
/// value routed to its column range (the shape of a generated QKV region).
struct QkvRopeEpi {
  float *q, *k, *v;
  int64_t qw, kw, vw, headDim;
  float theta;
  const int64_t *pos;
  __device__ int64_t row(int64_t g, int k) const { return 2 * g + k; }
  __device__ void store(int64_t t, int64_t g, const float *val) const {
    for (int i = 0; i < 2; ++i) {
      const int64_t j = row(g, i);
      const float partner = val[i ^ 1];
      if (j < qw)
        q[t * qw + j] = kiln_cuda_rope_elem(val[i], partner, j, headDim,
                                            headDim, theta, *pos + t);
      else if (j < qw + kw)
        k[t * kw + j - qw] = kiln_cuda_rope_elem(
            val[i], partner, j - qw, headDim, headDim, theta, *pos + t);
      else
        v[t * vw + j - qw - kw] = val[i];
    }
  }
};

/// RMSNorm + gate/up + SwiGLU: groups of the same row of both ranges.
struct SwigluEpi {
  float *y;
  int64_t hidden;
  __device__ int64_t row(int64_t g, int k) const { return k * hidden + g; }
  __device__ void store(int64_t t, int64_t g, const float *val) const {
    y[t * hidden + g] = kiln_cuda_swiglu_elem(val[0], val[1]);
  }
};

/// Linear + residual add.
struct ResidualEpi {
  const float *res;
  float *y;
  int64_t out;
  __device__ int64_t row(int64_t g, int) const { return g; }
  __device__ void store(int64_t t, int64_t g, const float *val) const {
    y[t * out + g] = res[t * out + g] + val[0];
  }
};

/// Runs the three fused regions with the row reader `rows` of the weight
/// `w` (float rows for the CPU reference in `wf`) and compares them with
/// the CPU kernels op by op.
template <typename Rows>
void checkFusedWith(Context &c, const char *kind, int64_t n, int64_t in,
                    const Rows &qkvRows, const std::vector<float> &qkvW,
                    const Rows &ffnRows, const std::vector<float> &ffnW,
                    const Rows &oRows, const std::vector<float> &oW) {
  const int64_t headDim = 16, qw = 64, kw = 32, vw = 32, hidden = 96;
  const int64_t qkv = qw + kw + vw, pos = 5;
  const float eps = 1e-5f, theta = 10000.0f;
  c.setPos(pos);
  std::vector<float> x = randomRounded<float>(size_t(n * in), -2, 2);
  std::vector<float> nw = randomRounded<float>(size_t(in), 0.5f, 1.5f);
  DevBuf<float> dx(x.size()), dnw(nw.size());
  dx.upload(x);
  dnw.upload(nw);
  const uint64_t scratchBytes =
      kiln_cuda_fused_scratch_bytes(n, in, 2 * hidden, true) +
      kiln_cuda_fused_scratch_bytes(n, in, qkv, true);
  DevBuf<uint8_t> scratch{static_cast<size_t>(scratchBytes)};
  std::vector<float> xn(x.size());
  kiln_k_rms_norm(x.data(), nw.data(), xn.data(), n, in, eps);
  const std::string shape = fmt("n=%lld in=%lld", n, in);

  { // QKV + RoPE
    DevBuf<float> dq(size_t(n * qw)), dk(size_t(n * kw)), dv(size_t(n * vw));
    QkvRopeEpi e{dq.data(), dk.data(), dv.data(), qw, kw, vw, headDim, theta,
                 c.dPos};
    kiln_cuda_fused_linear<2>(&c.ctx, "fused qkv", qkvRows, dx.data(),
                              dnw.data(), eps, n, in, qkv, qkv / 2, e,
                              scratch.data(), scratchBytes);
    std::string err = c.finish();
    std::vector<float> y(size_t(n * qkv)), q(size_t(n * qw)),
        k(size_t(n * kw)), v(size_t(n * vw));
    kiln_k_linear(xn.data(), qkvW.data(), y.data(), n, in, qkv);
    kiln_k_slice_columns(y.data(), q.data(), n, qkv, 0, qw);
    kiln_k_slice_columns(y.data(), k.data(), n, qkv, qw, kw);
    kiln_k_slice_columns(y.data(), v.data(), n, qkv, qw + kw, vw);
    kiln_k_rope(q.data(), q.data(), n, qw / headDim, headDim, headDim, pos,
                theta);
    kiln_k_rope(k.data(), k.data(), n, kw / headDim, headDim, headDim, pos,
                theta);
    std::vector<float> got = dq.download(q.size()), ref = q;
    for (float f : dk.download(k.size()))
      got.push_back(f);
    for (float f : dv.download(v.size()))
      got.push_back(f);
    ref.insert(ref.end(), k.begin(), k.end());
    ref.insert(ref.end(), v.begin(), v.end());
    report("fused rms_norm+linear+rope", kind, shape, got, ref, 1e-5, err);
  }
  { // gate/up + SwiGLU
    DevBuf<float> dy(size_t(n * hidden));
    SwigluEpi e{dy.data(), hidden};
    kiln_cuda_fused_linear<2>(&c.ctx, "fused gate/up", ffnRows, dx.data(),
                              dnw.data(), eps, n, in, 2 * hidden, hidden, e,
                              scratch.data(), scratchBytes);
    std::string err = c.finish();
    std::vector<float> y(size_t(n * 2 * hidden)), g(size_t(n * hidden)),
        u(size_t(n * hidden)), ref(size_t(n * hidden));
    kiln_k_linear(xn.data(), ffnW.data(), y.data(), n, in, 2 * hidden);
    kiln_k_slice_columns(y.data(), g.data(), n, 2 * hidden, 0, hidden);
    kiln_k_slice_columns(y.data(), u.data(), n, 2 * hidden, hidden, hidden);
    kiln_k_swiglu(g.data(), u.data(), ref.data(), n * hidden);
    report("fused rms_norm+linear+swiglu", kind, shape,
           dy.download(ref.size()), ref, 1e-5, err);
  }
  { // output projection + residual (in place: y aliases the residual)
    const int64_t out = in;
    std::vector<float> res = randomRounded<float>(size_t(n * out), -1, 1);
    DevBuf<float> dy(res.size());
    dy.upload(res);
    ResidualEpi e{dy.data(), dy.data(), out};
    // A dense f32 weight takes cuBLASLt's beta = 1 epilogue at prefill.
    if constexpr (std::is_same<Rows, kiln_cuda_detail::DenseRows<float>>::value)
      kiln_cuda_fused_linear_residual(&c.ctx, "fused linear+add", oRows,
                                      dx.data(), dy.data(), dy.data(), n, in,
                                      out, e);
    else
      kiln_cuda_fused_linear<1>(&c.ctx, "fused linear+add", oRows, dx.data(),
                                nullptr, 0.0f, n, in, out, out, e,
                                scratch.data(), scratchBytes);
    std::string err = c.finish();
    std::vector<float> y(res.size()), ref(res.size());
    kiln_k_linear(x.data(), oW.data(), y.data(), n, in, out);
    kiln_k_add(res.data(), y.data(), ref.data(), n * out);
    report("fused linear+add", kind, shape, dy.download(ref.size()), ref, 1e-5,
           err);
  }
}

void checkFused(Context &c) {
  // in = 16384 is wider than kFusedStageMax: the decode takes the scratch
  // path (norm, GEMV, epilogue kernel).
  for (int64_t in : {int64_t(64), int64_t(1024), int64_t(16384)})
    for (int64_t n : {int64_t(1), int64_t(7)}) {
      if (in == 16384 && n > 1)
        continue;
      auto dense = [&](int64_t out, std::vector<float> &w,
                       std::unique_ptr<DevBuf<float>> &d) {
        w = randomRounded<float>(size_t(out * in), -0.1f, 0.1f);
        d.reset(new DevBuf<float>(w.size()));
        d->upload(w);
        return kiln_cuda_detail::DenseRows<float>{d->data(), in};
      };
      std::vector<float> wq, wf, wo;
      std::unique_ptr<DevBuf<float>> dq, df, dO;
      auto rq = dense(128, wq, dq), rf = dense(192, wf, df),
           ro = dense(in, wo, dO);
      checkFusedWith(c, "f32", n, in, rq, wq, rf, wf, ro, wo);
      // GGUF Q8_0 blocks: the reference dequantizes the rows first.
      auto q8 = [&](int64_t out, std::vector<float> &w,
                    std::unique_ptr<DevBuf<int8_t>> &d) {
        const int64_t bytes = kiln_block_bytes(KILN_BLOCK_Q8_0);
        std::vector<int8_t> b(size_t(out * in / 32 * bytes));
        for (int8_t &v : b)
          v = int8_t(gRng() & 0xff);
        for (size_t k = 0; k < b.size() / size_t(bytes); ++k) {
          const uint16_t h = uint16_t(((gRng() & 1) << 15) |
                                      ((5 + gRng() % 7) << 10) | (gRng() & 1023));
          b[k * bytes] = int8_t(h & 0xff);
          b[k * bytes + 1] = int8_t(h >> 8);
        }
        w.assign(size_t(out * in), 0.0f);
        for (int64_t r = 0; r < out; ++r)
          for (int64_t k = 0; k < in / 32; ++k)
            kiln_block_decode(KILN_BLOCK_Q8_0,
                              reinterpret_cast<const uint8_t *>(b.data()) +
                                  (r * in / 32 + k) * bytes,
                              w.data() + r * in + k * 32);
        d.reset(new DevBuf<int8_t>(b.size()));
        CHECK_CUDA(cudaMemcpy(d->data(), b.data(), b.size(),
                              cudaMemcpyHostToDevice));
        return kiln_cuda_detail::BlockRows<KILN_BLOCK_Q8_0>{
            reinterpret_cast<const uint8_t *>(d->data()), in};
      };
      std::unique_ptr<DevBuf<int8_t>> bq, bf, bo;
      auto sq = q8(128, wq, bq), sf = q8(192, wf, bf), so = q8(in, wo, bo);
      checkFusedWith(c, "q8_0", n, in, sq, wq, sf, wf, so, wo);
    }
}

//===----------------------------------------------------------------------===//
// Benchmark
//===----------------------------------------------------------------------===//

/// Median milliseconds of 20 timed runs after 5 warm-ups.
template <typename F> double medianMs(cudaStream_t stream, F &&run) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i)
    run();
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) {
    CHECK_CUDA(cudaEventRecord(a, stream));
    run();
    CHECK_CUDA(cudaEventRecord(b, stream));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0.0f;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return 0.5 * (ms[9] + ms[10]);
}

int bench(Context &c) {
  using B = __nv_bfloat16;
  const size_t copyBytes = size_t(1) << 30;
  DevBuf<uint8_t> src(copyBytes), dst(copyBytes);
  const double copyMs = medianMs(c.stream, [&] {
    CHECK_CUDA(cudaMemcpyAsync(dst.data(), src.data(), copyBytes,
                               cudaMemcpyDeviceToDevice, c.stream));
  });
  // A copy reads and writes every byte.
  const double copyGBs = 2.0 * double(copyBytes) / (copyMs * 1e6);
  std::printf("%-34s %10s %12s %10s\n", "kernel", "ms", "GB/s|TFLOP/s",
              "vs copy");
  std::printf("%-34s %10.4f %12.1f %10s\n", "cudaMemcpy D2D (1 GiB)", copyMs,
              copyGBs, "100%");
  struct Gemv {
    int64_t out, in;
  };
  for (Gemv g : {Gemv{4096, 4096}, Gemv{11008, 4096}, Gemv{4096, 11008}}) {
    DevBuf<B> w(static_cast<size_t>(g.out * g.in)),
        x(static_cast<size_t>(g.in)), y(static_cast<size_t>(g.out));
    CHECK_CUDA(cudaMemset(w.data(), 0x3c, sizeof(B) * size_t(g.out * g.in)));
    CHECK_CUDA(cudaMemset(x.data(), 0x3c, sizeof(B) * size_t(g.in)));
    const double ms = medianMs(c.stream, [&] {
      kiln_cuda_linear(&c.ctx, x.data(), w.data(), y.data(), 1, g.in, g.out);
    });
    const double bytes =
        double(sizeof(B)) * double(g.out * g.in + g.in + g.out);
    const double gbs = bytes / (ms * 1e6);
    char name[64];
    std::snprintf(name, sizeof(name), "gemv bf16 %lldx%lld", (long long)g.out,
                  (long long)g.in);
    std::printf("%-34s %10.4f %12.1f %9.0f%%\n", name, ms, gbs,
                100.0 * gbs / copyGBs);
  }
  for (Gemv g : {Gemv{4096, 4096}, Gemv{11008, 4096}, Gemv{4096, 11008}}) {
    DevBuf<int8_t> q(static_cast<size_t>(g.out * g.in));
    DevBuf<float> scales(static_cast<size_t>(g.out));
    DevBuf<B> x(static_cast<size_t>(g.in)), y(static_cast<size_t>(g.out));
    CHECK_CUDA(cudaMemset(q.data(), 0x11, size_t(g.out * g.in)));
    CHECK_CUDA(cudaMemset(scales.data(), 0, sizeof(float) * size_t(g.out)));
    CHECK_CUDA(cudaMemset(x.data(), 0x3c, sizeof(B) * size_t(g.in)));
    const double ms = medianMs(c.stream, [&] {
      kiln_cuda_linear_w8a16(&c.ctx, x.data(), q.data(), scales.data(),
                             y.data(), 1, g.in, g.out);
    });
    const double bytes = double(g.out * g.in) + double(sizeof(B) * g.in) +
                         double((sizeof(float) + sizeof(B)) * g.out);
    const double gbs = bytes / (ms * 1e6);
    char name[64];
    std::snprintf(name, sizeof(name), "gemv w8a16 bf16 %lldx%lld",
                  (long long)g.out, (long long)g.in);
    std::printf("%-34s %10.4f %12.1f %9.0f%%\n", name, ms, gbs,
                100.0 * gbs / copyGBs);
  }
  for (Gemv g : {Gemv{4096, 4096}, Gemv{11008, 4096}, Gemv{4096, 11008}}) {
    const int64_t group = 128, groups = g.in / group;
    DevBuf<int8_t> q(static_cast<size_t>(g.out * g.in / 2)),
        zeros(static_cast<size_t>(g.out * groups));
    DevBuf<float> scales(static_cast<size_t>(g.out * groups));
    DevBuf<B> x(static_cast<size_t>(g.in)), y(static_cast<size_t>(g.out));
    CHECK_CUDA(cudaMemset(q.data(), 0x5a, size_t(g.out * g.in / 2)));
    CHECK_CUDA(cudaMemset(zeros.data(), 8, size_t(g.out * groups)));
    CHECK_CUDA(
        cudaMemset(scales.data(), 0, sizeof(float) * size_t(g.out * groups)));
    CHECK_CUDA(cudaMemset(x.data(), 0x3c, sizeof(B) * size_t(g.in)));
    const double ms = medianMs(c.stream, [&] {
      kiln_cuda_linear_w4a16(&c.ctx, x.data(), q.data(), scales.data(),
                             zeros.data(), y.data(), 1, g.in, g.out, group);
    });
    const double bytes = double(g.out * g.in) / 2 +
                         double((sizeof(float) + 1) * g.out * groups) +
                         double(sizeof(B) * (g.in + g.out));
    const double gbs = bytes / (ms * 1e6);
    char name[64];
    std::snprintf(name, sizeof(name), "gemv w4a16 g128 bf16 %lldx%lld",
                  (long long)g.out, (long long)g.in);
    std::printf("%-34s %10.4f %12.1f %9.0f%%\n", name, ms, gbs,
                100.0 * gbs / copyGBs);
  }
  for (Gemv g : {Gemv{4096, 4096}, Gemv{11008, 4096}, Gemv{4096, 11008}}) {
    for (int variant = 0; variant < 2; ++variant) { // grouped W8A16, W8A8
      const int64_t group = 32, groups = variant == 0 ? g.in / group : 1;
      DevBuf<int8_t> q(static_cast<size_t>(g.out * g.in));
      DevBuf<float> scales(static_cast<size_t>(g.out * groups));
      DevBuf<B> x(static_cast<size_t>(g.in)), y(static_cast<size_t>(g.out));
      CHECK_CUDA(cudaMemset(q.data(), 0x11, size_t(g.out * g.in)));
      CHECK_CUDA(cudaMemset(scales.data(), 0,
                            sizeof(float) * size_t(g.out * groups)));
      CHECK_CUDA(cudaMemset(x.data(), 0x3c, sizeof(B) * size_t(g.in)));
      const double ms = medianMs(c.stream, [&] {
        if (variant == 0)
          kiln_cuda_linear_w8a16(&c.ctx, x.data(), q.data(), scales.data(),
                                 y.data(), 1, g.in, g.out, group);
        else
          kiln_cuda_linear_w8a8(&c.ctx, x.data(), q.data(), scales.data(),
                                y.data(), 1, g.in, g.out, 0.0f);
      });
      const double bytes = double(g.out * g.in) +
                           double(sizeof(float) * g.out * groups) +
                           double(sizeof(B) * (g.in + g.out));
      const double gbs = bytes / (ms * 1e6);
      char name[64];
      std::snprintf(name, sizeof(name), "gemv %s bf16 %lldx%lld",
                    variant == 0 ? "w8a16 g32" : "w8a8 dyn", (long long)g.out,
                    (long long)g.in);
      std::printf("%-34s %10.4f %12.1f %9.0f%%\n", name, ms, gbs,
                  100.0 * gbs / copyGBs);
    }
  }
  {
    const int64_t n = 512, in = 4096, out = 4096;
    DevBuf<B> x(static_cast<size_t>(n * in)), y(static_cast<size_t>(n * out));
    DevBuf<int8_t> q(static_cast<size_t>(out * in));
    DevBuf<float> scales(static_cast<size_t>(out));
    CHECK_CUDA(cudaMemset(x.data(), 0x3c, sizeof(B) * size_t(n * in)));
    CHECK_CUDA(cudaMemset(q.data(), 0x11, size_t(out * in)));
    CHECK_CUDA(cudaMemset(scales.data(), 0, sizeof(float) * size_t(out)));
    const double ms = medianMs(c.stream, [&] {
      kiln_cuda_linear_w8a8(&c.ctx, x.data(), q.data(), scales.data(),
                            y.data(), n, in, out, 0.0f);
    });
    const double tops = 2.0 * double(n) * double(in) * double(out) / (ms * 1e9);
    std::printf("%-34s %10.4f %12.1f %10s\n", "w8a8 dp4a tiled bf16 512x4096x4096",
                ms, tops, "-");
  }
  {
    const int64_t n = 512, in = 4096, out = 4096;
    DevBuf<B> x(static_cast<size_t>(n * in)), y(static_cast<size_t>(n * out));
    DevBuf<int8_t> q(static_cast<size_t>(out * in));
    DevBuf<float> scales(static_cast<size_t>(out));
    CHECK_CUDA(cudaMemset(x.data(), 0x3c, sizeof(B) * size_t(n * in)));
    CHECK_CUDA(cudaMemset(q.data(), 0x11, size_t(out * in)));
    CHECK_CUDA(cudaMemset(scales.data(), 0, sizeof(float) * size_t(out)));
    const double ms = medianMs(c.stream, [&] {
      kiln_cuda_linear_w8a16(&c.ctx, x.data(), q.data(), scales.data(),
                             y.data(), n, in, out);
    });
    const double tflops =
        2.0 * double(n) * double(in) * double(out) / (ms * 1e9);
    std::printf("%-34s %10.4f %12.1f %10s\n", "w8a16 tiled bf16 512x4096x4096",
                ms, tflops, "-");
  }
  {
    const int64_t n = 2048, in = 4096, out = 4096;
    DevBuf<B> x(static_cast<size_t>(n * in)), w(static_cast<size_t>(out * in)),
        y(static_cast<size_t>(n * out));
    CHECK_CUDA(cudaMemset(x.data(), 0x3c, sizeof(B) * size_t(n * in)));
    CHECK_CUDA(cudaMemset(w.data(), 0x3c, sizeof(B) * size_t(out * in)));
    const double ms = medianMs(c.stream, [&] {
      kiln_cuda_linear(&c.ctx, x.data(), w.data(), y.data(), n, in, out);
    });
    const double tflops =
        2.0 * double(n) * double(in) * double(out) / (ms * 1e9);
    std::printf("%-34s %10.4f %12.1f %10s\n",
                "cuBLASLt gemm bf16 2048x4096x4096", ms, tflops, "-");
  }
  std::string err = c.finish();
  if (!err.empty()) {
    std::printf("bench error: %s\n", err.c_str());
    return 1;
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  // The host E4M3 reference is checked first, with or without a GPU.
  if (checkE4m3Host() != 0) {
    std::printf("kiln-gpu-kernel-check: FAIL: host E4M3 reference\n");
    return 1;
  }
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("kiln-gpu-kernel-check: SKIPPED: no CUDA device (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err)
                                   : "device count is 0");
    return 77;
  }
  Context c;
  if (argc > 1 && std::strcmp(argv[1], "--bench") == 0)
    return bench(c);

  checkEmbedding<float>(c);
  checkEmbedding<__half>(c);
  checkEmbedding<__nv_bfloat16>(c);
  checkRmsNorm<float>(c);
  checkRmsNorm<__half>(c);
  checkRmsNorm<__nv_bfloat16>(c);
  checkLinear<float, float>(c);
  checkLinear<__half, __half>(c);
  checkLinear<__nv_bfloat16, __nv_bfloat16>(c);
  checkLinear<__half, float>(c);
  checkLinear<__nv_bfloat16, float>(c);
  checkLinearW8<float, float>(c);
  checkLinearW8<__half, __half>(c);
  checkLinearW8<__nv_bfloat16, __nv_bfloat16>(c);
  checkLinearW8<__half, float>(c);
  checkLinearW8<__nv_bfloat16, float>(c);
  checkLinearW8Group<float, float>(c);
  checkLinearW8Group<__half, __half>(c);
  checkLinearW8Group<__nv_bfloat16, __nv_bfloat16>(c);
  checkLinearW8Group<__nv_bfloat16, float>(c);
  for (bool perTensor : {false, true}) {
    checkLinearW8A8<float, float>(c, perTensor);
    checkLinearW8A8<__half, __half>(c, perTensor);
    checkLinearW8A8<__nv_bfloat16, __nv_bfloat16>(c, perTensor);
    checkLinearW8A8<__half, float>(c, perTensor);
  }
  checkLinearW4<float, float>(c);
  checkLinearW4<__half, __half>(c);
  checkLinearW4<__nv_bfloat16, __nv_bfloat16>(c);
  checkLinearW4<__half, float>(c);
  checkLinearW4<__nv_bfloat16, float>(c);
  checkBlocks(c);
  checkRope<float>(c);
  checkRope<__half>(c);
  checkRope<__nv_bfloat16>(c);
  checkAttention<float>(c);
  checkAttention<__half>(c);
  checkAttention<__nv_bfloat16>(c);
  checkAttentionKv8<float>(c);
  checkAttentionKv8<__half>(c);
  checkAttentionKv8<__nv_bfloat16>(c);
  checkAttentionKvf8<float>(c);
  checkAttentionKvf8<__half>(c);
  checkAttentionKvf8<__nv_bfloat16>(c);
  checkAttentionCentered<float, false>(c);
  checkAttentionCentered<__half, false>(c);
  checkAttentionCentered<__nv_bfloat16, false>(c);
  checkAttentionCentered<float, true>(c);
  checkAttentionCentered<__half, true>(c);
  checkAttentionCentered<__nv_bfloat16, true>(c);
  checkAttentionSparse<float>(c);
  checkAttentionSparse<__half>(c);
  checkAttentionSparse<__nv_bfloat16>(c);
  checkQuestDecode(c);
  for (Ew op : {Ew::Swiglu, Ew::Silu, Ew::Add, Ew::Mul}) {
    checkElementwise<float>(c, op);
    checkElementwise<__half>(c, op);
    checkElementwise<__nv_bfloat16>(c, op);
  }
  checkSampling(c);
  checkFused(c);
  std::printf("kernel-check: %d passed, %d failed\n", gPassed, gFailed);
  return gFailed == 0 ? 0 : 1;
}

//===- QuantMath.cpp - weight quantizers, GPTQ, AWQ scale search ----------===//

#include "passes/Quantization/QuantMath.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

using namespace llvm;

namespace mlir::kiln {

Group4 findGroup4(ArrayRef<float> values) {
  float lo = 0.0f, hi = 0.0f;
  for (float v : values) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (lo == 0.0f && hi == 0.0f) {
    lo = -1.0f;
    hi = 1.0f;
  }
  Group4 p;
  p.scale = (hi - lo) / 15.0f;
  p.zero = std::nearbyint(-lo / p.scale);
  return p;
}

float quantize4(float w, Group4 p) {
  return std::clamp(std::nearbyint(w / p.scale) + p.zero, 0.0f, 15.0f);
}

static Quantized4 makeQuantized4(int64_t rows, int64_t cols, int64_t group) {
  Quantized4 q;
  q.rows = rows;
  q.cols = cols;
  q.groupSize = group;
  int64_t groups = (cols + group - 1) / group;
  q.packed.assign(rows * ((cols + 1) / 2), 0);
  q.scales.assign(rows * groups, 0.0f);
  q.zeros.assign(rows * groups, 0);
  return q;
}

static void store4(Quantized4 &q, int64_t r, int64_t c, float value) {
  int64_t packedCols = (q.cols + 1) / 2;
  q.packed[r * packedCols + c / 2] |=
      static_cast<uint8_t>(static_cast<int>(value) << ((c % 2) * 4));
}

static void storeGroup(Quantized4 &q, int64_t r, int64_t g, Group4 p) {
  int64_t groups = (q.cols + q.groupSize - 1) / q.groupSize;
  q.scales[r * groups + g] = p.scale;
  q.zeros[r * groups + g] = static_cast<uint8_t>(p.zero);
}

std::vector<float> Quantized4::dequantize() const {
  std::vector<float> out(rows * cols);
  int64_t groups = (cols + groupSize - 1) / groupSize;
  int64_t packedCols = (cols + 1) / 2;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      uint8_t byte = packed[r * packedCols + c / 2];
      float v = static_cast<float>((byte >> ((c % 2) * 4)) & 0xf);
      int64_t g = c / groupSize;
      Group4 p{scales[r * groups + g], static_cast<float>(zeros[r * groups + g])};
      out[r * cols + c] = dequantize4(v, p);
    }
  return out;
}

Quantized4 quantizeRtn4(ArrayRef<float> w, int64_t rows, int64_t cols,
                        int64_t groupSize) {
  Quantized4 q = makeQuantized4(rows, cols, groupSize);
  for (int64_t r = 0; r < rows; ++r) {
    ArrayRef<float> row = w.slice(r * cols, cols);
    for (int64_t g = 0, begin = 0; begin < cols; ++g, begin += groupSize) {
      int64_t end = std::min(cols, begin + groupSize);
      Group4 p = findGroup4(row.slice(begin, end - begin));
      storeGroup(q, r, g, p);
      for (int64_t c = begin; c < end; ++c)
        store4(q, r, c, quantize4(row[c], p));
    }
  }
  return q;
}

bool choleskyLower(std::vector<double> &a, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (int64_t k = 0; k < j; ++k)
      d -= a[j * n + k] * a[j * n + k];
    if (!(d > 0.0) || !std::isfinite(d))
      return false;
    d = std::sqrt(d);
    a[j * n + j] = d;
    for (int64_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (int64_t k = 0; k < j; ++k)
        s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / d;
    }
    for (int64_t i = 0; i < j; ++i)
      a[i * n + j] = 0.0;
  }
  return true;
}

/// Upper Cholesky factor U of H^-1 (H^-1 = U^T U) from the lower factor L
/// of H: H^-1 = L^-T L^-1, computed in float64.
static bool upperCholeskyOfInverse(std::vector<double> &l, int64_t n) {
  // Linv: inverse of the lower-triangular L, column by column.
  std::vector<double> inv(n * n, 0.0);
  for (int64_t j = 0; j < n; ++j) {
    inv[j * n + j] = 1.0 / l[j * n + j];
    for (int64_t i = j + 1; i < n; ++i) {
      double s = 0.0;
      for (int64_t k = j; k < i; ++k)
        s += l[i * n + k] * inv[k * n + j];
      inv[i * n + j] = -s / l[i * n + i];
    }
  }
  // Hinv = Linv^T Linv (symmetric).
  std::vector<double> hinv(n * n, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double s = 0.0;
      for (int64_t k = i; k < n; ++k) // Linv[k, i] nonzero for k >= i
        s += inv[k * n + i] * inv[k * n + j];
      hinv[i * n + j] = hinv[j * n + i] = s;
    }
  if (!choleskyLower(hinv, n))
    return false;
  // U = L'^T.
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      l[i * n + j] = j >= i ? hinv[j * n + i] : 0.0;
  return true;
}

Expected<Quantized4> quantizeGptq4(ArrayRef<float> w, int64_t rows,
                                   int64_t cols, ArrayRef<double> h,
                                   const GptqOptions &options) {
  const int64_t n = cols, G = options.groupSize;
  std::vector<double> W(w.begin(), w.end());
  std::vector<double> H(h.begin(), h.end());
  // Dead inputs: never seen non-zero in calibration.
  for (int64_t i = 0; i < n; ++i)
    if (H[i * n + i] == 0.0) {
      H[i * n + i] = 1.0;
      for (int64_t r = 0; r < rows; ++r)
        W[r * n + i] = 0.0;
    }
  Quantized4 q = makeQuantized4(rows, cols, G);
  const int64_t groups = (n + G - 1) / G;
  // Static groups (act-order): every group's parameters from the original
  // (dead-zeroed) weights, before any error compensation.
  std::vector<Group4> params(rows * groups);
  std::vector<float> tmp;
  auto findFrom = [&](int64_t r, int64_t g, auto value) {
    int64_t begin = g * G, end = std::min(n, begin + G);
    tmp.resize(end - begin);
    for (int64_t c = begin; c < end; ++c)
      tmp[c - begin] = static_cast<float>(value(c));
    Group4 p = findGroup4(tmp);
    params[r * groups + g] = p;
    storeGroup(q, r, g, p);
  };
  if (options.actOrder)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < groups; ++g)
        findFrom(r, g, [&](int64_t c) { return W[r * n + c]; });

  // perm[i] = original column visited i-th.
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  if (options.actOrder)
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
      return H[a * n + a] > H[b * n + b];
    });
  std::vector<double> Wp(rows * n), Hp(n * n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i)
      Wp[r * n + i] = W[r * n + perm[i]];
  double meanDiag = 0.0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      Hp[i * n + j] = H[perm[i] * n + perm[j]];
  for (int64_t i = 0; i < n; ++i)
    meanDiag += Hp[i * n + i];
  meanDiag /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i)
    Hp[i * n + i] += options.damp * meanDiag;
  if (!choleskyLower(Hp, n) || !upperCholeskyOfInverse(Hp, n))
    return createStringError(inconvertibleErrorCode(),
                             "GPTQ: the calibration Hessian is not positive "
                             "definite after dampening by " +
                                 std::to_string(options.damp) +
                                 " x mean(diag H); use a larger damp or more "
                                 "calibration tokens");
  const std::vector<double> &U = Hp;

  const int64_t B = std::max<int64_t>(1, options.blockSize);
  std::vector<double> err(rows * B);
  for (int64_t i1 = 0; i1 < n; i1 += B) {
    const int64_t i2 = std::min(n, i1 + B), count = i2 - i1;
    for (int64_t i = i1; i < i2; ++i) {
      if (!options.actOrder && i % G == 0) {
        // Group parameters from the weights as updated so far: in-block
        // columns are current; later columns still owe this block's errors.
        for (int64_t r = 0; r < rows; ++r)
          findFrom(r, i / G, [&](int64_t c) {
            double v = Wp[r * n + c];
            if (c >= i2)
              for (int64_t k = i1; k < i; ++k)
                v -= err[r * B + (k - i1)] * U[k * n + c];
            return v;
          });
      }
      const double d = U[i * n + i];
      const int64_t orig = perm[i], g = orig / G;
      for (int64_t r = 0; r < rows; ++r) {
        Group4 p = params[r * groups + g];
        double wv = Wp[r * n + i];
        float qv = quantize4(static_cast<float>(wv), p);
        store4(q, r, orig, qv);
        double e = (wv - static_cast<double>(dequantize4(qv, p))) / d;
        err[r * B + (i - i1)] = e;
        const double *urow = &U[i * n];
        double *wrow = &Wp[r * n];
        for (int64_t j = i + 1; j < i2; ++j)
          wrow[j] -= e * urow[j];
      }
    }
    // Lazy batch update of the columns after the block.
    for (int64_t r = 0; r < rows; ++r) {
      double *wrow = &Wp[r * n];
      for (int64_t k = 0; k < count; ++k) {
        double e = err[r * B + k];
        if (e == 0.0)
          continue;
        const double *urow = &U[(i1 + k) * n];
        for (int64_t j = i2; j < n; ++j)
          wrow[j] -= e * urow[j];
      }
    }
  }
  return q;
}

double outputError(ArrayRef<float> w, ArrayRef<float> approx, int64_t rows,
                   int64_t cols, ArrayRef<double> h) {
  double total = 0.0;
  std::vector<double> d(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      d[c] = static_cast<double>(w[r * cols + c]) - approx[r * cols + c];
    for (int64_t i = 0; i < cols; ++i) {
      if (d[i] == 0.0)
        continue;
      double s = 0.0;
      const double *hrow = &h[i * cols];
      for (int64_t j = 0; j < cols; ++j)
        s += hrow[j] * d[j];
      total += d[i] * s;
    }
  }
  return total;
}

AwqResult searchAwqScales(ArrayRef<AwqWeight> weights, int64_t cols,
                          ArrayRef<double> h, ArrayRef<float> absmean,
                          ArrayRef<int64_t> tie, int64_t numTied,
                          int64_t groupSize, int64_t grid) {
  // Statistic per searched scale: mean absmean of its channels.
  std::vector<double> stat(numTied, 0.0), count(numTied, 0.0);
  for (int64_t c = 0; c < cols; ++c) {
    stat[tie[c]] += absmean[c];
    count[tie[c]] += 1.0;
  }
  for (int64_t t = 0; t < numTied; ++t)
    stat[t] = count[t] > 0 ? stat[t] / count[t] : 0.0;

  AwqResult best;
  std::vector<float> scaled, approx;
  for (int64_t k = 0; k < grid; ++k) {
    double alpha = static_cast<double>(k) / static_cast<double>(grid);
    std::vector<double> s(numTied);
    double mx = 0.0, mn = INFINITY;
    for (int64_t t = 0; t < numTied; ++t) {
      s[t] = std::max(std::pow(stat[t], alpha), 1e-4);
      mx = std::max(mx, s[t]);
      mn = std::min(mn, s[t]);
    }
    double norm = std::sqrt(mx * mn);
    std::vector<float> sc(cols);
    for (int64_t c = 0; c < cols; ++c)
      sc[c] = static_cast<float>(s[tie[c]] / norm);
    double loss = 0.0;
    for (const AwqWeight &wt : weights) {
      scaled.resize(wt.rows * cols);
      for (int64_t r = 0; r < wt.rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          scaled[r * cols + c] = wt.data[r * cols + c] * sc[c];
      approx = quantizeRtn4(scaled, wt.rows, cols, groupSize).dequantize();
      for (int64_t r = 0; r < wt.rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          approx[r * cols + c] /= sc[c];
      loss += outputError(wt.data, approx, wt.rows, cols, h);
    }
    if (k == 0)
      best.rtnLoss = loss;
    if (k == 0 || loss < best.loss) {
      best.loss = loss;
      best.alpha = alpha;
      best.scales = std::move(sc);
    }
  }
  return best;
}

} // namespace mlir::kiln

//===- QuantMath.h - weight quantizers, GPTQ, AWQ scale search ---*- C++ -*-===//
//
// The numerics behind Kiln's weight quantization, shared by the artifact
// writer (which materializes quantized weights one tensor at a time) and
// the activation-aware passes (which search scales at compile time):
//
// * GPTQ's asymmetric 4-bit group quantizer (W4A16 RTN; the int8
//   quantizers live in the artifact writer);
// * GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization
//   for Generative Pre-trained Transformers", Algorithm 1): column-by-column
//   quantization with error compensation through the upper Cholesky factor
//   of H^-1, lazy batch updates, optional act-order with static groups;
// * AWQ's scale search (Lin et al. 2023, "AWQ: Activation-aware Weight
//   Quantization", section 3.2) with the error measured through the
//   calibration Hessian.
//
// Matrices are row-major [rows, cols] float32 (weights, as materialized) or
// float64 (Hessians and intermediate GPTQ state). Cholesky factorization and
// inversion are implemented here in float64 (no LAPACK dependency).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_QUANTIZATION_QUANTMATH_H
#define KILN_PASSES_QUANTIZATION_QUANTMATH_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace mlir::kiln {

/// Scale and zero point of one 4-bit group (GPTQ's `Quantizer` with
/// sym=False, maxq = 15): lo = min(w, 0), hi = max(w, 0) (both 0: -1, 1),
/// scale = (hi - lo) / 15, zero = round(-lo / scale), computed in float32,
/// rounding half to even (torch.round).
struct Group4 {
  float scale = 1.0f;
  float zero = 0.0f;
};
Group4 findGroup4(llvm::ArrayRef<float> values);

/// q = clamp(round(w / scale) + zero, 0, 15) (float32, half to even).
float quantize4(float w, Group4 p);
/// scale * (q - zero), the value a 4-bit kernel reconstructs.
inline float dequantize4(float q, Group4 p) { return p.scale * (q - p.zero); }

/// 4-bit weights in Kiln's W4 layout: `packed` [rows, ceil(cols/2)] (element
/// 2j in the low nibble), `scales` f32 and `zeros` bytes [rows,
/// ceil(cols/groupSize)] (contiguous groups along each row).
struct Quantized4 {
  int64_t rows = 0, cols = 0, groupSize = 0;
  std::vector<uint8_t> packed;
  std::vector<float> scales;
  std::vector<uint8_t> zeros;
  /// The dequantized matrix [rows, cols].
  std::vector<float> dequantize() const;
};

/// Round-to-nearest 4-bit quantization (W4A16 RTN) of `w` [rows, cols].
Quantized4 quantizeRtn4(llvm::ArrayRef<float> w, int64_t rows, int64_t cols,
                        int64_t groupSize);

/// GPTQ options (names as in the paper's reference implementation).
struct GptqOptions {
  int64_t groupSize = 128; ///< inputs per scale/zero group (contiguous)
  bool actOrder = false;   ///< quantize columns in descending diag(H) order
  double damp = 0.01;      ///< percdamp: H += damp * mean(diag H) * I
  int64_t blockSize = 128; ///< columns per lazy batch update
};

/// GPTQ (Frantar et al. 2022, Algorithm 1) of `w` [rows, cols] with the
/// calibration Hessian `h` [cols, cols] (any positive multiple of
/// X^T X / N: the algorithm is invariant to it). Steps: columns with
/// H_ii = 0 ("dead" inputs) get H_ii = 1 and W[:, i] = 0; H += damp *
/// mean(diag H) * I; U = upper Cholesky factor of H^-1; then columns are
/// quantized one at a time, the error (w - q) / U_ii of each spread over the
/// not yet quantized columns by row i of U (within a block of `blockSize`
/// columns at once, to the remaining columns once per block). A group's
/// scale/zero come from the group's weights as updated when its first
/// column is reached (exactly as without lazy batching). With act-order the
/// columns are visited in descending diag(H) order and, to keep Kiln's
/// contiguous groups (no g_idx in the kernel layout), every group's
/// scale/zero is computed from the original weights before the sweep
/// ("static groups", as AutoGPTQ's static_groups). Fails if H is not
/// positive definite after dampening.
llvm::Expected<Quantized4> quantizeGptq4(llvm::ArrayRef<float> w, int64_t rows,
                                         int64_t cols,
                                         llvm::ArrayRef<double> h,
                                         const GptqOptions &options);

/// Output reconstruction error of `approx` for `w` (both [rows, cols])
/// under the Hessian `h` [cols, cols]: sum over rows of dW H dW^T with
/// dW = w - approx. With h = X^T X / N it is the mean over the N calibration
/// tokens of the squared output error ||x W^T - x approx^T||^2.
double outputError(llvm::ArrayRef<float> w, llvm::ArrayRef<float> approx,
                   int64_t rows, int64_t cols, llvm::ArrayRef<double> h);

/// In-place lower Cholesky factor (a = L L^T, upper triangle zeroed) of the
/// symmetric `a` [n, n]. Returns false if `a` is not positive definite.
bool choleskyLower(std::vector<double> &a, int64_t n);

/// One weight of an AWQ search group, [rows, cols] with cols = the shared
/// input width.
struct AwqWeight {
  llvm::ArrayRef<float> data;
  int64_t rows = 0;
};

/// AWQ's scale search (Lin et al. 2023, section 3.2) for weights sharing an
/// input of `cols` channels. `tie[c]` maps channel c to one of `numTied`
/// searched scales (identity normally; with grouped-query attention the
/// query heads reading one value head share a scale); the statistic of a
/// tied scale is the mean of its channels' `absmean`. For alpha = k / grid,
/// k = 0 .. grid-1: s = max(absmean^alpha, 1e-4), s /= sqrt(max(s) *
/// min(s)); the loss is the sum over the weights of outputError(W,
/// Q(W diag(s)) diag(s)^-1, H) with Q the 4-bit RTN quantizer in groups of
/// `groupSize`. Returns the per-channel s [cols] of the best alpha (alpha
/// = 0 gives s = 1, plain RTN, so the result is never worse than RTN on the
/// calibration data), the best alpha and both losses.
struct AwqResult {
  std::vector<float> scales;
  double alpha = 0.0;
  double loss = 0.0;
  double rtnLoss = 0.0;
};
AwqResult searchAwqScales(llvm::ArrayRef<AwqWeight> weights, int64_t cols,
                          llvm::ArrayRef<double> h,
                          llvm::ArrayRef<float> absmean,
                          llvm::ArrayRef<int64_t> tie, int64_t numTied,
                          int64_t groupSize, int64_t grid);

} // namespace mlir::kiln

#endif // KILN_PASSES_QUANTIZATION_QUANTMATH_H

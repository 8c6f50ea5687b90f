//===- WholeOpKernels.h - Whole-op linears and elementwise kernels -*- C++ -*-===//
//
// The runtime's own entry points for a whole linear layer or elementwise op
// over every element type and weight kind. Emitted code does not call them:
// codegen instantiates a kernel per op instead (kernel_abi.h, "Generated
// kernels"). They are built on the same primitives as the generated code
// (kiln_k_linear_tile over kiln_k_parallel_for; the elementwise loops of
// Kernels.cpp) and serve the runtime's tests and benchmarks, which check
// those primitives against independent references. Semantics and layouts:
// kernel_abi.h (W8A16, W4A16, GGML block formats, 16-bit element types).
// Internal to the runtime.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_CPU_WHOLEOPKERNELS_H
#define KILN_RUNTIME_CPU_WHOLEOPKERNELS_H

#include "kiln_rt/kernel_abi.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Linear layer without bias: y[n, out] = x[n, in] * w[out, in]^T.
void kiln_k_linear(const float *x, const float *w, float *y, int64_t n,
                   int64_t in, int64_t out);

/// Bias of a linear layer: y[r, j] = x[r, j] + b[j]; x, y [n, width],
/// b [width] (kiln.add_bias; the q/k/v projection biases of Qwen2).
void kiln_k_add_bias(const float *x, const float *b, float *y, int64_t n,
                     int64_t width);

/// SwiGLU (Shazeer 2020): y = silu(gate) * up elementwise, count elements.
void kiln_k_swiglu(const float *gate, const float *up, float *y,
                   int64_t count);

/// y = x * sigmoid(x), count elements.
void kiln_k_silu(const float *x, float *y, int64_t count);

/// y = a + b, count elements.
void kiln_k_add(const float *a, const float *b, float *y, int64_t count);

/// y = a * b, count elements.
void kiln_k_mul(const float *a, const float *b, float *y, int64_t count);

void kiln_k_linear_f16(const kiln_f16_t *x, const kiln_f16_t *w, kiln_f16_t *y,
                       int64_t n, int64_t in, int64_t out);

/// Linear layer with float32 output (the classifier producing logits).
void kiln_k_linear_f16_f32(const kiln_f16_t *x, const kiln_f16_t *w, float *y,
                           int64_t n, int64_t in, int64_t out);

void kiln_k_add_bias_f16(const kiln_f16_t *x, const kiln_f16_t *b,
                         kiln_f16_t *y, int64_t n, int64_t width);

void kiln_k_swiglu_f16(const kiln_f16_t *gate, const kiln_f16_t *up,
                       kiln_f16_t *y, int64_t count);

void kiln_k_silu_f16(const kiln_f16_t *x, kiln_f16_t *y, int64_t count);

void kiln_k_add_f16(const kiln_f16_t *a, const kiln_f16_t *b, kiln_f16_t *y,
                    int64_t count);

void kiln_k_mul_f16(const kiln_f16_t *a, const kiln_f16_t *b, kiln_f16_t *y,
                    int64_t count);

void kiln_k_linear_bf16(const kiln_bf16_t *x, const kiln_bf16_t *w,
                        kiln_bf16_t *y, int64_t n, int64_t in, int64_t out);

/// Linear layer with float32 output (the classifier producing logits).
void kiln_k_linear_bf16_f32(const kiln_bf16_t *x, const kiln_bf16_t *w,
                            float *y, int64_t n, int64_t in, int64_t out);

void kiln_k_add_bias_bf16(const kiln_bf16_t *x, const kiln_bf16_t *b,
                         kiln_bf16_t *y, int64_t n, int64_t width);

void kiln_k_swiglu_bf16(const kiln_bf16_t *gate, const kiln_bf16_t *up,
                        kiln_bf16_t *y, int64_t count);

void kiln_k_silu_bf16(const kiln_bf16_t *x, kiln_bf16_t *y, int64_t count);

void kiln_k_add_bf16(const kiln_bf16_t *a, const kiln_bf16_t *b, kiln_bf16_t *y,
                     int64_t count);

void kiln_k_mul_bf16(const kiln_bf16_t *a, const kiln_bf16_t *b, kiln_bf16_t *y,
                     int64_t count);

void kiln_k_linear_w8a16(const float *x, const int8_t *qweight,
                         const float *scales, float *y, int64_t n, int64_t in,
                         int64_t out, int64_t group_size);

void kiln_k_linear_w8a16_f16(const kiln_f16_t *x, const int8_t *qweight,
                             const float *scales, kiln_f16_t *y, int64_t n,
                             int64_t in, int64_t out, int64_t group_size);

void kiln_k_linear_w8a16_bf16(const kiln_bf16_t *x, const int8_t *qweight,
                              const float *scales, kiln_bf16_t *y, int64_t n,
                              int64_t in, int64_t out, int64_t group_size);

/// 16-bit activations, float32 output (a quantized classifier producing
/// logits), like kiln_k_linear_{f16,bf16}_f32.
void kiln_k_linear_w8a16_f16_f32(const kiln_f16_t *x, const int8_t *qweight,
                                 const float *scales, float *y, int64_t n,
                                 int64_t in, int64_t out, int64_t group_size);

void kiln_k_linear_w8a16_bf16_f32(const kiln_bf16_t *x, const int8_t *qweight,
                                  const float *scales, float *y, int64_t n,
                                  int64_t in, int64_t out, int64_t group_size);

void kiln_k_linear_w4a16(const float *x, const int8_t *qweight,
                         const float *scales, const int8_t *zeros, float *y,
                         int64_t n, int64_t in, int64_t out,
                         int64_t group_size);

void kiln_k_linear_w4a16_f16(const kiln_f16_t *x, const int8_t *qweight,
                             const float *scales, const int8_t *zeros,
                             kiln_f16_t *y, int64_t n, int64_t in, int64_t out,
                             int64_t group_size);

void kiln_k_linear_w4a16_bf16(const kiln_bf16_t *x, const int8_t *qweight,
                              const float *scales, const int8_t *zeros,
                              kiln_bf16_t *y, int64_t n, int64_t in,
                              int64_t out, int64_t group_size);

/// 16-bit activations, float32 output (a quantized classifier producing
/// logits), like kiln_k_linear_w8a16_{f16,bf16}_f32.
void kiln_k_linear_w4a16_f16_f32(const kiln_f16_t *x, const int8_t *qweight,
                                 const float *scales, const int8_t *zeros,
                                 float *y, int64_t n, int64_t in, int64_t out,
                                 int64_t group_size);

void kiln_k_linear_w4a16_bf16_f32(const kiln_bf16_t *x, const int8_t *qweight,
                                  const float *scales, const int8_t *zeros,
                                  float *y, int64_t n, int64_t in, int64_t out,
                                  int64_t group_size);

void kiln_k_linear_blocks(const float *x, const int8_t *w, float *y, int64_t n,
                          int64_t in, int64_t out, int64_t format);

/// The same linear with int8 activations (the explicit recipe
/// act_quant = "int8_per_block", kiln-compile --act-quant=int8): each row
/// of x is quantized per 32 elements as llama.cpp's Q8_0 activations,
///   d_b = max_{i in b} |x_i| / 127 (float32),
///   q_i = clamp(roundf(x_i / d_b), -127, 127)   (0 where d_b = 0),
/// and y[t, o] = sum_b d_b * sum_{i in b} W[o, i] * q_i, the inner sums of
/// codes exact in int32 per 16/32-element group of the weight's format
/// (AVX-512 VNNI or AVX2 integer dot products), the scales applied in
/// float32. From 4 tokens on (prefill) the same formula is computed in
/// float32 instead: x replaced by d_b * q_i and multiplied with decoded
/// weight tiles (kiln_k_linear_blocks' sgemm path), exact up to float
/// summation order and far faster than one integer GEMV per token. in a
/// multiple of 32 (of 256 for the K-quants). y must not alias x.
void kiln_k_linear_blocks_a8(const float *x, const int8_t *w, float *y,
                             int64_t n, int64_t in, int64_t out,
                             int64_t format);

#ifdef __cplusplus
}
#endif

#endif // KILN_RUNTIME_CPU_WHOLEOPKERNELS_H

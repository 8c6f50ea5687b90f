/*===- rope_scaling.h - RoPE inverse frequencies with scaling -----*- C -*-===*
 *
 * The per-pair inverse frequencies of rotary position embeddings (RoFormer,
 * Su et al. 2021) with the context-extension rules Llama-family configs ask
 * for. Shared by the CPU kernels (runtime/src/cpu/Kernels.cpp), the CUDA
 * kernels (codegen/CUDA/KilnKernels.cuh, device code) and the tests, so every
 * target computes the same table. Header-only, C-compatible.
 *
 * Pair i (0 <= i < rot_dim / 2) of a head of `head_dim` rotates by angle
 * p * inv_freq(i) at position p, with the unscaled frequency
 *   w_i = 1 / theta^(2i / head_dim)                     (float32 arithmetic)
 * and `scaling` one of:
 *  - KILN_ROPE_LINEAR: w_i / factor (linear position interpolation, Chen et
 *    al. 2023; transformers' _compute_linear_scaling_rope_parameters).
 *    factor 1 is plain RoPE.
 *  - KILN_ROPE_DYNAMIC: dynamic NTK scaling (transformers'
 *    _compute_dynamic_ntk_parameters with its dynamic_rope_update): when the
 *    sequence length L = pos + n of a call exceeds `original_max`, theta
 *    becomes theta * (factor * L / original_max - (factor - 1))^(d / (d - 2)),
 *    d = rot_dim; below it, plain RoPE.
 *  - KILN_ROPE_LLAMA3: Llama 3.1's three bands (transformers'
 *    _compute_llama3_parameters): with wavelength l_i = 2 pi / w_i,
 *    low = original_max / low_freq_factor, high = original_max /
 *    high_freq_factor: l_i < high keeps w_i; l_i > low gives w_i / factor;
 *    otherwise s = (original_max / l_i - low_freq_factor) /
 *    (high_freq_factor - low_freq_factor) and (1 - s) w_i / factor + s w_i.
 *
 * GGUF carries Llama 3.1 scaling as a tensor `rope_freqs.weight` of per-pair
 * divisors f_i instead (llama.cpp ggml_rope_ext's freq_factors): inv_freq is
 * then w_i / f_i (kernel_abi.h kiln_k_rope_factors).
 *===----------------------------------------------------------------------===*/
#ifndef KILN_RT_ROPE_SCALING_H
#define KILN_RT_ROPE_SCALING_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KILN_ROPE_HD __host__ __device__
#else
#define KILN_ROPE_HD
#endif

#define KILN_ROPE_LINEAR 0
#define KILN_ROPE_DYNAMIC 1
#define KILN_ROPE_LLAMA3 2

/// The theta in effect for a call covering positions [0, seq_len): `theta`
/// except for KILN_ROPE_DYNAMIC past `original_max` (see above).
static inline KILN_ROPE_HD float kiln_rope_theta(float theta, int64_t rot_dim,
                                                 int64_t scaling, float factor,
                                                 int64_t original_max,
                                                 int64_t seq_len) {
  if (scaling != KILN_ROPE_DYNAMIC || seq_len <= original_max ||
      rot_dim <= 2)
    return theta;
  float growth = factor * (float)seq_len / (float)original_max - (factor - 1.0f);
  return theta * powf(growth, (float)rot_dim / (float)(rot_dim - 2));
}

/// Inverse frequency of pair i (see above). `theta` is the value
/// kiln_rope_theta returned for the call; dynamic scaling needs nothing
/// else. For KILN_ROPE_DYNAMIC the exponent's denominator is rot_dim (the
/// rotated width, transformers' `dim`), for the others head_dim.
static inline KILN_ROPE_HD float
kiln_rope_inv_freq(int64_t i, int64_t head_dim, int64_t rot_dim, float theta,
                   int64_t scaling, float factor, float low_freq_factor,
                   float high_freq_factor, int64_t original_max) {
  int64_t d = scaling == KILN_ROPE_DYNAMIC ? rot_dim : head_dim;
  float w = 1.0f / powf(theta, (float)(2 * i) / (float)d);
  if (scaling == KILN_ROPE_LINEAR)
    return factor == 1.0f ? w : w / factor;
  if (scaling != KILN_ROPE_LLAMA3)
    return w;
  float wavelen = (float)(2.0 * 3.14159265358979323846) / w;
  float low = (float)original_max / low_freq_factor;
  float high = (float)original_max / high_freq_factor;
  if (wavelen < high)
    return w;
  if (wavelen > low)
    return w / factor;
  float s = ((float)original_max / wavelen - low_freq_factor) /
            (high_freq_factor - low_freq_factor);
  return (1.0f - s) * w / factor + s * w;
}

#undef KILN_ROPE_HD

#endif /* KILN_RT_ROPE_SCALING_H */

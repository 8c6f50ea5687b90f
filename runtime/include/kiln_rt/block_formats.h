/*===- block_formats.h - GGML block quantization codecs ------*- C++ -*-===*
 *
 * The block formats of GGUF files (llama.cpp's ggml-common.h block_* structs;
 * the values are what gguf-py's gguf.quants.dequantize computes), decoded
 * one block at a time. One codec serves every user: the importers check
 * tensor sizes with it, the artifact writer dequantizes with it, and the CPU
 * kernels (runtime/src/cpu) and CUDA kernels (codegen/CUDA/KilnKernels.cuh,
 * which the artifact writer ships next to the emitted model.cu) read weights
 * kept in these formats through it. Header-only C++ (host and, under nvcc,
 * device), no dependencies.
 *
 * A tensor [rows, cols] in a block format stores each row as cols /
 * kiln_block_elems(f) consecutive blocks of kiln_block_bytes(f) bytes (cols
 * must be a multiple of the block length: 32 for the legacy formats, 256 for
 * the K-quants). All multi-byte fields are little-endian; "f16" is IEEE
 * binary16. In the formulas q is the unsigned integer stored for an element
 * and d, m, dmin are the block's f16 fields widened to float.
 *
 *   format  elems bytes  layout (in order)                     weight
 *   Q4_0    32    18     d, qs[16]                             d * (q - 8)
 *   Q4_1    32    20     d, m, qs[16]                          d * q + m
 *   Q5_0    32    22     d, qh[4], qs[16]                      d * (q - 16)
 *   Q5_1    32    24     d, m, qh[4], qs[16]                   d * q + m
 *   Q8_0    32    34     d, qs[32] (int8)                      d * q
 *   Q2_K    256   84     scales[16], qs[64], d, dmin           see below
 *   Q3_K    256   110    hmask[32], qs[64], scales[12], d      see below
 *   Q4_K    256   144    d, dmin, scales[12], qs[128]          see below
 *   Q5_K    256   176    d, dmin, scales[12], qh[32], qs[128]  see below
 *   Q6_K    256   210    ql[128], qh[64], scales[16] (int8), d see below
 *
 * Legacy 4/5-bit formats: element j < 16 is the low nibble of qs[j], element
 * j + 16 the high nibble; the fifth bit of element i is bit i of the 32-bit
 * qh. K-quants group a 256-element super-block into sub-blocks, each with its
 * own integer scale (and min) multiplied by the super-block's d (dmin):
 *   Q2_K: 16 groups of 16; scale = scales[g] & 15, min = scales[g] >> 4;
 *         element 128h + 32s + l is bits 2s..2s+1 of qs[32h + l];
 *         w = d * scale * q - dmin * min.
 *   Q3_K: 16 groups of 16; 6-bit scales stored biased by 32 (low 4 bits:
 *         low nibble of scales[g] for g < 8, high nibble of scales[g - 8]
 *         otherwise; top 2 bits: bits 2(g/4)..2(g/4)+1 of scales[8 + g % 4]);
 *         element 128h + 32s + l has low bits 2s..2s+1 of qs[32h + l] and
 *         high bit (4h + s) of hmask[l]; q = low - (high ? 0 : 4);
 *         w = d * (scale - 32) * q.
 *   Q4_K / Q5_K: 8 groups of 32; 6-bit scale and min packed in scales[12]
 *         (j < 4: scales[j] & 63 and scales[j + 4] & 63; j >= 4: low / high
 *         nibble of scales[j + 4] with the top 2 bits from scales[j - 4] /
 *         scales[j] >> 6); element 64c + 32n + l is nibble n of qs[32c + l]
 *         (Q5_K: plus bit (2c + n) of qh[l] as the fifth bit);
 *         w = d * scale * q - dmin * min.
 *   Q6_K: 16 groups of 16, int8 scales; element 128h + 64n + l (l < 64) has
 *         low nibble n of ql[64h + l] and, for element 128h + 32s + l
 *         (l < 32), high 2 bits 2s..2s+1 of qh[32h + l]; w = d * scale *
 *         (q - 32).
 * Products are formed as (d * scale) * q - (dmin * min) in float, the order
 * gguf-py uses, so decoded values equal its output.
 *===----------------------------------------------------------------------===*/
#ifndef KILN_RT_BLOCK_FORMATS_H
#define KILN_RT_BLOCK_FORMATS_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define KILN_BLOCK_FN __host__ __device__ inline
#define KILN_BLOCK_CONSTEXPR __host__ __device__ constexpr
#else
#define KILN_BLOCK_FN inline
#define KILN_BLOCK_CONSTEXPR constexpr
#endif

/// Block formats by their GGML type id (the GGUF tensor-info type field).
enum kiln_block_format {
  KILN_BLOCK_Q4_0 = 2,
  KILN_BLOCK_Q4_1 = 3,
  KILN_BLOCK_Q5_0 = 6,
  KILN_BLOCK_Q5_1 = 7,
  KILN_BLOCK_Q8_0 = 8,
  KILN_BLOCK_Q2_K = 10,
  KILN_BLOCK_Q3_K = 11,
  KILN_BLOCK_Q4_K = 12,
  KILN_BLOCK_Q5_K = 13,
  KILN_BLOCK_Q6_K = 14,
};

/// Elements per block (32 or 256); 0 for an id that is not a block format
/// above.
KILN_BLOCK_CONSTEXPR int64_t kiln_block_elems(int64_t format) {
  switch (format) {
  case KILN_BLOCK_Q4_0: case KILN_BLOCK_Q4_1: case KILN_BLOCK_Q5_0:
  case KILN_BLOCK_Q5_1: case KILN_BLOCK_Q8_0:
    return 32;
  case KILN_BLOCK_Q2_K: case KILN_BLOCK_Q3_K: case KILN_BLOCK_Q4_K:
  case KILN_BLOCK_Q5_K: case KILN_BLOCK_Q6_K:
    return 256;
  default:
    return 0;
  }
}

/// Bytes per block; 0 for an id that is not a block format above.
KILN_BLOCK_CONSTEXPR int64_t kiln_block_bytes(int64_t format) {
  switch (format) {
  case KILN_BLOCK_Q4_0: return 18;
  case KILN_BLOCK_Q4_1: return 20;
  case KILN_BLOCK_Q5_0: return 22;
  case KILN_BLOCK_Q5_1: return 24;
  case KILN_BLOCK_Q8_0: return 34;
  case KILN_BLOCK_Q2_K: return 84;
  case KILN_BLOCK_Q3_K: return 110;
  case KILN_BLOCK_Q4_K: return 144;
  case KILN_BLOCK_Q5_K: return 176;
  case KILN_BLOCK_Q6_K: return 210;
  default: return 0;
  }
}

/// The lowercase name of a block format ("q4_k"), as in Kiln IR and
/// manifests; nullptr for an id that is not one.
KILN_BLOCK_FN const char *kiln_block_format_name(int64_t format) {
  switch (format) {
  case KILN_BLOCK_Q4_0: return "q4_0";
  case KILN_BLOCK_Q4_1: return "q4_1";
  case KILN_BLOCK_Q5_0: return "q5_0";
  case KILN_BLOCK_Q5_1: return "q5_1";
  case KILN_BLOCK_Q8_0: return "q8_0";
  case KILN_BLOCK_Q2_K: return "q2_k";
  case KILN_BLOCK_Q3_K: return "q3_k";
  case KILN_BLOCK_Q4_K: return "q4_k";
  case KILN_BLOCK_Q5_K: return "q5_k";
  case KILN_BLOCK_Q6_K: return "q6_k";
  default: return nullptr;
  }
}

/// Every block format id, in GGML type order.
#define KILN_BLOCK_FORMATS(X)                                                 \
  X(KILN_BLOCK_Q4_0) X(KILN_BLOCK_Q4_1) X(KILN_BLOCK_Q5_0) X(KILN_BLOCK_Q5_1)  \
  X(KILN_BLOCK_Q8_0) X(KILN_BLOCK_Q2_K) X(KILN_BLOCK_Q3_K) X(KILN_BLOCK_Q4_K)  \
  X(KILN_BLOCK_Q5_K) X(KILN_BLOCK_Q6_K)

/// The id of the block format named `name` ("q4_k"); 0 when none is.
inline int64_t kiln_block_format_from_name(const char *name) {
#define KILN_BLOCK_MATCH(f)                                                   \
  if (strcmp(name, kiln_block_format_name(f)) == 0)                           \
    return f;
  KILN_BLOCK_FORMATS(KILN_BLOCK_MATCH)
#undef KILN_BLOCK_MATCH
  return 0;
}

/// IEEE binary16 bits to float (exact; subnormals, infinities and NaN kept).
KILN_BLOCK_FN float kiln_block_f16(const uint8_t *p) {
  uint32_t h = uint32_t(p[0]) | (uint32_t(p[1]) << 8);
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else { // subnormal: normalize
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block.
KILN_BLOCK_FN void kiln_block_k4_scale_min(const uint8_t *s, int j,
                                           uint8_t *scale, uint8_t *min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = uint8_t((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
    *min = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

/// Decodes one block of `format` at `b` into out[kiln_block_elems(format)].
/// `format` must be one of kiln_block_format (others write nothing).
KILN_BLOCK_FN void kiln_block_decode(int64_t format, const uint8_t *b,
                                     float *out) {
  switch (format) {
  case KILN_BLOCK_Q4_0: {
    float d = kiln_block_f16(b);
    for (int j = 0; j < 16; ++j) {
      out[j] = d * float(int(b[2 + j] & 0x0f) - 8);
      out[j + 16] = d * float(int(b[2 + j] >> 4) - 8);
    }
    return;
  }
  case KILN_BLOCK_Q4_1: {
    float d = kiln_block_f16(b), m = kiln_block_f16(b + 2);
    for (int j = 0; j < 16; ++j) {
      out[j] = d * float(b[4 + j] & 0x0f) + m;
      out[j + 16] = d * float(b[4 + j] >> 4) + m;
    }
    return;
  }
  case KILN_BLOCK_Q5_0:
  case KILN_BLOCK_Q5_1: {
    bool hasMin = format == KILN_BLOCK_Q5_1;
    float d = kiln_block_f16(b), m = hasMin ? kiln_block_f16(b + 2) : 0.0f;
    const uint8_t *qhp = b + (hasMin ? 4 : 2), *qs = qhp + 4;
    uint32_t qh = uint32_t(qhp[0]) | (uint32_t(qhp[1]) << 8) |
                  (uint32_t(qhp[2]) << 16) | (uint32_t(qhp[3]) << 24);
    for (int j = 0; j < 16; ++j) {
      int lo = (qs[j] & 0x0f) | int(((qh >> j) & 1) << 4);
      int hi = (qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
      if (hasMin) {
        out[j] = d * float(lo) + m;
        out[j + 16] = d * float(hi) + m;
      } else {
        out[j] = d * float(lo - 16);
        out[j + 16] = d * float(hi - 16);
      }
    }
    return;
  }
  case KILN_BLOCK_Q8_0: {
    float d = kiln_block_f16(b);
    for (int j = 0; j < 32; ++j)
      out[j] = float(int8_t(b[2 + j])) * d;
    return;
  }
  case KILN_BLOCK_Q2_K: {
    const uint8_t *scales = b, *qs = b + 16;
    float d = kiln_block_f16(b + 80), dmin = kiln_block_f16(b + 82);
    for (int i = 0; i < 256; ++i) {
      int h = i / 128, s = (i / 32) % 4, l = i % 32, g = i / 16;
      float dl = d * float(scales[g] & 0x0f);
      float ml = dmin * float(scales[g] >> 4);
      int q = (qs[32 * h + l] >> (2 * s)) & 3;
      out[i] = dl * float(q) - ml;
    }
    return;
  }
  case KILN_BLOCK_Q3_K: {
    const uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
    float d = kiln_block_f16(b + 108);
    for (int i = 0; i < 256; ++i) {
      int g = i / 16;
      int low = (g < 8 ? sc[g] : sc[g - 8] >> 4) & 0x0f;
      int high = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
      float dl = d * float(int8_t(uint8_t(low | (high << 4))) - 32);
      int h = i / 128, s = (i / 32) % 4, l = i % 32;
      int q = (qs[32 * h + l] >> (2 * s)) & 3;
      int hb = (hmask[l] >> (i / 32)) & 1;
      out[i] = dl * float(q - (hb ? 0 : 4));
    }
    return;
  }
  case KILN_BLOCK_Q4_K:
  case KILN_BLOCK_Q5_K: {
    bool five = format == KILN_BLOCK_Q5_K;
    float d = kiln_block_f16(b), dmin = kiln_block_f16(b + 2);
    const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + (five ? 48 : 16);
    for (int j = 0; j < 8; ++j) {
      uint8_t scale, min;
      kiln_block_k4_scale_min(sc, j, &scale, &min);
      float dl = d * float(scale), ml = dmin * float(min);
      int c = j / 2, n = j % 2;
      for (int l = 0; l < 32; ++l) {
        int q = (qs[32 * c + l] >> (4 * n)) & 0x0f;
        if (five)
          q |= ((qh[l] >> j) & 1) << 4;
        out[32 * j + l] = dl * float(q) - ml;
      }
    }
    return;
  }
  case KILN_BLOCK_Q6_K: {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *scales = reinterpret_cast<const int8_t *>(b + 192);
    float d = kiln_block_f16(b + 208);
    for (int i = 0; i < 256; ++i) {
      int h = i / 128, r = i % 128;
      int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0f;
      int hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
      float dl = d * float(scales[i / 16]);
      out[i] = dl * float((lo | (hi << 4)) - 32);
    }
    return;
  }
  default:
    return;
  }
}

/// Decodes `count` elements of a row stored in `format`, starting at element
/// 0 of the row at `row` (count a multiple of the block length).
KILN_BLOCK_FN void kiln_block_decode_row(int64_t format, const uint8_t *row,
                                         int64_t count, float *out) {
  int64_t elems = kiln_block_elems(format), bytes = kiln_block_bytes(format);
  for (int64_t k = 0; elems > 0 && k < count / elems; ++k)
    kiln_block_decode(format, row + k * bytes, out + k * elems);
}

#endif /* KILN_RT_BLOCK_FORMATS_H */

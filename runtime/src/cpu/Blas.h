//===- Blas.h - OpenBLAS, loaded at first use with a core type by ISA -*- C++ -*-===//
//
// The CPU kernels multiply float tiles with OpenBLAS's sgemm. OpenBLAS picks
// its kernels from a table of CPU models at load time, and an older table
// (Debian 12 ships 0.3.21) does not know newer CPUs: on an Emerald Rapids
// Xeon it falls back to "Prescott" (SSE3), 8x slower than its AVX-512
// kernels. So the runtime does not link OpenBLAS: it dlopen()s
// libopenblas.so.0 on first use, and before that, unless the user set
// OPENBLAS_CORETYPE, sets it from the instruction set this CPU has:
// "SkylakeX" with AVX-512 (F, CD, BW, DQ, VL), "Haswell" with AVX2 + FMA,
// OpenBLAS's own choice otherwise.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_CPU_BLAS_H
#define KILN_RUNTIME_CPU_BLAS_H

#include <cblas.h>

namespace kiln::rt::cpu {

/// cblas_sgemm of the loaded OpenBLAS (same arguments). Aborts with a
/// message naming the library when OpenBLAS cannot be loaded (a broken
/// installation: the runtime's package depends on it).
void sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE transA, CBLAS_TRANSPOSE transB,
           int m, int n, int k, float alpha, const float *a, int lda,
           const float *b, int ldb, float beta, float *c, int ldc);

/// cblas_dsyrk of the loaded OpenBLAS (same arguments; kiln-calibrate's
/// Hessians). Aborts like sgemm.
void dsyrk(CBLAS_ORDER order, CBLAS_UPLO uplo, CBLAS_TRANSPOSE trans, int n,
           int k, double alpha, const double *a, int lda, double beta,
           double *c, int ldc);

/// The OpenBLAS core type in use (openblas_get_corename), e.g. "SkylakeX",
/// loading OpenBLAS if needed.
const char *blasCoreName();

} // namespace kiln::rt::cpu

#endif // KILN_RUNTIME_CPU_BLAS_H

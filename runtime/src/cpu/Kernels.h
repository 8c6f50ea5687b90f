//===- Kernels.h - CPU kernels of the Kiln kernel ABI -------------*- C++ -*-===//
//
// The kernel ABI itself is declared in kiln_rt/kernel_abi.h (exported C
// symbols); this header adds the internal helpers shared with the tests.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_CPU_KERNELS_H
#define KILN_RUNTIME_CPU_KERNELS_H

#include "kiln_rt/kernel_abi.h"

#include <cstdint>

namespace kiln::rt::cpu {

/// y[r] = dot(w[r, :in], x[:in]) for rows [rowBegin, rowEnd); w row-major
/// [rows, in] float32. Single-threaded; SIMD-dispatched at load time.
void gemvRows(const float *x, const float *w, float *y, int64_t in,
              int64_t rowBegin, int64_t rowEnd);

/// Restricts OpenBLAS to one thread (kernels thread with OpenMP instead).
void setBlasSingleThreaded();

} // namespace kiln::rt::cpu

#endif // KILN_RUNTIME_CPU_KERNELS_H

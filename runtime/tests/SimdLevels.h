//===- SimdLevels.h - Running CPU kernel tests at each SIMD level -*- C++ -*-===//
//
// The kernel tests run every case at each SIMD level this CPU supports
// (generic, AVX2, AVX-512; the Highway kernels follow the same switch), so a
// bug in one code path cannot hide behind another.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_TESTS_SIMDLEVELS_H
#define KILN_RUNTIME_TESTS_SIMDLEVELS_H

#include "cpu/Kernels.h"

#include <vector>

namespace kiln::rt::test {

/// Every SIMD level of the CPU kernels this machine can run, generic first.
inline std::vector<cpu::SimdLevel> supportedLevels() {
  std::vector<cpu::SimdLevel> levels = {cpu::SimdLevel::Generic};
  if (cpu::maxSimdLevel() >= cpu::SimdLevel::Avx2)
    levels.push_back(cpu::SimdLevel::Avx2);
  if (cpu::maxSimdLevel() >= cpu::SimdLevel::Avx512)
    levels.push_back(cpu::SimdLevel::Avx512);
  return levels;
}

inline const char *levelName(cpu::SimdLevel level) {
  switch (level) {
  case cpu::SimdLevel::Generic:
    return "generic";
  case cpu::SimdLevel::Avx2:
    return "avx2";
  case cpu::SimdLevel::Avx512:
    return "avx512";
  }
  return "?";
}

/// Runs the enclosing scope at one SIMD level, restoring the previous one.
class ScopedSimdLevel {
public:
  explicit ScopedSimdLevel(cpu::SimdLevel level)
      : previous_(cpu::setSimdLevelForTesting(level)) {}
  ~ScopedSimdLevel() { cpu::setSimdLevelForTesting(previous_); }
  ScopedSimdLevel(const ScopedSimdLevel &) = delete;
  ScopedSimdLevel &operator=(const ScopedSimdLevel &) = delete;

private:
  cpu::SimdLevel previous_;
};

} // namespace kiln::rt::test

#endif // KILN_RUNTIME_TESTS_SIMDLEVELS_H

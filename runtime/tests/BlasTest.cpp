//===- BlasTest.cpp - OpenBLAS loaded with a core type by ISA --------------===//
//
// cpu/Blas.h: unless the user chose OPENBLAS_CORETYPE, OpenBLAS runs the
// kernels of this CPU's instruction set (Debian's 0.3.21 otherwise fell
// back to SSE3 "Prescott" kernels on CPUs newer than its table), and its
// sgemm computes a product.
//
//===----------------------------------------------------------------------===//
#include "cpu/Blas.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace cpu = kiln::rt::cpu;

TEST(BlasTest, CoreTypeFollowsTheInstructionSet) {
  if (std::getenv("OPENBLAS_CORETYPE") &&
      std::string(std::getenv("OPENBLAS_CORETYPE")) !=
          std::string(cpu::blasCoreName()))
    GTEST_SKIP() << "OPENBLAS_CORETYPE was set by the user";
  __builtin_cpu_init();
  const std::string core = cpu::blasCoreName();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    EXPECT_EQ(core, "SkylakeX");
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    EXPECT_EQ(core, "Haswell");
  EXPECT_NE(core, "Prescott");
}

TEST(BlasTest, SgemmMultiplies) {
  // [2 x 3] * [3 x 2]^T with B given row-major as [2 x 3].
  const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, -1, 2, 1, 0};
  float c[4] = {};
  cpu::sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 2, 2, 3, 1.0f, a, 3, b,
             3, 0.0f, c, 2);
  EXPECT_EQ(c[0], -2.0f); // 1 - 3
  EXPECT_EQ(c[1], 4.0f);  // 2 + 2
  EXPECT_EQ(c[2], -2.0f); // 4 - 6
  EXPECT_EQ(c[3], 13.0f); // 8 + 5
}

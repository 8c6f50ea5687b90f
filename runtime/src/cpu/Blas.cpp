//===- Blas.cpp - OpenBLAS loaded at first use ----------------------------===//
//
// See Blas.h: the core type is chosen by instruction set before OpenBLAS
// initializes, and OpenBLAS runs one thread (the kernels thread with the
// runtime's own pool, ThreadPool.h).
//
//===----------------------------------------------------------------------===//
#include "cpu/Blas.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace kiln::rt::cpu {
namespace {

using SgemmFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, int,
                         int, int, float, const float *, int, const float *,
                         int, float, float *, int);

using DsyrkFn = void (*)(CBLAS_ORDER, CBLAS_UPLO, CBLAS_TRANSPOSE, int, int,
                        double, const double *, int, double, double *, int);

struct Blas {
  SgemmFn sgemm = nullptr;
  DsyrkFn dsyrk = nullptr;
  const char *(*coreName)() = nullptr;
};

/// OpenBLAS's core type for this CPU's instruction set, or nullptr to leave
/// the choice to OpenBLAS.
const char *coreTypeForIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return "Haswell";
  return nullptr;
}

[[noreturn]] void fatal(const char *what, const char *detail) {
  std::fprintf(stderr, "kiln runtime: %s: %s\n", what, detail ? detail : "");
  std::abort();
}

const Blas &blas() {
  static Blas b;
  static std::once_flag once;
  std::call_once(once, [] {
    if (!std::getenv("OPENBLAS_CORETYPE"))
      if (const char *core = coreTypeForIsa())
        ::setenv("OPENBLAS_CORETYPE", core, /*overwrite=*/0);
    void *lib = ::dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      fatal("cannot load OpenBLAS (libopenblas.so.0)", ::dlerror());
    b.sgemm = reinterpret_cast<SgemmFn>(::dlsym(lib, "cblas_sgemm"));
    b.dsyrk = reinterpret_cast<DsyrkFn>(::dlsym(lib, "cblas_dsyrk"));
    b.coreName =
        reinterpret_cast<const char *(*)()>(::dlsym(lib, "openblas_get_corename"));
    auto setThreads =
        reinterpret_cast<void (*)(int)>(::dlsym(lib, "openblas_set_num_threads"));
    if (!b.sgemm || !b.dsyrk || !setThreads)
      fatal("libopenblas.so.0 lacks cblas_sgemm, cblas_dsyrk or "
            "openblas_set_num_threads",
            ::dlerror());
    setThreads(1);
  });
  return b;
}

} // namespace

void sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE transA, CBLAS_TRANSPOSE transB,
           int m, int n, int k, float alpha, const float *a, int lda,
           const float *b, int ldb, float beta, float *c, int ldc) {
  blas().sgemm(order, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c,
               ldc);
}

void dsyrk(CBLAS_ORDER order, CBLAS_UPLO uplo, CBLAS_TRANSPOSE trans, int n,
           int k, double alpha, const double *a, int lda, double beta,
           double *c, int ldc) {
  blas().dsyrk(order, uplo, trans, n, k, alpha, a, lda, beta, c, ldc);
}

const char *blasCoreName() {
  const Blas &b = blas();
  return b.coreName ? b.coreName() : "unknown";
}

} // namespace kiln::rt::cpu

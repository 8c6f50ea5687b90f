//===- Observe.cpp - The calibration observer kernel ------------*- C++ -*-===//
//
// kiln_k_observe (kernel_abi.h): emitted for kiln.observe, which
// kiln-insert-observers places on the inputs of the linear layers of a
// calibration artifact (kiln-calibrate). It computes nothing: it hands the
// activation to the observer registered on the session whose step is
// running, found through the step's execution context.
//
//===----------------------------------------------------------------------===//
#include "cpu/Observe.h"
#include "kiln_rt/kernel_abi.h"

extern "C" void kiln_k_observe(kiln_exec_ctx *ctx, const float *x, int64_t rows,
                               int64_t cols, int64_t tap) {
  const auto *hook = static_cast<const kiln::rt::ObserverHook *>(ctx->runtime);
  if (hook && hook->fn && rows > 0)
    hook->fn(hook->user, tap, x, rows, cols);
}

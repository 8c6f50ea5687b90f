//===- Executor.cpp - Defaults of the executor interface ----------*- C++ -*-===//
//
// The out-of-line members of Executor (its key functions: the vtable and
// type info live here), kept apart from any one executor so that code that
// only holds an Executor (the artifact loader, its fuzz target) links
// without the CPU kernels.
//
//===----------------------------------------------------------------------===//
#include "session/Executor.h"

namespace kiln::rt {

Status Executor::sample(float, int32_t, float, float, int32_t &) {
  return unimplemented("this executor does not sample on the device");
}

Status Executor::verify(const int32_t *, int64_t, int64_t, float *) {
  return unimplemented("this executor has no verify step (speculative "
                       "decoding)");
}

Status Executor::setObserver(kiln_rt_observer_fn, void *) {
  return unimplemented("calibration observers run on the cpu target only");
}

} // namespace kiln::rt

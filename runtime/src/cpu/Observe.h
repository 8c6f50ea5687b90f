//===- Observe.h - Route kiln_k_observe to the observer ---------*- C++ -*-===//
//
// kiln_exec_ctx::runtime of a CPU step points at the executor's
// ObserverHook; kiln_k_observe (Observe.cpp) reads it. No global state: the
// context of the running step names the session.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_CPU_OBSERVE_H
#define KILN_RUNTIME_CPU_OBSERVE_H

#include "kiln_rt/api.h"

namespace kiln::rt {

/// The calibration observer of one session (api.h
/// kiln_rt_session_set_observer); `fn` null means none.
struct ObserverHook {
  kiln_rt_observer_fn fn = nullptr;
  void *user = nullptr;
};

} // namespace kiln::rt

#endif // KILN_RUNTIME_CPU_OBSERVE_H

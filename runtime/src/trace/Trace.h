//===- Trace.h - Kernel and step events of a traced session -----*- C++ -*-===//
//
// The recorder behind kiln_exec_ctx::trace (kernel_abi.h) and the api.h
// trace calls: a bounded list of events, one per kernel call of the emitted
// code and one per prefill / decode step of the session. Events keep
// pointers to the compiler's call-site descriptions (kiln_trace_site, static
// data of model.so), valid while the artifact is open.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_TRACE_TRACE_H
#define KILN_RUNTIME_TRACE_TRACE_H

#include "kiln_rt/kernel_abi.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::rt {

/// One recorded event: a kernel call (`site` set) or a session step.
struct TraceEvent {
  const kiln_trace_site *site = nullptr; ///< null for a step
  const char *step = nullptr;            ///< "prefill" / "decode" for a step
  uint64_t startNs = 0, durNs = 0;       ///< kiln_trace_clock() nanoseconds
  int64_t tokens = 0, pos = 0;           ///< the call's n and pos
  uint32_t tid = 0;                      ///< OS thread id of the caller
};

/// Cost of one call of `site` for `n` tokens at position `pos` (the model of
/// kernel_abi.h kiln_trace_site): bytes moved and floating-point operations.
void traceCost(const kiln_trace_site &site, int64_t n, int64_t pos,
               uint64_t &bytes, uint64_t &flops);

/// OS thread id of the calling thread (gettid).
uint32_t traceThreadId();

class TraceRecorder {
public:
  /// At most this many events are kept (about 64 bytes each); later ones
  /// are counted in dropped().
  static constexpr size_t kMaxEvents = size_t(1) << 22;

  void add(const TraceEvent &e) {
    if (events_.size() < kMaxEvents)
      events_.push_back(e);
    else
      ++dropped_;
  }
  const std::vector<TraceEvent> &events() const { return events_; }
  uint64_t dropped() const { return dropped_; }
  void clear() {
    events_.clear();
    dropped_ = 0;
  }

private:
  std::vector<TraceEvent> events_;
  uint64_t dropped_ = 0;
};

} // namespace kiln::rt

#endif // KILN_RUNTIME_TRACE_TRACE_H

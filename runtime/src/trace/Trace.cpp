//===- Trace.cpp - Kernel and step events of a traced session ---*- C++ -*-===//
#include "trace/Trace.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

namespace kiln::rt {

void traceCost(const kiln_trace_site &site, int64_t n, int64_t pos,
               uint64_t &bytes, uint64_t &flops) {
  int64_t rows = site.per_token ? std::max<int64_t>(n, 0) : 0;
  int64_t window = site.window > 0 ? site.window : INT64_MAX;
  int64_t kvRows = 0, attended = 0;
  if (site.kv_bytes_per_pos || site.flops_per_pos) {
    int64_t end = pos + std::max<int64_t>(n, 0);
    kvRows = std::min(end, window);
    // sum over i < n of min(pos + i + 1, window): the positions up to the
    // window grow by one per token, the rest are capped.
    for (int64_t i = 0; i < n; ++i)
      attended += std::min(pos + i + 1, window);
  }
  bytes = uint64_t(site.bytes_fixed + site.bytes_per_token * rows +
                   site.kv_bytes_per_pos * kvRows);
  flops = uint64_t(site.flops_fixed + site.flops_per_token * rows +
                   site.flops_per_pos * attended);
}

uint32_t traceThreadId() {
  static thread_local uint32_t id = uint32_t(syscall(SYS_gettid));
  return id;
}

} // namespace kiln::rt

extern "C" uint64_t kiln_trace_clock(void) {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

extern "C" void kiln_trace_kernel(kiln_exec_ctx *ctx,
                                  const kiln_trace_site *site,
                                  uint64_t start_ns, int64_t n, int64_t pos) {
  auto *recorder = static_cast<kiln::rt::TraceRecorder *>(ctx->trace);
  if (!recorder || !site)
    return;
  kiln::rt::TraceEvent e;
  e.site = site;
  e.startNs = start_ns;
  uint64_t now = kiln_trace_clock();
  e.durNs = now > start_ns ? now - start_ns : 0;
  e.tokens = n;
  e.pos = pos;
  e.tid = kiln::rt::traceThreadId();
  recorder->add(e);
}

//===- Trace.h - --trace FILE.json and kiln-bench --profile -----*- C++ -*-===//
//
// The tools' side of tracing (api.h kiln_rt_session_set_trace): spans of
// the tool's own work (sampling, detokenizing) and the runtime's step and
// kernel events, written as Chrome trace-event JSON (the "JSON Object
// Format" of the Trace Event Format document; opens in Perfetto and
// chrome://tracing): one complete ("ph": "X") event per kernel call with its
// op kind, IR location, bytes and FLOPs in "args", one lane per OS thread.
// Also the per-op-kind profile table of kiln-bench --profile.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TOOLS_COMMON_TRACE_H
#define KILN_TOOLS_COMMON_TRACE_H

#include "kiln_rt/api.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::tool {

/// A recorded event, owned strings (the runtime's point into the artifact).
struct TraceRecord {
  std::string name, kind, loc, category; ///< category: "kernel", "step", "tool"
  uint64_t startNs = 0, durNs = 0, bytes = 0, flops = 0;
  int64_t tokens = 0, pos = 0;
  uint32_t tid = 0;
};

/// (flag, path) pairs of a tool's inputs (SafeOutput.h
/// checkOutputIsNotAnInput): the trace never overwrites one of them or a
/// file inside an input directory (the artifact).
using ToolInputs = llvm::ArrayRef<std::pair<llvm::StringRef, llvm::StringRef>>;

class Trace {
public:
  /// Most events kept (runtime and tool events together, about 150 bytes
  /// each in memory); later ones are counted as dropped.
  static constexpr size_t kMaxRecords = size_t(1) << 22;

  /// `path` empty: tracing is off and every call below does nothing, unless
  /// `given` (the flag was passed with an empty value: checkPath refuses).
  explicit Trace(std::string path, bool given = false);

  /// Events are recorded (to a file, or in memory for kiln-bench
  /// --profile).
  bool enabled() const { return !path_.empty() || inMemory_; }

  /// Records events without a file (records() only; write() does nothing).
  void recordInMemory() {
    inMemory_ = true;
    if (!originNs_)
      originNs_ = kiln_rt_clock_ns();
  }
  const std::string &path() const { return path_; }

  /// Refuses, before any work is done, what writeFileOutput (SafeOutput.h)
  /// would refuse (a directory, FIFO, socket, dangling link), a path that
  /// is one of `inputs` or inside one, an empty name, and a missing or
  /// unwritable directory. Errors name the flag and path.
  llvm::Error checkPath(ToolInputs inputs) const;

  /// Turns event recording on for `session` (its events are collected by
  /// collect()).
  void attach(kiln_rt_session_t *session);

  /// Moves the events recorded so far by `session` into this trace and
  /// clears them there (call before the session is released, and from time
  /// to time in long runs to keep the runtime's buffer small).
  void collect(kiln_rt_session_t *session);

  /// Records a span of the tool's own work ("sample", "detokenize";
  /// kiln-run --speculative: "draft" with the draft tokens made, "accept"
  /// with the draft tokens kept), with `tokens` in its args when nonzero.
  void span(llvm::StringRef name, uint64_t startNs, uint64_t endNs,
            int64_t tokens = 0);

  /// A span from construction to destruction (nothing when tracing is off).
  class Scope {
  public:
    Scope(Trace &t, const char *name) : trace(t), name(name) {
      if (trace.enabled())
        start = kiln_rt_clock_ns();
    }
    ~Scope() {
      if (trace.enabled())
        trace.span(name, start, kiln_rt_clock_ns());
    }

  private:
    Trace &trace;
    const char *name;
    uint64_t start = 0;
  };

  const std::vector<TraceRecord> &records() const { return records_; }
  uint64_t dropped() const { return dropped_; }

  /// Writes the JSON file with writeFileOutput (a temporary file beside the
  /// target renamed over it; a symbolic link's target is replaced, a
  /// character device written in place), after checking `inputs` again.
  llvm::Error write(llvm::StringRef tool, ToolInputs inputs) const;

private:
  void writeJson(llvm::raw_ostream &os, llvm::StringRef tool) const;

  std::string path_;
  bool given_ = false;
  bool inMemory_ = false;
  uint64_t originNs_ = 0;
  std::vector<TraceRecord> records_;
  uint64_t dropped_ = 0;
};

/// Per-op-kind totals of the kernel events in `records` whose step (the
/// enclosing "prefill" / "decode" event) is `step`: share of kernel time,
/// achieved GB/s and GFLOP/s, and their fraction of `bandwidth` (bytes/s)
/// and `peakFlops` (FLOP/s). Prints a table to `os`.
void printProfile(llvm::raw_ostream &os, const std::vector<TraceRecord> &records,
                  llvm::StringRef step, double bandwidth, double peakFlops);

} // namespace kiln::tool

#endif // KILN_TOOLS_COMMON_TRACE_H

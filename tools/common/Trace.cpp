//===- Trace.cpp - --trace FILE.json and kiln-bench --profile -------------===//

#include "tools/common/Trace.h"

#include "codegen/Artifact/SafeOutput.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

#include <unistd.h>

#include <algorithm>
#include <map>

namespace kiln::tool {

Trace::Trace(std::string path, bool given)
    : path_(std::move(path)), given_(given) {
  if (enabled())
    originNs_ = kiln_rt_clock_ns();
}

llvm::Error Trace::checkPath(ToolInputs inputs) const {
  if (path_.empty()) {
    if (given_)
      return llvm::createStringError(
          "--trace needs a file name (FILE.json)");
    return llvm::Error::success();
  }
  if (llvm::sys::fs::is_directory(path_))
    return llvm::createStringError("--trace " + path_ +
                                   ": is a directory (expected a file name "
                                   "for the JSON trace)");
  llvm::Expected<mlir::kiln::FileOutputTarget> target =
      mlir::kiln::checkFileOutput(path_);
  if (!target)
    return llvm::createStringError("--trace: " +
                                   llvm::toString(target.takeError()));
  if (llvm::Error e =
          mlir::kiln::checkOutputIsNotAnInput(path_, inputs, "--trace"))
    return e;
  if (target->kind == mlir::kiln::FileOutputTarget::File) {
    // The file is written beside its target and renamed: the directory
    // must exist and be writable.
    llvm::SmallString<256> dir(llvm::sys::path::parent_path(target->path));
    if (dir.empty())
      dir = ".";
    if (!llvm::sys::fs::is_directory(dir))
      return llvm::createStringError("--trace " + path_ + ": directory '" +
                                     dir + "' does not exist");
    if (::access(dir.c_str(), W_OK) != 0)
      return llvm::createStringError("--trace " + path_ + ": directory '" +
                                     dir + "' is not writable");
  }
  return llvm::Error::success();
}

void Trace::attach(kiln_rt_session_t *session) {
  if (!enabled() || !session)
    return;
  if (kiln_rt_status_t s = kiln_rt_session_set_trace(session, 1))
    kiln_rt_status_free(s); // only fails for a null session
}

void Trace::collect(kiln_rt_session_t *session) {
  if (!enabled() || !session)
    return;
  size_t n = kiln_rt_session_trace_size(session);
  size_t room = kMaxRecords - std::min(kMaxRecords, records_.size());
  if (n > room)
    dropped_ += n - room;
  n = std::min(n, room);
  records_.reserve(records_.size() + n);
  for (size_t i = 0; i < n; ++i) {
    kiln_rt_trace_event_t e;
    if (!kiln_rt_session_trace_event(session, i, &e))
      break;
    TraceRecord r;
    r.name = e.name;
    r.kind = e.kind;
    r.loc = e.loc;
    r.category = r.kind == "step" ? "step" : "kernel";
    r.startNs = e.start_ns;
    r.durNs = e.dur_ns;
    r.bytes = e.bytes;
    r.flops = e.flops;
    r.tokens = e.tokens;
    r.pos = e.pos;
    r.tid = e.tid;
    records_.push_back(std::move(r));
  }
  dropped_ += kiln_rt_session_trace_dropped(session);
  kiln_rt_session_trace_clear(session);
}

void Trace::span(llvm::StringRef name, uint64_t startNs, uint64_t endNs,
                 int64_t tokens) {
  if (!enabled())
    return;
  if (records_.size() >= kMaxRecords) {
    ++dropped_;
    return;
  }
  TraceRecord r;
  r.name = name.str();
  r.kind = "tool";
  r.category = "tool";
  r.startNs = startNs;
  r.durNs = endNs > startNs ? endNs - startNs : 0;
  r.tokens = tokens;
  r.tid = kiln_rt_thread_id();
  records_.push_back(std::move(r));
}

llvm::Error Trace::write(llvm::StringRef tool, ToolInputs inputs) const {
  if (path_.empty())
    return llvm::Error::success();
  if (llvm::Error e = checkPath(inputs))
    return e;
  if (dropped_)
    llvm::errs() << tool << ": note: --trace keeps " << kMaxRecords
                 << " events; " << dropped_ << " later ones were dropped\n";
  llvm::Error err = mlir::kiln::writeFileOutput(
      path_, [&](llvm::raw_ostream &os) -> llvm::Error {
        writeJson(os, tool);
        return llvm::Error::success();
      });
  if (err)
    return llvm::createStringError("--trace " + path_ + ": " +
                                   llvm::toString(std::move(err)));
  return llvm::Error::success();
}

void Trace::writeJson(llvm::raw_ostream &os, llvm::StringRef tool) const {
  llvm::json::OStream j(os);
  int64_t pid = int64_t(::getpid());
  auto us = [&](uint64_t ns) { return double(int64_t(ns - originNs_)) / 1000.0; };
  j.object([&] {
    j.attributeArray("traceEvents", [&] {
      // Lane names: the first thread seen is the tool's main thread.
      std::map<uint32_t, std::string> lanes;
      for (const TraceRecord &r : records_)
        lanes.emplace(r.tid, lanes.empty() ? "main" : "worker");
      j.object([&] {
        j.attribute("name", "process_name");
        j.attribute("ph", "M");
        j.attribute("pid", pid);
        j.attribute("tid", 0);
        j.attributeObject("args", [&] { j.attribute("name", tool); });
      });
      for (const auto &[tid, lane] : lanes)
        j.object([&] {
          j.attribute("name", "thread_name");
          j.attribute("ph", "M");
          j.attribute("pid", pid);
          j.attribute("tid", int64_t(tid));
          j.attributeObject("args", [&, &lane = lane] {
            j.attribute("name", lane + " (" + std::to_string(tid) + ")");
          });
        });
      for (const TraceRecord &r : records_)
        j.object([&] {
          j.attribute("name", r.name);
          j.attribute("cat", r.category);
          j.attribute("ph", "X");
          j.attribute("ts", us(r.startNs));
          j.attribute("dur", double(r.durNs) / 1000.0);
          j.attribute("pid", pid);
          j.attribute("tid", int64_t(r.tid));
          j.attributeObject("args", [&] {
            if (r.category == "kernel") {
              j.attribute("kind", r.kind);
              j.attribute("loc", r.loc);
              j.attribute("bytes", int64_t(r.bytes));
              j.attribute("flops", int64_t(r.flops));
            }
            if (r.category != "tool") {
              j.attribute("tokens", r.tokens);
              j.attribute("pos", r.pos);
            } else if (r.tokens != 0) {
              j.attribute("tokens", r.tokens);
            }
          });
        });
    });
    j.attribute("displayTimeUnit", "ms");
    j.attributeObject("otherData", [&] {
      j.attribute("tool", tool);
      j.attribute("dropped_events", int64_t(dropped_));
    });
  });
  os << "\n";
}

void printProfile(llvm::raw_ostream &os,
                  const std::vector<TraceRecord> &records, llvm::StringRef step,
                  double bandwidth, double peakFlops) {
  struct Totals {
    uint64_t calls = 0, ns = 0, bytes = 0, flops = 0;
  };
  llvm::StringMap<Totals> byKind;
  Totals all;
  uint64_t stepNs = 0, steps = 0;
  // Kernels come before the step that ran them (api.h): keep them pending
  // until the step event says which it was.
  std::vector<const TraceRecord *> pending;
  for (const TraceRecord &r : records) {
    if (r.category == "kernel") {
      pending.push_back(&r);
      continue;
    }
    if (r.category != "step")
      continue;
    if (r.name == step) {
      stepNs += r.durNs;
      ++steps;
      for (const TraceRecord *k : pending) {
        Totals &t = byKind[k->kind];
        for (Totals *x : {&t, &all}) {
          ++x->calls;
          x->ns += k->durNs;
          x->bytes += k->bytes;
          x->flops += k->flops;
        }
      }
    }
    pending.clear();
  }
  os << llvm::formatv("{0} profile: {1} steps, {2:f3} ms in steps, {3:f3} ms "
                      "in kernels ({4:f1}%)\n",
                      step, steps, double(stepNs) / 1e6, double(all.ns) / 1e6,
                      stepNs ? 100.0 * double(all.ns) / double(stepNs) : 0.0);
  if (!all.calls)
    return;
  std::vector<std::pair<std::string, Totals>> rows;
  size_t kindWidth = 12; // fused kernels' kinds ("rms_norm+linear+swiglu")
  for (const auto &e : byKind) {
    rows.emplace_back(e.getKey().str(), e.getValue());
    kindWidth = std::max(kindWidth, e.getKey().size());
  }
  auto pad = [&](llvm::StringRef kind) {
    return kind.str() + std::string(kindWidth - std::min(kindWidth, kind.size()), ' ');
  };
  os << llvm::formatv("  {0} {1,8} {2,10} {3,7} {4,9} {5,7} {6,10} {7,7}\n",
                      pad("op kind"), "calls", "time ms", "share", "GB/s", "%bw",
                      "GFLOP/s", "%peak");
  std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) {
    return a.second.ns > b.second.ns;
  });
  rows.emplace_back("total", all);
  for (const auto &[kind, t] : rows) {
    double s = double(t.ns) / 1e9;
    double gbs = s > 0 ? double(t.bytes) / s / 1e9 : 0;
    double gflops = s > 0 ? double(t.flops) / s / 1e9 : 0;
    os << llvm::formatv(
        "  {0} {1,8} {2,10:f3} {3,6:f1}% {4,9:f2} {5,6:f1}% {6,10:f2} "
        "{7,6:f1}%\n",
        pad(kind), t.calls, s * 1e3, 100.0 * double(t.ns) / double(all.ns), gbs,
        bandwidth > 0 ? 100.0 * gbs * 1e9 / bandwidth : 0.0, gflops,
        peakFlops > 0 ? 100.0 * gflops * 1e9 / peakFlops : 0.0);
  }
}

} // namespace kiln::tool

//===- Session.cpp - One generation stream over an artifact -------*- C++ -*-===//
#include "session/Session.h"

#include "base/FiniteLogits.h"

#include <cmath>

namespace kiln::rt {

Session::~Session() = default;

Status Session::create(const Artifact &artifact, std::unique_ptr<Session> &out,
                       int64_t contextLength) {
  int64_t max = artifact.contextLength();
  if (contextLength < 0 || contextLength > max)
    return invalidArgument("context length " + std::to_string(contextLength) +
                           " is outside [1, " + std::to_string(max) +
                           "]: the artifact was compiled for at most " +
                           std::to_string(max) +
                           " positions (kiln-compile --max-seq-len)");
  std::unique_ptr<Session> s(new Session(artifact));
  s->ctx_ = contextLength ? contextLength : max;
  KILN_RT_RETURN_IF_ERROR(artifact.createExecutor(s->executor_));
  out = std::move(s);
  return Status::ok();
}

void Session::reset() {
  failed_ = executor_->reset(dirty_);
  dirty_ = false;
  pos_ = 0;
  hasLogits_ = false;
}

const float *Session::logits() const {
  return hasLogits_ && failed_.isOk() ? executor_->logits() : nullptr;
}

Status Session::check(const int32_t *tokens, int64_t n) const {
  if (!failed_.isOk())
    return Status(failed_.code(),
                  "session is unusable after an earlier error (reset it): " +
                      failed_.message());
  if (n < 1)
    return invalidArgument("no tokens to run (n = " + std::to_string(n) + ")");
  if (!tokens)
    return invalidArgument("token pointer is null");
  int64_t vocab = artifact_.manifest().vocabSize;
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return invalidArgument("token id " + std::to_string(tokens[i]) +
                             " (index " + std::to_string(i) +
                             ") is outside the vocabulary [0, " +
                             std::to_string(vocab) + ")");
  int64_t ctx = ctx_;
  if (pos_ + n > ctx)
    return outOfRange(std::to_string(n) + " tokens at position " +
                      std::to_string(pos_) + " exceed the " +
                      (ctx < artifact_.contextLength() ? "session's" : "model's") +
                      " context of " + std::to_string(ctx) + " tokens");
  return Status::ok();
}

Status Session::step(Status result, int64_t n) {
  dirty_ = true;
  if (!result.isOk()) {
    failed_ = result;
    hasLogits_ = false;
    return result;
  }
  pos_ += n;
  hasLogits_ = true;
  // Host logits are cheap to scan: a NaN or infinity means corrupted weights
  // or an overflow, and sampling from it would print garbage silently.
  if (!executor_->samplesOnDevice()) {
    Status finite = checkFiniteLogits(executor_->logits(),
                                      artifact_.manifest().vocabSize, pos_ - 1);
    if (!finite.isOk()) {
      failed_ = finite;
      hasLogits_ = false;
      return failed_;
    }
  }
  return Status::ok();
}

void Session::setTrace(bool enabled) {
  trace_ = enabled ? std::make_unique<TraceRecorder>() : nullptr;
  executor_->setTrace(trace_.get());
}

/// Records a step event (when tracing) around `run`.
template <typename F>
static Status traced(TraceRecorder *trace, const char *name, int64_t n,
                     int64_t pos, F run) {
  if (!trace)
    return run();
  TraceEvent e;
  e.step = name;
  e.startNs = kiln_trace_clock();
  Status s = run();
  uint64_t end = kiln_trace_clock();
  e.durNs = end > e.startNs ? end - e.startNs : 0;
  e.tokens = n;
  e.pos = pos;
  e.tid = traceThreadId();
  trace->add(e);
  return s;
}

Status Session::prefill(const int32_t *tokens, int64_t n) {
  KILN_RT_RETURN_IF_ERROR(check(tokens, n));
  return step(traced(trace_.get(), "prefill", n, pos_,
                     [&] { return executor_->prefill(tokens, n, pos_); }),
              n);
}

Status Session::verify(const int32_t *tokens, int64_t n, float *rows) {
  if (!artifact_.hasVerify())
    return unimplemented("the artifact has no verify entry point "
                         "(runtime.entry_points.verify): recompile it with "
                         "kiln-compile --speculative");
  if (!rows)
    return invalidArgument("verify: the logits buffer is null");
  KILN_RT_RETURN_IF_ERROR(check(tokens, n));
  return step(traced(trace_.get(), "verify", n, pos_,
                     [&] { return executor_->verify(tokens, n, pos_, rows); }),
              n);
}

Status Session::rollback(int64_t position) {
  if (!failed_.isOk())
    return Status(failed_.code(),
                  "session is unusable after an earlier error (reset it): " +
                      failed_.message());
  if (position < 0 || position > pos_)
    return invalidArgument("rollback to position " + std::to_string(position) +
                           ": expected 0 to the current position " +
                           std::to_string(pos_));
  pos_ = position;
  hasLogits_ = false;
  return Status::ok();
}

Status Session::decode(int32_t token) {
  KILN_RT_RETURN_IF_ERROR(check(&token, 1));
  return step(traced(trace_.get(), "decode", 1, pos_,
                     [&] { return executor_->decode(token, pos_); }),
              1);
}

} // namespace kiln::rt

//===- Session.h - One generation stream over an artifact ---------*- C++ -*-===//
//
// A Session owns the mutable state of one sequence through its Executor (the
// KV cache, the activation arena, the logits row; host or device memory) and
// the current position. It validates token ids and positions, drives the
// artifact's entry points, and knows nothing about the model's architecture.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_SESSION_SESSION_H
#define KILN_RUNTIME_SESSION_SESSION_H

#include "artifact/Artifact.h"
#include "session/Executor.h"
#include "trace/Trace.h"

#include <memory>
#include <vector>

namespace kiln::rt {

class Session {
public:
  ~Session();
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  /// CPU: a zeroed KV cache (runtime.kv_cache.bytes, anonymous mmap), a
  /// 64-byte aligned arena (runtime.arena_bytes) and float32[vocab] logits.
  /// CUDA: the same on the device, plus a stream and token/position buffers.
  /// `contextLength` 0: the artifact's; else 1 .. the artifact's (checked).
  static Status create(const Artifact &artifact, std::unique_ptr<Session> &out,
                       int64_t contextLength = 0);
  /// Positions this session may use: [0, contextLength()).
  int64_t contextLength() const { return ctx_; }

  /// Position 0 and a zeroed KV cache. A device error while zeroing is
  /// reported by the next prefill/decode.
  void reset();

  /// Appends tokens[0, n) through the prefill entry point in chunks of at
  /// most runtime.max_prefill_tokens. Fails without running anything if an id
  /// is outside [0, vocab) or position + n exceeds the context.
  Status prefill(const int32_t *tokens, int64_t n);
  /// Appends one token through the decode entry point (n = 1).
  Status decode(int32_t token);
  /// Speculative decoding's verify step: appends tokens[0, n) like prefill
  /// through the verify entry point and writes every row's logits to
  /// `rows` (host float32[n, vocab]; row i: the distribution after token
  /// i); logits() then holds the last row's. Errors as prefill, plus an
  /// artifact without the entry point (KILN_RT_UNIMPLEMENTED, naming
  /// kiln-compile --speculative) or a null `rows`.
  Status verify(const int32_t *tokens, int64_t n, float *rows);
  /// Moves the position back to `position` (0 <= position <= position()):
  /// the tokens after it are forgotten (rejected draft tokens); their KV
  /// rows are overwritten by the next step. Clears the logits.
  Status rollback(int64_t position);

  int64_t position() const { return pos_; }
  /// float32[vocab] logits of the last consumed token (host memory; copied
  /// back from the device for CUDA); nullptr before any or on device error.
  const float *logits() const;
  /// Logits exist (a step ran since creation or reset).
  bool hasLogits() const { return hasLogits_; }
  const Artifact &artifact() const { return artifact_; }
  Executor &executor() const { return *executor_; }

  /// Turns tracing on (a fresh, empty recorder) or off (events dropped).
  /// On: every following step is recorded as a "prefill" / "decode" event,
  /// and the CPU executor records each kernel call of it.
  void setTrace(bool enabled);
  /// The recorder, or null when tracing is off.
  TraceRecorder *trace() const { return trace_.get(); }

private:
  explicit Session(const Artifact &a) : artifact_(a) {}
  Status check(const int32_t *tokens, int64_t n) const;
  /// Runs a step; a failure leaves the session unusable (device state is
  /// unknown) until reset().
  Status step(Status result, int64_t n);

  const Artifact &artifact_;
  std::unique_ptr<Executor> executor_;
  int64_t pos_ = 0;
  int64_t ctx_ = 0;
  bool hasLogits_ = false;
  bool dirty_ = false;
  Status failed_; ///< sticky error of a failed step or reset
  std::unique_ptr<TraceRecorder> trace_;
};

} // namespace kiln::rt

#endif // KILN_RUNTIME_SESSION_SESSION_H

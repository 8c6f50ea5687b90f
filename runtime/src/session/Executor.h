//===- Executor.h - Where a session's steps run ------------------*- C++ -*-===//
//
// One interface, one implementation per target (IREE's HAL idea, thin on
// purpose): the Session validates token ids and positions and keeps the
// position; an Executor owns the per-sequence buffers (arena, KV cache,
// logits) and runs the artifact's entry points on them.
//   CPU  (session/CpuExecutor.cpp): host buffers, model.so called directly.
//   CUDA (cuda/CudaBackend.cpp): device buffers in libkiln_runtime_cuda.so,
//        reached through its C table (cuda/CudaExecutor.h).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_SESSION_EXECUTOR_H
#define KILN_RUNTIME_SESSION_EXECUTOR_H

#include "base/Status.h"
#include "kiln_rt/api.h"

#include <cstdint>
#include <memory>

namespace kiln::rt {

class Artifact;
class TraceRecorder;

class Executor {
public:
  virtual ~Executor() = default;

  /// Zeroes the KV cache. `dirty`: a step ran since the last reset.
  virtual Status reset(bool dirty) = 0;
  /// tokens[0, n) at positions [pos, pos + n) through the prefill entry point
  /// in chunks of at most runtime.max_prefill_tokens (ids already checked).
  virtual Status prefill(const int32_t *tokens, int64_t n, int64_t pos) = 0;
  /// One token at `pos` through the decode entry point (n = 1).
  virtual Status decode(int32_t token, int64_t pos) = 0;
  /// tokens[0, n) at [pos, pos + n) through the verify entry point (in
  /// chunks of at most runtime.max_prefill_tokens), every row's logits to
  /// `rows` (host float32[n, vocab]); logits() then holds the last row's.
  /// Default: unimplemented (the CPU executor has it).
  virtual Status verify(const int32_t *tokens, int64_t n, int64_t pos,
                        float *rows);
  /// Host float32[vocab] logits of the last step; nullptr if they cannot be
  /// read (device error). Valid until the next call.
  virtual const float *logits() = 0;

  /// True when sample() runs on the device (the caller then only draws the
  /// coin); false: the caller samples logits() on the host.
  virtual bool samplesOnDevice() const { return false; }
  /// Device sampling (cuda_abi.h kiln_cuda_sample): top_k 0 = off, top_p 1 =
  /// off, `coin` uniform in [0, 1).
  virtual Status sample(float temperature, int32_t topK, float topP,
                        float coin, int32_t &outToken);
  /// Calibration observer for kiln_k_observe (api.h
  /// kiln_rt_session_set_observer); fn null removes it. Only the CPU
  /// executor supports it.
  virtual Status setObserver(kiln_rt_observer_fn fn, void *user);
  /// Kernel events of the following steps go to `recorder` (null: off).
  /// Executors that cannot time their kernels on the host (CUDA: launches
  /// are asynchronous) ignore it; the session still records its steps.
  virtual void setTrace(TraceRecorder *recorder) { (void)recorder; }
};

/// Host arena (64-byte aligned), anonymous-mmap KV cache, logits vector.
Status createCpuExecutor(const Artifact &artifact,
                         std::unique_ptr<Executor> &out);

} // namespace kiln::rt

#endif // KILN_RUNTIME_SESSION_EXECUTOR_H

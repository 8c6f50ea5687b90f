//===- CpuExecutor.cpp - Sessions on the host ---------------------*- C++ -*-===//
//
// The CPU executor: model.so (compiled C++ calling kiln_k_* kernels) runs on
// host buffers. This is the pre-executor Session code, unchanged in behaviour.
//
//===----------------------------------------------------------------------===//
#include "artifact/Artifact.h"
#include "cpu/Observe.h"
#include "cpu/ThreadPool.h"
#include "session/Executor.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kiln::rt {

namespace {

class CpuExecutor final : public Executor {
public:
  explicit CpuExecutor(const Artifact &a) : artifact_(a) {}
  ~CpuExecutor() override {
    std::free(arena_);
    if (kv_)
      munmap(kv_, kvBytes_);
  }

  Status init() {
    const Manifest &m = artifact_.manifest();
    uint64_t arenaBytes = (m.arenaBytes + 63) / 64 * 64;
    arena_ = static_cast<uint8_t *>(
        std::aligned_alloc(64, arenaBytes ? arenaBytes : 64));
    if (!arena_)
      return Status(KILN_RT_RESOURCE_EXHAUSTED,
                    "cannot allocate the activation arena of " +
                        std::to_string(m.arenaBytes) + " bytes");
    // Anonymous pages are zero and page (hence 64-byte) aligned.
    kvBytes_ = m.kvBytes;
    void *kv = mmap(nullptr, m.kvBytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (kv == MAP_FAILED)
      return Status(KILN_RT_RESOURCE_EXHAUSTED,
                    "cannot allocate the KV cache of " +
                        std::to_string(m.kvBytes) + " bytes: " +
                        std::strerror(errno));
    kv_ = kv;
    logits_.assign(size_t(m.vocabSize), 0.0f);
    return Status::ok();
  }

  Status reset(bool dirty) override {
    // Give the written pages back; the kernel maps zero pages on next touch.
    if (dirty && madvise(kv_, kvBytes_, MADV_DONTNEED) != 0)
      std::memset(kv_, 0, kvBytes_);
    return Status::ok();
  }

  Status prefill(const int32_t *tokens, int64_t n, int64_t pos) override {
    int64_t chunk = artifact_.manifest().maxPrefillTokens;
    for (int64_t i = 0; i < n; i += chunk)
      run(artifact_.prefill(), tokens + i, std::min(chunk, n - i), pos + i);
    return Status::ok();
  }

  Status decode(int32_t token, int64_t pos) override {
    run(artifact_.decode(), &token, 1, pos);
    return Status::ok();
  }

  Status verify(const int32_t *tokens, int64_t n, int64_t pos,
                float *rows) override {
    const int64_t chunk = artifact_.manifest().maxPrefillTokens;
    const int64_t vocab = artifact_.manifest().vocabSize;
    for (int64_t i = 0; i < n; i += chunk)
      run(artifact_.verify(), tokens + i, std::min(chunk, n - i), pos + i,
          rows + i * vocab);
    std::copy(rows + (n - 1) * vocab, rows + n * vocab, logits_.begin());
    return Status::ok();
  }

  const float *logits() override { return logits_.data(); }

  void setTrace(TraceRecorder *recorder) override { trace_ = recorder; }

  Status setObserver(kiln_rt_observer_fn fn, void *user) override {
    observer_.fn = fn;
    observer_.user = user;
    return Status::ok();
  }

private:
  /// One entry point call; `logits` (default: the session's row) receives
  /// its logits ([n, vocab] for kiln_verify).
  void run(EntryPoint fn, const int32_t *tokens, int64_t n, int64_t pos,
           float *logits = nullptr) {
    cpu::StepScope step; // the pool's workers stay awake between kernels
    kiln_exec_ctx ctx{};
    ctx.arena = arena_;
    ctx.weights = artifact_.weights();
    ctx.kv = static_cast<float *>(kv_);
    ctx.tokens = tokens;
    ctx.logits = logits ? logits : logits_.data();
    ctx.runtime = &observer_; // read by kiln_k_observe (cpu/Observe.cpp)
    ctx.trace = trace_;       // read by KILN_TRACE_* (kernel_abi.h)
    ctx.comm = artifact_.group(); // read by kiln_k_all_reduce (comm/Comm.cpp)
    fn(&ctx, n, pos);
  }

  const Artifact &artifact_;
  uint8_t *arena_ = nullptr;
  void *kv_ = nullptr;
  uint64_t kvBytes_ = 0;
  std::vector<float> logits_;
  ObserverHook observer_;
  TraceRecorder *trace_ = nullptr;
};

} // namespace

Status createCpuExecutor(const Artifact &artifact,
                         std::unique_ptr<Executor> &out) {
  auto e = std::make_unique<CpuExecutor>(artifact);
  KILN_RT_RETURN_IF_ERROR(e->init());
  out = std::move(e);
  return Status::ok();
}

} // namespace kiln::rt

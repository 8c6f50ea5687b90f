//===- ThreadPool.h - The CPU kernels' persistent threads -------*- C++ -*-===//
//
// The CPU kernels parallelise over a pool of persistent worker threads
// instead of one OpenMP fork/join per kernel. The workers are created once
// (kiln_rt_set_threads) and, between the kernels of a step, wait for the
// next parallel loop by spinning briefly and then sleeping on a condition
// variable, so a decode step wakes them once and its kernels
// cost one post and one join each; outside a step they sleep at once.
//
// A parallel loop is cut into chunks whose boundaries depend on the loop
// alone, never on the thread count; threads claim chunks from a shared
// counter. So (1) a chunk computes the same numbers whichever thread runs
// it, and results are identical for any thread count, and (2) a worker the
// OS has descheduled (a machine oversubscribed by other processes) delays
// nothing: the caller claims the chunks the worker has not started. The
// caller waits only for chunks already running, so an oversubscribed
// machine degrades to about one thread's speed instead of collapsing onto
// the scheduler's time slices, as static partitions with spinning barriers
// do (the behaviour measured in docs/benchmarks.md).
//
// One loop runs at a time: a loop started while another thread's loop
// holds the pool, or from inside a chunk, runs its chunks on the calling
// thread (same boundaries, same results).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_CPU_THREADPOOL_H
#define KILN_RUNTIME_CPU_THREADPOOL_H

#include <cstdint>
#include <type_traits>
#include <utility>

namespace kiln::rt::cpu {

/// Chunk body: fn(env, begin, end) over items [begin, end).
using ChunkFn = void (*)(void *env, int64_t begin, int64_t end);

/// Sets the number of threads of the parallel loops, the calling thread
/// included (>= 1): workers are started or stopped to match.
void setPoolThreads(int n);

/// The number of threads of the parallel loops (the caller included).
int poolThreads();

/// Runs fn(env, b, e) for the chunks [b, e) = [k * grain, min(count, (k + 1)
/// * grain)) of [0, count), on the pool's threads when `parallel`, else on
/// the calling thread; returns when every chunk is done. grain >= 1.
void parallelChunks(int64_t count, int64_t grain, bool parallel, ChunkFn fn,
                    void *env);

/// A number identifying the parallel loop (parallelChunks call) whose chunk
/// the calling thread is running, unique within the process; 0 outside
/// chunks. A loop's input does not change while it runs, so a chunk may
/// reuse what an earlier chunk of the same loop derived from it on the same
/// thread (the int8-activation linears quantize their input once per thread
/// and loop this way).
uint64_t currentLoopId();

/// parallelChunks with a callable fn(begin, end).
template <class F>
void parallelFor(int64_t count, int64_t grain, bool parallel, F &&fn) {
  using Fn = std::remove_reference_t<F>;
  parallelChunks(
      count, grain, parallel,
      [](void *env, int64_t b, int64_t e) { (*static_cast<Fn *>(env))(b, e); },
      const_cast<void *>(static_cast<const void *>(&fn)));
}

/// The grain that cuts `count` items into at most kMaxChunks chunks, a
/// multiple of `align`: a function of the loop alone (see above).
inline constexpr int64_t kMaxChunks = 32;
inline int64_t chunkGrain(int64_t count, int64_t align) {
  if (align < 1)
    align = 1;
  int64_t g = (count + kMaxChunks - 1) / kMaxChunks;
  g = (g + align - 1) / align * align;
  return g < align ? align : g;
}

/// Marks a step (prefill / decode) in flight: between its loops the workers
/// spin before they sleep; outside steps they sleep at once. Nestable.
class StepScope {
public:
  StepScope();
  ~StepScope();
  StepScope(const StepScope &) = delete;
  StepScope &operator=(const StepScope &) = delete;
};

} // namespace kiln::rt::cpu

#endif // KILN_RUNTIME_CPU_THREADPOOL_H

//===- ThreadPoolTest.cpp - The CPU kernels' persistent threads ------------===//
//
// cpu/ThreadPool.h: every chunk runs exactly once with boundaries that do
// not depend on the thread count, loops inside chunks and loops started by
// two application threads at once run (inline) without deadlock, more
// threads than cores (an oversubscribed machine) finish, resizing
// between loops works, and currentLoopId names one loop in all its chunks.
//
//===----------------------------------------------------------------------===//
#include "cpu/ThreadPool.h"
#include "kiln_rt/api.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace cpu = kiln::rt::cpu;

namespace {

/// Restores the thread count the process started with.
class ThreadPoolTest : public ::testing::Test {
protected:
  void SetUp() override { saved_ = cpu::poolThreads(); }
  void TearDown() override { cpu::setPoolThreads(saved_); }
  int saved_ = 1;
};

/// The chunks [b, e) one loop ran, sorted.
std::set<std::pair<int64_t, int64_t>> chunksOf(int64_t count, int64_t grain) {
  std::mutex m;
  std::set<std::pair<int64_t, int64_t>> seen;
  std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
  cpu::parallelFor(count, grain, true, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      hits[size_t(i)].fetch_add(1);
    std::lock_guard<std::mutex> lock(m);
    seen.emplace(b, e);
  });
  for (int64_t i = 0; i < count; ++i)
    EXPECT_EQ(hits[size_t(i)].load(), 1) << "item " << i;
  return seen;
}

TEST_F(ThreadPoolTest, ChunksCoverOnceAndDoNotDependOnThreads) {
  for (int64_t count : {1, 5, 16, 17, 1000, 4097}) {
    const int64_t grain = cpu::chunkGrain(count, 16);
    EXPECT_EQ(grain % 16, 0);
    EXPECT_LE((count + grain - 1) / grain, cpu::kMaxChunks);
    cpu::setPoolThreads(1);
    auto one = chunksOf(count, grain);
    for (int threads : {2, 3, 7}) {
      cpu::setPoolThreads(threads);
      EXPECT_EQ(chunksOf(count, grain), one)
          << count << " items, " << threads << " threads";
    }
  }
}

TEST_F(ThreadPoolTest, UsesTheWorkers) {
  cpu::setPoolThreads(3);
  EXPECT_EQ(cpu::poolThreads(), 3);
  EXPECT_EQ(kiln_rt_threads(), 3);
  // Chunks that wait for each other can only finish on two threads or more.
  std::atomic<int> arrived{0};
  std::atomic<bool> together{false};
  cpu::parallelFor(2, 1, true, [&](int64_t, int64_t) {
    arrived.fetch_add(1);
    for (int i = 0; i < 2000000 && arrived.load() < 2; ++i)
      std::this_thread::yield();
    if (arrived.load() == 2)
      together = true;
  });
  EXPECT_TRUE(together.load());
}

TEST_F(ThreadPoolTest, NestedAndConcurrentLoopsRunInline) {
  cpu::setPoolThreads(2);
  std::atomic<int64_t> sum{0};
  auto work = [&] {
    for (int rep = 0; rep < 200; ++rep)
      cpu::parallelFor(64, 4, true, [&](int64_t b, int64_t e) {
        // A loop inside a chunk runs on this thread.
        cpu::parallelFor(e - b, 1, true, [&](int64_t ib, int64_t ie) {
          sum.fetch_add(ie - ib);
        });
      });
  };
  std::thread other(work);
  work();
  other.join();
  EXPECT_EQ(sum.load(), 2 * 200 * 64);
}

TEST_F(ThreadPoolTest, OversubscribedAndSerialLoopsFinish) {
  cpu::setPoolThreads(16); // far more threads than this machine's cores
  std::atomic<int64_t> sum{0};
  {
    cpu::StepScope step;
    for (int rep = 0; rep < 500; ++rep)
      cpu::parallelFor(100, 3, rep % 2 == 0,
                       [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
  }
  EXPECT_EQ(sum.load(), 500 * 100);
  cpu::parallelFor(0, 1, true, [&](int64_t, int64_t) { FAIL(); });
}

TEST_F(ThreadPoolTest, LoopIdsNameOneLoopEach) {
  cpu::setPoolThreads(2);
  EXPECT_EQ(cpu::currentLoopId(), 0u);
  for (bool parallel : {true, false}) {
    std::mutex m;
    std::set<uint64_t> ids, nested;
    cpu::parallelFor(8, 1, parallel, [&](int64_t, int64_t) {
      const uint64_t outer = cpu::currentLoopId();
      uint64_t inner = 0;
      cpu::parallelFor(2, 1, true,
                       [&](int64_t, int64_t) { inner = cpu::currentLoopId(); });
      std::lock_guard<std::mutex> lock(m);
      ids.insert(outer);
      nested.insert(inner);
      EXPECT_EQ(cpu::currentLoopId(), outer); // restored after the inner loop
    });
    ASSERT_EQ(ids.size(), 1u);
    EXPECT_NE(*ids.begin(), 0u);
    EXPECT_EQ(nested.size(), 8u); // a new id per inner loop
    EXPECT_EQ(nested.count(*ids.begin()), 0u);
  }
  EXPECT_EQ(cpu::currentLoopId(), 0u);
}

} // namespace

//===- SchedulerTest.cpp - continuous batching over the paged KV cache ----===//
//
// serve::Scheduler with a fake model over a simulated paged cache: each
// step writes every scheduled token into its pool slot (through the
// sequence's block table, after the step's copy-on-write copies) and
// samples the next token as a hash of the sequence's cached rows read back
// through the table. So a wrong block table, a prefix-cache hit on the
// wrong rows or a missed copy changes the tokens. Checked: the tokens equal
// an unconstrained run (a huge cache, whole prompts) under small caches
// (preemption by recompute), small token budgets (chunked prefill), shared
// prefixes (prefix caching) and cancellation; no block leaks; bad requests
// are refused with a message naming the problem.
//
//===----------------------------------------------------------------------===//
#include "serve/Scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace kv = kiln::rt::kv;
namespace serve = kiln::rt::serve;

namespace {

/// The fake model and its paged "KV cache": one int32 per position.
struct FakeEngine {
  kv::BlockManager blocks;
  serve::Scheduler scheduler;
  std::vector<int32_t> pool;
  int64_t steps = 0, maxStepTokens = 0;
  /// Speculative decoding: before each step every known sequence gets a
  /// draft of up to `draftMax` tokens, the model's true continuation (the
  /// hash of its tokens) with each token corrupted with probability 0.3.
  int64_t draftMax = 0;
  std::vector<serve::SequenceId> ids;
  std::mt19937 draftRng{17};
  int64_t drafted = 0, acceptedDrafts = 0;

  FakeEngine(int32_t numBlocks, int32_t blockTokens, bool caching,
             serve::SchedulerConfig config)
      : blocks(numBlocks, blockTokens, caching), scheduler(blocks, config),
        pool(size_t(numBlocks) * size_t(blockTokens), -1) {}

  static int32_t next(const std::vector<int32_t> &tokens) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t t : tokens)
      h = (h ^ uint64_t(uint32_t(t))) * 1099511628211ull;
    return int32_t(h % 1000);
  }

  void proposeDrafts() {
    for (serve::SequenceId id : ids) {
      std::vector<int32_t> toks = scheduler.tokens(id);
      if (toks.empty())
        continue;
      std::vector<int32_t> draft;
      const int64_t k = int64_t(draftRng() % uint32_t(draftMax + 1));
      for (int64_t i = 0; i < k; ++i) {
        int32_t t = next(toks);
        toks.push_back(t);
        if (draftRng() % 10 < 3)
          t = (t + 1) % 1000; // a wrong draft token
        draft.push_back(t);
      }
      scheduler.setDraft(id, draft);
    }
  }

  int64_t slot(serve::SequenceId id, int64_t p) const {
    const auto &t = blocks.blockTable(id);
    const int64_t B = blocks.blockTokens();
    return int64_t(t[size_t(p / B)]) * B + p % B;
  }

  /// One step; returns the finished sequences.
  std::vector<serve::Finished> step() {
    if (draftMax > 0)
      proposeDrafts();
    serve::StepPlan plan = scheduler.schedule();
    maxStepTokens = std::max(maxStepTokens, plan.tokens());
    const int64_t B = blocks.blockTokens();
    std::vector<int32_t> sampled;
    std::vector<std::vector<int32_t>> accepted;
    for (const serve::Chunk &c : plan.chunks) {
      if (c.copy.needed())
        std::copy_n(pool.begin() + c.copy.src * B, B,
                    pool.begin() + c.copy.dst * B);
      const auto &toks = scheduler.tokens(c.id);
      const int64_t known = c.count - int64_t(c.draft.size());
      for (int64_t p = c.start; p < c.start + c.count; ++p)
        pool[size_t(slot(c.id, p))] =
            p - c.start < known ? toks[size_t(p)]
                                : c.draft[size_t(p - c.start - known)];
      if (!c.samples)
        continue;
      // The next token after rows [0, end) from what the cache holds; a
      // draft token stands if it is that token for its row.
      auto predict = [&](int64_t end) {
        std::vector<int32_t> rows;
        for (int64_t p = 0; p < end; ++p)
          rows.push_back(pool[size_t(slot(c.id, p))]);
        return next(rows);
      };
      accepted.emplace_back();
      int64_t end = c.start + known;
      size_t i = 0;
      for (; i < c.draft.size(); ++i, ++end) {
        if (c.draft[i] != predict(end))
          break;
        accepted.back().push_back(c.draft[i]);
      }
      drafted += int64_t(c.draft.size());
      acceptedDrafts += int64_t(i);
      sampled.push_back(predict(end));
    }
    ++steps;
    std::vector<serve::Finished> done =
        scheduler.complete(plan, sampled, &accepted);
    // A sequence holds slots for its known tokens at most: a rejected
    // draft's slots (and blocks) are gone.
    for (serve::SequenceId id : ids)
      if (blocks.contains(id))
        EXPECT_LE(blocks.tokens(id), int64_t(scheduler.tokens(id).size()))
            << "sequence " << id << " keeps rejected draft slots";
    // Rows of blocks nobody holds and the prefix cache does not name are
    // garbage: poison them, so that reading them changes the tokens.
    for (int32_t b = 0; b < blocks.numBlocks(); ++b)
      if (blocks.refCount(b) == 0 && !blocks.isCached(b))
        std::fill_n(pool.begin() + int64_t(b) * B, B, -7);
    return done;
  }

  /// Runs until idle (bounded); the outputs by id.
  std::map<serve::SequenceId, serve::Finished> drain() {
    std::map<serve::SequenceId, serve::Finished> out;
    for (int i = 0; i < 100000 && !scheduler.idle(); ++i)
      for (serve::Finished &f : step())
        out.emplace(f.id, std::move(f));
    EXPECT_TRUE(scheduler.idle()) << "did not finish";
    return out;
  }
};

std::vector<serve::Request> workload(std::mt19937 &rng, int count,
                                     bool sharedPrefix) {
  std::vector<int32_t> system(37);
  for (int32_t &t : system)
    t = int32_t(rng() % 1000);
  std::vector<serve::Request> rs;
  for (int i = 0; i < count; ++i) {
    serve::Request r;
    r.id = 100 + i;
    if (sharedPrefix)
      r.prompt = system;
    for (int k = 1 + int(rng() % 30); k > 0; --k)
      r.prompt.push_back(int32_t(rng() % 1000));
    r.maxTokens = 1 + int64_t(rng() % 25);
    rs.push_back(r);
  }
  return rs;
}

std::map<serve::SequenceId, serve::Finished>
run(const std::vector<serve::Request> &rs, int32_t numBlocks, int32_t B,
    bool caching, serve::SchedulerConfig config, int64_t *preemptions,
    int64_t *hitTokens, int64_t draftMax = 0, int64_t *accepted = nullptr) {
  FakeEngine e(numBlocks, B, caching, config);
  e.draftMax = draftMax;
  for (const serve::Request &r : rs) {
    EXPECT_TRUE(e.scheduler.add(r).isOk());
    e.ids.push_back(r.id);
  }
  auto out = e.drain();
  EXPECT_EQ(e.blocks.numAvailable(), e.blocks.numBlocks()) << "blocks leaked";
  EXPECT_LE(e.maxStepTokens, config.tokenBudget);
  if (preemptions)
    *preemptions = e.scheduler.numPreemptions();
  if (hitTokens)
    *hitTokens = e.blocks.stats().hitTokens;
  if (accepted)
    *accepted = e.acceptedDrafts;
  return out;
}

void expectSameOutputs(const std::map<serve::SequenceId, serve::Finished> &a,
                       const std::map<serve::SequenceId, serve::Finished> &b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto &[id, f] : a) {
    auto it = b.find(id);
    ASSERT_NE(it, b.end()) << id;
    EXPECT_EQ(f.output, it->second.output) << "sequence " << id;
    EXPECT_EQ(int(f.reason), int(it->second.reason)) << "sequence " << id;
  }
}

TEST(Scheduler, ConstrainedRunsGiveTheUnconstrainedTokens) {
  std::mt19937 rng(3);
  for (bool shared : {false, true}) {
    auto rs = workload(rng, 24, shared);
    serve::SchedulerConfig big{64, 4096, 256};
    auto reference = run(rs, 4096, 16, false, big, nullptr, nullptr);
    for (const auto &[id, f] : reference)
      EXPECT_EQ(int64_t(f.output.size()),
                rs[size_t(id - 100)].maxTokens); // no stop tokens: Length
    // Small budgets (chunked prefill), small caches (preemption), block
    // sizes 1 / 16, prefix caching on and off.
    for (int32_t B : {1, 16})
      for (bool caching : {false, true})
        for (auto [blocks, budget, batch] :
             {std::tuple<int32_t, int64_t, int64_t>{1024, 7, 4},
              {12 * 16 / B + 2, 64, 8},
              {200 * 16 / B / 16, 32, 16}}) {
          int64_t preemptions = 0, hits = 0;
          auto out = run(rs, blocks, B, caching,
                         serve::SchedulerConfig{batch, budget, 256},
                         &preemptions, &hits);
          SCOPED_TRACE("B " + std::to_string(B) + " blocks " +
                       std::to_string(blocks) + " budget " +
                       std::to_string(budget));
          expectSameOutputs(reference, out);
          if (caching && shared && B == 16)
            EXPECT_GT(hits, 0);
        }
  }
}

// Speculative decoding: drafts (right or wrong) ride on the decode rows,
// the accepted prefix is kept and the rest's blocks released; the tokens
// equal the plain run's under small caches (preemption), small budgets,
// block sizes 1 / 4 / 16 and prefix caching, stop tokens included, and no
// block leaks (run() checks).
TEST(Scheduler, SpeculativeDraftsGiveThePlainTokens) {
  std::mt19937 rng(9);
  for (bool shared : {false, true}) {
    auto rs = workload(rng, 16, shared);
    for (size_t i = 0; i < rs.size(); i += 3)
      rs[i].stopTokens = {int32_t(i % 1000), 7, 11, 13}; // some stop early
    serve::SchedulerConfig big{64, 4096, 256};
    auto reference = run(rs, 4096, 16, false, big, nullptr, nullptr);
    for (int32_t B : {1, 4, 16})
      for (bool caching : {false, true})
        for (auto [blocks, budget, batch] :
             {std::tuple<int32_t, int64_t, int64_t>{1024, 9, 4},
              {14 * 16 / B + 3, 64, 8},
              {4096, 4096, 64}}) {
          int64_t accepted = 0;
          SCOPED_TRACE("B " + std::to_string(B) + " blocks " +
                       std::to_string(blocks) + " budget " +
                       std::to_string(budget));
          auto out = run(rs, blocks, B, caching,
                         serve::SchedulerConfig{batch, budget, 256}, nullptr,
                         nullptr, 5, &accepted);
          expectSameOutputs(reference, out);
          EXPECT_GT(accepted, 0);
        }
  }
}

TEST(Scheduler, PreemptsWhenTheCacheIsFull) {
  std::mt19937 rng(4);
  auto rs = workload(rng, 16, false);
  for (auto &r : rs)
    r.maxTokens = 24;
  serve::SchedulerConfig big{64, 4096, 256};
  auto reference = run(rs, 4096, 4, false, big, nullptr, nullptr);
  int64_t preemptions = 0;
  // 40 blocks of 4: every sequence fits alone, not all together.
  auto out = run(rs, 40, 4, true, serve::SchedulerConfig{16, 256, 256},
                 &preemptions, nullptr);
  expectSameOutputs(reference, out);
  EXPECT_GT(preemptions, 0);
}

TEST(Scheduler, StopTokensAndCancellation) {
  FakeEngine e(64, 4, true, serve::SchedulerConfig{8, 64, 128});
  serve::Request a{1, {5, 6, 7}, 50, {}};
  serve::Request b{2, {8, 9}, 50, {}};
  serve::Request c{3, {1, 2, 3, 4, 5}, 50, {}};
  ASSERT_TRUE(e.scheduler.add(a).isOk());
  ASSERT_TRUE(e.scheduler.add(b).isOk());
  ASSERT_TRUE(e.scheduler.add(c).isOk());
  e.step(); // prefills
  e.step();
  const int64_t before = e.blocks.numAvailable();
  e.scheduler.cancel(2); // blocks back at once
  EXPECT_GT(e.blocks.numAvailable(), before);
  e.scheduler.cancel(2); // twice: ignored
  std::vector<serve::Finished> f = e.step();
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f.front().id, 2);
  EXPECT_EQ(int(f.front().reason), int(serve::FinishReason::Cancelled));
  EXPECT_EQ(f.front().output.size(), 2u);
  // A stop token ends a sequence (and is part of its output).
  serve::Request d{4, {5, 6, 7}, 50, {}};
  const std::vector<int32_t> first = [&] {
    FakeEngine probe(64, 4, true, serve::SchedulerConfig{8, 64, 128});
    EXPECT_TRUE(probe.scheduler.add(d).isOk());
    return probe.drain().at(4).output;
  }();
  d.id = 5;
  d.stopTokens = {first[2]};
  ASSERT_TRUE(e.scheduler.add(d).isOk());
  auto out = e.drain();
  ASSERT_TRUE(out.count(5));
  EXPECT_EQ(int(out.at(5).reason), int(serve::FinishReason::Stop));
  EXPECT_EQ(out.at(5).output,
            std::vector<int32_t>(first.begin(), first.begin() + 3));
  EXPECT_EQ(e.blocks.numAvailable(), e.blocks.numBlocks());
}

TEST(Scheduler, RefusesBadRequests) {
  kv::BlockManager blocks(8, 4, true);
  serve::Scheduler s(blocks, serve::SchedulerConfig{4, 64, 20});
  auto message = [&](serve::Request r) { return s.add(r).message(); };
  EXPECT_EQ(message({1, {}, 4, {}}), "request 1: the prompt has no tokens");
  EXPECT_EQ(message({1, {3}, 0, {}}),
            "request 1: max_tokens must be at least 1, got 0");
  EXPECT_EQ(message({1, std::vector<int32_t>(15, 3), 6, {}}),
            "request 1: 15 prompt tokens + max_tokens 6 exceed the context "
            "of 20 tokens");
  kv::BlockManager tiny(2, 4, true);
  serve::Scheduler t(tiny, serve::SchedulerConfig{4, 64, 20});
  EXPECT_EQ(t.add({1, std::vector<int32_t>(8, 3), 2, {}}).message(),
            "request 1: 10 tokens need more KV-cache blocks than the 2 of "
            "the whole cache");
  ASSERT_TRUE(s.add({1, {3}, 2, {}}).isOk());
  EXPECT_EQ(message({1, {3}, 2, {}}), "request 1: the id is in use");
  EXPECT_EQ(s.numWaiting(), 1);
}

} // namespace

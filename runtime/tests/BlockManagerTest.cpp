//===- BlockManagerTest.cpp - paged KV-cache bookkeeping ------------------===//
//
// kv::BlockManager: block tables cover every token, allocation failures
// change nothing, forked sequences share blocks and copy a shared partial
// block on their first append, prefix caching reuses only committed full
// blocks of the same prefix and evicts least recently used first, and every
// block is free again when all sequences are released (no leak). A random
// workload checks the invariants against an independent recount.
//
//===----------------------------------------------------------------------===//
#include "kv/BlockManager.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace kv = kiln::rt::kv;

namespace {

/// Token ids from, from + 1, ..., n of them.
std::vector<int32_t> ids(int32_t n, int32_t from = 100) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

/// Every block's refCount equals the number of table entries naming it,
/// and the unreferenced ones add up to numAvailable().
void checkRefCounts(const kv::BlockManager &m,
                    const std::vector<kv::SequenceId> &live) {
  std::map<int32_t, int32_t> refs;
  for (kv::SequenceId id : live) {
    const auto &t = m.blockTable(id);
    EXPECT_EQ(int64_t(t.size()),
              (m.tokens(id) + m.blockTokens() - 1) / m.blockTokens())
        << "sequence " << id;
    std::set<int32_t> once(t.begin(), t.end());
    EXPECT_EQ(once.size(), t.size()) << "a block twice in one table";
    for (int32_t b : t)
      ++refs[b];
  }
  int32_t unreferenced = 0;
  for (int32_t b = 0; b < m.numBlocks(); ++b) {
    EXPECT_EQ(m.refCount(b), refs[b]) << "block " << b;
    unreferenced += refs[b] == 0;
  }
  EXPECT_EQ(m.numAvailable(), unreferenced);
}

TEST(BlockManager, AllocateAppendRelease) {
  kv::BlockManager m(8, 4, /*prefixCaching=*/false);
  auto p = ids(6);
  int64_t cached = -1;
  ASSERT_TRUE(m.allocate(1, p.data(), 6, &cached).isOk());
  EXPECT_EQ(cached, 0);
  EXPECT_EQ(m.blockTable(1).size(), 2u); // 6 tokens in blocks of 4
  EXPECT_EQ(m.numAvailable(), 6);
  kv::BlockCopy copy;
  ASSERT_TRUE(m.append(1, 7, &copy).isOk()); // token 7 of 8: same block
  EXPECT_FALSE(copy.needed());
  ASSERT_TRUE(m.append(1, 8, &copy).isOk());
  EXPECT_EQ(m.blockTable(1).size(), 2u);
  ASSERT_TRUE(m.append(1, 9, &copy).isOk()); // token 9 opens block 3
  EXPECT_EQ(m.blockTable(1).size(), 3u);
  EXPECT_EQ(m.tokens(1), 9);
  checkRefCounts(m, {1});
  m.release(1);
  EXPECT_EQ(m.numAvailable(), 8);
  EXPECT_FALSE(m.contains(1));
  m.release(1); // unknown ids are ignored
}

// Speculative decoding's rejected draft positions: truncate cuts the
// tokens and frees the blocks past the last one needed; never below the
// committed rows.
TEST(BlockManager, TruncateReleasesDraftBlocks) {
  kv::BlockManager m(8, 4, /*prefixCaching=*/true);
  auto p = ids(5);
  int64_t cached = -1;
  ASSERT_TRUE(m.allocate(1, p.data(), 5, &cached).isOk());
  ASSERT_TRUE(m.commit(1, 5).isOk());
  for (int32_t t = 100; t < 106; ++t) // a draft of 6: blocks 2 and 3
    ASSERT_TRUE(m.append(1, t, nullptr).isOk());
  EXPECT_EQ(m.tokens(1), 11);
  EXPECT_EQ(m.blockTable(1).size(), 3u);
  const int32_t before = m.numAvailable();
  ASSERT_TRUE(m.truncate(1, 7).isOk()); // two draft tokens kept
  EXPECT_EQ(m.tokens(1), 7);
  EXPECT_EQ(m.blockTable(1).size(), 2u);
  EXPECT_EQ(m.numAvailable(), before + 1);
  checkRefCounts(m, {1});
  kiln::rt::Status below = m.truncate(1, 4); // under the 5 committed rows
  EXPECT_EQ(below.code(), KILN_RT_INVALID_ARGUMENT);
  EXPECT_NE(below.message().find("cannot truncate to 4"), std::string::npos);
  EXPECT_EQ(m.truncate(1, 8).code(), KILN_RT_INVALID_ARGUMENT); // above
  EXPECT_EQ(m.truncate(2, 1).code(), KILN_RT_NOT_FOUND);
  EXPECT_EQ(m.tokens(1), 7); // errors change nothing
  m.release(1);
  EXPECT_EQ(m.numAvailable(), 8);
}

TEST(BlockManager, ErrorsChangeNothing) {
  kv::BlockManager m(3, 4, true);
  auto p = ids(9); // 3 blocks
  ASSERT_TRUE(m.allocate(1, p.data(), 9, nullptr).isOk());
  EXPECT_EQ(m.allocate(1, p.data(), 1, nullptr).code(),
            KILN_RT_INVALID_ARGUMENT);
  EXPECT_EQ(m.allocate(2, p.data(), 0, nullptr).code(),
            KILN_RT_INVALID_ARGUMENT);
  kiln::rt::Status full = m.allocate(2, p.data(), 2, nullptr);
  EXPECT_EQ(full.code(), KILN_RT_OUT_OF_RANGE);
  EXPECT_NE(full.message().find("needs 1 KV-cache blocks, 0 available"),
            std::string::npos)
      << full.message();
  EXPECT_FALSE(m.contains(2));
  kv::BlockCopy copy;
  for (int i = 0; i < 3; ++i) // fill the last block's free slots
    ASSERT_TRUE(m.append(1, 1, &copy).isOk());
  EXPECT_EQ(m.append(1, 1, &copy).code(), KILN_RT_OUT_OF_RANGE);
  EXPECT_EQ(m.tokens(1), 12);
  EXPECT_EQ(m.append(5, 1, &copy).code(), KILN_RT_NOT_FOUND);
  EXPECT_EQ(m.fork(5, 6).code(), KILN_RT_NOT_FOUND);
  EXPECT_EQ(m.fork(1, 1).code(), KILN_RT_INVALID_ARGUMENT);
  EXPECT_EQ(m.commit(1, 13).code(), KILN_RT_INVALID_ARGUMENT);
  ASSERT_TRUE(m.commit(1, 8).isOk());
  EXPECT_EQ(m.commit(1, 4).code(), KILN_RT_INVALID_ARGUMENT); // backwards
  checkRefCounts(m, {1});
}

TEST(BlockManager, ForkSharesAndCopiesOnWrite) {
  kv::BlockManager m(8, 4, false);
  auto p = ids(6);
  ASSERT_TRUE(m.allocate(1, p.data(), 6, nullptr).isOk());
  ASSERT_TRUE(m.fork(1, 2).isOk());
  EXPECT_EQ(m.blockTable(1), m.blockTable(2));
  EXPECT_EQ(m.numAvailable(), 6); // nothing copied
  for (int32_t b : m.blockTable(1))
    EXPECT_EQ(m.refCount(b), 2);
  // The child writes into the shared, half-full second block: its copy.
  const int32_t shared = m.blockTable(1)[1];
  kv::BlockCopy copy;
  ASSERT_TRUE(m.append(2, 50, &copy).isOk());
  ASSERT_TRUE(copy.needed());
  EXPECT_EQ(copy.src, shared);
  EXPECT_EQ(copy.dst, m.blockTable(2)[1]);
  EXPECT_NE(copy.dst, shared);
  EXPECT_EQ(m.blockTable(2)[0], m.blockTable(1)[0]); // full block still shared
  EXPECT_EQ(m.refCount(shared), 1);
  // The parent now owns its block alone: no copy.
  ASSERT_TRUE(m.append(1, 60, &copy).isOk());
  EXPECT_FALSE(copy.needed());
  EXPECT_EQ(m.blockTable(1)[1], shared);
  checkRefCounts(m, {1, 2});
  m.release(1);
  m.release(2);
  EXPECT_EQ(m.numAvailable(), 8);
}

TEST(BlockManager, PrefixCacheReusesCommittedBlocks) {
  kv::BlockManager m(16, 4, true);
  auto system = ids(10); // a shared "system prompt" of 10 tokens
  std::vector<int32_t> a = system, b = system;
  a.insert(a.end(), {1, 2, 3});
  b.insert(b.end(), {7, 8});
  int64_t cached = -1;
  ASSERT_TRUE(m.allocate(1, a.data(), int64_t(a.size()), &cached).isOk());
  EXPECT_EQ(cached, 0);
  // Not yet computed: a second prompt must not reuse the blocks.
  ASSERT_TRUE(m.allocate(2, b.data(), int64_t(b.size()), &cached).isOk());
  EXPECT_EQ(cached, 0);
  m.release(2);
  ASSERT_TRUE(m.commit(1, int64_t(a.size())).isOk());
  // Now the two full blocks of the system prompt (8 tokens) are reused.
  ASSERT_TRUE(m.allocate(3, b.data(), int64_t(b.size()), &cached).isOk());
  EXPECT_EQ(cached, 8);
  EXPECT_EQ(m.computedTokens(3), 8);
  EXPECT_EQ(m.blockTable(3)[0], m.blockTable(1)[0]);
  EXPECT_EQ(m.blockTable(3)[1], m.blockTable(1)[1]);
  EXPECT_NE(m.blockTable(3)[2], m.blockTable(1)[2]);
  EXPECT_EQ(m.refCount(m.blockTable(1)[0]), 2);
  // A different first block changes every later name: no reuse.
  std::vector<int32_t> c = b;
  c[0] = 99;
  ASSERT_TRUE(m.allocate(4, c.data(), int64_t(c.size()), &cached).isOk());
  EXPECT_EQ(cached, 0);
  // The last token is always computed: a prompt of exactly the cached
  // blocks reuses all but the last block.
  std::vector<int32_t> exact(a.begin(), a.begin() + 8);
  ASSERT_TRUE(m.allocate(5, exact.data(), 8, &cached).isOk());
  EXPECT_EQ(cached, 4);
  checkRefCounts(m, {1, 3, 4, 5});
  EXPECT_EQ(m.stats().hitTokens, 12);
  // Released, the named blocks stay cached (available, still hits).
  for (kv::SequenceId id : {1, 3, 4, 5})
    m.release(id);
  EXPECT_EQ(m.numAvailable(), 16);
  ASSERT_TRUE(m.allocate(6, b.data(), int64_t(b.size()), &cached).isOk());
  EXPECT_EQ(cached, 8);
  m.release(6);
  EXPECT_EQ(m.numAvailable(), 16);
}

TEST(BlockManager, EvictsLeastRecentlyUsed) {
  kv::BlockManager m(4, 2, true);
  auto x = ids(5, 0), y = ids(5, 50);
  ASSERT_TRUE(m.allocate(1, x.data(), 5, nullptr).isOk()); // 3 blocks
  ASSERT_TRUE(m.commit(1, 5).isOk()); // blocks 0, 1 of x named
  m.release(1);
  ASSERT_TRUE(m.allocate(2, y.data(), 5, nullptr).isOk());
  ASSERT_TRUE(m.commit(2, 5).isOk());
  m.release(2);
  // Four blocks: x's second named block was evicted for y, so y is cached
  // whole; x only partly.
  int64_t cached = -1;
  ASSERT_TRUE(m.allocate(3, y.data(), 5, &cached).isOk());
  EXPECT_EQ(cached, 4);
  m.release(3);
  EXPECT_GT(m.stats().evictedBlocks, 0);
  // A long prompt takes every block, evicting whatever is cached.
  auto z = ids(8, 200);
  ASSERT_TRUE(m.allocate(4, z.data(), 8, &cached).isOk());
  EXPECT_EQ(cached, 0);
  EXPECT_EQ(m.numAvailable(), 0);
  ASSERT_TRUE(m.allocate(5, x.data(), 1, &cached).code() ==
              KILN_RT_OUT_OF_RANGE);
  m.release(4);
  EXPECT_EQ(m.numAvailable(), 4);
}

TEST(BlockManager, RandomWorkloadKeepsInvariants) {
  std::mt19937 rng(11);
  for (bool caching : {false, true}) {
    kv::BlockManager m(40, 4, caching);
    std::vector<kv::SequenceId> live;
    kv::SequenceId next = 1;
    // Prompts from a few shared prefixes, so that caching hits.
    std::vector<std::vector<int32_t>> prefixes = {ids(9, 0), ids(13, 300),
                                                  ids(4, 600)};
    for (int step = 0; step < 3000; ++step) {
      int action = int(rng() % 10);
      if (action < 3) {
        std::vector<int32_t> p = prefixes[rng() % prefixes.size()];
        for (int k = int(rng() % 6); k > 0; --k)
          p.push_back(int32_t(rng() % 1000));
        int64_t cached = -1;
        kiln::rt::Status s =
            m.allocate(next, p.data(), int64_t(p.size()), &cached);
        if (s.isOk()) {
          ASSERT_LT(cached, int64_t(p.size()));
          ASSERT_EQ(cached % 4, 0);
          live.push_back(next);
        } else {
          ASSERT_EQ(s.code(), KILN_RT_OUT_OF_RANGE);
        }
        ++next;
      } else if (action < 7 && !live.empty()) {
        kv::SequenceId id = live[rng() % live.size()];
        kv::BlockCopy copy;
        kiln::rt::Status s = m.append(id, int32_t(rng() % 1000), &copy);
        if (s.isOk())
          ASSERT_TRUE(m.commit(id, m.tokens(id)).isOk());
        else
          ASSERT_EQ(s.code(), KILN_RT_OUT_OF_RANGE);
        if (copy.needed())
          ASSERT_EQ(copy.dst, m.blockTable(id).back());
      } else if (action < 8 && !live.empty()) {
        kv::SequenceId id = live[rng() % live.size()];
        ASSERT_TRUE(m.fork(id, next).isOk());
        live.push_back(next++);
      } else if (!live.empty()) {
        size_t i = rng() % live.size();
        m.release(live[i]);
        live.erase(live.begin() + long(i));
      }
      if (step % 100 == 0)
        checkRefCounts(m, live);
    }
    checkRefCounts(m, live);
    for (kv::SequenceId id : live)
      m.release(id);
    EXPECT_EQ(m.numAvailable(), m.numBlocks()) << "blocks leaked";
    if (caching)
      EXPECT_GT(m.stats().hitTokens, 0);
  }
}

} // namespace

//===- DraftsTest.cpp - speculative decoding's model-free drafts ----------===//
//
// spec::ngramDraft, spec::SuffixIndex and spec::DraftController
// (runtime/src/spec/Drafts.h): prompt lookup's overlapping copy, the suffix
// index's longest match and majority continuation, and the controller's
// choice of the draft length from acceptance and step costs.
//
//===----------------------------------------------------------------------===//
#include "spec/Drafts.h"

#include <gtest/gtest.h>

#include <vector>

namespace spec = kiln::rt::spec;
using Tokens = std::vector<int32_t>;

TEST(Drafts, NgramTakesTheLatestLongestMatch) {
  // "1 2 3" occurs twice; the latest occurrence continues with 7 8.
  Tokens h = {1, 2, 3, 4, 5, 1, 2, 3, 7, 8, 9, 1, 2, 3};
  EXPECT_EQ(spec::ngramDraft(h, 2), (Tokens{7, 8}));
  EXPECT_EQ(spec::ngramDraft({4, 5, 6}, 3), Tokens{}); // nothing recurs
}

TEST(Drafts, NgramRepetitionDraftsKTokens) {
  // A period-2 repetition: the latest match is two tokens back, and the
  // copy overlaps itself (LZ77), so all 5 tokens are drafted.
  Tokens h = {9, 4, 5, 4, 5, 4, 5};
  EXPECT_EQ(spec::ngramDraft(h, 5), (Tokens{4, 5, 4, 5, 4}));
  EXPECT_EQ(spec::ngramDraft({3, 3, 3}, 4), (Tokens{3, 3, 3, 3}));
}

TEST(Drafts, SuffixFollowsTheMajorityContinuation) {
  spec::SuffixIndex index;
  // After "10 11" the corpus continues with 12 twice and 13 once: the
  // majority wins (prompt lookup would take the latest, 13).
  index.beginRequest({10, 11, 12, 14, 10, 11, 12, 14, 10, 11, 13, 15, 10, 11});
  Tokens d = index.draft(2);
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d[0], 12);
  // A later request sees the earlier one's tokens, never across the
  // boundary between them.
  index.beginRequest({20, 10, 11});
  d = index.draft(1);
  EXPECT_EQ(d, Tokens{12});
  EXPECT_EQ(index.draft(0), Tokens{});
}

TEST(Drafts, SuffixStopsWhereTheCorpusDisagrees) {
  spec::SuffixIndex index;
  // 1 was followed by 11 different tokens: the best continuation's share,
  // 1/11, is below the cut-off (0.1), so there is no draft; with 9 of
  // them (1/9) there is.
  Tokens corpus;
  for (int32_t t = 20; t < 31; ++t)
    corpus.insert(corpus.end(), {1, t});
  corpus.push_back(1);
  index.beginRequest(corpus);
  EXPECT_EQ(index.draft(4), Tokens{});
  spec::SuffixIndex fewer;
  Tokens nine(corpus.begin() + 4, corpus.end());
  fewer.beginRequest(nine);
  EXPECT_FALSE(fewer.draft(4).empty());
}

TEST(Drafts, ControllerChoosesByAcceptanceAndCost) {
  spec::DraftController c;
  c.costMs = {10.0, 12.0, 14.0, 16.0};
  for (int i = 0; i < 50; ++i)
    c.observe(3, false); // every draft token kept
  EXPECT_GT(c.acceptance(), 0.95);
  EXPECT_EQ(c.choose(3), 3);
  EXPECT_EQ(c.choose(1), 1); // no more than is available
  for (int i = 0; i < 200; ++i)
    c.observe(0, true); // never kept
  EXPECT_LT(c.acceptance(), 0.05);
  EXPECT_EQ(c.choose(3), 0);
  EXPECT_TRUE(c.canPay());
  // A draft as slow as the target can never pay: no k, no probing.
  spec::DraftController slow;
  slow.costMs = {10.0, 25.0, 40.0};
  EXPECT_FALSE(slow.canPay());
  EXPECT_EQ(spec::DraftController().choose(3), 0); // no costs measured
}

TEST(Drafts, OptimisticPriorDraftsBeforeEvidence) {
  spec::DraftController neutral, optimistic;
  optimistic.optimistic();
  neutral.costMs = optimistic.costMs = {10.0, 15.0, 18.0};
  EXPECT_EQ(neutral.choose(2), 0);     // a = 0.5: not worth 15 ms
  EXPECT_EQ(optimistic.choose(2), 2);  // a = 0.9: tried
  for (int i = 0; i < 30; ++i)
    optimistic.observe(0, true); // the draft turns out useless
  EXPECT_EQ(optimistic.choose(2), 0);
}

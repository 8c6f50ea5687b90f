//===- StepSplitTest.cpp - pipeline micro-batches of a batched step -------===//
//
// serve::splitStep cuts a step into micro-batches of consecutive sequences
// for pipeline stages. Checked: the parts cover every sequence once, in
// order; each part's arrays are the step's for its sequences with rows
// renumbered from 0; the copy-on-write copies go with the first part only;
// the token rows are balanced (a long prefill chunk is a part by itself);
// more parts than sequences gives one per sequence; parts <= 1 the step.
//
//===----------------------------------------------------------------------===//
#include "serve/CpuStepper.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace kiln::rt::serve {
namespace {

/// A step of sequences with `rows[s]` token rows each, 2 blocks per table,
/// token ids and positions numbered so that every row is recognisable.
struct Step {
  explicit Step(std::vector<int32_t> rowsPerSeq, int32_t copies = 0)
      : rowCount(std::move(rowsPerSeq)) {
    const int32_t S = int32_t(rowCount.size());
    int32_t row = 0;
    for (int32_t s = 0; s < S; ++s) {
      rowStart.push_back(row);
      pos.push_back(100 * s);
      tables.push_back(2 * s);
      tables.push_back(2 * s + 1);
      for (int32_t r = 0; r < rowCount[size_t(s)]; ++r) {
        tokens.push_back(1000 * s + r);
        positions.push_back(100 * s + r);
      }
      row += rowCount[size_t(s)];
    }
    for (int32_t i = 0; i < copies; ++i) {
      copySrc.push_back(i);
      copyDst.push_back(50 + i);
    }
    a.numSeqs = S;
    a.numTokens = row;
    a.maxBlocks = 2;
    a.numCopies = copies;
    a.rowStart = rowStart.data();
    a.rowCount = rowCount.data();
    a.pos = pos.data();
    a.blockTables = tables.data();
    a.tokens = tokens.data();
    a.positions = positions.data();
    a.copySrc = copySrc.data();
    a.copyDst = copyDst.data();
  }
  std::vector<int32_t> rowCount, rowStart, pos, tables, tokens, positions,
      copySrc, copyDst;
  StepArrays a;
};

/// Checks that `parts` cover `step` exactly and each is self-consistent.
void expectCover(const Step &step, const std::vector<MicroBatch> &parts) {
  int32_t seq = 0, row = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    const MicroBatch &m = parts[k];
    const StepArrays &a = m.arrays;
    EXPECT_EQ(m.firstSeq, seq) << "part " << k;
    ASSERT_GE(a.numSeqs, 1) << "part " << k;
    EXPECT_EQ(a.numCopies, k == 0 ? step.a.numCopies : 0) << "part " << k;
    EXPECT_EQ(a.maxBlocks, step.a.maxBlocks);
    int32_t tokens = 0;
    for (int32_t i = 0; i < a.numSeqs; ++i) {
      const int32_t s = seq + i;
      EXPECT_EQ(a.rowStart[i], tokens) << "part " << k << " seq " << i;
      EXPECT_EQ(a.rowCount[i], step.rowCount[size_t(s)]);
      EXPECT_EQ(a.pos[i], 100 * s);
      EXPECT_EQ(a.blockTables[2 * i], 2 * s);
      EXPECT_EQ(a.blockTables[2 * i + 1], 2 * s + 1);
      for (int32_t r = 0; r < a.rowCount[i]; ++r) {
        EXPECT_EQ(a.tokens[a.rowStart[i] + r], 1000 * s + r);
        EXPECT_EQ(a.positions[a.rowStart[i] + r], 100 * s + r);
      }
      tokens += a.rowCount[i];
    }
    EXPECT_EQ(a.numTokens, tokens) << "part " << k;
    seq += a.numSeqs;
    row += tokens;
  }
  EXPECT_EQ(seq, step.a.numSeqs);
  EXPECT_EQ(row, step.a.numTokens);
}

TEST(StepSplit, DecodeStepSplitsEvenly) {
  Step step(std::vector<int32_t>(8, 1), /*copies=*/2);
  for (int32_t parts : {2, 3, 4, 8}) {
    std::vector<MicroBatch> m = splitStep(step.a, parts);
    ASSERT_EQ(m.size(), size_t(parts));
    expectCover(step, m);
    for (const MicroBatch &b : m) {
      EXPECT_GE(b.arrays.numSeqs, 8 / parts) << parts << " parts";
      EXPECT_LE(b.arrays.numSeqs, (8 + parts - 1) / parts) << parts << " parts";
    }
  }
}

TEST(StepSplit, PrefillChunkBalancesRows) {
  // A 64-row prefill chunk and six decodes: two parts split the rows, the
  // chunk alone in the first.
  Step step({64, 1, 1, 1, 1, 1, 1});
  std::vector<MicroBatch> m = splitStep(step.a, 2);
  ASSERT_EQ(m.size(), 2u);
  expectCover(step, m);
  EXPECT_EQ(m[0].arrays.numSeqs, 1);
  EXPECT_EQ(m[0].arrays.numTokens, 64);
  // Decodes first, the chunk last: the last part still gets a sequence.
  Step late({1, 1, 1, 64});
  m = splitStep(late.a, 3);
  ASSERT_EQ(m.size(), 3u);
  expectCover(late, m);
  EXPECT_EQ(m[2].arrays.numTokens, 64);
}

TEST(StepSplit, MorePartsThanSequences) {
  Step step({3, 5});
  std::vector<MicroBatch> m = splitStep(step.a, 4);
  ASSERT_EQ(m.size(), 2u);
  expectCover(step, m);
}

TEST(StepSplit, OnePartIsTheStep) {
  Step step({2, 1, 4}, /*copies=*/1);
  for (int32_t parts : {-1, 0, 1}) {
    std::vector<MicroBatch> m = splitStep(step.a, parts);
    ASSERT_EQ(m.size(), 1u);
    expectCover(step, m);
  }
}

} // namespace
} // namespace kiln::rt::serve

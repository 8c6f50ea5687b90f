//===- TraceTest.cpp - The trace's cost model and recorder ----------------===//
//
// traceCost (trace/Trace.h) against counts written out by hand from the
// kiln_trace_site formulas of kernel_abi.h, and the recorder's bound.
//
//===----------------------------------------------------------------------===//
#include "trace/Trace.h"

#include <gtest/gtest.h>

using kiln::rt::traceCost;

namespace {

kiln_trace_site site() {
  kiln_trace_site s{};
  s.kernel = "kiln_k_attention";
  s.kind = "attention";
  s.loc = "layers.0.attention";
  return s;
}

} // namespace

TEST(TraceCost, LinearScalesWithTokens) {
  kiln_trace_site s = site();
  s.bytes_fixed = 1024;      // a 16x16 f32 weight
  s.bytes_per_token = 128;   // 16 floats in, 16 out
  s.flops_per_token = 512;   // 2 * 16 * 16
  s.per_token = 1;
  uint64_t bytes = 0, flops = 0;
  traceCost(s, 5, 100, bytes, flops);
  EXPECT_EQ(bytes, 1024u + 5 * 128u);
  EXPECT_EQ(flops, 5 * 512u);
  // A fixed-row site (decode, the classifier's last row) ignores n.
  s.per_token = 0;
  s.flops_fixed = 512;
  traceCost(s, 5, 100, bytes, flops);
  EXPECT_EQ(bytes, 1024u);
  EXPECT_EQ(flops, 512u + 0u);
}

TEST(TraceCost, AttentionCountsCachedPositions) {
  kiln_trace_site s = site();
  s.kv_bytes_per_pos = 64;
  s.flops_per_pos = 64;
  s.per_token = 1;
  uint64_t bytes = 0, flops = 0;
  // 3 tokens at position 4: keys [0, 7) are read; token i attends to
  // pos + i + 1 keys: 5 + 6 + 7 = 18 pairs.
  traceCost(s, 3, 4, bytes, flops);
  EXPECT_EQ(bytes, 7u * 64u);
  EXPECT_EQ(flops, 18u * 64u);
  // A sliding window of 6: at most 6 keys read, 5 + 6 + 6 pairs.
  s.window = 6;
  traceCost(s, 3, 4, bytes, flops);
  EXPECT_EQ(bytes, 6u * 64u);
  EXPECT_EQ(flops, 17u * 64u);
}

TEST(TraceRecorder, KeepsAtMostTheLimit) {
  kiln::rt::TraceRecorder r;
  kiln::rt::TraceEvent e;
  for (size_t i = 0; i < kiln::rt::TraceRecorder::kMaxEvents + 3; ++i)
    r.add(e);
  EXPECT_EQ(r.events().size(), kiln::rt::TraceRecorder::kMaxEvents);
  EXPECT_EQ(r.dropped(), 3u);
  r.clear();
  EXPECT_TRUE(r.events().empty());
  EXPECT_EQ(r.dropped(), 0u);
}

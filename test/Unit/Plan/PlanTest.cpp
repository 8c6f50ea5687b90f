//===- PlanTest.cpp - kiln-plan's cost model ------------------------------===//
//
// The roofline and alpha-beta terms against hand-computed values, memory
// feasibility, an SLO nothing meets, and the seed's orderings on paper
// (docs/planning.md).
//
//===----------------------------------------------------------------------===//
#include "tools/kiln-plan/CostModel.h"

#include <gtest/gtest.h>

using namespace kiln::plan;

namespace {

/// 2 layers of dim 64, FFN 128, 4 heads of 16, vocabulary 256.
ModelShape toy() {
  ModelShape m;
  m.name = "toy";
  m.layers = 2;
  m.dim = 64;
  m.hidden = 128;
  m.heads = 4;
  m.kvHeads = 4;
  m.headDim = 16;
  m.vocab = 256;
  m.context = 64;
  return m;
}

/// Llama 2 70B (Touvron et al. 2023): 80 layers, dim 8192, FFN 28672, 64
/// heads, 8 KV heads.
ModelShape llama70b() {
  ModelShape m;
  m.name = "llama-2-70b";
  m.layers = 80;
  m.dim = 8192;
  m.hidden = 28672;
  m.heads = 64;
  m.kvHeads = 8;
  m.headDim = 128;
  m.vocab = 32000;
  m.context = 4096;
  return m;
}

Cluster a100s(int64_t n, int64_t perNode) {
  Cluster c;
  c.device = *deviceNamed("a100-80g");
  c.devices = n;
  c.devicesPerNode = perNode;
  c.intra = *linkNamed("nvlink-a100");
  c.inter = *linkNamed("infiniband-hdr");
  return c;
}

Recipe bf16(int64_t tp, int64_t pp) {
  Recipe r;
  r.tp = tp;
  r.pp = pp;
  r.weights = {"bf16", 2.0, 16};
  r.kv = "bf16";
  r.kvBytes = 2;
  r.actBytes = 2;
  return r;
}

const std::vector<WeightFormat> kFormats = {{"bf16", 2.0, 16},
                                            {"w8a16", 1.0, 8}};

} // namespace

TEST(PlanCost, LayerParameters) {
  // q, k, v, o: 4 x 64 x 64; gate, up, down: 3 x 64 x 128.
  EXPECT_DOUBLE_EQ(toy().layerParams(), 4 * 64 * 64 + 3 * 64 * 128);
}

TEST(PlanCost, DecodeRooflineByHand) {
  // f32 weights and KV on a device of 1 GB/s and (nearly) unbounded FLOPs:
  // TPOT = bytes / bandwidth = (2 layers x 40960 params x 4 + KV 2 layers x
  // 16 positions x 2 (K, V) x 4 heads x 16 x 4 + classifier 256 x 64 x 4)
  // / 1e9 = (327680 + 16384 + 65536) / 1e9 s.
  Cluster c;
  c.device = Device{"test", 1e12, 1e9, 1e18, 1.0, 1.0, 0.0, false};
  c.intra = c.inter = Link{"none", 0, 1e9};
  Recipe r;
  r.weights = {"f32", 4.0, 32};
  r.kv = "f32";
  r.kvBytes = 4;
  r.actBytes = 4;
  Workload w;
  w.context = 16;
  Prediction p = predict(toy(), c, r, w);
  EXPECT_NEAR(p.tpot, (327680.0 + 16384.0 + 65536.0) / 1e9, 1e-12);
  EXPECT_NEAR(p.throughput, 1.0 / p.tpot, 1e-6);
  EXPECT_EQ(p.decodeCommTime, 0.0);
  // Memory: weights (layers, embedding, classifier) + KV + activations.
  EXPECT_NEAR(p.weightBytesPerDevice, 327680.0 + 65536.0 + 65536.0, 1e-6);
  EXPECT_NEAR(p.kvBytesPerDevice, 16384.0, 1e-6);
}

TEST(PlanCost, AlphaBetaRing) {
  Link l{"l", 1e-6, 1e9};
  // 2 (N - 1) steps of alpha + (bytes / N) / beta.
  EXPECT_NEAR(allReduceTime(1e6, 4, l), 6 * (1e-6 + 2.5e-4), 1e-12);
  EXPECT_NEAR(allGatherTime(1e6, 4, l), 3 * (1e-6 + 2.5e-4), 1e-12);
  EXPECT_EQ(allReduceTime(1e6, 1, l), 0.0);
}

TEST(PlanCost, StructuralProblems) {
  ModelShape m = llama70b();
  EXPECT_EQ(*structuralProblem(m, bf16(3, 1)),
            "tp 3 does not divide the 64 attention heads");
  EXPECT_FALSE(structuralProblem(m, bf16(16, 1))); // KV heads replicated
  EXPECT_EQ(*structuralProblem(m, bf16(1, 81)),
            "pp 81 is more stages than the 80 layers");
  Recipe sp = bf16(1, 1);
  sp.sp = true;
  EXPECT_EQ(*structuralProblem(m, sp), "sequence parallelism needs tp >= 2");
}

TEST(PlanCost, MemoryFeasibility) {
  // 70B in bf16 is 140 GB of weights: one A100-80G cannot hold it; in
  // 4-bit (~36 GB) it can; eight hold bf16 with room for the KV cache.
  Workload w;
  w.concurrency = 16;
  w.context = 4096;
  std::vector<Candidate> one = rank(llama70b(), a100s(1, 1), w, Slo{}, kFormats,
                                    {"bf16"});
  ASSERT_FALSE(one.empty());
  for (const Candidate &c : one)
    EXPECT_EQ(c.violates, "memory") << c.recipe.weights.name;
  std::vector<Candidate> four = rank(llama70b(), a100s(1, 1), w, Slo{},
                                     {{"w4a16", 0.5 + 2.0 / 128, 4}}, {"bf16"});
  ASSERT_FALSE(four.empty());
  EXPECT_EQ(four.front().violates, "");
  std::vector<Candidate> eight =
      rank(llama70b(), a100s(8, 8), w, Slo{}, kFormats, {"bf16"});
  ASSERT_FALSE(eight.empty());
  EXPECT_EQ(eight.front().violates, "");
  EXPECT_EQ(eight.front().recipe.weights.name, "bf16");
}

TEST(PlanCost, UnreachableSloNamesTheConstraint) {
  Workload w;
  w.concurrency = 1;
  w.context = 4096;
  // 0.1 ms per token is below any recipe's weight-read time.
  std::vector<Candidate> r = rank(llama70b(), a100s(8, 8), w,
                                  Slo{0, 1e-4}, kFormats, {"bf16"});
  ASSERT_FALSE(r.empty());
  for (const Candidate &c : r)
    EXPECT_EQ(c.violates, "tpot");
  EXPECT_NE(r.front().why.find("TPOT"), std::string::npos);
}

TEST(PlanCost, SeedOrderingLlama70bOnEightA100) {
  // The seed: a 70B model on 8 A100s runs TP=8.
  Workload w;
  w.concurrency = 16;
  w.context = 4096;
  w.promptTokens = 2048;
  std::vector<Candidate> r =
      rank(llama70b(), a100s(8, 8), w, Slo{}, kFormats, {"bf16"});
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(r.front().recipe.tp, 8);
  EXPECT_EQ(r.front().recipe.pp, 1);
}

TEST(PlanCost, SeedOrderingLlama175bOnTwoNodes) {
  // The seed: 175B on two 8-GPU nodes, TP=8 inside x PP=2 across ahead of
  // TP=16 across the InfiniBand link (at serving batch sizes the TP=16
  // all-reduces' bytes cross the 25 GB/s link 192 times per step).
  ModelShape m;
  m.name = "llama-175b";
  m.layers = 96;
  m.dim = 12288;
  m.hidden = 32768;
  m.heads = 96;
  m.kvHeads = 96;
  m.headDim = 128;
  m.vocab = 32000;
  m.context = 2048;
  Workload w;
  w.concurrency = 64;
  w.context = 2048;
  w.promptTokens = 1024;
  Cluster c = a100s(16, 8);
  Prediction tp8pp2 = predict(m, c, bf16(8, 2), w);
  Prediction tp16 = predict(m, c, bf16(16, 1), w);
  EXPECT_TRUE(tp16.tpCrossesNodes);
  EXPECT_FALSE(tp8pp2.tpCrossesNodes);
  EXPECT_LT(tp8pp2.tpot, tp16.tpot);
  EXPECT_GT(tp16.decodeCommTime, tp8pp2.decodeCommTime);
}

TEST(PlanCost, SequenceParallelCutsPrefillTraffic) {
  // The same recipe with SP predicts a TTFT no longer than without (the
  // norms and adds on 1/tp of the rows; the collectives move the same
  // bytes), and the same TPOT (decode keeps plain TP).
  Workload w;
  w.concurrency = 1;
  w.context = 4096;
  w.promptTokens = 4096;
  w.spMinTokens = 1024;
  Recipe tp = bf16(8, 1), sp = bf16(8, 1);
  sp.sp = true;
  Prediction a = predict(llama70b(), a100s(8, 8), tp, w);
  Prediction b = predict(llama70b(), a100s(8, 8), sp, w);
  EXPECT_LE(b.ttft, a.ttft);
  EXPECT_DOUBLE_EQ(b.tpot, a.tpot);
  EXPECT_DOUBLE_EQ(b.prefillCommTime, a.prefillCommTime);
}

TEST(PlanCost, CompileFlags) {
  Recipe r = bf16(8, 2);
  r.sp = true;
  r.kv = "fp8";
  EXPECT_EQ(compileFlags(r, true),
            "--target=cuda --dtype=bf16 --kv=fp8 --tp 8 --pp 2 --sp");
  Recipe q;
  q.weights = {"w4a16", 0.52, 4};
  q.kv = "f32";
  EXPECT_EQ(compileFlags(q, false), "--target=cpu --quant=w4a16-rtn");
}

namespace {
TraceKernel kernel(const std::string &kind, double seconds, double bytes,
                   double flops, int64_t tokens) {
  return TraceKernel{kind, "k", seconds, bytes, flops, tokens};
}
} // namespace

// Per-kind efficiencies from a trace, by hand: a 100 GB/s, 10 TFLOP/s
// device; decode linears read 50 GB in 1 s (0.5), decode attention 20 GB in
// 1 s (0.2); prefill linears 4 TFLOP in 1 s (0.4), attention 1 TFLOP in 1 s
// (0.1), elementwise 30 GB in 1 s (0.3). The 2 decode steps of a 4-layer
// model took 2.4 s, 2 s of it in linears and attention: 0.05 s per layer
// and step (the decode norm's 0.1 s counts as overhead).
TEST(PlanCost, CalibrationFromTraceByHand) {
  Device base{"dev", 80e9, 100e9, 10e12, 0.75, 0.6, 0.0, true};
  std::vector<TraceKernel> ks = {
      kernel("rms_norm+linear+rope", 0.5, 25e9, 1e9, 1),
      kernel("logits", 0.5, 25e9, 1e9, 1),
      kernel("attention", 1.0, 20e9, 1e9, 1),
      kernel("rms_norm", 0.1, 1e9, 0, 1),
      kernel("linear+add", 1.0, 1e9, 4e12, 128),
      kernel("attention", 1.0, 1e9, 1e12, 128),
      kernel("rope", 1.0, 30e9, 1e9, 128)};
  auto result = calibrateDevice(base, ks, /*decodeStepSeconds=*/2.4,
                                /*decodeSteps=*/2, /*layers=*/4, "");
  ASSERT_TRUE(std::holds_alternative<DeviceCalibration>(result))
      << std::get<std::string>(result);
  const DeviceCalibration &c = std::get<DeviceCalibration>(result);
  EXPECT_DOUBLE_EQ(c.decodeLinearRate, 50e9);
  EXPECT_DOUBLE_EQ(c.device.bandwidthEfficiency, 0.5);
  EXPECT_DOUBLE_EQ(*c.device.kvBandwidthEfficiency, 0.2);
  EXPECT_DOUBLE_EQ(c.device.flopEfficiency, 0.4);
  EXPECT_DOUBLE_EQ(*c.device.attentionFlopEfficiency, 0.1);
  EXPECT_DOUBLE_EQ(*c.device.elementwiseBandwidthEfficiency, 0.3);
  EXPECT_NEAR(c.device.layerOverhead, 0.05, 1e-12);
  EXPECT_TRUE(c.notes.empty());

  // The calibrated device predicts with those efficiencies: the KV reads
  // of a decode step at 0.2 of the bandwidth.
  Cluster cluster;
  cluster.device = c.device;
  Recipe r;
  r.kvBytes = 2;
  Workload w;
  w.context = 64;
  ModelShape m = toy();
  Prediction p = predict(m, cluster, r, w);
  EXPECT_DOUBLE_EQ(p.kvBandwidth, 100e9 * 0.2);
  EXPECT_DOUBLE_EQ(p.weightBandwidth, 100e9 * 0.5);

  // A quantized artifact's decode rate is that format's GEMV rate; the
  // bandwidth efficiency stays.
  auto q = calibrateDevice(base, ks, 2.4, 2, 4, "w4a16");
  ASSERT_TRUE(std::holds_alternative<DeviceCalibration>(q));
  const Device &dq = std::get<DeviceCalibration>(q).device;
  EXPECT_DOUBLE_EQ(dq.bandwidthEfficiency, 0.75);
  ASSERT_EQ(dq.formatBandwidth.size(), 1u);
  EXPECT_EQ(dq.formatBandwidth[0].first, "w4a16");
  EXPECT_DOUBLE_EQ(dq.formatBandwidth[0].second, 50e9);
}

// Linears faster than the device's figures raise them (a CPU's figures
// are measurements too); the other kinds are then efficiencies of the
// raised figure.
TEST(PlanCost, CalibrationRaisesExceededFigures) {
  Device base{"cpu", 24e9, 20e9, 50e9, 1.0, 1.0, 0.0, false};
  std::vector<TraceKernel> ks = {kernel("linear", 1.0, 30e9, 1e9, 1),
                                 kernel("attention", 1.0, 15e9, 1e9, 1),
                                 kernel("linear", 1.0, 1e9, 100e9, 64),
                                 kernel("attention", 1.0, 1e9, 25e9, 64)};
  auto result = calibrateDevice(base, ks, 2.0, 1, 1, "");
  ASSERT_TRUE(std::holds_alternative<DeviceCalibration>(result));
  const DeviceCalibration &c = std::get<DeviceCalibration>(result);
  EXPECT_DOUBLE_EQ(c.device.bandwidth, 30e9);
  EXPECT_DOUBLE_EQ(c.device.peakFlops, 100e9);
  EXPECT_DOUBLE_EQ(c.device.bandwidthEfficiency, 1.0);
  EXPECT_DOUBLE_EQ(*c.device.kvBandwidthEfficiency, 0.5);
  EXPECT_DOUBLE_EQ(*c.device.attentionFlopEfficiency, 0.25);
  EXPECT_EQ(c.notes.size(), 3u); // two raised figures, no elementwise kernel
  EXPECT_DOUBLE_EQ(c.device.layerOverhead, 0.0);
}

TEST(PlanCost, CalibrationErrors) {
  Device base{"dev", 80e9, 100e9, 10e12, 0.75, 0.6, 0.0, true};
  std::vector<TraceKernel> decodeOnly = {kernel("linear", 1.0, 1e9, 1e9, 1)};
  auto noPrefill = calibrateDevice(base, decodeOnly, 1.0, 1, 1, "");
  ASSERT_TRUE(std::holds_alternative<std::string>(noPrefill));
  EXPECT_NE(std::get<std::string>(noPrefill).find("prefill"),
            std::string::npos);
  std::vector<TraceKernel> both = {kernel("linear", 1.0, 1e9, 1e9, 1),
                                   kernel("linear", 1.0, 1e9, 1e9, 8)};
  auto badFormat = calibrateDevice(base, both, 1.0, 1, 1, "q4_k");
  ASSERT_TRUE(std::holds_alternative<std::string>(badFormat));
  EXPECT_NE(std::get<std::string>(badFormat).find("'q4_k'"),
            std::string::npos);
  auto noLayers = calibrateDevice(base, both, 1.0, 1, 0, "");
  ASSERT_TRUE(std::holds_alternative<std::string>(noLayers));
  std::vector<TraceKernel> negative = {kernel("linear", -1.0, 1e9, 1e9, 1),
                                       kernel("linear", 1.0, 1e9, 1e9, 8)};
  EXPECT_TRUE(std::holds_alternative<std::string>(
      calibrateDevice(base, negative, 1.0, 1, 1, "")));
}

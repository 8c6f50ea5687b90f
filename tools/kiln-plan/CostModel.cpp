//===- CostModel.cpp - kiln-plan's roofline and alpha-beta model ----------===//
//
// The equations are docs/planning.md's; each function names the one it
// computes.
//
//===----------------------------------------------------------------------===//
#include "tools/kiln-plan/CostModel.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <tuple>

namespace kiln::plan {

double ModelShape::layerParams() const {
  const double d = double(dim), q = double(heads) * double(headDim),
               kv = double(kvHeads) * double(headDim), f = double(hidden);
  return d * q + 2 * d * kv + q * d + 3 * d * f;
}

std::optional<std::string> structuralProblem(const ModelShape &m,
                                             const Recipe &r) {
  auto str = [](int64_t v) { return std::to_string(v); };
  if (r.tp < 1 || r.pp < 1)
    return std::string("tp and pp must be at least 1");
  if (m.heads % r.tp)
    return "tp " + str(r.tp) + " does not divide the " + str(m.heads) +
           " attention heads";
  if (m.kvHeads % r.tp && r.tp % m.kvHeads)
    return "tp " + str(r.tp) + " neither divides nor is a multiple of the " +
           str(m.kvHeads) + " KV heads";
  if (m.hidden % r.tp)
    return "tp " + str(r.tp) + " does not divide the " + str(m.hidden) +
           " FFN features";
  if (r.pp > m.layers)
    return "pp " + str(r.pp) + " is more stages than the " + str(m.layers) +
           " layers";
  if (r.sp && r.tp < 2)
    return std::string("sequence parallelism needs tp >= 2");
  return std::nullopt;
}

double allReduceTime(double bytes, int64_t ranks, const Link &link) {
  if (ranks < 2)
    return 0;
  const double n = double(ranks);
  return 2 * (n - 1) * (link.alpha + bytes / n / link.beta);
}

double allGatherTime(double bytes, int64_t ranks, const Link &link) {
  if (ranks < 2)
    return 0;
  const double n = double(ranks);
  return (n - 1) * (link.alpha + bytes / n / link.beta);
}

namespace {
/// Bytes of the recipe's layer weights (every layer) and classifier.
double layerWeightBytes(const ModelShape &m, const Recipe &r) {
  return r.weights.name == "as-stored"
             ? m.storedLayerBytes
             : double(m.layers) * m.layerParams() * r.weights.bytesPerParam;
}
/// The classifier as stored, or in the compute dtype: Kiln's w8a16 / w4a16
/// recipes keep the embedding, norms and classifier unquantized
/// (docs/quantization.md).
double classifierBytes(const ModelShape &m, const Recipe &r) {
  return r.weights.name == "as-stored" ? m.storedClassifierBytes
                                       : m.classifierParams() * r.actBytes;
}
/// Whether the classifier is read by the weight format's kernels (as
/// stored) or at the memory's bandwidth (compute dtype).
bool classifierInFormat(const Recipe &r) {
  return r.weights.name == "as-stored";
}
} // namespace

Prediction predict(const ModelShape &m, const Cluster &c, const Recipe &r,
                   const Workload &w) {
  Prediction p;
  const Device &dev = c.device;
  const double t = double(r.tp), stages = double(r.pp);
  // The devices of a TP group run at once: on a node whose memory they
  // share, each gets its share (pipeline stages take turns).
  double bandwidth = dev.bandwidth;
  if (dev.nodeBandwidth > 0)
    bandwidth = std::min(
        bandwidth,
        dev.nodeBandwidth / double(std::min(r.tp, c.devicesPerNode)));
  const double B = bandwidth * dev.bandwidthEfficiency;
  // Weight reads: the format's GEMV rate where dequantization bounds it.
  double weightB = B;
  for (const auto &[format, rate] : dev.formatBandwidth)
    if (format == r.weights.name)
      weightB = std::min(B, rate * dev.bandwidthEfficiency);
  p.weightBandwidth = weightB;
  // Per kind of kernel where calibrated (calibrateDevice), else the
  // device's two efficiencies.
  const double kvB =
      bandwidth * dev.kvBandwidthEfficiency.value_or(dev.bandwidthEfficiency);
  const double eltB = bandwidth * dev.elementwiseBandwidthEfficiency.value_or(
                                      dev.bandwidthEfficiency);
  p.kvBandwidth = kvB;
  const double F = dev.peakFlops * dev.flopEfficiency;
  const double attnF =
      dev.peakFlops * dev.attentionFlopEfficiency.value_or(dev.flopEfficiency);
  const double C = double(std::max<int64_t>(1, w.concurrency));
  const double ctx = double(std::max<int64_t>(1, w.context));
  const double P = double(w.promptTokens > 0 ? w.promptTokens
                                             : std::max<int64_t>(1, w.context / 2));
  const double d = double(m.dim), f = double(m.hidden), V = double(m.vocab);
  const double hd = double(m.headDim);
  const double headsPerRank = double(m.heads) / t;
  // KV heads per rank: a share, or one replicated head (kiln-partition).
  const double kvPerRank =
      r.tp <= m.kvHeads ? double(m.kvHeads) / t : 1.0;
  // Layers of the largest stage (kiln-partition balances decode bytes).
  const double L = double(m.layers);
  const double Ls = std::ceil(L / stages);
  const bool vocabParallel = r.tp > 1 && m.vocab % r.tp == 0;
  const double clsPerRank =
      classifierBytes(m, r) / (vocabParallel ? t : 1.0);
  const double layerW = layerWeightBytes(m, r) / L; // one layer, whole
  // Links: the TP group's ring runs on the node's links while it fits in a
  // node, else on the inter-node links; stage boundaries cross nodes once
  // the pipeline spans several.
  p.tpCrossesNodes = r.tp > c.devicesPerNode;
  const Link &tpLink = p.tpCrossesNodes ? c.inter : c.intra;
  const int64_t nodes =
      (r.tp * r.pp + c.devicesPerNode - 1) / c.devicesPerNode;
  p.ppCrossesNodes = r.pp > 1 && nodes > 1;
  const double interBoundaries =
      r.pp > 1 ? double(std::min<int64_t>(r.pp - 1, nodes - 1)) : 0;
  const double intraBoundaries = (stages - 1) - interBoundaries;
  auto transfer = [&](double bytes) {
    return interBoundaries *
               (c.inter.alpha + c.inter.idleWake + bytes / c.inter.beta) +
           intraBoundaries *
               (c.intra.alpha + c.intra.idleWake + bytes / c.intra.beta);
  };

  // Decode, one step of C sequences (TPOT). Per device and stage:
  //   bytes = Ls (layerW / t + KV) + classifier share (last stage)
  //   flops = 2 C (Ls layerParams / t + classifier share) + 4 C ctx Ls (h/t) hd
  // summed over the stages a token passes, each max(bytes / B, flops / F).
  const double kvLayerBytes = C * ctx * 2 * kvPerRank * hd * r.kvBytes;
  // Weights at the format's rate, the KV cache at the memory's: one time.
  const double stageMemoryTime =
      Ls * (layerW / t / weightB + kvLayerBytes / kvB);
  const double stageFlops = 2 * C * Ls * m.layerParams() / t +
                            4 * C * ctx * Ls * headsPerRank * hd;
  const double clsFlops = 2 * C * m.classifierParams() / (vocabParallel ? t : 1);
  double decode = 0;
  for (int64_t s = 0; s < r.pp; ++s) {
    const bool last = s == r.pp - 1;
    const double layersHere =
        std::min(Ls, L - double(s) * Ls) > 0 ? std::min(Ls, L - double(s) * Ls)
                                              : 0;
    const double scale = Ls > 0 ? layersHere / Ls : 0;
    const double memoryTime =
        stageMemoryTime * scale +
        (last ? clsPerRank / (classifierInFormat(r) ? weightB : B) : 0);
    const double flops = stageFlops * scale + (last ? clsFlops : 0);
    p.decodeMemoryTime += memoryTime;
    p.decodeComputeTime += flops / F;
    decode += std::max(memoryTime, flops / F) + layersHere * dev.layerOverhead;
  }
  // Two all-reduces per layer of C x dim activations; the vocab-parallel
  // logits' all-gather; the stage transfers and the last stage's logits
  // to rank 0.
  double comm = L * 2 * allReduceTime(C * d * r.actBytes, r.tp, tpLink);
  if (vocabParallel)
    comm += allGatherTime(C * V * 4, r.tp, tpLink);
  if (r.pp > 1) {
    const Link &back = p.ppCrossesNodes ? c.inter : c.intra;
    comm += transfer(C * d * r.actBytes) + back.alpha + back.idleWake +
            C * V * 4 / back.beta;
  }
  p.decodeCommTime = comm;
  p.tpot = decode + comm;
  p.throughput = C / p.tpot;

  // Prefill of one P-token prompt (TTFT). Per device and stage:
  //   flops = 2 P Ls layerParams / t + 2 P^2 Ls (h/t) hd (causal attention)
  //   bytes = Ls layerW / t + P Ls (10 d / (t if SP else 1) + 3 f / t
  //           + 4 (h/t) hd) actBytes (the norms', adds' and activations'
  //           traffic; SP computes the norms and adds on 1/t of the rows)
  // A session's prefill passes the stages in turn, whole (m = 1; the
  // serving engine can cut a step into micro-batches, which measured no
  // gain on CPU ranks, docs/parallelism.md); the makespan of m
  // micro-batches is the sum of one per stage plus (m - 1) of the
  // slowest, each reading the stage's weights again.
  const bool sp = r.sp && r.tp > 1 && P >= double(w.spMinTokens);
  const double m_ = 1;
  const double mbRows = P / m_;
  // One roofline per kind of kernel, summed (the kernels run one after
  // another): the linears (compute- or weight-bound), attention (compute),
  // the elementwise ops (memory).
  auto microBatch = [&](double layersHere, bool last) {
    const double linearFlops =
        2 * mbRows * layersHere * m.layerParams() / t +
        (last ? 2 * m.classifierParams() / (vocabParallel ? t : 1) : 0);
    const double linearTime = std::max(
        linearFlops / F,
        layersHere * layerW / t / weightB +
            (last ? clsPerRank / (classifierInFormat(r) ? weightB : B) : 0));
    const double attentionTime =
        2 * mbRows * P * layersHere * headsPerRank * hd / attnF;
    const double elementwise =
        mbRows * layersHere *
        (10 * d / (sp ? t : 1.0) + 3 * f / t + 4 * headsPerRank * hd) *
        r.actBytes;
    return linearTime + attentionTime + elementwise / eltB +
           layersHere * dev.layerOverhead;
  };
  double sum = 0, slowest = 0;
  for (int64_t s = 0; s < r.pp; ++s) {
    const double layersHere = std::max(0.0, std::min(Ls, L - double(s) * Ls));
    const double tStage = microBatch(layersHere, s == r.pp - 1);
    sum += tStage;
    slowest = std::max(slowest, tStage);
  }
  p.prefillComputeTime = sum + (m_ - 1) * slowest;
  // Reduce-scatter + all-gather (SP) move an all-reduce's bytes.
  p.prefillCommTime =
      m_ * (Ls * 2 * allReduceTime(mbRows * d * r.actBytes, r.tp, tpLink)) +
      (r.pp > 1 ? m_ * transfer(mbRows * d * r.actBytes) : 0) +
      (vocabParallel ? allGatherTime(V * 4, r.tp, tpLink) : 0);
  p.ttft = p.prefillComputeTime + p.prefillCommTime;

  // Memory of the most loaded device: the first stage holds the embedding
  // (whole), the last the classifier share; KV for C sequences of the
  // context; the activation plan for max_prefill_tokens rows (about
  // 6 dim + 3 hidden / t + 2 (h / t) hd values each, double-buffered) and
  // C rows of float32 logits.
  const double embedding = V * d * (r.weights.name == "as-stored"
                                        ? m.storedClassifierBytes /
                                              std::max(1.0, V * d)
                                        : r.weights.bytesPerParam);
  const double firstW = Ls * layerW / t + embedding;
  const double lastW = Ls * layerW / t + clsPerRank;
  p.weightBytesPerDevice =
      r.pp == 1 ? Ls * layerW / t + embedding + (m.tied ? 0 : clsPerRank)
                : std::max(firstW, lastW);
  p.kvBytesPerDevice = C * ctx * Ls * 2 * kvPerRank * hd * r.kvBytes;
  p.activationBytesPerDevice =
      2 * double(w.maxPrefillTokens) *
          (6 * d + 3 * f / t + 2 * headsPerRank * hd) * r.actBytes +
      C * V * 4;
  p.memoryPerDevice = p.weightBytesPerDevice + p.kvBytesPerDevice +
                      p.activationBytesPerDevice;
  return p;
}

std::optional<Device> deviceNamed(const std::string &name) {
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  // Public datasheet figures (docs/planning.md): HBM bandwidth, dense
  // BF16 tensor-core peak, memory. Efficiencies: the fraction of the
  // roofline Kiln targets (75% of bandwidth in decode, 60% of peak in
  // prefill); 30 us of launches per layer (CUDA graphs).
  if (name == "a100-80g")
    return Device{name, 80 * GiB, 2039e9, 312e12, 0.75, 0.6, 30e-6, true};
  if (name == "h100-sxm")
    return Device{name, 80 * GiB, 3350e9, 989e12, 0.75, 0.6, 30e-6, true};
  if (name == "h200")
    return Device{name, 141e9, 4800e9, 989e12, 0.75, 0.6, 30e-6, true};
  // One CPU rank of this machine (2-core AMD EPYC VM, one thread per
  // rank): the decode bandwidth and prefill FLOP rate Kiln measured on
  // synthetic:llama-110m (docs/parallelism.md), so the efficiencies are 1.
  if (name == "cpu") {
    // Calibrated on this VM (docs/planning.md): one thread reads f32
    // weights at 22.5 GB/s (synthetic:llama-110m decode, TP=1, 1 thread)
    // and two share 31 GB/s (the same on 2 threads); prefill reaches 78
    // GFLOP/s per thread; the quantized GEMVs are bounded by their
    // dequantization (kiln-gemv-bench FORMAT 768 2048 1 256: GB/s of
    // weights).
    Device d{name, 24 * GiB, 22.5e9, 78e9, 1.0, 1.0, 0.0, false};
    d.nodeBandwidth = 31e9;
    d.formatBandwidth = {{"w8a16", 11.5e9}, {"w4a16", 7.3e9},
                         {"as-stored", 6.45e9}};
    return d;
  }
  return std::nullopt;
}

std::optional<Link> linkNamed(const std::string &name) {
  // beta: bytes/s per device and direction; alpha: seconds per ring step.
  if (name == "nvlink-a100")
    return Link{name, 1.5e-6, 300e9};
  if (name == "nvlink-h100")
    return Link{name, 1.2e-6, 450e9};
  if (name == "infiniband-hdr")
    return Link{name, 5e-6, 25e9};
  if (name == "infiniband-ndr")
    return Link{name, 4e-6, 50e9};
  if (name == "pcie4")
    return Link{name, 5e-6, 25e9};
  // Open MPI over shared memory on this VM: ~5 us per step (stories260K's
  // TP=2 decode), and a peer that waited long polls at up to 1 ms
  // intervals (MpiBackend.cpp kMaxSleepNs), so it wakes ~0.5 ms late.
  if (name == "shm")
    return Link{name, 5e-6, 5e9, 0.5e-3};
  return std::nullopt;
}

std::vector<Candidate> rank(const ModelShape &m, const Cluster &c,
                            const Workload &w, const Slo &slo,
                            const std::vector<WeightFormat> &formats,
                            const std::vector<std::string> &kvs) {
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  // Usable memory: what the runtime, the CUDA context and fragmentation
  // leave (vLLM's default gpu-memory-utilization is 0.9).
  const double usable = c.device.memoryBytes * (c.device.gpu ? 0.92 : 0.8);
  auto kvBytesOf = [](const std::string &kv) {
    return kv == "f32" ? 4.0 : kv == "int8" || kv == "fp8" ? 1.0 : 2.0;
  };
  std::vector<Candidate> out;
  for (int64_t tp = 1; tp <= c.devices; ++tp) {
    if (c.devices % tp)
      continue;
    const int64_t pp = c.devices / tp;
    for (bool sp : {false, true}) {
      for (const WeightFormat &wf : formats) {
        for (const std::string &kv : kvs) {
          Recipe r;
          r.tp = tp;
          r.pp = pp;
          r.sp = sp;
          r.weights = wf;
          r.kv = kv;
          r.kvBytes = kvBytesOf(kv);
          r.actBytes = c.device.gpu ? 2.0 : 4.0;
          if (structuralProblem(m, r))
            continue;
          Candidate cand{r, predict(m, c, r, w), "", ""};
          char buf[256];
          const Prediction &p = cand.prediction;
          if (p.memoryPerDevice > usable) {
            cand.violates = "memory";
            std::snprintf(buf, sizeof(buf),
                          "needs %.1f GiB per device, %.1f GiB usable",
                          p.memoryPerDevice / GiB, usable / GiB);
            cand.why = buf;
          } else if (slo.ttft > 0 && p.ttft > slo.ttft) {
            cand.violates = "ttft";
            std::snprintf(buf, sizeof(buf), "TTFT %.1f ms > %.1f ms",
                          p.ttft * 1e3, slo.ttft * 1e3);
            cand.why = buf;
          } else if (slo.tpot > 0 && p.tpot > slo.tpot) {
            cand.violates = "tpot";
            std::snprintf(buf, sizeof(buf), "TPOT %.1f ms > %.1f ms",
                          p.tpot * 1e3, slo.tpot * 1e3);
            cand.why = buf;
          }
          out.push_back(std::move(cand));
        }
      }
    }
  }
  auto kvBits = [](const Recipe &r) { return int(r.kvBytes * 8); };
  std::stable_sort(out.begin(), out.end(),
                   [&](const Candidate &a, const Candidate &b) {
                     const bool fa = a.violates.empty(),
                                fb = b.violates.empty();
                     if (fa != fb)
                       return fa;
                     auto key = [&](const Candidate &x) {
                       return std::make_tuple(-x.recipe.weights.precision,
                                              -kvBits(x.recipe),
                                              x.prediction.tpot,
                                              x.prediction.ttft);
                     };
                     return key(a) < key(b);
                   });
  return out;
}

std::string compileFlags(const Recipe &r, bool gpu) {
  std::ostringstream os;
  os << "--target=" << (gpu ? "cuda" : "cpu");
  if (r.weights.name == "bf16" || r.weights.name == "f16")
    os << " --dtype=" << r.weights.name;
  else if (r.weights.name == "w8a16")
    os << (gpu ? " --dtype=bf16" : "") << " --quant=w8a16";
  else if (r.weights.name == "w4a16")
    os << (gpu ? " --dtype=bf16" : "") << " --quant=w4a16-rtn";
  if (r.kv == "int8" || r.kv == "fp8")
    os << " --kv=" << r.kv;
  if (r.tp > 1)
    os << " --tp " << r.tp;
  if (r.pp > 1)
    os << " --pp " << r.pp;
  if (r.sp)
    os << " --sp";
  return os.str();
}

std::variant<std::string, DeviceCalibration>
calibrateDevice(const Device &base, const std::vector<TraceKernel> &kernels,
                double decodeStepSeconds, int64_t decodeSteps, int64_t layers,
                const std::string &format) {
  if (!(base.bandwidth > 0) || !(base.peakFlops > 0))
    return std::string("the base device has no bandwidth or peak");
  if (layers < 1)
    return std::string("the trace names no layer (no 'layers.N' location)");
  if (!format.empty() && format != "w8a16" && format != "w4a16" &&
      format != "as-stored")
    return "weight format '" + format +
           "' is not one of w8a16, w4a16, as-stored";
  // Sums per class: seconds, bytes, FLOPs.
  struct Sum {
    double seconds = 0, bytes = 0, flops = 0;
  } decodeLinear, decodeAttention, prefillLinear, prefillAttention,
      prefillElementwise;
  double decodeKernelSeconds = 0;
  for (const TraceKernel &k : kernels) {
    if (!(k.seconds >= 0) || !(k.bytes >= 0) || !(k.flops >= 0) ||
        k.tokens < 1)
      return "kernel '" + k.name + "' has a negative or missing duration, "
             "bytes, FLOPs or token count";
    const bool linear = k.kind.find("linear") != std::string::npos ||
                        k.kind.find("logits") != std::string::npos;
    const bool attention = !linear && k.kind.find("attention") != std::string::npos;
    const bool decode = k.tokens == 1;
    Sum &s = decode ? (linear ? decodeLinear
                              : attention ? decodeAttention : decodeLinear)
                    : (linear ? prefillLinear
                              : attention ? prefillAttention
                                          : prefillElementwise);
    if (decode && !linear && !attention)
      continue; // decode's small kernels: part of the overhead below
    if (decode)
      decodeKernelSeconds += k.seconds;
    s.seconds += k.seconds;
    s.bytes += k.bytes;
    s.flops += k.flops;
  }
  if (decodeLinear.seconds <= 0 || prefillLinear.seconds <= 0)
    return std::string("the trace needs prefill (rows > 1) and decode "
                       "(one row) steps with linear kernels: run kiln-bench "
                       "--prompt-tokens P --decode-tokens D --trace FILE");
  DeviceCalibration c;
  c.device = base;
  std::string tooSlow; // a class below 0.1% of the device's figure
  auto efficiency = [&](double rate, double bound, const char *what) {
    double e = rate / bound;
    if (e > 1.0) {
      c.notes.push_back(std::string(what) + " ran at " +
                        std::to_string(int(e * 100.0)) +
                        "% of the device's figure (caches): recorded as 1");
      e = 1.0;
    }
    if (!(e >= 1e-3) && tooSlow.empty())
      tooSlow = std::string(what) + " reached " + std::to_string(e) +
                " of the device's figure (below 0.001): the trace was not "
                "taken on this device, or its durations are not a real run's";
    return std::max(e, 1e-3);
  };
  c.decodeLinearRate = decodeLinear.bytes / decodeLinear.seconds;
  c.prefillLinearRate = prefillLinear.flops / prefillLinear.seconds;
  for (double rate :
       {c.decodeLinearRate, c.prefillLinearRate,
        decodeAttention.seconds > 0
            ? decodeAttention.bytes / decodeAttention.seconds
            : 0.0,
        prefillAttention.seconds > 0
            ? prefillAttention.flops / prefillAttention.seconds
            : 0.0,
        prefillElementwise.seconds > 0
            ? prefillElementwise.bytes / prefillElementwise.seconds
            : 0.0})
    if (!std::isfinite(rate))
      return std::string("a kernel class has an infinite rate (durations "
                         "too short for their bytes or FLOPs): not a real "
                         "run's trace");
  // A device figure the run exceeded (a CPU's bandwidth and peak are
  // themselves measurements) is raised to the measured rate, so the linears
  // run at efficiency 1 of it and the other kinds are efficiencies of it.
  if (format.empty() && c.decodeLinearRate > c.device.bandwidth) {
    c.notes.push_back("decode linears read " +
                      std::to_string(c.decodeLinearRate / 1e9) +
                      " GB/s, above the device's bandwidth: raised to it");
    c.device.bandwidth = c.decodeLinearRate;
  }
  if (c.prefillLinearRate > c.device.peakFlops) {
    c.notes.push_back("prefill linears ran at " +
                      std::to_string(c.prefillLinearRate / 1e9) +
                      " GFLOP/s, above the device's peak: raised to it");
    c.device.peakFlops = c.prefillLinearRate;
  }
  const Device &bound = c.device;
  if (format.empty()) {
    c.device.bandwidthEfficiency =
        efficiency(c.decodeLinearRate, bound.bandwidth, "decode linears");
  } else {
    bool set = false;
    for (auto &[name, rate] : c.device.formatBandwidth)
      if (name == format) {
        rate = c.decodeLinearRate;
        set = true;
      }
    if (!set)
      c.device.formatBandwidth.push_back({format, c.decodeLinearRate});
  }
  c.device.flopEfficiency =
      efficiency(c.prefillLinearRate, bound.peakFlops, "prefill linears");
  if (decodeAttention.seconds > 0) {
    c.decodeAttentionRate = decodeAttention.bytes / decodeAttention.seconds;
    c.device.kvBandwidthEfficiency =
        efficiency(c.decodeAttentionRate, bound.bandwidth, "decode attention");
  } else {
    c.notes.push_back("no decode attention kernel: the KV efficiency stays "
                      "the bandwidth's");
  }
  if (prefillAttention.seconds > 0) {
    c.prefillAttentionRate = prefillAttention.flops / prefillAttention.seconds;
    c.device.attentionFlopEfficiency = efficiency(
        c.prefillAttentionRate, bound.peakFlops, "prefill attention");
  } else {
    c.notes.push_back("no prefill attention kernel: attention's efficiency "
                      "stays the linears'");
  }
  if (prefillElementwise.seconds > 0 && prefillElementwise.bytes > 0) {
    c.prefillElementwiseRate =
        prefillElementwise.bytes / prefillElementwise.seconds;
    c.device.elementwiseBandwidthEfficiency = efficiency(
        c.prefillElementwiseRate, bound.bandwidth, "prefill elementwise");
  } else {
    c.notes.push_back("no separate elementwise kernel in prefill (fused "
                      "into the linears): its efficiency stays the "
                      "bandwidth's");
  }
  if (decodeSteps > 0 && decodeStepSeconds > decodeKernelSeconds)
    c.layerOverhead = (decodeStepSeconds - decodeKernelSeconds) /
                      double(decodeSteps) / double(layers);
  c.device.layerOverhead = c.layerOverhead;
  if (!tooSlow.empty())
    return tooSlow;
  return c;
}

} // namespace kiln::plan

//===- CostModel.h - kiln-plan's roofline and alpha-beta model ---*- C++ -*-===//
//
// Predicts, for one parallel recipe of a Llama-shaped model on a cluster,
// the time to first token (TTFT), the time per output token (TPOT), the
// decode throughput and the memory per device, from
//   * per-op roofline terms: each stage's weight and KV-cache bytes over
//     the device's memory bandwidth, its FLOPs over the device's peak, each
//     scaled by an efficiency (the fraction of the bound Kiln's kernels
//     reach: measured on the target, or the documented defaults), plus a
//     fixed cost per layer (kernel launches);
//   * an alpha-beta model per link (Hockney 1994): a collective or transfer
//     of n bytes costs alpha + n / beta per step, ring all-reduce 2 (N - 1)
//     steps of n / N bytes (Patarasuk & Yuan 2009), reduce-scatter and
//     all-gather N - 1 each;
//   * memory = weights + KV cache + activations, per device.
// docs/planning.md states every equation and constant.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TOOLS_KILN_PLAN_COSTMODEL_H
#define KILN_TOOLS_KILN_PLAN_COSTMODEL_H

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kiln::plan {

/// A device: memory (bytes), memory bandwidth (bytes/s), dense peak of the
/// recipe's activation dtype (FLOP/s), the efficiencies Kiln reaches of
/// each (0..1], and the fixed cost of one layer's kernels (seconds).
struct Device {
  std::string name;
  double memoryBytes = 0;
  double bandwidth = 0;    ///< bytes/s
  double peakFlops = 0;    ///< FLOP/s, 16-bit dense (f32 on cpu)
  double bandwidthEfficiency = 0.75;
  double flopEfficiency = 0.6;
  double layerOverhead = 0; ///< seconds per layer (launches)
  bool gpu = true;
  /// Memory bandwidth of a node shared by its devices (bytes/s; 0: each
  /// device has its own): CPU ranks of one machine share its memory.
  double nodeBandwidth = 0;
  /// Weight bytes per second one device's decode GEMV reaches per weight
  /// format, where dequantization, not memory, bounds it (the CPU's w8a16,
  /// w4a16 and GGML block kernels; kiln-gemv-bench); absent: bandwidth.
  std::vector<std::pair<std::string, double>> formatBandwidth;
  /// Per kind of kernel, where a measurement (calibrateDevice) says it
  /// differs from the two efficiencies above: the KV cache's reads in
  /// decode attention, the elementwise kernels' traffic in prefill (norms,
  /// adds, RoPE, SwiGLU), causal attention's FLOPs in prefill. Absent:
  /// bandwidthEfficiency / flopEfficiency.
  std::optional<double> kvBandwidthEfficiency, elementwiseBandwidthEfficiency,
      attentionFlopEfficiency;
};

/// A link's alpha-beta terms: alpha seconds per step, beta bytes/s.
struct Link {
  std::string name;
  double alpha = 0;
  double beta = 0;
  /// Extra latency of a transfer to a peer that waited long for it (a
  /// CPU rank sleeping between polls wakes late; 0 on GPU links).
  double idleWake = 0;
};

/// N devices, gpusPerNode per node; intra links the devices of a node,
/// inter the nodes.
struct Cluster {
  Device device;
  int64_t devices = 1;
  int64_t devicesPerNode = 1;
  Link intra, inter;
};

/// The shapes the model's cost depends on, and its weight bytes as stored.
struct ModelShape {
  std::string name;
  int64_t layers = 0, dim = 0, hidden = 0, heads = 0, kvHeads = 0,
          headDim = 0, vocab = 0, context = 0;
  bool tied = false;
  /// Bytes of the checkpoint's layer weights and classifier as stored
  /// (GGUF blocks, f16 ...): the "as stored" recipe.
  double storedLayerBytes = 0, storedClassifierBytes = 0;
  std::string storedName = "f32";
  /// Parameters of one layer (q, k, v, o, gate, up, down) and of the
  /// classifier.
  double layerParams() const;
  double classifierParams() const { return double(vocab) * double(dim); }
};

/// The weight format of a recipe: bytes per parameter (with scales), the
/// name kiln-compile knows, and how precise it is (higher is better).
struct WeightFormat {
  std::string name;  ///< "bf16", "f32", "w8a16", "w4a16", "as-stored"
  double bytesPerParam = 2;
  int precision = 16; ///< effective bits, for the precision-first order
};

/// One parallel recipe.
struct Recipe {
  int64_t tp = 1, pp = 1;
  bool sp = false;
  WeightFormat weights;
  std::string kv = "bf16"; ///< KV-cache dtype: bf16, f16, f32, int8, fp8
  double kvBytes = 2;
  double actBytes = 2;     ///< activation element bytes
};

/// What is asked of the recipe.
struct Workload {
  int64_t concurrency = 1;   ///< sequences decoded together (batch)
  int64_t context = 4096;    ///< KV positions per sequence (decode reads)
  int64_t promptTokens = 0;  ///< TTFT's prompt (0: context / 2)
  int64_t maxPrefillTokens = 512; ///< activation plan's rows
  int64_t spMinTokens = 256; ///< SP splits prompts from this length
};

/// Seconds and bytes of one recipe, with the terms that make them up.
struct Prediction {
  double ttft = 0, tpot = 0;    ///< seconds
  double throughput = 0;        ///< generated tokens/s, all sequences
  double memoryPerDevice = 0;   ///< bytes, the most loaded device
  double weightBytesPerDevice = 0, kvBytesPerDevice = 0,
         activationBytesPerDevice = 0;
  /// TPOT's parts: weight/KV reads, compute, collectives and transfers.
  double decodeMemoryTime = 0, decodeComputeTime = 0, decodeCommTime = 0;
  double prefillComputeTime = 0, prefillCommTime = 0;
  bool tpCrossesNodes = false, ppCrossesNodes = false;
  /// The rates used: weights (the format's GEMV rate or the memory's) and
  /// the KV cache, bytes/s per device after efficiency and node sharing.
  double weightBandwidth = 0, kvBandwidth = 0;
};

/// Why a recipe cannot run at all (shapes that do not divide, too many
/// stages), or std::nullopt.
std::optional<std::string> structuralProblem(const ModelShape &m,
                                             const Recipe &r);

/// The prediction for `r` (structuralProblem(m, r) must be empty).
Prediction predict(const ModelShape &m, const Cluster &c, const Recipe &r,
                   const Workload &w);

/// Ring collective times (seconds) of `bytes` (the full tensor) over
/// `ranks` ranks on `link`: all-reduce 2 (N-1) steps of bytes / N,
/// reduce-scatter and all-gather N - 1 each.
double allReduceTime(double bytes, int64_t ranks, const Link &link);
double allGatherTime(double bytes, int64_t ranks, const Link &link);

/// The documented device and link tables (docs/planning.md): a100-80g,
/// h100-sxm, h200, cpu (this machine's measured rank); links nvlink-a100,
/// nvlink-h100, infiniband-hdr, infiniband-ndr, pcie4, shm.
std::optional<Device> deviceNamed(const std::string &name);
std::optional<Link> linkNamed(const std::string &name);

/// One row of the ranking.
struct Candidate {
  Recipe recipe;
  Prediction prediction;
  /// Empty when every limit holds; else what binds first: "memory",
  /// "ttft", "tpot".
  std::string violates;
  std::string why; ///< the violation with numbers
};

/// The SLO: seconds (0: none).
struct Slo {
  double ttft = 0, tpot = 0;
};

/// Every structurally valid recipe with tp * pp = the cluster's devices,
/// SP on and off (TP > 1), the weight formats of `formats` and the KV
/// dtypes of `kvs`, predicted, checked against memory and `slo`, and
/// ordered: feasible first, then more precise weights and KV, then lower
/// TPOT, then lower TTFT.
std::vector<Candidate> rank(const ModelShape &m, const Cluster &c,
                            const Workload &w, const Slo &slo,
                            const std::vector<WeightFormat> &formats,
                            const std::vector<std::string> &kvs);

/// One kernel call of a Kiln trace (kiln-bench / kiln-run --trace: the
/// "kernel" events' args): its op kind ("linear", "attention", fused
/// "rms_norm+linear+rope" ...), seconds, bytes and FLOPs the compiler
/// counted, and the step's rows (1 in decode).
struct TraceKernel {
  std::string kind, name;
  double seconds = 0, bytes = 0, flops = 0;
  int64_t tokens = 0;
};

/// What a trace says about a device: achieved rates per class of kernel,
/// the efficiencies they are of the device's bandwidth and peak (clamped
/// to [1e-3, 1]; a bandwidth or peak the linears exceeded is raised to
/// their rate first), and the layer overhead.
struct DeviceCalibration {
  Device device; ///< base with the measured efficiencies
  /// bytes/s or FLOP/s achieved: decode linears (weights), decode
  /// attention (KV), prefill linears (FLOP/s), prefill attention (FLOP/s),
  /// prefill elementwise (bytes/s); 0 where the trace had none.
  double decodeLinearRate = 0, decodeAttentionRate = 0,
         prefillLinearRate = 0, prefillAttentionRate = 0,
         prefillElementwiseRate = 0;
  double layerOverhead = 0; ///< seconds per layer, decode
  std::vector<std::string> notes; ///< clamped values, missing classes
};

/// Calibrates `base` from the kernels of one single-rank run with prefill
/// and decode steps (`decodeStepSeconds`: the decode steps' total,
/// `decodeSteps` of them; `layers` of the model). Kernel classes by op
/// kind: a kind naming "linear" or "logits" is a linear (weight bytes in
/// decode, GEMM FLOPs in prefill), "attention" attention, anything else
/// elementwise. `format`: "" (the activation dtype's weights: the decode
/// linears' rate sets bandwidthEfficiency) or w8a16 / w4a16 / as-stored
/// (it sets formatBandwidth[format], bounded by dequantization). The
/// layer overhead is the decode time outside the linears and attention
/// (norms, the embedding, launches, the step's bookkeeping), per layer.
/// Returns an error message (also when a class reaches less than 0.1% of
/// the device's figure: a trace of another device), or the calibration.
std::variant<std::string, DeviceCalibration>
calibrateDevice(const Device &base, const std::vector<TraceKernel> &kernels,
                double decodeStepSeconds, int64_t decodeSteps, int64_t layers,
                const std::string &format);

/// The kiln-compile flags of a recipe (target cpu or cuda).
std::string compileFlags(const Recipe &r, bool gpu);

} // namespace kiln::plan

#endif // KILN_TOOLS_KILN_PLAN_COSTMODEL_H

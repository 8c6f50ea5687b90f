//===- kiln-plan.cpp - the parallel recipe for a latency target -----------===//
//
// kiln-plan MODEL (--cluster FILE | --gpus N [--gpus-per-node G]
//                  [--gpu a100-80g|h100-sxm|h200|cpu])
//           [--slo-ttft 50ms] [--slo-tpot 50ms] [--concurrency C]
//           [--context L] [--prompt-tokens P] [--top K] [--emit-flags]
//
// Ranks the recipes (TP, PP, SP on/off, weight format, KV dtype) that use
// the cluster's devices by the cost model of CostModel.h, explains the
// winner and prints the kiln-compile command that builds it. Exit status
// 1 when no recipe meets the SLO and memory, naming the binding
// constraint of the closest one. docs/planning.md.
//
//===----------------------------------------------------------------------===//
#include "tools/kiln-plan/CostModel.h"

#include "dialects/Kiln/Import/ImportUtils.h"
#include "dialects/Kiln/Import/ModelDesc.h"
#include "tools/common/ToolSupport.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

using namespace llvm;
using namespace kiln::plan;

static cl::OptionCategory category("kiln-plan options");
static cl::opt<std::string> modelPath(cl::Positional, cl::desc("MODEL"),
                                      cl::cat(category));
static cl::opt<std::string> calibrateTrace(
    "calibrate",
    cl::desc("Instead of planning: read a Kiln trace of one single-rank run "
             "(kiln-bench ARTIFACT --prompt-tokens P --decode-tokens D "
             "--trace FILE) and print the --gpu device with the "
             "efficiencies that run reached per kind of kernel, as a "
             "cluster file's \"device\" object (docs/planning.md)"),
    cl::value_desc("TRACE.json"), cl::cat(category));
static cl::opt<std::string> calibrateFormat(
    "calibrate-format",
    cl::desc("With --calibrate: the traced artifact's weight format, "
             "plain (the activation dtype's, default), w8a16, w4a16 or "
             "as-stored (GGUF blocks): a quantized format's decode rate "
             "goes to format_bandwidth_gbs"),
    cl::init("plain"), cl::value_desc("FORMAT"), cl::cat(category));
static cl::opt<std::string> clusterFile(
    "cluster",
    cl::desc("JSON file describing the devices and links (docs/planning.md); "
             "instead of --gpus / --gpu"),
    cl::value_desc("FILE"), cl::cat(category));
static cl::opt<int64_t> gpus("gpus", cl::desc("Devices the recipe uses"),
                             cl::init(0), cl::value_desc("N"),
                             cl::cat(category));
static cl::opt<int64_t> gpusPerNode(
    "gpus-per-node", cl::desc("Devices per node (default: all of them)"),
    cl::init(0), cl::value_desc("G"), cl::cat(category));
static cl::opt<std::string> gpuName(
    "gpu",
    cl::desc("Device: a100-80g, h100-sxm, h200, or cpu (one rank of this "
             "machine; default a100-80g)"),
    cl::init("a100-80g"), cl::cat(category));
static cl::opt<std::string> sloTtft(
    "slo-ttft", cl::desc("Time to first token limit (e.g. 500ms, 0.5s)"),
    cl::value_desc("T"), cl::cat(category));
static cl::opt<std::string> sloTpot(
    "slo-tpot", cl::desc("Time per output token limit (e.g. 50ms)"),
    cl::value_desc("T"), cl::cat(category));
static cl::opt<int64_t> concurrency(
    "concurrency", cl::desc("Sequences decoded together (default 1)"),
    cl::init(1), cl::value_desc("C"), cl::cat(category));
static cl::opt<int64_t> contextLength(
    "context", cl::desc("KV positions per sequence (default: the model's "
                        "context)"),
    cl::init(0), cl::value_desc("L"), cl::cat(category));
static cl::opt<int64_t> promptTokens(
    "prompt-tokens",
    cl::desc("Prompt length of the TTFT prediction (default: context / 2)"),
    cl::init(0), cl::value_desc("P"), cl::cat(category));
static cl::opt<int64_t> topK("top", cl::desc("Rows of the table (default 5)"),
                             cl::init(5), cl::value_desc("K"),
                             cl::cat(category));
static cl::opt<bool> emitFlags(
    "emit-flags",
    cl::desc("Print only the winner's kiln-compile flags (for scripts)"),
    cl::cat(category));

[[noreturn]] static void fail(const Twine &message) {
  errs() << "kiln-plan: error: " << message << "\n";
  std::exit(1);
}

/// "50ms", "0.5s", "800us" -> seconds; 0 for "".
static double parseDuration(const std::string &flag, const std::string &text,
                            bool given) {
  if (text.empty() && !given)
    return 0;
  StringRef s(text), number;
  double scale = 0;
  if (s.ends_with("ms"))
    number = s.drop_back(2), scale = 1e-3;
  else if (s.ends_with("us"))
    number = s.drop_back(2), scale = 1e-6;
  else if (s.ends_with("s"))
    number = s.drop_back(1), scale = 1;
  double v = 0;
  if (scale == 0 || number.empty() || number.getAsDouble(v) || !(v > 0) ||
      !std::isfinite(v))
    fail("--" + flag + "=" + text +
         " is not a positive duration with a unit (e.g. 50ms, 0.5s, 800us)");
  return v * scale;
}

/// The model's shapes and stored weight bytes.
static ModelShape shapeOf(const mlir::kiln::ModelDesc &desc) {
  const mlir::kiln::LlamaConfig &c = desc.config;
  ModelShape m;
  m.name = c.sourcePath;
  m.layers = c.nLayers;
  m.dim = c.dim;
  m.hidden = c.hiddenDim;
  m.heads = c.nHeads;
  m.kvHeads = c.nKvHeads;
  m.headDim = c.headDim;
  m.vocab = c.vocabSize;
  m.context = c.maxSeqLen;
  m.tied = c.tiedEmbeddings;
  std::string storage;
  for (const mlir::kiln::WeightDesc &w : desc.weights) {
    const double bytes = double(w.source.bytes);
    StringRef name(w.name);
    if (name.starts_with("layers.") &&
        (name.ends_with(".wq") || name.ends_with(".wk") ||
         name.ends_with(".wv") || name.ends_with(".wo") ||
         name.ends_with(".w1") || name.ends_with(".w2") ||
         name.ends_with(".w3"))) {
      m.storedLayerBytes += bytes;
      if (storage.empty())
        storage = mlir::kiln::stringifyStorageType(w.source.storage).str();
      else if (storage !=
               mlir::kiln::stringifyStorageType(w.source.storage).str())
        storage = "mixed";
    } else if (name == "output" || (m.tied && name == "tok_embeddings")) {
      m.storedClassifierBytes = bytes;
    }
  }
  m.storedName = storage.empty() ? "f32" : storage;
  return m;
}

/// A number as the shortest text that reads back ("1e-06", "1000000").
static std::string str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

/// Refuses keys of `o` outside `known` (a typo would otherwise be ignored).
static void checkKeys(const json::Object &o, ArrayRef<StringRef> known,
                      StringRef file, StringRef where) {
  for (const auto &kv : o) {
    StringRef key = kv.first;
    if (!llvm::is_contained(known, key))
      fail(file + ": unknown field " + where + key + " (expected one of " +
           join(known, ", ") + ")");
  }
}

/// A number field of `o` in [lo, hi] (finite), or std::nullopt when absent;
/// a field of another type or out of range ends the run naming it.
static std::optional<double> numberField(const json::Object &o, StringRef key,
                                         double lo, double hi, StringRef file,
                                         StringRef where) {
  const json::Value *v = o.get(key);
  if (!v)
    return std::nullopt;
  std::optional<double> x = v->getAsNumber();
  if (!x || !std::isfinite(*x) || *x < lo || *x > hi)
    fail(file + ": " + where + key + " must be a number in [" + str(lo) +
         ", " + str(hi) + "]");
  return x;
}

static double requiredNumber(const json::Object &o, StringRef key, double lo,
                             double hi, StringRef file, StringRef where) {
  std::optional<double> x = numberField(o, key, lo, hi, file, where);
  if (!x)
    fail(file + ": " + where + key + " (a number in [" + str(lo) + ", " +
         str(hi) + "]) is missing");
  return *x;
}

/// A device or link given in the cluster file by name or as an object.
static Device deviceFrom(const json::Value &v, StringRef file) {
  if (auto name = v.getAsString()) {
    std::optional<Device> d = deviceNamed(name->str());
    if (!d)
      fail(file + ": device '" + *name +
           "' is not one of a100-80g, h100-sxm, h200, cpu");
    return *d;
  }
  const json::Object *o = v.getAsObject();
  if (!o)
    fail(file + ": \"device\" must be a name or an object");
  checkKeys(*o,
            {"name", "memory_gib", "bandwidth_gbs", "peak_tflops",
             "bandwidth_efficiency", "flop_efficiency", "layer_overhead_us",
             "gpu", "node_bandwidth_gbs", "format_bandwidth_gbs",
             "kv_bandwidth_efficiency", "elementwise_bandwidth_efficiency",
             "attention_flop_efficiency"},
            file, "device.");
  Device d;
  if (const json::Value *name = o->get("name")) {
    if (!name->getAsString())
      fail(file + ": device.name must be a string");
    d.name = name->getAsString()->str();
  } else {
    d.name = "custom";
  }
  // Ranges: 1e-6 of a unit up to 1e6 (a petabyte, a petabyte/s, an
  // exaflop/s); outside them the predictions lose all meaning.
  d.memoryBytes =
      requiredNumber(*o, "memory_gib", 1e-6, 1e6, file, "device.") * 1024.0 *
      1024.0 * 1024.0;
  d.bandwidth =
      requiredNumber(*o, "bandwidth_gbs", 1e-6, 1e6, file, "device.") * 1e9;
  d.peakFlops =
      requiredNumber(*o, "peak_tflops", 1e-6, 1e6, file, "device.") * 1e12;
  d.bandwidthEfficiency =
      numberField(*o, "bandwidth_efficiency", 1e-3, 1, file, "device.")
          .value_or(d.bandwidthEfficiency);
  d.flopEfficiency = numberField(*o, "flop_efficiency", 1e-3, 1, file, "device.")
                         .value_or(d.flopEfficiency);
  d.layerOverhead =
      numberField(*o, "layer_overhead_us", 0, 1e6, file, "device.")
          .value_or(0) *
      1e-6;
  // Per kind of kernel (kiln-plan --calibrate).
  d.kvBandwidthEfficiency =
      numberField(*o, "kv_bandwidth_efficiency", 1e-3, 1, file, "device.");
  d.elementwiseBandwidthEfficiency = numberField(
      *o, "elementwise_bandwidth_efficiency", 1e-3, 1, file, "device.");
  d.attentionFlopEfficiency =
      numberField(*o, "attention_flop_efficiency", 1e-3, 1, file, "device.");
  if (const json::Value *gpu = o->get("gpu")) {
    if (!gpu->getAsBoolean())
      fail(file + ": device.gpu must be true or false");
    d.gpu = *gpu->getAsBoolean();
  }
  if (std::optional<double> node =
          numberField(*o, "node_bandwidth_gbs", 1e-6, 1e6, file, "device."))
    d.nodeBandwidth = *node * 1e9;
  if (const json::Value *formats = o->get("format_bandwidth_gbs")) {
    const json::Object *f = formats->getAsObject();
    if (!f)
      fail(file + ": device.format_bandwidth_gbs must be an object of "
                  "weight format -> GB/s");
    checkKeys(*f, {"w8a16", "w4a16", "as-stored"}, file,
              "device.format_bandwidth_gbs.");
    for (const auto &kv : *f) {
      std::optional<double> gbs = numberField(
          *f, kv.first, 1e-6, 1e6, file, "device.format_bandwidth_gbs.");
      d.formatBandwidth.push_back({StringRef(kv.first).str(), *gbs * 1e9});
    }
  }
  return d;
}

static Link linkFrom(const json::Value &v, StringRef file, StringRef key) {
  if (auto name = v.getAsString()) {
    std::optional<Link> l = linkNamed(name->str());
    if (!l)
      fail(file + ": link '" + *name +
           "' is not one of nvlink-a100, nvlink-h100, infiniband-hdr, "
           "infiniband-ndr, pcie4, shm");
    return *l;
  }
  const json::Object *o = v.getAsObject();
  if (!o)
    fail(file + ": \"" + key +
         "\" must be a link name or {\"alpha_us\": ..., \"beta_gbs\": ...}");
  const std::string where = (key + ".").str();
  checkKeys(*o, {"name", "alpha_us", "beta_gbs", "idle_wake_us"}, file, where);
  Link l;
  if (const json::Value *name = o->get("name")) {
    if (!name->getAsString())
      fail(file + ": " + where + "name must be a string");
    l.name = name->getAsString()->str();
  } else {
    l.name = key.str();
  }
  l.alpha = requiredNumber(*o, "alpha_us", 0, 1e6, file, where) * 1e-6;
  l.beta = requiredNumber(*o, "beta_gbs", 1e-6, 1e6, file, where) * 1e9;
  l.idleWake =
      numberField(*o, "idle_wake_us", 0, 1e6, file, where).value_or(0) * 1e-6;
  return l;
}

static Cluster clusterFromFile(StringRef file) {
  // Bounded, depth-checked (llvm::json::parse recurses per level), a
  // regular file: the importers' reader.
  Expected<json::Value> parsed = mlir::kiln::detail::readJsonFile(
      file, mlir::kiln::detail::kMaxJsonConfigBytes, "a cluster description (JSON)");
  if (!parsed)
    fail(toString(parsed.takeError()));
  const json::Object *o = parsed->getAsObject();
  if (!o)
    fail(file + ": expected a JSON object");
  checkKeys(*o, {"device", "devices", "devices_per_node", "intra", "inter"},
            file, "");
  Cluster c;
  const json::Value *device = o->get("device");
  if (!device)
    fail(file + ": \"device\" is missing");
  c.device = deviceFrom(*device, file);
  std::optional<int64_t> n = o->getInteger("devices");
  if (!n || *n < 1 || *n > 4096)
    fail(file + ": \"devices\" must be an integer in [1, 4096]");
  c.devices = *n;
  c.devicesPerNode = c.devices;
  if (const json::Value *perNode = o->get("devices_per_node")) {
    std::optional<int64_t> g = perNode->getAsInteger();
    if (!g)
      fail(file + ": \"devices_per_node\" must be an integer");
    c.devicesPerNode = *g;
  }
  if (c.devicesPerNode < 1 || c.devices % c.devicesPerNode)
    fail(file + ": \"devices_per_node\" must divide \"devices\"");
  const json::Value *intra = o->get("intra"), *inter = o->get("inter");
  if (!intra)
    fail(file + ": \"intra\" (the link inside a node) is missing");
  c.intra = linkFrom(*intra, file, "intra");
  c.inter = inter ? linkFrom(*inter, file, "inter") : c.intra;
  if (!inter && c.devicesPerNode < c.devices)
    fail(file + ": \"inter\" (the link between nodes) is missing");
  return c;
}

/// "tp=8 pp=1 sp bf16 kv=bf16" without the table's padding.
static std::string recipeLabel(const Recipe &r) {
  std::string s = "tp=" + std::to_string(r.tp) + " pp=" + std::to_string(r.pp);
  if (r.sp)
    s += " sp";
  return s + " " + r.weights.name + " kv=" + r.kv;
}

static std::string recipeName(const Recipe &r) {
  std::string s = "tp=" + std::to_string(r.tp) + " pp=" + std::to_string(r.pp);
  s += r.sp ? " sp" : "   ";
  s += " " + r.weights.name + " kv=" + r.kv;
  return s;
}

/// kiln-plan --calibrate TRACE: the --gpu device calibrated from a Kiln
/// trace, printed as a cluster file's "device" object.
static int calibrate() {
  const std::string file = calibrateTrace;
  std::optional<Device> base = deviceNamed(gpuName);
  if (!base)
    fail("--gpu=" + gpuName + " is not one of a100-80g, h100-sxm, h200, cpu");
  std::string format = calibrateFormat;
  if (format != "plain" && format != "w8a16" && format != "w4a16" &&
      format != "as-stored")
    fail("--calibrate-format=" + format +
         " is not one of plain, w8a16, w4a16, as-stored");
  if (format == "plain")
    format.clear();
  // A 4K-token prefill with decode traces a few thousand events per step:
  // 256 MiB is far above any real trace and bounds a hostile one.
  Expected<json::Value> parsed = mlir::kiln::detail::readJsonFile(
      file, uint64_t(256) << 20, "a Kiln trace (JSON)");
  if (!parsed)
    fail(toString(parsed.takeError()));
  const json::Object *root = parsed->getAsObject();
  const json::Array *events =
      root ? root->getArray("traceEvents") : parsed->getAsArray();
  if (!events)
    fail(file + ": not a Kiln trace: expected {\"traceEvents\": [...]}");
  std::vector<TraceKernel> kernels;
  double decodeSeconds = 0;
  int64_t decodeSteps = 0, prefillSteps = 0;
  std::set<int64_t> layerIds;
  size_t index = 0;
  for (const json::Value &e : *events) {
    ++index;
    const json::Object *o = e.getAsObject();
    if (!o)
      fail(file + ": traceEvents[" + Twine(index - 1) + "] is not an object");
    std::optional<StringRef> cat = o->getString("cat");
    std::optional<StringRef> ph = o->getString("ph");
    if (!cat || !ph || *ph != "X")
      continue;
    std::optional<double> dur = o->getNumber("dur"); // microseconds
    const json::Object *args = o->getObject("args");
    if (*cat != "kernel" && *cat != "step")
      continue;
    if (!dur || !std::isfinite(*dur) || *dur < 0 || !args)
      fail(file + ": traceEvents[" + Twine(index - 1) +
           "]: a kernel or step event needs a non-negative \"dur\" and "
           "\"args\"");
    std::optional<double> tokens = args->getNumber("tokens");
    if (!tokens || !(*tokens >= 1) || *tokens > 1e9)
      fail(file + ": traceEvents[" + Twine(index - 1) +
           "]: args.tokens must be a positive row count");
    if (*cat == "step") {
      std::optional<StringRef> name = o->getString("name");
      if (name && *name == "decode") {
        decodeSeconds += *dur * 1e-6;
        ++decodeSteps;
      } else if (name && *name == "prefill") {
        ++prefillSteps;
      }
      continue;
    }
    TraceKernel k;
    k.name = o->getString("name").value_or("?").str();
    k.kind = args->getString("kind").value_or("").str();
    k.seconds = *dur * 1e-6;
    std::optional<double> bytes = args->getNumber("bytes");
    std::optional<double> flops = args->getNumber("flops");
    if (!bytes || !flops || !std::isfinite(*bytes) || !std::isfinite(*flops) ||
        *bytes < 0 || *flops < 0)
      fail(file + ": traceEvents[" + Twine(index - 1) + "] ('" + k.name +
           "'): args.bytes and args.flops must be non-negative numbers");
    k.bytes = *bytes;
    k.flops = *flops;
    k.tokens = int64_t(*tokens);
    // Layers from the locations ("layers.3.wq", "layers.3.wo+...").
    StringRef loc = args->getString("loc").value_or("");
    for (size_t at = loc.find("layers."); at != StringRef::npos;
         at = loc.find("layers.", at + 7)) {
      int64_t id = 0;
      StringRef rest = loc.substr(at + 7);
      if (!rest.consumeInteger(10, id) && id >= 0 && id < 100000)
        layerIds.insert(id);
    }
    kernels.push_back(std::move(k));
  }
  if (kernels.empty() || !decodeSteps || !prefillSteps)
    fail(file + ": the trace needs a prefill and a decode step with their "
                "kernels (kiln-bench ARTIFACT --prompt-tokens P "
                "--decode-tokens D --trace FILE; one rank)");
  auto result = calibrateDevice(*base, kernels, decodeSeconds, decodeSteps,
                                int64_t(layerIds.size()), format);
  if (auto *error = std::get_if<std::string>(&result))
    fail(file + ": " + *error);
  const DeviceCalibration &c = std::get<DeviceCalibration>(result);
  const Device &d = c.device;
  // What a cluster file accepts (deviceFrom): a trace whose numbers put the
  // device outside it is refused rather than printed.
  auto plausible = [&](double v, double lo, double hi, const char *what) {
    if (!(v >= lo && v <= hi) || !std::isfinite(v))
      fail(file + ": the trace gives an implausible " + what + " (" +
           str(v) + ", expected [" + str(lo) + ", " + str(hi) +
           "]): its durations, bytes or FLOPs are not a real run's");
  };
  plausible(d.bandwidth / 1e9, 1e-6, 1e6, "bandwidth in GB/s");
  plausible(d.peakFlops / 1e12, 1e-6, 1e6, "peak in TFLOP/s");
  plausible(d.layerOverhead * 1e6, 0, 1e6, "layer overhead in us");
  for (const auto &[name, rate] : d.formatBandwidth)
    plausible(rate / 1e9, 1e-6, 1e6, "format GEMV rate in GB/s");
  for (double e : {d.bandwidthEfficiency, d.flopEfficiency,
                   d.kvBandwidthEfficiency.value_or(1.0),
                   d.elementwiseBandwidthEfficiency.value_or(1.0),
                   d.attentionFlopEfficiency.value_or(1.0)})
    plausible(e, 1e-3, 1, "efficiency");
  // What was measured, on stderr; the device object on stdout.
  auto gb = [](double v) { return str(v / 1e9); };
  llvm::errs() << "kiln-plan: calibrated " << gpuName << " from " << file
               << " (" << kernels.size() << " kernel calls, "
               << layerIds.size() << " layers, " << decodeSteps
               << " decode steps)\n"
               << "  decode linears:      " << gb(c.decodeLinearRate)
               << " GB/s of weights\n"
               << "  decode attention:    " << gb(c.decodeAttentionRate)
               << " GB/s of KV cache\n"
               << "  prefill linears:     " << gb(c.prefillLinearRate)
               << " GFLOP/s\n"
               << "  prefill attention:   " << gb(c.prefillAttentionRate)
               << " GFLOP/s\n"
               << "  prefill elementwise: " << gb(c.prefillElementwiseRate)
               << " GB/s\n"
               << "  layer overhead:      " << str(c.layerOverhead * 1e6)
               << " us per layer and decode step\n";
  for (const std::string &note : c.notes)
    llvm::errs() << "  note: " << note << "\n";
  json::Object device{
      {"name", d.name + " (calibrated)"},
      {"memory_gib", d.memoryBytes / (1024.0 * 1024.0 * 1024.0)},
      {"bandwidth_gbs", d.bandwidth / 1e9},
      {"peak_tflops", d.peakFlops / 1e12},
      {"bandwidth_efficiency", d.bandwidthEfficiency},
      {"flop_efficiency", d.flopEfficiency},
      {"layer_overhead_us", d.layerOverhead * 1e6},
      {"gpu", d.gpu}};
  if (d.kvBandwidthEfficiency)
    device["kv_bandwidth_efficiency"] = *d.kvBandwidthEfficiency;
  if (d.elementwiseBandwidthEfficiency)
    device["elementwise_bandwidth_efficiency"] =
        *d.elementwiseBandwidthEfficiency;
  if (d.attentionFlopEfficiency)
    device["attention_flop_efficiency"] = *d.attentionFlopEfficiency;
  if (d.nodeBandwidth > 0)
    device["node_bandwidth_gbs"] = d.nodeBandwidth / 1e9;
  if (!d.formatBandwidth.empty()) {
    json::Object formats;
    for (const auto &[name, rate] : d.formatBandwidth)
      formats[name] = rate / 1e9;
    device["format_bandwidth_gbs"] = std::move(formats);
  }
  llvm::outs() << formatv("{0:2}", json::Value(std::move(device))) << "\n";
  return 0;
}

int main(int argc, char **argv) {
  kiln::tool::ToolMain tool(argc, argv, "kiln-plan",
                            kiln::tool::ToolKind::Compiler);
  cl::HideUnrelatedOptions(category);
  kiln::tool::parseCommandLine(
      argc, argv,
      "Kiln planner: the parallel recipe for a model, a cluster and a "
      "latency target\n\n"
      "  kiln-plan MODEL --gpus N [--gpus-per-node G] [--gpu NAME]\n"
      "            [--slo-ttft 500ms] [--slo-tpot 50ms] [--concurrency C]\n"
      "            [--context L] [--prompt-tokens P] [--emit-flags]\n\n"
      "Ranks the recipes over the N devices (tensor x pipeline parallelism,\n"
      "sequence parallelism, weight format, KV dtype) by the roofline and\n"
      "alpha-beta cost model of docs/planning.md: feasible ones first (memory\n"
      "and SLO), then the more precise, then by TPOT and TTFT. Prints the\n"
      "winner's kiln-compile command.\n",
      {});

  if (calibrateTrace.getNumOccurrences()) {
    if (calibrateTrace.empty())
      fail("--calibrate needs a trace file (kiln-bench ... --trace FILE)");
    if (!modelPath.empty())
      fail("--calibrate reads a trace, not a model: drop " + modelPath);
    if (!gpuName.getNumOccurrences())
      fail("--calibrate needs --gpu NAME: the device the trace was taken "
           "on (a100-80g, h100-sxm, h200 or cpu)");
    // Only the device and the format apply; planning flags would be
    // silently ignored.
    for (cl::Option *o :
         std::initializer_list<cl::Option *>{
             &clusterFile, &gpus, &gpusPerNode, &sloTtft, &sloTpot,
             &concurrency, &contextLength, &promptTokens, &topK, &emitFlags})
      if (o->getNumOccurrences())
        fail("--calibrate takes only --gpu and --calibrate-format; --" +
             o->ArgStr + " is for planning");
    return calibrate();
  }
  if (calibrateFormat.getNumOccurrences())
    fail("--calibrate-format needs --calibrate TRACE.json");
  if (modelPath.empty())
    fail("a MODEL is required (a checkpoint, or synthetic:<shape>)");

  const double ttftLimit =
      parseDuration("slo-ttft", sloTtft, sloTtft.getNumOccurrences() > 0);
  const double tpotLimit =
      parseDuration("slo-tpot", sloTpot, sloTpot.getNumOccurrences() > 0);
  // 0 is the default's stand-in, not a value a user may give.
  for (cl::opt<int64_t> *o : {&contextLength, &promptTokens, &gpusPerNode})
    if (o->getNumOccurrences() && *o < 1)
      fail("--" + o->ArgStr + "=" + Twine(int64_t(*o)) +
           " must be at least 1");
  if (concurrency < 1 || concurrency > 1 << 20)
    fail("--concurrency=" + Twine(int64_t(concurrency)) +
         " must be in [1, 1048576]");
  if (topK < 1)
    fail("--top must be at least 1");

  Cluster cluster;
  if (!clusterFile.empty()) {
    if (gpus.getNumOccurrences() || gpusPerNode.getNumOccurrences() ||
        gpuName.getNumOccurrences())
      fail("--cluster describes the devices; drop --gpus, --gpus-per-node "
           "and --gpu");
    cluster = clusterFromFile(clusterFile);
  } else {
    if (!gpus.getNumOccurrences())
      fail("--gpus N (devices, 1..4096) or --cluster FILE is required");
    if (gpus < 1 || gpus > 4096)
      fail("--gpus=" + Twine(int64_t(gpus)) + " must be in [1, 4096]");
    std::optional<Device> d = deviceNamed(gpuName);
    if (!d)
      fail("--gpu=" + gpuName +
           " is not one of a100-80g, h100-sxm, h200, cpu");
    cluster.device = *d;
    cluster.devices = gpus;
    cluster.devicesPerNode = gpusPerNode ? int64_t(gpusPerNode) : int64_t(gpus);
    if (cluster.devicesPerNode < 1 || gpus % cluster.devicesPerNode)
      fail("--gpus-per-node=" + Twine(int64_t(gpusPerNode)) +
           " must divide --gpus=" + Twine(int64_t(gpus)));
    const std::string intra = gpuName == "cpu"        ? "shm"
                              : gpuName == "a100-80g" ? "nvlink-a100"
                                                      : "nvlink-h100";
    const std::string inter = gpuName == "cpu"        ? "shm"
                              : gpuName == "a100-80g" ? "infiniband-hdr"
                                                      : "infiniband-ndr";
    cluster.intra = *linkNamed(intra);
    cluster.inter = *linkNamed(inter);
  }

  Expected<mlir::kiln::ModelDesc> desc = mlir::kiln::importModel(modelPath);
  if (!desc)
    fail(toString(desc.takeError()));
  ModelShape model = shapeOf(*desc);

  Workload work;
  work.concurrency = concurrency;
  work.context = contextLength ? int64_t(contextLength) : model.context;
  if (work.context < 1 || work.context > model.context)
    fail("--context=" + Twine(work.context) + " must be in [1, " +
         Twine(model.context) + "] (the model's context)");
  work.promptTokens = promptTokens ? int64_t(promptTokens)
                                   : std::max<int64_t>(1, work.context / 2);
  if (work.promptTokens < 1 || work.promptTokens > work.context)
    fail("--prompt-tokens=" + Twine(work.promptTokens) + " must be in [1, " +
         Twine(work.context) + "]");
  work.maxPrefillTokens = std::min<int64_t>(work.context, 512);
  const bool gpu = cluster.device.gpu;
  work.spMinTokens = gpu ? 1024 : 256; // kiln-compile --sp=auto

  std::vector<WeightFormat> formats;
  const double params =
      double(model.layers) * model.layerParams() + model.classifierParams();
  if (model.storedLayerBytes > 0 && model.storedName != "f32" &&
      model.storedName != "bf16" && model.storedName != "f16") {
    // GGML block formats stay as stored (kiln-compile keeps them; a
    // dequantized copy would add bytes, not precision).
    const double bpp =
        (model.storedLayerBytes + model.storedClassifierBytes) / params;
    formats.push_back({"as-stored", bpp, int(std::lround(bpp * 8))});
  } else {
    if (gpu)
      formats.push_back({"bf16", 2.0, 16});
    else
      formats.push_back({"f32", 4.0, 32});
    // Per-output-channel scales (w8a16) and groups of 128 with f16 scales
    // (w4a16-rtn): docs/quantization.md.
    formats.push_back({"w8a16", 1.0, 8});
    formats.push_back({"w4a16", 0.5 + 2.0 / 128, 4});
  }
  std::vector<std::string> kvs = {gpu ? "bf16" : "f32", "int8"};
  if (gpu)
    kvs.push_back("fp8");

  Slo slo{ttftLimit, tpotLimit};
  std::vector<Candidate> ranked =
      kiln::plan::rank(model, cluster, work, slo, formats, kvs);
  if (ranked.empty())
    fail(model.name + ": no recipe over " + Twine(cluster.devices) +
         " devices divides the model (heads " + Twine(model.heads) +
         ", KV heads " + Twine(model.kvHeads) + ", FFN " +
         Twine(model.hidden) + ", layers " + Twine(model.layers) + ")");
  std::string base = sys::path::stem(sys::path::filename(model.name)).str();
  if (StringRef(model.name).starts_with("synthetic:"))
    base = StringRef(model.name).drop_front(10).str();
  const Candidate &best = ranked.front();
  if (!best.violates.empty()) {
    // The closest: the smallest worst ratio of need to limit.
    const double usable =
        cluster.device.memoryBytes * (cluster.device.gpu ? 0.92 : 0.8);
    const Candidate *closest = nullptr;
    double closestRatio = 0;
    std::string binding;
    for (const Candidate &c : ranked) {
      const Prediction &p = c.prediction;
      std::pair<double, std::string> worst = {p.memoryPerDevice / usable,
                                              "memory"};
      if (slo.ttft > 0 && p.ttft / slo.ttft > worst.first)
        worst = {p.ttft / slo.ttft, "ttft"};
      if (slo.tpot > 0 && p.tpot / slo.tpot > worst.first)
        worst = {p.tpot / slo.tpot, "tpot"};
      if (!closest || worst.first < closestRatio) {
        closest = &c;
        closestRatio = worst.first;
        binding = worst.second;
      }
    }
    const Prediction &p = closest->prediction;
    // What could still help: more devices below the maximum, quantization
    // the closest recipe does not use yet, a smaller batch or prompt.
    const bool moreDevices = cluster.devices < 4096;
    const bool quantizable = closest->recipe.weights.precision > 4 ||
                             closest->recipe.kvBytes > 1;
    std::string remedy;
    auto add = [&](bool ok, const char *what) {
      if (ok)
        remedy += (remedy.empty() ? "" : ", ") + std::string(what);
    };
    add(moreDevices, "more devices");
    add(quantizable && binding != "ttft", "quantized weights / KV");
    add(binding != "ttft" && work.concurrency > 1, "a smaller batch");
    add(binding == "ttft", "a shorter prompt");
    add(binding == "memory", "a shorter context");
    if (remedy.empty())
      remedy = "a looser SLO";
    char line[512];
    std::snprintf(line, sizeof(line),
                  "TTFT %.1f ms, TPOT %.1f ms, %.1f GiB per device of %.1f "
                  "usable",
                  p.ttft * 1e3, p.tpot * 1e3,
                  p.memoryPerDevice / (1024.0 * 1024 * 1024),
                  usable / (1024.0 * 1024 * 1024));
    fail("no recipe on " + Twine(cluster.devices) + " x " +
         cluster.device.name + " meets the " +
         (binding == "memory" ? std::string("memory limit")
                              : "SLO (" + binding + ")") +
         ": the closest, " + recipeLabel(closest->recipe) + ", predicts " +
         line + "; binding constraint: " + binding + " (" + remedy + ")");
  }

  if (emitFlags) {
    outs() << compileFlags(best.recipe, gpu) << "\n";
    return 0;
  }
  outs() << "kiln-plan: " << model.name << " on " << cluster.devices << " x "
         << cluster.device.name << " (" << cluster.devicesPerNode
         << " per node; " << cluster.intra.name << ", " << cluster.inter.name
         << "), concurrency " << work.concurrency << ", context "
         << work.context << ", prompt " << work.promptTokens << " tokens";
  if (slo.ttft > 0 || slo.tpot > 0) {
    outs() << "; SLO";
    if (slo.ttft > 0)
      outs() << " TTFT " << format("%.0f", slo.ttft * 1e3) << " ms";
    if (slo.tpot > 0)
      outs() << " TPOT " << format("%.0f", slo.tpot * 1e3) << " ms";
  }
  outs() << "\n";
  outs() << format("%-5s %-32s %9s %9s %11s %11s  %s\n", "rank", "recipe",
                   "TTFT ms", "TPOT ms", "tokens/s", "GiB/device", "fits");
  int64_t shown = 0;
  for (const Candidate &c : ranked) {
    if (shown == topK)
      break;
    const Prediction &p = c.prediction;
    outs() << format("%-5lld %-32s %9.1f %9.2f %11.1f %11.1f  %s\n",
                     (long long)++shown, recipeName(c.recipe).c_str(),
                     p.ttft * 1e3, p.tpot * 1e3, p.throughput,
                     p.memoryPerDevice / (1024.0 * 1024 * 1024),
                     c.violates.empty() ? "yes" : ("no: " + c.why).c_str());
  }
  const Prediction &p = best.prediction;
  outs() << format(
      "\nwhy #1: TPOT %.2f ms = weights and KV reads %.2f ms (%.2f GiB at "
      "%.1f GB/s + %.2f GiB at %.1f GB/s per device) + kernel launches %.2f ms "
      "+ collectives and stage transfers %.2f ms%s; TTFT %.1f ms = compute "
      "%.1f ms + communication %.1f ms.\n",
      p.tpot * 1e3, p.decodeMemoryTime * 1e3,
      p.weightBytesPerDevice / (1024.0 * 1024 * 1024),
      p.weightBandwidth / 1e9, p.kvBytesPerDevice / (1024.0 * 1024 * 1024),
      p.kvBandwidth / 1e9,
      double(model.layers) * cluster.device.layerOverhead * 1e3,
      p.decodeCommTime * 1e3,
      p.tpCrossesNodes ? " (the TP group spans nodes)" : "", p.ttft * 1e3,
      p.prefillComputeTime * 1e3, p.prefillCommTime * 1e3);
  for (const Candidate &c : ranked) {
    if (&c == &best || !c.violates.empty() ||
        c.recipe.weights.name != best.recipe.weights.name ||
        c.recipe.kv != best.recipe.kv || c.recipe.sp != best.recipe.sp)
      continue;
    // The runner-up of the same precision: what it loses.
    outs() << format("runner-up %s: TPOT %.2f ms (%+.0f%%), TTFT %.1f ms "
                     "(%+.0f%%)%s.\n",
                     recipeName(c.recipe).c_str(), c.prediction.tpot * 1e3,
                     100 * (c.prediction.tpot / p.tpot - 1),
                     c.prediction.ttft * 1e3,
                     100 * (c.prediction.ttft / p.ttft - 1),
                     c.prediction.tpCrossesNodes
                         ? "; its TP all-reduces cross nodes"
                         : "");
    break;
  }
  outs() << "\nkiln-compile " << modelPath << " " << compileFlags(best.recipe, gpu)
         << " -o " << base << ".kiln\n";
  return 0;
}

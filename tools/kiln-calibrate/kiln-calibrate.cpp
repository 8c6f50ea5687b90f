//===- kiln-calibrate.cpp - activation statistics for quantization --------===//
//
//   kiln-calibrate MODEL [-o calib.safetensors] [--text FILE] [--samples N]
//                  [--ctx L] [--seed S] [--tokenizer F] [--dump-tokens FILE]
//
// Runs the unquantized model on text and writes the statistics the
// calibrated quantization recipes (GPTQ, AWQ, SmoothQuant) and key centering
// need, per observed activation ("tap") with C channels, over all N observed
// positions:
//   absmax[c]  = max_t |x_t[c]|             (SmoothQuant's max|X_j|)
//   absmean[c] = (1/N) sum_t |x_t[c]|       (AWQ's mean activation magnitude)
// and, for a linear-layer input (a tap named by some "input:<W>"),
//   hessian    = (1/N) sum_t x_t x_t^T      (GPTQ's H = 2 X X^T, without the 2)
// or, for a tap that feeds no linear weight (the pre-RoPE keys
// layers.<l>.key, kiln-insert-observers), instead of the Hessian
//   mean[c]    = (1/N) sum_t x_t[c]         (kiln-center-keys' key mean)
// as the calibration file of docs/quantization.md (safetensors).
//
// The model runs through Kiln itself: the same import and pipeline as
// kiln-compile (codegen/Pipeline) plus kiln-insert-observers, compiled for
// the CPU in f32 into a temporary directory and run with the runtime, whose
// session observer (kiln_rt_session_set_observer) receives every observed
// activation. Sums are accumulated in float64 (the Hessian with BLAS dsyrk)
// and rounded to f32 once, after the division by N.
//
// Head scores (--heads; DuoAttention's streaming/retrieval split, Xiao et
// al. 2024, measured without training as RTPurbo suggests): one more
// sequence, BOS + a passage P of (--heads-ctx - 1) / 2 text tokens + P
// again, is run with every attention's query and key observed after RoPE
// (kiln-insert-observers{attention}); for each layer l and query head h,
//   layers.<l>.attn_retrieval[h] = mean over the second copy's rows i of
//     sum_j softmax_j(scale q_{i,h} . k_{j,g})  over first-copy keys j
//     (positions 1 .. |P|) with i - j >= --heads-window
// (g = h's KV head): the attention mass the second copy sends back to the
// first beyond the local window, which a streaming head (sink + local
// window) would lose. Computed in float64 from the observed f32 rows
// (scores with sgemm). The file's metadata gets head_layers (the layer
// count), heads_ctx and heads_window; kiln-sparse-attention{streaming}
// reads them (docs/sparse-attention.md).
//
// Windows: the text is tokenized without BOS (T tokens); each of the
// --samples windows is BOS followed by L - 1 consecutive text tokens from
// offset o = splitmix64_next() % (T - (L - 1) + 1), the generator seeded
// with --seed (Steele, Lea & Flood 2014, "Fast splittable pseudorandom
// number generators"; the constants of Vigna's splitmix64.c), so a seed
// gives the same windows on every platform. Windows are drawn with
// replacement and may overlap. Each runs from position 0 of a fresh KV cache.
//
//===----------------------------------------------------------------------===//

#include "codegen/Artifact/SafeOutput.h"
#include "codegen/Pipeline/Pipeline.h"
#include "dialects/Kiln/IR/KilnOps.h"
#include "dialects/Kiln/Import/ImportUtils.h"
#include "dialects/Kiln/Import/ModelDesc.h"
#include "dialects/Plan/IR/PlanOps.h"
#include "passes/Conversion/Passes.h"
#include "passes/Transforms/Passes.h"
#include "tools/common/Threads.h"
#include "tools/common/ToolSupport.h"

#include "kiln_rt/api.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include "runtime/src/cpu/Blas.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace mlir;
using namespace mlir::kiln;
namespace cl = llvm::cl;
namespace fs = llvm::sys::fs;

static cl::OptionCategory category("kiln-calibrate options");
static cl::opt<std::string> modelPath(cl::Positional, cl::Required,
                                      cl::desc("MODEL"), cl::cat(category));
static cl::opt<std::string>
    outputPath("o", cl::desc("Calibration file to write (safetensors)"),
               cl::init("calib.safetensors"), cl::value_desc("FILE"),
               cl::cat(category));
static cl::opt<std::string>
    textPath("text",
             cl::desc("UTF-8 calibration text (default: the short English "
                      "text shipped with Kiln, share/kiln/calibration.txt "
                      "beside the bin/ directory of kiln-calibrate)"),
             cl::value_desc("FILE"), cl::cat(category));
static cl::opt<int64_t>
    numSamples("samples", cl::desc("Number of windows (positive; default 8)"),
               cl::init(8), cl::value_desc("N"), cl::cat(category));
static cl::opt<int64_t>
    ctxLen("ctx",
           cl::desc("Tokens per window including the leading BOS, in "
                    "[2, model context] (default: 128, capped at the model "
                    "context and at the text length + 1)"),
           cl::init(0), cl::value_desc("L"), cl::cat(category));
static cl::opt<uint64_t>
    seed("seed",
         cl::desc("Seed of the splitmix64 generator picking the window "
                  "offsets (default 0)"),
         cl::init(0), cl::value_desc("S"), cl::cat(category));
static cl::opt<bool> selfGenerate(
    "self-generate",
    cl::desc("Calibrate on text the model samples itself instead of --text "
             "(data-free calibration, as in LLM-QAT, Liu et al. 2023): each "
             "window is BOS followed by --ctx - 1 tokens sampled at "
             "temperature 1 from the unquantized model, the sampler seeded "
             "with --seed (runtime xorshift sampler, reproducible)"),
    cl::cat(category));
static cl::opt<std::string>
    tokenizerPath("tokenizer",
                  cl::desc("Tokenizer file for llama2.c checkpoints (default: "
                           "a tok*.bin beside the model)"),
                  cl::value_desc("FILE"), cl::cat(category));
static cl::opt<std::string>
    dumpTokens("dump-tokens",
               cl::desc("Also write the token ids of the windows to FILE, "
                        "one window per line, separated by spaces, and with "
                        "--heads a last line '# heads <ids>' (for "
                        "test/reference/calib_ref.py)"),
               cl::value_desc("FILE"), cl::cat(category));

static cl::opt<bool> scoreHeads(
    "heads",
    cl::desc("Also score every attention head's retrieval (the mass a "
             "repeated passage's second copy sends to the first beyond the "
             "local window) for the head roles of --sparse-attention "
             "(docs/sparse-attention.md)"),
    cl::cat(category));
static cl::opt<int64_t> headsCtx(
    "heads-ctx",
    cl::desc("Tokens of the --heads sequence: BOS + a passage + the same "
             "passage (default: min(2048, model context); at least 8)"),
    cl::init(0), cl::value_desc("L"), cl::cat(category));
static cl::opt<int64_t> headsWindow(
    "heads-window",
    cl::desc("Distance in positions below which a key counts as local, not "
             "retrieved (default 128: two 64-position blocks)"),
    cl::init(128), cl::value_desc("W"), cl::cat(category));

static constexpr const char *kTool = "kiln-calibrate";
static constexpr const char *kPipeline =
    "kiln-verify,canonicalize,kiln-insert-observers,kiln-memory-plan,"
    "kiln-lower-to-plan,canonicalize,kiln-plan-to-emitc";

static int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), kTool) << message << "\n";
  return 1;
}

/// splitmix64 (Vigna, https://prng.di.unimi.it/splitmix64.c): the next
/// 64-bit output of the generator with state `state`.
static uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}


namespace {
/// Running sums of one tap: C channels, float64 accumulators.
struct TapStats {
  /// A linear-layer input: accumulate X^T X (GPTQ's Hessian). Otherwise (a
  /// pre-RoPE key) the plain sum for the mean; no C x C matrix is kept.
  bool hessian = true;
  int64_t channels = 0;
  int64_t rows = 0;
  std::vector<float> absmax;   ///< [C]
  std::vector<double> abssum;  ///< [C]
  std::vector<double> sum;     ///< [C], taps without a Hessian only
  std::vector<double> xtx;     ///< [C, C], upper triangle (dsyrk)
  std::vector<double> scratch; ///< the rows of one call as float64
};

/// An attention's query or key after RoPE (kiln-insert-observers
/// {attention}): captured for the head scores, not summarised.
struct AttentionTap {
  int64_t layer = -1; ///< -1: a statistics tap
  bool isQuery = false;
};

/// One layer's attention geometry (from its kiln.attention) and, during the
/// --heads sequence, its captured rows.
struct LayerAttention {
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  float scale = 0.0f;
  std::vector<float> q; ///< [T, heads * headDim]
  std::vector<float> k; ///< [T, kvHeads * headDim]
};

/// What the observer callback updates.
struct Accumulator {
  std::vector<TapStats> taps;          ///< indexed like kiln.observe_taps
  std::vector<AttentionTap> attention; ///< the same indexing
  std::map<int64_t, LayerAttention> layers;
  bool capture = false;                ///< in the --heads sequence
  std::string error;                   ///< first inconsistency seen, if any
};
} // namespace

/// kiln_rt_observer_fn: folds x [rows, cols] into the tap's sums.
static void observe(void *user, int64_t tap, const float *x, int64_t rows,
                    int64_t cols) {
  auto &acc = *static_cast<Accumulator *>(user);
  if (tap < 0 || tap >= (int64_t)acc.taps.size()) {
    if (acc.error.empty())
      acc.error = "the artifact observed tap index " + std::to_string(tap) +
                  ", which the compiler did not list";
    return;
  }
  if (const AttentionTap &a = acc.attention[tap]; a.layer >= 0) {
    if (!acc.capture)
      return;
    LayerAttention &l = acc.layers[a.layer];
    std::vector<float> &dst = a.isQuery ? l.q : l.k;
    dst.insert(dst.end(), x, x + rows * cols);
    return;
  }
  if (acc.capture)
    return; // the --heads sequence feeds no statistics
  TapStats &s = acc.taps[tap];
  if (s.channels == 0) {
    s.channels = cols;
    s.absmax.assign(cols, 0.0f);
    s.abssum.assign(cols, 0.0);
    if (s.hessian)
      s.xtx.assign(size_t(cols) * cols, 0.0);
    else
      s.sum.assign(cols, 0.0);
  } else if (s.channels != cols) {
    if (acc.error.empty())
      acc.error = "tap " + std::to_string(tap) + " changed width from " +
                  std::to_string(s.channels) + " to " + std::to_string(cols);
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = x[r * cols + c];
      s.absmax[c] = std::max(s.absmax[c], std::fabs(v));
      s.abssum[c] += std::fabs(double(v));
    }
  if (s.hessian) {
    s.scratch.resize(size_t(rows) * cols);
    for (int64_t i = 0; i < rows * cols; ++i)
      s.scratch[i] = x[i];
    // xtx += X^T X (upper triangle), X [rows, cols] row-major.
    ::kiln::rt::cpu::dsyrk(CblasRowMajor, CblasUpper, CblasTrans, (int)cols, (int)rows,
                1.0, s.scratch.data(), (int)cols, 1.0, s.xtx.data(),
                (int)cols);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        s.sum[c] += double(x[r * cols + c]);
  }
  s.rows += rows;
}

/// The retrieval score of every query head of `l` (the file header's
/// layers.<l>.attn_retrieval) for a sequence of T = 1 + 2 P rows: BOS,
/// passage, passage. Row i of the second copy (positions P + 1 .. 2P)
/// scores the mass of softmax_j(scale q_i . k_j) over j in [0, i] that
/// falls on first-copy keys (positions 1 .. P) at distance i - j >= window,
/// averaged over the rows.
static std::vector<float> retrievalScores(const LayerAttention &l, int64_t T,
                                          int64_t P, int64_t window) {
  const int64_t group = l.heads / l.kvHeads, d = l.headDim;
  const int64_t qDim = l.heads * d, kDim = l.kvHeads * d;
  std::vector<float> scores(size_t(l.heads), 0.0f);
  std::vector<float> s(size_t(P) * T);
  for (int64_t h = 0; h < l.heads; ++h) {
    const int64_t g = h / group;
    // S = scale Q2 K^T: the second copy's rows against every key.
    ::kiln::rt::cpu::sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(P),
                           int(T), int(d), l.scale,
                           l.q.data() + (P + 1) * qDim + h * d, int(qDim),
                           l.k.data() + g * d, int(kDim), 0.0f, s.data(),
                           int(T));
    double total = 0.0;
    for (int64_t r = 0; r < P; ++r) {
      const int64_t i = P + 1 + r;
      const float *sr = s.data() + r * T;
      double maxLogit = -INFINITY;
      for (int64_t j = 0; j <= i; ++j)
        maxLogit = std::max(maxLogit, double(sr[j]));
      double sum = 0.0, retrieved = 0.0;
      for (int64_t j = 0; j <= i; ++j) {
        const double e = std::exp(double(sr[j]) - maxLogit);
        sum += e;
        if (j >= 1 && j <= P && i - j >= window)
          retrieved += e;
      }
      total += retrieved / sum;
    }
    scores[size_t(h)] = float(total / double(P));
  }
  return scores;
}

/// Owns the runtime objects of the temporary artifact.
namespace {
struct Runtime {
  kiln_rt_artifact_t *artifact = nullptr;
  kiln_rt_session_t *session = nullptr;
  ~Runtime() {
    kiln_rt_session_release(session);
    kiln_rt_artifact_release(artifact);
  }
};
} // namespace

/// The message of `status` (freed), prefixed with `what`.
static std::string takeStatus(kiln_rt_status_t status,
                              const llvm::Twine &what) {
  std::string message = (what + ": " + kiln_rt_status_message(status)).str();
  kiln_rt_status_free(status);
  return message;
}

/// Tokenizes `text` without BOS with the artifact's tokenizer.
static llvm::Expected<std::vector<int32_t>>
tokenize(const kiln_rt_artifact_t *artifact, llvm::StringRef text) {
  std::vector<int32_t> tokens(text.size() + 16);
  size_t count = 0;
  kiln_rt_status_t st = kiln_rt_tokenize(artifact, text.data(), text.size(), 0,
                                         tokens.data(), tokens.size(), &count);
  if (kiln_rt_status_code(st) == KILN_RT_OUT_OF_RANGE) {
    kiln_rt_status_free(st);
    tokens.resize(count);
    st = kiln_rt_tokenize(artifact, text.data(), text.size(), 0, tokens.data(),
                          tokens.size(), &count);
  }
  if (st)
    return llvm::createStringError(takeStatus(st, "tokenizing " + textPath));
  tokens.resize(count);
  return tokens;
}

/// Writes the safetensors file (https://huggingface.co/docs/safetensors:
/// u64 little-endian header length, JSON header padded with spaces to a
/// multiple of 8, then the tensors' little-endian bytes) with
/// writeFileOutput: a regular file through a temporary file renamed into
/// place, a character device (/dev/null) in place.
static llvm::Error
writeSafetensors(llvm::StringRef path, const llvm::json::Object &metadata,
                 const std::map<std::string, std::vector<float>> &tensors,
                 const std::map<std::string, std::vector<int64_t>> &shapes) {
  llvm::json::Object header;
  header["__metadata__"] = llvm::json::Object(metadata);
  uint64_t offset = 0;
  for (const auto &[name, data] : tensors) {
    uint64_t bytes = data.size() * sizeof(float);
    llvm::json::Array shape;
    for (int64_t d : shapes.at(name))
      shape.push_back(d);
    header[name] = llvm::json::Object{
        {"dtype", "F32"},
        {"shape", std::move(shape)},
        {"data_offsets", llvm::json::Array{offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json;
  llvm::raw_string_ostream(json) << llvm::json::Value(std::move(header));
  json.append((8 - json.size() % 8) % 8, ' ');

  return mlir::kiln::writeFileOutput(path, [&](llvm::raw_ostream &os) {
    uint64_t length = json.size();
    char lengthBytes[8];
    for (int i = 0; i < 8; ++i)
      lengthBytes[i] = char((length >> (8 * i)) & 0xff);
    os.write(lengthBytes, 8);
    os << json;
    static_assert(sizeof(float) == 4, "F32 is 4 bytes");
    for (const auto &[name, data] : tensors)
      for (float v : data) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        char le[4] = {char(bits & 0xff), char((bits >> 8) & 0xff),
                      char((bits >> 16) & 0xff), char(bits >> 24)};
        os.write(le, 4);
      }
    return llvm::Error::success();
  });
}

/// Other tools' spellings of our flags.
static const ::kiln::tool::FlagAlias kCalibrateAliases[] = {
    {"nsamples", "samples"}, {"n", "samples"}, {"c", "ctx"},
    {"seqlen", "ctx"}, {"ctx-size", "ctx"}, {"f", "text"}, {"file", "text"}};

int main(int argc, char **argv) {
  ::kiln::tool::ToolMain tool(argc, argv, kTool, ::kiln::tool::ToolKind::Compiler);
  cl::opt<int64_t> &threadCount = ::kiln::tool::threadsOption(category);
  cl::HideUnrelatedOptions(category);
  ::kiln::tool::parseCommandLine(
      argc, argv,
      "Kiln calibration: activation statistics for GPTQ, AWQ, SmoothQuant "
      "and key centering\n\n"
      "  kiln-calibrate MODEL [-o calib.safetensors] [--text FILE] [--samples "
      "N]\n"
      "                 [--ctx L] [--seed S] [--tokenizer F] [--dump-tokens "
      "FILE]\n\n"
      "Runs the unquantized (f32) model on --samples windows of --ctx tokens\n"
      "(each BOS + consecutive text tokens at seeded offsets) and writes, for\n"
      "every linear-layer input, per-channel absmax and absmean and the\n"
      "Hessian X^T X / N, and for every pre-RoPE key, absmax, absmean and\n"
      "the mean (docs/quantization.md, \"Calibration\").\n",
      kCalibrateAliases);

  // Flags first: nothing is read or compiled for a bad command line.
  ::kiln::tool::applyThreads(threadCount, threadCount.getNumOccurrences() > 0);
  if (numSamples <= 0 || numSamples > (int64_t(1) << 24))
    return fail("--samples=" + std::to_string(numSamples) +
                " is out of range (expected 1 to 16777216 windows)");
  if (ctxLen.getNumOccurrences() && ctxLen < 2)
    return fail("--ctx=" + std::to_string(ctxLen) +
                " is too short (expected at least 2 tokens: BOS and one text "
                "token)");
  if (outputPath.empty())
    return fail("-o needs a file name");
  if (!scoreHeads && (headsCtx.getNumOccurrences() ||
                      headsWindow.getNumOccurrences()))
    return fail("--heads-ctx and --heads-window apply to --heads");
  if (headsCtx.getNumOccurrences() && (headsCtx < 8 || headsCtx > (1 << 20)))
    return fail("--heads-ctx=" + std::to_string(headsCtx) +
                " is out of range (expected 8 to 1048576 tokens)");
  if (headsWindow < 0 || headsWindow > (1 << 20))
    return fail("--heads-window=" + std::to_string(headsWindow) +
                " is out of range (expected 0 to 1048576 positions)");
  if (scoreHeads && selfGenerate)
    return fail("--heads scores heads on a repeated passage of --text; "
                "it cannot use --self-generate");
  // The policy of every single-file -o (writeFileOutput): a symbolic link
  // is followed (its target replaced, the link kept), a character device
  // such as /dev/null is written in place, a FIFO or directory is refused.
  // Checked now, so nothing is computed for an unusable path.
  llvm::Expected<FileOutputTarget> target = checkFileOutput(outputPath);
  if (!target)
    return fail(llvm::toString(target.takeError()));
  if (llvm::Error e = checkOutputIsNotAnInput(
          outputPath, {{"MODEL", modelPath},
                       {"--text", textPath},
                       {"--tokenizer", tokenizerPath},
                       {"--dump-tokens", dumpTokens}}))
    return fail(llvm::toString(std::move(e)));
  if (!dumpTokens.empty()) {
    // --dump-tokens is a second output: neither an input nor -o.
    if (llvm::Error e = checkOutputIsNotAnInput(
            dumpTokens,
            {{"MODEL", modelPath}, {"--text", textPath},
             {"--tokenizer", tokenizerPath}, {"-o", outputPath}},
            "--dump-tokens"))
      return fail(llvm::toString(std::move(e)));
    llvm::SmallString<256> a(dumpTokens), b(outputPath);
    llvm::sys::fs::make_absolute(a);
    llvm::sys::fs::make_absolute(b);
    llvm::sys::path::remove_dots(a, true);
    llvm::sys::path::remove_dots(b, true);
    if (a == b)
      return fail("--dump-tokens " + dumpTokens + " and -o " + outputPath +
                  " name the same file");
  }
  if (target->kind == FileOutputTarget::File) {
    llvm::SmallString<256> parent(llvm::sys::path::parent_path(target->path));
    if (parent.empty())
      parent = ".";
    if (!fs::is_directory(parent))
      return fail(outputPath + ": cannot write: directory " + parent +
                  " does not exist");
    if (fs::access(parent, fs::AccessMode::Write))
      return fail(outputPath + ": cannot write: directory " + parent +
                  " is not writable");
  }

  if (selfGenerate && textPath.getNumOccurrences())
    return fail("--self-generate and --text both choose the calibration "
                "text: pass one of them");
  if (textPath.getNumOccurrences() && textPath.empty())
    return fail("--text needs a file name");
  // The default text ships with Kiln (tools/kiln-calibrate/calibration.txt,
  // copied to share/kiln/): found beside the executable, never relative to
  // the current directory.
  if (!selfGenerate && textPath.empty()) {
    textPath = ::kiln::tool::dataFilePath("calibration.txt");
    if (textPath.empty() || !fs::is_regular_file(textPath))
      return fail("Kiln's default calibration text " +
                  (textPath.empty() ? std::string("share/kiln/calibration.txt")
                                    : textPath) +
                  " is missing (rebuild or reinstall Kiln, or pass --text "
                  "FILE)");
  }
  std::unique_ptr<llvm::MemoryBuffer> textHolder;
  llvm::StringRef text;
  if (!selfGenerate) {
    auto textBuffer = mlir::kiln::detail::readRegularFile(
        textPath, mlir::kiln::detail::kMaxTextBytes, "a text file");
    if (!textBuffer)
      return fail("--text " + llvm::toString(textBuffer.takeError()));
    textHolder = std::move(*textBuffer);
    text = textHolder->getBuffer();
    if (text.trim().empty())
      return fail(textPath + ": the calibration text is empty");
  }

  auto desc = importModel(modelPath, tokenizerPath);
  if (!desc)
    return fail(llvm::toString(desc.takeError()));
  for (const std::string &note : desc->notes)
    llvm::errs() << kTool << ": note: " << note << "\n";
  // The tokenizer found beside a llama2.c MODEL is an input too.
  for (auto [flag, out] : {std::pair<llvm::StringRef, llvm::StringRef>(
                               "-o", outputPath),
                           {"--dump-tokens", dumpTokens}})
    if (llvm::Error e = checkOutputIsNotAnInput(
            out, {{"the tokenizer beside MODEL", desc->tokenizer.file}}, flag))
      return fail(llvm::toString(std::move(e)));
  int64_t context = desc->config.maxSeqLen;
  if (ctxLen > context)
    return fail("--ctx=" + std::to_string(ctxLen) +
                " exceeds the model's context of " + std::to_string(context) +
                " tokens");

  // Compile the observing artifact into a private temporary directory,
  // removed on every exit path, signals included (SafeOutput.h); first
  // remove what killed runs left.
  llvm::SmallString<256> systemTemp;
  llvm::sys::path::system_temp_directory(/*ErasedOnReboot=*/true, systemTemp);
  std::string tempPrefix = std::string(kTool) + "-";
  for (const std::string &line : removeStaleScratchDirs(systemTemp, tempPrefix))
    llvm::errs() << kTool << ": note: " << line << "\n";
  llvm::Expected<ScratchDir> tempDir = ScratchDir::create(systemTemp, tempPrefix);
  if (!tempDir)
    return fail(llvm::toString(tempDir.takeError()));
  std::string artifactDir = tempDir->child("artifact");

  std::vector<std::string> tapNames;
  std::vector<std::pair<std::string, std::string>> weightInputs;
  std::map<int64_t, LayerAttention> attentionLayers;
  {
    MLIRContext mlirContext;
    mlirContext.loadDialect<KilnDialect, plan::PlanDialect, func::FuncDialect,
                            arith::ArithDialect, emitc::EmitCDialect>();
    ScopedDiagnosticHandler handler(&mlirContext, [](Diagnostic &diag) {
      printToolDiagnostic(diag, kTool, llvm::errs());
      return success();
    });
    CompileOptions options;
    options.addGraphPasses = [](OpPassManager &pm) {
      InsertObserversPassOptions o;
      o.attention = scoreHeads;
      pm.addPass(createInsertObserversPass(o));
    };
    options.onGraph = [&](ModuleOp graph) -> LogicalResult {
      auto taps = graph->getAttrOfType<ArrayAttr>("kiln.observe_taps");
      auto inputs = graph->getAttrOfType<DictionaryAttr>("kiln.observe_inputs");
      if (!taps || !inputs || inputs.empty())
        return graph.emitError()
               << "the model has no linear layers over model weights to "
                  "calibrate";
      for (auto tap : taps.getAsRange<StringAttr>())
        tapNames.push_back(tap.getValue().str());
      for (NamedAttribute entry : inputs)
        weightInputs.emplace_back(entry.getName().str(),
                                  cast<StringAttr>(entry.getValue()).str());
      graph.walk([&](AttentionOp a) {
        if (a.isBatched())
          return;
        LayerAttention &l = attentionLayers[int64_t(a.getLayer())];
        l.heads = a.getNumHeads();
        l.kvHeads = a.getNumKvHeads();
        l.headDim = a.getHeadDim();
        l.scale = a.getScale().convertToFloat();
      });
      if (scoreHeads && attentionLayers.empty())
        return graph.emitError() << "--heads: the model has no attention "
                                    "to score";
      return success();
    };
    options.pipeline = kPipeline;
    options.outputDir = artifactDir;
    if (failed(compileModel(mlirContext, *desc, options)))
      return 1;
  }

  // Sizes are still validated; the checksums of files written a moment ago
  // by this process would only cost a pass over the weights.
  Runtime rt;
  if (kiln_rt_status_t st = kiln_rt_artifact_open(
          artifactDir.c_str(), KILN_RT_OPEN_SKIP_CHECKSUMS, &rt.artifact))
    return fail(takeStatus(st, "loading the calibration artifact"));
  if (kiln_rt_status_t st = kiln_rt_session_create(rt.artifact, &rt.session))
    return fail(takeStatus(st, "creating a session"));
  Accumulator acc;
  acc.taps.resize(tapNames.size());
  acc.attention.resize(tapNames.size());
  acc.layers = std::move(attentionLayers);
  for (auto [index, name] : llvm::enumerate(tapNames)) {
    llvm::StringRef tap(name);
    int64_t layer = 0;
    bool isQuery = tap.ends_with(".attn_q");
    if ((isQuery || tap.ends_with(".attn_k")) && tap.consume_front("layers.") &&
        !tap.take_until([](char c) { return c == '.'; })
             .getAsInteger(10, layer))
      acc.attention[index] = {layer, isQuery};
  }
  {
    // Only linear-layer inputs get a Hessian; the other taps (pre-RoPE keys)
    // a mean.
    llvm::StringSet<> linearInputs;
    for (const auto &entry : weightInputs)
      linearInputs.insert(entry.second);
    for (auto [index, name] : llvm::enumerate(tapNames))
      acc.taps[index].hessian = linearInputs.contains(name);
  }
  auto isStatsTap = [&](size_t index) {
    return acc.attention[index].layer < 0;
  };
  if (kiln_rt_status_t st =
          kiln_rt_session_set_observer(rt.session, observe, &acc))
    return fail(takeStatus(st, "registering the observer"));
  kiln_rt_model_info_t info;
  kiln_rt_artifact_info(rt.artifact, &info);

  std::vector<std::vector<int32_t>> windows;
  int64_t window = 0;
  if (selfGenerate) {
    window = ctxLen.getNumOccurrences() ? int64_t(ctxLen)
                                        : std::min<int64_t>(128, info.max_seq_len);
    kiln_rt_sampler_params_t params{/*temperature=*/1.0f, /*top_k=*/0,
                                    /*top_p=*/1.0f, seed.getValue()};
    kiln_rt_sampler_t *sampler = nullptr;
    if (kiln_rt_status_t st =
            kiln_rt_sampler_create(&params, info.vocab_size, &sampler))
      return fail(takeStatus(st, "creating the sampler"));
    auto releaseSampler =
        llvm::make_scope_exit([&] { kiln_rt_sampler_release(sampler); });
    // Generation is not observed: only the prefill of the finished window.
    if (kiln_rt_status_t st =
            kiln_rt_session_set_observer(rt.session, nullptr, nullptr))
      return fail(takeStatus(st, "pausing the observer"));
    for (int64_t s = 0; s < numSamples; ++s) {
      std::vector<int32_t> w = {info.bos_id};
      kiln_rt_session_reset(rt.session);
      if (kiln_rt_status_t st = kiln_rt_session_prefill(rt.session, w.data(), 1))
        return fail(takeStatus(st, "generating calibration text"));
      while (int64_t(w.size()) < window) {
        int32_t next = 0;
        if (kiln_rt_status_t st =
                kiln_rt_session_sample(rt.session, sampler, &next))
          return fail(takeStatus(st, "generating calibration text"));
        w.push_back(next);
        if (int64_t(w.size()) == window)
          break;
        if (kiln_rt_status_t st = kiln_rt_session_decode(rt.session, next))
          return fail(takeStatus(st, "generating calibration text"));
      }
      windows.push_back(std::move(w));
    }
    if (kiln_rt_status_t st =
            kiln_rt_session_set_observer(rt.session, observe, &acc))
      return fail(takeStatus(st, "registering the observer"));
  }

  auto tokens = selfGenerate
                    ? llvm::Expected<std::vector<int32_t>>(std::vector<int32_t>{})
                    : tokenize(rt.artifact, text);
  if (!tokens)
    return fail(llvm::toString(tokens.takeError()));
  int64_t numTokens = tokens->size();
  if (!selfGenerate && numTokens < 2)
    return fail(textPath + ": the calibration text has " +
                std::to_string(numTokens) +
                " token(s); calibration needs at least 2");

  // Window length L (BOS + L - 1 text tokens), capped at the text.
  if (!selfGenerate)
    window = ctxLen.getNumOccurrences() ? int64_t(ctxLen)
                                        : std::min<int64_t>(128, info.max_seq_len);
  if (!selfGenerate && window - 1 > numTokens) {
    if (ctxLen.getNumOccurrences())
      llvm::errs() << kTool << ": note: " << textPath << " has " << numTokens
                   << " tokens; --ctx=" << window << " capped to "
                   << numTokens + 1 << "\n";
    window = numTokens + 1;
  }
  int64_t span = window - 1;
  uint64_t offsets = uint64_t(std::max<int64_t>(numTokens - span + 1, 1));
  uint64_t state = seed.getValue();
  for (int64_t s = 0; !selfGenerate && s < numSamples; ++s) {
    int64_t offset = int64_t(splitmix64(state) % offsets);
    std::vector<int32_t> w;
    w.reserve(window);
    w.push_back(info.bos_id);
    w.insert(w.end(), tokens->begin() + offset,
             tokens->begin() + offset + span);
    windows.push_back(std::move(w));
  }

  // The --heads sequence (written to --dump-tokens as "# heads <ids>").
  int64_t headsLength = 0, passage = 0;
  std::vector<int32_t> headsSeq;
  if (scoreHeads) {
    headsLength = headsCtx.getNumOccurrences()
                      ? int64_t(headsCtx)
                      : std::min<int64_t>(2048, info.max_seq_len);
    if (headsLength > info.max_seq_len)
      return fail("--heads-ctx=" + std::to_string(headsLength) +
                  " exceeds the model's context of " +
                  std::to_string(info.max_seq_len) + " tokens");
    passage = std::min<int64_t>((headsLength - 1) / 2, numTokens);
    if (passage < headsWindow + 1)
      return fail("--heads: a passage of " + std::to_string(passage) +
                  " tokens leaves no first-copy key at distance >= "
                  "--heads-window=" + std::to_string(headsWindow) +
                  " (use a longer --text or --heads-ctx, or a shorter "
                  "window)");
    headsLength = 1 + 2 * passage;
    uint64_t headState = seed.getValue() ^ 0x68656164ull; // "head"
    int64_t offset = int64_t(splitmix64(headState) %
                             uint64_t(numTokens - passage + 1));
    headsSeq = {info.bos_id};
    for (int copy = 0; copy < 2; ++copy)
      headsSeq.insert(headsSeq.end(), tokens->begin() + offset,
                      tokens->begin() + offset + passage);
  }

  if (!dumpTokens.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream os(dumpTokens, ec);
    if (ec)
      return fail(dumpTokens + ": cannot write: " + ec.message());
    for (const auto &w : windows) {
      for (size_t i = 0; i < w.size(); ++i)
        os << (i ? " " : "") << w[i];
      os << "\n";
    }
    if (!headsSeq.empty()) {
      os << "# heads";
      for (int32_t t : headsSeq)
        os << " " << t;
      os << "\n";
    }
    os.close();
    if (os.has_error())
      return fail(dumpTokens + ": write failed: " + os.error().message());
  }

  for (const auto &w : windows) {
    kiln_rt_session_reset(rt.session);
    if (kiln_rt_status_t st =
            kiln_rt_session_prefill(rt.session, w.data(), int64_t(w.size())))
      return fail(takeStatus(st, "running the model"));
    if (!acc.error.empty())
      return fail("internal: " + acc.error);
  }

  int64_t positions = numSamples * window;
  std::map<std::string, std::vector<float>> tensors;
  std::map<std::string, std::vector<int64_t>> shapes;

  // Head scores: BOS + P + P, observed once, scored per layer.
  if (scoreHeads) {
    // Only the attention taps matter here; the statistics taps see the
    // sequence too but are not updated (capture mode skips them).
    acc.capture = true;
    kiln_rt_session_reset(rt.session);
    if (kiln_rt_status_t st = kiln_rt_session_prefill(
            rt.session, headsSeq.data(), int64_t(headsSeq.size())))
      return fail(takeStatus(st, "running the model on the --heads sequence"));
    acc.capture = false;
    if (!acc.error.empty())
      return fail("internal: " + acc.error);
    double sum = 0.0, best = -1.0;
    int64_t count = 0, bestLayer = 0, bestHead = 0, above = 0;
    for (auto &[layer, l] : acc.layers) {
      if (l.q.size() != size_t(headsLength * l.heads * l.headDim) ||
          l.k.size() != size_t(headsLength * l.kvHeads * l.headDim))
        return fail("internal: layer " + std::to_string(layer) +
                    " observed " + std::to_string(l.q.size()) +
                    " query values for a " + std::to_string(headsLength) +
                    "-token sequence");
      std::vector<float> scores =
          retrievalScores(l, headsLength, passage, headsWindow);
      for (auto [h, v] : llvm::enumerate(scores)) {
        sum += v;
        ++count;
        above += v >= 0.1f;
        if (v > best) {
          best = v;
          bestLayer = layer;
          bestHead = int64_t(h);
        }
      }
      std::string name = "layers." + std::to_string(layer) + ".attn_retrieval";
      shapes[name] = {l.heads};
      tensors[name] = std::move(scores);
      l.q = {};
      l.k = {};
    }
    llvm::errs() << kTool << ": head scores on " << headsLength
                 << " tokens (a " << passage
                 << "-token passage twice): mean retrieval "
                 << llvm::format("%.3f", sum / double(std::max<int64_t>(1, count)))
                 << ", " << above << " of " << count
                 << " heads at or above 0.1, highest "
                 << llvm::format("%.3f", best) << " (layer " << bestLayer
                 << ", head " << bestHead << ")\n";
  }

  for (auto [index, name] : llvm::enumerate(tapNames)) {
    if (!isStatsTap(index))
      continue;
    TapStats &s = acc.taps[index];
    if (s.rows != positions)
      return fail("internal: tap '" + name + "' observed " +
                  std::to_string(s.rows) + " positions, expected " +
                  std::to_string(positions));
    int64_t c = s.channels;
    std::vector<float> absmean(c);
    for (int64_t i = 0; i < c; ++i)
      absmean[i] = float(s.abssum[i] / double(positions));
    tensors[name + ".absmax"] = s.absmax;
    shapes[name + ".absmax"] = {c};
    tensors[name + ".absmean"] = std::move(absmean);
    shapes[name + ".absmean"] = {c};
    if (s.hessian) {
      std::vector<float> hessian(size_t(c) * c);
      for (int64_t i = 0; i < c; ++i)
        for (int64_t j = i; j < c; ++j) {
          float h = float(s.xtx[i * c + j] / double(positions));
          hessian[i * c + j] = h;
          hessian[j * c + i] = h;
        }
      tensors[name + ".hessian"] = std::move(hessian);
      shapes[name + ".hessian"] = {c, c};
    } else {
      std::vector<float> mean(c);
      for (int64_t i = 0; i < c; ++i)
        mean[i] = float(s.sum[i] / double(positions));
      tensors[name + ".mean"] = std::move(mean);
      shapes[name + ".mean"] = {c};
    }
  }

  llvm::json::Object metadata{
      {"format", "kiln-calibration"},
      {"version", "1"},
      {"model", modelPath.getValue()},
      {"text", selfGenerate ? std::string("self-generated")
                            : textPath.getValue()},
      {"seed", std::to_string(seed.getValue())},
      {"samples", std::to_string(numSamples.getValue())},
      {"ctx", std::to_string(window)},
      {"tokens", std::to_string(positions)}};
  for (const auto &[weight, tap] : weightInputs)
    metadata["input:" + weight] = tap;
  if (scoreHeads) {
    int64_t layers = acc.layers.empty() ? 0 : acc.layers.rbegin()->first + 1;
    metadata["head_layers"] = std::to_string(layers);
    metadata["heads_ctx"] = std::to_string(headsLength);
    metadata["heads_window"] = std::to_string(headsWindow.getValue());
  }
  if (auto err = writeSafetensors(outputPath, metadata, tensors, shapes))
    return fail(llvm::toString(std::move(err)));

  // A report, not a product: stderr, like every tool's messages.
  llvm::errs() << kTool << ": wrote " << outputPath << ": "
               << llvm::count_if(llvm::seq<size_t>(0, tapNames.size()),
                                 isStatsTap)
               << " taps, " << weightInputs.size() << " weights, " << positions
               << " positions (" << numSamples.getValue() << " windows of "
               << window << " tokens, seed " << seed.getValue() << ")\n";
  return 0;
}

//===- KilnBench.cpp - Benchmark a Kiln artifact ------------------*- C++ -*-===//
//
// kiln-bench ARTIFACT [--prompt-tokens 128] [--decode-tokens 128] [--repeat 3]
//
// Measures prefill throughput for a deterministic prompt, decode throughput,
// this machine's memory read bandwidth, and compares decode with its roofline:
// decoding one token streams every weight once, so tokens/s cannot exceed
// bandwidth / weights.bin size. Median of --repeat runs (after one warm-up, so
// mmap'd weights are resident when they fit in memory). For "cuda" artifacts
// the steps return after the device finished (host clocks are exact) and the
// bandwidth is the device's, from a device-to-device copy.
//
//===----------------------------------------------------------------------===//
#include "kiln_rt/api.h"
#include "tools/common/Threads.h"
#include "tools/common/ToolSupport.h"
#include "tools/common/Trace.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace cl = llvm::cl;

static cl::OptionCategory benchCategory("kiln-bench options");
static cl::opt<std::string> artifactDir(cl::Positional, cl::Required,
                                        cl::desc("<artifact directory>"),
                                        cl::cat(benchCategory));
static cl::opt<int64_t> promptTokens("prompt-tokens",
                                     cl::desc("Prompt length for prefill (default 128)"),
                                     cl::init(128), cl::cat(benchCategory));
static cl::opt<int64_t> decodeTokens("decode-tokens",
                                     cl::desc("Tokens decoded after the prompt (default 128)"),
                                     cl::init(128), cl::cat(benchCategory));
static cl::opt<int> repeat("repeat", cl::desc("Timed repetitions after a warm-up, median reported (default 3)"),
                           cl::init(3), cl::cat(benchCategory));
static cl::opt<bool> noVerify("no-verify",
                              cl::desc("Skip XXH3 checksums of artifact files"),
                              cl::cat(benchCategory));
static cl::opt<std::string> trustedKeys(
    "trusted-keys",
    cl::desc("Require the artifact to be signed (manifest.sig) by one of the "
             "Ed25519 public keys in DIR (its *.pub files, or one key file); "
             "checked with every file's BLAKE2b-256 before model.so is "
             "loaded (docs/security.md)"),
    cl::value_desc("DIR"), cl::cat(benchCategory));
static cl::opt<int64_t> bandwidthMiB(
    "bandwidth-buffer-mib",
    cl::desc("Buffer for the bandwidth measurement, MiB (default 1024, >> LLC)"),
    cl::init(1024), cl::cat(benchCategory));

static cl::opt<std::string> traceFile(
    "trace",
    cl::desc("Write a Chrome trace-event JSON file (Perfetto, "
             "chrome://tracing) of one extra prefill + decode run after the "
             "timed ones: every kernel call with its op kind, IR location, "
             "bytes and FLOPs"),
    cl::value_desc("FILE.json"), cl::cat(benchCategory));
static cl::opt<bool> profile(
    "profile",
    cl::desc("After the timed runs, run prefill + decode once more with "
             "tracing and print a per-op-kind table for each: share of "
             "kernel time, achieved GB/s and GFLOP/s against the measured "
             "bandwidth and FMA peak (cpu artifacts)"),
    cl::cat(benchCategory));

namespace {

[[noreturn]] void fail(const std::string &message) {
  std::fprintf(stderr, "kiln-bench: error: %s\n", message.c_str());
  std::exit(1);
}

void check(kiln_rt_status_t status) {
  if (!status)
    return;
  std::string msg = kiln_rt_status_message(status);
  kiln_rt_status_free(status);
  fail(msg);
}

double nowSeconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

/// Sum of x[0, count) with 16 independent partial sums, so that the loop is
/// limited by memory, not by add latency (vectorized per ISA at load time).
__attribute__((target_clones("avx512f", "avx2", "default"))) float
readSum(const float *__restrict x, size_t count) {
  float acc[16] = {0};
  size_t i = 0;
  for (; i + 16 <= count; i += 16)
    for (int l = 0; l < 16; ++l)
      acc[l] += x[i + l];
  float total = 0;
  for (; i < count; ++i)
    total += x[i];
  for (int l = 0; l < 16; ++l)
    total += acc[l];
  return total;
}

/// fn(t, n) on n = kiln_rt_threads() threads at once (the caller is t = 0),
/// the thread count the kernels use; returns when all are done.
template <class Fn> void onKernelThreads(Fn fn) {
  const int n = std::max(1, kiln_rt_threads());
  std::vector<std::thread> others;
  for (int t = 1; t < n; ++t)
    others.emplace_back([&fn, t, n] { fn(t, n); });
  fn(0, n);
  for (std::thread &th : others)
    th.join();
}

/// Best-of-N read bandwidth (bytes/s): all threads sum disjoint slices of a
/// buffer far larger than the last-level cache, the way decode streams
/// weights.
double measureReadBandwidth(size_t bytes, int reps) {
  size_t count = bytes / sizeof(float) / 16 * 16;
  float *buf = static_cast<float *>(std::aligned_alloc(64, count * sizeof(float)));
  if (!buf)
    fail("cannot allocate " + std::to_string(bytes) + " bytes for the bandwidth test");
  auto slice = [count](int t, int n) {
    size_t chunk = (count / size_t(n) + 15) / 16 * 16;
    size_t begin = std::min(count, size_t(t) * chunk);
    return std::make_pair(begin, std::min(count, begin + chunk));
  };
  onKernelThreads([&](int t, int n) { // each thread first-touches its slice
    auto [begin, end] = slice(t, n);
    for (size_t i = begin; i < end; ++i)
      buf[i] = float(i & 7);
  });
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<float> partial(size_t(std::max(1, kiln_rt_threads())), 0.0f);
    double t0 = nowSeconds();
    onKernelThreads([&](int t, int n) {
      auto [begin, end] = slice(t, n);
      partial[size_t(t)] = readSum(buf + begin, end - begin);
    });
    double dt = nowSeconds() - t0;
    for (float p : partial)
      sink = sink + p;
    best = std::max(best, double(count * sizeof(float)) / dt);
  }
  std::free(buf);
  return best;
}

/// Eight-wide float vectors (GCC/Clang vector extension).
typedef float Float8 __attribute__((vector_size(32)));

/// Multiply-adds on 12 independent 8-wide accumulators (enough chains to
/// cover the FMA latency of two pipes): 192 FLOPs per iteration, no
/// memory traffic, so the loop runs at the core's FMA rate. Compiled for
/// AVX2 + FMA and for the baseline; fmaLoop() picks by CPU features (GCC's
/// "arch=" clones dispatch on the CPU model, which misses other vendors).
__attribute__((always_inline)) static inline float
fmaLoopBody(int64_t iterations, float seed) {
  constexpr int kChains = 12;
  Float8 acc[kChains];
  Float8 a, b;
  for (int j = 0; j < 8; ++j) {
    a[j] = 0.999999f;
    b[j] = 1e-7f;
    for (int l = 0; l < kChains; ++l)
      acc[l][j] = seed + float(l + j);
  }
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int l = 0; l < kChains; ++l)
      acc[l] = acc[l] * a + b;
  }
  float total = 0;
  for (int l = 0; l < kChains; ++l)
    for (int j = 0; j < 8; ++j)
      total += acc[l][j];
  return total;
}

__attribute__((target("avx2,fma"))) float fmaLoopAvx2(int64_t iterations,
                                                      float seed) {
  return fmaLoopBody(iterations, seed);
}

float fmaLoopBaseline(int64_t iterations, float seed) {
  return fmaLoopBody(iterations, seed);
}

float fmaLoop(int64_t iterations, float seed) {
  static const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2 ? fmaLoopAvx2(iterations, seed)
              : fmaLoopBaseline(iterations, seed);
}

/// Best-of-N floating-point peak (FLOP/s) of all threads running fmaLoop:
/// the arithmetic roof that GFLOP/s in --profile is compared with.
double measurePeakFlops(int reps) {
  const int64_t iterations = int64_t(1) << 23;
  double best = 0;
  volatile float sink = 0;
  const int threads = std::max(1, kiln_rt_threads());
  for (int r = 0; r < reps; ++r) {
    std::vector<float> partial(size_t(threads), 0.0f);
    double t0 = nowSeconds();
    onKernelThreads([&](int t, int) {
      partial[size_t(t)] = fmaLoop(iterations, float(t));
    });
    double dt = nowSeconds() - t0;
    for (float p : partial)
      sink = sink + p;
    best = std::max(best, 192.0 * double(iterations) * threads / dt);
  }
  return best;
}

} // namespace

/// llama-bench's names for our flags (-p, -n, -r).
static const kiln::tool::FlagAlias kBenchAliases[] = {
    {"p", "prompt-tokens"}, {"n", "decode-tokens"}, {"r", "repeat"},
    {"repetitions", "repeat"}};

int main(int argc, char **argv) {
  kiln::tool::ToolMain tool(argc, argv, "kiln-bench",
                            kiln::tool::ToolKind::Runtime);
  cl::opt<int64_t> &threadCount = kiln::tool::threadsOption(benchCategory);
  cl::HideUnrelatedOptions(benchCategory);
  kiln::tool::parseCommandLine(argc, argv,
                               "Kiln artifact benchmark: prefill and decode "
                               "throughput against the memory-bandwidth "
                               "roofline\n",
                               kBenchAliases);
  if (promptTokens < 1)
    fail("--prompt-tokens must be >= 1");
  if (decodeTokens < 1)
    fail("--decode-tokens must be >= 1");
  if (repeat < 1)
    fail("--repeat must be >= 1");
  if (bandwidthMiB < 1)
    fail("--bandwidth-buffer-mib must be >= 1");

  if (trustedKeys.getNumOccurrences() && trustedKeys.empty())
    fail("--trusted-keys needs a directory of *.pub keys or a key file; "
           "an empty value would turn signature checks off");
  if (noVerify && !trustedKeys.empty())
    fail("--no-verify and --trusted-keys are mutually exclusive");

  const std::vector<std::pair<llvm::StringRef, llvm::StringRef>> inputs = {
      {"ARTIFACT", artifactDir}, {"--trusted-keys", trustedKeys}};
  if (llvm::Error e =
          kiln::tool::Trace(traceFile, traceFile.getNumOccurrences() > 0)
              .checkPath(inputs))
    fail(llvm::toString(std::move(e)));
  // One rank of an mpirun job (a partitioned artifact, docs/parallelism.md):
  // join it before opening the artifact; rank 0 measures and prints.
  int32_t rank = 0, ranks = 1;
  if (kiln_rt_parallel_launched())
    check(kiln_rt_parallel_init(&rank, &ranks));
  kiln::tool::applyThreads(threadCount, threadCount.getNumOccurrences() > 0);

  kiln_rt_artifact_t *artifact = nullptr;
  kiln_rt_open_options_t openOptions{};
  openOptions.flags = noVerify ? KILN_RT_OPEN_SKIP_CHECKSUMS : 0;
  openOptions.trusted_keys = trustedKeys.empty() ? nullptr : trustedKeys.c_str();
  check(kiln_rt_artifact_open_with_options(artifactDir.c_str(), &openOptions,
                                           &artifact));
  if (rank != 0) {
    // The other ranks run rank 0's steps on their shards until it is done.
    check(kiln_rt_parallel_follow(artifact));
    kiln_rt_artifact_release(artifact);
    kiln_rt_parallel_finalize();
    return 0;
  }
  kiln_rt_model_info_t info;
  kiln_rt_artifact_info(artifact, &info);
  kiln_rt_session_t *session = nullptr;
  check(kiln_rt_session_create(artifact, &session));

  int64_t prompt = promptTokens, decode = decodeTokens;
  if (prompt > info.max_seq_len)
    fail("--prompt-tokens " + std::to_string(prompt) +
         " exceeds the model's context of " + std::to_string(info.max_seq_len) +
         " tokens");
  if (prompt + decode > info.max_seq_len) {
    decode = info.max_seq_len - prompt;
    std::fprintf(stderr,
                 "kiln-bench: note: decoding %lld of the %lld tokens asked "
                 "for (a %lld-token prompt in a context of %lld)\n",
                 (long long)decode, (long long)decodeTokens, (long long)prompt,
                 (long long)info.max_seq_len);
  }
  // Deterministic ids cycling through 3..vocab-1 (skips unk/BOS/EOS).
  int64_t span = std::max<int64_t>(1, info.vocab_size - 3);
  std::vector<int32_t> ids(size_t(prompt + decode));
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = int32_t(std::min<int64_t>(info.vocab_size - 1, 3 + int64_t(i) % span));

  const bool cuda = std::strcmp(info.target, "cuda") == 0;
  if (cuda)
    std::printf("artifact: %s (%s, %s, quant %s, kv %s), weights %.2f MB, "
                "device %s\n",
                artifactDir.c_str(), info.name, info.dtype, info.quant,
                info.kv_dtype, double(info.weights_bytes) / 1e6, info.device);
  else
    std::printf("artifact: %s (%s, %s, quant %s, kv %s), weights %.2f MB, %d "
                "threads\n",
                artifactDir.c_str(), info.name, info.dtype, info.quant,
                info.kv_dtype, double(info.weights_bytes) / 1e6,
                kiln_rt_threads());
  if (ranks > 1)
    std::printf("ranks: %d (mpirun; rank 0 measures, weights above are its "
                "shard)\n",
                ranks);
  std::vector<double> prefillRates, decodeRates;
  for (int r = 0; r <= repeat; ++r) { // r == 0 warms up
    kiln_rt_session_reset(session);
    double t0 = nowSeconds();
    check(kiln_rt_session_prefill(session, ids.data(), prompt));
    double t1 = nowSeconds();
    for (int64_t i = 0; i < decode; ++i)
      check(kiln_rt_session_decode(session, ids[size_t(prompt + i)]));
    double t2 = nowSeconds();
    if (r == 0)
      continue;
    prefillRates.push_back(double(prompt) / (t1 - t0));
    if (decode > 0)
      decodeRates.push_back(double(decode) / (t2 - t1));
  }
  // Medians of the timed runs: robust to one disturbed run either way.
  auto median = [](std::vector<double> v) {
    if (v.empty())
      return 0.0;
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
  };
  double bestPrefill = median(prefillRates), bestDecode = median(decodeRates);
  std::printf("prefill: %.1f tokens/s (%lld-token prompt, median of %d)\n",
              bestPrefill, (long long)prompt, repeat.getValue());
  if (decode > 0)
    std::printf("decode: %.1f tokens/s (%lld tokens, median of %d)\n",
                bestDecode, (long long)decode, repeat.getValue());
  else // --decode-tokens >= 1: the prompt filled the context
    std::printf("decode: n/a (the %lld-token prompt fills the context of "
                "%lld tokens)\n",
                (long long)prompt, (long long)info.max_seq_len);
  std::fflush(stdout);

  double bandwidth = 0;
  if (cuda) {
    // Device-to-device copy: bytes read + bytes written per second.
    check(kiln_rt_artifact_device_bandwidth(artifact, uint64_t(bandwidthMiB) << 20,
                                            10, &bandwidth));
  } else {
    bandwidth = measureReadBandwidth(size_t(bandwidthMiB) << 20, 5);
  }
  double weightBytes = double(info.weights_bytes);
  // Under mpirun every rank reads its own shard, on its own core share and
  // memory: one rank's bytes over one process's bandwidth bounds nothing.
  double roofline =
      weightBytes > 0 && ranks == 1 ? bandwidth / weightBytes : 0;
  std::printf("memory bandwidth: %.1f GB/s%s\n", bandwidth / 1e9,
              cuda ? " (device-to-device copy)" : "");
  if (ranks > 1)
    std::printf("decode roofline: n/a under mpirun (each of the %d ranks "
                "reads its own shard)\n",
                ranks);
  else
    std::printf("decode roofline: %.1f tokens/s (weights %.2f MB/token)\n",
                roofline, weightBytes / 1e6);
  if (decode > 0 && roofline > 0)
    std::printf("decode efficiency: %.1f%% of roofline\n",
                100.0 * bestDecode / roofline);
  else
    std::printf("decode efficiency: n/a\n");

  kiln::tool::Trace trace(traceFile);
  if (profile)
    trace.recordInMemory();
  if (trace.enabled()) {
    // One more run with events recorded (tracing slows short kernels a
    // little, so the timed runs above are taken without it).
    trace.attach(session);
    kiln_rt_session_reset(session);
    check(kiln_rt_session_prefill(session, ids.data(), prompt));
    for (int64_t i = 0; i < decode; ++i)
      check(kiln_rt_session_decode(session, ids[size_t(prompt + i)]));
    trace.collect(session);
    check(kiln_rt_session_set_trace(session, 0));
  }
  if (profile) {
    double peak = cuda ? 0.0 : measurePeakFlops(3);
    if (!cuda) {
      std::printf("compute peak: %.1f GFLOP/s (FMA loop, %d threads)\n",
                  peak / 1e9, kiln_rt_threads());
      if (kiln_rt_cpu_amx())
        std::printf("prefill GEMMs: AMX tiles from 16 tokens (those linears "
                    "can exceed the FMA peak), OpenBLAS below\n");
      else
        std::printf("prefill GEMMs: OpenBLAS (no AMX, or KILN_AMX=0)\n");
    }
    else
      std::printf("profile: kernel events are recorded on the cpu target "
                  "only (cuda launches are asynchronous)\n");
    std::string table;
    llvm::raw_string_ostream os(table);
    kiln::tool::printProfile(os, trace.records(), "prefill", bandwidth, peak);
    kiln::tool::printProfile(os, trace.records(), "decode", bandwidth, peak);
    std::fputs(table.c_str(), stdout);
  }
  if (llvm::Error e = trace.write("kiln-bench", inputs))
    fail(llvm::toString(std::move(e)));

  kiln_rt_session_release(session);
  kiln_rt_artifact_release(artifact);
  kiln_rt_parallel_finalize();
  return 0;
}

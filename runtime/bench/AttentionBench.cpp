//===- AttentionBench.cpp - Dense vs block-sparse prefill attention -------===//
//
// kiln-attention-bench [--tokens T] [--heads H] [--kv-heads G]
//                      [--head-dim D] [--gamma F] [--block B] [--sink S]
//                      [--local L] [--stride S] [--min-tokens M] [--chunk C]
//                      [--decode N]
//                      [--repeat R] [--seed N] [--[no-]dense] [--threads N]
//                      [input flags, below]
//
// Times the CPU prefill attention kernels of kernel_abi.h on one prompt of
// T tokens: kiln_k_attention (dense) and kiln_k_attention_sparse (dynamic
// block-sparse, docs/sparse-attention.md) on the same synthetic Q, K, V,
// and reports the sparse kernel's density (api.h
// kiln_rt_sparse_attention_stats), its speed-up and its error against the
// dense output. One prefill step from position 0 (n = T, pos = 0: keys =
// queries = T), or with --chunk C steps of at most C rows with pos
// advancing (chunked prefill: each step selects over the whole cache).
//
// Shapes, all float32 and row-major: q and both outputs [T, H * D], k and
// v [T, G * D] (the new tokens), k_cache and v_cache [T, G * D] (max_seq =
// T); scale 1 / sqrt(D). The default H = 4, G = 1, D = 128 is one GQA group
// of Llama-3-8B (32 query heads, 8 KV heads): attention costs the same per
// group, so a layer costs the printed times x its KV heads / G.
//
// Timing: after an untimed warm-up of both kernels on the first 256 rows,
// each kernel runs R times (default 3) over the whole prompt, each run
// timed with std::chrono::steady_clock; the median is printed. Threads as
// the other tools: --threads N, else OMP_NUM_THREADS, else the physical
// cores (kiln_rt_set_threads).
//
// The input. Random Gaussian Q and K give diffuse attention (every key
// about as likely as any other), which no sparse method can exploit and
// which real models do not produce; so Q and K are built to have what real
// attention has: a sink, locality and a few retrieved spans, over a diffuse
// background. The rotary pairs (i, i + D/2) (Su et al. 2021, the
// rotate-half layout of Hugging Face Llama), of angular frequency
// w_i = theta^(-2i/D), are split by frequency:
//
// * positional pairs, w_i >= 1 / --local-span: query and key vectors of a
//   KV head share one pre-RoPE base vector b (unit energy spread evenly
//   over these pairs, random phases) times sqrt(--local-logit * sqrt(D)),
//   and real RoPE rotates them by their positions, so the score of query
//   position p on key position t is local-logit * mean_i cos((p - t) w_i):
//   local-logit on the diagonal, decaying with the distance on average
//   (RoPE's long-term decay) to about 0 beyond --local-span;
// * the slowest pairs carry content, added after RoPE (what the scores see;
//   in real models position-independent matching lives in the slow pairs,
//   which barely rotate over a context): one pair for the sink, one per
//   needle, each a direction of its own. The sink: key 0 and every query
//   have sqrt(--sink-logit * sqrt(D)) along the sink direction, so key 0
//   scores sink-logit for every row. The needles: --needles disjoint spans
//   of 32 keys at random positions have sqrt(--needle-logit * sqrt(D)) along
//   their needle's direction; the queries of the first head of each group
//   (a retrieval head) have it along every needle's direction, and each
//   needle also has a "question", 32 later query rows whose queries in
//   every head align with it: those keys score needle-logit;
// * the remaining slow pairs hold Gaussian noise in queries and keys (also
//   rotated), scaled so that q . k * scale has standard deviation --noise:
//   the diffuse background, and random keys that stand out of it.
//
// The parts use disjoint pairs, so each score is exactly the sum of its
// parts. Values are standard Gaussian (zero mean: an output that averages
// many keys is short, so its relative error is large for a small absolute
// one). The defaults (theta 500000, Llama 3; local span 4096; sink, local
// and needle logits 16; noise 2; 8 needles) put, at 32K tokens, about a
// quarter of the mass on the sink, half on the 128 most recent keys, a
// quarter on the needles (nearly all of the retrieval heads') and 1% on
// the background (3.5% at 128K). The tool measures the split on 64 rows
// (the exact softmax in double over every head) and prints it, with the
// oracle density: the fewest key blocks that hold gamma of a row's mass,
// as a fraction of the row's causal blocks, averaged (a lower bound on
// what a block selection keeps for the same gamma).
//
// Output (stdout): a header, the input's mass split, one line per kernel
// ("dense  T=...: X ms (median of R)", "sparse T=... gamma=... block=...:
// X ms (median of R), density D (kept/causal block pairs), speedup S x")
// and the sparse output's error against the dense one: the relative
// Frobenius error ||O_s - O_d|| / ||O_d||, the worst (row, head)'s
// relative error, and (groups of 2 to 8 heads) the relative error of each
// head of the group over all groups, the retrieval head first. gamma = 1
// runs the dense kernel itself (error exactly 0).
// Bad flags exit 1 with a message; --help and --version print to stdout.
//
//===----------------------------------------------------------------------===//

#include "kiln_rt/api.h"
#include "kiln_rt/kernel_abi.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr const char *kTool = "kiln-attention-bench";

constexpr const char *kUsage =
    "usage: kiln-attention-bench [flags]\n"
    "  --tokens T        prompt length: keys = queries = T (default 8192)\n"
    "  --heads H         query heads (default 4)\n"
    "  --kv-heads G      KV heads, H a multiple of G (default 1: one GQA "
    "group)\n"
    "  --head-dim D      even (default 128)\n"
    "  --gamma F         sparse kernel: mass to keep, in (0, 1] (default "
    "0.95)\n"
    "  --block B         sparse kernel: block positions, [1, 4096] (default "
    "64)\n"
    "  --sink S          sparse kernel: first blocks always kept (default 1)\n"
    "  --local L         sparse kernel: diagonal blocks always kept, >= 1 "
    "(default 2)\n"
    "  --stride S        sparse kernel: 0 estimates from the blocks' mean "
    "keys (flex, the default); S in [1, B] from every S-th key on "
    "antidiagonals (antidiag)\n"
    "  --min-tokens M    sparse kernel: dense below M keys (default 1024)\n"
    "  --decode N        time decode instead: the first T - N tokens fill "
    "the cache (and its key summaries), then N one-row steps of the dense "
    "decode and of Quest sparse decode (kiln_k_attention_sparse_decode)\n"
    "  --chunk C         prefill in steps of at most C rows (default 0: one "
    "step)\n"
    "  --repeat R        runs per kernel, the median reported (default 3)\n"
    "  --dense, --no-dense  run the dense kernel (default) or skip it (no "
    "speed-up, no error)\n"
    "  --threads N       CPU kernel threads (default: OMP_NUM_THREADS, else "
    "the physical cores)\n"
    "  --seed N          input seed (default 1)\n"
    "input (see the file comment): --theta (500000), --local-span (4096 "
    "positions),\n"
    "  --sink-logit (16), --local-logit (16), --needle-logit (16), --noise "
    "(2),\n"
    "  --needles (8 spans of 32 keys)\n";

/// Needle spans and question spans are this many positions long.
constexpr int64_t kNeedleLen = 32;
/// Rows sampled for the input's mass split.
constexpr int64_t kSampleRows = 64;

struct Options {
  int64_t tokens = 8192, heads = 4, kvHeads = 1, headDim = 128;
  double gamma = 0.95;
  int64_t block = 64, sink = 1, local = 2, minTokens = 1024, stride = 0;
  int64_t chunk = 0, repeat = 3, decode = 0;
  uint64_t seed = 1;
  bool dense = true;
  int64_t threads = 0;
  bool threadsGiven = false;
  double theta = 500000.0, localSpan = 4096.0;
  double sinkLogit = 16.0, localLogit = 16.0, needleLogit = 16.0,
         noise = 2.0;
  int64_t needles = 8;
};

[[noreturn]] void fail(const std::string &msg) {
  std::fprintf(stderr, "%s: error: %s\n", kTool, msg.c_str());
  std::exit(1);
}

/// `text` as a whole decimal integer in [lo, hi], or false.
bool parseInt(const char *text, int64_t lo, int64_t hi, int64_t &out) {
  errno = 0;
  char *end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi)
    return false;
  out = v;
  return true;
}

/// `text` as a whole finite number in [lo, hi], or false.
bool parseReal(const char *text, double lo, double hi, double &out) {
  errno = 0;
  char *end = nullptr;
  const double v = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !std::isfinite(v) ||
      v < lo || v > hi)
    return false;
  out = v;
  return true;
}

Options parseArgs(int argc, char **argv) {
  Options o;
  constexpr int64_t kMaxTokens = int64_t(1) << 24;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (arg == "--version") {
      std::printf("%s (Kiln kernel ABI %d)\n", kTool, KILN_ABI_VERSION);
      std::exit(0);
    }
    if (arg == "--dense" || arg == "--no-dense") {
      o.dense = arg == "--dense";
      continue;
    }
    if (arg.rfind("--", 0) != 0)
      fail("unexpected argument '" + arg + "' (see --help)");
    // --name=value or --name value.
    std::string name = arg, value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      fail(arg + " needs a value");
    }
    const char *v = value.c_str();
    auto integer = [&](int64_t lo, int64_t hi, int64_t &out,
                       const char *range) {
      if (!parseInt(v, lo, hi, out))
        fail(name + " must be an integer in " + range + ", got '" + value +
             "'");
    };
    auto real = [&](double lo, double hi, double &out, const char *range) {
      if (!parseReal(v, lo, hi, out))
        fail(name + " must be a number in " + range + ", got '" + value +
             "'");
    };
    int64_t seed = 0;
    if (name == "--tokens")
      integer(1, kMaxTokens, o.tokens, "[1, 2^24]");
    else if (name == "--heads")
      integer(1, 4096, o.heads, "[1, 4096]");
    else if (name == "--kv-heads")
      integer(1, 4096, o.kvHeads, "[1, 4096]");
    else if (name == "--head-dim")
      integer(2, 4096, o.headDim, "[2, 4096]");
    else if (name == "--gamma") {
      if (!parseReal(v, 0.0, 1.0, o.gamma) || o.gamma <= 0.0)
        fail("--gamma must be a number in (0, 1], got '" + value + "'");
    } else if (name == "--block")
      integer(1, 4096, o.block, "[1, 4096]");
    else if (name == "--sink")
      integer(0, kMaxTokens, o.sink, "[0, 2^24]");
    else if (name == "--local")
      integer(1, kMaxTokens, o.local, "[1, 2^24]");
    else if (name == "--min-tokens")
      integer(0, kMaxTokens, o.minTokens, "[0, 2^24]");
    else if (name == "--stride")
      integer(0, 4096, o.stride, "[0, 4096]");
    else if (name == "--decode")
      integer(1, 4096, o.decode, "[1, 4096]");
    else if (name == "--chunk")
      integer(0, kMaxTokens, o.chunk, "[0, 2^24]");
    else if (name == "--repeat")
      integer(1, 1000, o.repeat, "[1, 1000]");
    else if (name == "--seed") {
      integer(0, INT64_MAX, seed, "[0, 2^63)");
      o.seed = uint64_t(seed);
    } else if (name == "--threads") {
      if (!parseInt(v, INT64_MIN, INT64_MAX, o.threads) || o.threads < 1 ||
          o.threads > 4096)
        fail("--threads must be in [1, 4096], got " + value +
             " (the default is the " +
             std::to_string(kiln_rt_default_threads()) +
             " physical cores of this machine)");
      o.threadsGiven = true;
    } else if (name == "--theta")
      real(2.0, 1e12, o.theta, "[2, 1e12]");
    else if (name == "--local-span")
      real(1.0, 1e12, o.localSpan, "[1, 1e12] positions");
    else if (name == "--sink-logit")
      real(0.0, 80.0, o.sinkLogit, "[0, 80]");
    else if (name == "--local-logit")
      real(0.0, 80.0, o.localLogit, "[0, 80]");
    else if (name == "--needle-logit")
      real(0.0, 80.0, o.needleLogit, "[0, 80]");
    else if (name == "--noise")
      real(0.0, 20.0, o.noise, "[0, 20]");
    else if (name == "--needles")
      integer(0, 64, o.needles, "[0, 64]");
    else
      fail("unknown flag '" + name + "' (see --help)");
  }
  if (o.decode > 0 && o.decode >= o.tokens)
    fail("--decode " + std::to_string(o.decode) +
         " leaves no cached token of --tokens " + std::to_string(o.tokens));
  if (o.decode > 0 && o.chunk > 0)
    fail("--decode and --chunk exclude each other");
  if (o.stride > o.block)
    fail("--stride " + std::to_string(o.stride) + " exceeds --block " +
         std::to_string(o.block));
  if (o.heads % o.kvHeads != 0)
    fail("--heads " + std::to_string(o.heads) + " is not a multiple of "
         "--kv-heads " + std::to_string(o.kvHeads));
  if (o.headDim % 2 != 0)
    fail("--head-dim must be even (rotary pairs), got " +
         std::to_string(o.headDim));
  return o;
}

/// The synthetic prompt (file comment): q [T, H * D], k, v [T, G * D].
struct Inputs {
  std::vector<float> q, k, v;
  std::vector<int64_t> needleStart; ///< key spans [s, s + kNeedleLen)
};

/// How the rotary pairs are used: the fastest `positional` pairs carry the
/// shared base vector; of the slow ones, pair `sinkPair` the sink,
/// `needlePair0 + j` needle j, and `noisePairs` more the noise.
struct PairPlan {
  int64_t positional, sinkPair, needlePair0, noisePair0, noisePairs;
};

PairPlan planPairs(const Options &o) {
  const int64_t P = o.headDim / 2;
  PairPlan plan{};
  for (int64_t i = 0; i < P; ++i)
    if (std::pow(o.theta, -2.0 * double(i) / double(o.headDim)) >=
        1.0 / o.localSpan)
      plan.positional = i + 1;
  const int64_t slow = P - plan.positional;
  const int64_t content = 1 + o.needles + (o.noise > 0.0 ? 1 : 0);
  if (slow < content)
    fail("--head-dim " + std::to_string(o.headDim) + " has " +
         std::to_string(slow) + " rotary pairs slower than --local-span " +
         std::to_string(int64_t(o.localSpan)) + " (theta " +
         std::to_string(int64_t(o.theta)) + "); the sink, " +
         std::to_string(o.needles) + " needles" +
         (o.noise > 0.0 ? " and the noise" : "") + " need " +
         std::to_string(content) +
         ": raise --head-dim or --local-span, or lower --needles");
  // Content in the slowest pairs: sink last, needles before it, noise in
  // the rest of the slow pairs.
  plan.sinkPair = P - 1;
  plan.needlePair0 = P - 1 - o.needles;
  plan.noisePair0 = plan.positional;
  plan.noisePairs = slow - 1 - o.needles;
  return plan;
}

/// Rotate-half RoPE of one head vector x [D]: pair (i, i + D/2) rotated by
/// the angle whose cosine and sine are cs[i], sn[i] (i < D/2; the angles
/// of the vector's position).
void rope(float *x, int64_t D, const double *cs, const double *sn) {
  const int64_t P = D / 2;
  for (int64_t i = 0; i < P; ++i) {
    const double a = x[i], b = x[i + P];
    x[i] = float(a * cs[i] - b * sn[i]);
    x[i + P] = float(b * cs[i] + a * sn[i]);
  }
}

Inputs makeInputs(const Options &o, const PairPlan &plan) {
  const int64_t T = o.tokens, H = o.heads, G = o.kvHeads, D = o.headDim;
  const int64_t P = D / 2, group = H / G, qDim = H * D, kvDim = G * D;
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Inputs in;
  in.q.assign(size_t(T * qDim), 0.0f);
  in.k.assign(size_t(T * kvDim), 0.0f);
  in.v.resize(size_t(T * kvDim));

  // q . k = amplitude^2 along a shared unit direction; scale = 1/sqrt(D).
  auto amplitude = [&](double logit) {
    return std::sqrt(logit * std::sqrt(double(D)));
  };
  const double aLocal = amplitude(o.localLogit);
  const double aSink = amplitude(o.sinkLogit);
  const double aNeedle = amplitude(o.needleLogit);
  // Noise: 2 * noisePairs dims of N(0, c^2) in q and k: q . k / sqrt(D) has
  // standard deviation c^2 sqrt(2 noisePairs / D) = noise.
  const double cNoise =
      plan.noisePairs > 0
          ? std::sqrt(o.noise * std::sqrt(double(D) /
                                          double(2 * plan.noisePairs)))
          : 0.0;

  // Base vector per KV head: even energy over the positional pairs, random
  // phases; unit norm.
  constexpr double kTwoPi = 6.283185307179586;
  std::uniform_real_distribution<double> phase(0.0, kTwoPi);
  std::vector<double> base(size_t(G * D), 0.0);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t i = 0; i < plan.positional; ++i) {
      const double f = phase(rng), r = 1.0 / std::sqrt(double(plan.positional));
      base[size_t(g * D + i)] = r * std::cos(f);
      base[size_t(g * D + i + P)] = r * std::sin(f);
    }

  // Pre-RoPE vector (base + noise), rotated at its position.
  std::vector<double> freq(static_cast<size_t>(P)), cs(freq), sn(freq);
  for (int64_t i = 0; i < P; ++i)
    freq[size_t(i)] = std::pow(o.theta, -2.0 * double(i) / double(D));
  auto fill = [&](float *x, int64_t g) {
    for (int64_t i = 0; i < plan.positional; ++i) {
      x[i] = float(aLocal * base[size_t(g * D + i)]);
      x[i + P] = float(aLocal * base[size_t(g * D + i + P)]);
    }
    for (int64_t i = plan.noisePair0; i < plan.noisePair0 + plan.noisePairs;
         ++i) {
      x[i] = float(cNoise * normal(rng));
      x[i + P] = float(cNoise * normal(rng));
    }
    rope(x, D, cs.data(), sn.data());
  };
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < P; ++i) {
      cs[size_t(i)] = std::cos(double(t) * freq[size_t(i)]);
      sn[size_t(i)] = std::sin(double(t) * freq[size_t(i)]);
    }
    for (int64_t g = 0; g < G; ++g)
      fill(in.k.data() + t * kvDim + g * D, g);
    for (int64_t h = 0; h < H; ++h) {
      float *x = in.q.data() + t * qDim + h * D;
      fill(x, h / group);
      x[plan.sinkPair] = float(aSink); // the sink direction, every query
      if (h % group == 0)              // retrieval head: every needle
        for (int64_t j = 0; j < o.needles; ++j)
          x[plan.needlePair0 + j] = float(aNeedle);
    }
  }
  for (int64_t g = 0; g < G; ++g)
    in.k[size_t(g * D + plan.sinkPair)] = float(aSink);

  // Needles: disjoint key spans at random positions after key 0 (those
  // that fit in 64 draws each; spans that overlapped would score twice),
  // each with a question (query rows in every head) at a random later
  // position.
  for (int64_t j = 0; j < o.needles && T > kNeedleLen; ++j) {
    int64_t s = -1;
    for (int draw = 0; draw < 64 && s < 0; ++draw) {
      const int64_t c = 1 + int64_t(rng() % uint64_t(T - kNeedleLen));
      bool clear = true;
      for (int64_t e : in.needleStart)
        clear = clear && (c + kNeedleLen <= e || e + kNeedleLen <= c);
      if (clear)
        s = c;
    }
    if (s < 0)
      continue;
    in.needleStart.push_back(s);
    for (int64_t t = s; t < s + kNeedleLen; ++t)
      for (int64_t g = 0; g < G; ++g)
        in.k[size_t(t * kvDim + g * D + plan.needlePair0 + j)] =
            float(aNeedle);
    const int64_t first = s + kNeedleLen, last = T - kNeedleLen;
    if (first > last)
      continue;
    const int64_t qs = first + int64_t(rng() % uint64_t(last - first + 1));
    for (int64_t t = qs; t < qs + kNeedleLen; ++t)
      for (int64_t h = 0; h < H; ++h)
        in.q[size_t(t * qDim + h * D + plan.needlePair0 + j)] =
            float(aNeedle);
  }
  for (float &x : in.v)
    x = float(normal(rng));
  return in;
}

/// The input's attention, exactly (double) on kSampleRows rows spread over
/// the prompt, every head: mean mass on key 0, on the local*block most
/// recent keys, on needle keys, on the rest; and the oracle density (the
/// fewest blocks holding gamma of each row's mass / its causal blocks).
struct MassSplit {
  double sink = 0, local = 0, needles = 0, background = 0, oracle = 0;
  double retrievalNeedles = 0; ///< needles, in the retrieval heads only
  int64_t rows = 0;
};

MassSplit measureMass(const Options &o, const Inputs &in) {
  const int64_t T = o.tokens, H = o.heads, D = o.headDim, B = o.block;
  const int64_t group = H / o.kvHeads, qDim = H * D, kvDim = o.kvHeads * D;
  const int64_t window = std::min<int64_t>(o.local * B, T);
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<char> isNeedle(size_t(T), 0);
  for (int64_t s : in.needleStart)
    std::fill(isNeedle.begin() + s, isNeedle.begin() + s + kNeedleLen, 1);
  const int64_t rows = std::min(T, kSampleRows), items = rows * H;
  std::vector<MassSplit> part(static_cast<size_t>(items));
  auto work = [&](int64_t w) {
    const int64_t p = (w / H + 1) * T / rows - 1, h = w % H, g = h / group;
    const float *qv = in.q.data() + p * qDim + h * D;
    std::vector<double> prob(size_t(p + 1));
    double maxLogit = -INFINITY;
    for (int64_t t = 0; t <= p; ++t) {
      const float *kv = in.k.data() + t * kvDim + g * D;
      double dot = 0.0;
      for (int64_t d = 0; d < D; ++d)
        dot += double(qv[d]) * double(kv[d]);
      prob[size_t(t)] = dot * scale;
      maxLogit = std::max(maxLogit, prob[size_t(t)]);
    }
    double total = 0.0;
    for (double &x : prob)
      total += (x = std::exp(x - maxLogit));
    MassSplit &m = part[size_t(w)];
    const int64_t blocks = p / B + 1;
    std::vector<double> blockMass(size_t(blocks), 0.0);
    for (int64_t t = 0; t <= p; ++t) {
      const double x = prob[size_t(t)] / total;
      blockMass[size_t(t / B)] += x;
      if (t == 0)
        m.sink += x;
      else if (t > p - window)
        m.local += x;
      else if (isNeedle[size_t(t)])
        m.needles += x;
      else
        m.background += x;
    }
    std::sort(blockMass.begin(), blockMass.end(), std::greater<double>());
    double have = 0.0;
    int64_t kept = 0;
    while (kept < blocks && have < o.gamma)
      have += blockMass[size_t(kept++)];
    m.oracle = double(kept) / double(blocks);
  };
  const int64_t threads =
      std::max<int64_t>(1, std::min<int64_t>(kiln_rt_threads(), items));
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t w = t; w < items; w += threads)
        work(w);
    });
  for (int64_t w = 0; w < items; w += threads)
    work(w);
  for (std::thread &t : pool)
    t.join();
  MassSplit sum;
  for (int64_t w = 0; w < items; ++w) {
    const MassSplit &m = part[size_t(w)];
    if (w % H % group == 0)
      sum.retrievalNeedles += m.needles;
    sum.sink += m.sink;
    sum.local += m.local;
    sum.needles += m.needles;
    sum.background += m.background;
    sum.oracle += m.oracle;
  }
  for (double *x : {&sum.sink, &sum.local, &sum.needles, &sum.background,
                    &sum.oracle})
    *x /= double(items);
  sum.retrievalNeedles /= double(rows * o.kvHeads);
  sum.rows = rows;
  return sum;
}

/// Milliseconds with 4 significant digits or more ("1234.5", "12.34",
/// "0.1234").
std::string formatMs(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ms >= 100.0 ? "%.1f" : "%.4g", ms);
  return buf;
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

/// Milliseconds of one prefill of the whole prompt by `step(pos, n)`, in
/// steps of at most `chunk` rows (0: one step).
template <class Step>
double timePrefill(int64_t T, int64_t chunk, Step step) {
  const int64_t c = chunk > 0 ? chunk : T;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t pos = 0; pos < T; pos += c)
    step(pos, std::min(c, T - pos));
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

/// --decode: the cache holds rows [0, T - N) (written directly, with the
/// pages' key minimum and maximum), then N one-row decode steps at
/// positions T - N .. T - 1, each timed for the dense decode
/// (kiln_k_attention) and Quest decode (kiln_k_attention_sparse_decode) on
/// caches of their own; medians per step, the page density and the
/// outputs' relative error.
int runDecode(const Options &o, const Inputs &in) {
  const int64_t T = o.tokens, H = o.heads, G = o.kvHeads, D = o.headDim;
  const int64_t qDim = H * D, kvDim = G * D, N = o.decode, T0 = T - N;
  const int64_t B = o.block, pages = (T + B - 1) / B;
  const float scale = float(1.0 / std::sqrt(double(D)));
  std::vector<float> kDense(in.k.begin(), in.k.begin() + T0 * kvDim),
      vDense(in.v.begin(), in.v.begin() + T0 * kvDim);
  kDense.resize(size_t(T * kvDim));
  vDense.resize(size_t(T * kvDim));
  std::vector<float> kSparse = kDense, vSparse = vDense;
  std::vector<float> kMin(size_t(pages * kvDim)), kMax(size_t(pages * kvDim));
  for (int64_t page = 0; page * B < T0; ++page)
    for (int64_t c = 0; c < kvDim; ++c) {
      float mn = INFINITY, mx = -INFINITY;
      for (int64_t t = page * B; t < std::min(T0, (page + 1) * B); ++t) {
        mn = std::min(mn, kSparse[size_t(t * kvDim + c)]);
        mx = std::max(mx, kSparse[size_t(t * kvDim + c)]);
      }
      kMin[size_t(page * kvDim + c)] = mn;
      kMax[size_t(page * kvDim + c)] = mx;
    }
  std::vector<float> outDense(size_t(N * qDim)), outSparse(size_t(N * qDim));
  std::vector<double> denseMs, sparseMs;
  int64_t stats[4];
  kiln_rt_sparse_decode_stats(stats, 1);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t pos = T0 + i;
    const float *q = in.q.data() + pos * qDim, *k = in.k.data() + pos * kvDim,
                *v = in.v.data() + pos * kvDim;
    auto t0 = std::chrono::steady_clock::now();
    kiln_k_attention(q, k, v, kDense.data(), vDense.data(),
                     outDense.data() + i * qDim, 1, pos, H, G, D, T, scale);
    auto t1 = std::chrono::steady_clock::now();
    kiln_k_attention_sparse_decode(
        q, k, v, kSparse.data(), vSparse.data(), kMin.data(), kMax.data(),
        outSparse.data() + i * qDim, 1, pos, H, G, D, T, scale,
        float(o.gamma), B, o.sink, o.local, /*min_budget=*/0,
        /*max_budget=*/0, o.minTokens, /*layer=*/0, /*streaming=*/0,
        /*stride=*/0);
    auto t2 = std::chrono::steady_clock::now();
    denseMs.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    sparseMs.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  kiln_rt_sparse_decode_stats(stats, 1);
  const double d = median(denseMs), sp = median(sparseMs);
  std::printf("decode dense  cached=%lld heads=%lld kv=%lld d=%lld: %.3f ms "
              "per step (median of %lld)\n",
              (long long)T0, (long long)H, (long long)G, (long long)D, d,
              (long long)N);
  std::printf("decode sparse cached=%lld gamma=%g block=%lld: %.3f ms per "
              "step, page density %.3f, %lld of %lld steps ran dense, "
              "speedup %.2fx\n",
              (long long)T0, o.gamma, (long long)B, sp,
              stats[1] > 0 ? double(stats[0]) / double(stats[1]) : 1.0,
              (long long)stats[3], (long long)stats[2], d / sp);
  double diff2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < outDense.size(); ++i) {
    const double e = double(outSparse[i]) - double(outDense[i]);
    diff2 += e * e;
    ref2 += double(outDense[i]) * double(outDense[i]);
  }
  std::printf("error  decode sparse vs dense: ||Os-Od||/||Od|| %.3e\n",
              ref2 > 0.0 ? std::sqrt(diff2 / ref2) : 0.0);
  return 0;
}

int run(const Options &o) {
  const int64_t T = o.tokens, H = o.heads, G = o.kvHeads, D = o.headDim;
  const int64_t qDim = H * D, kvDim = G * D, group = H / G;
  const float scale = float(1.0 / std::sqrt(double(D)));
  const PairPlan plan = planPairs(o);
  const int64_t steps = o.chunk > 0 ? (T + o.chunk - 1) / o.chunk : 1;

  std::printf("%s: T=%lld tokens in %s, heads=%lld kv-heads=%lld "
              "head-dim=%lld, float32, %d thread%s\n",
              kTool, (long long)T,
              steps == 1 ? "one prefill step (n=T, pos=0)"
                         : (std::to_string(steps) + " prefill steps of " +
                            std::to_string(o.chunk) + " rows (pos advancing)")
                               .c_str(),
              (long long)H, (long long)G, (long long)D, kiln_rt_threads(),
              kiln_rt_threads() == 1 ? "" : "s");
  std::printf("cost: %lld GQA group%s of %lld query heads; a layer with K KV "
              "heads costs K/%lld x these times (Llama-3-8B: K = 8, 32 "
              "layers)\n",
              (long long)G, G == 1 ? "" : "s", (long long)group,
              (long long)G);

  Inputs in = makeInputs(o, plan);
  const MassSplit mass = measureMass(o, in);
  std::printf("input: theta %g, mass of %lld rows x %lld heads (exact): sink "
              "%.3f, local %.3f (last %lld keys), needles %.3f (%zu spans of "
              "%lld; %.3f in the retrieval heads), background %.3f; oracle "
              "density %.3f (fewest blocks holding gamma of a row's mass)\n",
              o.theta, (long long)mass.rows, (long long)H, mass.sink,
              mass.local, (long long)std::min(o.local * o.block, T),
              mass.needles, in.needleStart.size(), (long long)kNeedleLen,
              mass.retrievalNeedles, mass.background, mass.oracle);
  std::fflush(stdout);
  if (o.decode > 0)
    return runDecode(o, in);

  std::vector<float> kCache(size_t(T * kvDim)), vCache(size_t(T * kvDim));
  std::vector<float> outSparse(size_t(T * qDim)), outDense;
  auto dense = [&](int64_t pos, int64_t n, float *out) {
    kiln_k_attention(in.q.data() + pos * qDim, in.k.data() + pos * kvDim,
                     in.v.data() + pos * kvDim, kCache.data(), vCache.data(),
                     out + pos * qDim, n, pos, H, G, D, T, scale);
  };
  auto sparse = [&](int64_t pos, int64_t n, float *out) {
    kiln_k_attention_sparse(in.q.data() + pos * qDim,
                            in.k.data() + pos * kvDim,
                            in.v.data() + pos * kvDim, kCache.data(),
                            vCache.data(), out + pos * qDim, n, pos, H, G, D,
                            T, scale, float(o.gamma), o.block, o.sink,
                            o.local, /*min_budget=*/0, /*max_budget=*/0,
                            o.minTokens, /*layer=*/0, /*streaming=*/0,
                            o.stride);
  };
  // Warm-up, untimed: both kernels on the first rows (the thread pool,
  // BLAS and the code start; the timed runs rewrite what they write).
  const int64_t warm = std::min<int64_t>(T, 256);
  dense(0, warm, outSparse.data());
  sparse(0, warm, outSparse.data());

  double denseMs = 0.0;
  if (o.dense) {
    outDense.resize(size_t(T * qDim));
    std::vector<double> ms;
    for (int64_t r = 0; r < o.repeat; ++r)
      ms.push_back(timePrefill(T, o.chunk, [&](int64_t pos, int64_t n) {
        dense(pos, n, outDense.data());
      }));
    denseMs = median(ms);
    std::printf("dense  T=%lld heads=%lld kv=%lld d=%lld: %s ms (median of "
                "%lld)\n",
                (long long)T, (long long)H, (long long)G, (long long)D,
                formatMs(denseMs).c_str(), (long long)o.repeat);
    std::fflush(stdout);
  }

  std::vector<double> ms;
  int64_t stats[4] = {0, 0, 0, 0};
  for (int64_t r = 0; r < o.repeat; ++r) {
    kiln_rt_sparse_attention_stats(stats, 1); // reset
    ms.push_back(timePrefill(T, o.chunk, [&](int64_t pos, int64_t n) {
      sparse(pos, n, outSparse.data());
    }));
    kiln_rt_sparse_attention_stats(stats, 1); // this run's counts
  }
  const double sparseMs = median(ms);
  // Density over the steps that selected; steps that ran the dense kernel
  // (gamma 1, below --min-tokens, only mandatory blocks, or 90% of the
  // pairs kept) are counted apart.
  char density[160];
  if (stats[1] > 0)
    std::snprintf(density, sizeof density,
                  "density %.3f (kept/causal block pairs)",
                  double(stats[0]) / double(stats[1]));
  else
    std::snprintf(density, sizeof density, "density n/a");
  if (stats[3] > 0)
    std::snprintf(density + std::strlen(density),
                  sizeof density - std::strlen(density),
                  ", %lld of %lld step%s ran dense", (long long)stats[3],
                  (long long)stats[2], stats[2] == 1 ? "" : "s");
  std::printf("sparse T=%lld gamma=%g block=%lld%s: %s ms (median of %lld), "
              "%s",
              (long long)T, o.gamma, (long long)o.block,
              o.stride ? (" stride=" + std::to_string(o.stride)).c_str() : "",
              formatMs(sparseMs).c_str(), (long long)o.repeat, density);
  if (o.dense)
    std::printf(", speedup %.2fx\n", denseMs / sparseMs);
  else
    std::printf(" (--no-dense: no speed-up or error)\n");

  if (o.dense) {
    // ||O_s - O_d|| / ||O_d|| over everything, per (row, head), and per
    // head of the group (summed over the groups).
    double diff2 = 0.0, ref2 = 0.0, worst = 0.0;
    std::vector<double> headDiff2(size_t(group), 0.0),
        headRef2(size_t(group), 0.0);
    int64_t worstRow = 0, worstHead = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const float *s = outSparse.data() + t * qDim + h * D;
        const float *d = outDense.data() + t * qDim + h * D;
        double e2 = 0.0, r2 = 0.0;
        for (int64_t i = 0; i < D; ++i) {
          const double e = double(s[i]) - double(d[i]);
          e2 += e * e;
          r2 += double(d[i]) * double(d[i]);
        }
        diff2 += e2;
        ref2 += r2;
        headDiff2[size_t(h % group)] += e2;
        headRef2[size_t(h % group)] += r2;
        const double rel = r2 > 0.0 ? std::sqrt(e2 / r2)
                                    : (e2 > 0.0 ? INFINITY : 0.0);
        if (rel > worst) {
          worst = rel;
          worstRow = t;
          worstHead = h;
        }
      }
    const double rel = ref2 > 0.0 ? std::sqrt(diff2 / ref2) : 0.0;
    std::printf("error  sparse vs dense: ||Os-Od||/||Od|| %.3e, worst (row, "
                "head) %.3e at row %lld head %lld\n",
                rel, worst, (long long)worstRow, (long long)worstHead);
    // The first head of each group is the retrieval head (file comment).
    if (group > 1 && group <= 8) {
      std::printf("error  by head of the group (the first retrieves):");
      for (int64_t h = 0; h < group; ++h)
        std::printf(" %.3e", headRef2[size_t(h)] > 0.0
                                 ? std::sqrt(headDiff2[size_t(h)] /
                                             headRef2[size_t(h)])
                                 : 0.0);
      std::printf("\n");
    }
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parseArgs(argc, argv);
  // Threads as the tools (tools/common/Threads.cpp): the flag, else
  // OMP_NUM_THREADS, else the physical cores.
  const char *env = std::getenv("OMP_NUM_THREADS");
  if (o.threadsGiven || !(env && *env))
    if (kiln_rt_status_t st = kiln_rt_set_threads(int(o.threads))) {
      std::string msg =
          std::string("--threads: ") + kiln_rt_status_message(st);
      kiln_rt_status_free(st);
      fail(msg);
    }
  try {
    return run(o);
  } catch (const std::bad_alloc &) {
    fail("cannot allocate the buffers of T=" + std::to_string(o.tokens) +
         " (q and two outputs of " +
         std::to_string(o.tokens * o.heads * o.headDim * 4 >> 20) +
         " MiB each)");
  }
}

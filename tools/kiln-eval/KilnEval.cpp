//===- KilnEval.cpp - Evaluate Kiln artifacts ---------------------*- C++ -*-===//
//
// kiln-eval ARTIFACT --text FILE [--ctx N] [--max-tokens N]
//     Perplexity of the artifact on FILE, PPL = exp(-1/T sum_t log p(x_t|x_<t))
//     (Jelinek et al. 1977). FILE is tokenized with the artifact's tokenizer
//     (no BOS) and cut into non-overlapping windows of N tokens; each window is
//     scored from a fresh session: BOS is prefilled, then the window's tokens
//     are fed one at a time with decode, and every token of the window is
//     scored given BOS + the window tokens before it (log-softmax in double of
//     the float32 logits, max subtracted). No context crosses windows.
//
// kiln-eval ARTIFACT --compare OTHER [--text FILE] [--tokens N]
//     Teacher-forced greedy-token agreement: one token stream (BOS, then the
//     first N tokens of FILE or of "Once upon a time", continued with
//     ARTIFACT's own greedy tokens when the text runs out) is fed to both
//     artifacts; at each of the N positions the argmax of their logits is
//     compared, and the next-token KL divergence of their distributions.
//
// --prefill-tokens N: the first N tokens (of each window / of the stream)
// go in one prefill step, as a long prompt does, so that prefill-time
// optimizations (--sparse-attention) are what is measured.
//
// Results on stdout (the last lines are machine-readable), progress and
// timing on stderr. Errors: "kiln-eval: error: ..." on stderr, exit status 1.
//
//===----------------------------------------------------------------------===//
#include "dialects/Kiln/Import/ImportUtils.h"
#include "kiln_rt/api.h"
#include "codegen/Artifact/SafeOutput.h"
#include "tools/common/Threads.h"
#include "tools/common/ToolSupport.h"
#include "tools/common/Trace.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace cl = llvm::cl;

static cl::OptionCategory evalCategory("kiln-eval options");

static cl::opt<std::string> artifactDir(cl::Positional, cl::Required,
                                        cl::desc("<artifact directory>"),
                                        cl::cat(evalCategory));
static cl::opt<std::string> textFile(
    "text",
    cl::desc("UTF-8 text file. Perplexity mode: the text to score (required). "
             "--compare mode: the token stream (default: the prompt "
             "\"Once upon a time\")"),
    cl::value_desc("FILE"), cl::init(""), cl::cat(evalCategory));
static cl::opt<int64_t> ctxLen(
    "ctx",
    cl::desc("Perplexity window length in tokens, >= 2 and <= the model's "
             "context (default: min(context, 512)). The text's tokens are split "
             "into NON-OVERLAPPING windows of N tokens; each window starts from a "
             "fresh session with BOS, and every token of it is scored given BOS + "
             "the preceding tokens of the same window (the last window may be "
             "shorter)"),
    cl::value_desc("N"), cl::init(0), cl::cat(evalCategory));
static cl::opt<int64_t> maxTokens(
    "max-tokens",
    cl::desc("Perplexity mode: score only the first N tokens of the text "
             "(default: all)"),
    cl::value_desc("N"), cl::init(0), cl::cat(evalCategory));
static cl::opt<std::string> compareDir(
    "compare",
    cl::desc("Teacher-forced greedy-token agreement of ARTIFACT (the reference) "
             "and OTHER (same vocabulary size): both are fed the same tokens and "
             "their argmax is compared at every position"),
    cl::value_desc("OTHER_ARTIFACT"), cl::init(""), cl::cat(evalCategory));
static cl::opt<int64_t> compareTokens(
    "tokens",
    cl::desc("--compare mode: length N of the token stream and number of "
             "positions compared (default 256; at most the smaller context). The "
             "stream is the first N tokens of the text, continued with ARTIFACT's "
             "greedy tokens when the text has fewer; stream token i is predicted "
             "by both after BOS + stream tokens 1..i-1"),
    cl::value_desc("N"), cl::init(256), cl::cat(evalCategory));
static cl::opt<int64_t> prefillTokens(
    "prefill-tokens",
    cl::desc("Feed the first N tokens in one prefill step instead of one "
             "decode step each (what a long prompt gets, and what prefill "
             "optimizations such as --sparse-attention change). Perplexity: "
             "each window's first N tokens are context, prefilled after BOS "
             "and not scored; --compare: both artifacts prefill BOS + the "
             "first N stream tokens and positions N.. are compared "
             "(default 0: every token by decode)"),
    cl::value_desc("N"), cl::init(0), cl::cat(evalCategory));
static cl::opt<bool> noVerify("no-verify",
                              cl::desc("Skip XXH3 checksums of artifact files "
                                       "(sizes are still checked)"),
                              cl::cat(evalCategory));
static cl::opt<std::string> trustedKeys(
    "trusted-keys",
    cl::desc("Require the artifact to be signed (manifest.sig) by one of the "
             "Ed25519 public keys in DIR (its *.pub files, or one key file); "
             "checked with every file's BLAKE2b-256 before model.so is "
             "loaded (docs/security.md)"),
    cl::value_desc("DIR"), cl::cat(evalCategory));
static cl::opt<std::string> dumpTokens(
    "dump-tokens",
    cl::desc("Test hook: write the evaluated token ids (no BOS), one per line, "
             "to PATH"),
    cl::value_desc("PATH"), cl::init(""), cl::Hidden, cl::cat(evalCategory));

static cl::opt<std::string> traceFile(
    "trace",
    cl::desc("Write a Chrome trace-event JSON file (Perfetto, "
             "chrome://tracing) of the evaluation: prefill/decode steps and "
             "every kernel call with its op kind, IR location, bytes and "
             "FLOPs (at most 4M events are kept)"),
    cl::value_desc("FILE.json"), cl::cat(evalCategory));


namespace {

const char *const kDefaultPrompt = "Once upon a time";

[[noreturn]] void fail(const std::string &message) {
  std::fflush(stdout);
  std::fprintf(stderr, "kiln-eval: error: %s\n", message.c_str());
  std::exit(1);
}

/// Exits with the status's message (prefixed with `context` if given).
void check(kiln_rt_status_t status, const std::string &context = "") {
  if (!status)
    return;
  std::string msg = kiln_rt_status_message(status);
  kiln_rt_status_free(status);
  fail(context.empty() ? msg : context + ": " + msg);
}

double nowSec() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

/// Reads the --text file: a regular file (a FIFO or device is refused
/// before anything blocks) of at most kMaxTextBytes.
std::string readTextFile(const std::string &path) {
  auto buf = mlir::kiln::detail::readRegularFile(
      path, mlir::kiln::detail::kMaxTextBytes, "a text file");
  if (!buf)
    fail("--text " + llvm::toString(buf.takeError()));
  std::string text = (*buf)->getBuffer().str();
  if (text.empty())
    fail("--text " + path + ": the file is empty");
  return text;
}

/// The --trace of this run (off without the flag).
kiln::tool::Trace &evalTrace() {
  static kiln::tool::Trace trace(traceFile, traceFile.getNumOccurrences() > 0);
  return trace;
}

/// What kiln-eval reads, and --dump-tokens: outputs never overwrite them.
std::vector<std::pair<llvm::StringRef, llvm::StringRef>> evalInputs() {
  return {{"ARTIFACT", artifactDir},
          {"--compare", compareDir},
          {"--text", textFile},
          {"--trusted-keys", trustedKeys},
          {"--dump-tokens", dumpTokens}};
}

/// Writes --trace after collecting the events of `sessions`.
void writeTrace(std::initializer_list<kiln_rt_session_t *> sessions) {
  for (kiln_rt_session_t *s : sessions)
    evalTrace().collect(s);
  if (llvm::Error e = evalTrace().write("kiln-eval", evalInputs()))
    fail(llvm::toString(std::move(e)));
}

/// This process's rank in an mpirun job (a partitioned artifact,
/// docs/parallelism.md): rank 0 evaluates and prints, the others follow.
int32_t jobRank = 0, jobRanks = 1;

struct Model {
  std::string dir;
  kiln_rt_artifact_t *artifact = nullptr;
  kiln_rt_session_t *session = nullptr;
  kiln_rt_model_info_t info{};
  ~Model() {
    kiln_rt_session_release(session);
    kiln_rt_artifact_release(artifact);
  }
  void open(const std::string &path) {
    dir = path;
    if (trustedKeys.getNumOccurrences() && trustedKeys.empty())
      fail("--trusted-keys needs a directory of *.pub keys or a key file; "
           "an empty value would turn signature checks off");
    if (noVerify && !trustedKeys.empty())
      fail("--no-verify and --trusted-keys are mutually exclusive");
    kiln_rt_open_options_t openOptions{};
    openOptions.flags = noVerify ? KILN_RT_OPEN_SKIP_CHECKSUMS : 0;
    openOptions.trusted_keys =
        trustedKeys.empty() ? nullptr : trustedKeys.c_str();
    check(kiln_rt_artifact_open_with_options(path.c_str(), &openOptions,
                                             &artifact));
    kiln_rt_artifact_info(artifact, &info);
    if (jobRank != 0)
      return; // a follower: rank 0's sessions run here (runPerplexity)
    check(kiln_rt_session_create(artifact, &session));
    evalTrace().attach(session);
  }
  std::string describe() const {
    return dir + " (" + info.name + ", " + info.dtype +
           (std::string(info.quant) != "none" ? ", quant " + std::string(info.quant)
                                              : std::string()) +
           ", kv " + info.kv_dtype + ", " + info.target +
           ", vocab " + std::to_string(info.vocab_size) + ", context " +
           std::to_string(info.max_seq_len) + ")";
  }
  const float *logits() const {
    const float *row = kiln_rt_session_logits(session);
    if (!row)
      fail(dir + ": the session's logits are unavailable");
    return row;
  }
};

/// The text's tokens with the artifact's tokenizer, no BOS.
std::vector<int32_t> tokenize(const Model &m, const std::string &text) {
  std::vector<int32_t> ids(text.size() + 16);
  size_t count = 0;
  kiln_rt_status_t st = kiln_rt_tokenize(m.artifact, text.data(), text.size(), 0,
                                         ids.data(), ids.size(), &count);
  if (kiln_rt_status_code(st) == KILN_RT_OUT_OF_RANGE && count > ids.size()) {
    kiln_rt_status_free(st);
    ids.resize(count);
    st = kiln_rt_tokenize(m.artifact, text.data(), text.size(), 0, ids.data(),
                          ids.size(), &count);
  }
  check(st, m.dir + ": tokenizing the text");
  ids.resize(count);
  return ids;
}

void writeTokens(const std::vector<int32_t> &ids) {
  std::FILE *out = std::fopen(dumpTokens.c_str(), "w");
  if (!out)
    fail(dumpTokens + ": cannot open for writing: " + std::strerror(errno));
  for (int32_t id : ids)
    std::fprintf(out, "%d\n", id);
  if (std::fclose(out) != 0)
    fail(dumpTokens + ": write failed");
}

/// log p(token) under softmax(logits), in double with the max subtracted.
double logProb(const float *logits, int64_t vocab, int32_t token, bool &finite) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i)
    mx = std::fmax(mx, double(logits[i]));
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i)
    sum += std::exp(double(logits[i]) - mx);
  double lp = (double(logits[token]) - mx) - std::log(sum);
  finite = std::isfinite(mx) && std::isfinite(lp);
  return lp;
}

/// A sparse kernel family's density over the run, when an artifact used
/// it: `stats` / `headStats` are its api.h counters (prefill's block pairs
/// or decode's pages), `label` its lines' prefix, `units` and `steps` what
/// it counts.
void printSparseCounters(void (*stats)(int64_t[4], int),
                         void (*headStats)(int64_t, int64_t, int64_t[2]),
                         const char *label, const char *units,
                         const char *steps) {
  int64_t st[4] = {0, 0, 0, 0};
  stats(st, 0);
  if (st[2] <= 0)
    return;
  std::printf("%s: %lld of %lld %s kept (density %.4f); %lld of %lld %s "
              "ran dense\n",
              label, (long long)st[0], (long long)st[1], units,
              st[1] > 0 ? double(st[0]) / double(st[1]) : 1.0,
              (long long)st[3], (long long)st[2], steps);
  // Each head's budget: its density per layer, KV heads in order.
  for (int64_t layer = 0; layer < 512; ++layer) {
    std::string line;
    for (int64_t h = 0; h < 64; ++h) {
      int64_t hs[2];
      headStats(layer, h, hs);
      if (hs[1] <= 0)
        break;
      char cell[32];
      std::snprintf(cell, sizeof(cell), " %.3f", double(hs[0]) / double(hs[1]));
      line += cell;
    }
    if (!line.empty())
      std::printf("%s layer %lld density per KV head:%s\n", label,
                  (long long)layer, line.c_str());
  }
}

/// Sparse prefill's and (decode=quest) sparse decode's densities.
void printSparseStats() {
  printSparseCounters(kiln_rt_sparse_attention_stats,
                      kiln_rt_sparse_attention_head_stats, "sparse attention",
                      "causal block pairs",
                      "prefill attention calls (layers x steps)");
  printSparseCounters(kiln_rt_sparse_decode_stats,
                      kiln_rt_sparse_decode_head_stats, "sparse decode",
                      "(KV head, page) pairs",
                      "decode attention calls (layers x steps)");
}

/// KL(softmax(a) || softmax(b)) in nats, in double with the maxima
/// subtracted.
double klDivergence(const float *a, const float *b, int64_t vocab) {
  double ma = -INFINITY, mb = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) {
    ma = std::fmax(ma, double(a[i]));
    mb = std::fmax(mb, double(b[i]));
  }
  double za = 0.0, zb = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    za += std::exp(double(a[i]) - ma);
    zb += std::exp(double(b[i]) - mb);
  }
  const double la = std::log(za), lb = std::log(zb);
  double kl = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double lpa = double(a[i]) - ma - la, lpb = double(b[i]) - mb - lb;
    kl += std::exp(lpa) * (lpa - lpb);
  }
  return std::max(kl, 0.0);
}

/// Index of the largest logit (the first on ties); -1 if any is not finite.
int32_t argmax(const float *logits, int64_t vocab) {
  int32_t best = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!std::isfinite(logits[i]))
      return -1;
    if (logits[i] > logits[best])
      best = int32_t(i);
  }
  return best;
}

int runPerplexity() {
  if (maxTokens.getNumOccurrences() && maxTokens < 1)
    fail("--max-tokens must be >= 1, got " + std::to_string(maxTokens));
  if (ctxLen.getNumOccurrences() && ctxLen < 2)
    fail("--ctx must be at least 2, got " + std::to_string(ctxLen));
  if (prefillTokens < 0)
    fail("--prefill-tokens must be >= 0, got " + std::to_string(prefillTokens));
  std::string text = readTextFile(textFile);
  Model m;
  m.open(artifactDir);
  if (jobRank != 0) {
    // The other ranks run rank 0's steps on their shards until it is done.
    check(kiln_rt_parallel_follow(m.artifact));
    return 0;
  }
  const int64_t context = m.info.max_seq_len;
  int64_t ctx = std::min<int64_t>(context, 512);
  if (ctxLen.getNumOccurrences()) {
    if (ctxLen > context)
      fail("--ctx " + std::to_string(ctxLen) + " exceeds the model's context of " +
           std::to_string(context) + " tokens");
    ctx = ctxLen;
  }
  if (prefillTokens >= ctx)
    fail("--prefill-tokens " + std::to_string(prefillTokens) +
         " leaves no token to score in a window of --ctx " +
         std::to_string(ctx) + " tokens (at most " + std::to_string(ctx - 1) +
         ")");
  double t0 = nowSec();
  std::vector<int32_t> ids = tokenize(m, text);
  double tokenizeSec = nowSec() - t0;
  if (ids.empty())
    fail("--text " + textFile + ": the text has no tokens");
  size_t total = ids.size();
  if (maxTokens.getNumOccurrences() && size_t(maxTokens) < ids.size())
    ids.resize(size_t(maxTokens));
  if (!dumpTokens.empty())
    writeTokens(ids);

  const int64_t n = int64_t(ids.size());
  const int64_t vocab = m.info.vocab_size;
  const int64_t fullWindows = n / ctx, rest = n % ctx;
  const int64_t windows = fullWindows + (rest ? 1 : 0);
  std::fprintf(stderr, "kiln-eval: tokenized %zu bytes into %zu tokens in %.2f s\n",
               text.size(), total, tokenizeSec);

  double nll = 0.0;
  double start = nowSec(), lastReport = start;
  int64_t scored = 0;
  for (int64_t w = 0; w < windows; ++w) {
    int64_t begin = w * ctx, end = std::min(n, begin + ctx);
    kiln_rt_session_reset(m.session);
    // --prefill-tokens: BOS and the window's first tokens in one step (a
    // window at least one token longer keeps one token to score).
    const int64_t context = std::min<int64_t>(prefillTokens, end - begin - 1);
    std::vector<int32_t> prompt = {m.info.bos_id};
    if (context > 0)
      prompt.insert(prompt.end(), ids.begin() + begin,
                    ids.begin() + begin + context);
    check(kiln_rt_session_prefill(m.session, prompt.data(), prompt.size()));
    const int64_t first = begin + std::max<int64_t>(context, 0);
    for (int64_t i = first; i < end; ++i) {
      if (i > first)
        check(kiln_rt_session_decode(m.session, ids[size_t(i - 1)]));
      bool finite = true;
      double lp = logProb(m.logits(), vocab, ids[size_t(i)], finite);
      if (!finite)
        fail("non-finite logits in window " + std::to_string(w) + " at position " +
             std::to_string(i - begin) + " (token " + std::to_string(ids[size_t(i)]) +
             ")");
      nll -= lp;
      ++scored;
    }
    evalTrace().collect(m.session);
    double now = nowSec();
    if (now - lastReport >= 2.0 || w + 1 == windows) {
      lastReport = now;
      std::fprintf(stderr,
                   "kiln-eval: window %lld/%lld, %lld tokens, running perplexity "
                   "%.4f, %.0f tokens/s\n",
                   (long long)(w + 1), (long long)windows, (long long)scored,
                   std::exp(nll / double(scored)),
                   double(scored) / std::max(now - start, 1e-9));
    }
  }
  double elapsed = nowSec() - start;
  std::fprintf(stderr, "kiln-eval: scored %lld tokens in %.2f s\n",
               (long long)scored, elapsed);

  double meanNll = nll / double(scored);
  std::printf("artifact: %s\n", m.describe().c_str());
  std::printf("text: %s (%zu bytes, %zu tokens%s)\n", textFile.c_str(),
              text.size(), total,
              int64_t(total) > n
                  ? (", first " + std::to_string(n) + " scored (--max-tokens)").c_str()
                  : "");
  std::printf("windowing: non-overlapping windows of %lld tokens, each from a fresh "
              "session: BOS, then every window token scored given BOS + the "
              "preceding tokens of its window\n",
              (long long)ctx);
  if (prefillTokens > 0)
    std::printf("prefill: the first %lld tokens of each window (all but the "
                "last of a shorter last window) are context, prefilled in one "
                "call after BOS (steps of at most the artifact's "
                "max_prefill_tokens) and not scored\n",
                (long long)prefillTokens);
  if (rest && fullWindows)
    std::printf("windows: %lld (%lld of %lld tokens + 1 of %lld)\n",
                (long long)windows, (long long)fullWindows, (long long)ctx,
                (long long)rest);
  else if (rest)
    std::printf("windows: 1 (of %lld tokens)\n", (long long)rest);
  else
    std::printf("windows: %lld (of %lld tokens)\n", (long long)windows,
                (long long)ctx);
  printSparseStats();
  std::printf("nll per token: %.6f nats (%.6f bits)\n", meanNll,
              meanNll / std::log(2.0));
  std::printf("perplexity: %.4f\n", std::exp(meanNll));
  std::printf("tokens: %lld\n", (long long)scored);
  writeTrace({m.session});
  return 0;
}

int runCompare() {
  if (compareTokens < 1)
    fail("--tokens must be >= 1, got " + std::to_string(compareTokens));
  if (prefillTokens < 0)
    fail("--prefill-tokens must be >= 0, got " + std::to_string(prefillTokens));
  std::string text = textFile.empty() ? std::string(kDefaultPrompt)
                                      : readTextFile(textFile);
  Model a, b;
  a.open(artifactDir);
  b.open(compareDir);
  if (a.info.vocab_size != b.info.vocab_size)
    fail("cannot compare: " + artifactDir + " has a vocabulary of " +
         std::to_string(a.info.vocab_size) + " tokens but " + compareDir +
         " has " + std::to_string(b.info.vocab_size));
  const int64_t context = std::min(a.info.max_seq_len, b.info.max_seq_len);
  const int64_t n = compareTokens;
  if (n > context)
    fail("--tokens " + std::to_string(n) + " exceeds the context of " +
         std::to_string(context) + " tokens (the smaller of the two artifacts')");

  std::vector<int32_t> textIds = tokenize(a, text);
  bool sameSplit = tokenize(b, text) == textIds;
  if (int64_t(textIds.size()) > n)
    textIds.resize(size_t(n));
  const int64_t fromText = int64_t(textIds.size());

  // Teacher forcing: feed BOS, then the stream; position i predicts stream[i].
  // With --prefill-tokens P, BOS + stream[0, P) are one prefill step (the
  // text's tokens: P <= what the text gives) and positions P.. compared.
  const int64_t prefix = prefillTokens;
  if (prefix >= n)
    fail("--prefill-tokens " + std::to_string(prefix) +
         " leaves no position to compare of --tokens " + std::to_string(n));
  if (prefix > fromText)
    fail("--prefill-tokens " + std::to_string(prefix) + " exceeds the " +
         std::to_string(fromText) + " tokens the text gives");
  std::vector<int32_t> stream = textIds;
  int64_t agree = 0, firstDiff = -1;
  double klSum = 0.0, klMax = 0.0;
  const int64_t vocab = a.info.vocab_size;
  double start = nowSec();
  for (int64_t i = prefix; i < n; ++i) {
    int32_t in = i == 0 ? a.info.bos_id : stream[size_t(i - 1)];
    if (i == prefix) {
      std::vector<int32_t> prompt = {a.info.bos_id};
      prompt.insert(prompt.end(), stream.begin(), stream.begin() + prefix);
      check(kiln_rt_session_prefill(a.session, prompt.data(), prompt.size()));
      check(kiln_rt_session_prefill(b.session, prompt.data(), prompt.size()));
    } else {
      check(kiln_rt_session_decode(a.session, in));
      check(kiln_rt_session_decode(b.session, in));
    }
    int32_t pa = argmax(a.logits(), vocab);
    int32_t pb = argmax(b.logits(), vocab);
    if (pa < 0 || pb < 0)
      fail("non-finite logits from " + (pa < 0 ? artifactDir : compareDir) +
           " at position " + std::to_string(i));
    const double kl = klDivergence(a.logits(), b.logits(), vocab);
    klSum += kl;
    klMax = std::max(klMax, kl);
    if (pa == pb)
      ++agree;
    else if (firstDiff < 0)
      firstDiff = i;
    if (i >= fromText)
      stream.push_back(pa); // the text ran out: continue with the reference's token
  }
  const int64_t compared = n - prefix;
  std::fprintf(stderr, "kiln-eval: compared %lld positions in %.2f s\n",
               (long long)n, nowSec() - start);
  if (!dumpTokens.empty())
    writeTokens(stream);

  std::printf("reference: %s\n", a.describe().c_str());
  std::printf("candidate: %s\n", b.describe().c_str());
  std::printf("text: %s\n", textFile.empty()
                                ? ("built-in prompt \"" + std::string(kDefaultPrompt) + "\"").c_str()
                                : textFile.c_str());
  if (!sameSplit)
    std::printf("note: the candidate's tokenizer splits the text differently; the "
                "reference's token ids are fed to both\n");
  std::printf("stream: BOS + %lld text tokens + %lld greedy tokens of the reference "
              "(teacher-forced: both artifacts are fed the same tokens, argmax "
              "compared at each position)\n",
              (long long)fromText, (long long)(n - fromText));
  if (firstDiff < 0)
    std::printf("first disagreement: none\n");
  else
    std::printf("first disagreement: position %lld\n", (long long)firstDiff);
  if (prefix > 0)
    std::printf("prefill: BOS + the first %lld stream tokens in one call "
                "(steps of at most the artifact's max_prefill_tokens); "
                "positions %lld..%lld compared\n",
                (long long)prefix, (long long)prefix, (long long)(n - 1));
  printSparseStats();
  std::printf("next-token KL(reference || candidate): mean %.6g nats, max "
              "%.6g\n",
              klSum / double(compared), klMax);
  std::printf("agreement: %.2f%% (%lld of %lld positions)\n",
              100.0 * double(agree) / double(compared), (long long)agree,
              (long long)compared);
  writeTrace({a.session, b.session});
  return 0;
}

} // namespace

/// llama.cpp perplexity's names for our flags (-f FILE, -c N).
static const kiln::tool::FlagAlias kEvalAliases[] = {
    {"f", "text"}, {"file", "text"}, {"c", "ctx"}, {"ctx-size", "ctx"}};

int main(int argc, char **argv) {
  kiln::tool::ToolMain tool(argc, argv, "kiln-eval",
                            kiln::tool::ToolKind::Runtime);
  cl::opt<int64_t> &threadCount = kiln::tool::threadsOption(evalCategory);
  cl::HideUnrelatedOptions(evalCategory);
  kiln::tool::parseCommandLine(
          argc, argv,
          "Kiln artifact evaluation: perplexity and greedy-token agreement\n\n"
          "  kiln-eval ARTIFACT --text FILE [--ctx N] [--max-tokens N]\n"
          "    Perplexity exp(-1/T sum log p(x_t | x_<t)) of FILE, tokenized with\n"
          "    the artifact's tokenizer (no BOS) and split into NON-OVERLAPPING\n"
          "    windows of --ctx tokens. Each window is scored from a fresh session:\n"
          "    BOS, then the window's tokens one at a time; every token of the\n"
          "    window is scored given BOS + the window tokens before it (no\n"
          "    context crosses windows). Ends with 'perplexity: X' and 'tokens: T'.\n\n"
          "  kiln-eval ARTIFACT --compare OTHER [--text FILE] [--tokens N]\n"
          "    Teacher-forced greedy-token agreement: both artifacts are fed the\n"
          "    same tokens (BOS, then the first N tokens of the text, default\n"
          "    prompt \"Once upon a time\", continued with ARTIFACT's greedy tokens\n"
          "    if the text is shorter) and their argmax is compared at each of the\n"
          "    N positions (after BOS and after each of the first N-1 stream\n"
          "    tokens). Ends with 'agreement: X.XX% (k of n positions)'.\n",
          kEvalAliases);

  if (llvm::Error e = evalTrace().checkPath(evalInputs()))
    fail(llvm::toString(std::move(e)));
  if (!dumpTokens.empty()) {
    std::vector<std::pair<llvm::StringRef, llvm::StringRef>> in = evalInputs();
    in.pop_back(); // itself
    if (llvm::Error e = mlir::kiln::checkOutputIsNotAnInput(dumpTokens, in,
                                                           "--dump-tokens"))
      fail(llvm::toString(std::move(e)));
  }
  // One rank of an mpirun job: join it before opening the artifact, which
  // maps this rank's shard.
  if (kiln_rt_parallel_launched())
    check(kiln_rt_parallel_init(&jobRank, &jobRanks));
  if (jobRanks > 1 && !compareDir.empty())
    fail("--compare runs two artifacts side by side in one process; under "
         "mpirun (" + std::to_string(jobRanks) + " ranks) only perplexity "
         "runs: compare the partitioned artifact's perplexity with the "
         "other's instead");
  kiln::tool::applyThreads(threadCount, threadCount.getNumOccurrences() > 0);
  struct Finalize { // after the models are released (their followers end)
    ~Finalize() { kiln_rt_parallel_finalize(); }
  } finalize;
  if (compareDir.empty()) {
    if (compareTokens.getNumOccurrences())
      fail("--tokens applies only to --compare (use --max-tokens to limit "
           "perplexity)");
    if (textFile.empty())
      fail("--text FILE is required for perplexity (or pass --compare "
           "OTHER_ARTIFACT)");
    return runPerplexity();
  }
  if (ctxLen.getNumOccurrences())
    fail("--ctx applies only to perplexity, not to --compare");
  if (maxTokens.getNumOccurrences())
    fail("--max-tokens applies only to perplexity, not to --compare (use --tokens)");
  return runCompare();
}

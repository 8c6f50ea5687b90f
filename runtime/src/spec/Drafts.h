//===- Drafts.h - Model-free drafts and the adaptive draft length -*- C++ -*-===//
//
// The parts of speculative decoding (docs/speculative.md) that need no
// model: prompt lookup, the suffix index, and the adaptive choice of the
// draft length. The serving engine (serve/Engine.cpp) runs them per request
// and kiln-run on its session (tools/common/Speculative.h).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_SPEC_DRAFTS_H
#define KILN_RUNTIME_SPEC_DRAFTS_H

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace kiln::rt::spec {

/// The adaptive draft length: with per-token acceptance probability a
/// (tokens accepted before a mismatch, decayed counts with a prior: half a
/// token each way, or optimistic()), a draft of k tokens yields on average E(k) = 1 + a + ...
/// + a^k tokens (the draft prefix kept plus the model's own next token;
/// Leviathan et al. 2023, eq. 1) for the cost C(k) of verifying k + 1 rows
/// plus drafting k tokens (C(0): a decode step); each step takes the k that
/// maximises E(k) / C(k) (a longer draft by at least kMargin). Draft tokens
/// checked against plain decode steps' tokens update the counts too, so a
/// controller at k = 0 notices when drafting starts to pay again.
struct DraftController {
  std::vector<double> costMs; ///< C(k) in milliseconds, k = 0 .. K
  double accepted = 0.0, rejected = 0.0;
  /// Per observation: an effective window of about 30 steps.
  static constexpr double kDecay = 0.97;
  /// A longer draft must promise this much more throughput than the best
  /// shorter one (rollbacks and timing noise are not in C(k)).
  static constexpr double kMargin = 1.05;

  /// The decayed per-token acceptance estimate a in (0, 1).
  /// Pseudo-counts of the prior: half a token each way (a = 0.5), or
  /// optimistic() for drafts that give no free evidence.
  double priorAccepted = 0.5, priorRejected = 0.5;

  /// A prior of a = 0.9 worth 5 observations, for draft models: their
  /// tokens cost draft steps, so a controller that starts at a = 0.5 on an
  /// expensive draft never drafts and never learns that the draft is good;
  /// this one drafts first and stops within a few verify steps if it is
  /// not (decay 0.97: the prior fades as observations come in).
  void optimistic() {
    priorAccepted = 4.5;
    priorRejected = 0.5;
  }

  double acceptance() const {
    return (accepted + priorAccepted) /
           (accepted + rejected + priorAccepted + priorRejected);
  }
  /// Records a draft prefix of `ok` tokens kept, then a mismatch (or not,
  /// when the whole draft stood).
  void observe(int64_t ok, bool mismatch);
  /// The best k <= available (0 when costMs is empty): the largest rate
  /// E(k) / C(k), a longer draft winning by kMargin.
  int64_t choose(int64_t available) const;
  /// choose() with another objective: `rate(k, E(k))` for k = 0 ..
  /// available (E(0) = 1), the best k by kMargin (the serving engine prices
  /// a draft by its whole step's throughput).
  template <class Rate> int64_t chooseBy(int64_t available, Rate rate) const {
    const double a = acceptance();
    int64_t best = 0;
    double bestRate = rate(int64_t(0), 1.0), expected = 1.0, term = 1.0;
    for (int64_t k = 1; k <= available; ++k) {
      term *= a;
      expected += term;
      const double r = rate(k, expected);
      if (r > kMargin * bestRate) {
        bestRate = r;
        best = k;
      }
    }
    return best;
  }
  /// Whether some draft length could pay even if every draft token were
  /// accepted: (k + 1) / C(k) > kMargin / C(0) for some k >= 1. When not
  /// (a draft model as slow as the target), drafting never pays and a
  /// caller need not even probe.
  bool canPay() const;
};

/// Prompt lookup (n-gram drafting; Saxena 2023, the "prompt lookup
/// decoding" of vLLM and transformers): the k tokens that followed the
/// latest earlier occurrence of the last n tokens of `history`, n = 3, 2,
/// 1 (the longest match first), the continuation repeating itself past the
/// end of the history (a repetition drafts k tokens); empty when no suffix
/// recurs.
std::vector<int32_t> ngramDraft(const std::vector<int32_t> &history,
                                int64_t k);

/// A SuffixDecoding-style draft (Oliaro et al. 2024, "SuffixDecoding:
/// Extreme Speculative Decoding for Emerging AI Applications"): an index of
/// every n-gram (n <= kMaxMatch) of a token corpus (the request's prompt
/// and output so far, plus earlier requests' outputs added with
/// addDocument) to the positions after its occurrences. A draft starts
/// from the longest suffix of the context that occurs earlier (up to
/// kMaxMatch tokens) and follows its occurrences' continuations token by
/// token, taking the most frequent next token among the occurrences still
/// consistent with the draft (the walk down the suffix tree's most frequent
/// children); it stops when the empirical probability of the whole path,
/// the product of each choice's share, drops below kMinPathProbability.
/// Frequencies let it prefer the continuation a template repeats over the
/// latest one, which prompt lookup always takes.
class SuffixIndex {
public:
  /// Longest context suffix matched, in tokens.
  static constexpr int64_t kMaxMatch = 16;
  static constexpr double kMinPathProbability = 0.1;
  /// Tokens kept from earlier documents (older ones are dropped).
  static constexpr int64_t kMaxCorpusTokens = int64_t(1) << 20;

  /// Starts a new request whose context begins with `prompt`; the earlier
  /// requests' tokens stay in the corpus.
  void beginRequest(const std::vector<int32_t> &prompt);
  /// Appends one token of the current request.
  void append(int32_t token);
  /// At most k draft tokens continuing the current request.
  std::vector<int32_t> draft(int64_t k) const;
  int64_t corpusTokens() const { return int64_t(corpus_.size()); }

private:
  void indexEnd(int64_t end);
  /// Tokens; requests are separated by kSeparator, which no n-gram spans.
  std::vector<int32_t> corpus_;
  /// Hash of an n-gram -> positions just after its occurrences.
  std::unordered_map<uint64_t, std::vector<int64_t>> ends_;
  int64_t requestStart_ = 0;
  static constexpr int32_t kSeparator = -1;
};

} // namespace kiln::rt::spec

#endif // KILN_RUNTIME_SPEC_DRAFTS_H

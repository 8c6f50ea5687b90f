//===- Drafts.cpp - Model-free drafts and the adaptive draft length -------===//
//
// Drafts.h. The suffix index hashes n-grams (FNV-1a over the token ids)
// and checks every candidate occurrence token by token, so a hash
// collision costs time, never a wrong draft position.
//
//===----------------------------------------------------------------------===//
#include "spec/Drafts.h"

#include <algorithm>
#include <map>

namespace kiln::rt::spec {

void DraftController::observe(int64_t ok, bool mismatch) {
  accepted = kDecay * accepted + double(ok);
  rejected = kDecay * rejected + (mismatch ? 1.0 : 0.0);
}

int64_t DraftController::choose(int64_t available) const {
  if (costMs.empty())
    return 0;
  return chooseBy(std::min<int64_t>(available, int64_t(costMs.size()) - 1),
                  [&](int64_t k, double expected) {
                    return expected / costMs[size_t(k)];
                  });
}

bool DraftController::canPay() const {
  for (size_t k = 1; k < costMs.size(); ++k)
    if (double(k + 1) / costMs[k] > kMargin / costMs[0])
      return true;
  return false;
}

std::vector<int32_t> ngramDraft(const std::vector<int32_t> &history,
                                int64_t k) {
  const int64_t h = int64_t(history.size());
  for (int64_t n = std::min<int64_t>(3, h - 1); n >= 1; --n) {
    // Occurrences ending before the suffix itself, latest first.
    for (int64_t start = h - n - 1; start >= 0; --start) {
      if (!std::equal(history.begin() + start, history.begin() + start + n,
                      history.end() - n))
        continue;
      // The continuation, copied as LZ77 copies overlap: past the end of
      // the history it repeats itself with the period h - from, so a
      // repetition drafts k tokens, not the one that separates it from
      // its own latest occurrence.
      const int64_t from = start + n;
      std::vector<int32_t> draft;
      for (int64_t i = 0; i < k; ++i)
        draft.push_back(from + i < h ? history[size_t(from + i)]
                                     : draft[size_t(from + i - h)]);
      return draft;
    }
  }
  return {};
}

//===----------------------------------------------------------------------===//
// SuffixIndex
//===----------------------------------------------------------------------===//

namespace {
constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;
uint64_t mixToken(uint64_t h, int32_t t) {
  uint32_t u = uint32_t(t);
  for (int i = 0; i < 4; ++i) {
    h ^= (u >> (8 * i)) & 0xffu;
    h *= kFnvPrime;
  }
  return h;
}
} // namespace

void SuffixIndex::indexEnd(int64_t end) {
  // Every n-gram ending at `end` (exclusive), read backwards: the hash of
  // tokens [end - n, end) for n = 1 .. kMaxMatch, stopping at a separator.
  uint64_t h = kFnvOffset;
  for (int64_t n = 1; n <= kMaxMatch && end - n >= 0; ++n) {
    const int32_t t = corpus_[size_t(end - n)];
    if (t == kSeparator)
      break;
    h = mixToken(h, t);
    ends_[h ^ uint64_t(n)].push_back(end);
  }
}

void SuffixIndex::beginRequest(const std::vector<int32_t> &prompt) {
  if (int64_t(corpus_.size()) > kMaxCorpusTokens) {
    // Too much history: start over with this request alone.
    corpus_.clear();
    ends_.clear();
  }
  if (!corpus_.empty())
    corpus_.push_back(kSeparator);
  requestStart_ = int64_t(corpus_.size());
  for (int32_t t : prompt)
    append(t);
}

void SuffixIndex::append(int32_t token) {
  corpus_.push_back(token);
  indexEnd(int64_t(corpus_.size()));
}

std::vector<int32_t> SuffixIndex::draft(int64_t k) const {
  const int64_t end = int64_t(corpus_.size());
  const int64_t context = end - requestStart_;
  if (k <= 0 || context <= 0)
    return {};
  // The longest suffix of the context with an earlier occurrence.
  std::vector<int64_t> match;
  uint64_t h = kFnvOffset;
  for (int64_t n = 1; n <= std::min(kMaxMatch, context); ++n) {
    h = mixToken(h, corpus_[size_t(end - n)]);
    auto it = ends_.find(h ^ uint64_t(n));
    if (it == ends_.end())
      break;
    std::vector<int64_t> found;
    for (int64_t e : it->second) {
      if (e >= end) // the suffix itself
        continue;
      if (std::equal(corpus_.begin() + (e - n), corpus_.begin() + e,
                     corpus_.end() - n))
        found.push_back(e);
    }
    if (found.empty())
      break; // no longer suffix occurs either
    match = std::move(found);
  }
  // Follow the occurrences' continuations by majority.
  std::vector<int32_t> out;
  double path = 1.0;
  std::map<int32_t, int64_t> counts;
  for (int64_t d = 0; d < k && !match.empty(); ++d) {
    counts.clear();
    int64_t total = 0;
    for (int64_t e : match) {
      const int64_t p = e + d;
      if (p >= end || corpus_[size_t(p)] == kSeparator)
        continue;
      ++counts[corpus_[size_t(p)]];
      ++total;
    }
    if (total == 0)
      break;
    auto best = std::max_element(
        counts.begin(), counts.end(),
        [](const auto &a, const auto &b) { return a.second < b.second; });
    path *= double(best->second) / double(total);
    if (path < kMinPathProbability)
      break;
    out.push_back(best->first);
    std::vector<int64_t> kept;
    for (int64_t e : match)
      if (e + d < end && corpus_[size_t(e + d)] == best->first)
        kept.push_back(e);
    match = std::move(kept);
  }
  return out;
}

} // namespace kiln::rt::spec

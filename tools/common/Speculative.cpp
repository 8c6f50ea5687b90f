//===- Speculative.cpp - Drafts and the adaptive draft length ------------===//
//
// Speculative.h. The suffix index hashes n-grams (FNV-1a over the token
// ids) and checks every candidate occurrence token by token, so a hash
// collision costs time, never a wrong draft position.
//
//===----------------------------------------------------------------------===//
#include "tools/common/Speculative.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

namespace kiln::tool {

void DraftController::observe(int64_t ok, bool mismatch) {
  accepted = kDecay * accepted + double(ok);
  rejected = kDecay * rejected + (mismatch ? 1.0 : 0.0);
}

int64_t DraftController::choose(int64_t available) const {
  if (costMs.empty())
    return 0;
  const double a = acceptance();
  int64_t best = 0;
  double bestRate = 1.0 / costMs[0], expected = 1.0, term = 1.0;
  for (int64_t k = 1; k <= available && k < int64_t(costMs.size()); ++k) {
    term *= a;
    expected += term;
    const double rate = expected / costMs[size_t(k)];
    if (rate > kMargin * bestRate) {
      bestRate = rate;
      best = k;
    }
  }
  return best;
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
      const int64_t from = start + n;
      const int64_t count = std::min(k, h - from);
      if (count <= 0)
        continue;
      return std::vector<int32_t>(history.begin() + from,
                                  history.begin() + from + count);
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

//===----------------------------------------------------------------------===//
// DraftModel
//===----------------------------------------------------------------------===//

namespace {
std::string takeMessage(kiln_rt_status_t status) {
  std::string m = kiln_rt_status_message(status);
  kiln_rt_status_free(status);
  return m;
}
double nowMs() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch())
      .count();
}
} // namespace

DraftModel::~DraftModel() {
  kiln_rt_sampler_release(sampler_);
  kiln_rt_session_release(session_);
  kiln_rt_artifact_release(artifact_);
}

std::string DraftModel::open(const std::string &path,
                             kiln_rt_artifact_t *target,
                             const kiln_rt_sampler_params_t &sampling,
                             bool verify) {
  kiln_rt_open_options_t options{};
  options.flags = verify ? 0u : uint32_t(KILN_RT_OPEN_SKIP_CHECKSUMS);
  if (kiln_rt_status_t s =
          kiln_rt_artifact_open_with_options(path.c_str(), &options, &artifact_))
    return "draft artifact: " + takeMessage(s);
  kiln_rt_model_info_t mine{}, theirs{};
  kiln_rt_artifact_info(artifact_, &mine);
  kiln_rt_artifact_info(target, &theirs);
  if (std::strcmp(mine.target, "cpu") != 0)
    return "draft artifact " + path + ": target '" + mine.target +
           "', expected cpu (the session runs the draft on the host)";
  if (mine.vocab_size != theirs.vocab_size)
    return "draft artifact " + path + " has a vocabulary of " +
           std::to_string(mine.vocab_size) + " tokens, the model " +
           std::to_string(theirs.vocab_size) +
           ": a draft must use the same tokenizer";
  if (mine.bos_id != theirs.bos_id || mine.eos_id != theirs.eos_id)
    return "draft artifact " + path + " has BOS/EOS ids " +
           std::to_string(mine.bos_id) + "/" + std::to_string(mine.eos_id) +
           ", the model " + std::to_string(theirs.bos_id) + "/" +
           std::to_string(theirs.eos_id) +
           ": a draft must use the same tokenizer";
  // Every token's text, decoded after a plain token (no BOS space rule).
  for (int64_t id = 0; id < mine.vocab_size; ++id) {
    const char *a = nullptr, *b = nullptr;
    size_t la = 0, lb = 0;
    if (kiln_rt_status_t s =
            kiln_rt_detokenize(artifact_, -1, int32_t(id), &a, &la))
      return "draft artifact " + path + ": " + takeMessage(s);
    std::string pa(a, la);
    if (kiln_rt_status_t s = kiln_rt_detokenize(target, -1, int32_t(id), &b, &lb))
      return "draft check: " + takeMessage(s);
    if (pa != std::string(b, lb))
      return "draft artifact " + path + ": token " + std::to_string(id) +
             " is '" + pa + "', the model's '" + std::string(b, lb) +
             "': a draft must use the same tokenizer";
  }
  vocab_ = mine.vocab_size;
  ctx_ = std::min(mine.max_seq_len, theirs.max_seq_len);
  if (kiln_rt_status_t s = kiln_rt_session_create(artifact_, &session_))
    return "draft artifact " + path + ": " + takeMessage(s);
  kiln_rt_sampler_params_t params = sampling;
  params.seed = sampling.seed ^ 0x9e3779b97f4a7c15ull; // its own stream
  if (params.seed == 0)
    params.seed = 1;
  if (kiln_rt_status_t s = kiln_rt_sampler_create(&params, vocab_, &sampler_))
    return "draft sampler: " + takeMessage(s);
  greedy_ = sampling.temperature == 0.0f;
  logits_.resize(size_t(vocab_));
  return "";
}

kiln_rt_status_t DraftModel::catchUp(const std::vector<int32_t> &history) {
  // Keep the longest common prefix of what the cache holds and the
  // history (the draft's own rejected tokens are forgotten).
  size_t common = 0;
  while (common < cached_.size() && common < history.size() &&
         cached_[common] == history[common])
    ++common;
  if (common < cached_.size()) {
    if (kiln_rt_status_t s = kiln_rt_session_rollback(session_, int64_t(common)))
      return s;
    cached_.resize(common);
  }
  // The draft's last logits must be those after the whole history: feed at
  // least the last token again when nothing is missing.
  if (common == history.size() && common > 0) {
    if (kiln_rt_status_t s =
            kiln_rt_session_rollback(session_, int64_t(common - 1)))
      return s;
    cached_.resize(common - 1);
    common -= 1;
  }
  const int64_t missing = int64_t(history.size() - common);
  if (missing == 1) {
    if (kiln_rt_status_t s = kiln_rt_session_decode(session_, history.back()))
      return s;
  } else if (missing > 1) {
    if (kiln_rt_status_t s = kiln_rt_session_prefill(
            session_, history.data() + common, missing))
      return s;
  }
  cached_ = history;
  return nullptr;
}

kiln_rt_status_t DraftModel::draft(const std::vector<int32_t> &history,
                                   int64_t k, std::vector<int32_t> &tokens,
                                   std::vector<float> *qRows) {
  tokens.clear();
  if (qRows)
    qRows->clear();
  if (k <= 0 || history.empty() || int64_t(history.size()) >= ctx_)
    return nullptr;
  if (kiln_rt_status_t s = catchUp(history))
    return s;
  for (int64_t i = 0; i < k; ++i) {
    std::memcpy(logits_.data(), kiln_rt_session_logits(session_),
                sizeof(float) * size_t(vocab_));
    int32_t t;
    if (greedy_ || !qRows) {
      t = kiln_rt_sampler_sample(sampler_, logits_.data());
    } else {
      const size_t at = qRows->size();
      qRows->resize(at + size_t(vocab_));
      t = kiln_rt_sampler_draft(sampler_, logits_.data(), qRows->data() + at);
    }
    tokens.push_back(t);
    // The last draft token is verified by the target; the draft needs its
    // KV row only when it drafts further.
    if (i + 1 == k || int64_t(cached_.size()) + 1 >= ctx_)
      break;
    if (kiln_rt_status_t s = kiln_rt_session_decode(session_, t))
      return s;
    cached_.push_back(t);
  }
  return nullptr;
}

double DraftModel::stepCostMs(const std::vector<int32_t> &history) {
  if (history.empty() || int64_t(history.size()) + 2 >= ctx_ ||
      catchUp(history) != nullptr)
    return 0.0;
  const int64_t base = int64_t(cached_.size());
  double best = 1e300;
  for (int rep = 0; rep < 4; ++rep) {
    const double t0 = nowMs();
    kiln_rt_status_t s = kiln_rt_session_decode(session_, history.back());
    const double ms = nowMs() - t0;
    if (s) {
      kiln_rt_status_free(s);
      return 0.0;
    }
    if (rep > 0) // the first is a warm-up
      best = std::min(best, ms);
    if (kiln_rt_status_t r = kiln_rt_session_rollback(session_, base)) {
      kiln_rt_status_free(r);
      return 0.0;
    }
  }
  return best;
}

} // namespace kiln::tool

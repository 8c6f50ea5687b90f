//===- Sampler.cpp - Next-token sampling (llama2.c compatible) ------------===//

#include "Sampler.h"

#include <algorithm>
#include <vector>
#include <cmath>

namespace kiln::rt {

Sampler::Sampler(int32_t vocabSize, float temperature, int32_t topK, float topP,
                 uint64_t seed)
    : vocabSize_(vocabSize > 0 ? vocabSize : 0), temperature_(temperature),
      topK_(topK), topP_(topP), rng_(seed) {
  scratch_.reserve(static_cast<size_t>(vocabSize_));
}

/// First index of the maximum (run.c sample_argmax).
static int32_t argmax(const float *values, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i)
    if (values[i] > values[best])
      best = i;
  return best;
}

/// In-place softmax with run.c's float arithmetic.
static void softmax(float *x, int32_t n) {
  float maxVal = x[0];
  for (int32_t i = 1; i < n; ++i)
    maxVal = std::max(maxVal, x[i]);
  float sum = 0.0f;
  for (int32_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - maxVal);
    sum += x[i];
  }
  for (int32_t i = 0; i < n; ++i)
    x[i] /= sum;
}

int32_t Sampler::sample(float *logits) {
  int32_t n = vocabSize_;
  if (n <= 0)
    return 0;
  if (temperature_ == 0.0f)
    return argmax(logits, n);
  for (int32_t i = 0; i < n; ++i)
    logits[i] /= temperature_;
  softmax(logits, n);
  float coin = rng_.nextF32();
  if (topK_ > 0 && topK_ < n)
    return sampleTopK(logits, coin);
  if (topP_ > 0.0f && topP_ < 1.0f)
    return sampleTopP(logits, coin);
  // run.c sample_mult.
  float cdf = 0.0f;
  for (int32_t i = 0; i < n; ++i) {
    cdf += logits[i];
    if (coin < cdf)
      return i;
  }
  return n - 1;
}

/// run.c sample_topp: keep the smallest prefix of tokens sorted by descending
/// probability whose cumulative probability exceeds topP, sample within it.
int32_t Sampler::sampleTopP(const float *probs, float coin) {
  int32_t n = vocabSize_;
  // Values below the cutoff cannot be in the nucleus (run.c's prefilter).
  const float cutoff = (1.0f - topP_) / static_cast<float>(n - 1);
  scratch_.clear();
  for (int32_t i = 0; i < n; ++i)
    if (probs[i] >= cutoff)
      scratch_.push_back({probs[i], i});
  // Stable: equal probabilities keep index order (run.c uses qsort, whose
  // order for ties is unspecified; glibc's merge sort is stable too).
  std::stable_sort(
      scratch_.begin(), scratch_.end(),
      [](const ProbIndex &a, const ProbIndex &b) { return a.prob > b.prob; });
  auto n0 = static_cast<int32_t>(scratch_.size());
  float cumulative = 0.0f;
  int32_t last = n0 - 1;
  for (int32_t i = 0; i < n0; ++i) {
    cumulative += scratch_[i].prob;
    if (cumulative > topP_) {
      last = i;
      break;
    }
  }
  float r = coin * cumulative;
  float cdf = 0.0f;
  for (int32_t i = 0; i <= last; ++i) {
    cdf += scratch_[i].prob;
    if (r < cdf)
      return scratch_[i].index;
  }
  return scratch_[last].index;
}

void Sampler::distribution(float *logits) {
  const int32_t n = vocabSize_;
  for (int32_t i = 0; i < n; ++i)
    logits[i] /= temperature_;
  softmax(logits, n);
  const bool topK = topK_ > 0 && topK_ < n;
  const bool topP = topP_ > 0.0f && topP_ < 1.0f;
  if (!topK && !topP)
    return;
  // The kept set as sampleTopK / sampleTopP choose it.
  scratch_.clear();
  if (topK) {
    for (int32_t i = 0; i < n; ++i)
      scratch_.push_back({logits[i], i});
    auto order = [](const ProbIndex &a, const ProbIndex &b) {
      return a.prob > b.prob || (a.prob == b.prob && a.index < b.index);
    };
    std::partial_sort(scratch_.begin(), scratch_.begin() + topK_,
                      scratch_.end(), order);
    scratch_.resize(size_t(topK_));
  } else {
    const float cutoff = (1.0f - topP_) / static_cast<float>(n - 1);
    for (int32_t i = 0; i < n; ++i)
      if (logits[i] >= cutoff)
        scratch_.push_back({logits[i], i});
    std::stable_sort(
        scratch_.begin(), scratch_.end(),
        [](const ProbIndex &a, const ProbIndex &b) { return a.prob > b.prob; });
  }
  float total = 0.0f;
  for (const ProbIndex &p : scratch_)
    total += p.prob;
  size_t kept = scratch_.size();
  if (topP) {
    const float limit = topK ? topP_ * total : topP_;
    float cumulative = 0.0f;
    for (size_t i = 0; i < scratch_.size(); ++i) {
      cumulative += scratch_[i].prob;
      if (cumulative > limit) {
        kept = i + 1;
        break;
      }
    }
    total = 0.0f;
    for (size_t i = 0; i < kept; ++i)
      total += scratch_[i].prob;
  }
  std::fill(logits, logits + n, 0.0f);
  for (size_t i = 0; i < kept; ++i)
    logits[scratch_[i].index] = scratch_[i].prob / total;
}

namespace {
/// The index i with cdf(i - 1) <= r < cdf(i) over weights w[0, n) (total
/// `total`), skipping zero weights; the last positive one for rounding.
int32_t drawWeighted(const float *w, int32_t n, float total, float coin) {
  const float r = coin * total;
  float cdf = 0.0f;
  int32_t last = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (!(w[i] > 0.0f))
      continue;
    cdf += w[i];
    last = i;
    if (r < cdf)
      return i;
  }
  return last;
}
} // namespace

int32_t Sampler::drawDraft(float *logits) {
  const int32_t n = vocabSize_;
  if (n <= 0)
    return 0;
  if (temperature_ == 0.0f) {
    const int32_t t = argmax(logits, n);
    std::fill(logits, logits + n, 0.0f);
    logits[t] = 1.0f;
    return t;
  }
  distribution(logits);
  float total = 0.0f;
  for (int32_t i = 0; i < n; ++i)
    total += logits[i];
  return drawWeighted(logits, n, total, rng_.nextF32());
}

int32_t Sampler::verifyDraft(float *logits, int32_t draft, bool &accepted) {
  return verifyAgainst(logits, nullptr, draft, accepted);
}

int32_t Sampler::verifyDraftQ(float *logits, const float *q, int32_t draft,
                              bool &accepted) {
  return verifyAgainst(logits, q, draft, accepted);
}

int32_t Sampler::verifyAgainst(float *logits, const float *q, int32_t draft,
                               bool &accepted) {
  const int32_t n = vocabSize_;
  accepted = false;
  if (n <= 0)
    return 0;
  if (temperature_ == 0.0f) {
    const int32_t t = argmax(logits, n);
    accepted = t == draft;
    return t;
  }
  distribution(logits);
  const bool valid = draft >= 0 && draft < n;
  // q(i): the draft model's row, or the point mass at the draft token.
  auto qAt = [&](int32_t i) {
    return q ? q[i] : (i == draft ? 1.0f : 0.0f);
  };
  if (valid) {
    const float p = logits[draft], qd = qAt(draft);
    // qd > 0 for a token drawn from q; a zero q (a caller's bug) keeps
    // the token with probability p.
    if (rng_.nextF32() < (qd > 0.0f ? p / qd : p)) {
      accepted = true;
      return draft;
    }
  }
  // The residual max(0, p - q), normalised, written over p.
  float total = 0.0f;
  for (int32_t i = 0; i < n; ++i) {
    logits[i] = std::max(0.0f, logits[i] - qAt(i));
    total += logits[i];
  }
  const float coin = rng_.nextF32();
  if (!(total > 0.0f)) { // p = q (up to rounding): draw from q
    if (!q)
      return valid ? draft : 0;
    float qt = 0.0f;
    for (int32_t i = 0; i < n; ++i)
      qt += q[i];
    return drawWeighted(q, n, qt, coin);
  }
  return drawWeighted(logits, n, total, coin);
}

int32_t Sampler::sampleTopK(const float *probs, float coin) {
  int32_t n = vocabSize_;
  scratch_.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    scratch_[i] = {probs[i], i};
  auto order = [](const ProbIndex &a, const ProbIndex &b) {
    return a.prob > b.prob || (a.prob == b.prob && a.index < b.index);
  };
  std::partial_sort(scratch_.begin(), scratch_.begin() + topK_, scratch_.end(),
                    order);
  int32_t last = topK_ - 1;
  float total = 0.0f;
  for (int32_t i = 0; i < topK_; ++i)
    total += scratch_[i].prob;
  if (topP_ > 0.0f && topP_ < 1.0f) {
    // Nucleus over the renormalised top-k distribution.
    float cumulative = 0.0f;
    for (int32_t i = 0; i < topK_; ++i) {
      cumulative += scratch_[i].prob;
      if (cumulative > topP_ * total) {
        last = i;
        total = cumulative;
        break;
      }
    }
  }
  float r = coin * total;
  float cdf = 0.0f;
  for (int32_t i = 0; i <= last; ++i) {
    cdf += scratch_[i].prob;
    if (r < cdf)
      return scratch_[i].index;
  }
  return scratch_[last].index;
}

} // namespace kiln::rt

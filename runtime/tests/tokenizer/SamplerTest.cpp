//===- SamplerTest.cpp - kiln::rt::Sampler --------------------------------===//

#include "tokenizer/Sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

using namespace kiln::rt;

namespace {
std::vector<float> testLogits(int32_t n) {
  std::vector<float> logits(n);
  for (int32_t i = 0; i < n; ++i)
    logits[i] = std::sin(0.37f * i) * 3.0f + 0.01f * i;
  return logits;
}
int32_t argmax(const std::vector<float> &v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}
} // namespace

TEST(Sampler, GreedyIsFirstArgmax) {
  Sampler greedy(5, /*temperature=*/0.0f, 0, 0.9f, 42);
  std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  EXPECT_EQ(greedy.sample(logits.data()), 1);
  Sampler greedy512(512, 0.0f, 40, 0.9f, 42);
  std::vector<float> many = testLogits(512);
  int32_t expected = argmax(many);
  for (int i = 0; i < 3; ++i) {
    std::vector<float> copy = many;
    EXPECT_EQ(greedy512.sample(copy.data()), expected);
  }
}

TEST(Sampler, TopK1IsArgmax) {
  Sampler sampler(512, /*temperature=*/1.0f, /*topK=*/1, /*topP=*/0.0f, 7);
  std::vector<float> logits = testLogits(512);
  int32_t expected = argmax(logits);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> copy = logits;
    EXPECT_EQ(sampler.sample(copy.data()), expected);
  }
}

TEST(Sampler, FixedSeedIsReproducible) {
  for (auto [topK, topP] : {std::pair<int32_t, float>{0, 0.0f},
                            {0, 0.9f},
                            {40, 0.0f},
                            {40, 0.9f}}) {
    Sampler a(512, 0.8f, topK, topP, 133742), b(512, 0.8f, topK, topP, 133742),
        c(512, 0.8f, topK, topP, 1);
    std::vector<int32_t> seqA, seqB, seqC;
    for (int i = 0; i < 100; ++i) {
      std::vector<float> la = testLogits(512), lb = la, lc = la;
      seqA.push_back(a.sample(la.data()));
      seqB.push_back(b.sample(lb.data()));
      seqC.push_back(c.sample(lc.data()));
    }
    EXPECT_EQ(seqA, seqB);
    EXPECT_NE(seqA, seqC);
    EXPECT_GT(std::set<int32_t>(seqA.begin(), seqA.end()).size(), 2u);
  }
}

// Top-p 0.9 only ever returns tokens of the nucleus: the smallest set of most
// probable tokens whose mass exceeds 0.9. Top-k 5 only the 5 most probable.
TEST(Sampler, NeverSamplesOutsideNucleusOrTopK) {
  std::vector<float> logits = testLogits(512);
  std::vector<float> probs = logits;
  float maxVal = *std::max_element(probs.begin(), probs.end());
  double sum = 0;
  for (float &p : probs)
    sum += (p = std::exp(p - maxVal));
  std::vector<int32_t> order(512);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
  std::set<int32_t> nucleus;
  double cumulative = 0;
  for (int32_t id : order) {
    nucleus.insert(id);
    if ((cumulative += probs[id] / sum) > 0.9)
      break;
  }
  ASSERT_GT(nucleus.size(), 3u);
  ASSERT_LT(nucleus.size(), 200u);
  std::set<int32_t> top5(order.begin(), order.begin() + 5);

  Sampler topP(512, 1.0f, 0, 0.9f, 133742);
  Sampler topK(512, 1.0f, 5, 0.0f, 133742);
  std::set<int32_t> seenP, seenK;
  for (int i = 0; i < 5000; ++i) {
    std::vector<float> lp = logits, lk = logits;
    int32_t p = topP.sample(lp.data()), k = topK.sample(lk.data());
    EXPECT_TRUE(nucleus.count(p)) << p;
    EXPECT_TRUE(top5.count(k)) << k;
    seenP.insert(p);
    seenK.insert(k);
  }
  EXPECT_GT(seenP.size(), nucleus.size() / 2);
  EXPECT_EQ(seenK.size(), 5u);
}

// llama2.c run.c random_u32 / random_f32, written out.
TEST(Sampler, RngMatchesRunC) {
  unsigned long long state = 133742;
  XorShiftRng rng(133742);
  for (int i = 0; i < 16; ++i) {
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
    auto u = static_cast<unsigned int>((state * 0x2545F4914F6CDD1Dull) >> 32);
    if (i % 2 == 0) {
      EXPECT_EQ(rng.nextU32(), u);
    } else {
      EXPECT_EQ(rng.nextF32(), (u >> 8) / 16777216.0f);
    }
  }
}

// With temperature 1 and top-p 0.9 the sampler consumes one run.c coin per
// call and applies run.c sample_topp to it (transcribed here).
TEST(Sampler, TopPMatchesRunCTranscription) {
  const int32_t n = 512;
  Sampler sampler(n, 1.0f, 0, 0.9f, 133742);
  XorShiftRng rng(133742);
  for (int step = 0; step < 200; ++step) {
    std::vector<float> logits = testLogits(n);
    for (int32_t i = 0; i < n; ++i)
      logits[i] += 0.05f * ((step * 31 + i * 7) % 13);
    std::vector<float> probs = logits;
    float maxVal = probs[0];
    for (float p : probs)
      maxVal = std::max(maxVal, p);
    float sum = 0.0f;
    for (float &p : probs) {
      p = std::exp(p - maxVal);
      sum += p;
    }
    for (float &p : probs)
      p /= sum;
    float coin = rng.nextF32();
    // run.c sample_topp.
    const float cutoff = (1.0f - 0.9f) / (n - 1);
    std::vector<std::pair<float, int32_t>> cand;
    for (int32_t i = 0; i < n; ++i)
      if (probs[i] >= cutoff)
        cand.push_back({probs[i], i});
    std::stable_sort(cand.begin(), cand.end(),
                     [](auto &a, auto &b) { return a.first > b.first; });
    float cum = 0.0f;
    size_t last = cand.size() - 1;
    for (size_t i = 0; i < cand.size(); ++i) {
      cum += cand[i].first;
      if (cum > 0.9f) {
        last = i;
        break;
      }
    }
    float r = coin * cum, cdf = 0.0f;
    int32_t expected = cand[last].second;
    for (size_t i = 0; i <= last; ++i) {
      cdf += cand[i].first;
      if (r < cdf) {
        expected = cand[i].second;
        break;
      }
    }
    EXPECT_EQ(sampler.sample(logits.data()), expected) << "step " << step;
  }
}

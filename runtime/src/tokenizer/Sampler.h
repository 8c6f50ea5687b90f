//===- Sampler.h - Next-token sampling (llama2.c compatible) ----*- C++ -*-===//
//
// Greedy, temperature, top-k and top-p (nucleus) sampling. With top-k off the
// arithmetic mirrors llama2.c run.c sample()/sample_topp() and its xorshift
// RNG, so that a fixed seed reproduces run.c's sampled text.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_TOKENIZER_SAMPLER_H
#define KILN_RUNTIME_SRC_TOKENIZER_SAMPLER_H

#include <cstdint>
#include <vector>

namespace kiln::rt {

/// run.c's xorshift64* generator (random_u32 / random_f32).
class XorShiftRng {
public:
  explicit XorShiftRng(uint64_t seed) : state_(seed) {}

  uint32_t nextU32() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return static_cast<uint32_t>((state_ * 0x2545F4914F6CDD1Dull) >> 32);
  }
  /// Uniform in [0, 1) with 24 random bits.
  float nextF32() { return static_cast<float>(nextU32() >> 8) / 16777216.0f; }
  uint64_t state() const { return state_; }

private:
  uint64_t state_;
};

/// Picks the next token from a row of logits. Not thread-safe (owns the RNG
/// and scratch space); one per generation stream.
class Sampler {
public:
  /// `temperature` 0 is greedy (argmax, first maximum wins). `topK` <= 0 or
  /// >= vocabSize disables top-k; `topP` <= 0 or >= 1 disables top-p. `seed`
  /// seeds the RNG as run.c does (callers pick a non-zero seed; 0 makes
  /// xorshift return 0 forever).
  Sampler(int32_t vocabSize, float temperature, int32_t topK, float topP,
          uint64_t seed);

  /// Samples from `logits[0, vocabSize)`, which are overwritten (scaled and
  /// turned into probabilities). Draws exactly one RNG value unless greedy.
  int32_t sample(float *logits);

  /// Speculative sampling of one draft position (Leviathan et al. 2023,
  /// Chen et al. 2023) for a deterministic draft (n-gram lookups propose
  /// one token, q = its point mass): with p the distribution sample() draws
  /// from (temperature, top-k, top-p), `draft` is kept with probability
  /// min(1, p(draft) / q(draft)) = p(draft); otherwise the token is drawn
  /// from the residual max(0, p - q) normalised, i.e. p without the draft.
  /// Either way the returned token is distributed as p. Greedy: the argmax,
  /// kept iff it is the draft. `logits` are overwritten; draws one RNG
  /// value, two on a rejection (none when greedy).
  int32_t verifyDraft(float *logits, int32_t draft, bool &accepted);
  /// A draft model's token (speculative sampling with a draft model): turns
  /// `logits` into q, the distribution sample() draws from (distribution();
  /// greedy: the argmax's point mass), and draws the token from q. One RNG
  /// value unless greedy.
  int32_t drawDraft(float *logits);
  /// Speculative sampling of one draft position for a draft token drawn
  /// from q (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023): with p
  /// the distribution sample() draws from `logits`, keeps `draft` with
  /// probability min(1, p(draft) / q(draft)), otherwise draws from the
  /// residual max(0, p - q) normalised (p itself where that is 0
  /// everywhere, i.e. p = q up to rounding). The returned token is
  /// distributed as p. Greedy: the argmax, kept iff it is the draft.
  /// `logits` are overwritten; draws one RNG value, two on a rejection.
  int32_t verifyDraftQ(float *logits, const float *q, int32_t draft,
                       bool &accepted);
  /// Turns `logits` into the distribution sample() draws from (after
  /// temperature, softmax, top-k and top-p; tokens outside the kept set
  /// get 0). Not for temperature 0.
  void distribution(float *logits);

  int32_t vocabSize() const { return vocabSize_; }
  float temperature() const { return temperature_; }
  int32_t topK() const { return topK_; }
  float topP() const { return topP_; }

private:
  struct ProbIndex {
    float prob;
    int32_t index;
  };
  /// verifyDraft (q null: the draft token's point mass) and verifyDraftQ.
  int32_t verifyAgainst(float *logits, const float *q, int32_t draft,
                        bool &accepted);
  int32_t sampleTopK(const float *probs, float coin);
  int32_t sampleTopP(const float *probs, float coin);

  int32_t vocabSize_;
  float temperature_;
  int32_t topK_;
  float topP_;
  XorShiftRng rng_;
  std::vector<ProbIndex> scratch_;
};

} // namespace kiln::rt

#endif // KILN_RUNTIME_SRC_TOKENIZER_SAMPLER_H

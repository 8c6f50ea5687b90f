//===- Stories260KSampleTest.cpp - Sampler + tokenizer end to end ---------===//
//
// llama2.c doc/stories260K.md publishes a sampled run:
//   ./run stories260K.bin -z tok512.bin -t 1.0 -p 0.9 -s 133742
// A small float32 transcription of run.c's forward pass (test-only) feeds
// kiln::rt::Sampler and Tokenizer; the text must start as published, which
// checks that the sampler mirrors run.c's RNG and top-p arithmetic.
//
//===----------------------------------------------------------------------===//

#include "TestHelpers.h"
#include "tokenizer/Sampler.h"
#include "tokenizer/Tokenizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace kiln::rt;
using namespace kiln::rt::test;

namespace {

/// llama2.c run.c forward(), float32, for a version-0 checkpoint.
class Llama2cModel {
public:
  explicit Llama2cModel(const std::string &path) : data(readFile(path)) {
    if (data.size() < 28)
      return;
    int32_t header[7];
    std::memcpy(header, data.data(), sizeof(header));
    dim = header[0], hidden = header[1], layers = header[2], heads = header[3],
    kvHeads = header[4], vocab = std::abs(header[5]), seqLen = header[6];
    headSize = dim / heads;
    kvDim = dim * kvHeads / heads;
    const float *p = reinterpret_cast<const float *>(data.data() + 28);
    auto take = [&](size_t n) {
      const float *r = p;
      p += n;
      return r;
    };
    emb = take(size_t(vocab) * dim);
    rmsAtt = take(size_t(layers) * dim);
    wq = take(size_t(layers) * dim * dim);
    wk = take(size_t(layers) * kvDim * dim);
    wv = take(size_t(layers) * kvDim * dim);
    wo = take(size_t(layers) * dim * dim);
    rmsFfn = take(size_t(layers) * dim);
    w1 = take(size_t(layers) * hidden * dim);
    w2 = take(size_t(layers) * dim * hidden);
    w3 = take(size_t(layers) * hidden * dim);
    rmsFinal = take(dim);
    take(size_t(seqLen) * headSize); // freq_cis_real + freq_cis_imag
    valid = reinterpret_cast<const char *>(p) == data.data() + data.size();
    keyCache.assign(size_t(layers) * seqLen * kvDim, 0.0f);
    valueCache = keyCache;
  }

  bool valid = false;
  int32_t vocab = 0;

  std::vector<float> forward(int32_t token, int32_t pos) {
    std::vector<float> x(emb + size_t(token) * dim,
                         emb + size_t(token + 1) * dim);
    std::vector<float> xb(dim), xb2(dim), q(dim), hb(hidden), hb2(hidden),
        att(seqLen);
    int kvMul = heads / kvHeads;
    for (int l = 0; l < layers; ++l) {
      rmsnorm(xb.data(), x.data(), rmsAtt + size_t(l) * dim);
      float *k = &keyCache[(size_t(l) * seqLen + pos) * kvDim];
      float *v = &valueCache[(size_t(l) * seqLen + pos) * kvDim];
      matmul(q.data(), xb.data(), wq + size_t(l) * dim * dim, dim, dim);
      matmul(k, xb.data(), wk + size_t(l) * kvDim * dim, dim, kvDim);
      matmul(v, xb.data(), wv + size_t(l) * kvDim * dim, dim, kvDim);
      for (int i = 0; i < dim; i += 2) {
        int headDim = i % headSize;
        float freq = 1.0f / powf(10000.0f, headDim / (float)headSize);
        float val = pos * freq, fcr = cosf(val), fci = sinf(val);
        for (int r = 0; r < (i < kvDim ? 2 : 1); ++r) {
          float *vec = r == 0 ? q.data() : k;
          float v0 = vec[i], v1 = vec[i + 1];
          vec[i] = v0 * fcr - v1 * fci;
          vec[i + 1] = v0 * fci + v1 * fcr;
        }
      }
      for (int h = 0; h < heads; ++h) {
        const float *qh = q.data() + h * headSize;
        for (int t = 0; t <= pos; ++t) {
          const float *kt = &keyCache[(size_t(l) * seqLen + t) * kvDim +
                                      (h / kvMul) * headSize];
          float score = 0.0f;
          for (int i = 0; i < headSize; ++i)
            score += qh[i] * kt[i];
          att[t] = score / sqrtf(headSize);
        }
        softmax(att.data(), pos + 1);
        float *out = xb.data() + h * headSize;
        std::memset(out, 0, headSize * sizeof(float));
        for (int t = 0; t <= pos; ++t) {
          const float *vt = &valueCache[(size_t(l) * seqLen + t) * kvDim +
                                        (h / kvMul) * headSize];
          for (int i = 0; i < headSize; ++i)
            out[i] += att[t] * vt[i];
        }
      }
      matmul(xb2.data(), xb.data(), wo + size_t(l) * dim * dim, dim, dim);
      for (int i = 0; i < dim; ++i)
        x[i] += xb2[i];
      rmsnorm(xb.data(), x.data(), rmsFfn + size_t(l) * dim);
      matmul(hb.data(), xb.data(), w1 + size_t(l) * hidden * dim, dim, hidden);
      matmul(hb2.data(), xb.data(), w3 + size_t(l) * hidden * dim, dim, hidden);
      for (int i = 0; i < hidden; ++i) {
        float val = hb[i];
        val *= 1.0f / (1.0f + expf(-val));
        hb[i] = val * hb2[i];
      }
      matmul(xb.data(), hb.data(), w2 + size_t(l) * dim * hidden, hidden, dim);
      for (int i = 0; i < dim; ++i)
        x[i] += xb[i];
    }
    rmsnorm(x.data(), x.data(), rmsFinal);
    std::vector<float> logits(vocab);
    matmul(logits.data(), x.data(), emb, dim, vocab); // shared classifier
    return logits;
  }

private:
  void rmsnorm(float *o, const float *x, const float *w) const {
    float ss = 0.0f;
    for (int j = 0; j < dim; ++j)
      ss += x[j] * x[j];
    ss = 1.0f / sqrtf(ss / dim + 1e-5f);
    for (int j = 0; j < dim; ++j)
      o[j] = w[j] * (ss * x[j]);
  }
  static void softmax(float *x, int n) {
    float maxVal = x[0];
    for (int i = 1; i < n; ++i)
      maxVal = std::max(maxVal, x[i]);
    float sum = 0.0f;
    for (int i = 0; i < n; ++i)
      sum += (x[i] = expf(x[i] - maxVal));
    for (int i = 0; i < n; ++i)
      x[i] /= sum;
  }
  static void matmul(float *out, const float *x, const float *w, int n, int d) {
    for (int i = 0; i < d; ++i) {
      float val = 0.0f;
      for (int j = 0; j < n; ++j)
        val += w[size_t(i) * n + j] * x[j];
      out[i] = val;
    }
  }

  std::string data;
  int dim = 0, hidden = 0, layers = 0, heads = 0, kvHeads = 0, seqLen = 0,
      headSize = 0, kvDim = 0;
  const float *emb, *rmsAtt, *wq, *wk, *wv, *wo, *rmsFfn, *w1, *w2, *w3,
      *rmsFinal;
  std::vector<float> keyCache, valueCache;
};

/// run.c generate(): BOS-only prompt, `steps` positions, stop on BOS.
std::string generate(Sampler &sampler, const Tokenizer &tok, int steps) {
  Llama2cModel model(modelPath("stories260K/stories260K.bin"));
  EXPECT_TRUE(model.valid);
  if (!model.valid)
    return {};
  std::string text;
  int32_t token = tok.bosId();
  for (int pos = 0; pos < steps; ++pos) {
    std::vector<float> logits = model.forward(token, pos);
    int32_t next = sampler.sample(logits.data());
    if (next == tok.bosId())
      break;
    text += tok.decodePiece(token, next);
    token = next;
  }
  return text;
}

const Tokenizer &tok512() {
  static const Tokenizer tok = [] {
    Tokenizer t;
    TokenizerStatus s = Tokenizer::create(
        readLlama2cTokenizer(modelPath("stories260K/tok512.bin")), t);
    EXPECT_TRUE(s.ok) << s.message;
    return t;
  }();
  return tok;
}

} // namespace

// -t 0.0 -n 200: reproduces the published greedy text (model + argmax).
TEST(Stories260KEndToEnd, GreedyMatchesPublishedText) {
  nlohmann::json ref =
      readJson(modelPath("stories260K/reference_outputs.json"));
  Sampler sampler(512, 0.0f, 0, 0.9f, 1);
  EXPECT_EQ(generate(sampler, tok512(), 200),
            ref.at("published").at("expected_text").get<std::string>());
}

// -t 1.0 -p 0.9 -s 133742: doc/stories260K.md's sampled text begins so.
TEST(Stories260KEndToEnd, SampledMatchesPublishedText) {
  Sampler sampler(512, 1.0f, 0, 0.9f, 133742);
  std::string text = generate(sampler, tok512(), 256);
  const std::string published =
      "Once upon a time, there was a little boy named Timmy. Timmy loved to "
      "play with his toys and eat sandwiches.";
  EXPECT_EQ(text.substr(0, published.size()), published) << text;
}

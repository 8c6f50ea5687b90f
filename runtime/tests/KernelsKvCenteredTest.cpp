//===- KernelsKvCenteredTest.cpp - 8-bit KV caches with centered keys -----===//
//
// kiln_k_attention_kv8_centered / kiln_k_attention_kvf8_centered
// {,_f16,_bf16} (kernel_abi.h), each format x element type:
// (1) cpu::rotatedKeyMeans (anchored recurrence) against the direct double
//     formula m_t, out to position 20000;
// (2) appended key rows and scales are the uncentered formula applied to
//     k - m_t bit for bit (m_t computed here with std::cos / std::sin in
//     double), value rows as uncentered, other rows untouched; the output
//     equals kiln_k_attention on float32 caches holding scale * value + m_t
//     (keys) and scale * value (values), tolerances as for the uncentered
//     kernels (1e-5 f32, 2e-3 f16, 1e-2 bf16);
// (3) a zero mean gives outputs, cache bytes and scales bit-identical to the
//     uncentered kernel (-0.0 keys and zero rows included);
// (4) keys RoPE_t(mu + noise) with large per-channel offsets, as in
//     stories260K: the error against float32 attention with exact keys (and
//     the same quantized values) is under a quarter of the uncentered
//     kernel's;
// (5) prefill then decode steps give the cache bytes of one call over all
//     tokens bit for bit, and its outputs (bit for bit while no call has 16
//     or more tokens: longer ones take the tiled prefill path).
//
//===----------------------------------------------------------------------===//
#include "KvCacheTestUtil.h"
#include "cpu/Kernels.h"
#include "kiln_rt/kernel_abi.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace cpu = kiln::rt::cpu;
using namespace kiln::rt::test;

namespace {

struct Int8Format {
  using Code = int8_t;
  static float quantize(const float *x, int8_t *q, int64_t headDim) {
    return refQuantizeInt8(x, q, headDim);
  }
  static float value(int8_t c) { return float(c); }
};
struct Fp8Format {
  using Code = uint8_t;
  static float quantize(const float *x, uint8_t *q, int64_t headDim) {
    return refQuantizeFp8(x, q, headDim);
  }
  static float value(uint8_t c) { return float(specValue(c)); }
};

struct Int8F32 : Int8Format, F32Elems {
  static constexpr const char *kName = "int8_f32";
  static constexpr auto plain = kiln_k_attention_kv8;
  static constexpr auto centered = kiln_k_attention_kv8_centered;
};
struct Int8F16 : Int8Format, F16Elems {
  static constexpr const char *kName = "int8_f16";
  static constexpr auto plain = kiln_k_attention_kv8_f16;
  static constexpr auto centered = kiln_k_attention_kv8_centered_f16;
};
struct Int8Bf16 : Int8Format, Bf16Elems {
  static constexpr const char *kName = "int8_bf16";
  static constexpr auto plain = kiln_k_attention_kv8_bf16;
  static constexpr auto centered = kiln_k_attention_kv8_centered_bf16;
};
struct Fp8F32 : Fp8Format, F32Elems {
  static constexpr const char *kName = "fp8_f32";
  static constexpr auto plain = kiln_k_attention_kvf8;
  static constexpr auto centered = kiln_k_attention_kvf8_centered;
};
struct Fp8F16 : Fp8Format, F16Elems {
  static constexpr const char *kName = "fp8_f16";
  static constexpr auto plain = kiln_k_attention_kvf8_f16;
  static constexpr auto centered = kiln_k_attention_kvf8_centered_f16;
};
struct Fp8Bf16 : Fp8Format, Bf16Elems {
  static constexpr const char *kName = "fp8_bf16";
  static constexpr auto plain = kiln_k_attention_kvf8_bf16;
  static constexpr auto centered = kiln_k_attention_kvf8_centered_bf16;
};

template <class Api> class KvCenteredKernels : public ::testing::Test {};
using CenteredTypes =
    ::testing::Types<Int8F32, Int8F16, Int8Bf16, Fp8F32, Fp8F16, Fp8Bf16>;
TYPED_TEST_SUITE(KvCenteredKernels, CenteredTypes, KvName);

struct CenteredShape {
  KvShape kv;
  int64_t rotDim;
  float theta;
};
const CenteredShape kShapes[] = {
    {{8, 4, 8, 16, {5, 1, 1, 3, 1}}, 8, 10000.0f},     // stories260K-like
    {{8, 2, 16, 96, {70, 4, 1, 1, 1}}, 16, 10000.0f},  // across 64 rows
    {{4, 4, 64, 24, {1, 1, 7, 1, 1}}, 32, 500000.0f},  // partial rotary
    {{8, 1, 64, 80, {12, 1, 1, 60, 1}}, 64, 10000.0f}, // MQA, 64+ rows
    {{32, 8, 64, 48, {9, 1, 1}}, 64, 500000.0f},       // Llama-3-like heads
};
std::string shapeName(const CenteredShape &s) {
  return shapeName(s.kv) + "_rot" + std::to_string(s.rotDim);
}

/// m_t of kernel_abi.h straight from the formula (double cos / sin per
/// element), [kvHeads * headDim].
std::vector<float> refRotatedMean(const std::vector<float> &mu, int64_t t,
                                  int64_t kvHeads, int64_t headDim,
                                  int64_t rotDim, float theta) {
  std::vector<float> m(size_t(kvHeads * headDim));
  for (int64_t h = 0; h < kvHeads; ++h)
    for (int64_t d = 0; d < headDim; ++d) {
      const float *mh = mu.data() + h * headDim;
      if (d >= rotDim) {
        m[size_t(h * headDim + d)] = mh[d];
        continue;
      }
      int64_t i = d / 2;
      double w = std::pow(double(theta), -double(2 * i) / double(headDim));
      double a = double(t) * w, c = std::cos(a), s = std::sin(a);
      double m0 = mh[2 * i], m1 = mh[2 * i + 1];
      m[size_t(h * headDim + d)] =
          d % 2 == 0 ? float(m0 * c - m1 * s) : float(m0 * s + m1 * c);
    }
  return m;
}

/// A calibrated mean with stories260K-like offsets: most channels small, every
/// fifth one +-(8..19).
std::vector<float> offsetMean(int64_t count, std::mt19937 &gen) {
  std::normal_distribution<float> small(0.0f, 0.3f);
  std::uniform_real_distribution<float> big(8.0f, 19.0f);
  std::vector<float> mu(static_cast<size_t>(count));
  for (int64_t c = 0; c < count; ++c) {
    mu[size_t(c)] = small(gen);
    if (c % 5 == 0)
      mu[size_t(c)] += (c % 2 ? -1.0f : 1.0f) * big(gen);
  }
  return mu;
}

/// The float32 caches the centered kernel's attention must match: keys
/// scale * value + m_t (reference m_t), values scale * value, rows [0, rows).
template <class Api>
void dequantizedCaches(const CenteredShape &cs, const std::vector<float> &mu,
                       const std::vector<typename Api::Code> &kc,
                       const std::vector<typename Api::Code> &vc,
                       const std::vector<float> &ks,
                       const std::vector<float> &vs, int64_t rows,
                       std::vector<float> &kDq, std::vector<float> &vDq) {
  const KvShape &s = cs.kv;
  const int64_t kvDim = s.kvHeads * s.headDim;
  kDq.assign(size_t(s.maxSeq * kvDim), 0.0f);
  vDq.assign(size_t(s.maxSeq * kvDim), 0.0f);
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<float> m =
        refRotatedMean(mu, t, s.kvHeads, s.headDim, cs.rotDim, cs.theta);
    for (int64_t j = 0; j < kvDim; ++j) {
      int64_t h = j / s.headDim, e = t * kvDim + j;
      kDq[size_t(e)] =
          ks[size_t(t * s.kvHeads + h)] * Api::value(kc[size_t(e)]) +
          m[size_t(j)];
      vDq[size_t(e)] =
          vs[size_t(t * s.kvHeads + h)] * Api::value(vc[size_t(e)]);
    }
  }
}

template <class Api>
std::vector<float> widened(const std::vector<typename Api::T> &out) {
  std::vector<float> got(out.size());
  for (size_t i = 0; i < out.size(); ++i)
    got[i] = Api::widen(out[i]);
  return got;
}

template <class T>
bool sameBytes(const std::vector<T> &a, const std::vector<T> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), sizeof(T) * a.size()) == 0;
}

// (1) The recurrence against the direct formula: every m_t within one float
// ulp of the formula's value, nearly all equal to it.
TEST(KvCenteredMeans, RecurrenceMatchesDirectFormula) {
  std::mt19937 gen(5);
  const int64_t kvHeads = 2, headDim = 64, rows = 20000;
  std::vector<float> mu = offsetMean(kvHeads * headDim, gen);
  for (int64_t rotDim : {int64_t(64), int64_t(32)})
    for (float theta : {10000.0f, 500000.0f}) {
      SCOPED_TRACE("rot " + std::to_string(rotDim) + " theta " +
                   std::to_string(theta));
      std::vector<float> got(size_t(rows * kvHeads * headDim));
      cpu::rotatedKeyMeans(mu.data(), rows, kvHeads, headDim, rotDim, theta,
                           got.data());
      int64_t differ = 0, checked = 0;
      for (int64_t t = 0; t < rows; t += t < 256 ? 1 : 7) {
        std::vector<float> want =
            refRotatedMean(mu, t, kvHeads, headDim, rotDim, theta);
        for (size_t j = 0; j < want.size(); ++j) {
          float g = got[size_t(t) * want.size() + j];
          ++checked;
          if (g == want[j])
            continue;
          ++differ;
          ASSERT_TRUE(g == std::nextafter(want[j], INFINITY) ||
                      g == std::nextafter(want[j], -INFINITY))
              << "t " << t << " channel " << j << ": " << g << " vs "
              << want[j];
        }
      }
      // cos / sin agree to ~1e-12 at t = 20000 (mostly the rounding of
      // double(t) * w_i in the direct formula), so a float rounds the other
      // way about once in 10^5.
      EXPECT_LE(differ * 10000, checked);
    }
}

// (2) Appended rows and the attention output against the contract.
TYPED_TEST(KvCenteredKernels, MatchesShiftedFloatCaches) {
  using Api = TypeParam;
  using T = typename Api::T;
  using Code = typename Api::Code;
  for (const CenteredShape &cs : kShapes) {
    const KvShape &s = cs.kv;
    SCOPED_TRACE(shapeName(cs));
    std::mt19937 gen(41);
    const int64_t kvDim = s.kvHeads * s.headDim, qDim = s.heads * s.headDim;
    std::vector<float> mu = offsetMean(kvDim, gen);
    std::vector<Code> kc(size_t(s.maxSeq * kvDim), Code(0x55)),
        vc(size_t(s.maxSeq * kvDim), Code(0x55));
    std::vector<float> ks(size_t(s.maxSeq * s.kvHeads), 12345.0f),
        vs(size_t(s.maxSeq * s.kvHeads), 12345.0f);
    std::vector<Code> expK = kc, expV = vc;
    std::vector<float> expKs = ks, expVs = vs;
    const float scale = 1.0f / std::sqrt(float(s.headDim));
    int64_t pos = 0;
    for (int64_t n : s.steps) {
      SCOPED_TRACE("n" + std::to_string(n) + "_pos" + std::to_string(pos));
      auto q = randomInput<Api>(size_t(n * qDim), gen);
      auto k = randomInput<Api>(size_t(n * kvDim), gen, 4.0f);
      auto v = randomInput<Api>(size_t(n * kvDim), gen);
      for (int64_t i = 0; i < n; ++i) {
        std::vector<float> m = refRotatedMean(mu, pos + i, s.kvHeads, s.headDim,
                                              cs.rotDim, cs.theta);
        for (int64_t h = 0; h < s.kvHeads; ++h) {
          int64_t src = i * kvDim + h * s.headDim;
          int64_t dst = (pos + i) * kvDim + h * s.headDim;
          int64_t si = (pos + i) * s.kvHeads + h;
          std::vector<float> x(size_t(s.headDim));
          for (int64_t d = 0; d < s.headDim; ++d)
            x[size_t(d)] =
                k.values[size_t(src + d)] - m[size_t(h * s.headDim + d)];
          expKs[size_t(si)] =
              Api::quantize(x.data(), &expK[size_t(dst)], s.headDim);
          expVs[size_t(si)] = Api::quantize(&v.values[size_t(src)],
                                            &expV[size_t(dst)], s.headDim);
        }
      }
      std::vector<T> out(size_t(n * qDim), Api::poison());
      Api::centered(q.elems.data(), k.elems.data(), v.elems.data(), kc.data(),
                    vc.data(), ks.data(), vs.data(), mu.data(), out.data(), n,
                    pos, s.heads, s.kvHeads, s.headDim, cs.rotDim, s.maxSeq,
                    scale, cs.theta);
      for (size_t i = 0; i < kc.size(); ++i) {
        ASSERT_EQ(int(kc[i]), int(expK[i])) << "k_cache elem " << i;
        ASSERT_EQ(int(vc[i]), int(expV[i])) << "v_cache elem " << i;
      }
      for (size_t i = 0; i < ks.size(); ++i) {
        ASSERT_EQ(cpu::floatBits(ks[i]), cpu::floatBits(expKs[i])) << i;
        ASSERT_EQ(cpu::floatBits(vs[i]), cpu::floatBits(expVs[i])) << i;
      }
      pos += n;

      std::vector<float> kDq, vDq;
      dequantizedCaches<Api>(cs, mu, kc, vc, ks, vs, pos, kDq, vDq);
      std::vector<float> ref(size_t(n * qDim));
      kiln_k_attention(q.values.data(), kDq.data() + (pos - n) * kvDim,
                       vDq.data() + (pos - n) * kvDim, kDq.data(), vDq.data(),
                       ref.data(), n, pos - n, s.heads, s.kvHeads, s.headDim,
                       s.maxSeq, scale);
      for (float &r : ref) // the 16-bit kernels round their output once
        r = Api::widen(Api::round(r));
      EXPECT_LT(relError(widened<Api>(out), ref), Api::kTol);
    }
  }
}

// (3) A zero mean changes nothing, bit for bit.
TYPED_TEST(KvCenteredKernels, ZeroMeanIsBitIdentical) {
  using Api = TypeParam;
  using T = typename Api::T;
  using Code = typename Api::Code;
  for (const CenteredShape &cs : kShapes) {
    const KvShape &s = cs.kv;
    SCOPED_TRACE(shapeName(cs));
    std::mt19937 gen(43);
    const int64_t kvDim = s.kvHeads * s.headDim, qDim = s.heads * s.headDim;
    std::vector<float> mu(size_t(kvDim), 0.0f);
    std::vector<Code> kc(size_t(s.maxSeq * kvDim), Code(0x55));
    std::vector<Code> vc = kc, kc2 = kc, vc2 = kc;
    std::vector<float> ks(size_t(s.maxSeq * s.kvHeads), 12345.0f);
    std::vector<float> vs = ks, ks2 = ks, vs2 = ks;
    const float scale = 1.0f / std::sqrt(float(s.headDim));
    int64_t pos = 0;
    for (size_t step = 0; step < s.steps.size(); ++step) {
      int64_t n = s.steps[step];
      auto q = randomInput<Api>(size_t(n * qDim), gen);
      auto k = randomInput<Api>(size_t(n * kvDim), gen, 3.0f);
      auto v = randomInput<Api>(size_t(n * kvDim), gen);
      if (step == 0) // a zero key row, and -0.0 keys (FP8 code 0x80)
        for (int64_t d = 0; d < s.headDim; ++d) {
          k.elems[size_t(d)] = Api::round(0.0f);
          if (d % 3 == 0)
            k.elems[size_t(kvDim * (n - 1) + s.headDim - 1 - d)] =
                Api::round(-0.0f);
        }
      std::vector<T> out(size_t(n * qDim), Api::poison()), out2 = out;
      Api::plain(q.elems.data(), k.elems.data(), v.elems.data(), kc.data(),
                 vc.data(), ks.data(), vs.data(), out.data(), n, pos, s.heads,
                 s.kvHeads, s.headDim, s.maxSeq, scale);
      Api::centered(q.elems.data(), k.elems.data(), v.elems.data(), kc2.data(),
                    vc2.data(), ks2.data(), vs2.data(), mu.data(), out2.data(),
                    n, pos, s.heads, s.kvHeads, s.headDim, cs.rotDim, s.maxSeq,
                    scale, cs.theta);
      EXPECT_TRUE(sameBytes(out, out2)) << "outputs, step " << step;
      EXPECT_TRUE(sameBytes(kc, kc2)) << "k_cache, step " << step;
      EXPECT_TRUE(sameBytes(vc, vc2)) << "v_cache, step " << step;
      EXPECT_TRUE(sameBytes(ks, ks2)) << "k_scales, step " << step;
      EXPECT_TRUE(sameBytes(vs, vs2)) << "v_scales, step " << step;
      pos += n;
    }
  }
}

// (4) The point of the feature: keys with large per-channel offsets lose
// most of their quantization error.
TYPED_TEST(KvCenteredKernels, CenteringShrinksTheError) {
  using Api = TypeParam;
  using T = typename Api::T;
  using Code = typename Api::Code;
  const CenteredShape cs = {{8, 4, 8, 80, {40, 1, 1, 30, 1}}, 8, 10000.0f};
  const KvShape &s = cs.kv;
  std::mt19937 gen(47);
  const int64_t kvDim = s.kvHeads * s.headDim, qDim = s.heads * s.headDim;
  std::vector<float> mu = offsetMean(kvDim, gen);
  std::vector<Code> kc(size_t(s.maxSeq * kvDim), Code(0));
  std::vector<Code> vc = kc, kc2 = kc, vc2 = kc;
  std::vector<float> ks(size_t(s.maxSeq * s.kvHeads), 0.0f);
  std::vector<float> vs = ks, ks2 = ks, vs2 = ks;
  std::vector<float> kOrig(size_t(s.maxSeq * kvDim)), vOrig = kOrig;
  const float scale = 1.0f / std::sqrt(float(s.headDim));
  double errPlain = 0, errCentered = 0;
  int64_t pos = 0;
  for (int64_t n : s.steps) {
    auto q = randomInput<Api>(size_t(n * qDim), gen);
    auto v = randomInput<Api>(size_t(n * kvDim), gen);
    // Pre-RoPE keys mu + noise, rotated by kiln_k_rope, rounded to T.
    auto noise = randomInput<F32Elems>(size_t(n * kvDim), gen, 0.3f);
    std::vector<float> pre(size_t(n * kvDim)), rotated(pre.size());
    for (size_t e = 0; e < pre.size(); ++e)
      pre[e] = mu[e % size_t(kvDim)] + noise.values[e];
    kiln_k_rope(pre.data(), rotated.data(), n, s.kvHeads, s.headDim, cs.rotDim,
                pos, cs.theta);
    Input<Api> k;
    for (float r : rotated) {
      k.elems.push_back(Api::round(r));
      k.values.push_back(Api::widen(k.elems.back()));
    }
    std::vector<T> out(size_t(n * qDim)), out2 = out;
    Api::plain(q.elems.data(), k.elems.data(), v.elems.data(), kc.data(),
               vc.data(), ks.data(), vs.data(), out.data(), n, pos, s.heads,
               s.kvHeads, s.headDim, s.maxSeq, scale);
    Api::centered(q.elems.data(), k.elems.data(), v.elems.data(), kc2.data(),
                  vc2.data(), ks2.data(), vs2.data(), mu.data(), out2.data(), n,
                  pos, s.heads, s.kvHeads, s.headDim, cs.rotDim, s.maxSeq,
                  scale, cs.theta);
    // Reference: exact keys, the (shared) quantized values, so that only the
    // key error differs.
    ASSERT_TRUE(sameBytes(vc, vc2) && sameBytes(vs, vs2));
    std::vector<float> vNew(size_t(n * kvDim));
    for (int64_t e = 0; e < n * kvDim; ++e)
      vNew[size_t(e)] =
          vs[size_t((pos + e / kvDim) * s.kvHeads + e % kvDim / s.headDim)] *
          Api::value(vc[size_t(pos * kvDim + e)]);
    std::vector<float> ref(size_t(n * qDim));
    kiln_k_attention(q.values.data(), k.values.data(), vNew.data(),
                     kOrig.data(), vOrig.data(), ref.data(), n, pos, s.heads,
                     s.kvHeads, s.headDim, s.maxSeq, scale);
    for (float &r : ref)
      r = Api::widen(Api::round(r));
    errPlain = std::max(errPlain, relError(widened<Api>(out), ref));
    errCentered = std::max(errCentered, relError(widened<Api>(out2), ref));
    pos += n;
  }
  // Measured: int8 4.6e-2 -> 1.9e-3, FP8 0.39 -> 9e-3 (f32; bf16 5.8e-3 and
  // 1.5e-2, its output rounding).
  std::printf("[ %s ] max rel. error: uncentered %.3g, centered %.3g\n",
              Api::kName, errPlain, errCentered);
  EXPECT_LT(errCentered, 0.25 * errPlain);
}

// (5) Prefill then decode steps equal one call over all tokens, bit for bit.
TYPED_TEST(KvCenteredKernels, StepsMatchOneCall) {
  using Api = TypeParam;
  using T = typename Api::T;
  using Code = typename Api::Code;
  for (const CenteredShape &cs : kShapes) {
    const KvShape &s = cs.kv;
    SCOPED_TRACE(shapeName(cs));
    std::mt19937 gen(53);
    const int64_t kvDim = s.kvHeads * s.headDim, qDim = s.heads * s.headDim;
    int64_t total = 0;
    for (int64_t n : s.steps)
      total += n;
    std::vector<float> mu = offsetMean(kvDim, gen);
    auto q = randomInput<Api>(size_t(total * qDim), gen);
    auto k = randomInput<Api>(size_t(total * kvDim), gen, 4.0f);
    auto v = randomInput<Api>(size_t(total * kvDim), gen);
    const float scale = 1.0f / std::sqrt(float(s.headDim));
    std::vector<Code> kc(size_t(s.maxSeq * kvDim), Code(0));
    std::vector<Code> vc = kc, kc2 = kc, vc2 = kc;
    std::vector<float> ks(size_t(s.maxSeq * s.kvHeads), 0.0f);
    std::vector<float> vs = ks, ks2 = ks, vs2 = ks;
    std::vector<T> out(size_t(total * qDim), Api::poison()), out2 = out;
    Api::centered(q.elems.data(), k.elems.data(), v.elems.data(), kc.data(),
                  vc.data(), ks.data(), vs.data(), mu.data(), out.data(), total,
                  0, s.heads, s.kvHeads, s.headDim, cs.rotDim, s.maxSeq, scale,
                  cs.theta);
    int64_t pos = 0;
    for (int64_t n : s.steps) {
      Api::centered(q.elems.data() + pos * qDim, k.elems.data() + pos * kvDim,
                    v.elems.data() + pos * kvDim, kc2.data(), vc2.data(),
                    ks2.data(), vs2.data(), mu.data(), out2.data() + pos * qDim,
                    n, pos, s.heads, s.kvHeads, s.headDim, cs.rotDim, s.maxSeq,
                    scale, cs.theta);
      pos += n;
    }
    // Steps of 16+ tokens take the tiled prefill path (sgemm: dot products
    // summed in another order than the per-row path of shorter steps), so
    // the outputs agree to float rounding, within one unit of the output
    // type's last place; the caches bit for bit.
    if (total < 16)
      EXPECT_TRUE(sameBytes(out, out2)) << "outputs";
    else
      EXPECT_LT(relError(widened<Api>(out2), widened<Api>(out)), Api::kTol)
          << "outputs";
    EXPECT_TRUE(sameBytes(kc, kc2)) << "k_cache";
    EXPECT_TRUE(sameBytes(vc, vc2)) << "v_cache";
    EXPECT_TRUE(sameBytes(ks, ks2)) << "k_scales";
    EXPECT_TRUE(sameBytes(vs, vs2)) << "v_scales";
  }
}

} // namespace

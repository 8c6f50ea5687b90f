//===- PagedAttentionTest.cpp - paged vs contiguous attention -------------===//
//
// kiln_k_paged_attention against the contiguous kernels of kernel_abi.h on
// the same inputs, for every activation type (f32, f16, bf16) and KV format
// (plain, int8, fp8, int8 / fp8 with centered keys), block sizes 1, 16 and
// 64, a prefill that crosses block edges followed by decode steps, a
// sliding window, and a sequence forked from another's prefix (its first
// blocks shared). The block tables are shuffled so that logical and
// physical order differ. Outputs and the stored KV rows must be
// bit-identical: the paged kernel runs the same arithmetic row for row.
//
//===----------------------------------------------------------------------===//
#include "kiln_rt/kernel_abi.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int64_t kHeads = 4, kKvHeads = 2, kHeadDim = 16;
constexpr int64_t kKvDim = kKvHeads * kHeadDim, kQDim = kHeads * kHeadDim;
constexpr int64_t kMaxSeq = 128;
constexpr float kScale = 0.25f, kTheta = 10000.0f;

enum class Act { F32, F16, Bf16 };
enum class Fmt { Plain, Int8, Fp8, Int8Centered, Fp8Centered };

int32_t elemOf(Act a) {
  return a == Act::F32 ? KILN_ELEM_F32
                       : a == Act::F16 ? KILN_ELEM_F16 : KILN_ELEM_BF16;
}
size_t actBytes(Act a) { return a == Act::F32 ? 4 : 2; }
size_t codeBytes(Fmt f, Act a) { return f == Fmt::Plain ? actBytes(a) : 1; }
bool centered(Fmt f) { return f == Fmt::Int8Centered || f == Fmt::Fp8Centered; }

/// `count` random activations of type a, as raw bytes.
std::vector<uint8_t> randomActs(Act a, int64_t count, std::mt19937 &rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<uint8_t> out(size_t(count) * actBytes(a));
  for (int64_t i = 0; i < count; ++i) {
    float x = d(rng) + 0.5f; // an offset, so that centering matters
    if (a == Act::F32) {
      std::memcpy(out.data() + 4 * i, &x, 4);
    } else {
      uint16_t h = a == Act::F16 ? kiln_float_to_f16(x) : kiln_float_to_bf16(x);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

/// The contiguous kernel of (act, fmt) on caches of kMaxSeq rows.
struct Contiguous {
  Act act;
  Fmt fmt;
  std::vector<uint8_t> kc, vc;
  std::vector<float> ks, vs;
  const float *mean;
  Contiguous(Act a, Fmt f, const float *m)
      : act(a), fmt(f), kc(size_t(kMaxSeq * kKvDim) * codeBytes(f, a)),
        vc(kc.size()), ks(size_t(kMaxSeq * kKvHeads)), vs(ks.size()),
        mean(m) {}
  void run(const void *q, const void *k, const void *v, void *out, int64_t n,
           int64_t pos, int64_t window) {
    using F = float;
    using H = kiln_f16_t;
    using B = kiln_bf16_t;
    auto *kc8 = reinterpret_cast<int8_t *>(kc.data());
    auto *vc8 = reinterpret_cast<int8_t *>(vc.data());
    auto *kcu = kc.data();
    auto *vcu = vc.data();
#define KILN_ARGS(T) (const T *)q, (const T *)k, (const T *)v
    switch (fmt) {
    case Fmt::Plain:
      if (act == Act::F32) {
        if (window)
          kiln_k_attention_window(KILN_ARGS(F), (F *)kcu, (F *)vcu, (F *)out,
                                  n, pos, kHeads, kKvHeads, kHeadDim, kMaxSeq,
                                  kScale, window);
        else
          kiln_k_attention(KILN_ARGS(F), (F *)kcu, (F *)vcu, (F *)out, n, pos,
                           kHeads, kKvHeads, kHeadDim, kMaxSeq, kScale);
      } else if (act == Act::F16) {
        if (window)
          kiln_k_attention_window_f16(KILN_ARGS(H), (H *)kcu, (H *)vcu,
                                      (H *)out, n, pos, kHeads, kKvHeads,
                                      kHeadDim, kMaxSeq, kScale, window);
        else
          kiln_k_attention_f16(KILN_ARGS(H), (H *)kcu, (H *)vcu, (H *)out, n,
                               pos, kHeads, kKvHeads, kHeadDim, kMaxSeq,
                               kScale);
      } else {
        if (window)
          kiln_k_attention_window_bf16(KILN_ARGS(B), (B *)kcu, (B *)vcu,
                                       (B *)out, n, pos, kHeads, kKvHeads,
                                       kHeadDim, kMaxSeq, kScale, window);
        else
          kiln_k_attention_bf16(KILN_ARGS(B), (B *)kcu, (B *)vcu, (B *)out, n,
                                pos, kHeads, kKvHeads, kHeadDim, kMaxSeq,
                                kScale);
      }
      return;
    case Fmt::Int8:
    case Fmt::Int8Centered:
      if (fmt == Fmt::Int8Centered) {
        if (act == Act::F32)
          kiln_k_attention_kv8_centered(KILN_ARGS(F), kc8, vc8, ks.data(),
                                        vs.data(), mean, (F *)out, n, pos,
                                        kHeads, kKvHeads, kHeadDim, kHeadDim,
                                        kMaxSeq, kScale, kTheta);
        else if (act == Act::F16)
          kiln_k_attention_kv8_centered_f16(
              KILN_ARGS(H), kc8, vc8, ks.data(), vs.data(), mean, (H *)out, n,
              pos, kHeads, kKvHeads, kHeadDim, kHeadDim, kMaxSeq, kScale,
              kTheta);
        else
          kiln_k_attention_kv8_centered_bf16(
              KILN_ARGS(B), kc8, vc8, ks.data(), vs.data(), mean, (B *)out, n,
              pos, kHeads, kKvHeads, kHeadDim, kHeadDim, kMaxSeq, kScale,
              kTheta);
      } else if (act == Act::F32) {
        kiln_k_attention_kv8(KILN_ARGS(F), kc8, vc8, ks.data(), vs.data(),
                             (F *)out, n, pos, kHeads, kKvHeads, kHeadDim,
                             kMaxSeq, kScale);
      } else if (act == Act::F16) {
        kiln_k_attention_kv8_f16(KILN_ARGS(H), kc8, vc8, ks.data(), vs.data(),
                                 (H *)out, n, pos, kHeads, kKvHeads, kHeadDim,
                                 kMaxSeq, kScale);
      } else {
        kiln_k_attention_kv8_bf16(KILN_ARGS(B), kc8, vc8, ks.data(),
                                  vs.data(), (B *)out, n, pos, kHeads,
                                  kKvHeads, kHeadDim, kMaxSeq, kScale);
      }
      return;
    case Fmt::Fp8:
    case Fmt::Fp8Centered:
      if (fmt == Fmt::Fp8Centered) {
        if (act == Act::F32)
          kiln_k_attention_kvf8_centered(KILN_ARGS(F), kcu, vcu, ks.data(),
                                         vs.data(), mean, (F *)out, n, pos,
                                         kHeads, kKvHeads, kHeadDim, kHeadDim,
                                         kMaxSeq, kScale, kTheta);
        else if (act == Act::F16)
          kiln_k_attention_kvf8_centered_f16(
              KILN_ARGS(H), kcu, vcu, ks.data(), vs.data(), mean, (H *)out, n,
              pos, kHeads, kKvHeads, kHeadDim, kHeadDim, kMaxSeq, kScale,
              kTheta);
        else
          kiln_k_attention_kvf8_centered_bf16(
              KILN_ARGS(B), kcu, vcu, ks.data(), vs.data(), mean, (B *)out, n,
              pos, kHeads, kKvHeads, kHeadDim, kHeadDim, kMaxSeq, kScale,
              kTheta);
      } else if (act == Act::F32) {
        kiln_k_attention_kvf8(KILN_ARGS(F), kcu, vcu, ks.data(), vs.data(),
                              (F *)out, n, pos, kHeads, kKvHeads, kHeadDim,
                              kMaxSeq, kScale);
      } else if (act == Act::F16) {
        kiln_k_attention_kvf8_f16(KILN_ARGS(H), kcu, vcu, ks.data(),
                                  vs.data(), (H *)out, n, pos, kHeads,
                                  kKvHeads, kHeadDim, kMaxSeq, kScale);
      } else {
        kiln_k_attention_kvf8_bf16(KILN_ARGS(B), kcu, vcu, ks.data(),
                                   vs.data(), (B *)out, n, pos, kHeads,
                                   kKvHeads, kHeadDim, kMaxSeq, kScale);
      }
      return;
    }
#undef KILN_ARGS
  }
};

/// A pool of `blocks` blocks of B rows in (act, fmt).
struct Pool {
  int64_t B;
  std::vector<uint8_t> kp, vp;
  std::vector<float> ks, vs;
  Pool(Act a, Fmt f, int64_t blocks, int64_t b)
      : B(b), kp(size_t(blocks * b * kKvDim) * codeBytes(f, a)), vp(kp.size()),
        ks(size_t(blocks * b * kKvHeads)), vs(ks.size()) {}
  kiln_paged_kv view(Fmt f, const int32_t *table, const float *mean) {
    kiln_paged_kv kv{};
    kv.format = f == Fmt::Plain ? KILN_KV_PLAIN
                : (f == Fmt::Int8 || f == Fmt::Int8Centered) ? KILN_KV_INT8
                                                             : KILN_KV_FP8;
    kv.block_tokens = int32_t(B);
    kv.k_pool = kp.data();
    kv.v_pool = vp.data();
    kv.k_scales = ks.data();
    kv.v_scales = vs.data();
    kv.k_mean = centered(f) ? mean : nullptr;
    kv.rot_dim = kHeadDim;
    kv.theta = kTheta;
    kv.block_table = table;
    return kv;
  }
};

/// Positions [0, upto) of the paged pool (through `table`) equal the
/// contiguous cache's rows, codes and scales, bit for bit.
void expectSameRows(const Contiguous &c, const Pool &p,
                    const std::vector<int32_t> &table, int64_t upto,
                    size_t rowBytes, const std::string &what) {
  for (int64_t t = 0; t < upto; ++t) {
    const int64_t row = int64_t(table[size_t(t / p.B)]) * p.B + t % p.B;
    ASSERT_EQ(std::memcmp(c.kc.data() + t * rowBytes,
                          p.kp.data() + row * rowBytes, rowBytes),
              0)
        << what << ": K row " << t;
    ASSERT_EQ(std::memcmp(c.vc.data() + t * rowBytes,
                          p.vp.data() + row * rowBytes, rowBytes),
              0)
        << what << ": V row " << t;
    if (c.fmt != Fmt::Plain)
      for (int64_t h = 0; h < kKvHeads; ++h) {
        ASSERT_EQ(c.ks[size_t(t * kKvHeads + h)],
                  p.ks[size_t(row * kKvHeads + h)])
            << what << ": K scale " << t;
        ASSERT_EQ(c.vs[size_t(t * kKvHeads + h)],
                  p.vs[size_t(row * kKvHeads + h)])
            << what << ": V scale " << t;
      }
  }
}

/// Runs `steps` (n tokens each) on the contiguous kernel and on the paged
/// one and compares outputs and stored rows.
void compare(Act act, Fmt fmt, int64_t B, int64_t window, std::mt19937 &rng) {
  const std::string what = "act " + std::to_string(int(act)) + " fmt " +
                           std::to_string(int(fmt)) + " B " +
                           std::to_string(B) + " window " +
                           std::to_string(window);
  std::vector<float> mean(static_cast<size_t>(kKvDim));
  for (float &m : mean)
    m = float(rng() % 200) / 100.0f - 1.0f;
  const int64_t blocks = kMaxSeq / B + 3;
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < blocks; ++i)
    table[size_t(i)] = int32_t(i);
  std::shuffle(table.begin(), table.end(), rng);
  Contiguous c(act, fmt, mean.data());
  Pool p(act, fmt, blocks, B);
  const size_t rowBytes = size_t(kKvDim) * codeBytes(fmt, act);
  int64_t pos = 0;
  for (int64_t n : {int64_t(40), int64_t(1), int64_t(1), int64_t(17)}) {
    auto q = randomActs(act, n * kQDim, rng);
    auto k = randomActs(act, n * kKvDim, rng);
    auto v = randomActs(act, n * kKvDim, rng);
    std::vector<uint8_t> outC(size_t(n * kQDim) * actBytes(act));
    std::vector<uint8_t> outP(outC.size(), 0xff);
    c.run(q.data(), k.data(), v.data(), outC.data(), n, pos, window);
    kiln_paged_kv kv = p.view(fmt, table.data(), mean.data());
    kiln_k_paged_attention(&kv, elemOf(act), q.data(), k.data(), v.data(),
                           outP.data(), n, pos, kHeads, kKvHeads, kHeadDim,
                           kScale, window);
    ASSERT_EQ(outC, outP) << what << ": output of " << n << " tokens at "
                          << pos;
    pos += n;
    expectSameRows(c, p, table, pos, rowBytes, what);
  }
}

TEST(PagedAttention, MatchesContiguousEveryFormat) {
  std::mt19937 rng(5);
  for (Act act : {Act::F32, Act::F16, Act::Bf16})
    for (Fmt fmt : {Fmt::Plain, Fmt::Int8, Fmt::Fp8, Fmt::Int8Centered,
                    Fmt::Fp8Centered})
      for (int64_t B : {1, 16, 64})
        compare(act, fmt, B, /*window=*/0, rng);
}

TEST(PagedAttention, SlidingWindow) {
  std::mt19937 rng(6);
  for (Act act : {Act::F32, Act::F16, Act::Bf16})
    for (int64_t B : {1, 16})
      compare(act, Fmt::Plain, B, /*window=*/7, rng);
}

/// A sequence forked from another after its prompt: its block table starts
/// with the parent's full blocks (shared), then its own. Its attention over
/// the shared prefix equals the contiguous kernel over a cache holding the
/// parent's prefix rows followed by its own.
TEST(PagedAttention, ForkedPrefixSharesBlocks) {
  std::mt19937 rng(7);
  const Act act = Act::F32;
  const int64_t B = 16, prompt = 32; // two full blocks
  Pool pool(act, Fmt::Plain, 10, B);
  std::vector<int32_t> parent = {7, 2, 5}, child = {7, 2, 9};
  // The parent's prompt, on the paged pool and on a contiguous cache.
  Contiguous ref(act, Fmt::Plain, nullptr);
  auto q = randomActs(act, prompt * kQDim, rng);
  auto k = randomActs(act, prompt * kKvDim, rng);
  auto v = randomActs(act, prompt * kKvDim, rng);
  std::vector<uint8_t> out(size_t(prompt * kQDim) * 4);
  kiln_paged_kv kvParent = pool.view(Fmt::Plain, parent.data(), nullptr);
  kiln_k_paged_attention(&kvParent, KILN_ELEM_F32, q.data(), k.data(),
                         v.data(), out.data(), prompt, 0, kHeads, kKvHeads,
                         kHeadDim, kScale, 0);
  ref.run(q.data(), k.data(), v.data(), out.data(), prompt, 0, 0);
  // Each continues with different tokens; the child's go to block 9.
  kiln_paged_kv kvChild = pool.view(Fmt::Plain, child.data(), nullptr);
  for (int step = 0; step < 5; ++step) {
    auto q1 = randomActs(act, kQDim, rng);
    auto k1 = randomActs(act, kKvDim, rng);
    auto v1 = randomActs(act, kKvDim, rng);
    std::vector<uint8_t> outC(size_t(kQDim) * 4), outP(outC.size());
    ref.run(q1.data(), k1.data(), v1.data(), outC.data(), 1, prompt + step, 0);
    kiln_k_paged_attention(&kvChild, KILN_ELEM_F32, q1.data(), k1.data(),
                           v1.data(), outP.data(), 1, prompt + step, kHeads,
                           kKvHeads, kHeadDim, kScale, 0);
    ASSERT_EQ(outC, outP) << "child step " << step;
  }
  // The parent's blocks were not written by the child: its block 5 (its
  // third block) is untouched, and the shared blocks hold the prompt.
  expectSameRows(ref, pool, child, prompt + 5, size_t(kKvDim) * 4, "child");
  for (size_t i = 0; i < size_t(B * kKvDim) * 4; ++i)
    ASSERT_EQ(pool.kp[size_t(5 * B * kKvDim) * 4 + i], 0) << "block 5 written";
}

/// A step of three sequences (a prompt chunk, a decode token, a later
/// prompt chunk) through kiln_k_paged_attention_batch equals each run
/// alone on a copy of the same pool (batch invariance), outputs and rows.
TEST(PagedAttention, BatchEqualsEachSequenceAlone) {
  std::mt19937 rng(8);
  for (Act act : {Act::F32, Act::Bf16})
    for (Fmt fmt : {Fmt::Plain, Fmt::Int8}) {
      const int64_t B = 4, blocks = 40;
      Pool batched(act, fmt, blocks, B), alone(act, fmt, blocks, B);
      const int32_t maxBlocks = 10;
      std::vector<int32_t> tables(3 * maxBlocks);
      std::vector<int32_t> perm(blocks);
      for (int32_t i = 0; i < blocks; ++i)
        perm[size_t(i)] = i;
      std::shuffle(perm.begin(), perm.end(), rng);
      std::copy_n(perm.begin(), tables.size(), tables.begin());
      // Earlier steps: each sequence's history, written by running it alone
      // on both pools.
      const int32_t history[3] = {0, 9, 16};
      for (int s = 0; s < 3; ++s)
        if (history[s] > 0) {
          auto q = randomActs(act, history[s] * kQDim, rng);
          auto k = randomActs(act, history[s] * kKvDim, rng);
          auto v = randomActs(act, history[s] * kKvDim, rng);
          std::vector<uint8_t> o(size_t(history[s] * kQDim) * actBytes(act));
          for (Pool *p : {&batched, &alone}) {
            kiln_paged_kv kv =
                p->view(fmt, tables.data() + s * maxBlocks, nullptr);
            kiln_k_paged_attention(&kv, elemOf(act), q.data(), k.data(),
                                   v.data(), o.data(), history[s], 0, kHeads,
                                   kKvHeads, kHeadDim, kScale, 0);
          }
        }
      // This step: 5 prompt tokens, 1 decode token, a chunk of 4.
      const int32_t rowStart[3] = {0, 5, 6}, rowCount[3] = {5, 1, 4};
      const int64_t T = 10;
      std::vector<int32_t> positions;
      for (int s = 0; s < 3; ++s)
        for (int32_t i = 0; i < rowCount[s]; ++i)
          positions.push_back(history[s] + i);
      kiln_batch batch{3,        maxBlocks, rowStart,        rowCount,
                       history,  tables.data(), positions.data()};
      auto q = randomActs(act, T * kQDim, rng);
      auto k = randomActs(act, T * kKvDim, rng);
      auto v = randomActs(act, T * kKvDim, rng);
      std::vector<uint8_t> outB(size_t(T * kQDim) * actBytes(act));
      std::vector<uint8_t> outA(outB.size());
      kiln_paged_kv kv = batched.view(fmt, nullptr, nullptr);
      kiln_k_paged_attention_batch(&kv, &batch, elemOf(act), q.data(),
                                   k.data(), v.data(), outB.data(), kHeads,
                                   kKvHeads, kHeadDim, kScale, 0);
      for (int s = 0; s < 3; ++s) {
        kiln_paged_kv one =
            alone.view(fmt, tables.data() + s * maxBlocks, nullptr);
        const size_t ab = actBytes(act);
        kiln_k_paged_attention(
            &one, elemOf(act), q.data() + rowStart[s] * kQDim * ab,
            k.data() + rowStart[s] * kKvDim * ab,
            v.data() + rowStart[s] * kKvDim * ab,
            outA.data() + rowStart[s] * kQDim * ab, rowCount[s], history[s],
            kHeads, kKvHeads, kHeadDim, kScale, 0);
      }
      EXPECT_EQ(outB, outA) << "act " << int(act) << " fmt " << int(fmt);
      EXPECT_EQ(batched.kp, alone.kp);
      EXPECT_EQ(batched.vp, alone.vp);
      EXPECT_EQ(batched.ks, alone.ks);
    }
}

/// kiln_k_rope_rows rotates each row by its own position, bit-identical to
/// kiln_k_rope of that row alone.
TEST(PagedAttention, RopeRowsByPosition) {
  std::mt19937 rng(9);
  const int32_t positions[6] = {0, 1, 2, 17, 5, 300};
  for (Act act : {Act::F32, Act::F16, Act::Bf16}) {
    auto x = randomActs(act, 6 * kQDim, rng);
    std::vector<uint8_t> y(x.size()), ref(x.size());
    kiln_k_rope_rows(elemOf(act), x.data(), y.data(), 6, kHeads, kHeadDim,
                     12, positions, kTheta);
    const size_t rowBytes = size_t(kQDim) * actBytes(act);
    for (int r = 0; r < 6; ++r) {
      const uint8_t *xr = x.data() + r * rowBytes;
      uint8_t *rr = ref.data() + r * rowBytes;
      if (act == Act::F32)
        kiln_k_rope((const float *)xr, (float *)rr, 1, kHeads, kHeadDim, 12,
                    positions[r], kTheta);
      else if (act == Act::F16)
        kiln_k_rope_f16((const kiln_f16_t *)xr, (kiln_f16_t *)rr, 1, kHeads,
                        kHeadDim, 12, positions[r], kTheta);
      else
        kiln_k_rope_bf16((const kiln_bf16_t *)xr, (kiln_bf16_t *)rr, 1,
                         kHeads, kHeadDim, 12, positions[r], kTheta);
    }
    EXPECT_EQ(y, ref) << "act " << int(act);
  }
}

} // namespace

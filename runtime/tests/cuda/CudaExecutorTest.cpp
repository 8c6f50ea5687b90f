//===- CudaExecutorTest.cpp - The CUDA executor on a real device ----------===//
//
// Drives libkiln_runtime_cuda.so through the public C API with a stand-in
// model.so (FakeCudaModel.cu) on a "cuda" artifact: weights upload through
// the staging buffers (65 MiB: two chunks, both buffers), chunked eager
// prefill, decode by CUDA-graph replay (captured once: the host entry point
// runs once), positions read from device memory, KV cache persistence and
// reset, logits copy-back, device sampling with host-drawn coins, and errors
// reported through ctx->status. Every test is SKIPPED when no CUDA device is
// available; none passes without one.
//
//===----------------------------------------------------------------------===//
#include "kiln_rt/api.h"
#include "../TestFiles.h"
#include "kiln_rt/cuda_abi.h"
#include "tokenizer/Sampler.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int64_t kVocab = 16;

using kiln::rt::test::hexOf;
using kiln::rt::test::readFile;
using kiln::rt::test::xxh3Hex;

/// Writes a cuda artifact around the fake model; returns its directory.
std::string makeArtifact() {
  char tmpl[] = "/tmp/kiln_rt_cuda_test_XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::map<std::string, std::string> files;
  // 65 MiB + 64 bytes: word 0 = vocab (float), word i = i * 2654435761.
  uint64_t bytes = (uint64_t(65) << 20) + 64;
  std::string weights(bytes, '\0');
  for (uint64_t i = 1; i < bytes / 4; ++i) {
    uint32_t v = uint32_t(i * 2654435761u);
    std::memcpy(&weights[i * 4], &v, 4);
  }
  float v = float(kVocab);
  std::memcpy(&weights[0], &v, 4);
  files["weights.bin"] = std::move(weights);
  files["model.so"] = readFile(KILN_RT_FAKE_CUDA_MODEL);
  std::vector<std::string> hex = {hexOf("<unk>"), hexOf("<s>"), hexOf("</s>")};
  std::vector<int> types = {2, 3, 3};
  std::vector<float> scores = {0, 0, 0};
  for (int i = 3; i < kVocab; ++i) {
    hex.push_back(hexOf(std::string(1, char('a' + i))));
    types.push_back(1);
    scores.push_back(0);
  }
  files["tokenizer.json"] =
      json{{"format", "kiln-tokenizer"}, {"version", 1}, {"model", "spm"},
           {"pieces_hex", hex}, {"scores", scores}, {"types", types},
           {"merges", json::array()}, {"bos_id", 1}, {"eos_id", 2},
           {"unk_id", 0}, {"add_bos", true}, {"add_dummy_prefix", true},
           {"byte_fallback", false}}
          .dump();
  json listed = json::object();
  for (auto &[name, content] : files) {
    std::ofstream(fs::path(dir) / name, std::ios::binary) << content;
    listed[name] = {{"bytes", content.size()}, {"xxh3_64", xxh3Hex(content)}};
  }
  json manifest = {
      {"format", "kiln-artifact"},
      {"version", 1},
      {"abi_version", KILN_CUDA_ABI_VERSION},
      {"target", "cuda"},
      {"model", {{"name", "fake-cuda"}, {"vocab_size", kVocab}, {"max_seq_len", 32}}},
      {"recipe", {{"dtype", "f32"}, {"quant", "none"}}},
      {"runtime",
       {{"arena_bytes", 1024},
        {"max_prefill_tokens", 3},
        {"entry_points", {{"prefill", "kiln_prefill"}, {"decode", "kiln_decode"}}},
        {"kv_cache",
         {{"layers", 1}, {"kv_heads", 1}, {"head_dim", 2}, {"max_seq", 32},
          {"dtype", "f32"}, {"bytes", 1 * 2 * 32 * 1 * 2 * 4}}}}},
      {"weights",
       {{"file", "weights.bin"},
        {"tensors", {{{"name", "all"}, {"offset", 0}, {"bytes", bytes}}}}}},
      {"tokenizer", {{"file", "tokenizer.json"}}},
      {"files", listed},
  };
  std::ofstream(fs::path(dir) / "manifest.json") << manifest.dump(2);
  return dir;
}

int64_t fakeCounter(const std::string &dir, const char *name) {
  void *h = dlopen((dir + "/model.so").c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!h)
    return -1;
  int64_t *p = static_cast<int64_t *>(dlsym(h, name));
  int64_t v = p ? *p : -1;
  dlclose(h);
  return v;
}

void setFakeCounter(const std::string &dir, const char *name, int64_t value) {
  void *h = dlopen((dir + "/model.so").c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr);
  *static_cast<int64_t *>(dlsym(h, name)) = value;
  dlclose(h);
}

class CudaExecutor : public ::testing::Test {
protected:
  void SetUp() override {
    dir = makeArtifact();
    kiln_rt_status_t st =
        kiln_rt_artifact_open(dir.c_str(), KILN_RT_OPEN_SKIP_CHECKSUMS, &artifact);
    if (st) {
      std::string msg = kiln_rt_status_message(st);
      kiln_rt_status_free(st);
      if (msg.find("no CUDA device is available") != std::string::npos ||
          msg.find("built without CUDA support") != std::string::npos)
        GTEST_SKIP() << msg;
      FAIL() << msg;
    }
    ASSERT_EQ(kiln_rt_session_create(artifact, &session), nullptr);
  }
  void TearDown() override {
    kiln_rt_session_release(session);
    kiln_rt_artifact_release(artifact);
    fs::remove_all(dir);
  }

  /// Logits must be one-hot-ish: [(last + 1) % vocab] = position, [0] =
  /// -sum of tokens consumed, [1] = -weight mismatches.
  void expectLogits(int32_t last, int64_t position, float tokenSum) {
    const float *l = kiln_rt_session_logits(session);
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l[(last + 1) % kVocab], float(position));
    EXPECT_EQ(l[0], -tokenSum);
    EXPECT_EQ(l[1], 0.0f) << "weights differ on the device";
  }

  std::string dir;
  kiln_rt_artifact_t *artifact = nullptr;
  kiln_rt_session_t *session = nullptr;
};

TEST_F(CudaExecutor, PrefillDecodeSample) {
  kiln_rt_model_info_t info;
  kiln_rt_artifact_info(artifact, &info);
  EXPECT_STREQ(info.target, "cuda");
  EXPECT_NE(std::string(info.device).find("SMs"), std::string::npos) << info.device;
  EXPECT_GT(fakeCounter(dir, "fake_cuda_sm_count"), -1);

  std::vector<int32_t> prompt = {1, 3, 4, 5, 6, 7, 8}; // chunks 3 + 3 + 1
  ASSERT_EQ(kiln_rt_session_prefill(session, prompt.data(), 7), nullptr);
  EXPECT_EQ(fakeCounter(dir, "fake_cuda_prefill_calls"), 3);
  EXPECT_GT(fakeCounter(dir, "fake_cuda_sm_count"), 0);
  float sum = 1 + 3 + 4 + 5 + 6 + 7 + 8;
  expectLogits(8, 7, sum);

  kiln_rt_sampler_params_t greedy = {0.0f, 0, 0.9f, 42};
  kiln_rt_sampler_t *sampler = nullptr;
  ASSERT_EQ(kiln_rt_sampler_create(&greedy, kVocab, &sampler), nullptr);
  int32_t next = -1;
  ASSERT_EQ(kiln_rt_session_sample(session, sampler, &next), nullptr);
  EXPECT_EQ(next, 9);

  // Decode by graph replay: the host entry point runs once (the capture).
  int32_t token = 9;
  for (int step = 0; step < 5; ++step) {
    ASSERT_EQ(kiln_rt_session_decode(session, token), nullptr);
    sum += float(token);
    expectLogits(token, 8 + step, sum);
    ASSERT_EQ(kiln_rt_session_sample(session, sampler, &next), nullptr);
    EXPECT_EQ(next, (token + 1) % kVocab);
    token = 3 + (token + 2) % 10; // vary ids: positions and tokens both checked
  }
  EXPECT_EQ(fakeCounter(dir, "fake_cuda_decode_calls"), 1);
  EXPECT_EQ(kiln_rt_session_position(session), 12);
  kiln_rt_sampler_release(sampler);

  // Temperature > 0: the coin is the seeded xorshift stream's next value.
  kiln_rt_sampler_params_t hot = {1.0f, 0, 1.0f, 7};
  ASSERT_EQ(kiln_rt_sampler_create(&hot, kVocab, &sampler), nullptr);
  kiln::rt::XorShiftRng rng(7);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(kiln_rt_session_sample(session, sampler, &next), nullptr);
    int expected = std::min<int>(kVocab - 1, int(rng.nextF32() * float(kVocab)));
    EXPECT_EQ(next, expected);
  }
  kiln_rt_sampler_release(sampler);

  // Reset zeroes the KV cache; the captured graph stays valid.
  kiln_rt_session_reset(session);
  EXPECT_EQ(kiln_rt_session_logits(session), nullptr);
  ASSERT_EQ(kiln_rt_session_prefill(session, prompt.data(), 2), nullptr);
  expectLogits(3, 2, 4);
  ASSERT_EQ(kiln_rt_session_decode(session, 10), nullptr);
  expectLogits(10, 3, 14);
  EXPECT_EQ(fakeCounter(dir, "fake_cuda_decode_calls"), 1);
}

TEST_F(CudaExecutor, ErrorsFromEmittedCode) {
  setFakeCounter(dir, "fake_cuda_fail_next", 1);
  int32_t bos = 1;
  kiln_rt_status_t st = kiln_rt_session_prefill(session, &bos, 1);
  ASSERT_NE(st, nullptr);
  EXPECT_NE(std::string(kiln_rt_status_message(st)).find("kiln_prefill: fake failure"),
            std::string::npos)
      << kiln_rt_status_message(st);
  kiln_rt_status_free(st);
  // Unusable until reset, then fine.
  st = kiln_rt_session_prefill(session, &bos, 1);
  ASSERT_NE(st, nullptr);
  EXPECT_NE(std::string(kiln_rt_status_message(st)).find("unusable"), std::string::npos);
  kiln_rt_status_free(st);
  kiln_rt_session_reset(session);
  ASSERT_EQ(kiln_rt_session_prefill(session, &bos, 1), nullptr);
  expectLogits(1, 1, 1);

  // A failure during graph capture is reported, not replayed.
  setFakeCounter(dir, "fake_cuda_fail_next", 1);
  st = kiln_rt_session_decode(session, 4);
  ASSERT_NE(st, nullptr);
  EXPECT_NE(std::string(kiln_rt_status_message(st)).find("kiln_decode: fake failure"),
            std::string::npos)
      << kiln_rt_status_message(st);
  kiln_rt_status_free(st);
  kiln_rt_session_reset(session);
  ASSERT_EQ(kiln_rt_session_prefill(session, &bos, 1), nullptr);
  ASSERT_EQ(kiln_rt_session_decode(session, 4), nullptr);
  expectLogits(4, 2, 5);
}

TEST_F(CudaExecutor, DeviceBandwidth) {
  double bw = 0;
  ASSERT_EQ(kiln_rt_artifact_device_bandwidth(artifact, 64 << 20, 3, &bw), nullptr);
  EXPECT_GT(bw, 1e10); // any GPU copies faster than 10 GB/s
}

} // namespace

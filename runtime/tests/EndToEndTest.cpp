//===- EndToEndTest.cpp - stories260K through the C API -------------------===//
//
// Builds a stories260K artifact with e2e/make_llama2c_artifact.py (a
// hand-written model.cpp standing in for kiln-compile; prefill chunks of 3 so
// chunking is exercised), then checks against ../shared/models/stories260K:
// BOS logits within 1e-4 of the float64 reference, the published 200-token
// greedy text of llama2.c run.c exactly, and the run.c prompt encoding.
// Skipped when python3/numpy or the model files are unavailable.
//
//===----------------------------------------------------------------------===//
#include "kiln_rt/api.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace {

class Stories260K : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    fs::path models = KILN_RT_MODELS_DIR;
    modelDir = models / "stories260K";
    if (!fs::exists(modelDir / "stories260K.bin"))
      return;
    char tmpl[] = "/tmp/kiln_rt_e2e_XXXXXX";
    artifactDir = mkdtemp(tmpl);
    std::string cmd = "python3 " KILN_RT_E2E_SCRIPT " " +
                      (modelDir / "stories260K.bin").string() + " " +
                      (modelDir / "tok512.bin").string() + " " + artifactDir +
                      " --max-prefill 3 > /dev/null 2>&1";
    built = std::system(cmd.c_str()) == 0;
  }
  static void TearDownTestSuite() {
    if (!artifactDir.empty())
      fs::remove_all(artifactDir);
  }
  void SetUp() override {
    if (!built)
      GTEST_SKIP() << "stories260K or python3+numpy unavailable";
    kiln_rt_status_t st = kiln_rt_artifact_open(artifactDir.c_str(), 0, &artifact);
    ASSERT_EQ(st, nullptr) << kiln_rt_status_message(st);
    ASSERT_EQ(kiln_rt_session_create(artifact, &session), nullptr);
    std::ifstream in(modelDir / "reference_outputs.json");
    reference = nlohmann::json::parse(in);
  }
  void TearDown() override {
    kiln_rt_session_release(session);
    kiln_rt_artifact_release(artifact);
  }

  static inline fs::path modelDir;
  static inline std::string artifactDir;
  static inline bool built = false;
  kiln_rt_artifact_t *artifact = nullptr;
  kiln_rt_session_t *session = nullptr;
  nlohmann::json reference;
};

TEST_F(Stories260K, BosLogitsMatchFloat64Reference) {
  int32_t bos = 1;
  ASSERT_EQ(kiln_rt_session_prefill(session, &bos, 1), nullptr);
  std::vector<double> ref =
      reference["derived_independently"]["logits_pos0_after_BOS"];
  const float *logits = kiln_rt_session_logits(session);
  double maxDiff = 0, maxRef = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    maxDiff = std::max(maxDiff, std::fabs(logits[i] - ref[i]));
    maxRef = std::max(maxRef, std::fabs(ref[i]));
  }
  EXPECT_LT(maxDiff / maxRef, 1e-4);
}

TEST_F(Stories260K, GreedyTextMatchesLlama2c) {
  kiln_rt_sampler_params_t params = {0.0f, 0, 0.9f, 1};
  kiln_rt_sampler_t *sampler = nullptr;
  ASSERT_EQ(kiln_rt_sampler_create(&params, 512, &sampler), nullptr);
  int32_t token = 1;
  ASSERT_EQ(kiln_rt_session_prefill(session, &token, 1), nullptr);
  std::string text;
  std::vector<int32_t> ids;
  for (int step = 0; step < 200; ++step) {
    int32_t next = kiln_rt_sampler_sample(sampler, kiln_rt_session_logits(session));
    if (next == 1 || next == 2)
      break;
    const char *piece = nullptr;
    size_t len = 0;
    ASSERT_EQ(kiln_rt_detokenize(artifact, token, next, &piece, &len), nullptr);
    text.append(piece, len);
    ids.push_back(next);
    token = next;
    ASSERT_EQ(kiln_rt_session_decode(session, token), nullptr);
  }
  kiln_rt_sampler_release(sampler);
  EXPECT_EQ(text, reference["published"]["expected_text"].get<std::string>());
  std::vector<int32_t> refIds = reference["derived_independently"]["greedy_ids_200"];
  EXPECT_EQ(ids, refIds);
}

TEST_F(Stories260K, PromptEncodingAndChunkedPrefill) {
  std::vector<int32_t> ids(16);
  size_t count = 0;
  ASSERT_EQ(kiln_rt_tokenize(artifact, "Once upon a time", 16, 1, ids.data(),
                             ids.size(), &count),
            nullptr);
  ids.resize(count);
  std::vector<int32_t> expected =
      reference["published"]["prompted_variant"]["prompt_ids_runc_encoder"];
  EXPECT_EQ(ids, expected);
  // 5 tokens in chunks of 3 must give the same next token as greedy decoding.
  ASSERT_EQ(kiln_rt_session_prefill(session, ids.data(), int64_t(ids.size())), nullptr);
  const float *logits = kiln_rt_session_logits(session);
  int32_t best = int32_t(std::max_element(logits, logits + 512) - logits);
  EXPECT_EQ(best, reference["derived_independently"]["greedy_ids_200"][4].get<int32_t>());
}

} // namespace

//===- ArtifactTest.cpp - Artifact validation and sessions ----------------===//
//
// Builds small artifacts in a temporary directory (manifest.json, weights.bin,
// tokenizer.json, model.so = the fake model) and checks that each kind of
// damage is refused with a message naming the file and the field, and that a
// valid artifact runs through the C API (chunked prefill, decode, sampling).
//
//===----------------------------------------------------------------------===//
#include "artifact/Artifact.h"
#include "kiln_rt/api.h"
#include "FakeArtifact.h"
#include "TestFiles.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using kiln::rt::test::FakeArtifact;
using kiln::rt::test::hexOf;
using kiln::rt::test::kVocab;
using kiln::rt::test::readFile;
using kiln::rt::test::writeFile;
using kiln::rt::test::xxh3Hex;

TEST(Artifact, ValidOpens) {
  FakeArtifact f;
  f.write();
  EXPECT_EQ(f.open(), "");
}

TEST(Artifact, MissingDirectory) {
  EXPECT_NE(FakeArtifact().open(), ""); // empty dir: no manifest
  kiln_rt_artifact_t *a = nullptr;
  kiln_rt_status_t st = kiln_rt_artifact_open("/nonexistent/kiln", 0, &a);
  EXPECT_EQ(kiln_rt_status_code(st), KILN_RT_NOT_FOUND);
  EXPECT_NE(std::string(kiln_rt_status_message(st)).find("/nonexistent/kiln"),
            std::string::npos);
  kiln_rt_status_free(st);
}

TEST(Artifact, MissingManifest) {
  FakeArtifact f;
  EXPECT_NE(f.open().find(f.dir + "/manifest.json: cannot open"), std::string::npos);
}

TEST(Artifact, InvalidJson) {
  FakeArtifact f;
  f.write();
  writeFile(fs::path(f.dir) / "manifest.json", "{\"format\": \"kiln-artifact\",\n x");
  EXPECT_NE(f.open().find(f.dir + "/manifest.json: invalid JSON at byte 30: "),
            std::string::npos)
      << f.open();
}

TEST(Artifact, WrongFormatVersionAbiTarget) {
  {
    FakeArtifact f;
    f.manifest["format"] = "gguf";
    f.write();
    EXPECT_NE(f.open().find("format is \"gguf\""), std::string::npos) << f.open();
  }
  {
    FakeArtifact f;
    f.manifest["version"] = 2;
    f.write();
    EXPECT_EQ(f.open(), f.dir + "/manifest.json: unsupported artifact version 2 "
                                "(this runtime reads version 1)");
  }
  {
    FakeArtifact f;
    f.manifest["abi_version"] = 99;
    f.write();
    EXPECT_NE(f.open().find("manifest.json: abi_version 99 does not match"),
              std::string::npos)
        << f.open();
  }
  {
    FakeArtifact f;
    f.manifest["target"] = "tpu";
    f.write();
    EXPECT_NE(f.open().find("target \"tpu\" is not supported (this runtime runs "
                            "\"cpu\" and \"cuda\")"),
              std::string::npos)
        << f.open();
  }
  {
    FakeArtifact f; // cuda artifacts carry the CUDA ABI version
    f.manifest["target"] = "cuda";
    f.manifest["abi_version"] = 99;
    f.write();
    EXPECT_NE(f.open().find("abi_version 99 does not match this runtime's CUDA "
                            "ABI version"),
              std::string::npos)
        << f.open();
  }
}

TEST(Artifact, Dtypes) {
  {
    FakeArtifact f; // recipe.dtype defaults to f32; explicit f32 is fine
    f.manifest["recipe"] = {{"dtype", "f32"}, {"quant", "none"}};
    f.write();
    EXPECT_EQ(f.open(), "");
  }
  for (const char *dtype : {"f16", "bf16"}) {
    // The CPU target runs 16-bit artifacts too (manifest only: the fake
    // model.so was planned for an f32 cache).
    FakeArtifact f;
    f.write();
    json m = f.manifest;
    m["recipe"] = {{"dtype", dtype}};
    m["runtime"]["kv_cache"]["dtype"] = dtype;
    m["runtime"]["kv_cache"]["bytes"] = 256;
    kiln::rt::Manifest parsed;
    kiln::rt::Status st = kiln::rt::parseManifest(m.dump(), "D", parsed);
    EXPECT_TRUE(st.isOk()) << dtype << ": " << st.message();
    EXPECT_EQ(parsed.target, kiln::rt::Target::Cpu);
    EXPECT_EQ(parsed.dtype, dtype);
    EXPECT_EQ(parsed.kvDtype, dtype);
  }
  {
    FakeArtifact f;
    f.manifest["recipe"] = {{"dtype", "f8"}};
    f.write();
    EXPECT_NE(f.open().find("recipe.dtype \"f8\" is not supported (expected"),
              std::string::npos)
        << f.open();
  }
  {
    FakeArtifact f;
    f.manifest["runtime"]["kv_cache"]["dtype"] = "f8";
    f.write();
    EXPECT_NE(f.open().find("runtime.kv_cache.dtype \"f8\" is not supported "
                            "(expected \"f32\", \"f16\", \"bf16\", \"int8\" "
                            "or \"fp8_e4m3\")"),
              std::string::npos)
        << f.open();
  }
  for (const char *kv : {"int8", "fp8_e4m3"}) {
    // One-byte caches plus a 4-byte scale per (token, kv head), for keys
    // and values: 1 layer * 2 * 32 rows * 1 head * (2 + 4) bytes.
    FakeArtifact f;
    f.write();
    json m = f.manifest;
    m["runtime"]["kv_cache"]["dtype"] = kv;
    m["runtime"]["kv_cache"]["bytes"] = 1 * 2 * 32 * 1 * (2 + 4);
    kiln::rt::Manifest parsed;
    kiln::rt::Status st = kiln::rt::parseManifest(m.dump(), "D", parsed);
    EXPECT_TRUE(st.isOk()) << kv << ": " << st.message();
    EXPECT_EQ(parsed.kvDtype, kv);
    m["runtime"]["kv_cache"]["bytes"] = 1 * 2 * 32 * 1 * 2; // scales missing
    st = kiln::rt::parseManifest(m.dump(), "D", parsed);
    EXPECT_NE(st.message().find("(+ 4-byte scales per kv head) = 384"),
              std::string::npos)
        << kv << ": " << st.message();
  }
  {
    FakeArtifact f; // an f16 cache must be sized with 2-byte elements
    f.manifest["runtime"]["kv_cache"]["dtype"] = "f16";
    f.write();
    EXPECT_NE(f.open().find("runtime.kv_cache.bytes is 512 but layers * 2 * "
                            "max_seq * kv_heads * head_dim * 2 = 256"),
              std::string::npos)
        << f.open();
  }
  {
    FakeArtifact f;
    f.manifest["weights"]["tensors"][1]["dtype"] = "q4_0";
    f.write();
    EXPECT_NE(f.open().find("weights.tensors[1] (\"b\"): dtype \"q4_0\" is not "
                            "one of"),
              std::string::npos)
        << f.open();
  }
  for (const char *target : {"cpu", "cuda"}) {
    // W8A16 int8 weights ("i8", 1 byte per element) are accepted for both
    // targets, sized by their shape; recipe.dtype stays a float type.
    SCOPED_TRACE(target);
    FakeArtifact f;
    f.write();
    json m = f.manifest;
    if (std::string(target) == "cuda") {
      m["target"] = "cuda";
      m["abi_version"] = KILN_CUDA_ABI_VERSION;
    }
    m["weights"]["tensors"][1] = {{"name", "b.q"}, {"offset", 64},
                                  {"bytes", 192}, {"dtype", "i8"},
                                  {"shape", {12, 16}}};
    kiln::rt::Manifest parsed;
    kiln::rt::Status st = kiln::rt::parseManifest(m.dump(), f.dir, parsed);
    EXPECT_TRUE(st.isOk()) << st.message();
    m["weights"]["tensors"][1]["shape"] = {12, 4}; // 48 != 192 bytes
    st = kiln::rt::parseManifest(m.dump(), f.dir, parsed);
    EXPECT_NE(st.message().find("bytes 192 do not match shape [12,4] of i8"),
              std::string::npos)
        << st.message();
    m["recipe"] = {{"dtype", "i8"}}; // not an activation type
    EXPECT_FALSE(kiln::rt::parseManifest(m.dump(), f.dir, parsed).isOk());
  }
}

/// A manifest for target cuda with bf16 weights and KV cache.
json cudaManifest(FakeArtifact &f) {
  json m = f.manifest;
  m["target"] = "cuda";
  m["abi_version"] = KILN_CUDA_ABI_VERSION;
  m["recipe"] = {{"dtype", "bf16"}, {"quant", "none"}};
  m["runtime"]["kv_cache"]["dtype"] = "bf16";
  m["runtime"]["kv_cache"]["bytes"] = 1 * 2 * 32 * 1 * 2 * 2;
  m["weights"]["tensors"][0] = {{"name", "a"}, {"offset", 0}, {"bytes", 64},
                                {"dtype", "bf16"}, {"shape", {32}}};
  return m;
}

TEST(Artifact, CudaManifestValidation) {
  FakeArtifact f;
  f.write();
  kiln::rt::Manifest m;
  json good = cudaManifest(f);
  ASSERT_TRUE(kiln::rt::parseManifest(good.dump(), "D", m).isOk());
  EXPECT_EQ(m.target, kiln::rt::Target::Cuda);
  EXPECT_EQ(m.dtype, "bf16");
  EXPECT_EQ(m.kvDtype, "bf16");
  EXPECT_EQ(m.kvBytes, 256u);

  json kv = good;
  kv["runtime"]["kv_cache"]["bytes"] = 512; // the f32 size
  kiln::rt::Status st = kiln::rt::parseManifest(kv.dump(), "D", m);
  EXPECT_NE(st.message().find("runtime.kv_cache.bytes is 512 but layers * 2 * "
                              "max_seq * kv_heads * head_dim * 2 = 256"),
            std::string::npos)
      << st.message();

  json shape = good;
  shape["weights"]["tensors"][0]["shape"] = {16}; // 16 bf16 = 32 bytes != 64
  st = kiln::rt::parseManifest(shape.dump(), "D", m);
  EXPECT_NE(st.message().find("weights.tensors[0] (\"a\"): bytes 64 do not match "
                              "shape [16] of bf16"),
            std::string::npos)
      << st.message();
}

/// STYLE.md section 6: "No CUDA driver is a status, not a crash". On a
/// machine without a GPU (or a runtime built without CUDA) opening a cuda
/// artifact fails with a message naming the artifact and the reason; with a
/// GPU, this fake model.so lacks the CUDA ABI's symbols, also an error.
TEST(CudaArtifact, NoDeviceIsAStatusNotACrash) {
  FakeArtifact f;
  f.manifest = cudaManifest(f);
  f.write();
  kiln_rt_artifact_t *a = nullptr;
  kiln_rt_status_t st = kiln_rt_artifact_open(f.dir.c_str(), 0, &a);
  ASSERT_NE(st, nullptr) << "opening a cuda artifact with a CPU model.so succeeded";
  EXPECT_EQ(a, nullptr);
  EXPECT_NE(kiln_rt_status_code(st), KILN_RT_OK);
  std::string msg = kiln_rt_status_message(st);
  kiln_rt_status_free(st);
  const std::string prefix = f.dir + " targets cuda but ";
  bool noDevice =
      msg.rfind(prefix + "no CUDA device is available (cudaGetDeviceCount: ", 0) == 0;
  bool noCuda = msg == prefix + "this runtime was built without CUDA support "
                                "(libkiln_runtime_cuda.so not found)";
  bool noSymbol = msg.find("/model.so: ") != std::string::npos &&
                  msg.find("not found") != std::string::npos;
  EXPECT_TRUE(noDevice || noCuda || noSymbol) << msg;
  std::printf("cuda artifact refused: %s\n", msg.c_str());
}

TEST(CudaArtifact, MissingExecutorLibrary) {
  FakeArtifact f;
  f.manifest = cudaManifest(f);
  f.write();
  setenv("KILN_RUNTIME_CUDA_LIBRARY", "/nonexistent/libkiln_runtime_cuda.so", 1);
  kiln_rt_artifact_t *a = nullptr;
  kiln_rt_status_t st = kiln_rt_artifact_open(f.dir.c_str(), 0, &a);
  unsetenv("KILN_RUNTIME_CUDA_LIBRARY");
  EXPECT_EQ(kiln_rt_status_code(st), KILN_RT_UNIMPLEMENTED);
  EXPECT_EQ(std::string(kiln_rt_status_message(st)),
            f.dir + " targets cuda but this runtime was built without CUDA "
                    "support (libkiln_runtime_cuda.so not found)");
  kiln_rt_status_free(st);
  EXPECT_EQ(a, nullptr);
}

TEST(Artifact, MissingAndMistypedFields) {
  {
    FakeArtifact f;
    f.manifest["runtime"].erase("arena_bytes");
    f.write();
    EXPECT_EQ(f.open(),
              f.dir + "/manifest.json: missing field 'runtime.arena_bytes'");
  }
  {
    FakeArtifact f;
    f.manifest["model"]["vocab_size"] = "big";
    f.write();
    EXPECT_NE(f.open().find("field 'model.vocab_size' must be an integer"),
              std::string::npos);
  }
  {
    FakeArtifact f;
    f.manifest["runtime"]["arena_bytes"] = uint64_t(1) << 50;
    f.write();
    EXPECT_NE(f.open().find("implausibly large"), std::string::npos);
  }
}

TEST(Artifact, KvCacheBytes) {
  FakeArtifact f;
  f.manifest["runtime"]["kv_cache"]["bytes"] = 100;
  f.write();
  EXPECT_NE(f.open().find("runtime.kv_cache.bytes is 100 but layers * 2 * "
                          "max_seq * kv_heads * head_dim * 4 = 512"),
            std::string::npos)
      << f.open();
}

TEST(Artifact, TruncatedFile) {
  FakeArtifact f;
  f.write();
  writeFile(fs::path(f.dir) / "weights.bin", std::string(100, '\0'));
  EXPECT_EQ(f.open(), f.dir + "/weights.bin: size 100 bytes, manifest says 256 "
                              "(truncated or corrupted artifact)");
}

TEST(Artifact, ChecksumMismatch) {
  FakeArtifact f;
  f.write();
  std::string w = f.files["weights.bin"];
  w[200] = 1;
  writeFile(fs::path(f.dir) / "weights.bin", w);
  std::string msg = f.open();
  EXPECT_EQ(msg.rfind(f.dir + "/weights.bin: XXH3-64 is " + xxh3Hex(w) +
                          ", manifest says " + xxh3Hex(f.files["weights.bin"]),
                      0),
            0u)
      << msg;
  EXPECT_EQ(f.open(KILN_RT_OPEN_SKIP_CHECKSUMS), "");
}

TEST(Artifact, MissingFile) {
  FakeArtifact f;
  f.write();
  fs::remove(fs::path(f.dir) / "tokenizer.json");
  EXPECT_EQ(f.open().rfind(f.dir + "/tokenizer.json: missing", 0), 0u) << f.open();
}

TEST(Artifact, FilesMustListRequired) {
  FakeArtifact f;
  f.files.erase("model.so");
  f.write();
  EXPECT_NE(f.open().find("'files' does not list \"model.so\""), std::string::npos);
}

TEST(Artifact, WeightOffsets) {
  {
    FakeArtifact f;
    f.manifest["weights"]["tensors"][1]["offset"] = 68;
    f.manifest["weights"]["tensors"][1]["bytes"] = 4;
    f.write();
    EXPECT_NE(f.open().find("weights.tensors[1] (\"b\"): offset 68 is not a "
                            "multiple of 64"),
              std::string::npos)
        << f.open();
  }
  {
    FakeArtifact f;
    f.manifest["weights"]["tensors"][1]["bytes"] = 200;
    f.write();
    EXPECT_NE(f.open().find("weights.tensors[1] (\"b\"): bytes [64, 264) exceed "
                            "weights.bin size 256"),
              std::string::npos)
        << f.open();
  }
  {
    FakeArtifact f;
    f.manifest["weights"]["tensors"][0]["shape"] = {17};
    f.write();
    EXPECT_NE(f.open().find("do not match shape [17]"), std::string::npos);
  }
}

TEST(Artifact, BadModelSo) {
  {
    FakeArtifact f;
    f.files["model.so"] = "not an ELF file";
    f.write();
    EXPECT_EQ(f.open().rfind(f.dir + "/model.so: cannot load: ", 0), 0u) << f.open();
  }
  {
    FakeArtifact f;
    f.manifest["runtime"]["entry_points"]["decode"] = "kiln_nope";
    f.write();
    EXPECT_NE(f.open().find("model.so: entry point 'kiln_nope' (manifest.json "
                            "runtime.entry_points.decode) not found"),
              std::string::npos)
        << f.open();
  }
}

/// Counters exported by the fake model (same handle as the runtime's dlopen).
int64_t fakeCounter(const std::string &dir, const char *name) {
  void *h = dlopen((dir + "/model.so").c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!h)
    return -1;
  int64_t v = *static_cast<int64_t *>(dlsym(h, name));
  dlclose(h);
  return v;
}

namespace {
/// What the observer of Session.Observer saw.
struct Observed {
  std::vector<int64_t> taps, rows, cols;
  std::vector<float> values;
};
} // namespace

static void recordObservation(void *user, int64_t tap, const float *x,
                              int64_t rows, int64_t cols) {
  auto &o = *static_cast<Observed *>(user);
  o.taps.push_back(tap);
  o.rows.push_back(rows);
  o.cols.push_back(cols);
  o.values.insert(o.values.end(), x, x + rows * cols);
}

// kiln_k_observe reaches the observer registered on the running session,
// once per prefill chunk / decode step; none registered: nothing happens.
TEST(Session, Observer) {
  FakeArtifact f;
  f.write();
  kiln_rt_artifact_t *a = nullptr;
  ASSERT_EQ(kiln_rt_artifact_open(f.dir.c_str(), 0, &a), nullptr);
  kiln_rt_session_t *s = nullptr, *other = nullptr;
  ASSERT_EQ(kiln_rt_session_create(a, &s), nullptr);
  ASSERT_EQ(kiln_rt_session_create(a, &other), nullptr);
  Observed seen, unseen;
  ASSERT_EQ(kiln_rt_session_set_observer(s, recordObservation, &seen), nullptr);
  ASSERT_EQ(kiln_rt_session_set_observer(other, recordObservation, &unseen),
            nullptr);
  std::vector<int32_t> prompt = {1, 3, 4, 5, 6}; // chunks of 3 and 2
  ASSERT_EQ(kiln_rt_session_prefill(s, prompt.data(), 5), nullptr);
  ASSERT_EQ(kiln_rt_session_decode(s, 9), nullptr);
  EXPECT_EQ(seen.taps, (std::vector<int64_t>{7, 7, 7}));
  EXPECT_EQ(seen.rows, (std::vector<int64_t>{3, 2, 1}));
  EXPECT_EQ(seen.cols, (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(seen.values, (std::vector<float>{1, 3, 4, 5, 6, 9}));
  EXPECT_TRUE(unseen.taps.empty()); // observers are per session

  // Removing it stops the calls.
  ASSERT_EQ(kiln_rt_session_set_observer(s, nullptr, nullptr), nullptr);
  ASSERT_EQ(kiln_rt_session_decode(s, 10), nullptr);
  EXPECT_EQ(seen.taps.size(), 3u);

  kiln_rt_status_t st = kiln_rt_session_set_observer(nullptr, nullptr, nullptr);
  EXPECT_EQ(kiln_rt_status_code(st), KILN_RT_INVALID_ARGUMENT);
  kiln_rt_status_free(st);
  kiln_rt_session_release(other);
  kiln_rt_session_release(s);
  kiln_rt_artifact_release(a);
}

TEST(Session, PrefillDecodeSample) {
  FakeArtifact f;
  f.write();
  kiln_rt_artifact_t *a = nullptr;
  ASSERT_EQ(kiln_rt_artifact_open(f.dir.c_str(), 0, &a), nullptr);
  kiln_rt_model_info_t info;
  kiln_rt_artifact_info(a, &info);
  EXPECT_EQ(info.vocab_size, kVocab);
  EXPECT_EQ(info.max_seq_len, 32);
  EXPECT_EQ(info.bos_id, 1);
  EXPECT_EQ(info.eos_id, 2);
  EXPECT_EQ(info.weights_bytes, 256u);
  EXPECT_STREQ(info.target, "cpu");
  EXPECT_STREQ(info.device, "cpu");
  EXPECT_STREQ(info.dtype, "f32");
  double bw = 0;
  kiln_rt_status_t bwStatus = kiln_rt_artifact_device_bandwidth(a, 1 << 20, 1, &bw);
  EXPECT_EQ(kiln_rt_status_code(bwStatus), KILN_RT_UNIMPLEMENTED);
  kiln_rt_status_free(bwStatus);

  kiln_rt_session_t *s = nullptr;
  ASSERT_EQ(kiln_rt_session_create(a, &s), nullptr);
  EXPECT_EQ(kiln_rt_session_logits(s), nullptr);
  std::vector<int32_t> prompt = {1, 3, 4, 5, 6, 7, 8}; // 7 tokens, chunks of 3
  ASSERT_EQ(kiln_rt_session_prefill(s, prompt.data(), 7), nullptr);
  EXPECT_EQ(kiln_rt_session_position(s), 7);
  EXPECT_EQ(fakeCounter(f.dir, "fake_prefill_calls"), 3);
  EXPECT_EQ(fakeCounter(f.dir, "fake_max_n"), 3);

  kiln_rt_sampler_params_t params = {0.0f, 0, 0.9f, 42};
  kiln_rt_sampler_t *sampler = nullptr;
  ASSERT_EQ(kiln_rt_sampler_create(&params, kVocab, &sampler), nullptr);
  int32_t next = kiln_rt_sampler_sample(sampler, kiln_rt_session_logits(s));
  EXPECT_EQ(next, 9); // the fake model predicts last + 1
  int32_t viaSession = -1;
  ASSERT_EQ(kiln_rt_session_sample(s, sampler, &viaSession), nullptr);
  EXPECT_EQ(viaSession, 9);
  ASSERT_EQ(kiln_rt_session_decode(s, next), nullptr);
  EXPECT_EQ(kiln_rt_sampler_sample(sampler, kiln_rt_session_logits(s)), 10);
  EXPECT_EQ(fakeCounter(f.dir, "fake_decode_calls"), 1);

  // Bad token ids are refused before running anything.
  kiln_rt_status_t st = kiln_rt_session_decode(s, int32_t(kVocab));
  EXPECT_EQ(kiln_rt_status_code(st), KILN_RT_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kiln_rt_status_message(st)),
            "token id 16 (index 0) is outside the vocabulary [0, 16)");
  kiln_rt_status_free(st);
  EXPECT_EQ(kiln_rt_session_position(s), 8);

  // The context ends at 32.
  std::vector<int32_t> many(25, 3);
  st = kiln_rt_session_prefill(s, many.data(), 25);
  EXPECT_EQ(kiln_rt_status_code(st), KILN_RT_OUT_OF_RANGE);
  EXPECT_EQ(std::string(kiln_rt_status_message(st)),
            "25 tokens at position 8 exceed the model's context of 32 tokens");
  kiln_rt_status_free(st);
  ASSERT_EQ(kiln_rt_session_prefill(s, many.data(), 24), nullptr);
  EXPECT_EQ(kiln_rt_session_position(s), 32);

  kiln_rt_session_reset(s);
  EXPECT_EQ(kiln_rt_session_position(s), 0);
  EXPECT_EQ(kiln_rt_session_logits(s), nullptr);
  int32_t none = -1;
  st = kiln_rt_session_sample(s, sampler, &none);
  EXPECT_EQ(kiln_rt_status_code(st), KILN_RT_INVALID_ARGUMENT);
  kiln_rt_status_free(st);
  EXPECT_EQ(none, -1);

  // Tokenizer round trip through the C API.
  int32_t ids[16];
  size_t count = 0;
  ASSERT_EQ(kiln_rt_tokenize(a, "d", 1, 1, ids, 16, &count), nullptr);
  ASSERT_GE(count, 1u);
  EXPECT_EQ(ids[0], 1);
  const char *piece = nullptr;
  size_t len = 0;
  ASSERT_EQ(kiln_rt_detokenize(a, 1, 4, &piece, &len), nullptr);
  EXPECT_EQ(std::string(piece, len), "e");

  kiln_rt_sampler_release(sampler);
  kiln_rt_session_release(s);
  kiln_rt_artifact_release(a);
}

} // namespace

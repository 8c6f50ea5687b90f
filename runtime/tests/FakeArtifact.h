//===- FakeArtifact.h - A small valid artifact for runtime tests -*- C++ -*-===//
//
// A valid artifact in a fresh temporary directory (manifest.json,
// weights.bin, tokenizer.json, model.so = the fake model of FakeModel.cpp,
// model.cpp); tests change its files or manifest, write() it and open() it.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_TESTS_FAKEARTIFACT_H
#define KILN_RUNTIME_TESTS_FAKEARTIFACT_H

#include "kiln_rt/api.h"
#include "kiln_rt/kernel_abi.h"
#include "sign/Signing.h"
#include "TestFiles.h"

#include <nlohmann/json.hpp>

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace kiln::rt::test {

using json = nlohmann::json;
namespace fs = std::filesystem;

inline constexpr int64_t kVocab = 16;

/// A valid artifact in a fresh temporary directory; tests damage it.
class FakeArtifact {
public:
  FakeArtifact() {
    char tmpl[] = "/tmp/kiln_rt_test_XXXXXX";
    dir = mkdtemp(tmpl);
    // weights.bin: 256 bytes, weights[0] = vocab (read by the fake model).
    std::string weights(256, '\0');
    float v = float(kVocab);
    std::memcpy(&weights[0], &v, sizeof(v));
    files["weights.bin"] = weights;
    files["model.so"] = readFile(KILN_RT_FAKE_MODEL);
    files["model.cpp"] = "// fake\n";
    json tok;
    std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
    std::vector<int> types = {2, 3, 3};
    for (int i = 3; i < kVocab; ++i) {
      pieces.push_back(i % 2 ? "\xe2\x96\x81" + std::string(1, char('a' + i))
                             : std::string(1, char('a' + i)));
      types.push_back(1);
    }
    std::vector<std::string> hex;
    std::vector<float> scores;
    for (auto &p : pieces) {
      hex.push_back(hexOf(p));
      scores.push_back(0.0f);
    }
    tok = {{"format", "kiln-tokenizer"}, {"version", 1}, {"model", "spm"},
           {"pieces_hex", hex}, {"scores", scores}, {"types", types},
           {"merges", json::array()}, {"bos_id", 1}, {"eos_id", 2},
           {"unk_id", 0}, {"add_bos", true}, {"add_dummy_prefix", true},
           {"byte_fallback", false}};
    files["tokenizer.json"] = tok.dump();
    manifest = {
        {"format", "kiln-artifact"},
        {"version", 1},
        {"abi_version", KILN_ABI_VERSION},
        {"target", "cpu"},
        {"model",
         {{"name", "fake"}, {"vocab_size", kVocab}, {"max_seq_len", 32}}},
        {"runtime",
         {{"arena_bytes", 1024},
          {"max_prefill_tokens", 3},
          {"entry_points", {{"prefill", "kiln_prefill"}, {"decode", "kiln_decode"}}},
          {"kv_cache",
           {{"layers", 1}, {"kv_heads", 1}, {"head_dim", 2}, {"max_seq", 32},
            {"dtype", "f32"}, {"bytes", 1 * 2 * 32 * 1 * 2 * 4}}}}},
        {"weights",
         {{"file", "weights.bin"},
          {"tensors",
           {{{"name", "a"}, {"offset", 0}, {"bytes", 64}, {"dtype", "f32"},
             {"shape", {16}}},
            {{"name", "b"}, {"offset", 64}, {"bytes", 192}}}}}},
        {"tokenizer", {{"file", "tokenizer.json"}}},
    };
  }
  ~FakeArtifact() { fs::remove_all(dir); }

  /// Writes every file and a manifest whose `files` matches them (sizes,
  /// XXH3-64 and BLAKE2b-256, as kiln-compile writes them).
  void write() {
    json listed = json::object();
    for (auto &[name, bytes] : files) {
      writeFile(fs::path(dir) / name, bytes);
      kiln::sign::Blake2b blake;
      blake.update(bytes.data(), bytes.size());
      listed[name] = {{"bytes", bytes.size()},
                      {"xxh3_64", xxh3Hex(bytes)},
                      {"blake2b_256", blake.hexDigest()}};
    }
    manifest["files"] = listed;
    writeFile(fs::path(dir) / "manifest.json", manifest.dump(2));
  }

  /// Writes manifest.sig: `key`'s signature of manifest.json as it is now.
  void sign(const kiln::sign::SecretKey &key) {
    kiln::sign::Signature sig =
        kiln::sign::signMessage(key, readFile(fs::path(dir) / "manifest.json"));
    writeFile(fs::path(dir) / "manifest.sig",
              std::string(reinterpret_cast<const char *>(sig.data()),
                          sig.size()));
  }

  /// Opens; returns "" on success, else the error message.
  std::string open(uint32_t flags = 0) {
    return openWith(nullptr, flags);
  }

  /// Opens with kiln_rt_artifact_open_with_options; returns "" on success,
  /// else the error message, and the status code in `code` if given.
  std::string openWith(const char *trustedKeys, uint32_t flags = 0,
                       kiln_rt_status_code_t *code = nullptr) {
    kiln_rt_open_options_t options{};
    options.flags = flags;
    options.trusted_keys = trustedKeys;
    kiln_rt_artifact_t *a = nullptr;
    kiln_rt_status_t st =
        kiln_rt_artifact_open_with_options(dir.c_str(), &options, &a);
    std::string msg = kiln_rt_status_message(st);
    if (code)
      *code = kiln_rt_status_code(st);
    kiln_rt_status_free(st);
    kiln_rt_artifact_release(a);
    return msg;
  }

  std::string dir;
  std::map<std::string, std::string> files;
  json manifest;
};

} // namespace kiln::rt::test

#endif // KILN_RUNTIME_TESTS_FAKEARTIFACT_H

//===- ArtifactTrustTest.cpp - Artifacts that cannot crash the runtime ----===//
//
// Through the C API (kiln_rt_artifact_open[_with_options]): files inside an
// artifact are never followed through symbolic links nor read when they are
// FIFOs or directories; a weights.bin shorter than what model.so addresses
// (kiln_plan_info weight extents) is refused; signatures (docs/security.md):
// a signed artifact opens with the right key, and unsigned, altered,
// wrongly-signed or truncated-signature artifacts are refused before
// model.so is dlopen()ed, which the marker model (FakeModel.cpp built with a
// constructor that creates $KILN_RT_TEST_MARKER) proves.
//
//===----------------------------------------------------------------------===//
#include "FakeArtifact.h"
#include "sign/Signing.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace {

using kiln::rt::test::FakeArtifact;
using kiln::rt::test::readFile;
using kiln::rt::test::writeFile;
namespace fs = std::filesystem;
using json = nlohmann::json;

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

TEST(ArtifactFiles, SymlinksAreRefused) {
  for (const char *name :
       {"manifest.json", "weights.bin", "model.so", "tokenizer.json"}) {
    SCOPED_TRACE(name);
    FakeArtifact f;
    f.write();
    // The link points at an identical copy: only the link itself is wrong.
    fs::path real = fs::path(f.dir).parent_path() /
                    (fs::path(f.dir).filename().string() + "-" + name);
    fs::copy_file(fs::path(f.dir) / name, real);
    fs::remove(fs::path(f.dir) / name);
    fs::create_symlink(real, fs::path(f.dir) / name);
    EXPECT_EQ(f.open(), f.dir + "/" + name +
                            ": is a symbolic link; files inside an artifact "
                            "must be regular files (links are not followed)");
    fs::remove(real);
  }
}

TEST(ArtifactFiles, FifoManifestDoesNotHang) {
  FakeArtifact f;
  f.write();
  fs::remove(fs::path(f.dir) / "manifest.json");
  ASSERT_EQ(mkfifo((fs::path(f.dir) / "manifest.json").c_str(), 0600), 0);
  EXPECT_EQ(f.open(), f.dir + "/manifest.json: a FIFO, not a regular file; "
                              "files inside an artifact must be regular files");
}

TEST(ArtifactFiles, FifoOrDirectoryListedFileIsRefused) {
  {
    FakeArtifact f;
    f.write();
    fs::remove(fs::path(f.dir) / "weights.bin");
    ASSERT_EQ(mkfifo((fs::path(f.dir) / "weights.bin").c_str(), 0600), 0);
    EXPECT_EQ(f.open(), f.dir + "/weights.bin: a FIFO, not a regular file; "
                                "files inside an artifact must be regular "
                                "files");
  }
  {
    FakeArtifact f;
    f.write();
    fs::remove(fs::path(f.dir) / "tokenizer.json");
    fs::create_directory(fs::path(f.dir) / "tokenizer.json");
    EXPECT_TRUE(contains(f.open(), f.dir + "/tokenizer.json: a directory, "
                                           "not a regular file"))
        << f.open();
  }
}

// weights.bin cut short with a manifest that agrees with it (sizes, hashes,
// tensor table): model.so's kiln_plan_info still says prefill reads 256
// bytes, so the artifact is refused instead of reading past the mapping.
TEST(ArtifactFiles, WeightExtentBeyondWeightsFile) {
  FakeArtifact f;
  f.files["weights.bin"].resize(128);
  f.manifest["weights"]["tensors"] = {{{"name", "a"},
                                       {"offset", 0},
                                       {"bytes", 64},
                                       {"dtype", "f32"},
                                       {"shape", {16}}}};
  f.write();
  kiln_rt_status_code_t code = KILN_RT_OK;
  EXPECT_EQ(f.openWith(nullptr, 0, &code),
            f.dir + "/weights.bin: 128 bytes, but model.so's prefill entry "
                    "point reads weights up to byte 256 (weights file cut "
                    "short or mismatched artifact; recompile it)");
  EXPECT_EQ(code, KILN_RT_DATA_LOSS);
}

// A model.so built against the plan_info.h of kernel ABI 3 (no weight
// extents) behind a manifest edited to claim ABI 4 is refused, not trusted.
TEST(ArtifactFiles, PlanInfoWithoutWeightExtents) {
  FakeArtifact f;
  f.files["model.so"] = readFile(KILN_RT_OLD_PLAN_MODEL);
  f.write();
  kiln_rt_status_code_t code = KILN_RT_OK;
  EXPECT_EQ(f.openWith(nullptr, 0, &code),
            f.dir + "/model.so: kiln_plan_info reports no weight extents "
                    "(built against an older plan_info.h; recompile the "
                    "artifact)");
  EXPECT_EQ(code, KILN_RT_UNIMPLEMENTED);
}

/// A key pair and a directory holding its public key, for one test.
struct TestKey {
  TestKey() {
    std::string error;
    EXPECT_TRUE(kiln::sign::generateKey(key, error)) << error;
    char tmpl[] = "/tmp/kiln_rt_keys_XXXXXX";
    dir = mkdtemp(tmpl);
    writeFile(fs::path(dir) / "test.pub",
              kiln::sign::formatPublicKey(key.publicKey));
  }
  ~TestKey() { fs::remove_all(dir); }
  kiln::sign::SecretKey key;
  std::string dir;
};

/// A signed fake artifact whose model.so is the marker model; `marker` is
/// where its constructor leaves a file if it is ever loaded.
struct SignedMarkerArtifact {
  SignedMarkerArtifact(const TestKey &signer) {
    f.files["model.so"] = readFile(KILN_RT_MARKER_MODEL);
    marker = f.dir + "-loaded";
    setenv("KILN_RT_TEST_MARKER", marker.c_str(), 1);
    f.write();
    f.sign(signer.key);
  }
  ~SignedMarkerArtifact() {
    unsetenv("KILN_RT_TEST_MARKER");
    fs::remove(marker);
  }
  bool loaded() const { return fs::exists(marker); }
  FakeArtifact f;
  std::string marker;
};

TEST(ArtifactSignature, SignedOpensWithTheRightKey) {
  TestKey k;
  SignedMarkerArtifact s(k);
  EXPECT_EQ(s.f.openWith(k.dir.c_str()), "");
  EXPECT_TRUE(s.loaded()) << "the marker model should prove it was loaded";
  // One key file instead of a directory works too.
  EXPECT_EQ(s.f.openWith((k.dir + "/test.pub").c_str()), "");
}

TEST(ArtifactSignature, UnsignedIsRefusedBeforeLoading) {
  TestKey k;
  SignedMarkerArtifact s(k);
  fs::remove(fs::path(s.f.dir) / "manifest.sig");
  kiln_rt_status_code_t code = KILN_RT_OK;
  EXPECT_EQ(s.f.openWith(k.dir.c_str(), 0, &code),
            s.f.dir + "/manifest.sig: missing: the artifact is not signed, "
                      "and a signature by a key in " +
                k.dir + " is required (sign it with kiln-compile --sign-key)");
  EXPECT_EQ(code, KILN_RT_PERMISSION_DENIED);
  EXPECT_FALSE(s.loaded());
  // Without trusted keys the same artifact opens (signatures are optional).
  EXPECT_EQ(s.f.open(), "");
  EXPECT_TRUE(s.loaded());
}

TEST(ArtifactSignature, WrongKeyIsRefusedBeforeLoading) {
  TestKey k, other;
  SignedMarkerArtifact s(k);
  kiln_rt_status_code_t code = KILN_RT_OK;
  EXPECT_EQ(s.f.openWith(other.dir.c_str(), 0, &code),
            s.f.dir + "/manifest.sig: not a valid signature of manifest.json "
                      "by any of the 1 trusted key in " +
                other.dir +
                " (signed with another key, or manifest.json was changed "
                "after signing)");
  EXPECT_EQ(code, KILN_RT_PERMISSION_DENIED);
  EXPECT_FALSE(s.loaded());
}

TEST(ArtifactSignature, TruncatedSignatureIsRefused) {
  TestKey k;
  SignedMarkerArtifact s(k);
  fs::resize_file(fs::path(s.f.dir) / "manifest.sig", 63);
  EXPECT_EQ(s.f.openWith(k.dir.c_str()),
            s.f.dir + "/manifest.sig: 63 bytes, expected a 64-byte Ed25519 "
                      "signature of manifest.json (truncated or not a "
                      "signature)");
  EXPECT_FALSE(s.loaded());
}

TEST(ArtifactSignature, AlteredFilesAreRefusedBeforeLoading) {
  TestKey k;
  for (const char *name : {"weights.bin", "model.so", "tokenizer.json"}) {
    SCOPED_TRACE(name);
    // One byte changed and the manifest re-hashed to match: the signature
    // no longer verifies.
    SignedMarkerArtifact s(k);
    std::string bytes = s.f.files[name];
    bytes[bytes.size() - 1] ^= 1;
    s.f.files[name] = bytes;
    s.f.write(); // re-hashed, not re-signed
    EXPECT_TRUE(contains(s.f.openWith(k.dir.c_str()),
                         "manifest.sig: not a valid signature"))
        << s.f.openWith(k.dir.c_str());
    // One byte changed, manifest untouched: the hashes catch it.
    writeFile(fs::path(s.f.dir) / "manifest.json", s.f.manifest.dump(2));
    s.f.sign(k.key);
    s.f.files[name][0] ^= 1;
    writeFile(fs::path(s.f.dir) / name, s.f.files[name]);
    EXPECT_TRUE(contains(s.f.openWith(k.dir.c_str()),
                         s.f.dir + "/" + name + ": XXH3-64 is "))
        << s.f.openWith(k.dir.c_str());
    EXPECT_FALSE(s.loaded());
  }
  {
    // One byte of manifest.json itself.
    SignedMarkerArtifact s(k);
    std::string m = readFile(fs::path(s.f.dir) / "manifest.json");
    m[m.find("\"fake\"") + 1] = 'F';
    writeFile(fs::path(s.f.dir) / "manifest.json", m);
    EXPECT_TRUE(contains(s.f.openWith(k.dir.c_str()),
                         "manifest.sig: not a valid signature"));
    EXPECT_FALSE(s.loaded());
  }
}

// The signature covers contents through BLAKE2b-256, not XXH3-64 (which is
// not collision resistant): a signed manifest whose BLAKE2b does not match
// a file is refused even though its XXH3 does.
TEST(ArtifactSignature, Blake2bIsChecked) {
  TestKey k;
  SignedMarkerArtifact s(k);
  std::string good = s.f.manifest["files"]["weights.bin"]["blake2b_256"];
  std::string bad = good;
  bad[0] = bad[0] == '0' ? '1' : '0';
  s.f.manifest["files"]["weights.bin"]["blake2b_256"] = bad;
  writeFile(fs::path(s.f.dir) / "manifest.json", s.f.manifest.dump(2));
  s.f.sign(k.key);
  EXPECT_EQ(s.f.openWith(k.dir.c_str()),
            s.f.dir + "/weights.bin: BLAKE2b-256 is " + good +
                ", manifest says " + bad + " (altered or corrupted artifact)");
  EXPECT_FALSE(s.loaded());
  // Unsigned opens check XXH3 only, as before.
  EXPECT_EQ(s.f.open(), "");
}

TEST(ArtifactSignature, SignedManifestNeedsBlake2b) {
  TestKey k;
  SignedMarkerArtifact s(k);
  s.f.manifest["files"]["model.cpp"].erase("blake2b_256");
  writeFile(fs::path(s.f.dir) / "manifest.json", s.f.manifest.dump(2));
  s.f.sign(k.key);
  kiln_rt_status_code_t code = KILN_RT_OK;
  EXPECT_TRUE(contains(s.f.openWith(k.dir.c_str(), 0, &code),
                       "manifest.json: files[\"model.cpp\"] has no "
                       "blake2b_256"));
  EXPECT_EQ(code, KILN_RT_PERMISSION_DENIED);
  EXPECT_FALSE(s.loaded());
}

TEST(ArtifactSignature, BadOptionsAndKeys) {
  TestKey k;
  FakeArtifact f;
  f.write();
  f.sign(k.key);
  kiln_rt_status_code_t code = KILN_RT_OK;
  EXPECT_TRUE(contains(
      f.openWith(k.dir.c_str(), KILN_RT_OPEN_SKIP_CHECKSUMS, &code),
      "KILN_RT_OPEN_SKIP_CHECKSUMS cannot be combined with trusted_keys"));
  EXPECT_EQ(code, KILN_RT_INVALID_ARGUMENT);
  // A directory without keys, a malformed key, a secret key as public key.
  char tmpl[] = "/tmp/kiln_rt_nokeys_XXXXXX";
  std::string empty = mkdtemp(tmpl);
  EXPECT_EQ(f.openWith(empty.c_str(), 0, &code),
            empty + ": no trusted public keys (*.pub files written by "
                    "kiln-keygen) in this directory");
  EXPECT_EQ(code, KILN_RT_INVALID_ARGUMENT);
  writeFile(fs::path(empty) / "bad.pub", "kiln-ed25519-public-key 12ab\n");
  EXPECT_TRUE(contains(f.openWith(empty.c_str()),
                       "bad.pub: the key must be 64 hex digits"));
  writeFile(fs::path(empty) / "bad.pub", kiln::sign::formatSecretKey(k.key));
  EXPECT_TRUE(contains(f.openWith(empty.c_str()),
                       "but found a kiln-ed25519-secret-key (wrong key file?)"));
  fs::remove_all(empty);
  // Several keys: any one of them may have signed.
  TestKey other;
  fs::copy_file(fs::path(other.dir) / "test.pub", fs::path(k.dir) / "zz.pub");
  EXPECT_EQ(f.openWith(k.dir.c_str()), "");
}

TEST(Signing, KeyFilesRoundTrip) {
  kiln::sign::SecretKey key, parsed;
  std::string error;
  ASSERT_TRUE(kiln::sign::generateKey(key, error)) << error;
  std::string secret = kiln::sign::formatSecretKey(key);
  EXPECT_EQ(secret.rfind("kiln-ed25519-secret-key ", 0), 0u);
  EXPECT_EQ(secret.size(), std::string("kiln-ed25519-secret-key ").size() + 65);
  ASSERT_TRUE(kiln::sign::parseSecretKey(secret, "K", parsed, error)) << error;
  EXPECT_EQ(parsed.publicKey, key.publicKey);
  kiln::sign::PublicKey pub;
  ASSERT_TRUE(kiln::sign::parsePublicKey(
      kiln::sign::formatPublicKey(key.publicKey), "P", pub, error))
      << error;
  EXPECT_EQ(pub, key.publicKey);
  kiln::sign::Signature sig = kiln::sign::signMessage(parsed, "hello");
  std::string sigText(reinterpret_cast<const char *>(sig.data()), sig.size());
  EXPECT_TRUE(kiln::sign::verifyMessage(pub, "hello", sigText));
  EXPECT_FALSE(kiln::sign::verifyMessage(pub, "hellp", sigText));
  EXPECT_FALSE(kiln::sign::verifyMessage(pub, "hello", sigText.substr(1)));

  // RFC 8032 section 7.1, test 1: the seed determines the public key and
  // the signature of the empty message.
  std::array<uint8_t, 32> seed;
  const char *seedHex =
      "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
  for (int i = 0; i < 32; ++i)
    seed[i] = uint8_t(std::stoi(std::string(seedHex + 2 * i, 2), nullptr, 16));
  kiln::sign::SecretKey rfc;
  kiln::sign::keyFromSeed(seed, rfc);
  EXPECT_EQ(kiln::sign::toHex(rfc.publicKey.data(), 32),
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
  kiln::sign::Signature empty = kiln::sign::signMessage(rfc, "");
  EXPECT_EQ(kiln::sign::toHex(empty.data(), 64),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
            "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b");

  // BLAKE2b-256 of "abc" (RFC 7693 appendix A gives BLAKE2b-512; this is
  // the 32-byte-output variant, as Python's hashlib.blake2b(digest_size=32)).
  kiln::sign::Blake2b b;
  b.update("abc", 3);
  EXPECT_EQ(b.hexDigest(),
            "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319");
}

TEST(Signing, SecretKeyPermissions) {
  kiln::sign::SecretKey key, parsed;
  std::string error;
  ASSERT_TRUE(kiln::sign::generateKey(key, error));
  char tmpl[] = "/tmp/kiln_rt_key_XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string path = dir + "/k";
  writeFile(path, kiln::sign::formatSecretKey(key));
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  EXPECT_FALSE(kiln::sign::readSecretKeyFile(path, parsed, error));
  EXPECT_EQ(error, path + ": permissions 0644 let others read this secret "
                          "key; it must be 0600 (chmod 600 " +
                       path + ")");
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  EXPECT_TRUE(kiln::sign::readSecretKeyFile(path, parsed, error)) << error;
  EXPECT_EQ(parsed.publicKey, key.publicKey);
  fs::remove_all(dir);
}

} // namespace

//===- Signing.h - Ed25519 artifact signatures and BLAKE2b hashes -*- C++ -*-===//
//
// The cryptography of artifact signing (docs/security.md), on libsodium:
//
//  * Keys are Ed25519 (RFC 8032). A key file is one line of text:
//      public: "kiln-ed25519-public-key <64 hex digits: the 32-byte key>"
//      secret: "kiln-ed25519-secret-key <64 hex digits: the 32-byte seed>"
//    The secret key file must not be readable by group or others (0600).
//  * manifest.sig is the 64-byte detached Ed25519 signature of manifest.json's
//    bytes (libsodium crypto_sign_detached; any RFC 8032 verifier accepts it).
//  * Each file a signed manifest lists carries "blake2b_256", the unkeyed
//    32-byte BLAKE2b of its contents (libsodium crypto_generichash), which
//    binds the signature to the files' contents.
//
// Shared by the runtime (verification), kiln-compile (signing) and
// kiln-keygen; no LLVM. Fallible calls return false and set `error` to a
// message naming the file and what was expected.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_SIGN_SIGNING_H
#define KILN_RUNTIME_SIGN_SIGNING_H

#include <sodium.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::sign {

constexpr size_t kPublicKeyBytes = 32;
constexpr size_t kSeedBytes = 32;
constexpr size_t kSignatureBytes = 64;
constexpr size_t kBlake2bBytes = 32;

/// Name of the detached signature file inside an artifact.
inline constexpr const char *kSignatureFile = "manifest.sig";
/// First word of a public / secret key file.
inline constexpr const char *kPublicKeyTag = "kiln-ed25519-public-key";
inline constexpr const char *kSecretKeyTag = "kiln-ed25519-secret-key";

using PublicKey = std::array<uint8_t, kPublicKeyBytes>;
using Signature = std::array<uint8_t, kSignatureBytes>;

/// A signing key: the RFC 8032 seed and the key pair libsodium derives.
struct SecretKey {
  std::array<uint8_t, kSeedBytes> seed{};
  std::array<uint8_t, 64> expanded{}; ///< libsodium's secret key (seed || pk)
  PublicKey publicKey{};
  ~SecretKey();
};

/// A public key trusted to sign artifacts, and the file it came from.
struct TrustedKey {
  PublicKey key{};
  std::string path;
};

/// Initializes libsodium (idempotent, thread-safe). False if it cannot.
bool initialize(std::string &error);

/// Lowercase hex of `bytes`.
std::string toHex(const uint8_t *bytes, size_t n);

/// A fresh random key pair.
bool generateKey(SecretKey &out, std::string &error);
/// The key pair of a 32-byte seed.
void keyFromSeed(const std::array<uint8_t, kSeedBytes> &seed, SecretKey &out);

/// Key file text (one line ending in '\n').
std::string formatPublicKey(const PublicKey &key);
std::string formatSecretKey(const SecretKey &key);

/// Parses key file text; `where` prefixes messages.
bool parsePublicKey(std::string_view text, const std::string &where,
                    PublicKey &out, std::string &error);
bool parseSecretKey(std::string_view text, const std::string &where,
                    SecretKey &out, std::string &error);

/// Reads a public key file (a regular file of at most 4 KiB).
bool readPublicKeyFile(const std::string &path, PublicKey &out,
                       std::string &error);
/// Reads a secret key file; refuses one that group or others may read.
bool readSecretKeyFile(const std::string &path, SecretKey &out,
                       std::string &error);

/// The keys of `path`: every regular "*.pub" file in it if it is a
/// directory (at least one), else the one public key file it names.
bool loadTrustedKeys(const std::string &path, std::vector<TrustedKey> &out,
                     std::string &error);

/// Detached Ed25519 signature of `message`.
Signature signMessage(const SecretKey &key, std::string_view message);
/// True if `signature` (kSignatureBytes) is `key`'s signature of `message`.
bool verifyMessage(const PublicKey &key, std::string_view message,
                   std::string_view signature);

/// Incremental unkeyed BLAKE2b-256 (libsodium crypto_generichash).
class Blake2b {
public:
  Blake2b();
  ~Blake2b();
  Blake2b(const Blake2b &) = delete;
  Blake2b &operator=(const Blake2b &) = delete;
  void update(const void *data, size_t n);
  /// 64 lowercase hex digits; call once.
  std::string hexDigest();

private:
  crypto_generichash_state state_;
};

/// True if `s` is `n` lowercase hex digits.
bool isLowerHex(std::string_view s, size_t n);

} // namespace kiln::sign

#endif // KILN_RUNTIME_SIGN_SIGNING_H

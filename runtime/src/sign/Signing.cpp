//===- Signing.cpp - Ed25519 artifact signatures and BLAKE2b hashes -------===//
//
// See Signing.h and docs/security.md.
//
//===----------------------------------------------------------------------===//
#include "sign/Signing.h"

#include "base/RegularFile.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kiln::sign {

/// Key files are one short line; anything longer is not a key file.
static constexpr off_t kMaxKeyFileBytes = 4096;

SecretKey::~SecretKey() {
  sodium_memzero(seed.data(), seed.size());
  sodium_memzero(expanded.data(), expanded.size());
}

/// sodium_init: idempotent and thread-safe; false only if libsodium
/// cannot run at all (no randomness source).
static bool sodiumReady() { return sodium_init() >= 0; }

bool initialize(std::string &error) {
  if (!sodiumReady()) {
    error = "cannot initialize libsodium";
    return false;
  }
  return true;
}

std::string toHex(const uint8_t *bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}

bool isLowerHex(std::string_view s, size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

/// Decodes exactly out.size() bytes of hex (either case); false otherwise.
template <size_t N>
static bool fromHex(std::string_view hex, std::array<uint8_t, N> &out) {
  if (hex.size() != 2 * N)
    return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
      return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < N; ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    out[i] = uint8_t(hi * 16 + lo);
  }
  return true;
}

void keyFromSeed(const std::array<uint8_t, kSeedBytes> &seed, SecretKey &out) {
  (void)sodiumReady();
  out.seed = seed;
  crypto_sign_seed_keypair(out.publicKey.data(), out.expanded.data(),
                           seed.data());
}

bool generateKey(SecretKey &out, std::string &error) {
  if (!initialize(error))
    return false;
  std::array<uint8_t, kSeedBytes> seed;
  randombytes_buf(seed.data(), seed.size());
  keyFromSeed(seed, out);
  sodium_memzero(seed.data(), seed.size());
  return true;
}

std::string formatPublicKey(const PublicKey &key) {
  return std::string(kPublicKeyTag) + " " + toHex(key.data(), key.size()) +
         "\n";
}

std::string formatSecretKey(const SecretKey &key) {
  return std::string(kSecretKeyTag) + " " +
         toHex(key.seed.data(), key.seed.size()) + "\n";
}

/// Splits "TAG HEX" (surrounding whitespace allowed) and checks the tag.
static bool splitKeyLine(std::string_view text, const char *tag,
                         const std::string &where, std::string_view &hex,
                         std::string &error) {
  auto isSpace = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
  };
  while (!text.empty() && isSpace(text.front()))
    text.remove_prefix(1);
  while (!text.empty() && isSpace(text.back()))
    text.remove_suffix(1);
  size_t space = text.find(' ');
  std::string_view word = text.substr(0, space);
  if (word != tag) {
    error = where + ": expected a line \"" + std::string(tag) +
            " <64 hex digits>\"" +
            (word == kPublicKeyTag || word == kSecretKeyTag
                 ? " but found a " + std::string(word) + " (wrong key file?)"
                 : std::string());
    return false;
  }
  hex = space == std::string_view::npos ? std::string_view()
                                        : text.substr(space + 1);
  return true;
}

bool parsePublicKey(std::string_view text, const std::string &where,
                    PublicKey &out, std::string &error) {
  std::string_view hex;
  if (!splitKeyLine(text, kPublicKeyTag, where, hex, error))
    return false;
  if (!fromHex(hex, out)) {
    error = where + ": the key must be 64 hex digits (32 bytes), found \"" +
            std::string(hex.substr(0, 80)) + "\"";
    return false;
  }
  return true;
}

bool parseSecretKey(std::string_view text, const std::string &where,
                    SecretKey &out, std::string &error) {
  std::string_view hex;
  if (!splitKeyLine(text, kSecretKeyTag, where, hex, error))
    return false;
  std::array<uint8_t, kSeedBytes> seed;
  if (!fromHex(hex, seed)) {
    error = where + ": the key must be 64 hex digits (a 32-byte Ed25519 "
                    "seed)";
    return false;
  }
  if (!initialize(error))
    return false;
  keyFromSeed(seed, out);
  sodium_memzero(seed.data(), seed.size());
  return true;
}

/// Reads a small regular file (never a FIFO or device: base/RegularFile).
/// `mode` receives its st_mode.
static bool readKeyFile(const std::string &path, std::string &out,
                        mode_t &mode, std::string &error) {
  return rt::readRegularFile(path, kMaxKeyFileBytes, "a key file", out, error,
                             &mode);
}

bool readPublicKeyFile(const std::string &path, PublicKey &out,
                       std::string &error) {
  std::string text;
  mode_t mode;
  return readKeyFile(path, text, mode, error) &&
         parsePublicKey(text, path, out, error);
}

bool readSecretKeyFile(const std::string &path, SecretKey &out,
                       std::string &error) {
  std::string text;
  mode_t mode;
  if (!readKeyFile(path, text, mode, error))
    return false;
  // The kind of file first (a public key given by mistake is not a
  // permission problem), then who may read it.
  bool ok = parseSecretKey(text, path, out, error);
  if (ok && (mode & (S_IRWXG | S_IRWXO))) {
    char octal[8];
    std::snprintf(octal, sizeof(octal), "%04o", unsigned(mode & 07777));
    error = path + ": permissions " + octal +
            " let others read this secret key; it must be 0600 (chmod 600 " +
            path + ")";
    ok = false;
  }
  sodium_memzero(text.data(), text.size());
  return ok;
}

bool loadTrustedKeys(const std::string &path, std::vector<TrustedKey> &out,
                     std::string &error) {
  out.clear();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    error = path + ": cannot open trusted keys: " + std::strerror(errno);
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    TrustedKey k;
    k.path = path;
    if (!readPublicKeyFile(path, k.key, error))
      return false;
    out.push_back(std::move(k));
    return true;
  }
  DIR *dir = ::opendir(path.c_str());
  if (!dir) {
    error = path + ": cannot list trusted keys: " + std::strerror(errno);
    return false;
  }
  std::vector<std::string> names;
  while (struct dirent *e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".pub") == 0)
      names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  for (const std::string &name : names) {
    TrustedKey k;
    k.path = path + "/" + name;
    if (!readPublicKeyFile(k.path, k.key, error))
      return false;
    out.push_back(std::move(k));
  }
  if (out.empty()) {
    error = path + ": no trusted public keys (*.pub files written by "
                   "kiln-keygen) in this directory";
    return false;
  }
  return true;
}

Signature signMessage(const SecretKey &key, std::string_view message) {
  Signature sig{};
  crypto_sign_detached(sig.data(), nullptr,
                       reinterpret_cast<const unsigned char *>(message.data()),
                       message.size(), key.expanded.data());
  return sig;
}

bool verifyMessage(const PublicKey &key, std::string_view message,
                   std::string_view signature) {
  if (signature.size() != kSignatureBytes)
    return false;
  if (!sodiumReady())
    return false;
  return crypto_sign_verify_detached(
             reinterpret_cast<const unsigned char *>(signature.data()),
             reinterpret_cast<const unsigned char *>(message.data()),
             message.size(), key.data()) == 0;
}

Blake2b::Blake2b() {
  (void)sodiumReady(); // BLAKE2b needs no randomness
  crypto_generichash_init(&state_, nullptr, 0, kBlake2bBytes);
}

Blake2b::~Blake2b() { sodium_memzero(&state_, sizeof(state_)); }

void Blake2b::update(const void *data, size_t n) {
  crypto_generichash_update(&state_, static_cast<const unsigned char *>(data),
                            n);
}

std::string Blake2b::hexDigest() {
  uint8_t digest[kBlake2bBytes];
  crypto_generichash_final(&state_, digest, sizeof(digest));
  return toHex(digest, sizeof(digest));
}

} // namespace kiln::sign

//===- TestFiles.h - File helpers shared by the runtime tests ----*- C++ -*-===//
//
// Reading and writing whole files and the hex encodings artifacts use
// (XXH3-64 checksums, tokenizer pieces), for tests that build artifacts.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_TESTS_TESTFILES_H
#define KILN_RUNTIME_TESTS_TESTFILES_H

#include <xxhash.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kiln::rt::test {

inline std::string readFile(const std::filesystem::path &p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void writeFile(const std::filesystem::path &p, const std::string &bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

/// XXH3-64 of `bytes` as 16 lowercase hex digits (manifest files.*.xxh3_64).
inline std::string xxh3Hex(const std::string &bytes) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                (unsigned long long)XXH3_64bits(bytes.data(), bytes.size()));
  return hex;
}

/// Lowercase hex of every byte (tokenizer.json pieces_hex).
inline std::string hexOf(const std::string &s) {
  std::string out;
  char b[3];
  for (unsigned char c : s) {
    std::snprintf(b, sizeof(b), "%02x", c);
    out += b;
  }
  return out;
}

} // namespace kiln::rt::test

#endif // KILN_RUNTIME_TESTS_TESTFILES_H

//===- ImportTestUtils.cpp - Helpers for the importer unit tests ----------===//

#include "ImportTestUtils.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

using namespace llvm;

namespace kiln::test {

std::string modelPath(StringRef rel) {
  SmallString<256> p(KILN_SHARED_DIR);
  sys::path::append(p, "models", rel);
  return std::string(p);
}

bool haveModels() {
  return sys::fs::exists(modelPath("stories260K/stories260K.bin"));
}

TempDir::TempDir() {
  SmallString<128> p;
  std::error_code ec = sys::fs::createUniqueDirectory("kiln-import-test", p);
  EXPECT_FALSE(ec) << ec.message();
  dir = std::string(p);
}

TempDir::~TempDir() { sys::fs::remove_directories(dir); }

std::string TempDir::path(StringRef name) const {
  SmallString<256> p(dir);
  sys::path::append(p, name);
  return std::string(p);
}

std::string readFileBytes(StringRef path) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> buf =
      MemoryBuffer::getFile(path, false, false);
  EXPECT_TRUE(bool(buf)) << path.str();
  if (!buf)
    return "";
  return (*buf)->getBuffer().str();
}

void writeFileBytes(StringRef path, StringRef bytes) {
  std::error_code ec;
  raw_fd_ostream os(path, ec);
  ASSERT_FALSE(ec) << ec.message();
  os << bytes;
}

std::string errorMessage(Error e) {
  if (!e)
    return "";
  return toString(std::move(e));
}

std::vector<float> materialize(const mlir::kiln::WeightDesc &weight) {
  uint64_t n = 1;
  for (int64_t d : weight.source.shape)
    n *= d;
  std::vector<float> out(n);
  // A tensor kept in its GGML blocks is compared as what the blocks decode
  // to (the kernels' view), without the keep step.
  mlir::kiln::WeightDesc w = weight;
  if (!w.transforms.empty() &&
      w.transforms.front().kind == mlir::kiln::WeightTransform::Kind::Repack &&
      w.transforms.front().part ==
          mlir::kiln::WeightTransform::QuantPart::Blocks)
    w.transforms.erase(w.transforms.begin());
  Error e = mlir::kiln::materializeWeight(w, out);
  EXPECT_FALSE(bool(e)) << w.name << ": " << errorMessage(std::move(e));
  return out;
}

static std::vector<int> encodeImpl(const mlir::kiln::TokenizerDesc &tok,
                                   StringRef text, bool byRank);

std::vector<int> encodeSpm(const mlir::kiln::TokenizerDesc &tok,
                           StringRef text) {
  return encodeImpl(tok, text, /*byRank=*/false);
}

std::vector<int> encodeBpe(const mlir::kiln::TokenizerDesc &tok,
                           StringRef text) {
  return encodeImpl(tok, text, /*byRank=*/true);
}

static std::vector<int> encodeImpl(const mlir::kiln::TokenizerDesc &tok,
                                   StringRef text, bool byRank) {
  StringMap<int> ranks;
  for (size_t i = 0; i < tok.merges.size(); ++i)
    ranks.try_emplace(tok.merges[i], static_cast<int>(i));
  StringMap<int> ids;
  for (size_t i = 0; i < tok.pieces.size(); ++i)
    ids.try_emplace(tok.pieces[i], static_cast<int>(i));
  std::string norm;
  if (tok.addDummyPrefix && !text.empty())
    norm += "\xe2\x96\x81";
  for (char c : text) {
    if (c == ' ')
      norm += "\xe2\x96\x81";
    else
      norm += c;
  }
  std::vector<std::string> syms;
  std::vector<int> out;
  if (tok.addBos)
    out.push_back(tok.bosId);
  std::vector<int> symIds;
  for (size_t i = 0; i < norm.size();) {
    size_t len = 1;
    unsigned char c = norm[i];
    if (c >= 0xF0)
      len = 4;
    else if (c >= 0xE0)
      len = 3;
    else if (c >= 0xC0)
      len = 2;
    std::string cp = norm.substr(i, len);
    auto it = ids.find(cp);
    if (it != ids.end()) {
      syms.push_back(cp);
      symIds.push_back(it->second);
    } else {
      for (char b : cp) {
        std::string piece;
        raw_string_ostream(piece)
            << "<0x" << format_hex_no_prefix((unsigned char)b, 2, true) << ">";
        auto bi = ids.find(piece);
        syms.push_back(piece);
        symIds.push_back(bi == ids.end() ? tok.unkId : bi->second);
      }
    }
    i += len;
  }
  while (true) {
    float best = -1e30f;
    int bestIdx = -1, bestId = -1;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      auto it = ids.find(syms[i] + syms[i + 1]);
      if (it == ids.end())
        continue;
      float score = tok.scores[it->second];
      if (byRank) {
        auto r = ranks.find(syms[i] + " " + syms[i + 1]);
        if (r == ranks.end())
          continue;
        score = -static_cast<float>(r->second);
      }
      if (score > best) {
        best = score;
        bestIdx = static_cast<int>(i);
        bestId = it->second;
      }
    }
    if (bestIdx < 0)
      break;
    syms[bestIdx] += syms[bestIdx + 1];
    symIds[bestIdx] = bestId;
    syms.erase(syms.begin() + bestIdx + 1);
    symIds.erase(symIds.begin() + bestIdx + 1);
  }
  out.insert(out.end(), symIds.begin(), symIds.end());
  return out;
}

} // namespace kiln::test

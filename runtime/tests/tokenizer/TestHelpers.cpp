//===- TestHelpers.cpp - Reading shared model files for tokenizer tests ---===//

#include "TestHelpers.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

namespace kiln::rt::test {

static const char kSpaceMarker[] = "\xe2\x96\x81";

std::string modelPath(const std::string &relative) {
  return std::string(KILN_SHARED_DIR) + "/models/" + relative;
}

std::string readFile(const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    ADD_FAILURE() << "cannot open " << path;
    return {};
  }
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

nlohmann::json readJson(const std::string &path) {
  return nlohmann::json::parse(readFile(path));
}

static bool isBytePiece(const std::string &p) {
  return p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>' &&
         std::isxdigit(static_cast<unsigned char>(p[3])) &&
         std::isxdigit(static_cast<unsigned char>(p[4]));
}

TokenizerConfig readLlama2cTokenizer(const std::string &path) {
  std::string data = readFile(path);
  TokenizerConfig config;
  size_t pos = 4; // int32 max_token_length
  while (pos + 8 <= data.size()) {
    float score;
    int32_t len;
    std::memcpy(&score, data.data() + pos, 4);
    std::memcpy(&len, data.data() + pos + 4, 4);
    pos += 8;
    if (len < 0 || pos + len > data.size()) {
      ADD_FAILURE() << path << ": truncated at id " << config.pieces.size();
      break;
    }
    std::string raw = data.substr(pos, len), piece;
    pos += len;
    for (char c : raw) {
      if (c == ' ')
        piece += kSpaceMarker;
      else
        piece.push_back(c);
    }
    auto id = static_cast<int32_t>(config.pieces.size());
    int32_t type = 1;
    if (id == 0) {
      type = 2;
    } else if (id == 1 || id == 2) {
      piece = id == 1 ? "<s>" : "</s>";
      type = 3;
    } else if (isBytePiece(piece)) {
      type = 6;
    }
    config.pieces.push_back(piece);
    config.scores.push_back(score);
    config.types.push_back(type);
  }
  EXPECT_EQ(pos, data.size()) << path;
  config.model = TokenizerModel::Spm;
  config.bosId = 1;
  config.eosId = 2;
  config.unkId = 0;
  return config;
}

TokenizerConfig readHfBpeTokenizer(const std::string &path, int32_t bosId,
                                   int32_t eosId) {
  nlohmann::json root = readJson(path);
  const nlohmann::json &model = root.at("model");
  std::map<int32_t, std::string> byId;
  for (auto &[piece, id] : model.at("vocab").items())
    byId[id.get<int32_t>()] = piece;
  std::map<int32_t, bool> special;
  for (const auto &added : root.at("added_tokens")) {
    auto id = added.at("id").get<int32_t>();
    byId[id] = added.at("content").get<std::string>();
    special[id] = added.at("special").get<bool>();
  }
  TokenizerConfig config;
  config.model = TokenizerModel::Bpe;
  std::string unk = model.value("unk_token", "");
  config.unkId = -1;
  for (auto &[id, piece] : byId) {
    EXPECT_EQ(id, static_cast<int32_t>(config.pieces.size())) << "vocab gap";
    int32_t type = 1;
    if (piece == unk) {
      type = 2;
      config.unkId = id;
    } else if (special.count(id) && special[id]) {
      type = 3;
    } else if (isBytePiece(piece)) {
      type = 6;
    }
    config.pieces.push_back(piece);
    config.scores.push_back(0.0f);
    config.types.push_back(type);
  }
  for (const auto &merge : model.at("merges")) {
    if (merge.is_string())
      config.merges.push_back(merge.get<std::string>());
    else
      config.merges.push_back(merge[0].get<std::string>() + " " +
                              merge[1].get<std::string>());
  }
  config.bosId = bosId;
  config.eosId = eosId;
  config.addBos = true;
  config.addDummyPrefix = true;
  config.byteFallback = model.value("byte_fallback", false);
  return config;
}

nlohmann::json toKilnJson(const TokenizerConfig &config) {
  nlohmann::json hex = nlohmann::json::array();
  for (const std::string &piece : config.pieces) {
    std::string h;
    for (unsigned char c : piece) {
      char buf[3];
      std::snprintf(buf, sizeof(buf), "%02x", c);
      h += buf;
    }
    hex.push_back(h);
  }
  return {
      {"format", "kiln-tokenizer"},
      {"version", 1},
      {"model", config.model == TokenizerModel::Spm ? "spm" : "bpe"},
      {"pieces_hex", hex},
      {"scores", config.scores},
      {"types", config.types},
      {"merges", config.merges},
      {"bos_id", config.bosId},
      {"eos_id", config.eosId},
      {"unk_id", config.unkId},
      {"add_bos", config.addBos},
      {"add_dummy_prefix", config.addDummyPrefix},
      {"dummy_prefix_unless_space", config.dummyPrefixUnlessSpace},
      {"byte_fallback", config.byteFallback},
      {"fuse_unk", config.fuseUnk},
  };
}

std::vector<int32_t> naiveSpmEncode(const TokenizerConfig &config,
                                    const std::string &text, bool addBos) {
  // Lookup over normal/user-defined pieces only, first id wins; a symbol's
  // string is its piece, so byte-fallback symbols ("<0xXX>") never merge.
  std::map<std::string, int32_t> vocab;
  std::map<int, int32_t> byteIds;
  for (size_t i = 0; i < config.pieces.size(); ++i) {
    const std::string &p = config.pieces[i];
    if (isBytePiece(p)) {
      byteIds.emplace(std::stoi(p.substr(3, 2), nullptr, 16), i);
      continue;
    }
    if (config.types[i] == 1 || config.types[i] == 4)
      vocab.emplace(p, static_cast<int32_t>(i));
  }
  std::vector<int32_t> tokens;
  std::vector<std::string> strs;
  if (addBos)
    tokens.push_back(config.bosId);
  std::string norm;
  if (!text.empty() && config.addDummyPrefix)
    norm += kSpaceMarker;
  for (char c : text) {
    if (c == ' ')
      norm += kSpaceMarker;
    else
      norm.push_back(c);
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < norm.size();) {
    size_t len = 1;
    while (i + len < norm.size() && (norm[i + len] & 0xc0) == 0x80 && len < 4)
      ++len;
    std::string cp = norm.substr(i, len);
    auto it = vocab.find(cp);
    if (it != vocab.end()) {
      ids.push_back(it->second);
      strs.push_back(cp);
    } else {
      for (unsigned char b : cp) {
        auto bt = byteIds.find(b);
        ids.push_back(bt != byteIds.end() ? bt->second : config.unkId);
        strs.push_back("\x01<byte>"); // never part of a piece
      }
    }
    i += len;
  }
  while (true) {
    float bestScore = -1e10f;
    int32_t bestId = -1;
    size_t bestIdx = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      auto it = vocab.find(strs[i] + strs[i + 1]);
      if (it != vocab.end() && config.scores[it->second] > bestScore) {
        bestScore = config.scores[it->second];
        bestId = it->second;
        bestIdx = i;
      }
    }
    if (bestId < 0)
      break;
    ids[bestIdx] = bestId;
    strs[bestIdx] += strs[bestIdx + 1];
    ids.erase(ids.begin() + bestIdx + 1);
    strs.erase(strs.begin() + bestIdx + 1);
  }
  tokens.insert(tokens.end(), ids.begin(), ids.end());
  return tokens;
}

std::vector<int32_t> naiveBpeEncode(const TokenizerConfig &config,
                                    const std::string &text, bool addBos) {
  std::map<std::string, int32_t> vocab, rank;
  for (size_t i = 0; i < config.pieces.size(); ++i)
    vocab.emplace(config.pieces[i], static_cast<int32_t>(i));
  for (size_t r = 0; r < config.merges.size(); ++r)
    rank.emplace(config.merges[r], static_cast<int32_t>(r));
  std::string norm;
  if (!text.empty() && config.addDummyPrefix)
    norm += kSpaceMarker;
  for (char c : text) {
    if (c == ' ')
      norm += kSpaceMarker;
    else
      norm.push_back(c);
  }
  std::vector<std::string> syms;
  for (size_t i = 0; i < norm.size();) {
    size_t len = 1;
    while (i + len < norm.size() && (norm[i + len] & 0xc0) == 0x80 && len < 4)
      ++len;
    syms.push_back(norm.substr(i, len));
    i += len;
  }
  while (true) {
    int32_t best = -1;
    size_t bestIdx = 0;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      auto it = rank.find(syms[i] + " " + syms[i + 1]);
      if (it != rank.end() && (best < 0 || it->second < best)) {
        best = it->second;
        bestIdx = i;
      }
    }
    if (best < 0)
      break;
    syms[bestIdx] += syms[bestIdx + 1];
    syms.erase(syms.begin() + bestIdx + 1);
  }
  std::vector<int32_t> ids;
  if (addBos)
    ids.push_back(config.bosId);
  for (const std::string &s : syms) {
    auto it = vocab.find(s);
    ids.push_back(it == vocab.end() ? config.unkId : it->second);
  }
  return ids;
}

} // namespace kiln::rt::test

//===- PreTokenizer.cpp - Regex pre-tokenizer and GPT-2 byte alphabet -----===//

#include "PreTokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

namespace kiln::rt {

namespace {
/// Frees a pcre2_match_data block on scope exit.
struct MatchData {
  pcre2_match_data *data = pcre2_match_data_create(1, nullptr);
  ~MatchData() { pcre2_match_data_free(data); }
};
} // namespace

bool RegexSplitter::create(const std::vector<std::string> &patterns,
                           std::shared_ptr<const RegexSplitter> &out,
                           std::string &error) {
  std::shared_ptr<RegexSplitter> splitter(new RegexSplitter());
  for (size_t i = 0; i < patterns.size(); ++i) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code *re = pcre2_compile(
        reinterpret_cast<PCRE2_SPTR>(patterns[i].data()), patterns[i].size(),
        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &offset,
        nullptr);
    if (!re) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(code, message, sizeof(message));
      error = "pattern " + std::to_string(i) + ": " +
              reinterpret_cast<const char *>(message) + " at offset " +
              std::to_string(offset);
      return false;
    }
    // JIT is an optimisation: without it (unsupported CPU, no executable
    // memory) the interpreter gives the same matches.
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    splitter->codes_.push_back(re);
  }
  out = std::move(splitter);
  return true;
}

RegexSplitter::~RegexSplitter() {
  for (void *c : codes_)
    pcre2_code_free(static_cast<pcre2_code *>(c));
}

/// Byte length of the UTF-8 sequence led by `lead` (1 for an invalid lead).
static size_t leadLength(unsigned char lead) {
  return lead < 0xc0 ? 1 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
}

void RegexSplitter::splitOne(
    size_t pattern, std::string_view text, size_t base,
    std::vector<std::pair<size_t, size_t>> &out) const {
  auto *re = static_cast<const pcre2_code *>(codes_[pattern]);
  MatchData md;
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;  // where the next search starts
  size_t last = 0; // end of the last range emitted
  while (pos < text.size() && md.data) {
    int rc = pcre2_match(re, subject, text.size(), pos, 0, md.data, nullptr);
    // The JIT's fixed stack can run out where the interpreter (heap
    // frames) does not: retry without it before giving up.
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
      rc = pcre2_match(re, subject, text.size(), pos, PCRE2_NO_JIT, md.data,
                       nullptr);
    if (rc < 0)
      break; // no match (or a match error): the rest is one range
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md.data);
    size_t start = ov[0], end = ov[1];
    if (end <= start || start < pos || end > text.size()) {
      // An empty match splits nothing: search again one character on.
      pos += std::min(leadLength(static_cast<unsigned char>(text[pos])),
                      text.size() - pos);
      continue;
    }
    if (start > last)
      out.emplace_back(base + last, start - last);
    out.emplace_back(base + start, end - start);
    last = pos = end;
  }
  if (last < text.size())
    out.emplace_back(base + last, text.size() - last);
}

void RegexSplitter::split(std::string_view text,
                          std::vector<std::pair<size_t, size_t>> &out) const {
  if (text.empty())
    return;
  std::vector<std::pair<size_t, size_t>> ranges{{0, text.size()}}, next;
  for (size_t p = 0; p < codes_.size(); ++p) {
    next.clear();
    for (auto [off, len] : ranges)
      splitOne(p, text.substr(off, len), off, next);
    ranges.swap(next);
  }
  out.insert(out.end(), ranges.begin(), ranges.end());
}

//===----------------------------------------------------------------------===//
// GPT-2 byte alphabet
//===----------------------------------------------------------------------===//

/// Bytes that stand for themselves: printable Latin-1 except the soft hyphen.
static bool isSelfMapped(unsigned b) {
  return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) ||
         (b >= 0xae && b <= 0xff);
}

namespace {
struct ByteTables {
  uint32_t toUnicode[256];
  int16_t fromUnicode[324]; // code points below 256 + 68
  ByteTables() {
    unsigned extra = 0;
    for (int i = 0; i < 324; ++i)
      fromUnicode[i] = -1;
    for (unsigned b = 0; b < 256; ++b) {
      toUnicode[b] = isSelfMapped(b) ? b : 256 + extra++;
      fromUnicode[toUnicode[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteTables &byteTables() {
  static const ByteTables tables;
  return tables;
}
} // namespace

uint32_t byteToUnicode(uint8_t byte) { return byteTables().toUnicode[byte]; }

int unicodeToByte(uint32_t codePoint) {
  return codePoint < 324 ? byteTables().fromUnicode[codePoint] : -1;
}

void appendUtf8(uint32_t cp, std::string &out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

} // namespace kiln::rt
